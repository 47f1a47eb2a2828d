//! A running shard's log: group commit of the records its state emits, the wait of each reply
//! for the sync that covers its records, and snapshots written a step at a time.
//!
//! **Group commit.** The state appends records to its journal as it applies commands; `flush`
//! takes what has accumulated (at most `LOG_FLUSH_BYTES_MAX`), writes it at the end of the
//! current segment in one aligned write starting on a fresh block (the rest of its last block
//! is zeros), and syncs it (fdatasync). While a flush is in flight the shard keeps serving and
//! the next batch accumulates, so one sync covers every change made during the previous one. A
//! reply whose command emitted records waits for `durable(sequence)`. With `Durability::Write`
//! a flush only writes, and `sync_in_background` syncs on a timer (and a flush first syncs when
//! `LOG_FLUSH_BYTES_MAX` would be written and not synced): that survives a crash of azq, not of
//! the machine.
//!
//! **Nothing acknowledged is written twice.** A flush never rewrites a block that holds synced
//! records: a write torn by a power cut, at whatever granularity and with whatever garbage, can
//! only damage bytes that no reply has waited for. (Rewriting the last partial block with more
//! records after it, as before, was safe only on a device that writes each sector whole.)
//!
//! **Files appear whole.** A new segment is created as `segment.tmp`, preallocated, given its
//! header, synced, and only then renamed to its name (and the directory synced) before any
//! record is written into it; a snapshot is written to `snapshot.tmp`, synced, renamed, and the
//! directory synced before the files it replaces are removed (and the directory synced again).
//! So a file under a segment's or snapshot's name always has its header, and a power cut can
//! leave behind only temporary files and unsynced tails, which recovery cleans up.
//!
//! **Snapshots.** Once the log since the last snapshot outgrows the live data (and
//! `SNAPSHOT_ALLOWANCE_BYTES`), or the snapshot and the closed segments outgrow twice the
//! stored data (and the allowance: a drained queue's snapshot is mostly dead), a `SnapshotJob`
//! writes the state to `snapshot.tmp` a bounded step at a time (queues, then
//! `SNAPSHOT_STEP_SLOTS` message slots per step) while the shard serves. It records the
//! sequence the state had reached when it started; replay starts there, and since records are
//! blind writes, whatever the snapshot already reflects is harmless to replay. When it is whole
//! it is synced and renamed, and every segment and snapshot it makes unnecessary is removed,
//! `SNAPSHOT_REMOVAL_STEP_BYTES` freed per step (`remove_step`): disk use stays within the
//! stored data twice plus the allowance per shard, beside the open segment, and while a
//! snapshot is being written, one more copy of it.
//!
//! An I/O error is not answered to a client: the caller ends the process (fail-stop), and the
//! next start recovers what was durable. The log itself refuses every later flush, sync and
//! snapshot step once one failed, so nothing written after a failed sync (whose data the kernel
//! may have dropped while reporting success to a later sync) is ever acknowledged.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};

use super::files::Disk;
use super::format::{
    segment_header, segment_name, snapshot_header, snapshot_name, snapshot_trailer,
    SEGMENT_TEMPORARY_NAME, SNAPSHOT_TEMPORARY_NAME,
};
use super::read_cache::{capacity_for, chunk_of, ReadCache};
use super::recovery::{SegmentFile, ShardStart};
use crate::limits::{
    DISK_COMPACTION_BYTES, LOG_CLOSED_SEGMENTS_MAX, LOG_FLUSH_BYTES_MAX, LOG_SEGMENT_BYTES,
    MESSAGE_OVERHEAD_BYTES, SEGMENT_KEPT_LIVE_SHARE_MIN, SEGMENT_SMALL_SHARE,
    SNAPSHOT_ALLOWANCE_BYTES, SNAPSHOT_DEAD_BYTES_PER_MESSAGE, SNAPSHOT_READ_GAP_BYTES,
    SNAPSHOT_REHOME_STEP_TEXTS, SNAPSHOT_REMOVAL_STEP_BYTES, SNAPSHOT_STEP_SLOTS,
    SNAPSHOT_STEP_TEXT_BYTES, SNAPSHOT_SYNC_BYTES, SNAPSHOT_TALLY_STEP_SLOTS, STORAGE_BLOCK_BYTES,
};
use crate::queue::key::{TextFile, TextLocator};
use crate::queue::record::{record_text, text_records};
use crate::queue::state::texts::{Naming, TextOnDisk, TextWritten, TextsRead};
use crate::queue::{Encoded, QueueKey, ShardState};
use crate::storage::space::{self, DiskLimits, Refusal, Space};
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

/// What `snapshot_due` weighs: a shard's files and the data it holds now.
#[derive(Clone, Copy)]
struct Sizes {
    /// Bytes of log since the snapshot that replay starts from.
    log_bytes: u64,
    /// The part of `log_bytes` in closed segments: what a snapshot now would let go (the open
    /// segment stays, however dead).
    closed_log_bytes: u64,
    /// What those closed segments take on disk (`SegmentFile::allocated_bytes`).
    closed_allocated_bytes: u64,
    /// What the records of that snapshot are charged (`Encoded::charged`): what a snapshot
    /// now would not write again of it is what has left the store since. For a snapshot
    /// recovery found, not known: its size.
    snapshot_charged_bytes: u64,
    /// What the segments that snapshot keeps hold beyond the records it named
    /// (`LogState::kept_dead_bytes`): freed by a snapshot that copies what is left of them.
    kept_dead_bytes: u64,
    /// Closed log segments less than half full (`SEGMENT_SMALL_SHARE`; at most
    /// `LOG_CLOSED_SEGMENTS_MAX`).
    small_closed_segments: usize,
    /// Bytes charged for the messages stored now (`ShardState::message_bytes`).
    message_bytes: u64,
    /// Bytes charged for everything stored now (`ShardState::stored_bytes`).
    stored_bytes: u64,
    /// The shard refuses growth for space.
    refusing: bool,
    /// While it refuses, what its files must shrink by for that to end (`Refusal::short_bytes`).
    short_bytes: u64,
}

/// Whether a shard of these `sizes`, whose segments hold `segment_bytes`, is due a snapshot:
/// - the log holds more than the live messages and `SNAPSHOT_ALLOWANCE_BYTES`. A log that only
///   grows the live data (Puts) is over it only by its records' framing and padding, so the
///   live data is not written out again each time the log passes it;
/// - or what the snapshot recorded (its charge), what the segments it keeps hold beyond the
///   records it named (`kept_dead_bytes`) and the closed segments, which a snapshot now would
///   let go, hold more than twice what is stored and the allowance: the new snapshot
///   frees more than it writes (what a snapshot holds beyond its records' charge, its header
///   and the accounts' service properties, is in both). This is the drain: Deletes add little
///   log, so by the first rule alone a snapshot of a queue since drained stayed on disk until
///   its dead bytes' worth of Deletes had been logged, in practice for good. Right after a
///   snapshot there is no closed segment (unless the log rotated while it was written), so
///   this holds again only when what it recorded is over twice what is stored now (and the
///   allowance): the stored data fell by more than half while it was written, and each such
///   snapshot is smaller, never snapshot after snapshot. Charged by what it recorded, not by
///   what was stored when it began: messages Put while it was written and recorded in it are
///   charged, and a drain frees them too;
/// - or small closed segments have piled up: each restart closes one, however little it holds.
///   Full ones do not count: a fill of Puts closes one every segment, and counting them wrote
///   the whole fill out again every nine segments (the break-it review of the drain rule);
/// - or the shard refuses growth for space (`refusing`) and the log passed one segment: the
///   operations still served (Get, Update without a text, Delete) write records too, and waiting
///   for the log to pass the live data again let them fill the disk past the headroom the disk
///   limits keep (a snapshot's copy and one segment) to ENOSPC;
/// - or it refuses and a snapshot may free what the shard is short of (`short_bytes`, at least
///   a block): what the snapshot recorded and the closed segments as allocated hold that much
///   more than what is stored. While it refuses nothing grows, so that is the charge of what
///   has left the store since the snapshot, and the closed segments: at least what a snapshot
///   frees, as an item's charge is at least its encoding. So every snapshot that would end the
///   refusal is due, and at worst one that frees less. Not quite: what was put between the
///   snapshot and the refusal counts at its charge, not its encoding, so for small texts the
///   estimate falls short by up to about two fifths of that (less than a segment of log, or the
///   rule above had snapshotted). Found by the break-it reviews of the
///   drain rule: a drained shard's dead snapshot, within the allowance, kept it refusing for
///   good (a drain writes too little log for the rule above); with a fixed 16 MiB in place of
///   `short_bytes`, so did one drained in part, short of less; and with the snapshot's size
///   less what it held beyond its charge (floored at 0, while a small message's charge is
///   above its encoding), so did one of small messages. Right after a snapshot this holds
///   only if more than a block left the store while it was written (or the log rotated).
///   Kept segments' dead bytes are not counted here: a snapshot frees them only from a
///   segment that has fallen below `SEGMENT_KEPT_LIVE_SHARE_MIN`, which they do not tell, and
///   counted they made a refusing shard snapshot again and again, each keeping the same
///   segments (a segment's deletes since count in the charge that left the store);
///
/// Kept segments are at least two thirds live when a snapshot keeps them, so right after it
/// they hold beyond the records it named at most half those records, at most their charge:
/// with nothing deleted while it ran, what it recorded and that are within twice what is
/// stored.
///
/// So outside a snapshot a shard's snapshot and closed segments stay within twice what it
/// stores, what its snapshot holds beyond its charge and the allowance, beside the open
/// segment.
fn snapshot_due(sizes: Sizes, segment_bytes: u64) -> bool {
    let allowance = SNAPSHOT_ALLOWANCE_BYTES;
    sizes.log_bytes > sizes.message_bytes.saturating_add(allowance)
        || sizes
            .snapshot_charged_bytes
            .saturating_add(sizes.kept_dead_bytes)
            .saturating_add(sizes.closed_log_bytes)
            > sizes
                .stored_bytes
                .saturating_mul(2)
                .saturating_add(allowance)
        || sizes.small_closed_segments > LOG_CLOSED_SEGMENTS_MAX
        || (sizes.refusing
            && (sizes.log_bytes > segment_bytes
                || sizes
                    .snapshot_charged_bytes
                    .saturating_add(sizes.closed_allocated_bytes)
                    .saturating_sub(sizes.stored_bytes)
                    >= sizes.short_bytes.max(STORAGE_BLOCK_BYTES as u64)))
}

/// Whether a closed segment of `bytes` of records is small for segments of `segment_bytes`
/// (`SEGMENT_SMALL_SHARE`).
fn small(bytes: u64, segment_bytes: u64) -> bool {
    bytes.saturating_mul(SEGMENT_SMALL_SHARE.1)
        < segment_bytes.saturating_mul(SEGMENT_SMALL_SHARE.0)
}

