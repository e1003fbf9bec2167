//! The daemon-wide artifact watch (docs/history-rules.md#checkpoint): files behind `file` artifacts of loaded
//! sessions are watched, and a change is published to every session that depends on the
//! file as the ephemeral `artifact_changed{uri, path}`.
//!
//! What is watched: each `file` artifact a turn's tool results report, and, when a turn
//! starts, the files its session's facts depend on. Nothing is unwatched while the daemon
//! runs (a watch costs one inotify entry per directory); at most [`MAX_WATCHED`] files
//! are watched, later ones are skipped. The watcher starts lazily on the first watch.
//!
//! Why no state changes here: the checkpoint rehashes dependency files whenever it is
//! read (`SessionState::checkpoint_now`), so a fact whose file changed turns SUSPECT at
//! the next read anyway. The notification only tells live clients that it happened.

use crate::registry::Registry;
use crate::tools::watch::ArtifactWatcher;
use agentd_proto::EventType;
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// Most files watched at once.
pub const MAX_WATCHED: usize = 4096;

/// Changed path → (session id, artifact uri) pairs that depend on it.
type Deps = Arc<Mutex<HashMap<PathBuf, BTreeSet<(String, String)>>>>;

#[derive(Default)]
pub struct ArtifactWatch {
    watcher: Mutex<Option<ArtifactWatcher>>,
    deps: Deps,
}

impl ArtifactWatch {
    /// Watches the file behind artifact `uri` (a workspace-relative path) of session
    /// `sid`. Failures (a missing directory, inotify limits) are logged and ignored:
    /// the checkpoint still rehashes on read.
    pub fn watch(&self, registry: &Arc<Registry>, sid: &str, workspace: &str, uri: &str) {
        if uri.is_empty() || uri.starts_with("resource:") || uri.starts_with("command:") {
            return;
        }
        let path = Path::new(workspace).join(uri);
        let Ok(mut guard) = self.watcher.lock() else {
            return;
        };
        if guard.is_none() {
            match ArtifactWatcher::new() {
                Ok((w, rx)) => {
                    *guard = Some(w);
                    tokio::spawn(forward(Arc::downgrade(registry), self.deps.clone(), rx));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "artifact watcher unavailable");
                    return;
                }
            }
        }
        let Some(w) = guard.as_mut() else { return };
        if w.len() >= MAX_WATCHED {
            return;
        }
        match w.watch_file(&path) {
            Ok(key) => {
                if let Ok(mut deps) = self.deps.lock() {
                    deps.entry(key)
                        .or_default()
                        .insert((sid.to_string(), uri.to_string()));
                }
            }
            Err(e) => tracing::debug!(error = %e, uri, "cannot watch artifact"),
        }
    }

    /// Files watched now.
    pub fn len(&self) -> usize {
        self.watcher
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(ArtifactWatcher::len))
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

async fn forward(
    registry: Weak<Registry>,
    deps: Deps,
    mut rx: tokio::sync::mpsc::Receiver<PathBuf>,
) {
    while let Some(path) = rx.recv().await {
        let Some(registry) = registry.upgrade() else {
            break;
        };
        let targets: Vec<(String, String)> = deps
            .lock()
            .ok()
            .and_then(|d| d.get(&path).map(|s| s.iter().cloned().collect()))
            .unwrap_or_default();
        for (sid, uri) in targets {
            // Only loaded sessions hear about it; loading one just to notify nobody
            // would be waste.
            if !registry.is_loaded(&sid) {
                continue;
            }
            if let Ok(h) = registry.get(&sid).await {
                h.publish(
                    EventType::ArtifactChanged,
                    json!({"uri": uri, "path": path.display().to_string()}),
                );
            }
        }
    }
}
