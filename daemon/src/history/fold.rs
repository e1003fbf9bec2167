//! The folded in-memory state of one session and its provider replay (DESIGN §7.1, §7.2).
//!
//! The session actor pushes every loaded and every appended event into one [`Fold`], in
//! order. `push` is O(1) amortized and converts each replayable event into its
//! [`ReplayItem`] once, so building provider input later never re-reads or re-parses the
//! Log. A `history_compaction` drops the items it covers, which keeps [`Fold::replay`] at
//! O(events since the latest compaction) however long the Log grows.
//!
//! Replay pairing guard: function calls of one assistant step are followed by their
//! outputs. A replayed item that is neither (or the end of the input, or a new call after
//! the step's outputs began) closes the calls still pending, sorted by `call_id`, with a
//! synthetic `orphan_tool_call` output; an output whose call is not pending is dropped.
//! `stats.balanced` is then checked on the produced items, not assumed.

use super::render;
use agentd_proto::replay::ReplayItem;
use agentd_proto::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A `tool_call` with no later `tool_result` of the same `call_id` (§7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    pub seq: u64,
}

/// What replay needs besides the Log: the developer context and the request model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayContext {
    pub workspace: String,
    pub permission_mode: String,
    /// Reasoning items are replayed only when their `data.model` equals this.
    pub model: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyntheticClosure {
    pub call_id: String,
    pub tool: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayStats {
    pub items: usize,
    pub function_calls: usize,
    pub function_call_outputs: usize,
    pub synthetic_orphan_closures: Vec<SyntheticClosure>,
    pub balanced: bool,
    /// An estimate, not a tokenizer count: characters of all item text / 4, rounded up.
    /// Text is message text, reasoning item JSON, call name + arguments, and outputs.
    pub estimated_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_to_seq: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub items: Vec<ReplayItem>,
    pub stats: ReplayStats,
}

/// A replayable event, converted once at push time.
#[derive(Debug, Clone)]
struct Entry {
    seq: u64,
    chars: u64,
    item: ReplayItem,
}

#[derive(Debug, Clone, Default)]
pub struct Fold {
    last_seq: Option<u64>,
    event_count: u64,
    event_counts: BTreeMap<String, u64>,
    unknown_types: BTreeMap<String, u64>,
    pending: HashMap<String, (String, u64)>,
    open_turn: Option<String>,
    workspace: Option<String>,
    title: Option<String>,
    latest_compaction: Option<Event>,
    compaction_item: Option<Entry>,
    checkpoint_to_seq: Option<u64>,
    /// Replayable items with seq > `checkpoint_to_seq`, in push order.
    entries: Vec<Entry>,
    /// Set when an entry arrived with a lower seq than the one before it (a damaged Log);
    /// replay then sorts by seq, stably.
    disordered: bool,
}

fn item_chars(item: &ReplayItem) -> u64 {
    let n = match item {
        ReplayItem::Developer { text }
        | ReplayItem::User { text }
        | ReplayItem::Assistant { text } => text.chars().count(),
        ReplayItem::Reasoning { item, .. } => item.to_string().chars().count(),
        ReplayItem::FunctionCall {
            name, arguments, ..
        } => name.chars().count() + arguments.chars().count(),
        ReplayItem::FunctionCallOutput { output, .. } => output.chars().count(),
    };
    n as u64
}

fn entry(seq: u64, item: ReplayItem) -> Entry {
    Entry {
        seq,
        chars: item_chars(&item),
        item,
    }
}

/// The developer context item's text.
pub fn developer_text(ctx: &ReplayContext) -> String {
    format!(
        "Developer context: the workspace root is {}; tool paths resolve inside it. Permission mode: {}.",
        Value::String(ctx.workspace.clone()),
        ctx.permission_mode
    )
}

fn synthetic_output(call_id: &str, tool: &str) -> String {
    json!({
        "ok": false,
        "error": {
            "kind": "orphan_tool_call",
            "message": "agentd replay found a tool_call without a matching tool_result",
            "details": {"call_id": call_id, "tool": tool}
        }
    })
    .to_string()
}

/// The replay item of one event, or `None` for events replay never shows.
fn replay_item(ev: &Event) -> Option<ReplayItem> {
    let text = || ev.str_field("text").map(str::to_string);
    match ev.event_type() {
        EventType::UserMessage => text().map(|text| ReplayItem::User { text }),
        EventType::AssistantMessage if !super::digest::is_partial(ev) => {
            text().map(|text| ReplayItem::Assistant { text })
        }
        EventType::Reasoning => Some(ReplayItem::Reasoning {
            item: ev.data.get("item")?.clone(),
            model: ev.str_field("model")?.to_string(),
        }),
        EventType::ToolCall => Some(ReplayItem::FunctionCall {
            call_id: ev.str_field("call_id")?.to_string(),
            name: ev.str_field("name").unwrap_or("").to_string(),
            arguments: ev
                .data
                .get("args")
                .map_or_else(|| "{}".to_string(), Value::to_string),
        }),
        EventType::ToolResult => {
            let call_id = ev.str_field("call_id")?.to_string();
            let output = match ev.data.get("output") {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    let rest: serde_json::Map<String, Value> = ev
                        .data
                        .as_object()?
                        .iter()
                        .filter(|(k, _)| k.as_str() != "call_id")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    Value::Object(rest).to_string()
                }
            };
            Some(ReplayItem::FunctionCallOutput {
                call_id,
                output,
                ok: ev.data.get("ok").and_then(Value::as_bool).unwrap_or(false),
                synthetic: false,
            })
        }
        EventType::BranchSummary => Some(ReplayItem::User {
            text: render::branch_summary_text(&ev.data),
        }),
        _ => None,
    }
}

