//! Black-box tests of importing other agents' sessions (docs/moving-sessions.md): the real
//! Claude Code, opencode, Gemini CLI, Codex and pi sessions in
//! `daemon/tests/data/import/peers/` import balanced, with the counts their writers
//! recorded, and a `script` turn continues each; `--format auto` recognises every
//! format; `--discover` finds one session of each agent under a temp `$HOME` and imports
//! each once; bad input gets a clear error or a skip with a reason, never a half-made
//! session.

use agentd_tests::{assert_replay_paired, Daemon, Output};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
}

/// `agentctl --json ARGS` expected to fail; returns the error object.
#[track_caller]
fn ctl_err(d: &Daemon, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = d.agentctl(all);
    let v = out.json().clone();
    assert_eq!(v["ok"], false, "{out:?}");
    v["error"].clone()
}

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../daemon/tests/data/import/peers")
        .canonicalize()
        .expect("daemon/tests/data/import/peers")
}

fn peer(rel: &str) -> PathBuf {
    let p = peers().join(rel);
    assert!(p.is_file(), "fixture {rel} is missing");
    p
}

const CLAUDE: &str = "claude-code-2.1.328/a311af5e-f088-43d4-b477-089084198b8c.jsonl";
const CODEX: &str =
    "codex-0.169.0/rollout-2026-11-25T06-19-04-01a2115b-946a-70e3-ad4d-346112905e8a.jsonl";
const PI: &str = "pi-0.73.1/2026-11-25T06-19-06-682Z_01a2115b-9e39-7693-a196-1c410d4cf0c7.jsonl";
const GEMINI: &str = "gemini-cli-0.61.0/session-2026-11-25T06-19-260a32a2.jsonl";
const GEMINI_STUB: &str = "gemini-cli-0.61.0/session-2026-11-25T06-20-260a32a2.jsonl";
const OPENCODE_DB: &str = "opencode-1.18.33/opencode.db";
const OPENCODE_EXPORT: &str = "opencode-1.18.33/export.json";
const OPENCODE_SESSION: &str = "ses_deea49f23ffeLHdDAjDaINfYT0";

