//! A running shard's log: group commit of the records its state emits, the wait of each reply
//! for the sync that covers its records, and snapshots written a step at a time.
//!
//! **Group commit.** The state appends records to its journal as it applies commands; `flush`
//! takes what has accumulated (at most `LOG_FLUSH_BYTES_MAX`), writes it at the end of the
//! current segment in one aligned write (rewriting the block the previous flush ended in) and
//! syncs it (fdatasync). While a flush is in flight the shard keeps serving and the next batch
//! accumulates, so one sync covers every change made during the previous one. A reply whose
//! command emitted records waits for `durable(sequence)`. With `Durability::Write` a flush only
//! writes, and `sync_in_background` syncs on a timer: that survives a crash of azq, not of the
//! machine.
//!
//! **Snapshots.** Once the log since the last snapshot outgrows the live data (and
//! `SNAPSHOT_ALLOWANCE_BYTES`), a `SnapshotJob` writes the state to `snapshot.tmp` a bounded step
//! at a time (queues, then `SNAPSHOT_STEP_SLOTS` message slots per step) while the shard serves.
//! It records the sequence the state had reached when it started; replay starts there, and since
//! records are blind writes, whatever the snapshot already reflects is harmless to replay. When
//! it is whole it is synced and renamed, and every segment and snapshot it makes unnecessary is
//! removed: disk use stays within the live data twice plus the allowance per shard, and while a
//! snapshot is being written, one more copy of the live data (plus removed files whose mapping
//! messages restored at start-up still hold: `files::StdFiles::read`).
//!
//! An I/O error is not answered to a client: the caller ends the process (fail-stop), and the
//! next start recovers what was durable.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::path::PathBuf;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

use bytes::{BufMut, BytesMut};

use super::files::Disk;
use super::format::{
    segment_header, segment_name, snapshot_header, snapshot_name, snapshot_trailer,
    SNAPSHOT_TEMPORARY_NAME,
};
use super::recovery::{SegmentFile, ShardStart};
use crate::limits::{
    LOG_CLOSED_SEGMENTS_MAX, LOG_FLUSH_BYTES_MAX, LOG_SEGMENT_BYTES, SNAPSHOT_ALLOWANCE_BYTES,
    SNAPSHOT_STEP_SLOTS, STORAGE_BLOCK_BYTES,
};
use crate::queue::{QueueKey, ShardState};
use crate::time::{latency_bucket, LATENCY_BUCKETS};

/// When a change counts as written, as `--durability` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged once synced to the device (fdatasync): survives a power cut. The default.
    Fsync,
    /// Acknowledged once written to the operating system, synced in the background every
    /// `WRITE_MODE_SYNC_INTERVAL_MS`: survives a crash of azq, not of the machine.
    Write,
}

impl Durability {
    /// Reads `fsync` or `write`.
    pub fn parse(text: &str) -> Option<Durability> {
        match text {
            "fsync" => Some(Durability::Fsync),
            "write" => Some(Durability::Write),
            _ => None,
        }
    }
}

/// The segment being written.
struct OpenSegment<F> {
    file: Rc<F>,
    path: PathBuf,
    first_sequence: u64,
    /// Bytes of the segment in use: header block and records.
    length: u64,
    /// The records in the last, partial block: rewritten, with more after them, by the next
    /// flush.
    tail: BytesMut,
}

struct LogState<F> {
    segment: Option<OpenSegment<F>>,
    /// Closed segments, oldest first.
    segments: Vec<SegmentFile>,
    /// The current snapshot and its size.
    snapshot: Option<(PathBuf, u64)>,
    /// Bytes of log since the snapshot that replay starts from.
    log_bytes: u64,
    /// The sequence of the next record to write.
    next_sequence: u64,
    /// A snapshot is being written.
    snapshotting: bool,
    /// Written and not synced yet (`Durability::Write`).
    unsynced: bool,
}

/// What a log's flushes have written since the shard started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Flushes (each one write and, with `Durability::Fsync`, one sync).
    pub flushes: u64,
    /// Records written.
    pub records: u64,
    /// The most records one flush wrote.
    pub records_max: u64,
    /// Bytes of records written.
    pub bytes: u64,
    /// How long each flush's write and sync took: `time::latency_bucket` counts.
    pub duration_buckets: [u64; LATENCY_BUCKETS],
    /// The sum of those durations, µs.
    pub duration_sum_us: u64,
}

