//! The spare helper (docs/sandbox.md#cost): commands started the way the `shell` tool
//! starts them (`Sandbox::prepare_to_start`, `Prepared::start`), through the crate's
//! `sandbox-helper-test` binary, on the running kernel.

#![cfg(target_os = "linux")]

use agentd_sandbox::{effective, CommandRequest, Inputs, Knobs, Limits, OnUnavailable, Sandbox};
use serde_json::Value;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    outside: PathBuf,
}

fn env() -> Env {
    // Under the target dir, not /tmp: the sandbox's private /tmp would hide /tmp paths.
    let dir = tempfile::Builder::new()
        .prefix("spare")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, home, outside) = (root.join("ws"), root.join("home"), root.join("outside"));
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
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

fn sandbox(knobs: Knobs, spares: bool) -> Sandbox {
    Sandbox::new(env!("CARGO_BIN_EXE_sandbox-helper-test").into(), knobs).with_spares(spares)
}

const LEVELS: [(&str, Knobs); 2] = [
    (
        "full",
        Knobs {
            force_no_userns: false,
            force_no_landlock: false,
            force_no_seccomp: false,
            fail_setup: false,
            no_spare: false,
            no_signal_scope: false,
        },
    ),
    (
        "degraded",
        Knobs {
            force_no_userns: true,
            force_no_landlock: false,
            force_no_seccomp: false,
            fail_setup: false,
            no_spare: false,
            no_signal_scope: false,
        },
    ),
];

fn limits(pids_max: u64) -> Limits {
    Limits {
        pids_max,
        memory_max: 256 << 20,
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: two fresh descriptors we own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A command prepared (it may take the spare) but not started.
fn prepare(sb: &Sandbox, i: &Inputs, script: &str, l: Limits) -> agentd_sandbox::Prepared {
    let policy = effective(i);
    let req = CommandRequest {
        policy: &policy,
        on_unavailable: OnUnavailable::Refuse,
        argv: vec!["bash".into(), "-c".into(), script.into()],
        cwd: &i.workspace,
        umask: 0o022,
        limits: l,
    };
    // It may wait for a spare being started: off the runtime's workers, as the shell.
    tokio::task::block_in_place(|| sb.prepare_to_start(&req)).expect("sandbox available")
}

/// Starts `p` as the shell does and waits for it: (exit code, output, data.sandbox).
async fn finish(mut p: agentd_sandbox::Prepared) -> (i32, String, Value) {
    let (r, w) = pipe();
    let w2 = w.try_clone().unwrap();
    let mut child = p.start(None, w, w2).expect("started");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::fs::File::from(r).read_to_string(&mut s);
        s
    });
    let st = tokio::time::timeout(std::time::Duration::from_secs(120), child.wait())
        .await
        .expect("the command ended")
        .unwrap();
    let text = tokio::task::spawn_blocking(move || reader.join().unwrap())
        .await
        .unwrap();
    let facts = tokio::task::block_in_place(|| p.finish(text.as_bytes()));
    (st.code().unwrap_or(-1), text, facts)
}

async fn run(sb: &Sandbox, i: &Inputs, script: &str, l: Limits) -> (i32, String, Value) {
    finish(prepare(sb, i, script, l)).await
}

/// What a command can see of its own confinement and of what it inherited.
fn probe_script(e: &Env) -> String {
    format!(
        r#"
        echo inside > ok.txt && echo wrote-ws
        echo x > {out}/new 2>/dev/null || echo outside-refused
        cat {home}/.ssh/id_ed25519 2>/dev/null || echo key-hidden
        echo "fds: $(ls /proc/self/fd | sort -n | tr '\n' ' ')"
        echo "pid1 fds: $(ls /proc/1/fd 2>&1 | sort | tr '\n' ' ')"
        echo "umask: $(umask) cwd: $(pwd)"
        grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status
        ulimit -a
        env | grep -v -E '^(TMPDIR|_|SHLVL|PWD|OLDPWD)=' | sort
        "#,
        out = e.outside.display(),
        home = e.home.display()
    )
}

