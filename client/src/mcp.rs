//! `agentctl mcp import` (MCP server entries from another agent's file into agentd's
//! config.toml, shown first, written only with --yes) and the MCP part of `doctor`
//! (each configured server started once, its tools counted, then stopped). agentd itself
//! never reads a project's `.mcp.json`: running the commands a checked-out repository
//! names is code execution, so copying entries is the user's explicit act.

use crate::cli::McpImportArgs;
use crate::output::Outcome;
use agentd_proto::AgentError;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One imported entry, in agentd's `[mcp_servers.NAME]` shape, plus notes on what could
/// not be carried over.
fn convert(name: &str, e: &Value, notes: &mut Vec<String>) -> Option<Value> {
    let mut out = Map::new();
    let kind = e["type"].as_str().unwrap_or("stdio");
    match (kind, e.get("command"), e.get("url")) {
        (_, Some(Value::String(cmd)), _) => {
            out.insert("command".into(), json!(cmd));
            if let Some(a) = e.get("args").filter(|a| a.is_array()) {
                out.insert("args".into(), a.clone());
            }
            // Codex's entries are already in agentd's shape.
            for k in [
                "env_vars",
                "cwd",
                "enabled",
                "enabled_tools",
                "disabled_tools",
            ] {
                if let Some(v) = e.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            let mut env = Map::new();
            let mut env_vars: Vec<Value> = Vec::new();
            for (k, v) in e
                .get("env")
                .or_else(|| e.get("environment"))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let v = v.as_str().unwrap_or_default();
                // `${VAR}` means "take it from my environment": a pass-through.
                if v.starts_with("${") && v.ends_with('}') && v[2..v.len() - 1] == *k {
                    env_vars.push(json!(k));
                } else {
                    env.insert(k.clone(), json!(v));
                }
            }
            if !env.is_empty() {
                out.insert("env".into(), Value::Object(env));
            }
            if !env_vars.is_empty() {
                out.insert("env_vars".into(), Value::Array(env_vars));
            }
        }
        (_, _, Some(Value::String(url))) if kind != "sse" => {
            out.insert("url".into(), json!(url));
            if let Some(b) = e
                .get("bearer_token_env_var")
                .or_else(|| e.get("bearer_token_env"))
            {
                out.insert("bearer_token_env".into(), b.clone());
            }
            if e.get("headers")
                .is_some_and(|h| h.as_object().is_some_and(|m| !m.is_empty()))
            {
                notes.push(format!(
                    "{name}: literal `headers` are not imported; put each value in a variable and name it under `headers_env`"
                ));
            }
        }
        _ => {
            notes.push(format!(
                "{name}: skipped (transport `{kind}` is not supported; stdio and streamable HTTP are)"
            ));
            return None;
        }
    }
    Some(Value::Object(out))
}

/// The entries of `text`: a JSON file with `mcpServers` (Claude Code, Cursor) or
/// `servers` (VS Code), or a TOML file with `[mcp_servers]` (Codex).
pub fn entries(text: &str) -> Result<(BTreeMap<String, Value>, Vec<String>), String> {
    let table: Map<String, Value> = if let Ok(v) = serde_json::from_str::<Value>(text) {
        v.get("mcpServers")
            .or_else(|| v.get("servers"))
            .or_else(|| v.get("mcp_servers"))
            .and_then(Value::as_object)
            .cloned()
            .ok_or("no `mcpServers` object in this JSON file")?
    } else {
        let t: toml::Table =
            toml::from_str(text).map_err(|e| format!("neither JSON nor TOML: {e}"))?;
        let v = serde_json::to_value(t).map_err(|e| e.to_string())?;
        v.get("mcp_servers")
            .and_then(Value::as_object)
            .cloned()
            .ok_or("no [mcp_servers] table in this TOML file")?
    };
    let mut notes = Vec::new();
    let mut out = BTreeMap::new();
    for (name, e) in &table {
        if let Some(c) = convert(name, e, &mut notes) {
            out.insert(name.clone(), c);
        }
    }
    Ok((out, notes))
}

fn shown(entry: &Value) -> Value {
    let mut e = entry.clone();
    if let Some(env) = e.get_mut("env").and_then(Value::as_object_mut) {
        for v in env.values_mut() {
            *v = json!("…");
        }
    }
    e
}

