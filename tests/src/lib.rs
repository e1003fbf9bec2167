//! Harness for black-box tests: starts the real `agentd` and `agentctl` binaries with a
//! private `AGENTD_HOME` and `AGENTD_SOCKET` in a temp dir, and speaks raw NDJSON
//! JSON-RPC to the daemon.
//!
//! Binaries: `env!("CARGO_BIN_EXE_agentd")` exists only in tests of the package that owns
//! the binary, so this crate finds them as `target/<profile>/agentd` and
//! `target/<profile>/agentctl` relative to the test executable (which lives in
//! `target/<profile>/deps/`). Cargo does not build another package's binaries for these
//! tests: run `cargo build -p agentd -p agentctl` (same profile) before
//! `cargo test -p agentd-tests`, or set `AGENTD_TEST_BIN_DIR` to the directory holding
//! them. A missing binary panics with that instruction.
//!
//! Waiting is always on a condition with a deadline (connect + `agentd/hello`, a matching
//! notification), polled with a short backoff — never a fixed sleep.

pub mod acp;
pub mod app_server;
pub mod chaos;
pub mod conv;
pub mod http;
pub mod measure;
pub mod peers;
pub mod pg;
pub mod pty;
pub mod sse;

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long `Daemon::start`/`restart` wait for `agentd/hello`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The directory holding the workspace's binaries for the running test's profile.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AGENTD_TEST_BIN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test binary has a parent")
        .to_path_buf();
    // Tests run from `<profile>/deps`, examples from `<profile>/examples`.
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    dir
}

/// Path of a workspace binary (`agentd`, `agentctl`); panics with a build hint if absent.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} not found; run `cargo build -p agentd -p agentctl` (same profile) first, \
         or set AGENTD_TEST_BIN_DIR",
        p.display()
    );
    p
}

/// Result of one `agentctl` run.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    /// The exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// stdout parsed as one JSON document, when it is one.
    pub json: Option<Value>,
}

impl Output {
    /// Wraps a finished `std::process::Output` (for commands built with `agentctl_cmd`).
    pub fn from_std(o: std::process::Output) -> Output {
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let json = serde_json::from_str(stdout.trim()).ok();
        Output {
            status: o.status,
            code: o.status.code(),
            stdout,
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            json,
        }
    }

    /// The parsed JSON document; panics with the whole output if there is none.
    pub fn json(&self) -> &Value {
        self.json
            .as_ref()
            .unwrap_or_else(|| panic!("stdout is not one JSON document:\n{self:?}"))
    }

    /// stdout parsed as NDJSON (e.g. `log --follow --json`).
    pub fn ndjson(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON line {l:?}: {e}"))
            })
            .collect()
    }

    /// Panics with the whole output unless the exit code is `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "unexpected exit code:\n{self:?}");
        self
    }
}

/// Options for a daemon before it starts.
#[derive(Debug, Default, Clone)]
pub struct DaemonBuilder {
    config: Option<String>,
    env: Vec<(OsString, OsString)>,
    args: Vec<OsString>,
}

impl DaemonBuilder {
    /// Text of the config file, written to `<tmp>/config.toml` and named by
    /// `AGENTD_CONFIG` (for the daemon and for agentctl).
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.to_string());
        self
    }

    /// An extra environment variable for the daemon and agentctl (e.g. a provider key, or
    /// `AGENTD_DURABILITY=none` if the daemon reads one).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Extra command line arguments for `agentd`.
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// Sets everything up without starting the daemon (for tests of agentctl's
    /// auto-start, or of a daemon that must fail to start).
    pub fn build(mut self) -> Daemon {
        // `AGENTD_TEST_STORE=postgres` runs the daemon on a fresh database of the test
        // process's private PostgreSQL server instead of the home's files.
        if std::env::var("AGENTD_TEST_STORE").as_deref() == Ok("postgres")
            && !self.env.iter().any(|(k, _)| k == "AGENTD_STORE")
        {
            let url = pg::PgServer::shared().create_db();
            self.env.push(("AGENTD_STORE".into(), url.into()));
        }
        let dir = tempfile::Builder::new()
            .prefix("agentd-t")
            .tempdir()
            .expect("tempdir");
        let root = dir.path().to_path_buf();
        let config = self.config.map(|text| {
            let p = root.join("config.toml");
            std::fs::write(&p, text).expect("write config");
            p
        });
        Daemon {
            home: root.join("home"),
            socket: root.join("run").join("agentd.sock"),
            workspace: {
                let w = root.join("ws");
                std::fs::create_dir_all(&w).expect("create workspace");
                w
            },
            config,
            env: self.env,
            args: self.args,
            child: None,
            dir,
        }
    }

    /// Builds and starts the daemon, waiting until it answers `agentd/hello`.
    pub fn start(self) -> Daemon {
        let mut d = self.build();
        d.spawn();
        d.wait_ready_or_panic();
        d
    }
}

