//! Descriptor-based opens beneath the workspace, closing the check-then-use window that
//! [`super::workspace::resolve`] alone leaves open.
//!
//! `resolve` judges a path (its rules and error messages are the contract), but between
//! that check and the open a directory on the path can be swapped for a symlink that
//! leads outside. So the file tools never open the resolved path by name from `/`: they
//! hold a descriptor of the workspace and open the resolved path *relative to it*, with
//! the kernel refusing to leave it:
//!
//! - `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (Linux 5.6+): any `..`, absolute
//!   symlink or relative symlink that would climb above the workspace fails with `EXDEV`;
//!   symlinks that stay inside are followed as `open(2)` would.
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

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

/// `struct open_how` of `linux/openat2.h` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// Set once `openat2` is known to be unavailable; every later open walks components.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Forces the component-walk fallback (tests exercise both strategies on one kernel).
pub fn force_component_walk(on: bool) {
    NO_OPENAT2.store(on, Ordering::Relaxed);
}

/// Which strategy the next open uses: `"openat2"` or `"component-walk"`.
pub fn strategy() -> &'static str {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        "component-walk"
    } else {
        "openat2"
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn openat(dir: &OwnedFd, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: `c` is NUL-terminated and lives across the call; the returned descriptor
    // is fresh and owned by nobody else.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory (the workspace) to serve as the anchor of later opens.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: as in `openat`.
    let fd = check(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The normal components of a relative path; anything else (`..`, a root) is refused,
/// since callers pass paths that `resolve` already reduced.
fn names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    Ok(out)
}

/// Opens `rel` beneath `root` with `flags` (`O_CREAT` is not supported here; writes use
/// [`open_parent_for_write`]). Escapes fail with `EXDEV` (openat2) or `ELOOP`/`ENOTDIR`
/// (component walk); see [`is_escape`].
pub fn open_beneath(root: &OwnedFd, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    open_beneath_with(root, rel, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
}

/// As [`open_beneath`], but no symlink is followed anywhere on the way, not even one
/// that stays inside (`RESOLVE_NO_SYMLINKS`; the component walk follows none anyway):
/// for the daemon's own writes, whose paths are a snapshot's and hold no symlink.
pub fn open_beneath_no_symlinks(
    root: &OwnedFd,
    rel: &Path,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    open_beneath_with(
        root,
        rel,
        flags,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    )
}

fn open_beneath_with(
    root: &OwnedFd,
    rel: &Path,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let parts = names(rel)?;
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let joined: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let path = if joined.is_empty() {
            b".".to_vec()
        } else {
            joined.join(&b'/')
        };
        let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve,
        };
        // SAFETY: `c` and `how` outlive the call; the size passed is `how`'s own.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if rc >= 0 {
            // SAFETY: a fresh descriptor from the kernel.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) });
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
            _ => return Err(err),
        }
    }
    walk(root, &parts, flags)
}

fn walk(root: &OwnedFd, parts: &[&OsStr], flags: libc::c_int) -> io::Result<OwnedFd> {
    let Some((last, dirs)) = parts.split_last() else {
        return openat(root, OsStr::new("."), flags, 0);
    };
    let mut cur: Option<OwnedFd> = None;
    for d in dirs {
        let base = cur.as_ref().unwrap_or(root);
        let next = openat(
            base,
            d,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        cur = Some(next);
    }
    openat(
        cur.as_ref().unwrap_or(root),
        last,
        flags | libc::O_NOFOLLOW,
        0,
    )
}

/// Whether an open error means the path left the workspace (or changed into a symlink)
/// between the check and the open.
pub fn is_escape(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EXDEV) | Some(libc::ELOOP))
}

