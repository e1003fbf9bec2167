//! Imports lose nothing: every session in `daemon/tests/data/import/peers/` is read by an
//! independent reader (`agentd_tests::conv`, no importer code) and its prompts, answers,
//! tool calls (id, name, arguments) and results (text, ok) are compared with the Log the
//! import wrote, item by item. An import is `ok` only with nothing lost or with each loss
//! in `warnings` (printed by `agentctl import`); `--strict` refuses one with warnings. A
//! source folder is never written: read-only, as root too, its files stay byte-identical
//! and no file appears beside them (an opencode WAL database included).

use agentd_tests::conv::{self, Conv};
use agentd_tests::Daemon;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
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

fn events(d: &Daemon, sid: &str) -> Vec<Value> {
    let r = d
        .connect()
        .call_ok("agentd/events", json!({"session_id": sid, "limit": 100000}));
    r["events"].as_array().unwrap().clone()
}

pub const CLAUDE_NEW: &str = "claude-code-2.1.332/ab1d27b0-bb39-4b22-8cd2-55b8f42c5cfe.jsonl";
const CLAUDE_OLD: &str = "claude-code-2.1.328/a311af5e-f088-43d4-b477-089084198b8c.jsonl";
const CODEX_NEW: &str =
    "codex-0.171.0/rollout-2026-11-27T04-30-53-01a21b45-43d1-7862-b944-095933ffc093.jsonl";
const CODEX_OLD: &str =
    "codex-0.169.0/rollout-2026-11-25T06-19-04-01a2115b-946a-70e3-ad4d-346112905e8a.jsonl";
const PI_NEW: &str = "pi-1.6.0/2026-11-27T04-30-56-729Z_01a21b45-4ed9-72e7-a38a-cf29c5a921da.jsonl";
const PI_RETRY: &str =
    "pi-1.6.0-retry/2026-11-27T04-31-05-503Z_01a21b45-711e-727c-8ad6-6b9efd52394e.jsonl";
const PI_OLD: &str =
    "pi-0.73.1/2026-11-25T06-19-06-682Z_01a2115b-9e39-7693-a196-1c410d4cf0c7.jsonl";
const GEMINI_RESUME: &str = "gemini-cli-0.61.0-resume/session-2026-11-27T04-30-a9eecb5b.jsonl";
const GEMINI_OLD: &str = "gemini-cli-0.61.0/session-2026-11-25T06-19-260a32a2.jsonl";
const OPENCODE_DB: &str = "opencode-1.18.33/opencode.db";
const OPENCODE_EXPORT: &str = "opencode-1.18.33/export.json";
const OPENCODE_SESSION: &str = "ses_deea49f23ffeLHdDAjDaINfYT0";

/// Imports `rel` (without `--session` or `--workspace`: the source says which) and
/// returns the report and the Log's conversation.
fn import(d: &Daemon, rel: &str) -> (Value, Conv) {
    let r = d.agentctl_ok(&["import", peer(rel).to_str().unwrap()]);
    let sid = r["session_id"].as_str().unwrap();
    (r.clone(), Conv::from_log(&events(d, sid)))
}

#[track_caller]
fn assert_same(what: &str, source: &Conv, log: &Conv) {
    assert_eq!(log.prompts, source.prompts, "{what}: prompts");
    assert_eq!(log.answers, source.answers, "{what}: answers");
    assert_eq!(log.calls, source.calls, "{what}: calls (id, name, args)");
    assert_eq!(log.results, source.results, "{what}: results (text, ok)");
}

/// An independent reader of one format.
type Reader = fn(&Path) -> Conv;

