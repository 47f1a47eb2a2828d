//! Time as the rest of azq sees it: milliseconds since the Unix epoch, read through a `Clock`.
//!
//! Only the runtime reads the system clock; the queue state is handed `now_ms` with every command,
//! so tests and simulations drive it with a `ManualClock` and never sleep.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in milliseconds since the Unix epoch.
pub trait Clock {
    /// The current time, ms since the epoch.
    fn now_ms(&self) -> u64;
}

/// The machine's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to, for deterministic tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: Cell<u64>,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        ManualClock {
            now_ms: Cell::new(now_ms),
        }
    }

    /// Moves the clock forward by `elapsed_ms`.
    pub fn advance_ms(&self, elapsed_ms: u64) {
        self.now_ms.set(self.now_ms.get() + elapsed_ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.get()
    }
}
