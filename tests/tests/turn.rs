//! Black-box tests of turns (docs/turns-and-providers.md#turns, docs/history-rules.md#compaction): the real daemon and agentctl with the
//! offline `script` provider. Every wait is on an event or a response with a deadline.

use agentd_tests::sse::{chat_sse, sse_server, typed_sse};
use agentd_tests::{is_type, Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .canonicalize()
        .expect("example script")
}

fn script_model(path: &Path) -> String {
    format!("script:{}", path.display())
}

/// Writes a script file into the daemon's temp dir and returns its `script:` model.
fn script(d: &Daemon, name: &str, body: Value) -> String {
    let p = d.root().join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(&body).unwrap()).unwrap();
    script_model(&p)
}

fn create(d: &Daemon, c: &mut RpcConn, model: Option<&str>) -> String {
    let mut p = json!({"workspace": d.workspace()});
    if let Some(m) = model {
        p["model"] = json!(m);
    }
    c.call_ok("agentd/create", p)["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn types(evs: &[Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

fn of_type<'a>(evs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| is_type(e, kind)).collect()
}

fn turn(c: &mut RpcConn, sid: &str, input: &str, extra: Value) -> Value {
    let mut p = json!({"session_id": sid, "input": input});
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            p[k] = v.clone();
        }
    }
    c.call_ok("agentd/turn", p)
}

fn assert_balanced(c: &mut RpcConn, sid: &str) {
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert_eq!(ctx["stats"]["balanced"], true, "{ctx}");
}

/// Pids whose command line contains `marker` (zombies have an empty one).
fn pids_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
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

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(2);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// A shell command whose process carries `marker` in its command line.
fn sleep_script(d: &Daemon, marker: &str) -> String {
    script(
        d,
        &format!("{marker}.json"),
        json!({"rules": [{"steps": [
            {"tool_calls": [{"name": "shell", "args": {"command": format!("exec -a {marker} sleep 60")}}]},
            {"text": "slept"}
        ]}]}),
    )
}

fn kill_all(marker: &str) {
    for pid in pids_with(marker) {
        // SAFETY: plain kill(2) on a pid we found by our own unique marker.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Starts `agentd/turn` (wait:true) on its own connection in a thread.
fn turn_in_thread(d: &Daemon, params: Value) -> std::thread::JoinHandle<std::io::Result<Value>> {
    let mut c = d.connect();
    std::thread::spawn(move || c.try_call("agentd/turn", params))
}

#[test]
fn run_hello_streams_text_and_records_the_turn() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    std::fs::write(d.workspace().join("README.md"), "hi\n").unwrap();
    let model = script_model(&example("hello.json"));
    let out = d.agentctl(["run", "what is here?", "--model", &model]);
    out.assert_code(0);
    assert!(
        out.stdout
            .contains("Those are the files at the top of your workspace."),
        "{out:?}"
    );
    let sid = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .expect("session id on stderr")
        .trim()
        .to_string();
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let t = types(&evs);
    let want = [
        "session_started",
        "turn_started",
        "user_message",
        "provider_usage",
        "reasoning",
        "assistant_message",
        "tool_call",
        "tool_result",
        "provider_usage",
        "assistant_message",
        "turn_ended",
    ];
    assert_eq!(t, want, "{evs:#?}");
    let call = of_type(&evs, "tool_call")[0];
    assert_eq!(call["data"]["name"], "list_dir");
    let result = of_type(&evs, "tool_result")[0];
    assert_eq!(result["data"]["ok"], true);
    assert!(result["data"]["output"]
        .as_str()
        .unwrap()
        .contains("README.md"));
    let ended = of_type(&evs, "turn_ended")[0];
    assert_eq!(ended["data"]["status"], "completed");
    assert_eq!(
        of_type(&evs, "turn_started")[0]["data"]["provider"],
        "script"
    );
    assert_balanced(&mut c, &sid);
    let show = c.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(show["status"], "idle");
}

#[test]
fn turn_result_and_second_turn_replays_balanced() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let model = script_model(&example("hello.json"));
    let sid = create(&d, &mut c, Some(&model));
    let r1 = turn(&mut c, &sid, "first", json!({}));
    assert_eq!(r1["status"], "completed", "{r1}");
    assert!(r1["output_text"]
        .as_str()
        .unwrap()
        .starts_with("Those are the files"));
    let evs = events(&mut c, &sid);
    assert_eq!(r1["first_seq"], of_type(&evs, "turn_started")[0]["seq"]);
    assert_eq!(r1["last_seq"], evs.last().unwrap()["seq"]);
    let r2 = turn(&mut c, &sid, "second", json!({}));
    assert_eq!(r2["status"], "completed", "{r2}");
    assert_balanced(&mut c, &sid);
    // max_iterations: one provider call that asks for a tool ends the turn there.
    let r3 = turn(&mut c, &sid, "third", json!({"max_iterations": 1}));
    assert_eq!(r3["status"], "completed");
    assert_eq!(r3["reason"], "max_iterations", "{r3}");
    let evs = events(&mut c, &sid);
    let last = evs.last().unwrap();
    assert_eq!(last["data"]["reason"], "max_iterations", "{last}");
    assert_balanced(&mut c, &sid);
}

