//! What the benchmarks that drive a real daemon over its socket share: a blocking
//! NDJSON JSON-RPC connection and a daemon child process with its own home, socket and
//! config, killed on drop; the durable-append workload the append benchmarks time; and
//! the tool-iteration turn the turn benchmarks time (`list_dir_turns`, `turn_events`,
//! `iteration_gaps`).
//! Each benchmark compiles this module on its own and uses part of it.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An event's `ts` in µs since the epoch.
pub fn ts_micros(ts: &str) -> i128 {
    let t = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
        .expect("event ts");
    t.unix_timestamp_nanos() / 1000
}

/// The `p` percentile (0 to 1) of `sorted`, nearest rank; NaN for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// A workspace of ten small files under `dir` and a `script` model whose turns call
/// `list_dir` `iters` times, then answer: the turn the iteration benchmarks time.
/// Returns the workspace and the model.
pub fn list_dir_turns(dir: &Path, iters: usize) -> (std::path::PathBuf, String) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    for i in 0..10 {
        std::fs::write(ws.join(format!("f{i}.txt")), "x\n").expect("workspace file");
    }
    let mut steps: Vec<Value> = (0..iters)
        .map(|_| json!({"tool_calls": [{"name": "list_dir", "args": {"path": "."}}]}))
        .collect();
    steps.push(json!({"text": "done"}));
    let script = dir.join("bench.json");
    std::fs::write(
        &script,
        serde_json::to_vec(&json!({"rules": [{"steps": steps}]})).expect("script"),
    )
    .expect("write script");
    (ws, format!("script:{}", script.display()))
}

/// Runs one turn of `iters` tool iterations on `sid` (it must complete) and returns the
/// events of `types` it wrote, with how long `agentd/turn` took.
pub fn turn_events(
    c: &mut Conn,
    sid: &str,
    input: &str,
    iters: usize,
    types: &[&str],
) -> (Vec<Value>, Duration) {
    let before = c.call("agentd/show", json!({"session_id": sid}))["last_seq"]
        .as_u64()
        .expect("last_seq");
    let t = Instant::now();
    let r = c.call(
        "agentd/turn",
        json!({"session_id": sid, "input": input, "max_iterations": iters + 1}),
    );
    let took = t.elapsed();
    assert_eq!(r["status"], "completed", "{r}");
    let evs = c.call(
        "agentd/events",
        json!({"session_id": sid, "after_seq": before, "types": types}),
    );
    (evs["events"].as_array().expect("events").clone(), took)
}

/// The gaps (ms) between consecutive `tool_result` events of one turn of `iters`
/// iterations, by their daemon timestamps: one iteration each.
pub fn iteration_gaps(evs: &[Value], iters: usize) -> Vec<f64> {
    let stamps: Vec<i128> = evs
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| ts_micros(e["ts"].as_str().expect("ts")))
        .collect();
    assert_eq!(stamps.len(), iters, "one tool_result per iteration");
    stamps
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1000.0)
        .collect()
}

pub struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
    id: u64,
}

impl Conn {
    pub fn connect(path: &Path) -> std::io::Result<Conn> {
        let s = UnixStream::connect(path)?;
        Ok(Conn {
            w: s.try_clone()?,
            r: BufReader::new(s),
            id: 0,
        })
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        self.w
            .write_all(format!("{msg}\n").as_bytes())
            .expect("write request");
        loop {
            let mut line = String::new();
            let n = self.r.read_line(&mut line).expect("read response");
            assert!(n > 0, "daemon closed the connection");
            let v: Value = serde_json::from_str(&line).expect("response JSON");
            if v.get("id") == Some(&json!(self.id)) {
                match v.get("result") {
                    Some(r) => return r.clone(),
                    None => panic!("{method} failed: {v}"),
                }
            }
        }
    }
}

pub struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `agentd` under `dir` with `config` as its config.toml (durability `none`)
/// and waits until it answers `agentd/hello`.
pub fn start(dir: &Path, config: &str) -> (Daemon, Conn) {
    start_with(dir, config, &[])
}

