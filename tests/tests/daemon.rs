//! Daemon lifecycle through the real binary (docs/protocol.md#the-socket, docs/protocol.md#methods `agentd/shutdown`): one
//! daemon per home, one per live socket, stale sockets replaced, permissions of the
//! socket and its directory, and a clean shutdown.

use agentd_tests::{wait_output, Daemon, RpcConn};
use serde_json::json;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[track_caller]
fn answers(d: &Daemon) -> u32 {
    let mut c = d.connect();
    let r = c.call_ok("agentd/hello", json!({}));
    r["pid"].as_u64().unwrap() as u32
}

fn socket_inode(d: &Daemon) -> u64 {
    std::fs::symlink_metadata(d.socket()).unwrap().ino()
}

#[test]
fn second_daemon_on_the_same_home_refuses_to_start() {
    let d = Daemon::start();
    let pid = answers(&d);
    let other_socket = d.root().join("run2").join("other.sock");
    let out = wait_output(
        d.agentd_cmd()
            .env("AGENTD_SOCKET", &other_socket)
            .spawn()
            .unwrap(),
        T,
    )
    .expect("the second daemon kept running");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.code.is_some(), "killed by a signal: {out:?}");
    assert!(
        out.stderr.contains("another agentd")
            && out.stderr.contains(&d.home().display().to_string()),
        "unclear message: {}",
        out.stderr
    );
    assert!(!other_socket.exists(), "the loser bound a socket");
    assert_eq!(answers(&d), pid, "the first daemon was disturbed");
}

#[test]
fn second_daemon_on_the_same_live_socket_refuses_to_start() {
    let d = Daemon::start();
    let pid = answers(&d);
    let inode = socket_inode(&d);
    let out = wait_output(
        d.agentd_cmd()
            .env("AGENTD_HOME", d.root().join("home2"))
            .spawn()
            .unwrap(),
        T,
    )
    .expect("the second daemon kept running");
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.code.is_some(), "killed by a signal: {out:?}");
    assert!(
        out.stderr.contains("already listening")
            && out.stderr.contains(&d.socket().display().to_string()),
        "unclear message: {}",
        out.stderr
    );
    // The live socket was neither replaced nor unlinked.
    assert_eq!(socket_inode(&d), inode);
    assert_eq!(answers(&d), pid);
}

#[test]
fn stale_socket_of_a_killed_daemon_is_replaced() {
    let mut d = Daemon::start();
    let sid = d.create_session();
    let old_pid = answers(&d);
    d.kill9();
    let meta = std::fs::symlink_metadata(d.socket()).expect("socket file left behind");
    assert!(meta.file_type().is_socket());
    assert!(
        RpcConn::connect(d.socket()).is_err(),
        "nobody should answer"
    );
    d.spawn();
    d.wait_ready(T).unwrap();
    let pid = answers(&d);
    assert_ne!(pid, old_pid);
    let mut c = d.connect();
    c.call_ok("agentd/show", json!({"session_id": sid}));
}

/// A path that holds something other than a socket is not ours to delete (docs/protocol.md#the-socket: a stale
/// socket file is removed only after a connect to it is refused).
#[test]
fn regular_file_at_the_socket_path_is_not_deleted() {
    let mut d = Daemon::builder().build();
    let dir = d.socket().parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(d.socket(), b"not a socket, keep me\n").unwrap();
    d.spawn();
    let res = d.wait_ready(Duration::from_secs(5));
    let kept = std::fs::read(d.socket()).ok();
    assert!(res.is_err(), "daemon started over a regular file");
    assert_eq!(
        kept.as_deref(),
        Some(&b"not a socket, keep me\n"[..]),
        "the daemon deleted a regular file at the socket path"
    );
}

#[test]
fn socket_is_0600_and_its_directory_0700() {
    let d = Daemon::start();
    let meta = std::fs::symlink_metadata(d.socket()).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "socket mode {:o}",
        meta.permissions().mode()
    );
    let dir = std::fs::metadata(d.socket().parent().unwrap()).unwrap();
    assert_eq!(
        dir.permissions().mode() & 0o777,
        0o700,
        "socket dir mode {:o}",
        dir.permissions().mode()
    );
    // The home is private too.
    let home = std::fs::metadata(d.home()).unwrap();
    assert_eq!(
        home.permissions().mode() & 0o077,
        0,
        "home readable by others"
    );
}

#[test]
fn shutdown_exits_zero_unlinks_the_socket_and_releases_the_home() {
    let mut d = Daemon::start();
    let sid = d.create_session();
    let mut c = d.connect();
    let r = c.call_ok("agentd/shutdown", json!({}));
    assert_eq!(r["ok"], true);
    let status = d
        .wait_exit(T)
        .expect("daemon did not exit after agentd/shutdown");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        std::fs::symlink_metadata(d.socket()).is_err(),
        "socket file left after a clean shutdown"
    );
    assert!(c.closed_within(T), "connection left open");
    // The lock is released: a new daemon starts on the same home with the data.
    d.spawn();
    d.wait_ready(T).unwrap();
    let mut c = d.connect();
    c.call_ok("agentd/show", json!({"session_id": sid}));
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut d = Daemon::start();
    let pid = d.pid().unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let status = d.wait_exit(T).expect("daemon ignored SIGTERM");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(std::fs::symlink_metadata(d.socket()).is_err());
}

/// docs/protocol.md#methods `agentd/shutdown` and daemon.rs's shutdown order: in-flight calls finish and their
/// responses are flushed before connections close. So every append that reached the
/// Log was answered with success, and the shutdown call itself is answered.
#[test]
fn shutdown_answers_every_call_it_executed() {
    const ROUNDS: usize = 5;
    const PIPELINED: u64 = 200;
    for round in 0..ROUNDS {
        let mut d = Daemon::start();
        let sid = d.create_session();
        let mut load = d.connect();
        let mut ctl = d.connect();
        let mut batch = String::new();
        for i in 0..PIPELINED {
            let req = json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "agentd/append",
                "params": {"session_id": sid, "events": [{"type": "user_message", "data": {"text": format!("req {}", 1000 + i)}}]}});
            batch.push_str(&format!("{req}\n"));
        }
        load.send_raw(batch.as_bytes()).unwrap();
        ctl.set_call_timeout(T);
        let r = ctl.try_call("agentd/shutdown", json!({}));
        let shutdown_answered = matches!(&r, Ok(v) if v["result"]["ok"] == true);
        let mut acked = std::collections::HashSet::new();
        while let Some(m) = load.read_message(T) {
            if m.get("result").is_some() {
                acked.insert(m["id"].as_u64().unwrap());
            }
        }
        let status = d.wait_exit(T).expect("daemon did not exit");
        assert_eq!(status.code(), Some(0));
        d.spawn();
        d.wait_ready(T).unwrap();
        let mut c = d.connect();
        let evs = c.call_ok(
            "agentd/events",
            json!({"session_id": sid, "types": ["user_message"], "limit": 10_000}),
        );
        let in_log: Vec<u64> = evs["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e["data"]["text"].as_str().unwrap()[4..]
                    .parse::<u64>()
                    .unwrap()
            })
            .collect();
        let unanswered: Vec<u64> = in_log
            .iter()
            .copied()
            .filter(|id| !acked.contains(id))
            .collect();
        assert!(
            unanswered.is_empty(),
            "round {round}: {} appends were written but never answered ({} answered); shutdown answered: {shutdown_answered}",
            unanswered.len(),
            acked.len()
        );
        assert!(
            shutdown_answered,
            "round {round}: agentd/shutdown got {r:?}"
        );
    }
}
