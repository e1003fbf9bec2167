//! The turn loop (docs/turns-and-providers.md#turns):
//!
//! reconcile (`before_start_turn`) → `turn_started{turn_id, model, provider}` →
//! `user_message{text}` → up to `max_iterations` times { pressure check (maybe compact)
//! → provider call, streamed (deltas go to subscribers as ephemeral events) →
//! `provider_usage` → `reasoning` / `assistant_message` / `tool_call`s in the provider's
//! order, in one append → per call: permission, run, `tool_result` } until a step has no
//! tool calls → `turn_ended`.
//!
//! Endings:
//! - the model answers without tool calls → `completed`;
//! - `max_iterations` provider calls all asked for tools → `completed` with
//!   `reason:"max_iterations"` (the tools of the last step did run; the model did not
//!   see their results);
//! - a provider failure → its partial text (if any) as `assistant_message{text,
//!   metadata{partial:true, error_kind}}`, then `failed` (or `timed_out` for kind
//!   `timeout`) with `error{kind, message}`; `context_overflow` first compacts with tails
//!   40, 20, 10, 5 (`trigger:"overflow_recovery"`, a tail that compacts nothing is
//!   skipped) and retries after each;
//! - an interrupt → partial text as above (`error_kind:"interrupted"`), the result of the
//!   tool that was running (it answers `interrupted`), then in one append orphan closures
//!   (`reason:"interrupt"`) for calls that never ran and `turn_ended{interrupted, reason}`.
//!
//! MCP tools (docs/mcp.md#contract): the session's servers start after `user_message` (a failure
//! is recorded in `mcp_servers{servers, failed}` and fails the turn only for a
//! `required` server); their tools are listed again before every provider call (so a
//! `list_changed` takes effect there, never mid-call) and offered after the built-ins
//! under their mangled names; a `tool_call` of one carries `mcp: {server, tool}` and is
//! durable before `tools/call` is sent; the server's content becomes the `tool_result`
//! (`ok = !isError`, text capped like built-ins, images and blobs stored as resources);
//! its progress notifications are published as ephemeral `status{call_id, mcp_progress}`.
//!
//! Tool results are appended one call at a time, in call order, as each call finishes,
//! so a crash mid-step loses only the call that was running (closed on restart).
//!
//! Context pressure: `stats.estimated_tokens` of the replay (characters / 4) is corrected
//! by the ratio `input_tokens / estimated_tokens` of the latest provider call (kept in
//! `provider_usage.data.estimated_tokens` so the ratio survives restarts; 1.0 until a
//! call was made, clamped to 0.25..=4). When the corrected estimate exceeds
//! `compaction.threshold × context_window`, the turn compacts with
//! `compaction.tail_events` raw events kept and `trigger:"pressure"`, then rebuilds the
//! input; if it is still over, the call goes ahead (the provider's own overflow error
//! then triggers recovery). `context_pressure{estimated_tokens, context_window,
//! pressure}` is published before every call.

use super::permission::{self, Ask, McpCall};
use super::setup::TurnSpec;
use super::{RunningTurn, Started, TurnManager};
use crate::history::compaction::{CompactOptions, CompactStrategy, Trigger};
use crate::history::memory::{self, EvidenceLookup};
use crate::history::reconcile::{self, ReconcileReason};
use crate::history::replay::ReplayStats;
use crate::provider::{
    OutputItem, ProviderFailure, ProviderRequest, ProviderResponse, StreamEvent,
};
use crate::session::{SessionHandle, SessionState};
use crate::tools::{self, ToolContext, ToolOutcome};
use agentd_proto::replay::ReplayItem;
use agentd_proto::rpc::{AppendResult, TurnResult};
use agentd_proto::{AgentError, ErrorKind, EventDraft, EventType};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Tails tried, in order, when the provider reports a context overflow.
pub const OVERFLOW_TAILS: [usize; 4] = [40, 20, 10, 5];
const RATIO_MIN: f64 = 0.25;
const RATIO_MAX: f64 = 4.0;
const DELTA_QUEUE: usize = 256;

enum End {
    /// `reason` (`max_iterations`) and the last step's limiting stop reason, if any.
    Completed(Option<&'static str>, Option<&'static str>),
    Failed(AgentError),
    Interrupted,
}

/// How a turn ended, as its response reports it.
#[derive(Default)]
struct Ended {
    status: &'static str,
    error: Option<AgentError>,
    /// Call ids an interrupt closed.
    reconciled: Vec<String>,
    stop: Option<&'static str>,
    reason: Option<&'static str>,
}

struct Runner<'a> {
    turns: &'a Arc<TurnManager>,
    h: &'a SessionHandle,
    sid: String,
    spec: TurnSpec,
    turn_id: String,
    cancel: CancellationToken,
    tools: ToolContext,
    workspace: String,
    /// Correction applied to the replay's token estimate (see the module doc).
    ratio: f64,
    last_seq: u64,
    snapshots: crate::undo::TurnSnapshots,
    /// The session's MCP servers, when it has any.
    mcp: Option<Arc<agentd_mcp::Manager>>,
    /// MCP tools offered at the latest provider call.
    mcp_offered: Vec<agentd_mcp::Offered>,
    /// Provider calls this turn may still make (fewer than `max_iterations` for a
    /// resumed turn that already made some).
    iterations_left: u32,
    /// Times this turn was resumed after a crash (written on `turn_ended` when > 0).
    resumed: u32,
    /// Where `agentd/steer` inputs wait for the next provider call.
    running: Arc<RunningTurn>,
    /// The hooks this turn runs (docs/hooks.md).
    hooks: Arc<crate::hooks::Hooks>,
    /// The session is a subagent's (its parent's ids): its turn end fires
    /// `subagent_stop`, not `stop`.
    subagent: Option<serde_json::Value>,
}

/// How a turn begins: a new prompt, or a turn a crash left open (docs/durability.md).
pub(super) enum Start {
    New {
        input: String,
        /// Fields added to `turn_started` (`client_request_id`, `request_hash`, the
        /// request's `params` a resume runs with again).
        record: Value,
    },
    Resume,
}

/// Runs a whole turn; returns its result and the call ids an interrupt closed.
/// One step's provider input (items, or their rendering when the provider takes that)
/// and the replay's stats.
struct StepInput {
    items: Vec<ReplayItem>,
    rendered: Option<Vec<bytes::Bytes>>,
    stats: ReplayStats,
}

