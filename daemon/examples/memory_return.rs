//! Memory comes back: RSS of the real daemon before, at the peak of, and 10 s after a
//! load of 1,100 connections, 100 of them subscribers from seq 0 of a 20k-event session
//! that never read a byte (so their backlog piles up in the daemon). A benchmark, not
//! a timed test: it prints the figures.
//!
//! `cargo build --release -p agentd && cargo run --release -p agentd --example
//! memory_return` (the daemon binary is the `agentd` beside the example's directory, or
//! `AGENTD_BIN`; `MEM_EVENTS`, `MEM_CONNS`, `MEM_STALLED`, `MEM_SETTLE_S` change the
//! load).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
    id: u64,
}

impl Conn {
    fn connect(path: &Path) -> std::io::Result<Conn> {
        let s = UnixStream::connect(path)?;
        Ok(Conn {
            w: s.try_clone()?,
            r: BufReader::new(s),
            id: 0,
        })
    }
    fn send(&mut self, method: &str, params: Value) {
        self.id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        self.w.write_all(format!("{msg}\n").as_bytes()).unwrap();
    }
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params);
        let mut line = String::new();
        loop {
            line.clear();
            self.r.read_line(&mut line).unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(self.id)) {
                return v;
            }
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn raise_fd_limit(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: plain struct passed by pointer.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

fn main() {
    let events = env_usize("MEM_EVENTS", 20_000);
    let conns = env_usize("MEM_CONNS", 1_100);
    let stalled = env_usize("MEM_STALLED", 100).min(conns);
    let settle = env_usize("MEM_SETTLE_S", 10) as u64;
    raise_fd_limit(8192);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/agentd.sock");
    let bin = std::env::var_os("AGENTD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap();
            // target/<profile>/examples/memory_return → target/<profile>/agentd
            exe.parent().and_then(Path::parent).unwrap().join("agentd")
        });
    assert!(
        bin.is_file(),
        "no daemon binary at {} (build it first, or set AGENTD_BIN)",
        bin.display()
    );
    let mut child: Child = Command::new(&bin)
        .env("AGENTD_HOME", dir.path().join("home"))
        .env("AGENTD_SOCKET", &socket)
        .env("AGENTD_CONFIG", dir.path().join("no-config.toml"))
        .env("AGENTD_DURABILITY", "none")
        .env("AGENTD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn agentd");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        if let Ok(c) = Conn::connect(&socket) {
            break c;
        }
        assert!(Instant::now() < deadline, "agentd did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let r = c.call("agentd/create", json!({"workspace": dir.path()}));
    let sid = r["result"]["session_id"].as_str().unwrap().to_string();
    let text = "memory ".repeat(100);
    let mut n = 1;
    while n < events {
        let k = 500.min(events - n);
        let evs: Vec<Value> = (0..k)
            .map(|i| json!({"type": "user_message", "data": {"text": format!("{} {text}", n + i)}}))
            .collect();
        let r = c.call("agentd/append", json!({"session_id": sid, "events": evs}));
        assert!(r.get("result").is_some(), "{r}");
        n += k;
    }
    let log_bytes = std::fs::metadata(dir.path().join(format!("home/sessions/{sid}.ndjson")))
        .map(|m| m.len())
        .unwrap_or(0);
    std::thread::sleep(Duration::from_secs(2));
    let before = rss_kib(pid);

    let started = Instant::now();
    let mut held = Vec::with_capacity(conns);
    for i in 0..conns {
        let mut k = Conn::connect(&socket).expect("connect");
        if i < stalled {
            // Subscribe from seq 0 and never read: the backlog piles up.
            k.send(
                "agentd/subscribe",
                json!({"session_id": sid, "after_seq": 0}),
            );
        } else {
            k.call("agentd/hello", json!({}));
        }
        held.push(k);
    }
    // Let the subscribers' backlog fill whatever the daemon buffers for them.
    let mut peak = rss_kib(pid);
    let mut last_change = Instant::now();
    while last_change.elapsed() < Duration::from_secs(3)
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(100));
        let r = rss_kib(pid);
        if r > peak + 1024 {
            last_change = Instant::now();
        }
        peak = peak.max(r);
    }
    let load_s = started.elapsed().as_secs_f64();
    drop(held);
    // A live connection after the load: the daemon still answers.
    let r = c.call("agentd/status", json!({}));
    assert!(r.get("result").is_some(), "{r}");
    let mut after = 0;
    for _ in 0..settle * 10 {
        std::thread::sleep(Duration::from_millis(100));
        after = rss_kib(pid);
    }
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "memory_return: {events} events ({:.1} MiB Log), {conns} connections, {stalled} stalled subscribers from seq 0",
        log_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  RSS before {:.1} MiB, peak {:.1} MiB (load held {:.1} s), {settle} s after close {:.1} MiB ({:+.1}% of before)",
        mib(before),
        mib(peak),
        load_s,
        mib(after),
        (after as f64 / before.max(1) as f64 - 1.0) * 100.0
    );
    let _ = child.kill();
    let _ = child.wait();
}
