//! The property of each fuzz target, as a plain `fn check(data: &[u8])` that panics when the
//! property breaks. The fuzz targets call them; so does the root crate's tests/fuzz_replay.rs,
//! over the committed regressions and seeds, so a regression fails `cargo test` on stable Rust.
//!
//! Only std, azq and azq's own dependencies `bytes` and `futures-lite` (which drives the log
//! writer's async calls) may be used here: the replay test includes this directory by `#[path]`,
//! and the root crate's dev-dependencies must not grow for it. Fuzzer bytes are therefore
//! decoded by hand (`input`), not with `arbitrary`.

pub mod auth;
pub mod http_parser;
pub mod input;
pub mod memory_disk;
pub mod request;
pub mod router;
pub mod settings_xml;
pub mod shard_state;
pub mod storage_format;
pub mod xml_message;

/// A target's property: panics when `data` breaks it.
pub type Check = fn(data: &[u8]);

/// Every target by name, as the directories under fuzz/regressions and fuzz/seeds are named.
pub const TARGETS: &[(&str, Check)] = &[
    ("http_parser", http_parser::check),
    ("xml_message", xml_message::check),
    ("settings_xml", settings_xml::check),
    ("router", router::check),
    ("auth", auth::check),
    ("shard_state", shard_state::check),
    ("storage_format", storage_format::check),
];
