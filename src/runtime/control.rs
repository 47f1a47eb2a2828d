//! Control messages between shards, the runtime half of `governor` that the mesh carries beside
//! queue commands, and how a shard answers them: its metrics for a scrape, a fault rule added
//! or removed, whether a rule fires (shard 0 decides), the account shares (shard 0 computes
//! them), and the console's reads: a page of queues or of one queue's messages (answered from
//! `&ShardState`, running no timer and writing nothing), the shard's part of a history sample,
//! the history itself (shard 0 keeps it). Who sends them is above: `admin` and `console` (the
//! `/_azq/` endpoints) and `governance` (fault rules on the request path, the account-share
//! task).

use crate::console::history::Sample;
use crate::error::StorageError;
use crate::governor::faults::{Action, Rule};
use crate::governor::metrics::{operation_names, Exposure, Snapshot};
use crate::limits::{INSPECT_PAGE_TEXT_BYTES_MAX, METRICS_DEEPEST_QUEUES};
use crate::queue::{MessagePage, PageQuery, QueueSummary, QueuesQuery};
use crate::time::LATENCY_BUCKETS;

use super::backend::Backend;
use super::engine::Engine;

/// What one shard asks of another outside queue commands.
#[derive(Debug)]
pub enum Control {
    /// This shard's metrics, for a scrape.
    Metrics,
    /// Store this rule.
    AddRule(Box<Rule>),
    /// Remove this rule, or every rule (of these accounts, when given).
    RemoveRules(Option<String>, Option<Vec<String>>),
    /// (To shard 0.) Does this rule fire now?
    FireRule(String),
    /// (To shard 0.) The rules with how often each fired (of these accounts and of every
    /// account, when given).
    ListRules(Option<Vec<String>>),
    /// (To shard 0.) What the sender was asked for per account since its last report.
    Demand(Vec<(String, u64)>),
    /// This shard's queues with their counts (read only).
    InspectQueues(QueuesQuery),
    /// A page of a queue this shard owns (read only).
    InspectQueue(PageQuery),
    /// This shard's part of the console's history sample.
    Sample,
    /// (To shard 0.) The console's history as JSON.
    Stats {
        /// The last this many seconds.
        range_s: u64,
        /// Points after this time only.
        since_ms: u64,
    },
}

/// The answer to a `Control`.
#[derive(Debug)]
pub enum ControlReply {
    /// The shard's metrics.
    Metrics(Box<Snapshot>),
    /// Whether the rule was stored (`false`: `FAULT_RULES_MAX` reached).
    Added(bool),
    /// How many rules went.
    Removed(usize),
    /// The action, when the rule fires.
    Fired(Option<Action>),
    /// The rules as JSON.
    Rules(String),
    /// The sender's new share of each account it reported.
    Shares(Vec<(String, u64)>),
    /// The shard's queues after the asked one, and whether more follow.
    Queues(Vec<QueueSummary>, bool),
    /// A page of a queue, or `QueueNotFound`.
    Page(Result<MessagePage, StorageError>),
    /// The shard's part of a history sample.
    Sample(Box<Sample>),
    /// The history as JSON.
    Stats(String),
    /// The shard has no such facility (fault injection off): a bug in the sender.
    Unavailable,
}

/// Whether `reply` is a page of messages some of whose texts are on disk only: its owner then
/// reads them (`read_texts_shown`) before it answers, on the mesh in a task of its own.
pub fn reads_texts(reply: &ControlReply) -> bool {
    matches!(reply, ControlReply::Page(Ok(page))
        if page.messages.iter().any(|message| message.on_disk.is_some()))
}

/// `reply` with the texts on disk only of its page of messages read back, so that inspection
/// shows them (`Engine::read_texts_shown`: nothing is put back into memory): each the text the
/// page named, its message's when the page was taken. A text whose read fails (its file gone,
/// another message's entry there) stays `None` (shown as on disk).
pub async fn read_texts_shown<B: Backend>(engine: &Engine<B>, reply: ControlReply) -> ControlReply {
    let ControlReply::Page(Ok(mut page)) = reply else {
        return reply;
    };
    let wanted = page
        .messages
        .iter()
        .filter_map(|message| message.on_disk)
        .collect();
    for ((slot, generation, ..), text) in engine.read_texts_shown(wanted).await {
        let shown = page.messages.iter_mut().find(|message| {
            message
                .on_disk
                .is_some_and(|(at, of, ..)| (at, of) == (slot, generation))
        });
        if let Some(message) = shown {
            message.text = Some(text);
        }
    }
    ControlReply::Page(Ok(page))
}

