//! Black-box tests of MCP tools in turns (docs/mcp.md#contract): the real daemon with the offline
//! `script` provider calling tools of real MCP servers — server-everything and
//! server-filesystem (npm), mcp-server-time and mcp-server-git (PyPI), installed by
//! `.ci/mcp.sh` — and of the in-repo fake server (`agentd-mcp-fake`) for faults real
//! servers cannot produce on demand. A missing server fails the test naming it.

use agentd_tests::acp::{update, Acp};
use agentd_tests::sse::{chat_sse, sse_server, typed_sse};
use agentd_tests::{bin, is_type, wait_exit, Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn servers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp-servers")
}

/// A component of the tests; panics naming it (and how to install it) when absent.
fn need(rel: &str) -> PathBuf {
    let p = servers_dir().join(rel);
    assert!(
        p.exists(),
        "MCP test component missing: tests/mcp-servers/{rel}; install the reference servers \
         with `bash .ci/mcp.sh`"
    );
    p
}

fn node() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("node"))
        .find(|p| p.is_file())
        .expect("MCP test component missing: `node` on PATH (needed by server-everything)")
}

fn everything_entry() -> String {
    format!(
        "[mcp_servers.everything]\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
        node().display().to_string(),
        need("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
            .display()
            .to_string()
    )
}

fn time_entry() -> String {
    format!(
        "[mcp_servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"UTC\"]\n",
        need("venv/bin/mcp-server-time").display().to_string()
    )
}

fn fake_entry(name: &str, args: &[&str], extra: &str) -> String {
    format!(
        "[mcp_servers.{name}]\ncommand = {:?}\nargs = {}\n{extra}",
        bin("agentd-mcp-fake").display().to_string(),
        json!(args)
    )
}

fn daemon(config: &str) -> Daemon {
    Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(config)
        .start()
}

/// Writes a script whose single rule plays `steps`, returns its `script:` model.
fn script(d: &Daemon, name: &str, steps: Value) -> String {
    let p = d.root().join(name);
    std::fs::write(
        &p,
        serde_json::to_vec(&json!({"rules": [{"steps": steps}]})).unwrap(),
    )
    .unwrap();
    format!("script:{}", p.display())
}

fn create(d: &Daemon, c: &mut RpcConn, model: &str) -> String {
    c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "model": model}),
    )["session_id"]
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

fn of_type<'a>(evs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| is_type(e, kind)).collect()
}

/// The `tool_result` data of `call_id`'s call, found through the `tool_call` of `name`.
fn result_of<'a>(evs: &'a [Value], name: &str, nth: usize) -> &'a Value {
    let call = of_type(evs, "tool_call")
        .into_iter()
        .filter(|e| e["data"]["name"] == name)
        .nth(nth)
        .unwrap_or_else(|| panic!("no tool_call #{nth} of {name}"));
    let id = &call["data"]["call_id"];
    &of_type(evs, "tool_result")
        .into_iter()
        .find(|e| &e["data"]["call_id"] == id)
        .unwrap_or_else(|| panic!("no tool_result for {name}"))["data"]
}

fn call(name: &str, args: Value) -> Value {
    json!({"name": name, "args": args})
}

fn assert_balanced(c: &mut RpcConn, sid: &str) {
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert_eq!(ctx["stats"]["balanced"], true, "{ctx}");
}

fn turn_in_thread(d: &Daemon, params: Value) -> std::thread::JoinHandle<std::io::Result<Value>> {
    let mut c = d.connect();
    c.set_call_timeout(Duration::from_secs(120));
    std::thread::spawn(move || c.try_call("agentd/turn", params))
}

