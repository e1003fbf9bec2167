//! The HTTP side every wire format shares: building the request, reading the SSE body
//! under an idle timeout and the cancel token, mapping statuses to contract kinds, and
//! retrying with backoff.
//!
//! Retries happen only while nothing was streamed to subscribers: once a delta has been
//! shown, replaying the call would show it twice, so later failures end the call with
//! the partial text instead. The API key is read from its env var per call and is only
//! ever placed in a request header; error texts are scrubbed of it as a last guard.

use super::sse::SseParser;
use super::wire::{self, Attempt, Decoder, HttpCall, Input, Step, Wire, WireFormat};
use super::{
    classify_provider_error, ProviderConfig, ProviderFailure, ProviderRequest, ProviderResponse,
    StreamEvent,
};
use agentd_proto::replay::ReplayItem;
use agentd_proto::{AgentError, ErrorKind};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Longest wait a `retry-after` may ask for before we give up instead of retrying.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Where a header's absurd `retry-after` is clamped: a day, far over `MAX_RETRY_AFTER`.
const RETRY_AFTER_CEILING: Duration = Duration::from_secs(24 * 3600);
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(8);
/// Error bodies are read up to this size; providers' JSON errors are small.
const MAX_ERROR_BODY: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct HttpProvider {
    pub(crate) config: ProviderConfig,
    client: reqwest::Client,
}

impl HttpProvider {
    pub(crate) fn new(config: ProviderConfig) -> Result<Self, AgentError> {
        let base = config.base_url();
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(config.idle_timeout().min(Duration::from_secs(30)));
        // A local server must not be routed through an HTTP(S)_PROXY meant for the web.
        if is_loopback(&base) {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| AgentError::internal(format!("cannot build HTTP client: {e}")))?;
        Ok(HttpProvider { config, client })
    }

    /// The request `req` makes with wire format `F`, its model and the API key.
    pub(crate) fn call<F: WireFormat>(
        &self,
        req: &ProviderRequest,
    ) -> Result<(HttpCall, String, Option<String>), AgentError> {
        let cfg = &self.config;
        let model = if req.model.is_empty() {
            cfg.model.clone().unwrap_or_default()
        } else {
            req.model.clone()
        };
        if model.is_empty() {
            return Err(AgentError::invalid_args(format!(
                "provider '{}' needs a model: pass one with the turn or set `model` in [providers.{}]",
                cfg.name, cfg.name
            )));
        }
        let key = read_api_key(cfg)?;
        let items;
        let input = match &req.rendered {
            Some(parts) => Input::Rendered(parts),
            None => {
                items = replayable_items(&req.items, &model, F::WIRE);
                Input::Items(&items)
            }
        };
        let max_out = req.max_output_tokens.or(cfg.max_output_tokens);
        let base = cfg.base_url();
        let with_effort;
        let cfg = match &req.reasoning_effort {
            Some(e) if cfg.reasoning_effort.as_ref() != Some(e) => {
                with_effort = ProviderConfig {
                    reasoning_effort: Some(e.clone()),
                    ..cfg.clone()
                };
                &with_effort
            }
            _ => cfg,
        };
        let call = F::build(&wire::Request {
            base: &base,
            model: &model,
            input,
            tools: &req.tools,
            max_output_tokens: max_out,
            cfg,
            key: key.as_deref(),
        });
        Ok((call, model, key))
    }

