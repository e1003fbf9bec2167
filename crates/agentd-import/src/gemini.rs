//! Gemini CLI chat files (`~/.gemini/tmp/<project>/chats/session-*.jsonl`) → agentd events.
//!
//! Format (learned from real files): a change log in which the last write wins. Line 1
//! is a header `{sessionId, projectHash, startTime, lastUpdated, kind}`; a message record
//! `{id, timestamp, type: user|gemini|info|error|warning, content, …}` adds a message or
//! rewrites the one with the same id (a model response is written once without and once
//! with its `toolCalls`); `{"$set": {…}}` patches session fields, and `$set.messages`
//! replaces the whole list (a resume rewrites the history that way). A resume also
//! appends a second header. The log is applied first, then the final messages become
//! events; memory is bounded by the final conversation, not by the file.
//!
//! A model message's `toolCalls[]` hold each call with its `result` (`functionResponse`)
//! and `status`; those become `tool_call` + `tool_result`. The `user` messages carrying
//! the same `functionResponse`s (and the synthetic `<id>_response` copies a resume
//! writes) are duplicates and are not imported twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use agentd_proto::AgentError;
use serde_json::{json, Map, Value};

use super::lines::LineReader;
use super::sink::{Disposition, Sink};
use super::{
    args_object, emit_session_started, parse_line, read_error, str_of, Format, Header,
    ImportContext, ImportReport, Source,
};

/// One message of the applied log and the line that wrote its final form.
struct Msg {
    line: u64,
    value: Map<String, Value>,
}

