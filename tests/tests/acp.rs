//! Black-box tests of `agentctl acp` (docs/acp.md): the real bridge over pipes, a real
//! daemon on a Unix socket, the offline `script` provider. Every wait is on a frame or an
//! event with a deadline.

use agentd_tests::acp::{update, update_kinds, Acp};
use agentd_tests::sse::{chat_partial, chat_text, MockProvider, Reply};
use agentd_tests::{git, is_type, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .canonicalize()
        .expect("example script")
}

fn model(name: &str) -> String {
    format!("script:{}", example(name).display())
}

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
}

fn new_session(a: &mut Acp, d: &Daemon) -> String {
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    r["sessionId"].as_str().unwrap().to_string()
}

fn prompt(a: &mut Acp, sid: &str, text: &str) -> u64 {
    a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
    )
}

fn log_events(d: &Daemon, sid: &str) -> Vec<Value> {
    d.connect()
        .call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn of_type<'a>(evs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| is_type(e, kind)).collect()
}

fn error_code(r: &Value) -> i64 {
    r["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {r}"))
}

#[test]
fn bad_input_gets_the_schema_errors_and_the_bridge_keeps_running() {
    let d = daemon();
    let mut a = Acp::spawn(&d, &[]);
    // Before initialize.
    let id = a.request(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32600);
    a.send_raw(b"{not json\n");
    let (_, e) = a.wait_for(WAIT, |v| v["id"].is_null()).unwrap();
    assert_eq!(error_code(&e), -32700);
    a.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}]\n");
    let (_, e) = a.wait_for(WAIT, |v| v["id"].is_null()).unwrap();
    assert_eq!(error_code(&e), -32600);
    // Bad initialize params, then a good one.
    let id = a.request("initialize", json!({"protocolVersion": "one"}));
    assert_eq!(error_code(&a.response(id, WAIT).0), -32602);
    let init = a.initialize();
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"],
        json!({"list": {}, "resume": {}, "close": {}})
    );
    assert!(init["agentInfo"]["version"].is_string());
    // Unknown methods, extension ones included.
    for m in ["session/fly", "_agentd/nope"] {
        let id = a.request(m, json!({}));
        assert_eq!(error_code(&a.response(id, WAIT).0), -32601, "{m}");
    }
    // Bad params.
    for p in [
        json!({"cwd": "relative/dir", "mcpServers": []}),
        json!({"cwd": d.workspace()}),
        json!([]),
    ] {
        let id = a.request("session/new", p.clone());
        assert_eq!(error_code(&a.response(id, WAIT).0), -32602, "{p}");
    }
    let id = a.request(
        "session/prompt",
        json!({"sessionId": "never-opened", "prompt": [{"type": "text", "text": "x"}]}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32002);
    let id = a.request(
        "session/load",
        json!({"sessionId": "nope", "cwd": d.workspace(), "mcpServers": []}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32002);
    // A stdio MCP server is taken (it starts at the session's first turn); a transport
    // `initialize` did not advertise is refused naming the entry.
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": [{"name": "fs", "command": "/bin/true", "args": [], "env": []}]}),
        WAIT,
    );
    assert!(r["sessionId"].is_string(), "{r}");
    let id = a.request(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": [{"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": []}]}),
    );
    let (r, _) = a.response(id, WAIT);
    assert_eq!(error_code(&r), -32602);
    assert!(r.to_string().contains("`old`"), "{r}");
    // Still serving.
    let (r, _) = a.call("session/list", json!({}), WAIT);
    assert!(r["sessions"].is_array());
}

