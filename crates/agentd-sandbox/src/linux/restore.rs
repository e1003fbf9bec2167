//! Protected paths without a mount namespace (the degraded level): Landlock cannot take
//! `.git/hooks` out of a writable workspace, so the daemon saves the protected paths
//! before the command and puts back whatever the command changed after it (its
//! processes are all gone by then), reporting each restore as a denial.
//!
//! The daemon does this unconfined, in a directory other sandboxed commands (another
//! session's, on the same workspace) may be changing at the same moment. So every file
//! operation goes through descriptors: each writable root is opened once, when the
//! snapshot is taken (before the command runs; a command cannot rename its roots), and
//! every path below it is opened from that descriptor with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (one component
//! at a time with `O_NOFOLLOW` where the kernel has no openat2; `agentd-fsat`), one name at a
//! time below a directory descriptor after that (`O_NOFOLLOW`, `O_EXCL` on create,
//! `unlinkat`, `symlinkat`). A directory swapped for a symlink at any moment makes the
//! restore of that path fail and be reported; it never reads or writes through the link.
//!
//! At the full level the protected paths are read-only mounts, which hold unless the host
//! replaces a path beneath its mount (the user's `git config` renames a new
//! `.git/config` over it): the kernel then drops the mount in the command's namespace.
//! Reading every protected file before each command would cost milliseconds on a
//! workspace of many repositories, so [`Snapshot::take_pinned`] keeps only a descriptor
//! of each (and its identity); after the command, a path whose inode is still the one
//! pinned was never writable, and one replaced is put back from the pinned inode: a
//! file's old inode was under the read-only mount until it left the name, so nothing in
//! the sandbox wrote it; a directory's entries are taken from the old directory only if
//! their ctime is older than the snapshot (the old directory may have been renamed where
//! the command could write), the others left out.

use agentd_fsat as fsat;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

const MAX_FILE: u64 = 1 << 20;
const MAX_ENTRIES: usize = 512;
const MAX_DEPTH: usize = 64;
/// Descriptors one [`Snapshot::take_pinned`] holds at most while its command runs (a
/// daemon runs many commands at once under one descriptor limit); the paths past it are
/// saved by content instead.
const MAX_PINNED: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Saved {
    Absent,
    File(Vec<u8>, u32),
    Dir(BTreeMap<OsString, Saved>),
    Link(PathBuf),
    /// Too large or not a file, directory or symlink: compared by nothing, left alone.
    Opaque,
}

/// Opens `rel` (relative, no symlink anywhere, never above `dir`) below `dir`.
fn open_beneath(dir: BorrowedFd<'_>, rel: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    fsat::open_beneath(dir, rel, flags | libc::O_NOFOLLOW, fsat::NO_SYMLINKS)
}

fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<libc::stat> {
    fsat::stat_at(dir, name).ok().flatten()
}

fn link_at(dir: BorrowedFd<'_>, name: &OsStr) -> Saved {
    fsat::read_link_at(dir, name).map_or(Saved::Opaque, |t| {
        Saved::Link(PathBuf::from(OsString::from_vec(t)))
    })
}

/// The names in the directory `dir` (without `.` and `..`).
fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    Ok(fsat::list(dir)?.into_iter().map(|(n, _)| n).collect())
}

