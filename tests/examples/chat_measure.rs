//! Measures `agentctl chat` on a real pseudo-terminal against the real daemon
//! (docs/chat.md), each figure with a baseline taken in the same run:
//!
//! 1. Keystroke to screen: a key typed into the input box until the VT100 screen shows
//!    it, p50 over 200 keys; baseline: the same through the terminal's own echo (`cat`
//!    on a pty in canonical mode), the floor of the pty and the parser.
//! 2. First `text_delta` to drawn: for each of 30 turns with the zero-latency `script`
//!    provider, the time from a native subscriber receiving the turn's first delta to
//!    the screen showing its text, through `agentctl chat` and through `agentctl turn`
//!    (plain streaming to the terminal). Target: chat within 5 ms of turn (p50).
//! 3. Attaching to a 100,000-event session: `agentctl chat SID` started until its screen
//!    shows the last event and `idle`, cold (the first touch after a daemon start, each
//!    of 5 rounds with a new daemon) and warm, and the chat's peak RSS (VmHWM) there;
//!    baselines: `agentctl show SID` (one process start and one call) and reading the
//!    Log raw. Targets: ready ≤ 300 ms (cold and warm), RSS ≤ 60 MB.
//!
//! ```sh
//! cargo build --release -p agentd -p agentctl
//! AGENTD_TEST_BIN_DIR=$PWD/target/release cargo run -p agentd-tests --example chat_measure
//! ```
//!
//! Env: `MEASURE_KEYS` (200), `MEASURE_TURNS` (30), `MEASURE_EVENTS` (100000),
//! `MEASURE_COLD` (5 cold rounds), `MEASURE_PARTS` (`keys,delta,attach`: which parts run).

use agentd_tests::measure::{env_usize, write_log};
use agentd_tests::pty::Pty;
use agentd_tests::{bin, Daemon};
use serde_json::{json, Value};
use std::io::Write;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Types `keys` letters one at a time into `p`; returns each one's time until the
/// screen holds the typed text (`prefix` + the letters so far).
fn type_keys(p: &mut Pty, prefix: &str, keys: usize) -> Vec<f64> {
    let mut typed = String::new();
    let mut times = Vec::new();
    for i in 0..keys {
        let c = (b'a' + (i % 26) as u8) as char;
        typed.push(c);
        let want = format!("{prefix}{typed}");
        let t0 = Instant::now();
        p.send(c.to_string());
        p.wait_until("the key on screen", WAIT, |s| {
            s.lines().any(|l| l.trim_end().ends_with(&want))
        });
        times.push(ms(t0.elapsed()));
    }
    times
}

fn keystrokes(keys: usize) {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let mut cmd = d.agentctl_cmd();
    cmd.args(["chat", "--new"]);
    // Wide enough that every key stays on the input box's first row.
    let mut p = Pty::spawn(cmd, 24, (keys + 20) as u16);
    p.wait_for("idle", WAIT);
    let chat = type_keys(&mut p, "> ", keys);
    drop(p);
    let mut cat = Command::new("cat");
    cat.current_dir(d.workspace());
    let mut p = Pty::spawn(cat, 24, (keys + 20) as u16);
    let echo = type_keys(&mut p, "", keys);
    println!(
        "keystroke to screen p50: {:.3} ms in agentctl chat; {:.3} ms through the terminal's own echo (baseline)",
        p50(chat),
        p50(echo)
    );
}

/// Records when a native subscriber receives each turn's first `text_delta`.
fn delta_watcher(d: &Daemon, sid: &str) -> mpsc::Receiver<(String, Instant)> {
    let mut sub = d.connect();
    sub.call_ok("agentd/subscribe", json!({"session_id": sid}));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        let Some(m) = sub.read_message(Duration::from_secs(600)) else {
            return;
        };
        let e = &m["params"]["result"];
        if e["type"] == "text_delta" {
            let t = e["data"]["text"].as_str().unwrap_or("").to_string();
            if t.starts_with('M') && tx.send((t, Instant::now())).is_err() {
                return;
            }
        }
    });
    rx
}

fn first_delta(turns: usize) {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let rules: Vec<Value> = (0..turns * 2 + 6)
        .map(|i| json!({"match": format!("q{i:03}"), "steps": [{"text": format!("M{i:03}x rest of the answer"), "chunk_chars": 5}]}))
        .collect();
    let script = d.root().join("marks.json");
    std::fs::write(&script, json!({"rules": rules}).to_string()).unwrap();
    let model = format!("script:{}", script.display());
    let sid = d.create_session();
    let deltas = delta_watcher(&d, &sid);
    let delta_of = |mark: &str| loop {
        let (t, at) = deltas.recv_timeout(WAIT).expect("the first delta");
        if t.starts_with(mark) {
            return at;
        }
    };
    let signed = |screen: Instant, delta: Instant| {
        if screen >= delta {
            ms(screen - delta)
        } else {
            -ms(delta - screen)
        }
    };
    // agentctl turn, plain streaming on a terminal.
    let mut plain = Vec::new();
    for i in 0..turns + 3 {
        let mark = format!("M{i:03}");
        let mut cmd = d.agentctl_cmd();
        cmd.args(["turn", &sid, &format!("q{i:03}"), "--model", &model]);
        let p = Pty::spawn(cmd, 24, 100);
        p.wait_for(&mark, WAIT);
        let shown = Instant::now();
        let at = delta_of(&mark);
        if i >= 3 {
            plain.push(signed(shown, at));
        }
        let mut p = p;
        p.wait_exit(WAIT).expect("agentctl turn ends");
    }
    // agentctl chat on the same session.
    let mut cmd = d.agentctl_cmd();
    cmd.args(["chat", &sid, "--model", &model]);
    let mut p = Pty::spawn(cmd, 24, 100);
    p.wait_for("idle", WAIT);
    let mut chat = Vec::new();
    for i in turns + 3..2 * (turns + 3) {
        let mark = format!("M{i:03}");
        p.line(&format!("q{i:03}"));
        p.wait_for(&mark, WAIT);
        let shown = Instant::now();
        let at = delta_of(&mark);
        if i >= turns + 6 {
            chat.push(signed(shown, at));
        }
        p.wait_until("idle again", WAIT, |s| {
            s.contains(" idle ") && s.contains("rest of the answer")
        });
    }
    let (c, t) = (p50(chat), p50(plain));
    println!(
        "first text_delta to drawn p50: {c:.3} ms in agentctl chat, {t:.3} ms in agentctl turn (baseline); difference {:.3} ms (target ≤ 5 ms) {}",
        c - t,
        if c - t <= 5.0 { "OK" } else { "OVER" }
    );
}

