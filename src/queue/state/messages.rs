//! The message operations of a `ShardState` (Put, Get, Peek, Update, and the pop receipts Update
//! and Delete name), and where a message is: visible in order, visible out of order, or
//! invisible, moved between them by its timer, and freed.

use std::ops::Bound;

use bytes::Bytes;

use crate::error::StorageError;
use crate::limits;
use crate::queue::command::{MessageView, Reply, EXPIRATION_NEVER_MS};
use crate::queue::key::{MessageId, PopReceipt, QueueKey};
use crate::queue::record::Record;
use crate::queue::slab::{Message, OrderKey, Place, TextSlot, NONE, TTL_S_NEVER};

use super::layout::{message_charge, queue_at, ShardState, Text, SEQUENCE_MASK};

impl ShardState {
    pub(super) fn put_message(
        &mut self,
        key: &QueueKey,
        text: Bytes,
        visibility_timeout_s: u64,
        ttl_s: Option<u64>,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!(text.len() <= limits::MESSAGE_TEXT_BYTES_MAX);
        assert!(visibility_timeout_s <= limits::VISIBILITY_TIMEOUT_S_MAX);
        assert!(ttl_s.is_none_or(|ttl_s| ttl_s > visibility_timeout_s));
        let charge = message_charge(text.len());
        self.admit_disk()?;
        self.admit_memory(charge)?;
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
        let queue = queue_at(&mut self.queues, index);
        queue.messages_count += 1;
        queue.text_bytes += self.messages.get(slot).text.len() as u64;
        queue.activity.puts += 1;
        self.activity.puts += 1;
        let time_next_visible_ms = now_ms + visibility_timeout_s * 1000;
        if visibility_timeout_s == 0 {
            self.make_visible(slot);
        } else {
            self.make_invisible(slot, time_next_visible_ms);
        }
        if self.journal.is_some() {
            self.log_message_state(slot, time_next_visible_ms);
        }
        debug_assert_eq!(self.messages.generation(slot), generation);
        // Put's response lists no text, and sharing the text would make `Bytes` allocate a
        // reference count for every message, read or not.
        Ok(Reply::Messages(vec![self.view(
            slot,
            Some(0),
            time_next_visible_ms,
            Text::Omitted,
        )]))
    }

    pub(super) fn get_messages(
        &mut self,
        key: &QueueKey,
        count: u32,
        visibility_timeout_s: u64,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!((1..=limits::MESSAGES_PER_GET_MAX).contains(&count));
        assert!((1..=limits::VISIBILITY_TIMEOUT_S_MAX).contains(&visibility_timeout_s));
        let window = self.read_ahead_window(index, count, now_ms);
        if let Some(wait) = self.texts_wanted(index, count, window, now_ms) {
            let queue = queue_at(&mut self.queues, index);
            queue.read_ahead_messages = window;
            queue.last_wait = (now_ms, queue.activity.delivered);
            return Ok(Reply::Wait(wait));
        }
        let time_next_visible_ms = now_ms + visibility_timeout_s * 1000;
        let mut views = Vec::with_capacity(count as usize);
        while views.len() < count as usize {
            let Some(slot) = self.first_visible(index) else {
                break;
            };
            if self.messages.get(slot).expiration_ms() <= now_ms {
                self.expire_message(slot);
                continue;
            }
            self.detach(slot);
            let generation = self.messages.generation(slot);
            let message = self.messages.get_mut(slot);
            message.dequeue_count = message.dequeue_count.saturating_add(1);
            message.lease = next_lease(message.lease);
            let lease = message.lease;
            self.make_invisible(slot, time_next_visible_ms);
            let dequeue_count = self.messages.get(slot).dequeue_count;
            self.log(&Record::<&[u8]>::MessageLeased {
                slot,
                generation,
                dequeue_count,
                lease,
                visible_ms: time_next_visible_ms,
            });
            views.push(self.view(slot, Some(lease), time_next_visible_ms, Text::Shared));
        }
        let redelivered = views.iter().filter(|view| view.dequeue_count > 1).count() as u64;
        let delivered = views.len() as u64;
        let empty = u64::from(views.is_empty());
        for activity in [
            &mut queue_at(&mut self.queues, index).activity,
            &mut self.activity,
        ] {
            activity.delivered += delivered;
            activity.redelivered += redelivered;
            activity.empty_gets += empty;
        }
        if !views.is_empty() {
            self.note_get(index, count, now_ms);
        }
        Ok(Reply::Messages(views))
    }

