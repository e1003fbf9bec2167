//! The PostgreSQL store through the real daemon, against a private server the tests
//! start (`agentd_tests::pg`): the basics run against both stores (create, append,
//! `agentd/events` paging, subscribe catch-up, a turn with the script provider, fork,
//! list and tree, concurrent appenders), then what only a shared database has: one
//! owner per session across daemons with different homes (hand-over after a clean stop,
//! takeover after kill -9 once the lease ended, a fenced stale owner that cannot write)
//! and a server restart in the middle of appends; leases renewed while idle; the
//! session verbs on the database (search, usage and export of another daemon's
//! sessions, delete/restore/purge with the trash kept in the database); `list`
//! following every change another daemon makes while reading only changed heads.

use agentd_tests::pg::PgServer;
use agentd_tests::{is_type, Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
enum Store {
    File,
    Postgres,
}

/// A daemon on `store`; for PostgreSQL a fresh database of the process's shared server.
fn daemon(store: Store) -> Daemon {
    let b = Daemon::builder();
    match store {
        Store::File => b.start(),
        Store::Postgres => b
            .env("AGENTD_STORE", PgServer::shared().create_db())
            .start(),
    }
}

/// A daemon with its own home on the database at `url`, with leases of `lease_s`.
fn daemon_on(url: &str, lease_s: f64) -> Daemon {
    Daemon::builder()
        .config(&format!("lease_s = {lease_s}\n"))
        .env("AGENTD_STORE", url)
        .start()
}

fn kind(resp: &Value) -> &str {
    resp.pointer("/error/data/kind")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("not an error with a kind: {resp}"))
}

fn create(d: &Daemon, c: &mut RpcConn, extra: Value) -> String {
    let mut p = json!({"workspace": d.workspace()});
    for (k, v) in extra.as_object().into_iter().flatten() {
        p[k] = v.clone();
    }
    c.call_ok("agentd/create", p)["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn append(c: &mut RpcConn, sid: &str, events: Value) -> Value {
    c.call(
        "agentd/append",
        json!({"session_id": sid, "events": events}),
    )
}

fn user(text: &str) -> Value {
    json!([{"type": "user_message", "data": {"text": text}}])
}

/// Every event, paged 100 at a time.
fn all_events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<u64> = None;
    loop {
        let mut p = json!({"session_id": sid, "limit": 100});
        if let Some(a) = after {
            p["after_seq"] = json!(a);
        }
        let r = c.call_ok("agentd/events", p);
        out.extend(r["events"].as_array().unwrap().iter().cloned());
        match r.get("next_after_seq").and_then(Value::as_u64) {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

fn seqs(evs: &[Value]) -> Vec<u64> {
    evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname");
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Polls `f` with a short backoff until it returns `Some`, or panics naming `what`.
fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod file {
            $( #[test] fn $name() { super::$name(super::Store::File) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(super::Store::Postgres) } )*
        }
    };
}

both_stores!(
    append_page_subscribe_and_restart_round_trip,
    turn_fork_list_and_tree,
    concurrent_appenders_across_sessions_get_contiguous_seqs,
);

fn append_page_subscribe_and_restart_round_trip(store: Store) {
    let mut d = daemon(store);
    let mut c = d.connect();
    let sid = create(&d, &mut c, json!({"title": "rt"}));
    // Unknown types and key order survive byte for byte.
    let odd = r#"{"z":1,"a":[1,2],"m":{"b":1,"a":2},"u":"é\u0000"}"#;
    let r = append(
        &mut c,
        &sid,
        json!([{"type": "x_future_kind", "data": serde_json::from_str::<Value>(odd).unwrap()}]),
    );
    assert_eq!(r["result"]["first_seq"], 1, "{r}");
    for batch in 0..10 {
        let evs: Vec<Value> = (0..25)
            .map(|i| json!({"type": "user_message", "data": {"text": format!("m{batch}-{i}")}}))
            .collect();
        let r = append(&mut c, &sid, json!(evs));
        assert_eq!(r["result"]["first_seq"], 2 + batch * 25, "{r}");
    }
    let evs = all_events(&mut c, &sid);
    assert_eq!(seqs(&evs), (0..252).collect::<Vec<u64>>());
    assert!(is_type(&evs[1], "x_future_kind"));
    assert_eq!(serde_json::to_string(&evs[1]["data"]).unwrap(), odd);

    // Catch-up from a seq, then live.
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(246));
    let mut got = Vec::new();
    while got.len() < 5 {
        let ev = sub
            .wait_event(|e| e.get("seq").is_some(), WAIT)
            .unwrap_or_else(|| panic!("catch-up stopped at {got:?}"));
        got.push(ev["seq"].as_u64().unwrap());
    }
    assert_eq!(got, vec![247, 248, 249, 250, 251]);
    append(&mut c, &sid, user("live"));
    let live = sub.wait_event(|e| e.get("seq").is_some(), WAIT).unwrap();
    assert_eq!(live["seq"], 252);
    assert_eq!(live["data"]["text"], "live");

    // What was acknowledged survives a kill -9 and is listed with its count and title.
    let before = all_events(&mut c, &sid);
    d.restart();
    let mut c = d.connect();
    assert_eq!(all_events(&mut c, &sid), before);
    let list = c.call_ok("agentd/list", json!({}));
    let s = &list["sessions"][0];
    assert_eq!(s["session_id"], sid.as_str(), "{list}");
    assert_eq!(s["event_count"], 253, "{list}");
    assert_eq!(s["title"], "rt", "{list}");
}

fn hello_model() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello.json")
        .canonicalize()
        .unwrap();
    format!("script:{}", p.display())
}

fn turn_fork_list_and_tree(store: Store) {
    let mut d = daemon(store);
    let mut c = d.connect();
    let sid = create(
        &d,
        &mut c,
        json!({"model": hello_model(), "title": "parent"}),
    );
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "hi"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = all_events(&mut c, &sid);
    assert!(evs.iter().any(|e| is_type(e, "tool_result")), "{evs:#?}");
    let ended = evs.iter().rfind(|e| is_type(e, "turn_ended")).unwrap();
    assert_eq!(ended["data"]["status"], "completed");

    let f = c.call_ok(
        "agentd/fork",
        json!({"session_id": sid, "child_session_id": "kid"}),
    );
    assert_eq!(f["child_session_id"], "kid", "{f}");
    let child = all_events(&mut c, "kid");
    assert!(is_type(&child[0], "session_fork"), "{:#}", child[0]);
    assert_eq!(child[0]["data"]["parent_session_id"], sid.as_str());
    // The child appends on its own.
    let r = append(&mut c, "kid", user("in the child"));
    assert_eq!(r["result"]["first_seq"], child.len(), "{r}");

    // After a restart the index is rebuilt from the store: list and tree still know both.
    d.restart();
    let mut c = d.connect();
    let list = c.call_ok("agentd/list", json!({}));
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"kid") && ids.contains(&sid.as_str()),
        "{list}"
    );
    let tree = c.call_ok("agentd/tree", json!({"session_id": sid}));
    assert!(tree["drawing"].as_str().unwrap().contains("kid"), "{tree}");
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": "kid", "input": "again"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
}