/// Peak and current RSS of `pid` in MiB, from `/proc/PID/status`.
fn rss_of(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (kib("VmHWM:"), kib("VmRSS:"))
}

fn attach_once(d: &Daemon, sid: &str) -> (f64, f64, f64) {
    let mut cmd = d.agentctl_cmd();
    cmd.args(["chat", sid]);
    let t0 = Instant::now();
    let mut p = Pty::spawn(cmd, 40, 120);
    p.wait_until("the last event and idle", WAIT, |s| {
        s.contains("READY-MARKER") && s.contains(" idle ")
    });
    let ready = ms(t0.elapsed());
    let (peak, now) = rss_of(p.pid());
    p.send("\x04");
    p.wait_exit(WAIT).expect("chat exits");
    (ready, peak, now)
}

fn attach(events: u64, cold_rounds: usize) {
    let mut d = Daemon::builder().env("AGENTD_DURABILITY", "none").build();
    let sid = "measure-100k";
    write_log(d.home(), sid, d.workspace(), events - 1);
    // The last event: the marker the chat must draw.
    let line = json!({"id": "ffffffffffffffff", "session_id": sid, "seq": events - 1,
        "ts": "2026-11-01T00:00:01.000000Z", "type": "assistant_message",
        "data": {"text": "READY-MARKER"}});
    let log = d.home().join("sessions").join(format!("{sid}.ndjson"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(f, "{line}").unwrap();
    let log_mib = f.metadata().unwrap().len() as f64 / (1 << 20) as f64;
    // Cold: each round a new daemon whose first touch of the session is the chat's
    // attach (the Log is in the page cache, as after a daemon restart).
    let mut cold = Vec::new();
    let mut raw = Vec::new();
    for _ in 0..cold_rounds {
        let t0 = Instant::now();
        let bytes = std::fs::read(&log).unwrap();
        raw.push(ms(t0.elapsed()));
        drop(bytes);
        if d.pid().is_some() {
            d.kill9();
        }
        d.spawn();
        d.wait_ready(Duration::from_secs(30)).expect("daemon ready");
        cold.push(attach_once(&d, sid));
    }
    let mut warm: Vec<(f64, f64, f64)> = (0..5).map(|_| attach_once(&d, sid)).collect();
    warm.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    let mut show = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        d.agentctl(["show", sid]).assert_code(0);
        show.push(ms(t0.elapsed()));
    }
    let (ready, peak, now) = warm[2];
    let colds: Vec<f64> = cold.iter().map(|c| c.0).collect();
    let cold_p50 = p50(colds.clone());
    let cold_peak = cold.iter().map(|c| c.1).fold(0.0, f64::max);
    let fmt: Vec<String> = colds.iter().map(|c| format!("{c:.0}")).collect();
    println!(
        "attach to {events} events ({log_mib:.1} MiB Log): ready {ready:.0} ms warm (median of 5), cold {} ms ({} rounds, median {cold_p50:.0}); agentctl show {:.0} ms warm, the Log read raw {:.0} ms (baselines); target ≤ 300 ms: warm {}, cold {}",
        fmt.join(" / "),
        cold_rounds,
        p50(show),
        p50(raw),
        if ready <= 300.0 { "OK" } else { "OVER" },
        if cold_p50 <= 300.0 { "OK" } else { "OVER" },
    );
    println!(
        "  chat RSS there: peak {peak:.1} MiB, {now:.1} MiB when ready (cold peak {cold_peak:.1} MiB); target ≤ 60 MB {}",
        if peak.max(cold_peak) * 1.048_576 <= 60.0 { "OK" } else { "OVER" }
    );
}

fn main() {
    println!("binaries: {}", bin("agentctl").parent().unwrap().display());
    let parts = std::env::var("MEASURE_PARTS").unwrap_or_else(|_| "keys,delta,attach".into());
    let on = |p: &str| parts.split(',').any(|x| x.trim() == p);
    if on("keys") {
        keystrokes(env_usize("MEASURE_KEYS", 200));
    }
    if on("delta") {
        first_delta(env_usize("MEASURE_TURNS", 30));
    }
    if on("attach") {
        attach(
            env_usize("MEASURE_EVENTS", 100_000) as u64,
            env_usize("MEASURE_COLD", 5),
        );
    }
}
