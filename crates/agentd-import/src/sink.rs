//! The writing half of every importer: stamps envelopes and keeps the per-line ledger.
//!
//! Importers decide *what* a source line means; `Sink` decides how it becomes Log lines
//! (new ids, the new session id, contiguous seqs, normalized `ts`, capped tool output) and
//! records how each source line was accounted for, so the three formats cannot drift
//! apart on those rules.

use std::io::{BufWriter, Write};

use agentd_proto::event::{format_ts, new_event_id, now_ts, validate_draft};
use agentd_proto::{AgentError, Event, EventDraft};
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::{ImportReport, SkippedLine};
use agentd_base::text::{cap_output, TOOL_OUTPUT_CAP};

/// At most this many skipped lines are listed; the rest are only counted.
pub const MAX_SKIPPED_LISTED: usize = 10_000;

/// How one source line was accounted for (see `ImportReport::lines`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Produced at least one event.
    Imported,
    /// Read for context only (headers, turn settings); no event and nothing lost.
    Metadata,
    /// A UI-only record (codex `event_msg`), counted by kind.
    UiOnly,
}

pub struct Sink<'w> {
    out: BufWriter<&'w mut dyn Write>,
    session_id: String,
    next_seq: u64,
    last_ts: Option<String>,
    pub report: ImportReport,
    capped_outputs: u64,
    bad_ts: u64,
    /// Tool calls written without a result yet, in the order written. A call still open
    /// at the end is a warning: the source holds no result for it, and agentd's
    /// reconcile will record it as interrupted.
    open_calls: Vec<String>,
}

impl<'w> Sink<'w> {
    pub fn new(out: &'w mut dyn Write, session_id: &str) -> Self {
        Sink {
            out: BufWriter::with_capacity(256 * 1024, out),
            session_id: session_id.to_string(),
            next_seq: 0,
            last_ts: None,
            report: ImportReport::default(),
            capped_outputs: 0,
            bad_ts: 0,
            open_calls: Vec::new(),
        }
    }

    /// Writes one event. `ts` is the source's timestamp (any RFC 3339 string or Unix ms);
    /// without one, or when it does not parse, the previous event's `ts` is reused so
    /// that time never jumps to "now" in the middle of an old conversation.
    pub fn emit(&mut self, kind: &str, data: Value, ts: Option<&Value>) -> Result<u64, AgentError> {
        let draft = EventDraft {
            kind: kind.to_string(),
            data,
        };
        // Every importer builds data from typed pieces; a failure here is our bug, and
        // writing an event `agentd/append` would refuse must not happen silently.
        validate_draft(&draft)
            .map_err(|e| AgentError::internal(format!("import produced an invalid event: {e}")))?;
        let ts = match ts.map(normalize_ts) {
            Some(Some(t)) => t,
            other => {
                if other.is_some() {
                    self.bad_ts += 1;
                }
                self.last_ts.clone().unwrap_or_else(now_ts)
            }
        };
        match draft.kind.as_str() {
            "tool_call" => {
                if let Some(id) = draft.data.get("call_id").and_then(Value::as_str) {
                    self.open_calls.push(id.to_string());
                }
            }
            "tool_result" => {
                if let Some(id) = draft.data.get("call_id").and_then(Value::as_str) {
                    if let Some(i) = self.open_calls.iter().rposition(|c| c == id) {
                        self.open_calls.remove(i);
                    }
                }
            }
            _ => {}
        }
        let seq = self.next_seq;
        let event = Event {
            id: new_event_id(),
            session_id: self.session_id.clone(),
            seq,
            ts: ts.clone(),
            kind: draft.kind,
            data: draft.data,
        };
        serde_json::to_writer(&mut self.out, &event)
            .map_err(|e| write_failed(std::io::Error::from(e)))?;
        self.out.write_all(b"\n").map_err(write_failed)?;
        self.last_ts = Some(ts);
        self.next_seq += 1;
        self.report.imported += 1;
        Ok(seq)
    }

    /// Tool output as stored: cut at 16 KiB with the shared marker.
    pub fn cap(&mut self, s: String) -> String {
        match cap_output(&s, TOOL_OUTPUT_CAP) {
            Some(cut) => {
                self.capped_outputs += 1;
                cut
            }
            None => s,
        }
    }

    pub fn skip(&mut self, line: u64, reason: impl Into<String>) {
        self.report.skipped_total += 1;
        if self.report.skipped.len() < MAX_SKIPPED_LISTED {
            self.report.skipped.push(SkippedLine {
                line,
                reason: reason.into(),
            });
        }
    }

    /// The events written so far: taken before a source line is handled, for
    /// [`Sink::account_if_imported`].
    pub fn written(&self) -> u64 {
        self.report.imported
    }

    /// Accounts the line being handled as imported when it wrote an event since `before`
    /// ([`Sink::written`]); whether it did.
    pub fn account_if_imported(&mut self, before: u64) -> bool {
        let wrote = self.report.imported > before;
        if wrote {
            self.account(Disposition::Imported);
        }
        wrote
    }

