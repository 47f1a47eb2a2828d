//! The runtime half of `governor`: control messages between shards and what a request goes
//! through when something is configured.
//!
//! - `answer`: how a shard answers another's control message (its metrics for a scrape, a fault
//!   rule added or removed, whether a rule fires: shard 0 decides, the account shares: shard 0
//!   computes them).
//! - `govern`: a request's path when the shard's governor is not idle: the account limit, fault
//!   rules, then `--latency` on a timer (the shard serves other connections meanwhile).
//! - `execute_admin`: the `/_azq/metrics` and `/_azq/faults` endpoints, over the mesh.
//! - `start`: the task that rebalances a shard's share of each account's limit.

use std::time::Duration;

use crate::api::{AdminAnswer, AdminStep, Operation, Outcome, Step};
use crate::config::{ACCOUNT_SHARE_INTERVAL_MS, METRICS_DEEPEST_QUEUES};
use crate::console::history::Sample;
use crate::error::StorageError;
use crate::governor::faults::{Action, Rule};
use crate::governor::metrics::{self, Scope, Snapshot};
use crate::queue::{Command, MessagePage, QueueKey, QueueSummary};

use super::backend::Backend;
use super::console;
use super::context::{Executed, ShardContext};
use super::engine::Engine;
use super::mesh::Mesh;

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
    /// This shard's queues with their counts (read only).
    InspectQueues {
        /// Only this account's.
        account: Option<String>,
        /// Only those after this one.
        after: Option<QueueKey>,
        /// At most this many.
        limit: usize,
    },
    /// A page of this shard's queue (read only).
    InspectQueue {
        /// The queue, which this shard owns.
        queue: QueueKey,
        /// Messages to skip.
        offset: u64,
        /// At most this many.
        limit: usize,
    },
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

