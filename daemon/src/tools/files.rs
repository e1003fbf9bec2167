//! File tools: `read_file`, `list_dir`, `write_file`, `edit_file`.
//!
//! Each records a `file` artifact with the sha256 of the whole file as observed (read) or
//! left behind (write, edit), so the checkpoint can tell later whether a fact built on
//! that file still holds. Writes go through a temp file in the same directory and a
//! rename, so a crash never leaves a half-written file and a final-component symlink is
//! replaced rather than followed.

use super::workspace::{io_error, relative_uri, resolve, Resolve};
use super::{user_umask, with_output, Artifact, ToolContext, ToolOutcome};
use crate::text::sha256_hex;
use agentd_proto::AgentError;
use serde::Deserialize;
use serde_json::json;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Files above this are refused by `read_file` and `edit_file` (use `shell` with
/// `head`/`sed` for huge files) so one call cannot exhaust memory.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Upper bound on `list_dir` entries.
pub const MAX_LIST_ENTRIES: usize = 1000;
const MAX_LIST_DEPTH: u32 = 10;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    pub path: String,
    #[serde(default)]
    pub offset_line: Option<u64>,
    #[serde(default)]
    pub limit_lines: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub depth: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    pub path: String,
    pub content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    pub path: String,
    pub old: String,
    pub new: String,
}

fn file_artifact(ctx: &ToolContext, path: &Path, bytes: &[u8]) -> Artifact {
    Artifact {
        uri: relative_uri(&ctx.workspace, path),
        kind: "file",
        sha256: Some(sha256_hex(bytes)),
    }
}

/// Reads a regular file (bounded), refusing directories with a hint.
fn read_regular(path: &Path, given: &str) -> Result<Vec<u8>, AgentError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(&e, "file", given))?;
    if meta.is_dir() {
        return Err(
            AgentError::invalid_args(format!("`{given}` is a directory; use list_dir"))
                .with_details(json!({"path": given})),
        );
    }
    if !meta.is_file() {
        // A FIFO or a device would block the call or never end.
        return Err(
            AgentError::invalid_args(format!("`{given}` is not a regular file"))
                .with_details(json!({"path": given})),
        );
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(AgentError::invalid_args(format!(
            "`{given}` is {} bytes, over the {MAX_FILE_BYTES}-byte limit; read a slice with shell (head, sed -n)",
            meta.len()
        ))
        .with_details(json!({"path": given, "bytes": meta.len()})));
    }
    std::fs::read(path).map_err(|e| io_error(&e, "file", given))
}

pub fn read_file(args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    let path = resolve(&ctx.workspace, &args.path, Resolve::Existing)?;
    let bytes = read_regular(&path, &args.path)?;
    let text = String::from_utf8_lossy(&bytes);
    let (output, raw_selected) = select_lines(&text, args.offset_line, args.limit_lines);
    let mut outcome = ToolOutcome::success(String::new());
    outcome.artifacts.push(file_artifact(ctx, &path, &bytes));
    // The stored resource holds the selected text, i.e. what the cut output stands for.
    let raw = raw_selected.unwrap_or_else(|| bytes.clone());
    Ok(with_output(outcome, &output, &raw, ctx))
}

/// Selects lines `offset..offset+limit` (1-based). Returns the output text and, when a
/// range was selected, the bytes it stands for (else the whole file is meant).
fn select_lines(text: &str, offset: Option<u64>, limit: Option<u64>) -> (String, Option<Vec<u8>>) {
    if offset.unwrap_or(1) <= 1 && limit.is_none() {
        return (text.to_string(), None);
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let total = lines.len() as u64;
    let start = offset.unwrap_or(1).max(1);
    if start > total {
        return (
            format!("…[offset_line {start} is past the end: the file has {total} lines]"),
            Some(Vec::new()),
        );
    }
    let end = match limit {
        Some(l) => start.saturating_add(l.max(1)).saturating_sub(1).min(total),
        None => total,
    };
    // Both bounds are ≤ total, which came from a usize, so the casts are lossless.
    let body: String = lines[(start - 1) as usize..end as usize].concat();
    let raw = body.clone().into_bytes();
    let mut out = body;
    if start > 1 || end < total {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!("…[lines {start}-{end} of {total}]"));
    }
    (out, Some(raw))
}

