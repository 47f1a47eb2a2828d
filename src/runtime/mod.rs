//! The thread-per-core runtime: one thread per shard, pinned to its CPU, running the shard on a
//! single-threaded event loop with its own SO_REUSEPORT listener on the common address; a
//! bounded request/reply mesh between shards; a signal thread that turns SIGINT/SIGTERM into a
//! graceful stop; and a supervisor (`Server`) that ends the process when a shard fails.
//!
//! - `backend`: the seam, `Backend`; `select`: the choice between the two event loops (and the
//!   io_uring probe behind it); `os`: pinning threads, the CPUs allowed, the open-files limit;
//!   `deadline`: read timeouts for both backends, by one sweep per thread;
//! - `uring` (Linux): glommio on io_uring; `portable`: tokio's current-thread runtime;
//! - `shard`: a shard's thread and main task (its listener, accepting, draining);
//! - the request path, one way: `connection` (the loop: parse, plan, execute, respond) →
//!   `execute` (a step where it must run) → `context` (what a shard's tasks share; a command
//!   applied here, on its owner, on every shard or on a setting's writer and its replicas) →
//!   `mesh` (commands and replies between shards) → `engine` (the queue state, its timer and
//!   its log);
//! - the control plane beside it (`governor`'s runtime half): `governance`, which the
//!   connection loop calls at two fixed points (around execution: account limit, fault rules,
//!   latency; after answering: metrics) and which runs the account-share task; `admin`, the
//!   `/_azq/metrics` and `/_azq/faults` endpoints; `console`, the console's endpoints behind
//!   `admin` (inspection, history, reset, the console's actions); `control`, the messages
//!   shards exchange for them and how a shard answers one;
//! - `tls_stream`: a TLS session over either backend's stream (HTTPS, and azq-loadgen's client).
//!
//! Everything but `uring` and `portable` is written once, generic over `Backend`.

pub mod admin;
pub mod backend;
pub mod connection;
pub mod console;
pub mod context;
pub mod control;
pub mod deadline;
pub mod engine;
pub mod execute;
pub mod governance;
pub mod mesh;
pub mod os;
pub mod portable;
pub mod select;
pub mod shard;
pub mod tls_stream;
#[cfg(all(target_os = "linux", feature = "io_uring"))]
pub mod uring;

use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;

use crate::api::{Health, Service, Surface};
use crate::auth::Accounts;
use crate::lifecycle::Lifecycle;
use crate::limits::{
    LISTEN_ADDRESS_WAIT_MS, MESH_CHANNEL_CAPACITY, TLS_SESSION_CACHE_ENTRIES_PER_SHARD,
};
use crate::queue::ShardState;
use crate::settings::{Config, Persistence};
use crate::storage::recovery::ShardStart;
use crate::storage::space::DiskLimits;

use backend::Backend;
use select::{OnBackend, Selected};

// The paths main.rs and azq-loadgen have always used.
pub use os::raise_open_files_limit;
use shard::{ShardEvent, ShardSetup, ShardStore};

/// A started server: its address, its backend, and the events of its shards.
pub struct Server {
    /// The address every shard listens on.
    pub address: SocketAddr,
    /// The blob and table ports' addresses (readiness probes only), as bound.
    pub probe_addresses: Vec<(Surface, SocketAddr)>,
    /// How many shards serve.
    pub shards: usize,
    /// The backend the shards run on.
    pub backend: Selected,
    /// When `--runtime auto` chose the portable backend: why io_uring could not serve.
    pub fallback_reason: Option<String>,
    lifecycle: Arc<Lifecycle>,
    events: Receiver<ShardEvent>,
}

impl Server {
    /// Waits until every shard has stopped after a requested stop. A shard that stops while no
    /// stop was asked for (its thread ended or its loop failed) is an error at once, so the
    /// caller can end the process instead of serving half the queues.
    pub fn join(self) -> Result<(), String> {
        let mut stopped = 0;
        while stopped < self.shards {
            match self.events.recv() {
                Ok(ShardEvent::Stopped(index)) => {
                    if !self.lifecycle.stop_requested() {
                        return Err(format!("shard {index} stopped unexpectedly"));
                    }
                    stopped += 1;
                }
                Ok(ShardEvent::Failed(_, why)) => return Err(why),
                Ok(ShardEvent::Serving(_)) => {}
                Err(_) => return Err("every shard thread has gone".to_string()),
            }
        }
        Ok(())
    }
}

/// What a server serving HTTPS needs beyond its `Config`.
#[derive(Clone)]
pub struct Https {
    /// The TLS configuration each shard copies (with a session cache of its own).
    pub server_config: Arc<rustls::ServerConfig>,
    /// The certificate chain in PEM, served at `GET /_azq/cert.pem`.
    pub certificate_pem: Arc<str>,
}

