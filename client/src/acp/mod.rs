//! `agentctl acp`: an Agent Client Protocol v1 agent on stdio (docs/acp.md).
//!
//! Editors spawn it and speak ACP (JSON-RPC 2.0, one message per line). Every ACP session
//! is an agentd session: the bridge keeps no history of its own, so a session started
//! here is visible to `agentctl` and other clients at once and outlives the editor.
//!
//! Transport: stdin is read line by line by one loop. `initialize` is answered inline, so
//! requests pipelined right behind it are already accepted; every other request runs in
//! its own task, so `session/cancel` and permission answers are read while a prompt
//! streams. All output goes through one writer thread that owns stdout; nothing else
//! writes there (diagnostics go to stderr). The schema types are written out by hand
//! from ACP's JSON schema (see `bridge`), and the Rust tests and the node client test
//! check every frame against that schema.

mod bridge;
pub mod map;
/// The requests' params and their checks, from the library (pure; fuzzed).
pub use agentctl::acp::params;

use crate::daemon::Target;
use bridge::{Bridge, RpcErr};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Largest incoming line; a longer one is discarded with an error and the bridge goes on.
const MAX_LINE: usize = 64 * 1024 * 1024;
/// After stdin closes, how long running turns have to record their interruption.
const EXIT_GRACE: Duration = Duration::from_secs(20);

pub use crate::cli::AcpArgs;

/// Messages to the client, already serialized (one line each, without the newline).
#[derive(Clone)]
pub struct Out(mpsc::UnboundedSender<String>);

impl Out {
    pub fn send(&self, msg: &Value) {
        if let Ok(line) = serde_json::to_string(msg) {
            let _ = self.0.send(line);
        }
    }

    /// Lines already serialized (newline-separated, no trailing newline): one write.
    pub fn send_block(&self, lines: String) {
        let _ = self.0.send(lines);
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn respond(&self, id: Value, r: Result<Value, RpcErr>) {
        match r {
            Ok(result) => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result})),
            Err(e) => self.send(&json!({"jsonrpc": "2.0", "id": id, "error": e.to_value()})),
        }
    }
}

/// The writer thread: owns stdout and writes with plain blocking writes. Small messages
/// already queued are coalesced into one write; a large one (a page of a load replay)
/// is written as it is, without a copy.
fn write_loop(mut rx: mpsc::UnboundedReceiver<String>) {
    use std::io::Write;
    const LARGE: usize = 64 * 1024;
    let mut stdout = std::io::stdout().lock();
    let mut buf: Vec<u8> = Vec::with_capacity(LARGE);
    let mut next = rx.blocking_recv();
    while let Some(item) = next.take() {
        let ok = if item.len() >= LARGE {
            stdout.write_all(item.as_bytes()).is_ok() && stdout.write_all(b"\n").is_ok()
        } else {
            buf.clear();
            buf.extend_from_slice(item.as_bytes());
            buf.push(b'\n');
            while buf.len() < LARGE {
                match rx.try_recv() {
                    Ok(l) if l.len() >= LARGE => {
                        next = Some(l);
                        break;
                    }
                    Ok(l) => {
                        buf.extend_from_slice(l.as_bytes());
                        buf.push(b'\n');
                    }
                    Err(_) => break,
                }
            }
            stdout.write_all(&buf).is_ok()
        };
        if !ok || stdout.flush().is_err() {
            break;
        }
        if next.is_none() {
            next = rx.blocking_recv();
        }
    }
}

/// A pipe to the client holds 64 KiB by default, so a load replay of many megabytes
/// would hand over to the reader every 64 KiB; 1 MiB (the unprivileged maximum) makes
/// that sixteen times rarer. Not a pipe, or refused: left as it is.
fn widen_stdout_pipe() {
    // SAFETY: fstat and fcntl on fd 1 with valid arguments; failures are ignored.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(1, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO {
            let _ = libc::fcntl(1, libc::F_SETPIPE_SZ, 1024 * 1024);
        }
    }
}

/// Runs the bridge until stdin closes; returns the exit code.
pub async fn run(target: Target, args: &AcpArgs) -> i32 {
    if let Err(e) = bridge::check_mode(&args.mode) {
        eprintln!("agentctl acp: {}", e.message);
        return 2;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    widen_stdout_pipe();
    let writer = tokio::task::spawn_blocking(move || write_loop(rx));
    let bridge = Arc::new(Bridge::new(target, args.clone(), Out(tx)));
    let mut tasks = JoinSet::new();
    let mut stdin = BufReader::with_capacity(256 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut stdin)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
            // Discard the rest of the oversized line.
            let mut sink = Vec::new();
            let _ = stdin.read_until(b'\n', &mut sink).await;
            bridge.out.send(&json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": format!("message over {MAX_LINE} bytes")}}));
            continue;
        }
        handle_line(&bridge, &line, &mut tasks);
        while tasks.try_join_next().is_some() {}
    }
    // The client is gone: running turns are interrupted durably before we exit.
    bridge.client_gone().await;
    let _ = tokio::time::timeout(EXIT_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    drop(bridge);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    0
}

fn handle_line(bridge: &Arc<Bridge>, line: &[u8], tasks: &mut JoinSet<()>) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            bridge.out.send(&json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32700, "message": format!("parse error: {e}")}}));
            return;
        }
    };
    let Some(obj) = msg.as_object() else {
        let why = if msg.is_array() {
            "batches are not part of ACP"
        } else {
            "a message must be a JSON object"
        };
        bridge.out.send(&json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32600, "message": why}}));
        return;
    };
    let id = obj.get("id").cloned();
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    match (obj.get("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            let method = method.clone();
            if method == "initialize" {
                let r = bridge.initialize(params);
                bridge.out.respond(id, r);
                return;
            }
            if !bridge.is_initialized() {
                bridge.out.respond(
                    id,
                    Err(RpcErr::new(
                        -32600,
                        format!("`{method}` before `initialize`: send initialize first"),
                    )),
                );
                return;
            }
            let b = bridge.clone();
            tasks.spawn(async move {
                let r = b.dispatch(&method, params).await;
                let after = match &r {
                    Ok((_, after)) => after.clone(),
                    Err(_) => vec![],
                };
                b.out.respond(id, r.map(|(v, _)| v));
                for (method, params) in after {
                    b.out.notify(&method, params);
                }
            });
        }
        (Some(Value::String(method)), None) => {
            if method == "session/cancel" && bridge.is_initialized() {
                let b = bridge.clone();
                tasks.spawn(async move { b.cancel(&params).await });
            }
            // Other notifications (`$/cancel_request`, unknown ones) need no answer.
        }
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            bridge.client_answered(&id, msg.clone());
        }
        (_, id) => {
            bridge.out.respond(
                id.unwrap_or(Value::Null),
                Err(RpcErr::new(-32600, "not a JSON-RPC request")),
            );
        }
    }
}
