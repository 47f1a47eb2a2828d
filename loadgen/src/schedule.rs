//! When each request should go out, and how its latency is counted.
//!
//! A closed loop sends a lane's next request as soon as the previous one answers; an open loop
//! gives every lane a schedule of intended send times (constant gaps, or exponential gaps for
//! Poisson arrivals) that does not wait for the server. In an open loop a slow answer delays the
//! requests behind it on the same lane, and latency measured from the actual send time would hide
//! that delay: this is coordinated omission. As in wrk2, the corrected latency is measured from the
//! intended send time; the uncorrected one from the actual send time is reported beside it.
//!
//! Everything here is pure arithmetic on nanosecond instants, so the bookkeeping is tested
//! against hand-computed schedules without a clock or a network.

use std::sync::Arc;

use azq::random::{mix64, SplitMix64};

use crate::shape::{RateProfile, Shape};

/// Nanoseconds in one second.
pub const NANOSECONDS_PER_SECOND: u64 = 1_000_000_000;

/// How an open loop spaces the intended send times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Equal gaps: `1 / rate`.
    Constant,
    /// Exponentially distributed gaps with mean `1 / rate`: a Poisson process, the arrival
    /// pattern of many independent clients.
    Poisson,
}

/// Closed or open loop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LoadModel {
    /// Each lane sends its next request when the last one answers: maximum throughput.
    Closed,
    /// Requests are started at `rate_per_s` in total, whatever the server does.
    Open { rate_per_s: f64, arrival: Arrival },
}

/// A shaped open loop (`--shape`) in run time, shared by its lanes: the shape's rates with the
/// warm-up run at its first rate, or a trace's instants (in nanoseconds of run time, the
/// warm-up empty).
#[derive(Clone, Debug, PartialEq)]
pub enum RunShape {
    Rates(RateProfile),
    Instants(Vec<u64>),
}

impl RunShape {
    /// `shape` after `warmup_ns` of warm-up.
    pub fn new(shape: &Shape, warmup_ns: u64) -> RunShape {
        let warmup_s = warmup_ns as f64 / NANOSECONDS_PER_SECOND as f64;
        match shape {
            Shape::Rates { profile, .. } => RunShape::Rates(profile.delayed(warmup_s)),
            Shape::Arrivals { times_s } => RunShape::Instants(
                times_s
                    .iter()
                    .map(|&time| warmup_ns + (time * NANOSECONDS_PER_SECOND as f64) as u64)
                    .collect(),
            ),
        }
    }

    /// The highest rate: for a trace of instants, the most starts in any one second.
    pub fn peak_rate_per_s(&self) -> f64 {
        match self {
            RunShape::Rates(profile) => profile.peak_rate_per_s(),
            RunShape::Instants(instants) => {
                let mut peak = 0;
                let mut first = 0;
                for (last, &instant) in instants.iter().enumerate() {
                    while instants[first] + NANOSECONDS_PER_SECOND <= instant {
                        first += 1;
                    }
                    peak = peak.max(last + 1 - first);
                }
                peak as f64
            }
        }
    }
}

/// Where a shaped lane is in its shape: how many arrivals the shape expects before the lane's
/// next start (for a rate), or the index of its next instant.
#[derive(Clone, Debug)]
struct ShapedPosition {
    shape: Arc<RunShape>,
    /// Expected arrivals over all lanes, or the index of the next instant.
    arrivals: f64,
}

/// The intended start times of one lane's requests in an open loop.
///
/// The total rate is split evenly over the lanes; constant arrivals are staggered so that the
/// lanes together send at even gaps rather than in bursts of one request per lane.
#[derive(Clone, Debug)]
pub struct Pacer {
    arrival: Arrival,
    /// Mean gap between two starts on this lane.
    gap_ns: f64,
    /// The intended time of the next start, as a fraction so that rounding does not drift.
    next_ns: f64,
    /// Randomness for Poisson gaps: seeded per lane, so runs are repeatable.
    random: SplitMix64,
    /// Lanes sharing the rate.
    lanes: usize,
    /// In a shaped run, the shape and the lane's place in it (`next_ns` follows from them).
    shaped: Option<ShapedPosition>,
}

impl Pacer {
    /// The pacer of lane `lane_index` out of `lanes`, for `rate_per_s` over all lanes, with the
    /// schedule starting at `start_ns`.
    pub fn new(
        rate_per_s: f64,
        arrival: Arrival,
        lanes: usize,
        lane_index: usize,
        start_ns: u64,
        seed: u64,
    ) -> Pacer {
        assert!(rate_per_s > 0.0 && lanes > 0 && lane_index < lanes);
        let gap_ns = NANOSECONDS_PER_SECOND as f64 * lanes as f64 / rate_per_s;
        let mut pacer = Pacer {
            arrival,
            gap_ns,
            next_ns: start_ns as f64,
            random: lane_random(seed, lane_index),
            lanes,
            shaped: None,
        };
        match arrival {
            // Lane k starts k overall gaps after lane 0.
            Arrival::Constant => pacer.next_ns += gap_ns * lane_index as f64 / lanes as f64,
            Arrival::Poisson => pacer.next_ns += pacer.poisson_gap_ns(),
        }
        pacer
    }

