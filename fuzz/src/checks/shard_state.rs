//! `shard_state`: arbitrary sequences of `Command`s over a few queues of two accounts, applied to
//! a `ShardState` with a monotone fuzzer-driven clock, against a naive model kept beside it.
//! Every command respects the preconditions the api layer guarantees (see `ShardState::apply`):
//! valid names, canonical metadata, counts in `1..=32`, visibility timeouts up to 7 days and
//! below the TTL, texts up to 64 KiB.
//!
//! Properties checked after each step:
//! - every reply is the model's: queue and metadata results, List Queues pages, the messages a
//!   Put, Get or Peek returns (ids, times, dequeue counts, texts, receipts, order);
//! - no message is returned while invisible (so never by two Gets within one lease) or after it
//!   expired;
//! - the receipt of the latest Put, Get or Update deletes (or updates) its message exactly once;
//!   an older receipt of a live message is `PopReceiptMismatch`, a receipt of a gone one
//!   `MessageNotFound`;
//! - the approximate count is at least the live messages (Peek(32) sees no more than it), and
//!   exactly the live messages once the timers have run;
//! - `advance` never panics, reports more work until the due timers are done, and then
//!   `next_deadline_ms` is after now and no later than the model's next visibility or expiry
//!   event (`None` exactly when there is none).
//!
//! - with settings commands on: every reply to Set/Get Queue ACL, Set Service Properties, a
//!   Delete Queue of a queue with an ACL, a replica from another shard and a command authorised
//!   by a stored policy is the model's (the writer's versions count up by one per change; a
//!   replica is kept only when newer; a stored-policy command runs only while its ACL version is
//!   the queue's current one), and after every step the shard's copy of every setting
//!   (`ShardState::replicas`) is the model's.
//!
//! Input: one mode byte, two bytes of start time, a shard byte, then one operation byte per step
//! followed by its arguments. Mode bit 0 enables two more operations, a starved `advance` and a
//! bulk Put of up to 1021 messages with one TTL (enough for their expiries to exceed the timer
//! budget of one `apply`), and replaces the exact checks by the ones that hold while timers lag:
//! nothing invisible or expired is returned, order holds, count ≥ live messages. Mode bit 1
//! enables the settings commands (operations 20 to 24 of 26; without it operations are taken
//! modulo 20, as before the settings existed, so older inputs keep their meaning).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use azq::error::StorageError;
use azq::limits::{
    CORS_RULES_MAX, LIST_QUEUES_RESULTS_MAX, MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX,
    SIGNED_IDENTIFIERS_MAX, TIMER_ENTRIES_PER_STEP_MAX, VISIBILITY_TIMEOUT_S_MAX,
};
use azq::queue::{
    AccessPolicy, Command, CorsRule, Logging, MessageId, MessageView, Metadata, Metrics,
    PopReceipt, QueueKey, Replica, Reply, RetentionPolicy, ServiceProperties,
    ServicePropertiesUpdate, ShardState, SignedIdentifier, EXPIRATION_NEVER_MS,
};
use bytes::Bytes;

use super::input::Input;

/// 2026-11-22T00:00:00Z, the clock's earliest start.
const START_MS: u64 = 1_795_305_600_000;
/// Most steps of one input: keeps one run short and the slab far below the timer budget.
const STEPS_MAX: usize = 2048;
/// Most messages bulk Puts fill the model up to; one more bulk would exceed the timer budget
/// of an `apply` several times over, and keeps every step (linear in the messages) quick.
const MESSAGES_MAX: usize = 4096;
/// Most receipts remembered for Update and Delete to pick from.
const RECEIPTS_MAX: usize = 256;
const ACCOUNTS: [&str; 2] = ["devstoreaccount1", "account2"];
const QUEUE_NAMES: [&str; 3] = ["queue", "queue-a", "queue1"];
const QUEUE_KEYS: usize = ACCOUNTS.len() * QUEUE_NAMES.len();
const PREFIXES: [&str; 5] = ["", "q", "queue", "queue-", "x"];
const MARKERS: [&str; 6] = ["", "queue", "queue-a", "queue0", "queue1", "z"];
const METADATA_NAMES: [&str; 6] = ["a", "B", "b", "Key", "key2", "_x"];
/// Queues another shard owns: their ACLs reach this shard only as replicas.
const FOREIGN_QUEUES: [&str; 2] = ["remote", "queue"];
/// The account whose home shard is another: its properties reach this shard only as replicas.
/// (`ACCOUNTS` have this shard as home: Set Service Properties runs here.)
const FOREIGN_ACCOUNT: &str = "account3";
const POLICY_IDS: [&str; 4] = ["p", "readers", "P", "x"];
const POLICY_TEXTS: [&str; 4] = ["", "r", "2026-11-22T00:00:00Z", "raup"];
/// Longest TTL the api layer passes on: one below year 9999 in seconds from the epoch.
const TTL_S_MAX: u64 = EXPIRATION_NEVER_MS / 1000 - 1;

/// A queue as the model knows it.
#[derive(Clone, Debug)]
struct ModelQueue {
    metadata: Metadata,
}

/// A stored message as the model knows it.
#[derive(Clone, Debug)]
struct ModelMessage {
    id: MessageId,
    /// Index into the queue keys.
    queue: usize,
    slot: u32,
    generation: u32,
    /// The lease of the receipt that currently works.
    lease: u32,
    /// (time it first became visible, put order): the order Get and Peek return messages in.
    order_key: (u64, u64),
    insertion_ms: u64,
    invisible_until_ms: u64,
    expiration_ms: u64,
    dequeue_count: u32,
    text: Bytes,
}

impl ModelMessage {
    fn is_visible(&self, now_ms: u64) -> bool {
        self.invisible_until_ms <= now_ms && now_ms < self.expiration_ms
    }

