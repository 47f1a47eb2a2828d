//! The `--html` report: one self-contained file to share a run (as k6's exported dashboard
//! is), which opens without a network: inline CSS, the charts as inline SVG drawn by `plot`,
//! no script, no external reference. It leads with the answer and keeps the evidence below:
//!
//! 1. the headline (`headline.rs`): the SLO's verdict and margin, or the end-to-end p99; the
//!    knee of a search; worker-seconds, the backlog's peak and drain (`RunSummary::headline`);
//!    the error budget, the workers' verdict, the achieved rate and the warnings;
//! 2. the overview (`plot::overview`): arrivals, queue depth, the server's memory and disk
//!    (`--server-metrics`) and replicas on one time axis;
//! 3. the latency charts (by percentile, end to end over time, by rate), and folded, one chart
//!    per `TimeSeries` of the run, such as replicas, without more code;
//! 4. the details (`details.rs`), in a planner's words, then folded the raw tables by the
//!    JSON's names, the table as printed; and the JSON report itself.
//!
//! Everything that comes from input is escaped; the document is well-formed XML as well as
//! HTML, so the tests parse it with quick-xml. `words.rs` spells times and shares for reading.

mod details;
mod headline;
mod words;

use std::fmt::Write;

use serde_json::Value;

use crate::plot::{self, escape, Figure};
use crate::report::{self, RunSummary};

use words::seconds_words;

/// The style sheet, inline. No `<` or `&`, so it is well-formed XML text too.
const STYLE: &str = "
body { font-family: sans-serif; margin: 2em auto; max-width: 1000px; color: #222;
  padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.5em; }