fn session_ids(d: &Daemon) -> BTreeSet<String> {
    d.agentctl_ok(&["ls", "--all"])["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect()
}

fn events(d: &Daemon, sid: &str) -> Vec<Value> {
    let r = d
        .connect()
        .call_ok("agentd/events", json!({"session_id": sid, "limit": 100000}));
    r["events"].as_array().unwrap().clone()
}

fn type_counts(evs: &[Value]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in evs {
        *m.entry(e["type"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    m
}

fn script_model() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello.json")
        .canonicalize()
        .unwrap();
    format!("script:{}", script.display())
}

struct Case {
    rel: &'static str,
    format: &'static str,
    extra: &'static [&'static str],
    source_session: &'static str,
    /// The source counts lines (false: opencode counts records).
    lines: bool,
}

const CASES: &[Case] = &[
    Case {
        rel: CLAUDE,
        format: "claude",
        extra: &[],
        source_session: "a311af5e-f088-43d4-b477-089084198b8c",
        lines: true,
    },
    Case {
        rel: GEMINI,
        format: "gemini",
        extra: &[],
        source_session: "260a32a2-e399-4328-8e95-df737c7117c7",
        lines: true,
    },
    Case {
        rel: OPENCODE_DB,
        format: "opencode",
        extra: &["--session", OPENCODE_SESSION],
        source_session: OPENCODE_SESSION,
        lines: false,
    },
    Case {
        rel: OPENCODE_EXPORT,
        format: "opencode",
        extra: &[],
        source_session: OPENCODE_SESSION,
        lines: false,
    },
    Case {
        rel: CODEX,
        format: "codex",
        extra: &[],
        source_session: "01a2115b-946a-70e3-ad4d-346112905e8a",
        lines: true,
    },
    Case {
        rel: PI,
        format: "pi",
        extra: &[],
        source_session: "01a2115b-9e39-7693-a196-1c410d4cf0c7",
        lines: true,
    },
    Case {
        rel: "claude-code-2.1.332/ab1d27b0-bb39-4b22-8cd2-55b8f42c5cfe.jsonl",
        format: "claude",
        extra: &[],
        source_session: "ab1d27b0-bb39-4b22-8cd2-55b8f42c5cfe",
        lines: true,
    },
    Case {
        rel: "codex-0.171.0/rollout-2026-11-27T04-30-53-01a21b45-43d1-7862-b944-095933ffc093.jsonl",
        format: "codex",
        extra: &[],
        source_session: "01a21b45-43d1-7862-b944-095933ffc093",
        lines: true,
    },
    Case {
        rel: "pi-1.6.0/2026-11-27T04-30-56-729Z_01a21b45-4ed9-72e7-a38a-cf29c5a921da.jsonl",
        format: "pi",
        extra: &[],
        source_session: "01a21b45-4ed9-72e7-a38a-cf29c5a921da",
        lines: true,
    },
    Case {
        rel: "gemini-cli-0.61.0-resume/session-2026-11-27T04-30-a9eecb5b.jsonl",
        format: "gemini",
        extra: &[],
        source_session: "a9eecb5b-e2d5-4628-ae14-2828df5b6666",
        lines: true,
    },
];

/// Every fixture: detected by content, imported with the README's counts (3 prompts,
/// 5 answers, 7 calls and 7 results with 1 failing, 9 usage records), balanced, counted
/// by `agentctl usage`, and continued by a `script` turn.
#[test]
fn peer_sessions_import_balanced_with_their_counts_and_continue() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    for c in CASES {
        let src = peer(c.rel);
        let path = src.to_str().unwrap();
        let mut args = vec!["import", path, "--workspace", &ws];
        args.extend_from_slice(c.extra);
        let r = d.agentctl_ok(&args);
        let what = c.rel;
        assert_eq!(r["format"], c.format, "{what}: detected format");
        let lines = &r["lines"];
        let tally: u64 = ["imported", "metadata", "ui_only", "skipped"]
            .iter()
            .map(|k| lines[k].as_u64().unwrap())
            .sum();
        assert_eq!(tally, r["source_lines"].as_u64().unwrap(), "{what}: {r}");
        if c.lines {
            let text = std::fs::read_to_string(&src).unwrap();
            assert_eq!(r["source_lines"], text.lines().count(), "{what}");
        }
        for s in r["skipped"].as_array().unwrap() {
            assert!(!s["reason"].as_str().unwrap().is_empty(), "{what}: {s}");
        }
        let sid = r["session_id"].as_str().unwrap().to_string();
        let evs = events(&d, &sid);
        assert_eq!(evs.len() as u64, r["imported"].as_u64().unwrap(), "{what}");
        let start = &evs[0]["data"];
        assert_eq!(start["imported_from"]["format"], c.format, "{what}");
        assert_eq!(
            start["imported_from"]["session_id"], c.source_session,
            "{what}"
        );
        assert_eq!(start["workspace"], ws.as_str(), "{what}");
        let n = type_counts(&evs);
        let users: Vec<&str> = evs
            .iter()
            .filter(|e| e["type"] == "user_message")
            .map(|e| e["data"]["text"].as_str().unwrap())
            .filter(|t| !t.starts_with("<environment_context>"))
            .collect();
        assert_eq!(users.len(), 3, "{what}: {users:?}");
        assert!(users[1].contains("日本語の説明も一行ください"), "{what}");
        assert_eq!(n["assistant_message"], 5, "{what}: {n:?}");
        assert_eq!(n["tool_call"], 7, "{what}: {n:?}");
        assert_eq!(n["tool_result"], 7, "{what}: {n:?}");
        assert_eq!(n["provider_usage"], 9, "{what}: {n:?}");
        let failed = evs
            .iter()
            .filter(|e| e["type"] == "tool_result" && e["data"]["ok"] == false)
            .count();
        assert_eq!(failed, 1, "{what}: one failing call");
        assert_replay_paired(&d.agentctl_ok(&["context", &sid]));
        let usage = d.agentctl_ok(&["usage", &sid]);
        assert_eq!(usage["total"]["calls"], 9, "{what}: {usage}");

        // An explicit --format gives the same events.
        let mut args = vec!["import", "--format", c.format, path, "--workspace", &ws];
        args.extend_from_slice(c.extra);
        let again = d.agentctl_ok(&args);
        assert_eq!(again["imported"], r["imported"], "{what}");

        let model = script_model();
        let t = d.agentctl_ok(&["turn", &sid, "Carry on.", "--model", &model]);
        assert_eq!(t["status"], "completed", "{what}: {t}");
        let last = events(&d, &sid).last().cloned().unwrap();
        assert_eq!(last["type"], "turn_ended");
        assert_eq!(last["data"]["status"], "completed");
        assert_replay_paired(&d.agentctl_ok(&["context", &sid]));
    }
}

/// The Claude Code specifics: the parallel pair that branches the parentUuid tree is
/// recovered, blocks of one API message make one step, thinking is kept as reasoning
/// for the same model, and bookkeeping is skipped with reasons.
#[test]
fn claude_code_steps_merge_blocks_and_recover_the_parallel_pair() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let r = d.agentctl_ok(&["import", peer(CLAUDE).to_str().unwrap(), "--workspace", &ws]);
    let sid = r["session_id"].as_str().unwrap();
    let evs = events(&d, sid);
    let kinds: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    // Turn 1, first response: thinking, text, both calls, then usage, then the results
    // (r1b finished first).
    assert_eq!(
        &kinds[1..9],
        &[
            "user_message",
            "reasoning",
            "assistant_message",
            "tool_call",
            "tool_call",
            "provider_usage",
            "tool_result",
            "tool_result"
        ],
        "{kinds:?}"
    );
    assert_eq!(evs[4]["data"]["call_id"], "toolu_r1a");
    assert_eq!(evs[5]["data"]["call_id"], "toolu_r1b");
    assert_eq!(evs[7]["data"]["call_id"], "toolu_r1b");
    assert_eq!(evs[2]["data"]["model"], "claude-sonnet-4-5");
    assert!(evs[2]["data"]["item"]["signature"].is_string());
    let failing = evs
        .iter()
        .find(|e| e["type"] == "tool_result" && e["data"]["call_id"] == "toolu_r2")
        .unwrap();
    assert_eq!(failing["data"]["ok"], false);
    assert!(failing["data"]["output"]
        .as_str()
        .unwrap()
        .contains("File does not exist"));
    assert_eq!(evs[0]["data"]["model"], "claude-sonnet-4-5");
    let reasons: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    for want in [
        "attachment \"total_tokens_reminder\"",
        "api-request:",
        "api-request-blob:",
        "api-request-shape:",
        "queue-operation:",
        "cost-state:",
        "tools-used:",
        "atis-latch:",
        "mode:",
    ] {
        assert!(
            reasons.iter().any(|r| r.starts_with(want)),
            "no skip reason starting {want:?}: {reasons:?}"
        );
    }
    // Everything not imported is listed: 20 attachments, 19 api-request*, 6 queue, 4
    // tools-used, 3 atis-latch, 3 cost-state, 1 mode.
    assert_eq!(r["skipped_total"], 56, "{r}");
}

