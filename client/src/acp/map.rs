//! agentd events → ACP `session/update` payloads (pure, unit-tested).
//!
//! One mapping serves both directions of time: `session/load` replays the durable Log
//! through [`replay`], and a live prompt feeds every event (durable and ephemeral) to a
//! [`Live`] mapper, which streams deltas and falls back to the durable text for whatever
//! the deltas did not carry (a lagged subscription, a provider that does not stream).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::path::Path;

/// Largest file whose current text is read to fill a write's `oldText`.
const MAX_DIFF_BASE: u64 = 1024 * 1024;

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": text_block(text)})
}

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The absolute path a tool argument names (tools resolve paths in the workspace).
pub fn abs_path(workspace: &Path, p: &str) -> String {
    let path = Path::new(p);
    if path.is_absolute() {
        p.to_string()
    } else {
        workspace.join(path).to_string_lossy().into_owned()
    }
}

/// ACP `ToolKind` of an agentd tool.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "read_file" | "list_dir" => "read",
        "search" => "search",
        "write_file" | "edit_file" | "apply_patch" => "edit",
        "shell" => "execute",
        "memory_apply" => "think",
        _ => "other",
    }
}

fn short(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if out.len() < line.len() || s.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// A human title for a tool call.
pub fn tool_title(name: &str, args: &Value) -> String {
    let path = s(args, "path");
    match name {
        "read_file" => format!("Read {}", path.unwrap_or("?")),
        "list_dir" => format!("List {}", path.unwrap_or(".")),
        "search" => format!(
            "Search `{}` in {}",
            short(s(args, "pattern").unwrap_or(""), 60),
            path.unwrap_or(".")
        ),
        "write_file" => format!("Write {}", path.unwrap_or("?")),
        "edit_file" => format!("Edit {}", path.unwrap_or("?")),
        "apply_patch" => "Apply a patch".to_string(),
        "shell" => format!("Run `{}`", short(s(args, "command").unwrap_or(""), 80)),
        "memory_apply" => "Update memory".to_string(),
        // A subagent (docs/subagents.md): its title, else its brief's first line.
        "task" => format!(
            "Subagent: {}",
            short(
                s(args, "title").or(s(args, "prompt")).unwrap_or("").trim(),
                80
            )
        ),
        other => other.to_string(),
    }
}

/// The fields shared by a `tool_call` update and a permission request's `toolCall`.
/// `old_text` is the current content of a file a `write_file` replaces, when known.
pub fn tool_call_fields(
    workspace: &Path,
    call_id: &str,
    name: &str,
    args: &Value,
    old_text: Option<String>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("toolCallId".into(), json!(call_id));
    m.insert("title".into(), json!(tool_title(name, args)));
    m.insert("kind".into(), json!(tool_kind(name)));
    m.insert("rawInput".into(), args.clone());
    if let Some(p) = s(args, "path") {
        m.insert(
            "locations".into(),
            json!([{"path": abs_path(workspace, p)}]),
        );
        let diff = match name {
            "write_file" => Some(json!({
                "type": "diff", "path": abs_path(workspace, p),
                "oldText": old_text, "newText": s(args, "content").unwrap_or(""),
            })),
            "edit_file" => Some(json!({
                "type": "diff", "path": abs_path(workspace, p),
                "oldText": s(args, "old").unwrap_or(""), "newText": s(args, "new").unwrap_or(""),
            })),
            _ => None,
        };
        if let Some(d) = diff {
            m.insert("content".into(), json!([d]));
        }
    }
    m
}

/// A permission request as the bridge of session `sid` handles it, and the subagent
/// that asked when it is not `sid` itself: a child's call is shown under the id
/// `CHILD/CALL_ID` (its own call ids may repeat the parent's), and the request keeps the
/// child in `subagent_session_id`.
pub fn subagent_request(mut params: Value, sid: &str) -> (Value, Option<String>) {
    let child = s(&params, "session_id")
        .filter(|c| !c.is_empty() && *c != sid)
        .map(str::to_string);
    if let (Some(c), Some(o)) = (&child, params.as_object_mut()) {
        let call = o.get("call_id").and_then(Value::as_str).unwrap_or("");
        let shown = format!("{c}/{call}");
        o.insert("call_id".into(), json!(shown));
        o.insert("subagent_session_id".into(), json!(c));
    }
    (params, child)
}

/// Marks a subagent's tool call: its title names the child, and `_meta.agentd` holds
/// the child's session id.
pub fn mark_subagent(fields: &mut Map<String, Value>, child: &str) {
    let title = fields
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    fields.insert("title".into(), json!(format!("Subagent {child}: {title}")));
    fields.insert(
        "_meta".into(),
        json!({"agentd": {"subagentSessionId": child}}),
    );
}

/// The update that ends a subagent's permission card once answered: `completed` when
/// allowed (the call then runs in the child), `failed` when denied.
pub fn subagent_decided(shown_call_id: &str, child: &str, allowed: bool) -> Value {
    let text = if allowed {
        format!("allowed; it runs in subagent {child}")
    } else {
        format!("denied; subagent {child} is told so")
    };
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": shown_call_id,
        "status": if allowed { "completed" } else { "failed" },
        "content": [{"type": "content", "content": text_block(&text)}],
        "_meta": {"agentd": {"subagentSessionId": child}},
    })
}

