//! `framing`: bytes through the frame codec (NDJSON or `Content-Length`, detected from
//! the first bytes). Never a panic or a message over the cap, and the same messages and
//! errors whether the bytes arrive at once or a few at a time (the first input byte
//! picks the chunk size).

/// Decodes `bytes` fed in chunks of `chunk` bytes: the messages and errors in order.
fn decode_all(bytes: &[u8], chunk: usize) -> Vec<String> {
    use agentd::framing::FrameCodec;
    const MAX: usize = 4096;
    let mut codec = FrameCodec::new(MAX);
    let mut buf = bytes::BytesMut::new();
    let mut out = Vec::new();
    let mut fed = 0;
    loop {
        let eof = fed >= bytes.len();
        match codec.next(&mut buf, eof) {
            Ok(Some(m)) => {
                assert!(
                    m.len() <= MAX,
                    "a {}-byte message passed the {MAX} cap",
                    m.len()
                );
                out.push(format!("msg:{m}"));
            }
            Ok(None) if eof => break,
            Ok(None) => {
                let end = (fed + chunk).min(bytes.len());
                buf.extend_from_slice(&bytes[fed..end]);
                fed = end;
            }
            Err(e) => {
                out.push(format!("err:{e:?}"));
                if e.is_fatal() {
                    break;
                }
            }
        }
        assert!(
            out.len() <= bytes.len() + 2,
            "decoder yields without consuming"
        );
    }
    out
}

/// Bytes through the frame codec (NDJSON or `Content-Length`, detected from the first
/// bytes): never a panic or a message over the cap, and the same messages and errors
/// whether the bytes arrive at once or a few at a time.
pub fn run(data: &[u8]) {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let chunk = 1 + (*first as usize % 17);
    let whole = decode_all(rest, rest.len().max(1));
    let split = decode_all(rest, chunk);
    assert_eq!(
        whole, split,
        "chunking changed the decoded messages (chunk {chunk})"
    );
}
