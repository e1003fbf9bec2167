//! The `task` tool (docs/subagents.md): a sub-job handed to a child session, whose
//! final answer becomes the call's result.
//!
//! A `task` call creates a child session in the parent's workspace, recorded in its
//! `session_started` as `relation: "subagent"` with `parent_session_id`,
//! `parent_call_id`, `parent_turn_id` and `subagent_depth`; its sandbox request is the
//! parent session's and its turn runs with the parent turn's `sandbox` (grants the
//! parent's user approved for the session are not carried over: the child is never
//! wider). It then runs one turn there with `prompt` as the user message, admitted with
//! the `client_request_id` `task:<call id>`. The child's final text is the call's
//! `tool_result` (capped like any tool output), with `subagent: {session_id, turn_id,
//! status}` in its data.
//!
//! Exactly one child per call, also across crashes: the child is looked up by
//! (`parent_session_id`, `parent_call_id`) in the lineage index before one is created,
//! and its turn is admitted idempotently. A parent turn resumed after a crash runs its
//! pending `task` calls again (they count as replay-safe): each finds its child, whose
//! own turn resumes like any other, and waits for that turn's answer.
//!
//! The calls of one model step start together, at most `[subagents] max_parallel` at a
//! time; their results are recorded in call order. Interrupting the parent interrupts
//! the running children (reason `parent_interrupted`).

use super::permission::PermissionMode;
use super::TurnManager;
use crate::session::SessionHandle;
use crate::tools::{self, ToolContext, ToolOutcome};
use agentd_proto::event::{new_event_id, now_ts};
use agentd_proto::replay::ToolSpec;
use agentd_proto::rpc::{TurnParams, TurnResult};
use agentd_proto::{AgentError, ErrorKind, Event, EventType};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const TOOL_NAME: &str = "task";
/// The `relation` of a child session in its `session_started`.
pub const RELATION: &str = "subagent";
/// The interrupt reason a parent's interrupt hands its children.
pub const PARENT_INTERRUPTED: &str = "parent_interrupted";
/// Characters of a `prompt` a `task` call may carry.
const MAX_PROMPT_CHARS: usize = 64 * 1024;

/// The `task` tool's spec.
pub fn tool_spec() -> ToolSpec {
    ToolSpec {
        name: TOOL_NAME.into(),
        description: "Hand a self-contained sub-job to a subagent: a fresh session in the same \
            workspace that sees only `prompt` (not this conversation), works with the same \
            tools, and answers with one final message, which is what this call returns. Use \
            it to keep this context small: searching a large codebase, reading many files, \
            a focused investigation. Write `prompt` as a complete brief: the goal, what to \
            look at, and what the answer must contain. Several task calls in one step run in \
            parallel."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "minLength": 1,
                    "description": "The whole brief for the subagent."},
                "title": {"type": ["string", "null"],
                    "description": "A short title for the subagent's session (null: from the prompt)."},
                "model": {"type": ["string", "null"],
                    "description": "Model for the subagent (null: this session's)."},
                "permission_mode": {"type": ["string", "null"], "enum": ["auto", "ask", "read_only", null],
                    "description": "The subagent's permission mode; never wider than this session's (null: this session's)."},
            },
            "required": ["prompt"],
            "additionalProperties": false,
        }),
    }
}

/// The session's subagent depth: `subagent_depth` of its `session_started` (0 for a
/// session no `task` call created).
pub(super) async fn depth(h: &SessionHandle) -> u32 {
    h.query(|st| {
        st.events
            .first()
            .map(|e| e.event())
            .and_then(|e| e.data.get("subagent_depth").and_then(Value::as_u64))
            .unwrap_or(0)
    })
    .await
    .unwrap_or(0)
    .min(u64::from(u32::MAX)) as u32
}

/// The tools a turn of `h` is offered beyond the built-ins: `task` below
/// `[subagents] max_depth`, `goal_complete` while a goal is open (docs/goals.md).
pub(super) async fn extra_specs(turns: &TurnManager, h: &SessionHandle) -> Vec<ToolSpec> {
    let max_depth = turns.registry.config.subagents.max_depth;
    let (depth, goal) = h
        .query(|st| {
            let depth = st
                .events
                .first()
                .map(|e| e.event())
                .and_then(|e| e.data.get("subagent_depth").and_then(Value::as_u64))
                .unwrap_or(0);
            (depth, super::goal::open(st).is_some())
        })
        .await
        .unwrap_or((u64::MAX, false));
    let mut out = Vec::new();
    if depth < u64::from(max_depth) {
        out.push(tool_spec());
    }
    if goal {
        out.push(super::goal::tool_spec());
    }
    out
}

