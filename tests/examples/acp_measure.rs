//! Measures `agentctl acp` against the real daemon (docs/acp.md):
//!
//! 1. Bridge overhead on the first token: p50 of `session/prompt` → first
//!    `agent_message_chunk` over the bridge, minus p50 of `agentd/turn` → first
//!    `text_delta` on a subscribed native connection, both with the zero-latency `script`
//!    provider on the same session. Target: ≤ 2 ms.
//! 2. `session/load` of a 100,000-event session (turns of user and assistant messages,
//!    tool calls with 1–8 KiB outputs, usage records; written into the home before the
//!    daemon starts): time from the request to the last `session/update`, and to the
//!    response. Measured warm (the daemon already holds the Log) and cold (first touch
//!    after start). Target: ≤ 1 s.
//!
//! Durability is `none` (setup writes are not what is measured). Binaries come from the
//! same profile as this example:
//!
//! ```sh
//! cargo build --release -p agentd -p agentctl
//! cargo run --release -p agentd-tests --example acp_measure
//! ```
//!
//! Env: `MEASURE_PROMPTS` (default 50), `MEASURE_EVENTS` (default 100000).

use agentd_tests::acp::Acp;
use agentd_tests::measure::{env_usize, write_log};
use agentd_tests::{bin, Daemon};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn first_token(prompts: usize) {
    let d = Daemon::builder().env("AGENTD_DURABILITY", "none").start();
    let script = d.root().join("fast.json");
    std::fs::write(
        &script,
        json!({"rules": [{"steps": [{"text": "Hello from the script provider.", "chunk_chars": 8}]}]})
            .to_string(),
    )
    .unwrap();
    let model = format!("script:{}", script.display());
    let mut a = Acp::spawn(&d, &["--model", &model, "--mode", "auto"]);
    a.initialize();
    let (r, _) = a.call(
        "session/new",
        json!({"cwd": d.workspace(), "mcpServers": []}),
        WAIT,
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();

    let mut via_acp = Vec::new();
    for i in 0..prompts + 3 {
        let t0 = Instant::now();
        let id = a.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": format!("hi {i}")}]}),
        );
        let (t1, _) = a
            .wait_for(WAIT, |v| {
                v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            })
            .expect("a first chunk");
        a.response(id, WAIT);
        if i >= 3 {
            via_acp.push(t1 - t0);
        }
    }

    // The same turns on the native API: subscribe, call agentd/turn, first text_delta.
    let mut sub = d.connect();
    sub.call_ok("agentd/subscribe", json!({"session_id": sid}));
    let mut native = Vec::new();
    for i in 0..prompts + 3 {
        let t0 = Instant::now();
        let req = json!({"jsonrpc": "2.0", "id": format!("t{i}"), "method": "agentd/turn",
            "params": {"session_id": sid, "input": format!("native {i}"), "model": model}});
        sub.send_raw(format!("{req}\n").as_bytes()).unwrap();
        sub.wait_for(
            |m| {
                assert!(m.get("error").is_none(), "agentd/turn failed: {m}");
                m["params"]["result"]["type"] == "text_delta"
            },
            WAIT,
        )
        .expect("a first delta");
        let t1 = Instant::now();
        // The turn's response (not turn_ended) frees the session for the next one.
        let r = sub
            .wait_for(|m| m["id"] == format!("t{i}").as_str(), WAIT)
            .expect("the turn's response");
        assert!(r.get("result").is_some(), "agentd/turn failed: {r}");
        if i >= 3 {
            native.push(t1 - t0);
        }
    }
    let (acp, nat) = (p50(via_acp), p50(native));
    let overhead = acp.saturating_sub(nat);
    println!(
        "first agent_message_chunk p50: {:.3} ms via agentctl acp, {:.3} ms native (agentd/turn → text_delta); bridge overhead {:.3} ms (target ≤ 2 ms) {}",
        ms(acp),
        ms(nat),
        ms(overhead),
        if ms(overhead) <= 2.0 { "OK" } else { "OVER" }
    );
}

/// CPU time (user + system) of process `pid` so far, from `/proc/PID/stat`.
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// CPU time of this process's waited-for children so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv =
        |t: libc::timeval| Duration::from_micros(t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// One `session/load` through a fresh bridge; the client side only splits lines (a
/// notification starts with `{"jsonrpc":"2.0","method"`), so its own cost stays small.
/// Returns the times to the last update and to the response, the number of updates,
/// and the CPU time the bridge and the daemon spent (the machine may be shared, so
/// CPU time is the figure other load does not inflate).
fn load_once(d: &Daemon, sid: &str) -> (Duration, Duration, usize, Duration, Duration) {
    let daemon_pid = d.pid().expect("daemon pid");
    let (bridge0, daemon0) = (children_cpu(), cpu_of(daemon_pid));
    let mut cmd: Command = d.agentctl_cmd();
    cmd.arg("acp").stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn agentctl acp");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
    let mut line = String::new();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
    )
    .unwrap();
    out.read_line(&mut line).unwrap();
    let load = json!({"jsonrpc": "2.0", "id": 2, "method": "session/load",
        "params": {"sessionId": sid, "cwd": d.workspace(), "mcpServers": []}});
    let t0 = Instant::now();
    writeln!(stdin, "{load}").unwrap();
    let mut updates = 0usize;
    let mut last = t0;
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "bridge closed stdout"
        );
        if line.starts_with(r#"{"jsonrpc":"2.0","method":"session/update""#) {
            updates += 1;
            last = Instant::now();
        } else if line.starts_with(r#"{"jsonrpc":"2.0","id":2"#) {
            assert!(line.contains("\"result\""), "load failed: {line}");
            break;
        }
    }
    let done = t0.elapsed();
    let daemon_cpu = cpu_of(daemon_pid).saturating_sub(daemon0);
    drop(stdin);
    let _ = child.wait();
    let bridge_cpu = children_cpu().saturating_sub(bridge0);
    (last - t0, done, updates, bridge_cpu, daemon_cpu)
}

fn big_load(events: u64) {
    let mut d = Daemon::builder().env("AGENTD_DURABILITY", "none").build();
    let sid = "measure-100k";
    write_log(d.home(), sid, d.workspace(), events);
    d.spawn();
    d.wait_ready(Duration::from_secs(30)).expect("daemon ready");
    let (cold_last, cold_done, n, cold_bcpu, cold_dcpu) = load_once(&d, sid);
    let mut warm = Vec::new();
    for _ in 0..5 {
        warm.push(load_once(&d, sid));
    }
    warm.sort_by_key(|w| w.1);
    let (last, done, _, bcpu, dcpu) = warm[2];
    println!(
        "session/load of {events} events ({n} session/update): warm {:.0} ms to last update, {:.0} ms to response (median of 5; best {:.0} ms); cold {:.0} / {:.0} ms (target ≤ 1000 ms) {}",
        ms(last),
        ms(done),
        ms(warm[0].0),
        ms(cold_last),
        ms(cold_done),
        if ms(last) <= 1000.0 { "OK" } else { "OVER" }
    );
    println!(
        "  CPU per load: bridge {:.0} ms, daemon {:.0} ms warm; bridge {:.0} ms, daemon {:.0} ms cold (daemon includes reading the Log)",
        ms(bcpu),
        ms(dcpu),
        ms(cold_bcpu),
        ms(cold_dcpu)
    );
}

fn main() {
    println!("binaries: {}", bin("agentctl").parent().unwrap().display());
    first_token(env_usize("MEASURE_PROMPTS", 50));
    big_load(env_usize("MEASURE_EVENTS", 100_000) as u64);
}
