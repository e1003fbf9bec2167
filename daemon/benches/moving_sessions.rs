//! Import and export throughput of a long session of each peer (docs/moving-sessions.md,
//! "Throughput"), each against reading the same bytes raw, measured in the same run.
//!
//! A pi session of `BENCH_MESSAGES` pi messages (default 30,000, 37,500 conversation items in agentd: per turn a
//! prompt, an answer with a `bash` call, the call's result and a closing answer, with
//! typical lengths) is synthesized and imported into an agentd Log; that Log is exported
//! to Claude Code, Codex and pi, giving one session of each peer's native format. Then,
//! per peer, best of `BENCH_ROUNDS` (default 3):
//! - raw: the peer file read whole and its lines counted (the baseline);
//! - import: `agentd::import::import` of the peer file into a Log in memory;
//! - export: the Log's bytes parsed into events and exported to that peer (baseline: the
//!   Log read raw the same way).
//!
//! Run: `cargo bench -p agentd --bench moving_sessions` (`--profile dev` for an unoptimized build)

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use agentd::import::export::{self, ExportContext, Peer};
use agentd::import::{import, Format, ImportContext};
use agentd_proto::Event;
use serde_json::json;

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A pi v3 session of about `messages` conversation messages, 4 per turn.
fn synthesize(path: &Path, messages: u64) -> std::io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    let ts = "2026-11-27T03:04:05.678Z";
    writeln!(
        w,
        "{}",
        json!({"type": "session", "version": 3, "id": "01a21b45-0000-7000-8000-000000000000",
            "timestamp": ts, "cwd": "/work/bench"})
    )?;
    let output = "src/stockcount.py:10:  # TODO: skip rows whose qty is not a number\n".repeat(24);
    let answer = "The totals per warehouse are Lyon 6, Zürich 5 and Ōsaka 7; the parser reads the \
                  CSV with DictReader and sums the qty column per warehouse. "
        .repeat(3);
    let mut n = 0u64;
    let mut parent: Option<String> = None;
    let mut put = |w: &mut BufWriter<File>, msg: serde_json::Value| -> std::io::Result<()> {
        n += 1;
        let id = format!("{n:08x}");
        let line = json!({"type": "message", "id": id, "parentId": parent, "timestamp": ts,
            "message": msg});
        parent = Some(id);
        writeln!(w, "{line}")
    };
    for turn in 0..messages.div_ceil(4) {
        let call = format!("call_{turn}|fc_{turn}");
        put(
            &mut w,
            json!({"role": "user", "content": [{"type": "text",
                "text": format!("Turn {turn}: find every TODO under src/ and tell me which ones matter.")}],
                "timestamp": 0}),
        )?;
        put(
            &mut w,
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Searching the sources for TODO comments."},
                {"type": "toolCall", "id": call, "name": "bash",
                 "arguments": {"command": "grep -rn TODO src/"}}],
                "api": "openai-responses", "provider": "openai", "model": "gpt-5",
                "usage": {"input": 1200, "output": 40, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1240,
                          "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                "stopReason": "toolUse", "timestamp": 0}),
        )?;
        put(
            &mut w,
            json!({"role": "toolResult", "toolCallId": call, "toolName": "bash",
                "content": [{"type": "text", "text": output}], "isError": false, "timestamp": 0}),
        )?;
        put(
            &mut w,
            json!({"role": "assistant", "content": [{"type": "text", "text": answer}],
                "api": "openai-responses", "provider": "openai", "model": "gpt-5",
                "usage": {"input": 2400, "output": 90, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2490,
                          "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                "stopReason": "stop", "timestamp": 0}),
        )?;
    }
    w.flush()
}

fn ctx() -> ImportContext {
    ImportContext {
        session_id: "20261127T030405-b3ac4e".into(),
        workspace: Some("/work/bench".into()),
        agentd_version: "bench".into(),
        ..Default::default()
    }
}

/// Reads `path` whole and counts its lines: what any reader of the file must do.
fn raw_read(path: &Path) -> (usize, usize) {
    let mut buf = Vec::new();
    File::open(path).unwrap().read_to_end(&mut buf).unwrap();
    let lines = newlines(&buf);
    (buf.len(), lines)
}

fn newlines(b: &[u8]) -> usize {
    b.iter().filter(|&&c| c == b'\n').count()
}

fn events_of(log: &[u8]) -> Vec<Event> {
    log.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a Log line is an event"))
        .collect()
}

fn best(rounds: u64, mut f: impl FnMut()) -> Duration {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn mib_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64()
}

fn main() {
    let messages = env_u64("BENCH_MESSAGES", 30_000);
    let rounds = env_u64("BENCH_ROUNDS", 3).max(1);
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed-pi.jsonl");
    synthesize(&seed, messages).unwrap();
    let mut log = Vec::new();
    import(Some(Format::Pi), &seed, &mut log, &ctx()).unwrap();
    let events = events_of(&log);
    let log_path = dir.path().join("session.ndjson");
    std::fs::write(&log_path, &log).unwrap();
    let msgs = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "user_message" | "assistant_message" | "tool_call" | "tool_result"
            )
        })
        .count();
    println!(
        "moving_sessions: {msgs} messages ({} events, Log {:.1} MiB), best of {rounds}",
        events.len(),
        log.len() as f64 / 1048576.0
    );
    let xctx = ExportContext {
        session_id: "0b5e8a8e-1c1f-4c57-9a55-5f2f4a3b2c1d".into(),
        now: "2026-11-27T05:00:00.000Z".into(),
        codex_provider: None,
    };
    let raw_log = best(rounds, || {
        std::hint::black_box(raw_read(&log_path));
    });
    println!(
        "  Log raw read: {:.1} ms ({:.0} MiB/s)",
        raw_log.as_secs_f64() * 1e3,
        mib_s(log.len(), raw_log)
    );
    for (peer, format) in [
        (Peer::ClaudeCode, Format::Claude),
        (Peer::Codex, Format::Codex),
        (Peer::Pi, Format::Pi),
    ] {
        let x = export::export(peer, &events, &xctx).unwrap();
        let file = dir.path().join(&x.file_name);
        std::fs::write(&file, &x.bytes).unwrap();
        let size = x.bytes.len();
        let raw = best(rounds, || {
            std::hint::black_box(raw_read(&file));
        });
        let mut imported = 0;
        let imp = best(rounds, || {
            let mut out = Vec::with_capacity(log.len());
            let r = import(Some(format), &file, &mut out, &ctx()).unwrap();
            imported = r.imported;
            std::hint::black_box(out);
        });
        let exp = best(rounds, || {
            let bytes = std::fs::read(&log_path).unwrap();
            let evs = events_of(&bytes);
            std::hint::black_box(export::export(peer, &evs, &xctx).unwrap());
        });
        println!(
            "  {:<11} file {:>6.1} MiB | raw read {:>7.1} ms {:>6.0} MiB/s | import {:>7.1} ms {:>5.0} MiB/s ({:.0} messages/s, {:.1}x raw, {imported} events) | export {:>7.1} ms {:>5.0} MiB/s of Log ({:.0} messages/s, {:.1}x the Log's raw read)",
            peer.as_str(),
            size as f64 / 1048576.0,
            raw.as_secs_f64() * 1e3,
            mib_s(size, raw),
            imp.as_secs_f64() * 1e3,
            mib_s(size, imp),
            msgs as f64 / imp.as_secs_f64(),
            imp.as_secs_f64() / raw.as_secs_f64(),
            exp.as_secs_f64() * 1e3,
            mib_s(log.len(), exp),
            msgs as f64 / exp.as_secs_f64(),
            exp.as_secs_f64() / raw_log.as_secs_f64(),
        );
    }
}