#[test]
fn prompt_streams_tool_calls_and_asks_permission() {
    let d = daemon();
    let mut a = Acp::spawn(&d, &["--model", &model("write.json")]);
    a.initialize();
    let (r, notes) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    assert_eq!(r["modes"]["currentModeId"], "ask");
    assert!(notes.is_empty());
    let cmds = a
        .wait_for(WAIT, |v| {
            update(v).is_some_and(|u| u["sessionUpdate"] == "available_commands_update")
        })
        .unwrap()
        .1;
    let names: Vec<&str> = cmds["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["compact", "fork", "tree", "checkpoint", "undo"]);

    // 1: allowed once.
    let id = prompt(&mut a, &sid, "write it");
    let (_, req) = a
        .wait_for(WAIT, |v| v["method"] == "session/request_permission")
        .expect("a permission request");
    let tc = &req["params"]["toolCall"];
    assert_eq!(req["params"]["sessionId"], sid.as_str());
    assert_eq!(tc["kind"], "edit");
    let path = d.workspace().join("notes.txt");
    assert_eq!(tc["locations"][0]["path"], path.to_str().unwrap());
    let kinds: Vec<&str> = req["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    a.respond(
        &req["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}}),
    );
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let kinds = update_kinds(&notes);
    let first_tool = kinds.iter().position(|k| k == "tool_call").unwrap();
    assert!(kinds[..first_tool].contains(&"agent_message_chunk".to_string()));
    let call = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(call["status"], "pending");
    assert_eq!(call["content"][0]["type"], "diff");
    assert_eq!(
        call["content"][0]["newText"],
        "written by the script provider\n"
    );
    assert_eq!(call["rawInput"]["path"], "notes.txt");
    let done = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call_update")
        .unwrap();
    assert_eq!(done["toolCallId"], call["toolCallId"]);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["rawOutput"]["ok"], true);
    assert!(path.exists());
    let text: String = notes
        .iter()
        .filter_map(update)
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        text,
        "Writing notes.txt.Done writing (or was refused; see the tool result)."
    );

    // 2: rejected → denied durably, the tool call fails.
    std::fs::remove_file(&path).unwrap();
    let id = prompt(&mut a, &sid, "write again");
    let (_, req) = a
        .wait_for(WAIT, |v| v["method"] == "session/request_permission")
        .unwrap();
    a.respond(
        &req["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "reject-once"}}),
    );
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let failed = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call_update")
        .unwrap();
    assert_eq!(failed["status"], "failed");
    assert!(!path.exists());

    // 3: allow always → asked once, then not again in this session.
    let id = prompt(&mut a, &sid, "third");
    let (_, req) = a
        .wait_for(WAIT, |v| v["method"] == "session/request_permission")
        .unwrap();
    a.respond(
        &req["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "allow-always"}}),
    );
    assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
    let id = prompt(&mut a, &sid, "fourth");
    let (r, _) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(!a
        .frames
        .iter()
        .filter(|(_, v)| v["method"] == "session/request_permission")
        .any(|(_, v)| v["id"].as_u64() > req["id"].as_u64()));

    let evs = log_events(&d, &sid);
    let decisions: Vec<(&str, &str)> = of_type(&evs, "permission_decision")
        .iter()
        .map(|e| {
            (
                e["data"]["decision"].as_str().unwrap(),
                e["data"]["mode"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            ("allow", "ask"),
            ("deny", "ask"),
            ("allow", "ask"),
            ("allow", "ask")
        ]
    );

    // Modes: read_only refuses without asking; set_mode answers and announces.
    let (_, notes) = a.call(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "read_only"}),
        WAIT,
    );
    assert!(notes.is_empty());
    let mode = a
        .wait_for(WAIT, |v| {
            update(v).is_some_and(|u| u["sessionUpdate"] == "current_mode_update")
        })
        .unwrap()
        .1;
    assert_eq!(mode["params"]["update"]["currentModeId"], "read_only");
    let id = prompt(&mut a, &sid, "fifth");
    a.response(id, WAIT);
    let evs = log_events(&d, &sid);
    let last = *of_type(&evs, "permission_decision").last().unwrap();
    assert_eq!(last["data"]["reason"], "read_only");
    let id = a.request(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "yolo"}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32602);
    // Model: a config option.
    let (r, _) = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "model", "value": model("write.json")}),
        WAIT,
    );
    assert_eq!(
        r["configOptions"][0]["currentValue"],
        model("write.json").as_str()
    );
    let id = a.request(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "model", "value": "no-such-model"}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32602);
}

