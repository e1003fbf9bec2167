//! Provider replay (docs/history-rules.md#replay): the item conversions, the pairing guard and the stats.
//!
//! [`Fold`](crate::fold::Fold) converts each replayable event into its [`ReplayItem`] once,
//! at push time; `build` then only filters and pairs them. Pairing guard: function calls
//! of one assistant step are followed by their outputs. A replayed item that is neither
//! (or the end of the input, or a new call after the step's outputs began) closes the
//! calls still pending, sorted by `call_id`, with a synthetic `orphan_tool_call` output;
//! an output whose call is not pending is dropped. `stats.balanced` is then checked on
//! the produced items, not assumed.

use super::render;
use super::stored::Line;
use agentd_proto::replay::{ImageRef, ReplayItem, MAX_IMAGES_PER_RESULT, MAX_IMAGE_BYTES};
use agentd_proto::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// What replay needs besides the Log: the developer context and the request model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayContext {
    pub workspace: String,
    pub permission_mode: String,
    /// Reasoning items are replayed only when their `data.model` equals this.
    pub model: Option<String>,
    /// The base prompt, first in the developer item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_prompt: Option<String>,
    /// The newest recorded `instructions` event as of the replay's end, rendered by
    /// [`crate::instructions::render`]; last in the developer item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyntheticClosure {
    pub call_id: String,
    pub tool: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayStats {
    pub items: usize,
    pub function_calls: usize,
    pub function_call_outputs: usize,
    pub synthetic_orphan_closures: Vec<SyntheticClosure>,
    pub balanced: bool,
    /// An estimate, not a tokenizer count: characters of all item text / 4, rounded up.
    /// Text is message text, reasoning item JSON, call name + arguments, and outputs.
    pub estimated_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_to_seq: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub items: Vec<ReplayItem>,
    pub stats: ReplayStats,
}

/// A replayable event, converted once at push time.
///
/// A large item (its text at least [`LAZY_MIN`] bytes) whose Log line is kept by the
/// session holds that line instead of the text: `item` keeps every field but the large
/// one (emptied), which is rebuilt from the line when a replay emits the item
/// ([`Entry::full`]). The small fields pairing reads (call ids, names, models) stay.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) seq: u64,
    pub(super) chars: u64,
    pub(super) item: ReplayItem,
    line: Option<Line>,
}

/// Items with less text than this keep their own copy (a parse per emit costs more
/// than they take).
const LAZY_MIN: usize = 64;

impl Entry {
    /// Whether the item's large text is read back from the Log line.
    #[cfg(test)]
    pub(super) fn is_lazy(&self) -> bool {
        self.line.is_some()
    }

    /// The item with its large string left in the Log line: the string is
    /// [`SPLICE_MARK`] and the [`Splice`] says where the line holds its JSON text.
    /// `None` for an item that keeps its own text or whose line cannot stand in for it
    /// (see [`Line::string_field`]); [`Entry::full`] serves those.
    pub(super) fn spliced(&self) -> Option<(ReplayItem, Splice)> {
        let line = self.line.as_ref()?;
        let mut item = self.item.clone();
        let (kind, field, big) = spliceable(&mut item)?;
        let range = line.string_field(kind, field)?;
        *big = SPLICE_MARK.to_string();
        Some((
            item,
            Splice {
                line: line.clone(),
                range,
            },
        ))
    }

    /// The complete item.
    pub(super) fn full(&self) -> ReplayItem {
        let Some(line) = &self.line else {
            return self.item.clone();
        };
        serde_json::from_str::<Event>(line.as_str())
            .ok()
            .and_then(|ev| replay_item(&ev))
            .unwrap_or_else(|| self.item.clone())
    }
}

/// The text a spliced item carries in place of its large string. Control characters
/// make it unlike anything a model or a tool writes; a renderer that finds it where no
/// splice was made renders the items in full instead.
pub const SPLICE_MARK: &str = "\u{1}agentd:splice\u{1}";

