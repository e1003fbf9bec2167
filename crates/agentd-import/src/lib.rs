//! agentd-import: importers of sessions recorded by other agents (pi, Pixir, Codex, Claude
//! Code, Gemini CLI, opencode), and exporters back to Claude Code, Codex and pi (`export`).
//!
//! Must never depend on the daemon or a store: importers produce Log lines, the daemon
//! writes them.
//!
//! Each importer is a pure streaming converter: it reads a source file line by line and
//! writes complete agentd Log lines (docs/log-format.md#the-envelope) to a `Write` the caller owns. It never
//! opens the source for writing, never touches the session store, and keeps memory
//! bounded by the longest line plus small per-entry indexes (pi tree files keep
//! `{id, parent, offset}` per entry; every format keeps the set of seen tool call ids so
//! that a result is never imported without its call). Atomicity (temp file, fsync,
//! rename, dir sync) and registration belong to the caller, `agentd/import`.
//!
//! Accounting rule: every source line ends up in exactly one bucket of
//! `ImportReport::lines` — `imported` (produced events), `metadata` (read for context:
//! headers, turn settings), `ui_only` (codex `event_msg`), or `skipped` (listed with a
//! reason). Line 0 of the output is always `session_started` with
//! `created_by:"import"` and `imported_from{format, session_id, path}`.
//!
//! Choices a reader should know:
//! - Every imported event other than `session_started` carries `data.import_line`, the
//!   1-based source line it came from (Pixir copies keep their `data` untouched).
//! - Summaries written by the source agent's LLM (pi `compaction`/`branch_summary`, codex
//!   `compacted`) become `imported_note{source, kind, summary, …}`. That type is unknown
//!   to replay on purpose (docs/log-format.md#event-types: stored and shown, never replayed): they are
//!   narrative, not agentd's deterministic checkpoints, and the full conversation they
//!   summarized is imported anyway. agentd's own compaction can run on the result.
//! - Settings entries (pi `model_change`, `thinking_level_change`, `label`, `custom`)
//!   are listed in `skipped` with a reason naming the value; they steer the source
//!   agent, not the conversation. The model they name is still used as the `model` of
//!   later reasoning items, so those items replay only to the model that produced them.

mod claude;
mod codex;
pub mod detect;
pub mod discover;
pub mod export;
mod gemini;
mod lines;
mod opencode;
mod pi;
mod pixir;
mod sink;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use agentd_proto::{AgentError, ErrorKind};
use serde::Serialize;
use serde_json::{json, Map, Value};

pub use lines::MAX_LINE_BYTES;
pub use opencode::fingerprint as opencode_fingerprint;
pub use sink::MAX_SKIPPED_LISTED;

use lines::Line;
use sink::Sink;

/// The type of the informational event importers write for source-agent summaries.
pub const IMPORTED_NOTE: &str = "imported_note";

/// Source formats `agentd/import` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Pi,
    Pixir,
    Codex,
    Claude,
    Gemini,
    Opencode,
}

/// Names `agentd/import` accepts for `format`; `auto` detects the format from the content.
pub const FORMAT_NAMES: [&str; 7] = [
    "pi", "pixir", "codex", "claude", "opencode", "gemini", "auto",
];

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Pi => "pi",
            Format::Pixir => "pixir",
            Format::Codex => "codex",
            Format::Claude => "claude",
            Format::Gemini => "gemini",
            Format::Opencode => "opencode",
        }
    }

    /// `None` for `auto`.
    pub fn parse_choice(s: &str) -> Result<Option<Format>, AgentError> {
        if s == "auto" {
            return Ok(None);
        }
        s.parse().map(Some)
    }
}

impl FromStr for Format {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, AgentError> {
        match s {
            "pi" => Ok(Format::Pi),
            "pixir" => Ok(Format::Pixir),
            "codex" => Ok(Format::Codex),
            "claude" => Ok(Format::Claude),
            "gemini" => Ok(Format::Gemini),
            "opencode" => Ok(Format::Opencode),
            _ => Err(AgentError::invalid_args(format!(
                "unknown import format ({} bytes); expected one of {}",
                s.len(),
                FORMAT_NAMES.join(", ")
            ))
            .with_details(json!({"field": "format", "allowed": FORMAT_NAMES}))),
        }
    }
}

