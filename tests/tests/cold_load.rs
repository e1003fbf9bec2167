//! A session's first load after a daemon start, seen by clients (docs/chat.md#attaching):
//! while the Log loads, the newest events (`agentd/events` with `tail`), a subscription
//! and its backlog are answered from the Log's end; everything else waits for the
//! whole Log. Each test holds the load at its first block read (the store's `hold`
//! fault, released through a FIFO), so what is answered before the load is known, not
//! guessed from timing.

use agentd_tests::sse::{chat_text, message_text, MockProvider, Reply};
use agentd_tests::{read_log_lines, Daemon, RpcConn};
use serde_json::{json, Value};
use std::time::Duration;

const SID: &str = "20261127T150000-c01d01";
const WAIT: Duration = Duration::from_secs(120);

/// A Log of `pairs` prompts and answers (each line about `pad` bytes more), ending
/// with a completed turn.
fn write_log(d: &Daemon, pairs: usize, pad: usize) {
    let dir = d.home().join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    let mut seq = 0u64;
    let mut put = |kind: &str, data: Value| {
        let line = json!({"id": format!("{seq:016x}"), "session_id": SID, "seq": seq,
            "ts": "2026-11-27T15:00:00.000000Z", "type": kind, "data": data});
        text.push_str(&line.to_string());
        text.push('\n');
        seq += 1;
    };
    put(
        "session_started",
        json!({"workspace": d.workspace(), "agentd_version": "t", "log_format": 1, "title": "cold"}),
    );
    let fill = "f".repeat(pad);
    for i in 0..pairs {
        put(
            "user_message",
            json!({"text": format!("prompt {i} {fill}")}),
        );
        put(
            "assistant_message",
            json!({"text": format!("answer {i} {fill}")}),
        );
    }
    std::fs::write(dir.join(format!("{SID}.ndjson")), text).unwrap();
}

/// A daemon on a home holding `SID`'s Log of `pairs` turns whose first block read of
/// it waits for [`release`], plus `faults`.
fn held_daemon(config: &str, faults: &str, pairs: usize, pad: usize) -> Daemon {
    let mut d = Daemon::builder()
        .config(config)
        .env("AGENTD_FAULTS", format!("read:hold:1@{SID}{faults}"))
        .build();
    write_log(&d, pairs, pad);
    let fifo = d.home().join("fault-hold");
    std::fs::create_dir_all(d.home()).unwrap();
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    d.spawn();
    d.wait_ready(WAIT).expect("daemon ready");
    d
}

/// Lets the held load go on: opens the FIFO for writing (which waits for the load to
/// reach it) and closes it.
fn release(d: &Daemon) {
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .open(d.home().join("fault-hold"))
            .unwrap(),
    );
}

/// Sends a request without waiting for its answer.
fn send(c: &mut RpcConn, id: u64, method: &str, params: Value) {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    c.send_raw(format!("{req}\n").as_bytes()).unwrap();
}

fn answer(c: &mut RpcConn, id: u64) -> Value {
    c.wait_for(|m| m["id"] == id, WAIT)
        .unwrap_or_else(|| panic!("no answer to request {id}"))
}

/// The next durable event (one with a seq) on a subscribed connection.
fn next_event(c: &mut RpcConn) -> Value {
    c.wait_event(|e| e.get("seq").is_some(), WAIT)
        .expect("an event arrives")
}

