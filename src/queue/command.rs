//! The commands a shard's queue state executes and the replies it gives: the only interface between
//! the request path (`api/`) and the state (`queue/`). Commands are plain owned data (`Send`), so the
//! same value is applied locally or shipped to the owning shard, and a log could replay them.

use bytes::Bytes;

/// Identifies a queue: the account it belongs to and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    pub account: String,
    pub name: String,
}

/// A queue's metadata: `(name, value)` pairs with names as the client spelt them, unique by
/// case-insensitive name, sorted by lowercased name.
pub type Metadata = Vec<(String, String)>;

/// What a shard is asked to do. Times are in the `now_ms` passed beside the command.
#[derive(Clone, Debug)]
pub enum Command {
    CreateQueue {
        queue: QueueKey,
        metadata: Metadata,
    },
    DeleteQueue {
        queue: QueueKey,
    },
    GetQueueMetadata {
        queue: QueueKey,
    },
    SetQueueMetadata {
        queue: QueueKey,
        metadata: Metadata,
    },
    /// One shard's part of List Queues: its queues of `account` whose names start with `prefix`
    /// and sort after `marker` (or at it: the marker is the first name of the next page).
    ListQueues {
        account: String,
        prefix: String,
        marker: String,
        results_max: usize,
        include_metadata: bool,
    },
    PutMessage {
        queue: QueueKey,
        text: Bytes,
        visibility_timeout_s: u64,
        /// `None`: the message never expires (`messagettl=-1`).
        ttl_s: Option<u64>,
    },
    GetMessages {
        queue: QueueKey,
        count: u32,
        visibility_timeout_s: u64,
    },
    PeekMessages {
        queue: QueueKey,
        count: u32,
    },
    UpdateMessage {
        queue: QueueKey,
        message_id: MessageId,
        pop_receipt: PopReceipt,
        visibility_timeout_s: u64,
        text: Option<Bytes>,
    },
    DeleteMessage {
        queue: QueueKey,
        message_id: MessageId,
        pop_receipt: PopReceipt,
    },
    ClearMessages {
        queue: QueueKey,
    },
}

impl Command {
    /// The queue the command acts on; `None` for commands that span every shard (List Queues).
    pub fn queue(&self) -> Option<&QueueKey> {
        match self {
            Command::CreateQueue { queue, .. }
            | Command::DeleteQueue { queue }
            | Command::GetQueueMetadata { queue }
            | Command::SetQueueMetadata { queue, .. }
            | Command::PutMessage { queue, .. }
            | Command::GetMessages { queue, .. }
            | Command::PeekMessages { queue, .. }
            | Command::UpdateMessage { queue, .. }
            | Command::DeleteMessage { queue, .. }
            | Command::ClearMessages { queue } => Some(queue),
            Command::ListQueues { .. } => None,
        }
    }
}

/// A successful command's result.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Create Queue made a new queue (201).
    QueueCreated,
    /// Create Queue found the queue with identical metadata (204).
    QueueExists,
    /// Delete Queue, Set Metadata, Delete Message, Clear Messages (204).
    Done,
    /// Get Queue Metadata.
    Metadata {
        metadata: Metadata,
        approximate_messages_count: u64,
    },
    /// One shard's List Queues part, sorted by name.
    Queues(Vec<QueueListing>),
    /// Put Message (one message, with its receipt), Get Messages, Peek Messages (no receipts).
    Messages(Vec<MessageView>),
    /// Update Message.
    Updated {
        pop_receipt: PopReceipt,
        time_next_visible_ms: u64,
    },
}

/// One queue in a List Queues result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueListing {
    pub name: String,
    /// Present when the listing asked for metadata.
    pub metadata: Option<Metadata>,
}

/// A message as returned to the client; `text` shares the stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageView {
    pub message_id: MessageId,
    pub insertion_ms: u64,
    /// `EXPIRATION_NEVER_MS` for messages put with `messagettl=-1`.
    pub expiration_ms: u64,
    /// Present for Put and Get, absent for Peek.
    pub pop_receipt: Option<PopReceipt>,
    pub time_next_visible_ms: u64,
    pub dequeue_count: u32,
    pub text: Bytes,
}

/// ExpirationTime of a message that never expires: `Fri, 31 Dec 9999 23:59:59 GMT`.
pub const EXPIRATION_NEVER_MS: u64 = 253_402_300_799_000;

/// A message ID: a UUID, rendered in its hyphenated lowercase form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u128);

/// A pop receipt: where the message lives and which lease of it the holder owns.
/// Encoded for the client as base64 of 12 little-endian bytes (slot, generation, lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PopReceipt {
    /// The message's slab slot.
    pub slot: u32,
    /// The slot's generation when the message was stored; a reused slot has another.
    pub generation: u32,
    /// Which lease of the message this receipt belongs to; each Get and Update makes a new one.
    pub lease: u32,
}
