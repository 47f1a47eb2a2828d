//! Where the load generator meets azq's runtime seam (`azq::runtime::backend`): it has no event
//! loop of its own. The engine, the connection and the setup are generic over azq's `Backend`
//! (glommio on io_uring, or tokio's current-thread runtime where io_uring is blocked), and the
//! backend is chosen by azq's own `select` and probe, so `--runtime` means what it means to azq.
//!
//! This file adds what a client needs around a backend's loop: a thread per core, pinned to its
//! CPU, whose main future's result the main thread can wait for; and the choice of backend with
//! its one-line fallback notice. What the engine relies on, whatever the backend:
//! - `start_core` runs a future to completion on a new thread pinned to one CPU, and nothing
//!   else runs on that thread; `CoreHandle::join` waits for the result.
//! - `B::spawn_task` runs a future on the calling core; dropping its task cancels it.
//! - `B::read_into` is safe to cancel: a read that loses a race leaves the stream usable and
//!   loses no byte (glommio keeps a pending read's readiness poll in the stream; tokio's reads
//!   are readiness-based and copy only in the poll that returns).

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::thread::JoinHandle;

use azq::machine::RuntimeChoice;
use azq::runtime::backend::{Backend, Idle};
use azq::runtime::select::{self, Selected};

/// How to start one core.
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// The CPU the core's thread is pinned to.
    pub cpu: usize,
    /// The thread's name.
    pub name: String,
    /// Whether the idle core sleeps in the kernel or keeps polling (see `Idle`).
    pub idle: Idle,
}

/// A started core; `join` waits for its future's result.
pub struct CoreHandle<T: Send + 'static>(JoinHandle<Result<T, String>>);

impl<T: Send + 'static> CoreHandle<T> {
    /// Waits for the core's thread to finish and returns what its future returned, or why the
    /// core could not run it.
    pub fn join(self) -> Result<T, String> {
        self.0
            .join()
            .map_err(|_| "its thread panicked".to_string())?
    }

    /// Runs `work` on a new thread of its own, not pinned and without an event loop (the
    /// simulator's, which waits for nothing).
    pub fn spawn(
        name: &str,
        work: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<CoreHandle<T>, String> {
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(work)
            .map(CoreHandle)
            .map_err(|error| format!("cannot start a thread: {error}"))
    }
}

/// Starts a thread pinned to `options.cpu` that runs the future `make` returns on `B`'s loop.
pub fn start_core<B, T, F, Fut>(options: CoreOptions, make: F) -> Result<CoreHandle<T>, String>
where
    B: Backend,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let CoreOptions { cpu, name, idle } = options;
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            // The loop's main future is `()`; its result waits here until the loop returns.
            let output = Rc::new(RefCell::new(None));
            let slot = output.clone();
            B::run(cpu, idle, async move {
                let result = make().await;
                *slot.borrow_mut() = Some(result);
            })?;
            let result = output.borrow_mut().take();
            result.ok_or_else(|| format!("the event loop on CPU {cpu} ended early"))
        })
        .map(CoreHandle)
        .map_err(|error| format!("cannot start a thread for CPU {cpu}: {error}"))
}

/// Decides the client's backend for `choice` as azq decides its own, and says on stderr, in one
/// line, why io_uring is refused here when `auto` asked (it picks the portable backend).
pub fn select(choice: RuntimeChoice) -> Result<Selected, String> {
    let (selected, fallback_reason) = select::select(choice)?;
    if let Some(reason) = fallback_reason {
        eprintln!("azq-loadgen: io_uring unavailable, using the portable backend: {reason}");
    }
    Ok(selected)
}
