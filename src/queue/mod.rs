//! Per-shard queue state: queues, the message slab, the timer wheel and pop receipts.
//! Synchronous and deterministic: no I/O and no clock reads; every command is applied with the
//! current time passed in, so the same (command, time) sequence always gives the same replies.
//!
//! - `command`: the `Command`/`Reply` interface with `api/`.
//! - `key`: the names commands carry (queue keys, message IDs, pop receipts) and `shard_for`,
//!   which shard owns a queue.
//! - `state`: `ShardState`, which applies commands and runs timers.
//! - `slab`: the message slots, their generations and the intrusive lists through them.
//! - `wheel`: the hierarchical timer wheel for visibility and expiry.
//! - `replicas`: the settings every shard keeps a copy of (service properties, queue ACLs).
//! - `secret`: the server's secret, which makes message IDs and pop receipts' tags.
//! - `record`: the records of changes a durable shard's state emits, and their encoding.

pub mod command;
pub mod key;
pub mod record;
pub mod replicas;
pub mod secret;
pub mod slab;
pub mod state;
pub mod wheel;

pub use command::{Command, MessageView, Metadata, QueueListing, Reply, EXPIRATION_NEVER_MS};
pub use key::{shard_for, MessageId, PopReceipt, QueueKey};
pub use replicas::{
    home_shard, AccessPolicy, CorsRule, Logging, Metrics, Replica, Replicas, RetentionPolicy,
    ServiceProperties, ServicePropertiesUpdate, SignedIdentifier, SignedIdentifiers,
};
pub use secret::Secret;
pub use state::{
    Activity, Census, Encoded, InspectedMessage, MessagePage, PageQuery, QueueSummary, QueuesQuery,
    Refusals, ShardState, Visibility,
};
