//! Claude Code transcripts (`~/.claude/projects/<dir>/<uuid>.jsonl`) → agentd events.
//!
//! Format (learned from real transcripts): one JSON record per line. Conversation
//! records (`user`, `assistant`, `system`, `attachment`) carry `uuid` and `parentUuid`,
//! so a file is a tree; bookkeeping records (`last-prompt`, `queue-operation`,
//! `api-request*`, `cost-state`, …) carry no uuid. One API message is written as one
//! `assistant` record per content block, all with the same `message.id` and the same
//! `usage`.
//!
//! Two passes keep memory bounded by the number of records, not their bytes:
//! pass 1 skims each line (type, uuid, parent, message id) into a compact node table;
//! the active branch is the walk from the leaf (the last `last-prompt.leafUuid`, or the
//! newest conversation record when that descends from it) to the root. Parallel tool
//! calls branch the tree (each result points at its own `tool_use` record), so the
//! branch is widened by every `assistant` record sharing a `message.id` with it and the
//! `user` records answering those. Pass 2 seeks to the kept records in file order.
//!
//! Sidechain (subagent) records are never mixed into the conversation: each becomes a
//! `subagent_event` (stored and shown, never replayed), in file order.

use std::collections::{HashMap, HashSet};

use agentd_proto::AgentError;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::lines::LineReader;
use super::sink::{Disposition, Sink};
use super::{
    emit_session_started, parse_line, read_error, str_of, Format, Header, ImportContext,
    ImportReport, Source, IMPORTED_NOTE,
};

type Cow<'a> = std::borrow::Cow<'a, str>;

#[derive(Deserialize)]
struct Skim<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a>>,
    #[serde(borrow)]
    uuid: Option<Cow<'a>>,
    #[serde(rename = "parentUuid", borrow)]
    parent: Option<Cow<'a>>,
    #[serde(rename = "logicalParentUuid", borrow)]
    logical_parent: Option<Cow<'a>>,
    #[serde(rename = "isSidechain")]
    sidechain: Option<bool>,
    #[serde(rename = "leafUuid", borrow)]
    leaf: Option<Cow<'a>>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<Cow<'a>>,
    #[serde(borrow)]
    cwd: Option<Cow<'a>>,
    #[serde(borrow)]
    timestamp: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    message: Option<SkimMessage<'a>>,
    #[serde(borrow)]
    attachment: Option<SkimAttachment<'a>>,
    #[serde(rename = "customTitle", borrow)]
    custom_title: Option<Cow<'a>>,
    #[serde(borrow)]
    summary: Option<Cow<'a>>,
}

#[derive(Deserialize)]
struct SkimMessage<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a>>,
    #[serde(borrow)]
    model: Option<Cow<'a>>,
    #[serde(default)]
    content: SkimContent,
}

/// The tool ids a record's content names: `tool_use` ids of an assistant record,
/// `tool_use_id`s of a user record's `tool_result` blocks. A string content names none.
#[derive(Default)]
struct SkimContent {
    ids: Vec<Box<str>>,
}

#[derive(Deserialize)]
struct SkimBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a>>,
    #[serde(borrow)]
    id: Option<Cow<'a>>,
    #[serde(borrow)]
    tool_use_id: Option<Cow<'a>>,
}

impl<'de> Deserialize<'de> for SkimContent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SkimContent;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of content blocks")
            }
            fn visit_str<E>(self, _: &str) -> Result<SkimContent, E> {
                Ok(SkimContent::default())
            }
            fn visit_unit<E>(self) -> Result<SkimContent, E> {
                Ok(SkimContent::default())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SkimContent, A::Error> {
                let mut ids = Vec::new();
                while let Some(b) = seq.next_element::<Option<SkimBlock<'de>>>()? {
                    let Some(b) = b else { continue };
                    let id = match b.kind.as_deref() {
                        Some("tool_use" | "server_tool_use") => b.id,
                        Some("tool_result") => b.tool_use_id,
                        _ => None,
                    };
                    if let Some(id) = id {
                        ids.push(Box::from(id.as_ref()));
                    }
                }
                Ok(SkimContent { ids })
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct SkimAttachment<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    User,
    Assistant,
    System,
    Other,
}

/// What pass 1 keeps of a record with a uuid.
struct Node {
    parent: Option<u32>,
    parent_name: Option<Box<str>>,
    line: u64,
    offset: u64,
    kind: Kind,
    sidechain: bool,
    /// Index into the message-id table (assistant records).
    msg: Option<u32>,
    /// Tool ids the content names: the calls of an assistant record, the calls a user
    /// record's results answer.
    tools: Box<[Box<str>]>,
    /// Already accounted for in pass 1 (attachments, replaced duplicates).
    done: bool,
}

/// A uuid → node index table; parents may appear before or after their children.
#[derive(Default)]
struct Ids {
    map: HashMap<Box<str>, u32>,
}