impl Fold {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds `events` in order.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut f = Fold::new();
        for e in events {
            f.push(e);
        }
        f
    }

    pub fn push(&mut self, ev: &Event) {
        self.event_count += 1;
        self.last_seq = Some(self.last_seq.map_or(ev.seq, |s| s.max(ev.seq)));
        bump(&mut self.event_counts, &ev.kind);
        let ty = ev.event_type();
        match ty {
            EventType::Unknown => bump(&mut self.unknown_types, &ev.kind),
            EventType::SessionStarted | EventType::SessionFork => {
                if let Some(ws) = ev.str_field("workspace") {
                    self.workspace = Some(ws.to_string());
                }
                if let Some(t) = ev.str_field("title") {
                    self.title = Some(t.to_string());
                }
            }
            EventType::SessionInfo => {
                if let Some(t) = ev.str_field("title") {
                    self.title = Some(t.to_string());
                }
            }
            EventType::ToolCall => {
                if let Some(id) = ev.str_field("call_id") {
                    let name = ev.str_field("name").unwrap_or("").to_string();
                    self.pending.insert(id.to_string(), (name, ev.seq));
                }
            }
            EventType::ToolResult => {
                if let Some(id) = ev.str_field("call_id") {
                    self.pending.remove(id);
                }
            }
            EventType::TurnStarted => {
                self.open_turn = ev.str_field("turn_id").map(str::to_string);
            }
            EventType::TurnEnded if self.open_turn.as_deref() == ev.str_field("turn_id") => {
                self.open_turn = None;
            }
            EventType::HistoryCompaction => self.push_compaction(ev),
            _ => {}
        }
        if self.checkpoint_to_seq.is_some_and(|to| ev.seq <= to) {
            return;
        }
        if let Some(item) = replay_item(ev) {
            if self.entries.last().is_some_and(|l| l.seq > ev.seq) {
                self.disordered = true;
            }
            self.entries.push(entry(ev.seq, item));
        }
    }

    fn push_compaction(&mut self, ev: &Event) {
        // A compaction without a usable range cannot say what it covers; it is counted
        // and otherwise ignored rather than hiding events.
        let Some(to) = ev
            .data
            .get("range")
            .and_then(|r| r.get("to_seq"))
            .and_then(Value::as_u64)
        else {
            return;
        };
        self.latest_compaction = Some(ev.clone());
        self.compaction_item = Some(entry(
            ev.seq,
            ReplayItem::User {
                text: render::compaction_text(&ev.data),
            },
        ));
        self.checkpoint_to_seq = Some(to);
        self.entries.retain(|e| e.seq > to);
    }

    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }
    pub fn event_count(&self) -> u64 {
        self.event_count
    }
    pub fn event_counts(&self) -> &BTreeMap<String, u64> {
        &self.event_counts
    }
    pub fn unknown_types(&self) -> &BTreeMap<String, u64> {
        &self.unknown_types
    }
    /// Pending calls sorted by `call_id`.
    pub fn pending_calls(&self) -> Vec<PendingCall> {
        let mut v: Vec<PendingCall> = self
            .pending
            .iter()
            .map(|(id, (name, seq))| PendingCall {
                call_id: id.clone(),
                name: name.clone(),
                seq: *seq,
            })
            .collect();
        v.sort_by(|a, b| a.call_id.cmp(&b.call_id));
        v
    }
    pub fn open_turn(&self) -> Option<String> {
        self.open_turn.clone()
    }
    pub fn checkpoint_to_seq(&self) -> Option<u64> {
        self.checkpoint_to_seq
    }
    pub fn latest_compaction(&self) -> Option<&Event> {
        self.latest_compaction.as_ref()
    }
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// Provider input (§7.1). Costs O(replayable events since the latest compaction).
    pub fn replay(&self, ctx: &ReplayContext) -> Replay {
        let dev = entry(
            0,
            ReplayItem::Developer {
                text: developer_text(ctx),
            },
        );
        let mut g = Guard {
            chars: dev.chars,
            items: vec![dev.item],
            ..Guard::default()
        };
        if let Some(c) = &self.compaction_item {
            g.chars += c.chars;
            g.items.push(c.item.clone());
        }
        let mut order: Vec<&Entry> = self.entries.iter().collect();
        if self.disordered {
            order.sort_by_key(|e| e.seq);
        }
        for e in order {
            match &e.item {
                ReplayItem::Reasoning { model, .. } if ctx.model.as_deref() != Some(model) => {}
                ReplayItem::FunctionCall { call_id, name, .. } => g.call(call_id, name, e),
                ReplayItem::FunctionCallOutput { call_id, .. } => g.output(call_id, e),
                _ => g.other(e),
            }
        }
        g.close();
        let count = |f: fn(&ReplayItem) -> bool| g.items.iter().filter(|i| f(i)).count();
        let stats = ReplayStats {
            items: g.items.len(),
            function_calls: count(|i| matches!(i, ReplayItem::FunctionCall { .. })),
            function_call_outputs: count(|i| matches!(i, ReplayItem::FunctionCallOutput { .. })),
            synthetic_orphan_closures: g.closures,
            balanced: pairing_violation(&g.items).is_none(),
            estimated_tokens: g.chars.div_ceil(4),
            checkpoint_to_seq: self.checkpoint_to_seq,
        };
        Replay {
            items: g.items,
            stats,
        }
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_string(), 1);
        }
    }
}

