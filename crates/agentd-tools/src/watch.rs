//! Watches the files behind a session's artifacts so the checkpoint can rehash them when
//! they change (docs/history-rules.md#checkpoint: a fact is VALID only while its files keep their hashes).
//!
//! Each file is watched through its parent directory, non-recursively, filtered by file
//! name: editors often save by writing a new file and renaming it over the old one, which
//! a watch on the file's inode would miss. Changes are reported as paths on a bounded
//! tokio channel, without debouncing — the receiver rehashes, which is idempotent.
//!
//! The notify callback never blocks: it hands paths to a small forwarding thread through
//! an unbounded std channel, and only that thread waits on the bounded channel. So a
//! consumer that calls `watch_file` while not draining the receiver cannot deadlock
//! notify's event loop (inotify's `watch` waits for that loop).

use agentd_proto::AgentError;
use notify::{EventKind, RecursiveMode, Watcher};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Capacity of the change channel handed to the caller.
pub const CHANNEL_CAPACITY: usize = 256;

type Watched = Arc<Mutex<HashMap<PathBuf, HashSet<OsString>>>>;

/// Reports changes to individual files on a channel; see the module doc.
pub struct ArtifactWatcher {
    watcher: notify::RecommendedWatcher,
    /// Canonical parent directory → names of the watched files in it.
    watched: Watched,
}

impl ArtifactWatcher {
    /// Starts the watcher. Changed paths arrive on the receiver as the canonical parent
    /// directory joined with the file name (the same form [`ArtifactWatcher::watch_file`]
    /// returns).
    pub fn new() -> Result<(Self, tokio::sync::mpsc::Receiver<PathBuf>), AgentError> {
        let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_CAPACITY);
        let (fwd_tx, fwd_rx) = std::sync::mpsc::channel::<PathBuf>();
        std::thread::Builder::new()
            .name("agentd-artifact-watch".into())
            .spawn(move || {
                // Ends when the watcher (and so `fwd_tx`) is dropped or the receiver closes.
                while let Ok(path) = fwd_rx.recv() {
                    if tx.blocking_send(path).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| AgentError::internal(format!("starting artifact watch thread: {e}")))?;
        let watched: Watched = Arc::default();
        let filter = Arc::clone(&watched);
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            // Watch errors (e.g. a queue overflow) carry no path we could report; the next
            // change or a reload rehashes anyway.
            let Ok(event) = res else { return };
            if !is_change(&event.kind) {
                return;
            }
            let Ok(map) = filter.lock() else { return };
            for p in &event.paths {
                let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                    continue;
                };
                if map.get(dir).is_some_and(|names| names.contains(name)) {
                    let _ = fwd_tx.send(p.clone());
                }
            }
        })
        .map_err(|e| AgentError::internal(format!("starting file watcher: {e}")))?;
        Ok((ArtifactWatcher { watcher, watched }, rx))
    }

    /// Watches `path` (idempotent). The file need not exist yet; its parent directory
    /// must. Returns the path form that change reports will use.
    pub fn watch_file(&mut self, path: &Path) -> Result<PathBuf, AgentError> {
        let (dir, name) = split(path)?;
        let key = dir.join(&name);
        // Never hold the table's lock while calling into the watcher: its event thread
        // takes the same lock to filter events, and `watch`/`unwatch` wait for that
        // thread, so holding it across the call can deadlock both.
        let known = self.table()?.contains_key(&dir);
        if !known {
            self.watcher
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|e| {
                    AgentError::internal(format!("watching {}: {e}", dir.display()))
                        .with_details(serde_json::json!({"path": path}))
                })?;
        }
        self.table()?.entry(dir).or_default().insert(name);
        Ok(key)
    }

    fn table(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<PathBuf, HashSet<OsString>>>, AgentError> {
        self.watched
            .lock()
            .map_err(|_| AgentError::internal("artifact watch table poisoned"))
    }

    pub fn unwatch_file(&mut self, path: &Path) -> Result<(), AgentError> {
        let (dir, name) = split(path)?;
        let now_empty = {
            let mut map = self.table()?;
            let Some(names) = map.get_mut(&dir) else {
                return Ok(());
            };
            names.remove(&name);
            let empty = names.is_empty();
            if empty {
                map.remove(&dir);
            }
            empty
        };
        // Outside the lock, for the reason given in `watch_file`.
        if now_empty {
            let _ = self.watcher.unwatch(&dir);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.watched
            .lock()
            .map(|m| m.values().map(HashSet::len).sum())
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Content or name changes; reads and opens are not changes. A close after writing is
/// kept: it marks the end of a write that began with earlier modify events.
fn is_change(kind: &EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
    }
}

fn split(path: &Path) -> Result<(PathBuf, OsString), AgentError> {
    let bad = || {
        AgentError::invalid_args(format!(
            "cannot watch `{}`: not a file path",
            path.display()
        ))
        .with_details(serde_json::json!({"path": path}))
    };
    let name = path.file_name().ok_or_else(bad)?.to_os_string();
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(parent).map_err(|e| {
        AgentError::not_found(format!("cannot watch `{}`: {e}", path.display()))
            .with_details(serde_json::json!({"path": path}))
    })?;
    Ok((dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn next(rx: &mut tokio::sync::mpsc::Receiver<PathBuf>) -> Option<PathBuf> {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test]
    async fn reports_write_and_rename_replace_but_not_siblings() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one").unwrap();
        let (mut w, mut rx) = ArtifactWatcher::new().unwrap();
        let key = w.watch_file(&file).unwrap();
        assert_eq!(w.watch_file(&file).unwrap(), key);
        assert_eq!(w.len(), 1);

        // A sibling changing is not reported; the watched file's write is.
        std::fs::write(dir.path().join("other.txt"), "x").unwrap();
        std::fs::write(&file, "two").unwrap();
        assert_eq!(next(&mut rx).await, Some(key.clone()));
        while let Ok(p) = rx.try_recv() {
            assert_eq!(p, key);
        }

        // Editor-style save: write a temp file, rename it over the watched one.
        let tmp = dir.path().join(".a.txt.swp");
        std::fs::write(&tmp, "three").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        let mut saw = false;
        while let Some(p) = next(&mut rx).await {
            assert_ne!(p.file_name().unwrap(), ".a.txt.swp");
            if p == key {
                saw = true;
                break;
            }
        }
        assert!(saw, "rename-replace was not reported");

        w.unwatch_file(&file).unwrap();
        assert!(w.is_empty());
    }
}
