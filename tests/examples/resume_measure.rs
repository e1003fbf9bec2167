//! Time from a daemon restart to a resumed turn's next provider call (docs/performance.md,
//! "Crash resumption"), against the same run's baseline: the time from a restart to the
//! daemon's first answer (`agentd/hello`) with no turn to resume.
//!
//! Each round starts a turn whose provider call never finishes, kills the daemon with
//! SIGKILL once the call arrived, starts it again and times the resumed call's arrival
//! at the provider endpoint; then kills the idle daemon and times a plain start. The
//! store is the default (file, `durability = "sync"`), or PostgreSQL with
//! `AGENTD_TEST_STORE=postgres`.
//!
//! ```sh
//! cargo run --release -p agentd-tests --example resume_measure -- 50
//! ```

use agentd_tests::sse::{chat_partial, chat_text, MockProvider, Reply};
use agentd_tests::{Daemon, RpcConn};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// Until the daemon answers `agentd/hello`, polling every millisecond.
fn until_ready(d: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = RpcConn::connect(d.socket()) {
            c.set_call_timeout(Duration::from_secs(5));
            if c.try_call("agentd/hello", json!({}))
                .is_ok_and(|r| r.get("result").is_some())
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "daemon not ready");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let seen = Mutex::new(HashSet::new());
    // The first call of each prompt hangs (the daemon is killed during it); the
    // resumed call answers.
    let mock = MockProvider::start(move |_, body| {
        let prompt = body["messages"].to_string();
        if seen.lock().unwrap().insert(prompt) {
            Reply::Hang(chat_partial("half"))
        } else {
            Reply::Complete(chat_text("whole"))
        }
    });
    let mut d = Daemon::builder().config(&mock.config()).start();
    let mut resume_ms = Vec::new();
    let mut ready_ms = Vec::new();
    let mut calls = 0;
    for i in 0..rounds {
        let sid = d.create_session();
        let mut c = d.connect();
        c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": format!("prompt {i}"), "wait": false}),
        );
        calls += 1;
        mock.wait_requests(calls, Duration::from_secs(30));
        d.kill9();
        let t0 = Instant::now();
        d.spawn();
        calls += 1;
        mock.wait_requests(calls, Duration::from_secs(30));
        resume_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        until_ready(&d);
        // The resumed turn ends; then a restart with nothing to resume.
        let mut sub = d.connect();
        sub.subscribe(&sid, Some(0));
        sub.wait_event(|e| e["type"] == "turn_ended", Duration::from_secs(30))
            .expect("resumed turn ended");
        d.kill9();
        let t0 = Instant::now();
        d.spawn();
        until_ready(&d);
        ready_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let (r50, r99) = (
        percentile(&mut resume_ms, 0.5),
        percentile(&mut resume_ms, 0.99),
    );
    let (b50, b99) = (
        percentile(&mut ready_ms, 0.5),
        percentile(&mut ready_ms, 0.99),
    );
    // The cost of a `client_request_id` on an append: blocks of plain appends and of
    // appends with a fresh id, alternated on one session (one event each, synced).
    let sid = d.create_session();
    let mut c = d.connect();
    let (mut plain, mut keyed) = (Vec::new(), Vec::new());
    for block in 0..20 {
        for j in 0..50 {
            let mut p = json!({"session_id": sid, "events": [
                {"type": "user_message", "data": {"text": format!("note {block}-{j}")}}]});
            let with_id = block % 2 == 1;
            if with_id {
                p["client_request_id"] = json!(format!("bench-{block}-{j}"));
            }
            let t = Instant::now();
            c.call_ok("agentd/append", p);
            let us = t.elapsed().as_secs_f64() * 1e6;
            if with_id {
                keyed.push(us)
            } else {
                plain.push(us)
            }
        }
    }
    let (p50, p99) = (percentile(&mut plain, 0.5), percentile(&mut plain, 0.99));
    let (k50, k99) = (percentile(&mut keyed, 0.5), percentile(&mut keyed, 0.99));
    println!("rounds: {rounds}");
    println!("append, 1 event, synced: p50 {p50:.0} us, p99 {p99:.0} us; with client_request_id: p50 {k50:.0} us, p99 {k99:.0} us");
    println!("restart -> resumed turn's provider call: p50 {r50:.1} ms, p99 {r99:.1} ms");
    println!("restart -> first hello answered (baseline): p50 {b50:.1} ms, p99 {b99:.1} ms");
}
