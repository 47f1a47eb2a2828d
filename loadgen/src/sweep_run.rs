//! `--sweep`'s runs and report: one simulated run per point (`sweep`), as many at once as there
//! are CPUs (each is one thread), then per point the answer a planner compares: the SLO verdict,
//! the worker-seconds the fleet cost, the backlog's peak and the time it took to drain, with the
//! cheapest point that meets the SLO marked. The table goes to stdout; `--json` and `--html`
//! write the same (the HTML leads with the table and the cheapest point, then one chart per
//! measure across the points).

use std::fmt::Write;
use std::sync::Mutex;

use serde::Serialize;

use crate::cli::{self, Command};
use crate::plot;
use crate::report::RunSummary;
use crate::run;
use crate::steps::LatencyBound;
use crate::sweep::{describe, Point, SweepOptions};

/// What one point's run answered.
#[derive(Clone, Debug, PartialEq)]
pub struct PointResult {
    pub point: Point,
    /// `--slo`'s verdict: whether the end-to-end percentile met its bound.
    pub slo_met: Option<bool>,
    /// The end-to-end latency at the SLO's percentile (p99 without `--slo`), µs.
    pub end_to_end_us: Option<u64>,
    /// The fleet's cost over the measured window.
    pub worker_seconds: Option<f64>,
    /// The deepest the queues were, and how long they took from there to drain.
    pub backlog_peak: Option<u64>,
    pub drain_s: Option<f64>,
    /// Errors stayed within `--max-error-rate`.
    pub within_error_budget: bool,
}

/// A finished sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepOutcome {
    pub names: Vec<String>,
    pub slo: Option<LatencyBound>,
    pub points: Vec<PointResult>,
    /// The point that meets the SLO (and the error budget) with the fewest worker-seconds.
    pub cheapest: Option<usize>,
}

impl PointResult {
    /// The answer of `summary`, the run of `point`.
    pub fn of(point: Point, summary: &RunSummary) -> PointResult {
        let headline = summary.headline();
        PointResult {
            point,
            slo_met: headline.slo.map(|verdict| verdict.met()),
            end_to_end_us: match headline.slo {
                Some(verdict) => verdict.measured_us,
                None => headline.end_to_end_p99_us,
            },
            worker_seconds: headline.worker_seconds,
            backlog_peak: headline.backlog_peak,
            drain_s: headline.drain_time_s,
            within_error_budget: summary.within_error_budget(),
        }
    }

    /// The point's settings as `name=value` words.
    fn settings(&self) -> String {
        describe(&self.point)
    }
}

/// Runs every point of `sweep`; `progress` hears of each as it finishes.
pub fn run(sweep: &SweepOptions) -> Result<SweepOutcome, String> {
    let points = sweep.points();
    let parallel = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(points.len())
        .max(1);
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<PointRun>>> = Mutex::new(vec![None; points.len()]);
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            scope.spawn(|| loop {
                let index = {
                    let mut next = next.lock().unwrap_or_else(|error| error.into_inner());
                    let index = *next;
                    *next += 1;
                    index
                };
                let Some(point) = points.get(index) else {
                    return;
                };
                let result = run_point(sweep, point);
                if !sweep.quiet {
                    let status = match &result {
                        Ok((result, _)) => verdict_word(result),
                        Err(error) => error.clone(),
                    };
                    eprintln!("azq-loadgen: sweep point {}: {status}", describe(point));
                }
                results.lock().unwrap_or_else(|error| error.into_inner())[index] = Some(result);
            });
        }
    });
    let mut outcome = SweepOutcome {
        names: sweep.axes.iter().map(|axis| axis.name.clone()).collect(),
        slo: None,
        points: Vec::with_capacity(points.len()),
        cheapest: None,
    };
    for result in results
        .into_inner()
        .unwrap_or_else(|error| error.into_inner())
    {
        let (point, slo) = result.ok_or("a sweep point did not run")??;
        outcome.slo = outcome.slo.or(slo);
        outcome.points.push(point);
    }
    outcome.cheapest = cheapest(&outcome.points);
    Ok(outcome)
}

