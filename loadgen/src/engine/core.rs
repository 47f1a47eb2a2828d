//! What the connections of one core share (`Core`: the plan, the run clock, the request
//! encoder, the interval's measurements), and the run clock every task of the core reads.
//!
//! The run clock also decides how a task waits for a deadline. A core that polls (see
//! `RunPlan::polls`) is awake anyway, so a wait is a timer. A core that parks sleeps in the
//! kernel between sends, which at a light load costs almost no CPU, but the kernel wakes a
//! thread tens of microseconds late at the median and milliseconds late at p99 on a busy machine:
//! so a parked core's waits end `spin_ns` early and poll for the rest (the send is punctual), and
//! after a send it polls for up to `spin_ns` for the answer (a prompt answer is read when it
//! arrives, not when the kernel gets round to waking the thread).

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future;

use azq::runtime::backend::Backend;

use crate::engine::plan::RunPlan;
use crate::metrics::Measurements;
use crate::wire::request::RequestEncoder;

/// Run time: nanoseconds since the shared start instant (0 before it).
#[derive(Clone, Copy, Debug)]
pub(super) struct RunClock {
    pub(super) start: Instant,
    /// How long before a deadline a parked core stops sleeping and polls, and how long it polls
    /// for an answer after a send; 0 on a core that polls anyway.
    pub(super) spin_ns: u64,
}

impl RunClock {
    pub(super) fn now_ns(self) -> u64 {
        Instant::now()
            .checked_duration_since(self.start)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64)
    }

    /// Waits for run time zero: the cores start their schedules together.
    pub(super) async fn wait_for_start<B: Backend>(self) {
        let wait = self.start.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            B::sleep(wait).await;
        }
    }

    /// Waits until run time `at_ns`. The timer only brings the wait to within `spin_ns` of the
    /// deadline, and on a backend whose timer ticks coarsely (tokio's wheel: whole
    /// milliseconds) to within a tick and a half more; the task polls for the rest: a late
    /// wake-up would be the client's own lateness, counted in every open-loop latency. A parked
    /// core uses the backend's precise timer (a timerfd on the portable backend), so it polls
    /// only `spin_ns` rather than a millisecond or two before each send; a polling core is
    /// awake anyway and uses the plain one.
    pub(super) async fn sleep_until<B: Backend>(self, at_ns: u64) {
        let parked = self.spin_ns > 0;
        let granularity = if parked {
            B::SLEEP_PRECISE_GRANULARITY
        } else {
            B::SLEEP_GRANULARITY
        };
        let granularity_ns = granularity.as_nanos() as u64;
        let timer_until_ns =
            at_ns.saturating_sub(granularity_ns + granularity_ns / 2 + self.spin_ns);
        let now = self.now_ns();
        if timer_until_ns > now {
            let wait = Duration::from_nanos(timer_until_ns - now);
            if parked {
                B::sleep_precise(wait).await;
            } else {
                B::sleep(wait).await;
            }
        }
        self.poll_until(at_ns).await;
    }

    /// Polls (yields to the core's other tasks and its I/O, without sleeping) for up to
    /// `spin_ns`, or until run time `until_ns` if that comes first: how a parked core waits
    /// for an answer it expects soon.
    pub(super) async fn spin(self, until_ns: u64) {
        if self.spin_ns > 0 {
            self.poll_until(until_ns.min(self.now_ns() + self.spin_ns))
                .await;
        }
    }

    async fn poll_until(self, at_ns: u64) {
        while self.now_ns() < at_ns {
            future::yield_now().await;
        }
    }
}

/// What the connections of one core share.
pub(super) struct Core {
    pub(super) plan: Arc<RunPlan>,
    pub(super) clock: RunClock,
    pub(super) encoder: RefCell<RequestEncoder>,
    pub(super) measurements: RefCell<Measurements>,
    /// The interval `measurements` belongs to; advanced by the reporter task.
    pub(super) interval_index: Cell<u64>,
}
