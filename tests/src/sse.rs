//! Local stand-ins for LLM providers' HTTP endpoints: a one-thread HTTP/1.1 server that
//! answers each request with the next streamed (SSE) body, and the bodies of the wires.

use serde_json::Value;

/// A one-thread HTTP/1.1 server answering each request with the next SSE body, then
/// closing the connection; returns its base URL (ending in `/v1`) and the request bodies it saw.
pub fn sse_server(replies: Vec<String>) -> (String, std::thread::JoinHandle<Vec<Value>>) {
    use std::io::{BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for reply in replies {
            let (stream, _) = listener.accept().unwrap();
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let req = crate::http::read_request(&mut r).expect("a whole request");
            bodies.push(req.json());
            let mut w = stream;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            w.write_all(head.as_bytes()).unwrap();
            w.write_all(reply.as_bytes()).unwrap();
            w.flush().unwrap();
        }
        bodies
    });
    (base, h)
}

/// A Chat Completions stream: one `data:` line per chunk, then `[DONE]`.
pub fn chat_sse(chunks: &[Value]) -> String {
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

/// Named SSE events (`event: T` + `data: …`), as the Responses and Anthropic APIs send.
pub fn typed_sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// What [`MockProvider`] sends for one request.
pub enum Reply {
    /// A whole SSE body, then the connection closes.
    Complete(String),
    /// These SSE bytes (a stream cut short), then nothing until the client goes away:
    /// a provider still streaming when the daemon is killed.
    Hang(String),
    /// These SSE bytes, then the gate runs (it blocks until the test lets the answer
    /// go on), then the rest: a step a test catches mid-stream.
    Gated(String, Box<dyn FnOnce() + Send>, String),
}

type Handler = dyn Fn(usize, &Value) -> Reply + Send + Sync;

/// A provider endpoint that outlives daemons: every request is answered on its own
/// thread by `handler(n, body)` (n counts from 0), and every request body is recorded,
/// so a test can check what each provider call carried across crashes and restarts.
pub struct MockProvider {
    pub base: String,
    seen: std::sync::Arc<(std::sync::Mutex<Vec<Value>>, std::sync::Condvar)>,
}

impl MockProvider {
    pub fn start(handler: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static) -> MockProvider {
        use std::io::{BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen =
            std::sync::Arc::new((std::sync::Mutex::new(Vec::new()), std::sync::Condvar::new()));
        let handler: std::sync::Arc<Handler> = std::sync::Arc::new(handler);
        let shared = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, handler) = (shared.clone(), handler.clone());
                std::thread::spawn(move || {
                    let mut r = BufReader::new(stream.try_clone().unwrap());
                    let Some(req) = crate::http::read_request(&mut r) else {
                        return;
                    };
                    let body = req.json();
                    let n = {
                        let mut v = seen.0.lock().unwrap();
                        v.push(body.clone());
                        seen.1.notify_all();
                        v.len() - 1
                    };
                    let reply = handler(n, &body);
                    let mut w = stream;
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                    let _ = w.write_all(head.as_bytes());
                    match reply {
                        Reply::Complete(s) => {
                            let _ = w.write_all(s.as_bytes());
                            let _ = w.flush();
                        }
                        Reply::Gated(first, gate, rest) => {
                            let _ = w.write_all(first.as_bytes());
                            let _ = w.flush();
                            gate();
                            let _ = w.write_all(rest.as_bytes());
                            let _ = w.flush();
                        }
                        Reply::Hang(s) => {
                            let _ = w.write_all(s.as_bytes());
                            let _ = w.flush();
                            // Until the client closes (a killed daemon's socket does).
                            let mut buf = [0u8; 256];
                            while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
                        }
                    }
                });
            }
        });
        MockProvider { base, seen }
    }

    /// The request bodies so far.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.0.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived; returns them all, or panics naming
    /// what it waited for.
    pub fn wait_requests(&self, n: usize, timeout: std::time::Duration) -> Vec<Value> {
        let (lock, cv) = &*self.seen;
        let guard = lock.lock().unwrap();
        let (guard, res) = cv
            .wait_timeout_while(guard, timeout, |v| v.len() < n)
            .unwrap();
        assert!(
            !res.timed_out(),
            "the mock provider got {} requests, waited for {n}",
            guard.len()
        );
        guard.clone()
    }

    /// A config naming this endpoint as the default provider `mock` (`openai-chat`).
    pub fn config(&self) -> String {
        format!(
            "default_provider = \"mock\"\n[providers.mock]\nkind = \"openai-chat\"\nbase_url = \"{}\"\nmodel = \"m1\"\ncontext_window = 100000\n",
            self.base
        )
    }
}

