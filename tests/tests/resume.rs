//! Turns that finish after a crash, idempotent admission, queued turns and late
//! joiners (docs/durability.md): the real daemon killed with SIGKILL mid-turn (from
//! outside, or by itself at an exact write through the `kill` fault of
//! `AGENTD_FAULTS`), a provider endpoint that records every request it gets across
//! restarts (`agentd_tests::sse::MockProvider`), and real shell commands whose side
//! effects the workspace counts.

use agentd_tests::sse::{chat_partial, chat_rest, chat_text, chat_tools, MockProvider, Reply};
use agentd_tests::{is_type, wait_output, Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn of_type<'a>(evs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| is_type(e, kind)).collect()
}

fn assert_balanced(c: &mut RpcConn, sid: &str) {
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert_eq!(ctx["stats"]["balanced"], true, "{ctx}");
}

/// Waits for the session's `turn_ended` (from the backlog or live); returns it.
fn wait_turn_ended(d: &Daemon, sid: &str) -> Value {
    let mut sub = d.connect();
    sub.subscribe(sid, Some(0));
    sub.wait_event(|e| is_type(e, "turn_ended"), WAIT)
        .unwrap_or_else(|| {
            panic!(
                "no turn_ended within {WAIT:?}; daemon:\n{}",
                d.daemon_output()
            )
        })
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    let mut delay = Duration::from_millis(2);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// Pids whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

fn kill_all(marker: &str) {
    for pid in pids_with(marker) {
        // SAFETY: plain kill(2) on a pid found by our own unique marker.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// The chat messages of a recorded request, as one string to search.
fn messages(req: &Value) -> String {
    req["messages"].to_string()
}

/// A daemon whose default provider is `mock`.
fn daemon(mock: &MockProvider, extra: &str) -> Daemon {
    Daemon::builder()
        .config(&format!("{}{extra}", mock.config()))
        .start()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .canonicalize()
        .expect("example script")
}

/// The daemon is killed while the provider streams the answer; `agentctl turn` (one
/// `client_request_id`, retried across the restart) gets the answer of the resumed
/// turn, and the Log holds one prompt, one turn and one whole answer: the streamed half
/// was never recorded, and the provider was asked again with the same input.
#[test]
fn a_crash_mid_stream_ends_with_exactly_one_answer() {
    let mock = MockProvider::start(|n, _| match n {
        0 => Reply::Hang(chat_partial("Half an ans")),
        _ => Reply::Complete(chat_text("The whole answer.")),
    });
    let mut d = daemon(&mock, "");
    let sid = d.create_session();
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let child = d
        .agentctl_cmd()
        .args(["--json", "turn", &sid, "Tell me"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentctl");
    sub.wait_event(
        |e| is_type(e, "text_delta") && e["data"]["text"] == "Half an ans",
        WAIT,
    )
    .expect("the first half streamed");
    d.restart();
    let out = wait_output(child, WAIT).expect("agentctl turn finished after the restart");
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let r = out.json();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output_text"], "The whole answer.", "{r}");

    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let users = of_type(&evs, "user_message");
    assert_eq!(users.len(), 1, "{evs:#?}");
    assert_eq!(users[0]["data"]["text"], "Tell me");
    let started = of_type(&evs, "turn_started");
    assert_eq!(started.len(), 1, "{evs:#?}");
    assert_eq!(started[0]["data"]["turn_id"], r["turn_id"]);
    assert!(started[0]["data"]["client_request_id"].is_string());
    let answers: Vec<&Value> = of_type(&evs, "assistant_message");
    assert_eq!(answers.len(), 1, "{evs:#?}");
    assert_eq!(answers[0]["data"]["text"], "The whole answer.");
    let resumed = of_type(&evs, "turn_resumed");
    assert_eq!(resumed.len(), 1, "{evs:#?}");
    assert_eq!(resumed[0]["data"]["turn_id"], r["turn_id"]);
    assert_eq!(resumed[0]["data"]["resumed"], 1);
    let ended = of_type(&evs, "turn_ended");
    assert_eq!(ended.len(), 1, "{evs:#?}");
    assert_eq!(ended[0]["data"]["status"], "completed");
    assert_eq!(ended[0]["data"]["resumed"], 1);

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!(
        reqs[0]["messages"], reqs[1]["messages"],
        "the step asked again as it was"
    );
    assert!(!messages(&reqs[1]).contains("Half an ans"));
    assert_balanced(&mut c, &sid);
}

/// A step asks for a `shell` command and a `read_file`; the daemon is killed while the
/// command runs. After the restart the command is not run again (the workspace counts
/// one run) and is closed `outcome_unknown`, which the model is told in its next
/// request; the `read_file`, replay-safe, is run.
#[test]
fn a_shell_cut_by_a_crash_ran_once_and_a_read_file_is_run_again() {
    let marker = format!("agentd_resume_shell_{}", std::process::id());
    let command = format!("echo ran >> count.txt; exec -a {marker} sleep 60");
    let mock = MockProvider::start(move |n, _| match n {
        0 => Reply::Complete(chat_tools(&[
            ("c_sh", "shell", json!({"command": command})),
            ("c_rd", "read_file", json!({"path": "notes.txt"})),
        ])),
        _ => Reply::Complete(chat_text("Checked.")),
    });
    let mut d = daemon(&mock, "");
    std::fs::write(d.workspace().join("notes.txt"), "the notes\n").unwrap();
    let sid = d.create_session();
    let mut c = d.connect();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "count and read", "wait": false,
               "client_request_id": "shell-once"}),
    );
    let turn_id = r["turn_id"].as_str().unwrap().to_string();
    let count = d.workspace().join("count.txt");
    wait_until("the command to run", || {
        count.exists() && !pids_with(&marker).is_empty()
    });
    d.restart();
    kill_all(&marker);
    let ended = wait_turn_ended(&d, &sid);
    assert_eq!(ended["data"]["turn_id"], turn_id.as_str());
    assert_eq!(ended["data"]["status"], "completed", "{ended}");
    assert_eq!(ended["data"]["resumed"], 1);
    assert_eq!(
        std::fs::read_to_string(&count).unwrap(),
        "ran\n",
        "the command ran once"
    );

    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let result = |id: &str| {
        of_type(&evs, "tool_result")
            .into_iter()
            .filter(|e| e["data"]["call_id"] == id)
            .cloned()
            .collect::<Vec<_>>()
    };
    let sh = result("c_sh");
    assert_eq!(sh.len(), 1, "{evs:#?}");
    assert_eq!(sh[0]["data"]["ok"], false);
    assert_eq!(sh[0]["data"]["error"]["kind"], "outcome_unknown");
    let rd = result("c_rd");
    assert_eq!(rd.len(), 1, "{evs:#?}");
    assert_eq!(rd[0]["data"]["ok"], true, "{}", rd[0]);
    assert!(rd[0]["data"]["output"]
        .as_str()
        .unwrap()
        .contains("the notes"));
    let resumed = of_type(&evs, "turn_resumed");
    assert_eq!(resumed.len(), 1);
    assert_eq!(
        resumed[0]["data"]["closed"],
        json!([{"call_id": "c_sh", "tool": "shell"}])
    );
    assert_eq!(
        resumed[0]["data"]["rerun"],
        json!([{"call_id": "c_rd", "tool": "read_file"}])
    );
    assert_eq!(
        of_type(&evs, "tool_call").len(),
        2,
        "no call was asked for again"
    );

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    let told = messages(&reqs[1]);
    assert!(told.contains("outcome_unknown"), "{told}");
    assert!(told.contains("may or may not have taken effect"), "{told}");
    assert!(told.contains("the notes"), "{told}");
    assert_balanced(&mut c, &sid);
}

/// A provider that never finishes a step: the turn is resumed after each of three
/// crashes, then ends `failed` with kind `resume_limit` instead of trying a fourth time.
#[test]
fn a_turn_resumed_three_times_without_progress_ends_with_resume_limit() {
    let mock = MockProvider::start(|_, _| Reply::Hang(chat_partial("thinking")));
    let mut d = daemon(&mock, "");
    let sid = d.create_session();
    let mut c = d.connect();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "never done", "wait": false}),
    );
    for n in 1..=4 {
        mock.wait_requests(n, WAIT);
        d.restart();
    }
    let ended = wait_turn_ended(&d, &sid);
    assert_eq!(ended["data"]["turn_id"], r["turn_id"]);
    assert_eq!(ended["data"]["status"], "failed", "{ended}");
    assert_eq!(ended["data"]["error"]["kind"], "resume_limit", "{ended}");
    assert_eq!(ended["data"]["resumed"], 3, "{ended}");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    assert_eq!(of_type(&evs, "turn_resumed").len(), 3, "{evs:#?}");
    assert_eq!(mock.requests().len(), 4, "no fifth provider call");
    // The session takes new turns.
    let hello = format!("script:{}", example("hello.json").display());
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "hi", "model": hello}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_balanced(&mut c, &sid);
}

