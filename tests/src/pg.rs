//! A private PostgreSQL server for tests of the database store: `initdb` into a temp
//! dir and `pg_ctl start` listening only on a Unix socket in that dir, so tests never
//! touch a system server or a TCP port ([`PgServer::start_tls`] also listens on a free
//! port of 127.0.0.1, with TLS, for the tests of TLS). As root (CI), the server runs as the
//! unprivileged `postgres` user (else `nobody`) through `runuser`, since PostgreSQL
//! refuses to run as root.
//!
//! The binaries come from `AGENTD_TEST_PG_BIN`, then Debian's
//! `/usr/lib/postgresql/<version>/bin` (newest), then `PATH`. None found is a failure that names the
//! `postgresql` package, never a skip.
//!
//! A watchdog process stops the server and removes its directory when the test process
//! exits, so a server shared by a whole test binary ([`PgServer::shared`]) never
//! outlives it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where `initdb`, `pg_ctl` and `postgres` are.
pub fn pg_bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AGENTD_TEST_PG_BIN").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return bin;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file()
                && dir.join("pg_ctl").is_file()
                && dir.join("psql").is_file()
            {
                return dir;
            }
        }
    }
    panic!(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in AGENTD_TEST_PG_BIN, \
             PATH or /usr/lib/postgresql/*/bin: install Debian's `postgresql` package \
             (.ci/postgres.sh does)"
    )
}

/// One private server.
pub struct PgServer {
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
    /// Runs the server's commands as this user (when the tests run as root).
    run_as: Option<String>,
    /// The role's password once [`PgServer::require_password`] turned it on.
    password: std::sync::Mutex<Option<String>>,
    /// The server's port: 5432 on its socket alone, or a free TCP port on 127.0.0.1
    /// (and the same number on its socket) for a server with TLS.
    port: u16,
    /// Serves TLS on 127.0.0.1 ([`PgServer::start_tls`]).
    tls: bool,
}

fn user_exists(name: &str) -> bool {
    Command::new("id")
        .arg("-u")
        .arg(name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl PgServer {
    /// `initdb` and start a new server; panics with its output on failure.
    pub fn start() -> PgServer {
        PgServer::start_with(None)
    }

    /// [`start`](Self::start) a server that also listens on 127.0.0.1 (a free port,
    /// [`port`](Self::port)) with TLS on, presenting `cert_pem` (its chain) and
    /// `key_pem`. Plain-text TCP connections are accepted too.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> PgServer {
        PgServer::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> PgServer {
        let bin = pg_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("agentd-pg")
            .tempdir()
            .expect("tempdir");
        let root = dir.path().to_path_buf();
        // SAFETY: geteuid has no preconditions.
        let run_as = if unsafe { libc::geteuid() } == 0 {
            let user = ["postgres", "nobody"]
                .into_iter()
                .find(|u| user_exists(u))
                .expect("running as root needs a `postgres` or `nobody` user for the server");
            Some(user.to_string())
        } else {
            None
        };
        for sub in ["data", "sock"] {
            std::fs::create_dir(root.join(sub)).expect("mkdir");
        }
        if let Some(user) = &run_as {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            let st = Command::new("chown")
                .arg("-R")
                .arg(user)
                .arg(&root)
                .status()
                .expect("chown");
            assert!(st.success(), "chown {} to {user}", root.display());
        }
        let port = match tls {
            None => 5432,
            Some(_) => std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free TCP port")
                .port(),
        };
        let s = PgServer {
            _dir: dir,
            root,
            bin,
            run_as,
            password: std::sync::Mutex::new(None),
            port,
            tls: tls.is_some(),
        };
        let data = s.root.join("data");
        s.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "agentd".as_ref(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        if let Some((cert, key)) = tls {
            s.server_file("server.crt", cert, 0o644);
            s.server_file("server.key", key, 0o600);
        }
        s.start_server();
        s.watchdog();
        s
    }

    /// Writes `text` to `name` in the data directory with `mode`, owned by the user the
    /// server runs as (PostgreSQL refuses a key file others can read).
    fn server_file(&self, name: &str, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.root.join("data").join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        if let Some(user) = &self.run_as {
            let st = Command::new("chown")
                .arg(user)
                .arg(&path)
                .status()
                .expect("chown");
            assert!(st.success(), "chown {} to {user}", path.display());
        }
    }

    /// The server's port (TCP on 127.0.0.1 for a server with TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on a TCP connection must use TLS and present a client certificate
    /// signed by `ca_pem` whose common name is the role (`agentd`); the socket stays
    /// open to all. Returns once the server has reloaded.
    pub fn require_client_cert(&self, ca_pem: &str) {
        let data = self.root.join("data");
        self.server_file("root.crt", ca_pem, 0o644);
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 cert\nhost all all 127.0.0.1/32 reject\n",
        )
        .expect("write pg_hba.conf");
        self.psql("postgres", "ALTER SYSTEM SET ssl_ca_file = 'root.crt'");
        self.psql("postgres", "SELECT pg_reload_conf()");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.psql("postgres", "SHOW ssl_ca_file").trim() != "root.crt" {
            assert!(
                Instant::now() < deadline,
                "server did not reload: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One server for the whole test process (each user takes its own database).
    pub fn shared() -> &'static PgServer {
        static SERVER: OnceLock<PgServer> = OnceLock::new();
        SERVER.get_or_init(PgServer::start)
    }

    fn cmd(&self, prog: &str) -> Command {
        let path = self.bin.join(prog);
        let mut c = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.arg("-u").arg(user).arg("--").arg(path);
                c
            }
            None => Command::new(path),
        };
        c.current_dir(&self.root).stdin(Stdio::null());
        if let Some(pw) = self.password.lock().unwrap().as_ref() {
            c.env("PGPASSWORD", pw);
        }
        c
    }

    #[track_caller]
    fn run(&self, prog: &str, args: &[&std::ffi::OsStr]) -> String {
        let out = self
            .cmd(prog)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {prog}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{prog} failed: {text}");
        text
    }

    /// The server's socket directory.
    pub fn socket_dir(&self) -> PathBuf {
        self.root.join("sock")
    }

    /// `pg_ctl start`, waiting until it accepts connections.
    pub fn start_server(&self) {
        let data = self.root.join("data");
        let log = self.root.join("server.log");
        let listen = if self.tls {
            "-c listen_addresses=127.0.0.1 -c ssl=on"
        } else {
            "-c listen_addresses=''"
        };
        let opts = format!(
            "{listen} -k {} -p {} -c fsync=on -c max_connections=300",
            self.socket_dir().display(),
            self.port
        );
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "-o".as_ref(),
                opts.as_ref(),
                "start".as_ref(),
            ],
        );
    }

    /// `pg_ctl stop` with `mode` (`fast` or `immediate`: a crash, no checkpoint).
    pub fn stop_server(&self, mode: &str) {
        let data = self.root.join("data");
        let _ = self
            .cmd("pg_ctl")
            .args([
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                mode.as_ref(),
            ])
            .args(["-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Stops the server once this test process is gone, however it ends, and removes
    /// its directory (a server shared by a test binary is never dropped, so its
    /// `TempDir` would otherwise stay behind: a whole test run left gigabytes of them).
    fn watchdog(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.root.join("data");
        let stop = match &self.run_as {
            Some(u) => format!(
                "runuser -u {u} -- {} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            ),
            None => format!(
                "{} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            ),
        };
        assert!(
            !self.root.to_string_lossy().contains('\''),
            "a server directory whose path quotes cannot hold: {}",
            self.root.display()
        );
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf '{}'",
            std::process::id(),
            self.root.display()
        );
        let _ = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    /// A URL for database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        let host: String = self.socket_dir().display().to_string().replace('/', "%2F");
        format!("postgres://agentd@{host}:{}/{db}", self.port)
    }

    /// Runs SQL through `psql` against `db`; returns the unaligned output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let sock = self.socket_dir();
        let port = self.port.to_string();
        self.run(
            "psql",
            &[
                "-h".as_ref(),
                sock.as_os_str(),
                "-p".as_ref(),
                port.as_ref(),
                "-U".as_ref(),
                "agentd".as_ref(),
                "-d".as_ref(),
                db.as_ref(),
                "-v".as_ref(),
                "ON_ERROR_STOP=1".as_ref(),
                "-XAtq".as_ref(),
                "-c".as_ref(),
                sql.as_ref(),
            ],
        )
    }

    /// A new empty database; returns its URL.
    pub fn create_db(&self) -> String {
        let name = format!("t_{:016x}", rand::random::<u64>());
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// From now on every connection must authenticate with `password` (SCRAM).
    pub fn require_password(&self, password: &str) {
        self.psql(
            "postgres",
            &format!("ALTER ROLE agentd PASSWORD '{password}'"),
        );
        let hba = self.root.join("data").join("pg_hba.conf");
        std::fs::write(&hba, "local all all scram-sha-256\n").expect("write pg_hba.conf");
        *self.password.lock().unwrap() = Some(password.to_string());
        let data = self.root.join("data");
        self.run(
            "pg_ctl",
            &["-D".as_ref(), data.as_os_str(), "reload".as_ref()],
        );
        // The reload is asynchronous: wait until a connection without the password is
        // refused.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let refused = !self
                .cmd("psql")
                .env_remove("PGPASSWORD")
                .args(["-h".as_ref(), self.socket_dir().as_os_str()])
                .args(["-U", "agentd", "-d", "postgres", "-w", "-XAtqc", "select 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("psql")
                .success();
            if refused {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pg_hba.conf reload not in effect"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }

    /// The temp dir holding data, socket and log.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Waits until a fresh `psql` connects, or panics after `timeout`.
    pub fn wait_accepting(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let ok = self
                .cmd("pg_isready")
                .arg("-h")
                .arg(self.socket_dir())
                .arg("-p")
                .arg(self.port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server not ready: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop_server("immediate");
    }
}
