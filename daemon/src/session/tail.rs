//! Reads a session answers while its Log loads (docs/chat.md#attaching).
//!
//! A cold load parses and folds the whole Log before the state can take an append or a
//! turn. A client attaching to a long session needs only its newest events and the
//! live stream after them, so the loading thread first reads the Log's last lines from
//! its end ([`LogStore::load_tail`]) and hands them here; until the load ends, the
//! actor answers from them the reads that declare they need nothing else ([`Reads`]:
//! an events page of the newest events, a subscription, a backlog page from a seq the
//! tail holds). The first command the tail cannot answer (an append, a turn, any other
//! read) waits for the load, and every command behind it waits too, so commands still
//! take effect in the order they were queued. Nothing can be appended before the load
//! ends, so a subscription made here gets every later event live, after the tail's
//! last seq, with no gap and no duplicate.

use super::{Cmd, Exec, Loaded, SessionState};
use crate::live::Live;
use agentd_proto::AgentError;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Events read from a Log's end before its load: more than one page of a chat
/// attaching (1,500 events).
pub const TAIL_EVENTS: usize = 2048;
/// At most this many bytes of the Log are read for them.
pub const TAIL_BYTES: u64 = 16 << 20;
/// A Log shorter than this loads in a few milliseconds: no tail is read.
pub const TAIL_MIN_LOG: u64 = 1 << 20;

/// What a read needs of a session (see [`super::SessionHandle::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reads {
    /// The last seq and the live stream (a subscription).
    Live,
    /// The events with `seq > after` (every event for `None`).
    After(Option<u64>),
    /// The last `n` events, of these types when given.
    Last(usize, Option<Vec<String>>),
}

/// A Log's newest events, as a state that holds only them.
pub(super) struct Tail {
    state: Arc<SessionState>,
    /// The tail is the whole Log.
    from_start: bool,
}

impl Tail {
    /// Reads the tail of `sid`'s Log; `None` when the store offers none, the Log is
    /// under [`TAIL_MIN_LOG`], or the tail's seqs do not increase line by line (answers from it could then differ from the loaded
    /// state's, so the load answers everything).
    pub(super) fn read(
        env: &super::ActorEnv,
        sid: &str,
        log_path: &Path,
        events_tx: &Live,
    ) -> Option<Tail> {
        let tail = env
            .store
            .load_tail(sid, TAIL_EVENTS, TAIL_BYTES, TAIL_MIN_LOG)?;
        if tail.events.windows(2).any(|w| w[1].0.seq <= w[0].0.seq) {
            return None;
        }
        let mut state = SessionState::empty(sid, log_path.to_path_buf(), events_tx.clone());
        // Only the events and the next seq: nothing reads the fold of a tail.
        for (ev, stored) in tail.events {
            state.next_seq = ev.seq.saturating_add(1);
            state.events.push(stored);
        }
        Some(Tail {
            state: Arc::new(state),
            from_start: tail.from_start,
        })
    }

    /// Whether the tail answers a read that needs `reads` exactly as the loaded state
    /// would.
    fn covers(&self, reads: &Reads) -> bool {
        let events = &self.state.events;
        self.from_start
            || match reads {
                Reads::Live => true,
                Reads::After(None) => false,
                Reads::After(Some(after)) => events
                    .first()
                    .is_some_and(|first| after.saturating_add(1) >= first.seq),
                Reads::Last(n, types) => {
                    let kept =
                        |kind: &str| types.as_ref().is_none_or(|t| t.iter().any(|t| t == kind));
                    events.iter().filter(|e| kept(e.kind())).count() >= *n
                }
            }
    }

    async fn serve(&self, f: super::QueryFn, exec: Exec) {
        match exec {
            Exec::Inline => f(&self.state),
            Exec::Blocking => {
                let state = self.state.clone();
                // A panic drops the reply: its caller gets an error.
                let _ = tokio::task::spawn_blocking(move || f(&state)).await;
            }
        }
    }
}

/// Serves the reads the tail answers while `load` runs. Returns the load's outcome
/// and the first command that must wait for it: nothing after that command is taken
/// from `rx` before the load ends.
pub(super) async fn serve_while_loading(
    rx: &mut mpsc::Receiver<Cmd>,
    tail: oneshot::Receiver<Option<Tail>>,
    mut load: tokio::task::JoinHandle<Loaded>,
) -> (Loaded, Option<Cmd>) {
    let joined = |r: Result<Loaded, tokio::task::JoinError>| {
        r.unwrap_or_else(|e| Err(AgentError::internal(format!("load task: {e}"))))
    };
    let tail = tokio::select! {
        r = &mut load => return (joined(r), None),
        t = tail => t.ok().flatten(),
    };
    let Some(tail) = tail else {
        return (joined(load.await), None);
    };
    loop {
        tokio::select! {
            biased;
            r = &mut load => return (joined(r), None),
            cmd = rx.recv() => match cmd {
                Some(Cmd::Query(f, exec, Some(reads))) if tail.covers(&reads) => {
                    tail.serve(f, exec).await;
                }
                other => return (joined(load.await), other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::stored::StoredEvent;
    use agentd_proto::Event;

    fn tail(seqs: std::ops::Range<u64>, from_start: bool) -> Tail {
        let mut state = SessionState::empty("s", Default::default(), Live::new(4));
        for seq in seqs {
            let kind = if seq % 2 == 0 {
                "user_message"
            } else {
                "assistant_message"
            };
            let ev = Event {
                id: format!("{seq:016x}"),
                session_id: "s".into(),
                seq,
                ts: "t".into(),
                kind: kind.into(),
                data: serde_json::json!({"text": "x"}),
            };
            state.next_seq = seq + 1;
            state.events.push(StoredEvent::of(&ev));
        }
        Tail {
            state: Arc::new(state),
            from_start,
        }
    }

    #[test]
    fn a_tail_covers_only_reads_within_it() {
        let t = tail(100..200, false);
        assert!(t.covers(&Reads::Live));
        assert!(!t.covers(&Reads::After(None)), "from the first event");
        assert!(!t.covers(&Reads::After(Some(98))), "seq 99 is not in it");
        assert!(t.covers(&Reads::After(Some(99))));
        assert!(t.covers(&Reads::After(Some(150))));
        assert!(t.covers(&Reads::After(Some(500))), "nothing after the end");
        assert!(t.covers(&Reads::Last(100, None)));
        assert!(!t.covers(&Reads::Last(101, None)));
        let users = Some(vec!["user_message".to_string()]);
        assert!(t.covers(&Reads::Last(50, users.clone())));
        assert!(!t.covers(&Reads::Last(51, users)));
        // The whole Log: every read.
        let whole = tail(0..10, true);
        assert!(whole.covers(&Reads::After(None)));
        assert!(whole.covers(&Reads::Last(1000, None)));
        // An empty tail of a Log that has more: only the live stream.
        let empty = tail(0..0, false);
        assert!(empty.covers(&Reads::Live));
        assert!(!empty.covers(&Reads::After(Some(3))));
        assert!(!empty.covers(&Reads::Last(1, None)));
    }
}
