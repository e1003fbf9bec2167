//! The in-memory model of a workspace that makes a snapshot cheap: every file of the
//! last snapshot with its stat data (size, mtime, ctime, inode, mode) and object id.
//!
//! Every read goes through descriptors ([`agentd_fsat`]): the workspace is opened once per
//! scan, each directory below it from its parent's descriptor and each file from its
//! directory's, never following a symlink, so a command that swaps a directory for a
//! symlink mid-scan cannot make the daemon read (and store, and later write back) a
//! file from outside the workspace.
//!
//! A full scan walks the workspace honouring `.gitignore` files and `.git/info/exclude`
//! (git's rules: the deepest file decides, an ignored directory is not entered; matched
//! with the `ignore` crate's gitignore matcher), never following a symlink and never
//! entering a `.git`; it stats each file and hashes only those whose stat data changed.
//! A path scan (a file tool's own target) stats and hashes just that path. Only the
//! trees on the way to a changed path are written again; the others come from a cache
//! keyed by directory. Paths are kept in byte order, which is git's index order, so one
//! ordered pass over a directory's range lists its tree's entries in git's order.
//!
//! Racy files: a file modified within [`RACY_NS`] of the moment it was hashed may
//! change again with the same stat data, so it is hashed again at the next scan.

use super::objects::{push_entry, Oid, Store, MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE};
use super::Skipped;
use crate::SnapshotConfig;
use agentd_fsat as fsat;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::ops::Bound;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// A file modified this close to its hashing is hashed again next time.
const RACY_NS: i128 = 50_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    mode: u32,
}

impl Stat {
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    fn of(st: &libc::stat) -> Stat {
        Stat {
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
            ctime_ns: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
        }
    }
}

impl Stat {
    /// `mode_t` is narrower than `u32` on some platforms.
    #[allow(clippy::unnecessary_cast)]
    fn is_link(&self) -> bool {
        self.mode & libc::S_IFMT as u32 == libc::S_IFLNK as u32
    }
}

/// A directory deeper than this below the workspace is not entered (each level holds a
/// descriptor while the scan is below it); what the model had there is kept.
const MAX_DEPTH: usize = 256;

/// An ignore file larger than this is not read (as if it were unreadable).
const MAX_IGNORE_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone)]
struct Entry {
    mode: u32,
    oid: Oid,
    stat: Stat,
    racy: bool,
    /// The full scan that last found the file.
    seen: u64,
}

/// More changed paths than this since the last scan: a full scan is cheaper.
const MAX_WATCHED_CHANGES: usize = 5000;

pub(crate) use watch::Watch;

/// inotify watches on every directory of the last full scan (ignored ones excepted):
/// what a shell command changed is read from the queue instead of stat-ing every file.
/// Linux only; elsewhere there is no watch and every snapshot scans the workspace.
#[cfg(target_os = "linux")]
mod watch {
    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
    use std::collections::{BTreeSet, HashMap};
    use std::os::fd::OwnedFd;

    pub struct Watch {
        ino: Inotify,
        /// Workspace-relative prefix (`""` or ending in `/`) of each watched directory.
        dirs: HashMap<WatchDescriptor, Vec<u8>>,
    }

