//! Control messages between shards, the runtime half of `governor` that the mesh carries beside
//! queue commands, and how a shard answers them: its metrics for a scrape, a fault rule added
//! or removed, whether a rule fires (shard 0 decides), the account shares (shard 0 computes
//! them). Who sends them is above: `admin` (the `/_azq/` endpoints) and `governance` (fault
//! rules on the request path, the account-share task).

use crate::governor::faults::{Action, Rule};
use crate::governor::metrics::Snapshot;
use crate::limits::METRICS_DEEPEST_QUEUES;

use super::backend::Backend;
use super::engine::Engine;

/// What one shard asks of another outside queue commands.
#[derive(Debug)]
pub enum Control {
    /// This shard's metrics, for a scrape.
    Metrics,
    /// Store this rule.
    AddRule(Box<Rule>),
    /// Remove this rule, or every rule.
    RemoveRules(Option<String>),
    /// (To shard 0.) Does this rule fire now?
    FireRule(String),
    /// (To shard 0.) The rules with how often each fired.
    ListRules,
    /// (To shard 0.) What the sender was asked for per account since its last report.
    Demand(Vec<(String, u64)>),
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
    /// The shard has no such facility (fault injection off): a bug in the sender.
    Unavailable,
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
            let census = engine.census(METRICS_DEEPEST_QUEUES);
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
        Control::RemoveRules(id) => {
            let Some(faults) = &governor.faults else {
                return ControlReply::Unavailable;
            };
            let removed = faults.borrow_mut().remove(id.as_deref());
            governor.update_idle();
            ControlReply::Removed(removed)
        }
        Control::FireRule(id) => match &governor.faults {
            Some(faults) => ControlReply::Fired(faults.borrow_mut().fire(&id)),
            None => ControlReply::Unavailable,
        },
        Control::ListRules => match &governor.faults {
            Some(faults) => ControlReply::Rules(faults.borrow().list_json()),
            None => ControlReply::Unavailable,
        },
        Control::Demand(report) => match &governor.share_table {
            Some(table) => ControlReply::Shares(table.borrow_mut().shares_for(from, report)),
            None => ControlReply::Unavailable,
        },
    }
}
