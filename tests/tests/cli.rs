//! `agentctl` against the real daemon (docs/protocol.md#exit-codes): the create/append/log round trip,
//! `--json` printing exactly one document, exit codes by error kind, and auto-start.

use agentd_tests::{Daemon, Output, RpcConn};
use serde_json::Value;
use std::time::{Duration, Instant};

/// `--json` output is exactly one JSON document on stdout (one line, nothing else).
#[track_caller]
fn one_doc(out: &Output) -> Value {
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&out.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{out:?}"));
    assert_eq!(docs.len(), 1, "not exactly one JSON document:\n{out:?}");
    assert_eq!(
        out.stdout.trim_end().lines().count(),
        1,
        "document spans lines or has extra text:\n{out:?}"
    );
    assert!(docs[0]["ok"].is_boolean(), "no ok field:\n{out:?}");
    docs.into_iter().next().unwrap()
}

#[track_caller]
fn ok_doc(out: &Output) -> Value {
    out.assert_code(0);
    let v = one_doc(out);
    assert_eq!(v["ok"], true, "{out:?}");
    v
}

#[track_caller]
fn err_doc(out: &Output, code: i32, kind: &str) -> Value {
    out.assert_code(code);
    let v = one_doc(out);
    assert_eq!(v["ok"], false, "{out:?}");
    assert_eq!(v["error"]["kind"], kind, "{out:?}");
    assert!(v["error"]["message"].is_string(), "{out:?}");
    assert!(v["error"]["details"].is_object(), "{out:?}");
    v
}

#[test]
fn new_append_log_show_ls_round_trip() {
    let d = Daemon::start();
    let ws = d.workspace().display().to_string();
    let created = ok_doc(&d.agentctl(["--json", "new", "--workspace", &ws, "--title", "cli rt"]));
    let sid = created["session_id"].as_str().unwrap().to_string();
    assert!(d.has_log(&sid));

    // Human `new` prints the id alone.
    let human = d.agentctl(["new", "--title", "second"]);
    human.assert_code(0);
    let sid2 = human.stdout.trim().to_string();
    assert!(d.has_log(&sid2), "{human:?}");

    let a = ok_doc(&d.agentctl([
        "--json",
        "append",
        &sid,
        "--type",
        "user_message",
        "--data",
        r#"{"text":"hello from the cli"}"#,
    ]));
    assert_eq!(a["first_seq"], 1);
    assert_eq!(a["last_seq"], 1);
    let id1 = a["ids"][0].as_str().unwrap().to_string();
    // Data from stdin.
    let b = d.agentctl_stdin(
        [
            "--json",
            "append",
            &sid,
            "--type",
            "assistant_message",
            "--data",
            "-",
        ],
        br#"{"text":"answer via stdin"}"#,
    );
    assert_eq!(ok_doc(&b)["first_seq"], 2);
    // Human append.
    let h = d.agentctl([
        "append",
        &sid,
        "--type",
        "user_message",
        "--data",
        r#"{"text":"third"}"#,
    ]);
    h.assert_code(0);
    assert!(h.stdout.contains('3'), "{h:?}");
    // Bad data JSON is a usage error, nothing written.
    let bad = d.agentctl([
        "--json",
        "append",
        &sid,
        "--type",
        "user_message",
        "--data",
        "{nope",
    ]);
    err_doc(&bad, 2, "invalid_args");

    let log = ok_doc(&d.agentctl(["--json", "log", &sid]));
    let events = log["events"].as_array().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    assert_eq!(events[1]["id"], id1.as_str());
    assert_eq!(events[1]["data"]["text"], "hello from the cli");
    assert_eq!(events[2]["type"], "assistant_message");
    assert_eq!(events[2]["data"]["text"], "answer via stdin");
    assert_eq!(&d.log_lines(&sid), events);

    // Human log: one line per event with seq and type.
    let hl = d.agentctl(["log", &sid]);
    hl.assert_code(0);
    let lines: Vec<&str> = hl.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{hl:?}");
    for (i, (l, ty)) in lines
        .iter()
        .zip([
            "session_started",
            "user_message",
            "assistant_message",
            "user_message",
        ])
        .enumerate()
    {
        assert_eq!(
            l.split_whitespace().next(),
            Some(i.to_string().as_str()),
            "{l}"
        );
        assert!(l.contains(ty), "{l}");
    }
    assert!(lines[1].contains("hello from the cli"), "{}", lines[1]);
    let after = ok_doc(&d.agentctl(["--json", "log", &sid, "--after-seq", "2"]));
    assert_eq!(after["events"].as_array().unwrap().len(), 1);

    let show = ok_doc(&d.agentctl(["--json", "show", &sid]));
    assert_eq!(show["session_id"], sid.as_str());
    assert_eq!(show["event_count"], 4);
    assert_eq!(show["last_seq"], 3);
    assert_eq!(show["title"], "cli rt");
    assert_eq!(show["event_counts"]["user_message"], 2);

    let ls = ok_doc(&d.agentctl(["--json", "ls"]));
    let rows = ls["sessions"].as_array().unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&sid.as_str()) && ids.contains(&sid2.as_str()),
        "{ls}"
    );
    let row = rows
        .iter()
        .find(|r| r["session_id"] == sid.as_str())
        .unwrap();
    assert_eq!(row["event_count"], 4);
    assert_eq!(row["title"], "cli rt");
    let human_ls = d.agentctl(["ls"]);
    human_ls.assert_code(0);
    assert!(
        human_ls.stdout.contains(&sid) && human_ls.stdout.contains("cli rt"),
        "{human_ls:?}"
    );
}

