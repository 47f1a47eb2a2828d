//! One shard: its executor's main task. Binds the shard's SO_REUSEPORT listener, joins the mesh,
//! owns the queue engine, accepts connections (up to the per-shard cap) and, on shutdown, stops
//! accepting and waits for in-flight requests before returning.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::net::TcpListener;

use crate::api::{self, Service, Step};
use crate::config::SHUTDOWN_GRACE_MS;
use crate::error::StorageError;
use crate::http::Request;
use crate::queue::{Command, Reply, ShardState};

use super::engine::Engine;
use super::mesh::{Envelope, Mesh, ReplyEnvelope};
use super::{connection, Shutdown};

/// How often an accepting or draining shard looks at the shutdown flag.
const SHUTDOWN_POLL_MS: u64 = 50;

/// Everything a shard's tasks share. Lives on one thread (`Rc`), so nothing here locks.
pub struct Shard {
    pub index: usize,
    pub service: Service,
    pub engine: Rc<Engine>,
    mesh: Rc<Mesh>,
    shards: usize,
    shutdown: Arc<Shutdown>,
    /// Open connections.
    connections: Cell<usize>,
    /// Requests being executed or answered right now.
    in_flight: Cell<usize>,
    debug_log: Option<RefCell<std::fs::File>>,
}

/// What a shard needs to start, moved into its executor thread.
pub struct ShardSetup {
    pub index: usize,
    pub shards: usize,
    pub address: SocketAddr,
    pub connections_max: usize,
    /// This shard's part of `--max-memory`, bytes of stored messages.
    pub message_bytes_max: u64,
    pub service: Service,
    pub requests: MeshBuilder<Envelope, glommio::channels::channel_mesh::Full>,
    pub replies: MeshBuilder<ReplyEnvelope, glommio::channels::channel_mesh::Full>,
    pub shutdown: Arc<Shutdown>,
    pub debug_log: Option<std::fs::File>,
    /// Told once the listener is bound (or failed to bind).
    pub bound: std::sync::mpsc::Sender<Result<(), String>>,
    /// Shards that finished draining; a shard exits when all have, so none leaves a peer's
    /// cross-shard request unanswered.
    pub drained: Arc<AtomicUsize>,
}

/// Decrements `in_flight` when a request is done.
pub struct Busy<'shard>(&'shard Shard);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

impl Shard {
    /// Marks a request as in flight until the guard drops.
    pub fn busy(&self) -> Busy<'_> {
        self.in_flight.set(self.in_flight.get() + 1);
        Busy(self)
    }

    /// Whether the server is shutting down (connections close after their current request).
    pub fn stopping(&self) -> bool {
        self.shutdown.requested()
    }

    /// Runs a plan's step: locally when this shard owns the queue, else over the mesh.
    pub async fn execute(&self, step: Step) -> Result<Reply, StorageError> {
        match step {
            Step::Fail(error) => Err(error),
            Step::Answer(reply) => Ok(reply),
            Step::Shard { shard, command } => self.apply_on(shard, command).await,
            Step::EveryShard(command) => {
                let mut parts = Vec::with_capacity(self.shards);
                for shard in 0..self.shards {
                    parts.push(self.apply_on(shard, command.clone()).await);
                }
                api::merge_queue_lists(parts)
            }
            Step::Replicated { shard, command } => match self.apply_on(shard, command).await? {
                // Every other shard stores the change before the client hears of it, so its
                // next request sees it whichever shard it reaches.
                Reply::Replicate(replica) => {
                    for other in (0..self.shards).filter(|&other| other != shard) {
                        self.apply_on(other, Command::ApplyReplica((*replica).clone()))
                            .await?;
                    }
                    Ok(Reply::Done)
                }
                reply => Ok(reply),
            },
        }
    }

    /// Applies `command` on `shard`: directly when it is this one, else over the mesh.
    async fn apply_on(&self, shard: usize, command: Command) -> Result<Reply, StorageError> {
        if shard == self.index {
            self.engine.apply(command)
        } else {
            self.mesh.call(shard, command).await
        }
    }

    /// Writes one line per request to the debug log (`--debug FILE`), if enabled.
    pub fn log_request(&self, request: &Request, outcome: &Result<Reply, StorageError>) {
        if self.debug_log.is_some() {
            let result = match outcome {
                Ok(_) => "ok".to_string(),
                Err(error) => format!("{} {}", error.status(), error.code()),
            };
            self.log_line(&format!(
                "shard {} {} {} -> {result}",
                self.index,
                request.method.as_str(),
                String::from_utf8_lossy(request.target())
            ));
        }
    }

    /// Writes `line` to the debug log, if enabled.
    pub fn log_line(&self, line: &str) {
        if let Some(log) = &self.debug_log {
            let _ = writeln!(log.borrow_mut(), "{} {line}", self.engine.now_ms());
        }
    }
}