    /// The first `count` visible messages, without receipts; their `time_next_visible_ms` is
    /// `now_ms` (they are visible now; Azure's Peek response does not carry the field).
    pub(super) fn peek_messages(
        &mut self,
        key: &QueueKey,
        count: u32,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!((1..=limits::MESSAGES_PER_GET_MAX).contains(&count));
        if let Some(wait) = self.texts_wanted(index, count, 0, now_ms) {
            return Ok(Reply::Wait(wait));
        }
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
                self.expire_message(slot);
                continue;
            }
            views.push(self.view(slot, None, now_ms, Text::Shared));
        }
        Ok(Reply::Messages(views))
    }

    pub(super) fn update_message(
        &mut self,
        key: &QueueKey,
        message_id: MessageId,
        pop_receipt: PopReceipt,
        visibility_timeout_s: u64,
        text: Option<Bytes>,
        now_ms: u64,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        assert!(visibility_timeout_s <= limits::VISIBILITY_TIMEOUT_S_MAX);
        assert!(text
            .as_ref()
            .is_none_or(|text| text.len() <= limits::MESSAGE_TEXT_BYTES_MAX));
        let slot = self.resolve_receipt(index, message_id, pop_receipt, now_ms)?;
        // The message keeps its ID wherever it lives (a receipt from before a restart that
        // re-homed it names its old slot), so the new receipt's tag is made from it.
        let message_id = self.message_id_of(slot);
        if let Some(text) = &text {
            // A new text is written whole to the log, whatever its size against the old one.
            self.admit_disk()?;
            let charge_now = message_charge(self.messages.get(slot).text.len());
            let charge_new = message_charge(text.len());
            // In memory, the text now counts its slot alone when on disk only.
            let memory_now = match self.messages.get(slot).text.resident() {
                Some(_) => charge_now,
                None => message_charge(0),
            };
            if charge_new > memory_now {
                self.admit_memory(charge_new - memory_now)?;
            }
            self.message_bytes = self.message_bytes - charge_now + charge_new;
            let queue = queue_at(&mut self.queues, index);
            queue.text_bytes =
                queue.text_bytes - self.messages.get(slot).text.len() as u64 + text.len() as u64;
        }
        queue_at(&mut self.queues, index).activity.updates += 1;
        self.activity.updates += 1;
        let message = self.messages.get_mut(slot);
        let was_invisible = message.place() == Place::Invisible;
        message.lease = next_lease(message.lease);
        let lease = message.lease;
        let text_changed = text.is_some();
        if let Some(text) = text {
            self.forget_text(slot);
            self.messages.get_mut(slot).text = TextSlot::Resident(text);
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
                text: text_changed.then(|| &message.text.expect_resident()[..]),
            });
        }
        Ok(Reply::Updated {
            pop_receipt: self.receipt(message_id, slot, generation, lease),
            time_next_visible_ms,
        })
    }

    /// The receipt for lease `lease` of the message `message_id` in (`slot`, `generation`).
    fn receipt(&self, message_id: MessageId, slot: u32, generation: u32, lease: u32) -> PopReceipt {
        PopReceipt {
            slot,
            generation,
            lease,
            tag: self.secret.receipt_tag(message_id, slot, generation, lease),
        }
    }

    /// The slot of the message `receipt` names, checked against the queue, the message ID, its
    /// expiry and its current lease. An expired message it meets is freed.
    ///
    /// A receipt whose tag is not the one this server made for that message ID, slot,
    /// generation and lease is 404 `MessageNotFound` before anything is looked up: the answer
    /// to a made-up or altered receipt says nothing about where any message lives. Only a
    /// receipt the server issued for an earlier lease of the message gets Azure's 400
    /// `PopReceiptMismatch`.
    pub(super) fn resolve_receipt(
        &mut self,
        queue_index: u32,
        message_id: MessageId,
        receipt: PopReceipt,
        now_ms: u64,
    ) -> Result<u32, StorageError> {
        let expected_tag =
            self.secret
                .receipt_tag(message_id, receipt.slot, receipt.generation, receipt.lease);
        if receipt.tag != expected_tag {
            return Err(StorageError::MessageNotFound);
        }
        // A valid tag says the server issued this receipt for this ID, but not that this shard
        // did: every shard shares the secret, and another shard's slot and generation may name
        // a message here (or a shard before a restart that re-homed messages). So the ID of the
        // message found is compared too, and its queue, as a shard's queues share its slab.
        let named = self
            .messages
            .lookup(receipt.slot, receipt.generation)
            .filter(|message| message.queue() == queue_index)
            .filter(|_| self.message_id_of(receipt.slot) == message_id);
        let slot = match named {
            Some(_) => receipt.slot,
            // A receipt handed out before a restart that moved the message to another shard
            // names the slot it had there; its ID finds it.
            None => match self.foreign_ids.slot(message_id) {
                Some(slot) if self.messages.get(slot).queue() == queue_index => slot,
                _ => return Err(StorageError::MessageNotFound),
            },
        };
        let message = self.messages.get(slot);
        if message.expiration_ms() <= now_ms {
            self.expire_message(slot);
            return Err(StorageError::MessageNotFound);
        }
        if message.lease != receipt.lease {
            return Err(StorageError::PopReceiptMismatch);
        }
        Ok(slot)
    }

    /// Handles a fired timer: the message expired, or its invisibility ended.
    pub(super) fn on_timer(&mut self, slot: u32, now_ms: u64) {
        let message = self.messages.get(slot);
        if message.expiration_ms() <= now_ms {
            self.expire_message(slot);
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
    pub(super) fn first_visible(&self, queue_index: u32) -> Option<u32> {
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
    pub(super) fn make_visible(&mut self, slot: u32) {
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
    pub(super) fn make_invisible(&mut self, slot: u32, time_next_visible_ms: u64) {
        let message = self.messages.get(slot);
        let deadline_ms = time_next_visible_ms.min(message.expiration_ms());
        let queue = queue_at(&mut self.queues, message.queue());
        queue.invisible_count += 1;
        queue.delayed_count += u64::from(message.dequeue_count == 0);
        queue
            .invisible
            .push_back(&mut self.messages, slot, Place::Invisible);
        self.timers.schedule(slot, deadline_ms);
    }

    /// Takes a message out of whatever list holds it and cancels its timer; its `Place` is stale
    /// until it is put somewhere again.
    pub(super) fn detach(&mut self, slot: u32) {
        let message = self.messages.get(slot);
        let key = message.order_key();
        let place = message.place();
        let never_delivered = message.dequeue_count == 0;
        let queue = queue_at(&mut self.queues, message.queue());
        match place {
            Place::VisibleInOrder => queue.in_order.unlink(&mut self.messages, slot),
            Place::VisibleOutOfOrder => assert_eq!(queue.out_of_order.remove(&key), Some(slot)),
            Place::Invisible => {
                queue.invisible_count -= 1;
                queue.delayed_count -= u64::from(never_delivered);
                queue.invisible.unlink(&mut self.messages, slot)
            }
            Place::Free => unreachable!("the slab never hands out free slots"),
        }
        if self.timers.is_scheduled(slot) {
            self.timers.cancel(slot);
        }
    }

    /// Deletes one message: out of its list, off the wheel, out of the slab.
    pub(super) fn free_message(&mut self, slot: u32) {
        self.foreign_ids.remove(slot);
        self.detach(slot);
        self.forget_text(slot);
        let queue_index = self.messages.get(slot).queue();
        let message = self.messages.remove(slot);
        let queue = queue_at(&mut self.queues, queue_index);
        queue.messages_count -= 1;
        queue.text_bytes -= message.text.len() as u64;
        let charge = message_charge(message.text.len());
        self.message_bytes -= charge;
        self.freed_message_bytes += charge;
    }

    /// Deletes the message in `slot` of queue record `index` for a client: logged, freed,
    /// counted.
    pub(super) fn delete_message(&mut self, index: u32, slot: u32) {
        self.log(&Record::<&[u8]>::MessageDeleted {
            slot,
            generation: self.messages.generation(slot),
        });
        self.free_message(slot);
        queue_at(&mut self.queues, index).activity.deletes += 1;
        self.activity.deletes += 1;
    }

    /// Frees a message whose time to live ran out, counting it.
    pub(super) fn expire_message(&mut self, slot: u32) {
        let queue_index = self.messages.get(slot).queue();
        self.free_message(slot);
        queue_at(&mut self.queues, queue_index).activity.expired += 1;
        self.activity.expired += 1;
    }

    /// What a reply tells of the message in `slot`; with the receipt of `lease` when there is
    /// one (Put, Get).
    pub(super) fn view(
        &self,
        slot: u32,
        lease: Option<u32>,
        time_next_visible_ms: u64,
        text: Text,
    ) -> MessageView {
        let message = self.messages.get(slot);
        let text = match text {
            Text::Shared => message.text.expect_resident().clone(),
            Text::Omitted => Bytes::new(),
        };
        let message_id = self.message_id_of(slot);
        let pop_receipt = lease
            .map(|lease| self.receipt(message_id, slot, self.messages.generation(slot), lease));
        MessageView {
            message_id,
            insertion_ms: message.insertion_ms,
            expiration_ms: message.expiration_ms(),
            pop_receipt,
            time_next_visible_ms,
            dequeue_count: message.dequeue_count,
            text,
        }
    }

    /// The UUID of the message in `slot`: made with the server's secret from the shard's prefix
    /// and the message's sequence (`Secret::message_id`), or the ID it had on another shard
    /// before a restart re-homed it.
    pub(super) fn message_id_of(&self, slot: u32) -> MessageId {
        if let Some(id) = self.foreign_ids.id(slot) {
            return id;
        }
        self.secret
            .message_id(self.id_prefix, self.messages.get(slot).sequence)
    }
}

/// The stored form of a put's TTL. A TTL that reaches past `EXPIRATION_NEVER_MS` (year 9999) or
/// does not fit the slot's `u32` (136 years) is stored as "never".
pub(super) fn stored_ttl_s(ttl_s: Option<u64>, now_ms: u64) -> u32 {
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

/// The lease after `lease`, for a Get or an Update: one more, but never 0 again when it wraps.
/// Lease 0 is the put's alone, so a message whose lease is 0 was never leased nor updated, and
/// its put record is its whole state (a snapshot names it by that record: `Record::PutsNamed`;
/// helper-54's review: wrapping to 0 after 2^32 Updates would have named an updated message so).
fn next_lease(lease: u32) -> u32 {
    lease.wrapping_add(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::next_lease;

    #[test]
    fn a_lease_never_comes_back_to_the_puts() {
        assert_eq!(next_lease(0), 1);
        assert_eq!(next_lease(1), 2);
        assert_eq!(next_lease(u32::MAX - 1), u32::MAX);
        assert_eq!(next_lease(u32::MAX), 1);
    }
}
