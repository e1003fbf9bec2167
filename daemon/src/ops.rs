//! History operations as the API and the turn engine use them (docs/history-rules.md): each
//! one asks a session actor for what it needs, calls a pure projection from
//! `history`, and has the actor record the result. Nothing here writes a Log directly
//! except a new child Log (fork), which is created atomically before any actor owns it.
//!
//! Every operation returns a typed outcome; its serialization is the method's result
//! on the wire (field order included), so callers such as the turn engine read fields,
//! never JSON keys.

use crate::history::checkpoint::{Checkpoint, CheckpointState};
use crate::history::compaction::{self, CompactOptions, CompactStrategy, Trigger};
use crate::history::fold::replay_as_of;
use crate::history::fork;
use crate::history::reconcile::{self, ReconcileReason};
use crate::history::replay::{Replay, ReplayContext, ReplayStats};
use crate::history::stored::{self, StoredEvent};
use crate::history::tree::{self, LineageEntry};
use crate::history::view::{view_v1, Caps};
use crate::registry::{Registry, SessionMeta};
use crate::session::{SessionHandle, SessionState};
use crate::store;
use agentd_proto::replay::Dialect;
use agentd_proto::rpc::{ForkParams, TreeParams};
use agentd_proto::{AgentError, EventDraft, EventType};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// Default depth of `agentd/tree`.
pub const DEFAULT_TREE_DEPTH: usize = 16;
/// Deepest `agentd/tree` answered.
pub const MAX_TREE_DEPTH: usize = 48;

/// The model recorded at session start, used to decide which reasoning items replay.
pub fn session_model(st: &SessionState) -> Option<String> {
    st.events
        .first()
        .map(StoredEvent::event)
        .and_then(|e| e.str_field("model").map(str::to_string))
}

/// What a fork plan reads of the parent, parsed from its lines: the events with seq ≤
/// `to_seq` (all when `None`) and the one with the last seq.
fn fork_sources(st: &SessionState, to_seq: Option<u64>) -> Vec<agentd_proto::Event> {
    let mut out = stored::parse_all(
        st.events
            .iter()
            .filter(|e| to_seq.is_none_or(|t| e.seq <= t)),
    );
    let last = st.events.iter().max_by_key(|e| e.seq);
    if let Some(l) = last.filter(|l| out.iter().all(|e| e.seq != l.seq)) {
        out.push(l.event());
    }
    out
}

/// The replay as of `upto` (events with seq ≤ it), folded afresh from the Log's lines.
fn replay_upto(st: &SessionState, upto: u64, ctx: &ReplayContext) -> Replay {
    let end = st.events.partition_point(|e| e.seq <= upto);
    let upto_events = stored::parse_all(&st.events[..end]);
    replay_as_of(&upto_events, Some(upto), ctx)
}

/// The replay context of the session as of now: the base prompt and the newest
/// recorded instructions (never the files on disk).
pub fn replay_context(
    st: &SessionState,
    permission_mode: &str,
    model: Option<String>,
) -> ReplayContext {
    replay_context_at(st, permission_mode, model, None)
}

/// [`replay_context`] as of `upto`: the instructions are the newest record with seq ≤
/// it, so a context of an earlier point shows them as they were then.
pub fn replay_context_at(
    st: &SessionState,
    permission_mode: &str,
    model: Option<String>,
    upto: Option<u64>,
) -> ReplayContext {
    let instructions = match upto {
        None => st
            .fold
            .instructions()
            .and_then(crate::history::instructions::render),
        Some(u) => {
            let end = st.events.partition_point(|e| e.seq <= u);
            st.events[..end]
                .iter()
                .rev()
                .find(|e| e.event_type() == EventType::Instructions)
                .and_then(|e| crate::history::instructions::render(&e.event().data))
        }
    };
    ReplayContext {
        workspace: st.workspace().to_string(),
        permission_mode: permission_mode.to_string(),
        model,
        base_prompt: Some(crate::prompt::BASE_PROMPT.to_string()),
        instructions,
    }
}

/// The result of `agentd/context`.
#[derive(Debug, Serialize)]
pub struct ContextOutcome {
    pub dialect: Dialect,
    pub items: Value,
    pub stats: ReplayStats,
}

/// A call without a result, as `agentd/reconcile` and `agentd/show` list it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    pub seq: u64,
}

