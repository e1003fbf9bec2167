//! The Anthropic Messages wire format (`POST {base}/v1/messages`, streamed).
//!
//! Content blocks are keyed by `index`; text, tool input JSON and thinking arrive as
//! deltas to their block. Thinking blocks are kept with their signature so they can be
//! sent back to the same model (the API rejects thinking without it).

use super::dialect::{parse_args, render_tools};
use super::sse::SseEvent;
use super::wire::{
    self, cut_short, parse_data, render_input, u64_at, Attempt, HttpCall, Input, Request, Step,
    Wire, WireFormat,
};
use super::{OutputItem, ProviderResponse, StreamEvent, Usage};
use agentd_proto::replay::{Dialect, ReplayItem};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The Messages API requires `max_tokens`; used when neither the turn nor config sets one.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The extended-thinking budget of a reasoning effort level (`minimal` is the API's
/// smallest budget).
pub fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(4096),
        "medium" => Some(10_000),
        "high" => Some(32_000),
        _ => None,
    }
}

/// `max_tokens` and the `thinking` member: with a budget, `max_tokens` is the budget
/// plus the answer's own allowance (the API counts thinking inside `max_tokens`).
fn limits(max_output_tokens: Option<u32>, effort: Option<&str>) -> (u32, Option<Value>) {
    let answer = max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    match effort.and_then(thinking_budget) {
        Some(b) => (
            answer.saturating_add(b),
            Some(json!({"type": "enabled", "budget_tokens": b})),
        ),
        None => (answer, None),
    }
}

fn build(req: &Request<'_>, items: &[ReplayItem]) -> HttpCall {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let (max_tokens, thinking) = limits(req.max_output_tokens, effort(req));
    body.insert("max_tokens".into(), json!(max_tokens));
    if let Some(t) = thinking {
        body.insert("thinking".into(), t);
    }
    if let Value::Object(rendered) = render_input(items, Wire::Anthropic) {
        for (k, v) in rendered {
            body.insert(k, v);
        }
    }
    if !req.tools.is_empty() {
        body.insert("tools".into(), render_tools(req.tools, Dialect::Anthropic));
    }
    body.insert("stream".into(), json!(true));
    // A Value always serializes.
    let body = serde_json::to_vec(&Value::Object(body)).unwrap_or_default();
    call(req, body)
}

/// [`build`] for an input already rendered: `members` are the body's `system` and
/// `messages` members as JSON text in pieces (`context::RenderedItems::input`), put
/// where `build` puts them, so both give the same bytes.
fn build_rendered(req: &Request<'_>, members: &[bytes::Bytes]) -> HttpCall {
    let len: usize = members.iter().map(bytes::Bytes::len).sum();
    let mut body = Vec::with_capacity(len + 4096);
    body.extend_from_slice(b"{\"model\":");
    let _ = serde_json::to_writer(&mut body, req.model);
    body.extend_from_slice(b",\"max_tokens\":");
    let (max_tokens, thinking) = limits(req.max_output_tokens, effort(req));
    let _ = serde_json::to_writer(&mut body, &max_tokens);
    if let Some(t) = thinking {
        body.extend_from_slice(b",\"thinking\":");
        let _ = serde_json::to_writer(&mut body, &t);
    }
    body.push(b',');
    for m in members {
        body.extend_from_slice(m);
    }
    if !req.tools.is_empty() {
        body.extend_from_slice(b",\"tools\":");
        let _ = serde_json::to_writer(&mut body, &render_tools(req.tools, Dialect::Anthropic));
    }
    body.extend_from_slice(b",\"stream\":true}");
    call(req, body)
}

fn effort<'a>(req: &Request<'a>) -> Option<&'a str> {
    req.cfg.reasoning_effort.as_deref()
}

fn call(req: &Request<'_>, body: Vec<u8>) -> HttpCall {
    let mut headers = vec![("anthropic-version", "2023-06-01".to_string())];
    if let Some(k) = req.key {
        headers.push(("x-api-key", k.to_string()));
    }
    HttpCall {
        url: format!("{}/v1/messages", req.base),
        headers,
        body: body.into(),
    }
}

#[derive(Default)]
struct Block {
    start: Value,
    text: String,
    json: String,
    thinking: String,
    signature: String,
}

pub(crate) struct Decoder {
    provider: String,
    model: String,
    blocks: BTreeMap<u64, Block>,
    usage: Map<String, Value>,
    stop_reason: Option<String>,
    stopped: bool,
}

