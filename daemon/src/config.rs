//! Daemon configuration (`config.toml`, docs/getting-started.md#paths, docs/log-format.md#durability).
//!
//! Everything has a default so that a missing file means "run with defaults"; a file
//! that exists but does not parse is a startup error (silently ignoring a typo in
//! `durability` would weaken what the user asked for).

use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Acknowledge after `fdatasync` (default).
    #[default]
    Sync,
    /// Acknowledge after a group commit within at most `batch_ms`.
    Batch,
    /// Never sync. Tests and benchmarks only; `agentd/status` says so.
    None,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Batch => "batch",
            Durability::None => "none",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Fraction of the model's context window above which a turn compacts first.
    pub threshold: f64,
    /// Raw events kept after a compaction.
    pub tail_events: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            threshold: 0.85,
            tail_events: 40,
        }
    }
}

pub use agentd_snapshot::SnapshotConfig;

/// `[turns]`: how the daemon runs turns.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TurnsConfig {
    /// A turn the daemon was running when it was killed is finished after the restart
    /// (docs/durability.md); off: it is closed `interrupted` with `daemon_restart`.
    pub resume_after_crash: bool,
    /// Resumes in a row without progress (no provider answer, no tool result) after
    /// which the turn ends with kind `resume_limit`.
    pub resume_limit: u32,
}

