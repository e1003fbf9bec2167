//! One connection to one MCP server over rmcp: spawning a stdio server in its own
//! process group with only the environment its config names, the dual-era handshake
//! (the 2026-07-28 `server/discover` probe, falling back to `initialize` 2025-11-25),
//! paginated `tools/list`, `tools/call` with idle (progress-reset) and hard timeouts and
//! `notifications/cancelled` on interrupt, and stopping the whole group. All rmcp types
//! stay inside this module.

// Roots are deprecated by the 2026-07-28 revision, but the servers of the 2025-11-25 era
// (server-filesystem among them) confine themselves to the roots a client answers.
#![allow(deprecated)]

use crate::config::ServerConfig;
use crate::reap::{self, Record};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientConfig, ClientRequest, ListRootsResult, ProtocolVersion, ServerResult,
};
use rmcp::service::ClientServiceExt;
use rmcp::service::{
    ClientLifecycleMode, NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient,
    RunningService, ServiceError,
};
use rmcp::transport::TokioChildProcess;
use rmcp::ClientHandler;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// Variables a server inherits from agentd besides those its config names.
pub const BASE_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];
/// Bytes of a server's stderr kept for error reports.
const STDERR_TAIL: usize = 4096;

/// A tool as a server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// `inputSchema` as the server wrote it.
    pub schema: Value,
    /// `annotations` as the server wrote them (`null` when absent).
    pub annotations: Value,
}

impl ToolInfo {
    pub fn read_only_hint(&self) -> bool {
        self.annotations["readOnlyHint"] == json!(true)
    }
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// `protocol`, `timeout`, `cancelled`, `transport_closed`, `startup_failed`,
    /// `input_required_unsupported`, `unknown_tool`.
    pub kind: &'static str,
    pub message: String,
}

impl CallError {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        CallError {
            kind,
            message: message.into(),
        }
    }
}

/// What the connection reports upward.
#[derive(Clone)]
pub struct Signals {
    /// Set by `notifications/tools/list_changed`; cleared when the list is fetched.
    pub tools_changed: Arc<AtomicBool>,
    /// When the latest `list_changed` arrived (for the quiet window of
    /// [`Signals::changed_within`]).
    pub changed_at: Arc<Mutex<Option<Instant>>>,
    /// `notifications/progress` as `{progress, total?, message?}` (a session's calls run
    /// one at a time, so a subscriber during a call sees that call's progress).
    pub progress: tokio::sync::broadcast::Sender<Value>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            tools_changed: Arc::default(),
            changed_at: Arc::default(),
            progress: tokio::sync::broadcast::channel(64).0,
        }
    }
}

impl Signals {
    /// How long ago the latest `list_changed` arrived, when that is less than `window`
    /// (the server may still be changing its list).
    pub fn changed_within(&self, window: Duration) -> Option<Duration> {
        let at = *self.changed_at.lock().unwrap_or_else(|p| p.into_inner());
        at.map(|t| t.elapsed()).filter(|d| *d < window)
    }
}

struct Handler {
    info: ClientConfig,
    roots: ListRootsResult,
    signals: Signals,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ListRootsResult, rmcp::ErrorData>> + Send + '_ {
        std::future::ready(Ok(self.roots.clone()))
    }

    fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let mut v = json!({"progress": params.progress});
        if let Some(t) = params.total {
            v["total"] = json!(t);
        }
        if let Some(m) = params.message {
            v["message"] = json!(m);
        }
        let _ = self.signals.progress.send(v);
        std::future::ready(())
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        *self
            .signals
            .changed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.signals.tools_changed.store(true, Ordering::Release);
        std::future::ready(())
    }
}

/// Runs a stdio server confined: handed down by the daemon for the servers that opt in
/// to the session's command sandbox (`sandbox = true`). This crate knows nothing of how
/// the confinement is built; it spawns the command it is given and keeps the guard for
/// as long as the server runs.
pub trait Confine: Send + Sync + std::fmt::Debug {
    /// The command that runs `argv` in `cwd` with exactly `env` (stdio is the caller's),
    /// or why it cannot be built (the server then fails to start with that message).
    fn command(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(String, String)],
    ) -> Result<Confined, String>;
}

/// A confined command and what it holds.
pub struct Confined {
    pub command: std::process::Command,
    pub guard: Box<dyn Confinement>,
}

/// What a confined server holds while it runs; dropping it tears the confinement down
/// (leftover processes killed, temporary directories removed).
pub trait Confinement: Send + Sync {
    /// What is in force, read once the server runs (recorded in the Log and shown by
    /// `agentctl mcp list`).
    fn facts(&mut self) -> Value;

