//! Codex CLI rollouts (`rollout-*.jsonl`) → agentd events.
//!
//! Format (learned from codex's protocol types): every line is
//! `{"timestamp", "type", "payload"}` with `type` one of `session_meta` (line 1: id, cwd,
//! model_provider, …), `response_item` (what the model saw: message, reasoning,
//! function_call, function_call_output, local_shell_call, custom_tool_call(_output), …),
//! `turn_context` (per-turn settings, including the model), `compacted` (codex's LLM
//! summary) and `event_msg` (UI stream records, which duplicate response items). Only
//! response items become conversation; `event_msg` lines are counted by their own type.
//! A rollout is linear, so one pass suffices.

use std::collections::HashSet;

use agentd_proto::AgentError;
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
    let not_codex = |why: &str| {
        AgentError::invalid_args(format!("{} is not a codex rollout: {why}", path.display()))
    };

    let first = reader
        .next_line()
        .map_err(read_error)?
        .ok_or_else(|| not_codex("it is empty"))?;
    let header = match serde_json::from_slice::<Value>(first.bytes) {
        Ok(Value::Object(m)) => m,
        _ => return Err(not_codex("line 1 is not a JSON object")),
    };
    let meta = match (str_of(&header, "type"), header.get("payload")) {
        (Some("session_meta"), Some(Value::Object(p))) => p.clone(),
        (None, _) if header.contains_key("id") && header.contains_key("timestamp") => {
            return Err(not_codex(
                "it uses the early rollout layout without session_meta lines, which is not supported",
            ))
        }
        _ => return Err(not_codex("line 1 is not a session_meta record")),
    };
    sink.count("session_meta");
    sink.account(Disposition::Metadata);
    let h = Header {
        source_session_id: str_of(&meta, "id").map(str::to_string),
        cwd: str_of(&meta, "cwd").map(str::to_string),
        title: None,
        model: None,
        provider: str_of(&meta, "model_provider").map(str::to_string),
        ts: header
            .get("timestamp")
            .or_else(|| meta.get("timestamp"))
            .cloned(),
    };
    emit_session_started(&mut sink, Format::Codex, &path, ctx, &h)?;

    let mut st = State {
        provider: h.provider.clone(),
        ..State::default()
    };
    let mut source_lines = 1;
    while let Some(line) = reader.next_line().map_err(read_error)? {
        source_lines = line.no;
        let no = line.no;
        if let Some(obj) = parse_line(&mut sink, &line) {
            st.line(&mut sink, no, obj)?;
        }
    }
    sink.warn_images(st.images);
    sink.finish(source_lines)
}

/// The exit code codex's exec tools print in an output's header lines
/// (`Process exited with code N`, or `Exit code: N`).
fn exit_code(output: &str) -> Option<i64> {
    output.lines().take(6).find_map(|l| {
        l.strip_prefix("Process exited with code ")
            .or_else(|| l.strip_prefix("Exit code: "))
            .and_then(|n| n.trim().parse().ok())
    })
}

#[derive(Default)]
struct State {
    /// From the latest `turn_context`; reasoning items carry it so they replay only to
    /// the model that produced them.
    model: Option<String>,
    calls: HashSet<String>,
    answered: HashSet<String>,
    images: u64,
    provider: Option<String>,
    /// The running total of the last `token_count` written: codex repeats the event
    /// (rate-limit updates) without a new response.
    last_total: Option<Value>,
}

