//! Time as the rest of azq sees it: milliseconds since the Unix epoch, read through a `Clock`,
//! and the two textual forms the protocol uses for it.
//!
//! - `civil`: calendar dates to and from epoch seconds (the only calendar arithmetic).
//! - `rfc1123`: `Sun, 22 Nov 2026 00:00:00 GMT`, for headers and message times, with a
//!   per-second cache of the `Date` header.
//! - `iso8601`: reading SAS and access-policy instants; writing error times.
//!
//! Only the runtime reads the system clock; the queue state is handed `now_ms` with every command,
//! so tests and simulations drive it with a `ManualClock` and never sleep.

pub mod civil;
pub mod iso8601;
pub mod rfc1123;

pub use iso8601::{format_iso8601_7, parse_iso8601_ms};
pub use rfc1123::{parse_rfc1123_ms, rfc1123, rfc1123_cached, rfc1123_memoized, RFC1123_BYTES};

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Buckets of every latency histogram azq keeps (requests, log flushes): bucket `k` counts
/// durations of at most `32 µs × 2^k` for `k` below 16 (32 µs to about 1 s), the last any longer.
pub const LATENCY_BUCKETS: usize = 17;

/// The latency bucket of a duration of `us` µs.
pub fn latency_bucket(us: u64) -> usize {
    if us <= 32 {
        0
    } else {
        ((64 - ((us - 1) >> 5).leading_zeros()) as usize).min(LATENCY_BUCKETS - 1)
    }
}

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
        unix_ms()
    }
}

/// The machine's wall clock, ms since the Unix epoch (0 if it is set before 1970).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

/// The machine's wall clock, µs since the Unix epoch (0 if it is set before 1970): the
/// resolution azq-loadgen stamps messages with to measure their end-to-end latency. Inlined into
/// the loadgen's hot path, which reads it twice per request.
#[inline]
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as u64)
        .unwrap_or(0)
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
