//! A loaded session's events as the bytes of their Log lines.
//!
//! A [`StoredEvent`] keeps its line (without the newline) plus a small header — seq,
//! type, where `data` starts — instead of an [`Event`] with a `serde_json::Value` tree,
//! which takes about three times the line's size. The line is what `agentd/events`,
//! subscriptions and export copy as it is; `data` is parsed only where a reader needs it
//! ([`StoredEvent::event`]). Lines live in shared chunks ([`Line`]): a loaded Log's
//! blocks as they were read, so a line costs no allocation of its own, and the replay
//! fold's large items refer to the same bytes.
//!
//! Invariant: `line` is exactly what the `Event` serializes to (the form agentd writes),
//! so copying it is byte-identical to serializing the parsed event. A Log line in any
//! other form (spaces, another key order of the envelope, extra envelope fields) is
//! kept in the serialized form instead ([`StoredEvent::parse_line`]).

use agentd_proto::{Event, EventType};
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// A line of text inside a shared chunk: a loaded Log keeps the bytes of each block it
/// read as one chunk (no allocation per line), an append batch its buffer.
#[derive(Debug, Clone)]
pub struct Line {
    chunk: Arc<str>,
    start: u32,
    end: u32,
}

impl Line {
    /// `chunk[range]`; `None` unless the range falls on character boundaries of a
    /// chunk shorter than 4 GiB.
    pub fn new(chunk: &Arc<str>, range: std::ops::Range<usize>) -> Option<Line> {
        chunk.get(range.clone())?;
        Some(Line {
            chunk: chunk.clone(),
            start: u32::try_from(range.start).ok()?,
            end: u32::try_from(range.end).ok()?,
        })
    }

    /// A line of its own.
    pub fn owned(text: &str) -> Line {
        Line {
            chunk: Arc::from(text),
            start: 0,
            end: text.len() as u32,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.chunk[self.start as usize..self.end as usize]
    }

    /// `as_str()[range]` as shared bytes: the chunk stays alive while they do, nothing
    /// is copied.
    pub fn share(&self, range: Range<usize>) -> Bytes {
        struct Chunk(Arc<str>);
        impl AsRef<[u8]> for Chunk {
            fn as_ref(&self) -> &[u8] {
                self.0.as_bytes()
            }
        }
        let s = self.start as usize;
        Bytes::from_owner(Chunk(self.chunk.clone())).slice(s + range.start..s + range.end)
    }

    /// Where the line's `data[field]` string is, as JSON text without its quotes, when
    /// the event's `type` is `kind` and the string is escaped exactly as agentd's
    /// serializer escapes it (so the bytes can stand for the string in any JSON agentd
    /// writes). `None` otherwise: another type, no such string, a duplicate key, or
    /// another escape form (`\/`, `\u00e9`).
    pub fn string_field(&self, kind: &str, field: &str) -> Option<Range<usize>> {
        #[derive(serde::Deserialize)]
        struct Envelope<'a> {
            #[serde(rename = "type", borrow)]
            kind: Cow<'a, str>,
            #[serde(borrow)]
            data: &'a RawValue,
        }
        let line = self.as_str();
        let env: Envelope<'_> = serde_json::from_str(line).ok()?;
        if env.kind != kind {
            return None;
        }
        let fields: std::collections::BTreeMap<Cow<'_, str>, &RawValue> =
            serde_json::from_str(env.data.get()).ok()?;
        let raw = fields.get(field)?.get();
        let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
        if !escaped_as_agentd_does(inner.as_bytes()) {
            return None;
        }
        let at = inner.as_ptr() as usize - line.as_ptr() as usize;
        Some(at..at + inner.len())
    }
}