impl State {
    /// A `token_count` event → `provider_usage` of the response it follows (its
    /// `last_token_usage`). Returns false when it carries nothing new.
    fn usage(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        p: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<bool, AgentError> {
        let Some(info) = p.get("info").filter(|i| i.is_object()) else {
            return Ok(false);
        };
        let (Some(last), total) = (info.get("last_token_usage"), info.get("total_token_usage"))
        else {
            return Ok(false);
        };
        if total.is_some() && total == self.last_total.as_ref() {
            return Ok(false);
        }
        self.last_total = total.cloned();
        let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
        let (input, output) = (n("input_tokens"), n("output_tokens"));
        let mut data = json!({
            "provider": self.provider.clone().unwrap_or_else(|| "openai".to_string()),
            "model": self.model.clone().unwrap_or_else(|| "unknown".to_string()),
            "usage": {
                "input_tokens": input,
                "cached_tokens": n("cached_input_tokens"),
                "output_tokens": output,
                "reasoning_tokens": n("reasoning_output_tokens"),
                "total_tokens": match n("total_tokens") { 0 => input + output, t => t },
            },
            "import_line": no,
        });
        if let Some(w) = info.get("model_context_window").filter(|w| w.is_u64()) {
            data["context_window"] = w.clone();
        }
        sink.emit("provider_usage", data, ts)?;
        Ok(true)
    }

    fn line(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        obj: Map<String, Value>,
    ) -> Result<(), AgentError> {
        let ts = obj.get("timestamp");
        let empty = Map::new();
        let payload = match obj.get("payload") {
            Some(Value::Object(p)) => p,
            _ => &empty,
        };
        let ptype = str_of(payload, "type").unwrap_or("?");
        let before = sink.written();
        match str_of(&obj, "type").unwrap_or("") {
            "session_meta" => {
                sink.count("session_meta");
                sink.account(Disposition::Metadata);
            }
            "turn_context" => {
                sink.count("turn_context");
                if let Some(m) = str_of(payload, "model") {
                    self.model = Some(m.to_string());
                }
                sink.account(Disposition::Metadata);
            }
            "event_msg" if ptype == "token_count" => {
                sink.count("event_msg:token_count");
                if !self.usage(sink, no, payload, ts)? {
                    sink.account(Disposition::UiOnly);
                }
            }
            "event_msg" => {
                sink.count(format!("event_msg:{ptype}"));
                sink.account(Disposition::UiOnly);
            }
            "world_state" => {
                sink.count("world_state");
                sink.skip(
                    no,
                    "codex world_state: the harness's environment snapshot (cwd, date, instructions' hashes); agentd supplies its own",
                );
            }
            "token_usage_record" => {
                sink.count("token_usage_record");
                sink.skip(
                    no,
                    "codex token_usage_record: the same counts as the token_count event, imported from there",
                );
            }
            "compacted" => {
                sink.count("compacted");
                let mut data = json!({
                    "source": "codex",
                    "kind": "compaction",
                    "summary": str_of(payload, "message").unwrap_or(""),
                    "import_line": no,
                });
                if let Some(Value::Array(h)) = payload.get("replacement_history") {
                    data["replacement_history_items"] = json!(h.len());
                }
                sink.emit(IMPORTED_NOTE, data, ts)?;
            }
            "response_item" => {
                sink.count(format!("response_item:{ptype}"));
                self.item(sink, no, payload, ts)?;
            }
            other => {
                sink.count(format!("?{}", agentd_base::text::clip_chars(other, 40)));
                sink.skip(
                    no,
                    format!(
                        "unknown codex rollout line type {:?}",
                        agentd_base::text::clip_chars(other, 80)
                    ),
                );
            }
        }
        sink.account_if_imported(before);
        Ok(())
    }

    fn item(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        p: &Map<String, Value>,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        match str_of(p, "type").unwrap_or("") {
            "message" => {
                let role = str_of(p, "role").unwrap_or("");
                let text = self.text_of(p.get("content"));
                let kind = match role {
                    "user" => "user_message",
                    "assistant" => "assistant_message",
                    _ => {
                        sink.skip(
                            no,
                            format!(
                                "codex {:?} message: instructions from the codex harness; agentd supplies its own developer context",
                                agentd_base::text::clip_chars(role, 40)
                            ),
                        );
                        return Ok(());
                    }
                };
                if text.is_empty() {
                    sink.skip(no, format!("codex {role} message with no text"));
                } else {
                    sink.emit(kind, json!({"text": text, "import_line": no}), ts)?;
                }
            }
            "reasoning" => {
                let model = self.model.clone().unwrap_or_else(|| "unknown".to_string());
                sink.emit(
                    "reasoning",
                    json!({"item": p, "model": model, "dialect": "codex", "import_line": no}),
                    ts,
                )?;
            }
            "function_call" => {
                let args = args_object(p.get("arguments").cloned().unwrap_or(json!({})));
                self.call(sink, no, str_of(p, "call_id"), str_of(p, "name"), args, ts)?;
            }
            "custom_tool_call" => {
                // Custom tools take free-form text (e.g. a patch), never JSON arguments.
                let args = json!({"input": p.get("input").cloned().unwrap_or(json!(""))});
                self.call(sink, no, str_of(p, "call_id"), str_of(p, "name"), args, ts)?;
            }
            "local_shell_call" => {
                let call_id = str_of(p, "call_id").or_else(|| str_of(p, "id"));
                let action = p.get("action").cloned().unwrap_or(json!({}));
                let mut args =
                    json!({"command": action.get("command").cloned().unwrap_or(json!([]))});
                for (from, to) in [
                    ("working_directory", "workdir"),
                    ("timeout_ms", "timeout_ms"),
                ] {
                    if let Some(v) = action.get(from).filter(|v| !v.is_null()) {
                        args[to] = v.clone();
                    }
                }
                self.call(sink, no, call_id, Some("shell"), args, ts)?;
            }
            "function_call_output" | "custom_tool_call_output" => {
                let (output, ok) = match p.get("output") {
                    Some(Value::String(s)) => (s.clone(), true),
                    // Older rollouts: {content, success}.
                    Some(Value::Object(o)) => (
                        str_of(o, "content").unwrap_or("").to_string(),
                        o.get("success").and_then(Value::as_bool) != Some(false),
                    ),
                    // Structured content items.
                    Some(v @ Value::Array(_)) => (self.text_of(Some(v)), true),
                    _ => (String::new(), true),
                };
                self.result(sink, no, str_of(p, "call_id"), ok, output, ts)?;
            }
            other => sink.skip(
                no,
                format!(
                    "codex item type {:?} has no agentd equivalent",
                    agentd_base::text::clip_chars(other, 80)
                ),
            ),
        }
        Ok(())
    }

    fn call(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        call_id: Option<&str>,
        name: Option<&str>,
        args: Value,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let (Some(call_id), Some(name)) = (call_id, name) else {
            sink.skip(no, "codex tool call without call_id or name");
            return Ok(());
        };
        sink.emit(
            "tool_call",
            json!({"call_id": call_id, "name": name, "args": args, "import_line": no}),
            ts,
        )?;
        self.calls.insert(call_id.to_string());
        Ok(())
    }

    fn result(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        call_id: Option<&str>,
        ok: bool,
        output: String,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let Some(call_id) = call_id else {
            sink.skip(no, "codex tool output without call_id");
            return Ok(());
        };
        if !self.calls.contains(call_id) {
            sink.skip(
                no,
                format!("codex tool output for call {call_id} that has no earlier tool call"),
            );
            return Ok(());
        }
        if !self.answered.insert(call_id.to_string()) {
            sink.skip(no, format!("a second codex tool output for call {call_id}"));
            return Ok(());
        }
        let exit = exit_code(&output);
        let ok = ok && exit.is_none_or(|c| c == 0);
        let output = sink.cap(output);
        let mut data = json!({"call_id": call_id, "ok": ok, "output": output, "import_line": no});
        if let Some(c) = exit {
            data["exit_code"] = json!(c);
        }
        sink.emit("tool_result", data, ts)?;
        Ok(())
    }

    /// Text of codex content parts (`input_text`, `output_text`, `input_image`).
    fn text_of(&mut self, content: Option<&Value>) -> String {
        let images = &mut self.images;
        crate::content_text(content, &["input_text", "output_text", "text"], |b| {
            (b.get("type").and_then(Value::as_str) == Some("input_image")).then(|| {
                *images += 1;
                "[image not imported]".to_string()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_the_output_header() {
        assert_eq!(
            exit_code("Chunk ID: x\nWall time: 0\nProcess exited with code 1\nOutput:\n"),
            Some(1)
        );
        assert_eq!(exit_code("Wall time: 0\nOutput:\nExit code: 0\n"), Some(0));
        assert_eq!(exit_code("plain output"), None);
    }
}
