//! Time a workspace snapshot adds to a tool iteration (docs/snapshots.md), on a workspace of
//! 10,000 files (100 directories × 100 files), against a baseline measured in the same
//! run: two daemons, one with `[snapshots] enabled = false`, each with its own identical
//! workspace, their turns interleaved so both see the same machine load.
//!
//! An iteration is the gap between consecutive `tool_result` timestamps of one turn
//! (daemon clock, µs); durability is `none`, so fsync is excluded. Two tools:
//! `write_file` (the snapshot after it rescans only its target) and `shell` (the snapshot
//! after it rescans the whole workspace). The `before` snapshot of each turn's first
//! mutating call is not inside any gap; its own duration (`duration_ms` of the event) is
//! reported separately. Each daemon first runs one unmeasured turn (the first snapshot
//! of a workspace hashes every file).
//!
//! Run: `cargo bench -p agentd --bench snapshot_overhead` (`BENCH_TURNS`, default 5;
//! `BENCH_ITERS`, default 20; `BENCH_FILES`, default 10000).

mod support;

use serde_json::{json, Value};
use std::path::Path;
use support::{env_usize, iteration_gaps, percentile, start, turn_events, Conn, Daemon};

fn workspace(dir: &Path, files: usize) {
    for i in 0..files {
        let sub = dir.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub).expect("workspace dir");
        }
        std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\n")).expect("file");
    }
    std::fs::create_dir_all(dir.join("bench")).expect("bench dir");
}

/// One side of the comparison: a daemon, its session, and the gaps measured so far.
struct Side {
    _daemon: Daemon,
    c: Conn,
    sid: String,
    gaps: Vec<f64>,
    before_ms: Vec<f64>,
}

impl Side {
    fn new(root: &Path, name: &str, config: &str, files: usize, model: &str) -> Side {
        let dir = root.join(name);
        let ws = dir.join("ws");
        workspace(&ws, files);
        let (daemon, mut c) = start(&dir, config);
        let sid = c.call("agentd/create", json!({"workspace": ws, "model": model}))["session_id"]
            .as_str()
            .expect("session id")
            .to_string();
        Side {
            _daemon: daemon,
            c,
            sid,
            gaps: Vec::new(),
            before_ms: Vec::new(),
        }
    }

    /// Runs one turn; records its iteration gaps unless `warmup`.
    fn turn(&mut self, input: &str, iters: usize, warmup: bool) {
        let types = ["tool_result", "workspace_snapshot"];
        let (evs, _) = turn_events(&mut self.c, &self.sid, input, iters, &types);
        for e in &evs {
            if e["type"] == "workspace_snapshot" {
                assert!(e["data"]["tree"].is_string(), "snapshot failed: {e}");
            }
        }
        if warmup {
            return;
        }
        self.gaps.extend(iteration_gaps(&evs, iters));
        self.before_ms.extend(
            evs.iter()
                .filter(|e| e["data"]["reason"] == "before")
                .filter_map(|e| e["data"]["duration_ms"].as_f64()),
        );
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(v, p)
}

fn p50(v: &mut [f64]) -> f64 {
    pct(v, 0.5)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let turns = env_usize("BENCH_TURNS", 5);
    let iters = env_usize("BENCH_ITERS", 20);
    let files = env_usize("BENCH_FILES", 10_000);
    let root = tempfile::tempdir().expect("tempdir");
    let script = root.path().join("bench.json");
    let write_steps: Vec<Value> = (0..iters)
        .map(|i| {
            json!({"tool_calls": [{"name": "write_file",
            "args": {"path": format!("bench/w{i}.txt"), "content": format!("step {i}\n")}}]})
        })
        .chain([json!({"text": "done"})])
        .collect();
    let shell_steps: Vec<Value> = (0..iters)
        .map(|i| {
            json!({"tool_calls": [{"name": "shell",
            "args": {"command": format!("echo $$ {i} > bench/s{i}.txt")}}]})
        })
        .chain([json!({"text": "done"})])
        .collect();
    let body = json!({"rules": [
        {"match": "write", "steps": write_steps},
        {"match": "shell", "steps": shell_steps},
    ]});
    std::fs::write(&script, serde_json::to_vec(&body).expect("script")).expect("write script");
    let model = format!("script:{}", script.display());
    println!(
        "snapshot_overhead: {files}-file workspace, {turns} turns × {iters} tool iterations per tool, durability none"
    );
    println!(
        "{:>10}  {:>14}  {:>14}  {:>10}  {:>14}  {:>14}  {:>10}  {:>16}  {:>8}",
        "tool",
        "baseline p50",
        "snapshots p50",
        "added p50",
        "baseline p90",
        "snapshots p90",
        "added p90",
        "before snap p50",
        "samples"
    );
    for tool in ["write", "shell"] {
        let mut off = Side::new(
            root.path(),
            &format!("{tool}-off"),
            "[snapshots]\nenabled = false\n",
            files,
            &model,
        );
        let mut on = Side::new(root.path(), &format!("{tool}-on"), "", files, &model);
        off.turn(tool, iters, true);
        on.turn(tool, iters, true);
        for k in 0..turns {
            let input = format!("{tool} turn {k}");
            off.turn(&input, iters, false);
            on.turn(&input, iters, false);
        }
        let (base, snap) = (p50(&mut off.gaps), p50(&mut on.gaps));
        let (base90, snap90) = (pct(&mut off.gaps, 0.9), pct(&mut on.gaps, 0.9));
        println!(
            "{:>10}  {:>11.3} ms  {:>11.3} ms  {:>7.3} ms  {:>11.3} ms  {:>11.3} ms  {:>7.3} ms  {:>13.1} ms  {:>8}   (target: added p50 <= 20 ms)",
            tool,
            base,
            snap,
            snap - base,
            base90,
            snap90,
            snap90 - base90,
            p50(&mut on.before_ms),
            on.gaps.len()
        );
    }
}
