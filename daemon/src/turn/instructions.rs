//! The instruction files a turn sends (docs/turns-and-providers.md, "Instructions"):
//! the global `$XDG_CONFIG_HOME/agentd/AGENTS.md` (else `~/.config/agentd/AGENTS.md`),
//! then the project's `AGENTS.md` from the repository root (the nearest ancestor of the
//! workspace holding `.git`; the workspace alone when there is none) down to the
//! workspace, with `CLAUDE.md` standing in where a directory has no `AGENTS.md`.
//!
//! Each file is read up to [`CAP`] bytes (a longer one is cut and says so). A project
//! file that is a symlink resolving outside the project, or that the sandbox hides
//! ([`crate::tools::sandboxing::PathRules::check`]), is skipped unread. What a turn
//! read is recorded as an `instructions` event only when it differs from the session's
//! newest record (paths and sha256s compared); replay renders the newest record, never
//! the files on disk.

use crate::history::instructions::digests;
use crate::session::SessionHandle;
use crate::tools::sandboxing::PathRules;
use agentd_proto::{AgentError, EventDraft, EventType};
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes of one instruction file sent at most.
pub const CAP: usize = 32 * 1024;

/// One instruction file as read.
#[derive(Debug, Clone, Serialize)]
pub struct File {
    pub path: String,
    /// `global` or `project`.
    pub scope: &'static str,
    /// sha256 of the bytes sent (the first [`CAP`] of the file).
    pub sha256: String,
    /// The file's whole size.
    pub bytes: u64,
    pub text: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A candidate file left unread, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// What a turn would send now.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Found {
    pub files: Vec<File>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

impl Found {
    fn digests(&self) -> Vec<(String, String)> {
        self.files
            .iter()
            .map(|f| (f.path.clone(), f.sha256.clone()))
            .collect()
    }

    /// The `instructions` event data.
    pub fn record(&self, turn_id: &str) -> Value {
        let mut d = json!({"turn_id": turn_id, "files": self.files});
        if !self.skipped.is_empty() {
            d["skipped"] = json!(self.skipped);
        }
        d
    }
}

/// The global instruction file's path, from the daemon's environment.
pub fn global_path() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = var("XDG_CONFIG_HOME").or_else(|| var("HOME").map(|h| h.join(".config")))?;
    Some(base.join("agentd").join("AGENTS.md"))
}

/// The directories searched, from the project root down to `workspace` (canonical).
fn project_dirs(workspace: &Path) -> Vec<PathBuf> {
    let root = workspace
        .ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
        .unwrap_or(workspace);
    let mut dirs: Vec<PathBuf> = workspace
        .ancestors()
        .take_while(|d| d.starts_with(root))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

/// Reads what a turn in `workspace` (canonical) would send. `rules` are the sandbox's
/// hidden set as the file tools see it.
pub fn find(workspace: &Path, global: Option<&Path>, rules: &PathRules) -> Found {
    let mut found = Found::default();
    if let Some(g) = global {
        if std::fs::metadata(g).is_ok_and(|m| m.is_file()) {
            match read_capped(g) {
                Ok((text, sha256, bytes, truncated)) => found.files.push(File {
                    path: g.display().to_string(),
                    scope: "global",
                    sha256,
                    bytes,
                    text,
                    truncated,
                }),
                Err(e) => found.skipped.push(Skipped {
                    path: g.display().to_string(),
                    reason: e,
                }),
            }
        }
    }
    let dirs = project_dirs(workspace);
    let Some(root) = dirs.first().cloned() else {
        return found;
    };
    for dir in &dirs {
        let candidate = ["AGENTS.md", "CLAUDE.md"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| std::fs::symlink_metadata(p).is_ok());
        let Some(path) = candidate else { continue };
        match read_project(&path, &root, rules) {
            Ok((text, sha256, bytes, truncated)) => found.files.push(File {
                path: path.display().to_string(),
                scope: "project",
                sha256,
                bytes,
                text,
                truncated,
            }),
            Err(reason) => found.skipped.push(Skipped {
                path: path.display().to_string(),
                reason,
            }),
        }
    }
    found
}

type Contents = (String, String, u64, bool);

fn read_project(path: &Path, root: &Path, rules: &PathRules) -> Result<Contents, String> {
    let real = std::fs::canonicalize(path).map_err(|e| format!("unreadable: {e}"))?;
    if !real.starts_with(root) {
        return Err(format!(
            "a symlink to {} outside the project {}",
            real.display(),
            root.display()
        ));
    }
    rules.check(&real, false).map_err(|e| e.message)?;
    if !std::fs::metadata(&real).is_ok_and(|m| m.is_file()) {
        return Err("not a regular file".into());
    }
    read_capped(&real)
}

/// The first [`CAP`] bytes as text (cut on a character boundary, the cut said), their
/// sha256, the file's size and whether it was cut. Never reads more than `CAP + 4`.
fn read_capped(path: &Path) -> Result<Contents, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("unreadable: {e}"))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::with_capacity(CAP.min(size as usize) + 4);
    f.take(CAP as u64 + 4)
        .read_to_end(&mut buf)
        .map_err(|e| format!("unreadable: {e}"))?;
    let truncated = buf.len() > CAP;
    if truncated {
        buf.truncate(CAP);
    }
    let sha256 = crate::text::sha256_hex(&buf);
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if truncated {
        // A character cut by the byte cap shows as U+FFFD at the very end: drop it.
        while text.ends_with('\u{FFFD}') {
            text.pop();
        }
        text.push_str(&format!(
            "\n\n[agentd: this file is {size} bytes; only its first {} KiB are included]",
            CAP / 1024
        ));
    }
    Ok((text, sha256, size, truncated))
}

