//! The turn engine (docs/turns-and-providers.md#turns): `agentd/turn`, `agentd/interrupt`, and the provider-side
//! half of `agentd/compact` (`strategy: model`).
//!
//! A turn runs in a task of its own, so that `wait:false` can return right after
//! `turn_started` and so that a client disconnecting never cuts a turn in half. The
//! session's running turn is kept in the [`TurnManager`] (one per session: a second
//! `agentd/turn` gets kind `busy`), with the cancellation token an interrupt fires and a
//! watch channel on which the turn publishes its final result. The manager also owns
//! the artifact watch and routes `ask` permission requests to the client peers that
//! subscribed for them ([`PeerHandle`]); it sits above the registry and never the
//! other way round.
//!
//! Module map: `engine` (the loop: reconcile → `turn_started` → `user_message` → model
//! steps and tools → `turn_ended`), `permission` (the `auto | ask | read_only` modes),
//! `compact` (pressure / overflow-recovery compaction and the `model` strategy),
//! `compact_hooks` (`pre_compact` hooks before a compaction the user asked for),
//! `commands` (the tool context, sandbox included, of a session's tools and hooks),
//! `setup` (choosing provider, model and context window for a session).
//!
//! Interrupt protocol: `agentd/interrupt` records the reason on the running turn, fires
//! its token and waits for the turn task to finish. The task stops its provider stream
//! and tools (tool process groups are killed by `tools::shell`), records what it already
//! has (partial text, tool results of finished calls), then in one append closes every
//! pending call (`orphan_tool_call`, reason `interrupt`) and records
//! `turn_ended{status:"interrupted", reason}`. Only then does the interrupt answer, with
//! the call ids it closed. Shutdown does the same for every running turn, after which
//! new turns are refused (`daemon_unavailable`).
//!
//! `wait:false` answers once `turn_started` and `user_message` are durable, with
//! `status:"running"` and their seqs; the turn's end is then seen through
//! `agentd/subscribe` or `agentd/events`.
//!
//! A panic in the engine is caught in the turn task: the turn ends
//! `failed{error{kind:"internal"}}` (its pending calls closed) and the session is freed,
//! rather than staying `busy` until the daemon restarts.
//!
//! Turn order: the running entry is removed just after `turn_ended` is durable; a new
//! turn that finds the entry of a turn whose `turn_ended` is already durable waits for
//! that release instead of being refused `busy`, and a new turn never runs ahead of
//! queued ones (`admission`).

mod admission;
mod commands;
mod compact;
mod compact_hooks;
mod engine;
pub mod goal;
pub mod images;
pub mod instructions;
pub mod mcp;
mod permission;
mod setup;
pub mod subagent;
pub use setup::is_home;

pub use permission::PermissionMode;

use crate::history::compaction::CompactOptions;
use crate::history::reconcile::{self, ReconcileReason};
use crate::ops::CompactOutcome;
use crate::peer::PeerHandle;
use crate::registry::Registry;
use crate::session::{SessionHandle, SessionState};
use agentd_proto::rpc::{InterruptResult, TurnParams, TurnResult};
use agentd_proto::{AgentError, ErrorKind, EventDraft, EventType};
use dashmap::DashMap;
use futures::FutureExt;
use serde_json::json;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

/// Upper bound a request (or `[turns] max_iterations`) may ask for; a turn whose
/// request names none runs `[turns] max_iterations` (default 16).
pub use crate::config::MAX_MAX_ITERATIONS;
/// How long an interrupt waits for the turn task to record its end. Tools die within a
/// second of the cancel; this only bounds a wedged provider or a stuck Log write.
const INTERRUPT_WAIT: Duration = Duration::from_secs(15);

/// What the daemon knows of turns beyond the Logs: the running one per session, the
/// artifact watch and where permission requests go.
pub struct TurnManager {
    pub registry: Arc<Registry>,
    running: DashMap<String, Arc<RunningTurn>>,
    /// Running turns, for `agentd/status`.
    turns_running: AtomicU64,
    /// Set by [`TurnManager::interrupt_all`] before it looks at the running turns; from
    /// then on a new turn is refused with `daemon_unavailable` (see [`launch`]).
    shutting_down: AtomicBool,
    pub(crate) watch: crate::watch::ArtifactWatch,
    /// Peers that subscribed with `permissions:true`, per session: where `ask` mode
    /// sends `agentd/permission` requests.
    permission_peers: DashMap<String, Vec<PeerHandle>>,
    /// The MCP servers of each session.
    pub mcp: mcp::McpSessions,
    /// One queue start at a time per session (see [`TurnManager::start_next_queued`]).
    queue_starts: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// Held while a running-turn marker is written, and while one is removed after
    /// checking that nothing runs or waits (see [`TurnManager::unmark_if_idle`]).
    markers: Mutex<()>,
}

impl TurnManager {
    /// A turn of `sid` holds the session's turn slot (from before `turn_started`).
    pub fn is_running(&self, sid: &str) -> bool {
        self.running.contains_key(sid)
    }
}

/// A turn in progress.
pub struct RunningTurn {
    pub turn_id: String,
    /// `(client_request_id, request_hash)` of the request that admitted it: a retry
    /// racing its `turn_started` is answered with this turn, not `busy`.
    client_request: Option<(String, String)>,
    cancel: CancellationToken,
    /// Why it was interrupted (`interrupt`, the client's reason, `daemon_shutdown`).
    interrupt_reason: Mutex<Option<String>>,
    /// The final result and the call ids its interrupt closed, once recorded.
    done: watch::Receiver<Option<Finished>>,
    /// `agentd/steer` inputs waiting for the turn's next provider call.
    steers: Mutex<Vec<Steer>>,
    /// Set once the turn task freed the session's slot (see `admission`).
    released: watch::Sender<bool>,
}

/// One `agentd/steer` input on its way into the running turn: recorded by the engine
/// right before its next provider call, then answered.
pub(crate) struct Steer {
    pub text: String,
    /// The references of its images, stored already (`images::store`).
    pub images: Option<serde_json::Value>,
    /// `(client_request_id, request_hash)`.
    pub key: Option<(String, String)>,
    pub reply: SteerReplies,
}

type SteerReply = oneshot::Sender<Result<agentd_proto::rpc::AppendResult, AgentError>>;

