#![no_main]
//! `mcp_result`: see `agentd_fuzz::mcp`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::mcp::result(data));
