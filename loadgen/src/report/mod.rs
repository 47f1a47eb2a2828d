//! The results of a run and their text forms: the table printed at the end, the live progress
//! line, the JSON file and the CSV time series. Pure functions of a `RunSummary`, so their
//! shape is unit-tested.
//!
//! - `summary`: `RunSummary` and the judgements made of it (rates, utilisation, the verdict,
//!   the `Headline` a planner reads first).
//! - `table`: the table, the saturation warnings and the progress line.
//! - `json`: the JSON file (and `Entries`, an ordered JSON object, which `merge` shares).
//! - `csv`: the CSV time series.

mod csv;
mod json;
mod summary;
mod table;
#[cfg(test)]
pub(crate) mod tests;

pub use csv::csv;
pub use json::{json, Entries};
pub use summary::{
    replica_series, server_series, DepthPoint, Headline, PreloadOutcome, RunSummary, ScalePoint,
    SearchOutcome, ServerPoint, StepResult, TimeSeries, TimelinePoint, SERVER_DISK_BYTES_SERIES,
    SERVER_MESSAGE_BYTES_SERIES, SERVER_RESIDENT_MEMORY_SERIES,
};
pub use table::{
    grouped, latency_words, load_description, progress_line, saturation_warnings, slo_words, table,
    verdict_text,
};
