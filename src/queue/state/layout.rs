//! What a `ShardState` holds, and the helpers every part of it uses: the queue records, the
//! message slab and timer wheel, the name indices, the memory charge, the journal, and how a
//! message ID's input is made. The operations live beside it
//! (`queues`, `messages`, `persistence`); `state.rs` applies commands with them.

use std::collections::{BTreeMap, HashMap};

use bytes::BytesMut;

use crate::error::StorageError;
use crate::limits;
use crate::queue::command::Metadata;
use crate::queue::key::QueueKey;
use crate::queue::record::{encode, Record};
use crate::queue::replicas::Replicas;
use crate::queue::secret::Secret;
use crate::queue::slab::{MessageList, MessageSlab, OrderKey, QUEUE_INDEX_MAX};
use crate::queue::wheel::TimerWheel;
use crate::random::mix64;

/// Most sequences a shard hands out (2^62, as earlier versions, whose logs recovery still reads).
pub(super) const SEQUENCE_MASK: u64 = (1 << 62) - 1;
/// The low byte of a shard's ID prefix is the shard index, so shards never share the input of
/// their message IDs.
pub(super) const SHARD_INDEX_MASK: u64 = 0xff;
const _: () = assert!(limits::SHARDS_MAX as u64 <= SHARD_INDEX_MASK + 1);

/// One queue: its metadata and where its messages are.
#[derive(Debug)]
pub(super) struct Queue {
    pub(super) metadata: Metadata,
    /// Messages stored, including expired ones whose timer has not run yet: the approximate count.
    pub(super) messages_count: u64,
    /// Visible messages whose order keys ascend along the list.
    pub(super) in_order: MessageList,
    /// Visible messages whose key was below `in_order`'s tail when they became visible.
    pub(super) out_of_order: BTreeMap<OrderKey, u32>,
    /// Leased and delayed messages, so that Delete Queue and Clear Messages can reach them.
    pub(super) invisible: MessageList,
    /// The record is a graveyard (its queue was cleared or deleted): no name leads to it, and its
    /// messages are being freed; a snapshot leaves them out.
    pub(super) retired: bool,
    /// Messages in `invisible`, for inspection without a walk.
    pub(super) invisible_count: u64,
    /// Of those, the ones never delivered (a put's visibility delay, or an Update before any
    /// Get): "delayed" rather than "leased".
    pub(super) delayed_count: u64,
    /// Bytes of the stored messages' texts.
    pub(super) text_bytes: u64,
    /// What clients did with the queue since it was created (or the server started); moves
    /// with the queue when Clear Messages gives it a new record.
    pub(super) activity: Activity,
    /// Visible messages after its own whose texts a Get that waits reads ahead
    /// (`texts::read_ahead_window`), at its last wait; halved for each text read ahead that left
    /// memory untaken.
    pub(super) read_ahead_messages: u32,
    /// When a Get of the queue last waited for texts, ms (0: never), and `activity.delivered`
    /// then: how fast its consumers take messages.
    pub(super) last_wait: (u64, u64),
    /// When a Get of the queue was last answered, ms (0: never): one within half
    /// `TEXT_READ_EARLY_HOLD_MAX_MS` of the last makes the queue due for a read ahead
    /// (`texts::note_get`).
    pub(super) last_get_ms: u64,
    /// The time between its last two Gets, ms (`texts::note_get`): how long texts read ahead of
    /// its next Get are held (`texts::next_read_ahead`).
    pub(super) get_interval_ms: u64,
    /// How fast its Gets take messages: messages a second over the last span of at least
    /// `TEXT_READ_AHEAD_HOLD_MS` between two of its Gets (0 until one has passed), and when the
    /// span going on began, with `activity.delivered` then (`texts::note_get`): how far a read
    /// ahead of its Gets reads (`texts::next_read_ahead`). Not the time between two Gets alone:
    /// competing consumers' Gets come milliseconds apart (helper-48's review of f52952c: read
    /// that way, two consumers taking 64 messages a second read 1 MiB ahead, let it go after
    /// 2 s, and read each text 5.8 times).
    pub(super) get_pace: (u64, u64, u64),
    /// Whether the queue is in the shard's `read_ahead_due`.
    pub(super) read_ahead_due: bool,
}

