//! `agentd/search` over a whole home, against raw-read and grep-like baselines measured
//! in the same run on the same (page-cached) files.
//!
//! `BENCH_MB` (default 1024) sets the home's size; sessions are ~512 KiB Logs of user,
//! assistant, tool call and tool result events. The query is a word that occurs only in
//! the last event of the oldest session, so every Log is scanned.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WORDS: &[&str] = &[
    "fn", "parse", "error", "result", "config", "session", "the", "value", "index", "return",
    "match", "struct", "impl", "test", "buffer", "stream", "daemon", "token", "path", "line",
];

fn text(seed: &mut u64, words: usize) -> String {
    let mut s = String::with_capacity(words * 7);
    for _ in 0..words {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(WORDS[(*seed >> 33) as usize % WORDS.len()]);
        s.push(' ');
    }
    s
}

fn write_home(root: &Path, total_mb: u64) -> (u64, usize) {
    let sessions = root.join("home/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let target = total_mb * 1024 * 1024;
    let mut written = 0u64;
    let mut seed = 7u64;
    let mut n = 0usize;
    while written < target {
        let sid = format!("20261121T{:06}-bench", n);
        let path = sessions.join(format!("{sid}.ndjson"));
        let mut out =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
        let mut seq = 0u64;
        // Older sessions have older timestamps; session 0 is the oldest.
        let ts = |seq: u64| {
            format!(
                "2026-11-{:02}T{:02}:{:02}:{:02}.000000Z",
                1 + n / 3600 % 28,
                n / 60 % 24,
                n % 60,
                seq % 60
            )
        };
        let line = |out: &mut std::io::BufWriter<std::fs::File>,
                    seq: u64,
                    kind: &str,
                    data: Value| {
            let ev = json!({"id": format!("{:016x}", seq), "session_id": sid, "seq": seq, "ts": ts(seq), "type": kind, "data": data});
            let mut b = serde_json::to_vec(&ev).unwrap();
            b.push(b'\n');
            out.write_all(&b).unwrap();
            b.len() as u64
        };
        let mut size = line(
            &mut out,
            seq,
            "session_started",
            json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
        );
        while size < 512 * 1024 {
            seq += 1;
            let (kind, data) = match seq % 4 {
                1 => ("user_message", json!({"text": text(&mut seed, 30)})),
                2 => (
                    "tool_call",
                    json!({"call_id": format!("c{seq}"), "name": "shell", "args": {"command": text(&mut seed, 8)}}),
                ),
                3 => (
                    "tool_result",
                    json!({"call_id": format!("c{}", seq - 1), "ok": true, "output": text(&mut seed, 300)}),
                ),
                _ => ("assistant_message", json!({"text": text(&mut seed, 60)})),
            };
            size += line(&mut out, seq, kind, data);
        }
        if n == 0 {
            size += line(
                &mut out,
                seq + 1,
                "assistant_message",
                json!({"text": "the quokka was here"}),
            );
        }
        out.flush().unwrap();
        written += size;
        n += 1;
    }
    (written, n)
}

fn files(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root.join("home/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// Reads every file on all cores; with `find`, counts lines holding it (grep -c -F).
fn baseline(paths: &[PathBuf], find: Option<&[u8]>) -> (Duration, u64) {
    let t = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = paths.len().div_ceil(threads);
    let hits: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = paths
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let mut hits = 0u64;
                    for p in part {
                        let b = std::fs::read(p).unwrap();
                        if let Some(f) = find {
                            hits += memchr::memmem::find_iter(&b, f).count() as u64;
                        } else {
                            hits += b.len() as u64 & 1;
                        }
                    }
                    hits
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (t.elapsed(), hits)
}

struct Daemon(Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn call(socket: &Path, method: &str, params: Value) -> Option<Value> {
    let mut w = UnixStream::connect(socket).ok()?;
    let mut r = BufReader::new(w.try_clone().ok()?);
    let mut msg =
        serde_json::to_vec(&json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}))
            .ok()?;
    msg.push(b'\n');
    w.write_all(&msg).ok()?;
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).ok()?;
    serde_json::from_slice::<Value>(&line)
        .ok()?
        .get("result")
        .cloned()
}

fn main() {
    let mb: u64 = std::env::var("BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let tmp = std::env::temp_dir().join(format!("agentd-search-bench-{}", std::process::id()));
    let t = Instant::now();
    let (bytes, sessions) = write_home(&tmp, mb);
    let mib = bytes as f64 / (1024.0 * 1024.0);
    println!(
        "home: {sessions} sessions, {mib:.0} MiB (written in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let paths = files(&tmp);
    let _ = baseline(&paths, None); // warm the page cache
    let socket = tmp.join("run/agentd.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .env("AGENTD_HOME", tmp.join("home"))
        .env("AGENTD_SOCKET", &socket)
        .env("AGENTD_CONFIG", tmp.join("none.toml"))
        .env("AGENTD_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn agentd");
    let _d = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while call(&socket, "agentd/hello", json!({})).is_none() {
        assert!(Instant::now() < deadline, "agentd did not answer");
        std::thread::sleep(Duration::from_millis(5));
    }
    let rate = |d: Duration| mib / d.as_secs_f64();
    for round in 1..=3 {
        let (raw, _) = baseline(&paths, None);
        let (grep, n) = baseline(&paths, Some(b"quokka"));
        let t = Instant::now();
        let r = call(
            &socket,
            "agentd/search",
            json!({"query": "quokka", "limit": 10}),
        )
        .expect("search");
        let s = t.elapsed();
        let hits = r["hits"].as_array().map_or(0, Vec::len);
        assert_eq!(hits, 1, "{r}");
        assert_eq!(n, 1);
        let t = Instant::now();
        let r = call(
            &socket,
            "agentd/search",
            json!({"query": "Quokka", "limit": 10}),
        )
        .expect("search");
        let ci = t.elapsed();
        assert_eq!(r["hits"].as_array().map_or(0, Vec::len), 1);
        println!(
            "round {round}: raw read {:7.0} MiB/s | memmem grep {:7.0} MiB/s | agentd/search {:7.0} MiB/s ({:.0} ms, {:.2}x grep) | ignore-case query {:7.0} MiB/s",
            rate(raw),
            rate(grep),
            rate(s),
            s.as_secs_f64() * 1000.0,
            grep.as_secs_f64() / s.as_secs_f64(),
            rate(ci)
        );
    }
    println!("target: agentd/search >= 300 MB/s (286 MiB/s)");
    let _ = std::fs::remove_dir_all(&tmp);
}