/// One point's simulated run: its answer and the run's `--slo`, or why it did not run.
type PointRun = Result<(PointResult, Option<LatencyBound>), String>;

/// One point's simulated run.
fn run_point(sweep: &SweepOptions, point: &Point) -> PointRun {
    let Command::Run(options) = cli::parse(sweep.point_arguments(point)?)? else {
        return Err("not a run".to_string());
    };
    let outcome = run::run(&options)?;
    Ok((
        PointResult::of(point.clone(), &outcome.summary),
        outcome.summary.slo,
    ))
}

/// The point meeting the SLO and the error budget at the fewest worker-seconds (the first of
/// equals); `None` without an SLO, or when no point meets it.
fn cheapest(points: &[PointResult]) -> Option<usize> {
    points
        .iter()
        .enumerate()
        .filter(|(_, point)| point.slo_met == Some(true) && point.within_error_budget)
        .filter_map(|(index, point)| point.worker_seconds.map(|cost| (index, cost)))
        .fold(
            None,
            |best: Option<(usize, f64)>, (index, cost)| match best {
                Some((_, best_cost)) if best_cost <= cost => best,
                _ => Some((index, cost)),
            },
        )
        .map(|(index, _)| index)
}

/// `met`, `missed` or `no SLO`, and the errors when over budget.
fn verdict_word(point: &PointResult) -> String {
    let slo = match point.slo_met {
        Some(true) => "SLO met",
        Some(false) => "SLO missed",
        None => "no --slo",
    };
    if point.within_error_budget {
        slo.to_string()
    } else {
        format!("{slo}, errors over --max-error-rate")
    }
}

/// A bound as the command line spells it: `60s`, `250ms`, `500us`.
fn duration_text(us: u64) -> String {
    if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{value:.1}"))
}

fn milliseconds(value: Option<u64>) -> String {
    value.map_or_else(
        || "-".to_string(),
        |us| format!("{:.1}", us as f64 / 1000.0),
    )
}

/// The one-line answer: the cheapest point meeting the SLO, or why there is none.
pub fn answer(outcome: &SweepOutcome) -> String {
    match (outcome.slo, outcome.cheapest) {
        (None, _) => "no --slo was given: no point can be judged; compare the measures".to_string(),
        (Some(bound), None)
            if outcome
                .points
                .iter()
                .any(|point| point.slo_met == Some(true)) =>
        {
            format!(
                "no point met the SLO within --max-error-rate: points kept the end-to-end {} \
                 within {} but with more errors than the budget allows",
                bound.percentile,
                duration_text(bound.bound_us)
            )
        }
        (Some(bound), None) => format!(
            "no point kept the end-to-end {} within {}",
            bound.percentile,
            duration_text(bound.bound_us)
        ),
        (Some(bound), Some(index)) => {
            let point = &outcome.points[index];
            format!(
                "cheapest point meeting end-to-end {} <= {}: {} ({} worker-seconds, {} at {} ms)",
                bound.percentile,
                duration_text(bound.bound_us),
                point.settings(),
                seconds(point.worker_seconds),
                bound.percentile,
                milliseconds(point.end_to_end_us)
            )
        }
    }
}

