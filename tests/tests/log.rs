//! Black-box tests of the Log through the real daemon: the append/events round trip,
//! concurrent appenders, torn-tail repair, damaged lines, and hostile session ids
//! (docs/protocol.md#the-socket, docs/log-format.md#the-envelope, docs/protocol.md#methods).

use agentd_tests::{read_log_lines, tree_snapshot, Daemon, RpcConn};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

fn kind(resp: &Value) -> &str {
    resp.pointer("/error/data/kind")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("not an error with a kind: {resp}"))
}

fn all_events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    let r = c.call_ok(
        "agentd/events",
        json!({"session_id": sid, "limit": 100_000}),
    );
    assert!(r.get("next_after_seq").is_none(), "more than one page: {r}");
    r["events"].as_array().cloned().unwrap_or_default()
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect()
}

fn line(sid: &str, seq: u64, ty: &str, data: Value) -> String {
    json!({"id": format!("{:016x}", 0xabc000u64.wrapping_add(seq)), "session_id": sid, "seq": seq,
           "ts": "2026-01-01T00:00:00.000000Z", "type": ty, "data": data})
    .to_string()
}

fn started(sid: &str, ws: &Path) -> String {
    line(
        sid,
        0,
        "session_started",
        json!({"workspace": ws.display().to_string(), "agentd_version": "0.1.0", "log_format": 1}),
    )
}

#[test]
fn create_append_events_round_trip() {
    let d = Daemon::start();
    let mut c = d.connect();
    let ws = d.workspace().display().to_string();
    let created = c.call_ok("agentd/create", json!({"workspace": ws, "title": "rt"}));
    let sid = created["session_id"].as_str().unwrap().to_string();
    assert_eq!(
        Path::new(created["log_path"].as_str().unwrap()),
        d.log_path(&sid)
    );

    let a = c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [
            {"type": "user_message", "data": {"text": "hello"}},
            {"type": "assistant_message", "data": {"text": "hi there"}},
        ]}),
    );
    assert_eq!(a["first_seq"], 1);
    assert_eq!(a["last_seq"], 2);
    let ids: Vec<&str> = a["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    for id in &ids {
        assert_eq!(id.len(), 16, "{id}");
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    // expect_seq that matches is accepted; the next one is refused, nothing written.
    let ok = c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "expect_seq": 3,
               "events": [{"type": "user_message", "data": {"text": "third"}}]}),
    );
    assert_eq!(ok["first_seq"], 3);
    let conflict = c.call(
        "agentd/append",
        json!({"session_id": sid, "expect_seq": 3,
               "events": [{"type": "user_message", "data": {"text": "nope"}}]}),
    );
    assert_eq!(kind(&conflict), "seq_conflict");
    // Ephemeral and empty batches are refused, nothing written.
    let eph = c.call(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "text_delta", "data": {"text": "x"}}]}),
    );
    assert_eq!(kind(&eph), "ephemeral_not_loggable");
    let empty = c.call("agentd/append", json!({"session_id": sid, "events": []}));
    assert_eq!(kind(&empty), "invalid_args");
    // All or nothing: a batch with one bad event writes none of them.
    let mixed = c.call(
        "agentd/append",
        json!({"session_id": sid, "events": [
            {"type": "user_message", "data": {"text": "good"}},
            {"type": "status", "data": {}},
        ]}),
    );
    assert!(mixed.get("error").is_some(), "{mixed}");

    let events = all_events(&mut c, &sid);
    assert_eq!(seqs(&events), vec![0, 1, 2, 3]);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session_started",
            "user_message",
            "assistant_message",
            "user_message"
        ]
    );
    assert_eq!(events[0]["data"]["workspace"], json!(ws));
    assert_eq!(events[0]["data"]["title"], "rt");
    assert_eq!(events[1]["id"], json!(ids[0]));
    assert_eq!(events[2]["id"], json!(ids[1]));
    assert_eq!(events[2]["data"], json!({"text": "hi there"}));
    for e in &events {
        assert_eq!(e["session_id"], json!(sid));
    }

    // The Log on disk holds exactly what events serves.
    assert_eq!(read_log_lines(&d.log_path(&sid)), events);

    // after_seq, limit and types filter.
    let after = c.call_ok("agentd/events", json!({"session_id": sid, "after_seq": 1}));
    assert_eq!(seqs(after["events"].as_array().unwrap()), vec![2, 3]);
    let page = c.call_ok("agentd/events", json!({"session_id": sid, "limit": 2}));
    assert_eq!(seqs(page["events"].as_array().unwrap()), vec![0, 1]);
    assert_eq!(page["next_after_seq"], 1);
    let typed = c.call_ok(
        "agentd/events",
        json!({"session_id": sid, "types": ["user_message"]}),
    );
    assert_eq!(seqs(typed["events"].as_array().unwrap()), vec![1, 3]);

    let show = c.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(show["event_count"], 4);
    assert_eq!(show["last_seq"], 3);
    assert_eq!(show["title"], "rt");
    assert_eq!(show["event_counts"]["user_message"], 2);
    assert_eq!(show["corrupt_lines"], json!([]));

    let list = c.call_ok("agentd/list", json!({}));
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == json!(sid))
        .unwrap_or_else(|| panic!("session missing from list: {list}"));
    assert_eq!(row["event_count"], 4);
    assert_eq!(row["workspace"], json!(ws));

    // A second create with the same id is refused and the Log is untouched.
    let again = c.call("agentd/create", json!({"workspace": ws, "session_id": sid}));
    assert_eq!(kind(&again), "already_exists");
    assert_eq!(read_log_lines(&d.log_path(&sid)).len(), 4);
    // Unknown sessions are not_found, and no file appears for them.
    let missing = c.call("agentd/events", json!({"session_id": "no_such_session"}));
    assert_eq!(kind(&missing), "not_found");
    assert!(!d.log_path("no_such_session").exists());
}

