//! Reading a Log file: in blocks, parsed over the available cores while the block
//! before is handed to the caller's fold, with a torn tail copied to `quarantine/` and
//! cut (docs/log-format.md#torn-tails).

use crate::{read_failed, sync_dir, write_failed, write_synced, Home};
use agentd_history::stored::{Line, StoredEvent};
use agentd_proto::rpc::CorruptLine;
use agentd_proto::{AgentError, ErrorKind, Event};
use serde_json::{json, Value};
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::path::PathBuf;

/// What a load found besides the events.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub corrupt_lines: Vec<CorruptLine>,
    pub seq_anomalies: Vec<Value>,
    /// Set when a torn tail was cut: `(torn_bytes, quarantine_path)`.
    pub torn: Option<(u64, PathBuf)>,
    pub bytes: u64,
}

/// Reads a Log, repairing a torn tail. Returns the valid events in file order.
///
/// A torn tail (bytes after the last `\n`) is copied to `quarantine/<sid>.<ts>.torn`
/// and synced before the Log is truncated, so no byte is ever lost; the caller appends
/// `log_repaired`. Complete lines that are not valid envelopes are reported, never
/// rewritten.
pub fn load_log(home: &Home, sid: &str) -> Result<(Vec<Event>, LoadReport), AgentError> {
    let mut events = Vec::new();
    let report = load_log_into(home, sid, &mut |ev, _| events.push(ev))?;
    Ok((events, report))
}

/// [`load_log`] handing each valid event, in file order, to `sink` together with its
/// stored form (the Log line): a block's parsed events are gone before the block after
/// the next is read, so a load holds the lines plus two blocks of parsed events at most.
pub fn load_log_into(
    home: &Home,
    sid: &str,
    sink: &mut dyn FnMut(Event, StoredEvent),
) -> Result<LoadReport, AgentError> {
    let path = home.log_path(sid)?;
    let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(AgentError::not_found("no such session")
                .with_details(json!({"session_id": sid}))
                .with_next_actions(&["agentctl ls"]))
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(
                AgentError::new(ErrorKind::PermissionDenied, format!("open log: {e}"))
                    .with_details(json!({"session_id": sid})),
            )
        }
        Err(e) => return Err(read_failed("open log", &e, sid)),
    };
    // Read and parse in blocks: peak memory is two blocks plus the events, not the
    // whole file plus the events. A block's events are parsed (about three times its
    // size as `Value` trees) before they are stored, so blocks are kept small.
    const BLOCK: usize = 2 << 20;
    let mut report = LoadReport::default();
    let mut cursor = ParseCursor {
        line_no: 1,
        offset: 0,
    };
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK);
    // The parsed block waiting for the sink: it is handed over while the next block is
    // parsed, so folding one block overlaps parsing the next (two blocks in flight).
    let mut pending: Option<Parsed> = None;
    let mut next_seq: Option<u64> = None;
    loop {
        match crate::fault::check(crate::fault::Op::Read, &path) {
            Some(crate::fault::Fault::Hold) => crate::fault::hold(&path),
            Some(f) => return Err(read_failed("read log", &f.error(), sid)),
            None => {}
        }
        let n = (&mut file)
            .take(BLOCK as u64)
            .read_to_end(&mut buf)
            .map_err(|e| read_failed("read log", &e, sid))?;
        let complete = memchr::memrchr(b'\n', &buf).map_or(0, |i| i + 1);
        if complete > 0 {
            let block = parse_block(&buf[..complete], &mut cursor, &path, || {
                if let Some(prev) = pending.take() {
                    deliver(prev, &mut next_seq, &mut report, sink);
                }
            })
            .map_err(|at| parse_panicked(sid, at))?;
            pending = Some(block);
            buf.drain(..complete);
        }
        if n < BLOCK {
            break; // end of file; what is left in `buf` has no final newline
        }
    }
    if let Some(prev) = pending.take() {
        deliver(prev, &mut next_seq, &mut report, sink);
    }
    if !buf.is_empty() {
        let torn = &buf[..];
        let ts = agentd_proto::event::now_ts().replace([':', '.'], "");
        let qpath = home.quarantine_dir().join(format!("{sid}.{ts}.torn"));
        write_synced(&qpath, torn).map_err(|e| write_failed("quarantine torn tail", &e))?;
        sync_dir(&home.quarantine_dir()).map_err(|e| write_failed("sync quarantine", &e))?;
        file.set_len(cursor.offset)
            .map_err(|e| write_failed("truncate torn tail", &e))?;
        file.sync_all().map_err(|e| write_failed("sync log", &e))?;
        report.torn = Some((torn.len() as u64, qpath));
    }
    report.bytes = cursor.offset;
    Ok(report)
}

