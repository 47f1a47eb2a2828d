//! `ShardState`: everything one shard stores (its queues and their messages) and the only code
//! that changes it. Commands are applied with the time passed in; nothing here reads a clock or
//! does I/O, so the same (command, time) sequence always gives the same replies.
//!
//! Layout. Queues live in a `Vec<Option<Queue>>`, found by a hash map for commands and by a
//! `BTreeMap` for List Queues. Messages live in the `MessageSlab`; each has exactly one place:
//! - visible, in its queue's in-order list (an intrusive list whose order keys ascend; a message
//!   joins it when its key is above the tail's, which is every Put without delay and most timers);
//! - visible, in its queue's out-of-order `BTreeMap` (a message whose lease ran out reappears at
//!   its original position, behind the tail);
//! - invisible (leased, or delayed by its put), in its queue's invisible list.
//!
//! The visible order is (time the message first became visible, insertion sequence); Get and
//! Peek take the smaller of the list's head and the map's first key, so both are O(count) (plus
//! O(log n) in the out-of-order map), never a scan of the queue.
//!
//! Time. Each message has at most one timer in the wheel: while invisible, at the earlier of the
//! end of its invisibility and its expiry; while visible, at its expiry (none if it never
//! expires). A fired timer makes the message visible or frees it, so expired messages give their
//! memory back without any request touching their queue. `apply` first runs due timers, at most
//! `TIMER_ENTRIES_PER_STEP_MAX` of them; beyond that budget some may still be pending, and then:
//! - a message whose invisibility has ended may stay invisible a little longer (Get and Peek lag);
//! - a message that has expired is still stored and counted (the approximate count stays at or
//!   above the true count) but is never returned: Get, Peek, Update and Delete check the expiry
//!   themselves and free an expired message they meet.
//!
//! A leased message is never returned before its time, since only its timer makes it visible.
//!
//! Clear Messages and Delete Queue are O(1): the queue's record, with every message in it,
//! becomes a graveyard that no name leads to (Clear gives the queue a new, empty record), and
//! `advance` (the runtime's background step, never `apply`) frees its messages a budget at a
//! time, so a queue of a million messages never stops the shard. Until then its messages are
//! ordinary messages of a record nobody can name: their timers fire as usual, and receipts name
//! the old record, so they find nothing.
//!
//! Memory per message beyond its text: 80 bytes of slab slot + 16 of wheel node = 96 bytes, plus
//! the 24-byte reference count `bytes` gives a shared text, plus 41 bytes while the message sits
//! in an out-of-order map. Measured at a million messages: 124.7 bytes (`benches/queue.rs`).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::Bytes;

use super::command::{Command, MessageView, Metadata, QueueListing, Reply, EXPIRATION_NEVER_MS};
use super::key::{MessageId, PopReceipt, QueueKey};
use super::record::Record;
use super::replicas::{Replica, Replicas};
use super::slab::{
    Message, MessageList, MessageSlab, OrderKey, Place, NONE, QUEUE_INDEX_MAX, TTL_S_NEVER,
};
use super::wheel::TimerWheel;
use crate::config;
use crate::error::StorageError;
use crate::random::mix64;

/// Bits of a message ID's low half that hold the scrambled sequence; the top two are the UUID
/// variant (`10`).
const SEQUENCE_BITS: u32 = 62;
const SEQUENCE_MASK: u64 = (1 << SEQUENCE_BITS) - 1;
const UUID_VARIANT: u64 = 0b10 << SEQUENCE_BITS;
/// The UUID version nibble (4: random) in a message ID's high half.
const UUID_VERSION_MASK: u64 = 0xf << 12;
const UUID_VERSION_4: u64 = 0x4 << 12;
/// The low byte of a message ID's high half is the shard index, so shards never share IDs.
const SHARD_INDEX_MASK: u64 = 0xff;
const _: () = assert!(config::SHARDS_MAX as u64 <= SHARD_INDEX_MASK + 1);

/// One queue: its metadata and where its messages are.
#[derive(Debug)]
struct Queue {
    metadata: Metadata,
    /// Messages stored, including expired ones whose timer has not run yet: the approximate count.
    messages_count: u64,
    /// Visible messages whose order keys ascend along the list.
    in_order: MessageList,
    /// Visible messages whose key was below `in_order`'s tail when they became visible.
    out_of_order: BTreeMap<OrderKey, u32>,
    /// Leased and delayed messages, so that Delete Queue and Clear Messages can reach them.
    invisible: MessageList,
    /// The record is a graveyard (its queue was cleared or deleted): no name leads to it, and its
    /// messages are being freed; a snapshot leaves them out.
    retired: bool,
}

/// What one stored message counts against `--max-memory`: its text plus the fixed cost of its
/// slot, timer node and text allocation (`MESSAGE_OVERHEAD_BYTES`).
fn message_charge(text: &Bytes) -> u64 {
    (text.len() + config::MESSAGE_OVERHEAD_BYTES) as u64
}

