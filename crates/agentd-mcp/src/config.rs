//! MCP server configuration: `[mcp_servers.NAME]` in config.toml (Codex's field names,
//! with its long spellings accepted as aliases) and the per-session `mcp_servers` list
//! in ACP's shape; how the two merge (config wins on a name clash) and what the Log may
//! say about a server (names of env variables and headers, never their values).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Default time a server gets to answer its handshake and first `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT_S: f64 = 10.0;
/// Default idle time of a call (reset by the server's progress notifications).
pub const DEFAULT_TOOL_TIMEOUT_S: f64 = 120.0;
/// Default hard cap of a call, progress or not.
pub const DEFAULT_TOOL_MAX_S: f64 = 600.0;

/// Where a server's entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `[mcp_servers.NAME]` in config.toml.
    #[default]
    Config,
    /// `mcp_servers` of `agentd/create` / `agentd/turn` or ACP `mcpServers`.
    Client,
}

/// One `[mcp_servers.NAME]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Literal environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of variables passed through from agentd's own environment.
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// Working directory; the session workspace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A server that fails to start fails the turn.
    #[serde(default)]
    pub required: bool,
    /// Allow-list of raw tool names (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// Deny-list of raw tool names, applied after `enabled_tools`.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    #[serde(default, alias = "startup_timeout_sec")]
    pub startup_timeout_s: Option<f64>,
    /// Idle timeout of one call; progress notifications reset it.
    #[serde(default, alias = "tool_timeout_sec")]
    pub tool_timeout_s: Option<f64>,
    /// Hard cap of one call.
    #[serde(default)]
    pub tool_max_s: Option<f64>,
    /// URL of a streamable HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Variable holding the bearer token sent to an HTTP server.
    #[serde(
        default,
        alias = "bearer_token_env_var",
        skip_serializing_if = "Option::is_none"
    )]
    pub bearer_token_env: Option<String>,
    /// Header name → variable holding its value.
    #[serde(default, alias = "env_http_headers")]
    pub headers_env: BTreeMap<String, String>,
    /// Trust the server's `readOnlyHint` annotations (`read_only` mode lets such tools run,
    /// `ask` mode runs them without asking).
    #[serde(default)]
    pub trust_annotations: bool,
    /// Raw tool names the user declares read-only (allowed in `read_only` mode).
    #[serde(default)]
    pub read_only_tools: Vec<String>,
    /// Run this stdio server under the session's command sandbox (`true`), or not
    /// (`false`). Absent: the daemon's `mcp_sandbox` default decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<bool>,
    /// Literal header values (ACP `http` entries); never written to config.
    #[serde(skip)]
    pub headers: BTreeMap<String, String>,
    #[serde(skip)]
    pub origin: Origin,
}

fn yes() -> bool {
    true
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_vars: Vec::new(),
            cwd: None,
            enabled: true,
            required: false,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            startup_timeout_s: None,
            tool_timeout_s: None,
            tool_max_s: None,
            url: None,
            bearer_token_env: None,
            headers_env: BTreeMap::new(),
            trust_annotations: false,
            read_only_tools: Vec::new(),
            sandbox: None,
            headers: BTreeMap::new(),
            origin: Origin::Config,
        }
    }
}

fn secs(v: Option<f64>, default: f64) -> std::time::Duration {
    let s = v.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(default);
    std::time::Duration::from_secs_f64(s.min(86_400.0))
}

