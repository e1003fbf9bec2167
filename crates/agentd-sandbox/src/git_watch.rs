//! inotify watches for the git scan's walk (Linux): a directory the walk has listed is
//! watched, so a later walk trusts what it remembers of it without a `stat` as long as
//! no event came for it, and a walk of a root in which nothing changed since the last
//! one is answered from that walk.
//!
//! Trust is lost, never gained, by events: an entry created, removed or renamed in a
//! watched directory makes its listing stale, and when the entry is (or was) a
//! directory, everything remembered at or below that name too (a directory renamed over
//! another one, a tree moved in its place: the names now lead to other inodes). A
//! watched directory itself deleted or moved loses its watch. A full event queue
//! (`IN_Q_OVERFLOW`) forgets everything. A directory is watched through the descriptor
//! it is listed from (`/proc/self/fd/N`), added before the listing, so what is
//! remembered and what is watched are the same inode, and a change after the listing
//! is an event.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Most directories watched; past it the watches are dropped and built again.
const MAX_WATCHES: usize = 50_000;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// What a walk knows of one directory.
#[derive(Debug, Clone)]
pub struct Listing {
    pub subdirs: Vec<OsString>,
    pub git: bool,
    pub skip: bool,
}

/// The watched directories and what their last listing said.
#[derive(Debug)]
pub struct Watches {
    fd: OwnedFd,
    by_wd: HashMap<i32, PathBuf>,
    by_path: HashMap<PathBuf, (i32, Arc<Listing>)>,
    /// Bumped by every event that changed what is trusted.
    generation: u64,
    /// The last complete walk of each root: the generation it saw and what it found.
    walks: HashMap<PathBuf, (u64, Vec<PathBuf>)>,
}

impl Watches {
    pub fn new() -> Option<Watches> {
        // SAFETY: inotify_init1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        Some(Watches {
            // SAFETY: a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            by_wd: HashMap::new(),
            by_path: HashMap::new(),
            generation: 0,
            walks: HashMap::new(),
        })
    }

    fn forget_all(&mut self) {
        for wd in self.by_wd.keys() {
            // SAFETY: removing a watch of our own instance; a stale one fails harmlessly.
            unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), *wd) };
        }
        self.by_wd.clear();
        self.by_path.clear();
        self.walks.clear();
        self.generation += 1;
    }

    /// Forgets `p` (its listing and which watch is its), and with `below` everything
    /// under it too.
    fn forget(&mut self, p: &Path, below: bool) {
        if below {
            self.by_path.retain(|k, _| !k.starts_with(p));
            self.by_wd.retain(|_, v| !v.starts_with(p));
        } else if let Some((wd, _)) = self.by_path.remove(p) {
            if self.by_wd.get(&wd).map(PathBuf::as_path) == Some(p) {
                self.by_wd.remove(&wd);
            }
        }
    }

    /// Reads every queued event and drops the trust they take away.
    pub fn drain(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reading into a buffer of its length from our descriptor.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
            let mut off = 0usize;
            let head = std::mem::size_of::<libc::inotify_event>();
            while off + head <= n as usize {
                // SAFETY: the kernel wrote whole events; read_unaligned copes with the
                // byte buffer's alignment.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf.as_ptr().add(off).cast()) };
                let name_bytes = &buf[off + head..(off + head + ev.len as usize).min(n as usize)];
                let name_end = name_bytes
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(name_bytes.len());
                let name = OsStr::from_bytes(&name_bytes[..name_end]).to_os_string();
                off += head + ev.len as usize;
                self.event(ev.wd, ev.mask, name);
            }
        }
    }

    fn event(&mut self, wd: i32, mask: u32, name: OsString) {
        if mask & libc::IN_Q_OVERFLOW != 0 {
            self.forget_all();
            return;
        }
        let Some(dir) = self.by_wd.get(&wd).cloned() else {
            return;
        };
        self.generation += 1;
        if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 {
            self.forget(&dir, true);
            return;
        }
        // The directory's listing is stale (its watch stays its own: the next event on
        // it still names it); a directory entry's whole subtree is forgotten.
        self.by_path.remove(&dir);
        if !name.is_empty() {
            self.forget(&dir.join(&name), mask & libc::IN_ISDIR != 0);
        }
    }

    /// What was listed of `dir` when nothing has changed it since.
    pub fn trusted(&self, dir: &Path) -> Option<Arc<Listing>> {
        let (wd, l) = self.by_path.get(dir)?;
        (self.by_wd.get(wd).map(PathBuf::as_path) == Some(dir)).then(|| l.clone())
    }

    /// Lists `dir` (`rel` below the open root `root_fd`) through a descriptor opened
    /// without following a symlink, watching it first; `None` when it is not a
    /// directory now. The listing is remembered (and `.1` is true) when the watch could
    /// be added.
    pub fn list(&mut self, root_fd: RawFd, rel: &Path, dir: &Path) -> Option<(Arc<Listing>, bool)> {
        let c = if rel.as_os_str().is_empty() {
            CString::new(".").ok()?
        } else {
            CString::new(rel.as_os_str().as_bytes()).ok()?
        };
        let fd = open_dir_beneath(root_fd, &c)?;
        if self.by_path.len() >= MAX_WATCHES {
            self.forget_all();
        }
        let magic = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        // SAFETY: a NUL-terminated path; the watch is on the inode `fd` holds.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), magic.as_ptr(), MASK) };
        let listing = Arc::new(read_listing(fd)?);
        if wd >= 0 {
            if let Some(old) = self.by_wd.insert(wd, dir.to_path_buf()) {
                if old != dir {
                    self.by_path.remove(&old);
                }
            }
            self.by_path
                .insert(dir.to_path_buf(), (wd, listing.clone()));
        }
        Some((listing, wd >= 0))
    }

    /// The last walk of `root`, when nothing changed since.
    pub fn walk(&self, root: &Path) -> Option<&Vec<PathBuf>> {
        self.walks
            .get(root)
            .filter(|(g, _)| *g == self.generation)
            .map(|(_, v)| v)
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Remembers a complete walk of `root` that began at generation `at`.
    pub fn walked(&mut self, root: &Path, at: u64, found: Vec<PathBuf>) {
        if self.walks.len() > 1024 {
            self.walks.clear();
        }
        self.walks.insert(root.to_path_buf(), (at, found));
    }
}

