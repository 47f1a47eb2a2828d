//! libFuzzer entry point of the `http_parser` target; the properties live in
//! `azq_fuzz::checks::http_parser`, shared with the root crate's tests/fuzz_replay.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| azq_fuzz::checks::http_parser::check(data));
