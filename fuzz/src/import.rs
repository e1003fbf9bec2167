//! `import_*`: bytes as another agent's session file, imported by agentd's importer for
//! that format (`import_auto`: the format detected from the content). The result is an
//! error or a Log whose seqs run from 0, that opens with `session_started`, ends on a
//! newline, counts what the report says (events, bytes, and line buckets that add up to
//! the source's lines), and replays balanced.

use crate::{check_replay, scratch, SID};
use agentd::import::{self, Format, ImportContext};
use agentd_proto::{Event, EventType};

/// `format` `None` detects the format from the content, as `--format auto` does.
pub fn run(format: Option<Format>, data: &[u8]) {
    let dir = scratch().join("import");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("src.{}", format.map_or("auto", Format::as_str)));
    std::fs::write(&src, data).unwrap();
    let ctx = ImportContext {
        session_id: SID.to_string(),
        workspace: Some("/w".into()),
        agentd_version: "fuzz".into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    let Ok(report) = import::import(format, &src, &mut out, &ctx) else {
        return;
    };
    let mut events = Vec::new();
    for (i, line) in out.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let ev: Event = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("imported line {i} is not an event: {e}"));
        assert_eq!(ev.seq, i as u64, "imported seqs are not contiguous from 0");
        assert_eq!(ev.session_id, SID);
        events.push(ev);
    }
    assert!(out.is_empty() || out.ends_with(b"\n"), "torn imported Log");
    if let Some(first) = events.first() {
        assert_eq!(
            first.event_type(),
            EventType::SessionStarted,
            "an imported Log must open with session_started"
        );
    }
    assert_eq!(report.imported as usize, events.len(), "report count");
    if let Some(f) = format {
        assert_eq!(report.format, Some(f), "report names another format");
    }
    assert!(report.skipped_total as usize >= report.skipped.len());
    let t = &report.lines;
    assert_eq!(
        t.imported + t.metadata + t.ui_only + t.skipped,
        report.source_lines,
        "line buckets {t:?} do not add up to the source's lines"
    );
    check_replay(&events, "imported Log");
}