/// The table printed at the end of a sweep.
pub fn table(outcome: &SweepOutcome) -> String {
    let mut out = String::new();
    let percentile = outcome.slo.map_or("p99", |bound| bound.percentile);
    let _ = writeln!(
        out,
        "azq-loadgen sweep: {} simulated point(s) over {}\n",
        outcome.points.len(),
        outcome.names.join(", ")
    );
    let mut header: Vec<String> = outcome.names.clone();
    header.extend([
        "SLO".to_string(),
        format!("e2e {percentile} ms"),
        "worker-s".to_string(),
        "backlog peak".to_string(),
        "drain s".to_string(),
    ]);
    let rows: Vec<Vec<String>> = outcome
        .points
        .iter()
        .enumerate()
        .map(|(index, point)| {
            let mut row: Vec<String> = point.point.iter().map(|(_, value)| value.clone()).collect();
            let mark = if outcome.cheapest == Some(index) {
                " *"
            } else {
                ""
            };
            row.extend([
                format!("{}{mark}", verdict_word(point)),
                milliseconds(point.end_to_end_us),
                seconds(point.worker_seconds),
                point
                    .backlog_peak
                    .map_or_else(|| "-".to_string(), |peak| peak.to_string()),
                seconds(point.drain_s),
            ]);
            row
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].len())
                .chain([header[column].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    let _ = writeln!(out, "\n{}", answer(outcome));
    out
}

#[derive(Serialize)]
struct JsonSweep {
    answer: String,
    slo: Option<String>,
    cheapest: Option<usize>,
    points: Vec<JsonPoint>,
}

#[derive(Serialize)]
struct JsonPoint {
    settings: serde_json::Map<String, serde_json::Value>,
    slo_met: Option<bool>,
    end_to_end_us: Option<u64>,
    worker_seconds: Option<f64>,
    backlog_peak: Option<u64>,
    drain_s: Option<f64>,
    within_error_budget: bool,
}

/// The sweep as JSON: the answer, then every point.
pub fn json(outcome: &SweepOutcome) -> String {
    let document = JsonSweep {
        answer: answer(outcome),
        slo: outcome
            .slo
            .map(|bound| format!("e2e-{}={}", bound.percentile, duration_text(bound.bound_us))),
        cheapest: outcome.cheapest,
        points: outcome
            .points
            .iter()
            .map(|point| JsonPoint {
                settings: point
                    .point
                    .iter()
                    .map(|(name, value)| (name.clone(), serde_json::Value::from(value.as_str())))
                    .collect(),
                slo_met: point.slo_met,
                end_to_end_us: point.end_to_end_us,
                worker_seconds: point.worker_seconds,
                backlog_peak: point.backlog_peak,
                drain_s: point.drain_s,
                within_error_budget: point.within_error_budget,
            })
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
    text.push('\n');
    text
}

/// The sweep as one self-contained HTML page: the answer and the table first, then one chart
/// per measure across the points (the cheapest point drawn apart).
pub fn html(outcome: &SweepOutcome) -> String {
    let mut out = String::new();
    let escape = plot::escape;
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>azq-loadgen sweep</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}}\
         table{{border-collapse:collapse}}td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;\
         text-align:right}}tr.cheapest{{background:#e6f4ea;font-weight:600}}\
         .answer{{font-size:1.25em;padding:.8em 1em;background:#f3f6fb;border-left:4px solid \
         #3266cc}}figure{{margin:1.5em 0}}</style></head><body><main>\
         <h1>Sweep: {} simulated points</h1><p class=\"answer\" id=\"answer\">{}</p>",
        outcome.points.len(),
        escape(&answer(outcome))
    );
    let percentile = outcome.slo.map_or("p99", |bound| bound.percentile);
    out.push_str("<table id=\"points\"><thead><tr>");
    for name in &outcome.names {
        let _ = write!(out, "<th>{}</th>", escape(name));
    }
    let _ = write!(
        out,
        "<th>SLO</th><th>end-to-end {percentile} (ms)</th><th>worker-seconds</th>\
         <th>backlog peak (messages)</th><th>drain time (s)</th></tr></thead><tbody>"
    );
    for (index, point) in outcome.points.iter().enumerate() {
        let class = if outcome.cheapest == Some(index) {
            " class=\"cheapest\""
        } else {
            ""
        };
        let _ = write!(out, "<tr{class}>");
        for (_, value) in &point.point {
            let _ = write!(out, "<td>{}</td>", escape(value));
        }
        let _ = write!(
            out,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&verdict_word(point)),
            milliseconds(point.end_to_end_us),
            seconds(point.worker_seconds),
            point
                .backlog_peak
                .map_or_else(|| "-".to_string(), |peak| peak.to_string()),
            seconds(point.drain_s)
        );
    }
    out.push_str("</tbody></table>");
    let labels: Vec<String> = outcome.points.iter().map(PointResult::settings).collect();
    let measures: [(&str, String, Vec<Option<f64>>); 4] = [
        (
            "end-to-end",
            format!("End-to-end {percentile} (ms)"),
            outcome
                .points
                .iter()
                .map(|point| point.end_to_end_us.map(|us| us as f64 / 1000.0))
                .collect(),
        ),
        (
            "worker-seconds",
            "Worker-seconds".to_string(),
            outcome
                .points
                .iter()
                .map(|point| point.worker_seconds)
                .collect(),
        ),
        (
            "backlog-peak",
            "Backlog peak (messages)".to_string(),
            outcome
                .points
                .iter()
                .map(|point| point.backlog_peak.map(|peak| peak as f64))
                .collect(),
        ),
        (
            "drain-time",
            "Drain time (s)".to_string(),
            outcome.points.iter().map(|point| point.drain_s).collect(),
        ),
    ];
    let bound_ms = outcome.slo.map(|bound| bound.bound_us as f64 / 1000.0);
    for (id, title, values) in &measures {
        let line = if *id == "end-to-end" { bound_ms } else { None };
        let _ = write!(
            out,
            "<figure class=\"chart\" id=\"{id}\">{}</figure>",
            plot::bar_chart(title, &labels, values, outcome.cheapest, line)
        );
    }
    out.push_str("</main></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(consumers: &str, slo_met: bool, within_budget: bool, cost: f64) -> PointResult {
        PointResult {
            point: vec![("consumers".to_string(), consumers.to_string())],
            slo_met: Some(slo_met),
            end_to_end_us: Some(1_000),
            worker_seconds: Some(cost),
            backlog_peak: Some(0),
            drain_s: Some(0.0),
            within_error_budget: within_budget,
        }
    }

    fn outcome(points: Vec<PointResult>) -> SweepOutcome {
        let cheapest = cheapest(&points);
        SweepOutcome {
            names: vec!["consumers".to_string()],
            slo: Some(LatencyBound::parse("p99=60s").unwrap()),
            points,
            cheapest,
        }
    }

    #[test]
    fn the_cheapest_point_meets_the_slo_within_the_error_budget() {
        let sweep = outcome(vec![
            point("1", false, true, 10.0),
            point("2", true, false, 20.0),
            point("3", true, true, 30.0),
            point("4", true, true, 30.0),
            point("5", true, true, 50.0),
        ]);
        // The first of equals; a point over the error budget does not count, however cheap.
        assert_eq!(sweep.cheapest, Some(2));
        assert_eq!(
            answer(&sweep),
            "cheapest point meeting end-to-end p99 <= 60s: consumers=3 (30.0 worker-seconds, \
             p99 at 1.0 ms)"
        );
        let table = table(&sweep);
        assert!(table.contains("SLO met *"), "{table}");
        assert!(
            table.contains("SLO met, errors over --max-error-rate"),
            "{table}"
        );
    }

    #[test]
    fn without_a_point_meeting_both_the_answer_says_which_failed() {
        let over_budget = outcome(vec![point("1", true, false, 10.0)]);
        assert_eq!(over_budget.cheapest, None);
        assert!(answer(&over_budget).starts_with("no point met the SLO within --max-error-rate"));
        let too_slow = outcome(vec![point("1", false, true, 10.0)]);
        assert_eq!(
            answer(&too_slow),
            "no point kept the end-to-end p99 within 60s"
        );
        let mut unjudged = outcome(vec![point("1", true, true, 10.0)]);
        unjudged.slo = None;
        assert!(answer(&unjudged).starts_with("no --slo was given"));
    }
}
