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
//! Busy window: the running entry is removed after `turn_ended` is durable and just
//! before the `agentd/turn` call answers; a client that starts the next turn on seeing
//! the `turn_ended` event (rather than the response) may, for that instant, get `busy`.

mod compact;
mod engine;
pub mod mcp;
mod permission;
mod setup;
pub use setup::is_home;

pub use permission::PermissionMode;

use crate::history::compaction::CompactOptions;
use crate::history::reconcile::{self, ReconcileReason};
use crate::ops::CompactOutcome;
use crate::peer::PeerHandle;
use crate::registry::Registry;
use crate::session::SessionHandle;
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

/// Iterations (provider calls) of a turn when the request names none.
pub const DEFAULT_MAX_ITERATIONS: u32 = 16;
/// Upper bound a request may ask for.
pub const MAX_MAX_ITERATIONS: u32 = 1000;
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
    cancel: CancellationToken,
    /// Why it was interrupted (`interrupt`, the client's reason, `daemon_shutdown`).
    interrupt_reason: Mutex<Option<String>>,
    /// The final result and the call ids its interrupt closed, once recorded.
    done: watch::Receiver<Option<Finished>>,
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
        Arc::new(TurnManager {
            mcp,
            registry,
            running: DashMap::new(),
            turns_running: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            watch: crate::watch::ArtifactWatch::default(),
            permission_peers: DashMap::new(),
        })
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

    /// A live peer that opted in to permission requests for `sid`, newest first.
    pub fn permission_peer(&self, sid: &str) -> Option<PeerHandle> {
        let mut e = self.permission_peers.get_mut(sid)?;
        e.retain(|c| !c.is_closed());
        e.last().cloned()
    }

    /// `agentd/turn`.
    pub async fn turn(self: &Arc<Self>, p: TurnParams) -> Result<TurnResult, AgentError> {
        let h = self.registry.get(&p.session_id).await?;
        let spec = setup::resolve(&self.registry, &h, &p).await?;
        if let Some(entries) = &p.mcp_servers {
            let parsed = mcp::parse_client(entries)?;
            self.mcp.set_client(&p.session_id, parsed);
        }
        let input = p.input;
        launch(
            self,
            h,
            p.wait.unwrap_or(true),
            move |turns, h, running, started| async move {
                engine::run(&turns, &h, spec, input, &running, started).await
            },
        )
        .await
    }

    /// `agentd/compact`: deterministic, or `strategy: model` with fallback.
    pub async fn compact(
        &self,
        h: &SessionHandle,
        opts: CompactOptions,
        dry_run: bool,
    ) -> Result<CompactOutcome, AgentError> {
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
    engine: E,
) -> Result<TurnResult, AgentError>
where
    E: FnOnce(Arc<TurnManager>, SessionHandle, Arc<RunningTurn>, Started) -> F,
    F: Future<Output = EngineResult> + Send + 'static,
{
    let sid = h.id.to_string();
    let turn_id = format!("turn_{}", agentd_proto::event::new_event_id());
    let (done_tx, done_rx) = watch::channel(None);
    let running = Arc::new(RunningTurn {
        turn_id: turn_id.clone(),
        cancel: CancellationToken::new(),
        interrupt_reason: Mutex::new(None),
        done: done_rx,
    });
    {
        // One turn per session: the map entry is the lock.
        use dashmap::mapref::entry::Entry;
        match turns.running.entry(sid.clone()) {
            Entry::Occupied(e) => {
                return Err(AgentError::new(
                    ErrorKind::Busy,
                    "a turn is already running in this session",
                )
                .with_details(json!({"session_id": sid, "turn_id": e.get().turn_id}))
                .with_next_actions(&[&format!("agentctl interrupt {sid}")]));
            }
            Entry::Vacant(v) => {
                v.insert(running.clone());
            }
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
    let error = AgentError::internal(message.to_string());
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
        let r = launch(&turns, h.clone(), true, |_, _, _, _| async move {
            if evs.is_empty() {
                return Err(AgentError::internal("unreachable"));
            }
            panic!("again")
        })
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
        let err = launch(&turns, h.clone(), true, |_, _, _, _| async move {
            Err(AgentError::internal("the engine must not run"))
        })
        .await
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::DaemonUnavailable);
        assert!(err.message.contains("shutting down"), "{}", err.message);
        assert!(turns.running.is_empty());
        assert_eq!(turns.running_count(), 0);
        assert_eq!(h.query(|st| st.events.len()).await.unwrap(), 1);
    }
}