/// The string of `item` that may stay in its Log line, with the event type and the
/// `data` field it comes from.
fn spliceable(item: &mut ReplayItem) -> Option<(&'static str, &'static str, &mut String)> {
    match item {
        ReplayItem::User { text, .. } => Some(("user_message", "text", text)),
        ReplayItem::Assistant { text } => Some(("assistant_message", "text", text)),
        ReplayItem::FunctionCallOutput { output, .. } => Some(("tool_result", "output", output)),
        _ => None,
    }
}

/// [`SPLICE_MARK`] as the JSON text agentd writes for it (without quotes).
pub const SPLICE_MARK_JSON: &str = "\\u0001agentd:splice\\u0001";

/// Where a Log line holds the JSON text (escaped, without quotes) of an item's string.
#[derive(Debug, Clone)]
pub struct Splice {
    pub line: Line,
    pub range: std::ops::Range<usize>,
}

impl Splice {
    /// The JSON text, sharing the line's bytes.
    pub fn bytes(&self) -> bytes::Bytes {
        self.line.share(self.range.clone())
    }

    /// Puts the string back into `item` (the item [`Entry::spliced`] gave with it).
    pub fn restore(&self, item: &mut ReplayItem) {
        if let Some((_, _, big)) = spliceable(item) {
            *big = self.text();
        }
    }

    /// The JSON text.
    pub fn raw(&self) -> &str {
        &self.line.as_str()[self.range.clone()]
    }

    /// The string itself.
    pub fn text(&self) -> String {
        let raw = self.raw();
        // The range was checked to be a valid JSON string's text.
        serde_json::from_str(&format!("\"{raw}\"")).unwrap_or_default()
    }
}

fn item_chars(item: &ReplayItem) -> u64 {
    let n = match item {
        ReplayItem::Developer { text }
        | ReplayItem::User { text, .. }
        | ReplayItem::Assistant { text } => text.chars().count(),
        ReplayItem::Reasoning { item, .. } => item.to_string().chars().count(),
        ReplayItem::FunctionCall {
            name, arguments, ..
        } => name.chars().count() + arguments.chars().count(),
        ReplayItem::FunctionCallOutput { output, .. } => output.chars().count(),
    };
    n as u64
}

pub(super) fn entry(seq: u64, item: ReplayItem) -> Entry {
    Entry {
        seq,
        chars: item_chars(&item),
        item,
        line: None,
    }
}

/// An entry of `item`, converted from the event whose Log line is `line`: a large item
/// refers to the line (see [`Entry`]).
pub(super) fn lazy_entry(seq: u64, mut item: ReplayItem, line: &Line) -> Entry {
    let chars = item_chars(&item);
    let big = match &mut item {
        ReplayItem::User { text, .. } | ReplayItem::Assistant { text } => text,
        ReplayItem::FunctionCall { arguments, .. } => arguments,
        ReplayItem::FunctionCallOutput { output, .. } => output,
        ReplayItem::Developer { .. } | ReplayItem::Reasoning { .. } => {
            return Entry {
                seq,
                chars,
                item,
                line: None,
            }
        }
    };
    if big.len() < LAZY_MIN {
        return Entry {
            seq,
            chars,
            item,
            line: None,
        };
    }
    *big = String::new();
    Entry {
        seq,
        chars,
        item,
        line: Some(line.clone()),
    }
}

/// The developer context item's text: the base prompt, the workspace line, then the
/// project's instructions.
pub fn developer_text(ctx: &ReplayContext) -> String {
    let line = format!(
        "Developer context: the workspace root is {}; tool paths resolve inside it. Permission mode: {}.",
        Value::String(ctx.workspace.clone()),
        ctx.permission_mode
    );
    let mut out = String::new();
    if let Some(b) = ctx.base_prompt.as_deref().filter(|b| !b.is_empty()) {
        out.push_str(b.trim_end());
        out.push_str("\n\n");
    }
    out.push_str(&line);
    if let Some(i) = ctx.instructions.as_deref().filter(|i| !i.is_empty()) {
        out.push_str("\n\n");
        out.push_str(i);
    }
    out
}