/// Who waits for one steer's answer: its request, and any retry of it (the same
/// `client_request_id` and input) that came while it waited. The input is recorded once
/// and every one of them gets its seq.
pub(crate) struct SteerReplies(Vec<SteerReply>);

impl SteerReplies {
    pub fn send(self, res: Result<agentd_proto::rpc::AppendResult, AgentError>) {
        for tx in self.0 {
            let _ = tx.send(res.clone());
        }
    }
}

impl RunningTurn {
    fn new(
        turn_id: String,
        client_request: Option<(String, String)>,
    ) -> (Arc<RunningTurn>, watch::Sender<Option<Finished>>) {
        let (done_tx, done_rx) = watch::channel(None);
        let r = Arc::new(RunningTurn {
            turn_id,
            client_request,
            cancel: CancellationToken::new(),
            interrupt_reason: Mutex::new(None),
            done: done_rx,
            steers: Mutex::new(Vec::new()),
            released: watch::Sender::new(false),
        });
        (r, done_tx)
    }

    /// The steers waiting now, taken.
    pub(crate) fn take_steers(&self) -> Vec<Steer> {
        self.steers
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }

    pub(crate) fn has_steers(&self) -> bool {
        self.steers.lock().map(|v| !v.is_empty()).unwrap_or(false)
    }
}

#[derive(Clone)]
struct Finished {
    result: TurnResult,
    reconciled: Vec<String>,
}

impl RunningTurn {
    fn interrupt(&self, reason: &str) {
        if let Ok(mut r) = self.interrupt_reason.lock() {
            r.get_or_insert_with(|| reason.to_string());
        }
        self.cancel.cancel();
    }

    fn reason(&self) -> String {
        self.interrupt_reason
            .lock()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| ReconcileReason::Interrupt.as_str().to_string())
    }

    async fn wait_done(&self, timeout: Duration) -> Option<Finished> {
        let mut rx = self.done.clone();
        let res = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        match res {
            Ok(Ok(v)) => v.clone(),
            _ => None,
        }
    }
}

impl TurnManager {
    pub fn new(registry: Arc<Registry>) -> Arc<TurnManager> {
        let mcp = mcp::McpSessions::new(
            registry.config.mcp_servers.clone(),
            Duration::from_secs(registry.config.mcp_idle_stop_s),
            registry.config.mcp_sandbox,
            registry.home.root(),
        );
        let turns = Arc::new(TurnManager {
            mcp,
            registry,
            running: DashMap::new(),
            turns_running: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            watch: crate::watch::ArtifactWatch::default(),
            permission_peers: DashMap::new(),
            queue_starts: DashMap::new(),
            markers: Mutex::new(()),
        });
        let weak = Arc::downgrade(&turns);
        let _ = turns.registry.resumer.set(Box::new(
            move |h: &SessionHandle, st: &SessionState, turn_id: &str| {
                weak.upgrade().is_some_and(|t| t.take_over(h, st, turn_id))
            },
        ));
        let weak = Arc::downgrade(&turns);
        let _ = turns
            .registry
            .queue_starter
            .set(Box::new(move |h: &SessionHandle| {
                if let Some(t) = weak.upgrade() {
                    t.start_next_queued(h);
                }
            }));
        turns
    }

    /// `<home>/turns/running/`: one empty file per session whose turn this daemon runs,
    /// so that a restart finds the turns a crash cut without reading every Log. A hint
    /// only: the Log decides (a session loaded later for another reason resumes too).
    fn markers_dir(&self) -> std::path::PathBuf {
        self.registry.home.root().join("turns").join("running")
    }

    fn mark_running(&self, sid: &str, running: bool) {
        if agentd_proto::session_id::validate(sid).is_err() {
            return;
        }
        let _g = self.markers.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = set_marker(&self.markers_dir(), sid, running) {
            tracing::warn!(session = sid, error = %e, "running-turn marker not updated");
        }
    }