    /// The pacer of lane `lane_index` out of `lanes` following `shape` (in run time): the
    /// shape's rate is split evenly over the lanes as a constant rate is. Constant arrivals
    /// start when the shape expects the lane's turn among all arrivals (the lanes interleave);
    /// Poisson ones are a Poisson process of the shape's rate (exponential gaps in expected
    /// arrivals, mapped to time through the shape); a trace's instants go to the lanes in turn.
    pub fn shaped(
        shape: Arc<RunShape>,
        arrival: Arrival,
        lanes: usize,
        lane_index: usize,
        seed: u64,
    ) -> Pacer {
        assert!(lanes > 0 && lane_index < lanes);
        let mut pacer = Pacer {
            arrival,
            gap_ns: 0.0,
            next_ns: 0.0,
            random: lane_random(seed, lane_index),
            lanes,
            shaped: None,
        };
        let arrivals = match (&*shape, arrival) {
            (RunShape::Rates(_), Arrival::Poisson) => pacer.poisson_arrivals(),
            _ => lane_index as f64,
        };
        pacer.shaped = Some(ShapedPosition { shape, arrivals });
        pacer.place();
        pacer
    }

    /// The intended send time of the next request (`u64::MAX`: the shape has no more).
    pub fn intended_ns(&self) -> u64 {
        self.next_ns as u64
    }

    /// Moves to the following intended time, once the current one has been used.
    pub fn advance(&mut self) {
        if self.shaped.is_some() {
            let step = match (
                self.shaped.as_ref().map(|position| &*position.shape),
                self.arrival,
            ) {
                (Some(RunShape::Rates(_)), Arrival::Poisson) => self.poisson_arrivals(),
                _ => self.lanes as f64,
            };
            if let Some(position) = self.shaped.as_mut() {
                position.arrivals += step;
            }
            self.place();
            return;
        }
        self.next_ns += match self.arrival {
            Arrival::Constant => self.gap_ns,
            Arrival::Poisson => self.poisson_gap_ns(),
        };
    }

    /// Sets `next_ns` from a shaped lane's position.
    fn place(&mut self) {
        let Some(position) = &self.shaped else {
            return;
        };
        self.next_ns = match &*position.shape {
            RunShape::Rates(profile) => profile
                .time_of(position.arrivals)
                .map_or(u64::MAX as f64, |time_s| {
                    (time_s * NANOSECONDS_PER_SECOND as f64).min(u64::MAX as f64)
                }),
            RunShape::Instants(instants) => instants
                .get(position.arrivals as usize)
                .map_or(u64::MAX as f64, |&instant| instant as f64),
        };
    }

    /// An exponential gap of mean `lanes` in expected arrivals: this lane's share of a Poisson
    /// process.
    fn poisson_arrivals(&mut self) -> f64 {
        -(1.0 - unit(&mut self.random)).ln() * self.lanes as f64
    }

    fn poisson_gap_ns(&mut self) -> f64 {
        // Inverse transform sampling: -ln(U) is exponential with mean 1 for U uniform in (0, 1].
        -(1.0 - unit(&mut self.random)).ln() * self.gap_ns
    }
}

/// The generator of lane `lane_index` in a run seeded with `seed`: each lane draws its own
/// repeatable sequence (Poisson gaps, retry jitter, work times).
pub fn lane_random(seed: u64, lane_index: usize) -> SplitMix64 {
    SplitMix64::new(seed ^ mix64(lane_index as u64))
}

