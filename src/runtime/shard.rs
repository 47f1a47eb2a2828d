//! One shard: its executor's main task. Binds the shard's SO_REUSEPORT listener, joins the mesh,
//! owns the queue engine, accepts connections (up to the per-shard cap) and, on shutdown, stops
//! accepting and waits for in-flight requests before returning.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::net::TcpListener;

use crate::api::Service;
use crate::config::SHUTDOWN_GRACE_MS;
use crate::error::StorageError;
use crate::queue::ShardState;

use super::connection;
use super::context::ShardContext;
use super::engine::Engine;
use super::mesh::{Envelope, Mesh, ReplyEnvelope};
use super::Shutdown;

/// How often an accepting or draining shard looks at the shutdown flag.
const SHUTDOWN_POLL_MS: u64 = 50;

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
    let shard = Rc::new(ShardContext::new(
        setup.index,
        setup.shards,
        setup.service,
        engine,
        mesh,
        setup.shutdown,
        setup.debug_log,
    ));
    let _ = setup.bound.send(Ok(()));

    accept(&listener, &shard, setup.connections_max).await;
    drop(listener);

    // Drain: finish in-flight requests (and keep serving peers' commands) for a bounded time.
    let grace_ends = Instant::now() + Duration::from_millis(SHUTDOWN_GRACE_MS);
    while shard.in_flight() > 0 && Instant::now() < grace_ends {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS / 5)).await;
    }
    setup.drained.fetch_add(1, Ordering::AcqRel);
    while setup.drained.load(Ordering::Acquire) < setup.shards && Instant::now() < grace_ends {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS / 5)).await;
    }
}

async fn accept(listener: &TcpListener, shard: &Rc<ShardContext>, connections_max: usize) {
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