#[test]
fn exit_codes_follow_the_error_kind() {
    let d = Daemon::start();
    let sid = d.create_session();

    let nf = d.agentctl(["--json", "show", "no_such_session"]);
    err_doc(&nf, 2, "not_found");
    let nf_human = d.agentctl(["show", "no_such_session"]);
    nf_human.assert_code(2);
    assert!(nf_human.stdout.is_empty(), "{nf_human:?}");
    assert!(nf_human.stderr.contains("not_found"), "{nf_human:?}");

    let bad = d.agentctl(["--json", "log", "../etc"]);
    err_doc(&bad, 2, "invalid_args");
    assert!(!bad.stdout.contains("../etc"), "hostile id echoed: {bad:?}");

    for args in [
        vec!["--json", "new", "--session-id", "../escape"],
        vec![
            "--json",
            "append",
            "a/b",
            "--type",
            "user_message",
            "--data",
            "{}",
        ],
        vec!["--json", "log", ""],
    ] {
        err_doc(&d.agentctl(&args), 2, "invalid_args");
    }
    assert!(!d.home().join("escape.ndjson").exists());

    let conflict = d.agentctl([
        "--json",
        "append",
        &sid,
        "--type",
        "user_message",
        "--data",
        r#"{"text":"x"}"#,
        "--expect-seq",
        "7",
    ]);
    err_doc(&conflict, 5, "seq_conflict");
    let right = d.agentctl([
        "--json",
        "append",
        &sid,
        "--type",
        "user_message",
        "--data",
        r#"{"text":"x"}"#,
        "--expect-seq",
        "1",
    ]);
    assert_eq!(ok_doc(&right)["first_seq"], 1);

    let eph = d.agentctl([
        "--json",
        "append",
        &sid,
        "--type",
        "text_delta",
        "--data",
        "{}",
    ]);
    assert_ne!(eph.code, Some(0));
    assert_eq!(one_doc(&eph)["error"]["kind"], "ephemeral_not_loggable");

    // Usage errors under --json are one document too.
    let usage = d.agentctl(["--json", "show"]);
    err_doc(&usage, 2, "invalid_args");
    let usage2 = d.agentctl(["--json", "no-such-command"]);
    err_doc(&usage2, 2, "invalid_args");

    // Every --json success is one document as well.
    ok_doc(&d.agentctl(["--json", "daemon", "status"]));
    ok_doc(&d.agentctl(["--json", "status"]));
}

