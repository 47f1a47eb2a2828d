//! The records a shard's state emits for every change, and their bytes on disk. Sans I/O: the
//! state appends them to its journal; `storage/` writes, reads and replays them.
//!
//! A record is a *blind write*: it carries the whole new value of what it changes (a message's
//! full state on Put, its mutable state on Get and Update, a queue's metadata, a setting), never
//! a difference from the previous value. Replaying a suffix of the log over a snapshot that
//! already reflects some of it therefore gives the same state as replaying it over one that does
//! not (snapshots are fuzzy: written in steps while the shard serves; see `storage::snapshot`).
//!
//! Messages are named by their slab `(slot, generation)` and queues by their record index, as
//! in `ShardState`, so a shard restarted with the same layout gets every message back in its
//! slot and every pop receipt it handed out still works; a restart with another shard count
//! re-homes them (`storage::recovery`).
//!
//! Framing: `length: u32` (of type and payload), `crc32c: u32` (of sequence, type and payload),
//! `sequence: u64` (consecutive within a shard's log), then the type byte and the payload, all
//! little-endian. A zero length is never a record: it is a flush's padding or the unwritten rest of
//! a segment, which `storage::format` tells apart.

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::RECORD_BODY_BYTES_MAX;

use super::command::Metadata;
use super::key::{MessageId, QueueKey, TextFile, TextLocator};
use super::replicas::{
    AccessPolicy, CorsRule, Logging, Metrics, RetentionPolicy, ServiceProperties, SignedIdentifier,
};

/// Bytes before a record's type byte: length, CRC, sequence.
pub const RECORD_HEADER_BYTES: usize = 16;

/// A message's whole state, as a Put record or a snapshot entry carries it. `T` holds the text:
/// `Bytes` when read, a borrowed slice when the shard writes a record of a message it stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageState<T = Bytes> {
    /// The queue record the message belongs to.
    pub queue: u32,
    /// The message's slab slot.
    pub slot: u32,
    /// The slot's generation while the message lives in it.
    pub generation: u32,
    /// The shard-wide insertion sequence (the low half of the message ID, the order tie-break).
    pub sequence: u64,
    /// `InsertionTime`, ms since the Unix epoch.
    pub insertion_ms: u64,
    /// Seconds from insertion to expiry, or `slab::TTL_S_NEVER`.
    pub ttl_s: u32,
    /// The put's visibility delay, seconds (the order key's time is insertion plus it).
    pub delay_s: u32,
    /// Times Get Messages has leased the message.
    pub dequeue_count: u32,
    /// Which lease the current pop receipt belongs to.
    pub lease: u32,
    /// When the message is visible again, ms since the Unix epoch (0: visible now).
    pub visible_ms: u64,
    /// The message's ID when another shard issued it (a restart with another shard count
    /// re-homed it); `None` when it is the shard's prefix and `sequence`.
    pub foreign_id: Option<MessageId>,
    /// The text exactly as put (or as the last Update set it).
    pub text: T,
}

/// When a message inserted at `insertion_ms` with a TTL of `ttl_s` expires, ms since the Unix
/// epoch (`EXPIRATION_NEVER_MS` for a TTL of -1).
pub fn expiration_ms(insertion_ms: u64, ttl_s: u32) -> u64 {
    if ttl_s == crate::queue::slab::TTL_S_NEVER {
        crate::queue::command::EXPIRATION_NEVER_MS
    } else {
        insertion_ms + u64::from(ttl_s) * 1000
    }
}

impl<T> MessageState<T> {
    /// When the message expires (`expiration_ms`).
    pub fn expiration_ms(&self) -> u64 {
        expiration_ms(self.insertion_ms, self.ttl_s)
    }

    /// The same message with `text` in place of its text.
    pub fn with_text<U>(self, text: U) -> MessageState<U> {
        MessageState {
            queue: self.queue,
            slot: self.slot,
            generation: self.generation,
            sequence: self.sequence,
            insertion_ms: self.insertion_ms,
            ttl_s: self.ttl_s,
            delay_s: self.delay_s,
            dequeue_count: self.dequeue_count,
            lease: self.lease,
            visible_ms: self.visible_ms,
            foreign_id: self.foreign_id,
            text,
        }
    }
}

/// One change of a shard's stored state; `T` holds message texts, as in `MessageState`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<T = Bytes> {
    /// A queue was created in record `queue`.
    QueueCreated {
        /// The queue's record index in the shard.
        queue: u32,
        /// Its account and name.
        key: QueueKey,
        /// Its metadata, in canonical order.
        metadata: Metadata,
    },
    /// Set Queue Metadata replaced a queue's metadata.
    QueueMetadataSet {
        /// The queue's record index.
        queue: u32,
        /// The new metadata, whole.
        metadata: Metadata,
    },
    /// Delete Queue: the queue, its messages and its stored access policies are gone.
    QueueDeleted {
        /// The queue's record index.
        queue: u32,
        /// Its account and name: the stored access policies of that name go too, whatever a
        /// fuzzy snapshot holds of the queue.
        key: QueueKey,
    },
    /// Clear Messages: the queue moved to an empty record, and its messages are gone.
    QueueCleared {
        /// The record the queue and its messages were in.
        queue: u32,
        /// The empty record the queue is in now.
        moved_to: u32,
        /// Its account and name, so that replaying the record over a fuzzy snapshot, which may
        /// already hold another queue in either record, moves only this queue (`None` in
        /// records written before it was kept).
        key: Option<QueueKey>,
    },
    /// Put Message stored a message.
    MessagePut(MessageState<T>),
    /// A snapshot's entry for a message whose text it does not copy: the message's whole
    /// state but its text, and where the log record that last wrote that text is, in a segment
    /// the snapshot keeps (its trailer lists it: `storage::format`). Never a log record.
    MessageNamed(MessageState<NamedText>),
    /// A snapshot's entry for messages untouched since their put (never leased, so never
    /// updated either): the `MessagePut` record that put each, in one segment the snapshot
    /// keeps (its trailer lists it), is the message's whole state, so the entry says only where
    /// those records are. Never a log record.
    PutsNamed {
        /// The segment, by its first sequence.
        segment: u64,
        /// The records, at least one.
        puts: Vec<NamedPut>,
    },
    /// Get Messages leased a message.
    MessageLeased {
        /// The message's slot.
        slot: u32,
        /// The slot's generation while it lives there.
        generation: u32,
        /// Its dequeue count after this Get.
        dequeue_count: u32,
        /// The lease the new pop receipt names.
        lease: u32,
        /// When the lease ends, ms since the Unix epoch.
        visible_ms: u64,
    },
    /// Update Message renewed a lease, or ended it, and maybe replaced the text.
    MessageUpdated {
        /// The message's slot.
        slot: u32,
        /// The slot's generation while it lives there.
        generation: u32,
        /// The lease the new pop receipt names.
        lease: u32,
        /// When the message is visible again, ms since the Unix epoch.
        visible_ms: u64,
        /// The new text, when the update carried one.
        text: Option<T>,
    },
    /// Delete Message.
    MessageDeleted {
        /// The message's slot.
        slot: u32,
        /// The slot's generation while it lived there.
        generation: u32,
    },
    /// Set Queue ACL, written by the queue's owner.
    AclSet {
        /// The queue the policies belong to.
        key: QueueKey,
        /// The writer's version of the setting.
        version: u64,
        /// The stored access policies, exactly as set.
        identifiers: Vec<SignedIdentifier>,
    },
    /// Set Service Properties, written by the account's home shard: the merged result, whole.
    PropertiesSet {
        /// The account.
        account: String,
        /// The writer's version of the setting.
        version: u64,
        /// The account's properties after the update.
        properties: ServiceProperties,
    },
}

const QUEUE_CREATED: u8 = 1;
const QUEUE_METADATA_SET: u8 = 2;
const QUEUE_DELETED: u8 = 3;
const QUEUE_CLEARED: u8 = 4;
const MESSAGE_PUT: u8 = 5;
const MESSAGE_LEASED: u8 = 6;
const MESSAGE_UPDATED: u8 = 7;
const MESSAGE_DELETED: u8 = 8;
const ACL_SET: u8 = 9;
const PROPERTIES_SET: u8 = 10;
/// `QueueCleared` with the queue's key (kind 4 is the same without it).
const QUEUE_CLEARED_KEYED: u8 = 11;
const MESSAGE_NAMED: u8 = 12;
const PUTS_NAMED: u8 = 13;
/// `MessagePut` with its numbers as varints (`put_packed_state`), what the writer writes since
/// segment format 3 and snapshot format 4; kind 5, the same with fixed-width numbers, is still
/// read.
const MESSAGE_PUT_PACKED: u8 = 14;
/// A packed put's flags: a foreign ID follows its numbers.
const PACKED_FOREIGN_ID: u8 = 1;
/// A packed put's flags: it is visible when its put's delay ends (its insertion time and
/// delay: `delay_end_ms`), as a Put record says; no time follows.
const PACKED_VISIBLE_AT_DELAY_END: u8 = 2;
/// A packed put's flags: when it is visible follows, as its difference from its insertion
/// time, zigzag (a copy in a snapshot of a leased message: its lease's end). With neither flag
/// it is 0, visible now (a copy of a message not leased).
const PACKED_VISIBLE_AT: u8 = 4;

/// Bytes of the smallest `MessagePut` record (header, type, flags, a byte for each of its nine
/// numbers, none for a visibility time nor a foreign ID, and an empty text's length): a named
/// put smaller than this is damage. Kind 5's (74 bytes and more) are never smaller.
pub const PUT_RECORD_BYTES_MIN: usize = RECORD_HEADER_BYTES + 1 + 1 + 9 + 1;

/// Where the text of a snapshot's named entry (`Record::MessageNamed`) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedText {
    /// The log record that last wrote it, in a segment.
    pub locator: TextLocator,
    /// That record's sequence (`record_text` checks it).
    pub sequence: u64,
    /// The text's bytes.
    pub text_bytes: u32,
}

