//! Crash safety through the real daemon (docs/log-format.md#durability): SIGKILL at random moments while
//! several clients append with `durability = "sync"`, to one session or to several whose
//! batches sync together, loses no acknowledged event and
//! leaves a Log whose every line parses; clients of a killed daemon see the connection
//! end instead of hanging.

use agentd_tests::{Daemon, RpcConn};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

fn all_events(c: &mut RpcConn, sid: &str) -> Vec<Value> {
    let r = c.call_ok(
        "agentd/events",
        json!({"session_id": sid, "limit": 100_000}),
    );
    assert!(r.get("next_after_seq").is_none(), "more than one page");
    r["events"].as_array().cloned().unwrap_or_default()
}

/// Every acknowledged id is served with the seq it was acknowledged with, seqs are
/// 0..n-1, and the Log on disk is the same list, line by line.
fn check_acked(d: &Daemon, sid: &str, acked: &[(String, u64)]) -> usize {
    let mut c = d.connect();
    let events = all_events(&mut c, sid);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..events.len() as u64).collect::<Vec<_>>(),
        "seqs are not contiguous"
    );
    let by_id: HashMap<&str, u64> = events
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(by_id.len(), events.len(), "duplicate ids");
    for (id, seq) in acked {
        assert_eq!(
            by_id.get(id.as_str()),
            Some(seq),
            "acknowledged event {id} (seq {seq}) lost or moved"
        );
    }
    let disk = d.log_lines(sid);
    assert_eq!(disk, events, "Log file differs from served events");
    events
        .iter()
        .filter(|e| e["type"] == "log_repaired")
        .count()
}

#[test]
fn sigkill_during_sync_appends_loses_no_acknowledged_event() {
    kill_loop("sync", 20, 0x5eed_a9e7, 1);
}

/// `batch` acknowledges after the group commit, so the same guarantee holds.
#[test]
fn sigkill_during_batch_appends_loses_no_acknowledged_event() {
    kill_loop("batch", 8, 0x000b_a7c4, 1);
}

/// Several sessions appending at once have their batches made durable together
/// (one `syncfs` per group on a local filesystem): the guarantee holds for each.
#[test]
fn sigkill_during_appends_to_many_sessions_loses_no_acknowledged_event() {
    kill_loop("sync", 10, 0x0005_e551, 8);
}

/// Kills the daemon `rounds` times while appenders (at least four, one per session at
/// least) append to `sessions` sessions, and checks after each restart that every
/// acknowledged event of every session is there, with its seq.
fn kill_loop(durability: &str, rounds: usize, seed: u64, sessions: usize) {
    let appenders = sessions.max(4);
    let mut d = Daemon::builder()
        .env("AGENTD_DURABILITY", durability)
        .start();
    let sids: Vec<String> = (0..sessions).map(|_| d.create_session()).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    type Acked = Arc<Mutex<Vec<(String, u64)>>>;
    let acked: Vec<Acked> = sids.iter().map(|_| Acked::default()).collect();
    {
        let mut c = d.connect();
        for (sid, acked) in sids.iter().zip(&acked) {
            let first = all_events(&mut c, sid);
            acked
                .lock()
                .unwrap()
                .push((first[0]["id"].as_str().unwrap().to_string(), 0));
        }
    }
    let started = Instant::now();
    let mut repairs = 0;
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let acks_this_round = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..appenders)
            .map(|t| {
                let socket = d.socket().to_path_buf();
                let sid = sids[t % sessions].clone();
                let acked = acked[t % sessions].clone();
                let stop = stop.clone();
                let count = acks_this_round.clone();
                let seed: u64 = rng.gen();
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                    let Ok(mut c) = RpcConn::connect(&socket) else {
                        return;
                    };
                    c.set_call_timeout(Duration::from_secs(10));
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let n = rng.gen_range(1..=3);
                        let evs: Vec<Value> = (0..n)
                            .map(|k| {
                                let pad = "x".repeat(rng.gen_range(0..3000));
                                json!({"type": "user_message",
                                       "data": {"text": format!("r{round} t{t} i{i} k{k} {pad}")}})
                            })
                            .collect();
                        i += 1;
                        let Ok(r) =
                            c.try_call("agentd/append", json!({"session_id": sid, "events": evs}))
                        else {
                            return; // the daemon died mid-call: not acknowledged
                        };
                        let Some(res) = r.get("result") else {
                            panic!("append failed: {r}");
                        };
                        let first = res["first_seq"].as_u64().unwrap();
                        let ids = res["ids"].as_array().unwrap();
                        assert_eq!(ids.len(), n);
                        let mut a = acked.lock().unwrap();
                        for (k, id) in ids.iter().enumerate() {
                            a.push((id.as_str().unwrap().to_string(), first + k as u64));
                        }
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Let appends flow, then kill at a random moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        while acks_this_round.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "no append acknowledged");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..120)));
        d.kill9();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("appender panicked");
        }
        d.spawn();
        if let Err(e) = d.wait_ready(Duration::from_secs(10)) {
            panic!("restart {round}: {e}");
        }
        repairs = 0;
        for (sid, acked) in sids.iter().zip(&acked) {
            let a = acked.lock().unwrap().clone();
            repairs += check_acked(&d, sid, &a);
        }
    }
    let total: usize = acked.iter().map(|a| a.lock().unwrap().len()).sum();
    eprintln!(
        "{durability}, {sessions} sessions: {rounds} kills, {total} acknowledged events, {repairs} torn tails repaired, {:?}",
        started.elapsed()
    );
    assert!(
        total > rounds * appenders,
        "too few appends to mean anything"
    );
}

#[test]
fn killed_daemon_ends_client_connections_and_keeps_acked_data() {
    let mut d = Daemon::start();
    let sid = d.create_session();
    let mut writer = d.connect();
    let mut acked = Vec::new();
    for i in 0..20 {
        let r = writer.call_ok(
            "agentd/append",
            json!({"session_id": sid, "events": [{"type": "user_message", "data": {"text": format!("m{i}")}}]}),
        );
        acked.push((
            r["ids"][0].as_str().unwrap().to_string(),
            r["first_seq"].as_u64().unwrap(),
        ));
    }
    let mut sub = d.connect();
    sub.subscribe(&sid, Some(0));
    assert!(sub
        .wait_event(|e| e["seq"] == 20, Duration::from_secs(10))
        .is_some());
    let mut idle = d.connect();
    idle.call_ok("agentd/hello", json!({}));

    // agentctl log --follow, once it has printed the last event.
    let mut follow = d
        .agentctl_cmd()
        .args(["--json", "log", &sid, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agentctl log --follow");
    let (tx, rx) = mpsc::channel::<String>();
    let out = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("agentctl log --follow printed the events");
        let v: Value = serde_json::from_str(&line).expect("NDJSON line");
        if v["seq"] == 20 {
            break;
        }
    }

    d.kill9();

    let t0 = Instant::now();
    assert!(
        sub.closed_within(Duration::from_secs(5)),
        "subscriber not told"
    );
    idle.set_call_timeout(Duration::from_secs(5));
    let err = idle
        .try_call("agentd/hello", json!({}))
        .expect_err("a dead daemon answered");
    assert_ne!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    // agentctl ends with daemon_unavailable instead of hanging.
    let code = loop {
        if let Some(s) = follow.try_wait().unwrap() {
            break s.code();
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = follow.kill();
            panic!("agentctl log --follow hangs after the daemon died");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(code, Some(4), "agentctl log --follow exit code");
    reader.join().unwrap();

    d.spawn();
    d.wait_ready(Duration::from_secs(10)).unwrap();
    check_acked(&d, &sid, &acked);
}