    impl std::fmt::Debug for Watch {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Watch({} directories)", self.dirs.len())
        }
    }

    fn watch_mask() -> WatchMask {
        WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::ATTRIB
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR
            | WatchMask::EXCL_UNLINK
    }

    impl Watch {
        /// A fresh watch, or `None` when the system gives none.
        pub fn new() -> Option<Watch> {
            Inotify::init().ok().map(|ino| Watch {
                ino,
                dirs: HashMap::new(),
            })
        }

        /// Watches the directory held by `dir` (workspace-relative prefix `rel`), named
        /// by its descriptor so the watch is on that very directory; false at the
        /// system's limit (or with no `/proc`).
        pub fn add(&mut self, dir: &OwnedFd, rel: &[u8]) -> bool {
            match self
                .ino
                .watches()
                .add(agentd_fsat::proc_path(dir), watch_mask())
            {
                Ok(wd) => {
                    self.dirs.insert(wd, rel.to_vec());
                    true
                }
                Err(_) => false,
            }
        }

        /// Reads the queued events into the changed `files` and `dirs`
        /// (workspace-relative); false when only a full scan can tell what changed (an
        /// overflow, the workspace itself moved, `.gitignore` or `.git` touched).
        pub fn drain(
            &mut self,
            files: &mut BTreeSet<Vec<u8>>,
            dirs: &mut BTreeSet<Vec<u8>>,
        ) -> bool {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let evs = match self.ino.read_events(&mut buf) {
                    Ok(evs) => evs,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                };
                for e in evs {
                    if e.mask.contains(EventMask::Q_OVERFLOW) {
                        return false;
                    }
                    if e.mask.contains(EventMask::IGNORED) {
                        self.dirs.remove(&e.wd);
                        continue;
                    }
                    let Some(prefix) = self.dirs.get(&e.wd) else {
                        continue;
                    };
                    let Some(name) = e.name else {
                        // The directory itself went away or moved: its parent's event
                        // says so, except for the workspace, which needs a full scan.
                        if prefix.is_empty()
                            && e.mask
                                .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF)
                        {
                            return false;
                        }
                        continue;
                    };
                    if name == ".gitignore" || name == ".git" {
                        return false;
                    }
                    let mut p = prefix.clone();
                    p.extend_from_slice(name.as_encoded_bytes());
                    if e.mask.contains(EventMask::ISDIR) {
                        dirs.insert(p);
                    } else {
                        files.insert(p);
                    }
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod watch {
    use std::collections::BTreeSet;
    use std::os::fd::OwnedFd;

    /// No file watch outside Linux: every snapshot scans the workspace.
    #[derive(Debug)]
    pub enum Watch {}

    impl Watch {
        pub fn new() -> Option<Watch> {
            None
        }
        pub fn add(&mut self, _dir: &OwnedFd, _rel: &[u8]) -> bool {
            match *self {}
        }
        pub fn drain(
            &mut self,
            _files: &mut BTreeSet<Vec<u8>>,
            _dirs: &mut BTreeSet<Vec<u8>>,
        ) -> bool {
            match *self {}
        }
    }
}

/// What one update found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub tree: Oid,
    /// Paths whose entry differs from the model's previous tree.
    pub changed: Vec<String>,
    pub skipped: Vec<Skipped>,
    pub warnings: Vec<String>,
    /// Files read and hashed (their stat data changed, or they were new).
    pub hashed: usize,
}

/// The workspace as of the last snapshot taken through this model.
#[derive(Debug)]
pub struct Model {
    files: BTreeMap<Vec<u8>, Entry>,
    /// Tree ids by directory prefix (`""`, `"a/"`, `"a/b/"`), dropped along a change.
    trees: HashMap<Vec<u8>, Oid>,
    /// Parsed ignore files by path, with the stat data they were read at.
    ignores: HashMap<PathBuf, (Stat, Option<Arc<Gitignore>>)>,
    generation: u64,
    /// Directory watches since the last full scan; `None` when unavailable.
    watch: Option<Watch>,
    /// The tree of `files`; `None` until the first full scan.
    pub tree: Option<Oid>,
    pub store: Store,
    /// Identity of the repository directory the objects went to (device, inode): a
    /// rebuilt repository is a new directory, and this model no longer describes it.
    pub repo_id: (u64, u64),
}

/// Caps of one update: bytes hashed so far and the limits.
struct Budget<'a> {
    cfg: &'a SnapshotConfig,
    total: u64,
    skipped: Vec<Skipped>,
    warnings: Vec<String>,
    now_ns: i128,
    hashed: usize,
}

impl<'a> Budget<'a> {
    fn new(cfg: &'a SnapshotConfig) -> Self {
        Budget {
            cfg,
            total: 0,
            skipped: Vec::new(),
            warnings: Vec::new(),
            now_ns: now_ns(),
            hashed: 0,
        }
    }
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn key(rel: &Path) -> Vec<u8> {
    rel.as_os_str().as_bytes().to_vec()
}

impl Model {
    pub fn new(objects: PathBuf, repo_id: (u64, u64)) -> Model {
        Model {
            files: BTreeMap::new(),
            trees: HashMap::new(),
            ignores: HashMap::new(),
            generation: 0,
            watch: None,
            tree: None,
            store: Store::new(objects),
            repo_id,
        }
    }

    /// The model saved by the last full scan of this repository (after a daemon
    /// restart: the stat data spare hashing every file again), else an empty one.
    pub fn load(objects: PathBuf, repo_id: (u64, u64)) -> Model {
        let mut m = Model::new(objects, repo_id);
        if let Some((tree, files)) = std::fs::read(m.saved_path())
            .ok()
            .and_then(|b| decode(&b, repo_id))
        {
            if matches!(
                super::objects::read_header(&m.objects_dir(), &tree),
                Ok(Some(_))
            ) {
                m.tree = Some(tree);
                m.files = files;
            }
        }
        m
    }

    fn objects_dir(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }

    fn saved_path(&self) -> PathBuf {
        let o = self.store.dir();
        o.parent().unwrap_or(o).join("agentd-model")
    }

