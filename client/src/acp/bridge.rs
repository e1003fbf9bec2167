//! The ACP methods, each mapped onto the native API (docs/protocol.md#methods, docs/acp.md).
//!
//! State kept here is only what ACP has and agentd does not: the sessions this client
//! opened (with their mode, chosen model and "always allow" tools), the running prompts
//! (to cancel them), the client's pending answers to `session/request_permission`, and
//! the model choices the daemon last offered (`agentd/models`, asked again whenever a
//! session opens). Everything durable lives in the daemon's Logs.

use super::map::{self, Live};
use super::params::{
    abs_dir, parse, prompt_input, slash_command, ListReq, NewSession, OpenSession, Prompt,
    SessionRef, SetConfig, SetMode, COMMANDS, MODES,
};
pub use super::params::{check_mode, RpcErr};
use super::{AcpArgs, Out};
use crate::daemon::{self, Target};
use crate::render;
use crate::rpc::{self, to_params, Conn, Incoming};
use agentd_proto::rpc::{self as proto, method, EVENT_NOTIFICATION};
use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

mod commands;

pub const PROTOCOL_VERSION: u64 = 1;
/// After the turn's response, how long to wait for its trailing events.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Events per `agentd/events` page during `session/load`.
const LOAD_PAGE: usize = 20_000;

/// What this client has open.
#[derive(Debug, Clone)]
struct Open {
    workspace: PathBuf,
    mode: String,
    /// The session's own model (its `session_started`), if it names one.
    own_model: Option<String>,
    /// The model picked in the editor; `None` = the session's own.
    model: Option<String>,
    /// The command sandbox mode picked in the editor; `None` = the session's own.
    sandbox: Option<String>,
    /// The reasoning effort picked in the editor; `None` = the provider config's.
    effort: Option<String>,
    always_allow: HashSet<String>,
    /// The `mcpServers` of `session/load` / `session/resume`, sent with every turn (the
    /// daemon keeps client-given servers in memory only; `session/new` gives them to
    /// `agentd/create`).
    mcp_servers: Option<Vec<Value>>,
}

/// The `sandbox` config option's values (`default`: the session's own policy).
const SANDBOX_VALUES: &[(&str, &str)] = &[
    ("default", "Session default"),
    ("workspace_write", "Workspace write"),
    ("read_only", "Read only"),
    ("full_access", "Full access (no sandbox)"),
];

/// The `effort` config option's values (`default`: the provider config's).
const EFFORT_VALUES: &[(&str, &str)] = &[
    ("default", "Provider default"),
    ("minimal", "Minimal"),
    ("low", "Low"),
    ("medium", "Medium"),
    ("high", "High"),
];

struct Running {
    cancelled: Arc<Cancel>,
}

/// Where a prompt stands in the session's event stream (see [`Bridge::on_follow`]).
struct Follow {
    /// The prompt's `client_request_id`, recorded in its `turn_started`.
    request_id: String,
    /// Its turn has started: its events are the prompt's updates.
    mine: bool,
    turn_id: Value,
    /// Its `turn_ended` data, once seen.
    ended: Option<Value>,
    /// The last durable seq seen, the prompt's or not: where a retry subscribes again.
    seen: Option<u64>,
}

impl Follow {
    fn new(request_id: &str) -> Follow {
        Follow {
            request_id: request_id.to_string(),
            mine: false,
            turn_id: Value::Null,
            ended: None,
            seen: None,
        }
    }
}

/// A prompt's cancellation: a flag, and a wake-up for whoever waits on the client;
/// and whether the prompt's own turn runs now (what a cancel may interrupt).
#[derive(Default)]
pub struct Cancel {
    flag: AtomicBool,
    notify: tokio::sync::Notify,
    turn_running: AtomicBool,
}

impl Cancel {
    fn set(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    async fn wait(&self) {
        loop {
            let n = self.notify.notified();
            if self.is_set() {
                return;
            }
            n.await;
        }
    }
}

type Reply = (Value, Vec<(String, Value)>);

/// The daemon's model choices (`agentd/models`), each as its picker value
/// `provider:model`. A picker value goes to the daemon as the model, which reads
/// `provider:model` itself (for every client alike).
#[derive(Debug, Default, Clone)]
struct Catalog {
    choices: Vec<String>,
}

impl Catalog {
    fn from_result(r: &Value) -> Catalog {
        let s = |v: &Value| v.as_str().map(str::to_string);
        let choices = r["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let (p, m) = (s(&c["provider"])?, s(&c["model"])?);
                Some(format!("{p}:{m}"))
            })
            .collect();
        Catalog { choices }
    }
}

pub struct Bridge {
    target: Target,
    args: AcpArgs,
    pub out: Out,
    initialized: AtomicBool,
    daemon: tokio::sync::Mutex<Option<Arc<Conn>>>,
    open: Mutex<HashMap<String, Open>>,
    /// The prompts of each session not yet answered: the one whose turn runs and those
    /// queued behind it.
    running: Mutex<HashMap<String, Vec<Running>>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    next_id: AtomicU64,
    catalog: Mutex<Catalog>,
}

