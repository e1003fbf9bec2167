//! What the bridge process shares between its client connections: the daemon connection
//! and the options; and the daemon's answer to which session a thread id names
//! (docs/protocol.md#session-uuids).

use crate::cli::AppServerArgs;
use crate::daemon::{self, Target};
use crate::rpc::{to_params, Conn};
use agentctl::acp::params::RpcErr;
use agentd_proto::rpc::{method, ResolveParams, SessionParams};
use agentd_proto::session_uuid;
use agentd_proto::{AgentError, ErrorKind};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// What the bridge process shares between its client connections: the daemon, the
/// options, the model catalog.
pub struct Shared {
    pub target: Target,
    pub args: AppServerArgs,
    daemon: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

impl Shared {
    pub fn new(target: Target, args: AppServerArgs) -> Shared {
        Shared {
            target,
            args,
            daemon: tokio::sync::Mutex::new(None),
        }
    }

    /// The shared daemon connection, (re)connecting (and starting agentd) when it is gone.
    async fn conn(&self) -> Result<Arc<Conn>, AgentError> {
        let mut g = self.daemon.lock().await;
        if let Some(c) = g.as_ref() {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        *g = None;
        let c = Arc::new(daemon::connect_or_start(&self.target).await?.conn);
        *g = Some(c.clone());
        Ok(c)
    }

    /// Calls `m` on the daemon with `params`, one of `agentd_proto::rpc`'s param types
    /// (the ones the daemon parses them with).
    pub async fn call<P: Serialize>(&self, m: &str, params: &P) -> Result<Value, AgentError> {
        let params = to_params(params)?;
        let c = self.conn().await?;
        let r = c.call(m, params).await;
        if matches!(&r, Err(e) if e.kind == ErrorKind::DaemonUnavailable) {
            *self.daemon.lock().await = None;
        }
        r
    }

    /// The session a client's thread id names and the UUID it shows as: the daemon's
    /// index answers, for agentd's own ids, ids a client chose and the recorded aliases
    /// of imported sessions alike (docs/protocol.md#session-uuids).
    pub async fn resolve(&self, thread_id: &str) -> Result<(String, String), RpcErr> {
        if session_uuid::resolve(thread_id).is_none() {
            return Err(RpcErr::params(format!(
                "thread id `{}` is not a UUID",
                thread_id.chars().take(64).collect::<String>()
            )));
        }
        match self.call(method::RESOLVE, &resolve(thread_id)).await {
            Ok(r) => Ok((
                r["session_id"].as_str().unwrap_or_default().to_string(),
                r["uuid"].as_str().unwrap_or_default().to_string(),
            )),
            Err(e) if e.kind == ErrorKind::NotFound => Err(RpcErr::new(
                -32600,
                format!("thread not found: {thread_id}"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The UUID session `sid` shows as (its own when the daemon does not know it).
    pub async fn uuid_of(&self, sid: &str) -> String {
        match self.call(method::RESOLVE, &resolve(sid)).await {
            Ok(r) => r["uuid"]
                .as_str()
                .map_or_else(|| session_uuid::to_uuid(sid), str::to_string),
            Err(_) => session_uuid::to_uuid(sid),
        }
    }
}

/// `agentd/resolve`'s params for `id`.
fn resolve(id: &str) -> ResolveParams {
    ResolveParams { id: id.to_string() }
}

/// `agentd/show`'s, the goal getters' and the session verbs' params: the session alone.
pub fn session(sid: &str) -> SessionParams {
    SessionParams {
        session_id: sid.to_string(),
    }
}

pub fn parse<T: DeserializeOwned>(params: Value, what: &str) -> Result<T, RpcErr> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params).map_err(|e| RpcErr::params(format!("{what}: {e}")))
}