#[test]
fn auto_detection_refuses_unknown_content_and_lists_what_it_tried() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let before = session_ids(&d);
    for (name, bytes) in [
        ("notes.txt", &b"just some notes\n"[..]),
        ("other.jsonl", b"{\"hello\":\"world\"}\n{\"a\":1}\n"),
        ("binary.bin", b"\xff\xfe\x00\x01garbage"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = ctl_err(&d, &["import", p.to_str().unwrap(), "--workspace", &ws]);
        assert_eq!(e["kind"], "invalid_args", "{e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("cannot tell which agent wrote"), "{msg}");
        for tried in [
            "SQLite",
            "opencode export",
            "pi",
            "codex",
            "Pixir",
            "Gemini",
            "Claude Code",
        ] {
            assert!(msg.contains(tried), "{msg} does not name {tried}");
        }
    }
    // A wrong explicit format says what it expected.
    let e = ctl_err(
        &d,
        &[
            "import",
            "--format",
            "pi",
            peer(CLAUDE).to_str().unwrap(),
            "--workspace",
            &ws,
        ],
    );
    assert!(
        e["message"].as_str().unwrap().contains("not a pi session"),
        "{e}"
    );
    // The Gemini resume stub holds no conversation: refused, pointing at the session.
    let e = ctl_err(
        &d,
        &[
            "import",
            peer(GEMINI_STUB).to_str().unwrap(),
            "--workspace",
            &ws,
        ],
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("holds no conversation"),
        "{e}"
    );
    // An opencode database without --session, and a workspace it has no session of.
    let e = ctl_err(
        &d,
        &[
            "import",
            peer(OPENCODE_DB).to_str().unwrap(),
            "--workspace",
            &ws,
        ],
    );
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("has no session in") && msg.contains(OPENCODE_SESSION),
        "{msg}"
    );
    let e = ctl_err(
        &d,
        &[
            "import",
            peer(OPENCODE_DB).to_str().unwrap(),
            "--session",
            "ses_nope",
            "--workspace",
            &ws,
        ],
    );
    assert_eq!(e["kind"], "not_found", "{e}");
    assert_eq!(session_ids(&d), before, "failed imports leave no session");
}