header p { color: #555; margin-top: 0; }
#headline { border: 1px solid #ccc; border-radius: 6px; padding: 0.8em 1.2em; }
p.verdict { font-size: 1.25em; font-weight: bold; margin: 0.3em 0 0.6em; }
p.verdict.pass { color: #070; } p.verdict.fail { color: #b00; }
#numbers { display: grid; grid-template-columns: repeat(auto-fill, minmax(280px, 1fr));
  gap: 0.8em 1.5em; margin: 0.5em 0; }
#numbers div { border-left: 4px solid #ccc; padding-left: 0.6em; }
#numbers div.pass { border-color: #070; } #numbers div.fail { border-color: #b00; }
#numbers dt { color: #555; font-size: 0.9em; }
#numbers dd { margin: 0; }
#numbers .value { display: block; font-size: 1.35em; font-weight: bold; }
#numbers .note { color: #555; font-size: 0.85em; }
#warnings { color: #a60; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
td.note { color: #555; font-size: 0.9em; }
th { background: #f3f3f3; text-align: left; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: bold; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; }
";

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
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n\
         <p>{}, {}; started at {}, measured for {} after {} of warm-up.</p>\n",
        escape(&title),
        escape(&title),
        escape(summary.scenario.name()),
        escape(&report::load_description(
            summary.load,
            summary.shape.as_deref()
        )),
        words::utc_words(summary.start_unix_s),
        seconds_words(summary.duration_s),
        seconds_words(summary.warmup_s),
    );
    if let Some(assumptions) = &summary.simulation {
        let _ = writeln!(
            out,
            "<p id=\"simulated\">Simulated in virtual time against azq's queue semantics \
             in-process, not measured against a server: {}.</p>",
            escape(assumptions)
        );
    }
    out.push_str("</header>\n<main>\n");
    headline::headline(summary, &mut out);
    if let Some(overview) = plot::overview(summary) {
        figure(&overview, &mut out);
    }
    let latency = plot::latency_figures(summary);
    out.push_str("<h2 id=\"latency-section\">Latency</h2>\n");
    for chart in &latency {
        figure(chart, &mut out);
    }
    let series = summary.time_series();
    let names: Vec<&str> = series.iter().map(|series| series.name.as_str()).collect();
    let _ = writeln!(
        out,
        "<details id=\"more-charts\"><summary>Every time series, one chart each: {}</summary>",
        escape(&names.join("; "))
    );
    for chart in plot::series_figures(summary) {
        figure(&chart, &mut out);
    }
    out.push_str("</details>\n");
    details::details(summary, &data, &mut out);
    // The JSON report, for whoever wants the numbers from the page. `<` and `&` occur only in
    // its strings, where their \u escapes mean the same, so the script's text cannot end early.
    let _ = write!(
        out,
        "</main>\n<script type=\"application/json\" id=\"report-json\">{}</script>\n\
         </body>\n</html>\n",
        json_text
            .trim_end()
            .replace('<', "\\u003c")
            .replace('&', "\\u0026")
    );
    out
}

/// A chart as a `<figure>`, named by its id.
fn figure(chart: &Figure, out: &mut String) {
    let _ = write!(
        out,
        "<figure id=\"{}\" class=\"chart\">\n{}</figure>\n",
        escape(&chart.id),
        chart.svg
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{sample_summary, workers_summary};
    use crate::report::TimeSeries;
    use details::text_of;

    /// What `check` found: the cells checked, the charts in order, and the ids of the elements
    /// directly in `<main>`, in order, each with whether it is a `<details>` left closed.
    struct Found {
        cells: usize,
        charts: Vec<String>,
        main: Vec<(String, bool)>,
    }

    /// Every `data-json` cell's text against the JSON value it names, the chart ids, and the
    /// order of `<main>`'s children.
    fn check(document: &str) -> Found {
        let start = document
            .find("id=\"report-json\">")
            .expect("the embedded JSON")
            + 17;
        let end = start + document[start..].find("</script>").expect("its end");
        let data: Value = serde_json::from_str(&document[start..end]).expect("JSON");
        let mut reader = quick_xml::Reader::from_str(document);
        let mut found = Found {
            cells: 0,
            charts: Vec::new(),
            main: Vec::new(),
        };
        let mut pending: Option<String> = None;
        // Depth below <main> while inside it.
        let mut main_depth: Option<usize> = None;
        loop {
            match reader.read_event().expect("well-formed") {
                quick_xml::events::Event::Start(element) => {
                    let name = String::from_utf8_lossy(element.name().as_ref()).to_string();
                    let mut id = None;
                    let mut open = false;
                    for attribute in element.attributes() {
                        let attribute = attribute.expect("an attribute");
                        let value = attribute.unescape_value().expect("text").to_string();
                        match attribute.key.as_ref() {
                            b"data-json" => pending = Some(value),
                            b"id" => id = Some(value),
                            b"open" => open = true,
                            _ => {}
                        }
                    }
                    if let (Some(id), "figure") = (&id, name.as_str()) {
                        found.charts.push(id.clone());
                    }
                    match main_depth {
                        Some(0) => found.main.push((
                            id.unwrap_or_else(|| name.clone()),
                            name == "details" && !open,
                        )),
                        None if name == "main" => main_depth = Some(0),
                        _ => {}
                    }
                    if let Some(depth) = main_depth.as_mut().filter(|_| name != "main") {
                        *depth += 1;
                    }
                }
                quick_xml::events::Event::End(element) => {
                    if element.name().as_ref() == b"main" {
                        main_depth = None;
                    } else if let Some(depth) = main_depth.as_mut() {
                        *depth -= 1;
                    }
                }
                quick_xml::events::Event::Text(text) => {
                    if let Some(pointer) = pending.take() {
                        let expected = text_of(data.pointer(&pointer).unwrap_or(&Value::Null));
                        assert_eq!(text.unescape().expect("text"), expected, "{pointer}");
                        found.cells += 1;
                    }
                }
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        found
    }

    /// The ids of `<main>`'s children up to the first `h2` (the answer and the overview).
    fn leading(found: &Found) -> Vec<&str> {
        found
            .main
            .iter()
            .map(|(id, _)| id.as_str())
            .take_while(|id| *id != "latency-section")
            .collect()
    }

    #[test]
    fn the_page_leads_with_the_answer_then_the_overview_then_latency() {
        let mut summary = workers_summary();
        summary.series.push(TimeSeries {
            name: "replicas <&> \"x\"".to_string(),
            unit: "workers".to_string(),
            points: vec![(0.0, 1.0), (1.0, 3.0)],
        });
        let document = html(&summary);
        assert!(document.starts_with("<!DOCTYPE html>"));
        let found = check(&document);
        assert!(found.cells > 40, "{} cells", found.cells);
        assert_eq!(leading(&found), ["headline", "overview"]);
        let series = summary.time_series().len();
        assert_eq!(series, 4);
        let mut expected = vec!["overview", "latency", "end-to-end"];
        let generic: Vec<String> = (0..series).map(|index| format!("series-{index}")).collect();
        expected.extend(generic.iter().map(String::as_str));
        assert_eq!(found.charts, expected);
        // The details follow the charts; the raw tables and the printed table are folded.
        let closed: Vec<&str> = found
            .main
            .iter()
            .filter(|(_, closed)| *closed)
            .map(|(id, _)| id.as_str())
            .collect();
        assert_eq!(closed, ["more-charts", "raw-tables", "text-table-section"]);
        assert!(document.contains("replicas &lt;&amp;&gt; &quot;x&quot; over time"));
        assert!(!document.contains("replicas <&>"));
        // The headline in words: no SLO, so the end-to-end p99; the fleet's cost; the backlog.
        let headline = summary.headline();
        assert!(document.contains("No SLO was given (--slo): the end-to-end p99 was 1.1 ms"));
        let worker_seconds = headline.worker_seconds.expect("a workers run");
        assert!(document.contains(&format!(">{worker_seconds:.1}</span>")));
        assert!(document.contains("Backlog peak"));
        assert!(document.contains("Started at 2026-11-22 00:00:00 UTC"));
        assert!(document.contains("<th>Achieved rate</th><td class=\"number\" data-json="));
        assert!(
            !document.contains("start_unix_s</th>") || {
                let raw = document.find("id=\"raw-tables\"").expect("raw tables");
                document.find("start_unix_s</th>").expect("a raw row") > raw
            }
        );
    }

    /// An autoscaled run: the SLO is the answer, the overview has the replicas, the
    /// autoscaler's numbers are a table in words and a raw one.
    #[test]
    fn an_autoscaled_run_answers_with_its_slo_and_draws_its_fleet() {
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
        let found = check(&document);
        assert!(found.cells > 40, "{} cells", found.cells);
        assert_eq!(leading(&found), ["headline", "overview"]);
        assert!(
            document.contains("SLO end-to-end p99 &lt;= 60.0 s met with 60.0 s to spare"),
            "{document}"
        );
        assert!(document.contains("class=\"verdict pass\""));
        assert!(document.contains("data-json=\"/workers/autoscale/worker_seconds\""));
        assert!(document.contains("data-json=\"/workers/slo/met\""));
        assert!(document.contains("data-json=\"/headline/drain_time_s\""));
        let overview = &document[document.find("id=\"overview\"").unwrap()..];
        let overview = &overview[..overview.find("</figure>").unwrap()];
        for strip in [
            "per second",
            "queue depth",
            "replicas asked for",
            "replicas ready",
        ] {
            assert!(overview.contains(strip), "{strip}");
        }
        assert!(document.contains("replicas asked for over time"));
        assert!(found.charts.len() >= 6, "{:?}", found.charts);
    }

    #[test]
    fn a_mixed_run_has_its_operations_and_no_external_reference() {
        let summary = sample_summary();
        let document = html(&summary);
        let found = check(&document);
        assert!(found.cells > 30, "{} cells", found.cells);
        assert!(found.charts.contains(&"latency".to_string()));
        assert_eq!(leading(&found), ["headline", "overview"]);
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

    /// A put run has no timeline worth an overview when closed, nor end-to-end latency: the
    /// answer says so and names the slowest operation's p99 instead.
    #[test]
    fn a_closed_put_run_answers_without_end_to_end_latency() {
        let mut summary = sample_summary();
        summary.scenario = crate::scenario::Scenario::Put;
        summary.load = crate::schedule::LoadModel::Closed;
        summary.depth.clear();
        summary.total.end_to_end_us.reset();
        let document = html(&summary);
        let found = check(&document);
        assert!(document.contains("no message goes end to end in this scenario"));
        assert!(document.contains("the slowest operation&#39;s p99 was 990 us (put)"));
        assert!(!document.contains("Backlog peak"));
        assert!(!document.contains("Worker-seconds"));
        assert_eq!(
            found.main.first().map(|(id, _)| id.as_str()),
            Some("headline")
        );
    }

    /// A run with nothing over time (an empty peek run) has no overview: the answer is
    /// followed by the latency section, and the page is still whole.
    #[test]
    fn a_run_without_a_timeline_has_no_overview() {
        let mut summary = sample_summary();
        summary.scenario = crate::scenario::Scenario::Peek;
        summary.load = crate::schedule::LoadModel::Closed;
        summary.total = crate::metrics::Measurements::default();
        summary.timeline.clear();
        summary.depth.clear();
        let document = html(&summary);
        let found = check(&document);
        assert_eq!(leading(&found), ["headline"]);
        assert!(!found.charts.contains(&"overview".to_string()));
        assert!(document.contains("no operation succeeded"));
    }
}
