//! agentd as a service (docs/service.md): a socket passed by a service manager,
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
        // The socket's file appears at bind(), before listen(): wait until it answers,
        // or a connect in between is refused.
        assert!(
            wait_until(T, || std::os::unix::net::UnixStream::connect(&a.socket)
                .is_ok()),
            "systemd-socket-activate did not listen on {}: {}",
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

// ---------------------------------------------------------------------------------------
// agentctl service: golden dry runs, the unit files under systemd-analyze, doctor
// ---------------------------------------------------------------------------------------

/// Compares `actual` with `tests/tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites it.
#[track_caller]
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing golden {path:?}; run with UPDATE_GOLDEN=1"));
    assert_eq!(
        actual, want,
        "golden {name} differs (UPDATE_GOLDEN=1 to accept)"
    );
}

/// A user with a private HOME and runtime dir, nothing installed, no daemon.
struct User {
    dir: tempfile::TempDir,
}

impl User {
    fn new() -> User {
        let dir = tempfile::Builder::new()
            .prefix("agentd-u")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        User { dir }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    /// `agentctl ARGS` with only this user's environment (no AGENTD_SOCKET: the socket
    /// is the default under XDG_RUNTIME_DIR, the one agentd.socket listens on).
    fn agentctl(&self, args: &[&str]) -> agentd_tests::Output {
        let out = Command::new(bin("agentctl"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.home().join("run"))
            .env("AGENTD_BIN", bin("agentd"))
            .stdin(Stdio::null())
            .output()
            .expect("run agentctl");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        agentd_tests::Output {
            status: out.status,
            code: out.status.code(),
            json: serde_json::from_str(stdout.trim()).ok(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Output with the temp dir, the binary path and the uid replaced by stable names.
    fn normalize(&self, text: &str) -> String {
        let agentd = std::fs::canonicalize(bin("agentd")).unwrap();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        text.replace(&agentd.display().to_string(), "$AGENTD")
            .replace(&self.home().display().to_string(), "$HOME")
            .replace(&format!("gui/{uid}"), "gui/$UID")
    }
}

#[test]
fn service_install_dry_run_systemd_is_golden_and_changes_nothing() {
    let u = User::new();
    let out = u.agentctl(&["service", "install", "--dry-run", "--manager", "systemd"]);
    out.assert_code(0);
    golden("service_install_systemd.txt", &u.normalize(&out.stdout));
    assert!(!u.home().join(".config").exists(), "a dry run wrote files");
    // The same plan as JSON, with each file's content.
    let j = u.agentctl(&[
        "service",
        "install",
        "--dry-run",
        "--manager",
        "systemd",
        "--json",
    ]);
    let v = j.json();
    assert_eq!(v["dry_run"], true);
    let writes: Vec<&str> = v["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "write")
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    assert_eq!(writes.len(), 2, "{v}");
    assert!(writes[0].ends_with(".config/systemd/user/agentd.socket"));
}

#[test]
fn service_install_dry_run_launchd_is_golden() {
    let u = User::new();
    let out = u.agentctl(&["service", "install", "--dry-run", "--manager", "launchd"]);
    out.assert_code(0);
    golden("service_install_launchd.txt", &u.normalize(&out.stdout));
}

#[test]
fn service_install_refuses_to_clobber_a_foreign_unit() {
    let u = User::new();
    let dir = u.home().join(".config/systemd/user");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("agentd.service"),
        "[Service]\nExecStart=/bin/true\n",
    )
    .unwrap();
    let out = u.agentctl(&[
        "service",
        "install",
        "--dry-run",
        "--manager",
        "systemd",
        "--json",
    ]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json()["error"]["kind"], "already_exists", "{out:?}");
    let out = u.agentctl(&["service", "uninstall", "--dry-run", "--manager", "systemd"]);
    assert_ne!(
        out.code,
        Some(0),
        "uninstall must not remove a foreign unit: {out:?}"
    );
    // --force takes it over.
    let out = u.agentctl(&[
        "service",
        "install",
        "--dry-run",
        "--force",
        "--manager",
        "systemd",
    ]);
    out.assert_code(0);
    assert!(out.stdout.contains("would replace"), "{}", out.stdout);
}

#[test]
fn service_install_refuses_a_readable_env_file() {
    use std::os::unix::fs::PermissionsExt;
    let u = User::new();
    let env = u.home().join(".config/agentd/env");
    std::fs::create_dir_all(env.parent().unwrap()).unwrap();
    std::fs::write(&env, "OPENAI_API_KEY=sk-not-a-real-key\n").unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = u.agentctl(&["service", "install", "--dry-run", "--manager", "systemd"]);
    out.assert_code(3);
    assert!(out.stderr.contains("chmod 600"), "{out:?}");
    assert!(!out.stderr.contains("sk-not-a-real-key") && !out.stdout.contains("sk-not"));
}

/// The units exactly as `service install` writes them are accepted by
/// `systemd-analyze verify`, and a broken one is not (so the check can fail).
#[test]
fn installed_units_pass_systemd_analyze_verify() {
    let tool = systemd_tool("systemd-analyze");
    let u = User::new();
    let j = u.agentctl(&[
        "service",
        "install",
        "--dry-run",
        "--manager",
        "systemd",
        "--json",
    ]);
    let v = j.json();
    let out_dir = u.home().join("units");
    std::fs::create_dir(&out_dir).unwrap();
    let mut files = Vec::new();
    for a in v["actions"].as_array().unwrap() {
        if a["action"] == "write" {
            let name = Path::new(a["path"].as_str().unwrap()).file_name().unwrap();
            let p = out_dir.join(name);
            std::fs::write(&p, a["content"].as_str().unwrap()).unwrap();
            files.push(p);
        }
    }
    let verify = |files: &[PathBuf]| {
        Command::new(&tool)
            .args(["verify", "--man=no", "--user"])
            .args(files)
            .env("XDG_RUNTIME_DIR", u.home().join("run"))
            .output()
            .expect("run systemd-analyze")
    };
    let ok = verify(&files);
    let stderr = String::from_utf8_lossy(&ok.stderr);
    assert!(ok.status.success() && stderr.trim().is_empty(), "{stderr}");

    let service = out_dir.join("agentd.service");
    let text = std::fs::read_to_string(&service).unwrap();
    std::fs::write(&service, text.replace("Type=notify", "Type=notifyy")).unwrap();
    let bad = verify(&files);
    assert!(
        !bad.status.success() || !String::from_utf8_lossy(&bad.stderr).trim().is_empty(),
        "systemd-analyze accepted a broken unit"
    );
}

/// The unit's ExecStartPre refuses an env file others can read, and allows a private
/// or missing one. Run with sh exactly as systemd would after unescaping `$$`.
#[test]
fn service_env_file_check_refuses_readable_keys() {
    use std::os::unix::fs::PermissionsExt;
    let unit = include_str!("../../packaging/systemd/agentd.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStartPre=/bin/sh -c '"))
        .expect("ExecStartPre line");
    let (script, _) = line.rsplit_once("' ").unwrap();
    let script = script.replace("$$", "$");
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("env");
    let run = || {
        Command::new("/bin/sh")
            .args(["-c", &script, "check-env-file"])
            .arg(&env)
            .output()
            .unwrap()
    };
    assert!(run().status.success(), "missing file is fine");
    std::fs::write(&env, "K=v\n").unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(run().status.success(), "0600 is fine");
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = run();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("chmod 600"));
}

#[test]
fn doctor_reports_key_names_never_values_and_fails_on_problems() {
    use std::os::unix::fs::PermissionsExt;
    let u = User::new();
    let cfg = u.home().join(".config/agentd");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(
        cfg.join("config.toml"),
        "default_provider = \"openai\"\n[providers.openai]\nkind = \"openai-responses\"\napi_key_env = \"MY_OPENAI_KEY\"\n",
    )
    .unwrap();
    let out = u.agentctl(&["doctor", "--json"]);
    assert_eq!(
        out.code,
        Some(1),
        "missing default key is a problem: {out:?}"
    );
    let checks = &out.json()["error"]["details"]["checks"];
    let keys = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "provider keys")
        .unwrap();
    assert_eq!(keys["ok"], false, "{keys}");
    assert!(keys["detail"].as_str().unwrap().contains("MY_OPENAI_KEY"));

    // The key in the service env file (0600): healthy, and its value is never shown.
    let env = cfg.join("env");
    std::fs::write(&env, "MY_OPENAI_KEY=sk-secret-value-123\n").unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = u.agentctl(&["doctor"]);
    assert!(!out.stdout.contains("sk-secret") && !out.stderr.contains("sk-secret"));
    assert!(
        out.stdout.contains("MY_OPENAI_KEY (service env file)"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    out.assert_code(0);
    assert!(out.stdout.contains("healthy"));

    // A broken config is a problem with a fix.
    std::fs::write(cfg.join("config.toml"), "durability = \n").unwrap();
    let out = u.agentctl(&["doctor"]);
    out.assert_code(1);
    assert!(
        out.stdout.contains("FAIL  config") && out.stdout.contains("fix:"),
        "{}",
        out.stdout
    );
}

#[test]
fn completions_are_generated_for_each_shell() {
    let u = User::new();
    let bash = u.agentctl(&["completions", "bash"]);
    bash.assert_code(0);
    assert!(bash.stdout.contains("agentctl") && bash.stdout.contains("service"));
    // The bash script parses.
    let path = u.home().join("agentctl.bash");
    std::fs::write(&path, &bash.stdout).unwrap();
    let n = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(n.status.success(), "{}", String::from_utf8_lossy(&n.stderr));
    for shell in ["zsh", "fish"] {
        let o = u.agentctl(&["completions", shell]);
        o.assert_code(0);
        assert!(o.stdout.contains("doctor"), "{shell}: {}", o.stdout);
    }
    u.agentctl(&["completions", "tcsh"]).assert_code(2);
}

/// A tool's shell command never sees the service manager's variables: they are read
/// and removed before the daemon starts any thread.
#[test]
fn tool_subprocesses_do_not_inherit_the_activation_environment() {
    let a = Activated::start("");
    let ws = a.dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = a.dir.path().join("env.json");
    let body = json!({"rules": [{"steps": [
        {"tool_calls": [{"name": "shell", "args": {"command": "env; echo ENV-END"}}]},
        {"text": "done"}
    ]}]});
    std::fs::write(&script, body.to_string()).unwrap();
    let mut c = a.connect();
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": ws, "model": format!("script:{}", script.display())}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    c.set_call_timeout(T);
    c.call_ok("agentd/turn", json!({"session_id": sid, "input": "env"}));
    let evs = c.call_ok("agentd/events", json!({"session_id": sid}))["events"].clone();
    let results: Vec<String> = evs
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["data"].to_string())
        .collect();
    assert_eq!(results.len(), 1, "{evs}");
    assert!(
        results[0].contains("ENV-END"),
        "the command ran: {}",
        results[0]
    );
    // The environment was printed: an allowlisted variable is there, and (docs/sandbox.md#contract)
    // no AGENTD_* one is.
    assert!(results[0].contains("PATH="), "{}", results[0]);
    assert!(!results[0].contains("AGENTD_LOG="), "{}", results[0]);
    for var in [
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        "NOTIFY_SOCKET",
    ] {
        assert!(
            !results[0].contains(var),
            "{var} leaked to a tool: {}",
            results[0]
        );
    }
}

#[test]
fn service_status_and_uninstall_with_nothing_installed() {
    let u = User::new();
    let st = u.agentctl(&["service", "status", "--manager", "systemd", "--json"]);
    st.assert_code(0);
    let v = st.json();
    assert_eq!(v["installed"], false, "{v}");
    assert_eq!(v["running"], false, "{v}");
    let sock = u.home().join("run/agentd/agentd.sock");
    assert_eq!(v["socket"].as_str(), Some(sock.to_str().unwrap()), "{v}");
    assert_eq!(v["service_socket"], v["socket"], "{v}");
    let human = u.agentctl(&["service", "status", "--manager", "systemd"]);
    assert!(human.stdout.contains("not installed"), "{}", human.stdout);
    assert!(
        human
            .stdout
            .contains(&format!("clients use:    {}", sock.display())),
        "{}",
        human.stdout
    );
    let un = u.agentctl(&["service", "uninstall", "--manager", "systemd"]);
    un.assert_code(0);
    assert!(
        un.stdout.contains("no agentd units are installed"),
        "{}",
        un.stdout
    );
}

/// A daemon already running without the service manager on the service's socket is
/// part of the plan: `install` stops it cleanly before the manager takes the socket.
#[test]
fn service_install_plans_to_stop_an_unmanaged_daemon() {
    let u = User::new();
    let sock = u.home().join("run/agentd/agentd.sock");
    let d = agentd_tests::Daemon::builder().build();
    let mut child = d
        .agentd_cmd()
        .env("AGENTD_SOCKET", &sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let answered = wait_until(T, || {
        RpcConn::connect(&sock)
            .ok()
            .and_then(|mut c| c.try_call("agentd/hello", json!({})).ok())
            .is_some()
    });
    assert!(answered, "agentd did not answer on {}", sock.display());
    let out = u.agentctl(&["service", "install", "--dry-run", "--manager", "systemd"]);
    out.assert_code(0);
    assert!(
        out.stdout.contains(&format!(
            "would stop the agentd (pid {pid}) that runs unmanaged on {}",
            sock.display()
        )),
        "{}",
        out.stdout
    );
    let st = u.agentctl(&["service", "status", "--manager", "systemd", "--json"]);
    assert_eq!(st.json()["running"], true);
    assert_eq!(st.json()["managed"], false);
    assert_eq!(st.json()["pid"], pid);
    let _ = child.kill();
    let _ = child.wait();
}

/// A real (not dry) install run up to the service manager: on Linux there is no
/// launchctl, so `--manager launchd` stops the unmanaged daemon, writes the plist
/// exactly as the dry run showed, and then fails naming `launchctl` and listing what it
/// had done.
#[cfg(target_os = "linux")]
#[test]
fn service_install_executes_its_plan_in_order_and_reports_the_failing_step() {
    let u = User::new();
    let sock = u.home().join("run/agentd/agentd.sock");
    let d = agentd_tests::Daemon::builder().build();
    let mut child = d
        .agentd_cmd()
        .env("AGENTD_SOCKET", &sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(T, || RpcConn::connect(&sock)
        .ok()
        .and_then(|mut c| c.try_call("agentd/hello", json!({})).ok())
        .is_some()));
    let dry = u.agentctl(&[
        "service",
        "install",
        "--dry-run",
        "--manager",
        "launchd",
        "--json",
    ]);
    let planned = dry.json()["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "write")
        .unwrap()["content"]
        .clone();

    let out = u.agentctl(&["service", "install", "--manager", "launchd", "--json"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let err = &out.json()["error"];
    assert!(
        err["message"].as_str().unwrap().contains("launchctl"),
        "{err}"
    );
    let done = err["details"]["done_before_failure"].to_string();
    assert!(done.contains("stopped the agentd"), "{done}");
    assert!(done.contains("wrote"), "{done}");
    // The unmanaged daemon was stopped cleanly (exit 0) and removed its own socket.
    let mut status = None;
    assert!(wait_until(T, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    assert!(status.unwrap().success());
    assert!(!sock.exists());
    let plist = u.home().join("Library/LaunchAgents/dev.agentd.plist");
    assert_eq!(
        std::fs::read_to_string(&plist).unwrap(),
        planned.as_str().unwrap()
    );
    // Run again: the plist is ours and unchanged now.
    let again = u.agentctl(&["service", "install", "--dry-run", "--manager", "launchd"]);
    assert!(again.stdout.contains("is up to date"), "{}", again.stdout);
}