/// A real `agentd` process with a private home and socket. Dropping it kills the daemon
/// (SIGKILL), including one that agentctl auto-started on this socket.
pub struct Daemon {
    dir: tempfile::TempDir,
    home: PathBuf,
    socket: PathBuf,
    workspace: PathBuf,
    config: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    args: Vec<OsString>,
    child: Option<Child>,
}

impl Daemon {
    pub fn builder() -> DaemonBuilder {
        DaemonBuilder::default()
    }

    /// A daemon with default settings, started and ready.
    pub fn start() -> Daemon {
        DaemonBuilder::default().start()
    }

    /// `AGENTD_HOME` of this daemon (`<tmp>/home`).
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `AGENTD_SOCKET` of this daemon (`<tmp>/run/agentd.sock`).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// An empty directory (`<tmp>/ws`) to use as a session workspace.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The temp dir holding home, socket, workspace and logs.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Path of a session's Log.
    pub fn log_path(&self, session_id: &str) -> PathBuf {
        self.home
            .join("sessions")
            .join(format!("{session_id}.ndjson"))
    }

    /// A session's Log bytes as a file of the home holds them, wherever this daemon
    /// stores its Logs: the file, or (on a database) the session's `events` rows in seq
    /// order, each line with its `\n`. Works while the daemon runs or after it stopped.
    /// Panics when there is no such Log.
    pub fn log_bytes(&self, session_id: &str) -> Vec<u8> {
        self.try_log_bytes(session_id)
            .unwrap_or_else(|| panic!("no live Log of session {session_id}"))
    }

    /// [`log_bytes`](Self::log_bytes), or `None` when the session has no live Log
    /// (never created, deleted, purged).
    pub fn try_log_bytes(&self, session_id: &str) -> Option<Vec<u8>> {
        let Some(url) = self.store_url() else {
            return std::fs::read(self.log_path(session_id)).ok();
        };
        let db = url.rsplit('/').next().unwrap_or_default().to_string();
        assert!(
            session_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "session id {session_id:?} is not safe to quote"
        );
        let pg = pg::PgServer::shared();
        let live = pg.psql(
            &db,
            &format!(
                "SELECT count(*) FROM sessions WHERE id = '{session_id}' AND trashed_at IS NULL"
            ),
        );
        if live.trim() != "1" {
            return None;
        }
        let text = pg.psql(
            &db,
            &format!(
                "SELECT convert_from(line, 'UTF8') FROM events
                 WHERE session_id = '{session_id}' ORDER BY seq"
            ),
        );
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        Some(out)
    }

    /// Appends one raw line (no `\n`) behind the daemon's back, as damage would: to
    /// the file, or as the next `events` row of the database.
    pub fn append_raw_line(&self, session_id: &str, line: &[u8]) {
        let Some(url) = self.store_url() else {
            let mut bytes = std::fs::read(self.log_path(session_id)).expect("read Log");
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
            std::fs::write(self.log_path(session_id), &bytes).expect("write Log");
            return;
        };
        let db = url.rsplit('/').next().unwrap_or_default().to_string();
        let text = std::str::from_utf8(line).expect("a UTF-8 line");
        pg::PgServer::shared().psql(
            &db,
            &format!(
                "INSERT INTO events (session_id, seq, line)
                 SELECT '{sid}', coalesce(max(seq), -1) + 1, convert_to('{text}', 'UTF8')
                 FROM events WHERE session_id = '{sid}'",
                sid = session_id.replace('\'', "''"),
                text = text.replace('\'', "''"),
            ),
        );
    }

