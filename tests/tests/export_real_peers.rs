//! Round trips through the real peers (docs/moving-sessions.md, "Exporting"): a captured
//! session of Claude Code, Codex or pi is imported, continued in agentd with a `script`
//! turn, exported with `--install` into a private home, and resumed there by the real
//! peer from npm (pinned in tests/peers, installed by .ci/peers.sh) with a new prompt,
//! offline against a local mock speaking the peer's own provider wire format. The peer's
//! request to the mock must hold the original first prompt and agentd's continuation;
//! importing the file the peer then appended to gives the exported conversation plus the
//! new prompt and answer.

use agentd_tests::conv::{self, Conv};
use agentd_tests::peers::{self, ModelMock, Request, Response};
use agentd_tests::{wait_output, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const NEW_PROMPT: &str = "Where did we leave off? Résumé, s'il te plaît.";
const MOCK_ANSWER: &str = "We listed the workspace last; the smoke test passed before that.";

fn fixture(rel: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../daemon/tests/data/import/peers")
        .join(rel);
    assert!(p.is_file(), "fixture {rel} is missing");
    p
}

fn events(d: &Daemon, sid: &str) -> Vec<Value> {
    let r = d
        .connect()
        .call_ok("agentd/events", json!({"session_id": sid, "limit": 100000}));
    r["events"].as_array().unwrap().clone()
}

fn script_model() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello.json")
        .canonicalize()
        .unwrap();
    format!("script:{}", script.display())
}

/// A mock model answering `MOCK_ANSWER` in whichever wire format the request's path names.
fn mock() -> ModelMock {
    ModelMock::start(|r: &Request| {
        let model = r.body["model"].as_str().unwrap_or("mock-model");
        if r.method != "POST" {
            Response::not_found()
        } else if r.path.starts_with("/v1/messages?") || r.path == "/v1/messages" {
            if r.body["stream"] == true {
                Response::sse(peers::anthropic_text(MOCK_ANSWER, model))
            } else {
                Response::json(peers::anthropic_text_json(MOCK_ANSWER, model))
            }
        } else if r.path == "/v1/responses" {
            Response::sse(peers::responses_text(MOCK_ANSWER))
        } else if r.path == "/v1/chat/completions" {
            Response::sse(peers::chat_text(MOCK_ANSWER))
        } else {
            Response::not_found()
        }
    })
}

/// Every string in a JSON value (a request body), recursively.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

fn holds(body: &Value, text: &str) -> bool {
    let mut all = Vec::new();
    strings(body, &mut all);
    all.iter().any(|s| s.contains(text))
}

enum Peer {
    Claude,
    Codex,
    Pi,
}

struct Case {
    peer: Peer,
    rel: &'static str,
    format: &'static str,
    read: fn(&Path) -> Conv,
}

