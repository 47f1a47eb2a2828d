//! The two kinds of file a shard keeps, and reading them back.
//!
//! A **log segment** (`wal-<first sequence>.log`) is a 4 KiB header block (magic, format, shard,
//! ID prefix, first sequence, CRC) and then records (`queue::record`) back to back, as the
//! group commit wrote them; the rest of the preallocated file is zeros. Writes are whole blocks:
//! each flush starts on a fresh block and pads its last one with zeros, so a flush is one
//! aligned write (O_DIRECT on io_uring) that never touches a block an earlier flush wrote.
//! Where the record due is not found, zeros to the end of the block are that padding when the
//! next block starts with the record due: the padding can be shorter than a record's length
//! field (a flush that ends 1 to 3 bytes before a block boundary), so it is never told by the
//! length at the read position, which then mixes padding with the next flush's first bytes.
//! (Format 1, before padding, rewrote the last partial block; its segments read the same way.)
//! A segment is created as `segment.tmp` and renamed once its header is synced.
//!
//! A **snapshot** (`snapshot-<replay sequence>.snap`) is a header (magic, format, shard, the
//! shard's identity, the log sequence replay starts from), the shard's queues, settings and
//! messages as records numbered from 0, and a trailer (magic, entry count, the segments it
//! keeps, CRC). It is written to `snapshot.tmp` and renamed only once whole and synced, so a
//! snapshot under its name is complete. A message entry either copies its text
//! (`Record::MessagePut`) or names the log record that last wrote it
//! (`Record::MessageNamed`), in a segment before the replay point that the snapshot keeps: the
//! trailer lists every segment its entries name, and those stay while it is in place (format
//! 2; format 1, still read, copied every text and listed none). Messages untouched since their
//! put are named by the put records alone, many to an entry (`Record::PutsNamed`, a few bytes
//! a message: format 3; format 2 is still read).
//!
//! Reading a segment tells a **torn tail** (the last flush cut short by a crash: nothing it held
//! was acknowledged, so it is truncated) from **corruption** (an invalid record followed by
//! valid ones more than one flush later, or in a segment that is not the last: acknowledged
//! records are damaged, so recovery stops and names the file and offset).

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::{LOG_FLUSH_BYTES_MAX, RECORD_BODY_BYTES_MAX, STORAGE_BLOCK_BYTES};
use crate::queue::record::{crc32c, is_packed_put, read, Read, Record, RECORD_HEADER_BYTES};
use crate::queue::state::Identity;

/// The version of the snapshot format written: 4 may copy messages as packed puts (kind 14,
/// `record::put_packed_state`). A server that knows only formats 1 to 3 refuses these snapshots
/// by their version rather than read those entries as damage.
pub const FORMAT_VERSION: u32 = 4;
/// The snapshot format that may name messages by their put records alone
/// (`Record::PutsNamed`), before packed puts: still read, and a packed put in it is damage.
const FORMAT_VERSION_PUTS_NAMED: u32 = 3;
/// The snapshot format whose trailer lists the segments it keeps, before `Record::PutsNamed`:
/// still read (the same trailer), and such an entry in it is damage.
const FORMAT_VERSION_NAMED: u32 = 2;
/// The snapshot format before named entries: still read, its trailer without a list.
const FORMAT_VERSION_COPIED: u32 = 1;
/// The version of the segment format: 2 pads each flush to whole blocks, 3 writes puts packed
/// (kind 14, `record::put_packed_state`). A server that knows only format 1 refuses segments
/// of format 2 rather than read the padding as damage. One that knows only 1 and 2 refuses a
/// segment of format 3 with a record it reads after the header, but took a last one of packed
/// puts alone for a segment whose header never reached the disk, and removed it (helper-85's
/// review): the data format in `CURRENT` (`files::DATA_FORMAT`) keeps such a server off these
/// files. Formats 1 and 2 are still read, and a packed put in them is damage.
pub const SEGMENT_FORMAT_VERSION: u32 = 3;
/// The segment format before packed puts.
const SEGMENT_FORMAT_UNPACKED: u32 = 2;
const SEGMENT_MAGIC: &[u8; 8] = b"AZQWAL\0\x01";
const SNAPSHOT_MAGIC: &[u8; 8] = b"AZQSNP\0\x01";
const TRAILER_MAGIC: &[u8; 8] = b"AZQEND\0\x01";
/// Bytes of the snapshot header: magic, format, shard, prefix, sequence, version, replay, CRC.
pub const SNAPSHOT_HEADER_BYTES: usize = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 4;
/// Bytes of a snapshot trailer that lists no segment: magic, entry count, segment count, CRC
/// (each segment listed adds its first sequence, 8 bytes).
pub const SNAPSHOT_TRAILER_BYTES: usize = 8 + 8 + 4 + 4;
/// Bytes of a format 1 trailer: magic, entry count, CRC.
const TRAILER_BYTES_COPIED: usize = 8 + 8 + 4;

/// The name of the segment whose first record is `sequence`.
pub fn segment_name(sequence: u64) -> String {
    format!("wal-{sequence:020}.log")
}

/// The name of the snapshot whose log replay starts at `sequence`.
pub fn snapshot_name(sequence: u64) -> String {
    format!("snapshot-{sequence:020}.snap")
}

/// The name a snapshot is written under until it is whole.
pub const SNAPSHOT_TEMPORARY_NAME: &str = "snapshot.tmp";

/// The name a segment is created under until its header is synced.
pub const SEGMENT_TEMPORARY_NAME: &str = "segment.tmp";