/// One shard's log.
pub struct Log<D: Disk> {
    disk: D,
    directory: PathBuf,
    shard: u32,
    id_prefix: u64,
    durability: Durability,
    /// Size segments are preallocated to (`LOG_SEGMENT_BYTES`; smaller in tests).
    segment_bytes: u64,
    state: RefCell<LogState<D::File>>,
    /// The highest sequence that counts as written (`None`: none yet).
    durable: Cell<Option<u64>>,
    /// What the flushes so far have written.
    stats: Cell<FlushStats>,
    /// Replies waiting for a sequence to count as written.
    waiters: RefCell<Vec<(u64, Waker)>>,
}

impl<D: Disk> Log<D> {
    /// The log of `start`'s shard, continuing after what recovery found.
    pub fn new(disk: D, start: &ShardStart, shard: u32, durability: Durability) -> Log<D> {
        // Records the state holds already (an `--init` file's) are the first flush's.
        let next_sequence = start
            .state
            .journal_untaken_sequence()
            .expect("a durable shard journals");
        let log_bytes = start.segments.iter().map(|segment| segment.bytes).sum();
        Log {
            disk,
            directory: start.directory.clone(),
            shard,
            id_prefix: start.state.identity().id_prefix,
            durability,
            segment_bytes: LOG_SEGMENT_BYTES,
            state: RefCell::new(LogState {
                segment: None,
                segments: start.segments.clone(),
                snapshot: start.snapshot.clone(),
                log_bytes,
                next_sequence,
                snapshotting: false,
                unsynced: false,
            }),
            durable: Cell::new(next_sequence.checked_sub(1)),
            stats: Cell::new(FlushStats::default()),
            waiters: RefCell::new(Vec::new()),
        }
    }

    /// The log with segments of `segment_bytes` instead of `LOG_SEGMENT_BYTES`, so that tests
    /// see segments fill, rotate and go.
    pub fn with_segment_bytes(mut self, segment_bytes: u64) -> Log<D> {
        self.segment_bytes = segment_bytes;
        self
    }