    /// The confined command was spawned as `pid`.
    fn started(&mut self, _pid: i32) {}

    /// Before each request to the server (and before it is stopped): the confinement
    /// may have held the server still since the last request ended.
    fn before_request(&mut self) {}

    /// After each request, paired with [`Confinement::before_request`]: undoes what the
    /// confinement could not prevent (protected files changed where there is no mount
    /// namespace); one line per fix, for the model.
    fn after_request(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// One request to a confined server: [`Confinement::before_request`] now, and
/// [`Confinement::after_request`] when it ends however it ends (a call dropped by an
/// interrupted turn included); the fixes wait in the connection for
/// [`Connection::after_call`].
struct InRequest<'a>(&'a Connection);

impl<'a> InRequest<'a> {
    fn new(c: &'a Connection) -> Self {
        if let Some(g) = c
            .confinement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            g.before_request();
        }
        InRequest(c)
    }
}

impl Drop for InRequest<'_> {
    fn drop(&mut self) {
        let fixes = self
            .0
            .confinement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .map(|g| g.after_request())
            .unwrap_or_default();
        if !fixes.is_empty() {
            self.0
                .fixes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(fixes);
        }
    }
}

/// Everything a start needs besides the server's own config.
#[derive(Debug, Clone)]
pub struct StartContext {
    pub workspace: PathBuf,
    /// Where the pid record goes (`<home>/mcp/running`).
    pub run_dir: PathBuf,
    pub session_id: String,
    /// The values of [`BASE_ENV`] and of every `env_vars` name, from agentd's environment.
    pub inherited_env: Vec<(String, String)>,
    /// How servers with `sandbox = true` are confined; `None` where there is no sandbox
    /// (such a server then fails to start, it never runs unconfined).
    pub confine: Option<Arc<dyn Confine>>,
}

/// A started server.
pub struct Connection {
    service: Mutex<Option<RunningService<RoleClient, Handler>>>,
    peer: Peer<RoleClient>,
    pub protocol: String,
    pub pid: Option<i32>,
    record: Option<PathBuf>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    pub signals: Signals,
    pub started_in: Duration,
    /// What the sandbox put in force, for a confined server.
    pub sandbox: Option<Value>,
    /// Held while the server runs; dropped after its group is gone.
    confinement: Mutex<Option<Box<dyn Confinement>>>,
    /// What the confinement fixed after requests, not yet told to the model.
    fixes: Mutex<Vec<String>>,
}

fn client_info() -> ClientConfig {
    serde_json::from_value(json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {"roots": {"listChanged": false}},
        "clientInfo": {"name": "agentd", "version": env!("CARGO_PKG_VERSION")},
    }))
    .expect("static client info")
}

fn file_uri(p: &Path) -> String {
    let mut s = String::from("file://");
    for b in p.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// What servers may inherit from agentd's environment (read through `get`): the
/// [`BASE_ENV`] variables and every variable some server names
/// ([`ServerConfig::env_names`]).
pub fn inheritable<'a>(
    servers: impl IntoIterator<Item = &'a ServerConfig>,
    get: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut names: Vec<String> = BASE_ENV.iter().map(|s| s.to_string()).collect();
    for s in servers {
        names.extend(s.env_names().into_iter().map(str::to_string));
    }
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|n| get(&n).map(|v| (n, v)))
        .collect()
}

/// The environment a stdio server gets: [`BASE_ENV`] and `env_vars` from agentd's
/// environment (as collected in `inherited`), then the literal `env`.
pub fn server_env(cfg: &ServerConfig, inherited: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = inherited
        .iter()
        .filter(|(k, _)| BASE_ENV.contains(&k.as_str()) || cfg.env_vars.contains(k))
        .cloned()
        .collect();
    for (k, v) in &cfg.env {
        out.retain(|(ok, _)| ok != k);
        out.push((k.clone(), v.clone()));
    }
    out
}

fn handler(ctx: &StartContext, signals: &Signals) -> Handler {
    Handler {
        info: client_info(),
        roots: serde_json::from_value(json!({"roots": [{
            "uri": file_uri(&ctx.workspace), "name": "workspace"}]}))
        .expect("roots"),
        signals: signals.clone(),
    }
}

/// Dual era: probe with `server/discover` (2026-07-28), fall back to `initialize`
/// (2025-11-25); straight to `initialize` for a server known to be legacy.
fn lifecycle(legacy: bool) -> ClientLifecycleMode {
    if legacy {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        }
    }
}

