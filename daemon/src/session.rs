//! Session actors: one tokio task per loaded session owns its Log writer and its folded
//! in-memory state (docs/log-format.md#durability, docs/protocol.md#methods).
//!
//! Every write to a Log goes through [`SessionHandle::append`] or
//! [`SessionHandle::record`], which queue a command to the actor. The actor drains all
//! queued appends into one batch, stamps seqs, writes them with a single `write` and a
//! single `fdatasync`, and only then acknowledges them: concurrent appenders share one
//! sync (group commit). Actors sync on the process's shared commit threads
//! (`store::WriterThread`), so different sessions sync in parallel.
//!
//! The actor never names its container: what the registry needs to know (a durable
//! batch, a stopped actor, a first load) is reported through the [`SessionObserver`]
//! handed to [`spawn`], and the Log is reached through a [`LogStore`].
//!
//! Architecture invariant: `seq` is stamped only here, and an event is broadcast to
//! subscribers only after it is durable (per the configured durability). The state
//! changes only by appends and the explicit commands of [`SessionHandle`]; queries read
//! `&SessionState`.

use crate::config::Durability;
use crate::history::checkpoint::{Checkpoint, CheckpointState};
use crate::history::fold::Fold;
use crate::history::reconcile::{self, ReconcileReason};
use crate::history::stored::{Line, StoredEvent};
use crate::live::{Live, Streamed};
use crate::store::{self, Home, LogAppender, LogStore};
use agentd_proto::event::{new_event_id, now_ts, validate_draft};
use agentd_proto::rpc::{AppendResult, CorruptLine};
use agentd_proto::{AgentError, ErrorKind, Event, EventDraft, EventType};
use futures::future::BoxFuture;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

mod tail;
pub use tail::Reads;

/// Capacity of a session's broadcast ring. A subscriber that falls this far behind is
/// sent `lagged` and dropped; appends never wait for subscribers.
pub const BROADCAST_CAPACITY: usize = 4096;
/// Most appends folded into one group commit.
const MAX_BATCH_COMMANDS: usize = 1024;

type RecordFn = Box<dyn FnOnce(&SessionState) -> Result<Vec<EventDraft>, AgentError> + Send>;
type QueryFn = Box<dyn FnOnce(&SessionState) + Send>;
type RetireFn = Box<dyn FnOnce(&SessionState) -> bool + Send>;

/// Events loaded between two calls of [`crate::allocator::release_freed`] during a load.
const RELEASE_EVERY: usize = 8192;

/// What a session actor reports upward. The registry implements it; the actor holds it
/// as a trait object, so this module never imports its container.
pub trait SessionObserver: Send + Sync + 'static {
    /// After a change of the running turn (and once after load): the whole state.
    fn changed(&self, state: &SessionState, last: Option<&Event>);
    /// A batch is durable: what it changes in the session's summary. Called on the
    /// commit thread, before any appender of the batch is answered.
    fn appended(&self, sid: &str, delta: &AppendDelta);
    /// The actor of `generation` stopped (evicted, or its load failed).
    fn stopped(&self, sid: &str, generation: u64);
    /// Whether this is the first load of `sid` by this daemon process (recorded).
    fn first_load(&self, sid: &str) -> bool;
    /// On the first load, the session's open turn `turn_id`, cut by a crash: `true`
    /// when the observer takes it over (the turn is resumed, docs/durability.md), so
    /// the actor leaves it open; `false` and the actor closes it as today. Called
    /// before the actor serves any command, so the taker can claim the session's turn
    /// slot before any client reaches it.
    fn open_turn(&self, handle: &SessionHandle, state: &SessionState, turn_id: &str) -> bool;
    /// On the first load, once no turn is open: the session has turns queued
    /// (`turn_queued`, not started nor withdrawn) that the observer starts, so a prompt
    /// queued behind a turn that ended just before a crash runs after the restart.
    fn queued_waiting(&self, handle: &SessionHandle);
    /// A load of `sid` ended: `ok` or failed (after reads of its tail may have been
    /// served, see [`Reads`]).
    fn load_ended(&self, _sid: &str, _ok: bool) {}
    /// Whether a load of `sid` may serve reads of its Log's tail before the whole Log is
    /// folded: not after a load of it failed, until one succeeds, so a load that keeps
    /// failing answers its error instead of tail reads over and over.
    fn early_reads(&self, _sid: &str) -> bool {
        true
    }
    /// The session's current actor, loading it if needed: where a command goes when
    /// the actor it was sent to was evicted meanwhile.
    fn reopen(
        self: Arc<Self>,
        sid: String,
    ) -> BoxFuture<'static, Result<SessionHandle, AgentError>>;
}

/// What one durable batch changes in a session's summary (the lineage index).
#[derive(Debug, Clone, Default)]
pub struct AppendDelta {
    /// Events in the session after the batch.
    pub event_count: u64,
    /// `ts` of the batch's last event.
    pub updated_at: String,
    /// Set when the batch names a title (`session_info`, a first event).
    pub title: Option<String>,
    /// Set when the batch names a workspace (a first event).
    pub workspace: Option<String>,
    /// The batch holds a `branch_summary`.
    pub branch_summary: bool,
    /// Labels of the batch's last `session_info` that carries any (`archived`).
    pub labels: Option<Vec<String>>,
}

impl AppendDelta {
    fn of(events: &[Event], event_count: u64) -> AppendDelta {
        let mut d = AppendDelta {
            event_count,
            updated_at: events.last().map(|e| e.ts.clone()).unwrap_or_default(),
            ..AppendDelta::default()
        };
        for ev in events {
            match ev.event_type() {
                EventType::SessionStarted | EventType::SessionFork => {
                    if let Some(ws) = ev.str_field("workspace") {
                        d.workspace = Some(ws.to_string());
                    }
                    if let Some(t) = ev.str_field("title") {
                        d.title = Some(t.to_string());
                    }
                }
                EventType::SessionInfo => {
                    if let Some(t) = ev.str_field("title") {
                        d.title = Some(t.to_string());
                    }
                    if let Some(l) = crate::history::fold::session_labels(ev) {
                        d.labels = Some(l);
                    }
                }
                EventType::BranchSummary => d.branch_summary = true,
                _ => {}
            }
        }
        d
    }
}

