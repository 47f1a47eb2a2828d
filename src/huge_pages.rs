//! Transparent huge pages for recovery's images (`storage::pages`): pages of at least 32 MiB
//! (a power of two of entries), each written once from end to end as a restart reads the log
//! and freed once passed, never grown.
//! In 4 KiB pages that is a page fault every 46 records of 88 bytes: a restart of 4.2 M
//! messages took 301,632 faults, over half of them in these pages (`perf record -e
//! page-faults`). `MADV_HUGEPAGE` asks the kernel to back the aligned part of such a page with
//! 2 MiB pages where it can, one fault instead of 512: 144,128 faults, and the restart's median
//! 2.18 → 1.93 s (at 16 M messages, 56% fewer faults and the time within the noise:
//! docs/BENCHMARKS.md, "Recovery's pages in huge pages"). A hint only: contents,
//! order and results are the same without it, and where the kernel has no transparent huge
//! pages (or is told `never`), nothing changes.
//!
//! The hint reaches whatever shares the allocation's huge pages, so it is for allocations that
//! are mappings of their own: glibc maps one at or above its largest threshold (32 MiB, which
//! `RECOVERY_PAGE_BYTES` is). With glibc told to map none (`MALLOC_MMAP_MAX_=0`) the pages lie
//! in the heap beside others, and the hint took a restart's peak from 837 to 1,038 MB
//! (helper-81's review; that setting alone had taken it from 456 to 837).
//!
//! Not for a vector that grows by reallocation, such as the message slab: moving 336 MB of
//! huge pages (the slab of 4.2 M messages, reserved whole at a restart) took 170-240 ms where
//! small pages took about 1 ms (and up to a second on a loaded machine: helper-81), a stall on
//! the shard's first Put past it.

/// The size of a huge page on x86-64 and on aarch64 with 4 KiB pages; the part of an array
/// advised starts and ends on a multiple of it (a multiple of every base page size too, as
/// `madvise` requires).
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Advises huge pages for `values`'s allocation, its spare capacity included (what it is about
/// to be filled with), where it spans at least one aligned huge page.
pub fn advise<T>(values: &Vec<T>) {
    let start = values.as_ptr() as usize;
    let bytes = values.capacity().saturating_mul(std::mem::size_of::<T>());
    let Some((first, end)) = aligned_within(start, bytes) else {
        return;
    };
    #[cfg(target_os = "linux")]
    // SAFETY: `first..end` lies within the vector's live allocation (`aligned_within`), and
    // MADV_HUGEPAGE changes how its pages are backed, never their contents. Its result is
    // ignored: EINVAL where the kernel has no transparent huge pages leaves the small pages.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (first, end);
}

/// The huge-page-aligned range within `bytes` from `start`, if it holds one page at least.
fn aligned_within(start: usize, bytes: usize) -> Option<(usize, usize)> {
    let first = start.checked_next_multiple_of(HUGE_PAGE_BYTES)?;
    let end = start.checked_add(bytes)? / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    (end > first).then_some((first, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_advised_is_the_aligned_part_within_the_allocation() {
        const H: usize = HUGE_PAGE_BYTES;
        // Every start within a huge page and lengths around one and two of them.
        for start in [H, H + 1, H + 16, 2 * H - 4096, 2 * H - 1] {
            for bytes in [0, 1, H - 1, H, H + 1, 2 * H - 1, 2 * H, 2 * H + 1, 3 * H] {
                let advised = aligned_within(start, bytes);
                // What a brute force over the huge pages says: those wholly inside.
                let pages: Vec<usize> = (0..8)
                    .map(|page| page * H)
                    .filter(|&page| page >= start && page + H <= start + bytes)
                    .collect();
                let expected = pages
                    .first()
                    .map(|&first| (first, pages.last().unwrap() + H));
                assert_eq!(advised, expected, "start {start} bytes {bytes}");
            }
        }
        // The address space's top: no overflow.
        assert_eq!(aligned_within(usize::MAX - 10, 5), None);
        assert_eq!(aligned_within(usize::MAX / H * H, H), None);
    }

    #[test]
    fn advising_changes_no_contents() {
        let mut values: Vec<u64> = Vec::with_capacity(3 * HUGE_PAGE_BYTES / 8);
        values.extend(0..1000);
        advise(&values);
        values.extend(1000..(3 * HUGE_PAGE_BYTES / 8) as u64);
        assert!(values.iter().enumerate().all(|(i, &v)| v == i as u64));
        advise(&Vec::<u64>::new());
        advise(&vec![(); 10]);
    }
}