impl Ids {
    fn get(&self, s: &str) -> Option<u32> {
        self.map.get(s).copied()
    }
}

/// The fields pass 2 reads. Everything else (notably `toolUseResult`, which repeats a
/// tool's output in the harness's own shape) is skipped without being built.
#[derive(Deserialize)]
struct Rec {
    #[serde(rename = "type")]
    kind: Option<Value>,
    #[serde(rename = "isSidechain")]
    sidechain: Option<Value>,
    timestamp: Option<Value>,
    message: Option<Value>,
    #[serde(rename = "isMeta")]
    is_meta: Option<Value>,
    #[serde(rename = "isCompactSummary")]
    compact_summary: Option<Value>,
    #[serde(rename = "isApiErrorMessage")]
    api_error: Option<Value>,
    subtype: Option<Value>,
    #[serde(rename = "agentId")]
    agent_id: Option<Value>,
    uuid: Option<Value>,
    #[serde(rename = "parentUuid")]
    parent_uuid: Option<Value>,
}

impl Rec {
    fn into_map(self) -> Map<String, Value> {
        let mut m = Map::new();
        for (k, v) in [
            ("type", self.kind),
            ("isSidechain", self.sidechain),
            ("timestamp", self.timestamp),
            ("message", self.message),
            ("isMeta", self.is_meta),
            ("isCompactSummary", self.compact_summary),
            ("isApiErrorMessage", self.api_error),
            ("subtype", self.subtype),
            ("agentId", self.agent_id),
            ("uuid", self.uuid),
            ("parentUuid", self.parent_uuid),
        ] {
            if let Some(v) = v {
                m.insert(k.to_string(), v);
            }
        }
        m
    }
}

/// A kept line as the fields pass 2 reads, or `None` after listing why it is skipped.
fn pass2_record(sink: &mut Sink<'_>, line: &super::lines::Line<'_>) -> Option<Map<String, Value>> {
    if line.oversized.is_some() || !line.terminated {
        return parse_line(sink, line);
    }
    match serde_json::from_slice::<Rec>(line.bytes) {
        Ok(r) => Some(r.into_map()),
        Err(_) => parse_line(sink, line),
    }
}

/// Everything pass 1 learns.
#[derive(Default)]
struct Pass1 {
    nodes: Vec<Node>,
    ids: Ids,
    msg_ids: HashMap<Box<str>, u32>,
    last_prompt_leaf: Option<String>,
    /// The newest main-chain conversation record.
    newest: Option<u32>,
    header: Header,
    custom_title: Option<String>,
    summary_title: Option<String>,
}

pub(super) fn import(
    src: Source,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let path = src.path.clone();
    let mut reader = LineReader::file(src.file);
    let mut sink = Sink::new(out, &ctx.session_id);

    let mut p1 = Pass1::default();
    let mut source_lines = 0;
    while let Some(line) = reader.next_line().map_err(read_error)? {
        source_lines = line.no;
        let (no, offset) = (line.no, line.offset);
        if line.oversized.is_some()
            || !line.terminated
            || line.bytes.iter().all(u8::is_ascii_whitespace)
        {
            // The shared parser words the reason (and keeps a complete last line).
            let Some(obj) = parse_line(&mut sink, &line) else {
                continue;
            };
            let bytes = serde_json::to_vec(&obj).unwrap_or_default();
            match serde_json::from_slice::<Skim<'_>>(&bytes) {
                Ok(s) => p1.record(&mut sink, no, offset, s),
                Err(e) => sink.skip(
                    no,
                    format!("Claude Code record with unexpected field types: {e}"),
                ),
            }
            continue;
        }
        // The skim does not look inside the fields it ignores, so bytes that are not
        // UTF-8 are caught here rather than passing as a well-formed record.
        if let Err(e) = std::str::from_utf8(line.bytes) {
            sink.skip(
                no,
                format!(
                    "line is not valid UTF-8 (bad byte at offset {})",
                    e.valid_up_to()
                ),
            );
            continue;
        }
        match serde_json::from_slice::<Skim<'_>>(line.bytes) {
            Ok(s) => p1.record(&mut sink, no, offset, s),
            Err(e) => {
                if parse_line(&mut sink, &line).is_some() {
                    sink.skip(
                        no,
                        format!("Claude Code record with unexpected field types: {e}"),
                    );
                }
            }
        }
    }
    if p1.nodes.iter().all(|n| n.kind == Kind::Other) {
        return Err(AgentError::invalid_args(format!(
            "{} is not a Claude Code transcript: no user or assistant record with a uuid",
            path.display()
        )));
    }

    let mut h = std::mem::take(&mut p1.header);
    h.title = p1.custom_title.take().or(p1.summary_title.take());
    emit_session_started(&mut sink, Format::Claude, &path, ctx, &h)?;

    let keep = p1.active_set(&mut sink);
    drop(p1);

    let mut st = State {
        model: h.model.clone(),
        ..State::default()
    };
    for (offset, no, rescued) in keep {
        reader.seek_to(offset, no).map_err(read_error)?;
        let Some(line) = reader.next_line().map_err(read_error)? else {
            return Err(AgentError::internal(
                "the source file shrank while it was being imported",
            ));
        };
        if let Some(obj) = pass2_record(&mut sink, &line) {
            st.record(&mut sink, no, obj, rescued)?;
        }
    }
    st.flush(&mut sink)?;
    sink.warn_images(st.images);
    sink.finish(source_lines)
}

