//! Black-box tests of `agentctl import` (docs/log-format.md#session-ids imports, docs/protocol.md#methods `agentd/import`): real
//! pi session files from `daemon/tests/data/import/`, and a Codex rollout and a Pixir Log
//! written here. An import is a new agentd session like any other: it lists, folds to a
//! balanced context, compacts and forks; its source is never modified; a failed import
//! leaves nothing behind.

use agentd_tests::{assert_replay_paired, Daemon, Output};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
}

fn run(d: &Daemon, args: &[&str]) -> Output {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    d.agentctl(all)
}

/// `agentctl --json ARGS`, which must exit 0; returns the JSON document.
#[track_caller]
fn ctl(d: &Daemon, args: &[&str]) -> Value {
    let out = run(d, args);
    out.assert_code(0);
    let v = out.json().clone();
    assert_eq!(v["ok"], true, "{out:?}");
    v
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../daemon/tests/data/import")
        .join(name)
        .canonicalize()
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn file_hash(p: &Path) -> String {
    hex::encode(Sha256::digest(
        std::fs::read(p).unwrap_or_else(|e| panic!("read {p:?}: {e}")),
    ))
}

/// Every file and directory under `root` (relative path → sha256, `dir` for directories).
fn hash_tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &p, out);
            } else {
                out.insert(rel, file_hash(&p));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn session_ids(d: &Daemon) -> BTreeSet<String> {
    ctl(d, &["ls", "--all"])["sessions"]
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

/// Balanced and paired ([`assert_replay_paired`]), with as many outputs as calls.
#[track_caller]
fn assert_pairs(ctx: &Value) {
    assert_replay_paired(ctx);
    assert_eq!(
        ctx["stats"]["function_calls"],
        ctx["stats"]["function_call_outputs"]
    );
}

/// Checks the report's accounting and the new session's first line; returns the id.
#[track_caller]
fn check_import(d: &Daemon, r: &Value, src: &Path, format: &str, workspace: &str) -> String {
    let sid = r["session_id"].as_str().expect("session_id").to_string();
    let text = std::fs::read_to_string(src).unwrap();
    let lines = r["lines"].clone();
    let tally: u64 = ["imported", "metadata", "ui_only", "skipped"]
        .iter()
        .map(|k| {
            lines[k]
                .as_u64()
                .unwrap_or_else(|| panic!("lines.{k}: {r}"))
        })
        .sum();
    assert_eq!(r["source_lines"], text.lines().count(), "{r}");
    assert_eq!(
        tally,
        r["source_lines"].as_u64().unwrap(),
        "buckets: {lines}"
    );
    assert_eq!(r["source_bytes"], text.len(), "{r}");
    assert_eq!(lines["skipped"], r["skipped_total"], "{r}");
    assert!(r["skipped"].as_array().unwrap().len() as u64 <= r["skipped_total"].as_u64().unwrap());
    for s in r["skipped"].as_array().unwrap() {
        assert!(s["line"].as_u64().unwrap() >= 1);
        assert!(!s["reason"].as_str().unwrap().is_empty());
    }
    assert!(lines["imported"].as_u64().unwrap() > 0, "{r}");

    let evs = events(d, &sid);
    assert_eq!(evs.len() as u64, r["imported"].as_u64().unwrap(), "{r}");
    assert_eq!(r["event_count"], r["imported"]);
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["seq"], i as u64);
        assert_eq!(e["session_id"], sid.as_str());
    }
    let first = &evs[0]["data"];
    assert_eq!(evs[0]["type"], "session_started");
    assert_eq!(first["created_by"], "import");
    assert_eq!(first["workspace"], workspace);
    assert_eq!(first["imported_from"]["format"], format);
    assert_eq!(first["imported_from"]["path"], src.display().to_string());
    let show = ctl(d, &["show", &sid]);
    assert_eq!(show["event_count"], r["imported"]);
    assert_eq!(show["corrupt_lines"], json!([]));
    assert_eq!(show["seq_anomalies"], json!([]));
    sid
}