#[test]
fn cancel_mid_stream_interrupts_durably() {
    let d = daemon();
    let mut a = Acp::spawn(&d, &["--model", &model("slow.json")]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    let id = prompt(&mut a, &sid, "tell me a story");
    a.wait_for(WAIT, |v| {
        update(v).is_some_and(|u| u["sessionUpdate"] == "agent_message_chunk")
    })
    .expect("a first chunk");
    a.notify("session/cancel", json!({"sessionId": sid}));
    let (r, _) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    let evs = log_events(&d, &sid);
    let ended = of_type(&evs, "turn_ended");
    assert_eq!(ended.last().unwrap()["data"]["status"], "interrupted");
    // The session takes the next prompt.
    let (r, _) = a.call("session/list", json!({"cwd": d.workspace()}), WAIT);
    assert_eq!(r["sessions"][0]["sessionId"], sid.as_str());
}

/// What the Log replays as, by the rules of docs/acp.md (independent of the bridge).
fn expected_replay(evs: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in evs {
        let d = &e["data"];
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        match e["type"].as_str().unwrap() {
            "user_message" => out.push(("user_message_chunk".into(), s(&d["text"]))),
            "assistant_message" if !s(&d["text"]).is_empty() => {
                out.push(("agent_message_chunk".into(), s(&d["text"])))
            }
            "reasoning" => out.push((
                "agent_thought_chunk".into(),
                s(&d["item"]["summary"][0]["text"]),
            )),
            "tool_call" => out.push(("tool_call".into(), s(&d["call_id"]))),
            "tool_result" => {
                let status = if d["ok"] == true {
                    "completed"
                } else {
                    "failed"
                };
                out.push((
                    "tool_call_update".into(),
                    format!("{}:{status}", s(&d["call_id"])),
                ))
            }
            "provider_usage" if d.get("context_window").is_some() => {
                out.push(("usage_update".into(), d["context_window"].to_string()))
            }
            _ => {}
        }
    }
    out
}

fn seen_replay(notes: &[Value]) -> Vec<(String, String)> {
    notes
        .iter()
        .filter_map(update)
        .map(|u| {
            let k = u["sessionUpdate"].as_str().unwrap().to_string();
            let v = match k.as_str() {
                "tool_call" => u["toolCallId"].as_str().unwrap().to_string(),
                "tool_call_update" => format!(
                    "{}:{}",
                    u["toolCallId"].as_str().unwrap(),
                    u["status"].as_str().unwrap()
                ),
                "usage_update" => u["size"].to_string(),
                _ => u["content"]["text"].as_str().unwrap().to_string(),
            };
            (k, v)
        })
        .collect()
}

#[test]
fn load_replays_the_log_event_by_event_and_resume_does_not() {
    let d = daemon();
    let sid = {
        let mut a = Acp::spawn(&d, &["--model", &model("hello.json"), "--mode", "auto"]);
        a.initialize();
        let sid = new_session(&mut a, &d);
        for text in ["what is here?", "and again"] {
            let id = prompt(&mut a, &sid, text);
            assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
        }
        sid
    };
    // A fresh bridge (another editor, or the same one restarted).
    let mut a = Acp::spawn(&d, &[]);
    a.initialize();
    let (r, notes) = a.call(
        "session/load",
        json!({"sessionId": sid, "cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    assert_eq!(r["modes"]["currentModeId"], "ask");
    let evs = log_events(&d, &sid);
    let expected = expected_replay(&evs);
    assert!(expected.len() > 10, "{expected:?}");
    assert_eq!(seen_replay(&notes), expected);
    let call = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(call["kind"], "read");
    assert_eq!(call["title"], "List .");
    // The model the session was created with is the current one.
    assert_eq!(
        r["configOptions"][0]["currentValue"],
        model("hello.json").as_str()
    );
    // Resume: no replay before the answer, and the session takes prompts.
    let mut b = Acp::spawn(&d, &["--mode", "auto"]);
    b.initialize();
    let (_, notes) = b.call(
        "session/resume",
        json!({"sessionId": sid, "cwd": d.workspace()}),
        WAIT,
    );
    assert!(notes.is_empty(), "{notes:?}");
    let id = prompt(&mut b, &sid, "once more");
    let (r, notes) = b.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(update_kinds(&notes).contains(&"tool_call".to_string()));
    // Close: the session is no longer open in this bridge, and it stays in the daemon.
    let (r, _) = b.call("session/close", json!({"sessionId": sid}), WAIT);
    assert_eq!(r, json!({}));
    let id = prompt(&mut b, &sid, "after close");
    assert_eq!(error_code(&b.response(id, WAIT).0), -32002);
    let id = b.request("session/close", json!({"sessionId": sid}));
    assert_eq!(error_code(&b.response(id, WAIT).0), -32002);
    assert!(!log_events(&d, &sid).is_empty());
}

#[test]
fn list_pages_with_cursors_and_filters_by_cwd() {
    let d = daemon();
    let mut c = d.connect();
    let other = d.root().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let mut mine = Vec::new();
    for i in 0..5 {
        let r = c.call_ok(
            "agentd/create",
            json!({"workspace": d.workspace(), "title": format!("s{i}")}),
        );
        mine.push(r["session_id"].as_str().unwrap().to_string());
    }
    c.call_ok("agentd/create", json!({"workspace": other}));
    let mut a = Acp::spawn(&d, &["--page-size", "2"]);
    a.initialize();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut p = json!({"cwd": d.workspace()});
        if let Some(c) = &cursor {
            p["cursor"] = json!(c);
        }
        let (r, _) = a.call("session/list", p, WAIT);
        pages += 1;
        for s in r["sessions"].as_array().unwrap() {
            assert_eq!(s["cwd"], d.workspace().to_str().unwrap());
            assert!(s["title"].as_str().unwrap().starts_with('s'));
            assert!(s["updatedAt"].is_string());
            seen.push(s["sessionId"].as_str().unwrap().to_string());
        }
        match r.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(pages, 3);
    seen.sort();
    mine.sort();
    assert_eq!(seen, mine);
    let (r, _) = a.call("session/list", json!({}), WAIT);
    assert_eq!(r["sessions"].as_array().unwrap().len(), 2);
    let (r, _) = a.call(
        "session/list",
        json!({"cwd": d.root().join("nobody-here")}),
        WAIT,
    );
    assert_eq!(r["sessions"], json!([]));
}

#[test]
fn closing_stdin_mid_turn_interrupts_it_durably() {
    let d = daemon();
    let mut a = Acp::spawn(&d, &["--model", &model("slow.json")]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    prompt(&mut a, &sid, "a story");
    a.wait_for(WAIT, |v| {
        update(v).is_some_and(|u| u["sessionUpdate"] == "agent_message_chunk")
    })
    .expect("a first chunk");
    a.close_stdin();
    let status = a.wait_exit(WAIT).expect("the bridge exits");
    assert!(status.success(), "{status:?}");
    let evs = log_events(&d, &sid);
    let ended = of_type(&evs, "turn_ended");
    assert_eq!(ended.len(), 1, "{evs:?}");
    assert_eq!(ended[0]["data"]["status"], "interrupted");
}

/// The daemon is killed mid-prompt and started again: the bridge resends the prompt
/// with its `client_request_id`, so the prompt ends normally with the resumed turn's
/// answer, and the Log holds one prompt and one turn.
#[test]
fn a_prompt_survives_a_daemon_restart_with_one_turn_and_one_answer() {
    let mock = MockProvider::start(|n, _| match n {
        0 => Reply::Hang(chat_partial("Half")),
        _ => Reply::Complete(chat_text("The whole answer.")),
    });
    let mut d = Daemon::builder().config(&mock.config()).start();
    let mut a = Acp::spawn(&d, &[]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    let id = prompt(&mut a, &sid, "a story");
    mock.wait_requests(1, WAIT);
    d.restart();
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        chunk_text(&notes).ends_with("The whole answer."),
        "{notes:#?}"
    );
    let evs = log_events(&d, &sid);
    assert_eq!(of_type(&evs, "user_message").len(), 1, "{evs:#?}");
    let started = of_type(&evs, "turn_started");
    assert_eq!(started.len(), 1, "{evs:#?}");
    assert!(started[0]["data"]["client_request_id"]
        .as_str()
        .is_some_and(|c| c.starts_with("agentctl-")));
    let ended = of_type(&evs, "turn_ended");
    assert_eq!(ended[0]["data"]["resumed"], 1, "{evs:#?}");
    // The bridge goes on serving.
    let (r, _) = a.call("session/list", json!({"cwd": d.workspace()}), WAIT);
    assert_eq!(r["sessions"][0]["sessionId"], sid.as_str());
}

/// A prompt sent while another runs is queued behind it (not refused): each prompt
/// ends when its own turn does, with its own text, shown once.
#[test]
fn a_prompt_sent_while_one_runs_is_queued_and_answered_after_it() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |_, body| {
        if body["messages"].to_string().contains("second prompt") {
            Reply::Complete(chat_text("Answer two."))
        } else {
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
            Reply::Complete(chat_text("Answer one."))
        }
    });
    let d = Daemon::builder().config(&mock.config()).start();
    let mut a = Acp::spawn(&d, &[]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    let one = prompt(&mut a, &sid, "first prompt");
    mock.wait_requests(1, WAIT);
    let two = prompt(&mut a, &sid, "second prompt");
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(0));
    sub.wait_event(|e| is_type(e, "turn_queued"), WAIT)
        .expect("the second prompt queued");
    go_tx.send(()).unwrap();
    let (r1, notes1) = a.response(one, WAIT);
    assert_eq!(r1["result"]["stopReason"], "end_turn", "{r1}");
    let (r2, notes2) = a.response(two, WAIT);
    assert_eq!(r2["result"]["stopReason"], "end_turn", "{r2}");
    let all: Vec<Value> = notes1.into_iter().chain(notes2).collect();
    assert_eq!(chunk_text(&all), "Answer one.Answer two.", "{all:#?}");
    let evs = log_events(&d, &sid);
    let users: Vec<_> = of_type(&evs, "user_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(users, [json!("first prompt"), json!("second prompt")]);
    assert_eq!(of_type(&evs, "turn_queued").len(), 1, "{evs:#?}");
    assert_eq!(mock.requests().len(), 2);
}

#[test]
fn slash_commands_and_extension_methods_reach_the_native_api() {
    let d = daemon();
    let mut a = Acp::spawn(&d, &["--model", &model("hello.json"), "--mode", "auto"]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    let id = prompt(&mut a, &sid, "what is here?");
    a.response(id, WAIT);
    let id = prompt(&mut a, &sid, "/fork");
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let text = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .unwrap()["content"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.starts_with("Forked into session"), "{text}");
    let id = prompt(&mut a, &sid, "/tree");
    let (_, notes) = a.response(id, WAIT);
    let tree = update(&notes[0]).unwrap()["content"]["text"]
        .as_str()
        .unwrap();
    assert!(tree.contains(&sid), "{tree}");
    let (r, _) = a.call("_agentd/tree", json!({"session_id": sid}), WAIT);
    assert_eq!(r["tree"]["session_id"], sid.as_str());
    let (r, _) = a.call(
        "_agentd/compact",
        json!({"session_id": sid, "dry_run": true, "tail_events": 2}),
        WAIT,
    );
    assert!(r.is_object());
    let (r, _) = a.call(
        "_agentd/fork",
        json!({"session_id": sid, "dry_run": true}),
        WAIT,
    );
    assert!(r.is_object());
    let id = a.request("_agentd/fork", json!({"session_id": 7}));
    assert_eq!(error_code(&a.response(id, WAIT).0), -32602);
}

fn script_model(d: &Daemon, name: &str, body: Value) -> String {
    let p = d.root().join(name);
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    format!("script:{}", p.display())
}

#[test]
fn output_limits_and_refusals_end_the_prompt_with_their_stop_reason() {
    let d = daemon();
    // More tool-calling steps than a turn's default iteration limit (16).
    let endless: Vec<Value> = (0..20)
        .map(|_| json!({"tool_calls": [{"name": "list_dir", "args": {"path": "."}}]}))
        .collect();
    let m = script_model(
        &d,
        "stops.json",
        json!({"rules": [
            {"match": "long", "steps": [{"text": "It was a dark and", "stop_reason": "max_tokens"}]},
            {"match": "bad", "steps": [{"text": "I can't help with that.", "stop_reason": "refusal"}]},
            {"match": "forever", "steps": endless},
            {"steps": [{"text": "Fine."}]}
        ]}),
    );
    let mut a = Acp::spawn(&d, &["--model", &m, "--mode", "auto"]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    for (input, want) in [
        ("a long story", "max_tokens"),
        ("something bad", "refusal"),
        ("loop forever", "max_turn_requests"),
        ("hi", "end_turn"),
    ] {
        let id = prompt(&mut a, &sid, input);
        let (r, _) = a.response(id, WAIT);
        assert_eq!(r["result"]["stopReason"], want, "{input}: {r}");
    }
    // Recorded durably on the turn's end; an ordinary end carries no stop_reason.
    let evs = log_events(&d, &sid);
    let ended: Vec<Value> = of_type(&evs, "turn_ended")
        .iter()
        .map(|e| e["data"]["stop_reason"].clone())
        .collect();
    assert_eq!(
        ended,
        vec![
            json!("max_tokens"),
            json!("refusal"),
            Value::Null,
            Value::Null
        ]
    );
    // A fresh bridge replays the session (the field does not disturb the replay).
    let mut b = Acp::spawn(&d, &[]);
    b.initialize();
    let (r, _) = b.call(
        "session/load",
        json!({"sessionId": sid, "cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    assert!(r["modes"].is_object(), "{r}");
}

fn chunk_text(notes: &[Value]) -> String {
    notes
        .iter()
        .filter_map(update)
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[test]
fn undo_diff_and_revert_reach_the_workspace_snapshots() {
    let d = daemon();
    let ws = d.workspace().to_path_buf();
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "orig\n").unwrap();
    git(&ws, &["add", "a.txt"]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    let write = |content: &str| json!({"name": "write_file", "args": {"path": "a.txt", "content": content}});
    let m = script_model(
        &d,
        "edits.json",
        json!({"rules": [
            {"match": "one", "steps": [{"tool_calls": [write("agent1\n")]}, {"text": "one done"}]},
            {"match": "two", "steps": [{"tool_calls": [write("agent2\n")]}, {"text": "two done"}]},
            {"match": "three", "steps": [{"tool_calls": [write("agent3\n")]}, {"text": "three done"}]},
            {"steps": [{"text": "nothing to change"}]}
        ]}),
    );
    let mut a = Acp::spawn(&d, &["--model", &m, "--mode", "auto"]);
    a.initialize();
    let (r, _) = a.call("session/new", json!({"cwd": ws, "mcpServers": []}), WAIT);
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let cmds = a
        .wait_for(WAIT, |v| {
            update(v).is_some_and(|u| u["sessionUpdate"] == "available_commands_update")
        })
        .expect("available_commands_update")
        .1["params"]["update"]["availableCommands"]
        .to_string();
    assert!(cmds.contains("\"undo\""), "{cmds}");
    let read = || std::fs::read_to_string(ws.join("a.txt")).unwrap();

    let id = prompt(&mut a, &sid, "/undo");
    let (_, notes) = a.response(id, WAIT);
    assert!(
        chunk_text(&notes).starts_with("Nothing to undo"),
        "{notes:?}"
    );
    for input in ["one", "two", "just talk"] {
        let id = prompt(&mut a, &sid, input);
        a.response(id, WAIT);
    }
    assert_eq!(read(), "agent2\n");

    // Native diff over the extension method, native params and result.
    let (r, _) = a.call("_agentd/diff", json!({"session_id": sid}), WAIT);
    assert_eq!(r["files"][0]["path"], "a.txt", "{r}");
    assert!(
        r["diff"].as_str().unwrap().contains("-orig\n+agent2\n"),
        "{r}"
    );

    // /undo reverts the last turn that changed files ("two"), not the chatty one after it.
    let id = prompt(&mut a, &sid, "/undo");
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let text = chunk_text(&notes);
    assert!(
        text.starts_with("Reverted the file changes of turn"),
        "{text}"
    );
    assert!(text.contains("`a.txt`"), "{text}");
    assert_eq!(read(), "agent1\n");
    let evs = log_events(&d, &sid);
    assert_eq!(of_type(&evs, "workspace_revert").len(), 1);
    let id = prompt(&mut a, &sid, "/undo");
    let (_, notes) = a.response(id, WAIT);
    assert!(
        chunk_text(&notes).starts_with("Nothing to undo"),
        "{notes:?}"
    );

    // A file edited outside the session since is a conflict: reported, nothing touched.
    let id = prompt(&mut a, &sid, "three");
    a.response(id, WAIT);
    std::fs::write(ws.join("a.txt"), "user edit\n").unwrap();
    let id = prompt(&mut a, &sid, "/undo");
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    let text = chunk_text(&notes);
    assert!(
        text.starts_with("Not reverted: `a.txt` changed outside"),
        "{text}"
    );
    assert_eq!(read(), "user edit\n");

    // _agentd/revert: native params (a dry run that would force), native result.
    let evs = log_events(&d, &sid);
    let start = of_type(&evs, "turn_started").last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    let (r, _) = a.call(
        "_agentd/revert",
        json!({"session_id": sid, "to_seq": start - 1, "dry_run": true, "force": true}),
        WAIT,
    );
    assert_eq!(r["files"], json!(["a.txt"]), "{r}");
    assert_eq!(r["conflicts"], json!(["a.txt"]), "{r}");
    assert_eq!(read(), "user edit\n");
    let id = a.request(
        "_agentd/revert",
        json!({"session_id": sid, "to_seq": start - 1}),
    );
    let (r, _) = a.response(id, WAIT);
    assert_eq!(r["error"]["data"]["kind"], "conflict", "{r}");
    let (r, _) = a.call(
        "_agentd/revert",
        json!({"session_id": sid, "to_seq": start - 1, "force": true}),
        WAIT,
    );
    assert_eq!(r["files"], json!(["a.txt"]), "{r}");
    assert_eq!(read(), "agent1\n");
}

/// Two configured providers and no `--model`: `session/new` offers both providers'
/// models (and the entries of a `models` list, and a built-in whose key the daemon has)
/// as `provider:model`, and a prompt with one of them runs on that provider.
#[test]
fn the_model_picker_offers_the_configured_providers_without_model_flags() {
    let hello = example("hello.json");
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("ANTHROPIC_API_KEY", "sk-test-not-used")
        .config(&format!(
            "[providers.alpha]\nkind = \"script\"\nscript = \"{0}\"\nmodel = \"alpha-1\"\nmodels = [\"alpha-2\"]\n\n\
             [providers.beta]\nkind = \"script\"\nscript = \"{0}\"\nmodel = \"beta-1\"\n",
            hello.display()
        ))
        .start();
    let mut a = Acp::spawn(&d, &["--mode", "auto"]);
    a.initialize();
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let opt = &r["configOptions"][0];
    assert_eq!(opt["id"], "model", "{r}");
    let values: Vec<&str> = opt["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    let at = |v: &str| {
        values
            .iter()
            .position(|x| *x == v)
            .unwrap_or_else(|| panic!("{v} is not offered: {values:?}"))
    };
    // The daemon's default first (the session names no model), then each configured
    // provider's model, its `models` list, then keyed built-ins.
    assert_eq!(values[0], "default", "{values:?}");
    assert_eq!(opt["currentValue"], "default");
    assert!(at("alpha:alpha-1") < at("beta:beta-1"), "{values:?}");
    assert!(at("beta:beta-1") < at("alpha:alpha-2"), "{values:?}");
    assert!(
        at("alpha:alpha-2") < at("anthropic:claude-sonnet-4-5"),
        "{values:?}"
    );
    // Picking one runs the next prompt on that provider with that model.
    let (r, _) = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "model", "value": "beta:beta-1"}),
        WAIT,
    );
    assert_eq!(r["configOptions"][0]["currentValue"], "beta:beta-1", "{r}");
    let id = prompt(&mut a, &sid, "what is here?");
    assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
    let evs = log_events(&d, &sid);
    let usage = of_type(&evs, "provider_usage");
    assert!(!usage.is_empty(), "no provider_usage in {evs:?}");
    assert_eq!(usage[0]["data"]["provider"], "beta", "{:?}", usage[0]);
    assert_eq!(usage[0]["data"]["model"], "beta-1", "{:?}", usage[0]);
    // `--model NAME:MODEL` naming a configured provider: a new session is created on that
    // provider, and a bridge that loads it shows the choice, once.
    let mut b = Acp::spawn(&d, &["--model", "alpha:alpha-2", "--mode", "auto"]);
    b.initialize();
    let sid = new_session(&mut b, &d);
    let first = &log_events(&d, &sid)[0]["data"];
    assert_eq!(
        (first["provider"].as_str(), first["model"].as_str()),
        (Some("alpha"), Some("alpha-2")),
        "{first}"
    );
    let mut c = Acp::spawn(&d, &[]);
    c.initialize();
    let (r, _) = c.call(
        "session/load",
        json!({"sessionId": sid, "cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let opt = &r["configOptions"][0];
    assert_eq!(opt["currentValue"], "alpha:alpha-2", "{r}");
    let values: Vec<&str> = opt["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["value"].as_str())
        .collect();
    assert_eq!(
        values.iter().filter(|v| v.contains("alpha-2")).count(),
        1,
        "{values:?}"
    );
    assert!(!values.contains(&"default"), "{values:?}");
}

/// The bridge offers the command sandbox as a session config option (docs/sandbox.md#contract): the
/// editor's pick is the next prompts' `sandbox.mode`, recorded on their commands.
#[test]
fn the_sandbox_is_a_session_config_option() {
    let d = daemon();
    let m = script_model(
        &d,
        "sbx.json",
        json!({"rules": [{"steps": [
            {"tool_calls": [{"name": "shell", "args": {"command": "echo x > made.txt"}}]},
            {"text": "done"}
        ]}]}),
    );
    let mut a = Acp::spawn(&d, &["--model", &m, "--mode", "auto"]);
    a.initialize();
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let opt = &r["configOptions"][1];
    assert_eq!(opt["id"], "sandbox", "{r}");
    assert_eq!(opt["currentValue"], "default");
    let (r, _) = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "sandbox", "value": "read_only"}),
        WAIT,
    );
    assert_eq!(r["configOptions"][1]["currentValue"], "read_only", "{r}");
    let id = prompt(&mut a, &sid, "make a file");
    assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
    let evs = log_events(&d, &sid);
    let res = of_type(&evs, "tool_result");
    assert_eq!(
        res[0]["data"]["sandbox"]["mode"], "read_only",
        "{:?}",
        res[0]
    );
    assert!(!d.workspace().join("made.txt").exists());
    let id = a.request(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "sandbox", "value": "yolo"}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32602);
}

/// The bridge offers the reasoning effort as a session config option
/// (docs/turns-and-providers.md#reasoning-effort): the editor's pick is the next
/// prompts' `reasoning_effort`, recorded in their `turn_started`; `default` leaves it to
/// the provider config.
#[test]
fn the_reasoning_effort_is_a_session_config_option() {
    let d = daemon();
    let m = script_model(
        &d,
        "effort.json",
        json!({"rules": [{"steps": [{"text": "done"}]}]}),
    );
    let mut a = Acp::spawn(&d, &["--model", &m, "--mode", "auto"]);
    a.initialize();
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let opt = &r["configOptions"][2];
    assert_eq!(opt["id"], "effort", "{r}");
    assert_eq!(opt["category"], "thought_level", "{r}");
    assert_eq!(opt["currentValue"], "default");
    let (r, _) = a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "effort", "value": "high"}),
        WAIT,
    );
    assert_eq!(r["configOptions"][2]["currentValue"], "high", "{r}");
    let id = prompt(&mut a, &sid, "think hard");
    assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
    a.call(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "effort", "value": "default"}),
        WAIT,
    );
    let id = prompt(&mut a, &sid, "think less");
    assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
    let evs = log_events(&d, &sid);
    let started = of_type(&evs, "turn_started");
    let efforts: Vec<&Value> = started
        .iter()
        .map(|e| &e["data"]["reasoning_effort"])
        .collect();
    assert_eq!(efforts, vec![&json!("high"), &Value::Null], "{started:?}");
    let id = a.request(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "effort", "value": "extreme"}),
    );
    assert_eq!(error_code(&a.response(id, WAIT).0), -32602);
}

