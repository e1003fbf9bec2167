//! Seeing and undoing what a session did to its workspace (docs/snapshots.md): the snapshots
//! a turn records, `agentd/diff`, `agentd/revert`, and the `files` of `agentd/fork`.
//!
//! The pieces: [`crate::snapshot`] does the git work and knows nothing of sessions;
//! [`crate::history::snapshots`] reads the timeline off a session's events; this module
//! asks the session actor for its events, calls both, and records the result as events
//! through the actor.

pub mod turn;
pub mod write;

pub use turn::TurnSnapshots;

use crate::snapshot::Snapshot;
use serde_json::{json, Value};

/// `data` of a `workspace_snapshot` event for a snapshot taken.
pub fn snapshot_data(s: &Snapshot, reason: &str, call_id: Option<&str>) -> Value {
    let mut d = json!({"tree": s.tree, "files_changed": s.files_changed, "reason": reason});
    if let Some(c) = call_id {
        d["call_id"] = json!(c);
    }
    if s.skipped_count > 0 {
        d["skipped"] = json!(s.skipped);
        d["skipped_count"] = json!(s.skipped_count);
    }
    if let Some(why) = &s.rebuilt {
        d["rebuilt"] = json!({"reason": why});
    }
    if s.previous_missing {
        d["previous_missing"] = json!(true);
    }
    if !s.warnings.is_empty() {
        d["warnings"] = json!(s.warnings);
    }
    d
}

use crate::config::SnapshotConfig;
use crate::history::snapshots::{self, RevertPlan, REASON_BEFORE_REVERT};
use crate::session::SessionHandle;
use crate::snapshot::{git::GitError, Scope, Shadow};
use agentd_proto::{AgentError, ErrorKind, Event, EventDraft, EventType};
use std::path::Path;

/// Bytes of diff text `agentd/diff` answers with; the files past it list no text.
pub const MAX_DIFF_BYTES: usize = 4 * 1024 * 1024;

fn git_error(what: &str, e: &GitError) -> AgentError {
    let kind = match e {
        GitError::Timeout { .. } => ErrorKind::Timeout,
        GitError::Missing => ErrorKind::Unsupported,
        _ => ErrorKind::Internal,
    };
    AgentError::new(kind, format!("{what}: {e}")).with_details(json!({"git_error": e.kind()}))
}

/// The session's events, workspace and running turn, in one query.
async fn session_view(h: &SessionHandle) -> Result<(Vec<Event>, String, bool), AgentError> {
    h.query(|st| {
        let events: Vec<Event> = st
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e.event_type(),
                    EventType::WorkspaceSnapshot
                        | EventType::WorkspaceRevert
                        | EventType::TurnStarted
                        | EventType::TurnEnded
                )
            })
            .map(|e| e.event())
            .collect();
        let mut events = events;
        // The last seq rides along so ranges can end at it.
        if let Some(last) = st.events.last() {
            if events.last().map(|e| e.seq) != Some(last.seq) {
                events.push(last.event());
            }
        }
        (
            events,
            st.workspace().to_string(),
            st.running_turn.is_some(),
        )
    })
    .await
}

async fn require_tree(shadow: &Shadow, tree: &str, seq: u64) -> Result<(), AgentError> {
    if shadow.has_tree(tree).await {
        return Ok(());
    }
    Err(AgentError::new(
        ErrorKind::NotFound,
        format!("the snapshot recorded at seq {seq} is no longer in the shadow repository (it was rebuilt since)"),
    )
    .with_details(json!({"seq": seq, "tree": tree})))
}

