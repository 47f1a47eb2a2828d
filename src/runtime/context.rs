//! `ShardContext`: what one shard's tasks share, and the ways a command reaches the queue state
//! from here: applied locally, shipped to its owner over the mesh, sent to every shard, or
//! applied on a setting's writer and then its replicas; a control message sent to a shard
//! (`control`); and the shard's request log. `execute` decides which a step takes. Lives on one
//! thread (`Rc`), so nothing here locks.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::api::{Outcome, Service};
use crate::auth::redact::redact_credentials;
use crate::error::StorageError;
use crate::http::Request;
use crate::limits::WRITE_TIMEOUT_MS_DEFAULT;
use crate::queue::{Command, Reply};

use super::backend::Backend;
use super::control::{self, Control, ControlReply};
use super::engine::{Applied, Engine};
use super::mesh::{Mesh, PendingReply};
use super::Lifecycle;

/// Everything a shard's tasks share.
pub struct ShardContext<B: Backend> {
    /// This shard's index, in `0..shards`.
    pub index: usize,
    /// The shard's API: routing, authentication (with its SAS cache), responses.
    pub service: Service,
    /// The shard's queue state and its timer.
    pub engine: Rc<Engine<B>>,
    mesh: Rc<Mesh<B>>,
    shards: usize,
    lifecycle: Arc<Lifecycle>,
    /// Requests being executed or answered right now.
    in_flight: Cell<usize>,
    debug_log: Option<RefCell<std::fs::File>>,
    /// How long a write to a client may make no progress (`--write-timeout`).
    write_timeout: Duration,
}

/// Decrements `in_flight` when a request is done.
pub struct Busy<'context, B: Backend>(&'context ShardContext<B>);

impl<B: Backend> Drop for Busy<'_, B> {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

/// A command's reply, here or on its way from another shard (whose owner answers once the
/// changes are written).
enum Pending<'context, B: Backend> {
    Here(Applied),
    Failed(StorageError),
    There(PendingReply<'context, B>),
}

