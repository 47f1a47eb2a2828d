//! The `--json` file: the headline (the answer first), run settings, per-operation counts,
//! errors and latency percentiles, end-to-end latency, the workers' counts and verdict, the
//! steps and the knee, and the time series; and `Entries`, a JSON object in a given order,
//! which `merge.rs` shares.

use serde::Serialize;

use crate::autoscale::QueueCount;
use crate::metrics::LatencySummary;
use crate::scenario::Operation;
use crate::schedule::{Arrival, LoadModel, NANOSECONDS_PER_SECOND};
use crate::workers::WorkerPlan;

use crate::report::summary::{
    latency_of, Headline, RunSummary, SloVerdict, StepResult, TheoryCheck,
};
use crate::report::table::saturation_warnings;

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
    /// `RunSummary::headline`: the answer first.
    headline: JsonHeadline,
    load_model: &'static str,
    target_rate_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arrival: Option<&'static str>,
    /// `--shape` as given; the target rate is then its mean over the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<&'a str>,
    achieved_rate_per_s: Option<f64>,
    duration_s: Option<f64>,
    warmup_s: Option<f64>,
    grace_s: Option<f64>,
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
    /// Operations scheduled in the window and never sent (`--grace` ran out).
    unsent: u64,
    refill: bool,
    cpus: &'a [usize],
    runtime: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    simulation: Option<&'a str>,
    client_cores: Vec<JsonCoreUsage>,
    error_ratio: Option<f64>,
    max_error_ratio: Option<f64>,
    warnings: Vec<String>,
    retry: Option<JsonRetry>,
    ops: Entries<&'static str, JsonOperation<'a>>,
    end_to_end_us: Option<LatencySummary>,
    /// The mean end-to-end latency, µs: what queueing theory predicts and `--simulate` is
    /// compared by.
    #[serde(skip_serializing_if = "Option::is_none")]
    end_to_end_mean_us: Option<f64>,
    client_send_lag_us: Option<LatencySummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workers: Option<JsonWorkers>,
    #[serde(skip_serializing_if = "<[StepResult]>::is_empty")]
    steps: &'a [StepResult],
    #[serde(skip_serializing_if = "Option::is_none")]
    knee: Option<JsonKnee>,
    timeline: Vec<JsonTimelinePoint>,
    depth: Vec<JsonDepthPoint>,
    /// `--preload`: the messages each queue was filled to, what was there, what was put.
    #[serde(skip_serializing_if = "Option::is_none")]
    preload: Option<JsonPreload>,
    /// `RunSummary::series`: each a name, a unit and `[t_s, value]` points.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    series: Vec<JsonSeries<'a>>,
}

#[derive(Serialize)]
struct JsonPreload {
    target_per_queue: u64,
    found: u64,
    put: u64,
    elapsed_s: Option<f64>,
}

#[derive(Serialize)]
struct JsonSeries<'a> {
    name: &'a str,
    unit: &'a str,
    points: Vec<(Option<f64>, Option<f64>)>,
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
    /// M/M/c beside the measurement; only in a run theory covers (`RunSummary::theory_check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    theory: Option<JsonTheory>,
    /// `--autoscale`: the policy, the replicas over time, the cost and the backlog.
    #[serde(skip_serializing_if = "Option::is_none")]
    autoscale: Option<JsonAutoscale>,
    /// `--slo`: the end-to-end bound and whether the run met it.
    #[serde(skip_serializing_if = "Option::is_none")]
    slo: Option<JsonSlo>,
}

/// The autoscaler in the JSON; times in seconds of run time.
#[derive(Serialize)]
struct JsonAutoscale {
    queue_length: Option<f64>,
    activation_queue_length: Option<f64>,
    min_replicas: usize,
    max_replicas: usize,
    polling_interval_s: Option<f64>,
    cooldown_period_s: Option<f64>,
    sync_period_s: Option<f64>,
    tolerance: Option<f64>,
    scale_up_window_s: Option<f64>,
    scale_down_window_s: Option<f64>,
    count: &'static str,
    cold_start_s: Option<f64>,
    /// Every evaluation (with the length read) and every replica turning ready.
    replicas: Vec<JsonScalePoint>,
    worker_seconds: Option<f64>,
    replicas_max: usize,
    ready_max: usize,
    backlog_peak: u64,
    backlog_peak_t_s: Option<f64>,
    /// From the peak until the depth was back at or below `queue_length`; null if never.
    drain_s: Option<f64>,
}

#[derive(Serialize)]
struct JsonScalePoint {
    t_s: Option<f64>,
    observed: Option<u64>,
    desired: usize,
    ready: usize,
}

