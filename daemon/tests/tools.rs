//! Black-box tests of the workspace tools (docs/turns-and-providers.md#tools) on real temp workspaces and real
//! child processes.

use agentd::text::sha256_hex;
use agentd::tools::{self, ToolContext, ToolOutcome};
use agentd_proto::ErrorKind;
use serde_json::{json, Value};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

struct Ws {
    _dir: tempfile::TempDir,
    _outside: tempfile::TempDir,
    ctx: ToolContext,
    outside: std::path::PathBuf,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    let ctx = ToolContext::new(dir.path().join("work"), dir.path().join("resources")).unwrap();
    let outside_path = std::fs::canonicalize(outside.path()).unwrap();
    Ws {
        _dir: dir,
        _outside: outside,
        ctx,
        outside: outside_path,
    }
}

impl Ws {
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.ctx.workspace.join(rel)
    }
    fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    async fn run(&self, name: &str, args: Value) -> ToolOutcome {
        tools::run(name, &args, &self.ctx).await
    }
}

fn err_kind(o: &ToolOutcome) -> ErrorKind {
    assert!(!o.ok, "expected failure, got {o:?}");
    o.error.as_ref().expect("error present").kind
}

fn out(o: &ToolOutcome) -> &str {
    assert!(o.ok, "expected success, got {o:?}");
    o.output.as_deref().unwrap()
}

#[tokio::test]
async fn read_file_returns_text_and_hash_artifact() {
    let w = ws();
    w.write("src/main.rs", "fn main() {}\n// two\n// three\n");
    let o = w.run("read_file", json!({"path": "src/main.rs"})).await;
    assert_eq!(out(&o), "fn main() {}\n// two\n// three\n");
    assert_eq!(o.artifacts.len(), 1);
    assert_eq!(o.artifacts[0].uri, "src/main.rs");
    assert_eq!(o.artifacts[0].kind, "file");
    assert_eq!(
        o.artifacts[0].sha256.as_deref(),
        Some(sha256_hex(b"fn main() {}\n// two\n// three\n").as_str())
    );

    let o = w
        .run(
            "read_file",
            json!({"path": "src/main.rs", "offset_line": 2, "limit_lines": 1}),
        )
        .await;
    assert_eq!(out(&o), "// two\n…[lines 2-2 of 3]");
    // The artifact hash is always the whole file's.
    assert_eq!(
        o.artifacts[0].sha256.as_deref(),
        Some(sha256_hex(b"fn main() {}\n// two\n// three\n").as_str())
    );

    // Invalid UTF-8 is shown lossily, hashed exactly.
    std::fs::write(w.path("bin.dat"), b"ok\xff\xfe end").unwrap();
    let o = w.run("read_file", json!({"path": "bin.dat"})).await;
    assert_eq!(out(&o), "ok\u{fffd}\u{fffd} end");
    assert_eq!(
        o.artifacts[0].sha256.as_deref(),
        Some(sha256_hex(b"ok\xff\xfe end").as_str())
    );
}

