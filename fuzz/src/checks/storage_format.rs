//! `storage_format`: the readers of what a shard keeps on disk — `queue::record::read`,
//! `storage::format::read_segment` and `storage::format::read_snapshot` — fed raw bytes, fed
//! segments and snapshots this check writes itself and then damages as a crash or a bad disk
//! would, and fed the segments the real log writer (`storage::log::Log`) wrote for a shard.
//!
//! First byte, mod 4 (mod 3 before the writer mode: committed inputs whose mode that changed
//! had their first byte rewritten to keep it):
//! - **0, raw**: the rest is a file. No reader panics; a segment read back has consecutive
//!   sequences from its header's first, ends within the file, names the first byte after its
//!   last record as the damage's offset, and every record it read, encoded again at its
//!   sequence, is byte for byte the file's where the reader says it starts (`starts`), right
//!   after the record before it or after zeros from inside a block to that block's end (a
//!   flush's padding, which may be 1 to 3 bytes: never told by the bytes at the read position);
//!   the encoding is canonical, so nothing is read that the writer could not have written. The
//!   same for a snapshot's entries and `read` itself.
//! - **1, segment**: records of every kind (big Puts repeated, so a small input can fill more
//!   than a flush) are written as the log writes them (in flushes, each padded with zeros to
//!   whole blocks, the boundaries drawn from the input), then maybe damaged:
//!   - none: read back `Clean`, every record;
//!   - cut at an offset, the rest zeros (the tail a crash did not sync): every record that ends
//!     before the cut is read, anything read is what was written, and the ending is never
//!     `Corrupt` (nothing acknowledged lies beyond the cut);
//!   - one byte of a record changed (a bad sector): the records before it are read, that one is
//!     not (CRC-32C catches every error within 32 bits), and the ending is `Corrupt` exactly when
//!     intact records follow it further than one flush away (acknowledged data behind the damage:
//!     recovery must stop, never truncate it), `Torn` otherwise, at the damaged record's offset
//!     (or where the padding before it begins);
//!   - one byte of the header's first 36 changed: not a segment.
//! - **2, snapshot**: the same records as a snapshot, then maybe one byte changed or a cut: an
//!   intact snapshot reads back whole; a change within header, entries or trailer, or a cut
//!   before the trailer ends, is an error, never a snapshot with other contents.
//! - **3, writer**: a `ShardState` with a journal and the real `Log` over a disk in memory
//!   (`memory_disk`), with segments of 2 to 64 blocks (so they fill and rotate) and either
//!   durability. The input chooses commands (one Create Queue first, then Puts of texts from 0
//!   to 64 KiB, Puts sized so that the next flush ends a chosen number of bytes short of a
//!   block boundary, Gets, Deletes and Updates by receipt, Set Queue Metadata) and where
//!   `Log::flush` runs; at most `WRITER_COMMANDS_MAX` commands and about
//!   `WRITER_JOURNAL_BYTES_MAX` bytes of records. What each flush was given is known without
//!   the reader and without the log's help: a twin `ShardState` gets the same commands, and at
//!   each flush the check takes the twin's journal itself, as the log takes the shard's. Then:
//!   - each flush's write holds exactly those bytes from a block boundary, zeros after them to
//!     the end of its last block, and never reaches back into blocks written before;
//!   - every segment is named after its first sequence and runs on from the one before it, and
//!     reads back `Clean` with exactly the records its flushes were given, in order, at the
//!     offsets they were written at (`starts`), ending where the last one ends;
//!   - one segment, chosen by the input, cut at an offset the input chooses (the rest zeros:
//!     what a crash did not sync) keeps every record that ended before the cut, reads nothing
//!     that was not written, and is never `Corrupt`.
//!
//!   The Puts sized to a boundary make flushes end 1 to 3 bytes short of one (padding shorter
//!   than a length field) and split record headers across one, which random sizes seldom do
//!   and coverage does not steer to: the old reader lost every record after such a flush at a
//!   restart (commit 631e836), and the committed seeds of fuzz/scripts/writer_seeds.py hold
//!   both on purpose. That script's docstring spells out this mode's input layout.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use futures_lite::future::block_on;

use azq::limits::{
    LOG_FLUSH_BYTES_MAX, MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX, STORAGE_BLOCK_BYTES,
};
use azq::queue::key::{TextFile, TextLocator};
use azq::queue::record::{
    encode, put_record_bytes, read, varint_bytes, MessageState, NamedPut, NamedText, Read, Record,
    PUT_RECORD_BYTES_MIN, RECORD_HEADER_BYTES,
};
use azq::queue::replicas::{AccessPolicy, CorsRule, ServiceProperties, SignedIdentifier};
use azq::queue::state::texts::RecoveredTexts;
use azq::queue::state::Identity;
use azq::queue::{Command, MessageId, PopReceipt, QueueKey, Reply, ShardState};
use azq::storage::format::{
    read_segment, read_snapshot, segment_header, segment_name, snapshot_header, snapshot_trailer,
    Ending, SNAPSHOT_HEADER_BYTES, SNAPSHOT_TRAILER_BYTES,
};
use azq::storage::log::{Durability, Log};
use azq::storage::recovery::ShardStart;