    /// Removes the session's marker if no turn runs and none is queued; `false` (the
    /// marker kept) otherwise. Decided on the session's actor, after every append sent
    /// before, and under the markers' lock, so a prompt queued or a turn started at
    /// the same moment keeps (or writes again) its marker.
    async fn unmark_if_idle(self: &Arc<Self>, h: &SessionHandle) -> bool {
        let turns = self.clone();
        let sid = h.id.to_string();
        h.query(move |st| {
            let _g = turns.markers.lock().unwrap_or_else(|p| p.into_inner());
            if !st.queued.is_empty() || turns.is_running(&sid) {
                return false;
            }
            let path = turns.markers_dir().join(&sid);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(session = %sid, error = %e, "running-turn marker not removed");
                }
                _ => {}
            }
            true
        })
        .await
        .unwrap_or(false)
    }

    /// At start: loads every session a marker names, so the turns a crash cut resume
    /// and the turns queued in them start now rather than at the session's next use
    /// (the first load hands them to [`take_over`](Self::take_over) and
    /// [`start_next_queued`](Self::start_next_queued)); a marker whose session has
    /// neither is removed.
    pub fn resume_marked(self: &Arc<Self>) {
        let Ok(dir) = std::fs::read_dir(self.markers_dir()) else {
            return;
        };
        let sids: Vec<String> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|s| agentd_proto::session_id::validate(s).is_ok())
            .collect();
        for sid in sids {
            let turns = self.clone();
            tokio::spawn(async move {
                match turns.registry.get(&sid).await {
                    Ok(h) => {
                        turns.unmark_if_idle(&h).await;
                    }
                    // Deleted meanwhile: nothing left to run.
                    Err(e) if e.kind == ErrorKind::NotFound => turns.mark_running(&sid, false),
                    Err(e) => {
                        tracing::warn!(session = %sid, error = %e, "session of a running-turn marker not loaded");
                    }
                }
            });
        }
    }

    /// The session hook ([`crate::registry::Registry::resumer`]): claims the turn a
    /// crash left open in `st` when this daemon's engine ran it (`turn_started.runner`
    /// is `agentd`; a harness's turn through `agentd/append` is closed as before) and
    /// resumes it in a task. Runs on the session's actor before it serves anything.
    fn take_over(self: &Arc<Self>, h: &SessionHandle, st: &SessionState, turn_id: &str) -> bool {
        let Some(seq) = engine::turn_started_seq(st, turn_id) else {
            return false;
        };
        let Some(started) = st
            .events_after(seq.checked_sub(1))
            .first()
            .map(|e| e.event())
        else {
            return false;
        };
        if started.str_field("runner") != Some("agentd")
            || self.shutting_down.load(Ordering::SeqCst)
        {
            return false;
        }
        let params = started.data.get("params").cloned().unwrap_or_default();
        let client_request = started
            .str_field("client_request_id")
            .zip(started.str_field("request_hash"))
            .map(|(a, b)| (a.to_string(), b.to_string()));
        let sid = h.id.to_string();
        let (running, done_tx) = RunningTurn::new(turn_id.to_string(), client_request);
        {
            use dashmap::mapref::entry::Entry;
            match self.running.entry(sid.clone()) {
                Entry::Occupied(_) => return false,
                Entry::Vacant(v) => {
                    v.insert(running.clone());
                }
            }
        }
        self.turns_running.fetch_add(1, Ordering::Relaxed);
        self.mark_running(&sid, true);
        let p = params_from_record(&sid, &params);
        let (turns, h) = (self.clone(), h.clone());
        tokio::spawn(async move {
            let engine = {
                let (turns, h, running) = (turns.clone(), h.clone(), running.clone());
                async move {
                    let (started_tx, _started_rx) = oneshot::channel();
                    match setup::resolve(&turns.registry, &h, &p).await {
                        Ok(spec) => {
                            engine::run(
                                &turns,
                                &h,
                                spec,
                                engine::Start::Resume,
                                &running,
                                started_tx,
                            )
                            .await
                        }
                        // The turn cannot run again (its provider is gone from the
                        // config, its key unset): it ends failed, its calls closed.
                        Err(e) => record_failed(&h, &running.turn_id, e).await,
                    }
                }
            };
            run_task(turns, h, engine, running, done_tx).await;
        });
        true
    }

    /// Turns running now.
    pub fn running_count(&self) -> u64 {
        self.turns_running.load(Ordering::Relaxed)
    }

    /// Routes `ask` permission requests of `sid` to `peer` (the newest peer wins).
    pub fn add_permission_peer(&self, sid: &str, peer: PeerHandle) {
        let mut e = self.permission_peers.entry(sid.to_string()).or_default();
        e.retain(|c| !c.is_closed());
        e.push(peer);
    }

    /// A live peer that opted in to permission requests for `sid`, newest first; a
    /// subagent without one asks through its parent's (docs/subagents.md).
    pub fn permission_peer(&self, sid: &str) -> Option<PeerHandle> {
        let mut sid = sid.to_string();
        for _ in 0..=crate::config::MAX_SUBAGENT_DEPTH {
            if let Some(mut e) = self.permission_peers.get_mut(&sid) {
                e.retain(|c| !c.is_closed());
                if let Some(p) = e.last() {
                    return Some(p.clone());
                }
            }
            sid = self.registry.with_index(|i| {
                i.get(&sid)
                    .filter(|m| m.relation.as_deref() == Some(subagent::RELATION))
                    .and_then(|m| m.parent_session_id.clone())
            })?;
        }
        None
    }

    /// `agentd/turn`.
    pub async fn turn(self: &Arc<Self>, p: TurnParams) -> Result<TurnResult, AgentError> {
        let h = self.registry.get(&p.session_id).await?;
        let wait = p.wait.unwrap_or(true);
        let key = match &p.client_request_id {
            Some(id) => {
                agentd_proto::rpc::validate_client_request_id(id)?;
                Some((id.clone(), request_hash(&p)))
            }
            None => None,
        };
        if let Some((id, hash)) = &key {
            let known = h
                .query({
                    let id = id.clone();
                    move |st| st.client_requests.get(&id).cloned()
                })
                .await?;
            if let Some(req) = known {
                return self.admitted(&h, id, hash, req, wait).await;
            }
        }
        let spec = setup::resolve(&self.registry, &h, &p).await?;
        if let Some(entries) = &p.mcp_servers {
            let parsed = mcp::parse_client(entries)?;
            self.mcp.set_client(&p.session_id, parsed);
        }
        let queue = p.queue.unwrap_or(false);
        if queue {
            let waiting = h.query(|st| !st.queued.is_empty()).await?;
            if waiting || self.is_running(&p.session_id) {
                return self.enqueue(&h, &p, key, spec.images).await;
            }
        }
        // Kept for a fall back to the queue below (the launch takes the spec).
        let queued_images = if queue {
            spec.images.clone()
        } else {
            Vec::new()
        };
        let mut record = json!({"runner": "agentd", "params": resume_params(&p)});
        if let Some((id, hash)) = &key {
            record["client_request_id"] = json!(id);
            record["request_hash"] = json!(hash);
        }
        let input = p.input.clone();
        let res = launch(
            self,
            h.clone(),
            wait,
            key.clone(),
            None,
            move |turns, h, running, started| async move {
                let start = engine::Start::New { input, record };
                engine::run(&turns, &h, spec, start, &running, started).await
            },
        )
        .await;
        match res {
            // It became busy between the check and the claim: queue behind it.
            Err(e) if queue && e.kind == ErrorKind::Busy => {
                self.enqueue(&h, &p, key, queued_images).await
            }
            other => other,
        }
    }

    /// Admits `p` durably behind the running turn: `turn_queued{turn_id, input, params,
    /// runner, client_request_id?, request_hash?}`; answered `status: "queued"`. Its
    /// `images` are stored now and referenced in `params.images`.
    async fn enqueue(
        self: &Arc<Self>,
        h: &SessionHandle,
        p: &TurnParams,
        key: Option<(String, String)>,
        images: Vec<images::Prepared>,
    ) -> Result<TurnResult, AgentError> {
        let turn_id = format!("turn_{}", agentd_proto::event::new_event_id());
        let mut params = resume_params(p);
        if !images.is_empty() {
            params["images"] = images::store_queued(&self.registry, &h.id, images).await?;
        }
        let mut data = json!({"turn_id": turn_id, "input": p.input, "runner": "agentd",
                              "params": params});
        // The marker before the prompt is durable: the turn ahead may end and take its
        // marker away before this one starts, and a crash then must still find it.
        self.mark_running(&h.id, true);
        if let Some((id, hash)) = &key {
            data["client_request_id"] = json!(id);
            data["request_hash"] = json!(hash);
        }
        let res = h
            .append(vec![EventDraft::new(EventType::TurnQueued, data)], None)
            .await?;
        // Written again before the answer: the turn ahead may have ended between the
        // first write and the append, removing the marker as the queue looked empty.
        self.mark_running(&h.id, true);
        // The running turn may have ended before this was durable, and looked at an
        // empty queue: start it now if nothing runs.
        if !self.is_running(&h.id) {
            self.start_next_queued(h);
        }
        Ok(TurnResult {
            turn_id,
            status: "queued".into(),
            output_text: String::new(),
            first_seq: res.first_seq,
            last_seq: res.last_seq,
            error: None,
            stop_reason: None,
            reason: None,
        })
    }

    /// Starts the session's oldest queued turn, in a task, if no turn runs (a turn that
    /// ends calls this again, so the queue drains in order). A queued turn that cannot
    /// start (its provider is gone) is withdrawn with `turn_dequeued{reason:"failed",
    /// error}` and the next one is tried.
    ///
    /// Starts of one session are serialized: each looks at the queue only after the
    /// one before has claimed its turn (its `turn_started` durable), so two callers (a
    /// turn that ended, a prompt queued meanwhile, a load) never start the same
    /// queued turn twice.
    pub fn start_next_queued(self: &Arc<Self>, h: &SessionHandle) {
        let (turns, h) = (self.clone(), h.clone());
        let lock = self
            .queue_starts
            .entry(h.id.to_string())
            .or_default()
            .value()
            .clone();
        tokio::spawn(async move {
            let _one_at_a_time = lock.lock().await;
            loop {
                if turns.is_running(&h.id) || turns.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                let next = h
                    .query(|st| {
                        let (_, seq) = st.queued.first()?;
                        let e = st.events_after(seq.checked_sub(1)).first()?;
                        (e.seq == *seq).then(|| e.event())
                    })
                    .await;
                let Ok(Some(ev)) = next else { return };
                let turn_id = ev.str_field("turn_id").unwrap_or_default().to_string();
                let params = ev.data.get("params").cloned().unwrap_or_default();
                let mut p = params_from_record(&h.id, &params);
                p.input = ev.str_field("input").unwrap_or_default().to_string();
                let key = ev
                    .str_field("client_request_id")
                    .zip(ev.str_field("request_hash"))
                    .map(|(a, b)| (a.to_string(), b.to_string()));
                let spec = match setup::resolve(&turns.registry, &h, &p).await {
                    Ok(mut s) => {
                        s.stored_images = params.get("images").filter(|v| v.is_array()).cloned();
                        s
                    }
                    Err(e) => {
                        let d = EventDraft::new(
                            EventType::TurnDequeued,
                            json!({"turn_id": turn_id, "reason": "failed",
                                   "error": {"kind": e.kind, "message": e.message}}),
                        );
                        if h.append(vec![d], None).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let mut record =
                    json!({"runner": "agentd", "params": params, "queued_seq": ev.seq});
                if let Some((id, hash)) = &key {
                    record["client_request_id"] = json!(id);
                    record["request_hash"] = json!(hash);
                }
                let input = p.input.clone();
                let res = launch(
                    &turns,
                    h.clone(),
                    false,
                    key,
                    Some(turn_id),
                    move |turns, h, running, started| async move {
                        let start = engine::Start::New { input, record };
                        engine::run(&turns, &h, spec, start, &running, started).await
                    },
                )
                .await;
                if let Err(e) = res {
                    tracing::warn!(session = %h.id, error = %e, "queued turn not started");
                }
                return;
            }
        });
    }

    /// `agentd/dequeue`: withdraws a queued turn that has not started.
    pub async fn dequeue(&self, sid: &str, turn_id: &str) -> Result<serde_json::Value, AgentError> {
        let h = self.registry.get(sid).await?;
        let tid = turn_id.to_string();
        let (sid2, tid2) = (sid.to_string(), turn_id.to_string());
        let res = h
            .record(move |st| {
                if !st.queued.iter().any(|(q, _)| *q == tid) {
                    return Err(AgentError::new(
                        ErrorKind::NotFound,
                        "no such queued turn: it started, was withdrawn, or never was queued",
                    )
                    .with_details(json!({"session_id": sid2, "turn_id": tid2})));
                }
                Ok(vec![EventDraft::new(
                    EventType::TurnDequeued,
                    json!({"turn_id": tid, "reason": "dequeued"}),
                )])
            })
            .await?;
        Ok(
            json!({"session_id": sid, "turn_id": turn_id, "dequeued": true,
                  "seq": res.map(|r| r.first_seq)}),
        )
    }

    /// `agentd/steer`: input for the running turn, recorded as `user_message{text,
    /// steer: true, turn_id}` right before the turn's next provider call and answered
    /// then (`{turn_id, seq}`); kind `not_running` with no turn running.
    pub async fn steer(
        &self,
        p: agentd_proto::rpc::SteerParams,
    ) -> Result<serde_json::Value, AgentError> {
        let h = self.registry.get(&p.session_id).await?;
        if p.input.trim().is_empty() {
            return Err(AgentError::invalid_args("input must not be empty"));
        }
        let prepared = images::prepare_for(&h, &p.images).await?;
        let key = match &p.client_request_id {
            Some(id) => {
                agentd_proto::rpc::validate_client_request_id(id)?;
                let mut req = json!(["steer", p.session_id, p.input]);
                if !prepared.is_empty() {
                    req = json!(["steer", p.session_id, p.input, images::digests(&prepared)]);
                }
                let hash = crate::text::sha256_hex(req.to_string().as_bytes());
                Some((id.clone(), hash))
            }
            None => None,
        };
        if let Some((id, hash)) = &key {
            let known = h
                .query({
                    let id = id.clone();
                    move |st| st.client_requests.get(&id).cloned()
                })
                .await?;
            if let Some(req) = known {
                if &req.hash != hash {
                    return Err(admission::conflict(&p.session_id, id));
                }
                return Ok(
                    json!({"session_id": p.session_id, "turn_id": req.turn_id, "seq": req.seq}),
                );
            }
        }
        let not_running = || {
            AgentError::new(
                ErrorKind::NotRunning,
                "no turn is running in this session; send the input as a new turn",
            )
            .with_details(json!({"session_id": p.session_id}))
            .with_next_actions(&[&format!("agentctl turn {} ...", p.session_id)])
        };
        let Some(r) = self.running.get(&p.session_id).map(|r| r.value().clone()) else {
            return Err(not_running());
        };
        // Sent on seeing the turn's `turn_ended`, before its slot is freed: that turn
        // takes no more input, so the answer is the one for an idle session.
        if admission::wait_if_ending(&h, &r).await {
            return Err(not_running());
        }
        // A retry with other params waiting already is refused before its images are
        // stored; the rest are stored now, referenced from the steered `user_message`.
        let waiting_other = |v: &Vec<Steer>| {
            key.as_ref().is_some_and(|(id, hash)| {
                v.iter()
                    .any(|s| s.key.as_ref().is_some_and(|(k, h)| k == id && h != hash))
            })
        };
        let conflict =
            || admission::conflict(&p.session_id, p.client_request_id.as_deref().unwrap_or(""));
        if r.steers.lock().is_ok_and(|v| waiting_other(&v)) {
            return Err(conflict());
        }
        let stored = match prepared.is_empty() {
            true => None,
            false => Some(images::store_queued(&self.registry, &p.session_id, prepared).await?),
        };
        let (tx, rx) = oneshot::channel();
        let retry_of_waiting = match r.steers.lock() {
            Ok(mut v) => {
                // A retry of a steer still waiting for the next provider call (its
                // connection dropped): it waits for the same recording.
                if waiting_other(&v) {
                    return Err(conflict());
                }
                let same = key.as_ref().and_then(|(id, _)| {
                    v.iter_mut()
                        .find(|s| s.key.as_ref().is_some_and(|(k, _)| k == id))
                });
                match same {
                    Some(s) => {
                        s.reply.0.push(tx);
                        true
                    }
                    None => {
                        v.push(Steer {
                            text: p.input.clone(),
                            images: stored,
                            key,
                            reply: SteerReplies(vec![tx]),
                        });
                        false
                    }
                }
            }
            Err(_) => return Err(AgentError::internal("steer list poisoned")),
        };
        // Subscribers see that input is waiting for the next provider call.
        h.publish(
            EventType::Status,
            json!({"turn_id": r.turn_id, "steer_pending": true, "retry": retry_of_waiting,
                   "message": "input steered in; it goes with the turn's next provider call"}),
        );
        let turn_id = r.turn_id.clone();
        drop(r);
        match rx.await {
            Ok(Ok(res)) => Ok(json!({"session_id": p.session_id, "turn_id": turn_id,
                                     "seq": res.first_seq})),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(not_running()),
        }
    }

    /// The answer to a retried `client_request_id`: the turn it admitted (waiting for
    /// it with `wait`), or kind `conflict` when the params differ.
    async fn admitted(
        &self,
        h: &SessionHandle,
        id: &str,
        hash: &str,
        req: crate::session::ClientRequest,
        wait: bool,
    ) -> Result<TurnResult, AgentError> {
        let sid = h.id.to_string();
        let conflict = |turn_id: Option<&str>| {
            AgentError::new(
                ErrorKind::Conflict,
                "this client_request_id was already used with other params",
            )
            .with_details(json!({"session_id": sid, "client_request_id": id, "turn_id": turn_id}))
        };
        let Some(turn_id) = req.turn_id.clone().filter(|_| req.hash == hash) else {
            return Err(conflict(req.turn_id.as_deref()));
        };
        let running = self
            .running
            .get(&sid)
            .map(|r| r.value().clone())
            .filter(|r| r.turn_id == turn_id);
        if let Some(r) = running {
            return follow(h, &r, req.seq, wait).await;
        }
        let tid = turn_id.clone();
        let found = h.query(move |st| ended_result(st, &tid, req.seq)).await?;
        let queued = h
            .query({
                let tid = turn_id.clone();
                move |st| st.queued.iter().any(|(q, _)| *q == tid)
            })
            .await?;
        Ok(found.unwrap_or(TurnResult {
            turn_id,
            status: if queued { "queued" } else { "running" }.into(),
            output_text: String::new(),
            first_seq: req.seq,
            last_seq: req.seq,
            error: None,
            stop_reason: None,
            reason: None,
        }))
    }

    /// `agentd/compact`: deterministic, or `strategy: model` with fallback.
    pub async fn compact(
        self: &Arc<Self>,
        h: &SessionHandle,
        opts: CompactOptions,
        dry_run: bool,
    ) -> Result<CompactOutcome, AgentError> {
        if !dry_run {
            compact_hooks::before_manual(self, h, &opts).await?;
        }
        compact::compact_with_strategy(&self.registry, h, opts, dry_run).await
    }
}

type Started = oneshot::Sender<Result<(u64, u64), AgentError>>;
type EngineResult = Result<(TurnResult, Vec<String>), AgentError>;

/// Claims the session's turn slot and runs `engine` in a task of its own (see the module
/// doc); answers at once (`wait:false`) or with the final result.
async fn launch<E, F>(
    turns: &Arc<TurnManager>,
    h: SessionHandle,
    wait: bool,
    client_request: Option<(String, String)>,
    turn_id: Option<String>,
    engine: E,
) -> Result<TurnResult, AgentError>
where
    E: FnOnce(Arc<TurnManager>, SessionHandle, Arc<RunningTurn>, Started) -> F,
    F: Future<Output = EngineResult> + Send + 'static,
{
    let sid = h.id.to_string();
    // A queued turn starting comes with its id; a new turn gets one.
    let queued_start = turn_id.is_some();
    let turn_id =
        turn_id.unwrap_or_else(|| format!("turn_{}", agentd_proto::event::new_event_id()));
    let (running, done_tx) = RunningTurn::new(turn_id.clone(), client_request.clone());
    let mut waited = false;
    loop {
        // One turn per session: the map entry is the lock.
        use dashmap::mapref::entry::Entry;
        match turns.running.entry(sid.clone()) {
            Entry::Occupied(e) => {
                // A retry of the request that admitted the running turn, arriving
                // before its `turn_started` was durable: that turn is the answer.
                if let (Some((id, hash)), Some((rid, rhash))) =
                    (&client_request, &e.get().client_request)
                {
                    if id == rid {
                        if hash != rhash {
                            return Err(AgentError::new(
                                ErrorKind::Conflict,
                                "this client_request_id was already used with other params",
                            )
                            .with_details(json!({"session_id": sid, "client_request_id": id,
                                                 "turn_id": e.get().turn_id})));
                        }
                        let r = e.get().clone();
                        drop(e);
                        return follow(&h, &r, 0, wait).await;
                    }
                }
                let r = e.get().clone();
                drop(e);
                // A turn whose `turn_ended` is durable is leaving: wait for the slot.
                if !waited && admission::wait_if_ending(&h, &r).await {
                    waited = true;
                    continue;
                }
                return Err(AgentError::new(
                    ErrorKind::Busy,
                    "a turn is already running in this session",
                )
                .with_details(json!({"session_id": sid, "turn_id": r.turn_id}))
                .with_next_actions(&[&format!("agentctl interrupt {sid}")]));
            }
            Entry::Vacant(v) => {
                v.insert(running.clone());
                break;
            }
        }
    }
    // A new turn never runs ahead of prompts queued before it: they start now.
    if !queued_start {
        if let Some((first, n)) = admission::queued_ahead(&h).await {
            turns
                .running
                .remove_if(&sid, |_, r| Arc::ptr_eq(r, &running));
            turns.start_next_queued(&h);
            return Err(admission::behind_queue(&sid, &first, n));
        }
    }
    // Checked after the entry is in the map: `interrupt_all` sets the flag before it
    // reads the map, so either it sees this turn (and interrupts it) or this check sees
    // the flag. Checked before, a turn could slip in after shutdown's snapshot and be cut
    // off without its `turn_ended`.
    if turns.shutting_down.load(Ordering::SeqCst) {
        turns
            .running
            .remove_if(&sid, |_, r| Arc::ptr_eq(r, &running));
        return Err(AgentError::new(
            ErrorKind::DaemonUnavailable,
            "the daemon is shutting down; start the turn again once it is back",
        )
        .with_details(json!({"session_id": sid})));
    }
    turns.turns_running.fetch_add(1, Ordering::Relaxed);
    turns.mark_running(&sid, true);
    let (started_tx, started_rx) = oneshot::channel();
    let fut = engine(turns.clone(), h.clone(), running.clone(), started_tx);
    let task = tokio::spawn(run_task(turns.clone(), h, fut, running.clone(), done_tx));
    if !wait {
        return match started_rx.await {
            Ok(Ok((first, last))) => Ok(TurnResult {
                turn_id,
                status: "running".into(),
                output_text: String::new(),
                first_seq: first,
                last_seq: last,
                error: None,
                stop_reason: None,
                reason: None,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(AgentError::internal("turn task ended before it started")),
        };
    }
    let _ = task.await;
    let finished = running.done.borrow().clone();
    match finished {
        Some(f) => Ok(f.result),
        None => Err(AgentError::internal("turn task ended without a result")),
    }
}

/// The turn task: runs the engine, then releases the session whatever happened — a
/// panic in the engine included. A panic must not leave the session `busy` forever (the
/// running entry, `running_turn` and the `turns_running` gauge are released below), nor
/// leave a started turn open in the Log: [`record_panic`] ends it `failed`.
async fn run_task(
    turns: Arc<TurnManager>,
    h: SessionHandle,
    engine: impl Future<Output = EngineResult>,
    running: Arc<RunningTurn>,
    done: watch::Sender<Option<Finished>>,
) {
    let sid = h.id.to_string();
    let outcome = match AssertUnwindSafe(engine).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(payload) => {
            let message = panic_message(payload.as_ref());
            tracing::error!(session = %sid, turn = %running.turn_id, %message, "turn engine panicked");
            record_panic(&h, &running.turn_id, &message).await
        }
    };
    if h.set_running_turn(None).await.is_err() {
        turns.registry.set_running(&sid, false);
    }
    turns.turns_running.fetch_sub(1, Ordering::Relaxed);
    turns
        .running
        .remove_if(&sid, |_, r| Arc::ptr_eq(r, &running));
    running.released.send_replace(true);
    for s in running.take_steers() {
        s.reply.send(Err(AgentError::new(
            ErrorKind::NotRunning,
            "the turn ended before its next provider call; send the input as a new turn",
        )
        .with_details(json!({"session_id": sid, "turn_id": running.turn_id}))));
    }
    // Queued turns run next; the marker stays while any wait, so a crash now still
    // finds them at start.
    if !turns.unmark_if_idle(&h).await {
        turns.start_next_queued(&h);
    }
    // An open goal starts its next turn (docs/goals.md).
    turns.goal_after_turn(&h);
    let finished = match outcome {
        Ok((result, reconciled)) => Finished { result, reconciled },
        Err(e) => {
            tracing::error!(session = %sid, error = %e, "turn failed before it could end");
            Finished {
                result: TurnResult {
                    turn_id: running.turn_id.clone(),
                    status: "failed".into(),
                    output_text: String::new(),
                    first_seq: 0,
                    last_seq: 0,
                    error: Some(e),
                    stop_reason: None,
                    reason: None,
                },
                reconciled: Vec::new(),
            }
        }
    };
    let _ = done.send(Some(finished));
}

/// The answer for a running turn `r`: at once (`wait:false`), or its final result.
async fn follow(
    h: &SessionHandle,
    r: &Arc<RunningTurn>,
    first_seq: u64,
    wait: bool,
) -> Result<TurnResult, AgentError> {
    if !wait {
        let (first, last) = h
            .query({
                let tid = r.turn_id.clone();
                move |st| {
                    (
                        engine::turn_started_seq(st, &tid),
                        st.last_seq().unwrap_or(0),
                    )
                }
            })
            .await?;
        return Ok(TurnResult {
            turn_id: r.turn_id.clone(),
            status: "running".into(),
            output_text: String::new(),
            first_seq: first.unwrap_or(first_seq),
            last_seq: last,
            error: None,
            stop_reason: None,
            reason: None,
        });
    }
    let mut rx = r.done.clone();
    let finished = match rx.wait_for(Option::is_some).await {
        Ok(v) => v.clone(),
        Err(_) => None,
    };
    finished
        .map(|f| f.result)
        .ok_or_else(|| AgentError::internal("turn task ended without a result"))
}

/// The result of the ended turn `turn_id` whose record starts at `from`, read off the
/// Log (from that seq on, never the whole Log); `None` while it has not ended.
fn ended_result(st: &crate::session::SessionState, turn_id: &str, from: u64) -> Option<TurnResult> {
    let mut output_text = String::new();
    let mut first_seq = from;
    for e in st.events_after(from.checked_sub(1)) {
        match e.event_type() {
            EventType::TurnStarted if e.str_field("turn_id").as_deref() == Some(turn_id) => {
                first_seq = e.seq;
            }
            EventType::AssistantMessage => {
                let ev = e.event();
                if ev.data.pointer("/metadata/partial") != Some(&json!(true)) {
                    if let Some(t) = ev.str_field("text").filter(|t| !t.is_empty()) {
                        output_text = t.to_string();
                    }
                }
            }
            EventType::TurnEnded if e.str_field("turn_id").as_deref() == Some(turn_id) => {
                let ev = e.event();
                let d = &ev.data;
                let text = |k: &str| d.get(k).and_then(|v| v.as_str()).map(str::to_string);
                return Some(TurnResult {
                    turn_id: turn_id.to_string(),
                    status: text("status").unwrap_or_default(),
                    output_text,
                    first_seq,
                    last_seq: e.seq,
                    error: d
                        .get("error")
                        .and_then(|v| serde_json::from_value(v.clone()).ok()),
                    stop_reason: text("stop_reason"),
                    reason: text("reason"),
                });
            }
            _ => {}
        }
    }
    None
}

/// SHA-256 over the params that define a turn request, in a fixed order: a retry with
/// the same params gives the same hash whatever the order of its JSON keys.
fn request_hash(p: &TurnParams) -> String {
    let canonical = json!([
        p.session_id,
        p.input,
        p.model,
        p.provider,
        p.max_iterations,
        p.permission_mode,
        p.sandbox.as_ref().map(canonical_json),
        p.mcp_servers
            .as_ref()
            .map(|v| v.iter().map(canonical_json).collect::<Vec<_>>()),
        p.queue.unwrap_or(false),
        p.reasoning_effort,
        p.images,
    ]);
    crate::text::sha256_hex(canonical.to_string().as_bytes())
}

/// `v` with every object's keys sorted.
fn canonical_json(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), canonical_json(&m[k]));
            }
            serde_json::Value::Object(out)
        }
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.iter().map(canonical_json).collect())
        }
        other => other.clone(),
    }
}

