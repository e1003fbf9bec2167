//! Black-box tests of `agentctl chat`: the real binary on a real pseudo-terminal
//! (`agentd_tests::pty`), against the real daemon and the offline `script` provider.
//! Every wait is on screen content or an event, with a deadline.

use agentd_tests::pty::Pty;
use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Writes a script file into the daemon's temp dir and returns its `script:` model.
fn script(d: &Daemon, name: &str, body: Value) -> String {
    let p = d.root().join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(&body).unwrap()).unwrap();
    format!("script:{}", p.display())
}

fn chat(d: &Daemon, args: &[&str], rows: u16, cols: u16) -> Pty {
    let mut cmd = d.agentctl_cmd();
    cmd.arg("chat").args(args);
    Pty::spawn(cmd, rows, cols)
}

#[test]
fn a_new_chat_streams_an_answer() {
    let d = Daemon::start();
    let model = script(
        &d,
        "hi.json",
        json!({"rules":[{"steps":[{"text":"Hello from the **script**.\n```rust\nfn main() {}\n```","chunk_chars":4,"delay_ms":5}]}]}),
    );
    let mut p = chat(&d, &["--new", "--model", &model], 30, 100);
    p.wait_for("idle", WAIT);
    p.line("say hi");
    p.wait_for("› say hi", WAIT);
    p.wait_for("Hello from the script.", WAIT);
    let s = p.wait_for("│ fn main() {}", WAIT);
    assert!(s.contains("┌ rust"), "{s}");
    p.wait_for("idle", WAIT);
    p.send("\x04");
    let st = p.wait_exit(WAIT).expect("chat exits on Ctrl-D");
    assert!(st.success(), "{st:?}");
}

/// A script whose rules answer by a word of the prompt: `write1` / `write2` write a
/// file (then say so), `slow` streams for a long time, anything else says hello.
fn rules(d: &Daemon) -> String {
    script(
        d,
        "rules.json",
        json!({"rules": [
            {"match": "write1", "steps": [
                {"text": "Writing one.", "tool_calls": [{"name": "write_file", "args": {"path": "one.txt", "content": "1\n"}}]},
                {"text": "Finished one."}
            ]},
            {"match": "write2", "steps": [
                {"text": "Writing two.", "tool_calls": [{"name": "write_file", "args": {"path": "two.txt", "content": "2\n"}}]},
                {"text": "Finished two."}
            ]},
            {"match": "slow", "steps": [
                {"text": "Once upon a time there was a very long story that streamed slowly so it could be cut.", "chunk_chars": 2, "delay_ms": 300}
            ]},
            {"match": "世界", "steps": [{"text": "ответ: 世界 ✓ — ça marche"}]},
            {"steps": [{"text": "Hello there.", "chunk_chars": 3}]}
        ]}),
    )
}

