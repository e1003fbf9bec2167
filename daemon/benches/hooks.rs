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

use serde_json::json;
use support::{env_usize, iteration_gaps, list_dir_turns, percentile, start, turn_events, Conn};

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
    let input = format!("bench turn {k}");
    let (evs, _) = turn_events(c, sid, &input, iters, &["tool_result", "hook_run"]);
    gaps.extend(iteration_gaps(&evs, iters));
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
    let (ws, model) = list_dir_turns(dir.path(), iters);
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