    /// Saves files and tree (a cache: a failure only costs hashing after a restart).
    fn save(&self) {
        let Some(tree) = self.tree else { return };
        let bytes = encode(&tree, self.repo_id, &self.files);
        let path = self.saved_path();
        let tmp = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
        if std::fs::write(&tmp, bytes)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Rescans the whole workspace; with `watched`, only what the watch saw change when
    /// it can stand for a full rescan.
    pub fn scan_all(
        &mut self,
        ws: &Path,
        exclude: Option<&Path>,
        cfg: &SnapshotConfig,
        watched: bool,
    ) -> std::io::Result<Outcome> {
        let root = fsat::open_root(ws)?;
        if watched && self.tree.is_some() {
            if let Some(out) = self.scan_watched(&root, ws, exclude, cfg)? {
                return Ok(out);
            }
        }
        // A fresh watch, set on each directory before it is read: a change after the
        // read is an event for the next scan.
        self.watch = Watch::new();
        let mut b = Budget::new(cfg);
        self.generation += 1;
        let mut changed = Vec::new();
        let mut stack = Vec::new();
        if let Some(g) = exclude.and_then(|x| self.exclude_file(&root, ws, x)) {
            stack.push(g);
        }
        let mut rel = Vec::new();
        self.walk(root, ws, &mut rel, 0, &mut stack, &mut changed, &mut b)?;
        let gen = self.generation;
        let gone: Vec<Vec<u8>> = self
            .files
            .iter()
            .filter(|(_, e)| e.seen != gen)
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.files.remove(&k);
            self.touch(&k, &mut changed);
        }
        if self.tree.is_none() {
            changed.clear();
        }
        changed.sort();
        changed.dedup();
        let out = self.finish(changed, b)?;
        self.save();
        Ok(out)
    }

    /// One directory of a full scan, read through `dir` (its descriptor; `path` names
    /// it for the ignore matchers only): `rel` is its workspace-relative prefix (`""` or
    /// ending in `/`), `depth` its number of components, `stack` the ignore files in
    /// force, outermost first.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &mut self,
        dir: OwnedFd,
        path: &Path,
        rel: &mut Vec<u8>,
        depth: usize,
        stack: &mut Vec<Arc<Gitignore>>,
        changed: &mut Vec<String>,
        b: &mut Budget,
    ) -> std::io::Result<()> {
        self.watch_dir(&dir, rel);
        let names = match fsat::list(&dir) {
            Ok(names) => names,
            // The workspace itself must be there; a subdirectory may vanish or be closed.
            Err(e) if rel.is_empty() => return Err(e),
            Err(e) => {
                b.warn(Path::new(OsStr::from_bytes(rel)), &e);
                self.keep_under(rel);
                return Ok(());
            }
        };
        let base = rel.len();
        let mut entries: Vec<(std::ffi::OsString, fsat::Kind)> = Vec::new();
        for (name, kind) in names {
            if name == ".git" {
                continue;
            }
            let kind = match kind {
                // Relative to the open directory, never following a symlink.
                fsat::Kind::Unknown => match fsat::stat_at(&dir, &name) {
                    Ok(Some(st)) => fsat::kind_of(&st),
                    // Gone since the listing.
                    Ok(None) => continue,
                    Err(e) => {
                        self.keep_entry(rel, base, &name, &e, b);
                        continue;
                    }
                },
                k => k,
            };
            entries.push((name, kind));
        }
        rel.truncate(base);
        entries.sort_by(|x, y| x.0.as_bytes().cmp(y.0.as_bytes()));
        let pushed = entries
            .iter()
            .any(|(n, k)| n == ".gitignore" && *k == fsat::Kind::File)
            && match self.ignore_file(
                &dir,
                OsStr::new(".gitignore"),
                &path.join(".gitignore"),
                path,
            ) {
                Some(g) => {
                    stack.push(g);
                    true
                }
                None => false,
            };
        for (name, kind) in entries {
            let is_dir = kind == fsat::Kind::Dir;
            if !matches!(kind, fsat::Kind::Dir | fsat::Kind::File | fsat::Kind::Link) {
                continue;
            }
            let child = path.join(&name);
            if !stack.is_empty() && ignored_by(stack, &child, is_dir) {
                continue;
            }
            rel.truncate(base);
            rel.extend_from_slice(name.as_bytes());
            if is_dir {
                rel.push(b'/');
                let sub = if depth >= MAX_DEPTH {
                    Err(std::io::Error::other(format!(
                        "deeper than {MAX_DEPTH} directories: not scanned"
                    )))
                } else {
                    fsat::open_at(&dir, &name, libc::O_RDONLY | libc::O_DIRECTORY)
                };
                match sub {
                    Ok(fd) => self.walk(fd, &child, rel, depth + 1, stack, changed, b)?,
                    // Gone, or swapped for a symlink or a file since it was listed: what
                    // the model had under it stays until a scan can read it.
                    Err(e) => {
                        b.warn(Path::new(OsStr::from_bytes(rel)), &e);
                        self.keep_under(rel);
                    }
                }
                continue;
            }
            // Relative to the open directory, never following a symlink.
            let st = match fsat::stat_at(&dir, &name) {
                Ok(Some(st)) if fsat::is_file(&st) || fsat::is_link(&st) => st,
                // Gone, or no longer a file or a symlink: swept as gone.
                Ok(_) => continue,
                Err(e) => {
                    self.keep_entry(rel, base, &name, &e, b);
                    continue;
                }
            };
            let gen = self.generation;
            let stat = Stat::of(&st);
            if let Some(old) = self.files.get_mut(rel.as_slice()) {
                if old.stat == stat && !old.racy {
                    old.seen = gen;
                    continue;
                }
            }
            let k = rel.clone();
            let relp = PathBuf::from(OsStr::from_bytes(&k));
            // Skipped or unreadable without an earlier version: left out (an earlier entry
            // is swept as gone).
            if let Some(mut e) = self.resolve(&dir, &name, &relp, &k, stat, b) {
                e.seen = gen;
                let same = self
                    .files
                    .get(&k)
                    .is_some_and(|o| (o.mode, o.oid) == (e.mode, e.oid));
                self.files.insert(k.clone(), e);
                if !same {
                    self.touch(&k, changed);
                }
            }
        }
        rel.truncate(base);
        if pushed {
            stack.pop();
        }
        Ok(())
    }

