//! Tests of `ShardState`: a table per command including every error, the lag rules, and a
//! deterministic simulation that checks the invariants after every step. Randomised tests use
//! fixed seeds and print the failing one. The property test against a naive model is in
//! tests/fuzz_replay.rs, which drives the `shard_state` fuzz target's model with seeded input.

use bytes::Bytes;

use super::layout::{message_charge, queue_charge};
use super::*;
use crate::queue::command::{MessageView, QueueListing, EXPIRATION_NEVER_MS};
use crate::queue::key::{MessageId, PopReceipt, QueueKey};
use crate::queue::slab::{Place, NONE};

mod inspect;
mod simulation;

/// A realistic "now": 2023-11-14.
const NOW: u64 = 1_700_000_000_000;
const ACCOUNT: &str = "devstoreaccount1";

fn key(name: &str) -> QueueKey {
    QueueKey {
        account: ACCOUNT.to_string(),
        name: name.to_string(),
    }
}

fn text(value: &str) -> Bytes {
    Bytes::copy_from_slice(value.as_bytes())
}

fn state_with(names: &[&str]) -> ShardState {
    let mut state = ShardState::new(0, 42);
    for name in names {
        create(&mut state, name, vec![]).unwrap();
    }
    state
}

fn create(state: &mut ShardState, name: &str, metadata: Metadata) -> Result<Reply, StorageError> {
    state.apply(
        Command::CreateQueue {
            queue: key(name),
            metadata,
        },
        NOW,
    )
}

fn messages(reply: Result<Reply, StorageError>) -> Vec<MessageView> {
    match reply {
        Ok(Reply::Messages(views)) => views,
        other => panic!("expected messages, got {other:?}"),
    }
}

fn put(
    state: &mut ShardState,
    name: &str,
    body: &str,
    delay_s: u64,
    ttl_s: Option<u64>,
    now_ms: u64,
) -> MessageView {
    let mut views = messages(state.apply(
        Command::PutMessage {
            queue: key(name),
            text: text(body),
            visibility_timeout_s: delay_s,
            ttl_s,
        },
        now_ms,
    ));
    assert_eq!(views.len(), 1);
    views.remove(0)
}

fn get(
    state: &mut ShardState,
    name: &str,
    count: u32,
    visibility_timeout_s: u64,
    now_ms: u64,
) -> Vec<MessageView> {
    messages(state.apply(
        Command::GetMessages {
            queue: key(name),
            count,
            visibility_timeout_s,
        },
        now_ms,
    ))
}

fn peek(state: &mut ShardState, name: &str, count: u32, now_ms: u64) -> Vec<MessageView> {
    messages(state.apply(
        Command::PeekMessages {
            queue: key(name),
            count,
        },
        now_ms,
    ))
}

fn texts(views: &[MessageView]) -> Vec<String> {
    views
        .iter()
        .map(|view| String::from_utf8(view.text.to_vec()).unwrap())
        .collect()
}

fn update(
    state: &mut ShardState,
    name: &str,
    view: &MessageView,
    receipt: PopReceipt,
    visibility_timeout_s: u64,
    body: Option<&str>,
    now_ms: u64,
) -> Result<(PopReceipt, u64), StorageError> {
    match state.apply(
        Command::UpdateMessage {
            queue: key(name),
            message_id: view.message_id,
            pop_receipt: receipt,
            visibility_timeout_s,
            text: body.map(text),
        },
        now_ms,
    )? {
        Reply::Updated {
            pop_receipt,
            time_next_visible_ms,
        } => Ok((pop_receipt, time_next_visible_ms)),
        other => panic!("expected Updated, got {other:?}"),
    }
}

fn delete(
    state: &mut ShardState,
    name: &str,
    message_id: MessageId,
    receipt: PopReceipt,
    now_ms: u64,
) -> Result<(), StorageError> {
    match state.apply(
        Command::DeleteMessage {
            queue: key(name),
            message_id,
            pop_receipt: receipt,
        },
        now_ms,
    )? {
        Reply::Done => Ok(()),
        other => panic!("expected Done, got {other:?}"),
    }
}

fn count(state: &mut ShardState, name: &str, now_ms: u64) -> u64 {
    match state.apply(Command::GetQueueMetadata { queue: key(name) }, now_ms) {
        Ok(Reply::Metadata {
            approximate_messages_count,
            ..
        }) => approximate_messages_count,
        other => panic!("expected metadata, got {other:?}"),
    }
}

fn receipt(view: &MessageView) -> PopReceipt {
    view.pop_receipt.expect("a receipt")
}

impl ShardState {
    /// Checks every invariant by walking the whole state: O(messages). For tests.
    pub(super) fn verify(&self) {
        self.timers.verify();
        self.check_evicted_texts();
        let charged: u64 = self
            .messages
            .occupied_messages()
            .map(|message| message_charge(message.text.len()))
            .sum();
        assert_eq!(
            self.message_bytes, charged,
            "message bytes out of step with the slab"
        );
        let queue_charged: u64 = self
            .queues
            .iter()
            .flatten()
            .map(|queue| queue_charge(&queue.metadata))
            .sum();
        assert_eq!(
            self.queue_bytes, queue_charged,
            "queue bytes out of step with the records"
        );
        let acl_charged: u64 = self
            .replicas
            .entries(false)
            .map(|replica| match replica {
                Replica::QueueAcl {
                    queue,
                    identifiers: Some(identifiers),
                    ..
                } => crate::queue::replicas::acl_charge(&queue, &identifiers),
                _ => 0,
            })
            .sum();
        assert_eq!(
            self.replicas.acl_bytes(),
            acl_charged,
            "ACL bytes out of step with the copies"
        );
        let mut stored = 0;
        let mut timed = 0;
        let mut live_queues = 0;
        let mut graveyards = self.graveyards.clone();
        graveyards.sort_unstable();
        graveyards.dedup();
        assert_eq!(graveyards.len(), self.graveyards.len(), "a graveyard twice");
        assert!(graveyards
            .iter()
            .all(|&index| (index as usize) < self.queues.len()));
        let mut free = self.queues_free.clone();
        free.sort_unstable();
        free.dedup();
        assert_eq!(free.len(), self.queues_free.len(), "a free record twice");
        for (index, queue) in self.queues.iter().enumerate() {
            let Some(queue) = queue else {
                assert!(self.queues_free.contains(&(index as u32)));
                assert!(
                    !self.graveyards.contains(&(index as u32)),
                    "a free graveyard"
                );
                continue;
            };
            assert!(
                !self.queues_free.contains(&(index as u32)),
                "a used record is free"
            );
            // A record is a named queue's or a graveyard, never both. (A graveyard whose last
            // messages expired is empty until the next `advance` frees its record.)
            let graveyard = self.graveyards.contains(&(index as u32));
            assert_ne!(
                graveyard,
                self.queue_names
                    .values()
                    .any(|&named| named as usize == index)
            );
            if !graveyard {
                live_queues += 1;
            }
            let mut in_queue = 0;
            let mut previous = NONE;
            let mut previous_key = None;
            let mut slot = queue.in_order.head;
            while slot != NONE {
                let message = self.messages.get(slot);
                assert_eq!(message.place(), Place::VisibleInOrder);
                assert_eq!(message.queue() as usize, index);
                assert_eq!(message.previous, previous);
                assert!(
                    previous_key < Some(message.order_key()),
                    "in-order list out of order"
                );
                timed += self.verify_visible_timer(slot);
                previous_key = Some(message.order_key());
                previous = slot;
                slot = message.next;
                in_queue += 1;
            }
            assert_eq!(queue.in_order.tail, previous);
            for (&key, &slot) in &queue.out_of_order {
                let message = self.messages.get(slot);
                assert_eq!(message.place(), Place::VisibleOutOfOrder);
                assert_eq!(message.queue() as usize, index);
                assert_eq!(message.order_key(), key);
                timed += self.verify_visible_timer(slot);
                in_queue += 1;
            }
            previous = NONE;
            slot = queue.invisible.head;
            let (mut invisible, mut delayed) = (0, 0);
            while slot != NONE {
                let message = self.messages.get(slot);
                invisible += 1;
                delayed += u64::from(message.dequeue_count == 0);
                assert_eq!(message.place(), Place::Invisible);
                assert_eq!(message.queue() as usize, index);
                assert_eq!(message.previous, previous);
                let deadline_ms = self
                    .timers
                    .deadline_ms(slot)
                    .expect("invisible without timer");
                assert!(deadline_ms <= message.expiration_ms());
                timed += 1;
                previous = slot;
                slot = message.next;
                in_queue += 1;
            }
            assert_eq!(queue.invisible.tail, previous);
            assert_eq!(in_queue, queue.messages_count);
            assert_eq!(
                (invisible, delayed),
                (queue.invisible_count, queue.delayed_count),
                "invisible counts out of step with the list"
            );
            let text_bytes: u64 = self
                .messages
                .occupied_messages()
                .filter(|message| message.queue() as usize == index)
                .map(|message| message.text.len() as u64)
                .sum();
            assert_eq!(text_bytes, queue.text_bytes, "text bytes out of step");
            stored += in_queue;
        }
        assert_eq!(
            stored as usize,
            self.messages.len(),
            "a stored message is in no queue"
        );
        assert_eq!(timed, self.timers.len(), "a timer belongs to no message");
        assert_eq!(self.queue_indices.len(), live_queues);
        assert_eq!(self.queue_names.len(), live_queues);
        for (key, index) in &self.queue_names {
            assert_eq!(self.queue_indices.get(key), Some(index));
            assert!(self.queues[*index as usize].is_some());
        }
    }

