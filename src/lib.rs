//! azq: a thread-per-core Azure Queue Storage emulator.
//!
//! Layout of the crate, from the socket inwards:
//! - `runtime/`: one thread per shard, pinned to a core, on an event loop behind the `Backend`
//!   seam (glommio on io_uring, or tokio where io_uring is blocked); each accepts on its own
//!   SO_REUSEPORT listener, runs the connection loop, executes each plan's step (`execute`,
//!   through the shard's `context`) with the control plane beside it (`governance`, `admin`,
//!   `control`), and talks to other shards over a bounded request/reply channel mesh. The
//!   only place glommio and tokio appear.
//! - `http/`: HTTP/1.1 request parsing on httparse and response encoding; no Azure knowledge.
//! - `auth/`: SharedKey/SharedKeyLite, SAS (user delegation SAS too) and bearer token checks;
//!   accounts and their keys, and the user delegation keys derived from them.
//! - `operation`: `Operation`, one per REST operation, which `api/` routes to and `governor/`
//!   counts and matches fault rules by.
//! - `api/`: routing of (method, path, query) to one `Operation` per REST operation
//!   (`router`), authentication and common checks (`plan`), each operation's planning into
//!   queue `Command`s and its response side by side (`ops/`), what every response shares
//!   (`response`), CORS and the XML bodies.
//! - `queue/`: per-shard state (queues, message slab, timer wheel, pop receipts) and the shard's
//!   copy of the replicated settings (service properties, queue ACLs); synchronous and
//!   deterministic, driven by commands and an injected time.
//! - `governor/`: rate limits (Azure's targets), added latency, fault rules and the counters
//!   behind `/_azq/metrics`; synchronous, time passed in (the runtime's `governance` and
//!   `control` move it).
//! - `storage/`: durability around the shard state: the log with group commit, snapshots,
//!   recovery, and the file seams they are tested behind.
//! - `random`: SplitMix64, for values that must be spread, not secret.
//! - `time`: the clock, calendar dates, RFC 1123 and ISO 8601.
//! - `tls`: the server's certificate for HTTPS (PEM, PKCS#12 or made at start) and its rustls
//!   configuration; the sessions run in `runtime::tls_stream`.
//! - `limits`: every limit as a named constant (the ground floor: it imports nothing of the
//!   crate); `error`: the `StorageError` → (status, code) mapping.
//! - `settings`: one run's `Config` and the Azurite-compatible command line that builds it;
//!   `init`: an `--init` file (JSON or YAML), checked and applied to the shards' states before
//!   they serve; `client_env`: what `azq env` prints for a client of such a run.
//! - `console/`: the web console's files (`/_azq/ui`), the JSON of `/_azq/inspect` and the
//!   history behind `/_azq/stats`; pure, the runtime gathers what it shows.
//! - `azurite`: Azurite's command line (program names, its flags, environment defaults) and its
//!   start-up lines, around azq's own.
//! - `cgroup`: the memory limit and CPU quota a container puts on the process (cgroup v1, v2),
//!   which azq's defaults fit.
//! - `discovery`: finds the server beside `azq healthcheck` (its port) in /proc.
//! - `privileges`: the user a server started as root becomes (`AZQ_RUN_AS`, set by the image)
//!   once it has read its certificate files.
//! - `lifecycle`: the serving and stop flags every thread shares.
//! - `machine`: the CPUs this process may use and the backend `--runtime` asks for, which
//!   `settings` reads before any runtime exists.
//!
//! Which module may import which is the `## Layers` list of docs/ARCHITECTURE.md, from `limits`
//! up to `main`; `tests/layers.rs` holds every file to it.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod auth;
pub mod azurite;
pub mod cgroup;
pub mod client_env;
pub mod console;
pub mod discovery;
pub mod error;
pub mod governor;
pub mod http;
pub mod huge_pages;
pub mod init;
pub mod lifecycle;
pub mod limits;
pub mod machine;
pub mod operation;
pub mod privileges;
pub mod queue;
pub mod random;
pub mod runtime;
pub mod settings;
pub mod storage;
pub mod time;
pub mod tls;
