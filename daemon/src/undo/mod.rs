//! Seeing and undoing what a session did to its workspace (DESIGN §13): the snapshots
//! a turn records, `agentd/diff`, `agentd/revert`, and the `files` of `agentd/fork`.
//!
//! The pieces: [`crate::snapshot`] does the git work and knows nothing of sessions;
//! [`crate::history::snapshots`] reads the timeline off a session's events; this module
//! asks the session actor for its events, calls both, and records the result as events
//! through the actor.

pub mod turn;

pub use turn::TurnSnapshots;

use crate::snapshot::Snapshot;
use serde_json::{json, Value};

/// `data` of a `workspace_snapshot` event for a snapshot taken.
pub fn snapshot_data(s: &Snapshot, reason: &str, call_id: Option<&str>) -> Value {
    let mut d = json!({"tree": s.tree, "files_changed": s.files_changed, "reason": reason});
    if let Some(c) = call_id {
        d["call_id"] = json!(c);
    }
    if s.skipped_count > 0 {
        d["skipped"] = json!(s.skipped);
        d["skipped_count"] = json!(s.skipped_count);
    }
    if let Some(why) = &s.rebuilt {
        d["rebuilt"] = json!({"reason": why});
    }
    if s.previous_missing {
        d["previous_missing"] = json!(true);
    }
    if !s.warnings.is_empty() {
        d["warnings"] = json!(s.warnings);
    }
    d
}
