//! Starting the cores: one event loop pinned per `--cpus` entry on the plan's backend, each
//! driving its share of the connections (connection `c` runs on core `c % cores`); and the side
//! tasks of a core: the once-a-second report to the main thread and, on core 0, during a
//! consuming run a depth sample with Get Metadata, and with `--server-metrics` a scrape of the
//! server's `/_azq/metrics`, each on a connection of its own.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use azq::runtime::backend::{Backend, Idle};
use azq::runtime::select::OnBackend;

use crate::connection::Connection;
use crate::engine::controller::{control_replicas, ScaleReport};
use crate::engine::core::{Core, RunClock};
use crate::engine::driver::drive_connection;
use crate::engine::lane_run::LaneRun;
use crate::engine::plan::{RunPlan, INTERVAL_NS};
use crate::engine::setup::queue_depths;
use crate::metrics::{CoreUsage, Measurements};
use crate::runtime::{start_core, CoreHandle, CoreOptions};
use crate::scenario::{roles, Role};
use crate::wire::exposition::{encode_scrape, ServerMetrics};
use crate::wire::request::RequestEncoder;

/// How long an idle core keeps polling before it sleeps in the kernel (see `RunPlan::polls`;
/// on the portable backend a polling core polls for the whole run, see `Idle::Poll`).
/// Waking a sleeping thread costs tens of microseconds at the median and milliseconds at p99 on
/// a busy machine, all of it added to every latency measured: at 200 ops/s, polling cut the p99
/// send lag of an open loop from 3.7 ms to 39 us. In a closed loop the wake-ups cost throughput
/// instead: on one core with 32 connections, polling raised Puts from about 48,000 to 52,000-
/// 60,000 a second, and with one connection halved the round trip (108 to 51 us).
const SPIN_BEFORE_PARK: Duration = Duration::from_millis(10);
/// How long a parked core polls before each scheduled send and for the answer after it (see
/// `RunClock`): enough to absorb the kernel's usual wake-up delay on a busy machine, short
/// enough that a light open loop costs a few percent of a core (docs/BENCHMARKS.md, "azq-loadgen
/// at a light load").
pub(super) const PARKED_SPIN: Duration = Duration::from_micros(250);
/// Time between starting the cores and run time zero.
const START_DELAY: Duration = Duration::from_millis(200);
/// The longest wait `--start-at` may ask for.
const START_AT_WAIT_MAX: Duration = Duration::from_secs(86_400);
/// Reports a core may have queued for the main thread before it waits (the main thread drains
/// them continuously, so this is never reached in practice; it only has to be bounded).
pub(super) const REPORTS_QUEUED_MAX: usize = 1024;

/// The sending end of the channel from the cores to the main thread (a plain bounded channel of
/// the standard library: a send that finds it full blocks the core's thread, which the main
/// thread's continuous draining never lets happen).
type ReportSender = SyncSender<CoreReport>;

/// What cores tell the main thread.
#[derive(Debug)]
pub enum CoreReport {
    /// Measurements of interval `index` (run time `[index, index + 1)` seconds) of `core`.
    Interval {
        core: usize,
        index: u64,
        measurements: Box<Measurements>,
    },
    /// The summed approximate message count of the run's queues at run time `at_ns`.
    Depth { at_ns: u64, messages: u64 },
    /// What the server held at run time `at_ns`, from its metrics.
    Server { at_ns: u64, metrics: ServerMetrics },
    /// The autoscaler's controller read the queue and decided, or a replica turned ready.
    Scale(ScaleReport),
    /// `core` has finished: the measurements of its last, partial interval `index`, and the run
    /// time of its last answer.
    Finished {
        core: usize,
        index: u64,
        measurements: Box<Measurements>,
        last_answer_ns: u64,
        /// How the core's thread spent the run, when the kernel tells.
        usage: Option<CoreUsage>,
    },
    /// `core` could not run at all.
    Failed { core: usize, reason: String },
}

/// A started run.
pub struct Started {
    /// Where the cores' reports arrive.
    pub reports: Receiver<CoreReport>,
    /// Join these after the last `Finished` report.
    pub executors: Vec<CoreHandle<()>>,
    /// Run time zero, by the wall clock.
    pub start_wall_clock: SystemTime,
}

/// Starts one event loop per CPU on the plan's backend, for run time zero at `start_at` (by the
/// wall clock) or, without it, as soon as the cores can be ready.
pub fn start(plan: Arc<RunPlan>, start_at: Option<SystemTime>) -> Result<Started, String> {
    /// `start_cores`, run on the plan's backend.
    struct StartCores(Arc<RunPlan>, Option<SystemTime>);
    impl OnBackend for StartCores {
        type Output = Result<Started, String>;
        fn run<B: Backend>(self) -> Self::Output {
            start_cores::<B>(self.0, self.1)
        }
    }
    plan.backend.dispatch(StartCores(plan.clone(), start_at))
}

