//! Property tests over random histories: whatever mix of messages, calls, orphans, stray
//! and duplicate results, interrupts, compactions and forks a session goes through, replay
//! stays balanced, pairs each call with its output right after its step's calls, is
//! byte-identical when repeated, and the incremental fold agrees with a fresh one.

use super::compaction::{self, CompactOptions};
use super::fold::{replay_as_of, Fold, Replay, ReplayContext};
use super::fork;
use super::reconcile::{closures, turn_end_interrupted, ReconcileReason};
use super::testutil::TestLog;
use agentd_proto::replay::ReplayItem;
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    User,
    Assistant { partial: bool },
    Reasoning { same_model: bool },
    Call,
    Result { pick: usize },
    Stray,
    Permission { pick: usize },
    Usage,
    Unknown,
    TurnStart,
    TurnEnd,
    Interrupt,
    Compact { tail: usize },
    Fork { pick: usize, summarize: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::User),
        2 => any::<bool>().prop_map(|partial| Op::Assistant { partial }),
        1 => any::<bool>().prop_map(|same_model| Op::Reasoning { same_model }),
        5 => Just(Op::Call),
        5 => any::<usize>().prop_map(|pick| Op::Result { pick }),
        1 => Just(Op::Stray),
        1 => any::<usize>().prop_map(|pick| Op::Permission { pick }),
        1 => Just(Op::Usage),
        1 => Just(Op::Unknown),
        2 => Just(Op::TurnStart),
        1 => Just(Op::TurnEnd),
        1 => Just(Op::Interrupt),
        1 => (0usize..12).prop_map(|tail| Op::Compact { tail }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, summarize)| Op::Fork { pick, summarize }),
    ]
}