/// Steps 1–5 of the round trip for one peer, then the re-import of what the peer wrote.
fn round_trip(c: Case) {
    let what = c.format;
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let ws = d.workspace().canonicalize().unwrap();
    let ws_s = ws.display().to_string();
    let src = fixture(c.rel);
    let original = (c.read)(&src);

    // 1–2: import the capture and continue it in agentd.
    let r = d.agentctl_ok(&["import", src.to_str().unwrap(), "--workspace", &ws_s]);
    let sid = r["session_id"].as_str().unwrap().to_string();
    let t = d.agentctl_ok(&["turn", &sid, "What is here?", "--model", &script_model()]);
    assert_eq!(t["status"], "completed", "{what}: {t}");
    let log = Conv::from_log(&events(&d, &sid));
    let continuation = log.answers.last().unwrap().clone();
    assert!(
        continuation.contains("offline `script` provider"),
        "{what}: {continuation}"
    );

    // 3: install into a private home, as the peer would look for it.
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mock = mock();
    let base = format!("{}/v1", mock.origin);
    // The peer's own configuration of the mock provider, where the peer reads it.
    match c.peer {
        Peer::Claude => {}
        Peer::Codex => {
            let dir = home.join(".codex");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("config.toml"),
                format!(
                    "model = \"mock-model\"\nmodel_provider = \"mock\"\napproval_policy = \"never\"\n\
                     sandbox_mode = \"read-only\"\n[model_providers.mock]\nname = \"mock\"\n\
                     base_url = \"{base}\"\nenv_key = \"MOCK_API_KEY\"\nwire_api = \"responses\"\n"
                ),
            )
            .unwrap();
        }
        Peer::Pi => {
            let dir = home.join(".pi/agent");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("models.json"),
                json!({"providers": {"mock": {"baseUrl": base, "api": "openai-completions",
                    "apiKey": "MOCK_API_KEY",
                    "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                    "models": [{"id": "mock-model", "contextWindow": 128000, "maxTokens": 4096}]}}})
                .to_string(),
            )
            .unwrap();
        }
    }
    let x = d.agentctl_ok(&[
        "export",
        &sid,
        "--format",
        c.format,
        "--install",
        "--home",
        home.to_str().unwrap(),
    ]);
    let path = PathBuf::from(x["path"].as_str().unwrap());
    let id = x["resume_id"].as_str().unwrap().to_string();
    let resume = x["resume_command"].as_str().unwrap();
    let expected = match c.peer {
        Peer::Claude => format!("claude --resume {id}"),
        Peer::Codex => format!("codex resume {id}"),
        Peer::Pi => format!("pi --session {id}"),
    };
    assert!(
        resume.starts_with(&format!("cd {ws_s} && ")) && resume.ends_with(&expected),
        "{what}: {resume}"
    );
    // What the export holds, read back by agentd, before the peer touches the file.
    let copy = root.path().join(path.file_name().unwrap());
    std::fs::copy(&path, &copy).unwrap();
    let b = d.agentctl_ok(&["import", copy.to_str().unwrap(), "--workspace", &ws_s]);
    let before = Conv::from_log(&events(&d, b["session_id"].as_str().unwrap()));
    assert_eq!(before.prompts.first(), original.prompts.first(), "{what}");
    assert_eq!(before.prompts.last().unwrap(), "What is here?", "{what}");
    assert_eq!(before.answers.last(), Some(&continuation), "{what}");

    // 4: the real peer resumes it by id, from the session's directory, with a new prompt.
    let bin = match c.peer {
        Peer::Claude => "claude",
        Peer::Codex => "codex",
        Peer::Pi => "pi",
    };
    let mut cmd = peers::command(bin, &home);
    cmd.current_dir(&ws);
    match c.peer {
        Peer::Claude => {
            cmd.args([
                "-p",
                "--resume",
                &id,
                "--model",
                "claude-sonnet-4-5",
                "--output-format",
                "json",
                "--",
                NEW_PROMPT,
            ])
            .env("ANTHROPIC_BASE_URL", &mock.origin)
            .env("ANTHROPIC_API_KEY", "sk-mock")
            // Claude Code refuses some modes as root outside a declared sandbox.
            .env("IS_SANDBOX", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_BUG_COMMAND", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_ENABLE_TELEMETRY", "0");
        }
        Peer::Codex => {
            cmd.args(["exec", "resume", "--skip-git-repo-check", &id, NEW_PROMPT])
                .env("MOCK_API_KEY", "sk-mock");
        }
        Peer::Pi => {
            cmd.args([
                "-p",
                "--provider",
                "mock",
                "--model",
                "mock-model",
                "--session",
                &id,
                NEW_PROMPT,
            ])
            .env("PI_OFFLINE", "1")
            .env("MOCK_API_KEY", "sk-mock");
        }
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: spawning {bin}: {e}"));
    let out = wait_output(child, Duration::from_secs(180))
        .unwrap_or_else(|| panic!("{what}: {bin} did not finish within 180 s"));
    assert!(
        out.code == Some(0),
        "{what}: {bin} failed ({:?}):\n{}\n{}",
        out.code,
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains(MOCK_ANSWER), "{what}: {}", out.stdout);

    // 5: the peer's request holds the original first prompt and agentd's continuation.
    let req = mock.wait_for(|r| holds(&r.body, NEW_PROMPT), Duration::from_secs(10));
    let first = original.prompts.first().unwrap();
    assert!(
        holds(&req.body, first),
        "{what}: the first prompt is not in the request"
    );
    assert!(
        holds(&req.body, "What is here?"),
        "{what}: agentd's prompt is not in the request"
    );
    assert!(
        holds(&req.body, &continuation),
        "{what}: agentd's answer is not in the request"
    );
    let last_answer = original.answers.last().unwrap();
    assert!(
        holds(&req.body, last_answer),
        "{what}: the peer's own last answer is not in the request"
    );

    // The file the peer appended to imports as the exported conversation plus the new
    // prompt and answer.
    let a = d.agentctl_ok(&["import", path.to_str().unwrap(), "--workspace", &ws_s]);
    assert_eq!(a["warnings"], json!([]), "{what}: {a}");
    let after = Conv::from_log(&events(&d, a["session_id"].as_str().unwrap()));
    let mut want = before.clone();
    if let Peer::Codex = c.peer {
        // Codex tells the model where it now runs in a user-role `<environment_context>`
        // message, which agentd imports like the capture's own (what the model saw).
        let n = after.prompts.len();
        let env = after
            .prompts
            .get(n.wrapping_sub(2))
            .cloned()
            .unwrap_or_default();
        assert!(
            env.starts_with("<environment_context>") && env.contains(&format!("<cwd>{ws_s}</cwd>")),
            "{what}: {env}"
        );
        want.prompts.push(env);
    }
    want.prompts.push(NEW_PROMPT.to_string());
    want.answers.push(MOCK_ANSWER.to_string());
    assert_eq!(after, want, "{what}: the peer's continuation, imported");
}

#[test]
fn claude_code_resumes_an_exported_session() {
    round_trip(Case {
        peer: Peer::Claude,
        rel: "claude-code-2.1.332/ab1d27b0-bb39-4b22-8cd2-55b8f42c5cfe.jsonl",
        format: "claude-code",
        read: conv::claude,
    });
}

#[test]
fn codex_resumes_an_exported_session() {
    round_trip(Case {
        peer: Peer::Codex,
        rel: "codex-0.171.0/rollout-2026-11-27T04-30-53-01a21b45-43d1-7862-b944-095933ffc093.jsonl",
        format: "codex",
        read: conv::codex,
    });
}

#[test]
fn pi_resumes_an_exported_session() {
    round_trip(Case {
        peer: Peer::Pi,
        rel: "pi-1.6.0/2026-11-27T04-30-56-729Z_01a21b45-4ed9-72e7-a38a-cf29c5a921da.jsonl",
        format: "pi",
        read: conv::pi,
    });
}