/// `start` on backend `B`.
fn start_cores<B: Backend>(
    plan: Arc<RunPlan>,
    start_at: Option<SystemTime>,
) -> Result<Started, String> {
    let (reports, receiver) = std::sync::mpsc::sync_channel(REPORTS_QUEUED_MAX);
    let now = Instant::now();
    let now_wall_clock = SystemTime::now();
    // Give every executor time to start and connect before the schedule begins, so that no
    // core's first requests are late because its thread or connections were still being made.
    let wait = match start_at {
        None => START_DELAY,
        Some(at) => {
            let wait = at.duration_since(now_wall_clock).map_err(|late| {
                format!(
                    "--start-at is {:.1} s in the past (it must come after setup)",
                    late.duration().as_secs_f64()
                )
            })?;
            if wait > START_AT_WAIT_MAX {
                return Err("--start-at is more than a day away".to_string());
            }
            wait
        }
    };
    let start = now + wait;
    let mut executors = Vec::with_capacity(plan.cpus.len());
    for (core, &cpu) in plan.cpus.iter().enumerate() {
        let plan = plan.clone();
        let reports = reports.clone();
        let options = CoreOptions {
            cpu,
            name: format!("azq-loadgen-{core}"),
            idle: if plan.polls() {
                Idle::Poll(SPIN_BEFORE_PARK)
            } else {
                Idle::Park
            },
        };
        let executor = start_core::<B, _, _, _>(options, move || async move {
            run_core::<B>(core, plan, start, reports).await
        })?;
        executors.push(executor);
    }
    Ok(Started {
        reports: receiver,
        executors,
        start_wall_clock: now_wall_clock + wait,
    })
}

async fn run_core<B: Backend>(
    core_index: usize,
    plan: Arc<RunPlan>,
    start: Instant,
    reports: ReportSender,
) {
    let encoder = match RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    ) {
        Ok(encoder) => encoder,
        Err(error) => {
            let _ = reports.send(CoreReport::Failed {
                core: core_index,
                reason: error.0,
            });
            return;
        }
    };
    let clock = RunClock {
        start,
        spin_ns: if plan.polls() {
            0
        } else {
            PARKED_SPIN.as_nanos() as u64
        },
    };
    let core = Rc::new(Core {
        plan: plan.clone(),
        clock,
        encoder: RefCell::new(encoder),
        measurements: RefCell::new(Measurements::default()),
        interval_index: Cell::new(0),
    });
    let cores = plan.cpus.len();
    let lane_roles = lane_roles(&plan);
    clock.wait_for_start::<B>().await;
    let scheduler_at_start = read_scheduler_statistics();
    let mut tasks = Vec::new();
    for connection in (core_index..plan.connections).step_by(cores) {
        let lanes: Vec<LaneRun> = (0..plan.pipeline)
            .map(|slot| {
                let lane_index = connection * plan.pipeline + slot;
                LaneRun::new(&plan, lane_index, lane_roles[lane_index])
            })
            .collect();
        tasks.push(B::spawn_task(drive_connection::<B>(core.clone(), lanes)));
    }
    let reporter = B::spawn_task(report_intervals::<B>(
        core.clone(),
        core_index,
        reports.clone(),
    ));
    let sampler = (core_index == 0 && plan.scenario.consumes())
        .then(|| B::spawn_task(sample_depth::<B>(core.clone(), reports.clone())));
    let scraper = (core_index == 0 && plan.server_metrics)
        .then(|| B::spawn_task(scrape_server::<B>(core.clone(), reports.clone())));
    let controller = (core_index == 0 && plan.autoscale.is_some()).then(|| {
        let reports = reports.clone();
        B::spawn_task(control_replicas::<B>(core.clone(), move |scale| {
            let _ = reports.send(CoreReport::Scale(scale));
        }))
    });

    let mut last_answer_ns = 0;
    for task in tasks {
        last_answer_ns = last_answer_ns.max(task.await);
    }
    // Dropping a task cancels it: they only sleep, read the queue and report.
    drop(reporter);
    drop(sampler);
    drop(scraper);
    drop(controller);
    let measurements = core.measurements.replace(Measurements::default());
    let usage = match (scheduler_at_start, read_scheduler_statistics()) {
        (Some(start), Some(end)) => Some(CoreUsage {
            cpu: plan.cpus[core_index],
            elapsed_ns: clock.now_ns(),
            running_ns: end.0.saturating_sub(start.0),
            waiting_ns: end.1.saturating_sub(start.1),
        }),
        _ => None,
    };
    let _ = reports.send(CoreReport::Finished {
        core: core_index,
        index: core.interval_index.get(),
        measurements: Box::new(measurements),
        last_answer_ns,
        usage,
    });
}