use super::input::Input;
use super::memory_disk::{MemoryDisk, Write};

/// Records one input writes at most (repeats of a big Put count one each).
const RECORDS_MAX: usize = 128;
/// The largest message text written (a real one is at most 64 KiB).
const TEXT_BYTES_MAX: usize = 64 * 1024;
/// The most times one generated Put is repeated: enough for 64 KiB texts to pass one flush.
const REPEATS_MAX: usize = 96;
/// Bytes of a segment header the header CRC covers, with the CRC.
const SEGMENT_HEADER_CHECKED_BYTES: usize = 36;
/// Writer mode: the most commands one input applies, besides its Create Queue.
const WRITER_COMMANDS_MAX: usize = 256;
/// Writer mode: no command is read once the shard has journaled this many bytes (the last one
/// may add up to a 64 KiB Put): a few megabytes of copies and CRCs per input at most.
const WRITER_JOURNAL_BYTES_MAX: usize = 1 << 20;
/// Writer mode: the largest segment, in blocks with its header block. Small, so that segments
/// fill and rotate within the bytes one input journals.
const WRITER_SEGMENT_BLOCKS_MAX: usize = 64;
/// Writer mode: the most whole blocks a Put sized to a boundary adds to its text (a text of up
/// to 64 KiB).
const WRITER_BLOCKS_MORE_MAX: usize = MESSAGE_TEXT_BYTES_MAX / STORAGE_BLOCK_BYTES;
/// Writer mode: the longest metadata value a Set Queue Metadata writes (Azure's limit for all
/// of a queue's metadata is 8 KiB).
const WRITER_METADATA_BYTES_MAX: usize = 4096;
/// Writer mode: the clock, which stands still (2026-11-22T00:00:00Z).
const WRITER_NOW_MS: u64 = 1_795_305_600_000;
/// Writer mode: the shard's seed (message IDs, receipts), the same for the shard and its twin.
const WRITER_ID_SEED: u64 = 0x5eed_0039;
/// Writer mode: the shard's directory on the memory disk.
const WRITER_DIRECTORY: &str = "/shard-000";

/// The property of the `storage_format` target: panics when it breaks.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    match input.u8() % 4 {
        0 => raw(input.rest()),
        1 => segment(&mut input),
        2 => snapshot(&mut input),
        _ => writer(&mut input),
    }
}

/// Every reader on the bytes as they are.
fn raw(data: &[u8]) {
    let data = Bytes::copy_from_slice(data);
    if let Read::Record {
        sequence,
        record,
        bytes,
    } = read(&data, 0)
    {
        assert_encodes_to(&record, sequence, &data[..bytes]);
    }
    if let Ok(segment) = read_segment(&data) {
        assert_eq!(segment.starts.len(), segment.records.len());
        // Where the previous record ends: the header block's end before the first one.
        let mut at = STORAGE_BLOCK_BYTES;
        for (index, ((sequence, record), &start)) in
            segment.records.iter().zip(&segment.starts).enumerate()
        {
            assert_eq!(*sequence, segment.header.first_sequence + index as u64);
            // Right after the previous record, or after a flush's padding: zeros from inside a
            // block to its end (so never a whole block of them). Padding is told by where the
            // reader found the record, never by the bytes at `at`: it can be 1 to 3 bytes,
            // shorter than a length field.
            if start != at {
                assert_eq!(
                    start,
                    at.next_multiple_of(STORAGE_BLOCK_BYTES),
                    "record {index} at {start}, after a record ending at {at}"
                );
                assert!(data[at..start].iter().all(|&byte| byte == 0), "padding");
            }
            let mut encoded = BytesMut::new();
            encode(record, *sequence, &mut encoded);
            assert_eq!(
                &data[start..start + encoded.len()],
                &encoded[..],
                "record {index}"
            );
            at = start + encoded.len();
        }
        assert_eq!(segment.end, at);
        assert!(segment.end <= data.len());
        match segment.ending {
            Ending::Clean => {}
            Ending::Torn { offset, .. } | Ending::Corrupt { offset, .. } => {
                assert_eq!(offset, segment.end)
            }
        }
    }
    let mut entries = Vec::new();
    if read_snapshot(&data, |record| entries.push(record)).is_ok() {
        let mut at = SNAPSHOT_HEADER_BYTES;
        for (index, record) in entries.iter().enumerate() {
            let mut encoded = BytesMut::new();
            encode(record, index as u64, &mut encoded);
            assert_eq!(&data[at..at + encoded.len()], &encoded[..], "entry {index}");
            at += encoded.len();
        }
        assert!(at + SNAPSHOT_TRAILER_BYTES <= data.len());
    }
}

