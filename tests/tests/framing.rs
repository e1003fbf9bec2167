//! LSP-style `Content-Length` framing on the daemon's socket (docs/protocol.md#framing):
//! detected per connection from its first bytes, answered in the same framing, with
//! the same limits; bad headers cost only their own connection.

use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// A client speaking header framing, parsing the daemon's frames strictly: every
/// message must come as `Content-Length: N\r\n\r\n` + N bytes of JSON.
struct HeaderConn {
    s: UnixStream,
    buf: Vec<u8>,
    backlog: VecDeque<Value>,
    next_id: u64,
}

impl HeaderConn {
    fn connect(d: &Daemon) -> HeaderConn {
        HeaderConn {
            s: UnixStream::connect(d.socket()).expect("connect to the daemon's socket"),
            buf: Vec::new(),
            backlog: VecDeque::new(),
            next_id: 1,
        }
    }

    fn frame(msg: &Value) -> Vec<u8> {
        let body = msg.to_string();
        let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write to the daemon");
    }

    fn send(&mut self, msg: &Value) {
        let f = Self::frame(msg);
        self.send_raw(&f);
    }

    /// One whole frame already buffered, parsed; panics on anything that is not a frame.
    fn take_frame(&mut self) -> Option<Value> {
        let end = self.buf.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&self.buf[..end]).expect("UTF-8 headers");
        let len: usize = head
            .strip_prefix("Content-Length: ")
            .unwrap_or_else(|| panic!("not a header frame: {head:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("bad Content-Length in {head:?}"));
        if self.buf.len() < end + 4 + len {
            return None;
        }
        let body: Vec<u8> = self.buf.drain(..end + 4 + len).skip(end + 4).collect();
        Some(serde_json::from_slice(&body).expect("a JSON body"))
    }

    /// The next message within `timeout`; `Err(UnexpectedEof)` once the daemon closed.
    fn read(&mut self, timeout: Duration) -> io::Result<Option<Value>> {
        if let Some(v) = self.backlog.pop_front() {
            return Ok(Some(v));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.take_frame() {
                return Ok(Some(v));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.s.set_read_timeout(Some(left))?;
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => {
                    assert!(self.buf.is_empty(), "EOF inside a frame: {:?}", self.buf);
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    #[track_caller]
    fn next(&mut self) -> Value {
        self.read(T)
            .expect("the connection is open")
            .expect("a message within the timeout")
    }

    #[track_caller]
    fn wait_for(&mut self, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + T;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .read(left)
                .expect("the connection is open")
                .expect("the awaited message within the timeout");
            if pred(&v) {
                return v;
            }
        }
    }

    #[track_caller]
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + T;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .read(left)
                .expect("the connection is open")
                .unwrap_or_else(|| panic!("no response to {method}"));
            if v.get("method").is_none() && v["id"] == id {
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    #[track_caller]
    fn call_ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {r}"))
    }

    /// True when the daemon closes the connection within the timeout.
    fn closed(&mut self) -> bool {
        let deadline = Instant::now() + T;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read(left) {
                Err(_) => return true,
                Ok(None) => return false,
                Ok(Some(_)) => {}
            }
        }
    }
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .canonicalize()
        .expect("example script")
}

#[test]
fn both_framings_on_one_daemon_are_answered_in_their_own() {
    let d = Daemon::start();
    let mut h = HeaderConn::connect(&d);
    let r = h.call_ok("agentd/hello", json!({"client": "framing-test"}));
    assert_eq!(r["server"], "agentd");

    // An NDJSON client at the same time still gets lines.
    let mut n = d.connect();
    let r = n.call_ok("agentd/hello", json!({"client": "ndjson"}));
    assert_eq!(r["server"], "agentd");

    // Extra headers are allowed; header names are case-insensitive.
    let body =
        json!({"jsonrpc": "2.0", "id": 900, "method": "agentd/hello", "params": {}}).to_string();
    h.send_raw(
        format!(
            "content-type: application/vscode-jsonrpc; charset=utf-8\r\nCONTENT-LENGTH: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    // The first bytes of this connection were "Content-Length:", so header framing
    // holds for the rest of it even if a later frame begins with another header.
    let r = h.next();
    assert_eq!(r["id"], 900, "{r}");

    // Batches and notifications.
    h.send(&json!([
        {"jsonrpc": "2.0", "id": 10, "method": "agentd/hello", "params": {}},
        {"jsonrpc": "2.0", "method": "agentd/hello", "params": {}},
        {"jsonrpc": "2.0", "id": 11, "method": "agentd/nope", "params": {}}
    ]));
    let r = h.next();
    let arr = r.as_array().expect("a batch answer");
    assert_eq!(arr.len(), 2, "{r}");
    assert_eq!(arr[1]["error"]["code"], -32601, "{r}");
}

#[test]
fn frames_split_across_writes_and_packed_in_one_write_decode() {
    let d = Daemon::start();
    let mut h = HeaderConn::connect(&d);
    // Split inside the header name, inside the number, between header and body, and
    // inside the body; each piece is a separate write with the daemon reading between.
    let f = HeaderConn::frame(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "agentd/hello", "params": {"client": "split"}}),
    );
    for piece in [
        &f[..3],
        &f[3..16],
        &f[16..18],
        &f[18..22],
        &f[22..30],
        &f[30..],
    ] {
        h.send_raw(piece);
        // The daemon must not answer a partial frame.
        if piece.as_ptr() != f[30..].as_ptr() {
            assert!(
                h.read(Duration::from_millis(50)).unwrap().is_none(),
                "answered before the frame was whole"
            );
        }
    }
    let r = h.next();
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["result"]["server"], "agentd");

    // Three frames in one write.
    let mut packed = Vec::new();
    for id in 2..5 {
        packed.extend(HeaderConn::frame(
            &json!({"jsonrpc": "2.0", "id": id, "method": "agentd/hello", "params": {}}),
        ));
    }
    h.send_raw(&packed);
    let mut ids: Vec<u64> = (0..3).map(|_| h.next()["id"].as_u64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, vec![2, 3, 4]);

    // A body with multi-byte characters: Content-Length counts bytes.
    let r = h.call_ok("agentd/hello", json!({"client": "ünïcødé ✓"}));
    assert_eq!(r["server"], "agentd");
}

#[test]
fn bad_bodies_keep_the_connection_and_bad_headers_close_only_it() {
    let d = Daemon::start();
    let mut other = d.connect();

    // A well-framed body that is not JSON: parse error, connection usable.
    let mut h = HeaderConn::connect(&d);
    h.send_raw(b"Content-Length: 9\r\n\r\nnot json!");
    let r = h.next();
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_eq!(r["id"], Value::Null);
    // Not UTF-8: parse error, connection usable.
    h.send_raw(b"Content-Length: 3\r\n\r\n\xff\xfe\xc3");
    let r = h.next();
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_eq!(h.call_ok("agentd/hello", json!({}))["server"], "agentd");

    for garbage in [
        &b"Content-Length: twelve\r\n\r\n{}"[..],
        b"Content-Length: 2\r\nthis line has no colon\r\n\r\n{}",
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"Content-Length:\r\nContent-Type: x\r\n\r\n",
    ] {
        let mut g = HeaderConn::connect(&d);
        g.send_raw(garbage);
        let r = g.next();
        assert_eq!(
            r["error"]["code"],
            -32700,
            "{:?}: {r}",
            String::from_utf8_lossy(garbage)
        );
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("bad message header"),
            "{r}"
        );
        assert!(g.closed(), "connection kept after garbage headers");
    }

    // Headers that never end: refused once over the header limit.
    let mut g = HeaderConn::connect(&d);
    let mut endless = b"Content-Length: 2\r\nX-Pad: ".to_vec();
    endless.resize(16 * 1024, b'p');
    g.send_raw(&endless);
    let r = g.next();
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert!(g.closed());

    // Everyone else is still served.
    assert_eq!(other.call_ok("agentd/hello", json!({}))["server"], "agentd");
    assert_eq!(h.call_ok("agentd/hello", json!({}))["server"], "agentd");
}

#[test]
fn oversize_content_length_is_refused_without_reading_the_body_and_closes() {
    let d = Daemon::builder()
        .config("max_message_bytes = 4096\n")
        .start();
    let sid = d.create_session();
    let mut h = HeaderConn::connect(&d);
    // Just under the limit works.
    let text = "a".repeat(3000);
    h.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": text}}]}),
    );
    // Over the limit: the error comes from the header alone (no body is sent).
    h.send_raw(b"Content-Length: 4097\r\n\r\n");
    let r = h.next();
    assert_eq!(r["id"], Value::Null, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "message_too_large", "{r}");
    assert!(h.closed(), "connection kept after an oversize frame");