fn synthetic_output(call_id: &str, tool: &str) -> String {
    json!({
        "ok": false,
        "error": {
            "kind": "orphan_tool_call",
            "message": "agentd replay found a tool_call without a matching tool_result",
            "details": {"call_id": call_id, "tool": tool}
        }
    })
    .to_string()
}

/// The replay item of one event, or `None` for events replay never shows.
pub(super) fn replay_item(ev: &Event) -> Option<ReplayItem> {
    let text = || ev.str_field("text").map(str::to_string);
    match ev.event_type() {
        EventType::UserMessage => text().map(|text| ReplayItem::User {
            text,
            images: user_image_refs(&ev.data),
        }),
        // What a `session_start` or `user_prompt_submit` hook printed for the model
        // (docs/hooks.md#context), shown where it was recorded: before the prompt.
        EventType::HookRun => {
            ev.str_field("context")
                .filter(|c| !c.is_empty())
                .map(|c| ReplayItem::User {
                    text: format!(
                        "<hook_context event=\"{}\">\n{c}\n</hook_context>",
                        ev.str_field("event").unwrap_or("")
                    ),
                    images: Vec::new(),
                })
        }
        EventType::AssistantMessage if !super::digest::is_partial(ev) => {
            text().map(|text| ReplayItem::Assistant { text })
        }
        EventType::Reasoning => Some(ReplayItem::Reasoning {
            item: ev.data.get("item")?.clone(),
            model: ev.str_field("model")?.to_string(),
        }),
        EventType::ToolCall => Some(ReplayItem::FunctionCall {
            call_id: ev.str_field("call_id")?.to_string(),
            name: ev.str_field("name").unwrap_or("").to_string(),
            arguments: ev
                .data
                .get("args")
                .map_or_else(|| "{}".to_string(), Value::to_string),
        }),
        EventType::ToolResult => {
            let call_id = ev.str_field("call_id")?.to_string();
            let output = match ev.data.get("output") {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    let rest: serde_json::Map<String, Value> = ev
                        .data
                        .as_object()?
                        .iter()
                        .filter(|(k, _)| k.as_str() != "call_id")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    Value::Object(rest).to_string()
                }
            };
            Some(ReplayItem::FunctionCallOutput {
                call_id,
                output,
                ok: ev.data.get("ok").and_then(Value::as_bool).unwrap_or(false),
                synthetic: false,
                images: image_refs(&ev.data),
            })
        }
        EventType::BranchSummary => Some(ReplayItem::User {
            text: render::branch_summary_text(&ev.data),
            images: Vec::new(),
        }),
        _ => None,
    }
}

/// The images a `user_message` carries (`data.images[{sha256, mime, bytes}]`, stored
/// as session resources): `image/*` types named by a sha256, in order.
pub fn user_image_refs(data: &Value) -> Vec<ImageRef> {
    let Some(list) = data.get("images").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|m| {
            let sha = m.get("sha256")?.as_str()?;
            let mime = m.get("mime")?.as_str()?;
            let is_sha =
                sha.len() == 64 && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            (is_sha && mime.starts_with("image/")).then(|| ImageRef {
                sha256: sha.to_string(),
                mime: mime.to_string(),
                bytes: m.get("bytes").and_then(Value::as_u64).unwrap_or(0),
                data: None,
            })
        })
        .collect()
}

/// The images a `tool_result` refers to (a built-in tool's `data.images`, as a
/// prompt's; `data.mcp.media` entries of type `image` stored as resources): only
/// `image/*` types, each at most [`MAX_IMAGE_BYTES`], the first
/// [`MAX_IMAGES_PER_RESULT`] of them, in content order. The rest keep only their
/// placeholder line in `output`.
pub fn image_refs(data: &Value) -> Vec<ImageRef> {
    let own = user_image_refs(data)
        .into_iter()
        .filter(|i| i.bytes <= MAX_IMAGE_BYTES);
    let empty = Vec::new();
    let media = data
        .pointer("/mcp/media")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    own.chain(media.iter().filter_map(|m| {
        let mime = m.get("mime")?.as_str()?;
        let bytes = m.get("bytes")?.as_u64()?;
        let sha = m.get("resource")?.as_str()?.strip_prefix("resources/")?;
        let is_sha = sha.len() == 64 && sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        (m.get("type")?.as_str()? == "image"
            && mime.starts_with("image/")
            && bytes <= MAX_IMAGE_BYTES
            && is_sha)
            .then(|| ImageRef {
                sha256: sha.to_string(),
                mime: mime.to_string(),
                bytes,
                data: None,
            })
    }))
    .take(MAX_IMAGES_PER_RESULT)
    .collect()
}