/// The parent turn the `task` calls of one step belong to.
#[derive(Clone)]
pub(super) struct Parent {
    pub h: SessionHandle,
    pub turn_id: String,
    pub cancel: CancellationToken,
    pub permission_mode: PermissionMode,
    pub tools: ToolContext,
}

/// The `task` calls of one model step, started together.
#[derive(Default)]
pub(super) struct Tasks {
    running: HashMap<String, JoinHandle<Value>>,
}

impl Tasks {
    /// Starts every `task` call among `calls` (at most `[subagents] max_parallel` at a
    /// time); the others are left to the caller.
    pub fn start(
        turns: &Arc<TurnManager>,
        calls: &[(String, String, Value)],
        parent: impl FnOnce() -> Parent,
    ) -> Tasks {
        let mut out = Tasks::default();
        let mine: Vec<_> = calls.iter().filter(|(_, n, _)| n == TOOL_NAME).collect();
        if mine.is_empty() {
            return out;
        }
        let parent = parent();
        let slots = Arc::new(Semaphore::new(
            turns.registry.config.subagents.max_parallel.max(1),
        ));
        for (call_id, _, args) in mine {
            let (turns, parent, slots) = (turns.clone(), parent.clone(), slots.clone());
            let (call_id2, args) = (call_id.clone(), args.clone());
            let handle = tokio::spawn(async move {
                let _slot = tokio::select! {
                    s = slots.acquire_owned() => s.ok(),
                    _ = parent.cancel.cancelled() => None,
                };
                if parent.cancel.is_cancelled() {
                    return ToolOutcome::failure(AgentError::new(
                        ErrorKind::Interrupted,
                        "the turn was interrupted before the subagent started",
                    ))
                    .into_result_data(&call_id2);
                }
                run(&turns, &parent, &call_id2, &args).await
            });
            out.running.insert(call_id.clone(), handle);
        }
        out
    }

    /// The `tool_result` data of the `task` call `call_id`, once its child answered.
    pub async fn result(&mut self, call_id: &str) -> Value {
        match self.running.remove(call_id) {
            Some(h) => h.await.unwrap_or_else(|e| {
                ToolOutcome::failure(AgentError::internal(format!("the task call failed: {e}")))
                    .into_result_data(call_id)
            }),
            None => ToolOutcome::failure(AgentError::internal("the task call was not started"))
                .into_result_data(call_id),
        }
    }
}

/// The arguments of a `task` call, checked.
struct TaskArgs {
    prompt: String,
    title: Option<String>,
    model: Option<String>,
    permission_mode: PermissionMode,
}

fn parse_args(args: &Value, parent_mode: PermissionMode) -> Result<TaskArgs, AgentError> {
    let text = |k: &str| -> Result<Option<String>, AgentError> {
        match args.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(AgentError::invalid_args(format!("`{k}` must be a string"))
                .with_details(json!({"field": k}))),
        }
    };
    let prompt = text("prompt")?.unwrap_or_default();
    if prompt.trim().is_empty() {
        return Err(
            AgentError::invalid_args("`prompt` must be a non-empty string")
                .with_details(json!({"field": "prompt"})),
        );
    }
    if prompt.chars().count() > MAX_PROMPT_CHARS {
        return Err(AgentError::invalid_args(format!(
            "`prompt` is over {MAX_PROMPT_CHARS} characters"
        ))
        .with_details(json!({"field": "prompt"})));
    }
    let mode = PermissionMode::parse(text("permission_mode")?.as_deref())
        .map_err(|e| e.with_details(json!({"field": "permission_mode"})))?
        .unwrap_or(parent_mode);
    if rank(mode) > rank(parent_mode) {
        return Err(AgentError::new(
            ErrorKind::PermissionDenied,
            format!(
                "a subagent's permission mode may not be wider than this session's (`{}`)",
                parent_mode.as_str()
            ),
        )
        .with_details(json!({"field": "permission_mode", "parent": parent_mode.as_str()})));
    }
    let title = text("title")?
        .map(|t| crate::text::clip_chars(t.trim(), 120).to_string())
        .filter(|t| !t.is_empty());
    let model = text("model")?.filter(|m| !m.trim().is_empty());
    Ok(TaskArgs {
        prompt,
        title,
        model,
        permission_mode: mode,
    })
}

/// How much a permission mode allows: `read_only` < `ask` < `auto`.
fn rank(m: PermissionMode) -> u8 {
    match m {
        PermissionMode::ReadOnly => 0,
        PermissionMode::Ask => 1,
        PermissionMode::Auto => 2,
    }
}