fn assert_encodes_to(record: &Record, sequence: u64, bytes: &[u8]) {
    let mut encoded = BytesMut::new();
    encode(record, sequence, &mut encoded);
    assert_eq!(
        &encoded[..],
        bytes,
        "a record read back that encodes otherwise"
    );
}

/// A segment written from the input's records, maybe damaged, read back.
fn segment(input: &mut Input) {
    let first_sequence = u64::from(input.u16());
    let damage = input.u8() % 4;
    let position = input.u32() as usize;
    let mask = input.u8() | 1;
    let padding = input.below(2 * STORAGE_BLOCK_BYTES);
    let records = records(input);

    let mut file = segment_header(7, 0x0a0b_0c0d, first_sequence);
    // Where each record starts and ends in the file. A flush ends after record `index` when
    // bit `index % 32` of `position` is set, and the next one starts on a fresh block.
    let mut spans = Vec::with_capacity(records.len());
    for (index, record) in records.iter().enumerate() {
        let start = file.len();
        encode(record, first_sequence + index as u64, &mut file);
        spans.push((start, file.len()));
        if (position >> (index % 32)) & 1 == 1 && index + 1 < records.len() {
            file.resize(file.len().next_multiple_of(STORAGE_BLOCK_BYTES), 0);
        }
    }
    let written_end = file.len();
    file.resize(written_end + padding, 0);
    let expect_written = |read: &[(u64, Record)]| {
        for (index, (sequence, record)) in read.iter().enumerate() {
            assert_eq!(*sequence, first_sequence + index as u64);
            assert_eq!(
                record, &records[index],
                "record {index} read back otherwise"
            );
        }
    };

    match damage {
        // Intact.
        0 => {
            let read = read_segment(&file.freeze()).expect("an intact segment");
            assert_eq!(read.ending, Ending::Clean);
            assert_eq!(read.records.len(), records.len());
            expect_written(&read.records);
            assert_eq!(read.end, written_end);
        }
        // Cut: what a crash left unsynced reads as zeros.
        1 => {
            let cut = STORAGE_BLOCK_BYTES + position % (file.len() - STORAGE_BLOCK_BYTES + 1);
            file[cut..].fill(0);
            let whole_before_cut = spans.iter().filter(|&&(_, end)| end <= cut).count();
            let read = read_segment(&file.freeze()).expect("the header is intact");
            expect_written(&read.records);
            assert!(read.records.len() >= whole_before_cut);
            assert!(
                !matches!(read.ending, Ending::Corrupt { .. }),
                "a cut tail read as corruption: {:?}",
                read.ending
            );
        }
        // One changed byte in a record.
        2 if !spans.is_empty() => {
            let damaged = position % spans.len();
            let (start, end) = spans[damaged];
            file[start + (position >> 8) % (end - start)] ^= mask;
            let read = read_segment(&file.freeze()).expect("the header is intact");
            assert_eq!(read.records.len(), damaged, "a damaged record read back");
            expect_written(&read.records);
            let beyond_a_flush = written_end > start + LOG_FLUSH_BYTES_MAX + STORAGE_BLOCK_BYTES
                && damaged + 1 < spans.len();
            // The damage is named at the record, or where the padding before it begins (the
            // record that starts a flush).
            let at_damage = |offset: usize| {
                offset == start
                    || (damaged > 0
                        && start % STORAGE_BLOCK_BYTES == 0
                        && offset == spans[damaged - 1].1)
            };
            match read.ending {
                Ending::Corrupt { offset, .. } => {
                    assert!(
                        beyond_a_flush,
                        "damage with nothing after it called corrupt"
                    );
                    assert!(at_damage(offset), "corruption named at {offset}");
                }
                Ending::Torn { offset, .. } => {
                    assert!(!beyond_a_flush, "acknowledged records after damage dropped");
                    assert!(at_damage(offset), "a torn tail named at {offset}");
                }
                Ending::Clean => panic!("a damaged record read as a clean end"),
            }
        }
        // One changed byte in the checked part of the header.
        _ => {
            file[position % SEGMENT_HEADER_CHECKED_BYTES] ^= mask;
            assert!(read_segment(&file.freeze()).is_err());
        }
    }
}

