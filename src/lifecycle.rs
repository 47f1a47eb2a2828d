//! The server's lifecycle, shared by every thread: whether all shards serve, and whether a stop
//! was asked for (SIGINT, SIGTERM). Besides the drain counter these two flags are the only
//! memory the shards share; everything else moves over the mesh. The health endpoint reads them.

use std::sync::atomic::{AtomicBool, Ordering};

/// The server-wide flags and the time the server started.
#[derive(Debug)]
pub struct Lifecycle {
    serving: AtomicBool,
    stop_requested: AtomicBool,
    /// When the process started serving requests, ms since the Unix epoch.
    started_ms: u64,
}

impl Lifecycle {
    /// A server that started at `started_ms` and does not serve yet.
    pub fn new(started_ms: u64) -> Lifecycle {
        Lifecycle {
            serving: AtomicBool::new(false),
            stop_requested: AtomicBool::new(false),
            started_ms,
        }
    }

    /// Every shard listens and has joined the mesh.
    pub fn set_serving(&self) {
        self.serving.store(true, Ordering::Release);
    }

    /// Whether every shard serves and no stop was asked for.
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Acquire) && !self.stop_requested()
    }

    /// Asks every shard to stop accepting and drain.
    pub fn request_stop(&self) {
        self.stop_requested.store(true, Ordering::Release);
    }

    /// Whether a stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }

    /// When the server started, ms since the Unix epoch.
    pub fn started_ms(&self) -> u64 {
        self.started_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_until_a_stop() {
        let lifecycle = Lifecycle::new(7);
        assert!(!lifecycle.serving());
        lifecycle.set_serving();
        assert!(lifecycle.serving() && !lifecycle.stop_requested());
        lifecycle.request_stop();
        assert!(!lifecycle.serving() && lifecycle.stop_requested());
        assert_eq!(lifecycle.started_ms(), 7);
    }
}
