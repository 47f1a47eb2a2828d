//! The autoscaler's controller (`--autoscale`), a side task of core 0: at each of the policy's
//! evaluation times it reads the queue length (Get Queue Metadata's approximate count, or for
//! `count=visible` a Peek of 32, as KEDA's azure-queue scaler does), asks the pure
//! `autoscale::Autoscaler` for the replicas, and publishes how many are ready (after the cold
//! start) in the plan's `replicas_ready`, which the workers read. Every decision and every
//! replica that turns ready is reported to the main thread.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use azq::runtime::backend::Backend;
use azq::time::unix_ms;

use crate::autoscale::{AutoscalePolicy, Autoscaler, QueueCount, ReadyReplicas};
use crate::connection::Connection;
use crate::engine::core::Core;
use crate::engine::setup::queue_depths;
use crate::wire::listing::listed_messages;
use crate::wire::request::{RequestEncoder, RequestKind};

/// Messages KEDA's scaler peeks for `visibleonly` (the service's most per Peek); at this many
/// it falls back to the approximate count.
pub(super) const VISIBLE_PEEK_MESSAGES: u32 = 32;
/// Pause before reading again after a failed read.
const READ_RETRY_DELAY: Duration = Duration::from_millis(100);

/// What the controller reports: the queue length it read (`None`: a replica turned ready,
/// nothing was read), the replicas asked for, and those ready, at run time `at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleReport {
    pub at_ns: u64,
    pub observed: Option<u64>,
    pub desired: usize,
    pub ready: usize,
}

/// The controller's schedule and decisions, without I/O or clocks: when it next acts, and what
/// a queue reading (or a replica turning ready) makes of the fleet. The task below and the
/// simulator (`simulate.rs`) both run it; only how they read the queue and wait differs.
pub(super) struct Controller {
    autoscaler: Autoscaler,
    ready: ReadyReplicas,
    cold_start_ns: u64,
    /// The last queue length read: a failed read keeps it, as KEDA keeps its last metric.
    observed: u64,
    /// The last instant reported: every replica turning ready after it is reported in turn.
    reported_ns: u64,
}

impl Controller {
    /// The controller of `policy`; the fleet starts at its minimum, already running.
    pub(super) fn new(policy: AutoscalePolicy) -> Controller {
        let cold_start_ns = policy.cold_start_ns;
        let autoscaler = Autoscaler::new(policy);
        let mut ready = ReadyReplicas::default();
        ready.ask(0, autoscaler.replicas(), 0);
        Controller {
            autoscaler,
            ready,
            cold_start_ns,
            observed: 0,
            reported_ns: 0,
        }
    }

    /// The replicas ready at run time zero.
    pub(super) fn initial_replicas(&self) -> usize {
        self.autoscaler.replicas()
    }

    /// When the controller acts next, and whether it reads the queue then (an evaluation) or
    /// only reports a replica turning ready. Both loops run on their nominal grid (KEDA's
    /// polls, the HPA's syncs), and a decision is stamped with its nominal time: however late
    /// the waiting ends, the schedule is the policy's own, and a replica is never published
    /// ready before its time.
    pub(super) fn next_ns(&self) -> (u64, bool) {
        let evaluation_ns = self.autoscaler.next_evaluation_ns();
        let at_ns = self
            .ready
            .next_ready_ns(self.reported_ns)
            .map_or(evaluation_ns, |ready_ns| ready_ns.min(evaluation_ns));
        (at_ns, at_ns == evaluation_ns)
    }

    /// Acts at `at_ns` (from `next_ns`): an evaluation with the queue length read (`None`: the
    /// read failed, the last one stands), or a readiness report. Returns what to report; its
    /// `ready` is what the workers must see from now on.
    pub(super) fn act(&mut self, at_ns: u64, evaluation: bool, read: Option<u64>) -> ScaleReport {
        let report = if evaluation {
            if let Some(length) = read {
                self.observed = length;
            }
            let decision = self.autoscaler.evaluate(at_ns, self.observed);
            self.ready.ask(at_ns, decision.desired, self.cold_start_ns);
            ScaleReport {
                at_ns,
                observed: Some(self.observed),
                desired: decision.desired,
                ready: self.ready.ready(at_ns),
            }
        } else {
            ScaleReport {
                at_ns,
                observed: None,
                desired: self.autoscaler.replicas(),
                ready: self.ready.ready(at_ns),
            }
        };
        self.reported_ns = at_ns;
        report
    }
}

/// Runs the controller until cancelled, handing each decision and readiness to `report`.
pub(super) async fn control_replicas<B: Backend>(core: Rc<Core>, report: impl Fn(ScaleReport)) {
    let plan = &core.plan;
    let Some(policy) = plan.autoscale.clone() else {
        return;
    };
    let mut settings = plan.settings.clone();
    settings.batch = VISIBLE_PEEK_MESSAGES;
    let Ok(mut encoder) =
        RequestEncoder::new(plan.endpoint.clone(), plan.credentials.clone(), settings)
    else {
        return;
    };
    let count = policy.count;
    let mut controller = Controller::new(policy);
    plan.replicas_ready
        .store(controller.initial_replicas(), Ordering::Release);
    let mut connection: Option<Connection<B>> = None;
    core.clock.wait_for_start::<B>().await;
    loop {
        let (at_ns, evaluation) = controller.next_ns();
        core.clock.sleep_until::<B>(at_ns).await;
        let read = if evaluation {
            let read = read_length(&mut connection, &mut encoder, count, plan).await;
            if read.is_none() {
                B::sleep(READ_RETRY_DELAY).await;
            }
            read
        } else {
            None
        };
        let scale = controller.act(at_ns, evaluation, read);
        report(scale);
        plan.replicas_ready.store(scale.ready, Ordering::Release);
    }
}

/// The queue length as the policy counts it, or `None` when it could not be read.
async fn read_length<B: Backend>(
    connection: &mut Option<Connection<B>>,
    encoder: &mut RequestEncoder,
    count: QueueCount,
    plan: &crate::engine::RunPlan,
) -> Option<u64> {
    if connection.is_none() {
        *connection = Connection::connect(&plan.endpoint).await.ok();
    }
    let open = connection.as_mut()?;
    if count == QueueCount::VisibleOnly {
        let mut output = Vec::with_capacity(512);
        encoder
            .encode(0, RequestKind::Peek, unix_ms(), &mut output)
            .ok()?;
        let peeked = match open.send(&output).await {
            Ok(()) => match open.read_response().await {
                Ok(response) if response.is_success() => {
                    Some(listed_messages(response.body).count() as u64)
                }
                _ => None,
            },
            Err(_) => None,
        };
        match peeked {
            Some(visible) if visible < u64::from(VISIBLE_PEEK_MESSAGES) => return Some(visible),
            Some(_) => {}
            None => {
                *connection = None;
                return None;
            }
        }
    }
    match queue_depths(encoder, open).await {
        Ok(depths) => Some(depths.iter().sum()),
        Err(_) => {
            *connection = None;
            None
        }
    }
}