    /// Keeps the entry `name` of the directory `rel[..base]` (and all under it) as the
    /// model has it: it could not be stat-ed.
    fn keep_entry(
        &mut self,
        rel: &mut Vec<u8>,
        base: usize,
        name: &OsStr,
        e: &std::io::Error,
        b: &mut Budget,
    ) {
        rel.truncate(base);
        rel.extend_from_slice(name.as_bytes());
        b.warn(Path::new(OsStr::from_bytes(rel)), e);
        let gen = self.generation;
        if let Some(old) = self.files.get_mut(rel.as_slice()) {
            old.seen = gen;
        }
        rel.push(b'/');
        self.keep_under(rel);
        rel.truncate(base);
    }

    /// Keeps every entry under `prefix` as it is (a directory that could not be read).
    fn keep_under(&mut self, prefix: &[u8]) {
        let gen = self.generation;
        for (_, e) in self
            .files
            .range_mut::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            e.seen = gen;
        }
    }

    /// Records `k` as changed and drops the cached trees on its way.
    fn touch(&mut self, k: &[u8], changed: &mut Vec<String>) {
        changed.push(String::from_utf8_lossy(k).into_owned());
        self.trees.remove(&[][..]);
        for (i, c) in k.iter().enumerate() {
            if *c == b'/' {
                self.trees.remove(&k[..=i]);
            }
        }
    }

    /// The parsed ignore file `name` in `dir` (named `path`, its patterns relative to
    /// `root`), re-read only when its stat data changed; `None` when it is missing,
    /// unreadable, too large or not a regular file (a symlinked `.gitignore` is not
    /// followed, as git does not).
    fn ignore_file(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        path: &Path,
        root: &Path,
    ) -> Option<Arc<Gitignore>> {
        let st = fsat::stat_at(dir, name).ok()??;
        if !fsat::is_file(&st) {
            return None;
        }
        let stat = Stat::of(&st);
        if let Some((s, g)) = self.ignores.get(path) {
            if *s == stat {
                return g.clone();
            }
        }
        let g = match fsat::read_file_at(dir, name, MAX_IGNORE_BYTES) {
            Ok((_, body)) if body.len() as u64 <= MAX_IGNORE_BYTES => {
                parse_ignore(&body, path, root)
            }
            _ => None,
        };
        self.ignores.insert(path.to_path_buf(), (stat, g.clone()));
        g
    }

    /// The repository's exclude file `x` (under `ws`, read beneath the workspace).
    fn exclude_file(&mut self, root: &OwnedFd, ws: &Path, x: &Path) -> Option<Arc<Gitignore>> {
        let rel = x.strip_prefix(ws).ok()?;
        let dir = fsat::open_dir_beneath(root, rel.parent()?).ok()?;
        self.ignore_file(&dir, rel.file_name()?, x, ws)
    }

    /// The stat data of the exclude file `x`, read as [`Model::exclude_file`] reads it.
    fn exclude_stat(root: &OwnedFd, ws: &Path, x: &Path) -> Option<Stat> {
        let rel = x.strip_prefix(ws).ok()?;
        let dir = fsat::open_dir_beneath(root, rel.parent()?).ok()?;
        let st = fsat::stat_at(&dir, rel.file_name()?).ok()??;
        fsat::is_file(&st).then(|| Stat::of(&st))
    }

    /// Rescans only `paths` (workspace-relative, plain). `Ok(None)` when they cannot be
    /// handled alone (no full scan yet, a `.gitignore` among them, a directory): the
    /// caller scans everything instead.
    pub fn scan_paths(
        &mut self,
        ws: &Path,
        exclude: Option<&Path>,
        paths: &[PathBuf],
        cfg: &SnapshotConfig,
    ) -> std::io::Result<Option<Outcome>> {
        if self.tree.is_none()
            || paths.iter().any(|p| {
                p.file_name().is_some_and(|n| n == ".gitignore")
                    || !p.components().all(|c| matches!(c, Component::Normal(_)))
            })
        {
            return Ok(None);
        }
        let root = fsat::open_root(ws)?;
        let mut b = Budget::new(cfg);
        let mut changed = Vec::new();
        for rel in paths {
            if !self.update_path(&root, ws, exclude, rel, &mut b, &mut changed) {
                return Ok(None);
            }
        }
        changed.sort();
        changed.dedup();
        self.finish(changed, b).map(Some)
    }

    /// Brings the entry of one workspace-relative file path up to date, reading it
    /// beneath `root`. `false` when the path is a directory now (the caller scans it as
    /// one).
    fn update_path(
        &mut self,
        root: &OwnedFd,
        ws: &Path,
        exclude: Option<&Path>,
        rel: &Path,
        b: &mut Budget,
        changed: &mut Vec<String>,
    ) -> bool {
        let k = key(rel);
        let Some(name) = rel.file_name() else {
            return false;
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        let mut dir = None;
        let meta = if rel.components().any(|c| c.as_os_str() == ".git")
            || self.ignored(root, ws, rel, exclude)
        {
            None
        } else {
            match fsat::open_dir_beneath(root, parent) {
                Ok(d) => match fsat::stat_at(&d, name) {
                    Ok(Some(st)) if fsat::is_dir(&st) => return false,
                    Ok(Some(st)) => {
                        dir = Some(d);
                        Some(st)
                    }
                    Ok(None) => None,
                    Err(err) => {
                        b.warn(rel, &err);
                        return true;
                    }
                },
                // A directory on the way is gone, or a symlink or a file now: nothing
                // of the workspace is at `rel`.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EXDEV)
                    ) =>
                {
                    None
                }
                Err(err) => {
                    b.warn(rel, &err);
                    return true;
                }
            }
        };
        if let (Some(st), Some(old)) = (&meta, self.files.get(&k)) {
            if old.stat == Stat::of(st) && !old.racy {
                return true;
            }
        }
        let entry = match (&meta, &dir) {
            (Some(st), Some(d)) if fsat::is_file(st) || fsat::is_link(st) => {
                self.resolve(d, name, rel, &k, Stat::of(st), b)
            }
            _ => None,
        };
        let before = self.files.get(&k).map(|e| (e.mode, e.oid));
        if before != entry.as_ref().map(|e| (e.mode, e.oid)) {
            self.touch(&k, changed);
        }
        match entry {
            Some(mut e) => {
                e.seen = self.files.get(&k).map_or(self.generation, |o| o.seen);
                self.files.insert(k, e);
            }
            None => {
                self.files.remove(&k);
            }
        }
        true
    }

    /// The ignore files in force inside the directory `rel_dir` (outermost first), or
    /// `None` when it or a directory above it is ignored. Each directory on the way is
    /// opened from its parent's descriptor; past one that cannot be (gone, or a symlink
    /// now), no further ignore file is read.
    fn stack_for(
        &mut self,
        root: &OwnedFd,
        ws: &Path,
        rel_dir: &Path,
        exclude: Option<&Path>,
    ) -> Option<Vec<Arc<Gitignore>>> {
        let mut stack = Vec::new();
        if let Some(g) = exclude.and_then(|x| self.exclude_file(root, ws, x)) {
            stack.push(g);
        }
        let mut dir = ws.to_path_buf();
        let gi = OsStr::new(".gitignore");
        if let Some(g) = self.ignore_file(root, gi, &dir.join(gi), &dir) {
            stack.push(g);
        }
        let mut cur: Option<OwnedFd> = None;
        let mut lost = false;
        for c in rel_dir.components() {
            let child = dir.join(c.as_os_str());
            if ignored_by(&stack, &child, true) {
                return None;
            }
            dir = child;
            if lost {
                continue;
            }
            let next = fsat::open_at(
                cur.as_ref().unwrap_or(root),
                c.as_os_str(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            match next {
                Ok(fd) => {
                    if let Some(g) = self.ignore_file(&fd, gi, &dir.join(gi), &dir) {
                        stack.push(g);
                    }
                    cur = Some(fd);
                }
                Err(_) => lost = true,
            }
        }
        Some(stack)
    }

    /// Whether git would ignore the file `rel`: the `.gitignore` of each directory on the
    /// way (the deepest deciding) and the exclude file; a file under an ignored directory
    /// is ignored.
    fn ignored(&mut self, root: &OwnedFd, ws: &Path, rel: &Path, exclude: Option<&Path>) -> bool {
        let parent = rel.parent().unwrap_or(Path::new(""));
        match self.stack_for(root, ws, parent, exclude) {
            None => true,
            Some(stack) => ignored_by(&stack, &ws.join(rel), false),
        }
    }

    /// The changes the watch saw since the last scan, applied: `Ok(None)` when they
    /// cannot stand for a full scan (no watch yet, an overflow, a `.gitignore` changed,
    /// the workspace itself moved).
    fn scan_watched(
        &mut self,
        root: &OwnedFd,
        ws: &Path,
        exclude: Option<&Path>,
        cfg: &SnapshotConfig,
    ) -> std::io::Result<Option<Outcome>> {
        // The exclude file lives in `.git`, which is not watched.
        if let Some(x) = exclude {
            let now = Model::exclude_stat(root, ws, x);
            if now != self.ignores.get(x).map(|(s, _)| *s) {
                return Ok(None);
            }
        }
        let mut files: std::collections::BTreeSet<Vec<u8>> = Default::default();
        let mut dirs: std::collections::BTreeSet<Vec<u8>> = Default::default();
        {
            let Some(w) = self.watch.as_mut() else {
                return Ok(None);
            };
            if !w.drain(&mut files, &mut dirs) {
                return Ok(None);
            }
        }
        if files.len() + dirs.len() > MAX_WATCHED_CHANGES {
            return Ok(None);
        }
        let mut b = Budget::new(cfg);
        let mut changed = Vec::new();
        // Directories created, deleted or moved: rescanned whole (watches added for new
        // ones), and whatever was under them and is gone, swept.
        let mut done: Vec<Vec<u8>> = Vec::new();
        for d in &dirs {
            let mut prefix = d.clone();
            prefix.push(b'/');
            if done.iter().any(|p| prefix.starts_with(p)) {
                continue;
            }
            self.generation += 1;
            let gen = self.generation;
            let rel = PathBuf::from(OsStr::from_bytes(d));
            // Still a directory, reached without a symlink on the way.
            if let Ok(fd) = fsat::open_dir_beneath(root, &rel) {
                if let Some(mut stack) = self.stack_for(root, ws, &rel, exclude) {
                    let mut r = prefix.clone();
                    let depth = rel.components().count();
                    let abs = ws.join(&rel);
                    self.walk(fd, &abs, &mut r, depth, &mut stack, &mut changed, &mut b)?;
                }
            }
            let gone: Vec<Vec<u8>> = self
                .files
                .range::<[u8], _>((Bound::Included(prefix.as_slice()), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(&prefix))
                .filter(|(_, e)| e.seen != gen)
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                self.files.remove(&k);
                self.touch(&k, &mut changed);
            }
            done.push(prefix);
        }
        for f in &files {
            if done.iter().any(|p| f.starts_with(p)) {
                continue;
            }
            let rel = PathBuf::from(OsStr::from_bytes(f));
            if !self.update_path(root, ws, exclude, &rel, &mut b, &mut changed) {
                return Ok(None);
            }
        }
        changed.sort();
        changed.dedup();
        self.finish(changed, b).map(Some)
    }

    /// Starts watching the directory `dir` (workspace-relative prefix `rel`); a watch
    /// that cannot be added (the system's limit) turns watching off until the next full
    /// scan.
    fn watch_dir(&mut self, dir: &OwnedFd, rel: &[u8]) {
        let Some(w) = self.watch.as_mut() else {
            return;
        };
        if !w.add(dir, rel) {
            self.watch = None;
        }
    }

    /// The entry for the file `name` in `dir` (workspace-relative `rel`, listed with
    /// `stat`): the model's own when its stat data is unchanged, else read through its
    /// own descriptor and hashed anew within the caps (`None`: skipped or unreadable).
    fn resolve(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        rel: &Path,
        k: &[u8],
        stat: Stat,
        b: &mut Budget,
    ) -> Option<Entry> {
        if let Some(old) = self.files.get(k) {
            if old.stat == stat && !old.racy {
                return Some(old.clone());
            }
        }
        let link = stat.is_link();
        let too_large = |b: &mut Budget, bytes: u64, reason: &'static str| {
            b.skipped.push(Skipped {
                path: rel.to_string_lossy().into_owned(),
                bytes,
                reason,
            });
        };
        if !link {
            if stat.size > b.cfg.max_file_bytes {
                too_large(b, stat.size, "file_too_large");
                return None;
            }
            if b.total.saturating_add(stat.size) > b.cfg.max_snapshot_bytes {
                too_large(b, stat.size, "snapshot_too_large");
                return None;
            }
        }
        b.hashed += 1;
        let (mode, body, stat) = if link {
            match fsat::read_link_at(dir, name) {
                Ok(t) => (MODE_LINK, t, stat),
                Err(err) => return b.keep_old(self, rel, k, &err),
            }
        } else {
            match fsat::read_file_at(dir, name, b.cfg.max_file_bytes) {
                Ok((st, body)) => {
                    // The stat data of what was read, which may have grown since it was
                    // listed.
                    let st = Stat::of(&st);
                    let len = body.len() as u64;
                    if len > b.cfg.max_file_bytes {
                        too_large(b, st.size.max(len), "file_too_large");
                        return None;
                    }
                    if b.total.saturating_add(len) > b.cfg.max_snapshot_bytes {
                        too_large(b, len, "snapshot_too_large");
                        return None;
                    }
                    b.total += len;
                    let mode = if st.mode & 0o100 != 0 {
                        MODE_EXEC
                    } else {
                        MODE_FILE
                    };
                    (mode, body, st)
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
                Err(err) => return b.keep_old(self, rel, k, &err),
            }
        };
        match self.store.write("blob", &body) {
            Ok(oid) => Some(Entry {
                mode,
                oid,
                stat,
                seen: 0,
                racy: stat.mtime_ns + RACY_NS >= b.now_ns,
            }),
            Err(err) => b.keep_old(self, rel, k, &err),
        }
    }

    fn finish(&mut self, changed: Vec<String>, b: Budget) -> std::io::Result<Outcome> {
        let tree = write_tree(&self.files, &mut self.trees, &mut self.store, &[])?;
        self.tree = Some(tree);
        Ok(Outcome {
            tree,
            changed,
            skipped: b.skipped,
            warnings: b.warnings,
            hashed: b.hashed,
        })
    }
}

impl Budget<'_> {
    fn warn(&mut self, rel: &Path, err: &std::io::Error) {
        if self.warnings.len() < 20 {
            self.warnings.push(format!("{}: {err}", rel.display()));
        }
    }

    /// A file that could not be read keeps its previous content in the tree.
    fn keep_old(&mut self, m: &Model, rel: &Path, k: &[u8], err: &std::io::Error) -> Option<Entry> {
        self.warn(rel, err);
        m.files.get(k).cloned()
    }
}

