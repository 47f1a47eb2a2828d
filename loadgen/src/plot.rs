//! The `--plot` SVG, written by hand (no plotting dependency): a latency-by-percentile chart per
//! operation with the percentile axis on a log scale of 1/(1-p), as HdrHistogram's plotter draws
//! it, so the tail gets as much room as the median; for consuming runs, charts of throughput
//! per operation and queue depth over time and of end-to-end latency over time; for stepped
//! runs, latency by rate with the knee's bound; and any other time series of the run
//! (`TimeSeries`, e.g. replicas), one chart each. `merge` gets the percentile chart per tag and
//! answers per second per tag. `figures` gives each chart as its own document, for the HTML
//! report.

use std::fmt::Write;

use crate::merge::Merged;
use crate::report::{
    replica_series, RunSummary, TimeSeries, SERVER_DISK_BYTES_SERIES, SERVER_MESSAGE_BYTES_SERIES,
    SERVER_RESIDENT_MEMORY_SERIES,
};
use crate::scenario::Operation;

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 420.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 90.0;
const MARGIN_TOP: f64 = 40.0;
const MARGIN_BOTTOM: f64 = 50.0;
/// The percentile axis ends at 99.9999% (six nines).
const NINES_MAX: f64 = 6.0;
/// One colour per operation, by `Operation::index`, plus one for end-to-end latency and depth.
const COLOURS: [&str; 5] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728"];
const EXTRA_COLOUR: &str = "#7f7f7f";
/// The overview's queue depth: apart from every operation's colour.
const DEPTH_COLOUR: &str = "#8c564b";

/// A line to draw: points in data coordinates.
struct Series {
    label: String,
    colour: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// Draws one chart whose frame starts `top` pixels down.
type Panel<'a> = Box<dyn Fn(f64, &mut String) + 'a>;

/// One chart of a run's, drawn on its own or stacked with the others.
struct Chart<'a> {
    /// A name for the chart, unique in the run: the HTML report's element id.
    id: String,
    /// Whether it draws latency (the HTML report's latency charts); the one that does not,
    /// throughput and depth, is the overview's in the HTML report.
    latency: bool,
    draw: Panel<'a>,
}

/// A run's chart as an SVG document of its own, for the HTML report.
pub struct Figure {
    /// Unique in the run: `overview`, `latency`, `end-to-end`, `steps`, or `series-N` for the
    /// run's N-th `RunSummary::time_series` (from 0).
    pub id: String,
    pub svg: String,
}

/// The whole SVG document: every chart of `charts`, with the run's extra `series` (the
/// errors, retries and p99 of each second are in the CSV and JSON, and drawn by the HTML
/// report).
pub fn svg(summary: &RunSummary) -> String {
    let panels: Vec<Panel<'_>> = charts(summary)
        .into_iter()
        .map(|chart| chart.draw)
        .chain(summary.series.iter().map(series_panel))
        .collect();
    document(&panels)
}

/// The latency charts of `svg`, each its own SVG document: latency by percentile, end-to-end
/// latency over time, latency by rate.
pub fn latency_figures(summary: &RunSummary) -> Vec<Figure> {
    charts(summary)
        .into_iter()
        .filter(|chart| chart.latency)
        .map(|chart| Figure {
            id: chart.id,
            svg: document(&[chart.draw]),
        })
        .collect()
}

/// One chart per `RunSummary::time_series`, in that order.
pub fn series_figures(summary: &RunSummary) -> Vec<Figure> {
    let series = summary.time_series();
    series
        .iter()
        .enumerate()
        .map(|(index, series)| Figure {
            id: format!("series-{index}"),
            svg: document(&[series_panel(series)]),
        })
        .collect()
}

/// A time series drawn over run time, its unit on the vertical axis.
fn series_panel(series: &TimeSeries) -> Panel<'_> {
    Box::new(move |top, out: &mut String| {
        let line = [Series {
            label: format!("{} ({})", series.name, series.unit),
            colour: COLOURS[0],
            dashed: false,
            points: series.points.clone(),
        }];
        time_chart(
            &format!("{} over time", series.name),
            &series.unit,
            &line,
            top,
            out,
        );
    })
}

/// The run's fixed charts: latency by percentile; for consuming runs, throughput and depth
/// over time and end-to-end latency over time; for stepped runs, latency by rate.
fn charts(summary: &RunSummary) -> Vec<Chart<'_>> {
    let mut charts: Vec<Chart<'_>> = vec![Chart {
        id: "latency".to_string(),
        latency: true,
        draw: Box::new(|top, out: &mut String| {
            let title = format!(
                "{} latency by percentile ({}, {} connections)",
                summary.scenario.name(),
                if summary.is_open_loop() {
                    "open loop, corrected for coordinated omission"
                } else {
                    "closed loop"
                },
                summary.connections
            );
            latency_chart(&title, &latency_series(summary), top, out);
        }),
    }];
    if summary.scenario.consumes() && (!summary.timeline.is_empty() || !summary.depth.is_empty()) {
        charts.push(Chart {
            id: "throughput-depth".to_string(),
            latency: false,
            draw: Box::new(|top, out: &mut String| timeline_panel(summary, top, out)),
        });
    }
    if summary.scenario.consumes()
        && summary
            .timeline
            .iter()
            .any(|point| point.end_to_end_p99_us.is_some())
    {
        charts.push(Chart {
            id: "end-to-end".to_string(),
            latency: true,
            draw: Box::new(|top, out: &mut String| end_to_end_panel(summary, top, out)),
        });
    }
    if !summary.steps.is_empty() {
        charts.push(Chart {
            id: "steps".to_string(),
            latency: true,
            draw: Box::new(|top, out: &mut String| steps_panel(summary, top, out)),
        });
    }
    charts
}

