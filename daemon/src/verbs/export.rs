//! `agentd/export`: a session as a Markdown transcript, a self-contained HTML page, or
//! its Log bytes as they are (`jsonl`).
//!
//! The Log file is read directly (reading needs no actor: only writes go through one)
//! up to its last complete line. Rendering is pure: [`parse_log`] turns bytes into
//! events and damage markers, and [`markdown`] / [`html`] render them with the lineage
//! the index knows. A line that is not valid JSON, and a torn tail, are shown where
//! they are as damage, never silently dropped. The HTML has no script and no network
//! asset: tool calls and results are `<details>` elements, styles are inline.

use crate::registry::Registry;
use crate::store;
use agentd_proto::rpc::{ExportParams, ExportResult};
use agentd_proto::{AgentError, Event, EventType};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::sync::Arc;

/// Exports larger than this are refused without `output_path` (they would not fit a
/// response under the default message limit).
pub const MAX_INLINE_BYTES: usize = 12 * 1024 * 1024;

/// One line of a Log as an export sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Event(Box<Event>),
    Damaged {
        /// 1-based line number.
        line: u64,
        byte_offset: u64,
        bytes: u64,
        reason: String,
    },
}

/// A session next to this one in the fork lineage.
#[derive(Debug, Clone, PartialEq)]
pub struct Relative {
    pub session_id: String,
    pub title: Option<String>,
    pub forked_to_seq: Option<u64>,
    pub deleted: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lineage {
    pub parent: Option<Relative>,
    pub forks: Vec<Relative>,
}

/// Splits Log bytes into events and damage (invalid JSON, a torn tail without `\n`).
pub fn parse_log(bytes: &[u8]) -> Vec<Item> {
    let mut items = Vec::new();
    let mut offset = 0usize;
    let mut line = 0u64;
    while offset < bytes.len() {
        line += 1;
        let rest = &bytes[offset..];
        let (body, next, torn) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], offset + i + 1, false),
            None => (rest, bytes.len(), true),
        };
        let damaged = |reason: &str| Item::Damaged {
            line,
            byte_offset: offset as u64,
            bytes: body.len() as u64,
            reason: reason.to_string(),
        };
        if torn {
            items.push(damaged("torn tail: the last line has no newline"));
        } else if !body.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice::<Event>(body) {
                Ok(ev) => items.push(Item::Event(Box::new(ev))),
                Err(_) => items.push(damaged("not a valid event (corrupt JSON)")),
            }
        }
        offset = next;
    }
    items
}

/// Facts for the header, folded from the events.
struct Header {
    session_id: String,
    title: Option<String>,
    workspace: String,
    created: String,
    events: usize,
    damaged: usize,
    parent: Option<(String, Option<u64>)>,
}

fn header(sid: &str, items: &[Item]) -> Header {
    let mut h = Header {
        session_id: sid.to_string(),
        title: None,
        workspace: String::new(),
        created: String::new(),
        events: 0,
        damaged: 0,
        parent: None,
    };
    for it in items {
        let ev = match it {
            Item::Event(ev) => ev,
            Item::Damaged { .. } => {
                h.damaged += 1;
                continue;
            }
        };
        h.events += 1;
        match ev.event_type() {
            EventType::SessionStarted | EventType::SessionFork => {
                if h.created.is_empty() {
                    h.created = ev.ts.clone();
                }
                if let Some(ws) = ev.str_field("workspace") {
                    h.workspace = ws.to_string();
                }
                if let Some(t) = ev.str_field("title") {
                    h.title = Some(t.to_string());
                }
                if let Some(p) = ev.str_field("parent_session_id") {
                    let seq = ev.data.get("forked_to_seq").and_then(Value::as_u64);
                    h.parent = Some((p.to_string(), seq));
                }
            }
            EventType::SessionInfo => {
                if let Some(t) = ev.str_field("title") {
                    h.title = Some(t.to_string());
                }
            }
            _ => {}
        }
    }
    h
}

