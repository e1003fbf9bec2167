//! Renders the provider-neutral replay items (docs/history-rules.md#replay) into each wire format's input.
//!
//! This is the one place that knows how a function call and its output look to each API,
//! so `agentd/context` shows exactly what a provider would be sent. Rendering is a pure
//! function of the items: no map iteration order, no clock, so the same history always
//! gives the same bytes. Pairing is kept as given (replay already guarantees each call is
//! followed by exactly one output); the renderers only regroup where an API demands it.
//!
//! A tool result's images are sent only when the caller loaded their bytes into the
//! item ([`ImageRef::data`], read from the session's resources at request-build time):
//! Responses and Anthropic then get an array of text and image parts; Chat Completions
//! tool messages are text only, so the loaded images of a run of tool messages follow
//! them in one user message (`image_url` parts after a line naming the calls).

use agentd_proto::replay::{Dialect, ImageRef, ReplayItem, ToolSpec};
use serde_json::{json, Map, Value};

/// The input for `dialect`: an array of input items (`responses`), an array of messages
/// (`chat`), or `{"system"?, "messages"}` (`anthropic`).
pub fn render(items: &[ReplayItem], dialect: Dialect) -> Value {
    match dialect {
        Dialect::Responses => render_responses(items),
        Dialect::Chat => render_chat(items),
        Dialect::Anthropic => render_anthropic(items),
    }
}

/// How replay items become a provider's input: the dialect, and whether reasoning items
/// without `encrypted_content` are left out (the Responses API with `store:false` cannot
/// resolve them). Rendering the items `keeps` with `dialect` gives the input array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Render {
    pub dialect: Dialect,
    pub encrypted_reasoning_only: bool,
}

impl Render {
    /// What `agentd/context` shows: every replayed item.
    pub fn all(dialect: Dialect) -> Render {
        Render {
            dialect,
            encrypted_reasoning_only: false,
        }
    }

    /// Whether `item` is sent.
    pub fn keeps(&self, item: &ReplayItem) -> bool {
        match item {
            ReplayItem::Reasoning { item, .. } if self.encrypted_reasoning_only => {
                item.get("encrypted_content").is_some_and(|v| !v.is_null())
            }
            _ => true,
        }
    }
}

/// Tool definitions in `dialect`'s shape.
pub fn render_tools(tools: &[ToolSpec], dialect: Dialect) -> Value {
    let out: Vec<Value> = tools
        .iter()
        .map(|t| match dialect {
            Dialect::Responses => json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }),
            Dialect::Chat => json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }),
            Dialect::Anthropic => json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.parameters,
            }),
        })
        .collect();
    Value::Array(out)
}

/// Parses a call's argument text; text that is not a JSON object is kept as
/// `{"_raw": text}` so the call still renders and the tool can report the bad args.
pub fn parse_args(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({ "_raw": arguments }),
    }
}

/// The images of a tool result or a prompt whose bytes were loaded for this request
/// (the others are represented by placeholder lines in the text only).
fn loaded(images: &[ImageRef]) -> impl Iterator<Item = (&str, &str)> {
    images
        .iter()
        .filter_map(|i| i.data.as_deref().map(|d| (i.mime.as_str(), d)))
}

/// A Responses `function_call_output.output`: the text, or with loaded images an array
/// of `input_text` and `input_image` (a `data:` URL) items.
fn responses_output(output: &str, images: &[ImageRef]) -> Value {
    if loaded(images).next().is_none() {
        return json!(output);
    }
    let mut parts = vec![json!({"type": "input_text", "text": output})];
    parts.extend(loaded(images).map(|(mime, data)| {
        json!({"type": "input_image", "image_url": format!("data:{mime};base64,{data}")})
    }));
    Value::Array(parts)
}