impl Pass1 {
    fn record(&mut self, sink: &mut Sink<'_>, no: u64, offset: u64, mut skim: Skim<'_>) {
        let kind = skim.kind.as_deref().unwrap_or("?");
        sink.count(match &skim.attachment {
            Some(a) => format!("attachment:{}", clip(a.kind.as_deref().unwrap_or("?"))),
            None => clip(kind),
        });
        let h = &mut self.header;
        if h.source_session_id.is_none() {
            h.source_session_id = skim.session_id.as_deref().map(str::to_string);
        }
        if h.cwd.is_none() && skim.sidechain != Some(true) {
            h.cwd = skim.cwd.as_deref().map(str::to_string);
        }
        if h.ts.is_none() && skim.uuid.is_some() {
            h.ts = skim
                .timestamp
                .and_then(|t| serde_json::from_str(t.get()).ok());
        }
        let Some(uuid) = skim.uuid.as_deref() else {
            self.bookkeeping(sink, no, kind, &skim);
            return;
        };
        let node_kind = match kind {
            "user" => Kind::User,
            "assistant" => Kind::Assistant,
            "system" => Kind::System,
            _ => Kind::Other,
        };
        let sidechain = skim.sidechain == Some(true);
        let tools: Box<[Box<str>]> = match (&mut skim.message, node_kind) {
            (Some(m), Kind::User | Kind::Assistant) => std::mem::take(&mut m.content.ids).into(),
            _ => Box::default(),
        };
        let msg = match (&skim.message, node_kind) {
            (Some(m), Kind::Assistant) => {
                if h.model.is_none() && !sidechain {
                    h.model = m
                        .model
                        .as_deref()
                        .filter(|m| !m.starts_with('<'))
                        .map(str::to_string);
                }
                m.id.as_deref().map(|id| {
                    let next = self.msg_ids.len() as u32;
                    *self.msg_ids.entry(id.into()).or_insert(next)
                })
            }
            _ => None,
        };
        // A compacted transcript restarts the chain at a boundary that names the
        // conversation it summarized through `logicalParentUuid`.
        let parent_name = skim
            .parent
            .as_deref()
            .or(skim.logical_parent.as_deref())
            .map(Box::<str>::from);
        let mut done = false;
        if node_kind == Kind::Other {
            done = true;
            match &skim.attachment {
                Some(a) => sink.skip(
                    no,
                    format!(
                        "attachment {:?}: context the Claude Code harness adds to its requests; agentd supplies its own",
                        clip(a.kind.as_deref().unwrap_or("?"))
                    ),
                ),
                None => sink.skip(no, format!("unknown Claude Code record type {:?}", clip(kind))),
            }
        }
        let idx = self.nodes.len() as u32;
        if let Some(old) = self.ids.map.insert(uuid.into(), idx) {
            let old = &mut self.nodes[old as usize];
            if !old.done {
                old.done = true;
                sink.skip(
                    old.line,
                    format!(
                        "Claude Code uuid {} is reused by line {no}; the later record wins",
                        clip(uuid)
                    ),
                );
            }
        }
        self.nodes.push(Node {
            parent: None,
            parent_name,
            line: no,
            offset,
            kind: node_kind,
            sidechain,
            msg,
            tools,
            done,
        });
        if !sidechain && node_kind != Kind::Other {
            self.newest = Some(idx);
        }
    }

    /// Records without a uuid: read for context or skipped, each with its reason.
    fn bookkeeping(&mut self, sink: &mut Sink<'_>, no: u64, kind: &str, skim: &Skim<'_>) {
        let why = match kind {
            "last-prompt" => {
                if let Some(l) = skim.leaf.as_deref() {
                    self.last_prompt_leaf = Some(l.to_string());
                }
                sink.account(Disposition::Metadata);
                return;
            }
            "custom-title" => {
                self.custom_title = skim.custom_title.as_deref().map(str::to_string);
                sink.account(Disposition::Metadata);
                return;
            }
            "summary" => {
                if self.summary_title.is_none() {
                    self.summary_title = skim.summary.as_deref().map(str::to_string);
                }
                sink.account(Disposition::Metadata);
                return;
            }
            "api-request" | "api-request-blob" | "api-request-shape" => {
                "a copy of an HTTP request Claude Code sent; the conversation records hold what matters"
            }
            "queue-operation" => "Claude Code's prompt queue bookkeeping; the prompt itself is a user record",
            "cost-state" => "Claude Code's running cost totals; usage is imported per message",
            "tools-used" | "atis-latch" | "mode" | "file-history-snapshot" | "permission-mode"
            | "agent-name" | "tag" | "pr-link" => "Claude Code UI/session bookkeeping, not conversation",
            "user" | "assistant" | "system" | "attachment" => {
                sink.skip(no, format!("Claude Code {kind} record without a uuid"));
                return;
            }
            _ => {
                sink.skip(no, format!("unknown Claude Code record type {:?}", clip(kind)));
                return;
            }
        };
        sink.skip(no, format!("{kind}: {why}"));
    }

