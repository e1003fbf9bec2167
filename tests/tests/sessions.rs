//! Session lifecycle through the real daemon: racing creates of one id, paging of
//! `agentd/list` and `agentd/events` (and agentctl's `log` over many pages), idle
//! eviction and reload, and the `max_message_bytes` boundary (docs/log-format.md#the-envelope, docs/protocol.md#errors, docs/protocol.md#methods).

use agentd_tests::{Daemon, RpcConn};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[test]
fn racing_creates_of_one_id_have_exactly_one_winner() {
    let d = Daemon::start();
    let ws = d.workspace().display().to_string();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let socket = d.socket().to_path_buf();
            let ws = ws.clone();
            std::thread::spawn(move || {
                let mut c = RpcConn::connect(&socket).unwrap();
                c.call(
                    "agentd/create",
                    json!({"workspace": ws, "session_id": "contested"}),
                )
            })
        })
        .collect();
    let results: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let wins = results.iter().filter(|r| r.get("result").is_some()).count();
    assert_eq!(wins, 1, "{results:?}");
    for r in results.iter().filter(|r| r.get("error").is_some()) {
        assert_eq!(r["error"]["data"]["kind"], "already_exists", "{r}");
    }
    let lines = d.log_lines("contested");
    assert_eq!(lines.len(), 1);
    // No temp file is left behind in the sessions dir (on a database store the dir
    // holds no Log at all).
    let names: Vec<String> = std::fs::read_dir(d.home().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let want: Vec<String> = match d.store_url() {
        None => vec!["contested.ndjson".to_string()],
        Some(_) => Vec::new(),
    };
    assert_eq!(names, want);
}

#[test]
fn list_and_events_page_without_loss_or_duplicates() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let ws = d.workspace().display().to_string();
    let mut created = BTreeSet::new();
    for i in 0..25 {
        let r = c.call_ok(
            "agentd/create",
            json!({"workspace": ws, "session_id": format!("s{i:02}")}),
        );
        created.insert(r["session_id"].as_str().unwrap().to_string());
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut p = json!({"limit": 7});
        if let Some(cur) = &cursor {
            p["cursor"] = json!(cur);
        }
        let r = c.call_ok("agentd/list", p);
        pages += 1;
        assert!(pages < 20, "list never ends");
        for s in r["sessions"].as_array().unwrap() {
            seen.push(s["session_id"].as_str().unwrap().to_string());
        }
        match r.get("next_cursor").and_then(Value::as_str) {
            Some(cur) => cursor = Some(cur.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 25, "{seen:?}");
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), created);
    assert_eq!(pages, 4);

    // 2,500 events over pages of 1,000.
    let sid = "s00";
    for chunk in 0..25 {
        let evs: Vec<Value> = (0..100)
            .map(|k| json!({"type": "user_message", "data": {"text": format!("{}", chunk * 100 + k)}}))
            .collect();
        c.call_ok("agentd/append", json!({"session_id": sid, "events": evs}));
    }
    let mut seqs = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let mut p = json!({"session_id": sid, "limit": 1000});
        if let Some(a) = after {
            p["after_seq"] = json!(a);
        }
        let r = c.call_ok("agentd/events", p);
        for e in r["events"].as_array().unwrap() {
            seqs.push(e["seq"].as_u64().unwrap());
        }
        match r.get("next_after_seq").and_then(Value::as_u64) {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seqs, (0..=2500).collect::<Vec<u64>>());

    // agentctl log pages through all of them too.
    let out = d.agentctl(["--json", "log", sid]);
    out.assert_code(0);
    let evs = out.json()["events"].as_array().unwrap().clone();
    assert_eq!(evs.len(), 2501, "agentctl log --json lost events");
    let human = d.agentctl(["log", sid]);
    human.assert_code(0);
    assert_eq!(human.stdout.lines().count(), 2501);
    let ls = d.agentctl(["--json", "ls", "--all", "--limit", "4"]);
    ls.assert_code(0);
    assert_eq!(ls.json()["sessions"].as_array().unwrap().len(), 25);
}

#[test]
fn idle_session_is_evicted_and_reloads_with_its_data() {
    let d = Daemon::builder().config("idle_evict_s = 1\n").start();
    let sid = d.create_session();
    let mut c = d.connect();
    c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "before"}}]}),
    );
    assert_eq!(c.call_ok("agentd/status", json!({}))["sessions_loaded"], 1);
    let deadline = Instant::now() + T;
    while c.call_ok("agentd/status", json!({}))["sessions_loaded"] != 0 {
        assert!(Instant::now() < deadline, "idle session never evicted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "after"}}]}),
    );
    assert_eq!(r["first_seq"], 2);
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}));
    assert_eq!(evs["events"].as_array().unwrap().len(), 3);
    assert_eq!(
        c.call_ok("agentd/list", json!({}))["sessions"][0]["event_count"],
        3
    );

    // A subscriber keeps its session loaded.
    let mut s = d.connect();
    s.subscribe(&sid, None);
    std::thread::sleep(Duration::from_millis(2500)); // longer than idle_evict_s
    assert_eq!(c.call_ok("agentd/status", json!({}))["sessions_loaded"], 1);
    c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "live"}}]}),
    );
    let ev = s
        .wait_event(|e| e["data"]["text"] == "live", T)
        .expect("subscriber still fed");
    assert_eq!(ev["seq"], 3);
}