impl Queue {
    /// An empty queue with `metadata`.
    pub(super) fn new(metadata: Metadata) -> Queue {
        Queue {
            metadata,
            messages_count: 0,
            in_order: MessageList::EMPTY,
            out_of_order: BTreeMap::new(),
            invisible: MessageList::EMPTY,
            retired: false,
            invisible_count: 0,
            delayed_count: 0,
            text_bytes: 0,
            activity: Activity::default(),
            read_ahead_messages: 0,
            last_wait: (0, 0),
            last_get_ms: 0,
            get_interval_ms: 0,
            get_pace: (0, 0, 0),
            read_ahead_due: false,
        }
    }
}

/// Counts of what clients did with a queue (or with every queue of a shard), for the console's
/// rates and the metrics. Plain fields, bumped where `apply` already holds the queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// Messages put.
    pub puts: u64,
    /// Messages delivered by Get Messages.
    pub delivered: u64,
    /// Of those, deliveries of a message delivered before (dequeue count above 1).
    pub redelivered: u64,
    /// Get Messages requests that found no visible message.
    pub empty_gets: u64,
    /// Messages deleted by Delete Message.
    pub deletes: u64,
    /// Update Message requests.
    pub updates: u64,
    /// Messages whose time to live ran out.
    pub expired: u64,
}

impl Activity {
    /// The counters' names, in `counts` order (as the metrics and the console name them).
    pub const NAMES: [&'static str; 7] = [
        "puts",
        "delivered",
        "redelivered",
        "empty_gets",
        "deletes",
        "updates",
        "expired",
    ];

    /// The counters in `NAMES` order.
    pub fn counts(&self) -> [u64; 7] {
        [
            self.puts,
            self.delivered,
            self.redelivered,
            self.empty_gets,
            self.deletes,
            self.updates,
            self.expired,
        ]
    }
}

/// What one stored message counts against `--max-memory`: its text plus the fixed cost of its
/// slot, timer node and text allocation (`MESSAGE_OVERHEAD_BYTES`).
pub(super) fn message_charge(text_bytes: usize) -> u64 {
    (text_bytes + limits::MESSAGE_OVERHEAD_BYTES) as u64
}

/// What one queue record counts against `--max-memory`: `QUEUE_OVERHEAD_BYTES` plus its
/// metadata's names and values, `METADATA_PAIR_OVERHEAD_BYTES` each pair. Counted from the
/// record's creation to its freeing (a graveyard's record too), so queues cannot fill memory
/// the limit never sees.
pub(super) fn queue_charge(metadata: &Metadata) -> u64 {
    let pairs: usize = metadata
        .iter()
        .map(|(name, value)| name.len() + value.len() + limits::METADATA_PAIR_OVERHEAD_BYTES)
        .sum();
    (limits::QUEUE_OVERHEAD_BYTES + pairs) as u64
}

/// Requests a shard answered 503 `ServerBusy` because a limit of stored data was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// By `--max-memory`.
    pub memory: u64,
    /// By `--max-disk` or `--min-free-disk` (`ShardState::set_disk_full`).
    pub disk: u64,
}

/// Whether a `MessageView` shares the message's text or leaves it empty.
#[derive(Clone, Copy)]
pub(super) enum Text {
    Shared,
    Omitted,
}

/// What `ShardState::census` counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Live queues.
    pub queues: u64,
    /// Messages in them (their approximate counts).
    pub messages: u64,
    /// Bytes charged against `--max-memory` for stored messages (a text on disk only counts
    /// its slot alone, a text in memory that may leave it also its home), those of cleared
    /// queues still being freed included.
    pub message_bytes: u64,
    /// The deepest queues with their message counts, deepest first.
    pub deepest: Vec<(QueueKey, u64)>,
}

