//! The turn engine (DESIGN §10): `agentd/turn`, `agentd/interrupt`, and the provider-side
//! half of `agentd/compact` (`strategy: model`).
//!
//! A turn runs in a task of its own, so that `wait:false` can return right after
//! `turn_started` and so that a client disconnecting never cuts a turn in half. The
//! session's running turn is kept in [`Turns`] (one per session: a second `agentd/turn`
//! gets kind `busy`), with the cancellation token an interrupt fires and a watch channel
//! on which the turn publishes its final result.
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
//! the call ids it closed. Shutdown does the same for every running turn.
//!
//! `wait:false` answers once `turn_started` and `user_message` are durable, with
//! `status:"running"` and their seqs; the turn's end is then seen through
//! `agentd/subscribe` or `agentd/events`.
//!
//! Busy window: the running entry is removed after `turn_ended` is durable and just
//! before the `agentd/turn` call answers; a client that starts the next turn on seeing
//! the `turn_ended` event (rather than the response) may, for that instant, get `busy`.

mod compact;
mod engine;
mod permission;
mod setup;

pub use compact::compact_with_strategy;
pub use permission::PermissionMode;

use crate::api::{method, Api};
use crate::history::reconcile::ReconcileReason;
use crate::registry::Registry;
use crate::session::SessionHandle;
use agentd_proto::rpc::{method as m, InterruptParams, InterruptResult, TurnParams, TurnResult};
use agentd_proto::{AgentError, ErrorKind};
use dashmap::DashMap;
use jsonrpsee::RpcModule;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
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

/// What the daemon knows of turns beyond the Logs: the running one per session and the
/// artifact watcher. Lives in the [`Registry`].
#[derive(Default)]
pub struct Turns {
    running: DashMap<String, Arc<RunningTurn>>,
    pub(crate) watch: crate::watch::ArtifactWatch,
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

/// Registers `agentd/turn` and `agentd/interrupt`.
pub fn register(module: &mut RpcModule<Api>) {
    method(module, m::TURN, |api, p: TurnParams, _| async move {
        turn(&api.registry, p).await
    });
    method(
        module,
        m::INTERRUPT,
        |api, p: InterruptParams, _| async move {
            let r = interrupt(&api.registry, &p.session_id, p.reason.as_deref()).await?;
            serde_json::to_value(r).map_err(|e| AgentError::internal(e.to_string()))
        },
    );
}

/// `agentd/turn`.
pub async fn turn(registry: &Arc<Registry>, p: TurnParams) -> Result<Value, AgentError> {
    let wait = p.wait.unwrap_or(true);
    let h = registry.get(&p.session_id).await?;
    let spec = setup::resolve(registry, &h, &p).await?;
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
        match registry.turns.running.entry(p.session_id.clone()) {
            Entry::Occupied(e) => {
                return Err(AgentError::new(
                    ErrorKind::Busy,
                    "a turn is already running in this session",
                )
                .with_details(json!({"session_id": p.session_id, "turn_id": e.get().turn_id}))
                .with_next_actions(&[&format!("agentctl interrupt {}", p.session_id)]));
            }
            Entry::Vacant(v) => {
                v.insert(running.clone());
            }
        }
    }
    registry.turns_running.fetch_add(1, Ordering::Relaxed);
    let (started_tx, started_rx) = oneshot::channel();
    let task = tokio::spawn(run_task(
        registry.clone(),
        h,
        spec,
        p.input,
        running.clone(),
        started_tx,
        done_tx,
    ));
    if !wait {
        return match started_rx.await {
            Ok(Ok((first, last))) => Ok(json!(TurnResult {
                turn_id,
                status: "running".into(),
                output_text: String::new(),
                first_seq: first,
                last_seq: last,
                error: None,
            })),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(AgentError::internal("turn task ended before it started")),
        };
    }
    let _ = task.await;
    let finished = running.done.borrow().clone();
    match finished {
        Some(f) => serde_json::to_value(f.result).map_err(|e| AgentError::internal(e.to_string())),
        None => Err(AgentError::internal("turn task ended without a result")),
    }
}

type Started = oneshot::Sender<Result<(u64, u64), AgentError>>;

/// The turn task: runs the engine, then releases the session whatever happened.
async fn run_task(
    registry: Arc<Registry>,
    h: SessionHandle,
    spec: setup::TurnSpec,
    input: String,
    running: Arc<RunningTurn>,
    started: Started,
    done: watch::Sender<Option<Finished>>,
) {
    let sid = h.id.to_string();
    let outcome = engine::run(&registry, &h, spec, input, &running, started).await;
    let _ = h.query(|st| st.running_turn = None).await;
    registry.set_running(&sid, false);
    registry.turns_running.fetch_sub(1, Ordering::Relaxed);
    registry
        .turns
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
                },
                reconciled: Vec::new(),
            }
        }
    };
    let _ = done.send(Some(finished));
}

/// `agentd/interrupt`: ends the running turn (see the module doc), or reconciles an idle
/// session with reason `interrupt_no_turn`.
pub async fn interrupt(
    registry: &Arc<Registry>,
    sid: &str,
    reason: Option<&str>,
) -> Result<InterruptResult, AgentError> {
    let h = registry.get(sid).await?;
    let running = registry.turns.running.get(sid).map(|r| r.value().clone());
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
    let reconciled = v["recorded"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["call_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(InterruptResult {
        interrupted: false,
        reconciled,
    })
}

/// Ends every running turn as interrupted, durably, before the daemon stops.
pub async fn interrupt_all(registry: &Registry, reason: &str) {
    let running: Vec<Arc<RunningTurn>> = registry
        .turns
        .running
        .iter()
        .map(|e| e.value().clone())
        .collect();
    for r in &running {
        r.interrupt(reason);
    }
    for r in &running {
        if r.wait_done(INTERRUPT_WAIT).await.is_none() {
            tracing::warn!(turn = %r.turn_id, "turn did not record its end before shutdown");
        }
    }
}