/// Starts every shard on the backend `config.runtime` selects, and returns once all serve.
/// `stores` holds each shard's recovered state when `config.persistence` keeps data on disk
/// (`None`: memory only); `memory_states`, in memory only, each shard's state made before it
/// starts (an `--init` file applied to it; `None`: each shard starts empty). `https` makes
/// every shard serve TLS (`None`: plain HTTP). `probes` are the blob and table ports to answer
/// readiness probes on (`azurite` mode; empty otherwise). `lifecycle` stops them. An error
/// names why a shard could not start; shards that did start are then still running, so the
/// caller should end the process.
pub fn start(
    config: &Config,
    accounts: Accounts,
    lifecycle: Arc<Lifecycle>,
    stores: Option<Vec<ShardStart>>,
    memory_states: Option<Vec<ShardState>>,
    https: Option<Https>,
    probes: &[(Surface, SocketAddr)],
) -> Result<Server, String> {
    let shards = config.cpus.len();
    assert!(shards > 0);
    let stores: Vec<ShardStore> = match (stores, memory_states, &config.persistence) {
        (None, None, _) => (0..shards).map(|_| ShardStore::Fresh).collect(),
        (None, Some(states), Persistence::Memory) => {
            assert_eq!(states.len(), shards, "a state for every shard");
            states
                .into_iter()
                .map(|state| ShardStore::Memory(Box::new(state)))
                .collect()
        }
        (Some(stores), None, Persistence::Disk { durability, .. }) => {
            assert_eq!(stores.len(), shards, "recovery restores every shard");
            stores
                .into_iter()
                .map(|start| {
                    // Each shard gets an equal part of `--max-disk`, as of `--max-memory`.
                    let limits = DiskLimits {
                        shard_bytes_max: config.disk_bytes_max.map(|bytes| bytes / shards as u64),
                        free_min: config.free_disk_min,
                        shards: shards as u64,
                    };
                    ShardStore::Disk(Box::new(start), *durability, limits)
                })
                .collect()
        }
        _ => unreachable!("memory-only mode recovers nothing; a disk shard's state is its store"),
    };
    let (backend, fallback_reason) = select::select(config.runtime)?;
    let address = reserve_address(SocketAddr::new(config.host, config.port))?;
    let probe_addresses = probes
        .iter()
        .map(|&(surface, address)| Ok((surface, reserve_address(address)?)))
        .collect::<Result<Vec<_>, String>>()?;
    let events = backend.dispatch(StartShards {
        config,
        accounts,
        address,
        probe_addresses: probe_addresses.clone(),
        lifecycle: &lifecycle,
        stores,
        https,
    })?;
    let mut serving = 0;
    while serving < shards {
        match events.recv() {
            Ok(ShardEvent::Serving(_)) => serving += 1,
            Ok(ShardEvent::Failed(_, why)) => return Err(why),
            Ok(ShardEvent::Stopped(index)) => {
                return Err(format!("shard {index} stopped during start-up"))
            }
            Err(_) => return Err("every shard thread has gone during start-up".to_string()),
        }
    }
    lifecycle.set_serving();
    Ok(Server {
        address,
        probe_addresses,
        shards,
        backend,
        fallback_reason,
        lifecycle,
        events,
    })
}

/// What `start_shards` needs, to run it on the selected backend.
struct StartShards<'a> {
    config: &'a Config,
    accounts: Accounts,
    address: SocketAddr,
    probe_addresses: Vec<(Surface, SocketAddr)>,
    lifecycle: &'a Arc<Lifecycle>,
    stores: Vec<ShardStore>,
    https: Option<Https>,
}

impl OnBackend for StartShards<'_> {
    type Output = Result<Receiver<ShardEvent>, String>;

    fn run<B: Backend>(self) -> Self::Output {
        let StartShards {
            config,
            accounts,
            address,
            probe_addresses,
            lifecycle,
            stores,
            https,
        } = self;
        start_shards::<B>(
            config,
            accounts,
            address,
            probe_addresses,
            lifecycle,
            stores,
            https,
        )
    }
}

