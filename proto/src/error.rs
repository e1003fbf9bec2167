//! Error kinds of the contract (docs/protocol.md#errors) and the error value every layer passes around.

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
    /// A revert would overwrite files someone else changed (docs/snapshots.md).
    Conflict,
    EphemeralNotLoggable,
    CorruptLog,
    LogWriteFailed,
    /// The filesystem holding the home is full (`ENOSPC`) or over quota (`EDQUOT`).
    DiskFull,
    /// The device reported an I/O error (`EIO`); the data may not be on disk.
    IoError,
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
    /// The command sandbox cannot be built and `[sandbox] on_unavailable = "refuse"`.
    SandboxUnavailable,
    DaemonUnavailable,
    /// `agentd/steer` on a session with no running turn.
    NotRunning,
    /// A tool call cut by a crash, not replay-safe, closed without running it again:
    /// it may or may not have taken effect.
    OutcomeUnknown,
    /// A turn resumed after crashes `resume_limit` times without progress.
    ResumeLimit,
    /// A hook refused a prompt (`user_prompt_submit`) or a tool call (`pre_tool_use`)
    /// (docs/hooks.md).
    HookBlocked,
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
            ErrorKind::DiskFull => "disk_full",
            ErrorKind::IoError => "io_error",
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
            ErrorKind::SandboxUnavailable => "sandbox_unavailable",
            ErrorKind::DaemonUnavailable => "daemon_unavailable",
            ErrorKind::NotRunning => "not_running",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
            ErrorKind::ResumeLimit => "resume_limit",
            ErrorKind::HookBlocked => "hook_blocked",
            ErrorKind::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorKind> {
        serde_json::from_value(Value::String(s.to_string())).ok()
    }

    /// `agentctl` exit code for this kind (docs/protocol.md#exit-codes).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::InvalidArgs | ErrorKind::NotFound => 2,
            ErrorKind::PermissionDenied | ErrorKind::OutsideWorkspace | ErrorKind::HookBlocked => 3,
            ErrorKind::DaemonUnavailable => 4,
            ErrorKind::Busy
            | ErrorKind::SeqConflict
            | ErrorKind::Conflict
            | ErrorKind::NotRunning => 5,
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

    /// A storage failure while doing `what` (`"append to log"`, `"create log"`), with a
    /// kind chosen by the OS error: `ENOSPC`/`EDQUOT` → `disk_full`, `EIO` → `io_error`,
    /// `EACCES`/`EPERM`/`EROFS` → `permission_denied`, anything else →
    /// `log_write_failed`. Each carries `details.errno` and `details.next_actions`.
    pub fn storage(what: &str, e: &std::io::Error) -> Self {
        // Linux errno values (the daemon runs on Linux; proto does no I/O of its own).
        const EPERM: i32 = 1;
        const EIO: i32 = 5;
        const EACCES: i32 = 13;
        const ENOSPC: i32 = 28;
        const EROFS: i32 = 30;
        const EDQUOT: i32 = 122;
        let errno = e.raw_os_error();
        let (kind, actions): (ErrorKind, &[&str]) = match errno {
            Some(ENOSPC) | Some(EDQUOT) => (
                ErrorKind::DiskFull,
                &[
                    "free space on the filesystem holding the agentd home (df -h \"$(agentctl daemon status --json | jq -r .home)\" shows it), then retry: nothing of this call was acknowledged or kept",
                ],
            ),
            Some(EIO) => (
                ErrorKind::IoError,
                &[
                    "check the disk (dmesg, smartctl); the session reloads and verifies its Log before accepting writes again",
                    "agentctl show <session_id> to see what is durable",
                ],
            ),
            Some(EACCES) | Some(EPERM) | Some(EROFS) => (
                ErrorKind::PermissionDenied,
                &["check ownership and mode of the agentd home (it must be writable by the daemon's user) and that its filesystem is mounted read-write"],
            ),
            _ => (ErrorKind::LogWriteFailed, &["retry; if it persists, see agentd.log in the agentd home"]),
        };
        AgentError::new(kind, format!("{what}: {e}"))
            .with_details(json!({"errno": errno, "operation": what}))
            .with_next_actions(actions)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_are_classified_by_errno() {
        for (errno, kind) in [
            (28, ErrorKind::DiskFull),
            (122, ErrorKind::DiskFull),
            (5, ErrorKind::IoError),
            (13, ErrorKind::PermissionDenied),
            (30, ErrorKind::PermissionDenied),
            (9, ErrorKind::LogWriteFailed),
        ] {
            let e = AgentError::storage("append to log", &std::io::Error::from_raw_os_error(errno));
            assert_eq!(e.kind, kind, "errno {errno}");
            assert_eq!(e.details["errno"], errno);
            assert!(e.details["next_actions"]
                .as_array()
                .is_some_and(|a| !a.is_empty()));
            assert_eq!(ErrorKind::parse(e.kind.as_str()), Some(kind));
        }
        let e = AgentError::storage("x", &std::io::Error::other("no errno"));
        assert_eq!(e.kind, ErrorKind::LogWriteFailed);
    }
}
