//! A run's results and what they mean: the totals, the time series, the depth samples and the
//! steps of a run (`RunSummary`), with the judgements the reports make of them (rates, the
//! workers' utilisation, whether the fleet kept up). Data and arithmetic only; the text forms
//! are `table.rs`, `json.rs` and `csv.rs`.

use serde::Serialize;

use crate::autoscale::{worker_seconds, AutoscalePolicy, Decision};
use crate::metrics::{CoreUsage, LatencySummary, Measurements, OperationStats};
use crate::retry::RetryPolicy;
use crate::scenario::{Operation, Scenario};
use crate::schedule::{Arrival, LoadModel, NANOSECONDS_PER_SECOND};
use crate::steps::LatencyBound;
use crate::theory::{self, MeanEstimate, Moments, Prediction};
use crate::wire::exposition::ServerMetrics;
use crate::workers::{WorkTime, WorkerPlan};

/// What one interval of the run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelinePoint {
    /// End of the interval, in seconds since the run started (warm-up included).
    pub end_s: f64,
    /// Length of the interval: a second, or less for the last one.
    pub interval_s: f64,
    /// Answers per second, indexed by `Operation::index`.
    pub operations_per_s: [f64; 5],
    /// Error answers and lost requests per second.
    pub errors_per_s: f64,
    /// Retries per second.
    pub retries_per_s: f64,
    /// The 99th percentile of corrected latency over every operation answered in the interval.
    pub latency_p99_us: Option<u64>,
    /// The 99th percentile of end-to-end message latency in the interval.
    pub end_to_end_p99_us: Option<u64>,
    /// The target rate of the step the interval belongs to, in a stepped run; in a shaped run
    /// (`--shape`), the shape's mean rate over the interval.
    pub step_rate_per_s: Option<f64>,
    /// The waits of the messages workers took in the interval (`FleetStats::wait_ns`): the
    /// batches of the theory check's confidence interval.
    pub wait_ns: Moments,
}

impl TimelinePoint {
    /// The point of an interval of `interval_s` seconds ending at `end_s` that measured
    /// `measurements`.
    pub fn of(end_s: f64, interval_s: f64, measurements: &Measurements) -> TimelinePoint {
        let mut operations_per_s = [0.0; 5];
        let mut all = crate::metrics::new_histogram();
        let mut retries = 0;
        for operation in Operation::ALL {
            let stats = measurements.operation(operation);
            operations_per_s[operation.index()] = stats.count as f64 / interval_s;
            retries += stats.retries;
            let _ = all.add(&stats.latency_us);
        }
        let p99 = |histogram: &hdrhistogram::Histogram<u64>| {
            (!histogram.is_empty()).then(|| histogram.value_at_quantile(0.99))
        };
        TimelinePoint {
            end_s,
            interval_s,
            operations_per_s,
            errors_per_s: measurements.errors() as f64 / interval_s,
            retries_per_s: retries as f64 / interval_s,
            latency_p99_us: p99(&all),
            end_to_end_p99_us: p99(&measurements.end_to_end_us),
            step_rate_per_s: None,
            wait_ns: measurements.fleet.wait_ns,
        }
    }
}

/// The outcome of `--find-max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchOutcome {
    pub bound: LatencyBound,
    /// The highest rate that met the bound; `None` when even the lowest rate tried failed.
    pub knee_rate_per_s: Option<f64>,
}

/// A queue depth sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DepthPoint {
    /// Seconds since the run started.
    pub at_s: f64,
    /// Summed approximate message count of the run's queues.
    pub messages: u64,
}

/// The autoscaler at one moment of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalePoint {
    /// Seconds since the run started.
    pub at_s: f64,
    /// The queue length read at an evaluation; `None` where a replica turned ready.
    pub observed: Option<u64>,
    /// Replicas asked for (and paid for) after it.
    pub desired: usize,
    /// Replicas taking messages.
    pub ready: usize,
}

/// What an autoscaled run cost and how its backlog went.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoscaleOutcome {
    /// Replica-seconds asked for over the measured window: the fleet's cost, cold starts
    /// included.
    pub worker_seconds: f64,
    /// The most replicas asked for, and ready, at once.
    pub replicas_max: usize,
    pub ready_max: usize,
    /// The highest depth sampled in the measured window, and when.
    pub backlog_peak: u64,
    pub backlog_peak_at_s: f64,
    /// From the peak until the depth was first back at or below one replica's target
    /// (`queueLength`); `None` when it was not by the window's end.
    pub drain_s: Option<f64>,
}

/// The end-to-end latency against `--slo`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SloVerdict {
    pub bound: LatencyBound,
    /// The measured percentile; `None` when no message went end to end.
    pub measured_us: Option<u64>,
}

impl SloVerdict {
    pub fn met(&self) -> bool {
        self.measured_us
            .is_some_and(|measured| measured <= self.bound.bound_us)
    }
}

