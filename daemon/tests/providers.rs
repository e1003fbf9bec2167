//! Providers against a real local HTTP/1.1 server that speaks each wire format.
//!
//! The server writes chunked `text/event-stream` bodies, one HTTP chunk per piece, with
//! pieces cut at awkward places (inside `data:` lines, inside multi-byte UTF-8
//! characters), so the tests exercise the same byte boundaries a real network produces.

use agentd::provider::dialect;
use agentd::provider::{
    OutputItem, Provider, ProviderConfig, ProviderFailure, ProviderKind, ProviderRequest,
    ProviderResponse, StreamEvent,
};
use agentd_proto::replay::{Dialect, ReplayItem, ToolSpec};
use agentd_proto::ErrorKind;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// The env var whose value the tests use as an API key: cargo sets it for test runs,
/// so no test has to mutate the process environment.
const KEY_VAR: &str = "CARGO_MANIFEST_DIR";

// ---------------------------------------------------------------- the test server

#[derive(Clone)]
enum End {
    /// Terminating chunk; the connection stays usable.
    Complete,
    /// Close the socket without the terminating chunk.
    Cut,
    /// Send nothing more; wait for the client to go away.
    Hang,
}

#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    pieces: Vec<Vec<u8>>,
    end: End,
}

impl Reply {
    fn sse(text: &str) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            pieces: awkward_pieces(text.as_bytes()),
            end: End::Complete,
        }
    }
    fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            pieces: vec![body.as_bytes().to_vec()],
            end: End::Complete,
        }
    }
    fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
    fn end(mut self, end: End) -> Reply {
        self.end = end;
        self
    }
}

/// Cuts `bytes` into pieces of 1, 3, 7, 2, 13… bytes, and additionally inside every
/// multi-byte UTF-8 character.
fn awkward_pieces(bytes: &[u8]) -> Vec<Vec<u8>> {
    let sizes = [1usize, 3, 7, 2, 13, 5];
    let mut cuts = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < bytes.len() {
        pos += sizes[i % sizes.len()];
        i += 1;
        cuts.push(pos.min(bytes.len()));
    }
    for (j, b) in bytes.iter().enumerate() {
        // The byte after a leading byte of a multi-byte char: cutting there splits it.
        if *b >= 0xC0 {
            cuts.push(j + 1);
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts {
        if c > start {
            out.push(bytes[start..c].to_vec());
            start = c;
        }
    }
    out
}

#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Server {
    base: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    /// Notified when a client closes a connection the server was holding open.
    hung_closed: Arc<Notify>,
}

impl Server {
    async fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let hung_closed = Arc::new(Notify::new());
        let (reqs, closed) = (requests.clone(), hung_closed.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                sock.set_nodelay(true).unwrap();
                let (reqs, closed, replies) = (reqs.clone(), closed.clone(), replies.clone());
                tokio::spawn(handle(sock, reqs, closed, replies));
            }
        });
        Server {
            base,
            requests,
            hung_closed,
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn handle(
    mut sock: TcpStream,
    reqs: Arc<Mutex<Vec<Recorded>>>,
    closed: Arc<Notify>,
    replies: Vec<Reply>,
) {
    let mut buf = Vec::new();
    loop {
        // Read one request: head up to CRLFCRLF, then content-length bytes.
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let mut tmp = [0u8; 4096];
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .unwrap_or("")
            .split(' ')
            .nth(1)
            .unwrap_or("")
            .to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let mut tmp = [0u8; 4096];
            match sock.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        let body: Value =
            serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or(Value::Null);
        buf.drain(..head_end + len);
        let index = {
            let mut r = reqs.lock().unwrap();
            r.push(Recorded {
                path,
                headers,
                body,
            });
            r.len() - 1
        };
        let reply = replies[index.min(replies.len() - 1)].clone();
        let mut head = format!(
            "HTTP/1.1 {} X\r\ntransfer-encoding: chunked\r\n",
            reply.status
        );
        for (k, v) in &reply.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        if sock.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for piece in &reply.pieces {
            let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
            chunk.extend_from_slice(piece);
            chunk.extend_from_slice(b"\r\n");
            if sock.write_all(&chunk).await.is_err() || sock.flush().await.is_err() {
                return;
            }
        }
        match reply.end {
            End::Complete => {
                if sock.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
            End::Cut => return,
            End::Hang => {
                let mut tmp = [0u8; 1024];
                while let Ok(n) = sock.read(&mut tmp).await {
                    if n == 0 {
                        break;
                    }
                }
                closed.notify_one();
                return;
            }
        }
    }
}

// ---------------------------------------------------------------- helpers

fn config(kind: ProviderKind, base: &str) -> ProviderConfig {
    let mut c = ProviderConfig::new("test", kind);
    c.base_url = Some(match kind {
        ProviderKind::Anthropic => base.to_string(),
        _ => format!("{base}/v1"),
    });
    c.api_key_env = Some(KEY_VAR.into());
    c.model = Some("m1".into());
    c
}

fn key() -> String {
    std::env::var(KEY_VAR).expect("cargo sets CARGO_MANIFEST_DIR for test runs")
}

fn items() -> Vec<ReplayItem> {
    vec![
        ReplayItem::Developer {
            text: "Workspace: /w".into(),
        },
        ReplayItem::User {
            text: "say hi, ünïcode".into(),
            images: Vec::new(),
        },
    ]
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "shell".into(),
        description: "Run a command".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }]
}

