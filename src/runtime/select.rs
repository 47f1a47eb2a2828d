//! Which backend a run uses: `--runtime auto|io_uring|portable` (`machine::RuntimeChoice`, read
//! below `settings`) made into a `Selected` backend, the probe of what glommio needs from the
//! kernel (`uring::probe`), and `Selected::dispatch`, the one place a choice made at run time
//! becomes a `Backend` type. Both the server and azq-loadgen choose
//! here, so `--runtime` means the same to both.
//!
//! **`auto` picks the portable backend, because it was measured the faster one.** The design card's
//! backend is io_uring, and `--runtime io_uring` selects it wherever the kernel allows; but on
//! every machine azq was measured on, the portable backend (tokio, epoll) serves each request with
//! less CPU, so it is the default. On the Intel Xeon 2-vCPU VM, one shard on CPU 0 and azq-loadgen
//! on CPU 1, 32 connections, 1 KiB messages: server CPU per request, io_uring against portable,
//! 9.4-10.9 against 8.7-9.0 µs for Put, 8.9-9.4 against 8.0-8.2 µs for Get(1) and Delete,
//! 27.7-28.5 against 16.7-19.3 µs for Put on disk, and 0.80-0.95 of portable's Put rate
//! (`ROUNDS=3 scripts/bench-ceiling.sh`, quiet, 2026-11-26, with this rule's build; the build
//! before it: 9.6-9.8 against 8.8-9.2 µs for Put; docs/BENCHMARKS.md "Issue 27"), and the same
//! order over fixed counts (`ROUNDS=3 scripts/backend-costs.sh`: io_uring 10.6-12.4 µs, portable
//! 8.7-10.2 µs, busy machine); on the AMD EPYC VM of 2026-11-23
//! (`scripts/bench-targets.sh`) the portable backend was even on Put and ahead on the read-heavy
//! rows (17.3 against 19.1 µs per Get(1) and Delete). Why: glommio tries each socket directly
//! before it uses its ring, so both backends make the same `recvfrom` and `sendto` per request;
//! io_uring then adds a poll request per waiting read (a `Source` allocated, submitted with
//! `io_uring_enter`, 5% of the server's CPU in a Get + Delete profile) completed through task work
//! that interrupts the shard's thread (reschedule IPIs, dear on a VM), where epoll registers each
//! connection once. glommio 0.9 has no multishot poll or receive, where io_uring could win.
//! `auto` still probes io_uring, only to say in one line, where it is refused (a container's
//! seccomp profile), why `--runtime io_uring` would fail. On a machine where
//! `scripts/backend-costs.sh` shows io_uring ahead, pass `--runtime io_uring`; the rule changes
//! here if io_uring comes out ahead where azq is measured.

use super::backend::Backend;
use crate::machine::RuntimeChoice;

/// Work to run on whichever backend was selected, written once for any `B: Backend`
/// (`Selected::dispatch` picks the type).
pub trait OnBackend {
    /// What the work returns.
    type Output;

    /// Runs the work on `B`.
    fn run<B: Backend>(self) -> Self::Output;
}

/// The backend a run will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selected {
    /// glommio on io_uring.
    IoUring,
    /// tokio's current-thread runtime.
    Portable,
}

impl Selected {
    /// The backend's name in the ready line.
    pub fn name(self) -> &'static str {
        match self {
            Selected::IoUring => "io_uring",
            Selected::Portable => "portable",
        }
    }

    /// Runs `work` on this backend's type: the one place that maps a `Selected` to a type.
    pub fn dispatch<W: OnBackend>(self, work: W) -> W::Output {
        match self {
            #[cfg(all(target_os = "linux", feature = "io_uring"))]
            Selected::IoUring => work.run::<super::uring::IoUring>(),
            #[cfg(not(all(target_os = "linux", feature = "io_uring")))]
            Selected::IoUring => unreachable!("select() never picks io_uring without it"),
            Selected::Portable => work.run::<super::portable::Portable>(),
        }
    }
}

/// Decides the backend for `choice`, probing io_uring unless `Portable`. Returns the backend
/// and, for `Auto` where io_uring is refused, why (one line for the log: `--runtime io_uring`
/// would fail here). `IoUring` where the probe refuses is an error naming the refusal: glommio
/// would fail the same way, inside a shard thread, with a panic whose text blames the kernel's
/// age even under a seccomp filter.
pub fn select(choice: RuntimeChoice) -> Result<(Selected, Option<String>), String> {
    match choice {
        RuntimeChoice::Portable => Ok((Selected::Portable, None)),
        RuntimeChoice::Auto => Ok((Selected::Portable, io_uring_refusal())),
        RuntimeChoice::IoUring => match io_uring_refusal() {
            None => Ok((Selected::IoUring, None)),
            Some(reason) => Err(format!(
                "--runtime io_uring: io_uring cannot serve here: {reason} (--runtime auto would \
                 use the portable backend)"
            )),
        },
    }
}

/// Why io_uring cannot serve here, or `None` when it can.
#[cfg(all(target_os = "linux", feature = "io_uring"))]
pub fn io_uring_refusal() -> Option<String> {
    super::uring::probe().err()
}

/// Why io_uring cannot serve here: this build has no io_uring backend.
#[cfg(not(all(target_os = "linux", feature = "io_uring")))]
pub fn io_uring_refusal() -> Option<String> {
    Some(if cfg!(target_os = "linux") {
        "this build of azq has no io_uring backend (built without the `io_uring` feature)"
            .to_string()
    } else {
        "io_uring exists only on Linux".to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_is_portable() {
        assert_eq!(
            select(RuntimeChoice::Portable),
            Ok((Selected::Portable, None))
        );
    }

    /// `auto` is the portable backend, the one measured faster, also where io_uring serves; and
    /// `io_uring` is io_uring wherever the probe allows it.
    #[test]
    fn auto_picks_the_backend_measured_faster() {
        let (auto, _) = select(RuntimeChoice::Auto).expect("auto always selects");
        assert_eq!(auto, Selected::Portable);
        if io_uring_refusal().is_none() {
            assert_eq!(
                select(RuntimeChoice::IoUring),
                Ok((Selected::IoUring, None))
            );
        }
    }
}
