//! The NDJSON JSON-RPC transport and subscriptions through the real daemon (docs/protocol.md#errors,
//! docs/protocol.md#methods `agentd/subscribe`): bad input gets the contract's error and never costs the
//! connection; catch-up subscriptions have no gap and no duplicate; a subscriber that
//! does not read never holds up appends.

use agentd_tests::{Daemon, RpcConn};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

fn next(c: &mut RpcConn) -> Value {
    c.read_message(T).expect("a message from the daemon")
}

#[track_caller]
fn still_answers(c: &mut RpcConn) {
    let r = c.call_ok("agentd/hello", json!({"client": "transport-test"}));
    assert_eq!(r["server"], "agentd");
}

#[test]
fn bad_input_gets_errors_and_the_connection_stays_usable() {
    let d = Daemon::start();
    let sid = d.create_session();
    let mut c = d.connect();

    // Malformed JSON.
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\n")
        .unwrap();
    let r = next(&mut c);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_eq!(r["id"], Value::Null, "{r}");
    still_answers(&mut c);

    // Invalid UTF-8 inside an otherwise fine request.
    let mut bad =
        b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"agentd/hello\",\"params\":{\"client\":\""
            .to_vec();
    bad.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    bad.extend_from_slice(b"\"}}\n");
    c.send_raw(&bad).unwrap();
    let r = next(&mut c);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_ne!(r["id"], 4, "answered a request that did not parse: {r}");
    still_answers(&mut c);

    // A 20 MiB line (over the 16 MiB default): one error with id null, the rest of the
    // line discarded, the request never runs.
    let mut huge = Vec::with_capacity(21 << 20);
    huge.extend_from_slice(
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"agentd/append\",\"params\":{{\"session_id\":\"{sid}\",\"events\":[{{\"type\":\"user_message\",\"data\":{{\"text\":\""
        )
        .as_bytes(),
    );
    huge.resize(huge.len() + (20 << 20), b'a');
    huge.extend_from_slice(b"\"}}]}}\n");
    c.send_raw(&huge).unwrap();
    let r = next(&mut c);
    assert_eq!(r["id"], Value::Null, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "message_too_large", "{r}");
    still_answers(&mut c);
    let ev = c.call_ok("agentd/events", json!({"session_id": sid}));
    assert_eq!(
        ev["events"].as_array().unwrap().len(),
        1,
        "the oversized append ran"
    );
    assert!(
        c.read_message(Duration::from_millis(200)).is_none(),
        "unexpected extra message (a response to the oversized line?)"
    );

    // A line that is JSON but not a request object.
    c.send_raw(b"42\n").unwrap();
    let r = next(&mut c);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(r["id"], Value::Null);
    still_answers(&mut c);

    // Unknown method.
    let r = c.call("agentd/no_such_method", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    still_answers(&mut c);

    // Bad params: -32602 with kind invalid_args.
    let r = c.call(
        "agentd/events",
        json!({"session_id": sid, "bogus_field": true}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
    still_answers(&mut c);

    // A bad line and a good one in the same write: both handled, in order of need.
    c.send_raw(b"not json at all\n{\"jsonrpc\":\"2.0\",\"id\":501,\"method\":\"agentd/hello\",\"params\":{}}\n")
        .unwrap();
    let mut got = vec![next(&mut c), next(&mut c)];
    got.sort_by_key(|m| m["id"].as_u64().unwrap_or(0));
    assert_eq!(got[0]["error"]["code"], -32700, "{got:?}");
    assert_eq!(got[1]["id"], 501, "{got:?}");
    assert_eq!(got[1]["result"]["server"], "agentd");
    still_answers(&mut c);
}

#[test]
fn batches_are_answered_as_arrays_and_notifications_get_no_response() {
    let d = Daemon::start();
    let sid = d.create_session();
    let mut c = d.connect();

    let batch = json!([
        {"jsonrpc": "2.0", "id": 10, "method": "agentd/hello", "params": {}},
        {"jsonrpc": "2.0", "id": 11, "method": "agentd/show", "params": {"session_id": sid}},
        {"jsonrpc": "2.0", "method": "agentd/append",
         "params": {"session_id": sid, "events": [{"type": "user_message", "data": {"text": "from a notification"}}]}},
        {"jsonrpc": "2.0", "id": 12, "method": "agentd/nope", "params": {}},
    ]);
    c.send_raw(format!("{batch}\n").as_bytes()).unwrap();
    let r = next(&mut c);
    let arr = r
        .as_array()
        .unwrap_or_else(|| panic!("batch answered with {r}"));
    let mut ids: Vec<u64> = arr.iter().map(|m| m["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![10, 11, 12], "{r}");
    for m in arr {
        match m["id"].as_u64() {
            Some(10) => assert_eq!(m["result"]["server"], "agentd"),
            Some(11) => assert_eq!(m["result"]["session_id"], json!(sid)),
            _ => assert_eq!(m["error"]["code"], -32601),
        }
    }

    // A notification runs but gets no response; the next message is the answer to the
    // following call.
    c.notify(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "notified"}}]}),
    )
    .unwrap();
    c.notify("agentd/hello", json!({})).unwrap();
    c.notify("agentd/nope", json!({})).unwrap();
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"agentd/hello\",\"params\":{}}\n")
        .unwrap();
    let r = next(&mut c);
    assert_eq!(r["id"], 99, "{r}");
    assert!(
        c.read_message(Duration::from_millis(300)).is_none(),
        "a notification got a response"
    );
    // Both notified appends ran (notifications are calls without an answer).
    let ev = c.call_ok(
        "agentd/events",
        json!({"session_id": sid, "types": ["user_message"]}),
    );
    let texts: Vec<&str> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts.contains(&"from a notification") && texts.contains(&"notified"));

    // An empty batch is an invalid request.
    c.send_raw(b"[]\n").unwrap();
    let r = next(&mut c);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    still_answers(&mut c);
}