/// An Anthropic `tool_result` block's `content`: the text, or with loaded images an
/// array of a `text` block and base64 `image` blocks.
fn anthropic_content(output: &str, images: &[ImageRef]) -> Value {
    if loaded(images).next().is_none() {
        return json!(output);
    }
    let mut parts = Vec::new();
    // The API refuses empty text blocks.
    if !output.is_empty() {
        parts.push(json!({"type": "text", "text": output}));
    }
    parts.extend(loaded(images).map(|(mime, data)| {
        json!({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
    }));
    Value::Array(parts)
}

/// A user item's text with a line per image whose bytes were not loaded (what
/// `agentd/context` shows; a provider request always has them loaded).
fn user_text(text: &str, images: &[ImageRef]) -> String {
    let mut out = text.to_string();
    for i in images.iter().filter(|i| i.data.is_none()) {
        out.push_str(&format!(
            "\n[image: {}, {} bytes, sha256 {}]",
            i.mime, i.bytes, i.sha256
        ));
    }
    out
}

fn data_url(mime: &str, data: &str) -> String {
    format!("data:{mime};base64,{data}")
}

fn render_responses(items: &[ReplayItem]) -> Value {
    let out: Vec<Value> = items
        .iter()
        .map(|item| match item {
            ReplayItem::Developer { text } => json!({"role": "developer", "content": text}),
            ReplayItem::User { text, images } if loaded(images).next().is_some() => {
                let mut parts =
                    vec![json!({"type": "input_text", "text": user_text(text, images)})];
                parts.extend(loaded(images).map(|(mime, data)| {
                    json!({"type": "input_image", "image_url": data_url(mime, data)})
                }));
                json!({"role": "user", "content": parts})
            }
            ReplayItem::User { text, images } => {
                json!({"role": "user", "content": user_text(text, images)})
            }
            ReplayItem::Assistant { text } => json!({"role": "assistant", "content": text}),
            ReplayItem::Reasoning { item, .. } => item.clone(),
            ReplayItem::FunctionCall {
                call_id,
                name,
                arguments,
            } => json!({
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }),
            ReplayItem::FunctionCallOutput {
                call_id,
                output,
                images,
                ..
            } => json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": responses_output(output, images),
            }),
        })
        .collect();
    Value::Array(out)
}

/// The user message carrying the loaded images of a run of Chat tool messages
/// (`calls`: each call id with its images), if any was loaded.
fn chat_tool_images(calls: &mut Vec<(&str, &[ImageRef])>) -> Option<Value> {
    let taken = std::mem::take(calls);
    let with: Vec<&(&str, &[ImageRef])> = taken
        .iter()
        .filter(|(_, imgs)| loaded(imgs).next().is_some())
        .collect();
    if with.is_empty() {
        return None;
    }
    let ids: Vec<&str> = with.iter().map(|(id, _)| *id).collect();
    let mut parts = vec![json!({"type": "text",
        "text": format!("[the images returned by tool call {}]", ids.join(", "))})];
    for (_, imgs) in with {
        parts.extend(loaded(imgs).map(
            |(mime, data)| json!({"type": "image_url", "image_url": {"url": data_url(mime, data)}}),
        ));
    }
    Some(json!({"role": "user", "content": parts}))
}

fn render_chat(items: &[ReplayItem]) -> Value {
    let mut out: Vec<Value> = Vec::new();
    // An assistant message that may still collect the tool calls of its step.
    let mut open_assistant: Option<usize> = None;
    // The run of tool messages just written, whose images follow it.
    let mut tool_run: Vec<(&str, &[ImageRef])> = Vec::new();
    for item in items {
        if !matches!(item, ReplayItem::FunctionCallOutput { .. }) {
            if let Some(m) = chat_tool_images(&mut tool_run) {
                out.push(m);
            }
        }
        match item {
            ReplayItem::Developer { text } => {
                open_assistant = None;
                out.push(json!({"role": "system", "content": text}));
            }
            ReplayItem::User { text, images } => {
                open_assistant = None;
                let text = user_text(text, images);
                if loaded(images).next().is_none() {
                    out.push(json!({"role": "user", "content": text}));
                    continue;
                }
                let mut parts = vec![json!({"type": "text", "text": text})];
                parts.extend(loaded(images).map(|(mime, data)| {
                    json!({"type": "image_url", "image_url": {"url": data_url(mime, data)}})
                }));
                out.push(json!({"role": "user", "content": parts}));
            }
            ReplayItem::Assistant { text } => {
                out.push(json!({"role": "assistant", "content": text}));
                open_assistant = Some(out.len() - 1);
            }
            // Chat Completions has no way to send reasoning back.
            ReplayItem::Reasoning { .. } => {}
            ReplayItem::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                let call = json!({
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                });
                let idx = match open_assistant {
                    Some(i) => i,
                    None => {
                        out.push(json!({"role": "assistant", "content": Value::Null}));
                        out.len() - 1
                    }
                };
                open_assistant = Some(idx);
                if let Some(msg) = out[idx].as_object_mut() {
                    let calls = msg
                        .entry("tool_calls")
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Some(arr) = calls.as_array_mut() {
                        arr.push(call);
                    }
                }
            }
            ReplayItem::FunctionCallOutput {
                call_id,
                output,
                images,
                ..
            } => {
                open_assistant = None;
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
                tool_run.push((call_id, images));
            }
        }
    }
    if let Some(m) = chat_tool_images(&mut tool_run) {
        out.push(m);
    }
    Value::Array(out)
}

