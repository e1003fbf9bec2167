//! Black-box tests of model listing (docs/turns-and-providers.md#listing-models): the
//! real daemon asks local servers that speak each provider's models endpoint (OpenAI's
//! `GET /v1/models`, Anthropic's paged `GET /v1/models`) for providers with
//! `list_models = true`, keeps the answer for ten minutes, and keeps the configured
//! models with the reason when a listing fails.

use agentd_tests::sse::{JsonServer, SeenRequest};
use agentd_tests::Daemon;
use serde_json::{json, Value};

const KEY: &str = "sk-test-models-0123456789";

fn openai_list(ids: &[&str]) -> Value {
    json!({"object": "list", "data": ids.iter().map(|id| json!({"id": id, "object": "model",
        "created": 1_700_000_000, "owned_by": "system"})).collect::<Vec<_>>()})
}

/// `(provider, model, source)` of each entry, in order.
fn rows(r: &Value) -> Vec<(String, String, String)> {
    r["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap().to_string();
            (s("provider"), s("model"), s("source"))
        })
        .collect()
}

fn of(r: &Value, provider: &str) -> Vec<(String, String)> {
    rows(r)
        .into_iter()
        .filter(|(p, _, _)| p == provider)
        .map(|(_, m, s)| (m, s))
        .collect()
}

fn pair(m: &str, s: &str) -> (String, String) {
    (m.to_string(), s.to_string())
}

fn listing<'a>(r: &'a Value, provider: &str) -> &'a Value {
    r["listings"]
        .as_array()
        .unwrap_or_else(|| panic!("no listings: {r}"))
        .iter()
        .find(|l| l["provider"] == provider)
        .unwrap_or_else(|| panic!("no listing of {provider}: {r}"))
}

/// OpenAI's endpoint is asked with the bearer key; its models follow the configured
/// ones (which are not repeated), the answer is kept for the next calls, and `refresh`
/// asks again. A provider without `list_models` is never asked.
#[test]
fn openai_models_endpoint_is_listed_and_cached() {
    let srv = JsonServer::start(|req: &SeenRequest| {
        assert_eq!(req.method, "GET");
        (200, openai_list(&["gpt-5", "gpt-5-mini", "o4-mini"]))
    });
    let quiet = JsonServer::start(|_req: &SeenRequest| (500, json!({})));
    let config = format!(
        "[providers.oai]\nkind = \"openai-responses\"\nbase_url = \"{}/v1\"\napi_key_env = \"MODELS_TEST_KEY\"\nmodel = \"gpt-5-mini\"\nmodels = [\"my-tuned\"]\nlist_models = true\n\
         [providers.other]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m1\"\n",
        srv.origin, quiet.origin
    );
    let d = Daemon::builder()
        .env("MODELS_TEST_KEY", KEY)
        .config(&config)
        .start();
    let mut c = d.connect();
    let r = c.call_ok("agentd/models", json!({}));
    assert_eq!(
        of(&r, "oai"),
        vec![
            pair("gpt-5-mini", "model"),
            pair("my-tuned", "models"),
            pair("gpt-5", "listed"),
            pair("o4-mini", "listed"),
        ],
        "{r}"
    );
    assert_eq!(of(&r, "other"), vec![pair("m1", "model")]);
    let l = listing(&r, "oai");
    assert_eq!(l["count"], 3, "{r}");
    assert!(l.get("error").is_none(), "{r}");
    assert!(r["listings"].as_array().unwrap().len() == 1, "{r}");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/models");
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(quiet.requests().is_empty());

    // Cached: the same answer without asking again.
    let again = c.call_ok("agentd/models", json!({}));
    assert_eq!(rows(&again), rows(&r));
    assert_eq!(srv.requests().len(), 1);
    // `agentctl models` shows it; `--refresh` asks again.
    let out = d.agentctl(["models", "--refresh"]);
    out.assert_code(0);
    assert!(out.stdout.contains("oai:o4-mini  (listed)"), "{out:?}");
    assert!(out.stdout.contains("# oai: 3 listed (0s ago)"), "{out:?}");
    assert_eq!(srv.requests().len(), 2);
}

