//! Which backend a run uses: `--runtime auto|io_uring|portable` (`RuntimeChoice`), the probe of
//! what glommio needs from the kernel (`uring::probe`), and `Selected::dispatch`, the one place a
//! choice made at run time becomes a `Backend` type. Both the server and azq-loadgen choose
//! here, so `--runtime` means the same to both.

use super::backend::Backend;

/// Which backend to run, as `--runtime` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// io_uring where the kernel allows it, else the portable backend.
    Auto,
    /// io_uring or nothing.
    IoUring,
    /// The portable backend, even where io_uring works.
    Portable,
}

impl RuntimeChoice {
    /// Reads `auto`, `io_uring` or `portable`.
    pub fn parse(text: &str) -> Option<RuntimeChoice> {
        match text {
            "auto" => Some(RuntimeChoice::Auto),
            "io_uring" | "io-uring" | "uring" => Some(RuntimeChoice::IoUring),
            "portable" | "tokio" => Some(RuntimeChoice::Portable),
            _ => None,
        }
    }
}

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
/// and, when `Auto` fell back to the portable one, why (one line for the log). `IoUring` where
/// the probe refuses is an error naming the refusal: glommio would fail the same way, inside a
/// shard thread, with a panic whose text blames the kernel's age even under a seccomp filter.
pub fn select(choice: RuntimeChoice) -> Result<(Selected, Option<String>), String> {
    if choice == RuntimeChoice::Portable {
        return Ok((Selected::Portable, None));
    }
    match (choice, io_uring_refusal()) {
        (_, None) => Ok((Selected::IoUring, None)),
        (RuntimeChoice::IoUring, Some(reason)) => Err(format!(
            "--runtime io_uring: io_uring cannot serve here: {reason} (--runtime auto would \
             use the portable backend)"
        )),
        (_, Some(reason)) => Ok((Selected::Portable, Some(reason))),
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
    fn runtime_names() {
        assert_eq!(RuntimeChoice::parse("auto"), Some(RuntimeChoice::Auto));
        assert_eq!(
            RuntimeChoice::parse("io_uring"),
            Some(RuntimeChoice::IoUring)
        );
        assert_eq!(
            RuntimeChoice::parse("portable"),
            Some(RuntimeChoice::Portable)
        );
        assert_eq!(RuntimeChoice::parse("epoll"), None);
        assert_eq!(RuntimeChoice::parse(""), None);
        assert_eq!(
            select(RuntimeChoice::Portable),
            Ok((Selected::Portable, None))
        );
    }
}
