//! Soak: for `SOAK_SECONDS` (default 60; `SOAK_SECONDS=1800` is the long run), 64
//! appending clients (`SOAK_CLIENTS`), turns with the `script` provider, subscribers
//! that come and go, forks, compactions and idle evictions run against one real daemon,
//! which is killed (SIGKILL) and restarted halfway. At the end every acknowledged event
//! is in its Log exactly once at its acknowledged seq, seqs are contiguous, every
//! session loads with no corrupt line, every replay is balanced, and the daemon's RSS
//! stayed under a bound.

use agentd_tests::{Daemon, RpcConn};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Peak RSS bound for the daemon over the run.
const RSS_BOUND_KIB: u64 = 1024 * 1024;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Restart coordination: clients that lose the daemon wait here for the next one.
struct Epoch {
    n: Mutex<u64>,
    cv: Condvar,
}

impl Epoch {
    fn current(&self) -> u64 {
        *self.n.lock().unwrap()
    }
    fn bump(&self) {
        *self.n.lock().unwrap() += 1;
        self.cv.notify_all();
    }
    /// Waits until the daemon generation moves past `seen` (bounded).
    fn wait_past(&self, seen: u64) {
        let g = self.n.lock().unwrap();
        let (g, t) = self
            .cv
            .wait_timeout_while(g, Duration::from_secs(60), |n| *n <= seen)
            .unwrap();
        assert!(
            !t.timed_out() || *g > seen,
            "lost the daemon outside of the planned restart"
        );
    }
}

struct Shared {
    socket: PathBuf,
    stop: AtomicBool,
    epoch: Epoch,
    /// Restart in progress: clients treat connection errors as expected.
    restarting: AtomicBool,
}

impl Shared {
    /// Connects to the current daemon, waiting through a restart.
    fn connect(&self) -> RpcConn {
        loop {
            let seen = self.epoch.current();
            match RpcConn::connect(&self.socket) {
                Ok(mut c) => {
                    c.set_call_timeout(Duration::from_secs(60));
                    return c;
                }
                Err(e) => {
                    assert!(
                        self.restarting.load(Ordering::SeqCst),
                        "connect failed outside the restart: {e}"
                    );
                    self.epoch.wait_past(seen);
                }
            }
        }
    }

    /// A call that survives the restart: `None` if the daemon went away mid-call (the
    /// outcome is then unknown and the call is not counted as acknowledged).
    fn call(&self, c: &mut RpcConn, method: &str, params: Value) -> Option<Value> {
        let seen = self.epoch.current();
        match c.try_call(method, params) {
            Ok(v) => Some(v),
            Err(e) => {
                assert!(
                    self.restarting.load(Ordering::SeqCst) || self.epoch.current() > seen,
                    "{method}: connection lost outside the restart: {e}"
                );
                *c = self.connect();
                None
            }
        }
    }
}

#[derive(Default)]
struct Counts {
    appends_acked: AtomicU64,
    events_acked: AtomicU64,
    appends_unknown: AtomicU64,
    turns: AtomicU64,
    forks: AtomicU64,
    compactions: AtomicU64,
    subscriptions: AtomicU64,
    events_streamed: AtomicU64,
}

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn script(dir: &Path) -> PathBuf {
    let p = dir.join("soak-script.json");
    std::fs::write(
        &p,
        serde_json::to_vec(&json!({"rules": [{"steps": [
            {"text": "looking", "tool_calls": [{"name": "list_dir", "args": {"path": "."}},
                                               {"name": "read_file", "args": {"path": "notes.txt"}}]},
            {"text": "done"}
        ]}]}))
        .unwrap(),
    )
    .unwrap();
    p
}