/// The executor's main task for one shard.
pub async fn run(setup: ShardSetup) {
    let listener = match TcpListener::bind(setup.address) {
        Ok(listener) => listener,
        Err(error) => {
            let _ = setup.bound.send(Err(format!(
                "shard {} cannot bind {}: {error}",
                setup.index, setup.address
            )));
            return;
        }
    };
    let mut state = ShardState::new(setup.index, shard_seed(setup.index));
    state.set_message_bytes_max(setup.message_bytes_max);
    let engine = Engine::start(state);
    let (Ok(requests), Ok(replies)) = (setup.requests.join().await, setup.replies.join().await)
    else {
        let _ = setup.bound.send(Err(format!(
            "shard {} could not join the mesh",
            setup.index
        )));
        return;
    };
    let mesh = Mesh::start(setup.index, requests, replies, engine.clone());
    let shard = Rc::new(Shard {
        index: setup.index,
        service: setup.service,
        engine,
        mesh,
        shards: setup.shards,
        shutdown: setup.shutdown,
        connections: Cell::new(0),
        in_flight: Cell::new(0),
        debug_log: setup.debug_log.map(RefCell::new),
    });
    let _ = setup.bound.send(Ok(()));

    accept(&listener, &shard, setup.connections_max).await;
    drop(listener);

    // Drain: finish in-flight requests (and keep serving peers' commands) for a bounded time.
    let grace_ends = Instant::now() + Duration::from_millis(SHUTDOWN_GRACE_MS);
    while shard.in_flight.get() > 0 && Instant::now() < grace_ends {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS / 5)).await;
    }
    setup.drained.fetch_add(1, Ordering::AcqRel);
    while setup.drained.load(Ordering::Acquire) < setup.shards && Instant::now() < grace_ends {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS / 5)).await;
    }
}

async fn accept(listener: &TcpListener, shard: &Rc<Shard>, connections_max: usize) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            while !shard.stopping() {
                glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
            }
            None
        })
        .await;
        let stream = match accepted {
            None => return,
            Some(Ok(stream)) => stream,
            // Out of descriptors or a connection reset before accept: keep serving the others.
            Some(Err(_)) => {
                glommio::timer::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        if shard.connections.get() >= connections_max {
            glommio::spawn_local(refuse(stream, shard.engine.now_ms())).detach();
            continue;
        }
        shard.connections.set(shard.connections.get() + 1);
        let shard = shard.clone();
        glommio::spawn_local(async move {
            connection::serve(stream, shard.clone()).await;
            shard.connections.set(shard.connections.get() - 1);
        })
        .detach();
    }
}

/// Answers a connection over the cap with 503 `ServerBusy` and closes it.
async fn refuse(mut stream: glommio::net::TcpStream, now_ms: u64) {
    let mut output = BytesMut::new();
    Service::respond_unparsed(StorageError::ServerBusy, now_ms, &mut output);
    let _ = stream.write_all(&output).await;
    let _ = stream.close().await;
}

/// Seeds a shard's message-ID generator: distinct per shard and per run.
fn shard_seed(index: usize) -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0 ^ index as u64
}
