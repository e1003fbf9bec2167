//! A session's live fan-out: the broadcast ring every subscriber reads, and the text the
//! current provider step has streamed so far, so that a client subscribing mid-step
//! gets that text as one catch-up delta before the live ones, with no gap and nothing
//! twice (docs/api.md, "Late joiners").
//!
//! Deltas are published from the turn's task while the session's actor broadcasts
//! durable events; one lock orders a delta's publication, a subscriber's snapshot and
//! the clearing by the durable event that records the step, so every streamed piece is
//! either in a joiner's catch-up or in its live stream, never both.

use agentd_proto::EventType;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// What the current provider step has streamed and no durable event records yet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Streamed {
    pub reasoning: String,
    pub text: String,
}

impl Streamed {
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.text.is_empty()
    }
}

/// The broadcast ring of one session and its streamed tail; cloned into the handle
/// (which publishes ephemeral events) and the actor (which broadcasts durable ones).
#[derive(Clone)]
pub struct Live {
    tx: broadcast::Sender<Arc<str>>,
    tail: Arc<Mutex<Streamed>>,
}

/// Whether a durable event of type `t` records what a provider step streamed (its
/// answer, reasoning or calls), or ends the turn: the tail is spent then.
pub fn ends_step(t: EventType) -> bool {
    matches!(
        t,
        EventType::AssistantMessage
            | EventType::Reasoning
            | EventType::ToolCall
            | EventType::TurnEnded
    )
}

impl Live {
    pub fn new(capacity: usize) -> Live {
        let (tx, _) = broadcast::channel(capacity);
        Live {
            tx,
            tail: Arc::default(),
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Streamed> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn receiver_count(&self) -> usize {
        self.tx.receiver_count()
    }

    /// An ephemeral event's line; a text or reasoning delta's `text` joins the tail.
    pub fn ephemeral(&self, kind: EventType, text: Option<&str>, line: Arc<str>) {
        let mut tail = self.tail();
        match (kind, text) {
            (EventType::TextDelta, Some(t)) => tail.text.push_str(t),
            (EventType::ReasoningDelta, Some(t)) => tail.reasoning.push_str(t),
            _ => {}
        }
        let _ = self.tx.send(line);
    }

    /// The lines of a durable batch (none when nobody listened); a batch that records
    /// a step ([`ends_step`]) empties the tail first.
    pub fn durable(&self, records_step: bool, lines: Vec<Arc<str>>) {
        if !records_step && lines.is_empty() {
            return;
        }
        let mut tail = self.tail();
        if records_step {
            *tail = Streamed::default();
        }
        for line in lines {
            let _ = self.tx.send(line);
        }
    }

    /// A receiver of every line from now on, and the tail streamed before it.
    pub fn subscribe(&self) -> (Streamed, broadcast::Receiver<Arc<str>>) {
        let tail = self.tail();
        (tail.clone(), self.tx.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_proto::EventType as T;

    fn line(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_joiner_gets_each_piece_once_in_its_catch_up_or_live() {
        let live = Live::new(16);
        live.ephemeral(T::TextDelta, Some("Hel"), line("d1"));
        live.ephemeral(T::ReasoningDelta, Some("think"), line("r1"));
        live.ephemeral(T::Status, None, line("s"));
        live.ephemeral(T::TextDelta, Some("lo"), line("d2"));
        let (tail, mut rx) = live.subscribe();
        assert_eq!(
            tail,
            Streamed {
                reasoning: "think".into(),
                text: "Hello".into()
            }
        );
        live.ephemeral(T::TextDelta, Some("!"), line("d3"));
        assert_eq!(&*rx.try_recv().unwrap(), "d3");
        // Usage is not the step's record; the answer is.
        live.durable(ends_step(T::ProviderUsage), vec![line("u")]);
        assert_eq!(live.subscribe().0.text, "Hello!");
        live.durable(ends_step(T::AssistantMessage), vec![line("a")]);
        let (after, _) = live.subscribe();
        assert!(after.is_empty(), "{after:?}");
        assert_eq!(&*rx.try_recv().unwrap(), "u");
        assert_eq!(&*rx.try_recv().unwrap(), "a");
    }
}