/// The SVG of `azq-loadgen merge`.
pub fn merged_svg(merged: &Merged) -> String {
    let panels: Vec<Panel<'_>> = vec![
        Box::new(|top, out: &mut String| {
            let series: Vec<Series> = merged
                .tags
                .iter()
                .enumerate()
                .filter_map(|(index, total)| {
                    percentile_series(
                        total.tag.clone(),
                        COLOURS[index % COLOURS.len()],
                        false,
                        &total.histogram,
                    )
                })
                .collect();
            let title = format!(
                "latency by percentile, {} merged log(s) (corrected for coordinated omission)",
                merged.inputs.len()
            );
            latency_chart(&title, &series, top, out);
        }),
        Box::new(|top, out: &mut String| {
            let series: Vec<Series> = merged
                .tags
                .iter()
                .enumerate()
                .map(|(index, total)| Series {
                    label: format!("{} per s", total.tag),
                    colour: COLOURS[index % COLOURS.len()],
                    dashed: false,
                    points: merged
                        .seconds
                        .iter()
                        .map(|(&second, tags)| {
                            let count = tags.get(&total.tag).map_or(0, |h| h.len());
                            (second as f64 + 1.0, count as f64)
                        })
                        .collect(),
                })
                .collect();
            time_chart(
                "answers per second, all logs together",
                "answers per second",
                &series,
                top,
                out,
            );
        }),
    ];
    document(&panels)
}

/// The document around `panels`, stacked.
fn document(panels: &[Panel<'_>]) -> String {
    let height = PANEL_HEIGHT * panels.len() as f64;
    let mut out = String::with_capacity(64 * 1024);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (index, panel) in panels.iter().enumerate() {
        panel(PANEL_HEIGHT * index as f64, &mut out);
    }
    out.push_str("</svg>\n");
    out
}

/// Position on the percentile axis: the number of nines, log10(1 / (1 - p)).
fn nines(quantile: f64) -> f64 {
    if quantile >= 1.0 {
        NINES_MAX
    } else {
        (-(1.0 - quantile).log10()).clamp(0.0, NINES_MAX)
    }
}

/// The percentile curve of `histogram`; `None` when it is empty.
fn percentile_series(
    label: String,
    colour: &'static str,
    dashed: bool,
    histogram: &hdrhistogram::Histogram<u64>,
) -> Option<Series> {
    if histogram.is_empty() {
        return None;
    }
    // Five steps per halving of the distance to 100%, as HdrHistogram's percentile output.
    let mut points: Vec<(f64, f64)> = histogram
        .iter_quantiles(5)
        .map(|step| {
            (
                nines(step.quantile_iterated_to()),
                step.value_iterated_to().max(1) as f64,
            )
        })
        .collect();
    points.push((NINES_MAX, histogram.max().max(1) as f64));
    Some(Series {
        label,
        colour,
        dashed,
        points,
    })
}

fn latency_series(summary: &RunSummary) -> Vec<Series> {
    let mut series = Vec::new();
    for &operation in summary.operations() {
        let stats = summary.total.operation(operation);
        series.extend(percentile_series(
            operation.name().to_string(),
            COLOURS[operation.index()],
            false,
            &stats.latency_us,
        ));
        if summary.is_open_loop() {
            series.extend(percentile_series(
                format!("{} (uncorrected)", operation.name()),
                COLOURS[operation.index()],
                true,
                &stats.latency_uncorrected_us,
            ));
        }
    }
    series
}

/// A latency-by-percentile chart of `series`.
fn latency_chart(title: &str, series: &[Series], top: f64, out: &mut String) {
    let values = series
        .iter()
        .flat_map(|line| line.points.iter().map(|&(_, value)| value));
    let (low, high) = decades(values);
    let frame = Frame::panel(top, (0.0, NINES_MAX), (low.log10(), high.log10()));
    frame.draw_box(title, out);
    for nine in 0..=NINES_MAX as u32 {
        let label = match nine {
            0 => "0%".to_string(),
            1 => "90%".to_string(),
            2 => "99%".to_string(),
            _ => format!("99.{}%", "9".repeat(nine as usize - 2)),
        };
        frame.x_tick(f64::from(nine), &label, out);
    }
    frame.log_y_ticks(low, high, out);
    frame.axis_labels("percentile", "latency (microseconds, log scale)", out);
    for (index, line) in series.iter().enumerate() {
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|&(x, value)| (x, value.log10()))
            .collect();
        frame.polyline(&points, line.colour, line.dashed, out);
        frame.legend(index, &line.label, line.colour, line.dashed, out);
    }
}

