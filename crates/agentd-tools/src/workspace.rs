//! Path confinement: every path a tool touches resolves inside the session workspace
//! (docs/turns-and-providers.md#tools) or the call fails with `outside_workspace`.
//!
//! Resolution follows the kernel's own rules rather than lexical cleanup: components are
//! walked one at a time from the filesystem root, every existing symlink is expanded where
//! it is met (so `link/..` means the parent of the link's *target*, as `open(2)` would
//! see it), and only the final, fully resolved path is compared with the canonical
//! workspace. Dangling symlinks are expanded too, so a write through a link that points
//! at a not-yet-existing file outside the workspace is refused rather than created there.
//! A missing component does not end the checks: `..` after it climbs back into real
//! directories and resolution goes on from there, symlinks included. (`open(2)` would
//! fail such a path with `ENOENT`; here it resolves as if the missing directory
//! existed, and the path judged is the one the later open reaches.) So
//! `nope/../escape/x` with `escape` a symlink out of the workspace is
//! `outside_workspace`.
//!
//! This check alone leaves a check-then-use window (a directory swapped for a symlink
//! between `resolve` and the open). The file tools close it by opening the resolved path
//! relative to a workspace descriptor with the kernel refusing to leave it (`confine`).
//! `list_dir` and `search` still walk by path after this check.

use agentd_proto::{AgentError, ErrorKind};
use serde_json::json;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// What the caller will do with the resolved path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// The path must exist (read, list, search, edit); missing → `not_found`.
    Existing,
    /// The path may not exist yet; its missing tail will be created inside the workspace.
    ForWrite,
}

/// Linux's own limit on symlink expansions per lookup (`ELOOP`).
const MAX_SYMLINKS: usize = 40;

/// Resolves `path` (relative to `workspace`, or absolute) to an absolute path inside the
/// canonical workspace. See the module doc for the rules.
pub fn resolve(workspace: &Path, path: &str, mode: Resolve) -> Result<PathBuf, AgentError> {
    if path.is_empty() {
        return Err(AgentError::invalid_args("path is empty").with_details(json!({"path": path})));
    }
    if path.contains('\0') {
        return Err(AgentError::invalid_args("path contains a NUL byte")
            .with_details(json!({"path": path})));
    }
    let ws = std::fs::canonicalize(workspace).map_err(|e| {
        io_error(&e, "workspace", path).with_details(json!({"path": path, "workspace": workspace}))
    })?;
    let given = Path::new(path);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        ws.join(given)
    };

    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front_components(&mut pending, &joined);
    let mut cur = PathBuf::from("/");
    let mut symlinks = 0usize;
    // How many trailing components of `cur` do not exist. Every component is still
    // looked up on the filesystem, never skipped: a `..` after a missing one climbs back
    // into real directories, where a symlink must be expanded like any other
    // (`nope/../escape/x` is `escape`'s target, not a lexical path).
    let mut missing = 0usize;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            cur.pop();
            missing = missing.saturating_sub(1);
            continue;
        }
        let next = cur.join(&name);
        if missing > 0 {
            // Nothing exists below a missing directory; skip the useless lookup.
            missing += 1;
            cur = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                symlinks += 1;
                if symlinks > MAX_SYMLINKS {
                    return Err(AgentError::invalid_args(format!(
                        "too many symlinks while resolving `{path}`"
                    ))
                    .with_details(json!({"path": path})));
                }
                let target =
                    std::fs::read_link(&next).map_err(|e| io_error(&e, "symlink", path))?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push_front_components(&mut pending, &target);
            }
            Ok(_) => cur = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing = 1;
                cur = next;
            }
            Err(e) => return Err(io_error(&e, "path", path)),
        }
    }

    if !cur.starts_with(&ws) {
        let rule = if given.is_absolute() && !lexically_inside(given, &ws) {
            "absolute paths must be inside the workspace"
        } else if symlinks > 0 {
            "a symlink on the path leads outside the workspace"
        } else {
            "`..` climbs out of the workspace"
        };
        return Err(AgentError::new(
            ErrorKind::OutsideWorkspace,
            format!("path `{path}` resolves outside the workspace: {rule}"),
        )
        .with_details(json!({"path": path, "rule": rule, "workspace": ws})));
    }
    if missing > 0 && mode == Resolve::Existing {
        return Err(
            AgentError::not_found(format!("no such file or directory: `{path}`"))
                .with_details(json!({"path": path})),
        );
    }
    Ok(cur)
}