/// Answers control message `message` from shard `from` on this shard.
pub fn answer<B: Backend>(
    engine: &Engine<B>,
    mesh: &Mesh<B>,
    from: usize,
    message: Control,
) -> ControlReply {
    let governor = &engine.governor;
    match message {
        Control::Metrics => {
            let census = engine.census(METRICS_DEEPEST_QUEUES);
            let (mesh_sent, mesh_received) = mesh.traffic();
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
        Control::InspectQueues { .. } | Control::InspectQueue { .. } => {
            console::answer_inspection(engine, message)
        }
        Control::Sample => ControlReply::Sample(Box::new(console::sample(engine))),
        Control::Stats { range_s, since_ms } => {
            ControlReply::Stats(console::stats_json(engine, range_s, since_ms))
        }
    }
}

/// The account a planned step acts for, if it reaches a shard's queue state.
fn step_account(step: &Step) -> Option<&str> {
    let command = match step {
        Step::Shard { command, .. }
        | Step::Replicated { command, .. }
        | Step::EveryShard(command) => command,
        Step::Fail(_) | Step::Answer(_) | Step::Admin(_) => return None,
    };
    command_account(command)
}

fn command_account(command: &Command) -> Option<&str> {
    if let Some(queue) = command.queue() {
        return Some(&queue.account);
    }
    match command {
        Command::ListQueues { account, .. } | Command::SetServiceProperties { account, .. } => {
            Some(account)
        }
        _ => None,
    }
}

/// The queue a planned step acts on, if any.
fn step_queue(step: &Step) -> Option<&str> {
    match step {
        Step::Shard { command, .. } | Step::Replicated { command, .. } => {
            command.queue().map(|queue| queue.name.as_str())
        }
        _ => None,
    }
}

/// Runs a request's step through the account limit, the fault rules and `--latency`. `None`:
/// close the connection without an answer (a reset fault).
pub async fn govern<B: Backend>(
    shard: &ShardContext<B>,
    step: Step,
    operation: Option<Operation>,
    now_ms: u64,
) -> Option<Executed> {
    let governor = &shard.engine.governor;
    let refused = |error| Executed {
        outcome: Outcome::Reply(Err(error)),
        durable_at: None,
    };
    let mut executed = None;
    if let (Some(throttle), Some(account)) = (&governor.account_throttle, step_account(&step)) {
        if !throttle.borrow_mut().take(account, now_ms) {
            governor.metrics.throttled(Scope::Account);
            executed = Some(refused(StorageError::AccountRateExceeded));
        }
    }
    let executed = match executed {
        Some(executed) => executed,
        None => match fault_for(shard, &step, operation).await {
            None => shard.execute(step).await,
            Some(Action::Delay { delay_ms }) => {
                B::sleep(Duration::from_millis(delay_ms)).await;
                shard.execute(step).await
            }
            Some(Action::Error { error, apply }) => {
                // Applied or not, the client hears only the error; an applied change is
                // answered once it is written, like any other.
                let durable_at = if apply {
                    shard.execute(step).await.durable_at
                } else {
                    None
                };
                Executed {
                    outcome: Outcome::Reply(Err(error)),
                    durable_at,
                }
            }
            Some(Action::Reset { apply }) => {
                if apply {
                    if let Some(sequence) = shard.execute(step).await.durable_at {
                        shard.engine.durable(sequence).await;
                    }
                }
                return None;
            }
        },
    };
    let latency_us = governor.latency_us();
    if latency_us > 0 {
        B::sleep(Duration::from_micros(latency_us)).await;
    }
    Some(executed)
}

/// The action of the first rule the request matches, if shard 0 says it fires.
async fn fault_for<B: Backend>(
    shard: &ShardContext<B>,
    step: &Step,
    operation: Option<Operation>,
) -> Option<Action> {
    let governor = &shard.engine.governor;
    let operation = operation?;
    let id = governor
        .faults
        .as_ref()?
        .borrow()
        .matching(step_account(step), step_queue(step), operation)?
        .to_string();
    let Ok(ControlReply::Fired(Some(action))) =
        shard.control(0, Control::FireRule(id.clone())).await
    else {
        return None;
    };
    governor.metrics.fault_fired(action.label());
    shard.log_line(&format!(
        "fault rule {id} fired on {}: {}",
        operation.name(),
        action.label()
    ));
    Some(action)
}

/// Executes an admin step (`/_azq/metrics`, `/_azq/faults`).
pub async fn execute_admin<B: Backend>(shard: &ShardContext<B>, step: AdminStep) -> AdminAnswer {
    match step {
        AdminStep::Answer(answer) => answer,
        AdminStep::Metrics => {
            let mut snapshots = Vec::with_capacity(shard.shards());
            for index in 0..shard.shards() {
                match shard.control(index, Control::Metrics).await {
                    Ok(ControlReply::Metrics(snapshot)) => snapshots.push(*snapshot),
                    _ => return AdminAnswer::error(503, "a shard did not answer"),
                }
            }
            AdminAnswer::metrics(metrics::render(&snapshots, shard.engine.governor.settings))
        }
        AdminStep::ListRules => match shard.control(0, Control::ListRules).await {
            Ok(ControlReply::Rules(json)) => AdminAnswer::json(200, json),
            _ => AdminAnswer::error(503, "shard 0 did not answer"),
        },
        AdminStep::AddRule(mut rule) => {
            let Some(faults) = &shard.engine.governor.faults else {
                return AdminAnswer::error(404, "fault injection is off (--faults-api)");
            };
            rule.id = faults.borrow_mut().next_id(shard.index);
            let id = rule.id.clone();
            let described = serde_json::to_string(&rule.spec).unwrap_or_default();
            for index in 0..shard.shards() {
                match shard.control(index, Control::AddRule(rule.clone())).await {
                    Ok(ControlReply::Added(true)) => {}
                    Ok(ControlReply::Added(false)) => {
                        // Every shard holds the same rules, so the first refuses or none does.
                        return AdminAnswer::error(
                            400,
                            &format!("at most {} fault rules", crate::config::FAULT_RULES_MAX),
                        );
                    }
                    _ => return AdminAnswer::error(503, "a shard did not answer"),
                }
            }
            eprintln!("azq: fault rule {id} added: {described}");
            shard.log_line(&format!("fault rule {id} added: {described}"));
            AdminAnswer::json(201, format!("{{\"id\":{}}}", json_string(&id)))
        }
        AdminStep::InspectQueues {
            account,
            after,
            limit,
        } => console::inspect_queues(shard, account, after, limit).await,
        AdminStep::InspectQueue {
            queue,
            offset,
            limit,
        } => console::inspect_queue(shard, queue, offset, limit).await,
        AdminStep::Stats { range_s, since_ms } => {
            match shard.control(0, Control::Stats { range_s, since_ms }).await {
                Ok(ControlReply::Stats(json)) => AdminAnswer::json(200, json),
                _ => AdminAnswer::error(503, "shard 0 did not answer"),
            }
        }
        AdminStep::Reset { account, glob } => console::reset(shard, account, glob).await,
        AdminStep::Console { queue, action } => console::act(shard, queue, action).await,
        AdminStep::RemoveRules(id) => {
            let mut removed = 0;
            for index in 0..shard.shards() {
                match shard.control(index, Control::RemoveRules(id.clone())).await {
                    Ok(ControlReply::Removed(count)) => removed = removed.max(count),
                    _ => return AdminAnswer::error(503, "a shard did not answer"),
                }
            }
            let what = id.as_deref().unwrap_or("*");
            eprintln!("azq: fault rules removed ({what}): {removed}");
            shard.log_line(&format!("fault rules removed ({what}): {removed}"));
            match id {
                Some(id) if removed == 0 => AdminAnswer::error(404, &format!("no fault rule {id}")),
                _ => AdminAnswer::json(200, format!("{{\"removed\":{removed}}}")),
            }
        }
    }
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// Starts the shard's background control tasks: with an account limit over several shards,
/// the task that reports demand to shard 0 and applies the share it answers.
pub fn start<B: Backend>(shard: &std::rc::Rc<ShardContext<B>>) {
    console::start_sampler(shard);
    if shard.engine.governor.account_throttle.is_none() || shard.shards() == 1 {
        return;
    }
    let shard = shard.clone();
    B::spawn(async move {
        while !shard.stopping() {
            B::sleep(Duration::from_millis(ACCOUNT_SHARE_INTERVAL_MS)).await;
            let Some(throttle) = &shard.engine.governor.account_throttle else {
                return;
            };
            let demand = throttle.borrow_mut().take_demand();
            if let Ok(ControlReply::Shares(shares)) =
                shard.control(0, Control::Demand(demand)).await
            {
                throttle
                    .borrow_mut()
                    .set_shares(&shares, shard.engine.now_ms());
            }
        }
    });
}