    /// Whether a session's Log is in the trash: `<home>/trash/<sid>.ndjson`, or a row of
    /// the database marked trashed.
    pub fn in_trash(&self, session_id: &str) -> bool {
        let Some(url) = self.store_url() else {
            return self
                .home
                .join("trash")
                .join(format!("{session_id}.ndjson"))
                .exists();
        };
        let db = url.rsplit('/').next().unwrap_or_default().to_string();
        assert!(
            session_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "session id {session_id:?} is not safe to quote"
        );
        let n = pg::PgServer::shared().psql(
            &db,
            &format!(
                "SELECT count(*) FROM sessions WHERE id = '{session_id}' AND trashed_at IS NOT NULL"
            ),
        );
        n.trim() == "1"
    }

    /// Whether a session has a live Log (a file of the home, or a row of the database
    /// not in its trash).
    pub fn has_log(&self, session_id: &str) -> bool {
        self.try_log_bytes(session_id).is_some()
    }

    /// A session's Log parsed line by line (see [`log_bytes`](Self::log_bytes) and
    /// [`parse_log_lines`]).
    pub fn log_lines(&self, session_id: &str) -> Vec<Value> {
        parse_log_lines(&self.log_bytes(session_id), session_id)
    }

    /// The daemon's stdout+stderr so far (harness-started daemons write
    /// `<tmp>/agentd.out`; auto-started ones `<home>/agentd.log`), for failure messages.
    pub fn daemon_output(&self) -> String {
        let mut out = String::new();
        for p in [self.root().join("agentd.out"), self.home.join("agentd.log")] {
            if let Ok(b) = std::fs::read(&p) {
                out.push_str(&String::from_utf8_lossy(&b));
            }
        }
        out
    }

