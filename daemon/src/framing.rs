//! Message framing on the socket (docs/protocol.md#framing).
//!
//! A connection speaks one of two framings, chosen from its first bytes:
//! NDJSON (one JSON text per `\n`-terminated line, the native framing) or LSP-style
//! header framing (`Content-Length: N\r\n` and optional other headers, a blank line,
//! then exactly N bytes of JSON), which editors' JSON-RPC libraries use. A connection
//! whose first bytes are `Content-Length:` (any case) uses headers; anything else
//! (`{`, `[`, whitespace, garbage) uses lines, so bad NDJSON keeps its old errors.
//! Answers are written in the connection's framing.
//!
//! Limits are the same in both: a message over `max_message_bytes` is refused with
//! `message_too_large`. In NDJSON the rest of the line is discarded and the connection
//! stays usable; in header framing the announced body is never read, so the stream
//! cannot be resynchronised and the connection is closed after the error. Malformed
//! headers (no `Content-Length`, a non-numeric or conflicting one, a line without a
//! colon, a header block over [`MAX_HEADER_BYTES`]) are a parse error and likewise end
//! the connection.

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};

/// Longest header block accepted, terminator included.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
const PREFIX: &[u8] = b"content-length:";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Lines,
    Headers,
}

#[derive(Debug)]
pub enum FrameError {
    /// A message over the limit. `fatal` when the connection cannot continue.
    TooLarge {
        fatal: bool,
    },
    /// A message that is not UTF-8; its bytes were consumed, the connection goes on.
    NotUtf8,
    /// A header block that cannot be parsed; the connection cannot continue.
    BadHeader(String),
    Io(std::io::Error),
}

impl FrameError {
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            FrameError::TooLarge { fatal: true } | FrameError::BadHeader(_) | FrameError::Io(_)
        )
    }
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Decodes either framing into message texts; detects the framing on first use.
pub struct FrameCodec {
    max: usize,
    framing: Option<Framing>,
    lines: LinesCodec,
    /// Header framing: the body length of the frame whose headers were read.
    body_len: Option<usize>,
}

impl FrameCodec {
    pub fn new(max: usize) -> Self {
        FrameCodec {
            max,
            framing: None,
            lines: LinesCodec::new_with_max_length(max),
            body_len: None,
        }
    }

    /// The framing detected so far (`None` before the first bytes).
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    fn detect(&mut self, buf: &BytesMut, eof: bool) -> Option<Framing> {
        if let Some(f) = self.framing {
            return Some(f);
        }
        if buf.is_empty() {
            return None;
        }
        let n = buf.len().min(PREFIX.len());
        let head = buf[..n].to_ascii_lowercase();
        let f = if head == PREFIX[..n] {
            if n < PREFIX.len() && !eof {
                // "Cont" so far: could still be either; wait for more bytes.
                return None;
            }
            if n == PREFIX.len() {
                Framing::Headers
            } else {
                Framing::Lines
            }
        } else {
            Framing::Lines
        };
        self.framing = Some(f);
        Some(f)
    }

    fn decode_lines(
        &mut self,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<Option<String>, FrameError> {
        let r = if eof {
            self.lines.decode_eof(buf)
        } else {
            self.lines.decode(buf)
        };
        r.map_err(|e| match e {
            LinesCodecError::MaxLineLengthExceeded => FrameError::TooLarge { fatal: false },
            // LinesCodec reports invalid UTF-8 as an io error of kind InvalidData.
            LinesCodecError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                FrameError::NotUtf8
            }
            LinesCodecError::Io(e) => FrameError::Io(e),
        })
    }

    fn decode_headers(&mut self, buf: &mut BytesMut) -> Result<Option<String>, FrameError> {
        let len = match self.body_len {
            Some(l) => l,
            None => {
                let Some(end) = find(buf, b"\r\n\r\n") else {
                    if buf.len() > MAX_HEADER_BYTES {
                        return Err(FrameError::BadHeader(format!(
                            "header block longer than {MAX_HEADER_BYTES} bytes"
                        )));
                    }
                    return Ok(None);
                };
                if end + 4 > MAX_HEADER_BYTES {
                    return Err(FrameError::BadHeader(format!(
                        "header block longer than {MAX_HEADER_BYTES} bytes"
                    )));
                }
                let len = parse_headers(&buf[..end])?;
                buf.advance(end + 4);
                if len > self.max {
                    return Err(FrameError::TooLarge { fatal: true });
                }
                self.body_len = Some(len);
                len
            }
        };
        if buf.len() < len {
            buf.reserve(len - buf.len());
            return Ok(None);
        }
        self.body_len = None;
        let body = buf.split_to(len);
        match String::from_utf8(body.to_vec()) {
            Ok(s) => Ok(Some(s)),
            Err(_) => Err(FrameError::NotUtf8),
        }
    }