/// The same `client_request_id` with the same params answers the turn already
/// admitted (no second prompt); other params under it are a `conflict`; a malformed
/// id is refused.
#[test]
fn a_retried_client_request_id_returns_the_same_turn_and_a_changed_one_conflicts() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let hello = format!("script:{}", example("hello.json").display());
    let sid = d.create_session();
    let mut c = d.connect();
    let p = json!({"session_id": sid, "input": "hi", "model": hello, "client_request_id": "req-1"});
    let first = c.call_ok("agentd/turn", p.clone());
    assert_eq!(first["status"], "completed", "{first}");
    let again = c.call_ok("agentd/turn", p.clone());
    assert_eq!(again["turn_id"], first["turn_id"]);
    assert_eq!(again["status"], "completed");
    assert_eq!(again["output_text"], first["output_text"]);
    assert_eq!(again["first_seq"], first["first_seq"]);
    let mut nowait = p.clone();
    nowait["wait"] = json!(false);
    // `wait` is how to answer, not what was asked: still the same request.
    let r = c.call_ok("agentd/turn", nowait);
    assert_eq!(r["turn_id"], first["turn_id"]);

    let mut changed = p.clone();
    changed["input"] = json!("hello?");
    let e = c.call("agentd/turn", changed);
    assert_eq!(e["error"]["data"]["kind"], "conflict", "{e}");
    assert_eq!(e["error"]["data"]["details"]["turn_id"], first["turn_id"]);

    for bad in [
        json!(""),
        json!("x".repeat(129)),
        json!("tab\there"),
        json!("é"),
    ] {
        let mut q = p.clone();
        q["client_request_id"] = bad;
        let e = c.call("agentd/turn", q);
        assert_eq!(e["error"]["data"]["kind"], "invalid_args", "{e}");
    }
    let evs = events(&mut c, &sid);
    assert_eq!(of_type(&evs, "turn_started").len(), 1, "{evs:#?}");
    assert_eq!(of_type(&evs, "user_message").len(), 1, "{evs:#?}");

    // A restart rebuilds the index from the Log.
    let mut d = d;
    d.restart();
    let mut c = d.connect();
    let after = c.call_ok("agentd/turn", p);
    assert_eq!(after["turn_id"], first["turn_id"]);
    assert_eq!(after["output_text"], first["output_text"]);
    assert_eq!(of_type(&events(&mut c, &sid), "turn_started").len(), 1);
}