    /// When the shard next has to act for this message: the end of its invisibility or its
    /// expiry, whichever comes first; `None` for a visible message that never expires.
    fn next_event_ms(&self, now_ms: u64) -> Option<u64> {
        if self.invisible_until_ms > now_ms {
            Some(self.invisible_until_ms.min(self.expiration_ms))
        } else {
            (self.expiration_ms != EXPIRATION_NEVER_MS).then_some(self.expiration_ms)
        }
    }
}

/// A receipt handed out, with the message and queue it was for.
#[derive(Clone, Copy, Debug)]
struct Issued {
    queue: usize,
    id: MessageId,
    receipt: PopReceipt,
}

/// Where the shard keeps a message: its slab slot and the slot's generation, as its receipts
/// name it. Unique among live messages, so the model's key for them.
type SlotKey = (u32, u32);

struct Model {
    queues: [Option<ModelQueue>; QUEUE_KEYS],
    /// Live messages (put, not deleted, cleared or expired) by slot: a receipt resolves in
    /// O(1), which keeps inputs with a thousand messages fast enough to fuzz.
    messages: HashMap<SlotKey, ModelMessage>,
    /// When `prune` last ran: the clock only moves between commands, so once per move suffices.
    pruned_at_ms: Option<u64>,
    receipts: Vec<Issued>,
    /// Every message ID ever returned by a Put (IDs are never reused), with the slot it was
    /// stored in: Peek views carry no receipt, so this finds their message.
    ids: HashMap<MessageId, SlotKey>,
    puts: u64,
    settings: Settings,
}

/// The replicated settings as the model knows them: each with the version it was stored at.
struct Settings {
    /// ACLs of this shard's queues (by queue index), which it writes.
    acls: [Option<(u64, Arc<[SignedIdentifier]>)>; QUEUE_KEYS],
    /// ACLs of other shards' queues (by index into `FOREIGN_QUEUES`), kept from replicas.
    foreign_acls: [Option<(u64, Arc<[SignedIdentifier]>)>; FOREIGN_QUEUES.len()],
    /// Service properties by account, written here (`ACCOUNTS`) or replicated (`FOREIGN_ACCOUNT`).
    properties: HashMap<String, (u64, Arc<ServiceProperties>)>,
    /// What an account that never set its properties has.
    default_properties: ServiceProperties,
    /// Keys of this shard's queues and of the foreign ones, made once: `check_settings` runs
    /// after every step, and allocating them there slowed the sanitised target down.
    keys: Vec<QueueKey>,
    foreign_keys: Vec<QueueKey>,
    /// The version of the last change this shard wrote.
    version_last: u64,
}

impl Settings {
    fn new() -> Settings {
        Settings {
            acls: Default::default(),
            foreign_acls: Default::default(),
            properties: HashMap::new(),
            default_properties: ServiceProperties::default(),
            keys: (0..QUEUE_KEYS).map(key).collect(),
            foreign_keys: (0..FOREIGN_QUEUES.len()).map(foreign_key).collect(),
            version_last: 0,
        }
    }

    fn next_version(&mut self) -> u64 {
        self.version_last += 1;
        self.version_last
    }

    fn properties(&self, account: &str) -> &ServiceProperties {
        self.properties
            .get(account)
            .map_or(&self.default_properties, |(_, properties)| properties)
    }

    /// Keeps `replica` of another shard's setting when it is newer than the one stored.
    fn apply_foreign(&mut self, replica: &Replica) {
        match replica {
            Replica::QueueAcl {
                queue,
                version,
                identifiers,
            } => {
                let at = foreign_queue_of(queue);
                let stored = &mut self.foreign_acls[at];
                match (identifiers, stored.as_ref()) {
                    (_, Some((stored_version, _))) if *stored_version >= *version => {}
                    (Some(identifiers), _) => *stored = Some((*version, identifiers.clone())),
                    // A removal forgets an older copy; with none stored there is nothing to do.
                    (None, _) => *stored = None,
                }
            }
            Replica::ServiceProperties {
                account,
                version,
                properties,
            } => {
                let newer = self
                    .properties
                    .get(account)
                    .is_none_or(|(stored_version, _)| stored_version < version);
                if newer {
                    self.properties
                        .insert(account.clone(), (*version, properties.clone()));
                }
            }
        }
    }
}

impl Model {
    fn new() -> Model {
        Model {
            queues: Default::default(),
            messages: HashMap::new(),
            pruned_at_ms: None,
            receipts: Vec::new(),
            ids: HashMap::new(),
            puts: 0,
            settings: Settings::new(),
        }
    }

    /// Forgets expired messages: the shard may still store them, but never returns them.
    fn prune(&mut self, now_ms: u64) {
        if self.pruned_at_ms != Some(now_ms) {
            self.messages
                .retain(|_, message| message.expiration_ms > now_ms);
            self.pruned_at_ms = Some(now_ms);
        }
    }

    fn live_count(&self, queue: usize) -> u64 {
        self.messages
            .values()
            .filter(|message| message.queue == queue)
            .count() as u64
    }

    /// The visible messages of `queue` in the order Get and Peek take them.
    fn visible(&self, queue: usize, now_ms: u64) -> Vec<SlotKey> {
        let mut visible: Vec<(&SlotKey, &ModelMessage)> = self
            .messages
            .iter()
            .filter(|(_, message)| message.queue == queue && message.is_visible(now_ms))
            .collect();
        visible.sort_by_key(|(_, message)| message.order_key);
        visible.into_iter().map(|(&slot, _)| slot).collect()
    }

    fn remember(&mut self, issued: Issued) {
        if self.receipts.len() >= RECEIPTS_MAX {
            self.receipts.remove(0);
        }
        self.receipts.push(issued);
    }