#[test]
fn server_everything_text_image_structured_and_errors_beside_builtins() {
    let d = daemon(&everything_entry());
    std::fs::write(d.workspace().join("README.md"), "hi\n").unwrap();
    let mut c = d.connect();
    let model = script(
        &d,
        "everything.json",
        json!([
            {"tool_calls": [
                call("mcp__everything__echo", json!({"message": "hi"})),
                call("mcp__everything__get-tiny-image", json!({})),
                call("mcp__everything__get-structured-content", json!({"location": "Chicago"})),
                call("mcp__everything__echo", json!({})),
                call("mcp__everything__no-such-tool", json!({})),
                call("mcp__everything__get-resource-links", json!({"count": 2})),
                call("list_dir", json!({"path": "."})),
            ]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "use the tools"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);

    let servers = of_type(&evs, "mcp_servers");
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["data"]["servers"][0]["name"], "everything");
    assert!(servers[0]["data"].get("failed").is_none(), "{}", servers[0]);

    let echo_call = of_type(&evs, "tool_call")[0];
    assert_eq!(
        echo_call["data"]["mcp"],
        json!({"server": "everything", "tool": "echo"})
    );
    let echo = result_of(&evs, "mcp__everything__echo", 0);
    assert_eq!(echo["ok"], true, "{echo}");
    assert_eq!(echo["output"], "Echo: hi");
    assert_eq!(echo["mcp"]["tool"], "echo");

    let img = result_of(&evs, "mcp__everything__get-tiny-image", 0);
    assert_eq!(img["ok"], true, "{img}");
    let media = &img["mcp"]["media"][0];
    assert_eq!(media["type"], "image");
    assert_eq!(media["mime"], "image/png");
    let stored = d
        .log_path(&sid)
        .with_extension("")
        .join(media["resource"].as_str().unwrap());
    let png = std::fs::read(&stored).unwrap_or_else(|e| panic!("{}: {e}", stored.display()));
    assert_eq!(&png[1..4], b"PNG");
    assert_eq!(png.len() as u64, media["bytes"].as_u64().unwrap());

    let st = result_of(&evs, "mcp__everything__get-structured-content", 0);
    assert_eq!(st["ok"], true, "{st}");
    assert_eq!(st["mcp"]["structured"], true);
    assert!(
        st["output"].as_str().unwrap().contains("temperature"),
        "{st}"
    );

    // Bad arguments: the server's own error text reaches the model.
    let bad = result_of(&evs, "mcp__everything__echo", 1);
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(bad.to_string().contains("message"), "{bad}");

    // A name no server offers is an unknown tool, the turn goes on.
    let unknown = result_of(&evs, "mcp__everything__no-such-tool", 0);
    assert_eq!(unknown["ok"], false);
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));

    let links = result_of(&evs, "mcp__everything__get-resource-links", 0);
    assert_eq!(links["ok"], true);
    assert!(links["output"].as_str().unwrap().contains("://"), "{links}");

    let ls = result_of(&evs, "list_dir", 0);
    assert_eq!(ls["ok"], true);
    assert!(ls["output"].as_str().unwrap().contains("README.md"));
    assert_balanced(&mut c, &sid);

    // The session's tools, as agentctl shows them: sorted, mangled, raw names kept.
    let tools = c.call_ok("agentd/mcp_tools", json!({"session_id": sid}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.contains(&"mcp__everything__get-tiny-image"));
    assert_eq!(tools["servers"][0]["state"], "ready");
    assert_eq!(tools["servers"][0]["protocol"], "2025-11-25");
}

#[test]
fn mcp_server_time_speaks_the_modern_era_with_structured_results_and_is_error() {
    let d = daemon(&time_entry());
    let mut c = d.connect();
    let model = script(
        &d,
        "time.json",
        json!([
            {"tool_calls": [
                call("mcp__time__get_current_time", json!({"timezone": "UTC"})),
                call("mcp__time__get_current_time", json!({"timezone": "Mars/Base"})),
            ]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "time?"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let ok = result_of(&evs, "mcp__time__get_current_time", 0);
    assert_eq!(ok["ok"], true, "{ok}");
    assert!(ok["output"].as_str().unwrap().contains("UTC"), "{ok}");
    let bad = result_of(&evs, "mcp__time__get_current_time", 1);
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(bad.to_string().contains("Mars/Base"), "{bad}");
    let tools = c.call_ok("agentd/mcp_tools", json!({"session_id": sid}));
    assert_eq!(tools["servers"][0]["protocol"], "2026-07-28", "{tools}");
}

#[test]
fn ask_mode_asks_with_server_tool_and_annotations_and_remembers_always() {
    let d = daemon(&everything_entry());
    let mut c = d.connect();
    let model = script(
        &d,
        "ask.json",
        json!([
            {"tool_calls": [
                call("mcp__everything__echo", json!({"message": "one"})),
                call("mcp__everything__echo", json!({"message": "two"})),
                call("mcp__everything__get-sum", json!({"a": 1, "b": 2})),
            ]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    let mut client = d.connect();
    client.call_ok(
        "agentd/subscribe",
        json!({"session_id": sid, "permissions": true}),
    );
    let running = turn_in_thread(
        &d,
        json!({"session_id": sid, "input": "ask me", "permission_mode": "ask"}),
    );
    let req = client
        .wait_for(
            |m| m["method"] == "agentd/permission" && m.get("id").is_some(),
            WAIT,
        )
        .expect("a permission request for echo");
    let p = &req["params"];
    assert_eq!(p["tool"], "mcp__everything__echo");
    assert_eq!(p["mcp"]["server"], "everything");
    assert_eq!(p["mcp"]["tool"], "echo");
    assert_eq!(p["mcp"]["annotations"]["readOnlyHint"], true);
    assert_eq!(p["args"]["message"], "one");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"decision": "allow_always"}});
    client.send_raw(format!("{answer}\n").as_bytes()).unwrap();
    // The second echo is not asked; get-sum is, and is denied.
    let req = client
        .wait_for(
            |m| m["method"] == "agentd/permission" && m.get("id").is_some(),
            WAIT,
        )
        .expect("a permission request for get-sum");
    assert_eq!(req["params"]["mcp"]["tool"], "get-sum");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"decision": "deny"}});
    client.send_raw(format!("{answer}\n").as_bytes()).unwrap();
    let r = running.join().unwrap().unwrap();
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let reasons: Vec<&str> = of_type(&evs, "permission_decision")
        .iter()
        .map(|e| e["data"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["client_allowed_always", "always_allowed", "client_denied"]
    );
    assert_eq!(
        result_of(&evs, "mcp__everything__echo", 1)["output"],
        "Echo: two"
    );
    let denied = result_of(&evs, "mcp__everything__get-sum", 0);
    assert_eq!(denied["ok"], false);
    assert_eq!(denied["error"]["kind"], "permission_denied");
}

#[test]
fn read_only_mode_refuses_untrusted_and_runs_trusted_read_only_tools() {
    let cfg = format!(
        "{}trust_annotations = true\n{}",
        everything_entry(),
        fake_entry("fake", &[], "")
    );
    let d = daemon(&cfg);
    let mut c = d.connect();
    let model = script(
        &d,
        "ro.json",
        json!([
            {"tool_calls": [
                call("mcp__everything__echo", json!({"message": "ro"})),
                call("mcp__everything__toggle-simulated-logging", json!({})),
                call("mcp__fake__echo", json!({"message": "untrusted"})),
            ]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "ro", "permission_mode": "read_only"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    assert_eq!(
        result_of(&evs, "mcp__everything__echo", 0)["output"],
        "Echo: ro"
    );
    for name in [
        "mcp__everything__toggle-simulated-logging",
        "mcp__fake__echo",
    ] {
        let res = result_of(&evs, name, 0);
        assert_eq!(res["ok"], false, "{name}: {res}");
        assert_eq!(res["error"]["kind"], "permission_denied");
    }
}

#[test]
fn interrupting_a_long_running_operation_cancels_the_call() {
    let d = daemon(&everything_entry());
    let mut c = d.connect();
    let model = script(
        &d,
        "long.json",
        json!([
            {"tool_calls": [call("mcp__everything__trigger-long-running-operation",
                json!({"duration": 60, "steps": 60}))]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let running = turn_in_thread(&d, json!({"session_id": sid, "input": "long"}));
    // The server is running the operation once its first progress notification arrives.
    let status = sub
        .wait_event(
            |e| is_type(e, "status") && e["data"].get("mcp_progress").is_some(),
            WAIT,
        )
        .expect("progress of the long call");
    assert_eq!(status["data"]["mcp_progress"]["total"], 60.0, "{status}");
    let began = std::time::Instant::now();
    let r = c.call_ok("agentd/interrupt", json!({"session_id": sid}));
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(r.to_string().contains("interrupt") || r.is_object(), "{r}");
    let t = running.join().unwrap().unwrap();
    assert_eq!(t["result"]["status"], "interrupted", "{t}");
    let evs = events(&mut c, &sid);
    let res = result_of(&evs, "mcp__everything__trigger-long-running-operation", 0);
    assert_eq!(res["ok"], false);
    assert_eq!(res["mcp"]["error_kind"], "cancelled", "{res}");
    assert_balanced(&mut c, &sid);
    // The server still answers the next turn.
    let model2 = script(
        &d,
        "after.json",
        json!([{"tool_calls": [call("mcp__everything__echo", json!({"message": "after"}))]}, {"text": "ok"}]),
    );
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "again", "model": model2}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    assert_eq!(
        result_of(&evs, "mcp__everything__echo", 0)["output"],
        "Echo: after"
    );
}

/// Pid records under the home: `(pid, pgid)` of each running server.
fn records(d: &Daemon) -> Vec<(i32, i32)> {
    let dir = d.home().join("mcp").join("running");
    std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let v: Value = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
                    Some((v["pid"].as_i64()? as i32, v["pgid"].as_i64()? as i32))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// True while a process of group `pgid` runs (zombies, which an init that reaps late
/// keeps around, do not count).
fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some(close) = stat.rfind(')') else {
            return false;
        };
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
    })
}

#[test]
fn kill_9_mid_call_reaps_the_server_and_closes_the_call_as_outcome_unknown() {
    let d0 = Daemon::builder()
        .env("AGENTD_DURABILITY", "sync")
        .config(&fake_entry("fake", &["--linger"], ""));
    let mut d = d0.start();
    let mut c = d.connect();
    let model = script(
        &d,
        "wait.json",
        json!([{"tool_calls": [call("mcp__fake__wait", json!({}))]}, {"text": "done"}]),
    );
    let sid = create(&d, &mut c, &model);
    let mut sub = d.connect();
    sub.subscribe(&sid, None);
    let _running = turn_in_thread(&d, json!({"session_id": sid, "input": "wait"}));
    let call_ev = sub
        .wait_event(|e| is_type(e, "tool_call"), WAIT)
        .expect("the call starts");
    assert_eq!(call_ev["data"]["mcp"]["tool"], "wait");
    let recs = records(&d);
    assert_eq!(recs.len(), 1, "one running server recorded");
    let (_, pgid) = recs[0];
    assert!(group_alive(pgid));
    d.kill9();
    // The server outlives the killed daemon until the next one reaps it.
    assert!(
        group_alive(pgid),
        "the server group survives a SIGKILL of the daemon"
    );
    d.spawn();
    d.wait_ready(Duration::from_secs(20)).unwrap();
    assert!(
        !group_alive(pgid),
        "the restarted daemon reaped the server group; daemon log: {}",
        d.daemon_output()
    );
    // The resumed turn may start the server again (a new group): the killed
    // daemon's record is what must be gone.
    assert!(
        !records(&d).iter().any(|&(_, g)| g == pgid),
        "the dead server's record is removed: {:?}",
        records(&d)
    );
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(0));
    sub.wait_event(|e| is_type(e, "turn_ended"), WAIT)
        .expect("the resumed turn ends");
    let mut c = d.connect();
    c.call_ok("agentd/reconcile", json!({"session_id": sid}));
    let evs = events(&mut c, &sid);
    let res = result_of(&evs, "mcp__fake__wait", 0);
    assert_eq!(res["ok"], false);
    assert_eq!(res["error"]["details"]["outcome"], "unknown", "{res}");
    assert!(res["error"]["message"]
        .as_str()
        .unwrap()
        .contains("may or may not have taken effect"));
    assert_balanced(&mut c, &sid);
    // Exactly one result: never retried.
    let results = of_type(&evs, "tool_result").len();
    assert_eq!(results, 1);
}

#[test]
fn servers_get_no_provider_key_and_client_env_values_are_redacted() {
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("OPENAI_API_KEY", "sk-test-provider-key-0123456789")
        .env("AGENTD_TEST_CANARY", "canary-value-987654")
        .config(&everything_entry())
        .start();
    let mut c = d.connect();
    let model = script(
        &d,
        "env.json",
        json!([
            {"tool_calls": [call("mcp__everything__get-env", json!({})),
                            call("mcp__client__env", json!({}))]},
            {"text": "done"}
        ]),
    );
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "model": model, "mcp_servers": [{
            "name": "client", "command": bin("agentd-mcp-fake"), "args": [],
            "env": [{"name": "CLIENT_TOKEN", "value": "client-secret-value-42"}]}]}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "env"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let env = result_of(&evs, "mcp__everything__get-env", 0);
    assert_eq!(env["ok"], true, "{env}");
    let text = env["output"].as_str().unwrap();
    assert!(text.contains("PATH"), "{text}");
    for bad in [
        "OPENAI_API_KEY",
        "sk-test-provider",
        "AGENTD_TEST_CANARY",
        "canary-value",
    ] {
        assert!(!text.contains(bad), "{bad} reached the server: {text}");
    }
    let client = result_of(&evs, "mcp__client__env", 0);
    assert!(
        client["output"]
            .as_str()
            .unwrap()
            .contains("CLIENT_TOKEN=[redacted]"),
        "{client}"
    );
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    assert!(!log.contains("client-secret-value-42"));
    let servers = &of_type(&evs, "mcp_servers")[0]["data"]["servers"];
    let client_desc = servers
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "client")
        .unwrap();
    assert_eq!(client_desc["env"], json!(["CLIENT_TOKEN"]));
    assert_eq!(client_desc["origin"], "client");
}

#[test]
fn a_failed_server_is_recorded_and_fails_the_turn_only_when_required() {
    let cfg = format!(
        "{}{}",
        fake_entry("stuck", &["--hang"], "startup_timeout_s = 1\n"),
        fake_entry("ok", &[], "")
    );
    let d = daemon(&cfg);
    let mut c = d.connect();
    let model = script(
        &d,
        "ok.json",
        json!([{"tool_calls": [call("mcp__ok__echo", json!({"message": "x"}))]}, {"text": "done"}]),
    );
    let sid = create(&d, &mut c, &model);
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "go"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let failed = &of_type(&evs, "mcp_servers")[0]["data"]["failed"];
    assert_eq!(failed[0]["server"], "stuck", "{failed}");
    assert!(failed[0]["message"]
        .as_str()
        .unwrap()
        .contains("startup_timeout_s"));
    assert_eq!(result_of(&evs, "mcp__ok__echo", 0)["output"], "Echo: x");

    let cfg = fake_entry(
        "stuck",
        &["--hang"],
        "startup_timeout_s = 1\nrequired = true\n",
    );
    let d = daemon(&cfg);
    let mut c = d.connect();
    let sid = create(&d, &mut c, &model);
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "go"}));
    assert_eq!(r["status"], "failed", "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("required MCP server"));
}

#[test]
fn a_server_dying_mid_call_gives_a_clear_error_and_the_next_call_restarts_it() {
    let d = daemon(&fake_entry("fake", &[], ""));
    let mut c = d.connect();
    let model = script(
        &d,
        "die.json",
        json!([
            {"tool_calls": [call("mcp__fake__die", json!({})), call("mcp__fake__echo", json!({"message": "back"}))]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "die"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let died = result_of(&evs, "mcp__fake__die", 0);
    assert_eq!(died["ok"], false);
    assert_eq!(died["mcp"]["error_kind"], "transport_closed");
    assert!(died["error"]["message"]
        .as_str()
        .unwrap()
        .contains("restarted"));
    assert_eq!(
        result_of(&evs, "mcp__fake__echo", 0)["output"],
        "Echo: back"
    );
}

#[test]
fn a_10_mb_result_is_capped_with_the_full_text_in_a_resource() {
    let d = daemon(&fake_entry("fake", &[], ""));
    let mut c = d.connect();
    let model = script(
        &d,
        "big.json",
        json!([{"tool_calls": [call("mcp__fake__big", json!({}))]}, {"text": "done"}]),
    );
    let sid = create(&d, &mut c, &model);
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "big"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let big = result_of(&evs, "mcp__fake__big", 0);
    assert!(big["output"].as_str().unwrap().len() <= 16 * 1024);
    assert_eq!(big["resource"]["bytes"], 10 << 20);
}

#[test]
fn agentctl_mcp_tools_probes_the_configured_servers() {
    let cfg = format!(
        "{}{}",
        fake_entry("fake", &["--colliding"], ""),
        time_entry()
    );
    let d = daemon(&cfg);
    let out = d.agentctl(["mcp", "tools", "--json"]);
    out.assert_code(0);
    let v = out.json();
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"mcp__time__get_current_time"), "{names:?}");
    assert!(names
        .iter()
        .all(|n| n.len() <= 64 && n.starts_with("mcp__")));
    let unique: std::collections::BTreeSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    let out = d.agentctl(["mcp", "list"]);
    out.assert_code(0);
    assert!(
        out.stdout.contains("fake") && out.stdout.contains("time"),
        "{out:?}"
    );
}

#[test]
fn acp_session_new_with_a_stdio_server_whose_tool_a_prompt_uses() {
    let d = daemon("");
    let model = script(
        &d,
        "acp.json",
        json!([{"tool_calls": [call("mcp__fake__echo", json!({"message": "via acp"}))]}, {"text": "done"}]),
    );
    let mut a = Acp::spawn(&d, &["--model", &model]);
    let init = a.initialize();
    assert_eq!(
        init["agentCapabilities"]["mcpCapabilities"],
        json!({"http": true, "sse": false})
    );
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": [{"name": "fake",
            "command": bin("agentd-mcp-fake"), "args": [],
            "env": [{"name": "ACP_TOKEN", "value": "acp-secret-token-1234"}]}]}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "echo"}]}),
    );
    // ACP's default mode asks: the MCP call comes as session/request_permission.
    let (_, req) = a
        .wait_for(WAIT, |v| v["method"] == "session/request_permission")
        .expect("a permission request for the MCP call");
    assert!(req.to_string().contains("mcp__fake__echo"), "{req}");
    a.respond(
        &req["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}}),
    );
    let (r, notes) = a.response(id, WAIT);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let done = notes
        .iter()
        .filter_map(update)
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .unwrap_or_else(|| panic!("no completed tool call: {notes:?}"));
    assert!(done.to_string().contains("Echo: via acp"), "{done}");
    let mut c = d.connect();
    let evs = events(&mut c, &sid);
    let res = result_of(&evs, "mcp__fake__echo", 0);
    assert_eq!(res["output"], "Echo: via acp");
    assert_eq!(res["mcp"]["server"], "fake");
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    assert!(!log.contains("acp-secret-token-1234"));
    assert!(log.contains("ACP_TOKEN"), "the Log names the variable");
}