/// `agentd/append` with a `client_request_id`: a retry answers the append already made
/// (same seqs and ids, nothing written twice), also after a restart; other events under
/// the same id are a `conflict`.
#[test]
fn a_retried_append_is_written_once() {
    let mut d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let sid = d.create_session();
    let mut c = d.connect();
    let p = json!({"session_id": sid, "client_request_id": "app-1", "events": [
        {"type": "user_message", "data": {"text": "one"}},
        {"type": "assistant_message", "data": {"text": "two"}}
    ]});
    let first = c.call_ok("agentd/append", p.clone());
    assert_eq!(
        first["last_seq"].as_u64(),
        Some(first["first_seq"].as_u64().unwrap() + 1)
    );
    let again = c.call_ok("agentd/append", p.clone());
    assert_eq!(again, first);
    let mut changed = p.clone();
    changed["events"][1]["data"]["text"] = json!("three");
    let e = c.call("agentd/append", changed);
    assert_eq!(e["error"]["data"]["kind"], "conflict", "{e}");
    d.restart();
    let mut c = d.connect();
    assert_eq!(c.call_ok("agentd/append", p), first);
    let evs = events(&mut c, &sid);
    assert_eq!(of_type(&evs, "user_message").len(), 1, "{evs:#?}");
    assert_eq!(of_type(&evs, "assistant_message").len(), 1, "{evs:#?}");
    assert_eq!(
        of_type(&evs, "user_message")[0]["data"]["client_request_id"],
        "app-1"
    );
}