/// Builds provider input from a fold's pre-built items (see [`Fold::replay`](crate::fold::Fold::replay)).
pub(super) fn build(
    ctx: &ReplayContext,
    compaction: Option<&Entry>,
    entries: &[Entry],
    disordered: bool,
    checkpoint_to_seq: Option<u64>,
) -> Replay {
    let dev = entry(
        0,
        ReplayItem::Developer {
            text: developer_text(ctx),
        },
    );
    let mut g = Guard {
        chars: dev.chars,
        items: vec![dev.item],
        ..Guard::default()
    };
    if let Some(c) = compaction {
        g.chars += c.chars;
        g.items.push(c.item.clone());
    }
    let mut order: Vec<&Entry> = entries.iter().collect();
    if disordered {
        order.sort_by_key(|e| e.seq);
    }
    for e in order {
        match &e.item {
            ReplayItem::Reasoning { model, .. } if ctx.model.as_deref() != Some(model) => {}
            ReplayItem::FunctionCall { call_id, name, .. } => g.call(call_id, name, e),
            ReplayItem::FunctionCallOutput { call_id, .. } => g.output(call_id, e),
            _ => g.other(e),
        }
    }
    g.close();
    let count = |f: fn(&ReplayItem) -> bool| g.items.iter().filter(|i| f(i)).count();
    let stats = ReplayStats {
        items: g.items.len(),
        function_calls: count(|i| matches!(i, ReplayItem::FunctionCall { .. })),
        function_call_outputs: count(|i| matches!(i, ReplayItem::FunctionCallOutput { .. })),
        synthetic_orphan_closures: g.closures,
        balanced: pairing_violation(&g.items).is_none(),
        estimated_tokens: g.chars.div_ceil(4),
        checkpoint_to_seq,
    };
    Replay {
        items: g.items,
        stats,
    }
}

/// A point of a replay after which nothing already emitted can change: every call
/// emitted so far has its output, and the caller's renderer is at a boundary there.
/// A later replay of the same fold (same context, no new compaction) resumes from it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayMark {
    /// Fold entries consumed.
    pub entries: usize,
    /// Items emitted (the developer and compaction items included).
    pub items: usize,
    /// Seq of the last entry consumed.
    pub last_seq: Option<u64>,
    chars: u64,
    calls: usize,
    outputs: usize,
    closures: Vec<SyntheticClosure>,
    violation: bool,
}

/// A replay continued from a [`ReplayMark`] (or from the start).
#[derive(Debug)]
pub struct ReplayTail {
    /// Items after the mark (all items when started from the start).
    pub items: Vec<ReplayItem>,
    /// When asked for: the items (by index, ascending) whose large string is
    /// [`SPLICE_MARK`], with where their Log line holds it.
    pub splices: Vec<(usize, Splice)>,
    /// Stats of the whole replay, identical to [`build`]'s.
    pub stats: ReplayStats,
    /// The last stable point inside `items`: `items[..n]` never change, and the replay
    /// resumes at the mark.
    pub stable: Option<(usize, ReplayMark)>,
    /// The entry limit stopped it before the end (or `upto`): `items` after `stable`
    /// and `stats` are those of a replay that ended there, not the fold's.
    pub cut: bool,
    /// Earlier stable points, about one per `every` entries, in order (for replays as
    /// of an earlier seq).
    pub points: Vec<(usize, ReplayMark)>,
}

