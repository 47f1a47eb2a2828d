//! The worker-fleet model (`--scenario workers`): how long a worker works on a message
//! (`--work-time`), whether it crashes before deleting it (`--crash-rate`), and how it backs off
//! on an empty queue (`--poll-backoff`). Pure: the accounting draws from these with a lane's own
//! generator, so a run with the same seed makes the same decisions.
//!
//! Crashes are decided by a hash of (message ID, dequeue count, seed), not by a lane's
//! generator: any worker that receives a message again can then tell whether the delivery
//! before it was abandoned by a crash, and so why the message came back, without the workers
//! (on different cores, or in different processes) telling each other anything.

use azq::random::{mix64, SplitMix64};

use crate::schedule::{unit, NANOSECONDS_PER_SECOND};
use crate::units::parse_duration_ns;

/// The longest work time a worker may be given for one message.
pub const WORK_TIME_NS_MAX: u64 = 3_600 * NANOSECONDS_PER_SECOND;
/// The standard normal quantile of 0.99: a log-normal's p99 is `p50 × e^(σ × Z_99)`.
const Z_99: f64 = 2.326_347_874_040_841;

/// How long one message takes to process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WorkTime {
    /// Always the same.
    Fixed { ns: u64 },
    /// Uniform between two times.
    Uniform { low_ns: u64, high_ns: u64 },
    /// Log-normal with the given median and 99th percentile (service times usually are).
    LogNormal { p50_ns: u64, p99_ns: u64 },
    /// Exponential with the given mean: memoryless, the work time for which queueing theory
    /// has exact answers (Erlang C), so a run can be checked against them.
    Exponential { mean_ns: u64 },
}

impl WorkTime {
    /// Parses `20ms`, `10ms..50ms`, `lognormal:p50=20ms,p99=200ms` or `exp:mean=20ms`.
    pub fn parse(text: &str) -> Result<WorkTime, String> {
        let flag = "--work-time";
        let work = if let Some(parameters) = text.strip_prefix("exp:") {
            match parameters.split_once('=') {
                Some(("mean", value)) => match parse_duration_ns(flag, value)? {
                    0 => return Err(format!("{flag} {text}: needs a mean above 0")),
                    mean_ns => WorkTime::Exponential { mean_ns },
                },
                _ => return Err(format!("{flag} {text}: expected exp:mean=T")),
            }
        } else if let Some(parameters) = text.strip_prefix("lognormal:") {
            let (mut p50_ns, mut p99_ns) = (None, None);
            for parameter in parameters.split(',') {
                match parameter.split_once('=') {
                    Some(("p50", value)) => p50_ns = Some(parse_duration_ns(flag, value)?),
                    Some(("p99", value)) => p99_ns = Some(parse_duration_ns(flag, value)?),
                    _ => return Err(format!("{flag} {text}: expected lognormal:p50=T,p99=T")),
                }
            }
            match (p50_ns, p99_ns) {
                (Some(p50_ns), Some(p99_ns)) if p50_ns > 0 && p99_ns >= p50_ns => {
                    WorkTime::LogNormal { p50_ns, p99_ns }
                }
                _ => return Err(format!("{flag} {text}: needs 0 < p50 <= p99")),
            }
        } else if let Some((low, high)) = text.split_once("..") {
            let (low_ns, high_ns) = (
                parse_duration_ns(flag, low)?,
                parse_duration_ns(flag, high)?,
            );
            if low_ns > high_ns {
                return Err(format!("{flag} {text}: the range is empty"));
            }
            WorkTime::Uniform { low_ns, high_ns }
        } else {
            WorkTime::Fixed {
                ns: parse_duration_ns(flag, text)?,
            }
        };
        let longest_ns = match work {
            WorkTime::Fixed { ns } => ns,
            WorkTime::Uniform { high_ns, .. } => high_ns,
            WorkTime::LogNormal { p99_ns, .. } => p99_ns,
            WorkTime::Exponential { mean_ns } => mean_ns,
        };
        if longest_ns > WORK_TIME_NS_MAX {
            return Err(format!("{flag} {text}: at most one hour"));
        }
        Ok(work)
    }