#[test]
fn concurrent_turn_is_busy_and_interrupt_stops_a_slow_stream() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&script_model(&example("slow.json"))));
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let running = turn_in_thread(&d, json!({"session_id": sid, "input": "tell me a story"}));
    sub.wait_event(|e| is_type(e, "text_delta"), WAIT)
        .expect("a text delta");
    let busy = c.call("agentd/turn", json!({"session_id": sid, "input": "again"}));
    assert_eq!(busy["error"]["data"]["kind"], "busy", "{busy}");
    let status = c.call_ok("agentd/status", json!({}));
    assert_eq!(status["turns_running"], 1);

    let t0 = Instant::now();
    let r = c.call_ok(
        "agentd/interrupt",
        json!({"session_id": sid, "reason": "test"}),
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(r["interrupted"], true, "{r}");
    let result = running.join().unwrap().unwrap();
    assert_eq!(result["result"]["status"], "interrupted", "{result}");

    let evs = events(&mut c, &sid);
    let ended = of_type(&evs, "turn_ended");
    assert_eq!(ended[0]["data"]["status"], "interrupted");
    assert_eq!(ended[0]["data"]["reason"], "test");
    let partial = of_type(&evs, "assistant_message");
    assert_eq!(partial[0]["data"]["metadata"]["partial"], true, "{evs:#?}");
    assert!(partial[0]["data"]["text"]
        .as_str()
        .unwrap()
        .starts_with("Once"));
    // The next turn works and its input is balanced.
    let hello = script_model(&example("hello.json"));
    let r2 = turn(&mut c, &sid, "list please", json!({"model": hello}));
    assert_eq!(r2["status"], "completed", "{r2}");
    assert_balanced(&mut c, &sid);
    // Interrupt with no turn: reconciles, reports not interrupted.
    let r = c.call_ok("agentd/interrupt", json!({"session_id": sid}));
    assert_eq!(r, json!({"interrupted": false, "reconciled": []}));
}

#[test]
fn interrupt_kills_a_running_shell_command_within_a_second() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let marker = format!("agentd_turn_sleep_{}", std::process::id());
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&sleep_script(&d, &marker)));
    let running = turn_in_thread(&d, json!({"session_id": sid, "input": "sleep"}));
    wait_until("the sleep command to start", WAIT, || {
        !pids_with(&marker).is_empty()
    });
    let t0 = Instant::now();
    let r = c.call_ok("agentd/interrupt", json!({"session_id": sid}));
    let took = t0.elapsed();
    let leftover = pids_with(&marker);
    kill_all(&marker);
    assert!(
        took < Duration::from_millis(1500),
        "interrupt took {took:?}"
    );
    assert!(leftover.is_empty(), "sleep still running: {leftover:?}");
    assert_eq!(r["interrupted"], true);
    let result = running.join().unwrap().unwrap();
    assert_eq!(result["result"]["status"], "interrupted", "{result}");
    let evs = events(&mut c, &sid);
    let res = of_type(&evs, "tool_result");
    assert_eq!(res.len(), 1, "{evs:#?}");
    assert_eq!(res[0]["data"]["error"]["kind"], "interrupted");
    assert_eq!(
        of_type(&evs, "turn_ended")[0]["data"]["status"],
        "interrupted"
    );
    assert_balanced(&mut c, &sid);
}