/// `agentd/diff`: unified diffs of the files the session changed in a range: a turn, or
/// `(from_seq, to_seq]` (default: the whole session).
pub async fn diff(
    home: &Path,
    cfg: &SnapshotConfig,
    h: &SessionHandle,
    p: agentd_proto::rpc::DiffParams,
) -> Result<Value, AgentError> {
    let (events, workspace, _) = session_view(h).await?;
    let last = events.last().map_or(0, |e| e.seq);
    let (from, to) = match &p.turn_id {
        Some(t) => {
            if p.from_seq.is_some() || p.to_seq.is_some() {
                return Err(AgentError::invalid_args(
                    "turn_id cannot be combined with from_seq / to_seq",
                ));
            }
            let (s, e) = snapshots::turn_range(&events, t).ok_or_else(|| {
                AgentError::new(
                    ErrorKind::NotFound,
                    "no turn with that turn_id in the session",
                )
                .with_details(json!({"turn_id": t}))
            })?;
            (Some(s), e)
        }
        None => (p.from_seq, p.to_seq.unwrap_or(last)),
    };
    if to > last || from.is_some_and(|f| f > to) {
        return Err(AgentError::invalid_args(format!(
            "range must satisfy from_seq <= to_seq <= {last} (the last seq)"
        )));
    }
    let (marks, failed) = snapshots::marks(&events);
    let mut result = json!({
        "session_id": h.id.to_string(), "from_seq": from, "to_seq": to,
        "files": [], "diff": "", "truncated": false,
    });
    if let Some(t) = &p.turn_id {
        result["turn_id"] = json!(t);
    }
    let (Some(a), Some(b)) = (
        snapshots::base(&marks, from),
        snapshots::at_or_before(&marks, to),
    ) else {
        return Ok(result);
    };
    if b.seq < a.seq {
        return Ok(result);
    }
    let paths = snapshots::session_changes(&marks, from, to);
    let shadow = Shadow::new(home, Path::new(&workspace), cfg);
    require_tree(&shadow, &a.tree, a.seq).await?;
    require_tree(&shadow, &b.tree, b.seq).await?;
    let files = shadow
        .diff(&a.tree, &b.tree, &paths)
        .await
        .map_err(|e| git_error("diff", &e))?;
    let mut text = String::new();
    let mut listed = Vec::new();
    let mut truncated = false;
    for f in files {
        let mut entry = json!({"path": f.path, "status": f.status, "additions": f.additions,
            "deletions": f.deletions, "binary": f.binary});
        if text.len() + f.diff.len() <= MAX_DIFF_BYTES {
            text.push_str(&f.diff);
            entry["diff"] = json!(f.diff);
        } else {
            truncated = true;
        }
        listed.push(entry);
    }
    result["from_tree"] = json!(a.tree);
    result["to_tree"] = json!(b.tree);
    result["files"] = json!(listed);
    result["diff"] = json!(text);
    result["truncated"] = json!(truncated);
    let gaps: Vec<u64> = failed
        .into_iter()
        .filter(|s| from.is_none_or(|f| *s > f) && *s <= to)
        .collect();
    if !gaps.is_empty() {
        result["failed_snapshots"] = json!(gaps);
    }
    Ok(result)
}

/// How a revert is recorded: `agentd/revert` or a fork's `files: restore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevertVia {
    Revert,
    ForkRestore,
}

/// A revert planned and checked, ready to apply (see [`revert`]).
pub struct Checked {
    plan: Option<RevertPlan>,
    shadow: Shadow,
    /// The workspace now, and what changed in it since the session's latest snapshot.
    now: Option<crate::snapshot::Snapshot>,
    /// Paths whose current content differs from the target.
    to_restore: Vec<String>,
    pub conflicts: Vec<String>,
    pub to_seq: u64,
    pub forced: bool,
}

impl Checked {
    pub fn summary(&self) -> Value {
        json!({
            "to_seq": self.to_seq,
            "target_tree": self.plan.as_ref().map(|p| &p.target.tree),
            "files": self.to_restore,
            "conflicts": self.conflicts,
            "forced": self.forced,
            "incomplete": self.plan.as_ref().is_some_and(|p| !p.failed_after.is_empty()),
        })
    }
}

/// Plans a revert of `events`' session to `to_seq` and checks it against the files now:
/// refuses with `conflict` naming the files someone else changed, unless `force`.
pub async fn check_revert(
    home: &Path,
    cfg: &SnapshotConfig,
    events: &[Event],
    workspace: &str,
    to_seq: u64,
    force: bool,
) -> Result<Checked, AgentError> {
    let shadow = Shadow::new(home, Path::new(workspace), cfg);
    let mut checked = Checked {
        plan: snapshots::plan_revert(events, to_seq),
        shadow,
        now: None,
        to_restore: Vec::new(),
        conflicts: Vec::new(),
        to_seq,
        forced: force,
    };
    let Some(plan) = &checked.plan else {
        return Ok(checked);
    };
    if plan.paths.is_empty() {
        return Ok(checked);
    }
    require_tree(&checked.shadow, &plan.target.tree, plan.target.seq).await?;
    let now = checked
        .shadow
        .snapshot(Scope::All, Some(&plan.latest.tree))
        .await
        .map_err(|f| git_error("snapshot of the workspace", &f.error))?;
    let mut conflicts: std::collections::BTreeSet<String> =
        plan.changed_by_others.iter().cloned().collect();
    if now.previous_missing {
        // The session's last view is gone: every file it would touch may have changed.
        conflicts.extend(plan.paths.iter().cloned());
    } else {
        conflicts.extend(
            now.files_changed
                .iter()
                .filter(|p| plan.paths.contains(p))
                .cloned(),
        );
    }
    let differ = checked
        .shadow
        .changed(&now.tree, &plan.target.tree)
        .await
        .map_err(|e| git_error("compare snapshots", &e))?;
    checked.to_restore = plan
        .paths
        .iter()
        .filter(|p| differ.contains(p))
        .cloned()
        .collect();
    checked.conflicts = conflicts.into_iter().collect();
    checked.now = Some(now);
    if !checked.conflicts.is_empty() && !force {
        return Err(AgentError::new(
            ErrorKind::Conflict,
            format!(
                "files changed outside the session since its snapshots: {}; pass force to overwrite them",
                checked.conflicts.join(", ")
            ),
        )
        .with_details(json!({
            "files": checked.conflicts,
            "next_actions": ["re-run with force:true (agentctl revert --force) to overwrite them"],
        })));
    }
    Ok(checked)
}

