//! The thread-per-core engine: one event loop pinned per `--cpus` entry, each driving its
//! share of the connections and recording into its own `Measurements`. Once a second every core
//! ships its interval's measurements to the main thread over a bounded channel and starts
//! afresh; cores share nothing else. Everything that runs on a core is generic over azq's
//! `Backend`; `set_up` and `start` run it on the plan's backend.
//!
//! - `plan`: what a run fixes before it starts (`RunPlan`).
//! - `setup`: before the run, a setup core creates the queues and preloads them (resumable,
//!   over many connections, bounded in time).
//! - `cores`: starts the cores, and runs their side tasks (the report, the depth sampler).
//! - `controller`: the autoscaler's side task (`--autoscale`): reads the queue, asks the
//!   policy, publishes the replicas ready.
//! - `core`: what the connections of one core share, and the run clock.
//! - `driver`: the task that drives one connection and its lanes.
//! - `lane`: the scenarios' per-lane state machines (pure, unit-tested).
//! - `lane_run`: a lane's pacing, budget and retries, and the requests in flight.
//! - `accounting`: what each answer or lost request counts as (pure, unit-tested).
//! - `work`: a worker's side of the accounting: the work between a Get and each Delete.
//! - `simulate`: `--simulate`, every lane, the sampler and the controller on one thread in
//!   virtual time, against `service_model`: azq's request path in-process.

mod accounting;
mod controller;
mod core;
mod cores;
mod driver;
mod lane;
mod lane_run;
mod plan;
mod service_model;
mod setup;
mod simulate;
mod work;

pub use controller::ScaleReport;
pub use cores::{start, CoreReport, Started};
pub use plan::{RunPlan, Simulated, INTERVAL_NS, VIRTUAL_EPOCH_US};
pub use service_model::ServiceModel;
pub use setup::set_up;
pub use simulate::{set_up as set_up_simulated, start as start_simulated};

/// The test plan `run.rs`'s tests share with the engine's.
#[cfg(test)]
pub(crate) use plan::tests;
