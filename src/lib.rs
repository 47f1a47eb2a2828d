//! azq: a thread-per-core Azure Queue Storage emulator.
//!
//! Layout of the crate, from the socket inwards:
//! - `runtime/`: one glommio executor per shard, pinned to a core; each accepts on its own
//!   SO_REUSEPORT listener, runs the connection loop, and talks to other shards over a bounded
//!   request/reply channel mesh. The only place glommio appears.
//! - `http/`: HTTP/1.1 request parsing on httparse and response encoding; no Azure knowledge.
//! - `auth/`: SharedKey/SharedKeyLite and SAS verification; accounts and their keys.
//! - `api/`: routing of (method, path, query) to one `Operation` per REST operation, request
//!   validation into queue `Command`s, CORS, and the XML/headers of each response.
//! - `queue/`: per-shard state (queues, message slab, timer wheel, pop receipts) and the shard's
//!   copy of the replicated settings (service properties, queue ACLs); synchronous and
//!   deterministic, driven by commands and an injected time.
//! - `config`, `error`, `clock`: limits, the `StorageError` → (status, code) mapping, time.

pub mod api;
pub mod auth;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod queue;
pub mod runtime;
