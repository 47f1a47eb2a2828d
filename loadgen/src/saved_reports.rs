//! Every text the load generator writes, byte for byte: the table, the JSON, the CSV and the
//! SVG of fixed run summaries (an open mixed run, a closed and an open workers run, a knee
//! search, plain rate steps, a refilled update run with errors and retries, an empty run, a
//! shaped and autoscaled workers run, a preloaded backlog with the server's memory and disk),
//! the
//! progress line, and the table, JSON, CSV, SVG and interval log of a fixed merge, compared with
//! the files saved under `loadgen/tests/reports/`.
//!
//! A change to what a report says shows up here as a failed comparison. When the change is
//! meant, `LOADGEN_BLESS=1 cargo test -p azq-loadgen saved_reports` saves the new texts; the
//! diff of `loadgen/tests/reports/` is then the change to review.

use std::path::PathBuf;

use crate::merge::{self, Interval, Merged};
use crate::metrics::{new_histogram, CoreUsage, LatencySummary, Measurements, OperationStats};
use crate::plot;
use crate::report::tests::{sample_summary, workers_summary};
use crate::report::{
    self, server_series, DepthPoint, PreloadOutcome, RunSummary, SearchOutcome, ServerPoint,
    StepResult, TimelinePoint,
};
use crate::retry::RetryPolicy;
use crate::scenario::{Operation, Scenario};
use crate::schedule::{Arrival, LoadModel};
use crate::steps::LatencyBound;
use crate::workers::{WorkTime, WorkerPlan};