/// One shard's queues and messages.
#[derive(Debug)]
pub struct ShardState {
    /// The server's secret: the keys of message IDs and pop receipts' tags.
    pub(super) secret: Secret,
    /// What this shard's message IDs are made from beside their sequence: seeded random bits
    /// and the shard index (the low byte).
    pub(super) id_prefix: u64,
    /// Sequence of the next message put: with the prefix, the input of its ID; and its order
    /// tie-break.
    pub(super) sequence_next: u64,
    pub(super) queues: Vec<Option<Queue>>,
    /// Free indices of `queues`.
    pub(super) queues_free: Vec<u32>,
    /// Indices of `queues` that no name leads to any more, whose messages `advance` frees a
    /// budget at a time: Clear Messages and Delete Queue hand a queue's messages over to them.
    pub(super) graveyards: Vec<u32>,
    /// Queue lookup for every command but List Queues.
    pub(super) queue_indices: HashMap<QueueKey, u32, ahash::RandomState>,
    /// The same queues in (account, name) order, for List Queues.
    pub(super) queue_names: BTreeMap<QueueKey, u32>,
    /// Most queues this shard holds (`QUEUES_PER_SHARD_MAX` outside tests).
    pub(super) queues_max: usize,
    /// Most queue records, live queues and graveyards together: a message names its record
    /// in `QUEUE_INDEX_MAX + 1` values (fewer in tests). Only a billion messages waiting in
    /// graveyards could reach it; then Create Queue and Clear Messages answer 503 `ServerBusy`.
    pub(super) queue_records_max: usize,
    /// Bytes charged for the messages stored now: text plus `MESSAGE_OVERHEAD_BYTES` each.
    pub(super) message_bytes: u64,
    /// Bytes charged for the messages freed since the shard started, and of texts dropped from
    /// memory (`texts::evict`; only grows): the runtime gives the allocator's free memory back
    /// to the system after enough of it.
    pub(super) freed_message_bytes: u64,
    /// Bytes charged for queue records and their metadata (`queue_charge` each).
    pub(super) queue_bytes: u64,
    /// Most bytes `message_bytes` (but the texts on disk only: `texts_evicted`), `queue_bytes`
    /// and the ACL copies (`Replicas::acl_bytes`) together may reach: this shard's part of
    /// `--max-memory` (`memory_bytes`). A Put, Update, Create Queue, Set Queue Metadata or Set
    /// Queue ACL that would pass it answers 503 `ServerBusy` and changes nothing.
    pub(super) message_bytes_max: u64,
    /// The shard's files or the file system's free space leave no room for more stored data
    /// (`storage::space`, measured by the runtime and passed in): Put, Update with a text,
    /// Create Queue, Set Queue Metadata, Set Queue ACL and Set Service Properties answer 503
    /// `ServerBusy` and change nothing; what frees space (Delete, Clear) and reads still run.
    pub(super) disk_full: bool,
    /// Requests refused by the limits above, for the metrics.
    pub(super) refusals: Refusals,
    pub(super) messages: MessageSlab,
    pub(super) timers: TimerWheel,
    /// This shard's copy of the settings every shard keeps (service properties, queue ACLs).
    pub(super) replicas: Replicas,
    /// Version of the last replicated change this shard wrote; the next one gets one more.
    pub(super) replica_version_last: u64,
    /// What clients did with every queue of the shard since it started (queues deleted since
    /// included, so each count only grows).
    pub(super) activity: Activity,
    /// The records of changes the runtime has not taken yet, when the shard is durable
    /// (`storage::record`); `None` in memory-only mode, which then pays nothing for it.
    pub(super) journal: Option<Journal>,
    /// IDs of messages restored from another shard's log (a restart with another shard count),
    /// by slot: their IDs are not this shard's prefix and sequence. Empty but after such a
    /// restart, so the common case pays one `is_empty` check.
    /// By ID too, for the pop receipts handed out before the restart, which name the slot they
    /// had on the old shard.
    pub(super) foreign_ids: super::foreign::ForeignIds,
    /// Where the texts of resident messages are on disk, by the sequence of the record that
    /// wrote each (`texts::note_written`) and the slot (texts recovered at a start share one
    /// sequence, `texts::RECOVERED_TEXT_SEQUENCE`): the texts `evict` may drop. Empty unless
    /// the journal tracks texts (`ShardState::track_texts`).
    pub(super) text_homes: super::homes::HomeIndex,
    /// Which homes stay valid: records of the log from this sequence on (the replay point of
    /// the last snapshot begun, whose segments before it may be given up), and entries of this
    /// snapshot (the one in place while no other is being written). `texts::begin_snapshot`.
    pub(super) text_files: (u64, Option<u64>),
    /// Segments before that replay point that stay too, ascending: those the snapshot in place
    /// keeps, whose records its entries name (`texts::place_snapshot`).
    pub(super) kept_segments: Vec<u64>,
    /// Snapshots begun and snapshots put in place (`texts::begin_snapshot`, `place_snapshot`):
    /// a text read back for a request, or read ahead, is noted again only if none has begun or
    /// been put in place since its read was asked for (`note_read_homes`).
    pub(super) snapshot_changes: u64,
    /// The texts on disk only: how many, their bytes, and the bytes of those in log segments.
    pub(super) texts_evicted: EvictedTexts,
    /// The slots whose texts a snapshot step is reading to encode (`texts::hold_texts`): none
    /// of them leaves memory until it has encoded them.
    pub(super) texts_held: std::ops::Range<u32>,
    /// Texts read ahead of a Get (`texts::deliver_ahead`), oldest first, each with the
    /// snapshot changes when its read was asked for, its bytes and until when it is held:
    /// resident, with no home (so not evictable) until then, while their bytes together stay
    /// within `TEXT_READ_AHEAD_HELD_BYTES`.
    pub(super) read_ahead: std::collections::VecDeque<ReadAhead>,
    /// The bytes of `read_ahead`'s texts.
    pub(super) read_ahead_bytes: u64,
    /// The texts `read_ahead` holds, each by its message (slot, generation) and the sequence of
    /// the record that wrote it: how many of its entries each has, and the home a snapshot put
    /// in place since noted for it, kept here, out of `text_homes`, until the last entry goes
    /// (eviction walks `text_homes` after every flush, and passing over held texts there cost
    /// each walk the texts held). By text, not by message: a text an Update gives the message
    /// since is not held, and may leave memory.
    pub(super) read_ahead_held: HashMap<(u32, u32, u64), HeldText>,
    /// The texts read back for requests not yet answered (`texts::deliver_for_request`), by
    /// message (slot, generation) and the sequence of the record that wrote it: where the read
    /// found each, and how many deliveries not yet answered hold it. In memory with no home
    /// until the request is answered (`texts::note_answered`), and named there by a snapshot
    /// that keeps the segment meanwhile (`texts::named_home`).
    pub(super) texts_serving: HashMap<(u32, u32, u64), (crate::queue::key::TextLocator, u32)>,
    /// The most bytes and texts `read_ahead` keeps: `TEXT_READ_AHEAD_HELD_BYTES` and
    /// `TEXT_READ_AHEAD_HELD_TEXTS` (smaller in tests, so that they are reached).
    pub(super) read_ahead_held_max: (u64, usize),
    /// Queues whose next Get would wait for texts on disk only unless they are read ahead
    /// first (`texts::note_get`), oldest first, each (record index, the count of the Get that
    /// made it due), at most once each (`Queue::read_ahead_due`); the runtime takes them with
    /// `next_read_ahead`.
    pub(super) read_ahead_due: std::collections::VecDeque<(u32, u32)>,
}