/// The Anthropic content block an item adds and the role of the message it belongs to;
/// `None` for an item that adds none (the developer text goes to `system`; empty text
/// and other providers' reasoning are not sent).
pub fn anthropic_block(item: &ReplayItem) -> Option<(&'static str, Value)> {
    match item {
        ReplayItem::Developer { .. } => None,
        // The API refuses empty text blocks.
        ReplayItem::User { text, images } if !text.is_empty() || !images.is_empty() => Some((
            "user",
            json!({"type": "text", "text": user_text(text, images)}),
        )),
        ReplayItem::Assistant { text } if !text.is_empty() => {
            Some(("assistant", json!({"type": "text", "text": text})))
        }
        ReplayItem::User { .. } | ReplayItem::Assistant { .. } => None,
        ReplayItem::Reasoning { item, .. } => {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
            // Only Anthropic's own thinking blocks can be sent back.
            (kind == "thinking" || kind == "redacted_thinking").then(|| ("assistant", item.clone()))
        }
        ReplayItem::FunctionCall {
            call_id,
            name,
            arguments,
        } => Some((
            "assistant",
            json!({"type": "tool_use", "id": call_id, "name": name, "input": parse_args(arguments)}),
        )),
        ReplayItem::FunctionCallOutput {
            call_id,
            output,
            ok,
            images,
            ..
        } => {
            let mut block = Map::new();
            block.insert("type".into(), json!("tool_result"));
            block.insert("tool_use_id".into(), json!(call_id));
            block.insert("content".into(), anthropic_content(output, images));
            if !ok {
                block.insert("is_error".into(), json!(true));
            }
            Some(("user", Value::Object(block)))
        }
    }
}