/// The params of a recorded request (`turn_started.params`, `turn_queued.params`);
/// `input` is a placeholder the caller replaces where it matters (a resume sends the
/// Log, not an input).
fn params_from_record(sid: &str, params: &serde_json::Value) -> TurnParams {
    let text = |k: &str| params.get(k).and_then(|v| v.as_str()).map(str::to_string);
    TurnParams {
        session_id: sid.to_string(),
        input: "(resumed)".into(),
        model: text("model"),
        provider: text("provider"),
        max_iterations: params
            .get("max_iterations")
            .and_then(|v| v.as_u64())
            .map(|n| n.min(u64::from(u32::MAX)) as u32),
        permission_mode: text("permission_mode"),
        wait: None,
        sandbox: params.get("sandbox").cloned(),
        mcp_servers: None,
        client_request_id: None,
        queue: None,
        reasoning_effort: text("reasoning_effort"),
        // Never kept in the params a resume reads (no bytes in the Log); a queued turn's
        // images are stored when it is queued and their references passed apart
        // (`TurnSpec::stored_images`).
        images: Vec::new(),
    }
}

/// What a resumed turn runs with again: the request's own choices (the session's
/// defaults are read again at the resume). Client-given MCP servers are not kept.
fn resume_params(p: &TurnParams) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Option<serde_json::Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    put("model", p.model.clone().map(Into::into));
    put("provider", p.provider.clone().map(Into::into));
    put("max_iterations", p.max_iterations.map(Into::into));
    put("permission_mode", p.permission_mode.clone().map(Into::into));
    put("sandbox", p.sandbox.clone());
    put(
        "reasoning_effort",
        p.reasoning_effort.clone().map(Into::into),
    );
    serde_json::Value::Object(m)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    format!(
        "the turn engine failed unexpectedly: {}",
        crate::text::clip_chars(&what, 500)
    )
}

