//! A revert's writes against a racing attacker (docs/snapshots.md#revert): a thread swaps
//! a workspace directory with a symlink that leads outside, hundreds of thousands of
//! times, while the daemon applies revert plans that write, create and remove files
//! through it. Whatever the interleaving, nothing outside the workspace is created,
//! changed or removed, under both open strategies (`openat2` and the `O_NOFOLLOW`
//! component walk).

use agentd::snapshot::RestoreOp;
use agentd::tools;
use agentd::undo::write::apply;
use agentd_fsat::swap::Swapper;
use std::os::unix::fs::symlink;
use std::path::Path;

const MIN_FLIPS: u64 = 5_000;
const MIN_APPLIES: u64 = 500;

/// What is outside, by name and content.
fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap_or_else(|_| "<dir>".into());
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_revert_never_writes_or_removes_through_a_swapped_symlink() {
    for walk in [false, true] {
        tools::confine::force_component_walk(walk);
        race();
    }
    tools::confine::force_component_walk(false);
}

fn race() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    let work = root.path().canonicalize().unwrap().join("work");
    std::fs::create_dir_all(work.join("d")).unwrap();
    // Decoys outside, named as what the plans write and remove.
    std::fs::write(outside.join("config"), "OUTSIDE CONFIG\n").unwrap();
    std::fs::write(outside.join("gone.txt"), "OUTSIDE, MUST STAY\n").unwrap();
    let before = listing(&outside);
    // `alt` leads outside; swapping it with `d` makes `d/...` point outside.
    symlink(&outside, work.join("alt")).unwrap();

    // `d` and the symlink trade places until stopped; `d` is the directory again after.
    let flipper = Swapper::start(&work.join("d"), &work.join("alt"));
    let ops = vec![
        RestoreOp::File {
            path: "d/config".into(),
            bytes: b"[core]\n\tfsmonitor = /evil\n".to_vec(),
            executable: false,
        },
        RestoreOp::File {
            path: "d/hooks/pre-commit".into(),
            bytes: b"#!/bin/sh\ntouch /tmp/pwned\n".to_vec(),
            executable: true,
        },
        RestoreOp::Symlink {
            path: "d/link".into(),
            target: b"/etc/passwd".to_vec(),
        },
        RestoreOp::Remove {
            path: "d/gone.txt".into(),
        },
    ];
    let (mut applies, mut ok) = (0u64, 0u64);
    while applies < MIN_APPLIES || flipper.flips() < MIN_FLIPS {
        applies += 1;
        for op in &ops {
            if apply(&work, std::slice::from_ref(op), 0o022).is_ok() {
                ok += 1;
            }
        }
        assert_eq!(
            listing(&outside),
            before,
            "a revert changed the directory outside (apply {applies})"
        );
    }
    flipper.stop();
    assert_eq!(listing(&outside), before);
    // The race did not merely make every write fail: with `d` a directory, they go
    // through.
    assert!(ok > 0, "no write succeeded in {applies} rounds");
    apply(&work, &ops, 0o022).unwrap();
    assert_eq!(
        std::fs::read_to_string(work.join("d/config")).unwrap(),
        "[core]\n\tfsmonitor = /evil\n"
    );
    assert_eq!(
        std::fs::read_link(work.join("d/link")).unwrap(),
        Path::new("/etc/passwd")
    );
}
