//! The far end of a client connection, as the layers below the transport see it: a
//! peer that can be sent a request (`agentd/permission`) and may have gone away.
//!
//! The transport (`server`) implements [`Peer`] for its per-connection sink and hands
//! it to handlers through jsonrpsee's `Extensions` as a [`PeerHandle`]; the turn manager
//! routes permission requests to it without knowing what a connection is.

use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

pub trait Peer: Send + Sync {
    /// Sends a request and waits for the peer's whole response object; `None` if the
    /// peer is gone. Dropping the future abandons the request.
    fn request<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, Option<Value>>;
    fn is_closed(&self) -> bool;
}

pub type PeerHandle = Arc<dyn Peer>;
