//! Goals (docs/goals.md): an objective the daemon keeps working on, turn after turn,
//! until the model says it is done or a budget is spent.
//!
//! The goal lives in the Log: `goal_set{goal_id, objective, max_turns, token_budget?,
//! model?}`, then one `goal_progress{goal_id, turn_id, status, turns_used, tokens_used,
//! failures_in_row}` per turn that ran for it, then `goal_ended{goal_id, reason,
//! turns_used, tokens_used, summary?}`. Reasons: `completed` (the model called
//! `goal_complete`), `max_turns`, `token_budget`, `failed` (two turns in a row failed, or
//! a turn could not start), `interrupted` (the user interrupted a turn), `cleared`
//! (`agentd/goal_clear`), `replaced` (a new `goal_set`).
//!
//! [`advance`] runs whenever a turn of the session ends (and at start for every open
//! goal): in one record it accounts the ended turn and decides; while the goal stays
//! open and nothing runs or waits in the queue, it starts the next turn with a short
//! continuation message that restates the objective, admitted with the
//! `client_request_id` `goal:<goal_id>:<n>`, so a crash between the decision and the
//! turn's start never starts it twice. A turn the daemon's own shutdown or restart cut
//! does not end the goal: it goes on after the restart. `<home>/goals/open/<sid>` names
//! the sessions with an open goal, so a restart finds them without reading every Log.

use super::TurnManager;
use crate::session::{SessionHandle, SessionState};
use agentd_proto::replay::ToolSpec;
use agentd_proto::rpc::{AppendResult, GoalSetParams, TurnParams};
use agentd_proto::{AgentError, ErrorKind, EventDraft, EventType};
use serde_json::{json, Value};
use std::sync::Arc;

pub const TOOL_NAME: &str = "goal_complete";
/// Turns a goal may start when `goal_set` names no `max_turns`.
pub const DEFAULT_MAX_TURNS: u32 = 20;
pub const MAX_MAX_TURNS: u32 = 1000;
const MAX_OBJECTIVE_CHARS: usize = 8 * 1024;
const MAX_SUMMARY_CHARS: usize = 4 * 1024;
/// Failed turns in a row that end a goal.
const FAILURES_THAT_END: u32 = 2;

/// The `goal_complete` tool's spec (offered while a goal is open).
pub fn tool_spec() -> ToolSpec {
    ToolSpec {
        name: TOOL_NAME.into(),
        description: "Declare the session's goal achieved. Call it only when the objective is \
            fully done and verified (or, with the reason in the summary, when it cannot be \
            done); the daemon then stops starting turns for it. `summary`: what was done and \
            how it was checked."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string", "minLength": 1,
                    "description": "What was achieved and how it was verified."},
            },
            "required": ["summary"],
            "additionalProperties": false,
        }),
    }
}

/// A goal as the Log tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub goal_id: String,
    pub objective: String,
    pub max_turns: u32,
    pub token_budget: Option<u64>,
    pub model: Option<String>,
    pub set_seq: u64,
    /// `goal_ended`'s data once ended.
    pub ended: Option<Value>,
    pub turns_used: u32,
    /// Provider tokens (input + output) recorded from `goal_set` until the goal ended.
    pub tokens_used: u64,
    pub failures_in_row: u32,
    /// The latest turn started after `goal_set` that ended: (turn_id, status, reason).
    last_ended: Option<(String, String, Option<String>)>,
    /// The turn the latest `goal_progress` accounted.
    last_progressed: Option<String>,
}

impl Goal {
    pub fn is_open(&self) -> bool {
        self.ended.is_none()
    }