#[test]
fn daemon_status_without_a_daemon_exits_4_and_starts_nothing() {
    let d = Daemon::builder().build();
    let out = d.agentctl(["--json", "daemon", "status"]);
    err_doc(&out, 4, "daemon_unavailable");
    let human = d.agentctl(["daemon", "status"]);
    human.assert_code(4);
    assert!(
        std::fs::symlink_metadata(d.socket()).is_err(),
        "daemon status started a daemon"
    );
}

#[test]
fn agentctl_starts_a_daemon_on_demand_and_stops_it() {
    let d = Daemon::builder().build();
    assert!(std::fs::symlink_metadata(d.socket()).is_err());
    let ls = ok_doc(&d.agentctl(["--json", "ls"]));
    assert_eq!(ls["sessions"], serde_json::json!([]));
    // A daemon now answers on the socket, with our home.
    let mut c = RpcConn::connect(d.socket()).expect("auto-started daemon answers");
    let hello = c.call_ok("agentd/hello", serde_json::json!({}));
    let pid = hello["pid"].as_i64().unwrap() as libc::pid_t;
    assert_eq!(
        std::fs::canonicalize(hello["home"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(d.home()).unwrap()
    );
    drop(c);
    // A second command reuses it.
    let sid = ok_doc(&d.agentctl(["--json", "new"]))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut c = RpcConn::connect(d.socket()).unwrap();
    assert_eq!(c.call_ok("agentd/hello", serde_json::json!({}))["pid"], pid);
    drop(c);

    let stop = d.agentctl(["daemon", "stop"]);
    stop.assert_code(0);
    assert!(
        std::fs::symlink_metadata(d.socket()).is_err(),
        "socket left after daemon stop"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(
            Instant::now() < deadline,
            "daemon {pid} still alive after stop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Stopping when none runs succeeds; the data is still there on the next start.
    d.agentctl(["daemon", "stop"]).assert_code(0);
    let show = ok_doc(&d.agentctl(["--json", "show", &sid]));
    assert_eq!(show["event_count"], 1);
    d.agentctl(["daemon", "stop"]).assert_code(0);
}

#[test]
fn log_follow_streams_ndjson_and_ctrl_c_exits_0() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    let d = Daemon::start();
    let sid = d.create_session();
    let mut child = d
        .agentctl_cmd()
        .args(["--json", "log", &sid, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |rx: &mpsc::Receiver<String>| -> Value {
        let l = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a line from log --follow");
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("not NDJSON ({e}): {l}"))
    };
    assert_eq!(next(&rx)["seq"], 0);
    let mut c = d.connect();
    for i in 1..=3 {
        c.call_ok(
            "agentd/append",
            serde_json::json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": format!("live {i}")}}]}),
        );
    }
    for i in 1..=3 {
        let ev = next(&rx);
        assert_eq!(ev["seq"], i);
        assert_eq!(ev["data"]["text"], format!("live {i}"));
    }
    // SAFETY: kill has no memory preconditions; the pid is our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("log --follow ignored SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    reader.join().unwrap();
}

#[test]
fn socket_flag_and_socket_path_command() {
    let d = Daemon::start();
    let p = d.agentctl(["socket-path"]);
    p.assert_code(0);
    assert_eq!(p.stdout.trim(), d.socket().display().to_string());
    // --socket wins over AGENTD_SOCKET: a path where nothing listens is unavailable.
    let nowhere = d.root().join("nowhere.sock");
    let out = d
        .agentctl_cmd()
        .args(["--json", "--socket"])
        .arg(&nowhere)
        .args(["daemon", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "daemon_unavailable");
}