/// A snapshot written from the input's records, maybe damaged, read back.
fn snapshot(input: &mut Input) {
    let identity = Identity {
        id_prefix: input.u64(),
        sequence_next: input.u64(),
        replica_version_last: input.u64(),
    };
    let replay_from = input.u64();
    let damage = input.u8() % 3;
    let position = input.u32() as usize;
    let mask = input.u8() | 1;
    let padding = input.below(STORAGE_BLOCK_BYTES);
    let kept: Vec<u64> = (0..input.below(5))
        .map(|_| input.u64())
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .collect();
    let records = records(input);

    let mut file = snapshot_header(3, &identity, replay_from);
    for (index, record) in records.iter().enumerate() {
        encode(record, index as u64, &mut file);
    }
    file.extend_from_slice(&snapshot_trailer(records.len() as u64, &kept));
    let trailer_end = file.len();
    file.resize(trailer_end + padding, 0);

    match damage {
        0 => {
            let mut entries = Vec::new();
            let read = read_snapshot(&file.freeze(), |record| entries.push(record))
                .expect("an intact snapshot");
            assert_eq!(read.shard, 3);
            assert_eq!(read.identity, identity);
            assert_eq!(read.replay_from, replay_from);
            assert_eq!(read.kept, kept);
            assert_eq!(entries, records);
        }
        1 => {
            file[position % trailer_end] ^= mask;
            assert!(
                read_snapshot(&file.freeze(), drop).is_err(),
                "a changed byte at {} read as a snapshot",
                position % trailer_end
            );
        }
        _ => {
            file.truncate(position % trailer_end);
            assert!(
                read_snapshot(&file.freeze(), drop).is_err(),
                "a cut snapshot read"
            );
        }
    }
}

/// Up to `RECORDS_MAX` records of every kind from the input.
fn records(input: &mut Input) -> Vec<Record> {
    let mut records = Vec::new();
    while !input.is_empty() && records.len() < RECORDS_MAX {
        let kind = input.u8();
        match kind % 13 {
            0 => records.push(Record::QueueCreated {
                queue: input.u32(),
                key: key(input),
                metadata: metadata(input),
            }),
            1 => records.push(Record::QueueMetadataSet {
                queue: input.u32(),
                metadata: metadata(input),
            }),
            2 => records.push(Record::QueueDeleted {
                queue: input.u32(),
                key: key(input),
            }),
            3 => records.push(Record::QueueCleared {
                queue: input.u32(),
                moved_to: input.u32(),
                key: input.bool().then(|| key(input)),
            }),
            4 => records.push(Record::MessagePut(message(input, None))),
            // A big Put, repeated: a few input bytes become megabytes of log.
            5 => {
                let length = input.below(TEXT_BYTES_MAX + 1);
                let fill = input.u8();
                let repeats = 1 + input.below(REPEATS_MAX);
                let message = message(input, Some(Bytes::from(vec![fill; length])));
                let room = RECORDS_MAX - records.len();
                records.extend(std::iter::repeat_n(
                    Record::MessagePut(message),
                    repeats.min(room),
                ));
            }
            6 => records.push(Record::MessageLeased {
                slot: input.u32(),
                generation: input.u32(),
                dequeue_count: input.u32(),
                lease: input.u32(),
                visible_ms: input.u64(),
            }),
            7 => records.push(Record::MessageUpdated {
                slot: input.u32(),
                generation: input.u32(),
                lease: input.u32(),
                visible_ms: input.u64(),
                text: input
                    .bool()
                    .then(|| Bytes::copy_from_slice(input.bytes(255))),
            }),
            8 => records.push(Record::MessageDeleted {
                slot: input.u32(),
                generation: input.u32(),
            }),
            // A snapshot's named entry: its locator anything a record could have.
            11 => {
                let text_bytes = input.u32() >> (input.u8() % 33);
                let slack = input.u32() >> (input.u8() % 33);
                let record_bytes = (RECORD_HEADER_BYTES as u32 + 1)
                    .saturating_add(text_bytes)
                    .saturating_add(slack);
                let locator = TextLocator::new(
                    TextFile::Segment(input.u64()),
                    input.u64() >> 1,
                    record_bytes,
                );
                let named = NamedText {
                    locator,
                    sequence: input.u64(),
                    text_bytes: text_bytes.min(record_bytes - RECORD_HEADER_BYTES as u32 - 1),
                };
                records.push(Record::MessageNamed(message(input, None).with_text(named)));
            }
            // A snapshot's named puts: offsets and sequences near each other or anywhere.
            12 => {
                let count = 1 + input.below(64);
                let puts = (0..count)
                    .map(|_| NamedPut {
                        offset: input.u64() >> (1 + input.u8() % 64),
                        record_bytes: (PUT_RECORD_BYTES_MIN as u32)
                            .saturating_add(input.u32() >> (input.u8() % 33)),
                        sequence: input.u64() >> (input.u8() % 65).min(63),
                    })
                    .collect();
                records.push(Record::PutsNamed {
                    segment: input.u64(),
                    puts,
                });
            }
            9 => records.push(Record::AclSet {
                key: key(input),
                version: input.u64(),
                identifiers: (0..input.below(6))
                    .map(|_| SignedIdentifier {
                        id: text(input),
                        access_policy: input.bool().then(|| AccessPolicy {
                            start: input.bool().then(|| text(input)),
                            expiry: input.bool().then(|| text(input)),
                            permission: input.bool().then(|| text(input)),
                        }),
                    })
                    .collect(),
            }),
            _ => {
                let mut properties = ServiceProperties::default();
                properties.logging.read = input.bool();
                properties.logging.retention_policy.days = input.bool().then(|| input.u32());
                properties.hour_metrics.include_apis = input.bool().then(|| input.bool());
                properties.minute_metrics.enabled = input.bool();
                properties.cors = (0..input.below(6))
                    .map(|_| CorsRule {
                        allowed_origins: text(input),
                        allowed_methods: text(input),
                        allowed_headers: text(input),
                        exposed_headers: text(input),
                        max_age_s: input.u64(),
                    })
                    .collect();
                records.push(Record::PropertiesSet {
                    account: text(input),
                    version: input.u64(),
                    properties,
                });
            }
        }
    }
    records
}