/// The answer a planner reads first: whether the run met its end-to-end SLO (or, without one,
/// the end-to-end p99), what the worker fleet cost, and how high the backlog rose and how long
/// it took to drain. `RunSummary::headline` makes it; the JSON's `headline`, the table's first
/// lines and the HTML report's first block show it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Headline {
    /// The end-to-end latency against `--slo`; `None` when no SLO was given.
    pub slo: Option<SloVerdict>,
    /// The 99th percentile of end-to-end latency (a put's send to the message's receipt, or to
    /// its delete's answer in a workers run); `None` when no message went end to end.
    pub end_to_end_p99_us: Option<u64>,
    /// What the worker fleet cost, in worker-seconds: an autoscaled fleet's replica-seconds
    /// asked for over the measured window (cold starts included, as
    /// `AutoscaleOutcome::worker_seconds`); a fixed fleet's workers times its active time (the
    /// measured window, or until the last answer when later, as `worker_utilisation` counts).
    /// `None` for a run without workers.
    pub worker_seconds: Option<f64>,
    /// The highest depth sampled in the measured window (in a stepped run, over every step:
    /// the steps' series share the first step's clock, while the summary's window is one
    /// step's own)…
    pub backlog_peak: Option<u64>,
    /// …and when: the first sample at that depth, in seconds of run time (warm-up included).
    /// Both `None` without a depth sample in the window.
    pub backlog_peak_at_s: Option<f64>,
    /// How long the backlog took to drain, in seconds: from the peak until the first sample
    /// of the window at or after it whose depth is back within `DRAIN_RISE_SHARE` of the rise
    /// above the level before the backlog, that level being the lowest depth sampled from the
    /// run's start (warm-up included) up to the peak, or with `--preload` zero (the backlog was
    /// put into empty queues before the run). Zero when the depth never rose above
    /// that level; `None` when it was not back by the window's end, or without a peak.
    pub drain_time_s: Option<f64>,
}

/// A time series beyond the fixed ones of `timeline` and `depth` (the autoscaler's replicas, for
/// one): what every report carries generically, so a new one needs no new drawing or writing
/// code. The JSON writes it under `series`; the SVG and the HTML report draw it over run time.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeSeries {
    /// What is measured, e.g. `replicas`; unique within a run.
    pub name: String,
    /// The values' unit, e.g. `workers`, `ms`, `per s`.
    pub unit: String,
    /// (run time in seconds, warm-up included; value), in time order.
    pub points: Vec<(f64, f64)>,
}

/// An autoscaled run's replicas over time as time series, asked for and ready, each drawn as
/// steps (a count holds from one point to the next, until `end_s`).
pub fn replica_series(scale: &[ScalePoint], end_s: f64) -> Vec<TimeSeries> {
    let steps = |count: &dyn Fn(&ScalePoint) -> usize| {
        let mut points: Vec<(f64, f64)> = Vec::with_capacity(2 * scale.len() + 1);
        for point in scale {
            if let Some(&(_, last)) = points.last() {
                points.push((point.at_s, last));
            }
            points.push((point.at_s, count(point) as f64));
        }
        if let Some(&(at_s, last)) = points.last() {
            points.push((end_s.max(at_s), last));
        }
        points
    };
    if scale.is_empty() {
        return Vec::new();
    }
    vec![
        TimeSeries {
            name: "replicas asked for".to_string(),
            unit: "workers".to_string(),
            points: steps(&|point| point.desired),
        },
        TimeSeries {
            name: "replicas ready".to_string(),
            unit: "workers".to_string(),
            points: steps(&|point| point.ready),
        },
    ]
}

/// What `--preload` found in the queues and put before the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PreloadOutcome {
    /// `--preload`: the messages each queue was filled to.
    pub target_per_queue: u64,
    /// Messages the queues held before (a resumed preload's earlier puts, or what was left).
    pub found: u64,
    /// Messages put: only what the queues lacked.
    pub put: u64,
    /// How long the puts took, in seconds.
    pub elapsed_s: f64,
}

/// What the server held at one moment of the run, scraped from its `/_azq/metrics`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerPoint {
    /// Seconds since the run started.
    pub at_s: f64,
    pub metrics: ServerMetrics,
}

/// The server's series (`server_series`), by name: memory and disk in bytes, messages counted.
pub const SERVER_RESIDENT_MEMORY_SERIES: &str = "server resident memory";
pub const SERVER_MESSAGE_BYTES_SERIES: &str = "server message bytes";
pub const SERVER_DISK_BYTES_SERIES: &str = "server disk bytes";
pub const SERVER_MESSAGES_SERIES: &str = "server messages";
pub const SERVER_SNAPSHOTS_SERIES: &str = "server snapshots running";
/// The unit of the server's memory and disk series.
pub const BYTES_UNIT: &str = "bytes";