fn lookup<'a>(ctx: &'a StartContext, var: &str) -> Option<&'a str> {
    ctx.inherited_env
        .iter()
        .find(|(k, _)| k == var)
        .map(|(_, v)| v.as_str())
}

impl Connection {
    /// Connects a streamable HTTP server: bearer token and headers from the variables
    /// config names (looked up in `ctx.inherited_env`), literal headers of a client entry.
    async fn start_http(
        name: &str,
        cfg: &ServerConfig,
        ctx: &StartContext,
        legacy: bool,
        began: Instant,
    ) -> Result<Connection, CallError> {
        use rmcp::transport::streamable_http_client::{
            StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
        };
        let url = cfg.url.as_deref().unwrap_or_default();
        let fail =
            |m: String| CallError::new("startup_failed", format!("MCP server `{name}`: {m}"));
        let mut tc = StreamableHttpClientTransportConfig::with_uri(url);
        if let Some(var) = &cfg.bearer_token_env {
            let token = lookup(ctx, var)
                .ok_or_else(|| fail(format!("bearer_token_env `{var}` is not set")))?;
            tc = tc.auth_header(token);
        }
        let mut headers = std::collections::HashMap::new();
        let named = cfg.headers_env.iter().map(|(h, var)| {
            lookup(ctx, var)
                .map(|v| (h.clone(), v.to_string()))
                .ok_or_else(|| fail(format!("headers_env: `{var}` (for {h}) is not set")))
        });
        let literal = cfg.headers.iter().map(|(h, v)| Ok((h.clone(), v.clone())));
        for pair in named.chain(literal) {
            let (h, v) = pair?;
            let hn = http::HeaderName::from_bytes(h.as_bytes())
                .map_err(|e| fail(format!("header `{h}`: {e}")))?;
            let hv =
                http::HeaderValue::from_str(&v).map_err(|e| fail(format!("header `{h}`: {e}")))?;
            headers.insert(hn, hv);
        }
        tc.custom_headers = headers;
        let transport =
            StreamableHttpClientTransport::with_client(crate::http::HttpClient::default(), tc);
        let signals = Signals::default();
        let timeout = cfg.startup_timeout();
        let service = match tokio::time::timeout(
            timeout,
            handler(ctx, &signals).serve_with_lifecycle(transport, lifecycle(legacy)),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(fail(format!("connecting to {url} failed: {e}"))),
            Err(_) => {
                return Err(fail(format!(
                    "{url} did not answer its handshake within {:.1} s (startup_timeout_s)",
                    timeout.as_secs_f64()
                )))
            }
        };
        let peer = service.peer().clone();
        let protocol = peer
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_else(|| "2026-07-28".into());
        Ok(Connection {
            service: Mutex::new(Some(service)),
            peer,
            protocol,
            pid: None,
            record: None,
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            signals,
            started_in: began.elapsed(),
            sandbox: None,
            confinement: Mutex::new(None),
            fixes: Mutex::new(Vec::new()),
        })
    }

