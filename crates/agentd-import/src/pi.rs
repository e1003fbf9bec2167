//! pi (coding agent) session files → agentd events.
//!
//! Format (learned from pi's docs): line 1 is a header `{"type":"session", version?, id,
//! timestamp, cwd, provider?, modelId?}`; every other line is an entry. Version 1 files
//! are a linear list. Versions 2 and 3 give each entry `id`/`parentId`, so one file holds
//! a tree, and pi's current position (the leaf) is the last entry appended. Only the
//! branch root → leaf is the conversation pi would continue, so only it is imported:
//! pass 1 keeps `{id, parent, offset}` per entry (not the entries), pass 2 seeks to each
//! branch entry in root → leaf order. Entries on other branches are listed as skipped.
//!
//! pi 1.x (still header version 3) adds `system` messages (the system prompt pi sent,
//! skipped: agentd sends its own), `context_edit` entries and `usage`. A `context_edit`
//! with `replacement: null` takes its target out of what pi sends the model: pi writes
//! one after every failed model call it retries, targeting the failed attempt. The
//! target is imported as an `imported_note` of kind `dropped_attempt` (stored and shown,
//! never replayed) holding its text and its calls, which never ran; a replacement
//! message stands in for its target.

use std::collections::{HashMap, HashSet};

use agentd_proto::AgentError;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::lines::LineReader;
use super::sink::{Disposition, Sink};
use super::{
    args_object, emit_session_started, parse_line, read_error, str_of, Format, Header,
    ImportContext, ImportReport, Source, IMPORTED_NOTE,
};

pub(super) fn import(
    src: Source,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let path = src.path.clone();
    let mut reader = LineReader::file(src.file);
    let mut sink = Sink::new(out, &ctx.session_id);

    let header = read_header(&mut reader, &path)?;
    sink.count("session");
    sink.account(Disposition::Metadata);
    let version = header.get("version").and_then(Value::as_u64).unwrap_or(1);
    let h = Header {
        source_session_id: str_of(&header, "id").map(str::to_string),
        cwd: str_of(&header, "cwd").map(str::to_string),
        title: None,
        model: str_of(&header, "modelId").map(str::to_string),
        provider: str_of(&header, "provider").map(str::to_string),
        ts: header.get("timestamp").cloned(),
    };
    emit_session_started(&mut sink, Format::Pi, &path, ctx, &h)?;
    if version > 3 {
        sink.warn(format!(
            "pi session format version {version} is newer than 3; entries were read as version 3"
        ));
    }

    let mut st = State {
        model: h.model.clone(),
        ..State::default()
    };
    let mut source_lines = 1;
    if version <= 1 {
        while let Some(line) = reader.next_line().map_err(read_error)? {
            source_lines = line.no;
            let no = line.no;
            if let Some(obj) = parse_line(&mut sink, &line) {
                sink.count(kind_of(&obj));
                st.entry(&mut sink, no, obj)?;
            }
        }
    } else {
        source_lines = import_tree(&mut reader, &mut sink, &mut st)?;
    }
    sink.warn_images(st.images);
    sink.finish(source_lines)
}

fn read_header<R: std::io::BufRead>(
    reader: &mut LineReader<R>,
    path: &std::path::Path,
) -> Result<Map<String, Value>, AgentError> {
    let not_pi = |why: &str| {
        AgentError::invalid_args(format!(
            "{} is not a pi session file: {why}",
            path.display()
        ))
    };
    let line = reader
        .next_line()
        .map_err(read_error)?
        .ok_or_else(|| not_pi("it is empty"))?;
    match serde_json::from_slice::<Value>(line.bytes) {
        Ok(Value::Object(m)) if m.get("type").and_then(Value::as_str) == Some("session") => Ok(m),
        Ok(_) => Err(not_pi("line 1 is not a {\"type\":\"session\"} header")),
        Err(_) => Err(not_pi("line 1 is not JSON")),
    }
}

/// What pass 1 keeps of an entry.
struct Node {
    parent: Option<String>,
    offset: u64,
    line: u64,
}