    /// What the shard must answer to a receipt, and the message it names when it works.
    fn resolve(
        &self,
        queue: usize,
        id: MessageId,
        receipt: PopReceipt,
    ) -> Result<SlotKey, StorageError> {
        if self.queues[queue].is_none() {
            return Err(StorageError::QueueNotFound);
        }
        let at = (receipt.slot, receipt.generation);
        let Some(message) = self.messages.get(&at) else {
            return Err(StorageError::MessageNotFound);
        };
        if message.queue != queue || message.id != id {
            return Err(StorageError::MessageNotFound);
        }
        if message.lease != receipt.lease {
            return Err(StorageError::PopReceiptMismatch);
        }
        Ok(at)
    }
}

fn key(queue: usize) -> QueueKey {
    QueueKey {
        account: ACCOUNTS[queue / QUEUE_NAMES.len()].to_string(),
        name: QUEUE_NAMES[queue % QUEUE_NAMES.len()].to_string(),
    }
}

/// The `shard_state` property on one input (see the module doc); panics when it breaks.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let lagging = mode & 1 == 1;
    let settings = mode & 2 == 2;
    let mut now_ms = START_MS + u64::from(input.u16());
    let mut state = ShardState::new(usize::from(input.u8()), 0x5eed);
    let mut model = Model::new();
    let mut step = 0;
    while !input.is_empty() && step < STEPS_MAX {
        step += 1;
        if !lagging {
            drain(&mut state, now_ms);
        }
        model.prune(now_ms);
        if !lagging {
            check_deadline(&state, &model, now_ms);
        }
        let operation = input.u8() % if settings { 26 } else { 20 };
        let queue = input.below(QUEUE_KEYS);
        let command = match operation {
            17 if lagging => {
                // Run only a few timer entries now; the next `apply` runs at most
                // `TIMER_ENTRIES_PER_STEP_MAX` more.
                let budget = input.below(4);
                let more = state.advance(now_ms, budget);
                if !more {
                    check_deadline_after(&state, now_ms);
                }
                continue;
            }
            18 if lagging => {
                // Many messages with one TTL: once the clock passes it, their expiries and the
                // cascades before them exceed what one `apply` runs, so the state really lags
                // (through the public API this is the only way it does).
                // Bounded in total: every later step is linear in the model's messages.
                let copies = (1 + input.below(256) * 4)
                    .min(MESSAGES_MAX.saturating_sub(model.messages.len()));
                let visibility_timeout_s = visibility_timeout_s(&mut input, 0);
                let ttl_s = ttl_s(&mut input, visibility_timeout_s);
                // Recorded without the per-command context and copies of `expect`: a bulk is a
                // thousand puts, and ordinary puts get the full treatment.
                let put = Put {
                    queue,
                    text: Bytes::from_static(b"bulk"),
                    visibility_timeout_s,
                    ttl_s,
                    now_ms,
                };
                let command = Command::PutMessage {
                    queue: key(queue),
                    text: put.text.clone(),
                    visibility_timeout_s,
                    ttl_s,
                };
                for copy in 0..copies {
                    let reply = state.apply(command.clone(), now_ms);
                    let context = format_args!("step {step}, bulk put {copy} of {command:?}");
                    match reply {
                        Ok(Reply::Messages(views)) if views.len() == 1 => {
                            record_put(&mut model, &put, &views[0], &context)
                        }
                        Err(StorageError::QueueNotFound) if model.queues[queue].is_none() => break,
                        other => panic!("{context}: answered {other:?}"),
                    }
                }
                continue;
            }
            24 => {
                let operation = input.pick(&STORED_POLICY_OPERATIONS);
                let command = generate(operation, &mut input, &model, queue)
                    .expect("a queue or message command");
                let current = model.settings.acls[queue]
                    .as_ref()
                    .map(|(version, _)| *version);
                let acl_version = match current {
                    Some(version) if input.below(4) != 0 => version,
                    _ => input.below(8) as u64,
                };
                Command::WithStoredPolicy {
                    acl_version,
                    command: Box::new(command),
                }
            }
            operation => match generate(operation, &mut input, &model, queue) {
                Some(command) => command,
                None => {
                    now_ms += clock_step_ms(&mut input);
                    continue;
                }
            },
        };
        let reply = state.apply(command.clone(), now_ms);
        let context = Context {
            step,
            now_ms,
            command: &command,
            reply: &reply,
        };
        expect(&mut model, &command, &reply, lagging, &context);
        if settings {
            check_settings(&state, &model, &context);
        }
    }
    // Far in the future every message with a TTL has expired and every timer has run.
    let final_context = format_args!("after the last step");
    check_settings(&state, &model, &final_context);
    now_ms += 400 * 86_400_000;
    drain(&mut state, now_ms);
    model.prune(now_ms);
    check_deadline(&state, &model, now_ms);
    for queue in 0..QUEUE_KEYS {
        if let Some(model_queue) = &model.queues[queue] {
            let reply = state.apply(Command::GetQueueMetadata { queue: key(queue) }, now_ms);
            let Ok(Reply::Metadata {
                approximate_messages_count,
                metadata,
            }) = reply
            else {
                panic!("final metadata of {queue}: {reply:?}");
            };
            assert_eq!(metadata, model_queue.metadata);
            assert_eq!(
                approximate_messages_count,
                model.live_count(queue),
                "final count of {queue}"
            );
        }
    }
}

/// Operations a command authorised by a stored access policy may carry (`generate`'s numbers).
const STORED_POLICY_OPERATIONS: [u8; 7] = [3, 6, 9, 11, 12, 14, 16];

