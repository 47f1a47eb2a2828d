//! Read-only views of a shard's queues for `/_azq/inspect` and the console: every message,
//! leased and delayed ones included, with its dequeue count and times. Everything here takes
//! `&self` and runs no timer: inspecting never changes a dequeue count, a visibility, a pop
//! receipt or an order, and emits no log record. Receipts are not shown (the endpoints have no
//! credentials; a receipt would let anyone delete a leased message).
//!
//! Costs, on the owner's thread: a summary is O(1) per queue from counts the state keeps,
//! except "expired, not yet swept", which needs a walk only while the timer wheel is behind
//! (its earliest deadline has passed: a backlog of more than a step's worth of timers), and
//! then O(messages of the shard). A page of messages walks the queue from its front: O(offset +
//! page), at most `INSPECT_PAGE_MESSAGES_MAX` messages and `INSPECT_PAGE_TEXT_BYTES_MAX` bytes
//! of text (at least one message).

use std::collections::HashMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::error::StorageError;
use crate::queue::command::Reply;
use crate::queue::key::{MessageId, QueueKey};
use crate::queue::slab::{OrderKey, Place, TextSlot, NONE};

use super::layout::{Activity, Queue, ShardState, Text};
use super::texts::TextOnDisk;

/// Which queues an inspection lists (`GET /_azq/inspect`), asked of every shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuesQuery {
    /// Only these accounts', when given.
    pub accounts: Option<Vec<String>>,
    /// Only queues after this one (the previous page's `next`).
    pub after: Option<QueueKey>,
    /// At most this many, up to `INSPECT_QUEUES_PAGE_MAX`.
    pub limit: usize,
}

/// Which page of one queue's messages an inspection shows (`GET /_azq/inspect/{account}/{queue}`),
/// asked of the queue's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageQuery {
    /// The queue.
    pub queue: QueueKey,
    /// Messages to skip.
    pub offset: u64,
    /// At most this many, up to `INSPECT_PAGE_MESSAGES_MAX`.
    pub limit: usize,
}

/// One queue's counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSummary {
    /// The queue.
    pub key: QueueKey,
    /// Messages stored: the approximate count (expired ones not yet swept included).
    pub messages: u64,
    /// Visible now (Get would take them, but for expired ones).
    pub visible: u64,
    /// Invisible after a Get: leased to a consumer.
    pub leased: u64,
    /// Invisible and never delivered: put with a visibility delay (or updated before any Get).
    pub delayed: u64,
    /// Expired, counted above, and not freed yet: Get and Peek skip them.
    pub expired: u64,
    /// Bytes of the messages' texts.
    pub text_bytes: u64,
    /// Metadata pairs the queue has.
    pub metadata_count: usize,
    /// What clients did with the queue.
    pub activity: Activity,
}

/// Where a message is, as the console shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Visible: the next Get may take it.
    Visible,
    /// Invisible after a Get, until `time_next_visible_ms`.
    Leased,
    /// Invisible and never delivered, until `time_next_visible_ms`.
    Delayed,
}

impl Visibility {
    /// Its name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Visibility::Visible => "visible",
            Visibility::Leased => "leased",
            Visibility::Delayed => "delayed",
        }
    }
}

/// One message as inspection shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectedMessage {
    /// Its ID.
    pub message_id: MessageId,
    /// `InsertionTime`, ms since the Unix epoch.
    pub insertion_ms: u64,
    /// `ExpirationTime`, ms since the Unix epoch (`EXPIRATION_NEVER_MS`: never).
    pub expiration_ms: u64,
    /// Visible: when it became visible; invisible: when its timer runs (its lease or delay
    /// ends, or it expires if that comes first).
    pub time_next_visible_ms: u64,
    /// Visible, leased or delayed.
    pub visibility: Visibility,
    /// Expired but not freed yet.
    pub expired: bool,
    /// Times Get Messages delivered it.
    pub dequeue_count: u32,
    /// Its text, shared with the store; `None` while it is on disk only (`--text-memory`):
    /// the state never waits for a read, its owner reads it back for the page
    /// (`control::read_texts_shown`) and leaves it `None` if that read fails.
    pub text: Option<Bytes>,
    /// The text's length, bytes, in memory or not.
    pub text_bytes: usize,
    /// Where the text is when it is on disk only: what its owner reads for the page.
    pub on_disk: Option<TextOnDisk>,
}