/// Whether a segment before a snapshot's replay point, where the records of texts on disk only
/// take `live` bytes, is one the snapshot keeps and names them in rather than copy them and let
/// it go: not small, and at least `SEGMENT_KEPT_LIVE_SHARE_MIN` of it (as allocated) theirs.
fn mostly_live(live: u64, segment: &SegmentFile, segment_bytes: u64) -> bool {
    live > 0
        && !small(segment.bytes, segment_bytes)
        && live.saturating_mul(SEGMENT_KEPT_LIVE_SHARE_MIN.1)
            >= segment
                .allocated_bytes
                .saturating_mul(SEGMENT_KEPT_LIVE_SHARE_MIN.0)
}

/// Spends `budget` on copying the segments a snapshot gives up, each its texts' records' bytes
/// on disk only there (at least the texts') and what the caller tells it by, the least first (the
/// most dead, the most freed for what is copied), as the snapshot does (`segments_to_keep`).
/// Answers those within it, and those past it, which the snapshot keeps (held).
fn spend_copy_budget<T: Ord>(mut given_up: Vec<(u64, T)>, budget: u64) -> (Vec<T>, Vec<T>) {
    given_up.sort_unstable();
    let (mut left, mut copied, mut held) = (budget, Vec::new(), Vec::new());
    for (live, segment) in given_up {
        match left.checked_sub(live) {
            Some(after) => {
                left = after;
                copied.push(segment);
            }
            None => held.push(segment),
        }
    }
    (copied, held)
}

impl<F> LogState<F> {
    /// The closed segments, oldest first, each with whether it lies wholly before `replay_from`
    /// (the next segment, or the open one, starts at or before it): a snapshot of that replay
    /// point may keep only those. With none open, the last closed one is not.
    fn closed_segments_before(
        &self,
        replay_from: u64,
    ) -> impl Iterator<Item = (&SegmentFile, bool)> + '_ {
        let open_first = self.segment.as_ref().map(|segment| segment.first_sequence);
        let next_firsts = self
            .segments
            .iter()
            .skip(1)
            .map(|segment| Some(segment.first_sequence))
            .chain([open_first]);
        self.segments
            .iter()
            .zip(next_firsts)
            .map(move |(segment, next)| (segment, next.is_some_and(|next| next <= replay_from)))
    }
}

/// The segment being written.
struct OpenSegment<F> {
    file: Rc<F>,
    path: PathBuf,
    first_sequence: u64,
    /// Bytes of the segment in use: header block and records, each flush's padded to whole
    /// blocks (the next flush starts here).
    length: u64,
    /// Bytes from the start known synced (`Durability::Write` bounds what lies beyond).
    synced_length: u64,
    /// Bytes of the records carrying texts written in it while the state tracked texts
    /// (`SegmentFile::text_record_bytes`).
    text_record_bytes: u64,
}

struct LogState<F> {
    segment: Option<OpenSegment<F>>,
    /// Closed segments, oldest first, from the one that holds the snapshot's replay point.
    segments: Vec<SegmentFile>,
    /// Segments before the replay point that the snapshot in place keeps, oldest first: its
    /// entries name records there (`Record::MessageNamed`).
    kept: Vec<SegmentFile>,
    /// What those hold beyond the records the snapshot named (as allocated): what a snapshot
    /// that copied those texts would free (`Sizes::snapshot_charged_bytes`). But for those
    /// kept only for want of room to copy them (`held`).
    kept_dead_bytes: u64,
    /// Of the kept segments, those the snapshot in place kept only for want of room to copy
    /// what is left of them (`segments_to_keep`), ascending: a snapshot is due once the copy
    /// budget covers what is left of one now (`wants_snapshot`). Unknown after a start (none).
    held: Vec<u64>,
    /// The current snapshot and its size.
    snapshot: Option<(PathBuf, u64)>,
    /// What that snapshot's records are charged (`Sizes`; its size for one recovery found).
    snapshot_charged_bytes: u64,
    /// Bytes of log since the snapshot that replay starts from.
    log_bytes: u64,
    /// The sequence of the next record to write.
    next_sequence: u64,
    /// A snapshot is due whatever the sizes: the one in place names texts recovery did not
    /// find, and left their messages out (`ShardStart::left_out`).
    snapshot_owed: bool,
    /// A snapshot is being written.
    snapshotting: bool,
    /// The replay point of the snapshot being encoded, until it is in place: the texts in the
    /// segments not wholly before it are copied (`snapshot_bytes_max`); and
    /// `ShardState::texts_evicted_to_segments_total` when it began.
    encoding_from: Option<(u64, u64)>,
    /// Once its tally has chosen them, the segments that snapshot names (ascending): it copies
    /// the texts of every other.
    encoding_names: Option<Vec<u64>>,
    /// Bytes of `snapshot.tmp` written so far (0 when no snapshot is being written).
    snapshot_temporary_bytes: u64,
    /// Bytes of the files a snapshot replaced that are not freed yet (`remove_step`).
    removing_bytes: u64,
    /// Written and not synced yet (`Durability::Write`).
    unsynced: bool,
    /// A sync of the open segment is in flight (`Log::segment_sync`).
    syncing: bool,
    /// A write or sync failed: nothing more is written, synced or acknowledged.
    failed: bool,
}

/// What a shard's log has written since the shard started: its flushes and its snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
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
    /// Snapshots written whole, put in place, and the files they replaced freed.
    pub snapshots: u64,
    /// Bytes of those snapshots' files.
    pub snapshot_bytes: u64,
    /// How long those snapshots took, from their start until the files they replaced were
    /// freed, µs.
    pub snapshot_duration_us: u64,
    /// A snapshot is being written now.
    pub snapshot_running: bool,
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
    /// What the shard's files must shrink by for its refusal to end (`watch_space`).
    short_bytes: Cell<u64>,
    /// What a snapshot may write beyond `snapshot_bytes_max` while the disk rule still holds
    /// (`watch_space`).
    copy_budget: Cell<u64>,
    /// What the flushes so far have written.
    stats: Cell<LogStats>,
    /// Replies waiting for a sequence to count as written.
    waiters: RefCell<Vec<(u64, Waker)>>,
    /// Tasks waiting for their turn to sync the open segment.
    sync_waiters: RefCell<Vec<Waker>>,
    /// Where each text record the flushes wrote landed, until taken (`take_written_texts`).
    #[cfg(test)]
    written_texts: RefCell<Vec<WrittenText>>,
    /// Where each text record a flush wrote landed, until the flush tells the state
    /// (`ShardState::note_written`); only while the state tracks texts.
    unnoted_texts: RefCell<Vec<TextWritten>>,
    /// Chunks of the log's files read back for texts, kept for the texts near them.
    read_cache: RefCell<ReadCache>,
}

/// A text record a flush wrote, and where (tiered storage, §11 step 2: the state will keep the
/// locator of each message's text so that the text can leave memory once it is durable).
#[cfg(test)]
#[derive(Clone, Debug)]
pub struct WrittenText {
    /// The message's slot and generation.
    pub slot: u32,
    /// The slot's generation.
    pub generation: u32,
    /// The record's sequence.
    pub sequence: u64,
    /// Where the record is.
    pub locator: crate::queue::key::TextLocator,
    /// The record's bytes as written, for a test to compare with what a read finds there.
    pub record: bytes::Bytes,
}

/// A task's turn to sync the open segment; passed on when dropped, however the sync ended
/// (a task dropped mid-sync included).
struct SyncTurn<'a, D: Disk> {
    log: &'a Log<D>,
}