/// The sequence in a segment's or snapshot's name, and which kind it is.
pub fn parse_name(name: &str) -> Option<(FileKind, u64)> {
    let (kind, digits) = if let Some(rest) = name.strip_prefix("wal-") {
        (FileKind::Segment, rest.strip_suffix(".log")?)
    } else {
        (
            FileKind::Snapshot,
            name.strip_prefix("snapshot-")?.strip_suffix(".snap")?,
        )
    };
    (digits.len() == 20 && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok().map(|sequence| (kind, sequence)))?
}

/// The kinds of file in a shard's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A log segment.
    Segment,
    /// A complete snapshot.
    Snapshot,
}

/// The header block of a segment for `shard` with `id_prefix`, whose first record is
/// `first_sequence`.
pub fn segment_header(shard: u32, id_prefix: u64, first_sequence: u64) -> BytesMut {
    let mut block = BytesMut::with_capacity(STORAGE_BLOCK_BYTES);
    block.put_slice(SEGMENT_MAGIC);
    block.put_u32_le(SEGMENT_FORMAT_VERSION);
    block.put_u32_le(shard);
    block.put_u64_le(id_prefix);
    block.put_u64_le(first_sequence);
    let crc = crc32c(&[&block[..]]);
    block.put_u32_le(crc);
    block.resize(STORAGE_BLOCK_BYTES, 0);
    block
}

/// A segment's header, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The shard that wrote it.
    pub shard: u32,
    /// The writer's message-ID prefix.
    pub id_prefix: u64,
    /// The sequence of its first record.
    pub first_sequence: u64,
    /// Its format version (1 to `SEGMENT_FORMAT_VERSION`).
    pub format: u32,
}

fn read_segment_header(data: &[u8]) -> Result<SegmentHeader, &'static str> {
    if data.len() < STORAGE_BLOCK_BYTES {
        return Err("a segment shorter than its header block");
    }
    if &data[0..8] != SEGMENT_MAGIC {
        return Err("not a log segment (bad magic)");
    }
    let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
    if crc32c(&[&data[0..32]]) != word(32) {
        return Err("a segment header whose CRC does not match");
    }
    if !(1..=SEGMENT_FORMAT_VERSION).contains(&word(8)) {
        return Err("a segment of another format version");
    }
    Ok(SegmentHeader {
        shard: word(12),
        id_prefix: long(16),
        first_sequence: long(24),
        format: word(8),
    })
}

/// How a segment's records end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Only zeros after the last record, to the end of the file: everything written is intact.
    Clean,
    /// An invalid record at `offset` with nothing valid after it within one flush: the last
    /// write was cut short. Recovery truncates the segment there.
    Torn {
        /// Where the first invalid byte is.
        offset: usize,
        /// What was wrong with it, for the log.
        reason: &'static str,
    },
    /// An invalid record at `offset` with valid records after it: damage to what was
    /// acknowledged.
    Corrupt {
        /// Where the invalid record starts.
        offset: usize,
        /// What was wrong with it.
        reason: &'static str,
    },
}

/// A segment read back: its header, its intact records in order, and how they end.
#[derive(Debug)]
pub struct Segment {
    /// The header.
    pub header: SegmentHeader,
    /// `(sequence, record)` of every intact record before the ending.
    pub records: Vec<(u64, Record)>,
    /// Where each of those records starts in the file.
    pub starts: Vec<usize>,
    /// Where the intact records end (the first byte after the last one).
    pub end: usize,
    /// How they end.
    pub ending: Ending,
}

/// A segment read back by `read_segment_with`: all but its records, which went to the caller.
#[derive(Debug)]
pub struct SegmentEnd {
    /// The header.
    pub header: SegmentHeader,
    /// How many intact records it holds before the ending.
    pub records: u64,
    /// Where the intact records end (the first byte after the last one).
    pub end: usize,
    /// How they end.
    pub ending: Ending,
}

/// Reads a segment. An error is a file that is not a segment at all (its header is bad).
pub fn read_segment(data: &Bytes) -> Result<Segment, &'static str> {
    let mut records = Vec::new();
    let mut starts = Vec::new();
    let read = read_segment_with(data, |sequence, place, record| {
        records.push((sequence, record));
        starts.push(place.start);
    })?;
    Ok(Segment {
        header: read.header,
        records,
        starts,
        end: read.end,
        ending: read.ending,
    })
}

/// Reads a segment as `read_segment` does, handing each intact record to `record` with its
/// sequence and where it is (from its header to its end), as it is read: recovery gathers the
/// records of every segment in one vector, not in one per segment first.
pub fn read_segment_with(
    data: &Bytes,
    mut record: impl FnMut(u64, Range<usize>, Record),
) -> Result<SegmentEnd, &'static str> {
    let header = read_segment_header(data)?;
    let mut records = 0;
    let mut at = STORAGE_BLOCK_BYTES;
    let mut expected = header.first_sequence;
    let ending = loop {
        match next(data, at, expected) {
            Next::Record { .. }
                if header.format <= SEGMENT_FORMAT_UNPACKED && is_packed_put(&data[at..]) =>
            {
                break classify(data, at, expected, "a packed put in a segment of format 2");
            }
            Next::Record {
                record: read,
                bytes,
            } => {
                record(expected, at..at + bytes, read);
                records += 1;
                at += bytes;
                // A segment's header can name any first sequence: after the largest one there
                // can be only zeros.
                let Some(due) = expected.checked_add(1) else {
                    break if data[at..].iter().all(|&byte| byte == 0) {
                        Ending::Clean
                    } else {
                        Ending::Torn {
                            offset: at,
                            reason: "bytes after the record of the largest sequence",
                        }
                    };
                };
                expected = due;
            }
            Next::Padding { block_end } => at = block_end,
            Next::End => break Ending::Clean,
            Next::Invalid(reason) => break classify(data, at, expected, reason),
        }
    };
    Ok(SegmentEnd {
        header,
        records,
        end: at,
        ending,
    })
}