    /// The records to import, as `(offset, line, rescued)` in file order, after listing
    /// every other record as skipped.
    fn active_set(&mut self, sink: &mut Sink<'_>) -> Vec<(u64, u64, bool)> {
        for i in 0..self.nodes.len() {
            let p = self.nodes[i]
                .parent_name
                .take()
                .map(|name| (self.ids.get(&name), name));
            match p {
                Some((Some(pi), _)) => self.nodes[i].parent = Some(pi),
                Some((None, name)) => self.nodes[i].parent_name = Some(name),
                None => {}
            }
        }
        let newest = self.newest;
        let prompt_leaf = self
            .last_prompt_leaf
            .as_deref()
            .and_then(|l| self.ids.get(l));
        // The newest record wins when it continues the `last-prompt` leaf (that record is
        // written mid-turn); otherwise the leaf names a branch the user went back to.
        let leaf = match (prompt_leaf, newest) {
            (Some(pl), Some(n)) if self.ancestors(n).contains(&pl) => Some(n),
            (Some(pl), _) => Some(pl),
            (None, n) => n,
        };
        let mut on_branch: HashSet<u32> = HashSet::new();
        if let Some(leaf) = leaf {
            let chain = self.ancestors(leaf);
            if let Some(&root) = chain.last() {
                if let Some(name) = &self.nodes[root as usize].parent_name {
                    sink.warn(format!(
                        "the active branch refers to a missing parent record {}; import starts after it",
                        clip(name)
                    ));
                }
            }
            on_branch.extend(chain);
        }
        let msgs: HashSet<u32> = on_branch
            .iter()
            .filter_map(|&i| self.nodes[i as usize].msg)
            .collect();
        let mut rescued: HashSet<u32> = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let i = i as u32;
            if !n.sidechain && !on_branch.contains(&i) && n.msg.is_some_and(|m| msgs.contains(&m)) {
                rescued.insert(i);
            }
        }
        // Results are matched to calls by `tool_use_id`, never by where they sit in the
        // tree: Claude Code may write a parallel pair's results in either order, each
        // pointing at its own call, so the walk passes through one of them only. A user
        // record off the branch is kept when it answers a call of the branch that no
        // record on the branch answers.
        let mut open: HashSet<&str> = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let i = i as u32;
            if n.kind == Kind::Assistant && (on_branch.contains(&i) || rescued.contains(&i)) {
                open.extend(n.tools.iter().map(|t| &**t));
            }
        }
        for &i in &on_branch {
            let n = &self.nodes[i as usize];
            if n.kind == Kind::User {
                for t in n.tools.iter() {
                    open.remove(&**t);
                }
            }
        }
        let answers: Vec<u32> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                n.kind == Kind::User
                    && !n.sidechain
                    && !n.done
                    && !on_branch.contains(&(*i as u32))
                    && n.tools.iter().any(|t| open.contains(&**t))
            })
            .map(|(i, _)| i as u32)
            .collect();
        rescued.extend(answers);
        let leaf_line = leaf.map(|l| self.nodes[l as usize].line).unwrap_or(0);
        let mut keep = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.done {
                continue;
            }
            let i = i as u32;
            if n.sidechain || on_branch.contains(&i) || rescued.contains(&i) {
                keep.push((n.offset, n.line, rescued.contains(&i)));
            } else {
                sink.skip(
                    n.line,
                    format!("not on the active branch (leaf at line {leaf_line})"),
                );
            }
        }
        keep
    }

    /// `i` and its ancestors, leaf first; stops at a missing parent or a cycle.
    fn ancestors(&self, i: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = Some(i);
        while let Some(c) = cur {
            if !seen.insert(c) {
                break;
            }
            out.push(c);
            cur = self.nodes[c as usize].parent;
        }
        out
    }
}

/// One API message being merged from its per-block records.
struct Pending {
    msg_id: String,
    model: String,
    ts: Option<Value>,
    line: u64,
    reasoning: Vec<Value>,
    text: Vec<String>,
    calls: Vec<(String, String, Value)>,
    usage: Option<Value>,
    partial: bool,
}