/// A text read ahead (`ShardState::read_ahead`): the message's slot and generation, where the
/// text is on disk and the record that wrote it (`texts::TextOnDisk`); the snapshot changes
/// when its read was asked for (`TextWait::snapshot_changes`); its bytes; the time it is held
/// until, ms.
pub type ReadAhead = (
    (u32, u32, crate::queue::key::TextLocator, u64),
    u64,
    u32,
    u64,
);

/// The texts of live messages on disk only (`TextSlot::OnDisk`), counted as each goes there or
/// leaves (`ShardState::texts_evicted`, `texts_evicted_in_segments`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct EvictedTexts {
    /// How many.
    pub texts: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The bytes of those whose locators are in log segments (the others are in the snapshot in
    /// place): what a snapshot may name rather than copy (`Log::snapshot_bytes_max`).
    pub in_segments_bytes: u64,
    /// How many of them are in log segments (`Log::dead_segments_due`).
    pub in_segments: u64,
    /// The bytes of every text that went to disk only in a log segment since the shard
    /// started, never less: a snapshot whose tally is running counts those evicted since it
    /// began as copied (`Log::snapshot_bytes_max`).
    pub to_segments_total: u64,
    /// The bytes of the records holding those in log segments, by segment: what copying what
    /// is left of a segment takes now (`ShardState::segment_text_record_bytes`).
    pub record_bytes_by_segment: crate::queue::key::SegmentRecordBytes,
}

