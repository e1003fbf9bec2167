//! The real peer agents the tests run (Claude Code, Codex, pi, pinned in
//! `tests/peers/package.json` and installed by `.ci/peers.sh`), and a local model mock
//! that answers each of them in its provider's own wire format: Anthropic Messages SSE,
//! OpenAI Responses SSE, OpenAI Chat Completions SSE.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// `tests/peers/node_modules/.bin/NAME`, or a panic naming the missing peer and the
/// script that installs it.
pub fn bin(name: &str) -> PathBuf {
    let p = peers_dir().join("node_modules/.bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run .ci/peers.sh (npm ci of tests/peers)",
        p.display()
    );
    p
}

/// A command running the peer `name` with a clean environment for it: `HOME` as given,
/// none of the peers' own directory overrides inherited, and the pinned node 22 of
/// `tests/peers/node22` first on `PATH` when `.ci/peers.sh` installed it (pi needs
/// node >= 22.19). Panics, naming it, when the node the peer would run under is older.
pub fn command(name: &str, home: &Path) -> Command {
    let mut cmd = Command::new(bin(name));
    let node22 = peers_dir().join("node22/node_modules/.bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![];
    if node22.join("node").exists() {
        dirs.push(node22);
    }
    dirs.extend(std::env::split_paths(&path));
    let path = std::env::join_paths(dirs).unwrap();
    if name == "pi" {
        let v = Command::new("node")
            .arg("-p")
            .arg("process.versions.node")
            .env("PATH", &path)
            .output()
            .expect("run node (needed by pi)");
        let v = String::from_utf8_lossy(&v.stdout).trim().to_string();
        let parts: Vec<u32> = v.split('.').filter_map(|p| p.parse().ok()).collect();
        assert!(
            parts.len() >= 2 && (parts[0] > 22 || (parts[0] == 22 && parts[1] >= 19)),
            "pi needs node >= 22.19 but PATH has node {v}: run .ci/peers.sh (it installs tests/peers/node22)"
        );
    }
    for var in [
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "PI_CODING_AGENT_DIR",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("PATH", path)
        .env("HOME", home)
        .stdin(std::process::Stdio::null());
    cmd
}

/// One HTTP request the mock saw.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// What the mock answers: status, content type, body.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn sse(body: String) -> Response {
        Response {
            status: 200,
            content_type: "text/event-stream",
            body,
        }
    }

    pub fn json(v: Value) -> Response {
        Response {
            status: 200,
            content_type: "application/json",
            body: v.to_string(),
        }
    }

    pub fn not_found() -> Response {
        Response {
            status: 404,
            content_type: "application/json",
            body: json!({"error": {"message": "not found"}}).to_string(),
        }
    }
}

type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// A model endpoint on 127.0.0.1: every request (any method and path) is answered on its
/// own thread by the handler and recorded, so a test can read what a peer sent.
pub struct ModelMock {
    /// `http://127.0.0.1:PORT` (no path).
    pub origin: String,
    seen: Arc<(Mutex<Vec<Request>>, Condvar)>,
}

impl ModelMock {
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> ModelMock {
        use std::io::{BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let shared = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, handler) = (shared.clone(), handler.clone());
                std::thread::spawn(move || {
                    let mut r = BufReader::new(stream.try_clone().unwrap());
                    let mut w = stream;
                    // Keep-alive: one request after another on the connection.
                    loop {
                        let Some(http) = crate::http::read_request(&mut r) else {
                            return;
                        };
                        let req = Request {
                            body: http.json(),
                            method: http.method,
                            path: http.path,
                        };
                        let resp = handler(&req);
                        {
                            let mut v = seen.0.lock().unwrap();
                            v.push(req);
                            seen.1.notify_all();
                        }
                        let reason = if resp.status == 200 { "OK" } else { "Error" };
                        let head = format!(
                            "HTTP/1.1 {} {reason}\r\ncontent-type: {}\r\ncontent-length: {}\r\n\r\n",
                            resp.status,
                            resp.content_type,
                            resp.body.len()
                        );
                        if w.write_all(head.as_bytes()).is_err()
                            || w.write_all(resp.body.as_bytes()).is_err()
                            || w.flush().is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        ModelMock { origin, seen }
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Request> {
        self.seen.0.lock().unwrap().clone()
    }

    /// Waits until a request matching `pred` arrived and returns it, or panics naming what
    /// it saw.
    pub fn wait_for(&self, pred: impl Fn(&Request) -> bool, timeout: Duration) -> Request {
        let (lock, cv) = &*self.seen;
        let guard = lock.lock().unwrap();
        let (guard, _) = cv
            .wait_timeout_while(guard, timeout, |v| !v.iter().any(&pred))
            .unwrap();
        match guard.iter().find(|r| pred(r)) {
            Some(r) => r.clone(),
            None => panic!(
                "the model mock got no such request within {timeout:?}; it saw {:?}",
                guard
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect::<Vec<_>>()
            ),
        }
    }
}

/// One Anthropic Messages answer `text` as the streamed SSE events the API sends.
pub fn anthropic_text(text: &str, model: &str) -> String {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_mock_1", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ];
    crate::sse::typed_sse(&events)
}

/// The same answer as a non-streamed Anthropic Messages response.
pub fn anthropic_text_json(text: &str, model: &str) -> Value {
    json!({"id": "msg_mock_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 12}})
}

/// One OpenAI Responses answer `text` as the streamed SSE events the API sends.
pub fn responses_text(text: &str) -> String {
    let item = json!({"type": "message", "id": "msg_mock_1", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let events = [
        json!({"type": "response.created", "response": {"id": "resp_mock_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "message", "id": "msg_mock_1", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_mock_1", "output_index": 0,
            "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp_mock_1", "status": "completed",
            "output": [item], "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 112}}}),
    ];
    crate::sse::typed_sse(&events)
}

/// One OpenAI Chat Completions answer `text`, streamed.
pub fn chat_text(text: &str) -> String {
    crate::sse::chat_sse(&[
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]}),
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112}}),
    ])
}