/// What an actor needs from the daemon, handed over at [`spawn`].
#[derive(Clone)]
pub struct ActorEnv {
    pub store: Arc<dyn LogStore>,
    /// For paths beside the Log (resources, quarantine).
    pub home: Home,
    pub durability: Durability,
    pub batch_window: Duration,
    pub idle_evict: Duration,
    pub observer: Arc<dyn SessionObserver>,
}

enum Cmd {
    Append {
        drafts: Vec<EventDraft>,
        expect_seq: Option<u64>,
        reply: Reply,
    },
    /// Builds drafts from the current state and appends them with no other append in
    /// between (reconcile, compaction, turn steps).
    Record {
        build: RecordFn,
        exec: Exec,
        reply: oneshot::Sender<Result<Option<AppendResult>, AgentError>>,
    },
    /// A read of the state; with [`Reads`], one the Log's tail may answer while the
    /// session loads.
    Query(QueryFn, Exec, Option<Reads>),
    /// Runs a closure that moves the session's files away (delete); when it returns
    /// true the actor drops its Log writer and stops taking commands, so nothing can be
    /// written to the moved Log and the next call finds no session.
    Retire(RetireFn),
    /// Marks the turn running in this daemon (`None`: no turn).
    SetRunningTurn {
        turn_id: Option<String>,
        reply: oneshot::Sender<()>,
    },
}

/// Where the actor runs a closure over its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exec {
    /// On the actor's task: for reads that take microseconds.
    Inline,
    /// On the blocking pool, the state lent to it for the call: for work that grows
    /// with the session (rendering, planning, hashing files). The actor takes no other
    /// command meanwhile, exactly as if it ran inline, but the runtime's workers stay
    /// free for every other session and connection.
    Blocking,
}

/// A cheap, cloneable reference to a loaded session.
#[derive(Clone)]
pub struct SessionHandle {
    pub id: Arc<str>,
    /// Distinguishes a reloaded actor from an evicted one with the same id.
    pub generation: u64,
    tx: mpsc::Sender<Cmd>,
    events: Live,
    /// To find the session's new actor when this one was evicted meanwhile.
    observer: Weak<dyn SessionObserver>,
    /// Why the actor could not load its Log, for callers whose command it dropped.
    load_error: Arc<std::sync::OnceLock<AgentError>>,
    /// Becomes `true` once the actor has stopped and reported it (the registry no longer
    /// maps this generation); its sender is dropped if the actor's task dies.
    stopped: watch::Receiver<bool>,
}

impl SessionHandle {
    fn closed() -> AgentError {
        AgentError::internal("the session's actor stopped before answering")
    }

    /// Queues `cmd`. An evicted actor refuses new commands (and hands them back
    /// unexecuted), so the command goes to the session's current actor instead: a
    /// client never sees eviction.
    async fn send(&self, cmd: Cmd) -> Result<(), AgentError> {
        let mut cmd = match self.tx.send(cmd).await {
            Ok(()) => return Ok(()),
            Err(mpsc::error::SendError(cmd)) => cmd,
        };
        let observer = self.observer.upgrade().ok_or_else(Self::closed)?;
        for _ in 0..3 {
            let h = observer.clone().reopen(self.id.to_string()).await?;
            match h.tx.send(cmd).await {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(back)) => cmd = back,
            }
        }
        Err(Self::closed())
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    pub async fn append(
        &self,
        drafts: Vec<EventDraft>,
        expect_seq: Option<u64>,
    ) -> Result<AppendResult, AgentError> {
        let (reply, rx) = oneshot::channel();
        self.send(Cmd::Append {
            drafts,
            expect_seq,
            reply: Reply::Append(reply),
        })
        .await?;
        rx.await.map_err(|_| Self::closed())?
    }

