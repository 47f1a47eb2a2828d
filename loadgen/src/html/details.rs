//! The HTML report's details, after the answer and the charts: the run, the operations, the
//! other latencies, the workers, the autoscaler, the steps and the client cores, each row named
//! in a planner's words with what it counts; then, folded (`<details>`), the raw tables by the
//! JSON report's own names (the theory check among them) and the table as printed.
//!
//! Every number in a table is the JSON report's own text, and its cell names the value it
//! shows with a JSON pointer (`data-json="/ops/put/count"`), so the tests check one against
//! the other.

use std::fmt::Write;

use serde_json::Value;

use crate::plot::escape;
use crate::report::{self, RunSummary};

use super::words::{seconds_words, utc_words};

/// Percentile columns of a latency summary, in the JSON's names.
const PERCENTILES: [(&str, &str); 6] = [
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p999", "p99.9"),
    ("p9999", "p99.99"),
    ("max", "max"),
];

/// A row of a table in words: the JSON key under the table's object, what a planner calls it,
/// and what it counts (its unit, where the heading does not say).
type Row = (&'static str, &'static str, &'static str);

/// The run's settings and totals, from the JSON's top level.
const RUN_ROWS: &[Row] = &[
    ("scenario", "Scenario", ""),
    (
        "load_model",
        "Load",
        "open: paced by a schedule; closed: each answer sends the next",
    ),
    ("arrival", "Arrivals", "gaps between scheduled sends"),
    ("shape", "Shape", "target rate over time (--shape)"),
    (
        "target_rate_per_s",
        "Target rate",
        "per second (a shaped run: the mean)",
    ),
    (
        "achieved_rate_per_s",
        "Achieved rate",
        "per second started: puts, gets and peeks (a workers run: puts)",
    ),
    ("duration_s", "Measured for", "seconds"),
    ("warmup_s", "Warm-up", "seconds before the measured window"),
    (
        "grace_s",
        "Grace",
        "seconds after the window a late open loop still sent what it scheduled (--grace)",
    ),
    ("requests", "Requests", "sent in the measured window"),
    ("errors", "Errors", "error answers and lost requests"),
    ("error_ratio", "Error ratio", "errors per request"),
    (
        "max_error_ratio",
        "Error budget",
        "errors per request allowed (--max-error-rate)",
    ),
    ("connection_errors", "Connection errors", ""),
    ("protocol_errors", "Unreadable answers", ""),
    (
        "unsent",
        "Never sent",
        "scheduled in the window, still unsent when the grace ran out",
    ),
    ("connections", "Connections", ""),
    ("pipeline", "Pipeline", "requests in flight per connection"),
    ("queues", "Queues", ""),
    ("message_bytes", "Message size", "bytes"),
    ("batch", "Batch", "messages per Get"),
    (
        "refill",
        "Refilled",
        "each deleted message replaced (--refill)",
    ),
    (
        "runtime",
        "Client runtime",
        "the load generator's event loop",
    ),
];

/// The worker fleet, from `/workers`.
const WORKER_ROWS: &[Row] = &[
    (
        "workers",
        "Workers",
        "getting, working and deleting at once",
    ),
    ("work_time", "Work time", "per message (--work-time)"),
    (
        "crash_ratio",
        "Crash rate",
        "share of messages whose worker crashed before the delete",
    ),
    ("received", "Messages received", ""),
    ("processed", "Messages processed", ""),
    ("crashed", "Abandoned by a crash", "messages"),
    ("deleted", "Messages deleted", ""),
    (
        "processed_more_than_once",
        "Processed more than once",
        "messages",
    ),
    (
        "duplicates_from_retried_puts",
        "Stored twice by a retried put",
        "messages, warm-up included",
    ),
    (
        "redelivered_after_lease_expiry",
        "Redelivered after the lease ran out",
        "messages",
    ),
    (
        "redelivered_after_crash",
        "Redelivered after a crash",
        "messages",
    ),
    (
        "lease_expired_before_delete",
        "Deleted after the lease ran out",
        "messages",
    ),
    (
        "deletes_pop_receipt_mismatch",
        "Deletes refused: PopReceiptMismatch",
        "",
    ),
    (
        "deletes_message_not_found",
        "Deletes refused: MessageNotFound",
        "",
    ),
    (
        "utilisation",
        "Utilisation",
        "share of the workers' time spent working",
    ),
    (
        "depth_growth_per_s",
        "Queue depth growth",
        "messages per second over the measured window (least squares)",
    ),
    (
        "puts_scheduled_per_s",
        "Puts scheduled",
        "per second in the measured window",
    ),
    (
        "puts_answered_in_window_per_s",
        "Puts answered",
        "per second inside the measured window",
    ),
    ("verdict", "Verdict", "whether the fleet kept up"),
];

/// The autoscaler, from `/workers/autoscale`.
const AUTOSCALE_ROWS: &[Row] = &[
    (
        "worker_seconds",
        "Worker-seconds",
        "replica-seconds asked for in the measured window",
    ),
    ("replicas_max", "Most replicas asked for", ""),
    ("ready_max", "Most replicas ready", ""),
    ("backlog_peak", "Backlog peak", "messages"),
    ("backlog_peak_t_s", "Backlog peak at", "seconds of run time"),
    (
        "drain_s",
        "Back to one replica's target",
        "seconds after the peak (n/a: not by the window's end)",
    ),
    (
        "queue_length",
        "Messages per replica",
        "the target (queueLength)",
    ),
    (
        "activation_queue_length",
        "Activation",
        "messages (activationQueueLength)",
    ),
    ("min_replicas", "Fewest replicas", "(minReplicaCount)"),
    ("max_replicas", "Most replicas", "(maxReplicaCount)"),
    (
        "polling_interval_s",
        "KEDA polls every",
        "seconds (pollingInterval)",
    ),
    (
        "cooldown_period_s",
        "KEDA cooldown",
        "seconds before scaling to zero (cooldownPeriod)",
    ),
    ("sync_period_s", "HPA syncs every", "seconds"),
    (
        "tolerance",
        "HPA tolerance",
        "share of the target within which nothing changes",
    ),
    (
        "scale_up_window_s",
        "Scale-up window",
        "seconds of stabilisation",
    ),
    (
        "scale_down_window_s",
        "Scale-down window",
        "seconds of stabilisation",
    ),
    (
        "count",
        "Length counted",
        "all messages, or visible ones only",
    ),
    (
        "cold_start_s",
        "Cold start",
        "seconds from asked for to ready",
    ),
];

/// Everything after the charts.
pub(super) fn details(summary: &RunSummary, data: &Value, out: &mut String) {
    out.push_str("<h2 id=\"details\">Details</h2>\n<h3>The run</h3>\n");
    let _ = writeln!(
        out,
        "<p>Started at {}; measured for {} after {} of warm-up.</p>",
        utc_words(summary.start_unix_s),
        seconds_words(summary.duration_s),
        seconds_words(summary.warmup_s)
    );
    worded_table("run", data, "", RUN_ROWS, out);
    operations(summary, data, out);
    other_latencies(summary, data, out);
    if let Some(workers) = data.get("workers") {
        out.push_str("<h3 id=\"workers-section\">Workers</h3>\n");
        worded_table("workers-table", workers, "/workers", WORKER_ROWS, out);
        if let Some(autoscale) = workers.get("autoscale") {
            out.push_str("<h3>Autoscaling (KEDA's azure-queue scaler and the HPA)</h3>\n");
            worded_table(
                "autoscale-table",
                autoscale,
                "/workers/autoscale",
                AUTOSCALE_ROWS,
                out,
            );
        }
    }
    steps(data, out);
    client_cores(data, out);
    raw_tables(data, out);
    let _ = write!(
        out,
        "<details id=\"text-table-section\"><summary>The table as printed</summary>\n\
         <pre id=\"text-table\">{}</pre>\n</details>\n",
        escape(&report::table(summary))
    );
}

/// The JSON's objects as they are, by its own names: folded, for whoever checks a number.
fn raw_tables(data: &Value, out: &mut String) {
    out.push_str(
        "<details id=\"raw-tables\"><summary>Raw tables, by the JSON report's names</summary>\n\
         <h3>Run</h3>\n",
    );
    scalar_table("raw-settings", data, "", out);
    for (pointer, heading, id) in [
        ("/headline", "Headline", "raw-headline"),
        ("/headline/slo", "Headline: the SLO", "raw-headline-slo"),
        ("/workers", "Workers", "raw-workers"),
        (
            "/workers/theory",
            "Against queueing theory (Erlang C, Cosmetatos or Allen–Cunneen, with polling)",
            "raw-theory",
        ),
        (
            "/workers/autoscale",
            "Autoscaling (KEDA's azure-queue scaler and the HPA)",
            "raw-autoscale",
        ),
        ("/workers/slo", "End-to-end SLO", "raw-slo"),
    ] {
        if let Some(value) = data.pointer(pointer).filter(|value| value.is_object()) {
            let _ = writeln!(out, "<h3>{}</h3>", escape(heading));
            scalar_table(id, value, pointer, out);
        }
    }
    out.push_str("</details>\n");
}

/// A three-column table of the `rows` present in the object `value` (at `pointer` in the
/// JSON): what a planner calls it, the JSON's own value, what it counts.
fn worded_table(id: &str, value: &Value, pointer: &str, rows: &[Row], out: &mut String) {
    let _ = writeln!(out, "<table id=\"{}\" class=\"worded\">", escape(id));
    for &(key, label, note) in rows {
        let Some(entry) = value.get(key) else {
            continue;
        };
        if entry.is_object() || entry.is_array() {
            continue;
        }
        let _ = write!(out, "<tr><th>{}</th>", escape(label));
        number_cell(
            value,
            &format!("{pointer}/{}", pointer_token(key)),
            &[key],
            out,
        );
        let _ = writeln!(out, "<td class=\"note\">{}</td></tr>", escape(note));
    }
    out.push_str("</table>\n");
}

/// Per operation, in the run's order (the parsed JSON's keys are sorted): counts, errors,
/// retries, rate and corrected latency percentiles.
fn operations(summary: &RunSummary, data: &Value, out: &mut String) {
    let Some(Value::Object(ops)) = data.get("ops") else {
        return;
    };
    out.push_str(
        "<h3>Operations</h3>\n<p>Latency in microseconds, from each request's intended send \
         (corrected for coordinated omission in an open loop).</p>\n<table id=\"operations\">\n\
         <tr><th>Operation</th><th>Answers</th><th>Errors</th><th>Retries</th>\
         <th>Per second</th>",
    );
    for (_, heading) in PERCENTILES {
        let _ = write!(out, "<th>{heading}</th>");
    }
    out.push_str("<th>Errors by status and code</th></tr>\n");
    let in_order = summary
        .operations()
        .iter()
        .filter_map(|operation| ops.get_key_value(operation.name()));
    for (name, operation) in in_order {
        let pointer = format!("/ops/{}", pointer_token(name));
        let _ = write!(out, "<tr><th>{}</th>", escape(name));
        for key in ["count", "errors", "retries", "throughput_per_s"] {
            number_cell(operation, &format!("{pointer}/{key}"), &[key], out);
        }
        for (key, _) in PERCENTILES {
            number_cell(
                operation,
                &format!("{pointer}/latency_us/{key}"),
                &["latency_us", key],
                out,
            );
        }
        let causes: Vec<String> = ["errors_by_status", "errors_by_code"]
            .iter()
            .filter_map(|key| operation.get(key)?.as_object())
            .flatten()
            .map(|(cause, count)| format!("{cause} x {count}"))
            .collect();
        let _ = writeln!(out, "<td>{}</td></tr>", escape(&causes.join(", ")));
    }
    out.push_str("</table>\n");
}

/// End-to-end latency, the client's send lag and each operation's uncorrected latency (in the
/// run's order).
fn other_latencies(summary: &RunSummary, data: &Value, out: &mut String) {
    let mut rows: Vec<(String, String)> = [
        ("End to end (put to receipt or delete)", "end_to_end_us"),
        ("The client's lag in sending", "client_send_lag_us"),
    ]
    .iter()
    .filter(|(_, key)| data.get(key).is_some_and(Value::is_object))
    .map(|(label, key)| (label.to_string(), format!("/{key}")))
    .collect();
    if let Some(Value::Object(ops)) = data.get("ops") {
        let in_order = summary
            .operations()
            .iter()
            .filter_map(|operation| ops.get_key_value(operation.name()));
        for (name, operation) in in_order {
            if operation
                .get("latency_uncorrected_us")
                .is_some_and(Value::is_object)
            {
                rows.push((
                    format!("{name}, uncorrected (from the actual send)"),
                    format!("/ops/{}/latency_uncorrected_us", pointer_token(name)),
                ));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "<h3>Other latencies</h3>\n<p>In microseconds.</p>\n<table id=\"latencies\">\n\
         <tr><th>Latency</th>",
    );
    for (_, heading) in PERCENTILES {
        let _ = write!(out, "<th>{heading}</th>");
    }
    out.push_str("</tr>\n");
    for (label, pointer) in rows {
        let _ = write!(out, "<tr><th>{}</th>", escape(&label));
        let summary = data.pointer(&pointer).unwrap_or(&Value::Null);
        for (key, _) in PERCENTILES {
            number_cell(summary, &format!("{pointer}/{key}"), &[key], out);
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A stepped run's steps.
fn steps(data: &Value, out: &mut String) {
    let Some(Value::Array(steps)) = data.get("steps") else {
        return;
    };
    out.push_str(
        "<h3>Steps</h3>\n<table id=\"steps\">\n<tr><th>Target per second</th>\
         <th>Achieved per second</th><th>Error ratio</th><th>p99 (microseconds, worst \
         operation)</th><th>Met the bound</th></tr>\n",
    );
    for (index, step) in steps.iter().enumerate() {
        out.push_str("<tr>");
        for path in [
            &["target_rate_per_s"][..],
            &["achieved_rate_per_s"],
            &["error_ratio"],
            &["latency_us", "p99"],
            &["passed"],
        ] {
            number_cell(
                step,
                &format!("/steps/{index}/{}", path.join("/")),
                path,
                out,
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// How busy the client's own cores were.
fn client_cores(data: &Value, out: &mut String) {
    let Some(Value::Array(cores)) = data.get("client_cores") else {
        return;
    };
    if cores.is_empty() {
        return;
    }
    out.push_str(
        "<h3>The load generator's cores</h3>\n<table id=\"client-cores\">\n<tr><th>CPU</th>\
         <th>Share of the run on the CPU</th><th>Share waiting for it</th></tr>\n",
    );
    for (index, core) in cores.iter().enumerate() {
        out.push_str("<tr>");
        for key in ["cpu", "running_ratio", "waiting_ratio"] {
            number_cell(core, &format!("/client_cores/{index}/{key}"), &[key], out);
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A two-column table of every scalar entry of the object `value` (at `pointer` in the
/// JSON); arrays of scalars are shown joined, objects are left to their own tables.
fn scalar_table(id: &str, value: &Value, pointer: &str, out: &mut String) {
    let Value::Object(entries) = value else {
        return;
    };
    let _ = writeln!(out, "<table id=\"{}\">", escape(id));
    for (key, entry) in entries {
        let scalar_list = entry.as_array().filter(|items| {
            items
                .iter()
                .all(|item| !item.is_object() && !item.is_array())
        });
        if entry.is_object() || (entry.is_array() && scalar_list.is_none()) {
            continue;
        }
        let _ = write!(out, "<tr><th>{}</th>", escape(key));
        match scalar_list {
            Some(items) => {
                let texts: Vec<String> = items.iter().map(text_of).collect();
                let _ = writeln!(out, "<td>{}</td></tr>", escape(&texts.join(", ")));
            }
            None => {
                number_cell(
                    value,
                    &format!("{pointer}/{}", pointer_token(key)),
                    &[key],
                    out,
                );
                out.push_str("</tr>\n");
            }
        }
    }
    out.push_str("</table>\n");
}

/// A cell showing the value at `path` under `value`, named by its JSON `pointer`.
fn number_cell(value: &Value, pointer: &str, path: &[&str], out: &mut String) {
    let entry = path
        .iter()
        .try_fold(value, |value, key| value.get(key))
        .unwrap_or(&Value::Null);
    let class = if entry.is_number() {
        " class=\"number\""
    } else {
        ""
    };
    let _ = write!(
        out,
        "<td{class} data-json=\"{}\">{}</td>",
        escape(pointer),
        escape(&text_of(entry))
    );
}

/// A JSON value as a cell shows it: numbers as the JSON writes them, strings unquoted, null as
/// `n/a`.
pub(super) fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "n/a".to_string(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `key` as one token of a JSON pointer (RFC 6901).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}
