//! How much disk a durable shard may take: its share of `--max-disk` (azq's own files) and the
//! free space `--min-free-disk` keeps on the file system, the pure rule that turns what the log
//! and the file system measure into "refuse the operations that grow stored data", and the
//! `statvfs` that measures the file system (written once for both backends: a metadata call of
//! a few µs, made every `DISK_SAMPLE_INTERVAL_MS` by a thread of each durable shard's own, the
//! [`SpaceGauge`], never per request and never on the shard's thread: a file system that stops
//! answering, as a hung network mount or a stopped FUSE server does, stalls that thread alone,
//! and the shard goes on serving what needs no write with the last figures).
//!
//! **The rule.** Space comes back only through a snapshot: it writes a copy of the live data
//! before the segments it covers are removed, or names the texts on disk only in the segments
//! it keeps. So a shard refuses growth while its files plus what a snapshot writes
//! (`snapshot_bytes`, `Log::snapshot_bytes_max`: what is stored at its `--max-memory` charge,
//! more than a snapshot's encoding of the same data, but the texts on disk only in closed
//! segments, which it names in a few bytes each when it keeps every segment they are in), room
//! to compact a segment (`DISK_COMPACTION_BYTES`, at most the texts it names; `Log::watch_space`)
//! the records of what it still serves while the snapshot runs, Get, Delete and Clear, and what
//! was accepted between two measurements (`DISK_SERVED_RECORDS_BYTES`: a flush takes whole
//! blocks, so 16,384 lone Gets or Deletes, many more records when they batch) and a segment
//! (`LOG_SEGMENT_BYTES`: segments are allocated whole, so a rotation just before a measurement
//! takes a segment at once) would pass its share of `--max-disk`; and while the
//! file system's free space minus the same headroom for every shard would fall below
//! `--min-free-disk`. Refusals stop by themselves once deletes shrink the live data or a
//! snapshot removes segments (with `DISK_RESUME_MARGIN_BYTES` to spare). While it refuses, a
//! shard snapshots as soon as its log passes a segment or a snapshot would free what it is
//! short of (`Refusal::short_bytes`, `log::snapshot_due`), and a snapshot
//! the free space cannot hold waits (`Engine::snapshot_wanted`). Records written while a
//! snapshot runs beyond that segment pass the share by as much (the free-space reserve absorbs
//! it); a log write's ENOSPC stays the last resort (the process exits, nothing acknowledged is
//! lost).
//!
//! **What a snapshot copies.** A snapshot copies the texts left in segments mostly dead, so
//! that they go (`Log::segments_to_keep`): it copies them only within what the rule leaves
//! beyond what it writes (`copy_budget`, told to the log after every flush, the room to compact
//! a segment included), and keeps the other segments with their texts ("held"); a snapshot is
//! due again once the budget covers what is left of one of those (`Log::wants_snapshot`).
//! Without the room to compact, a shard filled to its limit and drained in part, every segment
//! mostly dead but none empty, refused puts for good: deleting a named message frees its slot's
//! charge alone (helper-65's review of 96bb0b1).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, Thread};
use std::time::Duration;

use crate::limits::{
    DISK_RESUME_MARGIN_BYTES, DISK_SAMPLE_INTERVAL_MS, DISK_SERVED_RECORDS_BYTES, LOG_SEGMENT_BYTES,
};

/// What `--min-free-disk` keeps free on the file system holding `--location`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeDiskMin {
    /// A number of bytes.
    Bytes(u64),
    /// A share of the file system's size, percent (0 to 100).
    Percent(u64),
}

impl FreeDiskMin {
    /// The bytes kept free on a file system of `total_bytes`.
    pub fn bytes(self, total_bytes: u64) -> u64 {
        match self {
            FreeDiskMin::Bytes(bytes) => bytes,
            FreeDiskMin::Percent(percent) => {
                assert!(percent <= 100);
                (total_bytes as u128 * percent as u128 / 100) as u64
            }
        }
    }
}

/// One durable shard's disk limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLimits {
    /// This shard's share of `--max-disk`, bytes; `None`: no limit.
    pub shard_bytes_max: Option<u64>,
    /// `--min-free-disk`.
    pub free_min: FreeDiskMin,
    /// Shards sharing the file system, each of which may need its headroom at once.
    pub shards: u64,
}

/// A file system's size and the space an unprivileged writer may still take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    /// Bytes free for unprivileged use (`f_bavail`: the root reserve excluded).
    pub free_bytes: u64,
    /// The file system's size, bytes.
    pub total_bytes: u64,
}

