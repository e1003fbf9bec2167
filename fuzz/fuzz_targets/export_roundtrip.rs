#![no_main]
//! `export_roundtrip`: see `agentd_fuzz::export`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::export::run(data));
