//! A session's events folded into what a conversation view shows: prompts, streamed
//! answers, reasoning, one entry per tool call with its result, errors and notices, plus
//! the turn's state, model, sandbox and context pressure. Pure (events in, items out) and
//! free of any terminal library, so every interactive client of the crate can share it
//! (`agentctl chat` draws it with ratatui).
//!
//! Memory is bounded: an item keeps at most [`MAX_TEXT`] bytes of its text (a tool
//! result keeps a short excerpt), and the view keeps the newest [`MAX_ITEMS`] items, so a
//! client attached to a session of any length holds a small transcript, not its events.

use crate::render::{event_summary, one_line};
use serde_json::Value;
use std::collections::VecDeque;

/// Most bytes of text one item keeps (prompts, answers, reasoning).
pub const MAX_TEXT: usize = 48 * 1024;
/// Most items a view keeps; older ones are dropped from its front.
pub const MAX_ITEMS: usize = 4000;
/// Most characters of a tool result's excerpt.
const RESULT_EXCERPT: usize = 400;

/// What a notice is about, for its marking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// Local information (command output, hints).
    Info,
    /// Something the session recorded (compaction, fork, rename, turn end).
    Event,
    /// A failure: a failed turn, a refused call.
    Error,
}

/// A tool call's result, folded below its call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub ok: bool,
    /// Closed by reconciliation (the call's result never came: crash, interrupt).
    pub orphan: bool,
    /// Output bytes (ok) or the error kind and message (failed), clipped.
    pub excerpt: String,
    /// Full output size in bytes.
    pub bytes: usize,
}

/// One entry of the transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    User {
        text: String,
    },
    Assistant {
        text: String,
        /// Still streaming (deltas, no `assistant_message` yet).
        streaming: bool,
        /// Recorded as partial (the turn was cut).
        partial: bool,
    },
    Reasoning {
        text: String,
        streaming: bool,
    },
    Tool {
        call_id: String,
        name: String,
        summary: String,
        result: Option<ToolOutcome>,
        /// `permission_decision` for the call: `allow` / `deny` and why.
        decision: Option<String>,
    },
    Notice {
        kind: NoticeKind,
        text: String,
    },
}

/// Where the session's turn is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnState {
    Idle,
    Running { turn_id: String },
}

/// The folded view of one session.
#[derive(Debug, Clone)]
pub struct View {
    pub items: VecDeque<Item>,
    /// Highest durable seq applied; durable events at or below it are duplicates.
    pub last_seq: Option<u64>,
    pub title: Option<String>,
    pub workspace: Option<String>,
    pub model: Option<String>,
    /// `turn_started.data.sandbox.mode` of the latest turn.
    pub sandbox: Option<String>,
    /// Latest `context_pressure.pressure` (0..1+).
    pub pressure: Option<f64>,
    pub turn: TurnState,
    /// Seq of the latest `turn_started` (the default point of `/revert`).
    pub last_turn_seq: Option<u64>,
    /// Items dropped from the front to stay under [`MAX_ITEMS`].
    pub dropped: u64,
    /// Ever-increasing count of changes, so a renderer can cache by it.
    pub revision: u64,
}

impl Default for View {
    fn default() -> Self {
        View {
            items: VecDeque::new(),
            last_seq: None,
            title: None,
            workspace: None,
            model: None,
            sandbox: None,
            pressure: None,
            turn: TurnState::Idle,
            last_turn_seq: None,
            dropped: 0,
            revision: 0,
        }
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// `s` clipped to `max` bytes on a character boundary, marked when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… ({} more bytes)", &s[..end], s.len() - end)
}

/// The first `max` bytes of `s` (on a character boundary), so that clipping a large
/// output to an excerpt does not walk all of it.
fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn push_clipped(buf: &mut String, add: &str) {
    if buf.len() >= MAX_TEXT {
        return;
    }
    let room = MAX_TEXT - buf.len();
    if add.len() <= room {
        buf.push_str(add);
    } else {
        let mut end = room;
        while !add.is_char_boundary(end) {
            end -= 1;
        }
        buf.push_str(&add[..end]);
        buf.push_str("\n… (clipped)");
    }
}

/// The text of a recorded reasoning item: its summary parts, else its thinking text.
pub fn reasoning_text(item: &Value) -> String {
    if let Some(parts) = item.get("summary").and_then(Value::as_array) {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        if !texts.is_empty() {
            return texts.join("\n");
        }
    }
    for key in ["thinking", "text", "content"] {
        if let Some(t) = item.get(key).and_then(Value::as_str) {
            return t.to_string();
        }
    }
    String::new()
}

/// One line summarising a tool call's arguments: the most telling argument for the
/// built-in tools, else the arguments' JSON, clipped.
pub fn args_summary(name: &str, args: &Value) -> String {
    let pick = |k: &str| args.get(k).and_then(Value::as_str);
    let main = match name {
        "shell" => pick("command").or_else(|| pick("cmd")),
        "read_file" | "write_file" | "edit_file" | "list_dir" | "apply_patch" => {
            pick("path").or_else(|| pick("patch"))
        }
        "grep" | "search" | "glob" => pick("pattern").or_else(|| pick("query")),
        _ => None,
    };
    match main {
        Some(m) => one_line(m, 100),
        None if args.as_object().is_some_and(|o| o.is_empty()) => String::new(),
        None => one_line(&args.to_string(), 100),
    }
}

impl View {
    fn push(&mut self, item: Item) {
        self.items.push_back(item);
        while self.items.len() > MAX_ITEMS {
            self.items.pop_front();
            self.dropped += 1;
        }
    }