/// The facts that must not depend on how the helper was started.
fn confinement(f: &Value) -> Value {
    let mut v = serde_json::Map::new();
    for k in [
        "level",
        "namespaces",
        "landlock",
        "seccomp",
        "caps_dropped",
        "no_new_privs",
        "proc",
        "protected",
        "hidden_mounted",
        "writable_roots",
        "limits",
        "unix_sockets",
        "error",
    ] {
        v.insert(k.into(), f.get(k).cloned().unwrap_or(Value::Null));
    }
    Value::Object(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_takes_the_spare_is_confined_as_a_cold_one() {
    for (level, knobs) in LEVELS {
        let e = env();
        let i = inputs(&e);
        let script = probe_script(&e);
        let cold = sandbox(knobs, false);
        let (code_c, out_c, facts_c) = run(&cold, &i, &script, limits(64)).await;
        assert_eq!(facts_c["spare"], false, "{level}: {facts_c:#}");
        let warm = sandbox(knobs, true);
        // The first command starts the spare; the second takes it.
        let (_, _, first) = run(&warm, &i, "true", limits(64)).await;
        assert_eq!(
            first["spare"], false,
            "{level}: nothing to take yet: {first:#}"
        );
        // Ready however loaded the machine is (a command waits only so long for it).
        let ready = warm.spare(std::time::Duration::from_secs(60));
        assert!(ready.is_some(), "{level}: no spare after the first command");
        let (code_s, out_s, facts_s) = run(&warm, &i, &script, limits(64)).await;
        assert_eq!(facts_s["spare"], true, "{level}: {facts_s:#}");
        assert_eq!(facts_s["level"], level, "{facts_s:#}");
        for want in ["wrote-ws", "outside-refused", "key-hidden"] {
            assert!(out_s.contains(want), "{level}: {want}: {out_s}");
        }
        assert_eq!(
            std::fs::read_to_string(e.outside.join("victim")).unwrap(),
            "original"
        );
        assert_eq!((code_c, &out_c), (code_s, &out_s), "{level}");
        assert_eq!(confinement(&facts_c), confinement(&facts_s), "{level}");
        assert_eq!(facts_s["error"], Value::Null, "{level}: {facts_s:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_made_under_one_commands_caps_serves_the_next_with_its_own() {
    for (level, knobs) in LEVELS {
        let e = env();
        let i = inputs(&e);
        let sb = sandbox(knobs, true);
        // The spare is made while a command with room for 512 processes runs.
        let (_, _, first) = run(&sb, &i, "true", limits(512)).await;
        assert_eq!(first["spare"], false, "{first:#}");
        let (_, cgroups) = sb
            .spare(std::time::Duration::from_secs(60))
            .expect("a spare after the first command");
        let small = Limits {
            pids_max: 16,
            memory_max: 96 << 20,
        };
        let p = prepare(&sb, &i, "echo ran", small);
        // What the host's cgroup files say, while the command is about to run.
        let caps: Vec<String> = cgroups
            .iter()
            .flat_map(|d| ["pids.max", "memory.max", "memory.limit_in_bytes"].map(|f| d.join(f)))
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .map(|t| t.trim().to_string())
            .collect();
        let (code, out, facts) = finish(p).await;
        assert_eq!(facts["spare"], true, "{level}: {facts:#}");
        assert_eq!((code, out.trim()), (0, "ran"), "{level}: {facts:#}");
        if facts["limits"]["cgroup"].is_null() {
            // No cgroup here (not root): the cap is the command's RLIMIT_NPROC.
            // SAFETY: geteuid never fails.
            assert_ne!(
                unsafe { libc::geteuid() },
                0,
                "root gets a cgroup: {facts:#}"
            );
            assert_eq!(facts["limits"]["rlimit_nproc"], 16, "{level}: {facts:#}");
            continue;
        }
        assert_eq!(facts["limits"]["pids_max"], 16, "{level}: {facts:#}");
        assert_eq!(
            facts["limits"]["memory_max"],
            96 << 20,
            "{level}: {facts:#}"
        );
        assert!(caps.contains(&"16".to_string()), "{level}: {caps:?}");
        assert!(
            caps.contains(&(96u64 << 20).to_string()),
            "{level}: {caps:?}"
        );
        assert!(!caps.contains(&"512".to_string()), "{level}: {caps:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_commands_at_once_both_run_one_on_the_spare() {
    for (level, knobs) in LEVELS {
        let e = env();
        let i = inputs(&e);
        let sb = sandbox(knobs, true);
        run(&sb, &i, "true", limits(64)).await;
        let ready = sb.spare(std::time::Duration::from_secs(60));
        assert!(ready.is_some(), "{level}: no spare after the first command");
        // Both prepared before either starts: the first takes the spare, the second
        // finds none (the next is only asked for once a command has ended).
        let a = prepare(&sb, &i, "echo A-$((6*7)) > a.txt; cat a.txt", limits(64));
        let b = prepare(&sb, &i, "echo B-$((6*9)) > b.txt; cat b.txt", limits(64));
        let (ra, rb) = tokio::join!(finish(a), finish(b));
        assert_eq!(ra.2["spare"], true, "{level}: {:#}", ra.2);
        assert_eq!(rb.2["spare"], false, "{level}: {:#}", rb.2);
        assert_eq!((ra.0, ra.1.trim()), (0, "A-42"), "{level}: {:#}", ra.2);
        assert_eq!((rb.0, rb.1.trim()), (0, "B-54"), "{level}: {:#}", rb.2);
        assert_eq!(
            std::fs::read_to_string(e.ws.join("a.txt")).unwrap(),
            "A-42\n"
        );
        assert_eq!(
            std::fs::read_to_string(e.ws.join("b.txt")).unwrap(),
            "B-54\n"
        );
    }
}

/// Waits (up to `limit`) for `pid` to exit, on its pidfd.
fn wait_gone(pid: u32, limit: std::time::Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as i32, 0) } as i32;
    if fd < 0 {
        return true; // already gone
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd, then closing our pidfd.
    let rc = unsafe {
        let rc = libc::poll(&mut p, 1, limit.as_millis() as i32);
        libc::close(fd);
        rc
    };
    rc == 1
}

/// The cgroup directories `pid` is in, below agentd's (`agentd-sandbox`).
fn proc_cgroups(pid: u32) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, ctl, path) = (it.next()?, it.next()?, it.next()?);
            if !path.contains("agentd-sandbox") {
                return None;
            }
            let ctl = ctl
                .split(',')
                .find(|c| *c == "pids" || *c == "memory" || c.is_empty())?;
            Some(
                Path::new("/sys/fs/cgroup")
                    .join(ctl)
                    .join(path.trim_start_matches('/')),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_spare_holds_nothing_and_goes_when_released() {
    let e = env();
    let i = inputs(&e);
    let sb = sandbox(Knobs::default(), true);
    run(&sb, &i, "true", limits(64)).await;
    let (pid, cgroups) = sb
        .spare(std::time::Duration::from_secs(60))
        .expect("a spare after the first command");
    // What a cold helper starts with: no environment, `/`, stdio on /dev/null, and
    // nothing else but its socket to the daemon and the daemon's lifeline (fd 7).
    let proc_ = PathBuf::from(format!("/proc/{pid}"));
    assert_eq!(std::fs::read(proc_.join("environ")).unwrap(), b"");
    assert_eq!(
        std::fs::read_link(proc_.join("cwd")).unwrap(),
        Path::new("/")
    );
    let mut fds: Vec<(u32, String)> = std::fs::read_dir(proc_.join("fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            let n = e.file_name().to_str().unwrap().parse().unwrap();
            let to = std::fs::read_link(e.path()).unwrap().display().to_string();
            (n, to)
        })
        .collect();
    fds.sort();
    let shape: Vec<(u32, bool)> = fds
        .iter()
        .map(|(n, to)| {
            let ok = match n {
                0..=2 => to == "/dev/null",
                3 => to.starts_with("socket:"),
                7 => to.starts_with("pipe:"),
                _ => false,
            };
            (*n, ok)
        })
        .collect();
    let want = [(0, true), (1, true), (2, true), (3, true), (7, true)];
    assert_eq!(shape, want, "{fds:?}");
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!cgroups.is_empty(), "root: the spare has its cgroup");
    }
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        // cgroup v1: the spare has moved itself in (on v2 its first child is created
        // there, once it has a command).
        let mut inside = proc_cgroups(pid);
        inside.sort();
        let mut want = cgroups.clone();
        want.sort();
        assert_eq!(inside, want);
    }
    for d in &cgroups {
        assert!(d.is_dir(), "{}", d.display());
    }
    tokio::task::block_in_place(|| sb.release_spares());
    assert!(
        wait_gone(pid, std::time::Duration::from_secs(60)),
        "the spare {pid} outlived its release"
    );
    for d in &cgroups {
        assert!(!d.exists(), "{} left behind", d.display());
    }
    // And no new one is started.
    run(&sb, &i, "true", limits(64)).await;
    assert_eq!(sb.spare(std::time::Duration::from_millis(200)), None);
}

/// The stand-in daemon of the next test: a process of its own with a sandbox and a
/// ready spare, which prints the spare's pid and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spare_stand_in_daemon() {
    if std::env::var_os("AGENTD_SPARE_STAND_IN").is_none() {
        return;
    }
    let e = env();
    let i = inputs(&e);
    let sb = sandbox(Knobs::default(), true);
    run(&sb, &i, "true", limits(64)).await;
    let pid = sb.spare(std::time::Duration::from_secs(60)).unwrap().0;
    println!("spare-pid {pid}");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    let mut b = [0u8; 1];
    let _ = std::io::stdin().read(&mut b);
    std::process::exit(0);
}

#[test]
fn a_spare_does_not_outlive_a_killed_daemon() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "spare_stand_in_daemon",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("AGENTD_SPARE_STAND_IN", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let pid: u32 = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        // libtest may print the test's name on the same line first.
        .find_map(|l| {
            l.split("spare-pid ")
                .nth(1)
                .and_then(|p| p.trim().parse().ok())
        })
        .expect("the stand-in's spare");
    let text = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        text.split(|b| *b == 0)
            .any(|a| a == agentd_sandbox::plan::SPARE_ARG.as_bytes()),
        "{pid} is not a spare: {}",
        String::from_utf8_lossy(&text)
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_gone(pid, std::time::Duration::from_secs(60)),
        "the spare {pid} outlived its daemon"
    );
}

