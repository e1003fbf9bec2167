//! Storage faults through the store's fault seam (`AGENTD_FAULTS`, see
//! `crates/agentd-store/src/fault.rs`) on a real daemon, real files and real fsync:
//! - a failed `fdatasync` (EIO) fails its batch's appends, is never retried and then
//!   acknowledged, stops the writer, and the session verifies its Log before the next
//!   append is accepted;
//! - `ENOSPC` and a short write fail only their batch (`disk_full`), leaving no partial
//!   line;
//! - a fsync that keeps failing keeps appends refused while reads go on serving;
//! - a read error loading one Log leaves every other session serving;
//! - a parse thread that panics loading a Log fails that load (`internal`,
//!   `parse_panicked`) instead of loading the session without that part's events;
//! - a failed sync among sessions syncing together fails only its own session's batch.

use agentd_tests::{read_log_lines, Daemon, RpcConn};
use serde_json::{json, Value};

const A: &str = "20261123T010000-fa0001";
const B: &str = "20261123T010000-fa0002";

fn daemon(faults: &str) -> Daemon {
    Daemon::builder().env("AGENTD_FAULTS", faults).start()
}

fn create(d: &Daemon, c: &mut RpcConn, sid: &str) {
    c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "session_id": sid}),
    );
}

fn append(c: &mut RpcConn, sid: &str, text: &str) -> Value {
    c.call(
        "agentd/append",
        json!({"session_id": sid, "events": [
            {"type": "user_message", "data": {"text": text}},
            {"type": "assistant_message", "data": {"text": format!("{text}!")}}]}),
    )
}

fn kind(r: &Value) -> &str {
    r.pointer("/error/data/kind")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("expected an error: {r}"))
}

fn texts(d: &Daemon, sid: &str) -> Vec<String> {
    let lines = read_log_lines(&d.log_path(sid));
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["seq"].as_u64(), Some(i as u64), "seqs not contiguous");
    }
    lines
        .iter()
        .filter_map(|l| l.pointer("/data/text").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

#[test]
fn failed_fdatasync_fails_the_batch_stops_the_writer_and_recovers_verified() {
    // Session A's Log: fsync #1 is `one`, #2 is `two` (fails), #3 is `three`.
    let d = daemon(&format!("fsync:eio:2@{A}"));
    let mut c = d.connect();
    create(&d, &mut c, A);
    let one = append(&mut c, A, "one");
    assert_eq!(one["result"]["first_seq"], 1, "{one}");
    let two = append(&mut c, A, "two");
    assert_eq!(kind(&two), "io_error", "{two}");
    assert_eq!(
        two["error"]["data"]["details"]["writer_stopped"], true,
        "{two}"
    );
    assert!(two["error"]["data"]["details"]["next_actions"].is_array());
    // The failed batch never appears, not even after the next append succeeds: its
    // seqs are reused by the next acknowledged batch.
    let three = append(&mut c, A, "three");
    assert_eq!(three["result"]["first_seq"], 3, "{three}");
    let shown = c.call_ok("agentd/show", json!({"session_id": A}));
    assert_eq!(shown["last_seq"], 4);
    assert_eq!(texts(&d, A), ["one", "one!", "three", "three!"]);
    let log = d.daemon_output();
    assert!(log.contains("Log verified after a failed write"), "{log}");
}

#[test]
fn fsync_that_keeps_failing_keeps_appends_refused_and_reads_serving() {
    // Every fsync of A's Log from the second on fails (the recovery's sync too).
    let d = daemon(&format!("fsync:eio:2:1000000@{A}"));
    let mut c = d.connect();
    create(&d, &mut c, A);
    create(&d, &mut c, B);
    assert!(append(&mut c, A, "one").get("result").is_some());
    for i in 0..5 {
        let r = append(&mut c, A, &format!("refused {i}"));
        assert_eq!(kind(&r), "io_error", "{r}");
    }
    // Reads of A and everything about B still work.
    let shown = c.call_ok("agentd/show", json!({"session_id": A}));
    assert_eq!(shown["last_seq"], 2);
    c.call_ok("agentd/events", json!({"session_id": A}));
    assert!(append(&mut c, B, "b").get("result").is_some());
    assert_eq!(texts(&d, A), ["one", "one!"]);
}

/// Sessions appending at the same time share syncs; a failed sync of one session's
/// Log fails that batch alone: the other sessions' appends are all acknowledged and
/// on disk in order, and the failing session recovers as it does alone.
#[test]
fn a_failed_sync_among_concurrent_sessions_fails_only_that_sessions_batch() {
    let d = daemon(&format!("fsync:eio:3@{A}"));
    let others: Vec<String> = (0..7)
        .map(|i| format!("20261123T010000-fa01{i:02}"))
        .collect();
    let mut c = d.connect();
    create(&d, &mut c, A);
    for sid in &others {
        create(&d, &mut c, sid);
    }
    let start = std::sync::Arc::new(std::sync::Barrier::new(others.len() + 1));
    let threads: Vec<_> = std::iter::once(A.to_string())
        .chain(others.iter().cloned())
        .map(|sid| {
            let mut c = d.connect();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut acked = Vec::new();
                let mut failed = Vec::new();
                for i in 0..20 {
                    let text = format!("{sid} {i}");
                    let r = append(&mut c, &sid, &text);
                    if r.get("result").is_some() {
                        acked.push(text.clone());
                        acked.push(format!("{text}!"));
                    } else {
                        assert_eq!(kind(&r), "io_error", "{r}");
                        assert_eq!(r["error"]["data"]["details"]["writer_stopped"], true);
                        failed.push(i);
                    }
                }
                (sid, acked, failed)
            })
        })
        .collect();
    for t in threads {
        let (sid, acked, failed) = t.join().unwrap();
        let want_failed: &[usize] = if sid == A { &[2] } else { &[] };
        assert_eq!(failed, want_failed, "{sid}");
        assert_eq!(texts(&d, &sid), acked, "{sid}");
    }
}