impl<D: Disk> Drop for SyncTurn<'_, D> {
    fn drop(&mut self) {
        self.log.state.borrow_mut().syncing = false;
        for waker in self.log.sync_waiters.take() {
            waker.wake();
        }
    }
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
        let kept_bytes: u64 = start
            .kept
            .iter()
            .map(|segment| segment.allocated_bytes)
            .sum();
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
                kept: start.kept.clone(),
                // Those a snapshot held for want of room too: the first snapshot after a start
                // may free them, and tells them apart again.
                kept_dead_bytes: kept_bytes.saturating_sub(start.kept_named_bytes),
                held: Vec::new(),
                snapshot: start.snapshot.clone(),
                // Its size, and the records it names in the segments it keeps: its named
                // entries are small, and counted by their size alone a drained shard's kept
                // segments stayed for good after a restart (helper-52's review).
                snapshot_charged_bytes: start
                    .snapshot
                    .as_ref()
                    .map_or(0, |(_, bytes)| *bytes + start.kept_named_bytes),
                log_bytes,
                next_sequence,
                snapshot_owed: start.left_out > 0,
                snapshotting: false,
                encoding_from: None,
                encoding_names: None,
                snapshot_temporary_bytes: 0,
                removing_bytes: 0,
                unsynced: false,
                syncing: false,
                failed: false,
            }),
            durable: Cell::new(next_sequence.checked_sub(1)),
            short_bytes: Cell::new(0),
            copy_budget: Cell::new(u64::MAX),
            stats: Cell::new(LogStats::default()),
            waiters: RefCell::new(Vec::new()),
            sync_waiters: RefCell::new(Vec::new()),
            #[cfg(test)]
            written_texts: RefCell::new(Vec::new()),
            unnoted_texts: RefCell::new(Vec::new()),
            read_cache: RefCell::new(ReadCache::default()),
        }
    }

    /// The log with a read cache sized for a shard whose `--max-memory` share is `share`
    /// bytes (`read_cache::capacity_for`; without a call, `TEXT_READ_CACHE_BYTES`).
    pub fn with_memory_share(self, share: u64) -> Log<D> {
        *self.read_cache.borrow_mut() = ReadCache::with_capacity(capacity_for(share));
        self
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

    /// The shard's directory, where its segments and snapshots are.
    pub fn directory(&self) -> &std::path::Path {
        &self.directory
    }

    /// When a change counts as written.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// What the flushes so far have written (how well group commit batches), and the
    /// snapshots.
    pub fn stats(&self) -> LogStats {
        LogStats {
            snapshot_running: self.state.borrow().snapshotting,
            ..self.stats.get()
        }
    }

    /// The highest sequence that counts as written.
    pub fn durable_sequence(&self) -> Option<u64> {
        self.durable.get()
    }

    /// Writes (and, for `Fsync`, syncs) the records `state` has accumulated, one batch of at
    /// most `LOG_FLUSH_BYTES_MAX`. `Ok(false)` when there was nothing to write.
    pub async fn flush(&self, state: &RefCell<ShardState>) -> io::Result<bool> {
        self.check_failed()?;
        let Some((records, last_sequence)) = state.borrow_mut().take_journal(LOG_FLUSH_BYTES_MAX)
        else {
            return Ok(false);
        };
        let tracks_texts = state.borrow().tracks_texts();
        let written = self
            .write_records(records, last_sequence, tracks_texts)
            .await;
        if written.is_ok() {
            let unnoted = self.unnoted_texts.take();
            if !unnoted.is_empty() {
                state.borrow_mut().note_written(&unnoted);
            }
        }
        self.failed_on_error(written)
    }

    /// The body of `flush`: `records` (ending with record `last_sequence`) written at the end of
    /// the segment, and synced; where their texts landed is noted when the state
    /// `tracks_texts`.
    async fn write_records(
        &self,
        records: BytesMut,
        last_sequence: u64,
        tracks_texts: bool,
    ) -> io::Result<bool> {
        let first_sequence = self.state.borrow().next_sequence;
        // The new records from a fresh block, padded with zeros to whole blocks: the blocks
        // before them, which hold synced records, are never written again.
        let records_bytes = records.len();
        let padded = records_bytes.next_multiple_of(STORAGE_BLOCK_BYTES);
        // A new segment when this one is full; a batch larger than a whole segment fills one
        // of its own, past its preallocated size.
        let rotate = self.state.borrow().segment.as_ref().is_none_or(|segment| {
            segment.length > STORAGE_BLOCK_BYTES as u64
                && segment.length + padded as u64 > self.segment_bytes
        });
        if rotate {
            self.open_segment(first_sequence).await?;
        }
        let started = Instant::now();
        let (file, offset, synced_length) = {
            let log = self.state.borrow();
            let segment = log.segment.as_ref().expect("a segment is open");
            (segment.file.clone(), segment.length, segment.synced_length)
        };
        let segment_first = self
            .state
            .borrow()
            .segment
            .as_ref()
            .map(|open| open.first_sequence);
        // With `Durability::Write`, what lies beyond the last sync stays within one flush's
        // reach, which recovery takes for a torn last write: sync first when this write would
        // take it further.
        if self.durability == Durability::Write
            && offset + padded as u64 - synced_length > LOG_FLUSH_BYTES_MAX as u64
            && offset > synced_length
        {
            self.state.borrow_mut().unsynced = false;
            self.segment_sync(&file).await?;
            self.mark_synced(&file, offset);
        }
        let mut blocks = records;
        blocks.resize(padded, 0);
        // Another task's write or sync may have failed while this one waited (a failed sync can
        // drop what it covered): nothing is written after that, or records beyond the lost ones
        // could later read as acknowledged data behind damage.
        self.check_failed()?;
        match self.durability {
            Durability::Fsync => {
                self.disk.write_synced(&file, offset, &blocks).await?;
                self.mark_synced(&file, offset + padded as u64);
            }
            Durability::Write => {
                self.disk.write_at(&file, offset, &blocks).await?;
                self.state.borrow_mut().unsynced = true;
            }
        }
        let text_record_bytes = self.note_texts(
            segment_first.expect("a segment is open"),
            offset,
            &blocks[..records_bytes],
            tracks_texts,
        );
        {
            let mut log = self.state.borrow_mut();
            let segment = log.segment.as_mut().expect("a segment is open");
            segment.length += padded as u64;
            segment.text_record_bytes += text_record_bytes;
            log.log_bytes += padded as u64;
            log.next_sequence = last_sequence + 1;
        }
        let mut stats = self.stats.get();
        let records_written = last_sequence + 1 - first_sequence;
        stats.flushes += 1;
        stats.records += records_written;
        stats.records_max = stats.records_max.max(records_written);
        stats.bytes += records_bytes as u64;
        let duration_us = started.elapsed().as_micros() as u64;
        stats.duration_buckets[latency_bucket(duration_us)] += 1;
        stats.duration_sum_us += duration_us;
        self.stats.set(stats);
        // Another task's write or sync failed while this one was in flight: fail-stop.
        self.check_failed()?;
        self.made_durable(last_sequence);
        Ok(true)
    }

    /// Notes where the text records of a flush of `records` at `offset` of the segment that
    /// starts at sequence `segment` landed, for the state when it `tracks_texts` (and, in
    /// tests, for `take_written_texts` whatever it tracks). Answers their bytes when it
    /// `tracks_texts` (0 when not: not counted).
    fn note_texts(&self, segment: u64, offset: u64, records: &[u8], tracks_texts: bool) -> u64 {
        if !tracks_texts && !cfg!(test) {
            return 0;
        }
        let mut text_record_bytes = 0;
        for text in text_records(records) {
            let record_offset = offset + text.at as u64;
            let locator =
                TextLocator::new(TextFile::Segment(segment), record_offset, text.bytes as u32);
            #[cfg(test)]
            self.written_texts.borrow_mut().push(WrittenText {
                slot: text.slot,
                generation: text.generation,
                sequence: text.sequence,
                locator,
                record: bytes::Bytes::copy_from_slice(&records[text.at..][..text.bytes]),
            });
            if !tracks_texts {
                continue;
            }
            text_record_bytes += text.bytes as u64;
            let noted = TextWritten {
                slot: text.slot,
                generation: text.generation,
                sequence: text.sequence,
                locator,
            };
            self.unnoted_texts.borrow_mut().push(noted);
        }
        text_record_bytes
    }

    /// The path of `file`, a segment or a snapshot of this log's.
    pub fn text_path(&self, file: TextFile) -> PathBuf {
        self.directory.join(match file {
            TextFile::Segment(first_sequence) => segment_name(first_sequence),
            TextFile::Snapshot(replay_from) => snapshot_name(replay_from),
        })
    }

    /// Where the text records written since the last call landed, in the order written.
    #[cfg(test)]
    pub fn take_written_texts(&self) -> Vec<WrittenText> {
        self.written_texts.take()
    }

    /// Whether `file` is still the log's (a segment open, or closed and not yet given up to a
    /// snapshot; the snapshot in place): a locator into any other is stale.
    #[cfg(test)]
    pub fn holds_file(&self, file: TextFile) -> bool {
        let log = self.state.borrow();
        match file {
            TextFile::Segment(first_sequence) => {
                log.segment
                    .as_ref()
                    .is_some_and(|segment| segment.first_sequence == first_sequence)
                    || log
                        .segments
                        .iter()
                        .chain(&log.kept)
                        .any(|segment| segment.first_sequence == first_sequence)
            }
            TextFile::Snapshot(_) => log
                .snapshot
                .as_ref()
                .is_some_and(|(path, _)| *path == self.text_path(file)),
        }
    }

    /// The segments before the replay point that the snapshot in place keeps (first
    /// sequences, oldest first).
    #[cfg(test)]
    pub fn kept_segments(&self) -> Vec<u64> {
        let log = self.state.borrow();
        log.kept
            .iter()
            .map(|segment| segment.first_sequence)
            .collect()
    }

    /// Of `kept_segments`, those the snapshot in place kept only for want of room to copy
    /// their texts (since this log started).
    #[cfg(test)]
    pub fn held_segments(&self) -> Vec<u64> {
        let log = self.state.borrow();
        log.held.clone()
    }

    /// Whether a snapshot is being encoded (begun and not yet in place).
    #[cfg(test)]
    pub fn encoding(&self) -> bool {
        self.state.borrow().encoding_from.is_some()
    }

    /// Syncs what `Durability::Write` has written since the last sync.
    pub async fn sync_in_background(&self) -> io::Result<()> {
        self.check_failed()?;
        let segment = {
            let mut log = self.state.borrow_mut();
            if !std::mem::take(&mut log.unsynced) {
                return Ok(());
            }
            log.segment
                .as_ref()
                .map(|segment| (segment.file.clone(), segment.length))
        };
        if let Some((file, length)) = segment {
            self.segment_sync(&file).await?;
            self.mark_synced(&file, length);
        }
        Ok(())
    }

    /// Syncs the open segment whatever the background sync is doing (it may have taken the
    /// `unsynced` flag for a sync still in flight), for `Durability::Write` before a segment is
    /// closed or a snapshot replaces the last one.
    ///
    /// It fails once any write or sync of the log has failed, before and after its own sync: a
    /// sync that failed elsewhere may have dropped the data it covered (Linux marks such pages
    /// clean), so this sync can succeed with nothing left to write, and the segment rotation or
    /// snapshot that asked for it would then make a damaged log look whole.
    async fn sync_current(&self) -> io::Result<()> {
        self.check_failed()?;
        let segment = {
            let mut log = self.state.borrow_mut();
            log.unsynced = false;
            log.segment
                .as_ref()
                .map(|segment| (segment.file.clone(), segment.length))
        };
        if let Some((file, length)) = segment {
            self.segment_sync(&file).await?;
            self.mark_synced(&file, length);
        }
        Ok(())
    }

    /// Syncs the open segment's `file`, one such sync at a time, and marks the log failed before
    /// the next may start if it failed. With `Durability::Write` three tasks sync the segment
    /// (the background sync, a flush's sync before a long write, a rotation's or snapshot's
    /// `sync_current`): were two in flight, the later could succeed over what the earlier's
    /// failure dropped and its task run on before the failure was seen (completion order is not
    /// the order tasks are polled in), making a damaged log look whole.
    async fn segment_sync(&self, file: &Rc<D::File>) -> io::Result<()> {
        poll_fn(|context| {
            let mut log = self.state.borrow_mut();
            if log.syncing {
                self.sync_waiters.borrow_mut().push(context.waker().clone());
                Poll::Pending
            } else {
                log.syncing = true;
                Poll::Ready(())
            }
        })
        .await;
        let _turn = SyncTurn { log: self };
        self.check_failed()?;
        let synced = self.disk.sync(file).await;
        self.failed_on_error(synced)?;
        // A write that failed meanwhile counts as much.
        self.check_failed()
    }

    /// Records that `file`'s first `length` bytes are synced, if it is still the open segment.
    fn mark_synced(&self, file: &Rc<D::File>, length: u64) {
        let mut log = self.state.borrow_mut();
        if let Some(segment) = log
            .segment
            .as_mut()
            .filter(|segment| Rc::ptr_eq(&segment.file, file))
        {
            segment.synced_length = segment.synced_length.max(length);
        }
    }

    /// An error once a write or sync has failed: fail-stop, nothing later is acknowledged.
    fn check_failed(&self) -> io::Result<()> {
        if self.state.borrow().failed {
            return Err(io::Error::other(
                "an earlier write or sync of this log failed",
            ));
        }
        Ok(())
    }

    /// Passes `result` on, marking the log failed when it is an error.
    fn failed_on_error<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if result.is_err() {
            self.state.borrow_mut().failed = true;
        }
        result
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
        if self.durability == Durability::Write {
            self.sync_current().await?;
        }
        // The closed segment cut to its records: the tail its last flush did not fit in (up to
        // `LOG_FLUSH_BYTES_MAX`, a quarter of a segment) is given back now, not when the
        // segment goes. Its records are synced, and a power cut before the cut is durable
        // leaves zeros after them, as every closed segment had before.
        let closing = self
            .state
            .borrow()
            .segment
            .as_ref()
            .map(|open| (open.path.clone(), open.length));
        let cut = match closing {
            Some((path, length)) => Some(self.cut_to(&path, length).await?),
            None => None,
        };
        // Whole under a temporary name (preallocated, its header synced), then renamed, the
        // directory synced: a segment under its name always has its header, and its name is
        // durable before any record in it is acknowledged.
        let temporary = self.directory.join(SEGMENT_TEMPORARY_NAME);
        let path = self.directory.join(segment_name(first_sequence));
        let file = self.disk.create(&temporary, self.segment_bytes).await?;
        let header = segment_header(self.shard, self.id_prefix, first_sequence);
        self.disk.write_at(&file, 0, &header).await?;
        self.disk.sync(&file).await?;
        self.disk.rename(&temporary, &path).await?;
        let mut log = self.state.borrow_mut();
        if let Some(old) = log.segment.take() {
            log.segments.push(SegmentFile {
                first_sequence: old.first_sequence,
                path: old.path,
                bytes: old.length,
                allocated_bytes: cut.expect("cut as it closed").max(old.length),
                text_record_bytes: Some(old.text_record_bytes),
            });
        }
        log.segment = Some(OpenSegment {
            file: Rc::new(file),
            path,
            first_sequence,
            length: STORAGE_BLOCK_BYTES as u64,
            synced_length: STORAGE_BLOCK_BYTES as u64,
            text_record_bytes: 0,
        });
        log.log_bytes += STORAGE_BLOCK_BYTES as u64;
        Ok(())
    }

    /// Cuts the file at `path` to `length` where it is longer, and syncs it: its length after.
    /// `Disk::shrink` cuts by so many bytes, so the file's length is asked first (a shrink by
    /// none): a segment is not always its preallocated size (a file system without fallocate
    /// grows it as it is written, and a batch can overrun it).
    async fn cut_to(&self, path: &Path, length: u64) -> io::Result<u64> {
        let now = self.disk.shrink(path, 0).await?;
        if now > length {
            self.disk.shrink(path, now - length).await
        } else {
            Ok(now)
        }
    }

    /// Bytes the shard's files take on disk (`--max-disk`, `azq_disk_bytes`): every segment as
    /// allocated (the open one preallocated to the segment size, or longer when a batch overran
    /// it; closed ones cut to their records as the log closed them), the
    /// snapshot, what a snapshot being written has written so far, and what remains of the files
    /// the last one replaced. Known from the log's own bookkeeping, without a system call.
    pub fn disk_bytes(&self) -> u64 {
        let log = self.state.borrow();
        // Segments recovery read were cut to their records, and so were the ones this log
        // closed (`allocated_bytes`). Counting every closed segment as preallocated once made
        // restarts, each closing a small segment, add up to a share no delete could free.
        let closed: u64 = log
            .segments
            .iter()
            .chain(&log.kept)
            .map(|segment| segment.allocated_bytes)
            .sum();
        let open = log
            .segment
            .as_ref()
            .map_or(0, |segment| segment.length.max(self.segment_bytes));
        let snapshot = log.snapshot.as_ref().map_or(0, |(_, bytes)| *bytes);
        closed + open + snapshot + log.snapshot_temporary_bytes + log.removing_bytes
    }

    /// The disk rule (`storage::space`) for `state` under `limits`, the file system as last
    /// measured being `space`, keeping room for what a snapshot writes (`snapshot_bytes_max`)
    /// and, of the texts it names, `DISK_COMPACTION_BYTES`: why the shard must refuse growth,
    /// or `None`. The engine's disk watch asks after every flush, and sets the state's refusal
    /// by the answer. Notes for the snapshots to come what the shard's files must shrink by for
    /// a refusal to end (`Refusal::short_bytes`; 0 without one: a snapshot that frees that much
    /// is due, `snapshot_due`) and what a snapshot may copy beyond `snapshot_bytes_max`
    /// (`space::copy_budget`: the texts it copies from segments it would give up take at most
    /// that, and it keeps the others, `segments_to_keep`; unlimited until told).
    pub fn watch_space(
        &self,
        state: &ShardState,
        limits: &DiskLimits,
        space: Option<Space>,
    ) -> Option<Refusal> {
        let disk_bytes = self.disk_bytes();
        let snapshot_bytes = self.snapshot_bytes_max(state);
        // Room to compact a segment too, where texts are named (so never more than all that is
        // stored, as the rule kept before texts were named); a snapshot may copy into it.
        let named_bytes = state.stored_bytes() - snapshot_bytes;
        let room = snapshot_bytes + named_bytes.min(DISK_COMPACTION_BYTES);
        let refusal = space::refusal(limits, disk_bytes, room, space, state.disk_full());
        let budget = space::copy_budget(limits, disk_bytes, snapshot_bytes, space);
        self.copy_budget.set(budget);
        self.short_bytes
            .set(refusal.as_ref().map_or(0, Refusal::short_bytes));
        refusal
    }

    /// Sets what the shard's files must shrink by for a refusal to end, as `watch_space` does.
    #[cfg(test)]
    pub fn set_short_bytes(&self, short_bytes: u64) {
        self.short_bytes.set(short_bytes);
    }

    /// At most what a snapshot of `state` writes when it keeps every segment before its
    /// replay point that holds texts on disk only (as it does with no copy budget,
    /// `segments_to_keep`), beside its header, trailer and the accounts' service properties:
    /// everything stored at its charge (a copied message's entry takes at most its charge, a
    /// named one's at most `MESSAGE_OVERHEAD_BYTES`: a charge without its text), but the texts
    /// on disk only in segments, which it names, less those in the segments not wholly before
    /// its replay point, which it copies (at most their records' bytes). For a snapshot begun
    /// now that is the last segment: the open one, or with none open yet (a start opens one at
    /// its first write) the last closed one. While one is being encoded, it is every segment
    /// from the one its replay point is in: it copies the texts of the messages put since,
    /// once they are on disk only (found by helper-65's review: counted only while in the open
    /// segment, they left the room as it rotated, and a snapshot wrote 12 MB against a room of
    /// 1 MB); before its tally has chosen, also every text evicted to a segment since it began
    /// (it may give that segment up, tallied while the text was in memory: helper-67's review);
    /// and once its tally has chosen the segments it names, every other (it copies the texts
    /// evicted there while it runs, which were in memory, so counted whole, when it began:
    /// helper-65's doubt, helper-66's review). Its disk limits keep room for this
    /// (`storage::space`), not for everything stored: a backlog whose texts are on disk only
    /// costs a snapshot a few bytes a message.
    pub fn snapshot_bytes_max(&self, state: &ShardState) -> u64 {
        let in_segments = state.texts_evicted_in_segments();
        let log = self.state.borrow();
        let open_bytes = log.segment.as_ref().map_or(0, |segment| segment.length);
        if let Some(named) = &log.encoding_names {
            let copied_bytes: u64 = log
                .kept
                .iter()
                .chain(&log.segments)
                .filter(|segment| named.binary_search(&segment.first_sequence).is_err())
                .map(|segment| segment.bytes)
                .sum::<u64>()
                + open_bytes;
            return state.stored_bytes() - in_segments + in_segments.min(copied_bytes);
        }
        let (replay_from, evicted_total) = log.encoding_from.unwrap_or((u64::MAX, u64::MAX));
        // Until its tally has chosen, the texts evicted since it began may be in segments it
        // will give up, tallied before they left memory: counted as copied (helper-67's review
        // of cd86053: dropped as named, they let puts pass the share by 112 MB).
        let evicted_since = state
            .texts_evicted_to_segments_total()
            .saturating_sub(evicted_total);
        let copied_bytes: u64 = log
            .closed_segments_before(replay_from)
            .filter(|&(_, before)| !before)
            .map(|(segment, _)| segment.bytes)
            .sum::<u64>()
            + open_bytes
            + evicted_since;
        state.stored_bytes() - in_segments + in_segments.min(copied_bytes)
    }

    /// Whether a snapshot is due and none is running (`snapshot_due`, or owed: `snapshot_owed`).
    pub fn wants_snapshot(&self, state: &RefCell<ShardState>) -> bool {
        let log = self.state.borrow();
        let state = state.borrow();
        let sizes = Sizes {
            log_bytes: log.log_bytes,
            closed_log_bytes: log.segments.iter().map(|segment| segment.bytes).sum(),
            closed_allocated_bytes: log
                .segments
                .iter()
                .map(|segment| segment.allocated_bytes)
                .sum(),
            snapshot_charged_bytes: log.snapshot_charged_bytes,
            kept_dead_bytes: log.kept_dead_bytes,
            small_closed_segments: log
                .segments
                .iter()
                .filter(|segment| small(segment.bytes, self.segment_bytes))
                .count(),
            message_bytes: state.message_bytes(),
            stored_bytes: state.stored_bytes(),
            refusing: state.disk_full(),
            short_bytes: self.short_bytes.get(),
        };
        // The copy budget now covers what is left of a segment the last snapshot held for
        // want of room: the next one copies it and lets it go (it was kept whole). What is left
        // is counted now: the figure its tally found only falls as messages there die, and a
        // held segment drained since would wait for another rule (helper-66's review).
        let held_copyable = log
            .held
            .iter()
            .map(|&first| state.segment_text_record_bytes(first))
            .min()
            .is_some_and(|live| live <= self.copy_budget.get());
        !log.snapshotting
            && (log.snapshot_owed || snapshot_due(sizes, self.segment_bytes) || held_copyable)
    }

    /// Whether a snapshot now would give back enough of the segments before its replay point that
    /// it is due, however much is stored. It gives up those no longer mostly live (`mostly_live`,
    /// as its tally will find them) whose texts on disk only fit the copy budget (smallest first,
    /// as `segments_to_keep` spends it): the segments the snapshot in place keeps, and the closed
    /// ones the running log wrote, which free beyond every text record written there (copied if
    /// still in memory; the rest is padding, leases, deletes), or recovery read with texts located,
    /// which free as kept ones do (every live text there was on disk only at the start), less the
    /// texts read back from there and still live in memory (`segment_read_back_bytes`: the snapshot
    /// writes them again; counted dead, a reader passing through a kept segment made a rewrite of
    /// what it read due). Due when that reaches a segment, `SNAPSHOT_DEAD_BYTES_PER_MESSAGE` a
    /// message stored (its pass over them all), what the snapshot would copy (every message but
    /// those named in segments, at its charge: the texts in memory and in the snapshot in place are
    /// written again, with their entries), and the snapshot in place (named entries of leased
    /// messages are not a few bytes), so that it frees at least about what it writes. A drain in
    /// order kills the kept segments one after the other and writes a log of its own, mostly
    /// padding (each small flush of Gets and Deletes takes a block); `wants_snapshot`'s rules let
    /// both stay until about a third of the store had gone, about 3 times the texts left on disk.
    /// Only while texts are tracked (else nothing is kept).
    /// Not one of `wants_snapshot`'s rules: it looks up every segment (hundreds for 100 M
    /// messages), so the shard asks it every `DISK_SAMPLE_INTERVAL_MS`, not after every flush.
    pub fn dead_segments_due(&self, state: &RefCell<ShardState>) -> bool {
        let log = self.state.borrow();
        let state = state.borrow();
        if log.snapshotting || !state.tracks_texts() {
            return false;
        }
        let kept = log.kept.iter().map(|segment| (segment, None));
        let closed = log
            .closed_segments_before(u64::MAX)
            .filter(|&(_, before)| before)
            .filter_map(|(segment, _)| Some((segment, Some(segment.text_record_bytes?))));
        let read_back = state.segment_read_back_bytes();
        let mut dying = Vec::new();
        for (segment, written) in kept.chain(closed) {
            if log.held.binary_search(&segment.first_sequence).is_ok() {
                continue;
            }
            let live = state.segment_text_record_bytes(segment.first_sequence);
            if !mostly_live(live, segment, self.segment_bytes) {
                // The texts read back from here and still in memory are written again.
                let in_memory = read_back(segment.first_sequence);
                let kept_back = live.saturating_add(in_memory).max(written.unwrap_or(0));
                dying.push((live, segment.allocated_bytes.saturating_sub(kept_back)));
            }
        }
        let (given_up, _) = spend_copy_budget(dying, self.copy_budget.get());
        let dead = given_up
            .into_iter()
            .fold(0u64, |dead, freed| dead.saturating_add(freed));
        let work = state
            .totals()
            .1
            .saturating_mul(SNAPSHOT_DEAD_BYTES_PER_MESSAGE);
        // What the snapshot copies, about: what is stored but the messages whose texts are on
        // disk only in segments (named in a few bytes each), at their charge. Every other
        // message is written whole again, text and entry, those whose texts are on disk only
        // in the snapshot in place too (the file is replaced): left out, a backlog held there
        // was written again for each segment of leases that died, 16 times the log freed with
        // texts of 60,000 bytes (helper-82's review), and its entries alone 14 times with
        // texts of 1 byte (helper-83's).
        let named = state.texts_evicted_in_segments().saturating_add(
            state
                .texts_evicted_in_segments_count()
                .saturating_mul(MESSAGE_OVERHEAD_BYTES as u64),
        );
        let copied = state.stored_bytes().saturating_sub(named);
        // And the snapshot in place, as far as what is stored now (whose charge is at least its
        // encoding): the next one writes about as much, less what has died since. A message
        // named in a segment once leased takes a whole entry there (`MessageNamed`, about 100
        // bytes), not a few: with texts of 1 byte leased and named, a snapshot wrote 5 times
        // the log it freed (helper-84's review of 69d5923).
        let snapshot = log.snapshot.as_ref().map_or(0, |(_, bytes)| *bytes);
        let rewritten = snapshot.min(state.stored_bytes());
        dead >= self.segment_bytes.max(work).max(copied).max(rewritten)
    }

    /// Starts a snapshot of `state` as it is now.
    pub async fn start_snapshot(&self, state: &RefCell<ShardState>) -> io::Result<SnapshotJob<D>> {
        self.check_failed()?;
        let (identity, replay_from) = {
            let state = state.borrow();
            let replay_from = state
                .journal_next_sequence()
                .expect("a durable shard journals");
            (state.identity(), replay_from)
        };
        {
            let mut log = self.state.borrow_mut();
            log.snapshotting = true;
            let evicted_total = state.borrow().texts_evicted_to_segments_total();
            log.encoding_from = Some((replay_from, evicted_total));
        }
        // What it may copy and what it is charged are taken now, with what the room counts
        // from: taken after its file is created (I/O, requests served meanwhile), texts read
        // back in between were in neither, and it copied them past the room kept when it began.
        let on_disk_at_start = state.borrow().text_record_bytes_by_segment().clone();
        let copy_budget = self.copy_budget.get();
        let delivers = state.borrow_mut().begin_snapshot(replay_from);
        // Texts are tallied for segments to keep only when they may stay on disk. A snapshot
        // of the same replay point names texts in kept segments too: only the file it replaces
        // under its name goes from under the texts there.
        let tallies = state.borrow().tracks_texts();
        let path = self.directory.join(SNAPSHOT_TEMPORARY_NAME);
        let file = self.failed_on_error(self.disk.create(&path, 0).await)?;
        let mut pending = BytesMut::with_capacity(1 << 20);
        pending.put_slice(&snapshot_header(self.shard, &identity, replay_from));
        Ok(SnapshotJob {
            started: Instant::now(),
            file,
            pending,
            written: 0,
            encoded: Encoded::default(),
            replay_from,
            reflects_until: None,
            phase: if tallies {
                Phase::Tally(0)
            } else {
                Phase::Queues(None)
            },
            tally: HashMap::new(),
            on_disk_at_start,
            naming: Naming::default(),
            copy_budget,
            held: Vec::new(),
            recorded: Vec::new(),
            delivers,
            step_end: 0,
        })
    }

    /// The segments a snapshot whose replay starts at `replay_from` keeps for the texts on
    /// disk only there (`tally`: the bytes of their records by segment, `tally_texts_on_disk`),
    /// ascending: those wholly before the replay point (closed, or kept by the snapshot in
    /// place) whose records of those texts take at least two thirds of what they take on disk
    /// (`SEGMENT_KEPT_LIVE_SHARE_MIN`), and that are not small (`SEGMENT_SMALL_SHARE`: at
    /// least half full, as `snapshot_due` counts them). The texts in any other are copied, so
    /// a segment mostly dead goes with the snapshot that copies what is left of it, and the
    /// small segment each restart closes goes with the next snapshot: kept, small ones would
    /// pile up restart after restart, out of reach of the rule that snapshots when small closed
    /// segments pile up.
    ///
    /// But it copies texts only within `copy_budget` (`watch_space`'s when the snapshot began),
    /// the segments whose records take least first (the most dead, the most freed for what is
    /// copied): it keeps the others with texts on disk only too, as the disk limits assume
    /// (`snapshot_bytes_max`), so that a snapshot never copies more than the disk can take.
    /// A segment is charged the records of the texts on disk only there when it began
    /// (`on_disk_at_start`): those the budget is for, whether still on disk or read back since
    /// (reads are never refused: charged what the tally found, texts read back before it were
    /// copied past the room the rule kept and the budget, helper-69's review). A text in memory
    /// then is in the room, copied whole (`snapshot_bytes_max`), evicted since or not
    /// (helper-68's review: charged the tally's figure, texts of a held segment read back made
    /// a snapshot due, went back to disk before its tally, and it held the segment again, each
    /// read-back a snapshot that freed nothing). A segment with none on disk only at the tally
    /// but some when it began is charged so too (texts read back and homed there are named if
    /// it is kept); one it keeps with none named goes when the snapshot is in place. So are
    /// texts read back while it runs with no home where eviction looks, where the read found
    /// them: a text read ahead and held (`HeldText::read_at`), and one read for a request not
    /// yet answered (`ShardState::texts_serving`); once answered, its home in a segment is
    /// noted even if its wait was named before the snapshot began. Copied whole, they passed
    /// the room kept when it began (helper-70's review of e33820d, helper-71's of 0d8d744).
    /// Answers the segments it keeps, ascending, and of those the ones kept for want of room.
    fn segments_to_keep(
        &self,
        replay_from: u64,
        tally: &HashMap<u64, u64>,
        on_disk_at_start: &HashMap<u64, u64>,
        copy_budget: u64,
    ) -> (Vec<u64>, Vec<u64>) {
        let log = self.state.borrow();
        let before = log
            .closed_segments_before(replay_from)
            .filter(|&(_, before)| before)
            .map(|(segment, _)| segment);
        let (mut kept, mut given_up) = (Vec::new(), Vec::new());
        for segment in log.kept.iter().chain(before) {
            let live = tally.get(&segment.first_sequence).copied().unwrap_or(0);
            let at_start = on_disk_at_start
                .get(&segment.first_sequence)
                .copied()
                .unwrap_or(0);
            if live == 0 && at_start == 0 {
                continue;
            }
            if mostly_live(live, segment, self.segment_bytes) {
                kept.push(segment.first_sequence);
            } else {
                given_up.push((at_start, segment.first_sequence));
            }
        }
        let (_, mut held) = spend_copy_budget(given_up, copy_budget);
        kept.extend(&held);
        kept.sort_unstable();
        held.sort_unstable();
        (kept, held)
    }

    /// A snapshot of `bytes`, whose records hold `charged` bytes of what is stored
    /// (`Encoded`), and whose entries name records in the segments `named` lists (with the
    /// bytes of those records), is whole and synced: it replaces the last one. Returns the
    /// files it makes unnecessary (the older snapshot, the segments it covers and does not
    /// keep, the segments the last one kept and it does not) with their sizes, for
    /// `remove_step` to free. `held`: the segments it keeps only for want of room to copy
    /// their texts, ascending (`segments_to_keep`).
    async fn replace_snapshot(
        &self,
        replay_from: u64,
        bytes: u64,
        charged: u64,
        named: &std::collections::BTreeMap<u64, u64>,
        held: &[u64],
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        let temporary = self.directory.join(SNAPSHOT_TEMPORARY_NAME);
        let path = self.directory.join(snapshot_name(replay_from));
        self.disk.rename(&temporary, &path).await?;
        // A snapshot of the same replay point took the name of the one in place: chunks read
        // from that one are not its.
        self.read_cache
            .borrow_mut()
            .forget(TextFile::Snapshot(replay_from));
        let mut log = self.state.borrow_mut();
        log.snapshot_temporary_bytes = 0;
        log.snapshot_charged_bytes = charged;
        log.snapshot_owed = false;
        let mut removable = Vec::new();
        if let Some(old) = log.snapshot.replace((path, bytes)) {
            // A snapshot of the same replay point has the same name: it was just replaced.
            if old.0.file_name().and_then(|name| name.to_str()) != Some(&snapshot_name(replay_from))
            {
                removable.push(old);
            }
        }
        // A closed segment can go when the next one starts at or before the replay point (those
        // are the first ones).
        let before = log
            .closed_segments_before(replay_from)
            .take_while(|&(_, before)| before)
            .count();
        let log = &mut *log;
        log.kept.extend(log.segments.drain(..before));
        // Of the segments before the replay point, those its entries name stay.
        let (kept, given_up): (Vec<_>, Vec<_>) = std::mem::take(&mut log.kept)
            .into_iter()
            .partition(|segment| named.contains_key(&segment.first_sequence));
        removable.extend(
            given_up
                .into_iter()
                .map(|segment| (segment.path, segment.allocated_bytes)),
        );
        // What the segments kept as mostly live hold beyond the records named there; those held
        // for want of room go with the snapshot due once the budget covers them
        // (`wants_snapshot`).
        let mostly_live = |first: &u64| held.binary_search(first).is_err();
        let kept_bytes: u64 = kept
            .iter()
            .filter(|segment| mostly_live(&segment.first_sequence))
            .map(|segment| segment.allocated_bytes)
            .sum();
        let named_bytes: u64 = named
            .iter()
            .filter(|(first, _)| mostly_live(first))
            .map(|(_, bytes)| bytes)
            .sum();
        log.kept_dead_bytes = kept_bytes.saturating_sub(named_bytes);
        log.held = held
            .iter()
            .copied()
            .filter(|first| named.contains_key(first))
            .collect();
        log.encoding_from = None;
        log.encoding_names = None;
        log.kept = kept;
        log.log_bytes = log
            .segments
            .iter()
            .map(|segment| segment.bytes)
            .sum::<u64>()
            + log.segment.as_ref().map_or(0, |segment| segment.length);
        log.removing_bytes = removable.iter().map(|(_, bytes)| bytes).sum();
        Ok(removable)
    }
}

