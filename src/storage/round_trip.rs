//! The log's and snapshots' formats, round-tripped through the real writer (`Log`, `SnapshotJob`,
//! on the simulated disk with every operation completing at once) and the real readers
//! (`read_segment`, `read_snapshot`, `recover`), at every boundary the writer can produce:
//!
//! - a flush that ends 0 to 4,095 bytes before a block boundary (every padding length), each
//!   followed by another flush, and padding of 1 to 3 bytes followed by records of every length
//!   from the smallest to a block and more;
//! - a record header split across a block boundary at every byte of the header, within one flush;
//! - a segment filled to its last byte, or ending 0 to 4,095 bytes before it, then the next one;
//! - the largest record (a Put of a 64 KiB text) at every split of its header, and a flush of
//!   exactly `LOG_FLUSH_BYTES_MAX` and of one byte more;
//! - a snapshot ending 0 to 4,095 bytes before a block boundary, an entry header split across
//!   the boundary of the chunks it is synced in, and a snapshot written in more than one step;
//! - random flush sequences with record sizes from the smallest to the largest.
//!
//! Written after a reader that took a record length from the 1 to 3 bytes a flush's padding
//! left in its block (mixed with the next flush's first bytes) and truncated the log there on
//! the next start. The expected side shares none of the reader's rules: what the writer was
//! given is the shard's journal, records back to back with no padding, walked with
//! `record::read` alone; the segments' records must be exactly those, in order; and the state
//! recovered from the files must equal the writer's, object by object.

use std::cell::RefCell;
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};

use super::files::Files;
use super::format::{read_segment, read_snapshot, Ending};
use super::log::{Durability, Log};
use super::recovery::{RecoveryOptions, ShardStart};
use super::sim::SimDisk;
use super::tests::{key, recover_one_shard, run, NOW_MS};
use crate::limits::{
    LOG_FLUSH_BYTES_MAX, MESSAGE_TEXT_BYTES_MAX, SNAPSHOT_STEP_SLOTS, SNAPSHOT_SYNC_BYTES,
    STORAGE_BLOCK_BYTES,
};
use crate::queue::record::{encode, read, MessageState, Read, Record, RECORD_HEADER_BYTES};
use crate::queue::{Command, MessageId, PopReceipt, Reply, ShardState};
use crate::random::SplitMix64;

const BLOCK: usize = STORAGE_BLOCK_BYTES;

/// Recovers the simulated disk's data directory for one shard, with no notes expected.
fn recover_shard(disk: &SimDisk) -> ShardStart {
    let recovered = recover_one_shard(disk, RecoveryOptions::default())
        .unwrap_or_else(|why| panic!("recovery failed: {why}"));
    assert!(recovered.notes.is_empty(), "{:?}", recovered.notes);
    recovered.shards.into_iter().next().expect("one shard")
}

/// The records in `bytes`, back to back from the start, with no padding between them.
fn records_in(bytes: &[u8]) -> Vec<(u64, Record)> {
    let bytes = Bytes::copy_from_slice(bytes);
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match read(&bytes, at) {
            Read::Record {
                sequence,
                record,
                bytes,
            } => {
                records.push((sequence, record));
                at += bytes;
            }
            other => panic!("the journal holds {other:?} at {at}"),
        }
    }
    records
}

/// A shard with a durable log on a simulated disk.
struct Writer {
    disk: SimDisk,
    log: Log<SimDisk>,
    state: RefCell<ShardState>,
    /// Every record the log's flushes took, back to back, in order.
    given: BytesMut,
    /// Receipts of the messages a Get leased, for Update and Delete.
    leased: Vec<(MessageId, PopReceipt)>,
    /// The state of the last message put, as its record wrote it: what the next put's record
    /// is predicted from (`put_bytes`).
    last_put: RefCell<Option<MessageState>>,
    /// The TTL of a put that names none, as its record says (the first put's).
    default_ttl_s: u32,
}

