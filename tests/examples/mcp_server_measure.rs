//! Measures `agentctl mcp-server` against the real daemon (docs/mcp-server.md):
//!
//! 1. Start: spawn → `initialize` answered, and the first `tools/call` (which opens the
//!    daemon connection).
//! 2. Overhead per call: p50 / p90 of a `tools/call` round trip over the server's stdio
//!    for `list_sessions`, `show`, `checkpoint` and `context`, against the same native
//!    call(s) made directly on the daemon's socket, on a session with one `script` turn.
//!
//! Durability is `none`. Binaries come from the same profile as this example, or from
//! `AGENTD_TEST_BIN_DIR`:
//!
//! ```sh
//! cargo build --release -p agentd -p agentctl
//! AGENTD_TEST_BIN_DIR=$PWD/target/release cargo run -p agentd-tests --example mcp_server_measure
//! ```
//!
//! Env: `MEASURE_CALLS` (default 500).

use agentd_tests::acp::Acp;
use agentd_tests::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let calls: usize = std::env::var("MEASURE_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello.json")
        .canonicalize()
        .expect("examples/hello.json");
    let mut c = d.connect();
    let sid = c.call_ok(
        "agentd/create",
        json!({"workspace": d.workspace(), "model": format!("script:{}", hello.display())}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    c.call_ok("agentd/turn", json!({"session_id": sid, "input": "hi"}));

    let t0 = Instant::now();
    let mut cmd = d.agentctl_cmd();
    cmd.arg("mcp-server");
    let mut m = Acp::from_command(cmd);
    m.call(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "measure", "version": "0"}}),
        WAIT,
    );
    let init = t0.elapsed();
    m.notify("notifications/initialized", json!({}));
    let t1 = Instant::now();
    m.call(
        "tools/call",
        json!({"name": "list_sessions", "arguments": {}}),
        WAIT,
    );
    println!(
        "spawn → initialize answered: {:.1} ms; first tools/call (opens the daemon connection): {:.1} ms",
        ms(init),
        ms(t1.elapsed())
    );

    let show_native = |c: &mut agentd_tests::RpcConn| {
        c.call_ok("agentd/show", json!({"session_id": sid}));
        c.call_ok("agentd/events", json!({"session_id": sid, "limit": 50}));
    };
    type Native<'a> = Box<dyn Fn(&mut agentd_tests::RpcConn) + 'a>;
    let cases: Vec<(&str, Value, Native)> = vec![
        (
            "list_sessions",
            json!({}),
            Box::new(|c| {
                c.call_ok("agentd/list", json!({"limit": 50}));
            }),
        ),
        ("show", json!({"session_id": sid}), Box::new(show_native)),
        (
            "checkpoint",
            json!({"session_id": sid}),
            Box::new(|c| {
                c.call_ok("agentd/checkpoint", json!({"session_id": sid}));
            }),
        ),
        (
            "context",
            json!({"session_id": sid}),
            Box::new(|c| {
                c.call_ok("agentd/context", json!({"session_id": sid}));
            }),
        ),
    ];
    for (tool, args, native) in &cases {
        let (mut over_mcp, mut direct) = (Vec::new(), Vec::new());
        for _ in 0..calls {
            let t = Instant::now();
            let (r, _) = m.call("tools/call", json!({"name": tool, "arguments": args}), WAIT);
            over_mcp.push(t.elapsed());
            assert_ne!(r["isError"], true, "{r}");
            let t = Instant::now();
            native(&mut c);
            direct.push(t.elapsed());
        }
        let (a50, a90) = (pct(over_mcp.clone(), 0.5), pct(over_mcp, 0.9));
        let (b50, b90) = (pct(direct.clone(), 0.5), pct(direct, 0.9));
        println!(
            "{tool:<14} mcp p50 {:.3} ms p90 {:.3} ms | native p50 {:.3} ms p90 {:.3} ms | overhead p50 {:.3} ms",
            ms(a50),
            ms(a90),
            ms(b50),
            ms(b90),
            ms(a50.saturating_sub(b50))
        );
    }
}