/// The few fields pass 1 reads; serde skips the rest without allocating it.
#[derive(Deserialize)]
struct Skim<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "parentId", borrow)]
    parent_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    message: Option<SkimMessage<'a>>,
    #[serde(rename = "targetId", borrow)]
    target_id: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct SkimMessage<'a> {
    #[serde(borrow)]
    role: Option<std::borrow::Cow<'a, str>>,
}

/// Returns the number of source lines.
fn import_tree<R: std::io::BufRead + std::io::Seek>(
    reader: &mut LineReader<R>,
    sink: &mut Sink<'_>,
    st: &mut State,
) -> Result<u64, AgentError> {
    let mut nodes: HashMap<String, Node> = HashMap::new();
    // `context_edit` entries: (its line, its target, the replacement).
    let mut edits: Vec<(u64, String, Option<Value>)> = Vec::new();
    let mut leaf: Option<String> = None;
    let mut source_lines = 1;
    while let Some(line) = reader.next_line().map_err(read_error)? {
        source_lines = line.no;
        if line.oversized.is_some() || !line.terminated || line.bytes.is_empty() {
            // Let the shared parser word the reason (and import a complete last line).
            if let Some(obj) = parse_line(sink, &line) {
                if let Some(id) = str_of(&obj, "id") {
                    sink.count(kind_of(&obj));
                    let node = Node {
                        parent: str_of(&obj, "parentId").map(str::to_string),
                        offset: line.offset,
                        line: line.no,
                    };
                    leaf = Some(id.to_string());
                    nodes.insert(id.to_string(), node);
                } else {
                    sink.count(kind_of(&obj));
                    sink.skip(line.no, "pi v2+ entry without an id");
                }
            }
            continue;
        }
        match serde_json::from_slice::<Skim<'_>>(line.bytes) {
            Ok(skim) => {
                let kind = match (&skim.kind, &skim.message) {
                    (Some(k), Some(m)) if k == "message" => {
                        format!("message:{}", m.role.as_deref().unwrap_or("?"))
                    }
                    (Some(k), _) => k.to_string(),
                    (None, _) => "?".to_string(),
                };
                sink.count(kind);
                let Some(id) = skim.id else {
                    sink.skip(line.no, "pi v2+ entry without an id");
                    continue;
                };
                if skim.kind.as_deref() == Some("context_edit") {
                    if let Some(target) = &skim.target_id {
                        let replacement = serde_json::from_slice::<Value>(line.bytes)
                            .ok()
                            .and_then(|mut v| v.get_mut("replacement").map(Value::take))
                            .filter(|r| !r.is_null());
                        edits.push((line.no, target.to_string(), replacement));
                    }
                }
                let node = Node {
                    parent: skim.parent_id.map(|p| p.into_owned()),
                    offset: line.offset,
                    line: line.no,
                };
                if let Some(old) = nodes.insert(id.to_string(), node) {
                    sink.skip(
                        old.line,
                        format!(
                            "pi entry id {id} is reused by line {}; the later entry wins",
                            line.no
                        ),
                    );
                }
                leaf = Some(id.into_owned());
            }
            Err(e) => {
                if parse_line(sink, &line).is_some() {
                    sink.skip(
                        line.no,
                        format!("pi entry with unexpected field types: {e}"),
                    );
                }
            }
        }
    }

    // Walk leaf → root. A missing parent ends the walk (with a warning); the step bound
    // stops a cycle in a damaged file.
    let mut chain: Vec<(u64, u64)> = Vec::new();
    let mut on_branch: HashSet<u64> = HashSet::new();
    let mut cur = leaf.clone();
    while let Some(id) = cur {
        let Some(node) = nodes.get(&id) else {
            sink.warn(format!(
                "the current branch refers to a missing parent entry {id}; import starts after it"
            ));
            break;
        };
        if !on_branch.insert(node.line) {
            sink.warn("the pi entry tree has a cycle; import starts at the repeated entry");
            break;
        }
        chain.push((node.offset, node.line));
        cur = node.parent.clone();
    }
    chain.reverse();
    let leaf_id = leaf.unwrap_or_default();
    for node in nodes.values() {
        if !on_branch.contains(&node.line) {
            sink.skip(
                node.line,
                format!("not on the current branch (leaf entry {leaf_id})"),
            );
        }
    }
    drop(nodes);
    // Only the edits on the branch apply; a later edit of the same target wins.
    for (edit_line, target, replacement) in edits {
        if on_branch.contains(&edit_line) {
            st.edits.insert(target, (edit_line, replacement));
        }
    }

    for (offset, no) in chain {
        reader.seek_to(offset, no).map_err(read_error)?;
        let Some(line) = reader.next_line().map_err(read_error)? else {
            return Err(AgentError::internal(
                "the source file shrank while it was being imported",
            ));
        };
        let no = line.no;
        if let Some(obj) = parse_line(sink, &line) {
            st.entry(sink, no, obj)?;
        }
    }
    Ok(source_lines)
}

