//! Finding, starting and stopping the daemon (docs/protocol.md#the-socket, docs/service.md).
//!
//! Every command connects first. Only when the socket is missing or refused (ENOENT,
//! ECONNREFUSED: nobody listens) does agentctl spawn `agentd` itself, detached in its own
//! session so a Ctrl-C or a closed terminal never reaches it, with its output appended to
//! `<home>/agentd.log`. Racing starts are safe: the daemon's home lock lets one win, and
//! every client keeps retrying `agentd/hello` until someone answers.

use crate::rpc::{to_params, Conn};
use agentd_proto::rpc::{self, method, PROTOCOL_VERSION};
use agentd_proto::{paths, AgentError, ErrorKind};
use serde_json::{json, Value};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started daemon has to answer `agentd/hello`.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `daemon stop` waits for the socket to go quiet.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// A connected daemon that does not answer hello within this is treated as unavailable.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the daemon is (or will be).
#[derive(Debug, Clone)]
pub struct Target {
    pub socket: PathBuf,
    /// `--home` as given; `None` lets the daemon resolve `AGENTD_HOME` itself.
    pub home: Option<PathBuf>,
}

impl Target {
    /// `--socket` > `AGENTD_SOCKET` > default; `--home` > `AGENTD_HOME` (> default, when
    /// needed for the log file).
    pub fn resolve(socket: Option<PathBuf>, home: Option<PathBuf>) -> Target {
        Target {
            socket: socket.unwrap_or_else(paths::default_socket),
            home,
        }
    }

    /// The home the daemon will use, for `agentd.log`.
    pub fn effective_home(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(paths::default_home)
    }

    pub fn log_path(&self) -> PathBuf {
        self.effective_home().join("agentd.log")
    }
}

/// A live connection and the daemon's `agentd/hello` answer.
pub struct Connected {
    pub conn: Conn,
    pub hello: Value,
    /// Pid of the daemon this call started, if it started one.
    pub started: Option<u32>,
}

/// Why a single connect attempt failed.
enum Attempt {
    /// Nobody listens: a daemon may be started.
    NotRunning(io::Error),
    Failed(AgentError),
}

fn unavailable(message: impl Into<String>, socket: &Path) -> AgentError {
    AgentError::new(ErrorKind::DaemonUnavailable, message)
        .with_details(json!({"socket": socket.to_string_lossy()}))
}

/// True for the connect errors that mean "no daemon listens here".
pub fn nobody_listens(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    ) || matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED))
}

async fn attempt(socket: &Path) -> Result<(Conn, Value), Attempt> {
    let conn = match Conn::connect(socket).await {
        Ok(c) => c,
        Err(e) if nobody_listens(&e) => return Err(Attempt::NotRunning(e)),
        Err(e) => {
            return Err(Attempt::Failed(unavailable(
                format!("cannot connect to {}: {e}", socket.display()),
                socket,
            )))
        }
    };
    let params = rpc::HelloParams {
        client: Some(concat!("agentctl/", env!("CARGO_PKG_VERSION")).to_string()),
    };
    let hello = conn.call(method::HELLO, to_params(&params).map_err(Attempt::Failed)?);
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, hello).await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) if e.kind == ErrorKind::DaemonUnavailable => {
            return Err(Attempt::NotRunning(io::Error::other(e.message)))
        }
        Ok(Err(e)) => return Err(Attempt::Failed(e)),
        Err(_) => {
            return Err(Attempt::Failed(unavailable(
                format!(
                    "{} accepted the connection but agentd/hello got no answer within {}s",
                    socket.display(),
                    HELLO_TIMEOUT.as_secs()
                ),
                socket,
            )))
        }
    };
    let version = hello.get("protocol_version").and_then(Value::as_u64);
    if version != Some(u64::from(PROTOCOL_VERSION)) {
        return Err(Attempt::Failed(
            AgentError::new(
                ErrorKind::Unsupported,
                format!(
                    "daemon speaks protocol {}, agentctl speaks {PROTOCOL_VERSION}",
                    version.map_or("unknown".into(), |v| v.to_string())
                ),
            )
            .with_next_actions(&["agentctl daemon stop", "agentctl daemon start"]),
        ));
    }
    Ok((conn, hello))
}

