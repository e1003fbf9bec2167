//! Real git, real files: each test makes a workspace and a home in a temp directory.

use super::*;
use std::fs;

fn cfg() -> SnapshotConfig {
    SnapshotConfig {
        max_file_bytes: 1024,
        max_snapshot_bytes: 4096,
        ..SnapshotConfig::default()
    }
}

fn setup() -> (tempfile::TempDir, PathBuf, Shadow) {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    fs::create_dir(&ws).unwrap();
    let home = t.path().join("home");
    let sh = Shadow::new(&home, &ws, &cfg());
    (t, ws, sh)
}

#[tokio::test]
async fn snapshots_diff_and_restore_round_trip() {
    let (_t, ws, sh) = setup();
    fs::write(ws.join("a.txt"), "one\n").unwrap();
    fs::write(ws.join(".gitignore"), "ignored.txt\n").unwrap();
    fs::write(ws.join("ignored.txt"), "secret\n").unwrap();
    let s1 = sh.snapshot(Scope::All, None).await.unwrap();
    assert!(s1.files_changed.is_empty());
    fs::write(ws.join("a.txt"), "two\n").unwrap();
    fs::create_dir(ws.join("sub")).unwrap();
    fs::write(ws.join("sub/new.txt"), "new\n").unwrap();
    let s2 = sh.snapshot(Scope::All, Some(&s1.tree)).await.unwrap();
    assert_eq!(s2.files_changed, vec!["a.txt", "sub/new.txt"]);
    let same = sh.snapshot(Scope::All, Some(&s2.tree)).await.unwrap();
    assert_eq!(same.tree, s2.tree);
    assert!(same.files_changed.is_empty());

    let d = sh
        .diff(
            &s1.tree,
            &s2.tree,
            &["a.txt".into(), "sub/new.txt".into(), "ignored.txt".into()],
        )
        .await
        .unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(
        (d[0].status, d[0].additions, d[0].deletions),
        ("modified", 1, 1)
    );
    assert!(d[0].diff.contains("-one\n+two\n"), "{}", d[0].diff);
    assert_eq!(d[1].status, "added");

    sh.restore(&s1.tree, &["a.txt".into(), "sub/new.txt".into()])
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    assert!(!ws.join("sub").exists(), "the emptied directory is removed");
    assert_eq!(
        fs::read_to_string(ws.join("ignored.txt")).unwrap(),
        "secret\n"
    );
}

#[tokio::test]
async fn size_caps_skip_and_record() {
    let (_t, ws, sh) = setup();
    fs::write(ws.join("small.txt"), "x").unwrap();
    fs::write(ws.join("big.bin"), vec![0u8; 2048]).unwrap();
    let s = sh.snapshot(Scope::All, None).await.unwrap();
    assert_eq!(s.skipped_count, 1);
    assert_eq!(s.skipped[0].path, "big.bin");
    assert_eq!(s.skipped[0].reason, "file_too_large");
    // A tracked file that grows past the cap leaves the tree.
    fs::write(ws.join("small.txt"), vec![1u8; 2000]).unwrap();
    let s2 = sh.snapshot(Scope::All, Some(&s.tree)).await.unwrap();
    assert_eq!(s2.files_changed, vec!["small.txt"]);
    for i in 0..6 {
        fs::write(ws.join(format!("m{i}")), vec![2u8; 1000]).unwrap();
    }
    let s3 = sh.snapshot(Scope::All, Some(&s2.tree)).await.unwrap();
    assert_eq!(
        s3.files_changed.len(),
        4,
        "4 KiB per snapshot: four files fit"
    );
    assert!(s3.skipped.iter().any(|k| k.reason == "snapshot_too_large"));
}

#[tokio::test]
async fn symlinks_are_kept_as_links() {
    let (t, ws, sh) = setup();
    let outside = t.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "outside secret\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("dirlink")).unwrap();
    let s = sh.snapshot(Scope::All, None).await.unwrap();
    let ls = sh
        .git
        .run(&["ls-tree", "-r", s.tree.as_str()], None)
        .await
        .unwrap();
    let ls = String::from_utf8(ls).unwrap();
    assert!(ls.lines().all(|l| l.starts_with("120000")), "{ls}");
    assert_eq!(ls.lines().count(), 2, "{ls}");
}

#[tokio::test]
async fn corrupt_repository_is_rebuilt() {
    let (_t, ws, sh) = setup();
    fs::write(ws.join("a.txt"), "one\n").unwrap();
    let s1 = sh.snapshot(Scope::All, None).await.unwrap();
    fs::write(sh.git_dir().join("index"), b"garbage, not an index").unwrap();
    fs::write(ws.join("a.txt"), "two\n").unwrap();
    let s2 = sh.snapshot(Scope::All, Some(&s1.tree)).await.unwrap();
    assert!(s2.rebuilt.is_some());
    assert!(s2.previous_missing);
    assert!(!sh.has_tree(&s1.tree).await);
    assert!(sh.has_tree(&s2.tree).await);
}

#[tokio::test]
async fn missing_workspace_is_an_error_not_a_panic() {
    let (_t, ws, sh) = setup();
    fs::write(ws.join("a.txt"), "one\n").unwrap();
    sh.snapshot(Scope::All, None).await.unwrap();
    fs::remove_dir_all(&ws).unwrap();
    let e = sh.snapshot(Scope::All, None).await.unwrap_err();
    assert_eq!(e.error.kind(), "workspace_missing");
    assert!(e.rebuilt.is_none());
}