/// A `MessagePut` record a snapshot's `Record::PutsNamed` entry names, in its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedPut {
    /// Where the record starts in the segment (below 2^63).
    pub offset: u64,
    /// Its bytes, header included (at least `PUT_RECORD_BYTES_MIN`).
    pub record_bytes: u32,
    /// Its sequence.
    pub sequence: u64,
}

impl NamedPut {
    /// Where the record is, in the segment whose first sequence is `segment`.
    pub fn locator(&self, segment: u64) -> TextLocator {
        TextLocator::new(TextFile::Segment(segment), self.offset, self.record_bytes)
    }
}

/// A record that carries a message's text, as `text_records` finds it in a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextRecord {
    /// Where the record starts in the batch.
    pub at: usize,
    /// The record's bytes, header included.
    pub bytes: usize,
    /// Its sequence.
    pub sequence: u64,
    /// The message's slot and generation.
    pub slot: u32,
    /// The slot's generation while the message lives in it.
    pub generation: u32,
}

/// The records of `records` (whole records back to back, as the journal hands them to the log:
/// no padding) that carry a message's text, in order: every `MessagePut`, and every
/// `MessageUpdated` with a text. Reads the framing and the fixed fields in place; the CRC is
/// not checked (the batch was just encoded, and a reader of the record checks it).
pub fn text_records(records: &[u8]) -> Vec<TextRecord> {
    let u32_at = |at: usize| u32::from_le_bytes(records[at..at + 4].try_into().expect("4 bytes"));
    let mut found = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let length = u32_at(at) as usize;
        assert!(
            length > 0,
            "a journal batch holds whole records, no padding"
        );
        let end = at + RECORD_HEADER_BYTES + length;
        assert!(end <= records.len(), "a record runs past its batch");
        let sequence = u64::from_le_bytes(records[at + 8..at + 16].try_into().expect("8 bytes"));
        let body = at + RECORD_HEADER_BYTES;
        // After the type byte: a packed put's flags, then its queue, slot and generation as
        // varints; MessageUpdated's slot, generation, lease, visible_ms, then 1 when a text
        // follows. (The log writes no put of kind 5.)
        let named = match records[body] {
            MESSAGE_PUT_PACKED => {
                let mut field = body + 2;
                let mut next = || {
                    let (value, bytes) = journal_varint(&records[field..]);
                    field += bytes;
                    u32::try_from(value).expect("a packed put's slot and generation are u32s")
                };
                let _queue = next();
                Some((next(), next()))
            }
            MESSAGE_UPDATED if records[body + 21] == 1 => {
                Some((u32_at(body + 1), u32_at(body + 5)))
            }
            _ => None,
        };
        if let Some((slot, generation)) = named {
            found.push(TextRecord {
                at,
                bytes: end - at,
                sequence,
                slot,
                generation,
            });
        }
        at = end;
    }
    found
}

/// Whether `record`, a whole record read intact at its start, is a packed put (kind 14): what
/// segments before format 3 and snapshots before format 4 cannot hold (`storage::format`).
pub fn is_packed_put(record: &[u8]) -> bool {
    record.get(RECORD_HEADER_BYTES) == Some(&MESSAGE_PUT_PACKED)
}

/// The varint (`put_varint`) `bytes` starts with, as the journal's own encoder wrote it, and
/// the bytes it takes.
fn journal_varint(bytes: &[u8]) -> (u64, usize) {
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            return (value, index + 1);
        }
    }
    panic!("a journal batch holds whole varints");
}

/// The text the record `record`, read whole from `locator`, carries, when it is a whole,
/// intact text record of the message (`slot`, `generation`), and in a log segment the record
/// numbered `sequence` (a snapshot numbers its entries apart from the log); `None` for anything
/// else (damage, another record: the locator is stale).
pub fn record_text(
    record: &Bytes,
    locator: TextLocator,
    sequence: u64,
    slot: u32,
    generation: u32,
) -> Option<Bytes> {
    let numbered = matches!(locator.file(), TextFile::Segment(_)).then_some(sequence);
    let (named, text) = match whole_record(record, locator, numbered)? {
        Record::MessagePut(message) => ((message.slot, message.generation), message.text),
        Record::MessageUpdated {
            slot,
            generation,
            text: Some(text),
            ..
        } => ((slot, generation), text),
        _ => return None,
    };
    (named == (slot, generation)).then_some(text)
}

/// The message the record `record`, read whole from `locator` in a log segment, puts, when it
/// is a whole, intact `MessagePut` record numbered `sequence` (`Record::PutsNamed`); `None` for
/// anything else (damage, another record).
pub fn record_put(record: &Bytes, locator: TextLocator, sequence: u64) -> Option<MessageState> {
    match whole_record(record, locator, Some(sequence))? {
        Record::MessagePut(message) => Some(message),
        _ => None,
    }
}

/// The record `record` holds, read whole from `locator`: intact, all of it, of the locator's
/// length, and numbered `sequence` where one is given; `None` for anything else.
fn whole_record(record: &Bytes, locator: TextLocator, sequence: Option<u64>) -> Option<Record> {
    let Read::Record {
        sequence: read_sequence,
        record: found,
        bytes,
    } = read(record, 0)
    else {
        return None;
    };
    let numbered = sequence.is_none_or(|sequence| read_sequence == sequence);
    (numbered && bytes == record.len() && bytes == locator.record_bytes() as usize).then_some(found)
}

/// Appends `message` as a put of kind 5 (fixed-width numbers), numbered `sequence`, as builds
/// before packed puts wrote it: for tests that read such files.
#[cfg(test)]
pub(crate) fn encode_unpacked_put(message: &MessageState, sequence: u64, out: &mut BytesMut) {
    frame_record(sequence, out, |out| {
        out.put_u8(MESSAGE_PUT);
        put_message_state(out, message);
        put_bytes(out, &message.text);
    });
}

/// CRC-32C (Castagnoli), hardware accelerated where the CPU has it, of `parts` in order.
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .fold(0, |crc, part| crc32c::crc32c_append(crc, part))
}

/// Appends `record`, numbered `sequence`, to `out`.
pub fn encode<T: AsRef<[u8]>>(record: &Record<T>, sequence: u64, out: &mut BytesMut) {
    frame_record(sequence, out, |out| encode_body(record, out));
}

