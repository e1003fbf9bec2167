//! Daemon configuration (`config.toml`, docs/getting-started.md#paths, docs/log-format.md#durability).
//!
//! Everything has a default so that a missing file means "run with defaults"; a file
//! that exists is validated whole at start-up, and any mistake is a start-up error
//! naming the key and its line (silently ignoring a typo in `durability` would weaken
//! what the user asked for; one in a provider table would surface only at the first
//! turn). `agentd config check` runs the same validation for `agentctl doctor`.
//!
//! The known-key schema is the set of structs below: every table is a struct with
//! `deny_unknown_fields`, so adding a key is adding a field (with its default in the
//! struct's `Default`); nothing else has to learn about it. Dynamic tables
//! (`[providers.NAME]`, `[mcp_servers.NAME]`, `[prices.MODEL]`) are maps of such structs.
//! [`explain`] turns serde's errors into messages with the key, its line, its table and
//! the nearest known key.

use agentd_proto::rpc::PermissionMode;
use serde::Deserialize;
use std::collections::BTreeMap;
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

/// `[turns]`: how the daemon runs turns, and what a turn runs with when its request
/// does not say.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TurnsConfig {
    /// `auto` (default), `ask` or `read_only`.
    pub permission_mode: PermissionMode,
    /// Provider calls a turn may make (1..=1000; default 16).
    pub max_iterations: u32,
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
            permission_mode: PermissionMode::Auto,
            max_iterations: 16,
            resume_after_crash: true,
            resume_limit: 3,
        }
    }
}

/// `[subagents]`: the `task` tool's child sessions (docs/subagents.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubagentsConfig {
    /// `task` calls of one model step that run at the same time (1..=64; default 4);
    /// the others wait for a free slot.
    pub max_parallel: usize,
    /// How deep subagents may nest: 1 (the default) lets a session's model call `task`
    /// and its children not; 0 offers no `task` tool at all (at most 8).
    pub max_depth: u32,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        SubagentsConfig {
            max_parallel: 4,
            max_depth: 1,
        }
    }
}

/// Upper bound of `[subagents] max_depth`.
pub const MAX_SUBAGENT_DEPTH: u32 = 8;

/// Upper bound of `max_iterations`, in the config and in a request.
pub const MAX_MAX_ITERATIONS: u32 = 1000;

/// `[prices.MODEL]`: per million tokens, in any one currency (`agentd/usage`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
    pub output: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    pub snapshots: SnapshotConfig,
    /// `[turns]`: defaults of turns whose request gives none, crash resumption.
    pub turns: TurnsConfig,
    /// `[subagents]`: parallelism and depth of the `task` tool's child sessions.
    pub subagents: SubagentsConfig,
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
    pub mcp_servers: BTreeMap<String, agentd_mcp::ServerConfig>,
    /// The provider a turn uses when neither it nor its session names one.
    pub default_provider: Option<String>,
    /// `[providers.NAME]`: configured providers (over the built-in ones).
    pub providers: BTreeMap<String, crate::provider::ProviderConfig>,
    /// `[prices.MODEL]`: prices for `agentd/usage`.
    pub prices: BTreeMap<String, Price>,
    /// `[[hooks.EVENT]]`: commands run on a turn's lifecycle events (docs/hooks.md).
    pub hooks: crate::hooks::HooksConfig,
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
            snapshots: SnapshotConfig::default(),
            turns: TurnsConfig::default(),
            subagents: SubagentsConfig::default(),
            store: None,
            store_password_file: None,
            lease_s: 30.0,
            sandbox: agentd_sandbox::SandboxConfig::default(),
            mcp_idle_stop_s: 600,
            mcp_sandbox: false,
            mcp_servers: Default::default(),
            default_provider: None,
            providers: Default::default(),
            prices: Default::default(),
            hooks: Default::default(),
            path: None,
        }
    }
}