impl Decoder {
    /// Later usage reports (message_delta) update the counts message_start gave.
    fn merge_usage(&mut self, u: Option<&Value>) {
        if let Some(Value::Object(m)) = u {
            for (k, v) in m {
                if !v.is_null() {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

fn index_of(v: &Value) -> u64 {
    v.get("index").and_then(Value::as_u64).unwrap_or(0)
}

impl wire::Decoder for Decoder {
    fn new(provider: &str, model: &str) -> Self {
        Decoder {
            provider: provider.to_string(),
            model: model.to_string(),
            blocks: BTreeMap::new(),
            usage: Map::new(),
            stop_reason: None,
            stopped: false,
        }
    }

    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<Step, Attempt> {
        let v = parse_data(ev, &self.provider)?;
        match wire::event_type(&v, ev) {
            "message_start" => {
                if let Some(m) = v.pointer("/message/model").and_then(Value::as_str) {
                    self.model = m.to_string();
                }
                self.merge_usage(v.pointer("/message/usage"));
            }
            "content_block_start" => {
                let block = self.blocks.entry(index_of(&v)).or_default();
                block.start = v.get("content_block").cloned().unwrap_or(Value::Null);
            }
            "content_block_delta" => {
                let block = self.blocks.entry(index_of(&v)).or_default();
                let d = v.get("delta").cloned().unwrap_or(Value::Null);
                let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = s("text");
                        block.text.push_str(&t);
                        if !t.is_empty() {
                            out.push(StreamEvent::TextDelta(t));
                        }
                    }
                    Some("input_json_delta") => block.json.push_str(&s("partial_json")),
                    Some("thinking_delta") => {
                        let t = s("thinking");
                        block.thinking.push_str(&t);
                        if !t.is_empty() {
                            out.push(StreamEvent::ReasoningDelta(t));
                        }
                    }
                    Some("signature_delta") => block.signature.push_str(&s("signature")),
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                self.merge_usage(v.get("usage"));
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Step::Done);
            }
            "error" => {
                let err = v.get("error").unwrap_or(&v);
                let code = err.get("type").and_then(Value::as_str);
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error event without a message");
                return Err(Attempt::from_stream_error(code, message, &self.provider));
            }
            // ping, content_block_stop and future event types need nothing.
            _ => {}
        }
        Ok(Step::Continue)
    }

    fn finish(&mut self, at_eof: bool) -> Result<ProviderResponse, Attempt> {
        if at_eof && !self.stopped {
            return Err(cut_short(&self.provider, "message_stop"));
        }
        let mut output = Vec::new();
        for block in std::mem::take(&mut self.blocks).into_values() {
            match block.start.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let initial = block
                        .start
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let text = format!("{initial}{}", block.text);
                    if !text.is_empty() {
                        output.push(OutputItem::Message { text });
                    }
                }
                Some("tool_use") => {
                    let args = if block.json.trim().is_empty() {
                        block
                            .start
                            .get("input")
                            .cloned()
                            .filter(Value::is_object)
                            .unwrap_or(json!({}))
                    } else {
                        parse_args(&block.json)
                    };
                    output.push(OutputItem::ToolCall {
                        call_id: block
                            .start
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        name: block
                            .start
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        args,
                    });
                }
                Some("thinking") => {
                    let initial = block
                        .start
                        .get("thinking")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let sig0 = block
                        .start
                        .get("signature")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    output.push(OutputItem::Reasoning {
                        item: json!({
                            "type": "thinking",
                            "thinking": format!("{initial}{}", block.thinking),
                            "signature": format!("{sig0}{}", block.signature),
                        }),
                    });
                }
                Some("redacted_thinking") => {
                    output.push(OutputItem::Reasoning { item: block.start })
                }
                _ => {}
            }
        }
        let u = Value::Object(std::mem::take(&mut self.usage));
        let cache_read = u64_at(&u, &["cache_read_input_tokens"]);
        // Provider numbers are untrusted: saturate rather than overflow.
        let input = u64_at(&u, &["input_tokens"])
            .saturating_add(cache_read)
            .saturating_add(u64_at(&u, &["cache_creation_input_tokens"]));
        Ok(ProviderResponse {
            output,
            usage: wire::with_total(Usage {
                input_tokens: input,
                cached_tokens: cache_read,
                output_tokens: u64_at(&u, &["output_tokens"]),
                reasoning_tokens: 0,
                total_tokens: 0,
            }),
            model: self.model.clone(),
            stop_reason: self.stop_reason.clone(),
        })
    }
}

/// The `anthropic` wire format, for the HTTP driver.
pub(crate) struct Anthropic;

impl WireFormat for Anthropic {
    type Decoder = Decoder;
    const WIRE: Wire = Wire::Anthropic;
    fn build(req: &Request<'_>) -> HttpCall {
        match req.input {
            Input::Items(items) => build(req, items),
            Input::Rendered(members) => build_rendered(req, members),
        }
    }
}