/// `agentd/steer` while the provider streams: the input is recorded as a steering
/// `user_message` and goes with the turn's next provider call (the turn makes one more
/// call for it); with no turn running it is refused with `not_running`.
#[test]
fn steer_reaches_the_next_provider_call_and_is_refused_when_idle() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |n, _| match n {
        0 => {
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
            Reply::Complete(chat_text("First."))
        }
        _ => Reply::Complete(chat_text("Steered answer.")),
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let mut c = d.connect();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "start", "wait": false}),
    );
    mock.wait_requests(1, WAIT);
    let mut sc = d.connect();
    let sid2 = sid.clone();
    let steer = std::thread::spawn(move || {
        sc.call(
            "agentd/steer",
            json!({"session_id": sid2, "input": "also list the tests", "client_request_id": "st-1"}),
        )
    });
    let pending = sub.wait_event(
        |e| is_type(e, "status") && e["data"]["steer_pending"] == true,
        WAIT,
    );
    go_tx.send(()).unwrap();
    let answered = steer.join().unwrap();
    assert!(
        pending.is_some(),
        "the steer was not seen waiting: {answered}"
    );
    let res = &answered["result"];
    assert_eq!(res["turn_id"], r["turn_id"], "{answered}");
    let ended = wait_turn_ended(&d, &sid);
    assert_eq!(ended["data"]["status"], "completed", "{ended}");

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert!(!messages(&reqs[0]).contains("also list the tests"));
    assert!(
        messages(&reqs[1]).contains("also list the tests"),
        "{}",
        messages(&reqs[1])
    );
    let evs = events(&mut c, &sid);
    let users = of_type(&evs, "user_message");
    assert_eq!(users.len(), 2, "{evs:#?}");
    assert_eq!(users[1]["data"]["text"], "also list the tests");
    assert_eq!(users[1]["data"]["steer"], true);
    assert_eq!(users[1]["seq"], res["seq"]);
    let answers: Vec<_> = of_type(&evs, "assistant_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(answers, [json!("First."), json!("Steered answer.")]);

    let e = c.call(
        "agentd/steer",
        json!({"session_id": sid, "input": "too late"}),
    );
    assert_eq!(e["error"]["data"]["kind"], "not_running", "{e}");
    // A retry of the steer that was taken answers it again, idle or not.
    let again = c.call_ok(
        "agentd/steer",
        json!({"session_id": sid, "input": "also list the tests", "client_request_id": "st-1"}),
    );
    assert_eq!(again["seq"], res["seq"]);
    assert_eq!(of_type(&events(&mut c, &sid), "user_message").len(), 2);
    let out = d.agentctl(["--json", "steer", &sid, "from the shell"]);
    assert_eq!(out.code, Some(5), "{}", out.stdout);
    assert_eq!(out.json()["error"]["kind"], "not_running", "{}", out.stdout);
}

/// A turn queued behind a running one is durable: the daemon is killed, the running
/// turn resumes and finishes, then the queued one runs; a withdrawn one never runs.
#[test]
fn a_queued_turn_survives_a_crash_and_runs_after_the_resumed_one() {
    // The first prompt's first call hangs until the crash; after it, calls answer.
    let mock = MockProvider::start(|n, body| {
        if n == 0 {
            Reply::Hang(chat_partial("…"))
        } else if messages(body).contains("second prompt") {
            Reply::Complete(chat_text("Answer two."))
        } else {
            Reply::Complete(chat_text("Answer one."))
        }
    });
    let mut d = daemon(&mock, "");
    let sid = d.create_session();
    let mut c = d.connect();
    let t1 = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "first prompt", "wait": false}),
    )["turn_id"]
        .clone();
    mock.wait_requests(1, WAIT);
    let q2 = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "second prompt", "queue": true}),
    );
    assert_eq!(q2["status"], "queued", "{q2}");
    let q3 = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "third prompt", "queue": true}),
    );
    assert_eq!(q3["status"], "queued");
    let w = c.call_ok(
        "agentd/dequeue",
        json!({"session_id": sid, "turn_id": q3["turn_id"]}),
    );
    assert_eq!(w["dequeued"], true, "{w}");
    let e = c.call(
        "agentd/dequeue",
        json!({"session_id": sid, "turn_id": q3["turn_id"]}),
    );
    assert_eq!(e["error"]["data"]["kind"], "not_found", "{e}");
    d.restart();
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(0));
    let end2 = sub
        .wait_event(
            |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == q2["turn_id"],
            WAIT,
        )
        .unwrap_or_else(|| {
            panic!(
                "the queued turn did not end; daemon:\n{}",
                d.daemon_output()
            )
        });
    assert_eq!(end2["data"]["status"], "completed", "{end2}");
    let evs = events(&mut d.connect(), &sid);
    let ended: Vec<_> = of_type(&evs, "turn_ended")
        .iter()
        .map(|e| (e["data"]["turn_id"].clone(), e["data"]["status"].clone()))
        .collect();
    assert_eq!(ended[0].0, t1, "the resumed turn ends first: {evs:#?}");
    assert_eq!(ended[1], (q2["turn_id"].clone(), json!("completed")));
    assert_eq!(ended.len(), 2, "{evs:#?}");
    let users: Vec<_> = of_type(&evs, "user_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(users, [json!("first prompt"), json!("second prompt")]);
    assert!(!of_type(&evs, "turn_started")
        .iter()
        .any(|e| e["data"]["turn_id"] == q3["turn_id"]));
}

/// Kills the daemon as it is about to record its second `turn_started` (the queued
/// turn's, the turn ahead of it having ended).
const KILL_AT_SECOND_START: &str = "write:kill:2#\"type\":\"turn_started\"";