fn kind_of(obj: &Map<String, Value>) -> String {
    match str_of(obj, "type") {
        Some("message") => format!(
            "message:{}",
            obj.get("message")
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str)
                .unwrap_or("?")
        ),
        Some(t) => t.to_string(),
        None => "?".to_string(),
    }
}

#[derive(Default)]
struct State {
    /// The model in effect (header, then `model_change`), for reasoning items that do
    /// not name their own.
    model: Option<String>,
    calls: HashSet<String>,
    answered: HashSet<String>,
    images: u64,
    /// Targets of the branch's `context_edit` entries → (the edit's line, replacement).
    edits: HashMap<String, (u64, Option<Value>)>,
    /// Calls of dropped attempts: they never ran, and a result naming one is not
    /// expected.
    dropped_calls: HashSet<String>,
}

impl State {
    fn entry(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        obj: Map<String, Value>,
    ) -> Result<(), AgentError> {
        let ts = obj.get("timestamp").cloned();
        let before = sink.written();
        if let Some((edit_line, replacement)) =
            str_of(&obj, "id").and_then(|id| self.edits.remove(id))
        {
            match replacement {
                None => self.dropped(sink, no, edit_line, &obj, ts.as_ref())?,
                Some(r) => {
                    let msg = match r {
                        Value::Object(mut m) if m.get("role").is_none() => {
                            match m.remove("message") {
                                Some(Value::Object(inner)) => Some(inner),
                                _ => None,
                            }
                        }
                        Value::Object(m) => Some(m),
                        _ => None,
                    };
                    match msg {
                        Some(m) => self.message(sink, no, &m, ts.as_ref())?,
                        None => sink.warn(format!(
                            "line {no}: pi context_edit at line {edit_line} replaces this entry with something that is not a message; neither was imported"
                        )),
                    }
                }
            }
            if !sink.account_if_imported(before) {
                sink.skip(
                    no,
                    format!("removed from pi's context by the context_edit at line {edit_line}"),
                );
            }
            return Ok(());
        }
        match str_of(&obj, "type").unwrap_or("") {
            "message" => match obj.get("message") {
                Some(Value::Object(m)) => {
                    let ts = ts.or_else(|| m.get("timestamp").cloned());
                    self.message(sink, no, m, ts.as_ref())?;
                }
                _ => sink.skip(no, "pi message entry without a message object"),
            },
            "compaction" => {
                let mut data = note("compaction", &obj, no);
                for (from, to) in [
                    ("tokensBefore", "tokens_before"),
                    ("firstKeptEntryId", "first_kept_entry_id"),
                    ("firstKeptEntryIndex", "first_kept_entry_index"),
                    ("details", "details"),
                    ("fromHook", "from_hook"),
                ] {
                    if let Some(v) = obj.get(from) {
                        data[to] = v.clone();
                    }
                }
                sink.emit(IMPORTED_NOTE, data, ts.as_ref())?;
                // pi 1.x records what the summarizing call cost.
                if let Some(Value::Object(u)) = obj.get("usage") {
                    let model = self.model.clone().unwrap_or_else(|| "unknown".to_string());
                    sink.emit(
                        "provider_usage",
                        usage_data("pi", &model, u, no),
                        ts.as_ref(),
                    )?;
                }
            }
            "branch_summary" => {
                let mut data = note("branch_summary", &obj, no);
                for (from, to) in [("fromId", "from_id"), ("details", "details")] {
                    if let Some(v) = obj.get(from) {
                        data[to] = v.clone();
                    }
                }
                sink.emit(IMPORTED_NOTE, data, ts.as_ref())?;
            }
            "custom_message" => {
                let text = self.text_of(obj.get("content"));
                let custom = str_of(&obj, "customType").unwrap_or("");
                sink.emit(
                    "user_message",
                    json!({"text": text, "import_line": no, "pi_custom_type": custom}),
                    ts.as_ref(),
                )?;
            }
            "session_info" => match str_of(&obj, "name").filter(|n| !n.is_empty()) {
                Some(name) => {
                    sink.emit(
                        "session_info",
                        json!({"title": name, "import_line": no}),
                        ts.as_ref(),
                    )?;
                }
                None => sink.skip(no, "pi session_info without a name"),
            },
            "model_change" => {
                let provider = str_of(&obj, "provider").unwrap_or("?");
                let model = str_of(&obj, "modelId").unwrap_or("?");
                sink.skip(
                    no,
                    format!("pi model_change to {provider}/{model}: a setting, not conversation"),
                );
                if let Some(m) = str_of(&obj, "modelId") {
                    self.model = Some(m.to_string());
                }
            }
            "thinking_level_change" => sink.skip(
                no,
                format!(
                    "pi thinking_level_change to {}: a setting, not conversation",
                    str_of(&obj, "thinkingLevel").unwrap_or("?")
                ),
            ),
            "label" => sink.skip(
                no,
                format!(
                    "pi label on entry {}: a bookmark; agentd has no equivalent",
                    str_of(&obj, "targetId").unwrap_or("?")
                ),
            ),
            "custom" => sink.skip(
                no,
                format!(
                    "pi extension state ({}): not part of the conversation",
                    str_of(&obj, "customType").unwrap_or("?")
                ),
            ),
            "session" => sink.skip(no, "a second pi session header"),
            "context_edit" => {
                // Applied to its target (above); in a v1 file there is no tree to edit.
                sink.count("context_edit:applied");
                sink.account(Disposition::Metadata);
            }
            "usage" => match obj.get("usage") {
                Some(Value::Object(u)) => {
                    let model = str_of(&obj, "model")
                        .or_else(|| str_of(&obj, "modelId"))
                        .map(str::to_string)
                        .or_else(|| self.model.clone())
                        .unwrap_or_else(|| "unknown".to_string());
                    let provider = str_of(&obj, "provider").unwrap_or("pi");
                    sink.emit(
                        "provider_usage",
                        usage_data(provider, &model, u, no),
                        ts.as_ref(),
                    )?;
                }
                _ => sink.skip(no, "pi usage entry without a usage object"),
            },
            other => sink.skip(no, format!("unknown pi entry type {:?}", clip(other))),
        }
        sink.account_if_imported(before);
        Ok(())
    }

