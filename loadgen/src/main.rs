//! azq-loadgen: a load generator for Azure Queue Storage endpoints (azq, Azurite, the real
//! service). This file is the command line and start-up only. The modules, in the layers of
//! docs/ARCHITECTURE.md (each imports only those above it in this list, or beside it):
//!
//! - Ground floor. `units`: how the command line spells times, ratios, rates and counts.
//!   `wire::mark`: what a producer writes at the start of a message text (send timestamp, put
//!   mark).
//! - The plan: what the command line means, one part per module, each with its pure arithmetic.
//!   `tls`, `endpoint`: the target (URL, connection string, key, SAS or bearer token, CA).
//!   `scenario`: what a run does (the scenario, its operations, the lanes' roles). `schedule`:
//!   open/closed loop pacing and coordinated-omission-corrected timing. `shape`: `--shape`,
//!   open-loop rates over time (step, ramp, spike, sine, trace). `retry`: SDK-like
//!   retries. `workers`: the worker-fleet model (work times, crashes, poll back-off).
//!   `autoscale`: KEDA's azure-queue scaler and the HPA as a pure policy (`--autoscale`). `steps`:
//!   stepped load and the knee search. `theory`: M/M/c's predictions (Erlang C), which the
//!   report sets beside a workers run of that shape. `simulation`: what `--simulate` assumes
//!   of the service (round trips, limits). `sweep`: `--sweep`'s points and their command lines.
//! - `cli`: the usage text and the parser into validated `Options`.
//! - `wire`: requests encoded and signed (azq's SharedKey code), responses and Get answers
//!   parsed, the server's `/_azq/metrics` read, without I/O. `metrics`: counts, errors and
//!   HdrHistograms per operation.
//! - `runtime`: the client cores on azq's runtime seam (`azq::runtime::backend`): a pinned
//!   thread per core on the backend `--runtime` selects, as azq selects its own. `connection`:
//!   one keep-alive connection on a client core.
//! - `engine`: the cores' tasks, generic over the backend: setup and preload, one driver per
//!   connection, lanes and their accounting, depth sampling and the server's metrics scraped;
//!   and `--simulate`'s virtual-time loop over the same lanes against azq's request path
//!   in-process.
//! - `report`: a run's summary and its table, JSON and CSV.
//! - `merge`: `azq-loadgen merge`, the exact union of interval logs. `plot`: the SVG. `html`:
//!   the self-contained HTML report (the answer first, `plot`'s charts inline, the details in
//!   words). `run`: one run
//!   on the main thread: start, gather reports, progress line, interval log, summary.
//!   `sweep_run`: a sweep's simulated runs and its table, JSON and HTML.
//! - Here: `main`; and under test, `saved_reports`, every report's bytes against
//!   `loadgen/tests/reports/`.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod autoscale;
mod cli;
mod connection;
mod endpoint;
mod engine;
mod html;
mod merge;
mod metrics;
mod plot;
mod report;
mod retry;
mod run;
mod runtime;
#[cfg(test)]
mod saved_reports;
mod scenario;
mod schedule;
mod shape;
mod simulation;
mod steps;
mod sweep;
mod sweep_run;
mod theory;
mod tls;
mod units;
mod wire;
mod workers;

use std::path::Path;
use std::process::ExitCode;

/// Exit status when the run completed but its error ratio exceeded `--max-error-rate`, or a
/// knee search found no rate that met its bound.
const EXIT_TOO_MANY_ERRORS: u8 = 1;
/// Exit status for a bad command line or a run that could not start.
const EXIT_FAILURE: u8 = 2;

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(cli::Command::Run(options)) => options,
        Ok(cli::Command::Sweep(sweep)) => return sweep_points(&sweep),
        Ok(cli::Command::Merge(merge)) => return merge_logs(&merge),
        Ok(cli::Command::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("azq-loadgen: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let outcome = match run::run(&options) {
        Ok(outcome) => outcome,
        Err(error) => {
            eprintln!("azq-loadgen: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let summary = &outcome.summary;
    print!("{}", report::table(summary));
    let writes = [
        (
            options.json_path.as_deref(),
            Some(report::json(summary).into_bytes()),
        ),
        (options.hdr_log_path.as_deref(), outcome.hdr_log.clone()),
        (
            options.plot_path.as_deref(),
            Some(plot::svg(summary).into_bytes()),
        ),
        (
            options.csv_path.as_deref(),
            Some(report::csv(summary).into_bytes()),
        ),
        (
            options.html_path.as_deref(),
            Some(html::html(summary).into_bytes()),
        ),
    ];
    if let Err(error) = write_files(&writes) {
        eprintln!("azq-loadgen: {error}");
        return ExitCode::from(EXIT_FAILURE);
    }
    let failed = match (&summary.search, summary.steps.is_empty()) {
        // A search fails when no rate met the bound; plain steps past the knee are expected to
        // miss the error budget.
        (Some(search), _) => search.knee_rate_per_s.is_none(),
        (None, false) => false,
        (None, true) => !summary.within_error_budget(),
    };
    if failed {
        ExitCode::from(EXIT_TOO_MANY_ERRORS)
    } else {
        ExitCode::SUCCESS
    }
}

/// `--sweep`: runs every point, prints the table, writes what was asked.
fn sweep_points(sweep: &sweep::SweepOptions) -> ExitCode {
    let outcome = match sweep_run::run(sweep) {
        Ok(outcome) => outcome,
        Err(error) => {
            eprintln!("azq-loadgen: {error}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    print!("{}", sweep_run::table(&outcome));
    let writes = [
        (
            sweep.json_path.as_deref(),
            Some(sweep_run::json(&outcome).into_bytes()),
        ),
        (
            sweep.html_path.as_deref(),
            Some(sweep_run::html(&outcome).into_bytes()),
        ),
    ];
    match write_files(&writes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("azq-loadgen: {error}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// `azq-loadgen merge`: reads the logs, prints the table, writes what was asked.
fn merge_logs(options: &cli::MergeOptions) -> ExitCode {
    let mut inputs = Vec::with_capacity(options.inputs.len());
    for path in &options.inputs {
        let read = std::fs::read(path)
            .map_err(|error| error.to_string())
            .and_then(|bytes| merge::read_log(&bytes));
        match read {
            Ok(intervals) => inputs.push((path.display().to_string(), intervals)),
            Err(error) => {
                eprintln!("azq-loadgen: {}: {error}", path.display());
                return ExitCode::from(EXIT_FAILURE);
            }
        }
    }
    let merged = merge::merge(inputs);
    print!("{}", merge::table(&merged));
    let log = match options.hdr_log_path {
        Some(_) => match merge::write_log(&merged) {
            Ok(log) => Some(log),
            Err(error) => {
                eprintln!("azq-loadgen: {error}");
                return ExitCode::from(EXIT_FAILURE);
            }
        },
        None => None,
    };
    let writes = [
        (
            options.json_path.as_deref(),
            Some(merge::json(&merged).into_bytes()),
        ),
        (
            options.plot_path.as_deref(),
            Some(plot::merged_svg(&merged).into_bytes()),
        ),
        (
            options.csv_path.as_deref(),
            Some(merge::csv(&merged).into_bytes()),
        ),
        (options.hdr_log_path.as_deref(), log),
    ];
    match write_files(&writes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("azq-loadgen: {error}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Writes each file that was asked for and has contents, and says so.
fn write_files(writes: &[(Option<&Path>, Option<Vec<u8>>)]) -> Result<(), String> {
    for (path, contents) in writes {
        if let (Some(path), Some(contents)) = (path, contents) {
            std::fs::write(path, contents)
                .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
