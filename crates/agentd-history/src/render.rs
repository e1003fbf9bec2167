//! The fixed text formats replay injects as user text (docs/history-rules.md#replay): the latest
//! `history_compaction` and each `branch_summary`.
//!
//! Compaction text (sections always present, in this order):
//! ```text
//! <checkpoint view: data.view verbatim if it is a string, else
//!  "[SESSION_CHECKPOINT json]\n<compact JSON of data.checkpoint>" if it is an object,
//!  else nothing; followed by a blank line when present>
//! [HISTORY_COMPACTION v1]
//! range: seq A..B (N events compacted; strategy S; trigger T)
//! [SUMMARY]
//! <data.summary>
//! [FILES_TOUCHED]
//! - path            (one per line, at most 64; "- (none)" when empty)
//! [OPEN_TASKS]
//! - task
//! [LIMITATIONS]
//! - limitation
//! ```
//! The branch summary uses `[BRANCH_SUMMARY v1]` and a `forked from <parent> at seq N` line
//! in place of the checkpoint and range. Missing fields render as `?` so a hand-appended
//! event still folds. Golden files pin both formats.

use super::digest::{excerpt, string_list, FILES_TOUCHED_MAX};
use serde_json::Value;
use std::fmt::Write;

fn field<'a>(data: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(data, |v, k| v.get(*k))
}

fn scalar(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => "?".to_string(),
    }
}

fn list_section(out: &mut String, title: &str, items: Vec<String>) {
    let _ = writeln!(out, "[{title}]");
    if items.is_empty() {
        out.push_str("- (none)\n");
    }
    let total = items.len();
    for item in items.iter().take(FILES_TOUCHED_MAX) {
        let _ = writeln!(out, "- {}", excerpt(item));
    }
    if total > FILES_TOUCHED_MAX {
        let _ = writeln!(out, "- … and {} more", total - FILES_TOUCHED_MAX);
    }
}

fn tail_sections(out: &mut String, data: &Value) {
    out.push_str("[SUMMARY]\n");
    let summary = data.get("summary").and_then(Value::as_str).unwrap_or("?");
    out.push_str(summary.trim_end());
    out.push('\n');
    list_section(out, "FILES_TOUCHED", string_list(data.get("files_touched")));
    list_section(out, "OPEN_TASKS", string_list(data.get("open_tasks")));
    list_section(out, "LIMITATIONS", string_list(data.get("limitations")));
}

/// The user text replay injects for a `history_compaction` event's `data`.
pub fn compaction_text(data: &Value) -> String {
    let mut out = String::new();
    match (data.get("view"), data.get("checkpoint")) {
        (Some(Value::String(view)), _) => {
            out.push_str(view.trim_end());
            out.push_str("\n\n");
        }
        (_, Some(cp @ Value::Object(_))) => {
            out.push_str("[SESSION_CHECKPOINT json]\n");
            out.push_str(&cp.to_string());
            out.push_str("\n\n");
        }
        _ => {}
    }
    out.push_str("[HISTORY_COMPACTION v1]\n");
    let _ = writeln!(
        out,
        "range: seq {}..{} ({} events compacted; strategy {}; trigger {})",
        scalar(field(data, &["range", "from_seq"])),
        scalar(field(data, &["range", "to_seq"])),
        scalar(data.get("source_event_count")),
        scalar(data.get("strategy")),
        scalar(data.get("trigger")),
    );
    tail_sections(&mut out, data);
    out
}

/// The user text replay injects for a `branch_summary` event's `data`.
pub fn branch_summary_text(data: &Value) -> String {
    let mut out = String::from("[BRANCH_SUMMARY v1]\n");
    let _ = writeln!(
        out,
        "forked from {} at seq {} (parent range seq {}..{}, {} events)",
        scalar(data.get("parent_session_id")),
        scalar(data.get("forked_to_seq")),
        scalar(field(data, &["range", "from_seq"])),
        scalar(field(data, &["range", "to_seq"])),
        scalar(data.get("source_event_count")),
    );
    tail_sections(&mut out, data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::golden;
    use serde_json::json;

    #[test]
    fn compaction_text_uses_view_verbatim_then_sections() {
        let data = json!({
            "strategy": "deterministic_v1", "trigger": "manual",
            "range": {"from_seq": 0, "to_seq": 41}, "source_event_count": 42,
            "checkpoint": {"schema_version": 1},
            "view": "[SESSION_CHECKPOINT v1]\n[TASK]\nfix the parser\n",
            "summary": "Compacted 42 events.\nRecent messages:\n- [seq 3] user: fix it",
            "files_touched": ["src/a.rs", "src/b.rs"],
            "open_tasks": [],
            "limitations": ["The full Log stays authoritative."]
        });
        let text = compaction_text(&data);
        assert!(text.starts_with("[SESSION_CHECKPOINT v1]\n[TASK]\nfix the parser\n\n"));
        golden!("compaction_render.txt", text);
    }

    #[test]
    fn compaction_text_without_view_renders_checkpoint_json_or_nothing() {
        let text = compaction_text(&json!({"checkpoint": {"seq": 3}, "range": {}}));
        assert!(
            text.starts_with("[SESSION_CHECKPOINT json]\n{\"seq\":3}\n\n[HISTORY_COMPACTION v1]\n")
        );
        assert!(text.contains("range: seq ?..? (? events"));
        let bare = compaction_text(&json!({}));
        assert!(bare.starts_with("[HISTORY_COMPACTION v1]\n"));
    }

    #[test]
    fn branch_summary_text_is_stable() {
        let data = json!({
            "strategy": "deterministic_v1", "parent_session_id": "p1", "forked_to_seq": 9,
            "range": {"from_seq": 1, "to_seq": 9}, "source_event_count": 8,
            "summary": "Forked 8 events.", "files_touched": ["a"], "open_tasks": ["do x"],
            "limitations": ["l1"]
        });
        golden!("branch_summary_render.txt", branch_summary_text(&data));
    }
}