/// A uniform value in [0, 1) from `random`, with 53 bits of precision.
pub fn unit(random: &mut SplitMix64) -> f64 {
    (random.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The instants of one request, in nanoseconds since the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// When the schedule wanted it sent. In a closed loop, and for a request that follows another
    /// (a Delete after its Get), this is when the lane became free.
    pub intended_ns: u64,
    /// When the lane became free to send it (the previous answer arrived, or the run started).
    pub ready_ns: u64,
    /// When its bytes were handed to the socket.
    pub sent_ns: u64,
    /// When its complete answer had been read.
    pub received_ns: u64,
}

impl Timing {
    /// Latency from the intended send time: what a user of a service with this arrival pattern
    /// would see. Rounded up to whole microseconds, so that rounding never flatters.
    pub fn corrected_latency_us(&self) -> u64 {
        nanoseconds_to_microseconds_rounded_up(self.received_ns.saturating_sub(self.intended_ns))
    }

    /// Latency from the actual send time: the service time of this one request.
    pub fn uncorrected_latency_us(&self) -> u64 {
        nanoseconds_to_microseconds_rounded_up(self.received_ns.saturating_sub(self.sent_ns))
    }

    /// How long the client itself took to send a request it was free and scheduled to send: the
    /// load generator's own saturation. Time spent waiting for a busy lane is the server's doing
    /// and is not counted here (it is in the corrected latency).
    pub fn send_lag_us(&self) -> u64 {
        let could_send_ns = self.intended_ns.max(self.ready_ns);
        nanoseconds_to_microseconds_rounded_up(self.sent_ns.saturating_sub(could_send_ns))
    }
}

/// `nanoseconds` in whole microseconds, rounded up.
pub fn nanoseconds_to_microseconds_rounded_up(nanoseconds: u64) -> u64 {
    nanoseconds.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// One lane at 1,000 requests/s (a start every 1 ms) whose second request stalls for 5 ms.
    /// The requests scheduled during the stall go out late, back to back; by hand:
    ///
    /// | # | intended | sent  | service | received | corrected | uncorrected |
    /// |---|----------|-------|---------|----------|-----------|-------------|
    /// | 0 | 0        | 0     | 0.1     | 0.1      | 0.1       | 0.1         |
    /// | 1 | 1        | 1     | 5.0     | 6.0      | 5.0       | 5.0         |
    /// | 2 | 2        | 6.0   | 0.1     | 6.1      | 4.1       | 0.1         |
    /// | 3 | 3        | 6.1   | 0.1     | 6.2      | 3.2       | 0.1         |
    /// | 4 | 4        | 6.2   | 0.1     | 6.3      | 2.3       | 0.1         |
    /// | 5 | 5        | 6.3   | 0.1     | 6.4      | 1.4       | 0.1         |
    /// | 6 | 6        | 6.4   | 0.1     | 6.5      | 0.5       | 0.1         |
    /// | 7 | 7        | 7     | 0.1     | 7.1      | 0.1       | 0.1         |
    ///
    /// (milliseconds). Without correction the stall shows as one slow request out of eight; with
    /// it, five requests saw more than a millisecond.
    #[test]
    fn coordinated_omission_correction_matches_a_hand_computed_schedule() {
        let service_ns = [
            100_000,
            5 * MS,
            100_000,
            100_000,
            100_000,
            100_000,
            100_000,
            100_000,
        ];
        let expected_corrected_us = [100, 5000, 4100, 3200, 2300, 1400, 500, 100];
        let expected_sent_ns = [
            0,
            MS,
            6 * MS,
            6_100_000,
            6_200_000,
            6_300_000,
            6_400_000,
            7 * MS,
        ];
        let mut pacer = Pacer::new(1000.0, Arrival::Constant, 1, 0, 0, 1);
        let mut ready_ns = 0;
        for (index, service) in service_ns.into_iter().enumerate() {
            let intended_ns = pacer.intended_ns();
            pacer.advance();
            // The engine's rule: a lane sends when it is free and the intended time has come.
            let sent_ns = intended_ns.max(ready_ns);
            let timing = Timing {
                intended_ns,
                ready_ns,
                sent_ns,
                received_ns: sent_ns + service,
            };
            ready_ns = timing.received_ns;
            assert_eq!(sent_ns, expected_sent_ns[index], "request {index}");
            assert_eq!(
                timing.corrected_latency_us(),
                expected_corrected_us[index],
                "request {index}"
            );
            assert_eq!(timing.uncorrected_latency_us(), service / 1000);
            // The client sent each request the moment it could: no saturation of its own.
            assert_eq!(timing.send_lag_us(), 0);
        }
    }

    #[test]
    fn send_lag_counts_only_the_clients_own_delay() {
        let timing = Timing {
            intended_ns: 1_000_000,
            ready_ns: 3_000_000,
            sent_ns: 3_000_250,
            received_ns: 3_100_000,
        };
        // Waiting for the busy lane (2 ms) is not the client's fault; the 250 ns after it is.
        assert_eq!(timing.send_lag_us(), 1);
        assert_eq!(timing.corrected_latency_us(), 2100);
        assert_eq!(timing.uncorrected_latency_us(), 100);
    }

    #[test]
    fn microseconds_round_up() {
        assert_eq!(nanoseconds_to_microseconds_rounded_up(0), 0);
        assert_eq!(nanoseconds_to_microseconds_rounded_up(1), 1);
        assert_eq!(nanoseconds_to_microseconds_rounded_up(1000), 1);
        assert_eq!(nanoseconds_to_microseconds_rounded_up(1001), 2);
    }

    #[test]
    fn constant_lanes_interleave_into_even_gaps() {
        // 4 lanes at 4,000/s in total: one start every 250 µs overall, 1 ms per lane.
        let mut starts: Vec<u64> = (0..4)
            .flat_map(|lane| {
                let mut pacer = Pacer::new(4000.0, Arrival::Constant, 4, lane, 10, 7);
                (0..3)
                    .map(|_| {
                        let intended = pacer.intended_ns();
                        pacer.advance();
                        intended
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        starts.sort_unstable();
        let expected: Vec<u64> = (0..12).map(|index| 10 + index * 250_000).collect();
        assert_eq!(starts, expected);
    }

    #[test]
    fn poisson_gaps_have_the_requested_mean_and_are_repeatable() {
        let run = || {
            let mut pacer = Pacer::new(10_000.0, Arrival::Poisson, 1, 0, 0, 42);
            let mut last = 0;
            let mut gaps = Vec::new();
            for _ in 0..20_000 {
                let intended = pacer.intended_ns();
                gaps.push(intended - last);
                last = intended;
                pacer.advance();
            }
            gaps
        };
        let gaps = run();
        assert_eq!(gaps, run(), "same seed, same schedule");
        let mean_ns = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
        // Mean 100 µs; the standard error over 20,000 exponential gaps is under 1%.
        assert!((mean_ns - 100_000.0).abs() < 3_000.0, "mean {mean_ns}");
        // An exponential distribution has as many gaps below 69.3% of the mean as above.
        let below_median = gaps.iter().filter(|&&gap| gap < 69_315).count();
        assert!((9_500..10_500).contains(&below_median), "{below_median}");
    }

    fn starts(pacer: &mut Pacer, until_ns: u64) -> Vec<u64> {
        let mut starts = Vec::new();
        while pacer.intended_ns() < until_ns {
            starts.push(pacer.intended_ns());
            pacer.advance();
        }
        starts
    }

    /// A step from 10/s to 40/s at 1 s of shape time, after 1 s of warm-up, over two lanes:
    /// by hand, the lanes together start every 100 ms until 2 s of run time, then every 25 ms.
    #[test]
    fn shaped_constant_lanes_follow_a_step_and_interleave() {
        let shape = Shape::parse("step:10/s,40/s@1s").unwrap();
        let shape = Arc::new(RunShape::new(&shape, NANOSECONDS_PER_SECOND));
        let mut all: Vec<u64> = (0..2)
            .flat_map(|lane| {
                let mut pacer = Pacer::shaped(shape.clone(), Arrival::Constant, 2, lane, 1);
                starts(&mut pacer, 3 * NANOSECONDS_PER_SECOND)
            })
            .collect();
        all.sort_unstable();
        let expected: Vec<u64> = (0..20)
            .map(|index| index * 100_000_000)
            .chain((0..40).map(|index| 2 * NANOSECONDS_PER_SECOND + index * 25_000_000))
            .collect();
        assert_eq!(all.len(), expected.len());
        for (actual, expected) in all.iter().zip(&expected) {
            assert!(actual.abs_diff(*expected) <= 1, "{actual} vs {expected}");
        }
    }

    #[test]
    fn shaped_poisson_arrivals_follow_the_rate_and_a_trace_is_replayed() {
        let shape = Shape::parse("step:1000/s,4000/s@5s").unwrap();
        let shape = Arc::new(RunShape::new(&shape, 0));
        let mut pacer = Pacer::shaped(shape, Arrival::Poisson, 1, 0, 9);
        let all = starts(&mut pacer, 10 * NANOSECONDS_PER_SECOND);
        let before = all
            .iter()
            .filter(|&&start| start < 5 * NANOSECONDS_PER_SECOND)
            .count();
        let after = all.len() - before;
        // Poisson counts of mean 5,000 and 20,000: within four standard deviations.
        assert!((4_717..5_283).contains(&before), "{before}");
        assert!((19_434..20_566).contains(&after), "{after}");

        let trace = Shape::Arrivals {
            times_s: vec![0.0, 0.5, 0.5, 2.0, 3.0],
        };
        let trace = Arc::new(RunShape::new(&trace, NANOSECONDS_PER_SECOND));
        let mut lane_1 = Pacer::shaped(trace, Arrival::Constant, 2, 1, 1);
        assert_eq!(
            starts(&mut lane_1, u64::MAX),
            vec![1_500_000_000, 3_000_000_000]
        );
        assert_eq!(lane_1.intended_ns(), u64::MAX);
        let trace = RunShape::new(
            &Shape::Arrivals {
                times_s: vec![0.0, 0.25, 0.25, 1.5],
            },
            0,
        );
        assert_eq!(trace.peak_rate_per_s(), 3.0);
    }
}
