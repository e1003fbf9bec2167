//! Real commands through the real helper (the crate's `sandbox-helper-test` binary
//! stands in for the re-executed daemon), on the running kernel.

#![cfg(target_os = "linux")]

use agentd_sandbox::{
    effective, CommandRequest, Inputs, Knobs, Limits, Mode, Network, OnUnavailable, Sandbox,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;

struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    outside: PathBuf,
}

fn env() -> Env {
    // Under the target dir, not /tmp: the sandbox's private /tmp would hide /tmp paths
    // anyway, and these tests check Landlock and the mounts themselves.
    let dir = tempfile::Builder::new()
        .prefix("sbx")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let home = root.join("home");
    let outside = root.join("outside");
    for d in [&ws, &home.join(".ssh"), &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(outside.join("victim"), "original").unwrap();
    Env {
        _dir: dir,
        ws,
        home,
        outside,
    }
}

fn inputs(e: &Env) -> Inputs {
    Inputs {
        workspace: e.ws.clone(),
        home: Some(e.home.clone()),
        env: [
            ("PATH".to_string(), std::env::var("PATH").unwrap()),
            ("HOME".to_string(), e.home.display().to_string()),
            ("DEPLOY_TOKEN".to_string(), "s3cret".to_string()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

fn sandbox(knobs: Knobs) -> Sandbox {
    Sandbox::new(env!("CARGO_BIN_EXE_sandbox-helper-test").into(), knobs)
}

fn run(sb: &Sandbox, inputs: &Inputs, cwd: &Path, script: &str) -> (i32, String, Value) {
    let policy = effective(inputs);
    let req = CommandRequest {
        policy: &policy,
        on_unavailable: OnUnavailable::Refuse,
        argv: vec!["bash".into(), "-c".into(), script.into()],
        cwd,
        umask: 0o022,
        limits: Limits {
            pids_max: 64,
            memory_max: 256 << 20,
        },
    };
    let mut prepared = sb.prepare(&req).expect("sandbox available");
    // Taken out and dropped once run, as the daemon does: the `Command` holds the
    // parent's copy of the report pipe, whose EOF the degraded level waits for.
    let mut cmd = std::mem::replace(&mut prepared.command, std::process::Command::new("true"));
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn helper");
    drop(cmd);
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let facts = prepared.finish(text.as_bytes());
    (out.status.code().unwrap_or(-1), text, facts)
}

#[test]
fn probe_finds_landlock_and_seccomp() {
    let p = sandbox(Knobs::default()).probe().clone();
    assert!(p.landlock_abi >= 1, "{p:?}");
    assert!(p.seccomp, "{p:?}");
    assert_ne!(p.level, "unavailable", "{p:?}");
}

#[test]
fn full_sandbox_confines_a_command() {
    let e = env();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = sandbox(Knobs::default());
    assert!(
        sb.probe().userns,
        "user namespaces needed here: {:?}",
        sb.probe()
    );
    let script = format!(
        r#"
        echo inside > ok.txt && echo wrote-ws
        echo x > {out}/new 2>/dev/null && echo WROTE-OUTSIDE
        ln -s {out}/victim link; echo x > link 2>/dev/null && echo WROTE-SYMLINK
        echo x > /proc/self/root{out}/victim 2>/dev/null && echo WROTE-PROCROOT
        ln {out}/victim hard 2>/dev/null && echo HARDLINK
        mv {out}/victim moved 2>/dev/null && echo RENAMED
        cat {home}/.ssh/id_ed25519 2>/dev/null && echo READ-KEY
        env | grep -q DEPLOY_TOKEN && echo ENV-LEAK
        grep CapEff /proc/self/status
        ls /proc | grep -c '^[0-9]' | sed 's/^/procs:/'
        echo tmp > /tmp/t && echo tmp-ok
        echo "tmpdir:$TMPDIR"
        (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo TCP
        ls /proc/$$/fd > /tmp/fds; echo "fds:$(tr '\n' ' ' < /tmp/fds)"
        "#,
        out = e.outside.display(),
        home = e.home.display()
    );
    let (code, out, facts) = run(&sb, &inputs(&e), &e.ws, &script);
    assert_eq!(code, 0, "{out}\n{facts:#}");
    assert!(out.contains("wrote-ws"), "{out}");
    assert!(out.contains("procs:") && !out.contains("procs:0"), "{out}");
    for bad in [
        "WROTE-OUTSIDE",
        "WROTE-SYMLINK",
        "WROTE-PROCROOT",
        "HARDLINK",
        "RENAMED",
        "READ-KEY",
        "ENV-LEAK",
        "TCP",
    ] {
        assert!(!out.contains(bad), "{bad} in {out}");
    }
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(
        out.contains("tmp-ok") && out.contains("tmpdir:/tmp"),
        "{out}"
    );
    assert!(out.contains("fds:0 1 2 \n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(e.outside.join("victim")).unwrap(),
        "original"
    );
    assert!(!e.outside.join("new").exists());
    assert_eq!(facts["level"], "full", "{facts:#}");
    assert_eq!(facts["seccomp"], true);
    assert_eq!(facts["proc"], "fresh");
    assert_eq!(facts["caps_dropped"], true);
    assert!(
        facts["namespaces"].as_array().unwrap().len() >= 6,
        "{facts:#}"
    );
    assert!(
        facts["landlock"]["status"]
            .as_str()
            .unwrap()
            .ends_with("enforced"),
        "{facts:#}"
    );
}

#[test]
fn git_metadata_is_protected_and_commits_work() {
    let e = env();
    let git = |args: &[&str]| {
        let s = std::process::Command::new("git")
            .args(args)
            .current_dir(&e.ws)
            .output()
            .expect("git");
        assert!(s.status.success(), "git {args:?}: {s:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "t@example.com"]);
    git(&["config", "user.name", "t"]);
    let sb = sandbox(Knobs::default());
    let script = r#"
        echo '#!/bin/sh' > .git/hooks/post-commit 2>/dev/null && echo HOOK
        git config core.fsmonitor 'touch /tmp/pwned' 2>/dev/null && echo FSMONITOR
        echo a > a.txt && git add a.txt && git commit -qm one && echo committed
        git checkout -qb side && echo branched
    "#;
    let (_, out, facts) = run(&sb, &inputs(&e), &e.ws, script);
    assert!(!out.contains("HOOK") && !out.contains("FSMONITOR"), "{out}");
    assert!(
        out.contains("committed") && out.contains("branched"),
        "{out}\n{facts:#}"
    );
    assert!(!e.ws.join(".git/hooks/post-commit").exists());
    let cfg = std::fs::read_to_string(e.ws.join(".git/config")).unwrap();
    assert!(!cfg.contains("fsmonitor"), "{cfg}");
    let protected = facts["protected"].as_array().unwrap();
    assert!(
        protected
            .iter()
            .any(|p| p.as_str().unwrap().ends_with(".git/hooks")),
        "{facts:#}"
    );
}

#[test]
fn background_processes_do_not_survive() {
    let e = env();
    let sb = sandbox(Knobs::default());
    let (code, out, _) = run(
        &sb,
        &inputs(&e),
        &e.ws,
        "setsid sleep 31.4159 >/dev/null 2>&1 & (sleep 31.4159 &) ; echo started",
    );
    assert_eq!(code, 0, "{out}");
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|d| std::fs::read(d.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("31.4159"))
        .collect();
    assert!(survivors.is_empty(), "{survivors:?}");
}

#[test]
fn read_only_mode_writes_nothing_but_tmp() {
    let e = env();
    let sb = sandbox(Knobs::default());
    let mut i = inputs(&e);
    i.config.mode = Mode::ReadOnly;
    let (_, out, facts) = run(
        &sb,
        &i,
        &e.ws,
        "echo x > f 2>/dev/null && echo WROTE; echo y > /tmp/y && echo tmp-ok; ls >/dev/null && echo listed",
    );
    assert!(
        !out.contains("WROTE") && out.contains("tmp-ok") && out.contains("listed"),
        "{out}"
    );
    assert_eq!(facts["mode"], "read_only");
}

#[test]
fn host_network_allows_tcp_to_loopback() {
    let e = env();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = sandbox(Knobs::default());
    let mut i = inputs(&e);
    let script = format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED");
    let (_, out, _) = run(&sb, &i, &e.ws, &script);
    assert!(!out.contains("CONNECTED"), "network none: {out}");
    i.session.network = Some(Network::Host);
    let (_, out, facts) = run(&sb, &i, &e.ws, &script);
    assert!(out.contains("CONNECTED"), "network host: {out}\n{facts:#}");
}

#[test]
fn forced_fallback_is_degraded_but_still_confines() {
    let e = env();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = sandbox(Knobs {
        force_no_userns: true,
        ..Default::default()
    });
    let script = format!(
        r#"
        echo inside > ok.txt && echo wrote-ws
        echo x > {out}/new 2>/dev/null && echo WROTE-OUTSIDE
        cat {home}/.ssh/id_ed25519 2>/dev/null && echo READ-KEY
        (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo TCP
        python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 2>/dev/null && echo UDP
        setsid sleep 27.1828 >/dev/null 2>&1 &
        echo "tmpdir:$TMPDIR"
        "#,
        out = e.outside.display(),
        home = e.home.display()
    );
    let (code, out, facts) = run(&sb, &inputs(&e), &e.ws, &script);
    assert_eq!(code, 0, "{out}\n{facts:#}");
    assert!(out.contains("wrote-ws"), "{out}\n{facts:#}");
    for bad in ["WROTE-OUTSIDE", "READ-KEY", "TCP", "UDP"] {
        assert!(!out.contains(bad), "{bad} in {out}");
    }
    assert_eq!(facts["level"], "degraded", "{facts:#}");
    assert!(facts["reason"]
        .as_str()
        .unwrap()
        .contains("no user namespaces"));
    let survivors = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|d| std::fs::read(d.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains("27.1828"))
        .count();
    assert_eq!(survivors, 0);
}

#[test]
fn no_landlock_refuses_unless_warn() {
    let e = env();
    let sb = sandbox(Knobs {
        force_no_landlock: true,
        ..Default::default()
    });
    let policy = effective(&inputs(&e));
    let mut req = CommandRequest {
        policy: &policy,
        on_unavailable: OnUnavailable::Refuse,
        argv: vec!["true".into()],
        cwd: &e.ws,
        umask: 0o022,
        limits: Limits::default(),
    };
    let err = sb.prepare(&req).expect_err("refused");
    assert_eq!(err.missing, vec!["landlock".to_string()]);
    assert!(err.message.contains("Landlock"), "{}", err.message);
    req.on_unavailable = OnUnavailable::Warn;
    let p = sb.prepare(&req).expect("warn runs unconfined");
    assert_eq!(p.facts()["level"], "none");
    assert!(!p.is_confined());
}

#[test]
fn a_symlinked_hooks_dir_still_starts_and_stays_protected() {
    let e = env();
    let git = |args: &[&str]| {
        let s = std::process::Command::new("git")
            .args(args)
            .current_dir(&e.ws)
            .output()
            .expect("git");
        assert!(s.status.success(), "git {args:?}: {s:?}");
    };
    git(&["init", "-q"]);
    std::fs::create_dir(e.ws.join("my-hooks")).unwrap();
    std::fs::remove_dir_all(e.ws.join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink("../my-hooks", e.ws.join(".git/hooks")).unwrap();
    let sb = sandbox(Knobs::default());
    let (code, out, facts) = run(
        &sb,
        &inputs(&e),
        &e.ws,
        "echo x > .git/hooks/post-commit 2>/dev/null && echo BAD-HOOK; rm -f .git/hooks 2>/dev/null && echo BAD-UNLINK; echo ok",
    );
    assert_eq!(code, 0, "{out}\n{facts:#}");
    assert!(!out.contains("BAD-"), "{out}\n{facts:#}");
    assert!(!e.ws.join("my-hooks/post-commit").exists());
    assert!(
        facts["protected_parent"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p.as_str().unwrap().ends_with(".git"))),
        "{facts:#}"
    );
}

/// The degraded level's private `TMPDIR`s live below the directory the daemon names
/// (agentd's home): what an earlier daemon left there is removed at the first command,
/// a command's `TMPDIR` is its own (a sibling's content is out of reach), and it is
/// gone once the command finished.
#[test]
fn degraded_tmpdirs_live_in_the_daemons_directory_and_go_with_their_command() {
    let e = env();
    let agentd_home = e.home.parent().unwrap().join("agentd-home");
    let base = agentd_home.join("sandbox-tmp");
    let stale = base.join("agentd-sbx-1-stale");
    std::fs::create_dir_all(stale.join("cmd-old")).unwrap();
    std::fs::write(stale.join("cmd-old/secret"), "LEFT-BY-A-CRASH").unwrap();
    let sb = sandbox(Knobs {
        force_no_userns: true,
        ..Default::default()
    })
    .with_tmp_dirs(base.clone());
    let mut i = inputs(&e);
    i.agentd_dirs = vec![agentd_home.clone()];
    let (code, out, facts) = run(
        &sb,
        &i,
        &e.ws,
        r#"echo mine > "$TMPDIR/f" && cat "$TMPDIR/f"; echo "tmpdir:$TMPDIR""#,
    );
    assert_eq!(code, 0, "{out}\n{facts:#}");
    assert_eq!(facts["level"], "degraded", "{facts:#}");
    assert!(out.contains("mine"), "{out}");
    let tmpdir = PathBuf::from(
        out.lines()
            .find_map(|l| l.strip_prefix("tmpdir:"))
            .expect("TMPDIR printed"),
    );
    assert!(
        tmpdir.starts_with(base.canonicalize().unwrap()),
        "{tmpdir:?}"
    );
    assert!(!stale.exists(), "an earlier daemon's directory was kept");
    assert!(!tmpdir.exists(), "the TMPDIR outlived its command");
    // A sibling (another command's, made here by hand) is out of reach.
    let sibling = tmpdir.parent().unwrap().join("cmd-other");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("secret"), "OTHER-COMMAND").unwrap();
    let script = format!(
        "cat {s}/secret; ls {p}; echo x > {s}/planted && echo PLANTED; echo done",
        s = sibling.display(),
        p = sibling.parent().unwrap().display()
    );
    let (_, out, _) = run(&sb, &i, &e.ws, &script);
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains("OTHER-COMMAND"), "{out}");
    assert!(!out.contains("PLANTED"), "{out}");
    assert!(!out.lines().any(|l| l.trim() == "cmd-other"), "{out}");
}
