//! The shard state's side of durability, still without I/O: the journal of records its changes
//! emit (taken by the runtime, written by `storage/`), the pieces a snapshot is made of (encoded
//! a bounded number of slots at a time, so the shard keeps serving while one is written), and
//! the restore of a state from what recovery read back.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use bytes::BytesMut;

use super::layout::{
    message_charge, queue_at, queue_charge, Journal, Queue, ShardState, SEQUENCE_MASK,
};
use super::texts::{Naming, TextsRead};
use crate::limits::SNAPSHOT_NAMED_PUTS_PER_ENTRY_MAX;
use crate::queue::command::Metadata;
use crate::queue::key::{MessageId, QueueKey, TextFile, TextLocator};
use crate::queue::record::{
    encode, MessageState, NamedPut, NamedText, Record, RECORD_HEADER_BYTES,
};
use crate::queue::replicas::{acl_charge, Replica};
use crate::queue::slab::{Message, Place, TextSlot};

/// What a snapshot's records so far hold. `charged` is the log's measure of a snapshot: of
/// that, what a new snapshot would not write again is the charge of what has left the store
/// since (`storage::log`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    /// Records encoded (they are numbered from 0).
    pub entries: u64,
    /// Bytes `ShardState::stored_bytes` charges for what they record: queues, this shard's
    /// ACLs, messages (service properties are not charged).
    pub charged: u64,
}

/// What a snapshot records about the shard itself, besides its queues, settings and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The high half of every message ID the shard issues.
    pub id_prefix: u64,
    /// The sequence the next Put gets.
    pub sequence_next: u64,
    /// The version of the last replicated setting the shard wrote.
    pub replica_version_last: u64,
}

impl ShardState {
    /// Makes the state durable from now on: every change appends a record, numbered from
    /// `next_sequence`, to the journal the runtime takes with `take_journal`.
    pub fn start_journal(&mut self, next_sequence: u64) {
        self.journal = Some(Journal {
            records: BytesMut::with_capacity(64 * 1024),
            next_sequence,
            text_sequences: None,
        });
    }

    /// The sequence number the next record will get; `None` when the state is not durable. A
    /// command that moved it has changes the client may only hear of once they are on disk.
    pub fn journal_next_sequence(&self) -> Option<u64> {
        self.journal.as_ref().map(|journal| journal.next_sequence)
    }

    /// The sequence of the oldest record not taken yet (the next one's when all were taken);
    /// `None` when the state is not durable. Records appended before the log starts (an
    /// `--init` file's) are written by its first flush.
    pub fn journal_untaken_sequence(&self) -> Option<u64> {
        self.journal
            .as_ref()
            .map(|journal| journal.next_sequence - count_records(&journal.records))
    }

    /// Records not taken yet, and their bytes; `None` when the state is not durable.
    pub fn journal_pending(&self) -> Option<(u64, usize)> {
        self.journal
            .as_ref()
            .map(|journal| (count_records(&journal.records), journal.records.len()))
    }

    /// The encoded records not taken yet, in order: what the log's next flushes will write, for
    /// tests that compare what a reader finds with what the writer was given.
    #[cfg(test)]
    pub fn journal_bytes(&self) -> &[u8] {
        self.journal
            .as_ref()
            .map_or(&[][..], |journal| &journal.records[..])
    }

    /// The oldest records not taken yet, at most `bytes_max` of them (at least one record,
    /// however long), and the sequence number of the last one taken; `None` when there are none.
    pub fn take_journal(&mut self, bytes_max: usize) -> Option<(BytesMut, u64)> {
        let journal = self.journal.as_mut()?;
        if journal.records.is_empty() {
            return None;
        }
        // Walk the records' lengths to cut at a record boundary.
        let (mut end, mut count) = (0usize, 0u64);
        while end < journal.records.len() {
            let length = u32::from_le_bytes(
                journal.records[end..end + 4]
                    .try_into()
                    .expect("a whole record header"),
            ) as usize;
            let next = end + RECORD_HEADER_BYTES + length;
            if count > 0 && next > bytes_max {
                break;
            }
            end = next;
            count += 1;
        }
        let remaining = count_records(&journal.records[end..]);
        let records = journal.records.split_to(end);
        Some((records, journal.next_sequence - 1 - remaining))
    }

    /// Appends `record` to the journal, if the state is durable.
    pub(super) fn log<T: AsRef<[u8]>>(&mut self, record: &Record<T>) {
        if let Some(journal) = &mut self.journal {
            journal.append(record);
        }
    }