    /// Adds a local notice (command output, hints); not part of the session.
    pub fn notice(&mut self, kind: NoticeKind, text: impl Into<String>) {
        self.push(Item::Notice {
            kind,
            text: clip(&text.into(), MAX_TEXT),
        });
        self.revision += 1;
    }

    /// Marks whatever was streaming as ended: after a reconnect the stream's rest comes
    /// back as the recorded events, never as deltas.
    pub fn end_streams(&mut self) {
        for item in self.items.iter_mut().rev().take(8) {
            match item {
                Item::Assistant { streaming, .. } | Item::Reasoning { streaming, .. } => {
                    *streaming = false
                }
                _ => {}
            }
        }
        self.revision += 1;
    }

    /// The streaming item of this kind at the end of the transcript (after the latest
    /// user prompt), for deltas to extend and the recorded event to replace.
    fn streaming_index(&self, reasoning: bool) -> Option<usize> {
        for (i, item) in self.items.iter().enumerate().rev() {
            match item {
                Item::Assistant {
                    streaming: true, ..
                } if !reasoning => return Some(i),
                Item::Reasoning {
                    streaming: true, ..
                } if reasoning => return Some(i),
                Item::User { .. } => return None,
                _ => {}
            }
        }
        None
    }

    fn tool_index(&self, call_id: &str) -> Option<usize> {
        self.items
            .iter()
            .enumerate()
            .rev()
            .take(512)
            .find(|(_, it)| matches!(it, Item::Tool { call_id: c, .. } if c == call_id))
            .map(|(i, _)| i)
    }

    /// Applies one event (durable or ephemeral). A durable event at or below
    /// [`View::last_seq`] is a duplicate and changes nothing. Returns whether the view
    /// changed.
    pub fn apply(&mut self, event: &Value) -> bool {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        if let Some(seq) = event.get("seq").and_then(Value::as_u64) {
            if self.last_seq.is_some_and(|l| seq <= l) {
                return false;
            }
            self.last_seq = Some(seq);
        }
        let null = Value::Null;
        let data = event.get("data").unwrap_or(&null);
        let seq = event.get("seq").and_then(Value::as_u64);
        let changed = self.apply_kind(kind, data, seq);
        if changed {
            self.revision += 1;
        }
        changed
    }