pub(super) async fn run(
    turns: &Arc<TurnManager>,
    h: &SessionHandle,
    spec: TurnSpec,
    start: Start,
    running: &Arc<RunningTurn>,
    started: Started,
) -> Result<(TurnResult, Vec<String>), AgentError> {
    let sid = h.id.to_string();
    let resuming = matches!(start, Start::Resume);
    let begin = async {
        if !resuming {
            crate::ops::reconcile(h, ReconcileReason::BeforeStartTurn, false, true).await?;
        }
        h.set_running_turn(Some(running.turn_id.clone())).await?;
        let (workspace, ratio, deps, session_grants, (first, subagent)) = h
            .query(move |st| {
                (
                    st.workspace().to_string(),
                    usage_ratio(st),
                    st.checkpoint.fact_dependency_uris(),
                    super::commands::session_grants(st),
                    hook_facts(st),
                )
            })
            .await?;
        let tools = super::commands::tool_context(
            &turns.registry,
            &sid,
            workspace.clone(),
            &spec,
            &running.cancel,
            session_grants,
        )
        .await?;
        let hooks = {
            let cfg = turns.registry.config.hooks.clone();
            let home = turns.registry.home.root().to_path_buf();
            let ws = tools.workspace.clone();
            Arc::new(
                crate::filesystem::blocking(move || crate::hooks::Hooks::load(&cfg, &home, &ws))
                    .await?,
            )
        };
        let res = match start {
            Start::New { input, record } => {
                let mut data = turn_started_data(&running.turn_id, &spec, &tools);
                if let (Some(d), Some(extra)) = (data.as_object_mut(), record.as_object()) {
                    d.extend(extra.clone());
                }
                // A resumed turn keeps what its start recorded.
                let instructions =
                    super::instructions::draft(h, &tools.paths, &tools.workspace, &running.turn_id)
                        .await?;
                // `session_start` and `user_prompt_submit` hooks: recorded ahead of
                // the turn (their context goes before the prompt); a refusal records
                // only them and fails the request with kind `hook_blocked`.
                let at = crate::hooks::At {
                    session_id: &sid,
                    turn_id: Some(&running.turn_id),
                    permission_mode: spec.permission_mode.as_str(),
                    tools: &tools,
                };
                let fired = hooks.before_prompt(first, &input, &at).await;
                let mut drafts = fired.drafts;
                for d in &mut drafts {
                    tools::redact_value(&mut d.data, &spec.secrets);
                }
                if let Some(b) = fired.blocked {
                    h.append(drafts, None).await?;
                    return Err(crate::hooks::refusal(b));
                }
                drafts.push(EventDraft::new(EventType::TurnStarted, data));
                drafts.extend(instructions);
                let mut user = json!({"text": input});
                if !spec.images.is_empty() {
                    let (dir, images) = (tools.resources_dir.clone(), spec.images.clone());
                    let store = turns.registry.store.clone();
                    user["images"] = crate::filesystem::blocking(move || {
                        super::images::store(&dir, &*store, &images)
                    })
                    .await??;
                } else if let Some(refs) = &spec.stored_images {
                    user["images"] = refs.clone();
                }
                drafts.push(EventDraft::new(EventType::UserMessage, user));
                h.append(drafts, None).await?
            }
            Start::Resume => {
                let (first, last) = h
                    .query({
                        let tid = running.turn_id.clone();
                        move |st| (turn_started_seq(st, &tid), st.last_seq().unwrap_or(0))
                    })
                    .await?;
                AppendResult {
                    first_seq: first.unwrap_or(last),
                    last_seq: last,
                    ids: Vec::new(),
                }
            }
        };
        for uri in deps {
            turns.watch.watch(&turns.registry, &sid, &workspace, &uri);
        }
        Ok::<_, AgentError>((workspace, ratio, tools, res, hooks, subagent))
    };
    let (workspace, ratio, tools, res, hooks, subagent) = match begin.await {
        Ok(v) => v,
        Err(e) => {
            let _ = started.send(Err(e.clone()));
            return Err(e);
        }
    };
    let _ = started.send(Ok((res.first_seq, res.last_seq)));
    let snapshots = crate::undo::TurnSnapshots::new(
        turns.registry.home.root(),
        &workspace,
        &turns.registry.config.snapshots,
    );
    let mut r = Runner {
        turns,
        snapshots,
        h,
        sid,
        spec,
        turn_id: running.turn_id.clone(),
        cancel: running.cancel.clone(),
        tools,
        workspace,
        ratio,
        last_seq: res.last_seq,
        mcp: None,
        mcp_offered: Vec::new(),
        iterations_left: 0,
        resumed: 0,
        running: running.clone(),
        hooks,
        subagent,
    };
    r.iterations_left = r.spec.max_iterations;
    let mut output_text = String::new();
    let started_mcp = r.start_mcp().await;
    let started_mcp = match started_mcp {
        Ok(None) if resuming => r.resume().await,
        other => other,
    };
    let end = match started_mcp {
        Ok(Some(end)) => Ok(end),
        Ok(None) => r.iterate(&mut output_text).await,
        Err(e) => Err(e),
    };
    let end = match end {
        Ok(end) => end,
        Err(e) if r.cancel.is_cancelled() => {
            tracing::debug!(error = %e, "turn step failed after an interrupt");
            End::Interrupted
        }
        Err(e) => End::Failed(e),
    };
    let ended = r.finish(end, running).await?;
    Ok((
        TurnResult {
            turn_id: r.turn_id.clone(),
            status: ended.status.to_string(),
            output_text,
            first_seq: res.first_seq,
            last_seq: r.last_seq,
            error: ended.error,
            stop_reason: ended.stop.map(str::to_string),
            reason: ended.reason.map(str::to_string),
        },
        ended.reconciled,
    ))
}

/// For hooks: whether the next turn is the session's first (no `turn_started` yet and
/// no `session_start` hook ran: `session_start` fires once), and, when the session is
/// a subagent's (`session_started.relation`), its parent's ids for `subagent_stop`.
fn hook_facts(st: &SessionState) -> (bool, Option<serde_json::Value>) {
    let mut first = true;
    let mut subagent = None;
    for e in st.events.iter() {
        match e.event_type() {
            EventType::SessionStarted => {
                subagent = super::subagent::parent_fields(&e.event());
            }
            EventType::TurnStarted => first = false,
            EventType::HookRun if e.str_field("event").as_deref() == Some("session_start") => {
                first = false
            }
            _ => {}
        }
        if !first {
            break;
        }
    }
    (first, subagent)
}