/// A child process group killed on drop.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: a signal to the group this test started.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

#[test]
fn streamable_http_server_everything_on_loopback() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(node())
        .arg(need(
            "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        ))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start server-everything streamableHttp");
    let stderr = child.stderr.take().unwrap();
    let server = Group(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on port") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(WAIT)
        .expect("server-everything listens on its port");
    let cfg = format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbearer_token_env = \"WEB_TOKEN\"\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("WEB_TOKEN", "web-bearer-token-5678")
        .config(&cfg)
        .start();
    let mut c = d.connect();
    let model = script(
        &d,
        "http.json",
        json!([
            {"tool_calls": [call("mcp__web__get-sum", json!({"a": 2, "b": 3})),
                            call("mcp__web__echo", json!({"message": "over http"}))]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "http"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let servers = &of_type(&evs, "mcp_servers")[0]["data"];
    assert!(servers.get("failed").is_none(), "{servers}");
    assert_eq!(servers["servers"][0]["transport"], "http");
    assert_eq!(servers["servers"][0]["headers"], json!(["Authorization"]));
    let sum = result_of(&evs, "mcp__web__get-sum", 0);
    assert_eq!(sum["ok"], true, "{sum}");
    assert!(sum["output"].as_str().unwrap().contains('5'), "{sum}");
    assert_eq!(
        result_of(&evs, "mcp__web__echo", 0)["output"],
        "Echo: over http"
    );
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    assert!(!log.contains("web-bearer-token-5678"));

    // The same server given by a client (ACP's `http` shape, a literal header).
    let model = script(
        &d,
        "http2.json",
        json!([{"tool_calls": [call("mcp__client-web__echo", json!({"message": "client http"}))]}, {"text": "done"}]),
    );
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "model": model, "mcp_servers": [{"type": "http",
            "name": "client-web", "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": [{"name": "X-Client-Secret", "value": "client-header-value-77"}]}]}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "http2"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    assert_eq!(
        result_of(&evs, "mcp__client-web__echo", 0)["output"],
        "Echo: client http"
    );
    let desc = &of_type(&evs, "mcp_servers")[0]["data"]["servers"];
    let client = desc
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "client-web")
        .unwrap();
    assert_eq!(client["headers"], json!(["X-Client-Secret"]));
    let log = String::from_utf8(d.log_bytes(&sid)).unwrap();
    assert!(!log.contains("client-header-value-77"));
    drop(server);
}

#[test]
fn idle_servers_stop_and_start_again_at_the_next_turn() {
    let d = daemon(&format!(
        "mcp_idle_stop_s = 1\n{}",
        fake_entry("fake", &[], "")
    ));
    let mut c = d.connect();
    let model = script(
        &d,
        "idle.json",
        json!([{"tool_calls": [call("mcp__fake__echo", json!({"message": "one"}))]}, {"text": "done"}]),
    );
    let sid = create(&d, &mut c, &model);
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "one"}));
    assert_eq!(r["status"], "completed", "{r}");
    let recs = records(&d);
    assert_eq!(recs.len(), 1);
    assert!(
        wait_exit(recs[0].0, WAIT),
        "the idle server was not stopped"
    );
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "two"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    assert_eq!(result_of(&evs, "mcp__fake__echo", 1)["output"], "Echo: one");
    let now = records(&d);
    assert!(
        now.iter().any(|r| r.0 != recs[0].0),
        "a new server process runs: {now:?}"
    );
    let listed = c.call_ok("agentd/mcp_list", json!({"session_id": sid}));
    assert_eq!(
        listed["sessions"][0]["servers"][0]["state"], "ready",
        "{listed}"
    );
}

