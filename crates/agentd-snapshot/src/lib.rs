//! agentd-snapshot: workspace snapshots (docs/snapshots.md): the state of a workspace's files recorded as git
//! trees in a shadow repository under the daemon home, one per workspace
//! (`<home>/snapshots/<hash of the workspace path>/git`).
//!
//! This module knows git and files, not sessions: it takes a snapshot and answers with
//! the tree and what changed, diffs two trees, restores paths from a tree, and
//! materializes a tree into a new directory. Callers (the turn engine, `undo`) record
//! what it returns.
//!
//! Taking a snapshot spawns no process: [`scan`] keeps a model of the workspace (each
//! file's stat data and blob id, each directory's tree id) and an inotify watch on its
//! directories, and [`objects`] writes the new blobs and trees as loose objects (SHA-1
//! and zlib in-process). A file tool's snapshot stats its one target; a shell call's
//! reads the watch's queue; a turn's `before` snapshot and a revert's check stat every
//! file. `files_changed` comes from the model when the previous tree is the model's own,
//! else from `git diff-tree`. Diff, restore and fork worktrees run the `git` command (it
//! is what users have, it checks out exactly as their git does), against objects it
//! reads like its own; `trees_match_what_git_writes` and
//! `watched_changes_give_the_tree_git_writes` keep the in-process trees equal to git's.
//!
//! Invariants:
//! - The user's repository is never touched: snapshots never enter a `.git`, and every
//!   git command runs with the shadow `GIT_DIR` and an explicit `GIT_INDEX_FILE` (see
//!   [`git::Git`]).
//! - The workspace is read through descriptors only ([`agentd_fsat`]): no symlink is followed
//!   and nothing outside the workspace is read, whatever a command changes mid-scan
//!   (docs/snapshots.md#how-a-snapshot-reads).
//! - One snapshot or git command at a time per shadow repository (an in-process lock
//!   that also guards the workspace model; the home lock guarantees a single daemon per
//!   home), so a stale `index.lock` is always a leftover of a killed git and is removed.
//! - The model describes one repository directory (its device and inode): a rebuilt
//!   repository, or one whose last tree is gone, starts a new model.
//! - Trees are never pruned (`gc.auto = 0`), so every tree a Log names stays readable
//!   until the shadow repository is rebuilt after corruption.

pub mod git;
pub mod objects;
pub mod scan;

pub use agentd_fsat::force_component_walk;

use git::{split_nul, Git, GitError};
use scan::Model;
use serde::Serialize;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A shadow repository that cannot be used as it is (rebuilding it is the cure).
fn corrupt(why: &str) -> GitError {
    GitError::Failed {
        command: "snapshot".into(),
        code: None,
        stderr: format!("corrupt shadow repository: {why}"),
    }
}

/// Skipped files listed in one snapshot; the count covers the rest.
pub const MAX_SKIPPED_LISTED: usize = 100;

/// The shadow repository's config: no autocrlf or filters (bytes in, bytes out),
/// symlinks kept as links, the untracked cache for fast rescans, no automatic gc.
const SHADOW_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n\tautocrlf = false\n\tsymlinks = true\n\tuntrackedCache = true\n\tquotePath = false\n\tpreloadIndex = true\n[gc]\n\tauto = 0\n[index]\n\tversion = 4\n[advice]\n\taddEmbeddedRepo = false\n\taddIgnoredFile = false\n";

/// What a snapshot covers.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Rescan the whole workspace, every file's stat data checked.
    All,
    /// What changed since the last snapshot as the directory watch saw it (a shell
    /// command's effects); a full rescan when there is no watch or it lost track.
    Changed,
    /// Only these workspace-relative paths changed (a file tool's own target).
    Paths(Vec<PathBuf>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub path: String,
    pub bytes: u64,
    /// `file_too_large` or `snapshot_too_large`.
    pub reason: &'static str,
}

/// A snapshot taken.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub tree: String,
    /// Paths whose entry differs from the previous tree (empty without one).
    pub files_changed: Vec<String>,
    pub skipped: Vec<Skipped>,
    pub skipped_count: usize,
    /// Set when the shadow repository was rebuilt first: why.
    pub rebuilt: Option<String>,
    /// The previous tree is not in the shadow repository (rebuilt since).
    pub previous_missing: bool,
    /// Files git could not read (permissions, vanished mid-scan).
    pub warnings: Vec<String>,
}