pub fn list_dir(args: ListDirArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    let given = args.path.unwrap_or_else(|| ".".to_string());
    let depth = args.depth.unwrap_or(1);
    if depth == 0 || depth > MAX_LIST_DEPTH {
        return Err(AgentError::invalid_args(format!(
            "depth must be between 1 and {MAX_LIST_DEPTH}"
        ))
        .with_details(json!({"depth": depth})));
    }
    let dir = resolve(&ctx.workspace, &given, Resolve::Existing)?;
    let meta = std::fs::metadata(&dir).map_err(|e| io_error(&e, "directory", &given))?;
    if !meta.is_dir() {
        return Err(AgentError::invalid_args(format!(
            "`{given}` is not a directory; use read_file"
        ))
        .with_details(json!({"path": given})));
    }
    let mut lines = Vec::new();
    let mut truncated = false;
    walk(&dir, "", depth, &mut lines, &mut truncated, &given)?;
    let mut out = if lines.is_empty() {
        "(empty directory)".to_string()
    } else {
        lines.join("\n")
    };
    if truncated {
        out.push_str(&format!(
            "\n…[listing stopped at {MAX_LIST_ENTRIES} entries; list a subdirectory or lower depth]"
        ));
    }
    let raw = out.clone().into_bytes();
    Ok(with_output(
        ToolOutcome::success(String::new()),
        &out,
        &raw,
        ctx,
    ))
}