#[test]
fn subscription_catch_up_has_no_gap_and_no_duplicate() {
    const BEFORE: u64 = 300;
    const DURING: usize = 1500;
    let d = Daemon::start();
    let sid = d.create_session();
    let mut w = d.connect();
    for i in 0..BEFORE {
        w.call_ok(
            "agentd/append",
            json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": format!("pre {i}")}}]}),
        );
    }
    // A writer keeps appending (mixed batch sizes) while we subscribe from the middle.
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let progress = Arc::new(AtomicU64::new(0));
    let writer = {
        let (socket, sid, last, progress) = (
            d.socket().to_path_buf(),
            sid.clone(),
            last.clone(),
            progress.clone(),
        );
        std::thread::spawn(move || {
            let mut c = RpcConn::connect(&socket).unwrap();
            let mut last_seq = 0;
            for i in 0..DURING {
                let n = 1 + i % 3;
                let evs: Vec<Value> = (0..n)
                    .map(|k| json!({"type": "user_message", "data": {"text": format!("live {i}.{k}")}}))
                    .collect();
                let r = c.call_ok("agentd/append", json!({"session_id": sid, "events": evs}));
                last_seq = r["last_seq"].as_u64().unwrap();
                progress.fetch_add(1, Ordering::Relaxed);
            }
            last.store(last_seq, Ordering::SeqCst);
        })
    };
    let deadline = Instant::now() + T;
    while progress.load(Ordering::Relaxed) < 20 {
        assert!(Instant::now() < deadline, "writer makes no progress");
        std::thread::yield_now();
    }
    let after = BEFORE / 2;
    let mut s = d.connect();
    s.subscribe(&sid, Some(after));
    let mut seen: Vec<u64> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fin = last.load(Ordering::SeqCst);
        if fin != u64::MAX && seen.last() == Some(&fin) {
            break;
        }
        // The last event may arrive before the writer has recorded its ack: wait in
        // short slices and re-check the writer's state between them.
        assert!(
            Instant::now() < deadline,
            "stalled after {} events (writer last seq {fin})",
            seen.len()
        );
        let Some(m) = s.read_message(Duration::from_millis(100)) else {
            continue;
        };
        assert_eq!(m["method"], "agentd/event", "{m}");
        let ev = &m["params"]["result"];
        assert_ne!(ev["type"], "lagged", "subscriber lagged: {ev}");
        if let Some(seq) = ev["seq"].as_u64() {
            seen.push(seq);
        }
    }
    writer.join().unwrap();
    let fin = last.load(Ordering::SeqCst);
    let expected: Vec<u64> = (after + 1..=fin).collect();
    if seen != expected {
        let dup = seen.windows(2).find(|w| w[1] != w[0] + 1);
        panic!(
            "catch-up broke: {} seen, {} expected, first break at {dup:?}",
            seen.len(),
            expected.len()
        );
    }
}

