//! One shard: its thread and its executor's main task. Binds the shard's SO_REUSEPORT listener,
//! joins the mesh, owns the queue engine, accepts connections (up to the per-shard cap) and, on
//! shutdown, stops accepting and waits for in-flight requests, and then for its log to write
//! every change the state holds, before returning. The thread tells
//! the supervisor (`runtime::Server`) when the shard serves, why it could not start, and when it
//! has stopped, so a shard that fails never leaves the process half alive.

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};

use crate::api::{Service, Surface};
use crate::error::StorageError;
use crate::governor::{Governor, GovernorConfig};
use crate::http::proxy::{self, ProxyHeader};
use crate::limits::{
    PROXY_HEADER_BYTES_MAX, PROXY_HEADER_TIMEOUT_MS, SHUTDOWN_GRACE_MS,
    TLS_HANDSHAKES_IN_FLIGHT_PER_SHARD_MAX, TLS_HANDSHAKE_TIMEOUT_MS, WRITE_TIMEOUT_MS_DEFAULT,
};
use crate::queue::ShardState;
use crate::storage::log::Durability;
use crate::storage::log::Log;
use crate::storage::recovery::ShardStart;
use crate::storage::space::DiskLimits;

use super::backend::{Backend, Idle, WriteTimeout};
use super::connection::{self, Plain};
use super::console;
use super::context::ShardContext;
use super::engine::Engine;
use super::governance;
use super::mesh::{Envelope, Mesh, ReplyEnvelope};
use super::tls_stream::TlsStream;
use super::Lifecycle;

/// How often an accepting or draining shard looks at the stop flag.
const STOP_POLL_MS: u64 = 50;

/// What a shard thread tells the supervisor.
#[derive(Debug)]
pub enum ShardEvent {
    /// The shard listens and has joined the mesh.
    Serving(usize),
    /// The shard could not start, and why.
    Failed(usize, String),
    /// The shard's thread is ending (after `Serving` or `Failed`, or without either if its
    /// event loop could not even be created).
    Stopped(usize),
}

/// What a shard needs to start, moved into its thread.
pub struct ShardSetup<B: Backend> {
    /// The shard's index, in `0..shards`.
    pub index: usize,
    /// How many shards the server runs.
    pub shards: usize,
    /// The CPU the shard's thread is pinned to.
    pub cpu: usize,
    /// The address every shard listens on (SO_REUSEPORT).
    pub address: SocketAddr,
    /// The blob and table ports' addresses in `azurite` mode (readiness probes only), which
    /// every shard listens on too; empty otherwise.
    pub probe_addresses: Vec<(Surface, SocketAddr)>,
    /// Open connections the shard serves at once (`--max-connections`).
    pub connections_max: usize,
    /// Every connection of the queue port begins with a PROXY protocol header
    /// (`--proxyProtocol`).
    pub proxy_protocol: bool,
    /// How long a write to a client may make no progress (`--write-timeout`), ms.
    pub write_timeout_ms: u64,
    /// This shard's part of `--max-memory`, bytes of stored messages.
    pub message_bytes_max: u64,
    /// This shard's part of `--text-memory`: bytes of text kept in memory once written to the
    /// log (`None`: every text).
    pub text_bytes_max: Option<u64>,
    /// Where the shard's state comes from.
    pub store: ShardStore,
    /// The shard's API.
    pub service: Service,
    /// The shard's own TLS configuration when the server serves HTTPS.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The shard's end of the mesh that carries commands to their owners.
    pub requests: B::MeshEnd<Envelope>,
    /// The shard's end of the mesh that carries replies back.
    pub replies: B::MeshEnd<ReplyEnvelope>,
    /// The server's serving and stop flags.
    pub lifecycle: Arc<Lifecycle>,
    /// The request log (`--debug FILE`), if any.
    pub debug_log: Option<std::fs::File>,
    /// Rate limits, latency and fault injection (the shard builds its `Governor` from it).
    pub governor: GovernorConfig,
    /// Where the shard reports `ShardEvent`s.
    pub events: Sender<ShardEvent>,
    /// Shards that finished draining; a shard exits when all have, so none leaves a peer's
    /// cross-shard request unanswered.
    pub drained: Arc<AtomicUsize>,
}

/// Where a shard's state comes from.
pub enum ShardStore {
    /// Memory only, empty.
    Fresh,
    /// Memory only, made before the shard started (an `--init` file applied to it).
    Memory(Box<ShardState>),
    /// The recovered state and files, when its changes count as written, and its disk limits.
    Disk(Box<ShardStart>, Durability, DiskLimits),
}

/// Sends `Stopped` when the shard's thread ends, however it ends.
struct StoppedOnDrop {
    index: usize,
    events: Sender<ShardEvent>,
}

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        let _ = self.events.send(ShardEvent::Stopped(self.index));
    }
}

