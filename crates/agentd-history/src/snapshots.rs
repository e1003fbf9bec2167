//! The workspace timeline of a session (docs/snapshots.md): which tree stands for the files at
//! a seq, and which files the session itself changed in a range. Pure over events.
//!
//! Marks are `workspace_snapshot` and `workspace_revert` events that carry a tree. A
//! mark is a *change* when the session made it: a snapshot after a mutating tool call
//! (`reason:"after"`) or a revert. Every other snapshot (`before` a turn's first
//! mutating call, `before_revert`, `fork_worktree`) records the files as the session
//! found them; what it lists as changed since the previous mark was changed by someone
//! else (the user, another program).
//!
//! The files "at seq N" are the tree of the first mark after N when that mark is not a
//! change (nothing the session did lies between N and it, and it already has the user's
//! later edits, which a revert must keep), else the latest mark at or before N, else the
//! first mark after N.

use agentd_proto::{Event, EventType};
use serde_json::Value;
use std::collections::BTreeSet;

/// `reason` of the snapshot taken after a mutating tool call.
pub const REASON_AFTER: &str = "after";
/// `reason` of the snapshot taken before a turn's first mutating tool call.
pub const REASON_BEFORE: &str = "before";
/// `reason` of the snapshot a revert takes of the files it is about to change.
pub const REASON_BEFORE_REVERT: &str = "before_revert";
/// `reason` of the first snapshot of a fork child with its own worktree.
pub const REASON_FORK_WORKTREE: &str = "fork_worktree";

#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub seq: u64,
    pub tree: String,
    pub change: bool,
    pub files_changed: Vec<String>,
}

/// The session's marks in seq order, and the seqs of snapshots that failed (no tree).
pub fn marks(events: &[Event]) -> (Vec<Mark>, Vec<u64>) {
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for e in events {
        let ty = e.event_type();
        if !matches!(
            ty,
            EventType::WorkspaceSnapshot | EventType::WorkspaceRevert
        ) {
            continue;
        }
        let Some(tree) = e.str_field("tree") else {
            failed.push(e.seq);
            continue;
        };
        let files_changed = e
            .data
            .get("files_changed")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        out.push(Mark {
            seq: e.seq,
            tree: tree.to_string(),
            change: ty == EventType::WorkspaceRevert || e.str_field("reason") == Some(REASON_AFTER),
            files_changed,
        });
    }
    out.sort_by_key(|m| m.seq);
    (out, failed)
}

/// The tree of the session's latest mark.
pub fn latest_tree(events: &[Event]) -> Option<String> {
    marks(events).0.pop().map(|m| m.tree)
}

/// The mark standing for the files at `seq` (see the module doc); `None` = the first.
pub fn base(marks: &[Mark], seq: Option<u64>) -> Option<&Mark> {
    let Some(n) = seq else {
        return marks.first();
    };
    let next = marks.iter().find(|m| m.seq > n);
    if let Some(m) = next.filter(|m| !m.change) {
        return Some(m);
    }
    marks.iter().rev().find(|m| m.seq <= n).or(next)
}

/// The latest mark at or before `seq` (the files as a range ends at `seq`).
pub fn at_or_before(marks: &[Mark], seq: u64) -> Option<&Mark> {
    marks.iter().rev().find(|m| m.seq <= seq)
}

/// Files the session changed in marks with `after < seq <= upto`, sorted.
pub fn session_changes(marks: &[Mark], after: Option<u64>, upto: u64) -> Vec<String> {
    let mut set = BTreeSet::new();
    for m in marks {
        if m.change && after.is_none_or(|a| m.seq > a) && m.seq <= upto {
            set.extend(m.files_changed.iter().cloned());
        }
    }
    set.into_iter().collect()
}

/// Of `paths`, those someone other than the session changed after `since`.
pub fn outside_changes(marks: &[Mark], since: u64, paths: &[String]) -> Vec<String> {
    let mut set = BTreeSet::new();
    for m in marks {
        if !m.change && m.seq > since {
            set.extend(
                m.files_changed
                    .iter()
                    .filter(|p| paths.contains(p))
                    .cloned(),
            );
        }
    }
    set.into_iter().collect()
}

/// A revert of the session's files to their state at `to_seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct RevertPlan {
    /// The mark whose tree the files return to.
    pub target: Mark,
    /// Files the session changed after `to_seq`.
    pub paths: Vec<String>,
    /// Of those, files someone else changed after the target mark.
    pub changed_by_others: Vec<String>,
    /// The latest mark: the files as the session last saw them.
    pub latest: Mark,
    /// Snapshots after `to_seq` that failed: changes they would have listed are unknown.
    pub failed_after: Vec<u64>,
}

/// Plans a revert to `to_seq`; `None` when the session has no snapshot at all.
pub fn plan_revert(events: &[Event], to_seq: u64) -> Option<RevertPlan> {
    let (marks, failed) = marks(events);
    let target = base(&marks, Some(to_seq))?.clone();
    let latest = marks.last()?.clone();
    let paths = session_changes(&marks, Some(to_seq), u64::MAX);
    let changed_by_others = outside_changes(&marks, target.seq, &paths);
    Some(RevertPlan {
        target,
        paths,
        changed_by_others,
        latest,
        failed_after: failed.into_iter().filter(|s| *s > to_seq).collect(),
    })
}