pub fn import(a: &McpImportArgs) -> Result<Outcome, AgentError> {
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| AgentError::invalid_args(format!("cannot read {}: {e}", a.file.display())))?;
    let (found, notes) = entries(&text)
        .map_err(|e| AgentError::invalid_args(format!("{}: {e}", a.file.display())))?;
    let path = a
        .config
        .clone()
        .unwrap_or_else(agentd_proto::paths::default_config);
    let existing: toml::Table = match std::fs::read_to_string(&path) {
        Ok(t) => toml::from_str(&t).map_err(|e| {
            AgentError::invalid_args(format!("{} does not parse: {e}", path.display()))
        })?,
        Err(_) => toml::Table::new(),
    };
    let have: Vec<String> = existing
        .get("mcp_servers")
        .and_then(|t| t.as_table())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    let mut human = String::new();
    let mut added = Vec::new();
    let mut skipped = Vec::new();
    let mut append = String::new();
    for (name, entry) in &found {
        if have.contains(name) {
            skipped.push(name.clone());
            let _ = writeln!(human, "{name}: already in {}; left alone", path.display());
            continue;
        }
        let _ = writeln!(human, "{name}: {}", shown(entry));
        let mut doc = toml::Table::new();
        let mut servers = toml::Table::new();
        let value: toml::Value = serde_json::from_value(entry.clone())
            .map_err(|e| AgentError::internal(format!("{name}: {e}")))?;
        servers.insert(name.clone(), value);
        doc.insert("mcp_servers".into(), toml::Value::Table(servers));
        let _ = write!(
            append,
            "\n{}",
            toml::to_string(&doc).map_err(|e| AgentError::internal(e.to_string()))?
        );
        added.push(name.clone());
    }
    for n in &notes {
        let _ = writeln!(human, "note: {n}");
    }
    if a.yes && !added.is_empty() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                AgentError::invalid_args(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&append);
        std::fs::write(&path, text).map_err(|e| {
            AgentError::invalid_args(format!("cannot write {}: {e}", path.display()))
        })?;
        let _ = writeln!(
            human,
            "wrote {} server(s) to {}; restart the daemon to use them",
            added.len(),
            path.display()
        );
    } else if !added.is_empty() {
        let _ = writeln!(
            human,
            "nothing written; check the commands above, then run again with --yes"
        );
    }
    Ok(Outcome::Result {
        value: json!({
            "config": path, "servers": found.keys().collect::<Vec<_>>(), "added": if a.yes { added.clone() } else { Vec::new() },
            "would_add": added, "skipped": skipped, "notes": notes, "written": a.yes,
        }),
        human,
    })
}

/// Doctor: starts each enabled server of config once (in `cwd`), lists its tools and
/// stops it. `(name, ok, detail, fix)` per server.
pub async fn probe(
    config: &toml::Table,
    cwd: &Path,
) -> Vec<(String, bool, String, Option<String>)> {
    let Some(table) = config.get("mcp_servers").and_then(|t| t.as_table()) else {
        return Vec::new();
    };
    let sandbox_default = config
        .get("mcp_sandbox")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let mut servers = BTreeMap::new();
    let mut out = Vec::new();
    for (name, v) in table {
        let parsed = serde_json::to_value(v)
            .map_err(|e| e.to_string())
            .and_then(|j| {
                serde_json::from_value::<agentd_mcp::ServerConfig>(j).map_err(|e| e.to_string())
            })
            .and_then(|c| c.validate(name).map(|_| c));
        match parsed {
            Ok(c) if c.enabled && c.command.is_some() && c.sandbox.unwrap_or(sandbox_default) => {
                // The sandbox is the daemon's: never started unconfined here.
                out.push((
                    name.clone(),
                    true,
                    format!(
                        "runs only inside the daemon's command sandbox, so it is not started \
                         here; `agentctl mcp tools {name}` starts it there"
                    ),
                    None,
                ))
            }
            Ok(c) if c.enabled => {
                servers.insert(name.clone(), c);
            }
            Ok(_) => out.push((name.clone(), true, "disabled".into(), None)),
            Err(e) => out.push((
                name.clone(),
                false,
                e,
                Some("fix the [mcp_servers] entry in config.toml".into()),
            )),
        }
    }
    if servers.is_empty() {
        return out;
    }
    let run_dir = std::env::temp_dir().join(format!("agentctl-doctor-mcp-{}", std::process::id()));
    let inherited = agentd_mcp::client::inheritable(servers.values(), |n| std::env::var(n).ok());
    let manager = agentd_mcp::Manager::new(agentd_mcp::ManagerOptions {
        start: agentd_mcp::StartContext {
            workspace: cwd.to_path_buf(),
            run_dir: run_dir.clone(),
            session_id: "doctor".into(),
            inherited_env: inherited,
            confine: None,
        },
        servers,
    });
    manager.start().await;
    for st in manager.status().await {
        if st.state == "ready" {
            out.push((
                st.name.clone(),
                true,
                format!(
                    "{} tools, protocol {}, started in {} ms",
                    st.tools,
                    st.protocol.unwrap_or_default(),
                    st.started_ms.unwrap_or(0)
                ),
                None,
            ));
        } else {
            out.push((
                st.name.clone(),
                false,
                st.last_error.unwrap_or_else(|| st.state.to_string()),
                Some(format!(
                    "check `command`/`args` of [mcp_servers.{}] (or set enabled = false)",
                    st.name
                )),
            ));
        }
    }
    manager.stop().await;
    let _ = std::fs::remove_dir_all(run_dir);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_and_codex_files_convert() {
        let (m, notes) = entries(
            r#"{"mcpServers": {
                "ev": {"command": "npx", "args": ["-y", "x"], "env": {"TOKEN": "${TOKEN}", "MODE": "a"}},
                "remote": {"type": "http", "url": "https://h/mcp", "headers": {"X": "y"}},
                "old": {"type": "sse", "url": "https://h/sse"}
            }}"#,
        )
        .unwrap();
        assert_eq!(m["ev"]["env_vars"], json!(["TOKEN"]));
        assert_eq!(m["ev"]["env"], json!({"MODE": "a"}));
        assert_eq!(m["remote"]["url"], "https://h/mcp");
        assert!(!m.contains_key("old"));
        assert_eq!(notes.len(), 2);
        let (m, _) =
            entries("[mcp_servers.git]\ncommand = \"mcp-server-git\"\nenv_vars = [\"A\"]\n")
                .unwrap();
        assert_eq!(m["git"]["env_vars"], json!(["A"]));
    }
}