/// Appends a record numbered `sequence` whose body (type byte first) `body` writes: its header
/// (the body's length, the CRC of the sequence and the body, the sequence) before it.
fn frame_record(sequence: u64, out: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    out.put_bytes(0, RECORD_HEADER_BYTES);
    body(out);
    let body_bytes = out.len() - start - RECORD_HEADER_BYTES;
    // The readers refuse a longer record as garbage: written, it would take every record after
    // it at the next start. Every request's fields are bounded far below this.
    assert!(
        body_bytes <= RECORD_BODY_BYTES_MAX,
        "a record of {body_bytes} bytes, longer than the readers accept"
    );
    let sequence_bytes = sequence.to_le_bytes();
    let crc = crc32c(&[&sequence_bytes, &out[start + RECORD_HEADER_BYTES..]]);
    out[start..start + 4].copy_from_slice(&(body_bytes as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out[start + 8..start + 16].copy_from_slice(&sequence_bytes);
}

fn encode_body<T: AsRef<[u8]>>(record: &Record<T>, out: &mut BytesMut) {
    match record {
        Record::QueueCreated {
            queue,
            key,
            metadata,
        } => {
            out.put_u8(QUEUE_CREATED);
            out.put_u32_le(*queue);
            put_key(out, key);
            put_metadata(out, metadata);
        }
        Record::QueueMetadataSet { queue, metadata } => {
            out.put_u8(QUEUE_METADATA_SET);
            out.put_u32_le(*queue);
            put_metadata(out, metadata);
        }
        Record::QueueDeleted { queue, key } => {
            out.put_u8(QUEUE_DELETED);
            out.put_u32_le(*queue);
            put_key(out, key);
        }
        Record::QueueCleared {
            queue,
            moved_to,
            key,
        } => {
            out.put_u8(if key.is_some() {
                QUEUE_CLEARED_KEYED
            } else {
                QUEUE_CLEARED
            });
            out.put_u32_le(*queue);
            out.put_u32_le(*moved_to);
            if let Some(key) = key {
                put_key(out, key);
            }
        }
        Record::MessagePut(message) => {
            out.put_u8(MESSAGE_PUT_PACKED);
            put_packed_state(out, message);
            let text = message.text.as_ref();
            put_varint(out, text.len() as u64);
            out.put_slice(text);
        }
        Record::MessageNamed(message) => {
            out.put_u8(MESSAGE_NAMED);
            put_message_state(out, message);
            let named = &message.text;
            let TextFile::Segment(segment) = named.locator.file() else {
                panic!("a named entry's text is in a segment");
            };
            out.put_u32_le(named.text_bytes);
            out.put_u64_le(segment);
            out.put_u64_le(named.locator.offset());
            out.put_u32_le(named.locator.record_bytes());
            out.put_u64_le(named.sequence);
        }
        Record::PutsNamed { segment, puts } => {
            assert!(!puts.is_empty(), "an entry names at least one put");
            out.put_u8(PUTS_NAMED);
            out.put_u64_le(*segment);
            out.put_u32_le(u32::try_from(puts.len()).expect("fewer puts than 2^32"));
            // Each record's offset and sequence as the difference from the one before (from 0
            // for the first), zigzag-encoded (any order reads back), then varints: a few bytes
            // a message where records lie in order.
            let (mut offset, mut sequence) = (0u64, 0u64);
            for put in puts {
                put_varint(out, zigzag(put.offset.wrapping_sub(offset)));
                put_varint(out, u64::from(put.record_bytes));
                put_varint(out, zigzag(put.sequence.wrapping_sub(sequence)));
                (offset, sequence) = (put.offset, put.sequence);
            }
        }
        Record::MessageLeased {
            slot,
            generation,
            dequeue_count,
            lease,
            visible_ms,
        } => {
            out.put_u8(MESSAGE_LEASED);
            out.put_u32_le(*slot);
            out.put_u32_le(*generation);
            out.put_u32_le(*dequeue_count);
            out.put_u32_le(*lease);
            out.put_u64_le(*visible_ms);
        }
        Record::MessageUpdated {
            slot,
            generation,
            lease,
            visible_ms,
            text,
        } => {
            out.put_u8(MESSAGE_UPDATED);
            out.put_u32_le(*slot);
            out.put_u32_le(*generation);
            out.put_u32_le(*lease);
            out.put_u64_le(*visible_ms);
            match text {
                Some(text) => {
                    out.put_u8(1);
                    put_bytes(out, text.as_ref());
                }
                None => out.put_u8(0),
            }
        }
        Record::MessageDeleted { slot, generation } => {
            out.put_u8(MESSAGE_DELETED);
            out.put_u32_le(*slot);
            out.put_u32_le(*generation);
        }
        Record::AclSet {
            key,
            version,
            identifiers,
        } => {
            out.put_u8(ACL_SET);
            out.put_u64_le(*version);
            put_key(out, key);
            out.put_u32_le(identifiers.len() as u32);
            for identifier in identifiers {
                put_str(out, &identifier.id);
                match &identifier.access_policy {
                    Some(policy) => {
                        out.put_u8(1);
                        put_optional_str(out, policy.start.as_deref());
                        put_optional_str(out, policy.expiry.as_deref());
                        put_optional_str(out, policy.permission.as_deref());
                    }
                    None => out.put_u8(0),
                }
            }
        }
        Record::PropertiesSet {
            account,
            version,
            properties,
        } => {
            out.put_u8(PROPERTIES_SET);
            out.put_u64_le(*version);
            put_str(out, account);
            let logging = &properties.logging;
            put_str(out, &logging.version);
            out.put_u8(u8::from(logging.delete));
            out.put_u8(u8::from(logging.read));
            out.put_u8(u8::from(logging.write));
            put_retention(out, &logging.retention_policy);
            for metrics in [&properties.hour_metrics, &properties.minute_metrics] {
                put_str(out, &metrics.version);
                out.put_u8(u8::from(metrics.enabled));
                out.put_u8(match metrics.include_apis {
                    None => 0,
                    Some(false) => 1,
                    Some(true) => 2,
                });
                put_retention(out, &metrics.retention_policy);
            }
            out.put_u32_le(properties.cors.len() as u32);
            for rule in &properties.cors {
                put_str(out, &rule.allowed_origins);
                put_str(out, &rule.allowed_methods);
                put_str(out, &rule.allowed_headers);
                put_str(out, &rule.exposed_headers);
                out.put_u64_le(rule.max_age_s);
            }
        }
    }
}

/// A message's state but its text: the fields a Put record and a named entry share.
fn put_message_state<T>(out: &mut BytesMut, message: &MessageState<T>) {
    out.put_u32_le(message.queue);
    out.put_u32_le(message.slot);
    out.put_u32_le(message.generation);
    out.put_u64_le(message.sequence);
    out.put_u64_le(message.insertion_ms);
    out.put_u32_le(message.ttl_s);
    out.put_u32_le(message.delay_s);
    out.put_u32_le(message.dequeue_count);
    out.put_u32_le(message.lease);
    out.put_u64_le(message.visible_ms);
    match message.foreign_id {
        Some(id) => {
            out.put_u8(1);
            out.put_u128_le(id.0);
        }
        None => out.put_u8(0),
    }
}

/// When a message inserted at `insertion_ms` with a delay of `delay_s` is visible: what a Put
/// record of it says (wrapping, as the writer and the reader both compute it: no record
/// holds such times, but every field may take any value).
fn delay_end_ms(insertion_ms: u64, delay_s: u32) -> u64 {
    insertion_ms.wrapping_add(u64::from(delay_s).wrapping_mul(1000))
}

/// A message's state but its text, as a packed put (`MESSAGE_PUT_PACKED`) writes it: its
/// flags (`PACKED_FOREIGN_ID`, `PACKED_VISIBLE_AT_DELAY_END`, `PACKED_VISIBLE_AT`), its queue,
/// slot, generation, sequence, insertion time, TTL, delay, dequeue count and lease as varints,
/// then, when the flags say so, when it is visible (zigzag, from its insertion time) and its
/// foreign ID. A Put record of 256 bytes takes 40 bytes beyond its text where kind 5 took 74:
/// about a tenth less log a message.
fn put_packed_state<T>(out: &mut BytesMut, message: &MessageState<T>) {
    let (visible_flag, visible) = packed_visibility(message);
    let foreign_flag = if message.foreign_id.is_some() {
        PACKED_FOREIGN_ID
    } else {
        0
    };
    out.put_u8(foreign_flag | visible_flag);
    for number in packed_numbers(message) {
        put_varint(out, number);
    }
    if let Some(visible) = visible {
        put_varint(out, visible);
    }
    if let Some(id) = message.foreign_id {
        out.put_u128_le(id.0);
    }
}

/// A packed put's nine numbers, in the order it writes them: queue, slot, generation,
/// sequence, insertion time, TTL, delay, dequeue count, lease.
fn packed_numbers<T>(message: &MessageState<T>) -> [u64; 9] {
    [
        message.queue.into(),
        message.slot.into(),
        message.generation.into(),
        message.sequence,
        message.insertion_ms,
        message.ttl_s.into(),
        message.delay_s.into(),
        message.dequeue_count.into(),
        message.lease.into(),
    ]
}

/// How a packed put says when `message` is visible: its flag (none for 0,
/// `PACKED_VISIBLE_AT_DELAY_END` for its delay's end), and, with `PACKED_VISIBLE_AT`, the
/// zigzag difference from its insertion time that follows its numbers.
fn packed_visibility<T>(message: &MessageState<T>) -> (u8, Option<u64>) {
    let delay_end = delay_end_ms(message.insertion_ms, message.delay_s);
    match message.visible_ms {
        0 => (0, None),
        visible_ms if visible_ms == delay_end => (PACKED_VISIBLE_AT_DELAY_END, None),
        visible_ms => (
            PACKED_VISIBLE_AT,
            Some(zigzag(visible_ms.wrapping_sub(message.insertion_ms))),
        ),
    }
}

/// Bytes the record `encode` writes for `Record::MessagePut(message)` with a text of
/// `text_bytes`, worked out from the fields without encoding it (the bounds of a change of
/// shard count count millions of messages).
pub fn put_record_bytes<T>(message: &MessageState<T>, text_bytes: usize) -> usize {
    let numbers: usize = packed_numbers(message).into_iter().map(varint_bytes).sum();
    let visible = packed_visibility(message).1.map_or(0, varint_bytes);
    let foreign_id = if message.foreign_id.is_some() { 16 } else { 0 };
    RECORD_HEADER_BYTES
        + 2
        + numbers
        + visible
        + foreign_id
        + varint_bytes(text_bytes as u64)
        + text_bytes
}

/// Bytes `put_varint` writes for `value`.
pub fn varint_bytes(value: u64) -> usize {
    (64 - value.leading_zeros() as usize).div_ceil(7).max(1)
}

/// A difference of two `u64`s (`wrapping_sub`) as a `u64` whose small magnitudes, of either
/// sign, are small numbers: 0, -1, 1, -2 become 0, 1, 2, 3.
fn zigzag(difference: u64) -> u64 {
    (difference << 1) ^ ((difference as i64 >> 63) as u64)
}

/// `zigzag`'s inverse.
fn unzigzag(encoded: u64) -> u64 {
    (encoded >> 1) ^ (encoded & 1).wrapping_neg()
}

/// `value` as LEB128: seven bits a byte, lowest first, the high bit set on every byte but the
/// last (1 to 10 bytes).
fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    out.put_u32_le(bytes.len() as u32);
    out.put_slice(bytes);
}

fn put_str(out: &mut BytesMut, text: &str) {
    put_bytes(out, text.as_bytes());
}

fn put_optional_str(out: &mut BytesMut, text: Option<&str>) {
    match text {
        Some(text) => {
            out.put_u8(1);
            put_str(out, text);
        }
        None => out.put_u8(0),
    }
}

fn put_key(out: &mut BytesMut, key: &QueueKey) {
    put_str(out, &key.account);
    put_str(out, &key.name);
}

fn put_metadata(out: &mut BytesMut, metadata: &Metadata) {
    out.put_u32_le(metadata.len() as u32);
    for (name, value) in metadata {
        put_str(out, name);
        put_str(out, value);
    }
}

fn put_retention(out: &mut BytesMut, retention: &RetentionPolicy) {
    out.put_u8(u8::from(retention.enabled));
    match retention.days {
        Some(days) => {
            out.put_u8(1);
            out.put_u32_le(days);
        }
        None => out.put_u8(0),
    }
}

/// What reading one record at a position found.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A whole, intact record and the bytes it took.
    Record {
        /// The record's sequence number.
        sequence: u64,
        /// The record.
        record: Record,
        /// Bytes from its first header byte to the next record.
        bytes: usize,
    },
    /// A zero length: the end of what was written.
    End,
    /// Not a record: cut short, a length out of bounds, a CRC that does not match, or a body
    /// that does not decode. The reason is for the log.
    Invalid(&'static str),
}

/// Reads the record at offset `at` of `data` (`at` at most its length). Text and other byte
/// fields share `data`'s memory; the fixed-size fields are read in place, without touching
/// `data`'s reference count (a mapped file's is atomic, and recovery reads millions of fields).
pub fn read(data: &Bytes, at: usize) -> Read {
    let rest = &data[at..];
    if rest.len() < RECORD_HEADER_BYTES {
        return if rest.iter().all(|&byte| byte == 0) {
            Read::End
        } else {
            Read::Invalid("a record header cut short")
        };
    }
    let length = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    if length == 0 {
        return Read::End;
    }
    if length > RECORD_BODY_BYTES_MAX {
        return Read::Invalid("a record length beyond any record");
    }
    let end = RECORD_HEADER_BYTES + length;
    if rest.len() < end {
        return Read::Invalid("a record cut short");
    }
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if crc32c(&[&rest[8..end]]) != crc {
        return Read::Invalid("a record whose CRC does not match");
    }
    let sequence = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
    let mut body = Cursor {
        data,
        at: at + RECORD_HEADER_BYTES,
        end: at + end,
    };
    match decode_body(&mut body) {
        Some(record) if body.at == body.end => Read::Record {
            sequence,
            record,
            bytes: end,
        },
        _ => Read::Invalid("a record body that does not decode"),
    }
}

/// A read position in a record body (`data[at..end]`); every read is checked against its end.
struct Cursor<'a> {
    data: &'a Bytes,
    at: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(count)?;
        if end > self.end {
            return None;
        }
        let taken = &self.data[self.at..end];
        self.at = end;
        Some(taken)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?[..].try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?[..].try_into().ok()?))
    }

    /// A varint (`put_varint`), only as the writer makes it: at most 10 bytes, no bits beyond
    /// the 64th, and no last byte of 0 after others (so one value has one encoding).
    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for index in 0..10 {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if index == 9 && byte > 1 {
                return None;
            }
            value |= bits << (7 * index);
            if byte & 0x80 == 0 {
                return (index == 0 || byte != 0).then_some(value);
            }
        }
        None
    }

    /// A varint that must fit 32 bits.
    fn varint_u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint()?).ok()
    }

    fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// A length-prefixed field, borrowed.
    fn field(&mut self) -> Option<&'a [u8]> {
        let length = self.u32()? as usize;
        self.take(length)
    }

    /// A length-prefixed field sharing `data`'s memory (a text).
    fn bytes(&mut self) -> Option<Bytes> {
        let field = self.field()?;
        Some(self.data.slice_ref(field))
    }

    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.field()?.to_vec()).ok()
    }

    fn optional_string(&mut self) -> Option<Option<String>> {
        match self.flag()? {
            true => Some(Some(self.string()?)),
            false => Some(None),
        }
    }

    fn key(&mut self) -> Option<QueueKey> {
        Some(QueueKey {
            account: self.string()?,
            name: self.string()?,
        })
    }

    /// A count of items each at least `item_bytes_min` long: one the body cannot hold is
    /// garbage (and must not size an allocation).
    fn count(&mut self, item_bytes_min: usize) -> Option<usize> {
        let count = self.u32()? as usize;
        (count.saturating_mul(item_bytes_min) <= self.end - self.at).then_some(count)
    }

    fn metadata(&mut self) -> Option<Metadata> {
        let count = self.count(8)?;
        let mut metadata = Metadata::with_capacity(count);
        for _ in 0..count {
            metadata.push((self.string()?, self.string()?));
        }
        Some(metadata)
    }

    /// A message's state but its text (`put_message_state`).
    fn message_state(&mut self) -> Option<MessageState<()>> {
        Some(MessageState {
            queue: self.u32()?,
            slot: self.u32()?,
            generation: self.u32()?,
            sequence: self.u64()?,
            insertion_ms: self.u64()?,
            ttl_s: self.u32()?,
            delay_s: self.u32()?,
            dequeue_count: self.u32()?,
            lease: self.u32()?,
            visible_ms: self.u64()?,
            foreign_id: match self.flag()? {
                true => Some(MessageId(u128::from_le_bytes(
                    self.take(16)?[..].try_into().ok()?,
                ))),
                false => None,
            },
            text: (),
        })
    }

    /// A packed put's state but its text (`put_packed_state`), only as the writer makes it:
    /// no flag it does not know, no two ways of saying when it is visible, no number past its
    /// width, and no visibility time written out that a flag says (0, or its delay's end), so
    /// that one state has one encoding.
    fn packed_state(&mut self) -> Option<MessageState<()>> {
        let flags = self.u8()?;
        let visible = PACKED_VISIBLE_AT_DELAY_END | PACKED_VISIBLE_AT;
        if flags & !(PACKED_FOREIGN_ID | visible) != 0 || flags & visible == visible {
            return None;
        }
        let queue = self.varint_u32()?;
        let slot = self.varint_u32()?;
        let generation = self.varint_u32()?;
        let sequence = self.varint()?;
        let insertion_ms = self.varint()?;
        let ttl_s = self.varint_u32()?;
        let delay_s = self.varint_u32()?;
        let dequeue_count = self.varint_u32()?;
        let lease = self.varint_u32()?;
        let delay_end = delay_end_ms(insertion_ms, delay_s);
        let visible_ms = if flags & PACKED_VISIBLE_AT != 0 {
            let visible_ms = insertion_ms.wrapping_add(unzigzag(self.varint()?));
            if visible_ms == 0 || visible_ms == delay_end {
                return None;
            }
            visible_ms
        } else if flags & PACKED_VISIBLE_AT_DELAY_END != 0 {
            // 0 is written as no time.
            if delay_end == 0 {
                return None;
            }
            delay_end
        } else {
            0
        };
        let foreign_id = if flags & PACKED_FOREIGN_ID != 0 {
            Some(MessageId(u128::from_le_bytes(
                self.take(16)?[..].try_into().ok()?,
            )))
        } else {
            None
        };
        Some(MessageState {
            queue,
            slot,
            generation,
            sequence,
            insertion_ms,
            ttl_s,
            delay_s,
            dequeue_count,
            lease,
            visible_ms,
            foreign_id,
            text: (),
        })
    }

    /// A packed put's text: its length as a varint, then its bytes, sharing `data`'s memory.
    fn packed_text(&mut self) -> Option<Bytes> {
        let length = usize::try_from(self.varint()?).ok()?;
        let text = self.take(length)?;
        Some(self.data.slice_ref(text))
    }

    fn retention(&mut self) -> Option<RetentionPolicy> {
        Some(RetentionPolicy {
            enabled: self.flag()?,
            days: match self.flag()? {
                true => Some(self.u32()?),
                false => None,
            },
        })
    }
}

