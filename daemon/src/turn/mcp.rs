//! The MCP servers of each session (docs/mcp.md#contract), as the turn engine uses them: the
//! config's `[mcp_servers]` merged with the servers a client gave for the session
//! (`agentd/create`, `agentd/turn`, ACP; config wins on a name clash), one
//! `agentd_mcp::Manager` per session started at its first turn, "always allow" answers
//! remembered per (server, tool), the reaping of groups a killed daemon left, and the
//! stop of every server at shutdown. Client-given entries live in memory only: their env
//! values may be secrets and are never written to a Log.
//!
//! A stdio server with `sandbox = true` (or every stdio server without a `sandbox` of
//! its own, with `mcp_sandbox = true`) runs under the turn's command sandbox:
//! [`SandboxConfine`] is the `agentd_mcp::client::Confine` the daemon hands down. Its
//! servers are restarted when a turn's policy differs from the one they run under, so
//! a server never has more than the turn that calls it.

use crate::tools::sandboxing::CommandSandbox;
use agentd_mcp::client::{Confine, Confined, Confinement};
use agentd_mcp::{Manager, ManagerOptions, ServerConfig, StartContext};
use agentd_proto::AgentError;
use dashmap::DashMap;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Runs sandboxed MCP servers under one turn's command sandbox, with the environment
/// the server's config names (never the command environment of the policy).
#[derive(Debug)]
pub struct SandboxConfine(pub CommandSandbox);

struct SandboxGuard(agentd_sandbox::Prepared);

impl Confinement for SandboxGuard {
    fn facts(&mut self) -> Value {
        self.0.running_facts()
    }

    fn started(&mut self, pid: i32) {
        self.0.started(pid);
    }

    fn before_request(&mut self) {
        self.0.enter();
    }

    fn after_request(&mut self) -> Vec<String> {
        self.0.leave()
    }
}

impl Confine for SandboxConfine {
    fn command(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(String, String)],
    ) -> Result<Confined, String> {
        let sb = &self.0;
        let mut policy = sb.policy.clone();
        policy.env = env.iter().cloned().collect();
        let req = agentd_sandbox::CommandRequest {
            policy: &policy,
            on_unavailable: sb.on_unavailable,
            argv: argv.to_vec(),
            cwd,
            umask: 0o022,
            limits: sb.limits,
        };
        let mut prepared = sb.runtime.sandbox.prepare(&req).map_err(|u| u.message)?;
        Ok(Confined {
            command: prepared.take_command(),
            guard: Box::new(SandboxGuard(prepared)),
        })
    }
}

/// The confinement for a probe outside any session (`agentd/mcp_tools` without one):
/// the config's sandbox for `workspace`, read-only (a probe lists tools; nothing it
/// starts needs to write).
pub fn probe_confine(
    config: &agentd_sandbox::SandboxConfig,
    workspace: &Path,
) -> Option<Arc<dyn Confine>> {
    let rt = crate::tools::sandboxing::runtime()?;
    let read_only = agentd_sandbox::SandboxRequest {
        mode: Some(agentd_sandbox::Mode::ReadOnly),
        network: None,
    };
    let inputs =
        crate::tools::sandboxing::inputs(&rt, config, Default::default(), read_only, workspace);
    let policy = agentd_sandbox::effective(&inputs);
    Some(Arc::new(SandboxConfine(CommandSandbox {
        runtime: rt,
        inputs,
        policy,
        on_unavailable: config.on_unavailable,
        limits: agentd_sandbox::Limits::from_config(config),
    })))
}

/// `<home>/mcp/running`: one pid record per running server group.
pub fn run_dir(home: &std::path::Path) -> PathBuf {
    home.join("mcp").join("running")
}

struct Live {
    manager: Arc<Manager>,
    /// What the manager was built from, to notice a change.
    key: String,
}

pub struct McpSessions {
    config: BTreeMap<String, ServerConfig>,
    /// `mcp_sandbox`: the `sandbox` of a stdio entry that does not say.
    sandbox_default: bool,
    /// `mcp_idle_stop_s`; zero never stops idle servers.
    idle_stop: std::time::Duration,
    run_dir: PathBuf,
    client: DashMap<String, Vec<(String, ServerConfig)>>,
    live: DashMap<String, Live>,
    always: DashMap<String, HashSet<(String, String)>>,
}

/// Parses client entries in ACP's shape; an entry agentd cannot run is `invalid_args`
/// naming it.
pub fn parse_client(entries: &[Value]) -> Result<Vec<(String, ServerConfig)>, AgentError> {
    let mut out: Vec<(String, ServerConfig)> = Vec::new();
    for e in entries {
        let (name, cfg) = agentd_mcp::config::parse_client_entry(e).map_err(|m| {
            AgentError::invalid_args(m).with_details(json!({"field": "mcp_servers"}))
        })?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(AgentError::invalid_args(format!(
                "MCP server `{name}` is listed twice"
            )));
        }
        out.push((name, cfg));
    }
    Ok(out)
}

/// The environment servers may inherit: PATH/HOME/LANG and every variable some server
/// names, read from the daemon's own environment.
pub fn inherited_env(servers: &BTreeMap<String, ServerConfig>) -> Vec<(String, String)> {
    agentd_mcp::client::inheritable(servers.values(), |n| std::env::var(n).ok())
}

impl McpSessions {
    /// Reaps the server groups a previous daemon left running (their records under
    /// `home`), then returns the empty set of sessions. Blocks up to a few seconds per
    /// leftover group.
    pub fn new(
        config: BTreeMap<String, ServerConfig>,
        idle_stop: std::time::Duration,
        sandbox_default: bool,
        home: &std::path::Path,
    ) -> Self {
        let run_dir = run_dir(home);
        for r in agentd_mcp::reap::reap(&run_dir) {
            tracing::info!(server = %r.server, session = %r.session_id, pgid = r.pgid,
                "reaped an MCP server a previous daemon left running");
        }
        McpSessions {
            config,
            sandbox_default,
            idle_stop,
            run_dir,
            client: DashMap::new(),
            live: DashMap::new(),
            always: DashMap::new(),
        }
    }

