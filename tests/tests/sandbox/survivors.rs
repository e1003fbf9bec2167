//! Nothing sandboxed survives the daemon (docs/sandbox.md#when-the-daemon-dies). A
//! turn runs a long command that also leaves a `setsid` process behind, next to a
//! sandboxed MCP server; the daemon is killed with SIGKILL, and every one of those
//! processes (and the helpers above them) must be gone soon after, found on the host by
//! pidfds taken while they ran. Then a new daemon on the same home sweeps the killed
//! daemon's cgroups while a second, live daemon's stay, and the cut command is closed
//! `outcome_unknown`, never run again. In full and in degraded mode; `.ci/sandbox.sh`
//! runs it unprivileged too (no cgroups there: that part is root's or a delegated
//! hierarchy's).
//!
//! As root a leftover in a cgroup of a dead daemon is also killed by the sweep of any
//! daemon that starts on the machine meanwhile (another test's), so there a broken
//! lifeline may go unnoticed; the unprivileged run has no cgroups and no sweep, and
//! fails on it.

use super::{builder, create, mcp_entry, outside, Outside};
use agentd_tests::{is_type, Daemon, DaemonBuilder, RpcConn};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);

fn at_level(o: &Outside, force: Option<&str>, config: &str) -> DaemonBuilder {
    let b = builder(o).config(config);
    match force {
        Some(f) => b.env("AGENTD_SANDBOX_FORCE", f),
        None => b,
    }
}

/// Starts a turn that calls `calls` in its first step, without waiting for it.
fn start_turn(d: &Daemon, c: &mut RpcConn, sid: &str, calls: &[(&str, Value)]) {
    let p = d.root().join(format!("m{}.json", rand::random::<u64>()));
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(n, a)| json!({"name": n, "args": a}))
        .collect();
    let body = json!({"rules": [{"steps": [{"tool_calls": tool_calls}, {"text": "done"}]}]});
    std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
    c.call_ok(
        "agentd/turn",
        json!({"session_id": sid, "input": "go", "wait": false,
               "model": format!("script:{}", p.display())}),
    );
}

fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        s.get(s.rfind(')')? + 2..)?
            .split_whitespace()
            .map(String::from)
            .collect(),
    )
}

fn ppid(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Live (not zombie) host processes for which `pred(pid)` holds.
fn host_pids(pred: impl Fn(i32) -> bool) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| stat_fields(p).is_some_and(|f| f[0] != "Z") && pred(p))
        .collect()
}

/// A process pinned by a pidfd (its identity survives pid reuse).
struct Pinned {
    pid: i32,
    what: String,
    fd: OwnedFd,
}

/// `leaves` and every ancestor up to (not including) `root`, each pinned by a pidfd.
fn lineage(leaves: &[i32], root: i32) -> Vec<Pinned> {
    let mut seen = BTreeSet::new();
    for &leaf in leaves {
        let mut p = leaf;
        while p > 1 && p != root && seen.insert(p) {
            match ppid(p) {
                Some(pp) => p = pp,
                None => break,
            }
        }
    }
    seen.into_iter()
        .filter_map(|pid| {
            // SAFETY: pidfd_open takes a pid and flags; a negative result is an error.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
            // SAFETY: a fresh descriptor we own.
            (fd >= 0).then(|| Pinned {
                pid,
                what: cmdline(pid),
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
            })
        })
        .collect()
}