/// Checks pairing independently of `fold::pairing_violation`.
fn check_pairs(items: &[ReplayItem]) -> Result<(), String> {
    let is_call = |i: &ReplayItem| matches!(i, ReplayItem::FunctionCall { .. });
    let is_out = |i: &ReplayItem| matches!(i, ReplayItem::FunctionCallOutput { .. });
    let mut i = 0;
    while i < items.len() {
        if !is_call(&items[i]) {
            if is_out(&items[i]) {
                return Err(format!("output at {i} outside a step"));
            }
            i += 1;
            continue;
        }
        let calls_end = (i..items.len())
            .find(|&j| !is_call(&items[j]))
            .unwrap_or(items.len());
        let outs_end = (calls_end..items.len())
            .find(|&j| !is_out(&items[j]))
            .unwrap_or(items.len());
        let mut want: Vec<&str> = items[i..calls_end]
            .iter()
            .filter_map(|c| match c {
                ReplayItem::FunctionCall { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        let mut got: Vec<&str> = items[calls_end..outs_end]
            .iter()
            .filter_map(|c| match c {
                ReplayItem::FunctionCallOutput { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        want.sort();
        got.sort();
        if want != got {
            return Err(format!("step at {i}: calls {want:?} but outputs {got:?}"));
        }
        i = outs_end;
    }
    Ok(())
}

struct Sim {
    log: TestLog,
    fold: Fold,
    calls: Vec<String>,
    n: usize,
    forks: usize,
}

impl Sim {
    fn append(&mut self, kind: &str, data: serde_json::Value) {
        let ev = self.log.push(kind, data).clone();
        self.fold.push(&ev);
    }

    fn apply(&mut self, op: &Op) {
        self.n += 1;
        let n = self.n;
        match op {
            Op::User => self.append("user_message", json!({"text": format!("ask {n}")})),
            Op::Assistant { partial } => self.append(
                "assistant_message",
                json!({"text": format!("say {n}"), "metadata": {"partial": partial}}),
            ),
            Op::Reasoning { same_model } => self.append(
                "reasoning",
                json!({"item": {"n": n}, "model": if *same_model { "m1" } else { "m2" }}),
            ),
            Op::Call => {
                let id = format!("c{n:03}");
                self.append(
                    "tool_call",
                    json!({"call_id": id, "name": "read_file", "args": {"path": format!("f{}", n % 7)}}),
                );
                self.calls.push(id);
            }
            Op::Result { pick } | Op::Permission { pick } if !self.calls.is_empty() => {
                let id = self.calls[pick % self.calls.len()].clone();
                if matches!(op, Op::Result { .. }) {
                    self.append(
                        "tool_result",
                        json!({"call_id": id, "ok": true, "output": "x"}),
                    );
                } else {
                    self.append(
                        "permission_decision",
                        json!({"call_id": id, "decision": "allow"}),
                    );
                }
            }
            Op::Result { .. } | Op::Permission { .. } => {}
            Op::Stray => self.append(
                "tool_result",
                json!({"call_id": format!("ghost{n}"), "ok": false, "output": "?"}),
            ),
            Op::Usage => self.append("provider_usage", json!({"provider": "p", "model": "m1"})),
            Op::Unknown => self.append("future_kind", json!({"n": n})),
            Op::TurnStart => self.append("turn_started", json!({"turn_id": format!("t{n}")})),
            Op::TurnEnd => {
                if let Some(t) = self.fold.open_turn() {
                    self.append("turn_ended", json!({"turn_id": t, "status": "completed"}));
                }
            }
            Op::Interrupt => {
                let mut drafts = closures(&self.fold.pending_calls(), ReconcileReason::Interrupt);
                if let Some(t) = self.fold.open_turn() {
                    drafts.push(turn_end_interrupted(&t, ReconcileReason::Interrupt));
                }
                for d in drafts {
                    self.append(&d.kind, d.data);
                }
                assert!(self.fold.pending_calls().is_empty());
                assert!(self.fold.open_turn().is_none());
            }
            Op::Compact { tail } => {
                let opts = CompactOptions {
                    tail_events: *tail,
                    ..CompactOptions::default()
                };
                let plan = compaction::plan(
                    &self.log.events,
                    self.fold.latest_compaction(),
                    &opts,
                    json!({}),
                );
                if plan.compactable {
                    self.append("history_compaction", plan.data);
                }
            }
            Op::Fork { pick, summarize } => {
                if self.log.events.is_empty() {
                    return;
                }
                let to = self.log.events[pick % self.log.events.len()].seq;
                self.forks += 1;
                let child = format!("child{}", self.forks);
                let parent = self.log.session_id.clone();
                let plan = fork::plan(
                    &self.log.events,
                    &parent,
                    None,
                    "/w",
                    Some(to),
                    &child,
                    *summarize,
                )
                .expect("fork of an existing seq");
                assert!(Fold::from_events(&plan.events).pending_calls().is_empty());
                self.log = TestLog {
                    events: plan.events,
                    session_id: child,
                };
                self.fold = Fold::from_events(&self.log.events);
                self.calls.clear();
            }
        }
    }
}

fn ctx() -> ReplayContext {
    ReplayContext {
        workspace: "/w".into(),
        permission_mode: "auto".into(),
        model: Some("m1".into()),
        ..Default::default()
    }
}

fn assert_sound(r: &Replay) -> Result<(), TestCaseError> {
    prop_assert!(r.stats.balanced, "unbalanced: {:?}", r.items);
    if let Err(e) = check_pairs(&r.items) {
        return Err(TestCaseError::fail(format!("{e}: {:?}", r.items)));
    }
    let mut per_call: HashMap<&str, (usize, usize)> = HashMap::new();
    for i in &r.items {
        match i {
            ReplayItem::FunctionCall { call_id, .. } => per_call.entry(call_id).or_default().0 += 1,
            ReplayItem::FunctionCallOutput { call_id, .. } => {
                per_call.entry(call_id).or_default().1 += 1
            }
            _ => {}
        }
    }
    prop_assert!(per_call.values().all(|(c, o)| c == o));
    prop_assert_eq!(r.stats.function_calls, r.stats.function_call_outputs);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn replay_stays_balanced_and_deterministic(ops in prop::collection::vec(op(), 0..80)) {
        let mut sim = Sim { log: TestLog::new(), fold: Fold::new(), calls: Vec::new(), n: 0, forks: 0 };
        sim.append("session_started", json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}));
        for op in &ops {
            sim.apply(op);
            let incremental = sim.fold.replay(&ctx());
            assert_sound(&incremental)?;
            let fresh = replay_as_of(&sim.log.events, None, &ctx());
            let a = serde_json::to_string(&incremental).unwrap();
            prop_assert_eq!(&a, &serde_json::to_string(&fresh).unwrap());
            prop_assert_eq!(&a, &serde_json::to_string(&sim.fold.replay(&ctx())).unwrap());
        }
    }
}