/// Every peer, newest and previous release: the Log holds the source's conversation,
/// byte for byte, and the import has no warning.
#[test]
fn every_peer_session_imports_its_whole_conversation() {
    let d = daemon();
    let cases: [(&str, Reader); 9] = [
        (CLAUDE_NEW, conv::claude),
        (CLAUDE_OLD, conv::claude),
        (CODEX_NEW, conv::codex),
        (CODEX_OLD, conv::codex),
        (PI_NEW, conv::pi),
        (PI_RETRY, conv::pi),
        (PI_OLD, conv::pi),
        (GEMINI_RESUME, conv::gemini),
        (GEMINI_OLD, conv::gemini),
    ];
    for (rel, read) in cases {
        let source = read(&peer(rel));
        assert!(
            source.calls.len() >= 3 && !source.prompts.is_empty(),
            "{rel}: the reader found {source:?}"
        );
        let (r, log) = import(&d, rel);
        assert_same(rel, &source, &log);
        assert_eq!(r["warnings"], json!([]), "{rel}: {r}");
        // Every call has its result: nothing for reconcile to invent.
        for (id, ..) in &source.calls {
            assert!(
                log.results.contains_key(id),
                "{rel}: call {id} has no result"
            );
        }
    }
    for rel in [OPENCODE_DB, OPENCODE_EXPORT] {
        let source = if rel.ends_with(".db") {
            conv::opencode_db(&peer(rel), OPENCODE_SESSION)
        } else {
            conv::opencode_export(&peer(rel))
        };
        let (r, log) = import(&d, rel);
        assert_same(rel, &source, &log);
        assert_eq!(r["warnings"], json!([]), "{rel}: {r}");
    }
}

/// The four bugs the newest releases showed, each named by what a user would see.
#[test]
fn the_newest_releases_specifics() {
    let d = daemon();
    // Claude Code: the parallel pair's two results, each with its own call.
    let (_, log) = import(&d, CLAUDE_NEW);
    assert!(log.results["toolu_r1a"].0.contains("./src/stockcount.py"));
    assert!(log.results["toolu_r1b"].0.contains("TODO"));
    // Gemini CLI after a resume: grep_search gets grep's output, not find's.
    let (_, log) = import(&d, GEMINI_RESUME);
    let grep = log
        .calls
        .iter()
        .find(|c| c.1 == "grep_search")
        .map(|c| c.0.clone())
        .unwrap();
    let out = &log.results[&grep].0;
    assert!(out.contains("Found 2 matches"), "{out}");
    assert!(!out.contains("./data/stock.csv"), "{out}");
    // pi 1.x: the system prompt is skipped with its reason, and the retried attempt's
    // never-run call is a dropped attempt, not an orphan.
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let r = d.agentctl_ok(&[
        "import",
        peer(PI_RETRY).to_str().unwrap(),
        "--workspace",
        &ws,
    ]);
    let log = Conv::from_log(&events(&d, r["session_id"].as_str().unwrap()));
    assert!(!log.call_ids().contains(&"call_e0|fc_call_e0"), "{log:?}");
    let sid = r["session_id"].as_str().unwrap();
    let evs = events(&d, sid);
    let dropped = evs
        .iter()
        .find(|e| e["type"] == "imported_note" && e["data"]["kind"] == "dropped_attempt")
        .expect("the dropped attempt is kept as a note");
    assert_eq!(dropped["data"]["tool_calls"][0]["id"], "call_e0|fc_call_e0");
    assert_eq!(
        dropped["data"]["summary"],
        "Let me start by listing the files — première étape"
    );
    let ctx = d.agentctl_ok(&["context", sid]);
    assert!(
        !ctx.to_string().contains("call_e0"),
        "the dropped attempt is not replayed: {ctx}"
    );
    let reasons: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("pi system prompt")),
        "{reasons:?}"
    );
    assert!(
        !reasons.iter().any(|r| r.contains("unknown")),
        "{reasons:?}"
    );
    // A turn continues it with no reconcile of a call that never ran.
    let t = d.agentctl_ok(&["turn", sid, "Carry on.", "--model", &script_model()]);
    assert_eq!(t["status"], "completed", "{t}");
    assert!(!events(&d, sid)
        .iter()
        .any(|e| e["type"] == "tool_result" && e["data"]["call_id"] == "call_e0|fc_call_e0"));
    // opencode: a one-session database needs no --session.
    let (r, _) = import(&d, OPENCODE_DB);
    assert_eq!(r["source_session_id"], OPENCODE_SESSION);
}

fn script_model() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello.json")
        .canonicalize()
        .unwrap();
    format!("script:{}", script.display())
}

