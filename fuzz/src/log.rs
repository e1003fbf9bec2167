//! `log`: bytes as a session's Log file. Loading never panics; a torn tail is cut and
//! quarantined byte-exactly; a second load repairs nothing and finds the same events;
//! the loaded events replay balanced. Every line the one-pass parse of agentd's own
//! form takes (`agentd::history::canonical`) is the event serde_json reads from it and
//! exactly that event's serialization.

use crate::{check_replay, scratch, SID};
use agentd::store::{self, Home};

pub fn run(data: &[u8]) {
    let root = scratch().join("log-home");
    let home = Home::open(&root).expect("home");
    let path = home.log_path(SID).unwrap();
    std::fs::write(&path, data).unwrap();
    let _ = std::fs::remove_dir_all(home.quarantine_dir());
    std::fs::create_dir_all(home.quarantine_dir()).unwrap();
    let Ok((events, report)) = store::load_log(&home, SID) else {
        return;
    };
    let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(
        on_disk,
        &data[..complete],
        "the Log after load is not the input up to its last newline"
    );
    match &report.torn {
        Some((n, q)) => {
            assert_eq!(*n as usize, data.len() - complete, "torn byte count");
            assert_eq!(
                std::fs::read(q).unwrap(),
                &data[complete..],
                "quarantined bytes differ from the torn tail"
            );
        }
        None => assert_eq!(complete, data.len(), "a torn tail was not reported"),
    }
    let (again, report2) = store::load_log(&home, SID).expect("second load");
    assert!(report2.torn.is_none(), "second load found a torn tail");
    assert_eq!(again.len(), events.len(), "second load differs");
    assert_eq!(report2.corrupt_lines.len(), report.corrupt_lines.len());
    check_replay(&events, "loaded Log");
    for line in data.split(|b| *b == b'\n') {
        let Some(fast) = std::str::from_utf8(line)
            .ok()
            .and_then(agentd::history::canonical::parse)
        else {
            continue;
        };
        let slow: agentd_proto::Event =
            serde_json::from_slice(line).expect("serde_json reads a line the fast parse took");
        assert_eq!(
            fast, slow,
            "the fast parse and serde_json read different events"
        );
        assert_eq!(
            serde_json::to_vec(&slow).unwrap(),
            line,
            "the fast parse took a line that is not the event's serialization"
        );
    }
}