/// TTLs whose varints take 3 (the default's, 7 days), 2 and 1 bytes: a put's record can be made
/// one or two bytes shorter for the same text (`Writer::put_record`).
const TTLS_S: [Option<u32>; 3] = [None, Some(16_383), Some(127)];

impl Writer {
    /// A new data directory whose segments are `segment_bytes` long, holding one queue and a
    /// message of an empty text in it (so that every put after it is predicted from the one
    /// before: `put_bytes`).
    fn new(segment_bytes: u64) -> Writer {
        let disk = SimDisk::new(1, true);
        let start = recover_shard(&disk);
        let log =
            Log::new(disk.clone(), &start, 0, Durability::Fsync).with_segment_bytes(segment_bytes);
        let writer = Writer {
            disk,
            log,
            state: RefCell::new(start.state),
            given: BytesMut::new(),
            leased: Vec::new(),
            last_put: RefCell::new(None),
            default_ttl_s: 0,
        };
        writer.apply(Command::CreateQueue {
            queue: key(0),
            metadata: Vec::new(),
        });
        writer.put(0);
        let default_ttl_s = writer.last_put.borrow().as_ref().expect("a put").ttl_s;
        Writer {
            default_ttl_s,
            ..writer
        }
    }

    fn apply(&self, command: Command) -> Reply {
        let reply = self.state.borrow_mut().apply(command, NOW_MS);
        reply.unwrap_or_else(|error| panic!("{error:?}"))
    }

    /// Bytes of journal pending.
    fn pending(&self) -> usize {
        self.state.borrow().journal_bytes().len()
    }

    /// Bytes of the record the next put of `text_bytes` with `ttl_s` writes (and of its entry
    /// in a snapshot): its slot and sequence one past the last put's, as in a queue only put
    /// to, and its numbers' varints and its text's length as wide as they come.
    fn put_bytes(&self, text_bytes: usize, ttl_s: Option<u32>) -> usize {
        let last = self.last_put.borrow();
        let last = last.as_ref().expect("Writer::new puts a message");
        let next = MessageState {
            slot: last.slot + 1,
            sequence: last.sequence + 1,
            ttl_s: ttl_s.unwrap_or(self.default_ttl_s),
            text: Bytes::from(vec![b'a'; text_bytes]),
            ..last.clone()
        };
        let mut record = BytesMut::new();
        encode(&Record::MessagePut(next), 0, &mut record);
        record.len()
    }

    /// Bytes of the smallest record the next put writes (an empty text, the default TTL): a
    /// put after it can still take exactly as few (`put_record`, with a shorter TTL).
    fn least_put_bytes(&self) -> usize {
        self.put_bytes(0, None)
    }

    /// Puts a message whose record takes exactly `record_bytes`: the text the next record
    /// needs for it (`put_bytes`), with the default TTL or, where no text gives that size, one
    /// whose varint is a byte or two shorter (`TTLS_S`). A text's length takes a byte more from
    /// 128 and from 16,384 bytes, so a size is skipped at each, and the least record grows by
    /// a byte or two as the slot and sequence do.
    fn put_record(&self, record_bytes: usize) {
        let fitting = TTLS_S.iter().find_map(|&ttl_s| {
            let at_most = record_bytes.checked_sub(self.put_bytes(0, ttl_s))?;
            (at_most.saturating_sub(3)..=at_most)
                .find(|&text_bytes| self.put_bytes(text_bytes, ttl_s) == record_bytes)
                .map(|text_bytes| (text_bytes, ttl_s))
        });
        let (text_bytes, ttl_s) =
            fitting.unwrap_or_else(|| panic!("no put takes {record_bytes} bytes"));
        let before = self.pending();
        self.put_with(text_bytes, ttl_s);
        assert_eq!(self.pending() - before, record_bytes);
    }

    fn put(&self, text_bytes: usize) {
        self.put_with(text_bytes, None);
    }