    fn apply_kind(&mut self, kind: &str, data: &Value, seq: Option<u64>) -> bool {
        let text = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or("");
        match kind {
            "session_started" => {
                self.workspace = data
                    .get("workspace")
                    .and_then(Value::as_str)
                    .map(Into::into);
                if let Some(t) = data.get("title").and_then(Value::as_str) {
                    self.title = Some(t.into());
                }
                if let Some(m) = data.get("model").and_then(Value::as_str) {
                    self.model = Some(m.into());
                }
                true
            }
            "session_info" => {
                if let Some(t) = data.get("title").and_then(Value::as_str) {
                    self.title = Some(t.into());
                }
                true
            }
            "turn_started" => {
                self.turn = TurnState::Running {
                    turn_id: text("turn_id").into(),
                };
                self.last_turn_seq = seq.or(self.last_turn_seq);
                if let Some(m) = data.get("model").and_then(Value::as_str) {
                    self.model = Some(m.into());
                }
                if let Some(s) = str_at(data, "/sandbox/mode") {
                    self.sandbox = Some(s.into());
                }
                true
            }
            "user_message" => {
                let mut t = clip(text("text"), MAX_TEXT);
                // A prompt's images: one line each (the bytes are the daemon's).
                for img in data
                    .get("images")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .take(16)
                {
                    let mime = img.get("mime").and_then(Value::as_str).unwrap_or("image");
                    let n = img.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                    t.push_str(&format!("\n[image: {}, {n} bytes]", clip(mime, 40)));
                }
                self.push(Item::User { text: t });
                true
            }
            "text_delta" | "reasoning_delta" => {
                let reasoning = kind == "reasoning_delta";
                let t = data
                    .get("text")
                    .or_else(|| data.get("delta"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if t.is_empty() {
                    return false;
                }
                match self.streaming_index(reasoning) {
                    Some(i) => match &mut self.items[i] {
                        Item::Assistant { text, .. } | Item::Reasoning { text, .. } => {
                            push_clipped(text, t)
                        }
                        _ => {}
                    },
                    None if reasoning => self.push(Item::Reasoning {
                        text: clip(t, MAX_TEXT),
                        streaming: true,
                    }),
                    None => self.push(Item::Assistant {
                        text: clip(t, MAX_TEXT),
                        streaming: true,
                        partial: false,
                    }),
                }
                true
            }
            "assistant_message" => {
                let partial = data
                    .pointer("/metadata/partial")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let item = Item::Assistant {
                    text: clip(text("text"), MAX_TEXT),
                    streaming: false,
                    partial,
                };
                match self.streaming_index(false) {
                    Some(i) => self.items[i] = item,
                    None => self.push(item),
                }
                true
            }
            "reasoning" => {
                let t = data.get("item").map(reasoning_text).unwrap_or_default();
                let item = Item::Reasoning {
                    text: clip(&t, MAX_TEXT),
                    streaming: false,
                };
                match self.streaming_index(true) {
                    Some(i) => self.items[i] = item,
                    None if t.is_empty() => return false,
                    None => self.push(item),
                }
                true
            }
            "tool_call" => {
                let name = text("name").to_string();
                let null = Value::Null;
                let summary = args_summary(&name, data.get("args").unwrap_or(&null));
                self.push(Item::Tool {
                    call_id: text("call_id").into(),
                    name,
                    summary,
                    result: None,
                    decision: None,
                });
                true
            }
            "tool_result" => {
                let ok = data.get("ok").and_then(Value::as_bool).unwrap_or(false);
                let null = Value::Null;
                let err = data.get("error").unwrap_or(&null);
                let err_kind = err.get("kind").and_then(Value::as_str).unwrap_or("");
                let orphan = err_kind == "orphan_tool_call"
                    || data.get("reconciled").and_then(Value::as_bool) == Some(true);
                let output = text("output");
                let excerpt = if ok {
                    one_line(head(output, RESULT_EXCERPT * 4), RESULT_EXCERPT)
                } else {
                    let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
                    one_line(&format!("{err_kind}: {msg}"), RESULT_EXCERPT)
                };
                let outcome = ToolOutcome {
                    ok,
                    orphan,
                    excerpt,
                    bytes: output.len(),
                };
                let call_id = text("call_id");
                match self.tool_index(call_id) {
                    Some(i) => {
                        if let Item::Tool { result, .. } = &mut self.items[i] {
                            *result = Some(outcome);
                        }
                    }
                    None => self.push(Item::Tool {
                        call_id: call_id.into(),
                        name: "(earlier call)".into(),
                        summary: String::new(),
                        result: Some(outcome),
                        decision: None,
                    }),
                }
                true
            }
            "permission_decision" => {
                let mut d = format!("{} ({})", text("decision"), text("reason"));
                if !text("message").is_empty() {
                    d = format!("{d}: {}", text("message"));
                }
                if let Some(i) = self.tool_index(text("call_id")) {
                    if let Item::Tool { decision, .. } = &mut self.items[i] {
                        *decision = Some(d);
                        return true;
                    }
                }
                false
            }
            "context_pressure" => {
                self.pressure = data.get("pressure").and_then(Value::as_f64);
                true
            }
            "turn_ended" => {
                self.turn = TurnState::Idle;
                for item in self.items.iter_mut().rev().take(64) {
                    match item {
                        Item::Assistant { streaming, .. } | Item::Reasoning { streaming, .. } => {
                            *streaming = false
                        }
                        Item::User { .. } => break,
                        _ => {}
                    }
                }
                let status = text("status");
                if status != "completed" && !status.is_empty() {
                    let mut t = format!("turn {status}");
                    if let Some(r) = data.get("reason").and_then(Value::as_str) {
                        t.push_str(&format!(" ({r})"));
                    }
                    if let Some(e) = data.get("error") {
                        let k = e.get("kind").and_then(Value::as_str).unwrap_or("");
                        let m = e.get("message").and_then(Value::as_str).unwrap_or("");
                        t.push_str(&format!(": {k}: {}", one_line(m, 300)));
                    }
                    let kind = if status == "interrupted" {
                        NoticeKind::Event
                    } else {
                        NoticeKind::Error
                    };
                    self.push(Item::Notice { kind, text: t });
                } else if let Some(r) = data.get("stop_reason").and_then(Value::as_str) {
                    self.push(Item::Notice {
                        kind: NoticeKind::Event,
                        text: format!("the answer stopped early: {r}"),
                    });
                }
                true
            }
            "turn_failed" => {
                self.push(Item::Notice {
                    kind: NoticeKind::Error,
                    text: format!("turn failed: {}", event_summary(kind, data)),
                });
                true
            }
            "history_compaction" | "session_fork" | "branch_summary" | "log_repaired" => {
                let label = match kind {
                    "history_compaction" => "compacted",
                    "session_fork" => "forked",
                    "branch_summary" => "branch summary",
                    _ => "log repaired",
                };
                self.push(Item::Notice {
                    kind: NoticeKind::Event,
                    text: format!("{label}: {}", event_summary(kind, data)),
                });
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: Option<u64>, kind: &str, data: Value) -> Value {
        let mut e = json!({"type": kind, "data": data});
        if let Some(s) = seq {
            e["seq"] = json!(s);
        }
        e
    }

    #[test]
    fn a_turn_folds_into_prompt_stream_tool_and_answer() {
        let mut v = View::default();
        v.apply(&ev(
            Some(0),
            "session_started",
            json!({"workspace":"/w","title":"demo"}),
        ));
        v.apply(&ev(
            Some(1),
            "turn_started",
            json!({"turn_id":"t1","model":"m","sandbox":{"mode":"workspace_write"}}),
        ));
        assert_eq!(
            v.turn,
            TurnState::Running {
                turn_id: "t1".into()
            }
        );
        v.apply(&ev(Some(2), "user_message", json!({"text":"héllo 世界"})));
        v.apply(&ev(None, "reasoning_delta", json!({"text":"think"})));
        v.apply(&ev(None, "text_delta", json!({"text":"Hel"})));
        v.apply(&ev(None, "text_delta", json!({"text":"lo"})));
        assert_eq!(
            v.items[2],
            Item::Assistant {
                text: "Hello".into(),
                streaming: true,
                partial: false
            }
        );
        v.apply(&ev(
            Some(3),
            "reasoning",
            json!({"item":{"summary":[{"text":"thought"}]}}),
        ));
        v.apply(&ev(Some(4), "assistant_message", json!({"text":"Hello!"})));
        v.apply(&ev(
            Some(5),
            "tool_call",
            json!({"call_id":"c1","name":"shell","args":{"command":"ls -la"}}),
        ));
        v.apply(&ev(
            Some(6),
            "tool_result",
            json!({"call_id":"c1","ok":true,"output":"a\nb"}),
        ));
        v.apply(&ev(
            Some(7),
            "turn_ended",
            json!({"turn_id":"t1","status":"completed"}),
        ));
        assert_eq!(
            v.items[1],
            Item::Reasoning {
                text: "thought".into(),
                streaming: false
            }
        );
        assert_eq!(
            v.items[2],
            Item::Assistant {
                text: "Hello!".into(),
                streaming: false,
                partial: false
            }
        );
        let Item::Tool {
            name,
            summary,
            result,
            ..
        } = &v.items[3]
        else {
            panic!()
        };
        assert_eq!((name.as_str(), summary.as_str()), ("shell", "ls -la"));
        assert_eq!(result.as_ref().unwrap().excerpt, "a b");
        assert_eq!(v.turn, TurnState::Idle);
        assert_eq!(v.sandbox.as_deref(), Some("workspace_write"));
        assert_eq!(v.title.as_deref(), Some("demo"));
        // A replayed durable event changes nothing.
        assert!(!v.apply(&ev(Some(6), "user_message", json!({"text":"dup"}))));
        assert_eq!(v.items.len(), 4);
    }

    #[test]
    fn orphans_and_failures_are_marked() {
        let mut v = View::default();
        v.apply(&ev(
            Some(1),
            "tool_call",
            json!({"call_id":"c","name":"write_file","args":{"path":"x"}}),
        ));
        v.apply(&ev(Some(2), "tool_result", json!({"call_id":"c","ok":false,"error":{"kind":"orphan_tool_call","message":"closed"}})));
        let Item::Tool { result, .. } = &v.items[0] else {
            panic!()
        };
        assert!(result.as_ref().unwrap().orphan);
        v.apply(&ev(Some(3), "turn_ended", json!({"turn_id":"t","status":"failed","error":{"kind":"rate_limited","message":"slow"}})));
        assert_eq!(
            v.items[1],
            Item::Notice {
                kind: NoticeKind::Error,
                text: "turn failed: rate_limited: slow".into()
            }
        );
    }

    #[test]
    fn memory_stays_bounded() {
        let mut v = View::default();
        let big = "x".repeat(MAX_TEXT * 2);
        for i in 0..(MAX_ITEMS as u64 + 10) {
            v.apply(&ev(Some(i), "user_message", json!({"text": big})));
        }
        assert_eq!(v.items.len(), MAX_ITEMS);
        assert_eq!(v.dropped, 10);
        let Item::User { text } = &v.items[0] else {
            panic!()
        };
        assert!(text.len() < MAX_TEXT + 64);
    }
}
