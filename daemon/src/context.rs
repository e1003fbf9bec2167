//! The rendered provider input of a session, kept from one request to the next
//! (docs/history-rules.md#replay `agentd/context`, and the input of every turn step).
//!
//! A replay only changes after its last stable point: once every call emitted so far
//! has its output and the dialect's renderer is at an element boundary, the items
//! before that point are final until the next compaction. [`ContextCache`] keeps, per
//! [`Render`] (dialect and reasoning filter), those items rendered (the JSON array's
//! elements as shared byte chunks) with the [`ReplayMark`] to resume from, so a request
//! renders only the items after the mark: `agentd/context` of a long session and a turn
//! step's request body cost the work for the latest events, and the kept bytes are
//! handed out as [`Bytes`] (no copy) to be written around. The output is byte for byte
//! what rendering the whole replay gives (`context::tests`, `history::proptests`,
//! `provider::tests`).
//!
//! Anthropic's messages merge consecutive turns of one role, so a later item may extend
//! the last message: the kept bytes leave that message's content array open, and the
//! open role is kept with each point ([`RenderState`]); a response closes it.
//!
//! Large strings (message text, tool output) are not copied: a replay leaves them in
//! the Log lines the session already holds ([`Splice`]), and the kept pieces are those
//! lines' bytes between the rendered framing.
//!
//! Architecture invariant: the cache is keyed by render, replay context and the
//! compaction it was built under; anything else (a damaged Log's disordered entries) is
//! served by a full render.

use crate::history::fold::{Fold, ReplayContext, ReplayMark};
use crate::history::replay::{ReplayStats, ReplayTail, Splice, SPLICE_MARK_JSON};
use crate::provider::dialect::{self, Render};
use agentd_proto::replay::{Dialect, ReplayItem};
use bytes::Bytes;
use serde_json::Value;

/// A rendered replay: the elements of the dialect's JSON array (comma-separated, no
/// brackets) as pieces to be written one after the other, and the replay's stats.
#[derive(Debug, Clone)]
pub struct RenderedItems {
    pub parts: Vec<Bytes>,
    /// Anthropic: the `system` text (the developer texts joined), when there is one.
    pub system: Option<String>,
    pub stats: ReplayStats,
}

impl RenderedItems {
    /// Bytes of the elements.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A request's rendered input for `d` ([`ProviderRequest::rendered`]): the
    /// elements, or for Anthropic the `system` and `messages` members around them.
    ///
    /// [`ProviderRequest::rendered`]: crate::provider::ProviderRequest::rendered
    pub fn input(self, d: Dialect) -> Vec<Bytes> {
        if d != Dialect::Anthropic {
            return self.parts;
        }
        let mut head = Vec::new();
        if let Some(system) = &self.system {
            head.extend_from_slice(b"\"system\":");
            let _ = serde_json::to_writer(&mut head, system);
            head.push(b',');
        }
        head.extend_from_slice(b"\"messages\":[");
        let mut out = Vec::with_capacity(self.parts.len() + 2);
        out.push(Bytes::from(head));
        out.extend(self.parts);
        out.push(Bytes::from_static(b"]"));
        out
    }
}

/// Most images one provider request carries, and most bytes of them: older images
/// beyond either are sent as their description lines (every provider caps a request:
/// Anthropic at 32 MB and 100 images).
#[cfg(not(test))]
pub const REQUEST_IMAGES: usize = 20;
#[cfg(not(test))]
pub const REQUEST_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
#[cfg(test)]
pub const REQUEST_IMAGES: usize = 3;
#[cfg(test)]
pub const REQUEST_IMAGE_BYTES: u64 = 8;