impl EvictedTexts {
    /// Counts a text of `text_bytes` on disk only at `locator`.
    pub fn add(&mut self, locator: crate::queue::key::TextLocator, text_bytes: u32) {
        self.texts += 1;
        self.bytes += u64::from(text_bytes);
        if let crate::queue::key::TextFile::Segment(_) = locator.file() {
            self.in_segments_bytes += u64::from(text_bytes);
            self.in_segments += 1;
            self.to_segments_total += u64::from(text_bytes);
        }
        self.record_bytes_by_segment.add(locator);
    }

    /// Stops counting a text `add` counted with the same arguments.
    pub fn remove(&mut self, locator: crate::queue::key::TextLocator, text_bytes: u32) {
        self.texts -= 1;
        self.bytes -= u64::from(text_bytes);
        if let crate::queue::key::TextFile::Segment(_) = locator.file() {
            self.in_segments_bytes -= u64::from(text_bytes);
            self.in_segments -= 1;
        }
        // A miscount (which `check_evicted_texts` would find) only moves a trigger.
        self.record_bytes_by_segment.remove(locator);
    }
}

/// A text read ahead and held (`ShardState::read_ahead_held`).
#[derive(Clone, Copy, Debug, Default)]
pub struct HeldText {
    /// The entries of `read_ahead` that hold it.
    pub entries: u32,
    /// The home noted for it while held (`note_home`).
    pub home: Option<crate::queue::key::TextLocator>,
    /// Where its last read found it (`deliver_ahead`): a snapshot that keeps the segment there
    /// names the text at that record rather than copying it (`texts::named_home`).
    pub read_at: Option<crate::queue::key::TextLocator>,
}

/// The records of changes not yet taken by the runtime.
#[derive(Debug)]
pub struct Journal {
    pub(super) records: BytesMut,
    /// The sequence number the next record gets.
    pub(super) next_sequence: u64,
    /// The sequence of the record that last wrote each live message's text, by slot, when
    /// texts may leave memory (`None`: they never do, and nothing is kept): a locator names a
    /// message's text only when it names that record.
    pub(super) text_sequences: Option<TextSequences>,
}

/// The sequence of the record that last wrote each live message's text (`Journal`), 8 bytes a
/// slot in a vector beside the slab: a map by (slot, generation) cost about 36 bytes a message
/// in a deep backlog. The entry of a slot belongs to the message living there now, since one
/// is set by every record that writes a text and taken when its message dies
/// (`texts::forget_text`); `ShardState::text_sequence` also checks the generation.
#[derive(Debug, Default)]
pub struct TextSequences {
    /// By slot; `TextSequences::NONE` where no live message's text is tracked.
    by_slot: Vec<u64>,
}

