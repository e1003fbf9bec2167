//! The provider-neutral replay input (DESIGN §7.1).
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
    User { text: String },
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
    },
}

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