/// A Markdown code fence longer than any backtick run in `text`.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// What a `tool_result` shows: its output, else its error.
fn result_body(ev: &Event) -> (bool, String) {
    let ok = ev.data.get("ok").and_then(Value::as_bool).unwrap_or(false);
    let mut body = ev.str_field("output").unwrap_or_default().to_string();
    if let Some(err) = ev.data.get("error").filter(|e| !e.is_null()) {
        let kind = err.get("kind").and_then(Value::as_str).unwrap_or("error");
        let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
        if !body.is_empty() {
            body.push('\n');
        }
        let _ = write!(body, "[{kind}] {msg}");
    }
    if let Some(code) = ev.data.get("exit_code").and_then(Value::as_i64) {
        let _ = write!(body, "\n(exit code {code})");
    }
    (ok, body)
}

/// A one-line note for events that are not conversation turns.
fn note(ev: &Event) -> String {
    let d = &ev.data;
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
    match ev.event_type() {
        EventType::TurnStarted => format!("turn started ({})", s("model")),
        EventType::TurnEnded => {
            let mut t = format!("turn ended: {}", s("status"));
            if let Some(m) = d
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
            {
                let _ = write!(t, " — {m}");
            }
            t
        }
        EventType::ProviderUsage => {
            let u = d.get("usage").cloned().unwrap_or(Value::Null);
            format!(
                "usage {}: {} in, {} out",
                s("model"),
                u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0),
                u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0)
            )
        }
        EventType::PermissionDecision => {
            format!("permission {} for {}", s("decision"), s("call_id"))
        }
        EventType::HistoryCompaction => "history compacted into a checkpoint".to_string(),
        EventType::BranchSummary => "branch summary recorded".to_string(),
        EventType::SessionInfo => match d.get("title").and_then(Value::as_str) {
            Some(t) => format!("session info: title {}", Value::String(t.to_string())),
            None => "session info".to_string(),
        },
        EventType::LogRepaired => {
            format!("Log repaired: {} torn bytes quarantined", d["torn_bytes"])
        }
        EventType::Reasoning => format!("reasoning ({}; not shown)", s("model")),
        EventType::MemoryUpdate => format!("memory update: {}", s("kind")),
        _ => ev.kind.clone(),
    }
}

fn relative_label(r: &Relative) -> String {
    let mut s = format!("`{}`", r.session_id);
    if let Some(seq) = r.forked_to_seq {
        let _ = write!(s, " at seq {seq}");
    }
    if let Some(t) = &r.title {
        let _ = write!(s, " {}", Value::String(t.clone()));
    }
    if r.deleted {
        s.push_str(" (deleted)");
    }
    s
}

