#![no_main]
//! `mcp_names`: see `agentd_fuzz::mcp`; the input is a list of (server, tool) pairs.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|pairs: Vec<(String, String)>| agentd_fuzz::mcp::names(&pairs));
