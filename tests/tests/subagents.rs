//! The `task` tool (docs/subagents.md) end to end: the real daemon, a provider endpoint
//! speaking the Chat Completions wire (`agentd_tests::sse::MockProvider`) that answers
//! the parent and its children by what each request carries, child sessions in the
//! tree, their usage rolled up, parallel children under the cap, the depth limit, the
//! parent's interrupt, and a SIGKILL during a child's turn.

use agentd_tests::sse::{
    chat_partial, chat_text, chat_tools, last_user_and_tool_results, offered_tools, MockProvider,
    Reply,
};
use agentd_tests::{events, is_type, of_type, Daemon};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// The subagent sessions whose parent is `parent`, from `agentd/list`.
fn children(d: &Daemon, parent: &str) -> Vec<Value> {
    let mut c = d.connect();
    let list = c.call_ok("agentd/list", json!({}));
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["parent_session_id"] == parent && s["relation"] == "subagent")
        .cloned()
        .collect()
}

fn daemon(mock: &MockProvider, extra: &str) -> Daemon {
    Daemon::builder()
        .config(&format!("{}{extra}", mock.config()))
        .start()
}

/// Waits for the session's `turn_ended` (backlog or live); returns it.
fn wait_turn_ended(d: &Daemon, sid: &str) -> Value {
    let mut sub = d.connect();
    sub.subscribe(sid, Some(0));
    sub.wait_event(|e| is_type(e, "turn_ended"), WAIT)
        .unwrap_or_else(|| panic!("no turn_ended in {sid}; daemon:\n{}", d.daemon_output()))
}

