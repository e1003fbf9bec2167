//! agentd-provider: LLM providers: streamed HTTP clients for each wire format and the offline `script`
//! provider (docs/turns-and-providers.md#turns).
//!
//! Must never depend on the daemon, a store or sessions: it turns replay items into a
//! request and a response stream into turn events, and nothing else.
//!
//! The turn engine hands a [`Provider`] the folded replay items (docs/history-rules.md#replay) and gets back the
//! step's output items in the provider's order, plus usage; text and reasoning deltas go
//! to an mpsc channel as they arrive so subscribers see them live. Everything a provider
//! can go wrong with is a [`ProviderFailure`] whose `error.kind` is a contract kind, with
//! the text already streamed kept so the turn can record it as a partial message.
//!
//! Module map: `config` (the `[providers.NAME]` tables), `dialect` (replay items → wire
//! input, shared with `agentd/context`), `sse` (the event-stream parser, from `agentd-base`), `http` (request,
//! retries, idle timeout, cancellation — common to all HTTP kinds), `responses`, `chat`,
//! `anthropic` (one stream decoder per wire format), `script` (offline replay), `models`
//! (a provider's own models endpoint).
//!
//! Tool call arguments arrive as streamed JSON text; they are parsed once the call is
//! complete. Text that is not a JSON object is kept as `{"_raw": "<text>"}` so the call
//! is still recorded and paired, and the tool then fails with `invalid_args`.

pub mod config;
pub mod dialect;
pub mod models;
pub mod preflight;
/// The event-stream parser, shared with MCP's streamable HTTP (`agentd_base::sse`).
pub use agentd_base::sse;

mod anthropic;
mod chat;
mod http;
mod responses;
mod script;
mod wire;

pub use config::{ProviderConfig, ProviderKind, ProvidersConfig};

use agentd_proto::replay::{Dialect, ReplayItem, ToolSpec};
use agentd_proto::{AgentError, ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One provider call: the whole input of one model step.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRequest {
    /// Model name; empty means the provider config's `model`. For the script provider,
    /// `script:PATH` names the script file.
    pub model: String,
    pub items: Vec<ReplayItem>,
    /// The input already rendered as [`Provider::render`] says, in pieces, used instead
    /// of `items` when set: the elements of the input array, or for Anthropic the
    /// body's `system` and `messages` members (`context::RenderedItems::input`).
    pub rendered: Option<Vec<bytes::Bytes>>,
    pub tools: Vec<ToolSpec>,
    pub max_output_tokens: Option<u32>,
    /// Over the config's `reasoning_effort` (`minimal|low|medium|high`, checked by the
    /// caller).
    pub reasoning_effort: Option<String>,
}

/// Ephemeral progress, forwarded to subscribers and never logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// Human-readable progress such as "retrying in 2s (HTTP 429)".
    Status(String),
}

/// Token usage in the shape of `provider_usage.data.usage` (docs/log-format.md#event-types).
/// `input_tokens` includes cached tokens; `total_tokens` = input + output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub total_tokens: u64,
}

/// One item of a step's output, in the order the provider produced them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputItem {
    /// Opaque reasoning object (record as `reasoning.item` with the model name).
    Reasoning {
        item: Value,
    },
    Message {
        text: String,
    },
    /// `args` is always an object; see the module doc for unparseable arguments.
    ToolCall {
        call_id: String,
        name: String,
        args: Value,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProviderResponse {
    pub output: Vec<OutputItem>,
    pub usage: Usage,
    /// The model that answered, as the provider reports it.
    pub model: String,
    /// The provider's own stop reason (`stop`, `tool_calls`, `end_turn`, `max_tokens`, …).
    pub stop_reason: Option<String>,
}

/// What a provider's own stop reason means for the turn, when it is something a client
/// must be told about: `max_tokens` (the output limit cut the answer: Anthropic
/// `max_tokens`, Chat Completions `length`, Responses `incomplete` with
/// `max_output_tokens`) or `refusal` (Anthropic `refusal`, a `content_filter` in Chat
/// Completions or Responses, a Responses refusal part). `None` for an ordinary end.
pub fn limiting_stop(raw: Option<&str>) -> Option<&'static str> {
    match raw? {
        "max_tokens" | "length" | "max_output_tokens" => Some("max_tokens"),
        "refusal" | "content_filter" => Some("refusal"),
        _ => None,
    }
}

/// A failed call: a contract error plus the text streamed before it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderFailure {
    pub error: AgentError,
    pub partial_text: String,
}

impl ProviderFailure {
    pub fn new(error: AgentError) -> Self {
        ProviderFailure {
            error,
            partial_text: String::new(),
        }
    }
    pub fn kind(&self) -> ErrorKind {
        self.error.kind
    }
}

impl fmt::Display for ProviderFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for ProviderFailure {}

/// A configured provider, ready to be called any number of times.
#[derive(Debug, Clone)]
pub enum Provider {
    OpenaiResponses(http::HttpProvider),
    OpenaiChat(http::HttpProvider),
    Anthropic(http::HttpProvider),
    Script(script::ScriptProvider),
}