    /// `agentd/goal_get`'s `goal`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "goal_id": self.goal_id,
            "objective": self.objective,
            "status": if self.is_open() { "open" } else { "ended" },
            "max_turns": self.max_turns,
            "token_budget": self.token_budget,
            "model": self.model,
            "turns_used": self.turns_used,
            "tokens_used": self.tokens_used,
            "set_seq": self.set_seq,
        });
        if let Some(e) = &self.ended {
            v["reason"] = e.get("reason").cloned().unwrap_or(Value::Null);
            if let Some(s) = e.get("summary") {
                v["summary"] = s.clone();
            }
        }
        v
    }
}

/// The session's latest goal (open or ended), folded from its `goal_set` on.
pub fn latest(st: &SessionState) -> Option<Goal> {
    let at = st.last_goal_set?;
    let set = st.events[at].event();
    let d = &set.data;
    let mut g = Goal {
        goal_id: set.str_field("goal_id").unwrap_or_default().to_string(),
        objective: set.str_field("objective").unwrap_or_default().to_string(),
        max_turns: d
            .get("max_turns")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_MAX_TURNS, |n| {
                n.min(u64::from(MAX_MAX_TURNS)) as u32
            }),
        token_budget: d.get("token_budget").and_then(Value::as_u64),
        model: set.str_field("model").map(str::to_string),
        set_seq: set.seq,
        ended: None,
        turns_used: 0,
        tokens_used: 0,
        failures_in_row: 0,
        last_ended: None,
        last_progressed: None,
    };
    let mut started = std::collections::HashSet::new();
    for e in &st.events[at + 1..] {
        match e.event_type() {
            EventType::TurnStarted => {
                if let Some(t) = e.str_field("turn_id") {
                    started.insert(t);
                }
            }
            EventType::TurnEnded => {
                let Some(t) = e.str_field("turn_id").filter(|t| started.contains(t)) else {
                    continue;
                };
                let ev = e.event();
                g.last_ended = Some((
                    t,
                    ev.str_field("status").unwrap_or_default().to_string(),
                    ev.str_field("reason").map(str::to_string),
                ));
            }
            EventType::ProviderUsage => {
                let u = e.event().data.get("usage").cloned().unwrap_or_default();
                let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                let total = match n("total_tokens") {
                    0 => n("input_tokens").saturating_add(n("output_tokens")),
                    t => t,
                };
                g.tokens_used = g.tokens_used.saturating_add(total);
            }
            EventType::GoalProgress if e.str_field("goal_id") == Some(g.goal_id.clone()) => {
                let ev = e.event();
                g.turns_used = ev
                    .data
                    .get("turns_used")
                    .and_then(Value::as_u64)
                    .unwrap_or(u64::from(g.turns_used) + 1)
                    .min(u64::from(u32::MAX)) as u32;
                g.failures_in_row = ev
                    .data
                    .get("failures_in_row")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .min(u64::from(u32::MAX)) as u32;
                g.last_progressed = ev.str_field("turn_id").map(str::to_string);
            }
            EventType::GoalEnded if e.str_field("goal_id") == Some(g.goal_id.clone()) => {
                // What follows is no longer the goal's: its turns and tokens stop here.
                g.ended = Some(e.event().data);
                break;
            }
            _ => {}
        }
    }
    Some(g)
}

/// The open goal of the session, if any.
pub fn open(st: &SessionState) -> Option<Goal> {
    latest(st).filter(Goal::is_open)
}

/// The user message of the goal's turn number `n` (0-based).
pub fn continuation(g: &Goal, n: u32) -> String {
    if n == 0 {
        format!(
            "Goal: {}\n\nWork toward this goal. When it is fully achieved and verified, call \
             the `goal_complete` tool with a short summary.",
            g.objective
        )
    } else {
        format!(
            "Continue working toward the goal: {}\n\n(Goal turn {} of at most {}. When the goal \
             is fully achieved and verified, call `goal_complete` with a summary; if it cannot \
             be achieved, call it and say why.)",
            g.objective,
            n + 1,
            g.max_turns
        )
    }
}

fn markers_dir(turns: &TurnManager) -> std::path::PathBuf {
    turns.registry.home.root().join("goals").join("open")
}

