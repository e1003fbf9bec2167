//! Recognising a source's format from its content (`--format auto`).
//!
//! Only the head of the file is read: the SQLite header (opencode's database), else the
//! first few complete JSON lines, whose shape names the writer. A pretty-printed JSON
//! document with `info` and `messages` is `opencode export`. Nothing matching is an
//! `invalid_args` error that lists every shape tried.

use std::io::Read;
use std::path::Path;

use agentd_proto::AgentError;
use serde_json::{Map, Value};

use super::Format;

/// Bytes of the head read for detection.
const HEAD_BYTES: u64 = 256 * 1024;
/// Complete lines looked at.
const HEAD_LINES: usize = 8;

/// What `auto` looks for, in the order tried (shown in the error).
pub const TRIED: &[&str] = &[
    "SQLite header (opencode database)",
    "opencode export JSON ({info, messages})",
    "pi session header {\"type\":\"session\"}",
    "codex rollout {\"type\":\"session_meta\"}",
    "Pixir Log envelope {id, session_id, seq, type, data}",
    "Gemini CLI chat header {sessionId, projectHash} or $set record",
    "Claude Code record {type, sessionId, uuid/parentUuid}",
];

pub fn detect(path: &Path) -> Result<Format, AgentError> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(HEAD_BYTES).read_to_end(&mut head))
        .map_err(|e| AgentError::invalid_args(format!("cannot read {}: {e}", path.display())))?;
    detect_bytes(&head).ok_or_else(|| {
        AgentError::invalid_args(format!(
            "cannot tell which agent wrote {}; tried: {}. Pass --format",
            path.display(),
            TRIED.join("; ")
        ))
        .with_details(serde_json::json!({"tried": TRIED}))
        .with_next_actions(&["agentctl import --format pi|pixir|codex|claude|opencode|gemini FILE"])
    })
}

/// The format of a file starting with `head`, if recognised.
pub fn detect_bytes(head: &[u8]) -> Option<Format> {
    if head.starts_with(b"SQLite format 3\0") {
        return Some(Format::Opencode);
    }
    let mut lines = head.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    let trimmed: &[u8] = trim(first);
    if trimmed == b"{" || trimmed == b"[" {
        // A pretty-printed document: only `opencode export` writes one.
        let text = String::from_utf8_lossy(head);
        if text.contains("\"info\"") && text.contains("\"messages\"") {
            return Some(Format::Opencode);
        }
        return None;
    }
    let mut seen = 0;
    for line in std::iter::once(first).chain(lines) {
        let line = trim(line);
        if line.is_empty() {
            continue;
        }
        let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(line) else {
            // A torn last line of the head, or not JSON at all.
            if seen == 0 {
                return None;
            }
            continue;
        };
        seen += 1;
        if let Some(f) = classify(&m) {
            return Some(f);
        }
        if seen >= HEAD_LINES {
            break;
        }
    }
    None
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

fn classify(m: &Map<String, Value>) -> Option<Format> {
    let ty = m.get("type").and_then(Value::as_str);
    if ty == Some("session") && m.contains_key("cwd")
        || ty == Some("session") && m.contains_key("version")
    {
        return Some(Format::Pi);
    }
    if ty == Some("session_meta") && m.contains_key("payload") {
        return Some(Format::Codex);
    }
    if m.contains_key("session_id")
        && m.contains_key("seq")
        && m.contains_key("data")
        && ty.is_some()
    {
        return Some(Format::Pixir);
    }
    if m.contains_key("$set") || (m.contains_key("sessionId") && m.contains_key("projectHash")) {
        return Some(Format::Gemini);
    }
    if m.contains_key("parentUuid")
        || m.contains_key("leafUuid")
        || (m.contains_key("sessionId")
            && matches!(
                ty,
                Some(
                    "user"
                        | "assistant"
                        | "system"
                        | "summary"
                        | "queue-operation"
                        | "attachment"
                        | "last-prompt"
                        | "file-history-snapshot"
                )
            ))
    {
        return Some(Format::Claude);
    }
    if ty == Some("summary") && m.contains_key("leafUuid") {
        return Some(Format::Claude);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_is_recognised() {
        let cases: &[(&[u8], Format)] = &[
            (b"SQLite format 3\0rest", Format::Opencode),
            (b"{\n  \"info\": {},\n  \"messages\": []\n}", Format::Opencode),
            (b"{\"type\":\"session\",\"version\":3,\"id\":\"x\",\"cwd\":\"/w\"}\n", Format::Pi),
            (b"{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{}}\n", Format::Codex),
            (
                b"{\"id\":\"a\",\"session_id\":\"s\",\"seq\":0,\"ts\":\"t\",\"type\":\"session_started\",\"data\":{}}\n",
                Format::Pixir,
            ),
            (b"{\"sessionId\":\"s\",\"projectHash\":\"h\",\"startTime\":\"t\"}\n", Format::Gemini),
            (
                b"{\"type\":\"queue-operation\",\"operation\":\"enqueue\",\"sessionId\":\"s\"}\n{\"parentUuid\":null}\n",
                Format::Claude,
            ),
            (b"{\"type\":\"summary\",\"summary\":\"t\",\"leafUuid\":\"u\"}\n", Format::Claude),
        ];
        for (head, want) in cases {
            assert_eq!(
                detect_bytes(head),
                Some(*want),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn other_content_is_not_guessed() {
        for head in [
            &b"hello\n"[..],
            b"{\"a\":1}\n",
            b"\xff\xfe\x00",
            b"[1,2]\n",
            b"{\n\"x\":1}",
        ] {
            assert_eq!(
                detect_bytes(head),
                None,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
