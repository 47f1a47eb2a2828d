//! The `--html` report: one self-contained file to share a run (as k6's exported dashboard
//! is), which opens without a network: inline CSS, the charts as inline SVG drawn by `plot`,
//! no script, no external reference. It holds the run's settings, the verdicts (the error
//! budget, the workers' verdict, the knee, the warnings), the tables, every chart (latency by
//! percentile, throughput and depth, end-to-end latency, steps, and every `TimeSeries` of the
//! run, such as replicas, without more code), the text table as printed, and the JSON report.
//!
//! Every number in a table is the JSON report's own text, and its cell names the value it
//! shows with a JSON pointer (`data-json="/ops/put/count"`), so the tests check one against
//! the other. Everything that comes from input is escaped; the document is well-formed XML
//! as well as HTML, so the tests parse it with quick-xml.

use std::fmt::Write;

use serde_json::Value;

use crate::plot::{self, escape};
use crate::report::{self, RunSummary};

/// The style sheet, inline. No `<` or `&`, so it is well-formed XML text too.
const STYLE: &str = "
body { font-family: sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; text-align: left; }
li.fail { color: #b00; } li.pass { color: #070; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; }
";

/// Percentile columns of a latency summary, in the JSON's names.
const PERCENTILES: [(&str, &str); 6] = [
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p999", "p99.9"),
    ("p9999", "p99.99"),
    ("max", "max"),
];

/// The HTML document of a run.
pub fn html(summary: &RunSummary) -> String {
    let json_text = report::json(summary);
    // The JSON report is the loadgen's own output: it always parses.
    let data: Value = serde_json::from_str(&json_text).unwrap_or(Value::Null);
    let mut out = String::with_capacity(256 * 1024);
    let title = format!("azq-loadgen report: {}", summary.scenario.name());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    settings(&data, &mut out);
    verdicts(summary, &data, &mut out);
    operations(&data, &mut out);
    other_latencies(&data, &mut out);
    if let Some(workers) = data.get("workers") {
        out.push_str("<h2 id=\"workers-section\">Workers</h2>\n");
        scalar_table("workers", workers, "/workers", &mut out);
        if let Some(theory) = workers.get("theory") {
            out.push_str("<h3>Against queueing theory (M/M/c, Erlang C)</h3>\n");
            scalar_table("theory", theory, "/workers/theory", &mut out);
        }
        if let Some(autoscale) = workers.get("autoscale") {
            out.push_str("<h3>Autoscaling (KEDA's azure-queue scaler and the HPA)</h3>\n");
            scalar_table("autoscale", autoscale, "/workers/autoscale", &mut out);
        }
        if let Some(slo) = workers.get("slo") {
            out.push_str("<h3>End-to-end SLO</h3>\n");
            scalar_table("slo", slo, "/workers/slo", &mut out);
        }
    }
    steps(&data, &mut out);
    client_cores(&data, &mut out);
    out.push_str("<h2>Charts</h2>\n");
    for figure in plot::figures(summary) {
        let _ = write!(
            out,
            "<figure id=\"{}\" class=\"chart\">\n{}</figure>\n",
            escape(&figure.id),
            figure.svg
        );
    }
    let _ = write!(
        out,
        "<h2>The table as printed</h2>\n<pre id=\"text-table\">{}</pre>\n",
        escape(&report::table(summary))
    );
    // The JSON report, for whoever wants the numbers from the page. `<` and `&` occur only in
    // its strings, where their \u escapes mean the same, so the script's text cannot end early.
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"report-json\">{}</script>\n</body>\n</html>\n",
        json_text
            .trim_end()
            .replace('<', "\\u003c")
            .replace('&', "\\u0026")
    );
    out
}

/// The run's settings and totals: every scalar at the JSON's top level.
fn settings(data: &Value, out: &mut String) {
    out.push_str("<h2>Run</h2>\n");
    scalar_table("settings", data, "", out);
}