    /// Appends the whole state of the message in `slot` (a Put) to the journal.
    pub(super) fn log_message_state(&mut self, slot: u32, visible_ms: u64) {
        if let Some(journal) = &mut self.journal {
            let text = self.messages.get(slot).text.expect_resident();
            let state = message_state(&self.messages, &self.foreign_ids, slot, visible_ms, text);
            journal.append(&Record::MessagePut(state));
        }
    }

    /// The shard's identity, as a snapshot records it.
    pub fn identity(&self) -> Identity {
        Identity {
            id_prefix: self.id_prefix,
            sequence_next: self.sequence_next,
            replica_version_last: self.replica_version_last,
        }
    }

    /// Slots the slab has ever allocated: a snapshot encodes `0..slab_slots()` in pieces.
    pub fn slab_slots(&self) -> u32 {
        self.messages.slots() as u32
    }

    /// Where a snapshot step from slot `from` ends: after at most `slots_max` slots, and before
    /// the slot whose text would take the texts of live queues' messages in the step past
    /// `text_bytes_max` (a step takes at least one slot). Within `slab_slots`.
    pub fn snapshot_step_end(&self, from: u32, slots_max: u32, text_bytes_max: u64) -> u32 {
        let end = from.saturating_add(slots_max).min(self.slab_slots());
        let mut text_bytes = 0;
        for slot in from..end {
            let Some(message) = self.messages.occupant(slot) else {
                continue;
            };
            if self.queue(message.queue()).retired {
                continue;
            }
            text_bytes += message.text.len() as u64;
            if text_bytes > text_bytes_max && slot > from {
                return slot;
            }
        }
        end
    }

    /// Encodes up to `count` live queues in name order after `after` (from the first when
    /// `None`) as the records after `encoded`'s; the last one encoded, or `None` once none is
    /// left.
    pub fn snapshot_queues(
        &self,
        after: Option<&QueueKey>,
        count: usize,
        out: &mut BytesMut,
        encoded: &mut Encoded,
    ) -> Option<QueueKey> {
        let range = match after {
            Some(after) => self
                .queue_names
                .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => self.queue_names.range::<QueueKey, _>(..),
        };
        let mut last = None;
        for (key, &index) in range.take(count) {
            let metadata = &self.queue(index).metadata;
            let record = Record::<&[u8]>::QueueCreated {
                queue: index,
                key: key.clone(),
                metadata: metadata.clone(),
            };
            encode(&record, encoded.entries, out);
            encoded.entries += 1;
            encoded.charged += queue_charge(metadata);
            last = Some(key);
        }
        last.cloned()
    }

    /// Encodes every setting this shard writes as the records after `encoded`'s. Its copies of
    /// other shards' settings are left out: recovery rebuilds them from the writers' records,
    /// and a copy on disk would bring back a setting its writer has since removed (a deleted
    /// queue's ACL), since removing a copy writes nothing.
    pub fn snapshot_settings(&self, out: &mut BytesMut, encoded: &mut Encoded) {
        for replica in self.replicas.entries(true) {
            let record = match replica {
                Replica::QueueAcl {
                    queue,
                    version,
                    identifiers: Some(identifiers),
                } => {
                    encoded.charged += acl_charge(&queue, &identifiers);
                    Record::<&[u8]>::AclSet {
                        key: queue,
                        version,
                        identifiers: identifiers.to_vec(),
                    }
                }
                Replica::QueueAcl {
                    identifiers: None, ..
                } => continue,
                Replica::ServiceProperties {
                    account,
                    version,
                    properties,
                } => Record::PropertiesSet {
                    account,
                    version,
                    properties: (*properties).clone(),
                },
            };
            encode(&record, encoded.entries, out);
            encoded.entries += 1;
        }
    }