fn message(input: &mut Input, text: Option<Bytes>) -> MessageState {
    MessageState {
        queue: input.u32(),
        slot: input.u32(),
        generation: input.u32(),
        sequence: input.u64(),
        insertion_ms: input.u64(),
        ttl_s: input.u32(),
        delay_s: input.u32(),
        dequeue_count: input.u32(),
        lease: input.u32(),
        visible_ms: input.u64(),
        foreign_id: input
            .bool()
            .then(|| MessageId(u128::from(input.u64()) << 64 | u128::from(input.u64()))),
        text: text.unwrap_or_else(|| Bytes::copy_from_slice(input.bytes(255))),
    }
}

/// A string of up to 255 input bytes (not always valid UTF-8 in the input: made so).
fn text(input: &mut Input) -> String {
    String::from_utf8_lossy(input.bytes(255)).into_owned()
}

fn key(input: &mut Input) -> QueueKey {
    QueueKey {
        account: text(input),
        name: text(input),
    }
}

fn metadata(input: &mut Input) -> Vec<(String, String)> {
    (0..input.below(4))
        .map(|_| (text(input), text(input)))
        .collect()
}

/// A shard with a durable log, the real writer, on a memory disk.
struct Writer {
    disk: MemoryDisk,
    log: Log<MemoryDisk>,
    state: RefCell<ShardState>,
    /// The same shard given the same commands (states are deterministic: same seed, same clock),
    /// whose journal the check takes itself at each flush, with the call the log makes: so the
    /// records each flush was given are known without looking at what the log wrote.
    twin: ShardState,
    /// Every flush that wrote, in order.
    flushes: Vec<Flush>,
    /// Receipts of the messages Gets leased (time stands still, so every lease holds).
    leased: Vec<(MessageId, PopReceipt)>,
    commands: usize,
    /// What the last Put's record took beyond its text and its text's length: the widths of
    /// its numbers as varints, where the next Put is aimed (they change slowly).
    put_fixed_bytes: usize,
}

/// One flush of the log.
struct Flush {
    /// Where its blocks went, as the disk saw the write.
    write: Write,
    /// The journal bytes it took (the twin's): records back to back, no padding.
    records: Bytes,
}

/// A record the writer was given, and where it must be in its segment.
struct Placed {
    sequence: u64,
    record: Record,
    /// Its first byte in the file.
    start: usize,
    /// The first byte after it.
    end: usize,
}

impl Writer {
    fn new(segment_bytes: usize, durability: Durability) -> Writer {
        let mut state = ShardState::new(0, WRITER_ID_SEED);
        state.start_journal(0);
        let mut twin = ShardState::new(0, WRITER_ID_SEED);
        twin.start_journal(0);
        let start = ShardStart {
            state,
            directory: PathBuf::from(WRITER_DIRECTORY),
            segments: Vec::new(),
            snapshot: None,
            kept: Vec::new(),
            kept_named_bytes: 0,
            named: (0, 0),
            left_out: 0,
            texts: RecoveredTexts::default(),
        };
        let disk = MemoryDisk::new();
        let log =
            Log::new(disk.clone(), &start, 0, durability).with_segment_bytes(segment_bytes as u64);
        Writer {
            disk,
            log,
            state: RefCell::new(start.state),
            twin,
            flushes: Vec::new(),
            leased: Vec::new(),
            commands: 0,
            put_fixed_bytes: put_fixed_bytes_first(),
        }
    }

    /// Applies `command` to the shard and its twin; every command this check makes succeeds.
    fn apply(&mut self, command: Command) -> Reply {
        self.commands += 1;
        let reply = self
            .state
            .borrow_mut()
            .apply(command.clone(), WRITER_NOW_MS);
        let reply = reply.unwrap_or_else(|error| panic!("{command:?}: {error:?}"));
        let twin = self.twin.apply(command, WRITER_NOW_MS);
        twin.unwrap_or_else(|error| panic!("the twin refused: {error:?}"));
        assert_eq!(
            self.state.borrow().journal_pending(),
            self.twin.journal_pending(),
            "the twin journaled otherwise"
        );
        reply
    }

