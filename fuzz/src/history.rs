//! `history`: a structured program (`arbitrary`) that builds an event sequence: every
//! known event type plus unknown ones, dangling / duplicate / stray call ids, hostile
//! data, rare seq anomalies, with compactions and forks planned along the way as the
//! session actor does. Nothing panics; the incremental fold replays balanced after every
//! step; a fork's child has no pending call and replays balanced; at the end the fold
//! agrees with a fresh replay.

use crate::{check_replay, replay_context, SID};
use agentd::history::compaction::{self, CompactOptions};
use agentd::history::fold::Fold;
use agentd::history::fork;
use agentd::history::replay::pairing_violation;
use agentd_proto::{Event, EventType};
use arbitrary::Arbitrary;
use serde_json::{json, Value};

/// A JSON value, hostile: any shape where a typed field is expected.
#[derive(Arbitrary, Debug)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i8),
    Max,
    Str(u8),
    Arr(Vec<Json>),
    Obj(Vec<(u8, Json)>),
}

const STRS: [&str; 9] = ["", "c1", "c2", "c3", "t1", "t2", "a", "\u{0}", "é"];
const KEYS: [&str; 6] = ["text", "call_id", "name", "ok", "output", "x"];

impl Json {
    fn value(&self, depth: u8) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => json!(b),
            Json::Int(i) => json!(i),
            Json::Max => json!(u64::MAX),
            Json::Str(s) => json!(STRS[*s as usize % STRS.len()]),
            Json::Arr(_) | Json::Obj(_) if depth >= 3 => Value::Null,
            Json::Arr(a) => Value::Array(a.iter().take(4).map(|j| j.value(depth + 1)).collect()),
            Json::Obj(m) => Value::Object(
                m.iter()
                    .take(4)
                    .map(|(k, j)| {
                        (
                            KEYS[*k as usize % KEYS.len()].to_string(),
                            j.value(depth + 1),
                        )
                    })
                    .collect(),
            ),
        }
    }
}

/// A call id: one of a few (so calls and results meet), or anything.
#[derive(Arbitrary, Debug)]
pub enum CallId {
    Known(u8),
    Other(Json),
}

impl CallId {
    fn value(&self) -> Value {
        match self {
            CallId::Known(n) => json!(format!("c{}", 1 + n % 6)),
            CallId::Other(j) => j.value(1),
        }
    }
}

/// An event's data: well-typed for its kind, or hostile.
#[derive(Arbitrary, Debug)]
pub enum Data {
    Typed { a: u8, b: u8, call: CallId },
    Hostile(Json),
}

#[derive(Arbitrary, Debug)]
pub enum Step {
    /// Append an event of kind `kind` (an index into every known type plus extras).
    Event { kind: u8, data: Data },
    /// A compaction planned by the projection, recorded like the actor does.
    Compact { tail: u8 },
    /// A fork at an existing event, with or without a branch summary.
    Fork { at: u8, summary: bool },
    /// A seq anomaly as a hand-edited Log can hold (the loader reports it).
    SeqAnomaly { back: u8, forward: u8 },
}

fn pick<'s>(xs: &[&'s str], i: u8) -> &'s str {
    xs[i as usize % xs.len()]
}

fn event_data(ty: &str, data: &Data) -> Value {
    let (a, b, call) = match data {
        Data::Hostile(j) => return j.value(0),
        Data::Typed { a, b, call } => (*a, *b, call),
    };
    match ty {
        "session_started" => json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
        "user_message" | "assistant_message" => {
            json!({"text": pick(&["hi", "", "done", "x"], a), "metadata": {"partial": b % 5 == 0}})
        }
        "tool_call" => json!({"call_id": call.value(),
            "name": pick(&["read_file", "shell", "write_file", "memory_apply"], a),
            "args": {"path": pick(&["a", "b", "../x"], b)}}),
        "tool_result" => json!({"call_id": call.value(), "ok": a % 3 != 0,
            "output": pick(&["x", "", "err"], b)}),
        "permission_decision" => {
            json!({"call_id": call.value(), "decision": pick(&["allow", "deny", "maybe"], a)})
        }
        "turn_started" => json!({"turn_id": pick(&["t1", "t2", "t3"], a)}),
        "turn_ended" => json!({"turn_id": pick(&["t1", "t2", "t3"], a),
            "status": pick(&["completed", "interrupted", "error"], b)}),
        "reasoning" => json!({"item": {"n": a}, "model": pick(&["m1", "m2"], b)}),
        "history_compaction" => json!({"range": {"from_seq": a, "to_seq": a as u64 + b as u64},
            "summary": "s", "carried_forward": call.value(), "checkpoint": {}}),
        _ => json!({"x": a}),
    }
}

pub fn run(steps: &[Step]) {
    let mut types: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    types.extend(["future_kind", "tool_call", "tool_result", "tool_result"]);
    let mut events: Vec<Event> = Vec::new();
    let mut seq = 0u64;
    let push = |events: &mut Vec<Event>, seq: &mut u64, kind: &str, data: Value| {
        events.push(Event {
            id: format!("{:016x}", *seq),
            session_id: SID.into(),
            seq: *seq,
            ts: format!("2026-11-21T10:00:{:02}.000000Z", *seq % 60),
            kind: kind.into(),
            data,
        });
        *seq += 1;
    };
    push(
        &mut events,
        &mut seq,
        "session_started",
        json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
    );
    let ctx = replay_context();
    let mut fold = Fold::from_events(&events);
    for (forks, step) in steps.iter().take(400).enumerate() {
        match step {
            Step::Compact { tail } => {
                let opts = CompactOptions {
                    tail_events: (tail % 12) as usize,
                    ..CompactOptions::default()
                };
                let plan = compaction::plan(&events, fold.latest_compaction(), &opts, json!({}));
                if plan.compactable {
                    push(&mut events, &mut seq, "history_compaction", plan.data);
                    fold.push(events.last().unwrap());
                }
            }
            Step::Fork { at, summary } => {
                let to = events[*at as usize % events.len()].seq;
                let child = format!("20261121T101500-c{forks:05x}");
                match fork::plan(&events, SID, None, "/w", Some(to), &child, *summary) {
                    Ok(plan) => {
                        let cf = Fold::from_events(&plan.events);
                        assert!(
                            cf.pending_calls().is_empty(),
                            "fork child has pending calls"
                        );
                        check_replay(&plan.events, "fork child");
                    }
                    Err(e) => {
                        assert_ne!(e.kind, agentd_proto::ErrorKind::Internal, "fork: {e}");
                    }
                }
            }
            Step::SeqAnomaly { back, forward } => {
                seq = seq.saturating_sub(*back as u64 % 3) + (*forward as u64 % 3);
            }
            Step::Event { kind, data } => {
                let ty = types[*kind as usize % types.len()];
                push(&mut events, &mut seq, ty, event_data(ty, data));
                fold.push(events.last().unwrap());
            }
        }
        // The incremental fold the actor keeps: balanced after every step.
        let r = fold.replay(&ctx);
        assert!(
            r.stats.balanced,
            "history: replay unbalanced: {:?}",
            r.items
        );
        if let Some(v) = pairing_violation(&r.items) {
            panic!("history: pairing guard let through: {v}");
        }
    }
    check_replay(&events, "history");
}