    /// Encodes the messages of live queues in `slots` (cleared and deleted queues' messages,
    /// which wait to be freed, are gone for good) as the Put records after `encoded`'s, with
    /// their current lease and visibility. A text on disk only in a segment `naming` names is
    /// named (counted in `naming.named`): a message untouched since its put, whose put record
    /// that is, by the record alone (`Record::PutsNamed`, one entry for those of a segment, at
    /// most `SNAPSHOT_NAMED_PUTS_PER_ENTRY_MAX`, after the others), any other with its state
    /// (`Record::MessageNamed`); any other text is taken from `read`, which must hold it as
    /// read where the slot says it is (`texts_to_copy`).
    pub fn snapshot_messages(
        &self,
        slots: Range<u32>,
        read: &TextsRead,
        naming: &mut Naming,
        out: &mut BytesMut,
        encoded: &mut Encoded,
    ) {
        // The named puts of these slots, by segment.
        let mut puts: BTreeMap<u64, Vec<NamedPut>> = BTreeMap::new();
        for slot in slots {
            let Some(message) = self.messages.occupant(slot) else {
                continue;
            };
            if self.queue(message.queue()).retired {
                continue;
            }
            let visible_ms = match message.place() {
                // The timer's deadline is the end of the lease, or the expiry if that is
                // sooner (then the message is gone at that time either way).
                Place::Invisible => self.timers.deadline_ms(slot).unwrap_or(0),
                Place::VisibleInOrder | Place::VisibleOutOfOrder | Place::Free => 0,
            };
            // Named where its record is in a segment the snapshot keeps: a text on disk only
            // there, or one in memory whose home is there.
            let named = match &message.text {
                TextSlot::Resident(text) => self
                    .named_home(slot, naming)
                    .map(|locator| (locator, text.len() as u32)),
                &TextSlot::OnDisk {
                    locator,
                    text_bytes,
                } => naming.names(locator).then_some((locator, text_bytes)),
            };
            let text = match (&message.text, named) {
                (_, Some((locator, text_bytes))) => {
                    let (_, _, _, sequence) = self.text_on_disk(slot, locator);
                    let TextFile::Segment(first) = locator.file() else {
                        unreachable!("named texts are in segments");
                    };
                    // Never leased nor updated (lease 0 is the put's alone: `next_lease`): its
                    // text's record is the put, and the put is its whole state (a message of
                    // another shard's log has its ID too).
                    let untouched = message.dequeue_count == 0
                        && message.lease == 0
                        && self.foreign_ids.id(slot).is_none();
                    if untouched {
                        puts.entry(first).or_default().push(NamedPut {
                            offset: locator.offset(),
                            record_bytes: locator.record_bytes(),
                            sequence,
                        });
                    } else {
                        let state =
                            message_state(&self.messages, &self.foreign_ids, slot, visible_ms, &[]);
                        let named = NamedText {
                            locator,
                            sequence,
                            text_bytes,
                        };
                        encode(
                            &Record::<&[u8]>::MessageNamed(state.with_text(named)),
                            encoded.entries,
                            out,
                        );
                        encoded.entries += 1;
                    }
                    encoded.charged += message_charge(message.text.len());
                    *naming.named.entry(first).or_default() += u64::from(locator.record_bytes());
                    continue;
                }
                (TextSlot::Resident(text), None) => text,
                (&TextSlot::OnDisk { locator, .. }, None) => match read.get(&slot) {
                    Some((read_at, text)) if *read_at == locator => text,
                    _ => panic!("the text of slot {slot}, on disk only, read for the snapshot"),
                },
            };
            let state = message_state(&self.messages, &self.foreign_ids, slot, visible_ms, text);
            encode(&Record::MessagePut(state), encoded.entries, out);
            encoded.entries += 1;
            encoded.charged += message_charge(message.text.len());
        }
        for (segment, puts) in puts {
            for chunk in puts.chunks(SNAPSHOT_NAMED_PUTS_PER_ENTRY_MAX) {
                let record = Record::<&[u8]>::PutsNamed {
                    segment,
                    puts: chunk.to_vec(),
                };
                encode(&record, encoded.entries, out);
                encoded.entries += 1;
            }
        }
    }

    /// Encodes the whole state, as a snapshot written in one go (`snapshot_queues`,
    /// `snapshot_settings`, `snapshot_messages`), every text in memory.
    pub fn snapshot_all(&self, out: &mut BytesMut) -> Encoded {
        self.snapshot_all_with(&TextsRead::new(), out)
    }

    /// `snapshot_all`, the texts on disk only taken from `read` (`snapshot_messages`).
    pub fn snapshot_all_with(&self, read: &TextsRead, out: &mut BytesMut) -> Encoded {
        let mut encoded = Encoded::default();
        self.snapshot_queues(None, usize::MAX, out, &mut encoded);
        self.snapshot_settings(out, &mut encoded);
        let mut naming = Naming::default();
        self.snapshot_messages(0..self.slab_slots(), read, &mut naming, out, &mut encoded);
        encoded
    }