/// What a segment holds at an offset where a given record is due.
enum Next {
    /// That record, and the bytes it takes.
    Record {
        /// The record.
        record: Record,
        /// Bytes from its first header byte to the next record.
        bytes: usize,
    },
    /// A flush's padding: zeros to `block_end`, where that record starts the next flush.
    Padding {
        /// The end of the padded block.
        block_end: usize,
    },
    /// Only zeros from here to the end of the file: the end of what was written.
    End,
    /// Neither: a torn write or damage.
    Invalid(&'static str),
}

/// What lies at `at` in `data`, where record `expected` is due. The record is tried first, then
/// a flush's padding. The padding is never decided by the bytes at `at` alone: a flush that ends
/// 1 to 3 bytes before a block boundary leaves less than a record length of zeros, and the
/// 4 bytes at `at` then mix the padding with the next flush's first record; and a record whose
/// length has zero low bytes may start with the same zeros, its header split across the
/// boundary.
fn next(data: &Bytes, at: usize, expected: u64) -> Next {
    let reason = match read(data, at) {
        Read::Record {
            sequence,
            record,
            bytes,
        } if sequence == expected => return Next::Record { record, bytes },
        Read::Record { .. } => "a record out of sequence",
        Read::End => "a zero length before written bytes",
        Read::Invalid(reason) => reason,
    };
    if let Some(padding) = padding(data, at, expected) {
        padding
    } else if data[at..].iter().all(|&byte| byte == 0) {
        // Past the end of what was written, a segment is zeros (preallocated, and a torn tail
        // is cut off at recovery): zeros with written bytes after them are damage.
        Next::End
    } else {
        Next::Invalid(reason)
    }
}

/// `Next::Padding` when `at` is inside a block, only zeros follow it to the block's end, and
/// the next block starts with record `expected`.
fn padding(data: &Bytes, at: usize, expected: u64) -> Option<Next> {
    let block_end = at.next_multiple_of(STORAGE_BLOCK_BYTES);
    let is_padding = block_end != at
        && block_end < data.len()
        && data[at..block_end].iter().all(|&byte| byte == 0)
        && matches!(
            read(data, block_end),
            Read::Record { sequence, .. } if sequence == expected
        );
    is_padding.then_some(Next::Padding { block_end })
}

/// The fewest bytes a record takes: its header and its type byte. Records are numbered one after
/// another, so a record that starts `n` bytes after another is at most `n / RECORD_BYTES_MIN`
/// sequences later.
const RECORD_BYTES_MIN: usize = RECORD_HEADER_BYTES + 1;

/// Sequences beyond what `RECORD_BYTES_MIN` allows that a search for intact records still
/// accepts: slack for the bound's rounding.
const SEQUENCES_SLACK: u64 = 64;

/// The intact records that start at or after an offset and are numbered from a given sequence
/// on, found by trying as a record every byte offset whose sequence field could be one of them
/// (at most as many sequences later than the first as records could fit in between), not by the
/// reader's rules: what lies beyond damage, or beyond whatever a reader stopped at.
pub struct IntactRecords<'a> {
    data: &'a Bytes,
    /// Where the search began: the bound on sequences grows with the distance from it.
    from: usize,
    /// The first sequence looked for.
    first: u64,
    /// Where the search goes on.
    offset: usize,
}

/// `IntactRecords` in `data` from offset `from`, numbered `first` or later.
pub fn intact_records(data: &Bytes, from: usize, first: u64) -> IntactRecords<'_> {
    IntactRecords {
        data,
        from,
        first,
        offset: from,
    }
}

impl IntactRecords<'_> {
    /// Goes on searching from `offset` (after a run of records the caller read itself).
    pub fn resume_at(&mut self, offset: usize) {
        self.offset = offset;
    }
}

impl Iterator for IntactRecords<'_> {
    /// Where the record starts, its sequence, the record, and the bytes it takes.
    type Item = (usize, u64, Record, usize);

    fn next(&mut self) -> Option<Self::Item> {
        let data = self.data;
        while self.offset.saturating_add(RECORD_HEADER_BYTES) <= data.len() {
            let offset = self.offset;
            self.offset += 1;
            let sequence = u64::from_le_bytes(data[offset + 8..offset + 16].try_into().expect("8"));
            // The cheap test first: most offsets (zeros, text) fail it.
            if sequence < self.first {
                continue;
            }
            let last = self
                .first
                .saturating_add(SEQUENCES_SLACK)
                .saturating_add(((offset - self.from) / RECORD_BYTES_MIN) as u64);
            if sequence > last {
                continue;
            }
            // A length no record has, read here without taking a slice of the file.
            let length =
                u32::from_le_bytes(data[offset..offset + 4].try_into().expect("4")) as usize;
            if length == 0
                || length > RECORD_BODY_BYTES_MAX
                || offset + RECORD_HEADER_BYTES + length > data.len()
            {
                continue;
            }
            if let Read::Record {
                sequence,
                record,
                bytes,
            } = read(self.data, offset)
            {
                self.offset = offset + bytes;
                return Some((offset, sequence, record, bytes));
            }
        }
        None
    }
}

