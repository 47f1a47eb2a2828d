//! The `--csv` time series: a row per second of the run.

use std::fmt::Write;

use crate::report::summary::RunSummary;

/// The `--csv` file: one row per second of the run (every step's, in a stepped run) with the
/// answers per second of each operation, errors and retries per second, the interval's p99
/// latency over every operation and of end-to-end latency, and the last queue depth sampled
/// by the end of the interval. Empty cells where nothing was measured.
pub fn csv(summary: &RunSummary) -> String {
    let mut out = String::from("t_s");
    for &operation in summary.operations() {
        let _ = write!(out, ",{}_per_s", operation.name());
    }
    out.push_str(",errors_per_s,retries_per_s,p99_us,end_to_end_p99_us,depth,step_rate_per_s\n");
    let optional = |value: Option<u64>| value.map_or(String::new(), |value| value.to_string());
    for point in &summary.timeline {
        let _ = write!(out, "{:.3}", point.end_s);
        for &operation in summary.operations() {
            let _ = write!(out, ",{:.1}", point.operations_per_s[operation.index()]);
        }
        let depth = summary
            .depth
            .iter()
            .rfind(|sample| sample.at_s <= point.end_s)
            .map(|sample| sample.messages);
        let _ = writeln!(
            out,
            ",{:.1},{:.1},{},{},{},{}",
            point.errors_per_s,
            point.retries_per_s,
            optional(point.latency_p99_us),
            optional(point.end_to_end_p99_us),
            optional(depth),
            point
                .step_rate_per_s
                .map_or(String::new(), |rate| format!("{rate}"))
        );
    }
    out
}