/// Loads the bytes of the images `items` refer to from the session's resources
/// directory `dir` (base64, into [`ImageRef::data`]), for a provider request; the Log
/// keeps only the references. A prompt's images are loaded; a tool result's only with
/// `tool_results` (the providers with a wire). A store that keeps images itself
/// (PostgreSQL, `store`) is asked first, then `dir`. Newest first: the newest prompt's
/// images always, the others while the request holds at most [`REQUEST_IMAGES`] images
/// and [`REQUEST_IMAGE_BYTES`] of them; older ones stay unloaded (their description
/// lines are what the model sees). A tool result's image whose resource is missing,
/// unreadable or not of the recorded size stays unloaded: its placeholder line is all
/// the model sees. A prompt's image that cannot be loaded is returned (its digest), so
/// the turn fails `not_found` naming it instead of dropping the image silently. The
/// rendered context the cache keeps never holds image bytes, so a request with images
/// renders its items in full.
///
/// [`ImageRef::data`]: agentd_proto::replay::ImageRef::data
pub fn load_images(
    items: &mut [ReplayItem],
    dir: &std::path::Path,
    tool_results: bool,
    store: Option<&dyn crate::store::LogStore>,
) -> Vec<String> {
    use base64::Engine;
    let mut missing = Vec::new();
    let newest = items
        .iter()
        .rposition(|i| matches!(i, ReplayItem::User { .. }));
    let (mut count, mut bytes) = (0usize, 0u64);
    for (at, item) in items.iter_mut().enumerate().rev() {
        let (images, prompt) = match item {
            ReplayItem::FunctionCallOutput { images, .. } if tool_results => (images, false),
            ReplayItem::User { images, .. } => (images, true),
            _ => continue,
        };
        for img in images.iter_mut().rev() {
            if img.data.is_some() {
                continue;
            }
            let over = count >= REQUEST_IMAGES || bytes + img.bytes > REQUEST_IMAGE_BYTES;
            if over && Some(at) != newest {
                continue;
            }
            let kept = store
                .and_then(|s| s.get_image(&img.sha256))
                .and_then(|r| r.ok().flatten());
            match kept.map_or_else(|| std::fs::read(dir.join(&img.sha256)), Ok) {
                Ok(b) if b.len() as u64 == img.bytes => {
                    img.data = Some(base64::engine::general_purpose::STANDARD.encode(&b));
                    count += 1;
                    bytes += img.bytes;
                }
                _ if prompt => missing.push(img.sha256.clone()),
                _ => {}
            }
        }
    }
    missing
}

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
        // A block extends the open message or opens the next one: the bytes before
        // any item are final once the open role is kept with them ([`RenderState`]).
        Dialect::Anthropic => Some(|_| Some(true)),
    }
}

/// What the bytes rendered so far leave open, kept with each resumable point.
#[derive(Debug, Clone, Default)]
struct RenderState {
    /// Some element was written (the next one is preceded by a comma).
    started: bool,
    /// Anthropic: the role of the message whose content array is still open.
    open: Option<&'static str>,
    /// Anthropic: the developer texts, sent as `system`.
    system: Vec<String>,
}

/// Entries between the resumable points kept inside a prefix (for `after_seq`).
#[cfg(not(test))]
const POINT_EVERY: usize = 256;
#[cfg(test)]
const POINT_EVERY: usize = 7;

/// Bytes kept as immutable pieces: the rendered framing of each segment, and the
/// large strings as the Log lines' own bytes (see [`Splice`]), so a kept prefix costs
/// little beyond the Log the session already holds, and readers share the pieces.
#[derive(Default)]
struct Chunks {
    chunks: Vec<Bytes>,
    len: usize,
}

impl Chunks {
    fn push(&mut self, parts: Vec<Bytes>) {
        for b in parts {
            if !b.is_empty() {
                self.len += b.len();
                self.chunks.push(b);
            }
        }
    }

    /// The first `len` bytes, sharing the chunks.
    fn prefix(&self, mut len: usize, out: &mut Vec<Bytes>) {
        for c in &self.chunks {
            if len == 0 {
                break;
            }
            let n = c.len().min(len);
            out.push(c.slice(..n));
            len -= n;
        }
    }
}

struct Slot {
    render: Render,
    ctx: ReplayContext,
    compaction: Option<u64>,
    mark: ReplayMark,
    /// The rendered elements of the items before `mark`, comma-separated.
    bytes: Chunks,
    /// The renderer's state at `mark`.
    state: RenderState,
    /// Earlier stable points inside `bytes`, with the length of the prefix before each
    /// and the renderer's state there: a context as of an earlier seq resumes from the
    /// latest one at or before it.
    points: Vec<(ReplayMark, usize, RenderState)>,
    /// Request counter value when last used (the least recently used slot of a dialect
    /// goes first).
    used: u64,
}

/// Entries replayed at once when a long stretch is rendered into a prefix.
#[cfg(not(test))]
const STEP_ENTRIES: usize = 4096;
#[cfg(test)]
const STEP_ENTRIES: usize = 10;

