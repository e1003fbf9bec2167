//! History operations at scale (docs/history-rules.md), against the real `agentd` binary.
//!
//! Part 1, one large session: a synthetic Log of 100,000 events (~60 MB: turns of user
//! and assistant messages, tool calls with 1–8 KiB outputs, usage records) is written
//! straight into `<home>/sessions/<sid>.ndjson` before the daemon starts. Measured: cold
//! load (the first `agentd/show` after start) in MB/s; warm `agentd/context` p50 without
//! a checkpoint (to the last byte, read by a client that discards the bytes, beside the
//! same run's time for as many bytes through a Unix socket) and after `agentd/compact`;
//! the compaction itself; a fork at the midpoint; the daemon's peak RSS (`VmHWM`).
//!
//! Part 2, many sessions: 10,000 small Logs (one in ten a fork child) in one home.
//! Measured: time from spawning the daemon until `agentd/hello` answers, and warm
//! `agentd/list` (limit 100) and `agentd/tree` latencies.
//!
//! Every figure is printed beside its target. The temp homes live under the system temp
//! dir (`TMPDIR`), i.e. on the same disk as other benches; durability is `none` because
//! setup writes are not what is measured. "Cold" means a fresh daemon process; the Log
//! bytes may still be in the OS page cache (the bench does not drop caches).
//!
//! Run: `cargo bench -p agentd --bench history` (env `BENCH_EVENTS` and `BENCH_SESSIONS`
//! scale the two parts).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator, so every run writes the same Log.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() as usize) % (hi - lo + 1)
    }
}

/// ASCII text that looks like source and command output, to slice tool outputs from.
fn corpus() -> String {
    let words = [
        "fn",
        "let",
        "mut",
        "self",
        "return",
        "match",
        "Some(x)",
        "None",
        "Ok(())",
        "Err(e)",
        "impl",
        "struct",
        "pub",
        "use",
        "crate::store",
        "// why this matters",
        "tokio::spawn",
        "vec![]",
        "String::new()",
        "assert_eq!",
        "0x7f",
        "\"quoted\"",
        "path/to/file.rs:42",
        "warning:",
        "error[E0308]:",
        "test result: ok.",
        "{",
        "}",
        "=>",
        "&mut",
    ];
    let mut rng = Lcg(7);
    let mut s = String::with_capacity(64 * 1024);
    while s.len() < 64 * 1024 {
        let n = rng.range(4, 12);
        for i in 0..n {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(words[rng.range(0, words.len() - 1)]);
        }
        s.push('\n');
    }
    s
}

fn ts(seq: u64) -> String {
    // One event per second from 2026-11-01T00:00:00Z.
    let day = 1 + seq / 86_400;
    let rem = seq % 86_400;
    format!(
        "2026-11-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        day.min(28),
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        (seq * 7919) % 1_000_000
    )
}

fn line(out: &mut impl Write, sid: &str, seq: u64, kind: &str, data: Value) -> usize {
    let v = json!({
        "id": format!("{:016x}", seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1e995),
        "session_id": sid, "seq": seq, "ts": ts(seq), "type": kind, "data": data,
    });
    let mut b = serde_json::to_vec(&v).expect("serialize");
    b.push(b'\n');
    out.write_all(&b).expect("write log");
    b.len()
}

