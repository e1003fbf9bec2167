//! agentctl's library: the parts of the command line client that are pure and checked
//! from outside the binary. The binary (`main.rs`) uses them from here.
//!
//! `acp::params`: the ACP requests' params and every check the bridge makes on them
//! (fuzzed under `fuzz/`, target `acp_params`).
//!
//! `retry`: one `client_request_id` per prompt and the backoff loop that resends it
//! when the daemon is lost mid-call, for agentctl's commands and for other clients.

pub mod acp {
    pub mod params;
}

pub mod retry;
