//! Black-box hostile tests of the command sandbox (docs/sandbox.md#contract): real turns with the
//! `script` provider run `shell` commands that try to get out, on the running kernel.
//! `.ci/sandbox.sh` runs this file again as an unprivileged user.

use agentd_tests::{bin, is_type, Daemon, DaemonBuilder, RpcConn};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "sandbox/escapes.rs"]
mod escapes;
#[path = "sandbox/git.rs"]
mod git;
#[path = "sandbox/hooks.rs"]
mod hooks;
#[path = "sandbox/sockets.rs"]
mod sockets;
#[path = "sandbox/spare.rs"]
mod spare;
#[path = "sandbox/survivors.rs"]
mod survivors;

/// Files outside the daemon's temp dir: the private `/tmp` of a sandbox would hide
/// anything under `/tmp`, so the "outside" and the fake home live elsewhere to test the
/// write rules and the hidden set themselves.
struct Outside {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

fn outside() -> Outside {
    let base = std::env::var_os("AGENTD_SANDBOX_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("sbx")
        .tempdir_in(&base)
        .unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    for d in ["home/.ssh", "home/.aws", "out"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE-KEY-MATERIAL").unwrap();
    std::fs::write(home.join(".aws/credentials"), "AWS-SECRET-MATERIAL").unwrap();
    std::fs::write(home.join(".netrc"), "NETRC-SECRET-MATERIAL").unwrap();
    std::fs::write(root.join("out/victim"), "original").unwrap();
    Outside {
        _dir: dir,
        root,
        home,
    }
}

fn builder(o: &Outside) -> DaemonBuilder {
    Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .env("HOME", &o.home)
        .env("DEPLOY_TOKEN", "deploy-token-value-123")
        .env("XDG_RUNTIME_DIR", o.root.join("runtime"))
}

fn create(c: &mut RpcConn, d: &Daemon, sandbox: Option<Value>) -> String {
    let mut p = json!({"workspace": d.workspace()});
    if let Some(s) = sandbox {
        p["sandbox"] = s;
    }
    c.call_ok("agentd/create", p)["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Runs one turn whose first step calls `calls` (tool name, args); returns the turn's
/// answer and the session's events.
fn turn_calling(
    d: &Daemon,
    c: &mut RpcConn,
    sid: &str,
    calls: &[(&str, Value)],
    extra: Value,
) -> (Value, Vec<Value>) {
    let name = format!("m{}.json", rand::random::<u64>());
    let p = d.root().join(&name);
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(n, a)| json!({"name": n, "args": a}))
        .collect();
    let body = json!({"rules": [{"steps": [{"tool_calls": tool_calls}, {"text": "done"}]}]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    let mut params =
        json!({"session_id": sid, "input": "go", "model": format!("script:{}", p.display())});
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            params[k] = v.clone();
        }
    }
    c.set_call_timeout(Duration::from_secs(60));
    let r = c.call_ok("agentd/turn", params);
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    (r, evs)
}

/// Runs `cmd` as one `shell` call in a turn; returns the `tool_result` data.
fn shell(d: &Daemon, c: &mut RpcConn, sid: &str, cmd: &str, extra: Value) -> Value {
    let (r, evs) = turn_calling(d, c, sid, &[("shell", json!({"command": cmd}))], extra);
    assert_eq!(r["status"], "completed", "{r}");
    evs.iter()
        .rev()
        .find(|e| is_type(e, "tool_result"))
        .expect("a tool_result")["data"]
        .clone()
}

fn output(r: &Value) -> String {
    r["output"].as_str().unwrap_or("").to_string()
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[test]
fn writes_outside_the_workspace_are_denied_every_way() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let out = o.root.join("out");
    let cmd = format!(
        "echo inside > ok.txt && echo WS-OK
         echo x > {o}/direct 2>/dev/null && echo BAD-DIRECT
         ln -s {o}/victim link && (echo x > link) 2>/dev/null && echo BAD-SYMLINK
         echo x > /proc/self/root{raw}/victim 2>/dev/null && echo BAD-PROCROOT
         ln {o}/victim hard 2>/dev/null && echo BAD-HARDLINK
         mv {o}/victim moved 2>/dev/null && echo BAD-RENAME
         echo x > {o}/denied-with-hint
         true",
        o = q(&out),
        raw = out.display()
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    assert!(text.contains("WS-OK"), "{r:#}");
    for bad in [
        "BAD-DIRECT",
        "BAD-SYMLINK",
        "BAD-PROCROOT",
        "BAD-HARDLINK",
        "BAD-RENAME",
    ] {
        assert!(!text.contains(bad), "{bad}: {r:#}");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("victim")).unwrap(),
        "original"
    );
    assert!(!out.join("direct").exists() && !out.join("denied-with-hint").exists());
    assert!(d.workspace().join("ok.txt").exists());
    let sb = &r["sandbox"];
    assert_eq!(sb["level"], "full", "{sb:#}");
    assert_eq!(sb["mode"], "workspace_write");
    assert_eq!(sb["network"], "none");
    assert_eq!(sb["seccomp"], true);
    assert!(sb["landlock"]["abi"].as_i64().unwrap() >= 1, "{sb:#}");
    let denials = sb["denials"].as_array().unwrap();
    assert!(
        denials.iter().any(|d| d["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("denied-with-hint")),
        "{sb:#}"
    );
    assert!(text.contains("[sandbox] write to"), "{text}");
}

#[test]
fn hidden_paths_and_secrets_are_not_visible() {
    let o = outside();
    let d = builder(&o).start();
    std::fs::write(d.home().join("agentd-secret"), "AGENTD-HOME-MATERIAL").unwrap();
    let runtime = o.root.join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::write(runtime.join("bus"), "RUNTIME-MATERIAL").unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let cmd = format!(
        "cat {h}/.ssh/id_ed25519 {h}/.aws/credentials {h}/.netrc {a}/agentd-secret {x}/bus 2>&1; env; ls -a {h}",
        h = q(&o.home),
        a = q(d.home()),
        x = q(&runtime)
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    for secret in [
        "PRIVATE-KEY-MATERIAL",
        "AWS-SECRET-MATERIAL",
        "NETRC-SECRET-MATERIAL",
        "AGENTD-HOME-MATERIAL",
        "RUNTIME-MATERIAL",
        "deploy-token-value-123",
        "AGENTD_",
        "DEPLOY_TOKEN",
    ] {
        assert!(!text.contains(secret), "{secret} visible: {text}");
    }
    assert!(text.contains("PATH="), "{text}");
    assert!(text.contains("TMPDIR=/tmp"), "{text}");
    // The model is told why, not left with a bare ENOENT.
    assert!(
        r["sandbox"]["denials"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["kind"] == "hidden"
                && d["path"]
                    .as_str()
                    .unwrap_or("")
                    .ends_with(".ssh/id_ed25519")),
        "{r:#}"
    );
    assert!(text.contains("is hidden by the sandbox"), "{text}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let started = evs.iter().find(|e| is_type(e, "turn_started")).unwrap();
    let hidden = started["data"]["sandbox"]["hidden"].as_array().unwrap();
    assert!(
        hidden
            .iter()
            .any(|h| h.as_str().unwrap().ends_with("/home/.ssh")),
        "{started:#}"
    );
}

#[test]
fn the_daemon_socket_is_out_of_reach() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let ctl = bin("agentctl");
    let cmd = format!(
        "{ctl} --socket {s} ls >/dev/null 2>&1 && echo BAD-BY-PATH
         ln -s {s} sock-link; {ctl} --socket sock-link ls >/dev/null 2>&1 && echo BAD-BY-SYMLINK
         echo probed",
        ctl = q(&ctl),
        s = q(d.socket()),
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    assert!(text.contains("probed"), "{r:#}");
    assert!(!text.contains("BAD-"), "{r:#}");
}

#[test]
fn network_and_kernel_escape_hatches_are_closed() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let abs_name = format!("agentd-test-{}", std::process::id());
    let abs = std::os::unix::net::UnixListener::bind_addr(
        &<std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            abs_name.as_bytes(),
        )
        .unwrap(),
    )
    .unwrap();
    abs.set_nonblocking(true).unwrap();
    let daemon_pid = d.pid().expect("daemon pid");
    let p = q(&bin("sandbox-probe"));
    let cmd = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{tport}) 2>/dev/null && echo BAD-TCP
         {p} udp {uport}; {p} abstract {abs_name}; {p} io_uring; {p} tiocsti
         {p} ptrace {daemon_pid}; {p} kill {daemon_pid}; {p} mount; {p} unshare; {p} x32
         ls /proc/$$/fd > /tmp/fds; echo \"fds: $(tr '\\n' ' ' < /tmp/fds)\"",
        tport = tcp.local_addr().unwrap().port(),
        uport = udp.local_addr().unwrap().port(),
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    assert!(!text.contains("BAD-TCP"), "{text}");
    // The datagram goes to the sandbox's own loopback (network `none` has one); the
    // host's socket below never sees it.
    for probe in [
        "abstract", "io_uring", "tiocsti", "ptrace", "kill", "mount", "unshare", "x32",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{probe}: ")))
            .unwrap_or_else(|| panic!("no {probe} line: {text}"));
        assert!(!line.ends_with(": ok"), "{line}\n{text}");
    }
    // These are refused by the seccomp filter itself, whatever else is in place.
    for refused in [
        "tiocsti: EPERM",
        "io_uring: EPERM",
        "mount: EPERM",
        "unshare: EPERM",
        "x32: ENOSYS",
    ] {
        assert!(
            text.lines().any(|l| l == refused),
            "expected {refused}: {text}"
        );
    }
    assert!(
        text.contains("fds: 0 1 2 \n") || text.ends_with("fds: 0 1 2 "),
        "{text}"
    );
    let mut buf = [0u8; 16];
    assert!(udp.recv_from(&mut buf).is_err(), "a datagram arrived");
    assert!(abs.accept().is_err(), "the abstract socket was reached");
    // The daemon is alive and well.
    c.call_ok("agentd/hello", json!({}));
}

#[test]
fn nothing_a_command_starts_survives_and_tmp_is_private() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let marker = format!("/tmp/agentd-sbx-private-{}", std::process::id());
    let cmd = format!(
        "setsid sleep 31.4159 >/dev/null 2>&1 & (sleep 31.4159 >/dev/null 2>&1 &); nohup sleep 31.4159 >/dev/null 2>&1 &
         echo private > {marker} && cat {marker}"
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    assert!(output(&r).contains("private"), "{r:#}");
    assert!(
        !Path::new(&marker).exists(),
        "the sandbox wrote the host's /tmp"
    );
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("31.4159"))
        .collect();
    assert!(survivors.is_empty(), "{survivors:?}");
}

#[test]
fn fork_bombs_and_memory_hogs_are_capped() {
    let o = outside();
    let d = builder(&o)
        .config("[sandbox]\npids_max = 48\nmemory_max = 67108864\n")
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let cmd = format!("{} forks 300", q(&bin("sandbox-probe")));
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    let forks: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("forks: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{r:#}"));
    let sb = &r["sandbox"];
    assert!(
        forks < 48,
        "{forks} of 300 forks ran past a cap of 48: {r:#}"
    );
    c.call_ok("agentd/hello", json!({}));
    if sb["limits"]["cgroup"].is_null() {
        // No cgroup to put a memory cap on (not root, not delegated): recorded as such.
        // SAFETY: geteuid never fails.
        assert_ne!(
            unsafe { libc::geteuid() },
            0,
            "root always gets a cgroup: {sb:#}"
        );
        assert_eq!(sb["limits"]["rlimit_nproc"], 48, "{sb:#}");
        return;
    }
    let r = shell(
        &d,
        &mut c,
        &sid,
        "head -c 400000000 /dev/zero | tail > /dev/null; echo exit=$?",
        json!({}),
    );
    assert!(
        r["sandbox"]["oom_kills"].as_u64().unwrap_or(0) >= 1,
        "{r:#}"
    );
    c.call_ok("agentd/hello", json!({}));
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git is needed by the sandbox tests (.ci/sandbox.sh installs it)");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// Tries every delayed escape through git metadata, then does ordinary git work.
fn git_attack(branch: &str) -> String {
    format!(
        "echo '#!/bin/sh' > .git/hooks/post-commit 2>/dev/null && echo BAD-HOOK
         git config core.fsmonitor 'touch /tmp/pwned' 2>/dev/null && echo BAD-FSMONITOR
         git config core.hooksPath /tmp 2>/dev/null && echo BAD-HOOKSPATH
         echo {branch} > a.txt && git add a.txt && git commit -qm one && echo COMMITTED
         git checkout -qb {branch} && echo BRANCHED"
    )
}

#[test]
fn git_metadata_is_protected_while_commits_work() {
    let o = outside();
    let d = builder(&o).start();
    let ws = d.workspace().to_path_buf();
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "user.email", "t@example.com"]);
    git(&ws, &["config", "user.name", "t"]);
    std::fs::write(ws.join(".gitmodules"), "").unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let cmd = format!(
        "{}\n echo x >> .gitmodules 2>/dev/null && echo BAD-GITMODULES",
        git_attack("side")
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    assert!(!text.contains("BAD-"), "{r:#}");
    assert!(
        text.contains("COMMITTED") && text.contains("BRANCHED"),
        "{r:#}"
    );
    assert!(!ws.join(".git/hooks/post-commit").exists());
    let cfg = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    assert!(
        !cfg.contains("fsmonitor") && !cfg.contains("hooksPath"),
        "{cfg}"
    );

    // A linked worktree: its `.git` pointer, its gitdir's config and the common dir's
    // hooks are protected; the commit works.
    let wt = d.root().join("wt");
    git(
        &ws,
        &["worktree", "add", "-q", wt.to_str().unwrap(), "-b", "wtb"],
    );
    let sid = c.call_ok("agentd/create", json!({"workspace": wt}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = shell(
        &d,
        &mut c,
        &sid,
        &format!(
            "{}\n echo 'gitdir: /tmp' > .git 2>/dev/null && echo BAD-POINTER",
            git_attack("side2")
        ),
        json!({}),
    );
    let text = output(&r);
    assert!(!text.contains("BAD-"), "{r:#}");
    assert!(
        text.contains("COMMITTED") && text.contains("BRANCHED"),
        "{r:#}"
    );
    assert!(!ws.join(".git/hooks/post-commit").exists());
}

#[test]
fn read_only_and_full_access_modes() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, Some(json!({"mode": "read_only"})));
    let r = shell(
        &d,
        &mut c,
        &sid,
        "echo x > f 2>/dev/null && echo BAD-WRITE; echo t > /tmp/t && echo TMP-OK; ls >/dev/null && echo READ-OK",
        json!({}),
    );
    let text = output(&r);
    assert!(
        !text.contains("BAD-WRITE") && text.contains("TMP-OK") && text.contains("READ-OK"),
        "{r:#}"
    );
    assert_eq!(r["sandbox"]["mode"], "read_only");
    assert!(!d.workspace().join("f").exists());

    // full_access, asked for by this turn: no sandbox, recorded.
    let victim = o.root.join("out/full");
    let r = shell(
        &d,
        &mut c,
        &sid,
        &format!("echo x > {} && echo WROTE", q(&victim)),
        json!({"sandbox": {"mode": "full_access"}}),
    );
    assert!(output(&r).contains("WROTE"), "{r:#}");
    assert_eq!(r["sandbox"]["level"], "none");
    assert_eq!(r["sandbox"]["mode"], "full_access");
    assert!(victim.exists());

    let bad = c.call(
        "agentd/create",
        json!({"workspace": d.workspace(), "sandbox": {"mode": "yolo"}}),
    );
    assert_eq!(bad["error"]["data"]["kind"], "invalid_args", "{bad}");
}

#[test]
fn without_user_namespaces_the_fallback_still_confines_and_says_degraded() {
    let o = outside();
    let d = builder(&o).env("AGENTD_SANDBOX_FORCE", "no_userns").start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ctl = bin("agentctl");
    let cmd = format!(
        "echo x > {o}/direct 2>/dev/null && echo BAD-DIRECT
         ln -s {o}/victim link && (echo x > link) 2>/dev/null && echo BAD-SYMLINK
         cat {h}/.ssh/id_ed25519 2>/dev/null
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo BAD-TCP
         env | grep -c DEPLOY_TOKEN
         setsid sleep 27.1828 >/dev/null 2>&1 &
         {ctl} --socket {s} ls; echo ctl-exit=$?",
        o = q(&o.root.join("out")),
        h = q(&o.home),
        port = tcp.local_addr().unwrap().port(),
        ctl = q(&ctl),
        s = q(d.socket()),
    );
    let r = shell(&d, &mut c, &sid, &cmd, json!({}));
    let text = output(&r);
    assert!(
        !text.contains("BAD-") && !text.contains("PRIVATE-KEY"),
        "{r:#}"
    );
    assert_eq!(r["sandbox"]["level"], "degraded", "{r:#}");
    assert!(
        r["sandbox"]["reason"]
            .as_str()
            .unwrap()
            .contains("no user namespaces"),
        "{r:#}"
    );
    // At this level seccomp refuses socket(AF_UNIX) with either network: agentctl
    // cannot even reach the socket (exit 4).
    assert!(text.contains("ctl-exit=4"), "{text}");
    let host = create(&mut c, &d, Some(json!({"network": "host"})));
    let cmd = format!(
        "{ctl} --socket {s} ls; echo ctl-exit=$?",
        ctl = q(&ctl),
        s = q(d.socket())
    );
    let r = shell(&d, &mut c, &host, &cmd, json!({}));
    assert!(output(&r).contains("ctl-exit=4"), "{r:#}");
    drop(c);
    drop(d);
    // A socket grant lifts that refusal (this level cannot limit it to the granted
    // path): the socket is connectable and the daemon itself refuses
    // (permission_denied, agentctl exit 3), logged.
    let tmp = std::env::temp_dir().canonicalize().unwrap();
    let d = builder(&o)
        .env("AGENTD_SANDBOX_FORCE", "no_userns")
        .config(&format!("[sandbox]\nsockets = [{tmp:?}]\n"))
        .start();
    let mut c = d.connect();
    let host = create(&mut c, &d, Some(json!({"network": "host"})));
    let cmd = format!(
        "{ctl} --socket {s} ls; echo ctl-exit=$?",
        ctl = q(&ctl),
        s = q(d.socket())
    );
    let r = shell(&d, &mut c, &host, &cmd, json!({}));
    let text = output(&r);
    assert!(
        r["sandbox"]["unix_sockets"]
            .as_str()
            .is_some_and(|f| f.contains("every socket reachable") || f.contains("Landlock")),
        "{r:#}"
    );
    let unavailable = r["sandbox"]["unavailable"].to_string();
    assert!(
        unavailable.contains("loopback") && unavailable.contains("private /tmp"),
        "{r:#}"
    );
    assert!(text.contains("ctl-exit=3"), "{text}");
    assert!(text.contains("permission_denied"), "{text}");
    let log = std::fs::read_to_string(d.root().join("agentd.out")).unwrap();
    assert!(
        log.contains("refused a request from a sandboxed command"),
        "{log}"
    );
    let survivors = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains("27.1828"))
        .count();
    assert_eq!(survivors, 0);
}

#[test]
fn without_user_namespaces_git_metadata_is_put_back_and_commits_work() {
    let o = outside();
    let d = builder(&o).env("AGENTD_SANDBOX_FORCE", "no_userns").start();
    let ws = d.workspace().to_path_buf();
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "user.email", "t@example.com"]);
    git(&ws, &["config", "user.name", "t"]);
    let before = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let r = shell(&d, &mut c, &sid, &git_attack("side"), json!({}));
    let text = output(&r);
    assert!(
        text.contains("COMMITTED") && text.contains("BRANCHED"),
        "{r:#}"
    );
    assert_eq!(r["sandbox"]["level"], "degraded", "{r:#}");
    // Landlock alone cannot stop these writes; they are undone before the call returns.
    assert!(!ws.join(".git/hooks/post-commit").exists(), "{r:#}");
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        before
    );
    let denials = r["sandbox"]["denials"].as_array().unwrap();
    assert!(
        denials
            .iter()
            .any(|d| d["kind"] == "protected" && d["hint"].as_str().unwrap().contains("restored")),
        "{r:#}"
    );
}

