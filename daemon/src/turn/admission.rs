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
//! first. A steer is recorded once per `client_request_id` ([`unrecorded_steers`]).

use super::{RunningTurn, Steer};
use crate::session::{ClientRequest, SessionHandle, SessionState};
use agentd_proto::rpc::AppendResult;
use agentd_proto::{AgentError, ErrorKind, EventType};
use serde_json::json;
use std::collections::HashMap;
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

/// The answer to a `client_request_id` used again with other params.
pub(super) fn conflict(session_id: &str, client_request_id: &str) -> AgentError {
    AgentError::new(
        ErrorKind::Conflict,
        "this client_request_id was already used with other params",
    )
    .with_details(json!({"session_id": session_id, "client_request_id": client_request_id}))
}

/// The steers of `steers` still to record. A retry whose first copy the Log already
/// holds (it came in the instant that copy was on its way there, taken for recording
/// but not yet applied) is answered with that record's seq instead of being recorded
/// twice; under the same id with other input, it is a `conflict`.
pub(super) async fn unrecorded_steers(h: &SessionHandle, steers: Vec<Steer>) -> Vec<Steer> {
    let keys: Vec<String> = steers
        .iter()
        .filter_map(|s| s.key.as_ref().map(|(k, _)| k.clone()))
        .collect();
    if keys.is_empty() {
        return steers;
    }
    let known: HashMap<String, ClientRequest> = h
        .query(move |st| {
            keys.iter()
                .filter_map(|k| st.client_requests.get(k).map(|r| (k.clone(), r.clone())))
                .collect()
        })
        .await
        .unwrap_or_default();
    let mut rest = Vec::new();
    for s in steers {
        let recorded = s
            .key
            .as_ref()
            .and_then(|(k, hash)| known.get(k).map(|r| (k, r, hash)));
        match recorded {
            Some((_, r, hash)) if &r.hash == hash => s.reply.send(Ok(AppendResult {
                first_seq: r.seq,
                last_seq: r.seq,
                ids: Vec::new(),
            })),
            Some((k, _, _)) => s.reply.send(Err(conflict(&h.id, k))),
            None => rest.push(s),
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::super::SteerReplies;
    use super::*;
    use crate::config::Config;
    use crate::registry::Registry;
    use crate::store::{self, Home};
    use agentd_proto::{Event, EventDraft};
    use std::io::Write;
    use tokio::sync::oneshot;

    /// A retried steer whose first copy was recorded in the instant between its being
    /// taken for recording and the retry's lookup is answered with that record, and not
    /// recorded again; other input under its id is a conflict; a new steer is kept.
    #[tokio::test]
    async fn a_steer_already_in_the_log_is_answered_not_recorded_again() {
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
        let path = registry.home.log_path(&sid).unwrap();
        store::create_atomic(&path, |f| f.write_all(&store::event_line(&ev))).unwrap();
        registry.index_log(&sid).unwrap();
        let h = registry.get(&sid).await.unwrap();
        let first = h
            .append(
                vec![EventDraft::new(
                    EventType::UserMessage,
                    json!({"text": "also this", "steer": true, "turn_id": "t1",
                           "client_request_id": "st-1", "request_hash": "h1"}),
                )],
                None,
            )
            .await
            .unwrap();
        let steer = |id: &str, hash: &str| {
            let (tx, rx) = oneshot::channel();
            let s = Steer {
                text: "also this".into(),
                images: None,
                key: Some((id.to_string(), hash.to_string())),
                reply: SteerReplies(vec![tx]),
            };
            (s, rx)
        };
        let (retry, retry_rx) = steer("st-1", "h1");
        let (other, other_rx) = steer("st-1", "h2");
        let (new, _new_rx) = steer("st-2", "h3");
        let rest = unrecorded_steers(&h, vec![retry, other, new]).await;
        let kept: Vec<_> = rest.iter().map(|s| s.key.clone().unwrap().0).collect();
        assert_eq!(kept, ["st-2"]);
        assert_eq!(retry_rx.await.unwrap().unwrap().first_seq, first.first_seq);
        assert_eq!(
            other_rx.await.unwrap().unwrap_err().kind,
            ErrorKind::Conflict
        );
    }
}
