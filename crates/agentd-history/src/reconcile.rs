//! Orphan reconciliation (docs/history-rules.md#reconciliation): the events that close tool calls left without a
//! result and turns left without an end.
//!
//! The owner computes pending calls with [`Fold::pending_calls`](super::fold::Fold) and
//! appends what [`closures`] returns; once appended, the fold has no pending calls, so
//! reconciling again records nothing.

use super::fold::PendingCall;
use agentd_proto::{EventDraft, EventType};
use serde_json::json;

/// Why pending calls were closed; recorded as `details.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileReason {
    BeforeStartTurn,
    Interrupt,
    InterruptNoTurn,
    Explicit,
    DaemonRestart,
    ForkCut,
}

impl ReconcileReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileReason::BeforeStartTurn => "before_start_turn",
            ReconcileReason::Interrupt => "interrupt",
            ReconcileReason::InterruptNoTurn => "interrupt_no_turn",
            ReconcileReason::Explicit => "explicit",
            ReconcileReason::DaemonRestart => "daemon_restart",
            ReconcileReason::ForkCut => "fork_cut",
        }
    }
}

/// Prefix of the model-visible names of MCP tools.
const MCP_PREFIX: &str = "mcp__";

/// One `tool_result{ok:false, error{kind:"orphan_tool_call"}}` per pending call, sorted by
/// `call_id` (a call id listed twice is closed once).
pub fn closures(pending: &[PendingCall], reason: ReconcileReason) -> Vec<EventDraft> {
    let mut sorted: Vec<&PendingCall> = pending.iter().collect();
    sorted.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    sorted.dedup_by(|a, b| a.call_id == b.call_id);
    sorted
        .into_iter()
        .map(|p| {
            let mut details =
                json!({"call_id": p.call_id, "tool": p.name, "reason": reason.as_str()});
            // An MCP call may have reached its server: its effect is unknown, and it is
            // never retried (docs/mcp.md#contract).
            // An interrupt closes only calls it stopped before they were sent.
            let message = if p.name.starts_with(MCP_PREFIX) && reason != ReconcileReason::Interrupt
            {
                details["outcome"] = json!("unknown");
                format!(
                    "the MCP call `{}` was cut ({}) before its result was recorded; it may or may \
                     not have taken effect on the server, and it was not retried",
                    p.name,
                    reason.as_str()
                )
            } else {
                "agentd reconciled a tool_call that had no recorded tool_result".to_string()
            };
            EventDraft::new(
                EventType::ToolResult,
                json!({
                    "call_id": p.call_id,
                    "ok": false,
                    "error": {
                        "kind": "orphan_tool_call",
                        "message": message,
                        "details": details
                    }
                }),
            )
        })
        .collect()
}

/// Built-in tools that only read, so running a call again after a crash cannot change
/// anything (docs/durability.md). MCP tools are replay-safe when the user trusts them
/// read-only and the server declares `readOnlyHint`; the turn engine decides those.
pub const REPLAY_SAFE_TOOLS: [&str; 3] = ["read_file", "list_dir", "search"];

/// The `tool_result` that closes a call cut by a crash and not run again:
/// `error{kind:"outcome_unknown"}`, whose message tells the model the call may or may
/// not have taken effect and to check before repeating it.
pub fn outcome_unknown(call: &PendingCall) -> EventDraft {
    let message = format!(
        "the `{}` call was cut by a daemon crash before its result was recorded; it may or \
         may not have taken effect, and it was not run again. Check its effect (for example \
         read the files or state it would have changed) before repeating it.",
        call.name
    );
    EventDraft::new(
        EventType::ToolResult,
        json!({
            "call_id": call.call_id,
            "ok": false,
            "error": {
                "kind": "outcome_unknown",
                "message": message,
                "details": {"call_id": call.call_id, "tool": call.name,
                            "reason": ReconcileReason::DaemonRestart.as_str(),
                            "outcome": "unknown"}
            }
        }),
    )
}

/// `turn_ended{status:"interrupted"}` for a turn that will never finish.
pub fn turn_end_interrupted(turn_id: &str, reason: ReconcileReason) -> EventDraft {
    EventDraft::new(
        EventType::TurnEnded,
        json!({"turn_id": turn_id, "status": "interrupted", "reason": reason.as_str()}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{Fold, ReplayContext};
    use crate::testutil::TestLog;
    use agentd_proto::event::validate_draft;

    #[test]
    fn closures_are_sorted_valid_and_idempotent() {
        let mut log = TestLog::new();
        log.push("turn_started", json!({"turn_id": "t1"}));
        for id in ["zeta", "alpha", "mid"] {
            log.push(
                "tool_call",
                json!({"call_id": id, "name": "shell", "args": {}}),
            );
        }
        log.push(
            "tool_result",
            json!({"call_id": "mid", "ok": true, "output": "x"}),
        );
        let mut fold = Fold::from_events(&log.events);
        let drafts = closures(&fold.pending_calls(), ReconcileReason::Interrupt);
        let ids: Vec<_> = drafts.iter().map(|d| d.data["call_id"].clone()).collect();
        assert_eq!(ids, [json!("alpha"), json!("zeta")]);
        assert_eq!(drafts[0].data["error"]["details"]["reason"], "interrupt");
        assert_eq!(drafts[1].data["error"]["details"]["tool"], "shell");
        let end = turn_end_interrupted(&fold.open_turn().unwrap(), ReconcileReason::Interrupt);
        for d in drafts.iter().chain([&end]) {
            assert!(validate_draft(d).is_ok(), "{d:?}");
            let ev = log.push_draft(d).clone();
            fold.push(&ev);
        }
        assert!(fold.pending_calls().is_empty());
        assert_eq!(fold.open_turn(), None);
        assert!(closures(&fold.pending_calls(), ReconcileReason::Explicit).is_empty());
        let r = fold.replay(&ReplayContext::default());
        assert!(r.stats.balanced && r.stats.synthetic_orphan_closures.is_empty());
    }

    #[test]
    fn reasons_have_contract_names() {
        let all = [
            ReconcileReason::BeforeStartTurn,
            ReconcileReason::Interrupt,
            ReconcileReason::InterruptNoTurn,
            ReconcileReason::Explicit,
            ReconcileReason::DaemonRestart,
            ReconcileReason::ForkCut,
        ];
        let names: Vec<_> = all.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names.join(" "),
            "before_start_turn interrupt interrupt_no_turn explicit daemon_restart fork_cut"
        );
    }
}
