//! Helpers of the measuring examples (`tests/examples/*_measure.rs`): their settings
//! from the environment and a synthetic Log of any length written straight into a home.

use serde_json::{json, Value};
use std::io::{BufWriter, Write};
use std::path::Path;

/// `key` from the environment as a number, else `default`.
pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A deterministic text generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn text(&mut self, len: usize) -> String {
        const WORDS: [&str; 12] = [
            "let",
            "self",
            "match",
            "Ok(())",
            "fn",
            "return",
            "tokio",
            "crate::x",
            "//",
            "42",
            "error:",
            "path/a.rs",
        ];
        let mut s = String::with_capacity(len + 16);
        while s.len() < len {
            s.push_str(WORDS[(self.next() % 12) as usize]);
            s.push(if self.next().is_multiple_of(9) {
                '\n'
            } else {
                ' '
            });
        }
        s.truncate(len);
        s
    }
}

/// Writes a Log of `n` events for `sid` in `home`: turns of user and assistant
/// messages, tool calls with 1–8 KiB outputs, usage records (same seed, same bytes).
pub fn write_log(home: &Path, sid: &str, workspace: &Path, n: u64) {
    let dir = home.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(dir.join(format!("{sid}.ndjson"))).unwrap(),
    );
    let mut rng = Lcg(7);
    let mut seq = 0u64;
    let mut put = |kind: &str, data: Value, seq: &mut u64| {
        if *seq >= n {
            return;
        }
        let v = json!({"id": format!("{:016x}", seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            "session_id": sid, "seq": *seq,
            "ts": format!("2026-11-01T00:00:00.{:06}Z", *seq % 1_000_000),
            "type": kind, "data": data});
        out.write_all(format!("{v}\n").as_bytes()).unwrap();
        *seq += 1;
    };
    put(
        "session_started",
        json!({"workspace": workspace, "agentd_version": "measure", "log_format": 1, "title": "100k"}),
        &mut seq,
    );
    let mut turn = 0u64;
    while seq + 12 < n {
        turn += 1;
        let tid = format!("t{turn}");
        put("turn_started", json!({"turn_id": tid}), &mut seq);
        put("user_message", json!({"text": rng.text(200)}), &mut seq);
        for k in 0..(turn % 3) {
            put(
                "provider_usage",
                json!({"provider": "p", "model": "m", "usage": {"input_tokens": 1000, "output_tokens": 200}, "context_window": 200000}),
                &mut seq,
            );
            let call_id = format!("call_{turn}_{k}");
            put(
                "tool_call",
                json!({"call_id": call_id, "name": "read_file", "args": {"path": format!("src/m{k}.rs")}}),
                &mut seq,
            );
            let len = 1024 + (rng.next() % 7168) as usize;
            put(
                "tool_result",
                json!({"call_id": call_id, "ok": true, "output": rng.text(len)}),
                &mut seq,
            );
        }
        put(
            "assistant_message",
            json!({"text": rng.text(300)}),
            &mut seq,
        );
        put(
            "turn_ended",
            json!({"turn_id": tid, "status": "completed"}),
            &mut seq,
        );
    }
    while seq < n {
        put(
            "assistant_message",
            json!({"text": rng.text(100)}),
            &mut seq,
        );
    }
    out.flush().unwrap();
    out.get_ref().sync_all().unwrap();
}
