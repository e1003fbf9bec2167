//! The Codex app-server protocol's messages that the bridge reads and writes, written by
//! hand from the JSON Schemas of the pinned Codex release
//! (`tests/codex-app-server/schema/`, see docs/codex-app-server.md). Only what the bridge
//! maps is here; every message it sends is validated against those schemas by
//! `tests/tests/app_server.rs`.
//!
//! Params are read leniently (unknown fields ignored, as the protocol grows fields every
//! release); what is sent carries every field the schema requires.

use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---- params -----------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStartParams {
    pub cwd: Option<String>,
    pub model: Option<String>,
    pub model_provider: Option<String>,
    pub approval_policy: Option<Value>,
    pub sandbox: Option<String>,
    /// A thread that is not to be kept (Codex's TUI asks for one to have the model name
    /// a thread): refused, every agentd thread is a durable session.
    #[serde(default)]
    pub ephemeral: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResumeParams {
    pub thread_id: String,
    pub model: Option<String>,
    pub approval_policy: Option<Value>,
    #[serde(default)]
    pub exclude_turns: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadForkParams {
    pub thread_id: String,
    pub last_turn_id: Option<String>,
    pub model: Option<String>,
    pub approval_policy: Option<Value>,
    #[serde(default)]
    pub exclude_turns: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadListParams {
    pub archived: Option<bool>,
    pub cursor: Option<String>,
    /// One directory or several.
    pub cwd: Option<Value>,
    pub limit: Option<u32>,
    pub search_term: Option<String>,
    /// `ThreadSourceKind`s; none means the interactive ones (no subagents).
    pub source_kinds: Option<Vec<String>>,
}

/// `thread/loaded/list`: every loaded thread fits one page, so its cursor and limit
/// are read (and checked) but never needed.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CursorParams {
    #[allow(dead_code)]
    pub cursor: Option<String>,
    #[allow(dead_code)]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRef {
    pub thread_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadReadParams {
    pub thread_id: String,
    #[serde(default)]
    pub include_turns: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadPageParams {
    pub thread_id: String,
    /// `thread/items/list` takes a string cursor or an anchor object; only strings
    /// (the bridge's own cursors) are followed.
    pub cursor: Option<Value>,
    pub limit: Option<u32>,
    pub sort_direction: Option<String>,
    pub turn_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSetNameParams {
    pub thread_id: String,
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRevertParams {
    pub thread_id: String,
    pub before_turn_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartParams {
    pub thread_id: String,
    pub input: Vec<UserInput>,
    pub model: Option<String>,
    pub approval_policy: Option<Value>,
    /// The client's id for the message: agentd's `client_request_id`.
    pub client_user_message_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerParams {
    pub thread_id: String,
    pub input: Vec<UserInput>,
    /// The turn the client believes is running.
    pub expected_turn_id: String,
    /// The client's id for the message: agentd's `client_request_id`.
    pub client_user_message_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterruptParams {
    pub thread_id: String,
}

/// One piece of a user's input: text, mentions and skills become the turn's text,
/// images its `images`; the other kinds are refused with an error naming them.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserInput {
    Text {
        text: String,
    },
    /// An image by URL (agentd takes `data:` URLs) or by an uploaded file's id (refused).
    Image {
        #[serde(default)]
        url: Option<String>,
        #[serde(default, rename = "fileId")]
        file_id: Option<String>,
    },
    /// An image file on the machine the daemon runs on.
    LocalImage {
        path: String,
    },
    Skill {
        name: String,
    },
    Mention {
        name: String,
        path: String,
    },
    #[serde(other)]
    Other,
}

// ---- what is sent -------------------------------------------------------------------

/// `Thread`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    pub id: String,
    /// The session tree's root: the fork root's UUID, or the thread's own.
    pub session_id: String,
    pub forked_from_id: Option<String>,
    pub preview: String,
    pub ephemeral: bool,
    pub model_provider: String,
    pub model: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub status: Value,
    pub path: Option<String>,
    pub cwd: String,
    pub cli_version: String,
    /// `SessionSource`: `appServer`, or `{subAgent: {thread_spawn: …}}` for a session
    /// the `task` tool made.
    pub source: Value,
    pub project_id: Option<String>,
    pub name: Option<String>,
    pub turns: Vec<Turn>,
}

/// `Turn`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    pub id: String,
    pub items: Vec<Value>,
    pub status: &'static str,
    pub error: Option<TurnError>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TurnError {
    pub message: String,
}

/// `TokenUsageBreakdown`.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub total_tokens: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_output_tokens: u64,
}

impl TokenUsage {
    pub fn add(&mut self, o: &TokenUsage) {
        self.total_tokens += o.total_tokens;
        self.input_tokens += o.input_tokens;
        self.cached_input_tokens += o.cached_input_tokens;
        self.output_tokens += o.output_tokens;
        self.reasoning_output_tokens += o.reasoning_output_tokens;
    }
}
