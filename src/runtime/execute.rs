//! Executing a plan's step where it must run: the request path's third stage, between planning
//! (`api::Service::plan`) and answering (`api::Service::respond`). A queue step runs through the
//! shard's context (locally, on the owner over the mesh, on every shard, or on a setting's
//! writer and then its replicas); an admin step (`/_azq/metrics`, `/_azq/faults`) through
//! `admin`.

use std::cell::Cell;

use crate::api::{Outcome, Step};

use super::admin;
use super::backend::Backend;
use super::context::ShardContext;

/// A step executed: its outcome, and the local log sequence that must be written before the
/// client may hear of it (`Engine::durable`). The caller waits for it only when it is about to
/// write the answer, so that the next pipelined request is applied meanwhile and one sync
/// covers them all.
pub struct Executed {
    /// What the step answered.
    pub outcome: Outcome,
    /// The log sequence to wait for, when the step applied something on this shard.
    pub durable_at: Option<u64>,
}

/// Runs a plan's step: locally when this shard owns the queue, else over the mesh. Steps that
/// reach several shards send to all of them before waiting for any. `now_ms`: the caller's
/// reading of `Engine::now_ms` just before, the time a queue command applied here runs at (one
/// clock read per request; a command applied on another shard, or on several, runs at the
/// clock that shard reads when it applies it).
pub async fn execute<B: Backend>(shard: &ShardContext<B>, step: Step, now_ms: u64) -> Executed {
    let durable_at = Cell::new(None);
    let outcome = match step {
        Step::Fail(error) => Outcome::Reply(Err(error)),
        Step::Answer(reply) => Outcome::Reply(Ok(reply)),
        Step::Shard {
            shard: owner,
            command,
        } => Outcome::Reply(shard.apply_on_at(owner, command, now_ms, &durable_at).await),
        Step::EveryShard(command) => Outcome::Parts(shard.every_shard(command, &durable_at).await),
        Step::Replicated {
            shard: writer,
            command,
        } => Outcome::Reply(shard.replicated(writer, command).await),
        Step::Admin(step) => Outcome::Admin(admin::execute_admin(shard, step).await),
    };
    Executed {
        outcome,
        durable_at: durable_at.get(),
    }
}