#[derive(Default)]
struct State {
    model: Option<String>,
    pending: Option<Pending>,
    /// Message ids already written; a straggling block of one is written on its own and
    /// its usage is not counted twice.
    flushed: HashSet<String>,
    calls: HashSet<String>,
    answered: HashSet<String>,
    images: u64,
}

impl State {
    fn record(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        obj: Map<String, Value>,
        rescued: bool,
    ) -> Result<(), AgentError> {
        // Events this line wrote decide its bucket; a flush writes an earlier message's
        // (already accounted for), so `before` is taken again after one.
        let mut before = sink.written();
        let sidechain = obj.get("isSidechain").and_then(Value::as_bool) == Some(true);
        let kind = str_of(&obj, "type").unwrap_or("");
        if sidechain {
            self.sidechain(sink, no, &obj)?;
        } else {
            match kind {
                "assistant" => {
                    self.assistant(sink, no, &obj)?;
                    return Ok(());
                }
                "user" => {
                    self.flush(sink)?;
                    before = sink.written();
                    self.user(sink, no, &obj, rescued)?;
                }
                "system" => {
                    self.flush(sink)?;
                    before = sink.written();
                    match str_of(&obj, "subtype") {
                        Some("compact_boundary") => {
                            sink.account(Disposition::Metadata);
                            return Ok(());
                        }
                        sub => sink.skip(
                            no,
                            format!(
                                "Claude Code system record (subtype {:?}): a harness notice, not conversation",
                                clip(sub.unwrap_or("?"))
                            ),
                        ),
                    }
                }
                other => sink.skip(
                    no,
                    format!("unknown Claude Code record type {:?}", clip(other)),
                ),
            }
        }
        sink.account_if_imported(before);
        Ok(())
    }