    /// A visible message has a timer exactly when it can expire, at its expiry.
    fn verify_visible_timer(&self, slot: u32) -> usize {
        let expiration_ms = self.messages.get(slot).expiration_ms();
        if expiration_ms == EXPIRATION_NEVER_MS {
            assert!(!self.timers.is_scheduled(slot));
            0
        } else {
            assert_eq!(self.timers.deadline_ms(slot), Some(expiration_ms));
            1
        }
    }
}

// ---- Queues ----

#[test]
fn create_queue_table() {
    let mut state = state_with(&[]);
    let metadata = |pairs: &[(&str, &str)]| -> Metadata {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    };
    let original = metadata(&[("alpha", "One"), ("Beta", "two")]);
    assert!(matches!(
        create(&mut state, "q", original.clone()),
        Ok(Reply::QueueCreated)
    ));
    let table: [(Metadata, Result<(), StorageError>); 6] = [
        (original.clone(), Ok(())),
        (metadata(&[("ALPHA", "One"), ("beta", "two")]), Ok(())),
        (
            metadata(&[("alpha", "one"), ("Beta", "two")]),
            Err(StorageError::QueueAlreadyExists),
        ),
        (
            metadata(&[("alpha", "One")]),
            Err(StorageError::QueueAlreadyExists),
        ),
        (vec![], Err(StorageError::QueueAlreadyExists)),
        (
            metadata(&[("alpha", "One"), ("Beta", "two"), ("gamma", "")]),
            Err(StorageError::QueueAlreadyExists),
        ),
    ];
    for (candidate, expected) in table {
        let reply = create(&mut state, "q", candidate.clone());
        match expected {
            Ok(()) => assert!(matches!(reply, Ok(Reply::QueueExists)), "{candidate:?}"),
            Err(error) => assert_eq!(reply.unwrap_err(), error, "{candidate:?}"),
        }
    }
    // The stored metadata is the original, with its spelling.
    match state.apply(Command::GetQueueMetadata { queue: key("q") }, NOW) {
        Ok(Reply::Metadata { metadata, .. }) => assert_eq!(metadata, original),
        other => panic!("{other:?}"),
    }
    // Another account's queue of the same name is another queue.
    let other = QueueKey {
        account: "other".to_string(),
        name: "q".to_string(),
    };
    assert!(matches!(
        state.apply(
            Command::CreateQueue {
                queue: other,
                metadata: vec![]
            },
            NOW
        ),
        Ok(Reply::QueueCreated)
    ));
    state.verify();
}

#[test]
fn create_queue_beyond_limit_is_server_busy() {
    let mut state = state_with(&[]);
    state.queues_max = 2;
    create(&mut state, "a", vec![]).unwrap();
    create(&mut state, "b", vec![]).unwrap();
    assert_eq!(
        create(&mut state, "c", vec![]).unwrap_err(),
        StorageError::ServerBusy
    );
    // An existing queue is still answered as such.
    assert!(matches!(
        create(&mut state, "a", vec![]),
        Ok(Reply::QueueExists)
    ));
    state
        .apply(Command::DeleteQueue { queue: key("a") }, NOW)
        .unwrap();
    assert!(matches!(
        create(&mut state, "c", vec![]),
        Ok(Reply::QueueCreated)
    ));
    state.verify();
}

/// Clear Messages and Delete Queue of a queue larger than one step's budget: the queue reads
/// empty at once, its messages answer nothing, and the graveyard drains over several steps,
/// while timers of its messages (lease ends, expiries) fire in between.
#[test]
fn large_queues_are_cleared_and_deleted_in_bounded_steps() {
    const MESSAGES: usize = 3 * limits::TIMER_ENTRIES_PER_STEP_MAX + 100;
    const BUDGET: usize = limits::TIMER_ENTRIES_PER_STEP_MAX;
    let mut state = state_with(&["big", "other"]);
    let kept = put(&mut state, "other", "kept", 0, Some(600), NOW);
    let fill = |state: &mut ShardState, now_ms: u64| {
        for index in 0..MESSAGES {
            // Mixed TTLs, some delayed: timers at many times.
            let delay_s = (index % 3 == 0) as u64;
            put(
                state,
                "big",
                "x",
                delay_s,
                Some(2 + (index % 5) as u64),
                now_ms,
            );
        }
    };
    for operation in ["clear", "delete"] {
        let now_ms = NOW + 100_000 * u64::from(operation == "delete");
        fill(&mut state, now_ms);
        let leased = get(&mut state, "big", 32, 1, now_ms);
        assert_eq!(leased.len(), 32);
        let command = match operation {
            "clear" => Command::ClearMessages { queue: key("big") },
            _ => Command::DeleteQueue { queue: key("big") },
        };
        assert!(matches!(state.apply(command, now_ms), Ok(Reply::Done)));
        assert_eq!(state.messages.len(), MESSAGES + 1, "nothing freed yet");
        assert_eq!(state.next_deadline_ms(), Some(0));
        state.verify();
        if operation == "delete" {
            create(&mut state, "big", vec![]).unwrap();
        }
        // The queue is empty now, whatever is left to free.
        assert_eq!(count(&mut state, "big", now_ms), 0);
        assert_eq!(peek(&mut state, "big", 32, now_ms + 10_000), vec![]);
        let old = &leased[0];
        assert_eq!(
            delete(&mut state, "big", old.message_id, receipt(old), now_ms).unwrap_err(),
            StorageError::MessageNotFound
        );
        // Drain a step at a time, the clock moving so that leases end and messages expire in
        // the graveyard meanwhile.
        let mut steps = 0;
        let mut at_ms = now_ms;
        while state.advance(at_ms, BUDGET) {
            steps += 1;
            at_ms += 1_500;
            state.verify();
            // Timers of the same messages (cascades, lease ends, expiries) share the budget.
            assert!(
                steps <= 4 * MESSAGES / BUDGET,
                "the graveyard does not drain"
            );
        }
        assert!(steps >= 2, "{operation}: drained in {steps} steps");
        // Only the other queue's message is left to wait for (the wheel may wake earlier).
        let deadline_ms = state.next_deadline_ms().expect("the kept message expires");
        assert!(at_ms < deadline_ms && deadline_ms <= kept.expiration_ms);
        assert_eq!(state.messages.len(), 1);
        assert_eq!(
            state.message_bytes,
            message_charge(Bytes::from_static(b"kept").len())
        );
        assert_eq!(texts(&peek(&mut state, "other", 32, at_ms)), ["kept"]);
        state.verify();
    }
}

/// Queue records are live queues plus graveyards; at the bound a Clear or Create that needs
/// one more answers 503 and changes nothing, and works again once the graveyards are freed.
#[test]
fn queue_records_are_bounded_with_graveyards() {
    let mut state = state_with(&["a", "b"]);
    state.queue_records_max = 3;
    let metadata = vec![("k".to_string(), "v".to_string())];
    state
        .apply(
            Command::SetQueueMetadata {
                queue: key("a"),
                metadata: metadata.clone(),
            },
            NOW,
        )
        .unwrap();
    put(&mut state, "a", "first", 0, Some(60), NOW);
    // The third record: "a" moves to it, its old record waits as a graveyard.
    assert!(matches!(
        state.apply(Command::ClearMessages { queue: key("a") }, NOW),
        Ok(Reply::Done)
    ));
    let kept = put(&mut state, "a", "second", 0, Some(60), NOW);
    for command in [
        Command::ClearMessages { queue: key("a") },
        Command::CreateQueue {
            queue: key("c"),
            metadata: vec![],
        },
    ] {
        assert_eq!(
            state.apply(command, NOW).unwrap_err(),
            StorageError::ServerBusy
        );
        state.verify();
    }
    assert_eq!(texts(&peek(&mut state, "a", 32, NOW)), ["second"]);
    assert!(matches!(
        state.apply(Command::GetQueueMetadata { queue: key("a") }, NOW),
        Ok(Reply::Metadata { metadata: ref kept_metadata, approximate_messages_count: 1 })
            if *kept_metadata == metadata
    ));
    // Once the graveyard is freed, its record serves again.
    assert!(!state.advance(NOW, limits::TIMER_ENTRIES_PER_STEP_MAX));
    assert!(matches!(
        state.apply(Command::ClearMessages { queue: key("a") }, NOW),
        Ok(Reply::Done)
    ));
    assert_eq!(
        delete(&mut state, "a", kept.message_id, receipt(&kept), NOW).unwrap_err(),
        StorageError::MessageNotFound
    );
    state.verify();
}