impl<B: Backend> Pending<'_, B> {
    /// The reply; a local command's log sequence is raised into `durable_at`, for the caller to
    /// wait for before the client hears of it.
    async fn reply(self, durable_at: &Cell<Option<u64>>) -> Result<Reply, StorageError> {
        match self {
            Pending::Here(applied) => {
                durable_at.set(durable_at.get().max(applied.durable_at));
                applied.outcome
            }
            Pending::Failed(error) => Err(error),
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
        engine: Rc<Engine<B>>,
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
            in_flight: Cell::new(0),
            debug_log: debug_log.map(RefCell::new),
            write_timeout: Duration::from_millis(WRITE_TIMEOUT_MS_DEFAULT),
        }
    }

    /// The context with `--write-timeout` set to `write_timeout_ms`.
    pub fn with_write_timeout(mut self, write_timeout_ms: u64) -> ShardContext<B> {
        self.write_timeout = Duration::from_millis(write_timeout_ms);
        self
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

    /// Open connections (counted in the metrics).
    pub fn connections(&self) -> &Cell<usize> {
        &self.engine.governor.metrics.connections
    }

    /// How long a write to a client may make no progress (`--write-timeout`).
    pub fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// Bytes of answers the shard's connections are writing (counted in the metrics).
    pub fn pending_output_bytes(&self) -> &Cell<usize> {
        &self.engine.governor.metrics.pending_output_bytes
    }

    /// How many shards the server runs.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Sends control message `message` to shard `to` (answered here when it is this one).
    pub async fn control(&self, to: usize, message: Control) -> Result<ControlReply, StorageError> {
        if to == self.index {
            let reply = control::answer(&self.engine, self.mesh.traffic(), self.index, message);
            Ok(control::read_texts_shown(&self.engine, reply).await)
        } else {
            self.mesh.control(to, message).await
        }
    }

    /// Whether the server is shutting down (connections close after their current request).
    pub fn stopping(&self) -> bool {
        self.lifecycle.stop_requested()
    }

    /// Applies `command` on every shard, sending to all of them before waiting for any: one
    /// reply per shard, in shard order (raising `durable_at` for the local one).
    pub async fn every_shard(
        &self,
        command: Command,
        durable_at: &Cell<Option<u64>>,
    ) -> Vec<Result<Reply, StorageError>> {
        let mut pending = Vec::with_capacity(self.shards);
        for shard in 0..self.shards {
            pending.push(self.start_on(shard, command.clone(), None).await);
        }
        let mut parts = Vec::with_capacity(self.shards);
        for part in pending {
            parts.push(part.reply(durable_at).await);
        }
        parts
    }

    /// Applies `command` on `shard`, the writer of a replicated setting. When it answers with
    /// a replica, the change is written first, then every other shard stores it before the
    /// client hears of the change, so its next request sees it whichever shard it reaches and
    /// no shard sees a change a crash could take back.
    pub async fn replicated(&self, shard: usize, command: Command) -> Result<Reply, StorageError> {
        let durable_at = Cell::new(None);
        let reply = self.apply_on(shard, command, &durable_at).await;
        if let Some(sequence) = durable_at.get() {
            self.engine.durable(sequence).await;
        }
        let Reply::Replicate(replica) = reply? else {
            return Ok(Reply::Done);
        };
        let mut pending = Vec::with_capacity(self.shards);
        for other in (0..self.shards).filter(|&other| other != shard) {
            let command = Command::ApplyReplica((*replica).clone());
            pending.push(self.start_on(other, command, None).await);
        }
        for stored in pending {
            // Storing a copy writes nothing to the log (recovery rebuilds copies).
            stored.reply(&Cell::new(None)).await?;
        }
        Ok(Reply::Done)
    }

    /// Applies `command` on `shard` and waits until its changes are written (an admin action,
    /// which writes its answer at once rather than with a batch).
    pub(super) async fn apply_durably(
        &self,
        shard: usize,
        command: Command,
    ) -> Result<Reply, StorageError> {
        let durable_at = Cell::new(None);
        let reply = self.apply_on(shard, command, &durable_at).await;
        if let Some(sequence) = durable_at.get() {
            self.engine.durable(sequence).await;
        }
        reply
    }

    /// Applies `command` on every shard (sent to all before waiting for any) and waits until
    /// the changes are written; the first error, else every reply in shard order.
    pub(super) async fn on_every_shard(
        &self,
        command: Command,
    ) -> Result<Vec<Reply>, StorageError> {
        let durable_at = Cell::new(None);
        let replies = self.every_shard(command, &durable_at).await;
        if let Some(sequence) = durable_at.get() {
            self.engine.durable(sequence).await;
        }
        replies.into_iter().collect()
    }

    /// Applies `command` on `shard`: directly when it is this one (raising `durable_at`), else
    /// over the mesh.
    pub async fn apply_on(
        &self,
        shard: usize,
        command: Command,
        durable_at: &Cell<Option<u64>>,
    ) -> Result<Reply, StorageError> {
        self.start_on(shard, command, None)
            .await
            .reply(durable_at)
            .await
    }

    /// `apply_on`, for a caller that has just read the clock (`Engine::now_ms`): applied at
    /// `now_ms` when `shard` is this one, so the request's one reading serves it too; the owner
    /// reads its own clock when the command crosses the mesh.
    pub async fn apply_on_at(
        &self,
        shard: usize,
        command: Command,
        now_ms: u64,
        durable_at: &Cell<Option<u64>>,
    ) -> Result<Reply, StorageError> {
        self.start_on(shard, command, Some(now_ms))
            .await
            .reply(durable_at)
            .await
    }

    /// Sends `command` to shard `owner` (another shard) and returns its reply's future without
    /// waiting for it: a connection sends its next pipelined requests meanwhile. The owner
    /// answers once the command's changes are written.
    pub async fn send_to(
        &self,
        owner: usize,
        command: Command,
    ) -> Result<PendingReply<'_, B>, StorageError> {
        self.mesh.send(owner, command).await
    }

    /// Starts `command` on `shard`: applied at once when it is this one (at `now_ms` when the
    /// caller read the clock for it, else at the clock's reading now), else sent.
    async fn start_on(
        &self,
        shard: usize,
        command: Command,
        now_ms: Option<u64>,
    ) -> Pending<'_, B> {
        if shard == self.index {
            let now_ms = now_ms.unwrap_or_else(|| self.engine.now_ms());
            Pending::Here(self.engine.apply_serving(command, now_ms).await)
        } else {
            match self.mesh.send(shard, command).await {
                Ok(pending) => Pending::There(pending),
                Err(error) => Pending::Failed(error),
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
            Outcome::Admin(answer) => answer.status.to_string(),
        };
        self.log_line(&format!(
            "shard {} {} {} -> {result}",
            self.index,
            request.method.as_str(),
            String::from_utf8_lossy(request.target())
        ));
    }

    /// Writes `line` to the debug log, if enabled, with its credentials redacted (a SAS `sig`,
    /// a SharedKey signature, a bearer token: `auth::redact`), so the log never holds one that
    /// works.
    pub fn log_line(&self, line: &str) {
        if let Some(log) = &self.debug_log {
            let line = redact_credentials(line);
            let _ = writeln!(log.borrow_mut(), "{} {line}", self.engine.now_ms());
        }
    }
}