fn kind(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

fn save_at(dir: BorrowedFd<'_>, name: &OsStr, depth: usize, budget: &mut usize) -> Saved {
    let Some(st) = lstat_at(dir, name) else {
        return Saved::Absent;
    };
    if *budget == 0 {
        return Saved::Opaque;
    }
    *budget -= 1;
    match kind(&st) {
        libc::S_IFLNK => link_at(dir, name),
        libc::S_IFREG if st.st_size as u64 <= MAX_FILE => {
            let read = || -> io::Result<Vec<u8>> {
                let fd = open_beneath(
                    dir,
                    Path::new(name),
                    libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                )?;
                let mut b = Vec::new();
                std::fs::File::from(fd)
                    .take(MAX_FILE + 1)
                    .read_to_end(&mut b)?;
                Ok(b)
            };
            read().map_or(Saved::Opaque, |b| Saved::File(b, st.st_mode & 0o7777))
        }
        libc::S_IFDIR if depth < 4 => {
            let mut out = BTreeMap::new();
            if let Ok(fd) = fsat::open_dir_beneath(dir, Path::new(name)) {
                for n in list(fd.as_fd()).unwrap_or_default() {
                    let s = save_at(fd.as_fd(), &n, depth + 1, budget);
                    out.insert(n, s);
                }
            }
            Saved::Dir(out)
        }
        _ => Saved::Opaque,
    }
}

fn remove_at(dir: BorrowedFd<'_>, name: &OsStr, depth: usize) -> io::Result<()> {
    let Some(st) = lstat_at(dir, name) else {
        return Ok(());
    };
    if kind(&st) != libc::S_IFDIR {
        return fsat::unlink_in(dir, name);
    }
    if depth >= MAX_DEPTH {
        return Err(io::Error::other("directory too deep to remove"));
    }
    let fd = fsat::open_dir_beneath(dir, Path::new(name))?;
    // Every entry is tried, whatever failed before it: one that cannot go (a tree too
    // deep) must not keep a hook listed after it.
    let mut first = None;
    for n in list(fd.as_fd())? {
        keep_first(&mut first, remove_at(fd.as_fd(), &n, depth + 1));
    }
    first.map_or_else(|| fsat::rmdir_in(dir, name), Err)
}

/// Records the first error of a series of steps that all run.
fn keep_first(first: &mut Option<io::Error>, r: io::Result<()>) {
    if let (None, Err(e)) = (&first, r) {
        *first = Some(e);
    }
}

fn put_at(dir: BorrowedFd<'_>, name: &OsStr, s: &Saved) -> io::Result<()> {
    match s {
        Saved::Absent => remove_at(dir, name, 0),
        Saved::Opaque => Ok(()),
        Saved::File(b, mode) => {
            remove_at(dir, name, 0)?;
            // A new file in `dir` or a failure, never opened through a link.
            let mut f = fsat::create_new(dir, name)?;
            f.write_all(b)?;
            fsat::fchmod(&f, *mode)
        }
        Saved::Link(t) => {
            remove_at(dir, name, 0)?;
            fsat::symlink_in(dir, t.as_os_str().as_bytes(), name)
        }
        Saved::Dir(entries) => {
            let is_dir = lstat_at(dir, name).is_some_and(|st| kind(&st) == libc::S_IFDIR);
            if !is_dir {
                remove_at(dir, name, 0)?;
                fsat::mkdir_in(dir, name, 0o755)?;
            }
            let fd = fsat::open_dir_beneath(dir, Path::new(name))?;
            // Entries the command added go; changed ones are put back. Each one is
            // tried even after another failed, and the first failure is reported.
            let mut first = None;
            for n in list(fd.as_fd())? {
                if !entries.contains_key(&n) {
                    keep_first(&mut first, remove_at(fd.as_fd(), &n, 0));
                }
            }
            for (n, s) in entries {
                let now = save_at(fd.as_fd(), n, 0, &mut MAX_ENTRIES.clone());
                if &now != s {
                    keep_first(&mut first, put_at(fd.as_fd(), n, s));
                }
            }
            first.map_or(Ok(()), Err)
        }
    }
}

/// A descriptor of the file or directory `name` in `dir` and its identity; `None` for
/// anything else (saved by content instead) or when it cannot be opened.
fn pin_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Before> {
    let st = lstat_at(dir, name)?;
    let flags = match kind(&st) {
        libc::S_IFREG => libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        libc::S_IFDIR => libc::O_RDONLY | libc::O_DIRECTORY,
        _ => return None,
    };
    let fd = open_beneath(dir, Path::new(name), flags).ok()?;
    let st = fsat::fstat(&fd).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some(Before::Pinned {
        fd,
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    })
}

/// A descriptor of the writable root `root` (a directory, not a symlink).
fn pin(root: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(root)?;
    Ok(OwnedFd::from(f))
}

/// What a protected path was before the command.
#[derive(Debug)]
enum Before {
    /// Its contents.
    Saved(Saved),
    /// Under a read-only mount: the inode that was there (a descriptor) and its identity.
    Pinned { fd: OwnedFd, dev: u64, ino: u64 },
}

/// One protected path: where it is shown, its writable root (an index into the pinned
/// root descriptors), its place below that root, and what it was.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    root: usize,
    parent: PathBuf,
    name: OsString,
    before: Before,
}