/// Slots kept per dialect: `agentd/context`'s and a turn's renders of one dialect may
/// differ (reasoning filter, permission mode), and neither should evict the other.
const SLOTS_PER_DIALECT: usize = 2;

/// Rendered replay prefixes of one session, per render.
#[derive(Default)]
pub struct ContextCache {
    slots: Vec<Slot>,
    uses: u64,
}

/// Renders `items` (those `r` keeps) as elements appended to `out`, continuing from
/// `st`: the array's elements, or for Anthropic the `messages` elements (the open
/// message's content array left open) and the `system` texts.
fn write_elements(out: &mut Vec<u8>, items: &[ReplayItem], r: Render, st: &mut RenderState) {
    if items.is_empty() {
        return;
    }
    if r.dialect == Dialect::Anthropic {
        for item in items.iter().filter(|i| r.keeps(i)) {
            if let ReplayItem::Developer { text } = item {
                st.system.push(text.clone());
            }
            let Some((role, block)) = dialect::anthropic_block(item) else {
                continue;
            };
            if st.open == Some(role) {
                out.push(b',');
            } else {
                if st.open.is_some() {
                    out.extend_from_slice(b"]}");
                }
                if std::mem::replace(&mut st.started, true) {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"role\":");
                let _ = serde_json::to_writer(&mut *out, role);
                out.extend_from_slice(b",\"content\":[");
                st.open = Some(role);
            }
            // A Value always serializes.
            let _ = serde_json::to_writer(&mut *out, &block);
        }
        return;
    }
    let rendered = if items.iter().all(|i| r.keeps(i)) {
        dialect::render(items, r.dialect)
    } else {
        let kept: Vec<ReplayItem> = items.iter().filter(|i| r.keeps(i)).cloned().collect();
        dialect::render(&kept, r.dialect)
    };
    if let Value::Array(elems) = rendered {
        for e in elems {
            if std::mem::replace(&mut st.started, true) {
                out.push(b',');
            }
            // A Value always serializes.
            let _ = serde_json::to_writer(&mut *out, &e);
        }
    }
}

/// What closes the elements rendered up to `st` (Anthropic: the open message).
fn closing(st: &RenderState) -> Option<Bytes> {
    st.open.map(|_| Bytes::from_static(b"]}"))
}

/// Strings at least this long are written from the Log line's bytes; shorter ones are
/// copied into the rendered text.
#[cfg(not(test))]
const SHARE_MIN: usize = 1024;
#[cfg(test)]
const SHARE_MIN: usize = 100;

/// A replay's items with the large strings left in their Log lines
/// ([`ReplayTail::splices`](crate::history::replay::ReplayTail::splices)).
struct Spliced<'a> {
    items: &'a [ReplayItem],
    splices: &'a [(usize, Splice)],
}

impl Spliced<'_> {
    /// Renders `items[range]` as elements appended to `out` as pieces: the rendered
    /// text, cut where a spliced string's mark is, and the line's bytes in its place.
    /// Returns the bytes appended. `st` as in [`write_elements`].
    fn render(
        &self,
        out: &mut Vec<Bytes>,
        range: std::ops::Range<usize>,
        r: Render,
        st: &mut RenderState,
    ) -> usize {
        if range.is_empty() {
            return 0;
        }
        let items = &self.items[range.clone()];
        let lo = self.splices.partition_point(|(i, _)| *i < range.start);
        let hi = self.splices.partition_point(|(i, _)| *i < range.end);
        let mine = &self.splices[lo..hi];
        let kept: Vec<&Splice> = mine
            .iter()
            .filter(|(i, _)| r.keeps(&self.items[*i]))
            .map(|(_, s)| s)
            .collect();
        let before = st.clone();
        let mut buf = Vec::new();
        write_elements(&mut buf, items, r, st);
        let marks: Vec<usize> = if kept.is_empty() {
            Vec::new()
        } else {
            memchr::memmem::find_iter(&buf, SPLICE_MARK_JSON.as_bytes()).collect()
        };
        if marks.len() == kept.len() {
            // Strings shorter than `SHARE_MIN` are copied in: a piece per short string
            // would cost more to keep and to write than its bytes. The copied text of
            // the range is one allocation of its exact size (it is kept), cut into the
            // pieces between the shared strings.
            let mut own = Vec::with_capacity(buf.len());
            let mut cuts: Vec<(usize, &Splice)> = Vec::new();
            let mut from = 0;
            for (&at, s) in marks.iter().zip(kept) {
                own.extend_from_slice(&buf[from..at]);
                let raw = s.raw();
                if raw.len() < SHARE_MIN {
                    own.extend_from_slice(raw.as_bytes());
                } else {
                    cuts.push((own.len(), s));
                }
                from = at + SPLICE_MARK_JSON.len();
            }
            own.extend_from_slice(&buf[from..]);
            drop(buf);
            own.shrink_to_fit();
            let own = Bytes::from(own);
            let mut n = own.len();
            let mut at = 0;
            for (cut, s) in cuts {
                out.push(own.slice(at..cut));
                let b = s.bytes();
                n += b.len();
                out.push(b);
                at = cut;
            }
            out.push(own.slice(at..));
            return n;
        }
        // The mark where no splice put it (a string that holds it): every string in
        // its place instead.
        let mut full = items.to_vec();
        for (i, s) in mine {
            s.restore(&mut full[i - range.start]);
        }
        *st = before;
        let mut buf = Vec::new();
        write_elements(&mut buf, &full, r, st);
        buf.shrink_to_fit();
        let n = buf.len();
        out.push(Bytes::from(buf));
        n
    }
}