    /// Starts restoring a state (a fresh one, from `ShardState::new`) from what recovery read.
    /// Queues and messages moved from other shards' files take record indices and slots from
    /// `moved_from` on (`(record index, slot)`), which must be above every one of the shard's
    /// own (the highest of those its image keeps in place, plus one: `Image::moved_from`):
    /// they take their places as they come.
    pub fn restore(&mut self, identity: Identity, moved_from: (u32, u32)) -> Restorer<'_> {
        assert!(self.queues.is_empty() && self.messages.is_empty());
        assert_eq!(
            identity.id_prefix & 0xff,
            self.id_prefix & 0xff,
            "a prefix of another shard index"
        );
        self.id_prefix = identity.id_prefix;
        self.sequence_next = identity.sequence_next;
        self.replica_version_last = identity.replica_version_last;
        Restorer {
            state: self,
            visible: Vec::new(),
            invisible: Vec::new(),
            moved_queues: HashMap::new(),
            moved_next: moved_from,
        }
    }
}

/// The state of the message in `slot`, its text (`text`) borrowed.
fn message_state<'a>(
    messages: &crate::queue::slab::MessageSlab,
    foreign_ids: &super::foreign::ForeignIds,
    slot: u32,
    visible_ms: u64,
    text: &'a [u8],
) -> MessageState<&'a [u8]> {
    let message = messages.get(slot);
    MessageState {
        queue: message.queue(),
        slot,
        generation: messages.generation(slot),
        sequence: message.sequence,
        insertion_ms: message.insertion_ms,
        ttl_s: message.ttl_s,
        delay_s: message.delay_s,
        dequeue_count: message.dequeue_count,
        lease: message.lease,
        visible_ms,
        foreign_id: foreign_ids.id(slot),
        text,
    }
}

/// A restore in progress. Queues and messages of this shard's own log go back where they were
/// (record index, slot and generation: every pop receipt it handed out still works); those of
/// another shard's log (a restart with another shard count) get new places and keep their IDs.
pub struct Restorer<'s> {
    state: &'s mut ShardState,
    /// Restored messages in their slots that are visible, to join their queues in order once
    /// all are restored: 4 bytes a message of a backlog, where a (slot, time) each cost 16.
    visible: Vec<u32>,
    /// Those that are not, with when each is visible again (leased or delayed: the few).
    invisible: Vec<(u32, u64)>,
    /// The record index each queue from another shard's log took, by its origin (see
    /// `moved_queue`).
    moved_queues: HashMap<u64, u32>,
    /// The record index and slot the next queue and message from another shard's log take:
    /// above the shard's own, so that each takes its place as it comes. (Each waited in a
    /// vector until the shard's own had theirs, about 160 bytes a message moved at the peak of
    /// a change of shard count.)
    moved_next: (u32, u32),
}