/// Where a snapshot job is.
enum Phase {
    /// Adding up, from the given slot, the bytes of the texts on disk only by segment, to
    /// choose the segments to keep (`Log::segments_to_keep`).
    Tally(u32),
    /// Encoding queues, after the given one.
    Queues(Option<QueueKey>),
    /// Encoding message slots from the given one.
    Messages(u32),
    /// Everything is encoded, the snapshot in place: freeing the files it replaced, the next
    /// first (their paths, and their sizes as the log counts them).
    Removing(Vec<(PathBuf, u64)>),
}

/// A snapshot being written, a step at a time.
pub struct SnapshotJob<D: Disk> {
    /// When it started, for the log's stats.
    started: Instant,
    file: D::File,
    /// Encoded bytes not written yet (less than a block once a step is done).
    pending: BytesMut,
    /// Bytes of the file written.
    written: u64,
    /// The records encoded so far.
    encoded: Encoded,
    replay_from: u64,
    /// The journal's next sequence when the last step encoded the state.
    reflects_until: Option<u64>,
    phase: Phase,
    /// The bytes of the records of texts on disk only, by segment (`Phase::Tally`).
    tally: HashMap<u64, u64>,
    /// The same when it began, counted as texts went to disk or left
    /// (`ShardState::text_record_bytes_by_segment`): what copying a segment takes from the copy
    /// budget (`Log::segments_to_keep`).
    on_disk_at_start: HashMap<u64, u64>,
    /// The segments whose records it names instead of copying their texts, once tallied, and
    /// what it named there.
    naming: Naming,
    /// The copy budget when it began (`Log::watch_space`): the one it was found due with (a
    /// budget that changed since would not copy the held segments it was due for).
    copy_budget: u64,
    /// Of those segments, the ones it keeps only because copying their texts would pass the
    /// copy budget (`Log::segments_to_keep`): their dead bytes are not counted as a snapshot's
    /// to free (`LogState::kept_dead_bytes`), or each snapshot would be due again at once.
    held: Vec<u64>,
    /// The texts encoded, where in the file, and which records wrote them, when the state
    /// tracks texts: their homes once the snapshot is in place (`ShardState::note_snapshot`, a
    /// step of `SNAPSHOT_REHOME_STEP_TEXTS` at a time).
    recorded: Vec<TextWritten>,
    /// Whether the texts on disk only that it records come back into memory (`read_back`), as
    /// they must when it replaces the snapshot in place under the same name
    /// (`ShardState::begin_snapshot`); else it reads them only to encode them
    /// (`read_to_encode`).
    delivers: bool,
    /// Where the messages' step under way ends (`ShardState::snapshot_step_end`): its texts are
    /// read, then encoded, over the same slots.
    step_end: u32,
}

