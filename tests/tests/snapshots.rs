//! Black-box tests of workspace snapshots, diff, revert and fork with files
//! (docs/snapshots.md): the real daemon and agentctl, the `script` provider, and real git (a test
//! fails naming git when it is not installed).

use agentd_tests::{git, is_type, Daemon, RpcConn};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs git against the daemon's shadow repository of its workspace.
#[track_caller]
fn shadow_git(d: &Daemon, args: &[&str]) -> String {
    let gd = shadow_dir(d).join("git");
    let out = Command::new("git")
        .args(args)
        .env("GIT_DIR", &gd)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git on PATH");
    assert!(
        out.status.success(),
        "shadow git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn shadow_dir(d: &Daemon) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(d.home().join("snapshots"))
        .expect("a snapshots directory under home")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "one shadow repository per workspace: {dirs:?}"
    );
    dirs[0].clone()
}

/// Writes a script file and returns its `script:` model.
fn script(d: &Daemon, name: &str, steps: Value) -> String {
    let p = d.root().join(name);
    std::fs::write(
        &p,
        serde_json::to_vec(&json!({"rules": [{"steps": steps}]})).unwrap(),
    )
    .unwrap();
    format!("script:{}", p.display())
}

fn create(c: &mut RpcConn, ws: &Path, model: &str) -> String {
    c.call_ok(
        "agentd/create",
        json!({"workspace": ws.display().to_string(), "model": model}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn turn(c: &mut RpcConn, sid: &str, input: &str) -> Value {
    let r = c.call_ok("agentd/turn", json!({"session_id": sid, "input": input}));
    assert_eq!(r["status"], "completed", "{r}");
    r
}

fn events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

fn snapshots(evs: &[Value]) -> Vec<Value> {
    evs.iter()
        .filter(|e| is_type(e, "workspace_snapshot"))
        .cloned()
        .collect()
}

fn files(e: &Value) -> Vec<String> {
    e["data"]["files_changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn write_call(path: &str, content: &str) -> Value {
    json!({"name": "write_file", "args": {"path": path, "content": content}})
}

fn shell_call(cmd: &str) -> Value {
    json!({"name": "shell", "args": {"command": cmd}})
}

/// Every file under `dir` with its bytes (symlinks as their target).
fn file_bytes(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(p, t.as_os_str().as_encoded_bytes().to_vec());
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn non_git_workspace_gets_snapshots_around_mutating_calls_only() {
    let d = Daemon::start();
    let ws = d.workspace();
    std::fs::write(ws.join("keep.txt"), "kept\n").unwrap();
    let model = script(
        &d,
        "s.json",
        json!([
            {"tool_calls": [{"name": "list_dir", "args": {"path": "."}}]},
            {"tool_calls": [write_call("a.txt", "A\n")]},
            {"tool_calls": [shell_call("echo B > b.txt && rm keep.txt")]},
            {"text": "done"}
        ]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, ws, &model);
    turn(&mut c, &sid, "go");
    let evs = events(&mut c, &sid);
    let snaps = snapshots(&evs);
    let reasons: Vec<&str> = snaps
        .iter()
        .map(|s| s["data"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, vec!["before", "after", "after"], "{snaps:#?}");
    assert_eq!(files(&snaps[0]), Vec::<String>::new());
    assert_eq!(files(&snaps[1]), vec!["a.txt"]);
    assert_eq!(files(&snaps[2]), vec!["b.txt", "keep.txt"]);
    // Each `after` sits right before its call's result; none for the read-only call.
    for s in &snaps[1..] {
        let i = evs.iter().position(|e| e == s).unwrap();
        assert!(is_type(&evs[i + 1], "tool_result"), "{:?}", evs[i + 1]);
        assert_eq!(evs[i + 1]["data"]["call_id"], s["data"]["call_id"]);
    }
    // The trees are real: the last one holds a.txt and b.txt, not keep.txt.
    let tree = snaps[2]["data"]["tree"].as_str().unwrap();
    let ls = shadow_git(&d, &["ls-tree", "--name-only", tree]);
    assert_eq!(ls, "a.txt\nb.txt\n");
    assert!(!ws.join(".git").exists(), "no repository in the workspace");
    // Older readers' rule: kept, shown, never replayed.
    let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
    assert!(!ctx.to_string().contains(tree));
}

#[test]
fn a_git_workspace_with_a_dirty_index_is_left_byte_for_byte() {
    let d = Daemon::start();
    let ws = d.workspace();
    git(ws, &["init", "-q"]);
    std::fs::write(ws.join("tracked.txt"), "v1\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "build/\n").unwrap();
    git(ws, &["add", "."]);
    git(ws, &["commit", "-q", "-m", "init"]);
    std::fs::write(ws.join("tracked.txt"), "v2 staged\n").unwrap();
    git(ws, &["add", "tracked.txt"]);
    std::fs::write(ws.join("tracked.txt"), "v3 unstaged\n").unwrap();
    std::fs::create_dir(ws.join("build")).unwrap();
    std::fs::write(ws.join("build/out.o"), "object\n").unwrap();
    let before = file_bytes(&ws.join(".git"));
    let status = git(ws, &["status", "--porcelain"]);

    let model = script(
        &d,
        "s.json",
        json!([{"tool_calls": [write_call("new.txt", "n\n"), shell_call("echo v4 > tracked.txt")]}, {"text": "ok"}]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, ws, &model);
    turn(&mut c, &sid, "go");

    assert_eq!(
        file_bytes(&ws.join(".git")),
        before,
        "the user's .git changed"
    );
    assert_eq!(git(ws, &["stash", "list"]), "");
    assert_eq!(
        git(ws, &["status", "--porcelain"]),
        format!("{status}?? new.txt\n"),
    );
    let snaps = snapshots(&events(&mut c, &sid));
    assert_eq!(snaps.len(), 3, "{snaps:#?}");
    assert_eq!(files(&snaps[1]), vec!["new.txt"]);
    assert_eq!(files(&snaps[2]), vec!["tracked.txt"]);
    let tree = snaps[2]["data"]["tree"].as_str().unwrap();
    let names = shadow_git(&d, &["ls-tree", "-r", "--name-only", tree]);
    assert_eq!(
        names, ".gitignore\nnew.txt\ntracked.txt\n",
        "no .git, no ignored build/"
    );
}

#[test]
fn huge_files_are_skipped_and_recorded() {
    let d = Daemon::builder()
        .config("[snapshots]\nmax_file_bytes = 1048576\n")
        .start();
    let model = script(
        &d,
        "s.json",
        json!([{"tool_calls": [shell_call("head -c 3000000 /dev/urandom > blob.bin && echo s > small.txt")]}, {"text": "ok"}]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, d.workspace(), &model);
    turn(&mut c, &sid, "go");
    let snaps = snapshots(&events(&mut c, &sid));
    let after = &snaps[1]["data"];
    assert_eq!(files(&snaps[1]), vec!["small.txt"]);
    assert_eq!(after["skipped_count"], 1, "{after}");
    assert_eq!(
        after["skipped"][0],
        json!({"path": "blob.bin", "bytes": 3000000, "reason": "file_too_large"})
    );
}

#[test]
fn symlinks_to_outside_are_never_followed() {
    let d = Daemon::start();
    let outside = d.root().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let secret = outside.join("secret.txt");
    std::fs::write(&secret, "outside secret 42\n").unwrap();
    std::fs::write(outside.join("other.txt"), "other outside\n").unwrap();
    let model = script(
        &d,
        "s.json",
        json!([{"tool_calls": [shell_call(&format!(
            "ln -s {} link.txt && ln -s {} linkdir && echo in > in.txt",
            secret.display(),
            outside.display()
        ))]}, {"text": "ok"}]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, d.workspace(), &model);
    turn(&mut c, &sid, "go");
    let snaps = snapshots(&events(&mut c, &sid));
    let tree = snaps[1]["data"]["tree"].as_str().unwrap();
    let ls = shadow_git(&d, &["ls-tree", "-r", tree]);
    let modes: Vec<(&str, &str)> = ls
        .lines()
        .map(|l| (l.split(' ').next().unwrap(), l.rsplit('\t').next().unwrap()))
        .collect();
    assert_eq!(
        modes,
        vec![
            ("100644", "in.txt"),
            ("120000", "link.txt"),
            ("120000", "linkdir")
        ],
        "{ls}"
    );
    // Neither outside file's content is anywhere in the shadow repository.
    for f in ["secret.txt", "other.txt"] {
        let hash = git(&outside, &["hash-object", f]);
        let gd = shadow_dir(&d).join("git");
        let st = Command::new("git")
            .args(["cat-file", "-e", hash.trim()])
            .env("GIT_DIR", gd)
            .status()
            .unwrap();
        assert!(!st.success(), "{f} was read through a symlink");
    }
}

#[test]
fn a_workspace_deleted_under_a_running_session_is_recorded_not_fatal() {
    // The command sandbox never lets a command remove the workspace itself
    // (docs/sandbox.md#contract): this deletion stands for one made outside agentd, so no sandbox here.
    let d = Daemon::builder()
        .config("[sandbox]\nmode = \"full_access\"\n")
        .start();
    let ws = d.root().join("doomed");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let model = script(
        &d,
        "s.json",
        json!([
            {"tool_calls": [shell_call("rm -rf \"$PWD\"")]},
            {"tool_calls": [write_call("b.txt", "b\n")]},
            {"text": "still here"}
        ]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, &ws, &model);
    let r = turn(&mut c, &sid, "go");
    assert_eq!(r["output_text"], "still here");
    let snaps = snapshots(&events(&mut c, &sid));
    assert_eq!(snaps[0]["data"]["reason"], "before");
    assert!(snaps[0]["data"]["tree"].is_string());
    for s in &snaps[1..] {
        assert_eq!(s["data"]["tree"], Value::Null, "{s}");
        assert_eq!(s["data"]["error"]["kind"], "workspace_missing", "{s}");
    }
    assert_eq!(snaps.len(), 3);
}

#[test]
fn a_corrupt_shadow_repository_is_rebuilt_with_an_event_saying_so() {
    let d = Daemon::start();
    let model = script(
        &d,
        "s.json",
        json!([{"tool_calls": [shell_call("date +%N >> log.txt")]}, {"text": "ok"}]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, d.workspace(), &model);
    turn(&mut c, &sid, "one");
    let gd = shadow_dir(&d).join("git");
    std::fs::write(gd.join("index"), b"not an index at all").unwrap();
    std::fs::remove_dir_all(gd.join("objects")).unwrap();
    std::fs::write(d.workspace().join("user.txt"), "edited by the user\n").unwrap();
    turn(&mut c, &sid, "two");
    let snaps = snapshots(&events(&mut c, &sid));
    assert_eq!(snaps.len(), 4, "{snaps:#?}");
    let rebuilt = &snaps[2]["data"];
    assert_eq!(rebuilt["reason"], "before");
    assert!(rebuilt["rebuilt"]["reason"].is_string(), "{rebuilt}");
    assert_eq!(rebuilt["previous_missing"], true);
    assert!(snaps[3]["data"]["rebuilt"].is_null());
    assert_eq!(files(&snaps[3]), vec!["log.txt"]);
    let tree = snaps[3]["data"]["tree"].as_str().unwrap();
    assert_eq!(
        shadow_git(&d, &["ls-tree", "--name-only", tree]),
        "log.txt\nuser.txt\n"
    );
}

#[test]
fn a_shadow_object_turned_to_garbage_is_rebuilt_with_an_event_saying_so() {
    let d = Daemon::start();
    let model = script(
        &d,
        "s.json",
        json!([{"tool_calls": [shell_call("date +%N >> log.txt")]}, {"text": "ok"}]),
    );
    let mut c = d.connect();
    let sid = create(&mut c, d.workspace(), &model);
    turn(&mut c, &sid, "one");
    let snaps = snapshots(&events(&mut c, &sid));
    let last = snaps[1]["data"]["tree"].as_str().unwrap().to_string();
    let obj = shadow_dir(&d)
        .join("git/objects")
        .join(&last[..2])
        .join(&last[2..]);
    let _ = std::fs::remove_file(&obj);
    std::fs::write(&obj, b"not a zlib stream").unwrap();
    turn(&mut c, &sid, "two");
    let snaps = snapshots(&events(&mut c, &sid));
    assert_eq!(snaps.len(), 4, "{snaps:#?}");
    let rebuilt = &snaps[2]["data"];
    assert!(
        rebuilt["rebuilt"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("corrupt")),
        "{rebuilt}"
    );
    // The files had not changed: the rebuilt repository holds the same tree again,
    // readable this time.
    assert_eq!(rebuilt["tree"], json!(last), "{rebuilt}");
    assert!(rebuilt["previous_missing"].is_null(), "{rebuilt}");
    assert_eq!(shadow_git(&d, &["cat-file", "-t", &last]), "tree\n");
    assert_eq!(files(&snaps[3]), vec!["log.txt"]);
    shadow_git(&d, &["fsck", "--no-dangling"]);
}

/// A session of two turns in a workspace holding `a.txt = orig`: turn "one" writes
/// a.txt = agent1 and creates n.txt; turn "two" writes a.txt = agent2. Returns the
/// session id and the two turns' results.
fn two_turns(d: &Daemon, c: &mut RpcConn) -> (String, Value, Value) {
    std::fs::write(d.workspace().join("a.txt"), "orig\n").unwrap();
    let p = d.root().join("two.json");
    let body = json!({"rules": [
        {"match": "one", "steps": [
            {"tool_calls": [write_call("a.txt", "agent1\n"), shell_call("echo new > n.txt")]},
            {"text": "one done"}]},
        {"match": "two", "steps": [
            {"tool_calls": [write_call("a.txt", "agent2\n")]},
            {"text": "two done"}]}
    ]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    let sid = create(c, d.workspace(), &format!("script:{}", p.display()));
    let t1 = turn(c, &sid, "one");
    let t2 = turn(c, &sid, "two");
    (sid, t1, t2)
}

fn read(d: &Daemon, name: &str) -> Option<String> {
    std::fs::read_to_string(d.workspace().join(name)).ok()
}

#[test]
fn diff_shows_the_session_changes_per_file_and_per_turn() {
    let d = Daemon::start();
    let mut c = d.connect();
    let (sid, _t1, t2) = two_turns(&d, &mut c);
    // A file the user made is not the session's change.
    std::fs::write(d.workspace().join("user.txt"), "mine\n").unwrap();
    let all = c.call_ok("agentd/diff", json!({"session_id": sid}));
    let files: Vec<(&str, &str)> = all["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        files,
        vec![("a.txt", "modified"), ("n.txt", "added")],
        "{all}"
    );
    let text = all["diff"].as_str().unwrap();
    assert!(text.contains("-orig\n+agent2\n"), "{text}");

    let turn_id = t2["turn_id"].as_str().unwrap();
    let out = d.agentctl(["diff", &sid, "--turn", turn_id]);
    out.assert_code(0);
    assert!(out.stdout.contains("-agent1\n+agent2\n"), "{}", out.stdout);
    assert!(!out.stdout.contains("n.txt"), "{}", out.stdout);

    let bad = d.agentctl(["--json", "diff", &sid, "--turn", "nope"]);
    bad.assert_code(2);
    assert_eq!(bad.json()["error"]["kind"], "not_found");
    let r = c.call("agentd/diff", json!({"session_id": sid, "to_seq": 9999}));
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
}

#[test]
fn revert_refuses_to_overwrite_user_edits_unless_forced() {
    let d = Daemon::start();
    let mut c = d.connect();
    let (sid, t1, _t2) = two_turns(&d, &mut c);
    let end1 = t1["last_seq"].as_u64().unwrap();
    std::fs::write(d.workspace().join("a.txt"), "user edit\n").unwrap();

    let out = d.agentctl(["--json", "revert", &sid, "--to-seq", &end1.to_string()]);
    out.assert_code(5);
    let err = &out.json()["error"];
    assert_eq!(err["kind"], "conflict", "{err}");
    assert_eq!(err["details"]["files"], json!(["a.txt"]));
    assert_eq!(
        read(&d, "a.txt").as_deref(),
        Some("user edit\n"),
        "nothing changed"
    );

    let dry = c.call_ok(
        "agentd/revert",
        json!({"session_id": sid, "to_seq": end1, "dry_run": true, "force": true}),
    );
    assert_eq!(dry["files"], json!(["a.txt"]));
    assert_eq!(dry["conflicts"], json!(["a.txt"]));
    assert_eq!(read(&d, "a.txt").as_deref(), Some("user edit\n"));

    let out = d.agentctl(["revert", &sid, "--to-seq", &end1.to_string(), "--force"]);
    out.assert_code(0);
    assert!(out.stdout.contains("restored 1 file(s)"), "{}", out.stdout);
    assert_eq!(read(&d, "a.txt").as_deref(), Some("agent1\n"));
    let evs = events(&mut c, &sid);
    let rev = evs
        .iter()
        .rfind(|e| is_type(e, "workspace_revert"))
        .unwrap();
    assert_eq!(rev["data"]["forced"], true);
    // The user's edit was snapshotted first, so it can be brought back.
    let pre = &evs[evs.len() - 2];
    assert_eq!(pre["data"]["reason"], "before_revert");
    assert_eq!(files(pre), vec!["a.txt"]);
}

#[test]
fn a_revert_can_itself_be_reverted() {
    let d = Daemon::start();
    let mut c = d.connect();
    let (sid, t1, _t2) = two_turns(&d, &mut c);
    let start = t1["first_seq"].as_u64().unwrap();
    let r = c.call_ok("agentd/revert", json!({"session_id": sid, "to_seq": start}));
    assert_eq!(r["reverted"], true, "{r}");
    assert_eq!(r["files"], json!(["a.txt", "n.txt"]));
    assert_eq!(read(&d, "a.txt").as_deref(), Some("orig\n"));
    assert_eq!(
        read(&d, "n.txt"),
        None,
        "a file the session created is removed"
    );
    let rev_seq = r["seq"].as_u64().unwrap();

    let again = c.call_ok(
        "agentd/revert",
        json!({"session_id": sid, "to_seq": rev_seq - 1}),
    );
    assert_eq!(again["files"], json!(["a.txt", "n.txt"]), "{again}");
    assert_eq!(read(&d, "a.txt").as_deref(), Some("agent2\n"));
    assert_eq!(read(&d, "n.txt").as_deref(), Some("new\n"));
    // Nothing left to do: a second identical revert is a no-op.
    let noop = c.call_ok(
        "agentd/revert",
        json!({"session_id": sid, "to_seq": rev_seq - 1}),
    );
    assert_eq!(noop["reverted"], false, "{noop}");
    let r = c.call(
        "agentd/revert",
        json!({"session_id": sid, "to_seq": 10_000}),
    );
    assert_eq!(r["error"]["data"]["kind"], "invalid_args", "{r}");
}

#[test]
fn fork_restore_puts_the_files_back_to_the_fork_point() {
    let d = Daemon::start();
    let mut c = d.connect();
    let (sid, t1, _t2) = two_turns(&d, &mut c);
    let end1 = t1["last_seq"].as_u64().unwrap();
    let parent_lines = d.log_lines(&sid).len();

    std::fs::write(d.workspace().join("a.txt"), "user edit\n").unwrap();
    let refused = c.call(
        "agentd/fork",
        json!({"session_id": sid, "to_seq": end1, "files": "restore"}),
    );
    assert_eq!(refused["error"]["data"]["kind"], "conflict", "{refused}");
    let listed = c.call_ok("agentd/list", json!({}));
    assert_eq!(
        listed["sessions"].as_array().unwrap().len(),
        1,
        "no child on a refusal"
    );
    std::fs::write(d.workspace().join("a.txt"), "agent2\n").unwrap();

    let out = d.agentctl([
        "--json",
        "fork",
        &sid,
        "--to-seq",
        &end1.to_string(),
        "--files",
        "restore",
    ]);
    out.assert_code(0);
    let child = out.json()["child_session_id"].as_str().unwrap().to_string();
    assert_eq!(read(&d, "a.txt").as_deref(), Some("agent1\n"));
    assert_eq!(read(&d, "n.txt").as_deref(), Some("new\n"));
    let cev = events(&mut c, &child);
    let last = cev.last().unwrap();
    assert!(is_type(last, "workspace_revert"), "{last}");
    assert_eq!(last["data"]["reason"], "fork_restore");
    assert_eq!(
        d.log_lines(&sid).len(),
        parent_lines,
        "the parent Log is never modified"
    );
}

#[test]
fn fork_worktree_materializes_the_files_at_the_fork_point() {
    let d = Daemon::start();
    let mut c = d.connect();
    let (sid, t1, _t2) = two_turns(&d, &mut c);
    let end1 = t1["last_seq"].as_u64().unwrap();
    let dir = d.root().join("wt");
    let r = c.call_ok(
        "agentd/fork",
        json!({"session_id": sid, "to_seq": end1, "files": "worktree",
            "worktree": dir.display().to_string()}),
    );
    let child = r["child_session_id"].as_str().unwrap();
    assert_eq!(r["files"]["workspace"], dir.display().to_string());
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).unwrap(),
        "agent1\n"
    );
    assert_eq!(std::fs::read_to_string(dir.join("n.txt")).unwrap(), "new\n");
    assert_eq!(
        read(&d, "a.txt").as_deref(),
        Some("agent2\n"),
        "parent files kept"
    );
    let show = c.call_ok("agentd/show", json!({"session_id": child}));
    assert_eq!(show["workspace"], dir.display().to_string());
    // The child's diff reads the parent's snapshots through the shared objects.
    let diff = c.call_ok("agentd/diff", json!({"session_id": child}));
    assert!(
        diff["diff"].as_str().unwrap().contains("-orig\n+agent1\n"),
        "{diff}"
    );
    // An existing directory is refused.
    let again = c.call(
        "agentd/fork",
        json!({"session_id": sid, "files": "worktree", "worktree": dir.display().to_string()}),
    );
    assert_eq!(again["error"]["data"]["kind"], "invalid_args", "{again}");
}
