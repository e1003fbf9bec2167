//! `agentctl service install | uninstall | status` (docs/service.md): agentd as a
//! socket-activated login service, through systemd user units (Linux) or a launchd
//! agent (macOS).
//!
//! Every command is first a plan, a list of `Action`s computed without changing
//! anything; `--dry-run` prints the plan, otherwise each action runs in order and is
//! printed as done. The unit files and the plist are the templates in `packaging/`,
//! compiled in, with the absolute path of the `agentd` found next to this agentctl (or
//! `AGENTD_BIN`) filled in. A file that exists and lacks the templates' first-line
//! marker is someone else's: it is never overwritten or removed without `--force`.

use crate::daemon::{self, Target};
use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const SOCKET_UNIT: &str = include_str!("../../packaging/systemd/agentd.socket");
pub const SERVICE_UNIT: &str = include_str!("../../packaging/systemd/agentd.service");
pub const PLIST: &str = include_str!("../../packaging/launchd/dev.agentd.plist");
/// Every file this command writes carries it; a file without it is not ours.
const MARKER: &str = "agentd: managed by `agentctl service`";
pub const LAUNCHD_LABEL: &str = "dev.agentd";
/// Where the Debian package puts its user units.
pub const PACKAGED_UNITS: &str = "/usr/lib/systemd/user";

pub use crate::cli::ServiceManager as Manager;

impl Manager {
    pub fn native() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create a directory (and its parents) with this mode.
    Mkdir {
        path: PathBuf,
        mode: u32,
    },
    /// Write a file; `existed`: it is ours and gets replaced.
    Write {
        path: PathBuf,
        content: String,
        mode: u32,
        existed: bool,
    },
    Remove {
        path: PathBuf,
    },
    /// Run a command; its failure stops the plan.
    Run {
        argv: Vec<String>,
    },
    /// Ask the daemon answering on `socket` to shut down and wait until it is gone.
    StopUnmanaged {
        socket: PathBuf,
        pid: Option<u64>,
    },
    /// Nothing to do but say something.
    Note {
        text: String,
    },
}

impl Action {
    fn run(argv: &[&str]) -> Action {
        Action::Run {
            argv: argv.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Action::Mkdir { path, mode } => {
                json!({"action": "mkdir", "path": path, "mode": format!("{mode:04o}")})
            }
            Action::Write {
                path,
                content,
                mode,
                existed,
            } => json!({"action": "write", "path": path, "mode": format!("{mode:04o}"),
                         "replaces": existed, "content": content}),
            Action::Remove { path } => json!({"action": "remove", "path": path}),
            Action::Run { argv } => json!({"action": "run", "argv": argv}),
            Action::StopUnmanaged { socket, pid } => {
                json!({"action": "stop_unmanaged_daemon", "socket": socket, "pid": pid})
            }
            Action::Note { text } => json!({"action": "note", "text": text}),
        }
    }

    /// One line (plus the content of a written file on a dry run).
    fn render(&self, done: bool, out: &mut String) {
        let (w, r) = if done { ("", "") } else { ("would ", "would ") };
        match self {
            Action::Mkdir { path, mode } => {
                let _ = writeln!(
                    out,
                    "{w}create directory {} (mode {mode:04o})",
                    path.display()
                );
            }
            Action::Write {
                path,
                content,
                mode,
                existed,
            } => {
                let verb = match (done, existed) {
                    (true, true) => "replaced",
                    (true, false) => "wrote",
                    (false, true) => "would replace",
                    (false, false) => "would write",
                };
                let _ = writeln!(out, "{verb} {} (mode {mode:04o})", path.display());
                if !done {
                    for l in content.lines() {
                        let _ = writeln!(out, "    | {l}");
                    }
                }
            }
            Action::Remove { path } => {
                let verb = if done { "removed" } else { "would remove" };
                let _ = writeln!(out, "{verb} {}", path.display());
            }
            Action::Run { argv } => {
                let verb = if done { "ran" } else { "run" };
                let _ = writeln!(out, "{r}{verb}: {}", argv.join(" "));
            }
            Action::StopUnmanaged { socket, pid } => {
                let pid = pid.map_or(String::new(), |p| format!(" (pid {p})"));
                let verb = if done { "stopped" } else { "stop" };
                let _ = writeln!(
                    out,
                    "{r}{verb} the agentd{pid} that runs unmanaged on {}",
                    socket.display()
                );
            }
            Action::Note { text } => {
                let _ = writeln!(out, "note: {text}");
            }
        }
    }
}