/// Copies the fixtures into a temp `$HOME` where each agent keeps them.
fn fake_home(root: &Path) -> PathBuf {
    let home = root.join("home");
    let put = |rel: &str, dest: &str| {
        let to = home.join(dest);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(&to, std::fs::read(peer(rel)).unwrap()).unwrap();
    };
    put(
        CLAUDE,
        ".claude/projects/-tmp-ws/a311af5e-f088-43d4-b477-089084198b8c.jsonl",
    );
    put(CODEX, ".codex/sessions/2026/11/25/rollout-2026-11-25T06-19-04-01a2115b-946a-70e3-ad4d-346112905e8a.jsonl");
    put(
        PI,
        ".pi/agent/sessions/--tmp-ws--/2026-11-25T06-19-06-682Z_01a2115b.jsonl",
    );
    put(OPENCODE_DB, ".local/share/opencode/opencode.db");
    put(
        GEMINI,
        ".gemini/tmp/ws/chats/session-2026-11-25T06-19-260a32a2.jsonl",
    );
    put(
        GEMINI_STUB,
        ".gemini/tmp/ws/chats/session-2026-11-25T06-20-260a32a2.jsonl",
    );
    let outside = root.join("outside.jsonl");
    std::fs::write(&outside, std::fs::read(peer(CLAUDE)).unwrap()).unwrap();
    std::os::unix::fs::symlink(&outside, home.join(".claude/projects/-tmp-ws/linked.jsonl"))
        .unwrap();
    home
}

fn discover(d: &Daemon, home: &Path, args: &[&str]) -> Value {
    let mut cmd = d.agentctl_cmd();
    cmd.env("HOME", home);
    for k in [
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "PI_CODING_AGENT_DIR",
        "XDG_DATA_HOME",
        "GEMINI_CLI_HOME",
    ] {
        cmd.env_remove(k);
    }
    cmd.args(["--json", "import", "--discover"]).args(args);
    let out = Output::from_std(cmd.output().expect("run agentctl"));
    out.assert_code(0);
    let v = out.json().clone();
    assert_eq!(v["ok"], true, "{out:?}");
    v
}

