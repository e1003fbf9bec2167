//! What agentctl prints and how it exits (docs/protocol.md#exit-codes).
//!
//! `--json`: exactly one JSON document on stdout, `{"ok":true, ...result}` or
//! `{"ok":false,"error":{kind,message,details}}`. Human mode: results on stdout, errors on
//! stderr as `error: <kind>: <message>` plus hints. The exit code always comes from the
//! error kind (`ErrorKind::exit_code`), so scripts can branch on it in either mode.

use agentd_proto::AgentError;
use serde_json::{json, Map, Value};
use std::io::Write;

/// What a command produced.
pub enum Outcome {
    /// A result to print: its fields go into the JSON document; `human` is the text.
    Result { value: Value, human: String },
    /// The command already printed its output (streams).
    Printed,
}

/// `{"ok":true}` merged with the result's fields (a non-object result goes under
/// `result`).
pub fn ok_document(result: Value) -> Value {
    let mut m = Map::new();
    m.insert("ok".into(), Value::Bool(true));
    match result {
        Value::Object(fields) => {
            for (k, v) in fields {
                if k != "ok" {
                    m.insert(k, v);
                }
            }
        }
        Value::Null => {}
        other => {
            m.insert("result".into(), other);
        }
    }
    Value::Object(m)
}

pub fn error_document(e: &AgentError) -> Value {
    let details = if e.details.is_object() {
        e.details.clone()
    } else {
        json!({})
    };
    json!({"ok": false, "error": {"kind": e.kind, "message": e.message, "details": details}})
}

/// The human form of an error: `error: <kind>: <message>`, then the `next_actions`
/// hints the daemon (or agentctl) attached.
pub fn human_error(e: &AgentError) -> String {
    let mut out = format!("error: {}: {}\n", e.kind, e.message);
    if let Some(tail) = e.details.get("log_tail").and_then(Value::as_array) {
        for l in tail.iter().filter_map(Value::as_str) {
            out.push_str(&format!("  | {l}\n"));
        }
    }
    if let Some(actions) = e.details.get("next_actions").and_then(Value::as_array) {
        for a in actions.iter().filter_map(Value::as_str) {
            out.push_str(&format!("hint: try `{a}`\n"));
        }
    }
    out
}

/// Writes to stdout. A closed pipe (`agentctl log S | head`) ends the process quietly
/// with success instead of a panic.
pub fn stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let r = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    if let Err(e) = r {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}

pub fn stderr(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// One compact JSON document plus newline on stdout.
pub fn json_line(v: &Value) {
    stdout(&format!("{v}\n"));
}

/// Prints the error in the chosen mode and returns the exit code.
pub fn fail(json_mode: bool, e: &AgentError) -> i32 {
    if json_mode {
        json_line(&error_document(e));
    } else {
        stderr(&human_error(e));
    }
    e.kind.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_proto::ErrorKind;

    #[test]
    fn documents_have_the_contract_shape() {
        assert_eq!(
            ok_document(json!({"session_id": "s", "ok": "ignored"})),
            json!({"ok": true, "session_id": "s"})
        );
        assert_eq!(ok_document(json!(3)), json!({"ok": true, "result": 3}));
        let e = AgentError::new(ErrorKind::SeqConflict, "expected 3, next is 5")
            .with_next_actions(&["agentctl show s"]);
        assert_eq!(
            error_document(&e),
            json!({"ok": false, "error": {"kind": "seq_conflict", "message": "expected 3, next is 5",
                   "details": {"next_actions": ["agentctl show s"]}}})
        );
        assert_eq!(
            human_error(&e),
            "error: seq_conflict: expected 3, next is 5\nhint: try `agentctl show s`\n"
        );
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        let cases = [
            ("invalid_args", 2),
            ("not_found", 2),
            ("permission_denied", 3),
            ("outside_workspace", 3),
            ("daemon_unavailable", 4),
            ("busy", 5),
            ("seq_conflict", 5),
            ("interrupted", 130),
            ("provider_error", 1),
            ("internal", 1),
        ];
        for (kind, code) in cases {
            let e = AgentError::from_rpc(-32000, "m", Some(&json!({"kind": kind})));
            assert_eq!(e.kind.exit_code(), code, "{kind}");
        }
        // -32602 without data is invalid_args (exit 2).
        assert_eq!(
            AgentError::from_rpc(-32602, "bad", None).kind.exit_code(),
            2
        );
    }
}