#[test]
fn concurrent_appenders_get_contiguous_unique_seqs() {
    const CLIENTS: usize = 32;
    const PER_CLIENT: usize = 25;
    let d = Daemon::start();
    let sid = d.create_session();
    let socket = d.socket().to_path_buf();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let socket = socket.clone();
            let sid = sid.clone();
            std::thread::spawn(move || {
                let mut c = RpcConn::connect(&socket).expect("connect");
                c.set_call_timeout(Duration::from_secs(30));
                let mut acked = Vec::new();
                for i in 0..PER_CLIENT {
                    let r = c.call_ok(
                        "agentd/append",
                        json!({"session_id": sid, "events": [
                            {"type": "user_message", "data": {"text": format!("t{t} i{i}")}}
                        ]}),
                    );
                    assert_eq!(r["first_seq"], r["last_seq"]);
                    acked.push((
                        r["ids"][0].as_str().unwrap().to_string(),
                        r["first_seq"].as_u64().unwrap(),
                        format!("t{t} i{i}"),
                    ));
                }
                acked
            })
        })
        .collect();
    let acked: Vec<(String, u64, String)> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("appender thread"))
        .collect();
    assert_eq!(acked.len(), CLIENTS * PER_CLIENT);

    let mut c = d.connect();
    let events = all_events(&mut c, &sid);
    let n = CLIENTS * PER_CLIENT + 1;
    assert_eq!(seqs(&events), (0..n as u64).collect::<Vec<_>>());
    let by_id: BTreeMap<&str, &Value> = events
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e))
        .collect();
    assert_eq!(by_id.len(), n, "duplicate event ids");
    let acked_seqs: HashSet<u64> = acked.iter().map(|a| a.1).collect();
    assert_eq!(
        acked_seqs.len(),
        acked.len(),
        "two appends acked the same seq"
    );
    for (id, seq, text) in &acked {
        let e = by_id
            .get(id.as_str())
            .unwrap_or_else(|| panic!("acked {id} missing"));
        assert_eq!(e["seq"], json!(seq));
        assert_eq!(e["data"]["text"], json!(text));
    }
    // Each client's own appends are in its order.
    let disk = read_log_lines(&d.log_path(&sid));
    assert_eq!(disk, events);
}

#[test]
fn torn_tail_is_quarantined_and_repaired_once() {
    let mut d = Daemon::builder().build();
    let sid = "torn1";
    let sessions = d.home().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let good = format!(
        "{}\n{}\n",
        started(sid, d.workspace()),
        line(sid, 1, "user_message", json!({"text": "before the crash"}))
    );
    let torn = br#"{"id":"00000000000abc02","session_id":"torn1","seq":2,"ts":"2026-01-01T0"#;
    let mut bytes = good.clone().into_bytes();
    bytes.extend_from_slice(torn);
    std::fs::write(d.log_path(sid), &bytes).unwrap();

    d.spawn();
    d.wait_ready(Duration::from_secs(10)).unwrap();
    let mut c = d.connect();
    let show = c.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(show["corrupt_lines"], json!([]), "{show}");

    let qdir = d.home().join("quarantine");
    let quarantined: Vec<_> = std::fs::read_dir(&qdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(std::fs::read(&quarantined[0]).unwrap(), torn);
    let qname = quarantined[0].file_name().unwrap().to_str().unwrap();
    assert!(
        qname.starts_with("torn1.") && qname.ends_with(".torn"),
        "{qname}"
    );

    let events = all_events(&mut c, sid);
    assert_eq!(seqs(&events), vec![0, 1, 2]);
    let rep = &events[2];
    assert_eq!(rep["type"], "log_repaired");
    assert_eq!(rep["data"]["torn_bytes"], json!(torn.len()));
    assert_eq!(rep["data"]["detected_at_seq"], 2);
    assert_eq!(
        Path::new(rep["data"]["quarantine_path"].as_str().unwrap()),
        quarantined[0]
    );

    let a = c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "after"}}]}),
    );
    assert_eq!(a["first_seq"], 3);
    let disk_bytes = std::fs::read(d.log_path(sid)).unwrap();
    assert!(
        disk_bytes.starts_with(good.as_bytes()),
        "earlier lines changed"
    );
    let disk = read_log_lines(&d.log_path(sid));
    assert_eq!(disk.len(), 4);
    assert_eq!(disk[3]["data"]["text"], "after");

    // A restart finds nothing to repair: no second quarantine file, no second event.
    drop(c);
    d.restart();
    let mut c = d.connect();
    assert_eq!(seqs(&all_events(&mut c, sid)), vec![0, 1, 2, 3]);
    assert_eq!(std::fs::read_dir(&qdir).unwrap().count(), 1);
}