/// A chart of `series` over run time (seconds), on a linear scale from zero.
fn time_chart(title: &str, y_label: &str, series: &[Series], top: f64, out: &mut String) {
    let end_s = series
        .iter()
        .flat_map(|line| line.points.iter().map(|&(t, _)| t))
        .fold(1.0, f64::max);
    let y_top = nice_ceiling(
        series
            .iter()
            .flat_map(|line| line.points.iter().map(|&(_, y)| y))
            .fold(1.0, f64::max),
    );
    let frame = Frame::panel(top, (0.0, end_s.ceil()), (0.0, y_top));
    frame.draw_box(title, out);
    frame.time_ticks(end_s, out);
    for fifth in 0..=5 {
        let value = y_top * f64::from(fifth) / 5.0;
        frame.y_tick(value, &compact(value), out);
    }
    frame.axis_labels("run time (s)", y_label, out);
    for (index, line) in series.iter().enumerate() {
        frame.polyline(&line.points, line.colour, line.dashed, out);
        frame.legend(index, &line.label, line.colour, line.dashed, out);
    }
}

/// End-to-end latency (p99 per second) over run time.
fn end_to_end_panel(summary: &RunSummary, top: f64, out: &mut String) {
    let points: Vec<(f64, f64)> = summary
        .timeline
        .iter()
        .filter_map(|point| {
            let p99_us = point.end_to_end_p99_us?;
            Some((point.end_s, p99_us as f64 / 1000.0))
        })
        .collect();
    let series = [Series {
        label: if summary.workers.is_some() {
            "end-to-end p99, put to delete (ms)".to_string()
        } else {
            "end-to-end p99, put to receipt (ms)".to_string()
        },
        colour: EXTRA_COLOUR,
        dashed: false,
        points,
    }];
    time_chart(
        &format!(
            "{}: end-to-end message latency over time",
            summary.scenario.name()
        ),
        "p99 of each second (milliseconds)",
        &series,
        top,
        out,
    );
}

/// A stepped run's result per step: the bounded percentile (p99 without a search) by rate,
/// the bound as a dashed line, passing steps green and failing ones red.
fn steps_panel(summary: &RunSummary, top: f64, out: &mut String) {
    let percentile = summary
        .search
        .map_or("p99", |search| search.bound.percentile);
    let mut steps: Vec<(f64, f64, Option<bool>)> = summary
        .steps
        .iter()
        .filter_map(|step| {
            let value = step.latency_us?.percentile(percentile)?;
            Some((step.target_rate_per_s, value.max(1) as f64, step.passed))
        })
        .collect();
    steps.sort_by(|left, right| left.0.total_cmp(&right.0));
    let bound_us = summary.search.map(|search| search.bound.bound_us as f64);
    let (low, high) = decades(steps.iter().map(|&(_, value, _)| value).chain(bound_us));
    let rate_top = nice_ceiling(steps.iter().map(|&(rate, _, _)| rate).fold(1.0, f64::max));
    let frame = Frame::panel(top, (0.0, rate_top), (low.log10(), high.log10()));
    frame.draw_box(
        &format!(
            "{}: {percentile} latency by offered rate (worst operation)",
            summary.scenario.name()
        ),
        out,
    );
    for fifth in 0..=5 {
        let rate = rate_top * f64::from(fifth) / 5.0;
        frame.x_tick(rate, &compact(rate), out);
    }
    frame.log_y_ticks(low, high, out);
    frame.axis_labels(
        "offered rate (operations per second)",
        "latency (microseconds, log scale)",
        out,
    );
    let points: Vec<(f64, f64)> = steps
        .iter()
        .map(|&(rate, value, _)| (rate, value.log10()))
        .collect();
    frame.polyline(&points, COLOURS[0], false, out);
    frame.legend(0, percentile, COLOURS[0], false, out);
    for &(rate, value, passed) in &steps {
        let (x, y) = frame.at(rate, value.log10());
        let colour = match passed {
            Some(true) => COLOURS[2],
            Some(false) => COLOURS[4],
            None => COLOURS[0],
        };
        let _ = writeln!(
            out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{colour}"/>"#
        );
    }
    if let Some(bound) = bound_us {
        let line = [(0.0, bound.log10()), (rate_top, bound.log10())];
        frame.polyline(&line, COLOURS[4], true, out);
        frame.legend(
            1,
            &format!("bound {percentile} <= {} us", compact(bound)),
            COLOURS[4],
            true,
            out,
        );
    }
    if let Some(knee) = summary.search.and_then(|search| search.knee_rate_per_s) {
        let (x, y) = frame.at(knee, frame.y_range.1);
        let _ = writeln!(
            out,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">knee {}/s</text>"#,
            y + 14.0,
            compact(knee)
        );
    }
}