#[test]
fn server_filesystem_confined_to_the_workspace_and_mcp_server_git() {
    // Both run in the session workspace (the default `cwd`), so "." is the workspace.
    let cfg = format!(
        "[mcp_servers.fs]\ncommand = {:?}\nargs = [{:?}, \".\"]\n\
         [mcp_servers.git]\ncommand = {:?}\nargs = [\"--repository\", \".\"]\n",
        node().display().to_string(),
        need("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
            .display()
            .to_string(),
        need("venv/bin/mcp-server-git").display().to_string(),
    );
    let d = daemon(&cfg);
    let ws = d.workspace().canonicalize().unwrap();
    std::fs::write(ws.join("notes.txt"), "inside the workspace\n").unwrap();
    let git_ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .expect("MCP test component missing: `git` (needed by mcp-server-git)")
        .success();
    assert!(git_ok);
    let ws_s = ws.display().to_string();
    let mut c = d.connect();
    let model = script(
        &d,
        "fs.json",
        json!([
            {"tool_calls": [
                call("mcp__fs__read_text_file", json!({"path": format!("{ws_s}/notes.txt")})),
                call("mcp__fs__read_text_file", json!({"path": "/etc/passwd"})),
                call("mcp__git__git_status", json!({"repo_path": ws_s})),
            ]},
            {"text": "done"}
        ]),
    );
    let sid = create(&d, &mut c, &model);
    c.set_call_timeout(Duration::from_secs(90));
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": "files"}));
    assert_eq!(r["status"], "completed", "{r}");
    let evs = events(&mut c, &sid);
    let started = &of_type(&evs, "mcp_servers")[0]["data"];
    assert!(started.get("failed").is_none(), "{started}");
    let inside = result_of(&evs, "mcp__fs__read_text_file", 0);
    assert_eq!(inside["ok"], true, "{inside}");
    assert!(inside["output"]
        .as_str()
        .unwrap()
        .contains("inside the workspace"));
    let outside = result_of(&evs, "mcp__fs__read_text_file", 1);
    assert_eq!(outside["ok"], false, "{outside}");
    assert!(!outside.to_string().contains("root:"), "{outside}");
    let status = result_of(&evs, "mcp__git__git_status", 0);
    assert_eq!(status["ok"], true, "{status}");
    assert!(
        status["output"].as_str().unwrap().contains("notes.txt"),
        "{status}"
    );
}

#[test]
fn agentctl_mcp_import_shows_then_writes_with_yes_and_doctor_starts_each_server() {
    let d = daemon(&fake_entry("fake", &[], ""));
    let file = d.root().join("project.mcp.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"mcpServers": {
            "everything": {"command": "/nonexistent/mcp-server-everything", "args": ["stdio"],
                           "env": {"API_TOKEN": "${API_TOKEN}", "MODE": "secret-mode-value"}},
            "fake": {"command": "/bin/false"},
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}
        }}))
        .unwrap(),
    )
    .unwrap();
    let config = d.root().join("config.toml");
    let before = std::fs::read_to_string(&config).unwrap();
    let path = file.to_str().unwrap();
    let cfg = config.to_str().unwrap();
    let out = d.agentctl(["mcp", "import", path, "--config", cfg]);
    out.assert_code(0);
    assert!(out.stdout.contains("everything"), "{out:?}");
    assert!(
        !out.stdout.contains("secret-mode-value"),
        "env values are hidden"
    );
    assert!(out.stdout.contains("--yes"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        before,
        "nothing written"
    );
    let out = d.agentctl(["--json", "mcp", "import", path, "--config", cfg, "--yes"]);
    out.assert_code(0);
    let v = out.json();
    assert_eq!(v["added"], json!(["everything"]));
    assert_eq!(v["skipped"], json!(["fake"]), "config wins");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with(&before));
    assert!(text.contains("[mcp_servers.everything]"), "{text}");
    assert!(text.contains("env_vars = [\"API_TOKEN\"]"), "{text}");
    assert!(!text.contains("[mcp_servers.old]"));

    // doctor starts each configured server once: the fake answers, the imported entry
    // (a program that does not exist here) is reported with its error and a fix.
    let out = d.agentctl(["doctor"]);
    assert!(
        out.stdout.contains("mcp:fake: 16 tools"),
        "doctor output: {}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("FAIL  mcp:everything: MCP server `everything`: cannot run"),
        "{}",
        out.stdout
    );
}

