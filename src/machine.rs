//! What a run is told and finds out about the machine before any event loop exists: the CPUs
//! this process may run on (`allowed_cpus`, its affinity mask) and which event-loop backend
//! `--runtime` asks for (`RuntimeChoice`). `settings` needs both to build a `Config`, and the
//! runtime (which pins threads and selects the backend) and azq-loadgen use the same ones; they
//! live here, below both, so `settings` imports nothing of the runtime (docs/ARCHITECTURE.md,
//! "Layers"). Imports nothing of the crate.

/// Which backend to run, as `--runtime` names it; `runtime::select` turns it into the backend
/// a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// The backend measured faster (the portable one: `runtime::select`'s doc); io_uring is
    /// probed only to say why it could not serve here.
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

/// The CPUs this process may run on, in order (its affinity mask); `[0]` if it cannot be read.
/// Shards (and azq-loadgen's client cores) are pinned to the first of them by default.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect();
        if allowed.is_empty() {
            vec![0]
        } else {
            allowed
        }
    }
}

/// The CPUs to spread shards over where the affinity mask cannot be read: one per hardware
/// thread the standard library reports.
#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Vec<usize> {
    let count = std::thread::available_parallelism().map_or(1, |count| count.get());
    (0..count).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names() {
        let cases = [
            ("auto", Some(RuntimeChoice::Auto)),
            ("io_uring", Some(RuntimeChoice::IoUring)),
            ("io-uring", Some(RuntimeChoice::IoUring)),
            ("uring", Some(RuntimeChoice::IoUring)),
            ("portable", Some(RuntimeChoice::Portable)),
            ("tokio", Some(RuntimeChoice::Portable)),
            ("epoll", None),
            ("", None),
        ];
        for (text, expected) in cases {
            assert_eq!(RuntimeChoice::parse(text), expected, "{text:?}");
        }
    }

    #[test]
    fn at_least_one_cpu_is_allowed_and_none_twice() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|pair| pair[0] < pair[1]), "{cpus:?}");
    }
}