fn concurrent_appenders_across_sessions_get_contiguous_seqs(store: Store) {
    let d = daemon(store);
    let mut c = d.connect();
    let sids: Vec<String> = (0..6).map(|_| create(&d, &mut c, json!({}))).collect();
    let per_thread = 20;
    let threads = 3;
    std::thread::scope(|s| {
        for sid in &sids {
            for t in 0..threads {
                let d = &d;
                s.spawn(move || {
                    let mut c = d.connect();
                    for i in 0..per_thread {
                        let r = append(&mut c, sid, user(&format!("{t}-{i}")));
                        assert!(r.get("result").is_some(), "{r}");
                    }
                });
            }
        }
    });
    for sid in &sids {
        let evs = all_events(&mut c, sid);
        assert_eq!(
            seqs(&evs),
            (0..=(per_thread * threads) as u64).collect::<Vec<u64>>()
        );
    }
}

#[test]
fn list_and_tree_show_sessions_another_daemon_created_or_appended_to() {
    let url = PgServer::shared().create_db();
    let a = daemon_on(&url, 30.0);
    let b = daemon_on(&url, 30.0);
    let (mut ca, mut cb) = (a.connect(), b.connect());
    // Both daemons are running before b creates anything.
    assert_eq!(ca.call_ok("agentd/list", json!({}))["sessions"], json!([]));
    let sid = create(&b, &mut cb, json!({"title": "made on b"}));
    append(&mut cb, &sid, user("one"));
    let list = ca.call_ok("agentd/list", json!({}));
    let s = &list["sessions"][0];
    assert_eq!(s["session_id"], sid.as_str(), "{list}");
    assert_eq!(s["title"], "made on b", "{list}");
    assert_eq!(s["event_count"], 2, "{list}");
    append(&mut cb, &sid, user("two"));
    let list = ca.call_ok("agentd/list", json!({}));
    assert_eq!(list["sessions"][0]["event_count"], 3, "{list}");
    let tree = ca.call_ok("agentd/tree", json!({"session_id": sid}));
    assert!(tree["drawing"].as_str().unwrap().contains(&sid), "{tree}");
    // Export reads the Log from the database, without taking b's lease.
    let ex = ca.call_ok(
        "agentd/export",
        json!({"session_id": sid, "format": "jsonl"}),
    );
    let lines: Vec<Value> = ex["content"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![0, 1, 2], "{ex}");
    assert_eq!(lines[2]["data"]["text"], "two", "{ex}");
    let r = append(&mut cb, &sid, user("b still owns it"));
    assert!(r.get("result").is_some(), "{r}");
}

#[test]
fn a_session_is_handed_over_when_its_owner_stops_cleanly() {
    let url = PgServer::shared().create_db();
    let mut a = daemon_on(&url, 30.0);
    let mut ca = a.connect();
    let sid = create(&a, &mut ca, json!({"title": "moving"}));
    append(&mut ca, &sid, user("on a"));
    let b = daemon_on(&url, 30.0);
    let mut cb = b.connect();

    // While a holds the lease, b is told who owns the session.
    let r = append(&mut cb, &sid, user("on b too early"));
    assert_eq!(kind(&r), "busy", "{r}");
    let details = &r["error"]["data"]["details"];
    assert_eq!(details["owner_host"], hostname().as_str(), "{r}");
    assert_eq!(details["reason"], "leased", "{r}");
    assert!(details["lease_expires_at"].is_string(), "{r}");
    // b's index came from the database.
    let list = cb.call_ok("agentd/list", json!({}));
    assert_eq!(list["sessions"][0]["session_id"], sid.as_str(), "{list}");

    let status = a.shutdown(WAIT).expect("a stops");
    assert!(status.success());
    // No waiting for the lease to end: a gave it back.
    let r = append(&mut cb, &sid, user("on b"));
    assert_eq!(r["result"]["first_seq"], 2, "{r}");
    let evs = all_events(&mut cb, &sid);
    let texts: Vec<&str> = evs
        .iter()
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["on a", "on b"]);
}

