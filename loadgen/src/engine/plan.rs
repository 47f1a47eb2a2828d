//! What a run fixes before it starts (`RunPlan`): the target, the backend, the scenario, the
//! load, the lanes, retries and the workers; built by `run.rs` from the command line, shared by
//! every core.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use azq::runtime::select::Selected;

use crate::autoscale::AutoscalePolicy;
use crate::endpoint::{Credentials, Endpoint};
use crate::engine::service_model::ServiceModel;
use crate::retry::RetryPolicy;
use crate::scenario::Scenario;
use crate::schedule::{LoadModel, RunShape, NANOSECONDS_PER_SECOND};
use crate::simulation::SimulationPlan;
use crate::wire::request::RequestSettings;
use crate::workers::WorkerPlan;

/// How often cores report and the progress line and time series advance.
pub const INTERVAL_NS: u64 = NANOSECONDS_PER_SECOND;

/// The fastest open loop, in operations a second per client core, whose cores park between
/// sends. A parked core polls for `engine::cores::PARKED_SPIN` before each send and after it
/// (and on tokio for up to a millisecond and a half more, its timer's tick): at 1,000 sends a
/// second that is already half the core, and above it polling all the time costs little more.
pub const PARKED_RATE_PER_CORE_MAX: f64 = 1000.0;

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
    /// `--shape`: the open loop's rate over run time, which the pacers follow instead of
    /// `load`'s constant rate.
    pub shape: Option<Arc<RunShape>>,
    pub warmup_ns: u64,
    /// Measured time; `None` when the run is bounded by `requests`.
    pub duration_ns: Option<u64>,
    /// How long after the measured window an open loop may still send what it scheduled in
    /// the window (`--grace`); what it has not sent by then is counted unsent.
    pub grace_ns: u64,
    /// Chains to start in the measured window, over all lanes.
    pub requests: Option<u64>,
    /// Fill each queue to this many messages before the run.
    pub preload: u64,
    /// How long the preload may take before the run stops (it resumes when run again).
    pub preload_timeout_ns: u64,
    /// Scrape the server's `/_azq/metrics` once a second beside the depth (`--server-metrics`).
    pub server_metrics: bool,
    /// Consumers put a new message for each one they delete.
    pub refill: bool,
    /// Seed of the Poisson schedules, retry jitter, work times and crash decisions.
    pub seed: u64,
    /// How failed requests are retried; `None`: never.
    pub retry: Option<RetryPolicy>,
    /// For `workers`: what a worker does with a message.
    pub workers: Option<WorkerPlan>,
    /// For `workers` with `--autoscale`: the policy core 0's controller follows, and the
    /// replicas ready now, which it sets and every worker reads (worker `i` takes messages
    /// while `i` is below it). Without autoscaling every worker is always ready.
    pub autoscale: Option<AutoscalePolicy>,
    pub replicas_ready: Arc<AtomicUsize>,
    /// `--simulate`: the run happens in virtual time against this service, not over the
    /// network (`engine::simulate`).
    pub simulation: Option<Arc<Simulated>>,
}

/// Where a simulation's virtual clock starts, in µs since the Unix epoch (2026-01-01 00:00 UTC):
/// a fixed instant, so that what the service derives from its clock (message IDs, pop receipts,
/// and through them which deliveries crash) is the same in every run of the same seed.
pub const VIRTUAL_EPOCH_US: u64 = 1_767_225_600_000_000;

/// A simulated run's service and assumptions, shared by its steps: a stepped run's steps follow
/// each other against the same service, as a real one's do against the same server.
#[derive(Debug)]
pub struct Simulated {
    pub plan: SimulationPlan,
    service: Mutex<ServiceModel>,
    /// Where the next step's run time zero lies on the virtual clock, µs since the Unix epoch.
    epoch_us: AtomicU64,
    /// When the simulation started, by the wall clock: the report's start for the virtual epoch.
    started: SystemTime,
}

impl Simulated {
    /// A simulation of `plan` against `service`, its clock at `VIRTUAL_EPOCH_US`.
    pub fn new(plan: SimulationPlan, service: ServiceModel) -> Simulated {
        Simulated {
            plan,
            service: Mutex::new(service),
            epoch_us: AtomicU64::new(VIRTUAL_EPOCH_US),
            started: SystemTime::now(),
        }
    }

