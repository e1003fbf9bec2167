//! Import throughput and memory: synthesizes a ~100 MB pi session (format v3, a tree
//! with abandoned side branches, so both passes run), imports it into a Log file in a
//! temp dir, and prints MiB/s and peak RSS (VmHWM).
//!
//! Run: `cargo run --release -p agentd --example import_throughput [-- <MiB>]`

use std::fs::File;
use std::io::{BufWriter, Write};

use agentd::import::{import, Format, ImportContext};
use serde_json::json;

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target_mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir()?;
    let src = dir.path().join("big-session.jsonl");
    let mut w = BufWriter::new(File::create(&src)?);
    let ts = "2026-01-02T03:04:05.678Z";
    writeln!(
        w,
        "{}",
        json!({"type": "session", "version": 3, "id": "bench", "timestamp": ts, "cwd": "/work/bench"})
    )?;
    let output: String = "line of tool output, fairly typical in length\n".repeat(80);
    let mut written: u64 = 0;
    let mut n: u64 = 0;
    let mut parent: Option<String> = None;
    let next_id = |n: &mut u64| {
        *n += 1;
        format!("{:08x}", *n)
    };
    while written < target_mib * 1024 * 1024 {
        let mut put = |w: &mut BufWriter<File>, v: serde_json::Value| -> std::io::Result<()> {
            let s = v.to_string();
            written += s.len() as u64 + 1;
            writeln!(w, "{s}")
        };
        let u = next_id(&mut n);
        put(
            &mut w,
            json!({"type": "message", "id": u, "parentId": parent, "timestamp": ts,
            "message": {"role": "user", "content": [{"type": "text", "text": format!("step {n}: please continue")}]}}),
        )?;
        // An abandoned side branch off the user entry.
        if n % 50 == 1 {
            let side = next_id(&mut n);
            put(
                &mut w,
                json!({"type": "message", "id": side, "parentId": u, "timestamp": ts,
                "message": {"role": "assistant", "model": "m", "stopReason": "stop",
                            "content": [{"type": "text", "text": "abandoned"}]}}),
            )?;
        }
        let a = next_id(&mut n);
        let call = format!("call_{a}");
        put(
            &mut w,
            json!({"type": "message", "id": a, "parentId": u, "timestamp": ts,
            "message": {"role": "assistant", "model": "m", "stopReason": "toolUse", "content": [
                {"type": "thinking", "thinking": "thinking about it", "thinkingSignature": "sig"},
                {"type": "text", "text": "Reading the file."},
                {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": "src/lib.rs"}}]}}),
        )?;
        let r = next_id(&mut n);
        put(
            &mut w,
            json!({"type": "message", "id": r, "parentId": a, "timestamp": ts,
            "message": {"role": "toolResult", "toolCallId": call, "toolName": "read",
                        "content": [{"type": "text", "text": output}], "isError": false}}),
        )?;
        parent = Some(r);
    }
    w.flush()?;
    drop(w);
    let size = std::fs::metadata(&src)?.len();
    let hwm_before = vm_hwm_kib();

    let out_path = dir.path().join("imported.ndjson");
    let mut out = File::create(&out_path)?;
    let ctx = ImportContext {
        session_id: "20260102T030405-bench1".into(),
        workspace: None,
        agentd_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let report = import(Some(Format::Pi), &src, &mut out, &ctx).map_err(|e| e.to_string())?;
    out.sync_all()?;
    let hwm_after = vm_hwm_kib();
    let out_size = std::fs::metadata(&out_path)?.len();

    println!(
        "source: {:.1} MiB, {} lines",
        size as f64 / 1048576.0,
        report.source_lines
    );
    println!(
        "output: {:.1} MiB, {} events, {} skipped (off-branch), {} warnings",
        out_size as f64 / 1048576.0,
        report.imported,
        report.skipped_total,
        report.warnings.len()
    );
    println!(
        "import: {} ms, {:.1} MiB/s",
        report.elapsed_ms, report.throughput_mib_s
    );
    println!(
        "peak RSS (VmHWM): {} KiB before import, {} KiB after",
        hwm_before.map_or("?".into(), |v| v.to_string()),
        hwm_after.map_or("?".into(), |v| v.to_string())
    );
    Ok(())
}
