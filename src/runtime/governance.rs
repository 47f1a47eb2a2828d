//! The control plane beside the request path. The connection loop calls it at fixed points and
//! nowhere else: around a step's execution, once the answer is encoded, and once a batch of
//! answers is written. When the shard's governor is idle (no account limit, no `--latency`, no
//! fault rule: `is_idle`, one `Cell<bool>` check) the step goes straight to `execute`;
//! otherwise `govern` runs it through the account limit, the fault rules (shard 0 says whether
//! a matching rule fires) and, after it, `--latency` on the backend's timer, so the shard serves
//! other connections meanwhile.
//! `answered` counts the answer in the shard's metrics and keeps a successful one in the
//! connection's `Unwritten`, which `written` turns into end-to-end latencies (arrival to answer
//! written, the log's wait included) once the batch is written. `start` runs the task that
//! rebalances the shard's share of each account's limit. The per-queue limit is not here: it
//! is decided by the queue's owner, in `Engine::apply`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::api::{Outcome, Step};
use crate::error::StorageError;
use crate::governor::faults::Action;
use crate::governor::metrics::{operation_slot, Scope};
use crate::limits::ACCOUNT_SHARE_INTERVAL_MS;
use crate::operation::Operation;
use crate::queue::Command;

use super::backend::Backend;
use super::context::ShardContext;
use super::control::{Control, ControlReply};
use super::execute::{execute, Executed};

/// Whether the shard's governor is idle (no account limit, no `--latency`, no fault rule): then
/// a request's step goes straight to `execute`, else through `govern`.
pub fn is_idle<B: Backend>(shard: &ShardContext<B>) -> bool {
    shard.engine.governor.is_idle()
}

/// A connection's successful answers encoded but not yet written: each one's operation slot
/// (`operation_slot`) and arrival, for its end-to-end latency once written.
#[derive(Default)]
pub struct Unwritten(Vec<(usize, Instant)>);

/// Counts an answered request in the shard's metrics: its operation (`None`: not routed), the
/// status it was answered with, and its time from `started` (parsed) to encoded answer. A
/// successful one waits in `unwritten` until `written`.
pub fn answered<B: Backend>(
    shard: &ShardContext<B>,
    operation: Option<Operation>,
    status: u16,
    started: Instant,
    unwritten: &mut Unwritten,
) {
    shard
        .engine
        .governor
        .metrics
        .request(operation, status, started.elapsed().as_micros() as u64);
    if status < 400 {
        unwritten.0.push((operation_slot(operation), started));
    }
}

/// Counts the end-to-end latency of the answers in `unwritten` when the write that carried
/// them `delivered` them (else they are forgotten: the client never heard them).
pub fn written<B: Backend>(shard: &ShardContext<B>, unwritten: &mut Unwritten, delivered: bool) {
    if delivered && !unwritten.0.is_empty() {
        let now = Instant::now();
        let metrics = &shard.engine.governor.metrics;
        for &(operation, started) in &unwritten.0 {
            metrics.end_to_end(operation, (now - started).as_micros() as u64);
        }
    }
    unwritten.0.clear();
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
            None => execute(shard, step, shard.engine.now_ms()).await,
            Some(Action::Delay { delay_ms }) => {
                B::sleep(Duration::from_millis(delay_ms)).await;
                execute(shard, step, shard.engine.now_ms()).await
            }
            Some(Action::Error { error, apply }) => {
                // Applied or not, the client hears only the error; an applied change is
                // answered once it is written, like any other.
                let durable_at = if apply {
                    execute(shard, step, shard.engine.now_ms()).await.durable_at
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
                    if let Some(sequence) =
                        execute(shard, step, shard.engine.now_ms()).await.durable_at
                    {
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

/// Starts the shard's background control tasks: with an account limit over several shards,
/// the task that reports demand to shard 0 and applies the share it answers.
pub fn start<B: Backend>(shard: &Rc<ShardContext<B>>) {
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