/// The `instructions` event a turn starting now records: `None` when what it reads
/// equals the session's newest record (or there is neither a file nor a record).
pub async fn draft(
    h: &SessionHandle,
    rules: &PathRules,
    workspace: &Path,
    turn_id: &str,
) -> Result<Option<EventDraft>, AgentError> {
    let recorded = h.query(|st| st.fold.instructions().map(digests)).await?;
    let (ws, rules) = (workspace.to_path_buf(), rules.clone());
    let found =
        crate::filesystem::blocking(move || find(&ws, global_path().as_deref(), &rules)).await?;
    let now = found.digests();
    let same = match &recorded {
        Some(r) => *r == now,
        None => now.is_empty(),
    };
    Ok((!same).then(|| EventDraft::new(EventType::Instructions, found.record(turn_id))))
}

/// The sandbox's hidden and protected sets for a turn in `workspace` with the session's
/// sandbox request (empty where no sandbox runtime is installed, as for the file tools).
fn rules_for(
    registry: &crate::registry::Registry,
    session: agentd_sandbox::SandboxRequest,
    workspace: &Path,
) -> PathRules {
    let Some(rt) = crate::tools::sandboxing::runtime() else {
        return PathRules::default();
    };
    let inputs = crate::tools::sandboxing::inputs(
        &rt,
        &registry.config.sandbox,
        session,
        Default::default(),
        workspace,
    );
    PathRules::from_policy(&agentd_sandbox::effective(&inputs))
}

/// `agentd/instructions`: the base prompt and the instruction files the next turn
/// would send, each with where it came from; for a session, also whether its newest
/// record already holds them (else the next turn records them).
pub async fn show(
    registry: &std::sync::Arc<crate::registry::Registry>,
    p: agentd_proto::rpc::InstructionsParams,
) -> Result<Value, AgentError> {
    let (workspace, session, recorded) = match (&p.session_id, &p.workspace) {
        (Some(sid), None) => {
            agentd_proto::session_id::validate(sid)?;
            let h = registry.get(sid).await?;
            let sandbox = super::setup::session_sandbox(&h).await?;
            let (ws, recorded) = h
                .query(|st| {
                    let seq = st
                        .events
                        .iter()
                        .rev()
                        .find(|e| e.event_type() == EventType::Instructions)
                        .map(|e| e.seq);
                    (
                        st.workspace().to_string(),
                        seq.zip(st.fold.instructions().map(digests)),
                    )
                })
                .await?;
            (ws, sandbox, Some(recorded))
        }
        (None, Some(ws)) => (ws.clone(), Default::default(), None),
        _ => {
            return Err(AgentError::invalid_args(
                "give exactly one of session_id and workspace",
            ))
        }
    };
    let registry = registry.clone();
    let (found, ws) = crate::filesystem::blocking(move || {
        let ws = std::fs::canonicalize(&workspace).map_err(|e| {
            AgentError::new(
                agentd_proto::ErrorKind::NotFound,
                format!("workspace {workspace}: {e}"),
            )
        })?;
        let rules = rules_for(&registry, session, &ws);
        Ok::<_, AgentError>((find(&ws, global_path().as_deref(), &rules), ws))
    })
    .await??;
    let mut out = json!({
        "workspace": ws,
        "base_prompt": {
            "version": crate::prompt::BASE_PROMPT_VERSION,
            "sha256": crate::prompt::record()["sha256"],
            "text": crate::prompt::BASE_PROMPT,
        },
        "files": found.files,
        "skipped": found.skipped,
    });
    if let Some(recorded) = recorded {
        out["recorded"] = match recorded {
            Some((seq, d)) => json!({"seq": seq, "current": d == found.digests()}),
            None => json!({"seq": null, "current": found.files.is_empty()}),
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_file_says_so_and_reads_no_more_than_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("AGENTS.md");
        std::fs::write(&p, "é".repeat(CAP)).unwrap();
        let (text, _, bytes, truncated) = read_capped(&p).unwrap();
        assert!(truncated);
        assert_eq!(bytes, 2 * CAP as u64);
        assert!(text.starts_with("éé"));
        assert!(
            text.ends_with("only its first 32 KiB are included]"),
            "{text}"
        );
        assert!(!text.contains('\u{FFFD}'));
    }

    #[test]
    fn nested_files_come_root_first_and_claude_md_stands_in() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root").unwrap();
        std::fs::write(root.join("a/CLAUDE.md"), "claude a").unwrap();
        std::fs::write(root.join("a/b/AGENTS.md"), "b").unwrap();
        std::fs::write(root.join("a/b/CLAUDE.md"), "not read").unwrap();
        let found = find(&root.join("a/b"), None, &PathRules::default());
        let texts: Vec<&str> = found.files.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["root", "claude a", "b"]);
    }
}