/// Whether the run stayed within its error budget, the workers' verdict, the knee, and the
/// load generator's warnings about itself.
fn verdicts(summary: &RunSummary, data: &Value, out: &mut String) {
    out.push_str("<h2>Verdicts</h2>\n<ul id=\"verdicts\">\n");
    let within = summary.within_error_budget();
    let _ = writeln!(
        out,
        "<li class=\"{}\">errors: {} of requests, {} allowed (--max-error-rate): {}</li>",
        if within { "pass" } else { "fail" },
        percent(data.get("error_ratio")),
        percent(data.get("max_error_ratio")),
        if within {
            "within the budget"
        } else {
            "over the budget"
        }
    );
    if summary.workers.is_some() {
        let keeping_up = summary.verdict().map(|verdict| verdict.keeping_up());
        let _ = writeln!(
            out,
            "<li class=\"{}\">workers: {}</li>",
            match keeping_up {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "unknown",
            },
            escape(&report::verdict_text(summary))
        );
    }
    if let Some(slo) = summary.slo_verdict() {
        let _ = writeln!(
            out,
            "<li class=\"{}\">end-to-end {} within {} us (--slo): {}</li>",
            if slo.met() { "pass" } else { "fail" },
            slo.bound.percentile,
            slo.bound.bound_us,
            match slo.measured_us {
                Some(measured) if slo.met() => format!("met, {measured} us"),
                Some(measured) => format!("missed, {measured} us"),
                None => "missed, no message went end to end".to_string(),
            }
        );
    }
    if let Some(search) = summary.search {
        let _ = writeln!(
            out,
            "<li class=\"{}\">knee ({} within {} us): {}</li>",
            if search.knee_rate_per_s.is_some() {
                "pass"
            } else {
                "fail"
            },
            escape(search.bound.percentile),
            search.bound.bound_us,
            search
                .knee_rate_per_s
                .map_or("no rate met the bound".to_string(), |rate| format!(
                    "{rate}/s"
                ))
        );
    }
    for warning in report::saturation_warnings(summary) {
        let _ = writeln!(out, "<li class=\"warning\">{}</li>", escape(&warning));
    }
    out.push_str("</ul>\n");
}