    /// Queues an append whose answer is `done`, called on a commit thread
    /// right after the batch is durable (or failed): no task waits for it. Never waits:
    /// when the actor's queue is full or the actor was evicted, the drafts and `done`
    /// come back for [`append_then`](Self::append_then).
    pub fn try_append_then(
        &self,
        drafts: Vec<EventDraft>,
        expect_seq: Option<u64>,
        done: AppendDone,
    ) -> Result<(), (Vec<EventDraft>, AppendDone)> {
        let cmd = Cmd::Append {
            drafts,
            expect_seq,
            reply: Reply::Then(done),
        };
        match self.tx.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(cmd) | mpsc::error::TrySendError::Closed(cmd)) => {
                match cmd {
                    Cmd::Append {
                        drafts,
                        reply: Reply::Then(done),
                        ..
                    } => Err((drafts, done)),
                    _ => unreachable!("the command sent is the command returned"),
                }
            }
        }
    }

    /// [`try_append_then`](Self::try_append_then) that waits for room in the queue and
    /// follows the session to its current actor; `done` is always called.
    pub async fn append_then(
        &self,
        drafts: Vec<EventDraft>,
        expect_seq: Option<u64>,
        done: AppendDone,
    ) {
        // `send` hands the command back only when no actor takes it; the reply inside
        // is then dropped with it, so a failure is answered from a shared slot.
        let slot = Arc::new(std::sync::Mutex::new(Some(done)));
        let inner = slot.clone();
        let reply = Reply::Then(Box::new(move |res| {
            let done = inner.lock().ok().and_then(|mut d| d.take());
            if let Some(done) = done {
                done(res);
            }
        }));
        let sent = self
            .send(Cmd::Append {
                drafts,
                expect_seq,
                reply,
            })
            .await;
        if let Err(e) = sent {
            let done = slot.lock().ok().and_then(|mut d| d.take());
            if let Some(done) = done {
                done(Err(e));
            }
        }
    }

    /// Appends what `build` returns from the state as of now; `Ok(None)` if it returned
    /// nothing.
    pub async fn record(
        &self,
        build: impl FnOnce(&SessionState) -> Result<Vec<EventDraft>, AgentError> + Send + 'static,
    ) -> Result<Option<AppendResult>, AgentError> {
        self.record_on(Exec::Inline, Box::new(build)).await
    }

    /// [`record`](Self::record) for a `build` whose cost grows with the session
    /// (compaction planning): it runs on the blocking pool.
    pub async fn record_blocking(
        &self,
        build: impl FnOnce(&SessionState) -> Result<Vec<EventDraft>, AgentError> + Send + 'static,
    ) -> Result<Option<AppendResult>, AgentError> {
        self.record_on(Exec::Blocking, Box::new(build)).await
    }

    async fn record_on(
        &self,
        exec: Exec,
        build: RecordFn,
    ) -> Result<Option<AppendResult>, AgentError> {
        let (reply, rx) = oneshot::channel();
        self.send(Cmd::Record { build, exec, reply }).await?;
        rx.await.map_err(|_| Self::closed())?
    }

    /// Runs `f` on the actor's state, read-only, after every command queued before it;
    /// returns its result. `f` runs on the actor's task: keep it to cheap reads.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SessionState) -> T + Send + 'static,
    ) -> Result<T, AgentError> {
        self.query_on(Exec::Inline, None, f).await
    }

    /// [`query`](Self::query) for a read that needs only what `reads` names: while the
    /// session loads, it is answered from the Log's tail when the tail holds that (and
    /// no command before it waits for the load). `f` must read nothing of the state
    /// but `events_after` (from `reads`' seq), `events`' end (for [`Reads::Last`]),
    /// `last_seq` and `subscribe`.
    pub async fn read<T: Send + 'static>(
        &self,
        reads: Reads,
        f: impl FnOnce(&SessionState) -> T + Send + 'static,
    ) -> Result<T, AgentError> {
        self.query_on(Exec::Inline, Some(reads), f).await
    }

    /// [`read`](Self::read) on the blocking pool (a page of events).
    pub async fn read_blocking<T: Send + 'static>(
        &self,
        reads: Reads,
        f: impl FnOnce(&SessionState) -> T + Send + 'static,
    ) -> Result<T, AgentError> {
        self.query_on(Exec::Blocking, Some(reads), f).await
    }

    /// Why this actor could not load its Log, once it has stopped for that reason.
    pub fn load_error(&self) -> Option<&AgentError> {
        self.load_error.get()
    }

    /// [`query`](Self::query) for work whose cost grows with the session or touches
    /// files (rendering a context, planning a fork or compaction, hashing a checkpoint's
    /// files): `f` runs on the blocking pool with the state lent to it.
    pub async fn query_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SessionState) -> T + Send + 'static,
    ) -> Result<T, AgentError> {
        self.query_on(Exec::Blocking, None, f).await
    }

    async fn query_on<T: Send + 'static>(
        &self,
        exec: Exec,
        reads: Option<Reads>,
        f: impl FnOnce(&SessionState) -> T + Send + 'static,
    ) -> Result<T, AgentError> {
        let (reply, rx) = oneshot::channel();
        let cmd = Cmd::Query(
            Box::new(move |st| {
                let _ = reply.send(f(st));
            }),
            exec,
            reads,
        );
        self.send(cmd).await?;
        rx.await
            .map_err(|_| self.load_error.get().cloned().unwrap_or_else(Self::closed))
    }

    /// Resolves once this actor has stopped and its container was told (at once if it
    /// already has): the moment a new actor may open the Log. A notification, not a poll.
    pub async fn stopped(&self) {
        let mut rx = self.stopped.clone();
        // An error means the actor's task ended without reporting: stopped as well.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Runs `work` in the actor with no command in between. If it returns `Ok`, the
    /// actor retires: it drops its Log writer (commands already queued behind this one
    /// fail with `log_write_failed`), stops taking new ones and leaves the registry.
    pub async fn retire<T: Send + 'static>(
        &self,
        work: impl FnOnce(&SessionState) -> Result<T, AgentError> + Send + 'static,
    ) -> Result<T, AgentError> {
        let (reply, rx) = oneshot::channel();
        let cmd = Cmd::Retire(Box::new(move |st| {
            let res = work(st);
            let ok = res.is_ok();
            let _ = reply.send(res);
            ok
        }));
        self.send(cmd).await?;
        rx.await
            .map_err(|_| self.load_error.get().cloned().unwrap_or_else(Self::closed))?
    }

    /// Marks `turn_id` as the turn running in this daemon (`None` when it ended); the
    /// session then reports `running` and is not evicted.
    pub async fn set_running_turn(&self, turn_id: Option<String>) -> Result<(), AgentError> {
        let (reply, rx) = oneshot::channel();
        self.send(Cmd::SetRunningTurn { turn_id, reply }).await?;
        rx.await
            .map_err(|_| self.load_error.get().cloned().unwrap_or_else(Self::closed))
    }

    /// Broadcasts an ephemeral event (never written).
    pub fn publish(&self, kind: EventType, data: Value) {
        debug_assert!(kind.is_ephemeral());
        let ev =
            json!({"session_id": &*self.id, "ts": now_ts(), "type": kind.as_str(), "data": &data});
        let text = data.get("text").and_then(Value::as_str);
        self.events.ephemeral(kind, text, Arc::from(ev.to_string()));
    }

    pub fn subscriber_count(&self) -> usize {
        self.events.receiver_count()
    }
}

/// The state a session actor owns. Read by queries, extended per append.
pub struct SessionState {
    pub id: String,
    pub log_path: PathBuf,
    /// Every event of the Log as its line (see [`StoredEvent`]); `data` is parsed
    /// where a reader needs it.
    pub events: Vec<StoredEvent>,
    /// Folded state extended per event: counts, pending calls, open turn, replay items
    /// since the latest compaction.
    pub fold: Fold,
    /// The deterministic checkpoint reducer, extended per event (docs/history-rules.md#checkpoint).
    pub checkpoint: CheckpointState,
    pub corrupt_lines: Vec<CorruptLine>,
    pub seq_anomalies: Vec<Value>,
    /// `Some(turn_id)` while a turn runs in this daemon.
    pub running_turn: Option<String>,
    pub next_seq: u64,
    events_tx: Live,
    /// A torn tail cut at load, to be recorded as `log_repaired`.
    pending_repair: Vec<(u64, PathBuf)>,
    /// The rendered replay prefix per dialect (`agentd/context`); only the actor's
    /// queries touch it, one at a time.
    pub context: std::sync::Mutex<crate::context::ContextCache>,
    /// Every `client_request_id` the Log records, with what it admitted (see
    /// [`ClientRequest`]): an idempotent retry is answered from here, never by reading
    /// the Log again. Rebuilt by the load, extended per append.
    pub client_requests: std::collections::HashMap<String, ClientRequest>,
    /// Turns admitted with `queue: true` that have not started nor been withdrawn:
    /// `(turn_id, seq of its turn_queued)`, in admission order. Rebuilt by the load.
    pub queued: Vec<(String, u64)>,
    /// The index in `events` of the latest `goal_set`, so a model step's question "is a
    /// goal open?" starts there instead of scanning the Log (docs/goals.md). Extended per
    /// append, rebuilt by the load.
    pub last_goal_set: Option<usize>,
}