#[test]
fn a_sandbox_that_fails_to_build_fails_the_call_and_runs_nothing() {
    let o = outside();
    let d = builder(&o)
        .env("AGENTD_SANDBOX_FORCE", "fail_setup")
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let r = shell(&d, &mut c, &sid, "echo RAN > ran.txt", json!({}));
    assert_eq!(r["ok"], false, "{r:#}");
    assert_eq!(r["error"]["kind"], "sandbox_unavailable", "{r:#}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("on purpose"),
        "{r:#}"
    );
    assert!(r["sandbox"]["error"].is_string(), "{r:#}");
    assert!(!d.workspace().join("ran.txt").exists());
}

#[test]
fn without_landlock_commands_are_refused_unless_warn() {
    let o = outside();
    let d = builder(&o)
        .env("AGENTD_SANDBOX_FORCE", "no_landlock")
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let r = shell(&d, &mut c, &sid, "echo RAN > ran.txt", json!({}));
    assert_eq!(r["ok"], false, "{r:#}");
    assert_eq!(r["error"]["kind"], "sandbox_unavailable", "{r:#}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("Landlock"),
        "{r:#}"
    );
    assert!(!d.workspace().join("ran.txt").exists());
    drop(c);
    drop(d);

    let d = builder(&o)
        .env("AGENTD_SANDBOX_FORCE", "no_landlock")
        .config("[sandbox]\non_unavailable = \"warn\"\n")
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let r = shell(&d, &mut c, &sid, "echo RAN > ran.txt; echo ok", json!({}));
    assert_eq!(r["ok"], true, "{r:#}");
    assert_eq!(r["sandbox"]["level"], "none", "{r:#}");
    assert!(r["sandbox"]["reason"]
        .as_str()
        .unwrap()
        .contains("landlock"));
    assert!(d.workspace().join("ran.txt").exists());
}

