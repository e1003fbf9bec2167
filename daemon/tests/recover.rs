//! `store::recover_writer`: what a session runs before accepting appends again after
//! its writer stopped on a failed fdatasync.

use agentd::store::{self, Home, LogWriter};
use agentd_proto::{ErrorKind, Event};
use std::io::Write;

const SID: &str = "20261123T010000-ec0001";

fn ev(seq: u64) -> Event {
    Event {
        id: format!("{seq:016x}"),
        session_id: SID.into(),
        seq,
        ts: "2026-11-23T01:00:00.000000Z".into(),
        kind: "user_message".into(),
        data: serde_json::json!({"text": format!("e{seq}")}),
    }
}

fn setup() -> (tempfile::TempDir, Home, u64) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::open(dir.path()).unwrap();
    let path = home.log_path(SID).unwrap();
    store::create_atomic(&path, |f| f.write_all(&store::event_line(&ev(0)))).unwrap();
    let mut w = LogWriter::open(&path).unwrap();
    w.write_batch(&store::event_line(&ev(1)), true).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    (dir, home, len)
}

#[test]
fn unacknowledged_bytes_are_quarantined_and_cut() {
    let (_d, home, acked) = setup();
    let path = home.log_path(SID).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"{\"half a batch").unwrap();
    let mut w = store::recover_writer(&home, SID, acked, Some(&ev(1))).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), acked);
    let q: Vec<_> = std::fs::read_dir(home.quarantine_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(q.len(), 1);
    assert!(q[0].to_string_lossy().ends_with(".unacked"));
    assert_eq!(std::fs::read(&q[0]).unwrap(), b"{\"half a batch");
    // The new writer appends right after the acknowledged tail.
    w.append(&store::event_line(&ev(2)), true).unwrap();
    let (events, report) = store::load_log(&home, SID).unwrap();
    assert_eq!(events.len(), 3);
    assert!(report.corrupt_lines.is_empty() && report.torn.is_none());
}

#[test]
fn a_log_that_lost_acknowledged_bytes_or_changed_its_tail_is_refused() {
    let (_d, home, acked) = setup();
    let e = store::recover_writer(&home, SID, acked + 10, Some(&ev(1)))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::CorruptLog);
    let e = store::recover_writer(&home, SID, acked, Some(&ev(7)))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::CorruptLog);
    // The file was left as it was.
    assert_eq!(
        std::fs::metadata(home.log_path(SID).unwrap())
            .unwrap()
            .len(),
        acked
    );
    assert!(store::recover_writer(&home, SID, acked, Some(&ev(1))).is_ok());
}
