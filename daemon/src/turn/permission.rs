//! Permission modes (docs/turns-and-providers.md#turns): which tool calls run without asking.
//!
//! MCP tools (`mcp__*`, docs/mcp.md#contract) are decided by [`decide_mcp`]: `read_only` refuses
//! them unless the user trusts the tool as read-only (config `read_only_tools`, or
//! `trust_annotations` with the tool's `readOnlyHint`); `ask` asks before every call,
//! with `mcp: {server, tool, title, annotations, trusted}` in the request, and a client
//! answering `allow_always` is not asked again for that (server, tool) in the session
//! (reason `always_allowed`).
//!
//! - `auto` (the default, unless `[turns] permission_mode` says otherwise): every tool
//!   runs; nothing is recorded.
//! - `read_only`: mutating tools (`tools::is_mutating`: write_file, edit_file,
//!   apply_patch, shell, git_config) are denied without asking.
//! - `ask`: a mutating tool is sent as an `agentd/permission` request
//!   `{session_id, turn_id, call_id, tool, args}` to the newest connection that
//!   subscribed to the session with `permissions:true`; it answers
//!   `{"decision":"allow"|"deny"}`. No such client, no answer within
//!   `permission_timeout_s`, a closed connection or any other answer → deny.
//!
//! Decisions of `ask` and `read_only` are recorded as `permission_decision{call_id,
//! decision, mode, reason}`; reasons: `read_only`, `client_allowed`, `client_denied`,
//! `no_client`, `timeout`, `client_gone`, `bad_answer`. A denial may carry the user's
//! words (`{"decision":"deny","reason":"not that file"}`): they are recorded as the
//! decision's `message` and end the denied call's error, so the model reads them.
//!
//! A client answering `allow_always` for a built-in tool (no sandbox grant) is not asked
//! again for that tool in the session while the daemon runs (reason `always_allowed`),
//! as for MCP tools; the set lives beside theirs under the server name [`BUILTIN`].

use super::TurnManager;
use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use agentd_proto::rpc::PermissionMode;

/// The server name under which built-in tools' `allow_always` answers are kept with the
/// MCP tools' (no MCP server is named with the empty string).
pub const BUILTIN: &str = "";

/// Longest user's reason kept with a denial, in characters.
const MAX_MESSAGE: usize = 1000;

/// A decision that must be recorded (`None` from [`decide`] means "run, record nothing").
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub allow: bool,
    pub reason: &'static str,
    /// A wider sandbox the call asked for (docs/sandbox.md#escalation), as asked.
    pub grant: Option<Value>,
    /// `call` or `session`: how long an allowed grant holds.
    pub scope: Option<&'static str>,
    /// The user's words with a denial.
    pub message: Option<String>,
}

impl Decision {
    pub fn new(allow: bool, reason: &'static str) -> Decision {
        Decision {
            allow,
            reason,
            grant: None,
            scope: None,
            message: None,
        }
    }

    /// `permission_decision` data (with `grant` and `scope` for a sandbox escalation).
    pub fn event_data(&self, call_id: &str, mode: PermissionMode) -> Value {
        let mut d = json!({
            "call_id": call_id,
            "decision": if self.allow { "allow" } else { "deny" },
            "mode": mode.as_str(),
            "reason": self.reason,
        });
        if let Some(m) = &self.message {
            d["message"] = json!(m);
        }
        if let Some(g) = &self.grant {
            d["grant"] = g.clone();
            if self.allow {
                d["scope"] = json!(self.scope.unwrap_or("call"));
            }
        }
        d
    }

    /// The `tool_result` error of a denied call.
    pub fn denial(&self, tool: &str) -> AgentError {
        let said = self
            .message
            .as_ref()
            .map(|m| format!("; the user said: {m}"))
            .unwrap_or_default();
        let mut details = json!({"tool": tool, "reason": self.reason});
        if let Some(m) = &self.message {
            details["message"] = json!(m);
        }
        AgentError::new(
            ErrorKind::PermissionDenied,
            format!(
                "`{}` was not allowed to run ({}){said}",
                crate::text::clip_chars(tool, 64),
                self.reason
            ),
        )
        .with_details(details)
    }
}