/// Whether a `MessageView` shares the message's text or leaves it empty.
#[derive(Clone, Copy)]
enum Text {
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
    /// Bytes charged for stored messages, those of cleared queues still being freed included.
    pub message_bytes: u64,
    /// The deepest queues with their message counts, deepest first.
    pub deepest: Vec<(QueueKey, u64)>,
}

/// One shard's queues and messages.
#[derive(Debug)]
pub struct ShardState {
    /// High half of every message ID this shard issues: seeded random bits, the UUID version
    /// and the shard index.
    id_prefix: u64,
    /// Sequence of the next message put: the low half of its ID (scrambled) and its order
    /// tie-break.
    sequence_next: u64,
    queues: Vec<Option<Queue>>,
    /// Free indices of `queues`.
    queues_free: Vec<u32>,
    /// Indices of `queues` that no name leads to any more, whose messages `advance` frees a
    /// budget at a time: Clear Messages and Delete Queue hand a queue's messages over to them.
    graveyards: Vec<u32>,
    /// Queue lookup for every command but List Queues.
    queue_indices: HashMap<QueueKey, u32, ahash::RandomState>,
    /// The same queues in (account, name) order, for List Queues.
    queue_names: BTreeMap<QueueKey, u32>,
    /// Most queues this shard holds (`QUEUES_PER_SHARD_MAX` outside tests).
    queues_max: usize,
    /// Most queue records, live queues and graveyards together: a message names its record
    /// in `QUEUE_INDEX_MAX + 1` values (fewer in tests). Only a billion messages waiting in
    /// graveyards could reach it; then Create Queue and Clear Messages answer 503 `ServerBusy`.
    queue_records_max: usize,
    /// Bytes charged for the messages stored now: text plus `MESSAGE_OVERHEAD_BYTES` each.
    message_bytes: u64,
    /// Most bytes `message_bytes` may reach: this shard's part of `--max-memory`. A Put or Update
    /// that would pass it answers 503 `ServerBusy` and changes nothing.
    message_bytes_max: u64,
    messages: MessageSlab,
    timers: TimerWheel,
    /// This shard's copy of the settings every shard keeps (service properties, queue ACLs).
    replicas: Replicas,
    /// Version of the last replicated change this shard wrote; the next one gets one more.
    replica_version_last: u64,
    /// The records of changes the runtime has not taken yet, when the shard is durable
    /// (`storage::record`); `None` in memory-only mode, which then pays nothing for it.
    journal: Option<Journal>,
    /// IDs of messages restored from another shard's log (a restart with another shard count),
    /// by slot: their IDs are not this shard's prefix and sequence. Empty but after such a
    /// restart, so the common case pays one `is_empty` check.
    foreign_ids: HashMap<u32, MessageId>,
    /// The same messages by ID, for the pop receipts handed out before the restart, which name
    /// the slot they had on the old shard.
    foreign_slots: HashMap<MessageId, u32>,
}

impl ShardState {
    /// The state of shard `shard_index`. `id_seed` makes message IDs differ between runs (the
    /// runtime passes a random value; tests a fixed one) and seeds the queue hash map.
    pub fn new(shard_index: usize, id_seed: u64) -> ShardState {
        assert!(shard_index < config::SHARDS_MAX);
        let id_prefix = (mix64(id_seed) & !(UUID_VERSION_MASK | SHARD_INDEX_MASK))
            | UUID_VERSION_4
            | shard_index as u64;
        let hash_seed = mix64(id_seed ^ 0x5eed);
        ShardState {
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
            queues_max: config::QUEUES_PER_SHARD_MAX,
            queue_records_max: QUEUE_INDEX_MAX + 1,
            message_bytes: 0,
            message_bytes_max: u64::MAX,
            messages: MessageSlab::new(),
            timers: TimerWheel::new(),
            replicas: Replicas::default(),
            replica_version_last: 0,
            journal: None,
            foreign_ids: HashMap::new(),
            foreign_slots: HashMap::new(),
        }
    }

    /// Limits the bytes of stored messages (text plus `MESSAGE_OVERHEAD_BYTES` each) to
    /// `message_bytes_max`; without a call there is no limit.
    pub fn set_message_bytes_max(&mut self, message_bytes_max: u64) {
        self.message_bytes_max = message_bytes_max;
    }

    /// Bytes charged for the messages stored now (text plus `MESSAGE_OVERHEAD_BYTES` each).
    pub fn message_bytes(&self) -> u64 {
        self.message_bytes
    }