/// `struct open_how` of `linux/openat2.h`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens the directory `rel` below `root` without following a symlink anywhere on the
/// way (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; `openat(O_NOFOLLOW)` where
/// the kernel has no openat2).
fn open_dir_beneath(root: RawFd, rel: &CString) -> Option<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a NUL-terminated path and a correctly sized open_how.
    let mut fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            rel.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    } as i32;
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        // SAFETY: openat with a NUL-terminated relative path.
        fd = unsafe { libc::openat(root, rel.as_ptr(), flags) };
    }
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn read_listing(fd: OwnedFd) -> Option<Listing> {
    // SAFETY: fdopendir takes ownership of the descriptor on success.
    let d = unsafe { libc::fdopendir(fd.as_raw_fd()) };
    if d.is_null() {
        return None;
    }
    std::mem::forget(fd);
    let mut l = Listing {
        subdirs: Vec::new(),
        git: false,
        skip: false,
    };
    // SAFETY: `d` is a valid DIR stream until closedir; each dirent is read before the
    // next readdir call.
    unsafe {
        loop {
            let e = libc::readdir(d);
            if e.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if name == b".git" {
                l.git = true;
                continue;
            }
            if name == b"CACHEDIR.TAG" {
                l.skip = true;
            }
            let is_dir = match (*e).d_type {
                libc::DT_DIR => true,
                libc::DT_UNKNOWN => {
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::fstatat(
                        libc::dirfd(d),
                        (*e).d_name.as_ptr(),
                        &mut st,
                        libc::AT_SYMLINK_NOFOLLOW,
                    ) == 0
                        && (st.st_mode & libc::S_IFMT) == libc::S_IFDIR
                }
                _ => false,
            };
            if is_dir {
                l.subdirs.push(OsString::from_vec(name.to_vec()));
            }
        }
        libc::closedir(d);
    }
    Some(l)
}
