//! Escapes a red team found past the first hostile suite: the daemon trusting a peer
//! that is already gone, a command outliving its timeout, the daemon's own writes
//! following a symlink. Each case runs in full and in degraded mode (no user namespaces)
//! and, through `.ci/sandbox.sh`, unprivileged too. A case plants or attempts in a turn,
//! and the check runs on the host after the command has ended.

use super::{builder, create, outside, q, turn_calling, Outside};
use agentd_tests::{bin, is_type, Daemon, DaemonBuilder, RpcConn};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// The two sandbox levels a case runs at.
const LEVELS: [(&str, Option<&str>); 2] = [("full", None), ("degraded", Some("no_userns"))];

fn at_level(o: &Outside, force: Option<&str>) -> DaemonBuilder {
    let b = builder(o);
    match force {
        Some(f) => b.env("AGENTD_SANDBOX_FORCE", f),
        None => b,
    }
}

/// `[sandbox] sockets` granting the directory the test daemons' sockets live in (the
/// system temp dir), so that a command can try the daemon's socket at every level.
fn daemon_socket_granted() -> String {
    let tmp = std::env::temp_dir().canonicalize().unwrap();
    format!("[sandbox]\nsockets = [{:?}]\n", tmp)
}

/// Waits until `f` holds or `timeout` passes; false on timeout.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