/// The current text of the file a live `write_file` is about to replace.
pub fn current_text(workspace: &Path, name: &str, args: &Value) -> Option<String> {
    if name != "write_file" {
        return None;
    }
    let p = abs_path(workspace, s(args, "path")?);
    let meta = std::fs::metadata(&p).ok()?;
    if !meta.is_file() || meta.len() > MAX_DIFF_BASE {
        return None;
    }
    std::fs::read_to_string(&p).ok()
}

fn tool_call_update(workspace: &Path, data: &Value, old_text: Option<String>) -> Option<Value> {
    let call_id = s(data, "call_id")?;
    let name = s(data, "name").unwrap_or("tool");
    let args = data.get("args").cloned().unwrap_or_else(|| json!({}));
    let mut m = tool_call_fields(workspace, call_id, name, &args, old_text);
    m.insert("sessionUpdate".into(), json!("tool_call"));
    m.insert("status".into(), json!("pending"));
    Some(Value::Object(m))
}

/// The `tool_result` fields a `tool_call_update`'s `rawOutput` copies; `subagent` is a
/// `task` call's child `{session_id, turn_id, status}` (docs/acp.md#subagents).
const RAW_OUTPUT_KEYS: [&str; 6] = ["ok", "output", "error", "exit_code", "resource", "subagent"];

fn tool_result_update(data: &Value) -> Option<Value> {
    let call_id = s(data, "call_id")?;
    let ok = data.get("ok").and_then(Value::as_bool).unwrap_or(false);
    let text = if ok {
        s(data, "output").unwrap_or("").to_string()
    } else {
        let e = data.get("error").cloned().unwrap_or(Value::Null);
        format!(
            "{}: {}",
            s(&e, "kind").unwrap_or("error"),
            s(&e, "message").unwrap_or("")
        )
    };
    let mut raw = Map::new();
    for k in RAW_OUTPUT_KEYS {
        if let Some(v) = data.get(k) {
            raw.insert(k.into(), v.clone());
        }
    }
    let mut u = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": if ok { "completed" } else { "failed" },
        "rawOutput": Value::Object(raw),
    });
    if !text.is_empty() {
        u["content"] = json!([{"type": "content", "content": text_block(&text)}]);
    }
    Some(u)
}

/// The summary text of a reasoning item (`summary[].text`), if any.
pub fn reasoning_text(data: &Value) -> String {
    let item = data.get("item").unwrap_or(&Value::Null);
    let mut out = String::new();
    if let Some(parts) = item.get("summary").and_then(Value::as_array) {
        for p in parts {
            if let Some(t) = s(p, "text") {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(t);
            }
        }
    }
    if out.is_empty() {
        if let Some(t) = s(item, "text").or_else(|| s(data, "text")) {
            out.push_str(t);
        }
    }
    out
}

fn usage_update(data: &Value) -> Option<Value> {
    let size = data.get("context_window").and_then(Value::as_u64)?;
    let u = data.get("usage")?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let used = match u.get("total_tokens").and_then(Value::as_u64) {
        Some(t) if t > 0 => t,
        _ => n("input_tokens") + n("output_tokens"),
    };
    Some(json!({"sessionUpdate": "usage_update", "used": used, "size": size}))
}

