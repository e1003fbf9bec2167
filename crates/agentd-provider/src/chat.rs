//! The Chat Completions wire format (`POST {base}/chat/completions`, streamed), spoken
//! by Ollama, vLLM, llama.cpp, OpenRouter and OpenAI itself.
//!
//! Tool calls arrive as fragments keyed by `index`: the first fragment carries the id
//! and name, later ones append to the argument text. Servers differ in whether they
//! send `[DONE]`; a stream that reported a `finish_reason` before closing is complete.

use super::dialect::{parse_args, render_tools};
use super::sse::SseEvent;
use super::wire::{
    self, bearer, cut_short, parse_data, u64_at, Attempt, HttpCall, Request, Step, Wire, WireFormat,
};
use super::{OutputItem, ProviderResponse, StreamEvent, Usage};
use agentd_proto::replay::Dialect;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

fn build(req: &Request<'_>) -> HttpCall {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    // Its place in the body; filled by `body_with_input`.
    body.insert("messages".into(), Value::Null);
    if !req.tools.is_empty() {
        body.insert("tools".into(), render_tools(req.tools, Dialect::Chat));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(n) = req.max_output_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    // OpenAI's reasoning models take it; a server that does not is configured without.
    if let Some(e) = &req.cfg.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(e));
    }
    HttpCall {
        url: format!("{}/chat/completions", req.base),
        headers: bearer(req.key),
        body: wire::body_with_input(body, "messages", req.input, Wire::Chat),
    }
}

#[derive(Default)]
struct Call {
    id: String,
    name: String,
    args: String,
}

pub(crate) struct Decoder {
    provider: String,
    model: String,
    text: String,
    reasoning: String,
    calls: BTreeMap<u64, Call>,
    usage: Option<Value>,
    finish_reason: Option<String>,
    done: bool,
}

impl wire::Decoder for Decoder {
    fn new(provider: &str, model: &str) -> Self {
        Decoder {
            provider: provider.to_string(),
            model: model.to_string(),
            text: String::new(),
            reasoning: String::new(),
            calls: BTreeMap::new(),
            usage: None,
            finish_reason: None,
            done: false,
        }
    }

    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<Step, Attempt> {
        if ev.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(Step::Done);
        }
        let v = parse_data(ev, &self.provider)?;
        if let Some(err) = v.get("error") {
            let (code, message) = match err {
                Value::String(s) => (None, s.clone()),
                e => (
                    e.get("code")
                        .and_then(Value::as_str)
                        .or_else(|| e.get("type").and_then(Value::as_str))
                        .map(str::to_string),
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error without a message")
                        .to_string(),
                ),
            };
            return Err(Attempt::from_stream_error(
                code.as_deref(),
                &message,
                &self.provider,
            ));
        }
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            if !m.is_empty() {
                self.model = m.to_string();
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let choices = v
            .get("choices")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for choice in &choices {
            let delta = choice.get("delta").cloned().unwrap_or(Value::Null);
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                if !t.is_empty() {
                    self.text.push_str(t);
                    out.push(StreamEvent::TextDelta(t.to_string()));
                }
            }
            for key in ["reasoning_content", "reasoning"] {
                if let Some(t) = delta.get(key).and_then(Value::as_str) {
                    if !t.is_empty() {
                        self.reasoning.push_str(t);
                        out.push(StreamEvent::ReasoningDelta(t.to_string()));
                    }
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, c) in calls.iter().enumerate() {
                    let idx = c.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                    let slot = self.calls.entry(idx).or_default();
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        if !id.is_empty() {
                            slot.id = id.to_string();
                        }
                    }
                    if let Some(f) = c.get("function") {
                        if let Some(n) = f.get("name").and_then(Value::as_str) {
                            slot.name.push_str(n);
                        }
                        if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                            slot.args.push_str(a);
                        }
                    }
                }
            }
            if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(r.to_string());
            }
        }
        Ok(Step::Continue)
    }

    fn finish(&mut self, at_eof: bool) -> Result<ProviderResponse, Attempt> {
        if at_eof && !self.done && self.finish_reason.is_none() {
            return Err(cut_short(&self.provider, "a finish_reason or [DONE]"));
        }
        let mut output = Vec::new();
        if !self.reasoning.is_empty() {
            // Kept for the Log and display; Chat Completions cannot take it back.
            output.push(OutputItem::Reasoning {
                item: json!({"type": "reasoning_text", "text": self.reasoning}),
            });
        }
        if !self.text.is_empty() {
            output.push(OutputItem::Message {
                text: std::mem::take(&mut self.text),
            });
        }
        for (idx, c) in std::mem::take(&mut self.calls) {
            output.push(OutputItem::ToolCall {
                call_id: if c.id.is_empty() {
                    format!("call_{idx}")
                } else {
                    c.id
                },
                name: c.name,
                args: parse_args(&c.args),
            });
        }
        let u = self.usage.take().unwrap_or(Value::Null);
        let usage = wire::with_total(Usage {
            input_tokens: u64_at(&u, &["prompt_tokens"]),
            cached_tokens: u64_at(&u, &["prompt_tokens_details", "cached_tokens"]),
            output_tokens: u64_at(&u, &["completion_tokens"]),
            reasoning_tokens: u64_at(&u, &["completion_tokens_details", "reasoning_tokens"]),
            total_tokens: u64_at(&u, &["total_tokens"]),
        });
        Ok(ProviderResponse {
            output,
            usage,
            model: self.model.clone(),
            stop_reason: self.finish_reason.clone(),
        })
    }
}

/// The `chat` wire format, for the HTTP driver.
pub(crate) struct Chat;

impl WireFormat for Chat {
    type Decoder = Decoder;
    const WIRE: Wire = Wire::Chat;
    fn build(req: &Request<'_>) -> HttpCall {
        build(req)
    }
}
