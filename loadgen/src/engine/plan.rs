//! What a run fixes before it starts (`RunPlan`): the target, the backend, the scenario, the
//! load, the lanes, retries and the workers; built by `run.rs` from the command line, shared by
//! every core.

use azq::runtime::select::Selected;

use crate::endpoint::{Credentials, Endpoint};
use crate::retry::RetryPolicy;
use crate::scenario::Scenario;
use crate::schedule::{LoadModel, NANOSECONDS_PER_SECOND};
use crate::wire::request::RequestSettings;
use crate::workers::WorkerPlan;

/// How often cores report and the progress line and time series advance.
pub const INTERVAL_NS: u64 = NANOSECONDS_PER_SECOND;

/// Everything a run needs, fixed before it starts.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The event loop the client cores run on.
    pub backend: Selected,
    pub endpoint: Endpoint,
    pub credentials: Credentials,
    pub settings: RequestSettings,
    pub scenario: Scenario,
    pub cpus: Vec<usize>,
    /// The CPUs were named with `--cpus` (the user keeps the server off them).
    pub cpus_pinned: bool,
    pub connections: usize,
    /// Lanes per connection (requests in flight on it).
    pub pipeline: usize,
    /// For `mixed`: connections that produce; the rest consume.
    pub producers: usize,
    pub load: LoadModel,
    pub warmup_ns: u64,
    /// Measured time; `None` when the run is bounded by `requests`.
    pub duration_ns: Option<u64>,
    /// Chains to start in the measured window, over all lanes.
    pub requests: Option<u64>,
    /// Fill each queue to this many messages before the run.
    pub preload: u64,
    /// Consumers put a new message for each one they delete.
    pub refill: bool,
    /// Seed of the Poisson schedules, retry jitter, work times and crash decisions.
    pub seed: u64,
    /// How failed requests are retried; `None`: never.
    pub retry: Option<RetryPolicy>,
    /// For `workers`: what a worker does with a message.
    pub workers: Option<WorkerPlan>,
}

impl RunPlan {
    pub(super) fn lanes(&self) -> usize {
        self.connections * self.pipeline
    }

    /// Whether the cores poll rather than sleep when idle: always in an open loop (punctual
    /// sends), and in a closed loop when the cores were pinned with `--cpus` (cheaper wake-ups).
    /// Polling takes the whole CPU for the run, so unpinned closed-loop cores sleep instead and
    /// leave a CPU they may share with the server to it.
    pub(super) fn polls(&self) -> bool {
        matches!(self.load, LoadModel::Open { .. }) || self.cpus_pinned
    }

    /// Lanes that put in `mixed` and `workers` (the first ones).
    pub(super) fn producer_lanes(&self) -> usize {
        self.producers * self.pipeline
    }

    /// When measuring starts, in run time.
    pub fn measure_start_ns(&self) -> u64 {
        self.warmup_ns
    }

    /// When no more chains start, in run time.
    pub(super) fn measure_end_ns(&self) -> u64 {
        match self.duration_ns {
            Some(duration) => self.warmup_ns + duration,
            None => u64::MAX,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::endpoint::{resolve, TargetArguments};

    /// A plan against the development endpoint: two connections on CPUs 0 and 1, one queue,
    /// 1 s of warm-up and 2 s measured.
    pub fn plan(scenario: Scenario, load: LoadModel) -> RunPlan {
        let (endpoint, credentials) = resolve(&TargetArguments::default()).unwrap();
        RunPlan {
            backend: Selected::Portable,
            endpoint,
            credentials,
            settings: RequestSettings {
                queue_names: vec!["q-0".to_string()],
                message_bytes: 1024,
                batch: 1,
                visibility_timeout_s: 30,
                api_version: "2026-04-06".to_string(),
                put_mark_nonce: 1,
            },
            scenario,
            cpus: vec![0, 1],
            cpus_pinned: false,
            connections: 2,
            pipeline: 1,
            producers: 0,
            load,
            warmup_ns: NANOSECONDS_PER_SECOND,
            duration_ns: Some(2 * NANOSECONDS_PER_SECOND),
            requests: None,
            preload: 0,
            refill: false,
            seed: 1,
            retry: None,
            workers: None,
        }
    }
}
