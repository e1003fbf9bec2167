//! The native API (docs/protocol.md#methods): registers every `agentd/*` method in a jsonrpsee
//! `RpcModule`. Handlers parse params into the `agentd_proto::rpc` types, call the
//! registry, a session actor, `ops` or the turn manager, serialize the typed outcome,
//! and map `AgentError`s to error objects (docs/protocol.md#errors).
//!
//! This module owns the whole method table: a new native method is one `method(...)`
//! call in [`methods`] plus, when it does more than read the state, a function in `ops`
//! (history operations) or on the [`TurnManager`] (turns).

use crate::history::compaction::Trigger;
use crate::history::reconcile::ReconcileReason;
use crate::peer::PeerHandle;
pub use crate::register::{error_object, parse};
use crate::register::{method, parse_str, to_value};
use crate::registry::{Registry, SessionMeta};
use crate::session::{Reads, SessionHandle};
use crate::store;
use crate::turn::TurnManager;
use agentd_proto::event::{new_event_id, now_ts};
use agentd_proto::rpc::*;
use agentd_proto::{session_id, AgentError, ErrorKind, Event, EventType};
use jsonrpsee::types::{Params, Request};
use jsonrpsee::{Extensions, Methods, PendingSubscriptionSink, RpcModule};
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;

pub use crate::filesystem::check_workspace;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// What every handler can reach.
pub struct Api {
    pub registry: Arc<Registry>,
    /// Running turns, the artifact watch and permission routing.
    pub turns: Arc<TurnManager>,
    /// Cancelled by `agentd/shutdown` (and signals): main runs the shutdown sequence.
    pub shutdown_requested: CancellationToken,
}

/// Where a direct call's response object goes, as pieces of JSON text to be written one
/// after the other (a large result is shared, not copied); called once, from any thread.
pub type Respond = Box<dyn FnOnce(Vec<bytes::Bytes>) + Send>;

/// The calls the transport hands straight to their session instead of the generic
/// per-call task and the method table's `Value` results: `agentd/append` (params parsed
/// once, the drafts go to the session actor from the connection's reader, and the
/// commit thread writes the response right after the commit) and
/// `agentd/context` (the result text comes from the session's rendered prefix and is
/// written as it is). Responses (`{"jsonrpc","id","result"|"error"}`) are exactly what
/// the method table would answer.
pub struct DirectCalls {
    registry: Arc<Registry>,
}

impl DirectCalls {
    pub fn new(registry: Arc<Registry>) -> DirectCalls {
        DirectCalls { registry }
    }

    /// Whether `method` is answered here rather than by the method table.
    pub fn takes(&self, name: &str) -> bool {
        name == method::APPEND || name == method::CONTEXT
    }