/// After an engine panic: if the turn's `turn_started` is in the Log without its
/// `turn_ended`, closes the calls still pending (`orphan_tool_call`, reason `interrupt`:
/// the turn was cut short, and docs/history-rules.md#reconciliation's reasons have none closer) and records
/// `turn_ended{status:"failed", error{kind:"internal", message}}` in one append.
async fn record_panic(h: &SessionHandle, turn_id: &str, message: &str) -> EngineResult {
    record_failed(h, turn_id, AgentError::internal(message.to_string())).await
}

/// Ends the open turn `turn_id` `failed` with `error`, its pending calls closed, in one
/// append (see [`record_panic`]).
async fn record_failed(h: &SessionHandle, turn_id: &str, error: AgentError) -> EngineResult {
    let (tid, err) = (turn_id.to_string(), error.clone());
    let (tx, rx) = oneshot::channel();
    let res = h
        .record(move |st| {
            let open = st
                .events
                .iter()
                .rev()
                .find(|e| {
                    matches!(
                        e.event_type(),
                        EventType::TurnStarted | EventType::TurnEnded
                    ) && e.str_field("turn_id").as_deref() == Some(tid.as_str())
                })
                .is_some_and(|e| e.event_type() == EventType::TurnStarted);
            if !open {
                return Ok(Vec::new());
            }
            let pending = st.fold.pending_calls();
            let _ = tx.send(pending.iter().map(|p| p.call_id.clone()).collect());
            let mut drafts = reconcile::closures(&pending, ReconcileReason::Interrupt);
            drafts.push(EventDraft::new(
                EventType::TurnEnded,
                json!({"turn_id": tid, "status": "failed",
                    "error": {"kind": err.kind, "message": err.message}}),
            ));
            Ok(drafts)
        })
        .await?;
    let Some(appended) = res else {
        // The turn never started (or already ended): nothing to close.
        return Err(error);
    };
    let reconciled: Vec<String> = rx.await.unwrap_or_default();
    Ok((
        TurnResult {
            turn_id: turn_id.to_string(),
            status: "failed".into(),
            output_text: String::new(),
            first_seq: 0,
            last_seq: appended.last_seq,
            error: Some(error),
            stop_reason: None,
            reason: None,
        },
        reconciled,
    ))
}