/// The calling thread's time on the CPU and time runnable but waiting for it, in nanoseconds,
/// from Linux's schedstat. Waiting time is the one sign of a client starved by other processes
/// on its CPU that no latency figure shows on its own.
fn read_scheduler_statistics() -> Option<(u64, u64)> {
    parse_scheduler_statistics(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

/// Parses `running_ns waiting_ns timeslices`.
fn parse_scheduler_statistics(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some((fields.next()?.ok()?, fields.next()?.ok()?))
}

/// Roles of all lanes: for `mixed`, the lanes of the first `producers` connections produce.
/// Queues are assigned separately among producers and among the others, so that every queue
/// has both (with more queues than lanes of a kind, each lane takes every queue in turn).
pub(super) fn lane_roles(plan: &RunPlan) -> Vec<Role> {
    roles(plan.scenario, plan.lanes(), plan.producer_lanes())
}

/// Ships the core's measurements once a second, until cancelled.
async fn report_intervals<B: Backend>(core: Rc<Core>, core_index: usize, reports: ReportSender) {
    core.clock.wait_for_start::<B>().await;
    loop {
        let index = core.interval_index.get();
        core.clock.sleep_until::<B>((index + 1) * INTERVAL_NS).await;
        let measurements = core.measurements.replace(Measurements::default());
        core.interval_index.set(index + 1);
        let report = CoreReport::Interval {
            core: core_index,
            index,
            measurements: Box::new(measurements),
        };
        if reports.send(report).is_err() {
            return;
        }
    }
}

/// What one of the once-a-second samplers made of a second (`every_second`).
enum Sampled {
    /// Done for this second.
    Next,
    /// The connection was lost: made again at the next second.
    Lost,
    /// Nothing more to sample: the sampler ends.
    End,
}

/// Calls `sample` with a connection to the server and the time once a second from the run's
/// start, until cancelled or `sample` says `End`. A connection that could not be made, or was
/// lost, is made again at the next second.
async fn every_second<B: Backend>(
    core: &Core,
    mut sample: impl AsyncFnMut(&mut Connection<B>, u64) -> Sampled,
) {
    let mut connection: Option<Connection<B>> = None;
    let mut second = 0;
    core.clock.wait_for_start::<B>().await;
    loop {
        core.clock.sleep_until::<B>(second * INTERVAL_NS).await;
        second += 1;
        if connection.is_none() {
            connection = Connection::connect(&core.plan.endpoint).await.ok();
        }
        let Some(open) = connection.as_mut() else {
            continue;
        };
        let at_ns = core.clock.now_ns();
        match sample(open, at_ns).await {
            Sampled::Next => {}
            Sampled::Lost => connection = None,
            Sampled::End => return,
        }
    }
}

/// Samples the total depth of the run's queues once a second, until cancelled. It has its own
/// encoder: the core's is shared by the connections and must not stay borrowed across an await.
async fn sample_depth<B: Backend>(core: Rc<Core>, reports: ReportSender) {
    let plan = &core.plan;
    let Ok(mut encoder) = RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    ) else {
        return;
    };
    every_second::<B>(&core, async |open, at_ns| {
        match queue_depths(&mut encoder, open).await {
            Ok(depths) => {
                let _ = reports.send(CoreReport::Depth {
                    at_ns,
                    messages: depths.iter().sum(),
                });
                Sampled::Next
            }
            Err(_) => Sampled::Lost,
        }
    })
    .await;
}

/// Scrapes the server's metrics once a second, until cancelled. A server that answers anything
/// but a 200 with at least one of `ServerMetrics`' series (Azurite, Azure, an older azq, azq
/// with `--metrics off`) is not asked again: the run goes on without the series.
async fn scrape_server<B: Backend>(core: Rc<Core>, reports: ReportSender) {
    let mut request = Vec::with_capacity(256);
    encode_scrape(&core.plan.endpoint.host_header, &mut request);
    every_second::<B>(&core, async |open, at_ns| {
        if open.send(&request).await.is_err() {
            return Sampled::Lost;
        }
        let metrics = match open.read_response().await {
            Ok(response) if response.status == 200 => {
                ServerMetrics::from_exposition(&String::from_utf8_lossy(response.body))
            }
            Ok(_) => return Sampled::End,
            Err(_) => return Sampled::Lost,
        };
        if metrics.is_empty() {
            return Sampled::End;
        }
        let _ = reports.send(CoreReport::Server { at_ns, metrics });
        Sampled::Next
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_statistics() {
        assert_eq!(
            parse_scheduler_statistics("1200 3400 5\n"),
            Some((1200, 3400))
        );
        assert_eq!(parse_scheduler_statistics("1200"), None);
        assert_eq!(parse_scheduler_statistics("a b c"), None);
        // This thread's own line parses on Linux.
        assert!(read_scheduler_statistics().is_some());
    }
}
