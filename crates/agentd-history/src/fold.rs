//! The folded in-memory state of one session and its provider replay (docs/history-rules.md#replay, docs/history-rules.md#reconciliation).
//!
//! The session actor pushes every loaded and every appended event into one [`Fold`], in
//! order. `push` is O(1) amortized and converts each replayable event into its
//! [`ReplayItem`] once, so building provider input later never re-reads or re-parses the
//! Log. A `history_compaction` drops the items it covers, which keeps [`Fold::replay`] at
//! O(events since the latest compaction) however long the Log grows.
//!
//! The replay rules and the pairing guard live in [`super::replay`]; its types are
//! re-exported here.

use super::render;
use super::replay::{build, build_tail, entry, lazy_entry, replay_item, Entry};
pub use super::replay::{
    developer_text, pairing_violation, Replay, ReplayContext, ReplayMark, ReplayStats, ReplayTail,
    SyntheticClosure,
};
use super::stored::Line;
use agentd_proto::replay::ReplayItem;
use agentd_proto::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// A `tool_call` with no later `tool_result` of the same `call_id` (docs/history-rules.md#reconciliation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    pub seq: u64,
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
    /// `labels` of the latest `session_info` that carries them (e.g. `archived`).
    labels: Vec<String>,
    latest_compaction: Option<Event>,
    compaction_item: Option<Entry>,
    checkpoint_to_seq: Option<u64>,
    /// Replayable items with seq > `checkpoint_to_seq`, in push order.
    entries: Vec<Entry>,
    /// Set when an entry arrived with a lower seq than the one before it (a damaged Log);
    /// replay then sorts by seq, stably.
    disordered: bool,
    /// A replayable `tool_result` referred to images ([`ReplayItem::FunctionCallOutput`]
    /// `images`).
    images: bool,
    /// `data` of the newest `instructions` event (kept across compactions: replay
    /// always renders the newest record).
    instructions: Option<Value>,
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

    /// Whether a tool result replayed since the fold began (or its latest checkpoint)
    /// refers to images, which a provider request loads from the session's resources.
    pub fn has_images(&self) -> bool {
        self.images
    }

    pub fn push(&mut self, ev: &Event) {
        self.push_line(ev, None);
    }

    /// [`Fold::push`] for an event whose Log line the caller keeps: a large replay item
    /// then holds that line instead of its own copy of the text, and is rebuilt from it
    /// when a replay emits it.
    pub fn push_stored(&mut self, ev: &Event, line: &Line) {
        self.push_line(ev, Some(line));
    }

    fn push_line(&mut self, ev: &Event, line: Option<&Line>) {
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
                if let Some(labels) = session_labels(ev) {
                    self.labels = labels;
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
            EventType::Instructions => self.instructions = Some(ev.data.clone()),
            _ => {}
        }
        if self.checkpoint_to_seq.is_some_and(|to| ev.seq <= to) {
            return;
        }
        if let Some(item) = replay_item(ev) {
            if matches!(&item, ReplayItem::FunctionCallOutput { images, .. } | ReplayItem::User { images, .. } if !images.is_empty())
            {
                self.images = true;
            }
            if self.entries.last().is_some_and(|l| l.seq > ev.seq) {
                self.disordered = true;
            }
            let e = match line {
                Some(l) => lazy_entry(ev.seq, item, l),
                None => entry(ev.seq, item),
            };
            self.entries.push(e);
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
                images: Vec::new(),
            },
        ));
        self.checkpoint_to_seq = Some(to);
        self.entries.retain(|e| e.seq > to);
    }

    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// Gives back spare capacity (after a bulk load), moving the replay entries into an
    /// allocation of their length (an allocator may shrink in place and keep the rest).
    pub fn shrink_to_fit(&mut self) {
        let mut exact = Vec::with_capacity(self.entries.len());
        exact.append(&mut self.entries);
        self.entries = exact;
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
    pub fn labels(&self) -> &[String] {
        &self.labels
    }
    /// `data` of the newest `instructions` event.
    pub fn instructions(&self) -> Option<&Value> {
        self.instructions.as_ref()
    }

    /// The replay continued from `from` (see [`ReplayMark`]) over entries with seq ≤
    /// `upto`, noting a stable point about every `every` entries; with `splice`, large
    /// strings stay in their Log lines (see [`ReplayTail::splices`]); with `limit`, at
    /// most that many entries are consumed ([`ReplayTail::cut`]). `None` when this
    /// fold cannot resume (a damaged Log's entries out of order, or `upto` before the
    /// latest compaction, which the entries no longer hold).
    // Where to resume and how: each argument is one decision of the caller's.
    #[allow(clippy::too_many_arguments)]
    pub fn replay_tail(
        &self,
        ctx: &ReplayContext,
        from: Option<&ReplayMark>,
        upto: Option<u64>,
        boundary: &dyn Fn(&ReplayItem) -> Option<bool>,
        every: usize,
        splice: bool,
        limit: Option<usize>,
    ) -> Option<ReplayTail> {
        if self.disordered {
            return None;
        }
        if let (Some(u), Some(c)) = (upto, &self.latest_compaction) {
            if c.seq > u {
                return None;
            }
        }
        Some(build_tail(
            ctx,
            self.compaction_item.as_ref(),
            &self.entries,
            self.checkpoint_to_seq,
            from,
            upto,
            boundary,
            every,
            splice,
            limit,
        ))
    }

    /// Seq of the latest `history_compaction` the fold applied (what a [`ReplayMark`]
    /// of this fold depends on).
    pub fn compaction_seq(&self) -> Option<u64> {
        self.latest_compaction.as_ref().map(|e| e.seq)
    }

    /// Provider input (docs/history-rules.md#replay). Costs O(replayable events since the latest compaction).
    pub fn replay(&self, ctx: &ReplayContext) -> Replay {
        build(
            ctx,
            self.compaction_item.as_ref(),
            &self.entries,
            self.disordered,
            self.checkpoint_to_seq,
        )
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

/// The `labels` of a `session_info` event, when it carries a list of strings.
pub fn session_labels(ev: &Event) -> Option<Vec<String>> {
    let list = ev.data.get("labels")?.as_array()?;
    Some(
        list.iter()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{kinds, TestLog};
    use serde_json::json;

    fn ctx() -> ReplayContext {
        ReplayContext {
            workspace: "/w/proj".into(),
            permission_mode: "auto".into(),
            model: Some("m1".into()),
            ..Default::default()
        }
    }

    fn call(log: &mut TestLog, id: &str) {
        log.push(
            "tool_call",
            json!({"call_id": id, "name": "read_file", "args": {"path": "a.rs", "n": 1}}),
        );
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
                synthetic: false,
                images: Vec::new(),
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
    fn items_read_back_from_log_lines_replay_identically() {
        let mut log = TestLog::new();
        let big = "x\n\"é\" ".repeat(100);
        log.push(
            "session_started",
            json!({"workspace": "/w/proj", "agentd_version": "0.1", "log_format": 1}),
        );
        log.push("user_message", json!({"text": big}));
        log.push("user_message", json!({"text": "short"}));
        log.push(
            "reasoning",
            json!({"item": {"id": "r1", "t": big}, "model": "m1"}),
        );
        log.push(
            "tool_call",
            json!({"call_id": "c1", "name": "shell", "args": {"command": big}}),
        );
        log.push(
            "tool_call",
            json!({"call_id": "c2", "name": "read_file", "args": {"path": "a"}}),
        );
        log.push(
            "tool_result",
            json!({"call_id": "c2", "ok": true, "output": big}),
        );
        log.push(
            "tool_result",
            json!({"call_id": "c1", "ok": false, "error": {"message": big}}),
        );
        log.push(
            "assistant_message",
            json!({"text": big, "metadata": {"partial": true}}),
        );
        log.push("assistant_message", json!({"text": big}));
        let owned = Fold::from_events(&log.events);
        let mut lazy = Fold::new();
        for e in &log.events {
            let line = Line::owned(&serde_json::to_string(e).unwrap());
            lazy.push_stored(e, &line);
        }
        assert_eq!(lazy.entries.iter().filter(|e| e.is_lazy()).count(), 5);
        assert_eq!(lazy.replay(&ctx()), owned.replay(&ctx()));
        let never = |_: &ReplayItem| None;
        let (a, b) = (
            lazy.replay_tail(&ctx(), None, None, &never, 2, false, None)
                .unwrap(),
            owned
                .replay_tail(&ctx(), None, None, &never, 2, false, None)
                .unwrap(),
        );
        // Spliced: the user, output and final assistant strings stay in their lines
        // (the call's arguments and the error object are not strings of the line).
        let s = lazy
            .replay_tail(&ctx(), None, None, &never, 2, true, None)
            .unwrap();
        assert_eq!(s.splices.len(), 3);
        let mut items = s.items;
        for (i, sp) in &s.splices {
            assert_eq!(
                serde_json::to_string(&crate::replay::SPLICE_MARK).unwrap(),
                format!("\"{}\"", crate::replay::SPLICE_MARK_JSON)
            );
            assert!(std::str::from_utf8(&sp.bytes())
                .unwrap()
                .contains("\\\"é\\\""));
            sp.restore(&mut items[*i]);
        }
        assert_eq!((items, s.stats), (b.items.clone(), b.stats.clone()));
        assert_eq!((a.items, a.stats), (b.items, b.stats));
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
