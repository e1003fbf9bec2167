//! Wire types shared by the daemon and its clients.
//!
//! Everything a client, a test or another harness can observe is defined here: the Log
//! event envelope (docs/log-format.md#the-envelope), the error kinds (docs/protocol.md#errors), session id rules (docs/log-format.md#session-ids) and the RPC
//! params/results (docs/protocol.md#methods). The crate has no I/O so that both sides agree on bytes.

pub mod error;
pub mod event;
pub mod paths;
pub mod replay;
pub mod rpc;
pub mod session_id;
pub mod session_uuid;
pub mod store_url;

pub use error::{AgentError, ErrorKind};
pub use event::{Event, EventDraft, EventType};