/// The command of `operation` on `queue` (or on an account, for List Queues and the service
/// properties), its arguments read from `input`; `None` for the operations that move the clock.
fn generate(operation: u8, input: &mut Input<'_>, model: &Model, queue: usize) -> Option<Command> {
    let command = match operation {
        0 | 1 => Command::CreateQueue {
            queue: key(queue),
            metadata: metadata(input),
        },
        2 => Command::DeleteQueue { queue: key(queue) },
        3 => Command::GetQueueMetadata { queue: key(queue) },
        4 => Command::SetQueueMetadata {
            queue: key(queue),
            metadata: metadata(input),
        },
        5 => Command::ListQueues {
            account: ACCOUNTS[input.below(ACCOUNTS.len())].to_string(),
            prefix: input.pick(&PREFIXES).to_string(),
            marker: input.pick(&MARKERS).to_string(),
            results_max: 1 + input.below(4).min(LIST_QUEUES_RESULTS_MAX - 1),
            include_metadata: input.bool(),
        },
        6..=8 => {
            let visibility_timeout_s = visibility_timeout_s(input, 0);
            Command::PutMessage {
                queue: key(queue),
                text: text(input),
                visibility_timeout_s,
                ttl_s: ttl_s(input, visibility_timeout_s),
            }
        }
        9 | 10 => Command::GetMessages {
            queue: key(queue),
            count: count(input),
            visibility_timeout_s: visibility_timeout_s(input, 1),
        },
        11 => Command::PeekMessages {
            queue: key(queue),
            count: count(input),
        },
        12 | 13 => {
            let (queue, message_id, pop_receipt) = pick_receipt(input, model, queue);
            let visibility_timeout_s = visibility_timeout_s(input, 0);
            let text = input.bool().then(|| text(input));
            Command::UpdateMessage {
                queue: key(queue),
                message_id,
                pop_receipt,
                visibility_timeout_s,
                text,
            }
        }
        14 | 15 => {
            let (queue, message_id, pop_receipt) = pick_receipt(input, model, queue);
            Command::DeleteMessage {
                queue: key(queue),
                message_id,
                pop_receipt,
            }
        }
        16 => Command::ClearMessages { queue: key(queue) },
        20 => Command::SetQueueAcl {
            queue: key(queue),
            identifiers: identifiers(input),
        },
        21 => Command::GetQueueAcl { queue: key(queue) },
        22 => Command::SetServiceProperties {
            account: ACCOUNTS[input.below(ACCOUNTS.len())].to_string(),
            update: Box::new(properties_update(input)),
        },
        23 => Command::ApplyReplica(foreign_replica(input)),
        _ => return None,
    };
    Some(command)
}

/// Up to `SIGNED_IDENTIFIERS_MAX` stored access policies with distinct ids, as the api layer
/// passes them on (their texts were validated there; the state keeps them as they are).
fn identifiers(input: &mut Input<'_>) -> Vec<SignedIdentifier> {
    let mut identifiers: Vec<SignedIdentifier> = Vec::new();
    for _ in 0..input.below(SIGNED_IDENTIFIERS_MAX + 1) {
        let id = input.pick(&POLICY_IDS).to_string();
        let access_policy = input.bool().then(|| AccessPolicy {
            start: policy_text(input),
            expiry: policy_text(input),
            permission: policy_text(input),
        });
        if identifiers.iter().all(|existing| existing.id != id) {
            identifiers.push(SignedIdentifier { id, access_policy });
        }
    }
    identifiers
}

fn policy_text(input: &mut Input<'_>) -> Option<String> {
    input.bool().then(|| input.pick(&POLICY_TEXTS).to_string())
}

fn retention(input: &mut Input<'_>) -> RetentionPolicy {
    RetentionPolicy {
        enabled: input.bool(),
        days: input.bool().then(|| 1 + input.below(365) as u32),
    }
}

fn metrics(input: &mut Input<'_>) -> Metrics {
    Metrics {
        version: "1.0".to_string(),
        enabled: input.bool(),
        include_apis: input.bool().then(|| input.bool()),
        retention_policy: retention(input),
    }
}

/// A Set Service Properties body as the api layer passes it on: any of its elements.
fn properties_update(input: &mut Input<'_>) -> ServicePropertiesUpdate {
    ServicePropertiesUpdate {
        logging: input.bool().then(|| Logging {
            version: "1.0".to_string(),
            delete: input.bool(),
            read: input.bool(),
            write: input.bool(),
            retention_policy: retention(input),
        }),
        hour_metrics: input.bool().then(|| metrics(input)),
        minute_metrics: input.bool().then(|| metrics(input)),
        cors: input.bool().then(|| {
            (0..input.below(CORS_RULES_MAX + 1))
                .map(|_| CorsRule {
                    allowed_origins: input.pick(&["*", "https://a.example"]).to_string(),
                    allowed_methods: input.pick(&["GET", "GET,PUT"]).to_string(),
                    allowed_headers: String::new(),
                    exposed_headers: input.pick(&["", "x-ms-*"]).to_string(),
                    max_age_s: u64::from(input.u8()),
                })
                .collect()
        }),
    }
}

fn foreign_key(at: usize) -> QueueKey {
    QueueKey {
        account: FOREIGN_ACCOUNT.to_string(),
        name: FOREIGN_QUEUES[at].to_string(),
    }
}

fn foreign_queue_of(key: &QueueKey) -> usize {
    assert_eq!(key.account, FOREIGN_ACCOUNT);
    FOREIGN_QUEUES
        .iter()
        .position(|name| *name == key.name)
        .expect("a foreign queue")
}

/// A change another shard made to a setting it writes, with a small version so that replicas
/// arrive out of order, repeat, and lose to newer ones.
fn foreign_replica(input: &mut Input<'_>) -> Replica {
    let version = 1 + input.below(8) as u64;
    if input.bool() {
        Replica::QueueAcl {
            queue: foreign_key(input.below(FOREIGN_QUEUES.len())),
            version,
            identifiers: input.bool().then(|| identifiers(input).into()),
        }
    } else {
        Replica::ServiceProperties {
            account: FOREIGN_ACCOUNT.to_string(),
            version,
            properties: Arc::new(
                properties_update(input).applied_to(&ServiceProperties::default()),
            ),
        }
    }
}