/// The server's memory, disk and messages over time as time series, each left out when no
/// sample had it (a server without that metric).
pub fn server_series(points: &[ServerPoint]) -> Vec<TimeSeries> {
    /// One of `ServerMetrics`' fields.
    type Field = fn(&ServerMetrics) -> Option<f64>;
    let fields: [(&str, &str, Field); 5] = [
        (SERVER_RESIDENT_MEMORY_SERIES, BYTES_UNIT, |metrics| {
            metrics.resident_memory_bytes
        }),
        (SERVER_MESSAGE_BYTES_SERIES, BYTES_UNIT, |metrics| {
            metrics.message_bytes
        }),
        (SERVER_DISK_BYTES_SERIES, BYTES_UNIT, |metrics| {
            metrics.disk_bytes
        }),
        (SERVER_MESSAGES_SERIES, "messages", |metrics| {
            metrics.messages
        }),
        (SERVER_SNAPSHOTS_SERIES, "shards", |metrics| {
            metrics.snapshots_running
        }),
    ];
    fields
        .into_iter()
        .map(|(name, unit, value)| TimeSeries {
            name: name.to_string(),
            unit: unit.to_string(),
            points: points
                .iter()
                .filter_map(|point| Some((point.at_s, value(&point.metrics)?)))
                .collect(),
        })
        .filter(|series| !series.points.is_empty())
        .collect()
}

impl TimeSeries {
    /// The highest value and the first time it was reached, and the last value; `None` for an
    /// empty series.
    pub fn peak_and_final(&self) -> Option<((f64, f64), f64)> {
        let peak = self
            .points
            .iter()
            .copied()
            .fold(None, |best: Option<(f64, f64)>, point| match best {
                Some(best) if best.1 >= point.1 => Some(best),
                _ => Some(point),
            })?;
        Some((peak, self.points.last()?.1))
    }
}

/// Everything a run produced, with the settings needed to read it.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub scenario: Scenario,
    /// In a shaped run, the mean rate over the measured window.
    pub load: LoadModel,
    /// `--shape` as given.
    pub shape: Option<String>,
    pub connections: usize,
    pub pipeline: usize,
    pub cpus: Vec<usize>,
    /// The client cores' backend: `io_uring` or `portable`; `simulated` under `--simulate`.
    pub runtime: &'static str,
    /// `--simulate`: what the simulated service assumed (`SimulationPlan::describe`).
    pub simulation: Option<String>,
    pub queues: usize,
    pub message_bytes: usize,
    pub batch: u32,
    /// Consumers replaced each deleted message (`--refill`).
    pub refill: bool,
    pub warmup_s: f64,
    /// `--grace`: how long after the window an open loop still sent what it scheduled in it.
    pub grace_s: f64,
    /// The measured window: the configured duration, or for `--requests` the time until the
    /// last answer.
    pub duration_s: f64,
    /// Run time zero, in seconds since the Unix epoch.
    pub start_unix_s: f64,
    /// Run time of the last answer: chains started in the measured window finish after it.
    pub last_answer_s: f64,
    pub total: Measurements,
    /// In a stepped run, every step's intervals, on the first step's clock.
    pub timeline: Vec<TimelinePoint>,
    pub depth: Vec<DepthPoint>,
    /// `--preload`: what it found and put; `None` without one.
    pub preload: Option<PreloadOutcome>,
    /// The run's other time series (`TimeSeries`), in the order they are drawn: the
    /// autoscaler's replicas, the server's memory and disk (`server_series`).
    pub series: Vec<TimeSeries>,
    /// Per client core, when the kernel reports it.
    pub client_cores: Vec<CoreUsage>,
    pub max_error_ratio: f64,
    pub retry: Option<RetryPolicy>,
    /// For `workers`: what the workers did with each message, and how many there were.
    pub workers: Option<WorkerPlan>,
    pub worker_lanes: usize,
    /// For `workers`, warm-up included: messages beyond the first that one put stored, received
    /// by the workers (a failed try that was stored, then its retry).
    /// `None` when the texts are too short to carry the put mark.
    pub duplicates_from_retried_puts: Option<u64>,
    /// In a stepped run: every step's outcome, in the order run. The rest of the summary is
    /// the step that answers the run's question (the knee, or the last step).
    pub steps: Vec<StepResult>,
    pub search: Option<SearchOutcome>,
    /// `--autoscale`: the policy and what the autoscaler did, in time order.
    pub autoscale: Option<AutoscalePolicy>,
    pub scale: Vec<ScalePoint>,
    /// `--slo`.
    pub slo: Option<LatencyBound>,
}

impl RunSummary {
    /// The autoscaled fleet's cost, peak and drain.
    pub fn autoscale_outcome(&self) -> Option<AutoscaleOutcome> {
        let policy = self.autoscale.as_ref()?;
        let second_ns = NANOSECONDS_PER_SECOND as f64;
        let decisions: Vec<Decision> = self
            .scale
            .iter()
            .filter_map(|point| {
                point.observed.map(|observed| Decision {
                    at_ns: (point.at_s * second_ns).round() as u64,
                    observed,
                    desired: point.desired,
                })
            })
            .collect();
        let from_ns = (self.warmup_s * second_ns).round() as u64;
        let to_ns = ((self.warmup_s + self.duration_s) * second_ns).round() as u64;
        let (backlog_peak, backlog_peak_at_s) = self
            .backlog_peak()
            .map_or((0, self.warmup_s), |point| (point.messages, point.at_s));
        let drain_s = self
            .window_depth()
            .find(|point| {
                point.at_s >= backlog_peak_at_s && point.messages as f64 <= policy.queue_length
            })
            .map(|point| point.at_s - backlog_peak_at_s);
        Some(AutoscaleOutcome {
            worker_seconds: worker_seconds(&decisions, policy.min_replicas, from_ns, to_ns),
            replicas_max: self
                .scale
                .iter()
                .map(|point| point.desired)
                .max()
                .unwrap_or(policy.min_replicas),
            ready_max: self
                .scale
                .iter()
                .map(|point| point.ready)
                .max()
                .unwrap_or(0),
            backlog_peak,
            backlog_peak_at_s,
            drain_s,
        })
    }

