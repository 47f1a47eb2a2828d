//! Start-up: the data directory back into shard states, before any shard serves.
//!
//! Each shard's directory gives a logical image: its newest snapshot, then every log record from
//! the sequence the snapshot says replay starts at (records are blind writes, so the ones the
//! fuzzy snapshot already reflects are harmless). Messages whose queue was deleted or cleared
//! later in the log are dropped by their queue's incarnation; expired ones when restored.
//!
//! A log that ends in a torn write is truncated there (the write was never acknowledged); damage
//! with intact records after it stops recovery with the file and offset, unless
//! `truncate_corrupt` (`--truncateCorruptLog`) cuts the log there instead. So does a snapshot's
//! named entry whose text is not found in the segment it keeps (the segment gone, or the record
//! damaged or another), unless `truncate_corrupt` leaves those messages out.
//!
//! **Nothing is cut that is not kept.** Before recovery truncates a segment with anything but
//! zeros after the cut, or removes a segment that holds more than its header, it copies the
//! segment as it was to `DIR/__azq__/kept/` (synced, its name durable) and names the copy in its
//! note: a reader that misreads a segment (as one did: a flush's padding of 1 to 3 bytes taken
//! for a record length) then costs a restart's availability of those records, never the bytes.
//! The copies of earlier starts take at most `RECOVERY_KEPT_BYTES_MAX`, the oldest going first.
//!
//! Whatever else a power cut can leave without anything acknowledged in it is cleaned up, each
//! with one note: a segment or snapshot still under its temporary name, a last segment whose
//! header never reached the disk (written by a server that created segments under their final
//! name) or that holds no record, older snapshots and the segments a snapshot covers that the
//! server had no time to remove, a generation or `CURRENT.tmp` of an interrupted change of
//! shard count. Every removal is made durable (its directory synced) before anything is
//! written after it.
//!
//! With the shard count of the files, every shard's image goes back into the same shard, every
//! queue and message into its old record and slot: pop receipts handed out before the restart
//! still work. With another count, queues go to the shards that own them now, messages keep
//! their IDs and receipts (see `queue::state::Restorer`), and the result is written as a new
//! generation before the old one is removed.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};

use super::files::{
    current_text, generation_name, parse_current, parse_generation, shard_directory_name, Files,
    CURRENT_FILE_NAME, CURRENT_TEMPORARY_NAME, DATA_FORMAT, KEPT_DIRECTORY_NAME,
};
use super::format::{
    intact_records, parse_name, read_segment_with, read_snapshot, read_snapshot_header,
    read_snapshot_with, segment_name, snapshot_header, snapshot_name, snapshot_trailer, Ending,
    FileKind, SEGMENT_TEMPORARY_NAME, SNAPSHOT_TEMPORARY_NAME,
};
use super::pages::{Pages, SlotPages};
use super::slim::{SlimMessage, SlimText, Sources, TextPlace};
use super::space::FreeDiskMin;
use crate::limits::{
    LOG_SEGMENT_BYTES, RECOVERY_KEPT_BYTES_MAX, RECOVERY_NAMED_CHUNK_BYTES,
    RECOVERY_NAMED_RESIDENT_BYTES, RECOVERY_THREAD_STACK_BYTES, RECOVERY_UNLOAD_STEP_BYTES,
    RESHARD_MESSAGE_BYTES, SNAPSHOT_STEP_SLOTS, SNAPSHOT_STEP_TEXT_BYTES, STORAGE_BLOCK_BYTES,
};
use crate::queue::key::{TextFile, TextLocator};
use crate::queue::record::{
    encode, put_record_bytes, record_put, record_text, text_records, MessageState, NamedPut,
    NamedText, Record,
};
use crate::queue::state::texts::{
    Naming, RecoveredTexts, TextWritten, TextsRead, RECOVERED_TEXT_SEQUENCE,
};
use crate::queue::state::{Identity, Restorer};
use crate::queue::Secret;
use crate::queue::SignedIdentifier;
use crate::queue::{
    home_shard, shard_for, Encoded, MessageId, Metadata, QueueKey, Replica, ServiceProperties,
    ShardState,
};

/// What recovery may do beyond the safe default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryOptions {
    /// Cut a log at damage that has intact records after it, losing them, instead of refusing
    /// to start (`--truncateCorruptLog`).
    pub truncate_corrupt: bool,
    /// Say where each restored text is (`ShardStart::texts`), for texts to leave memory
    /// (`--text-memory`): with the shard count of the files, whose snapshot and segments the
    /// shards keep.
    pub locate_texts: bool,
    /// The most bytes of text a change of shard count may copy through memory (the new
    /// generation's snapshots are written from memory, every text in them): more refuses to
    /// start, naming the shard count that keeps the files as they are. `None`: no bound.
    pub reshard_text_bytes_max: Option<u64>,
    /// The memory this process may have (the smaller of the RAM and the cgroup's limit), which
    /// a change of shard count with texts located must fit: it holds about
    /// `RESHARD_MESSAGE_BYTES` a message while it moves them. More refuses to start (a default
    /// count keeps the files' count, as for `reshard_text_bytes_max`). `None`: no bound.
    pub reshard_memory_bytes_max: Option<u64>,
    /// What `--min-free-disk` keeps free, which a change of shard count must leave: it writes
    /// every message, queue and setting anew beside the files until the new generation is in
    /// place (`reshard_disk_bytes`), and past the free space (`Files::space`, measured once
    /// recovery has removed what an interrupted change left) less this it is refused before
    /// anything is written (a default count keeps the files' count, as for the bounds above),
    /// where the writing would otherwise meet ENOSPC at every start. `None`, or a file system
    /// that cannot be measured: no bound.
    pub free_disk_min: Option<FreeDiskMin>,
    /// `--max-disk`, which azq's files must stay within while a change of shard count writes
    /// the new generation beside the old (the old generation's files and the new one's, as
    /// `reshard_disk_bytes` bounds it), and each new shard's files within its even share once
    /// the old files are gone (its part of the new generation and a log segment), as the
    /// running shards count them (`kept/` and the small files outside): past it the change is
    /// refused as past the free space is. `None`: no bound.
    pub disk_bytes_max: Option<u64>,
    /// This start's shard count is a default (no `--shards` or `--cpus`): where that bound
    /// refuses a change of shard count, recovery keeps the files' count instead when it is at
    /// most this start's (a shard for each of fewer CPUs), with a note, and `Recovered::shards`
    /// says how many.
    pub shards_default: bool,
}

/// A log segment of a shard, as the running shard's writer takes them over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentFile {
    /// The sequence of its first record.
    pub first_sequence: u64,
    /// Where it is.
    pub path: PathBuf,
    /// Bytes of records (from its header to the end of its last record, padded to a block).
    pub bytes: u64,
    /// Bytes allocated on disk: `bytes` for a segment recovery read (it cut the preallocated
    /// room after the records), the segment size for one the running log closed.
    pub allocated_bytes: u64,
    /// Bytes of the records carrying texts that the running log wrote in it while it tracked
    /// texts (`Log::dead_segments_due`: a snapshot that gives it up copies those still in
    /// memory). 0 for one recovery read with texts located, where every live text but the
    /// empty ones stays on disk only; `None` for one it read without (not counted).
    pub text_record_bytes: Option<u64>,
}

/// One shard, ready to serve: its state (durable from the next record on) and its files.
pub struct ShardStart {
    /// The restored state, its journal started at the next sequence.
    pub state: ShardState,
    /// The shard's directory.
    pub directory: PathBuf,
    /// Its log segments, oldest first; the running shard starts a new one.
    pub segments: Vec<SegmentFile>,
    /// Its current snapshot, if it has one, with its size.
    pub snapshot: Option<(PathBuf, u64)>,
    /// The segments before the replay point that the snapshot keeps (its entries name records
    /// there), oldest first.
    pub kept: Vec<SegmentFile>,
    /// The bytes of the records the snapshot's entries name in them.
    pub kept_named_bytes: u64,
    /// The messages restored from their put records alone (`Record::PutsNamed`), and those
    /// whose state the snapshot wrote beside the record it named (`Record::MessageNamed`).
    pub named: (u64, u64),
    /// How many messages recovery left out, their texts named by the snapshot and not found
    /// (`--truncateCorruptLog`): until a snapshot replaces that one, every start would need
    /// the flag again (and copy a damaged segment aside again), so one is due at once
    /// (`Log::wants_snapshot`; helper-53's review).
    pub left_out: u64,
    /// Where its restored texts are, in that snapshot and those segments, when asked
    /// (`RecoveryOptions::locate_texts`).
    pub texts: RecoveredTexts,
}

/// What recovery brought back.
pub struct Recovered {
    /// Every shard, in order.
    pub shards: Vec<ShardStart>,
    /// One line: what was loaded and how long it took.
    pub summary: String,
    /// What recovery did that a user should know: torn tails truncated, damage cut off, an old
    /// generation re-homed.
    pub notes: Vec<String>,
}

/// A queue in a shard's image.
struct ImageQueue {
    key: QueueKey,
    metadata: Metadata,
    /// Distinguishes a record index reused by a later queue, so that messages of a deleted or
    /// cleared queue never join it.
    incarnation: u64,
}

/// A message of an image: its state, slim (`storage::slim`); its foreign ID, if any, in
/// `Image::foreign_ids`, and its text in `Image::held` when it is not slim.
struct ImageMessage {
    message: SlimMessage,
    /// The incarnation of its queue when it was put.
    incarnation: u64,
}
const _: () = assert!(std::mem::size_of::<ImageMessage>() == 88);

/// What a change of shard count moves into one new shard (`Image::kept`).
#[derive(Clone, Copy, Debug, Default)]
struct Kept {
    /// Its messages.
    messages: u64,
    /// The bytes of their texts.
    text_bytes: u64,
    /// The bytes of their entries in its snapshot, texts included, at most.
    entry_bytes: u64,
}

/// A text kept as read beside its slim entry (`SlimText::held`), with where it was read.
type Held = (Bytes, Option<TextPlace>);

/// What a lease sets: the dequeue count, the lease and when the message is visible again.
type Lease = (u32, u32, u64);

/// A record read from the log, to replay once every segment is read: a put, lease, update or
/// deletion (nearly every record of a large log) in 88 bytes, any other as read (a put with a
/// foreign ID, or any text that is not slim), with where the text it writes was read when texts
/// are located.
enum Replayed {
    Put {
        slot: u32,
        message: SlimMessage,
    },
    Leased {
        slot: u32,
        generation: u32,
        dequeue_count: u32,
        lease: u32,
        visible_ms: u64,
    },
    Updated {
        slot: u32,
        generation: u32,
        lease: u32,
        visible_ms: u64,
        text: Option<SlimText>,
    },
    Deleted {
        slot: u32,
        generation: u32,
    },
    Other(Box<(Record, Option<TextPlace>)>),
}
const _: () = assert!(std::mem::size_of::<Replayed>() == 88);

impl Replayed {
    fn new(record: Record, text_place: Option<TextPlace>, sources: &Sources) -> Replayed {
        match record {
            Record::MessagePut(message) => match SlimMessage::new(message, text_place, sources) {
                Ok((slot, message)) => Replayed::Put { slot, message },
                Err((message, text_place)) => {
                    Replayed::Other(Box::new((Record::MessagePut(message), text_place)))
                }
            },
            Record::MessageLeased {
                slot,
                generation,
                dequeue_count,
                lease,
                visible_ms,
            } => Replayed::Leased {
                slot,
                generation,
                dequeue_count,
                lease,
                visible_ms,
            },
            Record::MessageUpdated {
                slot,
                generation,
                lease,
                visible_ms,
                text,
            } if text
                .as_ref()
                .is_none_or(|text| SlimText::new(text, text_place, sources).is_some()) =>
            {
                Replayed::Updated {
                    slot,
                    generation,
                    lease,
                    visible_ms,
                    text: text.and_then(|text| SlimText::new(&text, text_place, sources)),
                }
            }
            Record::MessageDeleted { slot, generation } => Replayed::Deleted { slot, generation },
            record => Replayed::Other(Box::new((record, text_place))),
        }
    }
}

/// One shard's directory, replayed: the logical state it held at its last durable record.
struct Image {
    identity: Option<Identity>,
    /// Queues by record index. Hashed with ahash, not SipHash: every replayed put looks its
    /// queue up, and the index is no secret.
    queues: HashMap<u32, ImageQueue, ahash::RandomState>,
    /// Queues a replayed record put another queue in the place of. A fuzzy snapshot can show a
    /// record index already taken by a queue that arrived there after records still to be
    /// replayed (which create, delete and clear the index's earlier queues): such a queue waits
    /// here, by name, for the record that brought it there (a clear: see `apply`), instead of
    /// being lost.
    displaced: HashMap<QueueKey, ImageQueue>,
    /// Messages by slot (slab slots are dense: a vector, not a map, which a large recovery
    /// would spend its time rehashing), in pages that `restore` frees as it goes.
    messages: SlotPages<ImageMessage>,
    /// The foreign IDs of `messages`, by slot (every message a change of `--shards` moved
    /// keeps one until it is deleted), in pages of their own: at most 17 bytes a slot where
    /// one is set in its page, none in a page without, each page freed as `restore` passes it
    /// (in a hash map, 128 bytes an entry beside the slim one cost a restart after a change of
    /// `--shards` more than whole states had: helper-61's review).
    foreign_ids: SlotPages<[u8; 16]>,
    /// The texts of `messages` that are not slim (`SlimText::held`), by slot: none when every
    /// text read is a slice of a file read.
    /// Looked up (mostly empty) for each message replayed and restored: ahash, not SipHash.
    held: HashMap<u32, Held, ahash::RandomState>,
    /// The files read, which the slim entries' texts are slices of.
    sources: Sources,
    /// Where the restored messages' texts are (`restore` fills it when texts are located).
    texts: RecoveredTexts,
    acls: HashMap<QueueKey, (u64, Vec<SignedIdentifier>)>,
    properties: HashMap<String, (u64, ServiceProperties)>,
    incarnations: u64,
    /// The sequence the next log record gets.
    next_sequence: u64,
    segments: Vec<SegmentFile>,
    snapshot: Option<(PathBuf, u64)>,
    /// The segments the snapshot keeps, and the bytes of the records its entries name there.
    kept: Vec<SegmentFile>,
    kept_named_bytes: u64,
    /// `ShardStart::named`.
    named: (u64, u64),
    /// The messages left out, their named texts not found (`ShardStart::left_out`).
    left_out: u64,
    /// Bytes read, for the summary.
    bytes_read: u64,
}

/// The shard of `homes` (`Image::homes`) that keeps `found` at `now_ms`, if one does: its
/// queue live in the incarnation it was put in, and it not expired (what `Restorer::message`
/// also leaves out). What a change counts (`Image::kept`) and where moved messages start
/// (`Image::moved_from`) both ask it.
fn kept_by(homes: &[Option<(usize, u64)>], found: &ImageMessage, now_ms: u64) -> Option<usize> {
    let home = homes.get(found.message.queue as usize).copied().flatten();
    let (owner, _) = home.filter(|&(_, live)| live == found.incarnation)?;
    (found.message.expiration_ms() > now_ms).then_some(owner)
}

impl Image {
    fn empty() -> Image {
        Image {
            identity: None,
            queues: HashMap::default(),
            displaced: HashMap::new(),
            messages: SlotPages::default(),
            foreign_ids: SlotPages::default(),
            held: HashMap::default(),
            sources: Sources::default(),
            texts: RecoveredTexts::default(),
            acls: HashMap::new(),
            properties: HashMap::new(),
            incarnations: 0,
            next_sequence: 0,
            segments: Vec::new(),
            snapshot: None,
            kept: Vec::new(),
            kept_named_bytes: 0,
            named: (0, 0),
            left_out: 0,
            bytes_read: 0,
        }
    }

