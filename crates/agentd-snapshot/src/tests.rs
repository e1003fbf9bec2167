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

    let plan = sh
        .restore_plan(&s1.tree, &["a.txt".into(), "sub/new.txt".into()])
        .await
        .unwrap();
    assert_eq!(
        plan,
        vec![
            crate::RestoreOp::File {
                path: "a.txt".into(),
                bytes: b"one\n".to_vec(),
                executable: false
            },
            crate::RestoreOp::Remove {
                path: "sub/new.txt".into()
            },
        ]
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
    // The previous tree's object file turns to garbage.
    let obj = sh
        .git_dir()
        .join("objects")
        .join(&s1.tree[..2])
        .join(&s1.tree[2..]);
    let _ = fs::remove_file(&obj);
    fs::write(&obj, b"garbage, not an object").unwrap();
    fs::write(ws.join("a.txt"), "two\n").unwrap();
    let s2 = sh.snapshot(Scope::All, Some(&s1.tree)).await.unwrap();
    assert!(s2.rebuilt.is_some());
    assert!(s2.previous_missing);
    assert!(!sh.has_tree(&s1.tree).await);
    assert!(sh.has_tree(&s2.tree).await);
    // A repository without its objects is rebuilt too.
    fs::remove_dir_all(sh.git_dir().join("objects")).unwrap();
    let s3 = sh.snapshot(Scope::All, Some(&s2.tree)).await.unwrap();
    assert!(s3.rebuilt.is_some());
    assert_eq!(s3.tree, s2.tree, "same files, same tree");
    assert!(sh.has_tree(&s3.tree).await);
}