/// Opens (creating missing directories with `dir_mode`) the directory `rel` beneath
/// `root`, for writing entries into it. Each created directory is opened with
/// `O_NOFOLLOW` right after `mkdirat`, so a symlink planted in its place is refused.
pub fn open_parent_for_write(root: &OwnedFd, rel: &Path, dir_mode: u32) -> io::Result<OwnedFd> {
    parent_for_write(root, rel, dir_mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
}

/// As [`open_parent_for_write`], following no symlink at all ([`open_beneath_no_symlinks`]).
pub fn open_parent_for_write_no_symlinks(
    root: &OwnedFd,
    rel: &Path,
    dir_mode: u32,
) -> io::Result<OwnedFd> {
    parent_for_write(
        root,
        rel,
        dir_mode,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    )
}

fn parent_for_write(
    root: &OwnedFd,
    rel: &Path,
    dir_mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    match open_beneath_with(root, rel, flags, resolve) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => return Err(e),
    }
    let parts = names(rel)?;
    let mut cur: Option<OwnedFd> = None;
    for d in parts {
        let base = cur.as_ref().unwrap_or(root);
        let next = match openat(base, d, flags | libc::O_NOFOLLOW, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let c = cstr(d)?;
                // SAFETY: `c` is NUL-terminated and outlives the call.
                match check(unsafe { libc::mkdirat(base.as_raw_fd(), c.as_ptr(), 0o700) }) {
                    Ok(_) => {
                        let fd = openat(base, d, flags | libc::O_NOFOLLOW, 0)?;
                        // The daemon's umask masked the mode; give the user's.
                        fchmod(&fd, dir_mode)?;
                        fd
                    }
                    // Made meanwhile by someone else: theirs, as it is.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        openat(base, d, flags | libc::O_NOFOLLOW, 0)?
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => openat(root, OsStr::new("."), flags, 0),
    }
}

pub fn fchmod(fd: &OwnedFd, mode: u32) -> io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) }).map(|_| ())
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: `None` when the entry does not exist.
pub fn stat_entry(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cstr(name)?;
    // SAFETY: `st` is plain data the kernel fills; `c` outlives the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(Some(st))
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(None)
        } else {
            Err(e)
        }
    }
}

/// The entries of the directory `dir` (without `.` and `..`), each with its
/// `fstatat(AT_SYMLINK_NOFOLLOW)` data; one gone since the listing is left out. Read
/// through a fresh descriptor of the same directory, never by path.
pub fn list_entries(dir: &OwnedFd) -> io::Result<Vec<(std::ffi::OsString, libc::stat)>> {
    use std::os::unix::ffi::OsStringExt;
    let own = openat(dir, OsStr::new("."), libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    // SAFETY: fdopendir takes the descriptor over; closedir below releases both.
    let d = unsafe { libc::fdopendir(own.as_raw_fd()) };
    if d.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(own);
    let mut names = Vec::new();
    loop {
        // SAFETY: `d` is a live DIR stream owned here; each dirent is copied before the
        // next readdir.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: `d_name` is NUL-terminated within the entry readdir returned.
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsString::from_vec(name.to_vec()));
        }
    }
    // SAFETY: `d` came from fdopendir and is closed once.
    unsafe { libc::closedir(d) };
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        if let Some(st) = stat_entry(dir, &n)? {
            out.push((n, st));
        }
    }
    Ok(out)
}

/// Creates a new file `name` in `dir` (`O_EXCL | O_NOFOLLOW`, mode 0600).
pub fn create_new(dir: &OwnedFd, name: &OsStr) -> io::Result<std::fs::File> {
    let fd = openat(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        0o600,
    )?;
    Ok(std::fs::File::from(fd))
}

/// `renameat` within one directory.
pub fn rename_in(dir: &OwnedFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: both strings outlive the call.
    check(unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) })
        .map(|_| ())
}

/// `unlinkat` of a file in `dir`.
pub fn unlink_in(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: `c` outlives the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
}

/// `symlinkat`: a symlink `name` in `dir` holding `target`.
pub fn symlink_in(dir: &OwnedFd, target: &[u8], name: &OsStr) -> io::Result<()> {
    let t = CString::new(target).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let c = cstr(name)?;
    // SAFETY: both strings outlive the call.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) }).map(|_| ())
}

/// `unlinkat(AT_REMOVEDIR)` of an (empty) directory in `dir`.
pub fn rmdir_in(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: `c` outlives the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) }).map(|_| ())
}

/// `fsync` of a directory descriptor.
pub fn sync_dir(dir: &OwnedFd) -> io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fsync(dir.as_raw_fd()) }).map(|_| ())
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
            assert!(stat_entry(&p, OsStr::new("x")).unwrap().is_none());
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
