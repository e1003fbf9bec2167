//! Daemon overhead per turn iteration (issue "turn overhead", docs/turns-and-providers.md#turns): with the
//! zero-latency `script` provider, one iteration is provider input build + the step's Log
//! appends (`provider_usage`, `tool_call`) + tool dispatch (`list_dir` of a small
//! workspace) + the `tool_result` append. Durability is `none`, so fsync is excluded.
//!
//! Sessions are pre-filled with 1k, 10k and 100k events through `agentd/append` (groups
//! of user_message, assistant_message, tool_call, tool_result) and compacted once with
//! the default tail, as a long session is; then `BENCH_TURNS` turns (default 5) of
//! `BENCH_ITERS` tool iterations (default 20) run on each. An iteration's time is the
//! gap between consecutive `tool_result` timestamps of one turn (daemon clock, µs).
//!
//! A second case runs the same turns through an `openai-chat` provider served by a local
//! HTTP server (answers at once, a `list_dir` call per step) on a session of
//! `BENCH_HTTP_EVENTS` events (default 20k) that is not compacted, so every step sends
//! the whole history: there the iteration includes building the request body from the
//! session's rendered input and the local HTTP round trip.
//!
//! Run: `cargo bench -p agentd --bench turn_overhead` (`BENCH_SIZES=100000,1000` picks
//! the pre-filled sizes and their order; `BENCH_SIZES=` skips them; `BENCH_AGENTD=PATH`
//! runs another daemon build).

mod support;

use serde_json::{json, Value};
use std::time::Instant;
use support::{env_usize, iteration_gaps, list_dir_turns, percentile, start, turn_events, Conn};

/// Appends `(events - 1) / 4` groups (session_started is already there), 250 groups
/// per call, then compacts once.
fn prefill(c: &mut Conn, sid: &str, events: usize) {
    fill(c, sid, events);
    c.call("agentd/compact", json!({"session_id": sid}));
}

/// Appends `(events - 1) / 4` groups, 250 groups per call.
fn fill(c: &mut Conn, sid: &str, events: usize) {
    let groups = (events.saturating_sub(1)) / 4;
    let mut g = 0;
    while g < groups {
        let end = (g + 250).min(groups);
        let mut batch = Vec::with_capacity((end - g) * 4);
        for group in g..end {
            let call_id = format!("pre_{group}");
            batch.push(json!({"type": "user_message", "data": {"text": format!("question {group}: what does module {group} do?")}}));
            batch.push(json!({"type": "assistant_message", "data": {"text": format!("Let me read module {group}.")}}));
            batch.push(json!({"type": "tool_call", "data": {"call_id": call_id, "name": "read_file", "args": {"path": format!("src/m{group}.rs")}}}));
            batch.push(json!({"type": "tool_result", "data": {"call_id": call_id, "ok": true, "output": "x".repeat(200)}}));
        }
        c.call("agentd/append", json!({"session_id": sid, "events": batch}));
        g = end;
    }
}

/// A local Chat Completions server: each request (read whole, then dropped) is
/// answered at once, `iters` times with a `list_dir` call and then with a final text,
/// over and over (one turn per round). Returns its base URL.
fn chat_server(iters: usize) -> String {
    use std::io::{BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let sse = |chunks: &[Value]| -> String {
        let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        s.push_str("data: [DONE]\n\n");
        s
    };
    let call = sse(&[
        json!({"model": "m1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109}}),
    ]);
    let stop = sse(&[
        json!({"model": "m1", "choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101}}),
    ]);
    std::thread::spawn(move || {
        let mut n = 0usize;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut r = BufReader::new(stream.try_clone().expect("clone"));
            if agentd_tests::http::read_request(&mut r).is_none() {
                continue;
            }
            let reply = if n % (iters + 1) == iters {
                &stop
            } else {
                &call
            };
            n += 1;
            let mut w = stream;
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = w.write_all(head.as_bytes());
            let _ = w.write_all(reply.as_bytes());
        }
    });
    base
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let turns = env_usize("BENCH_TURNS", 5);
    let iters = env_usize("BENCH_ITERS", 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let (ws, model) = list_dir_turns(dir.path(), iters);
    let (_daemon, mut c) = start(dir.path(), "");
    println!(
        "turn_overhead: {turns} turns × {iters} tool iterations per session size, durability none"
    );
    println!(
        "{:>8}  {:>9}  {:>9}  {:>9}  {:>12}  {:>8}",
        "events", "p50 ms", "p99 ms", "mean ms", "turn/iter ms", "samples"
    );
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000, 100_000]);
    for size in sizes {
        let sid = c.call("agentd/create", json!({"workspace": ws, "model": model}))["session_id"]
            .as_str()
            .expect("session id")
            .to_string();
        let t = Instant::now();
        prefill(&mut c, &sid, size);
        let fill_s = t.elapsed().as_secs_f64();
        run_turns(&mut c, &sid, size, turns, iters, fill_s);
    }
    drop(c);
    drop(_daemon);

    let http_events = env_usize("BENCH_HTTP_EVENTS", 20_000);
    if http_events == 0 {
        return;
    }
    let base = chat_server(iters);
    let config = format!(
        "default_provider = \"local\"\n[providers.local]\nkind = \"openai-chat\"\nbase_url = \"{base}\"\nmodel = \"m1\"\ncontext_window = 1000000000\n"
    );
    let (_daemon, mut c) = start(&dir.path().join("http"), &config);
    println!("openai-chat over local HTTP, history not compacted (every step sends it all):");
    let sid = c.call("agentd/create", json!({"workspace": ws}))["session_id"]
        .as_str()
        .expect("session id")
        .to_string();
    let t = Instant::now();
    fill(&mut c, &sid, http_events);
    let fill_s = t.elapsed().as_secs_f64();
    run_turns(&mut c, &sid, http_events, turns, iters, fill_s);
}

/// Runs `turns` turns of `iters` tool iterations on `sid` and prints one row.
fn run_turns(c: &mut Conn, sid: &str, size: usize, turns: usize, iters: usize, fill_s: f64) {
    let mut gaps = Vec::new();
    let mut wall = Vec::new();
    for k in 0..turns {
        let input = format!("bench turn {k}");
        let (evs, took) = turn_events(c, sid, &input, iters, &["tool_result"]);
        wall.push(took.as_secs_f64() * 1000.0 / (iters + 1) as f64);
        gaps.extend(iteration_gaps(&evs, iters));
    }
    gaps.sort_by(|a, b| a.total_cmp(b));
    wall.sort_by(|a, b| a.total_cmp(b));
    let mean = gaps.iter().sum::<f64>() / gaps.len().max(1) as f64;
    let show = c.call("agentd/show", json!({"session_id": sid}));
    println!(
        "{:>8}  {:>9.3}  {:>9.3}  {:>9.3}  {:>12.3}  {:>8}   (log now {} events; prefill {:.1}s)",
        size,
        percentile(&gaps, 0.5),
        percentile(&gaps, 0.99),
        mean,
        percentile(&wall, 0.5),
        gaps.len(),
        show["event_count"],
        fill_s
    );
}
