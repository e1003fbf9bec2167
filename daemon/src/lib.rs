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
pub mod filesystem;
pub mod framing;
pub mod hooks;
pub mod imports;
pub mod live;
pub mod ops;
pub mod peer;
pub mod prompt;
pub mod register;
pub mod registry;
pub mod server;
pub mod session;
pub mod storecopy;
pub mod turn;
pub mod undo;
pub mod uuids;
pub mod verbs;
pub mod watch;

// The layers below the daemon are crates of their own (ARCHITECTURE.md: crate graph).
// They are re-exported under their old module names, so `crate::history::fold` and
// `agentd::store::LogStore` name the same items as before the split.
pub use agentd_base::text;
pub use agentd_history as history;
pub use agentd_import as import;
pub use agentd_provider as provider;
pub use agentd_snapshot as snapshot;
pub use agentd_store as store;
pub use agentd_store::{fault, pgstore, sweep};
pub use agentd_tools as tools;
