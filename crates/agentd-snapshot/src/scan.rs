//! The in-memory model of a workspace that makes a snapshot cheap: every file of the
//! last snapshot with its stat data (size, mtime, ctime, inode, mode) and object id.
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
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
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
    fn of(m: &std::fs::Metadata) -> Stat {
        Stat {
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
            ino: m.ino(),
            mode: m.mode(),
        }
    }
}

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
    use std::path::Path;

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
            | WatchMask::DONT_FOLLOW
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

        /// Watches `dir` (workspace-relative prefix `rel`); false at the system's limit.
        pub fn add(&mut self, dir: &Path, rel: &[u8]) -> bool {
            match self.ino.watches().add(dir, watch_mask()) {
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
    use std::path::Path;

    /// No file watch outside Linux: every snapshot scans the workspace.
    #[derive(Debug)]
    pub enum Watch {}

    impl Watch {
        pub fn new() -> Option<Watch> {
            None
        }
        pub fn add(&mut self, _dir: &Path, _rel: &[u8]) -> bool {
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

    /// A budget for a partial rescan, which needs the workspace to still be there.
    fn for_rescan(ws: &Path, cfg: &'a SnapshotConfig) -> std::io::Result<Self> {
        if !ws.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a directory", ws.display()),
            ));
        }
        Ok(Budget::new(cfg))
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
        if watched && self.tree.is_some() {
            if let Some(out) = self.scan_watched(ws, exclude, cfg)? {
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
        if let Some(g) = exclude.and_then(|x| self.ignore_file(x, ws)) {
            stack.push(g);
        }
        let mut rel = Vec::new();
        self.walk(ws, &mut rel, &mut stack, &mut changed, &mut b)?;
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

    /// One directory of a full scan: `rel` is its workspace-relative prefix (`""` or
    /// ending in `/`), `stack` the ignore files in force, outermost first.
    fn walk(
        &mut self,
        dir: &Path,
        rel: &mut Vec<u8>,
        stack: &mut Vec<Arc<Gitignore>>,
        changed: &mut Vec<String>,
        b: &mut Budget,
    ) -> std::io::Result<()> {
        self.watch_dir(dir, rel);
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            // The workspace itself must be there; a subdirectory may vanish or be closed.
            Err(e) if rel.is_empty() => return Err(e),
            Err(e) => {
                b.warn(Path::new(std::ffi::OsStr::from_bytes(rel)), &e);
                self.keep_under(rel);
                return Ok(());
            }
        };
        let mut entries: Vec<(std::ffi::OsString, std::fs::FileType, std::fs::DirEntry)> =
            Vec::new();
        for e in rd {
            let Ok(e) = e else { continue };
            let name = e.file_name();
            if name == ".git" {
                continue;
            }
            if let Ok(ft) = e.file_type() {
                entries.push((name, ft, e));
            }
        }
        entries.sort_by(|x, y| x.0.as_bytes().cmp(y.0.as_bytes()));
        let pushed = match entries
            .iter()
            .find(|(n, ft, _)| n == ".gitignore" && ft.is_file())
        {
            Some(_) => match self.ignore_file(&dir.join(".gitignore"), dir) {
                Some(g) => {
                    stack.push(g);
                    true
                }
                None => false,
            },
            None => false,
        };
        let base = rel.len();
        for (name, ft, entry) in entries {
            let is_dir = ft.is_dir();
            if !(is_dir || ft.is_file() || ft.is_symlink()) {
                continue;
            }
            if !stack.is_empty() && ignored_by(stack, &dir.join(&name), is_dir) {
                continue;
            }
            rel.truncate(base);
            rel.extend_from_slice(name.as_bytes());
            if is_dir {
                rel.push(b'/');
                self.walk(&dir.join(&name), rel, stack, changed, b)?;
                continue;
            }
            let gen = self.generation;
            // Relative to the open directory, never following a symlink.
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    b.warn(Path::new(std::ffi::OsStr::from_bytes(rel)), &e);
                    if let Some(old) = self.files.get_mut(rel.as_slice()) {
                        old.seen = gen;
                    }
                    continue;
                }
            };
            if let Some(old) = self.files.get_mut(rel.as_slice()) {
                if old.stat == Stat::of(&meta) && !old.racy {
                    old.seen = gen;
                    continue;
                }
            }
            let k = rel.clone();
            let relp = PathBuf::from(std::ffi::OsStr::from_bytes(&k));
            // Skipped or unreadable without an earlier version: left out (an earlier entry
            // is swept as gone).
            if let Some(mut e) = self.resolve(dir.join(&name).as_path(), &relp, &k, &meta, b) {
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

    /// The parsed ignore file at `path` (patterns relative to `root`), re-read only when
    /// its stat data changed; `None` when it is missing or unreadable.
    fn ignore_file(&mut self, path: &Path, root: &Path) -> Option<Arc<Gitignore>> {
        let meta = std::fs::metadata(path).ok()?;
        let stat = Stat::of(&meta);
        if let Some((s, g)) = self.ignores.get(path) {
            if *s == stat {
                return g.clone();
            }
        }
        let mut gb = GitignoreBuilder::new(root);
        let g = match gb.add(path) {
            None => gb.build().ok().map(Arc::new),
            Some(_) => None,
        };
        self.ignores.insert(path.to_path_buf(), (stat, g.clone()));
        g
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
        let mut b = Budget::for_rescan(ws, cfg)?;
        let mut changed = Vec::new();
        for rel in paths {
            if !self.update_path(ws, exclude, rel, &mut b, &mut changed) {
                return Ok(None);
            }
        }
        changed.sort();
        changed.dedup();
        self.finish(changed, b).map(Some)
    }

    /// Brings the entry of one workspace-relative file path up to date. `false` when the
    /// path is a directory now (the caller scans it as one).
    fn update_path(
        &mut self,
        ws: &Path,
        exclude: Option<&Path>,
        rel: &Path,
        b: &mut Budget,
        changed: &mut Vec<String>,
    ) -> bool {
        let k = key(rel);
        let meta = if rel.components().any(|c| c.as_os_str() == ".git")
            || !real_dirs(ws, rel)
            || self.ignored(ws, rel, exclude)
        {
            None
        } else {
            match std::fs::symlink_metadata(ws.join(rel)) {
                Ok(m) if m.is_dir() => return false,
                Ok(m) => Some(m),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
                Err(err) => {
                    b.warn(rel, &err);
                    return true;
                }
            }
        };
        if let (Some(m), Some(old)) = (&meta, self.files.get(&k)) {
            if old.stat == Stat::of(m) && !old.racy {
                return true;
            }
        }
        let entry = match &meta {
            Some(m) if m.is_file() || m.file_type().is_symlink() => {
                self.resolve(&ws.join(rel), rel, &k, m, b)
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
    /// `None` when it or a directory above it is ignored.
    fn stack_for(
        &mut self,
        ws: &Path,
        rel_dir: &Path,
        exclude: Option<&Path>,
    ) -> Option<Vec<Arc<Gitignore>>> {
        let mut stack = Vec::new();
        if let Some(g) = exclude.and_then(|x| self.ignore_file(x, ws)) {
            stack.push(g);
        }
        let mut dir = ws.to_path_buf();
        if let Some(g) = self.ignore_file(&dir.join(".gitignore"), &dir) {
            stack.push(g);
        }
        for c in rel_dir.components() {
            let child = dir.join(c.as_os_str());
            if ignored_by(&stack, &child, true) {
                return None;
            }
            dir = child;
            if let Some(g) = self.ignore_file(&dir.join(".gitignore"), &dir) {
                stack.push(g);
            }
        }
        Some(stack)
    }

    /// Whether git would ignore the file `rel`: the `.gitignore` of each directory on the
    /// way (the deepest deciding) and the exclude file; a file under an ignored directory
    /// is ignored.
    fn ignored(&mut self, ws: &Path, rel: &Path, exclude: Option<&Path>) -> bool {
        let parent = rel.parent().unwrap_or(Path::new(""));
        match self.stack_for(ws, parent, exclude) {
            None => true,
            Some(stack) => ignored_by(&stack, &ws.join(rel), false),
        }
    }

    /// The changes the watch saw since the last scan, applied: `Ok(None)` when they
    /// cannot stand for a full scan (no watch yet, an overflow, a `.gitignore` changed,
    /// the workspace itself moved).
    fn scan_watched(
        &mut self,
        ws: &Path,
        exclude: Option<&Path>,
        cfg: &SnapshotConfig,
    ) -> std::io::Result<Option<Outcome>> {
        // The exclude file lives in `.git`, which is not watched.
        if let Some(x) = exclude {
            let now = std::fs::metadata(x).ok().map(|m| Stat::of(&m));
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
        let mut b = Budget::for_rescan(ws, cfg)?;
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
            let rel = PathBuf::from(std::ffi::OsStr::from_bytes(d));
            let abs = ws.join(&rel);
            let real =
                real_dirs(ws, &rel) && std::fs::symlink_metadata(&abs).is_ok_and(|m| m.is_dir());
            if real {
                if let Some(mut stack) = self.stack_for(ws, &rel, exclude) {
                    let mut r = prefix.clone();
                    self.walk(&abs, &mut r, &mut stack, &mut changed, &mut b)?;
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
            let rel = PathBuf::from(std::ffi::OsStr::from_bytes(f));
            if !self.update_path(ws, exclude, &rel, &mut b, &mut changed) {
                return Ok(None);
            }
        }
        changed.sort();
        changed.dedup();
        self.finish(changed, b).map(Some)
    }

    /// Starts watching `dir` (workspace-relative prefix `rel`); a watch that cannot be
    /// added (the system's limit) turns watching off until the next full scan.
    fn watch_dir(&mut self, dir: &Path, rel: &[u8]) {
        let Some(w) = self.watch.as_mut() else {
            return;
        };
        if !w.add(dir, rel) {
            self.watch = None;
        }
    }

    /// The entry for a file found at `rel`: the model's own when its stat data is
    /// unchanged, else hashed anew within the caps (`None`: skipped or unreadable).
    fn resolve(
        &mut self,
        full: &Path,
        rel: &Path,
        k: &[u8],
        meta: &std::fs::Metadata,
        b: &mut Budget,
    ) -> Option<Entry> {
        let stat = Stat::of(meta);
        if let Some(old) = self.files.get(k) {
            if old.stat == stat && !old.racy {
                return Some(old.clone());
            }
        }
        let link = meta.file_type().is_symlink();
        if !link {
            let reason = if stat.size > b.cfg.max_file_bytes {
                Some("file_too_large")
            } else if b.total.saturating_add(stat.size) > b.cfg.max_snapshot_bytes {
                Some("snapshot_too_large")
            } else {
                None
            };
            if let Some(reason) = reason {
                b.skipped.push(Skipped {
                    path: rel.to_string_lossy().into_owned(),
                    bytes: stat.size,
                    reason,
                });
                return None;
            }
            b.total += stat.size;
        }
        b.hashed += 1;
        let (mode, body) = if link {
            match std::fs::read_link(full) {
                Ok(t) => (MODE_LINK, t.as_os_str().as_bytes().to_vec()),
                Err(err) => return b.keep_old(self, rel, k, &err),
            }
        } else {
            match std::fs::read(full) {
                Ok(body) => (
                    if stat.mode & 0o100 != 0 {
                        MODE_EXEC
                    } else {
                        MODE_FILE
                    },
                    body,
                ),
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

/// Whether every directory on the way to `rel` is a real directory (no symlink is
/// followed out of the workspace).
fn real_dirs(ws: &Path, rel: &Path) -> bool {
    let mut cur = ws.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        cur.push(c.as_os_str());
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            _ => return false,
        }
    }
    true
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
