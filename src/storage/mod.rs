//! Durability around the shard state: the state emits records (`queue::record`); this module
//! writes them to a log per shard with group commit, snapshots the state in steps so old log
//! segments can go, and brings everything back at start-up.
//!
//! - `files`: the data directory's layout, and the file operations before (`Files`) and while
//!   (`Disk`) the shards run.
//! - `format`: log segments and snapshots on disk, and reading them back (torn tail or
//!   corruption).
//! - `hold`: when group commit's next flush starts: at once, or after a short hold for the
//!   clients the last flush acknowledged (a pure policy).
//! - `inspect`: a log segment described record by record (`azq inspect-segment`), for the
//!   copies recovery keeps of what it cuts.
//! - `log`: a running shard's log: group commit, the wait of replies for durability, and
//!   snapshots written a step at a time.
//! - `pages`: vectors in pages freed as they are passed, for recovery's images of a large
//!   backlog.
//! - `read_cache`: chunks of the log's files read back for texts on disk only, kept for the
//!   texts near them.
//! - `read_checks` (tests): what every `Disk` backend's reads must pass, run on each.
//! - `recovery`: the data directory back into shard states at start-up, re-homed when the
//!   shard count changed.
//! - `secret`: the server's secret (message IDs, pop receipts), kept in the data directory.
//! - `slim`: recovery's messages as their numbers and where their texts lie in the files it
//!   read, 80 bytes each.
//! - `space`: `--max-disk` and `--min-free-disk`: when a shard refuses growth, and the file
//!   system's free space.

pub mod files;
pub mod format;
pub mod hold;
pub mod inspect;
pub mod log;
pub mod pages;
pub mod read_cache;
#[cfg(test)]
pub mod read_checks;
pub mod recovery;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod round_trip;
pub mod secret;
#[cfg(test)]
mod sim;
pub mod slim;
pub mod space;
#[cfg(test)]
mod tests;