/// Compares `actual` with the saved file `name`, or with `LOADGEN_BLESS` set, saves it.
fn assert_saved(name: &str, actual: &str) {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "reports", name]
        .iter()
        .collect();
    if std::env::var_os("LOADGEN_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap_or_else(|error| panic!("{path:?}: {error}"));
        return;
    }
    let saved = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!("{path:?}: {error} (LOADGEN_BLESS=1 saves what the code writes now)")
    });
    if saved != actual {
        let line = saved
            .lines()
            .zip(actual.lines())
            .position(|(saved, actual)| saved != actual)
            .unwrap_or_else(|| saved.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from the saved report at line {}:\n  saved:  {:?}\n  now:    {:?}\n\
             (LOADGEN_BLESS=1 saves what the code writes now)",
            line + 1,
            saved.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// The four files of a run: `NAME.txt` (the table), `.json`, `.csv`, `.svg`.
fn assert_run_saved(name: &str, summary: &RunSummary) {
    assert_saved(&format!("{name}.txt"), &report::table(summary));
    assert_saved(&format!("{name}.json"), &report::json(summary));
    assert_saved(&format!("{name}.csv"), &report::csv(summary));
    assert_saved(&format!("{name}.svg"), &plot::svg(summary));
}

fn latency(p99: u64) -> LatencySummary {
    LatencySummary {
        p50: 100,
        p90: 200,
        p99,
        p999: p99 * 2,
        p9999: p99 * 3,
        max: p99 * 4,
    }
}

/// A put scheduled at 800/s for 10 s after 2 s of warm-up by one producer, four workers behind
/// it: puts answered at 600/s after 59 retries of a 503, 1,200 of the 8,000 still unsent when
/// the grace ran out, the depth growing by 100 messages a second, and a client that lagged and
/// waited for its CPU.
fn open_workers_falling_behind() -> RunSummary {
    let mut summary = workers_summary();
    summary.load = LoadModel::Open {
        rate_per_s: 800.0,
        arrival: Arrival::Constant,
    };
    summary.workers = Some(WorkerPlan {
        work_time: WorkTime::LogNormal {
            p50_ns: 20_000_000,
            p99_ns: 200_000_000,
        },
        crash_ratio: 0.05,
        poll_backoff_min_ns: 100_000_000,
        poll_backoff_max_ns: 1_000_000_000,
    });
    summary.worker_lanes = 4;
    summary.connections = 5;
    summary.duplicates_from_retried_puts = None;
    summary.retry = Some(RetryPolicy {
        retries_max: 3,
        base_delay_ns: 1_000_000_000,
    });
    summary.warmup_s = 2.0;
    summary.duration_s = 10.0;
    summary.last_answer_s = 14.0;
    let mut puts = OperationStats::default();
    for index in 0..6_800 {
        puts.record_success(1_000 + index, 900);
    }
    puts.unsent = 1_200;
    for _ in 0..59 {
        puts.record_retry(Some(503));
    }
    puts.record_retry(None);
    summary.total.operations[Operation::Put.index()] = puts;
    summary.total.workers.crashed = 1;
    summary.total.workers.redelivered_after_crash = 1;
    summary.total.connection_errors = 2;
    summary.total.protocol_errors = 1;
    for _ in 0..50 {
        summary.total.record_send_lag(4_000);
    }
    summary.timeline = (1..=12)
        .map(|second| TimelinePoint {
            end_s: f64::from(second),
            interval_s: 1.0,
            operations_per_s: [600.0, 300.0, 0.0, 0.0, 290.0],
            errors_per_s: 0.5,
            retries_per_s: 6.0,
            latency_p99_us: Some(12_000 + 100 * second as u64),
            end_to_end_p99_us: (second > 2).then_some(250_000),
            step_rate_per_s: None,
            wait_ns: Default::default(),
        })
        .collect();
    summary.depth = (2..=12)
        .map(|second| DepthPoint {
            at_s: f64::from(second),
            messages: 100 * (second as u64 - 2),
        })
        .collect();
    summary.client_cores = vec![
        CoreUsage {
            cpu: 2,
            elapsed_ns: 14_000_000_000,
            running_ns: 7_000_000_000,
            waiting_ns: 3_000_000_000,
        },
        CoreUsage {
            cpu: 3,
            elapsed_ns: 14_000_000_000,
            running_ns: 2_000_000_000,
            waiting_ns: 0,
        },
    ];
    summary.cpus = vec![2, 3];
    summary.runtime = "portable";
    summary
}

/// A knee search over three steps: the first passed, the next two failed.
fn find_max() -> RunSummary {
    let mut summary = sample_summary();
    summary.scenario = Scenario::Put;
    summary.steps = vec![
        StepResult {
            target_rate_per_s: 100.0,
            achieved_rate_per_s: 100.0,
            latency_us: Some(latency(900)),
            error_ratio: 0.0,
            unsent: 0,
            passed: Some(true),
        },
        StepResult {
            target_rate_per_s: 200.0,
            achieved_rate_per_s: 180.0,
            latency_us: Some(latency(50_000)),
            error_ratio: 0.2,
            unsent: 400,
            passed: Some(false),
        },
        StepResult {
            target_rate_per_s: 150.0,
            achieved_rate_per_s: 149.0,
            latency_us: None,
            error_ratio: 1.0,
            unsent: 0,
            passed: Some(false),
        },
    ];
    summary.search = Some(SearchOutcome {
        bound: LatencyBound::parse("p99.9=1ms").unwrap(),
        knee_rate_per_s: Some(100.0),
    });
    for (index, point) in summary.timeline.iter_mut().enumerate() {
        point.step_rate_per_s = Some(100.0 * (index + 1) as f64);
    }
    summary
}

#[test]
fn an_open_mixed_run() {
    assert_run_saved("mixed-open", &sample_summary());
}

#[test]
fn a_closed_workers_run() {
    assert_run_saved("workers-closed", &workers_summary());
}

#[test]
fn an_open_workers_run_falling_behind_on_both_sides() {
    assert_run_saved("workers-open-behind", &open_workers_falling_behind());
}

/// The closed workers run after a preload of 20,000 messages (6,663 of them put, the rest
/// found from an interrupted fill), with every series of the server's metrics: memory and
/// disk falling as the backlog drains, a snapshot written in the second second.
fn preloaded_backlog() -> RunSummary {
    use crate::wire::exposition::ServerMetrics;
    let mut summary = workers_summary();
    summary.preload = Some(PreloadOutcome {
        target_per_queue: 20_000,
        found: 13_337,
        put: 6_663,
        elapsed_s: 0.25,
    });
    let point = |at_s, messages: f64| ServerPoint {
        at_s,
        metrics: ServerMetrics {
            resident_memory_bytes: Some(40_000_000.0 + messages * 1_400.0),
            message_bytes: Some(messages * 1_152.0),
            messages: Some(messages),
            disk_bytes: Some(1_048_576.0 + messages * 1_200.0),
            snapshots_running: Some(if at_s == 1.0 { 1.0 } else { 0.0 }),
        },
    };
    summary.series = server_series(&[point(0.0, 20_000.0), point(1.0, 9_000.0), point(2.0, 120.0)]);
    summary
}

#[test]
fn a_preloaded_backlog_with_the_servers_memory_and_disk() {
    assert_run_saved("workers-backlog", &preloaded_backlog());
}

/// The falling-behind run, shaped as a spike and autoscaled: KEDA's defaults scaled down to a
/// 2 s poll with a 1 s cold start, at most 8 replicas, judged against an SLO of 60 s.
fn autoscaled_spike() -> RunSummary {
    use crate::autoscale::AutoscalePolicy;
    use crate::report::ScalePoint;

    let mut summary = open_workers_falling_behind();
    summary.shape = Some("spike:base=200/s,peak=1400/s,at=2s,for=4s".to_string());
    summary.autoscale = Some(
        AutoscalePolicy::parse("max=8,polling=2s,sync=2s,cooldown=6s,cold-start=1s", 8).unwrap(),
    );
    summary.slo = Some(LatencyBound::parse("p99=60s").unwrap());
    let point = |at_s: f64, observed: Option<u64>, desired: usize, ready: usize| ScalePoint {
        at_s,
        observed,
        desired,
        ready,
    };
    summary.scale = vec![
        point(0.0, Some(0), 0, 0),
        point(2.0, Some(40), 1, 0),
        point(3.0, None, 1, 1),
        point(4.0, Some(300), 5, 1),
        point(5.0, None, 5, 5),
        point(6.0, Some(900), 8, 5),
        point(7.0, None, 8, 8),
        point(8.0, Some(700), 8, 8),
    ];
    summary.series = crate::report::replica_series(&summary.scale, 12.0);
    summary
}

#[test]
fn a_shaped_autoscaled_workers_run() {
    assert_run_saved("workers-autoscaled", &autoscaled_spike());
}

#[test]
fn a_knee_search() {
    assert_run_saved("find-max", &find_max());
}

#[test]
fn a_knee_search_that_found_no_knee() {
    let mut summary = find_max();
    summary.search = Some(SearchOutcome {
        bound: LatencyBound::parse("max=20ms").unwrap(),
        knee_rate_per_s: None,
    });
    summary.max_error_ratio = 0.0;
    assert_saved("find-max-none.txt", &report::table(&summary));
    assert_saved("find-max-none.json", &report::json(&summary));
}

#[test]
fn plain_rate_steps() {
    let mut summary = find_max();
    summary.search = None;
    for step in &mut summary.steps {
        step.passed = None;
    }
    summary.load = LoadModel::Open {
        rate_per_s: 150.0,
        arrival: Arrival::Constant,
    };
    assert_run_saved("rate-steps", &summary);
}

#[test]
fn a_refilled_update_run_with_errors_and_retries() {
    let mut summary = sample_summary();
    summary.scenario = Scenario::Update;
    summary.refill = true;
    summary.load = LoadModel::Closed;
    summary.batch = 16;
    summary.message_bytes = 64;
    summary.max_error_ratio = 0.001;
    summary.retry = Some(RetryPolicy {
        retries_max: 5,
        base_delay_ns: 250_000_000,
    });
    let update = summary.total.operation_mut(Operation::Update);
    for value in 0..300 {
        update.record_success(40 + value, 40 + value);
    }
    update.record_error(503, Some(b"ServerBusy"));
    update.record_error(500, None);
    update.record_retry(Some(503));
    update.record_retry(Some(500));
    update.record_retry(None);
    summary.total.connection_errors = 1_234_567;
    assert_run_saved("update-refill", &summary);
}

#[test]
fn an_empty_peek_run() {
    let mut summary = sample_summary();
    summary.scenario = Scenario::Peek;
    summary.load = LoadModel::Closed;
    summary.total = Measurements::default();
    summary.timeline.clear();
    summary.depth.clear();
    summary.client_cores.clear();
    assert_run_saved("peek-empty", &summary);
}

#[test]
fn progress_lines() {
    let summary = sample_summary();
    let lines = [
        report::progress_line(0.5, true, 0, 0.5, &Measurements::default()),
        report::progress_line(3.0, false, 2_500, 1.0, &summary.total),
        report::progress_line(12_345.6, false, 7, 0.0, &summary.total),
    ];
    assert_saved("progress.txt", &(lines.join("\n") + "\n"));
}

/// Two logs: puts and gets from one, puts and end-to-end latency from another started 1.5 s
/// later.
fn merged() -> Merged {
    let interval = |tag: &str, start_unix_s: f64, values: &[u64]| {
        let mut histogram = new_histogram();
        for &value in values {
            histogram.record(value).unwrap();
        }
        Interval {
            tag: tag.to_string(),
            start_unix_s,
            duration_s: 1.0,
            histogram,
        }
    };
    let spread = |low: u64, count: u64| (0..count).map(|index| low + index * 7).collect::<Vec<_>>();
    merge::merge(vec![
        (
            "a.hlog".to_string(),
            vec![
                interval("put", 1_795_305_600.0, &spread(40, 500)),
                interval("get", 1_795_305_600.0, &spread(30, 200)),
                interval("put", 1_795_305_601.0, &spread(45, 700)),
            ],
        ),
        (
            "b.hlog".to_string(),
            vec![
                interval("put", 1_795_305_601.5, &spread(50, 300)),
                interval("end-to-end", 1_795_305_601.5, &spread(2_000, 90)),
                interval("put", 1_795_305_602.5, &[1_000_000]),
            ],
        ),
    ])
}

#[test]
fn a_merge() {
    let merged = merged();
    assert_saved("merge.txt", &merge::table(&merged));
    assert_saved("merge.json", &merge::json(&merged));
    assert_saved("merge.csv", &merge::csv(&merged));
    assert_saved("merge.svg", &plot::merged_svg(&merged));
    let log = merge::write_log(&merged).unwrap();
    assert_saved("merge.hlog", &String::from_utf8(log).unwrap());
}
