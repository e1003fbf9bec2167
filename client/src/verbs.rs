//! The session verbs on the command line (docs/sessions-and-history.md#session-verbs): `rename`, `archive`, `unarchive`,
//! `rm`, `restore`, `search`, `export`, `usage`, and `config init`. Arguments, their
//! mapping to native methods, and human rendering live here; `commands` dispatches.

use crate::cli::{Command, ExportArgs, McpCmd, RmArgs, UsageBy};
use crate::params::{abs_dir, check_sid, session, sid, Request};
use agentd_proto::rpc::{self, method};
use agentd_proto::AgentError;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::Path;

/// The single call of a verb; `None` for verbs `commands` runs itself (rm, export,
/// config init).
pub fn request(cmd: &Command, cwd: &Path) -> Result<Option<Request>, AgentError> {
    let opt_sid = |s: &Option<String>| s.as_deref().map(sid).transpose();
    let req = match cmd {
        Command::Rename(a) => Request::new(
            method::RENAME,
            &rpc::RenameParams {
                session_id: sid(&a.session_id)?,
                title: a.title.clone(),
            },
        ),
        Command::Archive(a) => Request::new(method::ARCHIVE, &session(&a.session_id)?),
        Command::Unarchive(a) => Request::new(method::UNARCHIVE, &session(&a.session_id)?),
        Command::Restore(a) => Request::new(method::RESTORE, &session(&a.session_id)?),
        Command::Search(a) => Request::new(
            method::SEARCH,
            &rpc::SearchParams {
                query: a.query.clone(),
                regex: a.regex,
                case_sensitive: a.case_sensitive,
                workspace: a.workspace.as_deref().map(|w| abs_dir(Some(w), cwd)),
                types: (!a.types.is_empty()).then(|| a.types.clone()),
                limit: Some(a.limit),
                cursor: a.cursor.clone(),
            },
        ),
        Command::Mcp(McpCmd::List(a)) => Request::new(
            method::MCP_LIST,
            &rpc::McpListParams {
                session_id: opt_sid(&a.session_id)?,
            },
        ),
        Command::Mcp(McpCmd::Tools(a)) => Request::new(
            method::MCP_TOOLS,
            &rpc::McpToolsParams {
                session_id: opt_sid(&a.session_id)?,
                server: a.server.clone(),
                workspace: a
                    .session_id
                    .is_none()
                    .then(|| cwd.to_string_lossy().into_owned()),
            },
        ),
        Command::Usage(a) => Request::new(
            method::USAGE,
            &rpc::UsageParams {
                session_id: opt_sid(&a.session_id)?,
                since: a.since.clone(),
                by: Some(
                    match a.by {
                        UsageBy::Model => "model",
                        UsageBy::Session => "session",
                        UsageBy::Day => "day",
                    }
                    .to_string(),
                ),
            },
        ),
        _ => return Ok(None),
    };
    req.map(Some)
}

/// Params of `agentd/delete`, after the purge confirmation.
pub fn delete_params(a: &RmArgs) -> Result<rpc::DeleteParams, AgentError> {
    check_sid(&a.session_id)?;
    if a.purge && !a.yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Err(AgentError::invalid_args(
                "--purge removes the session for good; confirm with --yes",
            )
            .with_next_actions(&[&format!("agentctl rm {} --purge --yes", a.session_id)]));
        }
        eprint!("Remove session {} for good? [y/N] ", a.session_id);
        let mut answer = String::new();
        let _ = stdin.read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(AgentError::new(
                agentd_proto::ErrorKind::Interrupted,
                "not confirmed; nothing removed",
            ));
        }
    }
    Ok(rpc::DeleteParams {
        session_id: a.session_id.clone(),
        purge: a.purge,
    })
}