fn statuses(v: &Value) -> BTreeMap<String, String> {
    v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["agent"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn discovery_imports_each_agent_once_and_reimports_what_grew() {
    let d = daemon();
    let root = tempfile::tempdir().unwrap();
    let home = fake_home(root.path());
    let before = session_ids(&d);

    let dry = discover(&d, &home, &["--dry-run"]);
    assert_eq!(dry["sources"].as_array().unwrap().len(), 5, "{dry}");
    assert!(statuses(&dry).values().all(|s| s == "new"), "{dry}");
    assert_eq!(session_ids(&d), before, "--dry-run imports nothing");
    let ignored = dry["ignored"].to_string();
    assert!(
        ignored.contains("linked.jsonl") && ignored.contains("outside $HOME"),
        "{ignored}"
    );
    assert!(ignored.contains("resume stub"), "{ignored}");

    let first = discover(&d, &home, &[]);
    let st = statuses(&first);
    assert_eq!(st.len(), 5, "{first}");
    assert!(st.values().all(|s| s == "imported"), "{first}");
    let after_first = session_ids(&d);
    assert_eq!(after_first.len(), before.len() + 5);

    let second = discover(&d, &home, &[]);
    assert!(
        statuses(&second).values().all(|s| s == "unchanged"),
        "{second}"
    );
    assert_eq!(session_ids(&d), after_first, "a second run imports nothing");

    // The Claude Code session continued in Claude Code: imported again, naming the
    // earlier import.
    let claude_file =
        home.join(".claude/projects/-tmp-ws/a311af5e-f088-43d4-b477-089084198b8c.jsonl");
    let earlier = first["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["agent"] == "claude")
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut bytes = std::fs::read(&claude_file).unwrap();
    bytes.extend_from_slice(br#"{"parentUuid":"c1ebab66-8941-4d3e-8156-cd1329294c9e","isSidechain":false,"type":"user","message":{"role":"user","content":"One more thing."},"uuid":"0000aaaa-0000-4000-8000-000000000001","timestamp":"2026-11-25T07:00:00.000Z","cwd":"/tmp/claude-rich-7s4prhxd/ws","sessionId":"a311af5e-f088-43d4-b477-089084198b8c"}"#);
    bytes.push(b'\n');
    std::fs::write(&claude_file, bytes).unwrap();
    let third = discover(&d, &home, &["--agent", "claude"]);
    let row = &third["sources"][0];
    assert_eq!(row["status"], "reimported", "{third}");
    let new_sid = row["session_id"].as_str().unwrap();
    assert_ne!(new_sid, earlier);
    let start = &events(&d, new_sid)[0]["data"];
    assert_eq!(start["imported_from"]["previous_import"], earlier.as_str());
    assert_eq!(start["imported_from"]["format"], "claude");
    assert!(start["imported_from"]["sha256"].is_string());
    let evs = events(&d, new_sid);
    assert_eq!(evs.last().unwrap()["data"]["text"], "One more thing.");

    // Filters: another agent only, and a date after everything.
    let pi = discover(&d, &home, &["--agent", "pi", "--dry-run"]);
    assert_eq!(
        statuses(&pi),
        BTreeMap::from([("pi".into(), "unchanged".into())])
    );
    let none = discover(&d, &home, &["--since", "2999-01-01", "--dry-run"]);
    assert_eq!(none["sources"], json!([]));
}

/// A discovered session keeps the workspace its source recorded, though it is gone:
/// reading, searching, exporting and forking work; a turn fails naming the path.
#[test]
fn a_discovered_session_in_a_missing_workspace_reads_but_refuses_a_turn() {
    let d = daemon();
    let root = tempfile::tempdir().unwrap();
    let home = fake_home(root.path());
    let r = discover(&d, &home, &["--agent", "claude"]);
    let sid = r["sources"][0]["session_id"].as_str().unwrap().to_string();
    let missing = "/tmp/claude-rich-7s4prhxd/ws";
    assert!(
        !Path::new(missing).exists(),
        "the recorded workspace must be missing"
    );
    let show = d.agentctl_ok(&["show", &sid]);
    assert_eq!(show["workspace"], missing, "{show}");
    let found = d.agentctl_ok(&["search", "Résumé"]);
    assert!(found.to_string().contains(&sid), "{found}");
    let md = d.agentctl_ok(&["export", &sid]);
    assert!(md["content"]
        .as_str()
        .unwrap()
        .contains("smoke test passes"));
    let f = d.agentctl_ok(&["fork", &sid]);
    assert!(f["child_session_id"].is_string(), "{f}");
    let e = ctl_err(&d, &["turn", &sid, "go on", "--model", &script_model()]);
    assert!(e["message"].as_str().unwrap().contains(missing), "{e}");
}

fn import_text(d: &Daemon, dir: &Path, name: &str, text: &[u8], ws: &str) -> Value {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    d.agentctl_ok(&["import", p.to_str().unwrap(), "--workspace", ws])
}

fn join_lines(ls: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in ls {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out
}

fn skipped_reasons(r: &Value) -> String {
    r["skipped"].to_string()
}

#[test]
fn bad_claude_input_is_skipped_with_reasons_or_refused() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read(peer(CLAUDE)).unwrap();
    let lines: Vec<&[u8]> = src
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();

    // A torn last line: imported up to it, the torn bytes listed.
    let mut torn = src.clone();
    torn.extend_from_slice(
        b"{\"parentUuid\":\"c1ebab66-8941-4d3e-8156-cd1329294c9e\",\"type\":\"us",
    );
    let r = import_text(&d, dir.path(), "torn.jsonl", &torn, &ws);
    assert!(skipped_reasons(&r).contains("torn last line"), "{r}");
    assert_replay_paired(&d.agentctl_ok(&["context", r["session_id"].as_str().unwrap()]));

    // A missing parent (line 43, the second prompt, removed): the active branch starts
    // after it, with a warning, and stays balanced.
    let cut: Vec<&[u8]> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 42)
        .map(|(_, l)| *l)
        .collect();
    let r = import_text(&d, dir.path(), "cut.jsonl", &join_lines(&cut), &ws);
    assert!(r["warnings"].to_string().contains("missing parent"), "{r}");
    assert_replay_paired(&d.agentctl_ok(&["context", r["session_id"].as_str().unwrap()]));

    // A duplicated record (same uuid twice), an unknown record type, a non-UTF-8 line.
    let mut dup = src.clone();
    dup.extend_from_slice(lines[2]);
    dup.push(b'\n');
    dup.extend_from_slice(
        b"{\"type\":\"hologram\",\"sessionId\":\"a311af5e-f088-43d4-b477-089084198b8c\"}\n",
    );
    dup.extend_from_slice(b"{\"type\":\"user\",\"uuid\":\"u-bad\",\"parentUuid\":null,\"message\":{\"role\":\"user\",\"content\":\"\xff\xfe\"}}\n");
    let r = import_text(&d, dir.path(), "dup.jsonl", &dup, &ws);
    let reasons = skipped_reasons(&r);
    assert!(reasons.contains("is reused by line"), "{reasons}");
    assert!(
        reasons.contains("unknown Claude Code record type \\\"hologram\\\""),
        "{reasons}"
    );
    assert!(reasons.contains("not valid UTF-8"), "{reasons}");
    assert_replay_paired(&d.agentctl_ok(&["context", r["session_id"].as_str().unwrap()]));

    // A file cut short to its first records (no conversation yet) is refused; no session.
    let before = session_ids(&d);
    let head = join_lines(&lines[..2]);
    let p = dir.path().join("head.jsonl");
    std::fs::write(&p, head).unwrap();
    let e = ctl_err(
        &d,
        &[
            "import",
            "--format",
            "claude",
            p.to_str().unwrap(),
            "--workspace",
            &ws,
        ],
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no user or assistant record"),
        "{e}"
    );
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, b"").unwrap();
    let e = ctl_err(&d, &["import", empty.to_str().unwrap(), "--workspace", &ws]);
    assert!(e["message"].as_str().unwrap().contains("is empty"), "{e}");
    assert_eq!(session_ids(&d), before);
}

#[test]
fn gemini_and_opencode_bad_input() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    // Gemini: a torn last line and an unknown record shape are listed; the rest imports.
    let mut g = std::fs::read(peer(GEMINI)).unwrap();
    g.extend_from_slice(b"{\"what\":1}\n{\"id\":\"x\",\"type\":\"gem");
    let r = import_text(&d, dir.path(), "g.jsonl", &g, &ws);
    let reasons = skipped_reasons(&r);
    assert!(reasons.contains("torn last line"), "{reasons}");
    assert!(reasons.contains("neither a header"), "{reasons}");
    assert!(reasons.contains("rewritten by line"), "{reasons}");
    assert_replay_paired(&d.agentctl_ok(&["context", r["session_id"].as_str().unwrap()]));

    // opencode export: truncated JSON is refused whole.
    let before = session_ids(&d);
    let ex = std::fs::read(peer(OPENCODE_EXPORT)).unwrap();
    let p = dir.path().join("cut.json");
    std::fs::write(&p, &ex[..ex.len() / 2]).unwrap();
    let e = ctl_err(&d, &["import", p.to_str().unwrap(), "--workspace", &ws]);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("not an opencode export"),
        "{e}"
    );
    assert_eq!(session_ids(&d), before);
}