/// The `client_request_id` of the child turn of the call `call_id`.
fn request_id(call_id: &str) -> String {
    let printable = call_id.len() <= 100 && call_id.bytes().all(|b| (0x21..0x7f).contains(&b));
    if printable {
        format!("task:{call_id}")
    } else {
        format!(
            "task:{}",
            &crate::text::sha256_hex(call_id.as_bytes())[..40]
        )
    }
}

/// Runs one `task` call to its `tool_result` data.
async fn run(turns: &Arc<TurnManager>, parent: &Parent, call_id: &str, args: &Value) -> Value {
    match run_inner(turns, parent, call_id, args).await {
        Ok(v) => v,
        Err(e) => ToolOutcome::failure(e).into_result_data(call_id),
    }
}

async fn run_inner(
    turns: &Arc<TurnManager>,
    parent: &Parent,
    call_id: &str,
    args: &Value,
) -> Result<Value, AgentError> {
    let a = parse_args(args, parent.permission_mode)?;
    let depth = depth(&parent.h).await + 1;
    let max_depth = turns.registry.config.subagents.max_depth;
    if depth > max_depth {
        return Err(AgentError::new(
            ErrorKind::PermissionDenied,
            format!(
                "subagents may not start subagents beyond depth {max_depth} ([subagents] max_depth)"
            ),
        )
        .with_details(json!({"reason": "max_depth", "max_depth": max_depth})));
    }
    let tid = parent.turn_id.clone();
    let (workspace, params, session) = parent
        .h
        .query(move |st| {
            let first = st.events.first().map(|e| e.event());
            let started = st
                .events
                .iter()
                .rev()
                .find(|e| {
                    e.event_type() == EventType::TurnStarted
                        && e.str_field("turn_id").as_deref() == Some(tid.as_str())
                })
                .map(|e| e.event());
            (
                st.workspace().to_string(),
                started
                    .and_then(|e| e.data.get("params").cloned())
                    .unwrap_or_default(),
                first.map(|e| e.data).unwrap_or_default(),
            )
        })
        .await?;
    let child = find_or_create(turns, parent, call_id, &a, &workspace, &session, depth).await?;
    let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_string);
    // An explicit model is the child's choice alone; else the parent turn's request.
    let (provider, model) = match &a.model {
        Some(m) => (None, Some(m.clone())),
        None => (text("provider"), text("model")),
    };
    let p = TurnParams {
        session_id: child.clone(),
        input: a.prompt.clone(),
        model,
        provider,
        max_iterations: None,
        permission_mode: Some(a.permission_mode.as_str().to_string()),
        wait: Some(true),
        sandbox: params.get("sandbox").cloned(),
        mcp_servers: None,
        client_request_id: Some(request_id(call_id)),
        queue: None,
        reasoning_effort: text("reasoning_effort"),
        images: Vec::new(),
    };
    let result = run_child(turns, &child, p, &parent.cancel).await?;
    Ok(result_data(call_id, &child, result, &parent.tools))
}

/// A subagent's parent as its `session_started` records it (`None` for any other
/// session): the fields a `subagent_stop` hook gets on stdin (docs/hooks.md).
pub fn parent_fields(started: &Event) -> Option<Value> {
    if started.data.get("relation").and_then(Value::as_str) != Some(RELATION) {
        return None;
    }
    let keep = [
        "parent_session_id",
        "parent_call_id",
        "parent_turn_id",
        "subagent_depth",
    ];
    let fields: serde_json::Map<String, Value> = keep
        .iter()
        .filter_map(|k| Some((k.to_string(), started.data.get(*k)?.clone())))
        .collect();
    Some(Value::Object(fields))
}

/// The child of the call `call_id`, or a new one.
async fn find_or_create(
    turns: &Arc<TurnManager>,
    parent: &Parent,
    call_id: &str,
    a: &TaskArgs,
    workspace: &str,
    session: &Value,
    depth: u32,
) -> Result<String, AgentError> {
    let registry = &turns.registry;
    let psid = parent.h.id.to_string();
    let known = registry.with_index(|i| {
        i.values()
            .find(|m| {
                m.relation.as_deref() == Some(RELATION)
                    && m.parent_session_id.as_deref() == Some(psid.as_str())
                    && m.parent_call_id.as_deref() == Some(call_id)
                    && !m.deleted
            })
            .map(|m| m.session_id.clone())
    });
    if let Some(sid) = known {
        return Ok(sid);
    }
    let sid = agentd_proto::session_id::generate();
    let title = a.title.clone().unwrap_or_else(|| {
        let first = a
            .prompt
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        crate::text::clip_chars(first.trim(), 80).to_string()
    });
    let mut data = json!({
        "workspace": workspace,
        "agentd_version": env!("CARGO_PKG_VERSION"),
        "log_format": 1,
        "created_by": "task",
        "title": title,
        "relation": RELATION,
        "parent_session_id": psid,
        "parent_call_id": call_id,
        "parent_turn_id": parent.turn_id,
        "subagent_depth": depth,
    });
    for k in ["provider", "model", "sandbox"] {
        if let Some(v) = session.get(k) {
            data[k] = v.clone();
        }
    }
    let ev = Event {
        id: new_event_id(),
        session_id: sid.clone(),
        seq: 0,
        ts: now_ts(),
        kind: EventType::SessionStarted.as_str().into(),
        data,
    };
    let line = crate::store::event_line(&ev);
    let store = registry.store.clone();
    let sid2 = sid.clone();
    tokio::task::spawn_blocking(move || {
        store.create(&sid2, &mut |f| std::io::Write::write_all(f, &line))
    })
    .await
    .map_err(|e| AgentError::internal(format!("create task: {e}")))??;
    registry.index_new_log(&sid).await?;
    Ok(sid)
}

