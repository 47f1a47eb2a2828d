//! libFuzzer entry point of the `shard_state` target; the properties live in
//! `azq_fuzz::checks::shard_state`, shared with the root crate's tests/fuzz_replay.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| azq_fuzz::checks::shard_state::check(data));
