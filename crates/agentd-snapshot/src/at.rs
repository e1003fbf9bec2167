//! Reads beneath the workspace through descriptors only (docs/snapshots.md#how-a-snapshot-reads).
//!
//! A snapshot runs while commands of the session (or of another session on the same
//! workspace) may be changing the tree. Reading by path would let one of them swap a
//! directory for a symlink between the check and the read, and the daemon would read,
//! store and later write back a file from outside the workspace. So the scan holds a
//! descriptor of the workspace and of each directory it walks, and opens every name
//! relative to one:
//!
//! - a path below the workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS)` (Linux 5.6+), or, where the kernel has no openat2, one name
//!   at a time with `openat(O_NOFOLLOW | O_DIRECTORY)`;
//! - a directory's entries with `openat(dir, name, O_NOFOLLOW)` and `fstatat(dir, name,
//!   AT_SYMLINK_NOFOLLOW)`; a symlink is read with `readlinkat`, never followed;
//! - a file with `O_NONBLOCK` (a FIFO put in its place cannot stall the daemon) and
//!   checked to be a regular file on its own descriptor before a byte is read, and read
//!   up to a cap, whatever its size grows to meanwhile.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once `openat2` is known to be unavailable (or forced off by a test).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Forces the component-walk fallback (tests exercise both strategies on one kernel).
pub fn force_component_walk(on: bool) {
    NO_OPENAT2.store(on, Ordering::Relaxed);
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC)`: one name, never a symlink.
pub fn open_at(dir: &OwnedFd, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    } as libc::c_long)
}

/// The workspace directory, the anchor of every later open. A command cannot rename it
/// (its parent is outside the writable roots), so opening it by path is sound.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: as in `open_at`.
    owned(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    } as libc::c_long)
}

/// The directory `rel` (plain names only; `""` is `root` itself) beneath `root`, no
/// symlink followed on the way. A component swapped for a symlink fails with `ELOOP`,
/// `EXDEV` or `ENOTDIR`.
pub fn open_dir_beneath(root: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(n),
            Component::CurDir => {}
            _ => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    if parts.is_empty() {
        return open_at(root, OsStr::new("."), flags);
    }
    #[cfg(target_os = "linux")]
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        /// `struct open_how` of `linux/openat2.h` (libc's is `non_exhaustive`).
        #[repr(C)]
        struct OpenHow {
            flags: u64,
            mode: u64,
            resolve: u64,
        }
        let joined: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        let c = CString::new(joined.join(&b'/'))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let how = OpenHow {
            flags: (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: libc::RESOLVE_BENEATH
                | libc::RESOLVE_NO_SYMLINKS
                | libc::RESOLVE_NO_MAGICLINKS,
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
        match owned(rc) {
            Ok(fd) => return Ok(fd),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
                NO_OPENAT2.store(true, Ordering::Relaxed)
            }
            Err(e) => return Err(e),
        }
    }
    let mut cur = open_at(root, parts[0], flags)?;
    for p in &parts[1..] {
        cur = open_at(&cur, p, flags)?;
    }
    Ok(cur)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when there is no such entry.
pub fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<libc::stat>> {
    let c = cstr(name)?;
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` and `st` outlive the call.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
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

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` outlives the call.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
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
/// but a regular file is refused with `EINVAL`, before a byte is read.
pub fn read_file_at(dir: &OwnedFd, name: &OsStr, limit: u64) -> io::Result<(libc::stat, Vec<u8>)> {
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
pub fn read_link_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Vec<u8>> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `c` and `buf` outlive the call; the length passed is the buffer's.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
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

/// The kind of a directory entry as `readdir` tells it (`d_type`): a hint that spares a
/// `stat` of entries the scan skips; every open still refuses a symlink and checks the
/// kind on the descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Link,
    Other,
    /// The file system does not say: `stat` it.
    Unknown,
}

/// The names in the directory `dir` (without `.` and `..`) with their [`Kind`], read
/// through a fresh descriptor of it.
pub fn list(dir: &OwnedFd) -> io::Result<Vec<(OsString, Kind)>> {
    let dup = open_at(dir, OsStr::new("."), libc::O_RDONLY | libc::O_DIRECTORY)?;
    // SAFETY: `fdopendir` takes the descriptor over; `closedir` below releases both.
    let d = unsafe { libc::fdopendir(dup.as_raw_fd()) };
    if d.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(dup);
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

/// `/proc/self/fd/N` of a directory descriptor: a name for APIs that take only paths
/// (inotify), which resolves to exactly the directory held.
pub fn proc_path(fd: &OwnedFd) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}