/// A page of a queue's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagePage {
    /// The queue's counts.
    pub summary: QueueSummary,
    /// Its messages from `offset`: visible ones in the order Get takes them, then invisible
    /// ones in the order they became invisible.
    pub messages: Vec<InspectedMessage>,
    /// The offset of the next page, when there is one.
    pub next_offset: Option<u64>,
}

impl ShardState {
    /// This shard's live queues (of `accounts`, when given) after `after` in (account, name)
    /// order: at most `limit`, plus whether more follow.
    pub fn inspect_queues(
        &self,
        accounts: Option<&[String]>,
        after: Option<&QueueKey>,
        limit: usize,
        now_ms: u64,
    ) -> (Vec<QueueSummary>, bool) {
        let expired = self.expired_by_queue(now_ms);
        let range = match after {
            Some(after) => self
                .queue_names
                .range((Bound::Excluded(after), Bound::Unbounded)),
            None => self.queue_names.range::<QueueKey, _>(..),
        };
        let mut matching =
            range.filter(|(key, _)| accounts.is_none_or(|names| names.contains(&key.account)));
        let summaries: Vec<QueueSummary> = matching
            .by_ref()
            .take(limit)
            .map(|(key, &index)| self.summary(key, index, &expired))
            .collect();
        (summaries, matching.next().is_some())
    }

    /// The queue's counts and the page of its messages from `offset`: at most `limit` messages
    /// and, past the first, `text_bytes_max` bytes of text.
    pub fn inspect_messages(
        &self,
        key: &QueueKey,
        offset: u64,
        limit: usize,
        text_bytes_max: usize,
        now_ms: u64,
    ) -> Result<MessagePage, StorageError> {
        let index = self.queue_index(key)?;
        let queue = self.queue(index);
        let mut page = MessagePage {
            summary: self.summary(key, index, &self.expired_in(index, now_ms)),
            messages: Vec::new(),
            next_offset: None,
        };
        let mut text_bytes = 0usize;
        let slots = self.visible_slots(queue).chain(self.invisible_slots(queue));
        for (position, slot) in (0u64..).zip(slots) {
            if position >= offset {
                let text_len = self.messages.get(slot).text.len();
                let full = page.messages.len() >= limit
                    || (!page.messages.is_empty() && text_bytes + text_len > text_bytes_max);
                if full {
                    page.next_offset = Some(position);
                    break;
                }
                text_bytes += text_len;
                page.messages.push(self.inspected(slot, now_ms));
            }
        }
        Ok(page)
    }

    /// Deletes the message `message_id` of `key` whatever its lease (the console's Delete):
    /// O(messages of the queue), as it is found by a walk.
    pub(super) fn delete_message_by_id(
        &mut self,
        key: &QueueKey,
        message_id: MessageId,
    ) -> Result<Reply, StorageError> {
        let index = self.queue_index(key)?;
        let queue = self.queue(index);
        let slot = self
            .visible_slots(queue)
            .chain(self.invisible_slots(queue))
            .find(|&slot| self.message_id_of(slot) == message_id)
            .ok_or(StorageError::MessageNotFound)?;
        self.delete_message(index, slot);
        Ok(Reply::Done)
    }

    /// What clients did with every queue of the shard since it started.
    pub fn activity(&self) -> Activity {
        self.activity
    }

    fn summary(&self, key: &QueueKey, index: u32, expired: &HashMap<u32, u64>) -> QueueSummary {
        let queue = self.queue(index);
        QueueSummary {
            key: key.clone(),
            messages: queue.messages_count,
            visible: queue.messages_count - queue.invisible_count,
            leased: queue.invisible_count - queue.delayed_count,
            delayed: queue.delayed_count,
            expired: expired.get(&index).copied().unwrap_or(0),
            text_bytes: queue.text_bytes,
            metadata_count: queue.metadata.len(),
            activity: queue.activity,
        }
    }