/// Connects without ever starting a daemon.
pub async fn connect_existing(target: &Target) -> Result<Connected, AgentError> {
    match attempt(&target.socket).await {
        Ok((conn, hello)) => Ok(Connected {
            conn,
            hello,
            started: None,
        }),
        Err(Attempt::NotRunning(e)) => Err(unavailable(
            format!("no agentd answers on {}: {e}", target.socket.display()),
            &target.socket,
        )
        .with_next_actions(&["agentctl daemon start"])),
        Err(Attempt::Failed(e)) => Err(e),
    }
}

/// Connects, starting a daemon when none listens.
pub async fn connect_or_start(target: &Target) -> Result<Connected, AgentError> {
    match attempt(&target.socket).await {
        Ok((conn, hello)) => Ok(Connected {
            conn,
            hello,
            started: None,
        }),
        Err(Attempt::Failed(e)) => Err(e),
        Err(Attempt::NotRunning(_)) => start_and_wait(target).await,
    }
}

/// The `agentd` binary: `AGENTD_BIN`, else next to this executable, else from PATH.
pub fn agentd_binary() -> PathBuf {
    if let Some(b) = std::env::var_os("AGENTD_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        let beside = dir.join("agentd");
        if beside.is_file() {
            return beside;
        }
    }
    PathBuf::from("agentd")
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Spawns `agentd --socket S [--home H]` detached, output appended to `<home>/agentd.log`.
fn spawn(target: &Target) -> Result<Child, AgentError> {
    use std::os::unix::process::CommandExt;
    let home = target.effective_home();
    let log_path = target.log_path();
    let log_err = |e: io::Error| {
        AgentError::new(
            ErrorKind::DaemonUnavailable,
            format!("cannot open daemon log {}: {e}", log_path.display()),
        )
    };
    create_private_dir(&home).map_err(log_err)?;
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
    }
    .map_err(log_err)?;
    let log2 = log.try_clone().map_err(log_err)?;
    let bin = agentd_binary();
    let mut cmd = Command::new(&bin);
    cmd.arg("--socket").arg(&target.socket);
    if let Some(h) = &target.home {
        cmd.arg("--home").arg(h);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent; it makes
    // the daemon a session leader without a controlling terminal, so the terminal's
    // SIGINT/SIGHUP never reach it.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        let msg = if e.kind() == io::ErrorKind::NotFound {
            format!(
                "cannot start the daemon: {} not found (looked next to agentctl and on PATH; set AGENTD_BIN)",
                bin.display()
            )
        } else {
            format!("cannot start the daemon {}: {e}", bin.display())
        };
        AgentError::new(ErrorKind::DaemonUnavailable, msg)
    })
}

/// The last lines of the daemon log, to explain a failed start.
fn log_tail(path: &Path, lines: usize) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