    fn message(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        m: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        match str_of(m, "role").unwrap_or("") {
            "user" => {
                let text = self.text_of(m.get("content"));
                if text.is_empty() {
                    sink.skip(no, "pi user message with no content");
                } else {
                    sink.emit("user_message", json!({"text": text, "import_line": no}), ts)?;
                }
            }
            "assistant" => self.assistant(sink, no, m, ts)?,
            "system" => sink.skip(
                no,
                "pi system prompt: the instructions pi sent; agentd sends its own",
            ),
            "toolResult" => {
                let Some(call_id) = str_of(m, "toolCallId") else {
                    sink.skip(no, "pi toolResult without toolCallId");
                    return Ok(());
                };
                if self.dropped_calls.contains(call_id) {
                    sink.skip(
                        no,
                        format!("pi toolResult for call {call_id} of an attempt pi dropped"),
                    );
                    return Ok(());
                }
                if !self.calls.contains(call_id) {
                    sink.skip(
                        no,
                        format!("pi toolResult for call {call_id} that has no earlier tool call"),
                    );
                    return Ok(());
                }
                if !self.answered.insert(call_id.to_string()) {
                    sink.skip(no, format!("a second pi toolResult for call {call_id}"));
                    return Ok(());
                }
                let ok = !m.get("isError").and_then(Value::as_bool).unwrap_or(false);
                let output = self.text_of(m.get("content"));
                let output = sink.cap(output);
                sink.emit(
                    "tool_result",
                    json!({"call_id": call_id, "ok": ok, "output": output, "import_line": no}),
                    ts,
                )?;
            }
            "bashExecution" => {
                if m.get("excludeFromContext").and_then(Value::as_bool) == Some(true) {
                    sink.skip(
                        no,
                        "pi bashExecution excluded from the model's context (!!)",
                    );
                    return Ok(());
                }
                // pi records the user's own `!cmd` runs without a call id; the line number
                // makes a stable one, so re-importing the file gives the same ids.
                let call_id = format!("pi-bash-L{no}");
                let command = str_of(m, "command").unwrap_or("");
                sink.emit(
                    "tool_call",
                    json!({"call_id": call_id, "name": "shell",
                           "args": {"command": command}, "import_line": no}),
                    ts,
                )?;
                let exit = m.get("exitCode").and_then(Value::as_i64);
                let cancelled = m.get("cancelled").and_then(Value::as_bool) == Some(true);
                let output = sink.cap(str_of(m, "output").unwrap_or("").to_string());
                let mut data = json!({"call_id": call_id, "ok": exit == Some(0) && !cancelled,
                                      "output": output, "import_line": no});
                if let Some(code) = exit {
                    data["exit_code"] = json!(code);
                }
                sink.emit("tool_result", data, ts)?;
                self.calls.insert(call_id.clone());
                self.answered.insert(call_id);
            }
            "custom" | "hookMessage" => {
                let text = self.text_of(m.get("content"));
                let custom = str_of(m, "customType").unwrap_or("");
                sink.emit(
                    "user_message",
                    json!({"text": text, "import_line": no, "pi_custom_type": custom}),
                    ts,
                )?;
            }
            r @ ("branchSummary" | "compactionSummary") => {
                let kind = if r == "branchSummary" {
                    "branch_summary"
                } else {
                    "compaction"
                };
                sink.emit(IMPORTED_NOTE, note(kind, m, no), ts)?;
            }
            other => sink.skip(no, format!("unknown pi message role {:?}", clip(other))),
        }
        Ok(())
    }