/// Spawns one thread per shard running on `B`; returns the channel of their events.
fn start_shards<B: Backend>(
    config: &Config,
    accounts: Accounts,
    address: SocketAddr,
    probe_addresses: Vec<(Surface, SocketAddr)>,
    lifecycle: &Arc<Lifecycle>,
    stores: Vec<ShardStore>,
    https: Option<Https>,
) -> Result<Receiver<ShardEvent>, String> {
    let shards = config.cpus.len();
    let requests = B::mesh(shards, MESH_CHANNEL_CAPACITY);
    let replies = B::mesh(shards, MESH_CHANNEL_CAPACITY);
    let drained = Arc::new(AtomicUsize::new(0));
    let debug_log = match &config.debug_log_path {
        // Owner only when created (it names queues, clients and why requests were refused); an
        // existing file keeps the mode its owner gave it.
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|error| format!("cannot open debug log {}: {error}", path.display()))?,
        ),
        None => None,
    };
    // The console's sessions are signed with a key every shard shares and no one else has:
    // made here, once, and gone with the process.
    let mut session_key = [0u8; 32];
    getrandom::fill(&mut session_key)
        .map_err(|error| format!("cannot make the console's session key: {error}"))?;
    let (events, received) = mpsc::channel();
    let ends = requests.into_iter().zip(replies).zip(stores);
    for ((index, &cpu), ((requests, replies), store)) in config.cpus.iter().enumerate().zip(ends) {
        let setup = ShardSetup::<B> {
            index,
            shards,
            cpu,
            address,
            probe_addresses: probe_addresses.clone(),
            connections_max: config.connections_per_shard_max,
            proxy_protocol: config.proxy_protocol,
            write_timeout_ms: config.write_timeout_ms,
            // Each shard gets an equal part, so no shard ever has to ask another what it holds.
            message_bytes_max: config.message_bytes_max / shards as u64,
            text_bytes_max: config.text_bytes_max.map(|bytes| bytes / shards as u64),
            store,
            service: {
                let service = Service::new(
                    accounts.clone(),
                    shards,
                    !config.product_style_url_disabled,
                    address.to_string(),
                    Health {
                        lifecycle: lifecycle.clone(),
                        backend: B::NAME,
                    },
                )
                .with_admin(config.governor.admin)
                .with_control(
                    session_key,
                    config.session_lifetime_ms,
                    config.control_hosts.clone(),
                )
                .with_request_date_check_skipped(config.request_date_check_skipped)
                .with_oauth(config.oauth);
                match &https {
                    Some(https) => service.with_https(https.certificate_pem.clone()),
                    None => service,
                }
            },
            tls: https.as_ref().map(|https| {
                let mut own = (*https.server_config).clone();
                own.session_storage = rustls::server::ServerSessionMemoryCache::new(
                    TLS_SESSION_CACHE_ENTRIES_PER_SHARD,
                );
                Arc::new(own)
            }),
            requests,
            replies,
            lifecycle: lifecycle.clone(),
            debug_log: match &debug_log {
                Some(file) => Some(file.try_clone().map_err(|error| error.to_string())?),
                None => None,
            },
            governor: config.governor.clone(),
            events: events.clone(),
            drained: drained.clone(),
        };
        std::thread::Builder::new()
            .name(format!("azq-shard-{index}"))
            .spawn(move || shard::thread_main(setup))
            .map_err(|error| format!("cannot start shard {index} on CPU {cpu}: {error}"))?;
    }
    Ok(received)
}

/// Checks that `address` is free and, for port 0, picks a free port, by binding a plain socket
/// (without SO_REUSEPORT). Without this check a second server on the same port would silently
/// share its connections with the first. A port another socket listens on is tried again for
/// `LISTEN_ADDRESS_WAIT_MS`: a server just killed may hold it for a moment.
fn reserve_address(address: SocketAddr) -> Result<SocketAddr, String> {
    let waited = std::time::Instant::now();
    let probe = loop {
        match std::net::TcpListener::bind(address) {
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse
                    && waited.elapsed().as_millis() < u128::from(LISTEN_ADDRESS_WAIT_MS) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            bound => break bound,
        }
    };
    let probe = probe.map_err(|error| format!("cannot listen on {address}: {error}"))?;
    probe.local_addr().map_err(|error| error.to_string())
}

/// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it starts) and
/// starts a thread that waits for them and requests a stop. Call before `start`.
pub fn handle_signals(lifecycle: Arc<Lifecycle>) -> Result<(), String> {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; the calls only read and write it.
    let signals = unsafe {
        let mut signals: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut signals);
        libc::sigaddset(&mut signals, libc::SIGINT);
        libc::sigaddset(&mut signals, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) != 0 {
            return Err("cannot block SIGINT/SIGTERM".to_string());
        }
        signals
    };
    std::thread::Builder::new()
        .name("azq-signals".to_string())
        .spawn(move || {
            let mut received: libc::c_int = 0;
            // SAFETY: `signals` is a valid, initialised set; `received` is a valid out-pointer.
            while unsafe { libc::sigwait(&signals, &mut received) } != 0 {}
            lifecycle.request_stop();
        })
        .map_err(|error| error.to_string())?;
    Ok(())
}
