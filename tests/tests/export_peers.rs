//! `agentctl export --format claude-code|codex|pi`: a session imported from a peer and
//! continued in agentd is written back in the peer's own format, where the peer looks
//! for it (`--install --home`), with a new session id and the peer's own ids for what came
//! from it. An independent reader of the peer's format (`agentd_tests::conv`) finds the
//! whole conversation in the file, and importing the file back gives the same
//! conversation (a fixed point from the first export on).

use agentd_tests::conv::{self, Conv};
use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn daemon() -> Daemon {
    Daemon::builder().env("AGENTD_DURABILITY", "none").start()
}

fn peer(rel: &str) -> PathBuf {
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

struct Case {
    rel: &'static str,
    format: &'static str,
    /// The peer's own session id in the fixture.
    source_id: &'static str,
    read: fn(&Path) -> Conv,
    /// What agentd's `list_dir` becomes in this peer.
    list_dir: &'static str,
    /// Where the peer keeps sessions under a home (before the per-session part).
    dir: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        rel: "claude-code-2.1.332/ab1d27b0-bb39-4b22-8cd2-55b8f42c5cfe.jsonl",
        format: "claude-code",
        source_id: "ab1d27b0-bb39-4b22-8cd2-55b8f42c5cfe",
        read: conv::claude,
        list_dir: "agentd_list_dir",
        dir: ".claude/projects/",
    },
    Case {
        rel: "codex-0.171.0/rollout-2026-11-27T04-30-53-01a21b45-43d1-7862-b944-095933ffc093.jsonl",
        format: "codex",
        source_id: "01a21b45-43d1-7862-b944-095933ffc093",
        read: conv::codex,
        list_dir: "agentd_list_dir",
        dir: ".codex/sessions/",
    },
    Case {
        rel: "pi-1.6.0/2026-11-27T04-30-56-729Z_01a21b45-4ed9-72e7-a38a-cf29c5a921da.jsonl",
        format: "pi",
        source_id: "01a21b45-4ed9-72e7-a38a-cf29c5a921da",
        read: conv::pi,
        list_dir: "ls",
        dir: ".pi/agent/sessions/",
    },
];

/// The Log's conversation with agentd's own tool calls named as the peer names them.
fn as_peer(mut c: Conv, list_dir: &str) -> Conv {
    for call in &mut c.calls {
        if call.1 == "list_dir" {
            call.1 = list_dir.to_string();
            if list_dir == "ls" {
                call.2 = json!({"path": call.2["path"]});
            }
        }
    }
    c
}

#[test]
fn an_imported_session_continued_in_agentd_exports_back_and_reimports_the_same() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let home = tempfile::tempdir().unwrap();
    let home_s = home.path().to_str().unwrap();
    let model = script_model();
    for c in &CASES {
        let what = c.format;
        let src = peer(c.rel);
        let r = d.agentctl_ok(&["import", src.to_str().unwrap(), "--workspace", &ws]);
        let sid = r["session_id"].as_str().unwrap().to_string();
        let t = d.agentctl_ok(&["turn", &sid, "What is here?", "--model", &model]);
        assert_eq!(t["status"], "completed", "{what}: {t}");
        let log = Conv::from_log(&events(&d, &sid));
        assert_eq!(log.prompts.last().unwrap(), "What is here?");

        let x = d.agentctl_ok(&[
            "export",
            &sid,
            "--format",
            c.format,
            "--install",
            "--home",
            home_s,
        ]);
        let path = PathBuf::from(x["path"].as_str().unwrap());
        let id = x["resume_id"].as_str().unwrap();
        assert_ne!(id, c.source_id, "{what}: a new session id");
        assert!(
            path.starts_with(home.path().join(c.dir)),
            "{what}: {} is not under {}",
            path.display(),
            c.dir
        );
        assert!(
            path.file_name().unwrap().to_str().unwrap().contains(id),
            "{what}"
        );
        assert!(
            x["resume_command"].as_str().unwrap().ends_with(id),
            "{what}: {x}"
        );
        assert!(x["index"].is_string(), "{what}: {x}");

        // The peer's view of the file (an independent reader) is the Log's conversation,
        // the original ids kept.
        let peer_view = (c.read)(&path);
        let want = as_peer(log.clone(), c.list_dir);
        assert_eq!(peer_view.prompts, want.prompts, "{what}: prompts");
        assert_eq!(peer_view.answers, want.answers, "{what}: answers");
        assert_eq!(peer_view.calls, want.calls, "{what}: calls");
        assert_eq!(peer_view.results, want.results, "{what}: results");
        let original = (c.read)(&src);
        assert_eq!(
            &peer_view.call_ids()[..original.calls.len()],
            &original.call_ids()[..],
            "{what}: the peer's own call ids"
        );

        // Importing it back gives the same conversation, and so does a second round.
        let back = d.agentctl_ok(&["import", path.to_str().unwrap(), "--workspace", &ws]);
        assert_eq!(back["warnings"], json!([]), "{what}: {back}");
        let sid2 = back["session_id"].as_str().unwrap().to_string();
        let first = Conv::from_log(&events(&d, &sid2));
        assert_eq!(first, want, "{what}: import(export(x))");
        let x2 = d.agentctl_ok(&[
            "export",
            &sid2,
            "--format",
            c.format,
            "--install",
            "--home",
            home_s,
        ]);
        assert_ne!(
            x2["path"], x["path"],
            "{what}: never over an earlier export"
        );
        let back2 = d.agentctl_ok(&["import", x2["path"].as_str().unwrap(), "--workspace", &ws]);
        let second = Conv::from_log(&events(&d, back2["session_id"].as_str().unwrap()));
        assert_eq!(second, first, "{what}: a fixed point");
    }
}

/// Without --install the export comes back as content or goes to -o; a markdown export
/// still works; a bad format names the choices.
#[test]
fn export_to_a_file_and_the_old_formats_still_work() {
    let d = daemon();
    let ws = d.workspace().canonicalize().unwrap().display().to_string();
    let r = d.agentctl_ok(&[
        "import",
        peer(CASES[2].rel).to_str().unwrap(),
        "--workspace",
        &ws,
    ]);
    let sid = r["session_id"].as_str().unwrap();
    let x = d.agentctl_ok(&["export", sid, "--format", "pi"]);
    let content = x["content"].as_str().unwrap();
    assert!(content.starts_with("{\"type\":\"session\""), "{content}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.jsonl");
    let x = d.agentctl_ok(&[
        "export",
        sid,
        "--format",
        "codex",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(x["path"], out.to_str().unwrap());
    // Codex marks a failed call by its output's exit code line only: a failure without
    // one gets it.
    let mut want = Conv::from_log(&events(&d, sid));
    for (out, ok) in want.results.values_mut() {
        if !*ok && !out.contains("Process exited with code") {
            *out = format!("Process exited with code 1\nOutput:\n{out}");
        }
    }
    assert_eq!(conv::codex(&out), want);
    let md = d.agentctl_ok(&["export", sid, "--format", "markdown"]);
    assert!(md["content"].as_str().unwrap().contains("Résumé"));
    let out = d.agentctl(["--json", "export", sid, "--format", "gemini"]);
    assert_ne!(out.code, Some(0), "{out:?}");
}
