#![no_main]
//! `sse`: see `agentd_fuzz::sse`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::sse::run(data));