/// A snapshot that could not be taken, and whether the repository was rebuilt trying.
#[derive(Debug, Clone)]
pub struct SnapshotFailure {
    pub error: GitError,
    pub rebuilt: Option<String>,
}

/// One file of a diff.
#[derive(Debug, Clone, Serialize)]
pub struct FileDiff {
    pub path: String,
    /// `added`, `deleted` or `modified`.
    pub status: &'static str,
    pub additions: u64,
    pub deletions: u64,
    pub binary: bool,
    pub diff: String,
}

/// The shadow repository of one workspace.
#[derive(Debug, Clone)]
pub struct Shadow {
    pub workspace: PathBuf,
    pub dir: PathBuf,
    git: Git,
    cfg: SnapshotConfig,
}

/// The directory holding the shadow repository of `workspace` under `home`.
pub fn shadow_dir(home: &Path, workspace: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(workspace.as_os_str().as_encoded_bytes()));
    home.join("snapshots").join(&hash[..24])
}

/// Per shadow repository: the lock every git command holds, and the workspace model it
/// guards.
type RepoLock = Arc<tokio::sync::Mutex<Option<Model>>>;
type LockMap = Mutex<HashMap<PathBuf, RepoLock>>;

fn repo_lock(dir: &Path) -> RepoLock {
    static LOCKS: OnceLock<LockMap> = OnceLock::new();
    let map = LOCKS.get_or_init(Default::default);
    let mut m = match map.lock() {
        Ok(m) => m,
        Err(p) => p.into_inner(),
    };
    m.entry(dir.to_path_buf()).or_default().clone()
}

impl Shadow {
    pub fn new(home: &Path, workspace: &Path, cfg: &SnapshotConfig) -> Shadow {
        let dir = shadow_dir(home, workspace);
        let git_dir = dir.join("git");
        let own_exclude = workspace.join(".git").join("info").join("exclude");
        let git = Git {
            index: git_dir.join("index"),
            git_dir,
            work_tree: workspace.to_path_buf(),
            timeout: Duration::from_secs(cfg.timeout_s.max(1)),
            excludes_file: own_exclude.is_file().then_some(own_exclude),
        };
        Shadow {
            workspace: workspace.to_path_buf(),
            dir,
            git,
            cfg: cfg.clone(),
        }
    }

    pub fn git_dir(&self) -> &Path {
        &self.git.git_dir
    }

    /// Creates the repository when it does not exist: initialized in a temp directory
    /// and renamed into place, so a crash never leaves half a repository.
    async fn ensure(&self) -> Result<(), GitError> {
        if self.git.git_dir.join("HEAD").is_file() {
            let lock = self.git.git_dir.join("index.lock");
            if lock.exists() {
                let _ = std::fs::remove_file(&lock);
            }
            return Ok(());
        }
        let io = |e: std::io::Error| GitError::Workspace(format!("shadow repository: {e}"));
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let tmp = self
            .dir
            .join(format!("git.tmp-{:08x}", rand::random::<u32>()));
        let init = Git {
            git_dir: tmp.clone(),
            index: tmp.join("index"),
            ..self.git.clone()
        };
        let res = init.run(&["init", "-q", "--template="], None).await;
        let res = res.and_then(|_| {
            std::fs::write(tmp.join("config"), SHADOW_CONFIG).map_err(io)?;
            std::fs::write(
                self.dir.join("workspace"),
                format!("{}\n", self.workspace.display()),
            )
            .map_err(io)?;
            if self.git.git_dir.exists() {
                std::fs::remove_dir_all(&self.git.git_dir).map_err(io)?;
            }
            std::fs::rename(&tmp, &self.git.git_dir).map_err(io)
        });
        if res.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        res
    }

    /// Deletes and recreates the repository (its trees are lost with it).
    async fn rebuild(&self) -> Result<(), GitError> {
        let _ = std::fs::remove_dir_all(&self.git.git_dir);
        self.ensure().await
    }