async fn start_and_wait(target: &Target) -> Result<Connected, AgentError> {
    let mut child = spawn(target)?;
    let pid = child.id();
    let deadline = Instant::now() + START_TIMEOUT;
    let mut delay = Duration::from_millis(10);
    let mut exited: Option<(std::process::ExitStatus, Instant)> = None;
    loop {
        match attempt(&target.socket).await {
            Ok((conn, hello)) => {
                // The pid that answers may be another racer's daemon; report what answered.
                let answered = hello.get("pid").and_then(Value::as_u64).map(|p| p as u32);
                return Ok(Connected {
                    conn,
                    hello,
                    started: answered.or(Some(pid)),
                });
            }
            Err(Attempt::Failed(e)) if e.kind != ErrorKind::DaemonUnavailable => return Err(e),
            Err(_) => {}
        }
        if exited.is_none() {
            if let Ok(Some(status)) = child.try_wait() {
                exited = Some((status, Instant::now()));
            }
        }
        let now = Instant::now();
        // A daemon that exited may have lost a start race to one that is still coming
        // up; give that one a moment, not the whole timeout.
        let gave_up = now >= deadline
            || exited.is_some_and(|(_, at)| now.duration_since(at) > Duration::from_secs(1));
        if gave_up {
            let log = target.log_path();
            let mut msg = format!(
                "started agentd (pid {pid}) but it did not answer on {} within {}s",
                target.socket.display(),
                START_TIMEOUT.as_secs()
            );
            if let Some((status, _)) = exited {
                msg = format!("agentd (pid {pid}) exited ({status}) before answering");
                // Its own last word, such as the config key and line it refused.
                if let Some(last) = log_tail(&log, 10)
                    .iter()
                    .rev()
                    .find_map(|l| l.strip_prefix("agentd: "))
                {
                    msg = format!("{msg}: {last}");
                }
            }
            return Err(
                AgentError::new(ErrorKind::DaemonUnavailable, msg).with_details(json!({
                    "socket": target.socket.to_string_lossy(),
                    "log": log.to_string_lossy(),
                    "log_tail": log_tail(&log, 10),
                    "next_actions": [format!("cat {}", log.display()), "agentctl daemon start"],
                })),
            );
        }
        tokio::time::sleep(delay.min(deadline.saturating_duration_since(now))).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

/// `daemon stop`: asks for shutdown, then waits until the socket stops answering.
/// Succeeds with `stopped:false` when no daemon runs.
pub async fn stop(target: &Target) -> Result<Value, AgentError> {
    let Connected { conn, hello, .. } = match connect_existing(target).await {
        Ok(c) => c,
        Err(e) if e.kind == ErrorKind::DaemonUnavailable => {
            return Ok(json!({"stopped": false, "running": false,
                             "socket": target.socket.to_string_lossy()}))
        }
        Err(e) => return Err(e),
    };
    match conn
        .call(method::SHUTDOWN, to_params(&rpc::NoParams {})?)
        .await
    {
        Ok(_) => {}
        // The daemon may close the connection before its answer arrives.
        Err(e) if e.kind == ErrorKind::DaemonUnavailable => {}
        Err(e) => return Err(e),
    }
    drop(conn);
    let deadline = Instant::now() + STOP_TIMEOUT;
    let mut delay = Duration::from_millis(10);
    loop {
        match Conn::connect(&target.socket).await {
            Err(e) if nobody_listens(&e) => break,
            Err(_) => break,
            Ok(c) => {
                // Accepting but closing without answering also counts as gone.
                let r = tokio::time::timeout(
                    Duration::from_millis(500),
                    c.call(method::HELLO, to_params(&rpc::HelloParams::default())?),
                )
                .await;
                if matches!(r, Ok(Err(ref e)) if e.kind == ErrorKind::DaemonUnavailable) {
                    break;
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(AgentError::new(
                ErrorKind::Timeout,
                format!(
                    "agentd still answers on {} {}s after shutdown",
                    target.socket.display(),
                    STOP_TIMEOUT.as_secs()
                ),
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
    // The socket stops answering before the daemon has finished: wait for the process
    // itself, so that "stopped" means its Logs are closed and its socket file is gone.
    if let Some(pid) = hello
        .get("pid")
        .and_then(Value::as_i64)
        .and_then(|p| libc::pid_t::try_from(p).ok())
        .filter(|p| *p > 0)
    {
        let mut delay = Duration::from_millis(5);
        while process_alive(pid) {
            if Instant::now() >= deadline {
                return Err(AgentError::new(
                    ErrorKind::Timeout,
                    format!(
                        "agentd (pid {pid}) still runs {}s after shutdown",
                        STOP_TIMEOUT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(100));
        }
    }
    Ok(json!({"stopped": true, "running": false,
              "pid": hello.get("pid").cloned().unwrap_or(Value::Null),
              "socket": target.socket.to_string_lossy()}))
}

/// Whether `pid` still runs. A zombie (exited, not yet reaped by its parent, e.g. a
/// test harness that spawned the daemon) counts as gone.
fn process_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_missing_sockets_mean_nobody_listens() {
        let dir = std::env::temp_dir().join(format!("agentctl-d-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.sock");
        let e = std::os::unix::net::UnixStream::connect(&missing).unwrap_err();
        assert!(nobody_listens(&e));
        // A socket file nobody listens on any more (a stale one) is refused.
        let stale = dir.join("stale.sock");
        let _ = std::fs::remove_file(&stale);
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let e = std::os::unix::net::UnixStream::connect(&stale).unwrap_err();
        assert!(nobody_listens(&e), "{e:?}");
        assert!(!nobody_listens(&io::Error::from(
            io::ErrorKind::PermissionDenied
        )));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn status_without_daemon_is_unavailable_and_starts_nothing() {
        let dir = std::env::temp_dir().join(format!("agentctl-s-{}", std::process::id()));
        let target = Target {
            socket: dir.join("none.sock"),
            home: Some(dir.join("home")),
        };
        let e = connect_existing(&target).await.err().unwrap();
        assert_eq!(e.kind, ErrorKind::DaemonUnavailable);
        assert_eq!(e.kind.exit_code(), 4);
        assert!(!dir.join("home").exists(), "no daemon home created");
        let stopped = stop(&target).await.unwrap();
        assert_eq!(stopped["stopped"], false);
    }
}