/// A source with a loss: `ok` with the loss in `warnings`, printed by `agentctl import`;
/// `--strict` refuses it with `unsupported` and makes no session.
#[test]
fn losses_are_warned_about_and_strict_refuses_them() {
    let d = daemon();
    let dir = tempfile::tempdir().unwrap();
    // The pi session cut after a call, before its result.
    let text = std::fs::read_to_string(peer(PI_NEW)).unwrap();
    let cut: Vec<&str> = text.lines().take(6).collect();
    assert!(cut[5].contains("toolCall"), "{}", cut[5]);
    let src = dir.path().join("cut.jsonl");
    std::fs::write(&src, cut.join("\n") + "\n").unwrap();
    let path = src.to_str().unwrap();

    let e = {
        let out = d.agentctl(["--json", "import", "--strict", path]);
        out.json()["error"].clone()
    };
    assert_eq!(e["kind"], "unsupported", "{e}");
    assert!(e["message"].as_str().unwrap().contains("no result"), "{e}");
    let listed = d.agentctl_ok(&["ls", "--all"]);
    assert_eq!(listed["sessions"], json!([]), "strict made nothing");

    let r = d.agentctl_ok(&["import", path]);
    let warnings = r["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{r}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("2 tool call(s) have no result"),
        "{r}"
    );
    let out = d.agentctl(["import", path]);
    out.assert_code(0);
    assert!(
        out.stdout.contains("1 warning(s):")
            && out.stdout.contains("2 tool call(s) have no result"),
        "{out:?}"
    );
    // Without loss, --strict imports.
    d.agentctl_ok(&["import", "--strict", peer(PI_RETRY).to_str().unwrap()]);
}

/// sha256 of every file under `dir` by relative path, and the directory entries.
fn listing(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.insert(rel + "/", String::new());
                stack.push(p);
            } else {
                out.insert(rel, hex::encode(Sha256::digest(std::fs::read(&p).unwrap())));
            }
        }
    }
    out
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every format from a read-only folder, with an opencode database in WAL mode (one
/// without a `-wal` file, one whose `-wal` holds committed rows): the import works, reads
/// what the `-wal` holds, and the folder is byte-identical afterwards with no new file
/// (`-wal`, `-shm`, journal). Root ignores the permissions, so the checksum listing is
/// what proves it there.
#[test]
fn a_read_only_source_folder_is_left_byte_identical() {
    let d = daemon();
    let src = tempfile::tempdir().unwrap();
    let root = src.path();
    for rel in [
        CLAUDE_NEW,
        CODEX_NEW,
        PI_RETRY,
        GEMINI_RESUME,
        OPENCODE_EXPORT,
    ] {
        let name = Path::new(rel).file_name().unwrap();
        std::fs::copy(peer(rel), root.join(name)).unwrap();
    }
    // A WAL database with nothing in a `-wal`.
    let clean = root.join("clean");
    std::fs::create_dir(&clean).unwrap();
    std::fs::copy(peer(OPENCODE_DB), clean.join("opencode.db")).unwrap();
    {
        let c = rusqlite::Connection::open(clean.join("opencode.db")).unwrap();
        c.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
    }
    assert!(!clean.join("opencode.db-wal").exists());
    // A WAL database a running opencode holds open, with a committed rename in its `-wal`.
    let live = root.join("live");
    std::fs::create_dir(&live).unwrap();
    std::fs::copy(peer(OPENCODE_DB), live.join("opencode.db")).unwrap();
    let writer = rusqlite::Connection::open(live.join("opencode.db")).unwrap();
    writer
        .execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; \
             UPDATE session SET title = 'only in the wal';",
        )
        .unwrap();
    assert!(
        std::fs::metadata(live.join("opencode.db-wal"))
            .unwrap()
            .len()
            > 0
    );

    let before = listing(root);
    for dir in [root.to_path_buf(), clean.clone(), live.clone()] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                set_mode(&p, 0o444);
            }
        }
        set_mode(&dir, 0o555);
    }

    let mut imported = Vec::new();
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            imported.push(d.agentctl_ok(&["import", p.to_str().unwrap()]));
        }
    }
    assert_eq!(imported.len(), 5);
    for db in [clean.join("opencode.db"), live.join("opencode.db")] {
        let db = db.to_str().unwrap();
        d.agentctl_ok(&["import", db, "--session", OPENCODE_SESSION]);
    }
    let r = d.agentctl_ok(&["import", live.join("opencode.db").to_str().unwrap()]);
    let sid = r["session_id"].as_str().unwrap();
    assert_eq!(events(&d, sid)[0]["data"]["title"], "only in the wal");

    for dir in [root.to_path_buf(), clean.clone(), live.clone()] {
        set_mode(&dir, 0o755);
    }
    assert_eq!(listing(root), before, "the source folder changed");
    // The writer was never held up and can still write.
    writer
        .execute_batch("UPDATE session SET title = 'again';")
        .unwrap();
}