/// Writes a realistic Log of `n` events; returns its size in bytes.
fn write_big_log(path: &Path, sid: &str, workspace: &Path, n: u64) -> u64 {
    let text = corpus();
    let mut rng = Lcg(42);
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("create"));
    let mut bytes = 0usize;
    let mut seq = 0u64;
    bytes += line(
        &mut out,
        sid,
        seq,
        "session_started",
        json!({"workspace": workspace, "agentd_version": "bench", "log_format": 1,
            "title": "bench: large session", "model": "bench-model"}),
    );
    seq += 1;
    let mut turn = 0u64;
    let mut call = 0u64;
    let slice = |rng: &mut Lcg, len: usize| -> String {
        let start = rng.range(0, text.len() - len - 1);
        text[start..start + len].to_string()
    };
    // A turn has at most 5 + 3 * 2 events; stop starting turns before the end so the Log
    // ends with a complete turn (an open one would be reconciled on load), then pad.
    while seq + 11 < n {
        turn += 1;
        let mut push = |kind: &str, data: Value, seq: &mut u64, bytes: &mut usize| {
            if *seq < n {
                *bytes += line(&mut out, sid, *seq, kind, data);
                *seq += 1;
            }
        };
        let turn_id = format!("turn-{turn}");
        push(
            "turn_started",
            json!({"turn_id": turn_id, "model": "bench-model"}),
            &mut seq,
            &mut bytes,
        );
        let prompt = slice(&mut rng, 200);
        push(
            "user_message",
            json!({"text": prompt}),
            &mut seq,
            &mut bytes,
        );
        // Zero to two tool steps per turn (one on average).
        for _ in 0..[0, 1, 1, 2][rng.range(0, 3)] {
            push(
                "provider_usage",
                json!({"provider": "bench", "model": "bench-model",
                    "usage": {"input_tokens": 1000 + turn, "output_tokens": 200, "total_tokens": 1200 + turn}}),
                &mut seq,
                &mut bytes,
            );
            call += 1;
            let call_id = format!("call_{call}");
            let file = format!("src/mod{}.rs", call % 97);
            let (name, args) = match call % 4 {
                0 => (
                    "write_file",
                    json!({"path": file, "content": "fn main() {}\n"}),
                ),
                1 => ("shell", json!({"command": "cargo test --quiet"})),
                _ => ("read_file", json!({"path": file})),
            };
            push(
                "tool_call",
                json!({"call_id": call_id, "name": name, "args": args}),
                &mut seq,
                &mut bytes,
            );
            // 1–8 KiB, skewed small like real tool output (mean ≈ 2.75 KiB).
            let r = rng.range(0, 1000) as f64 / 1000.0;
            let out_len = 1024 + (r * r * r * (7.0 * 1024.0)) as usize;
            let output = slice(&mut rng, out_len);
            push(
                "tool_result",
                json!({"call_id": call_id, "ok": true, "output": output, "exit_code": 0}),
                &mut seq,
                &mut bytes,
            );
        }
        let answer = slice(&mut rng, 300);
        push(
            "assistant_message",
            json!({"text": answer}),
            &mut seq,
            &mut bytes,
        );
        push(
            "turn_ended",
            json!({"turn_id": turn_id, "status": "completed"}),
            &mut seq,
            &mut bytes,
        );
    }
    while seq < n {
        let note = slice(&mut rng, 120);
        bytes += line(
            &mut out,
            sid,
            seq,
            "assistant_message",
            json!({"text": note}),
        );
        seq += 1;
    }
    out.flush().expect("flush");
    // A Log at rest, as agentd leaves it (every append is synced): the load below must
    // not race the writeback of the file it is reading.
    out.get_ref().sync_all().expect("sync log");
    bytes as u64
}