    /// Records the workspace as a tree. A repository git cannot read is rebuilt once and
    /// the snapshot retried; the answer then says why in `rebuilt`.
    pub async fn snapshot(
        &self,
        scope: Scope,
        previous: Option<&str>,
    ) -> Result<Snapshot, SnapshotFailure> {
        let lock = repo_lock(&self.dir);
        let mut model = lock.lock().await;
        let first = match self.ensure().await {
            Ok(()) => self.snapshot_locked(&mut model, &scope, previous).await,
            Err(e) => Err(e),
        };
        match first {
            Ok(s) => Ok(s),
            Err(e) if e.is_corruption() || self.looks_broken() => {
                let why = e.to_string();
                tracing::warn!(shadow = %self.dir.display(), error = %why, "rebuilding the shadow repository");
                *model = None;
                let res = match self.rebuild().await {
                    // A fresh repository: rescan everything, whatever the scope was.
                    Ok(()) => {
                        self.snapshot_locked(&mut model, &Scope::All, previous)
                            .await
                    }
                    Err(e) => Err(e),
                };
                match res {
                    Ok(mut s) => {
                        s.rebuilt = Some(why);
                        Ok(s)
                    }
                    Err(error) => Err(SnapshotFailure {
                        error,
                        rebuilt: Some(why),
                    }),
                }
            }
            Err(error) => Err(SnapshotFailure {
                error,
                rebuilt: None,
            }),
        }
    }

    /// Structural damage git may report without a recognizable message.
    fn looks_broken(&self) -> bool {
        let g = &self.git.git_dir;
        !(g.join("HEAD").is_file() && g.join("objects").is_dir() && g.join("refs").is_dir())
    }