/// A daemon of its own on `mock` whose session ran a turn (its provider call waiting
/// for `go`) with a prompt queued behind it, and died by its kill fault as the queued
/// turn was about to start. Returns the daemon (stopped, the fault unset), the session
/// and the queued turn's id.
fn queue_then_die_at_its_start(
    mock: &MockProvider,
    go: &std::sync::mpsc::Sender<()>,
) -> (Daemon, String, Value) {
    let mut d = Daemon::builder()
        .config(&mock.config())
        .env("AGENTD_FAULTS", KILL_AT_SECOND_START)
        .start();
    let sid = d.create_session();
    let mut c = d.connect();
    let asked = mock.requests().len();
    c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": format!("first prompt {sid}"), "wait": false}),
    );
    mock.wait_requests(asked + 1, WAIT);
    let q = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": format!("second prompt {sid}"), "queue": true}),
    );
    assert_eq!(q["status"], "queued", "{q}");
    go.send(()).unwrap();
    assert!(
        d.wait_exit(WAIT).is_some(),
        "the daemon did not kill itself at the queued turn's start; output:\n{}",
        d.daemon_output()
    );
    let log = d.log_lines(&sid);
    let ended: Vec<_> = log.iter().filter(|e| is_type(e, "turn_ended")).collect();
    assert_eq!(
        ended.len(),
        1,
        "the turn ahead ended before the crash: {log:#?}"
    );
    assert!(
        !log.iter()
            .any(|e| is_type(e, "turn_started") && e["data"]["turn_id"] == q["turn_id"]),
        "the queued turn had not started at the crash: {log:#?}"
    );
    d.set_env("AGENTD_FAULTS", None);
    (d, sid, q["turn_id"].clone())
}

/// Whether the provider was asked the queued prompt of `sid`.
fn asked(mock: &MockProvider, sid: &str) -> bool {
    let want = format!("second prompt {sid}");
    mock.requests().iter().any(|r| messages(r).contains(&want))
}

/// A prompt queued behind a turn that ended just before a crash (the daemon died as
/// the queued turn was about to start) runs when the daemon starts again, with no
/// client touching the session; and one whose running-turn marker the crash did not
/// leave (the marker is a hint, the Log decides) runs as soon as the session is
/// loaded for anything, a read included, not only at its next prompt.
#[test]
fn a_queued_turn_whose_predecessor_ended_before_a_crash_starts_on_restart() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |_, body| {
        if messages(body).contains("second prompt") {
            Reply::Complete(chat_text("Answer two."))
        } else {
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
            Reply::Complete(chat_text("Answer one."))
        }
    });
    let (mut d1, s1, q1) = queue_then_die_at_its_start(&mock, &go_tx);
    let (mut d2, s2, q2) = queue_then_die_at_its_start(&mock, &go_tx);
    // A crash between the queued prompt's write and its marker's leaves none.
    let marker = d2.home().join("turns").join("running").join(&s2);
    std::fs::remove_file(&marker).expect("the queued session's marker");
    d2.spawn();
    d2.wait_ready(WAIT).unwrap();

    // Nobody calls d1: it starts the queued turn on its own.
    d1.spawn();
    wait_until("d1 to start the queued turn", || asked(&mock, &s1));
    let mut sub = d1.connect();
    sub.subscribe(&s1, Some(0));
    let end = sub
        .wait_event(
            |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == q1,
            WAIT,
        )
        .unwrap_or_else(|| {
            panic!(
                "the queued turn did not end; daemon:\n{}",
                d1.daemon_output()
            )
        });
    assert_eq!(end["data"]["status"], "completed", "{end}");
    assert!(!asked(&mock, &s2), "nothing loaded d2's session yet");

    // A read loads it, and its queued turn starts.
    events(&mut d2.connect(), &s2);
    let mut sub2 = d2.connect();
    sub2.subscribe(&s2, Some(0));
    let end = sub2
        .wait_event(
            |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == q2,
            WAIT,
        )
        .unwrap_or_else(|| {
            panic!(
                "the queued turn did not end; daemon:\n{}",
                d2.daemon_output()
            )
        });
    assert_eq!(end["data"]["status"], "completed", "{end}");

    for (d, sid) in [(&d1, &s1), (&d2, &s2)] {
        let mut c = d.connect();
        let evs = events(&mut c, sid);
        let users: Vec<_> = of_type(&evs, "user_message")
            .iter()
            .map(|e| e["data"]["text"].clone())
            .collect();
        assert_eq!(
            users,
            [
                json!(format!("first prompt {sid}")),
                json!(format!("second prompt {sid}"))
            ]
        );
        let answers: Vec<_> = of_type(&evs, "assistant_message")
            .iter()
            .map(|e| e["data"]["text"].clone())
            .collect();
        assert_eq!(
            answers,
            [json!("Answer one."), json!("Answer two.")],
            "{evs:#?}"
        );
        assert_eq!(of_type(&evs, "turn_started").len(), 2, "{evs:#?}");
        assert_balanced(&mut c, sid);
    }
    assert_eq!(
        mock.requests().len(),
        4,
        "each prompt asked the provider once"
    );
}