#[test]
fn slow_subscriber_never_blocks_appends() {
    const APPENDS: usize = 20_000;
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let sid = d.create_session();
    let mut slow = d.connect();
    slow.subscribe(&sid, None);
    // `slow` now reads nothing until the appends are done.

    let mut w = d.connect();
    w.set_call_timeout(Duration::from_secs(10));
    let t0 = Instant::now();
    let pad = "p".repeat(200);
    for i in 0..APPENDS {
        let r = w.call(
            "agentd/append",
            json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": format!("{i} {pad}")}}]}),
        );
        assert_eq!(r["result"]["first_seq"], json!(i + 1), "{r}");
    }
    let took = t0.elapsed();
    eprintln!("{APPENDS} appends with a stalled subscriber: {took:?}");

    // Others are still served meanwhile.
    let mut other = d.connect();
    let show = other.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(show["last_seq"], json!(APPENDS));

    // The slow subscriber, once it reads, is told it lagged (or is dropped).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut events = 0usize;
    let mut outcome = None;
    while Instant::now() < deadline {
        match slow.read_message(Duration::from_secs(5)) {
            Some(m) => {
                let ev = &m["params"]["result"];
                if ev["type"] == "lagged" {
                    outcome = Some("lagged");
                    break;
                }
                events += 1;
            }
            None => {
                outcome = Some("closed or silent");
                break;
            }
        }
    }
    assert_eq!(
        outcome,
        Some("lagged"),
        "slow subscriber got {events} events and no lagged notice"
    );
    assert!(
        events < APPENDS,
        "got every event: nothing was slow, the test proves nothing"
    );
    // The daemon still serves everyone, including the lagged connection.
    still_answers(&mut other);
    still_answers(&mut slow);
    let r = w.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "after"}}]}),
    );
    assert_eq!(r["first_seq"], json!(APPENDS + 1));
}

#[test]
fn unsubscribe_stops_notifications_and_ids_round_trip() {
    let d = Daemon::start();
    let sid = d.create_session();
    let mut s = d.connect();
    let sub = s.subscribe(&sid, None);
    let mut w = d.connect();
    w.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "one"}}]}),
    );
    let m = s
        .wait_for(|m| m["method"] == "agentd/event", T)
        .expect("live event");
    assert_eq!(m["params"]["subscription"], sub, "{m}");
    assert_eq!(m["params"]["result"]["seq"], 1);
    let r = s.call("agentd/unsubscribe", json!([sub]));
    assert_eq!(r["result"], true, "{r}");
    w.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "two"}}]}),
    );
    // A fresh subscription on the same connection sees the next event; the old one
    // must not deliver "two".
    let sub2 = s.subscribe(&sid, Some(1));
    let m = s
        .wait_for(|m| m["method"] == "agentd/event", T)
        .expect("catch-up event");
    assert_eq!(
        m["params"]["subscription"], sub2,
        "old subscription still fed: {m}"
    );
    assert_eq!(m["params"]["result"]["seq"], 2);

    // String ids and omitted params are fine.
    s.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"agentd/status\"}\n")
        .unwrap();
    let r = s
        .wait_for(|m| m.get("id").is_some(), T)
        .expect("status answer");
    assert_eq!(r["id"], "abc", "{r}");
    assert!(r["result"]["uptime_s"].is_u64(), "{r}");
    assert_eq!(r["result"]["durability"], "sync");
}

/// A catch-up from seq 0 of a session larger than one backlog page (1000 events)
/// delivers every durable event once, in order, then the live ones.
#[test]
fn catch_up_across_backlog_pages_is_complete_and_ordered() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let sid = d.create_session();
    let mut w = d.connect();
    let batch: Vec<Value> = (0..500)
        .map(|i| json!({"type": "user_message", "data": {"text": format!("m{i}")}}))
        .collect();
    for _ in 0..5 {
        w.call_ok("agentd/append", json!({"session_id": sid, "events": batch}));
    }
    let mut s = d.connect();
    s.subscribe(&sid, Some(0));
    let live = w.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "live"}}]}),
    );
    let last = live["last_seq"].as_u64().unwrap();
    assert_eq!(last, 2501);
    let mut seen = Vec::new();
    while seen.last() != Some(&last) {
        let ev = s
            .wait_event(|_| true, T)
            .unwrap_or_else(|| panic!("stalled after {} events", seen.len()));
        seen.push(ev["seq"].as_u64().unwrap());
    }
    assert_eq!(seen, (1..=last).collect::<Vec<_>>());
}

