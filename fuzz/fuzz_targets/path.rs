#![no_main]
//! `path`: see `agentd_fuzz::path`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::path::run(data));
