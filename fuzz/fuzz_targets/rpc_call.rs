#![no_main]
//! `rpc_call`: see `agentd_fuzz::rpc`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::rpc::run(data));