    /// Bytes of journal no flush has taken yet.
    fn pending(&self) -> usize {
        self.twin.journal_pending().map_or(0, |(_, bytes)| bytes)
    }

    /// Bytes of journal so far, flushed or not.
    fn journaled(&self) -> usize {
        let flushed: usize = self.flushes.iter().map(|flush| flush.records.len()).sum();
        flushed + self.pending()
    }

    fn put(&mut self, text_bytes: usize, fill: u8) {
        let before = self.pending();
        let reply = self.apply(Command::PutMessage {
            queue: writer_queue(),
            text: Bytes::from(vec![fill; text_bytes]),
            visibility_timeout_s: 0,
            ttl_s: None,
        });
        assert!(matches!(reply, Reply::Messages(_)), "{reply:?}");
        let record_bytes = self.pending() - before;
        self.put_fixed_bytes = record_bytes - text_bytes - varint_bytes(text_bytes as u64);
    }

    /// One `Log::flush`, and the same take of the twin's journal.
    fn flush(&mut self) {
        let taken = self.twin.take_journal(LOG_FLUSH_BYTES_MAX);
        let flushed = block_on(self.log.flush(&self.state)).expect("a flush to memory");
        let Some((records, last_sequence)) = taken else {
            assert!(!flushed, "a flush wrote with nothing journaled");
            return;
        };
        assert!(flushed, "a flush wrote nothing with records journaled");
        assert_eq!(self.log.durable_sequence(), Some(last_sequence));
        let write = self.disk.last_write().expect("a flush writes");
        assert_eq!(
            write.bytes,
            records.len().next_multiple_of(STORAGE_BLOCK_BYTES),
            "a flush's write is its records padded to whole blocks"
        );
        self.flushes.push(Flush {
            write,
            records: records.freeze(),
        });
    }

    /// Every segment the log wrote reads back `Clean`, with exactly the records its flushes were
    /// given, where they were written; then segment `cut_segment` (modulo their count), cut at
    /// `cut_position` (modulo its length past the header), keeps every record that ended before
    /// the cut and is never `Corrupt`.
    fn check(self, cut_segment: usize, cut_position: usize) {
        let directory = Path::new(WRITER_DIRECTORY);
        assert_eq!(
            self.disk.files_in(directory, ".tmp"),
            Vec::new(),
            "a temporary file left"
        );
        let mut sequence_next = 0;
        let mut flushes_found = 0;
        let mut segments = Vec::new();
        for (name, file) in self.disk.files_in(directory, ".log") {
            let content = self.disk.content(file);
            let mut expected = Vec::new();
            for flush in self.flushes.iter().filter(|flush| flush.write.file == file) {
                flushes_found += 1;
                expected.extend(placed(flush, &content, &name));
            }
            let first = expected.first().expect("a segment holds a flush").sequence;
            let last = expected.last().expect("a segment holds a flush");
            let (last_sequence, last_end) = (last.sequence, last.end);
            assert_eq!(first, sequence_next, "{name}: not the next sequence");
            assert_eq!(name, segment_name(first), "a segment named otherwise");
            let data = Bytes::from(content);
            let read = read_segment(&data).unwrap_or_else(|why| panic!("{name}: {why}"));
            assert_eq!(read.header.first_sequence, first, "{name}: its header");
            assert_eq!(
                read.ending,
                Ending::Clean,
                "{name}: {} of {} records read",
                read.records.len(),
                expected.len()
            );
            assert_eq!(read.records.len(), expected.len(), "{name}: records read");
            for (index, ((sequence, record), placed)) in
                read.records.iter().zip(&expected).enumerate()
            {
                assert_eq!(*sequence, placed.sequence, "{name}: record {index}");
                assert_eq!(record, &placed.record, "{name}: record {index}");
            }
            let starts: Vec<usize> = expected.iter().map(|placed| placed.start).collect();
            assert_eq!(read.starts, starts, "{name}: where the records start");
            assert_eq!(read.end, last_end, "{name}: where the records end");
            sequence_next = last_sequence + 1;
            segments.push((data, expected));
        }
        assert_eq!(
            flushes_found,
            self.flushes.len(),
            "a flush outside the segments"
        );
        assert_eq!(Some(sequence_next), self.twin.journal_next_sequence());

        let (data, expected) = &segments[cut_segment % segments.len()];
        let cut = STORAGE_BLOCK_BYTES + cut_position % (data.len() - STORAGE_BLOCK_BYTES + 1);
        let mut damaged = data.to_vec();
        damaged[cut..].fill(0);
        let read = read_segment(&Bytes::from(damaged)).expect("the header is intact");
        assert!(
            !matches!(read.ending, Ending::Corrupt { .. }),
            "a cut at {cut} read as corruption: {:?}",
            read.ending
        );
        let whole_before_cut = expected.iter().filter(|placed| placed.end <= cut).count();
        assert!(
            read.records.len() >= whole_before_cut,
            "a cut at {cut}: {} records read, {whole_before_cut} ended before it",
            read.records.len()
        );
        assert!(read.records.len() <= expected.len());
        for (index, ((sequence, record), placed)) in read.records.iter().zip(expected).enumerate() {
            assert_eq!(*sequence, placed.sequence, "cut at {cut}: record {index}");
            assert_eq!(record, &placed.record, "cut at {cut}: record {index}");
        }
    }
}

