//! agentd-fsat: file operations at a directory descriptor, for code that works in a tree
//! someone else may be changing at the same moment (a sandboxed command swapping a
//! directory for a symlink between a check and a use).
//!
//! The caller holds a descriptor of a root it trusts and names everything relative to
//! one it holds, never by a path from `/`:
//!
//! - a path below the root with [`open_beneath`]: `openat2` with the caller's `RESOLVE_*`
//!   flags (`RESOLVE_BENEATH`, with `RESOLVE_NO_SYMLINKS` to follow no symlink at all);
//!   where the kernel has no `openat2` (`ENOSYS`, or a seccomp filter answering `EPERM`)
//!   or [`force_component_walk`] asked for it, one name at a time from the previous
//!   descriptor with `O_NOFOLLOW`, so no symlink is followed (a symlink met fails with
//!   `ELOOP` or `ENOTDIR`, an escape through `..` or an absolute path with `EXDEV`);
//! - one name in a directory with `openat(O_NOFOLLOW)` ([`open_at`], [`create_new`]),
//!   `fstatat(AT_SYMLINK_NOFOLLOW)` ([`stat_at`]), `readlinkat` ([`read_link_at`]),
//!   `readdir` on a fresh descriptor of the directory ([`list`]), `renameat`,
//!   `unlinkat`, `symlinkat`, `mkdirat`;
//! - a regular file read with `O_NONBLOCK` and checked to be one on its own descriptor
//!   before a byte is read ([`read_file_at`]).
//!
//! Its users: the file tools (`agentd-tools`' `confine`), the snapshot scan
//! (docs/snapshots.md#how-a-snapshot-reads), and the sandbox's mounts and its restore of
//! protected paths (docs/sandbox.md). It depends on `libc` only. With the feature
//! `test-support`, its `swap` module holds the swapping thread of its users' race tests.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once `openat2` is known to be unavailable (or forced off by a test); every later
/// [`open_beneath`] walks components.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Forces the component walk of [`open_beneath`] on or off (tests exercise both
/// strategies on one kernel). It holds for the whole process.
pub fn force_component_walk(on: bool) {
    NO_OPENAT2.store(on, Ordering::Relaxed);
}

/// Which strategy the next [`open_beneath`] uses: `"openat2"` or `"component-walk"`.
pub fn strategy() -> &'static str {
    if NO_OPENAT2.load(Ordering::Relaxed) {
        "component-walk"
    } else {
        "openat2"
    }
}

/// `name` as a C string; a name holding a NUL byte is `EINVAL`.
pub fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A descriptor the kernel returned, or the error it set.
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC)`: one name, never a symlink.
pub fn open_at(dir: impl AsFd, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    openat_mode(dir.as_fd(), name, flags, 0)
}

fn openat_mode(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    } as libc::c_long)
}

/// The root directory every later open is relative to, opened by path (its parent must
/// be out of reach of whoever changes the tree).
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    owned(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as libc::c_long)
}

/// The current directory as a descriptor argument (`AT_FDCWD`), for [`openat2`] of an
/// absolute path.
#[cfg(target_os = "linux")]
// SAFETY: `AT_FDCWD` is not -1, and it names no descriptor anyone could close.
pub const CWD: BorrowedFd<'static> = unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) };

/// `openat2(dir, path, {flags | O_CLOEXEC, resolve})` (Linux 5.6+), with no fallback:
/// `resolve` is a set of libc's `RESOLVE_*` flags.
#[cfg(target_os = "linux")]
pub fn openat2(
    dir: impl AsFd,
    path: &Path,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    /// `struct open_how` of `linux/openat2.h` (libc's is `non_exhaustive`).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let c = cstr(path.as_os_str())?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: `c` and `how` outlive the call; the size passed is `how`'s own.
    owned(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_fd().as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// The plain names of a relative path; anything else (`..`, a root) is `EXDEV`.
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

/// Opens `rel` (plain names only; `""` is `root` itself) beneath `root` with `flags`
/// (not `O_CREAT`: create with [`create_new`] in the parent's descriptor).
///
/// With `openat2`, `resolve` (libc's `RESOLVE_*` flags) decides what is followed:
/// `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` follows a symlink that stays beneath
/// `root` as `open(2)` would; adding `RESOLVE_NO_SYMLINKS` follows none. The component
/// walk follows no symlink whatever `resolve` says. An escape fails with `EXDEV`
/// (`openat2`) or `ELOOP`/`ENOTDIR` (a symlink met on the walk).
pub fn open_beneath(
    root: impl AsFd,
    rel: &Path,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let root = root.as_fd();
    let parts = names(rel)?;
    #[cfg(target_os = "linux")]
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let joined: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let path = if joined.is_empty() {
            b".".to_vec()
        } else {
            joined.join(&b'/')
        };
        match openat2(root, Path::new(OsStr::from_bytes(&path)), flags, resolve) {
            Ok(fd) => return Ok(fd),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
                NO_OPENAT2.store(true, Ordering::Relaxed)
            }
            Err(e) => return Err(e),
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = resolve;
    walk(root, &parts, flags)
}

/// How the walk holds the directories on the way: only to look names up in them.
#[cfg(target_os = "linux")]
const WALK_DIR: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;
#[cfg(not(target_os = "linux"))]
const WALK_DIR: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY;

/// The component walk: every directory on the way, then the last name, opened with
/// `O_NOFOLLOW` from the descriptor before it.
fn walk(root: BorrowedFd<'_>, parts: &[&OsStr], flags: libc::c_int) -> io::Result<OwnedFd> {
    let Some((last, dirs)) = parts.split_last() else {
        return open_at(root, OsStr::new("."), flags);
    };
    let mut cur: Option<OwnedFd> = None;
    for d in dirs {
        let next = open_at(cur.as_ref().map_or(root, |c| c.as_fd()), d, WALK_DIR)?;
        cur = Some(next);
    }
    open_at(cur.as_ref().map_or(root, |c| c.as_fd()), last, flags)
}

/// The directory `rel` beneath `root` (`""` is `root` itself), with no symlink followed
/// on the way: [`open_beneath`] with `O_RDONLY | O_DIRECTORY` and
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`.
pub fn open_dir_beneath(root: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    open_beneath(
        root,
        rel,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        NO_SYMLINKS,
    )
}