/// An invalid record at `at` where `expected` was due. Intact records numbered after it are
/// looked for beyond it (`IntactRecords`: as many sequences later as records could fit in
/// between, so that several damaged spots, or a whole lost block of records, do not hide the
/// records after them); from each one found, the records that follow are read, and if they
/// reach further than one flush from `at`, acknowledged records lie beyond the damage:
/// corruption. A short run does not settle it (a message text may hold the bytes of a record),
/// so the search goes on after it. Without a long run, the damage is where the last flush was
/// cut short: a torn tail.
fn classify(data: &Bytes, at: usize, expected: u64, reason: &'static str) -> Ending {
    let limit = at.saturating_add(LOG_FLUSH_BYTES_MAX + STORAGE_BLOCK_BYTES);
    let mut found = intact_records(data, at + 1, expected.saturating_add(1));
    while let Some((offset, sequence, _, _)) = found.next() {
        // The run of records in sequence from here, across flushes' padding.
        let (mut end, mut due) = (offset, sequence);
        loop {
            match next(data, end, due) {
                Next::Record { bytes, .. } => {
                    end += bytes;
                    due = due.saturating_add(1);
                }
                Next::Padding { block_end } => end = block_end,
                Next::End | Next::Invalid(_) => break,
            }
        }
        if end > limit {
            return Ending::Corrupt { offset: at, reason };
        }
        // Every record start in the run leads to the same end.
        found.resume_at(end.max(offset + 1));
    }
    Ending::Torn { offset: at, reason }
}

/// The snapshot header for a shard with `identity` whose log replay starts at `replay_from`.
pub fn snapshot_header(shard: u32, identity: &Identity, replay_from: u64) -> BytesMut {
    let mut header = BytesMut::with_capacity(SNAPSHOT_HEADER_BYTES);
    header.put_slice(SNAPSHOT_MAGIC);
    header.put_u32_le(FORMAT_VERSION);
    header.put_u32_le(shard);
    header.put_u64_le(identity.id_prefix);
    header.put_u64_le(identity.sequence_next);
    header.put_u64_le(identity.replica_version_last);
    header.put_u64_le(replay_from);
    let crc = crc32c(&[&header[..]]);
    header.put_u32_le(crc);
    header
}

/// The snapshot trailer after `entries` records, whose entries name records in the segments
/// whose first sequences are `kept` (each once, in ascending order).
pub fn snapshot_trailer(entries: u64, kept: &[u64]) -> BytesMut {
    debug_assert!(kept.windows(2).all(|pair| pair[0] < pair[1]));
    let mut trailer = BytesMut::with_capacity(SNAPSHOT_TRAILER_BYTES + 8 * kept.len());
    trailer.put_slice(TRAILER_MAGIC);
    trailer.put_u64_le(entries);
    trailer.put_u32_le(u32::try_from(kept.len()).expect("fewer segments than 2^32"));
    for &segment in kept {
        trailer.put_u64_le(segment);
    }
    let crc = crc32c(&[&trailer[..]]);
    trailer.put_u32_le(crc);
    trailer
}

/// A snapshot's header, read back (its entries go to `read_snapshot`'s caller one by one), and
/// once it is read whole, the segments it keeps.
#[derive(Debug)]
pub struct Snapshot {
    /// The shard that wrote it.
    pub shard: u32,
    /// The shard's identity when the snapshot started.
    pub identity: Identity,
    /// The log sequence replay starts from.
    pub replay_from: u64,
    /// The format it was written in.
    format: u32,
    /// The first sequences of the segments its entries name (its trailer's list), ascending;
    /// empty until the trailer is read.
    pub kept: Vec<u64>,
}

/// Reads a snapshot's header; an error names what is wrong.
pub fn read_snapshot_header(data: &Bytes) -> Result<Snapshot, String> {
    if data.len() < SNAPSHOT_HEADER_BYTES || &data[0..8] != SNAPSHOT_MAGIC {
        return Err("not a snapshot (bad magic or too short)".to_string());
    }
    let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
    if crc32c(&[&data[0..SNAPSHOT_HEADER_BYTES - 4]]) != word(SNAPSHOT_HEADER_BYTES - 4) {
        return Err("a snapshot header whose CRC does not match".to_string());
    }
    let format = word(8);
    let known = [
        FORMAT_VERSION,
        FORMAT_VERSION_PUTS_NAMED,
        FORMAT_VERSION_NAMED,
        FORMAT_VERSION_COPIED,
    ];
    if !known.contains(&format) {
        return Err("a snapshot of another format version".to_string());
    }
    Ok(Snapshot {
        shard: word(12),
        identity: Identity {
            id_prefix: long(16),
            sequence_next: long(24),
            replica_version_last: long(32),
        },
        replay_from: long(40),
        format,
        kept: Vec::new(),
    })
}

/// The trailer at `at`, after `entries_read` entries, of a snapshot in `format`: the segments
/// it lists. An error names what is wrong.
fn read_trailer(
    data: &[u8],
    at: usize,
    format: u32,
    entries_read: u64,
) -> Result<Vec<u64>, String> {
    let wrong = || format!("a snapshot trailer that does not match at offset {at}");
    let rest = &data[at..];
    let long = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
    let word = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
    let (kept, crc_at) = if format == FORMAT_VERSION_COPIED {
        if rest.len() < TRAILER_BYTES_COPIED {
            return Err(wrong());
        }
        (Vec::new(), 16)
    } else {
        if rest.len() < SNAPSHOT_TRAILER_BYTES {
            return Err(wrong());
        }
        let count = word(16) as usize;
        let crc_at = count
            .checked_mul(8)
            .and_then(|listed| listed.checked_add(20))
            .filter(|crc_at| crc_at + 4 <= rest.len())
            .ok_or_else(wrong)?;
        let kept: Vec<u64> = (0..count).map(|index| long(20 + 8 * index)).collect();
        if !kept.windows(2).all(|pair| pair[0] < pair[1]) {
            return Err(wrong());
        }
        (kept, crc_at)
    };
    if crc32c(&[&rest[..crc_at]]) != word(crc_at) || long(8) != entries_read {
        return Err(wrong());
    }
    Ok(kept)
}