    /// Applies the log's records from the snapshot's replay point. The snapshot is fuzzy: it
    /// shows each queue in the record index it had when its part was written, which may be
    /// after records still to replay moved it there or away (a clear moves a queue to a free
    /// index, and indexes are reused). Every queue record but one names its queue; a metadata
    /// set names only the index, so it is given the name of the queue the neighbouring records
    /// show in that index at its point in the log (`metadata_owners`) and sets only that queue's,
    /// in its index or, where the snapshot put a later queue there, in `displaced` (the snapshot's
    /// queue section is written a step at a time, so it can show two queues in one index: one
    /// written before a step and cleared away, and the one created there after it).
    ///
    /// Each page of `records` is freed once applied.
    fn replay(&mut self, records: Pages<Replayed>) {
        let mut owners = metadata_owners(&records).into_iter();
        for record in records {
            let (record, text_place) = match record {
                Replayed::Put { slot, message } => {
                    self.put(slot, message, None, None);
                    continue;
                }
                Replayed::Leased {
                    slot,
                    generation,
                    dequeue_count,
                    lease,
                    visible_ms,
                } => {
                    self.lease(slot, generation, (dequeue_count, lease, visible_ms));
                    continue;
                }
                Replayed::Updated {
                    slot,
                    generation,
                    lease,
                    visible_ms,
                    text,
                } => {
                    let text = text.map(|slim| (slim, None));
                    self.update(slot, generation, (lease, visible_ms), text);
                    continue;
                }
                Replayed::Deleted { slot, generation } => {
                    self.delete(slot, generation);
                    continue;
                }
                Replayed::Other(other) => *other,
            };
            match record {
                Record::QueueMetadataSet { queue, metadata } => {
                    let Some(owner) = owners.next().expect("an owner per metadata set") else {
                        self.apply(Record::QueueMetadataSet { queue, metadata }, None);
                        continue;
                    };
                    let in_place = self
                        .queues
                        .get_mut(&queue)
                        .filter(|found| found.key == owner);
                    if let Some(queue) = in_place.or_else(|| self.displaced.get_mut(&owner)) {
                        queue.metadata = metadata;
                    }
                }
                record => self.apply(record, text_place),
            }
        }
        assert!(owners.next().is_none(), "an owner per metadata set");
    }

    /// Puts `message` in `slot`, with its foreign ID and held text if any, if its queue is live;
    /// raises the sequence in any case.
    fn put(
        &mut self,
        slot: u32,
        message: SlimMessage,
        foreign_id: Option<MessageId>,
        held: Option<Held>,
    ) {
        // Even for a put whose queue is gone by the snapshot: its message ID was handed out,
        // and a sequence raised only with the queue was handed out again.
        if let Some(identity) = &mut self.identity {
            identity.sequence_next = identity.sequence_next.max(message.sequence + 1);
        }
        if let Some(queue) = self.queues.get(&message.queue) {
            let incarnation = queue.incarnation;
            match foreign_id {
                Some(id) => self.foreign_ids.insert(slot as usize, id.0.to_le_bytes()),
                None => drop(self.foreign_ids.remove(slot as usize)),
            }
            self.hold(slot, held);
            let message = ImageMessage {
                message,
                incarnation,
            };
            self.messages.insert(slot as usize, message);
        }
    }

    /// A Get leased the message (`slot`, `generation`), if it is there: its dequeue count, lease
    /// and visibility.
    fn lease(&mut self, slot: u32, generation: u32, (dequeue_count, lease, visible_ms): Lease) {
        if let Some(ImageMessage { message, .. }) = self.message_mut(slot) {
            if message.generation == generation {
                message.dequeue_count = dequeue_count;
                message.lease = lease;
                message.visible_ms = visible_ms;
            }
        }
    }

    /// The message (`slot`, `generation`) was deleted, if it is there.
    fn delete(&mut self, slot: u32, generation: u32) {
        if self
            .message_mut(slot)
            .is_some_and(|found| found.message.generation == generation)
        {
            self.messages.remove(slot as usize);
            self.foreign_ids.remove(slot as usize);
            self.held.remove(&slot);
        }
    }

    /// An Update of the message (`slot`, `generation`), if it is there: its lease and
    /// visibility, and its text (slim, and held when it is not) when the Update set one.
    fn update(
        &mut self,
        slot: u32,
        generation: u32,
        (lease, visible_ms): (u32, u64),
        text: Option<(SlimText, Option<Held>)>,
    ) {
        let Some(found) = self.message_mut(slot) else {
            return;
        };
        if found.message.generation != generation {
            return;
        }
        found.message.lease = lease;
        found.message.visible_ms = visible_ms;
        if let Some((text, held)) = text {
            found.message.text = text;
            self.hold(slot, held);
        }
    }

    /// Keeps `held` as the text of the message in `slot`, or forgets the one kept.
    fn hold(&mut self, slot: u32, held: Option<Held>) {
        match held {
            Some(held) => self.held.insert(slot, held),
            None => self.held.remove(&slot),
        };
    }

    /// `text`, read at `text_place`, as the text of a message: slim, or to be held as read.
    fn slim_text(&self, text: Bytes, text_place: Option<TextPlace>) -> (SlimText, Option<Held>) {
        match SlimText::new(&text, text_place, &self.sources) {
            Some(slim) => (slim, None),
            None => (SlimText::held(text.len()), Some((text, text_place))),
        }
    }

    /// Puts `queue` in record `index`; a different queue there is displaced (`displaced`).
    fn place(&mut self, index: u32, queue: ImageQueue) {
        self.displaced.remove(&queue.key);
        let key = queue.key.clone();
        if let Some(previous) = self.queues.insert(index, queue) {
            if previous.key != key {
                self.displaced.insert(previous.key.clone(), previous);
            }
        }
    }

    fn new_incarnation(&mut self) -> u64 {
        self.incarnations += 1;
        self.incarnations
    }

    fn raise_versions(&mut self, version: u64) {
        if let Some(identity) = &mut self.identity {
            identity.replica_version_last = identity.replica_version_last.max(version);
        }
    }

    /// Whether a message is in `slot` (from the snapshot, before any replay).
    fn restored(&self, slot: u32) -> bool {
        self.messages.get(slot as usize).is_some()
    }

    /// Applies one record, a blind write; `text_place`: where the text it writes is, when texts
    /// are located.
    fn apply(&mut self, record: Record, text_place: Option<TextPlace>) {
        match record {
            Record::QueueCreated {
                queue,
                key,
                metadata,
            } => {
                let incarnation = self.new_incarnation();
                self.place(
                    queue,
                    ImageQueue {
                        key,
                        metadata,
                        incarnation,
                    },
                );
            }
            Record::QueueMetadataSet { queue, metadata } => {
                if let Some(queue) = self.queues.get_mut(&queue) {
                    queue.metadata = metadata;
                }
            }
            // Replayed over a fuzzy snapshot, a record may find its queue's record index
            // already reused by a queue created later (the snapshot shows that later state):
            // a deletion or a clear acts only on the queue it names, and later records bring
            // the rest up to date.
            Record::QueueDeleted { queue, key } => {
                if self
                    .queues
                    .get(&queue)
                    .is_some_and(|found| found.key == key)
                {
                    self.queues.remove(&queue);
                }
                self.displaced.remove(&key);
                self.acls.remove(&key);
            }
            Record::QueueCleared {
                queue,
                moved_to,
                key,
            } => {
                let named = |found: &ImageQueue| key.as_ref().is_none_or(|key| found.key == *key);
                if self.queues.get(&queue).is_some_and(named) {
                    let mut moved = self.queues.remove(&queue).expect("found");
                    moved.incarnation = self.new_incarnation();
                    self.place(moved_to, moved);
                } else if key.is_some() && self.queues.get(&moved_to).is_some_and(named) {
                    // The snapshot shows the queue moved already, maybe with messages put
                    // after the clear (the log puts them back): only the clear's own effect,
                    // a new incarnation without the older messages, remains to be done.
                    let incarnation = self.new_incarnation();
                    if let Some(moved) = self.queues.get_mut(&moved_to) {
                        moved.incarnation = incarnation;
                    }
                } else if let Some(mut moved) =
                    key.as_ref().and_then(|key| self.displaced.remove(key))
                {
                    // The snapshot showed the queue in `moved_to` already, and an earlier
                    // queue's creation there, replayed, displaced it: back it goes, cleared.
                    moved.incarnation = self.new_incarnation();
                    self.place(moved_to, moved);
                }
            }
            Record::MessagePut(message) => {
                let (text, held) = self.slim_text(message.text.clone(), text_place);
                let slim = SlimMessage::numbers(&message, text);
                self.put(message.slot, slim, message.foreign_id, held);
            }
            Record::MessageNamed(_) | Record::PutsNamed { .. } => {
                unreachable!("`read_shard` reads a named entry's records, and refuses one in a log")
            }
            Record::MessageLeased {
                slot,
                generation,
                dequeue_count,
                lease,
                visible_ms,
            } => self.lease(slot, generation, (dequeue_count, lease, visible_ms)),
            Record::MessageUpdated {
                slot,
                generation,
                lease,
                visible_ms,
                text,
            } => {
                let text = text.map(|text| self.slim_text(text, text_place));
                self.update(slot, generation, (lease, visible_ms), text);
            }
            Record::MessageDeleted { slot, generation } => self.delete(slot, generation),
            Record::AclSet {
                key,
                version,
                identifiers,
            } => {
                self.raise_versions(version);
                if self
                    .acls
                    .get(&key)
                    .is_none_or(|(known, _)| *known < version)
                {
                    self.acls.insert(key, (version, identifiers));
                }
            }
            Record::PropertiesSet {
                account,
                version,
                properties,
            } => {
                self.raise_versions(version);
                if self
                    .properties
                    .get(&account)
                    .is_none_or(|(known, _)| *known < version)
                {
                    self.properties.insert(account, (version, properties));
                }
            }
        }
    }

    /// Forgets where texts were read (texts located for a start that changes the shard count
    /// after all, `RecoveryOptions::shards_default`): every text is then copied.
    fn forget_text_places(&mut self) {
        for message in self.messages.values_mut() {
            message.message.text.forget_place();
        }
        for (_, place) in self.held.values_mut() {
            *place = None;
        }
        self.texts = RecoveredTexts::default();
    }

    /// The message in `slot`, if any.
    fn message_mut(&mut self, slot: u32) -> Option<&mut ImageMessage> {
        self.messages.get_mut(slot as usize)
    }

    /// The messages a change of shard count would move from this image, old shard
    /// `old_shard`'s, the bytes of their texts, and of the entries that write them in the new
    /// shards' snapshots, at most: those `restore` keeps, of live queues (not of a deleted or
    /// cleared one, whose records the log may still hold) and not expired at `now_ms`
    /// (helper-57's review: counting every message the image holds refused a change, or kept
    /// the count, with nothing left to copy). By the shard of `by_shard.len()` that owns each
    /// now (their queue's), added into `by_shard`.
    fn kept(&self, old_shard: usize, now_ms: u64, by_shard: &mut [Kept]) {
        let homes = self.homes(by_shard.len());
        for (slot, found) in self.messages.indexed() {
            let Some(owner) = kept_by(&homes, found, now_ms) else {
                continue;
            };
            let slot = u32::try_from(slot).expect("slots are 32-bit");
            let text_bytes = found.message.text.len();
            // Its entry is a put of its state (`put_record_bytes`, the numbers as varints).
            // A message that stays keeps its queue, slot, generation and ID; one moved takes a
            // record index and a slot not known yet (counted at their widest), generation 0,
            // and its ID as a foreign one (`Restorer::moved_message`).
            let state = if owner == old_shard {
                let foreign_id = self.foreign_ids.get(slot as usize);
                let foreign_id = foreign_id.map(|id| MessageId(u128::from_le_bytes(*id)));
                found.message.state(slot, foreign_id, Bytes::new())
            } else {
                MessageState {
                    queue: u32::MAX,
                    slot: u32::MAX,
                    generation: 0,
                    foreign_id: Some(MessageId(0)),
                    ..found.message.state(slot, None, Bytes::new())
                }
            };
            let kept = &mut by_shard[owner];
            kept.messages += 1;
            kept.text_bytes += text_bytes as u64;
            kept.entry_bytes += put_record_bytes(&state, text_bytes) as u64;
        }
    }

    /// Each live queue's shard of `shards` and incarnation, by record index (indices are dense,
    /// as in the shard state): one look-up per message without hashing (`kept`, `restore`).
    fn homes(&self, shards: usize) -> Vec<Option<(usize, u64)>> {
        let indices = self.queues.keys().map(|&index| index as usize + 1).max();
        let mut homes = vec![None; indices.unwrap_or(0)];
        for (&index, queue) in &self.queues {
            homes[index as usize] = Some((shard_for(&queue.key, shards), queue.incarnation));
        }
        homes
    }

    /// The bytes of this image's queues and settings as a new generation's snapshots write them
    /// (`ShardState::snapshot_queues`, `snapshot_settings`), each encoded (every version an
    /// image holds counts, so a setting two images hold counts twice: at most, not exactly), by
    /// the shard of `by_shard.len()` that writes each (a queue's and its policies' owner, an
    /// account's home shard), added into `by_shard`.
    fn records_bytes(&self, by_shard: &mut [u64]) {
        let shards = by_shard.len();
        let mut out = BytesMut::new();
        let mut count = |shard: usize, record: Record<&[u8]>| {
            encode(&record, 0, &mut out);
            by_shard[shard] += out.len() as u64;
            out.clear();
        };
        for (&queue, found) in &self.queues {
            let (key, metadata) = (found.key.clone(), found.metadata.clone());
            let shard = shard_for(&key, shards);
            let record = Record::QueueCreated {
                queue,
                key,
                metadata,
            };
            count(shard, record);
        }
        for (key, (version, identifiers)) in &self.acls {
            let record = Record::AclSet {
                key: key.clone(),
                version: *version,
                identifiers: identifiers.clone(),
            };
            count(shard_for(key, shards), record);
        }
        for (account, (version, properties)) in &self.properties {
            let record = Record::PropertiesSet {
                account: account.clone(),
                version: *version,
                properties: properties.clone(),
            };
            count(home_shard(account, shards), record);
        }
    }

    /// Where queues and messages moved onto `shard` of `shards` (this image's index) from other
    /// shards' files may go (`ShardState::restore`): the record index after the highest of its
    /// queues that stay, and the slot after the highest of their messages `restore` keeps in
    /// place (not expired at `now_ms`). Not the image's span: a message deleted after the
    /// snapshot, one of a cleared queue or one expired leaves its slot in it, and the moved
    /// ones would start past every such slot, the free ones below taking memory until reused
    /// (helper-77's review of 0dea61e: 4,000 slots for 1,000 messages).
    fn moved_from(&self, shard: usize, shards: usize, now_ms: u64) -> (u32, u32) {
        let homes = self.homes(shards);
        let stays = homes
            .iter()
            .rposition(|home| home.is_some_and(|(owner, _)| owner == shard));
        let queues = stays.map_or(0, |index| index as u32 + 1);
        let mut messages = self.messages.indexed().rev();
        let last = messages.find(|(_, found)| kept_by(&homes, found, now_ms) == Some(shard));
        let slots = last.map_or(0, |(slot, _)| slot + 1);
        (queues, u32::try_from(slots).expect("slots are 32-bit"))
    }