impl<D: Disk> SnapshotJob<D> {
    /// Encodes and writes one bounded step, or frees one step of the files the snapshot
    /// replaced; `Ok(true)` once the snapshot is whole, synced and in place, and those files are
    /// gone.
    pub async fn step(&mut self, log: &Log<D>, state: &RefCell<ShardState>) -> io::Result<bool> {
        log.check_failed()?;
        if matches!(self.phase, Phase::Removing(_)) && !self.recorded.is_empty() {
            // In place: the texts it recorded may leave memory to its entries, a bounded step
            // at a time, before any file it replaced is freed.
            let from = self
                .recorded
                .len()
                .saturating_sub(SNAPSHOT_REHOME_STEP_TEXTS);
            let step = self.recorded.split_off(from);
            state.borrow_mut().note_snapshot(self.replay_from, &step);
            if self.recorded.is_empty() {
                self.recorded = Vec::new();
            }
            return Ok(false);
        }
        let stepped = match &mut self.phase {
            Phase::Removing(files) => remove_step(files, log).await,
            _ => self.encode_and_write(log, state).await.map(|()| false),
        };
        if let Ok(true) = stepped {
            let mut stats = log.stats.get();
            stats.snapshots += 1;
            stats.snapshot_bytes += self.written;
            stats.snapshot_duration_us += self.started.elapsed().as_micros() as u64;
            log.stats.set(stats);
        }
        log.failed_on_error(stepped)
    }