    /// Completes once record `sequence` counts as written (synced, or written with
    /// `Durability::Write`).
    pub fn durable(&self, sequence: u64) -> impl Future<Output = ()> + '_ {
        poll_fn(move |context| {
            if self
                .durable
                .get()
                .is_some_and(|durable| durable >= sequence)
            {
                Poll::Ready(())
            } else {
                self.waiters
                    .borrow_mut()
                    .push((sequence, context.waker().clone()));
                Poll::Pending
            }
        })
    }

    /// When a change counts as written.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// What the flushes so far have written: how well group commit batches.
    pub fn stats(&self) -> FlushStats {
        self.stats.get()
    }

    /// The highest sequence that counts as written.
    pub fn durable_sequence(&self) -> Option<u64> {
        self.durable.get()
    }

    /// Writes (and, for `Fsync`, syncs) the records `state` has accumulated, one batch of at
    /// most `LOG_FLUSH_BYTES_MAX`. `Ok(false)` when there was nothing to write.
    pub async fn flush(&self, state: &RefCell<ShardState>) -> io::Result<bool> {
        let Some((records, last_sequence)) = state.borrow_mut().take_journal(LOG_FLUSH_BYTES_MAX)
        else {
            return Ok(false);
        };
        let first_sequence = self.state.borrow().next_sequence;
        // A new segment when this one is full; a batch larger than a whole segment fills one
        // of its own, past its preallocated size.
        let rotate = self.state.borrow().segment.as_ref().is_none_or(|segment| {
            segment.length > STORAGE_BLOCK_BYTES as u64
                && segment.length + records.len() as u64 + STORAGE_BLOCK_BYTES as u64
                    > self.segment_bytes
        });
        if rotate {
            self.open_segment(first_sequence).await?;
        }
        let started = Instant::now();
        // The partial block the last flush ended in, then the new records, padded to blocks.
        let (file, offset, blocks, tail) = {
            let mut log = self.state.borrow_mut();
            let segment = log.segment.as_mut().expect("a segment is open");
            let offset = segment.length - segment.tail.len() as u64;
            let mut blocks = BytesMut::with_capacity(segment.tail.len() + records.len() + 4096);
            blocks.put_slice(&segment.tail);
            blocks.put_slice(&records);
            let whole = blocks.len() / STORAGE_BLOCK_BYTES * STORAGE_BLOCK_BYTES;
            let tail = BytesMut::from(&blocks[whole..]);
            blocks.resize(blocks.len().next_multiple_of(STORAGE_BLOCK_BYTES), 0);
            segment.length += records.len() as u64;
            (segment.file.clone(), offset, blocks, tail)
        };
        self.disk.write_at(&file, offset, &blocks).await?;
        match self.durability {
            Durability::Fsync => self.disk.sync(&file).await?,
            Durability::Write => self.state.borrow_mut().unsynced = true,
        }
        {
            let mut log = self.state.borrow_mut();
            log.segment.as_mut().expect("a segment is open").tail = tail;
            log.log_bytes += records.len() as u64;
            log.next_sequence = last_sequence + 1;
        }
        let mut stats = self.stats.get();
        let records_written = last_sequence + 1 - first_sequence;
        stats.flushes += 1;
        stats.records += records_written;
        stats.records_max = stats.records_max.max(records_written);
        stats.bytes += records.len() as u64;
        let duration_us = started.elapsed().as_micros() as u64;
        stats.duration_buckets[latency_bucket(duration_us)] += 1;
        stats.duration_sum_us += duration_us;
        self.stats.set(stats);
        self.made_durable(last_sequence);
        Ok(true)
    }

    /// Syncs what `Durability::Write` has written since the last sync.
    pub async fn sync_in_background(&self) -> io::Result<()> {
        let file = {
            let mut log = self.state.borrow_mut();
            if !std::mem::take(&mut log.unsynced) {
                return Ok(());
            }
            log.segment.as_ref().map(|segment| segment.file.clone())
        };
        if let Some(file) = file {
            self.disk.sync(&file).await?;
        }
        Ok(())
    }

    fn made_durable(&self, sequence: u64) {
        self.durable.set(Some(sequence));
        self.waiters.borrow_mut().retain(|(waiting, waker)| {
            if *waiting <= sequence {
                waker.wake_by_ref();
                false
            } else {
                true
            }
        });
    }

    /// Closes the current segment and starts a new one at `first_sequence`. The closed one's
    /// records are synced: flushes sync before they return, and with `Durability::Write` what
    /// the background sync has not reached yet is synced here, so that after a power cut no
    /// segment but the last can end in a torn write (which recovery would take for damage).
    async fn open_segment(&self, first_sequence: u64) -> io::Result<()> {
        let unsynced = {
            let mut log = self.state.borrow_mut();
            let unsynced = std::mem::take(&mut log.unsynced);
            log.segment
                .as_ref()
                .filter(|_| unsynced)
                .map(|segment| segment.file.clone())
        };
        if let Some(file) = unsynced {
            self.disk.sync(&file).await?;
        }
        let path = self.directory.join(segment_name(first_sequence));
        let file = self.disk.create(&path, self.segment_bytes).await?;
        let header = segment_header(self.shard, self.id_prefix, first_sequence);
        self.disk.write_at(&file, 0, &header).await?;
        self.disk.sync(&file).await?;
        let mut log = self.state.borrow_mut();
        if let Some(old) = log.segment.take() {
            log.segments.push(SegmentFile {
                first_sequence: old.first_sequence,
                path: old.path,
                bytes: old.length,
            });
        }
        log.segment = Some(OpenSegment {
            file: Rc::new(file),
            path,
            first_sequence,
            length: STORAGE_BLOCK_BYTES as u64,
            tail: BytesMut::new(),
        });
        log.log_bytes += STORAGE_BLOCK_BYTES as u64;
        Ok(())
    }

    /// Whether a snapshot is due and none is running: the log has outgrown the live data, or
    /// closed segments have piled up (each restart closes one, however little it holds).
    pub fn wants_snapshot(&self, state: &RefCell<ShardState>) -> bool {
        let log = self.state.borrow();
        let live_bytes = state.borrow().message_bytes();
        !log.snapshotting
            && (log.log_bytes > live_bytes.max(SNAPSHOT_ALLOWANCE_BYTES)
                || log.segments.len() > LOG_CLOSED_SEGMENTS_MAX)
    }

    /// Starts a snapshot of `state` as it is now.
    pub async fn start_snapshot(&self, state: &RefCell<ShardState>) -> io::Result<SnapshotJob<D>> {
        let (identity, replay_from) = {
            let state = state.borrow();
            let replay_from = state
                .journal_next_sequence()
                .expect("a durable shard journals");
            (state.identity(), replay_from)
        };
        self.state.borrow_mut().snapshotting = true;
        let path = self.directory.join(SNAPSHOT_TEMPORARY_NAME);
        let file = self.disk.create(&path, 0).await?;
        let mut pending = BytesMut::with_capacity(1 << 20);
        pending.put_slice(&snapshot_header(self.shard, &identity, replay_from));
        Ok(SnapshotJob {
            file,
            pending,
            written: 0,
            entries: 0,
            replay_from,
            phase: Phase::Queues(None),
        })
    }

    /// A snapshot is whole and synced: it replaces the last one, and every segment it makes
    /// unnecessary goes.
    async fn finish_snapshot(&self, replay_from: u64, bytes: u64) -> io::Result<()> {
        let temporary = self.directory.join(SNAPSHOT_TEMPORARY_NAME);
        let path = self.directory.join(snapshot_name(replay_from));
        self.disk.rename(&temporary, &path).await?;
        let (old_snapshot, removable) = {
            let mut log = self.state.borrow_mut();
            log.snapshotting = false;
            let old = log.snapshot.replace((path, bytes)).map(|(path, _)| path);
            // A closed segment can go when the next one starts at or before the replay point.
            let mut removable = Vec::new();
            let current_first = log.segment.as_ref().map(|segment| segment.first_sequence);
            while log.segments.first().is_some_and(|first| {
                let next_first = log
                    .segments
                    .get(1)
                    .map(|next| next.first_sequence)
                    .or(current_first);
                next_first.is_some_and(|next| next <= replay_from)
                    && first.first_sequence < replay_from
            }) {
                removable.push(log.segments.remove(0));
            }
            log.log_bytes = log
                .segments
                .iter()
                .map(|segment| segment.bytes)
                .sum::<u64>()
                + log.segment.as_ref().map_or(0, |segment| segment.length);
            (old, removable)
        };
        if let Some(old) = old_snapshot {
            if old.file_name().and_then(|name| name.to_str()) != Some(&snapshot_name(replay_from)) {
                self.disk.remove(&old).await?;
            }
        }
        for segment in removable {
            self.disk.remove(&segment.path).await?;
        }
        Ok(())
    }
}