impl Default for TurnsConfig {
    fn default() -> Self {
        TurnsConfig {
            resume_after_crash: true,
            resume_limit: 3,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Config {
    pub durability: Durability,
    pub batch_ms: u64,
    /// Batches of several sessions' Logs on one local filesystem (ext4, XFS, Btrfs;
    /// Linux 5.8+) are made durable by one `syncfs` instead of an `fdatasync` each
    /// (default on). Off: every Log syncs alone, so a session's append never waits on
    /// other files of that filesystem being written back.
    pub group_sync: bool,
    pub max_message_bytes: usize,
    /// Seconds a loaded session with no activity stays in memory.
    pub idle_evict_s: u64,
    /// Seconds an `ask`-mode permission request waits for a client before denying.
    pub permission_timeout_s: u64,
    /// Seconds of idleness (no clients, no running turns, nothing loaded) after which a
    /// socket-activated daemon exits; 0 (the default) never exits. Ignored when agentd
    /// bound its own socket: nothing would start it again.
    pub idle_exit_s: u64,
    pub compaction: CompactionConfig,
    /// `[turns]`: crash resumption.
    pub turns: TurnsConfig,
    pub snapshots: SnapshotConfig,
    /// Where Logs live: absent for the home's files, or a `postgres://` URL
    /// (`AGENTD_STORE` overrides). Never logged as written: see `pgstore::redact`.
    pub store: Option<String>,
    /// A file whose first line is the database password (when neither the URL nor
    /// `PGPASSWORD` has one).
    pub store_password_file: Option<std::path::PathBuf>,
    /// Seconds a session's lease in a shared store lasts without renewal.
    pub lease_s: f64,
    /// `[sandbox]`: how the model's commands are confined (docs/sandbox.md#contract).
    pub sandbox: agentd_sandbox::SandboxConfig,
    /// Seconds a session's MCP servers may go unused before they are stopped (they
    /// start again at the next call); 0 keeps them until the daemon stops.
    pub mcp_idle_stop_s: u64,
    /// Whether a stdio MCP server whose entry does not say `sandbox` runs under the
    /// session's command sandbox (docs/sandbox.md#contract). Off by default: most servers need more
    /// than a command gets (the network, caches in the home).
    pub mcp_sandbox: bool,
    /// `[mcp_servers.NAME]`: MCP servers every session's turns may use (docs/mcp.md#contract).
    pub mcp_servers: std::collections::BTreeMap<String, agentd_mcp::ServerConfig>,
    /// `[providers.NAME]` tables and `default_provider`, read by `provider::config`.
    #[serde(flatten)]
    pub rest: toml::Table,
    /// The file this was read from (whether or not it exists), for errors that tell the
    /// user which file to edit.
    #[serde(skip)]
    pub path: Option<std::path::PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            durability: Durability::Sync,
            batch_ms: 5,
            group_sync: true,
            max_message_bytes: 16 * 1024 * 1024,
            idle_evict_s: 600,
            permission_timeout_s: 60,
            idle_exit_s: 0,
            compaction: CompactionConfig::default(),
            turns: TurnsConfig::default(),
            snapshots: SnapshotConfig::default(),
            store: None,
            store_password_file: None,
            lease_s: 30.0,
            sandbox: agentd_sandbox::SandboxConfig::default(),
            mcp_idle_stop_s: 600,
            mcp_sandbox: false,
            mcp_servers: Default::default(),
            rest: toml::Table::new(),
            path: None,
        }
    }
}

impl Config {
    /// Reads `path`; a missing file gives the defaults. `AGENTD_DURABILITY` overrides
    /// the file so that tests and benchmarks can pick a mode without writing one.
    pub fn load(path: &Path) -> Result<Config, String> {
        let mut cfg = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str::<Config>(&text)
                .map_err(|e| format!("config {}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(format!("config {}: {e}", path.display())),
        };
        if let Ok(d) = std::env::var("AGENTD_DURABILITY") {
            cfg.durability = match d.as_str() {
                "sync" => Durability::Sync,
                "batch" => Durability::Batch,
                "none" => Durability::None,
                other => return Err(format!("AGENTD_DURABILITY: unknown mode {other:?}")),
            };
        }
        if let Ok(s) = std::env::var("AGENTD_STORE") {
            cfg.store = Some(s).filter(|s| !s.is_empty());
        }
        if let Some(s) = &cfg.store {
            if !crate::pgstore::is_postgres_url(s) {
                return Err(format!(
                    "store: expected a postgres:// URL, got {}",
                    crate::pgstore::redact(s)
                ));
            }
        }
        if !(cfg.lease_s.is_finite() && cfg.lease_s >= 1.0) {
            return Err(format!(
                "lease_s: must be at least 1 second, got {}",
                cfg.lease_s
            ));
        }
        for (name, server) in &cfg.mcp_servers {
            server
                .validate(name)
                .map_err(|e| format!("config {}: {e}", path.display()))?;
        }
        cfg.path = Some(path.to_path_buf());
        Ok(cfg)
    }

    pub fn batch_window(&self) -> Duration {
        Duration::from_millis(self.batch_ms.clamp(1, 1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durability_and_keeps_provider_tables() {
        let cfg: Config = toml::from_str(
            "durability = \"batch\"\nbatch_ms = 3\n[providers.local]\nkind = \"openai-chat\"\n",
        )
        .unwrap();
        assert_eq!(cfg.durability, Durability::Batch);
        assert!(cfg.rest.contains_key("providers"));
        assert!(toml::from_str::<Config>("durability = \"fast\"").is_err());
    }

    #[test]
    fn mcp_servers_parse_in_codex_shape() {
        let cfg: Config = toml::from_str(
            "[mcp_servers.git]\ncommand = \"mcp-server-git\"\nargs = [\"--repository\", \".\"]\n\
             startup_timeout_sec = 20\n[mcp_servers.git.env]\nX = \"1\"\n",
        )
        .unwrap();
        let git = &cfg.mcp_servers["git"];
        assert_eq!(git.args, ["--repository", "."]);
        assert_eq!(git.startup_timeout_s, Some(20.0));
        assert_eq!(git.env["X"], "1");
        assert!(!cfg.rest.contains_key("mcp_servers"));
        assert!(toml::from_str::<Config>("[mcp_servers.x]\ncomand = \"a\"").is_err());
    }

    #[test]
    fn group_sync_is_on_unless_turned_off() {
        assert!(toml::from_str::<Config>("").unwrap().group_sync);
        assert!(
            !toml::from_str::<Config>("group_sync = false")
                .unwrap()
                .group_sync
        );
        assert!(toml::from_str::<Config>("group_sync = \"no\"").is_err());
    }
}