fn decode_body(body: &mut Cursor) -> Option<Record> {
    Some(match body.u8()? {
        QUEUE_CREATED => Record::QueueCreated {
            queue: body.u32()?,
            key: body.key()?,
            metadata: body.metadata()?,
        },
        QUEUE_METADATA_SET => Record::QueueMetadataSet {
            queue: body.u32()?,
            metadata: body.metadata()?,
        },
        QUEUE_DELETED => Record::QueueDeleted {
            queue: body.u32()?,
            key: body.key()?,
        },
        QUEUE_CLEARED => Record::QueueCleared {
            queue: body.u32()?,
            moved_to: body.u32()?,
            key: None,
        },
        QUEUE_CLEARED_KEYED => Record::QueueCleared {
            queue: body.u32()?,
            moved_to: body.u32()?,
            key: Some(body.key()?),
        },
        MESSAGE_PUT => {
            let message = body.message_state()?;
            Record::MessagePut(message.with_text(body.bytes()?))
        }
        MESSAGE_PUT_PACKED => {
            let message = body.packed_state()?;
            Record::MessagePut(message.with_text(body.packed_text()?))
        }
        MESSAGE_NAMED => {
            let message = body.message_state()?;
            let text_bytes = body.u32()?;
            let segment = body.u64()?;
            let offset = body.u64()?;
            let record_bytes = body.u32()?;
            let sequence = body.u64()?;
            // A locator no record could have: damage, not a panic (`TextLocator::new`).
            if offset >= 1 << 63
                || (record_bytes as usize) < RECORD_HEADER_BYTES + 1 + text_bytes as usize
            {
                return None;
            }
            let locator = TextLocator::new(TextFile::Segment(segment), offset, record_bytes);
            Record::MessageNamed(message.with_text(NamedText {
                locator,
                sequence,
                text_bytes,
            }))
        }
        PUTS_NAMED => {
            let segment = body.u64()?;
            // Each put takes at least three bytes.
            let count = body.count(3)?;
            if count == 0 {
                return None;
            }
            let mut puts = Vec::with_capacity(count);
            let (mut offset, mut sequence) = (0u64, 0u64);
            for _ in 0..count {
                offset = offset.wrapping_add(unzigzag(body.varint()?));
                let record_bytes = u32::try_from(body.varint()?).ok()?;
                sequence = sequence.wrapping_add(unzigzag(body.varint()?));
                // A locator no put record could have: damage, not a panic.
                if offset >= 1 << 63 || (record_bytes as usize) < PUT_RECORD_BYTES_MIN {
                    return None;
                }
                puts.push(NamedPut {
                    offset,
                    record_bytes,
                    sequence,
                });
            }
            Record::PutsNamed { segment, puts }
        }
        MESSAGE_LEASED => Record::MessageLeased {
            slot: body.u32()?,
            generation: body.u32()?,
            dequeue_count: body.u32()?,
            lease: body.u32()?,
            visible_ms: body.u64()?,
        },
        MESSAGE_UPDATED => Record::MessageUpdated {
            slot: body.u32()?,
            generation: body.u32()?,
            lease: body.u32()?,
            visible_ms: body.u64()?,
            text: match body.flag()? {
                true => Some(body.bytes()?),
                false => None,
            },
        },
        MESSAGE_DELETED => Record::MessageDeleted {
            slot: body.u32()?,
            generation: body.u32()?,
        },
        ACL_SET => {
            let version = body.u64()?;
            let key = body.key()?;
            let count = body.count(5)?;
            let mut identifiers = Vec::with_capacity(count);
            for _ in 0..count {
                let id = body.string()?;
                let access_policy = match body.flag()? {
                    true => Some(AccessPolicy {
                        start: body.optional_string()?,
                        expiry: body.optional_string()?,
                        permission: body.optional_string()?,
                    }),
                    false => None,
                };
                identifiers.push(SignedIdentifier { id, access_policy });
            }
            Record::AclSet {
                key,
                version,
                identifiers,
            }
        }
        PROPERTIES_SET => {
            let version = body.u64()?;
            let account = body.string()?;
            let logging = Logging {
                version: body.string()?,
                delete: body.flag()?,
                read: body.flag()?,
                write: body.flag()?,
                retention_policy: body.retention()?,
            };
            let mut metrics = || -> Option<Metrics> {
                Some(Metrics {
                    version: body.string()?,
                    enabled: body.flag()?,
                    include_apis: match body.u8()? {
                        0 => None,
                        1 => Some(false),
                        2 => Some(true),
                        _ => return None,
                    },
                    retention_policy: body.retention()?,
                })
            };
            let hour_metrics = metrics()?;
            let minute_metrics = metrics()?;
            let count = body.count(24)?;
            let mut cors = Vec::with_capacity(count);
            for _ in 0..count {
                cors.push(CorsRule {
                    allowed_origins: body.string()?,
                    allowed_methods: body.string()?,
                    allowed_headers: body.string()?,
                    exposed_headers: body.string()?,
                    max_age_s: body.u64()?,
                });
            }
            Record::PropertiesSet {
                account,
                version,
                properties: ServiceProperties {
                    logging,
                    hour_metrics,
                    minute_metrics,
                    cors,
                },
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MESSAGE_TEXT_BYTES_MAX;

    /// A message record of `text_bytes` bytes of text: a Put, or an Update with or without one.
    fn message_record(kind: u64, slot: u32, text_bytes: usize) -> Record {
        let text = Bytes::from(vec![b'a' + (slot % 26) as u8; text_bytes]);
        match kind % 3 {
            0 => Record::MessagePut(MessageState {
                queue: slot.rotate_left(9),
                slot,
                generation: slot / 3,
                sequence: 40 + u64::from(slot),
                insertion_ms: 1_700_000_000_000,
                ttl_s: 60,
                delay_s: 0,
                dequeue_count: 0,
                lease: 0,
                visible_ms: 0,
                foreign_id: (slot % 2 == 0).then_some(MessageId(u128::from(slot) << 64)),
                text,
            }),
            1 => Record::MessageUpdated {
                slot,
                generation: slot / 3,
                lease: 2,
                visible_ms: 5,
                text: Some(text),
            },
            _ => Record::MessageUpdated {
                slot,
                generation: slot / 3,
                lease: 2,
                visible_ms: 5,
                text: None,
            },
        }
    }

    /// Checks `text_records` on `records`, encoded back to back from sequence 100: it finds
    /// exactly the records with a text, where they are, and each slice it names reads back
    /// (`record_text`) as that record's text, and as nothing under another sequence.
    fn check_text_records(records: &[Record]) {
        let mut batch = BytesMut::new();
        let mut starts = Vec::new();
        for (index, record) in records.iter().enumerate() {
            starts.push(batch.len());
            encode(record, 100 + index as u64, &mut batch);
        }
        let batch = batch.freeze();
        let expected: Vec<(usize, Bytes)> = records
            .iter()
            .enumerate()
            .filter_map(|(index, record)| match record {
                Record::MessagePut(message) => Some((index, message.text.clone())),
                Record::MessageUpdated {
                    text: Some(text), ..
                } => Some((index, text.clone())),
                _ => None,
            })
            .collect();
        let found = text_records(&batch);
        assert_eq!(found.len(), expected.len());
        for (text_record, (index, text)) in found.iter().zip(&expected) {
            assert_eq!(text_record.at, starts[*index]);
            assert_eq!(text_record.sequence, 100 + *index as u64);
            let end = starts.get(index + 1).copied().unwrap_or(batch.len());
            assert_eq!(text_record.bytes, end - starts[*index]);
            let (slot, generation) = match &records[*index] {
                Record::MessagePut(message) => (message.slot, message.generation),
                Record::MessageUpdated {
                    slot, generation, ..
                } => (*slot, *generation),
                other => panic!("{other:?}"),
            };
            assert_eq!(
                (text_record.slot, text_record.generation),
                (slot, generation)
            );
            let slice = batch.slice(text_record.at..text_record.at + text_record.bytes);
            let bytes = text_record.bytes as u32;
            let (sequence, named) = (text_record.sequence, (slot, generation));
            let text_at = |locator: TextLocator, sequence: u64, (slot, generation): (u32, u32)| {
                record_text(&slice, locator, sequence, slot, generation)
            };
            for file in [TextFile::Segment(3), TextFile::Snapshot(3)] {
                let locator = TextLocator::new(file, text_record.at as u64, bytes);
                assert_eq!(text_at(locator, sequence, named).as_ref(), Some(text));
                // Another message's slot or generation: not its text.
                assert_eq!(
                    text_at(locator, sequence, (slot.wrapping_add(1), generation)),
                    None
                );
                assert_eq!(
                    text_at(locator, sequence, (slot, generation.wrapping_add(1))),
                    None
                );
                // A locator of another length: stale.
                for other in [bytes - 1, bytes + 1] {
                    let locator = TextLocator::new(file, text_record.at as u64, other);
                    assert_eq!(text_at(locator, sequence, named), None);
                }
                // Cut short: not a text.
                let short = slice.slice(..slice.len() - 1);
                assert_eq!(
                    record_text(&short, locator, sequence, slot, generation),
                    None
                );
            }
            // In a segment the sequence must be the record's; a snapshot numbers apart.
            let segment = TextLocator::new(TextFile::Segment(3), text_record.at as u64, bytes);
            assert_eq!(text_at(segment, sequence + 1, named), None);
            let snapshot = TextLocator::new(TextFile::Snapshot(3), text_record.at as u64, bytes);
            assert_eq!(text_at(snapshot, sequence + 1, named).as_ref(), Some(text));
        }
    }

    /// A snapshot's entry of a message takes at most the message's `--max-memory` charge (its
    /// text and `MESSAGE_OVERHEAD_BYTES`), which the disk limits count on
    /// (`Log::snapshot_bytes_max`): a copy (`MessagePut`) at every text length and the largest,
    /// a named entry (`MessageNamed`) without its text, and a put named alone in an entry
    /// (`PutsNamed`), each with every field at its largest.
    #[test]
    fn a_snapshot_entry_takes_at_most_its_messages_charge() {
        use crate::limits::MESSAGE_OVERHEAD_BYTES;
        let entry_bytes = |record: &Record| {
            let mut out = BytesMut::new();
            encode(record, u64::MAX, &mut out);
            out.len()
        };
        let lengths = (0..=4200).chain([MESSAGE_TEXT_BYTES_MAX - 1, MESSAGE_TEXT_BYTES_MAX]);
        for text_bytes in lengths {
            let copied = Record::MessagePut(largest_state(Bytes::from(vec![b'x'; text_bytes])));
            assert!(entry_bytes(&copied) <= MESSAGE_OVERHEAD_BYTES + text_bytes);
        }
        let named = Record::MessageNamed(largest_state(NamedText {
            locator: TextLocator::new(TextFile::Segment(u64::MAX), (1 << 63) - 1, u32::MAX),
            sequence: u64::MAX,
            text_bytes: u32::MAX,
        }));
        assert!(entry_bytes(&named) <= MESSAGE_OVERHEAD_BYTES);
        let alone = Record::PutsNamed {
            segment: u64::MAX,
            puts: vec![NamedPut {
                offset: (1 << 63) - 1,
                record_bytes: u32::MAX,
                sequence: u64::MAX,
            }],
        };
        assert!(entry_bytes(&alone) <= MESSAGE_OVERHEAD_BYTES);
    }

    /// Every kind of record around text records of every length from 0 to past a block, and of
    /// the largest text: the walk finds the text records and only those, at every alignment of
    /// their fields in the batch.
    #[test]
    fn text_records_are_found_at_every_length_and_alignment() {
        let others = every_kind();
        for text_bytes in (0..=4200).chain([MESSAGE_TEXT_BYTES_MAX - 1, MESSAGE_TEXT_BYTES_MAX]) {
            let kind = text_bytes as u64;
            let mut records = vec![message_record(kind, 7, text_bytes)];
            records.push(others[text_bytes % others.len()].clone());
            records.push(message_record(kind + 1, 8, text_bytes));
            records.push(message_record(kind + 2, 9, text_bytes));
            check_text_records(&records);
        }
        check_text_records(&others);
        check_text_records(&[]);
    }

    /// Random batches of every kind of record, message records of random text lengths among
    /// them (fixed seeds): the walk agrees with the records encoded.
    #[test]
    fn text_records_round_trip_random_batches() {
        let others = every_kind();
        for seed in 0..200 {
            let mut random = crate::random::SplitMix64::new(seed);
            let count = random.next_u64() % 40;
            let records: Vec<Record> = (0..count)
                .map(|index| match random.next_u64() % 3 {
                    0 => others[(random.next_u64() % others.len() as u64) as usize].clone(),
                    _ => {
                        let text_bytes = match random.next_u64() % 8 {
                            0 => MESSAGE_TEXT_BYTES_MAX,
                            _ => (random.next_u64() % 5000) as usize,
                        };
                        let slot = draw(&mut random, u32::MAX.into()) as u32;
                        message_record(random.next_u64(), slot ^ index as u32, text_bytes)
                    }
                })
                .collect();
            check_text_records(&records);
        }
    }

    fn key() -> QueueKey {
        QueueKey {
            account: "devstoreaccount1".to_string(),
            name: "orders".to_string(),
        }
    }

    /// A message's state with every field at its largest, and `text`.
    fn largest_state<T>(text: T) -> MessageState<T> {
        MessageState {
            queue: u32::MAX,
            slot: u32::MAX,
            generation: u32::MAX,
            sequence: u64::MAX,
            insertion_ms: u64::MAX,
            ttl_s: u32::MAX,
            delay_s: u32::MAX,
            dequeue_count: u32::MAX,
            lease: u32::MAX,
            visible_ms: u64::MAX,
            foreign_id: Some(MessageId(u128::MAX)),
            text,
        }
    }

    /// One record of every kind, with every optional part both present and absent.
    pub(crate) fn every_kind() -> Vec<Record> {
        let mut properties = ServiceProperties::default();
        properties.logging.read = true;
        properties.hour_metrics.include_apis = Some(true);
        properties.minute_metrics.retention_policy = RetentionPolicy {
            enabled: true,
            days: Some(7),
        };
        properties.cors.push(CorsRule {
            allowed_origins: "https://a.example".to_string(),
            allowed_methods: "GET,PUT".to_string(),
            allowed_headers: "x-ms-meta-*".to_string(),
            exposed_headers: String::new(),
            max_age_s: 600,
        });
        vec![
            Record::QueueCreated {
                queue: 3,
                key: key(),
                metadata: vec![("Colour".to_string(), "blue é".to_string())],
            },
            Record::QueueMetadataSet {
                queue: 3,
                metadata: Vec::new(),
            },
            Record::QueueDeleted {
                queue: 3,
                key: key(),
            },
            Record::QueueCleared {
                queue: 3,
                moved_to: 9,
                key: None,
            },
            Record::QueueCleared {
                queue: 3,
                moved_to: 9,
                key: Some(key()),
            },
            Record::MessagePut(MessageState {
                queue: 3,
                slot: 17,
                generation: 2,
                sequence: 1 << 40,
                insertion_ms: 1_795_305_600_123,
                ttl_s: u32::MAX,
                delay_s: 30,
                dequeue_count: 4,
                lease: 5,
                visible_ms: 1_795_305_630_123,
                foreign_id: None,
                text: Bytes::from_static(b"hello <world>"),
            }),
            Record::MessagePut(MessageState {
                queue: 3,
                slot: 18,
                generation: 0,
                sequence: 2,
                insertion_ms: 1,
                ttl_s: 60,
                delay_s: 0,
                dequeue_count: 0,
                lease: 0,
                visible_ms: 0,
                foreign_id: Some(MessageId(u128::MAX - 7)),
                text: Bytes::new(),
            }),
            Record::MessageNamed(MessageState {
                queue: 3,
                slot: 19,
                generation: 1,
                sequence: 3,
                insertion_ms: 2,
                ttl_s: 60,
                delay_s: 0,
                dequeue_count: 1,
                lease: 1,
                visible_ms: 9,
                foreign_id: None,
                text: NamedText {
                    locator: TextLocator::new(TextFile::Segment(0), 0, 17),
                    sequence: 0,
                    text_bytes: 0,
                },
            }),
            Record::MessageNamed(largest_state(NamedText {
                locator: TextLocator::new(TextFile::Segment(u64::MAX), (1 << 63) - 1, u32::MAX),
                sequence: u64::MAX,
                text_bytes: u32::MAX - 17,
            })),
            Record::MessageLeased {
                slot: 17,
                generation: 2,
                dequeue_count: 5,
                lease: 6,
                visible_ms: 7,
            },
            Record::MessageUpdated {
                slot: 17,
                generation: 2,
                lease: 7,
                visible_ms: 8,
                text: Some(Bytes::new()),
            },
            Record::MessageUpdated {
                slot: 17,
                generation: 2,
                lease: 8,
                visible_ms: 0,
                text: None,
            },
            Record::MessageDeleted {
                slot: 17,
                generation: 2,
            },
            Record::AclSet {
                key: key(),
                version: 12,
                identifiers: vec![
                    SignedIdentifier {
                        id: "readers".to_string(),
                        access_policy: Some(AccessPolicy {
                            start: None,
                            expiry: Some("2026-11-23T00:00:00Z".to_string()),
                            permission: Some("rp".to_string()),
                        }),
                    },
                    SignedIdentifier {
                        id: "bare".to_string(),
                        access_policy: None,
                    },
                ],
            },
            Record::AclSet {
                key: key(),
                version: 13,
                identifiers: Vec::new(),
            },
            Record::PropertiesSet {
                account: "devstoreaccount1".to_string(),
                version: 14,
                properties,
            },
            Record::PutsNamed {
                segment: 0,
                puts: vec![NamedPut {
                    offset: 0,
                    record_bytes: PUT_RECORD_BYTES_MIN as u32,
                    sequence: 0,
                }],
            },
            Record::PutsNamed {
                segment: u64::MAX,
                puts: extreme_puts(),
            },
        ]
    }

    /// Named puts at every extreme, in and out of order: the largest and smallest offset,
    /// record size and sequence, steps of either sign.
    fn extreme_puts() -> Vec<NamedPut> {
        let put = |offset, record_bytes, sequence| NamedPut {
            offset,
            record_bytes,
            sequence,
        };
        let least = PUT_RECORD_BYTES_MIN as u32;
        vec![
            put((1 << 63) - 1, u32::MAX, u64::MAX),
            put(0, least, 0),
            put((1 << 63) - 1, least, u64::MAX),
            put(4096, 330, 1),
            put(4096 + 330, 330, 2),
            put(4096 + 660, 330, 3),
            put(4096, 330, 1),
            put(0, u32::MAX, u64::MAX),
        ]
    }

    /// The largest record of each kind a request can make, with every bounded field at its
    /// limit and more (metadata of one-byte names, the densest encoding of its 8 KiB), is far
    /// below what the readers accept, and reads back.
    #[test]
    fn the_largest_records_fit_what_the_readers_accept() {
        use crate::limits::{
            ANALYTICS_VERSION_BYTES_MAX, CORS_RULES_MAX, CORS_RULES_TEXT_BYTES_MAX,
            MESSAGE_TEXT_BYTES_MAX, METADATA_BYTES_MAX, SIGNED_IDENTIFIERS_MAX,
            SIGNED_IDENTIFIER_ID_CHARS_MAX,
        };
        let long_key = QueueKey {
            account: "a".repeat(64),
            name: "q".repeat(63),
        };
        let metadata: Vec<(String, String)> = (0..METADATA_BYTES_MAX)
            .map(|pair| (((pair % 26) as u8 + b'a').to_string(), String::new()))
            .collect();
        let mut properties = ServiceProperties::default();
        for metrics in [&mut properties.hour_metrics, &mut properties.minute_metrics] {
            metrics.version = "v".repeat(ANALYTICS_VERSION_BYTES_MAX);
        }
        properties.logging.version = "v".repeat(ANALYTICS_VERSION_BYTES_MAX);
        properties.cors = (0..CORS_RULES_MAX)
            .map(|_| CorsRule {
                allowed_origins: "o".repeat(CORS_RULES_TEXT_BYTES_MAX),
                allowed_methods: "GET".to_string(),
                allowed_headers: "h".repeat(CORS_RULES_TEXT_BYTES_MAX),
                exposed_headers: "e".repeat(CORS_RULES_TEXT_BYTES_MAX),
                max_age_s: u64::MAX,
            })
            .collect();
        let policy = AccessPolicy {
            start: Some("2026-01-01T00:00:00.0000000Z".to_string()),
            expiry: Some("2027-01-01T00:00:00.0000000Z".to_string()),
            permission: Some("raup".to_string()),
        };
        let largest = [
            Record::MessagePut(largest_state(Bytes::from(vec![
                b'x';
                MESSAGE_TEXT_BYTES_MAX
            ]))),
            Record::MessageUpdated {
                slot: u32::MAX,
                generation: u32::MAX,
                lease: u32::MAX,
                visible_ms: u64::MAX,
                text: Some(Bytes::from(vec![b'x'; MESSAGE_TEXT_BYTES_MAX])),
            },
            Record::QueueCreated {
                queue: u32::MAX,
                key: long_key.clone(),
                metadata: metadata.clone(),
            },
            Record::QueueMetadataSet {
                queue: u32::MAX,
                metadata,
            },
            Record::AclSet {
                key: long_key,
                version: u64::MAX,
                identifiers: (0..SIGNED_IDENTIFIERS_MAX)
                    .map(|_| SignedIdentifier {
                        id: "i".repeat(SIGNED_IDENTIFIER_ID_CHARS_MAX),
                        access_policy: Some(policy.clone()),
                    })
                    .collect(),
            },
            Record::PropertiesSet {
                account: "a".repeat(64),
                version: u64::MAX,
                properties,
            },
        ];
        for record in largest {
            let mut data = BytesMut::new();
            encode(&record, 7, &mut data);
            let body_bytes = data.len() - RECORD_HEADER_BYTES;
            assert!(
                body_bytes * 8 <= RECORD_BODY_BYTES_MAX,
                "{body_bytes} bytes: {:?}",
                &format!("{record:?}")[..40]
            );
            let found = match read(&data.freeze(), 0) {
                Read::Record { record, .. } => Some(record),
                _ => None,
            };
            assert_eq!(found.as_ref(), Some(&record));
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let mut log = BytesMut::new();
        for (sequence, record) in every_kind().iter().enumerate() {
            encode(record, sequence as u64 + 100, &mut log);
        }
        // Texts are found in Puts and in Updates with a text; a named entry holds none.
        let found: Vec<u64> = text_records(&log)
            .iter()
            .map(|text| text.sequence - 100)
            .collect();
        let with_text: Vec<u64> = (0..)
            .zip(every_kind())
            .filter(|(_, record)| {
                matches!(
                    record,
                    Record::MessagePut(_) | Record::MessageUpdated { text: Some(_), .. }
                )
            })
            .map(|(index, _)| index)
            .collect();
        assert_eq!(found, with_text);
        let mut data = log.freeze();
        for (sequence, expected) in every_kind().into_iter().enumerate() {
            match read(&data, 0) {
                Read::Record {
                    sequence: read_sequence,
                    record,
                    bytes,
                } => {
                    assert_eq!(read_sequence, sequence as u64 + 100);
                    assert_eq!(record, expected);
                    data = data.slice(bytes..);
                }
                other => panic!("{other:?} for {expected:?}"),
            }
        }
        assert_eq!(read(&data, 0), Read::End);
    }

    /// A named entry whose locator no record could have (an offset of 2^63 or more, where a
    /// locator keeps its kind of file; a record too short for its header, type byte and text)
    /// is damage: refused, never a panic.
    #[test]
    fn a_named_entry_with_an_impossible_locator_is_refused() {
        let named = |offset: u64, record_bytes: u32, text_bytes: u32| {
            let mut data = BytesMut::new();
            encode(&every_kind()[7], 1, &mut data);
            // The locator's fields, from the end: sequence 8, record bytes 4, offset 8,
            // segment 8, text bytes 4.
            let end = data.len();
            data[end - 12..end - 8].copy_from_slice(&record_bytes.to_le_bytes());
            data[end - 20..end - 12].copy_from_slice(&offset.to_le_bytes());
            data[end - 32..end - 28].copy_from_slice(&text_bytes.to_le_bytes());
            let crc = crc32c(&[&data[8..]]);
            data[4..8].copy_from_slice(&crc.to_le_bytes());
            read(&data.freeze(), 0)
        };
        assert!(matches!(named(5, 18, 1), Read::Record { .. }));
        assert!(matches!(
            named((1 << 63) - 1, u32::MAX, u32::MAX - 17),
            Read::Record { .. }
        ));
        for (offset, record_bytes, text_bytes) in [
            (1 << 63, 18, 1),
            (u64::MAX, 18, 1),
            (5, 17, 1),
            (5, 0, 0),
            (5, 16, 0),
            (5, u32::MAX, u32::MAX - 16),
            (5, u32::MAX, u32::MAX),
        ] {
            assert!(
                matches!(named(offset, record_bytes, text_bytes), Read::Invalid(_)),
                "{offset} {record_bytes} {text_bytes}"
            );
        }
    }

    /// Framed as `encode` frames a record: `body` (type byte first), numbered `sequence`.
    fn framed(body: &[u8], sequence: u64) -> Bytes {
        let mut data = BytesMut::new();
        frame_record(sequence, &mut data, |out| out.put_slice(body));
        data.freeze()
    }

    fn unpacked_put(message: &MessageState, sequence: u64) -> Bytes {
        let mut data = BytesMut::new();
        encode_unpacked_put(message, sequence, &mut data);
        data.freeze()
    }

    /// A number up to `largest`: near 0, near `largest`, at a varint's width boundary (2^7k
    /// and one less), or anywhere.
    fn draw(random: &mut crate::random::SplitMix64, largest: u64) -> u64 {
        let near = random.next_u64() % 4;
        let value = match random.next_u64() % 5 {
            0 => near,
            1 => largest - near.min(largest),
            2 => {
                let width = 1 + random.next_u64() % 9;
                (1u64 << (7 * width)).wrapping_sub(random.next_u64() % 2)
            }
            _ => random.next_u64(),
        };
        value.min(largest)
    }

    /// A message's state with random fields (`draw`), each form of visibility (now, when its
    /// delay ends, another time before or after its insertion), with or without a foreign ID,
    /// and a text of `text_bytes`.
    fn random_state(random: &mut crate::random::SplitMix64, text_bytes: usize) -> MessageState {
        let small = |random: &mut crate::random::SplitMix64| draw(random, u32::MAX.into()) as u32;
        let mut message = MessageState {
            queue: small(random),
            slot: small(random),
            generation: small(random),
            sequence: draw(random, u64::MAX),
            insertion_ms: draw(random, u64::MAX),
            ttl_s: small(random),
            delay_s: small(random),
            dequeue_count: small(random),
            lease: small(random),
            visible_ms: 0,
            foreign_id: (random.next_u64() % 2 == 0)
                .then(|| MessageId(u128::from(random.next_u64()) << 64 | 7)),
            text: Bytes::from(vec![b'q'; text_bytes]),
        };
        let delay_end = delay_end_ms(message.insertion_ms, message.delay_s);
        message.visible_ms = match random.next_u64() % 4 {
            0 => 0,
            1 => delay_end,
            2 => message.insertion_ms.wrapping_sub(draw(random, u64::MAX)),
            _ => message.insertion_ms.wrapping_add(draw(random, u64::MAX)),
        };
        message
    }

    /// A text length at a varint's width boundary, small, or up to the largest text.
    fn random_text_bytes(random: &mut crate::random::SplitMix64) -> usize {
        match random.next_u64() % 4 {
            0 => [0, 1, 127, 128, 16_383, 16_384][(random.next_u64() % 6) as usize],
            1 => MESSAGE_TEXT_BYTES_MAX - (random.next_u64() % 2) as usize,
            _ => (random.next_u64() % 600) as usize,
        }
    }

    /// The smallest put record the writer makes (every number 0, visible now, no foreign ID, an
    /// empty text) is `PUT_RECORD_BYTES_MIN`, the least a named put may name; a put of kind 5
    /// takes more.
    #[test]
    fn the_smallest_put_record_is_the_least_a_named_put_names() {
        let least = MessageState {
            queue: 0,
            slot: 0,
            generation: 0,
            sequence: 0,
            insertion_ms: 0,
            ttl_s: 0,
            delay_s: 0,
            dequeue_count: 0,
            lease: 0,
            visible_ms: 0,
            foreign_id: None,
            text: Bytes::new(),
        };
        let mut data = BytesMut::new();
        encode(&Record::MessagePut(least.clone()), 1, &mut data);
        assert_eq!(data.len(), PUT_RECORD_BYTES_MIN);
        assert_eq!(unpacked_put(&least, 1).len(), PUT_RECORD_BYTES_MIN + 46);
    }

    /// `put_record_bytes`, worked out from the fields, is what `encode` writes: every number at
    /// each varint width's least and largest value, each form of visibility, with and without a
    /// foreign ID, texts across the widths of their length; and the record reads back as
    /// written, never smaller than `PUT_RECORD_BYTES_MIN`.
    #[test]
    fn put_record_bytes_is_what_encode_writes_at_every_width() {
        let mut widths: Vec<u64> = vec![0, u64::MAX];
        for width in 1..10 {
            widths.extend([(1u64 << (7 * width)) - 1, 1 << (7 * width)]);
        }
        let base = match &every_kind()[5] {
            Record::MessagePut(message) => message.clone(),
            _ => panic!("the sixth kind is a put"),
        };
        let check = |message: MessageState| {
            let text_bytes = message.text.len();
            let record = Record::MessagePut(message);
            let mut data = BytesMut::new();
            encode(&record, 9, &mut data);
            let Record::MessagePut(message) = &record else {
                unreachable!()
            };
            assert_eq!(
                put_record_bytes(message, text_bytes),
                data.len(),
                "{message:?}"
            );
            assert!(data.len() >= PUT_RECORD_BYTES_MIN);
            match read(&data.freeze(), 0) {
                Read::Record { record: read, .. } => assert_eq!(read, record),
                other => panic!("{other:?} for {record:?}"),
            }
        };
        for field in 0..9 {
            for &value in &widths {
                let mut message = base.clone();
                let small = value.min(u32::MAX.into()) as u32;
                match field {
                    0 => message.queue = small,
                    1 => message.slot = small,
                    2 => message.generation = small,
                    3 => message.sequence = value,
                    4 => message.insertion_ms = value,
                    5 => message.ttl_s = small,
                    6 => message.delay_s = small,
                    7 => message.dequeue_count = small,
                    _ => message.lease = small,
                }
                let delay_end = delay_end_ms(message.insertion_ms, message.delay_s);
                let visible = [
                    0,
                    delay_end,
                    delay_end.wrapping_add(1),
                    message.insertion_ms.wrapping_sub(1),
                    message.insertion_ms.wrapping_add(value),
                    u64::MAX,
                ];
                for visible_ms in visible {
                    for foreign_id in [None, Some(MessageId(u128::MAX))] {
                        for text_bytes in [0, 127, 128, 16_383, 16_384, MESSAGE_TEXT_BYTES_MAX] {
                            check(MessageState {
                                visible_ms,
                                foreign_id,
                                text: Bytes::from(vec![b'x'; text_bytes]),
                                ..message.clone()
                            });
                        }
                    }
                }
            }
        }
    }

    /// Random states (`random_state`) round-trip as packed puts, at the size `put_record_bytes`
    /// says, and as puts of kind 5, which are still read: the same message either way.
    #[test]
    fn puts_round_trip_random_states_packed_and_of_kind_5() {
        let mut random = crate::random::SplitMix64::new(0x5eed_0014);
        for round in 0..20_000u64 {
            let text_bytes = random_text_bytes(&mut random);
            let message = random_state(&mut random, text_bytes);
            let record = Record::MessagePut(message.clone());
            let mut data = BytesMut::new();
            encode(&record, round, &mut data);
            assert_eq!(data.len(), put_record_bytes(&message, text_bytes));
            assert!(is_packed_put(&data));
            for data in [data.freeze(), unpacked_put(&message, round)] {
                match read(&data, 0) {
                    Read::Record {
                        sequence,
                        record: read,
                        bytes,
                    } => {
                        assert_eq!((sequence, bytes), (round, data.len()));
                        assert_eq!(read, record, "round {round}");
                    }
                    other => panic!("round {round}: {other:?} for {message:?}"),
                }
            }
            assert!(!is_packed_put(&unpacked_put(&message, round)));
        }
    }

    /// A packed put the writer never makes is damage, refused, never another message: a flag
    /// it does not know, both forms of visibility, a time written out that a flag says (0, or
    /// its delay's end), a delay's end of 0 by the flag, a 32-bit number past 32 bits, a text
    /// longer or shorter than its length says, bytes left after it.
    #[test]
    fn a_packed_put_the_writer_never_makes_is_refused() {
        // Flags, then the nine numbers, an optional time, and a text, all raw.
        let put =
            |flags: u8, numbers: [u64; 9], time: Option<u64>, text_length: u64, text: &[u8]| {
                let mut body = BytesMut::new();
                body.put_u8(MESSAGE_PUT_PACKED);
                body.put_u8(flags);
                for number in numbers {
                    put_varint(&mut body, number);
                }
                if let Some(time) = time {
                    put_varint(&mut body, time);
                }
                if flags & PACKED_FOREIGN_ID != 0 {
                    body.put_u128_le(5);
                }
                put_varint(&mut body, text_length);
                body.put_slice(text);
                read(&framed(&body, 3), 0)
            };
        // insertion 1000, delay 2: its delay ends at 3000.
        let numbers = [1, 2, 3, 4, 1000, 60, 2, 0, 0];
        let valid = |read: Read| matches!(read, Read::Record { .. });
        assert!(valid(put(0, numbers, None, 2, b"hi")));
        assert!(valid(put(PACKED_FOREIGN_ID, numbers, None, 2, b"hi")));
        assert!(valid(put(
            PACKED_VISIBLE_AT_DELAY_END,
            numbers,
            None,
            2,
            b"hi"
        )));
        assert!(valid(put(
            PACKED_VISIBLE_AT,
            numbers,
            Some(zigzag(1)),
            2,
            b"hi"
        )));
        assert!(valid(put(
            PACKED_VISIBLE_AT,
            numbers,
            Some(zigzag(1u64.wrapping_neg())),
            0,
            b""
        )));
        let mut wide = numbers;
        wide[0] = u64::from(u32::MAX);
        assert!(valid(put(0, wide, None, 0, b"")));
        let refused = |read: Read| matches!(read, Read::Invalid(_));
        for flags in 8..=255u8 {
            assert!(refused(put(flags, numbers, None, 2, b"hi")), "{flags}");
        }
        let both = PACKED_VISIBLE_AT | PACKED_VISIBLE_AT_DELAY_END;
        assert!(refused(put(both, numbers, None, 2, b"hi")));
        assert!(refused(put(both, numbers, Some(zigzag(1)), 2, b"hi")));
        // Written out, 0 (the insertion back to 0) and the delay's end.
        assert!(refused(put(
            PACKED_VISIBLE_AT,
            numbers,
            Some(zigzag(1000u64.wrapping_neg())),
            2,
            b"hi"
        )));
        assert!(refused(put(
            PACKED_VISIBLE_AT,
            numbers,
            Some(zigzag(2000)),
            2,
            b"hi"
        )));
        // A delay ending at 0, by the flag.
        let mut at_zero = numbers;
        at_zero[4] = 0;
        at_zero[6] = 0;
        assert!(refused(put(
            PACKED_VISIBLE_AT_DELAY_END,
            at_zero,
            None,
            2,
            b"hi"
        )));
        for field in [0, 1, 2, 5, 6, 7, 8] {
            let mut past = numbers;
            past[field] = u64::from(u32::MAX) + 1;
            assert!(refused(put(0, past, None, 2, b"hi")), "{field}");
        }
        assert!(refused(put(0, numbers, None, 3, b"hi")));
        assert!(refused(put(0, numbers, None, 1, b"hi")));
        assert!(refused(put(0, numbers, None, u64::MAX, b"hi")));
        // Cut short anywhere, or a byte after it.
        let mut body = BytesMut::new();
        encode(&every_kind()[5], 0, &mut body);
        let body = body.split_off(RECORD_HEADER_BYTES);
        for cut in 1..body.len() {
            assert!(refused(read(&framed(&body[..cut], 0), 0)), "{cut}");
        }
        let mut longer = body.to_vec();
        longer.push(0);
        assert!(refused(read(&framed(&longer, 0), 0)));
    }

    /// Zigzag and the varints round-trip every boundary: each length of varint (1 to 10 bytes)
    /// at its least and largest value, and differences of either sign at each.
    #[test]
    fn varints_and_zigzag_round_trip_every_length() {
        let mut values = vec![0, 1, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1];
        for bits in 1..64 {
            values.extend([(1u64 << bits) - 1, 1 << bits, (1 << bits) + 1]);
        }
        for value in values {
            assert_eq!(unzigzag(zigzag(value)), value, "{value}");
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            let bits = 64 - value.leading_zeros() as usize;
            assert_eq!(out.len(), bits.div_ceil(7).max(1), "{value}");
            let data = out.freeze();
            let mut cursor = Cursor {
                data: &data,
                at: 0,
                end: data.len(),
            };
            assert_eq!(cursor.varint(), Some(value));
            assert_eq!(cursor.at, data.len());
            // Cut short anywhere, it reads as nothing.
            for cut in 0..data.len() {
                let mut cursor = Cursor {
                    data: &data,
                    at: 0,
                    end: cut,
                };
                assert_eq!(cursor.varint(), None, "{value} cut at {cut}");
            }
        }
        // Small differences of either sign are small.
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(u64::MAX), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(u64::MAX - 1), 3);
        assert_eq!(zigzag(1 << 63), u64::MAX);
    }

    /// Varints the writer never makes read as nothing: longer than the value needs (a last
    /// byte of 0), bits beyond the 64th, more than 10 bytes.
    #[test]
    fn a_varint_the_writer_never_makes_is_refused() {
        let varint = |bytes: &[u8]| {
            let data = Bytes::copy_from_slice(bytes);
            let mut cursor = Cursor {
                data: &data,
                at: 0,
                end: data.len(),
            };
            cursor.varint()
        };
        assert_eq!(varint(&[0]), Some(0));
        assert_eq!(varint(&[0x7f]), Some(127));
        assert_eq!(varint(&[0x80, 1]), Some(128));
        let mut largest = [0xff; 10];
        largest[9] = 1;
        assert_eq!(varint(&largest), Some(u64::MAX));
        assert_eq!(varint(&[0x80, 0]), None);
        assert_eq!(varint(&[0xff, 0x80, 0]), None);
        for last in 2..=0x7f {
            let mut beyond = largest;
            beyond[9] = last;
            assert_eq!(varint(&beyond), None, "{last}");
        }
        assert_eq!(varint(&[0x80; 11]), None);
        let mut eleven = [0x80; 11];
        eleven[10] = 0;
        assert_eq!(varint(&eleven), None);
    }

    /// A named-puts entry with no put, or a put no record could be (an offset of 2^63 or more,
    /// fewer bytes than the smallest put, more than 2^32 - 1), is damage: refused, never a panic.
    #[test]
    fn a_puts_named_entry_naming_no_record_is_refused() {
        // Written by hand: a segment, a count, and each put's three varints (raw values).
        let entry = |count: u32, puts: &[[u64; 3]]| {
            let mut body = BytesMut::new();
            body.put_u8(PUTS_NAMED);
            body.put_u64_le(9);
            body.put_u32_le(count);
            for put in puts {
                for &value in put {
                    put_varint(&mut body, value);
                }
            }
            let mut data = BytesMut::new();
            data.put_u32_le(body.len() as u32);
            data.put_u32_le(0);
            data.put_u64_le(1);
            data.put_slice(&body);
            let crc = crc32c(&[&data[8..]]);
            data[4..8].copy_from_slice(&crc.to_le_bytes());
            read(&data.freeze(), 0)
        };
        let least = PUT_RECORD_BYTES_MIN as u64;
        let largest_offset = zigzag((1 << 63) - 1);
        assert!(matches!(entry(1, &[[0, least, 0]]), Read::Record { .. }));
        assert!(matches!(
            entry(1, &[[largest_offset, u64::from(u32::MAX), 1]]),
            Read::Record { .. }
        ));
        // Back from 2^63 - 1 to 0, then on to 2^63 - 1 again.
        assert!(matches!(
            entry(
                3,
                &[
                    [largest_offset, least, 0],
                    [zigzag(1u64.wrapping_sub(1 << 63)), least, 0],
                    [largest_offset, least, 0],
                ]
            ),
            Read::Record { .. }
        ));
        for (count, puts) in [
            (0, vec![]),
            (0, vec![[0, least, 0]]),
            (2, vec![[0, least, 0]]),
            (1, vec![[0, least, 0], [0, least, 0]]),
            (1, vec![[zigzag(1 << 63), least, 0]]),
            (1, vec![[zigzag(u64::MAX), least, 0]]),
            (2, vec![[largest_offset, least, 0], [2, least, 0]]),
            (1, vec![[0, least - 1, 0]]),
            (1, vec![[0, 0, 0]]),
            (1, vec![[0, u64::from(u32::MAX) + 1, 0]]),
            (u32::MAX, vec![[0, least, 0]]),
        ] {
            assert!(
                matches!(entry(count, &puts), Read::Invalid(_)),
                "{count} {puts:?}"
            );
        }
    }

    /// Random lists of named puts (values drawn near the extremes as often as anywhere, in any
    /// order, of any length up to a few thousand) read back as written.
    #[test]
    fn puts_named_entries_round_trip_random_lists() {
        let mut random = crate::random::SplitMix64::new(0x5eed_0013);
        // Near 0, near `largest`, or anywhere up to it.
        let draw = |random: &mut crate::random::SplitMix64, largest: u64| {
            let near = random.next_u64() % 256;
            match random.next_u64() % 4 {
                0 => near.min(largest),
                1 => largest - near.min(largest),
                _ => random.next_u64() % largest.saturating_add(1).max(1),
            }
        };
        for round in 0..300u64 {
            let count = 1 + if round % 10 == 0 {
                random.next_u64() % 4096
            } else {
                random.next_u64() % 40
            } as usize;
            let puts: Vec<NamedPut> = (0..count)
                .map(|_| NamedPut {
                    offset: draw(&mut random, (1 << 63) - 1),
                    record_bytes: draw(&mut random, u64::from(u32::MAX))
                        .max(PUT_RECORD_BYTES_MIN as u64) as u32,
                    sequence: draw(&mut random, u64::MAX),
                })
                .collect();
            let record = Record::PutsNamed {
                segment: draw(&mut random, u64::MAX),
                puts,
            };
            let mut data = BytesMut::new();
            encode(&record, round, &mut data);
            match read(&data.freeze(), 0) {
                Read::Record { record: read, .. } => assert_eq!(read, record, "round {round}"),
                other => panic!("round {round}: {other:?}"),
            }
        }
    }

    #[test]
    fn damage_is_invalid_never_a_different_record() {
        for kind in [4, 5, 6] {
            damage_is_invalid(&every_kind()[kind]);
        }
        assert_eq!(read(&Bytes::from_static(&[0; 40]), 0), Read::End);
        assert_eq!(read(&Bytes::new(), 0), Read::End);
    }

    fn damage_is_invalid(record: &Record) {
        let mut log = BytesMut::new();
        encode(record, 7, &mut log);
        let whole = log.freeze();
        // Every cut and every single-bit flip of a record is refused.
        for cut in 1..whole.len() {
            let read_back = read(&whole.slice(..cut), 0);
            assert!(
                matches!(read_back, Read::Invalid(_)),
                "cut at {cut}: {read_back:?}"
            );
        }
        for bit in 0..whole.len() * 8 {
            let mut flipped = whole.to_vec();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let read_back = read(&Bytes::from(flipped), 0);
            // A flip in the length may make it zero (end) or point past the data; never a record.
            assert!(
                !matches!(read_back, Read::Record { .. }),
                "bit {bit}: {read_back:?}"
            );
        }
    }
}