type TurnFuture = Pin<Box<dyn Future<Output = Result<TurnResult, AgentError>> + Send>>;

/// Runs the child's turn to its end; the parent's interrupt interrupts it.
async fn run_child(
    turns: &Arc<TurnManager>,
    child: &str,
    p: TurnParams,
    cancel: &CancellationToken,
) -> Result<TurnResult, AgentError> {
    // Boxed: the child's turn runs the engine that runs this.
    let mut fut: TurnFuture = {
        let turns = turns.clone();
        Box::pin(async move { turns.turn(p).await })
    };
    tokio::select! {
        r = &mut fut => return r,
        _ = cancel.cancelled() => {}
    }
    // Until the child's turn has ended: it may not have claimed its slot yet when the
    // first interrupt arrives.
    loop {
        if turns.is_running(child) {
            let _ = turns.interrupt(child, Some(PARENT_INTERRUPTED)).await;
        }
        tokio::select! {
            r = &mut fut => return r,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

/// The call's `tool_result` data from the child turn's result.
fn result_data(call_id: &str, child: &str, r: TurnResult, ctx: &ToolContext) -> Value {
    let text = if r.output_text.is_empty() {
        "(the subagent ended without a final message)".to_string()
    } else {
        r.output_text.clone()
    };
    let outcome = if r.status == "completed" {
        tools::with_output(
            ToolOutcome::success(String::new()),
            &text,
            text.as_bytes(),
            ctx,
        )
    } else {
        let (kind, why) = match &r.error {
            Some(e) => (e.kind, e.message.clone()),
            None if r.status == "interrupted" => (
                ErrorKind::Interrupted,
                r.reason.clone().unwrap_or_else(|| "interrupted".into()),
            ),
            None => (ErrorKind::Internal, r.status.clone()),
        };
        let mut o = ToolOutcome::failure(
            AgentError::new(
                kind,
                format!("the subagent's turn ended {}: {why}", r.status),
            )
            .with_details(json!({"session_id": child, "status": r.status})),
        );
        if !r.output_text.is_empty() {
            o = tools::with_output(o, &r.output_text, r.output_text.as_bytes(), ctx);
        }
        o
    };
    let mut data = outcome.into_result_data(call_id);
    data["subagent"] = json!({"session_id": child, "turn_id": r.turn_id, "status": r.status});
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_never_wider_than_its_parent() {
        let a = parse_args(&json!({"prompt": "x"}), PermissionMode::Ask).unwrap();
        assert_eq!(a.permission_mode, PermissionMode::Ask);
        let a = parse_args(
            &json!({"prompt": "x", "permission_mode": "read_only"}),
            PermissionMode::Ask,
        )
        .unwrap();
        assert_eq!(a.permission_mode, PermissionMode::ReadOnly);
        let e = parse_args(
            &json!({"prompt": "x", "permission_mode": "auto"}),
            PermissionMode::ReadOnly,
        )
        .err()
        .unwrap();
        assert_eq!(e.kind, ErrorKind::PermissionDenied);
        let e = parse_args(&json!({"prompt": "  "}), PermissionMode::Auto)
            .err()
            .unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
        let e = parse_args(&json!({"prompt": 7}), PermissionMode::Auto)
            .err()
            .unwrap();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
    }

    #[test]
    fn request_ids_are_valid_client_request_ids() {
        assert_eq!(request_id("call_1"), "task:call_1");
        let long = "x".repeat(300);
        let id = request_id(&long);
        assert!(agentd_proto::rpc::validate_client_request_id(&id).is_ok());
        assert!(agentd_proto::rpc::validate_client_request_id(&request_id("a b\u{e9}")).is_ok());
    }
}