#[test]
fn file_tools_obey_the_protected_set() {
    let o = outside();
    let d = builder(&o).start();
    let ws = d.workspace().to_path_buf();
    git(&ws, &["init", "-q"]);
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let name = d.root().join("w.json");
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "write_file", "args": {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}}]},
        {"text": "done"}
    ]}]});
    std::fs::write(&name, serde_json::to_vec(&body).unwrap()).unwrap();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": format!("script:{}", name.display())}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let res = evs.iter().find(|e| is_type(e, "tool_result")).unwrap();
    assert_eq!(res["data"]["ok"], false, "{res:#}");
    assert_eq!(res["data"]["error"]["kind"], "permission_denied", "{res:#}");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
}

/// Runs one `shell` call asking for `grant` in `ask` mode; the subscribed client answers
/// `answer` (`None`: no client ever answers, so nothing is approved). Returns the
/// permission request seen, the `permission_decision` and the `tool_result` data.
fn escalate(
    d: &Daemon,
    c: &mut RpcConn,
    client: &mut RpcConn,
    sid: &str,
    cmd: &str,
    grant: Value,
    answer: Value,
) -> (Value, Value, Value) {
    let p = d.root().join(format!("e{}.json", rand::random::<u64>()));
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "shell", "args": {
            "command": cmd, "sandbox_grant": grant, "justification": "the test needs it"}}]},
        {"text": "done"}
    ]}]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    let params = json!({"session_id": sid, "input": "go", "permission_mode": "ask",
        "model": format!("script:{}", p.display())});
    let mut turn_conn = d.connect();
    let running = std::thread::spawn(move || turn_conn.try_call("agentd/turn", params));
    let req = client
        .wait_for(
            |m| m["method"] == "agentd/permission" && m.get("id").is_some(),
            Duration::from_secs(20),
        )
        .expect("a permission request");
    let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": answer});
    client.send_raw(format!("{reply}\n").as_bytes()).unwrap();
    let r = running.join().unwrap().unwrap();
    assert_eq!(r["result"]["status"], "completed", "{r}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let dec = evs
        .iter()
        .rev()
        .find(|e| is_type(e, "permission_decision"))
        .unwrap()["data"]
        .clone();
    let res = evs
        .iter()
        .rev()
        .find(|e| is_type(e, "tool_result"))
        .unwrap()["data"]
        .clone();
    (req["params"].clone(), dec, res)
}

