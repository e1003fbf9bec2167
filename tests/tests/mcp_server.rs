//! Black-box tests of `agentctl mcp-server` (docs/mcp-server.md): the real binary spoken to over
//! its stdio in MCP (JSON-RPC 2.0, one message per line), a real daemon on a Unix
//! socket, sessions made with the offline `script` provider. Every wait is on a frame
//! or an event with a deadline.

use agentd_tests::acp::Acp;
use agentd_tests::{is_type, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const READ_TOOLS: [&str; 6] = [
    "list_sessions",
    "search",
    "show",
    "context",
    "tree",
    "checkpoint",
];
const PROMPT: &str = "what is in this workspace?";
const ANSWER: &str = "Those are the files at the top of your workspace.";

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

/// A session with one completed `hello.json` turn (a `list_dir` call and an answer).
fn session_with_turn(d: &Daemon, title: &str) -> String {
    let mut c = d.connect();
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "title": title, "model": model("hello.json")}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": PROMPT}));
    assert_eq!(r["status"], "completed", "{r}");
    sid
}

/// `agentctl mcp-server ARGS`, initialized with the 2025-11-25 handshake.
fn server(d: &Daemon, args: &[&str]) -> (Acp, Value) {
    let mut cmd = d.agentctl_cmd();
    cmd.arg("mcp-server").args(args);
    let mut m = Acp::from_command(cmd);
    let (init, _) = m.call(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "agentd-tests", "version": "0"}}),
        WAIT,
    );
    m.notify("notifications/initialized", json!({}));
    (m, init)
}

fn tools(m: &mut Acp) -> Vec<Value> {
    m.call("tools/list", json!({}), WAIT).0["tools"]
        .as_array()
        .expect("tools array")
        .clone()
}

fn names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Calls a tool; returns the whole `CallToolResult`.
#[track_caller]
fn call(m: &mut Acp, tool: &str, args: Value) -> Value {
    m.call("tools/call", json!({"name": tool, "arguments": args}), WAIT)
        .0
}

