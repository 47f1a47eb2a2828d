//! Per-shard queue state: queues, the message slab, the timer wheel and pop receipts.
//! Synchronous and deterministic: no I/O and no clock reads; every command is applied with the
//! current time passed in, so the same (command, time) sequence always gives the same replies.

pub mod command;
pub mod slab;
pub mod wheel;

pub use command::{
    Command, MessageId, MessageView, Metadata, PopReceipt, QueueKey, QueueListing, Reply,
    EXPIRATION_NEVER_MS,
};