/// opencode's database is opened read-only with a busy timeout: a write transaction in
/// progress makes the import wait, then fail with `busy` naming the lock, and leave no
/// session; once opencode commits, the import works and never held the writer up.
#[test]
fn a_locked_opencode_database_is_a_clear_error_and_nothing_is_made() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("opencode.db");
    std::fs::write(&db, std::fs::read(peer(OPENCODE_DB)).unwrap()).unwrap();
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer
        .execute_batch("BEGIN EXCLUSIVE; UPDATE session SET title = 'renamed';")
        .unwrap();
    let before = session_ids(&d);
    let e = ctl_err(
        &d,
        &[
            "import",
            db.to_str().unwrap(),
            "--session",
            OPENCODE_SESSION,
            "--workspace",
            &ws,
        ],
    );
    assert_eq!(e["kind"], "busy", "{e}");
    assert!(e["message"].as_str().unwrap().contains("locked"), "{e}");
    assert_eq!(session_ids(&d), before);
    writer.execute_batch("COMMIT;").unwrap();
    let r = d.agentctl_ok(&[
        "import",
        db.to_str().unwrap(),
        "--session",
        OPENCODE_SESSION,
        "--workspace",
        &ws,
    ]);
    let sid = r["session_id"].as_str().unwrap();
    assert_eq!(events(&d, sid)[0]["data"]["title"], "renamed");
    // The importer wrote nothing to the database: the writer can still write.
    writer
        .execute_batch("UPDATE session SET title = 'again';")
        .unwrap();
}