/// The shard's copy of every setting is the model's.
fn check_settings(state: &ShardState, model: &Model, context: &dyn std::fmt::Display) {
    let replicas = state.replicas();
    let settings = &model.settings;
    let pairs = settings
        .keys
        .iter()
        .zip(&settings.acls)
        .chain(settings.foreign_keys.iter().zip(&settings.foreign_acls));
    for (queue, expected) in pairs {
        assert_eq!(
            replicas.queue_acl(queue),
            expected
                .as_ref()
                .map(|(version, identifiers)| (*version, identifiers)),
            "ACL of {queue:?}: {context}"
        );
    }
    for account in ACCOUNTS.iter().chain([&FOREIGN_ACCOUNT]) {
        assert_eq!(
            **replicas.service_properties(account),
            *settings.properties(account),
            "properties of {account}: {context}"
        );
    }
}

/// Runs every due timer, in the budgets the runtime uses; must finish.
fn drain(state: &mut ShardState, now_ms: u64) {
    let mut calls = 0;
    while state.advance(now_ms, TIMER_ENTRIES_PER_STEP_MAX) {
        calls += 1;
        assert!(calls < 1_000_000, "advance keeps reporting more work");
    }
    check_deadline_after(state, now_ms);
}

/// After `advance` said nothing more is due, the next deadline is in the future.
fn check_deadline_after(state: &ShardState, now_ms: u64) {
    if let Some(deadline_ms) = state.next_deadline_ms() {
        assert!(
            deadline_ms > now_ms,
            "nothing due, yet the deadline {deadline_ms} is not after {now_ms}"
        );
    }
}

/// With every due timer run: the next deadline exists exactly when some message will become
/// visible or expire, and comes no later than the first such event.
fn check_deadline(state: &ShardState, model: &Model, now_ms: u64) {
    let next_event_ms = model
        .messages
        .values()
        .filter_map(|message| message.next_event_ms(now_ms))
        .min();
    match (state.next_deadline_ms(), next_event_ms) {
        (None, None) => {}
        (Some(deadline_ms), Some(event_ms)) => assert!(
            now_ms < deadline_ms && deadline_ms <= event_ms,
            "deadline {deadline_ms} vs now {now_ms} and next event {event_ms}"
        ),
        (deadline, event) => panic!("deadline {deadline:?} but next event {event:?}"),
    }
}

fn metadata(input: &mut Input<'_>) -> Metadata {
    let mut metadata: Metadata = Vec::new();
    for _ in 0..input.below(4) {
        let name = input.pick(&METADATA_NAMES).to_string();
        let value = String::from_utf8_lossy(input.bytes(8)).into_owned();
        if !metadata
            .iter()
            .any(|(existing, _)| existing.eq_ignore_ascii_case(&name))
        {
            metadata.push((name, value));
        }
    }
    // The canonical order the api layer produces (`validate::metadata`).
    metadata.sort_by_key(|(name, _)| name.to_ascii_lowercase());
    metadata
}

fn text(input: &mut Input<'_>) -> Bytes {
    match input.u8() {
        // The largest text allowed, now and then, to cross the size boundary.
        255 => Bytes::from(vec![b'x'; MESSAGE_TEXT_BYTES_MAX]),
        _ => Bytes::copy_from_slice(input.bytes(32)),
    }
}

fn count(input: &mut Input<'_>) -> u32 {
    1 + input.below(MESSAGES_PER_GET_MAX as usize) as u32
}

/// A visibility timeout of at least `least_s`: short ones mostly, now and then the longest.
fn visibility_timeout_s(input: &mut Input<'_>, least_s: u64) -> u64 {
    let seconds = match input.u8() % 8 {
        0 => 0,
        1 => VISIBILITY_TIMEOUT_S_MAX,
        2 => u64::from(input.u16()),
        _ => u64::from(input.u8() % 64),
    };
    seconds.clamp(least_s, VISIBILITY_TIMEOUT_S_MAX)
}

/// A TTL above `visibility_timeout_s` or none (`messagettl=-1`), as the api layer passes it.
fn ttl_s(input: &mut Input<'_>, visibility_timeout_s: u64) -> Option<u64> {
    let extra_s = match input.u8() % 8 {
        0 => return None,
        1 => u64::from(input.u32()),
        2 => input.u64() % TTL_S_MAX,
        3 => 604_800,
        _ => u64::from(input.u8() % 128),
    };
    Some(
        (visibility_timeout_s + 1)
            .saturating_add(extra_s)
            .min(TTL_S_MAX),
    )
}

fn clock_step_ms(input: &mut Input<'_>) -> u64 {
    match input.u8() % 8 {
        0 => u64::from(input.u16()) * 1000,
        1 => u64::from(input.u8() % 16) * 86_400_000,
        2 => u64::from(input.u16()),
        3 => 1000,
        _ => u64::from(input.u8()),
    }
}

/// A receipt for Update or Delete: one handed out (usually), sent to its own queue (usually),
/// sometimes with another message's ID, sometimes forged.
fn pick_receipt(
    input: &mut Input<'_>,
    model: &Model,
    queue: usize,
) -> (usize, MessageId, PopReceipt) {
    let how = input.u8();
    let Some(&issued) = model.receipts.get(input.below(model.receipts.len())) else {
        return (queue, MessageId(u128::from(input.u64())), forged(input));
    };
    let target_queue = if how & 0x10 != 0 { queue } else { issued.queue };
    let id = if how & 0x20 != 0 {
        model.receipts[input.below(model.receipts.len())].id
    } else {
        issued.id
    };
    let receipt = if how & 0x40 != 0 {
        forged(input)
    } else {
        issued.receipt
    };
    (target_queue, id, receipt)
}