    /// The wall-clock instant reports give for the virtual instant `epoch_us`.
    pub(super) fn wall_clock(&self, epoch_us: u64) -> SystemTime {
        self.started + Duration::from_micros(epoch_us.saturating_sub(VIRTUAL_EPOCH_US))
    }

    /// The service, for one thread at a time (the setup, then each step's simulation).
    pub(super) fn lock(&self) -> MutexGuard<'_, ServiceModel> {
        // A panic in a step's simulation is reported by its thread; the service is then not
        // used again.
        self.service
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn epoch_us(&self) -> u64 {
        self.epoch_us.load(Ordering::Acquire)
    }

    pub(super) fn set_epoch_us(&self, epoch_us: u64) {
        self.epoch_us.store(epoch_us, Ordering::Release);
    }
}

impl RunPlan {
    pub(super) fn lanes(&self) -> usize {
        self.connections * self.pipeline
    }

    /// Whether the cores poll rather than sleep when idle: in an open loop faster than
    /// `PARKED_RATE_PER_CORE_MAX` per core (punctual sends, and the CPU is busy anyway), and in
    /// a closed loop when the cores were pinned with `--cpus` (cheaper wake-ups). Polling takes
    /// the whole CPU for the run, so a lighter open loop parks between sends (and polls only
    /// briefly around each, see `RunClock`), and unpinned closed-loop cores sleep and leave a
    /// CPU they may share with the server to it.
    pub(super) fn polls(&self) -> bool {
        match self.load {
            LoadModel::Open { rate_per_s, .. } => {
                let cores_used = self.cpus.len().min(self.connections).max(1);
                // A shaped loop polls when its peak would.
                let peak_rate_per_s = self
                    .shape
                    .as_deref()
                    .map_or(rate_per_s, RunShape::peak_rate_per_s);
                peak_rate_per_s / cores_used as f64 > PARKED_RATE_PER_CORE_MAX
            }
            LoadModel::Closed => self.cpus_pinned,
        }
    }

    /// Whether worker `worker_index` (0 for the first worker lane) takes messages now.
    pub(super) fn worker_is_ready(&self, worker_index: usize) -> bool {
        self.autoscale.is_none() || worker_index < self.replicas_ready.load(Ordering::Acquire)
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

    /// When an open loop stops sending chains scheduled in the measured window, in run time.
    pub(super) fn send_end_ns(&self) -> u64 {
        self.measure_end_ns().saturating_add(self.grace_ns)
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
            shape: None,
            warmup_ns: NANOSECONDS_PER_SECOND,
            duration_ns: Some(2 * NANOSECONDS_PER_SECOND),
            grace_ns: NANOSECONDS_PER_SECOND,
            requests: None,
            preload: 0,
            preload_timeout_ns: 60 * NANOSECONDS_PER_SECOND,
            server_metrics: false,
            refill: false,
            seed: 1,
            retry: None,
            workers: None,
            autoscale: None,
            replicas_ready: Arc::default(),
            simulation: None,
        }
    }

    #[test]
    fn a_light_open_loop_parks_and_a_heavy_one_or_a_pinned_closed_loop_polls() {
        let open = |rate_per_s| LoadModel::Open {
            rate_per_s,
            arrival: crate::schedule::Arrival::Constant,
        };
        // Two connections on two cores: 2,000/s is 1,000/s per core, the most that parks.
        assert!(!plan(Scenario::Put, open(50.0)).polls());
        assert!(!plan(Scenario::Put, open(2000.0)).polls());
        assert!(plan(Scenario::Put, open(2001.0)).polls());
        // One connection uses one core of the two, so it carries the whole rate.
        let mut one_connection = plan(Scenario::Put, open(1500.0));
        one_connection.connections = 1;
        assert!(one_connection.polls());
        // Pinning does not make a light open loop poll; it does make a closed loop poll.
        let mut pinned = plan(Scenario::Put, open(50.0));
        pinned.cpus_pinned = true;
        assert!(!pinned.polls());
        assert!(!plan(Scenario::Put, LoadModel::Closed).polls());
        pinned.load = LoadModel::Closed;
        assert!(pinned.polls());
    }
}