    /// The prompt images a database store keeps (its `images` table) as `(sha256,
    /// bytes)` by digest; `None` when this daemon's Logs are files of the home (the
    /// images are then session resources).
    pub fn store_images(&self) -> Option<Vec<(String, Vec<u8>)>> {
        let url = self.store_url()?;
        let db = url.rsplit('/').next().unwrap_or_default().to_string();
        let text = pg::PgServer::shared().psql(
            &db,
            "SELECT sha256 || ' ' || encode(bytes, 'hex') FROM images ORDER BY sha256",
        );
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len() / 2)
                .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
                .collect()
        };
        Some(
            text.lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(sha, h)| (sha.to_string(), hex(h.trim())))
                .collect(),
        )
    }

    /// Removes a prompt image from a database store's `images` table (a test of a
    /// missing image); `false` when this daemon's Logs are files of the home.
    pub fn remove_store_image(&self, sha256: &str) -> bool {
        let Some(url) = self.store_url() else {
            return false;
        };
        assert!(sha256.bytes().all(|b| b.is_ascii_hexdigit()), "{sha256}");
        let db = url.rsplit('/').next().unwrap_or_default().to_string();
        pg::PgServer::shared().psql(
            &db,
            &format!("DELETE FROM images WHERE sha256 = '{sha256}'"),
        );
        true
    }

    /// The database URL this daemon stores its Logs in (`AGENTD_STORE`), if any.
    pub fn store_url(&self) -> Option<String> {
        self.env
            .iter()
            .find(|(k, _)| k == "AGENTD_STORE")
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    /// Sets an environment variable (or with `None` removes one) for the daemons started
    /// from now on and for agentctl: a fault rule for one run of the daemon, say.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(v) = value {
            self.env.push((key.into(), v.into()));
        }
    }

    /// Pid of the harness-started daemon process, if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn apply_env(&self, cmd: &mut Command) {
        cmd.env("AGENTD_HOME", &self.home)
            .env("AGENTD_SOCKET", &self.socket)
            .env("AGENTD_BIN", bin_dir().join("agentd"))
            .env_remove("AGENTD_CONFIG")
            // The global instruction file (`$XDG_CONFIG_HOME/agentd/AGENTS.md`) is the
            // test's own, never the developer's.
            .env("XDG_CONFIG_HOME", self.root().join("xdg-config"))
            .env("RUST_BACKTRACE", "1");
        if let Some(c) = &self.config {
            cmd.env("AGENTD_CONFIG", c);
        } else {
            // Point at a file that does not exist so a developer's own config never leaks
            // into a test.
            cmd.env("AGENTD_CONFIG", self.root().join("no-config.toml"));
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
    }

    /// Spawns `agentd` (output to `<tmp>/agentd.out`) without waiting for it.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "daemon already running");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root().join("agentd.out"))
            .expect("open agentd.out");
        let err = out.try_clone().expect("clone agentd.out");
        let mut cmd = Command::new(bin("agentd"));
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        self.apply_env(&mut cmd);
        self.child = Some(cmd.spawn().expect("spawn agentd"));
    }

    /// Waits until the daemon accepts a connection and answers `agentd/hello`; returns
    /// the hello result. Fails early if the harness-started process exits.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            if let Ok(mut c) = RpcConn::connect(&self.socket) {
                c.set_call_timeout(Duration::from_secs(2));
                if let Ok(r) = c.try_call("agentd/hello", json!({"client": "agentd-tests"})) {
                    if let Some(res) = r.get("result") {
                        return Ok(res.clone());
                    }
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "agentd exited ({status}) before answering; output:\n{}",
                        self.daemon_output()
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "agentd did not answer on {} within {timeout:?}; output:\n{}",
                    self.socket.display(),
                    self.daemon_output()
                ));
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(100));
        }
    }

    fn wait_ready_or_panic(&mut self) {
        if let Err(e) = self.wait_ready(READY_TIMEOUT) {
            panic!("{e}");
        }
    }

    /// SIGKILL the daemon (harness-started or auto-started on this socket) and reap it.
    /// The socket file stays behind, as after a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        // A daemon agentctl started: find it by asking.
        if let Ok(mut c) = RpcConn::connect(&self.socket) {
            c.set_call_timeout(Duration::from_secs(2));
            if let Ok(r) = c.try_call("agentd/hello", json!({})) {
                if let Some(pid) = r.pointer("/result/pid").and_then(Value::as_i64) {
                    // SAFETY: kill has no memory preconditions; the pid came from the
                    // daemon on our private socket.
                    unsafe {
                        libc::kill(pid as libc::pid_t, libc::SIGKILL);
                    }
                    wait_pid_gone(pid as libc::pid_t, Duration::from_secs(5));
                }
            }
        }
    }

    /// Kills the daemon (SIGKILL), starts a new one on the same home and socket, and
    /// waits until it is ready.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
        self.wait_ready_or_panic();
    }

    /// Asks the daemon to shut down (`agentd/shutdown`) and waits for the process to exit.
    pub fn shutdown(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Ok(mut c) = RpcConn::connect(&self.socket) {
            c.set_call_timeout(timeout);
            let _ = c.try_call("agentd/shutdown", json!({}));
        }
        let mut child = self.child.take()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A raw NDJSON connection to the daemon.
    pub fn connect(&self) -> RpcConn {
        RpcConn::connect(&self.socket)
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.socket.display()))
    }

    /// A `Command` for `agentctl` with this daemon's environment, run in the workspace
    /// dir; customise (stdin, cwd, spawn for signals) and run it yourself.
    pub fn agentctl_cmd(&self) -> Command {
        let mut cmd = Command::new(bin("agentctl"));
        self.apply_env(&mut cmd);
        cmd.current_dir(&self.workspace).stdin(Stdio::null());
        cmd
    }

    /// A `Command` for `agentd` with this daemon's environment (home, socket, config),
    /// not spawned; override env or args to start a second daemon against it.
    pub fn agentd_cmd(&self) -> Command {
        let mut cmd = Command::new(bin("agentd"));
        self.apply_env(&mut cmd);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Creates a session in the workspace over a fresh connection; returns its id.
    #[track_caller]
    pub fn create_session(&self) -> String {
        let mut c = self.connect();
        let r = c.call_ok(
            "agentd/create",
            json!({"workspace": self.workspace.display().to_string()}),
        );
        r["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("create result without session_id: {r}"))
            .to_string()
    }

    /// Whether the harness-started daemon has exited by itself (it is then reaped and
    /// forgotten, so [`spawn`](Self::spawn) may start another); `false` while it runs
    /// or when none was started.
    pub fn exited(&mut self) -> bool {
        let gone = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
        if gone {
            self.child = None;
        }
        gone
    }

    /// Waits for the harness-started daemon to exit by itself (e.g. after
    /// `agentd/shutdown` sent on some connection); `None` on timeout (then killed).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs `agentctl ARGS` to completion (cwd: the workspace, stdin: null).
    pub fn agentctl<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = self
            .agentctl_cmd()
            .args(args)
            .output()
            .expect("run agentctl");
        Output::from_std(out)
    }

    /// Runs `agentctl --json ARGS`, which must exit 0 and answer `"ok": true`; the answer.
    #[track_caller]
    pub fn agentctl_ok(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.agentctl(all);
        out.assert_code(0);
        let v = out.json().clone();
        assert_eq!(v["ok"], true, "{out:?}");
        v
    }

    /// Runs `agentctl ARGS` with `stdin` as its standard input.
    pub fn agentctl_stdin<I, S>(&self, args: I, stdin: &[u8]) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut child = self
            .agentctl_cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentctl");
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(stdin);
        }
        Output::from_std(child.wait_with_output().expect("wait agentctl"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn wait_pid_gone(pid: libc::pid_t, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    // SAFETY: signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A raw JSON-RPC connection: one JSON value per line over a `UnixStream`. Messages read
/// while waiting for something else are kept in arrival order for later reads.
pub struct RpcConn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    /// Bytes of a line whose end has not arrived yet (survives read timeouts).
    partial: Vec<u8>,
    backlog: VecDeque<Value>,
    next_id: u64,
    call_timeout: Duration,
}

impl RpcConn {
    pub fn connect(path: &Path) -> io::Result<RpcConn> {
        let s = UnixStream::connect(path)?;
        Ok(RpcConn {
            writer: s.try_clone()?,
            reader: BufReader::new(s),
            partial: Vec::new(),
            backlog: VecDeque::new(),
            next_id: 1,
            call_timeout: Duration::from_secs(60),
        })
    }

    /// How long `call` waits for its response (default 60 s).
    pub fn set_call_timeout(&mut self, t: Duration) {
        self.call_timeout = t;
    }

    /// Sends a request and returns the whole response object (`{"jsonrpc","id","result"}`
    /// or `{..,"error"}`). Panics on I/O error or timeout.
    #[track_caller]
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        match self.try_call(method, params) {
            Ok(v) => v,
            Err(e) => panic!("{method}: {e}"),
        }
    }

    /// `call`'s result member; panics with the response if it is an error.
    #[track_caller]
    pub fn call_ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!("{method} failed: {r}"),
        }
    }

    /// Like `call`, returning I/O errors and timeouts instead of panicking.
    pub fn try_call(&mut self, method: &str, params: Value) -> io::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(format!("{msg}\n").as_bytes())?;
        let deadline = Instant::now() + self.call_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no response to {method} (id {id})"),
                ));
            }
            let Some(v) = self.read_wire(left)? else {
                continue;
            };
            let is_ours = v.get("method").is_none() && v.get("id") == Some(&json!(id));
            if is_ours {
                return Ok(v);
            }
            self.backlog.push_back(v);
        }
    }

    /// Sends a notification (no id, no response).
    pub fn notify(&mut self, method: &str, params: Value) -> io::Result<()> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(format!("{msg}\n").as_bytes())
    }

    /// Writes bytes as they are (a newline is not added).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    /// Reads one line from the wire within `timeout`. `Ok(None)` on timeout; EOF is an
    /// `UnexpectedEof` error. A line that is not JSON comes back as a JSON string.
    fn read_wire(&mut self, timeout: Duration) -> io::Result<Option<Value>> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        match self.reader.read_until(b'\n', &mut self.partial) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "daemon closed the connection",
            )),
            Ok(_) if self.partial.ends_with(b"\n") => {
                let line = std::mem::take(&mut self.partial);
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                Ok(Some(
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into())),
                ))
            }
            // EOF in the middle of a line.
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "daemon closed the connection mid-line",
            )),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The next message (kept ones first), or `None` if none arrives within `timeout` or
    /// the connection ended.
    pub fn read_message(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.backlog.pop_front() {
            return Some(v);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.read_wire(left) {
                Ok(Some(v)) => return Some(v),
                Ok(None) => continue,
                Err(_) => return None,
            }
        }
    }

    /// True when the daemon has closed this connection (EOF) within `timeout`; messages
    /// read meanwhile are kept.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.read_wire(left) {
                Ok(Some(v)) => self.backlog.push_back(v),
                Ok(None) => {}
                Err(_) => return true,
            }
        }
    }

    /// Reads messages until one matches `pred` and returns it; messages that do not match
    /// are consumed and dropped. `None` on timeout or EOF.
    pub fn wait_for(
        &mut self,
        mut pred: impl FnMut(&Value) -> bool,
        timeout: Duration,
    ) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.read_message(left)?;
            if pred(&v) {
                return Some(v);
            }
        }
    }

    /// Subscribes to a session (`agentd/subscribe`) and returns the subscription id.
    #[track_caller]
    pub fn subscribe(&mut self, session_id: &str, after_seq: Option<u64>) -> Value {
        let mut p = json!({"session_id": session_id});
        if let Some(s) = after_seq {
            p["after_seq"] = json!(s);
        }
        self.call_ok("agentd/subscribe", p)
    }

    /// Waits for an `agentd/event` notification whose event matches `pred`; returns the
    /// event (the notification's `params.result`).
    pub fn wait_event(
        &mut self,
        mut pred: impl FnMut(&Value) -> bool,
        timeout: Duration,
    ) -> Option<Value> {
        self.wait_for(
            |m| {
                m.get("method").and_then(Value::as_str) == Some("agentd/event")
                    && m.pointer("/params/result").is_some_and(&mut pred)
            },
            timeout,
        )
        .and_then(|m| m.pointer("/params/result").cloned())
    }
}