impl ServerConfig {
    /// Checks the entry is one transport or the other; the message names the field.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        if name.is_empty() || name.len() > 64 {
            return Err("a server name has 1 to 64 characters".into());
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => Err(format!(
                "mcp_servers.{name}: `command` and `url` exclude each other"
            )),
            (None, None) => Err(format!(
                "mcp_servers.{name}: needs `command` (stdio) or `url` (streamable HTTP)"
            )),
            (Some(c), None) if c.trim().is_empty() => {
                Err(format!("mcp_servers.{name}: `command` is empty"))
            }
            (Some(_), None) if self.bearer_token_env.is_some() || !self.headers_env.is_empty() => {
                Err(format!(
                    "mcp_servers.{name}: `bearer_token_env` and `headers_env` are for `url` servers"
                ))
            }
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => Err(
                format!("mcp_servers.{name}: `url` must be http:// or https://"),
            ),
            (None, Some(_)) if self.sandbox == Some(true) => Err(format!(
                "mcp_servers.{name}: `sandbox` confines the process of a stdio server; a `url` \
                 server runs elsewhere"
            )),
            _ => Ok(()),
        }
    }

    pub fn transport(&self) -> &'static str {
        if self.url.is_some() {
            "http"
        } else {
            "stdio"
        }
    }

    pub fn startup_timeout(&self) -> std::time::Duration {
        secs(self.startup_timeout_s, DEFAULT_STARTUP_TIMEOUT_S)
    }

    pub fn tool_timeout(&self) -> std::time::Duration {
        secs(self.tool_timeout_s, DEFAULT_TOOL_TIMEOUT_S)
    }

    pub fn tool_max(&self) -> std::time::Duration {
        secs(self.tool_max_s, DEFAULT_TOOL_MAX_S).max(self.tool_timeout())
    }

    /// True when `tool` passes `enabled_tools` then `disabled_tools`.
    pub fn offers(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }

    /// What the Log records of this server: names of variables and headers, never values.
    pub fn describe(&self, name: &str) -> Value {
        let mut d = json!({
            "name": name,
            "transport": self.transport(),
            "origin": self.origin,
        });
        if let Some(c) = &self.command {
            d["command"] = json!(c);
            d["args"] = json!(self.args);
        }
        if let Some(u) = &self.url {
            d["url"] = json!(u);
        }
        let env: Vec<&String> = self.env.keys().chain(self.env_vars.iter()).collect();
        if !env.is_empty() {
            d["env"] = json!(env);
        }
        let headers: Vec<&String> = self.headers.keys().chain(self.headers_env.keys()).collect();
        if !headers.is_empty() || self.bearer_token_env.is_some() {
            let mut h: Vec<String> = headers.into_iter().cloned().collect();
            if self.bearer_token_env.is_some() {
                h.push("Authorization".into());
            }
            d["headers"] = json!(h);
        }
        if self.required {
            d["required"] = json!(true);
        }
        if self.sandboxed() {
            d["sandbox"] = json!(true);
        }
        d
    }

    /// Whether the server runs under the session's command sandbox.
    pub fn sandboxed(&self) -> bool {
        self.sandbox == Some(true) && self.command.is_some()
    }

    /// Names of agentd's variables this server reads: `env_vars`, `bearer_token_env` and
    /// the variables of `headers_env`.
    pub fn env_names(&self) -> Vec<&str> {
        self.env_vars
            .iter()
            .chain(self.bearer_token_env.iter())
            .chain(self.headers_env.values())
            .map(String::as_str)
            .collect()
    }

    /// Values to scrub from anything recorded: literal env values and header values.
    pub fn secret_values(&self) -> Vec<String> {
        self.env
            .values()
            .chain(self.headers.values())
            .filter(|v| !v.is_empty())
            .cloned()
            .collect()
    }
}

/// Parses `[mcp_servers]` (the table under that key) and validates every entry.
pub fn parse_table(v: &toml_like::Table) -> Result<BTreeMap<String, ServerConfig>, String> {
    let mut out = BTreeMap::new();
    for (name, entry) in v {
        let cfg: ServerConfig = serde_json::from_value(entry.clone())
            .map_err(|e| format!("mcp_servers.{name}: {e}"))?;
        cfg.validate(name)?;
        out.insert(name.clone(), cfg);
    }
    Ok(out)
}

/// The JSON form of a TOML table, as the daemon's config loader hands it over.
pub mod toml_like {
    pub type Table = serde_json::Map<String, serde_json::Value>;
}