    pub(crate) async fn stream<F: WireFormat>(
        &self,
        req: ProviderRequest,
        tx: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> Result<ProviderResponse, ProviderFailure> {
        let cfg = &self.config;
        let (call, model, key) = self.call::<F>(&req).map_err(ProviderFailure::new)?;
        drop(req);
        let mut driver = Driver {
            provider: self,
            tx: &tx,
            cancel: &cancel,
            partial: String::new(),
            streamed: false,
            deadline: cfg
                .timeout_s
                .map(|s| Instant::now() + Duration::from_secs(s)),
            key: key.as_deref(),
        };
        let max_retries = cfg.max_retries();
        let mut retries = 0u32;
        loop {
            let result = driver
                .attempt(&call, F::Decoder::new(&cfg.name, &model))
                .await;
            let failed = match result {
                Ok(resp) => return Ok(resp),
                Err(a) => a,
            };
            let mut error = *failed.error;
            error.message = driver.scrub(&error.message);
            if !(failed.retryable && !driver.streamed && retries < max_retries) {
                return Err(ProviderFailure {
                    error,
                    partial_text: driver.partial,
                });
            }
            retries += 1;
            let delay = failed.retry_after.unwrap_or_else(|| backoff(retries));
            let _ = tx.try_send(StreamEvent::Status(format!(
                "{}: {}; retry {retries} of {max_retries} in {:.1}s",
                cfg.name,
                error.kind,
                delay.as_secs_f64()
            )));
            tokio::select! {
                _ = cancel.cancelled() => return Err(driver.interrupted()),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// Reads the key named by `api_key_env`. The error names the variable, never a value.
fn read_api_key(cfg: &ProviderConfig) -> Result<Option<String>, AgentError> {
    let Some(var) = cfg.api_key_env.as_deref() else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
        _ => {
            let (fix, actions) = crate::preflight::key_fix(var);
            let actions: Vec<&str> = actions.iter().map(String::as_str).collect();
            Err(AgentError::invalid_args(format!(
                "provider '{}' needs an API key: {var} is not set (or empty) in the daemon's environment; {fix}",
                cfg.name
            ))
            .with_details(json!({"provider": cfg.name, "api_key_env": var}))
            .with_next_actions(&actions))
        }
    }
}

/// Drops reasoning items the target cannot accept: items from another model
/// (docs/log-format.md#event-types), and, for the Responses API with `store:false`, items without
/// `encrypted_content` (the server could not resolve their ids).
fn replayable_items(items: &[ReplayItem], model: &str, wire: Wire) -> Vec<ReplayItem> {
    items
        .iter()
        .filter(|item| match item {
            ReplayItem::Reasoning { item, model: m } => {
                m == model
                    && (wire != Wire::Responses
                        || item.get("encrypted_content").is_some_and(|v| !v.is_null()))
            }
            _ => true,
        })
        .cloned()
        .collect()
}

pub(crate) fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let host = rest.split(['/', ':']).next().unwrap_or("");
    matches!(host, "localhost" | "127.0.0.1") || rest.starts_with("[::1]")
}

struct Driver<'a> {
    provider: &'a HttpProvider,
    tx: &'a mpsc::Sender<StreamEvent>,
    cancel: &'a CancellationToken,
    partial: String,
    streamed: bool,
    deadline: Option<Instant>,
    key: Option<&'a str>,
}

impl Driver<'_> {
    fn name(&self) -> &str {
        &self.provider.config.name
    }

    fn interrupted(&self) -> ProviderFailure {
        ProviderFailure {
            error: AgentError::new(ErrorKind::Interrupted, "provider call interrupted"),
            partial_text: self.partial.clone(),
        }
    }

    fn scrub(&self, text: &str) -> String {
        match self.key {
            Some(k) if k.len() >= 4 && text.contains(k) => text.replace(k, "[redacted]"),
            _ => text.to_string(),
        }
    }

    /// How long the next wait may last: the idle timeout, cut short by the call deadline.
    fn wait_limit(&self) -> (Duration, bool) {
        let idle = self.provider.config.idle_timeout();
        match self.deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left < idle {
                    (left, true)
                } else {
                    (idle, false)
                }
            }
            None => (idle, false),
        }
    }

    fn timeout_error(&self, overall: bool) -> Attempt {
        let cfg = &self.provider.config;
        let msg = if overall {
            format!(
                "provider '{}' did not finish within timeout_s = {}s",
                cfg.name,
                cfg.timeout_s.unwrap_or(0)
            )
        } else {
            format!(
                "provider '{}' sent nothing for {}s (idle_timeout_s)",
                cfg.name,
                cfg.idle_timeout().as_secs()
            )
        };
        Attempt::fatal(
            AgentError::new(ErrorKind::Timeout, msg).with_details(json!({"provider": cfg.name})),
        )
    }

    /// Waits for `fut` under the cancel token and the idle/overall timeout.
    async fn guarded<T>(&self, fut: impl std::future::Future<Output = T>) -> Result<T, Guard> {
        let (limit, overall) = self.wait_limit();
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(Guard::Cancelled),
            r = tokio::time::timeout(limit, fut) => r.map_err(|_| Guard::TimedOut(overall)),
        }
    }

    async fn attempt(
        &mut self,
        call: &HttpCall,
        mut decoder: impl Decoder,
    ) -> Result<ProviderResponse, Attempt> {
        let mut rb = self
            .provider
            .client
            .post(&call.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(call.body.clone());
        for (k, v) in &call.headers {
            rb = rb.header(*k, v);
        }
        let resp = match self.guarded(rb.send()).await {
            Err(g) => return Err(self.guard_error(g)),
            Ok(Err(e)) => return Err(self.network_error("cannot reach", &e)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            let retry_after = parse_retry_after(resp.headers());
            let body = self.read_error_body(resp).await?;
            return Err(self.status_error(status.as_u16(), &body, retry_after));
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !content_type.is_empty() && !content_type.contains("event-stream") {
            let body = self.read_error_body(resp).await?;
            return Err(Attempt::fatal(
                AgentError::new(
                    ErrorKind::ProviderError,
                    format!(
                        "provider '{}' answered {content_type} instead of an event stream: {}",
                        self.name(),
                        agentd_base::text::clip_chars(&body, 300)
                    ),
                )
                .with_details(json!({"provider": self.name()})),
            ));
        }
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut deltas = Vec::new();
        loop {
            let chunk = match self.guarded(body.next()).await {
                Err(g) => return Err(self.guard_error(g)),
                Ok(None) => return decoder.finish(true),
                Ok(Some(Err(e))) => return Err(self.network_error("lost the connection to", &e)),
                Ok(Some(Ok(bytes))) => bytes,
            };
            if parser.push(&chunk, &mut events).is_err() {
                return Err(Attempt::fatal(AgentError::new(
                    ErrorKind::ProviderError,
                    format!(
                        "provider '{}' sent an event-stream line over 32 MiB",
                        self.name()
                    ),
                )));
            }
            for ev in events.drain(..) {
                let step = decoder.on_event(&ev, &mut deltas)?;
                for d in deltas.drain(..) {
                    self.forward(d).await?;
                }
                if let Step::Done = step {
                    return decoder.finish(false);
                }
            }
        }
    }

    async fn forward(&mut self, ev: StreamEvent) -> Result<(), Attempt> {
        match &ev {
            StreamEvent::TextDelta(t) => {
                self.partial.push_str(t);
                self.streamed = true;
            }
            StreamEvent::ReasoningDelta(_) => self.streamed = true,
            StreamEvent::Status(_) => {}
        }
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(self.guard_error(Guard::Cancelled)),
            // A closed receiver only means nobody is watching; the call goes on.
            _ = self.tx.send(ev) => Ok(()),
        }
    }

    fn guard_error(&self, g: Guard) -> Attempt {
        match g {
            Guard::Cancelled => Attempt::fatal(AgentError::new(
                ErrorKind::Interrupted,
                "provider call interrupted",
            )),
            Guard::TimedOut(overall) => self.timeout_error(overall),
        }
    }

    fn network_error(&self, what: &str, e: &reqwest::Error) -> Attempt {
        // reqwest's Display includes the URL, never headers; the source chain says why.
        let mut why = String::new();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            why = s.to_string();
            src = s.source();
        }
        let why = if why.is_empty() { e.to_string() } else { why };
        Attempt::retry(
            AgentError::new(
                ErrorKind::Network,
                format!(
                    "{what} provider '{}' ({}): {why}",
                    self.name(),
                    self.provider.config.base_url()
                ),
            )
            .with_details(json!({"provider": self.name()})),
        )
    }

    async fn read_error_body(&self, resp: reqwest::Response) -> Result<String, Attempt> {
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        loop {
            match self.guarded(stream.next()).await {
                Err(g) => return Err(self.guard_error(g)),
                Ok(Some(Ok(b))) => {
                    body.extend_from_slice(&b);
                    if body.len() >= MAX_ERROR_BODY {
                        break;
                    }
                }
                // A cut error body still tells us the status; keep what we have.
                Ok(Some(Err(_))) | Ok(None) => break,
            }
        }
        let cut = body.len().min(MAX_ERROR_BODY);
        Ok(String::from_utf8_lossy(&body[..cut]).into_owned())
    }

    fn status_error(&self, status: u16, body: &str, retry_after: Option<Duration>) -> Attempt {
        let name = self.name().to_string();
        let (code, message) = error_from_body(body);
        let mut details = json!({"provider": name, "http_status": status});
        if let Some(c) = &code {
            details["code"] = json!(c);
        }
        if status == 401 || status == 403 {
            // Auth failures can quote (masked) keys; say what to check instead.
            let var = self
                .provider
                .config
                .api_key_env
                .as_deref()
                .unwrap_or("(none configured)");
            return Attempt::fatal(
                AgentError::new(
                    ErrorKind::ProviderError,
                    format!("provider '{name}' refused the credentials (HTTP {status}); check the key in env var {var}"),
                )
                .with_details(details),
            );
        }
        let kind = match classify_provider_error(code.as_deref(), &message) {
            ErrorKind::ContextOverflow => ErrorKind::ContextOverflow,
            _ if status == 413 => ErrorKind::ContextOverflow,
            _ if status == 429 => ErrorKind::RateLimited,
            _ => ErrorKind::ProviderError,
        };
        let retryable = (status == 429 || status >= 500) && kind != ErrorKind::ContextOverflow;
        if let Some(ra) = retry_after {
            details["retry_after_s"] = json!(ra.as_secs_f64());
        }
        let too_long = retry_after.is_some_and(|d| d > MAX_RETRY_AFTER);
        let error = AgentError::new(
            kind,
            format!(
                "provider '{name}' answered HTTP {status}: {}",
                agentd_base::text::clip_chars(&message, 500)
            ),
        )
        .with_details(details);
        Attempt {
            error: Box::new(error),
            retryable: retryable && !too_long,
            retry_after,
        }
    }
}

