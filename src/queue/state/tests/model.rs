//! `ShardState` against a naive model: a `Vec` of messages per shard, filtered and sorted on
//! every command. Random sequences of every message command, with random visibility timeouts,
//! TTLs and clock steps, must give exactly the model's replies: IDs, order, times, dequeue
//! counts, receipt validity, errors and counts.

use super::*;

const QUEUES: usize = 3;
const MESSAGES_MAX: usize = 150;

#[derive(Clone, Debug)]
struct ModelMessage {
    id: MessageId,
    queue: usize,
    insertion_ms: u64,
    expiration_ms: u64,
    order_key: (u64, u64),
    visible_ms: u64,
    dequeue_count: u32,
    lease: u32,
    text: Bytes,
}

/// A receipt a reply handed out, with what the model knows about it.
#[derive(Clone, Copy, Debug)]
struct Issued {
    id: MessageId,
    receipt: PopReceipt,
    lease: u32,
}

#[derive(Default)]
struct Model {
    queue_exists: [bool; QUEUES],
    messages: Vec<ModelMessage>,
    sequence: u64,
}

impl Model {
    /// Expired messages are gone for every purpose.
    fn prune(&mut self, now_ms: u64) {
        self.messages
            .retain(|message| message.expiration_ms > now_ms);
    }

    /// Indices of the queue's visible messages in visible order.
    fn visible(&self, queue: usize, now_ms: u64) -> Vec<usize> {
        let mut visible: Vec<usize> = (0..self.messages.len())
            .filter(|&index| {
                let message = &self.messages[index];
                message.queue == queue && message.visible_ms <= now_ms
            })
            .collect();
        visible.sort_by_key(|&index| self.messages[index].order_key);
        visible
    }

    fn resolve(&self, queue: usize, id: MessageId, issued: Issued) -> Result<usize, StorageError> {
        if !self.queue_exists[queue] {
            return Err(StorageError::QueueNotFound);
        }
        let Some(index) = self
            .messages
            .iter()
            .position(|message| message.id == issued.id)
        else {
            return Err(StorageError::MessageNotFound);
        };
        let message = &self.messages[index];
        if message.queue != queue || id != issued.id {
            return Err(StorageError::MessageNotFound);
        }
        if message.lease != issued.lease {
            return Err(StorageError::PopReceiptMismatch);
        }
        Ok(index)
    }

    fn count(&self, queue: usize) -> u64 {
        self.messages
            .iter()
            .filter(|message| message.queue == queue)
            .count() as u64
    }

    /// The earliest moment anything changes by itself.
    fn earliest_event_ms(&self, now_ms: u64) -> Option<u64> {
        self.messages
            .iter()
            .flat_map(|message| {
                let visible = (message.visible_ms > now_ms).then_some(message.visible_ms);
                let expiry =
                    (message.expiration_ms != EXPIRATION_NEVER_MS).then_some(message.expiration_ms);
                visible.into_iter().chain(expiry)
            })
            .min()
    }
}

/// What a compared view is made of: everything but the receipt's value, which only the state knows.
fn shape(view: &MessageView) -> (MessageId, u64, u64, u64, u32, Bytes, bool) {
    (
        view.message_id,
        view.insertion_ms,
        view.expiration_ms,
        view.time_next_visible_ms,
        view.dequeue_count,
        view.text.clone(),
        view.pop_receipt.is_some(),
    )
}

fn model_shape(
    message: &ModelMessage,
    time_next_visible_ms: u64,
    with_receipt: bool,
) -> (MessageId, u64, u64, u64, u32, Bytes, bool) {
    (
        message.id,
        message.insertion_ms,
        message.expiration_ms,
        time_next_visible_ms,
        message.dequeue_count,
        message.text.clone(),
        with_receipt,
    )
}

fn name(queue: usize) -> String {
    format!("queue-{queue}")
}