    fn put_with(&self, text_bytes: usize, ttl_s: Option<u32>) {
        let text: Vec<u8> = (0..text_bytes).map(|at| b'a' + (at % 26) as u8).collect();
        self.apply(Command::PutMessage {
            queue: key(0),
            text: Bytes::from(text),
            visibility_timeout_s: 0,
            ttl_s: ttl_s.map(u64::from),
        });
        let put = records_in(self.state.borrow().journal_bytes())
            .into_iter()
            .rev()
            .find_map(|(_, record)| match record {
                Record::MessagePut(message) => Some(message),
                _ => None,
            });
        *self.last_put.borrow_mut() = Some(put.expect("a put journals its record"));
    }

    /// One flush of what is pending (all of it, up to `LOG_FLUSH_BYTES_MAX`); the padding it
    /// wrote after its records.
    fn flush(&mut self) -> usize {
        let pending = self.state.borrow().journal_bytes().to_vec();
        let before = self.log.stats().bytes;
        assert!(run(self.log.flush(&self.state)).expect("flushed"));
        let taken = (self.log.stats().bytes - before) as usize;
        self.given.extend_from_slice(&pending[..taken]);
        taken.next_multiple_of(BLOCK) - taken
    }

    /// Segment files, oldest first.
    fn segments(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self
            .disk
            .file_paths()
            .into_iter()
            .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
            .collect();
        paths.sort();
        paths
    }

    /// Every segment reads back clean with exactly the records given, in order, and recovery
    /// brings back the writer's state. Ends the writer (recovery truncates the open segment).
    fn check(mut self) {
        while self.pending() > 0 {
            self.flush();
        }
        let given = records_in(&self.given);
        let mut found = Vec::new();
        for path in self.segments() {
            let data = self.disk.read(&path).expect("a segment");
            let segment = read_segment(&data).expect("a segment header");
            assert_eq!(
                segment.ending,
                Ending::Clean,
                "{} after {} records",
                path.display(),
                found.len() + segment.records.len()
            );
            found.extend(segment.records);
        }
        assert_eq!(found.len(), given.len(), "records read back");
        for (index, (found, given)) in found.iter().zip(&given).enumerate() {
            assert_eq!(found, given, "record {index}");
        }
        let recovered = recover_shard(&self.disk);
        assert_eq!(
            recovered.state.describe(NOW_MS),
            self.state.borrow().describe(NOW_MS)
        );
    }
}

/// The smallest Put record of at least `at_least` bytes that leaves a flush of `flush_bytes`
/// so far `padding` bytes short of a block boundary.
fn record_bytes_for_padding(flush_bytes: usize, padding: usize, at_least: usize) -> usize {
    let mut record_bytes = (BLOCK - (flush_bytes + padding) % BLOCK) % BLOCK;
    while record_bytes < at_least {
        record_bytes += BLOCK;
    }
    record_bytes
}

#[test]
fn every_padding_length_is_read_across() {
    let mut writer = Writer::new(1 << 20);
    writer.flush();
    for padding in 0..BLOCK {
        writer.put_record(record_bytes_for_padding(
            0,
            padding,
            writer.least_put_bytes(),
        ));
        assert_eq!(writer.flush(), padding);
    }
    // Padding of 1 to 3 bytes, then a flush whose first record has every length from the
    // smallest to a block and more: the bytes that mix with the padding take every value.
    for padding in 1..=3 {
        for next_bytes in (writer.least_put_bytes()..BLOCK + 300).step_by(1 + padding * 2) {
            writer.put_record(record_bytes_for_padding(
                0,
                padding,
                writer.least_put_bytes(),
            ));
            assert_eq!(writer.flush(), padding);
            writer.put_record(next_bytes);
            writer.flush();
        }
    }
    writer.check();
}

