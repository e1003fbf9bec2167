//! File tools: `read_file`, `list_dir`, `write_file`, `edit_file`, `apply_patch`.
//!
//! Each records a `file` artifact with the sha256 of the whole file as observed (read) or
//! left behind (write, edit), so the checkpoint can tell later whether a fact built on
//! that file still holds. Writes go through a temp file in the same directory and a
//! rename, so a crash never leaves a half-written file and a final-component symlink is
//! replaced rather than followed.
//!
//! `read_file`, `write_file` and `edit_file` touch the file only through descriptors
//! opened beneath the workspace (`confine`), never by absolute path, so a directory
//! swapped for an outward symlink after `resolve` cannot redirect them.

use super::confine;
use super::workspace::{io_error, relative_uri, resolve, Resolve};
use super::{lines_outcome, user_umask, with_output, Artifact, ToolContext, ToolOutcome};
use agentd_base::text::sha256_hex;
use agentd_proto::{AgentError, ErrorKind};
use serde::Deserialize;
use serde_json::json;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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

/// The workspace's descriptor and `path` (resolved) relative to it.
fn anchor<'a>(
    ctx: &ToolContext,
    path: &'a Path,
    given: &str,
) -> Result<(OwnedFd, &'a Path), AgentError> {
    let root = confine::open_root(&ctx.workspace).map_err(|e| io_error(&e, "workspace", given))?;
    let rel = path
        .strip_prefix(&ctx.workspace)
        .map_err(|_| changed(given))?;
    Ok((root, rel))
}

/// The error for a path whose directories changed between `resolve` and the open so
/// that it now leads outside the workspace (or through a symlink the walk refuses).
fn changed(given: &str) -> AgentError {
    AgentError::new(
        ErrorKind::OutsideWorkspace,
        format!(
            "path `{given}` changed while the tool ran and no longer resolves inside the workspace"
        ),
    )
    .with_details(
        json!({"path": given, "rule": "a symlink on the path leads outside the workspace"}),
    )
}

fn open_error(e: &std::io::Error, what: &str, given: &str) -> AgentError {
    if confine::is_escape(e) || e.raw_os_error() == Some(libc::ENOTDIR) {
        changed(given)
    } else {
        io_error(e, what, given)
    }
}

/// Reads a regular file (bounded) through a descriptor opened beneath the workspace,
/// refusing directories with a hint.
fn read_regular(ctx: &ToolContext, path: &Path, given: &str) -> Result<Vec<u8>, AgentError> {
    let (root, rel) = anchor(ctx, path, given)?;
    // `resolve` expanded every symlink, so one met now was put there since: never
    // followed, even one that stays inside (it may lead into a hidden directory).
    // O_NONBLOCK: opening a FIFO must not block the call (it is refused below).
    let fd = confine::open_beneath_no_symlinks(
        &root,
        rel,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )
    .map_err(|e| open_error(&e, "file", given))?;
    let mut file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| io_error(&e, "file", given))?;
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
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // Bounded even if the file grows between fstat and read.
    (&mut file)
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&e, "file", given))?;
    Ok(bytes)
}

