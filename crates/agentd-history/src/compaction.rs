//! The deterministic compaction plan (docs/history-rules.md#compaction).
//!
//! [`plan`] decides which events a new `history_compaction` covers and builds its `data`;
//! the session actor records it (or returns it for `dry_run`). Old events stay in the Log:
//! compaction only changes what replay shows, which is why the plan must never separate a
//! tool call from its result (the result would be dropped from replay as a stray).
//!
//! Cut rule. Candidates are the events after the previous compaction's `to_seq`, minus
//! `history_compaction` events. The last `tail_events` stay raw; the cut index then moves
//! earlier:
//! 1. to the `tool_call` of any tail `tool_result` whose call would be compacted;
//! 2. to the nearest turn boundary at or before it, searching back at most
//!    [`BOUNDARY_SEARCH`] events: a `turn_started`, or a `user_message` not directly after a
//!    `turn_started` (then the `turn_started` is the boundary);
//! 3. step 1 again, since moving to a boundary may split another pair.
//!
//! Nothing is compactable when there are at most `tail_events` candidates or the cut
//! reaches index 0.
//!
//! Carried forward from the previous compaction's data: `range.from_seq`,
//! `source_event_count` and `event_counts` (cumulative), `tool_calls` (the last
//! [`TOOL_CALLS_MAX`]), `files_touched` (the [`FILES_TOUCHED_MAX`] most recently touched,
//! sorted), `open_tasks` (the last [`OPEN_TASKS_MAX`] user messages not followed by a
//! completed turn). The summary quotes only this compaction's messages.

use super::digest::{
    bounded_files, counts_line, message_excerpt, string_list, touched_paths, OpenTasks,
    EXCERPT_BYTES, FILES_TOUCHED_MAX, OPEN_TASKS_MAX, SUMMARY_EXCERPTS,
};
use agentd_proto::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

pub const DEFAULT_TAIL_EVENTS: usize = 40;
/// How far back (in events) the cut may move to reach a turn boundary.
pub const BOUNDARY_SEARCH: usize = 32;
/// Tool calls listed in `data.tool_calls` (the most recent ones).
pub const TOOL_CALLS_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    #[default]
    Manual,
    Pressure,
    OverflowRecovery,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Pressure => "pressure",
            Trigger::OverflowRecovery => "overflow_recovery",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactStrategy {
    #[default]
    Deterministic,
    Model,
}