    /// Takes `req` if it is a direct method; otherwise hands `respond` back.
    pub fn try_call(&self, req: &Request<'_>, respond: Respond) -> Result<(), Respond> {
        if !self.takes(&req.method) {
            return Err(respond);
        }
        let mut head = String::with_capacity(64);
        head.push_str(r#"{"jsonrpc":"2.0","id":"#);
        // An Id is a number, a string or null: it always serializes.
        if let Ok(id) = serde_json::to_string(&req.id) {
            head.push_str(&id);
        }
        let answer = Answer {
            head: Some(head),
            respond: Some(respond),
        };
        let params = req.params.as_ref().map_or("{}", |p| p.get());
        if req.method == method::CONTEXT {
            let parsed: Result<ContextParams, AgentError> = parse_str(params);
            let registry = self.registry.clone();
            tokio::spawn(async move {
                let res = match parsed {
                    Ok(p) => match registry.get(&p.session_id).await {
                        Ok(h) => {
                            crate::ops::context_json(&h, p.after_seq, p.dialect.unwrap_or_default())
                                .await
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                answer.send_parts(res);
            });
            return Ok(());
        }
        let p: AppendParams = match parse_str(params) {
            Ok(p) => p,
            Err(e) => {
                answer.send::<()>(Err(e));
                return Ok(());
            }
        };
        if p.client_request_id.is_some() {
            let registry = self.registry.clone();
            tokio::spawn(async move {
                let res = match registry.get(&p.session_id).await {
                    Ok(h) => crate::ops::append_idempotent(&h, p).await,
                    Err(e) => Err(e),
                };
                answer.send(res);
            });
            return Ok(());
        }
        let done: crate::session::AppendDone = Box::new(move |res| answer.send(res));
        let retry = match self.registry.loaded(&p.session_id) {
            Some(h) => match h.try_append_then(p.events, p.expect_seq, done) {
                Ok(()) => return Ok(()),
                Err(back) => back,
            },
            None => (p.events, done),
        };
        // Not loaded, evicted, or its queue is full: wait for it in a task of its own,
        // never in the connection's reader.
        let (registry, sid, expect_seq) = (self.registry.clone(), p.session_id, p.expect_seq);
        tokio::spawn(async move {
            let (drafts, done) = retry;
            match registry.get(&sid).await {
                Ok(h) => h.append_then(drafts, expect_seq, done).await,
                Err(e) => done(Err(e)),
            }
        });
        Ok(())
    }
}

/// One direct call's answer: its response head, and where the text goes. Dropped
/// unanswered (an actor that died mid-command), it answers the error the method table
/// would have given.
struct Answer {
    head: Option<String>,
    respond: Option<Respond>,
}

impl Answer {
    fn send<T: Serialize>(mut self, res: Result<T, AgentError>) {
        self.finish(res.and_then(|r| {
            serde_json::to_vec(&r)
                .map(|v| vec![bytes::Bytes::from(v)])
                .map_err(|e| AgentError::internal(format!("serialize result: {e}")))
        }));
    }

    /// Answers with a result already serialized, in pieces of JSON text.
    fn send_parts(mut self, res: Result<Vec<bytes::Bytes>, AgentError>) {
        self.finish(res);
    }

    fn finish(&mut self, res: Result<Vec<bytes::Bytes>, AgentError>) {
        let (Some(head), Some(respond)) = (self.head.take(), self.respond.take()) else {
            return;
        };
        let (body, key) = match res {
            Ok(body) => (body, "result"),
            Err(e) => (
                vec![serde_json::to_vec(&error_object(&e))
                    .unwrap_or_default()
                    .into()],
                "error",
            ),
        };
        let mut first = head.into_bytes();
        first.extend_from_slice(b",\"");
        first.extend_from_slice(key.as_bytes());
        first.extend_from_slice(b"\":");
        let mut text = Vec::with_capacity(body.len() + 2);
        // A small answer (an append's) goes as one piece.
        if let [one] = &body[..] {
            if one.len() < 4096 {
                first.extend_from_slice(one);
                first.push(b'}');
                respond(vec![first.into()]);
                return;
            }
        }
        text.push(first.into());
        text.extend(body);
        text.push(bytes::Bytes::from_static(b"}"));
        respond(text);
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.finish(Err(AgentError::internal(
            "the session's actor stopped before answering",
        )));
    }
}

pub fn methods(api: Api) -> Methods {
    let mut m = RpcModule::new(api);
    method(
        &mut m,
        method::HELLO,
        |api, _p: HelloParams, _| async move {
            to_value(HelloResult {
                server: "agentd".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                protocol_version: PROTOCOL_VERSION,
                capabilities: capabilities(),
                home: api.registry.home.root().display().to_string(),
                pid: std::process::id(),
            })
        },
    );
    method(&mut m, method::STATUS, |api, _p: NoParams, _| async move {
        let r = &api.registry;
        to_value(StatusResult {
            uptime_s: r.started.elapsed().as_secs(),
            sessions_total: r.sessions_total(),
            sessions_loaded: r.loaded_count(),
            turns_running: api.turns.running_count(),
            connections: r.connections.load(std::sync::atomic::Ordering::Relaxed),
            durability: r.config.durability.as_str().into(),
            leftover_tmp_removed: r
                .leftover_tmp_removed
                .load(std::sync::atomic::Ordering::Relaxed),
        })
    });
    method(
        &mut m,
        method::SHUTDOWN,
        |api, _p: NoParams, _| async move {
            api.shutdown_requested.cancel();
            Ok(json!({"ok": true}))
        },
    );
    method(
        &mut m,
        method::CREATE,
        |api, mut p: CreateParams, _| async move {
            let mcp = match p.mcp_servers.take() {
                Some(entries) => Some(crate::turn::mcp::parse_client(&entries)?),
                None => None,
            };
            let out = create(&api.registry, p).await?;
            if let (Some(mcp), Some(sid)) = (mcp, out["session_id"].as_str()) {
                api.turns.mcp.set_client(sid, mcp);
            }
            Ok(out)
        },
    );
    method(
        &mut m,
        method::MCP_LIST,
        |api, p: McpListParams, _| async move { mcp_list(&api.turns, p).await },
    );
    method(
        &mut m,
        method::MCP_TOOLS,
        |api, p: McpToolsParams, _| async move { mcp_tools(&api.turns, p).await },
    );
    method(
        &mut m,
        method::LIST,
        |api, mut p: ListParams, _| async move {
            if let Some(ws) = p.workspace.take() {
                p.workspace = Some(crate::filesystem::canonical_or_given(ws).await);
            }
            api.registry.refresh_index().await;
            to_value(list(&api.registry, p)?)
        },
    );
    method(
        &mut m,
        method::SHOW,
        |api, p: SessionParams, _| async move {
            let h = api.registry.get(&p.session_id).await?;
            let log_path =
                store::shown_log_path(&*api.registry.store, &api.registry.home, &p.session_id)?;
            let mut show = h.query(move |st| show(st, log_path)).await?;
            show.uuid = crate::uuids::uuid_of_sid(&api.registry, &p.session_id);
            to_value(show)
        },
    );
    method(
        &mut m,
        method::RESOLVE,
        |api, p: ResolveParams, _| async move {
            api.registry.refresh_index().await;
            to_value(crate::uuids::resolve_method(&api.registry, &p.id)?)
        },
    );
    // Pages are written as JSON text straight from the Log's events (no copy of the
    // events, no `Value` tree): the same bytes `EventsResult` serializes to.
    let res = m.register_async_method(method::EVENTS, |params, api, _| async move {
        let run = async {
            let p: EventsParams = parse(&params)?;
            let reads = match p.tail {
                Some(_) if p.after_seq.is_some() || p.limit.is_some() => {
                    return Err(AgentError::invalid_args(
                        "tail gives the last events: it takes no after_seq or limit",
                    ))
                }
                Some(n) => Reads::Last(n.clamp(1, MAX_EVENTS_PAGE), p.types.clone()),
                None => Reads::After(p.after_seq),
            };
            let h = api.registry.get(&p.session_id).await?;
            h.read_blocking(reads, move |st| events(st, &p)).await?
        };
        run.await.map_err(|e: AgentError| error_object(&e))
    });
    if let Err(e) = res {
        panic!("register {}: {e}", method::EVENTS);
    }
    method(
        &mut m,
        method::APPEND,
        |api, p: AppendParams, _| async move {
            let h = api.registry.get(&p.session_id).await?;
            if p.client_request_id.is_some() {
                return to_value(crate::ops::append_idempotent(&h, p).await?);
            }
            to_value(h.append(p.events, p.expect_seq).await?)
        },
    );
    method(
        &mut m,
        method::CONTEXT,
        |api, p: ContextParams, _| async move {
            let h = api.registry.get(&p.session_id).await?;
            to_value(crate::ops::context(&h, p.after_seq, p.dialect.unwrap_or_default()).await?)
        },
    );
    method(
        &mut m,
        method::RECONCILE,
        |api, p: ReconcileParams, _| async move {
            let h = api.registry.get(&p.session_id).await?;
            to_value(crate::ops::reconcile(&h, ReconcileReason::Explicit, p.dry_run, false).await?)
        },
    );
    method(
        &mut m,
        method::CHECKPOINT,
        |api, p: CheckpointParams, _| async move {
            let h = api.registry.get(&p.session_id).await?;
            to_value(crate::ops::checkpoint(&h, p.caps).await?)
        },
    );
    method(
        &mut m,
        method::COMPACT,
        |api, p: CompactParams, _| async move {
            let h = api.registry.get(&p.session_id).await?;
            let opts = crate::ops::compact_options(
                p.tail_events,
                api.registry.config.compaction.tail_events,
                p.strategy.as_deref(),
                Trigger::Manual,
            )?;
            to_value(api.turns.compact(&h, opts, p.dry_run).await?)
        },
    );
    method(&mut m, method::FORK, |api, p: ForkParams, _| async move {
        to_value(crate::ops::fork(&api.registry, p).await?)
    });
    method(&mut m, method::DIFF, |api, p: DiffParams, _| async move {
        let r = &api.registry;
        let h = r.get(&p.session_id).await?;
        crate::undo::diff(r.home.root(), &r.config.snapshots, &h, p).await
    });
    method(
        &mut m,
        method::REVERT,
        |api, p: RevertParams, _| async move {
            let r = &api.registry;
            let h = r.get(&p.session_id).await?;
            crate::undo::revert(r.home.root(), &r.config.snapshots, &h, p).await
        },
    );
    method(
        &mut m,
        method::TREE,
        |api, mut p: TreeParams, _| async move {
            if let Some(ws) = p.workspace.take() {
                p.workspace = Some(crate::filesystem::canonical_or_given(ws).await);
            }
            api.registry.refresh_index().await;
            to_value(crate::ops::tree(&api.registry, p)?)
        },
    );
    method(
        &mut m,
        method::IMPORT,
        |api, p: ImportParams, _| async move {
            if p.once {
                return crate::imports::import_once(&api.registry, p).await;
            }
            to_value(crate::ops::import(&api.registry, p).await?)
        },
    );
    method(&mut m, method::TURN, |api, p: TurnParams, _| async move {
        to_value(api.turns.turn(p).await?)
    });
    method(
        &mut m,
        method::STEER,
        |api, p: agentd_proto::rpc::SteerParams, _| async move { api.turns.steer(p).await },
    );
    method(
        &mut m,
        method::GOAL_SET,
        |api, p: agentd_proto::rpc::GoalSetParams, _| async move { api.turns.goal_set(p).await },
    );
    method(
        &mut m,
        method::GOAL_GET,
        |api, p: SessionParams, _| async move { api.turns.goal_get(&p.session_id).await },
    );
    method(
        &mut m,
        method::GOAL_CLEAR,
        |api, p: SessionParams, _| async move { api.turns.goal_clear(&p.session_id).await },
    );
    method(
        &mut m,
        method::DEQUEUE,
        |api, p: agentd_proto::rpc::DequeueParams, _| async move {
            api.turns.dequeue(&p.session_id, &p.turn_id).await
        },
    );
    method(
        &mut m,
        method::INTERRUPT,
        |api, p: InterruptParams, _| async move {
            to_value(
                api.turns
                    .interrupt(&p.session_id, p.reason.as_deref())
                    .await?,
            )
        },
    );
    let res = m.register_subscription(
        method::SUBSCRIBE,
        EVENT_NOTIFICATION,
        method::UNSUBSCRIBE,
        |params, pending, api, ext| async move { subscribe(params, pending, api, ext).await },
    );
    if let Err(e) = res {
        panic!("register subscribe: {e}");
    }
    m.into()
}

/// Events per backlog page of `agentd/subscribe`.
const BACKLOG_PAGE: usize = 1000;
/// Bytes (serialized) per backlog page: what a subscriber that stops reading can hold
/// in the daemon beyond its connection's write queue.
const BACKLOG_PAGE_BYTES: usize = 256 * 1024;
/// How long a subscriber may leave a notification unread before it is dropped.
const SUBSCRIBER_STALL: std::time::Duration = std::time::Duration::from_secs(30);

fn capabilities() -> Vec<String> {
    [
        "append",
        "subscribe",
        "batch",
        "durability",
        "context",
        "reconcile",
        "checkpoint",
        "compact",
        "fork",
        "tree",
        "turn",
        "interrupt",
        "import",
        "diff",
        "revert",
        "client_request_id",
        "resume_after_crash",
        "steer",
        "queue",
        "subagents",
        "goals",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `agentd/mcp_list`: the configured servers and, per session with servers, their state.
async fn mcp_list(turns: &Arc<TurnManager>, p: McpListParams) -> Result<Value, AgentError> {
    let mut servers = turns.mcp.config().clone();
    turns.mcp.settle_sandbox(&mut servers);
    let config: Vec<Value> = servers
        .iter()
        .map(|(n, c)| {
            let mut d = c.describe(n);
            d["enabled"] = json!(c.enabled);
            d
        })
        .collect();
    let mut sessions = Vec::new();
    for (sid, m) in turns.mcp.sessions() {
        if p.session_id.as_deref().is_some_and(|s| s != sid) {
            continue;
        }
        sessions.push(json!({
            "session_id": sid,
            "servers": crate::turn::mcp::describe(&m).await,
        }));
    }
    sessions.sort_by(|a, b| a["session_id"].as_str().cmp(&b["session_id"].as_str()));
    Ok(json!({"config": config, "sessions": sessions}))
}

fn offered_json(o: &agentd_mcp::Offered) -> Value {
    json!({
        "name": o.name, "server": o.server, "tool": o.tool.name, "title": o.tool.title,
        "description": o.tool.description, "annotations": o.tool.annotations,
        "trusted_read_only": o.trusted_read_only,
    })
}

/// `agentd/mcp_tools`: a session's MCP tools, or (no session) a probe that starts the
/// configured servers once, lists their tools and stops them.
async fn mcp_tools(turns: &Arc<TurnManager>, p: McpToolsParams) -> Result<Value, AgentError> {
    let keep = |o: &agentd_mcp::Offered| p.server.as_deref().is_none_or(|s| s == o.server);
    if let Some(sid) = &p.session_id {
        let Some(m) = turns.mcp.manager(sid) else {
            return Err(AgentError::new(
                agentd_proto::ErrorKind::NotFound,
                format!("session {sid} has no running MCP servers (they start at its first turn)"),
            ));
        };
        let tools: Vec<Value> = m
            .tools()
            .await
            .iter()
            .filter(|o| keep(o))
            .map(offered_json)
            .collect();
        return Ok(json!({"servers": crate::turn::mcp::describe(&m).await, "tools": tools}));
    }
    let mut servers = turns.mcp.config().clone();
    servers.retain(|n, c| c.enabled && p.server.as_deref().is_none_or(|s| s == n));
    turns.mcp.settle_sandbox(&mut servers);
    if let Some(s) = &p.server {
        if servers.is_empty() {
            return Err(AgentError::new(
                agentd_proto::ErrorKind::NotFound,
                format!("no enabled MCP server `{s}` in config"),
            ));
        }
    }
    let workspace = match p.workspace {
        Some(w) => crate::filesystem::check_workspace_async(w).await?,
        None => std::env::var("HOME").unwrap_or_else(|_| "/".into()),
    };
    let probe_dir = turns.registry.home.root().to_path_buf();
    let manager = agentd_mcp::Manager::new(agentd_mcp::ManagerOptions {
        start: agentd_mcp::StartContext {
            workspace: workspace.clone().into(),
            run_dir: crate::turn::mcp::run_dir(&probe_dir),
            session_id: "probe".into(),
            inherited_env: crate::turn::mcp::inherited_env(&servers),
            confine: crate::turn::mcp::probe_confine(
                &turns.registry.config.sandbox,
                std::path::Path::new(&workspace),
            ),
        },
        servers,
    });
    manager.start().await;
    let tools: Vec<Value> = manager.tools().await.iter().map(offered_json).collect();
    let status = crate::turn::mcp::describe(&manager).await;
    manager.stop().await;
    Ok(json!({"servers": status, "tools": tools}))
}

async fn create(registry: &Arc<Registry>, p: CreateParams) -> Result<Value, AgentError> {
    let workspace = crate::filesystem::check_workspace_async(p.workspace.clone()).await?;
    let sid = match p.session_id {
        Some(id) => {
            session_id::validate(&id)?;
            id
        }
        None => session_id::generate(),
    };
    let path = store::shown_log_path(&*registry.store, &registry.home, &sid)?;
    let mut data = json!({
        "workspace": workspace,
        "agentd_version": env!("CARGO_PKG_VERSION"),
        "log_format": 1,
        "created_by": "agentd/create",
    });
    // `NAME:MODEL` is recorded as its provider and model (`ProvidersConfig::split_model`).
    let (provider, model) = registry
        .config
        .providers_config()
        .split_model(p.provider.as_deref(), p.model.as_deref());
    for (k, v) in [("title", p.title), ("model", model), ("provider", provider)] {
        if let Some(v) = v {
            data[k] = json!(v);
        }
    }
    // The session's sandbox request, validated now and recorded (docs/sandbox.md#contract).
    let sandbox = crate::tools::sandboxing::parse_request(p.sandbox.as_ref())?;
    if !sandbox.is_empty() {
        data["sandbox"] = json!(sandbox);
    }
    let ev = Event {
        id: new_event_id(),
        session_id: sid.clone(),
        seq: 0,
        ts: now_ts(),
        kind: EventType::SessionStarted.as_str().into(),
        data,
    };
    let line = store::event_line(&ev);
    let st = registry.store.clone();
    let sid2 = sid.clone();
    tokio::task::spawn_blocking(move || st.create(&sid2, &mut |f| f.write_all(&line)))
        .await
        .map_err(|e| AgentError::internal(format!("create task: {e}")))?
        .map_err(|e| {
            if e.kind == ErrorKind::AlreadyExists {
                e.with_details(json!({"session_id": sid}))
            } else {
                e
            }
        })?;
    registry.index_new_log(&sid).await?;
    let mut out = to_value(CreateResult {
        session_id: sid,
        log_path: path,
    })?;
    // docs/sandbox.md#a-workspace-that-is-home
    if crate::turn::is_home(std::path::Path::new(&workspace)) {
        tracing::warn!(workspace = %workspace, "a session's workspace is the home directory");
        out["warning"] = json!(
            "the workspace is your home directory: commands may write every dotfile your \
             shell, editor and git read; `auto` permission mode is refused here unless \
             [sandbox] allow_auto_in_home = true"
        );
    }
    Ok(out)
}

pub fn summary(meta: &SessionMeta, uuid: String) -> SessionSummary {
    SessionSummary {
        session_id: meta.session_id.clone(),
        uuid,
        workspace: meta.workspace.clone(),
        title: meta.title.clone(),
        created_at: meta.created_at.clone(),
        updated_at: meta.updated_at.clone(),
        event_count: meta.event_count,
        status: if meta.running { "running" } else { "idle" }.into(),
        parent_session_id: meta.parent_session_id.clone(),
        fork_root_session_id: meta.fork_root_session_id.clone(),
        relation: meta.relation.clone(),
        parent_call_id: meta.parent_call_id.clone(),
        subagent_depth: meta.subagent_depth,
        archived: meta.archived,
    }
}

fn list(registry: &Registry, p: ListParams) -> Result<ListResult, AgentError> {
    let limit = p.limit.unwrap_or(100).clamp(1, 10_000);
    // Canonicalized by the caller, off the runtime's workers.
    let workspace = p.workspace.as_ref();
    // Cursor = "<created_at>|<session_id>" of the last item returned (newest first).
    let cursor = p
        .cursor
        .as_deref()
        .map(|c| c.split_once('|').unwrap_or((c, "")));
    registry.with_index(|index| {
        let mut rows: Vec<&SessionMeta> = index
            .values()
            .filter(|m| !m.deleted && (p.include_archived || !m.archived))
            .filter(|m| workspace.is_none_or(|w| &m.workspace == w))
            .filter(|m| match cursor {
                Some((ts, id)) => (m.created_at.as_str(), m.session_id.as_str()) < (ts, id),
                None => true,
            })
            .collect();
        rows.sort_unstable_by(|a, b| {
            (&b.created_at, &b.session_id).cmp(&(&a.created_at, &a.session_id))
        });
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next_cursor = if more {
            rows.last()
                .map(|m| format!("{}|{}", m.created_at, m.session_id))
        } else {
            None
        };
        let aliases = crate::uuids::aliases(index);
        Ok(ListResult {
            sessions: rows
                .into_iter()
                .map(|m| summary(m, crate::uuids::uuid_of(m, &aliases)))
                .collect(),
            next_cursor,
        })
    })
}

fn show(st: &crate::session::SessionState, log_path: String) -> ShowResult {
    ShowResult {
        session_id: st.id.clone(),
        uuid: String::new(),
        workspace: st.workspace().to_string(),
        title: st.title().map(str::to_string),
        log_path,
        event_count: st.events.len() as u64,
        last_seq: st.last_seq(),
        event_counts: st.fold.event_counts().clone(),
        pending_tool_calls: st.pending_calls_json(),
        checkpoint_to_seq: st.checkpoint_to_seq(),
        corrupt_lines: st.corrupt_lines.clone(),
        unknown_types: st.fold.unknown_types().clone(),
        seq_anomalies: st.seq_anomalies.clone(),
        status: st.status().into(),
    }
}

/// Most events in one `agentd/events` page.
const MAX_EVENTS_PAGE: usize = 100_000;

/// An `agentd/events` page (`EventsResult`) as JSON text.
fn events(
    st: &crate::session::SessionState,
    p: &EventsParams,
) -> Result<Box<serde_json::value::RawValue>, AgentError> {
    let kept = |ev: &crate::history::stored::StoredEvent| {
        p.types
            .as_ref()
            .is_none_or(|types| types.iter().any(|t| t == ev.kind()))
    };
    let (from, limit) = match p.tail {
        // The last `n` kept events: from the end back to the n-th.
        Some(n) => {
            let n = n.clamp(1, MAX_EVENTS_PAGE);
            let mut start = st.events.len();
            let mut found = 0;
            while start > 0 && found < n {
                start -= 1;
                found += usize::from(kept(&st.events[start]));
            }
            (&st.events[start..], n)
        }
        None => (
            st.events_after(p.after_seq),
            p.limit.unwrap_or(1000).clamp(1, MAX_EVENTS_PAGE),
        ),
    };
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    buf.extend_from_slice(b"{\"events\":[");
    let mut count = 0usize;
    let mut last: Option<u64> = None;
    let mut next = None;
    for ev in from {
        if !kept(ev) {
            continue;
        }
        if count == limit {
            next = last;
            break;
        }
        if count > 0 {
            buf.push(b',');
        }
        // The Log line as it is: the event's serialization (see `StoredEvent`).
        buf.extend_from_slice(ev.line().as_bytes());
        count += 1;
        last = Some(ev.seq);
    }
    buf.push(b']');
    if let Some(n) = next {
        let _ = write!(buf, ",\"next_after_seq\":{n}");
    }
    buf.push(b'}');
    let text = String::from_utf8(buf)
        .map_err(|e| AgentError::internal(format!("event page is not UTF-8: {e}")))?;
    serde_json::value::RawValue::from_string(text)
        .map_err(|e| AgentError::internal(format!("event page: {e}")))
}

async fn subscribe(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    api: Arc<Api>,
    ext: Extensions,
) {
    let p: SubscribeParams = match parse(&params) {
        Ok(p) => p,
        Err(e) => return pending.reject(error_object(&e)).await,
    };
    let handle: SessionHandle = match api.registry.get(&p.session_id).await {
        Ok(h) => h,
        Err(e) => return pending.reject(error_object(&e)).await,
    };
    if p.permissions {
        if let Some(peer) = ext.get::<PeerHandle>() {
            api.turns.add_permission_peer(&p.session_id, peer.clone());
        }
    }
    let (last_at_subscribe, streamed, mut rx) =
        match handle.read(Reads::Live, |st| st.subscribe()).await {
            Ok(x) => x,
            Err(e) => return pending.reject(error_object(&e)).await,
        };
    let Ok(sink) = pending.accept().await else {
        return;
    };
    // The durable backlog in pages, so a subscriber from seq 0 of a large session does
    // not copy the whole Log at once; live events meanwhile wait in the broadcast ring.
    if let (Some(mut cursor), Some(upto)) = (p.after_seq.map(Some), last_at_subscribe) {
        loop {
            let (page, last) = match handle
                .read(Reads::After(cursor), move |st| {
                    st.backlog_page(cursor, upto, BACKLOG_PAGE, BACKLOG_PAGE_BYTES)
                })
                .await
            {
                Ok(page) => page,
                Err(_) => {
                    load_failed(&sink, &handle, &p.session_id).await;
                    return;
                }
            };
            let Some(last) = last else {
                break;
            };
            for raw in page {
                if sink.send_timeout(raw, SUBSCRIBER_STALL).await.is_err() {
                    return;
                }
            }
            cursor = Some(last);
        }
    }
    // Asked for events after a seq the session has not reached yet: the live events up
    // to that seq are not "after" it and are skipped.
    let skip_through = match (p.after_seq, last_at_subscribe) {
        (Some(a), Some(last)) if a > last => Some(a),
        (Some(a), None) => Some(a),
        _ => None,
    };
    // Joined mid-step: what the step streamed so far, as one delta each for reasoning
    // and text (`catch_up: true`), then the live deltas that follow it.
    if skip_through.is_none() {
        for (kind, text) in [
            (EventType::ReasoningDelta, &streamed.reasoning),
            (EventType::TextDelta, &streamed.text),
        ] {
            if text.is_empty() {
                continue;
            }
            let ev = json!({"session_id": &p.session_id, "ts": agentd_proto::event::now_ts(),
                            "type": kind.as_str(), "data": {"text": text, "catch_up": true}});
            let Ok(raw) = serde_json::value::to_raw_value(&ev) else {
                continue;
            };
            if sink.send_timeout(raw, SUBSCRIBER_STALL).await.is_err() {
                return;
            }
        }
    }
    let mut actor_stopped = false;
    // Why the subscription ends, when it is because the subscriber fell behind: the
    // `lagged` notice's data.
    let mut behind = None;
    loop {
        tokio::select! {
            _ = sink.closed() => break,
            // Subscribed while the session loaded (from its Log's tail) and the load
            // then failed: this actor will send nothing more.
            _ = handle.stopped(), if !actor_stopped => {
                actor_stopped = true;
                if load_failed(&sink, &handle, &p.session_id).await {
                    break;
                }
            }
            msg = rx.recv() => match msg {
                Ok(line) => {
                    if let Some(t) = skip_through {
                        #[derive(serde::Deserialize)]
                        struct SeqOnly {
                            seq: Option<u64>,
                        }
                        let seq = serde_json::from_str::<SeqOnly>(&line).ok().and_then(|s| s.seq);
                        if seq.is_some_and(|s| s <= t) {
                            continue;
                        }
                    }
                    let Ok(raw) = serde_json::value::RawValue::from_string(line.to_string()) else { continue };
                    // A subscriber that stops reading altogether is dropped after a
                    // while instead of holding its session loaded forever.
                    match sink.send_timeout(raw, SUBSCRIBER_STALL).await {
                        Ok(()) => {}
                        Err(jsonrpsee::SendTimeoutError::Timeout(_)) => {
                            behind = Some(json!({"missed": 1, "reason": "stalled"}));
                            break;
                        }
                        Err(_) => break,
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    behind = Some(json!({"missed": n}));
                    break;
                }
                Err(RecvError::Closed) => break,
            }
        }
    }
    if let Some(data) = behind {
        // The session is let go now; the notice waits until the subscriber reads again
        // (or its connection closes), so one that was only slow always learns it must
        // subscribe again from the last seq it has.
        drop(rx);
        drop(handle);
        let lagged = json!({"type": "lagged", "session_id": &p.session_id, "data": data});
        if let Ok(raw) = serde_json::value::to_raw_value(&lagged) {
            tokio::select! {
                _ = sink.send(raw) => {}
                _ = sink.closed() => {}
            }
        }
    }
}

/// When `handle`'s actor stopped because its load failed: tells the subscriber with a
/// `lagged` notice (`reason: "load_failed"`, the error's kind) so it subscribes again
/// from the last seq it has, which loads the session afresh or answers the error
/// (docs/protocol.md#sessions-and-events). Returns whether it did.
async fn load_failed(
    sink: &jsonrpsee::SubscriptionSink,
    handle: &SessionHandle,
    sid: &str,
) -> bool {
    let Some(err) = handle.load_error() else {
        return false;
    };
    let lagged = json!({"type": "lagged", "session_id": sid,
        "data": {"missed": 0, "reason": "load_failed", "kind": err.kind.as_str()}});
    if let Ok(raw) = serde_json::value::to_raw_value(&lagged) {
        let _ = sink
            .send_timeout(raw, std::time::Duration::from_secs(1))
            .await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::{self, Home};
    use agentd_proto::{Event, EventDraft};
    use serde_json::json;

    fn event(sid: &str, seq: u64, kind: &str, data: Value) -> Event {
        Event {
            id: format!("ev{seq:04}"),
            session_id: sid.to_string(),
            seq,
            ts: "2026-11-01T00:00:00.000000Z".into(),
            kind: kind.into(),
            data,
        }
    }

    /// Events pages, a subscriber's backlog and the jsonl export hand out each event
    /// exactly as its Log line reads: unknown types, key order (not sorted), escapes and
    /// non-ASCII text, large items the replay reads from the line, and events appended
    /// after the load.
    #[tokio::test]
    async fn events_pages_backlog_and_export_are_the_log_lines() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(&dir.path().join("home")).unwrap();
        let registry = Registry::open(home, Config::default()).unwrap();
        let sid = agentd_proto::session_id::generate();
        let big = "line \"quoted\" \\ tab\t é 😀\n".repeat(40);
        let loaded = [
            event(
                &sid,
                0,
                "session_started",
                json!({"workspace": dir.path(), "log_format": 1, "agentd_version": "t", "zeta": {"b": 1, "a": [2.5, null]}}),
            ),
            event(
                &sid,
                1,
                "future_type",
                json!({"z": 1, "y": {"k": "v"}, "a": true}),
            ),
            event(
                &sid,
                2,
                "user_message",
                json!({"text": big, "extra": {"z": 0, "a": 0}}),
            ),
            event(
                &sid,
                3,
                "tool_call",
                json!({"call_id": "c1", "name": "shell", "args": {"command": big, "b": 1, "a": 2}}),
            ),
            event(
                &sid,
                4,
                "tool_result",
                json!({"call_id": "c1", "ok": true, "output": big, "exit_code": 0}),
            ),
        ];
        let mut file: Vec<u8> = loaded.iter().flat_map(store::event_line).collect();
        let path = registry.home.log_path(&sid).unwrap();
        store::create_atomic(&path, |f| f.write_all(&file)).unwrap();
        registry.index_log(&sid).unwrap();
        let h = registry.get(&sid).await.unwrap();
        h.append(
            vec![
                EventDraft {
                    kind: "another_future_type".into(),
                    data: json!({"q": [1, {"y": 2, "x": 1}], "b": "é\u{1}"}),
                },
                EventDraft::new(
                    agentd_proto::EventType::AssistantMessage,
                    json!({"text": big, "z": 1, "a": 2}),
                ),
            ],
            None,
        )
        .await
        .unwrap();
        // The appended lines, as the Log now holds them.
        file = std::fs::read(&path).unwrap();
        let lines: Vec<&[u8]> = file
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 7);

        let want: Vec<String> = lines
            .iter()
            .map(|l| String::from_utf8(l.to_vec()).unwrap())
            .collect();
        let p = EventsParams {
            session_id: sid.clone(),
            after_seq: None,
            limit: Some(3),
            types: None,
            tail: None,
        };
        for (after, part, next) in [
            (None, &want[0..3], Some(2)),
            (Some(2), &want[3..6], Some(5)),
            (Some(5), &want[6..], None),
        ] {
            let q = EventsParams {
                after_seq: after,
                ..p.clone()
            };
            let page = h.query(move |st| events(st, &q)).await.unwrap().unwrap();
            let tail = next.map_or(String::new(), |n| format!(",\"next_after_seq\":{n}"));
            assert_eq!(
                page.get(),
                format!("{{\"events\":[{}]{tail}}}", part.join(",")),
                "events pages copy the Log lines"
            );
        }

        let only = EventsParams {
            types: Some(vec!["future_type".into(), "another_future_type".into()]),
            ..p.clone()
        };
        let page = h.query(move |st| events(st, &only)).await.unwrap().unwrap();
        assert_eq!(
            page.get(),
            format!("{{\"events\":[{},{}]}}", want[1], want[5])
        );

        let (backlog, last) = h
            .query(|st| st.backlog_page(None, 6, 100, 1 << 20))
            .await
            .unwrap();
        assert_eq!(last, Some(6));
        let backlog: Vec<&str> = backlog.iter().map(|r| r.get()).collect();
        assert_eq!(backlog, want, "a subscriber's backlog copies the Log lines");

        // Every stored event parses back to the event its line holds, and the replay
        // built from the lines carries the large texts whole.
        let parsed = h
            .query(|st| crate::history::stored::parse_all(&st.events))
            .await
            .unwrap();
        for (ev, line) in parsed.iter().zip(&want) {
            assert_eq!(&serde_json::to_string(ev).unwrap(), line);
        }
        let replay = h
            .query(|st| {
                st.fold
                    .replay(&crate::ops::replay_context(st, "auto", None))
            })
            .await
            .unwrap();
        let outputs: Vec<&str> = replay
            .items
            .iter()
            .filter_map(|i| match i {
                agentd_proto::replay::ReplayItem::FunctionCallOutput { output, .. } => {
                    Some(output.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(outputs, [big.as_str()]);

        let export = crate::verbs::export::export(
            &registry,
            agentd_proto::rpc::ExportParams {
                session_id: sid.clone(),
                format: "jsonl".into(),
                output_path: None,
                install: None,
            },
        )
        .await
        .unwrap();
        assert_eq!(
            export.content.as_deref().map(str::as_bytes),
            Some(&file[..])
        );
    }
}