    /// The files the snapshot replaced that it still keeps whole because texts on disk only may
    /// be there, until it has pointed every text it recorded at its entries (`step`): their
    /// paths, none before it is in place nor once it frees them.
    #[cfg(test)]
    pub fn replaced_files_kept(&self) -> Vec<PathBuf> {
        match &self.phase {
            Phase::Removing(files) if !self.recorded.is_empty() => {
                files.iter().map(|(path, _)| path.clone()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// The body of `step` until the snapshot is in place.
    async fn encode_and_write(
        &mut self,
        log: &Log<D>,
        state: &RefCell<ShardState>,
    ) -> io::Result<()> {
        if let Phase::Tally(from) = self.phase {
            let end = from
                .saturating_add(SNAPSHOT_TALLY_STEP_SLOTS)
                .min(state.borrow().slab_slots());
            state
                .borrow()
                .tally_texts_on_disk(from..end, &mut self.tally);
            self.phase = if end >= state.borrow().slab_slots() {
                let tally = std::mem::take(&mut self.tally);
                (self.naming.segments, self.held) = log.segments_to_keep(
                    self.replay_from,
                    &tally,
                    &self.on_disk_at_start,
                    self.copy_budget,
                );
                log.state.borrow_mut().encoding_names = Some(self.naming.segments.clone());
                Phase::Queues(None)
            } else {
                Phase::Tally(end)
            };
            return Ok(());
        }
        let (read, delivered) = match self.phase {
            Phase::Messages(from) => {
                let end = state.borrow().snapshot_step_end(
                    from,
                    SNAPSHOT_STEP_SLOTS,
                    SNAPSHOT_STEP_TEXT_BYTES,
                );
                self.step_end = end;
                let slots = from..end;
                // Held until encoded, so that the reads end (`ShardState::hold_texts`).
                state.borrow_mut().hold_texts(slots.clone());
                let read = if self.delivers {
                    read_back(log, state, slots, &self.naming)
                        .await
                        .map(|delivered| (TextsRead::new(), delivered))
                } else {
                    read_to_encode(log, state, slots, &self.naming)
                        .await
                        .map(|read| (read, Vec::new()))
                };
                if read.is_err() {
                    state.borrow_mut().release_texts();
                }
                read?
            }
            _ => Default::default(),
        };
        // Nothing awaited from here until the step is encoded: the texts read are those of the
        // slots' texts on disk only.
        {
            let state = state.borrow();
            match &self.phase {
                Phase::Queues(after) => {
                    let last = state.snapshot_queues(
                        after.as_ref(),
                        SNAPSHOT_STEP_SLOTS as usize,
                        &mut self.pending,
                        &mut self.encoded,
                    );
                    self.phase = match last {
                        Some(last) => Phase::Queues(Some(last)),
                        None => {
                            state.snapshot_settings(&mut self.pending, &mut self.encoded);
                            Phase::Messages(0)
                        }
                    };
                }
                Phase::Messages(from) => {
                    let end = self.step_end;
                    let before = self.pending.len();
                    let (pending, encoded) = (&mut self.pending, &mut self.encoded);
                    let naming = &mut self.naming;
                    state.snapshot_messages(*from..end, &read, naming, pending, encoded);
                    if state.tracks_texts() {
                        let file = TextFile::Snapshot(self.replay_from);
                        let at = self.written + before as u64;
                        for text in text_records(&self.pending[before..]) {
                            let Some(sequence) = state.text_sequence(text.slot, text.generation)
                            else {
                                continue;
                            };
                            let offset = at + text.at as u64;
                            self.recorded.push(TextWritten {
                                slot: text.slot,
                                generation: text.generation,
                                sequence,
                                locator: TextLocator::new(file, offset, text.bytes as u32),
                            });
                        }
                    }
                    self.phase = if end >= state.slab_slots() {
                        let kept: Vec<u64> = self.naming.named.keys().copied().collect();
                        self.pending
                            .put_slice(&snapshot_trailer(self.encoded.entries, &kept));
                        self.reflects_until = state.journal_next_sequence();
                        Phase::Removing(Vec::new())
                    } else {
                        Phase::Messages(end)
                    };
                }
                Phase::Removing(_) | Phase::Tally(_) => {
                    unreachable!("`step` frees the files; tallies are not encoded")
                }
            }
        }
        {
            // Encoded: the texts read back may leave memory again (`note_home`; those whose
            // records come before the snapshot's replay point are forgotten by the next
            // eviction).
            let mut state = state.borrow_mut();
            state.release_texts();
            for &(slot, generation, locator, sequence) in &delivered {
                state.note_home(slot, generation, locator, sequence);
            }
        }
        let done = matches!(self.phase, Phase::Removing(_));
        let whole = if done {
            let padded = self.pending.len().next_multiple_of(STORAGE_BLOCK_BYTES);
            self.pending.resize(padded, 0);
            padded
        } else {
            self.pending.len() / STORAGE_BLOCK_BYTES * STORAGE_BLOCK_BYTES
        };
        // Written and synced `SNAPSHOT_SYNC_BYTES` at a time, so the device takes the snapshot
        // a little at a time: a log flush, whose sync waits for the writes the device has in
        // hand, then waits for one chunk, not for the whole snapshot at its end.
        let mut blocks = self.pending.split_to(whole);
        while !blocks.is_empty() {
            let chunk = blocks.split_to(blocks.len().min(SNAPSHOT_SYNC_BYTES));
            log.disk.write_at(&self.file, self.written, &chunk).await?;
            self.written += chunk.len() as u64;
            log.state.borrow_mut().snapshot_temporary_bytes = self.written;
            log.disk.sync(&self.file).await?;
        }
        if done {
            // The snapshot is fuzzy: it may show changes up to the last record emitted before
            // its last step, which replay from `replay_from` corrects only if the log holds
            // them. So they are synced before the snapshot replaces the last one: else a power
            // cut could leave a state that never was (some of those changes without earlier
            // ones), not a prefix of the log.
            if let Some(last) = self.reflects_until.and_then(|next| next.checked_sub(1)) {
                log.durable(last).await;
                if log.durability == Durability::Write {
                    log.sync_current().await?;
                }
            }
            let named = &self.naming.named;
            let removable = log
                .replace_snapshot(
                    self.replay_from,
                    self.written,
                    self.encoded.charged,
                    named,
                    &self.held,
                )
                .await?;
            // Its entries are homes from now on, and the records in the segments it keeps;
            // the next steps point the texts it recorded at them, before the files it replaced
            // are freed.
            let kept: Vec<u64> = named.keys().copied().collect();
            state.borrow_mut().place_snapshot(self.replay_from, &kept);
            self.phase = Phase::Removing(removable);
        }
        Ok(())
    }
}

/// Reads the texts, on disk only, of the live messages in `slots`, for the snapshot to encode
/// (`ShardState::snapshot_messages`): they stay on disk only, in files the log keeps until the
/// snapshot, in place, has pointed them at its entries (`ShardState::note_snapshot`). The step
/// holds those slots' texts in memory (`ShardState::hold_texts`), so none leaves memory while
/// it reads, and one read finds every text to encode. A text that cannot be read, or a record
/// that is not the one its locator names, fails the snapshot and with it the process
/// (fail-stop, as a failed write).
async fn read_to_encode<D: Disk>(
    log: &Log<D>,
    state: &RefCell<ShardState>,
    slots: std::ops::Range<u32>,
    naming: &Naming,
) -> io::Result<TextsRead> {
    let wanted = state.borrow().texts_to_copy(slots, naming);
    let texts = log.read_texts_for(wanted, Reading::Encode).await?;
    Ok(texts
        .into_iter()
        .map(|((slot, _, locator, _), text)| (slot, (locator, text)))
        .collect())
}

/// Reads back the texts, on disk only, of the live messages in `slots` (but those `naming`
/// names, which stay in the segments it keeps) and puts them in their slots, for a snapshot
/// that replaces the one in place under the same name: once renamed, it takes the place of the
/// file where their records may be (`ShardState::begin_snapshot`). As in `read_to_encode`, the
/// step holds those slots' texts in memory, so one read finds them all. A text delivered here
/// is not evictable again until the step has encoded it: answers
/// (slot, generation, locator, record sequence) of each, for `ShardState::note_home` then. A
/// text that cannot be read, or a record that is not the one its locator names, fails the
/// snapshot and with it the process (fail-stop, as a failed write).
async fn read_back<D: Disk>(
    log: &Log<D>,
    state: &RefCell<ShardState>,
    slots: std::ops::Range<u32>,
    naming: &Naming,
) -> io::Result<Vec<TextOnDisk>> {
    let wanted = state.borrow().texts_to_copy(slots, naming);
    let texts = log.read_texts_for(wanted, Reading::Keep).await?;
    let mut state = state.borrow_mut();
    let mut read = Vec::new();
    for (named, text) in texts {
        if state.deliver_text(named, text, false) {
            read.push(named);
        }
    }
    Ok(read)
}

/// What texts are read back for (`Log::read_texts_for`), which says how they are read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reading {
    /// For Gets and Peeks, and reads ahead of them: through the read cache (chunks read whole
    /// and kept where the backend reads past the page cache), each text copied out of its
    /// chunk, since it may stay in memory.
    Serve,
    /// For a snapshot step to encode, then drop: the texts of one file close together read as
    /// one span (`span_takes`), not through the read cache (a snapshot reads every text on
    /// disk once, which would push out the chunks Gets find there), each text a slice of its
    /// span, not copied.
    Encode,
    /// For a snapshot that replaces the one in place under its name, whose texts stay in
    /// memory (`read_back`): spans as `Encode`, each text copied out of its span.
    Keep,
}

/// Whether a span read for a snapshot step (`Reading::Encode`, `Reading::Keep`) that reaches
/// `span_end` takes the record at `offset`, `length` bytes long, as well: when the bytes
/// between them are fewer than `SNAPSHOT_READ_GAP_BYTES` and than the record's own (so a span
/// holds at most as many bytes between records as records, and a step's spans at most twice
/// its records). Records come sorted by offset; an offset before `span_end` (a record read
/// twice) is taken.
fn span_takes(span_end: u64, offset: u64, length: u32) -> bool {
    offset.saturating_sub(span_end) < (SNAPSHOT_READ_GAP_BYTES as u64).min(u64::from(length))
}

/// Where the bytes of one text read back come from (`Log::read_texts`).
enum Source {
    /// A chunk the cache held.
    Held(Bytes),
    /// The batch's read at this index, from this offset in it.
    Read(usize, usize),
}

impl<D: Disk> Log<D> {
    /// Reads the texts `wanted` names (slot, generation, locator, record sequence): each text
    /// with what named it, for `ShardState::deliver_text`, in the order of their records.
    /// Grouped by file, in batches `Disk::read_many` takes. Each record comes from a chunk the
    /// read cache holds, or from a chunk read whole and kept there (one read for every text in
    /// it), or, where no chunk may hold it whole (it crosses a chunk's end, or its file's end
    /// is not known to stay) or reads go through the page cache (`Disk::page_cached`), from a
    /// read of its own; a text from a chunk is copied out of it.
    /// Fails when a read does, or a record read is not the one its locator names (then the
    /// cache lets go of its file's chunks, so the read asked again goes to the file).
    pub async fn read_texts(
        &self,
        wanted: Vec<TextOnDisk>,
    ) -> io::Result<Vec<(TextOnDisk, Bytes)>> {
        self.read_texts_for(wanted, Reading::Serve).await
    }

    /// `read_texts`, for what `reading` says (a snapshot's reads span records and pass the
    /// read cache by).
    pub async fn read_texts_for(
        &self,
        mut wanted: Vec<TextOnDisk>,
        reading: Reading,
    ) -> io::Result<Vec<(TextOnDisk, Bytes)>> {
        use crate::limits::{DISK_READ_BYTES_MAX, DISK_READ_RANGES_MAX};
        wanted.sort_by_key(|&(_, _, locator, _)| (locator.file(), locator.offset()));
        let mut texts = Vec::with_capacity(wanted.len());
        let mut rest = &wanted[..];
        while let Some(&(_, _, first, _)) = rest.first() {
            let file = first.file();
            // Taken before the file is opened: a chunk read from a file replaced under its
            // name meanwhile is not kept.
            // Through the page cache, texts are read alone (`Disk::page_cached`).
            let end = (reading == Reading::Serve && !self.disk.page_cached())
                .then(|| self.cacheable_end(file))
                .flatten();
            let epoch = self.read_cache.borrow().epoch();
            // One file's texts, as many as one batch of reads takes. Sorted by offset, the
            // texts of one chunk come in a row.
            let (mut reads, mut chunks, mut sources) = (Vec::new(), Vec::new(), Vec::new());
            let mut bytes = 0;
            while let Some(&(_, _, locator, _)) = rest.get(sources.len()) {
                if locator.file() != file {
                    break;
                }
                let (offset, length) = (locator.offset(), locator.record_bytes());
                // A snapshot's reads pass the read cache by.
                let held = (reading == Reading::Serve)
                    .then(|| self.read_cache.borrow_mut().get(file, offset, length))
                    .flatten();
                // A snapshot's read takes a record close to the span before it into that span.
                let span = reads.last_mut().filter(|span: &&mut (u64, u32)| {
                    reading != Reading::Serve
                        && span_takes(span.0 + u64::from(span.1), offset, length)
                });
                let source = match (held, span) {
                    (Some(held), _) => Source::Held(held),
                    (None, Some(span)) => {
                        let span_end = (offset + u64::from(length)).max(span.0 + u64::from(span.1));
                        let grown = usize::try_from(span_end - span.0 - u64::from(span.1))
                            .expect("a span is small");
                        if bytes + grown > DISK_READ_BYTES_MAX {
                            break;
                        }
                        span.1 = u32::try_from(span_end - span.0).expect("a span is small");
                        bytes += grown;
                        let from = usize::try_from(offset - span.0).expect("within a span");
                        Source::Read(reads.len() - 1, from)
                    }
                    (None, None) => {
                        let (read, chunk) = match end.and_then(|end| chunk_of(offset, length, end))
                        {
                            Some((index, start, size)) => ((start, size), Some(index)),
                            None => ((offset, length), None),
                        };
                        if reads.last() != Some(&read) {
                            if reads.len() == DISK_READ_RANGES_MAX
                                || (!reads.is_empty()
                                    && bytes + read.1 as usize > DISK_READ_BYTES_MAX)
                            {
                                break;
                            }
                            reads.push(read);
                            chunks.push(chunk);
                            bytes += read.1 as usize;
                        }
                        let from = usize::try_from(offset - read.0).expect("within a chunk");
                        Source::Read(reads.len() - 1, from)
                    }
                };
                sources.push(source);
            }
            let (batch, after) = rest.split_at(sources.len());
            rest = after;
            let path = self.text_path(file);
            let read = if reads.is_empty() {
                Vec::new()
            } else {
                let opened = self.disk.open_read(&path).await?;
                self.disk.read_many(&opened, &reads).await?
            };
            {
                let mut cache = self.read_cache.borrow_mut();
                for (chunk, index) in read.iter().zip(&chunks) {
                    if let Some(index) = *index {
                        cache.insert(file, index, chunk.clone(), epoch);
                    }
                }
            }
            for (&(slot, generation, locator, sequence), source) in batch.iter().zip(sources) {
                let length = locator.record_bytes() as usize;
                // Whether the text is a slice of more than its record that it would keep alive.
                let (record, in_chunk) = match source {
                    Source::Held(held) => (held, true),
                    Source::Read(index, from) => (
                        read[index].slice(from..from + length),
                        chunks[index].is_some()
                            || (reading == Reading::Keep && read[index].len() > length),
                    ),
                };
                let Some(mut text) = record_text(&record, locator, sequence, slot, generation)
                else {
                    self.read_cache.borrow_mut().forget(file);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: no text of message {slot}.{generation} (record {sequence}) at {}",
                            path.display(),
                            locator.offset()
                        ),
                    ));
                };
                // Copied out of its chunk: a slice would keep the whole 16 KiB alive as long as
                // the text stays in memory, charged its length alone (helper-47's review of
                // 4e11aa7: 20,000 texts of 6 bytes held 300 MiB).
                if in_chunk {
                    text = Bytes::copy_from_slice(&text);
                }
                texts.push(((slot, generation, locator, sequence), text));
            }
        }
        Ok(texts)
    }