pub(super) fn import(
    src: Source,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let path = src.path.clone();
    let mut reader = LineReader::file(src.file);
    let mut sink = Sink::new(out, &ctx.session_id);
    let mut h = Header::default();
    let mut msgs: Vec<Msg> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    // Lines that wrote messages → the later line that replaced them (if any).
    let mut message_lines: BTreeMap<u64, Option<u64>> = BTreeMap::new();
    let mut headers = 0u64;
    let mut source_lines = 0;
    while let Some(line) = reader.next_line().map_err(read_error)? {
        source_lines = line.no;
        let no = line.no;
        let Some(obj) = parse_line(&mut sink, &line) else {
            continue;
        };
        if let Some(Value::Object(set)) = obj.get("$set") {
            sink.count("$set");
            let mut wrote = false;
            for (k, v) in set {
                match (k.as_str(), v) {
                    ("messages", Value::Array(list)) => {
                        for m in msgs.drain(..) {
                            message_lines.insert(m.line, Some(no));
                        }
                        by_id.clear();
                        for item in list {
                            if let Value::Object(m) = item {
                                if let Some(id) = str_of(m, "id") {
                                    by_id.insert(id.to_string(), msgs.len());
                                }
                                msgs.push(Msg {
                                    line: no,
                                    value: m.clone(),
                                });
                            }
                        }
                        wrote = true;
                    }
                    ("summary", Value::String(s)) => h.title = Some(s.clone()),
                    ("sessionId", Value::String(s)) if h.source_session_id.is_none() => {
                        h.source_session_id = Some(s.clone())
                    }
                    _ => {}
                }
            }
            if wrote {
                message_lines.insert(no, None);
            } else {
                sink.account(Disposition::Metadata);
            }
            continue;
        }
        if obj.contains_key("sessionId")
            && obj.contains_key("projectHash")
            && !obj.contains_key("type")
        {
            sink.count("header");
            headers += 1;
            match (&h.source_session_id, str_of(&obj, "sessionId")) {
                (None, Some(s)) => h.source_session_id = Some(s.to_string()),
                (Some(a), Some(b)) if a != b => sink.warn(format!(
                    "line {no}: a header for another session ({}) was ignored",
                    clip(b)
                )),
                _ => {}
            }
            if h.ts.is_none() {
                h.ts = obj.get("startTime").cloned();
            }
            sink.account(Disposition::Metadata);
            continue;
        }
        let (Some(id), Some(kind)) = (str_of(&obj, "id"), str_of(&obj, "type")) else {
            sink.count("?");
            sink.skip(
                no,
                "Gemini CLI record that is neither a header, a $set nor a message",
            );
            continue;
        };
        sink.count(format!("message:{}", clip(kind)));
        let id = id.to_string();
        match by_id.get(&id) {
            Some(&i) => {
                let old = std::mem::replace(
                    &mut msgs[i],
                    Msg {
                        line: no,
                        value: obj,
                    },
                );
                message_lines.insert(old.line, Some(no));
            }
            None => {
                by_id.insert(id, msgs.len());
                msgs.push(Msg {
                    line: no,
                    value: obj,
                });
            }
        }
        message_lines.insert(no, None);
    }
    if headers == 0 && msgs.is_empty() {
        return Err(AgentError::invalid_args(format!(
            "{} is not a Gemini CLI chat file: no header and no messages",
            path.display()
        )));
    }
    let has_prompt = msgs.iter().any(|m| {
        str_of(&m.value, "type") == Some("user")
            && !user_text(&m.value).is_empty()
            && !is_session_context(&user_text(&m.value))
    });
    if !has_prompt {
        return Err(AgentError::invalid_args(format!(
            "{} holds no conversation (a Gemini CLI resume leaves such a stub); import the chat file of session {} that holds the prompts",
            path.display(),
            h.source_session_id.as_deref().unwrap_or("?")
        )));
    }
    // The chat file names no directory; the session context Gemini CLI sends first does.
    h.cwd = msgs.iter().find_map(|m| {
        let t = user_text(&m.value);
        is_session_context(&t)
            .then(|| context_workspace(&t))
            .flatten()
    });
    h.model = msgs
        .iter()
        .find_map(|m| str_of(&m.value, "model").map(str::to_string));
    h.provider = Some("google".to_string());
    emit_session_started(&mut sink, Format::Gemini, &path, ctx, &h)?;

    let mut st = State::default();
    // Per source line: imported something, or the first reason one of its messages gave.
    let mut fate: HashMap<u64, Result<(), String>> = HashMap::new();
    for m in &msgs {
        let before = sink.written();
        let why = st.message(&mut sink, m)?;
        let e = fate.entry(m.line).or_insert_with(|| Err(String::new()));
        if sink.written() > before {
            *e = Ok(());
        } else if let Err(r) = e {
            if r.is_empty() {
                *r = why;
            }
        }
    }
    let survivors: HashSet<u64> = msgs.iter().map(|m| m.line).collect();
    for (line, replaced_by) in message_lines {
        if survivors.contains(&line) {
            match fate.remove(&line) {
                Some(Ok(())) => sink.account(Disposition::Imported),
                Some(Err(r)) => sink.skip(line, r),
                None => sink.skip(line, "Gemini CLI messages with nothing to import"),
            }
        } else {
            let by = replaced_by.map_or("a later line".to_string(), |l| format!("line {l}"));
            sink.skip(
                line,
                format!("rewritten by {by} (Gemini CLI's change log keeps the last write)"),
            );
        }
    }
    if st.dup_responses > 0 {
        // Not a loss: each is a copy of a result imported with its call (Gemini CLI
        // writes them more than once), so it is counted, not warned about.
        *sink
            .report
            .counts
            .entry("functionResponse:repeated".to_string())
            .or_insert(0) += st.dup_responses;
    }
    sink.finish(source_lines)
}

#[derive(Default)]
struct State {
    calls: HashSet<String>,
    /// Open calls by name, for responses without an id.
    open_by_name: HashMap<String, Vec<String>>,
    answered: HashSet<String>,
    dup_responses: u64,
}

impl State {
    /// Writes one final message; returns why nothing was written, when nothing was.
    fn message(&mut self, sink: &mut Sink<'_>, m: &Msg) -> Result<String, AgentError> {
        let v = &m.value;
        let no = m.line;
        let ts = v.get("timestamp");
        match str_of(v, "type").unwrap_or("") {
            "user" => {
                let text = user_text(v);
                if let Some(Value::Array(parts)) = v.get("content") {
                    for p in parts {
                        if let Some(fr) = p.get("functionResponse") {
                            self.response(sink, no, fr, None, ts)?;
                        }
                    }
                }
                if is_session_context(&text) {
                    return Ok("Gemini CLI's session context (environment and directory listing); agentd supplies its own".into());
                }
                if !text.is_empty() {
                    sink.emit("user_message", json!({"text": text, "import_line": no}), ts)?;
                    return Ok(String::new());
                }
                Ok("function responses already imported with their calls".into())
            }
            "gemini" | "model" => self.model(sink, no, v, ts).map(|()| {
                "Gemini CLI model message with no text, thoughts or tool calls".to_string()
            }),
            t @ ("info" | "error" | "warning") => Ok(format!(
                "Gemini CLI {t} message: shown in its UI, never sent to the model"
            )),
            other => Ok(format!("unknown Gemini CLI message type {:?}", clip(other))),
        }
    }