/// The Markdown transcript.
pub fn markdown(sid: &str, items: &[Item], lineage: &Lineage) -> String {
    let h = header(sid, items);
    let mut out = String::new();
    let title = h.title.clone().unwrap_or_else(|| h.session_id.clone());
    let _ = writeln!(out, "# {}\n", title);
    let _ = writeln!(out, "- Session: `{}`", h.session_id);
    let _ = writeln!(out, "- Workspace: `{}`", h.workspace);
    let _ = writeln!(out, "- Created: {}", h.created);
    let _ = writeln!(out, "- Events: {}", h.events);
    if h.damaged > 0 {
        let _ = writeln!(out, "- Damaged lines: {} (marked below)", h.damaged);
    }
    if let Some(p) = &lineage.parent {
        let _ = writeln!(out, "- Forked from: {}", relative_label(p));
    }
    for f in &lineage.forks {
        let _ = writeln!(out, "- Fork: {}", relative_label(f));
    }
    for it in items {
        out.push('\n');
        let ev = match it {
            Item::Event(ev) => ev,
            Item::Damaged {
                line,
                byte_offset,
                bytes,
                reason,
            } => {
                let _ = writeln!(
                    out,
                    "> **Damaged Log line {line}** (byte {byte_offset}, {bytes} bytes): {reason}. Its bytes are not shown."
                );
                continue;
            }
        };
        let meta = format!("<sub>seq {} · {}</sub>", ev.seq, ev.ts);
        match ev.event_type() {
            EventType::SessionStarted | EventType::SessionFork => {
                let _ = writeln!(out, "*{} · seq {}*", ev.kind, ev.seq);
            }
            EventType::UserMessage => {
                let _ = writeln!(
                    out,
                    "## User\n{meta}\n\n{}",
                    ev.str_field("text").unwrap_or("")
                );
            }
            EventType::AssistantMessage => {
                let partial = ev
                    .data
                    .get("metadata")
                    .and_then(|m| m.get("partial"))
                    .and_then(Value::as_bool)
                    == Some(true);
                let _ = writeln!(
                    out,
                    "## Assistant{}\n{meta}\n\n{}",
                    if partial { " (partial)" } else { "" },
                    ev.str_field("text").unwrap_or("")
                );
            }
            EventType::ToolCall => {
                let args = pretty(ev.data.get("args").unwrap_or(&Value::Null));
                let f = fence(&args);
                let _ = writeln!(
                    out,
                    "### Tool call `{}` ({})\n{meta}\n\n{f}json\n{args}\n{f}",
                    ev.str_field("name").unwrap_or("?"),
                    ev.str_field("call_id").unwrap_or("?")
                );
            }
            EventType::ToolResult => {
                let (ok, body) = result_body(ev);
                let f = fence(&body);
                let _ = writeln!(
                    out,
                    "### Tool result ({}) {}\n{meta}\n\n{f}\n{body}\n{f}",
                    ev.str_field("call_id").unwrap_or("?"),
                    if ok { "ok" } else { "error" }
                );
            }
            _ => {
                let _ = writeln!(out, "*seq {} · {}*", ev.seq, note(ev));
            }
        }
    }
    out
}

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;max-width:860px;margin:2em auto;padding:0 1em;color:#1d1d1f}\
h1{font-size:1.5em}.meta{color:#666;font-size:.85em}.ev{border-left:3px solid #ddd;padding:.2em .8em;margin:.8em 0}\
.user{border-color:#2b6cb0}.assistant{border-color:#2f855a}.tool{border-color:#b7791f}.error{border-color:#c53030}\
.note{color:#666;font-size:.85em;margin:.3em 0}.damage{background:#fff5f5;border:1px solid #c53030;padding:.5em}\
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}summary{cursor:pointer}\
.text{white-space:pre-wrap}nav.lineage{background:#f6f6f6;padding:.5em 1em}";

fn html_relative(r: &Relative) -> String {
    let mut s = format!("<code>{}</code>", esc(&r.session_id));
    if let Some(seq) = r.forked_to_seq {
        let _ = write!(s, " at seq {seq}");
    }
    if let Some(t) = &r.title {
        let _ = write!(s, " “{}”", esc(t));
    }
    if r.deleted {
        s.push_str(" <em>(deleted)</em>");
    }
    s
}

/// A single self-contained HTML page: no script, no network asset.
pub fn html(sid: &str, items: &[Item], lineage: &Lineage) -> String {
    let h = header(sid, items);
    let title = h.title.clone().unwrap_or_else(|| h.session_id.clone());
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    let _ = writeln!(
        out,
        "<p class=\"meta\">session <code>{}</code> · workspace <code>{}</code> · created {} · {} events{}</p>",
        esc(&h.session_id),
        esc(&h.workspace),
        esc(&h.created),
        h.events,
        if h.damaged > 0 {
            format!(" · <strong>{} damaged lines</strong>", h.damaged)
        } else {
            String::new()
        }
    );
    if lineage.parent.is_some() || !lineage.forks.is_empty() {
        out.push_str("<nav class=\"lineage\"><strong>Fork lineage</strong><ul>\n");
        if let Some(p) = &lineage.parent {
            let _ = writeln!(out, "<li>forked from {}</li>", html_relative(p));
        }
        let _ = writeln!(
            out,
            "<li>this session <code>{}</code><ul>",
            esc(&h.session_id)
        );
        for f in &lineage.forks {
            let _ = writeln!(out, "<li>fork {}</li>", html_relative(f));
        }
        out.push_str("</ul></li></ul></nav>\n");
    }
    for it in items {
        let ev = match it {
            Item::Event(ev) => ev,
            Item::Damaged {
                line,
                byte_offset,
                bytes,
                reason,
            } => {
                let _ = writeln!(
                    out,
                    "<div class=\"damage\"><strong>Damaged Log line {line}</strong> (byte {byte_offset}, {bytes} bytes): {}. Its bytes are not shown.</div>",
                    esc(reason)
                );
                continue;
            }
        };
        let meta = format!("<div class=\"meta\">seq {} · {}</div>", ev.seq, esc(&ev.ts));
        match ev.event_type() {
            EventType::SessionStarted | EventType::SessionFork => {
                let _ = writeln!(
                    out,
                    "<p class=\"note\">seq {} · {}</p>",
                    ev.seq,
                    esc(&ev.kind)
                );
            }
            EventType::UserMessage | EventType::AssistantMessage => {
                let user = ev.event_type() == EventType::UserMessage;
                let _ = writeln!(
                    out,
                    "<section class=\"ev {}\"><strong>{}</strong>{meta}<div class=\"text\">{}</div></section>",
                    if user { "user" } else { "assistant" },
                    if user { "User" } else { "Assistant" },
                    esc(ev.str_field("text").unwrap_or(""))
                );
            }
            EventType::ToolCall => {
                let args = pretty(ev.data.get("args").unwrap_or(&Value::Null));
                let _ = writeln!(
                    out,
                    "<details class=\"ev tool\"><summary>Tool call <code>{}</code> ({})</summary>{meta}<pre>{}</pre></details>",
                    esc(ev.str_field("name").unwrap_or("?")),
                    esc(ev.str_field("call_id").unwrap_or("?")),
                    esc(&args)
                );
            }
            EventType::ToolResult => {
                let (ok, body) = result_body(ev);
                let _ = writeln!(
                    out,
                    "<details class=\"ev tool{}\"><summary>Tool result ({}) {}</summary>{meta}<pre>{}</pre></details>",
                    if ok { "" } else { " error" },
                    esc(ev.str_field("call_id").unwrap_or("?")),
                    if ok { "ok" } else { "error" },
                    esc(&body)
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "<p class=\"note\">seq {} · {}</p>",
                    ev.seq,
                    esc(&note(ev))
                );
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn relative(registry: &Registry, sid: &str, forked_to_seq: Option<u64>) -> Relative {
    let meta = registry.index_get(sid);
    Relative {
        session_id: sid.to_string(),
        title: meta.as_ref().and_then(|m| m.title.clone()),
        forked_to_seq,
        deleted: meta.as_ref().is_none_or(|m| m.deleted),
    }
}

/// The lineage of `sid` from the index: its parent (if any) and direct forks.
pub fn lineage(registry: &Registry, sid: &str) -> Lineage {
    let Some(me) = registry.index_get(sid) else {
        return Lineage::default();
    };
    let parent = me
        .parent_session_id
        .as_deref()
        .map(|p| relative(registry, p, me.forked_to_seq));
    let mut forks: Vec<(Option<u64>, String)> = registry.with_index(|i| {
        i.values()
            .filter(|m| m.parent_session_id.as_deref() == Some(sid))
            .map(|m| (m.forked_to_seq, m.session_id.clone()))
            .collect()
    });
    forks.sort();
    Lineage {
        parent,
        forks: forks
            .into_iter()
            .map(|(seq, id)| relative(registry, &id, seq))
            .collect(),
    }
}

fn read_file(path: &std::path::Path, sid: &str) -> Result<Vec<u8>, AgentError> {
    match std::fs::read(path) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(AgentError::not_found("no such session")
                .with_details(json!({"session_id": sid}))
                .with_next_actions(&["agentctl ls"]))
        }
        Err(e) => Err(AgentError::internal(format!("read Log: {e}"))),
    }
}

/// `agentd/export`.
pub async fn export(registry: &Arc<Registry>, p: ExportParams) -> Result<ExportResult, AgentError> {
    let path = registry.home.log_path(&p.session_id)?;
    let format = p.format.as_str();
    if let Some(peer) = crate::import::export::Peer::parse(format) {
        return export_peer(registry, p, peer, path).await;
    }
    if !matches!(format, "markdown" | "html" | "jsonl") {
        return Err(AgentError::invalid_args(
            "format must be markdown, html, jsonl, claude-code, codex or pi",
        )
        .with_details(json!({"field": "format"})));
    }
    if p.install.is_some() {
        return Err(AgentError::invalid_args(
            "install is for a peer format (claude-code, codex, pi)",
        )
        .with_details(json!({"field": "install"})));
    }
    let output = output_path(&p)?;
    let sid = p.session_id.clone();
    let store = registry.store.clone();
    let bytes = super::manage::blocking(move || match store.read_log(&sid) {
        Some(read) => read,
        None => read_file(&path, &sid),
    })
    .await?;
    let lineage = lineage(registry, &p.session_id);
    let sid = p.session_id.clone();
    let fmt = p.format.clone();
    let (rendered, damaged) = super::manage::blocking(move || {
        if fmt == "jsonl" {
            let damaged = parse_log(&bytes)
                .iter()
                .filter(|i| matches!(i, Item::Damaged { .. }))
                .count();
            return Ok((bytes, damaged));
        }
        let items = parse_log(&bytes);
        let damaged = items
            .iter()
            .filter(|i| matches!(i, Item::Damaged { .. }))
            .count();
        let text = if fmt == "html" {
            html(&sid, &items, &lineage)
        } else {
            markdown(&sid, &items, &lineage)
        };
        Ok((text.into_bytes(), damaged))
    })
    .await?;
    let size = rendered.len() as u64;
    let mut result = ExportResult {
        session_id: p.session_id.clone(),
        format: p.format.clone(),
        bytes: size,
        content: None,
        output_path: None,
        damaged_lines: damaged as u64,
        path: None,
        resume_id: None,
        resume_command: None,
        index: None,
        warnings: Vec::new(),
    };
    match output {
        Some(o) => {
            let shown = o.display().to_string();
            super::manage::blocking(move || {
                let dir = o
                    .parent()
                    .ok_or_else(|| AgentError::invalid_args("output_path has no directory"))?;
                let tmp = dir.join(format!(".agentd-export.{:016x}.tmp", rand::random::<u64>()));
                let res =
                    store::write_synced(&tmp, &rendered).and_then(|()| std::fs::rename(&tmp, &o));
                if let Err(e) = res {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(AgentError::invalid_args(format!(
                        "cannot write {}: {e}",
                        o.display()
                    ))
                    .with_details(json!({"field": "output_path"})));
                }
                Ok(())
            })
            .await?;
            result.output_path = Some(shown);
        }
        None => {
            if rendered.len() > MAX_INLINE_BYTES {
                return Err(AgentError::invalid_args(format!(
                    "the export is {size} bytes; write it to a file with output_path (agentctl export --output FILE)"
                ))
                .with_details(json!({"bytes": size, "max_inline": MAX_INLINE_BYTES})));
            }
            result.content = Some(String::from_utf8_lossy(&rendered).into_owned());
        }
    }
    Ok(result)
}

/// `output_path` of an export request, which must be an absolute file path.
fn output_path(p: &ExportParams) -> Result<Option<std::path::PathBuf>, AgentError> {
    let Some(o) = &p.output_path else {
        return Ok(None);
    };
    let o = std::path::PathBuf::from(o);
    if !o.is_absolute() || o.file_name().is_none() {
        return Err(
            AgentError::invalid_args("output_path must be an absolute file path")
                .with_details(json!({"field": "output_path"})),
        );
    }
    Ok(Some(o))
}

/// A random lowercase UUID (version 4): the exported session's id in the peer.
fn new_uuid() -> String {
    agentd_proto::session_uuid::uuid_v4(rand::random())
}

/// Writes `bytes` to `path` through a temp file in its directory; `exclusive` refuses an
/// existing file (an install never replaces a session).
fn write_file(path: &std::path::Path, bytes: &[u8], exclusive: bool) -> Result<(), AgentError> {
    let dir = path
        .parent()
        .ok_or_else(|| AgentError::invalid_args("the path has no directory"))?;
    let tmp = dir.join(format!(".agentd-export.{:016x}.tmp", rand::random::<u64>()));
    let res = store::write_synced(&tmp, bytes).and_then(|()| {
        if exclusive {
            // A hard link fails when the name exists: nothing is ever replaced.
            std::fs::hard_link(&tmp, path)?;
            std::fs::remove_file(&tmp)
        } else {
            std::fs::rename(&tmp, path)
        }
    });
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(
            AgentError::invalid_args(format!("cannot write {}: {e}", path.display()))
                .with_details(json!({"path": path.display().to_string()})),
        );
    }
    Ok(())
}

/// The `model_provider` Codex's `config.toml` under `home` (or `$CODEX_HOME` in `env`)
/// names: the provider Codex resumes every session with. `None` when there is no such
/// file or key, or the file does not parse (Codex then uses `openai`).
fn codex_configured_provider(
    home: &std::path::Path,
    env: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let root = match env.get("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(v) => std::path::PathBuf::from(v),
        None => home.join(".codex"),
    };
    let text = std::fs::read_to_string(root.join("config.toml")).ok()?;
    let v: toml::Value = toml::from_str(&text).ok()?;
    v.get("model_provider")?.as_str().map(str::to_string)
}

/// `agentd/export` to a peer's native session format (`claude-code`, `codex`, `pi`).
async fn export_peer(
    registry: &Arc<Registry>,
    p: ExportParams,
    peer: crate::import::export::Peer,
    log_path: std::path::PathBuf,
) -> Result<ExportResult, AgentError> {
    use crate::import::export;
    if p.install.is_some() && p.output_path.is_some() {
        return Err(
            AgentError::invalid_args("give output_path or install, not both")
                .with_details(json!({"field": "install"})),
        );
    }
    let output = output_path(&p)?;
    if let Some(i) = &p.install {
        if !std::path::Path::new(&i.home).is_absolute() {
            return Err(AgentError::invalid_args("install.home must be absolute")
                .with_details(json!({"field": "install.home"})));
        }
    }
    let sid = p.session_id.clone();
    let store = registry.store.clone();
    let bytes = super::manage::blocking(move || match store.read_log(&sid) {
        Some(read) => read,
        None => read_file(&log_path, &sid),
    })
    .await?;
    let install = p.install.clone();
    let sid = p.session_id.clone();
    super::manage::blocking(move || {
        let items = parse_log(&bytes);
        let damaged = items
            .iter()
            .filter(|i| matches!(i, Item::Damaged { .. }))
            .count() as u64;
        let events: Vec<Event> = items
            .into_iter()
            .filter_map(|i| match i {
                Item::Event(e) => Some(*e),
                Item::Damaged { .. } => None,
            })
            .collect();
        let codex_provider = match (&install, peer) {
            (Some(i), export::Peer::Codex) => {
                codex_configured_provider(std::path::Path::new(&i.home), &i.env)
            }
            _ => None,
        };
        let ctx = export::ExportContext {
            session_id: new_uuid(),
            now: agentd_proto::event::now_ts(),
            codex_provider,
        };
        let x = export::export(peer, &events, &ctx)?;
        let mut warnings = x.warnings;
        if damaged > 0 {
            warnings.push(format!(
                "{damaged} damaged line(s) of the Log were left out"
            ));
        }
        let mut result = ExportResult {
            session_id: sid,
            format: peer.as_str().to_string(),
            bytes: x.bytes.len() as u64,
            content: None,
            output_path: None,
            damaged_lines: damaged,
            path: None,
            resume_id: Some(ctx.session_id.clone()),
            resume_command: None,
            index: None,
            warnings,
        };
        let target = match (&install, &output) {
            (Some(i), _) => {
                let dir = export::install_dir(
                    peer,
                    std::path::Path::new(&i.home),
                    &i.env,
                    &x.cwd,
                    &ctx.now,
                );
                std::fs::create_dir_all(&dir).map_err(|e| {
                    AgentError::invalid_args(format!("cannot create {}: {e}", dir.display()))
                })?;
                result.resume_command =
                    Some(export::resume_command(peer, &x.cwd, &ctx.session_id));
                result.index = Some(export::index_note(peer).to_string());
                Some((dir.join(&x.file_name), true))
            }
            (None, Some(o)) => Some((o.clone(), false)),
            (None, None) => None,
        };
        match target {
            Some((path, exclusive)) => {
                write_file(&path, &x.bytes, exclusive)?;
                let shown = path.display().to_string();
                result.output_path = Some(shown.clone());
                result.path = Some(shown);
            }
            None => {
                if x.bytes.len() > MAX_INLINE_BYTES {
                    return Err(AgentError::invalid_args(format!(
                        "the export is {} bytes; write it to a file with output_path (agentctl export --output FILE)",
                        x.bytes.len()
                    )));
                }
                result.content = Some(String::from_utf8_lossy(&x.bytes).into_owned());
            }
        }
        Ok(result)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_golden(name: &str, expected: &str, actual: &str) {
        if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/verbs/golden")
                .join(name);
            std::fs::write(&path, actual).expect("write golden file");
            return;
        }
        assert!(
            expected == actual,
            "golden {name} differs (rerun with UPDATE_GOLDEN=1 to accept)\n--- expected\n{expected}\n--- actual\n{actual}"
        );
    }

    /// A fixed session: a fork with a conversation, a tool call and its result, a
    /// failed tool, usage, a damaged line and a torn tail.
    fn fixture() -> Vec<u8> {
        let evs = [
            json!({"type":"session_fork","data":{"workspace":"/w/proj","agentd_version":"0.1.0","log_format":1,"title":"Fix the <parser> & tests","parent_session_id":"parent-1","fork_root_session_id":"parent-1","forked_to_seq":4}}),
            json!({"type":"turn_started","data":{"turn_id":"turn_1","model":"gpt-5-mini","provider":"openai"}}),
            json!({"type":"user_message","data":{"text":"Why does `parse` fail on ```fences```?"}}),
            json!({"type":"tool_call","data":{"call_id":"c1","name":"read_file","args":{"path":"src/parse.rs"}}}),
            json!({"type":"tool_result","data":{"call_id":"c1","ok":true,"output":"fn parse() {}\n<script>alert(1)</script>"}}),
            json!({"type":"tool_call","data":{"call_id":"c2","name":"shell","args":{"command":"cargo test"}}}),
            json!({"type":"tool_result","data":{"call_id":"c2","ok":false,"exit_code":101,"error":{"kind":"tool_failed","message":"tests failed"}}}),
            json!({"type":"assistant_message","data":{"text":"The fence check is off by one.\n\nFixed."}}),
            json!({"type":"provider_usage","data":{"provider":"openai","model":"gpt-5-mini","usage":{"input_tokens":1200,"output_tokens":80}}}),
            json!({"type":"turn_ended","data":{"turn_id":"turn_1","status":"completed"}}),
            json!({"type":"session_info","data":{"title":"Parser fix","labels":["archived"]}}),
        ];
        let mut out = Vec::new();
        for (i, e) in evs.iter().enumerate() {
            let line = json!({"id": format!("{:016x}", i + 1), "session_id": "child-1", "seq": i,
                "ts": format!("2026-11-21T10:00:{:02}.000000Z", i), "type": e["type"], "data": e["data"]});
            out.extend_from_slice(line.to_string().as_bytes());
            out.push(b'\n');
            if i == 7 {
                out.extend_from_slice(b"{\"id\":\"broken\n");
            }
        }
        out.extend_from_slice(b"{\"id\":\"torn");
        out
    }

    fn fixture_lineage() -> Lineage {
        Lineage {
            parent: Some(Relative {
                session_id: "parent-1".into(),
                title: Some("Parser".into()),
                forked_to_seq: Some(4),
                deleted: true,
            }),
            forks: vec![Relative {
                session_id: "grandchild-1".into(),
                title: None,
                forked_to_seq: Some(7),
                deleted: false,
            }],
        }
    }

    #[test]
    fn parse_marks_damage_in_place() {
        let items = parse_log(&fixture());
        assert_eq!(items.len(), 13);
        assert!(
            matches!(items[8], Item::Damaged { line: 9, .. }),
            "{:?}",
            items[8]
        );
        assert!(matches!(&items[12], Item::Damaged { reason, .. } if reason.contains("torn")));
    }

    #[test]
    fn markdown_golden() {
        let md = markdown("child-1", &parse_log(&fixture()), &fixture_lineage());
        check_golden("export.md", include_str!("golden/export.md"), &md);
    }

    #[test]
    fn html_golden_is_self_contained_and_escaped() {
        let page = html("child-1", &parse_log(&fixture()), &fixture_lineage());
        check_golden("export.html", include_str!("golden/export.html"), &page);
        assert!(!page.contains("<script"), "tool output must be escaped");
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(page.contains("<details"));
    }

    #[test]
    fn fences_outgrow_backticks_in_content() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("a ```` b"), "`````");
    }
}