/// Reads a Log file and parses every line as a JSON object, panicking with the line
/// number and text of the first line that is not one (or if the file does not end with
/// `\n`).
pub fn read_log_lines(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_log_lines(&bytes, &path.display().to_string())
}

/// Parses Log bytes as JSON objects, one a line (see [`read_log_lines`]); `name` names
/// the Log in panics.
pub fn parse_log_lines(bytes: &[u8], name: &str) -> Vec<Value> {
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "{name} does not end with a newline; tail: {:?}",
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(200)..])
    );
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, l)| match serde_json::from_slice::<Value>(l) {
            Ok(v) if v.is_object() => v,
            _ => panic!(
                "{name} line {} is not a JSON object: {:?}",
                i + 1,
                String::from_utf8_lossy(l)
            ),
        })
        .collect()
}

/// Every path (files, dirs, sockets) under `root`, relative to it, for before/after
/// comparisons of what a daemon created.
pub fn tree_snapshot(root: &Path) -> std::collections::BTreeSet<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeSet<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in rd.flatten() {
            let p = entry.path();
            if let Ok(rel) = p.strip_prefix(root) {
                out.insert(rel.to_path_buf());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &p, out);
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// Waits for a spawned child to exit within `timeout`, collecting its output; on
/// timeout the child is killed and `None` returned (so a process that should have
/// refused to start never hangs a test).
pub fn wait_output(mut child: Child, timeout: Duration) -> Option<Output> {
    use std::io::Read;
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_end(&mut b);
        }
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    status.map(|status| {
        Output::from_std(std::process::Output {
            status,
            stdout,
            stderr,
        })
    })
}

