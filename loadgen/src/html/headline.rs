//! The HTML report's first block, the answer a planner reads before any chart: the SLO's
//! verdict with its margin (or, without `--slo`, the end-to-end p99), the knee of a search,
//! then the numbers of `RunSummary::headline` (worker-seconds, the backlog's peak and its
//! drain) beside the error budget, the workers' verdict and the achieved rate, each in words
//! with what it means, and the load generator's warnings about itself.

use std::fmt::Write;

use crate::plot::escape;
use crate::report::{self, latency_words, Headline, RunSummary};
use crate::schedule::LoadModel;

use super::words::{percent, seconds_words};

/// The `<section id="headline">` of `summary`.
pub(super) fn headline(summary: &RunSummary, out: &mut String) {
    out.push_str("<section id=\"headline\">\n");
    knee(summary, out);
    let headline = summary.headline();
    let (class, answer) = answer(summary, &headline);
    let _ = writeln!(
        out,
        "<p id=\"answer\" class=\"verdict {class}\">{}</p>",
        escape(&answer)
    );
    numbers(summary, &headline, out);
    let warnings = report::saturation_warnings(summary);
    if !warnings.is_empty() {
        out.push_str("<ul id=\"warnings\">\n");
        for warning in warnings {
            let _ = writeln!(out, "<li>{}</li>", escape(&warning));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");
}

/// A knee search's outcome, as its own verdict line.
fn knee(summary: &RunSummary, out: &mut String) {
    if let Some(search) = summary.search {
        let (class, text) = match search.knee_rate_per_s {
            Some(knee) => (
                "pass",
                format!(
                    "Knee: {} per second is the highest rate tried that kept {} within {} and \
                     errors within the budget.",
                    report::grouped(knee.round() as u64),
                    search.bound.percentile,
                    latency_words(search.bound.bound_us)
                ),
            ),
            None => (
                "fail",
                format!(
                    "No knee: even the lowest rate tried missed {} within {} or the error \
                     budget.",
                    search.bound.percentile,
                    latency_words(search.bound.bound_us)
                ),
            ),
        };
        let _ = writeln!(
            out,
            "<p id=\"knee\" class=\"verdict {class}\">{}</p>",
            escape(&text)
        );
    }
}

/// The verdict line: the SLO met or missed and by how much; without one, the end-to-end p99
/// (or why there is none). With its class: `pass`, `fail` or `none`.
fn answer(summary: &RunSummary, headline: &Headline) -> (&'static str, String) {
    match (headline.slo, headline.end_to_end_p99_us) {
        (Some(slo), _) if slo.met() => ("pass", format!("{}.", report::slo_words(&slo))),
        (Some(slo), _) => ("fail", format!("{}.", report::slo_words(&slo))),
        (None, Some(p99_us)) => (
            "none",
            format!(
                "No SLO was given (--slo): the end-to-end p99 was {} ({}).",
                latency_words(p99_us),
                if summary.workers.is_some() {
                    "a put's send to its delete's answer"
                } else {
                    "a put's send to the message's receipt"
                }
            ),
        ),
        (None, None) => ("none", no_end_to_end(summary)),
    }
}

/// The numbers under the verdict, each with what it means.
fn numbers(summary: &RunSummary, headline: &Headline, out: &mut String) {
    out.push_str("<dl id=\"numbers\">\n");
    if let Some(worker_seconds) = headline.worker_seconds {
        let note = match summary.autoscale_outcome() {
            Some(outcome) => format!(
                "replica-seconds asked for in the measured window, cold starts included; at \
                 most {} replicas",
                outcome.replicas_max
            ),
            None => format!(
                "{} workers for {} (the measured window and the answers after it)",
                summary.worker_lanes,
                seconds_words(worker_seconds / summary.worker_lanes.max(1) as f64)
            ),
        };
        number(
            "Worker-seconds",
            &format!("{worker_seconds:.1}"),
            &note,
            "",
            out,
        );
    }
    if let (Some(peak), Some(at_s)) = (headline.backlog_peak, headline.backlog_peak_at_s) {
        number(
            "Backlog peak",
            &format!(
                "{} message{}",
                report::grouped(peak),
                if peak == 1 { "" } else { "s" }
            ),
            &format!(
                "at {} of run time ({} into the measured window)",
                seconds_words(at_s),
                seconds_words(at_s - summary.warmup_s)
            ),
            "",
            out,
        );
        let (value, note, class) = match headline.drain_time_s {
            Some(0.0) => (
                "no backlog".to_string(),
                "the depth never rose above its level before",
                "",
            ),
            Some(drain_s) => (
                seconds_words(drain_s),
                "from the peak until the depth was back within a tenth of its rise",
                "",
            ),
            None => (
                "not drained".to_string(),
                "the depth was not back near its level before by the window's end",
                "fail",
            ),
        };
        number("Drain time", &value, note, class, out);
    }
    let within = summary.within_error_budget();
    number(
        "Errors",
        &percent(summary.total.error_ratio()),
        &format!(
            "of {} requests; {} allowed (--max-error-rate): {}",
            report::grouped(summary.total.requests()),
            percent(summary.max_error_ratio),
            if within {
                "within the budget"
            } else {
                "over the budget"
            }
        ),
        if within { "pass" } else { "fail" },
        out,
    );
    if summary.workers.is_some() {
        let keeping_up = summary.verdict().map(|verdict| verdict.keeping_up());
        let text = report::verdict_text(summary);
        let (value, note) = text.split_once(" (").unwrap_or((&text, ""));
        number(
            "Workers",
            value,
            note.trim_end_matches(')'),
            match keeping_up {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "",
            },
            out,
        );
    }
    if let LoadModel::Open { rate_per_s, .. } = summary.load {
        number(
            "Achieved rate",
            &format!(
                "{} per s",
                report::grouped(summary.achieved_rate_per_s().round() as u64)
            ),
            &format!(
                "of {} per s {}",
                report::grouped(rate_per_s.round() as u64),
                if summary.shape.is_some() {
                    "on average over the shape (--shape)"
                } else {
                    "targeted (--rate)"
                }
            ),
            "",
            out,
        );
    }
    out.push_str("</dl>\n");
}

/// The answer of a run no message went through end to end: why, and the slowest operation's
/// p99 instead.
fn no_end_to_end(summary: &RunSummary) -> String {
    let slowest = summary
        .operations()
        .iter()
        .filter_map(|&operation| {
            let latency = &summary.total.operation(operation).latency_us;
            (!latency.is_empty()).then(|| (latency.value_at_quantile(0.99), operation))
        })
        .max_by_key(|&(p99_us, _)| p99_us);
    let reason = if summary.scenario.consumes() {
        "no message went end to end"
    } else {
        "no message goes end to end in this scenario"
    };
    match slowest {
        Some((p99_us, operation)) => format!(
            "No SLO was given (--slo), and {reason}: the slowest operation's p99 was {} ({}).",
            latency_words(p99_us),
            operation.name()
        ),
        None => format!("No SLO was given (--slo), and {reason}; no operation succeeded."),
    }
}

/// One number of the headline: what it is, its value, what it means.
fn number(label: &str, value: &str, note: &str, class: &str, out: &mut String) {
    let _ = writeln!(
        out,
        "<div class=\"number{}\"><dt>{}</dt><dd><span class=\"value\">{}</span> \
         <span class=\"note\">{}</span></dd></div>",
        if class.is_empty() {
            String::new()
        } else {
            format!(" {class}")
        },
        escape(label),
        escape(value),
        escape(note)
    );
}
