//! Deterministic digests of event ranges shared by compaction (docs/history-rules.md#compaction) and branch summaries
//! (docs/history-rules.md#fork): message excerpts, touched files, open tasks, counts and resource names.
//!
//! Both summaries must be byte-identical for the same events, so every list here has a
//! fixed order and a fixed bound, and text is cut at UTF-8 boundaries, never mid-char.

use agentd_base::text::utf8_prefix;
use agentd_proto::{Event, EventType};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Bytes kept of one message excerpt.
pub const EXCERPT_BYTES: usize = 480;
/// Message excerpts quoted in a summary (the most recent ones).
pub const SUMMARY_EXCERPTS: usize = 6;
/// Open tasks kept (the most recent ones).
pub const OPEN_TASKS_MAX: usize = 8;
/// Touched paths kept (the most recently touched ones, then sorted).
pub const FILES_TOUCHED_MAX: usize = 64;
/// A path-like string longer than this is not a path worth listing.
const PATH_MAX_BYTES: usize = 1024;

/// Collapses runs of whitespace to one space, trims, and cuts to [`EXCERPT_BYTES`] at a char
/// boundary (with `…` appended when cut).
pub fn excerpt(s: &str) -> String {
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.len() <= EXCERPT_BYTES {
        return collapsed;
    }
    format!("{}…", utf8_prefix(&collapsed, EXCERPT_BYTES))
}

/// Path-like strings an event names: tool_call `args.path`, `args.file`, `args.paths[]`,
/// and tool_result `artifacts[].uri`. Only the host-recorded fields count, never free text.
pub fn touched_paths(ev: &Event) -> Vec<String> {
    let mut out = Vec::new();
    let mut take = |v: Option<&Value>| {
        if let Some(s) = v.and_then(Value::as_str) {
            let s = s.trim();
            if !s.is_empty() && s.len() <= PATH_MAX_BYTES {
                out.push(s.to_string());
            }
        }
    };
    match ev.event_type() {
        EventType::ToolCall => {
            let args = ev.data.get("args");
            take(args.and_then(|a| a.get("path")));
            take(args.and_then(|a| a.get("file")));
            if let Some(list) = args.and_then(|a| a.get("paths")).and_then(Value::as_array) {
                for p in list {
                    take(Some(p));
                }
            }
        }
        EventType::ToolResult => {
            if let Some(list) = ev.data.get("artifacts").and_then(Value::as_array) {
                for a in list {
                    take(a.get("uri"));
                }
            }
        }
        _ => {}
    }
    out
}

/// Keeps the [`FILES_TOUCHED_MAX`] most recently touched paths, then sorts them. `older`
/// (e.g. a previous compaction's list) counts as touched before every path in `newer`.
pub fn bounded_files(older: &[String], newer: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut recent_first = Vec::new();
    for p in newer.iter().rev().chain(older.iter().rev()) {
        if recent_first.len() == FILES_TOUCHED_MAX {
            break;
        }
        if seen.insert(p.as_str()) {
            recent_first.push(p.clone());
        }
    }
    recent_first.sort();
    recent_first
}

/// Tracks user requests not yet followed by a completed turn.
#[derive(Default)]
pub struct OpenTasks {
    tasks: Vec<String>,
}

impl OpenTasks {
    pub fn with(initial: Vec<String>) -> Self {
        OpenTasks { tasks: initial }
    }

    pub fn push(&mut self, ev: &Event) {
        match ev.event_type() {
            EventType::UserMessage => {
                if let Some(t) = ev.str_field("text") {
                    self.tasks.push(excerpt(t));
                }
            }
            EventType::TurnEnded if ev.str_field("status") == Some("completed") => {
                self.tasks.clear()
            }
            _ => {}
        }
    }

    /// The last [`OPEN_TASKS_MAX`] open tasks, oldest first.
    pub fn finish(self) -> Vec<String> {
        let skip = self.tasks.len().saturating_sub(OPEN_TASKS_MAX);
        self.tasks.into_iter().skip(skip).collect()
    }
}

/// `role` and excerpt of a user or (non-partial) assistant message.
pub fn message_excerpt(ev: &Event) -> Option<(&'static str, String)> {
    let role = match ev.event_type() {
        EventType::UserMessage => "user",
        EventType::AssistantMessage if !is_partial(ev) => "assistant",
        _ => return None,
    };
    ev.str_field("text").map(|t| (role, excerpt(t)))
}

