//! The results of a run and their text forms: the table printed at the end, the live progress
//! line, the JSON file and the CSV time series. Pure functions of a `RunSummary`, so their
//! shape is unit-tested.

use std::fmt::Write;

use serde::Serialize;

use crate::metrics::{CoreUsage, LatencySummary, Measurements, OperationStats};
use crate::retry::RetryPolicy;
use crate::scenario::{Operation, Scenario};
use crate::schedule::{Arrival, LoadModel, NANOSECONDS_PER_SECOND};
use crate::steps::{LatencyBound, StepResult};
use crate::wire::{PUT_MARK_DIGITS, TIMESTAMP_DIGITS};
use crate::workers::WorkerPlan;

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
    /// The target rate of the step the interval belongs to, in a stepped run.
    pub step_rate_per_s: Option<f64>,
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

/// Everything a run produced, with the settings needed to read it.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub scenario: Scenario,
    pub load: LoadModel,
    pub connections: usize,
    pub pipeline: usize,
    pub cpus: Vec<usize>,
    /// The client cores' backend: `io_uring` or `portable`.
    pub runtime: &'static str,
    pub queues: usize,
    pub message_bytes: usize,
    pub batch: u32,
    /// Consumers replaced each deleted message (`--refill`).
    pub refill: bool,
    pub warmup_s: f64,
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
}