/// A parse thread panicked on the part of the Log starting at `byte_offset`: the load
/// fails (kind `internal`, `details.reason: "parse_panicked"`) rather than going on
/// without that part's events. Nothing is cut or rewritten; the next load tries again.
fn parse_panicked(sid: &str, byte_offset: u64) -> AgentError {
    AgentError::internal(format!(
        "loading the Log failed: the parser stopped on the part starting at byte {byte_offset} \
         (an agentd bug; the Log is left as it is)"
    ))
    .with_details(json!({
        "session_id": sid,
        "reason": "parse_panicked",
        "byte_offset": byte_offset,
    }))
}

/// The newest complete lines of a Log, read from its end without reading the rest (see
/// [`read_tail`]).
#[derive(Debug, Default)]
pub struct LogTail {
    /// The Log's last valid events (at most the number asked for), in file order, each
    /// with its stored form.
    pub events: Vec<(Event, StoredEvent)>,
    /// The lines read reach the Log's first byte: `events` are all of its events.
    pub from_start: bool,
}

/// Reads the last `max_events` complete lines of a Log (at most about `max_bytes` of
/// it) from its end: what a session serves while its whole Log loads
/// (docs/chat.md#attaching). Read-only: bytes after the last newline are a torn tail
/// the load cuts and are never events here, complete lines that are not valid events
/// are skipped as the load skips them (it reports them). `None` when the Log is
/// shorter than `min_len` (its load is quick) or cannot be read; the load then answers
/// everything and reports why.
pub fn read_tail(
    home: &Home,
    sid: &str,
    max_events: usize,
    max_bytes: u64,
    min_len: u64,
) -> Option<LogTail> {
    use std::io::{Seek, SeekFrom};
    let path = home.log_path(sid).ok()?;
    let mut file = std::fs::File::open(&path).ok()?;
    let len = file.metadata().ok()?.len();
    if len < min_len {
        return None;
    }
    let mut window: u64 = (256u64 << 10).min(max_bytes.max(1));
    loop {
        // One byte before the window too: whether its first line starts at the window.
        let start = len.saturating_sub(window).saturating_sub(1);
        let mut buf = vec![0u8; usize::try_from(len - start).ok()?];
        file.seek(SeekFrom::Start(start)).ok()?;
        file.read_exact(&mut buf).ok()?;
        let end = memchr::memrchr(b'\n', &buf).map_or(0, |i| i + 1);
        let mut begin = match start {
            0 => 0,
            _ => memchr::memchr(b'\n', &buf[..end]).map_or(end, |i| i + 1),
        };
        // Only the last `max_events` lines are parsed.
        let mut lines = 0;
        for nl in memchr::memrchr_iter(b'\n', &buf[begin..end]).skip(1) {
            lines += 1;
            if lines == max_events {
                begin += nl + 1;
                break;
            }
        }
        let whole = start == 0 && begin == 0;
        let enough = lines >= max_events;
        if enough || whole || window >= max_bytes || start == 0 {
            let bytes = &buf[begin..end];
            let (parsed, _corrupt) = parse_chunk(bytes, 0, 1);
            let chunk: Option<std::sync::Arc<str>> =
                std::str::from_utf8(bytes).ok().map(Into::into);
            let mut events: Vec<(Event, StoredEvent)> = parsed
                .into_iter()
                .map(|(ev, at)| {
                    let line = at.and_then(|r| Line::new(chunk.as_ref()?, r));
                    let stored = match line {
                        Some(l) => StoredEvent::new(&ev, l),
                        None => StoredEvent::of(&ev),
                    };
                    (ev, stored)
                })
                .collect();
            let from_start = whole;
            if events.len() > max_events {
                events.drain(..events.len() - max_events);
            }
            return Some(LogTail { events, from_start });
        }
        window = window.saturating_mul(4).min(max_bytes);
    }
}