/// The pairing guard's running state while items are emitted.
#[derive(Default)]
struct Guard {
    items: Vec<ReplayItem>,
    chars: u64,
    /// Calls of the current step awaiting their output: call_id → tool name.
    pending: BTreeMap<String, String>,
    /// The current step's outputs have begun; a further call starts a new step.
    outputs_begun: bool,
    closures: Vec<SyntheticClosure>,
}

impl Guard {
    fn emit(&mut self, e: &Entry) {
        self.chars += e.chars;
        self.items.push(e.item.clone());
    }

    fn close(&mut self) {
        for (call_id, tool) in std::mem::take(&mut self.pending) {
            let output = synthetic_output(&call_id, &tool);
            self.chars += output.chars().count() as u64;
            self.items.push(ReplayItem::FunctionCallOutput {
                call_id: call_id.clone(),
                output,
                ok: false,
                synthetic: true,
            });
            self.closures.push(SyntheticClosure { call_id, tool });
        }
        self.outputs_begun = false;
    }

    fn call(&mut self, call_id: &str, name: &str, e: &Entry) {
        // A call after the step's outputs began, or reusing a pending id, starts a new step.
        if self.outputs_begun || self.pending.contains_key(call_id) {
            self.close();
        }
        self.pending.insert(call_id.to_string(), name.to_string());
        self.emit(e);
    }

