//! The tools `agentctl mcp-server` offers, as pure data and pure functions: the catalog
//! (names, descriptions, argument schemas, read-only annotations), the mapping of a
//! call's arguments to native JSON-RPC requests, and the rendering of the daemon's
//! answers into capped text. Nothing here does I/O; `mod.rs` runs the calls.

use crate::rpc::to_params;
use agentd_proto::replay::Dialect;
use agentd_proto::rpc::{self, method};
use agentd_proto::AgentError;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// Largest text block a tool returns (as built-in tools cap their output).
pub const TEXT_CAP: usize = 16 * 1024;
/// Largest share of one event in a `show` page.
pub const EVENT_CAP: usize = 2 * 1024;
/// Events a `show` page asks the daemon for when the call names no limit.
pub const SHOW_LIMIT: usize = 50;
/// Most events one `show` page may ask for.
pub const SHOW_LIMIT_MAX: usize = 500;

/// Whether a tool only reads, or changes sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// One tool of the catalog.
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub access: Access,
    /// The JSON Schema of its arguments (an object schema).
    pub schema: fn() -> Value,
}

fn sid_prop() -> Value {
    json!({"type": "string", "description": "Session id, as `list_sessions` or `search` give it."})
}

fn list_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "workspace": {"type": "string", "description": "Only sessions of this workspace (an absolute directory path)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Sessions per page, newest first (default 50)."},
            "cursor": {"type": "string", "description": "The `next_cursor` of the previous page."},
            "include_archived": {"type": "boolean", "description": "Include archived sessions (default false)."}
        },
        "additionalProperties": false
    })
}

fn search_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "Text to find (a regular expression with `regex: true`)."},
            "regex": {"type": "boolean", "description": "Treat `query` as a regular expression (default false)."},
            "case_sensitive": {"type": "boolean", "description": "Match case (default false)."},
            "workspace": {"type": "string", "description": "Only sessions of this workspace (an absolute directory path)."},
            "types": {"type": "array", "items": {"type": "string"}, "description": "Only these event types, e.g. [\"user_message\", \"assistant_message\", \"tool_result\"]."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Most hits (default 50)."},
            "cursor": {"type": "string", "description": "The `next_cursor` of the previous page."}
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

fn show_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": sid_prop(),
            "after_seq": {"type": "integer", "minimum": 0, "description": "Only events after this seq: pass the `after_seq` a previous page names to read on."},
            "limit": {"type": "integer", "minimum": 1, "maximum": SHOW_LIMIT_MAX, "description": "Most events in this page (default 50). A page is also cut at 16 KiB of text."},
            "types": {"type": "array", "items": {"type": "string"}, "description": "Only these event types (e.g. [\"tool_call\", \"tool_result\"])."},
            "messages_only": {"type": "boolean", "description": "Only the conversation: user and assistant messages (default false)."}
        },
        "required": ["session_id"],
        "additionalProperties": false
    })
}

fn context_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": sid_prop(),
            "dialect": {"type": "string", "enum": ["responses", "chat", "anthropic"], "description": "Provider dialect of the replay (default responses)."},
            "after_seq": {"type": "integer", "minimum": 0, "description": "Replay only the events after this seq."}
        },
        "required": ["session_id"],
        "additionalProperties": false
    })
}

fn tree_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": {"type": "string", "description": "The tree this session belongs to (its fork root and every fork under it)."},
            "workspace": {"type": "string", "description": "Every session tree of this workspace (an absolute directory path)."},
            "max_depth": {"type": "integer", "minimum": 0, "description": "Most fork levels shown."},
            "include_archived": {"type": "boolean", "description": "Include archived sessions (default false)."}
        },
        "additionalProperties": false
    })
}

fn checkpoint_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"session_id": sid_prop()},
        "required": ["session_id"],
        "additionalProperties": false
    })
}

fn fork_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": sid_prop(),
            "to_seq": {"type": "integer", "minimum": 0, "description": "Fork point: the child keeps the events up to this seq (default: all)."},
            "title": {"type": "string", "description": "Title of the new session."},
            "dry_run": {"type": "boolean", "description": "Say what the fork would do without recording it (default false)."}
        },
        "required": ["session_id"],
        "additionalProperties": false
    })
}