enum Guard {
    Cancelled,
    TimedOut(bool),
}

/// `(code, message)` from the JSON error bodies vendors use, else the raw text.
pub(crate) fn error_from_body(body: &str) -> (Option<String>, String) {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return (None, body.trim().to_string());
    };
    let err = v.get("error").unwrap_or(&v);
    if let Some(s) = err.as_str() {
        return (None, s.to_string());
    }
    let code = err
        .get("code")
        .and_then(|c| {
            c.as_str()
                .map(str::to_string)
                .or_else(|| c.as_i64().map(|n| n.to_string()))
        })
        .or_else(|| err.get("type").and_then(Value::as_str).map(str::to_string));
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| body.trim().to_string());
    (code, message)
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds; HTTP dates are not used by
/// the providers we speak to and fall back to backoff.
fn parse_retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
    };
    if let Some(ms) = get("retry-after-ms").and_then(|ms| seconds_to_wait(ms / 1000.0)) {
        return Some(ms);
    }
    get("retry-after").and_then(seconds_to_wait)
}

/// A header's seconds as a wait, or `None` when they are not a wait at all (NaN,
/// negative). A wait too long to represent becomes `RETRY_AFTER_CEILING`, which is over
/// `MAX_RETRY_AFTER`, so it still means "do not retry" — it must never panic.
fn seconds_to_wait(s: f64) -> Option<Duration> {
    if s.is_nan() || s < 0.0 {
        return None;
    }
    Some(
        Duration::try_from_secs_f64(s)
            .unwrap_or(RETRY_AFTER_CEILING)
            .min(RETRY_AFTER_CEILING),
    )
}

