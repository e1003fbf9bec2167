//! Method names and param/result types of the native API (docs/protocol.md#methods).
//!
//! Params are objects with snake_case keys; the daemon parses them with these types, so
//! an unknown or mistyped field is a -32602 `invalid_args` before any handler runs.

use crate::event::{Event, EventDraft};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const PROTOCOL_VERSION: u32 = 1;
pub const EVENT_NOTIFICATION: &str = "agentd/event";

pub mod method {
    pub const HELLO: &str = "agentd/hello";
    pub const STATUS: &str = "agentd/status";
    pub const SHUTDOWN: &str = "agentd/shutdown";
    pub const CREATE: &str = "agentd/create";
    pub const LIST: &str = "agentd/list";
    pub const SHOW: &str = "agentd/show";
    pub const EVENTS: &str = "agentd/events";
    pub const APPEND: &str = "agentd/append";
    pub const SUBSCRIBE: &str = "agentd/subscribe";
    pub const UNSUBSCRIBE: &str = "agentd/unsubscribe";
    pub const TURN: &str = "agentd/turn";
    pub const INTERRUPT: &str = "agentd/interrupt";
    pub const RECONCILE: &str = "agentd/reconcile";
    pub const CONTEXT: &str = "agentd/context";
    pub const COMPACT: &str = "agentd/compact";
    pub const CHECKPOINT: &str = "agentd/checkpoint";
    pub const FORK: &str = "agentd/fork";
    pub const TREE: &str = "agentd/tree";
    pub const IMPORT: &str = "agentd/import";
    pub const IMPORT_DISCOVER: &str = "agentd/import_discover";
    pub const PERMISSION: &str = "agentd/permission";
    pub const DIFF: &str = "agentd/diff";
    pub const REVERT: &str = "agentd/revert";
    pub const RENAME: &str = "agentd/rename";
    pub const ARCHIVE: &str = "agentd/archive";
    pub const UNARCHIVE: &str = "agentd/unarchive";
    pub const DELETE: &str = "agentd/delete";
    pub const RESTORE: &str = "agentd/restore";
    pub const SEARCH: &str = "agentd/search";
    pub const EXPORT: &str = "agentd/export";
    pub const USAGE: &str = "agentd/usage";
    pub const PREFLIGHT: &str = "agentd/preflight";
    pub const MCP_LIST: &str = "agentd/mcp_list";
    pub const MCP_TOOLS: &str = "agentd/mcp_tools";
    pub const MODELS: &str = "agentd/models";
    pub const INSTRUCTIONS: &str = "agentd/instructions";
    pub const STEER: &str = "agentd/steer";
    pub const DEQUEUE: &str = "agentd/dequeue";
    pub const GOAL_SET: &str = "agentd/goal_set";
    pub const GOAL_GET: &str = "agentd/goal_get";
    pub const GOAL_CLEAR: &str = "agentd/goal_clear";
    pub const HOOKS: &str = "agentd/hooks";
    pub const HOOKS_TRUST: &str = "agentd/hooks_trust";
    pub const RESOLVE: &str = "agentd/resolve";
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelloResult {
    pub server: String,
    pub version: String,
    pub protocol_version: u32,
    pub capabilities: Vec<String>,
    pub home: String,
    pub pid: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusResult {
    pub uptime_s: u64,
    pub sessions_total: u64,
    pub sessions_loaded: u64,
    pub turns_running: u64,
    pub connections: u64,
    pub durability: String,
    /// Leftover `.*.tmp` files (creates cut short by a crash) removed at start-up.
    #[serde(default)]
    pub leftover_tmp_removed: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    pub workspace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `{mode?, network?}` for the session's commands (docs/sandbox.md#contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_json::Value>,
    /// MCP servers of this session, in ACP's `McpServer` shape (docs/mcp.md#contract); kept in
    /// the daemon's memory only (their env values may be secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateResult {
    pub session_id: String,
    pub log_path: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Include archived sessions (hidden by default).
    #[serde(default, skip_serializing_if = "is_false")]
    pub include_archived: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub session_id: String,
    /// The session's UUID for clients that name sessions by UUID (docs/protocol.md#session-uuids).
    #[serde(default)]
    pub uuid: String,
    pub workspace: String,
    pub title: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub event_count: u64,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_root_session_id: Option<String>,
    /// `subagent` for a child session a `task` call created (docs/subagents.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relation: Option<String>,
    /// The parent's `task` call that created this subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_call_id: Option<String>,
    /// A subagent's depth: 1 for a child the `task` tool made, 2 for its child, ….
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_depth: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub archived: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListResult {
    pub sessions: Vec<SessionSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `agentd/resolve`: the session an id names, whether a session id or a UUID
/// (docs/protocol.md#session-uuids).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveParams {
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveResult {
    pub session_id: String,
    pub uuid: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    pub session_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CorruptLine {
    /// 1-based physical line number.
    pub line: u64,
    pub byte_offset: u64,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShowResult {
    pub session_id: String,
    /// The session's UUID (docs/protocol.md#session-uuids).
    #[serde(default)]
    pub uuid: String,
    pub workspace: String,
    pub title: Option<String>,
    pub log_path: String,
    pub event_count: u64,
    pub last_seq: Option<u64>,
    pub event_counts: std::collections::BTreeMap<String, u64>,
    pub pending_tool_calls: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_to_seq: Option<u64>,
    pub corrupt_lines: Vec<CorruptLine>,
    pub unknown_types: std::collections::BTreeMap<String, u64>,
    pub seq_anomalies: Vec<Value>,
    pub status: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,
    /// The page is the session's last `tail` events (of `types` when given), in seq
    /// order; not with `after_seq` or `limit`. While the daemon loads a long session
    /// it is answered from the Log's end (docs/chat.md#attaching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventsResult {
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after_seq: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppendParams {
    pub session_id: String,
    pub events: Vec<EventDraft>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_seq: Option<u64>,
    /// The client's idempotency key (see [`validate_client_request_id`]): the same key
    /// with the same events answers the append already made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppendResult {
    pub first_seq: u64,
    pub last_seq: u64,
    pub ids: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    /// Opt in to `agentd/permission` requests for `ask` mode.
    #[serde(default, skip_serializing_if = "is_false")]
    pub permissions: bool,
}

/// `agentd/unsubscribe`: ends the subscription `agentd/subscribe` answered with (the
/// id exactly as it came: the daemon's subscription layer reads it by this name).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnsubscribeParams {
    pub subscription: Value,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnParams {
    pub session_id: String,
    pub input: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// `minimal|low|medium|high`: how hard the model thinks this turn (over the
    /// provider config's `reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Images sent with the prompt, each `{path}` (absolute, or relative to the
    /// session's workspace) or `{data, mime_type}` (base64): PNG, JPEG, GIF or WebP, at
    /// most [`MAX_TURN_IMAGE_BYTES`] each (docs/turns-and-providers.md#images).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<TurnImage>,
    /// `{mode?, network?}` for this turn's commands (docs/sandbox.md#contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_json::Value>,
    /// On a busy session, admit the prompt durably behind the running turn
    /// (`status: "queued"`) instead of answering `busy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
    /// The client's idempotency key (see [`validate_client_request_id`]): the same key
    /// with the same params answers the turn already admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// Replaces the session's client-given MCP servers (ACP shape) from this turn on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<serde_json::Value>>,
}

/// One image of `agentd/turn`'s `images`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnImage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The bytes, base64 (standard alphabet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// Largest image a turn may carry.
pub const MAX_TURN_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
/// Most images one turn may carry.
pub const MAX_TURN_IMAGES: usize = 16;

/// The media type of an image's bytes from their signature (the first 12 bytes are
/// enough): PNG, JPEG, GIF or WebP, the types a turn's images may have.
pub fn image_mime(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The reasoning effort levels a turn or a provider config may name.
pub const REASONING_EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// `invalid_args` unless `e` is one of [`REASONING_EFFORTS`]; the details name the
/// field and the allowed levels.
pub fn validate_reasoning_effort(e: &str) -> Result<(), crate::AgentError> {
    if REASONING_EFFORTS.contains(&e) {
        return Ok(());
    }
    let shown: String = e.chars().take(32).collect();
    Err(crate::AgentError::invalid_args(format!(
        "reasoning_effort must be one of minimal, low, medium, high (got {shown:?})"
    ))
    .with_details(serde_json::json!({"field": "reasoning_effort", "allowed": REASONING_EFFORTS})))
}

/// Longest `client_request_id`.
pub const MAX_CLIENT_REQUEST_ID: usize = 128;

/// A `client_request_id` is 1 to 128 printable ASCII characters (space to `~`).
pub fn validate_client_request_id(id: &str) -> Result<(), crate::AgentError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_CLIENT_REQUEST_ID
        && id.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if ok {
        Ok(())
    } else {
        Err(crate::AgentError::new(
            crate::ErrorKind::InvalidArgs,
            "client_request_id must be 1 to 128 printable ASCII characters",
        )
        .with_details(serde_json::json!({"field": "client_request_id"})))
    }
}

/// `agentd/steer`: input for the running turn's next provider call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SteerParams {
    pub session_id: String,
    pub input: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// Images that go with the input, as `agentd/turn`'s `images` take them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<TurnImage>,
}

/// `agentd/goal_set`: an objective the daemon keeps starting turns for until the model
/// calls `goal_complete` or a budget is spent (docs/goals.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalSetParams {
    pub session_id: String,
    pub objective: String,
    /// Turns the goal may start (default 20, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Provider tokens (input + output) the goal's turns may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// The model of the goal's turns (else the session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `agentd/dequeue`: withdraws a queued turn that has not started.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DequeueParams {
    pub session_id: String,
    pub turn_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnResult {
    pub turn_id: String,
    pub status: String,
    pub output_text: String,
    pub first_seq: u64,
    pub last_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::AgentError>,
    /// Why a completed turn's last model step stopped, when it was not the model's own
    /// end of turn: `max_tokens` (output limit) or `refusal` (the provider refused or
    /// filtered the answer). Absent otherwise; the same value is on `turn_ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Why a completed turn ended without the model's own end of turn:
    /// `max_iterations` when every allowed provider call asked for tools. Absent
    /// otherwise; the same value is on `turn_ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InterruptResult {
    pub interrupted: bool,
    pub reconciled: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcileResult {
    pub pending: Vec<Value>,
    pub recorded: Vec<Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<crate::replay::Dialect>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_events: Option<usize>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub summarize: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The workspace files of the fork (docs/snapshots.md); `keep` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<ForkFiles>,
    /// With `files: restore`: overwrite files someone else changed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
    /// With `files: worktree`: the new directory (absolute, must not exist); default
    /// `<home>/worktrees/<child id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
}

/// What `agentd/fork` does with the workspace files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkFiles {
    /// Leave them as they are (the default).
    #[default]
    Keep,
    /// Revert the files the parent changed after the fork point (same rules as revert).
    Restore,
    /// Materialize the files at the fork point in a new directory, the child's workspace.
    Worktree,
}

/// `agentd/diff`: what the session changed, per file, from its snapshots.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// `agentd/revert`: the files the session changed after `to_seq`, back to their state there.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevertParams {
    pub session_id: String,
    pub to_seq: u64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<usize>,
    /// Workspace trees: include archived sessions (hidden by default).
    #[serde(default, skip_serializing_if = "is_false")]
    pub include_archived: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// `pi`, `pixir`, `codex`, `claude`, `opencode`, `gemini` or `auto` (the default).
    #[serde(default = "auto_format")]
    pub format: String,
    pub path: String,
    /// The session to take from a source holding many (an opencode database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Import only if this source (same identity and bytes) was not imported before by
    /// a `once` import; a source that changed since is imported as a new session naming
    /// the earlier one (`imported_from.previous_import`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub once: bool,
    /// Fail (kind `unsupported`, nothing made) instead of importing with warnings: every
    /// prompt, answer, tool call and result must carry over exactly or with a reason.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strict: bool,
}

/// `agentd/import_discover`: lists the sessions other agents keep under `home`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverParams {
    /// The user's home directory (absolute).
    pub home: String,
    /// The agents' own overrides from the caller's environment: `CLAUDE_CONFIG_DIR`,
    /// `CODEX_HOME`, `PI_CODING_AGENT_DIR`, `XDG_DATA_HOME`, `GEMINI_CLI_HOME`.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Only this agent: `claude`, `codex`, `pi`, `opencode` or `gemini`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Only sources changed at or after this date (`YYYY-MM-DD` or RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

fn auto_format() -> String {
    "auto".to_string()
}

// ---- Session verbs (docs/sessions-and-history.md#session-verbs) ----

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameParams {
    pub session_id: String,
    pub title: String,
}

/// `agentd/rename`, `agentd/archive`, `agentd/unarchive`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionInfoResult {
    pub session_id: String,
    pub title: Option<String>,
    pub labels: Vec<String>,
    pub archived: bool,
    /// Seq of the `session_info` event recorded; absent when nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    pub session_id: String,
    /// Remove the files for good instead of moving them to the trash (also purges a
    /// session already in the trash).
    #[serde(default, skip_serializing_if = "is_false")]
    pub purge: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteResult {
    pub session_id: String,
    /// `trashed` or `purged`.
    pub outcome: String,
    /// Where the Log now is (trash), absent when purged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trash_path: Option<String>,
    /// Direct forks of the session: they keep working (their Logs are self-contained)
    /// and their lineage shows this session as deleted.
    pub forks: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoreResult {
    pub session_id: String,
    pub log_path: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    pub query: String,
    /// Treat `query` as a regular expression (size-bounded) instead of literal text.
    #[serde(default, skip_serializing_if = "is_false")]
    pub regex: bool,
    /// Match case exactly (default: ignore case).
    #[serde(default, skip_serializing_if = "is_false")]
    pub case_sensitive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Event types to search among `user_message`, `assistant_message`, `tool_call`,
    /// `tool_result` (default: all four).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchHit {
    /// `SID@seq`.
    #[serde(rename = "ref")]
    pub reference: String,
    pub session_id: String,
    pub seq: u64,
    pub ts: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Where in the event the text matched: `text`, `args`, `output`, `error`.
    pub field: String,
    pub title: Option<String>,
    /// Text around the first match, on one line.
    pub snippet: String,
    /// Byte range of the match inside `snippet`.
    pub highlight: [usize; 2],
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchResult {
    pub hits: Vec<SearchHit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    pub sessions_scanned: u64,
    pub bytes_scanned: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    pub session_id: String,
    /// `markdown`, `html`, `jsonl`, or a peer's native session format: `claude-code`,
    /// `codex`, `pi`.
    pub format: String,
    /// Absolute path the daemon writes the export to (temp file + rename); without it
    /// the export comes back as `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_path: Option<String>,
    /// With a peer format: write the session where the peer looks for its sessions,
    /// resolved from this home and the peer's own override in `env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<ExportInstall>,
}

/// Where `agentd/export` installs a session for a peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportInstall {
    /// The user's home directory (absolute).
    pub home: String,
    /// The peers' overrides from the caller's environment: `CLAUDE_CONFIG_DIR`,
    /// `CODEX_HOME`, `PI_CODING_AGENT_DIR`.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportResult {
    pub session_id: String,
    pub format: String,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_path: Option<String>,
    /// Damaged lines of the Log (corrupt JSON, torn tail), marked in the export.
    pub damaged_lines: u64,
    /// Peer formats: the file written (`output_path` or the installed file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Peer formats: the new session's id in the peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_id: Option<String>,
    /// Peer formats: the command that continues the session in the peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<String>,
    /// Peer formats: how the peer finds the file (its index, or the fallback relied on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// Peer formats: what did not map exactly, with counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// RFC 3339 timestamp or `YYYY-MM-DD`: only usage recorded at or after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// `model` (default), `session` or `day`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub total_tokens: u64,
    /// In the currency of the config's `[prices]`; absent when a model has no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageRow {
    pub key: String,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsageResult {
    pub by: String,
    pub rows: Vec<UsageRow>,
    pub total: UsageTotals,
    /// Models seen without a price in the config.
    pub unpriced_models: Vec<String>,
    /// With `session_id`: the subagent sessions under it whose usage is rolled up into
    /// these totals (docs/subagents.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreflightParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// `agentd/models`: params are optional (an empty object, or none).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsParams {
    /// Ask the models endpoints of `list_models` providers again instead of answering
    /// from the ten-minute cache.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refresh: bool,
}

/// `agentd/instructions`: what the next turn of a session (or of a turn in `workspace`)
/// would send besides the history: the base prompt and the instruction files.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionsParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Without a session: the workspace to look from (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// Params of the methods that take none (`agentd/status`, `agentd/shutdown`): an empty
/// object; unknown fields are refused like everywhere else.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `agentd/mcp_list`: the configured MCP servers and, for `session_id` (else every
/// session with servers), their state (docs/mcp.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpListParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `agentd/mcp_tools`: the tools of a session's MCP servers, or of the configured ones
/// started for the probe in `workspace`; `server` narrows to one.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolsParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Where a probe runs the servers (a session's workspace is used for a session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// `agentd/hooks`: the hooks a turn in `workspace` (absolute) would run, and its project
/// file `.agentd/hooks.toml` with whether it is trusted (docs/hooks.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksParams {
    pub workspace: String,
}

/// `agentd/hooks_trust`: trusts `workspace`'s project hooks file as it is now; with
/// `sha256`, only if the file still has that digest (what the user reviewed).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksTrustParams {
    pub workspace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The models a client may offer for a turn, in the daemon's order: each configured
/// provider's `model`, its `models` list, then the built-in providers' default models
/// whose key is in the daemon's environment.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModelsResult {
    pub models: Vec<ModelChoice>,
    /// Every provider name a turn may give (configured tables and built-ins), so a
    /// client can tell `provider:model` from a model name with a colon in it.
    pub providers: Vec<String>,
    /// One entry per provider with `list_models = true`: how its models endpoint
    /// answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listings: Vec<ModelListing>,
}

/// How a provider's models endpoint answered `agentd/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelListing {
    pub provider: String,
    /// Models it listed (none when it failed).
    pub count: usize,
    /// Seconds since the listing was fetched (0: fetched for this request).
    pub age_s: u64,
    /// Why it could not be listed; the configured models are still offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelChoice {
    /// The provider's name (the `[providers.NAME]` key or a built-in name).
    pub provider: String,
    pub model: String,
    /// `model` (a configured table's `model`), `models` (an entry of its `models`
    /// list), `builtin` (a built-in provider's default model, its key being set) or
    /// `listed` (from the provider's models endpoint, with `list_models = true`).
    pub source: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreflightResult {
    pub provider: String,
    pub kind: String,
    /// The model a turn would use (empty for `script`, which reads a file).
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_path: Option<String>,
}

/// A turn's permission mode (`agentd/turn`'s `permission_mode`, `[turns]
/// permission_mode` in the config): which tool calls run without asking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Every tool runs (the default).
    #[default]
    Auto,
    /// Mutating tools ask a subscribed client first.
    Ask,
    /// Mutating tools are refused.
    #[serde(alias = "read-only")]
    ReadOnly,
}

impl PermissionMode {
    /// A request's `permission_mode`; `None` when it gives none.
    pub fn parse(s: Option<&str>) -> Result<Option<Self>, crate::AgentError> {
        match s {
            None => Ok(None),
            Some("auto") => Ok(Some(PermissionMode::Auto)),
            Some("ask") => Ok(Some(PermissionMode::Ask)),
            Some("read_only") | Some("read-only") => Ok(Some(PermissionMode::ReadOnly)),
            Some(_) => Err(crate::AgentError::invalid_args(
                "permission_mode must be auto, ask or read_only",
            )
            .with_details(serde_json::json!({"field": "permission_mode"}))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Auto => "auto",
            PermissionMode::Ask => "ask",
            PermissionMode::ReadOnly => "read_only",
        }
    }
}