#[test]
fn appends_racing_eviction_are_never_lost() {
    let d = Daemon::builder()
        .config("idle_evict_s = 1\ndurability = \"none\"\n")
        .start();
    let sid = d.create_session();
    let mut c = d.connect();
    let mut expected = 1;
    let t0 = Instant::now();
    // Append in bursts separated by gaps around the eviction timeout, so some appends
    // land while an evicted actor drains.
    while t0.elapsed() < Duration::from_secs(4) {
        for _ in 0..20 {
            let r = c.call_ok(
                "agentd/append",
                json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "x"}}]}),
            );
            assert_eq!(r["first_seq"], expected);
            expected += 1;
        }
        std::thread::sleep(Duration::from_millis(950));
    }
    let evs = c.call_ok("agentd/events", json!({"session_id": sid, "limit": 10_000}));
    let seqs: Vec<u64> = evs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..expected).collect::<Vec<u64>>());
}

#[test]
fn max_message_bytes_boundary_is_exact() {
    const MAX: usize = 4096;
    let d = Daemon::builder()
        .config(&format!("max_message_bytes = {MAX}\n"))
        .start();
    let sid = d.create_session();
    let mut c = d.connect();
    let request = |id: u64, len: usize| -> Vec<u8> {
        let head = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"agentd/append\",\"params\":{{\"session_id\":\"{sid}\",\"events\":[{{\"type\":\"user_message\",\"data\":{{\"text\":\""
        );
        let tail = "\"}}]}}";
        let mut v = head.into_bytes();
        v.resize(len - tail.len(), b'z');
        v.extend_from_slice(tail.as_bytes());
        assert_eq!(v.len(), len);
        serde_json::from_slice::<Value>(&v).expect("valid request");
        v.push(b'\n');
        v
    };
    c.send_raw(&request(1, MAX)).unwrap();
    let r = c.read_message(T).unwrap();
    assert_eq!(
        r["id"], 1,
        "a line of exactly max_message_bytes is refused: {r}"
    );
    assert!(r.get("result").is_some(), "{r}");
    c.send_raw(&request(2, MAX + 1)).unwrap();
    let r = c.read_message(T).unwrap();
    assert_eq!(r["id"], Value::Null, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "message_too_large", "{r}");
    // Several oversized lines in a row, then a good one: each bad line is one error.
    let mut many = Vec::new();
    for i in 0..3 {
        many.extend(request(10 + i, MAX * 3));
    }
    many.extend(request(20, 200));
    c.send_raw(&many).unwrap();
    let mut msgs: Vec<Value> = (0..4).map(|_| c.read_message(T).unwrap()).collect();
    msgs.sort_by_key(|m| m["id"].as_u64().unwrap_or(0));
    for m in &msgs[..3] {
        assert_eq!(m["error"]["data"]["kind"], "message_too_large", "{m}");
    }
    assert_eq!(msgs[3]["id"], 20);
    assert!(msgs[3].get("result").is_some(), "{}", msgs[3]);
    // A page stays within max_message_bytes, so the two big events come a page each.
    let mut seqs = Vec::new();
    let mut after = Value::Null;
    loop {
        let page = c.call_ok(
            "agentd/events",
            json!({"session_id": sid, "after_seq": after}),
        );
        seqs.extend(
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["seq"].clone()),
        );
        match page.get("next_after_seq") {
            Some(n) if !n.is_null() => after = n.clone(),
            _ => break,
        }
    }
    assert_eq!(seqs, vec![json!(0), json!(1), json!(2)]);
}

#[test]
fn closed_subscriber_connections_are_released() {
    let d = Daemon::builder().config("idle_evict_s = 1\n").start();
    let sid = d.create_session();
    let mut c = d.connect();
    // Only `c` is left once the connection create_session used is counted down.
    let deadline = Instant::now() + T;
    while c.call_ok("agentd/status", json!({}))["connections"] != 1 {
        assert!(Instant::now() < deadline, "connection count never settles");
        std::thread::sleep(Duration::from_millis(20));
    }
    let base = 1;
    let mut subs: Vec<RpcConn> = (0..5).map(|_| d.connect()).collect();
    for s in &mut subs {
        s.subscribe(&sid, Some(0));
    }
    assert_eq!(
        c.call_ok("agentd/status", json!({}))["connections"],
        base + 5
    );
    drop(subs);
    // Connections are counted down and the session, with no subscriber left, is
    // evicted once idle.
    let deadline = Instant::now() + T;
    loop {
        let st = c.call_ok("agentd/status", json!({}));
        if st["connections"] == base && st["sessions_loaded"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not released: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
