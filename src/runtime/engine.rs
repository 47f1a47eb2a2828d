//! A shard's queue state inside its executor: applies commands at the current time and keeps one
//! backend timer armed for the state's next deadline (lease ends, delayed puts, TTL expiry), so
//! expired messages are freed without any request touching their queue. One timer per shard, not
//! per message: glommio keeps its timers in a BTreeMap, and the wheel in `queue/` is cheaper than
//! either backend's timers for millions of messages.

use std::cell::{Cell, Ref, RefCell};
use std::future::{poll_fn, Future};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use super::backend::Backend;

use crate::config::{TIMER_ENTRIES_PER_STEP_MAX, TIMER_STEP_PAUSE_US};
use crate::error::StorageError;
use crate::queue::{Command, Replicas, Reply, ShardState};
use crate::time::{Clock, SystemClock};

/// Longest the timer task sleeps without a deadline, so a clock step is noticed eventually.
const TIMER_IDLE_MS: u64 = 60_000;

/// One shard's state and its timer.
pub struct Engine {
    state: RefCell<ShardState>,
    clock: SystemClock,
    /// The deadline the timer task is sleeping towards (`u64::MAX`: none).
    armed_deadline_ms: Cell<u64>,
    /// Wakes the timer task when a command adds an earlier deadline.
    wake: Wake,
}

/// A wake-up for one task on the same thread: set by `notify`, taken by `woken`.
#[derive(Default)]
struct Wake {
    pending: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl Wake {
    fn notify(&self) {
        self.pending.set(true);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Completes once `notify` has been called since the last wake-up.
    fn woken(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(|context| {
            if self.pending.replace(false) {
                Poll::Ready(())
            } else {
                self.waker.set(Some(context.waker().clone()));
                Poll::Pending
            }
        })
    }
}

impl Engine {
    /// Creates the engine and starts its timer task on the current executor.
    pub fn start<B: Backend>(state: ShardState) -> Rc<Engine> {
        let engine = Rc::new(Engine {
            state: RefCell::new(state),
            clock: SystemClock,
            armed_deadline_ms: Cell::new(u64::MAX),
            wake: Wake::default(),
        });
        B::spawn(run_timer::<B>(engine.clone()));
        engine
    }

    /// The current time, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The shard's copy of the replicated settings, for planning a request. Planning never
    /// waits, so the borrow ends before any command is applied.
    pub fn replicas(&self) -> Ref<'_, Replicas> {
        Ref::map(self.state.borrow(), ShardState::replicas)
    }

    /// Applies `command` now.
    pub fn apply(&self, command: Command) -> Result<Reply, StorageError> {
        let mut state = self.state.borrow_mut();
        let outcome = state.apply(command, self.clock.now_ms());
        if let Some(deadline_ms) = state.next_deadline_ms() {
            if deadline_ms < self.armed_deadline_ms.get() {
                self.wake.notify();
            }
        }
        outcome
    }
}

async fn run_timer<B: Backend>(engine: Rc<Engine>) {
    loop {
        let now_ms = engine.clock.now_ms();
        let deadline_ms = engine.state.borrow().next_deadline_ms().unwrap_or(u64::MAX);
        if deadline_ms <= now_ms {
            engine.armed_deadline_ms.set(now_ms);
            engine
                .state
                .borrow_mut()
                .advance(now_ms, TIMER_ENTRIES_PER_STEP_MAX);
            // Let requests run between bounded steps. Not `yield_now`: a task that is ready
            // again at once keeps glommio in its run queue, which polls its rings for I/O only
            // when the queue is empty or its 100 ms preempt timer fires, so a long backlog (a
            // cleared queue's graveyard: measured, docs/BENCHMARKS.md; expiries due at once)
            // held every request for up to 100 ms. A short sleep empties the run queue, so
            // connections are served in between (on either backend).
            B::sleep(Duration::from_micros(TIMER_STEP_PAUSE_US)).await;
            continue;
        }
        engine.armed_deadline_ms.set(deadline_ms);
        let sleep_ms = (deadline_ms - now_ms).min(TIMER_IDLE_MS);
        futures_lite::future::or(
            B::sleep(Duration::from_millis(sleep_ms)),
            engine.wake.woken(),
        )
        .await;
    }
}