#[test]
fn corrupt_middle_line_and_unknown_type_do_not_stop_loading() {
    let mut d = Daemon::builder().build();
    let sid = "damaged";
    std::fs::create_dir_all(d.home().join("sessions")).unwrap();
    let corrupt = "{\"id\":\"half a line\", this is not json";
    let text = format!(
        "{}\n{}\n{}\n{}\n{}\n",
        started(sid, d.workspace()),
        line(sid, 1, "user_message", json!({"text": "one"})),
        corrupt,
        line(sid, 2, "x_future_type", json!({"anything": [1, 2]})),
        line(sid, 3, "assistant_message", json!({"text": "three"})),
    );
    std::fs::write(d.log_path(sid), &text).unwrap();
    d.spawn();
    d.wait_ready(Duration::from_secs(10)).unwrap();

    let mut c = d.connect();
    let show = c.call_ok("agentd/show", json!({"session_id": sid}));
    let corrupt_lines = show["corrupt_lines"].as_array().unwrap();
    assert_eq!(corrupt_lines.len(), 1, "{show}");
    assert_eq!(corrupt_lines[0]["line"], 3);
    let offset = text.find(corrupt).unwrap();
    assert_eq!(corrupt_lines[0]["byte_offset"], json!(offset));
    assert_eq!(show["unknown_types"], json!({"x_future_type": 1}));
    assert_eq!(show["event_count"], 4);
    assert_eq!(show["last_seq"], 3);

    let events = all_events(&mut c, sid);
    assert_eq!(seqs(&events), vec![0, 1, 2, 3]);
    assert_eq!(events[2]["type"], "x_future_type");
    assert_eq!(events[2]["data"], json!({"anything": [1, 2]}));

    let a = c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "four"}}]}),
    );
    assert_eq!(a["first_seq"], 4);
    // The damaged line is never rewritten; the new line follows the old bytes.
    let after = std::fs::read_to_string(d.log_path(sid)).unwrap();
    assert!(after.starts_with(&text), "earlier bytes changed");
    assert_eq!(after.lines().count(), 6);
    // agentctl shows the same.
    let out = d.agentctl(["--json", "show", sid]);
    out.assert_code(0);
    assert_eq!(out.json()["corrupt_lines"][0]["line"], 3);
    assert_eq!(out.json()["unknown_types"]["x_future_type"], 1);
}

#[test]
fn hostile_session_ids_are_refused_without_touching_the_filesystem() {
    let d = Daemon::start();
    let good = d.create_session();
    let mut c = d.connect();
    let ws = d.workspace().display().to_string();
    let long = "x".repeat(300);
    let hostile: Vec<String> = vec![
        "../x".into(),
        "a/b".into(),
        String::new(),
        long,
        "a\0b".into(),
        "é".into(),
        "..".into(),
        "../../../../tmp/agentd-escape".into(),
        "ok\nname".into(),
    ];
    let before = tree_snapshot(d.root());
    for id in &hostile {
        let calls = [
            ("agentd/create", json!({"workspace": ws, "session_id": id})),
            ("agentd/show", json!({"session_id": id})),
            (
                "agentd/append",
                json!({"session_id": id, "events": [{"type": "user_message", "data": {"text": "x"}}]}),
            ),
            ("agentd/events", json!({"session_id": id})),
            ("agentd/subscribe", json!({"session_id": id})),
        ];
        for (method, params) in calls {
            let r = c.call(method, params);
            assert_eq!(kind(&r), "invalid_args", "{method} {id:?}: {r}");
            let message = r["error"]["message"].as_str().unwrap();
            if !id.is_empty() && id.len() > 2 {
                assert!(
                    !message.contains(id.as_str()),
                    "{method} echoed {id:?}: {r}"
                );
                let escaped = serde_json::to_string(id).unwrap();
                let escaped = &escaped[1..escaped.len() - 1];
                assert!(
                    !r.to_string().contains(escaped),
                    "{method} echoed {id:?} in the error: {r}"
                );
            }
        }
    }
    // The connection still works and nothing was created anywhere.
    c.call_ok("agentd/show", json!({"session_id": good}));
    let after = tree_snapshot(d.root());
    assert_eq!(before, after, "files appeared or vanished");
    assert!(!Path::new("/tmp/agentd-escape.ndjson").exists());

    // agentctl refuses them with exit 2 as well.
    for id in ["../x", "a/b"] {
        let out = d.agentctl(["--json", "show", id]);
        out.assert_code(2);
        assert_eq!(out.json()["error"]["kind"], "invalid_args");
    }
    assert_eq!(before, tree_snapshot(d.root()));
}