impl Config {
    /// Reads `path`; a missing file gives the defaults. `AGENTD_DURABILITY` overrides
    /// the file so that tests and benchmarks can pick a mode without writing one.
    pub fn load(path: &Path) -> Result<Config, String> {
        let mut cfg = match std::fs::read_to_string(path) {
            Ok(text) => {
                Config::parse(&text).map_err(|e| format!("config {}: {e}", path.display()))?
            }
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
        cfg.path = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// Parses and validates a whole file's text: every key known, every value of its
    /// type, and the checks serde cannot express. Errors name the key and its line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| explain(text, &e))?;
        let at = |key: &str| match line_of_key(text, key) {
            Some(l) => format!("line {l}: "),
            None => String::new(),
        };
        if !(cfg.lease_s.is_finite() && cfg.lease_s >= 1.0) {
            return Err(format!(
                "{}`lease_s` must be at least 1 second, got {}",
                at("lease_s"),
                cfg.lease_s
            ));
        }
        if !(1..=MAX_MAX_ITERATIONS).contains(&cfg.turns.max_iterations) {
            return Err(format!(
                "{}[turns] `max_iterations` must be 1..={MAX_MAX_ITERATIONS}, got {}",
                at("max_iterations"),
                cfg.turns.max_iterations
            ));
        }
        if !(1..=64).contains(&cfg.subagents.max_parallel) {
            return Err(format!(
                "{}[subagents] `max_parallel` must be 1..=64, got {}",
                at("max_parallel"),
                cfg.subagents.max_parallel
            ));
        }
        if cfg.subagents.max_depth > MAX_SUBAGENT_DEPTH {
            return Err(format!(
                "{}[subagents] `max_depth` must be 0..={MAX_SUBAGENT_DEPTH}, got {}",
                at("max_depth"),
                cfg.subagents.max_depth
            ));
        }
        for (name, server) in &cfg.mcp_servers {
            server
                .validate(name)
                .map_err(|e| format!("{}{e}", at(&format!("[mcp_servers.{name}]"))))?;
        }
        for (name, p) in &cfg.providers {
            if let Some(e) = &p.reasoning_effort {
                if let Err(err) = agentd_proto::rpc::validate_reasoning_effort(e) {
                    return Err(format!(
                        "{}[providers.{name}] {}",
                        at("reasoning_effort"),
                        err.message
                    ));
                }
            }
        }
        for c in &cfg.sandbox.caches {
            if agentd_sandbox::CachePreset::parse(c).is_none() {
                let known: Vec<&str> = agentd_sandbox::CachePreset::ALL
                    .iter()
                    .map(|c| c.name())
                    .collect();
                return Err(format!(
                    "{}[sandbox] unknown cache `{}`{}",
                    at(&format!("\"{c}\"")),
                    crate::text::clip_chars(c, 64),
                    hint_or_list(c, &known),
                ));
            }
        }
        cfg.hooks
            .validate()
            .map_err(|e| format!("{}{e}", at("[[hooks.")))?;
        for s in &cfg.sandbox.sockets {
            if !s.is_absolute() {
                return Err(format!(
                    "{}[sandbox] `sockets` needs absolute paths, got `{}`",
                    at("sockets"),
                    crate::text::clip_chars(&s.display().to_string(), 64),
                ));
            }
        }
        if let Some(p) = &cfg.default_provider {
            let providers = cfg.providers_config();
            if providers.get(p).is_none() {
                let known: Vec<String> = providers.all().into_keys().collect();
                let known: Vec<&str> = known.iter().map(String::as_str).collect();
                return Err(format!(
                    "{}`default_provider` names an unknown provider `{}`{}",
                    at("default_provider"),
                    crate::text::clip_chars(p, 64),
                    hint_or_list(p, &known),
                ));
            }
        }
        Ok(cfg)
    }

    pub fn batch_window(&self) -> Duration {
        Duration::from_millis(self.batch_ms.clamp(1, 1000))
    }

    /// The providers a turn can use: the configured tables over the built-ins.
    pub fn providers_config(&self) -> crate::provider::ProvidersConfig {
        let mut p = crate::provider::ProvidersConfig {
            default_provider: self.default_provider.clone(),
            providers: self.providers.clone(),
        };
        p.fill_names();
        p
    }
}

/// A message for a TOML or schema error: its line, the table it is in, and for an
/// unknown key or value the nearest known one. Only toml's message is used, never its
/// Display, which quotes the source line (it could be a misplaced API key); quoted
/// strings in the message are left out for the same reason.
pub fn explain(text: &str, e: &toml::de::Error) -> String {
    let line = e.span().map(|s| {
        text.as_bytes()[..s.start.min(text.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    });
    let table = line.and_then(|l| table_at(text, l));
    let within = table.map(|t| format!(" in [{t}]")).unwrap_or_default();
    let at = line.map(|l| format!("line {l}: ")).unwrap_or_default();
    let msg = e.message();
    if let Some((what, found, known)) = unknown_name(msg) {
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        let hint = if known.is_empty() {
            String::new()
        } else {
            hint_or_list(&found, &known)
        };
        return match what {
            "field" => format!("{at}unknown key `{found}`{within}{hint}"),
            _ => {
                let key = line.and_then(|l| key_on_line(text, l));
                let key = key.map(|k| format!(" for `{k}`")).unwrap_or_default();
                format!("{at}unknown value `{found}`{key}{within}{hint}")
            }
        };
    }
    if let Some(field) = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return format!("{at}missing key `{field}`{within}");
    }
    let key = line.and_then(|l| key_on_line(text, l));
    let key = key.map(|k| format!("`{k}`{within}: ")).unwrap_or_default();
    format!("{at}{key}{}", hide_strings(msg))
}

/// `unknown field `x`, expected one of `a`, `b`` (or `expected `a` or `b``, or
/// `expected `a``, or `there are no fields`), and the same for `variant`.
fn unknown_name(msg: &str) -> Option<(&'static str, String, Vec<String>)> {
    let (what, rest) = if let Some(r) = msg.strip_prefix("unknown field `") {
        ("field", r)
    } else if let Some(r) = msg.strip_prefix("unknown variant `") {
        ("variant", r)
    } else {
        return None;
    };
    let (found, tail) = rest.split_once('`')?;
    let known = tail
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    Some((what, crate::text::clip_chars(found, 64), known))
}

/// Replaces each quoted string in a message by `"…"`.
fn hide_strings(msg: &str) -> String {
    msg.split('"')
        .enumerate()
        .map(|(i, p)| if i % 2 == 1 { "\"…\"" } else { p })
        .collect()
}

/// The header of the table that line `line` (1-based) belongs to, if any.
fn table_at(text: &str, line: usize) -> Option<String> {
    text.lines()
        .take(line)
        .collect::<Vec<_>>()
        .iter()
        .rev()
        .find_map(|l| {
            let t = l.trim();
            let inner = t.strip_prefix("[[").and_then(|t| t.split("]]").next());
            let inner = inner.or_else(|| t.strip_prefix('[').and_then(|t| t.split(']').next()));
            inner.map(|i| i.trim().to_string())
        })
}

/// The key assigned on line `line` (1-based): the text before its `=`.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let (k, _) = l.split_once('=')?;
    let k = k.trim();
    (!k.is_empty() && !k.starts_with('[') && !k.starts_with('#'))
        .then(|| crate::text::clip_chars(k, 64))
}

/// The first line (1-based) that assigns `key` or is its header, or that holds the
/// quoted value `key` (starting with `"`) or a `[table]` header (starting with `[`).
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            if key.starts_with('"') {
                t.contains(key)
            } else if key.starts_with('[') {
                t.starts_with(key)
            } else {
                t.strip_prefix(key)
                    .is_some_and(|r| r.trim_start().starts_with('='))
            }
        })
        .map(|i| i + 1)
}

