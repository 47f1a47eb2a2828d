//! The runtime half of the console (`crate::console`, `api::ops::console`), behind `admin`:
//! inspection gathered from the shards over control messages (read only: each shard answers
//! from `&ShardState`, running no timer and writing nothing; see `control`), the history
//! sampler on shard 0, reset on every shard, and the console's actions applied on the queue's
//! owner as a client's commands would be (answered once their changes are written). Every
//! admin call is logged on stderr and in the request log.

use std::time::Duration;

use crate::api::{AdminAnswer, ConsoleAction};
use crate::console::history::Sample;
use crate::console::{page_json, queues_json, received_json};
use crate::error::StorageError;
use crate::limits::INSPECT_QUEUES_PAGE_MAX;
use crate::queue::{
    home_shard, shard_for, Command, PageQuery, QueueKey, QueueSummary, QueuesQuery, Reply,
    ServiceProperties, ServicePropertiesUpdate,
};

use super::backend::Backend;
use super::context::ShardContext;
use super::control::{Control, ControlReply};

/// How often shard 0 samples every shard for the console's history.
const SAMPLE_INTERVAL_MS: u64 = 1000;

/// Adds `part` (one shard's) into `total`.
fn add(total: &mut Sample, part: &Sample) {
    let add_all = |total: &mut Vec<u64>, part: &[u64]| {
        total.resize(total.len().max(part.len()), 0);
        for (sum, value) in total.iter_mut().zip(part) {
            *sum += value;
        }
    };
    total.time_ms = total.time_ms.max(part.time_ms);
    add_all(&mut total.requests, &part.requests);
    add_all(&mut total.errors, &part.errors);
    add_all(&mut total.latency_buckets, &part.latency_buckets);
    total.throttled += part.throttled;
    total.faults += part.faults;
    for (sum, value) in total.activity.iter_mut().zip(part.activity) {
        *sum += value;
    }
    total.wal_flushes += part.wal_flushes;
    total.wal_bytes += part.wal_bytes;
    total.messages += part.messages;
    total.queues += part.queues;
    total.connections += part.connections;
}

/// On shard 0: samples every shard once a second into the history, until the server stops.
pub fn start_sampler<B: Backend>(shard: &std::rc::Rc<ShardContext<B>>) {
    if shard.engine.governor.history.is_none() {
        return;
    }
    let shard = shard.clone();
    B::spawn(async move {
        while !shard.stopping() {
            B::sleep(Duration::from_millis(SAMPLE_INTERVAL_MS)).await;
            let mut total = Sample::default();
            for index in 0..shard.shards() {
                match shard.control(index, Control::Sample).await {
                    Ok(ControlReply::Sample(part)) => add(&mut total, &part),
                    _ => return,
                }
            }
            if let Some(history) = &shard.engine.governor.history {
                history.borrow_mut().record(total);
            }
        }
    });
}

/// `GET /_azq/inspect`: every shard's queues after `after`, merged in order.
pub async fn inspect_queues<B: Backend>(
    shard: &ShardContext<B>,
    mut query: QueuesQuery,
) -> AdminAnswer {
    query.limit = query.limit.min(INSPECT_QUEUES_PAGE_MAX);
    let limit = query.limit;
    let mut queues: Vec<QueueSummary> = Vec::new();
    let mut more = false;
    for index in 0..shard.shards() {
        match shard
            .control(index, Control::InspectQueues(query.clone()))
            .await
        {
            Ok(ControlReply::Queues(part, part_more)) => {
                queues.extend(part);
                more |= part_more;
            }
            _ => return AdminAnswer::error(503, "a shard did not answer"),
        }
    }
    queues.sort_by(|a, b| a.key.cmp(&b.key));
    if queues.len() > limit {
        queues.truncate(limit);
        more = true;
    }
    let next = more
        .then(|| {
            queues
                .last()
                .map(|queue| format!("{}/{}", queue.key.account, queue.key.name))
        })
        .flatten();
    let now_ms = shard.engine.now_ms();
    AdminAnswer::json(
        200,
        queues_json(&queues, next.as_deref(), shard.service.admin(), now_ms),
    )
}

/// `GET /_azq/inspect/{account}/{queue}`: a page of the queue's messages, from its owner.
pub async fn inspect_queue<B: Backend>(shard: &ShardContext<B>, query: PageQuery) -> AdminAnswer {
    let queue = query.queue.clone();
    let owner = shard_for(&queue, shard.shards());
    match shard.control(owner, Control::InspectQueue(query)).await {
        Ok(ControlReply::Page(Ok(page))) => {
            AdminAnswer::json(200, page_json(&page, shard.engine.now_ms()))
        }
        Ok(ControlReply::Page(Err(_))) => {
            AdminAnswer::error(404, &format!("no queue {}/{}", queue.account, queue.name))
        }
        _ => AdminAnswer::error(503, "a shard did not answer"),
    }
}

/// Logs an admin call on stderr and in the request log.
fn log_admin<B: Backend>(shard: &ShardContext<B>, what: &str) {
    eprintln!("azq: admin: {what}");
    shard.log_line(&format!("admin: {what}"));
}