#[test]
fn delete_queue_frees_every_message() {
    let mut state = state_with(&["q", "other"]);
    let visible = put(&mut state, "q", "visible", 0, Some(60), NOW);
    put(&mut state, "q", "never", 0, None, NOW);
    put(&mut state, "q", "delayed", 30, Some(60), NOW);
    put(&mut state, "q", "leased", 0, Some(60), NOW);
    put(&mut state, "other", "kept", 0, Some(60), NOW);
    // Lease "visible"; then an out-of-order message: lease "never" and let the lease run out
    // behind "leased".
    get(&mut state, "q", 1, 30, NOW);
    let leased = get(&mut state, "q", 1, 1, NOW);
    assert_eq!(texts(&leased), ["never"]);
    peek(&mut state, "q", 1, NOW + 1_000);
    assert!(!state.queue(0).out_of_order.is_empty());
    assert_eq!(state.messages.len(), 5);
    assert!(matches!(
        state.apply(Command::DeleteQueue { queue: key("q") }, NOW + 1_000),
        Ok(Reply::Done)
    ));
    // The messages wait in a graveyard, which the next step empties.
    assert_eq!(state.next_deadline_ms(), Some(0));
    state.verify();
    assert!(!state.advance(NOW + 1_000, limits::TIMER_ENTRIES_PER_STEP_MAX));
    assert_eq!(state.messages.len(), 1);
    assert_eq!(state.timers.len(), 1);
    assert_eq!(
        state.message_bytes,
        message_charge(Bytes::from_static(b"kept").len())
    );
    state.verify();
    assert_eq!(
        state
            .apply(Command::DeleteQueue { queue: key("q") }, NOW)
            .unwrap_err(),
        StorageError::QueueNotFound
    );
    // A new queue of the same name starts empty and old receipts name nothing in it.
    create(&mut state, "q", vec![]).unwrap();
    assert_eq!(count(&mut state, "q", NOW + 1_000), 0);
    assert_eq!(peek(&mut state, "q", 32, NOW + 100_000), vec![]);
    assert_eq!(
        delete(
            &mut state,
            "q",
            visible.message_id,
            receipt(&visible),
            NOW + 1_000
        )
        .unwrap_err(),
        StorageError::MessageNotFound
    );
    state.verify();
}

#[test]
fn queue_metadata_table() {
    let mut state = state_with(&["q"]);
    let metadata = vec![("key".to_string(), "value".to_string())];
    assert!(matches!(
        state.apply(
            Command::SetQueueMetadata {
                queue: key("q"),
                metadata: metadata.clone()
            },
            NOW
        ),
        Ok(Reply::Done)
    ));
    put(&mut state, "q", "a", 0, Some(10), NOW);
    put(&mut state, "q", "b", 5, Some(10), NOW);
    match state.apply(Command::GetQueueMetadata { queue: key("q") }, NOW) {
        Ok(Reply::Metadata {
            metadata: stored,
            approximate_messages_count,
        }) => {
            assert_eq!(stored, metadata);
            assert_eq!(approximate_messages_count, 2);
        }
        other => panic!("{other:?}"),
    }
    // Set replaces everything.
    state
        .apply(
            Command::SetQueueMetadata {
                queue: key("q"),
                metadata: vec![],
            },
            NOW,
        )
        .unwrap();
    match state.apply(Command::GetQueueMetadata { queue: key("q") }, NOW) {
        Ok(Reply::Metadata { metadata, .. }) => assert!(metadata.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        count(&mut state, "q", NOW + 10_000),
        0,
        "expired messages are not counted"
    );
    for command in [
        Command::GetQueueMetadata {
            queue: key("missing"),
        },
        Command::SetQueueMetadata {
            queue: key("missing"),
            metadata: vec![],
        },
    ] {
        assert_eq!(
            state.apply(command, NOW).unwrap_err(),
            StorageError::QueueNotFound
        );
    }
}

#[test]
fn list_queues_table() {
    let mut state = state_with(&["alpha", "beta", "beta-1", "beta-2", "gamma"]);
    state
        .apply(
            Command::SetQueueMetadata {
                queue: key("beta"),
                metadata: vec![("k".into(), "v".into())],
            },
            NOW,
        )
        .unwrap();
    state
        .apply(
            Command::CreateQueue {
                queue: QueueKey {
                    account: "other".into(),
                    name: "alpha".into(),
                },
                metadata: vec![],
            },
            NOW,
        )
        .unwrap();
    let list =
        |state: &mut ShardState, prefix: &str, marker: &str, results_max: usize| -> Vec<String> {
            match state.apply(
                Command::ListQueues {
                    account: ACCOUNT.to_string(),
                    prefix: prefix.to_string(),
                    marker: marker.to_string(),
                    results_max,
                    include_metadata: false,
                },
                NOW,
            ) {
                Ok(Reply::Queues(listings)) => {
                    assert!(listings.iter().all(|listing| listing.metadata.is_none()));
                    listings.into_iter().map(|listing| listing.name).collect()
                }
                other => panic!("{other:?}"),
            }
        };
    let table: [(&str, &str, usize, &[&str]); 11] = [
        (
            "",
            "",
            5000,
            &["alpha", "beta", "beta-1", "beta-2", "gamma"],
        ),
        ("", "", 2, &["alpha", "beta", "beta-1"]),
        ("", "", 0, &["alpha"]),
        ("beta", "", 5000, &["beta", "beta-1", "beta-2"]),
        ("beta", "", 1, &["beta", "beta-1"]),
        ("beta", "beta-1", 5000, &["beta-1", "beta-2"]),
        ("beta", "beta-0", 5000, &["beta-1", "beta-2"]),
        ("beta", "a", 5000, &["beta", "beta-1", "beta-2"]),
        ("beta", "c", 5000, &[]),
        ("", "beta-2", 1, &["beta-2", "gamma"]),
        ("delta", "", 5000, &[]),
    ];
    for (prefix, marker, results_max, expected) in table {
        assert_eq!(
            list(&mut state, prefix, marker, results_max),
            expected,
            "{prefix:?} {marker:?} {results_max}"
        );
    }
    match state.apply(
        Command::ListQueues {
            account: "other".to_string(),
            prefix: String::new(),
            marker: String::new(),
            results_max: 10,
            include_metadata: true,
        },
        NOW,
    ) {
        Ok(Reply::Queues(listings)) => assert_eq!(
            listings,
            vec![QueueListing {
                name: "alpha".into(),
                metadata: Some(vec![])
            }]
        ),
        other => panic!("{other:?}"),
    }
    match state.apply(
        Command::ListQueues {
            account: ACCOUNT.to_string(),
            prefix: "beta".to_string(),
            marker: String::new(),
            results_max: 0,
            include_metadata: true,
        },
        NOW,
    ) {
        Ok(Reply::Queues(listings)) => {
            assert_eq!(listings[0].metadata, Some(vec![("k".into(), "v".into())]))
        }
        other => panic!("{other:?}"),
    }
    match state.apply(
        Command::ListQueues {
            account: "nobody".to_string(),
            prefix: String::new(),
            marker: String::new(),
            results_max: 10,
            include_metadata: false,
        },
        NOW,
    ) {
        Ok(Reply::Queues(listings)) => assert!(listings.is_empty()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn message_commands_on_missing_queue_are_queue_not_found() {
    let mut state = state_with(&["q"]);
    let view = put(&mut state, "q", "a", 0, Some(60), NOW);
    let commands = [
        Command::PutMessage {
            queue: key("missing"),
            text: text("x"),
            visibility_timeout_s: 0,
            ttl_s: None,
        },
        Command::GetMessages {
            queue: key("missing"),
            count: 1,
            visibility_timeout_s: 30,
        },
        Command::PeekMessages {
            queue: key("missing"),
            count: 1,
        },
        Command::UpdateMessage {
            queue: key("missing"),
            message_id: view.message_id,
            pop_receipt: receipt(&view),
            visibility_timeout_s: 0,
            text: None,
        },
        Command::DeleteMessage {
            queue: key("missing"),
            message_id: view.message_id,
            pop_receipt: receipt(&view),
        },
        Command::ClearMessages {
            queue: key("missing"),
        },
        Command::DeleteQueue {
            queue: key("missing"),
        },
    ];
    for command in commands {
        assert_eq!(
            state.apply(command.clone(), NOW).unwrap_err(),
            StorageError::QueueNotFound,
            "{command:?}"
        );
    }
    assert_eq!(state.messages.len(), 1);
    state.verify();
}

// ---- Put, Get, Peek ----

#[test]
fn put_returns_the_stored_message() {
    let mut state = state_with(&["q"]);
    let view = put(&mut state, "q", "hello", 0, Some(60), NOW);
    assert_eq!(view.insertion_ms, NOW);
    assert_eq!(view.expiration_ms, NOW + 60_000);
    assert_eq!(view.time_next_visible_ms, NOW);
    assert_eq!(view.dequeue_count, 0);
    // The Put response lists no text, so the reply does not share it.
    assert!(view.text.is_empty());
    assert_eq!(receipt(&view).lease, 0);
    let peeked = peek(&mut state, "q", 1, NOW);
    assert_eq!(peeked[0].text, text("hello"));
    let delayed = put(&mut state, "q", "later", 10, None, NOW);
    assert_eq!(delayed.time_next_visible_ms, NOW + 10_000);
    assert_eq!(delayed.expiration_ms, EXPIRATION_NEVER_MS);
    // A TTL past year 9999, or too long for the slot, is "never".
    for ttl_s in [
        (EXPIRATION_NEVER_MS - NOW) / 1000,
        u64::from(u32::MAX),
        u64::MAX,
    ] {
        assert_eq!(
            put(&mut state, "q", "x", 0, Some(ttl_s), NOW).expiration_ms,
            EXPIRATION_NEVER_MS
        );
    }
    let long = (EXPIRATION_NEVER_MS - NOW) / 1000 - 1;
    let long = long.min(u64::from(u32::MAX) - 1);
    assert_eq!(
        put(&mut state, "q", "x", 0, Some(long), NOW).expiration_ms,
        NOW + long * 1000
    );
    state.verify();
}

#[test]
fn message_ids_are_unique_uuids_and_differ_between_shards() {
    let mut ids = std::collections::HashSet::new();
    for shard_index in [0, 1, 255] {
        let mut state = ShardState::new(shard_index, 7);
        create(&mut state, "q", vec![]).unwrap();
        for _ in 0..500 {
            let id = put(&mut state, "q", "x", 0, Some(60), NOW).message_id;
            assert!(ids.insert(id), "duplicate id {id}");
            let text = id.to_string();
            assert_eq!(&text[14..15], "4", "version 4: {text}");
            assert!(
                matches!(&text[19..20], "8" | "9" | "a" | "b"),
                "variant: {text}"
            );
            assert_eq!(MessageId::parse(&text), Some(id));
        }
    }
    // Another seed gives other IDs.
    let mut state = ShardState::new(0, 8);
    create(&mut state, "q", vec![]).unwrap();
    assert!(!ids.contains(&put(&mut state, "q", "x", 0, Some(60), NOW).message_id));
}

#[test]
fn get_leases_in_order_and_lease_runs_out() {
    let mut state = state_with(&["q"]);
    for body in ["a", "b", "c"] {
        put(&mut state, "q", body, 0, Some(3600), NOW);
    }
    let first = get(&mut state, "q", 1, 10, NOW);
    assert_eq!(texts(&first), ["a"]);
    assert_eq!(first[0].dequeue_count, 1);
    assert_eq!(first[0].time_next_visible_ms, NOW + 10_000);
    assert_eq!(receipt(&first[0]).lease, 1);
    // Leased: not visible to Get or Peek until the lease ends.
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 9_999)), ["b", "c"]);
    // At the lease's end it is back in its original place, first.
    assert_eq!(
        texts(&peek(&mut state, "q", 32, NOW + 10_000)),
        ["a", "b", "c"]
    );
    let again = get(&mut state, "q", 32, 10, NOW + 10_000);
    assert_eq!(texts(&again), ["a", "b", "c"]);
    assert_eq!(
        again
            .iter()
            .map(|view| view.dequeue_count)
            .collect::<Vec<_>>(),
        [2, 1, 1]
    );
    assert_eq!(get(&mut state, "q", 32, 10, NOW + 10_000), vec![]);
    state.verify();
}

#[test]
fn reappearing_message_goes_before_newer_messages() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 0, None, NOW);
    put(&mut state, "q", "b", 0, None, NOW);
    assert_eq!(texts(&get(&mut state, "q", 1, 5, NOW)), ["a"]);
    put(&mut state, "q", "c", 0, None, NOW + 1_000);
    assert_eq!(texts(&get(&mut state, "q", 1, 1, NOW + 1_000)), ["b"]);
    put(&mut state, "q", "d", 0, None, NOW + 6_000);
    // a and b reappear behind the in-order tail: both in the out-of-order map.
    assert_eq!(
        texts(&peek(&mut state, "q", 32, NOW + 6_000)),
        ["a", "b", "c", "d"]
    );
    assert_eq!(state.queue(0).out_of_order.len(), 2);
    state.verify();
    assert_eq!(
        texts(&get(&mut state, "q", 3, 5, NOW + 6_000)),
        ["a", "b", "c"]
    );
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 6_000)), ["d"]);
    state.verify();
}

