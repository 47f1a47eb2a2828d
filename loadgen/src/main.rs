//! azq-loadgen: a load generator for Azure Queue Storage endpoints (azq, Azurite, the real
//! service). This file is the command line and start-up only:
//!
//! - `endpoint`: endpoint URL, connection string, account key or SAS.
//! - `wire`: request encoding and signing (azq's SharedKey code), response and XML parsing.
//! - `scenario`: per-lane state machines of the scenarios.
//! - `schedule`: open/closed loop pacing and coordinated-omission-corrected timing.
//! - `metrics`: counts, errors and HdrHistograms per operation.
//! - `report`, `plot`: the table, the JSON and the SVG.

mod endpoint;
mod metrics;
mod plot;
mod report;
mod scenario;
mod schedule;
mod wire;

fn main() {}