/// One `task` call: the child answers from its own prompt alone, the parent gets that
/// answer as the call's result, the child is a subagent of the parent in `tree`, `ls`
/// and `agentd/list`, and the parent's usage includes the child's.
#[test]
fn a_task_call_returns_the_childs_answer() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if user.contains("Find the magic number") {
            return Reply::Complete(chat_text("The magic number is 42."));
        }
        match tools.first() {
            None => Reply::Complete(chat_tools(&[(
                "call_t1",
                "task",
                json!({"prompt": "Find the magic number in the notes", "title": "magic"}),
            )])),
            Some(t) => Reply::Complete(chat_text(&format!("Child said: {t}"))),
        }
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let out = d.agentctl_ok(&["turn", &sid, "Delegate the search"]);
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(out["output_text"], "Child said: The magic number is 42.");

    let kids = children(&d, &sid);
    assert_eq!(kids.len(), 1, "{kids:?}");
    let child = kids[0]["session_id"].as_str().unwrap().to_string();
    assert_eq!(kids[0]["parent_call_id"], "call_t1");
    assert_eq!(kids[0]["title"], "magic");

    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let results = of_type(&evs, "tool_result");
    assert_eq!(results.len(), 1);
    let r = &results[0]["data"];
    assert_eq!(r["call_id"], "call_t1");
    assert_eq!(r["ok"], true);
    assert_eq!(r["output"], "The magic number is 42.");
    assert_eq!(r["subagent"]["session_id"], child.as_str());
    assert_eq!(r["subagent"]["status"], "completed");

    let cevs = events(&mut c, &child);
    let started = &cevs[0];
    assert!(is_type(started, "session_started"), "{started}");
    assert_eq!(started["data"]["relation"], "subagent");
    assert_eq!(started["data"]["parent_session_id"], sid.as_str());
    assert_eq!(started["data"]["parent_call_id"], "call_t1");
    assert_eq!(
        started["data"]["workspace"], evs[0]["data"]["workspace"],
        "same workspace"
    );
    let prompts: Vec<_> = of_type(&cevs, "user_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(prompts, [json!("Find the magic number in the notes")]);

    // The child saw its prompt, not the parent's conversation.
    let reqs = mock.requests();
    let child_req = reqs
        .iter()
        .find(|b| {
            last_user_and_tool_results(b)
                .0
                .contains("Find the magic number")
        })
        .unwrap();
    assert!(
        !child_req["messages"]
            .to_string()
            .contains("Delegate the search"),
        "{child_req}"
    );
    assert!(
        !offered_tools(child_req).contains(&"task".to_string()),
        "depth 1: the child is not offered task"
    );
    assert!(offered_tools(&reqs[0]).contains(&"task".to_string()));

    // The tree and ls mark it.
    let tree = d.agentctl(["tree", &sid]);
    tree.assert_code(0);
    let line = tree
        .stdout
        .lines()
        .find(|l| l.contains(&child))
        .unwrap_or_else(|| panic!("child not in the tree:\n{}", tree.stdout));
    assert!(line.contains("subagent"), "{line}");
    let ls = d.agentctl(["ls"]);
    let row = ls.stdout.lines().find(|l| l.contains(&child)).unwrap();
    assert!(row.contains("[subagent] magic"), "{row}");

    // Usage: the parent's two calls and the child's one, the child listed.
    let u = d.agentctl_ok(&["usage", &sid]);
    assert_eq!(u["total"]["calls"], 3, "{u}");
    assert_eq!(u["subagents"], json!([child]));
    let by = d.agentctl_ok(&["usage", &sid, "--by", "session"]);
    let keys: Vec<_> = by["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                r["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut want = vec![(sid.clone(), 2), (child.clone(), 1)];
    want.sort();
    assert_eq!(keys, want);
}

/// Three `task` calls in one step with `[subagents] max_parallel = 2`: two children run
/// at once, never three, and the results are recorded in call order.
#[test]
fn parallel_tasks_run_together_up_to_the_cap() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (f, p) = (in_flight.clone(), peak.clone());
    let mock = MockProvider::start(move |_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if let Some(n) = user.strip_prefix("Count file ") {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            // Each call waits until two run at once (however slowly the second child
            // starts under load), then a while more, so a third the cap failed to hold
            // back would be counted.
            let deadline = Instant::now() + Duration::from_secs(30);
            while p.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(300));
            f.fetch_sub(1, Ordering::SeqCst);
            return Reply::Complete(chat_text(&format!("file {n} has {n}0 lines")));
        }
        if tools.is_empty() {
            let calls: Vec<(String, Value)> = (1..=3)
                .map(|i| {
                    (
                        format!("call_{i}"),
                        json!({"prompt": format!("Count file {i}")}),
                    )
                })
                .collect();
            let calls: Vec<(&str, &str, Value)> = calls
                .iter()
                .map(|(id, a)| (id.as_str(), "task", a.clone()))
                .collect();
            return Reply::Complete(chat_tools(&calls));
        }
        Reply::Complete(chat_text(&tools.join(" | ")))
    });
    let d = daemon(&mock, "[subagents]\nmax_parallel = 2\n");
    let sid = d.create_session();
    let out = d.agentctl_ok(&["turn", &sid, "Count the lines"]);
    assert_eq!(
        out["output_text"],
        "file 1 has 10 lines | file 2 has 20 lines | file 3 has 30 lines"
    );
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "two children at once, not more"
    );
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let ids: Vec<_> = of_type(&evs, "tool_result")
        .iter()
        .map(|e| e["data"]["call_id"].clone())
        .collect();
    assert_eq!(ids, [json!("call_1"), json!("call_2"), json!("call_3")]);
    assert_eq!(children(&d, &sid).len(), 3);
}

/// With the default `max_depth = 1` a child is not offered `task`, and a child that
/// calls it anyway gets an error result naming the limit; no grandchild is created.
#[test]
fn a_child_may_not_start_subagents_beyond_the_depth_limit() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        let call = |id: &str, prompt: &str| {
            Reply::Complete(chat_tools(&[(id, "task", json!({"prompt": prompt}))]))
        };
        match (user.as_str(), tools.first()) {
            ("Nest deeper", None) => call("call_inner", "Go one level more"),
            ("Nest deeper", Some(t)) => Reply::Complete(chat_text(&format!("inner: {t}"))),
            ("Go one level more", _) => Reply::Complete(chat_text("grandchild ran")),
            (_, None) => call("call_outer", "Nest deeper"),
            (_, Some(t)) => Reply::Complete(chat_text(&format!("outer: {t}"))),
        }
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let out = d.agentctl_ok(&["turn", &sid, "Start a chain"]);
    let text = out["output_text"].as_str().unwrap().to_string();
    assert!(text.starts_with("outer: inner: "), "{text}");
    assert!(text.contains("max_depth"), "{text}");
    assert!(!text.contains("grandchild ran"), "{text}");
    let kids = children(&d, &sid);
    assert_eq!(kids.len(), 1);
    let child = kids[0]["session_id"].as_str().unwrap();
    assert!(children(&d, child).is_empty(), "no grandchild");
    let mut c = d.connect();
    let cevs = events(&mut c, child);
    let r = of_type(&cevs, "tool_result")[0]["data"].clone();
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["kind"], "permission_denied");
    assert_eq!(r["error"]["details"]["reason"], "max_depth");
}