#[test]
fn delayed_put_becomes_visible_at_its_time_in_key_order() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "late", 5, Some(60), NOW);
    put(&mut state, "q", "now", 0, Some(60), NOW + 1_000);
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 4_999)), ["now"]);
    put(&mut state, "q", "after", 0, Some(60), NOW + 6_000);
    // Order key of "late" is NOW + 5 s: after "now", before "after".
    assert_eq!(
        texts(&peek(&mut state, "q", 32, NOW + 6_000)),
        ["now", "late", "after"]
    );
    let views = get(&mut state, "q", 32, 30, NOW + 6_000);
    assert_eq!(texts(&views), ["now", "late", "after"]);
    assert!(views.iter().all(|view| view.dequeue_count == 1));
    state.verify();
}

#[test]
fn same_millisecond_puts_keep_insertion_order() {
    let mut state = state_with(&["q"]);
    let bodies: Vec<String> = (0..40).map(|index| format!("m{index}")).collect();
    for body in &bodies {
        put(&mut state, "q", body, 0, Some(60), NOW);
    }
    let peeked = peek(&mut state, "q", 32, NOW);
    assert_eq!(peeked.len(), 32);
    let got: Vec<MessageView> = (0..5)
        .flat_map(|_| get(&mut state, "q", 8, 30, NOW))
        .collect();
    assert_eq!(got.len(), 40);
    for (view, body) in got.iter().zip(&bodies) {
        assert_eq!(view.text, text(body));
    }
    for (view, got) in peeked.iter().zip(&got) {
        assert_eq!(view.message_id, got.message_id);
    }
}

#[test]
fn peek_changes_nothing() {
    let mut state = state_with(&["q"]);
    let put_view = put(&mut state, "q", "a", 0, Some(60), NOW);
    for _ in 0..3 {
        let views = peek(&mut state, "q", 32, NOW + 1);
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].message_id, put_view.message_id);
        assert_eq!(views[0].dequeue_count, 0);
        assert_eq!(views[0].pop_receipt, None);
        assert_eq!(views[0].time_next_visible_ms, NOW + 1);
        assert_eq!(views[0].insertion_ms, NOW);
        assert_eq!(views[0].expiration_ms, NOW + 60_000);
    }
    // The put's receipt is still the current one.
    delete(
        &mut state,
        "q",
        put_view.message_id,
        receipt(&put_view),
        NOW + 2,
    )
    .unwrap();
    assert_eq!(peek(&mut state, "q", 32, NOW + 2), vec![]);
}

#[test]
fn get_visibility_may_exceed_expiry() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 0, Some(10), NOW);
    let views = get(&mut state, "q", 1, 60, NOW);
    assert_eq!(views[0].time_next_visible_ms, NOW + 60_000);
    assert_eq!(views[0].expiration_ms, NOW + 10_000);
    // The message expires while invisible and is freed by its timer alone.
    assert!(!state.advance(NOW + 10_000, usize::MAX));
    assert!(state.messages.is_empty());
    assert!(state.timers.is_empty());
    assert_eq!(state.next_deadline_ms(), None);
}

#[test]
fn expired_messages_are_freed_without_requests() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 0, Some(5), NOW);
    put(&mut state, "q", "b", 0, Some(10), NOW);
    put(&mut state, "q", "never", 0, None, NOW);
    assert_eq!(state.messages.len(), 3);
    let deadline = state.next_deadline_ms().unwrap();
    assert!(deadline <= NOW + 5_000);
    // A runtime loop: sleep until the deadline, advance, repeat.
    let mut now_ms = deadline;
    while state.messages.len() > 1 {
        assert!(!state.advance(now_ms, usize::MAX));
        match state.next_deadline_ms() {
            Some(next) => {
                assert!(next > now_ms);
                now_ms = next;
            }
            None => break,
        }
    }
    assert_eq!(now_ms, NOW + 10_000);
    assert_eq!(state.messages.len(), 1);
    assert_eq!(
        state.next_deadline_ms(),
        None,
        "a never-expiring visible message has no timer"
    );
    assert_eq!(texts(&peek(&mut state, "q", 32, now_ms)), ["never"]);
    state.verify();
}

#[test]
fn expiry_is_exact_to_the_millisecond() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 0, Some(1), NOW);
    assert_eq!(peek(&mut state, "q", 1, NOW + 999).len(), 1);
    assert_eq!(count(&mut state, "q", NOW + 999), 1);
    assert_eq!(peek(&mut state, "q", 1, NOW + 1_000), vec![]);
    assert_eq!(count(&mut state, "q", NOW + 1_000), 0);
}

// ---- Update ----

#[test]
fn update_message_table() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "first", 0, Some(3600), NOW);
    put(&mut state, "q", "second", 0, Some(3600), NOW);
    let leased = get(&mut state, "q", 1, 30, NOW).remove(0);
    let old = receipt(&leased);
    let (new, time_next_visible_ms) = update(
        &mut state,
        "q",
        &leased,
        old,
        60,
        Some("changed"),
        NOW + 1_000,
    )
    .unwrap();
    assert_eq!(time_next_visible_ms, NOW + 61_000);
    assert_ne!(new, old);
    assert_eq!((new.slot, new.generation), (old.slot, old.generation));
    // The old receipt is stale; the new one works.
    assert_eq!(
        update(&mut state, "q", &leased, old, 0, None, NOW + 1_000).unwrap_err(),
        StorageError::PopReceiptMismatch
    );
    assert_eq!(
        delete(&mut state, "q", leased.message_id, old, NOW + 1_000).unwrap_err(),
        StorageError::PopReceiptMismatch
    );
    // Invisible for the new timeout, not the old one.
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 31_000)), ["second"]);
    assert_eq!(
        texts(&peek(&mut state, "q", 32, NOW + 61_000)),
        ["changed", "second"]
    );
    // Visible again: the receipt stays valid until another Get; timeout 0 keeps it visible.
    let (newer, time_next_visible_ms) =
        update(&mut state, "q", &leased, new, 0, None, NOW + 62_000).unwrap();
    assert_eq!(time_next_visible_ms, NOW + 62_000);
    assert_eq!(
        texts(&peek(&mut state, "q", 32, NOW + 62_000)),
        ["changed", "second"]
    );
    // Update without text keeps the text, and does not count as a dequeue.
    let again = get(&mut state, "q", 1, 30, NOW + 62_000).remove(0);
    assert_eq!(again.text, text("changed"));
    assert_eq!(again.dequeue_count, 2);
    assert_eq!(
        update(&mut state, "q", &leased, newer, 0, None, NOW + 62_000).unwrap_err(),
        StorageError::PopReceiptMismatch
    );
    // Timeout 0 on a leased message makes it visible now, in its original place.
    update(
        &mut state,
        "q",
        &again,
        receipt(&again),
        0,
        None,
        NOW + 63_000,
    )
    .unwrap();
    assert_eq!(
        texts(&peek(&mut state, "q", 32, NOW + 63_000)),
        ["changed", "second"]
    );
    state.verify();
}