    /// The answer a planner reads first (see `Headline` for what each number means).
    pub fn headline(&self) -> Headline {
        let peak = self.backlog_peak();
        let drain_time_s = peak.and_then(|peak| {
            // A preloaded backlog was made before the first sample: it rose from empty queues.
            let level = match self.preload {
                Some(_) => 0,
                None => self
                    .depth
                    .iter()
                    .filter(|point| point.at_s <= peak.at_s)
                    .map(|point| point.messages)
                    .min()
                    .unwrap_or(peak.messages),
            };
            let drained_at_most = level as f64 + DRAIN_RISE_SHARE * (peak.messages - level) as f64;
            self.backlog_depth()
                .find(|point| point.at_s >= peak.at_s && point.messages as f64 <= drained_at_most)
                .map(|point| point.at_s - peak.at_s)
        });
        Headline {
            slo: self.slo_verdict(),
            end_to_end_p99_us: latency_of(&self.total.end_to_end_us).map(|latency| latency.p99),
            worker_seconds: self.worker_seconds(),
            backlog_peak: peak.map(|point| point.messages),
            backlog_peak_at_s: peak.map(|point| point.at_s),
            drain_time_s,
        }
    }

    /// The depth samples of the measured window, in time order.
    fn window_depth(&self) -> impl Iterator<Item = &DepthPoint> {
        let end_s = self.warmup_s + self.duration_s;
        self.depth
            .iter()
            .filter(move |point| point.at_s >= self.warmup_s && point.at_s <= end_s)
    }

    /// The depth samples the backlog is judged on, in time order: the measured window's; in a
    /// stepped run, every step's (see `Headline::backlog_peak`).
    fn backlog_depth(&self) -> impl Iterator<Item = &DepthPoint> {
        let (from_s, to_s) = if self.steps.is_empty() {
            (self.warmup_s, self.warmup_s + self.duration_s)
        } else {
            (f64::NEG_INFINITY, f64::INFINITY)
        };
        self.depth
            .iter()
            .filter(move |point| point.at_s >= from_s && point.at_s <= to_s)
    }

    /// The first of the backlog's deepest samples.
    fn backlog_peak(&self) -> Option<&DepthPoint> {
        self.backlog_depth()
            .fold(None, |best: Option<&DepthPoint>, point| match best {
                Some(best) if best.messages >= point.messages => Some(best),
                _ => Some(point),
            })
    }

    /// The worker fleet's cost (see `Headline::worker_seconds`); `None` without workers.
    fn worker_seconds(&self) -> Option<f64> {
        self.workers?;
        Some(match self.autoscale_outcome() {
            Some(outcome) => outcome.worker_seconds,
            None => {
                let active_s = self.duration_s.max(self.last_answer_s - self.warmup_s);
                self.worker_lanes as f64 * active_s
            }
        })
    }

    /// The end-to-end latency judged against `--slo`.
    pub fn slo_verdict(&self) -> Option<SloVerdict> {
        let bound = self.slo?;
        Some(SloVerdict {
            bound,
            measured_us: latency_of(&self.total.end_to_end_us)
                .and_then(|latency| latency.percentile(bound.percentile)),
        })
    }

