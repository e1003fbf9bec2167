#![no_main]
//! `ndjson`: see `agentd_fuzz::ndjson`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::ndjson::run(data));
