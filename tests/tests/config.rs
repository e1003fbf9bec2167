//! The config file through the real binaries: a mistake stops the daemon with the key,
//! its line and the nearest known key (on stderr and in `agentd.log`), `agentctl doctor`
//! reports the same message and a missing provider key with its fix, `[turns]` sets the
//! defaults of turns that give none, and `provider:model` picks the provider for every
//! client (mock providers over real HTTP).

use agentd_tests::acp::Acp;
use agentd_tests::sse::{chat_sse, sse_server};
use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const TYPO: &str = "durability = \"sync\"\n\ndefualt_provider = \"openai\"\n";
const TYPO_MSG: &str = "line 3: unknown key `defualt_provider`; did you mean `default_provider`?";

#[test]
fn a_typo_stops_the_daemon_naming_key_line_and_nearest_key() {
    let d = Daemon::builder().config(TYPO).build();
    // Run directly: refused at start, the message on stderr.
    let out = d.agentd_cmd().output().expect("run agentd");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(TYPO_MSG), "{stderr}");
    assert!(!d.socket().exists(), "no socket was bound");

    // Started by agentctl: the command fails (daemon_unavailable, exit 4) saying why,
    // and agentd.log holds the daemon's message.
    let out = d.agentctl(["ls"]);
    out.assert_code(4);
    assert!(out.stderr.contains(TYPO_MSG), "{}", out.stderr);
    let log = std::fs::read_to_string(d.home().join("agentd.log")).expect("agentd.log");
    assert!(log.contains(TYPO_MSG), "{log}");
}

#[test]
fn each_level_and_type_error_names_its_key_and_line() {
    let cases = [
        (
            "[compaction]\nthreshold = 0.9\ntail_event = 3\n",
            "line 3: unknown key `tail_event` in [compaction]; did you mean `tail_events`?",
        ),
        (
            "[turns]\nmax_iteration = 3\n",
            "line 2: unknown key `max_iteration` in [turns]; did you mean `max_iterations`?",
        ),
        (
            "[providers.local]\nkind = \"openai-chat\"\nmodle = \"m\"\n",
            "line 3: unknown key `modle` in [providers.local]; did you mean `model`?",
        ),
        (
            "# providers\n[providers.local]\nbase_url = \"http://127.0.0.1:1/v1\"\n",
            "line 2: missing key `kind` in [providers.local]",
        ),
        (
            "group_sync = \"yes\"\n",
            "line 1: `group_sync`: invalid type: string \"…\", expected a boolean",
        ),
        (
            "[providers.p]\nkind = \"openai-chat\"\nreasoning_effort = \"max\"\n",
            "line 3: [providers.p] reasoning_effort must be one of minimal, low, medium, high (got \"max\")",
        ),
        (
            "[sandbox]\ncaches = [\"cache:crago\"]\n",
            "line 2: [sandbox] unknown cache `cache:crago`; did you mean `cache:cargo`?",
        ),
    ];
    for (text, want) in cases {
        let d = Daemon::builder().config(text).build();
        let out = d.agentd_cmd().args(["config", "check"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.ends_with(want), "{text}\n got: {msg}\nwant: {want}");
    }
}

/// Runs `agentctl doctor` with a private HOME and no provider key in its environment.
fn doctor(d: &Daemon, home: &std::path::Path) -> agentd_tests::Output {
    let out = d
        .agentctl_cmd()
        .arg("doctor")
        .env("HOME", home)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    agentd_tests::Output::from_std(out)
}

#[test]
fn doctor_fails_without_a_provider_or_key_and_prints_the_fix() {
    let d = Daemon::builder().build();
    let home = d.root().join("user");
    std::fs::create_dir_all(&home).unwrap();
    let out = doctor(&d, &home);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("provider keys"))
        .unwrap_or_else(|| panic!("no provider keys check: {}", out.stdout));
    assert!(
        line.starts_with("FAIL  provider keys: no provider configured")
            && line.contains("OPENAI_API_KEY"),
        "{line}"
    );
    let env_file = home.join(".config/agentd/env");
    assert!(
        out.stdout
            .contains(&format!("add OPENAI_API_KEY=... to {}", env_file.display())),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("export OPENAI_API_KEY=..."),
        "{}",
        out.stdout
    );

    // The same config error the daemon would refuse to start with.
    let d = Daemon::builder().config(TYPO).build();
    let out = doctor(&d, &home);
    assert_ne!(out.code, Some(0));
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("config:"))
        .unwrap_or_else(|| panic!("no config check: {}", out.stdout));
    assert!(
        line.starts_with("FAIL  config: ") && line.contains(TYPO_MSG),
        "{line}"
    );

    // A keyless default provider is fine.
    let d = Daemon::builder()
        .config("default_provider = \"ollama\"\n")
        .build();
    let out = doctor(&d, &home);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("provider keys"))
        .unwrap();
    assert!(
        line.starts_with("ok    provider keys: default provider \"ollama\""),
        "{line}"
    );
}