#[test]
fn update_with_put_receipt_hides_a_visible_message() {
    let mut state = state_with(&["q"]);
    let view = put(&mut state, "q", "a", 0, Some(3600), NOW);
    let (new, _) = update(&mut state, "q", &view, receipt(&view), 10, None, NOW).unwrap();
    assert_eq!(new.lease, 1);
    assert_eq!(peek(&mut state, "q", 32, NOW + 9_999), vec![]);
    assert_eq!(peek(&mut state, "q", 32, NOW + 10_000)[0].dequeue_count, 0);
    state.verify();
}

/// Every shard of a server shares its secret, so a receipt one shard issued has a valid tag on
/// another; where its slot and generation name a message of the other shard, that message must
/// still not be reachable with it (regression: the tag alone once stood for the ID check).
#[test]
fn another_shards_receipt_reaches_nothing_here() {
    let secret = crate::queue::Secret::from_seed(9);
    let mut mine = ShardState::with_secret(0, 1, secret);
    let mut theirs = ShardState::with_secret(1, 2, secret);
    create(&mut mine, "q", vec![]).unwrap();
    create(&mut theirs, "q", vec![]).unwrap();
    put(&mut mine, "q", "mine", 0, Some(3600), NOW);
    put(&mut theirs, "q", "theirs", 0, Some(3600), NOW);
    let held = get(&mut mine, "q", 1, 60, NOW).remove(0);
    let other = get(&mut theirs, "q", 1, 60, NOW).remove(0);
    let (held_receipt, other_receipt) = (receipt(&held), receipt(&other));
    assert_eq!(
        (
            held_receipt.slot,
            held_receipt.generation,
            held_receipt.lease
        ),
        (
            other_receipt.slot,
            other_receipt.generation,
            other_receipt.lease
        )
    );
    assert_eq!(
        delete(&mut theirs, "q", held.message_id, held_receipt, NOW).unwrap_err(),
        StorageError::MessageNotFound
    );
    delete(&mut theirs, "q", other.message_id, other_receipt, NOW).unwrap();
    delete(&mut mine, "q", held.message_id, held_receipt, NOW).unwrap();
}

/// Queue records and their metadata count against the same limit as messages: queues with
/// 8 KiB of metadata fill it and get 503 `ServerBusy` (before, 20,000 of them added 212 MB
/// without one), as does metadata that grows or a put past it; freeing a queue makes room.
#[test]
fn queues_and_metadata_fill_the_memory_limit() {
    let mut state = ShardState::new(0, 5);
    let big = |index: usize| vec![(format!("m{index}"), "x".repeat(8 * 1024))];
    let per_queue = queue_charge(&big(0));
    state.set_message_bytes_max(per_queue * 10 + 100);
    for index in 0..10 {
        create(&mut state, &format!("q{index}"), big(0)).unwrap();
    }
    assert_eq!(
        create(&mut state, "one-more", big(0)).unwrap_err(),
        StorageError::ServerBusy
    );
    assert_eq!(
        state
            .apply(
                Command::SetQueueMetadata {
                    queue: key("q0"),
                    metadata: vec![("m".to_string(), "y".repeat(8 * 1024 + 200))],
                },
                NOW
            )
            .unwrap_err(),
        StorageError::ServerBusy
    );
    let refused = state.apply(
        Command::PutMessage {
            queue: key("q0"),
            text: Bytes::from(vec![b'p'; 1024]),
            visibility_timeout_s: 0,
            ttl_s: None,
        },
        NOW,
    );
    assert_eq!(refused.unwrap_err(), StorageError::ServerBusy);
    // Shrinking metadata always fits; deleting a queue frees its charge.
    state
        .apply(
            Command::SetQueueMetadata {
                queue: key("q0"),
                metadata: vec![],
            },
            NOW,
        )
        .unwrap();
    state
        .apply(Command::DeleteQueue { queue: key("q1") }, NOW)
        .unwrap();
    create(&mut state, "one-more", big(0)).unwrap();
    // The three refusals above were the memory limit's, none the disk's.
    assert_eq!(state.refusals(), Refusals { memory: 3, disk: 0 });
    state.verify();
}

/// With the disk full (`set_disk_full`, the runtime's verdict from `storage::space`), every
/// operation that grows stored data answers 503 `ServerBusy`, writes no record and changes
/// nothing, whatever the memory limit says; reads and the operations that free space run; and
/// once the flag is cleared the same operations succeed again.
#[test]
fn a_full_disk_refuses_growth_and_serves_the_rest() {
    let mut state = state_with(&["q"]);
    state.start_journal(0);
    put(&mut state, "q", "kept", 0, None, NOW);
    let leased = get(&mut state, "q", 1, 30, NOW).remove(0);
    let leased_receipt = receipt(&leased);
    let freed = put(&mut state, "q", "freed", 0, None, NOW);
    state.set_disk_full(true);
    let journal_before = state.journal_next_sequence();
    let stored_before = state.stored_bytes();
    let refused: Vec<(&str, Result<Reply, StorageError>)> = vec![
        (
            "put",
            state.apply(
                Command::PutMessage {
                    queue: key("q"),
                    text: text("more"),
                    visibility_timeout_s: 0,
                    ttl_s: None,
                },
                NOW,
            ),
        ),
        ("create", create(&mut state, "new", vec![])),
        (
            "metadata (even shrinking)",
            state.apply(
                Command::SetQueueMetadata {
                    queue: key("q"),
                    metadata: vec![],
                },
                NOW,
            ),
        ),
        ("acl", set_acl(&mut state, "q", &[])),
        (
            "service properties",
            state.apply(
                Command::SetServiceProperties {
                    account: ACCOUNT.to_string(),
                    update: Box::default(),
                },
                NOW,
            ),
        ),
    ];
    for (what, outcome) in refused {
        assert!(matches!(outcome, Err(StorageError::ServerBusy)), "{what}");
    }
    // An Update with a text is refused (even a shorter one); without a text it runs.
    assert_eq!(
        update(&mut state, "q", &leased, leased_receipt, 0, Some("k"), NOW),
        Err(StorageError::ServerBusy)
    );
    assert_eq!(state.refusals(), Refusals { memory: 0, disk: 6 });
    assert_eq!(state.journal_next_sequence(), journal_before);
    assert_eq!(state.stored_bytes(), stored_before);
    let (leased_receipt, _) =
        update(&mut state, "q", &leased, leased_receipt, 30, None, NOW).unwrap();
    // Reads, a create of a queue that exists alike, deletes and clears run.
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW)), vec!["freed"]);
    assert!(matches!(
        create(&mut state, "q", vec![]),
        Ok(Reply::QueueExists)
    ));
    let got = get(&mut state, "q", 1, 30, NOW).remove(0);
    assert_eq!(got.message_id, freed.message_id);
    delete(&mut state, "q", got.message_id, receipt(&got), NOW).unwrap();
    delete(&mut state, "q", leased.message_id, leased_receipt, NOW).unwrap();
    state
        .apply(Command::ClearMessages { queue: key("q") }, NOW)
        .unwrap();
    state
        .apply(Command::DeleteQueue { queue: key("q") }, NOW)
        .unwrap();
    // Space came back: the same operations succeed.
    state.set_disk_full(false);
    create(&mut state, "q", vec![]).unwrap();
    put(&mut state, "q", "more", 0, None, NOW);
    assert_eq!(state.refusals().disk, 6);
    state.verify();
}