/// How [`Snapshot::take_with`] records each path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    All,
    Existing,
    Pinned,
}

/// The protected paths as they were before a command.
#[derive(Debug, Default)]
pub struct Snapshot {
    roots: Vec<OwnedFd>,
    saved: Vec<Entry>,
    /// `CLOCK_REALTIME_COARSE` when the snapshot was taken: a ctime before it is a change
    /// made before the command (ctimes come from the same coarse clock or later).
    taken: (i64, i64),
}

fn coarse_now() -> (i64, i64) {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    (t.tv_sec, t.tv_nsec)
}

/// Whether `st` was last changed before `taken`.
#[allow(clippy::unnecessary_cast)] // the field types differ between architectures
fn older(st: &libc::stat, taken: (i64, i64)) -> bool {
    (st.st_ctime as i64, st.st_ctime_nsec as i64) < taken
}

/// The regular file `fd` as it is now, if it did not change while read (and, with
/// `taken`, not since then either): `Opaque` otherwise, or past [`MAX_FILE`].
fn read_unchanged(fd: OwnedFd, taken: Option<(i64, i64)>) -> Saved {
    let Ok(a) = fsat::fstat(&fd) else {
        return Saved::Opaque;
    };
    if kind(&a) != libc::S_IFREG || taken.is_some_and(|t| !older(&a, t)) {
        return Saved::Opaque;
    }
    let raw = fd.as_raw_fd();
    let mut b = Vec::new();
    let mut off: i64 = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: pread into a buffer of its size, at an offset (the file position of a
        // shared descriptor is left alone).
        let n = unsafe { libc::pread(raw, chunk.as_mut_ptr().cast(), chunk.len(), off) };
        if n < 0 {
            return Saved::Opaque;
        }
        if n == 0 {
            break;
        }
        b.extend_from_slice(&chunk[..n as usize]);
        off += n as i64;
        if b.len() as u64 > MAX_FILE {
            return Saved::Opaque;
        }
    }
    match fsat::fstat(&fd) {
        Ok(z) if (z.st_ctime, z.st_ctime_nsec) == (a.st_ctime, a.st_ctime_nsec) => {
            Saved::File(b, a.st_mode & 0o7777)
        }
        _ => Saved::Opaque,
    }
}

/// A directory as it was before `taken`, read from its old inode: entries changed since
/// (by anyone who could reach the old directory under another name) are left out.
fn saved_before(dir: BorrowedFd<'_>, taken: (i64, i64), depth: usize, budget: &mut usize) -> Saved {
    let mut out = BTreeMap::new();
    for n in list(dir).unwrap_or_default() {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let Some(st) = lstat_at(dir, &n) else {
            continue;
        };
        if !older(&st, taken) {
            continue;
        }
        let s = match kind(&st) {
            libc::S_IFREG => match open_beneath(
                dir,
                Path::new(&n),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            ) {
                Ok(fd) => read_unchanged(fd, Some(taken)),
                Err(_) => Saved::Opaque,
            },
            libc::S_IFLNK => link_at(dir, &n),
            libc::S_IFDIR if depth < 4 => match fsat::open_dir_beneath(dir, Path::new(&n)) {
                Ok(fd) => saved_before(fd.as_fd(), taken, depth + 1, budget),
                Err(_) => Saved::Opaque,
            },
            _ => Saved::Opaque,
        };
        // Left out rather than put back half: an entry not there is removed.
        if !matches!(s, Saved::Opaque) {
            out.insert(n, s);
        }
    }
    Saved::Dir(out)
}

impl Snapshot {
    /// Pins each writable root that holds a protected path and saves those paths.
    pub fn take(protected: &[PathBuf], roots: &[PathBuf]) -> Snapshot {
        Snapshot::take_with(protected, roots, Take::All)
    }

    /// As [`Snapshot::take`], but only the paths that exist: where read-only mounts
    /// cover the protected paths and the helper creates the missing `hooks`/`info`
    /// directories, what a mount can lose (the host replacing the file beneath it).
    pub fn take_existing(protected: &[PathBuf], roots: &[PathBuf]) -> Snapshot {
        Snapshot::take_with(protected, roots, Take::Existing)
    }