    pub fn config(&self) -> &BTreeMap<String, ServerConfig> {
        &self.config
    }

    /// Sets the client-given servers of `sid` (replacing earlier ones).
    pub fn set_client(&self, sid: &str, entries: Vec<(String, ServerConfig)>) {
        self.client.insert(sid.to_string(), entries);
    }

    /// The merged servers of `sid` and notes on dropped client entries; each stdio
    /// entry's `sandbox` is settled (its own, else `mcp_sandbox`).
    pub fn merged(&self, sid: &str) -> (BTreeMap<String, ServerConfig>, Vec<String>) {
        let client = self.client.get(sid).map(|c| c.clone()).unwrap_or_default();
        let (mut servers, notes) = agentd_mcp::config::merge(&self.config, &client);
        self.settle_sandbox(&mut servers);
        (servers, notes)
    }

    /// Applies `mcp_sandbox` to the stdio entries that do not say.
    pub fn settle_sandbox(&self, servers: &mut BTreeMap<String, ServerConfig>) {
        for cfg in servers.values_mut() {
            if cfg.command.is_some() && cfg.sandbox.is_none() {
                cfg.sandbox = Some(self.sandbox_default);
            }
        }
    }

    /// The manager of `sid` for a turn in `workspace`: the running one, or a new one
    /// when there was none or the servers changed (the old one is stopped). `None` when
    /// the session has no MCP server. The `bool` says the manager is new.
    pub async fn for_turn(
        &self,
        sid: &str,
        workspace: &str,
        sandbox: Option<&CommandSandbox>,
    ) -> Option<(Arc<Manager>, bool, Vec<String>)> {
        let (servers, notes) = self.merged(sid);
        if servers.is_empty() {
            if let Some((_, old)) = self.live.remove(sid) {
                old.manager.stop().await;
            }
            return None;
        }
        // Sandboxed servers run under the policy they started with: a turn under
        // another policy gets servers started under its own.
        let confined = servers.values().any(ServerConfig::sandboxed);
        let policy = match (confined, sandbox) {
            (true, Some(sb)) => sb.policy.digest(),
            _ => String::new(),
        };
        let key = format!(
            "{workspace}\0{policy}\0{}",
            servers
                .iter()
                .map(|(n, c)| format!("{n}={c:?}"))
                .collect::<Vec<_>>()
                .join("\0")
        );
        if let Some(l) = self.live.get(sid) {
            if l.key == key {
                return Some((l.manager.clone(), false, notes));
            }
        }
        if let Some((_, old)) = self.live.remove(sid) {
            old.manager.stop().await;
        }
        let manager = Arc::new(Manager::new(ManagerOptions {
            start: StartContext {
                workspace: PathBuf::from(workspace),
                run_dir: self.run_dir.clone(),
                session_id: sid.to_string(),
                inherited_env: inherited_env(&servers),
                confine: sandbox.map(|sb| Arc::new(SandboxConfine(sb.clone())) as Arc<dyn Confine>),
            },
            servers,
        }));
        self.live.insert(
            sid.to_string(),
            Live {
                manager: manager.clone(),
                key,
            },
        );
        self.watch_idle(sid, &manager);
        Some((manager, true, notes))
    }

    /// Stops the manager's servers once they went unused for `mcp_idle_stop_s` (no call
    /// in flight); they start again at the next turn or call. Ends with the manager.
    fn watch_idle(&self, sid: &str, manager: &Arc<Manager>) {
        let idle = self.idle_stop;
        if idle.is_zero() {
            return;
        }
        let weak = Arc::downgrade(manager);
        let sid = sid.to_string();
        let tick = (idle / 2).max(std::time::Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(tick).await;
                let Some(m) = weak.upgrade() else { return };
                if m.idle_for().is_some_and(|d| d >= idle) && m.any_running().await {
                    tracing::info!(session = %sid, "stopping idle MCP servers");
                    m.stop().await;
                }
            }
        });
    }

    /// The running manager of `sid`, if any.
    pub fn manager(&self, sid: &str) -> Option<Arc<Manager>> {
        self.live.get(sid).map(|l| l.manager.clone())
    }

    /// Every session with a manager.
    pub fn sessions(&self) -> Vec<(String, Arc<Manager>)> {
        self.live
            .iter()
            .map(|e| (e.key().clone(), e.value().manager.clone()))
            .collect()
    }

    pub fn always_allowed(&self, sid: &str, server: &str, tool: &str) -> bool {
        self.always
            .get(sid)
            .is_some_and(|s| s.contains(&(server.to_string(), tool.to_string())))
    }

    pub fn allow_always(&self, sid: &str, server: &str, tool: &str) {
        self.always
            .entry(sid.to_string())
            .or_default()
            .insert((server.to_string(), tool.to_string()));
    }

    /// Stops every session's servers (daemon shutdown).
    pub async fn stop_all(&self) {
        let all: Vec<Arc<Manager>> = self.live.iter().map(|l| l.manager.clone()).collect();
        self.live.clear();
        let mut set = tokio::task::JoinSet::new();
        for m in all {
            set.spawn(async move { m.stop().await });
        }
        set.join_all().await;
    }
}

/// The manager's status and offered tools as `agentd/mcp_list` shows them.
pub async fn describe(manager: &Manager) -> Value {
    let status: Vec<Value> = manager.status().await.iter().map(|s| s.to_json()).collect();
    json!(status)
}
