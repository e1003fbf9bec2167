//! The command sandbox as the tools see it: the daemon-wide runtime (the helper
//! executable, agentd's own paths, the kernel probe), the per-turn policy a
//! [`super::ToolContext`] carries, and the hidden/protected checks the file tools share
//! with `shell`, so the two routes agree.

use agentd_proto::{AgentError, ErrorKind};
use agentd_sandbox::{
    EffectivePolicy, Grant, Inputs, OnUnavailable, SandboxConfig, SandboxRequest,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Daemon-wide sandbox state, installed once by `main`.
#[derive(Debug)]
pub struct Runtime {
    pub sandbox: agentd_sandbox::Sandbox,
    pub socket: PathBuf,
    /// agentd's home and config directory (hidden from commands).
    pub agentd_dirs: Vec<PathBuf>,
}

static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();

/// Installs the runtime: `helper` is the daemon executable (it runs the helper when
/// started with the helper argument). `knobs` comes from the daemon's own environment
/// (`AGENTD_SANDBOX_FORCE`), never from a command's.
pub fn install(helper: PathBuf, socket: PathBuf, home: PathBuf, config: PathBuf, knobs: &str) {
    // The config file, and its directory when it is agentd's own (`~/.config/agentd`).
    let mut dirs = vec![home];
    match config.parent() {
        Some(d) if d.file_name().is_some_and(|n| n == "agentd") => dirs.push(d.to_path_buf()),
        _ => dirs.push(config),
    }
    let sandbox = agentd_sandbox::Sandbox::new(helper, agentd_sandbox::Knobs::parse(knobs))
        .with_cache_layers(dirs[0].join("sandbox-caches"))
        .with_tmp_dirs(dirs[0].join("sandbox-tmp"));
    let _ = RUNTIME.set(Arc::new(Runtime {
        sandbox,
        socket,
        agentd_dirs: dirs,
    }));
}

/// Removes per-command cgroups left behind (docs/sandbox.md#when-the-daemon-dies): at
/// start (before any command runs) those of daemons that are gone, at a clean shutdown
/// this daemon's own. Logged when there were any; nothing without a runtime.
pub fn sweep_cgroups(owners: agentd_sandbox::Owners) {
    let Some(rt) = runtime() else { return };
    let swept = rt.sandbox.sweep_cgroups(owners);
    if !swept.removed.is_empty() || !swept.failed.is_empty() {
        tracing::info!(
            owners = ?owners,
            removed = swept.removed.len(),
            failed = ?swept.failed,
            "per-command cgroups swept"
        );
    }
}

/// The runtime, when this process is the daemon binary (unit tests run without one:
/// their commands are not sandboxed).
pub fn runtime() -> Option<Arc<Runtime>> {
    RUNTIME.get().cloned()
}

/// What one turn's commands run under.
#[derive(Debug, Clone)]
pub struct CommandSandbox {
    pub runtime: Arc<Runtime>,
    /// What the policy was computed from (kept to widen it for one call).
    pub inputs: Inputs,
    pub policy: EffectivePolicy,
    pub on_unavailable: OnUnavailable,
    pub limits: agentd_sandbox::Limits,
}

/// The policy inputs for a turn in `workspace`.
pub fn inputs(
    rt: &Runtime,
    config: &SandboxConfig,
    session: SandboxRequest,
    turn: SandboxRequest,
    workspace: &Path,
) -> Inputs {
    let env = std::env::vars().collect();
    let dirs = rt
        .agentd_dirs
        .iter()
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()))
        .collect();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let found_hidden = agentd_sandbox::policy::discover_hidden(home.as_deref(), workspace);
    Inputs {
        config: config.clone(),
        session,
        turn,
        grants: Vec::new(),
        call_grants: Vec::new(),
        workspace: workspace.to_path_buf(),
        home,
        xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        agentd_dirs: dirs,
        agentd_socket: Some(
            rt.socket
                .parent()
                .and_then(|p| p.canonicalize().ok())
                .and_then(|p| rt.socket.file_name().map(|n| p.join(n)))
                .unwrap_or_else(|| rt.socket.clone()),
        ),
        env,
        found_hidden,
    }
}

/// Parses `sandbox: {mode?, network?}` of `agentd/create` / `agentd/turn`.
pub fn parse_request(v: Option<&serde_json::Value>) -> Result<SandboxRequest, AgentError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(SandboxRequest::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            AgentError::invalid_args(format!(
                "sandbox: {e} (mode: workspace_write|read_only|full_access, network: none|host)"
            ))
        }),
    }
}