#[test]
fn receipt_errors_table() {
    let mut state = state_with(&["q", "other"]);
    let a = put(&mut state, "q", "a", 0, Some(3600), NOW);
    let b = put(&mut state, "q", "b", 0, Some(3600), NOW);
    let b_receipt = receipt(&b);
    let elsewhere = put(&mut state, "other", "c", 0, Some(3600), NOW);
    let short = put(&mut state, "q", "short", 0, Some(1), NOW);
    let deleted = put(&mut state, "q", "deleted", 0, Some(3600), NOW);
    delete(&mut state, "q", deleted.message_id, receipt(&deleted), NOW).unwrap();
    let a_receipt = receipt(&a);
    // An update makes a new lease: the put's receipt is stale from then on.
    let a_current = match state.apply(
        Command::UpdateMessage {
            queue: key("q"),
            message_id: a.message_id,
            pop_receipt: a_receipt,
            visibility_timeout_s: 0,
            text: None,
        },
        NOW,
    ) {
        Ok(Reply::Updated { pop_receipt, .. }) => pop_receipt,
        other => panic!("expected an update, got {other:?}"),
    };
    let cases: [(&str, &str, MessageId, PopReceipt, StorageError); 12] = [
        (
            "another message's id",
            "q",
            b.message_id,
            a_receipt,
            StorageError::MessageNotFound,
        ),
        (
            "receipt of another queue's message",
            "q",
            elsewhere.message_id,
            receipt(&elsewhere),
            StorageError::MessageNotFound,
        ),
        (
            "right message, wrong queue",
            "other",
            a.message_id,
            a_receipt,
            StorageError::MessageNotFound,
        ),
        (
            "deleted message",
            "q",
            deleted.message_id,
            receipt(&deleted),
            StorageError::MessageNotFound,
        ),
        (
            "expired message",
            "q",
            short.message_id,
            receipt(&short),
            StorageError::MessageNotFound,
        ),
        (
            "slot out of range",
            "q",
            a.message_id,
            PopReceipt {
                slot: 1_000_000,
                ..a_receipt
            },
            StorageError::MessageNotFound,
        ),
        (
            "free slot",
            "q",
            a.message_id,
            PopReceipt {
                slot: u32::MAX,
                ..a_receipt
            },
            StorageError::MessageNotFound,
        ),
        (
            "wrong generation",
            "q",
            a.message_id,
            PopReceipt {
                generation: a_receipt.generation + 1,
                ..a_receipt
            },
            StorageError::MessageNotFound,
        ),
        (
            "stale lease",
            "q",
            a.message_id,
            a_receipt,
            StorageError::PopReceiptMismatch,
        ),
        // Altered or made-up receipts: refused whatever their slot says, with the answer a
        // receipt for no message gets, so guessing learns nothing of where messages are.
        (
            "the next lease, guessed",
            "q",
            a.message_id,
            PopReceipt {
                lease: a_current.lease + 1,
                ..a_current
            },
            StorageError::MessageNotFound,
        ),
        (
            "a made-up tag",
            "q",
            a.message_id,
            PopReceipt {
                tag: a_current.tag ^ 1,
                ..a_current
            },
            StorageError::MessageNotFound,
        ),
        (
            "the current lease of another message, by its ID",
            "q",
            a.message_id,
            PopReceipt {
                slot: b_receipt.slot,
                generation: b_receipt.generation,
                ..a_current
            },
            StorageError::MessageNotFound,
        ),
    ];
    for (case, queue, message_id, pop_receipt, error) in cases {
        assert_eq!(
            delete(&mut state, queue, message_id, pop_receipt, NOW + 1_000).unwrap_err(),
            error,
            "delete: {case}"
        );
        let update_reply = state.apply(
            Command::UpdateMessage {
                queue: key(queue),
                message_id,
                pop_receipt,
                visibility_timeout_s: 0,
                text: None,
            },
            NOW + 1_000,
        );
        assert_eq!(update_reply.unwrap_err(), error, "update: {case}");
    }
    // None of that changed anything.
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 1_000)), ["a", "b"]);
    delete(&mut state, "q", a.message_id, a_current, NOW + 1_000).unwrap();
    delete(&mut state, "q", b.message_id, b_receipt, NOW + 1_000).unwrap();
    state.verify();
}

// ---- Delete and Clear ----

#[test]
fn delete_message_table() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 0, Some(3600), NOW);
    let leased = get(&mut state, "q", 1, 10, NOW).remove(0);
    // The lease has run out and nobody took another: the receipt still deletes.
    assert_eq!(peek(&mut state, "q", 1, NOW + 20_000).len(), 1);
    delete(
        &mut state,
        "q",
        leased.message_id,
        receipt(&leased),
        NOW + 20_000,
    )
    .unwrap();
    assert_eq!(
        delete(
            &mut state,
            "q",
            leased.message_id,
            receipt(&leased),
            NOW + 20_000
        )
        .unwrap_err(),
        StorageError::MessageNotFound
    );
    assert_eq!(count(&mut state, "q", NOW + 20_000), 0);
    // A receipt superseded by a later Get is stale even after that lease runs out too.
    put(&mut state, "q", "b", 0, Some(3600), NOW + 20_000);
    let first = get(&mut state, "q", 1, 10, NOW + 20_000).remove(0);
    let second = get(&mut state, "q", 1, 10, NOW + 30_000).remove(0);
    assert_eq!(second.message_id, first.message_id);
    assert_eq!(
        delete(
            &mut state,
            "q",
            first.message_id,
            receipt(&first),
            NOW + 50_000
        )
        .unwrap_err(),
        StorageError::PopReceiptMismatch
    );
    delete(
        &mut state,
        "q",
        second.message_id,
        receipt(&second),
        NOW + 50_000,
    )
    .unwrap();
    assert!(state.messages.is_empty() && state.timers.is_empty());
    state.verify();
}

#[test]
fn clear_messages_frees_everything_in_the_queue() {
    let mut state = state_with(&["q", "other"]);
    let kept = put(&mut state, "other", "kept", 0, Some(3600), NOW);
    let visible = put(&mut state, "q", "a", 0, Some(60), NOW);
    put(&mut state, "q", "b", 10, Some(60), NOW);
    put(&mut state, "q", "c", 0, None, NOW);
    let leased = get(&mut state, "q", 1, 30, NOW);
    assert!(matches!(
        state.apply(Command::ClearMessages { queue: key("q") }, NOW),
        Ok(Reply::Done)
    ));
    assert_eq!(count(&mut state, "q", NOW), 0);
    assert_eq!(peek(&mut state, "q", 32, NOW + 20_000), vec![]);
    // Requests leave the graveyard to the runtime's background step.
    assert_eq!(state.messages.len(), 4);
    assert!(!state.advance(NOW, limits::TIMER_ENTRIES_PER_STEP_MAX));
    assert_eq!(state.messages.len(), 1);
    for view in [&visible, &leased[0]] {
        assert_eq!(
            delete(
                &mut state,
                "q",
                view.message_id,
                receipt(view),
                NOW + 20_000
            )
            .unwrap_err(),
            StorageError::MessageNotFound
        );
    }
    // Clearing an empty queue is fine; the queue still works.
    state
        .apply(Command::ClearMessages { queue: key("q") }, NOW + 20_000)
        .unwrap();
    put(&mut state, "q", "d", 0, Some(60), NOW + 20_000);
    assert_eq!(count(&mut state, "q", NOW + 20_000), 1);
    delete(
        &mut state,
        "other",
        kept.message_id,
        receipt(&kept),
        NOW + 20_000,
    )
    .unwrap();
    state.verify();
}

// ---- Timer lag ----

#[test]
fn lagging_timers_never_return_expired_or_early_messages() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "expires", 0, Some(5), NOW);
    put(&mut state, "q", "stays", 0, Some(3600), NOW);
    put(&mut state, "q", "leased", 0, Some(3600), NOW);
    let leased = state
        .execute(
            Command::GetMessages {
                queue: key("q"),
                count: 1,
                visibility_timeout_s: 10,
            },
            NOW,
        )
        .unwrap();
    assert_eq!(texts(&messages(Ok(leased))), ["expires"]);
    // Commands executed with no timer run at all (an arbitrarily lagging wheel).
    let later = NOW + 20_000;
    let peeked = messages(state.execute(
        Command::PeekMessages {
            queue: key("q"),
            count: 32,
        },
        later,
    ));
    assert_eq!(texts(&peeked), ["stays", "leased"]);
    let count_reply = state.execute(Command::GetQueueMetadata { queue: key("q") }, later);
    assert!(
        matches!(
            count_reply,
            Ok(Reply::Metadata {
                approximate_messages_count: 3,
                ..
            })
        ),
        "{count_reply:?}"
    );
    // "expires" was leased, so its timer (at expiry) must free it; until then it is counted but
    // never returned. A lease-ended message is returned only once its timer has run.
    let got = messages(state.execute(
        Command::GetMessages {
            queue: key("q"),
            count: 32,
            visibility_timeout_s: 1,
        },
        later,
    ));
    assert_eq!(texts(&got), ["stays", "leased"]);
    let peek_expired = messages(state.execute(
        Command::PeekMessages {
            queue: key("q"),
            count: 32,
        },
        later + 1_000,
    ));
    assert_eq!(
        peek_expired,
        vec![],
        "lease-ended messages wait for their timer"
    );
    assert!(
        state.advance(later + 1_000, 1),
        "one entry per step leaves work"
    );
    while state.advance(later + 1_000, 1) {}
    state.verify();
    assert_eq!(state.messages.len(), 2);
    assert_eq!(
        texts(&peek(&mut state, "q", 32, later + 1_000)),
        ["stays", "leased"]
    );
}

#[test]
fn expired_visible_messages_met_by_get_and_peek_are_freed() {
    let mut state = state_with(&["q"]);
    for index in 0..10 {
        put(&mut state, "q", &format!("short{index}"), 0, Some(1), NOW);
    }
    put(&mut state, "q", "long", 0, Some(3600), NOW);
    let later = NOW + 2_000;
    let peeked = messages(state.execute(
        Command::PeekMessages {
            queue: key("q"),
            count: 1,
        },
        later,
    ));
    assert_eq!(texts(&peeked), ["long"]);
    assert_eq!(state.messages.len(), 1);
    state.verify();
}

#[test]
fn more_due_than_the_budget_is_reported() {
    let mut state = state_with(&["q"]);
    for _ in 0..100 {
        put(&mut state, "q", "x", 0, Some(1), NOW);
    }
    assert!(state.advance(NOW + 1_000, 10));
    assert!(state
        .next_deadline_ms()
        .is_some_and(|deadline| deadline <= NOW + 1_000));
    assert!(state.messages.len() >= 90);
    assert!(!state.advance(NOW + 1_000, usize::MAX));
    assert!(state.messages.is_empty());
    assert_eq!(state.next_deadline_ms(), None);
}