/// The nearest known name as a hint, or, when none is near, the list of known names.
fn hint_or_list(found: &str, known: &[&str]) -> String {
    match did_you_mean(found, known) {
        h if h.is_empty() => format!(" (known: {})", known.join(", ")),
        h => h,
    }
}

/// `; did you mean `x`?` for the known name nearest to `found`, when it is near.
pub fn did_you_mean(found: &str, known: &[&str]) -> String {
    // Near: a few edits away, or one is the start of the other (`api_key` for
    // `api_key_env`).
    let near = |k: &str| {
        let d = edit_distance(found, k);
        let prefix =
            found.len().min(k.len()) >= 3 && (k.starts_with(found) || found.starts_with(k));
        (d <= (found.chars().count() / 3).max(2) || prefix).then_some(d)
    };
    let best = known
        .iter()
        .filter_map(|k| Some((near(k)?, *k)))
        .min_by_key(|(d, k)| (*d, k.len()));
    match best {
        Some((_, k)) => format!("; did you mean `{k}`?"),
        None => String::new(),
    }
}

/// Damerau-Levenshtein distance (optimal string alignment), by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Config::parse(text).expect_err("an error")
    }

    #[test]
    fn parses_durability_providers_and_turns() {
        let cfg = Config::parse(
            "durability = \"batch\"\nbatch_ms = 3\ndefault_provider = \"local\"\n\
             [turns]\npermission_mode = \"ask\"\nmax_iterations = 4\n\
             [providers.local]\nkind = \"openai-chat\"\n",
        )
        .unwrap();
        assert_eq!(cfg.durability, Durability::Batch);
        assert_eq!(cfg.turns.permission_mode, PermissionMode::Ask);
        assert_eq!(cfg.turns.max_iterations, 4);
        let p = cfg.providers_config();
        assert_eq!(p.get("local").unwrap().name, "local");
        assert_eq!(p.default_provider.as_deref(), Some("local"));
        let d = Config::parse("").unwrap();
        assert_eq!(d.turns.permission_mode, PermissionMode::Auto);
        assert_eq!(d.turns.max_iterations, 16);
    }

    #[test]
    fn a_typo_at_the_top_level_names_key_line_and_the_nearest_key() {
        let e = err("durability = \"sync\"\n\ndefualt_provider = \"openai\"\n");
        assert!(
            e.starts_with(
                "line 3: unknown key `defualt_provider`; did you mean `default_provider`?"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_typo_in_a_table_names_the_table() {
        let e = err("[compaction]\nthreshold = 0.5\ntail_event = 3\n");
        assert!(
            e.starts_with(
                "line 3: unknown key `tail_event` in [compaction]; did you mean `tail_events`?"
            ),
            "{e}"
        );
        let e = err("[turns]\npermision_mode = \"ask\"\n");
        assert!(
            e.starts_with(
                "line 2: unknown key `permision_mode` in [turns]; did you mean `permission_mode`?"
            ),
            "{e}"
        );
        let e = err("[sandbox]\nmode = \"read_only\"\nnetwork = \"none\"\nwritable_root = []\n");
        assert!(
            e.starts_with(
                "line 4: unknown key `writable_root` in [sandbox]; did you mean `writable_roots`?"
            ),
            "{e}"
        );
        let e = err("[mcp_servers.git]\ncomand = \"mcp-server-git\"\n");
        assert!(
            e.starts_with(
                "line 2: unknown key `comand` in [mcp_servers.git]; did you mean `command`?"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_typo_in_a_provider_table_is_caught_at_start() {
        let e = err("[providers.local]\nkind = \"openai-chat\"\nbase_ur = \"http://x\"\n");
        assert!(
            e.starts_with(
                "line 3: unknown key `base_ur` in [providers.local]; did you mean `base_url`?"
            ),
            "{e}"
        );
        // A misplaced key is named, its value never shown.
        let e = err("[providers.x]\nkind = \"anthropic\"\napi_key = \"sk-secret\"\n");
        assert!(
            e.starts_with(
                "line 3: unknown key `api_key` in [providers.x]; did you mean `api_key_env`?"
            ),
            "{e}"
        );
        assert!(!e.contains("sk-secret"), "{e}");
        let e = err("\n[providers.local]\nmodel = \"m\"\n");
        assert_eq!(e, "line 2: missing key `kind` in [providers.local]");
        let e = err("[providers.local]\nkind = \"openai-chta\"\n");
        assert!(
            e.starts_with("line 2: unknown value `openai-chta` for `kind` in [providers.local]; did you mean `openai-chat`?"),
            "{e}"
        );
        let e = err("default_provider = \"anthropc\"\n");
        assert!(
            e.starts_with("line 1: `default_provider` names an unknown provider `anthropc`; did you mean `anthropic`?"),
            "{e}"
        );
    }

    #[test]
    fn a_wrong_type_names_key_and_line_without_quoting_the_value() {
        let e = err("durability = \"sync\"\ngroup_sync = \"sk-secret\"\n");
        assert_eq!(
            e,
            "line 2: `group_sync`: invalid type: string \"…\", expected a boolean"
        );
        let e = err("[turns]\nmax_iterations = \"many\"\n");
        assert!(
            e.starts_with("line 2: `max_iterations` in [turns]: invalid type"),
            "{e}"
        );
        let e = err("[turns]\nmax_iterations = 0\n");
        assert!(
            e.starts_with("line 2: [turns] `max_iterations` must be 1..=1000"),
            "{e}"
        );
        let e = err("durability = \"fast\"\n");
        assert!(
            e.starts_with("line 1: unknown value `fast` for `durability`"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_sandbox_cache_is_an_error() {
        let e = err("[sandbox]\ncaches = [\"cache:cargo\", \"cache:crago\"]\n");
        assert!(
            e.starts_with(
                "line 2: [sandbox] unknown cache `cache:crago`; did you mean `cache:cargo`?"
            ),
            "{e}"
        );
        assert!(Config::parse("[sandbox]\ncaches = [\"cache:go\"]\n").is_ok());
    }

    #[test]
    fn mcp_servers_parse_in_codex_shape() {
        let cfg = Config::parse(
            "[mcp_servers.git]\ncommand = \"mcp-server-git\"\nargs = [\"--repository\", \".\"]\n\
             startup_timeout_sec = 20\n[mcp_servers.git.env]\nX = \"1\"\n",
        )
        .unwrap();
        let git = &cfg.mcp_servers["git"];
        assert_eq!(git.args, ["--repository", "."]);
        assert_eq!(git.startup_timeout_s, Some(20.0));
        assert_eq!(git.env["X"], "1");
    }

    #[test]
    fn group_sync_is_on_unless_turned_off() {
        assert!(Config::parse("").unwrap().group_sync);
        assert!(!Config::parse("group_sync = false").unwrap().group_sync);
        assert!(Config::parse("group_sync = \"no\"").is_err());
    }

    #[test]
    fn nearest_key_needs_to_be_near() {
        assert_eq!(did_you_mean("zzzzzz", &["durability", "batch_ms"]), "");
        assert_eq!(
            did_you_mean("batchms", &["durability", "batch_ms"]),
            "; did you mean `batch_ms`?"
        );
    }
}