/// Where parsing stands between blocks.
struct ParseCursor {
    /// 1-based number of the next physical line.
    line_no: u64,
    /// Byte offset of the next unparsed byte (= the length of the complete prefix).
    offset: u64,
}

/// A block's events, parsed and not yet handed to the sink.
struct Parsed {
    /// The block's bytes, kept as one chunk the stored events refer to (`None` for a
    /// block that is not UTF-8 somewhere: its events are stored one by one).
    chunk: Option<std::sync::Arc<str>>,
    /// The block's byte offset in the file.
    base: usize,
    parts: Vec<ParsedPart>,
}

type ParsedPart = (
    Vec<(Event, Option<std::ops::Range<usize>>)>,
    Vec<CorruptLine>,
);

/// Parses the complete lines of a block, split over the available cores for big
/// blocks since JSON parsing dominates a cold load. `meanwhile` runs on the calling
/// thread while the parse threads work (the previous block's fold). A parse thread
/// that panics fails the block with the byte offset of its part: its events are never
/// silently dropped.
fn parse_block(
    bytes: &[u8],
    cursor: &mut ParseCursor,
    path: &std::path::Path,
    meanwhile: impl FnOnce(),
) -> Result<Parsed, u64> {
    const PARALLEL_MIN: usize = 1 << 20;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let base = cursor.offset as usize;
    let mut chunks: Vec<(usize, u64, &[u8])> = Vec::new(); // (byte offset, first line no, bytes)
    let mut line_no = cursor.line_no;
    if bytes.len() < PARALLEL_MIN || threads == 1 {
        chunks.push((base, line_no, bytes));
        line_no += memchr::memchr_iter(b'\n', bytes).count() as u64;
    } else {
        let target = bytes.len() / threads;
        let mut start = 0;
        while start < bytes.len() {
            let mut end = (start + target).min(bytes.len());
            if end < bytes.len() {
                end = match memchr::memchr(b'\n', &bytes[end..]) {
                    Some(i) => end + i + 1,
                    None => bytes.len(),
                };
            }
            chunks.push((base + start, line_no, &bytes[start..end]));
            line_no += memchr::memchr_iter(b'\n', &bytes[start..end]).count() as u64;
            start = end;
        }
    }
    cursor.line_no = line_no;
    cursor.offset += bytes.len() as u64;
    let parts = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|&(off, line, chunk)| {
                let h = s.spawn(move || {
                    use crate::fault::{check, Fault, Op};
                    if check(Op::Parse, path) == Some(Fault::Panic) {
                        panic!("AGENTD_FAULTS: a parse thread panics");
                    }
                    parse_chunk(chunk, off, line)
                });
                (off, h)
            })
            .collect();
        meanwhile();
        // Every thread is joined (the scope would join the rest anyway); the first
        // part that panicked fails the block.
        let mut failed = None;
        let mut parts = Vec::with_capacity(handles.len());
        for (off, h) in handles {
            match h.join() {
                Ok(part) => parts.push(part),
                Err(_) => failed = failed.or(Some(off as u64)),
            }
        }
        match failed {
            Some(off) => Err(off),
            None => Ok(parts),
        }
    })?;
    Ok(Parsed {
        chunk: std::str::from_utf8(bytes).ok().map(Into::into),
        base,
        parts,
    })
}

