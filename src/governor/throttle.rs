//! Azure's scalability targets as token buckets, decided without locks and with time passed in.
//!
//! - **Per queue** (`QueueThrottle`): on the shard that owns the queue, one bucket per queue that
//!   has seen message operations lately. Every command on a queue's messages reaches its owner,
//!   so the owner alone sees the queue's whole rate and decides exactly.
//! - **Per account** (`AccountThrottle`): requests arrive on every shard, so each shard holds a
//!   bucket per account filled at its **share** of the limit. Every `ACCOUNT_SHARE_INTERVAL_MS`
//!   each shard reports what it was asked for (accepted and refused) to shard 0, which answers
//!   with that shard's new share, `limit × (demand + 1) / Σ (demand + 1)` over the shards' latest
//!   reports (`shares_for`). The error bound is in docs/ARCHITECTURE.md ("Throttling").

use std::collections::HashMap;

use crate::limits::QUEUE_BUCKETS_PER_SHARD_MAX;
use crate::queue::{Command, QueueKey};

use super::bucket::TokenBucket;

/// Whether `command` is an operation on a queue's messages, which the per-queue target counts.
pub fn is_message_operation(command: &Command) -> bool {
    match command {
        Command::PutMessage { .. }
        | Command::GetMessages { .. }
        | Command::PeekMessages { .. }
        | Command::UpdateMessage { .. }
        | Command::DeleteMessage { .. }
        | Command::ClearMessages { .. } => true,
        Command::WithStoredPolicy { command, .. } => is_message_operation(command),
        _ => false,
    }
}

/// The per-queue buckets of the queues one shard owns.
#[derive(Debug)]
pub struct QueueThrottle {
    rate_per_s: u64,
    burst_ms: u64,
    buckets: HashMap<QueueKey, TokenBucket, ahash::RandomState>,
}

impl QueueThrottle {
    /// Buckets of `rate_per_s` message operations a second per queue, holding `burst_ms` of them.
    pub fn new(rate_per_s: u64, burst_ms: u64) -> QueueThrottle {
        QueueThrottle {
            rate_per_s,
            burst_ms,
            buckets: HashMap::with_hasher(ahash::RandomState::with_seeds(1, 2, 3, 4)),
        }
    }

    /// Takes a token for one message operation on `queue` at `now_ms`; `false`: over the limit.
    pub fn take(&mut self, queue: &QueueKey, now_ms: u64) -> bool {
        if let Some(bucket) = self.buckets.get_mut(queue) {
            return bucket.take(now_ms);
        }
        if self.buckets.len() >= QUEUE_BUCKETS_PER_SHARD_MAX {
            self.forget_full(now_ms);
        }
        let mut bucket = TokenBucket::new(self.rate_per_s, self.burst_ms, now_ms);
        let taken = bucket.take(now_ms);
        self.buckets.insert(queue.clone(), bucket);
        taken
    }

    /// Forgets the buckets that are full (a new one would be the same); if every bucket is in
    /// use, forgets them all, which lets each of those queues burst once more.
    fn forget_full(&mut self, now_ms: u64) {
        self.buckets.retain(|_, bucket| !bucket.is_full(now_ms));
        if self.buckets.len() >= QUEUE_BUCKETS_PER_SHARD_MAX {
            self.buckets.clear();
        }
    }

    /// Queues with a bucket now, at most `QUEUE_BUCKETS_PER_SHARD_MAX`.
    #[cfg(test)]
    fn buckets(&self) -> usize {
        self.buckets.len()
    }
}

/// One account's bucket on one shard and what the shard was asked for since its last report.
#[derive(Debug)]
struct AccountShare {
    bucket: TokenBucket,
    demand: u64,
}

/// One shard's part of the per-account limit.
#[derive(Debug)]
pub struct AccountThrottle {
    limit_per_s: u64,
    shards: usize,
    burst_ms: u64,
    accounts: HashMap<String, AccountShare>,
}

impl AccountThrottle {
    /// A shard's buckets for an account limit of `limit_per_s` requests a second over `shards`
    /// shards, each holding `burst_ms` of its share; until the first rebalance each shard gets
    /// an even share.
    pub fn new(limit_per_s: u64, shards: usize, burst_ms: u64) -> AccountThrottle {
        assert!(shards > 0);
        AccountThrottle {
            limit_per_s,
            shards,
            burst_ms,
            accounts: HashMap::new(),
        }
    }

    /// Takes a token for one request of `account` at `now_ms`; `false`: over this shard's share.
    pub fn take(&mut self, account: &str, now_ms: u64) -> bool {
        if let Some(share) = self.accounts.get_mut(account) {
            share.demand += 1;
            return share.bucket.take(now_ms);
        }
        let even = (self.limit_per_s / self.shards as u64).max(1);
        let mut bucket = TokenBucket::new(even, self.burst_ms, now_ms);
        let taken = bucket.take(now_ms);
        self.accounts
            .insert(account.to_string(), AccountShare { bucket, demand: 1 });
        taken
    }

    /// What the shard was asked for per account since the last call, which starts a new period.
    pub fn take_demand(&mut self) -> Vec<(String, u64)> {
        self.accounts
            .iter_mut()
            .map(|(account, share)| (account.clone(), std::mem::take(&mut share.demand)))
            .collect()
    }