fn walk(
    dir: &Path,
    prefix: &str,
    depth: u32,
    out: &mut Vec<String>,
    truncated: &mut bool,
    given: &str,
) -> Result<(), AgentError> {
    let rd = std::fs::read_dir(dir).map_err(|e| io_error(&e, "directory", given))?;
    let mut entries: Vec<(String, std::fs::FileType)> = Vec::new();
    for entry in rd {
        // An entry vanishing mid-listing is not an error worth failing the call for.
        let Ok(entry) = entry else { continue };
        let Ok(ft) = entry.file_type() else { continue };
        entries.push((entry.file_name().to_string_lossy().into_owned(), ft));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, ft) in entries {
        if out.len() >= MAX_LIST_ENTRIES {
            *truncated = true;
            return Ok(());
        }
        let rel = format!("{prefix}{name}");
        if ft.is_symlink() {
            out.push(format!("{rel}@"));
        } else if ft.is_dir() {
            out.push(format!("{rel}/"));
            if depth > 1 && name != ".git" {
                walk(
                    &dir.join(&name),
                    &format!("{rel}/"),
                    depth - 1,
                    out,
                    truncated,
                    given,
                )?;
            }
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

pub fn write_file(args: WriteFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    let path = resolve(&ctx.workspace, &args.path, Resolve::ForWrite)?;
    if path.is_dir() {
        return Err(
            AgentError::invalid_args(format!("`{}` is a directory", args.path))
                .with_details(json!({"path": args.path})),
        );
    }
    let existed = path.exists();
    atomic_write(&path, args.content.as_bytes(), &args.path)?;
    let mut outcome = ToolOutcome::success(format!(
        "{} {} ({} bytes)",
        if existed { "overwrote" } else { "created" },
        relative_uri(&ctx.workspace, &path),
        args.content.len()
    ));
    outcome
        .artifacts
        .push(file_artifact(ctx, &path, args.content.as_bytes()));
    Ok(outcome)
}

pub fn edit_file(args: EditFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    if args.old.is_empty() {
        return Err(
            AgentError::invalid_args("`old` is empty; give the exact text to replace")
                .with_details(json!({"path": args.path})),
        );
    }
    let path = resolve(&ctx.workspace, &args.path, Resolve::Existing)?;
    let bytes = read_regular(&path, &args.path)?;
    let positions = find_all(&bytes, args.old.as_bytes());
    match positions.len() {
        0 => {
            return Err(AgentError::invalid_args(format!(
                "no match for `old` in `{}`; read the file and copy the exact text",
                args.path
            ))
            .with_details(json!({"path": args.path, "matches": 0})))
        }
        1 => {}
        n => {
            return Err(AgentError::invalid_args(format!(
                "`old` matches {n} places in `{}`; include more surrounding text so it matches exactly once",
                args.path
            ))
            .with_details(json!({"path": args.path, "matches": n})))
        }
    }
    let at = positions[0];
    let mut new_bytes = Vec::with_capacity(bytes.len() - args.old.len() + args.new.len());
    new_bytes.extend_from_slice(&bytes[..at]);
    new_bytes.extend_from_slice(args.new.as_bytes());
    new_bytes.extend_from_slice(&bytes[at + args.old.len()..]);
    atomic_write(&path, &new_bytes, &args.path)?;
    let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
    let mut outcome = ToolOutcome::success(format!(
        "edited {} at line {line} (1 replacement, {} bytes now)",
        relative_uri(&ctx.workspace, &path),
        new_bytes.len()
    ));
    outcome
        .artifacts
        .push(file_artifact(ctx, &path, &new_bytes));
    Ok(outcome)
}

/// Start offsets of every occurrence of `needle`, overlapping ones included: `aa` in
/// `aaa` is ambiguous and must not count as a single match.
fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    let finder = memchr::memmem::Finder::new(needle);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = finder.find(&hay[from..]) {
        out.push(from + i);
        from += i + 1;
        if from > hay.len() {
            break;
        }
    }
    out
}

/// Writes `bytes` to `path` through a synced temp file in the same directory, keeping
/// the permissions of a file it replaces (a new file gets 0666 minus the user's umask). Creates missing parent directories (the
/// caller resolved `path` inside the workspace, so they are too).
fn atomic_write(path: &Path, bytes: &[u8], given: &str) -> Result<(), AgentError> {
    let parent = path
        .parent()
        .ok_or_else(|| AgentError::invalid_args(format!("`{given}` has no parent directory")))?;
    create_dirs(parent).map_err(|e| io_error(&e, "directory for", given))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = parent.join(format!(".{name}.agentd-{:08x}.tmp", rand::random::<u32>()));
    // A replaced file keeps its mode; a new one gets the user's (see `user_umask`).
    let perms = std::fs::metadata(path)
        .map(|m| m.permissions())
        .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o666 & !user_umask()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        // Set explicitly: the daemon's own umask (0077) masked the mode at creation.
        f.set_permissions(perms)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(parent)?.sync_all()
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(&e, "write", given)
    })
}

/// `create_dir_all` that gives each directory it creates mode 0777 minus the user's
/// umask rather than the daemon's.
fn create_dirs(dir: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut cur = dir;
    while std::fs::symlink_metadata(cur).is_err() {
        missing.push(cur);
        match cur.parent() {
            Some(p) => cur = p,
            None => break,
        }
    }
    let mode = std::fs::Permissions::from_mode(0o777 & !user_umask());
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => std::fs::set_permissions(d, mode.clone())?,
            // Created meanwhile by someone else: theirs to keep as it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    // Fails as create_dir_all would if `dir` exists but is not a directory.
    if !dir.is_dir() {
        return std::fs::create_dir_all(dir);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_all_counts_overlaps() {
        assert_eq!(find_all(b"aaa", b"aa"), vec![0, 1]);
        assert_eq!(find_all(b"abcabc", b"abc"), vec![0, 3]);
        assert!(find_all(b"abc", b"x").is_empty());
    }

    #[test]
    fn select_lines_ranges() {
        let t = "a\nb\nc\n";
        assert_eq!(select_lines(t, None, None).0, t);
        assert_eq!(select_lines(t, Some(2), Some(1)).0, "b\n…[lines 2-2 of 3]");
        assert_eq!(select_lines(t, Some(2), None).0, "b\nc\n…[lines 2-3 of 3]");
        assert_eq!(select_lines(t, Some(1), Some(10)).0, t);
        assert!(select_lines(t, Some(9), None).0.contains("past the end"));
    }
}