fn mark_open(turns: &TurnManager, sid: &str, open: bool) {
    if agentd_proto::session_id::validate(sid).is_err() {
        return;
    }
    if let Err(e) = super::set_marker(&markers_dir(turns), sid, open) {
        tracing::warn!(session = sid, error = %e, "open-goal marker not updated");
    }
}

/// The `goal_ended` draft.
fn ended(g: &Goal, reason: &str, extra: Value) -> EventDraft {
    let mut d = json!({"goal_id": g.goal_id, "reason": reason,
                       "turns_used": g.turns_used, "tokens_used": g.tokens_used});
    if let (Some(d), Some(x)) = (d.as_object_mut(), extra.as_object()) {
        d.extend(x.clone());
    }
    EventDraft::new(EventType::GoalEnded, d)
}

impl TurnManager {
    /// `agentd/goal_set`.
    pub async fn goal_set(self: &Arc<Self>, p: GoalSetParams) -> Result<Value, AgentError> {
        let h = self.registry.get(&p.session_id).await?;
        let objective = p.objective.trim().to_string();
        if objective.is_empty() {
            return Err(AgentError::invalid_args("objective must not be empty")
                .with_details(json!({"field": "objective"})));
        }
        if objective.chars().count() > MAX_OBJECTIVE_CHARS {
            return Err(AgentError::invalid_args(format!(
                "objective is over {MAX_OBJECTIVE_CHARS} characters"
            ))
            .with_details(json!({"field": "objective"})));
        }
        let max_turns = p.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
        if max_turns == 0 || max_turns > MAX_MAX_TURNS {
            return Err(
                AgentError::invalid_args(format!("max_turns must be 1..={MAX_MAX_TURNS}"))
                    .with_details(json!({"field": "max_turns"})),
            );
        }
        if p.token_budget == Some(0) {
            return Err(AgentError::invalid_args("token_budget must be at least 1")
                .with_details(json!({"field": "token_budget"})));
        }
        // The goal's turns must be able to start: the model and provider resolve now.
        super::setup::resolve(&self.registry, &h, &goal_turn(&h.id, &objective, &p.model)).await?;
        let goal_id = format!("goal_{}", agentd_proto::event::new_event_id());
        let mut data = json!({"goal_id": goal_id, "objective": objective, "max_turns": max_turns});
        if let Some(b) = p.token_budget {
            data["token_budget"] = json!(b);
        }
        if let Some(m) = &p.model {
            data["model"] = json!(m);
        }
        mark_open(self, &h.id, true);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let res = h
            .record(move |st| {
                let mut drafts = Vec::new();
                // A new goal replaces the open one.
                if let Some(g) = open(st) {
                    let _ = tx.send(g.goal_id.clone());
                    drafts.push(ended(&g, "replaced", json!({})));
                }
                drafts.push(EventDraft::new(EventType::GoalSet, data));
                Ok(drafts)
            })
            .await?;
        let replaced = rx.await.ok();
        let seq = res.map(|r| r.last_seq);
        let started = self.goal_advance(&h).await?;
        Ok(
            json!({"session_id": h.id.as_ref(), "goal_id": goal_id, "seq": seq,
                  "replaced": replaced, "turn_id": started}),
        )
    }

    /// `agentd/goal_get`: the session's latest goal (`null` when it never had one).
    pub async fn goal_get(&self, sid: &str) -> Result<Value, AgentError> {
        let h = self.registry.get(sid).await?;
        let g = h.query(latest).await?;
        Ok(json!({"session_id": sid, "goal": g.map(|g| g.to_json())}))
    }