    /// Applies the shares shard 0 computed for this shard, from `now_ms` on.
    pub fn set_shares(&mut self, shares: &[(String, u64)], now_ms: u64) {
        for (account, rate_per_s) in shares {
            match self.accounts.get_mut(account) {
                Some(share) => share.bucket.set_rate(*rate_per_s, now_ms),
                None => {
                    self.accounts.insert(
                        account.clone(),
                        AccountShare {
                            bucket: TokenBucket::new(*rate_per_s, self.burst_ms, now_ms),
                            demand: 0,
                        },
                    );
                }
            }
        }
    }
}

/// Shard 0's table of every shard's last reported demand per account.
#[derive(Debug)]
pub struct ShareTable {
    limit_per_s: u64,
    /// `demand[shard]`: that shard's last report.
    demand: Vec<HashMap<String, u64>>,
}

impl ShareTable {
    /// A table for an account limit of `limit_per_s` over `shards` shards.
    pub fn new(limit_per_s: u64, shards: usize) -> ShareTable {
        ShareTable {
            limit_per_s,
            demand: vec![HashMap::new(); shards],
        }
    }

    /// Records `shard`'s report and answers its new share of every account it reported:
    /// `limit × (its demand + 1) / Σ over shards (demand + 1)`. The `+ 1` keeps a share for a
    /// shard that was idle, so its first requests are not all refused; at least 1 a second.
    pub fn shares_for(&mut self, shard: usize, report: Vec<(String, u64)>) -> Vec<(String, u64)> {
        self.demand[shard] = report.into_iter().collect();
        self.demand[shard]
            .iter()
            .map(|(account, own)| {
                let total: u64 = self
                    .demand
                    .iter()
                    .map(|shard| shard.get(account).copied().unwrap_or(0) + 1)
                    .sum();
                let share = (self.limit_per_s as u128 * (own + 1) as u128 / total as u128) as u64;
                (account.clone(), share.max(1))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::TOKEN_BUCKET_BURST_MS;

    fn key(name: &str) -> QueueKey {
        QueueKey {
            account: "devstoreaccount1".to_string(),
            name: name.to_string(),
        }
    }

    #[test]
    fn each_queue_has_its_own_bucket() {
        let mut throttle = QueueThrottle::new(10, TOKEN_BUCKET_BURST_MS);
        let burst = 10 * TOKEN_BUCKET_BURST_MS as usize / 1000;
        assert_eq!(
            (0..100).filter(|_| throttle.take(&key("a"), 0)).count(),
            burst
        );
        assert_eq!(
            (0..100).filter(|_| throttle.take(&key("b"), 0)).count(),
            burst
        );
        assert!(throttle.take(&key("a"), 100));
        assert_eq!(throttle.buckets(), 2);
    }

    #[test]
    fn idle_buckets_are_forgotten_at_the_cap() {
        let mut throttle = QueueThrottle::new(1_000_000, TOKEN_BUCKET_BURST_MS);
        for index in 0..QUEUE_BUCKETS_PER_SHARD_MAX {
            assert!(throttle.take(&key(&format!("q{index}")), 0));
        }
        assert_eq!(throttle.buckets(), QUEUE_BUCKETS_PER_SHARD_MAX);
        // A second later every bucket is full again: all are forgotten for the new queue.
        assert!(throttle.take(&key("new"), TOKEN_BUCKET_BURST_MS));
        assert_eq!(throttle.buckets(), 1);
    }

    #[test]
    fn message_operations_are_counted_and_others_are_not() {
        let put = Command::PutMessage {
            queue: key("a"),
            text: bytes::Bytes::new(),
            visibility_timeout_s: 0,
            ttl_s: None,
        };
        assert!(is_message_operation(&put));
        assert!(is_message_operation(&Command::WithStoredPolicy {
            acl_version: 1,
            command: Box::new(put),
        }));
        assert!(!is_message_operation(&Command::CreateQueue {
            queue: key("a"),
            metadata: Vec::new(),
        }));
    }

    #[test]
    fn shares_follow_demand_and_add_up_to_the_limit() {
        let mut table = ShareTable::new(20_000, 2);
        let account = "devstoreaccount1".to_string();
        // Shard 1 is idle, shard 0 is asked 4,000 times in a period.
        let idle = table.shares_for(1, vec![(account.clone(), 0)]);
        let busy = table.shares_for(0, vec![(account.clone(), 3_999)]);
        assert_eq!(busy, vec![(account.clone(), 19_995)]);
        assert_eq!(table.shares_for(1, vec![(account.clone(), 0)])[0].1, 4);
        assert!(idle[0].1 <= 20_000);
        // Equal demand: equal shares.
        table.shares_for(0, vec![(account.clone(), 100)]);
        assert_eq!(
            table.shares_for(1, vec![(account.clone(), 100)])[0].1,
            10_000
        );
    }

    #[test]
    fn a_shard_over_its_share_is_refused_until_rebalanced() {
        let mut throttle = AccountThrottle::new(200, 2, TOKEN_BUCKET_BURST_MS);
        let accepted = (0..1000).filter(|_| throttle.take("a", 0)).count() as u64;
        assert_eq!(accepted, 100 * TOKEN_BUCKET_BURST_MS / 1000);
        assert_eq!(throttle.take_demand(), vec![("a".to_string(), 1000)]);
        assert_eq!(throttle.take_demand(), vec![("a".to_string(), 0)]);
        throttle.set_shares(&[("a".to_string(), 200)], 0);
        // 10 ms at 200/s: two tokens.
        assert_eq!((0..10).filter(|_| throttle.take("a", 10)).count(), 2);
    }
}
