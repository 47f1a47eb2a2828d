//! azq: a thread-per-core Azure Queue Storage emulator.
//!
//! Layout of the crate, from the socket inwards:
//! - `runtime/`: one thread per shard, pinned to a core, on an event loop behind the `Backend`
//!   seam (glommio on io_uring, or tokio where io_uring is blocked); each accepts on its own
//!   SO_REUSEPORT listener, runs the connection loop, executes plans in the shard's context
//!   (`context`), and talks to other shards over a bounded request/reply channel mesh. The
//!   only place glommio and tokio appear.
//! - `http/`: HTTP/1.1 request parsing on httparse and response encoding; no Azure knowledge.
//! - `auth/`: SharedKey/SharedKeyLite and SAS verification; accounts and their keys.
//! - `api/`: routing of (method, path, query) to one `Operation` per REST operation
//!   (`router`), authentication and common checks (`plan`), each operation's planning into
//!   queue `Command`s and its response side by side (`ops/`), what every response shares
//!   (`response`), CORS and the XML bodies.
//! - `queue/`: per-shard state (queues, message slab, timer wheel, pop receipts) and the shard's
//!   copy of the replicated settings (service properties, queue ACLs); synchronous and
//!   deterministic, driven by commands and an injected time.
//! - `governor/`: rate limits (Azure's targets), added latency, fault rules and the counters
//!   behind `/_azq/metrics`; synchronous, time passed in (the runtime's `control` moves it).
//! - `random`: SplitMix64, for values that must be spread, not secret.
//! - `time`: the clock, calendar dates, RFC 1123 and ISO 8601.
//! - `tls`: the server's certificate for HTTPS (PEM, PKCS#12 or made at start) and its rustls
//!   configuration; the sessions run in `runtime::tls_stream`.
//! - `config`, `error`: limits and the `StorageError` → (status, code) mapping.
//! - `lifecycle`: the serving and stop flags every thread shares.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod auth;
pub mod client_env;
pub mod config;
pub mod console;
pub mod error;
pub mod governor;
pub mod http;
pub mod init;
pub mod lifecycle;
pub mod queue;
pub mod random;
pub mod runtime;
pub mod storage;
pub mod time;
pub mod tls;
