//! The Log event envelope and the event types of docs/log-format.md#event-types.
//!
//! `data` stays a JSON object (`serde_json::Value`) so that unknown fields and unknown
//! types round-trip byte for byte; typed access happens in the projections that need it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One line of a Log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    pub session_id: String,
    pub seq: u64,
    pub ts: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
}

impl Event {
    pub fn event_type(&self) -> EventType {
        EventType::parse(&self.kind)
    }

    /// `data[key]` as a string, if present.
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.data.get(key).and_then(Value::as_str)
    }
}

/// An event before its owner stamps `id`, `session_id`, `seq` and `ts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDraft {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default = "empty_object")]
    pub data: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl EventDraft {
    pub fn new(kind: EventType, data: Value) -> Self {
        EventDraft {
            kind: kind.as_str().to_string(),
            data,
        }
    }
}

macro_rules! event_types {
    ($( $variant:ident => $name:literal, ephemeral: $eph:literal, required: [$($req:literal),*] ;)*) => {
        /// Every event type agentd knows. `Unknown` lines are kept and shown, never replayed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventType { $($variant,)* Unknown }

        impl EventType {
            pub const ALL: &'static [EventType] = &[$(EventType::$variant,)*];

            pub fn parse(s: &str) -> EventType {
                match s { $($name => EventType::$variant,)* _ => EventType::Unknown }
            }
            pub fn as_str(self) -> &'static str {
                match self { $(EventType::$variant => $name,)* EventType::Unknown => "unknown" }
            }
            /// Broadcast to subscribers, never written to a Log.
            pub fn is_ephemeral(self) -> bool {
                match self { $(EventType::$variant => $eph,)* EventType::Unknown => false }
            }
            /// Fields `data` must carry for the append to be accepted.
            pub fn required_fields(self) -> &'static [&'static str] {
                match self { $(EventType::$variant => &[$($req),*],)* EventType::Unknown => &[] }
            }
        }
    };
}

event_types! {
    SessionStarted => "session_started", ephemeral: false, required: ["workspace", "agentd_version", "log_format"];
    SessionFork => "session_fork", ephemeral: false, required: ["parent_session_id", "fork_root_session_id", "forked_to_seq"];
    UserMessage => "user_message", ephemeral: false, required: ["text"];
    AssistantMessage => "assistant_message", ephemeral: false, required: ["text"];
    Reasoning => "reasoning", ephemeral: false, required: ["item", "model"];
    ToolCall => "tool_call", ephemeral: false, required: ["call_id", "name", "args"];
    ToolResult => "tool_result", ephemeral: false, required: ["call_id", "ok"];
    PermissionDecision => "permission_decision", ephemeral: false, required: ["call_id", "decision"];
    ProviderUsage => "provider_usage", ephemeral: false, required: ["provider", "model"];
    TurnStarted => "turn_started", ephemeral: false, required: ["turn_id"];
    TurnEnded => "turn_ended", ephemeral: false, required: ["turn_id", "status"];
    TurnFailed => "turn_failed", ephemeral: false, required: ["terminal_status", "error_kind", "error_message"];
    HistoryCompaction => "history_compaction", ephemeral: false, required: ["strategy", "range"];
    BranchSummary => "branch_summary", ephemeral: false, required: ["parent_session_id", "forked_to_seq", "summary"];
    MemoryUpdate => "memory_update", ephemeral: false, required: ["kind", "evidence"];
    LogRepaired => "log_repaired", ephemeral: false, required: ["torn_bytes", "quarantine_path", "detected_at_seq"];
    SessionInfo => "session_info", ephemeral: false, required: ["title"];
    SubagentEvent => "subagent_event", ephemeral: false, required: [];
    WorkflowEvent => "workflow_event", ephemeral: false, required: [];
    SkillActivation => "skill_activation", ephemeral: false, required: [];
    WorkspaceSnapshot => "workspace_snapshot", ephemeral: false, required: ["tree", "files_changed", "reason"];
    WorkspaceRevert => "workspace_revert", ephemeral: false, required: ["to_seq", "tree", "files_changed"];
    McpServers => "mcp_servers", ephemeral: false, required: ["servers"];
    Instructions => "instructions", ephemeral: false, required: ["files"];
    TurnResumed => "turn_resumed", ephemeral: false, required: ["turn_id", "resumed"];
    TurnQueued => "turn_queued", ephemeral: false, required: ["turn_id", "input"];
    TurnDequeued => "turn_dequeued", ephemeral: false, required: ["turn_id"];
    GoalSet => "goal_set", ephemeral: false, required: ["goal_id", "objective"];
    GoalProgress => "goal_progress", ephemeral: false, required: ["goal_id", "turn_id"];
    GoalEnded => "goal_ended", ephemeral: false, required: ["goal_id", "reason"];
    HookRun => "hook_run", ephemeral: false, required: ["event", "command", "verdict"];
    TextDelta => "text_delta", ephemeral: true, required: [];
    ReasoningDelta => "reasoning_delta", ephemeral: true, required: [];
    Status => "status", ephemeral: true, required: [];
    ContextPressure => "context_pressure", ephemeral: true, required: [];
    ArtifactChanged => "artifact_changed", ephemeral: true, required: [];
}

