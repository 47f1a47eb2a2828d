//! libFuzzer entry point of the `settings_xml` target; the properties live in
//! `azq_fuzz::checks::settings_xml`, shared with the root crate's tests/fuzz_replay.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| azq_fuzz::checks::settings_xml::check(data));