/// Where things go, read from the environment once.
#[derive(Debug, Clone)]
pub struct Places {
    pub home: PathBuf,
    pub config_home: PathBuf,
    pub runtime_dir: Option<PathBuf>,
    pub uid: u32,
    /// Absolute path of the agentd binary the service will run, when one is found
    /// (only `install` needs it).
    pub agentd: Option<PathBuf>,
}

impl Places {
    pub fn from_env() -> Result<Places, AgentError> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HOME").ok_or_else(|| {
            AgentError::invalid_args("HOME is not set: cannot tell where user services live")
        })?;
        let config_home = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
        Ok(Places {
            config_home,
            runtime_dir: var("XDG_RUNTIME_DIR"),
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
            agentd: resolve_agentd().ok(),
            home,
        })
    }

    /// The service's provider-key file. Always under `~/.config` (not
    /// `$XDG_CONFIG_HOME`): the unit names it as `%h/.config/agentd/env`, and a unit
    /// must not depend on the installing shell's environment.
    pub fn env_file(&self) -> PathBuf {
        self.home.join(".config").join("agentd").join("env")
    }
    pub fn unit_dir(&self) -> PathBuf {
        self.config_home.join("systemd").join("user")
    }
    pub fn plist_path(&self) -> PathBuf {
        self.home
            .join("Library/LaunchAgents")
            .join(format!("{LAUNCHD_LABEL}.plist"))
    }
    fn launchd_log_dir(&self) -> PathBuf {
        self.home.join("Library/Logs/agentd")
    }
    /// The socket `agentd.socket` listens on (`%t/agentd/agentd.sock`).
    pub fn systemd_socket(&self) -> Option<PathBuf> {
        self.runtime_dir
            .as_ref()
            .map(|d| d.join("agentd").join("agentd.sock"))
    }
    pub fn domain(&self) -> String {
        format!("gui/{}", self.uid)
    }
    fn agentd(&self) -> Result<&Path, AgentError> {
        match &self.agentd {
            Some(p) => Ok(p),
            None => Err(resolve_agentd().err().unwrap_or_else(|| {
                AgentError::not_found("cannot find the agentd binary; set AGENTD_BIN")
            })),
        }
    }
    /// Whether launchd has the agent loaded (`launchctl print` succeeds).
    pub fn launchd_loaded(&self) -> bool {
        Command::new("launchctl")
            .arg("print")
            .arg(format!("{}/{LAUNCHD_LABEL}", self.domain()))
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

/// The agentd that agentctl itself would start, as an absolute path that exists.
fn resolve_agentd() -> Result<PathBuf, AgentError> {
    let bin = daemon::agentd_binary();
    let found = if bin.components().count() == 1 {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&bin))
                .find(|c| c.is_file())
        })
    } else {
        Some(bin.clone())
    };
    found
        .and_then(|p| std::fs::canonicalize(p).ok())
        .filter(|p| p.is_file())
        .ok_or_else(|| {
            AgentError::not_found(format!(
                "cannot find the agentd binary ({}): install it next to agentctl or set AGENTD_BIN",
                bin.display()
            ))
        })
}

pub fn render_service(agentd: &Path) -> String {
    SERVICE_UNIT.replace("@AGENTD@", &agentd.to_string_lossy())
}

