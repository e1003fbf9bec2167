//! `agentctl mcp-server`: agentd's own sessions served as an MCP server on stdio
//! (docs/mcp-server.md), so another agent (Claude Code, Codex, any MCP client) can consult them.
//!
//! The protocol (the `initialize` handshake of 2025-11-25 and older, and the stateless
//! `server/discover` era of 2026-07-28) is the official Rust SDK's (`rmcp`, server side
//! only); this module supplies its `ServerHandler`. Each tool call is planned by the
//! pure `tools` module (arguments → native JSON-RPC calls, answers → capped text) and
//! run here over one connection to the daemon, opened (and the daemon started) at the
//! first call exactly as every other agentctl command does, and reopened if the daemon
//! went away. Tools that change sessions (`fork`, `turn`) are listed and callable only
//! with `--allow-writes`. Daemon errors reach the client as `isError` results naming
//! the error kind. stdout carries MCP only; nothing else writes there.

pub mod tools;

use crate::daemon::{self, Target};
use crate::rpc::{to_params, Conn, Incoming};
use agentd_proto::rpc::{self, method};
use agentd_proto::{AgentError, ErrorKind};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use std::sync::Arc;
use tools::{Access, Plan};

pub use crate::cli::McpServerArgs;

/// What the server tells a client about itself at `initialize`.
const INSTRUCTIONS: &str = "agentd keeps coding-agent sessions as durable, append-only Logs. \
Use list_sessions or search to find a session, show to read its events page by page, \
context for the exact provider input a continuation would get, tree for its forks, and \
checkpoint for a compact summary of where it stands. Session ids look like \
`20260101T120000-1a2b3c`.";

/// How long a finished `turn` waits, at most, for the subscription to deliver its last
/// events (the wait ends at `turn_ended`; the bound only covers a daemon that is gone).
const PROGRESS_DRAIN: std::time::Duration = std::time::Duration::from_secs(15);