/// The body of a shard's thread: the backend's event loop on its CPU, running the shard.
pub fn thread_main<B: Backend>(setup: ShardSetup<B>) {
    let _stopped = StoppedOnDrop {
        index: setup.index,
        events: setup.events.clone(),
    };
    let (index, cpu, events) = (setup.index, setup.cpu, setup.events.clone());
    if let Err(error) = B::run(cpu, Idle::Park, run(setup)) {
        let _ = events.send(ShardEvent::Failed(index, error));
    }
}

/// The executor's main task for one shard.
async fn run<B: Backend>(setup: ShardSetup<B>) {
    let failed = |why: String| {
        let _ = setup.events.send(ShardEvent::Failed(
            setup.index,
            format!("shard {}: {why}", setup.index),
        ));
    };
    let listener = match B::bind(setup.address) {
        Ok(listener) => listener,
        Err(error) => return failed(format!("cannot listen on {}: {error}", setup.address)),
    };
    let mut probe_listeners = Vec::with_capacity(setup.probe_addresses.len());
    for &(surface, address) in &setup.probe_addresses {
        match B::bind(address) {
            Ok(listener) => probe_listeners.push((surface, listener)),
            Err(error) => return failed(format!("cannot listen on {address}: {error}")),
        }
    }
    let (mut state, log) = match setup.store {
        ShardStore::Fresh => match crate::storage::secret::random() {
            // Each shard has a secret of its own: in memory, no message ever changes shard.
            Ok(secret) => (
                ShardState::with_secret(setup.index, shard_seed(setup.index), secret),
                None,
            ),
            Err(error) => return failed(error),
        },
        ShardStore::Memory(state) => (*state, None),
        ShardStore::Disk(start, durability, limits) => {
            let log = Log::new(B::disk(), &start, setup.index as u32, durability)
                .with_memory_share(setup.message_bytes_max);
            (start.state, Some((log, limits)))
        }
    };
    state.set_message_bytes_max(setup.message_bytes_max);
    let governor = Governor::new(&setup.governor, setup.index, setup.shards);
    let log = log.map(|(log, limits)| (log, limits, setup.text_bytes_max));
    let engine = Engine::<B>::start(setup.index, state, log, governor);
    let mesh =
        match Mesh::<B>::start(setup.index, setup.requests, setup.replies, engine.clone()).await {
            Ok(mesh) => mesh,
            Err(error) => return failed(error),
        };
    let shard = Rc::new(
        ShardContext::new(
            setup.index,
            setup.shards,
            setup.service,
            engine,
            mesh,
            setup.lifecycle,
            setup.debug_log,
        )
        .with_write_timeout(setup.write_timeout_ms),
    );
    governance::start(&shard);
    console::start_sampler(&shard);
    let _ = setup.events.send(ShardEvent::Serving(setup.index));

    // The probe ports share the shard's connection cap with the queue port; each accepts on
    // its own task until the server stops.
    let probe_tasks: Vec<_> = probe_listeners
        .into_iter()
        .map(|(surface, listener)| {
            let (shard, tls) = (shard.clone(), setup.tls.clone());
            let connections_max = setup.connections_max;
            B::spawn_task(async move {
                // Probes come from the orchestrator, not through the proxy.
                accept(&listener, surface, &shard, connections_max, tls, false).await;
            })
        })
        .collect();
    accept(
        &listener,
        Surface::Queue,
        &shard,
        setup.connections_max,
        setup.tls,
        setup.proxy_protocol,
    )
    .await;
    drop(listener);
    for task in probe_tasks {
        task.await;
    }

    // Drain: finish in-flight requests (and keep serving peers' commands) for a bounded time.
    let grace_ends = Instant::now() + Duration::from_millis(SHUTDOWN_GRACE_MS);
    while shard.in_flight() > 0 && Instant::now() < grace_ends {
        B::sleep(Duration::from_millis(STOP_POLL_MS / 5)).await;
    }
    // Then the log, within the same grace: every record the state has emitted is written,
    // including those no reply waited for (an `--init` file's, which the first flush writes
    // after the shard serves), so a graceful stop keeps every change.
    let remaining = grace_ends.saturating_duration_since(Instant::now());
    let written = futures_lite::future::or(
        async {
            shard.engine.written().await;
            true
        },
        async {
            B::sleep(remaining).await;
            false
        },
    )
    .await;
    if !written {
        eprintln!(
            "azq: shard {}: stopping before its log wrote every change (the shutdown grace of \
             {SHUTDOWN_GRACE_MS} ms ran out); the next start recovers what was written",
            setup.index
        );
    }
    if let Some(summary) = shard.engine.log_summary() {
        eprintln!("azq: {summary}");
    }
    setup.drained.fetch_add(1, Ordering::AcqRel);
    while setup.drained.load(Ordering::Acquire) < setup.shards && Instant::now() < grace_ends {
        B::sleep(Duration::from_millis(STOP_POLL_MS / 5)).await;
    }
}