/// `turn_started` data: the turn, its model, and the effective sandbox policy its
/// commands run under (recorded each turn, so every change is in the Log).
fn turn_started_data(turn_id: &str, spec: &TurnSpec, tools: &ToolContext) -> serde_json::Value {
    let mut d = json!({"turn_id": turn_id, "model": spec.model, "provider": spec.provider_name(),
        "base_prompt": crate::prompt::record()});
    if let Some(e) = &spec.reasoning_effort {
        d["reasoning_effort"] = json!(e);
    }
    if let Some(sb) = &tools.sandbox {
        d["sandbox"] = sb.policy.to_record();
    }
    d
}

/// Seq of `turn_id`'s `turn_started` (searched from the end: the turn is the latest).
pub(super) fn turn_started_seq(st: &SessionState, turn_id: &str) -> Option<u64> {
    st.events
        .iter()
        .rev()
        .find(|e| {
            e.event_type() == EventType::TurnStarted
                && e.str_field("turn_id").as_deref() == Some(turn_id)
        })
        .map(|e| e.seq)
}

/// What a resume needs to know of the turn so far (docs/durability.md).
struct ResumeState {
    /// `turn_resumed` events of the turn.
    resumed: u32,
    /// Resumes since the turn's latest provider answer (`provider_usage`).
    without_progress: u32,
    /// Provider answers the turn already recorded.
    provider_calls: u32,
    /// Calls without a result: (call_id, name, args), in call order.
    pending: Vec<(String, String, Value)>,
}

fn resume_state(st: &SessionState, turn_id: &str) -> ResumeState {
    let from = turn_started_seq(st, turn_id).unwrap_or(0);
    let mut rs = ResumeState {
        resumed: 0,
        without_progress: 0,
        provider_calls: 0,
        pending: Vec::new(),
    };
    for e in st.events_after(from.checked_sub(1)) {
        match e.event_type() {
            EventType::TurnResumed => {
                rs.resumed += 1;
                rs.without_progress += 1;
            }
            EventType::ProviderUsage => {
                rs.provider_calls += 1;
                rs.without_progress = 0;
            }
            _ => {}
        }
    }
    let mut pending = st.fold.pending_calls();
    pending.sort_by_key(|p| p.seq);
    for p in pending {
        let args = st
            .events_after(p.seq.checked_sub(1))
            .first()
            .filter(|e| e.seq == p.seq)
            .and_then(|e| e.event().data.get("args").cloned())
            .unwrap_or_else(|| json!({}));
        rs.pending.push((p.call_id, p.name, args));
    }
    rs
}

/// The estimate correction from the latest `provider_usage` that recorded its estimate.
fn usage_ratio(st: &SessionState) -> f64 {
    st.events
        .iter()
        .rev()
        .take(4096)
        .find(|e| e.event_type() == EventType::ProviderUsage)
        .map(|e| e.event())
        .and_then(|e| {
            let est = e.data.get("estimated_tokens")?.as_u64()?;
            let input = e.data.get("usage")?.get("input_tokens")?.as_u64()?;
            ratio(input, est)
        })
        .unwrap_or(1.0)
}

fn ratio(input_tokens: u64, estimated: u64) -> Option<f64> {
    (input_tokens > 0 && estimated > 0)
        .then(|| (input_tokens as f64 / estimated as f64).clamp(RATIO_MIN, RATIO_MAX))
}

/// `corrected estimate / window`, rounded to 4 places for stable output.
fn pressure(tokens: u64, window: u64) -> f64 {
    ((tokens as f64 / window.max(1) as f64) * 10_000.0).round() / 10_000.0
}