/// `Headline` in the JSON; times in seconds of run time, null where the run has no such number.
#[derive(Serialize)]
struct JsonHeadline {
    /// `--slo` and whether the run met it; null without one.
    slo: Option<JsonSlo>,
    end_to_end_p99_us: Option<u64>,
    worker_seconds: Option<f64>,
    backlog_peak: Option<u64>,
    backlog_peak_t_s: Option<f64>,
    /// From the peak until the depth was back near its level before the backlog; null if never.
    drain_time_s: Option<f64>,
}

impl JsonHeadline {
    fn of(headline: &Headline) -> JsonHeadline {
        JsonHeadline {
            slo: headline.slo.as_ref().map(JsonSlo::of),
            end_to_end_p99_us: headline.end_to_end_p99_us,
            worker_seconds: headline.worker_seconds.and_then(rounded),
            backlog_peak: headline.backlog_peak,
            backlog_peak_t_s: headline.backlog_peak_at_s.and_then(rounded),
            drain_time_s: headline.drain_time_s.and_then(rounded),
        }
    }
}

#[derive(Serialize)]
struct JsonSlo {
    percentile: &'static str,
    bound_us: u64,
    measured_us: Option<u64>,
    met: bool,
}

impl JsonSlo {
    fn of(slo: &SloVerdict) -> JsonSlo {
        JsonSlo {
            percentile: slo.bound.percentile,
            bound_us: slo.bound.bound_us,
            measured_us: slo.measured_us,
            met: slo.met(),
        }
    }
}

fn json_autoscale(summary: &RunSummary) -> Option<JsonAutoscale> {
    let policy = summary.autoscale.as_ref()?;
    let outcome = summary.autoscale_outcome()?;
    let seconds = |ns: u64| rounded(ns as f64 / NANOSECONDS_PER_SECOND as f64);
    Some(JsonAutoscale {
        queue_length: rounded(policy.queue_length),
        activation_queue_length: rounded(policy.activation_queue_length),
        min_replicas: policy.min_replicas,
        max_replicas: policy.max_replicas,
        polling_interval_s: seconds(policy.polling_interval_ns),
        cooldown_period_s: seconds(policy.cooldown_period_ns),
        sync_period_s: seconds(policy.sync_period_ns),
        tolerance: rounded(policy.tolerance),
        scale_up_window_s: seconds(policy.scale_up.stabilization_window_ns),
        scale_down_window_s: seconds(policy.scale_down.stabilization_window_ns),
        count: match policy.count {
            QueueCount::All => "all",
            QueueCount::VisibleOnly => "visibleonly",
        },
        cold_start_s: seconds(policy.cold_start_ns),
        replicas: summary
            .scale
            .iter()
            .map(|point| JsonScalePoint {
                t_s: rounded(point.at_s),
                observed: point.observed,
                desired: point.desired,
                ready: point.ready,
            })
            .collect(),
        worker_seconds: rounded(outcome.worker_seconds),
        replicas_max: outcome.replicas_max,
        ready_max: outcome.ready_max,
        backlog_peak: outcome.backlog_peak,
        backlog_peak_t_s: rounded(outcome.backlog_peak_at_s),
        drain_s: outcome.drain_s.and_then(rounded),
    })
}

/// `RunSummary::theory_check` in the JSON; times in seconds, SCVs (squared coefficients of
/// variation) as they are.
#[derive(Serialize)]
struct JsonTheory {
    model: &'static str,
    servers: u32,
    arrival_rate_per_s: Option<f64>,
    arrival_scv_drawn: Option<f64>,
    arrival_scv_sent: Option<f64>,
    work_mean_s: Option<f64>,
    work_scv_drawn: Option<f64>,
    work_done_mean_s: Option<f64>,
    work_scv_done: Option<f64>,
    get_mean_s: Option<f64>,
    delete_mean_s: Option<f64>,
    put_round_trip_mean_s: Option<f64>,
    get_round_trip_mean_s: Option<f64>,
    service_mean_s: Option<f64>,
    service_scv: Option<f64>,
    poll_gap_mean_s: Option<f64>,
    poll_gap_scv: Option<f64>,
    utilisation_predicted: Option<f64>,
    work_utilisation_predicted: Option<f64>,
    work_utilisation_measured: Option<f64>,
    wait_probability_predicted: Option<f64>,
    /// Plain Erlang C for λ and S.
    wait_mean_s_erlang_c: Option<f64>,
    /// The queue's wait for the measured SCVs, and what polling adds to it.
    wait_mean_s_queue: Option<f64>,
    wait_mean_s_polling: Option<f64>,
    wait_mean_s_predicted: Option<f64>,
    wait_mean_s_measured: Option<f64>,
    /// The measured mean's 95% interval is `± wait_mean_s_half_width_95`, from `wait_batches`
    /// batch means (null, 0 with fewer than two seconds measured).
    wait_mean_s_half_width_95: Option<f64>,
    wait_batches: usize,
    end_to_end_mean_s: Option<f64>,
}