    /// One work time, drawn with `random`; at most `WORK_TIME_NS_MAX`.
    pub fn sample_ns(&self, random: &mut SplitMix64) -> u64 {
        match *self {
            WorkTime::Fixed { ns } => ns,
            WorkTime::Uniform { low_ns, high_ns } => {
                low_ns + (unit(random) * (high_ns - low_ns) as f64) as u64
            }
            WorkTime::LogNormal { p50_ns, p99_ns } => {
                let sigma = (p99_ns as f64 / p50_ns as f64).ln() / Z_99;
                // Box-Muller: a standard normal from two uniforms (the first kept off zero).
                let first = 1.0 - unit(random);
                let second = unit(random);
                let normal = (-2.0 * first.ln()).sqrt() * (std::f64::consts::TAU * second).cos();
                let sample = p50_ns as f64 * (sigma * normal).exp();
                (sample as u64).min(WORK_TIME_NS_MAX)
            }
            WorkTime::Exponential { mean_ns } => {
                // Inverse transform sampling, as the Poisson schedule's gaps.
                let sample = -(1.0 - unit(random)).ln() * mean_ns as f64;
                (sample as u64).min(WORK_TIME_NS_MAX)
            }
        }
    }
}

impl std::fmt::Display for WorkTime {
    /// The `--work-time` spelling, in milliseconds.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        match *self {
            WorkTime::Fixed { ns } => write!(formatter, "{}ms", ms(ns)),
            WorkTime::Uniform { low_ns, high_ns } => {
                write!(formatter, "{}ms..{}ms", ms(low_ns), ms(high_ns))
            }
            WorkTime::LogNormal { p50_ns, p99_ns } => write!(
                formatter,
                "lognormal:p50={}ms,p99={}ms",
                ms(p50_ns),
                ms(p99_ns)
            ),
            WorkTime::Exponential { mean_ns } => write!(formatter, "exp:mean={}ms", ms(mean_ns)),
        }
    }
}

/// What the workers of a run do besides getting and deleting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkerPlan {
    pub work_time: WorkTime,
    /// Share of deliveries a worker abandons undeleted after working on them (0..=1).
    pub crash_ratio: f64,
    /// The first pause after an empty Get; it doubles with every empty Get after that.
    pub poll_backoff_min_ns: u64,
    /// The longest pause between two Gets of an idle worker.
    pub poll_backoff_max_ns: u64,
}

impl WorkerPlan {
    /// The pause after an empty Get that followed a pause of `backoff_ns` (0: none yet).
    pub fn next_backoff_ns(&self, backoff_ns: u64) -> u64 {
        if backoff_ns == 0 {
            self.poll_backoff_min_ns
        } else {
            backoff_ns
                .saturating_mul(2)
                .clamp(self.poll_backoff_min_ns, self.poll_backoff_max_ns)
        }
    }
}

/// Parses `--poll-backoff MIN..MAX`.
pub fn parse_poll_backoff(text: &str) -> Result<(u64, u64), String> {
    let flag = "--poll-backoff";
    let (low, high) = text
        .split_once("..")
        .ok_or_else(|| format!("{flag} {text}: expected MIN..MAX, e.g. 100ms..10s"))?;
    let (low_ns, high_ns) = (
        parse_duration_ns(flag, low)?,
        parse_duration_ns(flag, high)?,
    );
    if low_ns == 0 || low_ns > high_ns {
        return Err(format!("{flag} {text}: needs 0 < MIN <= MAX"));
    }
    Ok((low_ns, high_ns))
}

