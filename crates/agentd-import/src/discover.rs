//! Finding the sessions other agents keep in their default places (`--discover`).
//!
//! A pure walk of the filesystem: given the user's home and the agents' own environment
//! overrides, it lists candidate sources (a file, or one session of opencode's database)
//! and the paths it ignored, each with a reason. It reads only directory entries, file
//! metadata, Gemini CLI chat headers and opencode's session table; it imports nothing
//! and knows nothing of agentd's store.
//!
//! Where each agent keeps its sessions:
//! - Claude Code: `$CLAUDE_CONFIG_DIR` or `~/.claude`, then `projects/<dir>/<uuid>.jsonl`.
//! - Codex: `$CODEX_HOME` or `~/.codex`, then `sessions/**/rollout-*.jsonl`.
//! - pi: `$PI_CODING_AGENT_DIR` or `~/.pi/agent`, then `sessions/**/*.jsonl`.
//! - opencode: `$XDG_DATA_HOME` or `~/.local/share`, then `opencode/opencode.db`; each
//!   session in it is one source.
//! - Gemini CLI: `$GEMINI_CLI_HOME` or `~`, then `.gemini/tmp/<project>/chats/*.jsonl`;
//!   files sharing a `sessionId` (resume stubs) are one source, the largest file.
//!
//! A symlink whose target lies outside the home is ignored with a reason (a link could
//! otherwise pull in any file the daemon can read); one inside is followed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use agentd_proto::AgentError;
use serde::Serialize;
use time::OffsetDateTime;

use super::Format;

/// Agents discovery knows, by the name `--agent` takes.
pub const AGENTS: [&str; 5] = ["claude", "codex", "pi", "opencode", "gemini"];

/// Directory levels walked below an agent's sessions directory.
const MAX_DEPTH: usize = 8;

#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub agent: &'static str,
    pub format: Format,
    pub path: String,
    /// The session inside a multi-session source (opencode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_session: Option<String>,
    /// Source bytes (for opencode, the bytes of the session's rows).
    pub bytes: u64,
    /// Last change, RFC 3339.
    pub modified: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ignored {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
pub struct Scan {
    pub sources: Vec<Candidate>,
    pub ignored: Vec<Ignored>,
    /// The directories looked in, per agent.
    pub roots: BTreeMap<&'static str, String>,
}

/// Lists the sources of `agent` (every agent when `None`) changed at or after `since`.
pub fn scan(
    home: &Path,
    env: &BTreeMap<String, String>,
    agent: Option<&str>,
    since: Option<OffsetDateTime>,
) -> Result<Scan, AgentError> {
    if !home.is_absolute() {
        return Err(AgentError::invalid_args("home must be an absolute path"));
    }
    if let Some(a) = agent {
        if !AGENTS.contains(&a) {
            return Err(AgentError::invalid_args(format!(
                "unknown agent {:?}; expected one of {}",
                agentd_base::text::clip_chars(a, 40),
                AGENTS.join(", ")
            )));
        }
    }
    let home_real = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let var = |k: &str| env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let mut w = Walker {
        home: home_real,
        scan: Scan::default(),
        since,
    };
    let wants = |a: &str| agent.is_none_or(|x| x == a);
    if wants("claude") {
        let root = var("CLAUDE_CONFIG_DIR").unwrap_or_else(|| home.join(".claude"));
        let projects = root.join("projects");
        w.root("claude", &projects);
        // Only `<project>/<session>.jsonl`: deeper files are a session's own side files.
        w.files(
            &projects,
            2,
            &|p, depth| depth == 2 && is_jsonl(p),
            "claude",
            Format::Claude,
        );
    }
    if wants("codex") {
        let root = var("CODEX_HOME").unwrap_or_else(|| home.join(".codex"));
        let sessions = root.join("sessions");
        w.root("codex", &sessions);
        w.files(
            &sessions,
            MAX_DEPTH,
            &|p, _| {
                is_jsonl(p)
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("rollout-"))
            },
            "codex",
            Format::Codex,
        );
    }
    if wants("pi") {
        let root = var("PI_CODING_AGENT_DIR").unwrap_or_else(|| home.join(".pi").join("agent"));
        let sessions = root.join("sessions");
        w.root("pi", &sessions);
        w.files(&sessions, MAX_DEPTH, &|p, _| is_jsonl(p), "pi", Format::Pi);
    }
    if wants("opencode") {
        let data = var("XDG_DATA_HOME").unwrap_or_else(|| home.join(".local").join("share"));
        let db = data.join("opencode").join("opencode.db");
        w.root("opencode", &db);
        w.opencode(&db);
    }
    if wants("gemini") {
        let root = var("GEMINI_CLI_HOME").unwrap_or_else(|| home.to_path_buf());
        let tmp = root.join(".gemini").join("tmp");
        w.root("gemini", &tmp);
        w.gemini(&tmp);
    }
    w.scan.sources.sort_by(|a, b| {
        (a.agent, &a.path, &a.source_session).cmp(&(b.agent, &b.path, &b.source_session))
    });
    Ok(w.scan)
}