/// [`build`] continued from `from`, over the entries with seq ≤ `upto`, noting the last
/// point where no call is pending and `boundary` held for the last emitted item that
/// decides it (`None`: the item leaves the renderer's state as it was). Entries must be
/// in seq order (a fold that is not `disordered`).
// The fold's parts it reads plus where to resume; only `Fold::replay_tail` calls it.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_tail(
    ctx: &ReplayContext,
    compaction: Option<&Entry>,
    entries: &[Entry],
    checkpoint_to_seq: Option<u64>,
    from: Option<&ReplayMark>,
    upto: Option<u64>,
    boundary: &dyn Fn(&ReplayItem) -> Option<bool>,
    every: usize,
    splice: bool,
    limit: Option<usize>,
) -> ReplayTail {
    let mut g = Guard {
        splice,
        ..Guard::default()
    };
    let mut check = PairingCheck::default();
    let (mut calls, mut outputs, base_items, start);
    let mut closures_before: Vec<SyntheticClosure>;
    let mut at_boundary = true;
    match from {
        Some(m) => {
            g.chars = m.chars;
            calls = m.calls;
            outputs = m.outputs;
            base_items = m.items;
            start = m.entries;
            closures_before = m.closures.clone();
            check.violation = m.violation;
        }
        None => {
            calls = 0;
            outputs = 0;
            base_items = 0;
            start = 0;
            closures_before = Vec::new();
            let dev = entry(
                0,
                ReplayItem::Developer {
                    text: developer_text(ctx),
                },
            );
            g.chars = dev.chars;
            g.items.push(dev.item);
            if let Some(c) = compaction {
                g.chars += c.chars;
                g.items.push(c.item.clone());
            }
        }
    }
    let mut fed = 0usize;
    // (items in the tail, the mark's counters with the closure count so far)
    let mut stable: Option<(usize, ReplayMark, usize)> = None;
    let mut points: Vec<(usize, ReplayMark, usize)> = Vec::new();
    let mut next_point = start.saturating_add(every.max(1));
    let start = start.min(entries.len());
    let end = limit.map_or(entries.len(), |l| {
        start.saturating_add(l).min(entries.len())
    });
    let cut = end < entries.len() && upto.is_none_or(|u| entries[end].seq <= u);
    for (consumed, e) in entries[..end]
        .iter()
        .enumerate()
        .skip(start)
        .take_while(|(_, e)| upto.is_none_or(|u| e.seq <= u))
    {
        let consumed = consumed + 1;
        match &e.item {
            ReplayItem::Reasoning { model, .. } if ctx.model.as_deref() != Some(model) => {}
            ReplayItem::FunctionCall { call_id, name, .. } => g.call(call_id, name, e),
            ReplayItem::FunctionCallOutput { call_id, .. } => g.output(call_id, e),
            _ => g.other(e),
        }
        for item in &g.items[fed..] {
            match item {
                ReplayItem::FunctionCall { .. } => calls += 1,
                ReplayItem::FunctionCallOutput { .. } => outputs += 1,
                _ => {}
            }
            check.feed(item);
            if let Some(b) = boundary(item) {
                at_boundary = b;
            }
            fed += 1;
        }
        if g.pending.is_empty() && check.open.is_empty() && at_boundary {
            stable = Some((
                g.items.len(),
                ReplayMark {
                    entries: consumed,
                    items: base_items + g.items.len(),
                    last_seq: Some(e.seq),
                    chars: g.chars,
                    calls,
                    outputs,
                    closures: Vec::new(),
                    violation: check.violation,
                },
                g.closures.len(),
            ));
            if consumed >= next_point {
                if let Some(p) = &stable {
                    points.push(p.clone());
                }
                next_point = consumed.saturating_add(every.max(1));
            }
        }
    }
    g.close();
    for item in &g.items[fed..] {
        match item {
            ReplayItem::FunctionCall { .. } => calls += 1,
            ReplayItem::FunctionCallOutput { .. } => outputs += 1,
            _ => {}
        }
        check.feed(item);
    }
    let total_items = base_items + g.items.len();
    let finish = |(n, mut mark, nclos): (usize, ReplayMark, usize)| {
        mark.closures = closures_before.clone();
        mark.closures.extend(g.closures[..nclos].iter().cloned());
        (n, mark)
    };
    let stable = stable.map(finish);
    // The last point is `stable` itself when nothing stable followed it.
    if points.last().map(|p| p.1.entries) == stable.as_ref().map(|s| s.1.entries) {
        points.pop();
    }
    let points: Vec<(usize, ReplayMark)> = points.into_iter().map(finish).collect();
    closures_before.append(&mut g.closures);
    let balanced = !check.violation && check.open.is_empty();
    let stats = ReplayStats {
        items: total_items,
        function_calls: calls,
        function_call_outputs: outputs,
        synthetic_orphan_closures: closures_before,
        balanced,
        estimated_tokens: g.chars.div_ceil(4),
        checkpoint_to_seq,
    };
    ReplayTail {
        cut,
        items: g.items,
        splices: g.splices,
        stats,
        stable,
        points,
    }
}