impl Bridge {
    pub fn new(target: Target, args: AcpArgs, out: Out) -> Bridge {
        Bridge {
            target,
            args,
            out,
            initialized: AtomicBool::new(false),
            daemon: tokio::sync::Mutex::new(None),
            open: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            catalog: Mutex::new(Catalog::default()),
        }
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::SeqCst)
    }

    // ---- daemon connection -------------------------------------------------------

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

    /// `m` with `params`: one of `agentd_proto::rpc`'s param types, or the client's own
    /// native params passed through (`_agentd/*`).
    async fn call<P: serde::Serialize>(&self, m: &str, params: &P) -> Result<Value, AgentError> {
        let params = to_params(params)?;
        let c = self.conn().await?;
        let r = c.call(m, params).await;
        if matches!(&r, Err(e) if e.kind == ErrorKind::DaemonUnavailable) {
            *self.daemon.lock().await = None;
        }
        r
    }

    /// One `agentd/events` page of `sid` after `after`, as JSON text.
    async fn events_page(&self, sid: &str, after: Option<u64>) -> Result<rpc::Reply, RpcErr> {
        let q = to_params(&proto::EventsParams {
            session_id: sid.to_string(),
            after_seq: after,
            limit: Some(LOAD_PAGE),
            types: None,
            tail: None,
        })?;
        let c = self.conn().await?;
        let r = c.call_raw(method::EVENTS, q).await;
        if matches!(&r, Err(e) if e.kind == ErrorKind::DaemonUnavailable) {
            *self.daemon.lock().await = None;
        }
        Ok(r?)
    }

    // ---- client requests (agent → client) -------------------------------------

    /// Sends a request to the client and waits for its whole response object.
    async fn ask_client(&self, m: &str, params: Value) -> Option<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().ok()?.insert(id, tx);
        self.out
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": m, "params": params}));
        rx.await.ok()
    }

    pub fn client_answered(&self, id: &Value, msg: Value) {
        let Some(id) = id.as_u64() else { return };
        let tx = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(tx) = tx {
            let _ = tx.send(msg);
        }
    }

    // ---- lifecycle -----------------------------------------------------------------

    pub fn initialize(&self, params: Value) -> Result<Value, RpcErr> {
        super::params::protocol_version(&params)?;
        self.initialized.store(true, Ordering::SeqCst);
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "agentInfo": {"name": "agentd", "title": "agentd", "version": env!("CARGO_PKG_VERSION")},
            "authMethods": [],
        }))
    }

    pub async fn dispatch(&self, m: &str, params: Value) -> Result<Reply, RpcErr> {
        let plain = |v: Value| (v, vec![]);
        match m {
            "authenticate" => Ok(plain(json!({}))),
            "session/new" => self.new_session(params).await,
            "session/load" => self.open_session(params, true).await,
            "session/resume" => self.open_session(params, false).await,
            "session/list" => self.list(params).await.map(plain),
            "session/close" => self.close(params).await.map(plain),
            "session/prompt" => self.prompt(params).await.map(plain),
            "session/set_mode" => self.set_mode(params),
            "session/set_config_option" => self.set_config(params),
            "_agentd/compact" => self.native(method::COMPACT, params).await.map(plain),
            "_agentd/fork" => self.native(method::FORK, params).await.map(plain),
            "_agentd/tree" => self.native(method::TREE, params).await.map(plain),
            "_agentd/checkpoint" => self.native(method::CHECKPOINT, params).await.map(plain),
            "_agentd/diff" => self.native(method::DIFF, params).await.map(plain),
            "_agentd/revert" => self.native(method::REVERT, params).await.map(plain),
            _ => Err(RpcErr::new(-32601, format!("method not found: {m}"))),
        }
    }

    async fn native(&self, m: &str, params: Value) -> Result<Value, RpcErr> {
        if !params.is_object() {
            return Err(RpcErr::params(
                "params must be an object (the native params)",
            ));
        }
        Ok(self.call(m, &params).await?)
    }

    /// Interrupts every running prompt: the client closed stdin.
    pub async fn client_gone(&self) {
        let sids: Vec<String> = self
            .running
            .lock()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default();
        for sid in sids {
            self.interrupt(&sid, "acp_client_closed").await;
        }
        // Nobody will answer permission requests any more.
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }

    /// Cancels every prompt of this client in the session: a queued one withdraws its
    /// turn (see [`Bridge::run_turn`]), and the running turn is interrupted when it is
    /// one of them. A turn another client started is left running (docs/acp.md).
    async fn interrupt(&self, sid: &str, reason: &str) {
        let prompts: Vec<Arc<Cancel>> = self
            .running
            .lock()
            .ok()
            .and_then(|r| {
                r.get(sid)
                    .map(|v| v.iter().map(|x| x.cancelled.clone()).collect())
            })
            .unwrap_or_default();
        let mut ours_runs = false;
        for c in prompts {
            c.set();
            ours_runs |= c.turn_running.load(Ordering::SeqCst);
        }
        // A prompt whose turn starts after this is interrupted then (`on_incoming`).
        if !ours_runs {
            return;
        }
        if let Err(e) = self
            .call(
                method::INTERRUPT,
                &proto::InterruptParams {
                    session_id: sid.to_string(),
                    reason: Some(reason.to_string()),
                },
            )
            .await
        {
            eprintln!("agentctl acp: interrupting {sid}: {}", e.message);
        }
    }

    pub async fn cancel(&self, params: &Value) {
        let Some(sid) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let known = self.running.lock().is_ok_and(|r| r.contains_key(sid));
        if known {
            self.interrupt(sid, "acp_cancel").await;
        }
    }

    // ---- sessions --------------------------------------------------------------------

    fn session_state(&self, sid: &str) -> Result<Open, RpcErr> {
        self.open
            .lock()
            .ok()
            .and_then(|o| o.get(sid).cloned())
            .ok_or_else(|| {
                RpcErr::new(
                    -32002,
                    format!(
                        "session {sid} is not open here: use session/load or session/resume first"
                    ),
                )
            })
    }

    fn modes(&self, o: &Open) -> Value {
        json!({
            "currentModeId": o.mode,
            "availableModes": MODES.iter().map(|(id, name, d)| json!({"id": id, "name": name, "description": d})).collect::<Vec<_>>(),
        })
    }

    /// Asks the daemon which models it offers; a daemon that cannot say (an older one
    /// without `agentd/models`) leaves the last answer in place.
    async fn refresh_catalog(&self) {
        if let Ok(r) = self
            .call(method::MODELS, &proto::ModelsParams::default())
            .await
        {
            if let Ok(mut c) = self.catalog.lock() {
                *c = Catalog::from_result(&r);
            }
        }
    }

    fn catalog(&self) -> Catalog {
        self.catalog.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The picker's values: the session's own model (else `default`, the daemon's
    /// choice), then the daemon's choices, then the `--model` values, each once.
    fn model_values(&self, o: &Open) -> Vec<String> {
        let mut v: Vec<String> = vec![o.own_model.clone().unwrap_or_else(|| "default".into())];
        let catalog = self.catalog();
        let offered = catalog.choices.into_iter();
        for m in offered.chain(self.args.models.iter().cloned()) {
            if !v.contains(&m) {
                v.push(m);
            }
        }
        v
    }

    fn config_options(&self, o: &Open) -> Value {
        let values = self.model_values(o);
        let current = o
            .model
            .clone()
            .or_else(|| o.own_model.clone())
            .unwrap_or_else(|| values[0].clone());
        json!([{
            "id": "model",
            "name": "Model",
            "description": "Model for the next prompts (provider:model or a configured model name)",
            "category": "model",
            "type": "select",
            "currentValue": current,
            "options": values.iter().map(|v| json!({
                "value": v,
                "name": if v == "default" { "Daemon default".to_string() } else { v.clone() },
            })).collect::<Vec<_>>(),
        }, {
            "id": "sandbox",
            "name": "Sandbox",
            "description": "How the model's commands are confined",
            "type": "select",
            "currentValue": o.sandbox.clone().unwrap_or_else(|| "default".into()),
            "options": SANDBOX_VALUES.iter().map(|(v, n)| json!({"value": v, "name": n})).collect::<Vec<_>>(),
        }, {
            "id": "effort",
            "name": "Reasoning effort",
            "description": "How hard the model thinks in the next prompts",
            "category": "thought_level",
            "type": "select",
            "currentValue": o.effort.clone().unwrap_or_else(|| "default".into()),
            "options": EFFORT_VALUES.iter().map(|(v, n)| json!({"value": v, "name": n})).collect::<Vec<_>>(),
        }])
    }

    fn commands_update(sid: &str) -> (String, Value) {
        let cmds: Vec<Value> = COMMANDS
            .iter()
            .map(|(name, d, hint)| {
                let mut c = json!({"name": name, "description": d});
                if let Some(h) = hint {
                    c["input"] = json!({"hint": h});
                }
                c
            })
            .collect();
        (
            "session/update".into(),
            json!({"sessionId": sid, "update": {"sessionUpdate": "available_commands_update", "availableCommands": cmds}}),
        )
    }

    fn opened(&self, sid: &str, o: &Open, meta: Option<Value>, id: bool) -> Reply {
        let mut r = json!({"modes": self.modes(o), "configOptions": self.config_options(o)});
        if id {
            r["sessionId"] = json!(sid);
        }
        if let Some(m) = meta {
            r["_meta"] = m;
        }
        (r, vec![Self::commands_update(sid)])
    }

    async fn new_session(&self, params: Value) -> Result<Reply, RpcErr> {
        let (p, ws) = NewSession::from_params(params)?;
        self.refresh_catalog().await;
        let create = proto::CreateParams {
            workspace: ws.to_string_lossy().into_owned(),
            model: self.args.models.first().cloned(),
            provider: self.args.provider.clone(),
            sandbox: self.args.sandbox.to_param(),
            mcp_servers: (!p.mcp_servers.is_empty()).then(|| p.mcp_servers.clone()),
            ..Default::default()
        };
        let r = self.call(method::CREATE, &create).await?;
        let sid = r["session_id"].as_str().unwrap_or_default().to_string();
        let o = Open {
            workspace: ws,
            mode: self.args.mode.clone(),
            own_model: self.args.models.first().cloned(),
            model: None,
            sandbox: None,
            effort: None,
            always_allow: HashSet::new(),
            mcp_servers: None,
        };
        if let Ok(mut m) = self.open.lock() {
            m.insert(sid.clone(), o.clone());
        }
        Ok(self.opened(&sid, &o, None, true))
    }

    /// `session/load` (with the whole conversation replayed first) and `session/resume`.
    async fn open_session(&self, params: Value, replay: bool) -> Result<Reply, RpcErr> {
        let p = OpenSession::from_params(params, replay)?;
        self.refresh_catalog().await;
        let sid = p.session_id.clone();
        let at = proto::SessionParams {
            session_id: sid.clone(),
        };
        let show = self.call(method::SHOW, &at).await?;
        let ws = PathBuf::from(show["workspace"].as_str().unwrap_or(&p.cwd));
        let first = self
            .call(
                method::EVENTS,
                &proto::EventsParams {
                    session_id: sid.clone(),
                    limit: Some(1),
                    ..Default::default()
                },
            )
            .await?;
        let data = &first["events"][0]["data"];
        // A session created on a provider with one of the daemon's choices shows as that
        // choice (`provider:model`), not as a second, bare model name.
        let own_model = data["model"].as_str().map(|m| {
            let choice = data["provider"].as_str().map(|p| format!("{p}:{m}"));
            match choice {
                Some(c) if self.catalog().choices.contains(&c) => c,
                _ => m.to_string(),
            }
        });
        if replay {
            self.replay(&sid, &ws).await?;
        }
        let o = {
            let mut m = self
                .open
                .lock()
                .map_err(|_| RpcErr::new(-32603, "state poisoned"))?;
            let prev = m.get(&sid).cloned();
            let o = Open {
                workspace: ws,
                mode: prev
                    .as_ref()
                    .map_or_else(|| self.args.mode.clone(), |x| x.mode.clone()),
                own_model,
                model: prev.as_ref().and_then(|x| x.model.clone()),
                sandbox: None,
                effort: None,
                always_allow: prev.map(|x| x.always_allow).unwrap_or_default(),
                // Exactly the servers of this request (none when it names none).
                mcp_servers: Some(p.mcp_servers.clone().unwrap_or_default()),
            };
            m.insert(sid.clone(), o.clone());
            o
        };
        Ok(self.opened(&sid, &o, None, false))
    }

    /// Replays the Log as `session/update`s. Pages are read as JSON text into borrowed
    /// events (only the fields a mapping needs are parsed), each page's updates go to
    /// stdout as one write, and the next page is requested before this one is mapped, so
    /// the daemon serializes it meanwhile.
    async fn replay(&self, sid: &str, ws: &Path) -> Result<(), RpcErr> {
        let mut reply = self.events_page(sid, None).await?;
        let mut prefix = String::with_capacity(64 + sid.len());
        prefix.push_str(r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"#);
        prefix.push_str(&serde_json::to_string(sid).unwrap_or_default());
        prefix.push_str(r#","update":"#);
        loop {
            let page: map::Page = reply.parse()?;
            let next = match page.next_after_seq {
                Some(n) if !page.events.is_empty() => Some(n),
                _ => None,
            };
            let fetch = async {
                match next {
                    Some(n) => self.events_page(sid, Some(n)).await.map(Some),
                    None => Ok(None),
                }
            };
            let map_page = async {
                // Tool outputs appear twice in their updates: room for that up front.
                let mut block = String::with_capacity(reply.text_len() * 2 + 4096);
                for ev in &page.events {
                    map::replay_raw(ev, ws, &prefix, &mut block);
                }
                if block.ends_with('\n') {
                    block.pop();
                }
                if !block.is_empty() {
                    self.out.send_block(block);
                }
            };
            // The request goes out first (its future is polled first); mapping runs while
            // the daemon works on it.
            let (fetched, ()) = tokio::join!(fetch, map_page);
            drop(page);
            match fetched? {
                Some(r) => reply = r,
                None => return Ok(()),
            }
        }
    }

    async fn list(&self, params: Value) -> Result<Value, RpcErr> {
        let p: ListReq = parse(params, "session/list params")?;
        let q = proto::ListParams {
            workspace: match p.cwd.as_deref() {
                Some(c) => Some(abs_dir(c)?.to_string_lossy().into_owned()),
                None => None,
            },
            limit: Some(self.args.page_size.max(1)),
            include_archived: false,
            cursor: p.cursor.clone(),
        };
        let r = self.call(method::LIST, &q).await?;
        let sessions: Vec<Value> = r["sessions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        let mut o = json!({"sessionId": s["session_id"], "cwd": s["workspace"]});
                        let subagent = s["relation"] == "subagent";
                        if let Some(t) = s["title"].as_str().filter(|t| !t.is_empty()) {
                            o["title"] = json!(t);
                        }
                        if subagent {
                            // Tagged as `agentctl ls` does, for clients that ignore `_meta`.
                            let t = o["title"].as_str().unwrap_or("");
                            o["title"] = json!(format!("[subagent] {t}").trim_end());
                        }
                        if let Some(t) = s["updated_at"].as_str() {
                            o["updatedAt"] = json!(t);
                        }
                        let mut meta = serde_json::Map::new();
                        for (from, to) in [
                            ("relation", "relation"),
                            ("parent_session_id", "parentSessionId"),
                            ("parent_call_id", "parentCallId"),
                        ] {
                            if let Some(v) = s.get(from).filter(|v| v.is_string()) {
                                meta.insert(to.into(), v.clone());
                            }
                        }
                        if !meta.is_empty() {
                            o["_meta"] = json!({"agentd": meta});
                        }
                        o
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut out = json!({"sessions": sessions});
        if let Some(c) = r.get("next_cursor").filter(|c| !c.is_null()) {
            out["nextCursor"] = match c {
                Value::String(_) => c.clone(),
                other => json!(other.to_string()),
            };
        }
        Ok(out)
    }

    async fn close(&self, params: Value) -> Result<Value, RpcErr> {
        let p: SessionRef = parse(params, "session/close params")?;
        self.session_state(&p.session_id)?;
        let running = self
            .running
            .lock()
            .is_ok_and(|r| r.contains_key(&p.session_id));
        if running {
            self.interrupt(&p.session_id, "acp_close").await;
        }
        if let Ok(mut m) = self.open.lock() {
            m.remove(&p.session_id);
        }
        Ok(json!({}))
    }

    fn set_mode(&self, params: Value) -> Result<Reply, RpcErr> {
        let p = SetMode::from_params(params)?;
        self.session_state(&p.session_id)?;
        if let Ok(mut m) = self.open.lock() {
            if let Some(o) = m.get_mut(&p.session_id) {
                o.mode = p.mode_id.clone();
            }
        }
        let note = (
            "session/update".to_string(),
            json!({"sessionId": p.session_id, "update": {"sessionUpdate": "current_mode_update", "currentModeId": p.mode_id}}),
        );
        Ok((json!({}), vec![note]))
    }

    fn set_config(&self, params: Value) -> Result<Reply, RpcErr> {
        let p: SetConfig = parse(params, "session/set_config_option params")?;
        let o = self.session_state(&p.session_id)?;
        if p.config_id == "sandbox" || p.config_id == "effort" {
            let v = p.value.as_str().unwrap_or("");
            let values = if p.config_id == "sandbox" {
                SANDBOX_VALUES
            } else {
                EFFORT_VALUES
            };
            if !values.iter().any(|(s, _)| *s == v) {
                return Err(RpcErr::params(format!(
                    "unknown {} value `{v}`",
                    p.config_id
                )));
            }
            let o = {
                let mut m = self
                    .open
                    .lock()
                    .map_err(|_| RpcErr::new(-32603, "state poisoned"))?;
                let Some(o) = m.get_mut(&p.session_id) else {
                    return Err(RpcErr::new(-32002, "session closed"));
                };
                let picked = (v != "default").then(|| v.to_string());
                if p.config_id == "sandbox" {
                    o.sandbox = picked;
                } else {
                    o.effort = picked;
                }
                o.clone()
            };
            let opts = self.config_options(&o);
            let note = (
                "session/update".to_string(),
                json!({"sessionId": p.session_id, "update": {"sessionUpdate": "config_option_update", "configOptions": opts}}),
            );
            return Ok((json!({"configOptions": opts}), vec![note]));
        }
        if p.config_id != "model" {
            return Err(RpcErr::params(format!(
                "unknown config option `{}`: agentd offers `model`, `sandbox` and `effort`",
                p.config_id
            )));
        }
        let Some(v) = p.value.as_str() else {
            return Err(RpcErr::params("model must be one of the option values"));
        };
        if !self.model_values(&o).iter().any(|m| m == v) {
            return Err(RpcErr::params(format!("unknown model value `{v}`")));
        }
        let o = {
            let mut m = self
                .open
                .lock()
                .map_err(|_| RpcErr::new(-32603, "state poisoned"))?;
            let Some(o) = m.get_mut(&p.session_id) else {
                return Err(RpcErr::new(-32002, "session closed"));
            };
            o.model = (v != "default").then(|| v.to_string());
            o.clone()
        };
        let opts = self.config_options(&o);
        let note = (
            "session/update".to_string(),
            json!({"sessionId": p.session_id, "update": {"sessionUpdate": "config_option_update", "configOptions": opts}}),
        );
        Ok((json!({"configOptions": opts}), vec![note]))
    }

    // ---- prompts ---------------------------------------------------------------------

    async fn prompt(&self, params: Value) -> Result<Value, RpcErr> {
        let p: Prompt = parse(params, "session/prompt params")?;
        let sid = p.session_id.clone();
        let o = self.session_state(&sid)?;
        let input = prompt_input(&p.prompt)?;
        if input.images.is_empty() {
            if let Some((name, arg)) = slash_command(&input.text) {
                return self.command(&sid, name, arg).await;
            }
        }
        // A prompt sent while another runs is queued behind it by the daemon.
        let cancelled = Arc::new(Cancel::default());
        self.running
            .lock()
            .map_err(|_| RpcErr::new(-32603, "state poisoned"))?
            .entry(sid.clone())
            .or_default()
            .push(Running {
                cancelled: cancelled.clone(),
            });
        let res = self
            .run_turn(&sid, &o, &input.text, &input.images, &cancelled)
            .await;
        if let Ok(mut r) = self.running.lock() {
            if let Some(v) = r.get_mut(&sid) {
                v.retain(|x| !Arc::ptr_eq(&x.cancelled, &cancelled));
                if v.is_empty() {
                    r.remove(&sid);
                }
            }
        }
        res
    }

    /// A connection for a prompt's attempt `n`: the first through the shared one (which
    /// starts a daemon if none runs); a retry only reconnects for its first 5 s (the
    /// daemon is being restarted), then may start one.
    async fn prompt_conn(&self, n: u32, since_first: Duration) -> Result<Arc<Conn>, AgentError> {
        if n == 0 {
            self.conn().await?;
            return Conn::connect(&self.target.socket)
                .await
                .map(Arc::new)
                .map_err(|e| crate::rpc::connection_lost(&e.to_string()));
        }
        *self.daemon.lock().await = None;
        let c = if since_first > Duration::from_secs(5) {
            daemon::connect_or_start(&self.target).await?
        } else {
            daemon::connect_existing(&self.target).await?
        };
        Ok(Arc::new(c.conn))
    }

    /// Runs the prompt's turn: `agentd/turn` with `queue: true` (queued behind a turn
    /// already running, then followed) and one `client_request_id`, resent with it
    /// when the daemon goes away mid-prompt (`agentctl::retry`), so a prompt survives a
    /// daemon restart with one turn and one answer. Only the events of its own turn
    /// (from the `turn_started` carrying its id) become updates.
    async fn run_turn(
        &self,
        sid: &str,
        o: &Open,
        input: &str,
        images: &[proto::TurnImage],
        cancelled: &Arc<Cancel>,
    ) -> Result<Value, RpcErr> {
        use agentctl::retry;
        let ask = o.mode == "ask";
        let rid = retry::new_request_id();
        let params = to_params(&proto::TurnParams {
            session_id: sid.to_string(),
            input: input.to_string(),
            model: o.model.clone(),
            permission_mode: Some(o.mode.clone()),
            reasoning_effort: o.effort.clone(),
            images: images.to_vec(),
            sandbox: o.sandbox.as_ref().map(|s| json!({ "mode": s })),
            queue: Some(true),
            client_request_id: Some(rid.clone()),
            mcp_servers: o.mcp_servers.clone(),
            ..Default::default()
        })?;
        let policy = retry::Policy::default();
        let first = std::time::Instant::now();
        let mut live = Live::default();
        let mut f = Follow::new(&rid);
        let mut n = 0u32;
        let (conn, mut incoming, result) = loop {
            let conn = match self.prompt_conn(n, first.elapsed()).await {
                Ok(c) => Ok(c),
                // No daemon to be had at all: that is the answer, not a lost one.
                Err(e) if n == 0 => return Err(e.into()),
                Err(e) => Err(e),
            };
            let attempt = async {
                let conn = conn?;
                let incoming = conn
                    .take_incoming()
                    .ok_or_else(|| AgentError::internal("event stream already taken"))?;
                conn.subscribe(sid, f.seen, ask).await?;
                Ok::<_, AgentError>((conn, incoming))
            };
            let outcome = match attempt.await {
                Ok((conn, mut incoming)) => {
                    let r = self
                        .follow_call(
                            sid,
                            o,
                            &conn,
                            &mut incoming,
                            &params,
                            &mut live,
                            &mut f,
                            cancelled,
                        )
                        .await;
                    r.map(|r| (conn, incoming, r))
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(done) => break done,
                Err(e) if e.kind == ErrorKind::Interrupted => {
                    return Ok(json!({"stopReason": "cancelled"}))
                }
                Err(e)
                    if retry::retryable(&e)
                        && !cancelled.is_set()
                        && first.elapsed() < policy.give_up_after =>
                {
                    n += 1;
                    tokio::time::sleep(policy.delay(n)).await;
                }
                Err(e) if retry::retryable(&e) => {
                    *self.daemon.lock().await = None;
                    return Err(RpcErr::from(AgentError::new(
                        ErrorKind::DaemonUnavailable,
                        format!("agentd went away during the prompt ({})", e.message),
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        };
        if result["status"] == "cancelled" {
            return Ok(json!({"stopReason": "cancelled"}));
        }
        // Trailing events (the last deltas, turn_ended) may follow the response.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while !live.ended && f.ended.is_none() {
                match incoming.recv().await {
                    Some(m) => {
                        self.on_follow(sid, o, &conn, &mut live, &mut f, m, cancelled)
                            .await
                    }
                    None => break,
                }
            }
        })
        .await;
        let status = result["status"].as_str().unwrap_or("");
        let stop = match status {
            "completed" if result["reason"] == "max_iterations" => "max_turn_requests",
            "completed" => map::stop_reason(Some(status), result["stop_reason"].as_str(), &live),
            "interrupted" => "cancelled",
            _ if cancelled.is_set() => "cancelled",
            _ => {
                let e = result.get("error").cloned().unwrap_or(Value::Null);
                return Err(RpcErr {
                    code: -32603,
                    message: format!(
                        "turn {status}: {}",
                        e["message"].as_str().unwrap_or("no detail")
                    ),
                    data: Some(
                        json!({"kind": e["kind"], "turn_id": result["turn_id"], "status": status}),
                    ),
                });
            }
        };
        Ok(json!({"stopReason": stop}))
    }

    /// One attempt of a prompt's `agentd/turn` on `conn`, forwarding its events; for
    /// a queued turn, follows the events until the turn ends. The turn's result, from
    /// the answer or from its `turn_ended` (`status: "cancelled"` when the prompt was
    /// cancelled before its queued turn started, and withdrawn).
    #[allow(clippy::too_many_arguments)]
    async fn follow_call(
        &self,
        sid: &str,
        o: &Open,
        conn: &Arc<Conn>,
        incoming: &mut tokio::sync::mpsc::UnboundedReceiver<Incoming>,
        params: &Value,
        live: &mut Live,
        f: &mut Follow,
        cancelled: &Arc<Cancel>,
    ) -> Result<Value, AgentError> {
        let call = conn.call(method::TURN, params.clone());
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                r = &mut call => break r?,
                msg = incoming.recv() => {
                    let Some(m) = msg else {
                        // The reader ended: the call fails with connection_lost.
                        break (&mut call).await?;
                    };
                    self.on_follow(sid, o, conn, live, f, m, cancelled).await;
                }
            }
        };
        if answer["status"] != "queued" {
            return Ok(answer);
        }
        let turn_id = answer["turn_id"].clone();
        let mut withdrawn = false;
        loop {
            if let Some(d) = &f.ended {
                let mut r = d.clone();
                r["turn_id"] = turn_id;
                return Ok(r);
            }
            tokio::select! {
                msg = incoming.recv() => match msg {
                    Some(m) => self.on_follow(sid, o, conn, live, f, m, cancelled).await,
                    None => return Err(crate::rpc::connection_lost("the event stream ended")),
                },
                _ = cancelled.wait(), if !f.mine && !withdrawn => {
                    withdrawn = true;
                    let q = to_params(&proto::DequeueParams {
                        session_id: sid.to_string(),
                        turn_id: turn_id.as_str().unwrap_or_default().to_string(),
                    })?;
                    if conn.call(method::DEQUEUE, q).await.is_ok() {
                        return Ok(json!({"status": "cancelled"}));
                    }
                    // It started meanwhile: the interrupt ends it.
                }
            }
        }
    }

    /// [`Bridge::on_incoming`] for the events of the prompt's own turn only: from its
    /// `turn_started` (which carries the prompt's `client_request_id`) to its
    /// `turn_ended`; another prompt's turn before or after it is not this prompt's.
    #[allow(clippy::too_many_arguments)]
    async fn on_follow(
        &self,
        sid: &str,
        o: &Open,
        conn: &Arc<Conn>,
        live: &mut Live,
        f: &mut Follow,
        msg: Incoming,
        cancelled: &Arc<Cancel>,
    ) {
        if let Incoming::Notification { method: m, params } = &msg {
            if m == EVENT_NOTIFICATION {
                let Some(ev) = params.get("result") else {
                    return;
                };
                if ev["type"] == "lagged" {
                    // Pick up from the last durable event seen, this turn's or not.
                    let _ = conn.subscribe(sid, f.seen, o.mode == "ask").await;
                    return;
                }
                if let Some(s) = ev["seq"].as_u64() {
                    f.seen = Some(s);
                }
                if f.ended.is_some() {
                    return;
                }
                if !f.mine {
                    if ev["type"] == "turn_started"
                        && ev["data"]["client_request_id"] == f.request_id.as_str()
                    {
                        f.mine = true;
                        f.turn_id = ev["data"]["turn_id"].clone();
                        cancelled.turn_running.store(true, Ordering::SeqCst);
                    } else {
                        return;
                    }
                }
                if ev["type"] == "turn_ended" && ev["data"]["turn_id"] == f.turn_id {
                    f.ended = Some(ev["data"].clone());
                    cancelled.turn_running.store(false, Ordering::SeqCst);
                }
            }
        }
        self.on_incoming(sid, o, conn, live, msg, cancelled).await;
    }

    async fn on_incoming(
        &self,
        sid: &str,
        o: &Open,
        conn: &Arc<Conn>,
        live: &mut Live,
        msg: Incoming,
        cancelled: &Arc<Cancel>,
    ) {
        match msg {
            Incoming::Notification { method: m, params } if m == EVENT_NOTIFICATION => {
                let Some(ev) = params.get("result") else {
                    return;
                };
                if ev["type"] == "lagged" {
                    // Pick up from the last durable event; deltas lost meanwhile are
                    // made up by the durable texts (see map::Live).
                    let _ = conn.subscribe(sid, live.last_seq, o.mode == "ask").await;
                    return;
                }
                let was_started = live.turn_id.is_some();
                for u in live.on_event(ev, &o.workspace) {
                    self.out
                        .notify("session/update", json!({"sessionId": sid, "update": u}));
                }
                if !was_started && live.turn_id.is_some() && cancelled.is_set() {
                    // A cancel that raced the turn's start.
                    let _ = self
                        .call(
                            method::INTERRUPT,
                            &proto::InterruptParams {
                                session_id: sid.to_string(),
                                reason: Some("acp_cancel".into()),
                            },
                        )
                        .await;
                }
            }
            Incoming::Request {
                id,
                method: m,
                params,
            } if m == method::PERMISSION => {
                // A subagent's request comes here too (the daemon routes a child's
                // requests to its parent's client): shown in this session as a call of
                // its own, marked with the child (docs/acp.md#subagents).
                let (params, child) = map::subagent_request(params, sid);
                // The request can overtake its tool_call event: announce the call first.
                let args = params.get("args").cloned().unwrap_or_else(|| json!({}));
                let call_id = params["call_id"].as_str().unwrap_or("").to_string();
                if let Some(mut u) = live.announce(
                    &o.workspace,
                    &call_id,
                    params["tool"].as_str().unwrap_or(""),
                    &args,
                ) {
                    if let (Some(c), Some(f)) = (&child, u.as_object_mut()) {
                        map::mark_subagent(f, c);
                    }
                    self.out
                        .notify("session/update", json!({"sessionId": sid, "update": u}));
                }
                let (decision, scope) =
                    self.permission(sid, &o.workspace, &params, cancelled).await;
                let mut answer = json!({"decision": decision});
                if let Some(s) = scope {
                    answer["scope"] = json!(s);
                }
                let _ = conn.respond(id, answer).await;
                if let Some(c) = &child {
                    // The call runs in the child; its result is in the child's Log and
                    // the parent's `task` result. The card here ends with the answer.
                    let u = map::subagent_decided(&call_id, c, decision == "allow");
                    self.out
                        .notify("session/update", json!({"sessionId": sid, "update": u}));
                }
            }
            Incoming::Request { id, .. } => {
                let _ = conn
                    .respond_error(id, -32601, "not served by agentctl acp")
                    .await;
            }
            _ => {}
        }
    }

    /// Relays one `agentd/permission` request as `session/request_permission`: the
    /// decision, and for a sandbox grant the scope the user chose (`call`/`session`).
    async fn permission(
        &self,
        sid: &str,
        ws: &Path,
        p: &Value,
        cancel: &Cancel,
    ) -> (&'static str, Option<&'static str>) {
        let grant = p.get("sandbox_grant").filter(|g| !g.is_null());
        if let Some(g) = grant {
            return self.grant_permission(sid, ws, p, g, cancel).await;
        }
        (self.tool_permission(sid, ws, p, cancel).await, None)
    }

    /// A command asking for a wider sandbox (docs/sandbox.md#escalation): the grant is spelled out, and
    /// "always allow" for the tool never covers it.
    async fn grant_permission(
        &self,
        sid: &str,
        ws: &Path,
        p: &Value,
        grant: &Value,
        cancel: &Cancel,
    ) -> (&'static str, Option<&'static str>) {
        let tool = p["tool"].as_str().unwrap_or("tool").to_string();
        let call_id = p["call_id"].as_str().unwrap_or("");
        let args = p.get("args").cloned().unwrap_or_else(|| json!({}));
        let mut fields = map::tool_call_fields(ws, call_id, &tool, &args, None);
        if let Some(c) = p["subagent_session_id"].as_str() {
            map::mark_subagent(&mut fields, c);
        }
        let spelled: Vec<String> = grant
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| {
                        format!("{k} {}", v.as_str().map_or(v.to_string(), str::to_string))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let why = p["justification"].as_str().unwrap_or("no reason given");
        let title = fields
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or(&tool)
            .to_string();
        fields.insert(
            "title".into(),
            json!(format!(
                "{title} — wider sandbox: {} ({why})",
                spelled.join(", ")
            )),
        );
        let req = json!({
            "sessionId": sid,
            "toolCall": Value::Object(fields),
            "options": [
                {"optionId": "allow-once", "name": "Allow this grant once", "kind": "allow_once"},
                {"optionId": "allow-session", "name": "Allow this grant for the session", "kind": "allow_always"},
                {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
            ],
        });
        let ans = tokio::select! {
            a = self.ask_client("session/request_permission", req) => a,
            _ = cancel.wait() => None,
        };
        let Some(ans) = ans else {
            return ("deny", None);
        };
        let outcome = &ans["result"]["outcome"];
        match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
            (Some("selected"), Some("allow-once")) => ("allow", Some("call")),
            (Some("selected"), Some("allow-session")) => ("allow", Some("session")),
            _ => ("deny", None),
        }
    }

    async fn tool_permission(
        &self,
        sid: &str,
        ws: &Path,
        p: &Value,
        cancel: &Cancel,
    ) -> &'static str {
        let tool = p["tool"].as_str().unwrap_or("tool").to_string();
        let always = self
            .open
            .lock()
            .is_ok_and(|m| m.get(sid).is_some_and(|o| o.always_allow.contains(&tool)));
        if always {
            return "allow";
        }
        let call_id = p["call_id"].as_str().unwrap_or("");
        let args = p.get("args").cloned().unwrap_or_else(|| json!({}));
        let old = map::current_text(ws, &tool, &args);
        let mut tool_call = map::tool_call_fields(ws, call_id, &tool, &args, old);
        if let Some(c) = p["subagent_session_id"].as_str() {
            map::mark_subagent(&mut tool_call, c);
        }
        let tool_call = Value::Object(tool_call);
        let req = json!({
            "sessionId": sid,
            "toolCall": tool_call,
            "options": [
                {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                {"optionId": "allow-always", "name": format!("Always allow {tool}"), "kind": "allow_always"},
                {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
            ],
        });
        let ans = tokio::select! {
            a = self.ask_client("session/request_permission", req) => a,
            _ = cancel.wait() => None,
        };
        let Some(ans) = ans else {
            return "deny";
        };
        let outcome = &ans["result"]["outcome"];
        match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
            (Some("selected"), Some("allow-once")) => "allow",
            (Some("selected"), Some("allow-always")) => {
                if let Ok(mut m) = self.open.lock() {
                    if let Some(o) = m.get_mut(sid) {
                        o.always_allow.insert(tool);
                    }
                }
                "allow"
            }
            _ => "deny",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picker_values_are_provider_colon_model() {
        let c = Catalog::from_result(&json!({
            "models": [
                {"provider": "local", "model": "qwen:14b", "source": "model"},
                {"provider": "anthropic", "model": "claude-sonnet-4-5", "source": "builtin"},
            ],
            "providers": ["anthropic", "local", "openai", "script"],
        }));
        assert_eq!(c.choices, ["local:qwen:14b", "anthropic:claude-sonnet-4-5"]);
        assert!(Catalog::from_result(&json!(null)).choices.is_empty());
    }

    #[test]
    fn prompt_blocks_become_turn_input() {
        let t = prompt_input(&[
            json!({"type": "text", "text": "look"}),
            json!({"type": "resource_link", "uri": "file:///a.rs", "name": "a.rs"}),
            json!({"type": "resource", "resource": {"uri": "file:///b.rs", "text": "fn b() {}"}}),
        ])
        .unwrap();
        assert_eq!(
            t.text,
            "look\n[@a.rs](file:///a.rs)\n<context uri=\"file:///b.rs\">\nfn b() {}\n</context>"
        );
        assert!(t.images.is_empty());
        let t = prompt_input(&[
            json!({"type": "image", "data": "iVBO", "mimeType": "image/png"}),
            json!({"type": "text", "text": "what is this?"}),
            json!({"type": "image", "data": "R0lG"}),
        ])
        .unwrap();
        assert_eq!(t.text, "what is this?");
        assert_eq!(
            serde_json::to_value(&t.images).unwrap(),
            json!([{"data": "iVBO", "mime_type": "image/png"}, {"data": "R0lG"}])
        );
        for bad in [
            vec![json!({"type": "image", "data": "", "mimeType": "image/png"})],
            vec![json!({"type": "image", "data": "iVBO", "mimeType": "image/png"})],
            vec![json!({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"})],
            vec![],
        ] {
            assert_eq!(prompt_input(&bad).unwrap_err().code, -32602, "{bad:?}");
        }
    }
}