impl TextSequences {
    /// No entry: a sequence no record has (`texts::RECOVERED_TEXT_SEQUENCE` is `u64::MAX`).
    const NONE: u64 = u64::MAX - 1;

    /// Notes that record `sequence` wrote the text of the message in `slot`.
    pub(super) fn set(&mut self, slot: u32, sequence: u64) {
        debug_assert_ne!(sequence, Self::NONE);
        let slot = slot as usize;
        if slot >= self.by_slot.len() {
            self.by_slot.resize(slot + 1, Self::NONE);
        }
        self.by_slot[slot] = sequence;
    }

    /// Room for entries of slots up to `slots`.
    pub(super) fn reserve(&mut self, slots: usize) {
        self.by_slot
            .reserve_exact(slots.saturating_sub(self.by_slot.len()));
    }

    /// The entry of `slot`.
    pub(super) fn get(&self, slot: u32) -> Option<u64> {
        let sequence = *self.by_slot.get(slot as usize)?;
        (sequence != Self::NONE).then_some(sequence)
    }

    /// Takes the entry of `slot` out.
    pub(super) fn take(&mut self, slot: u32) -> Option<u64> {
        let entry = self.by_slot.get_mut(slot as usize)?;
        let sequence = std::mem::replace(entry, Self::NONE);
        (sequence != Self::NONE).then_some(sequence)
    }

    /// Slots with an entry.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_slot
            .iter()
            .filter(|&&entry| entry != Self::NONE)
            .count()
    }
}

impl Journal {
    /// Appends `record` with the next sequence number.
    pub(super) fn append<T: AsRef<[u8]>>(&mut self, record: &Record<T>) {
        if let Some(text_sequences) = &mut self.text_sequences {
            match record {
                Record::MessagePut(message) => {
                    text_sequences.set(message.slot, self.next_sequence);
                }
                Record::MessageUpdated {
                    slot,
                    text: Some(_),
                    ..
                } => {
                    text_sequences.set(*slot, self.next_sequence);
                }
                _ => {}
            }
        }
        encode(record, self.next_sequence, &mut self.records);
        self.next_sequence += 1;
    }
}

impl ShardState {
    /// The state of shard `shard_index` with a secret made from `id_seed`: reproducible, for
    /// tests and simulations. A server uses `with_secret`.
    pub fn new(shard_index: usize, id_seed: u64) -> ShardState {
        ShardState::with_secret(shard_index, id_seed, Secret::from_seed(id_seed))
    }

    /// The state of shard `shard_index`, whose message IDs and pop receipts `secret` keys.
    /// `id_seed` makes the input of message IDs differ between runs (the runtime passes a random
    /// value; tests a fixed one) and seeds the queue hash map.
    pub fn with_secret(shard_index: usize, id_seed: u64, secret: Secret) -> ShardState {
        assert!(shard_index < limits::SHARDS_MAX);
        let id_prefix = (mix64(id_seed) & !SHARD_INDEX_MASK) | shard_index as u64;
        let hash_seed = mix64(id_seed ^ 0x5eed);
        ShardState {
            secret,
            id_prefix,
            sequence_next: 0,
            queues: Vec::new(),
            queues_free: Vec::new(),
            graveyards: Vec::new(),
            queue_indices: HashMap::with_hasher(ahash::RandomState::with_seeds(
                hash_seed,
                mix64(hash_seed),
                mix64(hash_seed ^ 1),
                mix64(hash_seed ^ 2),
            )),
            queue_names: BTreeMap::new(),
            queues_max: limits::QUEUES_PER_SHARD_MAX,
            queue_records_max: QUEUE_INDEX_MAX + 1,
            message_bytes: 0,
            freed_message_bytes: 0,
            queue_bytes: 0,
            message_bytes_max: u64::MAX,
            disk_full: false,
            refusals: Refusals::default(),
            messages: MessageSlab::new(),
            timers: TimerWheel::new(),
            replicas: Replicas::default(),
            replica_version_last: 0,
            activity: Activity::default(),
            journal: None,
            text_homes: super::homes::HomeIndex::default(),
            text_files: (0, None),
            kept_segments: Vec::new(),
            snapshot_changes: 0,
            texts_evicted: EvictedTexts::default(),
            texts_held: 0..0,
            read_ahead: std::collections::VecDeque::new(),
            read_ahead_bytes: 0,
            read_ahead_held: HashMap::new(),
            texts_serving: HashMap::new(),
            read_ahead_due: std::collections::VecDeque::new(),
            read_ahead_held_max: (
                crate::limits::TEXT_READ_AHEAD_HELD_BYTES,
                crate::limits::TEXT_READ_AHEAD_HELD_TEXTS,
            ),
            foreign_ids: super::foreign::ForeignIds::default(),
        }
    }