/// 10k small Logs across 100 workspaces; every tenth is a fork of the one before it.
fn write_many_logs(sessions: &Path, workspaces: &Path, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let sid = format!("20261101T{:06}-{:06x}", i / 60, i);
        let ws = workspaces.join(format!("ws{}", i % 100));
        if i < 100 {
            std::fs::create_dir_all(&ws).expect("workspace");
        }
        let mut out = BufWriter::new(
            std::fs::File::create(sessions.join(format!("{sid}.ndjson"))).expect("create"),
        );
        let mut seq = 0;
        if i % 10 == 9 {
            let parent = &ids[i - 1];
            line(
                &mut out,
                &sid,
                seq,
                "session_fork",
                json!({"parent_session_id": parent, "fork_root_session_id": parent,
                    "forked_to_seq": 2, "workspace": ws, "replay_event_count": 2,
                    "strategy": "replay_v1"}),
            );
        } else {
            line(
                &mut out,
                &sid,
                seq,
                "session_started",
                json!({"workspace": ws, "agentd_version": "bench", "log_format": 1,
                    "title": format!("session {i}")}),
            );
        }
        seq += 1;
        line(
            &mut out,
            &sid,
            seq,
            "user_message",
            json!({"text": format!("question {i}")}),
        );
        line(
            &mut out,
            &sid,
            seq + 1,
            "assistant_message",
            json!({"text": format!("answer {i}")}),
        );
        out.flush().expect("flush");
        ids.push(sid);
    }
    ids
}

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    /// Spawns agentd on `root/home` and returns it with the time until `agentd/hello`
    /// answered.
    fn start(root: &Path) -> (Daemon, Duration) {
        let socket = root.join("run/agentd.sock");
        let t0 = Instant::now();
        // `BENCH_AGENTD` runs another build (e.g. an earlier commit's) for a comparison.
        let bin =
            std::env::var("BENCH_AGENTD").unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentd").into());
        let child = Command::new(bin)
            .env("AGENTD_HOME", root.join("home"))
            .env("AGENTD_SOCKET", &socket)
            .env("AGENTD_CONFIG", root.join("none.toml"))
            .env("AGENTD_DURABILITY", "none")
            .env("AGENTD_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn agentd");
        let d = Daemon { child, socket };
        let deadline = t0 + Duration::from_secs(60);
        loop {
            if let Ok(mut c) = Conn::try_new(&d.socket) {
                if c.try_call("agentd/hello", json!({})).is_some() {
                    return (d, t0.elapsed());
                }
            }
            assert!(Instant::now() < deadline, "agentd did not answer hello");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn conn(&self) -> Conn {
        Conn::try_new(&self.socket).expect("connect")
    }

    /// Peak resident set size in MiB (`VmHWM`).
    fn peak_rss_mib(&self) -> Option<f64> {
        self.status_mib("VmHWM:")
    }

    /// Resident set size now, in MiB (`VmRSS`).
    fn rss_mib(&self) -> Option<f64> {
        self.status_mib("VmRSS:")
    }

    fn status_mib(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with(field))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
    id: u64,
}

impl Conn {
    fn try_new(socket: &Path) -> std::io::Result<Conn> {
        let w = UnixStream::connect(socket)?;
        let r = BufReader::with_capacity(1 << 20, w.try_clone()?);
        Ok(Conn { w, r, id: 0 })
    }

    fn try_call(&mut self, method: &str, params: Value) -> Option<Value> {
        self.id += 1;
        let mut msg = serde_json::to_vec(
            &json!({"jsonrpc":"2.0","id":self.id,"method":method,"params":params}),
        )
        .ok()?;
        msg.push(b'\n');
        self.w.write_all(&msg).ok()?;
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line).ok()?;
        let v: Value = serde_json::from_slice(&line).ok()?;
        v.get("result").cloned()
    }

    /// The response line of a call, unparsed, and how long it took to its last byte
    /// (a client that discards the bytes).
    fn timed_raw(&mut self, method: &str, params: Value) -> (Vec<u8>, Duration) {
        self.id += 1;
        let mut msg = serde_json::to_vec(
            &json!({"jsonrpc":"2.0","id":self.id,"method":method,"params":params}),
        )
        .expect("serialize");
        msg.push(b'\n');
        let mut line = Vec::with_capacity(128 << 20);
        let t = Instant::now();
        self.w.write_all(&msg).expect("send");
        self.r.read_until(b'\n', &mut line).expect("read");
        (line, t.elapsed())
    }

    /// The size of a call's response line and how long it took to its last byte, the
    /// bytes read into one reused buffer and dropped (a client that discards them).
    fn timed_discard(&mut self, method: &str, params: Value) -> (usize, Duration) {
        self.id += 1;
        let mut msg = serde_json::to_vec(
            &json!({"jsonrpc":"2.0","id":self.id,"method":method,"params":params}),
        )
        .expect("serialize");
        msg.push(b'\n');
        let t = Instant::now();
        self.w.write_all(&msg).expect("send");
        let mut n = 0;
        loop {
            let buf = self.r.fill_buf().expect("read");
            assert!(!buf.is_empty(), "connection closed");
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.r.consume(i + 1);
                    return (n + i + 1, t.elapsed());
                }
                None => {
                    let k = buf.len();
                    n += k;
                    self.r.consume(k);
                }
            }
        }
    }

    /// The result of a call, and how long the round trip took (response parsed).
    fn timed(&mut self, method: &str, params: Value) -> (Value, Duration) {
        let t = Instant::now();
        let v = self
            .try_call(method, params.clone())
            .unwrap_or_else(|| panic!("{method} {params} failed"));
        (v, t.elapsed())
    }
}