/// What the caller decided before the import runs.
#[derive(Debug, Clone, Default)]
pub struct ImportContext {
    /// The new agentd session id (already validated by the caller).
    pub session_id: String,
    /// Overrides the source's working directory.
    pub workspace: Option<String>,
    pub agentd_version: String,
    /// Which session of a multi-session source (an opencode database) to import.
    pub source_session: Option<String>,
    /// Extra fields for `session_started.data.imported_from` (discovery's fingerprint
    /// and the earlier import of the same source).
    pub imported_from_extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedLine {
    pub line: u64,
    pub reason: String,
}

/// How the source's lines were accounted for; the four buckets sum to `source_lines`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LineTally {
    pub imported: u64,
    pub metadata: u64,
    pub ui_only: u64,
    pub skipped: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// Events written, `session_started` included.
    pub imported: u64,
    /// Skipped source lines with reasons (the first `MAX_SKIPPED_LISTED`).
    pub skipped: Vec<SkippedLine>,
    pub skipped_total: u64,
    pub warnings: Vec<String>,
    pub source_lines: u64,
    pub source_bytes: u64,
    /// Source entry kinds seen, e.g. `message:user`, `response_item:function_call`,
    /// `event_msg:token_count`.
    pub counts: BTreeMap<String, u64>,
    pub lines: LineTally,
    pub elapsed_ms: u64,
    /// Source MiB per second.
    pub throughput_mib_s: f64,
    /// The format imported (the detected one under `auto`).
    pub format: Option<Format>,
    /// The source's own session id, when it names one.
    pub source_session_id: Option<String>,
}

/// Converts the session at `src` into agentd Log lines written to `out`.
///
/// Errors: `not_found` when `src` does not exist; `invalid_args` for a directory, an
/// empty file, a file whose header is not `format`, or when no workspace is known;
/// `log_write_failed` when `out` fails. Bad lines inside a valid file are skipped and
/// reported, never fatal. On error the caller discards whatever reached `out`.
pub fn import(
    format: Option<Format>,
    src: &Path,
    out: &mut dyn Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let started = Instant::now();
    let abs = std::fs::canonicalize(src).map_err(|e| open_error(src, e))?;
    let meta = std::fs::metadata(&abs).map_err(|e| open_error(src, e))?;
    if !meta.is_file() {
        return Err(AgentError::invalid_args(format!(
            "{} is not a regular file",
            abs.display()
        )));
    }
    if meta.len() == 0 {
        return Err(AgentError::invalid_args(format!(
            "{} is empty; there is no {} session to import",
            abs.display(),
            format.map_or("agent", Format::as_str)
        )));
    }
    let format = match format {
        Some(f) => f,
        None => detect::detect(&abs)?,
    };
    let file = File::open(&abs).map_err(|e| open_error(src, e))?;
    let source = Source { path: abs, file };
    let mut report = match format {
        Format::Pi => pi::import(source, out, ctx)?,
        Format::Codex => codex::import(source, out, ctx)?,
        Format::Pixir => pixir::import(source, out, ctx)?,
        Format::Claude => claude::import(source, out, ctx)?,
        Format::Gemini => gemini::import(source, out, ctx)?,
        Format::Opencode => opencode::import(source, out, ctx)?,
    };
    report.format = Some(format);
    let elapsed = started.elapsed();
    report.source_bytes = meta.len();
    report.elapsed_ms = elapsed.as_millis() as u64;
    let secs = elapsed.as_secs_f64().max(1e-6);
    report.throughput_mib_s = (meta.len() as f64 / (1024.0 * 1024.0)) / secs;
    Ok(report)
}

/// An opened source file and its absolute path.
struct Source {
    path: PathBuf,
    file: File,
}

fn open_error(src: &Path, e: std::io::Error) -> AgentError {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::NotFound,
        std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        _ => ErrorKind::InvalidArgs,
    };
    AgentError::new(kind, format!("cannot open {}: {e}", src.display()))
}

fn read_error(e: std::io::Error) -> AgentError {
    AgentError::internal(format!("reading the source failed: {e}"))
}