/// Subscribes on a new connection (from `after_seq`) and returns every event it gets
/// until `until` matches one (that one included).
fn collect_until(
    d: &Daemon,
    sid: &str,
    after_seq: Option<u64>,
    sub: &mut Option<agentd_tests::RpcConn>,
    mut until: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let c = sub.get_or_insert_with(|| {
        let mut c = d.connect();
        c.subscribe(sid, after_seq);
        c
    });
    let mut got = Vec::new();
    c.wait_event(
        |e| {
            got.push(e.clone());
            until(e)
        },
        WAIT,
    )
    .unwrap_or_else(|| panic!("not seen within {WAIT:?}: {got:#?}"));
    got
}

fn text_of(evs: &[Value]) -> String {
    evs.iter()
        .filter(|e| is_type(e, "text_delta"))
        .map(|e| e["data"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// A client that subscribes while the provider streams gets the turn's durable events
/// so far from the Log, then what the step streamed so far as one catch-up delta,
/// then the live deltas: its text is the whole answer, nothing missing, nothing twice.
/// One joining after the step was recorded gets no catch-up (the answer is in the Log).
#[test]
fn a_late_joiner_sees_the_turn_so_far_with_no_gap_and_no_duplicate() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(Some(go_rx));
    let mock = MockProvider::start(move |_, _| {
        let rx = go_rx.lock().unwrap().take().expect("one provider call");
        Reply::Gated(
            format!("{}{}", chat_partial("Hello, "), chat_partial("wor")),
            Box::new(move || {
                let _ = rx.recv_timeout(WAIT);
            }),
            chat_rest("ld."),
        )
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut early = d.connect();
    early.subscribe(&sid, None);
    let mut c = d.connect();
    let t = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "greet me", "wait": false}),
    );
    early
        .wait_event(
            |e| is_type(e, "text_delta") && e["data"]["text"] == "wor",
            WAIT,
        )
        .expect("the first two deltas streamed");
    // Joins mid-step: from the start of the Log, and live only.
    let mut from_start = None;
    let mut live_only = None;
    let first = collect_until(&d, &sid, Some(0), &mut from_start, |e| {
        is_type(e, "text_delta")
    });
    let first_live = collect_until(&d, &sid, None, &mut live_only, |e| is_type(e, "text_delta"));
    go_tx.send(()).unwrap();
    let rest = collect_until(&d, &sid, Some(0), &mut from_start, |e| {
        is_type(e, "turn_ended")
    });
    let rest_live = collect_until(&d, &sid, None, &mut live_only, |e| is_type(e, "turn_ended"));

    let catch_up = first.last().unwrap();
    assert_eq!(
        catch_up["data"],
        json!({"text": "Hello, wor", "catch_up": true}),
        "{first:#?}"
    );
    let all: Vec<Value> = first.iter().chain(&rest).cloned().collect();
    assert_eq!(text_of(&all), "Hello, world.", "{all:#?}");
    // The durable events, each once and in order, from the first.
    let seqs: Vec<u64> = all.iter().filter_map(|e| e["seq"].as_u64()).collect();
    let want: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(seqs, want, "{all:#?}");
    let log_seqs: Vec<u64> = events(&mut c, &sid)
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .filter(|s| *s > 0)
        .collect();
    assert_eq!(seqs, log_seqs, "every durable event after seq 0, once");
    let answers: Vec<_> = of_type(&all, "assistant_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(answers, [json!("Hello, world.")]);
    assert_eq!(
        of_type(&all, "turn_started")[0]["data"]["turn_id"],
        t["turn_id"]
    );

    let live: Vec<Value> = first_live.iter().chain(&rest_live).cloned().collect();
    assert_eq!(
        first_live.len(),
        1,
        "nothing durable before the catch-up: {first_live:#?}"
    );
    assert_eq!(text_of(&live), "Hello, world.", "{live:#?}");

    // After the step is recorded there is nothing to catch up on.
    let mut after = None;
    let done = collect_until(&d, &sid, Some(0), &mut after, |e| is_type(e, "turn_ended"));
    assert_eq!(text_of(&done), "", "{done:#?}");
    assert_eq!(of_type(&done, "assistant_message").len(), 1);
}

/// The chaos run with a few prompts (`agentd_tests::chaos`; the long run is
/// `examples/chaos_run.rs`): the daemon killed at seeded moments, by itself before a
/// chosen write or from outside, while `agentctl turn` retries with its id. Every
/// prompt has one user message, one turn, one answer, a balanced Log, and its command
/// ran at most once. The seed is printed; `AGENTD_CHAOS_SEED` replays one.
#[test]
fn chaos_every_prompt_is_answered_once_and_no_command_runs_twice() {
    let seed = std::env::var("AGENTD_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("chaos seed {seed} (AGENTD_CHAOS_SEED={seed} replays it)");
    let r = agentd_tests::chaos::run(6, seed, |_, _| {});
    assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
    assert_eq!((r.duplicates, r.lost, r.double_runs), (0, 0, 0), "{r:#?}");
    assert_eq!(r.prompts, 6);
}

/// A client that starts its next turn the moment it sees `turn_ended` (as editors and
/// Codex's clients do) is admitted, never refused `busy`: the ended turn's slot is
/// freed right after that event, and a turn asked for in between waits for it. The
/// window was an instant, so three sessions each chain many turns.
#[test]
fn a_turn_started_on_seeing_turn_ended_is_never_refused_busy() {
    const TURNS: usize = 50;
    let mock = MockProvider::start(|_, body| {
        let (user, _) = agentd_tests::sse::last_user_and_tool_results(body);
        let n = user.strip_prefix("prompt ").unwrap_or("?").to_string();
        Reply::Complete(chat_text(&format!("Answer {n}.")))
    });
    let d = daemon(&mock, "");
    let chains: Vec<_> = (0..3)
        .map(|_| {
            let sid = d.create_session();
            let (mut sub, mut c) = (d.connect(), d.connect());
            std::thread::spawn(move || {
                sub.subscribe(&sid, None);
                for i in 0..TURNS {
                    let r = c.call(
                        "agentd/turn",
                        json!({"session_id": sid, "input": format!("prompt {i}"), "wait": false}),
                    );
                    let tid = r["result"]["turn_id"].clone();
                    assert!(
                        tid.is_string(),
                        "prompt {i}, sent on the previous turn_ended: {r}"
                    );
                    let ended = sub
                        .wait_event(
                            |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == tid,
                            WAIT,
                        )
                        .unwrap_or_else(|| panic!("turn {i} of {sid} did not end"));
                    assert_eq!(ended["data"]["status"], "completed", "{ended}");
                }
                (sid, c)
            })
        })
        .collect();
    for chain in chains {
        let (sid, mut c) = chain.join().expect("a chain of turns was refused");
        let evs = events(&mut c, &sid);
        let users: Vec<_> = of_type(&evs, "user_message")
            .iter()
            .map(|e| e["data"]["text"].clone())
            .collect();
        let want: Vec<_> = (0..TURNS).map(|i| json!(format!("prompt {i}"))).collect();
        assert_eq!(users, want);
        let answers: Vec<_> = of_type(&evs, "assistant_message")
            .iter()
            .map(|e| e["data"]["text"].clone())
            .collect();
        let want: Vec<_> = (0..TURNS).map(|i| json!(format!("Answer {i}."))).collect();
        assert_eq!(answers, want);
    }
}

/// A steer sent the moment the turn's `turn_ended` arrives, before the daemon freed the
/// turn's slot, is refused as for an idle session ("no turn is running"), never taken
/// by the ending turn and never recorded. The window is an instant, so three sessions
/// each steer after many turns.
#[test]
fn a_steer_sent_on_seeing_turn_ended_is_refused_as_idle() {
    const TURNS: usize = 30;
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("Done.")));
    let d = daemon(&mock, "");
    let chains: Vec<_> = (0..3)
        .map(|_| {
            let sid = d.create_session();
            let (mut sub, mut c) = (d.connect(), d.connect());
            std::thread::spawn(move || {
                sub.subscribe(&sid, None);
                for i in 0..TURNS {
                    let r = c.call(
                        "agentd/turn",
                        json!({"session_id": sid, "input": format!("prompt {i}"), "wait": false}),
                    );
                    let tid = r["result"]["turn_id"].clone();
                    assert!(tid.is_string(), "prompt {i}: {r}");
                    sub.wait_event(
                        |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == tid,
                        WAIT,
                    )
                    .unwrap_or_else(|| panic!("turn {i} of {sid} did not end"));
                    let e = c.call(
                        "agentd/steer",
                        json!({"session_id": sid, "input": format!("late {i}")}),
                    );
                    assert_eq!(e["error"]["data"]["kind"], "not_running", "{e}");
                    assert!(
                        e["error"]["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with("no turn is running")),
                        "steer {i}, sent on turn_ended: {e}"
                    );
                }
                (sid, c)
            })
        })
        .collect();
    for chain in chains {
        let (sid, mut c) = chain.join().expect("a steer was answered otherwise");
        let evs = events(&mut c, &sid);
        let users: Vec<_> = of_type(&evs, "user_message")
            .iter()
            .map(|e| e["data"]["text"].clone())
            .collect();
        let want: Vec<_> = (0..TURNS).map(|i| json!(format!("prompt {i}"))).collect();
        assert_eq!(users, want, "no late steer is recorded");
    }
}

/// A non-queued `agentd/turn` never runs ahead of prompts queued before it: sent the
/// moment the turn ahead of the queue ended, it is refused `busy` naming the oldest
/// queued turn (docs/protocol.md#turn-order), the queued prompt runs next, and the
/// refused prompt reaches neither the Log nor the provider. Once the queue has drained,
/// the same prompt is admitted.
#[test]
fn a_new_turn_does_not_run_ahead_of_queued_ones() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |n, body| {
        if n == 0 {
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
        }
        let m = messages(body);
        let text = if m.contains("eager prompt") {
            "Eager answer."
        } else if m.contains("queued prompt") {
            "Queued answer."
        } else {
            "First answer."
        };
        Reply::Complete(chat_text(text))
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let mut c = d.connect();
    let t1 = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "first prompt", "wait": false}),
    )["turn_id"]
        .clone();
    mock.wait_requests(1, WAIT);
    let q = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "queued prompt", "queue": true}),
    );
    assert_eq!(q["status"], "queued", "{q}");
    go_tx.send(()).unwrap();
    sub.wait_event(
        |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == t1,
        WAIT,
    )
    .expect("the first turn ended");
    let e = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "eager prompt", "wait": false}),
    );
    assert_eq!(e["error"]["data"]["kind"], "busy", "{e}");
    assert_eq!(
        e["error"]["data"]["details"]["turn_id"], q["turn_id"],
        "refused behind the queued turn, not the one that ended: {e}"
    );
    let end_q = sub
        .wait_event(
            |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == q["turn_id"],
            WAIT,
        )
        .unwrap_or_else(|| {
            panic!(
                "the queued turn did not end; daemon:\n{}",
                d.daemon_output()
            )
        });
    assert_eq!(end_q["data"]["status"], "completed", "{end_q}");
    let evs = events(&mut c, &sid);
    let users: Vec<_> = of_type(&evs, "user_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(users, [json!("first prompt"), json!("queued prompt")]);
    assert!(
        !mock
            .requests()
            .iter()
            .any(|r| messages(r).contains("eager prompt")),
        "the refused prompt reached the provider"
    );

    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "eager prompt"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output_text"], "Eager answer.");
    let answers: Vec<_> = of_type(&events(&mut c, &sid), "assistant_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(
        answers,
        [
            json!("First answer."),
            json!("Queued answer."),
            json!("Eager answer.")
        ]
    );
}