/// Waits (poll on the pidfds) until every pinned process has exited; the ones still
/// running at `deadline`.
fn survivors(pinned: Vec<Pinned>, deadline: Instant) -> Vec<String> {
    let mut left = pinned;
    while !left.is_empty() {
        let ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as i32;
        if ms == 0 {
            break;
        }
        let mut fds: Vec<libc::pollfd> = left
            .iter()
            .map(|p| libc::pollfd {
                fd: p.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: poll on a vector of valid pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            continue;
        }
        let exited: BTreeSet<i32> = fds
            .iter()
            .filter(|f| f.revents != 0)
            .map(|f| f.fd)
            .collect();
        left.retain(|p| !exited.contains(&p.fd.as_raw_fd()));
    }
    left.iter()
        .map(|p| format!("{} {}", p.pid, p.what))
        .collect()
}

fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The directories per-command cgroups of the daemon `pid` are made in, from what its
/// commands report (`limits.cgroup`); empty when it makes none.
fn cgroup_bases(kind: &str, daemon_pid: u32) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    match kind {
        "v1" => vec![
            root.join("pids/agentd-sandbox"),
            root.join("memory/agentd-sandbox"),
        ],
        "v2" => {
            // A delegated daemon moved itself into `<own>/agentd-daemon`; as root it
            // stays where it was and uses the root's.
            let own = std::fs::read_to_string(format!("/proc/{daemon_pid}/cgroup"))
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("0::").map(String::from))
                .unwrap();
            match own.trim().strip_suffix("/agentd-daemon") {
                Some(parent) => vec![root
                    .join(parent.trim_start_matches('/'))
                    .join("agentd-sandbox")],
                None => vec![root.join("agentd-sandbox")],
            }
        }
        other => panic!("unknown cgroup hierarchy {other:?}"),
    }
}