/// Whether the JSON string text `s` (valid, without quotes) uses exactly the escapes
/// serde_json writes: `\"`, `\\`, `\b \t \n \f \r`, and `\u00xx` (lowercase hex)
/// for the other control characters; nothing else is escaped.
pub fn escaped_as_agentd_does(s: &[u8]) -> bool {
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'\\', &s[i..]) {
        let at = i + p + 1;
        match s.get(at) {
            Some(b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r') => i = at + 1,
            Some(b'u') => {
                let Some(&[b'0', b'0', hi, lo]) = s.get(at + 1..at + 5) else {
                    return false;
                };
                let hex = |c: u8| match c {
                    b'0'..=b'9' => Some(c - b'0'),
                    b'a'..=b'f' => Some(c - b'a' + 10),
                    _ => None,
                };
                let (Some(h), Some(l)) = (hex(hi), hex(lo)) else {
                    return false;
                };
                let c = h * 16 + l;
                if c >= 0x20 || matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                    return false;
                }
                i = at + 5;
            }
            _ => return false,
        }
    }
    true
}

/// One event of a loaded session: its Log line and a header.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: u64,
    line: Line,
    /// Byte offset of `data`'s value in the line (it runs to the closing `}`).
    data_at: u32,
    ty: EventType,
    /// The type name when it is not one agentd knows.
    unknown: Option<Box<str>>,
}

impl StoredEvent {
    /// The stored form of `ev` whose serialization is `line` (no newline).
    pub fn new(ev: &Event, line: Line) -> StoredEvent {
        let text = line.as_str();
        debug_assert!(text.ends_with('}'));
        // `data` is the envelope's last field, after the fixed keys and the short
        // values before it (so `data` itself is never serialized again here).
        let data_at = envelope_len(ev).min(text.len().saturating_sub(1)) as u32;
        let ty = ev.event_type();
        StoredEvent {
            seq: ev.seq,
            data_at,
            ty,
            unknown: (ty == EventType::Unknown).then(|| ev.kind.clone().into_boxed_str()),
            line,
        }
    }

    /// Parses a Log line. `Ok((event, true))` when the line is exactly the event's
    /// serialization (it may be stored as it is), `Ok((event, false))` when it must be
    /// stored as [`StoredEvent::of`] the event. `scratch` is a reusable buffer.
    /// A line in agentd's own form takes the one-pass [`crate::canonical`] parse.
    pub fn parse_line(line: &[u8], scratch: &mut Vec<u8>) -> serde_json::Result<(Event, bool)> {
        if let Some(ev) = std::str::from_utf8(line)
            .ok()
            .and_then(crate::canonical::parse)
        {
            return Ok((ev, true));
        }
        let ev: Event = serde_json::from_slice(line)?;
        scratch.clear();
        serde_json::to_writer(&mut *scratch, &ev)?;
        let same = scratch.as_slice() == line;
        Ok((ev, same))
    }

    /// The stored form of `ev`, serializing it.
    pub fn of(ev: &Event) -> StoredEvent {
        // A struct of Strings and a Value always serializes.
        let line = serde_json::to_string(ev).unwrap_or_default();
        StoredEvent::new(ev, Line::owned(&line))
    }

    /// The Log line, without its newline: the event's JSON text.
    pub fn line(&self) -> &str {
        self.line.as_str()
    }

    /// The line as shared (for a replay item that reads it later).
    pub fn line_ref(&self) -> &Line {
        &self.line
    }

    /// `data` as JSON text.
    pub fn data_text(&self) -> &str {
        let line = self.line();
        let at = (self.data_at as usize).min(line.len().saturating_sub(1));
        &line[at..line.len().saturating_sub(1)]
    }

    pub fn event_type(&self) -> EventType {
        self.ty
    }

    /// The `type` name.
    pub fn kind(&self) -> &str {
        self.unknown.as_deref().unwrap_or_else(|| self.ty.as_str())
    }

    /// The whole event, parsed from the line.
    pub fn event(&self) -> Event {
        serde_json::from_str(self.line()).unwrap_or_else(|_| Event {
            id: String::new(),
            session_id: String::new(),
            seq: self.seq,
            ts: String::new(),
            kind: self.kind().to_string(),
            data: Value::Object(Default::default()),
        })
    }

    /// `data`, parsed.
    pub fn data(&self) -> Value {
        serde_json::from_str(self.data_text()).unwrap_or(Value::Null)
    }