fn session_ids(c: &mut RpcConn) -> Vec<String> {
    c.call_ok("agentd/list", json!({}))["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Live processes whose command line holds `token`.
fn processes_with(token: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let c = std::fs::read(e.path().join("cmdline")).ok()?;
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            c.contains(token)
                .then(|| format!("{}: {c}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// SIGCONTs the daemon when dropped, so a failing case never leaves it stopped.
struct Stopped(i32);

impl Stopped {
    fn stop(d: &Daemon) -> Stopped {
        let pid = d.pid().expect("the daemon's pid") as i32;
        // SAFETY: signalling the daemon the harness started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: signalling the daemon the harness started.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// The race the red team won with 40 busy connections, made deterministic: the daemon
/// is stopped while a command connects to its socket, hands the connection to a child
/// and exits (reaped by its shell), so when the daemon looks at the peer's pid it is
/// gone. The child then asks for a session on a directory outside the workspace.
#[test]
fn a_connection_handed_on_by_a_command_that_exited_is_refused() {
    for (level, force) in LEVELS {
        let o = outside();
        let d = at_level(&o, force).config(&daemon_socket_granted()).start();
        let mut c = d.connect();
        // Network `host` and a socket grant around the daemon's socket: without them,
        // the degraded level refuses Unix sockets outright and the daemon's own check
        // would never be reached.
        let sid = create(&mut c, &d, Some(json!({"network": "host"})));
        let ws = d.workspace().to_path_buf();
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "agentd/create",
            "params": {"workspace": o.root.join("out")}});
        let cmd = format!(
            "touch ready
             while [ ! -e go ]; do sleep 0.02; done
             {probe} handoff {sock} '{request}' answer
             touch reaped
             for i in $(seq 1500); do [ -e answer.done ] && break; sleep 0.02; done
             echo answer:; cat answer",
            probe = q(&bin("sandbox-probe")),
            sock = q(d.socket()),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let d = &d;
            let sid = &sid;
            let cmd = &cmd;
            s.spawn(move || {
                let mut c2 = d.connect();
                let calls = [("shell", json!({"command": cmd, "timeout_s": 120}))];
                let r = turn_calling(d, &mut c2, sid, &calls, json!({}));
                let _ = tx.send(r);
            });
            assert!(
                wait_until(WAIT, || ws.join("ready").exists()),
                "{level}: the command did not start"
            );
            let stopped = Stopped::stop(d);
            std::fs::write(ws.join("go"), "").unwrap();
            assert!(
                wait_until(WAIT, || ws.join("reaped").exists()),
                "{level}: the connector was not reaped"
            );
            drop(stopped);
        });
        let (r, evs) = rx.recv_timeout(WAIT).expect("the turn ends");
        assert_eq!(r["status"], "completed", "{level}: {r}");
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .expect("a tool_result");
        let text = res["data"]["output"].as_str().unwrap_or("").to_string();
        let answer = text.split("answer:").nth(1).unwrap_or("").to_string();
        assert!(!answer.contains("\"result\""), "{level}: {text}");
        assert!(!answer.contains("session_id"), "{level}: {text}");
        if level == "degraded" {
            // The socket is reachable at this level; the daemon refused the gone peer.
            assert!(answer.contains("permission_denied"), "{level}: {text}");
            let log = d.daemon_output();
            assert!(
                log.contains("exited before it was checked"),
                "{level}: {log}"
            );
        }
        assert_eq!(session_ids(&mut c), vec![sid.clone()], "{level}: {text}");
    }
}

/// A command that detaches (`setsid`) and outlives its timeout, then drives the daemon:
/// every process a command started dies at its timeout, at both levels.
#[test]
fn a_detached_process_dies_at_the_timeout_and_never_reaches_the_daemon() {
    for (level, force) in LEVELS {
        let o = outside();
        let d = at_level(&o, force).config(&daemon_socket_granted()).start();
        let mut c = d.connect();
        // Network `host` and a socket grant around the daemon's socket: without them,
        // the degraded level refuses Unix sockets outright and the daemon's own check
        // would never be reached.
        let sid = create(&mut c, &d, Some(json!({"network": "host"})));
        let ws = d.workspace().to_path_buf();
        let token = format!("{}", 10_000 + rand::random::<u32>() % 80_000);
        let cmd = format!(
            "setsid bash -c 'echo $$ > survivor.pid; sleep 4.{token}; \
               {ctl} --socket {sock} new --workspace {out} > survivor.out 2>&1; sleep 30.{token}' \
               </dev/null >/dev/null 2>&1 &
             while [ ! -s survivor.pid ]; do sleep 0.02; done
             sleep 60.{token}",
            ctl = q(&bin("agentctl")),
            sock = q(d.socket()),
            out = q(&o.root.join("out")),
        );
        let calls = [("shell", json!({"command": cmd, "timeout_s": 2}))];
        let (r, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
        assert_eq!(r["status"], "completed", "{level}: {r}");
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .expect("a tool_result");
        assert_eq!(res["data"]["error"]["kind"], "timeout", "{level}: {res}");
        assert!(ws.join("survivor.pid").exists(), "{level}: {res}");
        let gone = wait_until(Duration::from_secs(20), || {
            processes_with(&token).is_empty()
        });
        assert!(
            gone,
            "{level}: outlived the timeout: {:?}",
            processes_with(&token)
        );
        assert_eq!(session_ids(&mut c), vec![sid.clone()], "{level}");
        assert!(
            !ws.join("survivor.out").exists(),
            "{level}: the survivor ran after the timeout: {:?}",
            std::fs::read_to_string(ws.join("survivor.out"))
        );
    }
}

/// Kills whatever is left of a failed case (stopped keepers keep their children alive).
fn kill_leftovers(token: &str) {
    for p in processes_with(token) {
        if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
            // SAFETY: signalling a process this test's command started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A degraded command on a kernel whose Landlock does not scope signals (before ABI 6:
/// the `no_signal_scope` knob takes it away here) stops the processes that are to end
/// it, its guard (`$PPID`), the guard's process group, the outer helper, after leaving a
/// `setsid` sleeper: seccomp refuses each signal, and the sleeper still dies at the
/// timeout. `kill -0 -1` (every process the caller may signal) is refused too.
#[test]
fn a_command_cannot_stop_its_guard_to_outlive_the_timeout() {
    let o = outside();
    let d = at_level(&o, Some("no_userns,no_signal_scope")).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let ws = d.workspace().to_path_buf();
    for (i, attack) in [
        "kill -STOP $PPID",
        "kill -STOP -- -$PPID",
        "kill -STOP $outer $PPID",
    ]
    .into_iter()
    .enumerate()
    {
        let token = format!("{}{i}", 10_000 + rand::random::<u32>() % 80_000);
        let cmd = format!(
            "outer=$(cut -d' ' -f4 /proc/$PPID/stat)
             setsid sleep 86400.{token} </dev/null >/dev/null 2>&1 &
             kill -s 0 -- -1 2> all{i}.err && echo every-process-reached >> all{i}.err
             {attack} 2> kill{i}.err
             sleep 300 & kill -TERM $! && wait $!; echo own-child=$? > own{i}.txt
             sleep 600.{token}"
        );
        let calls = [("shell", json!({"command": cmd, "timeout_s": 2}))];
        let (r, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .expect("a tool_result")
            .clone();
        let gone = wait_until(Duration::from_secs(30), || {
            processes_with(&token).is_empty()
        });
        let left = processes_with(&token);
        kill_leftovers(&token);
        assert!(gone, "{attack}: outlived the timeout: {left:?}");
        assert_eq!(r["status"], "completed", "{attack}: {r}");
        assert_eq!(res["data"]["error"]["kind"], "timeout", "{attack}: {res}");
        let err = |f: String| std::fs::read_to_string(ws.join(f)).unwrap_or_default();
        assert!(
            err(format!("kill{i}.err")).contains("Operation not permitted"),
            "{attack}: the signal was not refused: {:?}",
            err(format!("kill{i}.err"))
        );
        let all = err(format!("all{i}.err"));
        assert!(
            all.contains("Operation not permitted") && !all.contains("every-process-reached"),
            "kill -0 -1 was not refused: {all:?}"
        );
        // The command's own processes stay its to signal.
        assert_eq!(err(format!("own{i}.txt")), "own-child=143\n", "{attack}");
        // The level says what this kernel lacks.
        assert!(
            res.to_string().contains("signal scoping"),
            "{attack}: {res}"
        );
    }
}

/// Secrets the first hidden set did not know: other agents' credentials and stores,
/// database client files, shell histories, agentd's default home while the daemon runs
/// with another, `.env` files outside the workspace, and `[sandbox] hide`. The
/// workspace's own `.env` stays readable.
#[test]
fn other_agents_credentials_histories_and_outside_env_files_are_hidden() {
    let planted = [
        (".codex/auth.json", "CODEX-SECRET"),
        (".claude/.credentials.json", "CLAUDE-SECRET"),
        (".claude.json", "CLAUDEJSON-SECRET"),
        (".gemini/oauth_creds.json", "GEMINI-SECRET"),
        (".config/github-copilot/apps.json", "COPILOT-SECRET"),
        (".local/share/opencode/auth.json", "OPENCODE-SECRET"),
        (".pgpass", "PGPASS-SECRET"),
        (".my.cnf", "MYCNF-SECRET"),
        (".bash_history", "BASHHIST-SECRET"),
        (".custom_repl_history", "CUSTOMHIST-SECRET"),
        (".local/share/fish/fish_history", "FISH-SECRET"),
        (".config/rclone/rclone.conf", "RCLONE-SECRET"),
        (".kube/config", "KUBE-SECRET"),
        (".local/state/agentd/sessions/s.ndjson", "AGENTDLOG-SECRET"),
        (".env.local", "HOMEENV-SECRET"),
        ("extra-secret/token", "EXTRA-SECRET"),
    ];
    for (level, force) in LEVELS {
        let o = outside();
        for (rel, text) in planted {
            let p = o.home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let proj = o.root.join("proj");
        let ws = proj.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(proj.join(".env"), "PARENTENV-SECRET").unwrap();
        std::fs::write(proj.join(".env.production"), "PARENTPROD-SECRET").unwrap();
        std::fs::write(ws.join(".env"), "WS-ENV-OK").unwrap();
        let d = at_level(&o, force)
            .config("[sandbox]\nhide = [\"~/extra-secret\"]\n")
            .start();
        let mut c = d.connect();
        let sid = c.call_ok("agentd/create", json!({"workspace": ws}))["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut cmd = String::from("cat .env; echo\n");
        for (rel, _) in planted {
            cmd.push_str(&format!("cat {} 2>/dev/null\n", q(&o.home.join(rel))));
        }
        for f in [".env", ".env.production"] {
            cmd.push_str(&format!("cat {} 2>/dev/null\n", q(&proj.join(f))));
        }
        cmd.push_str("echo end");
        let calls = [("shell", json!({"command": cmd}))];
        let (r, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
        assert_eq!(r["status"], "completed", "{level}: {r}");
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .expect("a tool_result");
        let text = res["data"]["output"].as_str().unwrap_or("").to_string();
        assert!(
            text.contains("WS-ENV-OK") && text.contains("end"),
            "{level}: {res}"
        );
        assert!(!text.contains("-SECRET"), "{level}: {text}");
        assert_eq!(res["data"]["sandbox"]["level"], level, "{level}: {res}");
        // The file tools agree: a hidden path is refused even by absolute path.
        let calls = [(
            "read_file",
            json!({"path": o.home.join(".codex/auth.json")}),
        )];
        let (_, evs) = turn_calling(&d, &mut c, &sid, &calls, json!({}));
        let res = evs
            .iter()
            .rev()
            .find(|e| is_type(e, "tool_result"))
            .unwrap();
        assert!(!res.to_string().contains("CODEX-SECRET"), "{level}: {res}");
    }
}

/// What a mount namespace gave the full level, the degraded level gets by other means:
/// the host's SysV shared memory, its terminals, `/dev/shm`, its Unix sockets (with
/// network `none`) and another command's private `TMPDIR` are all out of reach.
#[test]
fn host_ipc_terminals_shm_sockets_and_other_commands_tmp_are_out_of_reach() {
    // SAFETY: plain SysV and pty calls on the test's own objects.
    let (shm, pts) = unsafe {
        let id = libc::shmget(libc::IPC_PRIVATE, 4096, 0o600 | libc::IPC_CREAT);
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        let p = libc::shmat(id, std::ptr::null(), 0);
        assert!(p as isize != -1);
        std::ptr::copy_nonoverlapping(c"HOST-SHM-SECRET".as_ptr().cast::<u8>(), p as *mut u8, 16);
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0 && libc::grantpt(m) == 0 && libc::unlockpt(m) == 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m))
            .to_string_lossy()
            .into_owned();
        (id, name)
    };
    struct Shm(i32);
    impl Drop for Shm {
        fn drop(&mut self) {
            // SAFETY: removing the test's own segment.
            unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
    let _shm = Shm(shm);
    let token = format!("{}", rand::random::<u64>());
    let shm_file = format!("/dev/shm/agentd-escape-{token}");
    for (level, force) in LEVELS {
        let o = outside();
        let sock_path = o.root.join("host.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
        // As root the suite can also put a socket where daemons keep theirs.
        let run_sock = std::path::PathBuf::from(format!("/run/agentd-escape-{token}.sock"));
        let _run_listener = std::os::unix::net::UnixListener::bind(&run_sock).ok();
        let d = at_level(&o, force).start();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let probe = q(&bin("sandbox-probe"));
        let cmd = format!(
            "{probe} shmat {shm}; {probe} open {pts}; {probe} open /dev/tty
             echo x > {shm_file} 2>/dev/null && echo BAD-SHM-WRITTEN
             {probe} unix {sock}; {probe} socketpair
             {probe} unix {run} | sed s/^/run-/
             echo tmpdir=$TMPDIR",
            sock = q(&sock_path),
            run = q(&run_sock),
        );
        let r = super::shell(&d, &mut c, &sid, &cmd, json!({}));
        let text = super::output(&r);
        assert_eq!(r["sandbox"]["level"], level, "{r:#}");
        assert!(!text.contains("HOST-SHM-SECRET"), "{level}: {text}");
        assert!(!text.contains("shmat: ok"), "{level}: {text}");
        assert!(!text.contains("open: ok"), "{level}: {text}");
        // Full: the write lands in the command's own /dev/shm, gone with it.
        if level == "degraded" {
            assert!(!text.contains("BAD-SHM"), "{level}: {text}");
        }
        assert!(!Path::new(&shm_file).exists(), "{level}: {text}");
        assert!(text.contains("socketpair: ok"), "{level}: {text}");
        if level == "degraded" {
            assert!(text.contains("unix: EPERM"), "{level}: {text}");
        }
        if _run_listener.is_some() {
            assert!(!text.contains("run-unix: ok"), "{level}: {text}");
            let _ = std::fs::remove_file(&run_sock);
        }
        if level == "degraded" {
            // Another command's private TMPDIR, next to this one's: not readable.
            let tmpdir = text
                .lines()
                .find_map(|l| l.strip_prefix("tmpdir="))
                .expect("TMPDIR printed")
                .to_string();
            // In agentd's home, hidden anyway, not below the crowded system `/tmp`
            // (where hiding it cost a Landlock rule for each of `/tmp`'s entries).
            let home = d.home().canonicalize().unwrap();
            assert!(
                Path::new(&tmpdir).starts_with(home.join("sandbox-tmp")),
                "{tmpdir} not in {}",
                home.display()
            );
            let other = Path::new(&tmpdir).parent().unwrap().join("cmd-other");
            std::fs::create_dir_all(&other).unwrap();
            std::fs::write(other.join("secret"), "OTHER-TMP-SECRET").unwrap();
            let cmd = format!(
                "cat {}/secret; ls {}; echo TMP-OK > $TMPDIR/mine && cat $TMPDIR/mine
                 mkdir /tmp/agentd-escape-{token}; echo npm-offline=$npm_config_offline",
                q(&other),
                q(other.parent().unwrap())
            );
            let r = super::shell(&d, &mut c, &sid, &cmd, json!({}));
            let text = super::output(&r);
            // The friction a user meets at this level comes with what to do instead.
            assert!(text.contains("use $TMPDIR"), "{text}");
            assert!(text.contains("npm-offline=true"), "{text}");
            assert!(!text.contains("OTHER-TMP-SECRET"), "{text}");
            assert!(!text.lines().any(|l| l.trim() == "cmd-other"), "{text}");
            assert!(text.contains("TMP-OK"), "{text}");
            let _ = std::fs::remove_dir_all(&other);
        }
    }
}

/// With `cache:cargo` granted, a command edits `build.rs` of a crate already extracted
/// in `$CARGO_HOME/registry/src` and extracts a new one: the user's next `cargo build`
/// outside would run both. At the full level the cache is an overlay whose writes stay
/// in a layer of the workspace's own (the next command there sees them, the host never
/// does); at the degraded level the cache is read-only.
#[test]
fn a_granted_cache_never_changes_what_the_users_own_builds_run() {
    for (level, force) in LEVELS {
        let o = outside();
        let cargo_home = o.home.join(".cargo");
        let src = cargo_home.join("registry/src/index.crates.io-1949cf8c6b5b557f");
        let build_rs = src.join("serde-1.0.0/build.rs");
        std::fs::create_dir_all(build_rs.parent().unwrap()).unwrap();
        std::fs::write(&build_rs, "fn main() {} // ORIGINAL\n").unwrap();
        let d = at_level(&o, force)
            .env("CARGO_HOME", &cargo_home)
            .config("[sandbox]\ncaches = [\"cache:cargo\"]\n")
            .start();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let cmd = format!(
            "echo 'fn main() {{ /* PLANTED */ }}' > {b} 2>/dev/null
             mkdir -p {s}/evil-0.1.0 2>/dev/null && echo 'fn main() {{}}' > {s}/evil-0.1.0/build.rs
             cat {b}; ls {s}",
            b = q(&build_rs),
            s = q(&src),
        );
        let r = super::shell(&d, &mut c, &sid, &cmd, json!({}));
        let text = super::output(&r);
        assert_eq!(r["sandbox"]["level"], level, "{r:#}");
        // On the host, after the command: what the user's builds would run is intact.
        assert_eq!(
            std::fs::read_to_string(&build_rs).unwrap(),
            "fn main() {} // ORIGINAL\n",
            "{level}: {r:#}"
        );
        assert!(!src.join("evil-0.1.0").exists(), "{level}: {r:#}");
        let caches = &r["sandbox"]["caches"];
        let cache_root = cargo_home.join("registry").display().to_string();
        if level == "full" && r["sandbox"]["cache_layers_failed"].is_null() {
            // The workspace's own layer: the command saw its own writes, and so does the
            // next command in this workspace.
            assert!(
                text.contains("PLANTED") && text.contains("evil-0.1.0"),
                "{r:#}"
            );
            assert!(caches["layered"].to_string().contains(&cache_root), "{r:#}");
            let r2 = super::shell(
                &d,
                &mut c,
                &sid,
                &format!("cat {}", q(&build_rs)),
                json!({}),
            );
            assert!(super::output(&r2).contains("PLANTED"), "{r2:#}");
        } else if level == "full" {
            // The kernel refused the overlay (an upper layer on a filesystem overlayfs
            // cannot use): read-only instead, and said so.
            assert!(!text.contains("PLANTED"), "{level}: {r:#}");
            assert!(
                r["sandbox"]["cache_layers_failed"]
                    .to_string()
                    .contains(&cache_root),
                "{r:#}"
            );
        } else {
            // Read-only: refused, said so.
            assert!(!text.contains("PLANTED"), "{level}: {r:#}");
            assert!(
                caches["read_only"].to_string().contains(&cache_root),
                "{r:#}"
            );
        }
    }
}