/// What a shard must keep in hand beyond its files so that a snapshot can still complete: what
/// the snapshot writes (`snapshot_bytes`), room for the records still served while it runs
/// (`DISK_SERVED_RECORDS_BYTES`, a segment's size until segments became 16 MiB) and a segment,
/// because segments are allocated whole: a rotation just before the measurement takes a
/// segment at once, and with only the served records' room a shard once started refusing with
/// none left (found by the break-it review: the next rotation met ENOSPC during the snapshot).
pub fn headroom_bytes(snapshot_bytes: u64) -> u64 {
    snapshot_bytes
        .saturating_add(DISK_SERVED_RECORDS_BYTES)
        .saturating_add(LOG_SEGMENT_BYTES)
}

/// Why a shard refuses the operations that grow stored data, with the figures, for the line it
/// prints when it starts refusing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its files plus the headroom would pass its share of `--max-disk`.
    OverShare {
        /// The shard's files.
        disk_bytes: u64,
        /// What a snapshot needs: what it writes, room to compact a segment, the records served
        /// meanwhile and a segment
        /// (`headroom_bytes`, `Log::watch_space`).
        headroom_bytes: u64,
        /// The shard's share of `--max-disk`.
        shard_bytes_max: u64,
    },
    /// The file system's free space is under `--min-free-disk` plus every shard's headroom.
    ShortOfFree {
        /// The file system's free bytes, as last measured.
        free_bytes: u64,
        /// What `--min-free-disk` keeps free.
        reserve_bytes: u64,
        /// What a snapshot of this shard needs (`headroom_bytes`).
        headroom_bytes: u64,
        /// Shards that may need it at once.
        shards: u64,
    },
}

impl Refusal {
    /// What this shard's files must shrink by for the refusal to end: past its share, the
    /// overshoot; short of free space, its part of the shortfall (every shard that may need
    /// the headroom shares it). A snapshot that frees at least this much is due while the
    /// shard refuses (`log::snapshot_due`).
    pub fn short_bytes(&self) -> u64 {
        match *self {
            Refusal::OverShare {
                disk_bytes,
                headroom_bytes,
                shard_bytes_max,
            } => disk_bytes
                .saturating_add(headroom_bytes)
                .saturating_sub(shard_bytes_max),
            Refusal::ShortOfFree {
                free_bytes,
                reserve_bytes,
                headroom_bytes,
                shards,
            } => reserve_bytes
                .saturating_add(headroom_bytes.saturating_mul(shards))
                .saturating_sub(free_bytes)
                .div_ceil(shards.max(1)),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        match *self {
            Refusal::OverShare {
                disk_bytes,
                headroom_bytes,
                shard_bytes_max,
            } => write!(
                out,
                "its files ({:.1} MiB) and the room a snapshot needs ({:.1} MiB: what it writes, \
                 room to compact a segment, the records served meanwhile and a segment) would \
                 pass its share of --max-disk ({:.1} MiB)",
                mib(disk_bytes),
                mib(headroom_bytes),
                mib(shard_bytes_max)
            ),
            Refusal::ShortOfFree {
                free_bytes,
                reserve_bytes,
                headroom_bytes,
                shards,
            } => write!(
                out,
                "the file system has {:.1} MiB free, under --min-free-disk ({:.1} MiB) and the \
                 room {shards} shard(s) may need for a snapshot ({:.1} MiB each: what it writes, \
                 room to compact a segment, the records served meanwhile and a segment)",
                mib(free_bytes),
                mib(reserve_bytes),
                mib(headroom_bytes)
            ),
        }
    }
}

/// Why a shard whose files take `disk_bytes`, whose snapshot would write `snapshot_bytes`
/// (`Log::snapshot_bytes_max`), on a file system last measured as `space` (`None`: not
/// measured), refuses the operations that grow stored data (the rule in this file's doc);
/// `None` while it may grow.
/// A shard already `refusing` stops only once the rule holds with `DISK_RESUME_MARGIN_BYTES`
/// to spare, so a client working at the limit does not flip it at every message.
pub fn refusal(
    limits: &DiskLimits,
    disk_bytes: u64,
    snapshot_bytes: u64,
    space: Option<Space>,
    refusing: bool,
) -> Option<Refusal> {
    let margin = if refusing {
        DISK_RESUME_MARGIN_BYTES
    } else {
        0
    };
    let headroom = headroom_bytes(snapshot_bytes).saturating_add(margin);
    if let Some(max) = limits.shard_bytes_max {
        if disk_bytes.saturating_add(headroom) > max {
            return Some(Refusal::OverShare {
                disk_bytes,
                headroom_bytes: headroom,
                shard_bytes_max: max,
            });
        }
    }
    let space = space?;
    let reserve = limits.free_min.bytes(space.total_bytes);
    let needed = headroom.saturating_mul(limits.shards);
    (space.free_bytes < reserve.saturating_add(needed)).then_some(Refusal::ShortOfFree {
        free_bytes: space.free_bytes,
        reserve_bytes: reserve,
        headroom_bytes: headroom,
        shards: limits.shards,
    })
}

/// What a snapshot of a shard whose files take `disk_bytes`, and that writes `snapshot_bytes`
/// keeping every segment with texts on disk only, may copy beyond that while the rule still
/// holds (`Log::set_copy_budget`): what its share of `--max-disk` leaves beyond its files and
/// its headroom, and its part of the free space beyond `--min-free-disk` less its headroom
/// (each shard's, as `refusal` counts it); 0 where the rule refuses. Unlimited without limits
/// or a measurement.
pub fn copy_budget(
    limits: &DiskLimits,
    disk_bytes: u64,
    snapshot_bytes: u64,
    space: Option<Space>,
) -> u64 {
    let headroom = headroom_bytes(snapshot_bytes);
    let share = limits.shard_bytes_max.map_or(u64::MAX, |max| {
        max.saturating_sub(disk_bytes.saturating_add(headroom))
    });
    let free = space.map_or(u64::MAX, |space| {
        let reserve = limits.free_min.bytes(space.total_bytes);
        (space.free_bytes.saturating_sub(reserve) / limits.shards.max(1)).saturating_sub(headroom)
    });
    share.min(free)
}

/// The size and free space of the file system holding `path`.
#[cfg(unix)]
pub fn filesystem_space(path: &Path) -> io::Result<Space> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: statvfs fills a plain struct owned by this frame from a NUL-terminated path.
    let stats = unsafe {
        let mut stats: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stats) != 0 {
            return Err(io::Error::last_os_error());
        }
        stats
    };
    let fragment_bytes = stats.f_frsize as u64;
    Ok(Space {
        free_bytes: (stats.f_bavail as u64).saturating_mul(fragment_bytes),
        total_bytes: (stats.f_blocks as u64).saturating_mul(fragment_bytes),
    })
}

