//! A `pre_tool_use` hook's added latency per tool call (docs/hooks.md), against the same
//! turns without a hook, measured in the same run.
//!
//! Two daemons run side by side (durability `none`, the default command sandbox): one
//! without hooks, one with `[[hooks.pre_tool_use]] command = "true"`. Turns of the
//! zero-latency `script` provider make `BENCH_ITERS` (default 10) `list_dir` calls each,
//! `BENCH_TURNS` (default 10) turns per daemon, alternating between the two so both see
//! the same machine load. An iteration's time is the gap between consecutive
//! `tool_result` timestamps of one turn (daemon clock, µs): provider step, `tool_call`
//! append, the hook (sandbox set-up, `bash -c true`, its `hook_run` append), the call,
//! its `tool_result`. The hook's own `duration_ms` is reported too.
//!
//! Run: `cargo bench -p agentd --bench hooks` (`BENCH_AGENTD=PATH` runs another build).

mod support;

use serde_json::{json, Value};
use support::{env_usize, start, Conn};

fn ts_micros(ts: &str) -> i128 {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
        .expect("event ts");
    t.unix_timestamp_nanos() / 1000
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// One turn of `iters` calls on `sid`; pushes its iteration gaps (ms) and the hook
/// runs' durations (ms).
fn turn(
    c: &mut Conn,
    sid: &str,
    k: usize,
    iters: usize,
    gaps: &mut Vec<f64>,
    hooks: &mut Vec<f64>,
) {
    let before = c.call("agentd/show", json!({"session_id": sid}))["last_seq"]
        .as_u64()
        .expect("last_seq");
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": format!("bench turn {k}"), "max_iterations": iters + 1}),
    );
    assert_eq!(r["status"], "completed", "{r}");
    let evs = c.call(
        "agentd/events",
        json!({"session_id": sid, "after_seq": before, "types": ["tool_result", "hook_run"]}),
    );
    let evs = evs["events"].as_array().expect("events");
    let stamps: Vec<i128> = evs
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| ts_micros(e["ts"].as_str().expect("ts")))
        .collect();
    assert_eq!(stamps.len(), iters, "one tool_result per iteration");
    gaps.extend(stamps.windows(2).map(|w| (w[1] - w[0]) as f64 / 1000.0));
    for e in evs.iter().filter(|e| e["type"] == "hook_run") {
        assert_eq!(e["data"]["verdict"], "allow", "{e}");
        hooks.push(e["data"]["duration_ms"].as_f64().unwrap_or(f64::NAN));
    }
}

fn row(name: &str, v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let p50 = percentile(v, 0.5);
    println!(
        "{name:<28} p50 {:>8.3} ms  p99 {:>8.3} ms  ({} samples)",
        p50,
        percentile(v, 0.99),
        v.len()
    );
    p50
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let turns = env_usize("BENCH_TURNS", 10);
    let iters = env_usize("BENCH_ITERS", 10);
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    for i in 0..10 {
        std::fs::write(ws.join(format!("f{i}.txt")), "x\n").expect("workspace file");
    }
    let mut steps: Vec<Value> = (0..iters)
        .map(|_| json!({"tool_calls": [{"name": "list_dir", "args": {"path": "."}}]}))
        .collect();
    steps.push(json!({"text": "done"}));
    let script = dir.path().join("bench.json");
    std::fs::write(
        &script,
        serde_json::to_vec(&json!({"rules": [{"steps": steps}]})).expect("script"),
    )
    .expect("write script");
    let model = format!("script:{}", script.display());
    let (_plain, mut plain) = start(&dir.path().join("plain"), "");
    let (_hooked, mut hooked) = start(
        &dir.path().join("hooked"),
        "[[hooks.pre_tool_use]]\ncommand = \"true\"\n",
    );
    let sid = |c: &mut Conn| {
        c.call("agentd/create", json!({"workspace": ws, "model": model}))["session_id"]
            .as_str()
            .expect("session id")
            .to_string()
    };
    let (ps, hs) = (sid(&mut plain), sid(&mut hooked));
    let (mut pg, mut hg, mut runs, mut none) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for k in 0..turns {
        turn(&mut plain, &ps, k, iters, &mut pg, &mut none);
        turn(&mut hooked, &hs, k, iters, &mut hg, &mut runs);
    }
    assert!(none.is_empty(), "the plain daemon ran hooks");
    assert_eq!(runs.len(), turns * iters, "one hook run per call");
    println!("hooks: {turns} turns × {iters} list_dir calls per daemon, durability none, default sandbox");
    let base = row("iteration, no hook", &mut pg);
    let with = row("iteration, pre_tool_use true", &mut hg);
    row("hook_run duration_ms", &mut runs);
    println!("added by the hook (p50 difference): {:.3} ms", with - base);
}
