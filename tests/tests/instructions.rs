//! Black-box tests of the instruction files a turn sends (docs/turns-and-providers.md,
//! "Instructions"): the real daemon against a local Responses server that records each
//! request body.

use agentd_tests::sse::{sse_server, typed_sse};
use agentd_tests::{is_type, Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::Path;

fn reply(text: &str) -> String {
    let item = json!({"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": text}]});
    typed_sse(&[
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": "r1", "model": "m1",
            "status": "completed", "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}}),
    ])
}

fn daemon(base: &str, home: Option<&Path>) -> Daemon {
    let config = format!(
        "default_provider = \"local\"\n[providers.local]\nkind = \"openai-responses\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 100000\n"
    );
    let mut b = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config);
    if let Some(h) = home {
        b = b.env("HOME", h);
    }
    b.start()
}

fn create(c: &mut RpcConn, ws: &Path) -> String {
    c.call_ok("agentd/create", json!({"workspace": ws}))["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn turn(c: &mut RpcConn, sid: &str, input: &str) -> Value {
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": input}));
    assert_eq!(r["status"], "completed", "{r}");
    r
}

fn events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

/// The developer item's text of a Responses request body.
fn developer(body: &Value) -> String {
    let first = &body["input"][0];
    assert_eq!(first["role"], "developer", "{body}");
    first["content"].as_str().unwrap().to_string()
}

fn position(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in:\n{hay}"))
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The global file, the project's files from the repository root down (a `CLAUDE.md`
/// where a directory has no `AGENTS.md`) reach the provider in that order; an
/// unchanged set is not recorded again; a changed file reaches the next turn alone,
/// and the earlier context replays from the Log with the text as it was.
#[test]
fn global_and_project_instructions_reach_the_provider_and_changes_are_recorded() {
    let (base, server) = sse_server(vec![reply("one"), reply("two"), reply("three")]);
    let d = daemon(&base, None);
    let repo = d.workspace();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let ws = repo.join("crates/core");
    write(
        &d.root().join("xdg-config/agentd/AGENTS.md"),
        "GLOBAL: answer in English.",
    );
    write(&repo.join("AGENTS.md"), "ROOT: run cargo test.");
    write(
        &repo.join("crates/CLAUDE.md"),
        "CLAUDE-CRATES: keep crates small.",
    );
    write(&repo.join("crates/core/AGENTS.md"), "CORE-V1: no unsafe.");
    write(
        &repo.join("crates/core/CLAUDE.md"),
        "CORE-CLAUDE: never sent.",
    );
    write(&d.root().join("AGENTS.md"), "ABOVE-REPO: never sent.");
    let mut c = d.connect();
    let sid = create(&mut c, &ws);
    turn(&mut c, &sid, "first");
    let shown = d.agentctl(["instructions", &sid]);
    shown.assert_code(0);
    assert!(shown.stdout.contains("recorded at seq"), "{shown:?}");
    assert!(shown.stdout.contains(": unchanged"), "{shown:?}");
    assert!(shown.stdout.contains("CORE-V1: no unsafe."), "{shown:?}");
    assert!(shown.stdout.contains("base prompt v1"), "{shown:?}");
    turn(&mut c, &sid, "second");
    let after_second = events(&mut c, &sid).last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    write(
        &repo.join("crates/core/AGENTS.md"),
        "CORE-V2: unsafe needs a SAFETY comment.",
    );
    let shown = d.agentctl(["instructions", &sid]);
    assert!(shown.stdout.contains("changed since"), "{shown:?}");
    turn(&mut c, &sid, "third");
    let bodies = server.join().unwrap();
    assert_eq!(bodies.len(), 3);

    let first = developer(&bodies[0]);
    let order = [
        "You are a coding agent",
        "workspace root is",
        "GLOBAL: answer in English.",
        "ROOT: run cargo test.",
        "CLAUDE-CRATES: keep crates small.",
        "CORE-V1: no unsafe.",
    ];
    let at: Vec<usize> = order.iter().map(|n| position(&first, n)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{first}");
    assert!(!first.contains("never sent"), "{first}");
    assert_eq!(developer(&bodies[1]), first);
    let third = developer(&bodies[2]);
    assert!(
        third.contains("CORE-V2: unsafe needs a SAFETY comment."),
        "{third}"
    );
    assert!(!third.contains("CORE-V1"), "{third}");
    // Only the newest record is sent: no older instructions anywhere in the input.
    assert!(!bodies[2]["input"].to_string().contains("CORE-V1"));

    let evs = events(&mut c, &sid);
    let recs: Vec<&Value> = evs.iter().filter(|e| is_type(e, "instructions")).collect();
    assert_eq!(
        recs.len(),
        2,
        "recorded on the first turn and after the change only"
    );
    let paths: Vec<&str> = recs[0]["data"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let canon = |p: &Path| p.canonicalize().unwrap().display().to_string();
    assert_eq!(
        paths,
        [
            d.root()
                .join("xdg-config/agentd/AGENTS.md")
                .display()
                .to_string(),
            canon(repo).to_string() + "/AGENTS.md",
            canon(repo).to_string() + "/crates/CLAUDE.md",
            canon(repo).to_string() + "/crates/core/AGENTS.md",
        ]
    );
    let started: Vec<&Value> = evs.iter().filter(|e| is_type(e, "turn_started")).collect();
    assert_eq!(started[0]["data"]["base_prompt"]["version"], 1);
    assert_eq!(
        started[0]["data"]["base_prompt"]["sha256"]
            .as_str()
            .unwrap()
            .len(),
        64
    );

    // The context as of the second turn shows the instructions as they were then.
    let old = c.call_ok(
        "agentd/context",
        json!({"session_id": sid, "after_seq": after_second}),
    );
    let old_dev = old["items"][0]["content"].as_str().unwrap();
    assert!(old_dev.contains("CORE-V1: no unsafe."), "{old}");
    let now = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert_eq!(now["items"][0]["content"].as_str().unwrap(), third);

    // A fork from the second turn carries the older record.
    let fork = c.call_ok(
        "agentd/fork",
        json!({"session_id": sid, "to_seq": after_second}),
    );
    let child = fork["child_session_id"].as_str().unwrap();
    let ctx = c.call_ok("agentd/context", json!({"session_id": child}));
    assert!(ctx["items"][0]["content"]
        .as_str()
        .unwrap()
        .contains("CORE-V1: no unsafe."));
}

/// Hostile instruction files: a 10 MiB AGENTS.md is cut at 32 KiB and says so; an
/// AGENTS.md that is a symlink out of the project, and one resolving into a path the
/// sandbox hides, are never read.
#[test]
fn huge_symlinked_out_and_hidden_instruction_files() {
    let (base, server) = sse_server(vec![reply("ok")]);
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().canonicalize().unwrap().join("userhome");
    let d = daemon(&base, Some(&home));
    std::fs::create_dir_all(home.join(".git")).unwrap();
    let mut huge = "HUGE-START ".to_string();
    huge.push_str(&"x".repeat(10 * 1024 * 1024));
    huge.push_str(" HUGE-END");
    write(&home.join("AGENTS.md"), &huge);
    write(&tmp.path().join("outside.md"), "OUTSIDE-SECRET");
    write(&home.join(".ssh/notes.md"), "SSH-SECRET");
    let ws = home.join("proj/w");
    std::fs::create_dir_all(&ws).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside.md"), home.join("proj/AGENTS.md")).unwrap();
    std::os::unix::fs::symlink(home.join(".ssh/notes.md"), ws.join("AGENTS.md")).unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &ws);
    turn(&mut c, &sid, "go");
    let bodies = server.join().unwrap();
    let dev = developer(&bodies[0]);
    assert!(dev.contains("HUGE-START"), "{}", &dev[..200.min(dev.len())]);
    assert!(!dev.contains("HUGE-END"));
    assert!(dev.contains("only its first 32 KiB are included"));
    assert!(dev.len() < 40 * 1024, "{} bytes sent", dev.len());
    let all = bodies[0].to_string();
    assert!(!all.contains("OUTSIDE-SECRET"));
    assert!(!all.contains("SSH-SECRET"));
    let evs = events(&mut c, &sid);
    let rec = evs.iter().find(|e| is_type(e, "instructions")).unwrap();
    let files = rec["data"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{rec}");
    assert_eq!(files[0]["truncated"], true);
    assert_eq!(files[0]["bytes"], huge.len());
    let skipped = rec["data"]["skipped"].to_string();
    assert!(skipped.contains("outside the project"), "{skipped}");
    assert!(skipped.contains("hidden by the sandbox"), "{skipped}");
    let log = std::fs::metadata(d.log_path(&sid)).unwrap().len();
    assert!(
        log < 200 * 1024,
        "the Log holds the cut text only: {log} bytes"
    );
}