/// p50 of the time `len` bytes, already in memory, take through a Unix socket to a
/// reader that discards them as `Conn::timed_discard` does: the floor under a context
/// of that size, measured in the same run.
fn socket_floor(len: usize) -> Duration {
    let (mut a, b) = UnixStream::pair().expect("socket pair");
    let mut r = BufReader::with_capacity(1 << 20, b);
    let mut msg = vec![b'x'; len.max(1)];
    *msg.last_mut().expect("byte") = b'\n';
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| a.write_all(&msg).expect("write"));
            loop {
                let buf = r.fill_buf().expect("read");
                let k = buf.len();
                let end = buf.iter().position(|&b| b == b'\n');
                r.consume(end.map_or(k, |i| i + 1));
                if end.is_some() {
                    break;
                }
            }
        });
        times.push(t.elapsed());
    }
    p50(times)
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISS"
    }
}

fn report(what: &str, value: String, target: &str, ok: bool) {
    println!(
        "{what:<44} {value:>14}   target {target:<12} {}",
        verdict(ok)
    );
}

fn big_session(base: &Path) {
    let n = env_usize("BENCH_EVENTS", 100_000) as u64;
    let root = tempfile::tempdir_in(base).expect("tempdir");
    let ws = root.path().join("ws");
    let sessions = root.path().join("home/sessions");
    std::fs::create_dir_all(&ws).expect("ws");
    std::fs::create_dir_all(&sessions).expect("sessions");
    let sid = "20261101T000000-b16b16";
    let log = sessions.join(format!("{sid}.ndjson"));
    let t = Instant::now();
    let size = write_big_log(&log, sid, &ws.canonicalize().expect("ws"), n);
    let mb = size as f64 / 1e6;
    println!(
        "== one large session: {n} events, {mb:.1} MB Log (written in {:.1} s)",
        t.elapsed().as_secs_f64()
    );

    // The first load in a fresh process also pays for faulting in the memory its
    // events take (on a VM that can dominate); restarts show the load itself. Each
    // round is a new daemon process loading a Log it has not seen.
    let mut loads = Vec::new();
    let mut daemon = None;
    let mut idle_rss = None;
    for round in 0..3 {
        drop(daemon.take());
        let (d, ready) = Daemon::start(root.path());
        if round == 0 {
            report(
                "daemon ready (hello) with the large Log",
                format!("{:.0} ms", ms(ready)),
                "-",
                true,
            );
        }
        // The daemon before it loads anything: what a loaded session adds is measured
        // against it.
        idle_rss = d.rss_mib();
        let mut c = d.conn();
        let (show, cold) = c.timed("agentd/show", json!({"session_id": sid}));
        assert_eq!(show["event_count"], n, "{show}");
        loads.push(cold);
        daemon = Some(d);
    }
    let d = daemon.expect("a daemon");
    let mut c = d.conn();
    let log_mib = size as f64 / (1024.0 * 1024.0);
    let loaded_rss = d
        .rss_mib()
        .zip(d.status_mib("RssAnon:"))
        .zip(d.status_mib("RssFile:"))
        .map(|((r, a), f)| (r, a, f));
    let load_peak = d.peak_rss_mib();
    let first = mb / loads[0].as_secs_f64();
    let best = mb / loads.iter().min().expect("loads").as_secs_f64();
    report(
        "cold load, first process (first agentd/show)",
        format!("{first:.0} MB/s"),
        ">= 150 MB/s",
        first >= 150.0,
    );
    report(
        "cold load, best of 3 restarts",
        format!("{best:.0} MB/s"),
        ">= 150 MB/s",
        best >= 150.0,
    );
    println!(
        "{:<44} {:>14}",
        "  (show took, per round)",
        loads
            .iter()
            .map(|d| format!("{:.0}", ms(*d)))
            .collect::<Vec<_>>()
            .join("/")
            + " ms"
    );

    // Context to the last byte of the response, the client discarding the bytes. The
    // first request renders the whole replay and keeps its stable prefix; later ones
    // render only what follows. The same for the anthropic dialect (its kept prefix
    // leaves the last message open).
    let stats_of = |line: &[u8]| -> Value {
        let v: Value = serde_json::from_slice(line).expect("context response");
        v["result"]["stats"].clone()
    };
    let (line, first) = c.timed_raw("agentd/context", json!({"session_id": sid}));
    let after_context = (d.rss_mib(), d.peak_rss_mib());
    let resp_bytes = line.len();
    let mut resp_items = stats_of(&line)["items"].as_u64().unwrap_or(0);
    let mut times = Vec::new();
    for _ in 0..7 {
        let (_, dt) = c.timed_discard("agentd/context", json!({"session_id": sid}));
        times.push(dt);
    }
    let warm = p50(times);
    let anthropic = json!({"session_id": sid, "dialect": "anthropic"});
    let (_, anthropic_first) = c.timed_discard("agentd/context", anthropic.clone());
    let mut times = Vec::new();
    for _ in 0..5 {
        let (_, dt) = c.timed_discard("agentd/context", anthropic.clone());
        times.push(dt);
    }
    let anthropic_warm = p50(times);
    // Memory beside the Log's size: what the loaded session keeps, and the peak while
    // the first context (no checkpoint) renders everything.
    let ratio = |what: &str, mib: Option<f64>, limit: f64| match mib {
        Some(m) => report(
            what,
            format!("{m:.0} MiB {:.2}x", m / log_mib),
            &format!("<= {limit}x Log"),
            m / log_mib <= limit,
        ),
        None => println!("{what}: /proc not available"),
    };
    println!("{:<44} {:>14}", "  (Log size)", format!("{log_mib:.1} MiB"));
    ratio("RSS after cold load (VmRSS)", loaded_rss.map(|r| r.0), 1.5);
    if let Some(((loaded, _, _), idle)) = loaded_rss.zip(idle_rss) {
        ratio(
            "  the session alone (minus the idle daemon)",
            Some(loaded - idle),
            1.5,
        );
        println!("{:<44} {:>14}", "  (idle daemon)", format!("{idle:.0} MiB"));
    }
    if let Some((_, anon, file)) = loaded_rss {
        println!(
            "{:<44} {:>14}",
            "  (of which anonymous / file-backed)",
            format!("{anon:.0} / {file:.0} MiB")
        );
    }
    ratio("peak RSS through the load (VmHWM)", load_peak, 2.0);
    ratio(
        "peak RSS through first context (VmHWM)",
        after_context.1,
        2.0,
    );
    if let Some(m) = after_context.0 {
        println!(
            "{:<44} {:>14}",
            "  (VmRSS after first context)",
            format!("{m:.0} MiB {:.2}x", m / log_mib)
        );
    }
    report(
        "context, first request (renders all)",
        format!("{:.1} ms", ms(first)),
        "- (reported)",
        true,
    );
    report(
        "warm context p50, no checkpoint, to last byte",
        format!("{:.1} ms", ms(warm)),
        "<= 60 ms",
        warm <= Duration::from_millis(60),
    );
    report(
        "warm context p50, anthropic dialect",
        format!("{:.1} ms", ms(anthropic_warm)),
        "<= 60 ms",
        anthropic_warm <= Duration::from_millis(60),
    );
    println!(
        "{:<44} {:>14}",
        "  (anthropic, first request: renders all)",
        format!("{:.1} ms", ms(anthropic_first))
    );
    println!(
        "{:<44} {:>14}",
        "  (response bytes)",
        format!("{:.1} MB", resp_bytes as f64 / 1e6)
    );
    println!(
        "{:<44} {:>14}",
        "  (floor: as many bytes through a socket)",
        format!("{:.1} ms", ms(socket_floor(resp_bytes)))
    );
    let last = c
        .try_call("agentd/show", json!({"session_id": sid}))
        .and_then(|v| v["last_seq"].as_u64())
        .unwrap_or(0);
    let mut times = Vec::new();
    for k in 0..7u64 {
        let (_, dt) = c.timed_discard(
            "agentd/context",
            json!({"session_id": sid, "after_seq": last.saturating_sub(100 + k)}),
        );
        times.push(dt);
    }
    let p = p50(times);
    report(
        "warm context p50, after_seq (last - 100)",
        format!("{:.1} ms", ms(p)),
        "<= 20 ms",
        p <= Duration::from_millis(20),
    );
    println!("{:<44} {:>14}", "  (items replayed)", resp_items);

    let (cp, dt) = c.timed("agentd/compact", json!({"session_id": sid}));
    assert_eq!(cp["recorded"], true, "{cp}");
    report(
        "compact (deterministic, tail 40)",
        format!("{:.0} ms", ms(dt)),
        "<= 1000 ms",
        dt <= Duration::from_secs(1),
    );

    let mut times = Vec::new();
    for _ in 0..30 {
        let (ctx, dt) = c.timed("agentd/context", json!({"session_id": sid}));
        resp_items = ctx["stats"]["items"].as_u64().unwrap_or(0);
        times.push(dt);
    }
    let p = p50(times);
    report(
        "warm context p50, after compaction",
        format!("{:.2} ms", ms(p)),
        "<= 5 ms",
        p <= Duration::from_millis(5),
    );
    println!("{:<44} {:>14}", "  (items replayed)", resp_items);

    let (fk, dt) = c.timed(
        "agentd/fork",
        json!({"session_id": sid, "to_seq": n / 2, "child_session_id": "bench-fork-mid"}),
    );
    assert_eq!(fk["recorded"], true, "{fk}");
    report(
        "fork at the midpoint",
        format!("{:.0} ms", ms(dt)),
        "<= 1000 ms",
        dt <= Duration::from_secs(1),
    );
    match d.peak_rss_mib() {
        Some(r) => report(
            "daemon peak RSS (VmHWM)",
            format!("{r:.0} MiB"),
            "- (reported)",
            true,
        ),
        None => println!("daemon peak RSS: /proc not available"),
    }
}