#[tokio::test]
async fn read_file_errors() {
    let w = ws();
    w.write("d/f", "x");
    assert_eq!(
        err_kind(&w.run("read_file", json!({"path": "missing.txt"})).await),
        ErrorKind::NotFound
    );
    assert_eq!(
        err_kind(&w.run("read_file", json!({"path": "d"})).await),
        ErrorKind::InvalidArgs
    );
    assert_eq!(
        err_kind(&w.run("read_file", json!({"path": "d/f", "bogus": 1})).await),
        ErrorKind::InvalidArgs
    );
    assert_eq!(
        err_kind(&w.run("read_file", json!({})).await),
        ErrorKind::InvalidArgs
    );
    assert_eq!(
        err_kind(&w.run("read_file", json!("d/f")).await),
        ErrorKind::InvalidArgs
    );
    // A FIFO would block a plain read forever.
    let fifo = std::ffi::CString::new(w.path("fifo").to_str().unwrap()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert_eq!(
        err_kind(&w.run("read_file", json!({"path": "fifo"})).await),
        ErrorKind::InvalidArgs
    );
    let o = w.run("no_such_tool", json!({})).await;
    assert_eq!(err_kind(&o), ErrorKind::InvalidArgs);
    assert!(o.error.unwrap().message.contains("unknown tool"));
}

#[tokio::test]
async fn big_output_is_capped_and_stored_as_resource() {
    let w = ws();
    let content: String = (0..3000).map(|i| format!("line {i} é\n")).collect();
    assert!(content.len() > 16 * 1024);
    w.write("big.txt", &content);
    let o = w.run("read_file", json!({"path": "big.txt"})).await;
    let shown = out(&o);
    assert!(shown.len() <= 16 * 1024);
    assert!(
        shown.contains(&format!("of {} bytes]", content.len())),
        "{}",
        &shown[shown.len() - 80..]
    );
    let sha = sha256_hex(content.as_bytes());
    let res = o.resource.clone().expect("resource descriptor");
    assert_eq!(res["sha256"], sha.as_str());
    assert_eq!(res["bytes"], content.len());
    assert_eq!(res["path"], format!("resources/{sha}"));
    let stored = std::fs::read(w.ctx.resources_dir.join(&sha)).unwrap();
    assert_eq!(stored, content.as_bytes());
    assert!(o
        .artifacts
        .iter()
        .any(|a| a.kind == "tool_output" && a.sha256.as_deref() == Some(sha.as_str())));
    let data = o.into_result_data("call_1");
    assert_eq!(data["resource"]["sha256"], sha.as_str());
    assert_eq!(data["call_id"], "call_1");
}

#[tokio::test]
async fn list_dir_sorted_marks_dirs_and_respects_depth() {
    let w = ws();
    w.write("b.txt", "");
    w.write("a/z.rs", "");
    w.write("a/inner/deep.rs", "");
    w.write(".git/HEAD", "");
    symlink("b.txt", w.path("link")).unwrap();
    let o = w.run("list_dir", json!({})).await;
    assert_eq!(out(&o), ".git/\na/\nb.txt\nlink@");
    let o = w.run("list_dir", json!({"path": null, "depth": 3})).await;
    assert_eq!(
        out(&o),
        ".git/\na/\na/inner/\na/inner/deep.rs\na/z.rs\nb.txt\nlink@"
    );
    let o = w.run("list_dir", json!({"path": "a"})).await;
    assert_eq!(out(&o), "inner/\nz.rs");
    std::fs::create_dir(w.path("empty")).unwrap();
    let o = w.run("list_dir", json!({"path": "empty"})).await;
    assert_eq!(out(&o), "(empty directory)");
    // A listing past its entry cap stops there and says so after the entries.
    for i in 0..1005 {
        w.write(&format!("many/f{i:04}"), "");
    }
    let o = w.run("list_dir", json!({"path": "many"})).await;
    let (listed, note) = out(&o).rsplit_once('\n').unwrap();
    assert_eq!(listed.lines().count(), 1000);
    assert!(listed.starts_with("f0000\nf0001\n"), "{listed}");
    assert_eq!(
        note,
        "…[listing stopped at 1000 entries; list a subdirectory or lower depth]"
    );
    assert_eq!(
        err_kind(&w.run("list_dir", json!({"path": "b.txt"})).await),
        ErrorKind::InvalidArgs
    );
    assert_eq!(
        err_kind(&w.run("list_dir", json!({"path": ".."})).await),
        ErrorKind::OutsideWorkspace
    );
}

#[tokio::test]
async fn search_honours_gitignore_hidden_and_glob() {
    let w = ws();
    w.write(".gitignore", "target/\n*.log\n");
    w.write("src/lib.rs", "pub fn needle() {}\nfn other() {}\n");
    w.write("src/a.txt", "needle in text\n");
    w.write("target/out.rs", "needle ignored\n");
    w.write("debug.log", "needle ignored\n");
    w.write(".hidden/x.rs", "needle hidden\n");
    std::fs::write(w.path("blob.bin"), b"needle\0binary").unwrap();
    let o = w.run("search", json!({"pattern": "needle"})).await;
    assert_eq!(
        out(&o),
        "src/a.txt:1:needle in text\nsrc/lib.rs:1:pub fn needle() {}"
    );
    let o = w
        .run("search", json!({"pattern": "needle", "glob": "*.rs"}))
        .await;
    // The glob narrows; it never re-includes an ignored file.
    assert_eq!(out(&o), "src/lib.rs:1:pub fn needle() {}");
    let o = w
        .run(
            "search",
            json!({"pattern": "fn \\w+", "path": "src", "max_results": 1}),
        )
        .await;
    assert!(out(&o).starts_with("src/lib.rs:1:pub fn needle() {}\n…[stopped at 1"));
    let o = w.run("search", json!({"pattern": "zzz"})).await;
    assert_eq!(out(&o), "no matches");
    assert_eq!(
        err_kind(&w.run("search", json!({"pattern": "("})).await),
        ErrorKind::InvalidArgs
    );
    assert_eq!(
        err_kind(
            &w.run("search", json!({"pattern": "x", "path": "/etc"}))
                .await
        ),
        ErrorKind::OutsideWorkspace
    );
}

#[tokio::test]
async fn search_does_not_follow_symlinks_out() {
    let w = ws();
    std::fs::write(w.outside.join("secret.txt"), "needle outside\n").unwrap();
    symlink(&w.outside, w.path("out_dir")).unwrap();
    symlink(w.outside.join("secret.txt"), w.path("out_file")).unwrap();
    let o = w.run("search", json!({"pattern": "needle"})).await;
    assert_eq!(out(&o), "no matches");
}

#[tokio::test]
async fn write_file_creates_parents_and_records_hash() {
    let w = ws();
    let o = w
        .run(
            "write_file",
            json!({"path": "new/dir/f.txt", "content": "hello"}),
        )
        .await;
    assert!(out(&o).starts_with("created new/dir/f.txt"));
    assert_eq!(
        std::fs::read_to_string(w.path("new/dir/f.txt")).unwrap(),
        "hello"
    );
    assert_eq!(o.artifacts[0].uri, "new/dir/f.txt");
    assert_eq!(
        o.artifacts[0].sha256.as_deref(),
        Some(sha256_hex(b"hello").as_str())
    );

    // Overwrite keeps the mode and leaves no temp files behind.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        w.path("new/dir/f.txt"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let o = w
        .run(
            "write_file",
            json!({"path": "new/dir/f.txt", "content": "bye"}),
        )
        .await;
    assert!(out(&o).starts_with("overwrote"));
    let meta = std::fs::metadata(w.path("new/dir/f.txt")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o755);
    let names: Vec<_> = std::fs::read_dir(w.path("new/dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["f.txt"]);
    assert!(tools::is_mutating("write_file"));
}

#[tokio::test]
async fn edit_file_requires_exactly_one_match() {
    let w = ws();
    w.write("f.rs", "let a = 1;\nlet b = 1;\n");
    let o = w
        .run(
            "edit_file",
            json!({"path": "f.rs", "old": "let c", "new": "x"}),
        )
        .await;
    assert_eq!(err_kind(&o), ErrorKind::InvalidArgs);
    assert!(o.error.as_ref().unwrap().message.contains("no match"));
    assert_eq!(o.error.as_ref().unwrap().details["matches"], 0);

    let o = w
        .run(
            "edit_file",
            json!({"path": "f.rs", "old": " = 1;", "new": " = 2;"}),
        )
        .await;
    assert_eq!(err_kind(&o), ErrorKind::InvalidArgs);
    assert!(o
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("matches 2 places"));
    assert_eq!(
        std::fs::read_to_string(w.path("f.rs")).unwrap(),
        "let a = 1;\nlet b = 1;\n"
    );

    let o = w
        .run(
            "edit_file",
            json!({"path": "f.rs", "old": "b = 1", "new": "b = 22"}),
        )
        .await;
    assert!(out(&o).contains("line 2"));
    let after = "let a = 1;\nlet b = 22;\n";
    assert_eq!(std::fs::read_to_string(w.path("f.rs")).unwrap(), after);
    assert_eq!(
        o.artifacts[0].sha256.as_deref(),
        Some(sha256_hex(after.as_bytes()).as_str())
    );

    assert_eq!(
        err_kind(
            &w.run(
                "edit_file",
                json!({"path": "nope.rs", "old": "a", "new": "b"})
            )
            .await
        ),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn escaping_paths_are_refused() {
    let w = ws();
    std::fs::write(w.outside.join("secret"), "s").unwrap();
    std::fs::create_dir(w.outside.join("sub")).unwrap();
    symlink(w.outside.join("secret"), w.path("file_link")).unwrap();
    symlink(&w.outside, w.path("dir_link")).unwrap();

    let cases: Vec<(&str, Value)> = vec![
        ("read_file", json!({"path": "../x"})),
        ("write_file", json!({"path": "../x", "content": "x"})),
        ("read_file", json!({"path": "/etc/passwd"})),
        (
            "write_file",
            json!({"path": "/etc/agentd-test", "content": "x"}),
        ),
        ("read_file", json!({"path": "file_link"})),
        (
            "write_file",
            json!({"path": "file_link", "content": "pwned"}),
        ),
        (
            "edit_file",
            json!({"path": "file_link", "old": "s", "new": "t"}),
        ),
        ("read_file", json!({"path": "dir_link/secret"})),
        (
            "write_file",
            json!({"path": "dir_link/new.txt", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": "dir_link/sub/deeper/new.txt", "content": "x"}),
        ),
        ("list_dir", json!({"path": "dir_link"})),
        ("search", json!({"pattern": "s", "path": "dir_link"})),
    ];
    for (tool, args) in cases {
        let o = w.run(tool, args.clone()).await;
        assert_eq!(err_kind(&o), ErrorKind::OutsideWorkspace, "{tool} {args}");
        let e = o.error.unwrap();
        assert_eq!(e.details["path"], args["path"], "{tool} {args}");
    }
    // Nothing outside was touched.
    assert_eq!(
        std::fs::read_to_string(w.outside.join("secret")).unwrap(),
        "s"
    );
    assert!(!w.outside.join("new.txt").exists());
    assert!(!w.outside.join("sub/deeper").exists());
    // An absolute path inside the workspace is fine.
    w.write("in.txt", "in");
    let abs = w.path("in.txt");
    let o = w
        .run("read_file", json!({"path": abs.to_str().unwrap()}))
        .await;
    assert_eq!(out(&o), "in");
}

#[tokio::test]
async fn shell_runs_in_workspace_with_exit_codes() {
    let w = ws();
    w.write("marker.txt", "");
    let o = w.run("shell", json!({"command": "ls; echo err >&2"})).await;
    assert_eq!(out(&o), "marker.txt\nerr\n");
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(o.artifacts[0].kind, "command");
    assert_eq!(o.artifacts[0].uri, "command:ls; echo err >&2");

    let o = w
        .run("shell", json!({"command": "echo partial; exit 3"}))
        .await;
    assert!(!o.ok);
    assert!(o.error.is_none());
    assert_eq!(o.exit_code, Some(3));
    assert_eq!(o.output.as_deref(), Some("partial\n"));
    let data = o.into_result_data("c");
    assert_eq!(data["exit_code"], 3);
    assert_eq!(data["ok"], false);

    // stdin is empty, not the daemon's.
    let o = w.run("shell", json!({"command": "cat; echo done"})).await;
    assert_eq!(out(&o), "done\n");
    assert_eq!(
        err_kind(
            &w.run("shell", json!({"command": "true", "timeout_s": 601}))
                .await
        ),
        ErrorKind::InvalidArgs
    );
}

#[tokio::test]
async fn shell_timeout_kills_and_returns_quickly() {
    let w = ws();
    let t = Instant::now();
    let o = w
        .run(
            "shell",
            json!({"command": "echo before; sleep 60", "timeout_s": 1}),
        )
        .await;
    let took = t.elapsed();
    assert_eq!(err_kind(&o), ErrorKind::Timeout);
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(o.output.as_deref(), Some("before\n"));
    assert_eq!(o.exit_code, Some(128 + libc::SIGKILL));
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence/permission.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Reaps `pid`, which must have become our child: the test process is a child
/// subreaper, so a grandchild orphaned by the killed bash is reparented to it. Waiting in
/// `waitpid` is event-driven (it returns when the process dies); bounded by a timeout.
async fn reap_orphan(pid: i32, limit: Duration) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel();
    // A plain thread, not spawn_blocking: if the pid never dies, the test fails at the
    // timeout instead of the runtime's shutdown waiting for the blocked waitpid.
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: plain syscall on a pid; `status` is a valid out-pointer.
        let reaped = unsafe { libc::waitpid(pid, &mut status, 0) == pid };
        let _ = tx.send(reaped);
    });
    matches!(tokio::time::timeout(limit, rx).await, Ok(Ok(true)))
}

fn become_subreaper() {
    // SAFETY: prctl with integer args only. Makes orphaned descendants our children so
    // the test can reap them and `kill(pid, 0)` then proves the pid is gone.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
}

/// Starts `shell` with `command` (which must write a background pid followed by `\n`
/// to `$PIDFILE`) on a task, and returns the task and that pid once it is written.
async fn start_with_background(
    w: &Ws,
    command: &str,
) -> (tokio::task::JoinHandle<ToolOutcome>, i32) {
    let pidfile = w.path("bg.pid");
    let cmd = command.replace("$PIDFILE", pidfile.to_str().unwrap());
    let ctx = w.ctx.clone();
    let task =
        tokio::spawn(async move { tools::run("shell", &json!({"command": cmd}), &ctx).await });
    // Wait for the pid file on file-change events (watch first, then read, so no write
    // is missed).
    let (mut watcher, mut rx) = tools::watch::ArtifactWatcher::new().unwrap();
    watcher.watch_file(&pidfile).unwrap();
    let pid = loop {
        if let Ok(s) = std::fs::read_to_string(&pidfile) {
            if s.ends_with('\n') {
                break s.trim().parse().unwrap();
            }
        }
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("background process never started");
    };
    assert!(alive(pid));
    (task, pid)
}

async fn cancel_and_time(w: &Ws, task: tokio::task::JoinHandle<ToolOutcome>) -> ToolOutcome {
    let t = Instant::now();
    w.ctx.cancel.cancel();
    let o = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("cancel did not return promptly")
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    o
}

#[tokio::test]
async fn cancel_kills_process_group_including_grandchild() {
    become_subreaper();
    let w = ws();
    let (task, pid) = start_with_background(&w, "sleep 60 & echo $! > $PIDFILE; sleep 60").await;
    let o = cancel_and_time(&w, task).await;
    assert_eq!(err_kind(&o), ErrorKind::Interrupted);
    // The grandchild was in the group and got SIGKILL: it dies, we reap it, its pid is
    // gone.
    assert!(
        reap_orphan(pid, Duration::from_secs(2)).await,
        "grandchild {pid} survived"
    );
    assert!(!alive(pid));
}

#[tokio::test]
async fn cancel_returns_even_if_an_escaped_process_holds_the_pipe() {
    become_subreaper();
    let w = ws();
    // `setsid` moves the grandchild out of the group, so the kill cannot reach it and it
    // keeps the output pipe open.
    let (task, pid) =
        start_with_background(&w, "setsid sleep 60 & echo $! > $PIDFILE; sleep 60").await;
    let o = cancel_and_time(&w, task).await;
    assert_eq!(err_kind(&o), ErrorKind::Interrupted);
    assert!(alive(pid), "escaped process should be outside the group");
    // SAFETY: signalling a pid we started; cleans up the escaped sleep.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(reap_orphan(pid, Duration::from_secs(2)).await);
}

#[tokio::test]
async fn background_job_holding_pipe_does_not_stall() {
    let w = ws();
    let t = Instant::now();
    let o = w
        .run("shell", json!({"command": "sleep 60 & echo started"}))
        .await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(o.exit_code, Some(0));
    assert!(o.ok);
    assert!(o.output.as_deref().unwrap().starts_with("started\n"));
}

#[tokio::test]
async fn shell_output_over_cap_is_stored_exactly() {
    let w = ws();
    // 40,000 bytes with invalid UTF-8 sprinkled in.
    let o = w
        .run(
            "shell",
            json!({"command": "for i in $(seq 1 4000); do printf 'abcdefgh\\xff\\n'; done"}),
        )
        .await;
    assert_eq!(o.exit_code, Some(0));
    let mut expected = Vec::new();
    for _ in 0..4000 {
        expected.extend_from_slice(b"abcdefgh\xff\n");
    }
    let shown = out(&o);
    assert!(shown.len() <= 16 * 1024);
    assert!(shown.contains("…[truncated: showing"));
    assert!(shown.starts_with("abcdefgh\u{fffd}\n"));
    let sha = sha256_hex(&expected);
    let res = o.resource.as_ref().unwrap();
    assert_eq!(res["sha256"], sha.as_str());
    assert_eq!(res["bytes"], expected.len());
    assert_eq!(res["media_type"], "application/octet-stream");
    let stored = std::fs::read(w.ctx.resources_dir.join(&sha)).unwrap();
    assert_eq!(stored, expected);
    assert_eq!(sha256_hex(&stored), sha);
    let cmd_art = o.artifacts.iter().find(|a| a.kind == "command").unwrap();
    assert_eq!(cmd_art.sha256.as_deref(), Some(sha.as_str()));
}

#[tokio::test]
async fn shell_invalid_utf8_small_output() {
    let w = ws();
    let o = w
        .run("shell", json!({"command": "printf '\\xc3\\x28\\xff'"}))
        .await;
    assert_eq!(out(&o), "\u{fffd}(\u{fffd}");
    assert!(o.resource.is_none());
}

#[tokio::test]
async fn already_cancelled_context_runs_nothing() {
    let w = ws();
    w.ctx.cancel.cancel();
    let o = w
        .run("write_file", json!({"path": "x", "content": "y"}))
        .await;
    assert_eq!(err_kind(&o), ErrorKind::Interrupted);
    assert!(!w.path("x").exists());
}

#[test]
fn context_requires_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let e = ToolContext::new(dir.path().join("missing"), dir.path()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    std::fs::write(dir.path().join("f"), "").unwrap();
    let e = ToolContext::new(dir.path().join("f"), dir.path()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgs);
    let ctx = ToolContext::new(dir.path(), dir.path().join("r")).unwrap();
    assert!(ctx.workspace.is_absolute());
    assert_eq!(ctx.workspace, std::fs::canonicalize(dir.path()).unwrap());
    assert!(Path::new(&ctx.workspace).is_dir());
}

#[tokio::test]
async fn shell_env_remove_hides_variables() {
    let mut w = ws();
    let o = w
        .run("shell", json!({"command": "echo ${HOME-unset}"}))
        .await;
    assert_ne!(out(&o), "unset\n");
    w.ctx.shell_env_remove = vec!["HOME".to_string()];
    let o = w
        .run("shell", json!({"command": "echo ${HOME-unset}"}))
        .await;
    assert_eq!(out(&o), "unset\n");
}

/// A missing component followed by `..` climbs back into real directories; a symlink met
/// after that must still be followed and judged (`nope/../escape` is `escape`'s target).
#[tokio::test]
async fn dotdot_after_missing_component_still_follows_symlinks() {
    let w = ws();
    std::fs::write(w.outside.join("secret"), "s").unwrap();
    symlink(&w.outside, w.path("escape")).unwrap();
    let cases: Vec<(&str, Value)> = vec![
        (
            "write_file",
            json!({"path": "nope/../escape/pwned.txt", "content": "pwned"}),
        ),
        (
            "write_file",
            json!({"path": "nope/deeper/../../escape/pwned.txt", "content": "pwned"}),
        ),
        (
            "edit_file",
            json!({"path": "nope/../escape/secret", "old": "s", "new": "t"}),
        ),
        ("read_file", json!({"path": "nope/../escape/secret"})),
        ("list_dir", json!({"path": "nope/../escape"})),
    ];
    for (tool, args) in cases {
        let o = w.run(tool, args.clone()).await;
        assert_eq!(err_kind(&o), ErrorKind::OutsideWorkspace, "{tool} {args}");
    }
    assert!(!w.outside.join("pwned.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.outside.join("secret")).unwrap(),
        "s"
    );
    assert!(!w.path("nope").exists(), "a refused write creates nothing");
    // The same shape staying inside the workspace still works.
    w.write("real/in.txt", "in");
    let o = w
        .run("read_file", json!({"path": "nope/../real/in.txt"}))
        .await;
    assert_eq!(out(&o), "in");
    let o = w
        .run("read_file", json!({"path": "nope/../real/gone.txt"}))
        .await;
    assert_eq!(err_kind(&o), ErrorKind::NotFound);
}

/// The daemon runs under umask 0077, but what tools create is the user's: `shell`
/// commands get the user's umask back, and new files and directories from the file
/// tools get 0666/0777 minus it. A replaced file keeps its own mode.
#[tokio::test]
async fn created_files_follow_the_users_umask_not_the_daemons() {
    use std::os::unix::fs::PermissionsExt;
    // This test binary plays the daemon: its own umask is tightened, as daemon.rs does.
    // SAFETY: umask(2) has no memory-safety preconditions.
    unsafe { libc::umask(0o077) };
    tools::set_user_umask(0o022);
    let w = ws();
    let mode = |rel: &str| std::fs::metadata(w.path(rel)).unwrap().permissions().mode() & 0o777;
    let o = w
        .run(
            "shell",
            json!({"command": "touch x && mkdir d && stat -c %a x d && umask"}),
        )
        .await;
    assert_eq!(out(&o), "644\n755\n0022\n");
    let o = w
        .run(
            "write_file",
            json!({"path": "new/deeper/f.txt", "content": "x"}),
        )
        .await;
    out(&o);
    assert_eq!(mode("new/deeper/f.txt"), 0o644);
    assert_eq!(mode("new/deeper"), 0o755);
    assert_eq!(mode("new"), 0o755);
    w.write("private.txt", "old");
    std::fs::set_permissions(
        w.path("private.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let o = w
        .run(
            "edit_file",
            json!({"path": "private.txt", "old": "old", "new": "new"}),
        )
        .await;
    out(&o);
    assert_eq!(mode("private.txt"), 0o600);
    let o = w
        .run(
            "write_file",
            json!({"path": "private.txt", "content": "again"}),
        )
        .await;
    out(&o);
    assert_eq!(mode("private.txt"), 0o600);
}