/// [`start`] with environment overrides (`AGENTD_DURABILITY`, `AGENTD_STORE`, …)
/// applied after the defaults.
pub fn start_with(dir: &Path, config: &str, env: &[(&str, &str)]) -> (Daemon, Conn) {
    std::fs::create_dir_all(dir).expect("daemon dir");
    let socket = dir.join("run").join("agentd.sock");
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, config).expect("config");
    // `BENCH_AGENTD` runs another build (e.g. an earlier commit's) for a comparison.
    let bin = std::env::var("BENCH_AGENTD").unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentd").into());
    let mut cmd = Command::new(bin);
    cmd.env("AGENTD_HOME", dir.join("home"))
        .env("AGENTD_SOCKET", &socket)
        .env("AGENTD_CONFIG", &cfg)
        .env("AGENTD_DURABILITY", "none")
        .env("AGENTD_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn agentd");
    let d = Daemon { child };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut c) = Conn::connect(&socket) {
            c.call("agentd/hello", json!({}));
            return (d, c);
        }
        assert!(Instant::now() < deadline, "agentd did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One ~512-byte event (as stored, with its envelope) for `agentd/append`.
pub fn payload() -> Value {
    json!([{"type": "user_message", "data": {"text": "x".repeat(380)}}])
}

impl Conn {
    /// `n` appends of [`payload`] to `sid`, one at a time, each waiting for its answer.
    /// The request text is built once and only its id changes; an answer is checked
    /// for its id and for `result` without building a tree of it. On a 2-vCPU machine
    /// the clients share the CPUs with the daemon, so they cost as little as they can.
    pub fn append_loop(&mut self, sid: &str, n: usize) {
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            id: u64,
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow)]
            error: Option<&'a serde_json::value::RawValue>,
        }
        let params = json!({"session_id": sid, "events": payload()});
        let tail = format!(r#","method":"agentd/append","params":{params}}}"#);
        let mut req = Vec::with_capacity(tail.len() + 64);
        let mut line = String::new();
        for _ in 0..n {
            self.id += 1;
            req.clear();
            write!(req, r#"{{"jsonrpc":"2.0","id":{}{tail}"#, self.id).expect("format");
            req.push(b'\n');
            self.w.write_all(&req).expect("write request");
            line.clear();
            let got = self.r.read_line(&mut line).expect("read response");
            assert!(got > 0, "daemon closed the connection");
            let a: Answer<'_> = serde_json::from_str(&line).expect("response JSON");
            assert_eq!(a.id, self.id, "an answer to another request: {line}");
            assert!(
                a.result.is_some() && a.error.is_none(),
                "agentd/append failed: {line}"
            );
        }
    }
}

/// Appends `per_client` events from each of `clients` threads; `session_of(i)` picks the
/// session of client i, loaded (and, on a database store, leased) before the clock
/// starts. Returns acknowledged appends per second.
pub fn appends(
    socket: &Path,
    clients: usize,
    per_client: usize,
    session_of: impl Fn(usize) -> String,
) -> f64 {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            let (socket, sid, barrier) = (socket.to_path_buf(), session_of(i), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Conn::connect(&socket).expect("connect");
                c.call("agentd/show", json!({"session_id": sid}));
                barrier.wait();
                c.append_loop(&sid, per_client);
            })
        })
        .collect();
    barrier.wait();
    let t = Instant::now();
    for h in handles {
        h.join().expect("client thread");
    }
    (clients * per_client) as f64 / t.elapsed().as_secs_f64()
}

/// Times `n` round trips of one append-sized request line against a bare server:
/// `serve` answers the other end of a socket pair on a thread of its own until the
/// client closes. The one-client ceilings the append benchmarks compare agentd with.
/// Ops per second.
pub fn bare_round_trips(n: usize, serve: impl FnOnce(UnixStream) + Send + 'static) -> f64 {
    let (client, server) = UnixStream::pair().expect("socket pair");
    let served = std::thread::spawn(move || serve(server));
    let request = format!("{}\n", payload());
    let mut w = client.try_clone().expect("clone socket");
    let mut r = BufReader::new(client);
    let mut answer = Vec::new();
    let t = Instant::now();
    for _ in 0..n {
        w.write_all(request.as_bytes()).expect("request");
        answer.clear();
        r.read_until(b'\n', &mut answer).expect("answer");
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    drop((w, r));
    served.join().expect("bare server thread");
    rate
}

/// A bare server's plain loop: reads each request line, runs `work`, answers.
pub fn answer_each_line(server: UnixStream, mut work: impl FnMut()) {
    let mut w = server.try_clone().expect("clone socket");
    let mut r = BufReader::new(server);
    let mut req = Vec::new();
    loop {
        req.clear();
        match r.read_until(b'\n', &mut req) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        work();
        w.write_all(b"{\"ok\":true}\n").expect("answer");
    }
}