/// The updates one durable event replays as (`session/load`). Event types without an
/// ACP counterpart (turn bookkeeping, permission decisions, checkpoints) give none.
pub fn replay(event: &Value, workspace: &Path) -> Vec<Value> {
    let data = event.get("data").unwrap_or(&Value::Null);
    let kind = s(event, "type").unwrap_or("");
    let one = match kind {
        "user_message" => s(data, "text")
            .filter(|t| !t.is_empty())
            .map(|t| chunk("user_message_chunk", t)),
        "assistant_message" => s(data, "text")
            .filter(|t| !t.is_empty())
            .map(|t| chunk("agent_message_chunk", t)),
        "reasoning" => Some(reasoning_text(data))
            .filter(|t| !t.is_empty())
            .map(|t| chunk("agent_thought_chunk", &t)),
        "tool_call" => tool_call_update(workspace, data, None),
        "tool_result" => tool_result_update(data),
        "provider_usage" => usage_update(data),
        "session_info" => {
            s(data, "title").map(|t| json!({"sessionUpdate": "session_info_update", "title": t}))
        }
        _ => None,
    };
    one.into_iter().collect()
}

/// The ACP `stopReason` of a completed turn: the response's `stop_reason`, else the one
/// its `turn_ended` carried, else `end_turn`. Only ACP's own values pass.
pub fn stop_reason(status: Option<&str>, response: Option<&str>, live: &Live) -> &'static str {
    if status != Some("completed") {
        return "end_turn";
    }
    match response.or(live.stop_reason.as_deref()) {
        Some("max_tokens") => "max_tokens",
        Some("refusal") => "refusal",
        _ => "end_turn",
    }
}

/// One `agentd/events` page read without building a `Value` tree of it: each event's
/// `data` is split into its fields, kept as JSON text, in the same pass.
#[derive(Deserialize)]
pub struct Page<'a> {
    #[serde(borrow)]
    pub events: Vec<RawEvent<'a>>,
    #[serde(default)]
    pub next_after_seq: Option<u64>,
}

/// An event of a page: its type and its `data`'s fields.
#[derive(Deserialize)]
pub struct RawEvent<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    pub data: Fields<'a>,
}

/// An object's fields, each still JSON text (`null` stays `null`, as in a `Value`).
/// Data that is not an object has no fields, and replays as nothing, as in [`replay`].
#[derive(Default)]
pub struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