    /// `data[key]` as a string, if present (parses `data`).
    pub fn str_field(&self, key: &str) -> Option<String> {
        match self.data().get_mut(key).map(Value::take) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// The event id (read from the line without building `data`).
    pub fn id(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Head {
            id: String,
        }
        serde_json::from_str::<Head>(self.line()).map_or_else(|_| String::new(), |h| h.id)
    }
}

/// Bytes of the serialized envelope before `data`'s value:
/// `{"id":…,"session_id":…,"seq":…,"ts":…,"type":…,"data":`.
fn envelope_len(ev: &Event) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    for s in [&ev.id, &ev.session_id, &ev.ts, &ev.kind] {
        let _ = serde_json::to_writer(&mut c, s);
    }
    let keys = r#"{"id":,"session_id":,"seq":,"ts":,"type":,"data":"#.len();
    c.0 + keys + ev.seq.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Parses stored events back into [`Event`]s (for projections over event slices).
pub fn parse_all<'a>(events: impl IntoIterator<Item = &'a StoredEvent>) -> Vec<Event> {
    events.into_iter().map(StoredEvent::event).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(kind: &str, data: Value) -> Event {
        Event {
            id: "e1".into(),
            session_id: "s".into(),
            seq: 7,
            ts: "2026-11-01T00:00:00.000000Z".into(),
            kind: kind.into(),
            data,
        }
    }

    #[test]
    fn a_line_in_agentd_form_is_kept_byte_for_byte() {
        let e = ev(
            "future_type",
            json!({"z": 1, "a": {"y": [1, 2.5, "x\n\"q\""], "b": null}, "m": "é😀"}),
        );
        let line = serde_json::to_vec(&e).unwrap();
        let (parsed, same) = StoredEvent::parse_line(&line, &mut Vec::new()).unwrap();
        assert!(same);
        assert_eq!(parsed, e);
        let chunk: Arc<str> = Arc::from(format!("xx\n{}\n", std::str::from_utf8(&line).unwrap()));
        let s = StoredEvent::new(&parsed, Line::new(&chunk, 3..3 + line.len()).unwrap());
        assert_eq!(s.line().as_bytes(), &line[..]);
        assert_eq!(s.kind(), "future_type");
        assert_eq!(s.event_type(), EventType::Unknown);
        assert_eq!(s.data_text(), serde_json::to_string(&e.data).unwrap());
        assert_eq!(s.data(), e.data);
        assert_eq!(s.event(), e);
        assert_eq!(StoredEvent::of(&e).line(), s.line());
    }

    #[test]
    fn data_is_found_whatever_the_seq_and_escapes_before_it() {
        for seq in [0, 9, 10, 99, 12345, u64::MAX - 1] {
            let mut e = ev("x\"type\u{1}", json!({"k": "v\"data\":", "n": [seq]}));
            e.seq = seq;
            e.id = "a\\b\"c".into();
            e.ts = "é\n".into();
            let s = StoredEvent::of(&e);
            assert_eq!(
                s.data_text(),
                serde_json::to_string(&e.data).unwrap(),
                "{seq}"
            );
            assert_eq!(s.data(), e.data);
            assert_eq!(s.id(), e.id);
            assert_eq!(s.kind(), e.kind);
        }
    }

    #[test]
    fn a_line_in_another_form_is_kept_as_the_event_serializes() {
        let text = r#"{ "seq": 7, "id": "e1", "session_id": "s", "ts": "t", "type": "user_message", "extra": 1, "data": {"text": "a,\"data\":b"} }"#;
        let (parsed, same) = StoredEvent::parse_line(text.as_bytes(), &mut Vec::new()).unwrap();
        assert!(!same);
        let s = StoredEvent::of(&parsed);
        assert_eq!(s.line(), serde_json::to_string(&parsed).unwrap());
        assert_eq!(s.data_text(), r#"{"text":"a,\"data\":b"}"#);
        assert_eq!(s.event_type(), EventType::UserMessage);
        assert_eq!(s.kind(), "user_message");
    }
}