#[test]
fn clock_going_backwards_is_tolerated() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 0, Some(60), NOW);
    // The clock steps back a second: the later put sorts first, its times are as given.
    let b = put(&mut state, "q", "b", 0, Some(60), NOW - 1_000);
    assert_eq!(b.insertion_ms, NOW - 1_000);
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW - 1_000)), ["b", "a"]);
    state.verify();
    // Its expiry is not early.
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 58_999)), ["b", "a"]);
    assert_eq!(texts(&peek(&mut state, "q", 32, NOW + 59_000)), ["a"]);
    state.verify();
}

#[test]
#[should_panic]
fn put_with_delay_not_below_ttl_is_a_bug() {
    let mut state = state_with(&["q"]);
    put(&mut state, "q", "a", 10, Some(10), NOW);
}

#[test]
#[should_panic]
fn get_of_more_than_the_limit_is_a_bug() {
    let mut state = state_with(&["q"]);
    get(&mut state, "q", limits::MESSAGES_PER_GET_MAX + 1, 30, NOW);
}

fn identifiers(ids: &[&str]) -> Vec<crate::queue::SignedIdentifier> {
    ids.iter()
        .map(|id| crate::queue::SignedIdentifier {
            id: id.to_string(),
            access_policy: Some(crate::queue::AccessPolicy {
                permission: Some("r".to_string()),
                ..Default::default()
            }),
        })
        .collect()
}

fn set_acl(state: &mut ShardState, name: &str, ids: &[&str]) -> Result<Reply, StorageError> {
    state.apply(
        Command::SetQueueAcl {
            queue: key(name),
            identifiers: identifiers(ids),
        },
        NOW,
    )
}

/// The replica a writer handed back.
fn replica(reply: Result<Reply, StorageError>) -> Replica {
    match reply {
        Ok(Reply::Replicate(replica)) => *replica,
        other => panic!("expected a replica, got {other:?}"),
    }
}

#[test]
fn queue_acls_count_toward_the_memory_limit() {
    let mut state = ShardState::new(0, 5);
    let five = ["a1", "a2", "a3", "a4", "a5"];
    let one_acl = crate::queue::replicas::acl_charge(&key("q0"), &identifiers(&five));
    let per_queue = queue_charge(&Vec::new());
    // Room for four queues and two ACLs of five identifiers, not three.
    state.set_message_bytes_max(4 * per_queue + 2 * one_acl + one_acl / 2);
    for index in 0..4 {
        create(&mut state, &format!("q{index}"), Vec::new()).unwrap();
    }
    replica(set_acl(&mut state, "q0", &five));
    replica(set_acl(&mut state, "q1", &five));
    assert_eq!(
        set_acl(&mut state, "q2", &five).unwrap_err(),
        StorageError::ServerBusy
    );
    // Refused, nothing stored.
    assert_eq!(acl_ids(&mut state, "q2").unwrap(), Vec::<String>::new());
    // A smaller ACL fits, replacing one always shrinks or keeps what is counted.
    replica(set_acl(&mut state, "q2", &["b1"]));
    replica(set_acl(&mut state, "q0", &["c1"]));
    replica(set_acl(&mut state, "q2", &five));
    state.verify();
    // Deleting a queue frees its ACL's charge with its record's.
    state
        .apply(Command::DeleteQueue { queue: key("q1") }, NOW)
        .unwrap();
    replica(set_acl(&mut state, "q3", &five));
    state.verify();
    // Another shard's copy is counted though it is never refused (its owner decided): past the
    // limit, this shard's own writes are refused.
    let mut peer = ShardState::new(1, 5);
    create(&mut peer, "elsewhere", Vec::new()).unwrap();
    let copy = replica(set_acl(&mut peer, "elsewhere", &five));
    state.apply(Command::ApplyReplica(copy), NOW).unwrap();
    assert_eq!(
        set_acl(&mut state, "q3", &["a1", "a2", "a3", "a4", "a5-longer"]).unwrap_err(),
        StorageError::ServerBusy
    );
    state.verify();
}

fn acl_ids(state: &mut ShardState, name: &str) -> Result<Vec<String>, StorageError> {
    match state.apply(Command::GetQueueAcl { queue: key(name) }, NOW)? {
        Reply::AccessPolicies(identifiers) => Ok(identifiers
            .iter()
            .map(|identifier| identifier.id.clone())
            .collect()),
        other => panic!("expected access policies, got {other:?}"),
    }
}

#[test]
fn queue_acl_table() {
    let mut state = state_with(&["q"]);
    assert_eq!(acl_ids(&mut state, "q"), Ok(vec![]));
    assert!(matches!(
        set_acl(&mut state, "missing", &["p"]),
        Err(StorageError::QueueNotFound)
    ));
    assert_eq!(state.replicas().queue_acl(&key("missing")), None);
    assert_eq!(
        acl_ids(&mut state, "missing"),
        Err(StorageError::QueueNotFound)
    );

    let Replica::QueueAcl {
        version: first_version,
        identifiers: Some(sent),
        ..
    } = replica(set_acl(&mut state, "q", &["p1", "p2"]))
    else {
        panic!("Set Queue ACL hands back the queue's ACL");
    };
    assert_eq!(sent.len(), 2);
    assert_eq!(acl_ids(&mut state, "q"), Ok(vec!["p1".into(), "p2".into()]));
    // Each change gets a newer version; an empty list clears the policies.
    let Replica::QueueAcl { version, .. } = replica(set_acl(&mut state, "q", &[])) else {
        panic!("Set Queue ACL hands back the queue's ACL");
    };
    assert!(version > first_version);
    assert_eq!(acl_ids(&mut state, "q"), Ok(vec![]));
}

#[test]
fn delete_queue_forgets_its_acl_and_a_new_namesake_starts_without() {
    let mut state = state_with(&["q", "plain"]);
    // A queue without an ACL is deleted without replication.
    assert!(matches!(
        state.apply(
            Command::DeleteQueue {
                queue: key("plain")
            },
            NOW
        ),
        Ok(Reply::Done)
    ));
    set_acl(&mut state, "q", &["p"]).unwrap();
    let removal = replica(state.apply(Command::DeleteQueue { queue: key("q") }, NOW));
    assert!(
        matches!(
            removal,
            Replica::QueueAcl {
                identifiers: None,
                ..
            }
        ),
        "{removal:?}"
    );
    create(&mut state, "q", vec![]).unwrap();
    assert_eq!(acl_ids(&mut state, "q"), Ok(vec![]));
    assert_eq!(state.replicas().queue_acl(&key("q")), None);
}

#[test]
fn with_stored_policy_runs_only_under_the_current_acl() {
    let mut state = state_with(&["q"]);
    let guarded = |acl_version| Command::WithStoredPolicy {
        acl_version,
        command: Box::new(Command::GetQueueMetadata { queue: key("q") }),
    };
    // No ACL at all.
    assert!(matches!(
        state.apply(guarded(1), NOW),
        Err(StorageError::AuthenticationFailed)
    ));
    set_acl(&mut state, "q", &["p"]).unwrap();
    let (version, _) = state.replicas().queue_acl(&key("q")).unwrap();
    assert!(matches!(
        state.apply(guarded(version), NOW),
        Ok(Reply::Metadata { .. })
    ));
    // The ACL changed since the request was authorized.
    set_acl(&mut state, "q", &["p"]).unwrap();
    assert!(matches!(
        state.apply(guarded(version), NOW),
        Err(StorageError::AuthenticationFailed)
    ));
    // The queue was deleted and created again: the old ACL's version never matches.
    state
        .apply(Command::DeleteQueue { queue: key("q") }, NOW)
        .unwrap();
    create(&mut state, "q", vec![]).unwrap();
    for stale_version in [version, version + 1] {
        assert!(matches!(
            state.apply(guarded(stale_version), NOW),
            Err(StorageError::AuthenticationFailed)
        ));
    }
}

#[test]
fn service_properties_are_merged_on_the_home_shard_and_replicated() {
    let mut home = ShardState::new(0, 1);
    let mut other = ShardState::new(1, 2);
    let mut logging = crate::queue::ServiceProperties::default().logging;
    logging.write = true;
    let reply = home.apply(
        Command::SetServiceProperties {
            account: ACCOUNT.to_string(),
            update: Box::new(crate::queue::ServicePropertiesUpdate {
                logging: Some(logging.clone()),
                ..Default::default()
            }),
        },
        NOW,
    );
    assert!(matches!(
        other.apply(Command::ApplyReplica(replica(reply)), NOW),
        Ok(Reply::Done)
    ));
    for state in [&home, &other] {
        let properties = state.replicas().service_properties(ACCOUNT);
        assert_eq!(properties.logging, logging);
        assert_eq!(
            properties.hour_metrics,
            crate::queue::ServiceProperties::default().hour_metrics
        );
        assert_eq!(
            **state.replicas().service_properties("otheraccount"),
            crate::queue::ServiceProperties::default()
        );
    }
}

// ---- Memory budget (--max-memory) ----