/// The wait before retry number `retry` (1-based) when the provider named none:
/// exponential from `BACKOFF_BASE`, capped at `BACKOFF_CAP`, saturating for any count.
fn backoff(retry: u32) -> Duration {
    2u32.checked_pow(retry.saturating_sub(1))
        .map_or(BACKOFF_CAP, |m| BACKOFF_BASE.saturating_mul(m))
        .min(BACKOFF_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_of_each_vendor() {
        let (c, m) = error_from_body(
            r#"{"error":{"message":"This model's maximum context length is 10","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(c.as_deref(), Some("context_length_exceeded"));
        assert!(m.starts_with("This model"));
        let (c, m) = error_from_body(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}"#,
        );
        assert_eq!(
            (c.as_deref(), m.as_str()),
            (Some("invalid_request_error"), "prompt is too long")
        );
        let (c, m) = error_from_body(r#"{"error":"model not found"}"#);
        assert_eq!((c, m.as_str()), (None, "model not found"));
        let (c, m) = error_from_body("<html>bad gateway</html>\n");
        assert_eq!((c, m.as_str()), (None, "<html>bad gateway</html>"));
    }

    #[test]
    fn reasoning_is_replayed_only_to_its_model_and_only_when_resolvable() {
        let r = |model: &str, item: Value| ReplayItem::Reasoning {
            item,
            model: model.into(),
        };
        let items = vec![
            ReplayItem::User {
                text: "u".into(),
                images: Vec::new(),
            },
            r(
                "m1",
                json!({"type": "reasoning", "id": "a", "encrypted_content": "x"}),
            ),
            r("m1", json!({"type": "reasoning", "id": "b"})),
            r(
                "m2",
                json!({"type": "reasoning", "id": "c", "encrypted_content": "y"}),
            ),
        ];
        let ids = |wire| {
            replayable_items(&items, "m1", wire)
                .iter()
                .filter_map(|i| match i {
                    ReplayItem::Reasoning { item, .. } => item["id"].as_str().map(str::to_string),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(Wire::Responses), vec!["a"]);
        assert_eq!(ids(Wire::Anthropic), vec!["a", "b"]);
        assert_eq!(replayable_items(&items, "m1", Wire::Chat).len(), 3);
    }

    #[test]
    fn backoff_saturates_for_any_retry_count() {
        assert_eq!(backoff(1), BACKOFF_BASE);
        assert_eq!(backoff(2), BACKOFF_BASE * 2);
        assert_eq!(backoff(5), BACKOFF_CAP);
        for n in [0, 33, 64, u32::MAX] {
            assert!(backoff(n) <= BACKOFF_CAP, "{n}");
        }
    }

    #[test]
    fn retry_after_seconds_never_panic() {
        assert_eq!(seconds_to_wait(1.5), Some(Duration::from_millis(1500)));
        assert_eq!(seconds_to_wait(f64::NAN), None);
        assert_eq!(seconds_to_wait(-1.0), None);
        assert_eq!(seconds_to_wait(f64::INFINITY), Some(RETRY_AFTER_CEILING));
        assert_eq!(seconds_to_wait(1e27), Some(RETRY_AFTER_CEILING));
        assert!(RETRY_AFTER_CEILING > MAX_RETRY_AFTER);
    }

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("http://localhost:11434/v1"));
        assert!(is_loopback("http://127.0.0.1:9/v1"));
        assert!(is_loopback("http://[::1]:9/v1"));
        assert!(!is_loopback("https://api.openai.com/v1"));
    }
}