    /// Limits the bytes of stored messages (text plus `MESSAGE_OVERHEAD_BYTES` each) to
    /// `message_bytes_max`; without a call there is no limit. Texts read ahead are held within
    /// a quarter of it (at most `TEXT_READ_AHEAD_HELD_BYTES`): they are charged to it, beyond
    /// what Puts are admitted to (helper-48's review of f52952c: 33 MB charged against a share
    /// of 16.8 MB, with texts of 48 KB read ahead).
    pub fn set_message_bytes_max(&mut self, message_bytes_max: u64) {
        self.message_bytes_max = message_bytes_max;
        self.read_ahead_held_max.0 =
            (message_bytes_max / 4).min(crate::limits::TEXT_READ_AHEAD_HELD_BYTES);
    }

    /// Bytes charged for the messages stored now (text plus `MESSAGE_OVERHEAD_BYTES` each).
    pub fn message_bytes(&self) -> u64 {
        self.message_bytes
    }

    /// This shard's part of `--max-memory` (`u64::MAX`: none set).
    pub fn message_bytes_max(&self) -> u64 {
        self.message_bytes_max
    }

    /// Whether `more` bytes still fit `message_bytes_max` beside what is in memory now.
    pub(super) fn fits(&self, more: u64) -> bool {
        self.memory_bytes() + more <= self.message_bytes_max
    }

    /// Bytes charged against `--max-memory` now: `stored_bytes` but the texts on disk only
    /// (`--text-memory`), whose messages count their slot alone (`MESSAGE_OVERHEAD_BYTES`),
    /// and the homes of the texts in memory that may leave it (`TEXT_HOME_BYTES` each).
    pub fn memory_bytes(&self) -> u64 {
        self.stored_bytes() - self.texts_evicted.bytes + self.text_homes_bytes()
    }

    /// Bytes of stored data: messages (text plus `MESSAGE_OVERHEAD_BYTES` each, the texts on
    /// disk only included), queue records and ACL copies. What a snapshot that copies every
    /// text writes at most (its encoding of the same data is smaller; one that names texts on
    /// disk only writes less, `Log::snapshot_bytes_max`, which the disk limits keep room for);
    /// `--max-memory` charges it but the texts on disk only (`memory_bytes`).
    pub fn stored_bytes(&self) -> u64 {
        self.message_bytes + self.queue_bytes + self.replicas.acl_bytes()
    }

    /// Bytes charged for the messages freed since the shard started (deleted, expired, cleared,
    /// their queue deleted), and of texts dropped from memory (`--text-memory`).
    pub fn freed_message_bytes(&self) -> u64 {
        self.freed_message_bytes
    }