fn request() -> ProviderRequest {
    ProviderRequest {
        model: String::new(),
        items: items(),
        rendered: None,
        tools: tools(),
        max_output_tokens: Some(100),
        reasoning_effort: None,
    }
}

struct Outcome {
    result: Result<ProviderResponse, ProviderFailure>,
    events: Vec<StreamEvent>,
}

impl Outcome {
    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
    fn reasoning(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ReasoningDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
    fn ok(&self) -> &ProviderResponse {
        match &self.result {
            Ok(r) => r,
            Err(f) => panic!("expected success, got {f}"),
        }
    }
    fn err(&self) -> &ProviderFailure {
        match &self.result {
            Ok(r) => panic!("expected failure, got {r:?}"),
            Err(f) => f,
        }
    }
}

async fn run(cfg: ProviderConfig, req: ProviderRequest) -> Outcome {
    let provider = Provider::new(cfg).unwrap();
    let (tx, mut rx) = mpsc::channel(1024);
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        provider.stream(req, tx, CancellationToken::new()),
    )
    .await
    .expect("provider call finished");
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    Outcome { result, events }
}

fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

fn chat_sse(chunks: &[Value]) -> String {
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

// ---------------------------------------------------------------- openai-responses

fn responses_text_stream() -> String {
    sse(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": "r1"}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "m1", "role": "assistant", "content": []}}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Héllo, "}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "wörld 😀"}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "m1", "role": "assistant", "content": [{"type": "output_text", "text": "Héllo, wörld 😀"}]}}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": "r1", "model": "m1-2025", "status": "completed", "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 26}}}),
        ),
    ])
}

#[tokio::test]
async fn responses_streams_text_and_sends_the_rendered_request() {
    let server = Server::start(vec![Reply::sse(&responses_text_stream())]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    let resp = out.ok();
    assert_eq!(out.text(), "Héllo, wörld 😀");
    assert!(
        out.events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
            .count()
            >= 2
    );
    assert_eq!(
        resp.output,
        vec![OutputItem::Message {
            text: "Héllo, wörld 😀".into()
        }]
    );
    assert_eq!(resp.model, "m1-2025");
    assert_eq!(resp.stop_reason.as_deref(), Some("completed"));
    assert_eq!(
        (
            resp.usage.input_tokens,
            resp.usage.cached_tokens,
            resp.usage.output_tokens,
            resp.usage.reasoning_tokens,
            resp.usage.total_tokens
        ),
        (20, 4, 6, 2, 26)
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/responses");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {}", key()).as_str())
    );
    assert_eq!(r.body["stream"], json!(true));
    assert_eq!(r.body["store"], json!(false));
    assert_eq!(r.body["model"], json!("m1"));
    assert_eq!(r.body["max_output_tokens"], json!(100));
    assert_eq!(
        r.body["input"],
        dialect::render(&items(), Dialect::Responses)
    );
    assert_eq!(
        r.body["tools"],
        json!([{"type": "function", "name": "shell", "description": "Run a command", "parameters": tools()[0].parameters}])
    );
}