fn reply(text: &str) -> String {
    chat_sse(&[
        json!({"model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
    ])
}

/// Two providers; the default one has no server behind it, so a turn that reaches it
/// fails. `beta:m-beta` must reach `beta` with model `m-beta`, from every client.
#[test]
fn provider_colon_model_reaches_that_provider_from_every_client() {
    let (beta, server) = sse_server(vec![
        reply("from turn"),
        reply("from run"),
        reply("from acp"),
    ]);
    let config = format!(
        "default_provider = \"alpha\"\n\
         [providers.alpha]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m-alpha\"\n\
         [providers.beta]\nkind = \"openai-chat\"\nbase_url = \"{beta}\"\nmodel = \"m-default\"\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();

    // agentctl turn
    let sid = d.create_session();
    let out = d.agentctl(["--json", "turn", &sid, "hi", "--model", "beta:m-beta"]);
    out.assert_code(0);
    assert_eq!(out.json()["output_text"], "from turn", "{:?}", out);

    // agentctl run: the new session records the provider and the model apart.
    let out = d.agentctl(["--json", "run", "hi", "--model", "beta:m-beta"]);
    out.assert_code(0);
    assert_eq!(out.json()["output_text"], "from run", "{:?}", out);
    let run_sid = out.json()["session_id"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| {
            let ls = d.agentctl(["--json", "ls"]);
            ls.json()["sessions"][0]["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        });
    let first = &d.log_lines(&run_sid)[0];
    assert_eq!(first["data"]["provider"], "beta", "{first}");
    assert_eq!(first["data"]["model"], "m-beta", "{first}");

    // ACP: the picker value goes to the daemon as it is.
    let mut a = Acp::spawn(&d, &["--model", "beta:m-beta"]);
    a.initialize();
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let acp_sid = r["sessionId"].as_str().unwrap().to_string();
    let (r, _) = a.call(
        "session/prompt",
        json!({"sessionId": acp_sid, "prompt": [{"type": "text", "text": "hi"}]}),
        WAIT,
    );
    assert_eq!(r["stopReason"], "end_turn", "{r}");

    let bodies = server.join().unwrap();
    let models: Vec<&str> = bodies
        .iter()
        .map(|b| b["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["m-beta", "m-beta", "m-beta"]);
    for sid in [&sid, &run_sid, &acp_sid] {
        let evs = d.connect().call_ok(
            "agentd/events",
            json!({"session_id": sid, "types": ["turn_started"]}),
        );
        let started = &evs["events"][0]["data"];
        assert_eq!(started["provider"], "beta", "{sid}: {started}");
        assert_eq!(started["model"], "m-beta", "{sid}: {started}");
    }
}

/// `[turns]` sets what a turn runs with when its request gives nothing: here
/// `read_only` refuses the write and one provider call is all a turn gets.
#[test]
fn turns_defaults_come_from_the_config() {
    let script = serde_json::json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "write_file", "args": {"path": "x.txt", "content": "x"}}]},
        {"text": "done"}
    ]}]});
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config("[turns]\npermission_mode = \"read_only\"\nmax_iterations = 1\n")
        .build();
    let path = d.root().join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut d = d;
    d.spawn();
    d.wait_ready(WAIT).unwrap();
    let sid = d.create_session();
    let mut c = d.connect();
    c.set_call_timeout(WAIT);
    let model = format!("script:{}", path.display());
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "write", "model": model}),
    );
    assert_eq!(r["reason"], "max_iterations", "{r}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"].clone();
    let decision = evs
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "permission_decision")
        .unwrap_or_else(|| panic!("no permission decision: {evs}"));
    assert_eq!(decision["data"]["decision"], "deny");
    assert_eq!(decision["data"]["mode"], "read_only");
    assert!(!d.workspace().join("x.txt").exists());

    // A request's own choice still wins.
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "write", "model": model,
               "permission_mode": "auto", "max_iterations": 4}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output_text"], "done", "{r}");
    assert!(d.workspace().join("x.txt").exists());
}

/// The file `agentctl config init` writes is one the daemon accepts, with the defaults
/// it documents.
#[test]
fn the_config_init_template_is_valid() {
    let d = Daemon::builder().build();
    d.agentctl(["config", "init"]).assert_code(0);
    let out = d.agentd_cmd().args(["config", "check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exists"], true, "{v}");
    assert_eq!(v["default_provider"], "openai");
    assert_eq!(
        v["turns"],
        json!({"permission_mode": "auto", "max_iterations": 16})
    );
}

/// Every ```toml block in README.md, CONTRIBUTING.md, ARCHITECTURE.md and `docs/*.md` is
/// a config the daemon accepts (`agentd config check`), so an example a reader copies
/// never names a key the daemon refuses.
#[test]
fn every_toml_example_in_the_docs_passes_config_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let mut pages: Vec<_> = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);

    let mut blocks = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read page");
        let mut open: Option<(usize, usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            match open.take() {
                None if trimmed.trim_end() == "```toml" => {
                    open = Some((i + 2, indent, String::new()))
                }
                None => {}
                Some((first, _, body)) if trimmed.starts_with("```") => {
                    let name = page
                        .strip_prefix(root)
                        .unwrap_or(page)
                        .display()
                        .to_string();
                    blocks.push((format!("{name}:{first}"), body));
                }
                Some((first, ind, mut body)) => {
                    body.push_str(line.get(ind..).unwrap_or(trimmed));
                    body.push('\n');
                    open = Some((first, ind, body));
                }
            }
        }
        assert!(open.is_none(), "{}: unclosed ```toml block", page.display());
    }
    let names: Vec<&str> = blocks.iter().map(|(at, _)| at.as_str()).collect();
    for page in ["README.md", "docs/configuration.md", "docs/sandbox.md"] {
        assert!(
            names.iter().any(|n| n.starts_with(&format!("{page}:"))),
            "no ```toml block found in {page}: {names:?}"
        );
    }

    let mut failures = Vec::new();
    for (at, body) in &blocks {
        let d = Daemon::builder().config(body).build();
        let out = d.agentd_cmd().args(["config", "check"]).output().unwrap();
        if !out.status.success() {
            failures.push(format!("{at}: {}", String::from_utf8_lossy(&out.stdout)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
