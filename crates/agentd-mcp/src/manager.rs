//! The MCP servers of one session: started together (in parallel, each bounded by its
//! startup timeout), their tools offered under mangled names in a stable order, calls
//! routed by raw (server, tool), a dead server restarted at its next call, a
//! `list_changed` applied when the tools are next asked for (that is, at the next
//! provider call, never mid-call) once the server has been quiet for [`LIST_QUIET`]
//! (debounced, bounded by [`LIST_SETTLE`]), and every server stopped as a whole process
//! group.
//! Owns the per-session state; reports through return values only.

use crate::client::{CallError, Connection, StartContext, ToolInfo};
use crate::config::ServerConfig;
use crate::names::{self, Mangled};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A `list_changed` is acted on once the server has sent none for this long...
pub const LIST_QUIET: std::time::Duration = std::time::Duration::from_millis(100);
/// ...or once this much time has passed since the provider call began waiting, whichever
/// comes first.
pub const LIST_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A server that did not start, for the turn to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    pub server: String,
    pub message: String,
    pub required: bool,
}

/// One MCP tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    pub name: String,
    pub server: String,
    pub tool: ToolInfo,
    /// The user trusts this tool to be read-only (config `read_only_tools`, or
    /// `trust_annotations` with `readOnlyHint`).
    pub trusted_read_only: bool,
}

/// A server's state for `agentctl mcp list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    pub name: String,
    /// `not_started`, `ready`, `failed`, `stopped`.
    pub state: &'static str,
    pub transport: &'static str,
    pub tools: usize,
    pub protocol: Option<String>,
    pub pid: Option<i32>,
    pub last_error: Option<String>,
    pub started_ms: Option<u64>,
    /// What the command sandbox put in force, for a server that runs in it.
    pub sandbox: Option<Value>,
}

impl ServerStatus {
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name, "state": self.state, "transport": self.transport,
            "tools": self.tools, "protocol": self.protocol, "pid": self.pid,
            "last_error": self.last_error, "started_ms": self.started_ms,
            "sandbox": self.sandbox,
        })
    }
}

struct Live {
    conn: Arc<Connection>,
    tools: Vec<ToolInfo>,
}

struct Slot {
    name: String,
    cfg: ServerConfig,
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
    /// The server answered `initialize` before: skip the discover probe next time.
    legacy: AtomicBool,
    last_error: Mutex<Option<String>>,
    stopped: AtomicBool,
}

impl Slot {
    fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }

    /// The running server, started (or restarted after it died) if need be.
    async fn ensure(&self, ctx: &StartContext) -> Result<Arc<Live>, CallError> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref() {
            if !l.conn.is_closed() {
                return Ok(l.clone());
            }
            let dead = live.take().expect("checked");
            let tail = dead.conn.stderr_tail();
            dead.conn.stop().await;
            tracing::info!(server = %self.name, stderr = %tail, "MCP server exited; restarting");
        }
        let conn = Connection::start(
            &self.name,
            &self.cfg,
            ctx,
            self.legacy.load(Ordering::Relaxed),
        )
        .await
        .inspect_err(|e| self.set_error(Some(e.message.clone())))?;
        self.legacy.store(conn.is_legacy(), Ordering::Relaxed);
        let tools = match conn.list_tools(self.cfg.startup_timeout()).await {
            Ok(t) => t,
            Err(e) => {
                conn.stop().await;
                let msg = format!(
                    "MCP server `{}`: tools/list failed: {}",
                    self.name, e.message
                );
                self.set_error(Some(msg.clone()));
                return Err(CallError::new("startup_failed", msg));
            }
        };
        self.set_error(None);
        self.stopped.store(false, Ordering::Relaxed);
        let l = Arc::new(Live {
            conn: Arc::new(conn),
            tools,
        });
        *live = Some(l.clone());
        Ok(l)
    }
}

/// Everything a manager needs: the merged servers and where they run.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    pub servers: BTreeMap<String, ServerConfig>,
    pub start: StartContext,
}

/// The MCP servers of one session.
pub struct Manager {
    slots: BTreeMap<String, Arc<Slot>>,
    ctx: StartContext,
    /// The latest offering.
    offered: Mutex<Vec<Offered>>,
    /// Calls in flight, and when the servers were last used (started, listed, called).
    active: std::sync::atomic::AtomicUsize,
    last_used: Mutex<std::time::Instant>,
}

