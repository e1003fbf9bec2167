//! `agentd/search`: full-text search over user and assistant text, tool arguments and
//! tool output of every session, newest first.
//!
//! No index: each call scans the raw bytes of the Logs with one compiled matcher
//! (`regex::bytes`, literal prefilters, SIMD via memchr), Logs in parallel on every
//! core. Only lines whose raw bytes match are parsed; the match is then confirmed on
//! the decoded text of the event's searchable fields, so a hit inside an id, a
//! timestamp or another event type is not reported. A literal query is searched in raw
//! bytes in its JSON-escaped form (`"` as `\"`, a newline as `\n`), which is exactly
//! how it is stored. A regex is matched against raw bytes first, so one that can only
//! match across a JSON escape (a quote, a newline) is not found.
//!
//! Order: sessions by last activity, newest first; within a session, by seq, newest
//! first. Sessions are scanned in waves of a few per core, stopping once `limit` hits
//! are in hand, so a common word answers after a few Logs and a rare one scans all.

use crate::registry::Registry;
use agentd_proto::rpc::{SearchHit, SearchParams, SearchResult};
use agentd_proto::{AgentError, Event, EventType};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub const MAX_QUERY_BYTES: usize = 1024;
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 1000;
/// Compiled-program bound for a regex query: a pathological pattern is refused instead
/// of eating the daemon's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
const SEARCHABLE: [&str; 4] = [
    "user_message",
    "assistant_message",
    "tool_call",
    "tool_result",
];
/// Characters of context before and after a match in a snippet.
const SNIPPET_BEFORE: usize = 60;
const SNIPPET_AFTER: usize = 100;

/// The compiled query: a raw-bytes prefilter and the decoded-text confirmer.
pub struct Matcher {
    raw: regex::bytes::Regex,
    text: regex::Regex,
}

fn refuse(msg: impl Into<String>) -> AgentError {
    AgentError::invalid_args(msg).with_details(json!({"field": "query"}))
}

impl Matcher {
    pub fn new(query: &str, is_regex: bool, case_sensitive: bool) -> Result<Matcher, AgentError> {
        if query.trim().is_empty() {
            return Err(refuse("query must not be empty"));
        }
        if query.len() > MAX_QUERY_BYTES {
            return Err(refuse(format!(
                "query is {} bytes; at most {MAX_QUERY_BYTES} are allowed",
                query.len()
            )));
        }
        let (raw_pat, text_pat) = if is_regex {
            (query.to_string(), query.to_string())
        } else {
            let escaped = serde_json::to_string(query).unwrap_or_default();
            let inner = &escaped[1..escaped.len().saturating_sub(1).max(1)];
            (regex::escape(inner), regex::escape(query))
        };
        let bad_query = |e: regex::Error| {
            refuse(format!(
                "bad query: {}",
                crate::text::clip_chars(&e.to_string(), 300)
            ))
        };
        let raw = regex::bytes::RegexBuilder::new(&raw_pat)
            .case_insensitive(!case_sensitive)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(bad_query)?;
        let text = regex::RegexBuilder::new(&text_pat)
            .case_insensitive(!case_sensitive)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(bad_query)?;
        if text.is_match("") {
            return Err(refuse(
                "query matches empty text; it would match everything",
            ));
        }
        Ok(Matcher { raw, text })
    }
}

/// One confirmed hit inside a Log (before the session's title is attached).
#[derive(Debug, Clone, PartialEq)]
pub struct LogHit {
    pub seq: u64,
    pub ts: String,
    pub kind: String,
    pub field: String,
    pub snippet: String,
    pub highlight: [usize; 2],
}

