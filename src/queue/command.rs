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
    /// Creates the queue, or finds it with the same metadata (Azure's idempotent create).
    CreateQueue {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The new queue's metadata, or the metadata an existing queue must have for a 204.
        metadata: Metadata,
    },
    /// Deletes the queue and, with it, every message it holds.
    DeleteQueue {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
    },
    /// Reads the queue's metadata and its approximate message count.
    GetQueueMetadata {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
    },
    /// Replaces all of the queue's metadata.
    SetQueueMetadata {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The complete new metadata; an empty list removes it all.
        metadata: Metadata,
    },
    /// One shard's part of List Queues: its queues of `account` whose names start with `prefix`
    /// and sort after `marker` (or at it: the marker is the first name of the next page).
    ListQueues {
        /// Only this account's queues are listed.
        account: String,
        /// Empty lists every name.
        prefix: String,
        /// Empty starts at the first name.
        marker: String,
        /// The page size, at most `LIST_QUEUES_RESULTS_MAX`; a shard returns up to one more,
        /// so that the merge knows whether there is a next page.
        results_max: usize,
        /// `include=metadata`: each listing carries the queue's metadata.
        include_metadata: bool,
    },
    /// Adds a message to the queue.
    PutMessage {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The `MessageText`, XML-unescaped, at most `MESSAGE_TEXT_BYTES_MAX` bytes.
        text: Bytes,
        /// Seconds before the message first becomes visible, below the TTL (0 = at once).
        visibility_timeout_s: u64,
        /// `None`: the message never expires (`messagettl=-1`).
        ttl_s: Option<u64>,
    },
    /// Leases the first visible messages, each with a new pop receipt, for `visibility_timeout_s`.
    GetMessages {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// Most messages to lease, 1 to `MESSAGES_PER_GET_MAX` (`numofmessages`).
        count: u32,
        /// Seconds the leased messages stay invisible, 1 to `VISIBILITY_TIMEOUT_S_MAX`.
        visibility_timeout_s: u64,
    },
    /// Reads the first visible messages without leasing them or counting a dequeue.
    PeekMessages {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// Most messages to read, 1 to `MESSAGES_PER_GET_MAX` (`numofmessages`).
        count: u32,
    },
    /// Gives a message held by `pop_receipt` a new visibility timeout and, optionally, text.
    UpdateMessage {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The message the URL names; must match the one the receipt points at.
        message_id: MessageId,
        /// Must hold the message's current lease, else `PopReceiptMismatch`.
        pop_receipt: PopReceipt,
        /// Seconds from now until the message is visible again, 0 to `VISIBILITY_TIMEOUT_S_MAX`.
        visibility_timeout_s: u64,
        /// `None` (no body) keeps the text; `Some` replaces it, XML-unescaped.
        text: Option<Bytes>,
    },
    /// Deletes one message held by `pop_receipt`.
    DeleteMessage {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The message the URL names; must match the one the receipt points at.
        message_id: MessageId,
        /// Must hold the message's current lease, else `PopReceiptMismatch`.
        pop_receipt: PopReceipt,
    },
    /// Deletes every message of the queue, visible or not; the queue and its metadata stay.
    ClearMessages {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
    },
    /// Replaces a queue's stored access policies. Runs on the queue's owner, which answers
    /// `Reply::Replicate` for the other shards.
    SetQueueAcl {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The complete new list, at most `SIGNED_IDENTIFIERS_MAX`; empty removes every policy.
        identifiers: Vec<SignedIdentifier>,
    },
    /// Reads the queue's stored access policies, from the owner's copy.
    GetQueueAcl {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
    },
    /// Replaces the elements of an account's service properties that `update` carries. Runs on
    /// the account's home shard, which answers `Reply::Replicate` for the other shards.
    SetServiceProperties {
        /// The account whose properties change; its home shard is `home_shard` of it.
        account: String,
        /// Boxed: rare and large, it would otherwise make every command bigger.
        update: Box<ServicePropertiesUpdate>,
    },
    /// Stores a change another shard made to a replicated setting.
    ApplyReplica(Replica),
    /// Deletes one message whatever its lease (the console's Delete; admin only).
    DeleteMessageById {
        /// The queue's account and validated name; the owner shard is `shard_for` of it.
        queue: QueueKey,
        /// The message to delete.
        message_id: MessageId,
    },
    /// `/_azq/reset`, sent to every shard: deletes this shard's queues of `account` (every
    /// account: `None`) whose names match `glob` (every name: `None`), and drops its copies of
    /// those queues' ACLs (each shard drops its own, so nothing is replicated). Answers
    /// `Reply::Count` with the queues it deleted.
    DeleteQueues {
        /// Only this account's queues, when given.
        account: Option<String>,
        /// Only names matching this glob (`*`, `?`), when given.
        glob: Option<String>,
    },
    /// `command`, authorized by a service SAS whose terms came from the queue's ACL of version
    /// `acl_version` (in the copy of the shard that authorized it). Refused with
    /// `AuthenticationFailed` unless that is still the queue's ACL on its owner.
    WithStoredPolicy {
        /// The writer's version of the ACL whose policy supplied the SAS's terms.
        acl_version: u64,
        /// The command the SAS authorized; boxed because a command cannot hold itself.
        command: Box<Command>,
    },
}