/// Applies a checked revert; returns the events that record it (none when nothing
/// needed restoring).
pub async fn apply_revert(c: &Checked, via: RevertVia) -> Result<Vec<EventDraft>, AgentError> {
    let (Some(plan), Some(now)) = (&c.plan, &c.now) else {
        return Ok(Vec::new());
    };
    if c.to_restore.is_empty() {
        return Ok(Vec::new());
    }
    let ops = c
        .shadow
        .restore_plan(&plan.target.tree, &c.to_restore)
        .await
        .map_err(|e| git_error("restore", &e))?;
    let ws = c.shadow.workspace.clone();
    let umask = agentd_tools::user_umask();
    tokio::task::spawn_blocking(move || write::apply(&ws, &ops, umask))
        .await
        .map_err(|e| AgentError::internal(format!("restore task: {e}")))?
        .map_err(|e| {
            AgentError::new(
                ErrorKind::IoError,
                format!("restoring the workspace failed for: {e}"),
            )
        })?;
    let paths = c.to_restore.iter().map(std::path::PathBuf::from).collect();
    let after = c
        .shadow
        .snapshot(Scope::Paths(paths), Some(&now.tree))
        .await
        .map_err(|f| git_error("snapshot after the restore", &f.error))?;
    let mut drafts = Vec::new();
    if now.tree != plan.latest.tree {
        drafts.push(EventDraft::new(
            EventType::WorkspaceSnapshot,
            snapshot_data(now, REASON_BEFORE_REVERT, None),
        ));
    }
    let reason = match via {
        RevertVia::Revert => "revert",
        RevertVia::ForkRestore => "fork_restore",
    };
    drafts.push(EventDraft::new(
        EventType::WorkspaceRevert,
        json!({
            "to_seq": c.to_seq,
            "tree": after.tree,
            "from_tree": now.tree,
            "target_tree": plan.target.tree,
            "files_changed": after.files_changed,
            "reason": reason,
            "forced": c.forced && !c.conflicts.is_empty(),
        }),
    ));
    Ok(drafts)
}

/// `agentd/revert`: the files the session changed after `to_seq`, back to their content
/// there; recorded as `workspace_revert` (itself revertible).
pub async fn revert(
    home: &Path,
    cfg: &SnapshotConfig,
    h: &SessionHandle,
    p: agentd_proto::rpc::RevertParams,
) -> Result<Value, AgentError> {
    let (events, workspace, running) = session_view(h).await?;
    if running {
        return Err(AgentError::new(
            ErrorKind::Busy,
            "a turn is running; interrupt it or wait for it to end before reverting",
        ));
    }
    let last = events.last().map_or(0, |e| e.seq);
    if p.to_seq > last {
        return Err(AgentError::invalid_args(format!(
            "to_seq {} is past the session's last seq {last}",
            p.to_seq
        )));
    }
    let checked = check_revert(home, cfg, &events, &workspace, p.to_seq, p.force).await?;
    let mut result = checked.summary();
    result["session_id"] = json!(h.id.to_string());
    result["dry_run"] = json!(p.dry_run);
    result["reverted"] = json!(false);
    if p.dry_run {
        return Ok(result);
    }
    let drafts = apply_revert(&checked, RevertVia::Revert).await?;
    if drafts.is_empty() {
        return Ok(result);
    }
    let res = h.append(drafts, None).await?;
    result["reverted"] = json!(true);
    result["seq"] = json!(res.last_seq);
    Ok(result)
}

/// What a fork does with the workspace files, prepared before the child exists.
pub enum ForkFilesPlan {
    Keep,
    Restore(Box<Checked>),
    Worktree(Box<WorktreePlan>),
}

/// A worktree fork: `tree` of the parent's shadow repository checked out into `dir`.
pub struct WorktreePlan {
    dir: std::path::PathBuf,
    tree: String,
    parent: Shadow,
    cfg: SnapshotConfig,
    home: std::path::PathBuf,
}

impl ForkFilesPlan {
    /// The child's workspace when it is not the parent's.
    pub fn workspace(&self) -> Option<String> {
        match self {
            ForkFilesPlan::Worktree(w) => Some(w.dir.display().to_string()),
            _ => None,
        }
    }

