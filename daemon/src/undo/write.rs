//! The daemon's own writes into a workspace when it reverts (docs/snapshots.md#revert):
//! the plan a shadow repository gives ([`crate::snapshot::RestoreOp`]) applied through
//! descriptors only. The workspace is opened once; every parent directory below it with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (a component walk with `O_NOFOLLOW`
//! where the kernel has no openat2), missing ones made with `mkdirat`; each file is
//! written to an `O_EXCL` temporary in that directory and renamed over its name there.
//! A directory on the way swapped for a symlink (by a command of another session on the
//! same workspace, at that very moment) makes that path fail; nothing is ever read,
//! created or removed outside the workspace, or through a symlink inside it.

use crate::snapshot::RestoreOp;
use agentd_tools::confine;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

/// Splits a workspace-relative path into its parent and name; `None` for anything but
/// plain names (`..`, a root, an empty path).
fn split(rel: &str) -> Option<(&Path, &OsStr)> {
    let p = Path::new(rel);
    if p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some((p.parent()?, p.file_name()?))
}

fn temp_name(name: &OsStr) -> OsString {
    let mut t = OsString::from(".");
    t.push(name);
    t.push(format!(".agentd-revert-{:08x}", rand::random::<u32>()));
    t
}

/// Writes `name` in `dir` as a file holding `bytes` (or a symlink to `target`) by way of
/// a temporary renamed over it.
fn put(dir: &OwnedFd, name: &OsStr, op: &RestoreOp, umask: u32) -> std::io::Result<()> {
    if let Some(st) = confine::stat_at(dir, name)? {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(std::io::Error::other("a directory is in its place"));
        }
    }
    let tmp = temp_name(name);
    let written = match op {
        RestoreOp::File {
            bytes, executable, ..
        } => (|| {
            let mut f = confine::create_new(dir, &tmp)?;
            f.write_all(bytes)?;
            let mode = if *executable { 0o777 } else { 0o666 };
            f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode & !umask))?;
            f.sync_all()
        })(),
        RestoreOp::Symlink { target, .. } => confine::symlink_in(dir, target, &tmp),
        RestoreOp::Remove { .. } => return Ok(()),
    };
    let done = written.and_then(|()| confine::rename_in(dir, &tmp, name));
    if done.is_err() {
        let _ = confine::unlink_in(dir, &tmp);
    }
    done
}

/// Removes `name` in `parent` (a directory in its place is left alone), then the
/// directories that leaves empty, up to the workspace.
fn remove(root: &OwnedFd, parent: &Path, name: &OsStr) -> std::io::Result<()> {
    let dir =
        match confine::open_beneath_no_symlinks(root, parent, libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(d) => d,
            // Its directory is gone already: so is the file.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        };
    match confine::stat_at(&dir, name)? {
        None => return Ok(()),
        Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => return Ok(()),
        Some(_) => confine::unlink_in(&dir, name)?,
    }
    let mut p = parent.to_path_buf();
    while let (Some(up), Some(n)) = (p.parent().map(Path::to_path_buf), p.file_name()) {
        let n = n.to_os_string();
        let Ok(d) =
            confine::open_beneath_no_symlinks(root, &up, libc::O_RDONLY | libc::O_DIRECTORY)
        else {
            break;
        };
        if confine::rmdir_in(&d, &n).is_err() {
            break;
        }
        p = up;
    }
    Ok(())
}

/// Applies `ops` to the workspace `ws`; each path that could not be written is named
/// with why. Every op is tried.
pub fn apply(ws: &Path, ops: &[RestoreOp], umask: u32) -> Result<(), String> {
    let root = confine::open_root(ws).map_err(|e| format!("{}: {e}", ws.display()))?;
    let mut failed = Vec::new();
    for op in ops {
        let path = match op {
            RestoreOp::File { path, .. }
            | RestoreOp::Symlink { path, .. }
            | RestoreOp::Remove { path } => path,
        };
        let Some((parent, name)) = split(path) else {
            failed.push(format!("{path}: not a plain relative path"));
            continue;
        };
        let res = match op {
            RestoreOp::Remove { .. } => remove(&root, parent, name),
            _ => confine::open_parent_for_write_no_symlinks(&root, parent, 0o777 & !umask)
                .and_then(|dir| put(&dir, name, op, umask)),
        };
        if let Err(e) = res {
            let why = if confine::is_escape(&e) || e.raw_os_error() == Some(libc::ENOTDIR) {
                "a directory on its path is a symlink or a file now".to_string()
            } else {
                e.to_string()
            };
            failed.push(format!("{path}: {why}"));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}