impl Runner<'_> {
    /// Appends the step's events, scrubbed of the provider keys (`spec.secrets`): tool
    /// output can carry one (a command reading agentd's environment, a file), and so
    /// can model text or call args that echo it.
    async fn append(&mut self, mut drafts: Vec<EventDraft>) -> Result<AppendResult, AgentError> {
        for d in &mut drafts {
            tools::redact_value(&mut d.data, &self.spec.secrets);
        }
        let res = self.h.append(drafts, None).await?;
        self.last_seq = self.last_seq.max(res.last_seq);
        Ok(res)
    }

    /// Starts the session's MCP servers and records which it uses (names of env
    /// variables and headers, never values) and which failed. `Some(end)` when a
    /// `required` server failed.
    async fn start_mcp(&mut self) -> Result<Option<End>, AgentError> {
        let Some((manager, fresh, notes)) = self
            .turns
            .mcp
            .for_turn(&self.sid, &self.workspace, self.tools.sandbox.as_ref())
            .await
        else {
            return Ok(None);
        };
        let mut names: Vec<String> = Vec::new();
        let mut servers = Vec::new();
        for name in manager.server_names() {
            if let Some(cfg) = manager.config(&name) {
                // Values a client gave (env, headers) join the redaction set.
                // So do the token and header values read from the daemon's environment.
                let from_env = cfg
                    .bearer_token_env
                    .iter()
                    .chain(cfg.headers_env.values())
                    .filter_map(|var| std::env::var(var).ok());
                for v in cfg.secret_values().into_iter().chain(from_env) {
                    if v.len() >= tools::MIN_SECRET_LEN && !self.spec.secrets.contains(&v) {
                        self.spec.secrets.push(v);
                    }
                }
                servers.push(cfg.describe(&name));
            }
            names.push(name);
        }
        self.tools.redact = self.spec.secrets.clone();
        let failed = tokio::select! {
            f = manager.start() => f,
            _ = self.cancel.cancelled() => return Ok(Some(End::Interrupted)),
        };
        if fresh || !failed.is_empty() {
            // What the sandbox put in force, for each sandboxed server that started.
            for st in manager.status().await {
                if let (Some(facts), Some(d)) = (
                    st.sandbox,
                    servers.iter_mut().find(|d| d["name"] == st.name.as_str()),
                ) {
                    d["sandbox"] = facts;
                }
            }
            let mut data = json!({"turn_id": self.turn_id, "servers": servers});
            if !failed.is_empty() {
                data["failed"] = json!(failed
                    .iter()
                    .map(|f| json!({"server": f.server, "message": f.message, "required": f.required}))
                    .collect::<Vec<_>>());
            }
            if !notes.is_empty() {
                data["notes"] = json!(notes);
            }
            self.append(vec![EventDraft::new(EventType::McpServers, data)])
                .await?;
        }
        self.mcp = Some(manager);
        if let Some(f) = failed.iter().find(|f| f.required) {
            return Ok(Some(End::Failed(
                AgentError::new(
                    ErrorKind::Unsupported,
                    format!("a required MCP server did not start: {}", f.message),
                )
                .with_details(json!({"mcp_server": f.server})),
            )));
        }
        Ok(None)
    }

    /// The MCP tools as of now (a `list_changed` since the last call applies here).
    async fn refresh_mcp(&mut self) {
        if let Some(m) = &self.mcp {
            self.mcp_offered = m.tools().await;
        }
    }

    fn mcp_tool(&self, name: &str) -> Option<&agentd_mcp::Offered> {
        if !name.starts_with(agentd_mcp::names::PREFIX) {
            return None;
        }
        self.mcp_offered.iter().find(|o| o.name == name)
    }

    /// Picks up a turn a crash cut (docs/durability.md): ends it with kind
    /// `resume_limit` after `[turns] resume_limit` resumes without a provider answer;
    /// else records `turn_resumed` with the calls it runs again (replay-safe ones) and
    /// those it closes `outcome_unknown` (every other call, never run again), then runs
    /// the replay-safe calls. The provider step that was streaming is simply requested
    /// again by the loop: nothing of it was recorded.
    async fn resume(&mut self) -> Result<Option<End>, AgentError> {
        let tid = self.turn_id.clone();
        let rs = self.h.query(move |st| resume_state(st, &tid)).await?;
        let limit = self.turns.registry.config.turns.resume_limit;
        self.resumed = rs.resumed;
        self.iterations_left = self.spec.max_iterations.saturating_sub(rs.provider_calls);
        self.refresh_mcp().await;
        let (rerun, closed): (Vec<_>, Vec<_>) = rs
            .pending
            .into_iter()
            .partition(|(_, name, _)| self.replay_safe(name));
        let mut drafts = Vec::new();
        if rs.without_progress >= limit {
            for (call_id, name, _) in rerun.iter().chain(&closed) {
                let p = crate::history::fold::PendingCall {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    seq: 0,
                };
                drafts.push(reconcile::outcome_unknown(&p));
            }
            if !drafts.is_empty() {
                self.append(drafts).await?;
            }
            return Ok(Some(End::Failed(
                AgentError::new(
                    ErrorKind::ResumeLimit,
                    format!(
                        "the turn was resumed {} times after crashes without a provider answer; \
                         it ends here ([turns] resume_limit = {limit})",
                        rs.without_progress
                    ),
                )
                .with_details(json!({"resumed": rs.resumed, "resume_limit": limit})),
            )));
        }
        self.resumed += 1;
        let names = |v: &[(String, String, Value)]| {
            v.iter()
                .map(|(c, n, _)| json!({"call_id": c, "tool": n}))
                .collect::<Vec<_>>()
        };
        drafts.push(EventDraft::new(
            EventType::TurnResumed,
            json!({"turn_id": self.turn_id, "resumed": self.resumed,
                   "reason": ReconcileReason::DaemonRestart.as_str(),
                   "rerun": names(&rerun), "closed": names(&closed)}),
        ));
        for (call_id, name, _) in &closed {
            let p = crate::history::fold::PendingCall {
                call_id: call_id.clone(),
                name: name.clone(),
                seq: 0,
            };
            drafts.push(reconcile::outcome_unknown(&p));
        }
        self.append(drafts).await?;
        if !rerun.is_empty() && !self.run_tools(rerun).await? {
            return Ok(Some(End::Interrupted));
        }
        Ok(None)
    }

    /// Records the `agentd/steer` inputs waiting now as `user_message{text, steer:
    /// true, turn_id}` (one append, before the provider call they go with) and answers
    /// each with its seq.
    async fn record_steers(&mut self) -> Result<(), AgentError> {
        let steers = super::admission::unrecorded_steers(self.h, self.running.take_steers()).await;
        if steers.is_empty() {
            return Ok(());
        }
        let drafts = steers
            .iter()
            .map(|s| {
                let mut d = json!({"text": s.text, "steer": true, "turn_id": self.turn_id});
                if let Some(refs) = &s.images {
                    d["images"] = refs.clone();
                }
                if let Some((id, hash)) = &s.key {
                    d["client_request_id"] = json!(id);
                    d["request_hash"] = json!(hash);
                }
                EventDraft::new(EventType::UserMessage, d)
            })
            .collect();
        match self.append(drafts).await {
            Ok(res) => {
                for (i, s) in steers.into_iter().enumerate() {
                    let seq = res.first_seq + i as u64;
                    s.reply.send(Ok(AppendResult {
                        first_seq: seq,
                        last_seq: seq,
                        ids: res.ids.get(i).cloned().into_iter().collect(),
                    }));
                }
                Ok(())
            }
            Err(e) => {
                for s in steers {
                    s.reply.send(Err(e.clone()));
                }
                Err(e)
            }
        }
    }

    /// A call that may run again after a crash: a read-only built-in, or an MCP tool
    /// the user trusts read-only whose server declares `readOnlyHint`.
    fn replay_safe(&self, name: &str) -> bool {
        // A `task` call finds its child again and waits for its answer (docs/subagents.md).
        if reconcile::REPLAY_SAFE_TOOLS.contains(&name) || name == super::subagent::TOOL_NAME {
            return true;
        }
        self.mcp_tool(name)
            .is_some_and(|o| o.trusted_read_only && o.tool.read_only_hint())
    }

    async fn iterate(&mut self, output_text: &mut String) -> Result<End, AgentError> {
        for _ in 0..self.iterations_left {
            if self.cancel.is_cancelled() {
                return Ok(End::Interrupted);
            }
            self.record_steers().await?;
            self.refresh_mcp().await;
            let (resp, estimated) = match self.step().await? {
                Ok(v) => v,
                Err(f) => return self.provider_failed(f).await,
            };
            self.record_usage(&resp, estimated).await?;
            let calls = self.record_output(&resp).await?;
            let text = step_text(&resp);
            if !text.is_empty() {
                *output_text = text;
            }
            if calls.is_empty() {
                // Input steered in while this step ran goes with one more call.
                if self.running.has_steers() && !self.cancel.is_cancelled() {
                    continue;
                }
                let stop = crate::provider::limiting_stop(resp.stop_reason.as_deref());
                return Ok(End::Completed(None, stop));
            }
            if self.cancel.is_cancelled() {
                return Ok(End::Interrupted);
            }
            if !self.run_tools(calls).await? {
                return Ok(End::Interrupted);
            }
        }
        Ok(End::Completed(Some("max_iterations"), None))
    }

    /// The provider input as of now: rendered from the session's kept prefix
    /// (`crate::context`, the rendering `agentd/context` serves) when the provider takes
    /// it so, else the replay items.
    async fn replay(&self) -> Result<StepInput, AgentError> {
        let ctx_mode = self.spec.permission_mode.as_str();
        let model = self.spec.model.clone();
        let render = self.spec.provider.render();
        let images = self.spec.provider.config().takes_images();
        let resources = self.tools.resources_dir.clone();
        let store = self.turns.registry.store.clone();
        self.h
            .query_blocking(move |st| {
                let ctx = crate::ops::replay_context(st, ctx_mode, Some(model));
                // Prompts and tool results with images: the bytes are read now (the
                // kept rendering holds only text).
                if images && st.fold.has_images() {
                    let replay =
                        super::images::loaded_replay(st, &ctx, &resources, render, &*store)?;
                    return Ok(StepInput {
                        items: replay.items,
                        rendered: None,
                        stats: replay.stats,
                    });
                }
                if let Some(r) = render {
                    let mut cache = st.context.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(out) = cache.items(&st.fold, &ctx, r, None) {
                        let stats = out.stats.clone();
                        return Ok(StepInput {
                            items: Vec::new(),
                            rendered: Some(out.input(r.dialect)),
                            stats,
                        });
                    }
                }
                let replay = st.fold.replay(&ctx);
                Ok(StepInput {
                    items: replay.items,
                    rendered: None,
                    stats: replay.stats,
                })
            })
            .await?
    }

    fn corrected(&self, replay: &StepInput) -> u64 {
        (replay.stats.estimated_tokens as f64 * self.ratio).ceil() as u64
    }

    async fn compact(&self, tail_events: usize, trigger: Trigger) -> Result<bool, AgentError> {
        let opts = CompactOptions {
            tail_events,
            trigger,
            strategy: CompactStrategy::Deterministic,
        };
        // `pre_compact` hooks run only before a compaction that records something.
        if !self.hooks.is_empty() && super::compact_hooks::will_compact(self.h, &opts).await? {
            let mut drafts = self.hooks.pre_compact("auto", &self.at()).await;
            if !drafts.is_empty() {
                for d in &mut drafts {
                    tools::redact_value(&mut d.data, &self.spec.secrets);
                }
                self.h.append(drafts, None).await?;
            }
        }
        let outcome = crate::ops::compact(self.h, opts, false, None).await?;
        Ok(outcome.recorded)
    }

    /// One model step, with the pressure check before it and overflow recovery after it.
    /// The outer error is the daemon's (Log writes); the inner one the provider's.
    async fn step(
        &mut self,
    ) -> Result<Result<(ProviderResponse, u64), ProviderFailure>, AgentError> {
        let window = self.spec.context_window;
        let mut replay = self.replay().await?;
        let limit = self.turns.registry.config.compaction.threshold * window as f64;
        if self.corrected(&replay) as f64 > limit {
            let tail = self.turns.registry.config.compaction.tail_events;
            if self.compact(tail, Trigger::Pressure).await? {
                self.last_seq = self
                    .last_seq
                    .max(self.h.query(|st| st.next_seq.saturating_sub(1)).await?);
                replay = self.replay().await?;
            }
        }
        let mut tails = OVERFLOW_TAILS.iter();
        loop {
            let estimated = self.corrected(&replay);
            self.h.publish(
                EventType::ContextPressure,
                json!({
                    "turn_id": self.turn_id,
                    "estimated_tokens": estimated,
                    "context_window": window,
                    "pressure": pressure(estimated, window),
                }),
            );
            let input = (std::mem::take(&mut replay.items), replay.rendered.take());
            match self.stream(input).await {
                Ok(resp) => return Ok(Ok((resp, replay.stats.estimated_tokens))),
                Err(f) if f.kind() == ErrorKind::ContextOverflow && !self.cancel.is_cancelled() => {
                    let mut compacted = false;
                    for &tail in tails.by_ref() {
                        if self.compact(tail, Trigger::OverflowRecovery).await? {
                            compacted = true;
                            break;
                        }
                    }
                    if !compacted {
                        return Ok(Err(f));
                    }
                    self.last_seq = self
                        .last_seq
                        .max(self.h.query(|st| st.next_seq.saturating_sub(1)).await?);
                    replay = self.replay().await?;
                }
                Err(f) => return Ok(Err(f)),
            }
        }
    }

    /// Streams one provider call; deltas are published while it runs and all of them
    /// before this returns, so subscribers see them ahead of the step's events.
    async fn stream(
        &self,
        (items, rendered): (Vec<ReplayItem>, Option<Vec<bytes::Bytes>>),
    ) -> Result<ProviderResponse, ProviderFailure> {
        let mut specs = tools::specs();
        if !self.spec.provider.config().offers_apply_patch() {
            specs.retain(|s| s.name != "apply_patch");
        }
        specs.push(memory::tool_spec());
        specs.extend(super::subagent::extra_specs(self.turns, self.h).await);
        // After the built-ins, in (server, tool) order: a stable prompt prefix.
        specs.extend(self.mcp_offered.iter().map(mcp_spec));
        let req = ProviderRequest {
            model: self.spec.request_model.clone(),
            items,
            rendered,
            tools: specs,
            max_output_tokens: None,
            reasoning_effort: self.spec.reasoning_effort.clone(),
        };
        let (tx, mut rx) = mpsc::channel::<StreamEvent>(DELTA_QUEUE);
        let h = self.h.clone();
        let turn_id = self.turn_id.clone();
        let forward = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let (kind, data) = match ev {
                    StreamEvent::TextDelta(t) => (EventType::TextDelta, json!({"text": t})),
                    StreamEvent::ReasoningDelta(t) => {
                        (EventType::ReasoningDelta, json!({"text": t}))
                    }
                    StreamEvent::Status(s) => {
                        (EventType::Status, json!({"message": s, "turn_id": turn_id}))
                    }
                };
                h.publish(kind, data);
            }
        });
        let res = self
            .spec
            .provider
            .stream(req, tx, self.cancel.clone())
            .await;
        let _ = forward.await;
        res
    }

    async fn provider_failed(&mut self, f: ProviderFailure) -> Result<End, AgentError> {
        let interrupted = self.cancel.is_cancelled();
        let kind = if interrupted {
            ErrorKind::Interrupted
        } else {
            f.error.kind
        };
        if !f.partial_text.is_empty() {
            self.append(vec![EventDraft::new(
                EventType::AssistantMessage,
                json!({"text": f.partial_text, "metadata": {"partial": true, "error_kind": kind}}),
            )])
            .await?;
        }
        Ok(if interrupted {
            End::Interrupted
        } else {
            End::Failed(f.error)
        })
    }

    async fn record_usage(
        &mut self,
        resp: &ProviderResponse,
        estimated: u64,
    ) -> Result<(), AgentError> {
        let window = self.spec.context_window;
        if let Some(r) = ratio(resp.usage.input_tokens, estimated) {
            self.ratio = r;
        }
        self.append(vec![EventDraft::new(
            EventType::ProviderUsage,
            json!({
                "provider": self.spec.provider_name(),
                "model": self.spec.model,
                "usage": resp.usage,
                "context_window": window,
                "pressure": pressure(resp.usage.input_tokens, window),
                "estimated_tokens": estimated,
            }),
        )])
        .await?;
        Ok(())
    }

    /// Records the step's items in the provider's order; returns its tool calls.
    async fn record_output(
        &mut self,
        resp: &ProviderResponse,
    ) -> Result<Vec<(String, String, Value)>, AgentError> {
        let mut drafts = Vec::new();
        let mut calls = Vec::new();
        for item in &resp.output {
            match item {
                OutputItem::Reasoning { item } => drafts.push(EventDraft::new(
                    EventType::Reasoning,
                    json!({"item": item, "model": self.spec.model}),
                )),
                OutputItem::Message { text } => drafts.push(EventDraft::new(
                    EventType::AssistantMessage,
                    json!({"text": text}),
                )),
                OutputItem::ToolCall {
                    call_id,
                    name,
                    args,
                } => {
                    let args = if args.is_object() {
                        args.clone()
                    } else {
                        json!({"_raw": args.to_string()})
                    };
                    let mut data = json!({"call_id": call_id, "name": name, "args": args});
                    if let Some(o) = self.mcp_tool(name) {
                        // The raw names: replay, search and reconcile never recompute them.
                        data["mcp"] = json!({"server": o.server, "tool": o.tool.name});
                    }
                    drafts.push(EventDraft::new(EventType::ToolCall, data));
                    calls.push((call_id.clone(), name.clone(), args));
                }
            }
        }
        if !drafts.is_empty() {
            self.append(drafts).await?;
        }
        Ok(calls)
    }

    /// Runs the calls in order. `false` when the turn was interrupted (calls not yet run
    /// stay pending for the interrupt's reconciliation).
    async fn run_tools(&mut self, calls: Vec<(String, String, Value)>) -> Result<bool, AgentError> {
        // The step's `task` calls start together; each result is recorded in call order.
        let mut tasks =
            super::subagent::Tasks::start(self.turns, &calls, || super::subagent::Parent {
                h: self.h.clone(),
                turn_id: self.turn_id.clone(),
                cancel: self.cancel.clone(),
                permission_mode: self.spec.permission_mode,
                tools: self.tools.clone(),
            });
        for (call_id, name, args) in calls {
            if self.cancel.is_cancelled() {
                return Ok(false);
            }
            if self.pre_tool_hooks(&call_id, &name, &args).await? {
                continue;
            }
            let mode = self.spec.permission_mode;
            let ask = Ask {
                turns: self.turns,
                session_id: &self.sid,
                turn_id: &self.turn_id,
                cancel: &self.cancel,
            };
            // A `shell` call may ask for a wider sandbox (docs/sandbox.md#escalation): only a client's
            // approval in `ask` mode grants it.
            let grant_arg = (name == "shell")
                .then(|| args.get("sandbox_grant").filter(|g| !g.is_null()))
                .flatten()
                .cloned();
            let grants = match tools::sandboxing::parse_grant(grant_arg.as_ref()) {
                Ok(g) => g,
                Err(e) => {
                    let data = ToolOutcome::failure(e).into_result_data(&call_id);
                    self.append(vec![EventDraft::new(EventType::ToolResult, data)])
                        .await?;
                    continue;
                }
            };
            let grant_value = grants
                .as_ref()
                .map(|_| grant_arg.clone().unwrap_or_default());
            let mcp = self.mcp_tool(&name).cloned();
            let decided = match &mcp {
                Some(o) => {
                    let call = McpCall {
                        server: &o.server,
                        tool: &o.tool.name,
                        title: o.tool.title.as_deref(),
                        annotations: &o.tool.annotations,
                        trusted_read_only: o.trusted_read_only,
                    };
                    permission::decide_mcp(mode, &ask, &call_id, &name, &args, &call).await
                }
                None => {
                    permission::decide(mode, &ask, &call_id, &name, &args, grant_value.as_ref())
                        .await
                }
            };
            let decision = match decided {
                Ok(d) => d,
                Err(_) => return Ok(false),
            };
            if let Some(d) = &decision {
                self.append(vec![EventDraft::new(
                    EventType::PermissionDecision,
                    d.event_data(&call_id, mode),
                )])
                .await?;
                if !d.allow {
                    let data = ToolOutcome::failure(d.denial(&name)).into_result_data(&call_id);
                    self.append(vec![EventDraft::new(EventType::ToolResult, data)])
                        .await?;
                    continue;
                }
            }
            if name == memory::TOOL_NAME {
                self.memory_apply(call_id, args).await?;
                continue;
            }
            if name == super::subagent::TOOL_NAME {
                let data = tasks.result(&call_id).await;
                self.append(vec![EventDraft::new(EventType::ToolResult, data)])
                    .await?;
                continue;
            }
            if name == super::goal::TOOL_NAME {
                let res = super::goal::complete(self.turns, self.h, &self.turn_id, &call_id, &args)
                    .await?;
                if let Some(r) = res {
                    self.last_seq = self.last_seq.max(r.last_seq);
                }
                continue;
            }
            if let Some(o) = mcp {
                let mut data = self.run_mcp(&call_id, &o, args.clone()).await;
                let (store, dir) = (
                    self.turns.registry.store.clone(),
                    self.tools.resources_dir.clone(),
                );
                super::images::keep_result_images(store, dir, &data).await;
                let mut drafts = self
                    .post_tool_hooks(&call_id, &name, &args, &mut data)
                    .await;
                drafts.push(EventDraft::new(EventType::ToolResult, data));
                self.append(drafts).await?;
                continue;
            }
            // An approved grant widens this call's sandbox, or the session's from now on.
            let mut call_tools = None;
            if let (Some(g), Some(d), Some(sb)) = (&grants, &decision, &self.tools.sandbox) {
                if d.allow {
                    let session = d.scope == Some("session");
                    let widened = sb.widened(g, !session);
                    let mut ctx = self.tools.clone();
                    ctx.paths = tools::sandboxing::PathRules::from_policy(&widened.policy);
                    ctx.sandbox = Some(widened);
                    if session {
                        self.tools = ctx.clone();
                    }
                    call_tools = Some(ctx);
                }
            }
            // A file-tool write the user approved in `ask` mode may change the protect set
            // (files other tools run, docs/sandbox.md#files-other-tools-run); the decision
            // is recorded above.
            if mode == permission::PermissionMode::Ask
                && decision.as_ref().is_some_and(|d| d.allow)
                && call_tools.is_none()
                && matches!(name.as_str(), "write_file" | "edit_file" | "apply_patch")
            {
                let mut ctx = self.tools.clone();
                ctx.paths.approved = true;
                call_tools = Some(ctx);
            }
            if let Some(d) = self.snapshots.before(self.h, &name, &call_id).await {
                self.append(vec![d]).await?;
            }
            let outcome =
                tools::run(&name, &args, call_tools.as_ref().unwrap_or(&self.tools)).await;
            let mut data = outcome.into_result_data(&call_id);
            let (store, dir) = (
                self.turns.registry.store.clone(),
                self.tools.resources_dir.clone(),
            );
            super::images::keep_result_images(store, dir, &data).await;
            self.watch_artifacts(&data);
            // The snapshot goes first, so the files "at" the result's seq include the call.
            // An interrupted call is left to the next turn's `before` snapshot.
            let mut drafts = Vec::new();
            if !self.cancel.is_cancelled() {
                drafts.extend(self.snapshots.after(&name, &args, &call_id).await);
            }
            drafts.extend(
                self.post_tool_hooks(&call_id, &name, &args, &mut data)
                    .await,
            );
            drafts.push(EventDraft::new(EventType::ToolResult, data));
            self.append(drafts).await?;
        }
        Ok(!self.cancel.is_cancelled())
    }

    fn at(&self) -> crate::hooks::At<'_> {
        crate::hooks::At {
            session_id: &self.sid,
            turn_id: Some(&self.turn_id),
            permission_mode: self.spec.permission_mode.as_str(),
            tools: &self.tools,
        }
    }

    /// `pre_tool_use` hooks (docs/hooks.md): their runs are recorded before the call
    /// runs; a block records the call's error result with them. True when blocked.
    async fn pre_tool_hooks(
        &mut self,
        call_id: &str,
        name: &str,
        args: &Value,
    ) -> Result<bool, AgentError> {
        let fired = self
            .hooks
            .pre_tool_use(call_id, name, args, &self.at())
            .await;
        let mut drafts = fired.drafts;
        let blocked = fired.blocked.is_some();
        if let Some(b) = fired.blocked {
            let data = ToolOutcome::failure(crate::hooks::refusal(b)).into_result_data(call_id);
            drafts.push(EventDraft::new(EventType::ToolResult, data));
        }
        if !drafts.is_empty() {
            self.append(drafts).await?;
        }
        Ok(blocked)
    }

    /// `post_tool_use` hooks: their `hook_run`s, to go in the result's append (a
    /// block's reason joins the result the model reads).
    async fn post_tool_hooks(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        data: &mut Value,
    ) -> Vec<EventDraft> {
        if self.cancel.is_cancelled() {
            return Vec::new();
        }
        self.hooks
            .post_tool_use(call_id, name, args, data, &self.at())
            .await
    }

    /// Runs one MCP call; returns its `tool_result` data.
    async fn run_mcp(&self, call_id: &str, o: &agentd_mcp::Offered, args: Value) -> Value {
        let Some(manager) = &self.mcp else {
            return ToolOutcome::failure(AgentError::internal("no MCP servers in this turn"))
                .into_result_data(call_id);
        };
        let began = std::time::Instant::now();
        // The server's progress notifications go to subscribers as ephemeral `status`
        // events while the call runs (they also reset its idle timeout).
        let mut progress = manager.progress(&o.server).await;
        let call = manager.call(&o.server, &o.tool.name, args, &self.cancel);
        tokio::pin!(call);
        let res = loop {
            let next = async {
                match progress.as_mut() {
                    Some(rx) => rx.recv().await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut call => break r,
                p = next => match p {
                    Some(p) => self.h.publish(
                        EventType::Status,
                        json!({"turn_id": self.turn_id, "call_id": call_id,
                               "message": format!("{}: {} in progress", o.server, o.tool.name),
                               "mcp_progress": p}),
                    ),
                    None => progress = None,
                },
            }
        };
        let duration_ms = began.elapsed().as_millis() as u64;
        let mut meta = json!({"server": o.server, "tool": o.tool.name, "duration_ms": duration_ms});
        let outcome = match res {
            Ok(raw) => {
                let mapped = agentd_mcp::result::map_result(&raw);
                meta["is_error"] = json!(!mapped.ok);
                meta["structured"] = json!(mapped.structured);
                meta["content_types"] = json!(mapped.content_types);
                let mut media = Vec::new();
                for m in &mapped.media {
                    let mut d = json!({"type": m.kind, "mime": m.mime, "bytes": m.bytes.len()});
                    match tools::store_resource(&self.tools.resources_dir, &m.bytes) {
                        Ok(desc) => d["resource"] = desc["path"].clone(),
                        Err(e) => d["error"] = json!(e.message),
                    }
                    if let Some(u) = &m.uri {
                        d["uri"] = json!(u);
                    }
                    media.push(d);
                }
                if !media.is_empty() {
                    meta["media"] = json!(media);
                }
                let base = ToolOutcome {
                    ok: mapped.ok,
                    ..ToolOutcome::success(String::new())
                };
                tools::with_output(base, &mapped.text, mapped.text.as_bytes(), &self.tools)
            }
            Err(e) => {
                meta["is_error"] = json!(true);
                meta["error_kind"] = json!(e.kind);
                let kind = match e.kind {
                    "timeout" => ErrorKind::Timeout,
                    "cancelled" => ErrorKind::Interrupted,
                    "input_required_unsupported" => ErrorKind::Unsupported,
                    "protocol" | "unknown_tool" => ErrorKind::InvalidArgs,
                    _ => ErrorKind::Internal,
                };
                ToolOutcome::failure(AgentError::new(kind, e.message).with_details(
                    json!({"mcp_error_kind": e.kind, "server": o.server, "tool": o.tool.name}),
                ))
            }
        };
        let mut data = outcome.into_result_data(call_id);
        data["mcp"] = meta;
        data
    }

    /// `memory_apply`: validated against the session state and recorded as
    /// `memory_update` plus an ok `tool_result`, or an `invalid_args` result, atomically.
    async fn memory_apply(&mut self, call_id: String, args: Value) -> Result<(), AgentError> {
        let res = self
            .h
            .record(move |st| {
                let lookup = StateLookup(st);
                Ok(match memory::validate(&args, &lookup) {
                    Ok(data) => {
                        let kind = data["kind"].as_str().unwrap_or("memory").to_string();
                        vec![
                            EventDraft::new(EventType::MemoryUpdate, data),
                            EventDraft::new(
                                EventType::ToolResult,
                                json!({"call_id": call_id, "ok": true, "output": format!("recorded {kind} update")}),
                            ),
                        ]
                    }
                    Err(e) => vec![EventDraft::new(
                        EventType::ToolResult,
                        ToolOutcome::failure(e).into_result_data(&call_id),
                    )],
                })
            })
            .await?;
        if let Some(r) = res {
            self.last_seq = self.last_seq.max(r.last_seq);
        }
        Ok(())
    }

    fn watch_artifacts(&self, result: &Value) {
        let Some(arts) = result.get("artifacts").and_then(Value::as_array) else {
            return;
        };
        for a in arts {
            if a["kind"] == "file" {
                if let Some(uri) = a["uri"].as_str() {
                    self.turns
                        .watch
                        .watch(&self.turns.registry, &self.sid, &self.workspace, uri);
                }
            }
        }
    }

    /// Records the end; returns what the turn's response says of it.
    async fn finish(&mut self, end: End, running: &RunningTurn) -> Result<Ended, AgentError> {
        let turn_id = self.turn_id.clone();
        match end {
            End::Completed(reason, stop) => {
                let mut data = json!({"turn_id": turn_id, "status": "completed"});
                if let Some(r) = reason {
                    data["reason"] = json!(r);
                }
                if self.resumed > 0 {
                    data["resumed"] = json!(self.resumed);
                }
                // Additive: only a limiting stop is written, so ordinary turns keep their bytes.
                if let Some(s) = stop {
                    data["stop_reason"] = json!(s);
                }
                let mut drafts = self
                    .hooks
                    .stop(self.subagent.as_ref(), "completed", &self.at())
                    .await;
                drafts.push(EventDraft::new(EventType::TurnEnded, data));
                self.append(drafts).await?;
                Ok(Ended {
                    status: "completed",
                    stop,
                    reason,
                    ..Ended::default()
                })
            }
            End::Failed(e) => {
                let status = if e.kind == ErrorKind::Timeout {
                    "timed_out"
                } else {
                    "failed"
                };
                let mut data = json!({"turn_id": turn_id, "status": status,
                    "error": {"kind": e.kind, "message": e.message}});
                if self.resumed > 0 {
                    data["resumed"] = json!(self.resumed);
                }
                let mut drafts = self
                    .hooks
                    .stop(self.subagent.as_ref(), status, &self.at())
                    .await;
                drafts.push(EventDraft::new(EventType::TurnEnded, data));
                self.append(drafts).await?;
                Ok(Ended {
                    status,
                    error: Some(e),
                    ..Ended::default()
                })
            }
            End::Interrupted => {
                let reason = running.reason();
                let resumed = self.resumed;
                let (tx, rx) = tokio::sync::oneshot::channel();
                let res = self
                    .h
                    .record(move |st| {
                        let pending = st.fold.pending_calls();
                        let _ = tx.send(
                            pending
                                .iter()
                                .map(|p| p.call_id.clone())
                                .collect::<Vec<_>>(),
                        );
                        let mut drafts = reconcile::closures(&pending, ReconcileReason::Interrupt);
                        let mut data =
                            json!({"turn_id": turn_id, "status": "interrupted", "reason": reason});
                        if resumed > 0 {
                            data["resumed"] = json!(resumed);
                        }
                        drafts.push(EventDraft::new(EventType::TurnEnded, data));
                        Ok(drafts)
                    })
                    .await?;
                if let Some(r) = res {
                    self.last_seq = self.last_seq.max(r.last_seq);
                }
                let reconciled = rx.await.unwrap_or_default();
                Ok(Ended {
                    status: "interrupted",
                    reconciled,
                    ..Ended::default()
                })
            }
        }
    }
}

