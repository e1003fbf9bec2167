//! Pixir NDJSON Logs → agentd Log lines.
//!
//! The envelope is already agentd's (docs/log-format.md#the-envelope), so this importer copies: each line is
//! validated as an envelope, keeps its `type`, `data` and `ts`, and gets a new `id` and
//! the new session id. Seqs are kept when the source's run 0..n contiguously; a break
//! (gap, repeat, null) is reported in a warning and events are renumbered in file order.
//! A Pixir Log has no `session_started`, so one is synthesized at seq 0 (from the root
//! posture marker's workspace) and every source seq moves up by one; an agentd Log's own
//! `session_started` is kept and marked as imported instead.

use std::path::Path;

use agentd_proto::event::validate_draft;
use agentd_proto::{AgentError, EventDraft, EventType};
use serde_json::{json, Map, Value};

use super::lines::LineReader;
use super::sink::{Disposition, Sink};
use super::{
    emit_session_started, parse_line, read_error, str_of, Format, Header, ImportContext,
    ImportReport, Source,
};

pub(super) fn import(
    src: Source,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let path = src.path.clone();
    let mut reader = LineReader::file(src.file);
    let mut sink = Sink::new(out, &ctx.session_id);
    let mut st = State::default();
    let mut source_lines = 0;
    while let Some(line) = reader.next_line().map_err(read_error)? {
        source_lines = line.no;
        let no = line.no;
        if !st.started {
            // The first line decides whether this is a Pixir Log at all.
            let obj = match serde_json::from_slice::<Value>(line.bytes) {
                Ok(Value::Object(m)) => m,
                _ => return Err(not_pixir(&path, "line 1 is not a JSON object")),
            };
            let ev = envelope(obj).map_err(|why| not_pixir(&path, &format!("line 1: {why}")))?;
            st.start(&mut sink, &path, ctx, ev, no)?;
            continue;
        }
        let Some(obj) = parse_line(&mut sink, &line) else {
            continue;
        };
        match envelope(obj) {
            Ok(ev) => st.event(&mut sink, ev, no)?,
            Err(why) => sink.skip(no, why),
        }
    }
    if !st.started {
        return Err(not_pixir(&path, "it has no lines"));
    }
    if let Some(first) = &st.first_break {
        sink.warn(format!(
            "source seqs are not contiguous from 0 ({first}; {} break(s) in all); events were renumbered in file order",
            st.breaks
        ));
    }
    if st.with_resources > 0 {
        sink.warn(format!(
            "{} event(s) reference resources that were not copied",
            st.with_resources
        ));
    }
    sink.finish(source_lines)
}

fn not_pixir(path: &Path, why: &str) -> AgentError {
    AgentError::invalid_args(format!("{} is not a Pixir Log: {why}", path.display()))
}

/// A validated source envelope (its `id` and `session_id` are not reused).
struct SourceEvent {
    session_id: String,
    seq: Option<u64>,
    ts: Value,
    kind: String,
    data: Value,
}

fn envelope(mut m: Map<String, Value>) -> Result<SourceEvent, String> {
    for key in ["id", "session_id", "ts", "type"] {
        if !m.get(key).is_some_and(Value::is_string) {
            return Err(format!("envelope field {key} is missing or not a string"));
        }
    }
    let seq = match m.get("seq") {
        Some(Value::Number(n)) => Some(n.as_u64().ok_or("envelope seq is not a whole number")?),
        Some(Value::Null) => None,
        _ => return Err("envelope field seq is missing".into()),
    };
    let draft = EventDraft {
        kind: str_of(&m, "type").unwrap_or("").to_string(),
        data: m.remove("data").unwrap_or(Value::Null),
    };
    let ty = validate_draft(&draft)?;
    if ty.is_ephemeral() {
        return Err(format!(
            "{} is ephemeral and never belongs in a Log",
            draft.kind
        ));
    }
    Ok(SourceEvent {
        session_id: str_of(&m, "session_id").unwrap_or("").to_string(),
        seq,
        ts: m.remove("ts").unwrap_or(Value::Null),
        kind: draft.kind,
        data: draft.data,
    })
}

#[derive(Default)]
struct State {
    started: bool,
    /// The source seq the next event should carry.
    expect: u64,
    breaks: u64,
    first_break: Option<String>,
    with_resources: u64,
}