#[test]
fn pi_fixtures_import_fold_compact_and_fork() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    for name in ["before-compaction.jsonl", "large-session.jsonl"] {
        let src = fixture(name);
        let src_hash = file_hash(&src);
        let r = ctl(
            &d,
            &[
                "import",
                "--format",
                "pi",
                src.to_str().unwrap(),
                "--workspace",
                &ws,
            ],
        );
        let sid = check_import(&d, &r, &src, "pi", &ws);
        assert!(r["imported"].as_u64().unwrap() > 100, "{name}: {r}");
        assert!(session_ids(&d).contains(&sid));

        let ctx = ctl(&d, &["context", &sid]);
        assert_pairs(&ctx);
        assert!(
            ctx["stats"]["function_calls"].as_u64().unwrap() > 10,
            "{name}"
        );

        let c = ctl(&d, &["compact", &sid]);
        assert_eq!(c["recorded"], true, "{name}: {c}");
        let to = c["range"]["to_seq"].as_u64().unwrap();
        let after = ctl(&d, &["context", &sid]);
        assert_pairs(&after);
        assert_eq!(after["stats"]["checkpoint_to_seq"], to);
        assert!(
            after["stats"]["estimated_tokens"].as_u64() < ctx["stats"]["estimated_tokens"].as_u64(),
            "{name}: compaction did not shrink the context"
        );

        let mid = r["imported"].as_u64().unwrap() / 2;
        let child = format!("{sid}-fork");
        let f = ctl(
            &d,
            &[
                "fork",
                &sid,
                "--to-seq",
                &mid.to_string(),
                "--child-session-id",
                &child,
            ],
        );
        assert_eq!(f["recorded"], true, "{f}");
        assert_eq!(f["fork_root_session_id"], sid.as_str());
        assert_pairs(&ctl(&d, &["context", &child]));
        assert_eq!(ctl(&d, &["show", &child])["pending_tool_calls"], json!([]));

        assert_eq!(file_hash(&src), src_hash, "{name} was modified");
    }
}

/// Importing the same file twice gives two sessions with the same content; only when
/// agentd imported each differs, in the order it did.
#[test]
fn importing_twice_gives_two_sessions_with_the_same_events() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let src = fixture("large-session.jsonl");
    let args = [
        "import",
        "--format",
        "pi",
        src.to_str().unwrap(),
        "--workspace",
        &ws,
    ];
    let a = ctl(&d, &args);
    let b = ctl(&d, &args);
    assert_ne!(a["session_id"], b["session_id"]);
    let mut at = Vec::new();
    let mut strip = |sid: &Value| -> Vec<(Value, Value)> {
        let mut evs: Vec<(Value, Value)> = events(&d, sid.as_str().unwrap())
            .into_iter()
            .map(|e| (e["type"].clone(), e["data"].clone()))
            .collect();
        let from = evs[0].1["imported_from"].as_object_mut().unwrap();
        at.push(from.remove("imported_at").expect("imported_at"));
        evs
    };
    assert_eq!(strip(&a["session_id"]), strip(&b["session_id"]));
    assert!(at[0].as_str().unwrap() < at[1].as_str().unwrap(), "{at:?}");
}