#[test]
fn enospc_and_short_writes_fail_only_their_batch() {
    let d = daemon(&format!("write:enospc:2@{A},write:short:4@{A}"));
    let mut c = d.connect();
    create(&d, &mut c, A);
    let mut ok = Vec::new();
    for i in 1..=5 {
        let r = append(&mut c, A, &format!("w{i}"));
        match i {
            2 | 4 => assert_eq!(kind(&r), "disk_full", "write {i}: {r}"),
            _ => {
                assert!(r.get("result").is_some(), "write {i}: {r}");
                ok.push(format!("w{i}"));
                ok.push(format!("w{i}!"));
            }
        }
    }
    assert_eq!(texts(&d, A), ok);
}

#[test]
fn read_error_loading_one_log_leaves_others_serving() {
    let mut d = Daemon::start();
    let mut c = d.connect();
    create(&d, &mut c, A);
    create(&d, &mut c, B);
    append(&mut c, A, "a");
    append(&mut c, B, "b");
    drop(c);
    // A new daemon whose first read of A's Log fails with EIO.
    d.kill9();
    let mut d2 = Daemon::builder()
        .env("AGENTD_FAULTS", format!("read:eio:1@{A}"))
        .build();
    // Same home and socket: start the faulty daemon on the first one's files.
    std::fs::remove_dir_all(d2.home()).ok();
    copy_dir(d.home(), d2.home());
    d2.spawn();
    d2.wait_ready(std::time::Duration::from_secs(30)).unwrap();
    let mut c = d2.connect();
    let r = c.call("agentd/show", json!({"session_id": A}));
    assert_eq!(kind(&r), "io_error", "{r}");
    // B serves reads and writes meanwhile.
    c.call_ok("agentd/show", json!({"session_id": B}));
    assert!(append(&mut c, B, "b2").get("result").is_some());
    // The fault was transient: A loads on the next call, intact.
    let shown = c.call_ok("agentd/show", json!({"session_id": A}));
    assert_eq!(shown["last_seq"], 2);
    assert!(append(&mut c, A, "a2").get("result").is_some());
}

#[test]
fn a_parse_thread_that_panics_fails_the_load_and_loses_no_event() {
    let mut d = Daemon::start();
    let mut c = d.connect();
    create(&d, &mut c, A);
    create(&d, &mut c, B);
    // Over 1 MiB, so a load parses A's Log in two parts on two threads: the rule below
    // makes the second part's thread panic while the first one's events are fine.
    let big = "x".repeat(700 << 10);
    for text in ["first", big.as_str(), "last"] {
        assert!(append(&mut c, A, text).get("result").is_some());
    }
    append(&mut c, B, "b");
    drop(c);
    let want = texts(&d, A);
    let lines = read_log_lines(&d.log_path(A)).len();
    let before = std::fs::read(d.log_path(A)).unwrap();
    d.kill9();
    let mut d2 = Daemon::builder()
        .env("AGENTD_FAULTS", format!("parse:panic:2@{A}"))
        .build();
    std::fs::remove_dir_all(d2.home()).ok();
    copy_dir(d.home(), d2.home());
    d2.spawn();
    d2.wait_ready(std::time::Duration::from_secs(30)).unwrap();
    let mut c = d2.connect();
    let r = c.call("agentd/show", json!({"session_id": A}));
    assert_eq!(kind(&r), "internal", "{r}");
    assert_eq!(
        r.pointer("/error/data/details/reason"),
        Some(&json!("parse_panicked")),
        "{r}"
    );
    assert_eq!(
        r.pointer("/error/data/details/session_id"),
        Some(&json!(A)),
        "{r}"
    );
    // Nothing was cut or rewritten, and B serves meanwhile.
    assert_eq!(std::fs::read(d2.log_path(A)).unwrap(), before);
    c.call_ok("agentd/show", json!({"session_id": B}));
    assert!(append(&mut c, B, "b2").get("result").is_some());
    // The next load has every event, and A takes appends after them.
    let shown = c.call_ok("agentd/show", json!({"session_id": A}));
    assert_eq!(shown["last_seq"], json!(lines - 1), "{shown}");
    assert_eq!(shown["event_count"], json!(lines), "{shown}");
    assert!(append(&mut c, A, "again").get("result").is_some());
    let mut now = want.clone();
    now.extend(["again".to_string(), "again!".to_string()]);
    assert_eq!(texts(&d2, A), now);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            copy_dir(&e.path(), &t);
        } else if ft.is_file() && e.file_name() != "agentd.lock" {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}
