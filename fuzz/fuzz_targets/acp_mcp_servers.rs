#![no_main]
//! `acp_mcp_servers`: see `agentd_fuzz::mcp`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agentd_fuzz::mcp::acp_servers(data));
