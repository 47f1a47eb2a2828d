//! The commands a shard's queue state executes and the replies it gives: the only interface between
//! the request path (`api/`) and the state (`queue/`). Commands are plain owned data (`Send`), so
//! the same value is applied locally or shipped to the owning shard, and a log could replay them.
//! The names they carry (queue keys, message IDs, pop receipts) are in `key.rs`.

use std::sync::Arc;

use bytes::Bytes;

use super::key::{MessageId, PopReceipt, QueueKey};
use super::replicas::{
    Replica, ServiceProperties, ServicePropertiesUpdate, SignedIdentifier, SignedIdentifiers,
};

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
    /// Replaces a queue's stored access policies. Runs on the queue's owner, which answers
    /// `Reply::Replicate` for the other shards.
    SetQueueAcl {
        queue: QueueKey,
        identifiers: Vec<SignedIdentifier>,
    },
    GetQueueAcl {
        queue: QueueKey,
    },
    /// Replaces the elements of an account's service properties that `update` carries. Runs on
    /// the account's home shard, which answers `Reply::Replicate` for the other shards.
    SetServiceProperties {
        account: String,
        /// Boxed: rare and large, it would otherwise make every command bigger.
        update: Box<ServicePropertiesUpdate>,
    },
    /// Stores a change another shard made to a replicated setting.
    ApplyReplica(Replica),
    /// `command`, authorized by a service SAS whose terms came from the queue's ACL of version
    /// `acl_version` (in the copy of the shard that authorized it). Refused with
    /// `AuthenticationFailed` unless that is still the queue's ACL on its owner.
    WithStoredPolicy {
        acl_version: u64,
        command: Box<Command>,
    },
}

impl Command {
    /// The queue the command acts on; `None` for commands about an account or every shard.
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
            | Command::ClearMessages { queue }
            | Command::SetQueueAcl { queue, .. }
            | Command::GetQueueAcl { queue } => Some(queue),
            Command::WithStoredPolicy { command, .. } => command.queue(),
            Command::ListQueues { .. }
            | Command::SetServiceProperties { .. }
            | Command::ApplyReplica(_) => None,
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
    /// Delete Queue, Set Metadata, Delete Message, Clear Messages (204); a stored replica.
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
    /// Get Queue ACL.
    AccessPolicies(SignedIdentifiers),
    /// Get Service Properties.
    ServiceProperties(Arc<ServiceProperties>),
    /// The writer of a replicated setting changed it (Set Queue ACL, Set Service Properties,
    /// Delete Queue of a queue with an ACL): the runtime applies the replica on every other
    /// shard, then the request succeeds. Boxed: rare and large, it would otherwise make every
    /// reply bigger.
    Replicate(Box<Replica>),
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
    /// Shares the stored bytes; empty in Put's reply, whose response lists no text.
    pub text: Bytes,
}

/// ExpirationTime of a message that never expires: `Fri, 31 Dec 9999 23:59:59 GMT`.
pub const EXPIRATION_NEVER_MS: u64 = 253_402_300_799_000;