/// The one text block of a result that is not an error.
#[track_caller]
fn text(r: &Value) -> String {
    assert_ne!(r["isError"], true, "tool failed: {r}");
    let content = r["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "{r}");
    assert_eq!(content[0]["type"], "text", "{r}");
    content[0]["text"].as_str().unwrap().to_string()
}

#[track_caller]
fn error_text(r: &Value, kind: &str) -> String {
    assert_eq!(r["isError"], true, "expected an error result: {r}");
    assert_eq!(r["structuredContent"]["error"]["kind"], kind, "{r}");
    let t = r["content"][0]["text"].as_str().unwrap().to_string();
    assert!(t.starts_with(&format!("error: {kind}: ")), "{t}");
    t
}

fn log_events(d: &Daemon, sid: &str) -> Vec<Value> {
    d.connect()
        .call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn read_only_tools_serve_real_sessions() {
    let d = daemon();
    let sid = session_with_turn(&d, "mcp probe");
    let log_before = d.log_bytes(&sid);
    let (mut m, init) = server(&d, &[]);
    assert_eq!(init["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(init["serverInfo"]["name"], "agentd", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    assert!(init["instructions"].as_str().unwrap().contains("search"));

    let listed = tools(&mut m);
    assert_eq!(names(&listed), READ_TOOLS, "without --allow-writes");
    for t in &listed {
        assert_eq!(t["annotations"]["readOnlyHint"], true, "{t}");
        assert_eq!(t["annotations"]["destructiveHint"], false, "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
    }

    let list = text(&call(&mut m, "list_sessions", json!({})));
    assert!(
        list.contains(&sid) && list.contains("\"mcp probe\""),
        "{list}"
    );
    let ws = d.workspace().canonicalize().unwrap();
    let scoped = text(&call(
        &mut m,
        "list_sessions",
        json!({"workspace": ws.display().to_string(), "limit": 5}),
    ));
    assert!(scoped.contains(&sid), "{scoped}");

    let hits = text(&call(
        &mut m,
        "search",
        json!({"query": "top of your workspace", "types": ["assistant_message"]}),
    ));
    assert!(
        hits.contains(&sid) && hits.contains("assistant_message"),
        "{hits}"
    );
    let none = text(&call(&mut m, "search", json!({"query": "zebra-quartz-17"})));
    assert!(none.starts_with("no matches"), "{none}");

    let shown = text(&call(&mut m, "show", json!({"session_id": sid})));
    assert!(shown.starts_with(&format!("session {sid}\n")), "{shown}");
    assert!(shown.contains("title: mcp probe"), "{shown}");
    assert!(shown.contains(&format!("user: {PROMPT}")), "{shown}");
    assert!(shown.contains("tool_call list_dir"), "{shown}");
    assert!(shown.contains(&format!("assistant: {ANSWER}")), "{shown}");
    assert!(shown.ends_with("(end of session)\n"), "{shown}");
    // Paging: two events, then the page after them.
    let first = text(&call(
        &mut m,
        "show",
        json!({"session_id": sid, "limit": 2}),
    ));
    assert!(
        first.contains("#0 ") && first.contains("#1 ") && !first.contains("#2 "),
        "{first}"
    );
    assert!(
        first.contains("more: call show with after_seq = 1"),
        "{first}"
    );
    let next = text(&call(
        &mut m,
        "show",
        json!({"session_id": sid, "after_seq": 1, "limit": 2}),
    ));
    assert!(
        next.starts_with("#2 ") && !next.contains("session "),
        "{next}"
    );
    let convo = text(&call(
        &mut m,
        "show",
        json!({"session_id": sid, "messages_only": true}),
    ));
    assert!(
        convo.contains("user: ")
            && convo.contains("assistant: ")
            && !convo.contains("tool_call list_dir"),
        "{convo}"
    );

    let ctx = text(&call(&mut m, "context", json!({"session_id": sid})));
    assert!(ctx.starts_with("dialect: responses\n"), "{ctx}");
    assert!(ctx.contains("\"balanced\":true"), "{ctx}");
    assert!(
        ctx.contains("function_call_output") && ctx.contains(ANSWER),
        "{ctx}"
    );
    let anth = text(&call(
        &mut m,
        "context",
        json!({"session_id": sid, "dialect": "anthropic"}),
    ));
    assert!(
        anth.starts_with("dialect: anthropic\n") && anth.contains("tool_use"),
        "{anth}"
    );

    let tree = text(&call(&mut m, "tree", json!({"session_id": sid})));
    assert!(tree.contains(&sid) && tree.contains("mcp probe"), "{tree}");

    let cp = text(&call(&mut m, "checkpoint", json!({"session_id": sid})));
    assert!(cp.contains("[SESSION_CHECKPOINT v1]"), "{cp}");
    assert!(cp.contains(PROMPT), "{cp}");

    // Errors from the daemon and from the arguments are tool results the model reads.
    let missing = error_text(
        &call(
            &mut m,
            "show",
            json!({"session_id": "20200101T000000-000000"}),
        ),
        "not_found",
    );
    assert!(missing.contains("no such session"), "{missing}");
    let bad = error_text(&call(&mut m, "show", json!({})), "invalid_args");
    assert!(bad.contains("session_id"), "{bad}");
    let extra = error_text(
        &call(&mut m, "search", json!({"query": "x", "bogus": 1})),
        "invalid_args",
    );
    assert!(extra.contains("unknown field"), "{extra}");
    error_text(&call(&mut m, "tree", json!({})), "invalid_args");

    // Writing tools are neither listed nor callable without the flag.
    for (tool, args) in [
        ("fork", json!({"session_id": sid})),
        ("turn", json!({"session_id": sid, "prompt": "again"})),
    ] {
        let t = error_text(&call(&mut m, tool, args), "permission_denied");
        assert!(t.contains("--allow-writes"), "{t}");
    }
    // An unknown tool is a protocol error (-32602).
    let id = m.request("tools/call", json!({"name": "nope", "arguments": {}}));
    let (r, _) = m.response(id, WAIT);
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // Nothing of the above wrote to the Log, and no session was added.
    assert_eq!(
        d.log_bytes(&sid),
        log_before,
        "a read-only call changed the Log"
    );
    let all = d.connect().call_ok("agentd/list", json!({}));
    assert_eq!(all["sessions"].as_array().unwrap().len(), 1, "{all}");

    m.close_stdin();
    let st = m
        .wait_exit(WAIT)
        .expect("mcp-server exits when stdin closes");
    assert!(st.success(), "{st:?}");
}

#[test]
fn write_tools_need_the_flag_and_work_with_it() {
    let d = daemon();
    let sid = session_with_turn(&d, "parent");
    let (mut m, _) = server(&d, &["--allow-writes"]);
    let listed = tools(&mut m);
    let mut all: Vec<String> = READ_TOOLS.iter().map(|s| s.to_string()).collect();
    all.extend(["fork".to_string(), "turn".to_string()]);
    assert_eq!(names(&listed), all);
    for t in &listed[READ_TOOLS.len()..] {
        assert_eq!(t["annotations"]["readOnlyHint"], false, "{t}");
    }

    let forked = text(&call(
        &mut m,
        "fork",
        json!({"session_id": sid, "to_seq": 2, "title": "the child"}),
    ));
    let v: Value = serde_json::from_str(&forked).expect("fork result is JSON");
    let child = v["child_session_id"].as_str().unwrap().to_string();
    assert_eq!(v["parent_session_id"], sid.as_str(), "{v}");
    assert_eq!(v["recorded"], true, "{v}");
    let started = &log_events(&d, &child)[0];
    assert!(is_type(started, "session_fork"), "{started}");
    assert_eq!(started["data"]["parent_session_id"], sid.as_str());
    assert_eq!(started["data"]["title"], "the child");
    let tree = text(&call(&mut m, "tree", json!({"session_id": sid})));
    assert!(tree.contains(&child), "{tree}");

    // With a progress token, each step of the turn is reported before the answer.
    let (r, notes) = m.call(
        "tools/call",
        json!({"name": "turn", "arguments": {"session_id": sid, "prompt": "and once more"},
               "_meta": {"progressToken": "p7"}}),
        WAIT,
    );
    let turn = text(&r);
    let progress: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| &n["params"])
        .collect();
    assert!(
        progress.iter().all(|p| p["progressToken"] == "p7"),
        "{notes:?}"
    );
    let messages: Vec<&str> = progress
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages.first(), Some(&"turn started"), "{messages:?}");
    assert!(messages.contains(&"tool call: list_dir"), "{messages:?}");
    assert!(messages.contains(&"tool result: ok"), "{messages:?}");
    assert_eq!(
        messages.last(),
        Some(&"turn ended: completed"),
        "{messages:?}"
    );
    let counts: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    assert!(turn.starts_with("turn turn_"), "{turn}");
    assert!(turn.contains(" completed "), "{turn}");
    assert!(turn.contains(ANSWER), "{turn}");
    let evs = log_events(&d, &sid);
    let users: Vec<&Value> = evs.iter().filter(|e| is_type(e, "user_message")).collect();
    assert_eq!(users.last().unwrap()["data"]["text"], "and once more");
    // Turns run read-only unless the call asks for `auto`: write.json's `write_file`
    // is refused, then allowed.
    let notes = d.workspace().join("notes.txt");
    let refused = text(&call(
        &mut m,
        "turn",
        json!({"session_id": sid, "prompt": "write", "model": model("write.json")}),
    ));
    assert!(refused.contains(" completed "), "{refused}");
    assert!(!notes.exists(), "a read_only turn wrote a file");
    let evs = log_events(&d, &sid);
    let decision = evs
        .iter()
        .rfind(|e| is_type(e, "permission_decision"))
        .expect("a permission decision");
    assert_eq!(decision["data"]["mode"], "read_only", "{decision}");
    text(&call(
        &mut m,
        "turn",
        json!({"session_id": sid, "prompt": "write", "model": model("write.json"),
               "permission_mode": "auto"}),
    ));
    assert!(notes.exists(), "an auto turn may write");

    // Bad arguments are refused before any call.
    let t = error_text(
        &call(
            &mut m,
            "turn",
            json!({"session_id": sid, "prompt": "x", "permission_mode": "ask"}),
        ),
        "invalid_args",
    );
    assert!(t.contains("read_only or auto"), "{t}");
}

#[test]
fn cancelling_a_turn_call_interrupts_the_turn() {
    let d = daemon();
    let mut c = d.connect();
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "model": model("slow.json")}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    c.subscribe(&sid, None);
    let (mut m, _) = server(&d, &["--allow-writes"]);
    let id = m.request(
        "tools/call",
        json!({"name": "turn", "arguments": {"session_id": sid, "prompt": "tell a story"}}),
    );
    c.wait_event(|e| is_type(e, "turn_started"), WAIT)
        .expect("turn_started");
    m.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    let ended = c
        .wait_event(|e| is_type(e, "turn_ended"), WAIT)
        .expect("the cancelled call interrupts the turn");
    assert_eq!(ended["data"]["status"], "interrupted", "{ended}");
}

#[test]
fn output_is_capped_with_a_note_of_what_was_cut() {
    let d = daemon();
    let sid = d.create_session();
    let big = "0123456789abcdef".repeat(2048); // 32 KiB per message
    let events: Vec<Value> = (0..12)
        .map(|i| {
            let kind = if i % 2 == 0 {
                "user_message"
            } else {
                "assistant_message"
            };
            json!({"type": kind, "data": {"text": format!("m{i} {big}")}})
        })
        .collect();
    d.connect().call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": events}),
    );
    let (mut m, _) = server(&d, &[]);

    let page = text(&call(&mut m, "show", json!({"session_id": sid})));
    assert!(page.len() <= 16 * 1024, "show page is {} bytes", page.len());
    assert!(page.contains("more bytes]"), "each event is cut: {page}");
    let last = page
        .lines()
        .rfind(|l| l.starts_with('#'))
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .trim_start_matches('#')
        .to_string();
    assert!(
        page.ends_with(&format!(
            "[page cut at 16 KiB; more: call show with after_seq = {last}]\n"
        )),
        "{page}"
    );
    // The next page starts right after the last event shown.
    let next = text(&call(
        &mut m,
        "show",
        json!({"session_id": sid, "after_seq": last.parse::<u64>().unwrap()}),
    ));
    let want = last.parse::<u64>().unwrap() + 1;
    assert!(next.starts_with(&format!("#{want} ")), "{next}");

    let ctx = text(&call(&mut m, "context", json!({"session_id": sid})));
    assert!(ctx.len() <= 16 * 1024, "context is {} bytes", ctx.len());
    assert!(
        ctx.contains("[output cut at 16 KiB: ") && ctx.contains("bytes shown;"),
        "{}",
        &ctx[ctx.len().saturating_sub(300)..]
    );
}

#[test]
fn the_first_call_starts_the_daemon() {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").build();
    assert!(!d.socket().exists());
    // Initialize and list tools without a daemon: nothing is started yet.
    let (mut m, _) = server(&d, &[]);
    assert_eq!(names(&tools(&mut m)), READ_TOOLS);
    assert!(!d.socket().exists(), "listing tools needs no daemon");
    let list = text(&call(&mut m, "list_sessions", json!({})));
    assert_eq!(list, "no sessions\n");
    assert!(d.socket().exists(), "the daemon was started");
}

#[test]
fn older_and_stateless_protocol_revisions_are_served() {
    let d = daemon();
    let sid = session_with_turn(&d, "eras");
    // An older client gets the revision it asked for.
    let mut cmd = d.agentctl_cmd();
    cmd.arg("mcp-server");
    let mut old = Acp::from_command(cmd);
    let (init, _) = old.call(
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {},
               "clientInfo": {"name": "old", "version": "0"}}),
        WAIT,
    );
    assert_eq!(init["protocolVersion"], "2025-03-26", "{init}");
    old.notify("notifications/initialized", json!({}));
    assert!(text(&call(&mut old, "list_sessions", json!({}))).contains(&sid));

    // 2026-07-28: no initialize; `server/discover`, then every request carries `_meta`.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "new", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let mut cmd = d.agentctl_cmd();
    cmd.arg("mcp-server");
    let mut new = Acp::from_command(cmd);
    let (found, _) = new.call("server/discover", json!({"_meta": meta}), WAIT);
    let versions = found["supportedVersions"].as_array().unwrap();
    assert!(
        versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")),
        "{found}"
    );
    assert!(found["capabilities"]["tools"].is_object(), "{found}");
    let (listed, _) = new.call("tools/list", json!({"_meta": meta}), WAIT);
    assert_eq!(names(listed["tools"].as_array().unwrap()), READ_TOOLS);
    let (r, _) = new.call(
        "tools/call",
        json!({"_meta": meta, "name": "show", "arguments": {"session_id": sid}}),
        WAIT,
    );
    assert!(text(&r).contains(&format!("assistant: {ANSWER}")), "{r}");
}

#[test]
fn a_daemon_gone_between_calls_is_reconnected_or_restarted() {
    let mut d = daemon();
    let sid = session_with_turn(&d, "survivor");
    let (mut m, _) = server(&d, &[]);
    assert!(text(&call(&mut m, "list_sessions", json!({}))).contains(&sid));
    // Killed and started again by someone else: the next call reconnects.
    d.restart();
    let shown = text(&call(&mut m, "show", json!({"session_id": sid})));
    assert!(shown.contains(&format!("assistant: {ANSWER}")), "{shown}");
    // Killed and left dead: the next call starts a daemon, as every agentctl command.
    d.kill9();
    let list = text(&call(&mut m, "list_sessions", json!({})));
    assert!(list.contains(&sid) && list.contains("survivor"), "{list}");
}
