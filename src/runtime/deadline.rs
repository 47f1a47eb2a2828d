//! Read timeouts without a timer per read: `within` bounds a read by a deadline that one
//! sweep per shard thread checks, every `READ_DEADLINE_SWEEP_MS`, instead of arming a timer in
//! the event loop each time a read waits. In a closed loop every read of a keep-alive
//! connection waits (the client sends its next request only after the answer), so a timer per
//! read was a timer per request: on glommio an entry in its reactor's `BTreeMap` (inserted,
//! removed, and the map split at every turn of the loop), on tokio a registration in its timer
//! wheel under the driver's lock. Here a read that completes at once costs nothing, and one that
//! waits takes a reused slot of a per-thread table: no allocation, no timer, no clock read. The
//! sweep reads the clock once per turn: a slot's first turn notes that instant (the read began
//! to wait before it), and the read fails at the first turn at least `timeout` after it. So a
//! read never fails early, and fails at most one sweep late, plus however late a busy thread
//! runs that one turn (the lateness of turns does not add up over a long timeout). The sweep
//! runs only while some read waits.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use super::backend::Backend;
use crate::limits::READ_DEADLINE_SWEEP_MS;

/// One waiting read's deadline.
struct Slot {
    /// How long the read may wait.
    timeout: Duration,
    /// The first sweep turn since the read began to wait: the timeout counts from it.
    first_turn_at: Option<Instant>,
    /// The task to wake when the deadline passes (`None` while the slot is free).
    waker: Option<Waker>,
    /// The sweep found the deadline passed.
    expired: bool,
}

/// The waiting reads of this thread's event loop (one shard, or one azq-loadgen core).
#[derive(Default)]
struct Watches {
    /// Every slot ever taken; the free ones are listed in `free`.
    slots: Vec<Slot>,
    /// Indexes of the free slots.
    free: Vec<usize>,
    /// A sweep task is running on this thread.
    sweeping: bool,
}

