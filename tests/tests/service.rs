//! agentd as a service (DESIGN §13 "Service"): a socket passed by a service manager,
//! readiness and stop notices, idle exit, and the unit files and plist in packaging/.
//!
//! Socket activation runs under `systemd-socket-activate` (Debian's `systemd` package),
//! which binds the socket, waits for the first connection, then execs agentd in its own
//! process with `LISTEN_FDS=1`. A test whose systemd tool is missing fails naming the
//! package; `.ci/service.sh` installs it.

use agentd_tests::{bin, RpcConn};
use serde_json::json;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

/// Path of a systemd tool; panics naming the package when it is not installed.
fn systemd_tool(name: &str) -> PathBuf {
    for dir in std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
    {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} not found: install Debian's `systemd` package (apt-get install -y systemd); \
         .ci/service.sh does this"
    );
}

/// Waits for `cond` with a short backoff until `timeout`.
fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(5);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(100));
    }
}

/// agentd behind `systemd-socket-activate`, with a private home, config and a
/// `NOTIFY_SOCKET` the test reads.
struct Activated {
    dir: tempfile::TempDir,
    socket: PathBuf,
    notify: UnixDatagram,
    child: Option<Child>,
}

impl Activated {
    fn start(config: &str) -> Activated {
        let tool = systemd_tool("systemd-socket-activate");
        let dir = tempfile::Builder::new()
            .prefix("agentd-sa")
            .tempdir()
            .unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let socket = run.join("agentd.sock");
        let config_path = dir.path().join("config.toml");
        std::fs::write(&config_path, config).unwrap();
        let notify_path = dir.path().join("notify");
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_read_timeout(Some(T)).unwrap();
        let out = std::fs::File::create(dir.path().join("agentd.out")).unwrap();
        let env = |k: &str, v: &Path| format!("{k}={}", v.display());
        // systemd-socket-activate hands the program only the variables named by -E.
        let child = Command::new(tool)
            .arg("--listen")
            .arg(&socket)
            .arg("-E")
            .arg(env("AGENTD_HOME", &dir.path().join("home")))
            .arg("-E")
            .arg(env("AGENTD_SOCKET", &socket))
            .arg("-E")
            .arg(env("AGENTD_CONFIG", &config_path))
            .arg("-E")
            .arg(env("NOTIFY_SOCKET", &notify_path))
            .arg("-E")
            .arg("AGENTD_LOG=info")
            .arg(bin("agentd"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("spawn systemd-socket-activate");
        let a = Activated {
            dir,
            socket,
            notify,
            child: Some(child),
        };
        assert!(
            wait_until(T, || a.socket.exists()),
            "systemd-socket-activate did not bind {}: {}",
            a.socket.display(),
            a.output()
        );
        a
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agentd.out")).unwrap_or_default()
    }

    fn connect(&self) -> RpcConn {
        RpcConn::connect(&self.socket)
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.socket.display()))
    }

    /// The next sd_notify datagram, as text.
    fn notice(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self.notify.recv(&mut buf).unwrap_or_else(|e| {
            panic!("no sd_notify message within {T:?}: {e}\n{}", self.output())
        });
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let mut status = None;
        wait_until(timeout, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    fn assert_socket_left(&self) {
        let meta = std::fs::symlink_metadata(&self.socket).unwrap_or_else(|e| {
            panic!(
                "the activated socket {} is gone: {e}\n{}",
                self.socket.display(),
                self.output()
            )
        });
        assert!(meta.file_type().is_socket());
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn activated_daemon_serves_the_passed_socket_notifies_and_leaves_it() {
    let mut a = Activated::start("");
    let mut c = a.connect();
    let hello = c.call_ok("agentd/hello", json!({"client": "service-test"}));
    // systemd-socket-activate execs agentd in its own process: the one we spawned.
    assert_eq!(hello["pid"].as_u64(), Some(u64::from(a.pid())), "{hello}");
    let ready = a.notice();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(ready.contains(&format!("MAINPID={}", a.pid())), "{ready:?}");
    // The inherited socket is served like a bound one.
    let created = c.call_ok(
        "agentd/create",
        json!({"workspace": a.dir.path().display().to_string()}),
    );
    assert!(created["session_id"].is_string(), "{created}");

    let _ = c.try_call("agentd/shutdown", json!({}));
    let stopping = a.notice();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let status = a
        .wait_exit(T)
        .expect("agentd did not exit after agentd/shutdown");
    assert!(status.success(), "{status}: {}", a.output());
    // Never unlinked: the service manager owns it and keeps listening on it.
    a.assert_socket_left();
    assert!(
        a.output()
            .contains("serving the socket passed by the service manager"),
        "{}",
        a.output()
    );
}

#[test]
fn activated_daemon_exits_when_idle_and_not_while_a_client_is_connected() {
    let mut a = Activated::start("idle_exit_s = 1\n");
    let mut c = a.connect();
    c.call_ok("agentd/hello", json!({}));
    assert!(a.notice().contains("READY=1"));
    // A connected client keeps it running through several idle periods.
    let still = a.wait_exit(Duration::from_millis(2500));
    assert!(
        still.is_none(),
        "exited with a client connected: {still:?}\n{}",
        a.output()
    );
    drop(c);
    let status = a
        .wait_exit(T)
        .unwrap_or_else(|| panic!("no idle exit within {T:?}:\n{}", a.output()));
    assert!(status.success(), "{status}: {}", a.output());
    assert!(a.notice().contains("STOPPING=1"));
    a.assert_socket_left();
}

#[test]
fn self_bound_daemon_ignores_idle_exit_and_unlinks_its_socket() {
    let mut d = agentd_tests::Daemon::builder()
        .config("idle_exit_s = 1\n")
        .start();
    // Nothing would start a self-bound daemon again, so it must not idle out.
    std::thread::sleep(Duration::from_millis(2500));
    let mut c = d.connect();
    c.call_ok("agentd/hello", json!({}));
    drop(c);
    d.shutdown(T).expect("shutdown");
    assert!(
        !d.socket().exists(),
        "a socket agentd bound is removed on exit"
    );
}
