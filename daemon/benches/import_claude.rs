//! Claude Code import throughput and memory: synthesizes a Claude Code transcript of
//! `BENCH_MB` MiB (default 1024) shaped like a real one (per turn: a prompt, harness
//! attachments, an `api-request-blob` copy of the request, an API message split into
//! thinking/text/tool_use records with one `message.id`, a tool result, bookkeeping; a
//! parallel pair that branches the tree every 20 turns; a rewound side branch every 50),
//! imports it into a Log file, and prints MiB/s, events and peak RSS (VmHWM) before and
//! after the import. The source is generated first, so its page cache is warm.
//!
//! Run: `BENCH_MB=1024 cargo bench -p agentd --bench import_claude`

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::Instant;

use agentd::import::{import, Format, ImportContext};
use serde_json::{json, Value};

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

struct Gen {
    w: BufWriter<File>,
    written: u64,
    n: u64,
}

impl Gen {
    fn put(&mut self, v: Value) -> std::io::Result<()> {
        let s = v.to_string();
        self.written += s.len() as u64 + 1;
        writeln!(self.w, "{s}")
    }

    fn uuid(&mut self) -> String {
        self.n += 1;
        format!("{:08x}-0000-4000-8000-{:012x}", self.n, self.n)
    }
}

fn record(kind: &str, uuid: &str, parent: Option<&str>, extra: Value) -> Value {
    let mut v = json!({
        "parentUuid": parent, "isSidechain": false, "type": kind, "uuid": uuid,
        "timestamp": "2026-11-25T06:18:48.346Z", "userType": "external",
        "entrypoint": "cli", "cwd": "/work/bench", "sessionId": "bench-session",
        "version": "2.1.328", "gitBranch": "main",
    });
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

fn assistant(uuid: &str, parent: &str, msg: &str, block: Value) -> Value {
    record(
        "assistant",
        uuid,
        Some(parent),
        json!({"message": {"id": msg, "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [block], "stop_reason": "tool_use",
            "usage": {"input_tokens": 1200, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 30000, "output_tokens": 250}},
            "requestId": "req_bench"}),
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target_mib: u64 = std::env::var("BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = tempfile::tempdir()?;
    let src = dir.path().join("transcript.jsonl");
    let mut g = Gen {
        w: BufWriter::with_capacity(1 << 20, File::create(&src)?),
        written: 0,
        n: 0,
    };
    let reminder = "Context the harness adds to each request. ".repeat(60);
    let blob = "A copy of the request body as the harness sent it. ".repeat(300);
    let output = "line of tool output, fairly typical in length\n".repeat(80);
    let mut parent: Option<String> = None;
    let mut turn: u64 = 0;
    let started = Instant::now();
    while g.written < target_mib * 1024 * 1024 {
        turn += 1;
        g.put(
            json!({"type": "queue-operation", "operation": "enqueue", "sessionId": "bench-session",
                     "timestamp": "2026-11-25T06:18:48.316Z", "content": "please continue"}),
        )?;
        let u = g.uuid();
        g.put(record(
            "user",
            &u,
            parent.as_deref(),
            json!({"message": {"role": "user",
            "content": format!("step {turn}: please continue")}}),
        ))?;
        let at = g.uuid();
        g.put(record(
            "attachment",
            &at,
            Some(&u),
            json!({"attachment": {"type": "total_tokens_reminder",
            "text": reminder}}),
        ))?;
        g.put(
            json!({"type": "api-request-blob", "sessionId": "bench-session", "hash": "h",
                     "message": {"role": "user", "content": [{"type": "text", "text": blob}]}}),
        )?;
        if turn.is_multiple_of(50) {
            // A rewound attempt: an answer the user abandoned.
            let side = g.uuid();
            g.put(assistant(
                &side,
                &at,
                &format!("msg_side_{turn}"),
                json!({"type": "text", "text": "abandoned"}),
            ))?;
        }
        let msg = format!("msg_{turn}");
        let th = g.uuid();
        g.put(assistant(
            &th,
            &at,
            &msg,
            json!({"type": "thinking",
            "thinking": "Thinking about what to read next.", "signature": "c2ln"}),
        ))?;
        let tx = g.uuid();
        g.put(assistant(
            &tx,
            &th,
            &msg,
            json!({"type": "text", "text": "Reading the file."}),
        ))?;
        let call = format!("toolu_{turn}a");
        let tu = g.uuid();
        g.put(assistant(
            &tu,
            &tx,
            &msg,
            json!({"type": "tool_use", "id": call, "name": "Read",
            "input": {"file_path": "/work/bench/src/lib.rs"}}),
        ))?;
        if turn.is_multiple_of(20) {
            // The parallel pair: the second tool_use and its result sit off the chain.
            let call_b = format!("toolu_{turn}b");
            let tb = g.uuid();
            g.put(assistant(
                &tb,
                &tu,
                &msg,
                json!({"type": "tool_use", "id": call_b,
                "name": "Bash", "input": {"command": "ls"}}),
            ))?;
            let rb = g.uuid();
            g.put(record("user", &rb, Some(&tb), json!({"message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_b, "content": "a\nb\n", "is_error": false}]},
                "toolUseResult": {"stdout": "a\nb\n"}})))?;
        }
        let r = g.uuid();
        g.put(record("user", &r, Some(&tu), json!({"message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "content": output, "is_error": false}]},
            "toolUseResult": {"type": "text", "file": {"filePath": "/work/bench/src/lib.rs", "content": output}}})))?;
        g.put(
            json!({"type": "last-prompt", "lastPrompt": "please continue", "leafUuid": r,
                     "sessionId": "bench-session"}),
        )?;
        parent = Some(r);
    }
    g.w.flush()?;
    drop(g.w);
    let size = std::fs::metadata(&src)?.len();
    let gen_secs = started.elapsed().as_secs_f64();
    let hwm_before = vm_hwm_kib();

    let out_path = dir.path().join("imported.ndjson");
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&out_path)?);
    let ctx = ImportContext {
        session_id: "20261125T070000-bench1".into(),
        agentd_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let t = Instant::now();
    let report = import(Some(Format::Claude), &src, &mut out, &ctx).map_err(|e| e.to_string())?;
    out.flush()?;
    let secs = t.elapsed().as_secs_f64();
    let hwm_after = vm_hwm_kib();
    drop(out);
    let out_size = std::fs::metadata(&out_path)?.len();
    let mib = size as f64 / (1024.0 * 1024.0);
    println!(
        "source: {mib:.1} MiB, {} lines, {turn} turns (generated in {gen_secs:.1}s)",
        report.source_lines
    );
    println!(
        "import: {:.2}s, {:.0} MiB/s; {} events ({:.1} MiB), {} lines skipped",
        secs,
        mib / secs,
        report.imported,
        out_size as f64 / (1024.0 * 1024.0),
        report.skipped_total
    );
    if let (Some(b), Some(a)) = (hwm_before, hwm_after) {
        println!(
            "peak RSS: {:.1} MiB before import, {:.1} MiB after (+{:.1} MiB)",
            b as f64 / 1024.0,
            a as f64 / 1024.0,
            a.saturating_sub(b) as f64 / 1024.0
        );
    }
    Ok(())
}