/// Hidden and protected paths for the file tools.
#[derive(Debug, Clone, Default)]
pub struct PathRules {
    pub hidden: Vec<PathBuf>,
    pub protected: Vec<PathBuf>,
    /// Files other tools run (`[sandbox] protect` and its defaults): written only by a
    /// call the user approved in `ask` mode ([`PathRules::approved`]).
    pub protect: Vec<PathBuf>,
    /// This call was approved in `ask` mode: the protect set may be written.
    pub approved: bool,
}

impl PathRules {
    pub fn from_policy(p: &EffectivePolicy) -> PathRules {
        let hidden = p
            .hidden
            .iter()
            .map(|h| h.canonicalize().unwrap_or_else(|_| h.clone()))
            .collect();
        let roots: Vec<PathBuf> = p
            .writable_roots
            .iter()
            .filter_map(|r| r.canonicalize().ok())
            .collect();
        let (protected, _) = agentd_sandbox::linux::spawn::git_protected(&roots);
        PathRules {
            hidden,
            protected,
            protect: p.protect.clone(),
            approved: false,
        }
    }

    /// `permission_denied` when `path` (resolved) is hidden, or protected and written.
    /// Nothing named `.git`, and nothing inside one, is written by the file tools: git
    /// runs what is there (hooks, config, `commondir`), wherever the repository is and
    /// whenever it was created.
    pub fn check(&self, path: &Path, write: bool) -> Result<(), AgentError> {
        if let Some(h) = self.hidden.iter().find(|h| path.starts_with(h)) {
            return Err(AgentError::new(
                ErrorKind::PermissionDenied,
                format!("{} is hidden by the sandbox", path.display()),
            )
            .with_details(json!({"path": path, "hidden": h, "sandbox": "hidden"})));
        }
        if write && path.components().any(|c| c.as_os_str() == ".git") {
            return Err(AgentError::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{} is inside a git directory, which the sandbox protects (git hooks and \
                     config run code outside it); use git commands for ordinary git work",
                    path.display()
                ),
            )
            .with_details(json!({"path": path, "protected": ".git", "sandbox": "protected"})));
        }
        if write && !self.approved {
            if let Some(p) = self.protect.iter().find(|p| path.starts_with(p)) {
                return Err(AgentError::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "{} is protected by the sandbox: other tools run it outside the sandbox \
                         (an editor, direnv, a hook manager, CI); it can be written only in \
                         `ask` permission mode, where the user approves the call",
                        path.display()
                    ),
                )
                .with_details(json!({"path": path, "protected": p, "sandbox": "protect"})));
            }
        }
        if write {
            if let Some(p) = self.protected.iter().find(|p| path.starts_with(p)) {
                return Err(AgentError::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "{} is protected by the sandbox (git hooks and config run code outside it)",
                        path.display()
                    ),
                )
                .with_details(json!({"path": path, "protected": p, "sandbox": "protected"})));
            }
        }
        Ok(())
    }
}

/// The grants a `shell` call's `sandbox_grant` asks for (`None`: it asks for none).
pub fn parse_grant(v: Option<&serde_json::Value>) -> Result<Option<Vec<Grant>>, AgentError> {
    let Some(obj) = v.and_then(|v| v.as_object()) else {
        return Ok(None);
    };
    let bad = |m: String| {
        AgentError::invalid_args(format!("sandbox_grant: {m}"))
            .with_details(json!({"field": "sandbox_grant"}))
    };
    let mut out = Vec::new();
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        let path = || -> Result<PathBuf, AgentError> {
            let p = PathBuf::from(v.as_str().unwrap_or(""));
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(bad(format!("{k} needs an absolute path")))
            }
        };
        match k.as_str() {
            "network" if v == "host" => out.push(Grant::Network {
                network: agentd_sandbox::Network::Host,
            }),
            "write" => out.push(Grant::WriteRoot { path: path()? }),
            "read" => out.push(Grant::ReadHidden { path: path()? }),
            "cache" => match agentd_sandbox::CachePreset::parse(v.as_str().unwrap_or("")) {
                Some(cache) => out.push(Grant::Cache { cache }),
                None => return Err(bad(format!("unknown cache {v}"))),
            },
            "full_access" if v == true => out.push(Grant::FullAccess),
            "git" if v == "init" => out.push(Grant::GitInit),
            "socket" => out.push(Grant::Socket { path: path()? }),
            "full_access" => {}
            _ => return Err(bad(format!("unknown grant {k}={v}"))),
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

impl CommandSandbox {
    /// The sandbox widened by `grants`: for this call only (`call`), or as session grants.
    pub fn widened(&self, grants: &[Grant], call: bool) -> CommandSandbox {
        let mut inputs = self.inputs.clone();
        if call {
            inputs.call_grants.extend(grants.iter().cloned());
        } else {
            inputs.grants.extend(grants.iter().cloned());
        }
        let policy = agentd_sandbox::effective(&inputs);
        CommandSandbox {
            inputs,
            policy,
            ..self.clone()
        }
    }
}