fn timeline_panel(summary: &RunSummary, top: f64, out: &mut String) {
    let end_s = summary
        .timeline
        .iter()
        .map(|point| point.end_s)
        .chain(summary.depth.iter().map(|point| point.at_s))
        .fold(1.0, f64::max);
    let rate_max = summary
        .timeline
        .iter()
        .flat_map(|point| point.operations_per_s)
        .fold(1.0, f64::max);
    let depth_max = summary
        .depth
        .iter()
        .map(|point| point.messages as f64)
        .fold(1.0, f64::max);
    let rate_top = nice_ceiling(rate_max);
    let depth_top = nice_ceiling(depth_max);
    let frame = Frame::panel(top, (0.0, end_s.ceil()), (0.0, rate_top));
    frame.draw_box(
        &format!(
            "{}: throughput per operation and queue depth over time",
            summary.scenario.name()
        ),
        out,
    );
    frame.time_ticks(end_s, out);
    for fifth in 0..=5 {
        let value = rate_top * f64::from(fifth) / 5.0;
        frame.y_tick(value, &compact(value), out);
        let depth = depth_top * f64::from(fifth) / 5.0;
        let (x, y) = frame.at(frame.x_range.1, value);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" fill="{EXTRA_COLOUR}">{}</text>"#,
            x + 6.0,
            y + 4.0,
            compact(depth)
        );
    }
    frame.axis_labels(
        "run time (warm-up included)",
        "answers per second (right: messages in the queues)",
        out,
    );
    let mut legend_index = 0;
    for &operation in summary.operations() {
        let points: Vec<(f64, f64)> = summary
            .timeline
            .iter()
            .map(|point| (point.end_s, point.operations_per_s[operation.index()]))
            .collect();
        if points.is_empty() {
            continue;
        }
        frame.polyline(&points, COLOURS[operation.index()], false, out);
        frame.legend(
            legend_index,
            &format!("{} per s", operation.name()),
            COLOURS[operation.index()],
            false,
            out,
        );
        legend_index += 1;
    }
    if !summary.depth.is_empty() {
        // Depth shares the panel on its own scale: map it onto the rate axis.
        let points: Vec<(f64, f64)> = summary
            .depth
            .iter()
            .map(|point| (point.at_s, point.messages as f64 / depth_top * rate_top))
            .collect();
        frame.polyline(&points, EXTRA_COLOUR, true, out);
        frame.legend(legend_index, "queue depth", EXTRA_COLOUR, true, out);
    }
    if summary.warmup_s > 0.0 {
        let (x0, y0) = frame.at(0.0, rate_top);
        let (x1, y1) = frame.at(summary.warmup_s.min(frame.x_range.1), 0.0);
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="#000" fill-opacity="0.05"/>"##,
            x1 - x0,
            y1 - y0
        );
    }
}

/// The overview's layout, in pixels: room for the title, each strip's legend row above its
/// plot, each plot's height, and room below the last plot for the time axis.
const OVERVIEW_TITLE_PX: f64 = 40.0;
const OVERVIEW_LEGEND_PX: f64 = 30.0;
const OVERVIEW_PLOT_PX: f64 = 150.0;
const OVERVIEW_AXIS_PX: f64 = 50.0;
/// Roughly how wide a character of the 12-pixel legend text is, to lay legends out in a row.
const LEGEND_CHARACTER_PX: f64 = 6.5;

/// One strip of the overview: lines on a linear scale from zero, and points to mark.
struct Strip {
    /// What the strip shows, for the chart's title.
    name: &'static str,
    /// The vertical axis: what is counted.
    y_label: &'static str,
    lines: Vec<Series>,
    /// (run time, value, what it is), drawn as a dot with its text.
    marks: Vec<(f64, f64, String)>,
}

/// The HTML report's first chart: what arrived, what the queues held and what the fleet was,
/// stacked on one time axis (warm-up shaded). The arrivals strip has the puts (and deletes) per
/// second, with the target rate of a shaped or stepped run; the depth strip has the queues'
/// depth with the backlog's peak and the end of its drain (`RunSummary::headline`); with the
/// server's metrics, its memory and disk strip follows (resident memory, message bytes, disk
/// bytes: what the backlog costs the server); an autoscaled run adds the replicas asked for
/// and ready. `None` without a timeline, depth or
/// replicas (a run that is not over time).
pub fn overview(summary: &RunSummary) -> Option<Figure> {
    let end_s = summary
        .timeline
        .iter()
        .map(|point| point.end_s)
        .chain(summary.depth.iter().map(|point| point.at_s))
        .chain(summary.scale.iter().map(|point| point.at_s))
        .fold(1.0, f64::max)
        .ceil();
    let strips: Vec<Strip> = [
        arrivals_strip(summary),
        depth_strip(summary),
        server_strip(summary),
        replicas_strip(summary, end_s),
    ]
    .into_iter()
    .flatten()
    .collect();
    if strips.is_empty() {
        return None;
    }
    let strip_px = OVERVIEW_LEGEND_PX + OVERVIEW_PLOT_PX;
    let height = OVERVIEW_TITLE_PX + strip_px * strips.len() as f64 + OVERVIEW_AXIS_PX;
    let mut out = String::with_capacity(32 * 1024);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let names: Vec<&str> = strips.iter().map(|strip| strip.name).collect();
    let _ = writeln!(
        out,
        r#"<text x="{MARGIN_LEFT}" y="24" font-size="14" font-weight="bold">{}</text>"#,
        escape(&format!(
            "{} over run time: {}",
            summary.scenario.name(),
            names.join(", ")
        ))
    );
    for (index, strip) in strips.iter().enumerate() {
        let top_px = OVERVIEW_TITLE_PX + strip_px * index as f64 + OVERVIEW_LEGEND_PX;
        let last = index + 1 == strips.len();
        draw_strip(summary, strip, top_px, end_s, last, &mut out);
    }
    out.push_str("</svg>\n");
    Some(Figure {
        id: "overview".to_string(),
        svg: out,
    })
}