fn render_anthropic(items: &[ReplayItem]) -> Value {
    let mut system: Vec<&str> = Vec::new();
    // (role, content blocks); consecutive same-role turns are merged because the
    // Messages API requires user and assistant turns to alternate.
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for item in items {
        if let ReplayItem::Developer { text } = item {
            system.push(text);
        }
        let Some((role, block)) = anthropic_block(item) else {
            continue;
        };
        let mut blocks = vec![block];
        if let ReplayItem::User { text, images } = item {
            // Loaded images follow the prompt's text as base64 `image` blocks.
            blocks.extend(loaded(images).map(|(mime, data)| {
                json!({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
            }));
            if text.is_empty() && loaded(images).next().is_some() {
                blocks.remove(0);
            }
        }
        match messages.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut out = Map::new();
    if !system.is_empty() {
        out.insert("system".into(), json!(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<ReplayItem> {
        vec![
            ReplayItem::Developer {
                text: "Workspace: /w".into(),
            },
            ReplayItem::User {
                text: "list files".into(),
                images: Vec::new(),
            },
            ReplayItem::Reasoning {
                item: json!({"type": "reasoning", "id": "rs_1", "summary": []}),
                model: "m".into(),
            },
            ReplayItem::Assistant {
                text: "Looking.".into(),
            },
            ReplayItem::FunctionCall {
                call_id: "c1".into(),
                name: "list_dir".into(),
                arguments: "{\"path\":\".\"}".into(),
            },
            ReplayItem::FunctionCall {
                call_id: "c2".into(),
                name: "shell".into(),
                arguments: "not json".into(),
            },
            ReplayItem::FunctionCallOutput {
                call_id: "c1".into(),
                output: "a.txt".into(),
                ok: true,
                synthetic: false,
                images: Vec::new(),
            },
            ReplayItem::FunctionCallOutput {
                call_id: "c2".into(),
                output: "{\"ok\":false}".into(),
                ok: false,
                synthetic: true,
                images: Vec::new(),
            },
            ReplayItem::Assistant {
                text: "One file.".into(),
            },
            ReplayItem::User {
                text: "thanks".into(),
                images: Vec::new(),
            },
        ]
    }

    fn golden(dialect: Dialect) -> String {
        serde_json::to_string_pretty(&render(&sample(), dialect)).unwrap()
    }

    #[test]
    fn responses_golden() {
        let expected = r#"[
  {
    "role": "developer",
    "content": "Workspace: /w"
  },
  {
    "role": "user",
    "content": "list files"
  },
  {
    "type": "reasoning",
    "id": "rs_1",
    "summary": []
  },
  {
    "role": "assistant",
    "content": "Looking."
  },
  {
    "type": "function_call",
    "call_id": "c1",
    "name": "list_dir",
    "arguments": "{\"path\":\".\"}"
  },
  {
    "type": "function_call",
    "call_id": "c2",
    "name": "shell",
    "arguments": "not json"
  },
  {
    "type": "function_call_output",
    "call_id": "c1",
    "output": "a.txt"
  },
  {
    "type": "function_call_output",
    "call_id": "c2",
    "output": "{\"ok\":false}"
  },
  {
    "role": "assistant",
    "content": "One file."
  },
  {
    "role": "user",
    "content": "thanks"
  }
]"#;
        assert_eq!(golden(Dialect::Responses), expected);
    }

    #[test]
    fn chat_golden_groups_calls_into_their_assistant_message() {
        let expected = r#"[
  {
    "role": "system",
    "content": "Workspace: /w"
  },
  {
    "role": "user",
    "content": "list files"
  },
  {
    "role": "assistant",
    "content": "Looking.",
    "tool_calls": [
      {
        "id": "c1",
        "type": "function",
        "function": {
          "name": "list_dir",
          "arguments": "{\"path\":\".\"}"
        }
      },
      {
        "id": "c2",
        "type": "function",
        "function": {
          "name": "shell",
          "arguments": "not json"
        }
      }
    ]
  },
  {
    "role": "tool",
    "tool_call_id": "c1",
    "content": "a.txt"
  },
  {
    "role": "tool",
    "tool_call_id": "c2",
    "content": "{\"ok\":false}"
  },
  {
    "role": "assistant",
    "content": "One file."
  },
  {
    "role": "user",
    "content": "thanks"
  }
]"#;
        assert_eq!(golden(Dialect::Chat), expected);
    }

    #[test]
    fn anthropic_golden_merges_roles_and_pairs_tool_results() {
        let expected = r#"{
  "system": "Workspace: /w",
  "messages": [
    {
      "role": "user",
      "content": [
        {
          "type": "text",
          "text": "list files"
        }
      ]
    },
    {
      "role": "assistant",
      "content": [
        {
          "type": "text",
          "text": "Looking."
        },
        {
          "type": "tool_use",
          "id": "c1",
          "name": "list_dir",
          "input": {
            "path": "."
          }
        },
        {
          "type": "tool_use",
          "id": "c2",
          "name": "shell",
          "input": {
            "_raw": "not json"
          }
        }
      ]
    },
    {
      "role": "user",
      "content": [
        {
          "type": "tool_result",
          "tool_use_id": "c1",
          "content": "a.txt"
        },
        {
          "type": "tool_result",
          "tool_use_id": "c2",
          "content": "{\"ok\":false}",
          "is_error": true
        }
      ]
    },
    {
      "role": "assistant",
      "content": [
        {
          "type": "text",
          "text": "One file."
        }
      ]
    },
    {
      "role": "user",
      "content": [
        {
          "type": "text",
          "text": "thanks"
        }
      ]
    }
  ]
}"#;
        assert_eq!(golden(Dialect::Anthropic), expected);
    }

    #[test]
    fn rendering_is_byte_deterministic() {
        for d in [Dialect::Responses, Dialect::Chat, Dialect::Anthropic] {
            let a = serde_json::to_vec(&render(&sample(), d)).unwrap();
            let b = serde_json::to_vec(&render(&sample(), d)).unwrap();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn calls_without_assistant_text_get_their_own_message() {
        let items = vec![
            ReplayItem::User {
                text: "go".into(),
                images: Vec::new(),
            },
            ReplayItem::FunctionCall {
                call_id: "c".into(),
                name: "shell".into(),
                arguments: "{}".into(),
            },
            ReplayItem::FunctionCallOutput {
                call_id: "c".into(),
                output: "ok".into(),
                ok: true,
                synthetic: false,
                images: Vec::new(),
            },
        ];
        let chat = render(&items, Dialect::Chat);
        assert_eq!(chat[1]["role"], "assistant");
        assert_eq!(chat[1]["content"], Value::Null);
        assert_eq!(chat[1]["tool_calls"][0]["id"], "c");
        assert_eq!(chat[2]["role"], "tool");
        let anth = render(&items, Dialect::Anthropic);
        assert!(anth.get("system").is_none());
        assert_eq!(anth["messages"].as_array().map(Vec::len), Some(3));
    }

    fn with_image(data: Option<&str>) -> Vec<ReplayItem> {
        vec![
            ReplayItem::FunctionCall {
                call_id: "c".into(),
                name: "mcp__everything__get-tiny-image".into(),
                arguments: "{}".into(),
            },
            ReplayItem::FunctionCallOutput {
                call_id: "c".into(),
                output: "[image image/png, 3 bytes #0]".into(),
                ok: true,
                synthetic: false,
                images: vec![
                    ImageRef {
                        sha256: "ab".repeat(32),
                        mime: "image/png".into(),
                        bytes: 3,
                        data: data.map(str::to_string),
                    },
                    // Not loaded (e.g. its resource is gone): not sent.
                    ImageRef {
                        sha256: "cd".repeat(32),
                        mime: "image/jpeg".into(),
                        bytes: 9,
                        data: None,
                    },
                ],
            },
        ]
    }

    #[test]
    fn anthropic_tool_result_carries_loaded_images() {
        let m = render(&with_image(Some("AQID")), Dialect::Anthropic);
        let block = &m["messages"][1]["content"][0];
        assert_eq!(block["type"], "tool_result");
        assert_eq!(
            block["content"],
            json!([
                {"type": "text", "text": "[image image/png, 3 bytes #0]"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AQID"}},
            ])
        );
        // The block as the context cache writes it is the same.
        let (_, b) = anthropic_block(&with_image(Some("AQID"))[1]).unwrap();
        assert_eq!(&b, block);
    }

    #[test]
    fn responses_output_carries_loaded_images() {
        let r = render(&with_image(Some("AQID")), Dialect::Responses);
        assert_eq!(r[1]["type"], "function_call_output");
        assert_eq!(
            r[1]["output"],
            json!([
                {"type": "input_text", "text": "[image image/png, 3 bytes #0]"},
                {"type": "input_image", "image_url": "data:image/png;base64,AQID"},
            ])
        );
    }

    #[test]
    fn chat_and_unloaded_images_keep_the_placeholder_text() {
        let c = render(&with_image(Some("AQID")), Dialect::Chat);
        assert_eq!(c[1]["role"], "tool");
        assert_eq!(c[1]["content"], "[image image/png, 3 bytes #0]");
        // Without loaded bytes every dialect renders exactly what a result without
        // images renders.
        let mut plain = with_image(None);
        for d in [Dialect::Responses, Dialect::Chat, Dialect::Anthropic] {
            let with_refs = render(&plain, d);
            if let ReplayItem::FunctionCallOutput { images, .. } = &mut plain[1] {
                images.clear();
            }
            assert_eq!(with_refs, render(&plain, d), "{d:?}");
            plain = with_image(None);
        }
        let r = render(&plain, Dialect::Responses);
        assert_eq!(r[1]["output"], "[image image/png, 3 bytes #0]");
    }
}
