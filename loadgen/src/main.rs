//! azq-loadgen: a load generator for Azure Queue Storage endpoints (azq, Azurite, the real
//! service). This file is the command line and start-up only:
//!
//! - `cli`: flags into validated `Options`.
//! - `endpoint`: endpoint URL, connection string, account key or SAS.
//! - `wire`: request encoding and signing (azq's SharedKey code), response and XML parsing.
//! - `runtime`: the async runtime behind a narrow seam (pinned executors, tasks, timers, TCP).
//! - `connection`: one keep-alive connection on a client core.
//! - `scenario`: per-lane state machines of the scenarios.
//! - `schedule`: open/closed loop pacing and coordinated-omission-corrected timing.
//! - `metrics`: counts, errors and HdrHistograms per operation.
//! - `engine`: pinned executors, connections, setup and preload, depth sampling.
//! - `run`: one run on the main thread: start, gather reports, progress line, interval log.
//! - `report`, `plot`: the table, the JSON and the SVG.

mod cli;
mod connection;
mod endpoint;
mod engine;
mod metrics;
mod plot;
mod report;
mod run;
mod runtime;
mod scenario;
mod schedule;
mod wire;

use std::path::Path;
use std::process::ExitCode;

/// Exit status when the run completed but its error ratio exceeded `--max-error-rate`.
const EXIT_TOO_MANY_ERRORS: u8 = 1;
/// Exit status for a bad command line or a run that could not start.
const EXIT_FAILURE: u8 = 2;

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(cli::Command::Run(options)) => options,
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
    ];
    for (path, contents) in writes {
        if let (Some(path), Some(contents)) = (path, contents) {
            if let Err(error) = write_file(path, &contents) {
                eprintln!("azq-loadgen: {error}");
                return ExitCode::from(EXIT_FAILURE);
            }
            println!("wrote {}", path.display());
        }
    }
    if summary.within_error_budget() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_TOO_MANY_ERRORS)
    }
}

fn write_file(path: &Path, contents: &[u8]) -> Result<(), String> {
    std::fs::write(path, contents)
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}