/// Puts and deletes per second (every operation's, for a run with neither), and the target.
fn arrivals_strip(summary: &RunSummary) -> Option<Strip> {
    if summary.timeline.is_empty() {
        return None;
    }
    let operations = summary.operations();
    let shown: Vec<Operation> = if operations
        .iter()
        .any(|&operation| matches!(operation, Operation::Put | Operation::Delete))
    {
        operations
            .iter()
            .copied()
            .filter(|&operation| matches!(operation, Operation::Put | Operation::Delete))
            .collect()
    } else {
        operations.to_vec()
    };
    let mut lines: Vec<Series> = shown
        .into_iter()
        .map(|operation| Series {
            label: match operation {
                Operation::Put => "puts per s (arrivals)".to_string(),
                Operation::Delete => "deletes per s (messages done)".to_string(),
                other => format!("{} per s", other.name()),
            },
            colour: COLOURS[operation.index()],
            dashed: false,
            points: summary
                .timeline
                .iter()
                .map(|point| (point.end_s, point.operations_per_s[operation.index()]))
                .collect(),
        })
        .collect();
    let target: Vec<(f64, f64)> = summary
        .timeline
        .iter()
        .filter_map(|point| Some((point.end_s, point.step_rate_per_s?)))
        .collect();
    if !target.is_empty() {
        // What the target paces: a workers run's puts, or every put, get and peek together.
        let paced: Vec<String> = operations
            .iter()
            .filter(|&&operation| match operation {
                Operation::Put => true,
                Operation::Get | Operation::Peek => summary.workers.is_none(),
                _ => false,
            })
            .map(|operation| format!("{}s", operation.name()))
            .collect();
        lines.push(Series {
            label: format!(
                "target per s ({}, {})",
                paced.join(" + "),
                if summary.shape.is_some() {
                    "--shape"
                } else {
                    "the step's"
                }
            ),
            colour: EXTRA_COLOUR,
            dashed: true,
            points: target,
        });
    }
    Some(Strip {
        name: "arrivals",
        y_label: "per second",
        lines,
        marks: Vec::new(),
    })
}

/// The queues' depth, with the backlog's peak and the end of its drain marked.
fn depth_strip(summary: &RunSummary) -> Option<Strip> {
    if summary.depth.is_empty() {
        return None;
    }
    let headline = summary.headline();
    let mut marks = Vec::new();
    // A peak no higher than the level before it (a drain time of zero) is no backlog to mark.
    let backlog = headline.drain_time_s != Some(0.0);
    if let (Some(peak), Some(peak_at_s), true) =
        (headline.backlog_peak, headline.backlog_peak_at_s, backlog)
    {
        marks.push((
            peak_at_s,
            peak as f64,
            format!("peak {} at {peak_at_s:.1}s", compact(peak as f64)),
        ));
        if let Some(drain_s) = headline.drain_time_s.filter(|&drain_s| drain_s > 0.0) {
            let drained_at_s = peak_at_s + drain_s;
            let depth = summary
                .depth
                .iter()
                .find(|point| point.at_s >= drained_at_s)
                .map_or(0.0, |point| point.messages as f64);
            marks.push((drained_at_s, depth, format!("drained {drain_s:.1}s later")));
        }
    }
    Some(Strip {
        name: "queue depth",
        y_label: "messages",
        lines: vec![Series {
            label: "messages in the queues".to_string(),
            colour: DEPTH_COLOUR,
            dashed: false,
            points: summary
                .depth
                .iter()
                .map(|point| (point.at_s, point.messages as f64))
                .collect(),
        }],
        marks,
    })
}

/// The server's resident memory, the bytes charged for its messages and its bytes on disk, each
/// that the server exposed (`--server-metrics`).
fn server_strip(summary: &RunSummary) -> Option<Strip> {
    let lines: Vec<Series> = [
        (SERVER_RESIDENT_MEMORY_SERIES, COLOURS[0], false),
        (SERVER_MESSAGE_BYTES_SERIES, DEPTH_COLOUR, false),
        (SERVER_DISK_BYTES_SERIES, COLOURS[2], true),
    ]
    .into_iter()
    .filter_map(|(name, colour, dashed)| {
        let series = summary.series.iter().find(|series| series.name == name)?;
        Some(Series {
            label: series.name.clone(),
            colour,
            dashed,
            points: series.points.clone(),
        })
    })
    .collect();
    (!lines.is_empty()).then_some(Strip {
        name: "server memory and disk",
        y_label: "bytes",
        lines,
        marks: Vec::new(),
    })
}

/// An autoscaled run's replicas, asked for (dashed) and ready.
fn replicas_strip(summary: &RunSummary, end_s: f64) -> Option<Strip> {
    let lines: Vec<Series> = replica_series(&summary.scale, end_s)
        .into_iter()
        .zip([(COLOURS[3], true), (COLOURS[2], false)])
        .map(|(series, (colour, dashed))| Series {
            label: series.name,
            colour,
            dashed,
            points: series.points,
        })
        .collect();
    (!lines.is_empty()).then_some(Strip {
        name: "replicas",
        y_label: "replicas",
        lines,
        marks: Vec::new(),
    })
}