/// A Chat Completions answer `text`, finished.
pub fn chat_text(text: &str) -> String {
    chat_sse(&[
        serde_json::json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}),
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}}),
    ])
}

/// A Chat Completions step asking for `calls` (`(id, tool, args)`), finished.
pub fn chat_tools(calls: &[(&str, &str, Value)]) -> String {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (id, name, args))| {
            serde_json::json!({"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    chat_sse(&[
        serde_json::json!({"model": "m1", "choices": [{"index": 0, "delta": {"tool_calls": tool_calls}}]}),
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}}),
    ])
}

/// The rest of an answer [`chat_partial`] began: `text`, finished.
pub fn chat_rest(text: &str) -> String {
    let mut s = chat_partial(text);
    s.push_str(&chat_sse(&[
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}}),
    ]));
    s
}

/// The first chunk of an answer that never finishes (for [`Reply::Hang`]).
pub fn chat_partial(text: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": text}}]})
    )
}

/// One request a [`JsonServer`] answered: its request line's method and path (with the
/// query), its headers (names lowercased) and its body.
pub type SeenRequest = crate::http::HttpRequest;

type JsonHandler = dyn Fn(&SeenRequest) -> (u16, Value) + Send + Sync;

/// A plain JSON endpoint (a provider's models list): every request is answered by
/// `handler(request)` with a status and a JSON body, and recorded.
pub struct JsonServer {
    /// `http://127.0.0.1:PORT` (no path).
    pub origin: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<SeenRequest>>>,
}

impl JsonServer {
    pub fn start(handler: impl Fn(&SeenRequest) -> (u16, Value) + Send + Sync + 'static) -> Self {
        use std::io::{BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let handler: std::sync::Arc<JsonHandler> = std::sync::Arc::new(handler);
        let shared = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, handler) = (shared.clone(), handler.clone());
                std::thread::spawn(move || {
                    let mut r = BufReader::new(stream.try_clone().unwrap());
                    let Some(req) = crate::http::read_request(&mut r) else {
                        return;
                    };
                    let (status, answer) = handler(&req);
                    seen.lock().unwrap().push(req);
                    let text = answer.to_string();
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        text.len()
                    );
                    let mut w = stream;
                    let _ = w.write_all(head.as_bytes());
                    let _ = w.write_all(text.as_bytes());
                    let _ = w.flush();
                });
            }
        });
        JsonServer { origin, seen }
    }

    /// The requests answered so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

/// The text of a Chat Completions message (a string, or text parts).
pub fn message_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The last user message of a Chat Completions request, and the tool results after it
/// (in order).
pub fn last_user_and_tool_results(body: &Value) -> (String, Vec<String>) {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let at = msgs.iter().rposition(|m| m["role"] == "user");
    let user = at.map(|i| message_text(&msgs[i])).unwrap_or_default();
    let tools = msgs
        .iter()
        .skip(at.map_or(0, |i| i + 1))
        .filter(|m| m["role"] == "tool")
        .map(message_text)
        .collect();
    (user, tools)
}

/// The tool names a Chat Completions request offers.
pub fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}