/// Reads a whole snapshot and returns its header, handing each entry to `entry` in order
/// (queues and settings first, then messages) as it is read, not gathered first: a snapshot of
/// millions of messages would otherwise take as much memory again in records. An error names
/// what is wrong (a snapshot under its final name is complete, so any damage is corruption);
/// the entries handed over before it are then of no use.
pub fn read_snapshot(data: &Bytes, mut entry: impl FnMut(Record)) -> Result<Snapshot, String> {
    read_snapshot_with(data, |_, record| entry(record))
}

/// Reads a snapshot as `read_snapshot` does, handing each entry to `entry` with where it is in
/// the file (recovery notes where each text is).
pub fn read_snapshot_with(
    data: &Bytes,
    mut entry: impl FnMut(Range<usize>, Record),
) -> Result<Snapshot, String> {
    let mut snapshot = read_snapshot_header(data)?;
    let mut entries_read = 0u64;
    let mut at = SNAPSHOT_HEADER_BYTES;
    loop {
        if data.len() >= at + 8 && &data[at..at + 8] == TRAILER_MAGIC {
            snapshot.kept = read_trailer(data, at, snapshot.format, entries_read)?;
            return Ok(snapshot);
        }
        match read(data, at) {
            Read::Record {
                sequence,
                record,
                bytes,
            } if sequence == entries_read => {
                let entry_format = if is_packed_put(&data[at..]) {
                    FORMAT_VERSION
                } else if matches!(record, Record::PutsNamed { .. }) {
                    FORMAT_VERSION_PUTS_NAMED
                } else {
                    FORMAT_VERSION_COPIED
                };
                if snapshot.format < entry_format {
                    return Err(format!(
                        "an entry of format {entry_format} in a snapshot of format {} at \
                         offset {at}",
                        snapshot.format
                    ));
                }
                entry(at..at + bytes, record);
                entries_read += 1;
                at += bytes;
            }
            Read::Record { .. } => {
                return Err(format!("a snapshot entry out of order at offset {at}"));
            }
            Read::End => return Err(format!("a snapshot without its trailer (offset {at})")),
            Read::Invalid(reason) => return Err(format!("{reason} at offset {at}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::record::encode;
    use crate::queue::QueueKey;

    fn record(queue: u32) -> Record {
        Record::QueueCreated {
            queue,
            key: QueueKey {
                account: "devstoreaccount1".to_string(),
                name: format!("queue-{queue}"),
            },
            // Not empty: a record that ends in zero bytes would read back whole from a cut
            // file padded with zeros.
            metadata: vec![("k".to_string(), "v".to_string())],
        }
    }

    /// A segment of `count` records from sequence 10, zero-padded to `length` bytes.
    fn segment(count: u64, length: usize) -> BytesMut {
        let mut data = segment_header(2, 0xabcd, 10);
        for sequence in 10..10 + count {
            encode(&record(sequence as u32), sequence, &mut data);
        }
        data.resize(length.max(data.len()), 0);
        data
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_name(&segment_name(42)), Some((FileKind::Segment, 42)));
        assert_eq!(
            parse_name(&snapshot_name(u64::MAX)),
            Some((FileKind::Snapshot, u64::MAX))
        );
        for other in [
            "wal-1.log",
            "snapshot.tmp",
            "wal-0000000000000000000x.log",
            "x",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_clean_segment_reads_back_whole() {
        let data = segment(5, 64 * 1024).freeze();
        let read = read_segment(&data).unwrap();
        assert_eq!(read.header.shard, 2);
        assert_eq!(read.header.id_prefix, 0xabcd);
        assert_eq!(read.records.len(), 5);
        assert_eq!(read.records[4], (14, record(14)));
        assert_eq!(read.ending, Ending::Clean);
    }

    #[test]
    fn a_cut_or_garbled_last_record_is_a_torn_tail() {
        let whole = segment(5, 0);
        let last_start = {
            let read = read_segment(&segment(4, 0).freeze()).unwrap();
            read.end
        };
        for cut in last_start + 1..whole.len() {
            let mut data = whole.clone();
            data.truncate(cut);
            data.resize(64 * 1024, 0);
            let read = read_segment(&data.freeze()).unwrap();
            assert_eq!(read.records.len(), 4, "cut at {cut}");
            assert!(
                matches!(read.ending, Ending::Torn { offset, .. } if offset == last_start),
                "cut at {cut}: {:?}",
                read.ending
            );
        }
        let mut garbage = whole.clone();
        garbage.put_slice(&[0xA5; 300]);
        let read = read_segment(&garbage.freeze()).unwrap();
        assert_eq!(read.records.len(), 5);
        assert!(matches!(read.ending, Ending::Torn { .. }));
    }

    #[test]
    fn damage_followed_by_valid_records_far_away_is_corruption() {
        // Enough records after the damaged one to pass one flush's worth of bytes.
        let count = 2 + (LOG_FLUSH_BYTES_MAX as u64 / 40);
        let mut data = segment(count, 0);
        let first_record = STORAGE_BLOCK_BYTES;
        data[first_record + 20] ^= 0x40;
        let read = read_segment(&data.freeze()).unwrap();
        assert!(read.records.is_empty());
        assert!(
            matches!(read.ending, Ending::Corrupt { offset, .. } if offset == first_record),
            "{:?}",
            read.ending
        );
        // The same damage with only a few records after it is within one flush: torn.
        let mut near = segment(6, 0);
        near[first_record + 20] ^= 0x40;
        let read = read_segment(&near.freeze()).unwrap();
        assert!(
            matches!(read.ending, Ending::Torn { .. }),
            "{:?}",
            read.ending
        );
    }

    #[test]
    fn a_record_inside_a_damaged_message_text_does_not_hide_corruption() {
        // A Put whose text starts with the bytes of the record due after it, then more text.
        let mut inner = BytesMut::new();
        encode(&record(11), 11, &mut inner);
        inner.put_slice(b"more text");
        let put = Record::MessagePut(crate::queue::record::MessageState {
            queue: 0,
            slot: 1,
            generation: 1,
            sequence: 1,
            insertion_ms: 0,
            ttl_s: 60,
            delay_s: 0,
            dequeue_count: 0,
            lease: 0,
            visible_ms: 0,
            foreign_id: None,
            text: inner.freeze(),
        });
        let mut data = segment_header(2, 0xabcd, 10);
        encode(&put, 10, &mut data);
        let count = 2 + (LOG_FLUSH_BYTES_MAX as u64 / 40);
        for sequence in 11..11 + count {
            encode(&record(sequence as u32), sequence, &mut data);
        }
        // Damage the Put's CRC: the first record found after it is the one in its text.
        data[STORAGE_BLOCK_BYTES + 4] ^= 0x01;
        let read = read_segment(&data.freeze()).unwrap();
        assert!(
            matches!(read.ending, Ending::Corrupt { offset, .. } if offset == STORAGE_BLOCK_BYTES),
            "{:?}",
            read.ending
        );
    }

    #[test]
    fn a_length_damaged_to_zero_is_not_the_end_of_the_log() {
        // Found by the storage_format fuzz target: a zero length read as a clean end, so every
        // acknowledged record after it was silently dropped.
        let count = 2 + (LOG_FLUSH_BYTES_MAX as u64 / 40);
        let mut data = segment(count, 0);
        data[STORAGE_BLOCK_BYTES..STORAGE_BLOCK_BYTES + 4].fill(0);
        let read = read_segment(&data.freeze()).unwrap();
        assert!(read.records.is_empty());
        assert!(
            matches!(read.ending, Ending::Corrupt { offset, .. } if offset == STORAGE_BLOCK_BYTES),
            "{:?}",
            read.ending
        );
        // The last record's length zeroed: its body follows, nothing intact after it.
        let mut last = segment(5, 64 * 1024);
        let last_start = read_segment(&segment(4, 0).freeze()).unwrap().end;
        last[last_start..last_start + 4].fill(0);
        let read = read_segment(&last.freeze()).unwrap();
        assert_eq!(read.records.len(), 4);
        assert!(
            matches!(read.ending, Ending::Torn { offset, .. } if offset == last_start),
            "{:?}",
            read.ending
        );
    }

    /// Found by review: the search for intact records after damage looked only 64 sequences
    /// ahead, so a second damaged record 65 records on, or a lost block of small records, hid
    /// every later record and the damage read as a torn tail, which recovery cuts off.
    #[test]
    fn damage_in_two_places_or_a_lost_block_is_still_corruption() {
        let deleted = |slot: u64| Record::<Bytes>::MessageDeleted {
            slot: slot as u32,
            generation: 1,
        };
        let mut data = segment_header(2, 0xabcd, 0);
        let mut starts = Vec::new();
        let count = 2 * LOG_FLUSH_BYTES_MAX as u64 / 25;
        for sequence in 0..count {
            starts.push(data.len());
            encode(&deleted(sequence), sequence, &mut data);
        }
        let mut twice = data.clone();
        for record in [1000, 1065, 5000] {
            twice[starts[record] + 20] ^= 0x10;
        }
        let read = read_segment(&twice.freeze()).unwrap();
        assert_eq!(read.records.len(), 1000);
        assert!(
            matches!(read.ending, Ending::Corrupt { offset, .. } if offset == starts[1000]),
            "{:?}",
            read.ending
        );
        let mut lost = data.clone();
        lost[10 * STORAGE_BLOCK_BYTES..11 * STORAGE_BLOCK_BYTES].fill(0);
        let read = read_segment(&lost.freeze()).unwrap();
        assert!(
            matches!(read.ending, Ending::Corrupt { .. }),
            "{:?}",
            read.ending
        );
    }

    /// A header naming the last sequences there are: the reader neither overflows nor reads on.
    #[test]
    fn a_segment_ending_at_the_largest_sequence_reads_without_overflow() {
        for first in [u64::MAX - 1, u64::MAX] {
            let mut data = segment_header(2, 0xabcd, first);
            for sequence in first..=u64::MAX {
                encode(&record(1), sequence, &mut data);
            }
            let clean = data.clone();
            let read = read_segment(&clean.freeze()).unwrap();
            assert_eq!(read.records.len() as u64, u64::MAX - first + 1);
            assert_eq!(read.ending, Ending::Clean);
            data.put_slice(&[0xA5; 40]);
            let read = read_segment(&data.freeze()).unwrap();
            assert!(
                matches!(read.ending, Ending::Torn { .. }),
                "{:?}",
                read.ending
            );
        }
    }

    #[test]
    fn a_bad_header_is_not_a_segment() {
        let mut data = segment(1, 0);
        data[20] ^= 1;
        assert!(read_segment(&data.freeze()).is_err());
        assert!(read_segment(&Bytes::from_static(b"short")).is_err());
    }

    /// A snapshot of `entries` records whose trailer lists `kept`, then 100 zeros of padding.
    fn snapshot(entries: u64, kept: &[u64]) -> Bytes {
        let identity = Identity {
            id_prefix: 0x1234_0001,
            sequence_next: 99,
            replica_version_last: 7,
        };
        let mut data = snapshot_header(1, &identity, 500);
        for entry in 0..entries {
            encode(&record(entry as u32), entry, &mut data);
        }
        data.put_slice(&snapshot_trailer(entries, kept));
        data.resize(data.len() + 100, 0);
        data.freeze()
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage() {
        let kept_lists: [&[u64]; 5] = [&[], &[0], &[u64::MAX], &[0, 1, 4096, u64::MAX], &[7; 0]];
        for kept in kept_lists {
            let whole = snapshot(3, kept);
            let mut records = Vec::new();
            let read = read_snapshot(&whole, |record| records.push(record)).unwrap();
            assert_eq!(read.shard, 1);
            assert_eq!(read.identity.sequence_next, 99);
            assert_eq!(read.replay_from, 500);
            assert_eq!(read.kept, kept);
            assert_eq!(records, vec![record(0), record(1), record(2)]);
            // Every bit of the trailer, and some elsewhere, flipped; every cut before its end.
            let trailer_start = whole.len() - 100 - SNAPSHOT_TRAILER_BYTES - 8 * kept.len();
            let flips = (trailer_start * 8..(whole.len() - 100) * 8)
                .chain([3 * 8, (SNAPSHOT_HEADER_BYTES + 30) * 8]);
            for bit in flips {
                let mut damaged = whole.to_vec();
                damaged[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    read_snapshot(&Bytes::from(damaged), drop).is_err(),
                    "{kept:?}: bit {bit}"
                );
            }
            for cut in trailer_start..whole.len() - 100 {
                let mut short = whole.slice(..cut).to_vec();
                short.resize(cut + 100, 0);
                assert!(
                    read_snapshot(&Bytes::from(short), drop).is_err(),
                    "{kept:?}: cut at {cut}"
                );
            }
        }
    }

    /// Random lists of segments round-trip; a list out of order, repeated, or longer than the
    /// file is refused (never read past its end).
    #[test]
    fn snapshot_trailers_round_trip_random_lists() {
        let mut random = crate::random::SplitMix64::new(40);
        for _ in 0..500 {
            let count = (random.next_u64() % 40) as usize;
            let mut kept: Vec<u64> = (0..count)
                .map(|_| random.next_u64() >> (random.next_u64() % 64))
                .collect();
            kept.sort_unstable();
            kept.dedup();
            let read = read_snapshot(&snapshot(2, &kept), drop).unwrap();
            assert_eq!(read.kept, kept);
        }
        // Written by hand (the writer asserts its list is ascending): a trailer listing `kept`
        // with `count` as its count.
        let trailer = |kept: &[u64], count: u32| {
            let mut data = snapshot(1, &[]).slice(..).to_vec();
            data.truncate(data.len() - 100 - SNAPSHOT_TRAILER_BYTES);
            let start = data.len();
            data.extend_from_slice(TRAILER_MAGIC);
            data.extend_from_slice(&1u64.to_le_bytes());
            data.extend_from_slice(&count.to_le_bytes());
            for segment in kept {
                data.extend_from_slice(&segment.to_le_bytes());
            }
            let crc = crc32c(&[&data[start..]]);
            data.extend_from_slice(&crc.to_le_bytes());
            data.resize(data.len() + 100, 0);
            Bytes::from(data)
        };
        assert_eq!(
            read_snapshot(&trailer(&[1, 2], 2), drop).unwrap().kept,
            [1, 2]
        );
        for (kept, count) in [
            (&[2u64, 1][..], 2),
            (&[1, 1], 2),
            (&[1], u32::MAX),
            (&[1], 200),
        ] {
            assert!(
                read_snapshot(&trailer(kept, count), drop).is_err(),
                "{kept:?} counted {count}"
            );
        }
    }

    /// A message put, numbered `sequence`: packed as the writer writes it, or of kind 5, as
    /// builds before packed puts wrote it.
    fn put(sequence: u64, packed: bool) -> BytesMut {
        let message = crate::queue::record::MessageState {
            queue: 1,
            slot: 300,
            generation: 2,
            sequence: 1 << 20,
            insertion_ms: 1_795_305_600_123,
            ttl_s: 604_800,
            delay_s: 0,
            dequeue_count: 0,
            lease: 0,
            visible_ms: 1_795_305_600_123,
            foreign_id: None,
            text: Bytes::from_static(b"a text"),
        };
        let mut data = BytesMut::new();
        if packed {
            encode(&Record::MessagePut(message), sequence, &mut data);
        } else {
            crate::queue::record::encode_unpacked_put(&message, sequence, &mut data);
        }
        data
    }

    /// Segments of format 1 and 2 (before packed puts) still read, their puts of kind 5
    /// too, and a packed put in one is damage, not read; a segment of format 3 reads both
    /// kinds.
    #[test]
    fn a_packed_put_reads_only_in_a_segment_of_format_3() {
        for format in 1..=SEGMENT_FORMAT_VERSION {
            let mut data = segment_header(2, 0xabcd, 10);
            data[8..12].copy_from_slice(&format.to_le_bytes());
            let crc = crc32c(&[&data[0..32]]);
            data[32..36].copy_from_slice(&crc.to_le_bytes());
            encode(&record(10), 10, &mut data);
            data.extend_from_slice(&put(11, false));
            data.extend_from_slice(&put(12, true));
            encode(&record(13), 13, &mut data);
            data.resize(64 * 1024, 0);
            let read = read_segment(&data.freeze()).unwrap();
            let sequences: Vec<u64> = read.records.iter().map(|(sequence, _)| *sequence).collect();
            if format == SEGMENT_FORMAT_VERSION {
                assert_eq!(sequences, [10, 11, 12, 13]);
                assert_eq!(read.records[1].1, read.records[2].1);
                assert_eq!(read.ending, Ending::Clean);
            } else {
                assert_eq!(sequences, [10, 11], "format {format}");
                assert_ne!(read.ending, Ending::Clean, "format {format}");
            }
        }
    }

    /// A snapshot of format 2 (before `Record::PutsNamed`) still reads, and such an entry in it
    /// is damage; the same entry in format 3 reads. A packed put reads only in format 4, a put
    /// of kind 5 in any.
    #[test]
    fn a_puts_named_entry_reads_only_in_format_3() {
        let puts = Record::PutsNamed {
            segment: 7,
            puts: vec![crate::queue::record::NamedPut {
                offset: 4096,
                record_bytes: 400,
                sequence: 3,
            }],
        };
        // Each entry encoded at its index, or a put (`put`): packed (1) or of kind 5 (0).
        let with_format_of = |format: u32, entries: &[Result<Record, bool>]| {
            let mut data = BytesMut::new();
            let identity = Identity {
                id_prefix: 1,
                sequence_next: 4,
                replica_version_last: 0,
            };
            data.put_slice(&snapshot_header(0, &identity, 9));
            for (index, entry) in entries.iter().enumerate() {
                match entry {
                    Ok(entry) => encode(entry, index as u64, &mut data),
                    Err(packed) => data.extend_from_slice(&put(index as u64, *packed)),
                }
            }
            data.put_slice(&snapshot_trailer(entries.len() as u64, &[7]));
            data[8..12].copy_from_slice(&format.to_le_bytes());
            let crc = crc32c(&[&data[..SNAPSHOT_HEADER_BYTES - 4]]);
            data[SNAPSHOT_HEADER_BYTES - 4..SNAPSHOT_HEADER_BYTES]
                .copy_from_slice(&crc.to_le_bytes());
            let mut records = Vec::new();
            read_snapshot(&data.freeze(), |record| records.push(record)).map(|read| {
                assert_eq!(read.kept, vec![7]);
                records
            })
        };
        let with_format = |format: u32, entries: &[Record]| {
            let entries: Vec<Result<Record, bool>> = entries.iter().cloned().map(Ok).collect();
            with_format_of(format, &entries)
        };
        assert_eq!(
            with_format(FORMAT_VERSION, &[record(0), puts.clone()]).unwrap(),
            vec![record(0), puts.clone()]
        );
        assert_eq!(
            with_format(FORMAT_VERSION_NAMED, &[record(0)]).unwrap(),
            vec![record(0)]
        );
        let refused = with_format(FORMAT_VERSION_NAMED, &[record(0), puts.clone()]).unwrap_err();
        assert!(refused.contains("an entry of format 3"), "{refused}");
        assert_eq!(
            with_format(FORMAT_VERSION_PUTS_NAMED, &[record(0), puts.clone()]).unwrap(),
            vec![record(0), puts]
        );
        assert!(with_format(FORMAT_VERSION + 1, &[record(0)]).is_err());
        // Packed puts: only in format 4; puts of kind 5 in each, read as the same message.
        let both = with_format_of(FORMAT_VERSION, &[Ok(record(0)), Err(false), Err(true)]);
        let both = both.unwrap();
        assert_eq!(both[1], both[2]);
        // (Format 1's trailer is another: `a_format_1_snapshot_still_reads`.)
        for format in [FORMAT_VERSION_NAMED, FORMAT_VERSION_PUTS_NAMED] {
            let unpacked = with_format_of(format, &[Ok(record(0)), Err(false)]);
            assert_eq!(unpacked.unwrap()[1], both[1], "{format}");
            let refused = with_format_of(format, &[Ok(record(0)), Err(true)]).unwrap_err();
            assert!(
                refused.contains("an entry of format 4"),
                "{format}: {refused}"
            );
        }
    }

    /// A snapshot of format 1 (before named entries: a trailer of magic, count and CRC) reads
    /// as listing no segment.
    #[test]
    fn a_format_1_snapshot_still_reads() {
        let mut data = snapshot(2, &[]).slice(..).to_vec();
        data[8..12].copy_from_slice(&FORMAT_VERSION_COPIED.to_le_bytes());
        let crc = crc32c(&[&data[..SNAPSHOT_HEADER_BYTES - 4]]);
        data[SNAPSHOT_HEADER_BYTES - 4..SNAPSHOT_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        data.truncate(data.len() - 100 - SNAPSHOT_TRAILER_BYTES);
        let start = data.len();
        data.extend_from_slice(TRAILER_MAGIC);
        data.extend_from_slice(&2u64.to_le_bytes());
        let crc = crc32c(&[&data[start..]]);
        data.extend_from_slice(&crc.to_le_bytes());
        data.resize(data.len() + 100, 0);
        let mut records = Vec::new();
        let read = read_snapshot(&Bytes::from(data.clone()), |record| records.push(record));
        assert_eq!(read.unwrap().kept, Vec::<u64>::new());
        assert_eq!(records, vec![record(0), record(1)]);
        // Read as format 2, the same bytes are a trailer cut short.
        data[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = crc32c(&[&data[..SNAPSHOT_HEADER_BYTES - 4]]);
        data[SNAPSHOT_HEADER_BYTES - 4..SNAPSHOT_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        assert!(read_snapshot(&Bytes::from(data), drop).is_err());
    }
}