/// A waiting spare is outside every sandbox. A degraded command (same uid, the host's
/// pid namespace: the only level where it can see the spare at all) cannot follow its
/// descriptors, read its memory or environment, or (Landlock ABI 6+) signal it, and the
/// spare then serves its own command as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_reach_a_waiting_spare() {
    let e = env();
    let i = inputs(&e);
    let knobs = LEVELS[1].1;
    let sb = sandbox(knobs, true);
    run(&sb, &i, "true", limits(64)).await;
    let (pid, _) = sb
        .spare(std::time::Duration::from_secs(60))
        .expect("a spare after the first command");
    let other = sandbox(knobs, false);
    let script = format!(
        "readlink /proc/{pid}/fd/3 >/dev/null 2>&1 && echo READ-SOCKET; \
         head -c 1 /proc/{pid}/mem >/dev/null 2>&1 && echo READ-MEM; \
         cat /proc/{pid}/environ >/dev/null 2>&1 && echo READ-ENV; \
         kill -STOP {pid} 2>/dev/null && echo STOPPED; \
         kill -KILL {pid} 2>/dev/null && echo KILLED; \
         echo done"
    );
    let (_, out, facts) = run(&other, &i, &script, limits(64)).await;
    assert_eq!(facts["level"], "degraded", "{facts:#}");
    let abi = facts["landlock"]["abi"].as_i64().unwrap_or(0);
    for bad in ["READ-SOCKET", "READ-MEM", "READ-ENV"] {
        assert!(!out.contains(bad), "{bad}: {out}");
    }
    if abi >= 6 {
        assert!(!out.contains("STOPPED") && !out.contains("KILLED"), "{out}");
        let (code, out, facts) = run(&sb, &i, "echo served", limits(64)).await;
        assert_eq!(facts["spare"], true, "{facts:#}");
        assert_eq!((code, out.trim()), (0, "served"), "{facts:#}");
    } else {
        // Signals are not scoped below ABI 6: a killed spare only means the next
        // command starts its own helper.
        let (code, out, _) = run(&sb, &i, "echo served", limits(64)).await;
        assert_eq!((code, out.trim()), (0, "served"));
    }
    assert!(out.contains("done"), "{out}");
}

