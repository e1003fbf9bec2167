#![no_main]
//! `acp_params`: see `agentd_fuzz::acp`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::acp::params(data));