/// `YYYY-MM-DD` (midnight UTC) or RFC 3339.
pub fn parse_since(s: &str) -> Result<OffsetDateTime, AgentError> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t);
    }
    let fmt = time::macros::format_description!("[year]-[month]-[day]");
    time::Date::parse(s, &fmt)
        .map(|d| d.midnight().assume_utc())
        .map_err(|_| {
            AgentError::invalid_args(format!(
                "--since must be YYYY-MM-DD or RFC 3339 ({} bytes given)",
                s.len()
            ))
        })
}

fn is_jsonl(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "jsonl")
}

fn rfc3339(t: OffsetDateTime) -> String {
    agentd_proto::event::format_ts(t)
}

struct Walker {
    home: PathBuf,
    scan: Scan,
    since: Option<OffsetDateTime>,
}

type Filter<'a> = &'a dyn Fn(&Path, usize) -> bool;

impl Walker {
    fn root(&mut self, agent: &'static str, p: &Path) {
        self.scan.roots.insert(agent, p.display().to_string());
    }

    fn ignore(&mut self, p: &Path, reason: impl Into<String>) {
        self.scan.ignored.push(Ignored {
            path: p.display().to_string(),
            reason: reason.into(),
        });
    }

    /// Resolves `p` when it is a symlink; `None` (and an ignore entry) when its target
    /// lies outside the home or is dangling.
    fn follow(&mut self, p: &Path) -> Option<std::fs::Metadata> {
        let meta = std::fs::symlink_metadata(p).ok()?;
        if !meta.file_type().is_symlink() {
            return Some(meta);
        }
        match std::fs::canonicalize(p) {
            Ok(target) if target.starts_with(&self.home) => std::fs::metadata(&target).ok(),
            Ok(target) => {
                self.ignore(
                    p,
                    format!(
                        "symlink to {}, outside $HOME ({}); not followed",
                        target.display(),
                        self.home.display()
                    ),
                );
                None
            }
            Err(e) => {
                self.ignore(p, format!("dangling symlink: {e}"));
                None
            }
        }
    }

    fn recent(&self, t: Option<OffsetDateTime>) -> bool {
        match (self.since, t) {
            (Some(s), Some(t)) => t >= s,
            _ => true,
        }
    }

    fn files(
        &mut self,
        dir: &Path,
        max_depth: usize,
        keep: Filter<'_>,
        agent: &'static str,
        format: Format,
    ) {
        let mut found = Vec::new();
        self.walk(dir, 1, max_depth, keep, &mut found);
        for (p, meta) in found {
            let modified = meta.modified().ok().map(OffsetDateTime::from);
            if !self.recent(modified) {
                continue;
            }
            if meta.len() == 0 {
                self.ignore(&p, "empty file");
                continue;
            }
            self.scan.sources.push(Candidate {
                agent,
                format,
                path: p.display().to_string(),
                source_session: None,
                bytes: meta.len(),
                modified: modified.map(rfc3339).unwrap_or_default(),
            });
        }
    }