    /// `agentd/goal_clear`: ends the open goal with reason `cleared` (a running turn
    /// finishes; no turn follows it).
    pub async fn goal_clear(&self, sid: &str) -> Result<Value, AgentError> {
        let h = self.registry.get(sid).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let res = h
            .record(move |st| {
                let Some(g) = open(st) else {
                    return Ok(Vec::new());
                };
                let _ = tx.send(g.goal_id.clone());
                Ok(vec![ended(&g, "cleared", json!({}))])
            })
            .await?;
        mark_open(self, sid, false);
        let goal_id = rx.await.ok();
        Ok(
            json!({"session_id": sid, "cleared": goal_id.is_some(), "goal_id": goal_id,
                  "seq": res.map(|r| r.last_seq)}),
        )
    }

    /// At start: every session a marker names whose goal is still open goes on.
    pub fn resume_goals(self: &Arc<Self>) {
        let Ok(dir) = std::fs::read_dir(markers_dir(self)) else {
            return;
        };
        let sids: Vec<String> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|s| agentd_proto::session_id::validate(s).is_ok())
            .collect();
        for sid in sids {
            let turns = self.clone();
            tokio::spawn(async move {
                let h = match turns.registry.get(&sid).await {
                    Ok(h) => h,
                    Err(e) => {
                        tracing::warn!(session = %sid, error = %e, "session of an open-goal marker not loaded");
                        return;
                    }
                };
                if let Err(e) = turns.goal_advance(&h).await {
                    tracing::warn!(session = %sid, error = %e, "open goal not resumed");
                }
            });
        }
    }

    /// After a turn of `h` ended (see the module doc); in a task of its own.
    pub(super) fn goal_after_turn(self: &Arc<Self>, h: &SessionHandle) {
        let (turns, h) = (self.clone(), h.clone());
        tokio::spawn(async move {
            if let Err(e) = turns.goal_advance(&h).await {
                tracing::warn!(session = %h.id, error = %e, "goal not advanced");
            }
        });
    }

    /// Accounts the latest ended turn of the open goal, ends the goal when a stop
    /// condition holds, else starts its next turn; returns that turn's id.
    async fn goal_advance(
        self: &Arc<Self>,
        h: &SessionHandle,
    ) -> Result<Option<String>, AgentError> {
        if self.shutting_down.load(std::sync::atomic::Ordering::SeqCst) || self.is_running(&h.id) {
            return Ok(None);
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<(Goal, u32)>();
        let (etx, erx) = tokio::sync::oneshot::channel::<()>();
        h.record(move |st| {
            let Some(mut g) = open(st) else {
                let _ = etx.send(());
                return Ok(Vec::new());
            };
            if st.running_turn.is_some() || !st.queued.is_empty() {
                return Ok(Vec::new());
            }
            let mut drafts = Vec::new();
            let mut reason = None;
            if let Some((turn_id, status, why)) = g.last_ended.clone() {
                if g.last_progressed.as_deref() != Some(turn_id.as_str()) {
                    g.turns_used = g.turns_used.saturating_add(1);
                    let failed = matches!(status.as_str(), "failed" | "timed_out");
                    g.failures_in_row = if failed { g.failures_in_row + 1 } else { 0 };
                    drafts.push(EventDraft::new(
                        EventType::GoalProgress,
                        json!({"goal_id": g.goal_id, "turn_id": turn_id, "status": status,
                               "turns_used": g.turns_used, "tokens_used": g.tokens_used,
                               "failures_in_row": g.failures_in_row}),
                    ));
                    // The daemon's own stop is not the user's: the goal goes on after it.
                    let by_daemon = matches!(
                        why.as_deref(),
                        Some("daemon_shutdown") | Some("daemon_restart")
                    );
                    if status == "interrupted" && !by_daemon {
                        reason = Some("interrupted");
                    } else if g.failures_in_row >= FAILURES_THAT_END {
                        reason = Some("failed");
                    }
                }
            }
            if reason.is_none() && g.turns_used >= g.max_turns {
                reason = Some("max_turns");
            }
            if reason.is_none() && g.token_budget.is_some_and(|b| g.tokens_used >= b) {
                reason = Some("token_budget");
            }
            match reason {
                Some(r) => {
                    drafts.push(ended(&g, r, json!({})));
                    let _ = etx.send(());
                }
                None => {
                    let n = g.turns_used;
                    let _ = tx.send((g, n));
                }
            }
            Ok(drafts)
        })
        .await?;
        if erx.await.is_ok() {
            mark_open(self, &h.id, false);
            return Ok(None);
        }
        let Ok((g, n)) = rx.await else {
            return Ok(None);
        };
        let mut p = goal_turn(&h.id, &continuation(&g, n), &g.model);
        p.client_request_id = Some(format!("goal:{}:{n}", g.goal_id));
        match self.turn(p).await {
            Ok(r) => Ok(Some(r.turn_id)),
            // Another turn took the slot first: its end advances the goal.
            Err(e) if e.kind == ErrorKind::Busy || e.kind == ErrorKind::DaemonUnavailable => {
                Ok(None)
            }
            Err(e) => {
                let (gid, err) = (g.goal_id.clone(), e.clone());
                h.record(move |st| {
                    Ok(match open(st).filter(|g| g.goal_id == gid) {
                        Some(g) => vec![ended(
                            &g,
                            "failed",
                            json!({"error": {"kind": err.kind, "message": err.message}}),
                        )],
                        None => Vec::new(),
                    })
                })
                .await?;
                mark_open(self, &h.id, false);
                Err(e)
            }
        }
    }
}