/// The file system holding a shard's files as its measuring thread last saw it. The thread
/// measures every `DISK_SAMPLE_INTERVAL_MS`, and at once when asked (`refresh`); it ends once
/// the gauge is dropped. A measurement that fails (the directory removed, `statvfs` refused)
/// keeps the last figures rather than lifting `--min-free-disk`: the thread says so once on
/// stderr, and once when it measures again. Shared through atomics, no lock: a reader may see
/// the free space of one measurement with the size of the one before, which moves only when a
/// file system is resized.
pub struct SpaceGauge {
    shared: Arc<Gauge>,
    thread: Thread,
}

/// What the measuring thread publishes.
#[derive(Default)]
struct Gauge {
    /// Whether any measurement succeeded yet (else the two figures mean nothing).
    measured: AtomicBool,
    free_bytes: AtomicU64,
    total_bytes: AtomicU64,
}

impl Gauge {
    fn store(&self, space: Space) {
        self.free_bytes.store(space.free_bytes, Ordering::Relaxed);
        self.total_bytes.store(space.total_bytes, Ordering::Relaxed);
        self.measured.store(true, Ordering::Release);
    }
}

impl SpaceGauge {
    /// Measures the file system holding `directory` once on the calling thread (so a shard
    /// starts with figures), then starts the thread that measures it from then on, for shard
    /// `shard` (which names it, and its lines on stderr).
    pub fn start(directory: &Path, shard: usize) -> io::Result<SpaceGauge> {
        let shared = Arc::new(Gauge::default());
        let first = filesystem_space(directory);
        if let Ok(space) = first {
            shared.store(space);
        }
        let weak = Arc::downgrade(&shared);
        let directory = directory.to_path_buf();
        let handle = thread::Builder::new()
            .name(format!("azq-space-{shard}"))
            .spawn(move || measure(weak, directory, shard, first.err()))?;
        Ok(SpaceGauge {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// The last measurement; `None` until one succeeded.
    pub fn space(&self) -> Option<Space> {
        self.shared.measured.load(Ordering::Acquire).then(|| Space {
            free_bytes: self.shared.free_bytes.load(Ordering::Relaxed),
            total_bytes: self.shared.total_bytes.load(Ordering::Relaxed),
        })
    }

    /// Asks for a measurement now (after a snapshot removed files); its figures arrive a
    /// moment later, for the next reading.
    pub fn refresh(&self) {
        self.thread.unpark();
    }
}

impl Drop for SpaceGauge {
    fn drop(&mut self) {
        // The thread finds the gauge gone at its next wake-up, and ends.
        self.thread.unpark();
    }
}

/// The measuring thread's loop (`SpaceGauge`); `failing`: why the first measurement failed.
fn measure(gauge: Weak<Gauge>, directory: PathBuf, shard: usize, mut failing: Option<io::Error>) {
    if let Some(error) = &failing {
        say_failing(&directory, shard, error, false);
    }
    loop {
        thread::park_timeout(Duration::from_millis(DISK_SAMPLE_INTERVAL_MS));
        let Some(gauge) = gauge.upgrade() else {
            return;
        };
        match filesystem_space(&directory) {
            Ok(space) => {
                gauge.store(space);
                if failing.take().is_some() {
                    eprintln!(
                        "azq: shard {shard}: measuring the file system holding {} again",
                        directory.display()
                    );
                }
            }
            Err(error) => {
                if failing.is_none() {
                    let measured = gauge.measured.load(Ordering::Acquire);
                    say_failing(&directory, shard, &error, measured);
                }
                failing = Some(error);
            }
        }
    }
}

/// The line said when measurements start failing: what the free-space limit does meanwhile.
fn say_failing(directory: &Path, shard: usize, error: &io::Error, measured: bool) {
    let meanwhile = if measured {
        "--min-free-disk keeps its last measurement"
    } else {
        "--min-free-disk applies once it can be"
    };
    eprintln!(
        "azq: shard {shard}: cannot measure the file system holding {} ({error}); {meanwhile}",
        directory.display()
    );
}

/// Elsewhere the free space is not measured (`--max-disk` still applies).
#[cfg(not(unix))]
pub fn filesystem_space(_path: &Path) -> io::Result<Space> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "free space is measured on Unix only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A shard's headroom with nothing to snapshot: the served records' room and a segment.
    const HEADROOM: u64 = DISK_SERVED_RECORDS_BYTES + LOG_SEGMENT_BYTES;

    fn refuses(
        limits: &DiskLimits,
        disk_bytes: u64,
        snapshot_bytes: u64,
        space: Option<Space>,
    ) -> bool {
        refusal(limits, disk_bytes, snapshot_bytes, space, false).is_some()
    }

    /// What a snapshot may copy beyond what it writes anyway is exactly what the rule leaves:
    /// one byte more and it refuses; none where it refuses already. At the edges of every
    /// measure and over random ones.
    #[test]
    fn the_copy_budget_is_what_the_rule_leaves() {
        let mut random = crate::random::SplitMix64::new(40);
        let mut pick = |edges: &[u64], max: u64| {
            let roll = random.next_u64();
            if roll % 3 == 0 {
                edges[(roll / 3) as usize % edges.len()]
            } else {
                random.next_u64() % max
            }
        };
        for round in 0..20_000 {
            let share = (round % 4 != 0).then(|| pick(&[0, HEADROOM, 384 * MIB], 1 << 40));
            let free_min = if round % 2 == 0 {
                FreeDiskMin::Bytes(pick(&[0, MIB], 1 << 40))
            } else {
                FreeDiskMin::Percent(pick(&[0, 5, 100], 101))
            };
            let limits = limits(share, free_min, 1 + pick(&[0, 1, 255], 256));
            let disk_bytes = pick(&[0, HEADROOM, 384 * MIB], 1 << 40);
            let snapshot_bytes = pick(&[0, 1, MIB], 1 << 40);
            let space = (round % 5 != 0).then(|| {
                let total_bytes = pick(&[0, 1 << 30], 1 << 44);
                Space {
                    free_bytes: pick(&[0, total_bytes], total_bytes.max(1)),
                    total_bytes,
                }
            });
            let budget = copy_budget(&limits, disk_bytes, snapshot_bytes, space);
            let case = format!("{limits:?} {disk_bytes} {snapshot_bytes} {space:?}: {budget}");
            if refuses(&limits, disk_bytes, snapshot_bytes, space) {
                assert_eq!(budget, 0, "{case}");
                continue;
            }
            if budget == u64::MAX {
                assert!(
                    limits.shard_bytes_max.is_none() && space.is_none(),
                    "{case}"
                );
                continue;
            }
            assert!(
                !refuses(&limits, disk_bytes, snapshot_bytes + budget, space),
                "{case}"
            );
            assert!(
                refuses(&limits, disk_bytes, snapshot_bytes + budget + 1, space),
                "{case}"
            );
        }
    }

    /// Found by the break-it review: at the limit, each delete let one put in and the next put
    /// was refused, two lines on stderr a message. Refusals now stop with a margin to spare.
    #[test]
    fn refusals_stop_only_with_a_margin_to_spare() {
        let share = limits(Some(384 * MIB), FreeDiskMin::Bytes(0), 1);
        let files = 384 * MIB - HEADROOM;
        assert!(refusal(&share, files, 0, None, false).is_none());
        assert!(refusal(&share, files, 0, None, true).is_some());
        let spared = files - DISK_RESUME_MARGIN_BYTES;
        assert!(refusal(&share, spared, 0, None, true).is_none());
    }

    /// The line a shard prints when it starts refusing names the measure that decided, with
    /// its figures.
    #[test]
    fn a_refusal_says_why_in_figures() {
        let share = limits(Some(384 * MIB), FreeDiskMin::Bytes(0), 1);
        let over = refusal(&share, 384 * MIB - HEADROOM + 1, 0, None, false).expect("refused");
        assert_eq!(
            over.to_string(),
            "its files (304.0 MiB) and the room a snapshot needs (80.0 MiB: what it writes, room \
             to compact a segment, the records served meanwhile and a segment) would pass its \
             share of --max-disk (384.0 MiB)"
        );
        let two = limits(None, FreeDiskMin::Percent(10), 2);
        let space = Space {
            free_bytes: 150 * MIB,
            total_bytes: 1000 * MIB,
        };
        let short = refusal(&two, 0, MIB, Some(space), false).expect("refused");
        assert_eq!(
            short.to_string(),
            "the file system has 150.0 MiB free, under --min-free-disk (100.0 MiB) and the room 2 \
             shard(s) may need for a snapshot (81.0 MiB each: what it writes, room to compact a \
             segment, the records served meanwhile and a segment)"
        );
    }

    /// What a refusing shard is short of is exactly what its files must shrink by for the
    /// refusal to end: past its share, the overshoot; short of free space, its part of the
    /// shortfall, rounded up.
    #[test]
    fn a_refusal_says_what_the_shard_is_short_of() {
        let share = limits(Some(384 * MIB), FreeDiskMin::Bytes(0), 1);
        let files = 370 * MIB;
        let over = refusal(&share, files, 0, None, true).expect("refused");
        let short = over.short_bytes();
        assert_eq!(
            short,
            files + HEADROOM + DISK_RESUME_MARGIN_BYTES - 384 * MIB
        );
        assert!(refusal(&share, files - short + 1, 0, None, true).is_some());
        assert!(refusal(&share, files - short, 0, None, true).is_none());
        let three = limits(None, FreeDiskMin::Bytes(100 * MIB), 3);
        let space = |free_bytes| Space {
            free_bytes,
            total_bytes: 10_000 * MIB,
        };
        let free = 150 * MIB + 1;
        let refused = refusal(&three, 0, MIB, Some(space(free)), false).expect("refused");
        // Each of the three frees its part: together, the shortfall.
        let part = refused.short_bytes();
        assert_eq!(part, (100 * MIB + 3 * (HEADROOM + MIB) - free).div_ceil(3));
        assert!(refusal(&three, 0, MIB, Some(space(free + 3 * part)), false).is_none());
        assert!(refusal(&three, 0, MIB, Some(space(free + 3 * part - 3)), false).is_some());
    }

    fn limits(shard_bytes_max: Option<u64>, free_min: FreeDiskMin, shards: u64) -> DiskLimits {
        DiskLimits {
            shard_bytes_max,
            free_min,
            shards,
        }
    }

    #[test]
    fn the_share_keeps_room_for_a_snapshot_and_two_segments() {
        let share = limits(Some(384 * MIB), FreeDiskMin::Bytes(0), 1);
        // Files, what a snapshot writes and the headroom: exactly the share still fits.
        assert!(!refuses(
            &share,
            192 * MIB,
            384 * MIB - 192 * MIB - HEADROOM,
            None
        ));
        assert!(refuses(
            &share,
            192 * MIB,
            384 * MIB - 192 * MIB - HEADROOM + 1,
            None
        ));
        // Deletes shrink what a snapshot writes: refusals stop without a file removed.
        assert!(!refuses(&share, 192 * MIB, 0, None));
        // Files alone past the share minus the headroom refuse.
        assert!(refuses(&share, 384 * MIB - HEADROOM + 1, 0, None));
        // No share: only the free space counts.
        let none = limits(None, FreeDiskMin::Bytes(0), 1);
        assert!(!refuses(&none, u64::MAX, u64::MAX, None));
    }

    #[test]
    fn the_free_space_keeps_the_reserve_and_every_shards_headroom() {
        let space = |free_bytes| {
            Some(Space {
                free_bytes,
                total_bytes: 1000 * MIB,
            })
        };
        let two = limits(None, FreeDiskMin::Percent(10), 2);
        // Reserve 100 MiB, and two shards' headroom (nothing to snapshot).
        assert!(!refuses(&two, 0, 0, space(100 * MIB + 2 * HEADROOM)));
        assert!(refuses(&two, 0, 0, space(100 * MIB + 2 * HEADROOM - 1)));
        // What a snapshot writes raises the headroom, for every shard.
        assert!(refuses(&two, 0, MIB, space(100 * MIB + 2 * HEADROOM + MIB)));
        assert!(!refuses(
            &two,
            0,
            MIB,
            space(100 * MIB + 2 * HEADROOM + 2 * MIB)
        ));
        // Not measured: nothing refused for it.
        assert!(!refuses(&two, 0, 0, None));
        // 100% keeps the whole file system: always refused.
        let all = limits(None, FreeDiskMin::Percent(100), 1);
        assert!(refuses(&all, 0, 0, space(1000 * MIB)));
        let bytes = limits(None, FreeDiskMin::Bytes(u64::MAX), 1);
        assert!(refuses(&bytes, 0, 0, space(1000 * MIB)));
    }

    #[test]
    fn percentages_are_of_the_file_systems_size() {
        assert_eq!(FreeDiskMin::Percent(5).bytes(1000), 50);
        assert_eq!(FreeDiskMin::Percent(100).bytes(u64::MAX), u64::MAX);
        assert_eq!(FreeDiskMin::Percent(0).bytes(u64::MAX), 0);
        assert_eq!(FreeDiskMin::Bytes(7).bytes(0), 7);
    }

    /// Whether a thread of this process is named `name`.
    fn thread_named(name: &str) -> bool {
        std::fs::read_dir("/proc/self/task").unwrap().any(|task| {
            let comm = task.unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|comm| comm.trim_end() == name)
        })
    }

    /// Waits up to 2 s for `done`, else fails with `failure`.
    fn wait_for(done: impl Fn() -> bool, failure: &str) {
        for _ in 0..200 {
            if done() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("{failure}");
    }

    /// The gauge starts with a figure, keeps its last one when the directory goes, and its
    /// thread ends with it.
    #[test]
    fn a_gauge_keeps_its_last_measurement_and_its_thread_ends_with_it() {
        let directory = std::env::temp_dir().join(format!("azq-gauge-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let gauge = SpaceGauge::start(&directory, 9101).unwrap();
        let first = gauge.space().expect("measured at start");
        assert!(first.total_bytes > 0);
        // The thread names itself once it runs.
        wait_for(|| thread_named("azq-space-9101"), "no measuring thread");
        std::fs::remove_dir(&directory).unwrap();
        for _ in 0..5 {
            gauge.refresh();
            thread::sleep(Duration::from_millis(DISK_SAMPLE_INTERVAL_MS));
            assert!(gauge
                .space()
                .is_some_and(|space| space.total_bytes == first.total_bytes));
        }
        drop(gauge);
        wait_for(
            || !thread_named("azq-space-9101"),
            "the measuring thread outlived its gauge",
        );
        let unmeasured = SpaceGauge::start(Path::new("/no/such/directory"), 9102).unwrap();
        assert_eq!(unmeasured.space(), None);
    }

    #[test]
    fn the_file_system_of_a_directory_is_measured() {
        let space = filesystem_space(Path::new(".")).unwrap();
        assert!(space.total_bytes > 0 && space.free_bytes <= space.total_bytes);
        assert!(filesystem_space(Path::new("/no/such/directory")).is_err());
    }
}