/// The artifact uri of a resolved path: workspace-relative, `/`-separated, no scheme
/// (`src/main.rs`); the workspace itself is `.`.
pub fn relative_uri(workspace: &Path, resolved: &Path) -> String {
    let rel = resolved.strip_prefix(workspace).unwrap_or(resolved);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// Maps an I/O error on `what` to a contract error kind.
pub(crate) fn io_error(e: &io::Error, what: &str, path: &str) -> AgentError {
    let kind = match e.kind() {
        io::ErrorKind::NotFound => ErrorKind::NotFound,
        io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        _ => ErrorKind::Internal,
    };
    AgentError::new(kind, format!("{what} `{path}`: {e}")).with_details(json!({"path": path}))
}

fn push_front_components(pending: &mut VecDeque<OsString>, path: &Path) {
    let mut names = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => names.push(n.to_os_string()),
            Component::ParentDir => names.push(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    for n in names.into_iter().rev() {
        pending.push_front(n);
    }
}

fn lexically_inside(path: &Path, ws: &Path) -> bool {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out.starts_with(ws)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let canon = std::fs::canonicalize(dir.path()).unwrap();
        (dir, canon)
    }

    #[test]
    fn relative_and_dotdot_inside() {
        let (_d, ws) = ws();
        std::fs::create_dir(ws.join("a")).unwrap();
        std::fs::write(ws.join("b.txt"), "x").unwrap();
        let p = resolve(&ws, "a/../b.txt", Resolve::Existing).unwrap();
        assert_eq!(p, ws.join("b.txt"));
        assert_eq!(relative_uri(&ws, &p), "b.txt");
        assert_eq!(resolve(&ws, ".", Resolve::Existing).unwrap(), ws);
        assert_eq!(relative_uri(&ws, &ws), ".");
    }

    #[test]
    fn escapes_name_their_rule() {
        let (_d, ws) = ws();
        let e = resolve(&ws, "../x", Resolve::ForWrite).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutsideWorkspace);
        assert!(e.message.contains("`..`"), "{}", e.message);
        assert_eq!(e.details["path"], "../x");
        let e = resolve(&ws, "/etc/passwd", Resolve::Existing).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutsideWorkspace);
        assert!(e.message.contains("absolute"), "{}", e.message);
    }

    #[test]
    fn dangling_symlink_outside_is_refused_for_write() {
        let (_d, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path().join("new.txt"), ws.join("link")).unwrap();
        let e = resolve(&ws, "link", Resolve::ForWrite).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutsideWorkspace);
        assert!(e.message.contains("symlink"), "{}", e.message);
    }

    #[test]
    fn symlink_dotdot_follows_target() {
        let (_d, ws) = ws();
        std::fs::create_dir_all(ws.join("deep/inner")).unwrap();
        symlink(ws.join("deep/inner"), ws.join("l")).unwrap();
        std::fs::write(ws.join("deep/f"), "x").unwrap();
        // `l/..` is `deep`, not the workspace, exactly as the kernel resolves it.
        let p = resolve(&ws, "l/../f", Resolve::Existing).unwrap();
        assert_eq!(p, ws.join("deep/f"));
    }

    #[test]
    fn missing_is_not_found_only_when_existing_required() {
        let (_d, ws) = ws();
        let e = resolve(&ws, "nope/x", Resolve::Existing).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        let p = resolve(&ws, "nope/x", Resolve::ForWrite).unwrap();
        assert_eq!(p, ws.join("nope/x"));
    }

    #[test]
    fn symlink_loop_is_invalid() {
        let (_d, ws) = ws();
        symlink(ws.join("a"), ws.join("b")).unwrap();
        symlink(ws.join("b"), ws.join("a")).unwrap();
        let e = resolve(&ws, "a", Resolve::Existing).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
    }
}