pub fn render_plist(agentd: &Path, socket: &Path, env_file: &Path, log_dir: &Path) -> String {
    PLIST
        .replace("@AGENTD@", &xml_escape(&agentd.to_string_lossy()))
        .replace("@SOCKET@", &xml_escape(&socket.to_string_lossy()))
        .replace("@ENV_FILE@", &xml_escape(&env_file.to_string_lossy()))
        .replace("@LOG_DIR@", &xml_escape(&log_dir.to_string_lossy()))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What is at `path`: nothing, our own file (with its content), or someone else's.
enum Existing {
    Absent,
    Ours(String),
    Foreign,
}

fn existing(path: &Path) -> Existing {
    match std::fs::read_to_string(path) {
        Ok(text) if text.contains(MARKER) => Existing::Ours(text),
        Ok(_) => Existing::Foreign,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Existing::Absent,
        Err(_) => Existing::Foreign,
    }
}

fn foreign(path: &Path) -> AgentError {
    AgentError::new(
        ErrorKind::AlreadyExists,
        format!(
            "{} exists and was not written by agentctl; refusing to overwrite or remove it",
            path.display()
        ),
    )
    .with_details(json!({"path": path, "next_actions": [
        format!("mv {} {}.bak", path.display(), path.display()),
        "agentctl service install --force".to_string(),
    ]}))
}

/// Adds the writes of `files` to `plan`, checking each existing file.
fn plan_writes(
    plan: &mut Vec<Action>,
    files: Vec<(PathBuf, String, u32)>,
    force: bool,
) -> Result<(), AgentError> {
    for (path, content, mode) in files {
        let existed = match existing(&path) {
            Existing::Absent => false,
            Existing::Ours(old) if old == content => {
                plan.push(Action::Note {
                    text: format!("{} is up to date", path.display()),
                });
                continue;
            }
            Existing::Ours(_) => true,
            Existing::Foreign if force => true,
            Existing::Foreign => return Err(foreign(&path)),
        };
        plan.push(Action::Write {
            path,
            content,
            mode,
            existed,
        });
    }
    Ok(())
}

/// The env file must hold only the user's secrets: no group or other access.
fn check_env_file(plan: &mut Vec<Action>, env_file: &Path) -> Result<(), AgentError> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(env_file) {
        Ok(m) if m.permissions().mode() & 0o077 != 0 => Err(AgentError::new(
            ErrorKind::PermissionDenied,
            format!(
                "{} (provider keys) is readable by group or others (mode {:04o}); the service refuses to start with it",
                env_file.display(),
                m.permissions().mode() & 0o777
            ),
        )
        .with_next_actions(&[&format!("chmod 600 {}", env_file.display())])),
        Ok(_) => Ok(()),
        Err(_) => {
            plan.push(Action::Note {
                text: format!(
                    "provider keys for the service go in {} (KEY=value lines, mode 0600)",
                    env_file.display()
                ),
            });
            Ok(())
        }
    }
}

/// A daemon answering on `socket` that the service manager did not start must be
/// stopped before the manager takes the socket over.
async fn plan_stop_unmanaged(plan: &mut Vec<Action>, socket: &Path, managed: bool) {
    if managed {
        return;
    }
    let target = Target {
        socket: socket.to_path_buf(),
        home: None,
    };
    if let Ok(c) = daemon::connect_existing(&target).await {
        plan.push(Action::StopUnmanaged {
            socket: socket.to_path_buf(),
            pid: c.hello.get("pid").and_then(Value::as_u64),
        });
    }
}

fn packaged_units_match(agentd: &Path) -> bool {
    let dir = Path::new(PACKAGED_UNITS);
    let service = std::fs::read_to_string(dir.join("agentd.service")).unwrap_or_default();
    service == render_service(agentd)
        && std::fs::read_to_string(dir.join("agentd.socket"))
            .ok()
            .as_deref()
            == Some(SOCKET_UNIT)
}