pub fn read_file(args: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    let path = resolve(&ctx.workspace, &args.path, Resolve::Existing)?;
    ctx.paths.check(&path, false)?;
    let bytes = read_regular(ctx, &path, &args.path)?;
    if args.offset_line.is_none() && args.limit_lines.is_none() {
        if let Some(mime) = agentd_proto::rpc::image_mime(&bytes) {
            return read_image(ctx, &path, &args.path, bytes, mime);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let (output, raw_selected) = select_lines(&text, args.offset_line, args.limit_lines);
    let mut outcome = ToolOutcome::success(String::new());
    outcome.artifacts.push(file_artifact(ctx, &path, &bytes));
    // The stored resource holds the selected text, i.e. what the cut output stands for.
    let raw = raw_selected.unwrap_or_else(|| bytes.clone());
    Ok(with_output(outcome, &output, &raw, ctx))
}

/// `read_file` of an image: stored once as a resource and referenced in the result's
/// `images`, so the next provider request carries it in its wire's form
/// (docs/turns-and-providers.md#images); the output is a short description, all a
/// provider that takes no images sees. An image over the size sent to providers is
/// described and not attached.
fn read_image(
    ctx: &ToolContext,
    path: &Path,
    given: &str,
    bytes: Vec<u8>,
    mime: &'static str,
) -> Result<ToolOutcome, AgentError> {
    use agentd_proto::replay::MAX_IMAGE_BYTES;
    let n = bytes.len();
    let sha = sha256_hex(&bytes);
    let mut outcome = ToolOutcome::success(String::new());
    outcome.artifacts.push(file_artifact(ctx, path, &bytes));
    let shown = agentd_base::text::clip_chars(given, 200);
    if n as u64 > MAX_IMAGE_BYTES {
        outcome.output = Some(format!(
            "[image: {mime}, {n} bytes, sha256 {sha}] {shown}: over the {MAX_IMAGE_BYTES}-byte \
             (5 MiB) limit for images given to the model, so not attached"
        ));
        return Ok(outcome);
    }
    super::store_resource(&ctx.resources_dir, &bytes)?;
    outcome.output = Some(format!(
        "[image: {mime}, {n} bytes, sha256 {sha}] {shown}: attached as an image"
    ));
    outcome.images = vec![json!({"sha256": sha, "mime": mime, "bytes": n})];
    Ok(outcome)
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
    ctx.paths.check(&dir, false)?;
    let meta = std::fs::metadata(&dir).map_err(|e| io_error(&e, "directory", &given))?;
    if !meta.is_dir() {
        return Err(AgentError::invalid_args(format!(
            "`{given}` is not a directory; use read_file"
        ))
        .with_details(json!({"path": given})));
    }
    // Listed through descriptors beneath the workspace: a directory swapped for a
    // symlink while the listing runs is neither entered nor listed through.
    let (root, rel) = anchor(ctx, &dir, &given)?;
    let fd = confine::open_beneath_no_symlinks(&root, rel, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| open_error(&e, "directory", &given))?;
    let mut lines = Vec::new();
    let mut truncated = false;
    walk(
        &fd,
        &dir,
        "",
        depth,
        &mut lines,
        &mut truncated,
        &given,
        &ctx.paths.hidden,
    )?;
    let cut = truncated.then(|| {
        format!(
            "…[listing stopped at {MAX_LIST_ENTRIES} entries; list a subdirectory or lower depth]"
        )
    });
    Ok(lines_outcome(&lines, "(empty directory)", cut, ctx))
}

/// One directory of a listing, read through `fd` (`dir` names it for the hidden set).
#[allow(clippy::too_many_arguments)]
fn walk(
    fd: &OwnedFd,
    dir: &Path,
    prefix: &str,
    depth: u32,
    out: &mut Vec<String>,
    truncated: &mut bool,
    given: &str,
    hidden: &[std::path::PathBuf],
) -> Result<(), AgentError> {
    let listed = confine::list_entries(fd).map_err(|e| io_error(&e, "directory", given))?;
    // An entry vanishing mid-listing is not an error worth failing the call for.
    let mut entries: Vec<(std::ffi::OsString, libc::mode_t)> = listed
        .into_iter()
        .map(|(n, st)| (n, st.st_mode & libc::S_IFMT))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (os_name, kind) in entries {
        let name = os_name.to_string_lossy().into_owned();
        if out.len() >= MAX_LIST_ENTRIES {
            *truncated = true;
            return Ok(());
        }
        let rel = format!("{prefix}{name}");
        // What the sandbox hides is not listed either.
        if hidden.iter().any(|h| dir.join(&os_name).starts_with(h)) {
            continue;
        }
        if kind == libc::S_IFLNK {
            out.push(format!("{rel}@"));
        } else if kind == libc::S_IFDIR {
            out.push(format!("{rel}/"));
            if depth > 1 && name != ".git" {
                // Swapped for a symlink or gone since it was listed: not entered.
                let Ok(sub) = confine::open_beneath_no_symlinks(
                    fd,
                    Path::new(&os_name),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                ) else {
                    continue;
                };
                walk(
                    &sub,
                    &dir.join(&os_name),
                    &format!("{rel}/"),
                    depth - 1,
                    out,
                    truncated,
                    given,
                    hidden,
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
    ctx.paths.check(&path, true)?;
    let existed = atomic_write(ctx, &path, args.content.as_bytes(), &args.path)?;
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
    ctx.paths.check(&path, true)?;
    let bytes = read_regular(ctx, &path, &args.path)?;
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
    atomic_write(ctx, &path, &new_bytes, &args.path)?;
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    pub input: String,
}

/// `apply_patch` (grammar in [`super::patch`]): every file's new content is computed
/// (and every path resolved and checked against the hidden and protected sets) before
/// anything is written, so a patch that fails to parse, names a path it may not touch
/// or has a chunk that does not match changes no file. A write that then fails puts
/// back the files already written.
pub fn apply_patch(args: ApplyPatchArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    use super::patch::{self, Op};
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    let bad = |e: patch::PatchError| {
        AgentError::invalid_args(format!("apply_patch: {e}; nothing was changed"))
            .with_details(json!({"patch_line": e.line}))
    };
    let parsed = patch::parse(&args.input).map_err(bad)?;
    // What each touched file holds after the patch (`None`: deleted), and the path as
    // the patch gave it; reads see earlier operations of the same patch.
    let mut planned: BTreeMap<PathBuf, (Option<Vec<u8>>, String)> = BTreeMap::new();
    let mut summary = Vec::new();
    let current = |planned: &BTreeMap<PathBuf, (Option<Vec<u8>>, String)>,
                   path: &Path,
                   given: &str|
     -> Result<Vec<u8>, AgentError> {
        match planned.get(path) {
            Some((Some(b), _)) => Ok(b.clone()),
            Some((None, _)) => Err(AgentError::new(
                ErrorKind::NotFound,
                format!(
                    "apply_patch: `{given}` was deleted earlier in this patch; nothing was changed"
                ),
            )
            .with_details(json!({"path": given}))),
            None => read_regular(ctx, path, given),
        }
    };
    for op in &parsed.ops {
        match op {
            Op::Add {
                path: given,
                contents,
            } => {
                let path = resolve(&ctx.workspace, given, Resolve::ForWrite)?;
                ctx.paths.check(&path, true)?;
                summary.push(format!("A {}", relative_uri(&ctx.workspace, &path)));
                planned.insert(path, (Some(contents.clone().into_bytes()), given.clone()));
            }
            Op::Delete { path: given } => {
                let path = resolve(&ctx.workspace, given, Resolve::Existing)?;
                ctx.paths.check(&path, true)?;
                current(&planned, &path, given)?;
                summary.push(format!("D {}", relative_uri(&ctx.workspace, &path)));
                planned.insert(path, (None, given.clone()));
            }
            Op::Update {
                path: given,
                move_to,
                chunks,
            } => {
                let path = resolve(&ctx.workspace, given, Resolve::Existing)?;
                ctx.paths.check(&path, true)?;
                let old = current(&planned, &path, given)?;
                let text = String::from_utf8(old).map_err(|_| {
                    AgentError::invalid_args(format!(
                        "apply_patch: `{given}` is not UTF-8 text; nothing was changed"
                    ))
                    .with_details(json!({"path": given}))
                })?;
                let new = patch::apply_update(&text, chunks, given).map_err(bad)?;
                match move_to {
                    Some(to) => {
                        let dest = resolve(&ctx.workspace, to, Resolve::ForWrite)?;
                        ctx.paths.check(&dest, true)?;
                        summary.push(format!(
                            "M {} -> {}",
                            relative_uri(&ctx.workspace, &path),
                            relative_uri(&ctx.workspace, &dest)
                        ));
                        if dest != path {
                            planned.insert(path, (None, given.clone()));
                        }
                        planned.insert(dest, (Some(new.into_bytes()), to.clone()));
                    }
                    None => {
                        summary.push(format!("M {}", relative_uri(&ctx.workspace, &path)));
                        planned.insert(path, (Some(new.into_bytes()), given.clone()));
                    }
                }
            }
        }
    }
    // The files as they are now, to put back if a write fails.
    let mut before: Vec<(PathBuf, String, Option<Vec<u8>>)> = Vec::new();
    for (path, (_, given)) in &planned {
        let was = read_regular(ctx, path, given).ok();
        before.push((path.clone(), given.clone(), was));
    }
    let mut done: Vec<usize> = Vec::new();
    for (i, (path, (bytes, given))) in planned.iter().enumerate() {
        let res = match bytes {
            Some(b) => atomic_write(ctx, path, b, given).map(|_| ()),
            None => remove_file(ctx, path, given),
        };
        if let Err(e) = res {
            for &j in done.iter().rev() {
                let (p, g, was) = &before[j];
                let _ = match was {
                    Some(b) => atomic_write(ctx, p, b, g).map(|_| ()),
                    None => remove_file(ctx, p, g),
                };
            }
            return Err(e);
        }
        done.push(i);
    }
    let mut outcome = ToolOutcome::success(format!("applied the patch:\n{}", summary.join("\n")));
    for (path, (bytes, _)) in &planned {
        if let Some(b) = bytes {
            outcome.artifacts.push(file_artifact(ctx, path, b));
        }
    }
    Ok(outcome)
}

/// Removes a regular file (or a symlink, never followed) beneath the workspace.
fn remove_file(ctx: &ToolContext, path: &Path, given: &str) -> Result<(), AgentError> {
    let (root, rel) = anchor(ctx, path, given)?;
    let (Some(parent_rel), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(
            AgentError::invalid_args(format!("`{given}` is the workspace itself"))
                .with_details(json!({"path": given})),
        );
    };
    let parent =
        confine::open_parent_for_write_no_symlinks(&root, parent_rel, 0o777 & !user_umask())
            .map_err(|e| open_error(&e, "directory for", given))?;
    if let Some(st) = confine::stat_at(&parent, name).map_err(|e| io_error(&e, "file", given))? {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(
                AgentError::invalid_args(format!("`{given}` is a directory"))
                    .with_details(json!({"path": given})),
            );
        }
    }
    confine::unlink_in(&parent, name).map_err(|e| io_error(&e, "delete", given))?;
    confine::sync_dir(&parent).map_err(|e| io_error(&e, "delete", given))
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
/// the permissions of a file it replaces (a new file gets 0666 minus the user's umask).
/// Creates missing parent directories (0777 minus the user's umask). Everything happens
/// relative to the parent's descriptor, opened beneath the workspace. Returns whether a
/// file was replaced.
fn atomic_write(
    ctx: &ToolContext,
    path: &Path,
    bytes: &[u8],
    given: &str,
) -> Result<bool, AgentError> {
    let (root, rel) = anchor(ctx, path, given)?;
    let (Some(parent_rel), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(
            AgentError::invalid_args(format!("`{given}` is the workspace itself"))
                .with_details(json!({"path": given})),
        );
    };
    let dir_mode = 0o777 & !user_umask();
    // No symlink followed, not even one that stays inside: `resolve` judged the path
    // through the plain directories it saw, and a symlink swapped in since could lead
    // into `.git/hooks` or another path the file tools refuse to write.
    let parent = confine::open_parent_for_write_no_symlinks(&root, parent_rel, dir_mode)
        .map_err(|e| open_error(&e, "directory for", given))?;
    let existing = confine::stat_at(&parent, name).map_err(|e| io_error(&e, "file", given))?;
    if let Some(st) = &existing {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(
                AgentError::invalid_args(format!("`{given}` is a directory"))
                    .with_details(json!({"path": given})),
            );
        }
    }
    // A replaced regular file keeps its mode; a new one (or a symlink being replaced)
    // gets the user's (see `user_umask`).
    let mode = match &existing {
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => st.st_mode & 0o7777,
        _ => 0o666 & !user_umask(),
    };
    let tmp = OsString::from(format!(
        ".{}.agentd-{:08x}.tmp",
        name.to_string_lossy(),
        rand::random::<u32>()
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = confine::create_new(&parent, &tmp)?;
        f.write_all(bytes)?;
        // Set explicitly: the daemon's own umask (0077) masked the mode at creation.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        confine::rename_in(&parent, &tmp, name)?;
        confine::sync_dir(&parent)
    })();
    result.map_err(|e| {
        let _ = confine::unlink_in(&parent, &tmp);
        io_error(&e, "write", given)
    })?;
    Ok(existing.is_some())
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
