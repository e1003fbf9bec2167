//! Server-Sent Events parser (WHATWG HTML "event stream interpretation"), the one the
//! daemon uses for every event stream: LLM providers' and MCP servers' (`agentd-mcp`).
//!
//! The bytes arrive in network-sized chunks that cut
//! lines, `data:` fields and multi-byte UTF-8 characters anywhere. The parser therefore
//! works on bytes: lines are split on CR, LF or CRLF (a CR at the end of one chunk and an
//! LF at the start of the next are one line ending), and only complete lines are decoded.
//! Multiple `data:` lines of one event are joined with `\n`; comments (`:` lines) are
//! skipped; an event is dispatched on an empty line; an unterminated event at end of
//! stream is discarded, as the spec says, so a cut stream never yields half a JSON.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, or `"message"` when absent.
    pub event: String,
    pub data: String,
    /// The last event id seen so far (`id:` field), if any.
    pub id: Option<String>,
}

/// A line longer than this is refused: a server that never ends a line must not be able
/// to grow daemon memory without bound.
pub const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTooLong;

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF of the next chunk is its pair.
    after_cr: bool,
    started: bool,
    event_type: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    /// The last `retry:` field that was a number: the reconnection time in ms.
    retry: Option<u64>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; appends every event completed by them to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LineTooLong> {
        if self.after_cr && !chunk.is_empty() {
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
            self.after_cr = false;
        }
        while !chunk.is_empty() {
            match memchr::memchr2(b'\n', b'\r', chunk) {
                Some(i) => {
                    self.line.extend_from_slice(&chunk[..i]);
                    if self.line.len() > MAX_LINE_BYTES {
                        return Err(LineTooLong);
                    }
                    let was_cr = chunk[i] == b'\r';
                    chunk = &chunk[i + 1..];
                    if was_cr {
                        match chunk.first() {
                            Some(b'\n') => chunk = &chunk[1..],
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, out);
                }
                None => {
                    self.line.extend_from_slice(chunk);
                    if self.line.len() > MAX_LINE_BYTES {
                        return Err(LineTooLong);
                    }
                    break;
                }
            }
        }
        Ok(())
    }

    /// The last event id seen so far, dispatched or not (an event with an id and no
    /// data sets it too, as the spec says).
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection time the stream last asked for (`retry:` with digits only), in ms.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// True while an event has started (data or a partial line) but was not dispatched:
    /// the stream ending now would cut it.
    pub fn has_pending(&self) -> bool {
        self.has_data || !self.line.is_empty()
    }

    fn process_line(&mut self, raw: &[u8], out: &mut Vec<SseEvent>) {
        let mut bytes = raw;
        if !self.started {
            self.started = true;
            if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
                bytes = rest;
            }
        }
        if bytes.is_empty() {
            self.dispatch(out);
            return;
        }
        let line = String::from_utf8_lossy(bytes);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        match field {
            "event" => self.event_type = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_string()),
            // Only reconnecting clients (MCP's streamable HTTP) use it; providers don't.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok().or(self.retry);
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event_type = std::mem::take(&mut self.event_type);
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event: if event_type.is_empty() {
                "message".to_string()
            } else {
                event_type
            },
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out).unwrap();
        }
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn joins_data_lines_and_reads_event_field() {
        let got = parse_all(&[b"event: delta\ndata: a\ndata:b\ndata:  c\n\ndata: x\n\n"]);
        assert_eq!(got, vec![ev("delta", "a\nb\n c"), ev("message", "x")]);
    }

    #[test]
    fn comments_empty_events_and_bare_fields() {
        let got = parse_all(&[b": keep-alive\n\nevent: ping\n\ndata\n\ndata:\ndata:\n\n"]);
        // `event: ping` without data dispatches nothing and does not leak into the next.
        assert_eq!(got, vec![ev("message", ""), ev("message", "\n")]);
    }

    #[test]
    fn cr_lf_and_crlf_line_endings() {
        let got = parse_all(&[b"data: a\r\rdata: b\r\n\r\ndata: c\n\n"]);
        assert_eq!(
            got,
            vec![ev("message", "a"), ev("message", "b"), ev("message", "c")]
        );
        // CRLF split across chunks is one line ending, not two.
        let got = parse_all(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(got, vec![ev("message", "a\nb")]);
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let text = "\u{feff}event: response.output_text.delta\r\ndata: {\"delta\":\"h\u{e9}llo \u{1f600}\"}\r\n\r\n: c\ndata: 1\ndata: 2\n\nid: 7\ndata: z\r\r".as_bytes();
        let whole = parse_all(&[text]);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].data, "{\"delta\":\"h\u{e9}llo \u{1f600}\"}");
        assert_eq!(whole[1].data, "1\n2");
        assert_eq!(whole[2].id.as_deref(), Some("7"));
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let got = parse_all(&[&text[..i], &text[i..j], &text[j..]]);
                assert_eq!(got, whole, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn an_id_without_data_and_a_numeric_retry_are_kept() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"id: prime-1\nretry: 250\n\nretry: soon\n\n", &mut out)
            .unwrap();
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(p.last_id(), Some("prime-1"));
        assert_eq!(p.retry(), Some(250));
        p.push(b"data: x\n\n", &mut out).unwrap();
        assert_eq!(out[0].id.as_deref(), Some("prime-1"));
    }

    #[test]
    fn unterminated_event_is_discarded_and_reported_pending() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"data: {\"a\":", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(p.has_pending());
        p.push(b"1}\n", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(p.has_pending());
        p.push(b"\n", &mut out).unwrap();
        assert_eq!(out, vec![ev("message", "{\"a\":1}")]);
        assert!(!p.has_pending());
    }
}