/// Where a snapshot job is.
enum Phase {
    /// Encoding queues, after the given one.
    Queues(Option<QueueKey>),
    /// Encoding message slots from the given one.
    Messages(u32),
    /// Everything is encoded.
    Done,
}

/// A snapshot being written, a step at a time.
pub struct SnapshotJob<D: Disk> {
    file: D::File,
    /// Encoded bytes not written yet (less than a block once a step is done).
    pending: BytesMut,
    /// Bytes of the file written.
    written: u64,
    entries: u64,
    replay_from: u64,
    phase: Phase,
}

impl<D: Disk> SnapshotJob<D> {
    /// Encodes and writes one bounded step; `Ok(true)` once the snapshot is whole, synced and in
    /// place.
    pub async fn step(&mut self, log: &Log<D>, state: &RefCell<ShardState>) -> io::Result<bool> {
        {
            let state = state.borrow();
            match &self.phase {
                Phase::Queues(after) => {
                    let last = state.snapshot_queues(
                        after.as_ref(),
                        SNAPSHOT_STEP_SLOTS as usize,
                        &mut self.pending,
                        &mut self.entries,
                    );
                    self.phase = match last {
                        Some(last) => Phase::Queues(Some(last)),
                        None => {
                            state.snapshot_settings(&mut self.pending, &mut self.entries);
                            Phase::Messages(0)
                        }
                    };
                }
                Phase::Messages(from) => {
                    let end = from.saturating_add(SNAPSHOT_STEP_SLOTS);
                    state.snapshot_messages(*from..end, &mut self.pending, &mut self.entries);
                    self.phase = if end >= state.slab_slots() {
                        self.pending.put_slice(&snapshot_trailer(self.entries));
                        Phase::Done
                    } else {
                        Phase::Messages(end)
                    };
                }
                Phase::Done => {}
            }
        }
        let done = matches!(self.phase, Phase::Done);
        let whole = if done {
            let padded = self.pending.len().next_multiple_of(STORAGE_BLOCK_BYTES);
            self.pending.resize(padded, 0);
            padded
        } else {
            self.pending.len() / STORAGE_BLOCK_BYTES * STORAGE_BLOCK_BYTES
        };
        if whole > 0 {
            let blocks = self.pending.split_to(whole);
            log.disk.write_at(&self.file, self.written, &blocks).await?;
            self.written += whole as u64;
        }
        if done {
            log.disk.sync(&self.file).await?;
            log.finish_snapshot(self.replay_from, self.written).await?;
        }
        Ok(done)
    }
}
