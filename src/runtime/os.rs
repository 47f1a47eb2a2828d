//! What the runtime asks of the operating system outside any event loop: pinning a thread to a
//! CPU, raising the open-files limit, reading the process's resident memory and giving freed
//! memory back to the system. Both backends pin
//! their threads here, and azq-loadgen its client cores; which CPUs may be used is
//! `machine::allowed_cpus`, below `settings`.

/// Pins the calling thread to `cpu`; where the system cannot pin (or refuses), the thread runs
/// wherever the scheduler puts it.
pub fn pin_current_thread(cpu: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: cpu_set_t is plain data; CPU_SET writes one bit of it, sched_setaffinity reads it.
    unsafe {
        if cpu < libc::CPU_SETSIZE as usize {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

/// Raises this process's soft limit on open files to its hard limit and returns the new soft
/// limit; `None` if the limits cannot be read or set. A server holds a descriptor per
/// connection, and so does a client with many connections (tests, azq-loadgen).
pub fn raise_open_files_limit() -> Option<u64> {
    // SAFETY: getrlimit/setrlimit read and write a plain rlimit struct owned by this frame.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return None;
            }
        }
        Some(limit.rlim_cur)
    }
}

/// The process's resident memory, bytes (`/proc/self/statm`'s second field, in pages), for the
/// metrics' `process_resident_memory_bytes`; `None` where there is no such file.
pub fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads system configuration.
    let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page_bytes)
        .ok()
        .map(|page_bytes| pages * page_bytes)
}

/// Gives the memory the allocator holds free back to the system. glibc keeps freed small
/// allocations (message texts) in its arenas and returns only what lies at a heap's top, so
/// after a drained backlog the process kept its peak resident memory; `malloc_trim` releases the
/// free pages anywhere in every arena (measured here: a million 256-byte messages drained in
/// memory, 357 MiB resident before, 105 MiB after, in five calls of 6.1-6.7 ms on the shard's
/// thread, one per 70 MiB freed). Elsewhere it does nothing.
pub fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the arenas' own locks and touches only free chunks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn resident_memory_is_read_on_linux() {
        assert!(super::resident_memory_bytes().is_some_and(|bytes| bytes > 0));
    }
}