/// A local mock of the OpenAI chat completions API: each `POST …/chat/completions`
/// takes the next scripted SSE body; anything else gets a 404. Returns the base URL and
/// a handle giving the paths it saw once `replies` are used up.
fn chat_mock(replies: Vec<String>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut replies = replies.into_iter();
        while replies.len() > 0 {
            let Ok((stream, _)) = listener.accept() else {
                break;
            };
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let Some(req) = agentd_tests::http::read_request(&mut r) else {
                continue;
            };
            let request = format!("{} {}", req.method, req.path);
            seen.push(request.clone());
            let mut w = stream;
            if !request.contains("/chat/completions") {
                let _ = w.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            }
            let reply = replies.next().unwrap_or_default();
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = w.write_all(head.as_bytes());
            let _ = w.write_all(reply.as_bytes());
            let _ = w.flush();
        }
        seen
    });
    (base, h)
}

/// One streamed chat completion: `content` and tool calls `(id, name, arguments)`.
fn chat_sse(content: &str, calls: &[(&str, &str, Value)]) -> String {
    let chunk = |delta: Value, finish: Value, usage: Value| {
        let mut c = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
            "model": "mock-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if !usage.is_null() {
            c["usage"] = usage;
        }
        format!("data: {c}\n\n")
    };
    let mut out = chunk(
        json!({"role": "assistant", "content": content}),
        Value::Null,
        Value::Null,
    );
    for (i, (id, name, args)) in calls.iter().enumerate() {
        out.push_str(&chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]}),
            Value::Null,
            Value::Null,
        ));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push_str(&chunk(
        json!({}),
        json!(finish),
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}),
    ));
    out.push_str("data: [DONE]\n\n");
    out
}