    fn output(&mut self, call_id: &str, e: &Entry) {
        if self.pending.remove(call_id).is_some() {
            self.outputs_begun = true;
            self.emit(e);
        }
    }

    fn other(&mut self, e: &Entry) {
        self.close();
        self.emit(e);
    }
}

/// Checks the pairing rule on replay items: every run of function calls is followed by
/// exactly one output per call (any order) before anything else, and no output stands
/// without its call. Returns a description of the first violation.
pub fn pairing_violation(items: &[ReplayItem]) -> Option<String> {
    let mut open: BTreeSet<&str> = BTreeSet::new();
    let mut in_outputs = false;
    for (i, item) in items.iter().enumerate() {
        match item {
            ReplayItem::FunctionCall { call_id, .. } => {
                if in_outputs && !open.is_empty() {
                    return Some(format!(
                        "item {i}: call {call_id} before outputs of the step"
                    ));
                }
                in_outputs = false;
                if !open.insert(call_id) {
                    return Some(format!("item {i}: call {call_id} repeated in one step"));
                }
            }
            ReplayItem::FunctionCallOutput { call_id, .. } => {
                if !open.remove(call_id.as_str()) {
                    return Some(format!("item {i}: output {call_id} without its call"));
                }
                in_outputs = true;
            }
            _ => {
                if let Some(id) = open.first() {
                    return Some(format!("item {i}: call {id} has no output"));
                }
                in_outputs = false;
            }
        }
    }
    open.first()
        .map(|id| format!("end: call {id} has no output"))
}