/// Hands a parsed block's events to `sink` in file order, noting seq anomalies.
fn deliver(
    block: Parsed,
    next_seq: &mut Option<u64>,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(Event, StoredEvent),
) {
    let Parsed { chunk, base, parts } = block;
    for (evs, corrupt) in parts {
        report.corrupt_lines.extend(corrupt);
        for (ev, at) in evs {
            let line = at.and_then(|r| Line::new(chunk.as_ref()?, r.start - base..r.end - base));
            let stored = match line {
                Some(l) => StoredEvent::new(&ev, l),
                None => StoredEvent::of(&ev),
            };
            if let Some(n) = *next_seq {
                if ev.seq != n {
                    report.seq_anomalies.push(json!({
                        "seq": ev.seq, "expected": n, "id": ev.id,
                        "kind": if ev.seq < n { "duplicate_or_decreasing" } else { "gap" },
                    }));
                }
            }
            let after = ev.seq.saturating_add(1);
            *next_seq = Some(next_seq.map_or(after, |n| n.max(after)));
            sink(ev, stored);
        }
    }
}

/// The events of complete lines, each with the byte range of its line in the file when
/// the line is exactly the event's serialization (see `StoredEvent::parse_line`).
fn parse_chunk(chunk: &[u8], base: usize, first_line: u64) -> ParsedPart {
    let mut events = Vec::with_capacity(chunk.len() / 512 + 1);
    let mut corrupt = Vec::new();
    let mut scratch = Vec::new();
    let mut pos = 0;
    let mut line_no = first_line;
    while pos < chunk.len() {
        let end = memchr::memchr(b'\n', &chunk[pos..]).map_or(chunk.len(), |i| pos + i);
        let line = &chunk[pos..end];
        if !line.iter().all(u8::is_ascii_whitespace) {
            match StoredEvent::parse_line(line, &mut scratch) {
                Ok((ev, same)) => events.push((ev, same.then_some(base + pos..base + end))),
                Err(e) => corrupt.push(CorruptLine {
                    line: line_no,
                    byte_offset: (base + pos) as u64,
                    reason: e.to_string(),
                }),
            }
        }
        pos = end + 1;
        line_no += 1;
    }
    (events, corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::home;
    use std::fs;

    #[test]
    fn torn_tail_is_quarantined_and_cut() {
        let (_d, home) = home();
        let path = home.log_path("s1").unwrap();
        let good = r#"{"id":"0000000000000001","session_id":"s1","seq":0,"ts":"2026-01-01T00:00:00.000000Z","type":"user_message","data":{"text":"hi"}}"#;
        fs::write(&path, format!("{good}\n{{\"id\":\"torn")).unwrap();
        let (events, report) = load_log(&home, "s1").unwrap();
        assert_eq!(events.len(), 1);
        let (n, q) = report.torn.unwrap();
        assert_eq!(n, 11);
        assert_eq!(fs::read(q).unwrap(), b"{\"id\":\"torn");
        assert_eq!(fs::read(&path).unwrap(), format!("{good}\n").into_bytes());
    }

    #[test]
    fn block_boundaries_keep_line_numbers_offsets_and_seqs() {
        let (_d, home) = home();
        let path = home.log_path("big").unwrap();
        let mut text = String::new();
        let mut corrupt_offset = 0;
        let pad = "p".repeat(480);
        for seq in 0..20_000u64 {
            if seq == 15_000 {
                corrupt_offset = text.len();
                text.push_str("{not json}\n");
            }
            text.push_str(&format!(
                r#"{{"id":"{seq:016x}","session_id":"big","seq":{seq},"ts":"t","type":"user_message","data":{{"text":"{pad}"}}}}"#
            ));
            text.push('\n');
        }
        assert!(text.len() > 9 << 20, "spans more than one read block");
        let complete = text.len() as u64;
        text.push_str("{\"torn");
        fs::write(&path, &text).unwrap();
        let (events, report) = load_log(&home, "big").unwrap();
        assert_eq!(events.len(), 20_000);
        assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
        assert!(report.seq_anomalies.is_empty());
        assert_eq!(report.corrupt_lines.len(), 1);
        assert_eq!(report.corrupt_lines[0].line, 15_001);
        assert_eq!(report.corrupt_lines[0].byte_offset, corrupt_offset as u64);
        assert_eq!(report.bytes, complete);
        assert_eq!(report.torn.as_ref().unwrap().0, 6);
        assert_eq!(fs::metadata(&path).unwrap().len(), complete);
    }

    #[test]
    fn a_tail_is_the_loads_last_events_without_the_torn_bytes() {
        let (_d, home) = home();
        let path = home.log_path("t").unwrap();
        let pad = "é".repeat(150);
        let mut text = String::new();
        for seq in 0..3000u64 {
            if seq == 2990 {
                text.push_str("{not json}\n\n");
            }
            text.push_str(&format!(
                r#"{{"id":"{seq:016x}","session_id":"t","seq":{seq},"ts":"t","type":"user_message","data":{{"text":"{pad}"}}}}"#
            ));
            text.push('\n');
        }
        assert!(text.len() > 1 << 20, "more than the first window");
        text.push_str("{\"torn");
        fs::write(&path, &text).unwrap();
        let lines = |evs: &[(Event, StoredEvent)]| -> Vec<(u64, String)> {
            evs.iter()
                .map(|(e, s)| (e.seq, s.line().to_string()))
                .collect()
        };
        let some = read_tail(&home, "t", 100, 16 << 20, 0).unwrap();
        let most = read_tail(&home, "t", 2500, 16 << 20, 0).unwrap();
        let all = read_tail(&home, "t", 10_000, 16 << 20, 0).unwrap();
        let capped = read_tail(&home, "t", 2500, 64 << 10, 0).unwrap();
        // Read-only: the torn bytes are still there for the load to quarantine.
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        let mut loaded = Vec::new();
        let report = load_log_into(&home, "t", &mut |e, s| loaded.push((e, s))).unwrap();
        assert_eq!(report.torn.as_ref().unwrap().0, 6);
        let want = lines(&loaded);
        // The corrupt and blank lines count among the last 100 lines, not as events.
        assert_eq!(lines(&some.events), want[want.len() - 98..]);
        assert!(!some.from_start);
        assert_eq!(lines(&most.events), want[want.len() - 2498..]);
        assert!(!most.from_start);
        assert_eq!(lines(&all.events), want);
        assert!(all.from_start);
        // At the byte cap: fewer events, still the newest ones.
        let n = capped.events.len();
        assert!(n > 10 && n < 2500, "{n}");
        assert_eq!(lines(&capped.events), want[want.len() - n..]);
        assert!(!capped.from_start);
        // A Log that is only a torn line has no events.
        fs::write(home.log_path("u").unwrap(), "{\"torn").unwrap();
        let none = read_tail(&home, "u", 10, 1 << 20, 0).unwrap();
        assert!(none.events.is_empty() && none.from_start);
        assert!(read_tail(&home, "missing", 10, 1 << 20, 0).is_none());
        assert!(
            read_tail(&home, "t", 10, 1 << 20, text.len() as u64 + 1).is_none(),
            "short"
        );
    }

    #[test]
    fn corrupt_middle_line_is_reported_not_fatal() {
        let (_d, home) = home();
        let path = home.log_path("s2").unwrap();
        let mk = |seq: u64| {
            format!(
                r#"{{"id":"000000000000000{seq}","session_id":"s2","seq":{seq},"ts":"t","type":"x_future","data":{{}}}}"#
            )
        };
        fs::write(&path, format!("{}\nnot json\n{}\n", mk(0), mk(1))).unwrap();
        let (events, report) = load_log(&home, "s2").unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(report.corrupt_lines.len(), 1);
        assert_eq!(report.corrupt_lines[0].line, 2);
        assert!(report.seq_anomalies.is_empty());
    }
}