/// What one `client_request_id` admitted: the event that records it carries
/// `client_request_id` and `request_hash` in its data (`turn_started`, `turn_queued`, a
/// steering `user_message`, or the first event of an `agentd/append`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRequest {
    /// SHA-256 of the request's params as the daemon canonicalised them.
    pub hash: String,
    /// Seq of the event that records the key.
    pub seq: u64,
    /// The turn it admitted, for a turn or a steer.
    pub turn_id: Option<String>,
    /// Events of the append it made (`data.request_events`), 1 for the others.
    pub events: u64,
}

impl ClientRequest {
    /// The key and what it admitted, if `ev` records one.
    pub fn of(ev: &Event) -> Option<(String, ClientRequest)> {
        let id = ev.str_field("client_request_id")?;
        let hash = ev.str_field("request_hash")?;
        Some((
            id.to_string(),
            ClientRequest {
                hash: hash.to_string(),
                seq: ev.seq,
                turn_id: ev.str_field("turn_id").map(str::to_string),
                events: ev
                    .data
                    .get("request_events")
                    .and_then(Value::as_u64)
                    .unwrap_or(1),
            },
        ))
    }
}

impl SessionState {
    /// What stands in the actor while its state is lent to the blocking pool: never
    /// read (the actor serves no command until the state is back).
    fn placeholder(of: &SessionState) -> SessionState {
        let mut st = SessionState::empty(&of.id, PathBuf::new(), of.events_tx.clone());
        st.next_seq = of.next_seq;
        st
    }

    /// The state of a session with no events yet.
    fn empty(id: &str, log_path: PathBuf, events_tx: Live) -> SessionState {
        SessionState {
            id: id.to_string(),
            log_path,
            events: Vec::new(),
            fold: Fold::new(),
            checkpoint: CheckpointState::new(),
            corrupt_lines: Vec::new(),
            seq_anomalies: Vec::new(),
            running_turn: None,
            next_seq: 0,
            events_tx,
            pending_repair: Vec::new(),
            context: Default::default(),
            client_requests: Default::default(),
            queued: Vec::new(),
            last_goal_set: None,
        }
    }

    fn push(&mut self, ev: Event, stored: StoredEvent) {
        if let Some((id, req)) = ClientRequest::of(&ev) {
            // The first record of a key wins: a queued turn's `turn_started` repeats it.
            self.client_requests.entry(id).or_insert(req);
        }
        match ev.event_type() {
            EventType::TurnQueued => {
                if let Some(t) = ev.str_field("turn_id") {
                    self.queued.push((t.to_string(), ev.seq));
                }
            }
            EventType::TurnStarted | EventType::TurnDequeued if !self.queued.is_empty() => {
                if let Some(t) = ev.str_field("turn_id") {
                    self.queued.retain(|(q, _)| q != t);
                }
            }
            _ => {}
        }
        self.fold.push_stored(&ev, stored.line_ref());
        self.checkpoint.apply(&ev);
        if matches!(
            ev.event_type(),
            EventType::SessionStarted | EventType::SessionFork
        ) {
            if let Some(ws) = ev.str_field("workspace") {
                self.checkpoint.set_workspace(ws);
            }
        }
        if ev.event_type() == EventType::GoalSet {
            self.last_goal_set = Some(self.events.len());
        }
        self.next_seq = self.next_seq.max(ev.seq.saturating_add(1));
        self.events.push(stored);
    }

    /// The workspace from `session_started` / `session_fork` (empty if neither says).
    pub fn workspace(&self) -> &str {
        self.fold.workspace().unwrap_or_default()
    }

    /// The title from the session's first event or its latest `session_info`.
    pub fn title(&self) -> Option<&str> {
        self.fold.title()
    }

    pub fn last_seq(&self) -> Option<u64> {
        self.next_seq.checked_sub(1)
    }

    /// Calls without a result yet, sorted by call_id (docs/history-rules.md#reconciliation).
    pub fn pending_calls_json(&self) -> Vec<Value> {
        self.fold
            .pending_calls()
            .into_iter()
            .map(|p| json!({"call_id": p.call_id, "name": p.name, "seq": p.seq}))
            .collect()
    }

    /// `range.to_seq` of the latest `history_compaction`.
    pub fn checkpoint_to_seq(&self) -> Option<u64> {
        self.fold.checkpoint_to_seq()
    }

    /// `sessions/<sid>/resources/`, beside the Log.
    pub fn resources_dir(&self) -> PathBuf {
        self.log_path.with_extension("").join("resources")
    }

    /// The checkpoint as of now, with fact validity from the files' current hashes.
    pub fn checkpoint_now(&self) -> Checkpoint {
        let ws = PathBuf::from(self.workspace());
        let res = self.resources_dir();
        self.checkpoint
            .snapshot(&|uri: &str| current_hash(&ws, &res, uri))
    }