/// Asserts an `agentd/context` answer is balanced, and every function call answered by exactly one output before the next
/// non-call item.
#[track_caller]
pub fn assert_replay_paired(ctx: &Value) {
    assert_eq!(ctx["stats"]["balanced"], true, "{}", ctx["stats"]);
    let mut open: Vec<&str> = Vec::new();
    for it in ctx["items"].as_array().unwrap() {
        match it["type"].as_str() {
            Some("function_call") => open.push(it["call_id"].as_str().unwrap()),
            Some("function_call_output") => {
                let id = it["call_id"].as_str().unwrap();
                let pos = open.iter().position(|c| *c == id);
                assert!(pos.is_some(), "output {id} without an open call");
                open.remove(pos.unwrap());
            }
            _ => assert!(open.is_empty(), "calls {open:?} left open"),
        }
    }
    assert!(open.is_empty(), "calls {open:?} never answered");
}

/// A session's whole Log, through `agentd/events`.
#[track_caller]
pub fn events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    c.call_ok("agentd/events", json!({"session_id": sid}))["events"]
        .as_array()
        .unwrap()
        .clone()
}

/// The events of `kind`, in Log order.
pub fn of_type<'a>(evs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| is_type(e, kind)).collect()
}

/// True when the event is of `kind` (a helper for `wait_event` predicates).
pub fn is_type(event: &Value, kind: &str) -> bool {
    event.get("type").and_then(Value::as_str) == Some(kind)
}