impl Watches {
    /// Slots in use.
    fn taken(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

thread_local! {
    static WATCHES: RefCell<Watches> = RefCell::new(Watches::default());
}

/// Runs `future` (a read) until it completes, or fails it with `TimedOut` once `timeout` has
/// passed since it first had to wait (checked by the thread's sweep: up to
/// `READ_DEADLINE_SWEEP_MS` late). `future` is dropped on a timeout, so it must be safe to
/// cancel, as the backends' reads are.
pub async fn within<B: Backend, T>(
    timeout: Duration,
    future: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let mut future = pin!(future);
    let mut watch: Option<Watch> = None;
    std::future::poll_fn(|context| {
        if let Poll::Ready(outcome) = future.as_mut().poll(context) {
            return Poll::Ready(outcome);
        }
        match &watch {
            None => watch = Some(Watch::start::<B>(timeout, context.waker())),
            Some(watch) if watch.expired(context.waker()) => {
                return Poll::Ready(Err(io::ErrorKind::TimedOut.into()))
            }
            Some(_) => {}
        }
        Poll::Pending
    })
    .await
}

/// A slot held by one waiting read; freed when the read ends, however it ends.
struct Watch {
    index: usize,
}

impl Watch {
    /// Takes a slot for a read that waits from now for at most `timeout`, starting the
    /// thread's sweep if none runs.
    fn start<B: Backend>(timeout: Duration, waker: &Waker) -> Watch {
        let (index, start_sweep) = WATCHES.with(|watches| {
            let mut watches = watches.borrow_mut();
            let slot = Slot {
                timeout,
                first_turn_at: None,
                waker: Some(waker.clone()),
                expired: false,
            };
            let index = match watches.free.pop() {
                Some(index) => {
                    watches.slots[index] = slot;
                    index
                }
                None => {
                    watches.slots.push(slot);
                    watches.slots.len() - 1
                }
            };
            let start_sweep = !watches.sweeping;
            watches.sweeping = true;
            (index, start_sweep)
        });
        if start_sweep {
            B::spawn(sweep::<B>(Sweeping));
        }
        Watch { index }
    }

    /// Whether the sweep found the deadline passed; otherwise keeps the task's current waker.
    fn expired(&self, waker: &Waker) -> bool {
        WATCHES.with(|watches| {
            let mut watches = watches.borrow_mut();
            let slot = &mut watches.slots[self.index];
            if slot.expired {
                return true;
            }
            if !slot
                .waker
                .as_ref()
                .is_some_and(|kept| kept.will_wake(waker))
            {
                slot.waker = Some(waker.clone());
            }
            false
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The table is gone only while the thread exits; nothing is left to free then.
        let _ = WATCHES.try_with(|watches| {
            let mut watches = watches.borrow_mut();
            let slot = &mut watches.slots[self.index];
            debug_assert!(slot.waker.is_some() || slot.expired, "a slot freed twice");
            slot.waker = None;
            slot.expired = false;
            watches.free.push(self.index);
        });
    }
}

/// Marks the thread's sweep stopped however it ends: returned, or dropped with its event loop,
/// even before its first poll (the sweep's future owns it from its creation).
struct Sweeping;

impl Drop for Sweeping {
    fn drop(&mut self) {
        let _ = WATCHES.try_with(|watches| watches.borrow_mut().sweeping = false);
    }
}

/// The thread's sweep: every `READ_DEADLINE_SWEEP_MS` (or later, when the thread is busy),
/// notes the first turn of each new waiting read and wakes the reads whose timeout has passed
/// since theirs; ends when no read waits (the next one to wait starts it again).
async fn sweep<B: Backend>(_sweeping: Sweeping) {
    loop {
        B::sleep(Duration::from_millis(READ_DEADLINE_SWEEP_MS)).await;
        let mut expired = Vec::new();
        let idle = WATCHES.with(|watches| {
            let mut watches = watches.borrow_mut();
            let now = Instant::now();
            for slot in &mut watches.slots {
                if slot.expired || slot.waker.is_none() {
                    continue;
                }
                let first_turn_at = *slot.first_turn_at.get_or_insert(now);
                if now.duration_since(first_turn_at) >= slot.timeout {
                    slot.expired = true;
                    expired.extend(slot.waker.take());
                }
            }
            watches.taken() == 0
        });
        // Woken outside the table's borrow: a wake may poll the read at once.
        for waker in expired {
            waker.wake();
        }
        if idle {
            return;
        }
    }
}

/// Reads waiting on this thread, and whether its sweep runs.
#[cfg(test)]
fn watched() -> (usize, bool) {
    WATCHES.with(|watches| {
        let watches = watches.borrow();
        (watches.taken(), watches.sweeping)
    })
}

/// The check each backend's tests (which sit above this file) run on their own event loop: a
/// read that never completes fails with `TimedOut` after its timeout (not before), one that
/// completes gives its outcome, and every slot is free again afterwards, with the sweep stopped
/// once nothing waits.
#[cfg(test)]
pub(crate) async fn check_on<B: Backend>() {
    // The checked read starts between two turns of a sweep already running (for a long read
    // beside it): a deadline counted from the wrong turn would fail it early.
    let long_read = async {
        let outcome = within::<B, ()>(
            Duration::from_secs(60),
            std::future::pending::<io::Result<()>>(),
        )
        .await;
        (
            outcome.and(Err(io::ErrorKind::Other.into())),
            Duration::ZERO,
        )
    };
    let checked_read = async {
        B::sleep(Duration::from_millis(READ_DEADLINE_SWEEP_MS * 6 / 10)).await;
        let started = Instant::now();
        let outcome = within::<B, ()>(
            Duration::from_millis(150),
            std::future::pending::<io::Result<()>>(),
        )
        .await;
        (outcome, started.elapsed())
    };
    let (outcome, waited) = futures_lite::future::or(checked_read, long_read).await;
    assert_eq!(outcome.unwrap_err().kind(), io::ErrorKind::TimedOut);
    assert!(
        waited >= Duration::from_millis(150),
        "failed early: {waited:?}"
    );
    let answered = within::<B, u8>(Duration::from_secs(60), async {
        B::sleep(Duration::from_millis(20)).await;
        Ok(7)
    })
    .await;
    assert_eq!(answered.unwrap(), 7);
    assert_eq!(watched().0, 0);
    B::sleep(Duration::from_millis(3 * READ_DEADLINE_SWEEP_MS)).await;
    assert_eq!(watched(), (0, false));
}