#[test]
fn a_killed_owner_is_taken_over_after_its_lease_and_its_open_turn_reconciled() {
    let url = PgServer::shared().create_db();
    let lease = 4.0;
    let mut a = daemon_on(&url, lease);
    let b = daemon_on(&url, lease);
    let mut ca = a.connect();
    let sid = create(&a, &mut ca, json!({}));
    // A turn cut in the middle of a tool call.
    let r = append(
        &mut ca,
        &sid,
        json!([
            {"type": "turn_started", "data": {"turn_id": "t1"}},
            {"type": "user_message", "data": {"text": "look"}},
            {"type": "tool_call", "data": {"call_id": "c1", "name": "read_file", "args": {"path": "a"}}},
        ]),
    );
    assert!(r.get("result").is_some(), "{r}");
    a.kill9();
    let killed = Instant::now();
    let mut cb = b.connect();
    let r = cb.call("agentd/events", json!({"session_id": sid}));
    assert_eq!(kind(&r), "busy", "the lease of a killed owner runs on: {r}");
    let evs = wait_until("the takeover", WAIT, || {
        let r = cb.call("agentd/events", json!({"session_id": sid}));
        r.get("result")
            .map(|res| res["events"].as_array().unwrap().clone())
    });
    assert!(
        killed.elapsed() >= Duration::from_secs_f64(lease / 3.0),
        "taken over before the lease could have ended"
    );
    let res: Vec<&Value> = evs.iter().filter(|e| is_type(e, "tool_result")).collect();
    assert_eq!(res.len(), 1, "{evs:#?}");
    assert_eq!(res[0]["data"]["error"]["kind"], "orphan_tool_call");
    assert_eq!(
        res[0]["data"]["error"]["details"]["reason"],
        "daemon_restart"
    );
    let ended = evs.iter().rfind(|e| is_type(e, "turn_ended")).unwrap();
    assert_eq!(ended["data"]["reason"], "daemon_restart");
    assert_eq!(seqs(&evs), (0..evs.len() as u64).collect::<Vec<u64>>());
}

#[test]
fn a_stale_owner_whose_lease_was_taken_cannot_write() {
    let url = PgServer::shared().create_db();
    let lease = 2.0;
    let a = daemon_on(&url, lease);
    let mut b = daemon_on(&url, lease);
    let mut ca = a.connect();
    let sid = create(&a, &mut ca, json!({}));
    append(&mut ca, &sid, user("a before the pause"));
    let pid = a.pid().unwrap() as libc::pid_t;
    // SAFETY: signals to our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let mut cb = b.connect();
    let r = wait_until("b to take the lease", WAIT, || {
        let r = append(&mut cb, &sid, user("b after the takeover"));
        r.get("result").is_some().then_some(r)
    });
    assert_eq!(r["result"]["first_seq"], 2, "{r}");
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let r = append(&mut ca, &sid, user("a after the pause"));
    assert_eq!(kind(&r), "busy", "{r}");
    assert_eq!(r["error"]["data"]["details"]["reason"], "lease_lost", "{r}");
    assert_eq!(
        r["error"]["data"]["details"]["owner_host"],
        hostname().as_str(),
        "{r}"
    );
    // The stale daemon drops the session (a request that was already queued to it
    // may still hear `lease_lost`): it then asks the store again and hears who holds
    // the lease, and takes the session back once that daemon lets go.
    let r = wait_until("a to drop the stale session", WAIT, || {
        let r = append(&mut ca, &sid, user("a while b owns it"));
        assert_eq!(kind(&r), "busy", "{r}");
        (r["error"]["data"]["details"]["reason"] == "leased").then_some(r)
    });
    assert_eq!(
        r["error"]["data"]["details"]["owner_host"],
        hostname().as_str(),
        "{r}"
    );
    let evs = all_events(&mut cb, &sid);
    let texts: Vec<&str> = evs
        .iter()
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["a before the pause", "b after the takeover"]);
    drop(cb);
    let status = b.shutdown(WAIT).expect("b stops");
    assert!(status.success(), "b exit: {status:?}");
    let r = append(&mut ca, &sid, user("a after b stopped"));
    assert_eq!(r["result"]["first_seq"], 3, "{r}");
}