fn write_script() -> String {
    script_model(&example("write.json"))
}

#[test]
fn read_only_denies_mutating_tools() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&write_script()));
    let r = turn(
        &mut c,
        &sid,
        "write",
        json!({"permission_mode": "read_only"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert!(!d.workspace().join("notes.txt").exists());
    let evs = events(&mut c, &sid);
    let dec = of_type(&evs, "permission_decision");
    assert_eq!(dec.len(), 1);
    assert_eq!(dec[0]["data"]["decision"], "deny");
    assert_eq!(dec[0]["data"]["mode"], "read_only");
    let res = of_type(&evs, "tool_result")[0];
    assert_eq!(res["data"]["ok"], false);
    assert_eq!(res["data"]["error"]["kind"], "permission_denied");
    let bad = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "x", "permission_mode": "yolo"}),
    );
    assert_eq!(bad["error"]["data"]["kind"], "invalid_args");
}

#[test]
fn ask_mode_asks_a_subscribed_client_and_denies_without_one() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&write_script()));

    // No client: denied.
    let r = turn(&mut c, &sid, "write", json!({"permission_mode": "ask"}));
    assert_eq!(r["status"], "completed");
    assert!(!d.workspace().join("notes.txt").exists());
    let evs = events(&mut c, &sid);
    let dec = of_type(&evs, "permission_decision");
    assert_eq!(dec[0]["data"]["decision"], "deny");
    assert_eq!(dec[0]["data"]["reason"], "no_client");

    // A client that subscribed with permissions:true is asked and allows.
    let mut client = d.connect();
    client.call_ok(
        "agentd/subscribe",
        json!({"session_id": sid, "permissions": true}),
    );
    let running = turn_in_thread(
        &d,
        json!({"session_id": sid, "input": "write again", "permission_mode": "ask"}),
    );
    let req = client
        .wait_for(
            |m| m["method"] == "agentd/permission" && m.get("id").is_some(),
            WAIT,
        )
        .expect("a permission request");
    assert_eq!(req["params"]["tool"], "write_file");
    assert_eq!(req["params"]["session_id"], sid.as_str());
    assert_eq!(req["params"]["args"]["path"], "notes.txt");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"decision": "allow"}});
    client.send_raw(format!("{answer}\n").as_bytes()).unwrap();
    let r = running.join().unwrap().unwrap();
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert!(d.workspace().join("notes.txt").exists());
    let evs = events(&mut c, &sid);
    let dec = of_type(&evs, "permission_decision");
    assert_eq!(dec.len(), 2);
    assert_eq!(dec[1]["data"]["decision"], "allow");
    assert_eq!(dec[1]["data"]["reason"], "client_allowed");
    assert_eq!(of_type(&evs, "tool_result")[1]["data"]["ok"], true);
}