/// The request of one goal turn.
fn goal_turn(sid: &str, input: &str, model: &Option<String>) -> TurnParams {
    TurnParams {
        session_id: sid.to_string(),
        input: input.to_string(),
        model: model.clone(),
        provider: None,
        max_iterations: None,
        permission_mode: None,
        wait: Some(false),
        sandbox: None,
        mcp_servers: None,
        client_request_id: None,
        queue: None,
        reasoning_effort: None,
        images: Vec::new(),
    }
}

/// `goal_complete`: ends the open goal (`goal_ended{reason:"completed", summary,
/// turn_id, call_id}`) and answers the call, in one append; an error result when no
/// goal is open.
pub(super) async fn complete(
    turns: &TurnManager,
    h: &SessionHandle,
    turn_id: &str,
    call_id: &str,
    args: &Value,
) -> Result<Option<AppendResult>, AgentError> {
    let summary = args
        .get("summary")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let (turn_id, call_id) = (turn_id.to_string(), call_id.to_string());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let res = h
        .record(move |st| {
            let fail = |e: AgentError| {
                vec![EventDraft::new(
                    EventType::ToolResult,
                    crate::tools::ToolOutcome::failure(e).into_result_data(&call_id),
                )]
            };
            if summary.is_empty() {
                return Ok(fail(
                    AgentError::invalid_args("`summary` must be a non-empty string")
                        .with_details(json!({"field": "summary"})),
                ));
            }
            let Some(mut g) = open(st) else {
                return Ok(fail(AgentError::new(
                    ErrorKind::NotFound,
                    "this session has no open goal",
                )));
            };
            // The turn doing the completing counts.
            if g.last_progressed.as_deref() != Some(turn_id.as_str()) {
                g.turns_used = g.turns_used.saturating_add(1);
            }
            let _ = tx.send(());
            let summary = crate::text::clip_chars(&summary, MAX_SUMMARY_CHARS).to_string();
            Ok(vec![
                ended(
                    &g,
                    "completed",
                    json!({"summary": summary, "turn_id": turn_id, "call_id": call_id}),
                ),
                EventDraft::new(
                    EventType::ToolResult,
                    json!({"call_id": call_id, "ok": true,
                           "output": format!("goal {} completed", g.goal_id)}),
                ),
            ])
        })
        .await?;
    if rx.await.is_ok() {
        mark_open(turns, &h.id, false);
    }
    Ok(res)
}