/// A closure `agentd/reconcile` recorded.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedClosure {
    pub call_id: String,
    pub tool: String,
    pub seq: u64,
}

/// The result of `agentd/reconcile`.
#[derive(Debug, Serialize)]
pub struct ReconcileOutcome {
    pub pending: Vec<PendingCall>,
    pub recorded: Vec<RecordedClosure>,
}

/// The result of `agentd/checkpoint`.
#[derive(Debug, Serialize)]
pub struct CheckpointOutcome {
    pub checkpoint: Checkpoint,
    pub view: String,
}

/// The result of `agentd/compact`.
#[derive(Debug, Serialize)]
pub struct CompactOutcome {
    pub ok: bool,
    pub compactable: bool,
    pub recorded: bool,
    pub tail_events: usize,
    pub would_compact_events: usize,
    pub range: Option<compaction::SeqRange>,
    /// `{type: "history_compaction", data}` when compactable, else `null`.
    pub event: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The result of `agentd/fork`.
#[derive(Debug, Serialize)]
pub struct ForkOutcome {
    pub ok: bool,
    pub recorded: bool,
    pub dry_run: bool,
    pub parent_session_id: String,
    pub child_session_id: String,
    pub fork_root_session_id: String,
    pub to_seq: u64,
    pub event_count: usize,
    pub replay_event_count: usize,
    pub summarize: bool,
    pub would_record_branch_summary: bool,
    /// What happened to the workspace files (`files: keep|restore|worktree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Value>,
}

/// The result of `agentd/tree`: one session's tree, or every root of a workspace.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum TreeOutcome {
    Session {
        tree: tree::TreeNode,
        drawing: String,
    },
    Workspace {
        roots: Vec<tree::TreeNode>,
        drawing: String,
    },
}

/// The result of `agentd/import`: the converter's report plus where the Log is.
#[derive(Debug, Serialize)]
pub struct ImportOutcome {
    #[serde(flatten)]
    pub report: crate::import::ImportReport,
    pub session_id: String,
    pub log_path: String,
    pub event_count: u64,
}

fn pending_calls(st: &SessionState) -> Vec<PendingCall> {
    st.fold
        .pending_calls()
        .into_iter()
        .map(|p| PendingCall {
            call_id: p.call_id,
            name: p.name,
            seq: p.seq,
        })
        .collect()
}

/// `agentd/context`: the provider input as of now (from the folded state, O(events
/// since the latest checkpoint)) or as of `after_seq` (folds that prefix).
pub async fn context(
    h: &SessionHandle,
    after_seq: Option<u64>,
    dialect: Dialect,
) -> Result<ContextOutcome, AgentError> {
    let replay: Replay = h
        .query_blocking(move |st| {
            let ctx = replay_context_at(st, "auto", session_model(st), after_seq);
            match after_seq {
                None => st.fold.replay(&ctx),
                Some(a) => replay_upto(st, a, &ctx),
            }
        })
        .await?;
    let items = crate::provider::dialect::render(&replay.items, dialect);
    Ok(ContextOutcome {
        dialect,
        items,
        stats: replay.stats,
    })
}

/// `agentd/context`'s result as JSON text in pieces (the serialization of
/// [`ContextOutcome`], byte for byte): from the session's rendered replay prefix when it
/// can serve it (`crate::context`), else rendered whole.
pub async fn context_json(
    h: &SessionHandle,
    after_seq: Option<u64>,
    dialect: Dialect,
) -> Result<Vec<bytes::Bytes>, AgentError> {
    h.query_blocking(move |st| {
        let ctx = replay_context_at(st, "auto", session_model(st), after_seq);
        let mut cache = st.context.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(text) = cache.context_json(&st.fold, &ctx, dialect, after_seq) {
            return Ok(text);
        }
        drop(cache);
        let replay = match after_seq {
            None => st.fold.replay(&ctx),
            Some(a) => replay_upto(st, a, &ctx),
        };
        let out = ContextOutcome {
            dialect,
            items: crate::provider::dialect::render(&replay.items, dialect),
            stats: replay.stats,
        };
        serde_json::to_vec(&out)
            .map(|v| vec![v.into()])
            .map_err(|e| AgentError::internal(format!("serialize result: {e}")))
    })
    .await?
}