    /// The operations the run sent, in report order.
    pub fn operations(&self) -> &'static [Operation] {
        self.scenario.operations(self.refill)
    }

    /// Whether latency was measured from a schedule (so corrected and uncorrected differ).
    pub fn is_open_loop(&self) -> bool {
        matches!(self.load, LoadModel::Open { .. })
    }

    /// Answers per second of `stats` over the measured window.
    pub fn throughput_per_s(&self, stats: &OperationStats) -> f64 {
        self.per_s(stats.count)
    }

    /// `count` per second of the measured window (0 for an empty window).
    fn per_s(&self, count: u64) -> f64 {
        if self.duration_s > 0.0 {
            count as f64 / self.duration_s
        } else {
            0.0
        }
    }

    /// Chains started per second: what `--rate` targets, i.e. puts, gets and peeks, or in a
    /// workers run the producers' puts alone (the workers' gets follow the queue, not the rate).
    /// A consumer's refills (`--refill`) are puts inside a chain a get started, so not counted.
    pub fn achieved_rate_per_s(&self) -> f64 {
        let paced: &[Operation] = if self.workers.is_some() {
            &[Operation::Put]
        } else {
            &[Operation::Put, Operation::Get, Operation::Peek]
        };
        let answered: u64 = paced
            .iter()
            .map(|&operation| self.total.operation(operation).count)
            .sum();
        self.per_s(answered.saturating_sub(self.total.refills))
    }

    /// Every time series of the run as `TimeSeries`, beyond what the fixed charts draw (latency
    /// by percentile, answers per second with the depth, end-to-end p99): the errors, retries
    /// and latency p99 of each second, then `series`. What the HTML report draws one by one.
    pub fn time_series(&self) -> Vec<TimeSeries> {
        let from_timeline =
            |name: &str, unit: &str, value: &dyn Fn(&TimelinePoint) -> Option<f64>| TimeSeries {
                name: name.to_string(),
                unit: unit.to_string(),
                points: self
                    .timeline
                    .iter()
                    .filter_map(|point| Some((point.end_s, value(point)?)))
                    .collect(),
            };
        let mut all = vec![
            from_timeline("errors", "per s", &|point| Some(point.errors_per_s)),
            from_timeline("retries", "per s", &|point| Some(point.retries_per_s)),
            from_timeline("latency p99, every operation", "us", &|point| {
                point.latency_p99_us.map(|p99| p99 as f64)
            }),
        ];
        all.extend(self.series.iter().cloned());
        all
    }

    /// Whether the error ratio is within `--max-error-rate`.
    pub fn within_error_budget(&self) -> bool {
        self.total.error_ratio() <= self.max_error_ratio
    }

    /// Share of the workers' time spent working, from the start of the measured window until
    /// the last answer (work started in the window is finished after it).
    /// An autoscaled fleet's time is the replica-seconds it asked for.
    pub fn worker_utilisation(&self) -> Option<f64> {
        let available_s = self.worker_seconds()?;
        (available_s > 0.0).then(|| {
            self.total.workers.busy_ns as f64 / NANOSECONDS_PER_SECOND as f64 / available_s
        })
    }

    /// How the queues' depth moved over the measured window, in messages per second (a least
    /// squares fit of the samples); `None` with fewer than three samples.
    pub fn depth_growth_per_s(&self) -> Option<f64> {
        let samples: Vec<(f64, f64)> = self
            .window_depth()
            .map(|point| (point.at_s, point.messages as f64))
            .collect();
        if samples.len() < DEPTH_SAMPLES_FOR_TREND_MIN {
            return None;
        }
        let count = samples.len() as f64;
        let mean_t = samples.iter().map(|&(t, _)| t).sum::<f64>() / count;
        let mean_depth = samples.iter().map(|&(_, depth)| depth).sum::<f64>() / count;
        let covariance: f64 = samples
            .iter()
            .map(|&(t, depth)| (t - mean_t) * (depth - mean_depth))
            .sum();
        let variance: f64 = samples.iter().map(|&(t, _)| (t - mean_t).powi(2)).sum();
        (variance > 0.0).then(|| covariance / variance)
    }

    /// How fast the producers' puts were answered inside the measured window, against how
    /// fast they were scheduled; `None` in a closed loop (there is no schedule to fall behind)
    /// or without an interval wholly inside the window.
    ///
    /// Every put scheduled in the window is sent and counted in the end, however late (up to
    /// `--grace` after the window; those still unsent then are counted apart), so the total
    /// says nothing about lateness. The answers that arrived inside the window do:
    /// the backlog of scheduled but unanswered puts grows by exactly the difference between
    /// the two rates, and the corrected put latency (schedule lag included) grows with it.
    pub fn put_rates(&self) -> Option<PutRates> {
        if !self.is_open_loop() {
            return None;
        }
        let end_s = self.warmup_s + self.duration_s;
        // Intervals straddling an end of the window hold part of a second's answers.
        let (answered, seconds) = self
            .timeline
            .iter()
            .filter(|point| {
                point.end_s - point.interval_s >= self.warmup_s - INTERVAL_EDGE_SLACK_S
                    && point.end_s <= end_s + INTERVAL_EDGE_SLACK_S
            })
            .fold((0.0, 0.0), |(answered, seconds), point| {
                (
                    answered + point.operations_per_s[Operation::Put.index()] * point.interval_s,
                    seconds + point.interval_s,
                )
            });
        let puts = self.total.operation(Operation::Put);
        (seconds > 0.0).then(|| PutRates {
            // Puts sent and unsent are one per schedule slot in the window (retries apart), so
            // Poisson arrivals are compared with the slots they drew, not with `--rate`.
            scheduled_per_s: self.per_s(puts.count + puts.unsent),
            answered_per_s: answered / seconds,
        })
    }

    /// Whether the fleet kept up, judged on both sides: the producers fell behind when their
    /// puts were answered more than `PUT_RATE_SHORTFALL_TOLERANCE` slower than scheduled (an
    /// open loop only), the consumers when the depth grew by more than a small share of the
    /// put rate (and more than one message a second). `None` when neither side can be judged
    /// as falling behind and the depth has too few samples to judge the consumers.
    pub fn verdict(&self) -> Option<Verdict> {
        let producers = self.put_rates().filter(|rates| {
            rates.answered_per_s < rates.scheduled_per_s * (1.0 - PUT_RATE_SHORTFALL_TOLERANCE)
        });
        let growth = self.depth_growth_per_s();
        if producers.is_none() && growth.is_none() {
            return None;
        }
        let puts_per_s = self.throughput_per_s(self.total.operation(Operation::Put));
        let tolerance = DEPTH_GROWTH_PER_S_TOLERANCE.max(puts_per_s * DEPTH_GROWTH_SHARE_TOLERANCE);
        let consumers = growth.filter(|&growth| growth > tolerance);
        Some(Verdict {
            producers_behind: producers,
            consumers_behind_per_s: consumers,
        })
    }

    /// Queueing theory's prediction beside the measurement, for a run it covers: a workers run
    /// on one queue, Poisson arrivals, one message per Get, no crashes, and no errors or
    /// retries (throttling and faults are outside the model). `None` for any other run, and
    /// when the measured load is unstable (a ≥ c) or nothing was delivered.
    ///
    /// The fleet is taken as it was, not as asked for: a worker is a server from when it meant
    /// to send the Get that took a message to its Delete's answer, so S and its SCV are those
    /// services' (`FleetStats::service_ns`: the client's own lateness is a worker's time too, as
    /// a real worker's would be), and the arrivals' SCV is that of the gaps between the puts'
    /// sends. The queue's wait is `theory::predict_general`'s for them (Erlang C when both SCVs
    /// are 1), plus what polling adds (`theory::polling_wait_s`, from the idle workers' gaps
    /// between Gets). The measured wait is each message's own, from its put's send to when the
    /// worker that took it meant to send that Get, with a 95% interval from batch means over
    /// the measured window's seconds (`WAIT_BATCHES`).
    pub fn theory_check(&self) -> Option<TheoryCheck> {
        let plan = self.workers.as_ref()?;
        let covered = matches!(
            self.load,
            LoadModel::Open {
                arrival: Arrival::Poisson,
                ..
            }
        ) && self.autoscale.is_none()
            && self.shape.is_none()
            && plan.crash_ratio == 0.0
            && self.batch == 1
            && self.queues == 1
            && self.total.errors() == 0
            && self.total.operations.iter().all(|stats| stats.retries == 0);
        let fleet = &self.total.fleet;
        if !covered || fleet.service_ns.count < 2 || fleet.wait_ns.count == 0 {
            return None;
        }
        let seconds = |moments: &Moments| moments.mean().map(|mean| mean / 1e9);
        let mean_s = |operation: Operation| self.total.operation(operation).latency_us.mean() / 1e6;
        let uncorrected_mean_s = |operation: Operation| {
            self.total
                .operation(operation)
                .latency_uncorrected_us
                .mean()
                / 1e6
        };
        let service_mean_s = seconds(&fleet.service_ns)?;
        let service_scv = fleet.service_ns.scv()?;
        let arrival_scv = fleet.arrival_gap_sent_ns.scv()?;
        let arrival_rate_per_s = self.throughput_per_s(self.total.operation(Operation::Put));
        let servers = u32::try_from(self.worker_lanes).ok()?;
        let prediction = theory::predict_general(
            servers,
            arrival_rate_per_s,
            service_mean_s,
            arrival_scv,
            service_scv,
        )?;
        let (poll_gap_mean_s, poll_gap_scv) = match seconds(&fleet.poll_gap_ns) {
            Some(mean_s) => (mean_s, fleet.poll_gap_ns.scv().unwrap_or(0.0)),
            None => (0.0, 0.0),
        };
        let work_mean_s =
            self.total.workers.busy_ns as f64 / self.total.workers.processed.max(1) as f64 / 1e9;
        let end_s = self.warmup_s + self.duration_s;
        let intervals: Vec<(f64, u64)> = self
            .timeline
            .iter()
            .filter(|point| point.end_s > self.warmup_s + INTERVAL_EDGE_SLACK_S)
            .filter(|point| point.end_s - point.interval_s < end_s - INTERVAL_EDGE_SLACK_S)
            .map(|point| (point.wait_ns.sum as f64 / 1e9, point.wait_ns.count))
            .collect();
        let wait_measured =
            theory::batch_means_of_sums(&intervals, intervals.len().min(WAIT_BATCHES)).unwrap_or(
                MeanEstimate {
                    mean: seconds(&fleet.wait_ns)?,
                    half_width_95: f64::NAN,
                    batches: 0,
                },
            );
        Some(TheoryCheck {
            model: match plan.work_time {
                WorkTime::Exponential { .. } => "M/M/c",
                WorkTime::Fixed { .. } => "M/D/c",
                _ => "M/G/c",
            },
            servers,
            arrival_rate_per_s,
            arrival_scv_drawn: fleet.arrival_gap_drawn_ns.scv()?,
            arrival_scv,
            work_mean_s,
            work_scv_drawn: fleet.work_drawn_ns.scv()?,
            work_done_mean_s: seconds(&fleet.work_done_ns)?,
            work_scv_done: fleet.work_done_ns.scv()?,
            get_mean_s: mean_s(Operation::Get),
            delete_mean_s: mean_s(Operation::Delete),
            put_round_trip_mean_s: uncorrected_mean_s(Operation::Put),
            get_round_trip_mean_s: uncorrected_mean_s(Operation::Get),
            service_mean_s,
            service_scv,
            poll_gap_mean_s,
            poll_gap_scv,
            prediction,
            erlang_c: theory::predict(servers, arrival_rate_per_s, service_mean_s)?,
            polling_s: theory::polling_wait_s(servers, poll_gap_mean_s, poll_gap_scv),
            work_utilisation_predicted: arrival_rate_per_s * work_mean_s / f64::from(servers),
            work_utilisation_measured: self.worker_utilisation()?,
            wait_measured,
            end_to_end_mean_s: self.total.end_to_end_us.mean() / 1e6,
        })
    }
}

