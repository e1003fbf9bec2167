//! A subagent's added latency (docs/subagents.md): the same work as a plain turn and as
//! a `task` call, on one daemon with the zero-latency `script` provider (durability
//! `none`, the default sandbox).
//!
//! Three turns, `BENCH_TURNS` times each (default 30), in alternation so load hits them
//! alike: `plain` answers its prompt in one step; `list_dir` calls `list_dir` once, then
//! answers; `task` calls `task` with the plain prompt (the child answers it in one step),
//! then answers. A subagent's added latency is `task − list_dir − plain` at the median:
//! what creating the child session, admitting and running its turn and returning its
//! answer cost beyond the parent's own step and the child's own turn.
//!
//! Run: `cargo bench -p agentd --bench subagent` (`BENCH_AGENTD=PATH` runs another build).

mod support;

use serde_json::json;
use std::time::Instant;
use support::{env_usize, start, Conn};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn p90(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(v.len() * 9 / 10).min(v.len() - 1)]
}

/// Runs one turn in a fresh session; milliseconds from the request to its answer.
fn turn(c: &mut Conn, ws: &str, model: &str, input: &str, want: &str) -> f64 {
    let sid = c.call("agentd/create", json!({"workspace": ws, "model": model}))["session_id"]
        .as_str()
        .expect("session id")
        .to_string();
    let t = Instant::now();
    let r = c.call("agentd/turn", json!({"session_id": sid, "input": input}));
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(r["output_text"], want, "{r}");
    ms
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let turns = env_usize("BENCH_TURNS", 30);
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    let script = dir.path().join("bench.json");
    let rules = json!({"rules": [
        {"match": "Answer plainly", "steps": [{"text": "plain answer"}]},
        {"match": "List first", "steps": [
            {"tool_calls": [{"name": "list_dir", "args": {"path": "."}}]},
            {"text": "listed"}]},
        {"match": "Delegate", "steps": [
            {"tool_calls": [{"name": "task", "args": {"prompt": "Answer plainly"}}]},
            {"text": "delegated"}]},
    ]});
    std::fs::write(&script, serde_json::to_vec(&rules).expect("script")).expect("write script");
    let model = format!("script:{}", script.display());
    let (_d, mut c) = start(&dir.path().join("d"), "");
    let ws = ws.display().to_string();
    let (mut plain, mut listed, mut task) = (Vec::new(), Vec::new(), Vec::new());
    // One warm-up round.
    turn(&mut c, &ws, &model, "Answer plainly", "plain answer");
    turn(&mut c, &ws, &model, "Delegate", "delegated");
    for _ in 0..turns {
        plain.push(turn(&mut c, &ws, &model, "Answer plainly", "plain answer"));
        listed.push(turn(&mut c, &ws, &model, "List first", "listed"));
        task.push(turn(&mut c, &ws, &model, "Delegate", "delegated"));
    }
    println!("subagent: {turns} turns of each kind, script provider, durability none");
    for (name, v) in [
        ("plain turn (1 step)", &mut plain),
        ("list_dir turn (2 steps)", &mut listed),
        ("task turn (2 steps + the child's turn)", &mut task),
    ] {
        println!(
            "{name:<42} p50 {:>8.3} ms  p90 {:>8.3} ms",
            median(v),
            p90(v)
        );
    }
    let added = median(&mut task) - median(&mut listed) - median(&mut plain);
    println!("added by the subagent (p50: task - list_dir - plain): {added:.3} ms");
}