#[test]
fn matches_naive_model() {
    for seed in 0..24u64 {
        let result = std::panic::catch_unwind(|| run(seed, 1_500));
        if let Err(panic) = result {
            eprintln!("state model test failed with seed {seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

fn run(seed: u64, steps: usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut state = ShardState::new(1, seed);
    let mut model = Model::default();
    let mut issued: Vec<Issued> = Vec::new();
    let mut now_ms = NOW + rng.u64(..1_000_000);
    for step in 0..steps {
        let queue = rng.usize(..QUEUES);
        let queue_key = key(&name(queue));
        let choice = rng.u32(..100);
        // Every command runs the state's due timers; the model forgets what has expired.
        model.prune(now_ms);
        match choice {
            0..=3 => {
                let reply = state.apply(
                    Command::CreateQueue {
                        queue: queue_key,
                        metadata: vec![],
                    },
                    now_ms,
                );
                if model.queue_exists[queue] {
                    assert!(matches!(reply, Ok(Reply::QueueExists)), "{reply:?}");
                } else {
                    assert!(matches!(reply, Ok(Reply::QueueCreated)), "{reply:?}");
                    model.queue_exists[queue] = true;
                }
            }
            4 => {
                let reply = state.apply(Command::DeleteQueue { queue: queue_key }, now_ms);
                if model.queue_exists[queue] {
                    assert!(matches!(reply, Ok(Reply::Done)), "{reply:?}");
                    model.queue_exists[queue] = false;
                    model.messages.retain(|message| message.queue != queue);
                } else {
                    assert_eq!(reply.unwrap_err(), StorageError::QueueNotFound);
                }
            }
            5..=29 => {
                if model.messages.len() >= MESSAGES_MAX {
                    continue;
                }
                let delay_s = if rng.u32(..3) == 0 { rng.u64(1..20) } else { 0 };
                let ttl_s = if rng.u32(..8) == 0 {
                    None
                } else {
                    Some(delay_s + rng.u64(1..120))
                };
                let body = Bytes::from(format!("m{step}"));
                let reply = state.apply(
                    Command::PutMessage {
                        queue: queue_key,
                        text: body.clone(),
                        visibility_timeout_s: delay_s,
                        ttl_s,
                    },
                    now_ms,
                );
                if !model.queue_exists[queue] {
                    assert_eq!(reply.unwrap_err(), StorageError::QueueNotFound);
                    continue;
                }
                let views = messages(reply);
                assert_eq!(views.len(), 1);
                let view = &views[0];
                let message = ModelMessage {
                    id: view.message_id,
                    queue,
                    insertion_ms: now_ms,
                    expiration_ms: ttl_s.map_or(EXPIRATION_NEVER_MS, |ttl_s| now_ms + ttl_s * 1000),
                    order_key: (now_ms + delay_s * 1000, model.sequence),
                    visible_ms: now_ms + delay_s * 1000,
                    dequeue_count: 0,
                    lease: 0,
                    text: body,
                };
                model.sequence += 1;
                assert!(model.messages.iter().all(|other| other.id != message.id));
                // Put's reply carries no text (its response lists none).
                let mut expected = model_shape(&message, message.visible_ms, true);
                expected.5 = Bytes::new();
                assert_eq!(shape(view), expected);
                issued.push(Issued {
                    id: message.id,
                    receipt: receipt(view),
                    lease: 0,
                });
                model.messages.push(message);
            }
            30..=47 => {
                let count = if rng.bool() {
                    1
                } else {
                    rng.u32(1..=config::MESSAGES_PER_GET_MAX)
                };
                let visibility_timeout_s = rng.u64(1..30);
                let reply = state.apply(
                    Command::GetMessages {
                        queue: queue_key,
                        count,
                        visibility_timeout_s,
                    },
                    now_ms,
                );
                if !model.queue_exists[queue] {
                    assert_eq!(reply.unwrap_err(), StorageError::QueueNotFound);
                    continue;
                }
                let views = messages(reply);
                let expected: Vec<usize> = model
                    .visible(queue, now_ms)
                    .into_iter()
                    .take(count as usize)
                    .collect();
                assert_eq!(views.len(), expected.len(), "get count at step {step}");
                for (view, index) in views.iter().zip(expected) {
                    let message = &mut model.messages[index];
                    message.dequeue_count += 1;
                    message.lease += 1;
                    message.visible_ms = now_ms + visibility_timeout_s * 1000;
                    assert_eq!(
                        shape(view),
                        model_shape(message, message.visible_ms, true),
                        "get at step {step}"
                    );
                    issued.push(Issued {
                        id: message.id,
                        receipt: receipt(view),
                        lease: message.lease,
                    });
                }
            }
            48..=59 => {
                let count = rng.u32(1..=config::MESSAGES_PER_GET_MAX);
                let reply = state.apply(
                    Command::PeekMessages {
                        queue: queue_key,
                        count,
                    },
                    now_ms,
                );
                if !model.queue_exists[queue] {
                    assert_eq!(reply.unwrap_err(), StorageError::QueueNotFound);
                    continue;
                }
                let views = messages(reply);
                let expected: Vec<usize> = model
                    .visible(queue, now_ms)
                    .into_iter()
                    .take(count as usize)
                    .collect();
                assert_eq!(views.len(), expected.len(), "peek count at step {step}");
                for (view, index) in views.iter().zip(expected) {
                    assert_eq!(
                        shape(view),
                        model_shape(&model.messages[index], now_ms, false),
                        "peek at step {step}"
                    );
                }
            }
            60..=83 => {
                if issued.is_empty() {
                    continue;
                }
                // Mostly recent receipts (likely current), sometimes old ones (likely stale).
                let pick = if rng.bool() {
                    issued.len() - 1 - rng.usize(..issued.len().min(8))
                } else {
                    rng.usize(..issued.len())
                };
                let receipt_of = issued[pick];
                let message_id = if rng.u32(..10) == 0 {
                    issued[rng.usize(..issued.len())].id
                } else {
                    receipt_of.id
                };
                // Sometimes the command names another queue than the message's.
                let queue = if rng.u32(..10) == 0 {
                    queue
                } else {
                    model
                        .messages
                        .iter()
                        .find(|message| message.id == receipt_of.id)
                        .map_or(queue, |message| message.queue)
                };
                let queue_key = key(&name(queue));
                let expected = model.resolve(queue, message_id, receipt_of);
                if choice < 72 {
                    let visibility_timeout_s = if rng.u32(..4) == 0 { 0 } else { rng.u64(1..30) };
                    let body = rng.bool().then(|| Bytes::from(format!("u{step}")));
                    let reply = state.apply(
                        Command::UpdateMessage {
                            queue: queue_key,
                            message_id,
                            pop_receipt: receipt_of.receipt,
                            visibility_timeout_s,
                            text: body.clone(),
                        },
                        now_ms,
                    );
                    match expected {
                        Err(error) => {
                            assert_eq!(reply.unwrap_err(), error, "update at step {step}")
                        }
                        Ok(index) => {
                            let Ok(Reply::Updated {
                                pop_receipt,
                                time_next_visible_ms,
                            }) = reply
                            else {
                                panic!("update at step {step}: {reply:?}");
                            };
                            let message = &mut model.messages[index];
                            message.lease += 1;
                            message.visible_ms = now_ms + visibility_timeout_s * 1000;
                            if let Some(body) = body {
                                message.text = body;
                            }
                            assert_eq!(time_next_visible_ms, message.visible_ms);
                            issued.push(Issued {
                                id: message.id,
                                receipt: pop_receipt,
                                lease: message.lease,
                            });
                        }
                    }
                } else {
                    let reply = state.apply(
                        Command::DeleteMessage {
                            queue: queue_key,
                            message_id,
                            pop_receipt: receipt_of.receipt,
                        },
                        now_ms,
                    );
                    match expected {
                        Err(error) => {
                            assert_eq!(reply.unwrap_err(), error, "delete at step {step}")
                        }
                        Ok(index) => {
                            assert!(
                                matches!(reply, Ok(Reply::Done)),
                                "delete at step {step}: {reply:?}"
                            );
                            model.messages.remove(index);
                        }
                    }
                }
            }
            84 => {
                let reply = state.apply(Command::ClearMessages { queue: queue_key }, now_ms);
                if model.queue_exists[queue] {
                    assert!(matches!(reply, Ok(Reply::Done)));
                    model.messages.retain(|message| message.queue != queue);
                } else {
                    assert_eq!(reply.unwrap_err(), StorageError::QueueNotFound);
                }
            }
            85..=89 => {
                let reply = state.apply(Command::GetQueueMetadata { queue: queue_key }, now_ms);
                if model.queue_exists[queue] {
                    let Ok(Reply::Metadata {
                        approximate_messages_count,
                        ..
                    }) = reply
                    else {
                        panic!("{reply:?}");
                    };
                    assert_eq!(
                        approximate_messages_count,
                        model.count(queue),
                        "count at step {step}"
                    );
                } else {
                    assert_eq!(reply.unwrap_err(), StorageError::QueueNotFound);
                }
            }
            _ => {
                now_ms += match rng.u32(..20) {
                    0 => 86_400_000 * rng.u64(1..30),
                    1..=3 => rng.u64(..60_000),
                    _ => rng.u64(..1_500),
                };
                continue;
            }
        }
        if issued.len() > 400 {
            issued.drain(..200);
        }
        state.verify();
        // A Clear or Delete Queue left its messages in a graveyard: the runtime's timer task
        // calls `advance` at once (the deadline is 0), which frees them.
        if !state.graveyards.is_empty() {
            assert_eq!(state.next_deadline_ms(), Some(0));
            state.advance(now_ms, config::TIMER_ENTRIES_PER_STEP_MAX);
            state.verify();
        }
        assert_eq!(
            state.messages.len(),
            model.messages.len(),
            "stored messages at step {step}"
        );
        // Every due timer has run, and the runtime's next wake-up is no later than the model's.
        match (state.next_deadline_ms(), model.earliest_event_ms(now_ms)) {
            (None, None) => {}
            (Some(deadline_ms), Some(event_ms)) => {
                assert!(deadline_ms > now_ms, "due work left at step {step}");
                assert!(
                    deadline_ms <= event_ms,
                    "wake-up after an event at step {step}"
                );
            }
            (deadline, event) => panic!("deadline {deadline:?} but event {event:?} at step {step}"),
        }
    }
}
