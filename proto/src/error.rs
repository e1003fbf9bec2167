//! Error kinds of the contract (DESIGN §5) and the error value every layer passes around.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::fmt;

/// JSON-RPC error code for every application error.
pub const APP_ERROR_CODE: i32 = -32000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidArgs,
    NotFound,
    AlreadyExists,
    Busy,
    SeqConflict,
    /// A revert would overwrite files someone else changed (DESIGN §13).
    Conflict,
    EphemeralNotLoggable,
    CorruptLog,
    LogWriteFailed,
    PermissionDenied,
    OutsideWorkspace,
    ProviderError,
    RateLimited,
    Network,
    ContextOverflow,
    Timeout,
    Interrupted,
    MessageTooLarge,
    Unsupported,
    DaemonUnavailable,
    Internal,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgs => "invalid_args",
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::Busy => "busy",
            ErrorKind::SeqConflict => "seq_conflict",
            ErrorKind::Conflict => "conflict",
            ErrorKind::EphemeralNotLoggable => "ephemeral_not_loggable",
            ErrorKind::CorruptLog => "corrupt_log",
            ErrorKind::LogWriteFailed => "log_write_failed",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::OutsideWorkspace => "outside_workspace",
            ErrorKind::ProviderError => "provider_error",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Network => "network",
            ErrorKind::ContextOverflow => "context_overflow",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::MessageTooLarge => "message_too_large",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::DaemonUnavailable => "daemon_unavailable",
            ErrorKind::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorKind> {
        serde_json::from_value(Value::String(s.to_string())).ok()
    }

    /// `agentctl` exit code for this kind (DESIGN §12).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::InvalidArgs | ErrorKind::NotFound => 2,
            ErrorKind::PermissionDenied | ErrorKind::OutsideWorkspace => 3,
            ErrorKind::DaemonUnavailable => 4,
            ErrorKind::Busy | ErrorKind::SeqConflict | ErrorKind::Conflict => 5,
            ErrorKind::Interrupted => 130,
            _ => 1,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error with a contract kind. `details` is always an object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default = "empty_object")]
    pub details: Value,
}

fn empty_object() -> Value {
    json!({})
}

impl AgentError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        AgentError {
            kind,
            message: message.into(),
            details: json!({}),
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// Adds `details.next_actions`.
    pub fn with_next_actions(mut self, actions: &[&str]) -> Self {
        if !self.details.is_object() {
            self.details = json!({});
        }
        self.details["next_actions"] = json!(actions);
        self
    }

    pub fn invalid_args(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgs, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// The `data` member of a JSON-RPC error object.
    pub fn rpc_data(&self) -> Value {
        json!({"kind": self.kind, "details": self.details})
    }

    /// Rebuilds an error from a JSON-RPC error object's parts.
    pub fn from_rpc(code: i32, message: &str, data: Option<&Value>) -> Self {
        let kind = data
            .and_then(|d| d.get("kind"))
            .and_then(|k| k.as_str())
            .and_then(ErrorKind::parse)
            .unwrap_or(match code {
                -32602 => ErrorKind::InvalidArgs,
                -32601 => ErrorKind::Unsupported,
                _ => ErrorKind::Internal,
            });
        let details = data
            .and_then(|d| d.get("details"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        AgentError {
            kind,
            message: message.to_string(),
            details,
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for AgentError {}

pub type Result<T, E = AgentError> = std::result::Result<T, E>;
