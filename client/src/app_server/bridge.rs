//! The Codex app-server methods of one client connection, each mapped onto agentd's
//! native API (docs/codex-app-server.md has the table).
//!
//! State kept here is only what the protocol has and agentd does not: the threads this
//! connection loaded (with their approval mode, model and "accept for session" tools),
//! one follower per loaded thread (its own daemon connection, subscribed with
//! `permissions: true`, turning the session's events into notifications and its
//! permission requests into approval requests), and the client's pending answers.
//! Everything durable lives in the daemon's Logs, so a thread started here is an ordinary
//! agentd session that every other client sees.

use super::goal;
use super::map::{self, Live, Turns};
use super::shared::{parse, session, Shared};
use super::wire::{self, Thread, Turn};
use super::Out;
use crate::rpc::{Conn, Incoming};
use agentctl::acp::params::RpcErr;
use agentd_proto::rpc::{self, method, EVENT_NOTIFICATION};
use agentd_proto::session_uuid::{self, Resolved};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Events per `agentd/events` page when a thread is read.
const PAGE: usize = 20_000;
/// Events `thread/compact/start` keeps verbatim after the compacted part.
const COMPACT_TAIL: usize = 8;
/// Threads per `thread/list` page when the client names no limit.
const LIST_PAGE: u32 = 25;

/// A thread this connection loaded.
struct Loaded {
    uuid: String,
    workspace: PathBuf,
    /// agentd's permission mode for its turns.
    mode: String,
    /// The model picked for its turns (a `model/list` id), if any.
    model: Option<String>,
    /// The turns its follower saw.
    turn: Arc<Mutex<Seen>>,
    follower: tokio::task::JoinHandle<()>,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

pub type Reply = (Value, Vec<map::Note>);

/// One client connection.
pub struct Client {
    pub shared: Arc<Shared>,
    pub out: Out,
    initialized: AtomicBool,
    threads: Mutex<HashMap<String, Loaded>>,
    pending: Mutex<HashMap<i64, oneshot::Sender<Value>>>,
    next_id: AtomicI64,
}

fn internal(e: impl std::fmt::Display) -> RpcErr {
    RpcErr::new(-32603, e.to_string())
}

/// agentd's permission mode for a Codex approval policy: `never` runs every tool
/// (`auto`); every other policy asks (`ask`).
fn mode_of(policy: Option<&Value>, default: &str) -> String {
    match policy {
        Some(Value::String(p)) if p == "never" => "auto".into(),
        Some(Value::Null) | None => default.to_string(),
        Some(_) => "ask".into(),
    }
}

/// The approval policy a mode shows as.
fn policy_of(mode: &str) -> &'static str {
    match mode {
        "auto" => "never",
        "read_only" => "untrusted",
        _ => "on-request",
    }
}

/// Which sessions a `thread/list` with these `sourceKinds` wants: (interactive ones,
/// subagents). None, or an empty list, means the interactive ones, as Codex's server
/// answers; agentd's subagents (sessions the `task` tool made) are `subAgentThreadSpawn`.
fn source_kinds(kinds: Option<&[String]>) -> (bool, bool) {
    match kinds {
        None | Some([]) => (true, false),
        Some(k) => (
            k.iter().any(|x| {
                matches!(
                    x.as_str(),
                    "cli" | "vscode" | "exec" | "appServer" | "unknown"
                )
            }),
            k.iter().any(|x| x.starts_with("subAgent")),
        ),
    }
}

/// A thread's `SessionSource`: a subagent's (`depth` as the daemon recorded it, 1 for a
/// Log that does not say), else an interactive thread's.
fn source_of(subagent_depth: Option<u64>, parent: Option<&str>) -> Value {
    match (subagent_depth, parent) {
        (Some(depth), Some(p)) => {
            json!({"subAgent": {"thread_spawn": {"parent_thread_id": p, "depth": depth}}})
        }
        _ => json!("appServer"),
    }
}

/// agentd's sandbox `{mode}` for a Codex `SandboxMode`.
fn sandbox_param(mode: Option<&str>) -> Result<Option<Value>, RpcErr> {
    Ok(match mode {
        None => None,
        Some("read-only") => Some(json!({"mode": "read_only"})),
        Some("workspace-write") => Some(json!({"mode": "workspace_write"})),
        Some("danger-full-access") => Some(json!({"mode": "full_access"})),
        Some(other) => return Err(RpcErr::params(format!("unknown sandbox mode `{other}`"))),
    })
}

/// The `SandboxPolicy` a thread's answer shows: agentd's default confinement.
fn sandbox_policy(workspace: &Path) -> Value {
    json!({"type": "workspaceWrite", "writableRoots": [workspace], "networkAccess": false,
        "excludeTmpdirEnvVar": false, "excludeSlashTmp": false})
}

/// The model a picked id asks for: `default` (or nothing) is none at all; anything else
/// goes to the daemon as it is, which splits `provider:model` as for every client
/// (docs/configuration.md#choosing-a-provider-and-model).
fn picked_model(id: &str) -> Option<&str> {
    (!id.is_empty() && id != "default").then_some(id)
}

fn ms_of(ts: &str) -> i64 {
    map::ts_ms(&json!({ "ts": ts })).unwrap_or(0) / 1000
}

/// A thread's session, read from the daemon.
struct Read {
    sid: String,
    /// The UUIDs of the session, its parent and its fork root, as the daemon shows them.
    uuid: String,
    parent_uuid: Option<String>,
    root_uuid: Option<String>,
    /// For a subagent (`relation: "subagent"`): its parent session and its depth.
    subagent_of: Option<String>,
    subagent_depth: Option<u64>,
    workspace: PathBuf,
    title: Option<String>,
    created: i64,
    updated: i64,
    model: Option<String>,
    provider: Option<String>,
    parent: Option<String>,
    root: Option<String>,
    status: String,
    last_seq: Option<u64>,
    turns: Turns,
}