impl State {
    fn start(
        &mut self,
        sink: &mut Sink<'_>,
        path: &Path,
        ctx: &ImportContext,
        ev: SourceEvent,
        no: u64,
    ) -> Result<(), AgentError> {
        self.started = true;
        if ev.kind == EventType::SessionStarted.as_str() {
            // An agentd Log: keep its session_started, marked as imported.
            let mut data = ev.data;
            if let Some(w) = &ctx.workspace {
                data["workspace"] = json!(w);
            }
            if !data
                .get("workspace")
                .and_then(Value::as_str)
                .is_some_and(|w| Path::new(w).is_absolute())
            {
                return Err(AgentError::invalid_args(
                    "the Log's session_started has no absolute workspace; pass --workspace",
                ));
            }
            data["created_by"] = json!("import");
            data["imported_from"] = json!({
                "format": Format::Pixir.as_str(),
                "session_id": ev.session_id,
                "path": path.to_string_lossy(),
            });
            self.check_seq(ev.seq, no);
            sink.count(ev.kind.clone());
            sink.emit(&ev.kind, data, Some(&ev.ts))?;
            sink.account(Disposition::Imported);
            return Ok(());
        }
        let posture_ws = (ev.kind == "subagent_event"
            && ev.data.get("event").and_then(Value::as_str) == Some("permission_posture"))
        .then(|| ev.data.get("workspace").and_then(Value::as_str))
        .flatten()
        .map(str::to_string);
        let h = Header {
            source_session_id: Some(ev.session_id.clone()),
            cwd: posture_ws,
            ts: Some(ev.ts.clone()),
            ..Header::default()
        };
        emit_session_started(sink, Format::Pixir, path, ctx, &h)?;
        sink.warn(
            "the source has no session_started; one was synthesized at seq 0 and every source seq moved up by 1",
        );
        self.event(sink, ev, no)
    }

    fn check_seq(&mut self, seq: Option<u64>, no: u64) {
        if seq != Some(self.expect) {
            self.breaks += 1;
            if self.first_break.is_none() {
                let found = seq.map_or("null".to_string(), |s| s.to_string());
                self.first_break = Some(format!(
                    "first at line {no}: expected seq {}, found {found}",
                    self.expect
                ));
            }
        }
        // After a break, count the next break relative to what the source says, so one
        // gap is one break rather than every later line.
        // Saturating: a source seq of `u64::MAX` is a break like any other, not an overflow.
        self.expect = seq.unwrap_or(self.expect).saturating_add(1);
    }

    fn event(&mut self, sink: &mut Sink<'_>, ev: SourceEvent, no: u64) -> Result<(), AgentError> {
        sink.count(ev.kind.clone());
        if ev.kind == EventType::SessionStarted.as_str() {
            sink.skip(no, "a second session_started");
            self.check_seq(ev.seq, no);
            return Ok(());
        }
        self.check_seq(ev.seq, no);
        let mut data = ev.data;
        match EventType::parse(&ev.kind) {
            EventType::ToolResult => {
                if let Some(out) = data.get("output").and_then(Value::as_str) {
                    let capped = sink.cap(out.to_string());
                    data["output"] = json!(capped);
                }
            }
            EventType::UserMessage
                if data
                    .get("resources")
                    .and_then(Value::as_array)
                    .is_some_and(|r| !r.is_empty()) =>
            {
                self.with_resources += 1;
            }
            _ => {}
        }
        sink.emit(&ev.kind, data, Some(&ev.ts))?;
        sink.account(Disposition::Imported);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{import, Format, ImportContext};

    fn line(seq: u64, kind: &str, data: &str) -> String {
        format!(
            "{{\"id\":\"00112233445566ff\",\"session_id\":\"px\",\"seq\":{seq},\
             \"ts\":\"2026-05-29T12:00:00.000000Z\",\"type\":\"{kind}\",\"data\":{data}}}\n"
        )
    }

    #[test]
    fn a_seq_at_u64_max_is_a_break_not_an_overflow() {
        // The seq expected after `u64::MAX` was `u64::MAX + 1`: a panic in debug builds.
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("p.ndjson");
        let text = [
            line(0, "user_message", r#"{"text":"hi"}"#),
            line(u64::MAX, "assistant_message", r#"{"text":"a"}"#),
            line(2, "user_message", r#"{"text":"b"}"#),
            line(3, "assistant_message", r#"{"text":"c"}"#),
        ]
        .concat();
        std::fs::write(&src, text).unwrap();
        let ctx = ImportContext {
            session_id: "20261121T101500-abc123".into(),
            workspace: Some("/w".into()),
            agentd_version: "test".into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        let report = import(Some(Format::Pixir), &src, &mut out, &ctx).unwrap();
        assert_eq!(report.imported, 5, "session_started and the four lines");
        let w = report
            .warnings
            .iter()
            .find(|w| w.contains("renumbered"))
            .expect("a renumber warning");
        assert!(
            w.contains("line 2: expected seq 1, found 18446744073709551615"),
            "{w}"
        );
        assert!(w.contains("2 break(s)"), "{w}");
    }
}