/// `agentd/append` is answered straight from the session's commit, not by the method
/// table; its responses keep the method table's exact words: the id echoed as sent,
/// `jsonrpc`, `id`, then `result` or `error` (code, message, `data.kind`), whether the
/// session was loaded or not, and a client that half-closes still gets its answer.
#[test]
fn appends_are_answered_in_the_method_tables_words() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::start();
    let sid = d.create_session();
    let mut s = std::os::unix::net::UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    let mut ask = |s: &mut std::os::unix::net::UnixStream, id: Value, params: Value| {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "agentd/append", "params": params});
        s.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        rd.read_line(&mut line).unwrap();
        line
    };
    let ev = json!({"type": "user_message", "data": {"text": "hi"}});

    // Not loaded yet (the session was only created): the first append loads it.
    let line = ask(
        &mut s,
        json!("a-1"),
        json!({"session_id": sid, "events": [ev]}),
    );
    assert!(
        line.starts_with(
            r#"{"jsonrpc":"2.0","id":"a-1","result":{"first_seq":1,"last_seq":1,"ids":[""#
        ),
        "{line}"
    );
    // Loaded: the direct path.
    let line = ask(
        &mut s,
        json!(7),
        json!({"session_id": sid, "events": [ev, ev]}),
    );
    assert!(
        line.starts_with(
            r#"{"jsonrpc":"2.0","id":7,"result":{"first_seq":2,"last_seq":3,"ids":[""#
        ),
        "{line}"
    );
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["result"]["ids"].as_array().unwrap().len(), 2);

    let line = ask(
        &mut s,
        json!(8),
        json!({"session_id": sid, "events": [ev], "expect_seq": 1}),
    );
    assert!(
        line.starts_with(r#"{"jsonrpc":"2.0","id":8,"error":{"code":-32000,"message":"#),
        "{line}"
    );
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["error"]["data"]["kind"], "seq_conflict", "{r}");
    assert_eq!(r["error"]["data"]["details"]["next_seq"], 4, "{r}");

    let line = ask(&mut s, json!(9), json!({"session_id": sid}));
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["id"], 9);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");

    let line = ask(
        &mut s,
        json!(10),
        json!({"session_id": "no-such-session", "events": [ev]}),
    );
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["error"]["data"]["kind"], "not_found", "{r}");

    let line = ask(
        &mut s,
        json!(11),
        json!({"session_id": sid, "events": [{"type": "artifact_changed", "data": {}}]}),
    );
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["error"]["data"]["kind"], "ephemeral_not_loggable", "{r}");

    // Half-closed: the answer of the last append still arrives before the end.
    let req = json!({"jsonrpc": "2.0", "id": 12, "method": "agentd/append",
        "params": {"session_id": sid, "events": [ev]}});
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut line = String::new();
    rd.read_line(&mut line).unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["result"]["first_seq"], 4, "{r}");
    let mut rest = String::new();
    assert_eq!(
        rd.read_line(&mut rest).unwrap(),
        0,
        "then the connection ends"
    );

    let mut c = d.connect();
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}));
    assert_eq!(evs["events"].as_array().unwrap().len(), 5);
}

/// A context larger than a MiB is written in parts (framing around the text, not a
/// copy of it): it arrives whole and identical in both framings.
#[test]
fn a_large_context_arrives_whole_in_both_framings() {
    use std::io::{BufRead, BufReader, Read, Write};
    let d = Daemon::start();
    let sid = d.create_session();
    let mut c = d.connect();
    let text = "x".repeat(8 * 1024);
    for _ in 0..4 {
        let events: Vec<Value> = (0..50)
            .map(|_| json!({"type": "user_message", "data": {"text": text}}))
            .collect();
        c.call_ok(
            "agentd/append",
            json!({"session_id": sid, "events": events}),
        );
    }
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "agentd/context", "params": {"session_id": sid}})
        .to_string();

    let mut s = std::os::unix::net::UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.len() > 1 << 20, "{} bytes", line.len());
    let lines: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        lines["result"]["stats"]["items"], 201,
        "developer item and 200 messages"
    );

    let mut s = std::os::unix::net::UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(format!("Content-Length: {}\r\n\r\n{req}", req.len()).as_bytes())
        .unwrap();
    let mut rd = BufReader::new(s);
    let mut header = String::new();
    rd.read_line(&mut header).unwrap();
    let len: usize = header
        .trim()
        .strip_prefix("Content-Length: ")
        .expect("a Content-Length header")
        .parse()
        .unwrap();
    let mut blank = String::new();
    rd.read_line(&mut blank).unwrap();
    assert_eq!(blank, "\r\n");
    let mut body = vec![0u8; len];
    rd.read_exact(&mut body).unwrap();
    let framed: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(framed, lines, "the same response in both framings");
}