#[test]
fn failed_imports_leave_no_session() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    // One real session so the list is not trivially empty.
    ctl(&d, &["new", "--workspace", &ws, "--session-id", "keep"]);
    let sessions_dir = d.home().join("sessions");
    let before_files = hash_tree(&sessions_dir);
    let before_ids = session_ids(&d);

    let junk = d.root().join("notes.txt");
    std::fs::write(&junk, "just some notes\nnot a session\n").unwrap();
    let codex = d.root().join("rollout.jsonl");
    std::fs::write(&codex, codex_rollout(&ws)).unwrap();
    let empty = d.root().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let missing = d.root().join("does-not-exist.jsonl");

    let cases: [(&Path, &str, &str); 5] = [
        (&junk, "pi", "invalid_args"),
        (&codex, "pi", "invalid_args"),
        (&empty, "pi", "invalid_args"),
        (&missing, "pi", "not_found"),
        (&fixture("large-session.jsonl"), "codex", "invalid_args"),
    ];
    for (path, format, kind) in cases {
        let hash = path.exists().then(|| file_hash(path));
        let out = run(
            &d,
            &[
                "import",
                "--format",
                format,
                path.to_str().unwrap(),
                "--workspace",
                &ws,
            ],
        );
        out.assert_code(2);
        let j = out.json();
        assert_eq!(j["ok"], false, "{path:?}");
        assert_eq!(j["error"]["kind"], kind, "{path:?} as {format}: {j}");
        assert_eq!(
            hash_tree(&sessions_dir),
            before_files,
            "{path:?} left files"
        );
        assert_eq!(session_ids(&d), before_ids, "{path:?} left a session");
        if let Some(h) = hash {
            assert_eq!(file_hash(path), h);
        }
    }
    // The daemon is fine afterwards.
    let src = fixture("before-compaction.jsonl");
    let r = ctl(
        &d,
        &[
            "import",
            "--format",
            "pi",
            src.to_str().unwrap(),
            "--workspace",
            &ws,
        ],
    );
    assert_eq!(session_ids(&d).len(), before_ids.len() + 1, "{r}");
}