pub async fn plan_install(
    manager: Manager,
    places: &Places,
    client_socket: &Path,
    force: bool,
) -> Result<Vec<Action>, AgentError> {
    let mut plan = Vec::new();
    let agentd = places.agentd()?;
    check_env_file(&mut plan, &places.env_file())?;
    match manager {
        Manager::Systemd => {
            let socket = places.systemd_socket().ok_or_else(|| {
                AgentError::invalid_args(
                    "XDG_RUNTIME_DIR is not set: no systemd user session to install into",
                )
                .with_next_actions(&["loginctl enable-linger $USER", "agentctl daemon start"])
            })?;
            if socket != client_socket {
                plan.push(Action::Note {
                    text: format!(
                        "the service listens on {}, but this agentctl uses {} (AGENTD_SOCKET or --socket); unset it to reach the service",
                        socket.display(),
                        client_socket.display()
                    ),
                });
            }
            let managed =
                systemctl_state(&["is-active", "agentd.service"]).as_deref() == Some("active");
            plan_stop_unmanaged(&mut plan, &socket, managed).await;
            if agentd.starts_with("/usr/bin") && packaged_units_match(agentd) {
                plan.push(Action::Note {
                    text: format!("using the packaged units in {PACKAGED_UNITS}"),
                });
            } else {
                let dir = places.unit_dir();
                plan.push(Action::Mkdir {
                    path: dir.clone(),
                    mode: 0o755,
                });
                plan_writes(
                    &mut plan,
                    vec![
                        (dir.join("agentd.socket"), SOCKET_UNIT.to_string(), 0o644),
                        (dir.join("agentd.service"), render_service(agentd), 0o644),
                    ],
                    force,
                )?;
            }
            plan.push(Action::run(&["systemctl", "--user", "daemon-reload"]));
            plan.push(Action::run(&[
                "systemctl",
                "--user",
                "enable",
                "--now",
                "agentd.socket",
            ]));
        }
        Manager::Launchd => {
            let socket = client_socket.to_path_buf();
            plan_stop_unmanaged(&mut plan, &socket, false).await;
            let log_dir = places.launchd_log_dir();
            let plist = places.plist_path();
            if let Some(dir) = socket.parent() {
                plan.push(Action::Mkdir {
                    path: dir.to_path_buf(),
                    mode: 0o700,
                });
            }
            plan.push(Action::Mkdir {
                path: log_dir.clone(),
                mode: 0o700,
            });
            if let Some(dir) = plist.parent() {
                plan.push(Action::Mkdir {
                    path: dir.to_path_buf(),
                    mode: 0o755,
                });
            }
            let content = render_plist(agentd, &socket, &places.env_file(), &log_dir);
            let loaded = places.launchd_loaded();
            plan_writes(&mut plan, vec![(plist.clone(), content, 0o644)], force)?;
            let domain = places.domain();
            if loaded {
                // A job is bootstrapped once; a changed plist needs a bootout first.
                plan.push(Action::run(&[
                    "launchctl",
                    "bootout",
                    &format!("{domain}/{LAUNCHD_LABEL}"),
                ]));
            }
            plan.push(Action::run(&[
                "launchctl",
                "bootstrap",
                &domain,
                &plist.to_string_lossy(),
            ]));
        }
    }
    Ok(plan)
}

pub fn plan_uninstall(
    manager: Manager,
    places: &Places,
    force: bool,
) -> Result<Vec<Action>, AgentError> {
    let mut plan = Vec::new();
    let remove = |plan: &mut Vec<Action>, path: PathBuf| -> Result<bool, AgentError> {
        match existing(&path) {
            Existing::Absent => Ok(false),
            Existing::Foreign if !force => Err(foreign(&path)),
            _ => {
                plan.push(Action::Remove { path });
                Ok(true)
            }
        }
    };
    match manager {
        Manager::Systemd => {
            let dir = places.unit_dir();
            let mut removals = Vec::new();
            let mut any = false;
            for name in ["agentd.socket", "agentd.service"] {
                any |= remove(&mut removals, dir.join(name))?;
            }
            if !any && !Path::new(PACKAGED_UNITS).join("agentd.socket").exists() {
                plan.push(Action::Note {
                    text: "no agentd units are installed".into(),
                });
                return Ok(plan);
            }
            plan.push(Action::run(&[
                "systemctl",
                "--user",
                "disable",
                "--now",
                "agentd.socket",
                "agentd.service",
            ]));
            plan.extend(removals);
            plan.push(Action::run(&["systemctl", "--user", "daemon-reload"]));
        }
        Manager::Launchd => {
            let plist = places.plist_path();
            let mut removals = Vec::new();
            if !remove(&mut removals, plist)? {
                plan.push(Action::Note {
                    text: "no agentd launchd agent is installed".into(),
                });
                return Ok(plan);
            }
            if places.launchd_loaded() {
                plan.push(Action::run(&[
                    "launchctl",
                    "bootout",
                    &format!("{}/{LAUNCHD_LABEL}", places.domain()),
                ]));
            }
            plan.extend(removals);
        }
    }
    plan.push(Action::Note {
        text: format!(
            "kept {} (provider keys) and the daemon home (Logs)",
            places.env_file().display()
        ),
    });
    Ok(plan)
}