/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: beneath the root,
/// through no symlink at all.
#[cfg(target_os = "linux")]
pub const NO_SYMLINKS: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
/// `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: beneath the root, following a symlink that
/// stays beneath it.
#[cfg(target_os = "linux")]
pub const BENEATH: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
/// Without `openat2` every open walks components, which follow no symlink.
#[cfg(not(target_os = "linux"))]
pub const NO_SYMLINKS: u64 = 0;
/// As above.
#[cfg(not(target_os = "linux"))]
pub const BENEATH: u64 = 0;

/// Whether an open error means the path left the root (or changed into a symlink)
/// between a check and the open.
pub fn is_escape(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EXDEV) | Some(libc::ELOOP))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when there is no such entry.
pub fn stat_at(dir: impl AsFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cstr(name)?;
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` and `st` outlive the call.
    let rc = unsafe {
        libc::fstatat(
            dir.as_fd().as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        return Ok(Some(st));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(None),
        _ => Err(e),
    }
}

/// `fstat` of a descriptor (an `O_PATH` one included).
pub fn fstat(fd: impl AsFd) -> io::Result<libc::stat> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` outlives the call.
    if unsafe { libc::fstat(fd.as_fd().as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

pub fn is_file(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

pub fn is_link(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// The kind of a directory entry as `readdir` tells it (`d_type`), or as [`kind_of`]
/// reads it from a `stat`: a hint that spares a `stat` of entries a caller skips; every
/// open still refuses a symlink and checks the kind on the descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Link,
    Other,
    /// The file system does not say: `stat` it.
    Unknown,
}

/// The [`Kind`] of what `st` describes.
pub fn kind_of(st: &libc::stat) -> Kind {
    if is_dir(st) {
        Kind::Dir
    } else if is_file(st) {
        Kind::File
    } else if is_link(st) {
        Kind::Link
    } else {
        Kind::Other
    }
}

/// The regular file `name` in `dir`: its stat data (of the descriptor read) and at most
/// `limit + 1` bytes of it (more than `limit`: the caller's cap was passed). Anything
/// but a regular file is refused with `InvalidInput`, before a byte is read; opened with
/// `O_NONBLOCK`, so a FIFO put in its place cannot stall the caller.
pub fn read_file_at(dir: impl AsFd, name: &OsStr, limit: u64) -> io::Result<(libc::stat, Vec<u8>)> {
    let fd = open_at(dir, name, libc::O_RDONLY | libc::O_NONBLOCK)?;
    let st = fstat(&fd)?;
    if !is_file(&st) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut body = Vec::with_capacity((st.st_size.max(0) as u64).min(limit) as usize);
    std::fs::File::from(fd)
        .take(limit.saturating_add(1))
        .read_to_end(&mut body)?;
    Ok((st, body))
}

/// The target of the symlink `name` in `dir`.
pub fn read_link_at(dir: impl AsFd, name: &OsStr) -> io::Result<Vec<u8>> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `c` and `buf` outlive the call; the length passed is the buffer's.
    let n = unsafe {
        libc::readlinkat(
            dir.as_fd().as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The names in the directory `dir` (without `.` and `..`) with their [`Kind`], read
/// through a fresh descriptor of it (so listings of one directory from several threads
/// never share a position).
pub fn list(dir: impl AsFd) -> io::Result<Vec<(OsString, Kind)>> {
    let own = open_at(dir, OsStr::new("."), libc::O_RDONLY | libc::O_DIRECTORY)?;
    // SAFETY: `fdopendir` takes the descriptor over; `closedir` below releases both.
    let d = unsafe { libc::fdopendir(own.as_raw_fd()) };
    if d.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(own);
    let mut out = Vec::new();
    let res = loop {
        clear_errno();
        // SAFETY: `d` is a live DIR stream owned here.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            let err = io::Error::last_os_error();
            break match err.raw_os_error() {
                Some(0) | None => Ok(()),
                _ => Err(err),
            };
        }
        // SAFETY: `d_name` is NUL-terminated within the entry readdir returned.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            // SAFETY: as above.
            let kind = match unsafe { (*e).d_type } {
                libc::DT_DIR => Kind::Dir,
                libc::DT_REG => Kind::File,
                libc::DT_LNK => Kind::Link,
                libc::DT_UNKNOWN => Kind::Unknown,
                _ => Kind::Other,
            };
            out.push((OsString::from_vec(name.to_vec()), kind));
        }
    };
    // SAFETY: `d` came from fdopendir and is closed once.
    unsafe { libc::closedir(d) };
    res.map(|()| out)
}

/// Clears errno (thread-local) so that a null `readdir` tells the end from an error.
fn clear_errno() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: errno is thread-local and always addressable.
    unsafe {
        *libc::__errno_location() = 0
    };
    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    // SAFETY: as above.
    unsafe {
        *libc::__error() = 0
    };
}

/// `/proc/self/fd/N` of a descriptor: a name for APIs that take only paths (inotify,
/// `mount`), which resolves to exactly the file or directory held.
pub fn proc_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Creates a new file `name` in `dir` (`O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW`, mode
/// 0600 before the umask): never through a link, never over an existing entry.
pub fn create_new(dir: impl AsFd, name: &OsStr) -> io::Result<std::fs::File> {
    let fd = openat_mode(
        dir.as_fd(),
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?;
    Ok(std::fs::File::from(fd))
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdir_in(dir: impl AsFd, name: &OsStr, mode: libc::mode_t) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: `c` outlives the call.
    check(unsafe { libc::mkdirat(dir.as_fd().as_raw_fd(), c.as_ptr(), mode) })
}

/// `fchmod` of a descriptor.
pub fn fchmod(fd: impl AsFd, mode: u32) -> io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fchmod(fd.as_fd().as_raw_fd(), mode as libc::mode_t) })
}

/// `renameat` within one directory.
pub fn rename_in(dir: impl AsFd, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    let dir = dir.as_fd().as_raw_fd();
    // SAFETY: both strings outlive the call.
    check(unsafe { libc::renameat(dir, f.as_ptr(), dir, t.as_ptr()) })
}

/// `unlinkat` of a file (anything but a directory) in `dir`.
pub fn unlink_in(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: `c` outlives the call.
    check(unsafe { libc::unlinkat(dir.as_fd().as_raw_fd(), c.as_ptr(), 0) })
}

/// `unlinkat(AT_REMOVEDIR)` of an (empty) directory in `dir`.
pub fn rmdir_in(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: `c` outlives the call.
    check(unsafe { libc::unlinkat(dir.as_fd().as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) })
}

/// `symlinkat`: a symlink `name` in `dir` holding `target`.
pub fn symlink_in(dir: impl AsFd, target: &[u8], name: &OsStr) -> io::Result<()> {
    let t = CString::new(target).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let c = cstr(name)?;
    // SAFETY: both strings outlive the call.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_fd().as_raw_fd(), c.as_ptr()) })
}

/// `fsync` of a directory descriptor.
pub fn sync_dir(dir: impl AsFd) -> io::Result<()> {
    // SAFETY: a valid descriptor.
    check(unsafe { libc::fsync(dir.as_fd().as_raw_fd()) })
}

#[cfg(all(feature = "test-support", target_os = "linux"))]
pub mod swap;

#[cfg(test)]
mod tests;
