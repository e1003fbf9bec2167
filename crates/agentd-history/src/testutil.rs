//! Test helpers: a tiny in-memory Log that stamps drafts the way the session actor does.

use agentd_proto::{Event, EventDraft};
use serde_json::Value;

pub const SID: &str = "20261121T101500-3fa2c1";

/// An in-memory Log with deterministic ids and timestamps.
#[derive(Default, Clone)]
pub struct TestLog {
    pub events: Vec<Event>,
    pub session_id: String,
}

impl TestLog {
    pub fn new() -> Self {
        TestLog {
            events: Vec::new(),
            session_id: SID.to_string(),
        }
    }

    pub fn next_seq(&self) -> u64 {
        self.events.last().map_or(0, |e| e.seq + 1)
    }

    pub fn push(&mut self, kind: &str, data: Value) -> &Event {
        let seq = self.next_seq();
        self.events.push(Event {
            id: format!("{seq:016x}"),
            session_id: self.session_id.clone(),
            seq,
            ts: format!(
                "2026-11-21T10:{:02}:{:02}.000000Z",
                (seq / 60) % 60,
                seq % 60
            ),
            kind: kind.to_string(),
            data,
        });
        self.events.last().expect("just pushed")
    }

    pub fn push_draft(&mut self, d: &EventDraft) -> &Event {
        self.push(&d.kind.clone(), d.data.clone())
    }
}

/// A compact picture of replay items for assertions: `dev`, `user:<first line>`,
/// `asst:<text>`, `reason:<model>`, `call:<id>`, `out:<id>` (`*` marks a synthetic one).
pub fn kinds(r: &super::replay::Replay) -> Vec<String> {
    use agentd_proto::replay::ReplayItem;
    r.items
        .iter()
        .map(|i| match i {
            ReplayItem::Developer { .. } => "dev".to_string(),
            ReplayItem::User { text, .. } => format!("user:{}", text.lines().next().unwrap_or("")),
            ReplayItem::Assistant { text } => format!("asst:{text}"),
            ReplayItem::Reasoning { model, .. } => format!("reason:{model}"),
            ReplayItem::FunctionCall { call_id, .. } => format!("call:{call_id}"),
            ReplayItem::FunctionCallOutput {
                call_id, synthetic, ..
            } => format!("out:{call_id}{}", if *synthetic { "*" } else { "" }),
        })
        .collect()
}
