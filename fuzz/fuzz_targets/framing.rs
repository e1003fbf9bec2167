#![no_main]
//! `framing`: see `agentd_fuzz::framing`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::framing::run(data));