impl RunSummary {
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
        if self.duration_s > 0.0 {
            stats.count as f64 / self.duration_s
        } else {
            0.0
        }
    }

    /// Chains started per second: what `--rate` targets, i.e. puts, gets and peeks, or in a
    /// workers run the producers' puts alone (the workers' gets follow the queue, not the rate).
    pub fn achieved_rate_per_s(&self) -> f64 {
        let paced: &[Operation] = if self.workers.is_some() {
            &[Operation::Put]
        } else {
            &[Operation::Put, Operation::Get, Operation::Peek]
        };
        paced
            .iter()
            .map(|&operation| self.throughput_per_s(self.total.operation(operation)))
            .sum()
    }

    /// Whether the error ratio is within `--max-error-rate`.
    pub fn within_error_budget(&self) -> bool {
        self.total.error_ratio() <= self.max_error_ratio
    }

    /// Share of the workers' time spent working, from the start of the measured window until
    /// the last answer (work started in the window is finished after it).
    pub fn worker_utilisation(&self) -> Option<f64> {
        let active_s = self.duration_s.max(self.last_answer_s - self.warmup_s);
        let available_s = self.worker_lanes as f64 * active_s;
        (self.workers.is_some() && available_s > 0.0).then(|| {
            self.total.workers.busy_ns as f64 / NANOSECONDS_PER_SECOND as f64 / available_s
        })
    }

    /// How the queues' depth moved over the measured window, in messages per second (a least
    /// squares fit of the samples); `None` with fewer than three samples.
    pub fn depth_growth_per_s(&self) -> Option<f64> {
        let end_s = self.warmup_s + self.duration_s;
        let samples: Vec<(f64, f64)> = self
            .depth
            .iter()
            .filter(|point| point.at_s >= self.warmup_s && point.at_s <= end_s)
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
    /// Every put scheduled in the window is sent and counted in the end, however late, so the
    /// total count says nothing about lateness. The answers that arrived inside the window do:
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
        (seconds > 0.0).then(|| PutRates {
            // The count of puts is one per schedule slot in the window (retries apart), so
            // Poisson arrivals are compared with the slots they drew, not with `--rate`.
            scheduled_per_s: self.throughput_per_s(self.total.operation(Operation::Put)),
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
}

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

/// `1234567` as `1,234,567`.
fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn load_description(load: LoadModel) -> String {
    match load {
        LoadModel::Closed => "closed loop".to_string(),
        LoadModel::Open {
            rate_per_s,
            arrival,
        } => format!(
            "open loop at {} ops/s ({})",
            grouped(rate_per_s.round() as u64),
            match arrival {
                Arrival::Constant => "constant gaps",
                Arrival::Poisson => "poisson arrivals",
            }
        ),
    }
}

/// The table printed at the end of a run.
pub fn table(summary: &RunSummary) -> String {
    let mut out = String::new();
    let total = &summary.total;
    let _ = writeln!(
        out,
        "azq-loadgen: {}, {}, {} connections x pipeline {} on CPUs {:?} ({}), {} queue(s), \
         {}-byte messages, batch {}{}",
        summary.scenario.name(),
        load_description(summary.load),
        summary.connections,
        summary.pipeline,
        summary.cpus,
        summary.runtime,
        summary.queues,
        summary.message_bytes,
        summary.batch,
        if summary.refill { ", refilled" } else { "" }
    );
    let _ = writeln!(
        out,
        "measured {:.2} s after {:.2} s of warm-up; latency in microseconds{}\n",
        summary.duration_s,
        summary.warmup_s,
        if summary.is_open_loop() {
            ", from the intended send time (uncorrected: from the actual send time)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "{:<22} {:>11} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "operation", "count", "errors", "per s", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
    let row = |out: &mut String,
               label: &str,
               count: String,
               errors: String,
               rate: String,
               latency: Option<LatencySummary>| {
        let _ = write!(out, "{label:<22} {count:>11} {errors:>8} {rate:>10}");
        match latency {
            Some(latency) => {
                for (_, value) in latency.labelled() {
                    let _ = write!(out, " {:>8}", grouped(value));
                }
            }
            None => {
                let _ = write!(out, " {:>8}", "-");
            }
        }
        out.push('\n');
    };
    for &operation in summary.operations() {
        let stats = total.operation(operation);
        row(
            &mut out,
            operation.name(),
            grouped(stats.count),
            grouped(stats.errors),
            grouped(summary.throughput_per_s(stats).round() as u64),
            latency_of(&stats.latency_us),
        );
        if summary.is_open_loop() {
            row(
                &mut out,
                "  uncorrected",
                String::new(),
                String::new(),
                String::new(),
                latency_of(&stats.latency_uncorrected_us),
            );
        }
    }
    if summary.scenario.consumes() {
        row(
            &mut out,
            if summary.workers.is_some() {
                "end-to-end put→delete"
            } else {
                "end-to-end message"
            },
            grouped(total.end_to_end_us.len()),
            String::new(),
            String::new(),
            latency_of(&total.end_to_end_us),
        );
    }
    row(
        &mut out,
        "client send lag",
        String::new(),
        String::new(),
        String::new(),
        latency_of(&total.send_lag_us),
    );
    out.push('\n');
    if summary.is_open_loop() {
        if let LoadModel::Open { rate_per_s, .. } = summary.load {
            let _ = writeln!(
                out,
                "rate: {} ops/s achieved of {} targeted",
                grouped(summary.achieved_rate_per_s().round() as u64),
                grouped(rate_per_s.round() as u64)
            );
        }
    }
    for warning in saturation_warnings(summary) {
        let _ = writeln!(out, "warning: {warning}");
    }
    for &operation in summary.operations() {
        let stats = total.operation(operation);
        for (status, count) in &stats.errors_by_status {
            let _ = writeln!(
                out,
                "errors: {} HTTP {status} x {}",
                operation.name(),
                grouped(*count)
            );
        }
        for (code, count) in &stats.errors_by_code {
            let _ = writeln!(
                out,
                "errors: {} {code} x {}",
                operation.name(),
                grouped(*count)
            );
        }
    }
    if let Some(policy) = summary.retry {
        let _ = writeln!(
            out,
            "retries (exponential, at most {} per request from {:.3} s; counts above are \
             operations, first tries):",
            policy.retries_max,
            policy.base_delay_ns as f64 / NANOSECONDS_PER_SECOND as f64
        );
        for &operation in summary.operations() {
            let stats = total.operation(operation);
            let causes = retry_causes(stats);
            let _ = writeln!(
                out,
                "  {} {}{}",
                operation.name(),
                grouped(stats.retries),
                if causes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", causes.join(", "))
                }
            );
        }
    }
    let gets = total.operation(Operation::Get);
    if gets.count > 0 {
        let _ = writeln!(
            out,
            "gets: {} messages received, {} empty gets ({:.1}%)",
            grouped(gets.messages),
            grouped(gets.empty_gets),
            100.0 * gets.empty_gets as f64 / gets.count as f64
        );
    }
    workers_section(summary, &mut out);
    steps_section(summary, &mut out);
    if let (Some(first), Some(last)) = (summary.depth.first(), summary.depth.last()) {
        let deepest = summary
            .depth
            .iter()
            .map(|point| point.messages)
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "queue depth: {} at start, {} at end, {} at most",
            grouped(first.messages),
            grouped(last.messages),
            grouped(deepest)
        );
    }
    for core in &summary.client_cores {
        let _ = writeln!(
            out,
            "client core on CPU {}: on the CPU {:.0}% of the run, waiting for it {:.0}%",
            core.cpu,
            100.0 * core.running_ratio(),
            100.0 * core.waiting_ratio()
        );
    }
    let _ = writeln!(
        out,
        "connection errors: {}, unreadable answers: {}",
        grouped(total.connection_errors),
        grouped(total.protocol_errors)
    );
    let _ = writeln!(
        out,
        "error ratio: {:.3}% of {} requests (limit {:.3}%){}",
        100.0 * total.error_ratio(),
        grouped(total.requests()),
        100.0 * summary.max_error_ratio,
        if summary.within_error_budget() {
            ""
        } else {
            ": EXCEEDED"
        }
    );
    out
}

/// The worker fleet's lines of the table.
fn workers_section(summary: &RunSummary, out: &mut String) {
    let Some(plan) = summary.workers else {
        return;
    };
    let workers = &summary.total.workers;
    let deletes = summary.total.operation(Operation::Delete);
    let _ = writeln!(
        out,
        "workers: {} at crash rate {:.2}%: {} messages received, {} processed, {} abandoned by \
         a crash, {} deleted",
        summary.worker_lanes,
        100.0 * plan.crash_ratio,
        grouped(workers.received),
        grouped(workers.processed),
        grouped(workers.crashed),
        grouped(workers.deleted)
    );
    let _ = writeln!(
        out,
        "  processed more than once: {} (the lease ran out before the delete: {}; after a \
         crash: {})",
        grouped(workers.processed_more_than_once()),
        grouped(workers.redelivered_after_lease_expiry),
        grouped(workers.redelivered_after_crash)
    );
    let _ = writeln!(
        out,
        "  stored twice by a retried put (warm-up included, as received): {}",
        match summary.duplicates_from_retried_puts {
            Some(duplicates) => grouped(duplicates),
            None => format!(
                "not counted (messages of fewer than {} bytes carry no put mark)",
                TIMESTAMP_DIGITS + PUT_MARK_DIGITS
            ),
        }
    );
    let _ = writeln!(
        out,
        "  deletes after the lease ran out: {}; refused: {} PopReceiptMismatch, {} \
         MessageNotFound",
        grouped(workers.lease_expired_before_delete),
        grouped(deletes.errors_with_code("PopReceiptMismatch")),
        grouped(deletes.errors_with_code("MessageNotFound"))
    );
    if let Some(utilisation) = summary.worker_utilisation() {
        let _ = writeln!(
            out,
            "  utilisation: {:.1}% of the workers' time spent working",
            100.0 * utilisation
        );
    }
    let _ = writeln!(out, "  verdict: {}", verdict_text(summary));
}

/// The verdict line's text: which side fell behind and by how much, or why not.
fn verdict_text(summary: &RunSummary) -> String {
    let Some(verdict) = summary.verdict() else {
        return "too few depth samples to tell".to_string();
    };
    let rates = |rates: PutRates| {
        format!(
            "puts {}/s answered of {}/s scheduled",
            grouped(rates.answered_per_s.round() as u64),
            grouped(rates.scheduled_per_s.round() as u64)
        )
    };
    if verdict.keeping_up() {
        return match summary.put_rates() {
            Some(put_rates) => format!("keeping up ({}; queue depth bounded)", rates(put_rates)),
            None => "keeping up (queue depth bounded)".to_string(),
        };
    }
    let mut sides = Vec::new();
    if let Some(put_rates) = verdict.producers_behind {
        let puts = summary.total.operation(Operation::Put);
        let mut producers = format!("producers: {}", rates(put_rates));
        if puts.retries > 0 {
            let _ = write!(
                producers,
                ", {} put retries ({})",
                grouped(puts.retries),
                retry_causes(puts).join(", ")
            );
        }
        sides.push(producers);
    }
    if let Some(growth_per_s) = verdict.consumers_behind_per_s {
        sides.push(format!(
            "consumers: queue depth grows by {} messages/s",
            grouped(growth_per_s.round() as u64)
        ));
    }
    format!("falling behind ({})", sides.join("; "))
}

/// Why an operation was retried: `HTTP 503 x 2`, `lost connection x 1`.
fn retry_causes(stats: &OperationStats) -> Vec<String> {
    let mut causes: Vec<String> = stats
        .retries_by_status
        .iter()
        .map(|(status, count)| format!("HTTP {status} x {}", grouped(*count)))
        .collect();
    if stats.retries_after_connection_errors > 0 {
        causes.push(format!(
            "lost connection x {}",
            grouped(stats.retries_after_connection_errors)
        ));
    }
    causes
}

/// The steps of a stepped run, and the knee of a search.
fn steps_section(summary: &RunSummary, out: &mut String) {
    if summary.steps.is_empty() {
        return;
    }
    let percentile = summary
        .search
        .map_or("p99", |search| search.bound.percentile);
    let _ = writeln!(
        out,
        "steps (worst operation's corrected latency, us):\n  {:>10} {:>10} {:>10} {:>10} {:>8}",
        "target/s", "achieved/s", percentile, "max", "errors"
    );
    for step in &summary.steps {
        let value = step
            .latency_us
            .and_then(|latency| latency.percentile(percentile));
        let _ = writeln!(
            out,
            "  {:>10} {:>10} {:>10} {:>10} {:>7.2}%{}",
            grouped(step.target_rate_per_s.round() as u64),
            grouped(step.achieved_rate_per_s.round() as u64),
            value.map_or("-".to_string(), grouped),
            step.latency_us
                .map_or("-".to_string(), |latency| grouped(latency.max)),
            100.0 * step.error_ratio,
            match step.passed {
                Some(true) => "  pass",
                Some(false) => "  FAIL",
                None => "",
            }
        );
    }
    if let Some(search) = summary.search {
        let _ = match search.knee_rate_per_s {
            Some(knee) => writeln!(
                out,
                "knee: {} ops/s is the highest rate with {} <= {} us and errors <= {:.2}% \
                 (the table above is that step's)",
                grouped(knee.round() as u64),
                search.bound.percentile,
                grouped(search.bound.bound_us),
                100.0 * summary.max_error_ratio
            ),
            None => writeln!(
                out,
                "knee: none; even the lowest rate tried missed {} <= {} us or the error budget",
                search.bound.percentile,
                grouped(search.bound.bound_us)
            ),
        };
    }
}

/// A client core that waited for its CPU longer than this share of the run was starved by
/// other processes.
const WAITING_RATIO_WARNING: f64 = 0.1;
/// A p99 send lag above this means the load generator could not keep up with its own work.
const SEND_LAG_US_P99_WARNING: u64 = 1_000;
/// An open loop achieving less than this share of its target rate did not apply the load asked.
const ACHIEVED_RATE_SHARE_WARNING: f64 = 0.95;

/// Signs that the load generator, not the server, limited the run: then its numbers understate
/// what the server can do, and the user should know before quoting them.
pub fn saturation_warnings(summary: &RunSummary) -> Vec<String> {
    let mut warnings = Vec::new();
    let send_lag = &summary.total.send_lag_us;
    if !send_lag.is_empty() && send_lag.value_at_quantile(0.99) > SEND_LAG_US_P99_WARNING {
        warnings.push(format!(
            "the load generator itself lagged (p99 send lag {} us): give it more or quieter \
             CPUs (--cpus) before reading these numbers as the server's",
            grouped(send_lag.value_at_quantile(0.99))
        ));
    }
    for core in &summary.client_cores {
        if core.waiting_ratio() > WAITING_RATIO_WARNING {
            warnings.push(format!(
                "the client core on CPU {} waited for its CPU {:.0}% of the run (other processes \
                 run there): the load generator may have limited the run",
                core.cpu,
                100.0 * core.waiting_ratio()
            ));
        }
    }
    if let LoadModel::Open { rate_per_s, .. } = summary.load {
        let achieved = summary.achieved_rate_per_s();
        if achieved < rate_per_s * ACHIEVED_RATE_SHARE_WARNING {
            warnings.push(format!(
                "only {} of the {} ops/s asked for were sent: the server or the client could \
                 not keep up, or there were too few connections",
                grouped(achieved.round() as u64),
                grouped(rate_per_s.round() as u64)
            ));
        }
    }
    warnings
}

fn latency_of(histogram: &hdrhistogram::Histogram<u64>) -> Option<LatencySummary> {
    (!histogram.is_empty()).then(|| LatencySummary::of(histogram))
}

/// The live line printed once a second: run time, answers per second in the last interval,
/// p99 over everything measured so far, and errors so far.
pub fn progress_line(
    elapsed_s: f64,
    warming_up: bool,
    interval_requests: u64,
    interval_s: f64,
    so_far: &Measurements,
) -> String {
    let mut all = crate::metrics::new_histogram();
    for stats in &so_far.operations {
        let _ = all.add(&stats.latency_us);
    }
    let p99 = if all.is_empty() {
        "-".to_string()
    } else {
        format!("{} us", grouped(all.value_at_quantile(0.99)))
    };
    format!(
        "[{elapsed_s:6.1}s]{} {:>10} req/s   p99 {p99:>10}   errors {}",
        if warming_up { " warm-up" } else { "" },
        grouped((interval_requests as f64 / interval_s.max(1e-9)).round() as u64),
        grouped(so_far.errors())
    )
}

/// `value` rounded to three decimals (what a report needs of a rate or a ratio); `None`, written
/// as `null`, when it is not a number.
pub fn rounded(value: f64) -> Option<f64> {
    value.is_finite().then(|| (value * 1000.0).round() / 1000.0)
}

/// A JSON object whose keys keep the order given (serde_json's own map sorts them).
pub struct Entries<K, V>(pub Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for Entries<K, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(key, value)| (key, value)))
    }
}