#[test]
fn soak() {
    let seconds = env_u64("SOAK_SECONDS", 60);
    let clients = env_u64("SOAK_CLIENTS", 64) as usize;
    let mut d = Daemon::builder().config("idle_evict_s = 1\n").start();
    std::fs::write(d.workspace().join("notes.txt"), "soak\n").unwrap();
    let script = script(d.root());
    let shared = Arc::new(Shared {
        socket: d.socket().to_path_buf(),
        stop: AtomicBool::new(false),
        epoch: Epoch {
            n: Mutex::new(0),
            cv: Condvar::new(),
        },
        restarting: AtomicBool::new(false),
    });
    let counts = Arc::new(Counts::default());
    // 16 sessions shared by the appending clients, 4 for turns, 8 left idle (evicted).
    let append_sessions: Vec<String> = (0..16).map(|_| d.create_session()).collect();
    let turn_sessions: Vec<String> = (0..4).map(|_| d.create_session()).collect();
    let idle_sessions: Vec<String> = (0..8).map(|_| d.create_session()).collect();
    // Acknowledged events: (session, seq) → marker text.
    let acked: Arc<Mutex<HashMap<(String, u64), String>>> = Arc::default();
    let forks: Arc<Mutex<Vec<String>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut threads = Vec::new();

    for client in 0..clients {
        let (sh, counts, acked) = (shared.clone(), counts.clone(), acked.clone());
        let sid = append_sessions[client % append_sessions.len()].clone();
        threads.push(std::thread::spawn(move || {
            let mut c = sh.connect();
            let mut n = 0u64;
            while !sh.stop.load(Ordering::Relaxed) {
                n += 1;
                let k = 1 + (n % 3);
                let markers: Vec<String> = (0..k).map(|i| format!("c{client}-{n}-{i}")).collect();
                let events: Vec<Value> = markers
                    .iter()
                    .map(|m| json!({"type": "user_message", "data": {"text": m}}))
                    .collect();
                let Some(r) = sh.call(
                    &mut c,
                    "agentd/append",
                    json!({"session_id": sid, "events": events}),
                ) else {
                    counts.appends_unknown.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let res = r
                    .get("result")
                    .unwrap_or_else(|| panic!("append refused: {r}"));
                let first = res["first_seq"].as_u64().unwrap();
                let last = res["last_seq"].as_u64().unwrap();
                assert_eq!(last - first + 1, k, "{r}");
                let mut a = acked.lock().unwrap();
                for (i, m) in markers.into_iter().enumerate() {
                    assert!(
                        a.insert((sid.clone(), first + i as u64), m).is_none(),
                        "seq acknowledged twice"
                    );
                }
                counts.appends_acked.fetch_add(1, Ordering::Relaxed);
                counts.events_acked.fetch_add(k, Ordering::Relaxed);
            }
        }));
    }

    for sid in turn_sessions.clone() {
        let (sh, counts, script) = (shared.clone(), counts.clone(), script.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = sh.connect();
            while !sh.stop.load(Ordering::Relaxed) {
                let Some(r) = sh.call(
                    &mut c,
                    "agentd/turn",
                    json!({"session_id": sid, "input": "look around",
                        "model": format!("script:{}", script.display())}),
                ) else {
                    continue;
                };
                match r.get("result") {
                    Some(res) => {
                        assert_eq!(res["status"], "completed", "{r}");
                        counts.turns.fetch_add(1, Ordering::Relaxed);
                    }
                    // A turn left open by the kill is reconciled; `busy` is not a bug.
                    None => assert_eq!(r["error"]["data"]["kind"], "busy", "{r}"),
                }
            }
        }));
    }

    // Subscribers that come and go: each follows a session from a random point for a
    // while, checking the stream has no gap and no duplicate, then hangs up.
    for s in 0..8usize {
        let (sh, counts) = (shared.clone(), counts.clone());
        let sessions = append_sessions.clone();
        threads.push(std::thread::spawn(move || {
            let mut round = 0usize;
            while !sh.stop.load(Ordering::Relaxed) {
                round += 1;
                let sid = &sessions[(s * 7 + round) % sessions.len()];
                let mut c = sh.connect();
                // From a point that exists: somewhere in the first 50 events or the end.
                let Some(shown) = sh.call(&mut c, "agentd/show", json!({"session_id": sid})) else {
                    continue;
                };
                let last = shown
                    .pointer("/result/last_seq")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                let after = ((round as u64 * 13) % 50).min(last);
                let Some(r) = sh.call(
                    &mut c,
                    "agentd/subscribe",
                    json!({"session_id": sid, "after_seq": after}),
                ) else {
                    continue;
                };
                assert!(r.get("result").is_some(), "subscribe: {r}");
                counts.subscriptions.fetch_add(1, Ordering::Relaxed);
                let mut next = after + 1;
                let until = Instant::now() + Duration::from_millis(300);
                while Instant::now() < until {
                    let Some(m) = c.read_message(Duration::from_millis(100)) else {
                        continue;
                    };
                    let Some(ev) = m.pointer("/params/result") else {
                        continue;
                    };
                    if ev["type"] == "lagged" {
                        break;
                    }
                    let Some(seq) = ev.get("seq").and_then(Value::as_u64) else {
                        continue; // ephemeral or `lagged`
                    };
                    assert_eq!(seq, next, "subscriber saw a gap or a duplicate on {sid}");
                    next += 1;
                    counts.events_streamed.fetch_add(1, Ordering::Relaxed);
                }
                // Dropping `c` hangs up.
            }
        }));
    }

    // Forks and compactions.
    {
        let (sh, counts, forks) = (shared.clone(), counts.clone(), forks.clone());
        let sessions = append_sessions.clone();
        threads.push(std::thread::spawn(move || {
            let mut c = sh.connect();
            let mut i = 0usize;
            while !sh.stop.load(Ordering::Relaxed) {
                i += 1;
                let sid = &sessions[i % sessions.len()];
                if let Some(r) = sh.call(&mut c, "agentd/fork", json!({"session_id": sid})) {
                    let res = r.get("result").unwrap_or_else(|| panic!("fork: {r}"));
                    forks.lock().unwrap().push(
                        res["child_session_id"]
                            .as_str()
                            .or(res["session_id"].as_str())
                            .unwrap()
                            .to_string(),
                    );
                    counts.forks.fetch_add(1, Ordering::Relaxed);
                }
                let sid = &sessions[(i * 5) % sessions.len()];
                if let Some(r) = sh.call(
                    &mut c,
                    "agentd/compact",
                    json!({"session_id": sid, "tail_events": 8}),
                ) {
                    if r.get("error").is_some() {
                        // Only "nothing to compact" style refusals are expected.
                        assert_ne!(r["error"]["data"]["kind"], "internal", "compact: {r}");
                    } else {
                        counts.compactions.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    // RSS monitor and idle-eviction observer.
    let peak = Arc::new(AtomicU64::new(0));
    let min_loaded = Arc::new(AtomicU64::new(u64::MAX));
    {
        let (sh, peak, min_loaded) = (shared.clone(), peak.clone(), min_loaded.clone());
        let idle = idle_sessions.clone();
        threads.push(std::thread::spawn(move || {
            let mut c = sh.connect();
            // Touch the idle sessions once so they load, then leave them.
            for sid in &idle {
                sh.call(&mut c, "agentd/show", json!({"session_id": sid}));
            }
            while !sh.stop.load(Ordering::Relaxed) {
                let Some(h) = sh.call(&mut c, "agentd/hello", json!({})) else {
                    continue;
                };
                if let Some(pid) = h.pointer("/result/pid").and_then(Value::as_u64) {
                    if let Some(r) = rss_kib(pid as u32) {
                        peak.fetch_max(r, Ordering::Relaxed);
                    }
                }
                if let Some(s) = sh.call(&mut c, "agentd/status", json!({})) {
                    if let Some(n) = s.pointer("/result/sessions_loaded").and_then(Value::as_u64) {
                        min_loaded.fetch_min(n, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }));
    }

    // Halfway: kill -9 and restart.
    let half = Instant::now() + Duration::from_secs(seconds / 2);
    while Instant::now() < half {
        std::thread::sleep(Duration::from_millis(100));
    }
    shared.restarting.store(true, Ordering::SeqCst);
    d.kill9();
    d.spawn();
    d.wait_ready(Duration::from_secs(60)).unwrap();
    shared.epoch.bump();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    shared.stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    shared.restarting.store(false, Ordering::SeqCst);

    // Verification: load every session (repairs a torn tail left by the kill), check
    // its replay, then read the Logs themselves.
    let mut c = d.connect();
    let forks = forks.lock().unwrap().clone();
    let all: Vec<&String> = append_sessions
        .iter()
        .chain(&turn_sessions)
        .chain(&idle_sessions)
        .chain(&forks)
        .collect();
    for sid in &all {
        let shown = c.call_ok("agentd/show", json!({"session_id": sid}));
        assert_eq!(shown["corrupt_lines"], json!([]), "{sid}: {shown}");
        let ctx = c.call_ok("agentd/context", json!({"session_id": sid}));
        assert_eq!(ctx["stats"]["balanced"], true, "{sid}: replay unbalanced");
    }
    let final_rss = rss_kib(d.pid().unwrap()).unwrap_or(0);
    d.shutdown(Duration::from_secs(30)).expect("clean shutdown");
    let acked = acked.lock().unwrap();
    let mut per_session: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total_lines = 0usize;
    for sid in &all {
        let lines = d.log_lines(sid);
        total_lines += lines.len();
        let mut ids = HashSet::new();
        let mut markers = HashSet::new();
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(
                l["seq"].as_u64(),
                Some(i as u64),
                "{sid}: seqs not contiguous"
            );
            assert!(
                ids.insert(l["id"].as_str().unwrap().to_string()),
                "{sid}: duplicate id"
            );
            if let Some(t) = l.pointer("/data/text").and_then(Value::as_str) {
                if t.starts_with('c') && t.contains('-') && l["type"] == "user_message" {
                    assert!(
                        markers.insert(t.to_string()),
                        "{sid}: event {t} present twice"
                    );
                }
            }
        }
        per_session.insert(sid.as_str(), lines.len());
        for ((s, seq), m) in acked.iter().filter(|((s, _), _)| s == *sid) {
            let line = lines
                .get(*seq as usize)
                .unwrap_or_else(|| panic!("{s}: acknowledged seq {seq} missing"));
            assert_eq!(
                line.pointer("/data/text").and_then(Value::as_str),
                Some(m.as_str()),
                "{s}: seq {seq} is not the acknowledged event"
            );
        }
    }
    let peak = peak.load(Ordering::Relaxed).max(final_rss);
    let min_loaded = min_loaded.load(Ordering::Relaxed);
    eprintln!(
        "soak {seconds} s, {clients} clients: {} appends / {} events acknowledged ({} cut by the kill, outcome unknown), \
         {} turns, {} forks, {} compactions, {} subscriptions streaming {} events, \
         {} sessions / {total_lines} Log lines verified, min sessions loaded {min_loaded}, \
         RSS peak {} MiB, final {} MiB",
        counts.appends_acked.load(Ordering::Relaxed),
        counts.events_acked.load(Ordering::Relaxed),
        counts.appends_unknown.load(Ordering::Relaxed),
        counts.turns.load(Ordering::Relaxed),
        counts.forks.load(Ordering::Relaxed),
        counts.compactions.load(Ordering::Relaxed),
        counts.subscriptions.load(Ordering::Relaxed),
        counts.events_streamed.load(Ordering::Relaxed),
        all.len(),
        peak / 1024,
        final_rss / 1024,
    );
    assert!(counts.appends_acked.load(Ordering::Relaxed) > 0);
    assert!(
        counts.turns.load(Ordering::Relaxed) > 0,
        "no turn completed"
    );
    assert!(counts.forks.load(Ordering::Relaxed) > 0, "no fork");
    assert!(
        counts.compactions.load(Ordering::Relaxed) > 0,
        "no compaction"
    );
    assert!(counts.subscriptions.load(Ordering::Relaxed) > 0);
    assert!(
        min_loaded < all.len() as u64,
        "idle sessions were never evicted (min loaded {min_loaded})"
    );
    assert!(
        peak > 0 && peak < RSS_BOUND_KIB,
        "RSS peak {peak} KiB over the bound"
    );
}
