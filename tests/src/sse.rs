//! Local stand-ins for LLM providers' HTTP endpoints: a one-thread HTTP/1.1 server that
//! answers each request with the next streamed (SSE) body, and the bodies of the wires.

use serde_json::Value;

/// A one-thread HTTP/1.1 server answering each request with the next SSE body, then
/// closing the connection; returns its base URL (ending in `/v1`) and the request bodies it saw.
pub fn sse_server(replies: Vec<String>) -> (String, std::thread::JoinHandle<Vec<Value>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for reply in replies {
            let (stream, _) = listener.accept().unwrap();
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let l = line.trim_end();
                if l.is_empty() {
                    break;
                }
                if let Some((k, v)) = l.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            bodies.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
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