/// One strip of the overview, its plot's top `top_px` down; the last gets the time labels.
fn draw_strip(
    summary: &RunSummary,
    strip: &Strip,
    top_px: f64,
    end_s: f64,
    last: bool,
    out: &mut String,
) {
    let y_top = nice_ceiling(
        strip
            .lines
            .iter()
            .flat_map(|line| line.points.iter().map(|&(_, y)| y))
            .fold(1.0, f64::max),
    );
    let frame = Frame {
        top_px,
        bottom_px: top_px + OVERVIEW_PLOT_PX,
        x_range: (0.0, end_s),
        y_range: (0.0, y_top),
    };
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{OVERVIEW_PLOT_PX}" fill="none" stroke="#333"/>"##,
        frame.left(),
        frame.plot_top(),
        frame.right() - frame.left()
    );
    frame.time_grid(end_s, last, out);
    for fifth in 0..=5 {
        let value = y_top * f64::from(fifth) / 5.0;
        frame.y_tick(value, &compact(value), out);
    }
    let middle_y = frame.plot_top() + OVERVIEW_PLOT_PX / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="16" y="{middle_y:.1}" text-anchor="middle" transform="rotate(-90 16 {middle_y:.1})">{}</text>"#,
        escape(strip.y_label)
    );
    if summary.warmup_s > 0.0 {
        let (x0, y0) = frame.at(0.0, y_top);
        let (x1, y1) = frame.at(summary.warmup_s.min(end_s), 0.0);
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="#000" fill-opacity="0.06"/><text x="{:.1}" y="{:.1}" fill="#555">warm-up</text>"##,
            x1 - x0,
            y1 - y0,
            x0 + 4.0,
            y0 + 14.0
        );
    }
    let mut legend_x = frame.left();
    let legend_y = frame.plot_top() - 10.0;
    for line in &strip.lines {
        frame.polyline(&line.points, line.colour, line.dashed, out);
        let dash = if line.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r#"<line x1="{legend_x:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            legend_x + 24.0,
            line.colour,
            legend_x + 30.0,
            legend_y + 4.0,
            escape(&line.label)
        );
        legend_x += 30.0 + LEGEND_CHARACTER_PX * line.label.chars().count() as f64 + 24.0;
    }
    for (at_s, value, label) in &strip.marks {
        let (x, y) = frame.at(*at_s, *value);
        // Text on the left of a mark in the right half, so it stays inside the plot.
        let (text_x, anchor) = if x > (frame.left() + frame.right()) / 2.0 {
            (x - 8.0, "end")
        } else {
            (x + 8.0, "start")
        };
        let _ = writeln!(
            out,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="#333"/><text x="{text_x:.1}" y="{:.1}" text-anchor="{anchor}" fill="#333">{}</text>"##,
            (y - 6.0).max(frame.plot_top() + 12.0),
            escape(label)
        );
    }
    if last {
        let middle_x = (frame.left() + frame.right()) / 2.0;
        let _ = writeln!(
            out,
            r#"<text x="{middle_x:.1}" y="{:.1}" text-anchor="middle">run time (warm-up included)</text>"#,
            frame.bottom() + 36.0
        );
    }
}

/// Powers of ten enclosing every value (at least one decade).
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (minimum, maximum) = values.fold((f64::MAX, 1.0f64), |(low, high), value| {
        (low.min(value), high.max(value))
    });
    let minimum = if minimum == f64::MAX { 1.0 } else { minimum };
    let low = 10f64.powf(minimum.max(1.0).log10().floor());
    let high = 10f64.powf(maximum.log10().ceil()).max(low * 10.0);
    (low, high)
}

/// The smallest 1, 2 or 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    let decade = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * decade)
        .find(|&candidate| candidate >= value)
        .unwrap_or(10.0 * decade)
}

/// `1500` as `1.5k`, `2000000` as `2M`, `3000000000` as `3G`.
fn compact(value: f64) -> String {
    let (scaled, suffix) = if value >= 1e9 {
        (value / 1e9, "G")
    } else if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = format!("{scaled:.1}");
    format!("{}{suffix}", text.trim_end_matches(".0"))
}

/// A chart area and its data ranges.
struct Frame {
    /// The plot area's top and bottom edges, in pixels from the document's top.
    top_px: f64,
    bottom_px: f64,
    x_range: (f64, f64),
    y_range: (f64, f64),
}

impl Frame {
    /// The plot area of a chart drawn `top` pixels down, with the usual margins.
    fn panel(top: f64, x_range: (f64, f64), y_range: (f64, f64)) -> Frame {
        Frame {
            top_px: top + MARGIN_TOP,
            bottom_px: top + PANEL_HEIGHT - MARGIN_BOTTOM,
            x_range,
            y_range,
        }
    }
    fn left(&self) -> f64 {
        MARGIN_LEFT
    }
    fn right(&self) -> f64 {
        WIDTH - MARGIN_RIGHT
    }
    fn plot_top(&self) -> f64 {
        self.top_px
    }
    fn bottom(&self) -> f64 {
        self.bottom_px
    }

    /// Pixel position of a data point.
    fn at(&self, x: f64, y: f64) -> (f64, f64) {
        let span_x = (self.x_range.1 - self.x_range.0).max(1e-9);
        let span_y = (self.y_range.1 - self.y_range.0).max(1e-9);
        (
            self.left() + (x - self.x_range.0) / span_x * (self.right() - self.left()),
            self.bottom() - (y - self.y_range.0) / span_y * (self.bottom() - self.plot_top()),
        )
    }

