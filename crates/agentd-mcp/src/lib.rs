//! agentd's MCP client (docs/mcp.md#contract): server configuration (`config`), model-visible tool
//! names (`names`), the mapping of call results (`result`), one server connection over
//! rmcp (`client`; streamable HTTP through `http`), the servers of one session (`manager`) and the pid records that let
//! a restarted daemon reap what a killed one left (`reap`). The daemon's turn engine
//! decides when tools run and what is recorded; this crate owns how MCP is spoken.

pub mod client;
pub mod config;
pub mod http;
pub mod manager;
pub mod names;
pub mod reap;
pub mod result;

pub use client::{CallError, StartContext, ToolInfo};
pub use config::{Origin, ServerConfig};
pub use manager::{Manager, ManagerOptions, Offered, ServerStatus, StartFailure};