/// `session/cancel` while this client's prompt is still queued behind a turn another
/// client runs withdraws the prompt: it answers `cancelled`, its text reaches neither the
/// Log nor the provider, and the other client's turn runs on to its own answer.
#[test]
fn cancel_withdraws_a_queued_prompt_and_leaves_the_running_turn_alone() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |_, body| {
        if body["messages"].to_string().contains("queued prompt") {
            Reply::Complete(chat_text("Queued answer."))
        } else {
            let _ = go_rx.lock().unwrap().recv_timeout(WAIT);
            Reply::Complete(chat_text("Running answer."))
        }
    });
    let d = Daemon::builder().config(&mock.config()).start();
    let mut a = Acp::spawn(&d, &[]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    let mut c = d.connect();
    let running = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "running prompt", "wait": false}),
    );
    mock.wait_requests(1, WAIT);
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(0));
    let id = prompt(&mut a, &sid, "queued prompt");
    let queued = sub
        .wait_event(|e| is_type(e, "turn_queued"), WAIT)
        .expect("the ACP prompt queued behind the running turn");
    a.notify("session/cancel", json!({"sessionId": sid}));
    let (r, _) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    go_tx.send(()).unwrap();
    let ended = sub
        .wait_event(
            |e| is_type(e, "turn_ended") && e["data"]["turn_id"] == running["turn_id"],
            WAIT,
        )
        .expect("the running turn ended");
    assert_eq!(ended["data"]["status"], "completed", "{ended}");

    let evs = log_events(&d, &sid);
    let users: Vec<_> = of_type(&evs, "user_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(users, [json!("running prompt")], "{evs:#?}");
    let dequeued = of_type(&evs, "turn_dequeued");
    assert_eq!(dequeued.len(), 1, "{evs:#?}");
    assert_eq!(dequeued[0]["data"]["turn_id"], queued["data"]["turn_id"]);
    assert_eq!(dequeued[0]["data"]["reason"], "dequeued");
    let answers: Vec<_> = of_type(&evs, "assistant_message")
        .iter()
        .map(|e| e["data"]["text"].clone())
        .collect();
    assert_eq!(answers, [json!("Running answer.")]);
    assert_eq!(of_type(&evs, "turn_started").len(), 1, "{evs:#?}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1, "{reqs:#?}");
    assert!(!reqs[0]["messages"].to_string().contains("queued prompt"));
    // The bridge takes the next prompt.
    let next = prompt(&mut a, &sid, "queued prompt again");
    let (r, _) = a.response(next, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

/// A real 1×1 PNG, base64.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// `initialize` advertises images; a prompt's `image` block reaches the provider (Chat
/// Completions' `image_url` data URL, the same bytes) beside the prompt's text, and the
/// Log keeps a reference to it. A text file sent as an image is refused naming it, and
/// the bridge goes on serving.
#[test]
fn an_image_block_reaches_the_provider_with_the_prompt() {
    let mock = MockProvider::start(|_, _| Reply::Complete(chat_text("A red dot.")));
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&mock.config())
        .start();
    let mut a = Acp::spawn(&d, &[]);
    let init = a.initialize();
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["image"], true,
        "{init}"
    );
    let sid = new_session(&mut a, &d);
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [
            {"type": "text", "text": "what is in this screenshot?"},
            {"type": "image", "data": PNG_B64, "mimeType": "image/png"},
        ]}),
    );
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(chunk_text(&notes), "A red dot.");
    let body = &mock.wait_requests(1, WAIT)[0];
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap_or_else(|| panic!("no user message: {body}"));
    let parts = user["content"].as_array().expect("content parts");
    assert_eq!(parts[0]["type"], "text", "{user}");
    assert!(parts[0]["text"]
        .as_str()
        .unwrap()
        .contains("what is in this screenshot?"));
    assert_eq!(
        parts[1],
        json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_B64}")}})
    );
    let evs = log_events(&d, &sid);
    let users = of_type(&evs, "user_message");
    let img = &users[0]["data"]["images"][0];
    assert_eq!(img["mime"], "image/png", "{evs:#?}");
    assert_eq!(img["bytes"], 70);
    assert!(!users[0].to_string().contains(PNG_B64), "{:?}", users[0]);
    // A text file sent as a PNG: refused naming the block, nothing recorded.
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode("fn main() {}\n");
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [
            {"type": "text", "text": "and this?"},
            {"type": "image", "data": text, "mimeType": "image/png"},
        ]}),
    );
    let (r, _) = a.response(id, WAIT);
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("images[0]") && m.contains("not a PNG")),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
    assert_eq!(mock.requests().len(), 1);
    let id = prompt(&mut a, &sid, "plain text still works");
    assert_eq!(a.response(id, WAIT).0["result"]["stopReason"], "end_turn");
}

