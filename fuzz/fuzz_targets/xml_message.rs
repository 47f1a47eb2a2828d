//! libFuzzer entry point of the `xml_message` target; the properties live in
//! `azq_fuzz::checks::xml_message`, shared with the root crate's tests/fuzz_replay.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| azq_fuzz::checks::xml_message::check(data));