    fn draw_box(&self, title: &str, out: &mut String) {
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
            self.left(),
            self.plot_top(),
            self.right() - self.left(),
            self.bottom() - self.plot_top()
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
            self.left(),
            self.plot_top() - 16.0,
            escape(title)
        );
    }

    /// A grid line at `x`, labelled below the plot unless `label` is empty.
    fn x_tick(&self, x: f64, label: &str, out: &mut String) {
        let (pixel_x, _) = self.at(x, self.y_range.0);
        let _ = write!(
            out,
            r##"<line x1="{pixel_x:.1}" y1="{:.1}" x2="{pixel_x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            self.plot_top(),
            self.bottom(),
        );
        if !label.is_empty() {
            let _ = write!(
                out,
                r#"<text x="{pixel_x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                self.bottom() + 16.0,
                escape(label)
            );
        }
        out.push('\n');
    }

    fn y_tick(&self, y: f64, label: &str, out: &mut String) {
        let (_, pixel_y) = self.at(self.x_range.0, y);
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{pixel_y:.1}" x2="{:.1}" y2="{pixel_y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            self.left(),
            self.right(),
            self.left() - 6.0,
            pixel_y + 4.0,
            escape(label)
        );
    }

    /// Ticks every few seconds up to `end_s`.
    fn time_ticks(&self, end_s: f64, out: &mut String) {
        self.time_grid(end_s, true, out);
    }

    /// Grid lines every few seconds up to `end_s`, labelled when `labelled`.
    fn time_grid(&self, end_s: f64, labelled: bool, out: &mut String) {
        let step_s = (end_s / 10.0).ceil().max(1.0);
        let mut second = 0.0;
        while second <= end_s.ceil() {
            let label = if labelled {
                format!("{second}s")
            } else {
                String::new()
            };
            self.x_tick(second, &label, out);
            second += step_s;
        }
    }

    /// Ticks at each power of ten from `low` to `high` (a log10 axis).
    fn log_y_ticks(&self, low: f64, high: f64, out: &mut String) {
        let mut decade = low;
        while decade <= high {
            self.y_tick(decade.log10(), &format!("{} us", compact(decade)), out);
            decade *= 10.0;
        }
    }

    fn axis_labels(&self, x_label: &str, y_label: &str, out: &mut String) {
        let middle_x = (self.left() + self.right()) / 2.0;
        let middle_y = (self.plot_top() + self.bottom()) / 2.0;
        let _ = writeln!(
            out,
            r#"<text x="{middle_x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            self.bottom() + 36.0,
            escape(x_label)
        );
        let _ = writeln!(
            out,
            r#"<text x="16" y="{middle_y:.1}" text-anchor="middle" transform="rotate(-90 16 {middle_y:.1})">{}</text>"#,
            escape(y_label)
        );
    }

    fn polyline(&self, points: &[(f64, f64)], colour: &str, dashed: bool, out: &mut String) {
        out.push_str(r#"<polyline fill="none" stroke-width="2" stroke=""#);
        out.push_str(colour);
        out.push('"');
        if dashed {
            out.push_str(r#" stroke-dasharray="6 4""#);
        }
        out.push_str(r#" points=""#);
        for &(x, y) in points {
            let (pixel_x, pixel_y) = self.at(x, y);
            let _ = write!(out, "{pixel_x:.1},{pixel_y:.1} ");
        }
        out.push_str("\"/>\n");
    }

    fn legend(&self, index: usize, label: &str, colour: &str, dashed: bool, out: &mut String) {
        let x = self.left() + 12.0;
        let y = self.plot_top() + 16.0 + 18.0 * index as f64;
        let dash = if dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            escape(label)
        );
    }
}

/// A bar chart of one measure across `labels` (a sweep's points), as an SVG document: a bar
/// per value (`None`: no bar, "none" written), the bar at `highlight` in another colour, and a
/// dashed horizontal line at `line` (a bound) when given.
pub fn bar_chart(
    title: &str,
    labels: &[String],
    values: &[Option<f64>],
    highlight: Option<usize>,
    line: Option<f64>,
) -> String {
    let highest = values
        .iter()
        .flatten()
        .copied()
        .chain(line)
        .fold(1.0, f64::max);
    let panel: Panel<'_> = Box::new(move |top, out: &mut String| {
        let frame = Frame::panel(
            top,
            (0.0, labels.len().max(1) as f64),
            (0.0, nice_ceiling(highest)),
        );
        frame.draw_box(title, out);
        for fifth in 0..=5 {
            let value = frame.y_range.1 * f64::from(fifth) / 5.0;
            frame.y_tick(value, &compact(value), out);
        }
        for (index, label) in labels.iter().enumerate() {
            let middle = index as f64 + 0.5;
            frame.x_tick(middle, label, out);
            let colour = if highlight == Some(index) {
                COLOURS[2]
            } else {
                COLOURS[0]
            };
            match values.get(index).copied().flatten() {
                Some(value) => {
                    let (left, top_y) = frame.at(index as f64 + 0.15, value);
                    let (right, bottom_y) = frame.at(index as f64 + 0.85, 0.0);
                    let _ = writeln!(
                        out,
                        r#"<rect x="{left:.1}" y="{top_y:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{}: {}</title></rect>"#,
                        right - left,
                        bottom_y - top_y,
                        escape(label),
                        compact(value)
                    );
                }
                None => {
                    let (x, y) = frame.at(middle, 0.0);
                    let _ = writeln!(
                        out,
                        r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">none</text>"#,
                        y - 6.0
                    );
                }
            }
        }
        if let Some(bound) = line {
            let points = [(0.0, bound), (labels.len().max(1) as f64, bound)];
            frame.polyline(&points, COLOURS[4], true, out);
            frame.legend(0, "SLO bound", COLOURS[4], true, out);
        }
    });
    document(&[panel])
}

