//! Measures what `agentctl app-server` adds to each turn event (docs/codex-app-server.md),
//! against `agentctl acp`'s path in the same run:
//!
//! A native subscriber (`agentd/subscribe` on its own connection) and a bridge's client
//! follow the same turns of the same daemon. For every streamed `text_delta` the time the
//! bridge's client receives it (an `item/agentMessage/delta` WebSocket frame over the
//! bridge's Unix socket; an ACP `agent_message_chunk` line on `agentctl acp`'s stdout)
//! minus the time the native subscriber receives the daemon's notification is the
//! bridge's added latency for that event. p50 over every delta of `MEASURE_TURNS` turns
//! of 100 deltas each, 2 ms apart (a streaming model's pace, not a burst). Target for the
//! app-server bridge: ≤ 0.2 ms p50 added.
//!
//! ```sh
//! cargo build --release -p agentd -p agentctl
//! AGENTD_TEST_BIN_DIR=$PWD/target/release \
//!   cargo run --release -p agentd-tests --example app_server_measure
//! ```
//!
//! Env: `MEASURE_TURNS` (default 10).

use agentd_proto::session_uuid::{self, Resolved};
use agentd_tests::acp::Acp;
use agentd_tests::app_server::{Bridge, Ws};
use agentd_tests::measure::env_usize;
use agentd_tests::{bin, Daemon};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const DELTAS: usize = 100;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn p90(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() * 9 / 10]
}

/// A script whose answer to turn `t` streams `DELTAS` distinct 8-character deltas.
fn model(d: &Daemon, turns: usize) -> String {
    let rules: Vec<Value> = (0..turns)
        .map(|t| {
            let text: String = (0..DELTAS).map(|i| format!("t{t:02}d{i:03} ")).collect();
            json!({"match": format!("turn {t:02}"), "steps": [{"text": text, "chunk_chars": 8, "delay_ms": 2}]})
        })
        .collect();
    let p = d.root().join("stream.json");
    std::fs::write(&p, json!({ "rules": rules }).to_string()).unwrap();
    format!("script:{}", p.display())
}

/// Each delta's text → when a native subscriber of `sid` received it.
fn native(d: &Daemon, sid: &str) -> mpsc::Receiver<(String, Instant)> {
    let mut sub = d.connect();
    sub.call_ok("agentd/subscribe", json!({"session_id": sid}));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        let Some(m) = sub.read_message(Duration::from_secs(600)) else {
            return;
        };
        let at = Instant::now();
        let e = &m["params"]["result"];
        if e["type"] == "text_delta" {
            let t = e["data"]["text"].as_str().unwrap_or("").to_string();
            if tx.send((t, at)).is_err() {
                return;
            }
        }
    });
    rx
}

/// The bridge's arrival minus the native one, per delta, in ms.
fn added(native: &mpsc::Receiver<(String, Instant)>, bridged: &[(String, Instant)]) -> Vec<f64> {
    let mut at: HashMap<String, Instant> = HashMap::new();
    while at.len() < bridged.len() {
        let (t, i) = native.recv_timeout(WAIT).expect("the native delta");
        at.insert(t, i);
    }
    bridged
        .iter()
        .map(|(t, b)| {
            let n = at[t];
            if *b >= n {
                (*b - n).as_secs_f64() * 1000.0
            } else {
                -((n - *b).as_secs_f64() * 1000.0)
            }
        })
        .collect()
}

fn app_server(turns: usize) -> Vec<f64> {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let m = model(&d, turns);
    let b = Bridge::start(&d, &["--model", &m, "--mode", "auto"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut ws, _) = Ws::initialized(&b.socket).await;
        let r = ws
            .call("thread/start", json!({"cwd": d.workspace(), "approvalPolicy": "never"}))
            .await;
        let thread = r["result"]["thread"]["id"].as_str().unwrap().to_string();
        let Some(Resolved::Session(sid)) = session_uuid::resolve(&thread) else {
            panic!("thread id {thread} is not an agentd session's");
        };
        let nat = native(&d, &sid);
        let mut out = Vec::new();
        for t in 0..turns {
            ws.clear();
            ws.request(
                "turn/start",
                json!({"threadId": thread, "input": [{"type": "text", "text": format!("turn {t:02}"), "text_elements": []}]}),
            )
            .await;
            let mut got = Vec::new();
            loop {
                let v = ws.next(WAIT).await.expect("a frame");
                let at = Instant::now();
                if v["method"] == "item/agentMessage/delta" {
                    got.push((v["params"]["delta"].as_str().unwrap().to_string(), at));
                }
                if v["method"] == "turn/completed" {
                    break;
                }
            }
            assert_eq!(got.len(), DELTAS, "turn {t}: every delta arrives once");
            out.extend(added(&nat, &got));
        }
        out
    })
}

fn acp(turns: usize) -> Vec<f64> {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let m = model(&d, turns);
    let mut a = Acp::spawn(&d, &["--model", &m, "--mode", "auto"]);
    a.initialize();
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let nat = native(&d, &sid);
    let mut out = Vec::new();
    for t in 0..turns {
        let from = a.frames.len();
        let id = a.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": format!("turn {t:02}")}]}),
        );
        a.response(id, WAIT);
        let got: Vec<(String, Instant)> = a.frames[from..]
            .iter()
            .filter(|(_, v)| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .map(|(at, v)| {
                (
                    v["params"]["update"]["content"]["text"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                    *at,
                )
            })
            .collect();
        assert_eq!(got.len(), DELTAS, "turn {t}: every delta arrives once");
        out.extend(added(&nat, &got));
    }
    out
}

fn main() {
    println!("binaries: {}", bin("agentctl").parent().unwrap().display());
    let turns = env_usize("MEASURE_TURNS", 10);
    let cx = app_server(turns);
    let ac = acp(turns);
    let (c50, a50) = (p50(cx.clone()), p50(ac.clone()));
    println!(
        "added per turn event, over {} deltas: app-server p50 {c50:.3} ms (p90 {:.3}); acp p50 {a50:.3} ms (p90 {:.3}) (baseline); target ≤ 0.2 ms {}",
        cx.len(),
        p90(cx),
        p90(ac),
        if c50 <= 0.2 { "OK" } else { "OVER" }
    );
}