    fn walk(
        &mut self,
        dir: &Path,
        depth: usize,
        max_depth: usize,
        keep: Filter<'_>,
        out: &mut Vec<(PathBuf, std::fs::Metadata)>,
    ) {
        if depth > max_depth {
            return;
        }
        let Some(meta) = self.follow(dir) else {
            return;
        };
        if !meta.is_dir() {
            return;
        }
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                self.ignore(dir, format!("cannot list: {e}"));
                return;
            }
        };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let Some(meta) = self.follow(&p) else {
                continue;
            };
            if meta.is_dir() {
                self.walk(&p, depth + 1, max_depth, keep, out);
            } else if meta.is_file() && keep(&p, depth) {
                out.push((p, meta));
            }
        }
    }

    fn opencode(&mut self, db: &Path) {
        let Some(meta) = self.follow(db) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        match super::opencode::list_sessions(db) {
            Ok(list) => {
                for s in list {
                    let modified = OffsetDateTime::from_unix_timestamp_nanos(
                        i128::from(s.updated_ms) * 1_000_000,
                    )
                    .ok();
                    if !self.recent(modified) {
                        continue;
                    }
                    self.scan.sources.push(Candidate {
                        agent: "opencode",
                        format: Format::Opencode,
                        path: db.display().to_string(),
                        source_session: Some(s.id),
                        bytes: s.bytes,
                        modified: modified.map(rfc3339).unwrap_or_default(),
                    });
                }
            }
            Err(e) => self.ignore(db, e.message),
        }
    }

    fn gemini(&mut self, tmp: &Path) {
        let mut found = Vec::new();
        self.walk(
            tmp,
            1,
            3,
            &|p, depth| {
                depth == 3
                    && is_jsonl(p)
                    && p.parent()
                        .and_then(Path::file_name)
                        .is_some_and(|n| n == "chats")
            },
            &mut found,
        );
        // One source per sessionId: resumes leave stub files holding only a header.
        let mut by_session: HashMap<String, Vec<(PathBuf, std::fs::Metadata)>> = HashMap::new();
        for (p, meta) in found {
            match gemini_session_id(&p) {
                Some(id) => by_session.entry(id).or_default().push((p, meta)),
                None => self.ignore(&p, "not a Gemini CLI chat file (no sessionId header)"),
            }
        }
        let mut groups: Vec<_> = by_session.into_iter().collect();
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, mut files) in groups {
            files.sort_by_key(|(p, m)| (std::cmp::Reverse(m.len()), p.clone()));
            let (main, meta) = files.remove(0);
            for (p, _) in files {
                self.ignore(
                    &p,
                    format!(
                        "a Gemini CLI resume stub of session {id}; its conversation is in {}",
                        main.display()
                    ),
                );
            }
            let modified = meta.modified().ok().map(OffsetDateTime::from);
            if !self.recent(modified) {
                continue;
            }
            self.scan.sources.push(Candidate {
                agent: "gemini",
                format: Format::Gemini,
                path: main.display().to_string(),
                source_session: None,
                bytes: meta.len(),
                modified: modified.map(rfc3339).unwrap_or_default(),
            });
        }
    }
}

/// The `sessionId` of a Gemini CLI chat file's header line (read up to 1 MiB).
fn gemini_session_id(p: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let f = std::fs::File::open(p).ok()?;
    let mut line = Vec::new();
    std::io::BufReader::new(f)
        .take(1 << 20)
        .read_until(b'\n', &mut line)
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&line).ok()?;
    v.get("sessionId")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_date_or_a_timestamp() {
        assert_eq!(
            rfc3339(parse_since("2026-11-20").unwrap()),
            "2026-11-20T00:00:00.000000Z"
        );
        assert_eq!(
            rfc3339(parse_since("2026-11-20T10:00:00+01:00").unwrap()),
            "2026-11-20T09:00:00.000000Z"
        );
        assert!(parse_since("last week").is_err());
    }

    #[test]
    fn symlinks_outside_home_are_ignored_with_a_reason() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let outside = root.path().join("outside");
        let proj = home.join(".claude/projects/-w");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("x.jsonl"), "{}\n").unwrap();
        std::fs::write(proj.join("a.jsonl"), "{}\n").unwrap();
        std::os::unix::fs::symlink(outside.join("x.jsonl"), proj.join("b.jsonl")).unwrap();
        std::os::unix::fs::symlink(proj.join("a.jsonl"), proj.join("c.jsonl")).unwrap();
        let s = scan(&home, &BTreeMap::new(), Some("claude"), None).unwrap();
        let paths: Vec<&str> = s.sources.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert!(paths.iter().any(|p| p.ends_with("a.jsonl")));
        assert!(paths.iter().any(|p| p.ends_with("c.jsonl")));
        assert_eq!(s.ignored.len(), 1, "{:?}", s.ignored);
        assert!(
            s.ignored[0].reason.contains("outside $HOME"),
            "{:?}",
            s.ignored
        );
    }
}