/// The seq range of turn `turn_id`: its `turn_started` and its `turn_ended` (or the last
/// event while it runs).
pub fn turn_range(events: &[Event], turn_id: &str) -> Option<(u64, u64)> {
    let is_turn = |e: &&Event| e.str_field("turn_id") == Some(turn_id);
    let start = events
        .iter()
        .filter(|e| e.event_type() == EventType::TurnStarted)
        .find(is_turn)?
        .seq;
    let end = events
        .iter()
        .filter(|e| e.seq > start && e.event_type() == EventType::TurnEnded)
        .find(is_turn)
        .map(|e| e.seq)
        .or_else(|| events.last().map(|e| e.seq))?;
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, kind: &str, data: Value) -> Event {
        Event {
            id: format!("{seq:016x}"),
            session_id: "s".into(),
            seq,
            ts: "2026-11-22T00:00:00.000000Z".into(),
            kind: kind.into(),
            data,
        }
    }

    fn snap(seq: u64, tree: &str, reason: &str, files: &[&str]) -> Event {
        ev(
            seq,
            "workspace_snapshot",
            json!({"tree": tree, "reason": reason, "files_changed": files}),
        )
    }

    /// Turn 1 changes a.txt (seqs 3–5); the user edits u.txt and a.txt between turns
    /// (seen by turn 2's `before` at 9); turn 2 changes a.txt and b.txt.
    fn log() -> Vec<Event> {
        vec![
            ev(0, "session_started", json!({"workspace": "/w"})),
            ev(1, "turn_started", json!({"turn_id": "t1"})),
            ev(2, "tool_call", json!({"call_id": "c1"})),
            snap(3, "T0", "before", &[]),
            snap(4, "T1", "after", &["a.txt"]),
            ev(5, "tool_result", json!({"call_id": "c1", "ok": true})),
            ev(
                6,
                "turn_ended",
                json!({"turn_id": "t1", "status": "completed"}),
            ),
            ev(7, "turn_started", json!({"turn_id": "t2"})),
            ev(8, "tool_call", json!({"call_id": "c2"})),
            snap(9, "T2", "before", &["u.txt"]),
            snap(10, "T3", "after", &["a.txt", "b.txt"]),
            ev(11, "tool_result", json!({"call_id": "c2", "ok": true})),
            ev(
                12,
                "workspace_snapshot",
                json!({"tree": null, "reason": "after", "files_changed": [], "error": {"kind": "timeout"}}),
            ),
            ev(
                13,
                "turn_ended",
                json!({"turn_id": "t2", "status": "completed"}),
            ),
        ]
    }

    #[test]
    fn base_prefers_the_next_before_snapshot() {
        let (m, failed) = marks(&log());
        assert_eq!(failed, vec![12]);
        let tree = |s| base(&m, s).map(|m| m.tree.as_str());
        assert_eq!(tree(None), Some("T0"));
        assert_eq!(tree(Some(0)), Some("T0"), "before any snapshot: the first");
        assert_eq!(tree(Some(3)), Some("T0"));
        assert_eq!(
            tree(Some(5)),
            Some("T2"),
            "between turns: the next turn's before"
        );
        assert_eq!(tree(Some(10)), Some("T3"));
        assert_eq!(tree(Some(99)), Some("T3"));
    }

    #[test]
    fn revert_plan_lists_session_changes_and_others_edits() {
        let events = log();
        let p = plan_revert(&events, 6).unwrap();
        assert_eq!(p.target.tree, "T2");
        assert_eq!(p.paths, vec!["a.txt", "b.txt"]);
        assert!(
            p.changed_by_others.is_empty(),
            "u.txt was not changed by the session"
        );
        assert_eq!(p.failed_after, vec![12]);
        let p = plan_revert(&events, 2).unwrap();
        assert_eq!(p.target.tree, "T0");
        assert_eq!(p.paths, vec!["a.txt", "b.txt"]);
        assert_eq!(p.latest.tree, "T3");
        assert!(p.changed_by_others.is_empty());
        assert!(plan_revert(&events[..3], 1).is_none());
    }

    #[test]
    fn a_user_edit_after_the_target_is_a_conflict() {
        let mut events = log();
        // The user also edited a.txt between the turns.
        events[9] = snap(9, "T2", "before", &["u.txt", "a.txt"]);
        let p = plan_revert(&events, 2).unwrap();
        assert_eq!(p.target.tree, "T0");
        assert_eq!(p.changed_by_others, vec!["a.txt"]);
        // Back to the end of turn 1: the target already holds the user's edit.
        let p = plan_revert(&events, 4).unwrap();
        assert_eq!(p.target.tree, "T2");
        assert!(p.changed_by_others.is_empty());
    }

    #[test]
    fn turn_ranges_and_changes() {
        let events = log();
        assert_eq!(turn_range(&events, "t1"), Some((1, 6)));
        assert_eq!(turn_range(&events, "t2"), Some((7, 13)));
        assert_eq!(turn_range(&events, "t3"), None);
        let (m, _) = marks(&events);
        assert_eq!(session_changes(&m, Some(1), 6), vec!["a.txt"]);
        assert_eq!(at_or_before(&m, 6).unwrap().tree, "T1");
    }
}
