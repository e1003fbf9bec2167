#![no_main]
//! `config`: see `agentd_fuzz::config`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::config::run(data));