fn forged(input: &mut Input<'_>) -> PopReceipt {
    PopReceipt {
        slot: u32::from(input.u8() % 16),
        generation: u32::from(input.u8() % 4),
        lease: u32::from(input.u8() % 4),
    }
}

fn queue_of(key: &QueueKey) -> usize {
    let account = ACCOUNTS
        .iter()
        .position(|account| *account == key.account)
        .expect("a known account");
    let name = QUEUE_NAMES
        .iter()
        .position(|name| *name == key.name)
        .expect("a known name");
    account * QUEUE_NAMES.len() + name
}

/// The expiry of a message put at `now_ms` with `ttl_s`, as the shard stores it: a TTL past
/// year 9999 or beyond a `u32` of seconds means never.
fn expiration_ms(ttl_s: Option<u64>, now_ms: u64) -> u64 {
    match ttl_s {
        Some(ttl_s)
            if ttl_s < u64::from(u32::MAX) && now_ms + ttl_s * 1000 < EXPIRATION_NEVER_MS =>
        {
            now_ms + ttl_s * 1000
        }
        _ => EXPIRATION_NEVER_MS,
    }
}

/// Create Queue's idea of the same metadata, the naive way: names compared lowercased, values
/// exactly, order kept.
fn metadata_equal(left: &Metadata, right: &Metadata) -> bool {
    let lowered = |metadata: &Metadata| -> Vec<(String, String)> {
        metadata
            .iter()
            .map(|(name, value)| (name.to_lowercase(), value.clone()))
            .collect()
    };
    lowered(left) == lowered(right)
}

fn messages(reply: Result<Reply, StorageError>, context: &Context<'_>) -> Vec<MessageView> {
    match reply {
        Ok(Reply::Messages(views)) => views,
        other => panic!("expected messages, got {other:?}; {context}"),
    }
}