impl Command {
    /// Whether the command returns message texts (Get and Peek Messages), which may have to be
    /// read back from disk first (`Reply::Wait`).
    pub fn reads_texts(&self) -> bool {
        matches!(
            self,
            Command::GetMessages { .. } | Command::PeekMessages { .. }
        )
    }

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
            Command::DeleteMessageById { queue, .. } => Some(queue),
            Command::WithStoredPolicy { command, .. } => command.queue(),
            Command::ListQueues { .. }
            | Command::SetServiceProperties { .. }
            | Command::ApplyReplica(_)
            | Command::DeleteQueues { .. } => None,
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
        /// The queue's metadata, sorted by lowercased name.
        metadata: Metadata,
        /// Messages stored, leased and expired-but-not-yet-swept ones included.
        approximate_messages_count: u64,
    },
    /// One shard's List Queues part, sorted by name.
    Queues(Vec<QueueListing>),
    /// Put Message (one message, with its receipt), Get Messages, Peek Messages (no receipts).
    Messages(Vec<MessageView>),
    /// How many things a command changed (`DeleteQueues`: queues deleted).
    Count(u64),
    /// Update Message.
    Updated {
        /// The receipt of the new lease; the one sent is stale from now on.
        pop_receipt: PopReceipt,
        /// When the message becomes visible again, ms since the Unix epoch.
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
    /// Get or Peek Messages needs texts that are on disk only (tiered storage): the command
    /// changed nothing but the due timers `apply` runs first. The engine reads the texts,
    /// delivers them (`ShardState::deliver_text`) and applies the command again
    /// (`Engine::apply_serving`).
    Wait(TextWait),
}

/// The texts a command waits for: each message's (slot, generation), the locator of the
/// record that holds its text, and that record's sequence (checked when it is read); and those
/// worth reading with them, ahead of the queue's head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextWait {
    /// The queue's record (its index in the shard): one read at a time per queue.
    pub queue: u32,
    /// The texts, in the order the command would return their messages.
    pub texts: Vec<(u32, u32, super::key::TextLocator, u64)>,
    /// For a Get, texts on disk only of the visible messages after those, in order, up to
    /// `TEXT_READ_AHEAD_BYTES` (`ShardState::deliver_ahead`): the next Gets find them in memory.
    pub ahead: Vec<(u32, u32, super::key::TextLocator, u64)>,
    /// Snapshots the shard had begun or put in place when it named them
    /// (`ShardState::snapshot_changes`): the homes of texts read are noted again only if no
    /// other has begun or been put in place since.
    pub snapshot_changes: u64,
    /// How long the texts read ahead for it stay in memory untaken, ms
    /// (`ShardState::deliver_ahead`): `TEXT_READ_AHEAD_HOLD_MS` for a Get that waits, more for
    /// a read ahead of a queue whose Gets come about that far apart (`next_read_ahead`).
    pub hold_ms: u64,
}

/// One queue in a List Queues result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueListing {
    /// The queue's name, without its account.
    pub name: String,
    /// Present when the listing asked for metadata.
    pub metadata: Option<Metadata>,
}

/// A message as returned to the client; `text` shares the stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageView {
    /// The ID the client quotes in Update and Delete Message URLs.
    pub message_id: MessageId,
    /// `InsertionTime`, ms since the Unix epoch.
    pub insertion_ms: u64,
    /// `EXPIRATION_NEVER_MS` for messages put with `messagettl=-1`.
    pub expiration_ms: u64,
    /// Present for Put and Get, absent for Peek.
    pub pop_receipt: Option<PopReceipt>,
    /// `TimeNextVisible`, ms since the Unix epoch; not written for Peek.
    pub time_next_visible_ms: u64,
    /// Times Get Messages has leased the message (this Get included); 0 until the first.
    pub dequeue_count: u32,
    /// Shares the stored bytes; empty in Put's reply, whose response lists no text.
    pub text: Bytes,
}

/// ExpirationTime of a message that never expires: `Fri, 31 Dec 9999 23:59:59 GMT`.
pub const EXPIRATION_NEVER_MS: u64 = 253_402_300_799_000;