    pub fn status(&self) -> &'static str {
        if self.running_turn.is_some() {
            "running"
        } else {
            "idle"
        }
    }

    /// Events with `seq > after` (the Log is in seq order except for reported anomalies).
    pub fn events_after(&self, after: Option<u64>) -> &[StoredEvent] {
        match after {
            None => &self.events,
            Some(a) => {
                let idx = self.events.partition_point(|e| e.seq <= a);
                &self.events[idx..]
            }
        }
    }

    /// Subscribes to live events and returns the last durable seq at that instant:
    /// events up to it are the backlog (read in pages), everything after arrives live,
    /// so a subscriber sees every event exactly once. Also what the running provider
    /// step streamed before this instant (its catch-up, see [`crate::live`]).
    pub fn subscribe(&self) -> (Option<u64>, Streamed, broadcast::Receiver<Arc<str>>) {
        let (tail, rx) = self.events_tx.subscribe();
        (self.last_seq(), tail, rx)
    }

    /// Up to `limit` events with `after < seq <= upto`.
    /// A subscriber's backlog page: events after `after` up to `upto`, already
    /// serialized, at most `limit` of them and at most about `max_bytes` (at least one).
    /// The Log lines are copied as they are, and a page waiting on a subscriber that
    /// does not read is bounded by bytes, not only count.
    pub fn backlog_page(
        &self,
        after: Option<u64>,
        upto: u64,
        limit: usize,
        max_bytes: usize,
    ) -> (Vec<Box<serde_json::value::RawValue>>, Option<u64>) {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut last = None;
        for e in self
            .events_after(after)
            .iter()
            .take_while(|e| e.seq <= upto)
        {
            if out.len() >= limit || (bytes >= max_bytes && !out.is_empty()) {
                break;
            }
            let Ok(raw) = serde_json::value::RawValue::from_string(e.line().to_string()) else {
                continue;
            };
            bytes += raw.get().len();
            last = Some(e.seq);
            out.push(raw);
        }
        (out, last)
    }
}

struct Pending {
    first: usize,
    count: usize,
    reply: Reply,
}

/// A batch handed to a commit thread, applied to the state once its outcome is in.
struct InFlight {
    staged: Vec<Event>,
    /// The staged events as the state keeps them (their lines in the batch's chunk).
    stored: Vec<StoredEvent>,
    done: store::WriteOutcome,
}

/// The answer of one append: called once, on a commit thread, after its
/// batch is durable or failed.
pub type AppendDone = Box<dyn FnOnce(Result<AppendResult, AgentError>) + Send>;

enum Reply {
    Append(oneshot::Sender<Result<AppendResult, AgentError>>),
    Record(oneshot::Sender<Result<Option<AppendResult>, AgentError>>),
    /// Answered in place (the transport writes the response from here).
    Then(AppendDone),
}

impl Reply {
    fn send(self, res: Result<AppendResult, AgentError>) {
        match self {
            Reply::Append(tx) => {
                let _ = tx.send(res);
            }
            Reply::Record(tx) => {
                let _ = tx.send(res.map(Some));
            }
            Reply::Then(done) => done(res),
        }
    }
}

/// Starts the actor for `sid`; it loads the Log before serving any command but the
/// reads its Log's tail answers meanwhile (see [`Reads`]).
pub fn spawn(env: ActorEnv, sid: &str, generation: u64) -> SessionHandle {
    let (tx, rx) = mpsc::channel(MAX_BATCH_COMMANDS);
    let events = Live::new(BROADCAST_CAPACITY);
    let (stopped_tx, stopped) = watch::channel(false);
    let handle = SessionHandle {
        id: Arc::from(sid),
        generation,
        tx,
        events: events.clone(),
        observer: Arc::downgrade(&env.observer),
        load_error: Arc::default(),
        stopped,
    };
    let actor_handle = handle.clone();
    tokio::spawn(async move {
        let sid = actor_handle.id.to_string();
        let mut rx = rx;
        let (tail_tx, tail_rx) = oneshot::channel();
        let tail_tx = env.observer.early_reads(&sid).then_some(tail_tx);
        let load = {
            let (env, sid) = (env.clone(), sid.clone());
            // Reading, parsing and folding a big Log is CPU work: keep it off the
            // runtime's worker threads.
            tokio::task::spawn_blocking(move || load_blocking(&env, &sid, events, tail_tx))
        };
        let (loaded, first) = tail::serve_while_loading(&mut rx, tail_rx, load).await;
        env.observer.load_ended(&sid, loaded.is_ok());
        match loaded {
            Ok((state, writer)) => {
                let mut actor = Actor {
                    env: env.clone(),
                    state,
                    writer: Some(store::WriterThread::spawn(writer, &sid)),
                    acked_bytes: None,
                    writer_error: None,
                    in_flight: None,
                    rx,
                    handle: actor_handle,
                };
                actor.after_load().await;
                actor.run(first).await;
                // `run` reported the stop to the observer: a new actor may open the Log.
                let _ = stopped_tx.send(true);
            }
            Err(err) => {
                let _ = actor_handle.load_error.set(err.clone());
                env.observer.stopped(&sid, generation);
                let _ = stopped_tx.send(true);
                fail_all(rx, first, err).await;
            }
        }
    });
    handle
}

async fn fail_all(mut rx: mpsc::Receiver<Cmd>, first: Option<Cmd>, err: AgentError) {
    rx.close();
    let mut next = first;
    if next.is_none() {
        next = rx.recv().await;
    }
    while let Some(cmd) = next.take() {
        next = rx.recv().await;
        match cmd {
            Cmd::Append { reply, .. } => reply.send(Err(err.clone())),
            Cmd::Record { reply, .. } => {
                let _ = reply.send(Err(err.clone()));
            }
            Cmd::Query(..) | Cmd::Retire(_) | Cmd::SetRunningTurn { .. } => {}
        }
    }
}

/// What [`load_blocking`] returns.
type Loaded = Result<(SessionState, Box<dyn LogAppender>), AgentError>;