/// Checks `reply` against the model and moves the model on by `command`.
fn expect(
    model: &mut Model,
    command: &Command,
    reply: &Result<Reply, StorageError>,
    lagging: bool,
    context: &Context<'_>,
) {
    let now_ms = context.now_ms;
    if let Command::WithStoredPolicy {
        acl_version,
        command,
    } = command
    {
        // The owner runs it only while the ACL it was authorised by is the queue's current one
        // (a queue with an ACL exists: Delete Queue removes it).
        let queue = queue_of(command.queue().expect("a queue command"));
        let current = model.settings.acls[queue]
            .as_ref()
            .map(|(version, _)| *version);
        if current != Some(*acl_version) {
            assert!(
                matches!(reply, Err(StorageError::AuthenticationFailed)),
                "{context}"
            );
            return;
        }
        return expect(model, command, reply, lagging, context);
    }
    // Owned copies (texts are shared `Bytes`) keep the arms below simple.
    let (command, reply) = (command.clone(), reply.clone());
    let queue = command.queue().map(queue_of);
    let missing = queue.is_some_and(|queue| model.queues[queue].is_none());
    if missing && !matches!(command, Command::CreateQueue { .. }) {
        assert!(
            matches!(reply, Err(StorageError::QueueNotFound)),
            "{context}"
        );
        return;
    }
    match command {
        Command::WithStoredPolicy { .. } => unreachable!("unwrapped above"),
        // The console's commands (`/_azq/...`) are never made from fuzz input: their own
        // tests are in src/queue/state/tests/inspect.rs.
        Command::DeleteMessageById { .. } | Command::DeleteQueues { .. } => {
            unreachable!("not generated")
        }
        Command::SetQueueAcl { identifiers, .. } => {
            let queue = queue.expect("a queue command");
            let identifiers: Arc<[SignedIdentifier]> = identifiers.into();
            let version = model.settings.next_version();
            let replica = Replica::QueueAcl {
                queue: key(queue),
                version,
                identifiers: Some(identifiers.clone()),
            };
            assert_replicates(reply, &replica, context);
            model.settings.acls[queue] = Some((version, identifiers));
        }
        Command::GetQueueAcl { .. } => {
            let queue = queue.expect("a queue command");
            let Ok(Reply::AccessPolicies(identifiers)) = reply else {
                panic!("{context}");
            };
            let expected = model.settings.acls[queue]
                .as_ref()
                .map_or(&[][..], |(_, identifiers)| &identifiers[..]);
            assert_eq!(&identifiers[..], expected, "{context}");
        }
        Command::SetServiceProperties { account, update } => {
            let properties = Arc::new(update.applied_to(model.settings.properties(&account)));
            let version = model.settings.next_version();
            let replica = Replica::ServiceProperties {
                account: account.clone(),
                version,
                properties: properties.clone(),
            };
            assert_replicates(reply, &replica, context);
            model
                .settings
                .properties
                .insert(account, (version, properties));
        }
        Command::ApplyReplica(replica) => {
            assert!(matches!(reply, Ok(Reply::Done)), "{context}");
            model.settings.apply_foreign(&replica);
        }
        Command::CreateQueue { metadata, .. } => {
            let queue = queue.expect("a queue command");
            match &model.queues[queue] {
                None => {
                    assert!(matches!(reply, Ok(Reply::QueueCreated)), "{context}");
                    model.queues[queue] = Some(ModelQueue { metadata });
                }
                Some(existing) if metadata_equal(&existing.metadata, &metadata) => {
                    assert!(matches!(reply, Ok(Reply::QueueExists)), "{context}")
                }
                Some(_) => assert!(
                    matches!(reply, Err(StorageError::QueueAlreadyExists)),
                    "{context}"
                ),
            }
        }
        Command::DeleteQueue { .. } => {
            let queue = queue.expect("a queue command");
            // The queue's ACL goes with it, on every shard: the owner writes its removal.
            if model.settings.acls[queue].take().is_some() {
                let replica = Replica::QueueAcl {
                    queue: key(queue),
                    version: model.settings.next_version(),
                    identifiers: None,
                };
                assert_replicates(reply, &replica, context);
            } else {
                assert!(matches!(reply, Ok(Reply::Done)), "{context}");
            }
            model.messages.retain(|_, message| message.queue != queue);
            model.queues[queue] = None;
        }
        Command::ClearMessages { .. } => {
            let queue = queue.expect("a queue command");
            assert!(matches!(reply, Ok(Reply::Done)), "{context}");
            model.messages.retain(|_, message| message.queue != queue);
        }
        Command::GetQueueMetadata { .. } => {
            let queue = queue.expect("a queue command");
            let Ok(Reply::Metadata {
                metadata,
                approximate_messages_count,
            }) = reply
            else {
                panic!("{context}");
            };
            let model_queue = model.queues[queue].as_ref().expect("checked above");
            assert_eq!(metadata, model_queue.metadata, "{context}");
            let live = model.live_count(queue);
            assert!(
                approximate_messages_count >= live,
                "count below the live messages: {context}"
            );
            if !lagging {
                assert_eq!(approximate_messages_count, live, "{context}");
            }
        }
        Command::SetQueueMetadata { metadata, .. } => {
            let queue = queue.expect("a queue command");
            assert!(matches!(reply, Ok(Reply::Done)), "{context}");
            model.queues[queue]
                .as_mut()
                .expect("checked above")
                .metadata = metadata;
        }
        Command::ListQueues {
            account,
            prefix,
            marker,
            results_max,
            include_metadata,
        } => {
            let start = marker.max(prefix.clone());
            let expected: Vec<(String, Option<Metadata>)> = (0..QUEUE_KEYS)
                .filter_map(|queue| Some((key(queue), model.queues[queue].as_ref()?)))
                .filter(|(key, _)| {
                    key.account == account && key.name.starts_with(&prefix) && key.name >= start
                })
                .map(|(key, model_queue)| {
                    (
                        key.name,
                        include_metadata.then(|| model_queue.metadata.clone()),
                    )
                })
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .take(results_max + 1)
                .collect();
            let Ok(Reply::Queues(listings)) = reply else {
                panic!("{context}");
            };
            let listed: Vec<(String, Option<Metadata>)> = listings
                .into_iter()
                .map(|listing| (listing.name, listing.metadata))
                .collect();
            assert_eq!(listed, expected, "{context}");
        }
        Command::PutMessage {
            text,
            visibility_timeout_s,
            ttl_s,
            ..
        } => {
            let queue = queue.expect("a queue command");
            let views = messages(reply, context);
            assert_eq!(views.len(), 1, "{context}");
            let put = Put {
                queue,
                text,
                visibility_timeout_s,
                ttl_s,
                now_ms,
            };
            record_put(model, &put, &views[0], context);
        }
        Command::GetMessages {
            count,
            visibility_timeout_s,
            ..
        } => {
            let queue = queue.expect("a queue command");
            let views = messages(reply, context);
            // Without lag the exact visible order is compared; with lag it is not needed.
            let visible = (!lagging).then(|| model.visible(queue, now_ms));
            let returned = check_returned(model, &views, visible.as_deref(), count, context);
            let invisible_until_ms = now_ms + visibility_timeout_s * 1000;
            for (view, at) in views.iter().zip(returned) {
                let message = model.messages.get_mut(&at).expect("a returned message");
                let receipt = view.pop_receipt.expect("a get returns receipts");
                assert_eq!(view.dequeue_count, message.dequeue_count + 1, "{context}");
                assert_eq!(view.time_next_visible_ms, invisible_until_ms, "{context}");
                assert_eq!(
                    (receipt.slot, receipt.generation, receipt.lease),
                    (
                        message.slot,
                        message.generation,
                        message.lease.wrapping_add(1)
                    ),
                    "{context}"
                );
                message.dequeue_count += 1;
                message.lease = receipt.lease;
                message.invisible_until_ms = invisible_until_ms;
                let issued = Issued {
                    queue,
                    id: view.message_id,
                    receipt,
                };
                model.remember(issued);
            }
        }
        Command::PeekMessages { count, .. } => {
            let queue = queue.expect("a queue command");
            let views = messages(reply, context);
            // Without lag the exact visible order is compared; with lag it is not needed.
            let visible = (!lagging).then(|| model.visible(queue, now_ms));
            let returned = check_returned(model, &views, visible.as_deref(), count, context);
            for (view, at) in views.iter().zip(returned) {
                assert!(view.pop_receipt.is_none(), "{context}");
                assert_eq!(
                    view.dequeue_count, model.messages[&at].dequeue_count,
                    "{context}"
                );
                assert_eq!(view.time_next_visible_ms, now_ms, "{context}");
            }
        }
        Command::UpdateMessage {
            message_id,
            pop_receipt,
            visibility_timeout_s,
            text,
            ..
        } => {
            let queue = queue.expect("a queue command");
            match model.resolve(queue, message_id, pop_receipt) {
                Err(error) => assert_eq!(reply.err(), Some(error), "{context}"),
                Ok(at) => {
                    let Ok(Reply::Updated {
                        pop_receipt: new_receipt,
                        time_next_visible_ms,
                    }) = reply
                    else {
                        panic!("{context}");
                    };
                    let message = model.messages.get_mut(&at).expect("a resolved message");
                    message.lease = message.lease.wrapping_add(1);
                    assert_eq!(
                        (new_receipt.slot, new_receipt.generation, new_receipt.lease),
                        (message.slot, message.generation, message.lease),
                        "{context}"
                    );
                    assert_eq!(
                        time_next_visible_ms,
                        now_ms + visibility_timeout_s * 1000,
                        "{context}"
                    );
                    message.invisible_until_ms = if visibility_timeout_s > 0 {
                        time_next_visible_ms
                    } else {
                        message.invisible_until_ms.min(now_ms)
                    };
                    if let Some(text) = text {
                        message.text = text;
                    }
                    model.remember(Issued {
                        queue,
                        id: message_id,
                        receipt: new_receipt,
                    });
                }
            }
        }
        Command::DeleteMessage {
            message_id,
            pop_receipt,
            ..
        } => {
            let queue = queue.expect("a queue command");
            match model.resolve(queue, message_id, pop_receipt) {
                Err(error) => assert_eq!(reply.err(), Some(error), "{context}"),
                Ok(at) => {
                    assert!(matches!(reply, Ok(Reply::Done)), "{context}");
                    model.messages.remove(&at);
                }
            }
        }
    }
}