/// The tree of the directory `prefix` (`""` or ending in `/`): from the cache when
/// nothing under it changed, else written with the trees under it.
fn write_tree(
    files: &BTreeMap<Vec<u8>, Entry>,
    cache: &mut HashMap<Vec<u8>, Oid>,
    store: &mut Store,
    prefix: &[u8],
) -> std::io::Result<Oid> {
    if let Some(oid) = cache.get(prefix) {
        return Ok(*oid);
    }
    let mut body = Vec::new();
    let mut from = prefix.to_vec();
    let mut inclusive = true;
    loop {
        let lower = if inclusive {
            Bound::Included(from.as_slice())
        } else {
            Bound::Excluded(from.as_slice())
        };
        let Some((k, e)) = files.range::<[u8], _>((lower, Bound::Unbounded)).next() else {
            break;
        };
        if !k.starts_with(prefix) {
            break;
        }
        let rest = &k[prefix.len()..];
        match rest.iter().position(|c| *c == b'/') {
            None => {
                push_entry(&mut body, e.mode, rest, &e.oid);
                from.clear();
                from.extend_from_slice(k);
                inclusive = false;
            }
            Some(n) => {
                let sub = &k[..prefix.len() + n + 1];
                let oid = write_tree(files, cache, store, sub)?;
                push_entry(&mut body, MODE_TREE, &rest[..n], &oid);
                // Past everything under `sub`: '0' is the byte after '/'.
                from.clear();
                from.extend_from_slice(sub);
                if let Some(last) = from.last_mut() {
                    *last = b'0';
                }
                inclusive = true;
            }
        }
    }
    let oid = store.write("tree", &body)?;
    cache.insert(prefix.to_vec(), oid);
    Ok(oid)
}