impl ContextCache {
    /// Bytes of the rendered prefixes held (for memory accounting).
    pub fn bytes(&self) -> usize {
        self.slots.iter().map(|s| s.bytes.len).sum()
    }

    /// The text of `agentd/context`'s result (`{"dialect","items","stats"}`) for the
    /// replay of `fold` as of `upto` (all when `None`), in pieces. `None` when it cannot
    /// be served from here (see the module docs).
    pub fn context_json(
        &mut self,
        fold: &Fold,
        ctx: &ReplayContext,
        d: Dialect,
        upto: Option<u64>,
    ) -> Option<Vec<Bytes>> {
        let items = self.items(fold, ctx, Render::all(d), upto)?;
        let mut head = b"{\"dialect\":".to_vec();
        let _ = serde_json::to_writer(&mut head, &d);
        // Anthropic's input is an object of `system` and `messages`, the others' an
        // array.
        let (open, close): (&[u8], &[u8]) = match d {
            Dialect::Anthropic => (b"{", b"}"),
            _ => (b"[", b"]"),
        };
        head.extend_from_slice(b",\"items\":");
        head.extend_from_slice(open);
        let mut tail = close.to_vec();
        tail.extend_from_slice(b",\"stats\":");
        let _ = serde_json::to_writer(&mut tail, &items.stats);
        tail.push(b'}');
        let mut out = Vec::with_capacity(items.parts.len() + 4);
        out.push(Bytes::from(head));
        out.extend(items.input(d));
        out.push(Bytes::from(tail));
        Some(out)
    }