/// Counts a call in flight for [`Manager::idle_for`].
struct InFlight<'a>(&'a Manager);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Manager {
    pub fn new(opts: ManagerOptions) -> Self {
        let slots = opts
            .servers
            .into_iter()
            .filter(|(_, c)| c.enabled)
            .map(|(name, cfg)| {
                let slot = Slot {
                    name: name.clone(),
                    cfg,
                    live: tokio::sync::Mutex::new(None),
                    legacy: AtomicBool::new(false),
                    last_error: Mutex::new(None),
                    stopped: AtomicBool::new(false),
                };
                (name, Arc::new(slot))
            })
            .collect();
        Manager {
            slots,
            ctx: opts.start,
            offered: Mutex::new(Vec::new()),
            active: std::sync::atomic::AtomicUsize::new(0),
            last_used: Mutex::new(std::time::Instant::now()),
        }
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
    }

    /// How long the servers have gone unused; `None` while a call runs.
    pub fn idle_for(&self) -> Option<std::time::Duration> {
        if self.active.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(
            self.last_used
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed(),
        )
    }

    /// True while some server of the session runs.
    pub async fn any_running(&self) -> bool {
        for slot in self.slots.values() {
            if slot.live.lock().await.is_some() {
                return true;
            }
        }
        false
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn server_names(&self) -> Vec<String> {
        self.slots.keys().cloned().collect()
    }

    pub fn config(&self, server: &str) -> Option<&ServerConfig> {
        self.slots.get(server).map(|s| &s.cfg)
    }

    /// Starts every server not running, in parallel; returns those that failed.
    pub async fn start(&self) -> Vec<StartFailure> {
        self.touch();
        let mut set = tokio::task::JoinSet::new();
        for slot in self.slots.values() {
            let (slot, ctx) = (slot.clone(), self.ctx.clone());
            set.spawn(async move {
                slot.ensure(&ctx).await.err().map(|e| StartFailure {
                    server: slot.name.clone(),
                    message: e.message,
                    required: slot.cfg.required,
                })
            });
        }
        let mut failed: Vec<StartFailure> = set.join_all().await.into_iter().flatten().collect();
        failed.sort_by(|a, b| a.server.cmp(&b.server));
        failed
    }

    /// The tools of the running servers, after each server's allow and deny lists,
    /// sorted by (server, tool) with their model-visible names. A server that announced
    /// `list_changed` is listed again first. Remembered for [`Manager::resolve`].
    pub async fn tools(&self) -> Vec<Offered> {
        self.touch();
        let mut all: Vec<(String, ToolInfo, bool)> = Vec::new();
        for slot in self.slots.values() {
            let live = slot.live.lock().await.clone();
            let Some(mut live) = live else { continue };
            if live.conn.signals.tools_changed.load(Ordering::Acquire) && !live.conn.is_closed() {
                // Debounced: a server still announcing changes is given until it has
                // been quiet for LIST_QUIET (at most LIST_SETTLE in all), so a burst
                // or a trickle of notifications costs one listing of its final list.
                let began = std::time::Instant::now();
                while let Some(ago) = live.conn.signals.changed_within(LIST_QUIET) {
                    let left = LIST_SETTLE.saturating_sub(began.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    tokio::time::sleep((LIST_QUIET - ago).min(left)).await;
                }
                match live.conn.list_tools(slot.cfg.startup_timeout()).await {
                    Ok(tools) => {
                        let mut guard = slot.live.lock().await;
                        if let Some(cur) = guard.as_mut() {
                            if Arc::ptr_eq(&cur.conn, &live.conn) {
                                *cur = Arc::new(Live {
                                    conn: cur.conn.clone(),
                                    tools,
                                });
                                live = cur.clone();
                            }
                        }
                    }
                    Err(e) => slot.set_error(Some(format!("tools/list: {}", e.message))),
                }
            }
            for t in &live.tools {
                if slot.cfg.offers(&t.name) {
                    let trusted = slot.cfg.read_only_tools.contains(&t.name)
                        || (slot.cfg.trust_annotations && t.read_only_hint());
                    all.push((slot.name.clone(), t.clone(), trusted));
                }
            }
        }
        let by_pair: BTreeMap<(String, String), (ToolInfo, bool)> = all
            .into_iter()
            .map(|(s, t, tr)| ((s, t.name.clone()), (t, tr)))
            .collect();
        let mangled: Vec<Mangled> =
            names::assign(by_pair.keys().map(|(s, t)| (s.as_str(), t.as_str())));
        let offered: Vec<Offered> = mangled
            .into_iter()
            .map(|m| {
                let (tool, trusted) = by_pair[&(m.server.clone(), m.tool.clone())].clone();
                Offered {
                    name: m.name,
                    server: m.server,
                    tool,
                    trusted_read_only: trusted,
                }
            })
            .collect();
        *self.offered.lock().unwrap_or_else(|p| p.into_inner()) = offered.clone();
        offered
    }

    /// True when a running server announced `list_changed` since its tools were last
    /// listed (the next [`Manager::tools`] lists it again).
    pub async fn tools_changed(&self) -> bool {
        for slot in self.slots.values() {
            if let Some(l) = slot.live.lock().await.as_ref() {
                if l.conn.signals.tools_changed.load(Ordering::Acquire) {
                    return true;
                }
            }
        }
        false
    }

    /// The offered tool behind a model-visible name, from the latest [`Manager::tools`].
    pub fn resolve(&self, name: &str) -> Option<Offered> {
        self.offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|o| o.name == name)
            .cloned()
    }

    /// Calls raw `tool` of `server`; a server that died is restarted first.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, CallError> {
        let Some(slot) = self.slots.get(server) else {
            return Err(CallError::new(
                "unknown_tool",
                format!("no MCP server `{server}` in this session"),
            ));
        };
        self.active.fetch_add(1, Ordering::AcqRel);
        let _in_flight = InFlight(self);
        let live = slot.ensure(&self.ctx).await?;
        let res = live
            .conn
            .call(
                tool,
                args,
                slot.cfg.tool_timeout(),
                slot.cfg.tool_max(),
                cancel,
            )
            .await;
        // What the sandbox had to put back is told to the model with the result.
        let fixes = live.conn.after_call();
        let res = match res {
            Ok(mut v) if !fixes.is_empty() => {
                if let Some(content) = v.get_mut("content").and_then(Value::as_array_mut) {
                    content.extend(fixes.iter().map(|f| json!({"type": "text", "text": f})));
                }
                Ok(v)
            }
            other => other,
        };
        if let Err(e) = &res {
            if e.kind == "transport_closed" {
                let tail = live.conn.stderr_tail();
                let msg = if tail.is_empty() {
                    format!("MCP server `{server}` exited during the call of `{tool}`; it will be restarted for the next call")
                } else {
                    format!("MCP server `{server}` exited during the call of `{tool}`; it will be restarted for the next call. stderr: {tail}")
                };
                slot.set_error(Some(msg.clone()));
                return Err(CallError::new("transport_closed", msg));
            }
        }
        res
    }