/// Anthropic's endpoint is asked with `x-api-key` and `anthropic-version`, and its
/// pages are followed (`has_more`, `after_id`).
#[test]
fn anthropic_models_endpoint_is_paged() {
    let srv = JsonServer::start(|req: &SeenRequest| {
        if req.path.contains("after_id=claude-b") {
            (
                200,
                json!({"data": [{"type": "model", "id": "claude-c", "display_name": "C",
                    "created_at": "2025-01-01T00:00:00Z"}],
                    "has_more": false, "first_id": "claude-c", "last_id": "claude-c"}),
            )
        } else {
            (
                200,
                json!({"data": [
                    {"type": "model", "id": "claude-a", "display_name": "A", "created_at": "2025-01-01T00:00:00Z"},
                    {"type": "model", "id": "claude-b", "display_name": "B", "created_at": "2025-01-01T00:00:00Z"}],
                    "has_more": true, "first_id": "claude-a", "last_id": "claude-b"}),
            )
        }
    });
    let config = format!(
        "[providers.anth]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MODELS_TEST_KEY\"\nmodel = \"claude-a\"\nlist_models = true\n",
        srv.origin
    );
    let d = Daemon::builder()
        .env("MODELS_TEST_KEY", KEY)
        .config(&config)
        .start();
    let mut c = d.connect();
    let r = c.call_ok("agentd/models", json!({}));
    assert_eq!(
        of(&r, "anth"),
        vec![
            pair("claude-a", "model"),
            pair("claude-b", "listed"),
            pair("claude-c", "listed"),
        ],
        "{r}"
    );
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].path, "/v1/models?limit=1000");
    assert_eq!(reqs[1].path, "/v1/models?limit=1000&after_id=claude-b");
    for q in &reqs {
        assert_eq!(q.header("x-api-key"), Some(KEY));
        assert_eq!(q.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(q.header("authorization"), None);
    }
}

/// A listing that fails keeps the configured models and says why (the provider's own
/// message, never the key); a failure is not kept, so the next call asks again and
/// picks up the recovered endpoint. A server that is not there and a missing key fail
/// the same way, and the daemon goes on serving.
#[test]
fn a_failed_listing_keeps_the_configured_models_and_says_why() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = calls.clone();
    let srv = JsonServer::start(move |_req: &SeenRequest| {
        if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            (
                401,
                json!({"error": {"message": format!("Incorrect API key provided: {KEY}"),
                    "type": "invalid_request_error", "code": "invalid_api_key"}}),
            )
        } else {
            (200, openai_list(&["qwen3:8b"]))
        }
    });
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone_port = gone.local_addr().unwrap().port();
    drop(gone);
    let config = format!(
        "[providers.local]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\napi_key_env = \"MODELS_TEST_KEY\"\nmodel = \"llama3.2\"\nlist_models = true\n\
         [providers.down]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:{gone_port}/v1\"\nmodel = \"d1\"\nlist_models = true\n\
         [providers.nokey]\nkind = \"openai-responses\"\nbase_url = \"{}/v1\"\napi_key_env = \"MODELS_TEST_UNSET\"\nmodel = \"n1\"\nlist_models = true\n",
        srv.origin, srv.origin
    );
    let d = Daemon::builder()
        .env("MODELS_TEST_KEY", KEY)
        .config(&config)
        .start();
    let mut c = d.connect();
    let r = c.call_ok("agentd/models", json!({}));
    assert_eq!(of(&r, "local"), vec![pair("llama3.2", "model")], "{r}");
    assert_eq!(of(&r, "down"), vec![pair("d1", "model")], "{r}");
    assert_eq!(of(&r, "nokey"), vec![pair("n1", "model")], "{r}");
    let why = listing(&r, "local")["error"].as_str().unwrap().to_string();
    assert!(
        why.contains("HTTP 401") && why.contains("Incorrect API key provided"),
        "{why}"
    );
    assert!(!r.to_string().contains(KEY), "the key leaked: {r}");
    let why = listing(&r, "down")["error"].as_str().unwrap();
    assert!(why.contains(&format!("127.0.0.1:{gone_port}")), "{why}");
    let why = listing(&r, "nokey")["error"].as_str().unwrap();
    assert!(why.contains("MODELS_TEST_UNSET is not set"), "{why}");

    let r = c.call_ok("agentd/models", json!({}));
    assert_eq!(
        of(&r, "local"),
        vec![pair("llama3.2", "model"), pair("qwen3:8b", "listed")],
        "{r}"
    );
    assert!(listing(&r, "local").get("error").is_none(), "{r}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    let out = d.agentctl(["models"]);
    out.assert_code(0);
    assert!(out.stdout.contains("# down: not listed: "), "{out:?}");
}
