//! Session id grammar (docs/log-format.md#session-ids): 1..=128 bytes of `[A-Za-z0-9_][A-Za-z0-9_.-]*`,
//! never `.` or `..`, and not ending in `.ndjson`, `.tmp` or `.torn` (names the store
//! uses for its own files). Checked at every boundary before a path is built. Errors give the
//! byte length and the rule broken, never the hostile value itself.

use crate::error::{AgentError, ErrorKind};
use serde_json::json;

pub const MAX_SESSION_ID_BYTES: usize = 128;

/// Suffixes the store uses for its own files next to Logs.
pub const RESERVED_SUFFIXES: &[&str] = &[".ndjson", ".tmp", ".torn"];

pub fn validate(id: &str) -> Result<(), AgentError> {
    let bytes = id.as_bytes();
    let rule = if bytes.is_empty() {
        Some("empty")
    } else if bytes.len() > MAX_SESSION_ID_BYTES {
        Some("too_long")
    } else if id == "." || id == ".." {
        Some("dot_name")
    } else if RESERVED_SUFFIXES.iter().any(|s| id.ends_with(s)) {
        // `<id>/` holds a session's resources beside `<id>.ndjson`: an id ending in
        // `.ndjson` would name another session's Log as its directory.
        Some("reserved_suffix")
    } else if !(bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_') {
        Some("invalid_start")
    } else if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        Some("invalid_character")
    } else {
        None
    };
    match rule {
        None => Ok(()),
        Some(rule) => Err(AgentError::new(
            ErrorKind::InvalidArgs,
            format!(
                "invalid session id ({} bytes): rule {rule}; ids are 1..=128 bytes of [A-Za-z0-9_][A-Za-z0-9_.-]*",
                bytes.len()
            ),
        )
        .with_details(json!({
            "field": "session_id",
            "reason": rule,
            "observed_bytes": bytes.len(),
            "max_bytes": MAX_SESSION_ID_BYTES,
        }))),
    }
}

/// A new id that sorts by creation time: `YYYYMMDDTHHMMSS-xxxxxx`.
pub fn generate() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]");
    let stamp = now
        .format(&fmt)
        .unwrap_or_else(|_| "19700101T000000".into());
    let r: u32 = rand::random();
    format!("{stamp}-{:06x}", r & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_generated_and_plain_ids() {
        validate(&generate()).unwrap();
        validate("a").unwrap();
        validate("_x.y-z").unwrap();
        validate(&"a".repeat(128)).unwrap();
    }

    #[test]
    fn refuses_hostile_ids_without_echoing_them() {
        for bad in [
            "", ".", "..", "../x", "a/b", "-a", ".a", "a\0b", "é", "a b", "a.ndjson", "x.tmp",
            "y.torn",
        ] {
            let e = validate(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgs, "{bad:?}");
            if bad.len() > 2 {
                assert!(!e.message.contains(bad), "{bad:?} echoed");
            }
        }
        assert_eq!(
            validate(&"a".repeat(300)).unwrap_err().details["reason"],
            "too_long"
        );
    }
}
