//! `search`: regex over file contents, walking the workspace like ripgrep does.
//!
//! The walk uses the `ignore` crate's standard filters (.gitignore, .ignore, git excludes,
//! hidden files skipped) with `require_git(false)`, so a workspace's .gitignore counts
//! even before `git init`. Symlinks are not followed, so a link cannot lead the search
//! outside the workspace. The optional `glob` only narrows the set of files; unlike
//! ripgrep's `-g` it never re-includes an ignored file. Order is deterministic: entries
//! are walked sorted by file name, lines in file order.
//!
//! The walk names files by path, and a command may swap a directory for a symlink to
//! one outside while it runs; so each file is opened beneath a descriptor of the
//! workspace with no symlink followed (`confine::open_beneath_no_symlinks`), checked to
//! be a regular file on its own descriptor, and read through it: a name the walk found
//! outside either is not there inside or is the workspace's own file.

use super::confine;
use super::workspace::{io_error, relative_uri, resolve, Resolve};
use super::{lines_outcome, ToolContext, ToolOutcome};
use agentd_base::text::clip_chars;
use agentd_proto::{AgentError, ErrorKind};
use serde::Deserialize;
use serde_json::json;
use std::io::Read;

pub const DEFAULT_MAX_RESULTS: usize = 100;
pub const MAX_RESULTS: usize = 1000;
/// A matched line longer than this many chars is clipped in the output.
const MAX_LINE_CHARS: usize = 300;
/// Files larger than this are skipped (they are rarely source).
const MAX_SEARCH_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// A NUL byte in this prefix marks a file as binary, as git and ripgrep decide.
const BINARY_PROBE: usize = 8 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub max_results: Option<usize>,
}

pub fn search(args: SearchArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    let max = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS);
    if max == 0 || max > MAX_RESULTS {
        return Err(AgentError::invalid_args(format!(
            "max_results must be between 1 and {MAX_RESULTS}"
        )));
    }
    let re = regex::bytes::RegexBuilder::new(&args.pattern)
        .size_limit(10 * 1024 * 1024)
        .build()
        .map_err(|e| {
            AgentError::invalid_args(format!("invalid regex: {e}"))
                .with_details(json!({"pattern": args.pattern}))
        })?;
    let given = args.path.clone().unwrap_or_else(|| ".".to_string());
    let root = resolve(&ctx.workspace, &given, Resolve::Existing)?;
    ctx.paths.check(&root, false)?;
    let glob = match &args.glob {
        None => None,
        Some(g) => {
            let mut b = ignore::overrides::OverrideBuilder::new(&root);
            b.add(g).map_err(|e| {
                AgentError::invalid_args(format!("invalid glob: {e}"))
                    .with_details(json!({"glob": g}))
            })?;
            Some(
                b.build()
                    .map_err(|e| AgentError::invalid_args(format!("invalid glob: {e}")))?,
            )
        }
    };

    let ws = confine::open_root(&ctx.workspace).map_err(|e| io_error(&e, "workspace", &given))?;
    let walker = ignore::WalkBuilder::new(&root)
        .require_git(false)
        .follow_links(false)
        .max_filesize(Some(MAX_SEARCH_FILE_BYTES))
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut lines: Vec<String> = Vec::new();
    let mut truncated = false;
    'files: for entry in walker {
        if ctx.cancel.is_cancelled() {
            return Err(AgentError::new(
                ErrorKind::Interrupted,
                "search was interrupted",
            ));
        }
        // Unreadable directories or broken entries are skipped, as a shell search would.
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        // What the sandbox hides is not searched either.
        if ctx.paths.hidden.iter().any(|h| entry.path().starts_with(h)) {
            continue;
        }
        let path = entry.path();
        if let Some(ov) = &glob {
            if !ov.matched(path, false).is_whitelist() {
                continue;
            }
        }
        let Some(bytes) = read_beneath(&ws, &ctx.workspace, path) else {
            continue;
        };
        if memchr::memchr(0, &bytes[..bytes.len().min(BINARY_PROBE)]).is_some() {
            continue;
        }
        let rel = relative_uri(&ctx.workspace, path);
        // A final newline ends the last line; it does not start an empty one.
        let body = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        for (i, line) in body.split(|b| *b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if re.is_match(line) {
                if lines.len() >= max {
                    truncated = true;
                    break 'files;
                }
                let text = clip_chars(&String::from_utf8_lossy(line), MAX_LINE_CHARS);
                lines.push(format!("{rel}:{}:{text}", i + 1));
            }
        }
    }
    let cut =
        truncated.then(|| format!("…[stopped at {max} matches; narrow the pattern, path or glob]"));
    Ok(lines_outcome(&lines, "no matches", cut, ctx))
}

/// The regular file at `path` (under `workspace`), opened beneath `ws` with no symlink
/// followed and read through its descriptor, up to the size cap; `None` for anything
/// else (gone, swapped, not a regular file, too large, unreadable).
fn read_beneath(
    ws: &std::os::fd::OwnedFd,
    workspace: &std::path::Path,
    path: &std::path::Path,
) -> Option<Vec<u8>> {
    let rel = path.strip_prefix(workspace).ok()?;
    let fd = confine::open_beneath_no_symlinks(
        ws,
        rel,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )
    .ok()?;
    let mut f = std::fs::File::from(fd);
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_SEARCH_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.by_ref()
        .take(MAX_SEARCH_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= MAX_SEARCH_FILE_BYTES).then_some(bytes)
}