/// The JSON file's top level.
#[derive(Serialize)]
struct JsonReport<'a> {
    scenario: &'static str,
    load_model: &'static str,
    target_rate_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arrival: Option<&'static str>,
    achieved_rate_per_s: Option<f64>,
    duration_s: Option<f64>,
    warmup_s: Option<f64>,
    start_unix_s: Option<f64>,
    connections: usize,
    pipeline: usize,
    queues: usize,
    message_bytes: usize,
    batch: u32,
    requests: u64,
    errors: u64,
    connection_errors: u64,
    protocol_errors: u64,
    refill: bool,
    cpus: &'a [usize],
    runtime: &'static str,
    client_cores: Vec<JsonCoreUsage>,
    error_ratio: Option<f64>,
    max_error_ratio: Option<f64>,
    warnings: Vec<String>,
    retry: Option<JsonRetry>,
    ops: Entries<&'static str, JsonOperation<'a>>,
    end_to_end_us: Option<LatencySummary>,
    client_send_lag_us: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workers: Option<JsonWorkers>,
    #[serde(skip_serializing_if = "<[StepResult]>::is_empty")]
    steps: &'a [StepResult],
    #[serde(skip_serializing_if = "Option::is_none")]
    knee: Option<JsonKnee>,
    timeline: Vec<JsonTimelinePoint>,
    depth: Vec<JsonDepthPoint>,
}

