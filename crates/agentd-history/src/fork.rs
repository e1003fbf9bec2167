//! The child Log of a fork and its branch summary (docs/history-rules.md#fork).
//!
//! [`plan`] returns the complete child Log (envelopes stamped with new ids, the child's
//! session id and seq 0..n) so the caller only writes it atomically and copies the listed
//! resources; the parent is never touched. Child layout:
//! - seq 0: `session_fork{parent_session_id, fork_root_session_id, forked_to_seq, workspace,
//!   replay_event_count, strategy:"replay_v1"}`, plus the parent's `provider` and `model`
//!   when its first event has them (beyond docs/history-rules.md#fork's required fields: a session's provider and
//!   model are read off its first event, whatever its type);
//! - the parent's events with `seq ≤ to_seq`, except [`NOT_COPIED`] types, with `ts` and
//!   `data` unchanged (unknown types included: preserved, never replayed);
//! - `fork_cut` closures: a `tool_result` for each call left pending in the child, then
//!   `turn_ended{status:"interrupted", reason:"fork_cut"}` when `to_seq` cuts a turn
//!   (its `turn_started` copied, its `turn_ended` not) — the child must not look like a turn
//!   still running, or the daemon would reconcile it as a restart;
//! - with `summarize`, a deterministic `branch_summary` of the copied events.
//!
//! New events (seq 0, closures, summary) carry the time of planning as `ts`.

use super::digest::{
    bounded_files, counts_line, message_excerpt, resource_names, touched_paths, OpenTasks,
    EXCERPT_BYTES, SUMMARY_EXCERPTS,
};
use super::fold::Fold;
use super::reconcile::{closures, turn_end_interrupted, ReconcileReason};
use agentd_proto::event::{new_event_id, now_ts};
use agentd_proto::{AgentError, Event, EventDraft, EventType};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Types a fork does not copy into the child.
pub const NOT_COPIED: &[&str] = &[
    "provider_usage",
    "history_compaction",
    "session_fork",
    "branch_summary",
    "turn_failed",
    "log_repaired",
    "session_started",
];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForkPlan {
    /// The complete child Log, seq 0..n.
    pub events: Vec<Event>,
    pub fork_root_session_id: String,
    pub to_seq: u64,
    /// Events in the child Log (all of `events`).
    pub event_count: usize,
    /// Parent events copied (`session_fork.data.replay_event_count`).
    pub replay_event_count: usize,
    pub would_record_branch_summary: bool,
    /// sha256 names of resources the copied events reference, sorted.
    pub resources: Vec<String>,
}

/// Fields of the parent's first event (`session_started` or its own `session_fork`)
/// that the child inherits: the session's provider and model are read off a session's
/// first event, so without them a child's turns would fall back to the config default.
pub const INHERITED: &[&str] = &["provider", "model"];

fn inherit_choices(parent: &[Event], head: &mut Value) {
    let Some(first) = parent.first().filter(|e| {
        matches!(
            e.event_type(),
            EventType::SessionStarted | EventType::SessionFork
        )
    }) else {
        return;
    };
    for &k in INHERITED {
        if let Some(v) = first.str_field(k) {
            head[k] = json!(v);
        }
    }
}

/// Plans a fork of `parent` (its events in Log order). See the module doc.
pub fn plan(
    parent: &[Event],
    parent_session_id: &str,
    parent_fork_root: Option<&str>,
    workspace: &str,
    to_seq: Option<u64>,
    child_session_id: &str,
    summarize: bool,
) -> Result<ForkPlan, AgentError> {
    agentd_proto::session_id::validate(child_session_id)?;
    if child_session_id == parent_session_id {
        return Err(AgentError::invalid_args(
            "child_session_id must differ from the parent session id",
        ));
    }
    let last_seq = parent
        .iter()
        .map(|e| e.seq)
        .max()
        .ok_or_else(|| AgentError::invalid_args("the parent session has no events to fork"))?;
    let to_seq = to_seq.unwrap_or(last_seq);
    if !parent.iter().any(|e| e.seq == to_seq) {
        return Err(AgentError::invalid_args(format!(
            "to_seq {to_seq} is not a seq of the parent session (last seq {last_seq})"
        ))
        .with_details(json!({"to_seq": to_seq, "last_seq": last_seq}))
        .with_next_actions(&["agentctl log <session_id> to pick an existing seq"]));
    }
    let fork_root = parent_fork_root.unwrap_or(parent_session_id).to_string();
    let now = now_ts();
    let sources: Vec<&Event> = parent
        .iter()
        .filter(|e| e.seq <= to_seq && !NOT_COPIED.contains(&e.kind.as_str()))
        .collect();

    let mut events = Vec::with_capacity(sources.len() + 4);
    let stamp = |events: &mut Vec<Event>, kind: String, data: Value, ts: String| {
        let seq = events.len() as u64;
        events.push(Event {
            id: new_event_id(),
            session_id: child_session_id.to_string(),
            seq,
            ts,
            kind,
            data,
        });
    };
    let mut head = json!({
        "parent_session_id": parent_session_id,
        "fork_root_session_id": fork_root,
        "forked_to_seq": to_seq,
        "workspace": workspace,
        "replay_event_count": sources.len(),
        "strategy": "replay_v1",
    });
    inherit_choices(parent, &mut head);
    stamp(
        &mut events,
        EventType::SessionFork.as_str().to_string(),
        head,
        now.clone(),
    );
    let mut resources = BTreeSet::new();
    for e in &sources {
        resource_names(e, &mut resources);
        stamp(&mut events, e.kind.clone(), e.data.clone(), e.ts.clone());
    }

    let fold = Fold::from_events(&events);
    let pending = fold.pending_calls();
    let mut drafts: Vec<EventDraft> = closures(&pending, ReconcileReason::ForkCut);
    let open_turn = fold.open_turn();
    if let Some(turn) = &open_turn {
        drafts.push(turn_end_interrupted(turn, ReconcileReason::ForkCut));
    }
    if summarize {
        drafts.push(EventDraft::new(
            EventType::BranchSummary,
            branch_summary(
                &sources,
                parent_session_id,
                to_seq,
                pending.len(),
                open_turn.is_some(),
            ),
        ));
    }
    for d in drafts {
        stamp(&mut events, d.kind, d.data, now.clone());
    }
    Ok(ForkPlan {
        event_count: events.len(),
        events,
        fork_root_session_id: fork_root,
        to_seq,
        replay_event_count: sources.len(),
        would_record_branch_summary: summarize,
        resources: resources.into_iter().collect(),
    })
}