fn quit(mut p: Pty) {
    p.send("\x04");
    let st = p.wait_exit(WAIT).expect("chat exits on Ctrl-D");
    assert!(st.success(), "{st:?}");
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[test]
fn ask_mode_approves_and_denies_inline() {
    let d = Daemon::start();
    let model = rules(&d);
    let mut p = chat(
        &d,
        &["--new", "--model", &model, "--permission-mode", "ask"],
        30,
        100,
    );
    p.wait_for("idle", WAIT);
    p.line("please write1");
    p.wait_for("Allow write_file one.txt?", WAIT);
    p.wait_for(
        "[y] allow once   [a] allow for the session   [n] deny",
        WAIT,
    );
    p.send("y");
    p.wait_for("Finished one.", WAIT);
    let s = p.wait_for("[allow (client_allowed)]", WAIT);
    assert!(s.contains("⏺ write_file one.txt"), "{s}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("one.txt")).unwrap(),
        "1\n"
    );
    p.wait_for("idle", WAIT);
    p.line("now write2");
    p.wait_for("Allow write_file two.txt?", WAIT);
    p.send("n");
    p.wait_for("deny, reason", WAIT);
    p.line("not that file");
    p.wait_for("Finished two.", WAIT);
    // The daemon records the user's words; the transcript shows them from the Log.
    let s = p.wait_for("[deny (client_denied): not that file]", WAIT);
    assert!(s.contains("✗ permission_denied"), "{s}");
    assert!(!d.workspace().join("two.txt").exists());
    p.wait_for("idle", WAIT);

    // `a`: the daemon allows write_file for the rest of the session, asking no client.
    p.line("again write1");
    p.wait_for("Allow write_file one.txt?", WAIT);
    p.send("a");
    p.wait_for("[allow (client_allowed_always)]", WAIT);
    p.wait_for("idle", WAIT);
    quit(p);
    let mut p = chat(&d, &[&sid_of_only(&d), "--permission-mode", "ask"], 30, 100);
    p.wait_for("idle", WAIT);
    p.line("then write2");
    p.wait_for("[allow (always_allowed)]", WAIT);
    p.wait_for("idle", WAIT);
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("two.txt")).unwrap(),
        "2\n"
    );
    quit(p);

    let events = d.connect().call_ok(
        "agentd/events",
        json!({"session_id": sid_of_only(&d), "types": ["permission_decision", "tool_result"]}),
    )["events"]
        .as_array()
        .unwrap()
        .clone();
    let decisions: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["type"] == "permission_decision")
        .map(|e| {
            (
                e["data"]["reason"].as_str().unwrap().to_string(),
                e["data"]["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want = |r: &str, m: &str| (r.to_string(), m.to_string());
    assert_eq!(
        decisions,
        [
            want("client_allowed", ""),
            want("client_denied", "not that file"),
            want("client_allowed_always", ""),
            want("always_allowed", "")
        ]
    );
    // The model reads the user's words in the denied call's result.
    let denied = events
        .iter()
        .find(|e| e["type"] == "tool_result" && e["data"]["ok"] == false)
        .expect("the denied call's result");
    assert!(
        denied["data"]["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("the user said: not that file"),
        "{denied}"
    );
}

/// In `ask` mode a subagent's call is asked about in the chat of its parent, naming the
/// subagent, and the answer decides: allowed, the child writes its file.
#[test]
fn a_subagents_permission_request_is_asked_in_the_parents_chat() {
    let d = Daemon::start();
    let model = script(
        &d,
        "delegate.json",
        json!({"rules": [
            {"match": "Write the notes", "steps": [
                {"tool_calls": [{"name": "write_file", "args": {"path": "notes.txt", "content": "from the child\n"}}]},
                {"text": "notes written"}
            ]},
            {"steps": [
                {"tool_calls": [{"name": "task", "args": {"prompt": "Write the notes", "title": "notes writer"}}]},
                {"text": "The helper is done."}
            ]}
        ]}),
    );
    let mut p = chat(
        &d,
        &["--new", "--model", &model, "--permission-mode", "ask"],
        30,
        120,
    );
    p.wait_for("idle", WAIT);
    p.line("delegate the notes");
    let s = p.wait_for("Allow write_file notes.txt? (subagent ", WAIT);
    let l = d.connect().call_ok("agentd/list", json!({}));
    let child = l["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["relation"] == "subagent")
        .and_then(|s| s["session_id"].as_str())
        .unwrap_or_else(|| panic!("no subagent: {l}"))
        .to_string();
    assert!(
        s.contains(&format!("Allow write_file notes.txt? (subagent {child})")),
        "{s}"
    );
    p.send("y");
    p.wait_for("The helper is done.", WAIT);
    p.wait_for("idle", WAIT);
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("notes.txt")).unwrap(),
        "from the child\n"
    );
    quit(p);
    let evs = d.connect().call_ok(
        "agentd/events",
        json!({"session_id": child, "types": ["permission_decision"]}),
    )["events"]
        .clone();
    assert_eq!(evs[0]["data"]["reason"], "client_allowed", "{evs}");
}

/// The id of the daemon's only session.
fn sid_of_only(d: &Daemon) -> String {
    let l = d.connect().call_ok("agentd/list", json!({}));
    let s = l["sessions"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{l}");
    s[0]["session_id"].as_str().unwrap().to_string()
}

#[test]
fn compact_fork_and_tree_from_slash_commands() {
    let d = Daemon::start();
    let model = rules(&d);
    let mut p = chat(&d, &["--new", "--model", &model], 40, 120);
    p.wait_for("idle", WAIT);
    p.line("hello one");
    p.wait_for("Hello there.", WAIT);
    p.wait_for("idle", WAIT);
    p.line("hello two");
    p.wait_until("the second answer", WAIT, |s| count(s, "Hello there.") == 2);
    p.wait_for("idle", WAIT);
    // Tab completes a command name.
    p.send("/comp\t");
    p.wait_for("> /compact", WAIT);
    p.line("--tail 2");
    p.wait_for("compacted seq 0..", WAIT);
    p.wait_for("— compacted: deterministic", WAIT);
    let mut c = d.connect();
    let listed = c.call_ok("agentd/list", json!({}));
    let parent = listed["sessions"][0]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    p.line("/fork");
    let s = p.wait_for("forked from", WAIT);
    assert!(s.contains(&format!("forked from {parent}: now in ")), "{s}");
    let listed = c.call_ok("agentd/list", json!({}));
    let child = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .find(|s| *s != parent)
        .expect("the child session");
    p.wait_for(&format!("now in {child}"), WAIT);
    p.wait_for("idle", WAIT);
    p.line("/tree");
    let s = p.wait_for("◀ this session", WAIT);
    let marked: Vec<&str> = s.lines().filter(|l| l.contains("◀ this session")).collect();
    assert_eq!(marked.len(), 1, "{s}");
    assert!(marked[0].contains(&child), "{s}");
    assert!(
        s.lines().any(|l| l.contains(&parent) && !l.contains('◀')),
        "{s}"
    );
    // The child goes on from the parent's history.
    p.line("hello three");
    p.wait_until("the child's answer", WAIT, |s| s.contains("› hello three"));
    p.wait_for("idle", WAIT);
    let ev = c.call_ok(
        "agentd/events",
        json!({"session_id": child, "types": ["user_message"]}),
    );
    let texts: Vec<&str> = ev["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.last(), Some(&"hello three"), "{ev}");
    quit(p);
}

#[test]
fn an_attached_chat_shows_another_clients_turn_live() {
    let d = Daemon::start();
    let model = rules(&d);
    let sid = d.create_session();
    d.agentctl(["turn", &sid, "earlier prompt", "--model", &model])
        .assert_code(0);
    let p = chat(&d, &[&sid], 30, 100);
    p.wait_for("› earlier prompt", WAIT);
    p.wait_for("idle", WAIT);
    let mut other = d.agentctl_cmd();
    other.args([
        "turn",
        &sid,
        "please write1 from elsewhere",
        "--model",
        &model,
    ]);
    let out = other.output().expect("agentctl turn");
    assert!(out.status.success(), "{out:?}");
    p.wait_for("› please write1 from elsewhere", WAIT);
    let s = p.wait_for("Finished one.", WAIT);
    assert!(s.contains("⏺ write_file one.txt"), "{s}");
    assert_eq!(count(&s, "› earlier prompt"), 1, "{s}");
    quit(p);
}

#[test]
fn esc_interrupts_a_slow_turn_and_the_chat_goes_on() {
    let d = Daemon::start();
    let model = rules(&d);
    let mut p = chat(&d, &["--new", "--model", &model], 30, 100);
    p.wait_for("idle", WAIT);
    p.line("tell a slow story");
    p.wait_for("Once", WAIT);
    p.wait_for("running", WAIT);
    p.send("\x1b");
    p.wait_for("turn interrupted", WAIT);
    p.wait_for("idle", WAIT);
    p.line("hello again");
    p.wait_for("Hello there.", WAIT);
    let s = p.wait_for("idle", WAIT);
    assert!(!s.contains("cut."), "the slow story ran to its end: {s}");
    quit(p);
}

#[test]
fn a_daemon_restart_is_caught_up_exactly() {
    let mut d = Daemon::start();
    let model = rules(&d);
    let sid = d.create_session();
    d.agentctl(["turn", &sid, "before the crash", "--model", &model])
        .assert_code(0);
    let mut p = chat(&d, &[&sid], 30, 100);
    p.wait_for("› before the crash", WAIT);
    p.wait_for("idle", WAIT);
    d.kill9();
    p.wait_for("disconnected", WAIT);
    // While the chat is cut off, a second daemon on another socket (same home) records
    // a whole exchange; then the daemon comes back on the chat's socket.
    let side = d.root().join("side.sock");
    let mut second = d.agentd_cmd();
    second.env("AGENTD_SOCKET", &side);
    let mut child = second.spawn().expect("second daemon");
    let mut c = loop {
        if let Ok(c) = agentd_tests::RpcConn::connect(&side) {
            break c;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the second daemon exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    c.call_ok(
        "agentd/append",
        json!({"session_id": sid, "events": [
            {"type": "user_message", "data": {"text": "during the outage"}},
            {"type": "assistant_message", "data": {"text": "answered while you were away"}}
        ]}),
    );
    c.call_ok("agentd/shutdown", json!({}));
    let _ = child.wait();
    d.spawn();
    d.wait_ready(WAIT).expect("daemon back");
    let s = p.wait_for("answered while you were away", WAIT);
    p.wait_for("idle", WAIT);
    assert_eq!(count(&s, "› before the crash"), 1, "{s}");
    assert_eq!(count(&s, "› during the outage"), 1, "{s}");
    assert_eq!(count(&s, "answered while you were away"), 1, "{s}");
    // And it follows live again.
    p.line("hello after");
    let s = p.wait_for("Hello there.", WAIT);
    assert_eq!(count(&s, "answered while you were away"), 1, "{s}");
    quit(p);
}

#[test]
fn resize_to_tiny_and_back_and_non_ascii_round_trips() {
    let d = Daemon::start();
    let model = rules(&d);
    let mut p = chat(&d, &["--new", "--model", &model], 24, 80);
    p.wait_for("idle", WAIT);
    let prompt = "héllo 世界 🎉 naïve";
    p.line(prompt);
    p.wait_for("ответ: 世界 ✓ — ça marche", WAIT);
    p.wait_for("idle", WAIT);
    let mut c = d.connect();
    let sid = c.call_ok("agentd/list", json!({}))["sessions"][0]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let ev = c.call_ok(
        "agentd/events",
        json!({"session_id": sid, "types": ["user_message"]}),
    );
    assert_eq!(ev["events"][0]["data"]["text"], prompt);
    // A large multi-line paste arrives whole and is sent only on Enter.
    let pasted: String = (0..400)
        .map(|i| format!("line {i}: ünïcödé 字 {}\n", "x".repeat(40)))
        .collect();
    p.send(format!("\x1b[200~{pasted}\x1b[201~"));
    p.wait_for("line 399: ünïcödé 字", WAIT);
    p.send("\r");
    p.wait_for("Hello there.", WAIT);
    p.wait_for("idle", WAIT);
    let ev = c.call_ok(
        "agentd/events",
        json!({"session_id": sid, "types": ["user_message"]}),
    );
    assert_eq!(ev["events"][1]["data"]["text"], pasted.as_str());
    p.resize(8, 20);
    p.wait_for("too small: 20x8", WAIT);
    p.resize(24, 80);
    let s = p.wait_for("Hello there.", WAIT);
    assert!(s.contains("idle"), "{s}");
    quit(p);
}

#[test]
fn sigterm_restores_the_terminal() {
    let d = Daemon::start();
    let mut p = chat(&d, &["--new"], 24, 80);
    p.wait_for("idle", WAIT);
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe {
        libc::kill(p.pid() as libc::pid_t, libc::SIGTERM);
    }
    let st = p.wait_exit(WAIT).expect("chat exits on SIGTERM");
    assert_eq!(st.code(), Some(143), "{st:?}");
    p.wait_closed(WAIT);
    assert!(p.cooked(), "raw mode was not undone");
    let raw = String::from_utf8_lossy(&p.raw()).to_string();
    let entered = raw
        .rfind("\x1b[?1049h")
        .expect("the chat entered the alternate screen");
    let after = &raw[entered..];
    assert!(
        after.contains("\x1b[?1049l"),
        "the alternate screen was not left: {after:?}"
    );
    assert!(
        after.contains("\x1b[?2004l"),
        "bracketed paste was not turned off: {after:?}"
    );
    assert!(
        after.contains("\x1b[?25h"),
        "the cursor was not shown again: {after:?}"
    );
}

#[test]
fn a_panic_restores_the_terminal() {
    let d = Daemon::start();
    let mut cmd = d.agentctl_cmd();
    // A debug build's fault hook (docs/chat.md#faults): a panic on the first key.
    cmd.arg("chat")
        .arg("--new")
        .env("AGENTCTL_CHAT_FAULT", "panic");
    let mut p = Pty::spawn(cmd, 24, 80);
    p.wait_for("idle", WAIT);
    assert!(!p.cooked(), "the chat runs in raw mode");
    p.send("x");
    let st = p.wait_exit(WAIT).expect("chat exits on a panic");
    assert_eq!(st.code(), Some(101), "{st:?}");
    p.wait_closed(WAIT);
    assert!(p.cooked(), "raw mode was not undone");
    let raw = String::from_utf8_lossy(&p.raw()).to_string();
    let entered = raw
        .rfind("\x1b[?1049h")
        .expect("the chat entered the alternate screen");
    let after = &raw[entered..];
    let left = after
        .find("\x1b[?1049l")
        .unwrap_or_else(|| panic!("the alternate screen was not left: {after:?}"));
    assert!(
        after.contains("\x1b[?2004l"),
        "bracketed paste stayed on: {after:?}"
    );
    assert!(
        after.contains("\x1b[?25h"),
        "the cursor stayed hidden: {after:?}"
    );
    // The message is printed on the normal screen, after it was restored.
    let printed = &after[left..];
    assert!(printed.contains("AGENTCTL_CHAT_FAULT=panic"), "{printed:?}");
    assert!(
        printed.contains("the session is safe in the daemon"),
        "{printed:?}"
    );
}

#[test]
fn a_prompt_typed_during_a_turn_steers_or_is_kept_with_a_message() {
    let d = Daemon::start();
    let model = rules(&d);
    let mut p = chat(&d, &["--new", "--model", &model], 30, 120);
    p.wait_for("idle", WAIT);
    p.line("tell a slow story");
    p.wait_for("Once", WAIT);
    p.wait_for("Enter steers · Alt+Enter queues · Esc interrupts", WAIT);
    p.line("steer me");
    let s = p.wait_until("the steer's outcome", WAIT, |s| {
        s.contains("› steer me") || s.contains("cannot steer a running turn")
    });
    if s.contains("cannot steer a running turn") {
        // Refused with a message; the prompt waits in the input box.
        assert!(s.contains("> steer me"), "{s}");
        p.send("\x15");
    }
    // Alt+Enter queues, or says the daemon does not, keeping the prompt.
    p.send("queued one\x1b\r");
    let s = p.wait_until("the queue's outcome", WAIT, |s| {
        s.contains("queued: queued one")
            || s.contains("› queued one")
            || s.contains("does not queue prompts")
    });
    if s.contains("does not queue prompts") {
        assert!(s.contains("> queued one"), "{s}");
    }
    p.send("\x1b");
    p.wait_until("the turn over", WAIT, |s| s.contains(" idle "));
    quit(p);
}

#[test]
fn the_picker_lists_this_directorys_sessions_and_opens_one() {
    let d = Daemon::start();
    let model = rules(&d);
    let sid = d.create_session();
    d.agentctl(["rename", &sid, "Parser fix"]).assert_code(0);
    d.agentctl(["turn", &sid, "look at the parser", "--model", &model])
        .assert_code(0);
    let mut p = chat(&d, &[], 30, 100);
    p.wait_for("Sessions in ", WAIT);
    p.wait_for("+ new session", WAIT);
    let s = p.wait_for("› look at the parser", WAIT);
    assert!(s.contains("Parser fix"), "{s}");
    p.send("\x1b[B\r");
    p.wait_for("Hello there.", WAIT);
    let s = p.wait_for("idle", WAIT);
    assert!(s.contains("│ Parser fix │"), "{s}");
    p.line("/sessions");
    p.wait_for("+ new session", WAIT);
    p.send("\r");
    p.wait_until("a new session attached", WAIT, |s| {
        s.contains(" idle ") && !s.contains("Parser fix")
    });
    let mut c = d.connect();
    let n = c.call_ok("agentd/list", json!({}))["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(n, 2);
    quit(p);
}

#[test]
fn diff_revert_rename_export_usage_mcp_model_and_mode_commands() {
    let d = Daemon::start();
    let model = rules(&d);
    let mut p = chat(&d, &["--new", "--model", &model], 40, 120);
    p.wait_for("idle", WAIT);
    p.line("please write1");
    p.wait_for("Finished one.", WAIT);
    p.wait_for("idle", WAIT);
    assert!(d.workspace().join("one.txt").exists());
    p.line("/diff");
    p.wait_for("+1", WAIT);
    let s = p.wait_for("one.txt", WAIT);
    assert!(s.contains("added"), "{s}");
    p.line("/rename Parser fix");
    p.wait_for("renamed: Parser fix", WAIT);
    p.wait_for("│ Parser fix │", WAIT);
    p.line("/usage");
    p.wait_for("usage: 2 calls", WAIT);
    p.line("/export out.md");
    p.wait_for("exported ", WAIT);
    let md = std::fs::read_to_string(d.workspace().join("out.md")).expect("the export");
    assert!(md.contains("please write1"), "{md}");
    p.line("/mcp");
    p.wait_for("MCP servers: none configured", WAIT);
    p.line("/mode ask");
    p.wait_for("│ mode ask │", WAIT);
    p.line("/mode yolo");
    p.wait_for("usage: /mode auto|ask|read_only", WAIT);
    p.line("/model");
    p.wait_for("model of the next turns: script:", WAIT);
    p.line("/help");
    p.wait_for("Alt+Enter", WAIT);
    p.wait_for("/revert", WAIT);
    p.line("/nope");
    p.wait_for("unknown command /nope", WAIT);
    p.line("/revert");
    p.wait_for("restored 1 file(s)", WAIT);
    assert!(!d.workspace().join("one.txt").exists());
    quit(p);
}

/// `/image PATH` attaches an image to the next prompt: refused for a file that is not
/// an image (nothing attached), shown pending in the composer, then sent with the
/// prompt. The provider gets it beside the text (Chat Completions' `image_url`, the
/// file's bytes), the transcript shows the prompt carried it, and the next prompt goes
/// without it.
#[test]
fn image_attaches_a_picture_to_the_next_prompt() {
    use agentd_tests::sse::{chat_text, MockProvider, Reply};
    use base64::Engine;
    const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let mock = MockProvider::start(|n, _| {
        Reply::Complete(chat_text(if n == 0 {
            "A single pixel."
        } else {
            "Plain again."
        }))
    });
    let d = Daemon::builder().config(&mock.config()).start();
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap();
    std::fs::write(d.workspace().join("shot.png"), &png).unwrap();
    std::fs::write(d.workspace().join("fake.png"), "just text\n").unwrap();
    let mut p = chat(&d, &["--new"], 30, 110);
    p.wait_for("idle", WAIT);
    p.line("/image fake.png");
    p.wait_for("/image fake.png: not a PNG, JPEG, GIF or WebP image", WAIT);
    p.line("/image missing.png");
    p.wait_for("/image missing.png: No such file", WAIT);
    p.line("/image shot.png");
    p.wait_for("(image/png, 70 bytes) attached to the next prompt", WAIT);
    let s = p.wait_for("[1 image(s): shot.png]", WAIT);
    assert!(!s.contains("fake.png]"), "{s}");
    p.line("what is in the picture?");
    p.wait_for("A single pixel.", WAIT);
    p.wait_for("[image: image/png, 70 bytes]", WAIT);
    let s = p.wait_until("the composer without the image", WAIT, |s| {
        s.contains("idle") && !s.contains("image(s): shot.png")
    });
    assert!(s.contains("› what is in the picture?"), "{s}");
    p.line("and now?");
    p.wait_for("Plain again.", WAIT);
    let bodies = mock.wait_requests(2, WAIT);
    let images = |b: &Value| -> Vec<String> {
        let user = b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rfind(|m| m["role"] == "user")
            .unwrap()
            .clone();
        user["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["type"] == "image_url")
            .map(|p| p["image_url"]["url"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        images(&bodies[0]),
        [format!("data:image/png;base64,{PNG_B64}")]
    );
    assert!(images(&bodies[1]).is_empty(), "{}", bodies[1]);
    quit(p);
}

/// While a turn runs, Enter steers a prompt in with its attached image (the turn's next
/// request carries it) and Alt+Enter queues one with its image (the queued turn's request
/// carries it).
#[test]
fn an_image_prompt_typed_during_a_turn_is_steered_or_queued_with_its_image() {
    use agentd_tests::sse::{chat_text, MockProvider, Reply};
    const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let mock = MockProvider::start(move |n, _| match n {
        0 => {
            let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
            Reply::Complete(chat_text("First done."))
        }
        1 => Reply::Complete(chat_text("Steered picture seen.")),
        _ => Reply::Complete(chat_text("Queued picture seen.")),
    });
    let d = Daemon::builder().config(&mock.config()).start();
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG_B64)
        .unwrap();
    std::fs::write(d.workspace().join("shot.png"), &png).unwrap();
    let mut p = chat(&d, &["--new"], 30, 120);
    p.wait_for("idle", WAIT);
    p.line("first");
    mock.wait_requests(1, WAIT);
    p.wait_for("Enter steers", WAIT);
    p.line("/image shot.png");
    p.wait_for("[1 image(s): shot.png]", WAIT);
    p.line("look at this");
    p.line("/image shot.png");
    p.wait_for("[1 image(s): shot.png]", WAIT);
    p.send("and this one later");
    p.send("\x1b\r");
    p.wait_for("queued: and this one later", WAIT);
    go_tx.send(()).unwrap();
    p.wait_for("Steered picture seen.", WAIT);
    p.wait_for("Queued picture seen.", WAIT);
    let bodies = mock.wait_requests(3, WAIT);
    for (body, text) in [
        (&bodies[1], "look at this"),
        (&bodies[2], "and this one later"),
    ] {
        let last_user = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rfind(|m| m["role"] == "user")
            .unwrap()
            .clone();
        assert_eq!(last_user["content"][0]["text"], text, "{last_user}");
        assert_eq!(
            last_user["content"][1]["image_url"]["url"],
            format!("data:image/png;base64,{PNG_B64}"),
            "{last_user}"
        );
    }
    quit(p);
}