/// Whether the worker that receives delivery `dequeue_count` of `message_id` crashes before
/// deleting it, in the run seeded with `seed`: the same answer on every core and machine.
pub fn crashes(message_id: &[u8], dequeue_count: u32, seed: u64, crash_ratio: f64) -> bool {
    if crash_ratio <= 0.0 {
        return false;
    }
    // FNV-1a over the ID, then SplitMix's finaliser over it, the delivery and the seed.
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for &byte in message_id {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3);
    }
    let mixed = mix64(hash ^ mix64(seed ^ u64::from(dequeue_count)));
    let unit = (mixed >> 11) as f64 / (1u64 << 53) as f64;
    unit < crash_ratio
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn work_times_parse() {
        assert_eq!(WorkTime::parse("20ms"), Ok(WorkTime::Fixed { ns: 20 * MS }));
        assert_eq!(
            WorkTime::parse("10ms..50ms"),
            Ok(WorkTime::Uniform {
                low_ns: 10 * MS,
                high_ns: 50 * MS
            })
        );
        assert_eq!(
            WorkTime::parse("lognormal:p50=20ms,p99=200ms"),
            Ok(WorkTime::LogNormal {
                p50_ns: 20 * MS,
                p99_ns: 200 * MS
            })
        );
        for bad in [
            "fast",
            "50ms..10ms",
            "lognormal:p50=20ms",
            "lognormal:p50=200ms,p99=20ms",
            "lognormal:p50=0ms,p99=1s",
            "2h",
            "exp:mean=0ms",
            "exp:p50=20ms",
            "exp:mean=2h",
        ] {
            assert!(WorkTime::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn work_times_print_as_they_parse() {
        for text in [
            "20ms",
            "10ms..50.5ms",
            "lognormal:p50=20ms,p99=200ms",
            "exp:mean=2.5ms",
        ] {
            let work = WorkTime::parse(text).unwrap();
            assert_eq!(work.to_string(), text);
            assert_eq!(WorkTime::parse(&work.to_string()), Ok(work));
        }
    }

    #[test]
    fn samples_follow_their_distribution() {
        let mut random = SplitMix64::new(3);
        assert_eq!(WorkTime::Fixed { ns: 5 }.sample_ns(&mut random), 5);
        let uniform = WorkTime::Uniform {
            low_ns: 10,
            high_ns: 20,
        };
        for _ in 0..1000 {
            assert!((10..=20).contains(&uniform.sample_ns(&mut random)));
        }
        let log_normal = WorkTime::LogNormal {
            p50_ns: 20 * MS,
            p99_ns: 200 * MS,
        };
        let mut samples: Vec<u64> = (0..100_000)
            .map(|_| log_normal.sample_ns(&mut random))
            .collect();
        samples.sort_unstable();
        let p50 = samples[50_000] as f64 / MS as f64;
        let p99 = samples[99_000] as f64 / MS as f64;
        assert!((19.0..21.0).contains(&p50), "p50 {p50} ms");
        assert!((185.0..215.0).contains(&p99), "p99 {p99} ms");
        assert_eq!(
            WorkTime::parse("exp:mean=20ms"),
            Ok(WorkTime::Exponential { mean_ns: 20 * MS })
        );
        let exponential = WorkTime::Exponential { mean_ns: 20 * MS };
        let mut samples: Vec<u64> = (0..100_000)
            .map(|_| exponential.sample_ns(&mut random))
            .collect();
        let mean = samples.iter().sum::<u64>() as f64 / samples.len() as f64 / MS as f64;
        // The standard error of the mean of 100,000 exponential samples is 0.3% of the mean.
        assert!((19.8..20.2).contains(&mean), "mean {mean} ms");
        samples.sort_unstable();
        // An exponential's median is ln 2 of its mean, and its p99 ln 100 of it.
        let p50 = samples[50_000] as f64 / MS as f64;
        let p99 = samples[99_000] as f64 / MS as f64;
        assert!((13.6..14.1).contains(&p50), "p50 {p50} ms");
        assert!((88.5..95.7).contains(&p99), "p99 {p99} ms");
    }

    #[test]
    fn backoff_doubles_from_the_minimum_to_the_maximum() {
        let plan = WorkerPlan {
            work_time: WorkTime::Fixed { ns: 0 },
            crash_ratio: 0.0,
            poll_backoff_min_ns: 10,
            poll_backoff_max_ns: 50,
        };
        let mut backoff = 0;
        let mut seen = Vec::new();
        for _ in 0..5 {
            backoff = plan.next_backoff_ns(backoff);
            seen.push(backoff);
        }
        assert_eq!(seen, vec![10, 20, 40, 50, 50]);
        assert_eq!(
            parse_poll_backoff("100ms..10s"),
            Ok((100 * MS, 10_000 * MS))
        );
        assert!(parse_poll_backoff("1s").is_err());
        assert!(parse_poll_backoff("0s..1s").is_err());
        assert!(parse_poll_backoff("2s..1s").is_err());
    }

    #[test]
    fn crashes_are_a_function_of_the_delivery_with_the_asked_share() {
        assert!(!crashes(b"id", 1, 7, 0.0));
        assert!(crashes(b"id", 1, 7, 1.0));
        let crashed = (0..20_000u32)
            .filter(|index| crashes(format!("message-{index}").as_bytes(), 1, 7, 0.25))
            .count();
        assert!((4_700..5_300).contains(&crashed), "{crashed}");
        // The same delivery always gets the same answer; another delivery or seed may not.
        let decisions = |seed: u64, dequeue_count: u32| -> Vec<bool> {
            (0..64u32)
                .map(|index| crashes(&index.to_le_bytes(), dequeue_count, seed, 0.5))
                .collect()
        };
        assert_eq!(decisions(1, 1), decisions(1, 1));
        assert_ne!(decisions(1, 1), decisions(1, 2));
        assert_ne!(decisions(1, 1), decisions(2, 1));
    }
}