/// The per-command cgroups of daemon `pid` in `bases`.
fn cgroups_of(bases: &[PathBuf], pid: u32) -> BTreeSet<PathBuf> {
    let prefix = format!("cmd-{pid}-");
    bases
        .iter()
        .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

fn mcp_facts(c: &mut RpcConn, sid: &str) -> Option<Value> {
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()?
        .clone();
    let ev = evs.iter().rev().find(|e| is_type(e, "mcp_servers"))?;
    ev["data"]["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "boxed")
        .map(|s| s["sandbox"].clone())
}

fn a_killed_daemon_takes_everything_sandboxed_with_it(level: &str, force: Option<&str>) {
    let o = outside();
    let server = mcp_entry("boxed", "sandbox = true\n");
    let mut d = at_level(&o, force, &server).start();
    let ws = d.workspace().canonicalize().unwrap();
    // A day's sleep: it must not end on its own, however slow the machine. The fraction
    // makes it this test's.
    let mark = format!("8640{}.{}", u8::from(force.is_some()), std::process::id());
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    let command = format!(
        "ls /proc/$$/fd > fds.txt; echo ran >> count.txt
         setsid sleep {mark} >/dev/null 2>&1 </dev/null & sleep {mark}"
    );
    start_turn(
        &d,
        &mut c,
        &sid,
        &[
            ("mcp__boxed__echo", json!({"message": "hi"})),
            ("shell", json!({"command": command})),
        ],
    );
    let is_mark = |p: i32| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
            && cmdline(p).contains(&mark)
    };
    let is_server = |p: i32| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .is_ok_and(|c| c.trim() == "agentd-mcp-fake")
            && std::fs::read_link(format!("/proc/{p}/cwd")).is_ok_and(|d| d == ws)
    };
    let leaves = wait_until("the command, its setsid child and the server", || {
        let sleeps = host_pids(is_mark);
        let servers = host_pids(is_server);
        (sleeps.len() == 2 && servers.len() == 1).then(|| [sleeps, servers].concat())
    });
    let daemon_pid = d.pid().unwrap();
    let pinned = lineage(&leaves, daemon_pid as i32);
    // The sleeps, the server, and above them the shell and the helpers.
    assert!(pinned.len() >= 6, "{level}: too few processes found");
    assert!(
        pinned.iter().any(|p| p.what.contains("__sandbox-exec")),
        "{level}: no sandbox helper above the command: {:?}",
        pinned.iter().map(|p| &p.what).collect::<Vec<_>>()
    );
    // The lifeline never reaches the command: its shell holds only 0, 1 and 2.
    assert_eq!(
        std::fs::read_to_string(ws.join("fds.txt")).unwrap(),
        "0\n1\n2\n",
        "{level}"
    );
    let facts = wait_until("the server's sandbox facts", || mcp_facts(&mut c, &sid));
    assert_eq!(facts["level"], level, "{facts}");
    let kind = facts["limits"]["cgroup"].as_str().map(String::from);
    let bases = kind
        .as_deref()
        .map(|k| cgroup_bases(k, daemon_pid))
        .unwrap_or_default();
    let killed_cgroups = cgroups_of(&bases, daemon_pid);
    match &kind {
        Some(_) => assert!(
            !killed_cgroups.is_empty(),
            "{level}: the daemon's commands have no cgroup in {bases:?}"
        ),
        // No cgroups (not root, no delegated hierarchy): recorded as such.
        // SAFETY: geteuid never fails.
        None => assert_ne!(
            unsafe { libc::geteuid() },
            0,
            "root always gets a cgroup: {facts}"
        ),
    }

    // A second daemon, live, with a command running in its own cgroup, and a cgroup of
    // its just made (still empty, as before a command joins it). Started before the kill:
    // in this test only the restarted daemon starts after it.
    let o2 = outside();
    let mut other = at_level(&o2, force, "").start();
    let other_pid = other.pid().unwrap();
    let mut c2 = other.connect();
    let sid2 = create(&mut c2, &other, None);
    let mark2 = format!("8641{}.{}", u8::from(force.is_some()), std::process::id());
    start_turn(
        &other,
        &mut c2,
        &sid2,
        &[("shell", json!({"command": format!("sleep {mark2}")}))],
    );
    let is_mark2 = |p: i32| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
            && cmdline(p).contains(&mark2)
    };
    wait_until("the live daemon's command", || {
        (!host_pids(is_mark2).is_empty()).then_some(())
    });
    let fresh: Vec<PathBuf> = bases
        .iter()
        .map(|b| b.join(format!("cmd-{other_pid}-999999-00c0ffee")))
        .collect();
    for f in &fresh {
        std::fs::create_dir(f).unwrap();
    }
    let live_before = cgroups_of(&bases, other_pid);
    if kind.is_some() {
        assert!(
            live_before.len() > fresh.len(),
            "{level}: the live daemon's command has no cgroup: {live_before:?}"
        );
    }

    d.kill9();
    let left = survivors(pinned, Instant::now() + WAIT);
    assert!(
        left.is_empty(),
        "{level}: sandboxed processes outlived the killed daemon: {left:#?}"
    );

    // The next daemon on the killed one's home: the killed daemon's cgroups are swept
    // before it serves; the live daemon's stay, the empty one too.
    d.spawn();
    d.wait_ready(WAIT).unwrap();
    assert_eq!(
        cgroups_of(&bases, daemon_pid),
        BTreeSet::new(),
        "{level}: the killed daemon's cgroups were not swept (before: {killed_cgroups:?})"
    );
    assert_eq!(
        cgroups_of(&bases, other_pid),
        live_before,
        "{level}: a live daemon's cgroups were touched"
    );

    // The cut command is closed `outcome_unknown` and never run again.
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(0));
    sub.wait_event(|e| is_type(e, "turn_ended"), WAIT)
        .unwrap_or_else(|| panic!("{level}: the resumed turn did not end"));
    let mut c = d.connect();
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone();
    let shell_calls: Vec<&Value> = evs
        .iter()
        .filter(|e| is_type(e, "tool_call") && e["data"]["name"] == "shell")
        .collect();
    assert_eq!(shell_calls.len(), 1, "{level}: {evs:#?}");
    let id = &shell_calls[0]["data"]["call_id"];
    let result = evs
        .iter()
        .find(|e| is_type(e, "tool_result") && &e["data"]["call_id"] == id)
        .unwrap_or_else(|| panic!("{level}: no result of the cut shell call: {evs:#?}"));
    assert_eq!(
        result["data"]["error"]["kind"], "outcome_unknown",
        "{level}: {result}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("count.txt")).unwrap(),
        "ran\n",
        "{level}: the command ran once"
    );
    assert!(
        host_pids(is_mark).is_empty(),
        "{level}: the command ran again"
    );

    // A clean shutdown takes the daemon's own cgroups with it, the empty one included.
    other.shutdown(WAIT).expect("the live daemon stops");
    let after = cgroups_of(&bases, other_pid);
    for f in &fresh {
        let _ = std::fs::remove_dir(f);
    }
    assert_eq!(
        after,
        BTreeSet::new(),
        "{level}: a cleanly stopped daemon left its cgroups"
    );
}