    fn assistant(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        m: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let stop = str_of(m, "stopReason").unwrap_or("");
        // pi leaves failed/aborted replies out of what it sends the model; `partial:true`
        // makes agentd's replay do the same while keeping the text visible.
        let failed = matches!(stop, "error" | "aborted");
        let model = str_of(m, "model")
            .map(str::to_string)
            .or_else(|| self.model.clone())
            .unwrap_or_else(|| "unknown".to_string());
        let blocks: &[Value] = match m.get("content") {
            Some(Value::Array(a)) => a,
            Some(Value::String(s)) if !s.is_empty() => {
                return self.assistant_text(sink, no, s.clone(), failed, m, ts)
            }
            _ => &[],
        };
        let mut text = String::new();
        let mut wrote = false;
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("thinking") | Some("redactedThinking") => {
                    self.flush_text(sink, no, &mut text, failed, m, ts)?;
                    sink.emit(
                        "reasoning",
                        json!({"item": b, "model": model, "dialect": "pi", "import_line": no}),
                        ts,
                    )?;
                    wrote = true;
                }
                Some("toolCall") => {
                    wrote |= self.flush_text(sink, no, &mut text, failed, m, ts)?;
                    let (Some(id), Some(name)) = (
                        b.get("id").and_then(Value::as_str),
                        b.get("name").and_then(Value::as_str),
                    ) else {
                        sink.warn(format!(
                            "line {no}: a pi toolCall without id or name was dropped"
                        ));
                        continue;
                    };
                    let args = args_object(b.get("arguments").cloned().unwrap_or(json!({})));
                    sink.emit(
                        "tool_call",
                        json!({"call_id": id, "name": name, "args": args, "import_line": no}),
                        ts,
                    )?;
                    self.calls.insert(id.to_string());
                    wrote = true;
                }
                other => sink.warn(format!(
                    "line {no}: pi assistant block of type {:?} was dropped",
                    clip(other.unwrap_or("?"))
                )),
            }
        }
        wrote |= self.flush_text(sink, no, &mut text, failed, m, ts)?;
        // Usage goes with the step it paid for; an empty (aborted) reply stays a skipped
        // line, so its counts are not imported.
        if let (true, Some(Value::Object(u))) = (wrote, m.get("usage")) {
            let provider = str_of(m, "provider").unwrap_or("pi");
            sink.emit("provider_usage", usage_data(provider, &model, u, no), ts)?;
        }
        if !wrote {
            let mut why = format!("pi assistant message with no content (stopReason {stop:?}");
            if let Some(e) = str_of(m, "errorMessage") {
                why.push_str(&format!(": {}", clip(e)));
            }
            why.push(')');
            sink.skip(no, why);
        }
        Ok(())
    }

    fn flush_text(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        text: &mut String,
        failed: bool,
        m: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<bool, AgentError> {
        if text.is_empty() {
            return Ok(false);
        }
        self.assistant_text(sink, no, std::mem::take(text), failed, m, ts)?;
        Ok(true)
    }

    fn assistant_text(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        text: String,
        failed: bool,
        m: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let mut data = json!({"text": text, "import_line": no});
        if failed {
            data["metadata"] = json!({
                "partial": true,
                "stop_reason": str_of(m, "stopReason"),
                "error_message": str_of(m, "errorMessage"),
            });
        }
        sink.emit("assistant_message", data, ts)?;
        Ok(())
    }

    /// Text of a pi `content` (a string, or text/image blocks). Images cannot be carried
    /// over (agentd would need the bytes as a resource), so each leaves a placeholder.
    fn text_of(&mut self, content: Option<&Value>) -> String {
        let images = &mut self.images;
        crate::content_text(content, &["text"], |b| {
            (b.get("type").and_then(Value::as_str) == Some("image")).then(|| {
                *images += 1;
                let mime = b.get("mimeType").and_then(Value::as_str).unwrap_or("?");
                format!("[image not imported: {}]", clip(mime))
            })
        })
    }
}