/// [`pairing_violation`] fed one item at a time.
#[derive(Default)]
struct PairingCheck {
    open: BTreeSet<String>,
    in_outputs: bool,
    violation: bool,
}

impl PairingCheck {
    fn feed(&mut self, item: &ReplayItem) {
        match item {
            ReplayItem::FunctionCall { call_id, .. } => {
                if self.in_outputs && !self.open.is_empty() {
                    self.violation = true;
                }
                self.in_outputs = false;
                if !self.open.insert(call_id.clone()) {
                    self.violation = true;
                }
            }
            ReplayItem::FunctionCallOutput { call_id, .. } => {
                if !self.open.remove(call_id.as_str()) {
                    self.violation = true;
                }
                self.in_outputs = true;
            }
            _ => {
                if !self.open.is_empty() {
                    self.violation = true;
                }
                self.in_outputs = false;
            }
        }
    }
}

/// The pairing guard's running state while items are emitted.
#[derive(Default)]
struct Guard {
    items: Vec<ReplayItem>,
    chars: u64,
    /// Calls of the current step awaiting their output: call_id → tool name.
    pending: BTreeMap<String, String>,
    /// The current step's outputs have begun; a further call starts a new step.
    outputs_begun: bool,
    closures: Vec<SyntheticClosure>,
    /// Leave large strings in their Log lines (see [`Entry::spliced`]).
    splice: bool,
    splices: Vec<(usize, Splice)>,
}

impl Guard {
    fn emit(&mut self, e: &Entry) {
        self.chars += e.chars;
        if self.splice {
            if let Some((item, s)) = e.spliced() {
                self.splices.push((self.items.len(), s));
                self.items.push(item);
                return;
            }
        }
        self.items.push(e.full());
    }

    fn close(&mut self) {
        for (call_id, tool) in std::mem::take(&mut self.pending) {
            let output = synthetic_output(&call_id, &tool);
            self.chars += output.chars().count() as u64;
            self.items.push(ReplayItem::FunctionCallOutput {
                call_id: call_id.clone(),
                output,
                ok: false,
                synthetic: true,
                images: Vec::new(),
            });
            self.closures.push(SyntheticClosure { call_id, tool });
        }
        self.outputs_begun = false;
    }

    fn call(&mut self, call_id: &str, name: &str, e: &Entry) {
        // A call after the step's outputs began, or reusing a pending id, starts a new step.
        if self.outputs_begun || self.pending.contains_key(call_id) {
            self.close();
        }
        self.pending.insert(call_id.to_string(), name.to_string());
        self.emit(e);
    }

    fn output(&mut self, call_id: &str, e: &Entry) {
        if self.pending.remove(call_id).is_some() {
            self.outputs_begun = true;
            self.emit(e);
        }
    }

    fn other(&mut self, e: &Entry) {
        self.close();
        self.emit(e);
    }
}