    fn inspected(&self, slot: u32, now_ms: u64) -> InspectedMessage {
        let message = self.messages.get(slot);
        let (visibility, time_next_visible_ms) = if message.place() == Place::Invisible {
            let deadline_ms = self.timers.deadline_ms(slot).unwrap_or(now_ms);
            if message.dequeue_count == 0 {
                (Visibility::Delayed, deadline_ms)
            } else {
                (Visibility::Leased, deadline_ms)
            }
        } else {
            (Visibility::Visible, message.order_key().0)
        };
        let resident = message.text.resident().is_some();
        let on_disk = match message.text {
            TextSlot::OnDisk { locator, .. } => Some(self.text_on_disk(slot, locator)),
            TextSlot::Resident(_) => None,
        };
        let text = if resident {
            Text::Shared
        } else {
            Text::Omitted
        };
        let view = self.view(slot, None, time_next_visible_ms, text);
        InspectedMessage {
            message_id: view.message_id,
            insertion_ms: view.insertion_ms,
            expiration_ms: view.expiration_ms,
            time_next_visible_ms,
            visibility,
            expired: view.expiration_ms <= now_ms,
            dequeue_count: view.dequeue_count,
            text: resident.then_some(view.text),
            text_bytes: message.text.len(),
            on_disk,
        }
    }

    /// Whether some timer is due and has not run: only then can an expired message still be
    /// stored (every message has a timer at or before its expiry).
    fn wheel_behind(&self, now_ms: u64) -> bool {
        self.timers
            .next_deadline_ms()
            .is_some_and(|deadline_ms| deadline_ms <= now_ms)
    }

    /// Expired messages not yet freed, by queue record; a walk of the slab only when the
    /// wheel is behind.
    fn expired_by_queue(&self, now_ms: u64) -> HashMap<u32, u64> {
        let mut expired = HashMap::new();
        if self.wheel_behind(now_ms) {
            for message in self.messages.occupied_messages() {
                if message.expiration_ms() <= now_ms {
                    *expired.entry(message.queue()).or_insert(0) += 1;
                }
            }
        }
        expired
    }

    /// The same for one queue record, walking only its messages.
    fn expired_in(&self, index: u32, now_ms: u64) -> HashMap<u32, u64> {
        let mut expired = HashMap::new();
        if self.wheel_behind(now_ms) {
            let queue = self.queue(index);
            let count = self
                .visible_slots(queue)
                .chain(self.invisible_slots(queue))
                .filter(|&slot| self.messages.get(slot).expiration_ms() <= now_ms)
                .count() as u64;
            expired.insert(index, count);
        }
        expired
    }

    /// The queue's visible messages in the order Get takes them: its in-order list merged
    /// with its out-of-order map.
    fn visible_slots<'a>(&'a self, queue: &'a Queue) -> impl Iterator<Item = u32> + 'a {
        let mut in_order_next = queue.in_order.head;
        let mut out_of_order = queue.out_of_order.iter().peekable();
        std::iter::from_fn(move || {
            let in_order: Option<(OrderKey, u32)> = (in_order_next != NONE)
                .then(|| (self.messages.get(in_order_next).order_key(), in_order_next));
            match (in_order, out_of_order.peek()) {
                (Some((in_key, _)), Some((&out_key, _))) if out_key < in_key => {
                    out_of_order.next().map(|(_, &slot)| slot)
                }
                (Some((_, slot)), _) => {
                    in_order_next = self.messages.get(slot).next;
                    Some(slot)
                }
                (None, _) => out_of_order.next().map(|(_, &slot)| slot),
            }
        })
    }

    /// The queue's invisible messages, in the order they became invisible.
    fn invisible_slots<'a>(&'a self, queue: &'a Queue) -> impl Iterator<Item = u32> + 'a {
        let mut next = queue.invisible.head;
        std::iter::from_fn(move || {
            (next != NONE).then(|| {
                let slot = next;
                next = self.messages.get(slot).next;
                slot
            })
        })
    }
}
