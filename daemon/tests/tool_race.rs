//! Workspace confinement against a racing attacker (TOCTOU): a thread swaps a workspace
//! directory with a symlink that leads outside, thousands of times, while `read_file`,
//! `write_file` and `edit_file` run on paths through it. Whatever the interleaving, no
//! tool may read, create or change a file outside the workspace.

use agentd::tools::{self, ToolContext};
use agentd_fsat::swap::Swapper;
use serde_json::json;
use std::os::unix::fs::symlink;

/// Flips at least this many times while the tools run.
const MIN_FLIPS: u64 = 5_000;
/// Tool calls of each kind, at least.
const MIN_CALLS: u64 = 1_000;

/// The open strategy is one switch for the whole process: each test holds this while it
/// runs under the strategy it set, so the other's switch cannot change it meanwhile.
static STRATEGY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swapped_during_tool_calls_never_escapes() {
    let _one = STRATEGY.lock().await;
    // Both strategies on this kernel: `openat2(RESOLVE_BENEATH)`, then the
    // `O_NOFOLLOW` component walk used where the kernel lacks it.
    for walk in [false, true] {
        tools::confine::force_component_walk(walk);
        race().await;
    }
    tools::confine::force_component_walk(false);
}

async fn race() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(work.join("d")).unwrap();
    std::fs::write(work.join("d/secret.txt"), "inside\n").unwrap();
    std::fs::write(work.join("d/edit.txt"), "old\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "OUTSIDE SECRET\n").unwrap();
    std::fs::write(outside.join("edit.txt"), "old\n").unwrap();
    // `alt` leads outside; swapping it with `d` makes `d/...` point outside.
    symlink(&outside, work.join("alt")).unwrap();
    let ctx = ToolContext::new(&work, root.path().join("resources")).unwrap();

    // `d` and the symlink trade places until stopped; `d` is the directory again after.
    let flipper = Swapper::start(&ctx.workspace.join("d"), &ctx.workspace.join("alt"));

    let (mut calls, mut read_ok, mut write_ok, mut edit_ok) = (0u64, 0u64, 0u64, 0u64);
    while calls < MIN_CALLS || flipper.flips() < MIN_FLIPS {
        calls += 1;
        let r = tools::run("read_file", &json!({"path": "d/secret.txt"}), &ctx).await;
        if r.ok {
            read_ok += 1;
            let text = r.output.unwrap();
            assert_eq!(text, "inside\n", "read_file returned bytes from outside");
        }
        let content = format!("planted {calls}\n");
        let w = tools::run(
            "write_file",
            &json!({"path": "d/planted.txt", "content": content}),
            &ctx,
        )
        .await;
        if w.ok {
            write_ok += 1;
        }
        assert!(
            !outside.join("planted.txt").exists(),
            "write_file created a file outside the workspace (call {calls})"
        );
        let e = tools::run(
            "edit_file",
            &json!({"path": "d/edit.txt", "old": "old", "new": "new"}),
            &ctx,
        )
        .await;
        if e.ok {
            edit_ok += 1;
            // Put it back so the next edit has something to replace.
            let back = tools::run(
                "edit_file",
                &json!({"path": "d/edit.txt", "old": "new", "new": "old"}),
                &ctx,
            )
            .await;
            let _ = back;
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("edit.txt")).unwrap(),
            "old\n",
            "edit_file changed a file outside the workspace (call {calls})"
        );
        // Any stray temp file outside means a write began there.
        let stray: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "secret.txt" && n != "edit.txt")
            .collect();
        assert!(stray.is_empty(), "files appeared outside: {stray:?}");
    }
    let flips = flipper.stop();
    eprintln!(
        "{}: {flips} flips, {calls} rounds: read ok {read_ok}, write ok {write_ok}, edit ok {edit_ok}",
        tools::confine::strategy()
    );
    // The race was real: some calls went through while the directory was in place.
    assert!(read_ok > 0 && write_ok > 0, "no call ever succeeded");
}

/// `search` and `list_dir` walk directories: a directory swapped for a symlink to an
/// outside one between the walk's listing and its reads must not make them list or
/// search it. Outside holds a secret and a name found nowhere inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swapped_during_search_and_list_dir_never_shows_outside() {
    let _one = STRATEGY.lock().await;
    for walk in [false, true] {
        tools::confine::force_component_walk(walk);
        race_walks().await;
    }
    tools::confine::force_component_walk(false);
}