/// The records `flush` was given, placed where it wrote them in `content` (the file `name`),
/// after checking that the file holds them there byte for byte, from a block boundary, with
/// only zeros after them to the end of the write.
fn placed(flush: &Flush, content: &[u8], name: &str) -> Vec<Placed> {
    let Write { offset, bytes, .. } = flush.write;
    let records_end = offset + flush.records.len();
    // Not `assert_eq!`: a failure would print up to a megabyte twice.
    assert!(
        content[offset..records_end] == flush.records[..],
        "{name}: the flush at {offset} holds other bytes than its records"
    );
    assert!(
        content[records_end..offset + bytes]
            .iter()
            .all(|&byte| byte == 0),
        "{name}: the flush at {offset} is not padded with zeros"
    );
    let mut placed = Vec::new();
    let mut at = 0;
    while at < flush.records.len() {
        match read(&flush.records, at) {
            Read::Record {
                sequence,
                record,
                bytes,
            } => {
                placed.push(Placed {
                    sequence,
                    record,
                    start: offset + at,
                    end: offset + at + bytes,
                });
                at += bytes;
            }
            other => panic!("the journal holds {other:?} at {at}"),
        }
    }
    placed
}

/// The one queue of the writer mode.
fn writer_queue() -> QueueKey {
    QueueKey {
        account: "devstoreaccount1".to_string(),
        name: "queue".to_string(),
    }
}

/// Bytes of the writer's first Put record beyond its text and its text's length (its numbers
/// as varints, small; a TTL of 7 days, the default; visible at its insertion): where the next
/// Put is aimed until a Put says (`Writer::put_fixed_bytes`).
fn put_fixed_bytes_first() -> usize {
    let message = MessageState {
        queue: 0,
        slot: 0,
        generation: 0,
        sequence: 0,
        insertion_ms: WRITER_NOW_MS,
        ttl_s: 7 * 24 * 3600,
        delay_s: 0,
        dequeue_count: 0,
        lease: 0,
        visible_ms: WRITER_NOW_MS,
        foreign_id: None,
        text: (),
    };
    put_record_bytes(&message, 0) - varint_bytes(0)
}

/// The length of a text whose record takes exactly `room` bytes for the text and its length (a
/// varint of 1 to 3 bytes), or about it where no length does (one size is skipped at each
/// width).
fn text_for_room(room: usize) -> usize {
    (1..=3)
        .map(|width| room.saturating_sub(width))
        .find(|&text| varint_bytes(text as u64) + text == room)
        .unwrap_or(room.saturating_sub(2))
}

/// A text length from 0 to `MESSAGE_TEXT_BYTES_MAX`: 16 bits and one more, low byte first.
fn text_length(input: &mut Input) -> usize {
    let length = usize::from(input.u16()) | usize::from(input.u8() & 1) << 16;
    length.min(MESSAGE_TEXT_BYTES_MAX)
}

/// The real writer: commands from the input on a shard with a durable log, flushed where the
/// input says, then every segment read back.
fn writer(input: &mut Input) {
    let (writer, cut_segment, cut_position) = write_session(input);
    writer.check(cut_segment, cut_position);
}

/// Boundaries a writer-mode input made the log write at.
#[derive(Debug, Default)]
pub struct WriterBoundaries {
    /// The padding (bytes from a flush's last record to the end of its block) of every flush
    /// that another flush followed in the same segment.
    pub paddings_followed: BTreeSet<usize>,
    /// For every record header split across a block boundary inside a flush, its bytes before
    /// the boundary (1 to 15).
    pub header_splits: BTreeSet<usize>,
}

/// The boundaries the writer mode wrote at for `data`, without the checks; `None` for the other
/// modes. For tests/fuzz_replay.rs, which holds the committed seeds to reaching the boundaries
/// random sizes seldom hit.
pub fn writer_boundaries(data: &[u8]) -> Option<WriterBoundaries> {
    let mut input = Input::new(data);
    if input.u8() % 4 != 3 {
        return None;
    }
    let (writer, _, _) = write_session(&mut input);
    let mut boundaries = WriterBoundaries::default();
    for (flush, next) in writer.flushes.iter().zip(writer.flushes.iter().skip(1)) {
        if next.write.file == flush.write.file {
            let padding = flush.write.bytes - flush.records.len();
            boundaries.paddings_followed.insert(padding);
        }
    }
    for flush in &writer.flushes {
        let mut at = 0;
        while let Read::Record { bytes, .. } = read(&flush.records, at) {
            // Flushes start on a block boundary: offsets within one are offsets within blocks.
            let before_boundary = at.next_multiple_of(STORAGE_BLOCK_BYTES) - at;
            if (1..RECORD_HEADER_BYTES).contains(&before_boundary) {
                boundaries.header_splits.insert(before_boundary);
            }
            at += bytes;
        }
    }
    Some(boundaries)
}