/// A steer sent again with its `client_request_id` while the first still waits for the
/// turn's next provider call (the client's connection dropped and it retried) is
/// recorded once, and both requests are answered with its seq; the same id with other
/// input is a `conflict`.
#[test]
fn a_steer_retried_while_it_waits_is_recorded_once() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |n, _| match n {
        0 => {
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
            Reply::Complete(chat_text("First."))
        }
        _ => Reply::Complete(chat_text("Steered answer.")),
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let mut c = d.connect();
    let t = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "start", "wait": false}),
    );
    mock.wait_requests(1, WAIT);
    let steer = |d: &Daemon| {
        let mut sc = d.connect();
        let sid = sid.clone();
        std::thread::spawn(move || {
            sc.call(
                "agentd/steer",
                json!({"session_id": sid, "input": "also the docs", "client_request_id": "st-retry"}),
            )
        })
    };
    let first = steer(&d);
    sub.wait_event(
        |e| is_type(e, "status") && e["data"]["steer_pending"] == true,
        WAIT,
    )
    .expect("the first steer waits");
    let retry = steer(&d);
    sub.wait_event(|e| is_type(e, "status") && e["data"]["retry"] == true, WAIT)
        .expect("the retry joined the waiting steer");
    let other = c.call(
        "agentd/steer",
        json!({"session_id": sid, "input": "something else", "client_request_id": "st-retry"}),
    );
    assert_eq!(other["error"]["data"]["kind"], "conflict", "{other}");
    go_tx.send(()).unwrap();
    let (a, b) = (first.join().unwrap(), retry.join().unwrap());
    assert!(a["result"]["seq"].is_u64(), "{a}");
    assert_eq!(
        a["result"], b["result"],
        "both answered with the one recording"
    );
    assert_eq!(a["result"]["turn_id"], t["turn_id"]);
    let ended = wait_turn_ended(&d, &sid);
    assert_eq!(ended["data"]["status"], "completed", "{ended}");
    let evs = events(&mut c, &sid);
    let users: Vec<_> = of_type(&evs, "user_message")
        .iter()
        .map(|e| (e["data"]["text"].clone(), e["seq"].clone()))
        .collect();
    assert_eq!(
        users,
        [
            (json!("start"), users[0].1.clone()),
            (json!("also the docs"), a["result"]["seq"].clone())
        ]
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "{reqs:#?}");
    assert_eq!(messages(&reqs[1]).matches("also the docs").count(), 1);
}