/// The searchable texts of an event: `(field, text)`.
fn fields(ev: &Event) -> Vec<(&'static str, String)> {
    let d = &ev.data;
    let s = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
    match ev.event_type() {
        EventType::UserMessage | EventType::AssistantMessage => {
            s("text").map(|t| vec![("text", t)]).unwrap_or_default()
        }
        EventType::ToolCall => {
            let mut v = Vec::new();
            if let Some(args) = d.get("args") {
                v.push(("args", args.to_string()));
            }
            v
        }
        EventType::ToolResult => {
            let mut v = Vec::new();
            if let Some(o) = s("output") {
                v.push(("output", o));
            }
            if let Some(m) = d
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
            {
                v.push(("error", m.to_string()));
            }
            v
        }
        _ => Vec::new(),
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Text around `start..end` on one line, with the match's byte range in the snippet.
pub fn snippet(text: &str, start: usize, end: usize) -> (String, [usize; 2]) {
    let from = {
        let mut i = start;
        for _ in 0..SNIPPET_BEFORE {
            if i == 0 {
                break;
            }
            i = floor_boundary(text, i - 1);
        }
        i
    };
    let to = {
        let mut i = end;
        for _ in 0..SNIPPET_AFTER {
            if i >= text.len() {
                break;
            }
            i = ceil_boundary(text, i + 1);
        }
        i
    };
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    let lead = out.len();
    out.push_str(&text[from..to]);
    if to < text.len() {
        out.push('…');
    }
    // One line: whitespace controls become spaces (same byte length, offsets hold).
    let out: String = out
        .chars()
        .map(|c| {
            if c == '\n' || c == '\r' || c == '\t' {
                ' '
            } else {
                c
            }
        })
        .collect();
    (out, [lead + (start - from), lead + (end - from)])
}

/// Confirms a raw match on the event in `line`; `None` if the decoded fields of a
/// searchable event do not match.
fn confirm(line: &[u8], m: &Matcher, types: &[String]) -> Option<LogHit> {
    let ev: Event = serde_json::from_slice(line).ok()?;
    if !types.iter().any(|t| t == &ev.kind) {
        return None;
    }
    for (field, text) in fields(&ev) {
        if let Some(found) = m.text.find(&text) {
            let (snippet, highlight) = snippet(&text, found.start(), found.end());
            return Some(LogHit {
                seq: ev.seq,
                ts: ev.ts.clone(),
                kind: ev.kind.clone(),
                field: field.to_string(),
                snippet,
                highlight,
            });
        }
    }
    None
}

/// Hits in one Log's bytes, newest (last) first, at most `max`, only with seq below
/// `before_seq` when given. Raw matching runs forward over the whole buffer, skipping
/// to the next line after each match; lines are then confirmed from the end.
pub fn scan_log(
    bytes: &[u8],
    m: &Matcher,
    types: &[String],
    before_seq: Option<u64>,
    max: usize,
) -> Vec<LogHit> {
    // Only complete lines: a torn tail is not an event.
    let end = match memchr::memrchr(b'\n', bytes) {
        Some(i) => i + 1,
        None => return Vec::new(),
    };
    let bytes = &bytes[..end];
    let mut lines: Vec<(usize, usize)> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(found) = m.raw.find_at(bytes, at) else {
            break;
        };
        let start = memchr::memrchr(b'\n', &bytes[..found.start()]).map_or(0, |i| i + 1);
        let stop = memchr::memchr(b'\n', &bytes[found.start()..])
            .map_or(bytes.len(), |i| found.start() + i);
        lines.push((start, stop));
        at = stop + 1;
    }
    let mut hits = Vec::new();
    for (start, stop) in lines.into_iter().rev() {
        if hits.len() >= max {
            break;
        }
        if let Some(hit) = confirm(&bytes[start..stop], m, types) {
            if before_seq.is_none_or(|b| hit.seq < b) {
                hits.push(hit);
            }
        }
    }
    hits
}

struct Candidate {
    sid: String,
    title: Option<String>,
    updated_at: String,
    path: PathBuf,
}

fn parse_cursor(c: &str) -> Result<(String, String, u64), AgentError> {
    let bad = || AgentError::invalid_args("bad cursor").with_details(json!({"field": "cursor"}));
    let mut parts = c.rsplitn(3, '|');
    let seq = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let sid = parts.next().ok_or_else(bad)?.to_string();
    let ts = parts.next().ok_or_else(bad)?.to_string();
    Ok((ts, sid, seq))
}

/// `agentd/search`.
pub async fn search(registry: &Arc<Registry>, p: SearchParams) -> Result<SearchResult, AgentError> {
    let matcher = Arc::new(Matcher::new(&p.query, p.regex, p.case_sensitive)?);
    let types: Vec<String> = match &p.types {
        Some(t) if !t.is_empty() => {
            for ty in t {
                if !SEARCHABLE.contains(&ty.as_str()) {
                    return Err(AgentError::invalid_args(format!(
                        "types may name only {}",
                        SEARCHABLE.join(", ")
                    ))
                    .with_details(json!({"field": "types"})));
                }
            }
            t.clone()
        }
        _ => SEARCHABLE.iter().map(|s| s.to_string()).collect(),
    };
    let limit = p.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let cursor = p.cursor.as_deref().map(parse_cursor).transpose()?;
    let workspace = p.workspace.as_ref().map(|ws| {
        std::path::Path::new(ws)
            .canonicalize()
            .map_or_else(|_| ws.clone(), |c| c.display().to_string())
    });
    // On a shared database: other daemons' sessions too.
    registry.refresh_index().await;
    let mut candidates: Vec<Candidate> = registry.with_index(|i| {
        i.values()
            .filter(|m| !m.deleted)
            .filter(|m| workspace.as_ref().is_none_or(|w| &m.workspace == w))
            .filter_map(|m| {
                Some(Candidate {
                    sid: m.session_id.clone(),
                    title: m.title.clone(),
                    updated_at: m.updated_at.clone(),
                    path: registry.home.log_path(&m.session_id).ok()?,
                })
            })
            .collect()
    });
    candidates.sort_unstable_by(|a, b| (&b.updated_at, &b.sid).cmp(&(&a.updated_at, &a.sid)));
    if let Some((ts, sid, _)) = &cursor {
        candidates.retain(|c| (&c.updated_at, &c.sid) <= (ts, sid));
    }
    let cursor_pos = cursor.map(|(_, sid, seq)| (sid, seq));
    let store = registry.store.clone();
    super::manage::blocking(move || {
        Ok(run(
            store.as_ref(),
            candidates,
            &matcher,
            &types,
            cursor_pos,
            limit,
        ))
    })
    .await
}

/// A Log's bytes as a file would hold them: from the store when it keeps them (a
/// database), else the file; `None` when it is gone (deleted meanwhile).
pub(crate) fn read_log_bytes(
    store: &dyn crate::store::LogStore,
    sid: &str,
    path: &std::path::Path,
) -> Option<Vec<u8>> {
    match store.read_log(sid) {
        Some(read) => read.ok(),
        None => std::fs::read(path).ok(),
    }
}

fn run(
    store: &dyn crate::store::LogStore,
    candidates: Vec<Candidate>,
    m: &Matcher,
    types: &[String],
    cursor: Option<(String, u64)>,
    limit: usize,
) -> SearchResult {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16);
    let wave = threads * 4;
    let mut hits: Vec<SearchHit> = Vec::new();
    let mut more = false;
    let mut scanned = 0u64;
    let mut bytes_scanned = 0u64;
    let mut last_key: Option<(String, String, u64)> = None;
    'waves: for chunk in candidates.chunks(wave) {
        let next = AtomicUsize::new(0);
        let want = limit + 1 - hits.len().min(limit);
        let results: Vec<(usize, u64, Vec<LogHit>)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.min(chunk.len()))
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(c) = chunk.get(i) else { break };
                            let Some(bytes) = read_log_bytes(store, &c.sid, &c.path) else {
                                continue; // deleted meanwhile
                            };
                            let before = cursor
                                .as_ref()
                                .filter(|(sid, _)| sid == &c.sid)
                                .map(|(_, s)| *s);
                            let found = scan_log(&bytes, m, types, before, want);
                            out.push((i, bytes.len() as u64, found));
                        }
                        out
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        });
        let mut results = results;
        results.sort_by_key(|r| r.0);
        for (i, size, found) in results {
            let c = &chunk[i];
            scanned += 1;
            bytes_scanned += size;
            for h in found {
                if hits.len() == limit {
                    more = true;
                    break 'waves;
                }
                last_key = Some((c.updated_at.clone(), c.sid.clone(), h.seq));
                hits.push(SearchHit {
                    reference: format!("{}@{}", c.sid, h.seq),
                    session_id: c.sid.clone(),
                    seq: h.seq,
                    ts: h.ts,
                    kind: h.kind,
                    field: h.field,
                    title: c.title.clone(),
                    snippet: h.snippet,
                    highlight: h.highlight,
                });
            }
        }
    }
    SearchResult {
        hits,
        next_cursor: if more {
            last_key.map(|(ts, sid, seq)| format!("{ts}|{sid}|{seq}"))
        } else {
            None
        },
        sessions_scanned: scanned,
        bytes_scanned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let ev = json!({"id": format!("{:016x}", i), "session_id": "s", "seq": i,
                "ts": "2026-11-21T10:00:00.000000Z", "type": l["type"], "data": l["data"]});
            out.extend_from_slice(ev.to_string().as_bytes());
            out.push(b'\n');
        }
        out
    }

    fn all() -> Vec<String> {
        SEARCHABLE.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_text_args_and_output_newest_first() {
        let bytes = log(&[
            json!({"type":"session_started","data":{"workspace":"/w","title":"Needle in title"}}),
            json!({"type":"user_message","data":{"text":"find the NEEDLE please"}}),
            json!({"type":"tool_call","data":{"call_id":"c1","name":"shell","args":{"command":"grep needle"}}}),
            json!({"type":"tool_result","data":{"call_id":"c1","ok":true,"output":"line 1\nneedle here\n"}}),
            json!({"type":"assistant_message","data":{"text":"no match in this one"}}),
        ]);
        let m = Matcher::new("needle", false, false).unwrap();
        let hits = scan_log(&bytes, &m, &all(), None, 10);
        let seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
        assert_eq!(seqs, [3, 2, 1], "session_started is not searchable");
        assert_eq!(hits[0].field, "output");
        assert_eq!(hits[0].snippet, "line 1 needle here ");
        let [a, b] = hits[2].highlight;
        assert_eq!(&hits[2].snippet[a..b], "NEEDLE");
        // Paging inside a session, and a type filter.
        assert_eq!(scan_log(&bytes, &m, &all(), Some(2), 10).len(), 1);
        let only = vec!["tool_call".to_string()];
        assert_eq!(scan_log(&bytes, &m, &only, None, 10)[0].seq, 2);
        // Case-sensitive.
        let m = Matcher::new("NEEDLE", false, true).unwrap();
        assert_eq!(scan_log(&bytes, &m, &all(), None, 10).len(), 1);
    }

    #[test]
    fn literal_queries_match_escaped_text_and_ids_do_not_count() {
        let bytes = log(&[json!({"type":"user_message","data":{"text":"say \"hi\"\nthen go"}})]);
        let m = Matcher::new("\"hi\"\nthen", false, false).unwrap();
        assert_eq!(scan_log(&bytes, &m, &all(), None, 10).len(), 1);
        // "0000000000000000" is the event id, not searchable text.
        let m = Matcher::new("0000000000000000", false, false).unwrap();
        assert!(scan_log(&bytes, &m, &all(), None, 10).is_empty());
    }

    #[test]
    fn bad_queries_are_refused() {
        for (q, re) in [("", false), ("   ", false), ("a(", true), (".*", true)] {
            let e = Matcher::new(q, re, false)
                .err()
                .unwrap_or_else(|| panic!("{q:?} accepted"));
            assert_eq!(e.kind, agentd_proto::ErrorKind::InvalidArgs);
        }
        assert!(Matcher::new(&"x".repeat(MAX_QUERY_BYTES + 1), false, false).is_err());
        // A regex whose compiled program is huge.
        assert!(Matcher::new("(\\w{100}){100}", true, false).is_err());
    }

    #[test]
    fn snippets_clip_on_char_boundaries() {
        let text = format!("{}needle{}", "é".repeat(100), "ü".repeat(200));
        let start = text.find("needle").unwrap();
        let (s, [a, b]) = snippet(&text, start, start + 6);
        assert_eq!(&s[a..b], "needle");
        assert!(s.starts_with('…') && s.ends_with('…'));
    }
}