const IMAGE_TOOL: &str = "mcp__everything__get-tiny-image";

/// A provider step calling the image tool, then one ending the turn, in `kind`'s wire.
fn image_steps(kind: &str) -> Vec<String> {
    match kind {
        "anthropic" => vec![
            typed_sse(&[
                json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_img", "name": IMAGE_TOOL, "input": {}}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}}),
                json!({"type": "message_stop"}),
            ]),
            typed_sse(&[
                json!({"type": "message_start", "message": {"model": "m1", "usage": {"input_tokens": 10, "output_tokens": 0}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "A tiny image."}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
                json!({"type": "message_stop"}),
            ]),
        ],
        "openai-responses" => {
            let usage = json!({"input_tokens": 10, "output_tokens": 2, "total_tokens": 12});
            vec![
                typed_sse(&[
                    json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_img", "name": IMAGE_TOOL, "arguments": "{}"}}),
                    json!({"type": "response.completed", "response": {"id": "r1", "model": "m1", "status": "completed", "usage": usage}}),
                ]),
                typed_sse(&[
                    json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A tiny image."}]}}),
                    json!({"type": "response.completed", "response": {"id": "r2", "model": "m1", "status": "completed", "usage": usage}}),
                ]),
            ]
        }
        _ => vec![
            chat_sse(&[
                json!({"model": "m1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_img", "type": "function", "function": {"name": IMAGE_TOOL, "arguments": "{}"}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ]),
            chat_sse(&[
                json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": "A tiny image."}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ]),
        ],
    }
}

/// An image from an MCP tool reaches the next provider request as an image, with the
/// stored resource's bytes: in the tool result where the wire takes images there
/// (Anthropic `tool_result` content, Responses `function_call_output.output`); Chat
/// Completions tool messages keep the placeholder text and a user message after them
/// carries the image. The Log holds only the reference.
#[test]
fn tool_result_images_reach_each_wire() {
    use base64::Engine;
    for kind in ["anthropic", "openai-responses", "openai-chat"] {
        let (base, server) = sse_server(image_steps(kind));
        let base = if kind == "anthropic" {
            base.trim_end_matches("/v1").to_string()
        } else {
            base
        };
        let config = format!(
            "default_provider = \"p\"\n[providers.p]\nkind = \"{kind}\"\nbase_url = \"{base}\"\n\
             model = \"m1\"\ncontext_window = 100000\n{}",
            everything_entry()
        );
        let d = daemon(&config);
        let mut c = d.connect();
        let sid = c.call_ok("agentd/create", json!({"workspace": d.workspace()}))["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        c.set_call_timeout(Duration::from_secs(60));
        let r = c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": "show me the image"}),
        );
        assert_eq!(r["status"], "completed", "{kind}: {r}");
        let bodies = server.join().unwrap();
        assert_eq!(bodies.len(), 2, "{kind}");

        let evs = events(&mut c, &sid);
        let img = result_of(&evs, IMAGE_TOOL, 0);
        assert_eq!(img["ok"], true, "{kind}: {img}");
        let media = &img["mcp"]["media"][0];
        assert_eq!(media["mime"], "image/png", "{kind}: {img}");
        let stored = d
            .log_path(&sid)
            .with_extension("")
            .join(media["resource"].as_str().unwrap());
        let png = std::fs::read(&stored).unwrap_or_else(|e| panic!("{}: {e}", stored.display()));
        assert_eq!(&png[1..4], b"PNG");
        let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
        // The Log never holds the bytes.
        let log = std::fs::read_to_string(d.log_path(&sid)).unwrap();
        assert!(!log.contains(&b64), "{kind}: image bytes in the Log");
        let placeholder = img["output"].as_str().unwrap().to_string();
        assert!(placeholder.contains("image/png"), "{kind}: {placeholder}");

        let next = &bodies[1];
        match kind {
            "anthropic" => {
                let msgs = next["messages"].as_array().unwrap();
                let result = msgs
                    .iter()
                    .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                    .find(|b| b["type"] == "tool_result")
                    .unwrap_or_else(|| panic!("no tool_result in {next}"));
                assert_eq!(result["tool_use_id"], "toolu_img");
                assert_eq!(
                    result["content"],
                    json!([
                        {"type": "text", "text": placeholder},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
                    ]),
                    "{next}"
                );
            }
            "openai-responses" => {
                let out = next["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|i| i["type"] == "function_call_output")
                    .unwrap_or_else(|| panic!("no function_call_output in {next}"));
                assert_eq!(out["call_id"], "call_img");
                assert_eq!(
                    out["output"],
                    json!([
                        {"type": "input_text", "text": placeholder},
                        {"type": "input_image", "image_url": format!("data:image/png;base64,{b64}")},
                    ]),
                    "{next}"
                );
            }
            _ => {
                let tool = next["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["role"] == "tool")
                    .unwrap_or_else(|| panic!("no tool message in {next}"));
                assert_eq!(tool["tool_call_id"], "call_img");
                assert_eq!(tool["content"], json!(placeholder), "{next}");
                // Tool messages are text: the image follows them in a user message.
                let msgs = next["messages"].as_array().unwrap();
                let at = msgs.iter().position(|m| m["role"] == "tool").unwrap();
                assert_eq!(
                    msgs[at + 1],
                    json!({"role": "user", "content": [
                        {"type": "text", "text": "[the images returned by tool call call_img]"},
                        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}},
                    ]}),
                    "{next}"
                );
            }
        }
        // `agentd/context` renders the references as the placeholder text only.
        assert_balanced(&mut c, &sid);
    }
}

/// On the PostgreSQL store an MCP tool's image is kept in the store's `images` table
/// too, so another daemon of the database (its own home, without the first one's
/// resources) that takes the session over sends the image itself in its next request,
/// not only the placeholder line.
#[test]
fn an_mcp_image_reaches_the_provider_from_another_daemon_of_the_database() {
    use base64::Engine;
    let url = agentd_tests::pg::PgServer::shared().create_db();
    let provider = |base: &str| {
        format!(
            "default_provider = \"p\"\n[providers.p]\nkind = \"anthropic\"\nbase_url = \"{}\"\n\
             model = \"m1\"\ncontext_window = 100000\n",
            base.trim_end_matches("/v1")
        )
    };
    let (base, server) = sse_server(image_steps("anthropic"));
    let mut a = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("AGENTD_STORE", &url)
        .config(&format!("{}{}", provider(&base), everything_entry()))
        .start();
    let mut c = a.connect();
    c.set_call_timeout(Duration::from_secs(60));
    let sid = c.call_ok("agentd/create", json!({"workspace": a.workspace()}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "show me the image"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(server.join().unwrap().len(), 2);
    let evs = events(&mut c, &sid);
    let img = result_of(&evs, IMAGE_TOOL, 0);
    let media = &img["mcp"]["media"][0];
    let sha = media["resource"]
        .as_str()
        .and_then(|r| r.strip_prefix("resources/"))
        .unwrap_or_else(|| panic!("no resource: {img}"))
        .to_string();
    let rows = a.store_images().expect("a PostgreSQL store");
    assert_eq!(
        rows.len(),
        1,
        "one image row: {:?}",
        rows.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    let (row_sha, png) = &rows[0];
    assert_eq!(row_sha, &sha);
    assert_eq!(&png[1..4], b"PNG");
    assert_eq!(png.len() as u64, media["bytes"].as_u64().unwrap());
    let placeholder = img["output"].as_str().unwrap().to_string();
    drop(c);
    assert!(a
        .shutdown(Duration::from_secs(30))
        .expect("a stops")
        .success());

    // Another daemon of the database, with a home of its own: its resources are empty.
    let (base, server) = sse_server(vec![image_steps("anthropic").remove(1)]);
    let b = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("AGENTD_STORE", &url)
        .config(&provider(&base))
        .start();
    let mut c = b.connect();
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "and once more"}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let bodies = server.join().unwrap();
    let result = bodies[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in {}", bodies[0]));
    let b64 = base64::engine::general_purpose::STANDARD.encode(png);
    assert_eq!(
        result["content"],
        json!([
            {"type": "text", "text": placeholder},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
        ]),
        "{}",
        bodies[0]
    );
}