#[test]
fn provider_errors_end_the_turn_failed_or_timed_out() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let model = script(
        &d,
        "errors.json",
        json!({"rules": [
            {"match": "rate", "steps": [{"text": "partial answer", "error": {"kind": "rate_limited", "message": "slow down"}}]},
            {"match": "time", "steps": [{"error": {"kind": "timeout", "message": "too slow"}}]}
        ]}),
    );
    let sid = create(&d, &mut c, Some(&model));
    let r = turn(&mut c, &sid, "rate me", json!({}));
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["error"]["kind"], "rate_limited");
    let evs = events(&mut c, &sid);
    let msg = of_type(&evs, "assistant_message")[0];
    assert_eq!(msg["data"]["text"], "partial answer");
    assert_eq!(msg["data"]["metadata"]["partial"], true);
    assert_eq!(msg["data"]["metadata"]["error_kind"], "rate_limited");
    let ended = of_type(&evs, "turn_ended")[0];
    assert_eq!(ended["data"]["status"], "failed");
    assert_eq!(ended["data"]["error"]["kind"], "rate_limited");
    assert_eq!(ended["data"]["error"]["message"], "slow down");

    let r = turn(&mut c, &sid, "time me", json!({}));
    assert_eq!(r["status"], "timed_out", "{r}");
    // The partial text is not replayed; the input stays balanced.
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert!(!ctx.to_string().contains("partial answer"));
    assert_eq!(ctx["stats"]["balanced"], true);
}

#[test]
fn context_overflow_compacts_and_retries() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let mut steps: Vec<Value> = (0..16)
        .map(|_| json!({"tool_calls": [{"name": "list_dir", "args": {}}]}))
        .collect();
    steps.push(json!({"error": {"kind": "context_overflow", "message": "maximum context length exceeded"}}));
    let recovered: Vec<Value> = (0..32).map(|_| json!({"text": "recovered"})).collect();
    let model = script(
        &d,
        "overflow.json",
        json!({"rules": [
            {"match": "[HISTORY_COMPACTION v1]", "steps": recovered},
            {"match": "overflow", "steps": steps},
            {"steps": [{"error": {"kind": "context_overflow", "message": "context window exceeded"}}]}
        ]}),
    );
    let sid = create(&d, &mut c, Some(&model));
    let r = turn(
        &mut c,
        &sid,
        "overflow please",
        json!({"max_iterations": 40}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output_text"], "recovered");
    let evs = events(&mut c, &sid);
    let comps = of_type(&evs, "history_compaction");
    assert!(!comps.is_empty());
    assert!(comps
        .iter()
        .all(|e| e["data"]["trigger"] == "overflow_recovery"));
    assert_balanced(&mut c, &sid);

    // A provider that keeps overflowing: the turn fails after the tails run out.
    let r = turn(&mut c, &sid, "always too big", json!({}));
    assert_eq!(r["status"], "failed", "{r}");
    assert_eq!(r["error"]["kind"], "context_overflow");
}

#[test]
fn pressure_compacts_before_a_provider_call() {
    let hello = example("hello.json");
    let config = format!(
        "[compaction]\ntail_events = 4\n\n[providers.tiny]\nkind = \"script\"\nscript = {:?}\ncontext_window = 50\n",
        hello.display().to_string()
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let mut c = d.connect();
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "provider": "tiny"}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let r = turn(&mut c, &sid, "hello", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    // The first call is under the threshold; the second (after a tool step) is over it.
    let p = sub
        .wait_event(
            |e| {
                is_type(e, "context_pressure")
                    && e["data"]["pressure"].as_f64().unwrap_or(0.0) > 0.85
            },
            WAIT,
        )
        .expect("context_pressure over the threshold");
    assert_eq!(p["data"]["context_window"], 50);
    let evs = events(&mut c, &sid);
    let comps = of_type(&evs, "history_compaction");
    assert!(!comps.is_empty(), "{:?}", types(&evs));
    assert_eq!(comps[0]["data"]["trigger"], "pressure");
    let usage = of_type(&evs, "provider_usage")[0];
    assert_eq!(usage["data"]["context_window"], 50);
    assert_eq!(usage["data"]["provider"], "tiny");
    assert_balanced(&mut c, &sid);
}

#[test]
fn daemon_killed_mid_tool_is_reconciled_on_restart() {
    // The closing behaviour `resume_after_crash = false` keeps (resumption: resume.rs).
    let mut d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config("[turns]\nresume_after_crash = false\n")
        .start();
    let marker = format!("agentd_turn_restart_{}", std::process::id());
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&sleep_script(&d, &marker)));
    let running = turn_in_thread(&d, json!({"session_id": sid, "input": "sleep"}));
    wait_until("the sleep command to start", WAIT, || {
        !pids_with(&marker).is_empty()
    });
    d.restart();
    kill_all(&marker);
    assert!(
        running.join().unwrap().is_err(),
        "the turn call cannot answer"
    );
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let res = of_type(&evs, "tool_result");
    assert_eq!(res.len(), 1, "{evs:#?}");
    assert_eq!(res[0]["data"]["error"]["kind"], "orphan_tool_call");
    assert_eq!(
        res[0]["data"]["error"]["details"]["reason"],
        "daemon_restart"
    );
    let ended = of_type(&evs, "turn_ended")[0];
    assert_eq!(ended["data"]["status"], "interrupted");
    assert_eq!(ended["data"]["reason"], "daemon_restart");
    let hello = script_model(&example("hello.json"));
    let r = turn(&mut c, &sid, "after restart", json!({"model": hello}));
    assert_eq!(r["status"], "completed", "{r}");
    assert_balanced(&mut c, &sid);
}