impl Client {
    pub fn new(shared: Arc<Shared>, out: Out) -> Client {
        Client {
            shared,
            out,
            initialized: AtomicBool::new(false),
            threads: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicI64::new(1),
        }
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::SeqCst)
    }

    /// `initialize`: once per connection.
    pub fn initialize(&self, params: &Value) -> Result<Value, RpcErr> {
        if !params.get("clientInfo").is_some_and(Value::is_object) {
            return Err(RpcErr::params("initialize: clientInfo is required"));
        }
        if self.initialized.swap(true, Ordering::SeqCst) {
            return Err(RpcErr::new(-32600, "Already initialized"));
        }
        let os = if cfg!(target_os = "macos") {
            "macos"
        } else {
            "linux"
        };
        Ok(json!({
            "userAgent": format!("agentd {} (agentctl app-server)", env!("CARGO_PKG_VERSION")),
            "codexHome": self.shared.target.effective_home(),
            "platformFamily": "unix",
            "platformOs": os,
        }))
    }

    /// Forgets every thread (the client went away); running turns go on in the daemon.
    pub fn close(&self) {
        if let Ok(mut t) = self.threads.lock() {
            t.clear();
        }
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }

    // ---- server requests (bridge → client) -----------------------------------------

    async fn ask_client(&self, m: &str, params: Value) -> Option<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().ok()?.insert(id, tx);
        self.out
            .send(&json!({"id": id, "method": m, "params": params}));
        rx.await.ok()
    }

    pub fn client_answered(&self, id: &Value, msg: Value) {
        let Some(id) = id.as_i64() else { return };
        let tx = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(tx) = tx {
            let _ = tx.send(msg);
        }
    }

    // ---- dispatch --------------------------------------------------------------------

    pub async fn dispatch(self: &Arc<Self>, m: &str, params: Value) -> Result<Reply, RpcErr> {
        let plain = |v: Value| (v, vec![]);
        match m {
            "thread/start" => self.thread_start(params).await,
            "thread/resume" => self.thread_resume(params).await,
            "thread/fork" => self.thread_fork(params).await,
            "thread/list" => self.thread_list(params).await.map(plain),
            "thread/loaded/list" => Ok(plain(self.loaded_list(params)?)),
            "thread/read" => self.thread_read(params).await.map(plain),
            "thread/turns/list" => self.turns_list(params).await.map(plain),
            "thread/items/list" => self.items_list(params).await.map(plain),
            "thread/name/set" => self.name_set(params).await,
            "thread/archive" => self.archive(params, true).await,
            "thread/unarchive" => self.archive(params, false).await,
            "thread/delete" => self.delete(params).await,
            "thread/compact/start" => self.compact(params).await,
            "thread/revert" => self.revert(params).await.map(plain),
            "thread/unsubscribe" => self.unsubscribe(params).map(plain),
            "turn/start" => self.turn_start(params).await.map(plain),
            "turn/interrupt" => self.turn_interrupt(params).await.map(plain),
            "turn/steer" => self.turn_steer(params).await.map(plain),
            "thread/goal/get" => goal::get(&self.shared, params).await.map(plain),
            "thread/goal/set" => goal::set(&self.shared, params).await.map(plain),
            "thread/goal/clear" => goal::clear(&self.shared, params).await.map(plain),
            "model/list" => self.model_list().await.map(plain),
            "account/read" => Ok(plain(
                json!({"account": {"type": "apiKey"}, "requiresOpenaiAuth": false}),
            )),
            "account/login/start" => Err(RpcErr::new(
                -32600,
                "no OpenAI login needed: agentd's providers hold the keys (see `agentctl doctor`)",
            )),
            "account/login/cancel" => Ok(plain(json!({"status": "notFound"}))),
            "account/logout" => Ok(plain(json!({}))),
            "config/read" => Ok(plain(json!({"config": {}, "origins": {}, "layers": []}))),
            "configRequirements/read" => Ok(plain(json!({"requirements": null}))),
            "account/bedrock/checkGovCloudRequirements" => Ok(plain(json!({}))),
            "hooks/list" | "collaborationMode/list" | "skills/list" => {
                Ok(plain(json!({"data": []})))
            }
            "plugin/installed" => Ok(plain(
                json!({"marketplaces": [], "marketplaceLoadErrors": []}),
            )),
            _ => Err(unsupported(m)),
        }
    }

    // ---- threads ---------------------------------------------------------------------

    /// The session a client's thread id names.
    async fn sid_of(&self, thread_id: &str) -> Result<String, RpcErr> {
        Ok(self.shared.resolve(thread_id).await?.0)
    }

    /// Reads a session whole: its facts and its events folded into turns.
    async fn read(&self, sid: &str) -> Result<Read, RpcErr> {
        let show = self.shared.call(method::SHOW, &session(sid)).await?;
        let workspace = PathBuf::from(show["workspace"].as_str().unwrap_or("/"));
        let mut r = Read {
            sid: sid.to_string(),
            uuid: show["uuid"]
                .as_str()
                .map_or_else(|| session_uuid::to_uuid(sid), str::to_string),
            parent_uuid: None,
            root_uuid: None,
            subagent_of: None,
            subagent_depth: None,
            workspace: workspace.clone(),
            title: show["title"].as_str().map(str::to_string),
            created: 0,
            updated: 0,
            model: None,
            provider: None,
            parent: None,
            root: None,
            status: show["status"].as_str().unwrap_or("idle").to_string(),
            last_seq: show["last_seq"].as_u64(),
            turns: Turns::default(),
        };
        let mut after: Option<u64> = None;
        loop {
            let q = rpc::EventsParams {
                session_id: sid.to_string(),
                after_seq: after,
                limit: Some(PAGE),
                types: None,
                tail: None,
            };
            let page = self.shared.call(method::EVENTS, &q).await?;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            for e in &events {
                let data = &e["data"];
                match e["type"].as_str() {
                    Some("session_started") => {
                        r.model = data["model"].as_str().map(str::to_string);
                        r.provider = data["provider"].as_str().map(str::to_string);
                        if data["relation"] == "subagent" {
                            r.subagent_of = data["parent_session_id"].as_str().map(str::to_string);
                            r.subagent_depth = Some(data["subagent_depth"].as_u64().unwrap_or(1));
                        }
                    }
                    Some("session_fork") => {
                        r.parent = data["parent_session_id"].as_str().map(str::to_string);
                        r.root = data["fork_root_session_id"].as_str().map(str::to_string);
                    }
                    _ => {}
                }
                if let Some(t) = map::ts_ms(e) {
                    if r.created == 0 {
                        r.created = t / 1000;
                    }
                    r.updated = t / 1000;
                }
                r.turns.add(e, &workspace);
            }
            match page["next_after_seq"].as_u64() {
                Some(n) if !events.is_empty() => after = Some(n),
                _ => break,
            }
        }
        if let Some(p) = r.parent.as_ref().or(r.subagent_of.as_ref()) {
            r.parent_uuid = Some(self.shared.uuid_of(p).await);
        }
        if let Some(root) = &r.root {
            r.root_uuid = Some(self.shared.uuid_of(root).await);
        }
        Ok(r)
    }

    fn status_value(&self, sid: &str, daemon_status: &str) -> Value {
        if daemon_status == "running" {
            return json!({"type": "active", "activeFlags": []});
        }
        let loaded = self.threads.lock().is_ok_and(|t| t.contains_key(sid));
        if loaded {
            json!({"type": "idle"})
        } else {
            json!({"type": "notLoaded"})
        }
    }

    fn thread_of(&self, r: &Read, with_turns: bool) -> Thread {
        let uuid = r.uuid.clone();
        let model = match (&r.provider, &r.model) {
            (Some(p), Some(m)) if !m.starts_with("script:") => Some(format!("{p}:{m}")),
            (_, m) => m.clone(),
        };
        let mut turns = if with_turns {
            r.turns.turns.clone()
        } else {
            vec![]
        };
        // A turn the daemon still runs shows as in progress; one cut by a crash and not
        // yet reconciled shows as interrupted.
        if r.status != "running" {
            for t in turns.iter_mut().filter(|t| t.status == "inProgress") {
                t.status = "interrupted";
            }
        }
        Thread {
            id: uuid.clone(),
            session_id: r.root_uuid.clone().unwrap_or_else(|| uuid.clone()),
            forked_from_id: r.parent_uuid.clone().filter(|_| r.subagent_of.is_none()),
            preview: r.turns.preview.clone().unwrap_or_default(),
            ephemeral: false,
            model_provider: r.provider.clone().unwrap_or_else(|| "agentd".into()),
            model,
            created_at: r.created,
            updated_at: r.updated.max(r.created),
            status: self.status_value(&r.sid, &r.status),
            path: None,
            cwd: r.workspace.to_string_lossy().into_owned(),
            cli_version: env!("CARGO_PKG_VERSION").to_string(),
            source: source_of(r.subagent_depth, r.parent_uuid.as_deref()),
            project_id: None,
            name: r.title.clone().filter(|t| !t.is_empty()),
            turns,
        }
    }

    /// Loads a thread on this connection: its follower streams the session's events
    /// after `after_seq` as notifications.
    fn load(
        self: &Arc<Self>,
        r: &Read,
        mode: String,
        model: Option<String>,
        after_seq: Option<u64>,
    ) {
        let (sid, workspace, uuid) = (r.sid.as_str(), r.workspace.as_path(), r.uuid.clone());
        let turn = Arc::new(Mutex::new(Seen::default()));
        let follower = tokio::spawn(follow(
            Arc::downgrade(self),
            Followed {
                sid: sid.to_string(),
                uuid: uuid.clone(),
                workspace: workspace.to_path_buf(),
                after_seq,
                turn: turn.clone(),
            },
        ));
        let loaded = Loaded {
            uuid,
            workspace: workspace.to_path_buf(),
            mode,
            model,
            turn,
            follower,
        };
        if let Ok(mut t) = self.threads.lock() {
            // A thread loaded again keeps its choices; its old follower stops (dropped).
            let prev = t.insert(sid.to_string(), loaded);
            if let (Some(p), Some(new)) = (prev, t.get_mut(sid)) {
                if new.model.is_none() {
                    new.model = p.model.clone();
                }
            }
        }
    }

    /// The answer of start, resume and fork.
    fn opened(&self, r: &Read, thread: Thread, mode: &str, model: Option<&str>) -> Value {
        let model = model
            .map(str::to_string)
            .or_else(|| thread.model.clone())
            .unwrap_or_else(|| "default".into());
        json!({
            "thread": thread,
            "model": model,
            "modelProvider": r.provider.clone().unwrap_or_else(|| "agentd".into()),
            "cwd": r.workspace,
            "approvalPolicy": policy_of(mode),
            "approvalsReviewer": "user",
            "sandbox": sandbox_policy(&r.workspace),
            "reasoningEffort": null,
            "serviceTier": null,
            "instructionSources": [],
            "disabledPluginIds": [],
        })
    }

    async fn thread_start(self: &Arc<Self>, params: Value) -> Result<Reply, RpcErr> {
        let p: wire::ThreadStartParams = parse(params, "thread/start params")?;
        if p.ephemeral == Some(true) {
            return Err(RpcErr {
                code: -32600,
                message: "ephemeral threads are not supported: every agentd thread is a \
                          durable session"
                    .into(),
                data: Some(json!({"kind": "unsupported", "field": "ephemeral"})),
            });
        }
        let cwd = match &p.cwd {
            Some(c) => PathBuf::from(c),
            None => std::env::current_dir().map_err(internal)?,
        };
        if !cwd.is_absolute() {
            return Err(RpcErr::params("thread/start: cwd must be an absolute path"));
        }
        let mode = mode_of(p.approval_policy.as_ref(), &self.shared.args.mode);
        let picked = p.model.clone().or_else(|| self.shared.args.model.clone());
        let mut create = rpc::CreateParams {
            workspace: cwd.to_string_lossy().into_owned(),
            sandbox: sandbox_param(p.sandbox.as_deref())?,
            ..Default::default()
        };
        if let Some(m) = &picked {
            create.model = picked_model(m).map(str::to_string);
            create.provider = p.model_provider.clone();
        }
        let created = self.shared.call(method::CREATE, &create).await?;
        let sid = created["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let r = self.read(&sid).await?;
        self.load(&r, mode.clone(), picked.clone(), r.last_seq);
        let thread = self.thread_of(&r, false);
        let started = ("thread/started", json!({"thread": thread}));
        Ok((
            self.opened(&r, thread, &mode, picked.as_deref()),
            vec![started],
        ))
    }

    async fn thread_resume(self: &Arc<Self>, params: Value) -> Result<Reply, RpcErr> {
        let p: wire::ThreadResumeParams = parse(params, "thread/resume params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let r = self.read(&sid).await?;
        let mode = mode_of(p.approval_policy.as_ref(), &self.shared.args.mode);
        self.load(&r, mode.clone(), p.model.clone(), r.last_seq);
        let thread = self.thread_of(&r, !p.exclude_turns);
        // The thread's goal, as Codex's server sends it on a resume.
        let notes = goal::snapshot(&self.shared, &sid, &r.uuid)
            .await
            .into_iter()
            .collect();
        Ok((self.opened(&r, thread, &mode, p.model.as_deref()), notes))
    }

    async fn thread_fork(self: &Arc<Self>, params: Value) -> Result<Reply, RpcErr> {
        let p: wire::ThreadForkParams = parse(params, "thread/fork params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let mut q = rpc::ForkParams {
            session_id: sid.clone(),
            ..Default::default()
        };
        if let Some(t) = &p.last_turn_id {
            let src = self.read(&sid).await?;
            let seq = src
                .turns
                .ended_seq
                .get(t)
                .ok_or_else(|| RpcErr::params(format!("no ended turn `{t}` in this thread")))?;
            q.to_seq = Some(*seq);
        }
        let forked = self.shared.call(method::FORK, &q).await?;
        let child = forked["child_session_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let r = self.read(&child).await?;
        let mode = mode_of(p.approval_policy.as_ref(), &self.shared.args.mode);
        self.load(&r, mode.clone(), p.model.clone(), r.last_seq);
        let thread = self.thread_of(&r, !p.exclude_turns);
        let mut note = thread.clone();
        note.turns.clear();
        Ok((
            self.opened(&r, thread, &mode, p.model.as_deref()),
            vec![("thread/started", json!({"thread": note}))],
        ))
    }

    async fn thread_list(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::ThreadListParams = parse(params, "thread/list params")?;
        let limit = p.limit.unwrap_or(LIST_PAGE).clamp(1, 200);
        let cwd = match &p.cwd {
            Some(Value::String(c)) => Some(c.clone()),
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        let archived = p.archived == Some(true);
        let search = p.search_term.as_deref().map(str::to_lowercase);
        let kinds = source_kinds(p.source_kinds.as_deref());
        let mut cursor = p.cursor.clone();
        let mut data: Vec<Thread> = vec![];
        let next = loop {
            let q = rpc::ListParams {
                workspace: cwd.clone(),
                limit: Some(limit as usize),
                include_archived: archived,
                cursor: cursor.clone(),
            };
            let r = self.shared.call(method::LIST, &q).await?;
            for s in r["sessions"].as_array().into_iter().flatten() {
                if archived && s["archived"] != json!(true) {
                    continue;
                }
                let subagent = s["relation"] == "subagent";
                if !(if subagent { kinds.1 } else { kinds.0 }) {
                    continue;
                }
                let t = self.listed(s).await;
                let hit = search.as_ref().is_none_or(|q| {
                    t.name.as_deref().unwrap_or("").to_lowercase().contains(q)
                        || t.preview.to_lowercase().contains(q)
                });
                if hit {
                    data.push(t);
                }
            }
            cursor = r["next_cursor"].as_str().map(str::to_string);
            // A search goes on through the pages until it has a page of hits.
            if cursor.is_none() || search.is_none() || data.len() >= limit as usize {
                break cursor;
            }
        };
        Ok(json!({"data": data, "nextCursor": next, "backwardsCursor": null}))
    }

    /// A listed session as a thread (without turns; its preview is its first prompt).
    async fn listed(&self, s: &Value) -> Thread {
        let sid = s["session_id"].as_str().unwrap_or_default();
        let first = self
            .shared
            .call(
                method::EVENTS,
                &rpc::EventsParams {
                    session_id: sid.to_string(),
                    types: Some(vec!["user_message".to_string()]),
                    tail: None,
                    limit: Some(8),
                    after_seq: None,
                },
            )
            .await
            .ok();
        // The first prompt, past the context an imported Codex session starts with.
        let preview = first
            .as_ref()
            .and_then(|f| f["events"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|e| e["data"]["text"].as_str())
            .find(|t| !map::is_codex_context(t))
            .unwrap_or("")
            .to_string();
        let uuid = s["uuid"]
            .as_str()
            .map_or_else(|| session_uuid::to_uuid(sid), str::to_string);
        let root = match s["fork_root_session_id"].as_str() {
            Some(r) => self.shared.uuid_of(r).await,
            None => uuid.clone(),
        };
        let parent = match s["parent_session_id"].as_str() {
            Some(p) => Some(self.shared.uuid_of(p).await),
            None => None,
        };
        let subagent = s["relation"] == "subagent";
        let depth = subagent.then(|| s["subagent_depth"].as_u64().unwrap_or(1));
        Thread {
            id: uuid,
            session_id: root,
            source: source_of(depth, parent.as_deref()),
            forked_from_id: parent.filter(|_| !subagent),
            preview,
            ephemeral: false,
            model_provider: "agentd".into(),
            model: None,
            created_at: ms_of(s["created_at"].as_str().unwrap_or("")),
            updated_at: ms_of(s["updated_at"].as_str().unwrap_or("")),
            status: self.status_value(sid, s["status"].as_str().unwrap_or("")),
            path: None,
            cwd: s["workspace"].as_str().unwrap_or("/").to_string(),
            cli_version: env!("CARGO_PKG_VERSION").to_string(),
            project_id: None,
            name: s["title"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(str::to_string),
            turns: vec![],
        }
    }

    fn loaded_list(&self, params: Value) -> Result<Value, RpcErr> {
        let _: wire::CursorParams = parse(params, "thread/loaded/list params")?;
        let mut ids: Vec<String> = self
            .threads
            .lock()
            .map(|t| t.values().map(|l| l.uuid.clone()).collect())
            .unwrap_or_default();
        ids.sort();
        Ok(json!({"data": ids, "nextCursor": null}))
    }

    async fn thread_read(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::ThreadReadParams = parse(params, "thread/read params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let r = self.read(&sid).await?;
        Ok(json!({"thread": self.thread_of(&r, p.include_turns)}))
    }

    /// Offset cursors over a list read whole: `(start, end, next)`.
    fn window(
        len: usize,
        cursor: Option<&Value>,
        limit: Option<u32>,
    ) -> Result<(usize, usize, Option<String>), RpcErr> {
        let start = match cursor {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => c
                .parse::<usize>()
                .map_err(|_| RpcErr::params("cursor: not one of this bridge's cursors"))?,
            Some(_) => return Err(RpcErr::params("cursor: anchors are not supported")),
        }
        .min(len);
        let end = limit.map_or(len, |l| start.saturating_add(l.max(1) as usize).min(len));
        Ok((start, end, (end < len).then(|| end.to_string())))
    }

    async fn turns_list(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::ThreadPageParams = parse(params, "thread/turns/list params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let r = self.read(&sid).await?;
        let mut turns: Vec<Turn> = self.thread_of(&r, true).turns;
        if p.sort_direction.as_deref() != Some("asc") {
            turns.reverse();
        }
        let (a, b, next) = Self::window(turns.len(), p.cursor.as_ref(), p.limit)?;
        Ok(json!({"data": &turns[a..b], "nextCursor": next, "backwardsCursor": null}))
    }

    async fn items_list(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::ThreadPageParams = parse(params, "thread/items/list params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let r = self.read(&sid).await?;
        let mut items: Vec<Value> = vec![];
        for t in self.thread_of(&r, true).turns {
            if p.turn_id.as_ref().is_some_and(|id| *id != t.id) {
                continue;
            }
            for item in t.items {
                items.push(json!({"turnId": t.id, "item": item}));
            }
        }
        if p.sort_direction.as_deref() == Some("desc") {
            items.reverse();
        }
        let (a, b, next) = Self::window(items.len(), p.cursor.as_ref(), p.limit)?;
        Ok(json!({"data": &items[a..b], "nextCursor": next, "backwardsCursor": null}))
    }

    async fn name_set(&self, params: Value) -> Result<Reply, RpcErr> {
        let p: wire::ThreadSetNameParams = parse(params, "thread/name/set params")?;
        let (sid, uuid) = self.shared.resolve(&p.thread_id).await?;
        self.shared
            .call(
                method::RENAME,
                &rpc::RenameParams {
                    session_id: sid.clone(),
                    title: p.name.clone(),
                },
            )
            .await?;
        // A loaded thread hears of it from its follower (the session_info event).
        let loaded = self.threads.lock().is_ok_and(|t| t.contains_key(&sid));
        let notes = if loaded {
            vec![]
        } else {
            vec![(
                "thread/name/updated",
                json!({"threadId": uuid, "threadName": p.name}),
            )]
        };
        Ok((json!({}), notes))
    }

    async fn archive(&self, params: Value, archive: bool) -> Result<Reply, RpcErr> {
        let p: wire::ThreadRef = parse(params, "thread/archive params")?;
        let (sid, uuid) = self.shared.resolve(&p.thread_id).await?;
        let m = if archive {
            method::ARCHIVE
        } else {
            method::UNARCHIVE
        };
        self.shared.call(m, &session(&sid)).await?;
        if archive {
            return Ok((
                json!({}),
                vec![("thread/archived", json!({"threadId": uuid}))],
            ));
        }
        let r = self.read(&sid).await?;
        Ok((
            json!({"thread": self.thread_of(&r, false)}),
            vec![("thread/unarchived", json!({"threadId": uuid}))],
        ))
    }

    async fn delete(&self, params: Value) -> Result<Reply, RpcErr> {
        let p: wire::ThreadRef = parse(params, "thread/delete params")?;
        let (sid, uuid) = self.shared.resolve(&p.thread_id).await?;
        self.shared
            .call(
                method::DELETE,
                &rpc::DeleteParams {
                    session_id: sid.clone(),
                    purge: false,
                },
            )
            .await?;
        if let Ok(mut t) = self.threads.lock() {
            t.remove(&sid);
        }
        Ok((
            json!({}),
            vec![("thread/deleted", json!({"threadId": uuid}))],
        ))
    }

    /// `thread/compact/start`: Codex's `/compact` compacts now, as a turn of its own
    /// (`turn/started`, a `contextCompaction` item, `turn/completed`), which Codex's TUI
    /// waits for. agentd keeps the last few events verbatim (a call is never separated
    /// from its result); a thread too short for that is compacted whole, and one with
    /// nothing new since its last compaction gets a turn with nothing in it.
    async fn compact(&self, params: Value) -> Result<Reply, RpcErr> {
        let p: wire::ThreadRef = parse(params, "thread/compact/start params")?;
        let (sid, uuid) = self.shared.resolve(&p.thread_id).await?;
        let started = map::now_ms();
        let mut r = json!({"compactable": false});
        for tail in [COMPACT_TAIL, 0] {
            r = self
                .shared
                .call(
                    method::COMPACT,
                    &rpc::CompactParams {
                        session_id: sid.clone(),
                        tail_events: Some(tail),
                        ..Default::default()
                    },
                )
                .await?;
            if r["compactable"] != json!(false) {
                break;
            }
        }
        let seq = r["compaction_seq"].as_u64();
        let turn_id = seq.map_or_else(|| format!("compact-{started}"), |s| format!("seq-{s}"));
        let ended = map::now_ms();
        let turn = |status, done: Option<i64>| Turn {
            id: turn_id.clone(),
            items: vec![],
            status,
            error: None,
            started_at: Some(started / 1000),
            completed_at: done.map(|d| d / 1000),
        };
        let mut notes = vec![(
            "turn/started",
            json!({"threadId": uuid, "turn": turn("inProgress", None)}),
        )];
        if let Some(s) = seq {
            let item = json!({"type": "contextCompaction", "id": format!("compact-{s}")});
            notes.push((
                "item/started",
                json!({"threadId": uuid, "turnId": turn_id, "item": item, "startedAtMs": started}),
            ));
            notes.push((
                "item/completed",
                json!({"threadId": uuid, "turnId": turn_id, "item": item, "completedAtMs": ended}),
            ));
        }
        notes.push((
            "turn/completed",
            json!({"threadId": uuid, "turn": turn("completed", Some(ended))}),
        ));
        Ok((json!({}), notes))
    }

    async fn revert(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::ThreadRevertParams = parse(params, "thread/revert params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let before = self.read(&sid).await?;
        let started = *before
            .turns
            .started_seq
            .get(&p.before_turn_id)
            .ok_or_else(|| {
                RpcErr::params(format!("no turn `{}` in this thread", p.before_turn_id))
            })?;
        self.shared
            .call(
                method::REVERT,
                &rpc::RevertParams {
                    session_id: sid.clone(),
                    to_seq: started.saturating_sub(1),
                    ..Default::default()
                },
            )
            .await?;
        let r = self.read(&sid).await?;
        Ok(
            json!({"thread": self.thread_of(&r, true), "turnsBackwardsCursor": null, "itemsBackwardsCursor": null}),
        )
    }

    fn unsubscribe(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::ThreadRef = parse(params, "thread/unsubscribe params")?;
        let sid = match session_uuid::resolve(&p.thread_id) {
            Some(Resolved::Session(s)) => Some(s),
            Some(Resolved::Lookup(u)) => self
                .threads
                .lock()
                .ok()
                .and_then(|t| t.iter().find(|(_, l)| l.uuid == u).map(|(s, _)| s.clone())),
            None => None,
        };
        let removed = sid
            .and_then(|s| self.threads.lock().ok().and_then(|mut t| t.remove(&s)))
            .is_some();
        Ok(json!({"status": if removed { "unsubscribed" } else { "notSubscribed" }}))
    }

    // ---- turns -----------------------------------------------------------------------

    fn loaded(&self, sid: &str) -> Result<(PathBuf, String, Option<String>), RpcErr> {
        self.threads
            .lock()
            .ok()
            .and_then(|t| {
                t.get(sid)
                    .map(|l| (l.workspace.clone(), l.mode.clone(), l.model.clone()))
            })
            .ok_or_else(|| {
                RpcErr::new(
                    -32600,
                    format!(
                        "thread {} is not loaded on this connection: thread/resume it first",
                        session_uuid::to_uuid(sid)
                    ),
                )
            })
    }

    async fn turn_start(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::TurnStartParams = parse(params, "turn/start params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        let (_, mut mode, mut model) = self.loaded(&sid)?;
        let (text, images) = turn_input(&p.input, "turn/start")?;
        if p.approval_policy.is_some() {
            mode = mode_of(p.approval_policy.as_ref(), &mode);
        }
        if p.model.is_some() {
            model = p.model.clone();
        }
        // The thread remembers a policy or model a turn picked, as Codex's threads do.
        if let Ok(mut t) = self.threads.lock() {
            if let Some(l) = t.get_mut(&sid) {
                l.mode = mode.clone();
                l.model = model.clone();
            }
        }
        let q = rpc::TurnParams {
            session_id: sid,
            input: text,
            permission_mode: Some(mode),
            wait: Some(false),
            images,
            // The client's id for its message is agentd's idempotency key: a retried
            // turn/start answers the turn already admitted instead of running it twice.
            client_request_id: p.client_user_message_id.clone(),
            model: model.as_deref().and_then(picked_model).map(str::to_string),
            ..Default::default()
        };
        // Codex's clients start the next turn on `turn/completed`; the daemon admits a
        // turn sent on seeing `turn_ended` (docs/protocol.md#turn-order).
        let r = self.shared.call(method::TURN, &q).await?;
        let turn = Turn {
            id: r["turn_id"].as_str().unwrap_or_default().to_string(),
            items: vec![],
            status: "inProgress",
            error: None,
            started_at: Some(map::now_ms() / 1000),
            completed_at: None,
        };
        Ok(json!({ "turn": turn }))
    }

    /// `turn/steer`: `agentd/steer`, the input joining the running turn at its next
    /// provider call (recorded as a steered `user_message`). Answered once it is
    /// recorded; a thread with no running turn gets agentd's `not_running` error.
    async fn turn_steer(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::TurnSteerParams = parse(params, "turn/steer params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        self.loaded(&sid)?;
        let (text, images) = turn_input(&p.input, "turn/steer")?;
        let running = self.threads.lock().ok().and_then(|t| {
            t.get(&sid)
                .and_then(|l| l.turn.lock().ok()?.running.clone())
        });
        if running.as_ref().is_some_and(|t| *t != p.expected_turn_id) {
            return Err(RpcErr::new(
                -32600,
                format!(
                    "turn/steer: the running turn is {}, not {}",
                    running.unwrap_or_default(),
                    p.expected_turn_id.chars().take(64).collect::<String>()
                ),
            ));
        }
        let q = rpc::SteerParams {
            session_id: sid,
            input: text,
            client_request_id: p.client_user_message_id.clone(),
            images,
        };
        let r = self.shared.call(method::STEER, &q).await?;
        let turn_id = r["turn_id"]
            .as_str()
            .map_or(p.expected_turn_id, str::to_string);
        Ok(json!({ "turnId": turn_id }))
    }

    async fn turn_interrupt(&self, params: Value) -> Result<Value, RpcErr> {
        let p: wire::TurnInterruptParams = parse(params, "turn/interrupt params")?;
        let sid = self.sid_of(&p.thread_id).await?;
        self.shared
            .call(
                method::INTERRUPT,
                &rpc::InterruptParams {
                    session_id: sid,
                    reason: Some("codex_interrupt".into()),
                },
            )
            .await?;
        Ok(json!({}))
    }

    async fn model_list(&self) -> Result<Value, RpcErr> {
        let c = self
            .shared
            .call(method::MODELS, &rpc::ModelsParams::default())
            .await?;
        let mut ids: Vec<(String, String, String)> = vec![];
        if let Some(m) = &self.shared.args.model {
            ids.push((m.clone(), m.clone(), "this bridge's --model".into()));
        }
        for m in c["models"].as_array().into_iter().flatten() {
            let (Some(p), Some(name)) = (m["provider"].as_str(), m["model"].as_str()) else {
                continue;
            };
            let id = format!("{p}:{name}");
            if !ids.iter().any(|(i, _, _)| *i == id) {
                ids.push((
                    id,
                    name.to_string(),
                    format!("{p} ({})", m["source"].as_str().unwrap_or("config")),
                ));
            }
        }
        if ids.is_empty() {
            ids.push((
                "default".into(),
                "default".into(),
                "the daemon's default provider and model".into(),
            ));
        }
        let data: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, (id, name, desc))| {
                json!({
                    "id": id, "model": id, "displayName": name, "description": desc,
                    "hidden": false, "isDefault": i == 0,
                    "defaultReasoningEffort": "medium", "supportedReasoningEfforts": [],
                    "inputModalities": ["text", "image"], "supportsPersonality": false,
                    "upgrade": null, "additionalSpeedTiers": [], "serviceTiers": [],
                })
            })
            .collect();
        Ok(json!({"data": data, "nextCursor": null}))
    }

    /// The client's answer to one `agentd/permission` request: `(decision, scope)`.
    async fn approve(&self, thread_id: &str, workspace: &Path, p: &Value) -> Value {
        let tool = p["tool"].as_str().unwrap_or("tool");
        let call_id = p["call_id"].as_str().unwrap_or("");
        let turn_id = p["turn_id"].as_str().unwrap_or("");
        let args = p.get("args").cloned().unwrap_or_else(|| json!({}));
        let mut reason = p["justification"].as_str().map(str::to_string);
        if let Some(g) = p.get("sandbox_grant").filter(|g| !g.is_null()) {
            reason = Some(format!(
                "asks for a wider sandbox: {g}{}",
                reason.map(|r| format!(" ({r})")).unwrap_or_default()
            ));
        }
        let mut req = json!({"threadId": thread_id, "turnId": turn_id, "itemId": call_id,
            "startedAtMs": map::now_ms(), "reason": reason});
        let m = if map::tool_item(tool) == map::ToolItem::FileChange {
            "item/fileChange/requestApproval"
        } else {
            req["command"] = json!(map::command_text(tool, &args));
            req["cwd"] = json!(workspace);
            "item/commandExecution/requestApproval"
        };
        let Some(ans) = self.ask_client(m, req).await else {
            return json!({"decision": "deny"});
        };
        match ans["result"]["decision"].as_str() {
            Some("accept") => json!({"decision": "allow"}),
            // The daemon remembers the tool for the session (a sandbox grant: the grant).
            Some("acceptForSession") => {
                if p.get("sandbox_grant").is_some_and(|g| !g.is_null()) {
                    json!({"decision": "allow", "scope": "session"})
                } else {
                    json!({"decision": "allow_always"})
                }
            }
            _ => json!({"decision": "deny"}),
        }
    }
}

/// What agentd receives for a client's input pieces: the text (text as it is, a
/// mention as `@name (path)`, a skill as `$name`, one piece per line) and the images
/// (`agentd/turn`'s `images`: a `data:` URL as `{data, mime_type}`, a local image as
/// `{path}`; the daemon checks their bytes and limits).
fn turn_input(
    input: &[wire::UserInput],
    what: &str,
) -> Result<(String, Vec<rpc::TurnImage>), RpcErr> {
    let mut text = String::new();
    let mut images = Vec::new();
    for i in input {
        let piece = match i {
            wire::UserInput::Text { text } => text.clone(),
            wire::UserInput::Image { url, file_id } => {
                images.push(image_of_url(url.as_deref(), file_id.is_some(), what)?);
                continue;
            }
            wire::UserInput::LocalImage { path } => {
                if path.is_empty() {
                    return Err(RpcErr::params(format!(
                        "{what}: a localImage without a path"
                    )));
                }
                images.push(rpc::TurnImage {
                    path: Some(path.clone()),
                    data: None,
                    mime_type: None,
                });
                continue;
            }
            wire::UserInput::Mention { name, path } => format!("@{name} ({path})"),
            wire::UserInput::Skill { name } => format!("${name}"),
            wire::UserInput::Other => {
                return Err(RpcErr::params(format!(
                    "{what}: only text, mentions, skills and images reach agentd"
                )))
            }
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&piece);
    }
    if text.trim().is_empty() {
        return Err(RpcErr::params(format!("{what}: the input has no text")));
    }
    Ok((text, images))
}

/// An `image` input's `url` as agentd's inline image: only `data:MIME;base64,…` URLs
/// (the bytes travel with the request; agentd fetches nothing).
fn image_of_url(url: Option<&str>, file_id: bool, what: &str) -> Result<rpc::TurnImage, RpcErr> {
    let refuse = |why: &str| RpcErr::params(format!("{what}: an image input {why}"));
    let Some(url) = url else {
        return Err(refuse(if file_id {
            "by fileId is not supported (agentd has no file uploads): send a data: URL or a localImage"
        } else {
            "needs a `url`"
        }));
    };
    let Some((head, data)) = url.strip_prefix("data:").and_then(|r| r.split_once(',')) else {
        return Err(refuse(
            "must be a data: URL (agentd fetches no remote images): send a data: URL or a localImage",
        ));
    };
    let Some(mime) = head.strip_suffix(";base64") else {
        return Err(refuse("must be a base64 data: URL"));
    };
    Ok(rpc::TurnImage {
        path: None,
        data: Some(data.to_string()),
        mime_type: (!mime.is_empty()).then(|| mime.to_string()),
    })
}

/// The error of a method agentd has no meaning for.
pub fn unsupported(m: &str) -> RpcErr {
    let shown: String = m.chars().take(128).collect();
    RpcErr {
        code: -32601,
        message: format!(
            "`{shown}` is not supported by agentd's app-server bridge (docs/codex-app-server.md)"
        ),
        data: Some(json!({"kind": "unsupported", "method": shown})),
    }
}

/// Follows one loaded thread: the session's events become notifications, its permission
/// requests approval requests. Ends when the thread is unloaded (the task is aborted) or
/// the connection is gone.
/// How long a permission request waits for its `tool_call` event.
const PERMISSION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Puts a followed session's permission requests to the client.
struct Asker {
    conn: Arc<Conn>,
    uuid: String,
    workspace: PathBuf,
}

impl Asker {
    /// Announces the call's item and asks the client, in a task of its own, so the
    /// stream goes on.
    async fn ask(&self, c: &Arc<Client>, live: &mut Live, id: Value, params: Value) {
        let tool = params["tool"].as_str().unwrap_or("tool").to_string();
        let args = params.get("args").cloned().unwrap_or_else(|| json!({}));
        let call_id = params["call_id"].as_str().unwrap_or("");
        if live.turn_id.is_none() {
            live.turn_id = params["turn_id"].as_str().map(str::to_string);
        }
        if let Some((m, p)) = live.announce(&self.workspace, call_id, &tool, &args) {
            c.out.notify(m, p);
        }
        let (c, conn, uuid, ws) = (
            c.clone(),
            self.conn.clone(),
            self.uuid.clone(),
            self.workspace.clone(),
        );
        tokio::spawn(async move {
            let ans = c.approve(&uuid, &ws, &params).await;
            let _ = conn.respond(id, ans).await;
        });
    }
}

/// The turn a follower saw running.
#[derive(Default)]
struct Seen {
    running: Option<String>,
}

/// What a follower follows.
struct Followed {
    sid: String,
    uuid: String,
    workspace: PathBuf,
    after_seq: Option<u64>,
    /// The turns, as the follower saw them.
    turn: Arc<Mutex<Seen>>,
}

async fn follow(client: std::sync::Weak<Client>, f: Followed) {
    let Followed {
        sid,
        uuid,
        workspace,
        after_seq,
        turn,
    } = f;
    let Some(target) = client.upgrade().map(|c| c.shared.target.socket.clone()) else {
        return;
    };
    let Ok(conn) = Conn::connect(&target).await else {
        return;
    };
    let conn = Arc::new(conn);
    let Some(mut incoming) = conn.take_incoming() else {
        return;
    };
    if conn.subscribe(&sid, after_seq, true).await.is_err() {
        return;
    }
    let mut live = Live::new(uuid.clone());
    // Permission requests travel beside the event stream, so one may arrive before the
    // events leading up to it (the assistant's text, the `tool_call` it is about): it
    // waits until its `tool_call` was followed, then the client sees the items in the
    // order they happened. One that waits too long is asked anyway.
    let mut waiting: Vec<(Value, Value, tokio::time::Instant)> = vec![];
    let asker = Asker {
        conn: conn.clone(),
        uuid: uuid.clone(),
        workspace: workspace.clone(),
    };
    loop {
        let oldest = waiting.first().map(|w| w.2 + PERMISSION_WAIT);
        let msg = tokio::select! {
            m = incoming.recv() => match m { Some(m) => m, None => break },
            _ = async { match oldest { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                let Some(c) = client.upgrade() else { return };
                for (id, params, _) in waiting.drain(..) {
                    asker.ask(&c, &mut live, id, params).await;
                }
                continue;
            }
        };
        let Some(c) = client.upgrade() else { return };
        match msg {
            Incoming::Notification { method: m, params } if m == EVENT_NOTIFICATION => {
                let Some(ev) = params.get("result") else {
                    continue;
                };
                if ev["type"] == "lagged" {
                    let from = live.last_seq.or(after_seq);
                    let _ = conn.subscribe(&sid, from, true).await;
                    continue;
                }
                let notes = live.on_event(ev, &workspace);
                // Updated before the client hears of it (it may answer at once).
                if let Ok(mut t) = turn.lock() {
                    t.running.clone_from(&live.turn_id);
                }
                for (m, p) in notes {
                    c.out.notify(m, p);
                }
                if let Some((m, p)) = goal::on_event(&c.shared, &sid, &uuid, ev).await {
                    c.out.notify(m, p);
                }
                let mut i = 0;
                while i < waiting.len() {
                    if live.has_call(waiting[i].1["call_id"].as_str().unwrap_or("")) {
                        let (id, params, _) = waiting.remove(i);
                        asker.ask(&c, &mut live, id, params).await;
                    } else {
                        i += 1;
                    }
                }
            }
            Incoming::Request {
                id,
                method: m,
                params,
            } if m == method::PERMISSION => {
                if live.has_call(params["call_id"].as_str().unwrap_or("")) {
                    asker.ask(&c, &mut live, id, params).await;
                } else {
                    waiting.push((id, params, tokio::time::Instant::now()));
                }
            }
            Incoming::Request { id, .. } => {
                let _ = conn
                    .respond_error(id, -32601, "not served by agentctl app-server")
                    .await;
            }
            _ => {}
        }
    }
}