fn turn_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "session_id": sid_prop(),
            "prompt": {"type": "string", "minLength": 1, "description": "The user message of the turn."},
            "model": {"type": "string", "description": "Model for this turn (default: the session's)."},
            "provider": {"type": "string", "description": "Provider for this turn (a name from agentd's config)."},
            "permission_mode": {"type": "string", "enum": ["read_only", "auto"], "description": "`read_only` (default) refuses the turn's writing tools (write_file, edit_file, shell); `auto` allows them."}
        },
        "required": ["session_id", "prompt"],
        "additionalProperties": false
    })
}

/// Every tool, in the order `tools/list` gives them.
pub const CATALOG: &[ToolSpec] = &[
    ToolSpec {
        name: "list_sessions",
        title: "List agentd sessions",
        description: "List agentd's durable agent sessions, newest first: id, status, event count, last update, title and workspace. Page on with `cursor`.",
        access: Access::Read,
        schema: list_schema,
    },
    ToolSpec {
        name: "search",
        title: "Search agentd sessions",
        description: "Search the events of every agentd session (messages, tool calls and results) for text or a regular expression. Each hit names its session, seq and event type with a snippet; read around it with `show` (after_seq = seq - 1).",
        access: Access::Read,
        schema: search_schema,
    },
    ToolSpec {
        name: "show",
        title: "Show a session's events",
        description: "Read one agentd session: its summary (first page) and its events in order, one entry each (user and assistant messages, tool calls and results, turns). Paged: a page ends at `limit` events or 16 KiB of text and names the `after_seq` to read on.",
        access: Access::Read,
        schema: show_schema,
    },
    ToolSpec {
        name: "context",
        title: "Replay context of a session",
        description: "The exact input a provider would get if the session continued now (the replay of its Log in a provider dialect), with replay statistics. Capped at 16 KiB of text.",
        access: Access::Read,
        schema: context_schema,
    },
    ToolSpec {
        name: "tree",
        title: "Fork tree of sessions",
        description: "The fork lineage of a session (its root and every fork below, with fork points), or every session tree of a workspace. Give `session_id` or `workspace`.",
        access: Access::Read,
        schema: tree_schema,
    },
    ToolSpec {
        name: "checkpoint",
        title: "Checkpoint of a session",
        description: "A session's checkpoint: a compact text view of where it stands (goal, recent messages, files touched, open tool calls), built from its Log.",
        access: Access::Read,
        schema: checkpoint_schema,
    },
    ToolSpec {
        name: "fork",
        title: "Fork a session",
        description: "Create a new session that continues from a point of an existing one (its Log up to `to_seq`); the original is untouched. Workspace files are left as they are.",
        access: Access::Write,
        schema: fork_schema,
    },
    ToolSpec {
        name: "turn",
        title: "Run a turn in a session",
        description: "Send a prompt to an existing agentd session and wait for the turn to end; returns the assistant's final text. The turn runs with the session's provider and model, its tools in `read_only` mode unless `permission_mode` is `auto`. Cancelling the call interrupts the turn.",
        access: Access::Write,
        schema: turn_schema,
    },
];

/// The tools offered: read-only ones always, writing ones only with `allow_writes`.
pub fn offered(allow_writes: bool) -> impl Iterator<Item = &'static ToolSpec> {
    CATALOG
        .iter()
        .filter(move |t| allow_writes || t.access == Access::Read)
}

pub fn find(name: &str) -> Option<&'static ToolSpec> {
    CATALOG.iter().find(|t| t.name == name)
}

/// Why a writing tool is refused when the server runs without `--allow-writes`.
pub fn writes_off(name: &str) -> AgentError {
    AgentError::new(
        agentd_proto::ErrorKind::PermissionDenied,
        format!(
            "tool `{name}` changes sessions and is off: this server is read-only; \
             start it as `agentctl mcp-server --allow-writes` to offer `fork` and `turn`"
        ),
    )
}

/// What a call runs against the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// One native call; its result is rendered by `render(tool, ..)`.
    Call { method: &'static str, params: Value },
    /// `show`: the session summary (first page only), then one page of events.
    Show {
        session_id: String,
        header: bool,
        events: Value,
    },
}

fn args<T: for<'de> Deserialize<'de>>(tool: &str, a: &Map<String, Value>) -> Result<T, AgentError> {
    serde_json::from_value(Value::Object(a.clone()))
        .map_err(|e| AgentError::invalid_args(format!("{tool}: bad arguments: {e}")))
}