/// Escapes text for SVG and HTML, in text and in quoted attribute values.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{sample_summary, summary_with_server_metrics};

    #[test]
    fn the_overview_draws_the_servers_memory_and_disk_when_it_has_them() {
        let strip = "server memory and disk";
        let svg = overview(&summary_with_server_metrics()).unwrap().svg;
        assert!(svg.contains(strip));
        assert!(svg.contains("server message bytes"));
        // The series the server did not expose are not drawn.
        assert!(!svg.contains("server resident memory"));
        assert!(!overview(&sample_summary()).unwrap().svg.contains(strip));
    }

    #[test]
    fn percentile_axis_positions() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(nines(1.0), NINES_MAX);
    }

    #[test]
    fn scales() {
        assert_eq!(decades([30.0, 4500.0].into_iter()), (10.0, 10_000.0));
        assert_eq!(decades(std::iter::empty()), (1.0, 10.0));
        assert_eq!(nice_ceiling(42_000.0), 50_000.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(compact(1500.0), "1.5k");
        assert_eq!(compact(2_000_000.0), "2M");
        assert_eq!(compact(7.0), "7");
    }

    #[test]
    fn document_has_both_panels_for_a_mixed_run() {
        let summary = sample_summary();
        let document = svg(&summary);
        assert!(document.starts_with("<svg "));
        assert!(document.trim_end().ends_with("</svg>"));
        assert!(document.contains("latency by percentile"));
        assert!(document.contains("queue depth over time"));
        assert!(document.contains(">99.99%<"));
        for operation in summary.operations() {
            assert!(document.contains(&format!(">{}<", operation.name())));
        }
        assert!(document.contains("put (uncorrected)"));
        assert_well_formed(&document);
    }

    #[test]
    fn a_closed_put_run_has_one_panel() {
        let mut summary = sample_summary();
        summary.scenario = crate::scenario::Scenario::Put;
        summary.load = crate::schedule::LoadModel::Closed;
        let document = svg(&summary);
        assert!(!document.contains("over time"));
        assert!(!document.contains("uncorrected"));
        assert_well_formed(&document);
    }

    #[test]
    fn a_workers_run_has_end_to_end_latency_over_time() {
        let document = svg(&crate::report::tests::workers_summary());
        assert!(document.contains("end-to-end message latency over time"));
        assert!(document.contains("put to delete"));
        assert!(document.contains("queue depth over time"));
        assert_well_formed(&document);
    }

    #[test]
    fn a_stepped_run_has_latency_by_rate_with_the_bound() {
        let mut summary = sample_summary();
        let step = |rate: f64, p99: u64, passed| crate::report::StepResult {
            target_rate_per_s: rate,
            achieved_rate_per_s: rate,
            latency_us: Some(crate::metrics::LatencySummary {
                p50: 10,
                p90: 20,
                p99,
                p999: p99,
                p9999: p99,
                max: p99,
            }),
            error_ratio: 0.0,
            unsent: 0,
            passed: Some(passed),
        };
        summary.steps = vec![step(100.0, 500, true), step(200.0, 5_000, false)];
        summary.search = Some(crate::report::SearchOutcome {
            bound: crate::steps::LatencyBound::parse("p99=1ms").unwrap(),
            knee_rate_per_s: Some(100.0),
        });
        let document = svg(&summary);
        assert!(document.contains("p99 latency by offered rate"));
        assert!(document.contains("bound p99 &lt;= 1k us"));
        assert!(document.contains("knee 100/s"));
        assert_eq!(document.matches("<circle").count(), 2);
        assert_well_formed(&document);
    }

    #[test]
    fn a_merge_has_percentiles_and_answers_per_second_per_tag() {
        let mut histogram = crate::metrics::new_histogram();
        histogram.record(100).unwrap();
        let interval = |tag: &str, start_unix_s| crate::merge::Interval {
            tag: tag.to_string(),
            start_unix_s,
            duration_s: 1.0,
            histogram: histogram.clone(),
        };
        let merged = crate::merge::merge(vec![(
            "a".to_string(),
            vec![interval("put", 10.0), interval("get", 11.0)],
        )]);
        let document = merged_svg(&merged);
        assert!(document.contains("1 merged log(s)"));
        assert!(document.contains(">put per s<"));
        assert!(document.contains(">get<"));
        assert_well_formed(&document);
    }

    fn assert_well_formed(document: &str) {
        let mut reader = quick_xml::Reader::from_str(document);
        let mut depth = 0i32;
        loop {
            match reader.read_event() {
                Ok(quick_xml::events::Event::Start(_)) => depth += 1,
                Ok(quick_xml::events::Event::End(_)) => depth -= 1,
                Ok(quick_xml::events::Event::Eof) => break,
                Ok(_) => {}
                Err(error) => panic!("not well-formed XML: {error}"),
            }
        }
        assert_eq!(depth, 0);
    }
}
