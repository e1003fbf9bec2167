//! agentd: the daemon that owns durable coding-agent session Logs.
//!
//! Data flows one way: RPC → session actor → store. Projections (`history`) are pure
//! functions over events; the actor calls them and records what they return.

pub mod activation;
pub mod allocator;
pub mod api;
pub mod config;
pub mod context;
pub mod daemon;
pub mod fault;
pub mod filesystem;
pub mod framing;
pub mod history;
pub mod import;
pub mod ops;
pub mod peer;
pub mod pgstore;
pub mod provider;
pub mod registry;
pub mod server;
pub mod session;
pub mod snapshot;
pub mod store;
pub mod storecopy;
pub mod sweep;
pub mod text;
pub mod tools;
pub mod turn;
pub mod undo;
pub mod verbs;
pub mod watch;