/// The deterministic `branch_summary` data over the copied parent events.
fn branch_summary(
    sources: &[&Event],
    parent_session_id: &str,
    to_seq: u64,
    closed_calls: usize,
    closed_turn: bool,
) -> Value {
    let from_seq = sources.first().map_or(to_seq, |e| e.seq);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut paths = Vec::new();
    let mut open = OpenTasks::default();
    let mut excerpts = Vec::new();
    let mut calls = Vec::new();
    for e in sources {
        *counts.entry(e.kind.clone()).or_default() += 1;
        paths.extend(touched_paths(e));
        open.push(e);
        if let Some((role, text)) = message_excerpt(e) {
            excerpts.push((e.seq, role, text));
        }
        if e.event_type() == EventType::ToolCall {
            calls.push(e.str_field("name").unwrap_or(""));
        }
    }
    let files = bounded_files(&[], &paths);
    let open_tasks = open.finish();

    let mut summary = format!(
        "Forked {} events of {parent_session_id} (seq {from_seq}..{to_seq}); the child replays them raw.\n",
        sources.len()
    );
    let _ = writeln!(summary, "Event counts: {}.", counts_line(&counts));
    let last = &calls[calls.len().saturating_sub(5)..];
    if last.is_empty() {
        summary.push_str("Tool calls: none.\n");
    } else {
        let _ = writeln!(
            summary,
            "Tool calls: {}; last: {}.",
            calls.len(),
            last.join(", ")
        );
    }
    let _ = writeln!(
        summary,
        "Files touched: {}. Open tasks: {}.",
        files.len(),
        open_tasks.len()
    );
    if closed_calls > 0 || closed_turn {
        let _ = writeln!(
            summary,
            "Closed at the fork point: {closed_calls} pending tool calls{}.",
            if closed_turn {
                " and 1 unfinished turn"
            } else {
                ""
            }
        );
    }
    let recent = &excerpts[excerpts.len().saturating_sub(SUMMARY_EXCERPTS)..];
    if recent.is_empty() {
        summary.push_str("Recent messages: none.");
    } else {
        summary.push_str("Recent messages:");
        for (seq, role, text) in recent {
            let _ = write!(summary, "\n- [seq {seq}] {role}: {text}");
        }
    }
    json!({
        "strategy": "deterministic_v1",
        "parent_session_id": parent_session_id,
        "forked_to_seq": to_seq,
        "range": {"from_seq": from_seq, "to_seq": to_seq},
        "source_event_count": sources.len(),
        "event_counts": counts,
        "files_touched": files,
        "open_tasks": open_tasks,
        "limitations": [
            format!("The parent Log stays authoritative and unchanged; this is a deterministic digest of its events up to seq {to_seq}."),
            format!("Message excerpts are whitespace-collapsed and cut to {EXCERPT_BYTES} bytes; only the last {SUMMARY_EXCERPTS} are quoted."),
            format!("Events after seq {to_seq} in the parent are not part of this branch."),
        ],
        "summary": summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::ReplayContext;
    use crate::golden::golden;
    use crate::testutil::TestLog;
    use agentd_proto::ErrorKind;

    fn parent() -> TestLog {
        let mut log = TestLog::new();
        log.push(
            "session_started",
            json!({"workspace": "/w", "agentd_version": "0.1.0", "log_format": 1,
                   "provider": "script", "model": "script:x.json", "title": "t"}),
        );
        log.push("turn_started", json!({"turn_id": "t1"})); // 1
        log.push(
            "user_message",
            json!({"text": "list   the files", "resources": [{"sha256": "a".repeat(64)}]}),
        ); // 2
        log.push(
            "provider_usage",
            json!({"provider": "script", "model": "m"}),
        ); // 3
        log.push(
            "tool_call",
            json!({"call_id": "c1", "name": "list_dir", "args": {"path": "src"}}),
        ); // 4
        log.push(
            "tool_call",
            json!({"call_id": "c2", "name": "read_file", "args": {"path": "src/main.rs"}}),
        ); // 5
        log.push("tool_result", json!({"call_id": "c1", "ok": true, "output": "main.rs", "resource": {"sha256": "b".repeat(64)}})); // 6
        log.push("future_thing", json!({"x": 1})); // 7
        log.push(
            "tool_result",
            json!({"call_id": "c2", "ok": true, "output": "fn main() {}"}),
        ); // 8
        log.push("assistant_message", json!({"text": "done"})); // 9
        log.push(
            "turn_ended",
            json!({"turn_id": "t1", "status": "completed"}),
        ); // 10
        log
    }

    #[test]
    fn copies_the_prefix_with_new_ids_and_seqs() {
        let p = parent();
        let plan = plan(&p.events, "par", None, "/w", None, "child", false).unwrap();
        assert_eq!(plan.to_seq, 10);
        assert_eq!(plan.fork_root_session_id, "par");
        let kinds: Vec<_> = plan.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "session_fork",
                "turn_started",
                "user_message",
                "tool_call",
                "tool_call",
                "tool_result",
                "future_thing",
                "tool_result",
                "assistant_message",
                "turn_ended"
            ]
        );
        assert_eq!(plan.replay_event_count, 9);
        assert_eq!(plan.event_count, 10);
        let head = &plan.events[0].data;
        assert_eq!(head["replay_event_count"], 9);
        assert_eq!(head["forked_to_seq"], 10);
        assert_eq!(head["strategy"], "replay_v1");
        assert_eq!(head["provider"], "script");
        assert_eq!(head["model"], "script:x.json");
        assert!(head.get("title").is_none(), "the caller names the child");
        // A fork of the fork inherits them from its `session_fork`.
        let again =
            super::plan(&plan.events, "child", Some("par"), "/w", None, "gc", false).unwrap();
        assert_eq!(again.events[0].data["model"], "script:x.json");
        assert_eq!(again.events[0].data["provider"], "script");
        for (i, e) in plan.events.iter().enumerate() {
            assert_eq!((e.seq, e.session_id.as_str()), (i as u64, "child"));
            assert!(p.events.iter().all(|pe| pe.id != e.id), "new ids");
        }
        assert_eq!(plan.events[2].data, p.events[2].data);
        assert_eq!(plan.events[2].ts, p.events[2].ts);
        assert_eq!(plan.resources, ["a".repeat(64), "b".repeat(64)]);
    }

    #[test]
    fn a_cut_closes_pending_calls_and_the_open_turn() {
        let p = parent();
        let plan = plan(
            &p.events,
            "child1",
            Some("root"),
            "/w2",
            Some(6),
            "child2",
            true,
        )
        .unwrap();
        assert_eq!(plan.fork_root_session_id, "root");
        let tail: Vec<_> = plan.events[6..]
            .iter()
            .map(|e| {
                (
                    e.kind.as_str(),
                    e.data["error"]["details"]["reason"]
                        .as_str()
                        .or(e.str_field("reason")),
                )
            })
            .collect();
        assert_eq!(
            tail,
            [
                ("tool_result", Some("fork_cut")),
                ("turn_ended", Some("fork_cut")),
                ("branch_summary", None)
            ]
        );
        assert_eq!(plan.events[6].data["call_id"], "c2");
        let fold = Fold::from_events(&plan.events);
        assert!(fold.pending_calls().is_empty() && fold.open_turn().is_none());
        assert_eq!(fold.workspace(), Some("/w2"));
        let r = fold.replay(&ReplayContext::default());
        assert!(r.stats.balanced && r.stats.synthetic_orphan_closures.is_empty());
        golden!(
            "branch_summary_data.json",
            serde_json::to_string_pretty(&plan.events[8].data).unwrap() + "\n"
        );
    }

    #[test]
    fn to_seq_must_exist() {
        let p = parent();
        let err = plan(&p.events, "par", None, "/w", Some(99), "child", false).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgs);
        assert_eq!(err.details["last_seq"], 10);
        let err = plan(&[], "par", None, "/w", None, "child", false).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArgs);
        assert!(plan(&p.events, "par", None, "/w", None, "../x", false).is_err());
        assert!(plan(&p.events, "par", None, "/w", None, "par", false).is_err());
    }
}
