//! The texts printed to the terminal: the table at the end of a run (settings, the answer in a
//! line (`RunSummary::headline`: the SLO, worker-seconds, the backlog), per-operation counts and
//! latency percentiles, errors, retries, the workers' lines and verdict, the steps and the
//! knee, depth, the preload, the server's memory and disk (peak and last) and client cores),
//! the warnings that the load generator itself limited the run (the JSON lists them too), and
//! the live progress line.

use std::fmt::Write;

use crate::metrics::{LatencySummary, Measurements, OperationStats};
use crate::scenario::Operation;
use crate::schedule::{Arrival, LoadModel, NANOSECONDS_PER_SECOND};
use crate::wire::mark::{PUT_MARK_DIGITS, TIMESTAMP_DIGITS};

use crate::report::summary::{
    latency_of, PutRates, RunSummary, SloVerdict, TheoryCheck, ACHIEVED_RATE_SHARE_WARNING,
    BYTES_UNIT, SERVER_DISK_BYTES_SERIES, SERVER_MESSAGES_SERIES, SERVER_MESSAGE_BYTES_SERIES,
    SERVER_RESIDENT_MEMORY_SERIES, SERVER_SNAPSHOTS_SERIES,
};

/// `1234567` as `1,234,567`.
pub fn grouped(value: u64) -> String {
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

/// How the load was applied, in words: `open loop at 400 ops/s (poisson arrivals)`.
pub fn load_description(load: LoadModel, shape: Option<&str>) -> String {
    if let (Some(shape), LoadModel::Open { rate_per_s, .. }) = (shape, load) {
        return format!(
            "open loop shaped {shape} (mean {} ops/s, {})",
            grouped(rate_per_s.round() as u64),
            match load {
                LoadModel::Open {
                    arrival: Arrival::Poisson,
                    ..
                } => "poisson arrivals",
                _ => "constant gaps",
            }
        );
    }
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
    let engine = match &summary.simulation {
        Some(assumptions) => format!("simulated in virtual time ({assumptions})"),
        None => format!("on CPUs {:?} ({})", summary.cpus, summary.runtime),
    };
    let _ = writeln!(
        out,
        "azq-loadgen: {}, {}, {} connections x pipeline {} {engine}, {} queue(s), \
         {}-byte messages, batch {}{}",
        summary.scenario.name(),
        load_description(summary.load, summary.shape.as_deref()),
        summary.connections,
        summary.pipeline,
        summary.queues,
        summary.message_bytes,
        summary.batch,
        if summary.refill { ", refilled" } else { "" }
    );
    let _ = writeln!(
        out,
        "measured {:.2} s after {:.2} s of warm-up; latency in microseconds{}",
        summary.duration_s,
        summary.warmup_s,
        if summary.is_open_loop() {
            ", from the intended send time (uncorrected: from the actual send time)"
        } else {
            ""
        }
    );
    if let Some(answer) = headline_line(summary) {
        let _ = writeln!(out, "answer: {answer}");
    }
    out.push('\n');
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
    server_lines(summary, &mut out);
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

/// The preload's line, and one per server series (`--server-metrics`): its peak and when,
/// and its last value.
fn server_lines(summary: &RunSummary, out: &mut String) {
    if let Some(preload) = &summary.preload {
        let _ = writeln!(
            out,
            "preload: {} messages put in {:.1} s to fill {} queue(s) to {} each ({} were there)",
            grouped(preload.put),
            preload.elapsed_s,
            summary.queues,
            grouped(preload.target_per_queue),
            grouped(preload.found)
        );
    }
    for series in &summary.series {
        let is_server = [
            SERVER_RESIDENT_MEMORY_SERIES,
            SERVER_MESSAGE_BYTES_SERIES,
            SERVER_DISK_BYTES_SERIES,
            SERVER_MESSAGES_SERIES,
            SERVER_SNAPSHOTS_SERIES,
        ]
        .contains(&series.name.as_str());
        let Some(((peak_at_s, peak), last)) = series.peak_and_final().filter(|_| is_server) else {
            continue;
        };
        let value = |value: f64| {
            if series.unit == BYTES_UNIT {
                bytes_words(value)
            } else {
                grouped(value.round() as u64)
            }
        };
        let _ = writeln!(
            out,
            "{}: {} at most (at {peak_at_s:.1} s), {} at the end",
            series.name,
            value(peak),
            value(last)
        );
    }
}

/// `bytes` in binary units: `512 B`, `1.5 KiB`, `123.4 MiB`, `2.00 GiB`.
fn bytes_words(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    if bytes < KIB {
        format!("{bytes:.0} B")
    } else if bytes < KIB * KIB {
        format!("{:.1} KiB", bytes / KIB)
    } else if bytes < KIB * KIB * KIB {
        format!("{:.1} MiB", bytes / (KIB * KIB))
    } else {
        format!("{:.2} GiB", bytes / (KIB * KIB * KIB))
    }
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
    if let Some(check) = summary.theory_check() {
        theory_lines(out, &check);
    }
    autoscale_lines(summary, out);
    // The SLO's verdict is the table's `answer:` line.
    let _ = writeln!(out, "  verdict: {}", verdict_text(summary));
}

/// `RunSummary::headline` in one line: the SLO's verdict (or the end-to-end p99), the fleet's
/// worker-seconds, the backlog's peak and drain; `None` when the run has none of them (a run
/// that consumes nothing).
fn headline_line(summary: &RunSummary) -> Option<String> {
    let headline = summary.headline();
    let mut parts = Vec::new();
    match (headline.slo, headline.end_to_end_p99_us) {
        (Some(slo), _) => parts.push(slo_words(&slo)),
        (None, Some(p99_us)) => parts.push(format!(
            "end-to-end p99 {} (no SLO given: --slo)",
            latency_words(p99_us)
        )),
        (None, None) => {}
    }
    if let Some(worker_seconds) = headline.worker_seconds {
        parts.push(format!("{worker_seconds:.1} worker-seconds"));
    }
    if let (Some(peak), Some(at_s)) = (headline.backlog_peak, headline.backlog_peak_at_s) {
        let messages = format!(
            "{} message{}",
            grouped(peak),
            if peak == 1 { "" } else { "s" }
        );
        parts.push(match headline.drain_time_s {
            // The depth never rose above its level before the peak.
            Some(0.0) => format!("no backlog (depth at most {messages})"),
            Some(drain_s) => {
                format!("backlog peak {messages} at {at_s:.1} s, drained in {drain_s:.1} s")
            }
            None => {
                format!("backlog peak {messages} at {at_s:.1} s, not drained by the window's end")
            }
        });
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// An SLO's verdict with its margin: `SLO e2e p99 <= 1.0 s met with 0.9 s to spare (measured
/// 100.0 ms)`, `... MISSED by 2.0 s (measured 3.0 s)`.
pub fn slo_words(slo: &SloVerdict) -> String {
    let bound = format!(
        "SLO end-to-end {} <= {}",
        slo.bound.percentile,
        latency_words(slo.bound.bound_us)
    );
    match slo.measured_us {
        Some(measured) if slo.met() => format!(
            "{bound} met with {} to spare (measured {})",
            latency_words(slo.bound.bound_us - measured),
            latency_words(measured)
        ),
        Some(measured) => format!(
            "{bound} MISSED by {} (measured {})",
            latency_words(measured - slo.bound.bound_us),
            latency_words(measured)
        ),
        None => format!("{bound} MISSED: no message went end to end"),
    }
}

/// A latency in the unit a reader takes in at a glance: `850 us` below a millisecond,
/// `12.3 ms` below a second, `1.95 s` below 10 s, `42.0 s` from there.
pub fn latency_words(microseconds: u64) -> String {
    if microseconds >= 10_000_000 {
        format!("{:.1} s", microseconds as f64 / 1e6)
    } else if microseconds >= 1_000_000 {
        format!("{:.2} s", microseconds as f64 / 1e6)
    } else if microseconds >= 1_000 {
        format!("{:.1} ms", microseconds as f64 / 1e3)
    } else {
        format!("{microseconds} us")
    }
}

/// The autoscaler's lines: its policy, the replicas over time (each change), the fleet's cost,
/// the backlog's peak and drain.
fn autoscale_lines(summary: &RunSummary, out: &mut String) {
    let (Some(policy), Some(outcome)) = (&summary.autoscale, summary.autoscale_outcome()) else {
        return;
    };
    let seconds = |ns: u64| ns as f64 / 1e9;
    let _ = writeln!(
        out,
        "  autoscaling: queueLength {}, activation {}, replicas {}..{}, polling {} s, cooldown \
         {} s, HPA sync {} s, windows up {} s / down {} s, count {}, cold start {} s",
        policy.queue_length,
        policy.activation_queue_length,
        policy.min_replicas,
        policy.max_replicas,
        seconds(policy.polling_interval_ns),
        seconds(policy.cooldown_period_ns),
        seconds(policy.sync_period_ns),
        seconds(policy.scale_up.stabilization_window_ns),
        seconds(policy.scale_down.stabilization_window_ns),
        match policy.count {
            crate::autoscale::QueueCount::All => "all",
            crate::autoscale::QueueCount::VisibleOnly => "visible",
        },
        seconds(policy.cold_start_ns)
    );
    let mut changes = Vec::new();
    let mut last = None;
    for point in &summary.scale {
        if last != Some((point.desired, point.ready)) {
            changes.push(format!(
                "{:.1}s {}/{}{}",
                point.at_s,
                point.ready,
                point.desired,
                point
                    .observed
                    .map_or(String::new(), |observed| format!(" (length {observed})"))
            ));
            last = Some((point.desired, point.ready));
        }
    }
    let _ = writeln!(
        out,
        "  replicas (ready/asked for) over time: {}",
        changes.join(", ")
    );
    let _ = writeln!(
        out,
        "  fleet: {:.1} worker-seconds in the measured window, at most {} replicas asked for, {} \
         ready; backlog peak {} messages at {:.1}s, {}",
        outcome.worker_seconds,
        outcome.replicas_max,
        outcome.ready_max,
        grouped(outcome.backlog_peak),
        outcome.backlog_peak_at_s,
        match outcome.drain_s {
            Some(drain_s) => format!("drained to one replica's target in {drain_s:.1} s"),
            None => "not drained by the window's end".to_string(),
        }
    );
}

/// The lines setting a run beside queueing theory (`RunSummary::theory_check`).
fn theory_lines(out: &mut String, check: &TheoryCheck) {
    let ms = |seconds: f64| 1e3 * seconds;
    let _ = writeln!(
        out,
        "  theory ({}): c = {}, λ = {:.1}/s, S = {:.2} ms from get to delete (SCV {:.2})",
        check.model,
        check.servers,
        check.arrival_rate_per_s,
        ms(check.service_mean_s),
        check.service_scv
    );
    let _ = writeln!(
        out,
        "    fleet: arrival gaps SCV {:.2} drawn, {:.2} sent; work {:.2} ms SCV {:.2} drawn, \
         {:.2} ms SCV {:.2} done",
        check.arrival_scv_drawn,
        check.arrival_scv,
        ms(check.work_mean_s),
        check.work_scv_drawn,
        ms(check.work_done_mean_s),
        check.work_scv_done
    );
    let _ = writeln!(
        out,
        "    server: put {:.2} ms, get {:.2} ms round trip; idle workers poll every {:.2} ms \
         (SCV {:.2})",
        ms(check.put_round_trip_mean_s),
        ms(check.get_round_trip_mean_s),
        ms(check.poll_gap_mean_s),
        check.poll_gap_scv
    );
    let _ = writeln!(
        out,
        "    utilisation: predicted {:.1}% working ({:.1}% from get to delete), measured {:.1}% \
         working",
        100.0 * check.work_utilisation_predicted,
        100.0 * check.prediction.utilisation,
        100.0 * check.work_utilisation_measured
    );
    let interval = if check.wait_measured.batches > 0 {
        format!(
            " ± {:.2} (95%, {} batches)",
            ms(check.wait_measured.half_width_95),
            check.wait_measured.batches
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "    mean wait: predicted {:.2} ms (queue {:.2} + polling {:.2}; Erlang C {:.2}, P(wait) \
         {:.1}%), measured {:.2}{interval} ms",
        ms(check.wait_mean_s_predicted()),
        ms(check.prediction.wait_mean_s),
        ms(check.polling_s),
        ms(check.erlang_c.wait_mean_s),
        100.0 * check.prediction.wait_probability,
        ms(check.wait_measured.mean),
    );
}

/// The verdict line's text: which side fell behind and by how much, or why not.
pub fn verdict_text(summary: &RunSummary) -> String {
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
        "steps (worst operation's corrected latency, us):\n  {:>10} {:>10} {:>10} {:>10} {:>8} \
         {:>8}",
        "target/s", "achieved/s", percentile, "max", "errors", "unsent"
    );
    for step in &summary.steps {
        let value = step
            .latency_us
            .and_then(|latency| latency.percentile(percentile));
        let _ = writeln!(
            out,
            "  {:>10} {:>10} {:>10} {:>10} {:>7.2}% {:>8}{}",
            grouped(step.target_rate_per_s.round() as u64),
            grouped(step.achieved_rate_per_s.round() as u64),
            value.map_or("-".to_string(), grouped),
            step.latency_us
                .map_or("-".to_string(), |latency| grouped(latency.max)),
            100.0 * step.error_ratio,
            grouped(step.unsent),
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
                "knee: {} ops/s is the highest rate with {} <= {} us, errors <= {:.2}% and \
                 nothing left unsent (the table above is that step's)",
                grouped(knee.round() as u64),
                search.bound.percentile,
                grouped(search.bound.bound_us),
                100.0 * summary.max_error_ratio
            ),
            None => writeln!(
                out,
                "knee: none; even the lowest rate tried missed {} <= {} us, the error budget, or \
                 left operations unsent",
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

/// Signs that the load generator, not the server, limited the run: then its numbers understate
/// what the server can do, and the user should know before quoting them.
pub fn saturation_warnings(summary: &RunSummary) -> Vec<String> {
    let mut warnings = Vec::new();
    let unsent = summary.total.unsent();
    if unsent > 0 {
        warnings.push(format!(
            "{} operations the schedule started in the measured window (puts, gets, peeks) were \
             never sent: the open loop was still behind its schedule {:.1} s after the window \
             (--grace); the counts and latencies leave them out (and the deletes, updates and \
             refills that would have followed them), and each would have waited longer than \
             that",
            grouped(unsent),
            summary.grace_s
        ));
    }
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
                "only {} of the {} ops/s asked for were answered, counting the operations \
                 scheduled in the measured window (not the warm-up's, even those sent late into \
                 it): the server or the client could not keep up, or there were too few \
                 connections",
                grouped(achieved.round() as u64),
                grouped(rate_per_s.round() as u64)
            ));
        }
    }
    warnings
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1234567), "1,234,567");
    }
}