/// A hook (docs/hooks.md) runs under the session's sandbox like `shell`: one that is still
/// running when the daemon is killed, with what it detached, goes with the daemon.
#[test]
fn a_killed_daemon_takes_a_running_hook_with_it() {
    for (level, force) in [("full", None), ("degraded", Some("no_userns"))] {
        let o = outside();
        let mark = format!("8642{}.{}", u8::from(force.is_some()), std::process::id());
        let hook = format!(
            "[[hooks.pre_tool_use]]\ntimeout_s = 600\ncommand = '''setsid sleep {mark} \
             >/dev/null 2>&1 </dev/null & sleep {mark}'''\n"
        );
        let mut d = at_level(&o, force, &hook).start();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        start_turn(
            &d,
            &mut c,
            &sid,
            &[("shell", json!({"command": "echo the-call"}))],
        );
        let is_mark = |p: i32| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
                && cmdline(p).contains(&mark)
        };
        let leaves = wait_until("the hook and its setsid child", || {
            let sleeps = host_pids(is_mark);
            (sleeps.len() == 2).then_some(sleeps)
        });
        let pinned = lineage(&leaves, d.pid().unwrap() as i32);
        assert!(
            pinned.iter().any(|p| p.what.contains("__sandbox-exec")),
            "{level}: the hook runs without a sandbox helper: {:?}",
            pinned.iter().map(|p| &p.what).collect::<Vec<_>>()
        );
        d.kill9();
        let left = survivors(pinned, Instant::now() + WAIT);
        assert!(
            left.is_empty(),
            "{level}: a hook outlived the killed daemon: {left:#?}"
        );
    }
}

/// A degraded command on a kernel whose Landlock does not scope signals (the
/// `no_signal_scope` knob takes it away here) stops the outer helper, the process that
/// watches the daemon's lifeline, and its guard, after leaving a `setsid` sleeper: both
/// signals are refused, and when the daemon is killed everything the command started
/// goes with it.
#[test]
fn a_command_cannot_stop_its_keepers_to_outlive_a_killed_daemon() {
    for (i, attack) in ["kill -STOP $outer $PPID", "kill -STOP $outer"]
        .into_iter()
        .enumerate()
    {
        let o = outside();
        let mut d = at_level(&o, Some("no_userns,no_signal_scope"), "").start();
        let ws = d.workspace().canonicalize().unwrap();
        let mark = format!("8643{i}.{}", std::process::id());
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let command = format!(
            "outer=$(cut -d' ' -f4 /proc/$PPID/stat)
             setsid sleep {mark} >/dev/null 2>&1 </dev/null &
             {attack} 2> kill.err; echo done > attacked
             sleep {mark}"
        );
        start_turn(&d, &mut c, &sid, &[("shell", json!({"command": command}))]);
        let is_mark = |p: i32| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
                && cmdline(p).contains(&mark)
        };
        let leaves = wait_until("the command's attack and its sleepers", || {
            let sleeps = host_pids(is_mark);
            (sleeps.len() == 2 && ws.join("attacked").exists()).then_some(sleeps)
        });
        let pinned = lineage(&leaves, d.pid().unwrap() as i32);
        assert!(
            pinned.iter().any(|p| p.what.contains("__sandbox-exec")),
            "{attack}: no sandbox helper above the command: {:?}",
            pinned.iter().map(|p| &p.what).collect::<Vec<_>>()
        );
        d.kill9();
        let left = survivors(pinned, Instant::now() + WAIT);
        let stray = left
            .iter()
            .filter_map(|l| l.split(' ').next()?.parse::<i32>().ok());
        for p in stray.chain(host_pids(is_mark)) {
            // SAFETY: ending what a failed case left (a stopped keeper keeps it alive).
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        assert!(
            left.is_empty(),
            "{attack}: outlived the killed daemon: {left:#?}"
        );
        let err = std::fs::read_to_string(ws.join("kill.err")).unwrap_or_default();
        assert!(
            err.contains("Operation not permitted"),
            "{attack}: the signal was not refused: {err:?}"
        );
    }
}

#[test]
fn a_killed_daemon_takes_its_sandboxed_processes_and_cgroups_with_it_full() {
    a_killed_daemon_takes_everything_sandboxed_with_it("full", None);
}

#[test]
fn a_killed_daemon_takes_its_sandboxed_processes_and_cgroups_with_it_degraded() {
    a_killed_daemon_takes_everything_sandboxed_with_it("degraded", Some("no_userns"));
}
