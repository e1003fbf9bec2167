//! Descriptor-based opens beneath the workspace, closing the check-then-use window that
//! [`super::workspace::resolve`] alone leaves open.
//!
//! `resolve` judges a path (its rules and error messages are the contract), but between
//! that check and the open a directory on the path can be swapped for a symlink that
//! leads outside. So the file tools never open the resolved path by name from `/`: they
//! hold a descriptor of the workspace and open the resolved path *relative to it*, with
//! the kernel refusing to leave it:
//!
//! - `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (Linux
//!   5.6+): any `..` or absolute path fails with `EXDEV`, any symlink with `ELOOP`. The
//!   file tools open only paths `resolve` already expanded, so a symlink met now was
//!   swapped in since, and it is not followed even when it stays inside: it could lead
//!   into a path the tools refuse (`.git/hooks`, a hidden directory) that `resolve` never
//!   judged. ([`open_beneath`] and [`open_parent_for_write`], which follow a symlink that
//!   stays inside, are for callers that judge the opened file on its descriptor.)
//! - Where the kernel lacks it (`ENOSYS`, or a seccomp filter answering `EPERM`), a
//!   component walk: each directory is opened with `openat(dir, name, O_NOFOLLOW |
//!   O_DIRECTORY)` from the previous descriptor and the last component with
//!   `O_NOFOLLOW`, so no symlink is followed at all (a resolved path has none, so one met
//!   now means the tree changed under the call).
//!
//! Writes then work inside the parent's descriptor (`openat` of an `O_EXCL` temp file,
//! `renameat`, `fsync` of the directory), so a path swapped after the parent was opened
//! cannot redirect them either. Missing parent directories are created one component at
//! a time with `mkdirat` and opened with `O_NOFOLLOW`.
//!
//! The descriptor operations themselves are `agentd-fsat`'s, shared with the snapshot
//! scan and the sandbox; this module chooses how the file tools use them.

pub use agentd_fsat::{
    create_new, force_component_walk, is_escape, open_root, rename_in, rmdir_in, stat_at, strategy,
    symlink_in, sync_dir, unlink_in,
};
use agentd_fsat::{open_at, open_beneath as beneath, BENEATH, NO_SYMLINKS};
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Opens `rel` beneath `root` with `flags` (`O_CREAT` is not supported here; writes use
/// [`open_parent_for_write`]), following a symlink only while it stays inside (with
/// `openat2`; the component walk follows none). Escapes fail with `EXDEV` (openat2) or
/// `ELOOP`/`ENOTDIR` (component walk); see [`is_escape`].
pub fn open_beneath(root: &OwnedFd, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    beneath(root, rel, flags, BENEATH)
}

/// As [`open_beneath`], but no symlink is followed anywhere on the way, not even one
/// that stays inside (`RESOLVE_NO_SYMLINKS`; the component walk follows none anyway):
/// for the daemon's own writes, whose paths are a snapshot's and hold no symlink.
pub fn open_beneath_no_symlinks(
    root: &OwnedFd,
    rel: &Path,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    beneath(root, rel, flags, NO_SYMLINKS)
}

/// Opens (creating missing directories with `dir_mode`) the directory `rel` beneath
/// `root`, for writing entries into it. Each created directory is opened with
/// `O_NOFOLLOW` right after `mkdirat`, so a symlink planted in its place is refused.
pub fn open_parent_for_write(root: &OwnedFd, rel: &Path, dir_mode: u32) -> io::Result<OwnedFd> {
    parent_for_write(root, rel, dir_mode, BENEATH)
}

/// As [`open_parent_for_write`], following no symlink at all ([`open_beneath_no_symlinks`]).
pub fn open_parent_for_write_no_symlinks(
    root: &OwnedFd,
    rel: &Path,
    dir_mode: u32,
) -> io::Result<OwnedFd> {
    parent_for_write(root, rel, dir_mode, NO_SYMLINKS)
}

fn parent_for_write(
    root: &OwnedFd,
    rel: &Path,
    dir_mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    match beneath(root, rel, flags, resolve) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => return Err(e),
    }
    let mut cur: Option<OwnedFd> = None;
    for c in rel.components() {
        let d = match c {
            std::path::Component::Normal(n) => n,
            std::path::Component::CurDir => continue,
            _ => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        };
        let base = cur.as_ref().unwrap_or(root);
        let next = match open_at(base, d, flags) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                match agentd_fsat::mkdir_in(base, d, 0o700) {
                    Ok(()) => {
                        let fd = open_at(base, d, flags)?;
                        // The daemon's umask masked the mode; give the user's.
                        agentd_fsat::fchmod(&fd, dir_mode)?;
                        fd
                    }
                    // Made meanwhile by someone else: theirs, as it is.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => open_at(base, d, flags)?,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => open_at(root, OsStr::new("."), flags),
    }
}

/// The entries of the directory `dir` (without `.` and `..`), each with its
/// `fstatat(AT_SYMLINK_NOFOLLOW)` data; one gone since the listing is left out. Read
/// through a fresh descriptor of the same directory, never by path.
pub fn list_entries(dir: &OwnedFd) -> io::Result<Vec<(std::ffi::OsString, libc::stat)>> {
    let names = agentd_fsat::list(dir)?;
    let mut out = Vec::with_capacity(names.len());
    for (n, _) in names {
        if let Some(st) = stat_at(dir, &n)? {
            out.push((n, st));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn both(f: impl Fn()) {
        force_component_walk(false);
        f();
        force_component_walk(true);
        f();
        force_component_walk(false);
    }

    #[test]
    fn escapes_are_refused_by_both_strategies() {
        both(|| {
            let ws = tempfile::tempdir().unwrap();
            let out = tempfile::tempdir().unwrap();
            std::fs::write(out.path().join("s"), "x").unwrap();
            std::fs::create_dir(ws.path().join("d")).unwrap();
            std::fs::write(ws.path().join("d/f"), "in").unwrap();
            symlink(out.path(), ws.path().join("abs")).unwrap();
            let root = open_root(ws.path()).unwrap();
            let e = open_beneath(&root, Path::new("abs/s"), libc::O_RDONLY).unwrap_err();
            assert!(
                is_escape(&e) || e.raw_os_error() == Some(libc::ENOTDIR),
                "{e}"
            );
            let e = open_beneath(&root, Path::new("../x"), libc::O_RDONLY).unwrap_err();
            assert!(is_escape(&e), "{e}");
            let f = open_beneath(&root, Path::new("d/f"), libc::O_RDONLY).unwrap();
            let mut s = String::new();
            use std::io::Read;
            std::fs::File::from(f).read_to_string(&mut s).unwrap();
            assert_eq!(s, "in");
            let p = open_parent_for_write(&root, Path::new("n/m"), 0o755).unwrap();
            assert!(stat_at(&p, OsStr::new("x")).unwrap().is_none());
            assert!(ws.path().join("n/m").is_dir());
            let e = open_parent_for_write(&root, Path::new("abs/new"), 0o755).unwrap_err();
            assert!(
                is_escape(&e) || e.raw_os_error() == Some(libc::ENOTDIR),
                "{e}"
            );
            assert!(!out.path().join("new").exists());
        });
    }
}