/// Interrupting the parent while its child's provider call streams interrupts the
/// child too (reason `parent_interrupted`), and both turns end.
#[test]
fn the_parents_interrupt_reaches_its_children() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if user.contains("Think slowly") {
            return Reply::Hang(chat_partial("Hmm"));
        }
        match tools.first() {
            None => Reply::Complete(chat_tools(&[(
                "call_slow",
                "task",
                json!({"prompt": "Think slowly"}),
            )])),
            Some(t) => Reply::Complete(chat_text(t)),
        }
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut c = d.connect();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "Delegate", "wait": false}),
    );
    assert_eq!(r["status"], "running");
    // The child's provider call has arrived: the child is mid-turn.
    mock.wait_requests(2, WAIT);
    let kids = children(&d, &sid);
    let child = kids[0]["session_id"].as_str().unwrap().to_string();
    let out = d.agentctl_ok(&["interrupt", &sid]);
    assert_eq!(out["interrupted"], true, "{out}");
    let ended = wait_turn_ended(&d, &sid);
    assert_eq!(ended["data"]["status"], "interrupted");
    let cended = wait_turn_ended(&d, &child);
    assert_eq!(cended["data"]["status"], "interrupted");
    assert_eq!(cended["data"]["reason"], "parent_interrupted");
    // Both sessions take new turns.
    let st = c.call_ok("agentd/status", json!({}));
    assert_eq!(st["turns_running"], 0, "{st}");
}

/// SIGKILL while the child's provider streams: after the restart the child's turn
/// resumes and answers, the parent's `task` call gets that answer exactly once, and no
/// second child is created.
#[test]
fn a_crash_during_a_childs_turn_ends_with_exactly_one_answer() {
    let child_calls = Arc::new(AtomicUsize::new(0));
    let cc = child_calls.clone();
    let mock = MockProvider::start(move |_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if user.contains("Recover the count") {
            return match cc.fetch_add(1, Ordering::SeqCst) {
                0 => Reply::Hang(chat_partial("Count is")),
                _ => Reply::Complete(chat_text("Recovered 7")),
            };
        }
        match tools.first() {
            None => Reply::Complete(chat_tools(&[(
                "call_c",
                "task",
                json!({"prompt": "Recover the count"}),
            )])),
            Some(t) => Reply::Complete(chat_text(&format!("parent got: {t}"))),
        }
    });
    let mut d = daemon(&mock, "");
    let sid = d.create_session();
    let turn = d
        .agentctl_cmd()
        .args(["--json", "turn", &sid, "Delegate the count"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentctl");
    mock.wait_requests(2, WAIT);
    d.restart();
    let _ = turn.wait_with_output();

    let ended = wait_turn_ended(&d, &sid);
    assert_eq!(ended["data"]["status"], "completed", "{ended}");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let results = of_type(&evs, "tool_result");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["data"]["call_id"], "call_c");
    assert_eq!(results[0]["data"]["output"], "Recovered 7");
    let answers: Vec<_> = of_type(&evs, "assistant_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(answers, [json!("parent got: Recovered 7")]);
    let resumed = of_type(&evs, "turn_resumed");
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0]["data"]["rerun"][0]["tool"], "task");

    let kids = children(&d, &sid);
    assert_eq!(kids.len(), 1, "never a second child: {kids:?}");
    let child = kids[0]["session_id"].as_str().unwrap();
    let cevs = events(&mut c, child);
    assert_eq!(of_type(&cevs, "user_message").len(), 1);
    assert_eq!(of_type(&cevs, "turn_started").len(), 1);
    assert_eq!(of_type(&cevs, "turn_resumed").len(), 1);
    let cend = of_type(&cevs, "turn_ended");
    assert_eq!(cend.len(), 1);
    assert_eq!(cend[0]["data"]["status"], "completed");
    assert_eq!(child_calls.load(Ordering::SeqCst), 2);
}