#[test]
fn the_tail_and_a_subscription_are_answered_before_the_load_and_a_turn_runs_on_the_whole_log() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("ANSWER")));
    // A window the whole Log fits in: no compaction gets in the way of the content.
    let config = mock
        .config()
        .replace("context_window = 100000", "context_window = 100000000");
    let mut d = held_daemon(&config, "", 3000, 300);
    assert!(std::fs::metadata(d.log_path(SID)).unwrap().len() > 2 << 20);
    let lines = read_log_lines(&d.log_path(SID));
    let last = lines.len() as u64 - 1;
    // A torn last line: never an event of the tail, cut by the load as always.
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new()
            .append(true)
            .open(d.log_path(SID))
            .unwrap(),
        b"{\"id\":\"torn",
    )
    .unwrap();

    // Answered while the load waits at its first read: from the Log's end.
    let mut sub = d.connect();
    let page = sub.call_ok("agentd/events", json!({"session_id": SID, "tail": 100}));
    assert_eq!(
        page["events"].as_array().unwrap()[..],
        lines[lines.len() - 100..]
    );
    assert!(page.get("next_after_seq").is_none(), "{page:?}");
    let page = sub.call_ok(
        "agentd/events",
        json!({"session_id": SID, "tail": 2, "types": ["user_message"]}),
    );
    let want: Vec<&Value> = lines[lines.len() - 4..].iter().step_by(2).collect();
    assert_eq!(
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        want
    );
    // A subscription with a backlog the tail holds.
    sub.subscribe(SID, Some(last - 3));
    for want in &lines[lines.len() - 3..] {
        assert_eq!(&next_event(&mut sub), want);
    }
    let r = sub.call(
        "agentd/events",
        json!({"session_id": SID, "tail": 3, "after_seq": 1}),
    );
    assert_eq!(
        r.pointer("/error/data/kind"),
        Some(&json!("invalid_args")),
        "{r}"
    );

    // These need the whole Log: they wait for it (a page the tail does not hold, the
    // session's summary, a turn).
    let mut first = d.connect();
    send(
        &mut first,
        3,
        "agentd/events",
        json!({"session_id": SID, "after_seq": 0, "limit": 2}),
    );
    let mut shown = d.connect();
    send(&mut shown, 2, "agentd/show", json!({"session_id": SID}));
    let mut c = d.connect();
    send(
        &mut c,
        1,
        "agentd/turn",
        json!({"session_id": SID, "input": "PROMPT"}),
    );
    release(&d);

    let turn = answer(&mut c, 1);
    assert!(turn.get("result").is_some(), "{turn}");
    let page = answer(&mut first, 3);
    assert_eq!(
        page["result"]["events"].as_array().unwrap()[..],
        lines[1..3]
    );
    let show = answer(&mut shown, 2);
    assert!(show["result"]["event_count"].as_u64().unwrap() >= lines.len() as u64);

    // The subscriber gets every event after its backlog once, in order, to the turn's end.
    let mut live = Vec::new();
    loop {
        let ev = next_event(&mut sub);
        let ended = ev["type"] == "turn_ended";
        live.push(ev);
        if ended {
            break;
        }
    }
    let now = read_log_lines(&d.log_path(SID));
    assert_eq!(live[..], now[lines.len()..lines.len() + live.len()]);
    assert_eq!(live[0]["type"], "log_repaired", "{}", live[0]);
    assert_eq!(live[0]["seq"], last + 1);
    let quarantined = live[0]["data"]["quarantine_path"].as_str().unwrap();
    assert_eq!(std::fs::read(quarantined).unwrap(), b"{\"id\":\"torn");
    let texts: Vec<&str> = live
        .iter()
        .filter_map(|e| e.pointer("/data/text").and_then(Value::as_str))
        .collect();
    assert_eq!(texts, ["PROMPT", "ANSWER"]);

    // The turn ran on the whole Log: the provider saw its first prompt and its last.
    let req = &mock.wait_requests(1, WAIT)[0];
    let said: Vec<String> = req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(message_text)
        .collect();
    let text_of = |seq: usize| lines[seq]["data"]["text"].as_str().unwrap().to_string();
    let first_prompt = said.iter().position(|m| *m == text_of(1));
    let last_answer = said.iter().position(|m| *m == text_of(lines.len() - 1));
    let prompt = said.iter().position(|m| m == "PROMPT");
    assert!(
        first_prompt < last_answer && last_answer < prompt && first_prompt.is_some(),
        "{:?} {:?} {:?} of {} messages",
        first_prompt,
        last_answer,
        prompt,
        said.len()
    );
    d.shutdown(WAIT);
}

#[test]
fn a_load_that_fails_after_its_tail_was_served_sends_lagged_and_the_next_load_catches_up() {
    // The second block read fails: the Log is over one 2 MiB block.
    let mut d = held_daemon("", &format!(",read:eio:2@{SID}"), 4000, 600);
    let lines = read_log_lines(&d.log_path(SID));
    assert!(std::fs::metadata(d.log_path(SID)).unwrap().len() > 3 << 20);
    let last = lines.len() as u64 - 1;

    let mut sub = d.connect();
    let page = sub.call_ok("agentd/events", json!({"session_id": SID, "tail": 5}));
    assert_eq!(
        page["events"].as_array().unwrap()[..],
        lines[lines.len() - 5..]
    );
    sub.subscribe(SID, Some(last));
    let mut shown = d.connect();
    send(&mut shown, 1, "agentd/show", json!({"session_id": SID}));
    release(&d);

    // The load failed: the request that waited for it gets its error, the subscriber
    // a `lagged` telling it to subscribe again.
    let show = answer(&mut shown, 1);
    assert_eq!(
        show.pointer("/error/data/kind"),
        Some(&json!("io_error")),
        "{show}"
    );
    let lagged = sub
        .wait_event(|e| e["type"] == "lagged", WAIT)
        .expect("the subscriber hears the load failed");
    assert_eq!(lagged["data"]["reason"], "load_failed", "{lagged}");
    assert_eq!(lagged["data"]["kind"], "io_error", "{lagged}");

    // Subscribing again loads the session afresh (the fault fired once); an event
    // appended now arrives once, right after the seq the subscriber had.
    let mut again = d.connect();
    again.subscribe(SID, Some(last));
    let mut c = d.connect();
    c.call_ok(
        "agentd/append",
        json!({"session_id": SID, "events": [{"type": "user_message", "data": {"text": "after"}}]}),
    );
    let ev = next_event(&mut again);
    assert_eq!(
        (ev["seq"].as_u64(), &ev["data"]["text"]),
        (Some(last + 1), &json!("after"))
    );
    let shown = c.call_ok("agentd/show", json!({"session_id": SID}));
    assert_eq!(shown["event_count"], json!(lines.len() + 1));
    d.shutdown(WAIT);
}