/// Runs the plan in order; stops at the first failure, saying what was done before it.
pub async fn execute(plan: &[Action]) -> Result<(), AgentError> {
    for (i, a) in plan.iter().enumerate() {
        let step = perform(a).await;
        if let Err(mut e) = step {
            let mut done = String::new();
            for d in &plan[..i] {
                d.render(true, &mut done);
            }
            if e.details.is_object() {
                e.details["done_before_failure"] = json!(done.lines().collect::<Vec<_>>());
            }
            return Err(e);
        }
    }
    Ok(())
}

async fn perform(a: &Action) -> Result<(), AgentError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io_err = |what: &str, p: &Path, e: std::io::Error| {
        AgentError::new(ErrorKind::Internal, format!("{what} {}: {e}", p.display()))
    };
    match a {
        Action::Mkdir { path, mode } => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(*mode)
            .create(path)
            .map_err(|e| io_err("create directory", path, e)),
        Action::Write {
            path,
            content,
            mode,
            ..
        } => {
            // Write beside, then rename: a unit is never seen half-written.
            let tmp = path.with_extension("agentctl-tmp");
            std::fs::write(&tmp, content).map_err(|e| io_err("write", &tmp, e))?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| io_err("chmod", &tmp, e))?;
            std::fs::rename(&tmp, path).map_err(|e| io_err("write", path, e))
        }
        Action::Remove { path } => {
            std::fs::remove_file(path).map_err(|e| io_err("remove", path, e))
        }
        Action::Run { argv } => {
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .output()
                .map_err(|e| {
                    AgentError::new(ErrorKind::Internal, format!("cannot run {}: {e}", argv[0]))
                })?;
            if out.status.success() {
                return Ok(());
            }
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let mut e = AgentError::new(
                ErrorKind::Internal,
                format!("`{}` failed ({}): {stderr}", argv.join(" "), out.status),
            );
            if argv[0] == "systemctl" {
                e = e.with_next_actions(&[
                    "systemctl --user status",
                    "agentctl daemon start   # without a service manager",
                ]);
            }
            Err(e)
        }
        Action::StopUnmanaged { socket, .. } => daemon::stop(&Target {
            socket: socket.clone(),
            home: None,
        })
        .await
        .map(|_| ()),
        Action::Note { .. } => Ok(()),
    }
}

/// The plan as a command result: `{manager, dry_run, actions}` and its text.
pub fn report(manager: Manager, plan: &[Action], dry_run: bool) -> (Value, String) {
    let mut text = String::new();
    for a in plan {
        a.render(!dry_run, &mut text);
    }
    let v = json!({
        "manager": manager.as_str(),
        "dry_run": dry_run,
        "actions": plan.iter().map(Action::to_json).collect::<Vec<_>>(),
    });
    (v, text)
}

/// `systemctl --user <args>`'s first stdout line, or `None` when there is no answer
/// (no systemctl, no user manager).
pub fn systemctl_state(args: &[&str]) -> Option<String> {
    let out = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next()?.trim().to_string();
    let known = [
        "active",
        "inactive",
        "failed",
        "activating",
        "deactivating",
        "enabled",
        "disabled",
        "static",
        "linked",
        "masked",
        "not-found",
    ];
    known.contains(&first.as_str()).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_carry_the_marker_and_fill_every_placeholder() {
        for t in [SOCKET_UNIT, SERVICE_UNIT, PLIST] {
            assert!(t.contains(MARKER));
        }
        let s = render_service(Path::new("/opt/x/agentd"));
        assert!(s.contains("ExecStart=/opt/x/agentd\n"), "{s}");
        let p = render_plist(
            Path::new("/a&b/agentd"),
            Path::new("/t/agentd.sock"),
            Path::new("/h/env"),
            Path::new("/h/logs"),
        );
        assert!(!p.contains('@'), "{p}");
        assert!(p.contains("<string>/a&amp;b/agentd</string>"), "{p}");
    }
}