/// A real peer, installed from npm by `.ci/peers.sh` (pi 1.6.0, pinned in
/// `tests/peers/package-lock.json`), writes a fresh session against a local mock model;
/// discovery finds it under the peer's own directory override and imports it balanced.
/// A format change in a new release fails here.
#[test]
fn a_session_written_by_a_real_pi_imports() {
    let d = daemon();
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let agent = root.path().join("agent");
    let ws = root.path().join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "Lyon 6\nZürich 5\n").unwrap();
    let (base, mock) = chat_mock(vec![
        chat_sse(
            "Reading the notes.",
            &[("call_1", "bash", json!({"command": "cat notes.txt"}))],
        ),
        chat_sse("The notes list Lyon 6 and Zürich 5.", &[]),
    ]);
    std::fs::write(
        agent.join("models.json"),
        json!({"providers": {"mock": {"baseUrl": base, "api": "openai-completions",
            "apiKey": "MOCK_API_KEY",
            "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
            "models": [{"id": "mock-model", "contextWindow": 128000, "maxTokens": 4096}]}}})
        .to_string(),
    )
    .unwrap();
    let out = agentd_tests::peers::command("pi", &home)
        .args([
            "-p",
            "--provider",
            "mock",
            "--model",
            "mock-model",
            "--tools",
            "bash",
        ])
        .arg("Summarise notes.txt for me.")
        .current_dir(&ws)
        .env("PI_CODING_AGENT_DIR", &agent)
        .env("PI_OFFLINE", "1")
        .env("MOCK_API_KEY", "sk-x")
        .output()
        .expect("run pi");
    assert!(
        out.status.success(),
        "pi failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = mock.join().unwrap();
    assert!(
        seen.iter()
            .filter(|r| r.contains("/chat/completions"))
            .count()
            == 2,
        "{seen:?}"
    );

    let mut cmd = d.agentctl_cmd();
    cmd.env("HOME", &home)
        .env("PI_CODING_AGENT_DIR", &agent)
        .args(["--json", "import", "--discover", "--agent", "pi"]);
    let out = Output::from_std(cmd.output().expect("run agentctl"));
    out.assert_code(0);
    let v = out.json().clone();
    let rows = v["sources"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["status"], "imported", "{v}");
    let sid = rows[0]["session_id"].as_str().unwrap();
    let evs = events(&d, sid);
    let n = type_counts(&evs);
    assert_eq!(n["user_message"], 1, "{n:?}");
    assert_eq!(n["tool_call"], 1, "{n:?}");
    assert_eq!(n["tool_result"], 1, "{n:?}");
    assert_eq!(n["assistant_message"], 2, "{n:?}");
    let result = evs.iter().find(|e| e["type"] == "tool_result").unwrap();
    assert!(
        result["data"]["output"]
            .as_str()
            .unwrap()
            .contains("Zürich 5"),
        "{result}"
    );
    assert_eq!(
        evs[0]["data"]["workspace"],
        ws.canonicalize().unwrap().display().to_string()
    );
    assert_replay_paired(&d.agentctl_ok(&["context", sid]));
}