#[test]
fn escalation_is_asked_in_ask_mode_and_never_taken_in_auto() {
    let o = outside();
    let d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let mut client = d.connect();
    client.call_ok(
        "agentd/subscribe",
        json!({"session_id": sid, "permissions": true}),
    );
    let target = o.root.join("out");
    let cmd = format!("echo x > {}/granted && echo WROTE", q(&target));
    let grant = json!({"write": target});

    // Denied: the command runs not at all.
    let (req, dec, res) = escalate(
        &d,
        &mut c,
        &mut client,
        &sid,
        &cmd,
        grant.clone(),
        json!({"decision": "deny"}),
    );
    assert_eq!(req["sandbox_grant"], grant, "{req:#}");
    assert_eq!(req["justification"], "the test needs it");
    assert_eq!(dec["decision"], "deny", "{dec:#}");
    assert_eq!(dec["grant"], grant);
    assert_eq!(res["ok"], false);
    assert!(!target.join("granted").exists());

    // Approved for this call: the write outside the workspace works, once.
    let (_, dec, res) = escalate(
        &d,
        &mut c,
        &mut client,
        &sid,
        &cmd,
        grant.clone(),
        json!({"decision": "allow"}),
    );
    assert_eq!(dec["decision"], "allow", "{dec:#}");
    assert_eq!(dec["scope"], "call");
    assert_eq!(dec["grant"], grant);
    assert!(output(&res).contains("WROTE"), "{res:#}");
    assert!(target.join("granted").exists());
    assert!(res["sandbox"]["writable_roots"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r.as_str() == target.to_str()));
    // The next call, without a grant, is back to the session's sandbox.
    let r = shell(
        &d,
        &mut c,
        &sid,
        &format!("echo y > {}/again 2>/dev/null && echo BAD", q(&target)),
        json!({}),
    );
    assert!(!output(&r).contains("BAD"), "{r:#}");

    // `auto` never widens: the call is refused without running.
    let p = d.root().join("auto.json");
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "shell", "args": {"command": format!("echo z > {}/auto", q(&target)),
            "sandbox_grant": grant}}]},
        {"text": "done"}
    ]}]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": format!("script:{}", p.display())}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let dec = evs
        .iter()
        .rev()
        .find(|e| is_type(e, "permission_decision"))
        .unwrap();
    assert_eq!(dec["data"]["reason"], "escalation_needs_ask", "{dec:#}");
    assert!(!target.join("auto").exists());
}