/// A workers run set beside queueing theory (see `RunSummary::theory_check`). Times in
/// seconds; SCV: squared coefficient of variation (variance over mean squared).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TheoryCheck {
    /// The fleet asked for: M/M/c (exponential work), M/D/c (fixed) or M/G/c.
    pub model: &'static str,
    /// c: the workers.
    pub servers: u32,
    /// λ: the producers' puts per second in the measured window.
    pub arrival_rate_per_s: f64,
    /// The SCV of the gaps between a producer lane's puts, as drawn and as sent.
    pub arrival_scv_drawn: f64,
    pub arrival_scv: f64,
    /// The work times as drawn (mean, SCV), and as done (the Delete's lateness included).
    pub work_mean_s: f64,
    pub work_scv_drawn: f64,
    pub work_done_mean_s: f64,
    pub work_scv_done: f64,
    /// The mean corrected latencies of every Get (empty ones included) and every Delete.
    pub get_mean_s: f64,
    pub delete_mean_s: f64,
    /// The server's share: the mean round trips of a Put and a Get from their sends.
    pub put_round_trip_mean_s: f64,
    pub get_round_trip_mean_s: f64,
    /// S: a worker's time per message, from its Get's intended send to its Delete's answer.
    pub service_mean_s: f64,
    pub service_scv: f64,
    /// An idle worker's gaps between Gets (0 when no worker was ever idle).
    pub poll_gap_mean_s: f64,
    pub poll_gap_scv: f64,
    /// The queue's prediction for these arrivals and services, without polling.
    pub prediction: Prediction,
    /// Plain M/M/c for λ and S (Erlang C): what the textbook says.
    pub erlang_c: Prediction,
    /// What polling adds to the wait.
    pub polling_s: f64,
    /// λ·work / c: the share of the workers' time spent working (what `worker_utilisation`
    /// measures), predicted and measured.
    pub work_utilisation_predicted: f64,
    pub work_utilisation_measured: f64,
    /// The measured mean wait with its 95% interval (`half_width_95` NaN, `batches` 0, when
    /// the window had fewer than two seconds).
    pub wait_measured: MeanEstimate,
    /// The measured mean end-to-end time (put sent to delete answered).
    pub end_to_end_mean_s: f64,
}

