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
//!
//! Files: `layout` (what the state holds), `queues` and `messages` (the operations),
//! `persistence` (the journal, snapshots and restore), `inspect` (read-only views for
//! `/_azq/inspect`, and the console's delete by ID), `texts` (texts that leave memory) with
//! `homes` (where those in memory are on disk), `foreign` (the IDs of messages moved from another
//! shard); this file applies a command with them and runs
//! the timers.

mod foreign;
mod homes;
mod inspect;
mod layout;
mod messages;
mod persistence;
mod queues;
#[cfg(test)]
mod tests;
pub mod texts;

use crate::error::StorageError;
use crate::limits;
use crate::queue::command::{Command, Metadata, Reply};
use crate::queue::key::{self, QueueKey};
use crate::queue::record::Record;
use crate::queue::replicas::{acl_charge, Replica};
use crate::queue::slab::NONE;

use layout::{metadata_is_canonical, queue_at, queue_charge};

pub use inspect::{
    InspectedMessage, MessagePage, PageQuery, QueueSummary, QueuesQuery, Visibility,
};
pub use layout::{Activity, Census, Journal, Refusals, ShardState};
#[cfg(test)]
pub use persistence::{Described, DescribedMessage};
pub use persistence::{Encoded, Identity, Restorer};

impl ShardState {
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
        self.run_timers(now_ms, &mut { limits::TIMER_ENTRIES_PER_STEP_MAX });
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
                self.admit_disk()?;
                let (charge_now, charge_new) = (
                    queue_charge(&self.queue(index).metadata),
                    queue_charge(&metadata),
                );
                if charge_new > charge_now {
                    self.admit_memory(charge_new - charge_now)?;
                }
                self.queue_bytes = self.queue_bytes - charge_now + charge_new;
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
                self.delete_message(index, slot);
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
                    let old = queue_at(&mut self.queues, index);
                    let metadata = std::mem::take(&mut old.metadata);
                    let activity = old.activity;
                    let fresh_queue = queue_at(&mut self.queues, fresh);
                    fresh_queue.metadata = metadata;
                    fresh_queue.activity = activity;
                    assert_eq!(self.queue_indices.insert(queue.clone(), fresh), Some(index));
                    assert_eq!(self.queue_names.insert(queue, fresh), Some(index));
                    self.retire_queue_record(index);
                }
                Ok(Reply::Done)
            }
            Command::SetQueueAcl { queue, identifiers } => {
                assert!(identifiers.len() <= limits::SIGNED_IDENTIFIERS_MAX);
                self.queue_index(&queue)?;
                self.admit_disk()?;
                // Every shard keeps a copy and counts it; the owner refuses one its own budget
                // cannot take (the shards hold the same copies, so theirs is alike).
                let charge_now = self
                    .replicas
                    .queue_acl(&queue)
                    .map_or(0, |(_, current)| acl_charge(&queue, current));
                let charge_new = acl_charge(&queue, &identifiers);
                if charge_new > charge_now {
                    self.admit_memory(charge_new - charge_now)?;
                }
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
                self.admit_disk()?;
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
            Command::DeleteMessageById { queue, message_id } => {
                self.delete_message_by_id(&queue, message_id)
            }
            Command::DeleteQueues { account, glob } => {
                let matches = |key: &QueueKey| {
                    account
                        .as_ref()
                        .is_none_or(|account| key.account == *account)
                        && glob.as_ref().is_none_or(|glob| key::glob(glob, &key.name))
                };
                let doomed: Vec<QueueKey> = self
                    .queue_names
                    .keys()
                    .filter(|key| matches(key))
                    .cloned()
                    .collect();
                for key in &doomed {
                    // The ACL's removal goes to no other shard: each drops its own copies below.
                    self.delete_queue(key)?;
                }
                let copies: Vec<QueueKey> = self
                    .replicas
                    .entries(false)
                    .filter_map(|replica| match replica {
                        Replica::QueueAcl { queue, .. } if matches(&queue) => Some(queue),
                        _ => None,
                    })
                    .collect();
                for key in &copies {
                    self.replicas.remove_queue_acl(key);
                }
                Ok(Reply::Count(doomed.len() as u64))
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
        self.release_read_ahead(now_ms, &mut budget);
        self.next_deadline_ms()
            .is_some_and(|deadline_ms| deadline_ms <= now_ms)
    }

    /// Runs timers due at `now_ms` while `budget` lasts, one wheel entry each.
    fn run_timers(&mut self, now_ms: u64, budget: &mut usize) {
        while let Some(fired) = self.timers.pop_due(now_ms, budget) {
            self.on_timer(fired.timer, now_ms);
        }
    }

    /// When the runtime should next call `advance`: `None` when no timer is pending, no
    /// graveyard is left and no text is held read ahead; 0 (now) while a graveyard is.
    /// Otherwise never later than the earliest pending deadline, possibly earlier (see
    /// `TimerWheel::next_deadline_ms`), nor than the time a text read ahead is held until.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        if !self.graveyards.is_empty() {
            return Some(0);
        }
        match (self.timers.next_deadline_ms(), self.read_ahead_due_ms()) {
            (Some(timer_ms), Some(held_ms)) => Some(timer_ms.min(held_ms)),
            (timer_ms, held_ms) => timer_ms.or(held_ms),
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
            self.free_queue_record(index);
        }
    }
}