/// Loads the Log: first its tail, handed to `tail_tx` at once (when given) for the
/// reads the actor serves meanwhile, then all of it.
fn load_blocking(
    env: &ActorEnv,
    sid: &str,
    events_tx: Live,
    tail_tx: Option<oneshot::Sender<Option<tail::Tail>>>,
) -> Loaded {
    let started = std::time::Instant::now();
    let log_path = env.home.log_path(sid)?;
    if let Some(tx) = tail_tx {
        let _ = tx.send(tail::Tail::read(env, sid, &log_path, &events_tx));
    }
    let mut state = SessionState::empty(sid, log_path, events_tx);
    // Each event is folded as it is parsed and then kept only as its line.
    let report = env.store.load_into(sid, &mut |ev, stored| {
        state.push(ev, stored);
        // Hand back the pages the parse trees freed as the load goes, so the peak
        // stays near what the session keeps (`crate::allocator`).
        if state.events.len().is_multiple_of(RELEASE_EVERY) {
            crate::allocator::release_freed();
        }
    })?;
    state.events = exact(std::mem::take(&mut state.events));
    let writer = env.store.open_appender(sid)?;
    let parsed = started.elapsed();
    let bytes = report.bytes;
    state.corrupt_lines = report.corrupt_lines;
    state.seq_anomalies = report.seq_anomalies;
    if let Some((torn_bytes, qpath)) = report.torn {
        tracing::warn!(session = sid, torn_bytes, "torn Log tail quarantined");
        state.pending_repair.push((torn_bytes, qpath));
    }
    // A crash between cutting a torn tail and recording `log_repaired` leaves a
    // quarantine file no event names: record it now, so every cut is in the Log.
    let recorded: std::collections::HashSet<String> = state
        .events
        .iter()
        .filter(|e| e.event_type() == EventType::LogRepaired)
        .filter_map(|e| e.event().str_field("quarantine_path").map(str::to_string))
        .collect();
    let mut unrecorded = Vec::new();
    if let Ok(dir) = std::fs::read_dir(env.home.quarantine_dir()) {
        let prefix = format!("{sid}.");
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            // `<sid>.<ts>.torn` where ts has no dots: a longer id sharing our prefix
            // (`a.b` vs `a`) does not match.
            if !rest.ends_with(".torn") || rest[..rest.len() - 5].contains('.') {
                continue;
            }
            let path = entry.path();
            let shown = path.display().to_string();
            if !recorded.contains(shown.as_str())
                && !state.pending_repair.iter().any(|(_, p)| p == &path)
            {
                let size = entry.metadata().map_or(0, |m| m.len());
                unrecorded.push((size, path));
            }
        }
    }
    unrecorded.sort_by(|a, b| a.1.cmp(&b.1));
    state.pending_repair.extend(unrecorded);
    state.fold.shrink_to_fit();
    crate::allocator::release_freed();
    tracing::info!(
        session = sid,
        events = state.events.len(),
        bytes,
        parse_ms = parsed.as_millis() as u64,
        fold_ms = (started.elapsed() - parsed).as_millis() as u64,
        "session loaded"
    );
    Ok((state, writer))
}

/// `v` in an allocation of its length (an allocator may shrink in place and keep the
/// spare capacity resident).
fn exact<T>(mut v: Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    out.append(&mut v);
    out
}

struct Actor {
    env: ActorEnv,
    state: SessionState,
    /// `None` after the writer stopped (failed fdatasync) until `recover_writer`
    /// verified the Log and built a new one.
    writer: Option<store::WriterThread>,
    /// The Log's acknowledged length when the writer stopped.
    acked_bytes: Option<u64>,
    /// Why the writer stopped (answered to appends until it is rebuilt).
    writer_error: Option<AgentError>,
    /// The batch handed to the writer and not yet applied to the state (see
    /// [`Actor::settle`]).
    in_flight: Option<InFlight>,
    rx: mpsc::Receiver<Cmd>,
    handle: SessionHandle,
}

impl Actor {
    /// After the writer stopped: verifies the Log against what was acknowledged (see
    /// `store::recover_writer`) and builds a new writer. On failure appends keep being
    /// refused (and the next one tries again); reads go on serving.
    async fn recover_writer(&mut self) {
        let Some(acked) = self.acked_bytes else {
            return;
        };
        let store = self.env.store.clone();
        let sid = self.state.id.clone();
        let last = self.state.events.last().map(StoredEvent::event);
        let res =
            tokio::task::spawn_blocking(move || store.recover_appender(&sid, acked, last.as_ref()))
                .await
                .unwrap_or_else(|e| Err(AgentError::internal(format!("recover task: {e}"))));
        match res {
            Ok(w) => {
                tracing::warn!(session = %self.state.id, "Log verified after a failed write; appends resume");
                self.writer = Some(store::WriterThread::spawn(w, &self.state.id));
                self.acked_bytes = None;
                self.writer_error = None;
            }
            Err(e) if e.details.get("reason") == Some(&json!("lease_lost")) => {
                // Another daemon owns the session now (shared store): this actor's
                // state is stale. It stops once its queue drains; the next request
                // loads the session afresh, taking the lease again or answering `busy`
                // with the owner.
                tracing::warn!(session = %self.state.id, error = %e, "lease lost; the session unloads");
                self.writer_error = Some(e);
                self.rx.close();
            }
            Err(e) => {
                tracing::error!(session = %self.state.id, error = %e, "Log not recovered; appends stay refused");
                let mut err = e;
                err.details["writer_stopped"] = json!(true);
                self.writer_error = Some(err);
            }
        }
    }

    /// Work owed on first load: record a torn-tail repair.
    async fn after_load(&mut self) {
        for (torn_bytes, qpath) in std::mem::take(&mut self.state.pending_repair) {
            let draft = EventDraft::new(
                EventType::LogRepaired,
                json!({
                    "torn_bytes": torn_bytes,
                    "quarantine_path": qpath.display().to_string(),
                    "detected_at_seq": self.state.next_seq,
                }),
            );
            let (reply, _rx) = oneshot::channel();
            self.commit(vec![(vec![draft], None, Reply::Append(reply))])
                .await;
        }
        // A turn that started but never ended when this daemon first loads the session
        // was cut by a daemon crash: close its orphan calls and end it, durably, before
        // anyone can start another (docs/history-rules.md#reconciliation). A reload after idle eviction is not a
        // restart: a harness may be running its own turn through `agentd/append`.
        let first_load = self.env.observer.first_load(&self.state.id);
        if let Some(turn_id) = self.state.fold.open_turn().filter(|_| first_load) {
            if self
                .env
                .observer
                .open_turn(&self.handle, &self.state, &turn_id)
            {
                tracing::warn!(session = %self.state.id, turn = %turn_id, "resuming a turn cut by a daemon restart");
                return;
            }
            let mut drafts = reconcile::closures(
                &self.state.fold.pending_calls(),
                ReconcileReason::DaemonRestart,
            );
            drafts.push(reconcile::turn_end_interrupted(
                &turn_id,
                ReconcileReason::DaemonRestart,
            ));
            tracing::warn!(session = %self.state.id, turn = %turn_id, "closing a turn cut by a daemon restart");
            let (reply, _rx) = oneshot::channel();
            self.commit(vec![(drafts, None, Reply::Append(reply))])
                .await;
        }
        if first_load && !self.state.queued.is_empty() {
            self.env.observer.queued_waiting(&self.handle);
        }
    }

