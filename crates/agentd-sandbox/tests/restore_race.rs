//! The degraded level's restore of protected paths, raced: while the daemon puts back
//! `.git/config` and `.git/hooks`, another process (a second session's command on the
//! same workspace) swaps `.git` with a symlink to a directory outside, hundreds of
//! thousands of times with `renameat2(RENAME_EXCHANGE)`. The directory outside stands for
//! `~/.config/git`: whatever the race, it is never read, written or emptied.

#![cfg(target_os = "linux")]

use agentd_fsat::swap::Swapper;
use agentd_sandbox::linux::restore::Snapshot;
use std::path::Path;

fn outside_listing(out: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_else(|_| "<dir>".into());
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_git_dir_swapped_for_a_symlink_during_the_restore_never_redirects_it() {
    // Both strategies on this kernel: `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
    // then the `O_NOFOLLOW` component walk used where the kernel lacks it.
    for walk in [false, true] {
        agentd_fsat::force_component_walk(walk);
        race(walk);
    }
    agentd_fsat::force_component_walk(false);
}

fn race(walk: bool) {
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = base.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let out = base.join("outside-git");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("config"), "OUTSIDE-ORIGINAL").unwrap();
    std::fs::write(out.join("keep"), "OUTSIDE-KEEP").unwrap();
    let git = ws.join(".git");
    let alt = ws.join("alt");
    std::os::unix::fs::symlink(&out, &alt).unwrap();
    let protected = [git.join("config"), git.join("hooks")];
    let roots = [ws.clone()];
    let expected = outside_listing(&out);

    let mut flips = 0u64;
    let mut restores = 0u64;
    let mut redirected = 0u64;
    let mut restored = 0u64;
    for _ in 0..500 {
        // Set up with `.git` the directory (the swapper leaves it so): the original,
        // then the command's writes.
        std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
        let _ = std::fs::remove_file(git.join("hooks/pre-commit"));
        let snap = Snapshot::take(&protected, &roots);
        std::fs::write(git.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
        let flipper = Swapper::start(&git, &alt);
        let report = snap.restore();
        flips += flipper.stop();
        restores += 1;
        if report.iter().any(|(_, w)| w.contains("not restored")) {
            redirected += 1;
        }
        if report
            .iter()
            .any(|(_, w)| w == "changed by the command; restored")
        {
            restored += 1;
        }
        let now = outside_listing(&out);
        assert_eq!(
            now, expected,
            "after {restores} restores and {flips} swaps: {report:?}"
        );
    }
    assert!(flips > 0, "the race never ran");
    eprintln!(
        "component walk {walk}: {restores} restores, {flips} swaps, {redirected} refused on \
         a replaced path, {restored} restored"
    );
    // The race did not merely make every restore fail: with `.git` in place, they work.
    assert!(
        restored > 0,
        "no restore succeeded in {restores} rounds (walk {walk})"
    );
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    let _ = std::fs::remove_file(git.join("hooks/pre-commit"));
    let snap = Snapshot::take(&protected, &roots);
    std::fs::write(git.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
    std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
    let report = snap.restore();
    assert_eq!(report.len(), 2, "{report:?}");
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert!(!git.join("hooks/pre-commit").exists(), "{report:?}");
}

/// A command (degraded: `.git/hooks` is writable) plants a hook next to a directory
/// nested deeper than the restore removes: the restore may fail to remove the deep
/// directory, but it never leaves the hook behind, whatever order the directory lists
/// its entries in.
#[test]
fn a_hook_planted_next_to_a_directory_too_deep_to_remove_is_still_removed() {
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = base.path().canonicalize().unwrap().join("ws");
    let hooks = ws.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("pre-commit.sample"), "#!/bin/sh\n").unwrap();
    let protected = [hooks.clone()];
    let roots = [ws.clone()];
    let snap = Snapshot::take(&protected, &roots);
    // Planted: deep directories whose names sort before and after the hooks, and the
    // hooks themselves (readdir order is the file system's, so both sides are covered).
    for top in ["aaa", "zzz"] {
        let mut deep = hooks.join(top);
        for _ in 0..80 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
    }
    for h in ["pre-commit", "post-checkout", "a-hook", "z-hook"] {
        std::fs::write(hooks.join(h), "#!/bin/sh\necho planted\n").unwrap();
    }
    let report = snap.restore();
    for h in ["pre-commit", "post-checkout", "a-hook", "z-hook"] {
        assert!(
            !hooks.join(h).exists(),
            "the planted hook {h} survived the restore: {report:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit.sample")).unwrap(),
        "#!/bin/sh\n"
    );
    assert!(!report.is_empty(), "the change was not reported");
}