#[derive(Serialize)]
struct JsonRetry {
    retries_max: u32,
    base_delay_s: Option<f64>,
}

#[derive(Serialize)]
struct JsonWorkers {
    workers: usize,
    work_time: String,
    crash_ratio: Option<f64>,
    received: u64,
    processed: u64,
    crashed: u64,
    deleted: u64,
    processed_more_than_once: u64,
    duplicates_from_retried_puts: Option<u64>,
    redelivered_after_lease_expiry: u64,
    redelivered_after_crash: u64,
    lease_expired_before_delete: u64,
    deletes_pop_receipt_mismatch: u64,
    deletes_message_not_found: u64,
    utilisation: Option<f64>,
    depth_growth_per_s: Option<f64>,
    /// Producers' puts scheduled in the measured window, per second (open loop only).
    puts_scheduled_per_s: Option<f64>,
    /// Producers' puts answered inside the measured window, per second (open loop only).
    puts_answered_in_window_per_s: Option<f64>,
    /// `keeping up`, `falling behind`, or null with too few depth samples.
    verdict: Option<&'static str>,
    /// The sides that fell behind: `producers`, `consumers`; null with `verdict`.
    falling_behind: Option<Vec<&'static str>>,
}

#[derive(Serialize)]
struct JsonKnee {
    percentile: &'static str,
    bound_us: u64,
    max_error_ratio: Option<f64>,
    rate_per_s: Option<f64>,
}

#[derive(Serialize)]
struct JsonCoreUsage {
    cpu: usize,
    running_ratio: Option<f64>,
    waiting_ratio: Option<f64>,
}

#[derive(Serialize)]
struct JsonOperation<'a> {
    count: u64,
    errors: u64,
    /// Gets and Peeks only.
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<u64>,
    /// Gets only.
    #[serde(skip_serializing_if = "Option::is_none")]
    empty_gets: Option<u64>,
    errors_by_status: Entries<String, u64>,
    errors_by_code: Entries<&'a str, u64>,
    retries: u64,
    retries_by_status: Entries<String, u64>,
    retries_after_connection_errors: u64,
    throughput_per_s: Option<f64>,
    latency_us: Option<LatencySummary>,
    latency_uncorrected_us: Option<LatencySummary>,
}

#[derive(Serialize)]
struct JsonTimelinePoint {
    t_s: Option<f64>,
    ops_per_s: Entries<&'static str, Option<f64>>,
    errors_per_s: Option<f64>,
    retries_per_s: Option<f64>,
    latency_p99_us: Option<u64>,
    end_to_end_p99_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_rate_per_s: Option<f64>,
}

#[derive(Serialize)]
struct JsonDepthPoint {
    t_s: Option<f64>,
    messages: u64,
}

fn json_workers(summary: &RunSummary, plan: &WorkerPlan) -> JsonWorkers {
    let workers = &summary.total.workers;
    let deletes = summary.total.operation(Operation::Delete);
    let put_rates = summary.put_rates();
    let verdict = summary.verdict();
    JsonWorkers {
        workers: summary.worker_lanes,
        work_time: plan.work_time.to_string(),
        crash_ratio: rounded(plan.crash_ratio),
        received: workers.received,
        processed: workers.processed,
        crashed: workers.crashed,
        deleted: workers.deleted,
        processed_more_than_once: workers.processed_more_than_once(),
        duplicates_from_retried_puts: summary.duplicates_from_retried_puts,
        redelivered_after_lease_expiry: workers.redelivered_after_lease_expiry,
        redelivered_after_crash: workers.redelivered_after_crash,
        lease_expired_before_delete: workers.lease_expired_before_delete,
        deletes_pop_receipt_mismatch: deletes.errors_with_code("PopReceiptMismatch"),
        deletes_message_not_found: deletes.errors_with_code("MessageNotFound"),
        utilisation: summary.worker_utilisation().and_then(rounded),
        depth_growth_per_s: summary.depth_growth_per_s().and_then(rounded),
        puts_scheduled_per_s: put_rates.and_then(|rates| rounded(rates.scheduled_per_s)),
        puts_answered_in_window_per_s: put_rates.and_then(|rates| rounded(rates.answered_per_s)),
        verdict: verdict.map(|verdict| verdict.name()),
        falling_behind: verdict.map(|verdict| verdict.sides_behind()),
    }
}

/// The `--csv` file: one row per second of the run (every step's, in a stepped run) with the
/// answers per second of each operation, errors and retries per second, the interval's p99
/// latency over every operation and of end-to-end latency, and the last queue depth sampled
/// by the end of the interval. Empty cells where nothing was measured.
pub fn csv(summary: &RunSummary) -> String {
    let mut out = String::from("t_s");
    for &operation in summary.operations() {
        let _ = write!(out, ",{}_per_s", operation.name());
    }
    out.push_str(",errors_per_s,retries_per_s,p99_us,end_to_end_p99_us,depth,step_rate_per_s\n");
    let optional = |value: Option<u64>| value.map_or(String::new(), |value| value.to_string());
    for point in &summary.timeline {
        let _ = write!(out, "{:.3}", point.end_s);
        for &operation in summary.operations() {
            let _ = write!(out, ",{:.1}", point.operations_per_s[operation.index()]);
        }
        let depth = summary
            .depth
            .iter()
            .rfind(|sample| sample.at_s <= point.end_s)
            .map(|sample| sample.messages);
        let _ = writeln!(
            out,
            ",{:.1},{:.1},{},{},{},{}",
            point.errors_per_s,
            point.retries_per_s,
            optional(point.latency_p99_us),
            optional(point.end_to_end_p99_us),
            optional(depth),
            point
                .step_rate_per_s
                .map_or(String::new(), |rate| format!("{rate}"))
        );
    }
    out
}