#[test]
fn file_tools_and_commands_agree_on_the_hidden_set() {
    let o = outside();
    // `auto` mode in a workspace that is $HOME needs the config's consent.
    let d = builder(&o)
        .config("[sandbox]\nallow_auto_in_home = true\n")
        .start();
    let mut c = d.connect();
    // The home itself as the workspace: its credential folders stay hidden inside it.
    let sid = c.call_ok("agentd/create", json!({"workspace": o.home}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let name = d.root().join("files.json");
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [
            {"name": "read_file", "args": {"path": ".ssh/id_ed25519"}},
            {"name": "list_dir", "args": {"path": "."}},
            {"name": "search", "args": {"query": "MATERIAL"}},
            {"name": "shell", "args": {"command": "cat .ssh/id_ed25519 .aws/credentials; ls -A"}}
        ]},
        {"text": "done"}
    ]}]});
    std::fs::write(&name, serde_json::to_vec(&body).unwrap()).unwrap();
    let r = c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "model": format!("script:{}", name.display())}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let res: Vec<&Value> = evs.iter().filter(|e| is_type(e, "tool_result")).collect();
    assert_eq!(res.len(), 4, "{evs:#?}");
    assert_eq!(
        res[0]["data"]["error"]["kind"], "permission_denied",
        "{:#}",
        res[0]
    );
    for r in &res[1..] {
        let text = r["data"]["output"].as_str().unwrap_or("");
        assert!(!text.contains("MATERIAL"), "{r:#}");
        assert!(
            !text.contains(".ssh") || r["data"]["sandbox"].is_object(),
            "{r:#}"
        );
    }
    let listing = res[1]["data"]["output"].as_str().unwrap();
    assert!(
        !listing.contains(".ssh") && !listing.contains(".aws") && !listing.contains(".netrc"),
        "{listing}"
    );
}