impl State {
    /// An entry a `context_edit` removed from pi's context (a failed attempt pi retried):
    /// kept as an `imported_note` with its text and calls, which never ran.
    fn dropped(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        edit_line: u64,
        obj: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let m = obj.get("message").and_then(Value::as_object);
        let mut text = String::new();
        let mut calls = Vec::new();
        if let Some(Value::Array(blocks)) = m.and_then(|m| m.get("content")) {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    Some("toolCall") => {
                        if let Some(id) = b.get("id").and_then(Value::as_str) {
                            self.dropped_calls.insert(id.to_string());
                        }
                        calls.push(json!({
                            "id": b.get("id"),
                            "name": b.get("name"),
                            "arguments": b.get("arguments"),
                        }));
                    }
                    _ => {}
                }
            }
        } else if let Some(Value::String(t)) = m.and_then(|m| m.get("content")) {
            text.push_str(t);
        }
        let role = m.and_then(|m| str_of(m, "role")).unwrap_or("?");
        sink.emit(
            IMPORTED_NOTE,
            json!({
                "source": "pi",
                "kind": "dropped_attempt",
                "summary": text,
                "role": role,
                "tool_calls": calls,
                "stop_reason": m.and_then(|m| str_of(m, "stopReason")),
                "error_message": m.and_then(|m| str_of(m, "errorMessage")),
                "context_edit_line": edit_line,
                "import_line": no,
            }),
            ts,
        )?;
        Ok(())
    }
}

/// pi's `usage` object (on an assistant message, a compaction or a `usage` entry) as a
/// `provider_usage` event's data.
fn usage_data(provider: &str, model: &str, u: &Map<String, Value>, no: u64) -> Value {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cacheRead");
    let input = n("input") + cached + n("cacheWrite");
    let output = n("output");
    json!({
        "provider": provider,
        "model": model,
        "usage": {
            "input_tokens": input,
            "cached_tokens": cached,
            "output_tokens": output,
            "reasoning_tokens": n("reasoning"),
            "total_tokens": input + output,
        },
        "import_line": no,
    })
}

fn note(kind: &str, obj: &Map<String, Value>, no: u64) -> Value {
    json!({
        "source": "pi",
        "kind": kind,
        "summary": str_of(obj, "summary").unwrap_or(""),
        "import_line": no,
    })
}

/// Source strings quoted in reasons stay short.
fn clip(s: &str) -> String {
    agentd_base::text::clip_chars(s, 80)
}