#[tokio::test]
async fn responses_streams_a_tool_call_with_split_arguments_in_output_order() {
    let text = sse(&[
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        ),
        (
            "response.reasoning_summary_text.delta",
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "Need to list."}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need to list."}], "encrypted_content": "enc"}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_A", "name": "shell", "arguments": ""}}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"comm"}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "and\":\"ls é"}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "\"}"}),
        ),
        // A second call whose arguments are not JSON: kept raw for the tool to refuse.
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc_2", "call_id": "call_B", "name": "shell", "arguments": ""}}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{oops"}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 5, "output_tokens": 3}}}),
        ),
    ]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    let resp = out.ok();
    assert_eq!(out.reasoning(), "Need to list.");
    assert_eq!(resp.output.len(), 3);
    match &resp.output[0] {
        OutputItem::Reasoning { item } => assert_eq!(item["encrypted_content"], "enc"),
        other => panic!("expected reasoning first, got {other:?}"),
    }
    assert_eq!(
        resp.output[1],
        OutputItem::ToolCall {
            call_id: "call_A".into(),
            name: "shell".into(),
            args: json!({"command": "ls é"})
        }
    );
    assert_eq!(
        resp.output[2],
        OutputItem::ToolCall {
            call_id: "call_B".into(),
            name: "shell".into(),
            args: json!({"_raw": "{oops"})
        }
    );
    assert_eq!(resp.usage.total_tokens, 8);
    assert_eq!(resp.model, "m1");
}

