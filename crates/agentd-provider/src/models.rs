//! What a provider's own models endpoint lists (docs/turns-and-providers.md#listing-models):
//! `GET {base}/models` for the OpenAI kinds (`{"data": [{"id"}]}`), `GET {base}/v1/models`
//! for Anthropic (`{"data": [{"id"}], "has_more", "last_id"}`, followed page by page).
//! Asked only for providers with `list_models = true`; the caller caches the answer.
//!
//! A failure is a one-line reason for the client (the status and the provider's own
//! message, clipped); the API key never appears in it.

use super::{ProviderConfig, ProviderKind};
use serde_json::Value;
use std::time::Duration;

/// Anthropic pages followed at most (1,000 models each).
const MAX_PAGES: usize = 10;
/// A listing body is read up to this size.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// The model ids `cfg`'s endpoint lists, in its order, or why it could not be listed.
pub async fn list(cfg: &ProviderConfig, timeout: Duration) -> Result<Vec<String>, String> {
    let key = match cfg.api_key_env.as_deref() {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Some(v.trim().to_string()),
            _ => return Err(format!("{var} is not set in the daemon's environment")),
        },
    };
    let scrub = |text: String| match &key {
        Some(k) if k.len() >= 4 && text.contains(k.as_str()) => {
            text.replace(k.as_str(), "[redacted]")
        }
        _ => text,
    };
    let base = cfg.base_url();
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")))
        .timeout(timeout);
    if super::http::is_loopback(&base) {
        builder = builder.no_proxy();
    }
    let client = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
    let (url, anthropic) = match cfg.kind {
        ProviderKind::OpenaiResponses | ProviderKind::OpenaiChat => {
            (format!("{base}/models"), false)
        }
        ProviderKind::Anthropic => (format!("{base}/v1/models?limit=1000"), true),
        ProviderKind::Script => return Err("the script provider has no models endpoint".into()),
    };
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page_url = match &after {
            Some(id) => format!("{url}&after_id={}", urlencode(id)),
            None => url.clone(),
        };
        let mut req = client.get(&page_url);
        match (&key, anthropic) {
            (Some(k), true) => req = req.header("x-api-key", k),
            (Some(k), false) => req = req.bearer_auth(k),
            (None, _) => {}
        }
        if anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        let resp = req
            .send()
            .await
            .map_err(|e| scrub(format!("GET {page_url}: {}", without_url(&e))))?;
        let status = resp.status();
        let body = read_capped(resp).await.map_err(scrub)?;
        if !status.is_success() {
            return Err(scrub(format!(
                "GET {page_url}: HTTP {}{}",
                status.as_u16(),
                error_message(&body)
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )));
        }
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("GET {page_url}: not a JSON models list ({e})"))?;
        let Some(data) = v.get("data").and_then(Value::as_array) else {
            return Err(format!("GET {page_url}: no `data` list in the answer"));
        };
        ids.extend(
            data.iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str))
                .filter(|id| !id.trim().is_empty() && id.len() <= 256)
                .map(str::to_string),
        );
        let more = anthropic && v.get("has_more").and_then(Value::as_bool) == Some(true);
        match v.get("last_id").and_then(Value::as_str) {
            Some(last) if more => after = Some(last.to_string()),
            _ => break,
        }
    }
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    Ok(ids)
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| without_url(&e))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_BODY {
            return Err(format!("the models list is over {MAX_BODY} bytes"));
        }
    }
    Ok(body)
}

/// The provider's own error message (`{"error": {"message"}}` or `{"error": "…"}`),
/// clipped to one short line.
fn error_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    let m = e
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| e.as_str())?;
    let line: String = m.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(agentd_base::text::clip_chars(&line, 200))
}

fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(&format!(" ({u})"), "");
    }
    s
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
