//! `agentctl import --discover`: find the sessions other agents keep under `$HOME` and
//! import each one not imported yet.
//!
//! The daemon does the finding (`agentd/import_discover`, given this shell's `$HOME` and
//! the agents' own overrides from this environment) and the once-only importing
//! (`agentd/import` with `once`); this module asks, imports what is new or changed one
//! source at a time (a progress line on a terminal), and prints one table or one JSON
//! document.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

use agentd_proto::rpc::{self, method};
use agentd_proto::AgentError;
use serde_json::{json, Value};

use crate::cli::ImportArgs;
use crate::daemon::{self, Target};
use crate::output::Outcome;
use crate::rpc::to_params;

/// The agents' own environment overrides discovery honours.
const ENV_OVERRIDES: [&str; 5] = [
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "PI_CODING_AGENT_DIR",
    "XDG_DATA_HOME",
    "GEMINI_CLI_HOME",
];

pub async fn run(target: &Target, a: &ImportArgs, human: bool) -> Result<Outcome, AgentError> {
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| h.starts_with('/'))
        .ok_or_else(|| {
            AgentError::invalid_args("--discover needs $HOME set to an absolute path")
        })?;
    let env: BTreeMap<String, String> = ENV_OVERRIDES
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let c = daemon::connect_or_start(target).await?;
    let ask = rpc::DiscoverParams {
        home,
        env,
        agent: a.agent.clone(),
        since: a.since.clone(),
    };
    let found = c
        .conn
        .call(method::IMPORT_DISCOVER, to_params(&ask)?)
        .await?;
    let sources = found["sources"].as_array().cloned().unwrap_or_default();
    let ignored = found["ignored"].clone();
    if a.dry_run {
        let text = table(&sources, &ignored, true);
        let mut v = found;
        v["dry_run"] = json!(true);
        return Ok(Outcome::Result {
            value: v,
            human: text,
        });
    }
    let todo = sources
        .iter()
        .filter(|s| matches!(s["status"].as_str(), Some("new" | "changed")))
        .count();
    let progress = human && std::io::stderr().is_terminal() && todo > 0;
    let mut rows = Vec::new();
    let mut done = 0;
    for s in sources {
        if !matches!(s["status"].as_str(), Some("new" | "changed")) {
            rows.push(s);
            continue;
        }
        done += 1;
        if progress {
            let mut e = std::io::stderr();
            let _ = write!(
                e,
                "\r\x1b[2K[{}] {done}/{todo} {} {}",
                bar(done - 1, todo),
                s["agent"].as_str().unwrap_or(""),
                tail(s["path"].as_str().unwrap_or(""), 50)
            );
            let _ = e.flush();
        }
        let params = to_params(&rpc::ImportParams {
            format: s["format"].as_str().unwrap_or("auto").to_string(),
            path: s["path"].as_str().unwrap_or_default().to_string(),
            source_session: s["source_session"].as_str().map(str::to_string),
            workspace: None,
            session_id: None,
            once: true,
            strict: false,
        })?;
        let mut row = s.clone();
        match c.conn.call(method::IMPORT, params).await {
            Ok(r) => {
                row["status"] = r["status"].clone();
                row["session_id"] = r["session_id"].clone();
                for k in ["imported", "skipped_total", "warnings"] {
                    if let Some(v) = r.get(k) {
                        row[k] = v.clone();
                    }
                }
            }
            Err(e) => {
                row["status"] = json!("failed");
                row["error"] = json!({"kind": e.kind.as_str(), "message": e.message});
            }
        }
        rows.push(row);
    }
    if progress {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        *counts
            .entry(r["status"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    let text = table(&rows, &ignored, false);
    Ok(Outcome::Result {
        value: json!({"sources": rows, "ignored": ignored, "counts": counts, "roots": found["roots"]}),
        human: text,
    })
}

fn bar(done: usize, total: usize) -> String {
    const W: usize = 20;
    let filled = (done * W).checked_div(total).unwrap_or(W);
    format!("{}{}", "#".repeat(filled), "-".repeat(W - filled))
}

/// The last `n` characters of a path.
fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    let rest: String = s.chars().skip(count - n + 1).collect();
    format!("…{rest}")
}

fn table(rows: &[Value], ignored: &Value, dry_run: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:<9} {:<24} SOURCE",
        "STATUS", "AGENT", "SESSION"
    );
    for r in rows {
        let status = r["status"].as_str().unwrap_or("?");
        let status = match (dry_run, status) {
            (true, "new") => "would-import",
            (true, "changed") => "would-reimport",
            (_, s) => s,
        };
        let session = r["session_id"]
            .as_str()
            .or(r["imported_as"].as_str())
            .unwrap_or("-");
        let mut source = r["path"].as_str().unwrap_or("").to_string();
        if let Some(s) = r["source_session"].as_str() {
            source.push_str(&format!(" ({s})"));
        }
        let _ = writeln!(
            out,
            "{status:<14} {:<9} {session:<24} {source}",
            r["agent"].as_str().unwrap_or("?")
        );
        if let Some(m) = r["error"]["message"].as_str().or(r["error"].as_str()) {
            let _ = writeln!(out, "{:<14} error: {m}", "");
        }
    }
    if rows.is_empty() {
        let _ = writeln!(out, "(no sessions found)");
    }
    if let Some(list) = ignored.as_array().filter(|l| !l.is_empty()) {
        let _ = writeln!(out, "ignored:");
        for i in list {
            let _ = writeln!(
                out,
                "  {}: {}",
                i["path"].as_str().unwrap_or("?"),
                i["reason"].as_str().unwrap_or("?")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_source_and_ignored_path() {
        let rows = vec![
            json!({"status": "imported", "agent": "claude", "session_id": "s1", "path": "/h/a.jsonl"}),
            json!({"status": "new", "agent": "opencode", "path": "/h/o.db", "source_session": "ses_1"}),
        ];
        let t = table(
            &rows,
            &json!([{"path": "/h/l", "reason": "symlink outside"}]),
            true,
        );
        assert!(t.contains("imported       claude    s1"), "{t}");
        assert!(t.contains("would-import   opencode"), "{t}");
        assert!(t.contains("/h/o.db (ses_1)"), "{t}");
        assert!(t.contains("/h/l: symlink outside"), "{t}");
        assert_eq!(bar(0, 4), "--------------------");
        assert_eq!(bar(2, 4), "##########----------");
        assert_eq!(tail("abcdef", 4), "…def");
    }
}