impl CompactStrategy {
    /// The `data.strategy` value.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactStrategy::Deterministic => "deterministic_v1",
            CompactStrategy::Model => "model_v1",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactOptions {
    pub tail_events: usize,
    pub trigger: Trigger,
    pub strategy: CompactStrategy,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            tail_events: DEFAULT_TAIL_EVENTS,
            trigger: Trigger::Manual,
            strategy: CompactStrategy::Deterministic,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqRange {
    pub from_seq: u64,
    pub to_seq: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionPlan {
    pub compactable: bool,
    /// What the compaction covers (cumulative `from_seq`); `None` when not compactable.
    pub range: Option<SeqRange>,
    /// Events this compaction newly covers.
    pub would_compact_events: usize,
    /// Candidates that stay raw after the cut.
    pub tail_events: usize,
    /// The `history_compaction` event's `data`; `null` when not compactable.
    pub data: Value,
    /// Why nothing is compactable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn u64_at(v: Option<&Value>, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v?, |v, k| v.get(*k))?.as_u64()
}

/// The index where the raw tail starts (see the module doc); 0 means nothing to compact.
pub fn cut_index(cands: &[&Event], tail: usize) -> usize {
    let n = cands.len();
    if n <= tail {
        return 0;
    }
    // For each tool_result, the index of the latest earlier tool_call of its call_id.
    let mut last_call: HashMap<&str, usize> = HashMap::new();
    let mut paired: Vec<Option<usize>> = vec![None; n];
    for (i, e) in cands.iter().enumerate() {
        match (e.event_type(), e.str_field("call_id")) {
            (EventType::ToolCall, Some(id)) => {
                last_call.insert(id, i);
            }
            (EventType::ToolResult, Some(id)) => paired[i] = last_call.get(id).copied(),
            _ => {}
        }
    }
    let pull_pairs = |mut c: usize| {
        let mut i = n;
        while i > c {
            i -= 1;
            if let Some(j) = paired[i] {
                c = c.min(j);
            }
        }
        c
    };
    let is_boundary = |k: usize| match cands[k].event_type() {
        EventType::TurnStarted => true,
        EventType::UserMessage => cands[k - 1].event_type() != EventType::TurnStarted,
        _ => false,
    };
    let mut c = pull_pairs(n - tail);
    if c == 0 || c == n {
        return c;
    }
    let lo = c.saturating_sub(BOUNDARY_SEARCH).max(1);
    if let Some(k) = (lo..=c).rev().find(|&k| is_boundary(k)) {
        c = k;
    }
    pull_pairs(c)
}

/// Plans a compaction of `events` (the whole session, in seq order). `fold_prev` is the
/// latest `history_compaction` ([`Fold::latest_compaction`](super::fold::Fold)), and
/// `checkpoint` the docs/history-rules.md#checkpoint checkpoint as of the new `to_seq`, stored verbatim.
pub fn plan(
    events: &[Event],
    fold_prev: Option<&Event>,
    opts: &CompactOptions,
    checkpoint: Value,
) -> CompactionPlan {
    let prev = fold_prev.map(|e| &e.data);
    let prev_to = u64_at(prev, &["range", "to_seq"]);
    let cands: Vec<&Event> = events
        .iter()
        .filter(|e| e.event_type() != EventType::HistoryCompaction)
        .filter(|e| prev_to.is_none_or(|t| e.seq > t))
        .collect();
    let c = cut_index(&cands, opts.tail_events);
    if c == 0 {
        return CompactionPlan {
            compactable: false,
            range: None,
            would_compact_events: 0,
            tail_events: cands.len(),
            data: Value::Null,
            reason: Some(if cands.len() <= opts.tail_events {
                format!(
                    "{} events since the last compaction; the tail keeps {}",
                    cands.len(),
                    opts.tail_events
                )
            } else {
                "no cut keeps every tool_call with its tool_result".to_string()
            }),
        };
    }
    let (prefix, tail) = cands.split_at(c);
    let first_seq = prefix[0].seq;
    let to_seq = prefix[c - 1].seq;
    let from_seq = u64_at(prev, &["range", "from_seq"]).unwrap_or(first_seq);
    let source_event_count = u64_at(prev, &["source_event_count"])
        .unwrap_or(0)
        .saturating_add(c as u64);

    let mut this_counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut counts: BTreeMap<String, u64> = prev
        .and_then(|p| p.get("event_counts"))
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    let mut tool_calls: Vec<Value> = prev
        .and_then(|p| p.get("tool_calls"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut new_calls: Vec<&str> = Vec::new();
    let mut paths = Vec::new();
    let mut open = OpenTasks::with(string_list(prev.and_then(|p| p.get("open_tasks"))));
    let mut excerpts = Vec::new();
    for e in prefix {
        *this_counts.entry(e.kind.clone()).or_default() += 1;
        *counts.entry(e.kind.clone()).or_default() += 1;
        if e.event_type() == EventType::ToolCall {
            if let Some(id) = e.str_field("call_id") {
                let name = e.str_field("name").unwrap_or("");
                tool_calls.push(json!({"seq": e.seq, "call_id": id, "name": name}));
                new_calls.push(name);
            }
        }
        paths.extend(touched_paths(e));
        open.push(e);
        if let Some((role, text)) = message_excerpt(e) {
            excerpts.push((e.seq, role, text));
        }
    }
    let skip = tool_calls.len().saturating_sub(TOOL_CALLS_MAX);
    let tool_calls: Vec<Value> = tool_calls.into_iter().skip(skip).collect();
    let files = bounded_files(
        &string_list(prev.and_then(|p| p.get("files_touched"))),
        &paths,
    );
    let open_tasks = open.finish();

    let mut summary = format!(
        "Compacted {source_event_count} events in total (seq {from_seq}..{to_seq}); this compaction covers {c} events (seq {first_seq}..{to_seq}).\n"
    );
    let _ = writeln!(
        summary,
        "Event counts (this compaction): {}.",
        counts_line(&this_counts)
    );
    let last_names = &new_calls[new_calls.len().saturating_sub(5)..];
    if last_names.is_empty() {
        summary.push_str("Tool calls: none in this compaction.\n");
    } else {
        let _ = writeln!(
            summary,
            "Tool calls: {} in this compaction; last: {}.",
            new_calls.len(),
            last_names.join(", ")
        );
    }
    let _ = writeln!(
        summary,
        "Files touched: {}. Open tasks: {}.",
        files.len(),
        open_tasks.len()
    );
    if let (Some(pf), Some(pt)) = (u64_at(prev, &["range", "from_seq"]), prev_to) {
        let _ = writeln!(
            summary,
            "Earlier compaction: seq {pf}..{pt} (its summary stays in the Log)."
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

    let mut limitations = vec![
        format!("The full Log stays authoritative: every event up to seq {to_seq} is still in it; compaction only replaces them in replay."),
        format!("Deterministic digest, not a narrative: message excerpts are whitespace-collapsed and cut to {EXCERPT_BYTES} bytes, and only the last {SUMMARY_EXCERPTS} are quoted."),
        format!("Tool outputs and reasoning of the compacted range are not replayed; tool_calls keeps the last {TOOL_CALLS_MAX} calls, files_touched the {FILES_TOUCHED_MAX} most recently touched paths, open_tasks the last {OPEN_TASKS_MAX}."),
    ];
    if prev.is_some() {
        limitations.push("Earlier compaction summaries are not repeated; counts, tool_calls, files_touched and open_tasks are carried forward.".to_string());
    }

    let data = json!({
        "strategy": opts.strategy.as_str(),
        "trigger": opts.trigger.as_str(),
        "range": {"from_seq": from_seq, "to_seq": to_seq},
        "source_event_count": source_event_count,
        "tail_event_count": tail.len(),
        "event_counts": counts,
        "tool_calls": tool_calls,
        "files_touched": files,
        "open_tasks": open_tasks,
        "checkpoint": checkpoint,
        "summary": summary,
        "limitations": limitations,
    });
    CompactionPlan {
        compactable: true,
        range: Some(SeqRange { from_seq, to_seq }),
        would_compact_events: c,
        tail_events: tail.len(),
        data,
        reason: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{Fold, ReplayContext};
    use crate::golden::golden;
    use crate::render;
    use crate::testutil::TestLog;
    use agentd_proto::replay::ReplayItem;

    fn opts(tail: usize) -> CompactOptions {
        CompactOptions {
            tail_events: tail,
            ..CompactOptions::default()
        }
    }

    fn turn(log: &mut TestLog, n: usize, text: &str, calls: &[(&str, &str)]) {
        log.push("turn_started", json!({"turn_id": format!("t{n}")}));
        log.push("user_message", json!({"text": text}));
        for (id, path) in calls {
            log.push(
                "tool_call",
                json!({"call_id": id, "name": "read_file", "args": {"path": path}}),
            );
            log.push(
                "permission_decision",
                json!({"call_id": id, "decision": "allow"}),
            );
            log.push("tool_result", json!({"call_id": id, "ok": true, "output": "contents", "artifacts": [{"uri": format!("file:///w/{path}"), "kind": "file"}]}));
        }
        log.push(
            "assistant_message",
            json!({"text": format!("answer {n}:\n  done   with {text}")}),
        );
        log.push(
            "turn_ended",
            json!({"turn_id": format!("t{n}"), "status": "completed"}),
        );
    }

    fn fixture() -> TestLog {
        let mut log = TestLog::new();
        log.push(
            "session_started",
            json!({"workspace": "/w", "agentd_version": "0.1.0", "log_format": 1}),
        );
        turn(
            &mut log,
            1,
            "read the parser",
            &[("c1", "src/parser.rs"), ("c2", "src/lexer.rs")],
        );
        turn(
            &mut log,
            2,
            "now   the\tlexer tests",
            &[("c3", "tests/lex.rs")],
        );
        log.push("turn_started", json!({"turn_id": "t3"}));
        log.push(
            "user_message",
            json!({"text": "fix the failing test ".repeat(40)}),
        );
        log.push("tool_call", json!({"call_id": "c4", "name": "edit_file", "args": {"path": "src/lexer.rs", "old": "a", "new": "b"}}));
        log.push(
            "tool_result",
            json!({"call_id": "c4", "ok": true, "output": "edited"}),
        );
        log
    }

    #[test]
    fn simple_prefix_matches_the_reference_shape() {
        let mut log = TestLog::new();
        for i in 0..5 {
            log.push("user_message", json!({"text": format!("m{i}")}));
        }
        let p = plan(&log.events, None, &opts(2), json!({}));
        assert!(p.compactable);
        assert_eq!(
            p.range,
            Some(SeqRange {
                from_seq: 0,
                to_seq: 2
            })
        );
        assert_eq!((p.would_compact_events, p.tail_events), (3, 2));
    }

    #[test]
    fn not_compactable_when_tail_covers_everything() {
        let mut log = TestLog::new();
        for i in 0..5 {
            log.push("user_message", json!({"text": format!("m{i}")}));
        }
        let p = plan(&log.events, None, &opts(5), json!({}));
        assert!(!p.compactable && p.data.is_null() && p.range.is_none());
        assert!(p.reason.unwrap().contains("5 events"));
        // A call whose result lands in the tail pulls the cut to index 0.
        let mut log = TestLog::new();
        log.push(
            "tool_call",
            json!({"call_id": "a", "name": "x", "args": {}}),
        );
        log.push("user_message", json!({"text": "u"}));
        log.push(
            "tool_result",
            json!({"call_id": "a", "ok": true, "output": ""}),
        );
        let p = plan(&log.events, None, &opts(1), json!({}));
        assert!(!p.compactable);
    }

    #[test]
    fn cut_keeps_pairs_and_prefers_turn_boundaries() {
        let log = fixture();
        // Tail 1 would start at the c4 result: the cut moves to its call, then to turn t3.
        let p = plan(&log.events, None, &opts(1), json!({}));
        let to = p.range.unwrap().to_seq;
        assert_eq!(log.events[to as usize + 1].kind, "turn_started");
        assert_eq!(p.tail_events, 4);
        // Tail 8 would start inside turn 2's tool exchange: it moves back to turn 2's start.
        let p = plan(&log.events, None, &opts(8), json!({}));
        let next = &log.events[p.range.unwrap().to_seq as usize + 1];
        assert_eq!(
            (next.kind.as_str(), next.str_field("turn_id")),
            ("turn_started", Some("t2"))
        );
    }

    #[test]
    fn data_and_summary_are_golden() {
        let mut log = fixture();
        // Turn t3 never completes: its long request stays an open task.
        log.push("turn_started", json!({"turn_id": "t4"}));
        log.push("user_message", json!({"text": "then ship it"}));
        log.push("assistant_message", json!({"text": "shipped"}));
        let p = plan(&log.events, None, &opts(3), json!({"schema_version": 1}));
        assert_eq!(p.tail_events, 3);
        assert_eq!(p.data["open_tasks"].as_array().unwrap().len(), 1);
        golden!(
            "compaction_summary.txt",
            p.data["summary"].as_str().unwrap().to_string() + "\n"
        );
        golden!(
            "compaction_data.json",
            serde_json::to_string_pretty(&p.data).unwrap() + "\n"
        );
    }

    #[test]
    fn replay_after_compaction_is_render_plus_raw_tail() {
        let mut log = fixture();
        let p = plan(&log.events, None, &opts(4), json!({}));
        let to = p.range.unwrap().to_seq;
        let data = p.data.clone();
        log.push("history_compaction", data.clone());
        let ctx = ReplayContext::default();
        let r = Fold::from_events(&log.events).replay(&ctx);
        assert!(r.stats.balanced);
        assert_eq!(
            r.items[1],
            ReplayItem::User {
                text: render::compaction_text(&data),
                images: Vec::new(),
            }
        );
        let raw_tail: Vec<_> = log.events[..log.events.len() - 1]
            .iter()
            .filter(|e| e.seq > to)
            .cloned()
            .collect();
        let tail_only = Fold::from_events(&raw_tail).replay(&ctx);
        assert_eq!(r.items[2..], tail_only.items[1..]);
        assert!(r.stats.synthetic_orphan_closures.is_empty());
    }

    #[test]
    fn second_compaction_carries_lists_forward() {
        let mut log = fixture();
        let first = plan(&log.events, None, &opts(4), json!({}));
        log.push("history_compaction", first.data.clone());
        turn(&mut log, 4, "and the docs", &[("c5", "README.md")]);
        turn(&mut log, 5, "last one", &[]);
        let fold = Fold::from_events(&log.events);
        let second = plan(&log.events, fold.latest_compaction(), &opts(4), json!({}));
        assert!(second.compactable);
        let d = &second.data;
        assert_eq!(d["range"]["from_seq"], first.data["range"]["from_seq"]);
        assert_eq!(
            d["source_event_count"].as_u64().unwrap(),
            first.data["source_event_count"].as_u64().unwrap() + second.would_compact_events as u64
        );
        let names: Vec<_> = d["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call_id"].clone())
            .collect();
        assert_eq!(
            names,
            [
                json!("c1"),
                json!("c2"),
                json!("c3"),
                json!("c4"),
                json!("c5")
            ]
        );
        let files = string_list(d.get("files_touched"));
        assert!(
            files.contains(&"src/parser.rs".to_string())
                && files.contains(&"README.md".to_string())
        );
        assert_eq!(
            d["event_counts"]["user_message"].as_u64().unwrap(),
            4,
            "cumulative over both compactions"
        );
        assert!(d["summary"]
            .as_str()
            .unwrap()
            .contains("Earlier compaction: seq 0.."));
        assert!(
            d["open_tasks"].as_array().unwrap().is_empty(),
            "every turn completed"
        );
        let mut log2 = log.clone();
        log2.push("history_compaction", d.clone());
        let r = Fold::from_events(&log2.events).replay(&ReplayContext::default());
        assert!(r.stats.balanced);
    }
}