#[test]
fn duplicate_and_missing_seqs_are_reported_and_next_seq_is_max_plus_one() {
    let mut d = Daemon::builder().build();
    let sid = "anomalous";
    std::fs::create_dir_all(d.home().join("sessions")).unwrap();
    let text = format!(
        "{}\n{}\n{}\n{}\n",
        started(sid, d.workspace()),
        line(sid, 1, "user_message", json!({"text": "a"})),
        line(sid, 1, "user_message", json!({"text": "b"})).replace("abc001", "abc101"),
        line(sid, 5, "user_message", json!({"text": "c"})),
    );
    std::fs::write(d.log_path(sid), &text).unwrap();
    d.spawn();
    d.wait_ready(Duration::from_secs(10)).unwrap();
    let mut c = d.connect();
    let show = c.call_ok("agentd/show", json!({"session_id": sid}));
    let anomalies = show["seq_anomalies"].as_array().unwrap();
    assert_eq!(anomalies.len(), 2, "{show}");
    assert_eq!(anomalies[0]["seq"], 1);
    assert_eq!(anomalies[1]["seq"], 5);
    assert_eq!(show["last_seq"], 5);
    let a = c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": "d"}}]}),
    );
    assert_eq!(a["first_seq"], 6);
    assert!(std::fs::read_to_string(d.log_path(sid))
        .unwrap()
        .starts_with(&text));
}

/// A Log that cannot be read gives its own error kind on every method, never
/// `internal`, and the daemon keeps serving other sessions.
#[test]
fn an_unreadable_log_gives_a_clear_kind_on_every_method() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    std::fs::create_dir_all(d.home().join("sessions/baddir.ndjson")).unwrap();
    let mut c = d.connect();
    for (method, params) in [
        ("agentd/show", json!({"session_id": "baddir"})),
        ("agentd/events", json!({"session_id": "baddir"})),
        ("agentd/context", json!({"session_id": "baddir"})),
        ("agentd/checkpoint", json!({"session_id": "baddir"})),
        (
            "agentd/append",
            json!({"session_id": "baddir", "events": [{"type": "user_message", "data": {"text": "x"}}]}),
        ),
    ] {
        let r = c.call(method, params);
        assert_eq!(kind(&r), "corrupt_log", "{method}: {r}");
    }
    let good = d.create_session();
    let r = c.call("agentd/show", json!({"session_id": good}));
    assert!(r.get("result").is_some(), "{r}");
}

/// A hand-edited Log with a seq at u64::MAX loads (reported as an anomaly) and refuses
/// further appends with `corrupt_log` instead of wrapping onto earlier seqs.
#[test]
fn a_seq_at_u64_max_is_reported_and_never_wraps() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let ws = d.workspace().canonicalize().unwrap();
    let text = format!(
        "{}\n{}\n",
        started("maxed", &ws),
        line(
            "maxed",
            u64::MAX,
            "user_message",
            json!({"text": "far away"})
        )
    );
    std::fs::write(d.home().join("sessions/maxed.ndjson"), text).unwrap();
    let mut c = d.connect();
    let show = c.call_ok("agentd/show", json!({"session_id": "maxed"}));
    assert_eq!(show["event_count"], 2, "{show}");
    assert_eq!(show["seq_anomalies"].as_array().unwrap().len(), 1, "{show}");
    let r = c.call(
        "agentd/append",
        json!({"session_id": "maxed", "events": [{"type": "user_message", "data": {"text": "x"}}]}),
    );
    assert_eq!(kind(&r), "corrupt_log", "{r}");
    let lines = read_log_lines(&d.home().join("sessions/maxed.ndjson"));
    assert_eq!(lines.len(), 2, "nothing appended");
}