/// Parses one source line as a JSON object, or records why it is skipped.
fn parse_line(sink: &mut Sink<'_>, line: &Line<'_>) -> Option<Map<String, Value>> {
    if let Some(len) = line.oversized {
        sink.skip(
            line.no,
            format!("line is {len} bytes, over the {MAX_LINE_BYTES}-byte limit"),
        );
        return None;
    }
    if line.bytes.iter().all(u8::is_ascii_whitespace) {
        sink.skip(line.no, "blank line");
        return None;
    }
    match serde_json::from_slice::<Value>(line.bytes) {
        Ok(Value::Object(m)) => {
            if !line.terminated {
                sink.warn(format!(
                    "line {}: the last line has no trailing newline but is complete JSON; imported",
                    line.no
                ));
            }
            Some(m)
        }
        Ok(_) => {
            sink.skip(line.no, "not a JSON object");
            None
        }
        Err(e) if !line.terminated => {
            sink.skip(
                line.no,
                format!(
                    "torn last line: {} bytes without a trailing newline, not valid JSON ({e})",
                    line.bytes.len()
                ),
            );
            None
        }
        Err(e) => {
            sink.skip(line.no, format!("not valid JSON: {e}"));
            None
        }
    }
}

/// Facts from a source header that go into `session_started`.
#[derive(Default)]
struct Header {
    source_session_id: Option<String>,
    cwd: Option<String>,
    title: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    ts: Option<Value>,
}

/// Writes line 0. The workspace is the caller's override, else the source's cwd; it
/// must be an absolute path (docs/log-format.md#event-types).
fn emit_session_started(
    sink: &mut Sink<'_>,
    format: Format,
    src: &Path,
    ctx: &ImportContext,
    h: &Header,
) -> Result<(), AgentError> {
    let workspace = match (&ctx.workspace, &h.cwd) {
        (Some(w), _) => w.clone(),
        (None, Some(cwd)) => cwd.clone(),
        (None, None) => {
            return Err(AgentError::invalid_args(format!(
                "the {} session names no working directory; pass --workspace",
                format.as_str()
            ))
            .with_next_actions(&["agentctl import --workspace <abs dir> ..."]))
        }
    };
    if !Path::new(&workspace).is_absolute() {
        return Err(AgentError::invalid_args(format!(
            "workspace must be an absolute path ({} bytes given); pass --workspace",
            workspace.len()
        )));
    }
    let mut data = json!({
        "workspace": workspace,
        "agentd_version": ctx.agentd_version,
        "log_format": 1,
        "created_by": "import",
        "imported_from": {
            "format": format.as_str(),
            "session_id": h.source_session_id,
            "path": src.to_string_lossy(),
        },
    });
    for (k, v) in &ctx.imported_from_extra {
        data["imported_from"][k] = v.clone();
    }
    sink.report.source_session_id = h.source_session_id.clone();
    for (k, v) in [
        ("title", &h.title),
        ("model", &h.model),
        ("provider", &h.provider),
    ] {
        if let Some(v) = v {
            data[k] = json!(v);
        }
    }
    sink.emit("session_started", data, h.ts.as_ref())?;
    Ok(())
}

/// Tool arguments as agentd stores them: always an object. A JSON text is parsed first
/// (codex sends arguments as a string); anything else is wrapped as `{"input": …}`.
fn args_object(v: Value) -> Value {
    match v {
        Value::Object(_) => v,
        Value::String(s) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(m)) => Value::Object(m),
            Ok(other) => json!({ "input": other }),
            Err(_) => json!({ "input": s }),
        },
        other => json!({ "input": other }),
    }
}

/// The text of a message's `content`: a string as it is, or the text of its blocks whose
/// `type` is one of `text_types`, one per line. `image` names the placeholder line of a
/// block it recognises as an image (and counts it); every other block is left out.
fn content_text(
    content: Option<&Value>,
    text_types: &[&str],
    mut image: impl FnMut(&Value) -> Option<String>,
) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let mut parts: Vec<String> = Vec::new();
            for b in blocks {
                let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
                if text_types.contains(&kind) {
                    parts.push(
                        b.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    );
                } else if let Some(placeholder) = image(b) {
                    parts.push(placeholder);
                }
            }
            parts.join("\n")
        }
        _ => String::new(),
    }
}

fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_parses_the_known_names_only() {
        for name in FORMAT_NAMES {
            let f = Format::parse_choice(name).unwrap();
            assert_eq!(f.map_or("auto", Format::as_str), name);
        }
        let e = "Codex".parse::<Format>().unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
    }

    #[test]
    fn args_are_always_objects() {
        assert_eq!(args_object(json!({"a": 1})), json!({"a": 1}));
        assert_eq!(args_object(json!("{\"a\":1}")), json!({"a": 1}));
        assert_eq!(args_object(json!("[1]")), json!({"input": [1]}));
        assert_eq!(args_object(json!("not json")), json!({"input": "not json"}));
        assert_eq!(args_object(json!(3)), json!({"input": 3}));
    }
}