fn compact_script(d: &Daemon, name: &str, answer: &str) -> String {
    script(
        d,
        name,
        json!({"rules": [
            {"match": "[COMPACTION_REQUEST v1]", "steps": [{"text": answer}]},
            {"steps": [
                {"text": "Looking.", "tool_calls": [{"name": "list_dir", "args": {}}]},
                {"text": "Done looking."}
            ]}
        ]}),
    )
}

#[test]
fn model_compaction_records_model_v1_or_falls_back() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let good = compact_script(
        &d,
        "compact-good.json",
        r#"{"summary":"Listed the workspace.","open_tasks":["write docs"],"decisions":["keep it small"]}"#,
    );
    let sid = create(&d, &mut c, Some(&good));
    turn(&mut c, &sid, "look around", json!({}));
    let r = c.call_ok(
        "agentd/compact",
        json!({"session_id": sid, "tail_events": 2, "strategy": "model"}),
    );
    assert_eq!(r["recorded"], true, "{r}");
    let data = &r["event"]["data"];
    assert_eq!(data["strategy"], "model_v1", "{data}");
    assert_eq!(data["model_summary"]["summary"], "Listed the workspace.");
    assert_eq!(data["model_summary"]["open_tasks"], json!(["write docs"]));
    assert!(data["summary"]
        .as_str()
        .unwrap()
        .contains("[MODEL_SUMMARY]\nListed the workspace."));
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert!(ctx.to_string().contains("Listed the workspace."));

    let bad = compact_script(
        &d,
        "compact-bad.json",
        "Sure! Here is a summary: it went fine.",
    );
    let sid2 = create(&d, &mut c, Some(&bad));
    turn(&mut c, &sid2, "look around", json!({}));
    let r = c.call_ok(
        "agentd/compact",
        json!({"session_id": sid2, "tail_events": 2, "strategy": "model"}),
    );
    assert_eq!(r["recorded"], true, "{r}");
    let data = &r["event"]["data"];
    assert_eq!(data["strategy"], "deterministic_v1", "{data}");
    assert!(data["model_fallback_reason"]
        .as_str()
        .unwrap()
        .starts_with("invalid_json"));
    assert!(data.get("model_summary").is_none());
}

#[test]
fn wait_false_returns_after_turn_started() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&script_model(&example("slow.json"))));
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let r = turn(&mut c, &sid, "story", json!({"wait": false}));
    assert_eq!(r["status"], "running", "{r}");
    let evs = events(&mut c, &sid);
    assert_eq!(
        types(&evs)[..3],
        ["session_started", "turn_started", "user_message"]
    );
    assert_eq!(r["first_seq"], 1);
    let show = c.call_ok("agentd/show", json!({"session_id": sid}));
    assert_eq!(show["status"], "running");
    c.call_ok("agentd/interrupt", json!({"session_id": sid}));
    sub.wait_event(
        |e| is_type(e, "turn_ended") && e["data"]["status"] == "interrupted",
        WAIT,
    )
    .expect("turn_ended");
}