/// The provider spec of an MCP tool: its schema as the server wrote it (an object
/// schema without `properties` gets an empty one, which some providers require).
fn mcp_spec(o: &agentd_mcp::Offered) -> agentd_proto::replay::ToolSpec {
    let mut parameters = o.tool.schema.clone();
    if let Some(m) = parameters.as_object_mut() {
        m.entry("type").or_insert_with(|| json!("object"));
        if m.get("type") == Some(&json!("object")) {
            m.entry("properties").or_insert_with(|| json!({}));
        }
    }
    let mut description = o.tool.description.clone();
    if description.is_empty() {
        description = o.tool.title.clone().unwrap_or_else(|| o.tool.name.clone());
    }
    agentd_proto::replay::ToolSpec {
        name: o.name.clone(),
        description: format!("[MCP server `{}`] {description}", o.server),
        parameters,
    }
}

/// The text of a step's messages, joined.
fn step_text(resp: &ProviderResponse) -> String {
    resp.output
        .iter()
        .filter_map(|i| match i {
            OutputItem::Message { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Evidence for `memory_apply`, answered from the session's folded state.
struct StateLookup<'a>(&'a SessionState);

impl EvidenceLookup for StateLookup<'_> {
    fn has_event_id(&self, id: &str) -> bool {
        self.0.events.iter().any(|e| e.id() == id)
    }
    fn has_call_id(&self, id: &str) -> bool {
        self.0.events.iter().any(|e| {
            e.event_type() == EventType::ToolCall && e.str_field("call_id").as_deref() == Some(id)
        })
    }
    fn has_artifact(&self, uri: &str) -> bool {
        self.0.checkpoint.artifact(uri).is_some()
    }
    fn artifact_sha256(&self, uri: &str) -> Option<String> {
        self.0.checkpoint.artifact(uri)?.sha256.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_pressure_are_bounded() {
        assert_eq!(ratio(0, 10), None);
        assert_eq!(ratio(10, 0), None);
        assert_eq!(ratio(150, 100), Some(1.5));
        assert_eq!(ratio(1000, 1), Some(RATIO_MAX));
        assert_eq!(ratio(1, 1000), Some(RATIO_MIN));
        assert_eq!(pressure(850, 1000), 0.85);
        assert_eq!(pressure(1, 3), 0.3333);
    }
}