    fn assistant(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        obj: &Map<String, Value>,
    ) -> Result<(), AgentError> {
        let Some(Value::Object(m)) = obj.get("message") else {
            sink.skip(no, "Claude Code assistant record without a message");
            return Ok(());
        };
        let msg_id = str_of(m, "id")
            .map(str::to_string)
            .unwrap_or_else(|| format!("line-{no}"));
        let same = self.pending.as_ref().is_some_and(|p| p.msg_id == msg_id);
        if !same {
            self.flush(sink)?;
        }
        let model = str_of(m, "model")
            .filter(|m| !m.starts_with('<'))
            .map(str::to_string)
            .or_else(|| self.model.clone())
            .unwrap_or_else(|| "unknown".to_string());
        let synthetic = str_of(m, "model").is_some_and(|m| m.starts_with('<'));
        let p = self.pending.get_or_insert_with(|| Pending {
            usage: None,
            msg_id: msg_id.clone(),
            model,
            ts: obj.get("timestamp").cloned(),
            line: no,
            reasoning: Vec::new(),
            text: Vec::new(),
            calls: Vec::new(),
            partial: obj.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true),
        });
        if !synthetic && !self.flushed.contains(&msg_id) {
            if let Some(u) = m.get("usage") {
                // Every block of a message repeats the message's usage; the last seen is
                // the final count.
                p.usage = Some(u.clone());
            }
        }
        let blocks: Vec<Value> = match m.get("content") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            _ => Vec::new(),
        };
        let mut used = false;
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                    if !t.is_empty() {
                        p.text.push(t.to_string());
                        used = true;
                    }
                }
                Some("thinking" | "redacted_thinking") => {
                    p.reasoning.push(b);
                    used = true;
                }
                Some("tool_use" | "server_tool_use") => {
                    let (Some(id), Some(name)) = (
                        b.get("id").and_then(Value::as_str),
                        b.get("name").and_then(Value::as_str),
                    ) else {
                        sink.warn(format!(
                            "line {no}: a tool_use block without id or name was dropped"
                        ));
                        continue;
                    };
                    let args = match b.get("input") {
                        Some(v @ Value::Object(_)) => v.clone(),
                        Some(v) => json!({"input": v}),
                        None => json!({}),
                    };
                    p.calls.push((id.to_string(), name.to_string(), args));
                    used = true;
                }
                other => sink.warn(format!(
                    "line {no}: Claude Code assistant block of type {:?} was dropped",
                    clip(other.unwrap_or("?"))
                )),
            }
        }
        if used {
            sink.account(Disposition::Imported);
        } else {
            sink.skip(
                no,
                "Claude Code assistant record with no text, thinking or tool use",
            );
        }
        Ok(())
    }

    /// Writes the pending message as one step: reasoning, text, tool calls, usage.
    fn flush(&mut self, sink: &mut Sink<'_>) -> Result<(), AgentError> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let ts = p.ts.as_ref();
        let no = p.line;
        for item in p.reasoning {
            sink.emit(
                "reasoning",
                json!({"item": item, "model": p.model, "dialect": "anthropic", "import_line": no}),
                ts,
            )?;
        }
        if !p.text.is_empty() {
            let mut data =
                json!({"text": p.text.join("\n\n"), "import_line": no, "message_id": p.msg_id});
            if p.partial {
                data["metadata"] = json!({"partial": true, "api_error": true});
            }
            sink.emit("assistant_message", data, ts)?;
        }
        for (id, name, args) in p.calls {
            if !self.calls.insert(id.clone()) {
                sink.warn(format!(
                    "line {no}: a second tool_use with id {} was dropped",
                    clip(&id)
                ));
                continue;
            }
            sink.emit(
                "tool_call",
                json!({"call_id": id, "name": name, "args": args, "import_line": no}),
                ts,
            )?;
        }
        if let Some(u) = p.usage {
            sink.emit("provider_usage", usage_data(&p.model, &u, no), ts)?;
        }
        self.flushed.insert(p.msg_id);
        Ok(())
    }

    fn user(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        obj: &Map<String, Value>,
        rescued: bool,
    ) -> Result<(), AgentError> {
        let ts = obj.get("timestamp");
        let content = obj.get("message").and_then(|m| m.get("content"));
        if obj.get("isCompactSummary").and_then(Value::as_bool) == Some(true) {
            let summary = self.text_of(content);
            sink.emit(
                IMPORTED_NOTE,
                json!({"source": "claude", "kind": "compaction", "summary": summary, "import_line": no}),
                ts,
            )?;
            return Ok(());
        }
        if obj.get("isMeta").and_then(Value::as_bool) == Some(true) {
            sink.skip(
                no,
                "Claude Code meta message (a harness note hidden from the user)",
            );
            return Ok(());
        }
        let before = sink.written();
        let mut texts: Vec<String> = Vec::new();
        match content {
            Some(Value::String(s)) => texts.push(s.clone()),
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("tool_result") => self.result(sink, no, b, ts)?,
                        Some("text") => texts.push(
                            b.get("text")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        ),
                        Some("image") => {
                            self.images += 1;
                            texts.push("[image not imported]".to_string());
                        }
                        Some("document") => texts.push("[document not imported]".to_string()),
                        other => sink.warn(format!(
                            "line {no}: Claude Code user block of type {:?} was dropped",
                            clip(other.unwrap_or("?"))
                        )),
                    }
                }
            }
            _ => {}
        }
        let text = texts.join("\n");
        if !text.is_empty() {
            if rescued {
                sink.warn(format!(
                    "line {no}: text of a user record off the active branch was not imported"
                ));
            } else {
                sink.emit("user_message", json!({"text": text, "import_line": no}), ts)?;
            }
        }
        if sink.written() == before {
            sink.skip(
                no,
                "Claude Code user record with nothing to import (no text, or tool results without a matching call; see warnings)",
            );
        }
        Ok(())
    }

    fn result(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        b: &Value,
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let Some(call_id) = b.get("tool_use_id").and_then(Value::as_str) else {
            sink.warn(format!(
                "line {no}: a tool_result without tool_use_id was dropped"
            ));
            return Ok(());
        };
        if !self.calls.contains(call_id) {
            sink.warn(format!(
                "line {no}: tool_result for {} that has no earlier tool_use was dropped",
                clip(call_id)
            ));
            return Ok(());
        }
        if !self.answered.insert(call_id.to_string()) {
            sink.warn(format!(
                "line {no}: a second tool_result for {} was dropped",
                clip(call_id)
            ));
            return Ok(());
        }
        let ok = b.get("is_error").and_then(Value::as_bool) != Some(true);
        let output = self.text_of(b.get("content"));
        let output = sink.cap(output);
        sink.emit(
            "tool_result",
            json!({"call_id": call_id, "ok": ok, "output": output, "import_line": no}),
            ts,
        )?;
        Ok(())
    }

    fn sidechain(
        &mut self,
        sink: &mut Sink<'_>,
        no: u64,
        obj: &Map<String, Value>,
    ) -> Result<(), AgentError> {
        let kind = str_of(obj, "type").unwrap_or("?");
        let m = obj.get("message");
        let content = m.and_then(|m| m.get("content"));
        let mut calls = Vec::new();
        let mut results = Vec::new();
        if let Some(Value::Array(blocks)) = content {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("tool_use") => calls.push(json!({
                        "id": b.get("id"), "name": b.get("name"), "input": b.get("input"),
                    })),
                    Some("tool_result") => results.push(json!({
                        "tool_use_id": b.get("tool_use_id"),
                        "ok": b.get("is_error").and_then(Value::as_bool) != Some(true),
                        "output": sink.cap(self.text_of(b.get("content"))),
                    })),
                    _ => {}
                }
            }
        }
        let text = sink.cap(self.text_of(content));
        let mut data = json!({
            "source": "claude",
            "agent_id": str_of(obj, "agentId"),
            "record": kind,
            "uuid": str_of(obj, "uuid"),
            "parent_uuid": str_of(obj, "parentUuid"),
            "text": text,
            "import_line": no,
        });
        if let Some(model) = m.and_then(|m| m.get("model")) {
            data["model"] = model.clone();
        }
        if !calls.is_empty() {
            data["tool_calls"] = json!(calls);
        }
        if !results.is_empty() {
            data["tool_results"] = json!(results);
        }
        if let Some(u) = m.and_then(|m| m.get("usage")) {
            data["usage"] = u.clone();
        }
        sink.emit("subagent_event", data, obj.get("timestamp"))?;
        Ok(())
    }

    /// Text of a Claude content value (a string, or text/image blocks).
    fn text_of(&mut self, content: Option<&Value>) -> String {
        let images = &mut self.images;
        crate::content_text(content, &["text"], |b| {
            (b.get("type").and_then(Value::as_str) == Some("image")).then(|| {
                *images += 1;
                "[image not imported]".to_string()
            })
        })
    }
}