    /// Warns that `n` images of the source were left out (each has a placeholder in its
    /// text); nothing when there were none.
    pub fn warn_images(&mut self, n: u64) {
        if n > 0 {
            self.warn(format!(
                "{n} image(s) were not imported; a placeholder names each"
            ));
        }
    }

    pub fn account(&mut self, d: Disposition) {
        let t = &mut self.report.lines;
        match d {
            Disposition::Imported => t.imported += 1,
            Disposition::Metadata => t.metadata += 1,
            Disposition::UiOnly => t.ui_only += 1,
        }
    }

    pub fn count(&mut self, kind: impl Into<String>) {
        *self.report.counts.entry(kind.into()).or_insert(0) += 1;
    }

    pub fn warn(&mut self, w: impl Into<String>) {
        self.report.warnings.push(w.into());
    }

    /// Flushes and returns the report with aggregate warnings added and the number of
    /// lines (or records) the source had.
    pub fn finish(mut self, source_lines: u64) -> Result<ImportReport, AgentError> {
        self.out.flush().map_err(write_failed)?;
        let mut r = self.report;
        r.source_lines = source_lines;
        if self.capped_outputs > 0 {
            r.warnings.push(format!(
                "{} tool output(s) longer than {TOOL_OUTPUT_CAP} bytes were cut",
                self.capped_outputs
            ));
        }
        if !self.open_calls.is_empty() {
            let shown: Vec<&str> = self.open_calls.iter().take(5).map(String::as_str).collect();
            r.warnings.push(format!(
                "{} tool call(s) have no result in the source ({}{}); agentd records each as interrupted",
                self.open_calls.len(),
                shown.join(", "),
                if self.open_calls.len() > 5 { ", …" } else { "" }
            ));
        }
        if self.bad_ts > 0 {
            r.warnings.push(format!(
                "{} source timestamp(s) did not parse; the previous event's ts was used",
                self.bad_ts
            ));
        }
        if r.skipped_total > r.skipped.len() as u64 {
            r.warnings.push(format!(
                "{} skipped lines; only the first {MAX_SKIPPED_LISTED} are listed",
                r.skipped_total
            ));
        }
        r.lines.skipped = r.skipped_total;
        // pi tree files list off-branch entries after the pass that found the branch.
        r.skipped.sort_by_key(|s| s.line);
        Ok(r)
    }
}

fn write_failed(e: std::io::Error) -> AgentError {
    AgentError::storage("writing the imported Log", &e)
}

/// RFC 3339 (any offset, any precision) or Unix milliseconds → agentd's `ts` form.
pub fn normalize_ts(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => OffsetDateTime::parse(s, &Rfc3339).ok().map(format_ts),
        Value::Number(n) => {
            let ms = n.as_i64()?;
            let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
            Some(format_ts(t))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_proto::ErrorKind;
    use serde_json::json;

    #[test]
    fn timestamps_normalize_to_utc_microseconds() {
        assert_eq!(
            normalize_ts(&json!("2025-11-20T23:33:01.550Z")).unwrap(),
            "2025-11-20T23:33:01.550000Z"
        );
        assert_eq!(
            normalize_ts(&json!("2025-11-21T01:00:00+02:00")).unwrap(),
            "2025-11-20T23:00:00.000000Z"
        );
        assert_eq!(
            normalize_ts(&json!(1763681581544_i64)).unwrap(),
            "2025-11-20T23:33:01.544000Z"
        );
        assert!(normalize_ts(&json!("yesterday")).is_none());
    }

    #[test]
    fn emit_numbers_seqs_and_reuses_previous_ts() {
        let mut buf = Vec::new();
        let mut sink = Sink::new(&mut buf, "s1");
        sink.emit(
            "user_message",
            json!({"text": "hi"}),
            Some(&json!("2025-01-01T00:00:00Z")),
        )
        .unwrap();
        sink.emit(
            "assistant_message",
            json!({"text": "yo"}),
            Some(&json!(7.5)),
        )
        .unwrap();
        let r = sink.finish(0).unwrap();
        assert_eq!(r.imported, 2);
        assert!(r.warnings.iter().any(|w| w.contains("did not parse")));
        let lines: Vec<Event> = String::from_utf8(buf)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0].seq, 0);
        assert_eq!(lines[1].seq, 1);
        assert_eq!(lines[1].ts, "2025-01-01T00:00:00.000000Z");
        assert_eq!(lines[1].session_id, "s1");
    }

    #[test]
    fn emit_refuses_an_invalid_event() {
        let mut buf = Vec::new();
        let mut sink = Sink::new(&mut buf, "s1");
        let e = sink
            .emit(
                "tool_call",
                json!({"call_id": "c", "name": "x", "args": 1}),
                None,
            )
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal);
    }
}