    /// Spawns (stdio) and connects, lists nothing yet. `legacy` skips the discover probe
    /// (the server answered `initialize` before). Bounded by the config's startup timeout.
    pub async fn start(
        name: &str,
        cfg: &ServerConfig,
        ctx: &StartContext,
        legacy: bool,
    ) -> Result<Connection, CallError> {
        let began = Instant::now();
        let Some(program) = cfg.command.as_deref() else {
            return Self::start_http(name, cfg, ctx, legacy, began).await;
        };
        let env = server_env(cfg, &ctx.inherited_env);
        let cwd = cfg
            .cwd
            .as_deref()
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.workspace.clone());
        let mut confinement: Option<Box<dyn Confinement>> = None;
        let cmd = if cfg.sandboxed() {
            let Some(confine) = &ctx.confine else {
                return Err(CallError::new(
                    "startup_failed",
                    format!(
                        "MCP server `{name}` asks for the sandbox (sandbox = true), and no \
                         command sandbox is available here; it is not run unconfined"
                    ),
                ));
            };
            let argv: Vec<String> = std::iter::once(program.to_string())
                .chain(cfg.args.iter().cloned())
                .collect();
            let confined = confine.command(&argv, &cwd, &env).map_err(|m| {
                CallError::new("startup_failed", format!("MCP server `{name}`: {m}"))
            })?;
            confinement = Some(confined.guard);
            tokio::process::Command::from(confined.command)
        } else {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(&cfg.args).env_clear().envs(env).current_dir(cwd);
            cmd
        };
        let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
        wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
        let (transport, stderr_pipe) = TokioChildProcess::builder(wrap)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                CallError::new(
                    "startup_failed",
                    format!("MCP server `{name}`: cannot run `{program}`: {e}"),
                )
            })?;
        let pid = transport.id().map(|p| p as i32);
        if let (Some(c), Some(pid)) = (confinement.as_mut(), pid) {
            c.started(pid);
        }
        let record = pid.and_then(|pid| {
            let rec = Record {
                pid,
                pgid: pid,
                start_time: reap::start_time(pid).unwrap_or(0),
                session_id: ctx.session_id.clone(),
                server: name.to_string(),
            };
            reap::write(&ctx.run_dir, &rec)
                .map_err(|e| tracing::warn!(server = name, error = %e, "MCP pid record"))
                .ok()
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(mut pipe) = stderr_pipe {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend(&buf[..n]);
                    let over = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..over);
                }
            });
        }
        let signals = Signals::default();
        let handler = handler(ctx, &signals);
        let lifecycle = lifecycle(legacy);
        let fail = |msg: String, stderr: &Arc<Mutex<VecDeque<u8>>>| {
            if let Some(pid) = pid {
                reap::signal_group(pid, libc::SIGKILL);
            }
            if let Some(r) = &record {
                let _ = std::fs::remove_file(r);
            }
            let tail = tail_text(stderr);
            let msg = if tail.is_empty() {
                msg
            } else {
                format!("{msg}; stderr: {tail}")
            };
            CallError::new("startup_failed", msg)
        };
        let timeout = cfg.startup_timeout();
        let service =
            match tokio::time::timeout(timeout, handler.serve_with_lifecycle(transport, lifecycle))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    // A sandbox that could not be built says why in its report.
                    let why = confinement
                        .as_mut()
                        .map(|c| c.facts())
                        .and_then(|f| f.get("error").and_then(Value::as_str).map(String::from))
                        .map(|w| format!(" (the sandbox could not be built: {w})"))
                        .unwrap_or_default();
                    return Err(fail(
                        format!("MCP server `{name}` failed its handshake: {e}{why}"),
                        &stderr,
                    ));
                }
                Err(_) => {
                    return Err(fail(
                        format!(
                            "MCP server `{name}` did not answer its handshake within {:.1} s (startup_timeout_s)",
                            timeout.as_secs_f64()
                        ),
                        &stderr,
                    ))
                }
            };
        let peer = service.peer().clone();
        let protocol = peer
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_else(|| "2026-07-28".into());
        // The server answered its handshake, so the confinement's report is complete.
        let sandbox = confinement.as_mut().map(|c| c.facts());
        Ok(Connection {
            service: Mutex::new(Some(service)),
            peer,
            protocol,
            pid,
            record,
            stderr,
            signals,
            started_in: began.elapsed(),
            sandbox,
            confinement: Mutex::new(confinement),
            fixes: Mutex::new(Vec::new()),
        })
    }

    /// The confinement's fixes after the requests that ended since the last time (see
    /// [`Confinement::after_request`]).
    pub fn after_call(&self) -> Vec<String> {
        std::mem::take(&mut *self.fixes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// True when the server negotiated the `initialize` era.
    pub fn is_legacy(&self) -> bool {
        self.protocol.as_str() < "2026-07-28"
    }

    /// True once the server's pipes closed (it exited or was killed).
    pub fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    pub fn stderr_tail(&self) -> String {
        tail_text(&self.stderr)
    }

    /// Every page of `tools/list`, bounded by `timeout`.
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<ToolInfo>, CallError> {
        self.signals.tools_changed.store(false, Ordering::Release);
        let _in = InRequest::new(self);
        let tools = match tokio::time::timeout(timeout, self.peer.list_all_tools()).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(service_error(e)),
            Err(_) => {
                return Err(CallError::new(
                    "timeout",
                    format!("tools/list took over {:.1} s", timeout.as_secs_f64()),
                ))
            }
        };
        Ok(tools
            .into_iter()
            .map(|t| ToolInfo {
                name: t.name.to_string(),
                title: t
                    .title
                    .clone()
                    .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone())),
                description: t.description.as_deref().unwrap_or_default().to_string(),
                schema: Value::Object((*t.input_schema).clone()),
                annotations: t
                    .annotations
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok())
                    .unwrap_or(Value::Null),
            })
            .collect())
    }

    /// `tools/call`: the raw result object, or why there is none. `idle` is reset by
    /// progress notifications; `hard` bounds the whole call. On `cancel` the server gets
    /// `notifications/cancelled` and the call answers `cancelled` at once.
    pub async fn call(
        &self,
        tool: &str,
        args: Value,
        idle: Duration,
        hard: Duration,
        cancel: &CancellationToken,
    ) -> Result<Value, CallError> {
        let params: CallToolRequestParams =
            serde_json::from_value(json!({"name": tool, "arguments": args}))
                .map_err(|e| CallError::new("protocol", format!("bad arguments: {e}")))?;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let _in = InRequest::new(self);
        let mut opts = PeerRequestOptions::with_timeout(idle).reset_timeout_on_progress();
        opts.max_total_timeout = Some(hard);
        let handle = self
            .peer
            .send_request_with_option(request, opts)
            .await
            .map_err(service_error)?;
        let id = handle.id.clone();
        let response = tokio::select! {
            r = handle.await_response() => r,
            _ = cancel.cancelled() => {
                let note = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("the turn was interrupted".into()),
                ));
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    self.peer.send_notification(note.into()),
                )
                .await;
                return Err(CallError::new("cancelled", format!("the call of `{tool}` was interrupted")));
            }
        };
        match response {
            Ok(ServerResult::CallToolResult(r)) => serde_json::to_value(r)
                .map_err(|e| CallError::new("protocol", format!("result: {e}"))),
            Ok(ServerResult::InputRequiredResult(_)) => Err(CallError::new(
                "input_required_unsupported",
                format!("`{tool}` asked for user input, which agentd does not provide"),
            )),
            Ok(ServerResult::CreateTaskResult(_)) => Err(CallError::new(
                "protocol",
                format!("`{tool}` answered with a task, which agentd does not poll"),
            )),
            Ok(other) => match serde_json::to_value(&other) {
                Ok(v) if v.get("content").is_some() || v.get("structuredContent").is_some() => {
                    Ok(v)
                }
                _ => Err(CallError::new(
                    "protocol",
                    format!("`{tool}` answered with an unexpected result"),
                )),
            },
            Err(e) => Err(service_error(e)),
        }
    }

    /// Stops the server: stdin closed (up to 2 s for a clean exit), then SIGTERM and
    /// SIGKILL to the whole group, and its pid record removed.
    pub async fn stop(&self) {
        // A server held still between requests is let go first, so it can exit cleanly.
        if let Some(g) = self
            .confinement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            g.before_request();
        }
        let service = self
            .service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(service) = service {
            let _ = tokio::time::timeout(Duration::from_secs(2), service.cancel()).await;
        }
        if let Some(pid) = self.pid {
            let _ = tokio::task::spawn_blocking(move || {
                reap::stop_group(pid, pid, Duration::from_secs(1))
            })
            .await;
        }
        if let Some(r) = &self.record {
            let _ = std::fs::remove_file(r);
        }
        // After the group: whatever the server left in its sandbox goes now.
        let guard = self
            .confinement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(g) = guard {
            let _ = tokio::task::spawn_blocking(move || drop(g)).await;
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // A connection dropped without `stop` (a daemon shutting down in a hurry) still
        // takes its whole group with it.
        if self.service.get_mut().map(|s| s.is_some()).unwrap_or(false) {
            if let Some(pid) = self.pid {
                reap::signal_group(pid, libc::SIGKILL);
            }
            if let Some(r) = &self.record {
                let _ = std::fs::remove_file(r);
            }
        }
    }
}

fn tail_text(t: &Arc<Mutex<VecDeque<u8>>>) -> String {
    let t = t.lock().unwrap_or_else(|p| p.into_inner());
    let bytes: Vec<u8> = t.iter().copied().collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

fn service_error(e: ServiceError) -> CallError {
    match e {
        ServiceError::McpError(d) => CallError::new("protocol", d.message.to_string()),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => CallError::new(
            "transport_closed",
            "the MCP server closed its connection (it exited or was killed)",
        ),
        ServiceError::Timeout { timeout } => CallError::new(
            "timeout",
            format!(
                "no answer nor progress for {:.1} s (tool_timeout_s / tool_max_s)",
                timeout.as_secs_f64()
            ),
        ),
        ServiceError::Cancelled { reason } => CallError::new(
            "cancelled",
            reason.unwrap_or_else(|| "cancelled".to_string()),
        ),
        other => CallError::new("protocol", other.to_string()),
    }
}