#[tokio::test]
async fn responses_multiline_data_is_joined() {
    // One JSON object spread over three `data:` lines (joined with "\n", valid JSON).
    let text = "event: response.output_text.delta\ndata: {\"type\": \"response.output_text.delta\",\ndata: \"output_index\": 0,\ndata: \"delta\": \"joined\"}\n\n".to_string()
        + &sse(&[("response.completed", json!({"type": "response.completed", "response": {"status": "completed"}}))]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(
        out.ok().output,
        vec![OutputItem::Message {
            text: "joined".into()
        }]
    );
    assert_eq!(out.text(), "joined");
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried_then_succeeds() {
    let server = Server::start(vec![
        Reply::status(
            429,
            r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#,
        )
        .header("retry-after", "0"),
        Reply::sse(&responses_text_stream()),
    ])
    .await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(out.text(), "Héllo, wörld 😀");
    assert!(out.ok().output.len() == 1);
    assert_eq!(server.requests().len(), 2);
    assert!(out
        .events
        .iter()
        .any(|e| matches!(e, StreamEvent::Status(s) if s.contains("rate_limited"))));
}

#[tokio::test]
async fn rate_limit_that_persists_fails_as_rate_limited() {
    let server = Server::start(vec![Reply::status(
        429,
        r#"{"error":{"message":"slow down"}}"#,
    )
    .header("retry-after", "0")])
    .await;
    let mut cfg = config(ProviderKind::OpenaiResponses, &server.base);
    cfg.max_retries = Some(1);
    let out = run(cfg, request()).await;
    assert_eq!(out.err().kind(), ErrorKind::RateLimited);
    assert_eq!(server.requests().len(), 2);
}

/// A `retry-after` too large to represent (or to wait for) is a clean `rate_limited`
/// failure with no retry, never a panic in the duration arithmetic.
#[tokio::test]
async fn absurd_retry_after_fails_cleanly_without_retrying() {
    for (header, value) in [
        ("retry-after-ms", "1e30"),
        ("retry-after-ms", "18446744073709551616000"),
        ("retry-after", "1e300"),
    ] {
        let server = Server::start(vec![Reply::status(
            429,
            r#"{"error":{"message":"slow down"}}"#,
        )
        .header(header, value)])
        .await;
        let out = run(
            config(ProviderKind::OpenaiResponses, &server.base),
            request(),
        )
        .await;
        let f = out.err();
        assert_eq!(f.kind(), ErrorKind::RateLimited, "{header}: {value}");
        assert_eq!(server.requests().len(), 1, "{header}: {value}");
    }
}

#[tokio::test]
async fn server_error_is_retried_then_fails_as_provider_error() {
    let server = Server::start(vec![Reply::status(
        500,
        r#"{"error":{"message":"The server had an error"}}"#,
    )
    .header("retry-after", "0")])
    .await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::ProviderError);
    assert!(f.error.message.contains("HTTP 500"), "{}", f.error.message);
    assert!(f.error.message.contains("The server had an error"));
    // Default max_retries = 2: one call and two retries.
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn connection_cut_mid_stream_is_network_with_partial_text() {
    let text = sse(&[
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "partial ánswer"}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "; more"}),
        ),
    ]);
    let server = Server::start(vec![Reply::sse(&text).end(End::Cut)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::Network);
    assert_eq!(f.partial_text, "partial ánswer; more");
    // Text was already shown: no retry.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn connection_cut_before_any_delta_is_retried() {
    let early = sse(&[(
        "response.created",
        json!({"type": "response.created", "response": {}}),
    )]);
    let server = Server::start(vec![
        Reply::sse(&early).end(End::Cut),
        Reply::sse(&responses_text_stream()),
    ])
    .await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(out.text(), "Héllo, wörld 😀");
    assert!(out.result.is_ok());
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn idle_stream_times_out() {
    let text = sse(&[(
        "response.output_text.delta",
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "wait"}),
    )]);
    let server = Server::start(vec![Reply::sse(&text).end(End::Hang)]).await;
    let mut cfg = config(ProviderKind::OpenaiResponses, &server.base);
    cfg.idle_timeout_s = Some(1);
    let started = Instant::now();
    let out = run(cfg, request()).await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::Timeout);
    assert_eq!(f.partial_text, "wait");
    assert!(f.error.message.contains("idle_timeout_s"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn overall_timeout_ends_a_stream_that_never_finishes() {
    let text = sse(&[(
        "response.output_text.delta",
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "slow"}),
    )]);
    let server = Server::start(vec![Reply::sse(&text).end(End::Hang)]).await;
    let mut cfg = config(ProviderKind::OpenaiResponses, &server.base);
    cfg.timeout_s = Some(1);
    let started = Instant::now();
    let out = run(cfg, request()).await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::Timeout);
    assert!(
        f.error.message.contains("timeout_s = 1s"),
        "{}",
        f.error.message
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn context_length_errors_are_context_overflow() {
    let server = Server::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
    )])
    .await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(out.err().kind(), ErrorKind::ContextOverflow);
    assert_eq!(server.requests().len(), 1);

    // Also when reported inside the stream.
    let text = sse(&[(
        "response.failed",
        json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "context_length_exceeded", "message": "too long"}}}),
    )]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(out.err().kind(), ErrorKind::ContextOverflow);
}

#[tokio::test]
async fn failed_and_error_events_are_provider_errors() {
    let text = sse(&[(
        "response.failed",
        json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "invalid_prompt", "message": "bad prompt"}}}),
    )]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(out.err().kind(), ErrorKind::ProviderError);
    assert!(out.err().error.message.contains("bad prompt"));

    let text = sse(&[(
        "error",
        json!({"type": "error", "code": "invalid_request", "message": "nope", "param": null}),
    )]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    assert_eq!(out.err().kind(), ErrorKind::ProviderError);
    assert!(out.err().error.message.contains("nope"));
}

#[tokio::test]
async fn garbage_data_is_a_provider_error() {
    let server = Server::start(vec![Reply::sse("data: this is not json\n\n")]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::ProviderError);
    assert!(f.error.message.contains("not JSON"), "{}", f.error.message);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn cancel_mid_stream_interrupts_promptly_and_closes_the_connection() {
    let text = sse(&[(
        "response.output_text.delta",
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "first words"}),
    )]);
    let server = Server::start(vec![Reply::sse(&text).end(End::Hang)]).await;
    let provider = Provider::new(config(ProviderKind::OpenaiResponses, &server.base)).unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let closed = server.hung_closed.clone();
    let call = tokio::spawn({
        let cancel = cancel.clone();
        async move { provider.stream(request(), tx, cancel).await }
    });
    // Wait until the delta has arrived, then interrupt.
    let mut seen = String::new();
    while seen != "first words" {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
        {
            Some(StreamEvent::TextDelta(t)) => seen.push_str(&t),
            Some(_) => {}
            None => panic!("stream ended early"),
        }
    }
    let started = Instant::now();
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    let f = result.unwrap_err();
    assert_eq!(f.kind(), ErrorKind::Interrupted);
    assert_eq!(f.partial_text, "first words");
    // The server sees the HTTP connection go away.
    tokio::time::timeout(Duration::from_secs(2), closed.notified())
        .await
        .expect("connection closed");
}

