//! The full level's check of the protected paths (docs/sandbox.md#git): read-only mounts
//! cover them, but the host replacing a path beneath its mount (the user's `git config`
//! renames a new `.git/config` over it) drops the mount in the command's namespace. The
//! paths are pinned before the command, not read; after it, one still the inode pinned
//! is left alone (a change the user made in place stays), and one replaced is put back
//! from the pinned inode, whatever the command wrote into its replacement or into the
//! old directory under its new name.

#![cfg(target_os = "linux")]

use agentd_sandbox::linux::restore::Snapshot;
use std::path::{Path, PathBuf};

fn coarse_now() -> (i64, i64) {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    (t.tv_sec, t.tv_nsec)
}

/// Waits until the coarse clock has passed the ctime of `p`: a snapshot taken after that
/// knows `p` as older than itself.
fn past_ctime(p: &Path) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    let c = (m.ctime(), m.ctime_nsec());
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while coarse_now() <= c {
        assert!(
            std::time::Instant::now() < end,
            "the coarse clock never moved"
        );
        std::thread::yield_now();
    }
}

fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let t = std::fs::read_to_string(e.path()).unwrap_or_else(|_| "<dir>".into());
            (e.file_name().to_string_lossy().into_owned(), t)
        })
        .collect();
    v.sort();
    v
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = t.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    std::fs::write(ws.join(".git/hooks/keep.sample"), "SAMPLE").unwrap();
    std::fs::write(ws.join(".git/hooks/touched.sample"), "SAMPLE 2").unwrap();
    past_ctime(&ws.join(".git/hooks/touched.sample"));
    (t, ws)
}

#[test]
fn a_config_replaced_on_the_host_is_put_back_from_the_pinned_inode() {
    let (_t, ws) = setup();
    let git = ws.join(".git");
    let protected = [git.join("config"), git.join("hooks")];
    let snap = Snapshot::take_pinned(&protected, std::slice::from_ref(&ws));
    // The user's git config: a new file renamed over the old one.
    std::fs::write(git.join("config.lock"), "[user]\n\tname = Host\n").unwrap();
    std::fs::rename(git.join("config.lock"), git.join("config")).unwrap();
    // The command, its mount gone, writes into the replacement.
    let mut c = std::fs::read_to_string(git.join("config")).unwrap();
    c.push_str("[core]\n\tfsmonitor = /evil\n");
    std::fs::write(git.join("config"), c).unwrap();
    let back = snap.restore();
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0].0, git.join("config"));
    assert!(back[0].1.contains("restored"), "{back:?}");
    // The hooks directory was never replaced: nothing to say about it.
    assert_eq!(
        listing(&git.join("hooks")),
        vec![
            ("keep.sample".into(), "SAMPLE".into()),
            ("touched.sample".into(), "SAMPLE 2".into())
        ]
    );
}

#[test]
fn a_path_still_the_pinned_inode_is_left_alone_with_the_users_change_in_place() {
    let (_t, ws) = setup();
    let git = ws.join(".git");
    let protected = [git.join("config"), git.join("hooks")];
    let snap = Snapshot::take_pinned(&protected, std::slice::from_ref(&ws));
    // Written in place on the host (the same inode: no mount dropped).
    std::fs::write(git.join("config"), "[user]\n\tname = In Place\n").unwrap();
    std::fs::write(git.join("hooks/new-by-user"), "USER").unwrap();
    assert!(snap.restore().is_empty());
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[user]\n\tname = In Place\n"
    );
    assert!(git.join("hooks/new-by-user").exists());
}

#[test]
fn a_hooks_directory_replaced_on_the_host_is_put_back_without_what_changed_since() {
    let (_t, ws) = setup();
    let git = ws.join(".git");
    let protected = [git.join("config"), git.join("hooks")];
    let snap = Snapshot::take_pinned(&protected, std::slice::from_ref(&ws));
    // The host moves the hooks away and makes a new directory: the mount is gone.
    std::fs::rename(git.join("hooks"), git.join("hooks.old")).unwrap();
    std::fs::create_dir(git.join("hooks")).unwrap();
    // The command plants a hook in the new one and edits the old one under its new name.
    std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nEVIL\n").unwrap();
    std::fs::write(git.join("hooks.old/touched.sample"), "EVIL 2").unwrap();
    std::fs::write(git.join("hooks.old/post-checkout"), "EVIL 3").unwrap();
    let back = snap.restore();
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!(back[0].0, git.join("hooks"));
    // Only what was there before and is unchanged since comes back.
    assert_eq!(
        listing(&git.join("hooks")),
        vec![("keep.sample".into(), "SAMPLE".into())]
    );
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
}

/// Past the descriptors one snapshot may hold, paths are saved by content: a workspace
/// with more protected files than that still has every replaced one put back.
#[test]
fn more_protected_files_than_descriptors_held_are_all_put_back() {
    let (_t, ws) = setup();
    let files: Vec<PathBuf> = (0..100)
        .map(|i| {
            let p = ws.join(format!("inc{i:03}.gitconfig"));
            std::fs::write(&p, format!("[user]\n\tname = n{i}\n")).unwrap();
            p
        })
        .collect();
    let snap = Snapshot::take_pinned(&files, std::slice::from_ref(&ws));
    for (i, p) in files.iter().enumerate() {
        let lock = p.with_extension("lock");
        std::fs::write(&lock, format!("[core]\n\tfsmonitor = /evil{i}\n")).unwrap();
        std::fs::rename(&lock, p).unwrap();
    }
    let back = snap.restore();
    assert_eq!(back.len(), files.len(), "{back:?}");
    for (i, p) in files.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(p).unwrap(),
            format!("[user]\n\tname = n{i}\n"),
            "{p:?}"
        );
    }
}