#[test]
fn put_beyond_the_memory_budget_is_refused_and_changes_nothing() {
    let mut state = state_with(&["q"]);
    let charge = (10 + limits::MESSAGE_OVERHEAD_BYTES) as u64;
    // The queue's record counts too.
    state.set_message_bytes_max(limits::QUEUE_OVERHEAD_BYTES as u64 + 2 * charge);
    let first = put(&mut state, "q", "0123456789", 0, None, NOW);
    put(&mut state, "q", "0123456789", 0, None, NOW);
    assert_eq!(state.message_bytes(), 2 * charge);
    let refused = state.apply(
        Command::PutMessage {
            queue: key("q"),
            text: text("0123456789"),
            visibility_timeout_s: 0,
            ttl_s: None,
        },
        NOW,
    );
    assert_eq!(refused.unwrap_err(), StorageError::ServerBusy);
    assert_eq!(peek(&mut state, "q", 32, NOW).len(), 2);
    assert_eq!(state.message_bytes(), 2 * charge);
    state.verify();
    // Deleting frees the budget again.
    delete(&mut state, "q", first.message_id, receipt(&first), NOW).unwrap();
    assert_eq!(state.message_bytes(), charge);
    put(&mut state, "q", "0123456789", 0, None, NOW);
    state.verify();
}

#[test]
fn update_beyond_the_memory_budget_is_refused_and_keeps_the_lease() {
    let mut state = state_with(&["q"]);
    state.set_message_bytes_max(
        (limits::QUEUE_OVERHEAD_BYTES + 20 + limits::MESSAGE_OVERHEAD_BYTES) as u64,
    );
    put(&mut state, "q", "small", 0, None, NOW);
    let leased = get(&mut state, "q", 1, 30, NOW).remove(0);
    let too_big = "x".repeat(21);
    assert_eq!(
        update(
            &mut state,
            "q",
            &leased,
            receipt(&leased),
            0,
            Some(&too_big),
            NOW
        ),
        Err(StorageError::ServerBusy)
    );
    // The refused update changed nothing: same text, same receipt still valid, still leased.
    assert!(peek(&mut state, "q", 1, NOW).is_empty());
    let fits = "y".repeat(20);
    let (new_receipt, _) = update(
        &mut state,
        "q",
        &leased,
        receipt(&leased),
        0,
        Some(&fits),
        NOW,
    )
    .unwrap();
    assert_eq!(peek(&mut state, "q", 1, NOW)[0].text, text(&fits));
    delete(&mut state, "q", leased.message_id, new_receipt, NOW).unwrap();
    assert_eq!(state.message_bytes(), 0);
    state.verify();
}

/// A snapshot step ends before the slot whose text would take its texts past the bound, takes
/// at least one slot, stays within its slots and the slab, and leaves out the messages of
/// cleared queues (no snapshot records them).
#[test]
fn a_snapshot_step_ends_where_its_texts_pass_their_bound() {
    let mut state = state_with(&["q", "gone"]);
    put(&mut state, "gone", &"g".repeat(100), 0, None, NOW);
    for text in ["aaaa", "bbbb", "cccc"] {
        put(&mut state, "q", text, 0, None, NOW);
    }
    let slots = state.slab_slots();
    assert_eq!(slots, 4);
    // Slot 0 is the cleared queue's: counted before the clear, not after.
    assert_eq!(state.snapshot_step_end(0, 4096, 8), 1);
    state
        .apply(Command::ClearMessages { queue: key("gone") }, NOW)
        .expect("cleared");
    assert_eq!(state.snapshot_step_end(0, 4096, 8), 3);
    assert_eq!(state.snapshot_step_end(0, 4096, 3), 1);
    assert_eq!(state.snapshot_step_end(1, 4096, 3), 2);
    assert_eq!(state.snapshot_step_end(0, 2, 100), 2);
    assert_eq!(state.snapshot_step_end(1, 4096, 100), slots);
    assert_eq!(state.snapshot_step_end(slots, 4096, 100), slots);
}

#[test]
fn census_counts_queues_messages_and_the_deepest() {
    let mut state = state_with(&["a", "b", "c", "d"]);
    for (name, count) in [("a", 3), ("b", 1), ("c", 3)] {
        for _ in 0..count {
            put(&mut state, name, "x", 0, None, NOW);
        }
    }
    let census = state.census(2);
    assert_eq!((census.queues, census.messages), (4, 7));
    assert_eq!(census.message_bytes, state.message_bytes());
    // Deepest first, ties by key; an empty queue is never listed.
    assert_eq!(census.deepest, vec![(key("a"), 3), (key("c"), 3)]);
    assert_eq!(state.census(10).deepest.len(), 3);
    assert!(state.census(0).deepest.is_empty());
}

/// A restore puts every message where it was, whatever order recovery hands them over in
/// (`Restorer::message` by slot, `moved_message` in any order): the visible ones in their
/// queue's order (insertion time, then the put's sequence), the invisible ones on their timers,
/// listed in the same order, each back in that order once visible; counts as the messages
/// say. 40 seeds of 300 messages in random order over a queue of this shard's log and
/// one of another's, a third invisible, some expired (left out), insertion times often equal.
#[test]
fn a_restore_places_messages_in_their_order_whatever_order_they_come_in() {
    use crate::queue::record::MessageState;
    use crate::random::SplitMix64;
    const NOW_MS: u64 = 1_000_000;
    for seed in 0..40 {
        let mut random = SplitMix64::new(seed);
        let mut state = ShardState::new(0, 42);
        let identity = state.identity();
        // The own queue's record is 0 and its messages' slots 0..300: moved ones go above.
        let mut restorer = state.restore(identity, (1, 300));
        restorer.queue(0, key("own"), Metadata::new());
        restorer.moved_queue(7, key("moved"), Metadata::new());
        // (queue name, order key, visible again at, text) of every message kept.
        let mut kept: Vec<(&str, (u64, u64), u64, String)> = Vec::new();
        let mut slots: Vec<u32> = (0..300).collect();
        for at in (1..slots.len()).rev() {
            slots.swap(at, (random.next_u64() % (at as u64 + 1)) as usize);
        }
        for (index, &slot) in slots.iter().enumerate() {
            let moved = random.next_u64() % 3 == 0;
            let insertion_ms = NOW_MS - 10_000 + random.next_u64() % 8 * 1000;
            // Distinct sequences, in no relation to the slots.
            let sequence = (random.next_u64() % 1000) * 1000 + index as u64;
            let invisible = random.next_u64() % 3 == 0;
            let expired = random.next_u64() % 10 == 0;
            let visible_ms = if invisible {
                NOW_MS + 1 + random.next_u64() % 5000
            } else {
                0
            };
            let text = format!("{slot}");
            let message = MessageState {
                queue: if moved { 7 } else { 0 },
                slot,
                generation: 1,
                sequence,
                insertion_ms,
                ttl_s: if expired { 1 } else { 86_400 },
                delay_s: 0,
                dequeue_count: u32::from(invisible),
                lease: u32::from(invisible),
                visible_ms,
                foreign_id: None,
                text: Bytes::from(text.clone()),
            };
            if moved {
                let id = MessageId(u128::from(slot) << 64 | 0xfeed);
                restorer.moved_message(7, message, id, NOW_MS);
            } else {
                assert_eq!(restorer.message(message, None, NOW_MS), !expired);
            }
            if !expired {
                let name = if moved { "moved" } else { "own" };
                kept.push((name, (insertion_ms, sequence), visible_ms, text));
            }
        }
        restorer.finish();
        state.verify();
        for name in ["own", "moved"] {
            let mut theirs: Vec<_> = kept.iter().filter(|kept| kept.0 == name).collect();
            theirs.sort_by_key(|kept| kept.1);
            let invisible: Vec<_> = theirs.iter().filter(|kept| kept.2 > NOW_MS).collect();
            let visible: Vec<_> = theirs.iter().filter(|kept| kept.2 <= NOW_MS).collect();
            let index = state.queue_names[&key(name)];
            let queue = state.queue(index);
            assert_eq!(queue.messages_count, theirs.len() as u64, "seed {seed}");
            assert_eq!(queue.invisible_count, invisible.len() as u64, "seed {seed}");
            // Every visible one in the queue's list, none kept aside out of order (a map
            // entry each, where the list costs nothing beside the slot).
            assert!(queue.out_of_order.is_empty(), "seed {seed}");
            // The invisible list in key order.
            let mut listed = Vec::new();
            let mut slot = queue.invisible.head;
            while slot != NONE {
                listed.push(
                    String::from_utf8(state.messages.get(slot).text.expect_resident().to_vec())
                        .unwrap(),
                );
                slot = state.messages.get(slot).next;
            }
            let expected: Vec<_> = invisible.iter().map(|kept| kept.3.clone()).collect();
            assert_eq!(listed, expected, "seed {seed}: invisible");
            // The visible ones now, in order; then the invisible ones once visible.
            let peeked = texts(&peek(&mut state, name, 32, NOW_MS));
            let expected: Vec<_> = visible.iter().take(32).map(|kept| kept.3.clone()).collect();
            assert_eq!(peeked, expected, "seed {seed}: visible");
        }
        // Once every lease has run out (time passes for both queues at once).
        for name in ["own", "moved"] {
            let mut theirs: Vec<_> = kept.iter().filter(|kept| kept.0 == name).collect();
            theirs.sort_by_key(|kept| kept.1);
            let later = NOW_MS + 10_000;
            let mut all = Vec::new();
            loop {
                let taken = texts(&get(&mut state, name, 32, 3600, later));
                if taken.is_empty() {
                    break;
                }
                all.extend(taken);
            }
            let expected: Vec<_> = theirs.iter().map(|kept| kept.3.clone()).collect();
            assert_eq!(all, expected, "seed {seed}: all, in order");
        }
        state.verify();
    }
}
