//! Per-shard queue state: queues, the message slab, the timer wheel and pop receipts.
//! Synchronous and deterministic: no I/O and no clock reads; every command is applied with the
//! current time passed in, so the same (command, time) sequence always gives the same replies.
//!
//! - `command`: the `Command`/`Reply` interface with `api/`, message IDs and pop receipts.
//! - `state`: `ShardState`, which applies commands and runs timers.
//! - `slab`: the message slots, their generations and the intrusive lists through them.
//! - `wheel`: the hierarchical timer wheel for visibility and expiry.
//! - `replicas`: the settings every shard keeps a copy of (service properties, queue ACLs).
//! - `shard_for`: which shard owns a queue.

pub mod command;
pub mod replicas;
pub mod slab;
pub mod state;
pub mod wheel;

pub use command::{
    Command, MessageId, MessageView, Metadata, PopReceipt, QueueKey, QueueListing, Reply,
    EXPIRATION_NEVER_MS,
};
pub use replicas::{
    home_shard, AccessPolicy, CorsRule, Logging, Metrics, Replica, Replicas, RetentionPolicy,
    ServiceProperties, ServicePropertiesUpdate, SignedIdentifier, SignedIdentifiers,
};
pub use state::ShardState;

/// Fixed hash seeds: the queue → shard mapping must be the same on every shard and every run
/// (the digits of pi, nothing up the sleeve).
const SHARD_HASH_SEEDS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

/// The shard, in `0..shards`, that owns `queue`. A plain function of the key, as glommio's
/// `ShardFn` wants, stable across runs of the same binary.
pub fn shard_for(queue: &QueueKey, shards: usize) -> usize {
    assert!((1..=crate::config::SHARDS_MAX).contains(&shards));
    let [k0, k1, k2, k3] = SHARD_HASH_SEEDS;
    let hash = ahash::RandomState::with_seeds(k0, k1, k2, k3).hash_one(queue);
    (hash % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(account: &str, name: &str) -> QueueKey {
        QueueKey {
            account: account.to_string(),
            name: name.to_string(),
        }
    }

    #[test]
    fn shard_for_is_in_range_and_stable() {
        for shards in [1, 2, 3, 7, 256] {
            for index in 0..200 {
                let queue = key("devstoreaccount1", &format!("queue-{index}"));
                let shard = shard_for(&queue, shards);
                assert!(shard < shards);
                assert_eq!(shard, shard_for(&queue.clone(), shards));
            }
        }
        assert_eq!(shard_for(&key("a", "q"), 1), 0);
    }

    #[test]
    fn shard_for_spreads_queues() {
        let shards = 4;
        let mut counts = [0usize; 4];
        for index in 0..4000 {
            counts[shard_for(&key("devstoreaccount1", &format!("q{index}")), shards)] += 1;
        }
        assert!(counts.iter().all(|&count| count > 800), "{counts:?}");
    }

    #[test]
    fn shard_for_depends_on_the_account() {
        let differing = (0..100)
            .filter(|index| {
                let name = format!("q{index}");
                shard_for(&key("one", &name), 16) != shard_for(&key("two", &name), 16)
            })
            .count();
        assert!(differing > 50);
    }

    #[test]
    #[should_panic]
    fn shard_for_zero_shards_is_a_bug() {
        shard_for(&key("a", "q"), 0);
    }
}