/// `agentd/reconcile` and the reconcile step of turns and interrupts (docs/history-rules.md#reconciliation). Records
/// closures for every pending call (and, when `end_turn`, an interrupted `turn_ended`
/// for an open turn); idempotent.
pub async fn reconcile(
    h: &SessionHandle,
    reason: ReconcileReason,
    dry_run: bool,
    end_open_turn: bool,
) -> Result<ReconcileOutcome, AgentError> {
    if dry_run {
        let pending = h.query(pending_calls).await?;
        return Ok(ReconcileOutcome {
            pending,
            recorded: Vec::new(),
        });
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let res = h
        .record(move |st| {
            let pending = st.fold.pending_calls();
            let _ = tx.send(pending_calls(st));
            let mut drafts = reconcile::closures(&pending, reason);
            if end_open_turn && st.running_turn.is_none() {
                if let Some(turn_id) = st.fold.open_turn() {
                    drafts.push(reconcile::turn_end_interrupted(&turn_id, reason));
                }
            }
            Ok(drafts)
        })
        .await?;
    let pending: Vec<PendingCall> = rx.await.unwrap_or_default();
    // The closures are the batch's first events, one per pending call, in order.
    let recorded = match res {
        Some(r) => pending
            .iter()
            .zip(r.first_seq..=r.last_seq)
            .map(|(p, seq)| RecordedClosure {
                call_id: p.call_id.clone(),
                tool: p.name.clone(),
                seq,
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(ReconcileOutcome { pending, recorded })
}

/// `agentd/checkpoint`: the checkpoint as of now and the exact text replay would inject.
pub async fn checkpoint(
    h: &SessionHandle,
    caps: Option<Value>,
) -> Result<CheckpointOutcome, AgentError> {
    let caps = Caps::from_param(caps.as_ref())?;
    let cp = h.query_blocking(|st| st.checkpoint_now()).await?;
    let view = view_v1(&cp, &caps);
    Ok(CheckpointOutcome {
        checkpoint: cp,
        view,
    })
}

/// The checkpoint as of `to_seq`: continues from the previous compaction's embedded
/// checkpoint when there is one, so a re-compaction folds only the new events.
fn checkpoint_as_of(st: &SessionState, to_seq: u64) -> Checkpoint {
    let prev = st.fold.latest_compaction();
    let prev_to = prev.and_then(|e| e.data.get("range")?.get("to_seq")?.as_u64());
    let prev_cp = prev
        .and_then(|e| e.data.get("checkpoint"))
        .and_then(|v| serde_json::from_value::<Checkpoint>(v.clone()).ok());
    let mut state = match (&prev_cp, prev_to) {
        (Some(cp), Some(_)) => CheckpointState::from_checkpoint(cp),
        _ => CheckpointState::new(),
    };
    state.set_workspace(st.workspace());
    let start = match (prev_cp, prev_to) {
        (Some(_), Some(t)) => st.events.partition_point(|e| e.seq <= t),
        _ => 0,
    };
    for ev in &st.events[start..] {
        if ev.seq > to_seq {
            break;
        }
        state.apply(&ev.event());
    }
    let ws = std::path::PathBuf::from(st.workspace());
    let res = st.resources_dir();
    state.snapshot(&|uri: &str| crate::filesystem::current_hash(&ws, &res, uri))
}

/// Builds the compaction plan from the session state, with the checkpoint as of the
/// cut embedded (`data.checkpoint`) and its rendered `view_v1` (`data.view`).
pub fn plan_compaction(st: &SessionState, opts: &CompactOptions) -> compaction::CompactionPlan {
    let events = stored::parse_all(&st.events);
    let mut plan = compaction::plan(&events, st.fold.latest_compaction(), opts, Value::Null);
    if let (true, Some(range)) = (plan.compactable, plan.range) {
        let mut cp = checkpoint_as_of(st, range.to_seq);
        // The goal open now, wherever its `goal_set` is (docs/goals.md).
        cp.goal = st.checkpoint.goal().cloned();
        let view = view_v1(&cp, &Caps::default());
        if let Some(obj) = plan.data.as_object_mut() {
            obj.insert(
                "checkpoint".into(),
                serde_json::to_value(&cp).unwrap_or(Value::Null),
            );
            obj.insert("view".into(), Value::String(view));
        }
    }
    plan
}

/// `agentd/compact` and automatic compaction (docs/history-rules.md#compaction). With `model_summary`, the
/// provider's schema-checked summary (already obtained by the caller) is merged in.
pub async fn compact(
    h: &SessionHandle,
    opts: CompactOptions,
    dry_run: bool,
    extra: Option<Value>,
) -> Result<CompactOutcome, AgentError> {
    if dry_run {
        let plan = h
            .query_blocking(move |st| plan_compaction(st, &opts))
            .await?;
        return Ok(compact_result(&plan, false, None));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let rec = h
        .record_blocking(move |st| {
            let mut plan = plan_compaction(st, &opts);
            if let (true, Some(extra), Some(obj)) =
                (plan.compactable, extra, plan.data.as_object_mut())
            {
                if let Some(e) = extra.as_object() {
                    for (k, v) in e {
                        obj.insert(k.clone(), v.clone());
                    }
                }
            }
            let drafts = if plan.compactable {
                vec![EventDraft::new(
                    EventType::HistoryCompaction,
                    plan.data.clone(),
                )]
            } else {
                Vec::new()
            };
            let _ = tx.send(plan);
            Ok(drafts)
        })
        .await?;
    let plan = rx
        .await
        .map_err(|_| AgentError::internal("compaction plan lost"))?;
    Ok(compact_result(
        &plan,
        rec.is_some(),
        rec.map(|r| r.first_seq),
    ))
}

fn compact_result(
    plan: &compaction::CompactionPlan,
    recorded: bool,
    seq: Option<u64>,
) -> CompactOutcome {
    CompactOutcome {
        ok: true,
        compactable: plan.compactable,
        recorded,
        tail_events: plan.tail_events,
        would_compact_events: plan.would_compact_events,
        range: plan.range,
        event: if plan.compactable {
            json!({"type": "history_compaction", "data": plan.data})
        } else {
            Value::Null
        },
        compaction_seq: seq,
        reason: plan.reason.clone(),
    }
}

/// The options of a compaction; without `tail_events` the tail is `default_tail` (the
/// config's `[compaction] tail_events`, docs/history-rules.md#compaction).
pub fn compact_options(
    tail_events: Option<usize>,
    default_tail: usize,
    strategy: Option<&str>,
    trigger: Trigger,
) -> Result<CompactOptions, AgentError> {
    let strategy = match strategy {
        None | Some("deterministic") | Some("deterministic_v1") => CompactStrategy::Deterministic,
        Some("model") | Some("model_v1") => CompactStrategy::Model,
        Some(_) => {
            return Err(AgentError::invalid_args(
                "strategy must be deterministic or model",
            ))
        }
    };
    let tail_events = tail_events.unwrap_or(default_tail);
    Ok(CompactOptions {
        tail_events,
        trigger,
        strategy,
    })
}

/// `agentd/fork` (docs/history-rules.md#fork): plans the child from the parent's state, writes the child Log
/// atomically, copies referenced resources, and indexes the child.
pub async fn fork(registry: &Arc<Registry>, p: ForkParams) -> Result<ForkOutcome, AgentError> {
    let parent = registry.get(&p.session_id).await?;
    let child_id = match &p.child_session_id {
        Some(id) => id.clone(),
        None => agentd_proto::session_id::generate(),
    };
    agentd_proto::session_id::validate(&child_id)?;
    if registry.store.exists(&child_id)? {
        return Err(AgentError::new(
            agentd_proto::ErrorKind::AlreadyExists,
            "child session already exists",
        )
        .with_details(json!({"session_id": child_id})));
    }
    let parent_id = p.session_id.clone();
    let parent_root = registry
        .index_get(&parent_id)
        .and_then(|m| m.fork_root_session_id);
    let (to_seq, summarize, cid) = (p.to_seq, p.summarize, child_id.clone());
    let mut plan = parent
        .query_blocking(move |st| {
            fork::plan(
                &fork_sources(st, to_seq),
                &parent_id,
                parent_root.as_deref(),
                st.workspace(),
                to_seq,
                &cid,
                summarize,
            )
        })
        .await??;
    // A child without an explicit title is named after its parent and fork point, so
    // `ls` and `tree` tell siblings apart.
    let title = p.title.clone().or_else(|| {
        registry
            .index_get(&p.session_id)
            .and_then(|m| m.title)
            .map(|t| format!("{t} (fork @{})", plan.to_seq))
    });
    if let (Some(title), Some(first)) = (title, plan.events.first_mut()) {
        first.data["title"] = json!(title);
    }
    let (home, snap_cfg) = (registry.home.root(), &registry.config.snapshots);
    let files =
        crate::undo::prepare_fork(home, snap_cfg, &parent, &p, plan.to_seq, &child_id).await?;
    if let (Some(ws), Some(first)) = (files.workspace(), plan.events.first_mut()) {
        first.data["workspace"] = json!(ws);
    }
    let result = |recorded: bool| ForkOutcome {
        ok: true,
        recorded,
        dry_run: p.dry_run,
        parent_session_id: p.session_id.clone(),
        child_session_id: child_id.clone(),
        fork_root_session_id: plan.fork_root_session_id.clone(),
        to_seq: plan.to_seq,
        event_count: plan.event_count,
        replay_event_count: plan.replay_event_count,
        summarize: p.summarize,
        would_record_branch_summary: plan.would_record_branch_summary,
        files: None,
    };
    if p.dry_run {
        let mut r = result(false);
        r.files = Some(files.summary());
        return Ok(r);
    }
    crate::undo::materialize(&files).await?;
    let src_res = registry.home.resources_dir(&p.session_id)?;
    let dst_res = registry.home.resources_dir(&child_id)?;
    let resources = plan.resources.clone();
    let events = std::mem::take(&mut plan.events);
    let st = registry.store.clone();
    let child = child_id.clone();
    tokio::task::spawn_blocking(move || -> Result<(), AgentError> {
        // Only a directory this fork created may be removed on failure: a racing create
        // of the same id owns an existing one.
        let child_dir = dst_res
            .parent()
            .filter(|d| !d.exists())
            .map(std::path::Path::to_path_buf);
        let res = copy_resources(&src_res, &dst_res, &resources).and_then(|()| {
            st.create(&child, &mut |f| {
                let mut w = std::io::BufWriter::new(f);
                for ev in &events {
                    w.write_all(&store::event_line(ev))?;
                }
                w.flush()
            })
        });
        if res.is_err() {
            // No child Log: leave no directory of it behind either.
            if let Some(dir) = child_dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        res
    })
    .await
    .map_err(|e| AgentError::internal(format!("fork task: {e}")))??;
    registry.index_new_log(&child_id).await?;
    let mut r = result(true);
    r.files = Some(crate::undo::finish_fork(&files, &registry.get(&child_id).await?).await?);
    Ok(r)
}

/// Copies content-addressed resources into the child's directory: each through a
/// temp file and a rename (a crash never leaves a partial file under a hash name), and
/// only when the bytes still match their name.
fn copy_resources(
    src: &std::path::Path,
    dst: &std::path::Path,
    names: &[String],
) -> Result<(), AgentError> {
    let mut copied = false;
    for name in names {
        let Ok(bytes) = std::fs::read(src.join(name)) else {
            continue; // referenced but absent in the parent: nothing to copy
        };
        if crate::text::sha256_hex(&bytes) != *name {
            tracing::warn!(resource = %name, "parent resource does not match its hash; not copied");
            continue;
        }
        std::fs::create_dir_all(dst)
            .map_err(|e| store::write_failed("create resources dir", &e))?;
        let tmp = dst.join(format!(".{name}.tmp"));
        store::write_synced(&tmp, &bytes).map_err(|e| store::write_failed("copy resource", &e))?;
        std::fs::rename(&tmp, dst.join(name))
            .map_err(|e| store::write_failed("copy resource", &e))?;
        copied = true;
    }
    if copied {
        store::sync_dir(dst).map_err(|e| store::write_failed("sync resources dir", &e))?;
    }
    Ok(())
}

fn lineage(meta: &SessionMeta) -> LineageEntry {
    LineageEntry {
        session_id: meta.session_id.clone(),
        workspace: meta.workspace.clone(),
        title: meta.title.clone(),
        event_count: meta.event_count,
        first_event_ts: meta.created_at.clone(),
        last_event_ts: meta.updated_at.clone(),
        parent_session_id: meta.parent_session_id.clone(),
        fork_root_session_id: meta.fork_root_session_id.clone(),
        forked_to_seq: meta.forked_to_seq,
        branch_summary: meta.branch_summary,
        relation: meta.relation.clone(),
        archived: meta.archived,
        deleted: meta.deleted,
    }
}

/// `agentd/tree` (docs/history-rules.md#tree), served from the lineage index only.
pub fn tree(registry: &Registry, p: TreeParams) -> Result<TreeOutcome, AgentError> {
    let depth = p.max_depth.unwrap_or(DEFAULT_TREE_DEPTH);
    // Building, drawing and serializing a tree recurse once per level: a bound keeps a
    // deep fork chain from exhausting a worker's stack, and keeps the JSON nesting under
    // the 128 levels common JSON parsers (serde_json among them) accept. Deeper levels
    // are reached by asking for the tree of a descendant.
    if depth > MAX_TREE_DEPTH {
        return Err(AgentError::invalid_args(format!(
            "max_depth must be at most {MAX_TREE_DEPTH}; ask for the tree of a descendant to go deeper"
        ))
        .with_details(json!({"field": "max_depth", "max": MAX_TREE_DEPTH})));
    }
    let mut index: HashMap<String, LineageEntry> =
        registry.with_index(|i| i.iter().map(|(k, m)| (k.clone(), lineage(m))).collect());
    if p.session_id.is_none() && !p.include_archived {
        // Archived sessions leave workspace trees; their forks, if live, become roots.
        index.retain(|_, e| !e.archived);
    }
    // A deleted session stays only as the parent of a session still shown.
    let parents: std::collections::HashSet<String> = index
        .values()
        .filter(|e| !e.deleted)
        .filter_map(|e| e.parent_session_id.clone())
        .collect();
    let asked = p.session_id.clone();
    index.retain(|k, e| !e.deleted || parents.contains(k) || asked.as_deref() == Some(k));
    match (&p.session_id, &p.workspace) {
        (Some(sid), _) => {
            agentd_proto::session_id::validate(sid)?;
            let node = tree::build(sid, &index, depth).ok_or_else(|| {
                AgentError::not_found("no such session").with_details(json!({"session_id": sid}))
            })?;
            let drawing = tree::draw(&node);
            Ok(TreeOutcome::Session {
                tree: node,
                drawing,
            })
        }
        (None, Some(ws)) => {
            // `ws` is canonical already (the API resolves it off the runtime's workers).
            let roots = tree::roots_for_workspace(ws, &index, depth);
            let drawing: String = roots.iter().map(tree::draw).collect::<Vec<_>>().join("\n");
            Ok(TreeOutcome::Workspace { roots, drawing })
        }
        (None, None) => Err(AgentError::invalid_args("give session_id or workspace")),
    }
}

/// `agentd/import`: converts another agent's session into a new Log. The conversion
/// streams into a temp file in the sessions directory which becomes the Log only
/// when complete (fsync, link, directory fsync); a failed import leaves nothing.
pub async fn import(
    registry: &Arc<Registry>,
    p: agentd_proto::rpc::ImportParams,
) -> Result<ImportOutcome, AgentError> {
    import_with(registry, p, Default::default()).await
}

/// `import` with extra `imported_from` fields (the fingerprint and earlier import that
/// `once` imports record).
pub async fn import_with(
    registry: &Arc<Registry>,
    p: agentd_proto::rpc::ImportParams,
    mut imported_from_extra: serde_json::Map<String, Value>,
) -> Result<ImportOutcome, AgentError> {
    // agentd's clock, not the source's: what tells several imports of one source apart
    // (the earliest holds its UUID, docs/protocol.md#session-uuids).
    imported_from_extra
        .entry("imported_at")
        .or_insert_with(|| json!(agentd_proto::event::now_ts()));
    let format = crate::import::Format::parse_choice(&p.format)?;
    let src = std::path::PathBuf::from(&p.path);
    if !src.is_absolute() {
        return Err(AgentError::invalid_args("path must be absolute")
            .with_details(json!({"field": "path"})));
    }
    let workspace = match &p.workspace {
        Some(ws) => Some(crate::filesystem::check_workspace_async(ws.clone()).await?),
        None => None,
    };
    let sid = match p.session_id {
        Some(id) => {
            agentd_proto::session_id::validate(&id)?;
            id
        }
        None => agentd_proto::session_id::generate(),
    };
    let st = registry.store.clone();
    let sid2 = sid.clone();
    let strict = p.strict;
    let ctx = crate::import::ImportContext {
        session_id: sid.clone(),
        workspace,
        agentd_version: env!("CARGO_PKG_VERSION").to_string(),
        source_session: p.source_session.clone(),
        imported_from_extra,
    };
    let report =
        tokio::task::spawn_blocking(move || -> Result<crate::import::ImportReport, AgentError> {
            let mut report = None;
            let mut failure = None;
            let res = st.create(&sid2, &mut |f| {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                match crate::import::import(format, &src, &mut w, &ctx) {
                    Ok(r) if strict && !r.warnings.is_empty() => {
                        failure = Some(
                            AgentError::new(
                                agentd_proto::ErrorKind::Unsupported,
                                format!(
                                    "--strict: the import would carry {} warning(s): {}",
                                    r.warnings.len(),
                                    r.warnings.join("; ")
                                ),
                            )
                            .with_details(json!({"warnings": r.warnings})),
                        );
                        Err(std::io::Error::other("strict import refused"))
                    }
                    Ok(r) => {
                        report = Some(r);
                        w.flush()
                    }
                    Err(e) => {
                        failure = Some(e);
                        Err(std::io::Error::other("import failed"))
                    }
                }
            });
            if let Some(e) = failure {
                return Err(e);
            }
            res?;
            report.ok_or_else(|| AgentError::internal("import produced no report"))
        })
        .await
        .map_err(|e| AgentError::internal(format!("import task: {e}")))??;
    registry.index_new_log(&sid).await?;
    Ok(ImportOutcome {
        log_path: crate::store::shown_log_path(&*registry.store, &registry.home, &sid)?,
        event_count: report.imported,
        session_id: sid,
        report,
    })
}

/// `agentd/append` with a `client_request_id` (docs/api.md): the first event of the
/// append records the key (`client_request_id`, `request_hash`, `request_events`), so
/// a retry with the same key and events answers the append already made, across
/// restarts, and the same key with other events is kind `conflict`. Checked and
/// appended in one actor command, so two retries racing each other append once.
pub async fn append_idempotent(
    h: &SessionHandle,
    p: agentd_proto::rpc::AppendParams,
) -> Result<agentd_proto::rpc::AppendResult, AgentError> {
    use agentd_proto::rpc::AppendResult;
    let id = p.client_request_id.clone().unwrap_or_default();
    agentd_proto::rpc::validate_client_request_id(&id)?;
    let hash = {
        let canonical = json!([p.session_id, p.expect_seq, p.events]);
        crate::text::sha256_hex(canonical.to_string().as_bytes())
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<AppendResult>();
    let sid = p.session_id.clone();
    let (mut drafts, expect_seq) = (p.events, p.expect_seq);
    let recorded = h
        .record(move |st| {
            if let Some(req) = st.client_requests.get(&id) {
                if req.hash != hash || req.turn_id.is_some() {
                    return Err(AgentError::new(
                        agentd_proto::ErrorKind::Conflict,
                        "this client_request_id was already used with other events",
                    )
                    .with_details(json!({"session_id": sid, "client_request_id": id,
                                         "first_seq": req.seq})));
                }
                let evs: Vec<&StoredEvent> = st
                    .events_after(req.seq.checked_sub(1))
                    .iter()
                    .take(req.events as usize)
                    .collect();
                let _ = tx.send(AppendResult {
                    first_seq: req.seq,
                    last_seq: evs.last().map_or(req.seq, |e| e.seq),
                    ids: evs.iter().map(|e| e.id().to_string()).collect(),
                });
                return Ok(Vec::new());
            }
            if let Some(expect) = expect_seq.filter(|e| *e != st.next_seq) {
                return Err(AgentError::new(
                    agentd_proto::ErrorKind::SeqConflict,
                    format!("expect_seq {expect} but the next seq is {}", st.next_seq),
                )
                .with_details(json!({"expect_seq": expect, "next_seq": st.next_seq})));
            }
            let n = drafts.len();
            if let Some(first) = drafts.first_mut().and_then(|d| d.data.as_object_mut()) {
                first.insert("client_request_id".into(), json!(id));
                first.insert("request_hash".into(), json!(hash));
                first.insert("request_events".into(), json!(n));
            }
            Ok(drafts)
        })
        .await?;
    match recorded {
        Some(r) => Ok(r),
        None => rx
            .await
            .map_err(|_| AgentError::invalid_args("events must not be empty")),
    }
}