/// Checks the pairing rule on replay items: every run of function calls is followed by
/// exactly one output per call (any order) before anything else, and no output stands
/// without its call. Returns a description of the first violation.
pub fn pairing_violation(items: &[ReplayItem]) -> Option<String> {
    let mut open: BTreeSet<&str> = BTreeSet::new();
    let mut in_outputs = false;
    for (i, item) in items.iter().enumerate() {
        match item {
            ReplayItem::FunctionCall { call_id, .. } => {
                if in_outputs && !open.is_empty() {
                    return Some(format!(
                        "item {i}: call {call_id} before outputs of the step"
                    ));
                }
                in_outputs = false;
                if !open.insert(call_id) {
                    return Some(format!("item {i}: call {call_id} repeated in one step"));
                }
            }
            ReplayItem::FunctionCallOutput { call_id, .. } => {
                if !open.remove(call_id.as_str()) {
                    return Some(format!("item {i}: output {call_id} without its call"));
                }
                in_outputs = true;
            }
            _ => {
                if let Some(id) = open.first() {
                    return Some(format!("item {i}: call {id} has no output"));
                }
                in_outputs = false;
            }
        }
    }
    open.first()
        .map(|id| format!("end: call {id} has no output"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{replay_as_of, Fold};
    use crate::testutil::{kinds, TestLog};

    fn ctx() -> ReplayContext {
        ReplayContext {
            workspace: "/w/proj".into(),
            permission_mode: "auto".into(),
            model: Some("m1".into()),
            ..Default::default()
        }
    }

    fn call(log: &mut TestLog, id: &str) {
        log.push(
            "tool_call",
            json!({"call_id": id, "name": "read_file", "args": {"path": "a.rs", "n": 1}}),
        );
    }
    fn result(log: &mut TestLog, id: &str) {
        log.push(
            "tool_result",
            json!({"call_id": id, "ok": true, "output": format!("out {id}")}),
        );
    }

    #[test]
    fn tool_result_images_are_references_capped_and_filtered() {
        let sha = |i: usize| format!("{i:064x}");
        let mut media: Vec<Value> = (0..10)
            .map(|i| json!({"type": "image", "mime": "image/png", "bytes": 3, "resource": format!("resources/{}", sha(i))}))
            .collect();
        media.insert(0, json!({"type": "audio", "mime": "audio/wav", "bytes": 3, "resource": format!("resources/{}", sha(90))}));
        media.insert(1, json!({"type": "blob", "mime": "image/png", "bytes": 3, "resource": format!("resources/{}", sha(91))}));
        media.insert(2, json!({"type": "image", "mime": "image/png", "bytes": MAX_IMAGE_BYTES + 1, "resource": format!("resources/{}", sha(92))}));
        media.insert(3, json!({"type": "image", "mime": "text/plain", "bytes": 3, "resource": format!("resources/{}", sha(93))}));
        media.insert(
            4,
            json!({"type": "image", "mime": "image/png", "bytes": 3, "error": "disk full"}),
        );
        media.insert(5, json!({"type": "image", "mime": "image/png", "bytes": 3, "resource": "resources/../../etc/passwd"}));
        let mut log = TestLog::new();
        log.push("user_message", json!({"text": "go"}));
        call(&mut log, "a");
        log.push(
            "tool_result",
            json!({"call_id": "a", "ok": true, "output": "[image]", "mcp": {"media": media}}),
        );
        let r = replay_as_of(&log.events, None, &ctx());
        let ReplayItem::FunctionCallOutput { images, output, .. } = &r.items[3] else {
            panic!("{:?}", r.items);
        };
        assert_eq!(output, "[image]");
        let shas: Vec<String> = images.iter().map(|i| i.sha256.clone()).collect();
        assert_eq!(
            shas,
            (0..MAX_IMAGES_PER_RESULT).map(sha).collect::<Vec<_>>()
        );
        assert!(images
            .iter()
            .all(|i| i.data.is_none() && i.mime == "image/png"));
        // The Log's reference round-trips; loaded bytes never serialize.
        let mut loaded = r.items[3].clone();
        if let ReplayItem::FunctionCallOutput { images, .. } = &mut loaded {
            images[0].data = Some("AQID".into());
        }
        let text = serde_json::to_string(&loaded).unwrap();
        assert!(!text.contains("AQID") && text.contains(&sha(0)), "{text}");
        // A result without images serializes as before.
        result(&mut log, "b");
        let plain = replay_item(log.events.last().unwrap()).unwrap();
        assert!(!serde_json::to_string(&plain).unwrap().contains("images"));
        assert!(Fold::from_events(&log.events).has_images());
    }

    #[test]
    fn orphans_are_closed_and_stray_results_dropped() {
        let mut log = TestLog::new();
        log.push("user_message", json!({"text": "go"}));
        call(&mut log, "b");
        call(&mut log, "a");
        result(&mut log, "b");
        result(&mut log, "b"); // duplicate: dropped
        result(&mut log, "zz"); // no call: dropped
        log.push("user_message", json!({"text": "next"}));
        call(&mut log, "c"); // orphan at the end
        let r = replay_as_of(&log.events, None, &ctx());
        assert_eq!(
            kinds(&r),
            [
                "dev",
                "user:go",
                "call:b",
                "call:a",
                "out:b",
                "out:a*",
                "user:next",
                "call:c",
                "out:c*"
            ]
        );
        assert_eq!(
            r.stats.synthetic_orphan_closures,
            [
                SyntheticClosure {
                    call_id: "a".into(),
                    tool: "read_file".into()
                },
                SyntheticClosure {
                    call_id: "c".into(),
                    tool: "read_file".into()
                }
            ]
        );
        match &r.items[5] {
            ReplayItem::FunctionCallOutput {
                output, ok: false, ..
            } => {
                let v: Value = serde_json::from_str(output).unwrap();
                assert_eq!(v["error"]["kind"], "orphan_tool_call");
                assert_eq!(
                    v["error"]["details"],
                    json!({"call_id": "a", "tool": "read_file"})
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(r.stats.balanced);
        let f = Fold::from_events(&log.events);
        let pending: Vec<_> = f
            .pending_calls()
            .into_iter()
            .map(|p| (p.call_id, p.seq))
            .collect();
        assert_eq!(pending, [("a".to_string(), 2), ("c".to_string(), 7)]);
    }

    #[test]
    fn a_call_after_the_steps_outputs_starts_a_new_step() {
        let mut log = TestLog::new();
        call(&mut log, "a");
        call(&mut log, "b");
        result(&mut log, "a");
        call(&mut log, "c");
        result(&mut log, "b"); // its step was closed: dropped
        result(&mut log, "c");
        let r = replay_as_of(&log.events, None, &ctx());
        assert_eq!(
            kinds(&r),
            ["dev", "call:a", "call:b", "out:a", "out:b*", "call:c", "out:c"]
        );
        assert!(r.stats.balanced);
    }

    #[test]
    fn pairing_violation_detects_broken_input() {
        let c = |id: &str| ReplayItem::FunctionCall {
            call_id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        };
        let o = |id: &str| ReplayItem::FunctionCallOutput {
            call_id: id.into(),
            output: String::new(),
            ok: true,
            synthetic: false,
            images: Vec::new(),
        };
        let u = ReplayItem::User {
            text: "x".into(),
            images: Vec::new(),
        };
        assert!(pairing_violation(&[c("a"), o("a"), u.clone()]).is_none());
        assert!(pairing_violation(&[c("a"), u.clone(), o("a")]).is_some());
        assert!(pairing_violation(&[o("a")]).is_some());
        assert!(pairing_violation(&[c("a"), c("b"), o("a"), c("d"), o("b"), o("d")]).is_some());
        assert!(pairing_violation(&[c("a")]).is_some());
    }

    #[test]
    fn replay_is_byte_identical_and_estimates_tokens() {
        let mut log = TestLog::new();
        log.push("user_message", json!({"text": "abcd"}));
        call(&mut log, "x");
        let a = serde_json::to_string(&replay_as_of(&log.events, None, &ctx())).unwrap();
        let b = serde_json::to_string(&Fold::from_events(&log.events).replay(&ctx())).unwrap();
        assert_eq!(a, b);
        let r = replay_as_of(&log.events[..1], None, &ctx());
        let dev = developer_text(&ctx()).chars().count() as u64;
        assert_eq!(r.stats.estimated_tokens, (dev + 4).div_ceil(4));
    }
}