/// Accepts `surface`'s connections on `listener` until the server stops. With `proxy_protocol`
/// each must begin with a PROXY protocol header, whose client address is then the peer's.
async fn accept<B: Backend>(
    listener: &B::Listener,
    surface: Surface,
    shard: &Rc<ShardContext<B>>,
    connections_max: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
    proxy_protocol: bool,
) {
    // TLS handshakes under way on this shard.
    let handshakes = Rc::new(Cell::new(0usize));
    loop {
        let accepted = futures_lite::future::or(async { Some(B::accept(listener).await) }, async {
            while !shard.stopping() {
                B::sleep(Duration::from_millis(STOP_POLL_MS)).await;
            }
            None
        })
        .await;
        let (mut stream, peer) = match accepted {
            None => return,
            Some(Ok(accepted)) => accepted,
            // Out of descriptors or a connection reset before accept: keep serving the others.
            Some(Err(_)) => {
                B::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let Some(tls) = &tls else {
            if shard.connections().get() >= connections_max {
                B::spawn(refuse::<B>(stream, shard.engine.now_ms()));
                continue;
            }
            shard.connections().set(shard.connections().get() + 1);
            let shard = shard.clone();
            B::spawn(async move {
                if let Some((client, received)) =
                    proxied::<B>(&mut stream, peer, proxy_protocol, &shard).await
                {
                    connection::serve(Plain::<B>(stream), client, surface, shard.clone(), received)
                        .await;
                }
                shard.connections().set(shard.connections().get() - 1);
            });
            continue;
        };
        // Over either cap there is no TLS session to answer 503 over: the connection is closed.
        if shard.connections().get() >= connections_max
            || handshakes.get() >= TLS_HANDSHAKES_IN_FLIGHT_PER_SHARD_MAX
        {
            B::spawn(B::close(stream));
            continue;
        }
        shard.connections().set(shard.connections().get() + 1);
        handshakes.set(handshakes.get() + 1);
        let (shard, tls, handshakes) = (shard.clone(), tls.clone(), handshakes.clone());
        B::spawn(async move {
            // The PROXY header comes before the TLS session, in the clear.
            if let Some((client, received)) =
                proxied::<B>(&mut stream, peer, proxy_protocol, &shard).await
            {
                let timeout = Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS);
                let session = TlsStream::<B>::accept(stream, tls, timeout, received).await;
                handshakes.set(handshakes.get() - 1);
                match session {
                    Ok(session) => {
                        connection::serve(session, client, surface, shard.clone(), BytesMut::new())
                            .await
                    }
                    Err(error) => {
                        shard.log_line(&format!("TLS handshake with {client} failed: {error}"))
                    }
                }
            } else {
                handshakes.set(handshakes.get() - 1);
            }
            shard.connections().set(shard.connections().get() - 1);
        });
    }
}

/// The client a connection from `peer` serves, and the bytes that followed: without
/// `proxy_protocol`, `peer` and nothing; with it, the address of the PROXY protocol header the
/// connection must begin with (`peer` where the header names none: the proxy's own health
/// check), read within `PROXY_HEADER_TIMEOUT_MS` and `PROXY_HEADER_BYTES_MAX`. `None` when there
/// is no such header: the connection is then dropped (closed), logged.
async fn proxied<B: Backend>(
    stream: &mut B::Stream,
    peer: SocketAddr,
    proxy_protocol: bool,
    shard: &ShardContext<B>,
) -> Option<(IpAddr, BytesMut)> {
    if !proxy_protocol {
        return Some((peer.ip(), BytesMut::new()));
    }
    let deadline = Instant::now() + Duration::from_millis(PROXY_HEADER_TIMEOUT_MS);
    let mut input = BytesMut::with_capacity(PROXY_HEADER_BYTES_MAX);
    let refused = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break format!("no PROXY header within {PROXY_HEADER_TIMEOUT_MS} ms");
        }
        match B::read(stream, &mut input, remaining).await {
            Ok(0) => break "closed before its PROXY header".to_string(),
            Ok(_) => {}
            Err(error) => break format!("no PROXY header: {error}"),
        }
        match proxy::parse(&input, PROXY_HEADER_BYTES_MAX) {
            ProxyHeader::Complete {
                client,
                header_bytes,
            } => {
                input.advance(header_bytes);
                return Some((client.unwrap_or(peer.ip()), input));
            }
            ProxyHeader::Partial => {}
            ProxyHeader::Refused(why) => break format!("not a PROXY header: {why}"),
        }
    };
    shard.log_line(&format!("connection from {peer} closed: {refused}"));
    None
}

/// Answers a connection over the cap with 503 `ServerBusy` and closes it.
async fn refuse<B: Backend>(mut stream: B::Stream, now_ms: u64) {
    let mut output = BytesMut::new();
    Service::respond_unparsed(StorageError::ServerBusy, now_ms, &mut output);
    let stalled = Duration::from_millis(WRITE_TIMEOUT_MS_DEFAULT);
    let _ = B::write_all(&mut stream, &output, WriteTimeout::new(stalled, stalled)).await;
    B::close(stream).await;
}

/// Seeds a shard's message-ID generator: distinct per shard and per run.
pub fn shard_seed(index: usize) -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0 ^ index as u64
}