    /// As [`Snapshot::take_existing`], but files and directories are pinned, not read:
    /// where read-only mounts cover them, only a path the host replaced during the
    /// command can have been written, and it is put back from the inode pinned here.
    pub fn take_pinned(protected: &[PathBuf], roots: &[PathBuf]) -> Snapshot {
        Snapshot::take_with(protected, roots, Take::Pinned)
    }

    fn take_with(protected: &[PathBuf], roots: &[PathBuf], how: Take) -> Snapshot {
        let mut snap = Snapshot {
            taken: coarse_now(),
            ..Snapshot::default()
        };
        let mut pinned: Vec<(PathBuf, usize)> = Vec::new();
        let mut held = 0usize;
        for p in protected {
            let Some(root) = roots
                .iter()
                .filter(|r| p.starts_with(r))
                .max_by_key(|r| r.as_os_str().len())
            else {
                continue;
            };
            let Ok(rel) = p.strip_prefix(root) else {
                continue;
            };
            let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
                continue;
            };
            let idx = match pinned.iter().find(|(r, _)| r == root) {
                Some((_, i)) => *i,
                None => {
                    let Ok(fd) = pin(root) else { continue };
                    snap.roots.push(fd);
                    pinned.push((root.clone(), snap.roots.len() - 1));
                    snap.roots.len() - 1
                }
            };
            let Ok(d) = fsat::open_dir_beneath(snap.roots[idx].as_fd(), parent) else {
                // Not reachable without a symlink now: nothing to put back later.
                continue;
            };
            let pinned = if how == Take::Pinned && held < MAX_PINNED {
                pin_at(d.as_fd(), name)
            } else {
                None
            };
            held += usize::from(pinned.is_some());
            let before = match pinned {
                Some(p) => p,
                None => {
                    let s = save_at(d.as_fd(), name, 0, &mut MAX_ENTRIES.clone());
                    if s == Saved::Opaque || (how != Take::All && s == Saved::Absent) {
                        continue;
                    }
                    Before::Saved(s)
                }
            };
            snap.saved.push(Entry {
                path: p.clone(),
                root: idx,
                parent: parent.to_path_buf(),
                name: name.to_os_string(),
                before,
            });
        }
        snap
    }

    /// Puts back what changed; returns `(path, what happened)` for each change.
    pub fn restore(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        for e in &self.saved {
            let root = self.roots[e.root].as_fd();
            // Every directory from the root down to the parent must still be one.
            let what = match fsat::open_dir_beneath(root, &e.parent) {
                Err(_) => "changed; not restored: a directory on its path was replaced".to_string(),
                Ok(dir) => {
                    let dir = dir.as_fd();
                    let before = match &e.before {
                        Before::Saved(s) => s.clone(),
                        Before::Pinned { fd, dev, ino } => {
                            // Still the inode pinned: its mount held, nothing could write.
                            #[allow(clippy::unnecessary_cast)]
                            if lstat_at(dir, &e.name).is_some_and(|st| {
                                (st.st_dev as u64, st.st_ino as u64) == (*dev, *ino)
                            }) {
                                continue;
                            }
                            self.pinned_contents(fd)
                        }
                    };
                    let now = save_at(dir, &e.name, 0, &mut MAX_ENTRIES.clone());
                    if now == before {
                        continue;
                    }
                    if before == Saved::Opaque {
                        "replaced; not restored: what was there cannot be read back".to_string()
                    } else {
                        match put_at(dir, &e.name, &before) {
                            Ok(()) => "changed by the command; restored".to_string(),
                            Err(err) => format!("changed; restoring failed: {err}"),
                        }
                    }
                }
            };
            out.push((e.path.clone(), what));
        }
        out
    }

    /// What a pinned path held before the command: a file's old inode as it is (only
    /// the host could write it), a directory's entries unchanged since the snapshot.
    fn pinned_contents(&self, fd: &OwnedFd) -> Saved {
        let Ok(st) = fsat::fstat(fd) else {
            return Saved::Opaque;
        };
        match kind(&st) {
            libc::S_IFREG => match fd.try_clone() {
                Ok(fd) => read_unchanged(fd, None),
                Err(_) => Saved::Opaque,
            },
            libc::S_IFDIR => saved_before(fd.as_fd(), self.taken, 0, &mut MAX_ENTRIES.clone()),
            _ => Saved::Opaque,
        }
    }
}