impl JsonTheory {
    fn of(check: &TheoryCheck) -> JsonTheory {
        // Seconds to the microsecond: `rounded` keeps three decimals, too few for these. An
        // integer divided by 1e6 is the double nearest the decimal, so it prints as one.
        let seconds = |value: f64| value.is_finite().then(|| (value * 1e6).round() / 1e6);
        JsonTheory {
            model: check.model,
            servers: check.servers,
            arrival_rate_per_s: rounded(check.arrival_rate_per_s),
            arrival_scv_drawn: rounded(check.arrival_scv_drawn),
            arrival_scv_sent: rounded(check.arrival_scv),
            work_mean_s: seconds(check.work_mean_s),
            work_scv_drawn: rounded(check.work_scv_drawn),
            work_done_mean_s: seconds(check.work_done_mean_s),
            work_scv_done: rounded(check.work_scv_done),
            get_mean_s: seconds(check.get_mean_s),
            delete_mean_s: seconds(check.delete_mean_s),
            put_round_trip_mean_s: seconds(check.put_round_trip_mean_s),
            get_round_trip_mean_s: seconds(check.get_round_trip_mean_s),
            service_mean_s: seconds(check.service_mean_s),
            service_scv: rounded(check.service_scv),
            poll_gap_mean_s: seconds(check.poll_gap_mean_s),
            poll_gap_scv: rounded(check.poll_gap_scv),
            utilisation_predicted: rounded(check.prediction.utilisation),
            work_utilisation_predicted: rounded(check.work_utilisation_predicted),
            work_utilisation_measured: rounded(check.work_utilisation_measured),
            wait_probability_predicted: rounded(check.prediction.wait_probability),
            wait_mean_s_erlang_c: seconds(check.erlang_c.wait_mean_s),
            wait_mean_s_queue: seconds(check.prediction.wait_mean_s),
            wait_mean_s_polling: seconds(check.polling_s),
            wait_mean_s_predicted: seconds(check.wait_mean_s_predicted()),
            wait_mean_s_measured: seconds(check.wait_measured.mean),
            wait_mean_s_half_width_95: seconds(check.wait_measured.half_width_95),
            wait_batches: check.wait_measured.batches,
            end_to_end_mean_s: seconds(check.end_to_end_mean_s),
        }
    }
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
    /// Scheduled in the window and never sent; not in `count` nor in the latencies.
    unsent: u64,
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
        theory: summary.theory_check().as_ref().map(JsonTheory::of),
        autoscale: json_autoscale(summary),
        slo: summary.slo_verdict().as_ref().map(JsonSlo::of),
    }
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
                unsent: stats.unsent,
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
        headline: JsonHeadline::of(&summary.headline()),
        load_model: if summary.is_open_loop() {
            "open"
        } else {
            "closed"
        },
        target_rate_per_s,
        arrival,
        shape: summary.shape.as_deref(),
        achieved_rate_per_s: rounded(summary.achieved_rate_per_s()),
        duration_s: rounded(summary.duration_s),
        warmup_s: rounded(summary.warmup_s),
        grace_s: rounded(summary.grace_s),
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
        unsent: total.unsent(),
        refill: summary.refill,
        cpus: &summary.cpus,
        runtime: summary.runtime,
        simulation: summary.simulation.as_deref(),
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
        end_to_end_mean_us: (!total.end_to_end_us.is_empty())
            .then(|| (total.end_to_end_us.mean() * 10.0).round() / 10.0),
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
                step_rate_per_s: point.step_rate_per_s.and_then(rounded),
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
        preload: summary.preload.map(|preload| JsonPreload {
            target_per_queue: preload.target_per_queue,
            found: preload.found,
            put: preload.put,
            elapsed_s: rounded(preload.elapsed_s),
        }),
        series: summary
            .series
            .iter()
            .map(|series| JsonSeries {
                name: &series.name,
                unit: &series.unit,
                points: series
                    .points
                    .iter()
                    .map(|&(t_s, value)| (rounded(t_s), rounded(value)))
                    .collect(),
            })
            .collect(),
    };
    // Serializing plain data into a String cannot fail.
    let mut text = serde_json::to_string(&report).unwrap_or_else(|_| unreachable!());
    text.push('\n');
    text
}