async fn race_walks() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(work.join("d/sub")).unwrap();
    std::fs::write(work.join("d/secret.txt"), "inside MARK\n").unwrap();
    std::fs::write(work.join("d/sub/secret.txt"), "inside MARK\n").unwrap();
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    for dir in [outside.clone(), outside.join("sub")] {
        std::fs::write(dir.join("secret.txt"), "OUTSIDE SECRET MARK\n").unwrap();
        std::fs::write(dir.join("only-outside.txt"), "OUTSIDE SECRET MARK\n").unwrap();
    }
    symlink(&outside, work.join("alt")).unwrap();
    let ctx = ToolContext::new(&work, root.path().join("resources")).unwrap();

    // `d` and the symlink trade places until stopped; `d` is the directory again after.
    let flipper = Swapper::start(&ctx.workspace.join("d"), &ctx.workspace.join("alt"));
    let (mut calls, mut found, mut listed) = (0u64, 0u64, 0u64);
    while calls < MIN_CALLS || flipper.flips() < MIN_FLIPS {
        calls += 1;
        for path in [".", "d", "alt"] {
            let r = tools::run("search", &json!({"pattern": "MARK", "path": path}), &ctx).await;
            if r.ok {
                let text = r.output.unwrap_or_default();
                assert!(
                    !text.contains("OUTSIDE") && !text.contains("only-outside"),
                    "search of {path} showed outside the workspace (call {calls}): {text}"
                );
                if text.contains("inside MARK") {
                    found += 1;
                }
            }
            let r = tools::run("list_dir", &json!({"path": path, "depth": 3}), &ctx).await;
            if r.ok {
                let text = r.output.unwrap_or_default();
                assert!(
                    !text.contains("only-outside"),
                    "list_dir of {path} listed outside the workspace (call {calls}): {text}"
                );
                if text.contains("secret.txt") {
                    listed += 1;
                }
            }
        }
    }
    let flips = flipper.stop();
    eprintln!(
        "{}: {flips} flips, {calls} rounds: search found {found}, list_dir listed {listed}",
        tools::confine::strategy()
    );
    assert!(found > 0 && listed > 0, "no call ever succeeded");
}

/// A directory swapped for a symlink that stays *inside* the workspace but leads into a
/// path the file tools refuse (`.git/hooks`, which git runs outside the sandbox; a hidden
/// directory): `resolve` judged the path through the plain directory, so a write or a
/// read through it must not follow the symlink in its place. Whatever the interleaving,
/// no hook is planted and the hidden file is never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swapped_to_a_protected_or_hidden_directory_inside_is_never_followed() {
    let _one = STRATEGY.lock().await;
    for walk in [false, true] {
        tools::confine::force_component_walk(walk);
        race_inside().await;
    }
    tools::confine::force_component_walk(false);
}

async fn race_inside() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(work.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(work.join("d")).unwrap();
    std::fs::create_dir_all(work.join("private")).unwrap();
    std::fs::write(work.join("d/notes.txt"), "inside\n").unwrap();
    std::fs::write(work.join("private/notes.txt"), "HIDDEN SECRET\n").unwrap();
    // Relative targets: both stay beneath the workspace.
    symlink(".git/hooks", work.join("to-hooks")).unwrap();
    symlink("private", work.join("to-private")).unwrap();
    let mut ctx = ToolContext::new(&work, root.path().join("resources")).unwrap();
    ctx.paths.hidden = vec![ctx.workspace.join("private")];
    let hook = ctx.workspace.join(".git/hooks/pre-commit");

    let (mut calls, mut write_ok, mut read_ok) = (0u64, 0u64, 0u64);
    let flipper = Swapper::start(&ctx.workspace.join("d"), &ctx.workspace.join("to-hooks"));
    while calls < MIN_CALLS || flipper.flips() < MIN_FLIPS {
        calls += 1;
        let w = tools::run(
            "write_file",
            &json!({"path": "d/pre-commit", "content": "#!/bin/sh\necho planted\n"}),
            &ctx,
        )
        .await;
        if w.ok {
            write_ok += 1;
        }
        assert!(
            !hook.exists(),
            "{}: write_file planted a git hook through a symlink inside the workspace \
             (call {calls})",
            tools::confine::strategy()
        );
    }
    flipper.stop();
    let flipper = Swapper::start(&ctx.workspace.join("d"), &ctx.workspace.join("to-private"));
    let mut reads = 0u64;
    while reads < MIN_CALLS || flipper.flips() < MIN_FLIPS {
        reads += 1;
        let r = tools::run("read_file", &json!({"path": "d/notes.txt"}), &ctx).await;
        if r.ok {
            read_ok += 1;
            assert_eq!(
                r.output.unwrap(),
                "inside\n",
                "{}: read_file returned a hidden file through a symlink inside the \
                 workspace (call {reads})",
                tools::confine::strategy()
            );
        }
    }
    flipper.stop();
    eprintln!(
        "{}: {calls} writes ({write_ok} ok), {reads} reads ({read_ok} ok)",
        tools::confine::strategy()
    );
    assert!(write_ok > 0 && read_ok > 0, "no call ever succeeded");
}