    /// Progress notifications of `server` from now on (`None` while it is not running).
    pub async fn progress(&self, server: &str) -> Option<tokio::sync::broadcast::Receiver<Value>> {
        let slot = self.slots.get(server)?;
        let live = slot.live.lock().await;
        live.as_ref().map(|l| l.conn.signals.progress.subscribe())
    }

    /// The state of every server.
    pub async fn status(&self) -> Vec<ServerStatus> {
        let mut out = Vec::new();
        for slot in self.slots.values() {
            let live = slot.live.lock().await.clone();
            let last_error = slot
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let state = match (&live, &last_error) {
                (Some(l), _) if !l.conn.is_closed() => "ready",
                (_, Some(_)) => "failed",
                _ if slot.stopped.load(Ordering::Relaxed) => "stopped",
                _ => "not_started",
            };
            out.push(ServerStatus {
                name: slot.name.clone(),
                state,
                transport: slot.cfg.transport(),
                tools: live
                    .as_ref()
                    .map(|l| l.tools.iter().filter(|t| slot.cfg.offers(&t.name)).count())
                    .unwrap_or(0),
                protocol: live.as_ref().map(|l| l.conn.protocol.clone()),
                pid: live.as_ref().and_then(|l| l.conn.pid),
                last_error,
                started_ms: live.as_ref().map(|l| l.conn.started_in.as_millis() as u64),
                sandbox: live.as_ref().and_then(|l| l.conn.sandbox.clone()),
            });
        }
        out
    }

    /// Stops every server (in parallel), each as a whole process group.
    pub async fn stop(&self) {
        let mut set = tokio::task::JoinSet::new();
        for slot in self.slots.values() {
            let slot = slot.clone();
            set.spawn(async move {
                let live = slot.live.lock().await.take();
                if let Some(l) = live {
                    l.conn.stop().await;
                    slot.stopped.store(true, Ordering::Relaxed);
                }
            });
        }
        set.join_all().await;
    }
}
