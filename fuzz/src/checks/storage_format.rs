//! `storage_format`: the readers of what a shard keeps on disk — `queue::record::read`,
//! `storage::format::read_segment` and `storage::format::read_snapshot` — fed raw bytes, and
//! fed segments and snapshots this check writes itself and then damages as a crash or a bad
//! disk would.
//!
//! First byte, mod 3:
//! - **0, raw**: the rest is a file. No reader panics; a segment read back has consecutive
//!   sequences from its header's first, ends within the file, names the first byte after its
//!   last record as the damage's offset, and every record it read, encoded again at its
//!   sequence, is byte for byte the file's (the encoding is canonical, so nothing is read that
//!   the writer could not have written). The same for a snapshot's entries and `read` itself.
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

use bytes::{Bytes, BytesMut};

use azq::limits::{LOG_FLUSH_BYTES_MAX, STORAGE_BLOCK_BYTES};
use azq::queue::record::{encode, read, MessageState, Read, Record};
use azq::queue::replicas::{AccessPolicy, CorsRule, ServiceProperties, SignedIdentifier};
use azq::queue::state::Identity;
use azq::queue::{MessageId, QueueKey};
use azq::storage::format::{
    read_segment, read_snapshot, segment_header, snapshot_header, snapshot_trailer, Ending,
    SNAPSHOT_HEADER_BYTES, SNAPSHOT_TRAILER_BYTES,
};

use super::input::Input;

/// Records one input writes at most (repeats of a big Put count one each).
const RECORDS_MAX: usize = 128;
/// The largest message text written (a real one is at most 64 KiB).
const TEXT_BYTES_MAX: usize = 64 * 1024;
/// The most times one generated Put is repeated: enough for 64 KiB texts to pass one flush.
const REPEATS_MAX: usize = 96;
/// Bytes of a segment header the header CRC covers, with the CRC.
const SEGMENT_HEADER_CHECKED_BYTES: usize = 36;

/// The property of the `storage_format` target: panics when it breaks.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    match input.u8() % 3 {
        0 => raw(input.rest()),
        1 => segment(&mut input),
        _ => snapshot(&mut input),
    }
}

/// Every reader on the bytes as they are.
fn raw(data: &[u8]) {
    let data = Bytes::copy_from_slice(data);
    if let Read::Record {
        sequence,
        record,
        bytes,
    } = read(&data)
    {
        assert_encodes_to(&record, sequence, &data[..bytes]);
    }
    if let Ok(segment) = read_segment(&data) {
        let mut at = STORAGE_BLOCK_BYTES;
        for (index, (sequence, record)) in segment.records.iter().enumerate() {
            assert_eq!(*sequence, segment.header.first_sequence + index as u64);
            // A flush's padding before it: a zero length, and zeros to the end of the block.
            if data[at..].starts_with(&[0; 4]) {
                let block_end = at.next_multiple_of(STORAGE_BLOCK_BYTES);
                assert!(data[at..block_end].iter().all(|&byte| byte == 0), "padding");
                at = block_end;
            }
            let mut encoded = BytesMut::new();
            encode(record, *sequence, &mut encoded);
            assert_eq!(
                &data[at..at + encoded.len()],
                &encoded[..],
                "record {index}"
            );
            at += encoded.len();
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
    if let Ok(snapshot) = read_snapshot(&data) {
        let mut at = SNAPSHOT_HEADER_BYTES;
        for (index, record) in snapshot.records.iter().enumerate() {
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
    let records = records(input);

    let mut file = snapshot_header(3, &identity, replay_from);
    for (index, record) in records.iter().enumerate() {
        encode(record, index as u64, &mut file);
    }
    file.extend_from_slice(&snapshot_trailer(records.len() as u64));
    let trailer_end = file.len();
    file.resize(trailer_end + padding, 0);

    match damage {
        0 => {
            let read = read_snapshot(&file.freeze()).expect("an intact snapshot");
            assert_eq!(read.shard, 3);
            assert_eq!(read.identity, identity);
            assert_eq!(read.replay_from, replay_from);
            assert_eq!(read.records, records);
        }
        1 => {
            file[position % trailer_end] ^= mask;
            assert!(
                read_snapshot(&file.freeze()).is_err(),
                "a changed byte at {} read as a snapshot",
                position % trailer_end
            );
        }
        _ => {
            file.truncate(position % trailer_end);
            assert!(
                read_snapshot(&file.freeze()).is_err(),
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
        match kind % 11 {
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