impl Provider {
    pub fn new(config: ProviderConfig) -> Result<Provider, AgentError> {
        Ok(match config.kind {
            ProviderKind::OpenaiResponses => {
                Provider::OpenaiResponses(http::HttpProvider::new(config)?)
            }
            ProviderKind::OpenaiChat => Provider::OpenaiChat(http::HttpProvider::new(config)?),
            ProviderKind::Anthropic => Provider::Anthropic(http::HttpProvider::new(config)?),
            ProviderKind::Script => Provider::Script(script::ScriptProvider::new(config)),
        })
    }

    pub fn config(&self) -> &ProviderConfig {
        match self {
            Provider::OpenaiResponses(p) | Provider::OpenaiChat(p) | Provider::Anthropic(p) => {
                &p.config
            }
            Provider::Script(p) => &p.config,
        }
    }

    pub fn name(&self) -> &str {
        &self.config().name
    }

    /// The wire shape this provider's input is rendered in (what `agentd/context` should
    /// show for it). The script provider reads the neutral items; it reports `responses`.
    pub fn dialect(&self) -> Dialect {
        match self {
            Provider::OpenaiResponses(_) | Provider::Script(_) => Dialect::Responses,
            Provider::OpenaiChat(_) => Dialect::Chat,
            Provider::Anthropic(_) => Dialect::Anthropic,
        }
    }

    /// How this provider renders its input, when a request may carry it already
    /// rendered ([`ProviderRequest::rendered`]); `None` when it takes the items (script:
    /// it reads them).
    pub fn render(&self) -> Option<dialect::Render> {
        match self {
            Provider::OpenaiResponses(_) => Some(dialect::Render {
                dialect: Dialect::Responses,
                encrypted_reasoning_only: true,
            }),
            Provider::OpenaiChat(_) => Some(dialect::Render::all(Dialect::Chat)),
            Provider::Anthropic(_) => Some(dialect::Render::all(Dialect::Anthropic)),
            Provider::Script(_) => None,
        }
    }

    /// The body of the HTTP request `req` makes (none for the script provider).
    pub fn request_body(&self, req: &ProviderRequest) -> Result<bytes::Bytes, AgentError> {
        Ok(match self {
            Provider::OpenaiResponses(p) => p.call::<responses::Responses>(req)?.0.body,
            Provider::OpenaiChat(p) => p.call::<chat::Chat>(req)?.0.body,
            Provider::Anthropic(p) => p.call::<anthropic::Anthropic>(req)?.0.body,
            Provider::Script(_) => bytes::Bytes::new(),
        })
    }

    /// The model a request with `requested` (possibly empty) would use.
    pub fn effective_model(&self, requested: &str) -> Option<String> {
        if !requested.is_empty() {
            return Some(requested.to_string());
        }
        self.config().model.clone()
    }

    /// Streams one model step. Deltas go to `tx` (a closed receiver is ignored); firing
    /// `cancel` aborts the HTTP stream and returns kind `interrupted`.
    pub async fn stream(
        &self,
        req: ProviderRequest,
        tx: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> Result<ProviderResponse, ProviderFailure> {
        match self {
            Provider::OpenaiResponses(p) => p.stream::<responses::Responses>(req, tx, cancel).await,
            Provider::OpenaiChat(p) => p.stream::<chat::Chat>(req, tx, cancel).await,
            Provider::Anthropic(p) => p.stream::<anthropic::Anthropic>(req, tx, cancel).await,
            Provider::Script(p) => p.stream(req, tx, cancel).await,
        }
    }
}

/// Maps a provider's error code/type/message to a contract kind. Context overflow is
/// recognised by the phrases the known servers use, since codes differ per vendor.
pub(crate) fn classify_provider_error(code: Option<&str>, message: &str) -> ErrorKind {
    let code = code.unwrap_or("");
    let lower = message.to_ascii_lowercase();
    if code == "context_length_exceeded"
        || lower.contains("context_length_exceeded")
        || lower.contains("prompt is too long")
        || lower.contains("maximum context length")
        || lower.contains("context window")
        || lower.contains("exceeds the available context size")
        || lower.contains("context length exceeded")
    {
        ErrorKind::ContextOverflow
    } else if code == "rate_limit_exceeded" || code == "rate_limit_error" {
        ErrorKind::RateLimited
    } else {
        ErrorKind::ProviderError
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_context_overflow_across_vendors() {
        assert_eq!(
            classify_provider_error(
                Some("context_length_exceeded"),
                "Your input exceeds the context window of this model."
            ),
            ErrorKind::ContextOverflow
        );
        assert_eq!(
            classify_provider_error(
                Some("invalid_request_error"),
                "prompt is too long: 210000 tokens > 200000 maximum"
            ),
            ErrorKind::ContextOverflow
        );
        assert_eq!(
            classify_provider_error(None, "This model's maximum context length is 8192 tokens."),
            ErrorKind::ContextOverflow
        );
        assert_eq!(
            classify_provider_error(Some("server_error"), "The server had an error"),
            ErrorKind::ProviderError
        );
        assert_eq!(
            classify_provider_error(Some("rate_limit_exceeded"), "slow down"),
            ErrorKind::RateLimited
        );
    }
}