/// The per-command cgroups process `pid` made that are still there (`cmd-<pid>-…`
/// anywhere in the cgroup tree).
fn cgroups_named_for(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("cmd-{pid}-");
    let mut found = Vec::new();
    let mut dirs = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((d, depth)) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                found.push(e.path());
            } else if depth < 6 {
                dirs.push((e.path(), depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// The stand-in daemon of the next test: one command, then the release and the exit at
/// once, as a daemon stopping right after a command ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spare_release_stand_in() {
    if std::env::var_os("AGENTD_SPARE_RELEASE_STAND_IN").is_none() {
        return;
    }
    let e = env();
    let i = inputs(&e);
    let sb = sandbox(Knobs::default(), true);
    // The command's end asks for a spare; the release comes at once, then the exit.
    run(&sb, &i, "true", limits(64)).await;
    tokio::task::block_in_place(|| sb.release_spares());
    std::process::exit(0);
}

/// A daemon stops right after a command ended, while the spare that command's end asked
/// for is still being started: the release waits for it and ends it, so a daemon that
/// exits right after leaves no spare's cgroup behind (one finished after the release
/// kept its cgroup for good).
#[test]
fn a_spare_being_started_when_released_leaves_nothing() {
    for round in 0..20 {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "spare_release_stand_in",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("AGENTD_SPARE_RELEASE_STAND_IN", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = out.id();
        let out = out.wait_with_output().unwrap();
        assert!(out.status.success(), "round {round}: {:?}", out.status);
        let left = cgroups_named_for(pid);
        for d in &left {
            let _ = std::fs::remove_dir(d);
        }
        assert_eq!(left, Vec::<PathBuf>::new(), "round {round}");
    }
}