/// The MCP side of `agentctl mcp-server`.
pub struct McpServer {
    target: Target,
    allow_writes: bool,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

impl McpServer {
    pub fn new(target: Target, allow_writes: bool) -> McpServer {
        McpServer {
            target,
            allow_writes,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The daemon connection: the open one, or a new one (starting the daemon).
    async fn conn(&self) -> Result<Arc<Conn>, AgentError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = Arc::new(daemon::connect_or_start(&self.target).await?.conn);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs one planned call; returns its text.
    async fn run(
        &self,
        tool: &str,
        plan: Plan,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, AgentError> {
        if let Plan::Call { method: m, params } = &plan {
            if *m == method::TURN {
                return self.turn(params.clone(), ctx).await;
            }
        }
        let reads = tools::find(tool).is_some_and(|t| t.access == Access::Read);
        let conn = self.conn().await?;
        match self.once(tool, &plan, &conn).await {
            Err(e) if e.kind == ErrorKind::DaemonUnavailable => {
                // The daemon went away since the last call (stopped, restarted,
                // crashed): the next call gets a new connection (which starts a daemon
                // if none runs). A read is safe to send again at once; a fork may have
                // happened, so it is not.
                self.forget(&conn).await;
                if !reads {
                    return Err(e);
                }
                let conn = self.conn().await?;
                self.once(tool, &plan, &conn).await
            }
            r => r,
        }
    }

    /// Drops `conn` as the shared connection (when it still is).
    async fn forget(&self, conn: &Arc<Conn>) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
        }
    }

    /// One plan (not `turn`) over `conn`.
    async fn once(&self, tool: &str, plan: &Plan, conn: &Conn) -> Result<String, AgentError> {
        match plan {
            Plan::Show {
                session_id,
                header,
                events,
            } => {
                let head = if *header {
                    Some(
                        conn.call(
                            method::SHOW,
                            to_params(&rpc::SessionParams {
                                session_id: session_id.clone(),
                            })?,
                        )
                        .await?,
                    )
                } else {
                    None
                };
                let page = conn.call(method::EVENTS, events.clone()).await?;
                Ok(tools::render_show(head.as_ref(), &page))
            }
            Plan::Call { method: m, params } => {
                let v = conn.call(m, params.clone()).await?;
                Ok(tools::render(tool, &v))
            }
        }
    }

    /// `turn`: runs on its own connection, so the session's events reach this call
    /// alone; with a progress token, each durable step of the turn is reported as
    /// progress (clients that reset their timeout on progress then wait for long turns).
    /// A cancelled call interrupts the turn.
    async fn turn(
        &self,
        params: Value,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, AgentError> {
        let sid = params["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let conn = daemon::connect_or_start(&self.target).await?.conn;
        let mut pump = None;
        if let (Some(token), Some(rx)) = (ctx.meta.get_progress_token(), conn.take_incoming()) {
            conn.subscribe(&sid, None, false).await?;
            pump = Some(tokio::spawn(report_progress(rx, ctx.peer.clone(), token)));
        }
        let outcome = tokio::select! {
            r = conn.call(method::TURN, params) => r.map(|v| tools::render("turn", &v)),
            () = ctx.ct.cancelled() => {
                // The client gave up on the call: the turn stops, durably.
                let stop = rpc::InterruptParams {
                    session_id: sid.clone(),
                    reason: Some("cancelled by the MCP client".into()),
                };
                if let Ok(stop) = to_params(&stop) {
                    let _ = conn.call(method::INTERRUPT, stop).await;
                }
                Err(AgentError::new(ErrorKind::Interrupted, "turn cancelled by the MCP client"))
            }
        };
        if let Some(mut p) = pump {
            // The turn's last events may still be on their way: report them before the
            // answer, for a short while at most.
            if tokio::time::timeout(PROGRESS_DRAIN, &mut p).await.is_err() {
                p.abort();
            }
        }
        outcome
    }
}

/// Sends one `notifications/progress` per durable event of the running turn.
async fn report_progress(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Incoming>,
    peer: rmcp::Peer<RoleServer>,
    token: ProgressToken,
) {
    let mut n = 0u32;
    while let Some(msg) = rx.recv().await {
        let Incoming::Notification { method: m, params } = msg else {
            continue;
        };
        if m != agentd_proto::rpc::EVENT_NOTIFICATION {
            continue;
        }
        let event = &params["result"];
        if let Some(text) = tools::progress_message(event) {
            n += 1;
            let mut p = ProgressNotificationParam::new(token.clone(), f64::from(n));
            p.message = Some(text);
            if peer.notify_progress(p).await.is_err() {
                break;
            }
        }
        if event["type"] == "turn_ended" || event["type"] == "turn_failed" {
            break;
        }
    }
}

/// The MCP form of a catalog entry.
pub fn tool_of(t: &tools::ToolSpec) -> Tool {
    let schema = match (t.schema)() {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    let annotations = match t.access {
        Access::Read => ToolAnnotations::with_title(t.title)
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
        // A fork only adds a session; a turn may run the session's writing tools
        // (with `permission_mode: auto`) and calls a model.
        Access::Write => ToolAnnotations::with_title(t.title)
            .read_only(false)
            .destructive(t.name == "turn")
            .idempotent(false)
            .open_world(t.name == "turn"),
    };
    Tool::new(t.name, t.description, schema)
        .with_title(t.title)
        .with_annotations(annotations)
}

/// A daemon (or argument) error as a tool result the calling model can read.
pub fn error_result(e: &AgentError) -> CallToolResult {
    let mut text = format!("error: {}: {}", e.kind.as_str(), e.message);
    if let Some(next) = e.details.get("next_actions").and_then(Value::as_array) {
        let next: Vec<&str> = next.iter().filter_map(Value::as_str).collect();
        if !next.is_empty() {
            text.push_str(&format!("\nnext: {}", next.join("; ")));
        }
    }
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({"error": {
        "kind": e.kind.as_str(),
        "message": e.message,
        "details": e.details,
    }}));
    r
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info =
            Implementation::new("agentd", env!("CARGO_PKG_VERSION")).with_title("agentd sessions");
        info.instructions = Some(INSTRUCTIONS.to_string());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            tools::offered(self.allow_writes).map(tool_of).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let Some(spec) = tools::find(name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                Some(
                    json!({"tools": tools::offered(self.allow_writes).map(|t| t.name).collect::<Vec<_>>()}),
                ),
            ));
        };
        if spec.access == Access::Write && !self.allow_writes {
            return Ok(error_result(&tools::writes_off(name)).into());
        }
        let args = request.arguments.unwrap_or_default();
        let outcome = match tools::plan(name, &args) {
            Ok(plan) => self.run(name, plan, &context).await,
            Err(e) => Err(e),
        };
        Ok(match outcome {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => error_result(&e),
        }
        .into())
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin; returns the exit code.
pub async fn run(target: Target, args: &McpServerArgs) -> i32 {
    let server = McpServer::new(target, args.allow_writes);
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agentctl mcp-server: the MCP handshake failed: {e}");
            return 1;
        }
    };
    match running.waiting().await {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("agentctl mcp-server: {e}");
            1
        }
    }
}
