//! libFuzzer entry point of the `storage_format` target; the properties live in
//! `azq_fuzz::checks::storage_format`, shared with the root crate's tests/fuzz_replay.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| azq_fuzz::checks::storage_format::check(data));