impl Restorer<'_> {
    /// A queue of this shard's own log, in its record `index`.
    pub fn queue(&mut self, index: u32, key: QueueKey, metadata: Metadata) {
        let state = &mut *self.state;
        while state.queues.len() <= index as usize {
            state.queues.push(None);
        }
        assert!(
            state.queues[index as usize].is_none(),
            "queue record {index} twice"
        );
        state.queue_bytes += queue_charge(&metadata);
        state.queues[index as usize] = Some(Queue::new(metadata));
        assert!(state.queue_indices.insert(key.clone(), index).is_none());
        assert!(state.queue_names.insert(key, index).is_none());
    }

    /// A queue from another shard's log; `origin` names it among every moved queue (the old
    /// shard and record index), and its messages name it by the same value.
    pub fn moved_queue(&mut self, origin: u64, key: QueueKey, metadata: Metadata) {
        let index = self.moved_next.0;
        self.moved_next.0 = index.checked_add(1).expect("fewer queue records than 2^32");
        self.queue(index, key, metadata);
        assert!(self.moved_queues.insert(origin, index).is_none());
    }

    /// A message of this shard's own log. One that has expired by `now_ms` is left out: answers
    /// whether it was kept. With `text_on_disk`, its text (whose length `message` has) is kept
    /// there only, and its `message.text` is not kept (texts leave memory:
    /// `ShardState::track_texts` must follow before anything applies to the state).
    pub fn message(
        &mut self,
        message: MessageState,
        text_on_disk: Option<TextLocator>,
        now_ms: u64,
    ) -> bool {
        if message.expiration_ms() <= now_ms {
            return false;
        }
        let state = &mut *self.state;
        let (slot, generation, sequence, visible_ms, foreign_id) = (
            message.slot,
            message.generation,
            message.sequence,
            message.visible_ms,
            message.foreign_id,
        );
        let mut stored = restored(message.queue, message);
        if let Some(locator) = text_on_disk {
            let text_bytes = u32::try_from(stored.text.len()).expect("texts are small");
            stored.text = TextSlot::OnDisk {
                locator,
                text_bytes,
            };
            state.texts_evicted.add(locator, text_bytes);
        }
        state.messages.insert_at(slot, generation, stored);
        if let Some(id) = foreign_id {
            state.foreign_ids.insert(slot, id);
        }
        state.sequence_next = state.sequence_next.max(sequence + 1).min(SEQUENCE_MASK);
        self.place(slot, visible_ms, now_ms);
        true
    }

    /// Counts the restored message in `slot` in its queue, and notes it for `finish` to put
    /// in its queue's order, or on the wheel until `visible_ms` when that is after `now_ms`.
    fn place(&mut self, slot: u32, visible_ms: u64, now_ms: u64) {
        let state = &mut *self.state;
        let message = state.messages.get(slot);
        let queue = message.queue();
        assert!(
            state
                .queues
                .get(queue as usize)
                .is_some_and(|queue| queue.is_some()),
            "a restored message of no restored queue"
        );
        state.message_bytes += message_charge(message.text.len());
        let text_bytes = message.text.len() as u64;
        let restored_queue = queue_at(&mut state.queues, queue);
        restored_queue.messages_count += 1;
        restored_queue.text_bytes += text_bytes;
        if visible_ms > now_ms {
            self.invisible.push((slot, visible_ms));
        } else {
            self.visible.push(slot);
        }
    }

    /// A message from another shard's log, in the queue `moved_queue` named `origin`, with the
    /// ID that shard issued.
    pub fn moved_message(
        &mut self,
        origin: u64,
        message: MessageState,
        id: MessageId,
        now_ms: u64,
    ) {
        let Some(&queue) = self.moved_queues.get(&origin) else {
            return;
        };
        if message.expiration_ms() <= now_ms {
            return;
        }
        let slot = self.moved_next.1;
        self.moved_next.1 = slot.checked_add(1).expect("fewer slots than 2^32");
        let (sequence, visible_ms) = (message.sequence, message.visible_ms);
        let state = &mut *self.state;
        // Generation 0, as a new slot gets: the slot may have held a message of this shard's
        // deleted or expired since (above those that stay, `moved_from`), whose receipts name
        // it with its own generation, or this one by chance; either way the ID check of
        // `resolve_receipt` stops them (helper-78's review).
        state.messages.insert_at(slot, 0, restored(queue, message));
        state.foreign_ids.insert(slot, id);
        state.sequence_next = state.sequence_next.max(sequence + 1).min(SEQUENCE_MASK);
        self.place(slot, visible_ms, now_ms);
    }

    /// A replicated setting, kept when newer than what the shard has; `written_here` when this
    /// shard is now its writer (the queue's owner, the account's home shard).
    pub fn replica(&mut self, replica: Replica, written_here: bool) {
        let version = match &replica {
            Replica::QueueAcl { version, .. } | Replica::ServiceProperties { version, .. } => {
                *version
            }
        };
        self.state.replica_version_last = self.state.replica_version_last.max(version);
        self.state.replicas.apply(replica, written_here);
    }

    /// Puts every message in its queue's order and on the wheel, and frees what is left.
    pub fn finish(self) {
        let state = &mut *self.state;
        state.messages.rebuild_free_list();
        state.queues_free = (0..state.queues.len() as u32)
            .rev()
            .filter(|&index| state.queues[index as usize].is_none())
            .collect();
        // Visible messages join their queue in order, invisible ones wait for their timer, in
        // the order of their keys (the slot orders messages of two logs whose keys tie). A
        // stable sort, whose buffer is half the slots' 4 bytes: it merges the runs already in
        // order, where an unstable one sorted a backlog in order but for one slot reused in a
        // full n log n, each comparison a look-up (4,000,000 messages: 195 ms against 40,
        // helper-64's review).
        let Restorer {
            state,
            mut visible,
            mut invisible,
            ..
        } = self;
        visible.sort_by_key(|&slot| (state.messages.get(slot).order_key(), slot));
        for slot in visible {
            state.make_visible(slot);
        }
        invisible.sort_by_key(|&(slot, _)| (state.messages.get(slot).order_key(), slot));
        for (slot, visible_ms) in invisible {
            state.make_invisible(slot, visible_ms);
        }
    }
}