/// Requests of direct calls are left in the socket until answered (so that a client
/// blocked on its answer is not woken for nothing); nothing of that may cost a byte,
/// duplicate one, or stall a client. A client with the smallest send buffer the kernel
/// allows pipelines appends, large appends (bigger than its buffer, so they arrive in
/// pieces), method-table calls and notifications, in both framings, without reading
/// until it has written everything it can: every call is answered exactly once and the
/// Log holds every event once, byte for byte.
#[test]
fn pipelined_direct_and_table_calls_through_a_tiny_send_buffer_are_all_answered() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::fd::AsRawFd;
    let d = Daemon::start();
    for headers in [false, true] {
        let sid = d.create_session();
        let s = std::os::unix::net::UnixStream::connect(d.socket()).unwrap();
        let small: libc::c_int = 1;
        // SAFETY: an open socket and an int option that lives across the call; the
        // kernel raises the size to its minimum.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&small as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_SNDBUF");
        s.set_read_timeout(Some(T)).unwrap();
        let big = "b".repeat(200 * 1024);
        let mut expected_texts = Vec::new();
        let mut requests = Vec::new();
        let mut answered_ids = Vec::new();
        for i in 0..144u64 {
            let text = match i % 12 {
                0..=7 | 11 => format!("small-{i}"),
                8 => format!("{big}-{i}"),
                9 => {
                    requests.push(json!({"jsonrpc": "2.0", "id": i, "method": "agentd/hello", "params": {"client": "pipeline"}}));
                    answered_ids.push(i);
                    continue;
                }
                _ => {
                    requests.push(json!({"jsonrpc": "2.0", "method": "agentd/hello", "params": {"client": "notification"}}));
                    continue;
                }
            };
            requests.push(json!({"jsonrpc": "2.0", "id": i, "method": "agentd/append",
                "params": {"session_id": sid, "events": [{"type": "user_message", "data": {"text": text}}]}}));
            expected_texts.push(text);
            answered_ids.push(i);
        }
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            for r in requests {
                let body = r.to_string();
                let framed = if headers {
                    format!("Content-Length: {}\r\n\r\n{body}", body.len())
                } else {
                    format!("{body}\n")
                };
                w.write_all(framed.as_bytes()).unwrap();
            }
        });
        let mut rd = BufReader::new(s);
        let mut seen = std::collections::BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.len() < answered_ids.len() {
            assert!(
                Instant::now() < deadline,
                "answers stalled: {} of {}",
                seen.len(),
                answered_ids.len()
            );
            let text = if headers {
                let mut len = None;
                loop {
                    let mut h = String::new();
                    rd.read_line(&mut h).expect("a header line");
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.strip_prefix("Content-Length: ") {
                        len = Some(v.parse::<usize>().unwrap());
                    }
                }
                let mut body = vec![0u8; len.expect("Content-Length")];
                rd.read_exact(&mut body).expect("a body");
                String::from_utf8(body).unwrap()
            } else {
                let mut line = String::new();
                rd.read_line(&mut line).expect("an answer line");
                line
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(v.get("error").is_none(), "{v}");
            let id = v["id"].as_u64().expect("an answer with an id");
            assert!(seen.insert(id, v).is_none(), "id {id} answered twice");
        }
        writer.join().unwrap();
        assert_eq!(seen.keys().copied().collect::<Vec<_>>(), answered_ids);
        // Calls run concurrently (the first append loads the session in a task of its
        // own), so the Log's order is not the sending order; each event is there once,
        // byte for byte.
        let mut texts: Vec<String> = d
            .log_lines(&sid)
            .iter()
            .filter(|l| l["type"] == "user_message")
            .map(|l| l["data"]["text"].as_str().unwrap().to_string())
            .collect();
        texts.sort();
        expected_texts.sort();
        assert_eq!(texts.len(), expected_texts.len());
        assert!(
            texts == expected_texts,
            "the Log's events differ from what was sent"
        );
    }
}