pub fn export_params(a: &ExportArgs, cwd: &Path) -> Result<rpc::ExportParams, AgentError> {
    check_sid(&a.session_id)?;
    let output = a.output.as_ref().map(|o| {
        if o.is_absolute() {
            o.clone()
        } else {
            cwd.join(o)
        }
    });
    let install = if a.install {
        let home = match &a.home {
            Some(h) if h.is_absolute() => h.clone(),
            Some(h) => cwd.join(h),
            None => std::env::var_os("HOME")
                .map(std::path::PathBuf::from)
                .ok_or_else(|| AgentError::invalid_args("HOME is not set; pass --home DIR"))?,
        };
        // The peers' own overrides, as the peer would read them from this environment.
        let env = ["CLAUDE_CONFIG_DIR", "CODEX_HOME", "PI_CODING_AGENT_DIR"]
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        Some(rpc::ExportInstall {
            home: home.to_string_lossy().into_owned(),
            env,
        })
    } else {
        None
    };
    Ok(rpc::ExportParams {
        session_id: a.session_id.clone(),
        format: a.format.as_str().to_string(),
        output_path: output.map(|o| o.to_string_lossy().into_owned()),
        install,
    })
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn server_line(out: &mut String, st: &Value) {
    let _ = write!(
        out,
        "  {:<20} {:<11} {:>3} tools",
        s(st, "name"),
        s(st, "state"),
        st["tools"].as_u64().unwrap_or(0)
    );
    if let Some(p) = st["protocol"].as_str() {
        let _ = write!(out, "  protocol {p}");
    }
    if let Some(pid) = st["pid"].as_i64() {
        let _ = write!(out, "  pid {pid}");
    }
    if let Some(ms) = st["started_ms"].as_u64() {
        let _ = write!(out, "  started in {ms} ms");
    }
    out.push('\n');
    if let Some(sb) = st["sandbox"].as_object() {
        let get = |k: &str| sb.get(k).and_then(Value::as_str).unwrap_or("?");
        let _ = writeln!(
            out,
            "      sandbox: {} {}, network {}",
            get("level"),
            get("mode"),
            get("network")
        );
    }
    if let Some(e) = st["last_error"].as_str() {
        let _ = writeln!(out, "      last error: {e}");
    }
}

/// Human text of a verb's result; `None` for other commands.
pub fn render(cmd: &Command, v: &Value) -> Option<String> {
    Some(match cmd {
        Command::Mcp(McpCmd::List(_)) => {
            let mut out = String::new();
            let config = v["config"].as_array().cloned().unwrap_or_default();
            if config.is_empty() {
                out.push_str("no [mcp_servers] in config.toml\n");
            }
            for c in &config {
                let what = c["command"]
                    .as_str()
                    .map(|cmd| {
                        let args: Vec<&str> = c["args"]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        format!("{cmd} {}", args.join(" "))
                    })
                    .or_else(|| c["url"].as_str().map(str::to_string))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{:<20} {:<6} {}{}{}",
                    s(c, "name"),
                    s(c, "transport"),
                    what.trim_end(),
                    if c["sandbox"] == true {
                        "  (sandboxed)"
                    } else {
                        ""
                    },
                    if c["enabled"] == false {
                        "  (disabled)"
                    } else {
                        ""
                    }
                );
            }
            for sess in v["sessions"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "session {}", s(sess, "session_id"));
                for st in sess["servers"].as_array().into_iter().flatten() {
                    server_line(&mut out, st);
                }
            }
            out.push_str("MCP tools run outside the workspace confinement of the file tools.\n");
            out
        }
        Command::Mcp(McpCmd::Tools(_)) => {
            let mut out = String::new();
            for st in v["servers"].as_array().into_iter().flatten() {
                server_line(&mut out, st);
            }
            for t in v["tools"].as_array().into_iter().flatten() {
                let ro = if t["annotations"]["readOnlyHint"] == true {
                    " [read-only hint]"
                } else {
                    ""
                };
                let desc = s(t, "description").lines().next().unwrap_or("");
                let _ = writeln!(out, "{}{ro}\n    {desc}", s(t, "name"));
            }
            out
        }
        Command::Rename(_) | Command::Archive(_) | Command::Unarchive(_) => {
            let what = match cmd {
                Command::Rename(_) => format!("title {}", Value::String(s(v, "title").into())),
                _ if v["archived"] == true => "archived".into(),
                _ => "not archived".into(),
            };
            let changed = if v.get("seq").is_some_and(|x| !x.is_null()) {
                ""
            } else {
                " (unchanged)"
            };
            format!("{}: {what}{changed}\n", s(v, "session_id"))
        }
        Command::Rm(_) => {
            let mut out = match s(v, "outcome") {
                "purged" => format!("{} purged\n", s(v, "session_id")),
                _ => format!(
                    "{} moved to the trash ({}); `agentctl restore {}` brings it back\n",
                    s(v, "session_id"),
                    s(v, "trash_path"),
                    s(v, "session_id")
                ),
            };
            let forks: Vec<&str> = v["forks"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !forks.is_empty() {
                let _ = writeln!(
                    out,
                    "forks keep working (their Logs are self-contained): {}",
                    forks.join(", ")
                );
            }
            out
        }
        Command::Restore(_) => format!("{} restored\n", s(v, "session_id")),
        Command::Search(_) => {
            let hits = v["hits"].as_array().cloned().unwrap_or_default();
            let color = std::io::stdout().is_terminal();
            let mut out = String::new();
            if hits.is_empty() {
                out.push_str("no matches\n");
            }
            for h in &hits {
                let snip = s(h, "snippet");
                let (a, b) = (
                    h["highlight"][0].as_u64().unwrap_or(0) as usize,
                    h["highlight"][1].as_u64().unwrap_or(0) as usize,
                );
                let shown = match (snip.get(..a), snip.get(a..b), snip.get(b..)) {
                    (Some(x), Some(m), Some(y)) if color => format!("{x}\x1b[1;31m{m}\x1b[0m{y}"),
                    (Some(x), Some(m), Some(y)) => format!("{x}[{m}]{y}"),
                    _ => snip.to_string(),
                };
                let _ = writeln!(out, "{}  {:<17} {shown}", s(h, "ref"), s(h, "type"));
            }
            if let Some(c) = v.get("next_cursor").and_then(Value::as_str) {
                let _ = writeln!(out, "… more: --cursor '{c}'");
            }
            out
        }
        Command::Export(_) => {
            let mut out = match v.get("output_path").and_then(Value::as_str) {
                Some(p) => format!("wrote {p} ({} bytes)\n", v["bytes"]),
                None => s(v, "content").to_string(),
            };
            if let Some(cmd) = v.get("resume_command").and_then(Value::as_str) {
                let _ = writeln!(out, "resume it with: {cmd}");
            }
            // On stderr when the export itself goes to stdout.
            for w in v["warnings"].as_array().into_iter().flatten() {
                let line = format!("warning: {}", w.as_str().unwrap_or("?"));
                if v.get("output_path").is_some() {
                    let _ = writeln!(out, "{line}");
                } else {
                    eprintln!("{line}");
                }
            }
            out
        }
        Command::Usage(_) => {
            let mut out = format!(
                "{:<32} {:>6} {:>12} {:>12} {:>12} {:>10}\n",
                s(v, "by"),
                "calls",
                "input",
                "cached",
                "output",
                "cost"
            );
            let row = |out: &mut String, key: &str, t: &Value| {
                let cost = t
                    .get("cost")
                    .and_then(Value::as_f64)
                    .map_or("-".to_string(), |c| format!("{c:.4}"));
                let _ = writeln!(
                    out,
                    "{:<32} {:>6} {:>12} {:>12} {:>12} {:>10}",
                    key,
                    t["calls"],
                    t["input_tokens"],
                    t["cached_tokens"],
                    t["output_tokens"],
                    cost
                );
            };
            for r in v["rows"].as_array().cloned().unwrap_or_default() {
                row(&mut out, s(&r, "key"), &r);
            }
            row(&mut out, "total", &v["total"]);
            out
        }
        _ => return None,
    })
}

