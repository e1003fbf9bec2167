//! agentd events → Codex app-server turns, items and notifications (pure, unit-tested).
//!
//! [`Turns`] folds a session's durable events into `Turn`s with their items
//! (`thread/read`, `thread/resume`, `thread/turns/list`, `thread/items/list`); [`Live`]
//! maps the events of a followed session, durable and ephemeral, into the notifications a
//! running turn streams (`turn/started`, `item/started`, `item/agentMessage/delta`,
//! `item/reasoning/summaryTextDelta`, `item/completed`, `thread/tokenUsage/updated`,
//! `turn/completed`, ...). Both build items the same way, so an item's shape does not
//! depend on whether it was seen live or read back.
//!
//! Tool calls become the items Codex's clients draw: `shell` a `commandExecution`, the
//! read-only file tools a `commandExecution` with a read / list / search action, the
//! writing tools (`write_file`, `edit_file`, `apply_patch`) a `fileChange`, anything else
//! (MCP tools, `memory_apply`) a `dynamicToolCall`.

use super::wire::{TokenUsage, Turn, TurnError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Milliseconds since the epoch of an event's RFC 3339 `ts`.
pub fn ts_ms(event: &Value) -> Option<i64> {
    let t = s(event, "ts")?;
    let t = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()?;
    Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn abs(workspace: &Path, p: &str) -> String {
    crate::acp::map::abs_path(workspace, p)
}

/// The kind of item a tool's calls become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolItem {
    Command,
    FileChange,
    Dynamic,
}

pub fn tool_item(name: &str) -> ToolItem {
    match name {
        "shell" | "read_file" | "list_dir" | "search" => ToolItem::Command,
        "write_file" | "edit_file" | "apply_patch" => ToolItem::FileChange,
        _ => ToolItem::Dynamic,
    }
}

/// The command line a command item shows.
pub fn command_text(name: &str, args: &Value) -> String {
    match name {
        "shell" => s(args, "command").unwrap_or("").to_string(),
        "read_file" => format!("read_file {}", s(args, "path").unwrap_or("")),
        "list_dir" => format!("list_dir {}", s(args, "path").unwrap_or(".")),
        "search" => format!(
            "search {} {}",
            s(args, "pattern").unwrap_or(""),
            s(args, "path").unwrap_or(".")
        ),
        other => other.to_string(),
    }
}

fn command_actions(workspace: &Path, name: &str, args: &Value) -> Value {
    let command = command_text(name, args);
    match name {
        "read_file" => {
            let p = s(args, "path").unwrap_or("");
            let base = Path::new(p)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.to_string());
            json!([{"type": "read", "command": command, "name": base, "path": abs(workspace, p)}])
        }
        "list_dir" => {
            json!([{"type": "listFiles", "command": command, "path": s(args, "path").unwrap_or(".")}])
        }
        "search" => json!([{"type": "search", "command": command,
            "query": s(args, "pattern"), "path": s(args, "path")}]),
        _ => json!([{"type": "unknown", "command": command}]),
    }
}

/// The changes a writing tool's arguments describe (`FileUpdateChange`s).
pub fn file_changes(workspace: &Path, name: &str, args: &Value) -> Vec<Value> {
    let path = s(args, "path").map(|p| abs(workspace, p));
    match name {
        "write_file" => vec![json!({
            "path": path.unwrap_or_default(),
            "kind": {"type": "add"},
            "diff": s(args, "content").unwrap_or(""),
        })],
        "edit_file" => {
            let mut diff = String::from("@@\n");
            for l in s(args, "old").unwrap_or("").lines() {
                diff.push_str(&format!("-{l}\n"));
            }
            for l in s(args, "new").unwrap_or("").lines() {
                diff.push_str(&format!("+{l}\n"));
            }
            vec![json!({"path": path.unwrap_or_default(),
                "kind": {"type": "update", "move_path": null}, "diff": diff})]
        }
        "apply_patch" => patch_changes(
            workspace,
            s(args, "patch").or_else(|| s(args, "input")).unwrap_or(""),
        ),
        _ => vec![],
    }
}

