//! Measures what the command sandbox costs an MCP server (docs/mcp.md#the-sandboxs-cost):
//!
//! 1. Start: `agentd/mcp_tools` probes of the in-repo fake server, alternately unconfined
//!    (`open`) and sandboxed (`boxed`): spawn → handshake answered (`started_ms`), and
//!    the whole probe (start, `tools/list`, stop) as the client sees it.
//! 2. Calls: one turn whose one step asks for `MEASURE_CALLS` `echo` calls, per server,
//!    in the same session;
//!    the turn's wall time per call, unconfined against sandboxed (the difference is
//!    what the sandbox adds to a call: seccomp on the server's system calls).
//!
//! Durability is `none`. Binaries come from the same profile as this example, or from
//! `AGENTD_TEST_BIN_DIR`:
//!
//! ```sh
//! cargo build --release -p agentd -p agentctl -p agentd-mcp
//! AGENTD_TEST_BIN_DIR=$PWD/target/release cargo run --release -p agentd-tests --example mcp_sandbox_measure
//! ```
//!
//! Env: `MEASURE_STARTS` (default 30 per server), `MEASURE_CALLS` (default 300).

use agentd_tests::{bin, Daemon};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn env_n(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let starts = env_n("MEASURE_STARTS", 30);
    let calls = env_n("MEASURE_CALLS", 300);
    let fake = bin("agentd-mcp-fake").display().to_string();
    let config = format!(
        "[mcp_servers.open]\ncommand = {fake:?}\n[mcp_servers.boxed]\ncommand = {fake:?}\nsandbox = true\n"
    );
    let d = Daemon::builder()
        .env("AGENTD_DURABILITY", "none")
        .config(&config)
        .start();
    let mut c = d.connect();
    c.set_call_timeout(Duration::from_secs(120));

    let mut handshake: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut probe: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let servers = ["open", "boxed"];
    for _ in 0..starts {
        for (i, s) in servers.iter().enumerate() {
            let t = Instant::now();
            let v = c.call_ok(
                "agentd/mcp_tools",
                json!({"server": s, "workspace": d.workspace()}),
            );
            probe[i].push(t.elapsed().as_secs_f64() * 1000.0);
            let st = &v["servers"][0];
            assert_eq!(st["state"], "ready", "{v}");
            handshake[i].push(st["started_ms"].as_f64().unwrap());
        }
    }
    println!("start, {starts} probes per server (ms):");
    for (i, s) in servers.iter().enumerate() {
        println!(
            "  {s:<6} handshake p50 {:>6.1}  p90 {:>6.1} | whole probe p50 {:>6.1}  p90 {:>6.1}",
            pct(handshake[i].clone(), 0.5),
            pct(handshake[i].clone(), 0.9),
            pct(probe[i].clone(), 0.5),
            pct(probe[i].clone(), 0.9),
        );
    }

    let sid = c.call_ok("agentd/create", json!({"workspace": d.workspace()}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut per_call = Vec::new();
    for s in servers {
        let script = |name: &str, n: usize| {
            let calls: Vec<Value> = (0..n)
                .map(|i| {
                    json!({"name": format!("mcp__{s}__echo"), "args": {"message": format!("m{i}")}})
                })
                .collect();
            let body = json!({"rules": [{"steps": [{"tool_calls": calls}, {"text": "done"}]}]});
            let p = d.root().join(format!("{s}-{name}.json"));
            std::fs::write(&p, serde_json::to_vec(&body).unwrap()).unwrap();
            format!("script:{}", p.display())
        };
        // A warm-up turn starts the session's servers; the measured turn reuses them.
        let warm = c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": "warm", "model": script("warm", 1)}),
        );
        assert_eq!(warm["status"], "completed", "{warm}");
        let model = script("calls", calls);
        let t = Instant::now();
        let r = c.call_ok(
            "agentd/turn",
            json!({"session_id": sid, "input": "go", "model": model}),
        );
        let el = t.elapsed();
        assert_eq!(r["status"], "completed", "{r}");
        per_call.push(el.as_secs_f64() * 1e6 / calls as f64);
    }
    println!("calls, one turn of {calls} echo calls per server (µs per call, whole turn step):");
    for (s, us) in servers.iter().zip(&per_call) {
        println!("  {s:<6} {us:>8.1}");
    }
    println!(
        "  sandbox adds {:+.1} µs per call",
        per_call[1] - per_call[0]
    );
}