/// The user's reason in a denying answer: one line, printable, at most [`MAX_MESSAGE`]
/// characters; `None` when there is none.
fn user_reason(resp: &Value) -> Option<String> {
    let r = resp.get("result")?.get("reason")?.as_str()?;
    let line: String = r
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    (!line.is_empty()).then(|| crate::text::clip_chars(line, MAX_MESSAGE))
}

/// Sends `agentd/permission` to the session's client; the flag says the client
/// answered `allow_always`.
async fn ask_client(ask: &Ask<'_>, params: Value) -> Result<(Decision, bool), AgentError> {
    let Some(client) = ask.turns.permission_peer(ask.session_id) else {
        return Ok((Decision::new(false, "no_client"), false));
    };
    let timeout = Duration::from_secs(ask.turns.registry.config.permission_timeout_s.max(1));
    let request = client.request(agentd_proto::rpc::method::PERMISSION, params);
    let denied = |reason| Decision::new(false, reason);
    Ok(tokio::select! {
        _ = ask.cancel.cancelled() => {
            return Err(AgentError::new(ErrorKind::Interrupted, "interrupted while asking for permission"));
        }
        r = tokio::time::timeout(timeout, request) => match r {
            Err(_) => (denied("timeout"), false),
            Ok(None) => (denied("client_gone"), false),
            Ok(Some(resp)) => {
                let always = resp.get("result").and_then(|r| r.get("decision"))
                    == Some(&json!("allow_always"));
                match answer_allows(&resp) {
                    Some(true) => {
                        // A grant may be allowed for the session (`"scope": "session"`).
                        let mut d = Decision::new(true, "client_allowed");
                        let session = resp
                            .get("result")
                            .and_then(|r| r.get("scope"))
                            .and_then(Value::as_str)
                            == Some("session");
                        d.scope = Some(if session { "session" } else { "call" });
                        (d, false)
                    }
                    _ if always => (Decision::new(true, "client_allowed_always"), true),
                    Some(false) => {
                        let mut d = denied("client_denied");
                        d.message = user_reason(&resp);
                        (d, false)
                    }
                    None => (denied("bad_answer"), false),
                }
            }
        },
    })
}

/// What the permission request and the decision say of an MCP tool.
pub struct McpCall<'a> {
    pub server: &'a str,
    pub tool: &'a str,
    pub title: Option<&'a str>,
    pub annotations: &'a Value,
    pub trusted_read_only: bool,
}

/// Decides an MCP call (see the module doc).
pub async fn decide_mcp(
    mode: PermissionMode,
    ask: &Ask<'_>,
    call_id: &str,
    name: &str,
    args: &Value,
    call: &McpCall<'_>,
) -> Result<Option<Decision>, AgentError> {
    match mode {
        PermissionMode::Auto => Ok(None),
        PermissionMode::ReadOnly if call.trusted_read_only => Ok(None),
        PermissionMode::ReadOnly => Ok(Some(Decision::new(false, "read_only"))),
        PermissionMode::Ask => {
            let turns = ask.turns;
            if turns
                .mcp
                .always_allowed(ask.session_id, call.server, call.tool)
            {
                return Ok(Some(Decision::new(true, "always_allowed")));
            }
            let params = json!({
                "session_id": ask.session_id,
                "turn_id": ask.turn_id,
                "call_id": call_id,
                "tool": name,
                "args": args,
                "mcp": {
                    "server": call.server,
                    "tool": call.tool,
                    "title": call.title,
                    "annotations": call.annotations,
                    "trusted": call.trusted_read_only,
                },
            });
            let (d, always) = ask_client(ask, params).await?;
            if always {
                turns
                    .mcp
                    .allow_always(ask.session_id, call.server, call.tool);
            }
            Ok(Some(d))
        }
    }
}