/// Runs the input's commands and flushes on a new writer, flushing all that is left at the
/// end; the writer, and the cut's segment and position for `Writer::check`.
fn write_session(input: &mut Input) -> (Writer, usize, usize) {
    let segment_blocks = 2 + usize::from(input.u8()) % (WRITER_SEGMENT_BLOCKS_MAX - 1);
    let durability = if input.bool() {
        Durability::Write
    } else {
        Durability::Fsync
    };
    let cut_segment = usize::from(input.u8());
    let cut_position = input.u32() as usize;
    let mut writer = Writer::new(segment_blocks * STORAGE_BLOCK_BYTES, durability);
    writer.apply(Command::CreateQueue {
        queue: writer_queue(),
        metadata: Vec::new(),
    });
    while !input.is_empty()
        && writer.commands < WRITER_COMMANDS_MAX
        && writer.journaled() < WRITER_JOURNAL_BYTES_MAX
    {
        match input.u8() % 8 {
            0 | 1 => {
                let text_bytes = text_length(input);
                let fill = input.u8();
                writer.put(text_bytes, fill);
            }
            // A Put that leaves what the next flush takes `padding` bytes short of a block
            // boundary: the padding that flush writes, or, with more records after it in the
            // same flush, where the next record's header starts before the boundary.
            2 => {
                let padding = usize::from(input.u16()) % STORAGE_BLOCK_BYTES;
                let blocks_more = usize::from(input.u8()) % (WRITER_BLOCKS_MORE_MAX + 1);
                let fill = input.u8();
                let to_boundary = STORAGE_BLOCK_BYTES
                    - (writer.pending() + writer.put_fixed_bytes + padding) % STORAGE_BLOCK_BYTES;
                let room = to_boundary % STORAGE_BLOCK_BYTES;
                let blocks_room = (MESSAGE_TEXT_BYTES_MAX - room) / STORAGE_BLOCK_BYTES;
                let room = room + blocks_more.min(blocks_room) * STORAGE_BLOCK_BYTES;
                writer.put(text_for_room(room), fill);
            }
            3 => {
                let count = 1 + u32::from(input.u8()) % MESSAGES_PER_GET_MAX;
                let visibility_timeout_s = 1 + u64::from(input.u8());
                let reply = writer.apply(Command::GetMessages {
                    queue: writer_queue(),
                    count,
                    visibility_timeout_s,
                });
                let Reply::Messages(views) = reply else {
                    panic!("a Get answered {reply:?}");
                };
                writer.leased.extend(
                    views
                        .iter()
                        .filter_map(|view| Some((view.message_id, view.pop_receipt?))),
                );
            }
            4 => {
                let index = usize::from(input.u16());
                if !writer.leased.is_empty() {
                    let at = index % writer.leased.len();
                    let (message_id, pop_receipt) = writer.leased.swap_remove(at);
                    writer.apply(Command::DeleteMessage {
                        queue: writer_queue(),
                        message_id,
                        pop_receipt,
                    });
                }
            }
            5 => {
                let index = usize::from(input.u16());
                let visibility_timeout_s = 1 + u64::from(input.u8());
                let with_text = input.bool();
                let text_bytes = usize::from(input.u16()) % (2 * STORAGE_BLOCK_BYTES + 1);
                let fill = input.u8();
                if !writer.leased.is_empty() {
                    let at = index % writer.leased.len();
                    let (message_id, pop_receipt) = writer.leased[at];
                    let reply = writer.apply(Command::UpdateMessage {
                        queue: writer_queue(),
                        message_id,
                        pop_receipt,
                        visibility_timeout_s,
                        text: with_text.then(|| Bytes::from(vec![fill; text_bytes])),
                    });
                    let Reply::Updated { pop_receipt, .. } = reply else {
                        panic!("an Update answered {reply:?}");
                    };
                    writer.leased[at].1 = pop_receipt;
                }
            }
            6 => {
                let value_bytes = usize::from(input.u16()) % (WRITER_METADATA_BYTES_MAX + 1);
                let letter = b'a' + input.u8() % 26;
                writer.apply(Command::SetQueueMetadata {
                    queue: writer_queue(),
                    metadata: vec![(
                        "key".to_string(),
                        String::from_utf8(vec![letter; value_bytes]).expect("ASCII"),
                    )],
                });
            }
            _ => writer.flush(),
        }
    }
    while writer.pending() > 0 {
        writer.flush();
    }
    (writer, cut_segment, cut_position)
}