/// `reply` asks the runtime to replicate exactly `expected`.
fn assert_replicates(
    reply: Result<Reply, StorageError>,
    expected: &Replica,
    context: &Context<'_>,
) {
    match reply {
        Ok(Reply::Replicate(replica)) => assert_eq!(*replica, *expected, "{context}"),
        other => panic!("expected {expected:?}, got {other:?}; {context}"),
    }
}

/// One Put as the model records it.
struct Put {
    queue: usize,
    text: Bytes,
    visibility_timeout_s: u64,
    ttl_s: Option<u64>,
    now_ms: u64,
}

/// Checks the message a Put returned and adds it to the model.
fn record_put(model: &mut Model, put: &Put, view: &MessageView, context: &dyn std::fmt::Display) {
    let now_ms = put.now_ms;
    let receipt = view.pop_receipt.expect("a put returns a receipt");
    let slot = (receipt.slot, receipt.generation);
    assert!(
        model.ids.insert(view.message_id, slot).is_none(),
        "message ID reused: {context}"
    );
    assert_eq!(receipt.lease, 0, "{context}");
    let invisible_until_ms = now_ms + put.visibility_timeout_s * 1000;
    assert_eq!(view.insertion_ms, now_ms, "{context}");
    assert_eq!(
        view.expiration_ms,
        expiration_ms(put.ttl_s, now_ms),
        "{context}"
    );
    assert_eq!(view.time_next_visible_ms, invisible_until_ms, "{context}");
    assert_eq!(view.dequeue_count, 0, "{context}");
    // Put's reply carries no text (its response lists none); Get and Peek check the stored text.
    assert!(view.text.is_empty(), "{context}");
    assert!(
        !model.messages.contains_key(&slot),
        "a live message's slot handed out again: {context}"
    );
    let stored = ModelMessage {
        id: view.message_id,
        queue: put.queue,
        slot: receipt.slot,
        generation: receipt.generation,
        lease: 0,
        order_key: (invisible_until_ms, model.puts),
        insertion_ms: now_ms,
        invisible_until_ms,
        expiration_ms: view.expiration_ms,
        dequeue_count: 0,
        text: put.text.clone(),
    };
    model.messages.insert(slot, stored);
    model.puts += 1;
    model.remember(Issued {
        queue: put.queue,
        id: view.message_id,
        receipt,
    });
}

/// Checks the messages a Get or Peek returned and returns their slots. Nothing invisible or
/// expired appears, and the order holds. Without lag, `visible` is the model's visible messages
/// in order and they must be exactly its first `count`; with lagging timers (`None`) some
/// visible ones may be missing.
fn check_returned(
    model: &Model,
    views: &[MessageView],
    visible: Option<&[SlotKey]>,
    count: u32,
    context: &Context<'_>,
) -> Vec<SlotKey> {
    assert!(views.len() <= count as usize, "{context}");
    let mut positions = Vec::with_capacity(views.len());
    let mut seen = BTreeSet::new();
    for view in views {
        let at = model.ids.get(&view.message_id).copied();
        let Some(message) = at
            .and_then(|at| model.messages.get(&at))
            .filter(|message| message.id == view.message_id)
        else {
            panic!(
                "returned a message that is gone: {:?}; {context}",
                view.message_id
            );
        };
        let at = (message.slot, message.generation);
        assert!(
            message.is_visible(context.now_ms),
            "returned while invisible or expired: {context}"
        );
        assert!(seen.insert(message.order_key), "returned twice: {context}");
        assert_eq!(view.insertion_ms, message.insertion_ms, "{context}");
        assert_eq!(view.expiration_ms, message.expiration_ms, "{context}");
        assert_eq!(view.text, message.text, "{context}");
        positions.push(at);
    }
    let keys: Vec<(u64, u64)> = positions
        .iter()
        .map(|at| model.messages[at].order_key)
        .collect();
    assert!(
        keys.windows(2).all(|pair| pair[0] < pair[1]),
        "out of order: {context}"
    );
    if let Some(visible) = visible {
        let expected: Vec<SlotKey> = visible.iter().copied().take(count as usize).collect();
        assert_eq!(
            positions, expected,
            "not the first visible messages: {context}"
        );
    }
    positions
}

/// What a failed assertion prints: the step, its time, the command and the reply. Formatted
/// only on failure (a 64 KiB text would otherwise be printed into a string on every step).
struct Context<'a> {
    step: usize,
    now_ms: u64,
    command: &'a Command,
    reply: &'a Result<Reply, StorageError>,
}

impl std::fmt::Display for Context<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "step {} at {} ms: {:?} answered {:?}",
            self.step, self.now_ms, self.command, self.reply
        )
    }
}