#[test]
fn a_record_header_split_at_every_byte_is_read() {
    let mut writer = Writer::new(1 << 20);
    writer.flush();
    // The second record of a flush starts `before` bytes ahead of a block boundary: its header
    // (and, further on, its body) split across it at every byte.
    for before in 1..=RECORD_HEADER_BYTES + 8 {
        for blocks in [1, 2] {
            let least = writer.least_put_bytes();
            writer.put_record(blocks * BLOCK - before);
            writer.put_record(least + before);
            writer.flush();
        }
    }
    // The largest record, its header split at every byte.
    for before in 0..=RECORD_HEADER_BYTES {
        writer.put_record(BLOCK - before);
        writer.put(MESSAGE_TEXT_BYTES_MAX);
        writer.flush();
    }
    writer.check();
}

#[test]
fn segments_filled_to_their_last_byte_or_short_of_it_are_read() {
    // A header block and three blocks of records: a three-block flush fills a new segment.
    let mut writer = Writer::new(4 * BLOCK as u64);
    writer.flush();
    for padding in 0..BLOCK {
        let least = writer.least_put_bytes();
        writer.put_record(3 * BLOCK - padding - least);
        writer.put_record(least);
        assert_eq!(writer.flush(), padding);
    }
    assert!(writer.segments().len() > BLOCK);
    writer.check();
}

#[test]
fn a_flush_of_exactly_the_most_bytes_and_of_one_byte_more_are_read() {
    let mut writer = Writer::new(8 << 20);
    writer.flush();
    let record_bytes = 64 * 1024;
    let records = LOG_FLUSH_BYTES_MAX / record_bytes;
    for _ in 0..records {
        writer.put_record(record_bytes);
    }
    assert_eq!(writer.pending(), LOG_FLUSH_BYTES_MAX);
    let flushes = writer.log.stats().flushes;
    assert_eq!(writer.flush(), 0);
    assert_eq!(
        writer.log.stats().flushes,
        flushes + 1,
        "one flush took all"
    );
    // One byte more: two flushes, in another segment.
    for record in 0..records {
        writer.put_record(record_bytes + usize::from(record == 0));
    }
    writer.flush();
    writer.flush();
    assert_eq!(writer.log.stats().flushes, flushes + 3);
    assert_eq!(writer.pending(), 0);
    writer.check();
}

#[test]
fn random_flush_sequences_read_back_exactly() {
    let overhead = Writer::new(1 << 20).least_put_bytes();
    for seed in 0..40 {
        let mut random = SplitMix64::new(seed);
        let mut pick = |count: usize| (random.next_u64() % count as u64) as usize;
        let segment_bytes = [4 * BLOCK, 16 * BLOCK, 1 << 20][pick(3)];
        let mut writer = Writer::new(segment_bytes as u64);
        for _ in 0..150 {
            for _ in 0..1 + pick(6) {
                match pick(10) {
                    // Texts from empty to the largest, most of them near a block.
                    0..=5 => writer.put(match pick(4) {
                        0 => pick(64),
                        1 => pick(2 * BLOCK),
                        2 => BLOCK - overhead - pick(32),
                        _ => pick(MESSAGE_TEXT_BYTES_MAX + 1).min(segment_bytes / 4),
                    }),
                    6..=7 => {
                        if let Reply::Messages(views) = writer.apply(Command::GetMessages {
                            queue: key(0),
                            count: 1 + pick(4) as u32,
                            visibility_timeout_s: 60,
                        }) {
                            writer.leased.extend(
                                views
                                    .iter()
                                    .filter_map(|view| Some((view.message_id, view.pop_receipt?))),
                            );
                        }
                    }
                    8 if !writer.leased.is_empty() => {
                        let (message_id, pop_receipt) =
                            writer.leased.swap_remove(pick(writer.leased.len()));
                        writer.apply(Command::DeleteMessage {
                            queue: key(0),
                            message_id,
                            pop_receipt,
                        });
                    }
                    _ => {
                        writer.apply(Command::SetQueueMetadata {
                            queue: key(0),
                            metadata: vec![("k".to_string(), "v".repeat(pick(300)))],
                        });
                    }
                }
            }
            if writer.pending() > 0 {
                writer.flush();
            }
        }
        writer.check();
    }
}