/// Runs the user's git in `dir` with a clean config; its stdout.
#[track_caller]
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap_or_else(|e| panic!("this test needs the git command on PATH: {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Waits (on a pidfd, no polling) until process `pid` exits; false on timeout. A pid
/// that is already gone counts as exited.
pub fn wait_exit(pid: i32, timeout: Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return true;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd, then closing our pidfd.
    unsafe {
        let n = libc::poll(&mut p, 1, timeout.as_millis() as i32);
        libc::close(fd);
        n == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn bin_dir_is_the_profile_dir() {
        let d = bin_dir();
        assert!(!d.ends_with("deps"), "{d:?}");
        assert!(d.join("deps").is_dir(), "{d:?}");
    }

    /// RpcConn against a scripted peer: responses are matched by id, notifications that
    /// arrive first are kept, a line split across writes is joined, and timeouts return.
    #[test]
    fn rpc_conn_matches_ids_and_keeps_notifications() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let req: Value = serde_json::from_str(&line).unwrap();
            let n = json!({"jsonrpc":"2.0","method":"agentd/event","params":{"subscription":1,"result":{"type":"status","seq":null}}});
            writeln!(w, "{n}").unwrap();
            let resp = json!({"jsonrpc":"2.0","id":req["id"],"result":{"pong":true}}).to_string();
            let (a, b) = resp.split_at(10);
            w.write_all(a.as_bytes()).unwrap();
            w.flush().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            writeln!(w, "{b}").unwrap();
            let n2 = json!({"jsonrpc":"2.0","method":"agentd/event","params":{"subscription":1,"result":{"type":"turn_ended"}}});
            writeln!(w, "{n2}").unwrap();
            writeln!(w, "not json").unwrap();
            // Keep the connection open until the client is done.
            let mut rest = String::new();
            let _ = r.read_line(&mut rest);
        });
        let mut c = RpcConn::connect(&path).unwrap();
        let r = c.call("agentd/ping", json!({}));
        assert_eq!(r["result"]["pong"], true);
        let first = c.read_message(Duration::from_secs(5)).unwrap();
        assert_eq!(first["params"]["result"]["type"], "status");
        let ended = c
            .wait_event(|e| is_type(e, "turn_ended"), Duration::from_secs(5))
            .unwrap();
        assert_eq!(ended["type"], "turn_ended");
        assert_eq!(
            c.read_message(Duration::from_secs(5)),
            Some(Value::String("not json".into()))
        );
        let t0 = Instant::now();
        assert!(c.read_message(Duration::from_millis(50)).is_none());
        assert!(t0.elapsed() < Duration::from_secs(2));
        c.send_raw(b"bye\n").unwrap();
        assert!(c.closed_within(Duration::from_secs(5)));
        server.join().unwrap();
    }
}
