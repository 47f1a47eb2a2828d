//! The thread-per-core runtime: one glommio executor per shard, pinned to its CPU, each with its
//! own SO_REUSEPORT listener on the same address; a bounded request/reply mesh between shards; and
//! a signal thread that turns SIGINT/SIGTERM into a graceful stop. glommio appears only here.

pub mod connection;
pub mod context;
pub mod engine;
pub mod mesh;
pub mod shard;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};

use crate::api::Service;
use crate::auth::Accounts;
use crate::config::{Config, IO_MEMORY_BYTES_PER_SHARD, MESH_CHANNEL_CAPACITY};

/// The server-wide stop flag, set once by the signal thread and polled by every shard.
#[derive(Debug, Default)]
pub struct Shutdown {
    requested: AtomicBool,
}

impl Shutdown {
    /// Asks every shard to stop accepting and drain.
    pub fn request(&self) {
        self.requested.store(true, Ordering::Release);
    }

    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }
}

/// A started server: its address and the handles to wait for.
pub struct Server {
    pub address: SocketAddr,
    pub shards: usize,
    executors: Vec<glommio::ExecutorJoinHandle<()>>,
}

impl Server {
    /// Waits until every shard has stopped.
    pub fn join(self) -> Result<(), String> {
        for executor in self.executors {
            executor
                .join()
                .map_err(|error| format!("shard failed: {error}"))?;
        }
        Ok(())
    }
}

/// Starts every shard and returns once all listen. `shutdown` stops them.
pub fn start(
    config: &Config,
    accounts: Accounts,
    shutdown: Arc<Shutdown>,
) -> Result<Server, String> {
    let shards = config.cpus.len();
    assert!(shards > 0);
    let address = reserve_address(SocketAddr::new(config.host, config.port))?;
    let requests = MeshBuilder::full(shards, MESH_CHANNEL_CAPACITY);
    let replies = MeshBuilder::full(shards, MESH_CHANNEL_CAPACITY);
    let drained = Arc::new(AtomicUsize::new(0));
    let debug_log = match &config.debug_log_path {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| format!("cannot open debug log {}: {error}", path.display()))?,
        ),
        None => None,
    };
    let (bound, bound_results) = std::sync::mpsc::channel();
    let mut executors = Vec::with_capacity(shards);
    for (index, &cpu) in config.cpus.iter().enumerate() {
        let setup = shard::ShardSetup {
            index,
            shards,
            address,
            connections_max: config.connections_per_shard_max,
            // Each shard gets an equal part, so no shard ever has to ask another what it holds.
            message_bytes_max: config.message_bytes_max / shards as u64,
            service: Service::new(
                accounts.clone(),
                shards,
                !config.product_style_url_disabled,
                address.to_string(),
            ),
            requests: requests.clone(),
            replies: replies.clone(),
            shutdown: shutdown.clone(),
            debug_log: match &debug_log {
                Some(file) => Some(file.try_clone().map_err(|error| error.to_string())?),
                None => None,
            },
            bound: bound.clone(),
            drained: drained.clone(),
        };
        let executor = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("azq-shard-{index}"))
            .io_memory(IO_MEMORY_BYTES_PER_SHARD)
            .spawn(move || shard::run(setup))
            .map_err(|error| format!("cannot start shard {index} on CPU {cpu}: {error}"))?;
        executors.push(executor);
    }
    for _ in 0..shards {
        match bound_results.recv() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                shutdown.request();
                return Err(error);
            }
            Err(_) => return Err("a shard stopped during start-up".to_string()),
        }
    }
    Ok(Server {
        address,
        shards,
        executors,
    })
}

/// Checks that `address` is free and, for port 0, picks a free port, by binding a plain socket
/// (without SO_REUSEPORT) once. Without this check a second server on the same port would
/// silently share its connections with the first.
fn reserve_address(address: SocketAddr) -> Result<SocketAddr, String> {
    let probe = std::net::TcpListener::bind(address)
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    probe.local_addr().map_err(|error| error.to_string())
}

/// The CPUs this process may run on, in order (its affinity mask); `[0]` if it cannot be read.
/// Shards (and azq-loadgen's client cores) are pinned to the first of them by default.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect();
        if allowed.is_empty() {
            vec![0]
        } else {
            allowed
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit and returns the new soft
/// limit; `None` if the limits cannot be read or set. A server holds a descriptor per
/// connection, and so does a client with many connections (tests, azq-loadgen).
pub fn raise_open_files_limit() -> Option<u64> {
    // SAFETY: getrlimit/setrlimit read and write a plain rlimit struct owned by this frame.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return None;
            }
        }
        Some(limit.rlim_cur)
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it starts) and
/// starts a thread that waits for them and requests `shutdown`. Call before `start`.
pub fn handle_signals(shutdown: Arc<Shutdown>) -> Result<(), String> {
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
            shutdown.request();
        })
        .map_err(|error| error.to_string())?;
    Ok(())
}
