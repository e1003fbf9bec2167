//! Wire types shared by the daemon and its clients.
//!
//! Everything a client, a test or another harness can observe is defined here: the Log
//! event envelope (DESIGN §4), the error kinds (§5), session id rules (§4) and the RPC
//! params/results (§6). The crate has no I/O so that both sides agree on bytes.

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