#[test]
fn a_server_restart_fails_appends_clearly_loses_nothing_acknowledged_and_reconnects() {
    let pg = PgServer::start();
    let url = pg.create_db();
    let mut d = daemon_on(&url, 30.0);
    let mut c = d.connect();
    let sid = create(&d, &mut c, json!({}));
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let errors: Arc<Mutex<Vec<Value>>> = Arc::default();
    let ok_after_error = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, errors, ok_after_error, stop) = (
            acked.clone(),
            errors.clone(),
            ok_after_error.clone(),
            stop.clone(),
        );
        let mut c = d.connect();
        let sid = sid.clone();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && i < 100_000 {
                i += 1;
                let r = append(&mut c, &sid, user(&format!("m{i}")));
                if let Some(res) = r.get("result") {
                    let id = res["ids"][0].as_str().unwrap().to_string();
                    acked
                        .lock()
                        .unwrap()
                        .push((res["first_seq"].as_u64().unwrap(), id));
                    if !errors.lock().unwrap().is_empty() {
                        ok_after_error.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    errors.lock().unwrap().push(r);
                }
            }
        })
    };
    wait_until("appends to flow", WAIT, || {
        (acked.lock().unwrap().len() >= 30).then_some(())
    });
    pg.stop_server("immediate");
    wait_until("appends to fail", WAIT, || {
        (!errors.lock().unwrap().is_empty()).then_some(())
    });
    pg.start_server();
    let deadline = Instant::now() + WAIT;
    while ok_after_error.load(Ordering::Relaxed) < 10 {
        assert!(
            Instant::now() < deadline,
            "appends did not resume; errors: {:#?}\ndaemon: {}",
            errors
                .lock()
                .unwrap()
                .iter()
                .rev()
                .take(3)
                .collect::<Vec<_>>(),
            d.daemon_output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    for e in errors.lock().unwrap().iter() {
        assert_eq!(kind(e), "log_write_failed", "{e}");
        assert_eq!(e["error"]["data"]["details"]["store"], "postgres", "{e}");
        assert_eq!(
            e["error"]["data"]["details"]["reason"], "store_unavailable",
            "{e}"
        );
    }
    // Everything acknowledged is there, in order, also after the daemon restarts.
    let acked = acked.lock().unwrap().clone();
    for round in 0..2 {
        let evs = all_events(&mut c, &sid);
        assert_eq!(seqs(&evs), (0..evs.len() as u64).collect::<Vec<u64>>());
        for (seq, id) in &acked {
            assert_eq!(
                evs[*seq as usize]["id"].as_str(),
                Some(id.as_str()),
                "round {round}: acknowledged seq {seq} lost"
            );
        }
        d.restart();
        c = d.connect();
    }
    assert!(pg.log().contains("ready to accept connections"));
}

#[test]
fn credentials_come_from_the_url_pgpassword_a_password_file_or_pgpass_and_are_never_shown() {
    let pg = PgServer::start();
    let url = pg.create_db();
    let secret = "s3cr3t-Pw-47";
    pg.require_password(secret);
    let root = tempfile::tempdir().unwrap();

    // No password anywhere: the daemon refuses to start, saying why.
    let mut d = Daemon::builder()
        .env("AGENTD_STORE", &url)
        .env("PGPASSFILE", root.path().join("none"))
        .build();
    d.spawn();
    let err = d.wait_ready(Duration::from_secs(20)).unwrap_err();
    assert!(err.contains("password"), "{err}");

    let with_pw = url.replacen("agentd@", &format!("agentd:{secret}@"), 1);
    let pw_file = root.path().join("pw");
    std::fs::write(&pw_file, format!("{secret}\n")).unwrap();
    let pgpass = root.path().join("pgpass");
    std::fs::write(&pgpass, format!("*:*:*:agentd:{secret}\n")).unwrap();
    let daemons = [
        Daemon::builder().env("AGENTD_STORE", &with_pw),
        Daemon::builder()
            .env("AGENTD_STORE", &url)
            .env("PGPASSWORD", secret),
        Daemon::builder()
            .config(&format!(
                "store = \"{url}\"\nstore_password_file = \"{}\"\n",
                pw_file.display()
            ))
            .env("PGPASSFILE", root.path().join("none")),
        Daemon::builder()
            .env("AGENTD_STORE", &url)
            .env("PGPASSFILE", &pgpass),
    ];
    for (i, b) in daemons.into_iter().enumerate() {
        let d = b.start();
        let mut c = d.connect();
        let sid = create(&d, &mut c, json!({}));
        let r = append(&mut c, &sid, user("authenticated"));
        assert!(r.get("result").is_some(), "source {i}: {r}");
        // `log_path` names where the Log is: the store (redacted) and the session.
        let show = c.call_ok("agentd/show", json!({"session_id": sid}));
        let log_path = show["log_path"].as_str().unwrap_or_default().to_string();
        assert!(
            log_path.starts_with("postgres") && log_path.ends_with(&format!("#{sid}")),
            "source {i}: {show}"
        );
        let doctor = d.agentctl(["doctor", "--json"]);
        let out = format!(
            "{}{}{}{log_path}",
            d.daemon_output(),
            doctor.stdout,
            doctor.stderr
        );
        assert!(
            !out.contains(secret),
            "source {i}: the password was shown:\n{out}"
        );
    }
}

#[test]
fn store_copy_moves_a_home_into_a_database_and_back_byte_exact() {
    let mut d = daemon(Store::File);
    let mut c = d.connect();
    let sid = create(
        &d,
        &mut c,
        json!({"model": hello_model(), "title": "to move"}),
    );
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "hi"}));
    assert_eq!(r["status"], "completed", "{r}");
    c.call_ok(
        "agentd/fork",
        json!({"session_id": sid, "child_session_id": "kid"}),
    );
    let odd = create(&d, &mut c, json!({}));
    append(
        &mut c,
        &odd,
        json!([{"type": "x_future_kind", "data": {"z": 1, "a": "é"}}]),
    );
    let ids = [sid.clone(), "kid".to_string(), odd.clone()];
    d.shutdown(WAIT).expect("daemon stops");
    let home = d.home().to_path_buf();

    let url = PgServer::shared().create_db();
    let out = d.agentctl([
        "--json",
        "store",
        "copy",
        "--from",
        home.to_str().unwrap(),
        "--to",
        &url,
    ]);
    out.assert_code(0);
    let v = out.json();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 3, "{v}");
    let total: u64 = ids
        .iter()
        .map(|s| {
            let p = home.join("sessions").join(format!("{s}.ndjson"));
            std::fs::read(p)
                .unwrap()
                .iter()
                .filter(|b| **b == b'\n')
                .count() as u64
        })
        .sum();
    assert_eq!(v["events"], total, "{v}");

    // Back into a new home: every Log byte for byte, ids kept.
    let back = tempfile::tempdir().unwrap();
    let back_home = back.path().join("home");
    let out = d.agentctl([
        "--json",
        "store",
        "copy",
        "--from",
        &url,
        "--to",
        back_home.to_str().unwrap(),
    ]);
    out.assert_code(0);
    for s in &ids {
        let name = format!("{s}.ndjson");
        assert_eq!(
            std::fs::read(back_home.join("sessions").join(&name)).unwrap(),
            std::fs::read(home.join("sessions").join(&name)).unwrap(),
            "{name} differs after the round trip"
        );
    }

    // A daemon on the database serves the copies and goes on with them.
    let db = daemon_on(&url, 30.0);
    let mut cd = db.connect();
    let evs = all_events(&mut cd, &sid);
    assert!(evs.iter().any(|e| is_type(e, "turn_ended")));
    let r = append(&mut cd, "kid", user("continued on the database"));
    assert!(r.get("result").is_some(), "{r}");

    // A session the destination has is refused, not merged; one session alone copies.
    let again = d.agentctl([
        "--json",
        "store",
        "copy",
        "--from",
        home.to_str().unwrap(),
        "--to",
        &url,
        "--session",
        &odd,
    ]);
    assert_ne!(again.code, Some(0), "{again:?}");
    assert_eq!(again.json()["error"]["kind"], "already_exists", "{again:?}");
    let one = tempfile::tempdir().unwrap();
    let out = d.agentctl([
        "--json",
        "store",
        "copy",
        "--from",
        &url,
        "--to",
        one.path().to_str().unwrap(),
        "--session",
        &odd,
    ]);
    out.assert_code(0);
    assert_eq!(out.json()["sessions"][0]["session_id"], odd.as_str());
    assert_eq!(
        std::fs::read_dir(one.path().join("sessions"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn search_usage_and_export_read_every_daemons_sessions_from_the_database() {
    let url = PgServer::shared().create_db();
    let a = daemon_on(&url, 30.0);
    let b = daemon_on(&url, 30.0);
    let (mut ca, mut cb) = (a.connect(), b.connect());
    let sid = create(&b, &mut cb, json!({"title": "zebra notes"}));
    let r = append(
        &mut cb,
        &sid,
        json!([
            {"type": "user_message", "data": {"text": "where is the Zebra config?"}},
            {"type": "provider_usage", "data": {"provider": "p", "model": "m1",
                "usage": {"input_tokens": 1200, "output_tokens": 34}}},
        ]),
    );
    assert!(r.get("result").is_some(), "{r}");
    // a never loaded the session (b holds its lease) and finds it all the same.
    let hits = ca.call_ok("agentd/search", json!({"query": "zebra"}));
    let refs: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["ref"].as_str().unwrap())
        .collect();
    assert_eq!(refs, vec![format!("{sid}@1")], "{hits}");
    assert_eq!(hits["sessions_scanned"], 1, "{hits}");
    assert!(hits["bytes_scanned"].as_u64().unwrap() > 0, "{hits}");
    let usage = ca.call_ok("agentd/usage", json!({}));
    assert_eq!(usage["total"]["calls"], 1, "{usage}");
    assert_eq!(usage["total"]["input_tokens"], 1200, "{usage}");
    let one = ca.call_ok("agentd/usage", json!({"session_id": sid, "by": "session"}));
    assert_eq!(one["rows"][0]["key"], sid.as_str(), "{one}");
    let r = ca.call("agentd/usage", json!({"session_id": "nope"}));
    assert_eq!(kind(&r), "not_found", "{r}");
    // Export through a is byte-exact with what the database holds.
    let ex = ca.call_ok(
        "agentd/export",
        json!({"session_id": sid, "format": "jsonl"}),
    );
    assert_eq!(
        ex["content"].as_str().unwrap().as_bytes(),
        b.log_bytes(&sid)
    );
    // b still owns the session: nothing above took its lease.
    let r = append(&mut cb, &sid, user("b still owns it"));
    assert!(r.get("result").is_some(), "{r}");
}

#[test]
fn delete_restore_and_purge_keep_the_trash_in_the_database() {
    let url = PgServer::shared().create_db();
    let mut a = daemon_on(&url, 30.0);
    let mut ca = a.connect();
    let sid = create(&a, &mut ca, json!({"title": "to the trash"}));
    append(&mut ca, &sid, user("keep me"));
    let b = daemon_on(&url, 30.0);
    let mut cb = b.connect();
    // b cannot delete a session a owns: busy, naming the owner's host.
    let r = cb.call("agentd/delete", json!({"session_id": sid}));
    assert_eq!(kind(&r), "busy", "{r}");
    assert_eq!(
        r["error"]["data"]["details"]["owner_host"],
        hostname().as_str(),
        "{r}"
    );
    // The owner deletes it: the rows stay, marked, and every daemon stops listing it.
    let del = ca.call_ok("agentd/delete", json!({"session_id": sid}));
    assert_eq!(del["outcome"], "trashed", "{del}");
    assert!(del["trash_path"].as_str().unwrap().contains(&sid), "{del}");
    assert!(a.in_trash(&sid) && !a.has_log(&sid));
    assert!(!a
        .home()
        .join("trash")
        .join(format!("{sid}.ndjson"))
        .exists());
    for c in [&mut ca, &mut cb] {
        let list = c.call_ok("agentd/list", json!({}));
        assert_eq!(list["sessions"], json!([]), "{list}");
        let r = c.call("agentd/show", json!({"session_id": sid}));
        assert_eq!(kind(&r), "not_found", "{r}");
        let r = c.call("agentd/search", json!({"query": "keep"}));
        assert_eq!(r["result"]["hits"], json!([]), "{r}");
    }
    let r = append(&mut ca, &sid, user("into the trash?"));
    assert_eq!(kind(&r), "not_found", "{r}");
    // The id stays taken while the session is in the trash.
    let r = ca.call(
        "agentd/create",
        json!({"workspace": a.workspace(), "session_id": sid}),
    );
    assert_eq!(kind(&r), "already_exists", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("trash"),
        "{r}"
    );
    // `store copy` takes live sessions only, as from a home.
    let other = create(&a, &mut ca, json!({"title": "live"}));
    let dest = tempfile::tempdir().unwrap();
    let dest_home = dest.path().join("home");
    let out = a.agentctl([
        "--json",
        "store",
        "copy",
        "--from",
        &url,
        "--to",
        dest_home.to_str().unwrap(),
    ]);
    out.assert_code(0);
    let copied: Vec<&str> = out.json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(copied, vec![other.as_str()], "{:?}", out.json());
    ca.call_ok("agentd/delete", json!({"session_id": other, "purge": true}));
    let r = ca.call("agentd/delete", json!({"session_id": sid}));
    assert_eq!(kind(&r), "not_found", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("trash"),
        "{r}"
    );
    // Another daemon restores it, and takes it over with everything in place.
    let res = cb.call_ok("agentd/restore", json!({"session_id": sid}));
    assert!(res["log_path"].as_str().unwrap().ends_with(&sid), "{res}");
    let r = cb.call("agentd/restore", json!({"session_id": sid}));
    assert_eq!(kind(&r), "already_exists", "{r}");
    let r = append(&mut cb, &sid, user("back on b"));
    assert_eq!(r["result"]["first_seq"], 2, "{r}");
    let texts: Vec<String> = all_events(&mut cb, &sid)
        .iter()
        .filter_map(|e| e["data"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(texts, vec!["keep me", "back on b"]);
    // Purge: gone from the database, across a restart of a.
    cb.call_ok("agentd/delete", json!({"session_id": sid, "purge": true}));
    assert!(!a.in_trash(&sid) && !a.has_log(&sid));
    let n = PgServer::shared().psql(
        url.rsplit('/').next().unwrap(),
        &format!("SELECT count(*) FROM events WHERE session_id = '{sid}'"),
    );
    assert_eq!(n.trim(), "0");
    drop(ca);
    a.restart();
    let mut ca = a.connect();
    let r = ca.call("agentd/restore", json!({"session_id": sid}));
    assert_eq!(kind(&r), "not_found", "{r}");
    let list = ca.call_ok("agentd/list", json!({"include_archived": true}));
    assert_eq!(list["sessions"], json!([]), "{list}");
}

#[test]
fn list_reads_only_changed_heads_yet_follows_every_change_another_daemon_makes() {
    let url = PgServer::shared().create_db();
    let a = daemon_on(&url, 30.0);
    let b = daemon_on(&url, 30.0);
    let (mut ca, mut cb) = (a.connect(), b.connect());
    let ids = |c: &mut RpcConn, p: Value| -> Vec<(String, String, u64)> {
        let list = c.call_ok("agentd/list", p);
        let mut v: Vec<(String, String, u64)> = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["session_id"].as_str().unwrap().to_string(),
                    s["title"].as_str().unwrap_or_default().to_string(),
                    s["event_count"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let s1 = create(&b, &mut cb, json!({"session_id": "s1", "title": "one"}));
    assert_eq!(ids(&mut ca, json!({})), [("s1".into(), "one".into(), 1)]);
    // Each change b makes shows on a's next list, whichever list read the heads last.
    let s2 = create(&b, &mut cb, json!({"session_id": "s2", "title": "two"}));
    append(&mut cb, &s1, user("more"));
    assert_eq!(
        ids(&mut ca, json!({})),
        [
            ("s1".into(), "one".into(), 2),
            ("s2".into(), "two".into(), 1)
        ]
    );
    assert_eq!(
        ids(&mut ca, json!({})).len(),
        2,
        "an unchanged store lists the same"
    );
    cb.call_ok(
        "agentd/rename",
        json!({"session_id": s2, "title": "renamed"}),
    );
    cb.call_ok("agentd/archive", json!({"session_id": s1}));
    assert_eq!(
        ids(&mut ca, json!({})),
        [("s2".into(), "renamed".into(), 2)]
    );
    assert_eq!(ids(&mut ca, json!({"include_archived": true})).len(), 2);
    cb.call_ok("agentd/delete", json!({"session_id": s2}));
    assert_eq!(
        ids(&mut ca, json!({"include_archived": true})),
        [("s1".into(), "one".into(), 3)]
    );
    // A restart of a reads them all again and agrees.
    cb.call_ok("agentd/restore", json!({"session_id": s2}));
    let shown = ids(&mut ca, json!({"include_archived": true}));
    assert_eq!(shown.len(), 2, "{shown:?}");
    let c = Daemon::builder().env("AGENTD_STORE", &url).start();
    assert_eq!(
        ids(&mut c.connect(), json!({"include_archived": true})),
        shown
    );
}

#[test]
fn an_idle_owner_keeps_renewing_its_lease_past_its_length() {
    let url = PgServer::shared().create_db();
    let db = url.rsplit('/').next().unwrap().to_string();
    let lease = 1.0;
    let a = daemon_on(&url, lease);
    let b = daemon_on(&url, lease);
    let mut ca = a.connect();
    let sid = create(&a, &mut ca, json!({}));
    append(&mut ca, &sid, user("then idle"));
    let expires = || -> f64 {
        PgServer::shared()
            .psql(
                &db,
                &format!(
                    "SELECT extract(epoch FROM lease_expires) FROM sessions WHERE id = '{sid}'"
                ),
            )
            .trim()
            .parse()
            .unwrap()
    };
    let first = expires();
    // Renewals move the expiry on while a does nothing: three lease lengths past
    // where it stood after the last append.
    wait_until("the lease to be renewed past three lengths", WAIT, || {
        (expires() > first + 3.0 * lease).then_some(())
    });
    let mut cb = b.connect();
    let r = append(&mut cb, &sid, user("b while a idles"));
    assert_eq!(kind(&r), "busy", "{r}");
    assert_eq!(r["error"]["data"]["details"]["reason"], "leased", "{r}");
    let r = append(&mut ca, &sid, user("a still owns it"));
    assert_eq!(r["result"]["first_seq"], 2, "{r}");
}

/// A CA and a certificate it signs for `localhost`, as PEM: (CA, server cert, key).
fn test_certs() -> (String, String, String) {
    let (ca, cert, key, _, _) = test_certs_with_client();
    (ca, cert, key)
}

/// [`test_certs`], plus a client certificate and key for the role `agentd`.
fn test_certs_with_client() -> (String, String, String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "agentd test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.distinguished_name.push(DnType::CommonName, "agentd");
    let client = client.signed_by(&client_key, &ca, &ca_key).unwrap();
    (
        ca.pem(),
        cert.pem(),
        key.serialize_pem(),
        client.pem(),
        client_key.serialize_pem(),
    )
}

/// Whether the server sees the daemons' connections encrypted: `(any plain, any TLS)`.
fn agentd_connections_tls(pg: &PgServer) -> (bool, bool) {
    let out = pg.psql(
        "postgres",
        "SELECT coalesce(bool_or(NOT s.ssl), false), coalesce(bool_or(s.ssl), false)
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
         WHERE a.application_name = 'agentd'",
    );
    let (plain, tls) = out.trim().split_once('|').expect("two columns");
    (plain == "t", tls == "t")
}

/// Waits until the daemons stopped so far have no connection left on the server.
fn no_agentd_connections(pg: &PgServer) {
    wait_until("the stopped daemons' connections to close", WAIT, || {
        let n = pg.psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentd'",
        );
        (n.trim() == "0").then_some(())
    });
}

#[test]
fn tls_to_the_database_is_used_and_checked_as_sslmode_asks() {
    let (ca_pem, cert_pem, key_pem) = test_certs();
    let (other_ca_pem, _, _) = test_certs();
    let pg = PgServer::start_tls(&cert_pem, &key_pem);
    pg.psql("postgres", "CREATE DATABASE tls");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&ca, &ca_pem).unwrap();
    std::fs::write(&other_ca, &other_ca_pem).unwrap();
    let url =
        |host: &str, query: String| format!("postgres://agentd@{host}:{}/tls?{query}", pg.port());
    let works = |store: String| {
        let d = Daemon::builder().env("AGENTD_STORE", &store).start();
        let mut c = d.connect();
        let sid = create(&d, &mut c, json!({}));
        let r = append(&mut c, &sid, user("over tcp"));
        assert!(r.get("result").is_some(), "{store}: {r}");
        d
    };

    // verify-full with the right CA and name: the daemon's connections are encrypted,
    // and so is doctor's.
    let store = url(
        "localhost",
        format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let d = works(store.clone());
    assert_eq!(agentd_connections_tls(&pg), (false, true));
    let (check, _) = doctor_database(&d, &store);
    assert!(
        check["ok"] == json!(true)
            && check["detail"]
                .as_str()
                .unwrap_or_default()
                .contains(", TLS,"),
        "{check}"
    );
    drop(d);
    no_agentd_connections(&pg);

    // A certificate from another CA, or for another name: the daemon refuses to start
    // and says why; nothing falls back to plain text.
    for (host, query) in [
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={}", other_ca.display()),
        ),
        (
            "127.0.0.1",
            format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        ),
        (
            "localhost",
            format!("sslmode=verify-ca&sslrootcert={}", other_ca.display()),
        ),
    ] {
        let store = url(host, query);
        let mut d = Daemon::builder().env("AGENTD_STORE", &store).build();
        d.spawn();
        let err = d.wait_ready(Duration::from_secs(20)).unwrap_err();
        assert!(err.to_lowercase().contains("certificate"), "{store}: {err}");
    }

    // verify-ca checks the chain only, so the address serves as well.
    drop(works(url(
        "127.0.0.1",
        format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
    )));
    no_agentd_connections(&pg);
    // require without a root file encrypts without checking, as libpq does.
    let d = works(url("127.0.0.1", "sslmode=require".to_string()));
    assert_eq!(agentd_connections_tls(&pg), (false, true));
    drop(d);
    no_agentd_connections(&pg);
    // No sslmode: libpq's default, prefer, takes the TLS the server offers.
    let d = works(url("localhost", String::new()));
    assert_eq!(agentd_connections_tls(&pg), (false, true));
    drop(d);
    no_agentd_connections(&pg);
    // disable: plain text on TCP.
    let d = works(url("localhost", "sslmode=disable".to_string()));
    assert_eq!(agentd_connections_tls(&pg), (true, false));
    drop(d);
    no_agentd_connections(&pg);

    // A server whose TLS no longer agrees with the daemon's (TLS 1.1 at most; rustls
    // speaks 1.2 and 1.3): prefer goes on in plain text, as libpq does; require fails.
    pg.psql(
        "postgres",
        "ALTER SYSTEM SET ssl_min_protocol_version = 'TLSv1'",
    );
    pg.psql(
        "postgres",
        "ALTER SYSTEM SET ssl_max_protocol_version = 'TLSv1.1'",
    );
    pg.psql("postgres", "SELECT pg_reload_conf()");
    wait_until("the server to reload its TLS settings", WAIT, || {
        let v = pg.psql("postgres", "SHOW ssl_max_protocol_version");
        (v.trim() == "TLSv1.1").then_some(())
    });
    let _d = works(url("localhost", "sslmode=prefer".to_string()));
    assert_eq!(agentd_connections_tls(&pg), (true, false));
    let store = url("localhost", "sslmode=require".to_string());
    let mut d = Daemon::builder().env("AGENTD_STORE", &store).build();
    d.spawn();
    let err = d.wait_ready(Duration::from_secs(20)).unwrap_err();
    assert!(err.to_lowercase().contains("tls"), "{store}: {err}");
}

#[test]
fn a_client_certificate_from_the_url_logs_the_daemon_in() {
    let (ca_pem, cert_pem, key_pem, client_pem, client_key_pem) = test_certs_with_client();
    let pg = PgServer::start_tls(&cert_pem, &key_pem);
    pg.psql("postgres", "CREATE DATABASE mtls");
    pg.require_client_cert(&ca_pem);
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let (ca, cert, key) = (
        file("ca.pem", &ca_pem),
        file("client.pem", &client_pem),
        file("client.key", &client_key_pem),
    );
    let base = format!(
        "postgres://agentd@localhost:{}/mtls?sslmode=verify-full&sslrootcert={ca}",
        pg.port()
    );

    // With the certificate: the server logs the daemon in by it.
    let store = format!("{base}&sslcert={cert}&sslkey={key}");
    let d = Daemon::builder().env("AGENTD_STORE", &store).start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, json!({}));
    let r = append(&mut c, &sid, user("by certificate"));
    assert!(r.get("result").is_some(), "{r}");
    drop(d);

    // Without it the server refuses, and the daemon says so; half a pair is refused
    // before any connection.
    for (store, says) in [
        (base.clone(), "certificate"),
        (format!("{base}&sslcert={cert}"), "sslkey"),
    ] {
        let mut d = Daemon::builder().env("AGENTD_STORE", &store).build();
        d.spawn();
        let err = d.wait_ready(Duration::from_secs(20)).unwrap_err();
        assert!(err.contains(says), "{store}: {err}");
    }
}

/// `agentctl doctor --json`'s check named `name`, from the report on stdout or from
/// the error's details when a check failed.
/// `agentctl doctor --json` with `store` as the daemon's store: its `database` check,
/// and whether doctor exited successfully.
fn doctor_database(d: &Daemon, store: &str) -> (Value, bool) {
    let out = d
        .agentctl_cmd()
        .args(["doctor", "--json"])
        .env("AGENTD_STORE", store)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let checks = v
        .pointer("/result/checks")
        .or_else(|| v.get("checks"))
        .or_else(|| v.pointer("/error/details/checks"))
        .unwrap_or_else(|| panic!("no checks in {v}"));
    let check = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "database")
        .unwrap_or_else(|| panic!("no database check in {v}"))
        .clone();
    (check, out.status.success())
}

#[test]
fn doctor_connects_to_the_database_store_and_reports_schema_and_leases() {
    let pg = PgServer::shared();
    let url = pg.create_db();
    let d = daemon_on(&url, 30.0);
    let mut c = d.connect();
    let sid = create(&d, &mut c, json!({}));
    // Loaded to append to it: this daemon holds its lease.
    let r = append(&mut c, &sid, user("leased"));
    assert!(r.get("result").is_some(), "{r}");

    let (check, _) = doctor_database(&d, &url);
    let detail = check["detail"].as_str().unwrap_or_default();
    assert_eq!(check["ok"], json!(true), "{check}");
    assert!(detail.starts_with("PostgreSQL "), "{detail}");
    assert!(detail.contains("no TLS"), "{detail}");
    assert!(detail.contains(", 1 sessions"), "{detail}");
    assert!(
        detail.contains(&format!("leases held by {} (1)", hostname())),
        "{detail}"
    );

    // A database nobody can reach: the check fails and says why.
    let nowhere = url.replacen(":5432/", ":1/", 1);
    assert_ne!(nowhere, url);
    let (check, succeeded) = doctor_database(&d, &nowhere);
    assert_eq!(check["ok"], json!(false), "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot connect"),
        "{check}"
    );
    assert!(!succeeded);
}

/// The chaos run with takeovers (docs/durability.md#the-chaos-run): two daemons with
/// homes of their own share the database; each prompt's owner is killed mid-turn and
/// stays down, the client resends the prompt with its id to the other daemon, which
/// takes the lease over once it ran out and finishes the turn (sometimes it is killed
/// too and the first one, restarted, takes the session back). Every prompt: one user
/// message, one turn, one answer (the one the client got), a balanced Log, its command
/// run at most once.
#[test]
fn chaos_another_daemon_takes_a_killed_owners_lease_over_and_answers_once() {
    let seed = std::env::var("AGENTD_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("takeover chaos seed {seed} (AGENTD_CHAOS_SEED={seed} replays it)");
    let url = PgServer::shared().create_db();
    let r = agentd_tests::chaos::takeover_run(&url, 4, seed, |_, _| {});
    eprintln!("{:#?}", r.detail);
    assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
    assert_eq!((r.duplicates, r.lost, r.double_runs), (0, 0, 0), "{r:#?}");
    assert_eq!(r.prompts, 4);
    assert!(
        r.signal_kills >= 2,
        "the owner was killed in every odd round: {r:#?}"
    );
    assert!(
        r.resumes >= 1,
        "no turn was resumed by a daemon taking over: {r:#?}"
    );
}
