//! Snapshots around a turn's mutating tool calls: one `before` the first, one `after`
//! each. A snapshot never fails the turn: an error is recorded in the event (`tree:
//! null, error{kind, message}`) and the turn goes on.

use super::snapshot_data;
use crate::config::SnapshotConfig;
use crate::history::snapshots::{self, REASON_AFTER, REASON_BEFORE};
use crate::session::SessionHandle;
use crate::snapshot::{Scope, Shadow};
use agentd_proto::{EventDraft, EventType};
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};

/// The snapshot state of one running turn.
pub struct TurnSnapshots {
    shadow: Option<Shadow>,
    /// The session's latest tree (`files_changed` is relative to it).
    previous: Option<String>,
    started: bool,
}

impl TurnSnapshots {
    /// Snapshots of `workspace` under `home`; none at all when disabled in config.
    pub fn new(home: &Path, workspace: &str, cfg: &SnapshotConfig) -> TurnSnapshots {
        TurnSnapshots {
            shadow: cfg
                .enabled
                .then(|| Shadow::new(home, Path::new(workspace), cfg)),
            previous: None,
            started: false,
        }
    }

    /// The `before` snapshot, when `tool` mutates and is the turn's first that does.
    pub async fn before(
        &mut self,
        h: &SessionHandle,
        tool: &str,
        call_id: &str,
    ) -> Option<EventDraft> {
        if self.started || !crate::tools::is_mutating(tool) {
            return None;
        }
        self.shadow.as_ref()?;
        self.started = true;
        self.previous = h
            .query(|st| {
                // The latest snapshot or revert that names a tree.
                st.events
                    .iter()
                    .rev()
                    .filter(|e| {
                        matches!(
                            e.event_type(),
                            EventType::WorkspaceSnapshot | EventType::WorkspaceRevert
                        )
                    })
                    .find_map(|e| snapshots::latest_tree(&[e.event()]))
            })
            .await
            .ok()
            .flatten();
        Some(self.take(Scope::All, REASON_BEFORE, call_id).await)
    }

    /// The `after` snapshot of a mutating call. A file tool changed only its own target,
    /// so only that path is rescanned; `shell` may have changed anything, which the
    /// workspace's directory watch tells. The `before` snapshot checks every file.
    pub async fn after(&mut self, tool: &str, args: &Value, call_id: &str) -> Option<EventDraft> {
        if !self.started || !crate::tools::is_mutating(tool) {
            return None;
        }
        let shadow = self.shadow.as_ref()?;
        let scope = match tool {
            "write_file" | "edit_file" => args
                .get("path")
                .and_then(Value::as_str)
                .and_then(|p| relative(&shadow.workspace, p))
                .map_or(Scope::Changed, |p| Scope::Paths(vec![p])),
            "apply_patch" => {
                let given = crate::tools::patch::paths(
                    args.get("input").and_then(Value::as_str).unwrap_or(""),
                );
                let rel: Option<Vec<_>> = given
                    .iter()
                    .map(|p| relative(&shadow.workspace, p))
                    .collect();
                match rel {
                    Some(v) if !v.is_empty() => Scope::Paths(v),
                    _ => Scope::Changed,
                }
            }
            _ => Scope::Changed,
        };
        Some(self.take(scope, REASON_AFTER, call_id).await)
    }

    async fn take(&mut self, scope: Scope, reason: &str, call_id: &str) -> EventDraft {
        let Some(shadow) = self.shadow.as_ref() else {
            // Callers check `shadow` first; an event saying so beats a panic.
            return snapshot_error(reason, call_id, "disabled", "snapshots are disabled");
        };
        let t0 = std::time::Instant::now();
        let res = shadow.snapshot(scope, self.previous.as_deref()).await;
        let ms = t0.elapsed().as_millis() as u64;
        match res {
            Ok(s) => {
                self.previous = Some(s.tree.clone());
                let mut d = snapshot_data(&s, reason, Some(call_id));
                d["duration_ms"] = json!(ms);
                EventDraft::new(agentd_proto::EventType::WorkspaceSnapshot, d)
            }
            Err(f) => {
                tracing::warn!(error = %f.error, "workspace snapshot failed");
                let mut d = snapshot_error(reason, call_id, f.error.kind(), &f.error.to_string());
                if let Some(why) = f.rebuilt {
                    d.data["rebuilt"] = json!({"reason": why});
                }
                d
            }
        }
    }
}

fn snapshot_error(reason: &str, call_id: &str, kind: &str, message: &str) -> EventDraft {
    EventDraft::new(
        agentd_proto::EventType::WorkspaceSnapshot,
        json!({"tree": null, "files_changed": [], "reason": reason, "call_id": call_id,
            "error": {"kind": kind, "message": message}}),
    )
}

/// A tool's path argument relative to the workspace, when it plainly lies inside it.
fn relative(ws: &Path, p: &str) -> Option<PathBuf> {
    let p = Path::new(p);
    let rel = if p.is_absolute() {
        p.strip_prefix(ws).ok()?
    } else {
        p
    };
    let clean: PathBuf = rel
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    let plain = clean
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    (plain && !clean.as_os_str().is_empty()).then_some(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_paths_become_workspace_relative() {
        let ws = Path::new("/w");
        assert_eq!(relative(ws, "a/b.txt"), Some(PathBuf::from("a/b.txt")));
        assert_eq!(relative(ws, "./a.txt"), Some(PathBuf::from("a.txt")));
        assert_eq!(relative(ws, "/w/a.txt"), Some(PathBuf::from("a.txt")));
        assert_eq!(relative(ws, "/x/a.txt"), None);
        assert_eq!(relative(ws, "../a.txt"), None);
        assert_eq!(relative(ws, "."), None);
    }
}