    async fn snapshot_locked(
        &self,
        model: &mut Option<Model>,
        scope: &Scope,
        previous: Option<&str>,
    ) -> Result<Snapshot, GitError> {
        if !self.workspace.is_dir() {
            return Err(GitError::Workspace(format!(
                "{} is not a directory",
                self.workspace.display()
            )));
        }
        if self.looks_broken() {
            return Err(corrupt("HEAD, objects or refs is missing"));
        }
        let objects = self.git.git_dir.join("objects");
        let repo_id = std::fs::metadata(&self.git.git_dir)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| corrupt(&e.to_string()))?;
        // The previous tree, when the repository has it, must be readable.
        if let Some(prev) = previous.and_then(objects::parse_oid) {
            match objects::read_header(&objects, &prev) {
                Ok(Some((kind, _))) if kind != "tree" => {
                    return Err(corrupt(&format!(
                        "{} is a {kind}, not a tree",
                        hex::encode(prev)
                    )))
                }
                Ok(_) => {}
                Err(e) => return Err(corrupt(&e.to_string())),
            }
        }
        // A model of another repository (rebuilt since), or whose last tree is gone,
        // describes objects this one may not hold: start over.
        let stale = model.as_ref().is_some_and(|m| {
            m.repo_id != repo_id
                || m.tree
                    .is_some_and(|t| !matches!(objects::read_header(&objects, &t), Ok(Some(_))))
        });
        if stale {
            *model = None;
        }
        let mut m = model
            .take()
            .unwrap_or_else(|| Model::load(objects.clone(), repo_id));
        let model_tree = m.tree.map(hex::encode);
        let ws = self.workspace.clone();
        let exclude = self.git.excludes_file.clone();
        let cfg = self.cfg.clone();
        let scope = scope.clone();
        let (m, res) = tokio::task::spawn_blocking(move || {
            let res = match &scope {
                Scope::Paths(p) => match m.scan_paths(&ws, exclude.as_deref(), p, &cfg) {
                    Ok(Some(o)) => Ok(o),
                    Ok(None) => m.scan_all(&ws, exclude.as_deref(), &cfg, false),
                    Err(e) => Err(e),
                },
                Scope::All => m.scan_all(&ws, exclude.as_deref(), &cfg, false),
                Scope::Changed => m.scan_all(&ws, exclude.as_deref(), &cfg, true),
            };
            (m, res)
        })
        .await
        .map_err(|e| GitError::Workspace(format!("snapshot task: {e}")))?;
        let out = match res {
            Ok(out) => {
                *model = Some(m);
                out
            }
            Err(_) if !self.workspace.is_dir() => {
                return Err(GitError::Workspace(format!(
                    "{} is not a directory",
                    self.workspace.display()
                )))
            }
            Err(e) => {
                return Err(GitError::Failed {
                    command: "snapshot".into(),
                    code: None,
                    stderr: e.to_string(),
                })
            }
        };
        let tree = hex::encode(out.tree);
        let mut snap = Snapshot {
            tree: tree.clone(),
            skipped_count: out.skipped.len(),
            skipped: out.skipped.into_iter().take(MAX_SKIPPED_LISTED).collect(),
            warnings: out.warnings,
            ..Snapshot::default()
        };
        if let Some(prev) = previous.filter(|p| *p != tree) {
            if model_tree.as_deref() == Some(prev) {
                // The usual case: the model knew the previous tree, no git needed.
                snap.files_changed = out.changed;
            } else {
                match self.changed_locked(prev, &tree).await {
                    Ok(files) => snap.files_changed = files,
                    Err(_) if !self.has_tree_locked(prev).await => snap.previous_missing = true,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(snap)
    }

    async fn has_tree_locked(&self, tree: &str) -> bool {
        let spec = format!("{tree}^{{tree}}");
        self.git
            .run(&["cat-file", "-e", spec.as_str()], None)
            .await
            .is_ok()
    }

    /// Whether the repository holds `tree`.
    pub async fn has_tree(&self, tree: &str) -> bool {
        let lock = repo_lock(&self.dir);
        let _held = lock.lock().await;
        self.has_tree_locked(tree).await
    }

    async fn changed_locked(&self, a: &str, b: &str) -> Result<Vec<String>, GitError> {
        if a == b {
            return Ok(Vec::new());
        }
        let out = self
            .git
            .run(
                &["diff-tree", "-r", "-z", "--name-only", "--no-renames", a, b],
                None,
            )
            .await?;
        Ok(split_nul(&out)
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect())
    }

    /// Paths whose entries differ between two trees.
    pub async fn changed(&self, a: &str, b: &str) -> Result<Vec<String>, GitError> {
        let lock = repo_lock(&self.dir);
        let _held = lock.lock().await;
        self.changed_locked(a, b).await
    }

    /// Unified diffs of `paths` between two trees, one per file that differs.
    pub async fn diff(
        &self,
        from: &str,
        to: &str,
        paths: &[String],
    ) -> Result<Vec<FileDiff>, GitError> {
        let lock = repo_lock(&self.dir);
        let _held = lock.lock().await;
        let mut out = Vec::new();
        for path in paths {
            let bytes = self
                .git
                .run(
                    &[
                        "diff-tree",
                        "-r",
                        "-p",
                        "--no-color",
                        "--no-ext-diff",
                        "--no-textconv",
                        "--no-renames",
                        from,
                        to,
                        "--",
                        path.as_str(),
                    ],
                    None,
                )
                .await?;
            if bytes.is_empty() {
                continue;
            }
            out.push(file_diff(
                path,
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        Ok(out)
    }

    /// What writing `paths` as they are in `tree` into the workspace takes: each path
    /// `tree` holds with its bytes and kind, each it does not hold to be removed. This
    /// crate never writes the workspace itself: the daemon applies the plan through
    /// descriptors pinned beneath the workspace (docs/snapshots.md#revert), never
    /// following a symlink.
    pub async fn restore_plan(
        &self,
        tree: &str,
        paths: &[String],
    ) -> Result<Vec<RestoreOp>, GitError> {
        let lock = repo_lock(&self.dir);
        let _held = lock.lock().await;
        self.ensure().await?;
        let tmp = self
            .git
            .git_dir
            .join(format!("index.restore-{:08x}", rand::random::<u32>()));
        let g = self.git.with_index(tmp.clone());
        let res = async {
            g.run(&["read-tree", tree], None).await?;
            // `MODE OID STAGE\tPATH` per entry.
            let listed = g.run(&["ls-files", "-s", "-z"], None).await?;
            let mut present: HashMap<String, (u32, String)> = HashMap::new();
            for rec in listed.split(|b| *b == 0).filter(|r| !r.is_empty()) {
                let Some(tab) = rec.iter().position(|b| *b == b'\t') else {
                    continue;
                };
                let head = String::from_utf8_lossy(&rec[..tab]);
                let mut f = head.split(' ');
                let (Some(mode), Some(oid)) = (f.next(), f.next()) else {
                    continue;
                };
                let mode = u32::from_str_radix(mode, 8).unwrap_or(0);
                let path = String::from_utf8_lossy(&rec[tab + 1..]).into_owned();
                present.insert(path, (mode, oid.to_string()));
            }
            let wanted: Vec<(&String, u32, &str)> = paths
                .iter()
                .filter_map(|p| present.get(p).map(|(m, o)| (p, *m, o.as_str())))
                .filter(|(_, m, _)| matches!(m >> 12, 0o10 | 0o12))
                .collect();
            let mut input = Vec::new();
            for (_, _, oid) in &wanted {
                input.extend_from_slice(oid.as_bytes());
                input.push(b'\n');
            }
            let batch = if wanted.is_empty() {
                Vec::new()
            } else {
                g.run(&["cat-file", "--batch"], Some(input)).await?
            };
            let mut ops = Vec::new();
            let mut rest = &batch[..];
            for (path, mode, oid) in wanted {
                let bad = || corrupt(&format!("cat-file answered no blob for {oid}"));
                let nl = rest.iter().position(|b| *b == b'\n').ok_or_else(bad)?;
                let head = String::from_utf8_lossy(&rest[..nl]).into_owned();
                let size: usize = head
                    .split(' ')
                    .nth(2)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(bad)?;
                let body = rest.get(nl + 1..nl + 1 + size).ok_or_else(bad)?.to_vec();
                rest = rest.get(nl + 2 + size..).unwrap_or_default();
                ops.push(if mode >> 12 == 0o12 {
                    RestoreOp::Symlink {
                        path: path.clone(),
                        target: body,
                    }
                } else {
                    RestoreOp::File {
                        path: path.clone(),
                        bytes: body,
                        executable: mode & 0o111 != 0,
                    }
                });
            }
            for p in paths.iter().filter(|p| !present.contains_key(*p)) {
                ops.push(RestoreOp::Remove { path: p.clone() });
            }
            Ok(ops)
        }
        .await;
        let _ = std::fs::remove_file(&tmp);
        res
    }

    /// Checks `tree` out into `dir` (created; must not exist), for a fork's worktree.
    pub async fn materialize(&self, tree: &str, dir: &Path) -> Result<(), GitError> {
        let lock = repo_lock(&self.dir);
        let _held = lock.lock().await;
        let io = |e: std::io::Error| GitError::Workspace(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir.parent().unwrap_or(dir)).map_err(io)?;
        std::fs::create_dir(dir).map_err(io)?;
        let tmp = self
            .git
            .git_dir
            .join(format!("index.worktree-{:08x}", rand::random::<u32>()));
        let g = self
            .git
            .with_index(tmp.clone())
            .with_work_tree(dir.to_path_buf());
        let res = async {
            g.run(&["read-tree", tree], None).await?;
            g.run(&["checkout-index", "-a", "-f"], None).await?;
            Ok(())
        }
        .await;
        let _ = std::fs::remove_file(&tmp);
        res
    }

    /// Lets `other`'s repository read this one's objects (a worktree fork's child
    /// names its parent's trees).
    pub async fn share_objects_with(&self, other: &Shadow) -> Result<(), GitError> {
        other.ensure().await?;
        let info = other.git.git_dir.join("objects").join("info");
        let io = |e: std::io::Error| GitError::Workspace(format!("alternates: {e}"));
        std::fs::create_dir_all(&info).map_err(io)?;
        let line = format!("{}\n", self.git.git_dir.join("objects").display());
        std::fs::write(info.join("alternates"), line).map_err(io)
    }
}

/// One change a revert makes to the workspace ([`Shadow::restore_plan`]); `path` is
/// relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOp {
    File {
        path: String,
        bytes: Vec<u8>,
        executable: bool,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    /// The path is not in the tree: removed (a directory is left alone), and so are the
    /// directories it leaves empty.
    Remove {
        path: String,
    },
}

fn file_diff(path: &str, diff: String) -> FileDiff {
    let mut status = "modified";
    let (mut additions, mut deletions, mut binary) = (0, 0, false);
    let mut in_hunk = false;
    for line in diff.lines() {
        if !in_hunk {
            if line.starts_with("new file mode") {
                status = "added";
            } else if line.starts_with("deleted file mode") {
                status = "deleted";
            } else if line.starts_with("Binary files") {
                binary = true;
            } else if line.starts_with("@@") {
                in_hunk = true;
            }
            continue;
        }
        if line.starts_with('+') {
            additions += 1;
        } else if line.starts_with('-') {
            deletions += 1;
        }
    }
    FileDiff {
        path: path.to_string(),
        status,
        additions,
        deletions,
        binary,
        diff,
    }
}

/// `[snapshots]`: workspace snapshots in a shadow git repository (docs/snapshots.md).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnapshotConfig {
    /// Record `workspace_snapshot` events around mutating tool calls.
    pub enabled: bool,
    /// A file larger than this is left out of a snapshot (and listed as skipped).
    pub max_file_bytes: u64,
    /// New or changed bytes one snapshot may add; files past it are skipped.
    pub max_snapshot_bytes: u64,
    /// Seconds one git command may run before it is killed.
    pub timeout_s: u64,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            enabled: true,
            max_file_bytes: 8 * 1024 * 1024,
            max_snapshot_bytes: 128 * 1024 * 1024,
            timeout_s: 30,
        }
    }
}

#[cfg(test)]
mod tests;