    /// The shard's live queues, their messages, the bytes charged for messages, and the
    /// `deepest_max` deepest queues (deepest first, then by key). O(queues): for a metrics
    /// scrape, not for requests.
    pub fn census(&self, deepest_max: usize) -> Census {
        let mut census = Census {
            queues: self.queue_indices.len() as u64,
            message_bytes: self.message_bytes,
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

    /// This shard's copy of the replicated settings, for authorization and CORS.
    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// Applies `command` at `now_ms` (ms since the Unix epoch), after running due timers (at
    /// most `TIMER_ENTRIES_PER_STEP_MAX` wheel entries).
    ///
    /// Preconditions the api layer guarantees (violations are bugs and panic): names and
    /// metadata are valid, metadata is in `Metadata`'s canonical order; message texts are at most
    /// `MESSAGE_TEXT_BYTES_MAX`; visibility timeouts at most `VISIBILITY_TIMEOUT_S_MAX`, at least 1
    /// for Get, and below the TTL for Put; counts within `1..=MESSAGES_PER_GET_MAX`; `results_max`
    /// at most `LIST_QUEUES_RESULTS_MAX`; at most `SIGNED_IDENTIFIERS_MAX` signed identifiers.
    pub fn apply(&mut self, command: Command, now_ms: u64) -> Result<Reply, StorageError> {
        // Timers only (those of graveyard messages too, within the same budget): emptying
        // graveyards is the runtime's background work (`advance`), so a request never pays for
        // freeing a cleared queue's messages wholesale.
        self.run_timers(now_ms, &mut { config::TIMER_ENTRIES_PER_STEP_MAX });
        self.execute(command, now_ms)
    }

    /// Applies `command` without running timers first: correct whatever the wheel's lag.
    fn execute(&mut self, command: Command, now_ms: u64) -> Result<Reply, StorageError> {
        match command {
            Command::CreateQueue { queue, metadata } => self.create_queue(queue, metadata),
            Command::DeleteQueue { queue } => self.delete_queue(&queue),
            Command::GetQueueMetadata { queue } => {
                let queue = self.queue(self.queue_index(&queue)?);
                Ok(Reply::Metadata {
                    metadata: queue.metadata.clone(),
                    approximate_messages_count: queue.messages_count,
                })
            }
            Command::SetQueueMetadata { queue, metadata } => {
                debug_assert!(metadata_is_canonical(&metadata));
                let index = self.queue_index(&queue)?;
                if self.journal.is_some() {
                    self.log(&Record::<&[u8]>::QueueMetadataSet {
                        queue: index,
                        metadata: metadata.clone(),
                    });
                }
                queue_at(&mut self.queues, index).metadata = metadata;
                Ok(Reply::Done)
            }
            Command::ListQueues {
                account,
                prefix,
                marker,
                results_max,
                include_metadata,
            } => Ok(self.list_queues(account, &prefix, marker, results_max, include_metadata)),
            Command::PutMessage {
                queue,
                text,
                visibility_timeout_s,
                ttl_s,
            } => self.put_message(&queue, text, visibility_timeout_s, ttl_s, now_ms),
            Command::GetMessages {
                queue,
                count,
                visibility_timeout_s,
            } => self.get_messages(&queue, count, visibility_timeout_s, now_ms),
            Command::PeekMessages { queue, count } => self.peek_messages(&queue, count, now_ms),
            Command::UpdateMessage {
                queue,
                message_id,
                pop_receipt,
                visibility_timeout_s,
                text,
            } => self.update_message(
                &queue,
                message_id,
                pop_receipt,
                visibility_timeout_s,
                text,
                now_ms,
            ),
            Command::DeleteMessage {
                queue,
                message_id,
                pop_receipt,
            } => {
                let index = self.queue_index(&queue)?;
                let slot = self.resolve_receipt(index, message_id, pop_receipt, now_ms)?;
                self.log(&Record::<&[u8]>::MessageDeleted {
                    slot,
                    generation: self.messages.generation(slot),
                });
                self.free_message(slot);
                Ok(Reply::Done)
            }
            Command::ClearMessages { queue } => {
                let index = self.queue_index(&queue)?;
                if self.queue(index).messages_count > 0 {
                    // The queue moves to a new, empty record; the old one, with every message,
                    // becomes a graveyard.
                    let fresh = self.new_queue_record(Metadata::new())?;
                    self.log(&Record::<&[u8]>::QueueCleared {
                        queue: index,
                        moved_to: fresh,
                        key: Some(queue.clone()),
                    });
                    let metadata = std::mem::take(&mut queue_at(&mut self.queues, index).metadata);
                    queue_at(&mut self.queues, fresh).metadata = metadata;
                    assert_eq!(self.queue_indices.insert(queue.clone(), fresh), Some(index));
                    assert_eq!(self.queue_names.insert(queue, fresh), Some(index));
                    self.retire_queue_record(index);
                }
                Ok(Reply::Done)
            }
            Command::SetQueueAcl { queue, identifiers } => {
                assert!(identifiers.len() <= config::SIGNED_IDENTIFIERS_MAX);
                self.queue_index(&queue)?;
                let version = self.next_replica_version();
                if self.journal.is_some() {
                    self.log(&Record::<&[u8]>::AclSet {
                        key: queue.clone(),
                        version,
                        identifiers: identifiers.clone(),
                    });
                }
                let replica = Replica::QueueAcl {
                    queue,
                    version,
                    identifiers: Some(identifiers.into()),
                };
                self.replicas.apply(replica.clone(), true);
                Ok(Reply::Replicate(Box::new(replica)))
            }
            Command::GetQueueAcl { queue } => {
                self.queue_index(&queue)?;
                Ok(Reply::AccessPolicies(
                    self.replicas
                        .queue_acl(&queue)
                        .map_or_else(|| Vec::new().into(), |(_, identifiers)| identifiers.clone()),
                ))
            }
            Command::SetServiceProperties { account, update } => {
                let properties = update.applied_to(self.replicas.service_properties(&account));
                let version = self.next_replica_version();
                if self.journal.is_some() {
                    self.log(&Record::<&[u8]>::PropertiesSet {
                        account: account.clone(),
                        version,
                        properties: properties.clone(),
                    });
                }
                let replica = Replica::ServiceProperties {
                    account,
                    version,
                    properties: properties.into(),
                };
                self.replicas.apply(replica.clone(), true);
                Ok(Reply::Replicate(Box::new(replica)))
            }
            Command::ApplyReplica(replica) => {
                self.replicas.apply(replica, false);
                Ok(Reply::Done)
            }
            Command::WithStoredPolicy {
                acl_version,
                command,
            } => {
                // The owner's copy is the queue's current ACL, and it has one only while the
                // queue exists (Set Queue ACL needs the queue; Delete Queue removes it).
                let current_version = command
                    .queue()
                    .and_then(|queue| self.replicas.queue_acl(queue))
                    .map(|(version, _)| version);
                if current_version != Some(acl_version) {
                    return Err(StorageError::AuthenticationFailed);
                }
                self.execute(*command, now_ms)
            }
        }
    }

    /// The version of the next replicated change this shard writes: above every earlier one.
    fn next_replica_version(&mut self) -> u64 {
        self.replica_version_last += 1;
        self.replica_version_last
    }

    /// Runs timers due at `now_ms`, at most `entries_max` wheel entries (fired or moved down a
    /// level). Returns whether more are due, in which case the runtime should call again soon.
    /// The budget left after the timers frees messages of graveyards, one entry each.
    pub fn advance(&mut self, now_ms: u64, entries_max: usize) -> bool {
        let mut budget = entries_max;
        self.run_timers(now_ms, &mut budget);
        self.empty_graveyards(&mut budget);
        !self.graveyards.is_empty()
            || self
                .timers
                .next_deadline_ms()
                .is_some_and(|deadline_ms| deadline_ms <= now_ms)
    }

    /// Runs timers due at `now_ms` while `budget` lasts, one wheel entry each.
    fn run_timers(&mut self, now_ms: u64, budget: &mut usize) {
        while let Some(fired) = self.timers.pop_due(now_ms, budget) {
            self.on_timer(fired.timer, now_ms);
        }
    }

    /// When the runtime should next call `advance`: `None` when no timer is pending and no
    /// graveyard is left; 0 (now) while one is. Otherwise never later than the earliest pending
    /// deadline, possibly earlier (see `TimerWheel::next_deadline_ms`).
    pub fn next_deadline_ms(&self) -> Option<u64> {
        if self.graveyards.is_empty() {
            self.timers.next_deadline_ms()
        } else {
            Some(0)
        }
    }

    /// Frees up to `budget` messages of graveyards, and each graveyard record once it is empty.
    /// Newest first (list tails): texts were mostly allocated in put order, so the allocator
    /// hands memory back from the top of the heap a step at a time; oldest first, a queue of a
    /// million messages ended in one trim of its whole gigabyte, a 40 ms step of its own.
    fn empty_graveyards(&mut self, budget: &mut usize) {
        while let Some(&index) = self.graveyards.last() {
            while *budget > 0 {
                let queue = self.queue(index);
                let slot = match (queue.in_order.tail, queue.invisible.tail) {
                    (NONE, NONE) => match queue.out_of_order.first_key_value() {
                        Some((_, &slot)) => slot,
                        None => break,
                    },
                    (NONE, slot) | (slot, _) => slot,
                };
                self.free_message(slot);
                *budget -= 1;
            }
            if self.queue(index).messages_count > 0 {
                return;
            }
            self.graveyards.pop();
            self.queues[index as usize] = None;
            self.queues_free.push(index);
        }
    }

    fn create_queue(&mut self, key: QueueKey, metadata: Metadata) -> Result<Reply, StorageError> {
        debug_assert!(metadata_is_canonical(&metadata));
        if let Some(&index) = self.queue_indices.get(&key) {
            return if metadata_equal(&self.queue(index).metadata, &metadata) {
                Ok(Reply::QueueExists)
            } else {
                Err(StorageError::QueueAlreadyExists)
            };
        }
        if self.queue_indices.len() >= self.queues_max {
            return Err(StorageError::ServerBusy);
        }
        let index = self.new_queue_record(metadata)?;
        if self.journal.is_some() {
            self.log(&Record::<&[u8]>::QueueCreated {
                queue: index,
                key: key.clone(),
                metadata: self.queue(index).metadata.clone(),
            });
        }
        assert!(self.queue_indices.insert(key.clone(), index).is_none());
        assert!(self.queue_names.insert(key, index).is_none());
        Ok(Reply::QueueCreated)
    }

    /// Stores an empty queue with `metadata` in a free record; returns its index.
    fn new_queue_record(&mut self, metadata: Metadata) -> Result<u32, StorageError> {
        if self.queues_free.is_empty() && self.queues.len() >= self.queue_records_max {
            return Err(StorageError::ServerBusy);
        }
        let queue = Queue {
            metadata,
            messages_count: 0,
            in_order: MessageList::EMPTY,
            out_of_order: BTreeMap::new(),
            invisible: MessageList::EMPTY,
            retired: false,
        };
        Ok(match self.queues_free.pop() {
            Some(index) => {
                assert!(self.queues[index as usize].is_none());
                self.queues[index as usize] = Some(queue);
                index
            }
            None => {
                self.queues.push(Some(queue));
                (self.queues.len() - 1) as u32
            }
        })
    }

    /// Retires the queue record at `index`, which no name leads to any more: free at once when
    /// it holds no message, else a graveyard that `advance` empties a budget at a time (so a
    /// queue of a million messages does not stop the shard for the 150 ms freeing them takes).
    /// Its messages answer nothing from now on: receipts name the record, and a receipt for
    /// a graveyard's message does not match the live queue's index (`MessageNotFound`).
    fn retire_queue_record(&mut self, index: u32) {
        if self.queue(index).messages_count == 0 {
            self.queues[index as usize] = None;
            self.queues_free.push(index);
        } else {
            queue_at(&mut self.queues, index).retired = true;
            self.graveyards.push(index);
        }
    }

    fn delete_queue(&mut self, key: &QueueKey) -> Result<Reply, StorageError> {
        let index = self
            .queue_indices
            .remove(key)
            .ok_or(StorageError::QueueNotFound)?;
        assert_eq!(self.queue_names.remove(key), Some(index));
        if self.journal.is_some() {
            self.log(&Record::<&[u8]>::QueueDeleted {
                queue: index,
                key: key.clone(),
            });
        }
        self.retire_queue_record(index);
        if self.replicas.remove_queue_acl(key) {
            // The other shards' copies must go too, or a new queue of this name would find them.
            return Ok(Reply::Replicate(Box::new(Replica::QueueAcl {
                queue: key.clone(),
                version: self.next_replica_version(),
                identifiers: None,
            })));
        }
        Ok(Reply::Done)
    }

    /// This shard's queues of `account` whose names start with `prefix` and are at or after
    /// `marker`, in name order, with metadata if asked: at most `results_max + 1` of them. The
    /// caller merges every shard's part, returns the first `results_max`, and if a queue is left
    /// over its name is the `NextMarker` (the marker is the first name of the next page, hence
    /// "at or after").
    fn list_queues(
        &self,
        account: String,
        prefix: &str,
        marker: String,
        results_max: usize,
        include_metadata: bool,
    ) -> Reply {
        assert!(results_max <= config::LIST_QUEUES_RESULTS_MAX);
        // Every name with the prefix sorts at or after the prefix itself.
        let start = QueueKey {
            account,
            name: marker.max(prefix.to_string()),
        };
        let listings = self
            .queue_names
            .range(&start..)
            .take_while(|(key, _)| key.account == start.account && key.name.starts_with(prefix))
            .take(results_max + 1)
            .map(|(key, &index)| QueueListing {
                name: key.name.clone(),
                metadata: include_metadata.then(|| self.queue(index).metadata.clone()),
            })
            .collect();
        Reply::Queues(listings)
    }

    fn put_message(
        &mut self,
        key: &QueueKey,
        text: Bytes,
        visibility_timeout_s: u64,
        ttl_s: Option<u64>,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!(text.len() <= config::MESSAGE_TEXT_BYTES_MAX);
        assert!(visibility_timeout_s <= config::VISIBILITY_TIMEOUT_S_MAX);
        assert!(ttl_s.is_none_or(|ttl_s| ttl_s > visibility_timeout_s));
        let charge = message_charge(&text);
        if self.message_bytes + charge > self.message_bytes_max {
            return Err(StorageError::ServerBusy);
        }
        let message = Message::new(
            index,
            text,
            self.sequence_next,
            now_ms,
            visibility_timeout_s as u32,
            stored_ttl_s(ttl_s, now_ms),
        );
        let (slot, generation) = self
            .messages
            .insert(message)
            .ok_or(StorageError::ServerBusy)?;
        self.message_bytes += charge;
        self.sequence_next += 1;
        assert!(self.sequence_next <= SEQUENCE_MASK);
        queue_at(&mut self.queues, index).messages_count += 1;
        let time_next_visible_ms = now_ms + visibility_timeout_s * 1000;
        if visibility_timeout_s == 0 {
            self.make_visible(slot);
        } else {
            self.make_invisible(slot, time_next_visible_ms);
        }
        if self.journal.is_some() {
            self.log_message_state(slot, time_next_visible_ms);
        }
        let receipt = PopReceipt {
            slot,
            generation,
            lease: 0,
        };
        // Put's response lists no text, and sharing the text would make `Bytes` allocate a
        // reference count for every message, read or not.
        Ok(Reply::Messages(vec![self.view(
            slot,
            Some(receipt),
            time_next_visible_ms,
            Text::Omitted,
        )]))
    }

    fn get_messages(
        &mut self,
        key: &QueueKey,
        count: u32,
        visibility_timeout_s: u64,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!((1..=config::MESSAGES_PER_GET_MAX).contains(&count));
        assert!((1..=config::VISIBILITY_TIMEOUT_S_MAX).contains(&visibility_timeout_s));
        let time_next_visible_ms = now_ms + visibility_timeout_s * 1000;
        let mut views = Vec::with_capacity(count as usize);
        while views.len() < count as usize {
            let Some(slot) = self.first_visible(index) else {
                break;
            };
            if self.messages.get(slot).expiration_ms() <= now_ms {
                self.free_message(slot);
                continue;
            }
            self.detach(slot);
            let generation = self.messages.generation(slot);
            let message = self.messages.get_mut(slot);
            message.dequeue_count = message.dequeue_count.saturating_add(1);
            message.lease = message.lease.wrapping_add(1);
            let receipt = PopReceipt {
                slot,
                generation,
                lease: message.lease,
            };
            self.make_invisible(slot, time_next_visible_ms);
            let dequeue_count = self.messages.get(slot).dequeue_count;
            self.log(&Record::<&[u8]>::MessageLeased {
                slot,
                generation,
                dequeue_count,
                lease: receipt.lease,
                visible_ms: time_next_visible_ms,
            });
            views.push(self.view(slot, Some(receipt), time_next_visible_ms, Text::Shared));
        }
        Ok(Reply::Messages(views))
    }

    /// The first `count` visible messages, without receipts; their `time_next_visible_ms` is
    /// `now_ms` (they are visible now; Azure's Peek response does not carry the field).
    fn peek_messages(
        &mut self,
        key: &QueueKey,
        count: u32,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!((1..=config::MESSAGES_PER_GET_MAX).contains(&count));
        let mut views = Vec::with_capacity(count as usize);
        // Merge the in-order list and the out-of-order map, each from its own cursor.
        let mut in_order_next = self.queue(index).in_order.head;
        let mut out_of_order_after: Bound<OrderKey> = Bound::Unbounded;
        while views.len() < count as usize {
            let from_in_order = (in_order_next != NONE)
                .then(|| (self.messages.get(in_order_next).order_key(), in_order_next));
            let from_out_of_order = self
                .queue(index)
                .out_of_order
                .range((out_of_order_after, Bound::Unbounded))
                .next()
                .map(|(&key, &slot)| (key, slot));
            let next = match (from_in_order, from_out_of_order) {
                (Some(in_order), Some(out_of_order)) if out_of_order.0 < in_order.0 => {
                    Some((false, out_of_order))
                }
                (Some(in_order), _) => Some((true, in_order)),
                (None, Some(out_of_order)) => Some((false, out_of_order)),
                (None, None) => None,
            };
            let Some((is_in_order, (key, slot))) = next else {
                break;
            };
            if is_in_order {
                in_order_next = self.messages.get(slot).next;
            } else {
                out_of_order_after = Bound::Excluded(key);
            }
            // Both cursors have moved past `slot`, so freeing it leaves them valid.
            if self.messages.get(slot).expiration_ms() <= now_ms {
                self.free_message(slot);
                continue;
            }
            views.push(self.view(slot, None, now_ms, Text::Shared));
        }
        Ok(Reply::Messages(views))
    }

    fn update_message(
        &mut self,
        key: &QueueKey,
        message_id: MessageId,
        pop_receipt: PopReceipt,
        visibility_timeout_s: u64,
        text: Option<Bytes>,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!(visibility_timeout_s <= config::VISIBILITY_TIMEOUT_S_MAX);
        assert!(text
            .as_ref()
            .is_none_or(|text| text.len() <= config::MESSAGE_TEXT_BYTES_MAX));
        let slot = self.resolve_receipt(index, message_id, pop_receipt, now_ms)?;
        if let Some(text) = &text {
            let charge_now = message_charge(&self.messages.get(slot).text);
            let charge_after = self.message_bytes - charge_now + message_charge(text);
            if charge_after > self.message_bytes_max {
                return Err(StorageError::ServerBusy);
            }
            self.message_bytes = charge_after;
        }
        let message = self.messages.get_mut(slot);
        let was_invisible = message.place() == Place::Invisible;
        message.lease = message.lease.wrapping_add(1);
        let lease = message.lease;
        let text_changed = text.is_some();
        if let Some(text) = text {
            message.text = text;
        }
        let time_next_visible_ms = now_ms + visibility_timeout_s * 1000;
        if visibility_timeout_s > 0 {
            self.detach(slot);
            self.make_invisible(slot, time_next_visible_ms);
        } else if was_invisible {
            // Visible now, at its original position.
            self.detach(slot);
            self.make_visible(slot);
        }
        let generation = self.messages.generation(slot);
        if let Some(journal) = &mut self.journal {
            let message = self.messages.get(slot);
            journal.append(&Record::MessageUpdated {
                slot,
                generation,
                lease,
                visible_ms: time_next_visible_ms,
                text: text_changed.then_some(&message.text[..]),
            });
        }
        Ok(Reply::Updated {
            pop_receipt: PopReceipt {
                slot,
                generation,
                lease,
            },
            time_next_visible_ms,
        })
    }

    /// The slot of the message `receipt` names, checked against the queue, the message ID, its
    /// expiry and its current lease. An expired message it meets is freed.
    fn resolve_receipt(
        &mut self,
        queue_index: u32,
        message_id: MessageId,
        receipt: PopReceipt,
        now_ms: u64,
    ) -> Result<u32, StorageError> {
        let named = self
            .messages
            .lookup(receipt.slot, receipt.generation)
            .filter(|message| message.queue() == queue_index)
            .filter(|_| self.message_id_of(receipt.slot) == message_id);
        let slot = match named {
            Some(_) => receipt.slot,
            // A receipt handed out before a restart that moved the message to another shard
            // names the slot it had there; its ID finds it.
            None => match self.foreign_slots.get(&message_id) {
                Some(&slot) if self.messages.get(slot).queue() == queue_index => slot,
                _ => return Err(StorageError::MessageNotFound),
            },
        };
        let message = self.messages.get(slot);
        if message.expiration_ms() <= now_ms {
            self.free_message(slot);
            return Err(StorageError::MessageNotFound);
        }
        if message.lease != receipt.lease {
            return Err(StorageError::PopReceiptMismatch);
        }
        Ok(slot)
    }

    /// Handles a fired timer: the message expired, or its invisibility ended.
    fn on_timer(&mut self, slot: u32, now_ms: u64) {
        let message = self.messages.get(slot);
        if message.expiration_ms() <= now_ms {
            self.free_message(slot);
            return;
        }
        assert_eq!(
            message.place(),
            Place::Invisible,
            "a visible message's only timer is its expiry"
        );
        self.detach(slot);
        self.make_visible(slot);
    }

    /// The visible message that comes first, if any.
    fn first_visible(&self, queue_index: u32) -> Option<u32> {
        let queue = self.queue(queue_index);
        let in_order = queue.in_order.head;
        match queue.out_of_order.first_key_value() {
            Some((&key, &slot))
                if in_order == NONE || key < self.messages.get(in_order).order_key() =>
            {
                Some(slot)
            }
            _ => (in_order != NONE).then_some(in_order),
        }
    }

    /// Puts a message that is in no list into its queue's visible order, and schedules its
    /// expiry.
    fn make_visible(&mut self, slot: u32) {
        let message = self.messages.get(slot);
        let key = message.order_key();
        let expiration_ms = message.expiration_ms();
        let queue = queue_at(&mut self.queues, message.queue());
        let tail = queue.in_order.tail;
        if tail == NONE || self.messages.get(tail).order_key() < key {
            queue
                .in_order
                .push_back(&mut self.messages, slot, Place::VisibleInOrder);
        } else {
            assert!(queue.out_of_order.insert(key, slot).is_none());
            self.messages
                .get_mut(slot)
                .set_place(Place::VisibleOutOfOrder);
        }
        if expiration_ms != EXPIRATION_NEVER_MS {
            self.timers.schedule(slot, expiration_ms);
        }
    }

    /// Puts a message that is in no list into its queue's invisible list until
    /// `time_next_visible_ms`, or until it expires if that comes first.
    fn make_invisible(&mut self, slot: u32, time_next_visible_ms: u64) {
        let message = self.messages.get(slot);
        let deadline_ms = time_next_visible_ms.min(message.expiration_ms());
        queue_at(&mut self.queues, message.queue())
            .invisible
            .push_back(&mut self.messages, slot, Place::Invisible);
        self.timers.schedule(slot, deadline_ms);
    }

    /// Takes a message out of whatever list holds it and cancels its timer; its `Place` is stale
    /// until it is put somewhere again.
    fn detach(&mut self, slot: u32) {
        let message = self.messages.get(slot);
        let key = message.order_key();
        let place = message.place();
        let queue = queue_at(&mut self.queues, message.queue());
        match place {
            Place::VisibleInOrder => queue.in_order.unlink(&mut self.messages, slot),
            Place::VisibleOutOfOrder => assert_eq!(queue.out_of_order.remove(&key), Some(slot)),
            Place::Invisible => queue.invisible.unlink(&mut self.messages, slot),
            Place::Free => unreachable!("the slab never hands out free slots"),
        }
        if self.timers.is_scheduled(slot) {
            self.timers.cancel(slot);
        }
    }

    /// Deletes one message: out of its list, off the wheel, out of the slab.
    fn free_message(&mut self, slot: u32) {
        if !self.foreign_ids.is_empty() {
            if let Some(id) = self.foreign_ids.remove(&slot) {
                self.foreign_slots.remove(&id);
            }
        }
        self.detach(slot);
        let queue_index = self.messages.get(slot).queue();
        queue_at(&mut self.queues, queue_index).messages_count -= 1;
        let message = self.messages.remove(slot);
        self.message_bytes -= message_charge(&message.text);
    }

    fn view(
        &self,
        slot: u32,
        pop_receipt: Option<PopReceipt>,
        time_next_visible_ms: u64,
        text: Text,
    ) -> MessageView {
        let message = self.messages.get(slot);
        let text = match text {
            Text::Shared => message.text.clone(),
            Text::Omitted => Bytes::new(),
        };
        MessageView {
            message_id: self.message_id_of(slot),
            insertion_ms: message.insertion_ms,
            expiration_ms: message.expiration_ms(),
            pop_receipt,
            time_next_visible_ms,
            dequeue_count: message.dequeue_count,
            text,
        }
    }

    /// The UUID of the message in `slot`: the shard's prefix, then its sequence through a
    /// bijection of 62 bits (so IDs stay unique but do not look like a counter), then the
    /// variant; or the ID it had on another shard before a restart re-homed it.
    fn message_id_of(&self, slot: u32) -> MessageId {
        if !self.foreign_ids.is_empty() {
            if let Some(&id) = self.foreign_ids.get(&slot) {
                return id;
            }
        }
        message_id(self.id_prefix, self.messages.get(slot).sequence)
    }

    fn queue_index(&self, key: &QueueKey) -> Result<u32, StorageError> {
        self.queue_indices
            .get(key)
            .copied()
            .ok_or(StorageError::QueueNotFound)
    }

    fn queue(&self, index: u32) -> &Queue {
        match &self.queues[index as usize] {
            Some(queue) => queue,
            None => panic!("queue index {index} is free"),
        }
    }
}

/// The queue at `index`, borrowed from the `queues` field alone so that the slab and the wheel
/// stay available beside it.
fn queue_at(queues: &mut [Option<Queue>], index: u32) -> &mut Queue {
    match &mut queues[index as usize] {
        Some(queue) => queue,
        None => panic!("queue index {index} is free"),
    }
}

/// The stored form of a put's TTL. A TTL that reaches past `EXPIRATION_NEVER_MS` (year 9999) or
/// does not fit the slot's `u32` (136 years) is stored as "never".
fn stored_ttl_s(ttl_s: Option<u64>, now_ms: u64) -> u32 {
    match ttl_s {
        Some(ttl_s)
            if ttl_s < u64::from(TTL_S_NEVER)
                && now_ms.saturating_add(ttl_s * 1000) < EXPIRATION_NEVER_MS =>
        {
            ttl_s as u32
        }
        _ => TTL_S_NEVER,
    }
}

/// Metadata equality as Create Queue sees it: names compared case-insensitively, values exactly.
/// Both sides are in canonical order (sorted by lowercased name), so pairwise comparison suffices.
fn metadata_equal(left: &Metadata, right: &Metadata) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .all(|((left_name, left_value), (right_name, right_value))| {
                left_name.eq_ignore_ascii_case(right_name) && left_value == right_value
            })
}

/// Whether metadata is in `Metadata`'s canonical order: sorted by lowercased name, no duplicates.
fn metadata_is_canonical(metadata: &Metadata) -> bool {
    metadata
        .windows(2)
        .all(|pair| pair[0].0.to_ascii_lowercase() < pair[1].0.to_ascii_lowercase())
}

/// The ID a shard with `id_prefix` gives the message it put with `sequence`.
pub fn message_id(id_prefix: u64, sequence: u64) -> MessageId {
    MessageId((u128::from(id_prefix) << 64) | u128::from(scramble_sequence(sequence)))
}

/// The low half of a message ID: a bijection on 62 bits (odd multipliers and xor-shifts, each
/// invertible) of the sequence, plus the UUID variant bits.
fn scramble_sequence(sequence: u64) -> u64 {
    assert!(sequence <= SEQUENCE_MASK);
    let mut value = sequence.wrapping_mul(0x9e37_79b9_7f4a_7c15) & SEQUENCE_MASK;
    value ^= value >> 29;
    value = value.wrapping_mul(0xbf58_476d_1ce4_e5b9) & SEQUENCE_MASK;
    value ^= value >> 32;
    value | UUID_VARIANT
}

mod persistence;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub use persistence::{Described, DescribedMessage};
pub use persistence::{Identity, Journal, Restorer};
