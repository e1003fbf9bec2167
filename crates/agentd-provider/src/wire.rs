//! What every wire format shares with the HTTP driver, and nothing else: the
//! [`WireFormat`] trait each format implements (request builder + stream decoder), the
//! attempt outcome types, and small helpers for building bodies and reading events.
//!
//! `http` drives any `WireFormat` without knowing which one; `responses`, `chat` and
//! `anthropic` implement it without knowing the driver.

use super::sse::SseEvent;
use super::{
    classify_provider_error, dialect, ProviderConfig, ProviderResponse, StreamEvent, Usage,
};
use agentd_proto::replay::{ReplayItem, ToolSpec};
use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// One wire format: how a request is built and how its event stream is decoded.
pub(crate) trait WireFormat {
    type Decoder: Decoder + Send;
    const WIRE: Wire;
    fn build(req: &Request<'_>) -> HttpCall;
}

/// What one request is built from.
pub(crate) struct Request<'a> {
    /// The provider's base URL (`ProviderConfig::base_url`).
    pub base: &'a str,
    pub model: &'a str,
    pub input: Input<'a>,
    pub tools: &'a [ToolSpec],
    pub max_output_tokens: Option<u32>,
    /// The provider's settings, with the turn's reasoning effort in place.
    pub cfg: &'a ProviderConfig,
    pub key: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Responses,
    Chat,
    Anthropic,
}

/// What a decoder wants after one SSE event.
pub(crate) enum Step {
    Continue,
    Done,
}

/// A failed attempt: the error, and whether trying again may help.
#[derive(Debug)]
pub(crate) struct Attempt {
    /// Boxed: attempts travel through every decoder call's `Result`.
    pub error: Box<AgentError>,
    pub retryable: bool,
    pub retry_after: Option<Duration>,
}

impl Attempt {
    pub fn fatal(error: AgentError) -> Self {
        Attempt {
            error: Box::new(error),
            retryable: false,
            retry_after: None,
        }
    }
    pub fn retry(error: AgentError) -> Self {
        Attempt {
            error: Box::new(error),
            retryable: true,
            retry_after: None,
        }
    }
    /// An error reported inside the stream (`error` events, `response.failed`).
    pub fn from_stream_error(code: Option<&str>, message: &str, provider: &str) -> Self {
        let kind = classify_provider_error(code, message);
        let overloaded = matches!(
            code,
            Some("overloaded_error" | "server_error" | "api_error")
        );
        let error = AgentError::new(
            kind,
            format!(
                "provider '{provider}' reported an error: {}",
                agentd_base::text::clip_chars(message, 500)
            ),
        )
        .with_details(json!({"provider": provider, "code": code}));
        Attempt {
            error: Box::new(error),
            retryable: kind == ErrorKind::RateLimited || overloaded,
            retry_after: None,
        }
    }
}

/// One wire format's stream decoder.
pub(crate) trait Decoder {
    /// A decoder for one attempt against `provider`, expecting `model` until the stream
    /// names the model that answers.
    fn new(provider: &str, model: &str) -> Self;
    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<Step, Attempt>;
    /// Called after `Step::Done`, or at end of stream with `at_eof` (the decoder decides
    /// whether what it saw is a complete response).
    fn finish(&mut self, at_eof: bool) -> Result<ProviderResponse, Attempt>;
}

/// A request's input: the replay items, or their rendering for the format's dialect
/// (the elements of the input array, in pieces).
#[derive(Clone, Copy)]
pub(crate) enum Input<'a> {
    Items(&'a [ReplayItem]),
    Rendered(&'a [bytes::Bytes]),
}

/// A fully built HTTP request; `body` is JSON text.
pub(crate) struct HttpCall {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: bytes::Bytes,
}

/// The JSON text of `fields` with `input` as the value of `key` (whose place in
/// `fields` it takes): items rendered for `wire`, or the rendered elements spliced in
/// as they are. Both give the same bytes (`provider::tests`).
pub(crate) fn body_with_input(
    mut fields: Map<String, Value>,
    key: &str,
    input: Input<'_>,
    wire: Wire,
) -> bytes::Bytes {
    let parts = match input {
        Input::Items(items) => {
            if let Some(v) = fields.get_mut(key) {
                *v = render_input(items, wire);
            }
            // A Value always serializes.
            return serde_json::to_vec(&Value::Object(fields))
                .unwrap_or_default()
                .into();
        }
        Input::Rendered(parts) => parts,
    };
    let len: usize = parts.iter().map(bytes::Bytes::len).sum();
    let mut out = Vec::with_capacity(len + 4096);
    out.push(b'{');
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        if k == key {
            out.push(b'[');
            for p in parts {
                out.extend_from_slice(p);
            }
            out.push(b']');
        } else {
            let _ = serde_json::to_writer(&mut out, v);
        }
    }
    out.push(b'}');
    out.into()
}

/// The rendered input for a wire, used by the request builders.
pub(crate) fn render_input(items: &[ReplayItem], wire: Wire) -> Value {
    let d = match wire {
        Wire::Responses => agentd_proto::replay::Dialect::Responses,
        Wire::Chat => agentd_proto::replay::Dialect::Chat,
        Wire::Anthropic => agentd_proto::replay::Dialect::Anthropic,
    };
    dialect::render(items, d)
}

/// Parses one event's `data` as JSON; anything else means the server is not speaking
/// the wire format we expect.
pub(crate) fn parse_data(ev: &SseEvent, provider: &str) -> Result<Value, Attempt> {
    serde_json::from_str(&ev.data).map_err(|_| {
        Attempt::fatal(
            AgentError::new(
                ErrorKind::ProviderError,
                format!(
                    "provider '{provider}' sent event data that is not JSON: {}",
                    agentd_base::text::clip_chars(&ev.data, 120)
                ),
            )
            .with_details(json!({"provider": provider})),
        )
    })
}

/// An event's type: its data's `type`, else the SSE event name.
pub(crate) fn event_type<'a>(data: &'a Value, ev: &'a SseEvent) -> &'a str {
    data.get("type")
        .and_then(Value::as_str)
        .unwrap_or(&ev.event)
}

/// The stream ended without the wire format's completion event.
pub(crate) fn cut_short(provider: &str, expected: &str) -> Attempt {
    Attempt::retry(
        AgentError::new(
            ErrorKind::Network,
            format!("provider '{provider}' closed the stream before {expected}"),
        )
        .with_details(json!({"provider": provider})),
    )
}

pub(crate) fn bearer(key: Option<&str>) -> Vec<(&'static str, String)> {
    key.map(|k| vec![("authorization", format!("Bearer {k}"))])
        .unwrap_or_default()
}

/// `usage` with its total, where the stream gave none, as input plus output (provider
/// numbers are untrusted: saturating, never overflowing).
pub(crate) fn with_total(mut usage: Usage) -> Usage {
    if usage.total_tokens == 0 {
        usage.total_tokens = usage.input_tokens.saturating_add(usage.output_tokens);
    }
    usage
}

pub(crate) fn u64_at(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(n) => cur = n,
            None => return 0,
        }
    }
    cur.as_u64().unwrap_or(0)
}