/// The JSON file: run settings, per-operation counts, errors and latency percentiles, end-to-end
/// latency, and the time series. Latencies are in microseconds; `null` where nothing was measured.
pub fn json(summary: &RunSummary) -> String {
    let total = &summary.total;
    let (target_rate_per_s, arrival) = match summary.load {
        LoadModel::Open {
            rate_per_s,
            arrival,
        } => (
            rounded(rate_per_s),
            Some(match arrival {
                Arrival::Constant => "constant",
                Arrival::Poisson => "poisson",
            }),
        ),
        LoadModel::Closed => (None, None),
    };
    let ops = summary
        .operations()
        .iter()
        .map(|&operation| {
            let stats = total.operation(operation);
            let lists_messages = matches!(operation, Operation::Get | Operation::Peek);
            let json = JsonOperation {
                count: stats.count,
                errors: stats.errors,
                messages: lists_messages.then_some(stats.messages),
                empty_gets: (operation == Operation::Get).then_some(stats.empty_gets),
                errors_by_status: Entries(
                    stats
                        .errors_by_status
                        .iter()
                        .map(|&(status, count)| (status.to_string(), count))
                        .collect(),
                ),
                errors_by_code: Entries(
                    stats
                        .errors_by_code
                        .iter()
                        .map(|(code, count)| (code.as_str(), *count))
                        .collect(),
                ),
                retries: stats.retries,
                retries_by_status: Entries(
                    stats
                        .retries_by_status
                        .iter()
                        .map(|&(status, count)| (status.to_string(), count))
                        .collect(),
                ),
                retries_after_connection_errors: stats.retries_after_connection_errors,
                throughput_per_s: rounded(summary.throughput_per_s(stats)),
                latency_us: latency_of(&stats.latency_us),
                latency_uncorrected_us: latency_of(&stats.latency_uncorrected_us),
            };
            (operation.name(), json)
        })
        .collect();
    let report = JsonReport {
        scenario: summary.scenario.name(),
        load_model: if summary.is_open_loop() {
            "open"
        } else {
            "closed"
        },
        target_rate_per_s,
        arrival,
        achieved_rate_per_s: rounded(summary.achieved_rate_per_s()),
        duration_s: rounded(summary.duration_s),
        warmup_s: rounded(summary.warmup_s),
        start_unix_s: rounded(summary.start_unix_s),
        connections: summary.connections,
        pipeline: summary.pipeline,
        queues: summary.queues,
        message_bytes: summary.message_bytes,
        batch: summary.batch,
        requests: total.requests(),
        errors: total.errors(),
        connection_errors: total.connection_errors,
        protocol_errors: total.protocol_errors,
        refill: summary.refill,
        cpus: &summary.cpus,
        runtime: summary.runtime,
        client_cores: summary
            .client_cores
            .iter()
            .map(|core| JsonCoreUsage {
                cpu: core.cpu,
                running_ratio: rounded(core.running_ratio()),
                waiting_ratio: rounded(core.waiting_ratio()),
            })
            .collect(),
        error_ratio: rounded(total.error_ratio()),
        max_error_ratio: rounded(summary.max_error_ratio),
        warnings: saturation_warnings(summary),
        retry: summary.retry.map(|policy| JsonRetry {
            retries_max: policy.retries_max,
            base_delay_s: rounded(policy.base_delay_ns as f64 / NANOSECONDS_PER_SECOND as f64),
        }),
        ops: Entries(ops),
        end_to_end_us: latency_of(&total.end_to_end_us),
        client_send_lag_us: latency_of(&total.send_lag_us),
        workers: summary.workers.map(|plan| json_workers(summary, &plan)),
        steps: &summary.steps,
        knee: summary.search.map(|search| JsonKnee {
            percentile: search.bound.percentile,
            bound_us: search.bound.bound_us,
            max_error_ratio: rounded(summary.max_error_ratio),
            rate_per_s: search.knee_rate_per_s,
        }),
        timeline: summary
            .timeline
            .iter()
            .map(|point| JsonTimelinePoint {
                t_s: rounded(point.end_s),
                ops_per_s: Entries(
                    summary
                        .operations()
                        .iter()
                        .map(|&operation| {
                            let rate = point.operations_per_s[operation.index()];
                            (operation.name(), rounded(rate))
                        })
                        .collect(),
                ),
                errors_per_s: rounded(point.errors_per_s),
                retries_per_s: rounded(point.retries_per_s),
                latency_p99_us: point.latency_p99_us,
                end_to_end_p99_us: point.end_to_end_p99_us,
                step_rate_per_s: point.step_rate_per_s,
            })
            .collect(),
        depth: summary
            .depth
            .iter()
            .map(|point| JsonDepthPoint {
                t_s: rounded(point.at_s),
                messages: point.messages,
            })
            .collect(),
    };
    // Serializing plain data into a String cannot fail.
    let mut text = serde_json::to_string(&report).unwrap_or_else(|_| unreachable!());
    text.push('\n');
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schedule::Arrival;

    /// A mixed open-loop run with known numbers.
    pub fn sample_summary() -> RunSummary {
        let mut total = Measurements::default();
        for value in 1..=1000 {
            total
                .operation_mut(Operation::Put)
                .record_success(value, value / 2 + 1);
            total
                .operation_mut(Operation::Get)
                .record_success(value, value);
            total.record_end_to_end(value + 100);
            total.record_send_lag(1);
        }
        total.operation_mut(Operation::Get).empty_gets = 7;
        total.operation_mut(Operation::Get).messages = 993;
        for _ in 0..990 {
            total
                .operation_mut(Operation::Delete)
                .record_success(50, 50);
        }
        total
            .operation_mut(Operation::Delete)
            .record_error(404, Some(b"MessageNotFound"));
        RunSummary {
            scenario: Scenario::Mixed,
            load: LoadModel::Open {
                rate_per_s: 400.0,
                arrival: Arrival::Poisson,
            },
            connections: 4,
            pipeline: 1,
            cpus: vec![1],
            runtime: "io_uring",
            queues: 2,
            message_bytes: 1024,
            batch: 1,
            refill: false,
            warmup_s: 1.0,
            duration_s: 5.0,
            total,
            timeline: vec![
                TimelinePoint {
                    end_s: 2.0,
                    interval_s: 1.0,
                    operations_per_s: [200.0, 190.0, 0.0, 0.0, 189.0],
                    errors_per_s: 0.0,
                    retries_per_s: 0.0,
                    latency_p99_us: Some(990),
                    end_to_end_p99_us: Some(1_090),
                    step_rate_per_s: None,
                },
                TimelinePoint {
                    end_s: 3.0,
                    interval_s: 1.0,
                    operations_per_s: [210.0, 200.0, 0.0, 0.0, 198.0],
                    errors_per_s: 1.0,
                    retries_per_s: 0.0,
                    latency_p99_us: Some(995),
                    end_to_end_p99_us: None,
                    step_rate_per_s: None,
                },
            ],
            depth: vec![
                DepthPoint {
                    at_s: 0.0,
                    messages: 0,
                },
                DepthPoint {
                    at_s: 1.0,
                    messages: 12,
                },
            ],
            client_cores: vec![CoreUsage {
                cpu: 1,
                elapsed_ns: 6_000_000_000,
                running_ns: 3_000_000_000,
                waiting_ns: 60_000_000,
            }],
            max_error_ratio: 0.01,
            start_unix_s: 1_795_305_600.0,
            last_answer_s: 6.0,
            retry: None,
            workers: None,
            worker_lanes: 0,
            duplicates_from_retried_puts: None,
            steps: Vec::new(),
            search: None,
        }
    }

    #[test]
    fn json_schema() {
        let text = json(&sample_summary());
        let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(value["scenario"], "mixed");
        assert_eq!(value["load_model"], "open");
        assert_eq!(value["arrival"], "poisson");
        assert_eq!(value["target_rate_per_s"], 400.0);
        assert_eq!(value["duration_s"], 5.0);
        assert_eq!(value["cpus"], serde_json::json!([1]));
        assert_eq!(value["runtime"], "io_uring");
        assert_eq!(value["refill"], false);
        assert_eq!(value["warnings"], serde_json::json!([]));
        assert_eq!(value["client_cores"][0]["cpu"], 1);
        assert_eq!(value["client_cores"][0]["running_ratio"], 0.5);
        assert_eq!(value["client_cores"][0]["waiting_ratio"], 0.01);
        let ops = value["ops"].as_object().unwrap();
        assert_eq!(
            ops.keys().collect::<Vec<_>>(),
            vec!["delete", "get", "put"],
            "the scenario's operations (serde_json sorts keys)"
        );
        let put = &ops["put"];
        assert_eq!(put["count"], 1000);
        assert_eq!(put["errors"], 0);
        assert_eq!(put["throughput_per_s"], 200.0);
        for (key, expected) in [
            ("p50", 500),
            ("p90", 900),
            ("p99", 990),
            ("p999", 999),
            ("p9999", 1000),
            ("max", 1000),
        ] {
            assert_eq!(put["latency_us"][key], expected, "{key}");
        }
        assert_eq!(put["latency_uncorrected_us"]["max"], 501);
        assert_eq!(ops["get"]["empty_gets"], 7);
        assert_eq!(ops["get"]["messages"], 993);
        assert_eq!(ops["delete"]["errors"], 1);
        assert_eq!(ops["delete"]["errors_by_status"]["404"], 1);
        assert_eq!(ops["delete"]["errors_by_code"]["MessageNotFound"], 1);
        assert_eq!(value["end_to_end_us"]["p50"], 600);
        assert_eq!(value["requests"], 2991);
        assert_eq!(value["errors"], 1);
        assert_eq!(value["timeline"][1]["ops_per_s"]["delete"], 198.0);
        assert_eq!(value["depth"][1]["messages"], 12);
    }

    #[test]
    fn json_of_an_empty_closed_run() {
        let mut summary = sample_summary();
        summary.scenario = Scenario::Peek;
        summary.load = LoadModel::Closed;
        summary.total = Measurements::default();
        summary.timeline.clear();
        summary.depth.clear();
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(value["target_rate_per_s"], serde_json::Value::Null);
        assert_eq!(value["ops"]["peek"]["latency_us"], serde_json::Value::Null);
        assert_eq!(value["end_to_end_us"], serde_json::Value::Null);
        assert_eq!(value["timeline"], serde_json::json!([]));
    }

    #[test]
    fn json_keeps_the_report_order_of_operations_and_rounds_to_three_decimals() {
        let mut summary = sample_summary();
        summary.duration_s = 5.0 / 3.0;
        let text = json(&summary);
        let put = text.find("\"put\":{").unwrap();
        let get = text.find("\"get\":{").unwrap();
        let delete = text.find("\"delete\":{").unwrap();
        assert!(put < get && get < delete, "{text}");
        assert!(text.contains("\"duration_s\":1.667,"), "{text}");
        assert!(text.ends_with("}\n"));
        assert_eq!(rounded(f64::NAN), None);
    }

    #[test]
    fn table_lists_operations_errors_and_budget() {
        let summary = sample_summary();
        let text = table(&summary);
        assert!(
            text.contains("mixed, open loop at 400 ops/s (poisson arrivals)"),
            "{text}"
        );
        assert!(text.contains("  uncorrected"));
        assert!(text.contains("end-to-end message"));
        assert!(text.contains("errors: delete MessageNotFound x 1"));
        assert!(text.contains("7 empty gets"));
        assert!(text.contains("queue depth: 0 at start, 12 at end, 12 at most"));
        assert!(text.contains("client core on CPU 1: on the CPU 50% of the run, waiting for it 1%"));
        assert!(summary.within_error_budget());
        assert!(!text.contains("EXCEEDED"));
    }

    #[test]
    fn saturation_is_flagged() {
        let mut summary = sample_summary();
        assert!(saturation_warnings(&summary).is_empty());
        summary.total.record_send_lag(50_000);
        for _ in 0..100 {
            summary.total.record_send_lag(5_000);
        }
        // 400 ops/s asked for; 2,000 chains in 5 s is exactly that. Ask for more.
        summary.load = LoadModel::Open {
            rate_per_s: 1_000.0,
            arrival: Arrival::Constant,
        };
        summary.client_cores[0].waiting_ns = 3_000_000_000;
        let warnings = saturation_warnings(&summary);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("send lag"));
        assert!(warnings[1].contains("CPU 1 waited for its CPU 50%"));
        assert!(warnings[2].contains("400 of the 1,000 ops/s"));
        assert!(table(&summary).contains("warning: "));
    }

    /// A workers run: two workers, one message delivered three times.
    pub fn workers_summary() -> RunSummary {
        let mut summary = sample_summary();
        summary.scenario = Scenario::Workers;
        summary.load = LoadModel::Closed;
        summary.workers = Some(WorkerPlan {
            work_time: crate::workers::WorkTime::Fixed { ns: 3_000_000_000 },
            crash_ratio: 0.0,
            poll_backoff_min_ns: 10_000_000,
            poll_backoff_max_ns: 50_000_000,
        });
        summary.worker_lanes = 2;
        summary.duplicates_from_retried_puts = Some(1);
        summary.warmup_s = 0.0;
        summary.duration_s = 4.5;
        summary.last_answer_s = 7.5;
        summary.total.workers = crate::metrics::WorkerStats {
            received: 3,
            processed: 3,
            crashed: 0,
            deleted: 1,
            redelivered_after_lease_expiry: 2,
            redelivered_after_crash: 0,
            lease_expired_before_delete: 3,
            busy_ns: 9_000_000_000,
        };
        summary.total.operations[Operation::Delete.index()] = OperationStats::default();
        let deletes = summary.total.operation_mut(Operation::Delete);
        deletes.record_success(500, 500);
        deletes.record_error(400, Some(b"PopReceiptMismatch"));
        deletes.record_error(400, Some(b"PopReceiptMismatch"));
        summary.depth = (0..5)
            .map(|second| DepthPoint {
                at_s: f64::from(second),
                messages: 1,
            })
            .collect();
        summary
    }

    #[test]
    fn workers_are_reported_with_duplicates_and_their_causes() {
        let summary = workers_summary();
        assert_eq!(summary.worker_utilisation(), Some(0.6));
        assert!(summary.verdict().unwrap().keeping_up());
        assert_eq!(summary.put_rates(), None, "a closed loop has no schedule");
        let text = table(&summary);
        assert!(text.contains("3 messages received, 3 processed"), "{text}");
        assert!(text.contains(
            "processed more than once: 2 (the lease ran out before the \
            delete: 2; after a crash: 0)"
        ));
        assert!(text.contains("stored twice by a retried put (warm-up included, as received): 1"));
        assert!(text.contains("refused: 2 PopReceiptMismatch, 0 MessageNotFound"));
        assert!(text.contains("utilisation: 60.0%"));
        assert!(text.contains("verdict: keeping up (queue depth bounded)"));
        assert!(text.contains("end-to-end put→delete"));
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        let workers = &value["workers"];
        assert_eq!(workers["work_time"], "3000ms");
        assert_eq!(workers["processed_more_than_once"], 2);
        assert_eq!(workers["duplicates_from_retried_puts"], 1);
        assert_eq!(workers["redelivered_after_lease_expiry"], 2);
        assert_eq!(workers["deletes_pop_receipt_mismatch"], 2);
        assert_eq!(workers["lease_expired_before_delete"], 3);
        assert_eq!(workers["verdict"], "keeping up");
        assert_eq!(workers["falling_behind"], serde_json::json!([]));
        assert_eq!(workers["puts_scheduled_per_s"], serde_json::Value::Null);
        assert_eq!(workers["depth_growth_per_s"], 0.0);
    }

    #[test]
    fn a_growing_queue_is_falling_behind() {
        let mut summary = workers_summary();
        summary.total.operations[Operation::Put.index()] = OperationStats::default();
        for (second, messages) in [(0.0, 0), (1.0, 100), (2.0, 210), (3.0, 290), (4.0, 400)] {
            summary.depth.push(DepthPoint {
                at_s: second,
                messages,
            });
        }
        summary.depth.drain(..5);
        let growth = summary.depth_growth_per_s().unwrap();
        assert!((growth - 99.0).abs() < 1e-9, "{growth}");
        let verdict = summary.verdict().unwrap();
        assert_eq!(verdict.producers_behind, None);
        assert_eq!(verdict.consumers_behind_per_s, Some(growth));
        assert!(table(&summary)
            .contains("verdict: falling behind (consumers: queue depth grows by 99 messages/s)"));
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(value["workers"]["verdict"], "falling behind");
        assert_eq!(
            value["workers"]["falling_behind"],
            serde_json::json!(["consumers"])
        );
        summary.depth.truncate(2);
        assert_eq!(summary.verdict(), None);
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(value["workers"]["verdict"], serde_json::Value::Null);
        assert_eq!(value["workers"]["falling_behind"], serde_json::Value::Null);
        assert!(table(&summary).contains("verdict: too few depth samples to tell"));
    }

    /// An open-loop workers run scheduled at 800 puts/s for 10 s after 2 s of warm-up, whose
    /// puts were answered at `answered_per_s` in every second of the window, with 59 puts
    /// retried after a 503 and a queue depth that stays at 5.
    fn open_workers_summary(answered_per_s: f64) -> RunSummary {
        let mut summary = workers_summary();
        summary.load = LoadModel::Open {
            rate_per_s: 800.0,
            arrival: Arrival::Constant,
        };
        summary.warmup_s = 2.0;
        summary.duration_s = 10.0;
        summary.last_answer_s = 14.0;
        let mut puts = OperationStats::default();
        for _ in 0..8_000 {
            puts.record_success(1_000, 900);
        }
        for _ in 0..59 {
            puts.record_retry(Some(503));
        }
        summary.total.operations[Operation::Put.index()] = puts;
        summary.timeline = (3..=12)
            .map(|second| TimelinePoint {
                end_s: f64::from(second),
                interval_s: 1.0,
                operations_per_s: [answered_per_s, 0.0, 0.0, 0.0, 0.0],
                errors_per_s: 0.0,
                retries_per_s: 0.0,
                latency_p99_us: None,
                end_to_end_p99_us: None,
                step_rate_per_s: None,
            })
            .collect();
        summary.depth = (2..=12)
            .map(|second| DepthPoint {
                at_s: f64::from(second),
                messages: 5,
            })
            .collect();
        summary
    }

    /// The workers' gets are not what `--rate` paces: the achieved rate is the producers'.
    #[test]
    fn a_workers_run_achieves_its_put_rate_whatever_the_workers_get() {
        let mut summary = open_workers_summary(800.0);
        let gets = summary.total.operation_mut(Operation::Get);
        for _ in 0..5_000 {
            gets.record_success(1_000, 900);
        }
        assert_eq!(summary.achieved_rate_per_s(), 800.0);
        let text = table(&summary);
        assert!(
            text.contains("rate: 800 ops/s achieved of 800 targeted"),
            "{text}"
        );
        // Puts behind their schedule are still seen, gets or not.
        summary.total.operations[Operation::Put.index()] = OperationStats::default();
        assert_eq!(summary.achieved_rate_per_s(), 0.0);
    }

    /// The bug this pins: throttled producers kept the depth bounded, and the verdict said
    /// "keeping up" while the puts ran seconds behind their schedule.
    #[test]
    fn throttled_producers_are_falling_behind_though_the_depth_is_bounded() {
        let summary = open_workers_summary(612.0);
        assert_eq!(summary.depth_growth_per_s(), Some(0.0));
        let verdict = summary.verdict().unwrap();
        assert_eq!(
            verdict.producers_behind,
            Some(PutRates {
                scheduled_per_s: 800.0,
                answered_per_s: 612.0
            })
        );
        assert_eq!(verdict.consumers_behind_per_s, None);
        let text = table(&summary);
        assert!(
            text.contains(
                "verdict: falling behind (producers: puts 612/s answered of 800/s scheduled, \
                 59 put retries (HTTP 503 x 59))"
            ),
            "{text}"
        );
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        let workers = &value["workers"];
        assert_eq!(workers["verdict"], "falling behind");
        assert_eq!(workers["falling_behind"], serde_json::json!(["producers"]));
        assert_eq!(workers["puts_scheduled_per_s"], 800.0);
        assert_eq!(workers["puts_answered_in_window_per_s"], 612.0);
    }

    #[test]
    fn producers_within_the_tolerance_are_keeping_up() {
        // 4% short of the schedule: puts in flight at the window's edges, not a backlog.
        let summary = open_workers_summary(768.0);
        assert!(summary.verdict().unwrap().keeping_up());
        let text = table(&summary);
        assert!(
            text.contains(
                "verdict: keeping up (puts 768/s answered of 800/s scheduled; queue depth bounded)"
            ),
            "{text}"
        );
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(value["workers"]["verdict"], "keeping up");
        assert_eq!(value["workers"]["falling_behind"], serde_json::json!([]));
        // 6% short is a backlog growing by 48 puts a second.
        assert!(open_workers_summary(752.0)
            .verdict()
            .unwrap()
            .producers_behind
            .is_some());
    }

    #[test]
    fn both_sides_can_fall_behind_at_once() {
        let mut summary = open_workers_summary(600.0);
        for (index, point) in summary.depth.iter_mut().enumerate() {
            point.messages = 100 * index as u64;
        }
        let verdict = summary.verdict().unwrap();
        assert!(verdict.producers_behind.is_some());
        assert_eq!(verdict.consumers_behind_per_s, Some(100.0));
        assert!(table(&summary).contains(
            "falling behind (producers: puts 600/s answered of 800/s scheduled, 59 put retries \
             (HTTP 503 x 59); consumers: queue depth grows by 100 messages/s)"
        ));
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(
            value["workers"]["falling_behind"],
            serde_json::json!(["producers", "consumers"])
        );
    }

    #[test]
    fn producers_are_judged_on_whole_seconds_inside_the_window_only() {
        // The window starts half-way through the first second: that interval holds only the
        // answers of its second half, and would read as a shortfall.
        let mut summary = open_workers_summary(800.0);
        summary.warmup_s = 2.5;
        summary.timeline[0].operations_per_s[Operation::Put.index()] = 400.0;
        assert_eq!(summary.put_rates().unwrap().answered_per_s, 800.0);
        // A shorter last interval counts for its length.
        summary.timeline[9].interval_s = 0.5;
        summary.timeline[9].operations_per_s[Operation::Put.index()] = 200.0;
        let rates = summary.put_rates().unwrap();
        assert!(
            (rates.answered_per_s - 6_500.0 / 8.5).abs() < 1e-9,
            "{rates:?}"
        );
        // With no whole second inside the window the producers cannot be judged…
        summary.timeline.clear();
        assert_eq!(summary.put_rates(), None);
        assert!(summary.verdict().unwrap().keeping_up());
        // …and with too few depth samples too, there is no verdict.
        summary.depth.truncate(2);
        assert_eq!(summary.verdict(), None);
        // A producer shortfall is a verdict even without depth samples.
        let mut summary = open_workers_summary(100.0);
        summary.depth.clear();
        assert_eq!(summary.verdict().unwrap().sides_behind(), vec!["producers"]);
    }

    #[test]
    fn retries_are_listed_apart_from_the_operations() {
        let mut summary = sample_summary();
        summary.retry = Some(RetryPolicy {
            retries_max: 3,
            base_delay_ns: 100_000_000,
        });
        let put = summary.total.operation_mut(Operation::Put);
        put.record_retry(Some(503));
        put.record_retry(Some(503));
        put.record_retry(None);
        let text = table(&summary);
        assert!(
            text.contains("counts above are operations, first tries"),
            "{text}"
        );
        assert!(text.contains("put 3 (HTTP 503 x 2, lost connection x 1)"));
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(value["ops"]["put"]["retries"], 3);
        assert_eq!(value["ops"]["put"]["count"], 1000);
        assert_eq!(value["ops"]["put"]["retries_by_status"]["503"], 2);
        assert_eq!(value["ops"]["put"]["retries_after_connection_errors"], 1);
        assert_eq!(value["retry"]["retries_max"], 3);
        assert_eq!(value["retry"]["base_delay_s"], 0.1);
    }

    #[test]
    fn steps_and_the_knee_are_reported() {
        let mut summary = sample_summary();
        let latency = |p99| LatencySummary {
            p50: 100,
            p90: 200,
            p99,
            p999: p99 * 2,
            p9999: p99 * 3,
            max: p99 * 4,
        };
        summary.steps = vec![
            StepResult {
                target_rate_per_s: 100.0,
                achieved_rate_per_s: 100.0,
                latency_us: Some(latency(900)),
                error_ratio: 0.0,
                passed: Some(true),
            },
            StepResult {
                target_rate_per_s: 200.0,
                achieved_rate_per_s: 180.0,
                latency_us: Some(latency(50_000)),
                error_ratio: 0.2,
                passed: Some(false),
            },
        ];
        summary.search = Some(SearchOutcome {
            bound: LatencyBound::parse("p99=1ms").unwrap(),
            knee_rate_per_s: Some(100.0),
        });
        let text = table(&summary);
        assert!(text.contains("knee: 100 ops/s is the highest rate with p99 <= 1,000 us"));
        assert!(
            text.contains("200        180     50,000    200,000   20.00%  FAIL"),
            "{text}"
        );
        let value: serde_json::Value = serde_json::from_str(&json(&summary)).unwrap();
        assert_eq!(value["knee"]["rate_per_s"], 100.0);
        assert_eq!(value["knee"]["percentile"], "p99");
        assert_eq!(value["steps"][1]["passed"], false);
        assert_eq!(value["steps"][1]["latency_us"]["p99"], 50_000);
        // Runs without steps carry neither key.
        let plain: serde_json::Value = serde_json::from_str(&json(&sample_summary())).unwrap();
        assert!(plain.get("steps").is_none() && plain.get("knee").is_none());
    }

    #[test]
    fn the_csv_has_a_row_per_interval_with_the_depth_sampled_by_then() {
        let text = csv(&sample_summary());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "t_s,put_per_s,get_per_s,delete_per_s,errors_per_s,retries_per_s,p99_us,\
                 end_to_end_p99_us,depth,step_rate_per_s",
                "2.000,200.0,190.0,189.0,0.0,0.0,990,1090,12,",
                "3.000,210.0,200.0,198.0,1.0,0.0,995,,12,",
            ]
        );
    }

    #[test]
    fn grouping() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1234567), "1,234,567");
    }

    #[test]
    fn progress_line_shows_rate_p99_and_errors() {
        let summary = sample_summary();
        let line = progress_line(3.0, false, 2500, 1.0, &summary.total);
        assert!(line.contains("2,500 req/s"), "{line}");
        assert!(line.contains("p99"));
        assert!(line.contains("errors 1"));
    }
}