fn codex_rollout(cwd: &str) -> String {
    let lines = [
        json!({"timestamp": "2025-10-01T10:00:00.000Z", "type": "session_meta",
            "payload": {"id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "timestamp": "2025-10-01T10:00:00.000Z",
                "cwd": cwd, "originator": "codex_cli_rs", "cli_version": "0.44.0", "model_provider": "openai"}}),
        json!({"timestamp": "2025-10-01T10:00:01.000Z", "type": "turn_context",
            "payload": {"cwd": cwd, "approval_policy": "on-request", "model": "gpt-5-codex"}}),
        json!({"timestamp": "2025-10-01T10:00:01.100Z", "type": "response_item",
            "payload": {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "hello from codex: list the files"}]}}),
        json!({"timestamp": "2025-10-01T10:00:01.200Z", "type": "event_msg",
            "payload": {"type": "user_message", "message": "hello from codex: list the files"}}),
        json!({"timestamp": "2025-10-01T10:00:02.000Z", "type": "response_item",
            "payload": {"type": "function_call", "name": "shell",
                "arguments": "{\"command\":[\"ls\"]}", "call_id": "call_ls"}}),
        json!({"timestamp": "2025-10-01T10:00:02.500Z", "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_ls",
                "output": "{\"output\":\"a.txt\\nb.txt\\n\",\"metadata\":{\"exit_code\":0}}"}}),
        json!({"timestamp": "2025-10-01T10:00:03.000Z", "type": "event_msg",
            "payload": {"type": "token_count", "info": null}}),
        json!({"timestamp": "2025-10-01T10:00:03.100Z", "type": "response_item",
            "payload": {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "There are two files."}]}}),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn pixir_log(workspace: &str) -> String {
    let sid = "pixir-sessão-2026-11-21-ümlaut-and-a-rather-long-identifier";
    let ev = |seq: u64, ty: &str, data: Value| {
        json!({"id": format!("{:016x}", 0xabc0 + seq), "session_id": sid, "seq": seq,
            "ts": format!("2026-11-21T10:00:0{seq}.000000Z"), "type": ty, "data": data})
    };
    let lines = [
        ev(
            0,
            "subagent_event",
            json!({"event": "permission_posture", "workspace": workspace, "mode": "auto"}),
        ),
        ev(1, "user_message", json!({"text": "hello from pixir"})),
        ev(
            2,
            "tool_call",
            json!({"call_id": "p1", "name": "read_file", "args": {"path": "a.txt"}}),
        ),
        ev(
            3,
            "tool_result",
            json!({"call_id": "p1", "ok": true, "output": "alpha"}),
        ),
        ev(4, "assistant_message", json!({"text": "a.txt says alpha"})),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn codex_rollout_and_pixir_log_import_and_list() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let codex = d.root().join("rollout-2025-10-01T10-00-00.jsonl");
    std::fs::write(&codex, codex_rollout(&ws)).unwrap();
    let pixir = d.root().join("pixir.ndjson");
    std::fs::write(&pixir, pixir_log(&ws)).unwrap();
    let (codex_hash, pixir_hash) = (file_hash(&codex), file_hash(&pixir));

    let rc = ctl(
        &d,
        &["import", "--format", "codex", codex.to_str().unwrap()],
    );
    let c = check_import(&d, &rc, &codex, "codex", &ws);
    assert_eq!(rc["lines"]["ui_only"], 2, "{rc}");
    assert_eq!(rc["lines"]["metadata"], 2, "{rc}");
    let evs = events(&d, &c);
    assert_eq!(
        evs[0]["data"]["imported_from"]["session_id"],
        "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    );
    let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session_started",
            "user_message",
            "tool_call",
            "tool_result",
            "assistant_message"
        ]
    );
    assert_eq!(evs[2]["data"]["args"], json!({"command": ["ls"]}));
    // Source times keep their instant, in the envelope's microsecond form.
    assert_eq!(evs[2]["ts"], "2025-10-01T10:00:02.000000Z");

    let rp = ctl(
        &d,
        &["import", "--format", "pixir", pixir.to_str().unwrap()],
    );
    let p = check_import(&d, &rp, &pixir, "pixir", &ws);
    assert_eq!(rp["imported"], 6, "{rp}");
    let pe = events(&d, &p);
    assert_eq!(
        pe[0]["data"]["imported_from"]["session_id"],
        "pixir-sessão-2026-11-21-ümlaut-and-a-rather-long-identifier"
    );
    assert_ne!(
        p,
        pe[0]["data"]["imported_from"]["session_id"]
            .as_str()
            .unwrap()
    );
    assert_eq!(pe[2]["data"]["text"], "hello from pixir");
    assert_eq!(pe[2]["ts"], "2026-11-21T10:00:01.000000Z");

    let ids = session_ids(&d);
    assert!(ids.contains(&c) && ids.contains(&p), "{ids:?}");
    for (sid, text) in [(&c, "hello from codex"), (&p, "hello from pixir")] {
        let ctx = ctl(&d, &["context", sid]);
        assert_pairs(&ctx);
        assert_eq!(ctx["stats"]["function_calls"], 1);
        assert!(ctx["items"].to_string().contains(text));
    }
    // Listed by workspace too, and the tree shows each as a root.
    let in_ws: BTreeSet<String> = ctl(&d, &["ls", "--workspace", &ws])["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    assert!(in_ws.contains(&c) && in_ws.contains(&p));
    assert_eq!(file_hash(&codex), codex_hash);
    assert_eq!(file_hash(&pixir), pixir_hash);
}

/// An imported session is continued by a turn: the offline `script` provider answers,
/// the turn completes, orphan calls the source left open are closed before it starts,
/// and the replay stays balanced.
#[test]
fn a_turn_continues_an_imported_pi_session() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let src = fixture("large-session.jsonl");
    let r = ctl(
        &d,
        &[
            "import",
            "--format",
            "pi",
            src.to_str().unwrap(),
            "--workspace",
            &ws,
        ],
    );
    let sid = r["session_id"].as_str().unwrap().to_string();
    let pending_before = ctl(&d, &["show", &sid])["pending_tool_calls"]
        .as_array()
        .unwrap()
        .len();
    assert!(pending_before > 0, "the fixture leaves orphan calls: {r}");

    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello.json")
        .canonicalize()
        .unwrap();
    let model = format!("script:{}", script.display());
    let t = ctl(
        &d,
        &[
            "turn",
            &sid,
            "Carry on where we left off.",
            "--model",
            &model,
        ],
    );
    assert_eq!(t["status"], "completed", "{t}");

    let evs = events(&d, &sid);
    let closures = evs
        .iter()
        .filter(|e| {
            e["type"] == "tool_result"
                && e["data"]["error"]["details"]["reason"] == "before_start_turn"
        })
        .count();
    assert_eq!(
        closures, pending_before,
        "every orphan closed before the turn"
    );
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "turn_ended");
    assert_eq!(last["data"]["status"], "completed");
    assert_eq!(ctl(&d, &["show", &sid])["pending_tool_calls"], json!([]));
    assert_pairs(&ctl(&d, &["context", &sid]));
}
