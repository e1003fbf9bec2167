//! The provider-neutral replay input (docs/history-rules.md#replay).
//!
//! `history::replay` folds a Log into a `Vec<ReplayItem>`; each provider dialect renders
//! these items into its wire shape (`responses`, `chat`, `anthropic`). Keeping one neutral
//! form is what makes "the same history folds to byte-identical input" checkable once.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReplayItem {
    /// Developer/system context: workspace path, permission mode.
    Developer { text: String },
    /// A user turn, or rendered text (checkpoint, branch summary) injected as user text.
    User {
        text: String,
        /// Images sent with the prompt (session resources, like a tool result's);
        /// their bytes are loaded at request-build time ([`ImageRef::data`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImageRef>,
    },
    /// Final assistant text of a step.
    Assistant { text: String },
    /// Opaque provider reasoning item, replayed only to the model that produced it.
    Reasoning { item: Value, model: String },
    /// A function/tool call; `arguments` is the JSON text of the args object.
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// The output paired with a call. `synthetic` marks an orphan closure.
    FunctionCallOutput {
        call_id: String,
        output: String,
        ok: bool,
        #[serde(default)]
        synthetic: bool,
        /// Images of the result, stored as session resources (an MCP tool's image
        /// content). Dialects that take images in tool results send the ones whose
        /// bytes were loaded ([`ImageRef::data`]); the others keep `output`'s
        /// placeholder lines.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImageRef>,
    },
}

/// An image a tool result refers to: a session resource named by its sha256. The Log
/// holds only this reference; the bytes are read at request-build time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Lowercase hex sha256 of the bytes (the resource's file name).
    pub sha256: String,
    /// An `image/*` media type.
    pub mime: String,
    /// Size of the bytes.
    pub bytes: u64,
    /// The bytes, base64 (standard alphabet), once loaded for a request; never
    /// serialized, so replay output and goldens hold only the reference.
    #[serde(skip)]
    pub data: Option<String>,
}

/// At most this many images of one tool result are sent to a provider.
pub const MAX_IMAGES_PER_RESULT: usize = 8;
/// Images larger than this are not sent to a provider (the placeholder stays).
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// Which wire shape `agentd/context` and providers render items into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    #[default]
    Responses,
    Chat,
    Anthropic,
}

/// A tool as offered to a provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}