/// `POST /_azq/reset`: deletes the matching queues on every shard and, without a glob, resets
/// the accounts' service properties (CORS, logging and metrics settings) to a new account's;
/// only `accounts`' when given (the caller's), else every account's.
pub async fn reset<B: Backend>(
    shard: &ShardContext<B>,
    accounts: Option<Vec<String>>,
    glob: Option<String>,
) -> AdminAnswer {
    let mut deleted = 0;
    let scopes: Vec<Option<String>> = match &accounts {
        Some(accounts) => accounts.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    for account in scopes {
        let command = Command::DeleteQueues {
            account,
            glob: glob.clone(),
        };
        match shard.on_every_shard(command).await {
            Ok(replies) => {
                for reply in replies {
                    if let Reply::Count(count) = reply {
                        deleted += count;
                    }
                }
            }
            Err(error) => {
                return AdminAnswer::error(503, &format!("reset failed: {}", error.code()))
            }
        }
    }
    let mut properties_reset = 0;
    if glob.is_none() {
        let accounts = match &accounts {
            Some(accounts) => accounts.clone(),
            None => shard.service.account_names(),
        };
        for account in accounts {
            let defaults = ServiceProperties::default();
            let update = ServicePropertiesUpdate {
                logging: Some(defaults.logging),
                hour_metrics: Some(defaults.hour_metrics),
                minute_metrics: Some(defaults.minute_metrics),
                cors: Some(Vec::new()),
            };
            let command = Command::SetServiceProperties {
                account: account.clone(),
                update: Box::new(update),
            };
            let home = home_shard(&account, shard.shards());
            if let Err(error) = shard.replicated(home, command).await {
                return AdminAnswer::error(503, &format!("reset failed: {}", error.code()));
            }
            properties_reset += 1;
        }
    }
    log_admin(
        shard,
        &format!(
            "reset (accounts {}, queues {}): {deleted} queues deleted, properties of \
             {properties_reset} accounts reset",
            accounts
                .as_ref()
                .map_or("*".to_string(), |accounts| accounts.join(",")),
            glob.as_deref().unwrap_or("*")
        ),
    );
    AdminAnswer::json(
        200,
        format!("{{\"queues_deleted\":{deleted},\"accounts_reset\":{properties_reset}}}"),
    )
}

/// One of the console's actions on `queue`, applied on its owner.
pub async fn act<B: Backend>(
    shard: &ShardContext<B>,
    queue: QueueKey,
    action: ConsoleAction,
) -> AdminAnswer {
    let owner = shard_for(&queue, shard.shards());
    let name = format!("{}/{}", queue.account, queue.name);
    let failed = |error: StorageError| {
        let status = error.status();
        AdminAnswer::error(status, &format!("{name}: {}", error.code()))
    };
    match action {
        ConsoleAction::Create => {
            let command = Command::CreateQueue {
                queue,
                metadata: Vec::new(),
            };
            match shard.apply_durably(owner, command).await {
                Ok(reply) => {
                    log_admin(shard, &format!("create {name}"));
                    let created = matches!(reply, Reply::QueueCreated);
                    AdminAnswer::json(
                        if created { 201 } else { 200 },
                        format!("{{\"created\":{created}}}"),
                    )
                }
                Err(error) => failed(error),
            }
        }
        ConsoleAction::Send {
            text,
            visibility_delay_s,
            ttl_s,
            count,
        } => {
            let mut put = 0;
            for _ in 0..count {
                let command = Command::PutMessage {
                    queue: queue.clone(),
                    text: text.clone(),
                    visibility_timeout_s: visibility_delay_s,
                    ttl_s,
                };
                match shard.apply_durably(owner, command).await {
                    Ok(_) => put += 1,
                    Err(error) if put == 0 => return failed(error),
                    Err(_) => break,
                }
            }
            log_admin(shard, &format!("send {put} of {count} messages to {name}"));
            AdminAnswer::json(201, format!("{{\"put\":{put}}}"))
        }
        ConsoleAction::Receive {
            count,
            visibility_timeout_s,
        } => {
            let command = Command::GetMessages {
                queue,
                count,
                visibility_timeout_s,
            };
            match shard.apply_durably(owner, command).await {
                Ok(Reply::Messages(views)) => {
                    log_admin(shard, &format!("receive {} from {name}", views.len()));
                    AdminAnswer::json(200, received_json(&views))
                }
                Ok(_) => AdminAnswer::error(500, "unexpected reply"),
                Err(error) => failed(error),
            }
        }
        ConsoleAction::Delete(message_id) => {
            let command = Command::DeleteMessageById { queue, message_id };
            match shard.apply_durably(owner, command).await {
                Ok(_) => {
                    log_admin(shard, &format!("delete {message_id} from {name}"));
                    AdminAnswer::json(200, "{\"deleted\":true}".to_string())
                }
                Err(error) => failed(error),
            }
        }
        ConsoleAction::Clear => {
            match shard
                .apply_durably(owner, Command::ClearMessages { queue })
                .await
            {
                Ok(_) => {
                    log_admin(shard, &format!("clear {name}"));
                    AdminAnswer::json(200, "{\"cleared\":true}".to_string())
                }
                Err(error) => failed(error),
            }
        }
    }
}
