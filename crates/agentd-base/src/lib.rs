//! agentd-base: the small text helpers every layer shares (output caps, hashing,
//! one-line clipping, secret-length bounds), and the Server-Sent Events parser ([`sse`])
//! that providers' and MCP servers' streams go through.
//!
//! It owns no state and does no I/O. It must never depend on another agentd crate, an
//! async runtime or a network crate: everything else builds on it.

pub mod sse;
pub mod text;
