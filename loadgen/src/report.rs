//! The results of a run and their text forms: the table printed at the end, the live progress
//! line, and the JSON file. Pure functions of a `RunSummary`, so their shape is unit-tested.

use std::fmt::Write;

use serde::Serialize;

use crate::metrics::{LatencySummary, Measurements, Operation, OperationStats};
use crate::scenario::Scenario;
use crate::schedule::{Arrival, LoadModel};

/// Requests per second of one operation over one interval of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelinePoint {
    /// End of the interval, in seconds since the run started (warm-up included).
    pub end_s: f64,
    /// Answers per second, indexed by `Operation::index`.
    pub operations_per_s: [f64; 5],
}

/// A queue depth sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DepthPoint {
    /// Seconds since the run started.
    pub at_s: f64,
    /// Summed approximate message count of the run's queues.
    pub messages: u64,
}

/// How one client core's thread spent the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreUsage {
    pub cpu: usize,
    /// From run time zero to the core's end.
    pub elapsed_ns: u64,
    /// On the CPU.
    pub running_ns: u64,
    /// Runnable but waiting for the CPU: another process had it.
    pub waiting_ns: u64,
}

impl CoreUsage {
    /// Share of the run spent on the CPU.
    pub fn running_ratio(&self) -> f64 {
        self.running_ns as f64 / self.elapsed_ns.max(1) as f64
    }

    /// Share of the run spent waiting for the CPU.
    pub fn waiting_ratio(&self) -> f64 {
        self.waiting_ns as f64 / self.elapsed_ns.max(1) as f64
    }
}

/// Everything a run produced, with the settings needed to read it.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub scenario: Scenario,
    pub load: LoadModel,
    pub connections: usize,
    pub pipeline: usize,
    pub cpus: Vec<usize>,
    pub queues: usize,
    pub message_bytes: usize,
    pub batch: u32,
    /// Consumers replaced each deleted message (`--refill`).
    pub refill: bool,
    pub warmup_s: f64,
    /// The measured window: the configured duration, or for `--requests` the time until the
    /// last answer.
    pub duration_s: f64,
    pub total: Measurements,
    pub timeline: Vec<TimelinePoint>,
    pub depth: Vec<DepthPoint>,
    /// Per client core, when the kernel reports it.
    pub client_cores: Vec<CoreUsage>,
    pub max_error_ratio: f64,
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

    /// Chains started per second (puts, gets, peeks): what `--rate` targets.
    pub fn achieved_rate_per_s(&self) -> f64 {
        [Operation::Put, Operation::Get, Operation::Peek]
            .iter()
            .map(|&operation| self.throughput_per_s(self.total.operation(operation)))
            .sum()
    }

    /// Whether the error ratio is within `--max-error-rate`.
    pub fn within_error_budget(&self) -> bool {
        self.total.error_ratio() <= self.max_error_ratio
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
        "azq-loadgen: {}, {}, {} connections x pipeline {} on CPUs {:?}, {} queue(s), \
         {}-byte messages, batch {}{}",
        summary.scenario.name(),
        load_description(summary.load),
        summary.connections,
        summary.pipeline,
        summary.cpus,
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
            "end-to-end message",
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
fn rounded(value: f64) -> Option<f64> {
    value.is_finite().then(|| (value * 1000.0).round() / 1000.0)
}

/// A JSON object whose keys keep the order given (serde_json's own map sorts them).
struct Entries<K, V>(Vec<(K, V)>);

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
    client_cores: Vec<JsonCoreUsage>,
    error_ratio: Option<f64>,
    max_error_ratio: Option<f64>,
    warnings: Vec<String>,
    ops: Entries<&'static str, JsonOperation<'a>>,
    end_to_end_us: Option<LatencySummary>,
    client_send_lag_us: Option<LatencySummary>,
    timeline: Vec<JsonTimelinePoint>,
    depth: Vec<JsonDepthPoint>,
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
    throughput_per_s: Option<f64>,
    latency_us: Option<LatencySummary>,
    latency_uncorrected_us: Option<LatencySummary>,
}

#[derive(Serialize)]
struct JsonTimelinePoint {
    t_s: Option<f64>,
    ops_per_s: Entries<&'static str, Option<f64>>,
}

#[derive(Serialize)]
struct JsonDepthPoint {
    t_s: Option<f64>,
    messages: u64,
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
        ops: Entries(ops),
        end_to_end_us: latency_of(&total.end_to_end_us),
        client_send_lag_us: latency_of(&total.send_lag_us),
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
                    operations_per_s: [200.0, 190.0, 0.0, 0.0, 189.0],
                },
                TimelinePoint {
                    end_s: 3.0,
                    operations_per_s: [210.0, 200.0, 0.0, 0.0, 198.0],
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
