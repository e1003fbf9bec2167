//! The rendered provider input of a session, kept from one request to the next
//! (DESIGN §7.1 `agentd/context`).
//!
//! A replay only changes after its last stable point: once every call emitted so far
//! has its output and the dialect's renderer is at an element boundary, the items
//! before that point are final until the next compaction. [`ContextCache`] keeps, per
//! dialect, those items rendered (the JSON array's elements as bytes) with the
//! [`ReplayMark`] to resume from, so a request renders only the items after the mark:
//! `agentd/context` of a long session costs a copy of bytes already rendered plus the
//! work for the latest events. The output is byte for byte what rendering the whole
//! replay gives (`context::tests`, `history::proptests`).
//!
//! Architecture invariant: the cache is keyed by dialect, replay context and the
//! compaction it was built under; anything else (a damaged Log's disordered entries, the
//! Anthropic renderer that merges turns across any point) is served by a full render.

use crate::history::fold::{Fold, ReplayContext, ReplayMark};
use crate::provider::dialect;
use agentd_proto::replay::{Dialect, ReplayItem};
use serde_json::Value;

/// Whether `dialect`'s renderer is at an element boundary after `item` (`None`: the
/// item leaves it as it was). `None` for a dialect whose rendering has no such points.
fn boundary(d: Dialect) -> Option<fn(&ReplayItem) -> Option<bool>> {
    match d {
        // One element per item.
        Dialect::Responses => Some(|_| Some(true)),
        // Calls attach to the assistant message before them; reasoning is not sent.
        Dialect::Chat => Some(|item| match item {
            ReplayItem::Assistant { .. } | ReplayItem::FunctionCall { .. } => Some(false),
            ReplayItem::Reasoning { .. } => None,
            _ => Some(true),
        }),
        // Consecutive same-role turns merge: a later item may extend any message.
        Dialect::Anthropic => None,
    }
}

/// Entries between the resumable points kept inside a prefix (for `after_seq`).
#[cfg(not(test))]
const POINT_EVERY: usize = 2048;
#[cfg(test)]
const POINT_EVERY: usize = 7;

struct Slot {
    dialect: Dialect,
    ctx: ReplayContext,
    compaction: Option<u64>,
    mark: ReplayMark,
    /// The rendered elements of the items before `mark`, comma-separated.
    bytes: Vec<u8>,
    /// Earlier stable points inside `bytes`, with the length of the prefix before each:
    /// a context as of an earlier seq resumes from the latest one at or before it.
    points: Vec<(ReplayMark, usize)>,
}

/// Rendered replay prefixes of one session, one per dialect.
#[derive(Default)]
pub struct ContextCache {
    slots: Vec<Slot>,
}

fn push_elements(out: &mut Vec<u8>, items: &[ReplayItem], d: Dialect) {
    if items.is_empty() {
        return;
    }
    if let Value::Array(elems) = dialect::render(items, d) {
        for e in elems {
            push_sep(out);
            // A Value always serializes.
            let _ = serde_json::to_writer(&mut *out, &e);
        }
    }
}

fn push_sep(out: &mut Vec<u8>) {
    if !matches!(out.last(), None | Some(b'[')) {
        out.push(b',');
    }
}

impl ContextCache {
    /// Bytes of the rendered prefixes held (for memory accounting).
    pub fn bytes(&self) -> usize {
        self.slots.iter().map(|s| s.bytes.len()).sum()
    }