/// Anthropic usage → `provider_usage.data` (input counts cache reads and writes, as the
/// live Anthropic provider records it).
fn usage_data(model: &str, u: &Value, no: u64) -> Value {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cache_read_input_tokens");
    let input = n("input_tokens") + cached + n("cache_creation_input_tokens");
    let output = n("output_tokens");
    let reasoning = u
        .get("output_tokens_details")
        .and_then(|d| d.get("thinking_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    json!({
        "provider": "anthropic",
        "model": model,
        "usage": {
            "input_tokens": input,
            "cached_tokens": cached,
            "output_tokens": output,
            "reasoning_tokens": reasoning,
            "total_tokens": input + output,
        },
        "import_line": no,
    })
}

fn clip(s: &str) -> String {
    agentd_base::text::clip_chars(s, 80)
}

#[cfg(test)]
mod tests {
    use super::super::{import, Format, ImportContext, ImportReport};
    use agentd_proto::Event;
    use serde_json::{json, Value};

    fn rec(kind: &str, uuid: &str, parent: Option<&str>, content: Value) -> String {
        let mut v = json!({
            "type": kind, "uuid": uuid, "parentUuid": parent, "isSidechain": false,
            "sessionId": "s-1", "cwd": "/w", "timestamp": "2026-11-25T06:00:00Z",
        });
        if kind == "assistant" {
            v["message"] = json!({"id": format!("m-{uuid}"), "role": "assistant",
                "model": "claude-x", "content": content,
                "usage": {"input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": 1}});
        } else {
            v["message"] = json!({"role": "user", "content": content});
        }
        v.to_string()
    }

