//! MCP call overhead and server start times.
//!
//! 1. Overhead of a call through agentd's client (`Manager::call` + `map_result`) over the
//!    server's own round trip, for `echo`: the same server process answers N calls
//!    written by hand as JSON lines on its pipes (the round trip), then N calls through
//!    the manager; overhead = manager − round trip at p50 and p90. Servers: the in-repo
//!    fake (Rust) and server-everything (Node), when installed.
//! 2. Start time to the first `tools/list` for each reference server: spawn, handshake
//!    (dual era: the discover probe, then `initialize` for a legacy server) and the full
//!    tool list, 5 runs each, median.
//!
//! Run: `cargo bench -p agentd-mcp --bench mcp_overhead` (`BENCH_CALLS`, default 2000).
//! The reference servers come from `bash .ci/mcp.sh` (tests/mcp-servers).

use agentd_mcp::{Manager, ManagerOptions, ServerConfig, StartContext};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn servers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-servers")
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// N echo calls written by hand on the server's pipes, after the legacy handshake.
fn raw_round_trips(cmd: &str, args: &[String], n: usize) -> Vec<Duration> {
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn server");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut rpc = |id: u64, method: &str, params: Value, line: &mut String| {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        stdin.write_all(format!("{msg}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        loop {
            line.clear();
            stdout.read_line(line).unwrap();
            let v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            if v["id"] == json!(id) {
                return;
            }
        }
    };
    rpc(
        0,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "bench", "version": "1"}}),
        &mut line,
    );
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        rpc(
            i as u64 + 1,
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "hi"}}),
            &mut line,
        );
        out.push(t.elapsed());
    }
    let _ = child.kill();
    let _ = child.wait();
    out
}

fn manager(name: &str, cfg: ServerConfig, dir: &Path) -> Manager {
    Manager::new(ManagerOptions {
        servers: [(name.to_string(), cfg)].into_iter().collect(),
        start: StartContext {
            workspace: dir.to_path_buf(),
            run_dir: dir.join("running"),
            session_id: "bench".into(),
            inherited_env: agentd_mcp::client::inheritable([], |n| std::env::var(n).ok()),
            confine: None,
        },
    })
}

async fn through_manager(cmd: &str, args: &[String], n: usize, dir: &Path) -> Vec<Duration> {
    let cfg = ServerConfig {
        command: Some(cmd.into()),
        args: args.to_vec(),
        ..ServerConfig::default()
    };
    let m = manager("s", cfg, dir);
    assert!(m.start().await.is_empty());
    let c = CancellationToken::new();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = m
            .call("s", "echo", json!({"message": "hi"}), &c)
            .await
            .unwrap();
        let mapped = agentd_mcp::result::map_result(&r);
        assert!(mapped.text.contains("hi"));
        out.push(t.elapsed());
    }
    m.stop().await;
    out
}

async fn overhead(label: &str, cmd: &str, args: &[String], n: usize, dir: &Path) {
    // Warm both paths once (JIT of a Node server, page cache).
    raw_round_trips(cmd, args, 50);
    let mut raw = raw_round_trips(cmd, args, n);
    let mut via = through_manager(cmd, args, n, dir).await;
    let (r50, r90) = (pct(&mut raw, 0.5), pct(&mut raw, 0.9));
    let (m50, m90) = (pct(&mut via, 0.5), pct(&mut via, 0.9));
    println!(
        "echo {label:<12} round trip p50 {:>8.1} µs p90 {:>8.1} µs | via manager p50 {:>8.1} µs p90 {:>8.1} µs | overhead p50 {:>7.1} µs p90 {:>7.1} µs  (n={n})",
        us(r50),
        us(r90),
        us(m50),
        us(m90),
        us(m50) - us(r50),
        us(m90) - us(r90)
    );
}

async fn start_time(label: &str, cfg: ServerConfig, dir: &Path) {
    let mut runs = Vec::new();
    let mut tools = 0;
    let mut protocol = String::new();
    for _ in 0..5 {
        let m = manager(label, cfg.clone(), dir);
        let t = Instant::now();
        let failed = m.start().await;
        let offered = m.tools().await;
        runs.push(t.elapsed());
        assert!(failed.is_empty(), "{label}: {failed:?}");
        tools = offered.len();
        protocol = m.status().await[0].protocol.clone().unwrap_or_default();
        m.stop().await;
    }
    println!(
        "start {label:<12} to first tools/list: median {:>7.1} ms (min {:.1}, max {:.1}) — {tools} tools, protocol {protocol}",
        pct(&mut runs, 0.5).as_secs_f64() * 1e3,
        runs[0].as_secs_f64() * 1e3,
        runs[runs.len() - 1].as_secs_f64() * 1e3,
    );
}

fn stdio(cmd: impl Into<String>, args: &[&str]) -> ServerConfig {
    ServerConfig {
        command: Some(cmd.into()),
        args: args.iter().map(|s| s.to_string()).collect(),
        startup_timeout_s: Some(30.0),
        ..ServerConfig::default()
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let fake = env!("CARGO_BIN_EXE_agentd-mcp-fake");
    overhead("fake", fake, &[], n, dir.path()).await;
    let sd = servers_dir();
    let everything = sd.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let filesystem = sd.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if !everything.exists() {
        println!(
            "server-everything is not installed (bash .ci/mcp.sh): only the fake was measured"
        );
        return;
    }
    let ev_args = vec![everything.display().to_string(), "stdio".to_string()];
    overhead("everything", "node", &ev_args, n, dir.path()).await;
    start_time("fake", stdio(fake, &[]), dir.path()).await;
    start_time(
        "everything",
        stdio("node", &[&ev_args[0], "stdio"]),
        dir.path(),
    )
    .await;
    let ws = dir.path().display().to_string();
    start_time(
        "filesystem",
        stdio("node", &[&filesystem.display().to_string(), &ws]),
        dir.path(),
    )
    .await;
    let time = sd.join("venv/bin/mcp-server-time").display().to_string();
    start_time(
        "time",
        stdio(time, &["--local-timezone", "UTC"]),
        dir.path(),
    )
    .await;
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let _ = Command::new("git")
        .arg("init")
        .arg("-q")
        .arg(&repo)
        .status();
    let git = sd.join("venv/bin/mcp-server-git").display().to_string();
    start_time(
        "git",
        stdio(git, &["--repository", &repo.display().to_string()]),
        dir.path(),
    )
    .await;
}