/// Answers control message `message` from shard `from` on this shard; `mesh_traffic` is the
/// envelopes this shard has sent and received (`Mesh::traffic`), for its metrics.
pub fn answer<B: Backend>(
    engine: &Engine<B>,
    mesh_traffic: (u64, u64),
    from: usize,
    message: Control,
) -> ControlReply {
    let governor = &engine.governor;
    match message {
        Control::Metrics => {
            // Queue names leave the shard only when the endpoint may show them.
            let deepest_max = match governor.settings.exposure {
                Exposure::Queues => METRICS_DEEPEST_QUEUES,
                Exposure::Off | Exposure::Counts => 0,
            };
            let census = engine.census(deepest_max);
            let (mesh_sent, mesh_received) = mesh_traffic;
            ControlReply::Metrics(Box::new(Snapshot {
                shard: governor.index,
                counters: governor.metrics.counters(),
                mesh_sent,
                mesh_received,
                queues: census.queues,
                messages: census.messages,
                message_bytes: census.message_bytes,
                deepest: census
                    .deepest
                    .into_iter()
                    .map(|(queue, depth)| (queue.account, queue.name, depth))
                    .collect(),
                fault_rules: governor
                    .faults
                    .as_ref()
                    .map_or(0, |faults| faults.borrow().len() as u64),
                activity: engine.state().activity(),
                wal: engine.log_stats(),
                message_bytes_max: engine.state().message_bytes_max(),
                refusals: engine.state().refusals(),
                disk_bytes: engine.disk_bytes(),
                disk_bytes_max: engine.disk_bytes_max(),
                filesystem_free_bytes: engine.filesystem_free_bytes(),
                texts_on_disk: engine.state().texts_evicted(),
                texts_read: {
                    let read = engine.texts_read();
                    (
                        read.texts,
                        read.bytes,
                        read.failures,
                        read.waits,
                        read.ahead,
                        read.early,
                    )
                },
                text_read_cache: engine.read_cache_counts(),
            }))
        }
        Control::AddRule(rule) => {
            let Some(faults) = &governor.faults else {
                return ControlReply::Unavailable;
            };
            let added = faults.borrow_mut().add(*rule);
            governor.update_idle();
            ControlReply::Added(added)
        }
        Control::RemoveRules(id, accounts) => {
            let Some(faults) = &governor.faults else {
                return ControlReply::Unavailable;
            };
            let removed = faults
                .borrow_mut()
                .remove(id.as_deref(), accounts.as_deref());
            governor.update_idle();
            ControlReply::Removed(removed)
        }
        Control::FireRule(id) => match &governor.faults {
            Some(faults) => ControlReply::Fired(faults.borrow_mut().fire(&id)),
            None => ControlReply::Unavailable,
        },
        Control::ListRules(accounts) => match &governor.faults {
            Some(faults) => ControlReply::Rules(faults.borrow().list_json(accounts.as_deref())),
            None => ControlReply::Unavailable,
        },
        Control::Demand(report) => match &governor.share_table {
            Some(table) => ControlReply::Shares(table.borrow_mut().shares_for(from, report)),
            None => ControlReply::Unavailable,
        },
        Control::InspectQueues(query) => {
            let (queues, more) = engine.state().inspect_queues(
                query.accounts.as_deref(),
                query.after.as_ref(),
                query.limit,
                engine.now_ms(),
            );
            ControlReply::Queues(queues, more)
        }
        Control::InspectQueue(query) => ControlReply::Page(engine.state().inspect_messages(
            &query.queue,
            query.offset,
            query.limit,
            INSPECT_PAGE_TEXT_BYTES_MAX,
            engine.now_ms(),
        )),
        Control::Sample => ControlReply::Sample(Box::new(sample(engine))),
        Control::Stats { range_s, since_ms } => ControlReply::Stats(match &governor.history {
            Some(history) => {
                history
                    .borrow()
                    .points_json(range_s, since_ms, &operation_names(), LATENCY_BUCKETS)
            }
            None => "{\"step_s\":1,\"points\":[]}".to_string(),
        }),
    }
}

/// This shard's part of a history sample.
fn sample<B: Backend>(engine: &Engine<B>) -> Sample {
    let counters = engine.governor.metrics.counters();
    let (requests, errors) = counters.requests_and_errors();
    let (throttled, faults) = counters.throttled_and_faults();
    let state = engine.state();
    let (queues, messages) = state.totals();
    let wal = engine.log_stats().unwrap_or_default();
    Sample {
        time_ms: engine.now_ms(),
        requests,
        errors,
        latency_buckets: counters.latency_buckets().to_vec(),
        throttled,
        faults,
        activity: state.activity().counts(),
        wal_flushes: wal.flushes,
        wal_bytes: wal.bytes,
        messages,
        queues,
        connections: counters.connections(),
    }
}