#[tokio::test]
async fn missing_api_key_names_the_variable_and_sends_nothing() {
    let server = Server::start(vec![Reply::sse(&responses_text_stream())]).await;
    let mut cfg = config(ProviderKind::OpenaiResponses, &server.base);
    cfg.api_key_env = Some("AGENTD_TEST_SURELY_UNSET_KEY_VAR".into());
    let out = run(cfg, request()).await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::InvalidArgs);
    assert!(
        f.error.message.contains("AGENTD_TEST_SURELY_UNSET_KEY_VAR"),
        "{}",
        f.error.message
    );
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn auth_failure_never_echoes_the_key() {
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {}","code":"invalid_api_key"}}}}"#,
        key()
    );
    let server = Server::start(vec![Reply::status(401, &body)]).await;
    let out = run(
        config(ProviderKind::OpenaiResponses, &server.base),
        request(),
    )
    .await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::ProviderError);
    assert!(f.error.message.contains(KEY_VAR));
    let shown = serde_json::to_string(&f.error).unwrap();
    assert!(!shown.contains(&key()), "{shown}");
}

// ---------------------------------------------------------------- openai-chat

#[tokio::test]
async fn chat_streams_text_and_parallel_tool_calls() {
    let mut text = chat_sse(&[
        json!({"model": "llama3", "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "hmm"}}]}),
        json!({"model": "llama3", "choices": [{"index": 0, "delta": {"content": "Lööking"}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "shell", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "list_dir", "arguments": "{\"pa"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\":"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "th\":\".\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 3}}}),
    ]);
    // Multi-line data in the chat stream too: a chunk split over two `data:` lines.
    text = "data: {\"choices\":[{\"index\":0,\ndata: \"delta\":{\"content\":\"» \"}}]}\n\n"
        .to_string()
        + &text;
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(config(ProviderKind::OpenaiChat, &server.base), request()).await;
    let resp = out.ok();
    assert_eq!(out.text(), "» Lööking");
    assert_eq!(out.reasoning(), "hmm");
    assert_eq!(resp.model, "llama3");
    assert_eq!(resp.stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        resp.output[1..],
        [
            OutputItem::Message {
                text: "» Lööking".into()
            },
            OutputItem::ToolCall {
                call_id: "call_1".into(),
                name: "shell".into(),
                args: json!({"command": "ls"})
            },
            OutputItem::ToolCall {
                call_id: "call_2".into(),
                name: "list_dir".into(),
                args: json!({"path": "."})
            },
        ]
    );
    assert!(matches!(resp.output[0], OutputItem::Reasoning { .. }));
    assert_eq!(
        (
            resp.usage.input_tokens,
            resp.usage.cached_tokens,
            resp.usage.output_tokens,
            resp.usage.total_tokens
        ),
        (10, 3, 5, 15)
    );

    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.body["stream"], json!(true));
    assert_eq!(r.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(r.body["messages"], dialect::render(&items(), Dialect::Chat));
    assert_eq!(r.body["tools"][0]["function"]["name"], "shell");
}

#[tokio::test]
async fn chat_context_overflow_and_no_key_provider() {
    let server = Server::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.","type":"invalid_request_error"}}"#,
    )])
    .await;
    let mut cfg = config(ProviderKind::OpenaiChat, &server.base);
    cfg.api_key_env = None;
    let out = run(cfg, request()).await;
    assert_eq!(out.err().kind(), ErrorKind::ContextOverflow);
    let r = &server.requests()[0];
    assert_eq!(r.header("authorization"), None);
}

#[tokio::test]
async fn chat_stream_without_finish_is_network() {
    let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half\"}}]}\n\n";
    let server = Server::start(vec![Reply::sse(text)]).await;
    let out = run(config(ProviderKind::OpenaiChat, &server.base), request()).await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::Network);
    assert_eq!(f.partial_text, "half");
}

// ---------------------------------------------------------------- anthropic

#[tokio::test]
async fn anthropic_streams_thinking_text_and_tool_use() {
    let text = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-x", "usage": {"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me thïnk."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "I'll list "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "fïles."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\".\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(config(ProviderKind::Anthropic, &server.base), request()).await;
    let resp = out.ok();
    assert_eq!(out.text(), "I'll list fïles.");
    assert_eq!(out.reasoning(), "Let me thïnk.");
    assert_eq!(
        resp.output,
        vec![
            OutputItem::Reasoning {
                item: json!({"type": "thinking", "thinking": "Let me thïnk.", "signature": "sig=="})
            },
            OutputItem::Message {
                text: "I'll list fïles.".into()
            },
            OutputItem::ToolCall {
                call_id: "toolu_1".into(),
                name: "list_dir".into(),
                args: json!({"path": "."})
            },
        ]
    );
    assert_eq!(resp.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(resp.model, "claude-x");
    assert_eq!(
        (
            resp.usage.input_tokens,
            resp.usage.cached_tokens,
            resp.usage.output_tokens,
            resp.usage.total_tokens
        ),
        (20, 8, 30, 50)
    );

    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(key().as_str()));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None);
    let rendered = dialect::render(&items(), Dialect::Anthropic);
    assert_eq!(r.body["system"], rendered["system"]);
    assert_eq!(r.body["messages"], rendered["messages"]);
    assert_eq!(r.body["stream"], json!(true));
    assert_eq!(r.body["max_tokens"], json!(100));
    assert_eq!(r.body["tools"][0]["input_schema"], tools()[0].parameters);
}

#[tokio::test]
async fn anthropic_prompt_too_long_and_stream_errors() {
    let server = Server::start(vec![Reply::status(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
    )])
    .await;
    let out = run(config(ProviderKind::Anthropic, &server.base), request()).await;
    assert_eq!(out.err().kind(), ErrorKind::ContextOverflow);

    let text = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "so far"}}),
        ),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let server = Server::start(vec![Reply::sse(&text)]).await;
    let out = run(config(ProviderKind::Anthropic, &server.base), request()).await;
    let f = out.err();
    assert_eq!(f.kind(), ErrorKind::ProviderError);
    assert_eq!(f.partial_text, "so far");
    // Text was shown, so the overloaded error is not retried.
    assert_eq!(server.requests().len(), 1);
}