/// Bad `task` arguments are the call's error result, and the turn goes on.
#[test]
fn bad_task_arguments_are_an_error_result() {
    let mock = MockProvider::start(|_, body| {
        let (_, tools) = last_user_and_tool_results(body);
        match tools.len() {
            0 => Reply::Complete(chat_tools(&[
                ("call_empty", "task", json!({"prompt": "   "})),
                (
                    "call_wide",
                    "task",
                    json!({"prompt": "x", "permission_mode": "auto"}),
                ),
                ("call_type", "task", json!({"prompt": ["not", "text"]})),
            ])),
            _ => Reply::Complete(chat_text("recovered")),
        }
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let out = d.agentctl_ok(&["turn", &sid, "Try", "--permission-mode", "ask"]);
    assert_eq!(out["output_text"], "recovered");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let kinds: Vec<_> = of_type(&evs, "tool_result")
        .iter()
        .map(|e| {
            (
                e["data"]["call_id"].clone(),
                e["data"]["error"]["kind"].clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (json!("call_empty"), json!("invalid_args")),
            (json!("call_wide"), json!("permission_denied")),
            (json!("call_type"), json!("invalid_args")),
        ]
    );
    assert!(children(&d, &sid).is_empty());
}

/// `task` with an explicit `model`: each child's provider request names the model its
/// call asked for (plain or `provider:model`), recorded on its `turn_started`; a call
/// without one runs on the parent turn's model.
#[test]
fn a_task_with_a_model_sends_the_childs_request_to_that_model() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if let Some(who) = user.strip_prefix("Answer as ") {
            return Reply::Complete(chat_text(&format!("{who} here")));
        }
        if tools.is_empty() {
            return Reply::Complete(chat_tools(&[
                (
                    "call_plain",
                    "task",
                    json!({"prompt": "Answer as plain", "model": "m-small"}),
                ),
                (
                    "call_qualified",
                    "task",
                    json!({"prompt": "Answer as qualified", "model": "mock:m-large"}),
                ),
                (
                    "call_default",
                    "task",
                    json!({"prompt": "Answer as default"}),
                ),
            ]));
        }
        Reply::Complete(chat_text(&tools.join(" | ")))
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let out = d.agentctl_ok(&["turn", &sid, "Ask three helpers"]);
    assert_eq!(
        out["output_text"], "plain here | qualified here | default here",
        "{out}"
    );

    // On the wire: the model each request named.
    let mut seen: Vec<(String, String)> = mock
        .requests()
        .iter()
        .map(|b| {
            (
                last_user_and_tool_results(b).0,
                b["model"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    seen.sort();
    let want = [
        ("Answer as default", "m1"),
        ("Answer as plain", "m-small"),
        ("Answer as qualified", "m-large"),
        ("Ask three helpers", "m1"),
        ("Ask three helpers", "m1"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(u, m)| (u.to_string(), m.to_string()))
        .collect();
    assert_eq!(seen, want);

    // Recorded: each child's turn_started names its model and provider.
    let mut c = d.connect();
    let mut recorded: Vec<(String, String, String)> = children(&d, &sid)
        .iter()
        .map(|k| {
            let cevs = events(&mut c, k["session_id"].as_str().unwrap());
            let started = of_type(&cevs, "turn_started")[0]["data"].clone();
            (
                k["parent_call_id"].as_str().unwrap().to_string(),
                started["provider"].as_str().unwrap().to_string(),
                started["model"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    recorded.sort();
    assert_eq!(
        recorded,
        [
            ("call_default".into(), "mock".into(), "m1".into()),
            ("call_plain".into(), "mock".into(), "m-small".into()),
            ("call_qualified".into(), "mock".into(), "m-large".into()),
        ]
    );
}

/// In `ask` mode a child's permission requests reach the client that subscribed to the
/// parent: it is asked about the child's `write_file` (the request names the child's
/// session), and its answer decides: the allowed write happens, the denied one does not
/// and the child reads the user's reason.
#[test]
fn a_childs_permission_request_goes_to_the_parents_client_and_its_answer_decides() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if let Some(file) = user.strip_prefix("Write ") {
            return match tools.first() {
                None => Reply::Complete(chat_tools(&[(
                    "call_w",
                    "write_file",
                    json!({"path": file, "content": "from the child\n"}),
                )])),
                Some(t) => Reply::Complete(chat_text(&format!("{file}: {t}"))),
            };
        }
        match tools.len() {
            0 => Reply::Complete(chat_tools(&[(
                "call_a",
                "task",
                json!({"prompt": "Write allowed.txt"}),
            )])),
            1 => Reply::Complete(chat_tools(&[(
                "call_b",
                "task",
                json!({"prompt": "Write denied.txt"}),
            )])),
            _ => Reply::Complete(chat_text(&tools.join(" | "))),
        }
    });
    let d = daemon(&mock, "");
    let sid = d.create_session();
    let mut client = d.connect();
    client.call_ok(
        "agentd/subscribe",
        json!({"session_id": sid, "permissions": true}),
    );
    let mut tc = d.connect();
    tc.set_call_timeout(WAIT * 2);
    let params = json!({"session_id": sid, "input": "Fill in both files",
                        "permission_mode": "ask"});
    let running = std::thread::spawn(move || tc.call("agentd/turn", params));

    let mut asked = Vec::new();
    for _ in 0..2 {
        let req = client
            .wait_for(
                |m| m["method"] == "agentd/permission" && m.get("id").is_some(),
                WAIT,
            )
            .unwrap_or_else(|| panic!("no permission request; daemon:\n{}", d.daemon_output()));
        let p = &req["params"];
        let path = p["args"]["path"].as_str().unwrap().to_string();
        let result = if path == "allowed.txt" {
            json!({"decision": "allow"})
        } else {
            json!({"decision": "deny", "reason": "not that file"})
        };
        let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": result});
        client.send_raw(format!("{answer}\n").as_bytes()).unwrap();
        asked.push((
            path,
            p["tool"].as_str().unwrap().to_string(),
            p["session_id"].as_str().unwrap().to_string(),
        ));
    }
    let r = running.join().unwrap();
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let text = r["result"]["output_text"].as_str().unwrap();
    assert!(text.starts_with("allowed.txt: "), "{text}");
    assert!(text.contains("denied.txt: "), "{text}");
    assert!(
        text.contains("not that file"),
        "the child read the reason: {text}"
    );

    assert_eq!(
        std::fs::read_to_string(d.workspace().join("allowed.txt")).unwrap(),
        "from the child\n"
    );
    assert!(
        !d.workspace().join("denied.txt").exists(),
        "the denied write ran"
    );

    // Each request named the child that asked, and each child recorded the answer.
    let kids = children(&d, &sid);
    let child_of = |call: &str| {
        kids.iter()
            .find(|k| k["parent_call_id"] == call)
            .and_then(|k| k["session_id"].as_str())
            .unwrap_or_else(|| panic!("no child for {call}: {kids:?}"))
            .to_string()
    };
    let (a, b) = (child_of("call_a"), child_of("call_b"));
    assert_eq!(
        asked,
        [
            ("allowed.txt".into(), "write_file".into(), a.clone()),
            ("denied.txt".into(), "write_file".into(), b.clone()),
        ]
    );
    let mut c = d.connect();
    let decision = |c: &mut agentd_tests::RpcConn, sid: &str| {
        let evs = events(c, sid);
        let d = of_type(&evs, "permission_decision")[0]["data"].clone();
        (
            d["decision"].as_str().unwrap().to_string(),
            d["reason"].as_str().unwrap().to_string(),
            d["mode"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(
        decision(&mut c, &a),
        ("allow".into(), "client_allowed".into(), "ask".into())
    );
    assert_eq!(
        decision(&mut c, &b),
        ("deny".into(), "client_denied".into(), "ask".into())
    );
    // The parent records no decision of its own: `task` needs none.
    let pevs = events(&mut c, &sid);
    assert!(of_type(&pevs, "permission_decision").is_empty());
}

/// A `subagent_stop` hook runs when the child's turn ends (not `stop`, which the
/// parent's turn fires), with the child's session and turn ids and its parent's on
/// stdin. Its exit 2 cannot block: it is recorded as `cannot_block` in the child's
/// `turn_ended` append, and the child's answer still reaches the parent unchanged.
#[test]
fn a_subagent_stop_hook_sees_the_child_and_cannot_block_it() {
    let mock = MockProvider::start(|_, body| {
        let (user, tools) = last_user_and_tool_results(body);
        if user == "Summarize the notes" {
            return Reply::Complete(chat_text("The notes say ship it."));
        }
        match tools.first() {
            None => Reply::Complete(chat_tools(&[(
                "call_s",
                "task",
                json!({"prompt": "Summarize the notes"}),
            )])),
            Some(t) => Reply::Complete(chat_text(&format!("Child said: {t}"))),
        }
    });
    let hooks = r#"
[[hooks.subagent_stop]]
command = '''cat >> subagent-stop.ndjson; echo "keep working" >&2; exit 2'''

[[hooks.stop]]
command = '''cat >> stop.ndjson'''
"#;
    let d = daemon(&mock, hooks);
    let sid = d.create_session();
    let out = d.agentctl_ok(&["turn", &sid, "Delegate the summary"]);
    assert_eq!(out["status"], "completed", "{out}");
    assert_eq!(out["output_text"], "Child said: The notes say ship it.");

    let kids = children(&d, &sid);
    assert_eq!(kids.len(), 1, "{kids:?}");
    let child = kids[0]["session_id"].as_str().unwrap().to_string();
    let mut c = d.connect();
    let cevs = events(&mut c, &child);
    let pevs = events(&mut c, &sid);
    let turn_of = |evs: &[Value]| of_type(evs, "turn_started")[0]["data"]["turn_id"].clone();
    let read = |name: &str| -> Vec<Value> {
        std::fs::read_to_string(d.workspace().join(name))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    };

    let sub = read("subagent-stop.ndjson");
    assert_eq!(sub.len(), 1, "{sub:?}");
    let s = &sub[0];
    assert_eq!(s["hook_event_name"], "SubagentStop");
    assert_eq!(s["session_id"], child.as_str());
    assert_eq!(s["turn_id"], turn_of(&cevs));
    assert_eq!(s["status"], "completed");
    assert_eq!(s["stop_hook_active"], false);
    assert_eq!(s["parent_session_id"], sid.as_str());
    assert_eq!(s["parent_call_id"], "call_s");
    assert_eq!(s["parent_turn_id"], turn_of(&pevs));
    assert_eq!(
        std::path::Path::new(s["cwd"].as_str().unwrap()),
        d.workspace().canonicalize().unwrap()
    );
    // `stop` ran once, for the parent's turn only.
    let stops = read("stop.ndjson");
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(stops[0]["hook_event_name"], "Stop");
    assert_eq!(stops[0]["session_id"], sid.as_str());
    assert!(stops[0].get("parent_session_id").is_none(), "{}", stops[0]);

    // The child's Log: the run, recorded as a failure to block, just before its
    // completed turn_ended.
    let ended = cevs
        .iter()
        .position(|e| is_type(e, "turn_ended"))
        .expect("the child's turn_ended");
    assert_eq!(cevs[ended]["data"]["status"], "completed");
    let run = &cevs[ended - 1];
    assert!(is_type(run, "hook_run"), "{run}");
    assert_eq!(run["data"]["event"], "subagent_stop");
    assert_eq!(run["data"]["verdict"], "error");
    assert_eq!(run["data"]["error"]["kind"], "cannot_block");
    assert_eq!(run["data"]["stderr"], "keep working");
    assert_eq!(run["data"]["exit_code"], 2);
    // Only one turn in the child: the hook did not make it go on.
    assert_eq!(of_type(&cevs, "turn_started").len(), 1);
    let results = of_type(&pevs, "tool_result");
    assert_eq!(results[0]["data"]["output"], "The notes say ship it.");
    assert_eq!(results[0]["data"]["ok"], true);
}