/// Checks what `agentd/append` accepts for `draft` (docs/log-format.md#event-types): a type name, an object
/// `data`, the required fields of a known type, and a few value shapes the projections
/// rely on. Unknown types are accepted (forward compatibility).
pub fn validate_draft(draft: &EventDraft) -> Result<EventType, String> {
    if draft.kind.is_empty() || draft.kind.len() > 64 {
        return Err("type must be 1..=64 bytes".into());
    }
    let ty = EventType::parse(&draft.kind);
    let Some(obj) = draft.data.as_object() else {
        return Err(format!("{}: data must be an object", draft.kind));
    };
    for field in ty.required_fields() {
        if !obj.contains_key(*field) {
            return Err(format!("{}: data.{} is required", draft.kind, field));
        }
    }
    let want_str = |k: &str| match obj.get(k) {
        Some(Value::String(_)) | None => Ok(()),
        Some(_) => Err(format!("{}: data.{k} must be a string", draft.kind)),
    };
    match ty {
        EventType::UserMessage | EventType::AssistantMessage => want_str("text")?,
        EventType::ToolCall => {
            want_str("call_id")?;
            want_str("name")?;
            if !obj.get("args").is_some_and(Value::is_object) {
                return Err("tool_call: data.args must be an object".into());
            }
        }
        EventType::ToolResult => {
            want_str("call_id")?;
            if !obj.get("ok").is_some_and(Value::is_boolean) {
                return Err("tool_result: data.ok must be a boolean".into());
            }
            want_str("output")?;
        }
        EventType::PermissionDecision => match obj.get("decision").and_then(Value::as_str) {
            Some("allow" | "deny") => {}
            _ => return Err("permission_decision: data.decision must be allow or deny".into()),
        },
        EventType::TurnEnded => {
            match obj.get("status").and_then(Value::as_str) {
                Some("completed" | "interrupted" | "failed" | "timed_out") => {}
                _ => return Err(
                    "turn_ended: data.status must be completed, interrupted, failed or timed_out"
                        .into(),
                ),
            }
        }
        EventType::WorkspaceSnapshot | EventType::WorkspaceRevert => {
            if !matches!(obj.get("tree"), Some(Value::String(_) | Value::Null)) {
                return Err(format!(
                    "{}: data.tree must be a string or null",
                    draft.kind
                ));
            }
            let paths = obj.get("files_changed").and_then(Value::as_array);
            if !paths.is_some_and(|a| a.iter().all(Value::is_string)) {
                return Err(format!(
                    "{}: data.files_changed must be an array of strings",
                    draft.kind
                ));
            }
            want_str("reason")?;
        }
        EventType::MemoryUpdate => match obj.get("kind").and_then(Value::as_str) {
            Some("plan" | "decision" | "fact") => {}
            _ => return Err("memory_update: data.kind must be plan, decision or fact".into()),
        },
        _ => {}
    }
    Ok(ty)
}

/// RFC 3339 UTC timestamp with microseconds, as the envelope's `ts`.
pub fn now_ts() -> String {
    format_ts(time::OffsetDateTime::now_utc())
}

pub fn format_ts(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// 16 lowercase hex characters from 8 random bytes.
pub fn new_event_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelope_round_trips_with_type_key() {
        let line = r#"{"id":"9f2c4e1a0b3d5f67","session_id":"s","seq":12,"ts":"2026-11-21T10:15:02.123456Z","type":"tool_call","data":{"call_id":"c","name":"shell","args":{}}}"#;
        let e: Event = serde_json::from_str(line).unwrap();
        assert_eq!(e.event_type(), EventType::ToolCall);
        assert_eq!(serde_json::to_string(&e).unwrap(), line);
    }

    #[test]
    fn validation_names_the_missing_field() {
        let d = EventDraft::new(EventType::ToolResult, json!({"call_id": "c"}));
        assert!(validate_draft(&d).unwrap_err().contains("data.ok"));
        let d = EventDraft {
            kind: "future_thing".into(),
            data: json!({"x": 1}),
        };
        assert_eq!(validate_draft(&d).unwrap(), EventType::Unknown);
        let d = EventDraft {
            kind: "user_message".into(),
            data: json!("x"),
        };
        assert!(validate_draft(&d).is_err());
    }

    #[test]
    fn ts_has_microseconds() {
        let ts = now_ts();
        assert_eq!(ts.len(), "2026-11-21T10:15:02.123456Z".len(), "{ts}");
        assert_eq!(new_event_id().len(), 16);
    }
}