    pub fn summary(&self) -> Value {
        match self {
            ForkFilesPlan::Keep => json!({"mode": "keep"}),
            ForkFilesPlan::Restore(c) => {
                let mut v = c.summary();
                v["mode"] = json!("restore");
                v
            }
            ForkFilesPlan::Worktree(w) => {
                json!({"mode": "worktree", "workspace": w.dir.display().to_string(), "tree": w.tree})
            }
        }
    }
}

/// Checks a fork's `files` against the parent's snapshots at `to_seq`: a restore that
/// would overwrite someone else's edits is refused (`conflict`) before anything is
/// written; a worktree needs a snapshot and a directory that does not exist yet.
pub async fn prepare_fork(
    home: &Path,
    cfg: &SnapshotConfig,
    parent: &SessionHandle,
    p: &agentd_proto::rpc::ForkParams,
    to_seq: u64,
    child_id: &str,
) -> Result<ForkFilesPlan, AgentError> {
    use agentd_proto::rpc::ForkFiles;
    let files = p.files.unwrap_or_default();
    if files != ForkFiles::Worktree && p.worktree.is_some() {
        return Err(AgentError::invalid_args(
            "worktree is only valid with files: worktree",
        ));
    }
    if files == ForkFiles::Keep {
        return Ok(ForkFilesPlan::Keep);
    }
    let (events, workspace, running) = session_view(parent).await?;
    match files {
        ForkFiles::Keep => Ok(ForkFilesPlan::Keep),
        ForkFiles::Restore => {
            if running {
                return Err(AgentError::new(
                    ErrorKind::Busy,
                    "a turn is running in the parent; files: restore would race with it",
                ));
            }
            let c = check_revert(home, cfg, &events, &workspace, to_seq, p.force).await?;
            Ok(ForkFilesPlan::Restore(Box::new(c)))
        }
        ForkFiles::Worktree => {
            let dir = match &p.worktree {
                Some(d) => std::path::PathBuf::from(d),
                None => home.join("worktrees").join(child_id),
            };
            if !dir.is_absolute() || dir.symlink_metadata().is_ok() {
                return Err(AgentError::invalid_args(
                    "worktree must be an absolute path that does not exist yet",
                )
                .with_details(json!({"field": "worktree"})));
            }
            let (marks, _) = snapshots::marks(&events);
            let mark = snapshots::base(&marks, Some(to_seq)).ok_or_else(|| {
                AgentError::invalid_args(
                    "the session has no workspace snapshot to materialize (it never ran a mutating tool)",
                )
            })?;
            let parent_shadow = Shadow::new(home, Path::new(&workspace), cfg);
            require_tree(&parent_shadow, &mark.tree, mark.seq).await?;
            Ok(ForkFilesPlan::Worktree(Box::new(WorktreePlan {
                dir,
                tree: mark.tree.clone(),
                parent: parent_shadow,
                cfg: cfg.clone(),
                home: home.to_path_buf(),
            })))
        }
    }
}

/// Before the child Log is written: materializes a worktree.
pub async fn materialize(plan: &ForkFilesPlan) -> Result<(), AgentError> {
    if let ForkFilesPlan::Worktree(w) = plan {
        w.parent
            .materialize(&w.tree, &w.dir)
            .await
            .map_err(|e| git_error("materialize the worktree", &e))?;
    }
    Ok(())
}

/// After the child exists: restores the files (recorded in the child, whose history
/// they now match) or records the worktree's first snapshot.
pub async fn finish_fork(plan: &ForkFilesPlan, child: &SessionHandle) -> Result<Value, AgentError> {
    let mut summary = plan.summary();
    let drafts = match plan {
        ForkFilesPlan::Keep => Vec::new(),
        ForkFilesPlan::Restore(c) => apply_revert(c, RevertVia::ForkRestore).await?,
        ForkFilesPlan::Worktree(w) => {
            let (tree, parent) = (&w.tree, &w.parent);
            let shadow = Shadow::new(&w.home, &w.dir, &w.cfg);
            parent
                .share_objects_with(&shadow)
                .await
                .map_err(|e| git_error("share snapshots with the worktree", &e))?;
            let s = shadow
                .snapshot(Scope::All, Some(tree))
                .await
                .map_err(|f| git_error("snapshot of the worktree", &f.error))?;
            vec![EventDraft::new(
                EventType::WorkspaceSnapshot,
                snapshot_data(&s, snapshots::REASON_FORK_WORKTREE, None),
            )]
        }
    };
    if !drafts.is_empty() {
        let res = child.append(drafts, None).await?;
        summary["seq"] = json!(res.last_seq);
        summary["applied"] = json!(true);
    }
    Ok(summary)
}