/// Parses one per-session entry in ACP's shape: stdio `{name, command, args, env:
/// [{name, value}]}` (no `type`, or `type: "stdio"`) or `{type: "http", name, url,
/// headers: [{name, value}]}`. `sse` and other types are refused with the entry named.
pub fn parse_client_entry(v: &Value) -> Result<(String, ServerConfig), String> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("an MCP server entry needs a non-empty `name`")?
        .to_string();
    let pairs = |key: &str| -> Result<BTreeMap<String, String>, String> {
        let mut m = BTreeMap::new();
        match v.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for it in items {
                    let (Some(k), Some(val)) = (
                        it.get("name").and_then(Value::as_str),
                        it.get("value").and_then(Value::as_str),
                    ) else {
                        return Err(format!(
                            "MCP server `{name}`: `{key}` items are {{name, value}} strings"
                        ));
                    };
                    m.insert(k.to_string(), val.to_string());
                }
            }
            Some(Value::Object(o)) => {
                for (k, val) in o {
                    let Some(val) = val.as_str() else {
                        return Err(format!("MCP server `{name}`: `{key}.{k}` is not a string"));
                    };
                    m.insert(k.clone(), val.to_string());
                }
            }
            Some(_) => return Err(format!("MCP server `{name}`: `{key}` is not a list")),
        }
        Ok(m)
    };
    let kind = v.get("type").and_then(Value::as_str).unwrap_or("stdio");
    let mut cfg = ServerConfig {
        origin: Origin::Client,
        ..ServerConfig::default()
    };
    match kind {
        "stdio" => {
            cfg.command = Some(
                v.get("command")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("MCP server `{name}`: stdio needs `command`"))?
                    .to_string(),
            );
            cfg.args = match v.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(a) => serde_json::from_value(a.clone())
                    .map_err(|_| format!("MCP server `{name}`: `args` is a list of strings"))?,
            };
            cfg.env = pairs("env")?;
            // agentd's own field: a client may ask for the sandbox, never out of it (the
            // daemon's `mcp_sandbox` default still applies to an entry without it).
            if v.get("sandbox") == Some(&Value::Bool(true)) {
                cfg.sandbox = Some(true);
            }
        }
        "http" => {
            cfg.url = Some(
                v.get("url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("MCP server `{name}`: http needs `url`"))?
                    .to_string(),
            );
            cfg.headers = pairs("headers")?;
        }
        other => {
            return Err(format!(
                "MCP server `{name}`: transport `{other}` is not supported (stdio and http are)"
            ))
        }
    }
    cfg.validate(&name)?;
    Ok((name, cfg))
}

/// Config entries plus client entries; a client entry whose name config already has is
/// dropped (config wins) and named in the returned notes. Disabled entries are left out.
pub fn merge(
    config: &BTreeMap<String, ServerConfig>,
    client: &[(String, ServerConfig)],
) -> (BTreeMap<String, ServerConfig>, Vec<String>) {
    let mut out: BTreeMap<String, ServerConfig> = config
        .iter()
        .filter(|(_, c)| c.enabled)
        .map(|(n, c)| (n.clone(), c.clone()))
        .collect();
    let mut notes = Vec::new();
    for (name, cfg) in client {
        if config.contains_key(name) {
            notes.push(format!(
                "MCP server `{name}` from the client is ignored: config.toml has a server of that name"
            ));
            continue;
        }
        out.insert(name.clone(), cfg.clone());
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_entries_parse_and_validate() {
        let t: toml_like::Table = serde_json::from_value(json!({
            "git": {"command": "mcp-server-git", "args": ["--repository", "."],
                     "env_vars": ["GIT_AUTHOR_NAME"], "tool_timeout_sec": 5,
                     "disabled_tools": ["git_commit"]},
            "remote": {"url": "https://example.invalid/mcp", "bearer_token_env_var": "TOKEN"},
        }))
        .unwrap();
        let m = parse_table(&t).unwrap();
        assert_eq!(m["git"].tool_timeout(), std::time::Duration::from_secs(5));
        assert!(!m["git"].offers("git_commit") && m["git"].offers("git_status"));
        assert_eq!(m["remote"].transport(), "http");
        let bad: toml_like::Table =
            serde_json::from_value(json!({"x": {"command": "a", "url": "http://h"}})).unwrap();
        assert!(parse_table(&bad).unwrap_err().contains("exclude"));
        let unknown: toml_like::Table =
            serde_json::from_value(json!({"x": {"command": "a", "comand": "b"}})).unwrap();
        assert!(parse_table(&unknown).is_err());
    }

    #[test]
    fn client_entries_in_acp_shape_and_config_wins() {
        let (n, c) = parse_client_entry(&json!({"name": "ev", "command": "/bin/ev", "args": [],
            "env": [{"name": "TOKEN", "value": "s3cr3t-value"}]}))
        .unwrap();
        assert_eq!(n, "ev");
        assert_eq!(c.origin, Origin::Client);
        assert_eq!(c.secret_values(), vec!["s3cr3t-value".to_string()]);
        let d = c.describe(&n);
        assert_eq!(d["env"], json!(["TOKEN"]));
        assert!(!d.to_string().contains("s3cr3t"));
        let err = parse_client_entry(&json!({"type": "sse", "name": "old", "url": "http://h",
            "headers": []}))
        .unwrap_err();
        assert!(err.contains("old") && err.contains("sse"));
        let mut config = BTreeMap::new();
        config.insert(
            "ev".to_string(),
            ServerConfig {
                command: Some("from-config".into()),
                ..ServerConfig::default()
            },
        );
        let (m, notes) = merge(&config, &[(n, c)]);
        assert_eq!(m["ev"].command.as_deref(), Some("from-config"));
        assert_eq!(notes.len(), 1);
    }
}