    /// Found by `import_claude` (`fuzz/regressions/import_claude/`): every source line
    /// lands in exactly one bucket.
    #[test]
    fn every_line_lands_in_one_bucket_with_reused_uuids_and_broken_lines() {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/regressions/import_claude/line-tally-duplicate-uuid"
        ))
        .unwrap();
        let (r, _) = run_bytes(&bytes);
        let t = &r.lines;
        assert_eq!(
            t.imported + t.metadata + t.ui_only + t.skipped,
            r.source_lines,
            "{t:?} {:#?}",
            r.skipped
        );
    }

    fn text(t: &str) -> Value {
        json!([{"type": "text", "text": t}])
    }

    fn run(lines: &[String]) -> (ImportReport, Vec<Event>) {
        run_bytes((lines.join("\n") + "\n").as_bytes())
    }

    /// Imports `bytes` as a Claude Code transcript.
    fn run_bytes(bytes: &[u8]) -> (ImportReport, Vec<Event>) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, bytes).unwrap();
        let ctx = ImportContext {
            session_id: "s".into(),
            agentd_version: "t".into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        let r = import(Some(Format::Claude), &p, &mut out, &ctx).unwrap();
        let evs = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (r, evs)
    }

    fn texts(evs: &[Event], kind: &str) -> Vec<String> {
        evs.iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.data["text"].as_str().unwrap_or("").to_string())
            .collect()
    }

    fn base() -> Vec<String> {
        vec![
            rec("user", "u1", None, json!("first")),
            rec("assistant", "a1", Some("u1"), text("answer 1")),
            rec("user", "u2", Some("a1"), json!("second")),
            rec("assistant", "a2", Some("u2"), text("answer 2")),
            // The user went back to a1 and asked again.
            rec("user", "u3", Some("a1"), json!("redo")),
            rec("assistant", "a3", Some("u3"), text("answer 3")),
        ]
    }

    /// Two parallel calls of one API message, each result pointing at its own call record,
    /// written in call order: the walk from the leaf passes through the second result
    /// only, so the first is found by its `tool_use_id`.
    #[test]
    fn parallel_results_in_call_order_are_matched_by_tool_use_id() {
        let call = |uuid: &str, parent: &str, id: &str| {
            let mut v: Value = serde_json::from_str(&rec(
                "assistant",
                uuid,
                Some(parent),
                json!([{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": id}}]),
            ))
            .unwrap();
            v["message"]["id"] = json!("msg-pair");
            v.to_string()
        };
        let result = |uuid: &str, parent: &str, id: &str, out: &str| {
            rec(
                "user",
                uuid,
                Some(parent),
                json!([{"type": "tool_result", "tool_use_id": id, "content": out}]),
            )
        };
        let lines = vec![
            rec("user", "u1", None, json!("go")),
            call("c1", "u1", "toolu_a"),
            call("c2", "c1", "toolu_b"),
            result("r1", "c1", "toolu_a", "out a"),
            result("r2", "c2", "toolu_b", "out b"),
            rec("assistant", "a2", Some("r2"), text("done")),
        ];
        let (r, evs) = run(&lines);
        let results: Vec<(String, String)> = evs
            .iter()
            .filter(|e| e.kind == "tool_result")
            .map(|e| {
                (
                    e.data["call_id"].as_str().unwrap().to_string(),
                    e.data["output"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            results,
            [
                ("toolu_a".to_string(), "out a".to_string()),
                ("toolu_b".to_string(), "out b".to_string())
            ],
            "{:#?}",
            r.skipped
        );
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn the_newest_leaf_is_the_active_branch() {
        let (r, evs) = run(&base());
        assert_eq!(texts(&evs, "user_message"), ["first", "redo"]);
        assert_eq!(texts(&evs, "assistant_message"), ["answer 1", "answer 3"]);
        let off: Vec<u64> = r
            .skipped
            .iter()
            .filter(|s| s.reason.starts_with("not on the active branch"))
            .map(|s| s.line)
            .collect();
        assert_eq!(off, [3, 4]);
        let usage: Vec<&Event> = evs.iter().filter(|e| e.kind == "provider_usage").collect();
        assert_eq!(usage.len(), 2);
        assert_eq!(usage[0].data["usage"]["input_tokens"], 5);
        assert_eq!(usage[0].data["usage"]["cached_tokens"], 2);
    }

    #[test]
    fn a_last_prompt_leaf_on_another_branch_wins() {
        let mut lines = base();
        lines
            .push(json!({"type": "last-prompt", "leafUuid": "a2", "sessionId": "s-1"}).to_string());
        let (r, evs) = run(&lines);
        assert_eq!(texts(&evs, "user_message"), ["first", "second"]);
        assert_eq!(r.lines.metadata, 1);
        // A leaf the newest record descends from does not hold the import back.
        let mut lines = base();
        lines.insert(
            5,
            json!({"type": "last-prompt", "leafUuid": "u3", "sessionId": "s-1"}).to_string(),
        );
        let (_, evs) = run(&lines);
        assert_eq!(texts(&evs, "assistant_message"), ["answer 1", "answer 3"]);
    }

    #[test]
    fn sidechains_become_subagent_events_and_compaction_keeps_the_history() {
        let mut side = serde_json::from_str::<Value>(&rec(
            "assistant",
            "s1",
            Some("u1"),
            json!([{"type": "tool_use", "id": "t-side", "name": "Read", "input": {}}]),
        ))
        .unwrap();
        side["isSidechain"] = json!(true);
        side["agentId"] = json!("agent-7");
        let lines = vec![
            rec("user", "u1", None, json!("first")),
            side.to_string(),
            rec("assistant", "a1", Some("u1"), text("answer 1")),
            json!({"type": "system", "subtype": "compact_boundary", "uuid": "b1",
                   "parentUuid": null, "logicalParentUuid": "a1", "sessionId": "s-1"})
            .to_string(),
            {
                let mut v: Value =
                    serde_json::from_str(&rec("user", "c1", Some("b1"), json!("summary of it")))
                        .unwrap();
                v["isCompactSummary"] = json!(true);
                v.to_string()
            },
            rec("user", "u4", Some("c1"), json!("after")),
        ];
        let (r, evs) = run(&lines);
        assert_eq!(texts(&evs, "user_message"), ["first", "after"]);
        let sub: Vec<&Event> = evs.iter().filter(|e| e.kind == "subagent_event").collect();
        assert_eq!(sub.len(), 1);
        assert_eq!(sub[0].data["agent_id"], "agent-7");
        assert_eq!(sub[0].data["tool_calls"][0]["id"], "t-side");
        assert!(
            !evs.iter().any(|e| e.kind == "tool_call"),
            "sidechain calls stay apart"
        );
        let note = evs.iter().find(|e| e.kind == "imported_note").unwrap();
        assert_eq!(note.data["summary"], "summary of it");
        assert_eq!(r.lines.skipped, 0, "{:?}", r.skipped);
    }
}