    /// The replay of `fold` as of `upto` (all when `None`) rendered by `r`, extending
    /// the cached prefix. `None` when it cannot be served from here (see the module
    /// docs).
    pub fn items(
        &mut self,
        fold: &Fold,
        ctx: &ReplayContext,
        r: Render,
        upto: Option<u64>,
    ) -> Option<RenderedItems> {
        let at_boundary = boundary(r.dialect)?;
        let compaction = fold.compaction_seq();
        self.uses += 1;
        let covers = |m: &ReplayMark| upto.is_none_or(|u| m.last_seq.is_none_or(|l| l <= u));
        let find = |slots: &[Slot]| {
            slots
                .iter()
                .position(|s| s.render == r && s.ctx == *ctx && s.compaction == compaction)
        };
        // A long stretch past the kept prefix (the first request, or many appends since
        // the last) is rendered and kept a step at a time, so only a step's replay items
        // are materialized at once; the rest is rendered below. A tail the step limit did
        // not cut is the whole rest: it is used below rather than replayed again.
        let mut whole = None;
        loop {
            let slot = find(&self.slots);
            let from = match slot.map(|i| &self.slots[i]) {
                Some(s) if covers(&s.mark) => Some(&s.mark),
                Some(_) => break,
                None => None,
            };
            let tail = fold.replay_tail(
                ctx,
                from,
                upto,
                &at_boundary,
                POINT_EVERY,
                true,
                Some(STEP_ENTRIES),
            )?;
            if !tail.cut {
                whole = Some(tail);
                break;
            }
            let Some((stable_n, mark)) = tail.stable.clone() else {
                break;
            };
            let (prefix_len, mut st) = slot.map_or((0, RenderState::default()), |i| {
                (self.slots[i].bytes.len, self.slots[i].state.clone())
            });
            let (fresh, points) = render_stable(&tail, stable_n, prefix_len, r, &mut st);
            drop(tail);
            self.keep(slot, r, ctx, compaction, mark, st, fresh, points);
            // The step's items are gone: their pages go back before the next step.
            crate::allocator::release_freed();
        }
        let slot = find(&self.slots);
        // Resume from the prefix's end, or (as of an earlier seq) from the latest point
        // inside it; only a resume from the end extends the prefix.
        let (from, prefix_len, state, extend) = match slot.map(|i| &self.slots[i]) {
            Some(s) if covers(&s.mark) => (Some(&s.mark), s.bytes.len, s.state.clone(), true),
            Some(s) => match s.points.iter().rposition(|(m, _, _)| covers(m)) {
                Some(p) => {
                    let (m, len, st) = &s.points[p];
                    (Some(m), *len, st.clone(), false)
                }
                None => (None, 0, RenderState::default(), false),
            },
            None => (None, 0, RenderState::default(), true),
        };
        let tail = match whole {
            // Replayed from the prefix's end, the resume point chosen here too.
            Some(t) if extend => t,
            _ => fold.replay_tail(ctx, from, upto, &at_boundary, POINT_EVERY, true, None)?,
        };
        let stable_n = tail.stable.as_ref().map_or(0, |(n, _)| *n);
        let mut st = state;
        let (fresh, fresh_points) = render_stable(&tail, stable_n, prefix_len, r, &mut st);
        let stable_state = st.clone();
        let mut rest = Vec::new();
        let spliced = Spliced {
            items: &tail.items,
            splices: &tail.splices,
        };
        spliced.render(&mut rest, stable_n..tail.items.len(), r, &mut st);

        let mut parts = Vec::new();
        if let Some(i) = slot {
            self.slots[i].bytes.prefix(prefix_len, &mut parts);
        }
        parts.extend(fresh.iter().filter(|b| !b.is_empty()).cloned());
        parts.extend(rest.into_iter().filter(|b| !b.is_empty()));
        parts.extend(closing(&st));
        let out = RenderedItems {
            parts,
            system: (!st.system.is_empty()).then(|| st.system.join("\n\n")),
            stats: tail.stats,
        };
        if let Some(i) = slot {
            self.slots[i].used = self.uses;
        }
        if let (Some((_, mark)), true) = (tail.stable, extend) {
            self.keep(
                slot,
                r,
                ctx,
                compaction,
                mark,
                stable_state,
                fresh,
                fresh_points,
            );
        }
        Some(out)
    }

    /// Extends `slot`'s prefix (or starts one) with `fresh`, rendered from its end up
    /// to `mark`, where the renderer's state is `state`.
    // The slot's key and what was rendered; only `items` calls it.
    #[allow(clippy::too_many_arguments)]
    fn keep(
        &mut self,
        slot: Option<usize>,
        r: Render,
        ctx: &ReplayContext,
        compaction: Option<u64>,
        mark: ReplayMark,
        state: RenderState,
        fresh: Vec<Bytes>,
        fresh_points: Vec<(ReplayMark, usize, RenderState)>,
    ) {
        let used = self.uses;
        match slot {
            Some(i) => {
                let slot = &mut self.slots[i];
                slot.used = used;
                let old_len = slot.bytes.len;
                slot.points.extend(fresh_points);
                let old = std::mem::replace(&mut slot.mark, mark);
                let old_state = std::mem::replace(&mut slot.state, state);
                let spaced = slot
                    .points
                    .last()
                    .is_none_or(|(m, _, _)| old.entries >= m.entries.saturating_add(POINT_EVERY));
                if spaced {
                    slot.points.push((old, old_len, old_state));
                }
                slot.points.sort_by_key(|(m, _, _)| m.entries);
                slot.bytes.push(fresh);
            }
            None => {
                let mut same: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.slots[i].render.dialect == r.dialect)
                    .collect();
                // The same render and context under another compaction is stale.
                let stale = same
                    .iter()
                    .position(|&i| self.slots[i].render == r && self.slots[i].ctx == *ctx);
                if let Some(p) = stale {
                    self.slots.remove(same[p]);
                } else if same.len() >= SLOTS_PER_DIALECT {
                    same.sort_by_key(|&i| self.slots[i].used);
                    self.slots.remove(same[0]);
                }
                let mut bytes = Chunks::default();
                bytes.push(fresh);
                self.slots.push(Slot {
                    render: r,
                    ctx: ctx.clone(),
                    compaction,
                    mark,
                    state,
                    bytes,
                    points: fresh_points,
                    used,
                });
            }
        }
    }
}

