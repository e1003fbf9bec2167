//! The spare helper (docs/sandbox.md#cost): a `shell` command after the first takes a
//! helper that was started, and moved into its cgroup, while the model thought. It must
//! be confined exactly as a helper started for the command, and a spare must never
//! outlive its daemon. Each case runs in full and in degraded mode and, through
//! `.ci/sandbox.sh`, unprivileged too.

use super::{builder, create, outside, q, shell};
use agentd_tests::wait_exit;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The two sandbox levels a case runs at.
const LEVELS: [(&str, Option<&str>); 2] = [("full", None), ("degraded", Some("no_userns"))];

/// The facts that must not depend on how the helper was started.
fn confinement(f: &Value) -> Value {
    let keys = [
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
    ];
    keys.iter()
        .map(|k| (k.to_string(), f.get(*k).cloned().unwrap_or(Value::Null)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[test]
fn a_command_on_the_spare_helper_is_confined_as_the_first_was() {
    for (level, force) in LEVELS {
        let o = outside();
        let mut b = builder(&o);
        if let Some(f) = force {
            b = b.env("AGENTD_SANDBOX_FORCE", f);
        }
        let d = b.start();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        let cmd = format!(
            "echo inside > ok.txt && echo wrote-ws; \
             echo x > {out} 2>/dev/null || echo outside-refused; \
             cat {key} 2>/dev/null || echo key-hidden; \
             echo \"fds: $(ls /proc/self/fd | sort -n | tr '\\n' ' ')\"; \
             grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; \
             echo \"umask $(umask)\"",
            out = q(&o.root.join("out/victim")),
            key = q(&o.home.join(".ssh/id_ed25519")),
        );
        // The first command of the daemon starts its own helper; the spare is started
        // once it has ended, and the next command takes it (a command waits only so
        // long for a spare still starting: on a loaded machine a later one takes it).
        let first = shell(&d, &mut c, &sid, &cmd, json!({}));
        let second = (0..5)
            .map(|_| shell(&d, &mut c, &sid, &cmd, json!({})))
            .find(|r| r["sandbox"]["spare"] == true)
            .unwrap_or_else(|| panic!("{level}: no command took a spare"));
        let (f1, f2) = (&first["sandbox"], &second["sandbox"]);
        assert_eq!(f1["spare"], false, "{level}: {f1:#}");
        assert_eq!(f2["level"], level, "{f2:#}");
        let text = first["output"].as_str().unwrap_or("");
        for want in [
            "wrote-ws",
            "outside-refused",
            "key-hidden",
            "NoNewPrivs:\t1",
        ] {
            assert!(text.contains(want), "{level}: {want}: {first:#}");
        }
        assert_eq!(first["output"], second["output"], "{level}");
        assert_eq!(confinement(f1), confinement(f2), "{level}");
        assert_eq!(
            std::fs::read_to_string(o.root.join("out/victim")).unwrap(),
            "original"
        );
    }
}

/// The daemon's children that are spare helpers (`__sandbox-exec spare`).
fn spares_of(daemon: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(daemon) && cmd.split(|b| *b == 0).any(|a| a == b"spare")
        })
        .collect()
}

#[test]
fn a_spare_helper_does_not_outlive_a_killed_daemon() {
    for (level, force) in LEVELS {
        let o = outside();
        let mut b = builder(&o);
        if let Some(f) = force {
            b = b.env("AGENTD_SANDBOX_FORCE", f);
        }
        let mut d = b.start();
        let mut c = d.connect();
        let sid = create(&mut c, &d, None);
        shell(&d, &mut c, &sid, "true", json!({}));
        let daemon = d.pid().expect("the harness started the daemon");
        // The spare is started in the background once the command has ended; nothing
        // signals a process's birth to another, so the host looks until it is there.
        let end = Instant::now() + Duration::from_secs(60);
        let spare = loop {
            if let Some(p) = spares_of(daemon).first() {
                break *p;
            }
            assert!(Instant::now() < end, "{level}: no spare helper appeared");
            std::thread::sleep(Duration::from_millis(20));
        };
        d.kill9();
        assert!(
            wait_exit(spare as i32, Duration::from_secs(60)),
            "{level}: the spare helper {spare} outlived its daemon"
        );
    }
}

/// The per-command cgroups `daemon` made (named `cmd-<daemon pid>-…`), v1 or v2.
fn cgroups_of(daemon: u32) -> Vec<std::path::PathBuf> {
    let prefix = format!("cmd-{daemon}-");
    ["", "pids", "memory"]
        .iter()
        .map(|h| {
            std::path::Path::new("/sys/fs/cgroup")
                .join(h)
                .join("agentd-sandbox")
        })
        .filter_map(|base| std::fs::read_dir(base).ok())
        .flat_map(|rd| rd.flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

#[test]
fn a_daemon_that_stops_ends_its_spare_helper_and_removes_its_cgroup() {
    let o = outside();
    let mut d = builder(&o).start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    shell(&d, &mut c, &sid, "true", json!({}));
    let daemon = d.pid().expect("the harness started the daemon");
    // As above: nothing signals the spare's birth, so the host looks until it is there.
    let end = Instant::now() + Duration::from_secs(60);
    let spare = loop {
        if let Some(p) = spares_of(daemon).first() {
            break *p;
        }
        assert!(Instant::now() < end, "no spare helper appeared");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Its commands' cgroups are gone once they end: what is left is the spare's.
    let cgroups = cgroups_of(daemon);
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!cgroups.is_empty(), "as root the spare has its cgroup");
    }
    drop(c);
    let status = d.shutdown(Duration::from_secs(60));
    assert!(status.is_some(), "the daemon did not stop");
    assert!(
        wait_exit(spare as i32, Duration::from_secs(60)),
        "the spare helper {spare} outlived its daemon's stop"
    );
    for g in &cgroups {
        assert!(!g.exists(), "{} left behind", g.display());
    }
    assert_eq!(cgroups_of(daemon), Vec::<std::path::PathBuf>::new());
}

#[test]
fn with_no_spare_every_command_starts_its_own_helper() {
    let o = outside();
    let d = builder(&o).env("AGENTD_SANDBOX_FORCE", "no_spare").start();
    let mut c = d.connect();
    let sid = create(&mut c, &d, None);
    for n in 0..3 {
        let r = shell(&d, &mut c, &sid, &format!("echo run-{n}"), json!({}));
        assert_eq!(r["sandbox"]["spare"], false, "{r:#}");
        assert!(r["output"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("run-{n}")));
    }
    let daemon = d.pid().expect("the harness started the daemon");
    assert_eq!(spares_of(daemon), Vec::<u32>::new());
}
