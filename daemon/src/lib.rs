//! agentd: the daemon that owns durable coding-agent session Logs.
//!
//! Data flows one way: RPC → session actor → store. Projections (`history`) are pure
//! functions over events; the actor calls them and records what they return.

pub mod history;
pub mod import;
pub mod provider;
pub mod text;
pub mod tools;