/// Replay as of `after_seq` (events with seq ≤ it; all when `None`), for
/// `agentd/context` inspection. Folds the prefix afresh, so it costs O(events).
pub fn replay_as_of(events: &[Event], after_seq: Option<u64>, ctx: &ReplayContext) -> Replay {
    let mut f = Fold::new();
    for e in events
        .iter()
        .filter(|e| after_seq.is_none_or(|a| e.seq <= a))
    {
        f.push(e);
    }
    f.replay(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::testutil::TestLog;

    fn ctx() -> ReplayContext {
        ReplayContext {
            workspace: "/w/proj".into(),
            permission_mode: "auto".into(),
            model: Some("m1".into()),
        }
    }

    fn call(log: &mut TestLog, id: &str) {
        log.push(
            "tool_call",
            json!({"call_id": id, "name": "read_file", "args": {"path": "a.rs", "n": 1}}),
        );
    }
    fn result(log: &mut TestLog, id: &str) {
        log.push(
            "tool_result",
            json!({"call_id": id, "ok": true, "output": format!("out {id}")}),
        );
    }

    fn kinds(r: &Replay) -> Vec<String> {
        r.items
            .iter()
            .map(|i| match i {
                ReplayItem::Developer { .. } => "dev".to_string(),
                ReplayItem::User { text } => format!("user:{}", text.lines().next().unwrap_or("")),
                ReplayItem::Assistant { text } => format!("asst:{text}"),
                ReplayItem::Reasoning { model, .. } => format!("reason:{model}"),
                ReplayItem::FunctionCall { call_id, .. } => format!("call:{call_id}"),
                ReplayItem::FunctionCallOutput {
                    call_id, synthetic, ..
                } => format!("out:{call_id}{}", if *synthetic { "*" } else { "" }),
            })
            .collect()
    }

    #[test]
    fn maps_each_event_type_as_designed() {
        let mut log = TestLog::new();
        log.push("session_started", json!({"workspace": "/w/proj", "agentd_version": "0.1", "log_format": 1, "title": "t0"}));
        log.push("turn_started", json!({"turn_id": "t1"}));
        log.push("user_message", json!({"text": "hello"}));
        log.push("reasoning", json!({"item": {"id": "r1"}, "model": "m1"}));
        log.push("reasoning", json!({"item": {"id": "r2"}, "model": "other"}));
        call(&mut log, "c1");
        log.push(
            "permission_decision",
            json!({"call_id": "c1", "decision": "allow"}),
        );
        log.push(
            "tool_result",
            json!({"call_id": "c1", "ok": false, "error": {"kind": "x", "message": "y"}}),
        );
        log.push("provider_usage", json!({"provider": "p", "model": "m1"}));
        log.push(
            "assistant_message",
            json!({"text": "partial", "metadata": {"partial": true}}),
        );
        log.push("assistant_message", json!({"text": "done"}));
        log.push("future_type", json!({"text": "never"}));
        log.push("memory_update", json!({"kind": "fact", "evidence": {}}));
        log.push(
            "turn_ended",
            json!({"turn_id": "t1", "status": "completed"}),
        );
        let r = replay_as_of(&log.events, None, &ctx());
        assert_eq!(
            kinds(&r),
            [
                "dev",
                "user:hello",
                "reason:m1",
                "call:c1",
                "out:c1",
                "asst:done"
            ]
        );
        match &r.items[0] {
            ReplayItem::Developer { text } => {
                assert!(text.contains("\"/w/proj\"") && text.contains("Permission mode: auto"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.items[3],
            ReplayItem::FunctionCall {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a.rs","n":1}"#.into()
            }
        );
        assert_eq!(
            r.items[4],
            ReplayItem::FunctionCallOutput {
                call_id: "c1".into(),
                output: r#"{"ok":false,"error":{"kind":"x","message":"y"}}"#.into(),
                ok: false,
                synthetic: false
            }
        );
        assert!(r.stats.balanced);
        assert_eq!(
            (r.stats.function_calls, r.stats.function_call_outputs),
            (1, 1)
        );
        let f = Fold::from_events(&log.events);
        assert_eq!(f.unknown_types().get("future_type"), Some(&1));
        assert_eq!(f.event_counts().get("reasoning"), Some(&2));
        assert_eq!(f.event_count(), 14);
        assert_eq!(f.last_seq(), Some(13));
        assert_eq!((f.workspace(), f.title()), (Some("/w/proj"), Some("t0")));
        assert_eq!(f.open_turn(), None);
        let no_model = ReplayContext {
            model: None,
            ..ctx()
        };
        assert!(!kinds(&f.replay(&no_model))
            .iter()
            .any(|k| k.starts_with("reason")));
    }

    #[test]
    fn orphans_are_closed_and_stray_results_dropped() {
        let mut log = TestLog::new();
        log.push("user_message", json!({"text": "go"}));
        call(&mut log, "b");
        call(&mut log, "a");
        result(&mut log, "b");
        result(&mut log, "b"); // duplicate: dropped
        result(&mut log, "zz"); // no call: dropped
        log.push("user_message", json!({"text": "next"}));
        call(&mut log, "c"); // orphan at the end
        let r = replay_as_of(&log.events, None, &ctx());
        assert_eq!(
            kinds(&r),
            [
                "dev",
                "user:go",
                "call:b",
                "call:a",
                "out:b",
                "out:a*",
                "user:next",
                "call:c",
                "out:c*"
            ]
        );
        assert_eq!(
            r.stats.synthetic_orphan_closures,
            [
                SyntheticClosure {
                    call_id: "a".into(),
                    tool: "read_file".into()
                },
                SyntheticClosure {
                    call_id: "c".into(),
                    tool: "read_file".into()
                }
            ]
        );
        match &r.items[5] {
            ReplayItem::FunctionCallOutput {
                output, ok: false, ..
            } => {
                let v: Value = serde_json::from_str(output).unwrap();
                assert_eq!(v["error"]["kind"], "orphan_tool_call");
                assert_eq!(
                    v["error"]["details"],
                    json!({"call_id": "a", "tool": "read_file"})
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(r.stats.balanced);
        let f = Fold::from_events(&log.events);
        let pending: Vec<_> = f
            .pending_calls()
            .into_iter()
            .map(|p| (p.call_id, p.seq))
            .collect();
        assert_eq!(pending, [("a".to_string(), 2), ("c".to_string(), 7)]);
    }

    #[test]
    fn a_call_after_the_steps_outputs_starts_a_new_step() {
        let mut log = TestLog::new();
        call(&mut log, "a");
        call(&mut log, "b");
        result(&mut log, "a");
        call(&mut log, "c");
        result(&mut log, "b"); // its step was closed: dropped
        result(&mut log, "c");
        let r = replay_as_of(&log.events, None, &ctx());
        assert_eq!(
            kinds(&r),
            ["dev", "call:a", "call:b", "out:a", "out:b*", "call:c", "out:c"]
        );
        assert!(r.stats.balanced);
    }

    #[test]
    fn pairing_violation_detects_broken_input() {
        let c = |id: &str| ReplayItem::FunctionCall {
            call_id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        };
        let o = |id: &str| ReplayItem::FunctionCallOutput {
            call_id: id.into(),
            output: String::new(),
            ok: true,
            synthetic: false,
        };
        let u = ReplayItem::User { text: "x".into() };
        assert!(pairing_violation(&[c("a"), o("a"), u.clone()]).is_none());
        assert!(pairing_violation(&[c("a"), u.clone(), o("a")]).is_some());
        assert!(pairing_violation(&[o("a")]).is_some());
        assert!(pairing_violation(&[c("a"), c("b"), o("a"), c("d"), o("b"), o("d")]).is_some());
        assert!(pairing_violation(&[c("a")]).is_some());
    }

    #[test]
    fn compaction_replaces_covered_events_and_trims_state() {
        let mut log = TestLog::new();
        for i in 0..10 {
            log.push("user_message", json!({"text": format!("m{i}")}));
        }
        let mut f = Fold::from_events(&log.events);
        assert_eq!(f.entries.len(), 10);
        log.push(
            "history_compaction",
            json!({"strategy": "deterministic_v1", "range": {"from_seq": 0, "to_seq": 6}, "summary": "S"}),
        );
        log.push("user_message", json!({"text": "after"}));
        f.push(&log.events[10]);
        f.push(&log.events[11]);
        assert_eq!(f.entries.len(), 4, "covered items are dropped from memory");
        let r = f.replay(&ctx());
        assert_eq!(
            kinds(&r),
            [
                "dev",
                "user:[HISTORY_COMPACTION v1]",
                "user:m7",
                "user:m8",
                "user:m9",
                "user:after"
            ]
        );
        assert_eq!(r.stats.checkpoint_to_seq, Some(6));
        assert_eq!(f.checkpoint_to_seq(), Some(6));
        assert_eq!(f.latest_compaction().map(|e| e.seq), Some(10));
        // Inspecting as of an earlier seq ignores the later compaction.
        let before = replay_as_of(&log.events, Some(9), &ctx());
        assert_eq!(before.stats.items, 11);
        assert_eq!(before.stats.checkpoint_to_seq, None);
    }

    #[test]
    fn replay_is_byte_identical_and_estimates_tokens() {
        let mut log = TestLog::new();
        log.push("user_message", json!({"text": "abcd"}));
        call(&mut log, "x");
        let a = serde_json::to_string(&replay_as_of(&log.events, None, &ctx())).unwrap();
        let b = serde_json::to_string(&Fold::from_events(&log.events).replay(&ctx())).unwrap();
        assert_eq!(a, b);
        let r = replay_as_of(&log.events[..1], None, &ctx());
        let dev = developer_text(&ctx()).chars().count() as u64;
        assert_eq!(r.stats.estimated_tokens, (dev + 4).div_ceil(4));
    }

    #[test]
    fn turns_and_titles_are_tracked() {
        let mut log = TestLog::new();
        log.push("session_fork", json!({"parent_session_id": "p", "fork_root_session_id": "p", "forked_to_seq": 3, "workspace": "/w2"}));
        log.push("turn_started", json!({"turn_id": "t1"}));
        log.push("session_info", json!({"title": "renamed"}));
        let f = Fold::from_events(&log.events);
        assert_eq!(f.open_turn().as_deref(), Some("t1"));
        assert_eq!((f.workspace(), f.title()), (Some("/w2"), Some("renamed")));
    }
}