// ---------------------------------------------------------------- script

fn examples_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn script_request(path: &std::path::Path, items: Vec<ReplayItem>) -> ProviderRequest {
    ProviderRequest {
        model: format!("script:{}", path.display()),
        items,
        rendered: None,
        tools: tools(),
        max_output_tokens: None,
        reasoning_effort: None,
    }
}

fn script_provider() -> ProviderConfig {
    ProviderConfig::new("script", ProviderKind::Script)
}

#[tokio::test]
async fn script_hello_plays_a_tool_call_then_an_answer_then_exhausts() {
    let path = examples_dir().join("hello.json");
    let mut history = vec![
        ReplayItem::Developer {
            text: "Workspace: /w".into(),
        },
        ReplayItem::User {
            text: "What files are in this workspace?".into(),
            images: Vec::new(),
        },
    ];
    let first = run(script_provider(), script_request(&path, history.clone())).await;
    let resp = first.ok().clone();
    let calls: Vec<_> = resp
        .output
        .iter()
        .filter_map(|o| match o {
            OutputItem::ToolCall {
                call_id,
                name,
                args,
            } => Some((call_id.clone(), name.clone(), args.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    let (call_id, name, args) = calls[0].clone();
    assert_eq!(name, "list_dir");
    assert_eq!(args, json!({"path": "."}));
    assert_eq!(resp.stop_reason.as_deref(), Some("tool_calls"));
    assert!(resp.usage.input_tokens > 0);
    // The same request plays the same step, with the same ids (stateless).
    let again = run(script_provider(), script_request(&path, history.clone())).await;
    assert_eq!(again.ok(), &resp);

    for o in &resp.output {
        if let OutputItem::Message { text } = o {
            history.push(ReplayItem::Assistant { text: text.clone() });
        }
    }
    history.push(ReplayItem::FunctionCall {
        call_id: call_id.clone(),
        name,
        arguments: args.to_string(),
    });
    history.push(ReplayItem::FunctionCallOutput {
        call_id,
        output: "Cargo.toml\nsrc/".into(),
        ok: true,
        synthetic: false,
        images: Vec::new(),
    });
    let second = run(script_provider(), script_request(&path, history.clone())).await;
    let answer = match &second.ok().output[..] {
        [OutputItem::Message { text }] => text.clone(),
        other => panic!("expected a final message, got {other:?}"),
    };
    assert_eq!(second.text(), answer);
    assert!(second.events.len() > 1, "text streams in chunks");

    history.push(ReplayItem::Assistant { text: answer });
    let third = run(script_provider(), script_request(&path, history)).await;
    assert_eq!(
        third.ok().output,
        vec![OutputItem::Message {
            text: "(script exhausted)".into()
        }]
    );
}

#[tokio::test]
async fn script_slow_stream_is_interrupted_promptly() {
    let path = examples_dir().join("slow.json");
    let provider = Provider::new(script_provider()).unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let req = script_request(
        &path,
        vec![ReplayItem::User {
            text: "tell me a story".into(),
            images: Vec::new(),
        }],
    );
    let call = tokio::spawn({
        let cancel = cancel.clone();
        async move { provider.stream(req, tx, cancel).await }
    });
    let first = match tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
    {
        Some(StreamEvent::TextDelta(t)) => t,
        other => panic!("expected a text delta, got {other:?}"),
    };
    let started = Instant::now();
    cancel.cancel();
    let f = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(f.kind(), ErrorKind::Interrupted);
    assert!(f.partial_text.starts_with(&first));
}

#[tokio::test]
async fn script_error_steps_and_missing_script() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    std::fs::write(
        &path,
        r#"{"rules":[{"match":"overflow","steps":[{"error":{"kind":"context_overflow","message":"too big"}}]},
                     {"steps":[{"text":"abcdefghij","chunk_chars":4,"usage":{"input_tokens":7,"output_tokens":3}},{"text":"half","error":{"kind":"network","message":"cut"}}]}]}"#,
    )
    .unwrap();
    let out = run(
        script_provider(),
        script_request(
            &path,
            vec![ReplayItem::User {
                text: "overflow please".into(),
                images: Vec::new(),
            }],
        ),
    )
    .await;
    assert_eq!(out.err().kind(), ErrorKind::ContextOverflow);
    assert_eq!(out.err().error.message, "too big");

    let out = run(
        script_provider(),
        script_request(
            &path,
            vec![ReplayItem::User {
                text: "hi".into(),
                images: Vec::new(),
            }],
        ),
    )
    .await;
    assert_eq!(
        out.events,
        vec![
            StreamEvent::TextDelta("abcd".into()),
            StreamEvent::TextDelta("efgh".into()),
            StreamEvent::TextDelta("ij".into())
        ]
    );
    assert_eq!(
        (out.ok().usage.input_tokens, out.ok().usage.total_tokens),
        (7, 10)
    );

    let items = vec![
        ReplayItem::User {
            text: "hi".into(),
            images: Vec::new(),
        },
        ReplayItem::Assistant {
            text: "abcdefghij".into(),
        },
    ];
    let out = run(script_provider(), script_request(&path, items)).await;
    assert_eq!(out.err().kind(), ErrorKind::Network);
    assert_eq!(out.err().partial_text, "half");

    let missing = dir.path().join("nope.json");
    let out = run(script_provider(), script_request(&missing, vec![])).await;
    assert_eq!(out.err().kind(), ErrorKind::InvalidArgs);
    assert!(out.err().error.message.contains("nope.json"));
}
