//! azq's own endpoints that need the shards, executed: `/_azq/metrics` (every shard's snapshot,
//! asked in turn and rendered merged) and `/_azq/faults` (a rule added or removed on every
//! shard, the rules listed by shard 0, which counts how often each fired), and the console's
//! endpoints, which `console` answers: `/_azq/inspect`, `/_azq/stats`, `/_azq/reset` and the
//! console's actions. Planning decided which (`api::AdminStep`); this is the control plane's
//! side of answering it.

use crate::api::{AdminAnswer, AdminStep};
use crate::governor::metrics;
use crate::limits::FAULT_RULES_MAX;

use super::backend::Backend;
use super::console;
use super::context::ShardContext;
use super::control::{Control, ControlReply};

/// Executes an admin step (`/_azq/metrics`, `/_azq/faults`, the console's endpoints).
pub async fn execute_admin<B: Backend>(shard: &ShardContext<B>, step: AdminStep) -> AdminAnswer {
    match step {
        AdminStep::Answer(answer) => answer,
        AdminStep::Metrics => {
            if shard.engine.governor.settings.exposure == metrics::Exposure::Off {
                return AdminAnswer::error(404, "metrics are off (--metrics off)");
            }
            let mut snapshots = Vec::with_capacity(shard.shards());
            for index in 0..shard.shards() {
                match shard.control(index, Control::Metrics).await {
                    Ok(ControlReply::Metrics(snapshot)) => snapshots.push(*snapshot),
                    _ => return AdminAnswer::error(503, "a shard did not answer"),
                }
            }
            let resident_memory_bytes = super::os::resident_memory_bytes();
            let settings = shard.engine.governor.settings;
            AdminAnswer::metrics(metrics::render(&snapshots, settings, resident_memory_bytes))
        }
        AdminStep::ListRules(accounts) => {
            match shard.control(0, Control::ListRules(accounts)).await {
                Ok(ControlReply::Rules(json)) => AdminAnswer::json(200, json),
                _ => AdminAnswer::error(503, "shard 0 did not answer"),
            }
        }
        AdminStep::AddRule(mut rule) => {
            let Some(faults) = &shard.engine.governor.faults else {
                return AdminAnswer::error(404, "fault injection is off (--admin)");
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
                            &format!("at most {} fault rules", FAULT_RULES_MAX),
                        );
                    }
                    _ => return AdminAnswer::error(503, "a shard did not answer"),
                }
            }
            eprintln!("azq: fault rule {id} added: {described}");
            shard.log_line(&format!("fault rule {id} added: {described}"));
            AdminAnswer::json(201, format!("{{\"id\":{}}}", json_string(&id)))
        }
        AdminStep::InspectQueues(query) => console::inspect_queues(shard, query).await,
        AdminStep::InspectQueue(query) => console::inspect_queue(shard, query).await,
        AdminStep::Stats { range_s, since_ms } => {
            match shard.control(0, Control::Stats { range_s, since_ms }).await {
                Ok(ControlReply::Stats(json)) => AdminAnswer::json(200, json),
                _ => AdminAnswer::error(503, "shard 0 did not answer"),
            }
        }
        AdminStep::Reset { accounts, glob } => console::reset(shard, accounts, glob).await,
        AdminStep::Console { queue, action } => console::act(shard, queue, action).await,
        AdminStep::RemoveRules(id, accounts) => {
            let mut removed = 0;
            for index in 0..shard.shards() {
                let control = Control::RemoveRules(id.clone(), accounts.clone());
                match shard.control(index, control).await {
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