pub fn is_partial(ev: &Event) -> bool {
    ev.data
        .get("metadata")
        .and_then(|m| m.get("partial"))
        .and_then(Value::as_bool)
        == Some(true)
}

/// `type=n, type=n` in type-name order.
pub fn counts_line(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".to_string();
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Strings of a JSON array, non-strings skipped.
pub fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn descriptor_sha(v: &Value) -> Option<&str> {
    let s = match v {
        Value::String(s) => Some(s.as_str()),
        Value::Object(o) => o
            .get("sha256")
            .or_else(|| o.get("content_sha256"))
            .and_then(Value::as_str),
        _ => None,
    }?;
    // Only exact content addresses: a name that is not 64 lowercase hex never becomes a path.
    is_sha256_hex(s).then_some(s)
}

/// Resource names (sha256 hex) referenced by `data.resource` and `data.resources[]`: each a
/// descriptor object with `sha256` (or `content_sha256`) or a bare sha256 string.
pub fn resource_names(ev: &Event, out: &mut BTreeSet<String>) {
    if let Some(s) = ev.data.get("resource").and_then(descriptor_sha) {
        out.insert(s.to_string());
    }
    // `images`: a prompt's images (`user_message`) and a tool result's, stored as
    // resources too.
    for key in ["resources", "images"] {
        if let Some(list) = ev.data.get(key).and_then(Value::as_array) {
            for s in list.iter().filter_map(descriptor_sha) {
                out.insert(s.to_string());
            }
        }
    }
    // An MCP result's media (`mcp.media[].resource`: `resources/SHA256`).
    if let Some(media) = ev.data.pointer("/mcp/media").and_then(Value::as_array) {
        for m in media {
            if let Some(s) = m
                .get("resource")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("resources/"))
                .filter(|s| is_sha256_hex(s))
            {
                out.insert(s.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(kind: &str, data: Value) -> Event {
        Event {
            id: "0".repeat(16),
            session_id: "s".into(),
            seq: 0,
            ts: String::new(),
            kind: kind.into(),
            data,
        }
    }

    #[test]
    fn excerpt_collapses_and_cuts_at_char_boundary() {
        assert_eq!(excerpt("  a\n\n b\tc  "), "a b c");
        let long = "é".repeat(400);
        let e = excerpt(&long);
        assert!(e.ends_with('…'));
        assert_eq!(e.len(), 480 + '…'.len_utf8());
    }

    #[test]
    fn paths_come_from_args_and_artifacts_only() {
        let call = ev(
            "tool_call",
            json!({"call_id":"c","name":"x","args":{"path":"a.rs","file":" ","paths":["b","c"],"text":"d.rs"}}),
        );
        assert_eq!(touched_paths(&call), ["a.rs", "b", "c"]);
        let res = ev(
            "tool_result",
            json!({"call_id":"c","ok":true,"artifacts":[{"uri":"file:///w/x"},{"kind":"file"}]}),
        );
        assert_eq!(touched_paths(&res), ["file:///w/x"]);
    }

    #[test]
    fn bounded_files_keeps_most_recent_sorted() {
        let older: Vec<String> = (0..60).map(|i| format!("old{i:02}")).collect();
        let newer: Vec<String> = (0..10).map(|i| format!("new{i}")).collect();
        let out = bounded_files(&older, &newer);
        assert_eq!(out.len(), FILES_TOUCHED_MAX);
        assert!(out.contains(&"new0".to_string()));
        assert!(!out.contains(&"old05".to_string()));
        assert!(out.contains(&"old06".to_string()));
        assert!(out.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn resource_names_accept_only_sha256() {
        let sha = "a".repeat(64);
        let e = ev(
            "tool_result",
            json!({"resource":{"sha256": sha},"resources":["../etc/passwd", {"content_sha256": "b".repeat(64)}]}),
        );
        let mut out = BTreeSet::new();
        resource_names(&e, &mut out);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec![sha, "b".repeat(64)]
        );
        // A tool result's images and an MCP result's media.
        let e = ev(
            "tool_result",
            json!({"images": [{"sha256": "c".repeat(64), "mime": "image/png", "bytes": 3}],
                   "mcp": {"media": [
                       {"type": "image", "resource": format!("resources/{}", "d".repeat(64))},
                       {"type": "image", "resource": "resources/../../etc/passwd"},
                       {"type": "blob", "error": "no space"}]}}),
        );
        let mut out = BTreeSet::new();
        resource_names(&e, &mut out);
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec!["c".repeat(64), "d".repeat(64)]
        );
    }
}
