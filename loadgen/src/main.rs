//! azq-loadgen: a load generator for Azure Queue Storage endpoints (azq, Azurite, the real
//! service). This file is the command line and start-up only:
//!
//! - `schedule`: open/closed loop pacing and coordinated-omission-corrected timing.
//! - `metrics`: counts, errors and HdrHistograms per operation.

mod metrics;
mod schedule;

fn main() {}