/// Writes a snapshot of `writer`'s state with the real snapshot job, then checks the file
/// against the state's own encoding of itself and recovery against the state.
fn snapshot_round_trip(writer: Writer) {
    let mut writer = writer;
    while writer.pending() > 0 {
        writer.flush();
    }
    let expected = {
        let state = writer.state.borrow();
        let mut entries = BytesMut::new();
        state.snapshot_all(&mut entries);
        records_in(&entries)
    };
    run(async {
        let mut job = writer
            .log
            .start_snapshot(&writer.state)
            .await
            .expect("started");
        while !job.step(&writer.log, &writer.state).await.expect("a step") {}
    });
    let path = writer.disk.snapshot_path();
    let mut records = Vec::new();
    read_snapshot(&writer.disk.read(&path).expect("a file"), |record| {
        records.push(record)
    })
    .unwrap_or_else(|why| panic!("{why}"));
    let expected: Vec<Record> = expected.into_iter().map(|(_, record)| record).collect();
    assert_eq!(records, expected);
    let recovered = recover_shard(&writer.disk);
    assert_eq!(
        recovered.state.describe(NOW_MS),
        writer.state.borrow().describe(NOW_MS)
    );
}

/// Bytes of the snapshot of `writer`'s state as written (header, entries, trailer), before its
/// padding.
fn snapshot_bytes(writer: &Writer) -> usize {
    use super::format::{SNAPSHOT_HEADER_BYTES, SNAPSHOT_TRAILER_BYTES};
    let state = writer.state.borrow();
    let mut entries = BytesMut::new();
    state.snapshot_all(&mut entries);
    SNAPSHOT_HEADER_BYTES + entries.len() + SNAPSHOT_TRAILER_BYTES
}

#[test]
fn every_padding_length_of_a_snapshot_is_read() {
    let base = snapshot_bytes(&Writer::new(4 * BLOCK as u64));
    for padding in 0..BLOCK {
        let writer = Writer::new(4 * BLOCK as u64);
        // The message whose entry leaves the snapshot `padding` bytes short of a block
        // boundary: never leased, it is copied as its put, and its entry takes what its record
        // took.
        let least = writer.least_put_bytes();
        writer.put_record(record_bytes_for_padding(base, padding, least));
        let bytes = snapshot_bytes(&writer);
        assert_eq!(bytes.next_multiple_of(BLOCK) - bytes, padding);
        snapshot_round_trip(writer);
    }
}

#[test]
fn snapshot_entries_split_across_sync_chunks_and_steps_are_read() {
    use super::format::SNAPSHOT_TRAILER_BYTES;
    // An entry starts `before` bytes ahead of the boundary between the first two chunks the
    // snapshot is written and synced in: its header, then its body, split there. A message
    // never leased is copied as its put, so its entry takes what its record took.
    for before in 0..=RECORD_HEADER_BYTES + 1 {
        let writer = Writer::new(4 << 20);
        // Where the next entry would start, and the room before the chunk boundary.
        let mut entries_end = snapshot_bytes(&writer) - SNAPSHOT_TRAILER_BYTES;
        let room = |entries_end: usize| SNAPSHOT_SYNC_BYTES - before - entries_end;
        while room(entries_end) > 2000 {
            writer.put_record(1000);
            entries_end += 1000;
        }
        writer.put_record(room(entries_end));
        assert_eq!(
            snapshot_bytes(&writer) - SNAPSHOT_TRAILER_BYTES,
            SNAPSHOT_SYNC_BYTES - before
        );
        writer.put(10);
        snapshot_round_trip(writer);
    }
    // More slots than one step encodes.
    let writer = Writer::new(4 << 20);
    for count in 0..SNAPSHOT_STEP_SLOTS as usize + 100 {
        writer.put(count % 300);
    }
    snapshot_round_trip(writer);
}