    fn model(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        v: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let model = str_of(v, "model").unwrap_or("unknown").to_string();
        if let Some(Value::Array(thoughts)) = v.get("thoughts") {
            for t in thoughts {
                sink.emit(
                    "reasoning",
                    json!({"item": t, "model": model, "dialect": "gemini", "import_line": no}),
                    ts,
                )?;
            }
        }
        let mut text = String::new();
        let mut part_calls: Vec<Value> = Vec::new();
        match v.get("content") {
            Some(Value::String(s)) => text.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if p.get("thought").and_then(Value::as_bool) == Some(true) {
                        sink.emit(
                            "reasoning",
                            json!({"item": p, "model": model, "dialect": "gemini", "import_line": no}),
                            ts,
                        )?;
                    } else if let Some(t) = p.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    } else if let Some(fc) = p.get("functionCall") {
                        part_calls.push(fc.clone());
                    }
                }
            }
            _ => {}
        }
        if !text.is_empty() {
            sink.emit(
                "assistant_message",
                json!({"text": text, "import_line": no}),
                ts,
            )?;
        }
        let msg_id = str_of(v, "id").unwrap_or("?");
        match v.get("toolCalls") {
            Some(Value::Array(calls)) if !calls.is_empty() => {
                let mut with_results = Vec::new();
                for (i, c) in calls.iter().enumerate() {
                    let id = c
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("gemini-{msg_id}-{i}"));
                    if self.call(sink, no, &id, c.get("name"), c.get("args"), ts)? {
                        with_results.push((id, c));
                    }
                }
                for (id, c) in with_results {
                    let failed = str_of(c.as_object().unwrap_or(&Map::new()), "status")
                        .is_some_and(|s| s != "success");
                    let name = c.get("name").and_then(Value::as_str);
                    let fr = match c.get("result") {
                        Some(Value::Array(r)) => response_for(r, &id, name),
                        _ => None,
                    };
                    match fr {
                        Some(fr) => self.response(sink, no, fr, Some((&id, failed)), ts)?,
                        None if failed => {
                            let status = c.get("status").and_then(Value::as_str).unwrap_or("?");
                            self.result(
                                sink,
                                no,
                                &id,
                                false,
                                format!("Gemini CLI recorded status {status} and no result"),
                                ts,
                            )?;
                        }
                        None => {}
                    }
                }
            }
            _ => {
                for (i, fc) in part_calls.iter().enumerate() {
                    let id = fc
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("gemini-{msg_id}-{i}"));
                    self.call(sink, no, &id, fc.get("name"), fc.get("args"), ts)?;
                }
            }
        }
        if let Some(Value::Object(t)) = v.get("tokens") {
            let n = |k: &str| t.get(k).and_then(Value::as_u64).unwrap_or(0);
            let (input, output) = (n("input"), n("output"));
            let total = match n("total") {
                0 => input + output,
                x => x,
            };
            sink.emit(
                "provider_usage",
                json!({"provider": "google", "model": model, "usage": {
                    "input_tokens": input, "cached_tokens": n("cached"), "output_tokens": output,
                    "reasoning_tokens": n("thoughts"), "total_tokens": total,
                }, "import_line": no}),
                ts,
            )?;
        }
        Ok(())
    }

    /// Returns true when the call was written.
    fn call(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        id: &str,
        name: Option<&Value>,
        args: Option<&Value>,
        ts: Option<&Value>,
    ) -> Result<bool, AgentError> {
        let Some(name) = name.and_then(Value::as_str) else {
            sink.warn(format!(
                "line {no}: a Gemini CLI tool call without a name was dropped"
            ));
            return Ok(false);
        };
        if !self.calls.insert(id.to_string()) {
            sink.warn(format!(
                "line {no}: a second tool call with id {} was dropped",
                clip(id)
            ));
            return Ok(false);
        }
        let args = args_object(args.cloned().unwrap_or(json!({})));
        sink.emit(
            "tool_call",
            json!({"call_id": id, "name": name, "args": args, "import_line": no}),
            ts,
        )?;
        self.open_by_name
            .entry(name.to_string())
            .or_default()
            .push(id.to_string());
        Ok(true)
    }

    /// A `functionResponse` part; `call` names the call when it came with one.
    fn response(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        fr: &Value,
        call: Option<(&str, bool)>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let name = fr.get("name").and_then(Value::as_str).unwrap_or("");
        let id = match (call, fr.get("id").and_then(Value::as_str)) {
            (Some((id, _)), _) => id.to_string(),
            (None, Some(id)) => id.to_string(),
            (None, None) => match self
                .open_by_name
                .get(name)
                .and_then(|v| v.iter().find(|c| !self.answered.contains(*c)))
            {
                Some(id) => id.clone(),
                None => {
                    self.dup_responses += 1;
                    return Ok(());
                }
            },
        };
        if !self.calls.contains(&id) {
            sink.warn(format!(
                "line {no}: a functionResponse for {} that has no earlier call was dropped",
                clip(&id)
            ));
            return Ok(());
        }
        if self.answered.contains(&id) {
            self.dup_responses += 1;
            return Ok(());
        }
        let resp = fr.get("response");
        let error = resp.and_then(|r| r.get("error"));
        let failed = call.is_some_and(|(_, f)| f) || error.is_some();
        let output = match (resp.and_then(|r| r.get("output")), error) {
            (Some(Value::String(s)), _) => s.clone(),
            (_, Some(Value::String(e))) => e.clone(),
            (_, _) => resp.map(Value::to_string).unwrap_or_default(),
        };
        self.result(sink, no, &id, !failed, output, ts)
    }

    fn result(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        id: &str,
        ok: bool,
        output: String,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        self.answered.insert(id.to_string());
        let output = sink.cap(output);
        sink.emit(
            "tool_result",
            json!({"call_id": id, "ok": ok, "output": output, "import_line": no}),
            ts,
        )?;
        Ok(())
    }
}