/// How many whole records `records` holds.
fn count_records(records: &[u8]) -> u64 {
    let (mut at, mut count) = (0usize, 0u64);
    while at < records.len() {
        let length = u32::from_le_bytes(records[at..at + 4].try_into().expect("a header"));
        at += RECORD_HEADER_BYTES + length as usize;
        count += 1;
    }
    count
}

/// What a state holds, in a form two states can be compared by (tests of durability).
#[cfg(test)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Described {
    /// Live queues and their metadata.
    pub queues: std::collections::BTreeMap<QueueKey, Metadata>,
    /// Live messages by ID: queue, text, insertion, TTL, delay, dequeue count, lease, and when
    /// it is visible again (`None`: visible at the time described).
    pub messages: std::collections::BTreeMap<MessageId, DescribedMessage>,
    /// Stored access policies by queue.
    pub acls: std::collections::BTreeMap<QueueKey, Vec<crate::queue::SignedIdentifier>>,
    /// Service properties by account.
    pub properties: std::collections::BTreeMap<String, crate::queue::ServiceProperties>,
}

/// A message as `Described` holds it.
#[cfg(test)]
pub type DescribedMessage = (QueueKey, bytes::Bytes, u64, u32, u32, u32, u32, Option<u64>);

#[cfg(test)]
impl ShardState {
    /// What the state holds at `now_ms`; every text must be in memory.
    pub fn describe(&self, now_ms: u64) -> Described {
        self.describe_with(now_ms, |(_, _, locator, _)| {
            panic!("a text on disk only ({locator:?}): describe with a reader")
        })
    }

    /// What the state holds at `now_ms`, each text on disk only read by `text_of` from the
    /// record its locator names: (slot, generation, locator, sequence of the record that wrote
    /// the text), as a `TextWait` names it.
    pub fn describe_with(
        &self,
        now_ms: u64,
        text_of: impl Fn((u32, u32, crate::queue::key::TextLocator, u64)) -> bytes::Bytes,
    ) -> Described {
        let mut described = Described::default();
        for (key, &index) in &self.queue_names {
            described
                .queues
                .insert(key.clone(), self.queue(index).metadata.clone());
        }
        let names: HashMap<u32, &QueueKey> = self
            .queue_names
            .iter()
            .map(|(key, &index)| (index, key))
            .collect();
        for slot in 0..self.slab_slots() {
            let Some(message) = self.messages.occupant(slot) else {
                continue;
            };
            let Some(key) = names.get(&message.queue()) else {
                continue;
            };
            if message.expiration_ms() <= now_ms {
                continue;
            }
            let visible = match message.place() {
                Place::Invisible => self
                    .timers
                    .deadline_ms(slot)
                    .filter(|&deadline| deadline > now_ms),
                _ => None,
            };
            described.messages.insert(
                self.message_id_of(slot),
                (
                    (*key).clone(),
                    match &message.text {
                        crate::queue::slab::TextSlot::Resident(text) => text.clone(),
                        crate::queue::slab::TextSlot::OnDisk { locator, .. } => {
                            text_of(self.text_on_disk(slot, *locator))
                        }
                    },
                    message.insertion_ms,
                    message.ttl_s,
                    message.delay_s,
                    message.dequeue_count,
                    message.lease,
                    visible,
                ),
            );
        }
        for replica in self.replicas.entries(false) {
            match replica {
                Replica::QueueAcl {
                    queue,
                    identifiers: Some(identifiers),
                    ..
                } => {
                    described.acls.insert(queue, identifiers.to_vec());
                }
                Replica::QueueAcl { .. } => {}
                Replica::ServiceProperties {
                    account,
                    properties,
                    ..
                } => {
                    described.properties.insert(account, (*properties).clone());
                }
            }
        }
        described
    }
}

/// A message of a log or snapshot as the slab holds it, in queue record `queue` (its text moved
/// in, not shared: a copy recovery made, pointing into no file).
fn restored(queue: u32, message: MessageState) -> Message {
    let mut stored = Message::new(
        queue,
        message.text,
        message.sequence,
        message.insertion_ms,
        message.delay_s,
        message.ttl_s,
    );
    stored.dequeue_count = message.dequeue_count;
    stored.lease = message.lease;
    stored
}