#[derive(Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    fn to_value(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in &self.0 {
            m.insert(
                k.to_string(),
                serde_json::from_str(v.get()).unwrap_or(Value::Null),
            );
        }
        Value::Object(m)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Fields<'a>, E> {
                Ok(Fields::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Fields<'a>, E> {
                Ok(Fields::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Fields<'a>, E> {
                Ok(Fields::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Fields<'a>, E> {
                Ok(Fields::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Fields<'a>, E> {
                Ok(Fields::default())
            }
            fn visit_unit<E>(self) -> Result<Fields<'a>, E> {
                Ok(Fields::default())
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(
                self,
                mut seq: S,
            ) -> Result<Fields<'a>, S::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Fields::default())
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Fields<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some((Key(k), v)) = m.next_entry::<Key<'de>, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

fn push_json(out: &mut String, v: &impl serde::Serialize) {
    if let Ok(t) = serde_json::to_string(v) {
        out.push_str(&t);
    }
}

/// The `tool_call_update` of a `tool_result`, written straight into `out`: the output
/// (the bulk of a Log) is copied as JSON text, never unescaped and escaped again. The
/// result equals [`replay`]'s (unit-tested).
fn tool_result_raw(f: &Fields<'_>, out: &mut String) -> bool {
    let Some(call_id) = f
        .get("call_id")
        .and_then(|c| serde_json::from_str::<Cow<str>>(c.get()).ok())
    else {
        return false;
    };
    let ok = f.get("ok").is_some_and(|v| v.get() == "true");
    let mut raw = String::from("{");
    for k in RAW_OUTPUT_KEYS {
        if let Some(v) = f.get(k) {
            if raw.len() > 1 {
                raw.push(',');
            }
            raw.push('"');
            raw.push_str(k);
            raw.push_str("\":");
            raw.push_str(v.get());
        }
    }
    raw.push('}');
    // The content text as a JSON string literal, if any.
    let text: Option<Cow<str>> = if ok {
        f.get("output")
            .map(|v| v.get())
            .filter(|t| t.starts_with('"') && *t != "\"\"")
            .map(Cow::Borrowed)
    } else {
        let e: Value = f
            .get("error")
            .and_then(|e| serde_json::from_str(e.get()).ok())
            .unwrap_or(Value::Null);
        let t = format!(
            "{}: {}",
            s(&e, "kind").unwrap_or("error"),
            s(&e, "message").unwrap_or("")
        );
        serde_json::to_string(&t).ok().map(Cow::Owned)
    };
    out.push_str(r#"{"sessionUpdate":"tool_call_update","toolCallId":"#);
    push_json(out, &call_id);
    out.push_str(r#","status":"#);
    out.push_str(if ok { r#""completed""# } else { r#""failed""# });
    out.push_str(r#","rawOutput":"#);
    out.push_str(&raw);
    if let Some(t) = text {
        out.push_str(r#","content":[{"type":"content","content":{"type":"text","text":"#);
        out.push_str(&t);
        out.push_str("}}]");
    }
    out.push('}');
    true
}

/// Appends the lines one page event replays as (`session/load`) to `out`, each
/// `prefix` + update + `}}\n` (`prefix` opens the notification up to `"update":`).
/// `tool_result`s take the raw path; the other (small) events go through [`replay`].
pub fn replay_raw(ev: &RawEvent<'_>, workspace: &Path, prefix: &str, out: &mut String) {
    match ev.kind.as_ref() {
        "tool_result" => {
            let mark = out.len();
            out.push_str(prefix);
            if tool_result_raw(&ev.data, out) {
                out.push_str("}}\n");
            } else {
                out.truncate(mark);
            }
        }
        "user_message" | "assistant_message" | "reasoning" | "tool_call" | "provider_usage"
        | "session_info" => {
            let event = json!({"type": ev.kind, "data": ev.data.to_value()});
            for u in replay(&event, workspace) {
                out.push_str(prefix);
                push_json(out, &u);
                out.push_str("}}\n");
            }
        }
        _ => {}
    }
}

/// Live mapping of one prompt's events.
#[derive(Debug, Default)]
pub struct Live {
    /// Text streamed as deltas since the last `assistant_message`.
    text: String,
    /// Thought text streamed since the last `reasoning`.
    thought: String,
    pub turn_id: Option<String>,
    pub ended: bool,
    /// Seq of the last durable event seen (resubscribe point after a lag).
    pub last_seq: Option<u64>,
    /// Tool calls already announced (a permission request may come before the event).
    announced: std::collections::HashSet<String>,
    /// The turn's `turn_ended.stop_reason` (`max_tokens`, `refusal`), when it has one.
    pub stop_reason: Option<String>,
}

fn delta(data: &Value) -> &str {
    s(data, "text").or_else(|| s(data, "delta")).unwrap_or("")
}

/// What remains of `full` once `streamed` (a prefix of it, normally) was sent.
fn remainder<'a>(full: &'a str, streamed: &str) -> &'a str {
    full.strip_prefix(streamed)
        .unwrap_or(if streamed.is_empty() { full } else { "" })
}

impl Live {
    /// The `tool_call` update for a call, once: `None` if it was already sent.
    pub fn announce(
        &mut self,
        workspace: &Path,
        call_id: &str,
        name: &str,
        args: &Value,
    ) -> Option<Value> {
        if !self.announced.insert(call_id.to_string()) {
            return None;
        }
        let old = current_text(workspace, name, args);
        let data = json!({"call_id": call_id, "name": name, "args": args});
        tool_call_update(workspace, &data, old)
    }

    /// Updates for one live event. `user_message` is not echoed (the client sent it).
    pub fn on_event(&mut self, event: &Value, workspace: &Path) -> Vec<Value> {
        let data = event.get("data").unwrap_or(&Value::Null);
        if let Some(seq) = event.get("seq").and_then(Value::as_u64) {
            self.last_seq = Some(seq);
        }
        match s(event, "type").unwrap_or("") {
            "text_delta" => {
                let d = delta(data);
                if d.is_empty() {
                    return vec![];
                }
                self.text.push_str(d);
                vec![chunk("agent_message_chunk", d)]
            }
            "reasoning_delta" => {
                let d = delta(data);
                if d.is_empty() {
                    return vec![];
                }
                self.thought.push_str(d);
                vec![chunk("agent_thought_chunk", d)]
            }
            "assistant_message" => {
                let full = s(data, "text").unwrap_or("");
                let rest = remainder(full, &self.text).to_string();
                self.text.clear();
                if rest.is_empty() {
                    vec![]
                } else {
                    vec![chunk("agent_message_chunk", &rest)]
                }
            }
            "reasoning" => {
                let full = reasoning_text(data);
                let rest = remainder(&full, &self.thought).to_string();
                self.thought.clear();
                if rest.is_empty() {
                    vec![]
                } else {
                    vec![chunk("agent_thought_chunk", &rest)]
                }
            }
            "tool_call" => {
                let name = s(data, "name").unwrap_or("");
                let args = data.get("args").cloned().unwrap_or_else(|| json!({}));
                let call_id = s(data, "call_id").unwrap_or("");
                self.announce(workspace, call_id, name, &args)
                    .into_iter()
                    .collect()
            }
            "turn_started" => {
                if self.turn_id.is_none() {
                    self.turn_id = s(data, "turn_id").map(str::to_string);
                }
                vec![]
            }
            "turn_ended" => {
                let id = s(data, "turn_id");
                if self.turn_id.is_none() || id == self.turn_id.as_deref() {
                    self.ended = true;
                    self.stop_reason = s(data, "stop_reason").map(str::to_string);
                }
                vec![]
            }
            // The step cut by the crash runs again from its start: what it streamed
            // before is no part of the text its `assistant_message` will record.
            "turn_resumed" => {
                self.text.clear();
                self.thought.clear();
                vec![]
            }
            "user_message" => vec![],
            _ => replay(event, workspace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: &str, data: Value) -> Value {
        json!({"seq": seq, "type": kind, "data": data})
    }

    #[test]
    fn replays_messages_tools_and_usage() {
        let ws = Path::new("/w");
        assert_eq!(
            replay(&ev(1, "user_message", json!({"text": "hi"})), ws),
            vec![
                json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}})
            ]
        );
        let call = replay(
            &ev(
                2,
                "tool_call",
                json!({"call_id":"c1","name":"write_file","args":{"path":"a.txt","content":"x"}}),
            ),
            ws,
        );
        assert_eq!(call[0]["kind"], "edit");
        assert_eq!(call[0]["title"], "Write a.txt");
        assert_eq!(call[0]["locations"][0]["path"], "/w/a.txt");
        assert_eq!(call[0]["content"][0]["type"], "diff");
        assert_eq!(call[0]["content"][0]["newText"], "x");
        let res = replay(
            &ev(
                3,
                "tool_result",
                json!({"call_id":"c1","ok":false,"error":{"kind":"permission_denied","message":"no"}}),
            ),
            ws,
        );
        assert_eq!(res[0]["status"], "failed");
        assert_eq!(
            res[0]["content"][0]["content"]["text"],
            "permission_denied: no"
        );
        let u = replay(
            &ev(
                4,
                "provider_usage",
                json!({"provider":"p","model":"m","usage":{"input_tokens":10,"output_tokens":5},"context_window":100}),
            ),
            ws,
        );
        assert_eq!(
            u[0],
            json!({"sessionUpdate":"usage_update","used":15,"size":100})
        );
        assert!(replay(&ev(5, "turn_ended", json!({})), ws).is_empty());
        let r = replay(
            &ev(
                6,
                "reasoning",
                json!({"item":{"summary":[{"type":"summary_text","text":"hm"}]}}),
            ),
            ws,
        );
        assert_eq!(r[0]["sessionUpdate"], "agent_thought_chunk");
    }

    #[test]
    fn the_raw_replay_path_equals_the_value_path() {
        let ws = Path::new("/w");
        let prefix =
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":"#;
        let events = [
            ev(1, "user_message", json!({"text": "hi \"there\"\n"})),
            ev(
                2,
                "tool_call",
                json!({"call_id":"c1","name":"read_file","args":{"path":"a.rs"}}),
            ),
            ev(
                3,
                "tool_result",
                json!({"call_id":"c1","ok":true,"output":"fn a() {}\n\t\u{1} é"}),
            ),
            ev(
                4,
                "tool_result",
                json!({"call_id":"c2","ok":true,"output":"","exit_code":0}),
            ),
            ev(
                5,
                "tool_result",
                json!({"call_id":"c3","ok":false,"error":{"kind":"timeout","message":"slow"},"exit_code":null}),
            ),
            ev(
                6,
                "tool_result",
                json!({"call_id":"c4","ok":true,"output":"x","resource":{"uri":"file:///a"}}),
            ),
            ev(
                7,
                "tool_result",
                json!({"call_id":"c5","ok":true,"output":"42","subagent":{"session_id":"s2","turn_id":"t2","status":"completed"}}),
            ),
            ev(
                8,
                "provider_usage",
                json!({"usage":{"total_tokens":5},"context_window":10}),
            ),
            ev(9, "user_message", json!("not an object")),
            ev(10, "tool_result", json!([1, {"call_id": "c9"}])),
            ev(11, "assistant_message", json!({"text": "a", "text": "b"})),
        ];
        let text = json!({"events": events, "next_after_seq": 8}).to_string();
        let page: Page = serde_json::from_str(&text).unwrap();
        assert_eq!(page.next_after_seq, Some(8));
        let mut out = String::new();
        for e in &page.events {
            replay_raw(e, ws, prefix, &mut out);
        }
        let got: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["params"]["update"].clone())
            .collect();
        let want: Vec<Value> = events.iter().flat_map(|e| replay(e, ws)).collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), 9);
        assert_eq!(got[6]["rawOutput"]["subagent"]["session_id"], "s2");
    }

    /// A daemon killed mid-answer: "Half" streamed, then the resumed step's answer
    /// is recorded whole without its deltas reaching the bridge. The answer is sent,
    /// not dropped as if "Half" had been its start.
    #[test]
    fn a_resumed_step_sends_its_whole_answer_after_a_cut_partial() {
        let ws = Path::new("/w");
        let mut l = Live::default();
        l.on_event(&json!({"type":"text_delta","data":{"text":"Half"}}), ws);
        assert!(l
            .on_event(
                &ev(5, "turn_resumed", json!({"turn_id":"t1","resumed":1})),
                ws
            )
            .is_empty());
        let rest = l.on_event(
            &ev(6, "assistant_message", json!({"text":"The whole answer."})),
            ws,
        );
        assert_eq!(rest[0]["content"]["text"], "The whole answer.");
    }

    #[test]
    fn live_streams_deltas_and_sends_only_what_they_missed() {
        let ws = Path::new("/w");
        let mut l = Live::default();
        assert_eq!(
            l.on_event(&json!({"type":"text_delta","data":{"text":"Hel"}}), ws)[0]["content"]
                ["text"],
            "Hel"
        );
        let rest = l.on_event(&ev(3, "assistant_message", json!({"text":"Hello"})), ws);
        assert_eq!(rest[0]["content"]["text"], "lo");
        // No deltas at all: the whole text.
        let all = l.on_event(&ev(4, "assistant_message", json!({"text":"Bye"})), ws);
        assert_eq!(all[0]["content"]["text"], "Bye");
        assert_eq!(l.last_seq, Some(4));
        l.on_event(&ev(5, "turn_started", json!({"turn_id":"t1"})), ws);
        l.on_event(&ev(6, "turn_ended", json!({"turn_id":"t0"})), ws);
        assert!(!l.ended);
        l.on_event(
            &ev(
                7,
                "turn_ended",
                json!({"turn_id":"t1","stop_reason":"refusal"}),
            ),
            ws,
        );
        assert!(l.ended);
        assert_eq!(stop_reason(Some("completed"), None, &l), "refusal");
        assert_eq!(
            stop_reason(Some("completed"), Some("max_tokens"), &l),
            "max_tokens"
        );
        assert_eq!(
            stop_reason(Some("completed"), None, &Live::default()),
            "end_turn"
        );
    }
}