/// The trees written in-process are the ones git itself writes for the same files.
#[tokio::test]
async fn trees_match_what_git_writes() {
    let (_t, ws, sh) = setup();
    for (p, body) in [
        ("a.txt", "a\n"),
        ("a-b", "dash\n"),
        ("a0", "zero\n"),
        ("a/b.txt", "nested\n"),
        ("a/c/d.txt", "deep\n"),
        ("b/x", ""),
        ("sub dir/é.txt", "utf-8 name\n"),
        (".hidden", "dot\n"),
    ] {
        let f = ws.join(p);
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        fs::write(&f, body).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    fs::write(ws.join("run.sh"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(ws.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a/b.txt", ws.join("link")).unwrap();
    fs::create_dir(ws.join("empty")).unwrap();
    let s = sh.snapshot(Scope::All, None).await.unwrap();
    let g = sh.git.with_index(sh.git_dir().join("index.check"));
    g.run(&["add", "-A"], None).await.unwrap();
    let want = g.run(&["write-tree"], None).await.unwrap();
    assert_eq!(s.tree, String::from_utf8(want).unwrap().trim());
    // git reads every object back.
    g.run(&["fsck", "--no-dangling", "--strict"], None)
        .await
        .unwrap();
}

/// A file tool's target alone is rescanned; ignored targets stay out of the tree, a
/// `.gitignore` target rescans everything.
#[tokio::test]
async fn path_scope_updates_only_the_target_and_honours_ignores() {
    let (_t, ws, sh) = setup();
    fs::write(ws.join(".gitignore"), "build/\n*.log\n").unwrap();
    fs::write(ws.join("a.txt"), "a\n").unwrap();
    let s1 = sh.snapshot(Scope::All, None).await.unwrap();
    fs::write(ws.join("a.txt"), "changed\n").unwrap();
    fs::write(ws.join("other.txt"), "not rescanned\n").unwrap();
    fs::create_dir(ws.join("build")).unwrap();
    fs::write(ws.join("build/out.o"), "o").unwrap();
    fs::write(ws.join("x.log"), "log").unwrap();
    let paths = ["a.txt", "build/out.o", "x.log"]
        .map(PathBuf::from)
        .to_vec();
    let s2 = sh
        .snapshot(Scope::Paths(paths), Some(&s1.tree))
        .await
        .unwrap();
    assert_eq!(s2.files_changed, vec!["a.txt"]);
    // The next full scan finds the file no tool named.
    let s3 = sh.snapshot(Scope::All, Some(&s2.tree)).await.unwrap();
    assert_eq!(s3.files_changed, vec!["other.txt"]);
    // Deleted through a tool: gone from the tree.
    fs::remove_file(ws.join("a.txt")).unwrap();
    let s4 = sh
        .snapshot(Scope::Paths(vec!["a.txt".into()]), Some(&s3.tree))
        .await
        .unwrap();
    assert_eq!(s4.files_changed, vec!["a.txt"]);
    // A new .gitignore un-ignores build/: everything is rescanned.
    fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    let s5 = sh
        .snapshot(Scope::Paths(vec![".gitignore".into()]), Some(&s4.tree))
        .await
        .unwrap();
    assert_eq!(s5.files_changed, vec![".gitignore", "build/out.o"]);
}

/// A file rewritten right after a snapshot, with the same size, is still seen.
#[tokio::test]
async fn a_rewrite_within_the_timestamp_granularity_is_seen() {
    let (_t, ws, sh) = setup();
    let mut prev = sh.snapshot(Scope::All, None).await.unwrap().tree;
    for i in 0..5 {
        fs::write(ws.join("f.txt"), format!("v{i}\n")).unwrap();
        let s = sh.snapshot(Scope::All, Some(&prev)).await.unwrap();
        assert_eq!(s.files_changed, vec!["f.txt"], "rewrite {i}");
        prev = s.tree;
    }
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

/// After each kind of change a shell command makes (new, changed, deleted, renamed
/// files; directories created, moved away, deleted; mode changes; an ignored directory),
/// the tree from the watched changes is the one git writes for the same files.
#[tokio::test]
async fn watched_changes_give_the_tree_git_writes() {
    use std::os::unix::fs::PermissionsExt;
    let (_t, ws, sh) = setup();
    fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    for d in ["a", "a/b", "c"] {
        fs::create_dir_all(ws.join(d)).unwrap();
        fs::write(ws.join(d).join("f.txt"), d).unwrap();
    }
    let mut prev = sh.snapshot(Scope::All, None).await.unwrap().tree;
    type Step = Box<dyn Fn(&Path)>;
    let steps: Vec<Step> = vec![
        Box::new(|w| fs::write(w.join("a/new.txt"), "new").unwrap()),
        Box::new(|w| fs::write(w.join("a/b/f.txt"), "changed").unwrap()),
        Box::new(|w| fs::remove_file(w.join("c/f.txt")).unwrap()),
        Box::new(|w| fs::rename(w.join("a/new.txt"), w.join("renamed.txt")).unwrap()),
        Box::new(|w| {
            fs::create_dir_all(w.join("n/m")).unwrap();
            fs::write(w.join("n/m/deep.txt"), "deep").unwrap();
        }),
        Box::new(|w| fs::rename(w.join("a"), w.join("moved")).unwrap()),
        Box::new(|w| fs::write(w.join("moved/b/after-move.txt"), "x").unwrap()),
        Box::new(|w| fs::remove_dir_all(w.join("n")).unwrap()),
        Box::new(|w| {
            fs::set_permissions(w.join("renamed.txt"), fs::Permissions::from_mode(0o755)).unwrap()
        }),
        Box::new(|w| {
            fs::create_dir_all(w.join("target/debug")).unwrap();
            fs::write(w.join("target/debug/out"), "ignored").unwrap();
        }),
    ];
    for (i, step) in steps.iter().enumerate() {
        step(&ws);
        let s = sh.snapshot(Scope::Changed, Some(&prev)).await.unwrap();
        let g = sh
            .git
            .with_index(sh.git_dir().join(format!("index.check{i}")));
        g.run(&["add", "-A"], None).await.unwrap();
        let want = g.run(&["write-tree"], None).await.unwrap();
        assert_eq!(s.tree, String::from_utf8(want).unwrap().trim(), "step {i}");
        assert!(!s.previous_missing, "step {i}: the previous tree is known");
        prev = s.tree;
    }
}

/// After a daemon restart the saved model stands in for the files' stat data: only a
/// file changed meanwhile is read again.
#[tokio::test]
async fn a_saved_model_spares_rehashing_after_a_restart() {
    use std::os::unix::fs::MetadataExt;
    let (_t, ws, sh) = setup();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for i in 0..20 {
        let p = ws.join(format!("f{i}"));
        fs::write(&p, format!("{i}")).unwrap();
        fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let s1 = sh.snapshot(Scope::All, None).await.unwrap();
    let meta = fs::metadata(sh.git_dir()).unwrap();
    let id = (meta.dev(), meta.ino());
    let objects = sh.git_dir().join("objects");
    // A new model, as a restarted daemon makes it.
    let mut m = scan::Model::load(objects.clone(), id);
    assert_eq!(m.tree.map(hex::encode), Some(s1.tree.clone()));
    fs::write(ws.join("f3"), "changed").unwrap();
    let out = m.scan_all(&ws, None, &cfg(), false).unwrap();
    assert_eq!(out.changed, vec!["f3"]);
    assert_eq!(out.hashed, 1, "only the changed file is read");
    // A model saved for another repository directory is not used.
    assert!(scan::Model::load(objects, (id.0, id.1 + 1)).tree.is_none());
}