    /// How far `file`'s bytes never change, for the read cache: the open segment's up to the
    /// end of its last flush (the blocks before it are never written again), a closed
    /// segment's and the snapshot in place's whole. `None` for a file the log no longer keeps
    /// (given up to a snapshot: read, but not kept).
    fn cacheable_end(&self, file: TextFile) -> Option<u64> {
        let log = self.state.borrow();
        match file {
            TextFile::Segment(first) => match &log.segment {
                Some(open) if open.first_sequence == first => Some(open.length),
                _ => log
                    .segments
                    .iter()
                    .chain(&log.kept)
                    .find(|closed| closed.first_sequence == first)
                    .map(|closed| closed.bytes),
            },
            TextFile::Snapshot(replay_from) => log
                .snapshot
                .as_ref()
                .filter(|(path, _)| {
                    path.file_name().and_then(|name| name.to_str())
                        == Some(&snapshot_name(replay_from))
                })
                .map(|&(_, bytes)| bytes),
        }
    }

    /// Ranges of texts the read cache answered, and chunks read into it, since the start.
    pub fn read_cache_counts(&self) -> (u64, u64) {
        self.read_cache.borrow().counts()
    }

    /// Bytes of the chunks read for texts since the start (`ReadCache::read_bytes`).
    pub fn read_chunk_bytes(&self) -> u64 {
        self.read_cache.borrow().read_bytes()
    }
}

