//! Who may take a session's turn slot next (docs/protocol.md#turn-order): a turn
//! whose `turn_ended` is durable no longer counts as running, and a prompt queued
//! earlier goes before a new one.
//!
//! The slot (the session's entry in [`TurnManager`](super::TurnManager)'s running map)
//! is freed by the turn task right after `turn_ended` is durable. A client that starts
//! its next turn on seeing that event would, for that instant, find the slot taken;
//! [`wait_if_ending`] makes the new turn wait for the release instead of refusing it
//! `busy`. A new turn that finds prompts queued is refused `busy` naming the oldest
//! ([`queued_ahead`]): a non-queued `agentd/turn` asks to run now, and the queue runs
//! first.

use super::RunningTurn;
use crate::session::{SessionHandle, SessionState};
use agentd_proto::{AgentError, ErrorKind, EventType};
use serde_json::json;
use std::time::Duration;

/// How long a new turn waits for a turn whose `turn_ended` is durable to free the slot.
/// The release is the turn task's next few steps; this only bounds a stuck one.
const RELEASE_WAIT: Duration = Duration::from_secs(15);

/// Whether `turn_id`'s `turn_ended` is in the Log: read back from the Log's end to the
/// nearest turn boundary, so the cost is the ended turn's tail at most.
pub(super) fn has_ended(st: &SessionState, turn_id: &str) -> bool {
    for e in st.events.iter().rev() {
        match e.event_type() {
            EventType::TurnEnded => return e.str_field("turn_id").as_deref() == Some(turn_id),
            EventType::TurnStarted => return false,
            _ => {}
        }
    }
    false
}

/// When `r` has recorded its `turn_ended`, waits (bounded) until its task freed the
/// session's slot and answers `true`: the caller claims the slot again. `false` when
/// `r` is still running (the caller answers `busy`).
pub(super) async fn wait_if_ending(h: &SessionHandle, r: &RunningTurn) -> bool {
    let tid = r.turn_id.clone();
    let ended = h
        .query(move |st| has_ended(st, &tid))
        .await
        .unwrap_or(false);
    if !ended {
        return false;
    }
    let mut released = r.released.subscribe();
    let freed = tokio::time::timeout(RELEASE_WAIT, released.wait_for(|v| *v))
        .await
        .is_ok_and(|r| r.is_ok());
    freed
}

/// The oldest turn queued in `h` and how many wait, if any do.
pub(super) async fn queued_ahead(h: &SessionHandle) -> Option<(String, usize)> {
    h.query(|st| st.queued.first().map(|(t, _)| (t.clone(), st.queued.len())))
        .await
        .ok()
        .flatten()
}

/// `busy` for a new turn that would run ahead of `queued` prompts, the oldest `first`.
pub(super) fn behind_queue(sid: &str, first: &str, queued: usize) -> AgentError {
    AgentError::new(
        ErrorKind::Busy,
        format!("{queued} queued prompt(s) run first in this session; queue this one behind them"),
    )
    .with_details(json!({"session_id": sid, "turn_id": first, "queued": queued}))
    .with_next_actions(&[&format!("agentctl turn --queue {sid} ...")])
}
