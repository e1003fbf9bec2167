//! A snapshot's reads against a racing command (docs/snapshots.md#how-a-snapshot-reads):
//! while the daemon scans the workspace, a thread (a command of the session) swaps a
//! workspace directory with a symlink to a directory outside, thousands of times with
//! `renameat2(RENAME_EXCHANGE)`. The directory outside stands for `~/.ssh` or
//! `~/.config/git`: whatever the interleaving, no snapshot holds a byte of it, so no
//! revert can ever write it into the workspace. Every scope is raced: the full scan, the
//! watched rescan after a shell command, and a file tool's own paths; under both open
//! strategies (`openat2` and the `O_NOFOLLOW` component walk).

#![cfg(target_os = "linux")]

use agentd_fsat::swap::Swapper;
use agentd_snapshot::{Scope, Shadow, SnapshotConfig};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const SECRET: &str = "OUTSIDE SECRET, never in a snapshot";
const MIN_FLIPS: u64 = 5_000;
const MIN_ROUNDS: u64 = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_mid_scan_never_brings_outside_bytes_into_a_snapshot() {
    for walk in [false, true] {
        agentd_snapshot::force_component_walk(walk);
        race(walk).await;
    }
    agentd_snapshot::force_component_walk(false);
}

async fn race(walk: bool) {
    // Outside `/tmp` like a user's home; the shadow repository lives next to it.
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = base.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let outside = base.join("outside");
    std::fs::create_dir_all(ws.join("d/sub")).unwrap();
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    // The same names outside as inside: whichever the scan reads, it finds one.
    for dir in [&outside, &outside.join("sub")] {
        std::fs::write(dir.join("secret.txt"), SECRET).unwrap();
        std::fs::write(dir.join("only-outside.txt"), SECRET).unwrap();
    }
    std::fs::write(ws.join("d/sub/secret.txt"), "INSIDE 0").unwrap();
    let inside = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(ws.join("d/secret.txt"))
        .unwrap();
    inside.write_all_at(b"INSIDE 0", 0).unwrap();
    let alt = ws.join("alt");
    std::os::unix::fs::symlink(&outside, &alt).unwrap();
    let cfg = SnapshotConfig::default();
    let sh = Shadow::new(&base.join("home"), &ws, &cfg);
    sh.snapshot(Scope::All, None).await.unwrap();

    // `d` and the symlink trade places until stopped; `d` is the directory again after.
    let flipper = Swapper::start(&ws.join("d"), &alt);
    let paths: Vec<String> = [
        "d/secret.txt",
        "d/only-outside.txt",
        "d/sub/secret.txt",
        "d/sub/only-outside.txt",
        "alt/secret.txt",
        "alt/only-outside.txt",
    ]
    .map(String::from)
    .to_vec();
    let (mut rounds, mut inside_seen) = (0u64, 0u64);
    while rounds < MIN_ROUNDS || flipper.flips() < MIN_FLIPS {
        rounds += 1;
        // A change through the file's own descriptor (never through the racing path):
        // the file is re-read by every scope.
        let text = format!("INSIDE {rounds}");
        inside.set_len(0).unwrap();
        inside.write_all_at(text.as_bytes(), 0).unwrap();
        let scope = match rounds % 3 {
            0 => Scope::All,
            1 => Scope::Changed,
            _ => Scope::Paths(
                ["d/secret.txt", "d/sub/secret.txt", "d/only-outside.txt"]
                    .map(PathBuf::from)
                    .to_vec(),
            ),
        };
        let snap = match sh.snapshot(scope, None).await {
            Ok(s) => s,
            Err(e) => panic!("round {rounds}: {}", e.error),
        };
        for op in sh.restore_plan(&snap.tree, &paths).await.unwrap() {
            if let agentd_snapshot::RestoreOp::File { path, bytes, .. } = op {
                let text = String::from_utf8_lossy(&bytes);
                assert!(
                    !text.contains("OUTSIDE"),
                    "round {rounds} (component walk: {walk}): the snapshot holds {path} \
                     from outside the workspace: {text:?}"
                );
                if path == "d/secret.txt" && text.starts_with("INSIDE") {
                    inside_seen += 1;
                }
            }
        }
    }
    flipper.stop();
    // The race did not merely make every read fail: with `d` a directory, the scans
    // record it.
    assert!(
        inside_seen > 0,
        "no snapshot held d/secret.txt in {rounds} rounds"
    );
    let snap = sh.snapshot(Scope::All, None).await.unwrap();
    let plan = sh.restore_plan(&snap.tree, &paths).await.unwrap();
    let got: Vec<(String, String)> = plan
        .into_iter()
        .filter_map(|op| match op {
            agentd_snapshot::RestoreOp::File { path, bytes, .. } => {
                Some((path, String::from_utf8_lossy(&bytes).into_owned()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("d/secret.txt".to_string(), format!("INSIDE {rounds}")),
            ("d/sub/secret.txt".to_string(), "INSIDE 0".to_string()),
        ]
    );
}