fn many_sessions(base: &Path) {
    let n = env_usize("BENCH_SESSIONS", 10_000);
    let root = tempfile::tempdir_in(base).expect("tempdir");
    let sessions = root.path().join("home/sessions");
    std::fs::create_dir_all(&sessions).expect("sessions");
    let t = Instant::now();
    let ids = write_many_logs(&sessions, &root.path().join("workspaces"), n);
    println!(
        "== {n} small sessions in one home (written in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let (d, ready) = Daemon::start(root.path());
    report(
        "daemon cold start until hello answers",
        format!("{:.0} ms", ms(ready)),
        "<= 1500 ms",
        ready <= Duration::from_millis(1500),
    );
    let mut c = d.conn();
    let (first, _) = c.timed("agentd/list", json!({"limit": 100}));
    assert_eq!(first["sessions"].as_array().map(Vec::len), Some(100.min(n)));
    let mut times = Vec::new();
    for _ in 0..50 {
        times.push(c.timed("agentd/list", json!({"limit": 100})).1);
    }
    let p = p50(times);
    report(
        "list (limit 100) p50, warm",
        format!("{:.2} ms", ms(p)),
        "<= 50 ms",
        p <= Duration::from_millis(50),
    );

    // A root that has a fork child (ids[8] → ids[9]).
    let root_id = &ids[8.min(n - 1)];
    let (tree, _) = c.timed("agentd/tree", json!({"session_id": root_id}));
    assert!(tree["tree"].is_object(), "{tree}");
    let mut times = Vec::new();
    for _ in 0..50 {
        times.push(c.timed("agentd/tree", json!({"session_id": root_id})).1);
    }
    let p = p50(times);
    report(
        "tree (one session) p50, warm",
        format!("{:.2} ms", ms(p)),
        "<= 50 ms",
        p <= Duration::from_millis(50),
    );
    let ws = root
        .path()
        .join("workspaces/ws8")
        .canonicalize()
        .expect("ws");
    let mut times = Vec::new();
    let mut roots = 0;
    for _ in 0..50 {
        let (t, dt) = c.timed("agentd/tree", json!({"workspace": ws}));
        roots = t["roots"].as_array().map_or(0, Vec::len);
        times.push(dt);
    }
    let p = p50(times);
    report(
        &format!("tree (workspace, {roots} roots) p50, warm"),
        format!("{:.2} ms", ms(p)),
        "<= 50 ms",
        p <= Duration::from_millis(50),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let base = std::env::temp_dir();
    println!("agentd history bench (home under {})", base.display());
    big_session(&base);
    many_sessions(&base);
}