/// Whether the client's answer allows the call.
pub fn answer_allows(response: &Value) -> Option<bool> {
    match response
        .get("result")
        .and_then(|r| r.get("decision"))
        .and_then(Value::as_str)
    {
        Some("allow") => Some(true),
        Some("deny") => Some(false),
        _ => None,
    }
}

pub struct Ask<'a> {
    pub turns: &'a TurnManager,
    pub session_id: &'a str,
    pub turn_id: &'a str,
    pub cancel: &'a CancellationToken,
}

/// Decides a call. `Err(interrupted)` when the turn is cancelled while asking.
pub async fn decide(
    mode: PermissionMode,
    ask: &Ask<'_>,
    call_id: &str,
    tool: &str,
    args: &Value,
    grant: Option<&Value>,
) -> Result<Option<Decision>, AgentError> {
    if !crate::tools::is_mutating(tool) {
        return Ok(None);
    }
    let with_grant = |mut d: Decision| {
        d.grant = grant.cloned();
        d
    };
    match mode {
        // `auto` never widens the session's sandbox.
        PermissionMode::Auto if grant.is_some() => Ok(Some(with_grant(Decision::new(
            false,
            "escalation_needs_ask",
        )))),
        PermissionMode::Auto => Ok(None),
        PermissionMode::ReadOnly => Ok(Some(Decision::new(false, "read_only"))),
        PermissionMode::Ask => {
            let turns = ask.turns;
            if grant.is_none() && turns.mcp.always_allowed(ask.session_id, BUILTIN, tool) {
                return Ok(Some(Decision::new(true, "always_allowed")));
            }
            let mut params = json!({
                "session_id": ask.session_id,
                "turn_id": ask.turn_id,
                "call_id": call_id,
                "tool": tool,
                "args": args,
            });
            if let Some(g) = grant {
                // The grant spelled out: the client may allow it for this call or, with
                // `"scope": "session"` in its answer, for the session.
                params["sandbox_grant"] = g.clone();
                params["justification"] = args.get("justification").cloned().unwrap_or(Value::Null);
            }
            let (decision, always) = ask_client(ask, params).await?;
            if always && grant.is_none() {
                turns.mcp.allow_always(ask.session_id, BUILTIN, tool);
            }
            Ok(Some(with_grant(decision)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_answers_decode() {
        assert_eq!(PermissionMode::parse(None).unwrap(), None);
        assert_eq!(PermissionMode::default(), PermissionMode::Auto);
        assert_eq!(
            PermissionMode::parse(Some("read_only")).unwrap(),
            Some(PermissionMode::ReadOnly)
        );
        assert!(PermissionMode::parse(Some("yolo")).is_err());
        assert_eq!(
            answer_allows(&json!({"result": {"decision": "allow"}})),
            Some(true)
        );
        assert_eq!(
            answer_allows(&json!({"result": {"decision": "deny"}})),
            Some(false)
        );
        assert_eq!(answer_allows(&json!({"error": {"code": 1}})), None);
        let d = Decision::new(false, "read_only");
        assert_eq!(
            d.event_data("c1", PermissionMode::ReadOnly),
            json!({"call_id":"c1","decision":"deny","mode":"read_only","reason":"read_only"})
        );
        assert_eq!(d.denial("shell").kind, ErrorKind::PermissionDenied);
        let answer = json!({"result": {"decision": "deny", "reason": "  not\nthat file "}});
        let mut d = Decision::new(false, "client_denied");
        d.message = user_reason(&answer);
        assert_eq!(d.message.as_deref(), Some("not that file"));
        assert_eq!(
            d.event_data("c2", PermissionMode::Ask)["message"],
            "not that file"
        );
        let e = d.denial("write_file");
        assert!(e.message.ends_with("the user said: not that file"), "{e:?}");
        assert_eq!(e.details["message"], "not that file");
        assert_eq!(
            user_reason(&json!({"result": {"decision": "deny", "reason": " "}})),
            None
        );
        let long = "x".repeat(5000);
        let clipped = user_reason(&json!({"result": {"reason": long}})).unwrap();
        assert!(clipped.chars().count() <= MAX_MESSAGE);
    }
}
