//! The in-memory model of a workspace that makes a snapshot cheap: every file of the
//! last snapshot with its stat data (size, mtime, ctime, inode, mode) and object id.
//!
//! A full scan walks the workspace honouring `.gitignore` and `.git/info/exclude` (the
//! `ignore` crate, the same rules as git, never following a symlink and never entering a
//! `.git`), stats each file and hashes only those whose stat data changed; a path scan
//! (a file tool's own target) stats and hashes just that path. Trees are rebuilt from
//! the sorted paths (git's index order is the full paths' byte order, so one pass makes
//! every tree) and written with the blobs into the object store of [`super::objects`].
//!
//! Racy files: a file modified within [`RACY_NS`] of the moment it was hashed may
//! change again with the same stat data, so it is hashed again at the next scan.

use super::objects::{push_entry, Oid, Store, MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE};
use super::Skipped;
use crate::config::SnapshotConfig;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

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
}

/// What one update found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub tree: Oid,
    /// Paths whose entry differs from the model's previous tree.
    pub changed: Vec<String>,
    pub skipped: Vec<Skipped>,
    pub warnings: Vec<String>,
}

/// The workspace as of the last snapshot taken through this model.
#[derive(Debug)]
pub struct Model {
    files: BTreeMap<Vec<u8>, Entry>,
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
            tree: None,
            store: Store::new(objects),
            repo_id,
        }
    }

    /// Rescans the whole workspace.
    pub fn scan_all(&mut self, ws: &Path, cfg: &SnapshotConfig) -> std::io::Result<Outcome> {
        let mut b = Budget {
            cfg,
            total: 0,
            skipped: Vec::new(),
            warnings: Vec::new(),
            now_ns: now_ns(),
        };
        let mut walk = ignore::WalkBuilder::new(ws);
        walk.hidden(false)
            .parents(false)
            .ignore(false)
            .git_global(false)
            .git_ignore(true)
            .git_exclude(true)
            .require_git(false)
            .follow_links(false)
            .filter_entry(|e| e.file_name() != ".git");
        let mut next = BTreeMap::new();
        for item in walk.build() {
            let e = match item {
                Ok(e) => e,
                Err(err) => {
                    if b.warnings.len() < 20 {
                        b.warnings.push(err.to_string());
                    }
                    continue;
                }
            };
            if e.depth() == 0 {
                continue;
            }
            let Some(ft) = e.file_type() else { continue };
            if !(ft.is_file() || ft.is_symlink()) {
                continue;
            }
            let Ok(rel) = e.path().strip_prefix(ws) else {
                continue;
            };
            let k = key(rel);
            let meta = match std::fs::symlink_metadata(e.path()) {
                Ok(m) => m,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => {
                    b.warn(rel, &err);
                    if let Some(old) = self.files.get(&k) {
                        next.insert(k, old.clone());
                    }
                    continue;
                }
            };
            if let Some(entry) = self.resolve(ws, rel, &k, &meta, &mut b) {
                next.insert(k, entry);
            }
        }
        if !ws.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a directory", ws.display()),
            ));
        }
        let old = std::mem::replace(&mut self.files, next);
        let changed = if self.tree.is_some() {
            changed_between(&old, &self.files)
        } else {
            Vec::new()
        };
        self.finish(changed, b)
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
        if !ws.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a directory", ws.display()),
            ));
        }
        let mut b = Budget {
            cfg,
            total: 0,
            skipped: Vec::new(),
            warnings: Vec::new(),
            now_ns: now_ns(),
        };
        let mut changed = Vec::new();
        for rel in paths {
            let k = key(rel);
            let meta = if rel.components().any(|c| c.as_os_str() == ".git")
                || !real_dirs(ws, rel)
                || ignored(ws, rel, exclude)
            {
                None
            } else {
                match std::fs::symlink_metadata(ws.join(rel)) {
                    Ok(m) if m.is_dir() => return Ok(None),
                    Ok(m) => Some(m),
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
                    Err(err) => {
                        b.warn(rel, &err);
                        continue;
                    }
                }
            };
            let entry = match &meta {
                Some(m) if m.is_file() || m.file_type().is_symlink() => {
                    self.resolve(ws, rel, &k, m, &mut b)
                }
                _ => None,
            };
            let before = self.files.get(&k).map(|e| (e.mode, e.oid));
            if before != entry.as_ref().map(|e| (e.mode, e.oid)) {
                changed.push(String::from_utf8_lossy(&k).into_owned());
            }
            match entry {
                Some(e) => {
                    self.files.insert(k, e);
                }
                None => {
                    self.files.remove(&k);
                }
            }
        }
        changed.sort();
        changed.dedup();
        self.finish(changed, b).map(Some)
    }

    /// The entry for a file found at `rel`: the model's own when its stat data is
    /// unchanged, else hashed anew within the caps (`None`: skipped or unreadable).
    fn resolve(
        &mut self,
        ws: &Path,
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
        let full = ws.join(rel);
        let (mode, body) = if link {
            match std::fs::read_link(&full) {
                Ok(t) => (MODE_LINK, t.as_os_str().as_bytes().to_vec()),
                Err(err) => return b.keep_old(self, rel, k, &err),
            }
        } else {
            match std::fs::read(&full) {
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
                racy: stat.mtime_ns + RACY_NS >= b.now_ns || stat.ctime_ns + RACY_NS >= b.now_ns,
            }),
            Err(err) => b.keep_old(self, rel, k, &err),
        }
    }

    fn finish(&mut self, changed: Vec<String>, b: Budget) -> std::io::Result<Outcome> {
        let entries: Vec<(&[u8], &Entry)> =
            self.files.iter().map(|(k, e)| (k.as_slice(), e)).collect();
        let tree = write_tree(&mut self.store, &entries, 0)?;
        self.tree = Some(tree);
        Ok(Outcome {
            tree,
            changed,
            skipped: b.skipped,
            warnings: b.warnings,
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

/// Writes the tree of `entries` (sorted full paths, all starting with a directory
/// prefix of `prefix` bytes) and the trees under it.
fn write_tree(
    store: &mut Store,
    entries: &[(&[u8], &Entry)],
    prefix: usize,
) -> std::io::Result<Oid> {
    let mut body = Vec::with_capacity(entries.len().min(1024) * 40);
    let mut i = 0;
    while i < entries.len() {
        let rest = &entries[i].0[prefix..];
        match rest.iter().position(|b| *b == b'/') {
            None => {
                push_entry(&mut body, entries[i].1.mode, rest, &entries[i].1.oid);
                i += 1;
            }
            Some(n) => {
                let dir = &rest[..=n];
                let mut j = i + 1;
                while j < entries.len() && entries[j].0[prefix..].starts_with(dir) {
                    j += 1;
                }
                let sub = write_tree(store, &entries[i..j], prefix + n + 1)?;
                push_entry(&mut body, MODE_TREE, &rest[..n], &sub);
                i = j;
            }
        }
    }
    store.write("tree", &body)
}

/// Paths whose (mode, id) differ between two models, in path order.
fn changed_between(a: &BTreeMap<Vec<u8>, Entry>, b: &BTreeMap<Vec<u8>, Entry>) -> Vec<String> {
    let mut out = Vec::new();
    let (mut x, mut y) = (a.iter().peekable(), b.iter().peekable());
    loop {
        let path = match (x.peek(), y.peek()) {
            (None, None) => break,
            (Some((ka, _)), None) => {
                let k = *ka;
                x.next();
                k
            }
            (None, Some((kb, _))) => {
                let k = *kb;
                y.next();
                k
            }
            (Some((ka, ea)), Some((kb, eb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    let k = *ka;
                    x.next();
                    k
                }
                std::cmp::Ordering::Greater => {
                    let k = *kb;
                    y.next();
                    k
                }
                std::cmp::Ordering::Equal => {
                    let same = (ea.mode, ea.oid) == (eb.mode, eb.oid);
                    let k = *ka;
                    x.next();
                    y.next();
                    if same {
                        continue;
                    }
                    k
                }
            },
        };
        out.push(String::from_utf8_lossy(path).into_owned());
    }
    out
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

/// Whether git would ignore `rel`: the `.gitignore` of each directory on the way (the
/// deepest deciding) and the exclude file; a file under an ignored directory is ignored.
fn ignored(ws: &Path, rel: &Path, exclude: Option<&Path>) -> bool {
    use ignore::gitignore::{Gitignore, GitignoreBuilder};
    use ignore::Match;
    let mut matchers: Vec<Gitignore> = Vec::new();
    if let Some(x) = exclude {
        if x.is_file() {
            let mut gb = GitignoreBuilder::new(ws);
            gb.add(x);
            if let Ok(g) = gb.build() {
                matchers.push(g);
            }
        }
    }
    let comps: Vec<_> = rel.components().collect();
    let mut dir = ws.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        let file = dir.join(".gitignore");
        if file.is_file() {
            let mut gb = GitignoreBuilder::new(&dir);
            gb.add(&file);
            if let Ok(g) = gb.build() {
                matchers.push(g);
            }
        }
        let child = dir.join(c.as_os_str());
        let is_dir = i + 1 < comps.len();
        for m in matchers.iter().rev() {
            match m.matched(&child, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => break,
                Match::None => {}
            }
        }
        dir = child;
    }
    false
}