    /// The text of `agentd/context`'s result (`{"dialect","items","stats"}`) for the
    /// replay of `fold` as of `upto` (all when `None`), extending the cached prefix of
    /// `dialect`. `None` when it cannot be served from here (see the module docs).
    pub fn context_json(
        &mut self,
        fold: &Fold,
        ctx: &ReplayContext,
        d: Dialect,
        upto: Option<u64>,
    ) -> Option<Vec<u8>> {
        let at_boundary = boundary(d)?;
        let compaction = fold.compaction_seq();
        let covers = |m: &ReplayMark| upto.is_none_or(|u| m.last_seq.is_none_or(|l| l <= u));
        let slot = self
            .slots
            .iter()
            .position(|s| s.dialect == d && s.ctx == *ctx && s.compaction == compaction);
        // Resume from the prefix's end, or (as of an earlier seq) from the latest point
        // inside it; only a resume from the end extends the prefix.
        let (from, prefix_len, extend) = match slot.map(|i| &self.slots[i]) {
            Some(s) if covers(&s.mark) => (Some(&s.mark), s.bytes.len(), true),
            Some(s) => match s.points.iter().rposition(|(m, _)| covers(m)) {
                Some(p) => (Some(&s.points[p].0), s.points[p].1, false),
                None => (None, 0, false),
            },
            None => (None, 0, true),
        };
        let tail = fold.replay_tail(ctx, from, upto, &at_boundary, POINT_EVERY)?;
        let stable_n = tail.stable.as_ref().map_or(0, |(n, _)| *n);
        // Rendered in segments cut at the points (each a renderer boundary), so each
        // point's offset in the prefix is known.
        let mut fresh = Vec::new();
        let mut seg = 0;
        let mut fresh_points = Vec::new();
        for (n, m) in tail.points {
            push_elements(&mut fresh, &tail.items[seg..n], d);
            fresh_points.push((m, fresh.len()));
            seg = n;
        }
        push_elements(&mut fresh, &tail.items[seg..stable_n], d);
        let mut rest = Vec::new();
        push_elements(&mut rest, &tail.items[stable_n..], d);
        let prefix: &[u8] = slot.map_or(&[], |i| &self.slots[i].bytes[..prefix_len]);
        let mut out = Vec::with_capacity(prefix.len() + fresh.len() + rest.len() + 512);
        out.extend_from_slice(b"{\"dialect\":");
        let _ = serde_json::to_writer(&mut out, &d);
        out.extend_from_slice(b",\"items\":[");
        for part in [prefix, &fresh, &rest] {
            if !part.is_empty() {
                push_sep(&mut out);
                out.extend_from_slice(part);
            }
        }
        out.extend_from_slice(b"],\"stats\":");
        let _ = serde_json::to_writer(&mut out, &tail.stats);
        out.push(b'}');
        let Some((_, mark)) = tail.stable else {
            return Some(out);
        };
        if !extend {
            return Some(out);
        }
        match slot {
            Some(i) => {
                let slot = &mut self.slots[i];
                let old_len = slot.bytes.len();
                let base = old_len + usize::from(old_len > 0 && !fresh.is_empty());
                for (m, len) in fresh_points {
                    let at = if len == 0 { old_len } else { base + len };
                    slot.points.push((m, at));
                }
                let old = std::mem::replace(&mut slot.mark, mark);
                let spaced = slot
                    .points
                    .last()
                    .is_none_or(|(m, _)| old.entries >= m.entries.saturating_add(POINT_EVERY));
                if spaced {
                    slot.points.push((old, old_len));
                }
                slot.points.sort_by_key(|(m, _)| m.entries);
                if !fresh.is_empty() {
                    if old_len > 0 {
                        slot.bytes.push(b',');
                    }
                    slot.bytes.extend_from_slice(&fresh);
                }
            }
            None => {
                self.slots.retain(|s| s.dialect != d);
                self.slots.push(Slot {
                    dialect: d,
                    ctx: ctx.clone(),
                    compaction,
                    mark,
                    bytes: fresh,
                    points: fresh_points,
                });
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::fold::replay_as_of;
    use crate::history::testutil::TestLog;
    use serde_json::json;

    fn ctx() -> ReplayContext {
        ReplayContext {
            workspace: "/w".into(),
            permission_mode: "auto".into(),
            model: Some("m1".into()),
        }
    }

    /// What `agentd/context` answered before the cache: the whole replay rendered.
    fn full(log: &TestLog, d: Dialect, upto: Option<u64>) -> String {
        let r = match upto {
            None => Fold::from_events(&log.events).replay(&ctx()),
            Some(_) => replay_as_of(&log.events, upto, &ctx()),
        };
        let v = json!({"dialect": d, "items": dialect::render(&r.items, d), "stats": r.stats});
        v.to_string()
    }

    fn step(log: &mut TestLog, i: usize) {
        let _ = match i % 9 {
            0 => log.push("user_message", json!({"text": format!("u{i}")})),
            1 => log.push("reasoning", json!({"item": {"type": "reasoning", "id": i}, "model": if i.is_multiple_of(2) { "m1" } else { "m2" }})),
            2 => log.push("assistant_message", json!({"text": format!("a{i}")})),
            3 | 4 => log.push("tool_call", json!({"call_id": format!("c{i}"), "name": "shell", "args": {"i": i}})),
            5 => log.push("tool_result", json!({"call_id": format!("c{}", i - 2), "ok": true, "output": "o"})),
            6 => log.push("tool_result", json!({"call_id": format!("c{}", i - 2), "ok": false})),
            7 if i % 4 == 3 => log.push("tool_call", json!({"call_id": "orphan", "name": "x", "args": {}})),
            7 => log.push("assistant_message", json!({"text": "partial", "metadata": {"partial": true}})),
            _ => log.push("user_message", json!({"text": ""})),
        };
    }

    /// Served from the cache after every append, for every dialect and as of earlier
    /// seqs, the text equals a full render's, and across a compaction too.
    #[test]
    fn cached_context_is_byte_identical_to_a_full_render() {
        let mut log = TestLog::new();
        log.push(
            "session_started",
            json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
        );
        let mut cache = ContextCache::default();
        let mut fold = Fold::from_events(&log.events);
        for i in 0..160 {
            step(&mut log, i);
            fold.push(log.events.last().unwrap());
            if i == 90 {
                log.push("history_compaction", json!({"strategy": "deterministic_v1", "range": {"from_seq": 0, "to_seq": 40}, "summary": "S"}));
                fold.push(log.events.last().unwrap());
            }
            for d in [Dialect::Responses, Dialect::Chat] {
                let got = cache.context_json(&fold, &ctx(), d, None).unwrap();
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    full(&log, d, None),
                    "step {i} {d:?}"
                );
                let last = log.events.last().unwrap().seq;
                for back in [3, 20, 55] {
                    let upto = last.saturating_sub(back);
                    let got = cache.context_json(&fold, &ctx(), d, Some(upto));
                    if let Some(got) = got {
                        assert_eq!(
                            String::from_utf8(got).unwrap(),
                            full(&log, d, Some(upto)),
                            "step {i} {d:?} upto {upto}"
                        );
                    }
                }
            }
        }
        assert!(cache.bytes() > 0, "a prefix was kept");
        assert!(
            cache.slots.iter().all(|s| !s.points.is_empty()),
            "points to resume earlier contexts from were kept"
        );
        assert!(cache
            .context_json(&fold, &ctx(), Dialect::Anthropic, None)
            .is_none());
    }
}
