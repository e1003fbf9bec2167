//! `sse`: bytes as a provider's Server-Sent Events stream (the first byte picks a chunk
//! size). The parser yields the same events and the same pending state whether the bytes
//! arrive at once or cut into chunks anywhere (inside CRLF, inside UTF-8); no event's
//! type or data holds a line ending other than the `\n` that joins `data:` lines.

use agentd::provider::sse::{SseEvent, SseParser};

fn parse(bytes: &[u8], chunk: usize) -> (Vec<SseEvent>, bool) {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for c in bytes.chunks(chunk.max(1)) {
        if p.push(c, &mut out).is_err() {
            break;
        }
    }
    (out, p.has_pending())
}

pub fn run(data: &[u8]) {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let chunk = 1 + (*first as usize % 13);
    let whole = parse(rest, rest.len());
    let split = parse(rest, chunk);
    assert_eq!(whole, split, "chunking changed the events (chunk {chunk})");
    for ev in &whole.0 {
        assert!(
            !ev.event.contains(['\r', '\n']),
            "event type holds a line ending: {ev:?}"
        );
        assert!(!ev.data.contains('\r'), "data holds a CR: {ev:?}");
        if let Some(id) = &ev.id {
            assert!(!id.contains(['\r', '\n', '\0']), "id holds {id:?}");
        }
    }
}