    /// `Ok` when `more` bytes fit `--max-memory` (`fits`), if need be once the texts read ahead
    /// are back on disk only (`shed_read_ahead`: a read never makes a Put refused); else counts
    /// a memory refusal: 503 `ServerBusy`.
    pub(super) fn admit_memory(&mut self, more: u64) -> Result<(), StorageError> {
        if self.fits(more) {
            return Ok(());
        }
        if !self.read_ahead.is_empty() {
            self.shed_read_ahead();
            if self.fits(more) {
                return Ok(());
            }
        }
        self.refusals.memory += 1;
        Err(StorageError::ServerBusy)
    }

    /// `Ok` unless the disk is full (`disk_full`); else counts a disk refusal: 503
    /// `ServerBusy`. Asked by every operation that grows stored data, before it changes
    /// anything.
    pub(super) fn admit_disk(&mut self) -> Result<(), StorageError> {
        if !self.disk_full {
            return Ok(());
        }
        self.refusals.disk += 1;
        Err(StorageError::ServerBusy)
    }

    /// Tells the shard whether its disk limits leave room for more stored data (the runtime
    /// measures; `storage::space` decides). Takes effect at the next command.
    pub fn set_disk_full(&mut self, disk_full: bool) {
        self.disk_full = disk_full;
    }

    /// Whether the engine last said the disk is full (`set_disk_full`).
    pub fn disk_full(&self) -> bool {
        self.disk_full
    }

    /// Requests refused by `--max-memory` and by the disk limits since the shard started.
    pub fn refusals(&self) -> Refusals {
        self.refusals
    }

    /// The shard's live queues, their messages, the bytes charged for messages, and the
    /// `deepest_max` deepest queues (deepest first, then by key). O(queues): for a metrics
    /// scrape, not for requests.
    pub fn census(&self, deepest_max: usize) -> Census {
        let mut census = Census {
            queues: self.queue_indices.len() as u64,
            message_bytes: self.message_bytes - self.texts_evicted.bytes + self.text_homes_bytes(),
            ..Census::default()
        };
        let mut deepest: Vec<(u64, &QueueKey)> = Vec::with_capacity(deepest_max + 1);
        for (key, &index) in &self.queue_indices {
            let Some(queue) = &self.queues[index as usize] else {
                continue;
            };
            census.messages += queue.messages_count;
            if deepest_max > 0 && queue.messages_count > 0 {
                let entry = (queue.messages_count, key);
                let at = deepest.partition_point(|&(depth, other)| {
                    depth > entry.0 || (depth == entry.0 && other < key)
                });
                if at < deepest_max {
                    deepest.insert(at, entry);
                    deepest.truncate(deepest_max);
                }
            }
        }
        census.deepest = deepest
            .into_iter()
            .map(|(depth, key)| (key.clone(), depth))
            .collect();
        census
    }

    /// Live queues and stored messages (those of cleared queues still being freed included):
    /// O(1), for the console's samples.
    pub fn totals(&self) -> (u64, u64) {
        (self.queue_indices.len() as u64, self.messages.len() as u64)
    }

    /// This shard's copy of the replicated settings, for authorization and CORS.
    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    pub(super) fn queue_index(&self, key: &QueueKey) -> Result<u32, StorageError> {
        self.queue_indices
            .get(key)
            .copied()
            .ok_or(StorageError::QueueNotFound)
    }

    pub(super) fn queue(&self, index: u32) -> &Queue {
        match &self.queues[index as usize] {
            Some(queue) => queue,
            None => panic!("queue index {index} is free"),
        }
    }
}

/// The queue at `index`, borrowed from the `queues` field alone so that the slab and the wheel
/// stay available beside it.
pub(super) fn queue_at(queues: &mut [Option<Queue>], index: u32) -> &mut Queue {
    match &mut queues[index as usize] {
        Some(queue) => queue,
        None => panic!("queue index {index} is free"),
    }
}

/// Whether metadata is in `Metadata`'s canonical order: sorted by lowercased name, no duplicates.
pub(super) fn metadata_is_canonical(metadata: &Metadata) -> bool {
    metadata
        .windows(2)
        .all(|pair| pair[0].0.to_ascii_lowercase() < pair[1].0.to_ascii_lowercase())
}
