//! What the connections of one core share (`Core`: the plan, the run clock, the request
//! encoder, the interval's measurements), and the run clock every task of the core reads.

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

    /// Waits until run time `at_ns`. On a backend whose timer ticks coarsely (tokio: whole
    /// milliseconds), the timer only brings the wait to within a tick of the deadline and the
    /// task polls for the rest: a late wake-up would be the client's own lateness, counted in
    /// every open-loop latency.
    pub(super) async fn sleep_until<B: Backend>(self, at_ns: u64) {
        let granularity_ns = B::SLEEP_GRANULARITY.as_nanos() as u64;
        let timer_until_ns = match granularity_ns {
            0 => at_ns,
            _ => at_ns.saturating_sub(granularity_ns + granularity_ns / 2),
        };
        let now = self.now_ns();
        if timer_until_ns > now {
            B::sleep(Duration::from_nanos(timer_until_ns - now)).await;
        }
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
