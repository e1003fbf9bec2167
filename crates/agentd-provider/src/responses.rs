//! The OpenAI Responses wire format (`POST {base}/responses`, streamed), also spoken by
//! Open Responses–compatible servers.
//!
//! Output items are keyed by `output_index` so the step's output keeps the server's
//! order even when items finish out of order. `response.output_item.done` carries each
//! item's final form and wins over what the deltas accumulated; the deltas still matter
//! for servers that skip `done` events and for the partial text of a cut stream.

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
    body.insert("input".into(), Value::Null);
    if !req.tools.is_empty() {
        body.insert("tools".into(), render_tools(req.tools, Dialect::Responses));
    }
    body.insert("stream".into(), json!(true));
    // agentd's Log is the memory; nothing is left on the provider's side.
    body.insert("store".into(), json!(false));
    if let Some(n) = req.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(effort) = &req.cfg.reasoning_effort {
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
        // With store:false a reasoning item can only be replayed with its encrypted form.
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    HttpCall {
        url: format!("{}/responses", req.base),
        headers: bearer(req.key),
        body: wire::body_with_input(body, "input", req.input, Wire::Responses),
    }
}

#[derive(Default)]
struct Slot {
    added: Value,
    text: String,
    args: String,
    done: Option<Value>,
}

pub(crate) struct Decoder {
    provider: String,
    model: String,
    slots: BTreeMap<u64, Slot>,
    completed: Option<Value>,
}

fn index_of(v: &Value) -> u64 {
    v.get("output_index").and_then(Value::as_u64).unwrap_or(0)
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

impl wire::Decoder for Decoder {
    fn new(provider: &str, model: &str) -> Self {
        Decoder {
            provider: provider.to_string(),
            model: model.to_string(),
            slots: BTreeMap::new(),
            completed: None,
        }
    }

    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<Step, Attempt> {
        let v = parse_data(ev, &self.provider)?;
        match wire::event_type(&v, ev) {
            "response.output_item.added" => {
                let slot = self.slots.entry(index_of(&v)).or_default();
                slot.added = v.get("item").cloned().unwrap_or(Value::Null);
            }
            "response.output_text.delta" => {
                let d = str_at(&v, "delta");
                if !d.is_empty() {
                    self.slots.entry(index_of(&v)).or_default().text.push_str(d);
                    out.push(StreamEvent::TextDelta(d.to_string()));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let d = str_at(&v, "delta");
                if !d.is_empty() {
                    out.push(StreamEvent::ReasoningDelta(d.to_string()));
                }
            }
            "response.function_call_arguments.delta" => {
                let d = str_at(&v, "delta");
                self.slots.entry(index_of(&v)).or_default().args.push_str(d);
            }
            "response.function_call_arguments.done" => {
                if let Some(a) = v.get("arguments").and_then(Value::as_str) {
                    self.slots.entry(index_of(&v)).or_default().args = a.to_string();
                }
            }
            "response.output_item.done" => {
                self.slots.entry(index_of(&v)).or_default().done = v.get("item").cloned();
            }
            "response.completed" | "response.incomplete" => {
                self.completed = Some(v.get("response").cloned().unwrap_or(Value::Null));
                return Ok(Step::Done);
            }
            "response.failed" => {
                let err = v.pointer("/response/error").cloned().unwrap_or(Value::Null);
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("response.failed without a message");
                return Err(Attempt::from_stream_error(
                    err.get("code").and_then(Value::as_str),
                    message,
                    &self.provider,
                ));
            }
            "error" => {
                let err = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
                let code = err.get("code").and_then(Value::as_str).or_else(|| {
                    err.get("type")
                        .and_then(Value::as_str)
                        .filter(|t| *t != "error")
                });
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error event without a message");
                return Err(Attempt::from_stream_error(code, message, &self.provider));
            }
            _ => {}
        }
        Ok(Step::Continue)
    }

    fn finish(&mut self, at_eof: bool) -> Result<ProviderResponse, Attempt> {
        let Some(resp) = self.completed.take().filter(|_| !at_eof) else {
            return Err(cut_short(&self.provider, "response.completed"));
        };
        let refused = self.slots.values().any(|s| has_refusal(s.done.as_ref()))
            || resp
                .get("output")
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().any(|i| has_refusal(Some(i))));
        let mut output: Vec<OutputItem> = Vec::new();
        for slot in std::mem::take(&mut self.slots).into_values() {
            output.extend(slot_output(slot));
        }
        // Servers that send no item events still list the output in the final response.
        if output.is_empty() {
            if let Some(items) = resp.get("output").and_then(Value::as_array) {
                for item in items {
                    output.extend(slot_output(Slot {
                        done: Some(item.clone()),
                        ..Slot::default()
                    }));
                }
            }
        }
        let u = resp.get("usage").cloned().unwrap_or(Value::Null);
        let usage = wire::with_total(Usage {
            input_tokens: u64_at(&u, &["input_tokens"]),
            cached_tokens: u64_at(&u, &["input_tokens_details", "cached_tokens"]),
            output_tokens: u64_at(&u, &["output_tokens"]),
            reasoning_tokens: u64_at(&u, &["output_tokens_details", "reasoning_tokens"]),
            total_tokens: u64_at(&u, &["total_tokens"]),
        });
        let stop_reason = match resp.get("status").and_then(Value::as_str) {
            Some("incomplete") => resp
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or(Some("incomplete".into())),
            _ if refused => Some("refusal".into()),
            Some(s) => Some(s.to_string()),
            None => None,
        };
        Ok(ProviderResponse {
            output,
            usage,
            model: resp
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(&self.model)
                .to_string(),
            stop_reason,
        })
    }
}

fn slot_output(slot: Slot) -> Option<OutputItem> {
    let item = slot.done.as_ref().unwrap_or(&slot.added);
    match item.get("type").and_then(Value::as_str) {
        Some("message") => {
            let text = match &slot.done {
                Some(done) => done
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .filter(|p| {
                                p.get("type").and_then(Value::as_str) == Some("output_text")
                            })
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect::<String>()
                    })
                    .unwrap_or_default(),
                None => slot.text,
            };
            // A message item with no text (e.g. only a refusal part) adds nothing.
            (!text.is_empty()).then_some(OutputItem::Message { text })
        }
        Some("function_call") => {
            let arguments = match item.get("arguments").and_then(Value::as_str) {
                Some(a) if slot.done.is_some() => a.to_string(),
                _ => slot.args,
            };
            Some(OutputItem::ToolCall {
                call_id: str_at(item, "call_id").to_string(),
                name: str_at(item, "name").to_string(),
                args: parse_args(&arguments),
            })
        }
        Some("reasoning") => Some(OutputItem::Reasoning { item: item.clone() }),
        // A text delta for an item we never saw announced is still the answer.
        None if !slot.text.is_empty() => Some(OutputItem::Message { text: slot.text }),
        _ => None,
    }
}

/// True for a message item with a `refusal` content part.
fn has_refusal(item: Option<&Value>) -> bool {
    item.and_then(|i| i.get("content"))
        .and_then(Value::as_array)
        .is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p.get("type").and_then(Value::as_str) == Some("refusal"))
        })
}

/// The `responses` wire format, for the HTTP driver.
pub(crate) struct Responses;

impl WireFormat for Responses {
    type Decoder = Decoder;
    const WIRE: Wire = Wire::Responses;
    fn build(req: &Request<'_>) -> HttpCall {
        build(req)
    }
}