    /// Hands this image's live queues and messages (not those of deleted or cleared queues) to
    /// the shards that own them now (`restorers`, by shard); `old_shard` is the image's. Returns
    /// how many queues and messages it handed over. With `rewritten`, recovery writes every
    /// text into a new generation's snapshot and leaves it there (`leave_recovered_text`), so
    /// none is copied into memory first.
    fn restore(
        &mut self,
        old_shard: usize,
        restorers: &mut [Restorer<'_>],
        secret: Secret,
        now_ms: u64,
        rewritten: bool,
    ) -> (usize, usize) {
        let homes = self.homes(restorers.len());
        let queues_restored = self.queues.len();
        for (index, queue) in self.queues.drain() {
            let (owner, _) = homes[index as usize].expect("a live queue's home");
            if owner == old_shard {
                restorers[owner].queue(index, queue.key, queue.metadata);
            } else {
                restorers[owner].moved_queue(origin(old_shard, index), queue.key, queue.metadata);
            }
        }
        let prefix = self.identity.map_or(0, |identity| identity.id_prefix);
        let mut messages_restored = 0;
        // Each page of the image's messages is freed once restored, as the states grow.
        let messages = std::mem::take(&mut self.messages);
        self.texts.reserve(messages.span());
        // Each file read goes too, once the last text in it is restored.
        let texts = messages.values().map(|found| &found.message.text);
        self.sources.count_uses(texts);
        // Beside them, by slot too: the foreign IDs, each page freed once passed.
        let mut foreign_ids = std::mem::take(&mut self.foreign_ids)
            .into_indexed()
            .peekable();
        for (
            slot,
            ImageMessage {
                message,
                incarnation,
            },
        ) in messages.into_indexed()
        {
            let slot = u32::try_from(slot).expect("slots are 32-bit");
            // Every foreign ID belongs to a message (put and deleted with it); one that did
            // not would be passed over, not taken for a later message's.
            while foreign_ids.next_if(|(at, _)| *at < slot as usize).is_some() {}
            let foreign_id = foreign_ids.next_if(|(at, _)| *at == slot as usize);
            let foreign_id = foreign_id.map(|(_, id)| MessageId(u128::from_le_bytes(id)));
            let (text, text_place) = match self.held.remove(&slot) {
                Some(held) => held,
                None => (
                    message.text.text(&self.sources),
                    message.text.place(&self.sources),
                ),
            };
            self.sources.taken(&message.text);
            let mut message = message.state(slot, foreign_id, text);
            let home = homes.get(message.queue as usize).copied().flatten();
            let Some((owner, _)) = home.filter(|&(_, live)| live == incarnation) else {
                continue;
            };
            messages_restored += 1;
            let text_place = text_place.filter(|_| owner == old_shard);
            // A text found in a file the shard keeps (`--text-memory`) stays there, on disk
            // only: nothing of it is copied (an empty text has nothing to save, and a read to
            // pay). Every other live text gets an allocation of its own, so that nothing the
            // shards keep points into a file recovery read: on Unix those are mapped
            // (`StdFiles::read`), and a text left there would page-fault on the shard's thread
            // once the kernel dropped its page, and would keep a removed file's blocks on disk
            // where `azq_disk_bytes` cannot see them. Each file's mapping goes once the last
            // text in it is restored (`Sources::taken`), the rest when the image does. A text
            // `rewritten` is left where it is, read once to write the new snapshot, out of
            // memory once written (a slice keeps its file's mapping until then).
            let on_disk = text_place
                .filter(|_| !message.text.is_empty())
                .map(|(locator, _)| locator);
            if on_disk.is_none() && !rewritten {
                message.text = Bytes::copy_from_slice(&message.text);
            }
            if owner == old_shard {
                let (slot, generation) = (message.slot, message.generation);
                // Homes only for messages kept: a message that expired while the server was
                // down leaves its slot free, for a message of the same slot and generation.
                let kept = restorers[owner].message(message, on_disk, now_ms);
                if let Some((locator, sequence)) = text_place.filter(|_| kept) {
                    let text = TextWritten {
                        slot,
                        generation,
                        sequence,
                        locator,
                    };
                    self.texts.note(text, on_disk.is_some());
                }
            } else {
                let id = message
                    .foreign_id
                    .unwrap_or_else(|| secret.message_id(prefix, message.sequence));
                let queue = origin(old_shard, message.queue);
                restorers[owner].moved_message(queue, message, id, now_ms);
            }
        }
        (queues_restored, messages_restored)
    }
}

/// Writes `CURRENT` naming `generation`, of `DATA_FORMAT` (`current_text`): under a temporary
/// name, synced, renamed into place, and `root` synced.
fn write_current<F: Files>(files: &F, root: &Path, generation: u64) -> Result<(), String> {
    let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
    let temporary = root.join(CURRENT_TEMPORARY_NAME);
    files
        .write_synced(&temporary, current_text(generation).as_bytes())
        .map_err(|error| failed(&temporary, error))?;
    let current_path = root.join(CURRENT_FILE_NAME);
    files
        .rename(&temporary, &current_path)
        .map_err(|error| failed(&current_path, error))?;
    files
        .sync_directory(root)
        .map_err(|error| failed(root, error))
}

/// Runs `jobs`, one a shard, and answers their results in order: each on a thread of its own
/// where `files` allow it (`Files::parallel`: several shards are read in about the time of the
/// largest), else one after the other on this thread.
fn each_shard<F: Files, T: Send>(files: &F, jobs: Vec<impl FnOnce() -> T + Send>) -> Vec<T> {
    if !files.parallel() || jobs.len() < 2 {
        return jobs.into_iter().map(|job| job()).collect();
    }
    std::thread::scope(|scope| {
        let threads: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(shard, job)| {
                std::thread::Builder::new()
                    .name(format!("azq-recover-{shard}"))
                    .stack_size(RECOVERY_THREAD_STACK_BYTES)
                    .spawn_scoped(scope, job)
                    .expect("a recovery thread starts")
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// The chunks of files read lazily (`Files::read_lazily`) whose pages may be resident, at most
/// a bound of them: a chunk touched while that many are lets go of the one touched first (first
/// in, first out; a chunk touched again while resident keeps its place). Read in order, each
/// chunk is let go of once and the bound holds; read in any order within the bound, none is.
/// Where an eighth or more of the chunks brought in over a bound's worth of them had been let
/// go of before, the records are scattered over more than the bound (slots reused in random
/// order name records all over the segments): then the bound doubles, so that letting go and
/// bringing back costs at most about twice the chunks the records are in, and the bound ends
/// near those; below that share, letting go costs at most about an eighth more chunks brought
/// in than reading each once. With a fixed bound of whole segments, records scattered over a
/// few more segments than it made every switch let a whole segment go and fault it back: a
/// start 2-2.5 times slower (helper-63's review); with a fixed bound of chunks, 1.85 times.
/// Doubling at any chunk brought back after a bound's worth grew the bound to the whole log
/// for a handful of records out of order (a slot reused late names a record far ahead), each
/// of which costs one chunk brought back (helper-64's review).
struct ResidentChunks {
    /// Bytes of a chunk, a multiple of any page's.
    chunk_bytes: usize,
    /// The most chunks resident.
    most: usize,
    /// The chunks resident, (file, chunk index), the one touched first at the front.
    order: std::collections::VecDeque<(u64, usize)>,
    /// The same, to look up.
    resident: std::collections::HashSet<(u64, usize), ahash::RandomState>,
    /// The chunks let go of.
    let_go: std::collections::HashSet<(u64, usize), ahash::RandomState>,
    /// Chunks brought in since the bound was last weighed (a bound's worth of them weighs it).
    brought_in: usize,
    /// Of those, the ones let go of before.
    brought_back: usize,
    /// The chunk touched last (most touches are of it).
    last: Option<(u64, usize)>,
}

impl Default for ResidentChunks {
    fn default() -> ResidentChunks {
        ResidentChunks::new(RECOVERY_NAMED_CHUNK_BYTES, RECOVERY_NAMED_RESIDENT_BYTES)
    }
}

impl ResidentChunks {
    /// No chunk resident yet; chunks of `chunk_bytes`, at first at most `bytes_max` of them
    /// (one at least).
    fn new(chunk_bytes: usize, bytes_max: usize) -> ResidentChunks {
        ResidentChunks {
            chunk_bytes,
            most: (bytes_max / chunk_bytes).max(1),
            order: std::collections::VecDeque::new(),
            resident: std::collections::HashSet::default(),
            let_go: std::collections::HashSet::default(),
            brought_in: 0,
            brought_back: 0,
            last: None,
        }
    }

    /// Notes that `range` of the file `file` is touched: each chunk it is in is resident
    /// from now on, and `let_go` is given each chunk that stops being (its file and range).
    fn touch(&mut self, file: u64, range: Range<usize>, mut let_go: impl FnMut(u64, Range<usize>)) {
        let first = range.start / self.chunk_bytes;
        let last = range.end.saturating_sub(1).max(range.start) / self.chunk_bytes;
        for chunk in first..=last {
            let touched = (file, chunk);
            if self.last == Some(touched) {
                continue;
            }
            self.last = Some(touched);
            if !self.resident.insert(touched) {
                continue;
            }
            self.order.push_back(touched);
            self.brought_in += 1;
            self.brought_back += usize::from(self.let_go.remove(&touched));
            if self.brought_in >= self.most {
                if self.brought_back.saturating_mul(8) >= self.brought_in {
                    self.most = self.most.saturating_mul(2);
                }
                self.brought_in = 0;
                self.brought_back = 0;
            }
            if self.order.len() > self.most {
                let oldest = self.order.pop_front().expect("more than the most");
                self.resident.remove(&oldest);
                self.let_go.insert(oldest);
                let (file, chunk) = oldest;
                let_go(
                    file,
                    chunk * self.chunk_bytes..(chunk + 1) * self.chunk_bytes,
                );
            }
        }
    }
}

/// How a start refused for a named text not found ends: what the flag would do instead.
const REFUSED_NAMED_TEXT: &str = "refusing to start. --truncateCorruptLog leaves out the \
                                  messages whose texts are not found, losing them";

/// The records a snapshot's named entries name (`Record::MessageNamed`'s texts,
/// `Record::PutsNamed`'s puts), read from the segments it keeps as its entries are read.
#[derive(Default)]
struct Named {
    /// The segments read, by first sequence (mapped: a text is copied out of its file unless
    /// it stays on disk only, `Image::restore`); `None` for one not in the directory, so that
    /// the entries naming it do not each look for it.
    mapped: HashMap<u64, Option<Bytes>>,
    /// The bytes of those files, for the summary.
    bytes_read: u64,
    /// The bytes of the records named.
    record_bytes: u64,
    /// The segments named.
    segments: std::collections::BTreeSet<u64>,
    /// The first error met: the entries after it are not read.
    error: Option<String>,
    /// With texts located: the segments are read lazily (`Files::read_lazily`), and the
    /// chunks of them the records read are in keep their pages resident within a bound
    /// (`chunks`): without, every text is copied out of them at the restore anyway.
    unload_behind: bool,
    /// The chunks of the segments read whose pages may be resident.
    chunks: ResidentChunks,
    /// With `--truncateCorruptLog`: a named text not found (its segment gone, or the record
    /// there damaged or another) leaves its message out rather than stop recovery.
    leave_out: bool,
    /// The messages left out, by the segment named: how many, and why the first was.
    left_out: BTreeMap<u64, (u64, String)>,
}

impl Named {
    /// The text `message` names, read from its segment among `segments` (the directory's, by
    /// first sequence): the record there must be whole and intact, the one named (its
    /// sequence, message and length). `None` once an error is met (`error` holds it), and
    /// for a message left out (`leave_out`).
    fn text(
        &mut self,
        files: &impl Files,
        segments: &[(u64, PathBuf)],
        sources: &mut Sources,
        message: &MessageState<NamedText>,
    ) -> Option<Bytes> {
        let named = message.text;
        let check = |record: &Bytes| {
            record_text(
                record,
                named.locator,
                named.sequence,
                message.slot,
                message.generation,
            )
            .filter(|text| text.len() == named.text_bytes as usize)
        };
        let what = || {
            format!(
                "the entry of message {}.{} names record {}",
                message.slot, message.generation, named.sequence
            )
        };
        self.find(files, segments, sources, named.locator, check, what)
    }

    /// The message the put record `put` names in the segment `segment` puts, read from among
    /// `segments` (`Record::PutsNamed`): it must be a whole, intact put record, the one named
    /// (its sequence and length). As `text` for errors and messages left out.
    fn put(
        &mut self,
        files: &impl Files,
        segments: &[(u64, PathBuf)],
        sources: &mut Sources,
        segment: u64,
        put: NamedPut,
    ) -> Option<MessageState> {
        let locator = put.locator(segment);
        let check = |record: &Bytes| record_put(record, locator, put.sequence);
        let what = || format!("an entry names the put record {}", put.sequence);
        self.find(files, segments, sources, locator, check, what)
    }

    /// What `check` finds in the record at `locator`, read from among `segments`; `what` says
    /// what named it, for the error when it is not there.
    fn find<T>(
        &mut self,
        files: &impl Files,
        segments: &[(u64, PathBuf)],
        sources: &mut Sources,
        locator: TextLocator,
        check: impl FnOnce(&Bytes) -> Option<T>,
        what: impl FnOnce() -> String,
    ) -> Option<T> {
        if self.error.is_some() {
            return None;
        }
        let TextFile::Segment(first) = locator.file() else {
            unreachable!("a named entry reads as a segment's locator");
        };
        let data = match self.read(files, segments, first) {
            Ok(Some(data)) => {
                sources.add(TextFile::Segment(first), &data);
                Ok(data)
            }
            Ok(None) => Err(format!(
                "an entry names a record in the log segment {}, which is not in the directory",
                segment_name(first)
            )),
            Err(why) => {
                self.error = Some(why);
                return None;
            }
        };
        let found = data.and_then(|data| {
            let start = usize::try_from(locator.offset()).unwrap_or(usize::MAX);
            let end = start.saturating_add(locator.record_bytes() as usize);
            if self.unload_behind {
                let mapped = &self.mapped;
                self.chunks.touch(first, start..end, |segment, range| {
                    if let Some(Some(data)) = mapped.get(&segment) {
                        files.unload_range(data, range);
                    }
                });
            }
            let record = (end <= data.len()).then(|| data.slice(start..end));
            record.and_then(|record| check(&record)).ok_or_else(|| {
                format!(
                    "{} at offset {} of the log segment {}, and it is not there (damaged, or \
                     another record)",
                    what(),
                    locator.offset(),
                    segment_name(first)
                )
            })
        });
        match found {
            Ok(found) => {
                self.segments.insert(first);
                self.record_bytes += u64::from(locator.record_bytes());
                Some(found)
            }
            Err(why) if self.leave_out => {
                self.left_out.entry(first).or_insert((0, why)).0 += 1;
                None
            }
            Err(why) => {
                self.error = Some(format!("{why}; {REFUSED_NAMED_TEXT}"));
                None
            }
        }
    }

    /// The segment whose first sequence is `first`, mapped once; `None` when it is not among
    /// `segments`.
    fn read(
        &mut self,
        files: &impl Files,
        segments: &[(u64, PathBuf)],
        first: u64,
    ) -> Result<Option<Bytes>, String> {
        if let Some(found) = self.mapped.get(&first) {
            return Ok(found.clone());
        }
        let found = match segments.iter().find(|(sequence, _)| *sequence == first) {
            Some((_, path)) => {
                let data = if self.unload_behind {
                    files.read_lazily(path, false)
                } else {
                    files.read(path)
                }
                .map_err(|error| format!("{}: {error}", path.display()))?;
                self.bytes_read += data.len() as u64;
                Some(data)
            }
            None => None,
        };
        self.mapped.insert(first, found.clone());
        Ok(found)
    }

    /// Whether every segment named is in `kept`, the snapshot's list (else the snapshot is
    /// damaged).
    fn check(&self, kept: &[u64]) -> Result<(), String> {
        // Those whose texts were left out too: with `--truncateCorruptLog` such an entry went
        // without a note (helper-53's review), and it is the snapshot's damage, not a log's.
        match self
            .segments
            .iter()
            .chain(self.left_out.keys())
            .find(|first| kept.binary_search(first).is_err())
        {
            Some(first) => Err(format!(
                "an entry names a record in the log segment {}, which its trailer does not keep",
                segment_name(*first)
            )),
            None => Ok(()),
        }
    }
}

/// Whether `record` writes a message's text (its place is noted when texts are located).
fn writes_text(record: &Record) -> bool {
    matches!(
        record,
        Record::MessagePut(_) | Record::MessageUpdated { text: Some(_), .. }
    )
}

/// Names a queue among every queue moved to another shard: its old shard and record index.
fn origin(old_shard: usize, index: u32) -> u64 {
    ((old_shard as u64) << 32) | u64::from(index)
}

/// For each of `records` that sets a queue's metadata, in order, the name of the queue in its
/// index at that point, as the records that name the index's queues tell: the last one placed
/// there before it (created there, or cleared into it), else the next one to leave (deleted, or
/// cleared out of it). `None` where no record tells (the index's queue was the same throughout,
/// as the snapshot shows, or only old records without a name moved it). One entry per metadata
/// set, not per record: a log of millions of puts holds few of them.
fn metadata_owners(records: &Pages<Replayed>) -> Vec<Option<QueueKey>> {
    // Puts, leases and deletions name no queue's index.
    let records = || {
        records.iter().filter_map(|record| match record {
            Replayed::Other(other) => Some(&other.0),
            _ => None,
        })
    };
    let mut owners: Vec<Option<QueueKey>> = Vec::new();
    // Forward: the queue last placed in each index (`None` once one left it).
    let mut placed: HashMap<u32, Option<&QueueKey>> = HashMap::new();
    for record in records() {
        match record {
            Record::QueueCreated { queue, key, .. } => {
                placed.insert(*queue, Some(key));
            }
            Record::QueueCleared {
                queue,
                moved_to,
                key,
            } => {
                placed.insert(*queue, None);
                placed.insert(*moved_to, key.as_ref());
            }
            Record::QueueDeleted { queue, .. } => {
                placed.insert(*queue, None);
            }
            Record::QueueMetadataSet { queue, .. } => {
                owners.push(placed.get(queue).copied().flatten().cloned());
            }
            _ => {}
        }
    }
    // Backward: the queue that next leaves each index (`None` where one is placed there next).
    let mut leaving: HashMap<u32, Option<&QueueKey>> = HashMap::new();
    let mut position = owners.len();
    for record in records().rev() {
        match record {
            Record::QueueDeleted { queue, key } => {
                leaving.insert(*queue, Some(key));
            }
            Record::QueueCleared {
                queue,
                moved_to,
                key,
            } => {
                leaving.insert(*moved_to, None);
                leaving.insert(*queue, key.as_ref());
            }
            Record::QueueCreated { queue, .. } => {
                leaving.insert(*queue, None);
            }
            Record::QueueMetadataSet { queue, .. } => {
                position -= 1;
                if owners[position].is_none() {
                    owners[position] = leaving.get(queue).copied().flatten().cloned();
                }
            }
            _ => {}
        }
    }
    owners
}

/// Where recovery keeps a copy of every log segment before it cuts it or removes it
/// (`DIR/__azq__/kept/`), so that a reader that misreads a segment can never turn into deleted
/// data: what was cut off can be inspected and brought back.
///
/// A kept file is the segment as it was (its written part: trailing zeros, the preallocated
/// rest, are dropped), named `NNNNNN-gen-GGGGGG-shard-SSS-wal-….log-at-OFFSET`: a number that
/// orders the kept files, the shard, the segment and where recovery cut it (`-at-0` for a
/// segment removed whole). Each is at most one segment. Files kept by earlier starts take at
/// most `RECOVERY_KEPT_BYTES_MAX` of disk: the oldest are removed first (each with a note);
/// what this start keeps is never removed by it.
struct KeptAside<'a, F: Files> {
    files: &'a F,
    directory: PathBuf,
    /// What the files earlier starts kept may take (`RECOVERY_KEPT_BYTES_MAX`; less in tests).
    older_bytes_max: u64,
    /// Locked for a whole `keep`: shards read on threads of their own share one temporary name.
    kept: std::sync::Mutex<KeptFiles>,
}

/// What `KeptAside` changes as it keeps files.
struct KeptFiles {
    /// Files earlier starts kept, oldest first, with their sizes.
    older: std::collections::VecDeque<(PathBuf, u64)>,
    /// The number the next kept file gets.
    next_number: u64,
    /// The copies this start made, and the segment each is of.
    made: Vec<(PathBuf, PathBuf)>,
}

impl<'a, F: Files> KeptAside<'a, F> {
    /// The kept files under `root` (none yet when the directory does not exist); those of
    /// earlier starts take at most `older_bytes_max`.
    fn open(files: &'a F, root: &Path, older_bytes_max: u64) -> Result<KeptAside<'a, F>, String> {
        let directory = root.join(KEPT_DIRECTORY_NAME);
        let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
        let mut older = Vec::new();
        for name in files
            .list(&directory)
            .map_err(|error| failed(&directory, error))?
        {
            // Only the files recovery kept: anything else a user put there is theirs.
            let Some(number) = kept_number(&name) else {
                continue;
            };
            let path = directory.join(&name);
            // A directory of that name is not one either.
            let Ok(bytes) = files.size(&path) else {
                continue;
            };
            older.push((number, path, bytes));
        }
        older.sort();
        // Past the largest number, `keep` refuses to replace the copy that has it.
        let next_number = older
            .last()
            .map_or(1, |(number, _, _)| number.saturating_add(1));
        Ok(KeptAside {
            files,
            directory,
            older_bytes_max,
            kept: std::sync::Mutex::new(KeptFiles {
                older: older
                    .into_iter()
                    .map(|(_, path, bytes)| (path, bytes))
                    .collect(),
                next_number,
                made: Vec::new(),
            }),
        })
    }

    /// A note for each copy this start made that no note in `notes` names: a copy is named
    /// by the note of the repair it was made for, once that repair is made, so one made before
    /// a repair that failed would go unsaid in a refusal (helper-60's review).
    fn unsaid(&self, notes: &[String]) -> Vec<String> {
        let kept_files = self
            .kept
            .lock()
            .expect("no shard's recovery panicked keeping");
        let named = |copy: &Path| {
            let copy = copy.display().to_string();
            notes.iter().any(|note| note.contains(&copy))
        };
        kept_files
            .made
            .iter()
            .filter(|(_, copy)| !named(copy))
            .map(|(segment, copy)| {
                format!(
                    "{}: kept aside before a repair that did not complete; the segment as it \
                     was is kept in {}",
                    segment.display(),
                    copy.display()
                )
            })
            .collect()
    }

    /// Keeps a copy of `data`, the segment at `path`, before recovery cuts it at `offset` (0: it
    /// is removed whole), and returns the copy's path; `None` when nothing but zeros lies from
    /// `offset` on, so the cut loses nothing. The copy is synced and its name made durable before
    /// this returns, so the cut can follow.
    fn keep(
        &self,
        path: &Path,
        data: &[u8],
        offset: usize,
        notes: &mut Vec<String>,
    ) -> Result<Option<PathBuf>, String> {
        let mut kept_files = self
            .kept
            .lock()
            .expect("no shard's recovery panicked keeping");
        let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
        let written = data
            .iter()
            .rposition(|&byte| byte != 0)
            .map_or(0, |last| last + 1);
        if written <= offset {
            return Ok(None);
        }
        let kept_bytes = written
            .next_multiple_of(STORAGE_BLOCK_BYTES)
            .min(data.len());
        // The oldest go first while they and this copy would take more than the bound.
        let mut older_bytes: u64 = kept_files.older.iter().map(|(_, bytes)| bytes).sum();
        while older_bytes + kept_bytes as u64 > self.older_bytes_max {
            let Some((oldest, bytes)) = kept_files.older.pop_front() else {
                break;
            };
            self.files
                .remove_file(&oldest)
                .map_err(|error| failed(&oldest, error))?;
            older_bytes -= bytes;
            notes.push(format!(
                "{}: removed, the oldest file kept aside, beyond {} MiB of them",
                oldest.display(),
                self.older_bytes_max >> 20
            ));
        }
        // `…/gen-000001/shard-000/wal-….log` names its generation and shard.
        let component = |path: Option<&Path>| {
            path.and_then(Path::file_name)
                .map_or_else(String::new, |name| name.to_string_lossy().into_owned())
        };
        let shard_directory = path.parent();
        let name = format!(
            "{:06}-{}-{}-{}-at-{offset}",
            kept_files.next_number,
            component(shard_directory.and_then(Path::parent)),
            component(shard_directory),
            component(Some(path)),
        );
        kept_files.next_number = kept_files.next_number.saturating_add(1);
        let kept = self.directory.join(name);
        if self.files.size(&kept).is_ok() {
            return Err(format!(
                "{}: a kept copy of that name exists already; move the kept copies away",
                kept.display()
            ));
        }
        // Whole under a temporary name, then renamed: a copy under its name is never partial.
        let temporary = self.directory.join(KEPT_TEMPORARY_NAME);
        self.files
            .create_directories(&self.directory)
            .map_err(|error| failed(&self.directory, error))?;
        self.files
            .write_synced(&temporary, &data[..kept_bytes])
            .map_err(|error| failed(&temporary, error))?;
        self.files
            .rename(&temporary, &kept)
            .map_err(|error| failed(&kept, error))?;
        kept_files.made.push((path.to_path_buf(), kept.clone()));
        self.files
            .sync_directory(&self.directory)
            .map_err(|error| failed(&self.directory, error))?;
        Ok(Some(kept))
    }
}

/// Keeps and removes `segments`, the ones a `--truncateCorruptLog` cut leaves behind it, one
/// note each (in the segments' order), and syncs `directory` so that their removal is durable
/// before the cut itself. Every copy is kept first; then the segments go from the last one
/// back, so that removals cut short (a failing disk, a power cut keeping some of them) leave
/// the log whole up to where they stopped: removed from the first on, they left a log that
/// skips records, which no later start gets past (helper-60's review).
fn remove_after_cut<F: Files>(
    files: &F,
    kept: &KeptAside<'_, F>,
    segments: &[(u64, PathBuf)],
    directory: &Path,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
    let mut copies = Vec::with_capacity(segments.len());
    for (_, later) in segments {
        let data = files.read(later).map_err(|error| failed(later, error))?;
        copies.push(kept_in(kept.keep(later, &data, 0, notes)?));
    }
    let at = notes.len();
    for ((_, later), kept_copy) in segments.iter().zip(copies).rev() {
        files
            .remove_file(later)
            .map_err(|error| failed(later, error))?;
        notes.insert(
            at,
            format!(
                "{}: at or after the cut (--truncateCorruptLog); removed{kept_copy}",
                later.display()
            ),
        );
    }
    if !segments.is_empty() {
        files
            .sync_directory(directory)
            .map_err(|error| failed(directory, error))?;
    }
    Ok(())
}

/// The name a kept copy is written under until it is whole.
const KEPT_TEMPORARY_NAME: &str = "copy.tmp";

/// The number of a kept copy's name (`NNNNNN-gen-GGGGGG-shard-SSS-wal-….log-at-OFFSET`), or
/// `None` for any other name.
fn kept_number(name: &str) -> Option<u64> {
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    let (number, rest) = name.split_once('-')?;
    let (generation, rest) = rest.strip_prefix("gen-")?.split_once("-shard-")?;
    let (shard, rest) = rest.split_once('-')?;
    let (segment, offset) = rest.rsplit_once("-at-")?;
    let well_formed = number.len() >= 6
        && digits(number)
        && generation.len() == 6
        && digits(generation)
        && shard.len() == 3
        && digits(shard)
        && digits(offset)
        && matches!(parse_name(segment), Some((FileKind::Segment, _)));
    well_formed.then(|| number.parse().ok())?
}

/// `; the segment as it was is kept in PATH` for a note, or nothing when nothing was kept.
fn kept_in(kept: Option<PathBuf>) -> String {
    kept.map_or_else(String::new, |kept| {
        format!("; the segment as it was is kept in {}", kept.display())
    })
}

/// Reads shard `shard`'s directory into its image, truncating a torn tail.
fn read_shard<F: Files>(
    files: &F,
    directory: &Path,
    shard: u32,
    options: RecoveryOptions,
    locate_texts: bool,
    kept: &KeptAside<'_, F>,
    notes: &mut Vec<String>,
) -> Result<Image, String> {
    let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
    let names = files
        .list(directory)
        .map_err(|error| failed(directory, error))?;
    let mut image = Image::empty();
    let mut snapshots = Vec::new();
    let mut segments = Vec::new();
    // Names removed: the directory is synced once they all are.
    let mut removed = false;
    let mut remove = |path: &Path, note: String, notes: &mut Vec<String>| {
        files
            .remove_file(path)
            .map_err(|error| failed(path, error))?;
        // Once made: a refusal lists the notes as what recovery did (`recover`).
        notes.push(note);
        removed = true;
        Ok::<(), String>(())
    };
    for name in names {
        let path = directory.join(&name);
        match parse_name(&name) {
            Some((FileKind::Snapshot, sequence)) => snapshots.push((sequence, path)),
            Some((FileKind::Segment, sequence)) => segments.push((sequence, path)),
            // A snapshot or segment that was being written when the server stopped.
            None if name == SNAPSHOT_TEMPORARY_NAME || name == SEGMENT_TEMPORARY_NAME => {
                let note = format!(
                    "{}: a {} being written when the server stopped; removed",
                    path.display(),
                    if name == SEGMENT_TEMPORARY_NAME {
                        "log segment"
                    } else {
                        "snapshot"
                    }
                );
                remove(&path, note, notes)?;
            }
            None => {}
        }
    }
    snapshots.sort();
    segments.sort();
    let mut replay_from = 0;
    if let Some((named_from, path)) = snapshots.pop() {
        // With texts located, read once through and let go behind (below), so that no more
        // than a step of a large snapshot is resident at a time.
        let data = if locate_texts {
            files.read_lazily(&path, true)
        } else {
            files.read(&path)
        }
        .map_err(|error| failed(&path, error))?;
        image.bytes_read += data.len() as u64;
        let damaged = |why| format!("{}: a damaged snapshot: {why}", path.display());
        let snapshot = read_snapshot_header(&data).map_err(damaged)?;
        if snapshot.shard != shard {
            return Err(format!(
                "{}: a snapshot of shard {}",
                path.display(),
                snapshot.shard
            ));
        }
        // The identity first: every message put raises the sequence it holds.
        image.identity = Some(snapshot.identity);
        replay_from = snapshot.replay_from;
        image.next_sequence = replay_from;
        // Its entries are homes only where the log would look for them, under the name of
        // its replay point.
        let locate_entries = locate_texts && named_from == replay_from;
        let file = TextFile::Snapshot(replay_from);
        image.sources.add(file, &data);
        // The texts its named entries name, read from the segments it keeps (mapped once
        // each), and the first error met.
        let mut named = Named {
            leave_out: options.truncate_corrupt,
            unload_behind: locate_texts,
            ..Named::default()
        };
        let mut restored_twice = None;
        // Where the pages before are let go (with texts located).
        let mut unloaded_to = 0;
        let read = read_snapshot_with(&data, |place, record| {
            if locate_texts && place.start - unloaded_to >= RECOVERY_UNLOAD_STEP_BYTES {
                files.unload_range(&data, unloaded_to..place.start);
                unloaded_to = place.start;
            }
            match record {
                Record::MessageNamed(message) => {
                    let Some(text) = named.text(files, &segments, &mut image.sources, &message)
                    else {
                        return;
                    };
                    image.named.1 += 1;
                    let text_place =
                        locate_texts.then_some((message.text.locator, message.text.sequence));
                    image.apply(Record::MessagePut(message.with_text(text)), text_place)
                }
                Record::PutsNamed { segment, puts } => {
                    for put in puts {
                        let sources = &mut image.sources;
                        let Some(message) = named.put(files, &segments, sources, segment, put)
                        else {
                            continue;
                        };
                        // A put record names no slot of its own to check against (a named text's
                        // does, `record_text`): one a snapshot entry already restored is damage.
                        if image.restored(message.slot) {
                            restored_twice.get_or_insert((segment, put.offset));
                            continue;
                        }
                        image.named.0 += 1;
                        let text_place =
                            locate_texts.then_some((put.locator(segment), put.sequence));
                        image.apply(Record::MessagePut(message), text_place)
                    }
                }
                record => {
                    let text_place = locate_entries.then(|| {
                        let bytes = place.len() as u32;
                        let locator = TextLocator::new(file, place.start as u64, bytes);
                        (locator, RECOVERED_TEXT_SEQUENCE)
                    });
                    image.apply(record, text_place)
                }
            }
        });
        let kept_segments = read.map_err(damaged)?.kept;
        if let Some((segment, offset)) = restored_twice {
            return Err(damaged(format!(
                "it names the put record at offset {offset} of {} for a slot another entry \
                 restores",
                segment_name(segment)
            )));
        }
        // A text not found is the segment's damage (or its absence), not the snapshot's.
        if let Some(why) = named.error.take() {
            return Err(format!("{}: {why}", path.display()));
        }
        named.check(&kept_segments).map_err(damaged)?;
        image.bytes_read += named.bytes_read;
        image.kept_named_bytes = named.record_bytes;
        image.left_out = named.left_out.values().map(|(count, _)| count).sum();
        if locate_entries {
            image.texts.snapshot = Some(replay_from);
        }
        // Older snapshots the server had no time to remove.
        for (_, older) in snapshots {
            let note = format!(
                "{}: an older snapshot, replaced by {}; removed",
                older.display(),
                path.display()
            );
            remove(&older, note, notes)?;
        }
        image.snapshot = Some((path.clone(), data.len() as u64));
        // The segments it keeps, for the texts its entries name there: whole (as
        // preallocated), never replayed (every record in them comes before its replay point).
        let (listed, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut segments)
            .into_iter()
            .partition(|(first, _)| kept_segments.binary_search(first).is_ok());
        segments = rest;
        for (first_sequence, kept_path) in listed {
            if first_sequence >= replay_from {
                return Err(damaged(format!(
                    "it keeps {}, which is not before its replay point",
                    kept_path.display()
                )));
            }
            let data = named
                .read(
                    files,
                    &[(first_sequence, kept_path.clone())],
                    first_sequence,
                )?
                .expect("a segment of the directory");
            if let Some((count, why)) = named.left_out.get(&first_sequence) {
                let copy = kept_in(kept.keep(&kept_path, &data, 0, notes)?);
                notes.push(format!(
                    "{}: texts it names in {} not found there, for {count} message(s) (the \
                     first: {why}); left out (--truncateCorruptLog), lost{copy}",
                    path.display(),
                    kept_path.display()
                ));
            }
            image.kept.push(SegmentFile {
                first_sequence,
                path: kept_path,
                bytes: data.len() as u64,
                allocated_bytes: data.len() as u64,
                text_record_bytes: None,
            });
        }
        for missing in kept_segments
            .iter()
            .filter(|&&first| image.kept.iter().all(|kept| kept.first_sequence != first))
        {
            if !options.truncate_corrupt {
                return Err(format!(
                    "{}: the snapshot keeps the log segment {} for the texts it names there, \
                     and it is not in the directory; {REFUSED_NAMED_TEXT}",
                    path.display(),
                    segment_name(*missing),
                ));
            }
            let count = named.left_out.get(missing).map_or(0, |(count, _)| *count);
            notes.push(format!(
                "{}: the log segment {} it keeps, for {count} message(s) whose texts it names \
                 there, is not in the directory; left out (--truncateCorruptLog), lost",
                path.display(),
                segment_name(*missing),
            ));
        }
        // As each segment's below, once read.
        if locate_texts {
            files.unload(&data);
            for read in named.mapped.values().flatten() {
                files.unload(read);
            }
            image.texts.kept_segments = image
                .kept
                .iter()
                .map(|segment| segment.first_sequence)
                .collect();
        }
        // Segments the snapshot covers (the next one starts at or before its replay point)
        // that the server had no time to remove, or whose removal a power cut undid.
        let needed = segments
            .iter()
            .rposition(|(first_sequence, _)| *first_sequence <= replay_from)
            .unwrap_or(0);
        for (_, covered) in segments.drain(..needed) {
            let note = format!(
                "{}: a log segment the snapshot covers; removed",
                covered.display()
            );
            remove(&covered, note, notes)?;
        }
        if let Some((first_sequence, path)) = segments.first() {
            if *first_sequence > replay_from {
                return Err(format!(
                    "{}: the log skips from the snapshot's record {replay_from} to \
                     {first_sequence}",
                    path.display()
                ));
            }
        }
    }
    let last = segments.len().saturating_sub(1);
    // The log's records from the replay point, applied once every segment is read: what a
    // queue of the snapshot is shown doing depends on records further on (`Image::replay`).
    let mut replayed = Pages::default();
    let mut expected: Option<u64> = None;
    for (index, (first_sequence, path)) in segments.iter().enumerate() {
        let data = files.read(path).map_err(|error| failed(path, error))?;
        // Records from the replay point on go straight into `replayed` as they are read, slim.
        let file = TextFile::Segment(*first_sequence);
        image.sources.add(file, &data);
        let sources = &image.sources;
        let mut named_in_log = None;
        let gather = |sequence, place: Range<usize>, record| {
            if matches!(record, Record::MessageNamed(_) | Record::PutsNamed { .. }) {
                named_in_log.get_or_insert(sequence);
                return;
            }
            if sequence < replay_from {
                return;
            }
            let text_place = (locate_texts && writes_text(&record)).then(|| {
                let locator = TextLocator::new(file, place.start as u64, place.len() as u32);
                (locator, sequence)
            });
            replayed.push(Replayed::new(record, text_place, sources));
        };
        let segment = match read_segment_with(&data, gather) {
            Ok(segment) => segment,
            // The last segment, created under its name by an earlier server, and its header
            // never synced: nothing in it was acknowledged, unless intact records of its
            // sequences lie anywhere after the header block (then the header is damage, and
            // whatever damage its first records have too does not hide the rest).
            Err(why)
                if index == last
                    && data.len() >= STORAGE_BLOCK_BYTES
                    && intact_records(&data, STORAGE_BLOCK_BYTES, *first_sequence)
                        .next()
                        .is_none() =>
            {
                let kept = kept_in(kept.keep(path, &data, 0, notes)?);
                let note = format!(
                    "{}: a log segment whose header never reached the disk ({why}), holding no \
                     record; removed{kept}",
                    path.display()
                );
                remove(path, note, notes)?;
                image.next_sequence = image.next_sequence.max(*first_sequence);
                break;
            }
            Err(why) if data.len() < STORAGE_BLOCK_BYTES && index == last => {
                let kept = kept_in(kept.keep(path, &data, 0, notes)?);
                let note = format!(
                    "{}: a log segment whose header never reached the disk ({why}); removed{kept}",
                    path.display()
                );
                remove(path, note, notes)?;
                image.next_sequence = image.next_sequence.max(*first_sequence);
                break;
            }
            Err(why) if options.truncate_corrupt => {
                // Damage to the header of a segment with records after it: cut the log there,
                // as any other damage. Its note comes first, once the cut is made.
                let at = notes.len();
                remove_after_cut(files, kept, &segments[index..], directory, notes)?;
                notes.insert(
                    at,
                    format!(
                        "{}: not a log segment ({why}); the log is cut before it \
                         (--truncateCorruptLog), losing its records and every later one",
                        path.display()
                    ),
                );
                image.next_sequence = image.next_sequence.max(*first_sequence);
                break;
            }
            Err(why) => {
                return Err(format!(
                    "{}: not a log segment ({why}), with records after its header; refusing to \
                     start. --truncateCorruptLog cuts the log before it, losing its records and \
                     every later one",
                    path.display()
                ))
            }
        };
        if let Some(sequence) = named_in_log {
            return Err(format!(
                "{}: record {sequence} is a snapshot's entry, never a log record; refusing to \
                 start",
                path.display()
            ));
        }
        if segment.header.shard != shard || segment.header.first_sequence != *first_sequence {
            return Err(format!(
                "{}: a segment of another shard or name",
                path.display()
            ));
        }
        if let Some(expected) = expected {
            if *first_sequence != expected {
                return Err(format!(
                    "{}: the log skips from record {} to {first_sequence}",
                    path.display(),
                    expected.saturating_sub(1)
                ));
            }
        }
        if image.identity.is_none() {
            image.identity = Some(Identity {
                id_prefix: segment.header.id_prefix,
                sequence_next: 0,
                replica_version_last: 0,
            });
        }
        // The last segment holding no record: the server stopped after creating it and before
        // any record in it was synced. Removed, not listed: the next server creates a segment
        // of the same name, which the old listing would otherwise later delete as covered by a
        // snapshot, with the records written into it since.
        if index == last
            && segment.records == 0
            && matches!(segment.ending, Ending::Clean | Ending::Torn { .. })
        {
            // Its header is intact, so only what follows it could be lost.
            let kept = kept_in(kept.keep(path, &data, STORAGE_BLOCK_BYTES, notes)?);
            let note = match &segment.ending {
                Ending::Torn { offset, reason } => format!(
                    "{}: the last write was cut short ({reason} at offset {offset}) before any \
                     record; the segment is removed{kept}",
                    path.display()
                ),
                _ => format!(
                    "{}: a log segment created before the server stopped, holding no record; \
                     removed{kept}",
                    path.display()
                ),
            };
            remove(path, note, notes)?;
            image.next_sequence = image.next_sequence.max(*first_sequence);
            break;
        }
        let next = *first_sequence + segment.records;
        image.next_sequence = image.next_sequence.max(next);
        expected = Some(next);
        // The records, not the file: the running log preallocates its segments.
        let mut bytes = segment.end as u64;
        image.bytes_read += bytes;
        let mut stop = false;
        match segment.ending {
            // The running log preallocated it; the server that continues starts a new segment,
            // so the room after the records (zeros, which `keep` checks) is given back.
            Ending::Clean if (data.len() as u64) > bytes => {
                let kept = kept.keep(path, &data, segment.end, notes)?;
                files
                    .truncate(path, bytes)
                    .map_err(|error| failed(path, error))?;
                if let Some(kept) = kept {
                    notes.push(format!(
                        "{}: bytes after the end of the records at offset {}; truncated there{}",
                        path.display(),
                        segment.end,
                        kept_in(Some(kept))
                    ));
                }
            }
            Ending::Clean => {}
            Ending::Torn { offset, reason } if index == last => {
                let kept = kept_in(kept.keep(path, &data, offset, notes)?);
                files
                    .truncate(path, offset as u64)
                    .map_err(|error| failed(path, error))?;
                notes.push(format!(
                    "{}: the last write was cut short ({reason} at offset {offset}); \
                     truncated there, after record {}{kept}",
                    path.display(),
                    next.saturating_sub(1)
                ));
                bytes = offset as u64;
            }
            Ending::Torn { offset, reason } | Ending::Corrupt { offset, reason } => {
                if !options.truncate_corrupt {
                    return Err(format!(
                        "{}: damaged log at offset {offset} ({reason}) with later records \
                         after it; refusing to start. --truncateCorruptLog cuts the log there, \
                         losing every record after it",
                        path.display()
                    ));
                }
                let kept_copy = kept_in(kept.keep(path, &data, offset, notes)?);
                // The later segments go first, durably: a power cut between the cut and their
                // removal would leave a log that skips records, which no start gets past. The
                // cut's note comes before theirs, once the cut is made.
                let at = notes.len();
                remove_after_cut(files, kept, &segments[index + 1..], directory, notes)?;
                files
                    .truncate(path, offset as u64)
                    .map_err(|error| failed(path, error))?;
                notes.insert(
                    at,
                    format!(
                        "{}: damaged log at offset {offset} ({reason}); cut there \
                         (--truncateCorruptLog), losing the records after record {}{kept_copy}",
                        path.display(),
                        next.saturating_sub(1)
                    ),
                );
                bytes = offset as u64;
                stop = true;
            }
        }
        // Read: with texts located, nothing reads it again but to copy the few texts that do
        // not stay on disk only, so its pages need not stay resident until the restore.
        if locate_texts {
            files.unload(&data);
        }
        image.segments.push(SegmentFile {
            first_sequence: *first_sequence,
            path: path.clone(),
            bytes,
            allocated_bytes: bytes,
            text_record_bytes: locate_texts.then_some(0),
        });
        if stop {
            break;
        }
    }
    if removed {
        files
            .sync_directory(directory)
            .map_err(|error| failed(directory, error))?;
    }
    image.replay(replayed);
    Ok(image)
}

/// Whether the generation directory `path` holds anything a server wrote after its first start:
/// a log segment, or a snapshot with entries (or one that cannot be read, which is not removed
/// unread).
fn generation_holds_data(files: &impl Files, path: &Path) -> Result<bool, String> {
    let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
    let shards = files.list(path).map_err(|error| failed(path, error))?;
    for shard in shards.iter().filter(|name| name.starts_with("shard-")) {
        let shard = path.join(shard);
        for name in files.list(&shard).map_err(|error| failed(&shard, error))? {
            match parse_name(&name) {
                Some((FileKind::Segment, _)) => return Ok(true),
                Some((FileKind::Snapshot, _)) => {
                    let file = shard.join(&name);
                    let data = files.read(&file).map_err(|error| failed(&file, error))?;
                    let mut entries = 0u64;
                    if read_snapshot(&data, |_| entries += 1).is_ok() && entries == 0 {
                        continue;
                    }
                    return Ok(true);
                }
                None => {}
            }
        }
    }
    Ok(false)
}

/// Opens (or creates) the data directory `root` for `shards` shards and restores every shard.
/// `seed` gives each new shard its message-ID seed (random in the server); `secret` is the
/// server's (`storage::secret`), which made the IDs and receipts the files' messages had; `now_ms`
/// drops what expired while the server was down. A refusal lists, after why, what recovery had
/// noted before it, in shard order: shards are read side by side, so another shard may have cut
/// a torn tail or removed a kept copy meanwhile, as any start would (helper-58's review found
/// those repairs unsaid).
pub fn recover(
    files: &impl Files,
    root: &Path,
    shards: usize,
    now_ms: u64,
    seed: &mut dyn FnMut(usize) -> u64,
    secret: Secret,
    options: RecoveryOptions,
) -> Result<Recovered, String> {
    let started = Instant::now();
    let mut notes = Vec::new();
    let parts = (root, shards, now_ms, secret);
    let kept = KeptAside::open(files, root, RECOVERY_KEPT_BYTES_MAX)?;
    let restored = recover_noting(files, parts, &kept, seed, options, &mut notes);
    if restored.is_err() {
        let unsaid = kept.unsaid(&notes);
        notes.extend(unsaid);
    }
    match restored {
        Ok(Restored {
            shards: starts,
            bytes_read,
            queues,
            messages,
        }) => {
            let summary = format!(
                "recovered {messages} messages in {queues} queues ({:.1} MiB of snapshots and log \
                 in {}) in {} ms",
                bytes_read as f64 / (1 << 20) as f64,
                root.display(),
                started.elapsed().as_millis()
            );
            Ok(Recovered {
                shards: starts,
                summary,
                notes,
            })
        }
        Err(why) if notes.is_empty() => Err(why),
        Err(why) => Err(format!(
            "{why}\nbefore it refused, recovery noted these (repairs any start makes: files cut, \
             removed or kept aside; and messages it would have left out, still in the files):\n{}",
            notes.join("\n")
        )),
    }
}

/// `recover`'s work, its notes in `notes` as it goes.
fn recover_noting<F: Files>(
    files: &F,
    (root, mut shards, now_ms, secret): (&Path, usize, u64, Secret),
    kept: &KeptAside<'_, F>,
    seed: &mut dyn FnMut(usize) -> u64,
    options: RecoveryOptions,
    notes: &mut Vec<String>,
) -> Result<Restored, String> {
    let failed = |what: &Path, why: std::io::Error| format!("{}: {why}", what.display());
    files
        .create_directories(root)
        .map_err(|error| failed(root, error))?;
    let current_path = root.join(CURRENT_FILE_NAME);
    let (current, current_format) = match files.read(&current_path) {
        Ok(text) => {
            let (generation, format) = std::str::from_utf8(&text)
                .ok()
                .and_then(parse_current)
                .ok_or_else(|| format!("{}: not a generation name", current_path.display()))?;
            if format > DATA_FORMAT {
                return Err(format!(
                    "{}: files of data format {format}, written by a newer azq; this one reads \
                     formats up to {DATA_FORMAT}",
                    current_path.display()
                ));
            }
            (Some(generation), format)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => (None, DATA_FORMAT),
        Err(error) => return Err(failed(&current_path, error)),
    };
    // Generations other than the current one are leftovers of an interrupted change of
    // shard count (the new one, never made current) or of its clean-up (the old one); so is
    // a `CURRENT.tmp` that was never renamed.
    let mut removed = false;
    let names = files.list(root).map_err(|error| failed(root, error))?;
    let current_exists =
        current.is_some_and(|generation| names.contains(&generation_name(generation)));
    for name in names {
        let path = root.join(&name);
        if parse_generation(&name).is_some_and(|generation| Some(generation) != current) {
            // Without the current generation (`CURRENT` missing, or naming no directory: a
            // user's clean-up, a lost name), another one may be the data itself: only one a
            // first start left before it wrote `CURRENT` (empty snapshots) is removed.
            if !current_exists && generation_holds_data(files, &path)? {
                let why = match current {
                    None => format!("{} is missing", current_path.display()),
                    Some(generation) => format!(
                        "{} names {}, which does not exist",
                        current_path.display(),
                        generation_name(generation)
                    ),
                };
                // With the data format (`current_text`): a name alone reads as format 2, which
                // a build from before packed puts takes for its own, and it removed a last
                // segment of packed puts (helper-86's review).
                let text = current_text(parse_generation(&name).expect("a generation's name"));
                return Err(format!(
                    "{why}, but {} holds queue data; refusing to start rather than remove it. If \
                     it is the data to keep, write its name and this build's data format into \
                     CURRENT (`echo '{}' > {}`)",
                    path.display(),
                    text.trim(),
                    current_path.display()
                ));
            }
            files
                .remove_directory(&path)
                .map_err(|error| failed(&path, error))?;
            notes.push(format!(
                "{}: a generation of an interrupted change of shard count (or rewrite); removed",
                path.display()
            ));
            removed = true;
        } else if name == CURRENT_TEMPORARY_NAME {
            files
                .remove_file(&path)
                .map_err(|error| failed(&path, error))?;
            notes.push(format!(
                "{}: a change of shard count interrupted before it switched; removed",
                path.display()
            ));
            removed = true;
        }
    }
    if removed {
        files
            .sync_directory(root)
            .map_err(|error| failed(root, error))?;
    }
    let mut images = Vec::new();
    // Whether this start may keep the files' shard count of `old` where a change would be
    // refused or rewrite a backlog larger than memory (`RecoveryOptions::shards_default`).
    let may_keep = |old: usize, now: usize| {
        options.shards_default && options.reshard_text_bytes_max.is_some() && old < now
    };
    if let Some(generation) = current {
        let directory = root.join(generation_name(generation));
        let shard_directories: Vec<String> = files
            .list(&directory)
            .map_err(|error| failed(&directory, error))?
            .into_iter()
            .filter(|name| name.starts_with("shard-"))
            .collect();
        for (shard, name) in shard_directories.iter().enumerate() {
            if *name != shard_directory_name(shard) {
                return Err(format!(
                    "{}: shard directories are not 0..N",
                    directory.display()
                ));
            }
        }
        // Located whatever the count: a change writes the texts anew from where they are
        // read (`Image::restore`), so the files are read lazily and let go of behind the
        // reader as for the same count (read whole, every page of them stayed resident), and
        // the places found are forgotten if the count changes.
        let locate_texts = options.locate_texts;
        let reads = shard_directories.iter().enumerate().map(|(shard, name)| {
            let directory = directory.join(name);
            move || {
                let mut shard_notes = Vec::new();
                let image = read_shard(
                    files,
                    &directory,
                    shard as u32,
                    options,
                    locate_texts,
                    kept,
                    &mut shard_notes,
                );
                (image, shard_notes)
            }
        });
        // Each shard's notes in shard order, as one thread would make them, and every shard's
        // refusal (the others read on, changing only what any start would: temporary files,
        // torn tails, kept copies; `recover` says so after the refusal).
        let mut refusals = Vec::new();
        for (image, shard_notes) in each_shard(files, reads.collect()) {
            notes.extend(shard_notes);
            match image {
                Ok(image) => images.push(image),
                Err(why) => refusals.push(why),
            }
        }
        if !refusals.is_empty() {
            return Err(refusals.join("\n"));
        }
    }
    let bytes_read: u64 = images.iter().map(|image| image.bytes_read).sum();
    let old_shards = images.len();
    let mut same_layout = current.is_some() && images.len() == shards;
    // Whether a shard's files hold a queue this build gives another shard of theirs:
    // `shard_for` hashes with ahash, whose output follows the CPU features and version it was
    // built with, so files from another build may (helper-58's review: a build with AES). Such
    // files are written anew as for a change of count, which puts every queue on its owner;
    // restored in place, a queue would go to a shard whose files do not hold it.
    let misplaced = images.iter().enumerate().any(|(shard, image)| {
        image
            .queues
            .values()
            .any(|queue| shard_for(&queue.key, old_shards) != shard)
    });
    let rehashed = same_layout && misplaced;
    same_layout &= !rehashed;
    // What a change would move, for its bounds below, by the shard it goes to, in one pass
    // over the images before any text is copied (the files are mapped, not read into memory
    // yet).
    let mut kept = vec![Kept::default(); shards];
    if !same_layout {
        for (old_shard, image) in images.iter().enumerate() {
            image.kept(old_shard, now_ms, &mut kept);
        }
    }
    let (messages, text_bytes, entry_bytes) = kept.iter().fold((0, 0, 0), |sums, kept| {
        let (messages, text_bytes, entry_bytes) = sums;
        (
            messages + kept.messages,
            text_bytes + kept.text_bytes,
            entry_bytes + kept.entry_bytes,
        )
    });
    if let Some(bytes_max) = options.reshard_text_bytes_max.filter(|_| !same_layout) {
        // With texts located, they go from the old files into the new ones a piece at a
        // time, never all in memory: only a start that keeps every text in memory
        // (`--text-memory all`) is refused.
        let refused = text_bytes > bytes_max && !options.locate_texts;
        // Files another build wrote move at any count, kept or not (helper-59's review: the
        // advice below named a --shards that would be refused the same way).
        if refused && misplaced {
            return Err(format!(
                "the files hold queues on shards this build gives to others (they were written \
                 by a build whose queue hash differs): moving them copies every message's text \
                 through memory, and their {} are more than --max-memory ({}); start with \
                 --max-memory above them, or with the build that wrote the files",
                crate::cgroup::format_bytes(text_bytes),
                crate::cgroup::format_bytes(bytes_max),
            ));
        }
        if text_bytes > bytes_max && !misplaced && may_keep(old_shards, shards) {
            // Not refused with texts located, but a default keeps the files as they are rather
            // than rewrite a backlog larger than memory at every start on more CPUs; never files
            // another build wrote, whose queues are on shards this one gives to others
            // (helper-75's review: kept so, with texts located, since 543a0a4).
            let (how, change) = match options.locate_texts {
                true => ("rewrites every message into new files", ""),
                false => (
                    "copies every message's text through memory",
                    " with --max-memory above the texts",
                ),
            };
            notes.push(format!(
                "the files are for {old_shards} shard{} and this start's default is {shards}: a \
                 change of shard count {how}, and their texts' {} are more than --max-memory \
                 ({}); serving with {old_shards} as the files have them (--shards \
                 {shards}{change} changes it)",
                if old_shards == 1 { "" } else { "s" },
                crate::cgroup::format_bytes(text_bytes),
                crate::cgroup::format_bytes(bytes_max),
            ));
            shards = old_shards;
            same_layout = true;
        } else if refused {
            let keep = match keep_advice(options, old_shards, shards) {
                (advice, true) => format!("{advice}; "),
                (advice, false) => format!("{advice}, or "),
            };
            return Err(format!(
                "the files are for a shard count of {old_shards} and this start's is {shards}: \
                 a change of shard count copies every message's text through memory, and their \
                 {} are more than --max-memory ({}); {keep}start with --max-memory above them",
                crate::cgroup::format_bytes(text_bytes),
                crate::cgroup::format_bytes(bytes_max),
            ));
        }
    }
    // With texts located a change is bounded by its messages, not their texts: it holds about
    // `RESHARD_MESSAGE_BYTES` a message while it moves them. Past the memory the process may
    // have it is refused before anything is written (or, for a default count, the files' count
    // kept), not killed by the out-of-memory killer at every start.
    let bounded = options.reshard_memory_bytes_max;
    if let Some(memory_max) = bounded.filter(|_| !same_layout && options.locate_texts) {
        let memory = messages.saturating_mul(RESHARD_MESSAGE_BYTES);
        let why = format!(
            "holds about {RESHARD_MESSAGE_BYTES} bytes a message while it moves them, and their \
             {messages} messages would take about {}, more than the memory this process may have \
             ({})",
            crate::cgroup::format_bytes(memory),
            crate::cgroup::format_bytes(memory_max),
        );
        if memory > memory_max {
            let keep = !misplaced && may_keep(old_shards, shards);
            let (counts, remedy) = (
                (old_shards, shards),
                "start where the process may have more memory",
            );
            notes.push(past_a_bound(
                &why, remedy, misplaced, keep, options, counts,
            )?);
            shards = old_shards;
            same_layout = true;
        }
    }
    // A change writes every message, queue and setting anew beside the files, which go only
    // once the new generation is in place: past the free disk it would meet ENOSPC at every
    // start (safe for the data, the next start removes what it wrote, but never serving); and
    // azq's files, the old generation's and the new one's, are bounded by `--max-disk` all
    // the while (a change made past it broke the flag's promise, and left the shards refusing
    // growth). The free space is measured now, after what an interrupted change left is
    // removed (measured before, it refused a change that fit: helper-76's review). Files with
    // nothing to move, and a first start, are not bounded (`--min-free-disk 100%` starts,
    // refusing growth).
    let mut shard_records_bytes = vec![0; shards];
    if !same_layout {
        for image in &images {
            image.records_bytes(&mut shard_records_bytes);
        }
    }
    let records_bytes: u64 = shard_records_bytes.iter().sum();
    let moving = !same_layout && (messages > 0 || records_bytes > 0);
    let free = options.free_disk_min.and_then(|reserve| {
        let space = files.space(root).ok()?;
        Some(
            space
                .free_bytes
                .saturating_sub(reserve.bytes(space.total_bytes)),
        )
    });
    if moving && (free.is_some() || options.disk_bytes_max.is_some()) {
        // Beside the files first; then, once they are gone, each new shard's log opens a
        // segment at its first write (a Get's or a Delete's too, which no limit refuses: the
        // shard stops on ENOSPC), where a start at the same count has its own (helper-77's
        // review of 0dea61e, which had left the segments out).
        let written = reshard_disk_bytes(entry_bytes, records_bytes, shards);
        let old_bytes = current.map_or(0, |old| {
            directory_bytes(files, &root.join(generation_name(old)))
        });
        let segments = (shards as u64).saturating_mul(LOG_SEGMENT_BYTES);
        let after = written.saturating_add(segments);
        // What the file system must have free, and what azq's files take at their largest.
        let disk = written.max(after.saturating_sub(old_bytes));
        let files_bytes = old_bytes.saturating_add(written).max(after);
        let what = format!(
            "writes every message anew beside the files before they go ({} of them), and each \
             new shard's log then opens a segment ({}): their {messages} messages, {} of texts \
             and {} of queues and settings",
            crate::cgroup::format_bytes(old_bytes),
            crate::cgroup::format_bytes(LOG_SEGMENT_BYTES),
            crate::cgroup::format_bytes(text_bytes),
            crate::cgroup::format_bytes(records_bytes),
        );
        let format_bytes = crate::cgroup::format_bytes;
        // Each shard's files within its even share of `--max-disk`, as it runs: a queue is
        // never split, so one shard may take every message (helper-79's review: past its share
        // at once, its first write took it further).
        let largest = (0..shards).map(|shard| {
            let Kept {
                messages,
                text_bytes,
                entry_bytes,
            } = kept[shard];
            let records_bytes = shard_records_bytes[shard];
            // Its snapshot, as `reshard_disk_bytes` bounds it for one shard, less `CURRENT`'s
            // block, which is no shard's.
            let written =
                reshard_disk_bytes(entry_bytes, records_bytes, 1) - STORAGE_BLOCK_BYTES as u64;
            let bytes = written.saturating_add(LOG_SEGMENT_BYTES);
            (bytes, shard, messages, text_bytes, records_bytes)
        });
        let largest = largest.max().expect("a shard at least");
        let shares = largest.0.saturating_mul(shards as u64);
        // Each bound past, with what lifts it: room, or a `--max-disk` the flag takes (whole
        // MiB). Both are named where both are past (named one at a time, the start that made
        // room met the other).
        let free_past = free.filter(|&disk_max| disk > disk_max).map(|disk_max| {
            format!(
                "need about {}, more than the file system has free beyond --min-free-disk ({})",
                format_bytes(disk),
                format_bytes(disk_max),
            )
        });
        // Past the whole flag, or one shard's share (whose reason names the shard, not what
        // the change writes: `false`).
        let max_past = match options.disk_bytes_max {
            Some(files_max) if files_bytes > files_max => Some((
                format!(
                    "would take azq's files to about {}, more than --max-disk ({})",
                    format_bytes(files_bytes),
                    format_bytes(files_max),
                ),
                true,
            )),
            Some(files_max) if largest.0 > files_max / shards as u64 => {
                let (bytes, shard, messages, text_bytes, records_bytes) = largest;
                let why = format!(
                    "would take shard {shard}'s files to about {} (its {messages} messages, {} \
                     of texts and {} of queues and settings, and a log segment), more than its \
                     share of --max-disk ({}: {} split evenly over {shards} shards)",
                    format_bytes(bytes),
                    format_bytes(text_bytes),
                    format_bytes(records_bytes),
                    format_bytes(files_max / shards as u64),
                    format_bytes(files_max),
                );
                Some((why, false))
            }
            _ => None,
        };
        // A `--max-disk` that lets it, for this count: a default count follows `--max-disk`
        // too, so there it is named with the count (helper-80's review: the size alone made
        // the default the files' count, which no bound checks, and left a shard past its
        // share).
        let max_remedy = || {
            let count = match options.shards_default {
                true => format!("--shards {shards} "),
                false => String::new(),
            };
            let megabytes = files_bytes.max(shares).div_ceil(1 << 20);
            format!("start with {count}--max-disk {megabytes}M or more")
        };
        let past = match (free_past, max_past) {
            (Some(free), Some((max, _))) => Some((
                format!("{what} {free}, and {max}"),
                format!("free disk and {}", max_remedy()),
            )),
            (Some(free), None) => Some((format!("{what} {free}"), "free disk".to_string())),
            (None, Some((max, true))) => Some((format!("{what} {max}"), max_remedy())),
            (None, Some((max, false))) => Some((max, max_remedy())),
            (None, None) => None,
        };
        if let Some((why, remedy)) = past {
            let remedy = remedy.as_str();
            let keep = !misplaced && may_keep(old_shards, shards);
            let counts = (old_shards, shards);
            notes.push(past_a_bound(
                &why, remedy, misplaced, keep, options, counts,
            )?);
            shards = old_shards;
            same_layout = true;
        }
    }
    if !same_layout {
        // Located in case the files' count was kept: a change of count copies every text.
        for image in &mut images {
            image.forget_text_places();
        }
    }
    // With texts located, a change of count writes them anew from the files read, not copied
    // into memory first (`Image::restore`): those files, to let go of what is read of them.
    let rewritten = !same_layout && options.locate_texts;
    let read = images.iter().filter(|_| rewritten);
    let read_files = ReadFiles::new(read.flat_map(|image| image.sources.data()));
    let generation = match current {
        Some(generation) if same_layout => generation,
        Some(generation) => generation + 1,
        None => 1,
    };
    let generation_directory = root.join(generation_name(generation));

    // Settings: the newest version of each, kept only for queues that still exist.
    let live_keys: std::collections::HashSet<QueueKey> = images
        .iter()
        .flat_map(|image| image.queues.values().map(|queue| queue.key.clone()))
        .collect();
    let mut acls: HashMap<QueueKey, (u64, Vec<SignedIdentifier>)> = HashMap::new();
    let mut properties: HashMap<String, (u64, ServiceProperties)> = HashMap::new();
    for image in &mut images {
        for (key, (version, identifiers)) in image.acls.drain() {
            if live_keys.contains(&key) && acls.get(&key).is_none_or(|(known, _)| *known < version)
            {
                acls.insert(key, (version, identifiers));
            }
        }
        for (account, (version, value)) in image.properties.drain() {
            if properties
                .get(&account)
                .is_none_or(|(known, _)| *known < version)
            {
                properties.insert(account, (version, value));
            }
        }
    }
    let version_last = images
        .iter()
        .filter_map(|image| image.identity.map(|identity| identity.replica_version_last))
        .max()
        .unwrap_or(0);

    // Every live queue, with its messages, to the shard that owns it now.
    let mut states: Vec<ShardState> = (0..shards)
        .map(|shard| ShardState::with_secret(shard, seed(shard), secret))
        .collect();
    let identities: Vec<Identity> = states
        .iter()
        .enumerate()
        .map(|(shard, state)| {
            let mut identity = images
                .get(shard)
                .and_then(|image| image.identity)
                .unwrap_or_else(|| state.identity());
            identity.replica_version_last = identity.replica_version_last.max(version_last);
            identity
        })
        .collect();
    // Queues and messages moved from other shards' files take places above every one of the
    // shard's own (`ShardState::restore`): the image of the same shard's record indices and
    // slots, read before any image is restored (each restores into every shard).
    let moved_from: Vec<(u32, u32)> = (0..shards)
        .map(|shard| {
            let image = images.get(shard);
            image.map_or((0, 0), |image| image.moved_from(shard, shards, now_ms))
        })
        .collect();
    let mut restorers: Vec<_> = states
        .iter_mut()
        .zip(&identities)
        .zip(moved_from)
        .map(|((state, identity), moved_from)| state.restore(*identity, moved_from))
        .collect();
    // On this thread: what the states keep is allocated in one arena, as before recovery read
    // shards side by side (restored on their threads, a restart of 2,000,000 messages on two
    // shards kept 40 MiB more resident, allocations of two arenas mixed with the images').
    let (mut queues_restored, mut messages_restored) = (0usize, 0usize);
    for (old_shard, image) in images.iter_mut().enumerate() {
        let (queues, messages) =
            image.restore(old_shard, &mut restorers, secret, now_ms, rewritten);
        queues_restored += queues;
        messages_restored += messages;
    }
    for (shard, restorer) in restorers.iter_mut().enumerate() {
        for (key, (version, identifiers)) in &acls {
            let replica = Replica::QueueAcl {
                queue: key.clone(),
                version: *version,
                identifiers: Some(identifiers.clone().into()),
            };
            restorer.replica(replica, shard_for(key, shards) == shard);
        }
        for (account, (version, value)) in &properties {
            let replica = Replica::ServiceProperties {
                account: account.clone(),
                version: *version,
                properties: Arc::new(value.clone()),
            };
            restorer.replica(replica, home_shard(account, shards) == shard);
        }
    }
    for restorer in restorers {
        restorer.finish();
    }

    let mut starts = Vec::with_capacity(shards);
    if same_layout {
        // Files a build from before wrote: `CURRENT` says the format this one writes before
        // any of its files is (a build from before then refuses them all, as it must).
        if current_format < DATA_FORMAT {
            write_current(files, root, generation)?;
            notes.push(format!(
                "{}: says data format {DATA_FORMAT} now (was {current_format}): an azq from \
                 before packed puts refuses these files from here on",
                current_path.display()
            ));
        }
        for (state, image) in states.into_iter().zip(images) {
            let mut state = state;
            state.start_journal(image.next_sequence);
            starts.push(ShardStart {
                state,
                directory: generation_directory.join(shard_directory_name(starts.len())),
                segments: image.segments,
                snapshot: image.snapshot,
                kept: image.kept,
                kept_named_bytes: image.kept_named_bytes,
                named: image.named,
                left_out: image.left_out,
                texts: image.texts,
            });
        }
    } else {
        // A new generation: each shard's state as a snapshot from which its new log starts.
        for (shard, mut state) in states.into_iter().enumerate() {
            let directory = generation_directory.join(shard_directory_name(shard));
            files
                .create_directories(&directory)
                .map_err(|error| failed(&directory, error))?;
            // Its entries are where the texts are from now on: each is left there, out of
            // memory, as its piece is written (`leave_recovered_text`; each was read out of
            // the old generation's files), so neither the snapshot nor the texts are ever in
            // memory whole, whatever the backlog; with every text in memory
            // (`--text-memory all`) they stay there, copied (`Image::restore`), untracked.
            let path = directory.join(snapshot_name(0));
            let header = snapshot_header(shard as u32, &state.identity(), 0);
            let mut texts = RecoveredTexts::default();
            texts.snapshot = options.locate_texts.then_some(0);
            let (mut encoded, mut written, mut next) = (Encoded::default(), 0u64, None);
            files
                .write_synced_in_pieces(&path, &mut |out| {
                    let more = match next {
                        None => {
                            out.put_slice(&header);
                            state.snapshot_queues(None, usize::MAX, out, &mut encoded);
                            state.snapshot_settings(out, &mut encoded);
                            next = Some(0);
                            true
                        }
                        Some(from) if from < state.slab_slots() => {
                            let end = state.snapshot_step_end(
                                from,
                                SNAPSHOT_STEP_SLOTS,
                                SNAPSHOT_STEP_TEXT_BYTES,
                            );
                            let (read, mut naming) = (TextsRead::new(), Naming::default());
                            state.snapshot_messages(
                                from..end,
                                &read,
                                &mut naming,
                                out,
                                &mut encoded,
                            );
                            let records = if options.locate_texts {
                                text_records(out)
                            } else {
                                Vec::new()
                            };
                            let mut read = Vec::with_capacity(records.len());
                            for text in records {
                                let at = written + text.at as u64;
                                let locator =
                                    TextLocator::new(TextFile::Snapshot(0), at, text.bytes as u32);
                                read.push(state.leave_recovered_text(
                                    text.slot,
                                    text.generation,
                                    locator,
                                    &mut texts,
                                ));
                            }
                            read_files.let_go(files, &read);
                            next = Some(end);
                            true
                        }
                        Some(_) => {
                            out.put_slice(&snapshot_trailer(encoded.entries, &[]));
                            false
                        }
                    };
                    written += out.len() as u64;
                    more
                })
                .map_err(|error| failed(&path, error))?;
            files
                .sync_directory(&directory)
                .map_err(|error| failed(&directory, error))?;
            state.start_journal(0);
            starts.push(ShardStart {
                state,
                directory,
                segments: Vec::new(),
                snapshot: Some((path, written)),
                kept: Vec::new(),
                kept_named_bytes: 0,
                named: (0, 0),
                left_out: 0,
                texts,
            });
        }
        files
            .sync_directory(&generation_directory)
            .map_err(|error| failed(&generation_directory, error))?;
        write_current(files, root, generation)?;
        if let Some(old) = current {
            let old_directory = root.join(generation_name(old));
            let why = if rehashed {
                " (the files held queues on shards this build gives to others: they were \
                 written by a build whose queue hash differs)"
            } else {
                ""
            };
            notes.push(format!(
                "{}: written for {shards} shard{} (was {old_shards}){why}; queues moved to the \
                 shards that own them now",
                generation_directory.display(),
                if shards == 1 { "" } else { "s" },
            ));
            files
                .remove_directory(&old_directory)
                .map_err(|error| failed(&old_directory, error))?;
            files
                .sync_directory(root)
                .map_err(|error| failed(root, error))?;
        }
    }
    Ok(Restored {
        shards: starts,
        bytes_read,
        queues: queues_restored,
        messages: messages_restored,
    })
}

/// A change of shard count from `counts.0` (the files') to `counts.1` (this start's) that
/// would pass one of its bounds, `why`, which `remedy` lifts: where the start may `keep` the
/// files' count (a default count, never for files another build wrote) the note saying so;
/// otherwise the refusal, naming what keeps the files as they are.
fn past_a_bound(
    why: &str,
    remedy: &str,
    misplaced: bool,
    keep: bool,
    options: RecoveryOptions,
    (old_shards, shards): (usize, usize),
) -> Result<String, String> {
    if keep {
        return Ok(format!(
            "the files are for {old_shards} shard{} and this start's default is {shards}: a \
             change of shard count {why}; serving with {old_shards} as the files have them",
            if old_shards == 1 { "" } else { "s" },
        ));
    }
    let what = if misplaced && old_shards == shards {
        "the files hold queues on shards this build gives to others (they were written by a \
         build whose queue hash differs): moving them"
            .to_string()
    } else {
        format!(
            "the files are for a shard count of {old_shards} and this start's is {shards}: a \
             change of shard count"
        )
    };
    let keep = match (misplaced, keep_advice(options, old_shards, shards)) {
        (true, _) => format!(
            "start with the build that wrote the files and --shards {old_shards}, which keeps \
             them as they are, or {remedy}"
        ),
        (false, (advice, true)) => format!(
            "{advice}: {remedy}, or start with the CPUs and --max-disk for {old_shards} shards"
        ),
        (false, (advice, false)) => format!("{advice}, or {remedy}"),
    };
    Err(format!("{what} {why}; {keep}"))
}

/// What a change of shard count onto `shards` writes for messages whose entries in the new
/// snapshots take `entry_bytes` (`Image::kept`) and queues and settings of `records_bytes`
/// (`Image::records_bytes`), at most: those records, two blocks a shard for its snapshot's
/// header and trailer and its last block's rounding, and one for `CURRENT`. (The segment each
/// new log opens once it serves is counted beside it, once the old files are gone.)
pub(super) fn reshard_disk_bytes(entry_bytes: u64, records_bytes: u64, shards: usize) -> u64 {
    let blocks = (shards as u64).saturating_mul(2).saturating_add(1);
    let headers = blocks.saturating_mul(STORAGE_BLOCK_BYTES as u64);
    let written = entry_bytes.saturating_add(records_bytes);
    written.saturating_add(headers)
}

/// The bytes of the files under `directory`, its subdirectories' too (a size that cannot be
/// read counts nothing: the bound it lowers is then the stricter).
fn directory_bytes<F: Files>(files: &F, directory: &Path) -> u64 {
    let names = files.list(directory).unwrap_or_default().into_iter();
    names
        .map(|name| {
            let path = directory.join(name);
            files
                .size(&path)
                .unwrap_or_else(|_| directory_bytes(files, &path))
        })
        .sum()
}

/// What a refusal of a change of shard count from `old_shards` to `shards` advises to keep the
/// files as they are, and whether it is the default count's reason rather than a flag to give:
/// a default count below the files' follows this machine's CPUs or `--max-disk`'s share, which
/// `--shards` cannot keep (helper-57's review).
fn keep_advice(options: RecoveryOptions, old_shards: usize, shards: usize) -> (String, bool) {
    if options.shards_default && old_shards > shards {
        let advice = format!(
            "this start's default count follows its CPUs and --max-disk ({} a shard at least)",
            crate::cgroup::format_bytes(crate::limits::DISK_BYTES_PER_SHARD_MIN)
        );
        (advice, true)
    } else {
        let advice = format!(
            "start with --shards {old_shards} (or --cpus listing that many CPUs), which keeps \
             the files as they are"
        );
        (advice, false)
    }
}

/// The files recovery read (mapped on Unix), by the address of their first byte, while a
/// change of shard count writes the texts that are slices of them into the new generation:
/// once a piece is written, the pages its texts were read from are let go of
/// (`Files::unload_range`). A text's file stays mapped while any other text is a slice of it,
/// and the texts of one old file go to every new shard, so without this every page of the old
/// files read stayed resident until the last shard was written (a backlog larger than memory).
struct ReadFiles {
    by_address: BTreeMap<usize, Bytes>,
}

impl ReadFiles {
    fn new<'a>(read: impl Iterator<Item = &'a Bytes>) -> ReadFiles {
        let by_address = read
            .filter(|data| !data.is_empty())
            .map(|data| (data.as_ptr() as usize, data.clone()))
            .collect();
        ReadFiles { by_address }
    }

    /// Lets go of the pages of the files read that `texts` (slices of them, or not) span,
    /// in each file from the first to the last byte of them there.
    fn let_go(&self, files: &impl Files, texts: &[Bytes]) {
        let mut spans: HashMap<usize, Range<usize>> = HashMap::new();
        for text in texts.iter().filter(|text| !text.is_empty()) {
            let address = text.as_ptr() as usize;
            let Some((&start, data)) = self.by_address.range(..=address).next_back() else {
                continue;
            };
            let at = address - start;
            if at + text.len() > data.len() {
                continue;
            }
            let span = spans.entry(start).or_insert(at..at + text.len());
            span.start = span.start.min(at);
            span.end = span.end.max(at + text.len());
        }
        for (start, span) in spans {
            files.unload_range(&self.by_address[&start], span);
        }
    }
}

/// What `recover_noting` made: the shards, and for the summary the bytes read and the queues
/// and messages restored.
struct Restored {
    shards: Vec<ShardStart>,
    bytes_read: u64,
    queues: usize,
    messages: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::files::data_directory;
    use crate::storage::sim::SimDisk;

    /// A message as put (never leased, no TTL) in `(queue, slot, generation)`.
    fn put_state(
        (queue, slot, generation): (u32, u32, u32),
        sequence: u64,
        foreign_id: Option<MessageId>,
        text: Bytes,
    ) -> MessageState {
        MessageState {
            queue,
            slot,
            generation,
            sequence,
            insertion_ms: 1,
            ttl_s: crate::queue::slab::TTL_S_NEVER,
            delay_s: 0,
            dequeue_count: 0,
            lease: 0,
            visible_ms: 0,
            foreign_id,
            text,
        }
    }

    /// A change of shard count counts each setting on the shard that will write it, as the
    /// running shards do (`Replicas`: a queue's ACL by its owner, an account's properties by
    /// its home shard): what each new shard's estimate holds besides its messages. Accounts
    /// and queues land on every shard of 2 to 4, so counting any of them on one shard fails
    /// (helper-80's review: properties counted on shard 0 passed every test).
    #[test]
    fn a_change_counts_each_setting_on_the_shard_that_writes_it() {
        let mut image = Image::empty();
        let accounts: Vec<String> = (0..24).map(|n| format!("account{n:02}")).collect();
        for (n, account) in accounts.iter().enumerate() {
            let mut properties = ServiceProperties::default();
            properties.logging.version = "1.0".repeat(n + 1);
            image
                .properties
                .insert(account.clone(), (n as u64, properties));
        }
        let queues: Vec<QueueKey> = (0..24)
            .map(|n| QueueKey {
                account: "devstoreaccount1".to_string(),
                name: format!("queue{n:02}"),
            })
            .collect();
        for (n, queue) in queues.iter().enumerate() {
            let identifiers = vec![SignedIdentifier {
                id: "p".repeat(n + 1),
                access_policy: None,
            }];
            image.acls.insert(queue.clone(), (n as u64, identifiers));
        }
        let bytes_of = |record: Record<&[u8]>| {
            let mut out = BytesMut::new();
            encode(&record, 0, &mut out);
            out.len() as u64
        };
        for shards in 1..=4 {
            let mut expected = vec![0u64; shards];
            for account in &accounts {
                let (version, properties) = image.properties[account].clone();
                let record = Record::PropertiesSet {
                    account: account.clone(),
                    version,
                    properties,
                };
                expected[home_shard(account, shards)] += bytes_of(record);
            }
            for queue in &queues {
                let (version, identifiers) = image.acls[queue].clone();
                let record = Record::AclSet {
                    key: queue.clone(),
                    version,
                    identifiers,
                };
                expected[shard_for(queue, shards)] += bytes_of(record);
            }
            let homes: std::collections::HashSet<usize> = accounts
                .iter()
                .map(|account| home_shard(account, shards))
                .collect();
            let owners: std::collections::HashSet<usize> = queues
                .iter()
                .map(|queue| shard_for(queue, shards))
                .collect();
            assert_eq!((homes.len(), owners.len()), (shards, shards), "spread");
            let mut counted = vec![0u64; shards];
            image.records_bytes(&mut counted);
            assert_eq!(counted, expected, "{shards} shards");
        }
    }

    /// Touching a range makes resident exactly the chunks its bytes are in (the chunk of its
    /// start for an empty range), at every start and length around three chunk edges.
    #[test]
    fn a_touched_range_makes_the_chunks_of_its_bytes_resident() {
        for start in 0..40 {
            for length in 0..20 {
                let mut chunks = ResidentChunks::new(8, 1 << 20);
                chunks.touch(3, start..start + length, |_, _| panic!("nothing let go"));
                let mut expected: Vec<(u64, usize)> =
                    (start..start + length).map(|byte| (3, byte / 8)).collect();
                if length == 0 {
                    expected.push((3, start / 8));
                }
                expected.dedup();
                assert_eq!(
                    Vec::from(chunks.order.clone()),
                    expected,
                    "{start}+{length}"
                );
                let resident: std::collections::BTreeSet<_> =
                    chunks.resident.iter().copied().collect();
                assert!(resident.iter().eq(expected.iter()), "{start}+{length}");
            }
        }
    }

    /// Records read in order (every size, crossing chunk edges, over three files) let each
    /// chunk go once, in the order they were first touched, never more than the bound
    /// resident, which never grows; read at random over chunks within the bound, none goes;
    /// read at random over ten times more, the bound grows to under twice them, letting go
    /// stops, and at most four times their number went before.
    #[test]
    fn resident_chunks_stay_within_their_bound_unless_reads_are_scattered() {
        const CHUNK: usize = 64;
        let mut random = crate::random::SplitMix64::new(5);
        let mut chunks = ResidentChunks::new(CHUNK, 4 * CHUNK + CHUNK / 2);
        assert_eq!(chunks.most, 4);
        let (mut let_go, mut first_touched) = (Vec::new(), Vec::new());
        for file in 0..3u64 {
            let mut at = 0;
            while at < CHUNK * 50 {
                let length = (random.next_u64() % 150) as usize;
                for byte in at..at + length {
                    if !first_touched.contains(&(file, byte / CHUNK)) {
                        first_touched.push((file, byte / CHUNK));
                    }
                }
                chunks.touch(file, at..at + length, |file, range| {
                    let_go.push((file, range))
                });
                assert!(chunks.order.len() <= 4);
                at += length.max(1);
            }
        }
        assert_eq!(chunks.most, 4, "read in order, the bound holds");
        let expected: Vec<_> = first_touched[..first_touched.len() - 4]
            .iter()
            .map(|&(file, chunk)| (file, chunk * CHUNK..(chunk + 1) * CHUNK))
            .collect();
        assert_eq!(let_go, expected);
        for spread in [4, 40] {
            let mut chunks = ResidentChunks::new(CHUNK, 4 * CHUNK);
            let mut let_go = 0;
            for round in 0..2 {
                let mut gone = 0;
                for _ in 0..5_000 {
                    let chunk = (random.next_u64() % spread) as usize;
                    let byte = chunk * CHUNK + (random.next_u64() % CHUNK as u64) as usize;
                    chunks.touch(7, byte..byte + 1, |_, _| gone += 1);
                    assert!(chunks.order.len() <= chunks.most);
                }
                if round == 0 {
                    let_go = gone;
                } else {
                    assert_eq!(gone, 0, "{spread}: still letting go once grown");
                }
            }
            if spread == 4 {
                assert_eq!((let_go, chunks.most), (0, 4), "within the bound");
            } else {
                assert!(chunks.most >= 40 && chunks.most < 80, "{}", chunks.most);
                assert!(let_go <= 4 * 40, "{let_go} let go");
            }
        }
    }

    /// Reads in order that bring back a chunk let go of before once every 32 chunks brought in
    /// (a sixteenth of each bound's worth, or none) keep the bound; once every 4 (a quarter),
    /// they double it each bound's worth of chunks, up to where no chunk is let go of again.
    #[test]
    fn the_bound_grows_only_where_an_eighth_of_the_chunks_brought_in_come_back() {
        for (every, grows) in [(32, false), (4, true)] {
            let mut chunks = ResidentChunks::new(1, 16);
            let mut gone = std::collections::VecDeque::new();
            let mut brought_back = 0;
            for chunk in 0..20_000usize {
                chunks.touch(0, chunk..chunk + 1, |_, range| gone.push_back(range.start));
                if chunk % every == every - 1 {
                    if let Some(earlier) = gone.pop_front() {
                        assert!(chunks.let_go.contains(&(0, earlier)));
                        chunks.touch(0, earlier..earlier + 1, |_, range| {
                            gone.push_back(range.start)
                        });
                        brought_back += 1;
                    }
                }
            }
            assert!(brought_back > 500, "{brought_back}");
            if grows {
                assert!(chunks.most >= 1024, "every {every}: {}", chunks.most);
            } else {
                assert_eq!(chunks.most, 16, "every {every}");
            }
        }
    }

    /// helper-64: records read in order but for a handful of slots reused late (a consumer
    /// took the oldest message now and then, and the next put took its slot: its record is far
    /// ahead in the log, read first in slot order). Each of those chunks is touched once out of
    /// order and once in order: a fault or two in all, yet each such chunk, met again after a
    /// bound's worth of chunks, doubles the bound. With five out of place over a log of 8,000
    /// chunks the bound grows 32 times and nearly every chunk read stays resident: the bound
    /// "ends near the chunks the records are in" though they are not scattered.
    #[test]
    fn a_few_records_out_of_order_do_not_grow_the_bound_to_the_whole_log() {
        let mut chunks = ResidentChunks::new(1, 128);
        // The slots reused late: records at chunks 130, 390, 910, 1_940, 3_995, read first.
        let late = [130usize, 390, 910, 1_940, 3_995];
        let mut faults_again = 0;
        let mut most_resident = 0;
        for &chunk in &late {
            chunks.touch(0, chunk..chunk + 1, |_, _| {});
        }
        for chunk in 0..8_000usize {
            let was_let_go = chunks.let_go.contains(&(0, chunk));
            chunks.touch(0, chunk..chunk + 1, |_, _| {});
            faults_again += usize::from(was_let_go);
            most_resident = most_resident.max(chunks.order.len());
        }
        assert!(faults_again <= late.len());
        assert!(
            most_resident <= 2 * 128,
            "{faults_again} chunks faulted back grew the bound to {} chunks ({most_resident} \
             resident at most) of 8,000 read",
            chunks.most
        );
    }

    /// An image of messages that a change of `--shards` moved, each with its foreign ID (half
    /// of them after a change from one shard to two), holds each in its slim entry and an entry
    /// of `foreign_ids`' pages: under the 176 bytes a whole state took, as it was not in
    /// helper-61's review (a map of 128-byte entries, 235 bytes a message). Every ID and text
    /// comes back.
    #[test]
    fn an_image_of_moved_messages_holds_them_in_less_than_whole_states() {
        let count = 100_000u32;
        let data = Bytes::from(
            (0..count as usize * 16)
                .map(|at| at as u8)
                .collect::<Vec<_>>(),
        );
        let mut image = Image::empty();
        image.sources.add(TextFile::Segment(0), &data);
        let key = QueueKey {
            account: "devstoreaccount1".to_string(),
            name: "moved".to_string(),
        };
        let metadata = Metadata::new();
        image.apply(
            Record::QueueCreated {
                queue: 0,
                key,
                metadata,
            },
            None,
        );
        let state = |slot: u32| {
            let id = Some(MessageId(u128::MAX - u128::from(slot)));
            let text = data.slice(slot as usize * 16..slot as usize * 16 + 16);
            put_state((0, slot, 1), u64::from(slot), id, text)
        };
        for slot in 0..count {
            image.apply(Record::MessagePut(state(slot)), None);
        }
        assert!(image.held.is_empty(), "every text slim");
        let held = count as usize * std::mem::size_of::<ImageMessage>()
            + image.foreign_ids.reserved_bytes();
        assert!(held < count as usize * 176, "{held} bytes");
        let secret = Secret::from_bytes(&[7; crate::queue::secret::SECRET_BYTES]);
        let mut shard = ShardState::with_secret(0, 1, secret);
        let identity = shard.identity();
        let mut restorers = [shard.restore(identity, image.moved_from(0, 1, 0))];
        assert_eq!(
            image.restore(0, &mut restorers, secret, 0, false),
            (1, count as usize)
        );
        let [restorer] = restorers;
        restorer.finish();
        let restored = shard.describe(0).messages;
        assert_eq!(restored.len(), count as usize);
        for slot in 0..count {
            let expected = state(slot);
            let found = restored.get(&expected.foreign_id.expect("moved"));
            assert_eq!(
                found.map(|found| &found.1[..]),
                Some(&expected.text[..]),
                "{slot}"
            );
        }
    }

    /// Random puts (with and without foreign IDs, texts slim, held or empty), updates (a text
    /// slim, held or none; the generation right or wrong), leases and deletions (the generation
    /// right or wrong) over a few slots, through `apply` and the slim `Replayed` path, in pages
    /// of a few entries on odd seeds, some into a queue deleted meanwhile: the restore gives
    /// every live message its own foreign ID and text, and no message an ID of a slot's earlier
    /// occupant (helper-62's review of f6c042a; it fails if a put leaves the slot's foreign ID,
    /// or a replayed update drops its text).
    #[test]
    fn foreign_ids_and_held_texts_follow_their_messages() {
        use crate::random::SplitMix64;
        for seed in 0..5000u64 {
            let mut random = SplitMix64::new(seed);
            let data = Bytes::from(
                (0..64 * 1024)
                    .map(|at| (at % 251) as u8)
                    .collect::<Vec<_>>(),
            );
            let mut run = || {
                let mut image = Image::empty();
                image.sources.add(TextFile::Segment(0), &data);
                let key = |name: &str| QueueKey {
                    account: "devstoreaccount1".to_string(),
                    name: name.to_string(),
                };
                for (queue, name) in [(0u32, "live"), (1, "gone")] {
                    image.apply(
                        Record::QueueCreated {
                            queue,
                            key: key(name),
                            metadata: Metadata::new(),
                        },
                        None,
                    );
                }
                // slot -> (generation, queue, foreign id, text)
                let mut model: HashMap<u32, (u32, u32, Option<u128>, Vec<u8>)> = HashMap::new();
                let mut generations: HashMap<u32, u32> = HashMap::new();
                let mut sequence = 0u64;
                let mut records: Pages<Replayed> =
                    Pages::with_page_bytes(1 + (seed as usize % 7) * 40);
                let slots = 1 + random.next_u64() % 40;
                let mut gone_deleted = false;
                let mut issued: std::collections::HashSet<u128> = Default::default();
                let text_for = |random: &mut SplitMix64| -> Bytes {
                    let length = (random.next_u64() % 50) as usize;
                    match random.next_u64() % 3 {
                        0 => {
                            let at = (random.next_u64() % 60_000) as usize;
                            data.slice(at..at + length)
                        }
                        1 => Bytes::from(vec![(random.next_u64() % 256) as u8; length]),
                        _ => Bytes::new(),
                    }
                };
                let steps = 1 + random.next_u64() % 200;
                for _ in 0..steps {
                    let slot = (random.next_u64() % slots) as u32;
                    let slim = random.next_u64() % 2 == 0;
                    let record = match random.next_u64() % 10 {
                        0..=3 => {
                            let generation = generations.entry(slot).or_insert(0);
                            *generation += 1;
                            let generation = *generation;
                            sequence += 1;
                            let queue = if gone_deleted {
                                0
                            } else {
                                (random.next_u64() % 4 == 0) as u32
                            };
                            let foreign_id = (random.next_u64() % 2 == 0).then(|| {
                                u128::from(random.next_u64()) << 64 | u128::from(sequence)
                            });
                            let text = text_for(&mut random);
                            issued.extend(foreign_id);
                            model.insert(slot, (generation, queue, foreign_id, text.to_vec()));
                            let id = foreign_id.map(MessageId);
                            let place = (queue, slot, generation);
                            Record::MessagePut(put_state(place, sequence, id, text))
                        }
                        4..=5 => {
                            let right = random.next_u64() % 4 != 0;
                            let generation =
                                generations.get(&slot).copied().unwrap_or(0) + u32::from(!right);
                            let text = (random.next_u64() % 3 != 0).then(|| text_for(&mut random));
                            if let (Some(found), Some(text)) = (model.get_mut(&slot), &text) {
                                if found.0 == generation {
                                    found.3 = text.to_vec();
                                }
                            }
                            Record::MessageUpdated {
                                slot,
                                generation,
                                lease: 1,
                                visible_ms: 0,
                                text,
                            }
                        }
                        6 => {
                            let generation = generations.get(&slot).copied().unwrap_or(0);
                            Record::MessageLeased {
                                slot,
                                generation,
                                dequeue_count: 1,
                                lease: 2,
                                visible_ms: 0,
                            }
                        }
                        7..=8 => {
                            let right = random.next_u64() % 4 != 0;
                            let generation =
                                generations.get(&slot).copied().unwrap_or(0) + u32::from(!right);
                            if model.get(&slot).is_some_and(|found| found.0 == generation) {
                                model.remove(&slot);
                            }
                            Record::MessageDeleted { slot, generation }
                        }
                        _ if !gone_deleted => {
                            gone_deleted = true;
                            model.retain(|_, found| found.1 != 1);
                            Record::QueueDeleted {
                                queue: 1,
                                key: key("gone"),
                            }
                        }
                        _ => continue,
                    };
                    if slim {
                        let place = None;
                        records.push(Replayed::new(record, place, &image.sources));
                    } else {
                        // Flush what is gathered first, in order.
                        image.replay(std::mem::replace(
                            &mut records,
                            Pages::with_page_bytes(1 + (seed as usize % 7) * 40),
                        ));
                        image.apply(record, None);
                    }
                }
                image.replay(records);
                // Messages of the deleted queue stay in the image with its incarnation gone.
                let secret = Secret::from_bytes(&[7; crate::queue::secret::SECRET_BYTES]);
                let mut shard = ShardState::with_secret(0, 1, secret);
                let identity = shard.identity();
                let mut restorers = [shard.restore(identity, image.moved_from(0, 1, 0))];
                let (_, restored) = image.restore(0, &mut restorers, secret, 0, false);
                let [restorer] = restorers;
                restorer.finish();
                assert_eq!(restored, model.len(), "seed {seed}");
                let described = shard.describe(0).messages;
                assert_eq!(described.len(), model.len(), "seed {seed}");
                let mut plain: Vec<Vec<u8>> = Vec::new();
                for (slot, (_, _, foreign_id, text)) in &model {
                    match foreign_id {
                        Some(id) => {
                            let found = described.get(&MessageId(*id));
                            assert_eq!(
                                found.map(|found| found.1.to_vec()),
                                Some(text.clone()),
                                "seed {seed} slot {slot}"
                            );
                        }
                        None => plain.push(text.clone()),
                    }
                }
                let foreign: std::collections::HashSet<u128> =
                    model.values().filter_map(|found| found.2).collect();
                let mut others: Vec<Vec<u8>> = described
                    .iter()
                    .filter(|(id, _)| !foreign.contains(&id.0))
                    .map(|(_, found)| found.1.to_vec())
                    .collect();
                for id in described.keys() {
                    assert!(
                        foreign.contains(&id.0) || !issued.contains(&id.0),
                        "seed {seed}: a message took the foreign ID of another"
                    );
                }
                plain.sort();
                others.sort();
                assert_eq!(
                    plain, others,
                    "seed {seed}: texts of messages without foreign IDs"
                );
            };
            if seed % 2 == 1 {
                crate::storage::pages::with_test_page_bytes((seed % 90) as usize, run);
            } else {
                run();
            }
        }
    }

    /// A copy's name, as `KeptAside::keep` makes them.
    fn copy_name(number: u64, offset: usize) -> String {
        format!("{number:06}-gen-000001-shard-000-wal-00000000000000000000.log-at-{offset}")
    }

    #[test]
    fn files_kept_by_earlier_starts_stay_within_their_bound() {
        let disk = SimDisk::new(0, true);
        let root = data_directory(Path::new("/data"));
        let directory = root.join(KEPT_DIRECTORY_NAME);
        disk.create_directories(&directory).unwrap();
        // Copies of earlier starts, and files of the user's, some named much like copies.
        let user_files = [
            "2024-12-01-notes.txt",
            "000009-gen-000001-shard-000-notes.txt",
            "+00009-gen-000001-shard-000-wal-00000000000000000000.log-at-1",
        ];
        for (name, bytes) in [
            (copy_name(1, 4096), 3000),
            (copy_name(2, 4096), 3000),
            (copy_name(3, 4096), 1000),
        ]
        .into_iter()
        .chain(user_files.iter().map(|name| (name.to_string(), 9000)))
        {
            disk.write_synced(&directory.join(name), &vec![1; bytes])
                .unwrap();
        }
        // A directory named like a copy is not one.
        disk.create_directories(&directory.join(copy_name(8, 0)))
            .unwrap();
        let segment = root.join("gen-000001/shard-000/wal-00000000000000000000.log");
        let data = vec![7u8; 2 * STORAGE_BLOCK_BYTES];
        let mut notes = Vec::new();
        let kept = KeptAside::open(&disk, &root, 10_000).unwrap();
        // Only zeros after the cut: nothing to keep.
        let zeros = [&data[..100], &[0; 5000][..]].concat();
        assert_eq!(kept.keep(&segment, &zeros, 100, &mut notes).unwrap(), None);
        // 7,000 bytes kept earlier and 8,192 more: the two oldest go, the third stays.
        let first = kept.keep(&segment, &data, 10, &mut notes).unwrap().unwrap();
        assert_eq!(first, directory.join(copy_name(4, 10)));
        assert_eq!(disk.read(&first).unwrap().len(), data.len());
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with(&directory.join(copy_name(1, 4096)).display().to_string()));
        // What this start kept is never removed by it, whatever the bound.
        kept.keep(&segment, &data, 0, &mut notes).unwrap().unwrap();
        let mut expected: Vec<String> = [copy_name(3, 4096), copy_name(4, 10), copy_name(5, 0)]
            .into_iter()
            .chain([copy_name(8, 0)])
            .chain(user_files.iter().map(|name| name.to_string()))
            .collect();
        expected.sort();
        assert_eq!(disk.list(&directory).unwrap(), expected);
    }

    /// Found by review: a copy number at the largest a `u64` holds overflowed the next number.
    #[test]
    fn a_copy_numbered_at_the_largest_number_is_never_replaced() {
        let disk = SimDisk::new(0, true);
        let root = data_directory(Path::new("/data"));
        let directory = root.join(KEPT_DIRECTORY_NAME);
        disk.create_directories(&directory).unwrap();
        disk.write_synced(&directory.join(copy_name(u64::MAX, 0)), b"kept")
            .unwrap();
        let segment = root.join("gen-000001/shard-000/wal-00000000000000000000.log");
        let kept = KeptAside::open(&disk, &root, 1 << 20).unwrap();
        let refused = kept
            .keep(&segment, &[7; 4096], 0, &mut Vec::new())
            .unwrap_err();
        assert!(refused.contains("exists already"), "{refused}");
        assert_eq!(
            &disk.read(&directory.join(copy_name(u64::MAX, 0))).unwrap()[..],
            b"kept"
        );
    }
}