impl TheoryCheck {
    /// The predicted mean wait: the queue's plus polling's.
    pub fn wait_mean_s_predicted(&self) -> f64 {
        self.prediction.wait_mean_s + self.polling_s
    }
}

/// Batches of the measured wait's confidence interval: between 10 and 30 is the usual advice;
/// a run of fewer seconds has one batch a second.
pub const WAIT_BATCHES: usize = 20;
/// An open loop achieving less than this share of its target rate did not apply the load asked.
pub(super) const ACHIEVED_RATE_SHARE_WARNING: f64 = 0.95;
/// The backlog has drained when the depth is back within this share of its rise above the
/// level before it (`Headline::drain_time_s`): a tenth, so that a queue that keeps a little
/// of its backlog still counts as drained, and one that is still half full does not.
const DRAIN_RISE_SHARE: f64 = 0.1;
/// Depth samples a trend needs.
const DEPTH_SAMPLES_FOR_TREND_MIN: usize = 3;
/// Depth growth below this (messages per second) is noise, not falling behind…
const DEPTH_GROWTH_PER_S_TOLERANCE: f64 = 1.0;
/// …and so is growth below this share of the put rate.
const DEPTH_GROWTH_SHARE_TOLERANCE: f64 = 0.01;
/// Producers whose puts are answered this much slower than scheduled (a share) fall behind:
/// the same share `ACHIEVED_RATE_SHARE_WARNING` allows an open loop. Below it are the puts
/// still in flight at the window's edges.
const PUT_RATE_SHORTFALL_TOLERANCE: f64 = 1.0 - ACHIEVED_RATE_SHARE_WARNING;
/// Timeline interval ends are run times in floating point: this much off a window edge is on it.
const INTERVAL_EDGE_SLACK_S: f64 = 1e-6;

/// The producers' puts per second in the measured window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PutRates {
    /// Puts whose schedule slot fell in the window, per second.
    pub scheduled_per_s: f64,
    /// Puts answered (success or error) inside the window, per second.
    pub answered_per_s: f64,
}

/// Whether the fleet kept up, and which side fell behind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    /// Set when the producers could not put at the scheduled rate (the server throttled or
    /// slowed them): the queue's depth then says nothing about the planned load.
    pub producers_behind: Option<PutRates>,
    /// Set to the depth's growth per second when the consumers fell behind the puts.
    pub consumers_behind_per_s: Option<f64>,
}

