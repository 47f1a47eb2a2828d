//! Deterministic simulation of one shard: random commands over several queues, driven by a
//! `ManualClock`, with timers sometimes starved (a tiny budget before a command that runs none),
//! checking after every step the structural invariants (`verify`) and what clients may observe:
//! no expired message is returned, no message is returned while it is invisible, every returned
//! message is returned with its dequeue count one higher, IDs are unique, counts match the slab.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::time::{Clock, ManualClock};

const QUEUES: usize = 5;

/// What the simulation remembers of a message it has seen.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// Not to be returned before this time (end of its put delay, lease, or update).
    invisible_until_ms: u64,
    expiration_ms: u64,
    dequeue_count: u32,
}

#[test]
fn simulation_keeps_invariants() {
    for seed in 100..112u64 {
        let result = std::panic::catch_unwind(|| simulate(seed, 6_000));
        if let Err(panic) = result {
            eprintln!("shard simulation failed with seed {seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

fn simulate(seed: u64, steps: usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let clock = ManualClock::new(NOW + rng.u64(..86_400_000));
    let mut state = ShardState::new(rng.usize(..limits::SHARDS_MAX), seed);
    let mut seen: HashMap<MessageId, Seen> = HashMap::new();
    let mut ids: HashSet<MessageId> = HashSet::new();
    let mut receipts: Vec<(usize, MessageId, PopReceipt)> = Vec::new();
    for step in 0..steps {
        let now_ms = clock.now_ms();
        let queue = rng.usize(..QUEUES);
        let queue_key = key(&format!("q{queue}"));
        let command = match rng.u32(..100) {
            0..=2 => Command::CreateQueue {
                queue: queue_key,
                metadata: vec![],
            },
            3 => Command::DeleteQueue { queue: queue_key },
            4 => Command::ClearMessages { queue: queue_key },
            5..=34 => {
                let delay_s = if rng.u32(..4) == 0 { rng.u64(1..10) } else { 0 };
                Command::PutMessage {
                    queue: queue_key,
                    text: Bytes::from(vec![b'x'; rng.usize(..64)]),
                    visibility_timeout_s: delay_s,
                    ttl_s: (rng.u32(..6) != 0).then(|| delay_s + rng.u64(1..300)),
                }
            }
            35..=54 => Command::GetMessages {
                queue: queue_key,
                count: rng.u32(1..=limits::MESSAGES_PER_GET_MAX),
                visibility_timeout_s: rng.u64(1..60),
            },
            55..=64 => Command::PeekMessages {
                queue: queue_key,
                count: rng.u32(1..=limits::MESSAGES_PER_GET_MAX),
            },
            65..=84 if !receipts.is_empty() => {
                let (queue, message_id, mut pop_receipt) = receipts[rng.usize(..receipts.len())];
                // Now and then a forged receipt: any slot, generation and lease.
                if rng.u32(..20) == 0 {
                    pop_receipt = PopReceipt {
                        slot: rng.u32(..64),
                        generation: rng.u32(..3),
                        lease: rng.u32(..3),
                    };
                }
                let queue_key = key(&format!("q{queue}"));
                if rng.bool() {
                    Command::UpdateMessage {
                        queue: queue_key,
                        message_id,
                        pop_receipt,
                        visibility_timeout_s: rng.u64(..60),
                        text: rng.bool().then(|| Bytes::from_static(b"updated")),
                    }
                } else {
                    Command::DeleteMessage {
                        queue: queue_key,
                        message_id,
                        pop_receipt,
                    }
                }
            }
            85..=89 => Command::GetQueueMetadata { queue: queue_key },
            90 => Command::SetQueueAcl {
                queue: queue_key,
                identifiers: identifiers(&["p1", "p2", "p3"][..rng.usize(..=3)]),
            },
            91 => {
                // A service SAS authorized against the current ACL, or against one gone stale.
                let current = state
                    .replicas()
                    .queue_acl(&queue_key)
                    .map(|(version, _)| version);
                let acl_version = match current {
                    Some(version) if rng.bool() => version,
                    _ => rng.u64(..8),
                };
                Command::WithStoredPolicy {
                    acl_version,
                    command: Box::new(Command::PeekMessages {
                        queue: queue_key,
                        count: 1,
                    }),
                }
            }
            _ => {
                clock.advance_ms(match rng.u32(..30) {
                    0 => rng.u64(..7 * 86_400_000),
                    1..=5 => rng.u64(..120_000),
                    _ => rng.u64(..3_000),
                });
                continue;
            }
        };
        let starved = rng.u32(..4) == 0;
        let reply = if starved {
            state.advance(now_ms, rng.usize(..4));
            state.execute(command.clone(), now_ms)
        } else {
            state.apply(command.clone(), now_ms)
        };
        let context = format!("step {step} starved {starved} command {command:?} reply {reply:?}");
        match (&command, &reply) {
            (
                Command::PutMessage {
                    queue: put_queue, ..
                },
                Ok(Reply::Messages(views)),
            ) => {
                let view = &views[0];
                assert!(ids.insert(view.message_id), "duplicate id: {context}");
                seen.insert(
                    view.message_id,
                    Seen {
                        invisible_until_ms: view.time_next_visible_ms,
                        expiration_ms: view.expiration_ms,
                        dequeue_count: 0,
                    },
                );
                let queue = put_queue.name[1..].parse().unwrap();
                receipts.push((queue, view.message_id, receipt(view)));
            }
            (
                Command::GetMessages {
                    queue: get_queue, ..
                },
                Ok(Reply::Messages(views)),
            ) => {
                let queue = get_queue.name[1..].parse().unwrap();
                let mut returned = HashSet::new();
                for view in views {
                    assert!(
                        returned.insert(view.message_id),
                        "returned twice: {context}"
                    );
                    let before = seen[&view.message_id];
                    assert!(
                        before.invisible_until_ms <= now_ms,
                        "returned while invisible: {context}"
                    );
                    assert!(before.expiration_ms > now_ms, "returned expired: {context}");
                    assert_eq!(view.dequeue_count, before.dequeue_count + 1, "{context}");
                    assert_eq!(view.expiration_ms, before.expiration_ms);
                    seen.insert(
                        view.message_id,
                        Seen {
                            invisible_until_ms: view.time_next_visible_ms,
                            dequeue_count: view.dequeue_count,
                            ..before
                        },
                    );
                    receipts.push((queue, view.message_id, receipt(view)));
                }
            }
            (Command::PeekMessages { .. }, Ok(Reply::Messages(views))) => {
                for view in views {
                    let before = seen[&view.message_id];
                    assert!(
                        before.invisible_until_ms <= now_ms,
                        "peeked while invisible: {context}"
                    );
                    assert!(before.expiration_ms > now_ms, "peeked expired: {context}");
                    assert_eq!(view.dequeue_count, before.dequeue_count, "{context}");
                    assert!(view.pop_receipt.is_none());
                }
            }
            (
                Command::UpdateMessage {
                    queue: update_queue,
                    message_id,
                    ..
                },
                Ok(Reply::Updated {
                    pop_receipt,
                    time_next_visible_ms,
                }),
            ) => {
                let before = seen[message_id];
                assert!(before.expiration_ms > now_ms, "updated expired: {context}");
                seen.get_mut(message_id).unwrap().invisible_until_ms = *time_next_visible_ms;
                let queue = update_queue.name[1..].parse().unwrap();
                receipts.push((queue, *message_id, *pop_receipt));
            }
            (Command::DeleteMessage { message_id, .. }, Ok(Reply::Done)) => {
                assert!(
                    seen[message_id].expiration_ms > now_ms,
                    "deleted expired: {context}"
                );
            }
            (_, Err(error)) => assert!(
                matches!(
                    error,
                    StorageError::QueueNotFound
                        | StorageError::MessageNotFound
                        | StorageError::PopReceiptMismatch
                        | StorageError::QueueAlreadyExists
                        | StorageError::AuthenticationFailed
                ),
                "{context}"
            ),
            _ => {}
        }
        if receipts.len() > 500 {
            receipts.drain(..250);
        }
        state.verify();
        // On a single shard every ACL is the owner's: it exists only with its queue.
        for queue in 0..QUEUES {
            let queue_key = key(&format!("q{queue}"));
            if state.replicas().queue_acl(&queue_key).is_some() {
                assert!(state.queue_indices.contains_key(&queue_key), "{context}");
            }
        }
    }
    // Once the clock passes every TTL and the timers run, only never-expiring messages remain.
    clock.advance_ms(30 * 86_400_000);
    while state.advance(clock.now_ms(), limits::TIMER_ENTRIES_PER_STEP_MAX) {}
    state.verify();
    let lasting = state
        .queues
        .iter()
        .flatten()
        .map(|queue| queue.messages_count)
        .sum::<u64>();
    assert_eq!(lasting as usize, state.messages.len());
    assert_eq!(
        state.timers.len(),
        0,
        "only never-expiring visible messages are left"
    );
}