/// The `functionResponse` answering call `id` among a call's `result` parts. After a
/// resume Gemini CLI writes every response of a parallel batch into each call's
/// `result`, so the response is matched by its own `id`; only a list whose responses
/// carry no id falls back to the call's name, and then to a single response.
fn response_for<'a>(parts: &'a [Value], id: &str, name: Option<&str>) -> Option<&'a Value> {
    let responses = || parts.iter().filter_map(|x| x.get("functionResponse"));
    if let Some(fr) = responses().find(|fr| fr.get("id").and_then(Value::as_str) == Some(id)) {
        return Some(fr);
    }
    if responses().any(|fr| fr.get("id").and_then(Value::as_str).is_some()) {
        return None;
    }
    let mut by_name = responses().filter(|fr| fr.get("name").and_then(Value::as_str) == name);
    match (by_name.next(), by_name.next()) {
        (Some(fr), None) => Some(fr),
        _ => {
            let mut all = responses();
            match (all.next(), all.next()) {
                (Some(fr), None) => Some(fr),
                _ => None,
            }
        }
    }
}

fn user_text(v: &Map<String, Value>) -> String {
    match v.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The first workspace directory a `<session_context>` message lists.
fn context_workspace(text: &str) -> Option<String> {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.contains("Workspace Directories:") {
            let first = lines.next()?.trim();
            return first.strip_prefix("- ").map(|p| p.trim().to_string());
        }
        if let Some(rest) = l.split("working in the directory:").nth(1) {
            return Some(rest.trim().to_string());
        }
    }
    None
}

fn is_session_context(text: &str) -> bool {
    text.trim_start().starts_with("<session_context>")
}

fn clip(s: &str) -> String {
    agentd_base::text::clip_chars(s, 80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_comes_from_the_session_context() {
        let t = "<session_context>\nx\n- **Workspace Directories:**\n  - /tmp/w s\n- **Directory Structure:**\n";
        assert_eq!(context_workspace(t).as_deref(), Some("/tmp/w s"));
        let old = "<session_context>\nI'm currently working in the directory: /home/u/p\n";
        assert_eq!(context_workspace(old).as_deref(), Some("/home/u/p"));
        assert_eq!(context_workspace("<session_context>\nnothing"), None);
    }
}