    // A huge announced length (more digits than fit in a u64) is the same error.
    let mut h = HeaderConn::connect(&d);
    h.send_raw(b"Content-Length: 99999999999999999999999999\r\n\r\n");
    let r = h.next();
    assert_eq!(r["error"]["data"]["kind"], "message_too_large", "{r}");
    assert!(h.closed());

    let mut n = d.connect();
    let ev = n.call_ok("agentd/events", json!({"session_id": sid}));
    // The session's first event and the one append under the limit; nothing else ran.
    let evs = ev["events"].as_array().unwrap();
    assert_eq!(evs.len(), 2, "{ev}");
    assert_eq!(evs[1]["data"]["text"], text);
}

#[test]
fn subscriptions_and_permission_requests_use_header_framing() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut h = HeaderConn::connect(&d);
    let model = format!("script:{}", example("write.json").display());
    let sid = h.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "model": model}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    h.call_ok(
        "agentd/subscribe",
        json!({"session_id": sid, "permissions": true, "after_seq": 0}),
    );

    // The turn runs on an NDJSON connection; this one is asked and watches.
    let mut runner = d.connect();
    let params = json!({"session_id": sid, "input": "write", "permission_mode": "ask"});
    let turn = std::thread::spawn(move || runner.try_call("agentd/turn", params));

    let req = h.wait_for(|m| m["method"] == "agentd/permission" && m.get("id").is_some());
    assert_eq!(req["params"]["tool"], "write_file", "{req}");
    h.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"decision": "allow"}}));

    let done = h.wait_for(|m| {
        m["method"] == "agentd/event" && m["params"]["result"]["type"] == "turn_ended"
    });
    assert_eq!(done["params"]["result"]["type"], "turn_ended");
    let r = turn.join().unwrap().expect("the turn's response");
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert!(d.workspace().join("notes.txt").exists());
}