    /// The next message in `buf`, `Ok(None)` if more bytes are needed. At `eof`, an
    /// unterminated NDJSON line is still a message; a partial header frame is dropped.
    pub fn next(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Option<String>, FrameError> {
        match self.detect(buf, eof) {
            None => Ok(None),
            Some(Framing::Lines) => self.decode_lines(buf, eof),
            Some(Framing::Headers) => {
                let r = self.decode_headers(buf);
                if eof && matches!(r, Ok(None)) {
                    buf.clear();
                }
                r
            }
        }
    }
}

impl Decoder for FrameCodec {
    type Item = String;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<String>, FrameError> {
        self.next(buf, false)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<String>, FrameError> {
        self.next(buf, true)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The `Content-Length` of a header block (without its blank-line terminator).
fn parse_headers(block: &[u8]) -> Result<usize, FrameError> {
    let text = std::str::from_utf8(block)
        .map_err(|_| FrameError::BadHeader("header block is not UTF-8".into()))?;
    let mut len: Option<usize> = None;
    for line in text.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else {
            return Err(FrameError::BadHeader(format!(
                "header line without a colon: {:?}",
                crate::text::utf8_prefix(line, 64)
            )));
        };
        if !name.trim().eq_ignore_ascii_case("content-length") {
            // Content-Type and any other header are allowed and ignored.
            continue;
        }
        let v = value.trim();
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(FrameError::BadHeader(format!(
                "Content-Length is not a number: {:?}",
                crate::text::utf8_prefix(v, 32)
            )));
        }
        // Too many digits for usize is certainly over any limit.
        let n = v.parse::<usize>().unwrap_or(usize::MAX);
        if len.is_some_and(|l| l != n) {
            return Err(FrameError::BadHeader(
                "conflicting Content-Length headers".into(),
            ));
        }
        len = Some(n);
    }
    len.ok_or_else(|| FrameError::BadHeader("no Content-Length header".into()))
}

/// One message as written in `framing`.
pub fn encode(framing: Framing, msg: &str) -> Vec<u8> {
    encode_bytes(framing, msg.as_bytes())
}

/// [`encode`] for a message already held as (UTF-8 JSON) bytes.
pub fn encode_bytes(framing: Framing, msg: &[u8]) -> Vec<u8> {
    match framing {
        Framing::Lines => {
            let mut out = Vec::with_capacity(msg.len() + 1);
            out.extend_from_slice(msg);
            out.push(b'\n');
            out
        }
        Framing::Headers => {
            let mut out = format!("Content-Length: {}\r\n\r\n", msg.len()).into_bytes();
            out.extend_from_slice(msg);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(codec: &mut FrameCodec, bytes: &[u8]) -> Vec<Result<String, String>> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        // Feed one byte at a time: every split point is exercised.
        for b in bytes {
            buf.extend_from_slice(&[*b]);
            loop {
                match codec.next(&mut buf, false) {
                    Ok(Some(m)) => out.push(Ok(m)),
                    Ok(None) => break,
                    Err(e) => {
                        let fatal = e.is_fatal();
                        out.push(Err(format!("{e:?}")));
                        if fatal {
                            return out;
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn header_frames_split_anywhere_decode_whole() {
        let mut c = FrameCodec::new(1024);
        let mut wire = encode(Framing::Headers, "{\"a\":1}");
        wire.extend_from_slice(b"content-length: 2\r\nContent-Type: application/json\r\n\r\n[]");
        let got = all(&mut c, &wire);
        assert_eq!(got, vec![Ok("{\"a\":1}".into()), Ok("[]".into())]);
        assert_eq!(c.framing(), Some(Framing::Headers));
    }

    #[test]
    fn lines_are_detected_from_json_whitespace_and_garbage() {
        for first in ["{\"a\":1}\n", "  {}\n", "[1]\n", "Cont\n", "hello\n"] {
            let mut c = FrameCodec::new(1024);
            let got = all(&mut c, first.as_bytes());
            assert_eq!(got, vec![Ok(first.trim_end().into())], "{first:?}");
            assert_eq!(c.framing(), Some(Framing::Lines), "{first:?}");
        }
    }

    #[test]
    fn bad_headers_and_oversize_are_fatal() {
        for wire in [
            &b"Content-Length: abc\r\n\r\n{}"[..],
            b"Content-Length: 2\r\nno colon here\r\n\r\n{}",
            b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            b"Content-Length:\r\n\r\n{}",
        ] {
            let mut c = FrameCodec::new(1024);
            let got = all(&mut c, wire);
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(
                got[0].as_ref().unwrap_err().contains("BadHeader"),
                "{got:?}"
            );
        }
        let mut c = FrameCodec::new(10);
        let got = all(&mut c, b"Content-Length: 11\r\n\r\n");
        assert_eq!(got, vec![Err("TooLarge { fatal: true }".into())]);
        let mut c = FrameCodec::new(10);
        let mut long = b"Content-Length: 1\r\nX: ".to_vec();
        long.resize(MAX_HEADER_BYTES + 10, b'x');
        let got = all(&mut c, &long);
        assert!(
            got[0].as_ref().unwrap_err().contains("BadHeader"),
            "{got:?}"
        );
    }

    #[test]
    fn a_non_utf8_body_is_an_error_and_the_next_frame_still_decodes() {
        let mut c = FrameCodec::new(1024);
        let mut wire = b"Content-Length: 2\r\n\r\n\xff\xfe".to_vec();
        wire.extend_from_slice(&encode(Framing::Headers, "{}"));
        let got = all(&mut c, &wire);
        assert_eq!(got, vec![Err("NotUtf8".into()), Ok("{}".into())]);
    }
}