/// Subagents through ACP (docs/acp.md#subagents): the parent's `task` call is titled
/// after its subagent and its result names the child (`rawOutput.subagent`), live and on
/// `session/load`; the child's ask-mode permission request reaches the editor in the
/// parent's session as a call of its own, marked with the child, and the editor's answer
/// decides; `session/list` tags the child and points at its parent in `_meta`.
#[test]
fn subagents_are_marked_in_updates_permission_requests_and_the_list() {
    let d = daemon();
    let m = script_model(
        &d,
        "delegate.json",
        json!({"rules": [
            {"match": "Write the notes", "steps": [
                {"tool_calls": [{"name": "write_file",
                                 "args": {"path": "notes.txt", "content": "from the child\n"}}]},
                {"text": "notes written"}]},
            {"steps": [
                {"tool_calls": [{"name": "task",
                                 "args": {"prompt": "Write the notes", "title": "notes writer"}}]},
                {"text": "delegated"}]}
        ]}),
    );
    let mut a = Acp::spawn(&d, &["--model", &m]);
    a.initialize();
    let sid = new_session(&mut a, &d);
    let id = prompt(&mut a, &sid, "delegate the notes");
    let (_, req) = a
        .wait_for(WAIT, |v| v["method"] == "session/request_permission")
        .expect("the child's permission request");
    let mut c = d.connect();
    let list = c.call_ok("agentd/list", json!({}));
    let kids: Vec<String> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["relation"] == "subagent" && s["parent_session_id"] == sid.as_str())
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kids.len(), 1, "{list}");
    let child = kids[0].clone();
    // Asked in the parent's session, about the child's call, under an id of its own
    // (the child's call ids start over and may equal the parent's).
    assert_eq!(req["params"]["sessionId"], sid.as_str());
    let tc = &req["params"]["toolCall"];
    let shown = format!("{child}/call_1_0_0");
    assert_eq!(tc["toolCallId"], shown.as_str());
    assert_eq!(
        tc["title"],
        format!("Subagent {child}: Write notes.txt").as_str()
    );
    assert_eq!(tc["_meta"]["agentd"]["subagentSessionId"], child.as_str());
    assert_eq!(tc["rawInput"]["path"], "notes.txt");
    a.respond(
        &req["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}}),
    );
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("notes.txt")).unwrap(),
        "from the child\n",
        "the answer allowed the child's write"
    );
    let ups: Vec<Value> = notes.iter().filter_map(update).cloned().collect();
    let find = |kind: &str, call: &str| -> Vec<Value> {
        ups.iter()
            .filter(|u| u["sessionUpdate"] == kind && u["toolCallId"] == call)
            .cloned()
            .collect()
    };
    let task = find("tool_call", "call_1_0_0");
    assert_eq!(task.len(), 1, "{ups:?}");
    assert_eq!(task[0]["title"], "Subagent: notes writer");
    let card = find("tool_call", &shown);
    assert_eq!(card.len(), 1, "the child's call announced once: {ups:?}");
    assert_eq!(
        card[0]["_meta"]["agentd"]["subagentSessionId"],
        child.as_str()
    );
    let decided = find("tool_call_update", &shown);
    assert_eq!(decided.len(), 1, "{ups:?}");
    assert_eq!(decided[0]["status"], "completed");
    let done = find("tool_call_update", "call_1_0_0");
    assert_eq!(done.len(), 1, "{ups:?}");
    assert_eq!(done[0]["status"], "completed");
    assert_eq!(done[0]["content"][0]["content"]["text"], "notes written");
    assert_eq!(
        done[0]["rawOutput"]["subagent"]["session_id"],
        child.as_str()
    );
    assert_eq!(done[0]["rawOutput"]["subagent"]["status"], "completed");

    // The list: the child tagged, pointing at its parent; the parent plain.
    let (r, _) = a.call("session/list", json!({"cwd": d.workspace()}), WAIT);
    let rows = r["sessions"].as_array().unwrap();
    let row = |id: &str| {
        rows.iter()
            .find(|s| s["sessionId"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {r}"))
            .clone()
    };
    let crow = row(&child);
    assert_eq!(crow["title"], "[subagent] notes writer");
    assert_eq!(
        crow["_meta"]["agentd"],
        json!({"relation": "subagent", "parentSessionId": sid, "parentCallId": "call_1_0_0"})
    );
    let prow = row(&sid);
    assert!(prow.get("_meta").is_none(), "{prow}");

    // Loading the parent in another editor replays the task's result with its child.
    let mut b = Acp::spawn(&d, &[]);
    b.initialize();
    let (_, notes) = b.call(
        "session/load",
        json!({"sessionId": sid, "cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let replayed = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == "call_1_0_0")
        .cloned()
        .expect("the task's result replayed");
    assert_eq!(
        replayed["rawOutput"]["subagent"]["session_id"],
        child.as_str()
    );
    let title = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == "call_1_0_0")
        .map(|u| u["title"].clone());
    assert_eq!(title, Some(json!("Subagent: notes writer")));
}