impl TurnManager {
    /// `agentd/interrupt`: ends the running turn (see the module doc), or reconciles an idle
    /// session with reason `interrupt_no_turn`.
    pub async fn interrupt(
        &self,
        sid: &str,
        reason: Option<&str>,
    ) -> Result<InterruptResult, AgentError> {
        let h = self.registry.get(sid).await?;
        let running = self.running.get(sid).map(|r| r.value().clone());
        if let Some(r) = running {
            r.interrupt(reason.unwrap_or(ReconcileReason::Interrupt.as_str()));
            return match r.wait_done(INTERRUPT_WAIT).await {
                Some(f) => Ok(InterruptResult {
                    interrupted: true,
                    reconciled: f.reconciled,
                }),
                None => Err(AgentError::new(
                    ErrorKind::Timeout,
                    "the turn did not stop within 15 s of the interrupt",
                )
                .with_details(json!({"session_id": sid, "turn_id": r.turn_id}))),
            };
        }
        let v = crate::ops::reconcile(&h, ReconcileReason::InterruptNoTurn, false, true).await?;
        let reconciled = v.recorded.into_iter().map(|r| r.call_id).collect();
        Ok(InterruptResult {
            interrupted: false,
            reconciled,
        })
    }

    /// Ends every running turn as interrupted, durably, before the daemon stops; turns
    /// asked for from now on are refused with `daemon_unavailable`.
    pub async fn interrupt_all(&self, reason: &str) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let running: Vec<Arc<RunningTurn>> =
            self.running.iter().map(|e| e.value().clone()).collect();
        for r in &running {
            r.interrupt(reason);
        }
        for r in &running {
            if r.wait_done(INTERRUPT_WAIT).await.is_none() {
                tracing::warn!(turn = %r.turn_id, "turn did not record its end before shutdown");
            }
        }
    }
}