fn absolute(field: &str, p: &Option<String>) -> Result<(), AgentError> {
    match p {
        Some(w) if !std::path::Path::new(w).is_absolute() => Err(AgentError::invalid_args(
            format!("{field} must be an absolute path, got {w:?}"),
        )),
        _ => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    workspace: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
    #[serde(default)]
    include_archived: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    regex: bool,
    #[serde(default)]
    case_sensitive: bool,
    workspace: Option<String>,
    types: Option<Vec<String>>,
    limit: Option<usize>,
    cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShowArgs {
    session_id: String,
    after_seq: Option<u64>,
    limit: Option<usize>,
    types: Option<Vec<String>>,
    #[serde(default)]
    messages_only: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextArgs {
    session_id: String,
    dialect: Option<String>,
    after_seq: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeArgs {
    session_id: Option<String>,
    workspace: Option<String>,
    max_depth: Option<usize>,
    #[serde(default)]
    include_archived: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SidArgs {
    session_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkArgs {
    session_id: String,
    to_seq: Option<u64>,
    title: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnArgs {
    session_id: String,
    prompt: String,
    model: Option<String>,
    provider: Option<String>,
    permission_mode: Option<String>,
}

/// Maps a call of `tool` with `a` to what runs against the daemon. Arguments are
/// checked here (unknown keys, types, ranges), so a bad call never reaches the socket.
pub fn plan(tool: &str, a: &Map<String, Value>) -> Result<Plan, AgentError> {
    let call = |method, params: Result<Value, AgentError>| {
        Ok(Plan::Call {
            method,
            params: params?,
        })
    };
    match tool {
        "list_sessions" => {
            let a: ListArgs = args(tool, a)?;
            absolute("workspace", &a.workspace)?;
            let p = rpc::ListParams {
                workspace: a.workspace,
                limit: Some(a.limit.unwrap_or(50).clamp(1, 200)),
                include_archived: a.include_archived,
                cursor: a.cursor,
            };
            call(method::LIST, to_params(&p))
        }
        "search" => {
            let a: SearchArgs = args(tool, a)?;
            if a.query.is_empty() {
                return Err(AgentError::invalid_args("search: `query` is empty"));
            }
            absolute("workspace", &a.workspace)?;
            let p = rpc::SearchParams {
                query: a.query,
                regex: a.regex,
                case_sensitive: a.case_sensitive,
                workspace: a.workspace,
                types: a.types,
                limit: Some(a.limit.unwrap_or(50).clamp(1, 1000)),
                cursor: a.cursor,
            };
            call(method::SEARCH, to_params(&p))
        }
        "show" => {
            let a: ShowArgs = args(tool, a)?;
            let limit = a.limit.unwrap_or(SHOW_LIMIT).clamp(1, SHOW_LIMIT_MAX);
            let types = if a.messages_only {
                Some(vec!["user_message".into(), "assistant_message".into()])
            } else {
                a.types
            };
            let events = to_params(&rpc::EventsParams {
                session_id: a.session_id.clone(),
                after_seq: a.after_seq,
                limit: Some(limit),
                types,
                tail: None,
            })?;
            Ok(Plan::Show {
                session_id: a.session_id,
                header: a.after_seq.is_none(),
                events,
            })
        }
        "context" => {
            let a: ContextArgs = args(tool, a)?;
            let dialect = match a.dialect.as_deref() {
                None => None,
                Some("responses") => Some(Dialect::Responses),
                Some("chat") => Some(Dialect::Chat),
                Some("anthropic") => Some(Dialect::Anthropic),
                Some(d) => {
                    return Err(AgentError::invalid_args(format!(
                        "context: dialect must be responses, chat or anthropic, got {d:?}"
                    )))
                }
            };
            let p = rpc::ContextParams {
                session_id: a.session_id,
                after_seq: a.after_seq,
                dialect,
            };
            call(method::CONTEXT, to_params(&p))
        }
        "tree" => {
            let a: TreeArgs = args(tool, a)?;
            if a.session_id.is_none() == a.workspace.is_none() {
                return Err(AgentError::invalid_args(
                    "tree: give exactly one of `session_id` or `workspace`",
                ));
            }
            absolute("workspace", &a.workspace)?;
            let p = rpc::TreeParams {
                session_id: a.session_id,
                workspace: a.workspace,
                max_depth: a.max_depth,
                include_archived: a.include_archived,
            };
            call(method::TREE, to_params(&p))
        }
        "checkpoint" => {
            let a: SidArgs = args(tool, a)?;
            let p = rpc::CheckpointParams {
                session_id: a.session_id,
                caps: None,
            };
            call(method::CHECKPOINT, to_params(&p))
        }
        "fork" => {
            let a: ForkArgs = args(tool, a)?;
            let p = rpc::ForkParams {
                session_id: a.session_id,
                to_seq: a.to_seq,
                title: a.title,
                dry_run: a.dry_run,
                ..Default::default()
            };
            call(method::FORK, to_params(&p))
        }
        "turn" => {
            let a: TurnArgs = args(tool, a)?;
            if a.prompt.trim().is_empty() {
                return Err(AgentError::invalid_args("turn: `prompt` is empty"));
            }
            let mode = a.permission_mode.unwrap_or_else(|| "read_only".into());
            if !matches!(mode.as_str(), "read_only" | "auto") {
                return Err(AgentError::invalid_args(format!(
                    "turn: permission_mode must be read_only or auto, got {mode:?} \
                     (`ask` needs a client that answers permission requests; use agentctl or ACP)"
                )));
            }
            let p = rpc::TurnParams {
                session_id: a.session_id,
                input: a.prompt,
                model: a.model,
                provider: a.provider,
                permission_mode: Some(mode),
                wait: Some(true),
                ..Default::default()
            };
            call(method::TURN, to_params(&p))
        }
        _ => Err(AgentError::new(
            agentd_proto::ErrorKind::NotFound,
            format!("no tool named `{tool}`"),
        )),
    }
}

/// The largest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Caps `text` at [`TEXT_CAP`] bytes (at a line end when one is near), with a closing
/// note of what was cut and how to see more.
pub fn cap(text: String, hint: &str) -> String {
    if text.len() <= TEXT_CAP {
        return text;
    }
    let note_room = 200 + hint.len();
    let head = prefix(&text, TEXT_CAP.saturating_sub(note_room));
    let head = match head.rfind('\n') {
        Some(i) if i > head.len() / 2 => &head[..=i],
        _ => head,
    };
    let mut out = head.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    let _ = write!(
        out,
        "[output cut at 16 KiB: {} of {} bytes shown{}{}]",
        head.len(),
        text.len(),
        if hint.is_empty() { "" } else { "; " },
        hint
    );
    out
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of a call's result (every tool but `show`).
pub fn render(tool: &str, v: &Value) -> String {
    match tool {
        "list_sessions" => render_list(v),
        "search" => render_search(v),
        "checkpoint" => cap(
            format!(
                "{}\n",
                v.get("view")
                    .and_then(Value::as_str)
                    .map_or_else(|| pretty(v), str::to_string)
                    .trim_end()
            ),
            "",
        ),
        "context" => cap(
            format!(
                "dialect: {}\nstats: {}\nitems:\n{}",
                s(v, "dialect"),
                v.get("stats").map(Value::to_string).unwrap_or_default(),
                pretty(v.get("items").unwrap_or(&Value::Null))
            ),
            "pass a larger `after_seq` to see the newest part only",
        ),
        "turn" => render_turn(v),
        "tree" => match v.get("drawing").and_then(Value::as_str) {
            Some(d) => cap(d.to_string(), "narrow with `max_depth`"),
            None => cap(pretty(v), "narrow with `max_depth`"),
        },
        _ => cap(pretty(v), ""),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn render_list(v: &Value) -> String {
    let sessions = v["sessions"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    if sessions.is_empty() {
        out.push_str("no sessions\n");
    }
    for x in &sessions {
        let _ = write!(
            out,
            "{}  {}  {} events  updated {}",
            s(x, "session_id"),
            s(x, "status"),
            x["event_count"],
            s(x, "updated_at")
        );
        if let Some(t) = x.get("title").and_then(Value::as_str) {
            let _ = write!(out, "  \"{}\"", one_line(t));
        }
        let _ = write!(out, "  {}", s(x, "workspace"));
        if let Some(p) = x.get("parent_session_id").and_then(Value::as_str) {
            let _ = write!(out, "  (fork of {p})");
        }
        if x["archived"] == true {
            out.push_str("  [archived]");
        }
        out.push('\n');
    }
    if let Some(c) = v.get("next_cursor").and_then(Value::as_str) {
        let _ = writeln!(out, "more: call list_sessions with cursor = {c:?}");
    }
    cap(out, "narrow with `workspace` or a smaller `limit`")
}

fn render_search(v: &Value) -> String {
    let hits = v["hits"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    if hits.is_empty() {
        out.push_str("no matches\n");
    }
    for h in &hits {
        let _ = write!(
            out,
            "{} seq {} {} ({}",
            s(h, "session_id"),
            h["seq"],
            s(h, "type"),
            s(h, "ts")
        );
        if let Some(t) = h.get("title").and_then(Value::as_str) {
            let _ = write!(out, ", \"{}\"", one_line(t));
        }
        let _ = writeln!(out, "): {}", one_line(s(h, "snippet")));
    }
    let _ = writeln!(
        out,
        "({} sessions scanned)",
        v.get("sessions_scanned").unwrap_or(&json!(0))
    );
    if let Some(c) = v.get("next_cursor").and_then(Value::as_str) {
        let _ = writeln!(out, "more: call search again with cursor = {c:?}");
    }
    cap(out, "narrow the query, `types` or `limit`")
}

fn render_turn(v: &Value) -> String {
    let mut out = format!(
        "turn {} {} (events {}..{})",
        s(v, "turn_id"),
        s(v, "status"),
        v["first_seq"],
        v["last_seq"]
    );
    for k in ["stop_reason", "reason"] {
        if let Some(r) = v.get(k).and_then(Value::as_str) {
            let _ = write!(out, ", {k}: {r}");
        }
    }
    out.push('\n');
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        let _ = writeln!(out, "error: {}: {}", s(e, "kind"), s(e, "message"));
    }
    out.push_str(s(v, "output_text"));
    if !out.ends_with('\n') {
        out.push('\n');
    }
    cap(out, "read the whole turn with `show`")
}

/// The progress message for one event of a running `turn`, or `None` for events not
/// worth a report (deltas, usage records).
pub fn progress_message(e: &Value) -> Option<String> {
    let d = &e["data"];
    let text = match s(e, "type") {
        "turn_started" => "turn started".to_string(),
        "assistant_message" => format!("assistant: {}", one_line(s(d, "text"))),
        "tool_call" => format!("tool call: {}", s(d, "name")),
        "tool_result" => format!(
            "tool result: {}",
            if d["ok"] == true { "ok" } else { "failed" }
        ),
        "permission_decision" => format!("permission: {}", s(d, "decision")),
        "history_compaction" => "history compacted".to_string(),
        "turn_ended" => format!("turn ended: {}", s(d, "status")),
        _ => return None,
    };
    Some(prefix(&text, 200).to_string())
}

/// The text of one event in a `show` page (at most [`EVENT_CAP`] bytes of its body).
pub fn event_entry(e: &Value) -> String {
    let kind = s(e, "type");
    let d = &e["data"];
    let body = match kind {
        "user_message" => format!("user: {}", s(d, "text")),
        "assistant_message" => format!("assistant: {}", s(d, "text")),
        "tool_call" => format!(
            "tool_call {} {} (call {})",
            s(d, "name"),
            d.get("args").map(Value::to_string).unwrap_or_default(),
            s(d, "call_id")
        ),
        "tool_result" => {
            let out = d
                .get("output")
                .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_string))
                .unwrap_or_default();
            format!(
                "tool_result (call {}) ok={}: {}",
                s(d, "call_id"),
                d.get("ok").unwrap_or(&Value::Null),
                out
            )
        }
        "reasoning" => {
            let summary: Vec<&str> = d["item"]["summary"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            format!("reasoning: {}", summary.join(" "))
        }
        "provider_usage" => format!(
            "provider_usage {} {} input={} output={}",
            s(d, "provider"),
            s(d, "model"),
            d["usage"]["input_tokens"],
            d["usage"]["output_tokens"]
        ),
        "turn_started" => format!("turn_started {}", s(d, "turn_id")),
        "turn_ended" => format!("turn_ended {} {}", s(d, "turn_id"), s(d, "status")),
        _ => format!("{kind} {d}"),
    };
    let mut text = prefix(&body, EVENT_CAP).to_string();
    if text.len() < body.len() {
        let _ = write!(text, " […{} more bytes]", body.len() - text.len());
    }
    format!("#{} {} {}\n", e["seq"], s(e, "ts"), text)
}

/// The text of a `show` page: the summary (first page), then events until the page or
/// [`TEXT_CAP`] ends, and where to read on. Events are never cut across pages: the
/// next page starts after the last event shown.
pub fn render_show(header: Option<&Value>, page: &Value) -> String {
    let mut out = String::new();
    if let Some(h) = header {
        let _ = writeln!(out, "session {}", s(h, "session_id"));
        if let Some(t) = h.get("title").and_then(Value::as_str) {
            let _ = writeln!(out, "title: {}", one_line(t));
        }
        let _ = writeln!(out, "workspace: {}", s(h, "workspace"));
        let _ = writeln!(
            out,
            "status: {}  events: {}  last_seq: {}",
            s(h, "status"),
            h["event_count"],
            h["last_seq"]
        );
        if let Some(c) = h.get("event_counts").and_then(Value::as_object) {
            let counts: Vec<String> = c.iter().map(|(k, n)| format!("{k}={n}")).collect();
            let _ = writeln!(out, "counts: {}", counts.join(" "));
        }
        if let Some(p) = h["pending_tool_calls"].as_array().filter(|p| !p.is_empty()) {
            let _ = writeln!(out, "pending tool calls: {}", Value::Array(p.clone()));
        }
        out.push('\n');
    }
    let events = page["events"].as_array().map_or(&[][..], Vec::as_slice);
    let room = TEXT_CAP - 200;
    let mut last_shown: Option<u64> = None;
    let mut cut = false;
    for e in events {
        let entry = event_entry(e);
        if out.len() + entry.len() > room && last_shown.is_some() {
            cut = true;
            break;
        }
        out.push_str(&entry);
        last_shown = e["seq"].as_u64();
    }
    if events.is_empty() {
        out.push_str("no events in this range\n");
    }
    let next = if cut {
        last_shown
    } else {
        page.get("next_after_seq").and_then(Value::as_u64)
    };
    match next {
        Some(n) if cut => {
            let _ = writeln!(
                out,
                "[page cut at 16 KiB; more: call show with after_seq = {n}]"
            );
        }
        Some(n) => {
            let _ = writeln!(out, "more: call show with after_seq = {n}");
        }
        None => out.push_str("(end of session)\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn the_catalog_is_well_formed() {
        let read: Vec<_> = offered(false).map(|t| t.name).collect();
        assert_eq!(
            read,
            [
                "list_sessions",
                "search",
                "show",
                "context",
                "tree",
                "checkpoint"
            ]
        );
        assert_eq!(offered(true).count(), CATALOG.len());
        for t in CATALOG {
            let schema = (t.schema)();
            assert_eq!(schema["type"], "object", "{}", t.name);
            assert_eq!(schema["additionalProperties"], false, "{}", t.name);
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap();
                assert!(schema["properties"].get(r).is_some(), "{}: {r}", t.name);
            }
            assert!(t.description.len() > 40, "{}", t.name);
        }
    }

    #[test]
    fn plans_map_arguments_to_native_calls() {
        assert_eq!(
            plan("list_sessions", &obj(json!({}))).unwrap(),
            Plan::Call {
                method: method::LIST,
                params: json!({"limit": 50})
            }
        );
        let Plan::Call { method: m, params } = plan(
            "search",
            &obj(json!({"query": "x", "types": ["tool_result"], "limit": 5000})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(m, method::SEARCH);
        assert_eq!(params["limit"], 1000);
        assert_eq!(params["types"], json!(["tool_result"]));
        let Plan::Show { header, events, .. } = plan(
            "show",
            &obj(json!({"session_id": "s", "messages_only": true})),
        )
        .unwrap() else {
            panic!()
        };
        assert!(header);
        assert_eq!(
            events,
            json!({"session_id": "s", "limit": 50, "types": ["user_message", "assistant_message"]})
        );
        let Plan::Show { header, events, .. } =
            plan("show", &obj(json!({"session_id": "s", "after_seq": 4}))).unwrap()
        else {
            panic!()
        };
        assert!(!header);
        assert_eq!(events["after_seq"], 4);
        let Plan::Call { params, .. } =
            plan("turn", &obj(json!({"session_id": "s", "prompt": "hi"}))).unwrap()
        else {
            panic!()
        };
        assert_eq!(params["permission_mode"], "read_only");
        assert_eq!(params["input"], "hi");
    }

    #[test]
    fn bad_arguments_are_refused_before_the_daemon() {
        let bad = |tool: &str, a: Value| plan(tool, &obj(a)).unwrap_err();
        assert!(bad("show", json!({})).message.contains("session_id"));
        assert!(bad("show", json!({"session_id": "s", "x": 1}))
            .message
            .contains("unknown field"));
        assert!(bad("tree", json!({})).message.contains("exactly one"));
        assert!(bad("list_sessions", json!({"workspace": "rel"}))
            .message
            .contains("absolute"));
        assert!(bad("context", json!({"session_id": "s", "dialect": "x"}))
            .message
            .contains("dialect"));
        assert!(bad(
            "turn",
            json!({"session_id": "s", "prompt": "p", "permission_mode": "ask"})
        )
        .message
        .contains("read_only or auto"));
        assert_eq!(
            bad("nope", json!({})).kind,
            agentd_proto::ErrorKind::NotFound
        );
    }

    #[test]
    fn progress_reports_durable_steps_only() {
        let ev = |t: &str, d: Value| json!({"seq": 1, "type": t, "data": d});
        let m = |e: Value| progress_message(&e);
        assert_eq!(
            m(ev(
                "tool_call",
                json!({"name": "shell", "call_id": "c", "args": {}})
            )),
            Some("tool call: shell".into())
        );
        assert_eq!(
            m(ev("tool_result", json!({"ok": false, "call_id": "c"}))),
            Some("tool result: failed".into())
        );
        assert_eq!(
            m(ev("turn_ended", json!({"status": "completed"}))),
            Some("turn ended: completed".into())
        );
        let long = m(ev("assistant_message", json!({"text": "a\n".repeat(500)}))).unwrap();
        assert!(
            long.len() <= 200 && long.starts_with("assistant: a a"),
            "{long}"
        );
        assert_eq!(m(ev("text_delta", json!({"delta": "x"}))), None);
        assert_eq!(m(ev("provider_usage", json!({}))), None);
    }

    #[test]
    fn cap_cuts_on_a_char_boundary_and_says_so() {
        let short = "abc\n".to_string();
        assert_eq!(cap(short.clone(), "h"), short);
        let long = "é".repeat(TEXT_CAP);
        let c = cap(long.clone(), "try less");
        assert!(c.len() <= TEXT_CAP, "{}", c.len());
        assert!(c.contains("output cut at 16 KiB"));
        assert!(c.contains(&format!("of {} bytes shown; try less", long.len())));
        let lines: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let c = cap(lines, "");
        let body = c.rsplit_once("[output cut").unwrap().0;
        assert!(body.ends_with('\n') && body.lines().last().unwrap().starts_with("line "));
    }

    #[test]
    fn show_pages_end_on_whole_events_within_the_cap() {
        let events: Vec<Value> = (1..=40)
            .map(|i| {
                json!({"seq": i, "ts": "t", "type": "assistant_message",
                       "data": {"text": "x".repeat(3000)}})
            })
            .collect();
        let text = render_show(None, &json!({"events": events, "next_after_seq": 40}));
        assert!(text.len() <= TEXT_CAP, "{}", text.len());
        assert!(text.contains("[…"), "per-event cut is noted");
        let shown = text.matches("assistant: ").count();
        assert!((5..40).contains(&shown), "{shown}");
        assert!(text.contains(&format!("after_seq = {shown}]")), "{text}");
        let end = render_show(
            Some(
                &json!({"session_id": "s1", "workspace": "/w", "status": "idle",
                         "event_count": 1, "last_seq": 0, "pending_tool_calls": []}),
            ),
            &json!({"events": [{"seq": 0, "ts": "t", "type": "user_message", "data": {"text": "hi"}}]}),
        );
        assert!(end.starts_with("session s1\n"));
        assert!(end.contains("#0 t user: hi\n"));
        assert!(end.ends_with("(end of session)\n"));
    }
}