impl Verdict {
    /// Neither side fell behind.
    pub fn keeping_up(&self) -> bool {
        self.producers_behind.is_none() && self.consumers_behind_per_s.is_none()
    }

    /// The sides that fell behind, by name, for the JSON.
    pub fn sides_behind(&self) -> Vec<&'static str> {
        let mut sides = Vec::new();
        if self.producers_behind.is_some() {
            sides.push("producers");
        }
        if self.consumers_behind_per_s.is_some() {
            sides.push("consumers");
        }
        sides
    }

    /// `keeping up` or `falling behind`: the JSON's `verdict`.
    pub fn name(&self) -> &'static str {
        if self.keeping_up() {
            "keeping up"
        } else {
            "falling behind"
        }
    }
}

/// One step's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepResult {
    pub target_rate_per_s: f64,
    pub achieved_rate_per_s: f64,
    /// The worst operation's corrected latency percentiles (microseconds); `None` when nothing
    /// succeeded.
    pub latency_us: Option<LatencySummary>,
    pub error_ratio: f64,
    /// Operations the step scheduled and never sent (`--grace` ran out): a step that leaves
    /// any unsent fails a knee search, whatever the latency of those it sent.
    pub unsent: u64,
    /// Whether the step met the bound of a knee search (`None` for plain rate steps).
    pub passed: Option<bool>,
}

impl StepResult {
    /// The outcome of a step at `target_rate_per_s` that measured `total` and achieved
    /// `achieved_rate_per_s`, judged against `bound` and `max_error_ratio` when searching.
    pub fn of(
        target_rate_per_s: f64,
        achieved_rate_per_s: f64,
        total: &Measurements,
        search: Option<(&LatencyBound, f64)>,
    ) -> StepResult {
        let latency_us = worst_latency(total);
        let error_ratio = total.error_ratio();
        let unsent = total.unsent();
        let passed = search.map(|(bound, max_error_ratio)| {
            latency_us.is_some_and(|latency| {
                latency.percentile(bound.percentile).unwrap_or(u64::MAX) <= bound.bound_us
            }) && error_ratio <= max_error_ratio
                && unsent == 0
        });
        StepResult {
            target_rate_per_s,
            achieved_rate_per_s,
            latency_us,
            error_ratio,
            unsent,
            passed,
        }
    }
}

/// Per percentile, the highest over the operations that succeeded at least once: a bound on
/// "p99" holds for every operation the client sends.
fn worst_latency(total: &Measurements) -> Option<LatencySummary> {
    total
        .operations
        .iter()
        .filter(|stats| !stats.latency_us.is_empty())
        .map(|stats| LatencySummary::of(&stats.latency_us))
        .reduce(|worst, next| LatencySummary {
            p50: worst.p50.max(next.p50),
            p90: worst.p90.max(next.p90),
            p99: worst.p99.max(next.p99),
            p999: worst.p999.max(next.p999),
            p9999: worst.p9999.max(next.p9999),
            max: worst.max.max(next.max),
        })
}

/// The percentiles of `histogram`; `None` when it is empty.
pub(super) fn latency_of(histogram: &hdrhistogram::Histogram<u64>) -> Option<LatencySummary> {
    (!histogram.is_empty()).then(|| LatencySummary::of(histogram))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_passes_when_the_worst_operation_and_the_errors_are_within_bounds() {
        let bound = LatencyBound::parse("p99=1ms").unwrap();
        let mut total = Measurements::default();
        for _ in 0..100 {
            total.operation_mut(Operation::Put).record_success(500, 500);
            total.operation_mut(Operation::Get).record_success(900, 900);
        }
        let step = StepResult::of(100.0, 99.0, &total, Some((&bound, 0.01)));
        assert_eq!(step.passed, Some(true));
        assert_eq!(step.latency_us.unwrap().p99, 900);
        // One slow Get in a hundred moves the Gets' p99 over the bound.
        for _ in 0..3 {
            total
                .operation_mut(Operation::Get)
                .record_success(5_000, 5_000);
        }
        assert_eq!(
            StepResult::of(100.0, 99.0, &total, Some((&bound, 0.01))).passed,
            Some(false)
        );
        // Errors above the budget fail a step whatever its latency.
        let mut erring = Measurements::default();
        erring.operation_mut(Operation::Put).record_success(10, 10);
        erring.operation_mut(Operation::Put).record_error(503, None);
        assert_eq!(
            StepResult::of(100.0, 99.0, &erring, Some((&bound, 0.01))).passed,
            Some(false)
        );
        assert_eq!(StepResult::of(100.0, 99.0, &erring, None).passed, None);
        // So do operations the step never sent, whatever the latency of those it did.
        let mut behind = Measurements::default();
        behind.operation_mut(Operation::Put).record_success(10, 10);
        behind.operation_mut(Operation::Put).unsent = 1;
        let step = StepResult::of(100.0, 99.0, &behind, Some((&bound, 0.01)));
        assert_eq!((step.unsent, step.passed), (1, Some(false)));
        assert_eq!(
            StepResult::of(100.0, 0.0, &Measurements::default(), Some((&bound, 1.0))).passed,
            Some(false)
        );
    }
}