/// Renders `tail.items[..stable_n]` (continuing a prefix of `prefix_len` bytes, from
/// `st`) in segments cut at the tail's points (each a renderer boundary), so each
/// point's offset in the prefix is known: the pieces, and the points with their
/// offsets and states. Each element after the first of the whole list
/// carries its separator, so the pieces append to the prefix as they are.
fn render_stable(
    tail: &ReplayTail,
    stable_n: usize,
    prefix_len: usize,
    r: Render,
    st: &mut RenderState,
) -> (Vec<Bytes>, Vec<(ReplayMark, usize, RenderState)>) {
    let spliced = Spliced {
        items: &tail.items,
        splices: &tail.splices,
    };
    let mut fresh = Vec::new();
    let mut len = 0;
    let mut seg = 0;
    let mut points = Vec::new();
    for (n, m) in &tail.points {
        if *n > stable_n {
            break;
        }
        len += spliced.render(&mut fresh, seg..*n, r, st);
        points.push((m.clone(), prefix_len + len, st.clone()));
        seg = *n;
    }
    spliced.render(&mut fresh, seg..stable_n, r, st);
    (fresh, points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::fold::replay_as_of;
    use crate::history::stored::Line;
    use crate::history::testutil::TestLog;
    use serde_json::json;

    fn ctx() -> ReplayContext {
        ReplayContext {
            workspace: "/w".into(),
            permission_mode: "auto".into(),
            model: Some("m1".into()),
            ..Default::default()
        }
    }

    fn text(parts: Vec<Bytes>) -> String {
        String::from_utf8(parts.concat()).unwrap()
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

    /// Folds `ev` as a loaded session does: large items keep only its Log line.
    fn push(fold: &mut Fold, ev: &agentd_proto::Event) {
        let line = Line::owned(&serde_json::to_string(ev).unwrap());
        fold.push_stored(ev, &line);
    }

    /// Text long enough to stay in its Log line, with escapes and non-ASCII.
    fn long(i: usize) -> String {
        // 70 to 180 bytes: spliced below and above `SHARE_MIN`.
        format!("line {i}\n\"quoted\" \\ tab\t é ✓ \u{7} ").repeat(2 + i % 4)
    }

    fn step(log: &mut TestLog, i: usize) {
        let _ = match i % 9 {
            0 if i.is_multiple_of(2) => log.push("user_message", json!({"text": long(i)})),
            // With an image reference (an MCP result): rendered as its text.
            5 if i % 4 == 1 => log.push("tool_result", json!({"call_id": format!("c{}", i - 2), "ok": true, "output": long(i),
                "mcp": {"media": [{"type": "image", "mime": "image/png", "bytes": 3, "resource": format!("resources/{}", "ab".repeat(32))}]}})),
            2 if i % 4 == 2 => log.push("assistant_message", json!({"text": long(i)})),
            0 => log.push("user_message", json!({"text": format!("u{i}")})),
            // Anthropic's thinking blocks are sent back, other reasoning is not.
            1 if i % 4 == 1 => log.push("reasoning", json!({"item": {"type": "thinking", "thinking": format!("t{i}"), "signature": "s"}, "model": "m1"})),
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
            push(&mut fold, log.events.last().unwrap());
            if i == 90 {
                log.push("history_compaction", json!({"strategy": "deterministic_v1", "range": {"from_seq": 0, "to_seq": 40}, "summary": "S"}));
                push(&mut fold, log.events.last().unwrap());
            }
            for d in [Dialect::Responses, Dialect::Chat, Dialect::Anthropic] {
                let got = cache.context_json(&fold, &ctx(), d, None).unwrap();
                assert_eq!(text(got), full(&log, d, None), "step {i} {d:?}");
                let last = log.events.last().unwrap().seq;
                for back in [3, 20, 55] {
                    let upto = last.saturating_sub(back);
                    let got = cache.context_json(&fold, &ctx(), d, Some(upto));
                    if let Some(got) = got {
                        assert_eq!(
                            text(got),
                            full(&log, d, Some(upto)),
                            "step {i} {d:?} upto {upto}"
                        );
                    }
                }
            }
        }
        assert!(cache.bytes() > 0, "a prefix was kept");
        let f = fold
            .replay_tail(&ctx(), None, None, &|_: &ReplayItem| None, 7, true, None)
            .unwrap();
        assert!(f.splices.len() > 5, "large strings stayed in their lines");
        assert!(
            cache.slots.iter().all(|s| !s.points.is_empty()),
            "points to resume earlier contexts from were kept"
        );
    }

    /// Newest first within the request's image budget (3 images, 8 bytes in tests): the
    /// newest prompt's image always, even over the budget, then the older ones while
    /// they fit; the rest stay references, sent as their description lines.
    #[test]
    fn images_beyond_the_request_budget_stay_references() {
        let run = |sizes: [u64; 5]| -> (Vec<bool>, String) {
            let dir = tempfile::tempdir().unwrap();
            let mut log = TestLog::new();
            for (i, n) in sizes.into_iter().enumerate() {
                let sha = format!("{i:x}").repeat(64);
                std::fs::write(dir.path().join(&sha), vec![7u8; n as usize]).unwrap();
                log.push(
                    "user_message",
                    json!({"text": format!("p{i}"), "images": [{"sha256": sha, "mime": "image/png", "bytes": n}]}),
                );
            }
            let mut items = Fold::from_events(&log.events).replay(&ctx()).items;
            assert!(load_images(&mut items, dir.path(), true, None).is_empty());
            let loaded = items
                .iter()
                .filter_map(|i| match i {
                    ReplayItem::User { images, .. } => Some(images[0].data.is_some()),
                    _ => None,
                })
                .collect();
            (loaded, dialect::render(&items, Dialect::Chat).to_string())
        };
        // p4 and p2 fit; p3 (20 bytes) and p1 (9 bytes in all) would not; nor p0.
        let (loaded, chat) = run([3, 3, 3, 20, 3]);
        assert_eq!(loaded, [false, false, true, false, true]);
        let p3 = format!(
            "p3\\n[image: image/png, 20 bytes, sha256 {}]",
            "3".repeat(64)
        );
        assert!(chat.contains(&p3), "{chat}");
        // The newest prompt's image goes even over the budget, alone.
        assert_eq!(run([3, 3, 3, 3, 20]).0, [false, false, false, false, true]);
        assert_eq!(run([1, 1, 1, 1, 1]).0, [false, false, true, true, true]);
    }

    /// A request loads the images of tool results from the resources directory; a
    /// missing resource or one of another size stays a reference, rendered as text.
    #[test]
    fn images_load_from_resources_for_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let (good, short, gone) = ("ab".repeat(32), "cd".repeat(32), "ef".repeat(32));
        std::fs::write(dir.path().join(&good), [1u8, 2, 3]).unwrap();
        std::fs::write(dir.path().join(&short), [1u8, 2]).unwrap();
        let media: Vec<Value> = [&good, &short, &gone]
            .iter()
            .map(|s| json!({"type": "image", "mime": "image/png", "bytes": 3, "resource": format!("resources/{s}")}))
            .collect();
        let mut log = TestLog::new();
        log.push(
            "tool_call",
            json!({"call_id": "c", "name": "mcp__s__img", "args": {}}),
        );
        log.push(
            "tool_result",
            json!({"call_id": "c", "ok": true, "output": "[image]", "mcp": {"media": media}}),
        );
        let fold = Fold::from_events(&log.events);
        assert!(fold.has_images());
        let mut items = fold.replay(&ctx()).items;
        let before = dialect::render(&items, Dialect::Anthropic);
        load_images(&mut items, dir.path(), true, None);
        let ReplayItem::FunctionCallOutput { images, .. } = &items[2] else {
            panic!("{items:?}");
        };
        let data: Vec<Option<&str>> = images.iter().map(|i| i.data.as_deref()).collect();
        assert_eq!(data, [Some("AQID"), None, None]);
        let after = dialect::render(&items, Dialect::Anthropic);
        assert_ne!(before, after);
        assert_eq!(
            after["messages"][1]["content"][0]["content"][1]["source"]["data"],
            "AQID"
        );
        // Chat has no images in tool messages: the same messages, then the loaded
        // image in a user message after the tool message.
        let plain = dialect::render(&fold.replay(&ctx()).items, Dialect::Chat);
        let chat = dialect::render(&items, Dialect::Chat);
        let (plain, chat) = (plain.as_array().unwrap(), chat.as_array().unwrap());
        assert_eq!(chat[..plain.len()], plain[..]);
        assert_eq!(
            chat[plain.len()..],
            [json!({"role": "user", "content": [
                {"type": "text", "text": "[the images returned by tool call c]"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AQID"}},
            ]})]
        );
    }

    /// Strings that hold the splice mark themselves (short ones, which are not spliced,
    /// next to spliced ones; and a long one) render as the full render does.
    #[test]
    fn a_string_holding_the_splice_mark_renders_as_a_full_render() {
        use crate::history::replay::SPLICE_MARK;
        let mut log = TestLog::new();
        log.push(
            "session_started",
            json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
        );
        log.push("user_message", json!({"text": long(1)}));
        log.push(
            "assistant_message",
            json!({"text": format!("a{SPLICE_MARK}")}),
        );
        log.push(
            "user_message",
            json!({"text": format!("{}{SPLICE_MARK}", long(2))}),
        );
        log.push("assistant_message", json!({"text": long(3)}));
        let mut fold = Fold::new();
        for e in &log.events {
            push(&mut fold, e);
        }
        for d in [Dialect::Responses, Dialect::Chat, Dialect::Anthropic] {
            let mut cache = ContextCache::default();
            let got = cache.context_json(&fold, &ctx(), d, None).unwrap();
            assert_eq!(text(got), full(&log, d, None), "{d:?}");
        }
    }

    /// A turn step's request body built from the kept rendering equals the body built
    /// from the replay items (what every step did before), for each HTTP wire format,
    /// after every append, across calls, orphan closures, reasoning of two models (with
    /// and without `encrypted_content`) and a compaction.
    #[test]
    fn request_bodies_from_the_cache_equal_bodies_from_the_items() {
        use crate::provider::{Provider, ProviderConfig, ProviderKind, ProviderRequest};
        let providers: Vec<Provider> = [
            ProviderKind::OpenaiResponses,
            ProviderKind::OpenaiChat,
            ProviderKind::Anthropic,
        ]
        .into_iter()
        .map(|k| {
            let mut cfg = ProviderConfig::new("p", k);
            cfg.model = Some("m1".into());
            cfg.reasoning_effort = Some("low".into());
            Provider::new(cfg).unwrap()
        })
        .collect();
        let tools = vec![agentd_proto::replay::ToolSpec {
            name: "shell".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }];
        let mut log = TestLog::new();
        log.push(
            "session_started",
            json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
        );
        let mut cache = ContextCache::default();
        let mut fold = Fold::from_events(&log.events);
        let mut from_cache = 0;
        for i in 0..120 {
            step(&mut log, i);
            if i % 9 == 1 && i % 4 == 1 {
                log.push("reasoning", json!({"item": {"type": "reasoning", "id": i, "encrypted_content": "e"}, "model": "m1"}));
                push(&mut fold, &log.events[log.events.len() - 2]);
            }
            push(&mut fold, log.events.last().unwrap());
            if i == 70 {
                log.push("history_compaction", json!({"strategy": "deterministic_v1", "range": {"from_seq": 0, "to_seq": 30}, "summary": "S"}));
                push(&mut fold, log.events.last().unwrap());
            }
            for p in &providers {
                let old = ProviderRequest {
                    model: String::new(),
                    items: fold.replay(&ctx()).items,
                    rendered: None,
                    tools: tools.clone(),
                    max_output_tokens: Some(100),
                    reasoning_effort: None,
                };
                let want = p.request_body(&old).unwrap();
                let Some(r) = p.render() else {
                    assert!(!want.is_empty());
                    continue;
                };
                let got = cache.items(&fold, &ctx(), r, None).unwrap();
                from_cache += 1;
                let new = ProviderRequest {
                    items: Vec::new(),
                    rendered: Some(got.input(r.dialect)),
                    ..old
                };
                let body = p.request_body(&new).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&body),
                    String::from_utf8_lossy(&want),
                    "step {i} {:?}",
                    r.dialect
                );
                // Interleaved with agentd/context's own render of the dialect.
                let _ = cache.context_json(&fold, &ctx(), r.dialect, None);
            }
        }
        assert_eq!(from_cache, 360);
        assert!(cache.bytes() > 0);
    }
}