#[test]
fn shutdown_ends_running_turns_durably() {
    let mut d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&script_model(&example("slow.json"))));
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    turn(&mut c, &sid, "story", json!({"wait": false}));
    sub.wait_event(|e| is_type(e, "text_delta"), WAIT)
        .expect("a delta");
    drop(c);
    assert!(d.shutdown(WAIT).is_some(), "daemon did not stop");
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "turn_ended", "{log}");
    assert_eq!(last["data"]["status"], "interrupted");
    assert_eq!(last["data"]["reason"], "daemon_shutdown");
}

#[test]
fn artifact_changes_are_published_to_dependent_sessions() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&write_script()));
    let r = turn(&mut c, &sid, "write", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    std::fs::write(d.workspace().join("notes.txt"), "changed by hand\n").unwrap();
    let ev = sub
        .wait_event(|e| is_type(e, "artifact_changed"), WAIT)
        .expect("artifact_changed");
    assert_eq!(ev["data"]["uri"], "notes.txt");
}

#[test]
fn openai_chat_provider_over_a_local_sse_server() {
    let (base, server) = sse_server(vec![
        chat_sse(&[
            json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": "Listing."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129}}),
        ]),
        chat_sse(&[
            json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": "All done "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "over HTTP."}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 160, "completion_tokens": 4, "total_tokens": 164}}),
        ]),
    ]);
    let config = format!(
        "default_provider = \"local\"\n[providers.local]\nkind = \"openai-chat\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 4096\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let mut c = d.connect();
    let sid = create(&d, &mut c, None);
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let r = turn(&mut c, &sid, "what is here?", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output_text"], "All done over HTTP.");
    sub.wait_event(
        |e| is_type(e, "text_delta") && e["data"]["text"] == "over HTTP.",
        WAIT,
    )
    .expect("streamed delta");
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0]["model"], "m1");
    let second = bodies[1]["messages"].to_string();
    assert!(second.contains("call_a"), "{second}");
    let evs = events(&mut c, &sid);
    let usage = of_type(&evs, "provider_usage");
    assert_eq!(usage[0]["data"]["provider"], "local");
    assert_eq!(usage[0]["data"]["usage"]["input_tokens"], 120);
    assert_eq!(usage[0]["data"]["context_window"], 4096);
    assert_eq!(of_type(&evs, "tool_result")[0]["data"]["ok"], true);
    assert_balanced(&mut c, &sid);
}

