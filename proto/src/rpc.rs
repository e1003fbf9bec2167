//! Method names and param/result types of the native API (DESIGN §6).
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
    pub const PERMISSION: &str = "agentd/permission";
    pub const DIFF: &str = "agentd/diff";
    pub const REVERT: &str = "agentd/revert";
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    #[serde(default)]
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    pub workspace: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateResult {
    pub session_id: String,
    pub log_path: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub session_id: String,
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListResult {
    pub sessions: Vec<SessionSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsParams {
    pub session_id: String,
    #[serde(default)]
    pub after_seq: Option<u64>,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub types: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventsResult {
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after_seq: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppendParams {
    pub session_id: String,
    pub events: Vec<EventDraft>,
    #[serde(default)]
    pub expect_seq: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppendResult {
    pub first_seq: u64,
    pub last_seq: u64,
    pub ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    pub session_id: String,
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// Opt in to `agentd/permission` requests for `ask` mode.
    #[serde(default)]
    pub permissions: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnParams {
    pub session_id: String,
    pub input: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub max_iterations: Option<u32>,
    #[serde(default)]
    pub permission_mode: Option<String>,
    #[serde(default)]
    pub wait: Option<bool>,
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptParams {
    pub session_id: String,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InterruptResult {
    pub interrupted: bool,
    pub reconciled: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileParams {
    pub session_id: String,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcileResult {
    pub pending: Vec<Value>,
    pub recorded: Vec<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextParams {
    pub session_id: String,
    #[serde(default)]
    pub after_seq: Option<u64>,
    #[serde(default)]
    pub dialect: Option<crate::replay::Dialect>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactParams {
    pub session_id: String,
    #[serde(default)]
    pub tail_events: Option<usize>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub strategy: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointParams {
    pub session_id: String,
    #[serde(default)]
    pub caps: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkParams {
    pub session_id: String,
    #[serde(default)]
    pub to_seq: Option<u64>,
    #[serde(default)]
    pub summarize: bool,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub child_session_id: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    /// The workspace files of the fork (DESIGN §13); `keep` when absent.
    #[serde(default)]
    pub files: ForkFiles,
    /// With `files: restore`: overwrite files someone else changed.
    #[serde(default)]
    pub force: bool,
    /// With `files: worktree`: the new directory (absolute, must not exist); default
    /// `<home>/worktrees/<child id>`.
    #[serde(default)]
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
    #[serde(default)]
    pub from_seq: Option<u64>,
    #[serde(default)]
    pub to_seq: Option<u64>,
    #[serde(default)]
    pub turn_id: Option<String>,
}

/// `agentd/revert`: the files the session changed after `to_seq`, back to their state there.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevertParams {
    pub session_id: String,
    pub to_seq: u64,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub max_depth: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    pub format: String,
    pub path: String,
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}