    /// Serves commands, `first` (one that waited for the load) before the queue's.
    async fn run(&mut self, first: Option<Cmd>) {
        let idle = self.env.idle_evict.max(Duration::from_secs(1));
        let mut deferred: Option<Cmd> = first;
        loop {
            let cmd = match deferred.take() {
                Some(c) => c,
                None => match tokio::time::timeout(idle, self.rx.recv()).await {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(_) => {
                        // Closing stops new commands; the loop drains what is queued and
                        // ends on `None`, so an evicted actor never drops acknowledged work.
                        self.settle().await;
                        self.try_evict();
                        continue;
                    }
                },
            };
            // The last batch is in the state before any command is served.
            self.settle().await;
            match cmd {
                Cmd::Query(f, Exec::Inline, _) => f(&self.state),
                Cmd::Query(f, Exec::Blocking, _) => {
                    self.lend(f).await;
                }
                Cmd::Retire(f) => {
                    if f(&self.state) {
                        self.writer = None;
                        self.rx.close();
                    }
                }
                Cmd::SetRunningTurn { turn_id, reply } => {
                    self.state.running_turn = turn_id;
                    self.env.observer.changed(&self.state, None);
                    let _ = reply.send(());
                }
                Cmd::Record { build, exec, reply } => match match exec {
                    Exec::Inline => build(&self.state),
                    Exec::Blocking => self.lend(build).await.unwrap_or_else(|| {
                        Err(AgentError::internal("the record closure panicked"))
                    }),
                } {
                    Ok(drafts) if drafts.is_empty() => {
                        let _ = reply.send(Ok(None));
                    }
                    Ok(drafts) => {
                        self.commit(vec![(drafts, None, Reply::Record(reply))])
                            .await
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                },
                Cmd::Append {
                    drafts,
                    expect_seq,
                    reply,
                } => {
                    let mut batch = vec![(drafts, expect_seq, reply)];
                    deferred = self.collect(&mut batch).await;
                    self.commit(batch).await;
                }
            }
        }
        self.settle().await;
        self.env
            .observer
            .stopped(&self.state.id, self.handle.generation);
    }

    /// Runs `f` over the state on the blocking pool and takes the state back: the actor
    /// serves no other command meanwhile (as if `f` ran inline), while the runtime's
    /// workers stay free. `None` if `f` panicked (its reply, if any, is dropped).
    async fn lend<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&SessionState) -> T + Send + 'static,
    ) -> Option<T> {
        let placeholder = SessionState::placeholder(&self.state);
        let state = std::mem::replace(&mut self.state, placeholder);
        let joined = tokio::task::spawn_blocking(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&state)));
            (state, out)
        })
        .await;
        match joined {
            Ok((state, out)) => {
                self.state = state;
                out.ok()
            }
            Err(e) => {
                // The blocking pool is gone (runtime shutdown): the state did not come
                // back, so nothing more may be stamped or written from this actor.
                tracing::error!(session = %self.state.id, error = %e, "lent state lost; actor stops");
                self.writer = None;
                self.writer_error = Some(AgentError::internal("session actor stopped"));
                self.rx.close();
                None
            }
        }
    }

    /// Gathers appends already queued (and, in batch mode, those arriving within the
    /// batch window) into one group commit. Returns the first non-append command seen.
    async fn collect(
        &mut self,
        batch: &mut Vec<(Vec<EventDraft>, Option<u64>, Reply)>,
    ) -> Option<Cmd> {
        let deadline = match self.env.durability {
            Durability::Batch => Some(tokio::time::Instant::now() + self.env.batch_window),
            _ => None,
        };
        while batch.len() < MAX_BATCH_COMMANDS {
            let next = match self.rx.try_recv() {
                Ok(c) => Some(c),
                Err(_) => match deadline {
                    Some(d) => tokio::time::timeout_at(d, self.rx.recv())
                        .await
                        .ok()
                        .flatten(),
                    None => None,
                },
            };
            match next {
                Some(Cmd::Append {
                    drafts,
                    expect_seq,
                    reply,
                }) => batch.push((drafts, expect_seq, reply)),
                Some(other) => return Some(other),
                None => break,
            }
        }
        None
    }

    /// Validates, stamps, writes and syncs a batch; acknowledges each command only
    /// after the batch is durable. A command that fails validation fails alone (all or
    /// nothing per command); a failed write fails every command of the batch.
    ///
    /// The commit thread answers: right after the `fdatasync` it updates the index,
    /// publishes the lines and sends every reply, so an appender is woken straight
    /// from the commit rather than through this task. The actor does not wait for the
    /// write: it applies the batch to its state ([`settle`](Self::settle)) before it
    /// serves its next command, so any command a client sends after its answer sees the
    /// batch.
    async fn commit(&mut self, batch: Vec<(Vec<EventDraft>, Option<u64>, Reply)>) {
        self.settle().await;
        let mut staged: Vec<Event> = Vec::new();
        // Where each staged event's line is in `buf`.
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        // Nobody subscribes while a commit runs (subscribing is a command of this
        // actor), so whether anyone listens is known now.
        let publish = self.state.events_tx.receiver_count() > 0;
        let mut lines: Vec<Arc<str>> = Vec::new();
        let mut next = self.state.next_seq;
        for (drafts, expect_seq, reply) in batch {
            match self.stamp(drafts, expect_seq, next) {
                Ok(events) => {
                    let first = staged.len();
                    for ev in &events {
                        // Serialized once: the same bytes go to the Log and to subscribers.
                        let start = buf.len();
                        // A struct of Strings and a Value always serializes.
                        let _ = serde_json::to_writer(&mut buf, ev);
                        if publish {
                            if let Ok(line) = std::str::from_utf8(&buf[start..]) {
                                lines.push(Arc::from(line));
                            }
                        }
                        ranges.push(start..buf.len());
                        buf.push(b'\n');
                    }
                    next += events.len() as u64;
                    pending.push(Pending {
                        first,
                        count: events.len(),
                        reply,
                    });
                    staged.extend(events);
                }
                Err(e) => reply.send(Err(e)),
            }
        }
        if staged.is_empty() {
            return;
        }
        // The batch's lines, kept as one chunk by the state (JSON text is UTF-8).
        let chunk: Arc<str> = Arc::from(std::str::from_utf8(&buf).unwrap_or_default());
        let stored: Vec<StoredEvent> = staged
            .iter()
            .zip(ranges)
            .map(|(ev, r)| match Line::new(&chunk, r) {
                Some(l) => StoredEvent::new(ev, l),
                None => StoredEvent::of(ev),
            })
            .collect();
        let replies: Vec<(Reply, AppendResult)> = pending
            .into_iter()
            .map(|p| {
                let evs = &staged[p.first..p.first + p.count];
                let res = AppendResult {
                    first_seq: evs.first().map_or(0, |e| e.seq),
                    last_seq: evs.last().map_or(0, |e| e.seq),
                    ids: evs.iter().map(|e| e.id.clone()).collect(),
                };
                (p.reply, res)
            })
            .collect();
        let delta = AppendDelta::of(
            &staged,
            self.state.events.len() as u64 + staged.len() as u64,
        );
        let observer = self.env.observer.clone();
        let events_tx = self.state.events_tx.clone();
        let records_step = staged
            .iter()
            .any(|e| crate::live::ends_step(e.event_type()));
        let sid = self.state.id.clone();
        let answer: store::AfterWrite = Box::new(move |res: &Result<(), AgentError>| match res {
            Ok(()) => {
                observer.appended(&sid, &delta);
                events_tx.durable(records_step, lines);
                for (reply, r) in replies {
                    reply.send(Ok(r));
                }
            }
            Err(e) => {
                tracing::error!(session = %sid, error = %e, "append failed");
                for (reply, _) in replies {
                    reply.send(Err(e.clone()));
                }
            }
        });
        let sync = self.env.durability != Durability::None;
        if self.writer.is_none() {
            self.recover_writer().await;
        }
        match &self.writer {
            Some(w) => {
                // Not awaited here: the actor takes its next command while the batch is
                // written, and applies it (`settle`) before serving that command.
                let done = w.submit(buf, sync, Some(answer));
                self.in_flight = Some(InFlight {
                    staged,
                    stored,
                    done,
                });
            }
            None => {
                let e = self.writer_error.clone().unwrap_or_else(|| {
                    AgentError::new(ErrorKind::LogWriteFailed, "log writer unavailable")
                });
                answer(&Err(e.clone()));
                self.written(Vec::new(), Vec::new(), Err(e)).await;
            }
        }
    }

    /// Waits for the batch handed to the writer, if any, and applies it to the state.
    /// Runs before every command, so a command sent after an append's answer sees it.
    /// The writer sends the outcome right after the batch's broadcast and answers, so
    /// this waits at most for that hand-off; a subscriber that joins after it gets the
    /// batch in its backlog only, never live as well.
    async fn settle(&mut self) {
        if let Some(f) = self.in_flight.take() {
            let res = store::outcome(f.done).await;
            self.written(f.staged, f.stored, res).await;
        }
    }

    async fn written(
        &mut self,
        staged: Vec<Event>,
        stored: Vec<StoredEvent>,
        res: Result<(), AgentError>,
    ) {
        match res {
            Ok(()) => {
                for (ev, line) in staged.into_iter().zip(stored) {
                    self.state.push(ev, line);
                }
            }
            Err(e) if e.details.get("writer_stopped") == Some(&json!(true)) => {
                // The writer refuses everything now; rebuild it from the Log as
                // acknowledged before the next batch is accepted.
                self.writer = None;
                if let Some(b) = e.details.get("acked_bytes").and_then(Value::as_u64) {
                    self.acked_bytes = Some(b);
                }
                self.writer_error = Some(e);
                self.recover_writer().await;
            }
            Err(_) => {}
        }
    }

    fn stamp(
        &self,
        drafts: Vec<EventDraft>,
        expect_seq: Option<u64>,
        next: u64,
    ) -> Result<Vec<Event>, AgentError> {
        if drafts.is_empty() {
            return Err(AgentError::invalid_args("events must not be empty"));
        }
        if let Some(expect) = expect_seq {
            if expect != next {
                return Err(AgentError::new(
                    ErrorKind::SeqConflict,
                    format!("expect_seq {expect} but the next seq is {next}"),
                )
                .with_details(json!({"expect_seq": expect, "next_seq": next})));
            }
        }
        let mut out = Vec::with_capacity(drafts.len());
        for (i, d) in drafts.into_iter().enumerate() {
            // A Log carrying a seq near u64::MAX (hand-edited, foreign) has no room left:
            // refuse rather than wrap around onto earlier seqs.
            let seq = next
                .checked_add(i as u64)
                .filter(|s| *s < u64::MAX)
                .ok_or_else(|| {
                    AgentError::new(ErrorKind::CorruptLog, "the Log's seq space is exhausted")
                        .with_details(json!({"next_seq": next}))
                })?;
            let ty = validate_draft(&d).map_err(|m| {
                AgentError::invalid_args(format!("events[{i}]: {m}"))
                    .with_details(json!({"index": i}))
            })?;
            if ty.is_ephemeral() {
                return Err(AgentError::new(
                    ErrorKind::EphemeralNotLoggable,
                    format!(
                        "events[{i}]: {} is ephemeral and is never written to a Log",
                        d.kind
                    ),
                )
                .with_details(json!({"index": i, "type": d.kind})));
            }
            out.push(Event {
                id: new_event_id(),
                session_id: self.state.id.clone(),
                seq,
                ts: now_ts(),
                kind: d.kind,
                data: d.data,
            });
        }
        Ok(out)
    }

    /// An idle session with no running turn and no subscriber leaves memory; its Log
    /// stays on disk and reloads on the next use.
    fn try_evict(&mut self) {
        if self.state.running_turn.is_none() && self.handle.subscriber_count() == 0 {
            self.rx.close();
        }
    }
}

pub use crate::filesystem::current_hash;