/// A provider key must not reach the Log through a tool, even when a command reads the
/// daemon's own environment (`/proc/$PPID/environ`, bash's parent being agentd) or
/// prints the value outright: the daemon is not dumpable, and tool results are scrubbed
/// of configured keys' values.
#[test]
fn provider_keys_never_reach_the_log_through_tools() {
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("MY_SECRET_KEY", "sk-live-TOPSECRET123")
        .config("[providers.vendor]\nkind = \"openai-chat\"\napi_key_env = \"MY_SECRET_KEY\"\n")
        .start();
    // Reads agentd's environment, echoes the value literally (so it is in the recorded
    // `tool_call` args too) and on stderr, and fails.
    let cmd = "tr '\\0' '\\n' < /proc/$PPID/environ | grep MY_SECRET; echo sk-live-TOPSECRET123; echo \"err-$(tr '\\0' '\\n' < /proc/$PPID/environ | sed -n 's/^MY_SECRET_KEY=//p')\" >&2; exit 3";
    let model = script(
        &d,
        "leak.json",
        json!({"rules": [{"steps": [
            {"tool_calls": [{"name": "shell", "args": {"command": cmd}}]},
            {"text": "done"}
        ]}]}),
    );
    let mut c = d.connect();
    let sid = create(&d, &mut c, Some(&model));
    let r = turn(&mut c, &sid, "leak it", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let results = of_type(&evs, "tool_result");
    assert_eq!(results.len(), 1, "{evs:#?}");
    let out = results[0]["data"]["output"].as_str().unwrap();
    assert!(out.contains("[redacted]"), "{out}");
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    assert!(!log.contains("sk-live-TOPSECRET123"), "{log}");
    assert!(!log.contains("TOPSECRET"), "{log}");
}

/// A fork keeps the parent's provider and model: a turn in the child without `--model`
/// runs with what the parent was created with.
#[test]
fn a_fork_keeps_the_parents_model_and_provider() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let model = script_model(&example("hello.json"));
    let mut c = d.connect();
    let par = create(&d, &mut c, Some(&model));
    let r = turn(&mut c, &par, "hi", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    let out = d.agentctl(["fork", par.as_str(), "--child-session-id", "kid"]);
    out.assert_code(0);
    let head = &events(&mut c, "kid")[0];
    assert_eq!(head["type"], "session_fork");
    assert_eq!(head["data"]["model"], model.as_str(), "{head}");
    let out = d.agentctl(["turn", "kid", "hi again"]);
    out.assert_code(0);
    let evs = events(&mut c, "kid");
    let ended = of_type(&evs, "turn_ended");
    let last = ended.last().unwrap();
    assert_eq!(last["data"]["status"], "completed", "{evs:#?}");
    let started = of_type(&evs, "turn_started");
    assert_eq!(started.last().unwrap()["data"]["provider"], "script");
    // A fork of the fork keeps them too.
    d.agentctl(["fork", "kid", "--child-session-id", "grandkid"])
        .assert_code(0);
    d.agentctl(["turn", "grandkid", "once more"]).assert_code(0);
}

fn chat_stop(text: &str, finish: &str) -> String {
    chat_sse(&[
        json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": text}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}),
    ])
}

fn responses_stop(message: Value, status: &str, incomplete: Option<&str>) -> String {
    let mut resp = json!({"id": "r1", "model": "m1", "status": status,
        "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}});
    if let Some(r) = incomplete {
        resp["incomplete_details"] = json!({"reason": r});
    }
    let done = if status == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    typed_sse(&[
        json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
        json!({"type": done, "response": resp}),
    ])
}

fn anthropic_stop(text: &str, stop: &str) -> String {
    typed_sse(&[
        json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ])
}

/// Anthropic turns send the kept rendering: the developer text as `system`, and
/// messages that merge consecutive blocks of one role (a tool result joins the next
/// user text) and alternate, across steps and turns; `agentd/context` shows the same.
#[test]
fn anthropic_provider_over_a_local_sse_server_merges_roles_across_steps() {
    let tool_step = typed_sse(&[
        json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Listing."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "list_dir", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":\".\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]);
    let (base, server) = sse_server(vec![
        tool_step,
        anthropic_stop("One file.", "end_turn"),
        anthropic_stop("Still one.", "end_turn"),
    ]);
    let base = base.trim_end_matches("/v1").to_string();
    let config = format!(
        "default_provider = \"anth\"\n[providers.anth]\nkind = \"anthropic\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 4096\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    std::fs::write(d.workspace().join("a.txt"), "a").unwrap();
    let mut c = d.connect();
    let sid = create(&d, &mut c, None);
    let r = turn(&mut c, &sid, "what is here?", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output_text"], "One file.");
    let r = turn(&mut c, &sid, "and now?", json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 3);
    let system = bodies[1]["system"].as_str().unwrap_or_default();
    assert!(system.contains("workspace root"), "{}", bodies[1]);
    let roles = |b: &Value| -> Vec<String> {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        roles(&bodies[1]),
        ["user", "assistant", "user"],
        "{}",
        bodies[1]
    );
    let m = &bodies[1]["messages"];
    assert_eq!(
        m[1]["content"][0],
        json!({"type": "text", "text": "Listing."})
    );
    assert_eq!(
        m[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_a", "name": "list_dir", "input": {"path": "."}})
    );
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][0]["tool_use_id"], "toolu_a");
    assert!(
        m[2]["content"][0]["content"]
            .as_str()
            .unwrap()
            .contains("a.txt"),
        "{m}"
    );
    // The second turn's body: the first turn's answer, then the new prompt.
    assert_eq!(
        roles(&bodies[2]),
        ["user", "assistant", "user", "assistant", "user"],
        "{}",
        bodies[2]
    );
    assert_eq!(
        bodies[2]["messages"].as_array().unwrap()[..3],
        bodies[1]["messages"].as_array().unwrap()[..]
    );
    assert_eq!(
        bodies[2]["messages"][4]["content"],
        json!([{"type": "text", "text": "and now?"}])
    );
    // agentd/context shows what the next request would carry.
    let ctx = c.call_ok(
        "agentd/context",
        json!({"session_id": sid, "dialect": "anthropic"}),
    );
    assert_eq!(ctx["items"]["system"], bodies[2]["system"]);
    let msgs = ctx["items"]["messages"].as_array().unwrap();
    assert_eq!(msgs[..5], bodies[2]["messages"].as_array().unwrap()[..]);
    assert_eq!(
        msgs[5],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Still one."}]})
    );
    assert_balanced(&mut c, &sid);
}

/// Output limits and refusals, as each wire format reports them, end the turn with
/// `stop_reason` on `turn_ended` and in the response; an ordinary end has neither.
#[test]
fn output_limits_and_refusals_are_recorded_on_the_turn_end() {
    let text_item = |t: &str| {
        json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": t}]})
    };
    let refusal_item = json!({"type": "message", "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I can't help with that."}]});
    let (chat, chat_srv) = sse_server(vec![
        chat_stop("It was a dark", "length"),
        chat_stop("Sorry", "content_filter"),
        chat_stop("Fine.", "stop"),
    ]);
    let (resp, resp_srv) = sse_server(vec![
        responses_stop(
            text_item("It was a dark"),
            "incomplete",
            Some("max_output_tokens"),
        ),
        responses_stop(refusal_item, "completed", None),
        responses_stop(text_item("Filtered"), "incomplete", Some("content_filter")),
    ]);
    let (anth, anth_srv) = sse_server(vec![
        anthropic_stop("It was a dark", "max_tokens"),
        anthropic_stop("I won't", "refusal"),
        anthropic_stop("Fine.", "end_turn"),
    ]);
    let anth = anth.trim_end_matches("/v1").to_string();
    let config = format!(
        "default_provider = \"chat\"\n\
         [providers.chat]\nkind = \"openai-chat\"\nbase_url = \"{chat}\"\nmodel = \"m1\"\ncontext_window = 4096\n\
         [providers.resp]\nkind = \"openai-responses\"\nbase_url = \"{resp}\"\nmodel = \"m1\"\ncontext_window = 4096\n\
         [providers.anth]\nkind = \"anthropic\"\nbase_url = \"{anth}\"\nmodel = \"m1\"\ncontext_window = 4096\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let mut c = d.connect();
    let cases = [
        ("chat", ["max_tokens", "refusal", ""]),
        ("resp", ["max_tokens", "refusal", "refusal"]),
        ("anth", ["max_tokens", "refusal", ""]),
    ];
    for (provider, wants) in cases {
        let sid = c.call_ok(
            "agentd/create",
            json!({"workspace": d.workspace(), "provider": provider}),
        )["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        for (i, want) in wants.iter().enumerate() {
            let r = turn(&mut c, &sid, &format!("q{i}"), json!({}));
            assert_eq!(r["status"], "completed", "{provider} {i}: {r}");
            let got = r["stop_reason"].as_str().unwrap_or("");
            assert_eq!(got, *want, "{provider} {i}: {r}");
        }
        let evs = events(&mut c, &sid);
        let ended: Vec<&str> = of_type(&evs, "turn_ended")
            .iter()
            .map(|e| e["data"]["stop_reason"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(ended, wants, "{provider}");
        assert_balanced(&mut c, &sid);
    }
    for s in [chat_srv, resp_srv, anth_srv] {
        assert_eq!(s.join().unwrap().len(), 3);
    }
}