/// The files of a patch in the `*** Begin Patch` format, each with its own section.
fn patch_changes(workspace: &Path, patch: &str) -> Vec<Value> {
    let mut out: Vec<Value> = vec![];
    let mut cur: Option<(String, &str, String)> = None;
    let flush = |cur: &mut Option<(String, &str, String)>, out: &mut Vec<Value>| {
        if let Some((p, kind, diff)) = cur.take() {
            let kind = if kind == "update" {
                json!({"type": "update", "move_path": null})
            } else {
                json!({"type": kind})
            };
            out.push(json!({"path": abs(workspace, &p), "kind": kind, "diff": diff}));
        }
    };
    for line in patch.lines() {
        let header = [
            ("*** Add File: ", "add"),
            ("*** Update File: ", "update"),
            ("*** Delete File: ", "delete"),
        ]
        .iter()
        .find_map(|(h, k)| line.strip_prefix(h).map(|p| (p.trim().to_string(), *k)));
        if let Some((p, k)) = header {
            flush(&mut cur, &mut out);
            cur = Some((p, k, String::new()));
        } else if line.starts_with("*** End Patch") || line.starts_with("*** Begin Patch") {
            continue;
        } else if let Some((_, _, d)) = cur.as_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// The item of a tool call, in progress (`item/started`).
pub fn tool_call_item(workspace: &Path, call_id: &str, name: &str, args: &Value) -> Value {
    match tool_item(name) {
        ToolItem::Command => json!({
            "type": "commandExecution", "id": call_id,
            "command": command_text(name, args),
            "commandActions": command_actions(workspace, name, args),
            "cwd": workspace.to_string_lossy(),
            "status": "inProgress", "source": "agent",
            "aggregatedOutput": null, "exitCode": null, "durationMs": null,
        }),
        ToolItem::FileChange => json!({
            "type": "fileChange", "id": call_id,
            "changes": file_changes(workspace, name, args),
            "status": "inProgress",
        }),
        ToolItem::Dynamic => json!({
            "type": "dynamicToolCall", "id": call_id, "tool": name,
            "arguments": args, "status": "inProgress",
            "contentItems": null, "success": null, "durationMs": null,
        }),
    }
}

/// The text a `tool_result` shows: its output, or its error.
fn result_text(data: &Value) -> String {
    if data.get("ok").and_then(Value::as_bool) == Some(true) {
        return s(data, "output").unwrap_or("").to_string();
    }
    let e = data.get("error").unwrap_or(&Value::Null);
    format!(
        "{}: {}",
        s(e, "kind").unwrap_or("error"),
        s(e, "message").unwrap_or("")
    )
}

/// Completes a tool call's item with its `tool_result` (`declined` when the user, or
/// the mode, refused the call).
pub fn complete_tool_item(item: &mut Value, result: &Value, declined: bool) {
    let ok = result.get("ok").and_then(Value::as_bool) == Some(true);
    let kind = s(item, "type").unwrap_or("").to_string();
    let status = match (declined, ok, kind.as_str()) {
        (true, _, "commandExecution" | "fileChange") => "declined",
        (_, true, _) => "completed",
        _ => "failed",
    };
    item["status"] = json!(status);
    match kind.as_str() {
        "commandExecution" => {
            item["aggregatedOutput"] = json!(result_text(result));
            let code = result
                .get("exit_code")
                .and_then(Value::as_i64)
                .or_else(|| result.pointer("/data/exit_code").and_then(Value::as_i64))
                .or(if ok { Some(0) } else { None });
            item["exitCode"] = json!(code);
        }
        "dynamicToolCall" => {
            item["success"] = json!(ok);
            item["contentItems"] = json!([{"type": "inputText", "text": result_text(result)}]);
        }
        _ => {}
    }
}

pub fn user_item(id: &str, text: &str) -> Value {
    json!({"type": "userMessage", "id": id,
        "content": [{"type": "text", "text": text, "text_elements": []}]})
}

pub fn agent_item(id: &str, text: &str) -> Value {
    json!({"type": "agentMessage", "id": id, "text": text})
}

pub fn reasoning_item(id: &str, summary: &str) -> Value {
    let summary: Vec<&str> = if summary.is_empty() {
        vec![]
    } else {
        vec![summary]
    };
    json!({"type": "reasoning", "id": id, "summary": summary, "content": []})
}

/// A turn's Codex status from agentd's `turn_ended.status`.
pub fn turn_status(status: &str) -> &'static str {
    match status {
        "completed" => "completed",
        "interrupted" => "interrupted",
        _ => "failed",
    }
}

/// The token counts of a `provider_usage` event.
pub fn usage(data: &Value) -> TokenUsage {
    let u = data.get("usage").unwrap_or(&Value::Null);
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let total = match n("total_tokens") {
        0 => n("input_tokens") + n("output_tokens"),
        t => t,
    };
    TokenUsage {
        total_tokens: total,
        input_tokens: n("input_tokens"),
        cached_input_tokens: n("cached_tokens"),
        output_tokens: n("output_tokens"),
        reasoning_output_tokens: n("reasoning_tokens"),
    }
}

fn ended_error(data: &Value) -> Option<TurnError> {
    let e = data.get("error")?;
    Some(TurnError {
        message: format!(
            "{}: {}",
            s(e, "kind").unwrap_or("error"),
            s(e, "message").unwrap_or("")
        ),
    })
}

/// Whether a user message is context Codex itself put into the conversation (its
/// environment block, the project's instructions), which an imported Codex session
/// carries as user messages: Codex's clients never show these as the user's words or as
/// a thread's preview, and neither does the bridge.
pub fn is_codex_context(text: &str) -> bool {
    const OPENERS: [&str; 4] = [
        "<environment_context>",
        "<user_instructions>",
        "# AGENTS.md instructions for ",
        "<skills_instructions>",
    ];
    let t = text.trim_start();
    OPENERS.iter().any(|o| t.starts_with(o))
}

/// Whether a `turn_started` is of a turn the daemon started for a goal (admitted as
/// `goal:<goal_id>:<n>`, docs/goals.md): its prompt is the daemon's restatement of the
/// objective, which Codex's clients show as the goal, not as the user's words.
fn is_goal_turn(data: &Value) -> bool {
    s(data, "client_request_id").is_some_and(|c| c.starts_with("goal:"))
}

/// A user message steered into a running turn: the user's own words.
fn is_steer(data: &Value) -> bool {
    data.get("steer").and_then(Value::as_bool) == Some(true)
}

/// A session's durable events folded into turns.
#[derive(Debug, Default)]
pub struct Turns {
    pub turns: Vec<Turn>,
    /// `turn_id` → seq of its `turn_started` (`thread/revert`).
    pub started_seq: HashMap<String, u64>,
    /// `turn_id` → seq of its `turn_ended` (`thread/fork` at a turn).
    pub ended_seq: HashMap<String, u64>,
    /// The first user message (the thread's preview).
    pub preview: Option<String>,
    /// Index of the open turn, if one has not ended.
    open: Option<usize>,
    /// The open turn is one the daemon started for a goal.
    goal_turn: bool,
    /// call_id → (turn index, item index).
    calls: HashMap<String, (usize, usize)>,
    denied: std::collections::HashSet<String>,
    pub usage: TokenUsage,
    pub last_usage: Option<TokenUsage>,
}

impl Turns {
    /// The open turn, opening a synthetic one for events outside any turn (imported
    /// sessions record none).
    fn current(&mut self, seq: u64, ts: Option<i64>) -> usize {
        if let Some(i) = self.open {
            return i;
        }
        self.turns.push(Turn {
            id: format!("seq-{seq}"),
            items: vec![],
            status: "completed",
            error: None,
            started_at: ts.map(|t| t / 1000),
            completed_at: ts.map(|t| t / 1000),
        });
        let i = self.turns.len() - 1;
        self.open = Some(i);
        i
    }

    pub fn add(&mut self, event: &Value, workspace: &Path) {
        let seq = event.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let data = event.get("data").unwrap_or(&Value::Null);
        let ts = ts_ms(event);
        match s(event, "type").unwrap_or("") {
            "turn_started" => {
                let id = s(data, "turn_id").unwrap_or("").to_string();
                self.goal_turn = is_goal_turn(data);
                self.started_seq.insert(id.clone(), seq);
                self.turns.push(Turn {
                    id,
                    items: vec![],
                    status: "inProgress",
                    error: None,
                    started_at: ts.map(|t| t / 1000),
                    completed_at: None,
                });
                self.open = Some(self.turns.len() - 1);
            }
            "turn_ended" => {
                self.goal_turn = false;
                if let Some(id) = s(data, "turn_id") {
                    self.ended_seq.insert(id.to_string(), seq);
                }
                if let Some(i) = self.open.take() {
                    let t = &mut self.turns[i];
                    t.status = turn_status(s(data, "status").unwrap_or(""));
                    t.error = ended_error(data);
                    t.completed_at = ts.map(|t| t / 1000);
                }
            }
            "user_message" => {
                let text = s(data, "text").unwrap_or("");
                if is_codex_context(text) || (self.goal_turn && !is_steer(data)) {
                    return;
                }
                if self.preview.is_none() && !text.is_empty() {
                    self.preview = Some(text.to_string());
                }
                // A user message outside a turn starts a turn of its own.
                if self
                    .open
                    .is_some_and(|i| self.turns[i].id.starts_with("seq-"))
                {
                    self.open = None;
                }
                let i = self.current(seq, ts);
                self.turns[i]
                    .items
                    .push(user_item(&format!("user-{seq}"), text));
            }
            "assistant_message" => {
                let i = self.current(seq, ts);
                let text = s(data, "text").unwrap_or("");
                self.turns[i]
                    .items
                    .push(agent_item(&format!("msg-{seq}"), text));
            }
            "reasoning" => {
                let i = self.current(seq, ts);
                let text = crate::acp::map::reasoning_text(data);
                self.turns[i]
                    .items
                    .push(reasoning_item(&format!("rs-{seq}"), &text));
            }
            "tool_call" => {
                let i = self.current(seq, ts);
                let call_id = s(data, "call_id").unwrap_or("").to_string();
                let name = s(data, "name").unwrap_or("tool");
                let args = data.get("args").cloned().unwrap_or_else(|| json!({}));
                self.turns[i]
                    .items
                    .push(tool_call_item(workspace, &call_id, name, &args));
                self.calls
                    .insert(call_id, (i, self.turns[i].items.len() - 1));
            }
            "permission_decision" if s(data, "decision") == Some("deny") => {
                if let Some(c) = s(data, "call_id") {
                    self.denied.insert(c.to_string());
                }
            }
            "tool_result" => {
                let call_id = s(data, "call_id").unwrap_or("");
                if let Some(&(t, k)) = self.calls.get(call_id) {
                    let declined = self.denied.contains(call_id);
                    if let Some(item) = self.turns.get_mut(t).and_then(|t| t.items.get_mut(k)) {
                        complete_tool_item(item, data, declined);
                    }
                }
            }
            "provider_usage" => {
                let u = usage(data);
                self.usage.add(&u);
                self.last_usage = Some(u);
            }
            "history_compaction" => {
                let i = self.current(seq, ts);
                self.turns[i]
                    .items
                    .push(json!({"type": "contextCompaction", "id": format!("compact-{seq}")}));
            }
            _ => {}
        }
    }
}

/// A notification: method and params.
pub type Note = (&'static str, Value);

/// The live mapping of one followed session.
#[derive(Debug, Default)]
pub struct Live {
    pub thread_id: String,
    pub turn_id: Option<String>,
    /// The agent message being streamed: its item id and its text so far.
    message: Option<(String, String)>,
    reasoning: Option<(String, String)>,
    counter: u64,
    /// Tool items started and not completed yet: call_id → item.
    tools: HashMap<String, Value>,
    denied: std::collections::HashSet<String>,
    pub usage: TokenUsage,
    pub last_seq: Option<u64>,
    /// The running turn is one the daemon started for a goal.
    goal_turn: bool,
}

impl Live {
    pub fn new(thread_id: String) -> Live {
        Live {
            thread_id,
            ..Live::default()
        }
    }

    fn turn(&self) -> String {
        self.turn_id.clone().unwrap_or_default()
    }

    fn started(&self, item: Value, ms: i64) -> Note {
        (
            "item/started",
            json!({"threadId": self.thread_id, "turnId": self.turn(), "item": item, "startedAtMs": ms}),
        )
    }

    fn completed(&self, item: Value, ms: i64) -> Note {
        (
            "item/completed",
            json!({"threadId": self.thread_id, "turnId": self.turn(), "item": item, "completedAtMs": ms}),
        )
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}-{}-{}", self.turn(), self.counter)
    }

    /// Whether the call's `tool_call` was followed (or announced) and has no result yet.
    pub fn has_call(&self, call_id: &str) -> bool {
        self.tools.contains_key(call_id)
    }

    /// The `item/started` of a tool call, once: a permission request may come before the
    /// call's event, and the item must exist before the client is asked about it.
    pub fn announce(
        &mut self,
        workspace: &Path,
        call_id: &str,
        name: &str,
        args: &Value,
    ) -> Option<Note> {
        if self.tools.contains_key(call_id) {
            return None;
        }
        let item = tool_call_item(workspace, call_id, name, args);
        self.tools.insert(call_id.to_string(), item.clone());
        Some(self.started(item, now_ms()))
    }

    fn close_message(&mut self, ms: i64, out: &mut Vec<Note>) {
        if let Some((id, text)) = self.message.take() {
            out.push(self.completed(agent_item(&id, &text), ms));
        }
    }

    fn close_reasoning(&mut self, ms: i64, out: &mut Vec<Note>) {
        if let Some((id, text)) = self.reasoning.take() {
            out.push(self.completed(reasoning_item(&id, &text), ms));
        }
    }

    /// The notifications one event of the followed session becomes.
    pub fn on_event(&mut self, event: &Value, workspace: &Path) -> Vec<Note> {
        let data = event.get("data").unwrap_or(&Value::Null);
        if let Some(seq) = event.get("seq").and_then(Value::as_u64) {
            self.last_seq = Some(seq);
        }
        let ms = ts_ms(event).unwrap_or_else(now_ms);
        let mut out = vec![];
        match s(event, "type").unwrap_or("") {
            "turn_started" => {
                self.turn_id = s(data, "turn_id").map(str::to_string);
                self.goal_turn = is_goal_turn(data);
                self.tools.clear();
                self.denied.clear();
                let turn = Turn {
                    id: self.turn(),
                    items: vec![],
                    status: "inProgress",
                    error: None,
                    started_at: Some(ms / 1000),
                    completed_at: None,
                };
                out.push((
                    "turn/started",
                    json!({"threadId": self.thread_id, "turn": turn}),
                ));
            }
            "user_message"
                if is_codex_context(s(data, "text").unwrap_or(""))
                    || (self.goal_turn && !is_steer(data)) => {}
            "user_message" => {
                let seq = event.get("seq").and_then(Value::as_u64).unwrap_or(0);
                let item = user_item(&format!("user-{seq}"), s(data, "text").unwrap_or(""));
                out.push(self.started(item.clone(), ms));
                out.push(self.completed(item, ms));
            }
            "text_delta" => {
                let d = s(data, "text").or_else(|| s(data, "delta")).unwrap_or("");
                self.close_reasoning(ms, &mut out);
                if self.message.is_none() {
                    let id = self.next_id("msg");
                    out.push(self.started(agent_item(&id, ""), ms));
                    self.message = Some((id, String::new()));
                }
                if let Some((id, text)) = self.message.as_mut() {
                    text.push_str(d);
                    let id = id.clone();
                    out.push((
                        "item/agentMessage/delta",
                        json!({"threadId": self.thread_id, "turnId": self.turn(), "itemId": id, "delta": d}),
                    ));
                }
            }
            "assistant_message" => {
                let full = s(data, "text").unwrap_or("").to_string();
                self.close_reasoning(ms, &mut out);
                let id = match self.message.take() {
                    Some((id, _)) => id,
                    None => {
                        let id = self.next_id("msg");
                        out.push(self.started(agent_item(&id, ""), ms));
                        id
                    }
                };
                out.push(self.completed(agent_item(&id, &full), ms));
            }
            "reasoning_delta" => {
                let d = s(data, "text").or_else(|| s(data, "delta")).unwrap_or("");
                if self.reasoning.is_none() {
                    let id = self.next_id("rs");
                    out.push(self.started(reasoning_item(&id, ""), ms));
                    self.reasoning = Some((id, String::new()));
                }
                if let Some((id, text)) = self.reasoning.as_mut() {
                    text.push_str(d);
                    let id = id.clone();
                    out.push((
                        "item/reasoning/summaryTextDelta",
                        json!({"threadId": self.thread_id, "turnId": self.turn(), "itemId": id,
                            "delta": d, "summaryIndex": 0}),
                    ));
                }
            }
            "reasoning" => {
                let full = crate::acp::map::reasoning_text(data);
                let id = match self.reasoning.take() {
                    Some((id, _)) => id,
                    None => {
                        let id = self.next_id("rs");
                        out.push(self.started(reasoning_item(&id, ""), ms));
                        id
                    }
                };
                out.push(self.completed(reasoning_item(&id, &full), ms));
            }
            "tool_call" => {
                self.close_message(ms, &mut out);
                self.close_reasoning(ms, &mut out);
                let call_id = s(data, "call_id").unwrap_or("");
                let name = s(data, "name").unwrap_or("tool");
                let args = data.get("args").cloned().unwrap_or_else(|| json!({}));
                if let Some(n) = self.announce(workspace, call_id, name, &args) {
                    out.push(n);
                }
            }
            "permission_decision" if s(data, "decision") == Some("deny") => {
                if let Some(c) = s(data, "call_id") {
                    self.denied.insert(c.to_string());
                }
            }
            "tool_result" => {
                let call_id = s(data, "call_id").unwrap_or("");
                if let Some(mut item) = self.tools.remove(call_id) {
                    complete_tool_item(&mut item, data, self.denied.contains(call_id));
                    out.push(self.completed(item, ms));
                }
            }
            "provider_usage" => {
                let u = usage(data);
                self.usage.add(&u);
                let window = data.get("context_window").and_then(Value::as_u64);
                out.push((
                    "thread/tokenUsage/updated",
                    json!({"threadId": self.thread_id, "turnId": self.turn(),
                        "tokenUsage": {"total": self.usage, "last": u, "modelContextWindow": window}}),
                ));
            }
            "history_compaction" => {
                out.push((
                    "thread/compacted",
                    json!({"threadId": self.thread_id, "turnId": self.turn()}),
                ));
            }
            "session_info" => {
                out.push((
                    "thread/name/updated",
                    json!({"threadId": self.thread_id, "threadName": s(data, "title")}),
                ));
            }
            "turn_ended" => {
                self.close_message(ms, &mut out);
                self.close_reasoning(ms, &mut out);
                let status = turn_status(s(data, "status").unwrap_or(""));
                let error = ended_error(data);
                if let Some(e) = &error {
                    out.push((
                        "error",
                        json!({"threadId": self.thread_id, "turnId": self.turn(),
                            "error": e, "willRetry": false}),
                    ));
                }
                let turn = Turn {
                    id: s(data, "turn_id").map_or_else(|| self.turn(), str::to_string),
                    items: vec![],
                    status,
                    error,
                    started_at: None,
                    completed_at: Some(ms / 1000),
                };
                out.push((
                    "turn/completed",
                    json!({"threadId": self.thread_id, "turn": turn}),
                ));
                self.turn_id = None;
            }
            _ => {}
        }
        out
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: &str, data: Value) -> Value {
        json!({"seq": seq, "ts": "2026-11-27T04:43:48.250Z", "type": kind, "data": data})
    }

    fn script() -> Vec<Value> {
        vec![
            ev(1, "session_started", json!({"workspace": "/w"})),
            ev(2, "turn_started", json!({"turn_id": "t1"})),
            ev(3, "user_message", json!({"text": "list it"})),
            ev(
                4,
                "reasoning",
                json!({"item": {"summary": [{"text": "Looking."}]}}),
            ),
            ev(
                5,
                "tool_call",
                json!({"call_id": "c1", "name": "shell", "args": {"command": "ls -a"}}),
            ),
            ev(
                6,
                "tool_result",
                json!({"call_id": "c1", "ok": true, "output": "a\nb\n", "exit_code": 0}),
            ),
            ev(
                7,
                "tool_call",
                json!({"call_id": "c2", "name": "write_file", "args": {"path": "n.txt", "content": "hi\n"}}),
            ),
            ev(
                8,
                "permission_decision",
                json!({"call_id": "c2", "decision": "deny"}),
            ),
            ev(
                9,
                "tool_result",
                json!({"call_id": "c2", "ok": false, "error": {"kind": "permission_denied", "message": "no"}}),
            ),
            ev(10, "assistant_message", json!({"text": "Done."})),
            ev(
                11,
                "provider_usage",
                json!({"usage": {"input_tokens": 10, "output_tokens": 5}}),
            ),
            ev(
                12,
                "turn_ended",
                json!({"turn_id": "t1", "status": "completed"}),
            ),
        ]
    }

    #[test]
    fn durable_events_fold_into_turns_with_their_items() {
        let mut t = Turns::default();
        for e in script() {
            t.add(&e, Path::new("/w"));
        }
        assert_eq!(t.turns.len(), 1);
        let turn = &t.turns[0];
        assert_eq!((turn.id.as_str(), turn.status), ("t1", "completed"));
        let kinds: Vec<&str> = turn
            .items
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "userMessage",
                "reasoning",
                "commandExecution",
                "fileChange",
                "agentMessage"
            ]
        );
        assert_eq!(turn.items[1]["summary"], json!(["Looking."]));
        assert_eq!(turn.items[2]["command"], "ls -a");
        assert_eq!(turn.items[2]["aggregatedOutput"], "a\nb\n");
        assert_eq!(turn.items[2]["exitCode"], 0);
        assert_eq!(turn.items[3]["status"], "declined");
        assert_eq!(turn.items[3]["changes"][0]["path"], "/w/n.txt");
        assert_eq!(turn.items[4]["text"], "Done.");
        assert_eq!(t.preview.as_deref(), Some("list it"));
        assert_eq!(t.usage.total_tokens, 15);
        assert_eq!(t.started_seq["t1"], 2);
    }

    #[test]
    fn live_events_stream_deltas_then_complete_each_item_once() {
        let mut l = Live::new("T".into());
        let w = Path::new("/w");
        let mut notes = vec![];
        let mut feed = |e: Value, l: &mut Live| notes.extend(l.on_event(&e, w));
        feed(ev(2, "turn_started", json!({"turn_id": "t1"})), &mut l);
        feed(
            json!({"type": "text_delta", "data": {"text": "Do"}}),
            &mut l,
        );
        feed(
            json!({"type": "text_delta", "data": {"text": "ne."}}),
            &mut l,
        );
        feed(
            ev(10, "assistant_message", json!({"text": "Done."})),
            &mut l,
        );
        feed(
            ev(
                12,
                "turn_ended",
                json!({"turn_id": "t1", "status": "interrupted"}),
            ),
            &mut l,
        );
        let methods: Vec<&str> = notes.iter().map(|(m, _)| *m).collect();
        assert_eq!(
            methods,
            [
                "turn/started",
                "item/started",
                "item/agentMessage/delta",
                "item/agentMessage/delta",
                "item/completed",
                "turn/completed"
            ]
        );
        assert_eq!(notes[4].1["item"]["text"], "Done.");
        assert_eq!(notes[2].1["itemId"], notes[4].1["item"]["id"]);
        assert_eq!(notes[5].1["turn"]["status"], "interrupted");
        assert_eq!(notes[5].1["turn"]["id"], "t1");
    }

    #[test]
    fn a_patch_lists_each_file_with_its_section() {
        let p = "*** Begin Patch\n*** Add File: a.txt\n+x\n*** Update File: src/b.rs\n@@\n-1\n+2\n*** End Patch\n";
        let c = patch_changes(Path::new("/w"), p);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0]["path"], "/w/a.txt");
        assert_eq!(c[0]["kind"]["type"], "add");
        assert_eq!(c[1]["diff"], "@@\n-1\n+2\n");
    }
}