#[test]
fn agentctl_flags_choose_the_sandbox() {
    let o = outside();
    let d = builder(&o).start();
    let p = d.root().join("flags.json");
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "shell", "args": {"command": "echo x > made.txt; (exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | head -1"}}]},
        {"text": "done"}
    ]}]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    let model = format!("script:{}", p.display());
    let ws = d.workspace().to_str().unwrap().to_string();
    let out = d.agentctl([
        "run",
        "go",
        "--workspace",
        &ws,
        "--model",
        &model,
        "--sandbox",
        "read_only",
        "--json",
    ]);
    out.assert_code(0);
    assert!(!d.workspace().join("made.txt").exists(), "{out:?}");
    let sid = out.json()["session_id"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| {
            let ls = d.agentctl(["ls", "--json"]);
            ls.json()["sessions"][0]["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        });
    let mut c = d.connect();
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let first = &evs[0];
    assert_eq!(first["data"]["sandbox"]["mode"], "read_only", "{first}");
    let res = evs.iter().find(|e| is_type(e, "tool_result")).unwrap();
    assert_eq!(res["data"]["sandbox"]["mode"], "read_only");
    assert_eq!(res["data"]["sandbox"]["network"], "none");
    // `turn --network host` on the same session: recorded on that turn's commands.
    let out = d.agentctl([
        "turn",
        &sid,
        "again",
        "--model",
        &model,
        "--network",
        "host",
        "--json",
    ]);
    out.assert_code(0);
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let res = evs
        .iter()
        .rev()
        .find(|e| is_type(e, "tool_result"))
        .unwrap();
    assert_eq!(res["data"]["sandbox"]["network"], "host", "{res}");
    assert_eq!(res["data"]["sandbox"]["mode"], "read_only");
}

// MCP servers that opt in to the sandbox (`sandbox = true`, docs/mcp.md#contract): the in-repo
// fake server's probes (`read`, `write`, `connect`, `tcp`, `env`) called through real
// turns, once from a sandboxed server and once from the same server unconfined.

fn mcp_entry(name: &str, extra: &str) -> String {
    format!(
        "[mcp_servers.{name}]\ncommand = {:?}\nrequired = true\n{extra}",
        bin("agentd-mcp-fake").display().to_string()
    )
}

/// The output of the `n`th call of `name` in `evs`.
fn mcp_output(evs: &[Value], name: &str, n: usize) -> String {
    let call = evs
        .iter()
        .filter(|e| is_type(e, "tool_call") && e["data"]["name"] == name)
        .nth(n)
        .unwrap_or_else(|| panic!("no call #{n} of {name}"));
    let id = &call["data"]["call_id"];
    let r = evs
        .iter()
        .find(|e| is_type(e, "tool_result") && &e["data"]["call_id"] == id)
        .unwrap_or_else(|| panic!("no result of {name}"));
    r["data"]["output"].as_str().unwrap_or("").to_string()
}

/// The `sandbox` the latest `mcp_servers` event records for `server`.
fn mcp_sandbox_facts(evs: &[Value], server: &str) -> Value {
    let ev = evs
        .iter()
        .rev()
        .find(|e| is_type(e, "mcp_servers"))
        .expect("an mcp_servers event");
    ev["data"]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == server)
        .unwrap_or_else(|| panic!("{server} not in {ev}"))["sandbox"]
        .clone()
}

#[test]
fn a_sandboxed_mcp_server_is_held_to_the_turns_sandbox_and_an_unconfined_one_is_not() {
    let o = outside();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = format!(
        "{}{}",
        mcp_entry("boxed", "sandbox = true\n"),
        mcp_entry("open", "")
    );
    let d = builder(&o)
        .env("OPENAI_API_KEY", "sk-test-provider-key-0123456789")
        .config(&config)
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let key = o.home.join(".ssh/id_ed25519").display().to_string();
    let victim = o.root.join("out/victim").display().to_string();
    let planted = o.root.join("out/planted").display().to_string();
    let inside = d.workspace().join("inside.txt").display().to_string();
    let socket = d.socket().display().to_string();
    let probes = |server: &str| -> Vec<(String, Value)> {
        vec![
            (format!("mcp__{server}__read"), json!({"path": key})),
            (
                format!("mcp__{server}__write"),
                json!({"path": victim, "text": format!("overwritten by {server}")}),
            ),
            (
                format!("mcp__{server}__write"),
                json!({"path": planted, "text": "planted"}),
            ),
            (
                format!("mcp__{server}__write"),
                json!({"path": inside, "text": format!("from {server}")}),
            ),
            (format!("mcp__{server}__connect"), json!({"path": socket})),
            (format!("mcp__{server}__tcp"), json!({"addr": addr})),
            (format!("mcp__{server}__env"), json!({})),
        ]
    };
    let calls: Vec<(String, Value)> = probes("boxed");
    let calls: Vec<(&str, Value)> = calls.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    let (r, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    let out = |name: &str, n: usize| mcp_output(&evs, &format!("mcp__boxed__{name}"), n);
    let read = out("read", 0);
    assert!(read.starts_with("denied"), "{read}");
    assert!(!read.contains("PRIVATE-KEY-MATERIAL"));
    assert!(out("write", 0).starts_with("denied"), "{}", out("write", 0));
    assert!(out("write", 1).starts_with("denied"), "{}", out("write", 1));
    assert_eq!(out("write", 2), "ok written");
    assert!(
        out("connect", 0).starts_with("denied"),
        "{}",
        out("connect", 0)
    );
    assert!(out("tcp", 0).starts_with("denied"), "{}", out("tcp", 0));
    let env = out("env", 0);
    assert!(env.contains("PATH="), "{env}");
    for bad in [
        "sk-test-provider",
        "OPENAI_API_KEY",
        "DEPLOY_TOKEN",
        "AGENTD_",
    ] {
        assert!(
            !env.contains(bad),
            "{bad} reached the sandboxed server: {env}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(o.root.join("out/victim")).unwrap(),
        "original"
    );
    assert!(!o.root.join("out/planted").exists());
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("inside.txt")).unwrap(),
        "from boxed"
    );
    // The Log says what the server ran under.
    let facts = mcp_sandbox_facts(&evs, "boxed");
    assert_eq!(facts["mode"], "workspace_write", "{facts:#}");
    assert_eq!(facts["network"], "none", "{facts:#}");
    assert!(
        facts["level"] == "full" || facts["level"] == "degraded",
        "{facts:#}"
    );
    assert!(facts["landlock"]["abi"].as_i64().unwrap() >= 1, "{facts:#}");
    assert_eq!(mcp_sandbox_facts(&evs, "open"), Value::Null);
    let st = c.call_ok("agentd/mcp_list", json!({"session_id": sid}));
    let boxed = st["sessions"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "boxed")
        .unwrap()
        .clone();
    assert_eq!(boxed["sandbox"]["mode"], "workspace_write", "{st:#}");
    let list = d.agentctl(["mcp", "list"]);
    list.assert_code(0);
    let boxed_line = list
        .stdout
        .lines()
        .find(|l| l.starts_with("boxed"))
        .unwrap_or("");
    assert!(boxed_line.ends_with("(sandboxed)"), "{}", list.stdout);
    assert!(
        list.stdout.contains("sandbox: ") && list.stdout.contains("workspace_write, network none"),
        "{}",
        list.stdout
    );

    // The same probes from the unconfined server reach what the sandbox kept out: the
    // difference is the sandbox, not the probes. It still gets no provider key.
    let calls: Vec<(String, Value)> = probes("open");
    let calls: Vec<(&str, Value)> = calls.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    let (r, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    let out = |name: &str, n: usize| mcp_output(&evs, &format!("mcp__open__{name}"), n);
    assert!(
        out("read", 0).contains("PRIVATE-KEY-MATERIAL"),
        "{}",
        out("read", 0)
    );
    assert_eq!(out("write", 1), "ok written");
    assert_eq!(out("tcp", 0), "ok connected");
    let env = out("env", 0);
    for bad in [
        "sk-test-provider",
        "OPENAI_API_KEY",
        "DEPLOY_TOKEN",
        "AGENTD_",
    ] {
        assert!(!env.contains(bad), "{bad} reached the server: {env}");
    }
    drop(listener);
}

#[test]
fn a_sandboxed_mcp_server_runs_under_each_turns_policy() {
    let o = outside();
    let d = builder(&o)
        .config(&mcp_entry("boxed", "sandbox = true\n"))
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let inside = d.workspace().join("inside.txt").display().to_string();
    let write = [("mcp__boxed__write", json!({"path": inside, "text": "x"}))];
    let (r, evs) = turn_calling(
        &d,
        &mut c,
        &sid,
        &write,
        json!({"sandbox": {"mode": "read_only"}}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    assert!(
        mcp_output(&evs, "mcp__boxed__write", 0).starts_with("denied"),
        "a read-only turn's server wrote"
    );
    assert_eq!(mcp_sandbox_facts(&evs, "boxed")["mode"], "read_only");
    assert!(!d.workspace().join("inside.txt").exists());
    // The next turn asks for nothing: its server is started again under the default.
    let (r, evs) = turn_calling(&d, &mut c, &sid, &write, json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(mcp_output(&evs, "mcp__boxed__write", 1), "ok written");
    assert_eq!(mcp_sandbox_facts(&evs, "boxed")["mode"], "workspace_write");
    let started = evs.iter().filter(|e| is_type(e, "mcp_servers")).count();
    assert_eq!(started, 2, "one start per policy");
}

#[test]
fn mcp_sandbox_puts_every_stdio_server_in_and_client_servers_too() {
    let o = outside();
    let d = builder(&o)
        .config(&format!("mcp_sandbox = true\n{}", mcp_entry("cfg", "")))
        .start();
    let mut c = d.connect();
    let key = o.home.join(".ssh/id_ed25519").display().to_string();
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "mcp_servers": [
            {"name": "client", "command": bin("agentd-mcp-fake"), "args": [], "env": []}]}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let reads = [
        ("mcp__cfg__read", json!({"path": key})),
        ("mcp__client__read", json!({"path": key})),
    ];
    let (r, evs) = turn_calling(&d, &mut c, &sid, &reads, json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    for name in ["mcp__cfg__read", "mcp__client__read"] {
        let out = mcp_output(&evs, name, 0);
        assert!(out.starts_with("denied"), "{name}: {out}");
    }
    for server in ["cfg", "client"] {
        assert_eq!(
            mcp_sandbox_facts(&evs, server)["mode"],
            "workspace_write",
            "{server}"
        );
    }
}

#[test]
fn a_sandboxed_mcp_server_never_runs_unconfined_when_the_sandbox_is_unavailable() {
    let o = outside();
    let d = builder(&o)
        .env("AGENTD_SANDBOX_FORCE", "no_landlock")
        .config(&mcp_entry("boxed", "sandbox = true\n"))
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let inside = d.workspace().join("ran.txt").display().to_string();
    let write = [("mcp__boxed__write", json!({"path": inside, "text": "x"}))];
    let (r, evs) = turn_calling(&d, &mut c, &sid, &write, json!({}));
    assert_eq!(r["status"], "failed", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("Landlock"),
        "{r}"
    );
    let failed = &evs
        .iter()
        .rev()
        .find(|e| is_type(e, "mcp_servers"))
        .unwrap()["data"]["failed"];
    assert_eq!(failed[0]["server"], "boxed", "{failed}");
    assert!(!d.workspace().join("ran.txt").exists());
    drop(c);
    drop(d);

    // `on_unavailable = "warn"` is the user saying so: it runs, recorded as unconfined.
    let d = builder(&o)
        .env("AGENTD_SANDBOX_FORCE", "no_landlock")
        .config(&format!(
            "[sandbox]\non_unavailable = \"warn\"\n{}",
            mcp_entry("boxed", "sandbox = true\n")
        ))
        .start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let inside = d.workspace().join("ran.txt").display().to_string();
    let write = [("mcp__boxed__write", json!({"path": inside, "text": "x"}))];
    let (r, evs) = turn_calling(&d, &mut c, &sid, &write, json!({}));
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(mcp_output(&evs, "mcp__boxed__write", 0), "ok written");
    let facts = mcp_sandbox_facts(&evs, "boxed");
    assert_eq!(facts["level"], "none", "{facts:#}");
    assert!(facts["reason"].as_str().unwrap().contains("landlock"));
}

#[test]
fn a_sandboxed_mcp_server_cannot_plant_git_hooks_with_or_without_user_namespaces() {
    for force in ["", "no_userns"] {
        let o = outside();
        let d = builder(&o)
            .env("AGENTD_SANDBOX_FORCE", force)
            .config(&mcp_entry("boxed", "sandbox = true\n"))
            .start();
        let ws = d.workspace().to_path_buf();
        git(&ws, &["init", "-q"]);
        let config_before = std::fs::read_to_string(ws.join(".git/config")).unwrap();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let hook = ws.join(".git/hooks/pre-commit").display().to_string();
        let cfg = ws.join(".git/config").display().to_string();
        let calls = [
            (
                "mcp__boxed__write",
                json!({"path": hook, "text": "#!/bin/sh\necho PWNED\n"}),
            ),
            (
                "mcp__boxed__write",
                json!({"path": cfg, "text": "[core]\n\thooksPath = /tmp/evil\n"}),
            ),
            (
                "mcp__boxed__write",
                json!({"path": ws.join("src.txt").display().to_string(), "text": "code"}),
            ),
        ];
        let (r, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
        assert_eq!(r["status"], "completed", "{force}: {r}");
        let level = mcp_sandbox_facts(&evs, "boxed")["level"].clone();
        let expected = if force.is_empty() { "full" } else { "degraded" };
        assert_eq!(level, expected, "{force}");
        // Refused by a read-only mount, or undone before the call's result came back
        // and the model told so.
        assert!(!ws.join(".git/hooks/pre-commit").exists(), "{force}");
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            config_before,
            "{force}"
        );
        for n in 0..2 {
            let out = mcp_output(&evs, "mcp__boxed__write", n);
            assert!(
                out.starts_with("denied") || out.contains("restored"),
                "{force} #{n}: {out}"
            );
        }
        assert_eq!(mcp_output(&evs, "mcp__boxed__write", 2), "ok written");
        assert_eq!(std::fs::read_to_string(ws.join("src.txt")).unwrap(), "code");
    }
}

/// The state letter of `/proc/PID/stat` (`T`: stopped).
fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.get(s.rfind(')')? + 1..)?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The host pid of the fake MCP server working in `ws` (inside a pid namespace the
/// server knows only its own).
fn fake_server_in(ws: &Path) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let cwd = std::fs::read_link(e.path().join("cwd")).ok()?;
        (comm.trim() == "agentd-mcp-fake" && cwd == ws).then_some(pid)
    })
}

/// A server that plants after its call has answered (a thread of its own, set off by a
/// file the test creates between turns). The server's processes are stopped between
/// calls, so the planted config never exists while the user may run git; a change the
/// user makes to their own config between calls is kept (the protected paths are saved
/// again before each call, not put back to how they were at the server's start). At the
/// full level the user's `git config` replaces `.git/config`, which drops the read-only
/// mount over it in the server's mount namespace: stopping and putting back hold there
/// too.
#[test]
fn a_sandboxed_mcp_server_cannot_plant_between_calls_and_the_users_own_config_changes_stay() {
    for (force, level) in [("", "full"), ("no_userns", "degraded")] {
        let o = outside();
        let mut d = builder(&o)
            .env("AGENTD_SANDBOX_FORCE", force)
            .config(&mcp_entry("boxed", "sandbox = true\n"))
            .start();
        let ws = d.workspace().to_path_buf();
        git(&ws, &["init", "-q"]);
        let pwned = o.root.join("out/pwned");
        let fsm = o.root.join("out/fsm");
        std::fs::write(&fsm, format!("#!/bin/sh\ntouch '{}'\n", pwned.display())).unwrap();
        std::fs::set_permissions(&fsm, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let trigger = ws.join("go");
        let done = ws.join("go.done");
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let later = [(
            "mcp__boxed__later",
            json!({
                "path": ws.join(".git/config"),
                "text": format!("[core]\n\tfsmonitor = {}\n", fsm.display()),
                "trigger": trigger,
            }),
        )];
        let (r, evs) = turn_calling(&d, &mut c, &sid, &later, json!({}));
        assert_eq!(r["status"], "completed", "{level}: {r}");
        assert_eq!(mcp_sandbox_facts(&evs, "boxed")["level"], level);
        let out = mcp_output(&evs, "mcp__boxed__later", 0);
        assert!(out.starts_with("scheduled "), "{level}: {out}");
        let pid = fake_server_in(&ws.canonicalize().unwrap())
            .unwrap_or_else(|| panic!("{level}: no fake server working in {ws:?}"));
        // Between calls: the user edits their own config, then sets the server off.
        git(&ws, &["config", "user.name", "Host User"]);
        git(&ws, &["config", "user.email", "host@example.com"]);
        std::fs::write(&trigger, "").unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(60);
        let stopped = loop {
            if done.exists() {
                break false;
            }
            if proc_state(pid) == Some('T') {
                break true;
            }
            assert!(
                std::time::Instant::now() < end,
                "{level}: the server neither wrote nor was stopped"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            stopped && !done.exists(),
            "{level}: the server ran between calls and wrote: {:?}",
            std::fs::read_to_string(&done)
        );
        // The user's git now, while the server still lives.
        git(&ws, &["status"]);
        git(&ws, &["commit", "-q", "--allow-empty", "-m", "user"]);
        assert!(!pwned.exists(), "{level}: the user's git ran planted code");
        // The next call lets the server run; whatever it writes during the call is put
        // back after it, to the config as the user left it.
        let echo = [("mcp__boxed__echo", json!({"message": "hi"}))];
        let (r, _) = turn_calling(&d, &mut c, &sid, &echo, json!({}));
        assert_eq!(r["status"], "completed", "{level}: {r}");
        let cfg = std::fs::read_to_string(ws.join(".git/config")).unwrap();
        assert!(
            cfg.contains("Host User") && !cfg.contains("fsmonitor"),
            "{level}: {cfg}"
        );
        d.shutdown(Duration::from_secs(60));
        git(&ws, &["status"]);
        git(&ws, &["commit", "-q", "--allow-empty", "-m", "after"]);
        assert!(!pwned.exists(), "{level}: the user's git ran planted code");
        let cfg = std::fs::read_to_string(ws.join(".git/config")).unwrap();
        assert!(
            cfg.contains("Host User") && !cfg.contains("fsmonitor"),
            "{level}: {cfg}"
        );
    }
}

#[test]
fn a_sandboxed_mcp_server_is_probed_only_inside_the_daemon_and_read_only() {
    let o = outside();
    let d = builder(&o)
        .config(&mcp_entry("boxed", "sandbox = true\n"))
        .start();
    // `agentctl mcp tools` starts it in the daemon, under a read-only policy.
    let out = d.agentctl(["mcp", "tools", "boxed", "--json"]);
    out.assert_code(0);
    let v = out.json();
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"mcp__boxed__read"), "{v:#}");
    let st = &v["servers"][0];
    assert_eq!(st["sandbox"]["mode"], "read_only", "{v:#}");
    assert_eq!(st["sandbox"]["network"], "none", "{v:#}");
    // doctor has no sandbox of its own: it says so rather than start it unconfined.
    let out = d.agentctl(["doctor"]);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("mcp:boxed"))
        .unwrap_or_else(|| panic!("no mcp:boxed line: {}", out.stdout))
        .to_string();
    assert!(
        line.contains("runs only inside the daemon's command sandbox"),
        "{line}"
    );
}
