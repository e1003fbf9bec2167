//! Black-box tests of hooks (docs/hooks.md): the real daemon runs `[[hooks.EVENT]]`
//! commands from its config and a workspace's `.agentd/hooks.toml` around turns of the
//! offline `script` provider. Hooks run under the command sandbox, so what they leave
//! behind is written into the workspace; the escape attempts are in the sandbox suite
//! (`tests/tests/sandbox/hooks.rs`).

use agentd_tests::{events, is_type, Daemon, RpcConn};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn daemon(hooks_toml: &str) -> Daemon {
    Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(hooks_toml)
        .start()
}

fn create(d: &Daemon, c: &mut RpcConn) -> String {
    c.call_ok("agentd/create", json!({"workspace": d.workspace()}))["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A `script:` model whose first step makes `calls`, then answers `done`.
fn script(d: &Daemon, name: &str, calls: Value) -> String {
    let p = d.root().join(format!("{name}.json"));
    let body = json!({"rules": [{"steps": [{"tool_calls": calls}, {"text": "done"}]}]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    format!("script:{}", p.display())
}

fn turn(c: &mut RpcConn, sid: &str, input: &str, model: &str) -> Value {
    c.set_call_timeout(WAIT);
    c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": input, "model": model}),
    )
}

fn of_type(evs: &[Value], kind: &str) -> Vec<Value> {
    evs.iter()
        .filter(|e| is_type(e, kind))
        .map(|e| e["data"].clone())
        .collect()
}

/// The lines a hook appended to `file` in the workspace, as JSON.
fn inputs(d: &Daemon, file: &str) -> Vec<Value> {
    std::fs::read_to_string(d.workspace().join(file))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// What the model is sent next: the replay items as text.
fn context(c: &mut RpcConn, sid: &str) -> String {
    c.call_ok("agentd/context", json!({"session_id": sid}))["items"].to_string()
}

/// A policy in the shape of a Claude Code hook script: it reads the call from stdin,
/// keeps a copy, and refuses `rm` with a reason on stderr (exit 2).
const POLICY: &str = r#"
[[hooks.pre_tool_use]]
matcher = "shell"
command = '''
input=$(cat)
printf '%s\n' "$input" >> pre-input.ndjson
case "$input" in
  *'"command":"rm '*) echo "rm is not allowed in this repository: move files to .trash/ instead" >&2; exit 2;;
esac
exit 0
'''

[[hooks.pre_tool_use]]
matcher = "write_file|apply_patch"
command = '''cat >/dev/null; echo '{"decision":"block","reason":"generated files are read-only"}' '''
"#;

#[test]
fn a_pre_tool_use_hook_blocks_rm_and_its_reason_reaches_the_model() {
    let d = daemon(POLICY);
    std::fs::write(d.workspace().join("keep.txt"), "precious").unwrap();
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(
        &d,
        "rm",
        json!([
            {"name": "shell", "args": {"command": "rm -f keep.txt"}},
            {"name": "write_file", "args": {"path": "gen.txt", "content": "x"}},
            {"name": "shell", "args": {"command": "echo still-allowed"}}
        ]),
    );
    let r = turn(&mut c, &sid, "clean up", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("keep.txt")).unwrap(),
        "precious",
        "the blocked rm ran"
    );
    assert!(
        !d.workspace().join("gen.txt").exists(),
        "the blocked write ran"
    );

    let evs = events(&mut c, &sid);
    let results = of_type(&evs, "tool_result");
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0]["ok"], false);
    assert_eq!(results[0]["error"]["kind"], "hook_blocked");
    assert_eq!(
        results[0]["error"]["message"],
        "rm is not allowed in this repository: move files to .trash/ instead"
    );
    assert_eq!(results[1]["error"]["kind"], "hook_blocked");
    assert_eq!(
        results[1]["error"]["message"],
        "generated files are read-only"
    );
    assert_eq!(results[2]["ok"], true, "{:?}", results[2]);
    assert!(results[2]["output"]
        .as_str()
        .unwrap()
        .contains("still-allowed"));

    // Each run is in the Log with its verdict, right before what it judged.
    let runs = of_type(&evs, "hook_run");
    let verdicts: Vec<(&str, &str, Option<i64>)> = runs
        .iter()
        .map(|r| {
            (
                r["tool_name"].as_str().unwrap(),
                r["verdict"].as_str().unwrap(),
                r["exit_code"].as_i64(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("shell", "block", Some(2)),
            ("write_file", "block", Some(0)),
            ("shell", "allow", Some(0))
        ]
    );
    assert_eq!(runs[0]["event"], "pre_tool_use");
    assert_eq!(runs[0]["source"], "config");
    assert_eq!(
        runs[0]["reason"],
        "rm is not allowed in this repository: move files to .trash/ instead"
    );
    assert!(runs[0]["duration_ms"].is_u64());
    // Run under the session's command sandbox, like `shell`.
    assert_eq!(
        runs[0]["sandbox"]["mode"], "workspace_write",
        "{:?}",
        runs[0]
    );
    assert!(runs[0]["sandbox"]["level"].is_string(), "{:?}", runs[0]);
    let pos = |pred: &dyn Fn(&Value) -> bool| evs.iter().position(pred).unwrap();
    let run0 = pos(&|e| is_type(e, "hook_run"));
    let res0 = pos(&|e| is_type(e, "tool_result"));
    assert_eq!(
        res0,
        run0 + 1,
        "the verdict is recorded with the call it judged"
    );

    // The reason is what the model reads as the call's result.
    let ctx = context(&mut c, &sid);
    assert!(
        ctx.contains("rm is not allowed in this repository"),
        "{ctx}"
    );
    assert!(ctx.contains("generated files are read-only"), "{ctx}");

    // The hook got Claude Code's fields on stdin.
    let seen = inputs(&d, "pre-input.ndjson");
    assert_eq!(seen.len(), 2, "{seen:?}");
    let first = &seen[0];
    assert_eq!(first["session_id"], sid.as_str());
    assert_eq!(first["turn_id"], r["result"]["turn_id"]);
    assert_eq!(first["hook_event_name"], "PreToolUse");
    assert_eq!(first["tool_name"], "shell");
    assert_eq!(first["tool_input"]["command"], "rm -f keep.txt");
    assert_eq!(
        Path::new(first["cwd"].as_str().unwrap()),
        d.workspace().canonicalize().unwrap()
    );
    assert_eq!(seen[1]["tool_input"]["command"], "echo still-allowed");
}

#[test]
fn a_post_tool_use_hook_gets_the_result_and_can_tell_the_model() {
    let d = daemon(
        r#"
[[hooks.post_tool_use]]
matcher = "shell"
command = '''
input=$(cat)
printf '%s\n' "$input" >> post-input.ndjson
case "$input" in
  *lint-error*) echo "lint failed: fix the warning before going on" >&2; exit 2;;
esac
'''
"#,
    );
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(
        &d,
        "post",
        json!([
            {"name": "shell", "args": {"command": "echo hello-from-the-tool"}},
            {"name": "shell", "args": {"command": "echo lint-error; touch ran.txt"}},
            {"name": "read_file", "args": {"path": "ran.txt"}}
        ]),
    );
    let r = turn(&mut c, &sid, "go", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let seen = inputs(&d, "post-input.ndjson");
    assert_eq!(seen.len(), 2, "only shell matches: {seen:?}");
    assert_eq!(seen[0]["hook_event_name"], "PostToolUse");
    assert_eq!(seen[0]["tool_name"], "shell");
    assert_eq!(seen[0]["tool_input"]["command"], "echo hello-from-the-tool");
    assert_eq!(seen[0]["tool_response"]["ok"], true);
    assert!(seen[0]["tool_response"]["output"]
        .as_str()
        .unwrap()
        .contains("hello-from-the-tool"));

    // A post_tool_use block cannot undo the call (it ran); its reason joins the result.
    assert!(d.workspace().join("ran.txt").exists());
    let evs = events(&mut c, &sid);
    let results = of_type(&evs, "tool_result");
    let second = &results[1];
    assert_eq!(
        second["hook_feedback"],
        "lint failed: fix the warning before going on"
    );
    assert!(second["output"]
        .as_str()
        .unwrap()
        .ends_with("[post_tool_use hook] lint failed: fix the warning before going on"));
    let ctx = context(&mut c, &sid);
    assert!(ctx.contains("lint failed: fix the warning"), "{ctx}");
    let runs = of_type(&evs, "hook_run");
    let v: Vec<&str> = runs
        .iter()
        .map(|r| r["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(v, ["allow", "block"]);
}

/// Pids whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
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

#[test]
fn a_hook_that_overruns_its_timeout_is_killed_with_its_children_and_blocks_nothing() {
    let marker = format!("hookgc{}", rand::random::<u32>());
    let d = daemon(&format!(
        r#"
[[hooks.pre_tool_use]]
command = '''(exec -a {marker}-grandchild sleep 300) & exec -a {marker}-hook sleep 300'''
timeout_s = 1
"#
    ));
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(
        &d,
        "slow",
        json!([{"name": "shell", "args": {"command": "echo the-call-ran"}}]),
    );
    let began = Instant::now();
    let r = turn(&mut c, &sid, "go", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert!(began.elapsed() >= Duration::from_secs(1));
    let evs = events(&mut c, &sid);
    let runs = of_type(&evs, "hook_run");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["verdict"], "error");
    assert_eq!(runs[0]["error"]["kind"], "timeout");
    assert!(runs[0]["duration_ms"].as_u64().unwrap() >= 1000);
    // A failed hook is reported, and the call goes ahead.
    let results = of_type(&evs, "tool_result");
    assert_eq!(results[0]["ok"], true, "{results:?}");
    assert!(results[0]["output"]
        .as_str()
        .unwrap()
        .contains("the-call-ran"));
    // The whole process group is gone: the hook and the child it started.
    let end = Instant::now() + Duration::from_secs(10);
    while !pids_with(&marker).is_empty() {
        assert!(
            Instant::now() < end,
            "hook processes outlived the timeout: {:?}",
            pids_with(&marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const PROJECT_HOOKS: &str = r#"# the team's policy
[[hooks.pre_tool_use]]
matcher = "shell"
command = "touch project-hook-ran; echo 'blocked by the project policy' >&2; exit 2"
"#;

#[test]
fn project_hooks_run_only_once_trusted_and_an_edit_needs_trust_again() {
    let d = daemon("");
    std::fs::create_dir_all(d.workspace().join(".agentd")).unwrap();
    let file = d.workspace().join(".agentd/hooks.toml");
    std::fs::write(&file, PROJECT_HOOKS).unwrap();
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(
        &d,
        "calls",
        json!([{"name": "shell", "args": {"command": "echo call-ran"}}]),
    );

    // Untrusted: listed as skipped, never run, and the skip is recorded.
    let listed = d.agentctl_ok(&["hooks"]);
    assert_eq!(
        listed["hooks"][0]["command"],
        "touch project-hook-ran; echo 'blocked by the project policy' >&2; exit 2"
    );
    assert_eq!(listed["hooks"][0]["runs"], false);
    assert_eq!(listed["project"]["trusted"], false);
    let human = d.agentctl(["hooks"]);
    assert!(human.stdout.contains("NOT trusted"), "{human:?}");
    let r = turn(&mut c, &sid, "one", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert!(!d.workspace().join("project-hook-ran").exists());
    let evs = events(&mut c, &sid);
    let runs = of_type(&evs, "hook_run");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["verdict"], "skipped");
    assert_eq!(runs[0]["source"], "project");
    assert!(runs[0]["reason"]
        .as_str()
        .unwrap()
        .contains("agentctl hooks trust"));
    assert_eq!(of_type(&evs, "tool_result")[0]["ok"], true);

    // Trusted: it runs and blocks.
    let trusted = d.agentctl_ok(&["hooks", "trust"]);
    assert_eq!(trusted["project"]["trusted"], true);
    let r = turn(&mut c, &sid, "two", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert!(d.workspace().join("project-hook-ran").exists());
    let evs = events(&mut c, &sid);
    let last = of_type(&evs, "tool_result").pop().unwrap();
    assert_eq!(last["error"]["message"], "blocked by the project policy");

    // Edited (even a comment): untrusted again until trusted again.
    std::fs::remove_file(d.workspace().join("project-hook-ran")).unwrap();
    std::fs::write(&file, format!("{PROJECT_HOOKS}# edited\n")).unwrap();
    assert_eq!(d.agentctl_ok(&["hooks"])["project"]["trusted"], false);
    let r = turn(&mut c, &sid, "three", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    assert!(!d.workspace().join("project-hook-ran").exists());
    let evs = events(&mut c, &sid);
    assert_eq!(
        of_type(&evs, "hook_run").pop().unwrap()["verdict"],
        "skipped"
    );
    assert_eq!(of_type(&evs, "tool_result").pop().unwrap()["ok"], true);

    // Trusting what the user saw: a file changed since it was listed is refused.
    let shown = c.call_ok("agentd/hooks", json!({"workspace": d.workspace()}));
    std::fs::write(&file, format!("{PROJECT_HOOKS}# changed again\n")).unwrap();
    let refused = c.call(
        "agentd/hooks_trust",
        json!({"workspace": d.workspace(), "sha256": shown["project"]["sha256"]}),
    );
    assert_eq!(refused["error"]["data"]["kind"], "conflict", "{refused}");
}

#[test]
fn a_user_prompt_submit_hook_refuses_a_prompt_and_records_why() {
    let d = daemon(
        r#"
[[hooks.user_prompt_submit]]
command = '''
input=$(cat)
printf '%s\n' "$input" >> prompt-input.ndjson
case "$input" in
  *secret-project*) echo "prompts about secret-project are not allowed" >&2; exit 2;;
esac
echo "Reminder: the release branch is frozen."
'''
"#,
    );
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(&d, "none", json!([]));
    let r = turn(&mut c, &sid, "tell me about secret-project", &model);
    assert_eq!(r["result"]["status"], "failed", "{r}");
    assert_eq!(r["result"]["error"]["kind"], "hook_blocked", "{r}");
    assert_eq!(
        r["result"]["error"]["message"],
        "prompts about secret-project are not allowed"
    );
    // Without waiting, the refusal is the request's error.
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": "more on secret-project", "model": model, "wait": false}),
    );
    assert_eq!(r["error"]["data"]["kind"], "hook_blocked", "{r}");
    let evs = events(&mut c, &sid);
    assert!(
        of_type(&evs, "turn_started").is_empty(),
        "a refused prompt started a turn"
    );
    assert!(
        of_type(&evs, "user_message").is_empty(),
        "a refused prompt was recorded"
    );
    let runs = of_type(&evs, "hook_run");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["event"], "user_prompt_submit");
    assert_eq!(runs[0]["verdict"], "block");

    // An allowed prompt goes ahead, with the hook's stdout as context before it.
    let r = turn(&mut c, &sid, "what changed?", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let seen = inputs(&d, "prompt-input.ndjson");
    assert_eq!(seen[2]["hook_event_name"], "UserPromptSubmit");
    assert_eq!(seen[2]["prompt"], "what changed?");
    let ctx = context(&mut c, &sid);
    let note = ctx
        .find("Reminder: the release branch is frozen.")
        .expect(&ctx);
    assert!(note < ctx.find("what changed?").unwrap(), "{ctx}");
    assert!(!ctx.contains("secret-project"), "{ctx}");
}

#[test]
fn a_session_start_hook_adds_context_once() {
    let d = daemon(
        r#"
[[hooks.session_start]]
command = '''cat >> start-input.ndjson; echo "Project notes: tests run with make check."'''

[[hooks.stop]]
command = '''cat >> stop-input.ndjson'''
"#,
    );
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(&d, "none", json!([]));
    for input in ["first prompt", "second prompt"] {
        let r = turn(&mut c, &sid, input, &model);
        assert_eq!(r["result"]["status"], "completed", "{r}");
    }
    let seen = inputs(&d, "start-input.ndjson");
    assert_eq!(seen.len(), 1, "session_start runs once: {seen:?}");
    assert_eq!(seen[0]["hook_event_name"], "SessionStart");
    assert_eq!(seen[0]["source"], "startup");
    let ctx = context(&mut c, &sid);
    let note = ctx
        .find("Project notes: tests run with make check.")
        .expect(&ctx);
    assert!(note < ctx.find("first prompt").unwrap(), "{ctx}");
    // `stop` ran at the end of each turn, recorded with its turn_ended.
    let stops = inputs(&d, "stop-input.ndjson");
    assert_eq!(stops.len(), 2);
    assert_eq!(stops[0]["hook_event_name"], "Stop");
    let evs = events(&mut c, &sid);
    let ended = evs.iter().position(|e| is_type(e, "turn_ended")).unwrap();
    assert!(is_type(&evs[ended - 1], "hook_run"));
    assert_eq!(evs[ended - 1]["data"]["event"], "stop");
}

#[test]
fn bad_hook_config_is_refused_with_the_table_named() {
    let d = Daemon::builder()
        .config("[[hooks.pre_tool_use]]\nmatcher = \"(\"\ncommand = \"true\"\n")
        .build();
    let out = d
        .agentd_cmd()
        .args(["config", "check"])
        .output()
        .expect("agentd config check");
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("[[hooks.pre_tool_use]]"), "{err}");
    assert!(err.contains("matcher"), "{err}");
    let d = Daemon::builder()
        .config("[[hooks.pre_tool_uses]]\ncommand = \"true\"\n")
        .build();
    let out = d.agentd_cmd().args(["config", "check"]).output().unwrap();
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("pre_tool_use"),
        "the nearest key is named: {err}"
    );
}

/// `pre_compact` fires for a compaction the user asks for (`agentctl compact`) with
/// trigger `manual`, recorded before the compaction, and for a turn's own compaction
/// (overflow recovery) with trigger `auto`; a matcher picks one of the two. A dry run,
/// which records nothing, runs no hook.
#[test]
fn pre_compact_fires_for_manual_and_automatic_compaction() {
    let d = daemon(
        r#"
[[hooks.pre_compact]]
command = '''cat >> compact-input.ndjson'''

[[hooks.pre_compact]]
matcher = "manual"
command = '''cat >/dev/null; echo manual >> manual-only.txt'''
"#,
    );
    let mut c = d.connect();
    let sid = create(&d, &mut c);
    let model = script(&d, "list", json!([{"name": "list_dir", "args": {}}]));
    let r = turn(&mut c, &sid, "look around", &model);
    assert_eq!(r["result"]["status"], "completed", "{r}");

    let plan = d.agentctl_ok(&["compact", &sid, "--tail-events", "2", "--dry-run"]);
    assert_eq!(plan["compactable"], true, "{plan}");
    assert!(
        inputs(&d, "compact-input.ndjson").is_empty(),
        "a dry run runs no hook"
    );

    let out = d.agentctl_ok(&["compact", &sid, "--tail-events", "2"]);
    assert_eq!(out["recorded"], true, "{out}");
    let seen = inputs(&d, "compact-input.ndjson");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["hook_event_name"], "PreCompact");
    assert_eq!(seen[0]["trigger"], "manual");
    assert_eq!(seen[0]["session_id"], sid.as_str());
    assert_eq!(
        seen[0]["turn_id"],
        Value::Null,
        "no turn runs a manual compaction"
    );
    assert_eq!(
        Path::new(seen[0]["cwd"].as_str().unwrap()),
        d.workspace().canonicalize().unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("manual-only.txt")).unwrap(),
        "manual\n"
    );
    // Both runs are in the Log right before the compaction they preceded.
    let evs = events(&mut c, &sid);
    let at = evs
        .iter()
        .position(|e| is_type(e, "history_compaction"))
        .expect("a history_compaction");
    let runs: Vec<(String, String, Option<String>)> = evs[at - 2..at]
        .iter()
        .map(|e| {
            assert!(is_type(e, "hook_run"), "{e}");
            assert!(e["data"].get("turn_id").is_none(), "{e}");
            (
                e["data"]["event"].as_str().unwrap().to_string(),
                e["data"]["verdict"].as_str().unwrap().to_string(),
                e["data"]["matcher"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("pre_compact".into(), "allow".into(), None),
            ("pre_compact".into(), "allow".into(), Some("manual".into())),
        ]
    );

    // A turn's own compaction (the provider reports an overflow) is `auto`: the
    // `manual` hook does not run.
    let p = d.root().join("overflow.json");
    let mut steps: Vec<Value> = (0..16)
        .map(|_| json!({"tool_calls": [{"name": "list_dir", "args": {}}]}))
        .collect();
    steps.push(json!({"error": {"kind": "context_overflow", "message": "maximum context length exceeded"}}));
    let body = json!({"rules": [
        {"match": "[HISTORY_COMPACTION v1]", "steps": (0..8).map(|_| json!({"text": "recovered"})).collect::<Vec<_>>()},
        {"match": "overflow", "steps": steps},
    ]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    let sid2 = create(&d, &mut c);
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid2, "input": "overflow please", "max_iterations": 40,
               "model": format!("script:{}", p.display())}),
    );
    assert_eq!(r["result"]["status"], "completed", "{r}");
    // One run per compaction the turn recorded, each right before it: none for the
    // tails overflow recovery tried and found nothing to compact in.
    let seen = inputs(&d, "compact-input.ndjson");
    let auto: Vec<&Value> = seen[1..].iter().collect();
    assert!(!auto.is_empty(), "{seen:?}");
    for s in &auto {
        assert_eq!(s["trigger"], "auto");
        assert_eq!(s["session_id"], sid2.as_str());
        assert_eq!(s["turn_id"], r["result"]["turn_id"]);
    }
    let evs2 = events(&mut c, &sid2);
    let compactions: Vec<usize> = evs2
        .iter()
        .enumerate()
        .filter(|(_, e)| is_type(e, "history_compaction"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(compactions.len(), auto.len(), "{evs2:?}");
    for i in compactions {
        assert_eq!(
            evs2[i - 1]["data"]["event"],
            "pre_compact",
            "{}",
            evs2[i - 1]
        );
        assert_eq!(evs2[i]["data"]["trigger"], "overflow_recovery");
    }
    assert_eq!(
        of_type(&evs2, "hook_run").len(),
        auto.len(),
        "no run without a compaction"
    );
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("manual-only.txt")).unwrap(),
        "manual\n",
        "the manual-only hook ran again"
    );
}