/// Creates (`on`) or removes the empty marker file `dir/sid`; a marker already gone is
/// no error. Shared by the running-turn and open-goal markers.
pub(crate) fn set_marker(dir: &std::path::Path, sid: &str, on: bool) -> std::io::Result<()> {
    let path = dir.join(sid);
    if on {
        std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, b""))
    } else {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::{self, Home};
    use agentd_proto::Event;
    use std::io::Write;

    /// A registry over a temp home holding one fresh session.
    async fn session() -> (tempfile::TempDir, Arc<TurnManager>, SessionHandle) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(&dir.path().join("home")).unwrap();
        let registry = Registry::open(home, Config::default()).unwrap();
        let sid = agentd_proto::session_id::generate();
        let ev = Event {
            id: agentd_proto::event::new_event_id(),
            session_id: sid.clone(),
            seq: 0,
            ts: agentd_proto::event::now_ts(),
            kind: EventType::SessionStarted.as_str().into(),
            data: json!({"workspace": dir.path(), "log_format": 1}),
        };
        let line = store::event_line(&ev);
        let path = registry.home.log_path(&sid).unwrap();
        store::create_atomic(&path, |f| f.write_all(&line)).unwrap();
        registry.index_log(&sid).unwrap();
        let h = registry.get(&sid).await.unwrap();
        (dir, TurnManager::new(registry), h)
    }

    /// An engine panic after the turn started and a call was recorded: the turn ends
    /// `failed` with kind `internal` in the Log, the call is closed, and the session is
    /// free for the next turn instead of `busy` forever.
    #[tokio::test]
    async fn an_engine_panic_ends_the_turn_and_frees_the_session() {
        let (_dir, turns, h) = session().await;
        let err = launch(
            &turns,
            h.clone(),
            true,
            None,
            None,
            |_, h, running, started| async move {
                let turn_id = running.turn_id.clone();
                let res = h
                .append(
                    vec![
                        EventDraft::new(EventType::TurnStarted, json!({"turn_id": turn_id})),
                        EventDraft::new(EventType::UserMessage, json!({"text": "hi"})),
                        EventDraft::new(
                            EventType::ToolCall,
                            json!({"call_id": "c1", "name": "read_file", "args": {"path": "x"}}),
                        ),
                    ],
                    None,
                )
                .await?;
                let _ = started.send(Ok((res.first_seq, res.last_seq)));
                if turn_id.starts_with("turn_") {
                    panic!("injected engine bug");
                }
                unreachable!()
            },
        )
        .await
        .unwrap();
        assert_eq!(err.status, "failed");
        assert_eq!(err.error.unwrap().kind, ErrorKind::Internal);
        assert!(turns.running.is_empty());
        assert_eq!(turns.running_count(), 0);
        let evs = h
            .query(|st| crate::history::stored::parse_all(&st.events))
            .await
            .unwrap();
        let last = &evs[evs.len() - 1];
        assert_eq!(last.event_type(), EventType::TurnEnded);
        assert_eq!(last.data["status"], "failed");
        assert_eq!(last.data["error"]["kind"], "internal");
        assert!(last.data["error"]["message"]
            .as_str()
            .unwrap()
            .contains("injected engine bug"));
        let closure = &evs[evs.len() - 2];
        assert_eq!(closure.event_type(), EventType::ToolResult);
        assert_eq!(closure.data["call_id"], "c1");
        assert_eq!(closure.data["error"]["kind"], "orphan_tool_call");
        assert_eq!(h.query(|st| st.running_turn.clone()).await.unwrap(), None);

        // The session takes the next turn (a panic before anything was recorded).
        let r = launch(
            &turns,
            h.clone(),
            true,
            None,
            None,
            |_, _, _, _| async move {
                if evs.is_empty() {
                    return Err(AgentError::internal("unreachable"));
                }
                panic!("again")
            },
        )
        .await
        .unwrap();
        assert_eq!(r.status, "failed");
        assert!(turns.running.is_empty());
        let n = h.query(|st| st.events.len()).await.unwrap();
        assert_eq!(n, 6, "nothing recorded for a turn that never started");
    }

    /// Once shutdown has begun interrupting turns, a new turn is refused instead of
    /// starting where the shutdown no longer looks (it would end without `turn_ended`).
    #[tokio::test]
    async fn turns_are_refused_once_shutdown_interrupts() {
        let (_dir, turns, h) = session().await;
        turns.interrupt_all("daemon_shutdown").await;
        let err = launch(
            &turns,
            h.clone(),
            true,
            None,
            None,
            |_, _, _, _| async move { Err(AgentError::internal("the engine must not run")) },
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::DaemonUnavailable);
        assert!(err.message.contains("shutting down"), "{}", err.message);
        assert!(turns.running.is_empty());
        assert_eq!(turns.running_count(), 0);
        assert_eq!(h.query(|st| st.events.len()).await.unwrap(), 1);
    }
}