/// One step of freeing `files`, the files a snapshot replaced: the first is shortened by
/// `SNAPSHOT_REMOVAL_STEP_BYTES` and synced, and removed once empty; once the last is gone the
/// directory is synced, so a power cut never brings back files whose blocks the log already
/// counts as free. `Ok(true)` when none is left. A step frees a bounded amount because a file
/// system that discards freed blocks holds its next journal commit, and with it the log's
/// syncs, until the device has discarded all a step freed (ARCHITECTURE, Snapshots). A power
/// cut between steps leaves shortened files that recovery removes: the new snapshot's name was
/// durable before the first step, and recovery reads neither an older snapshot nor a segment
/// that one covers.
async fn remove_step<D: Disk>(files: &mut Vec<(PathBuf, u64)>, log: &Log<D>) -> io::Result<bool> {
    let Some((path, bytes)) = files.first_mut() else {
        log.state.borrow_mut().snapshotting = false;
        return Ok(true);
    };
    let length = log.disk.shrink(path, SNAPSHOT_REMOVAL_STEP_BYTES).await?;
    let freed = bytes.saturating_sub(length);
    *bytes -= freed;
    if length == 0 {
        log.disk.remove(path).await?;
        files.remove(0);
        if files.is_empty() {
            log.disk.sync_directory(&log.directory).await?;
        }
    }
    let mut state = log.state.borrow_mut();
    state.removing_bytes = if files.is_empty() {
        0
    } else {
        state.removing_bytes.saturating_sub(freed)
    };
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Sizes of a shard with `log_bytes` of log, all in closed segments (as allocated too),
    /// since its snapshot of records charged `snapshot_charged_bytes`, storing `message_bytes`
    /// of messages and nothing else.
    fn sizes(log_bytes: u64, snapshot_charged_bytes: u64, message_bytes: u64) -> Sizes {
        Sizes {
            log_bytes,
            closed_log_bytes: log_bytes,
            closed_allocated_bytes: log_bytes,
            snapshot_charged_bytes,
            kept_dead_bytes: 0,
            small_closed_segments: 0,
            message_bytes,
            stored_bytes: message_bytes,
            refusing: false,
            short_bytes: 0,
        }
    }

    fn due(sizes: Sizes) -> bool {
        snapshot_due(sizes, LOG_SEGMENT_BYTES)
    }

    #[test]
    fn a_snapshot_is_due_past_the_live_data_and_the_allowance_together() {
        let allowance = SNAPSHOT_ALLOWANCE_BYTES;
        // Live data larger than the allowance: a log past the live data alone is not enough.
        assert!(!due(sizes(500 * MIB + allowance / 2, 0, 500 * MIB)));
        assert!(!due(sizes(500 * MIB + allowance, 0, 500 * MIB)));
        assert!(due(sizes(500 * MIB + allowance + 1, 0, 500 * MIB)));
        // The same with a snapshot of the live data beside the log.
        assert!(!due(sizes(500 * MIB + allowance, 500 * MIB, 500 * MIB)));
        assert!(due(sizes(500 * MIB + allowance + 1, 500 * MIB, 500 * MIB)));
        // Little live data: the allowance.
        assert!(!due(sizes(allowance, 0, 0)));
        assert!(due(sizes(allowance + 1, 0, 0)));
        assert!(!due(sizes(u64::MAX, 0, u64::MAX)));
        assert!(!due(sizes(u64::MAX, u64::MAX, u64::MAX)));
    }

    /// A fill logs each message once, in a record no larger than its charge (the record's
    /// framing is less than `MESSAGE_OVERHEAD_BYTES`): it is not written out again.
    #[test]
    fn a_fill_is_not_written_out_again() {
        for stored in [0, MIB, 500 * MIB, 50_000 * MIB] {
            assert!(!due(sizes(stored, 0, stored)), "{stored}");
            // Beside the snapshot of an earlier fill.
            assert!(!due(sizes(stored / 2, stored / 2, stored)), "{stored}");
        }
    }

    /// A drain leaves the last snapshot on disk, mostly dead, and adds little log: a snapshot is
    /// due once the two outweigh twice what is still stored and the allowance.
    #[test]
    fn a_snapshot_mostly_drained_is_replaced() {
        let allowance = SNAPSHOT_ALLOWANCE_BYTES;
        let snapshot = 1_000 * MIB;
        let log = 20 * MIB;
        // Half drained: not yet (a new snapshot would free less than it writes).
        assert!(!due(sizes(log, snapshot, 500 * MIB)));
        let stored = (snapshot + log - allowance) / 2;
        assert!(!due(sizes(log, snapshot, stored)));
        assert!(due(sizes(log, snapshot, stored - 1)));
        // Drained: the allowance is all the dead data kept.
        assert!(due(sizes(0, allowance + 1, 0)));
        assert!(!due(sizes(0, allowance, 0)));
        // Stored data counts beyond the messages (queues, ACLs).
        let mut queues = sizes(log, snapshot, 0);
        queues.stored_bytes = 500 * MIB;
        assert!(!due(queues));
    }

    /// Found by the break-it review of this rule: the open segment stays after a snapshot,
    /// however dead, and a full one was as large as the allowance (64 MiB segments); counted,
    /// it made every flush at the end of a segment start another snapshot of a shard that
    /// stored nothing charged beside its accounts' service properties. An open segment as large
    /// as the allowance (a batch can overrun one) is still not counted.
    #[test]
    fn the_open_segment_is_not_counted_as_freed() {
        let mut open = sizes(0, 4 * MIB, 0);
        open.log_bytes = SNAPSHOT_ALLOWANCE_BYTES;
        assert!(!due(open));
        open.closed_log_bytes = SNAPSHOT_ALLOWANCE_BYTES;
        assert!(due(open));
    }

    /// Right after a snapshot, with the open segment's log beside it (up to a segment), no
    /// rule asks for another unless what it recorded is more than twice what is stored now:
    /// while the stored data is at least half of that, none does (while refusing, at least all
    /// of it).
    #[test]
    fn a_snapshot_is_never_due_right_after_one() {
        let mut random = crate::random::SplitMix64::new(40);
        for _ in 0..100_000 {
            let charged = random.next_u64() % (1 << 40);
            let message_bytes = random.next_u64() % (1 << 40);
            // A refusing shard snapshots again once a block left the store, not half of it.
            let refusing = random.next_u64() % 2 == 0;
            let stored_least = if refusing { charged } else { charged / 2 };
            let stored_bytes = (message_bytes + random.next_u64() % (1 << 40)).max(stored_least);
            let small_closed_segments = random.next_u64() as usize % (LOG_CLOSED_SEGMENTS_MAX + 1);
            let sizes = Sizes {
                log_bytes: random.next_u64() % (LOG_SEGMENT_BYTES + 1),
                closed_log_bytes: 0,
                closed_allocated_bytes: 0,
                snapshot_charged_bytes: charged,
                kept_dead_bytes: 0,
                small_closed_segments,
                message_bytes,
                stored_bytes,
                refusing,
                short_bytes: random.next_u64() % (1 << 40),
            };
            assert!(
                !due(sizes),
                "{message_bytes} {stored_bytes} {charged} {refusing}"
            );
        }
    }

    /// Right after a snapshot that keeps segments at least two thirds live, with nothing deleted
    /// while it ran (stored at least what it recorded), what they hold beyond the records it
    /// named (at most half those records, at most their charge) asks for no other snapshot; while
    /// refusing, neither (counted there, it asked again and again, each snapshot keeping the
    /// same segments).
    #[test]
    fn a_snapshot_keeping_segments_is_not_due_right_after_one() {
        let mut random = crate::random::SplitMix64::new(41);
        for _ in 0..100_000 {
            let charged = random.next_u64() % (1 << 40);
            let stored_bytes = charged + random.next_u64() % (1 << 40);
            let sizes = Sizes {
                log_bytes: random.next_u64() % (LOG_SEGMENT_BYTES + 1),
                closed_log_bytes: 0,
                closed_allocated_bytes: 0,
                snapshot_charged_bytes: charged,
                kept_dead_bytes: random.next_u64() % (charged + 1),
                small_closed_segments: 0,
                message_bytes: random.next_u64() % (stored_bytes + 1),
                stored_bytes,
                refusing: random.next_u64() % 2 == 0,
                short_bytes: random.next_u64() % (1 << 40),
            };
            assert!(
                !due(sizes),
                "{:?}",
                (charged, stored_bytes, sizes.kept_dead_bytes)
            );
        }
        // Counted, once what was kept is dead beyond twice what is stored.
        let mut drained = sizes(0, 100 * MIB, 10 * MIB);
        drained.kept_dead_bytes = 100 * MIB;
        assert!(due(drained));
    }

    /// Found by the break-it review of the disk limits: Updates without a text, never refused,
    /// filled a disk to ENOSPC while the log waited to pass the live data.
    #[test]
    fn a_shard_refusing_for_space_snapshots_once_its_log_passes_a_segment() {
        let segment = LOG_SEGMENT_BYTES;
        let mut refusing = sizes(segment + 1, 500 * MIB, 500 * MIB);
        assert!(!due(refusing));
        refusing.refusing = true;
        assert!(due(refusing));
        // The log in the open segment, which a snapshot would keep.
        refusing.log_bytes = segment;
        refusing.closed_log_bytes = 0;
        refusing.closed_allocated_bytes = 0;
        assert!(!due(refusing));
    }

    /// Found by the break-it reviews of the drain rule: at the smallest `--max-disk` share, a
    /// drained shard's snapshot, dead but within the allowance, kept it refusing for good, and
    /// so, with a fixed 16 MiB threshold, did one drained in part, short of less. While it
    /// refuses, a snapshot is due once what left the store since the last one and the closed
    /// segments as allocated reach what it is short of, at least a block.
    #[test]
    fn a_shard_refusing_for_space_snapshots_once_that_frees_what_it_is_short_of() {
        let block = STORAGE_BLOCK_BYTES as u64;
        let mut drained = sizes(0, 10 * MIB, 0);
        assert!(!due(drained), "within the allowance");
        drained.refusing = true;
        drained.short_bytes = 10 * MIB;
        assert!(due(drained));
        drained.short_bytes = 10 * MIB + 1;
        assert!(!due(drained), "frees less than it is short of");
        // Short of nothing (not measured yet): a block at least, not a snapshot per byte.
        drained.short_bytes = 0;
        drained.snapshot_charged_bytes = block;
        assert!(due(drained));
        drained.snapshot_charged_bytes = block - 1;
        assert!(!due(drained));
        // What is still stored stays.
        let mut kept = sizes(0, 100 * MIB + 5 * MIB, 100 * MIB);
        kept.refusing = true;
        kept.short_bytes = 5 * MIB;
        assert!(due(kept));
        kept.stored_bytes += 1;
        assert!(!due(kept));
        // Closed segments count as freed too, as allocated.
        kept.closed_allocated_bytes = 1;
        assert!(due(kept));
    }

    #[test]
    fn a_snapshot_is_due_once_small_closed_segments_pile_up() {
        let mut piled = sizes(MIB, 0, 0);
        piled.small_closed_segments = LOG_CLOSED_SEGMENTS_MAX;
        assert!(!due(piled));
        piled.small_closed_segments = LOG_CLOSED_SEGMENTS_MAX + 1;
        assert!(due(piled));
    }

    /// A span takes a record whose gap from its end is below a block and below the record's
    /// own length, and one that begins inside it; at every gap around both bounds, for every
    /// length around 0 and a block.
    #[test]
    fn a_span_takes_a_record_at_most_its_own_length_and_less_than_a_block_away() {
        let block = SNAPSHOT_READ_GAP_BYTES as u64;
        let end = 3 * block + 17;
        for length in (0..=3).chain(block - 2..=block + 2) {
            let gaps = (0..=3)
                .chain(length.saturating_sub(2)..=length + 2)
                .chain(block - 2..=block + 2);
            let length = u32::try_from(length).expect("small");
            for gap in gaps {
                let below_both = gap < block && gap < u64::from(length);
                assert_eq!(
                    span_takes(end, end + gap, length),
                    below_both,
                    "gap {gap}, length {length}"
                );
            }
            for inside in 1..=3 {
                assert_eq!(span_takes(end, end - inside, length), length > 0);
            }
        }
    }
}