/// Per operation: counts, errors, retries, rate and corrected latency percentiles.
fn operations(data: &Value, out: &mut String) {
    let Some(Value::Object(ops)) = data.get("ops") else {
        return;
    };
    out.push_str(
        "<h2>Operations</h2>\n<table id=\"operations\">\n<tr><th>operation</th><th>count</th>\
         <th>errors</th><th>retries</th><th>per s</th>",
    );
    for (_, heading) in PERCENTILES {
        let _ = write!(out, "<th>{heading} (us)</th>");
    }
    out.push_str("<th>errors by status and code</th></tr>\n");
    for (name, operation) in ops {
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

/// End-to-end latency, the client's send lag and each operation's uncorrected latency.
fn other_latencies(data: &Value, out: &mut String) {
    let mut rows: Vec<(String, String)> = [
        ("end-to-end (put to receipt or delete)", "end_to_end_us"),
        ("client send lag", "client_send_lag_us"),
    ]
    .iter()
    .filter(|(_, key)| data.get(key).is_some_and(Value::is_object))
    .map(|(label, key)| (label.to_string(), format!("/{key}")))
    .collect();
    if let Some(Value::Object(ops)) = data.get("ops") {
        for (name, operation) in ops {
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
    out.push_str("<h2>Other latencies</h2>\n<table id=\"latencies\">\n<tr><th>latency</th>");
    for (_, heading) in PERCENTILES {
        let _ = write!(out, "<th>{heading} (us)</th>");
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
        "<h2>Steps</h2>\n<table id=\"steps\">\n<tr><th>target per s</th><th>achieved per s</th>\
         <th>error ratio</th><th>p99 (us)</th><th>passed</th></tr>\n",
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
        "<h2>Client cores</h2>\n<table id=\"client-cores\">\n<tr><th>CPU</th>\
         <th>running share</th><th>waiting for a CPU share</th></tr>\n",
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
pub fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "n/a".to_string(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `0.0125` as `1.25%`; `n/a` when not a number.
fn percent(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_f64)
        .map_or("n/a".to_string(), |ratio| format!("{}%", ratio * 100.0))
}

/// `key` as one token of a JSON pointer (RFC 6901).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{sample_summary, workers_summary};
    use crate::report::TimeSeries;

    /// Every `data-json` cell's text against the JSON value it names, and the chart ids.
    fn check(document: &str) -> (usize, Vec<String>) {
        let start = document
            .find("id=\"report-json\">")
            .expect("the embedded JSON")
            + 17;
        let end = start + document[start..].find("</script>").expect("its end");
        let data: Value = serde_json::from_str(&document[start..end]).expect("JSON");
        let mut reader = quick_xml::Reader::from_str(document);
        let (mut cells, mut charts) = (0, Vec::new());
        let mut pending: Option<String> = None;
        loop {
            match reader.read_event().expect("well-formed") {
                quick_xml::events::Event::Start(element) => {
                    for attribute in element.attributes() {
                        let attribute = attribute.expect("an attribute");
                        let value = attribute.unescape_value().expect("text").to_string();
                        match attribute.key.as_ref() {
                            b"data-json" => pending = Some(value),
                            b"id" if element.name().as_ref() == b"figure" => charts.push(value),
                            _ => {}
                        }
                    }
                }
                quick_xml::events::Event::Text(text) => {
                    if let Some(pointer) = pending.take() {
                        let expected = text_of(data.pointer(&pointer).unwrap_or(&Value::Null));
                        assert_eq!(text.unescape().expect("text"), expected, "{pointer}");
                        cells += 1;
                    }
                }
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        (cells, charts)
    }

    #[test]
    fn tables_show_the_json_numbers_and_every_chart_is_there() {
        let mut summary = workers_summary();
        summary.series.push(TimeSeries {
            name: "replicas <&> \"x\"".to_string(),
            unit: "workers".to_string(),
            points: vec![(0.0, 1.0), (1.0, 3.0)],
        });
        let document = html(&summary);
        assert!(document.starts_with("<!DOCTYPE html>"));
        let (cells, charts) = check(&document);
        assert!(cells > 40, "{cells} cells");
        let series = summary.time_series().len();
        assert_eq!(series, 4);
        let mut expected = vec!["latency", "throughput-depth", "end-to-end"];
        let generic: Vec<String> = (0..series).map(|index| format!("series-{index}")).collect();
        expected.extend(generic.iter().map(String::as_str));
        assert_eq!(charts, expected);
        assert!(document.contains("replicas &lt;&amp;&gt; &quot;x&quot; over time"));
        assert!(!document.contains("replicas <&>"));
        assert!(document.contains("workers: keeping up") || document.contains("workers: falling"));
    }

    /// An autoscaled run: the autoscaler's numbers are tables of their own, the SLO a verdict,
    /// the replicas over time charts.
    #[test]
    fn an_autoscaled_run_shows_its_fleet_and_its_slo() {
        use crate::autoscale::AutoscalePolicy;
        use crate::report::{replica_series, ScalePoint};
        use crate::steps::LatencyBound;

        let mut summary = workers_summary();
        summary.autoscale = Some(AutoscalePolicy::defaults(8));
        summary.slo = Some(LatencyBound::parse("p99=60s").unwrap());
        summary.scale = vec![
            ScalePoint {
                at_s: 0.0,
                observed: Some(40),
                desired: 1,
                ready: 0,
            },
            ScalePoint {
                at_s: 1.0,
                observed: None,
                desired: 1,
                ready: 1,
            },
        ];
        summary.series = replica_series(&summary.scale, 4.0);
        let document = html(&summary);
        let (cells, charts) = check(&document);
        assert!(cells > 40, "{cells} cells");
        assert!(document.contains("data-json=\"/workers/autoscale/worker_seconds\""));
        assert!(document.contains("data-json=\"/workers/slo/met\""));
        assert!(document.contains("end-to-end p99 within 60000000 us (--slo): met"));
        assert!(document.contains("replicas asked for over time"));
        assert!(document.contains("replicas ready over time"));
        assert!(charts.len() >= 5, "{charts:?}");
    }

    #[test]
    fn a_mixed_run_has_its_operations_and_no_external_reference() {
        let summary = sample_summary();
        let document = html(&summary);
        let (cells, charts) = check(&document);
        assert!(cells > 30, "{cells} cells");
        assert!(charts.contains(&"latency".to_string()));
        assert!(document.contains("data-json=\"/ops/put/latency_us/p99\""));
        assert!(!document.contains("src="));
        assert!(!document.contains("href="));
        assert!(!document.contains("url("));
        assert!(!document.contains("https://"));
        // The SVG namespace is a name, not a resource; nothing else says http.
        assert_eq!(
            document.matches("http://").count(),
            document
                .matches("xmlns=\"http://www.w3.org/2000/svg\"")
                .count()
        );
    }
}