/// The commented config `config init` writes.
pub const CONFIG_TEMPLATE: &str = r#"# agentd configuration. Every key is optional; these are the defaults.
# The daemon reads this file when it starts: `agentctl daemon stop` after editing
# (the next agentctl command starts a daemon that reads it).

# Provider used when a turn names none. Built in: openai (OPENAI_API_KEY, model
# gpt-5-mini), anthropic (ANTHROPIC_API_KEY, claude-sonnet-4-5), ollama (local, no
# key, llama3.2), script (offline replay of a JSON script).
default_provider = "openai"

# sync: acknowledge appends after fdatasync | batch: group commit within batch_ms |
# none: never sync (tests only)
durability = "sync"

[compaction]
threshold = 0.85     # compact before a call above this share of the context window
tail_events = 40     # events kept raw after a compaction

# What a turn runs with when its request does not say (`agentctl turn`/`run`
# --permission-mode and --max-iterations, or an editor's own choice, win).
[turns]
permission_mode = "auto"   # auto: tools run without asking | ask: mutating tools ask a
                           # client first | read_only: mutating tools are refused
max_iterations = 16        # provider calls per turn (1..1000)

# A provider table replaces the built-in of the same name. API keys are never written
# here: name the environment variable that holds the key.
#
# [providers.openai]
# kind = "openai-responses"   # openai-responses | openai-chat | anthropic | script
# api_key_env = "OPENAI_API_KEY"
# model = "gpt-5-mini"
# context_window = 400000
#
# [providers.local]
# kind = "openai-chat"         # Ollama, vLLM, llama.cpp, OpenRouter
# base_url = "http://localhost:11434/v1"
# model = "qwen2.5-coder:14b"
# models = ["llama3.2"]        # more models editors may offer (ACP's model picker)
# context_window = 32768

# Prices per million tokens, for `agentctl usage` (any one currency).
# [prices."gpt-5-mini"]
# input = 0.25
# cached_input = 0.025
# output = 2.0
"#;

/// `agentctl config init`.
pub fn config_init(force: bool, path: Option<&Path>) -> Result<(Value, String), AgentError> {
    let path = path.map_or_else(agentd_proto::paths::default_config, Path::to_path_buf);
    if path.exists() && !force {
        return Err(AgentError::new(
            agentd_proto::ErrorKind::AlreadyExists,
            format!("{} exists; pass --force to replace it", path.display()),
        )
        .with_details(json!({"path": path.display().to_string()})));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            AgentError::invalid_args(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    std::fs::write(&path, CONFIG_TEMPLATE)
        .map_err(|e| AgentError::invalid_args(format!("cannot write {}: {e}", path.display())))?;
    let shown = path.display().to_string();
    Ok((
        json!({"path": shown, "written": true}),
        format!("wrote {shown}\n"),
    ))
}
