//! `ShardContext`: what one shard's tasks share, and the runtime half of the request path:
//! executing a plan's step where it must run (locally, on another shard over the mesh, on every
//! shard, or on a setting's writer and then its replicas), plus the shard's request log. Lives on
//! one thread (`Rc`), so nothing here locks.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;

use crate::api::{Outcome, Service, Step};
use crate::error::StorageError;
use crate::http::Request;
use crate::queue::{Command, Reply};

use super::backend::Backend;
use super::engine::Engine;
use super::mesh::{Mesh, PendingReply};
use super::Lifecycle;

/// Everything a shard's tasks share.
pub struct ShardContext<B: Backend> {
    /// This shard's index, in `0..shards`.
    pub index: usize,
    /// The shard's API: routing, authentication (with its SAS cache), responses.
    pub service: Service,
    /// The shard's queue state and its timer.
    pub engine: Rc<Engine>,
    mesh: Rc<Mesh<B>>,
    shards: usize,
    lifecycle: Arc<Lifecycle>,
    /// Open connections.
    pub connections: Cell<usize>,
    /// Requests being executed or answered right now.
    in_flight: Cell<usize>,
    debug_log: Option<RefCell<std::fs::File>>,
}

/// Decrements `in_flight` when a request is done.
pub struct Busy<'context, B: Backend>(&'context ShardContext<B>);

impl<B: Backend> Drop for Busy<'_, B> {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

/// A command's reply, here or on its way from another shard.
enum Pending<'mesh, B: Backend> {
    Here(Result<Reply, StorageError>),
    There(PendingReply<'mesh, B>),
}

impl<B: Backend> Pending<'_, B> {
    async fn reply(self) -> Result<Reply, StorageError> {
        match self {
            Pending::Here(outcome) => outcome,
            Pending::There(pending) => pending.await,
        }
    }
}

impl<B: Backend> ShardContext<B> {
    /// The context of shard `index` of `shards`.
    pub fn new(
        index: usize,
        shards: usize,
        service: Service,
        engine: Rc<Engine>,
        mesh: Rc<Mesh<B>>,
        lifecycle: Arc<Lifecycle>,
        debug_log: Option<std::fs::File>,
    ) -> ShardContext<B> {
        ShardContext {
            index,
            service,
            engine,
            mesh,
            shards,
            lifecycle,
            connections: Cell::new(0),
            in_flight: Cell::new(0),
            debug_log: debug_log.map(RefCell::new),
        }
    }

    /// Marks a request as in flight until the guard drops.
    pub fn busy(&self) -> Busy<'_, B> {
        self.in_flight.set(self.in_flight.get() + 1);
        Busy(self)
    }

    /// Requests being executed or answered right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// Whether the server is shutting down (connections close after their current request).
    pub fn stopping(&self) -> bool {
        self.lifecycle.stop_requested()
    }

    /// Runs a plan's step: locally when this shard owns the queue, else over the mesh. Steps
    /// that reach several shards send to all of them before waiting for any.
    pub async fn execute(&self, step: Step) -> Outcome {
        match step {
            Step::Fail(error) => Outcome::Reply(Err(error)),
            Step::Answer(reply) => Outcome::Reply(Ok(reply)),
            Step::Shard { shard, command } => Outcome::Reply(self.apply_on(shard, command).await),
            Step::EveryShard(command) => {
                let mut pending = Vec::with_capacity(self.shards);
                for shard in 0..self.shards {
                    pending.push(self.start_on(shard, command.clone()).await);
                }
                let mut parts = Vec::with_capacity(self.shards);
                for part in pending {
                    parts.push(part.reply().await);
                }
                Outcome::Parts(parts)
            }
            Step::Replicated { shard, command } => {
                Outcome::Reply(self.replicated(shard, command).await)
            }
        }
    }

    /// Applies `command` on `shard`, the writer of a replicated setting. When it answers with
    /// a replica, every other shard stores it before the client hears of the change, so its
    /// next request sees it whichever shard it reaches.
    async fn replicated(&self, shard: usize, command: Command) -> Result<Reply, StorageError> {
        let Reply::Replicate(replica) = self.apply_on(shard, command).await? else {
            return Ok(Reply::Done);
        };
        let mut pending = Vec::with_capacity(self.shards);
        for other in (0..self.shards).filter(|&other| other != shard) {
            let command = Command::ApplyReplica((*replica).clone());
            pending.push(self.start_on(other, command).await);
        }
        for stored in pending {
            stored.reply().await?;
        }
        Ok(Reply::Done)
    }

    /// Applies `command` on `shard`: directly when it is this one, else over the mesh.
    async fn apply_on(&self, shard: usize, command: Command) -> Result<Reply, StorageError> {
        self.start_on(shard, command).await.reply().await
    }

    /// Starts `command` on `shard`: applied at once when it is this one, else sent.
    async fn start_on(&self, shard: usize, command: Command) -> Pending<'_, B> {
        if shard == self.index {
            Pending::Here(self.engine.apply(command))
        } else {
            match self.mesh.send(shard, command).await {
                Ok(pending) => Pending::There(pending),
                Err(error) => Pending::Here(Err(error)),
            }
        }
    }

    /// Writes one line per request to the debug log (`--debug FILE`), if enabled.
    pub fn log_request(&self, request: &Request, outcome: &Outcome) {
        if self.debug_log.is_none() {
            return;
        }
        let describe = |outcome: &Result<Reply, StorageError>| match outcome {
            Ok(_) => "ok".to_string(),
            Err(error) => format!("{} {}", error.status(), error.code()),
        };
        let result = match outcome {
            Outcome::Reply(outcome) => describe(outcome),
            Outcome::Parts(parts) => parts.iter().map(describe).collect::<Vec<_>>().join(","),
        };
        self.log_line(&format!(
            "shard {} {} {} -> {result}",
            self.index,
            request.method.as_str(),
            String::from_utf8_lossy(request.target())
        ));
    }

    /// Writes `line` to the debug log, if enabled.
    pub fn log_line(&self, line: &str) {
        if let Some(log) = &self.debug_log {
            let _ = writeln!(log.borrow_mut(), "{} {line}", self.engine.now_ms());
        }
    }
}