/// The ignore file `body` read from `path` (patterns relative to `root`), parsed as the
/// `ignore` crate reads one from disk (a leading BOM dropped); `None` when any line is
/// not understood, as an unreadable file is.
fn parse_ignore(body: &[u8], path: &Path, root: &Path) -> Option<Arc<Gitignore>> {
    let text = std::str::from_utf8(body).ok()?;
    let mut gb = GitignoreBuilder::new(root);
    for (i, line) in text.lines().enumerate() {
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        gb.add_line(Some(path.to_path_buf()), line).ok()?;
    }
    gb.build().ok().map(Arc::new)
}

/// Whether the innermost ignore file with an opinion on `path` ignores it.
fn ignored_by(stack: &[Arc<Gitignore>], path: &Path, is_dir: bool) -> bool {
    for m in stack.iter().rev() {
        match m.matched(path, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

const SAVED_MAGIC: &[u8] = b"agentd snapshot model 1\n";

fn encode(tree: &Oid, repo_id: (u64, u64), files: &BTreeMap<Vec<u8>, Entry>) -> Vec<u8> {
    let mut v = Vec::with_capacity(64 + files.len() * 96);
    v.extend_from_slice(SAVED_MAGIC);
    v.extend_from_slice(tree);
    v.extend_from_slice(&repo_id.0.to_le_bytes());
    v.extend_from_slice(&repo_id.1.to_le_bytes());
    v.extend_from_slice(&(files.len() as u64).to_le_bytes());
    for (k, e) in files {
        v.extend_from_slice(&(k.len() as u32).to_le_bytes());
        v.extend_from_slice(k);
        v.extend_from_slice(&e.mode.to_le_bytes());
        v.extend_from_slice(&e.oid);
        v.extend_from_slice(&e.stat.size.to_le_bytes());
        v.extend_from_slice(&e.stat.mtime_ns.to_le_bytes());
        v.extend_from_slice(&e.stat.ctime_ns.to_le_bytes());
        v.extend_from_slice(&e.stat.ino.to_le_bytes());
        v.extend_from_slice(&e.stat.mode.to_le_bytes());
        v.push(e.racy as u8);
    }
    v
}

/// The inverse of [`encode`]; `None` for anything else (another repository, a torn or
/// foreign file).
fn decode(b: &[u8], repo_id: (u64, u64)) -> Option<(Oid, BTreeMap<Vec<u8>, Entry>)> {
    struct R<'a>(&'a [u8]);
    impl<'a> R<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.0.len() < n {
                return None;
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Some(a)
        }
        fn u32(&mut self) -> Option<u32> {
            Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
        }
        fn u64(&mut self) -> Option<u64> {
            Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
        }
        fn i128(&mut self) -> Option<i128> {
            Some(i128::from_le_bytes(self.take(16)?.try_into().ok()?))
        }
        fn oid(&mut self) -> Option<Oid> {
            self.take(20)?.try_into().ok()
        }
    }
    let mut r = R(b.strip_prefix(SAVED_MAGIC)?);
    let tree = r.oid()?;
    if (r.u64()?, r.u64()?) != repo_id {
        return None;
    }
    let n = r.u64()?;
    let mut files = BTreeMap::new();
    for _ in 0..n {
        let len = r.u32()? as usize;
        let k = r.take(len)?.to_vec();
        let mode = r.u32()?;
        let oid = r.oid()?;
        let stat = Stat {
            size: r.u64()?,
            mtime_ns: r.i128()?,
            ctime_ns: r.i128()?,
            ino: r.u64()?,
            mode: r.u32()?,
        };
        let racy = r.take(1)?[0] != 0;
        files.insert(
            k,
            Entry {
                mode,
                oid,
                stat,
                racy,
                seen: 0,
            },
        );
    }
    r.0.is_empty().then_some((tree, files))
}

#[cfg(all(test, target_os = "linux"))]
mod watch_tests {
    use super::*;

    #[test]
    fn a_full_scan_leaves_a_watch_and_a_watched_scan_reads_only_what_changed() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        for d in 0..3 {
            std::fs::create_dir_all(ws.join(format!("d{d}"))).unwrap();
            for f in 0..5 {
                std::fs::write(ws.join(format!("d{d}/f{f}")), "x").unwrap();
            }
        }
        let objects = t.path().join("objects");
        std::fs::create_dir_all(&objects).unwrap();
        let mut m = Model::new(objects, (0, 0));
        let cfg = SnapshotConfig::default();
        m.scan_all(&ws, None, &cfg, false).unwrap();
        assert!(m.watch.is_some(), "no directory watch after a full scan");
        std::fs::write(ws.join("d1/f2"), "changed").unwrap();
        let out = m.scan_all(&ws, None, &cfg, true).unwrap();
        assert_eq!(out.changed, vec!["d1/f2"]);
        // Only the changed file was looked at (a full scan would re-hash the racy ones).
        assert_eq!(out.hashed, 1, "{out:?}");
    }
}
