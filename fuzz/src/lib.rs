//! The property checks behind azq's fuzz targets, as a library so that each
//! `fuzz_targets/*.rs` is one line. The checks themselves live in `checks/`, which the root
//! crate's tests/fuzz_replay.rs includes by path to replay the committed inputs on stable Rust.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod checks;
