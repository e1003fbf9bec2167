//! `agentctl app-server`: the Codex app-server protocol (v2), so Codex's own clients
//! (its TUI with `codex --remote`, its VS Code extension) drive agentd sessions
//! (docs/codex-app-server.md).
//!
//! Transports: `stdio://` (JSON lines), `unix://PATH` (WebSocket over a Unix socket,
//! mode 0600 in a private directory: what `codex --remote unix://PATH` connects to) and
//! `ws://HOST:PORT` (loopback only unless `--allow-remote`, which needs a bearer token,
//! compared in constant time; every refusal is logged to stderr).
//!
//! Each client connection is one [`bridge::Client`]. One loop reads its messages:
//! `initialize` is answered inline; every other request runs in its own task, so
//! `turn/interrupt` and approval answers are read while other requests wait. All output
//! goes through one bounded queue to one writer task; a client that stops reading fills
//! it and is disconnected, so it never holds the bridge's memory or the daemon's events.
//! Limits: a message over 16 MiB closes its WebSocket with 1009 (on stdio the line is
//! discarded with an error); a binary frame or a text frame that is not JSON gets a
//! JSON-RPC error and the connection goes on.

mod bridge;
mod goal;
pub mod map;
mod shared;
mod wire;

pub use crate::cli::AppServerArgs;
use crate::daemon::Target;
use agentctl::acp::params::RpcErr;
use bridge::Client;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use shared::Shared;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::{self, handshake::server as hs, protocol, Message};

/// Largest message a client may send.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// Messages queued for a client before it counts as not reading.
const OUT_QUEUE: usize = 16 * 1024;

/// A frame for the client.
pub enum Frame {
    Text(String),
    /// Close the connection with this WebSocket close code and reason.
    Close(u16, String),
}

/// The client's outgoing queue.
#[derive(Clone)]
pub struct Out {
    tx: mpsc::Sender<Frame>,
    /// Set when the client stopped reading: the connection is dropped.
    stalled: Arc<watch::Sender<bool>>,
}

impl Out {
    fn push(&self, f: Frame) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(f) {
            if !*self.stalled.borrow() {
                eprintln!(
                    "agentctl app-server: a client is not reading ({OUT_QUEUE} messages queued): closing its connection"
                );
                let _ = self.stalled.send(true);
            }
        }
    }

    pub fn send(&self, msg: &Value) {
        if let Ok(t) = serde_json::to_string(msg) {
            self.push(Frame::Text(t));
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"method": method, "params": params}));
    }

    fn respond(&self, id: Value, r: Result<Value, RpcErr>) {
        match r {
            Ok(result) => self.send(&json!({"id": id, "result": result})),
            Err(e) => self.send(&json!({"id": id, "error": e.to_value()})),
        }
    }

    fn error(&self, code: i64, message: &str) {
        self.send(&json!({"id": null, "error": {"code": code, "message": message}}));
    }
}

fn out_pair() -> (Out, mpsc::Receiver<Frame>, watch::Receiver<bool>) {
    let (tx, rx) = mpsc::channel(OUT_QUEUE);
    let (stalled, stalled_rx) = watch::channel(false);
    (
        Out {
            tx,
            stalled: Arc::new(stalled),
        },
        rx,
        stalled_rx,
    )
}

/// Where to listen.
#[derive(Debug, PartialEq)]
enum Listen {
    Stdio,
    Unix(PathBuf),
    Tcp(String),
}

fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "stdio://" || s == "stdio" || s == "-" {
        return Ok(Listen::Stdio);
    }
    if let Some(p) = s.strip_prefix("unix://") {
        if !p.starts_with('/') {
            return Err(format!("unix:// needs an absolute path, got `{p}`"));
        }
        return Ok(Listen::Unix(PathBuf::from(p)));
    }
    if let Some(a) = s.strip_prefix("ws://") {
        let a = a.trim_end_matches('/');
        if a.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!(
                "ws:// needs an IP address and a port (ws://127.0.0.1:PORT), got `{a}`"
            ));
        }
        return Ok(Listen::Tcp(a.to_string()));
    }
    Err(format!(
        "--listen must be stdio://, unix://PATH or ws://IP:PORT, got `{s}`"
    ))
}

/// Equal in time independent of where the strings differ.
fn same_token(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..n {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    std::hint::black_box(diff) == 0
}

/// Runs the bridge; returns the exit code.
pub async fn run(target: Target, args: &AppServerArgs) -> i32 {
    let fail = |m: String| {
        eprintln!("agentctl app-server: {m}");
        2
    };
    if !["ask", "auto", "read_only"].contains(&args.mode.as_str()) {
        return fail(format!(
            "--mode must be ask, auto or read_only, got `{}`",
            args.mode
        ));
    }
    let listen = match parse_listen(&args.listen) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let token = match &args.auth_token_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(t) if !t.is_empty() => Some(Arc::new(t)),
            _ => {
                return fail(format!(
                    "--auth-token-env {var}: the variable is unset or empty"
                ))
            }
        },
    };
    let shared = Arc::new(Shared::new(target, args.clone()));
    match listen {
        Listen::Stdio => {
            serve_stdio(shared).await;
            0
        }
        Listen::Unix(path) => match serve_unix(shared, &path).await {
            Ok(()) => 0,
            Err(e) => fail(e),
        },
        Listen::Tcp(addr) => {
            let ip: std::net::SocketAddr = match addr.parse() {
                Ok(a) => a,
                Err(e) => return fail(format!("{addr}: {e}")),
            };
            if !ip.ip().is_loopback() && !args.allow_remote {
                return fail(format!(
                    "{addr} is not a loopback address: add --allow-remote (and --auth-token-env VAR)"
                ));
            }
            if args.allow_remote && token.is_none() {
                return fail("--allow-remote needs --auth-token-env VAR (a bearer token)".into());
            }
            match serve_tcp(shared, ip, token).await {
                Ok(()) => 0,
                Err(e) => fail(e),
            }
        }
    }
}

/// Waits for Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// Binds `path` as a socket only its owner may use: the directory is created 0700 when
/// missing and refused when others may enter it; a stale socket is replaced, a live one
/// or any other file is left alone.
fn bind_private(path: &Path) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
    let dir = path
        .parent()
        .ok_or_else(|| format!("{}: no directory", path.display()))?;
    match std::fs::metadata(dir) {
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?,
        Ok(m) => {
            if m.mode() & 0o077 != 0 || m.uid() != unsafe { libc::geteuid() } {
                return Err(format!(
                    "{} is open to other users (mode {:o}): put the socket in a private directory (mode 0700)",
                    dir.display(),
                    m.mode() & 0o7777
                ));
            }
        }
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{} is in use by another server", path.display()));
        }
        let _ = std::fs::remove_file(path);
    }
    let l = tokio::net::UnixListener::bind(path)
        .map_err(|e| format!("binding {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    Ok(l)
}

async fn serve_unix(shared: Arc<Shared>, path: &Path) -> Result<(), String> {
    let listener = bind_private(path)?;
    eprintln!(
        "agentctl app-server: listening on unix://{}",
        path.display()
    );
    let serve = async {
        loop {
            match listener.accept().await {
                Ok((s, _)) => {
                    let shared = shared.clone();
                    tokio::spawn(serve_ws(shared, s, None, "a unix socket client".into()));
                }
                Err(e) => {
                    eprintln!("agentctl app-server: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    tokio::select! {
        _ = serve => {}
        _ = stop_signal() => {}
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

async fn serve_tcp(
    shared: Arc<Shared>,
    addr: std::net::SocketAddr,
    token: Option<Arc<String>>,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("binding {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("agentctl app-server: listening on ws://{local}");
    let serve = async {
        loop {
            match listener.accept().await {
                Ok((s, peer)) => {
                    let _ = s.set_nodelay(true);
                    tokio::spawn(serve_ws(shared.clone(), s, token.clone(), peer.to_string()));
                }
                Err(e) => {
                    eprintln!("agentctl app-server: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    tokio::select! {
        _ = serve => {}
        _ = stop_signal() => {}
    }
    Ok(())
}

fn refuse(status: u16, why: &str) -> hs::ErrorResponse {
    let mut r = hs::ErrorResponse::new(Some(why.to_string()));
    *r.status_mut() = tungstenite::http::StatusCode::from_u16(status)
        .unwrap_or(tungstenite::http::StatusCode::FORBIDDEN);
    r
}

/// The handshake's checks: no browser origin (a web page must not drive the sessions
/// through a local port), and the bearer token when one is required.
fn check_handshake(req: &hs::Request, token: Option<&str>) -> Result<(), (u16, &'static str)> {
    if req.headers().contains_key("origin") {
        return Err((403, "browser origins are refused"));
    }
    if let Some(t) = token {
        let given = req
            .headers()
            .get("authorization")
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same_token(given.as_bytes(), t.as_bytes()) {
            return Err((401, "a valid bearer token is required"));
        }
    }
    Ok(())
}

// The handshake callback's error type is tungstenite's (an HTTP response).
#[allow(clippy::result_large_err)]
async fn serve_ws<S>(shared: Arc<Shared>, stream: S, token: Option<Arc<String>>, peer: String)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cfg = protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let peer2 = peer.clone();
    let cb = move |req: &hs::Request, resp: hs::Response| match check_handshake(
        req,
        token.as_deref().map(String::as_str),
    ) {
        Ok(()) => Ok(resp),
        Err((status, why)) => {
            eprintln!("agentctl app-server: refused {peer2}: {why}");
            Err(refuse(status, why))
        }
    };
    let ws = match tokio_tungstenite::accept_hdr_async_with_config(stream, cb, Some(cfg)).await {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("agentctl app-server: handshake with {peer} failed: {e}");
            return;
        }
    };
    let (mut sink, mut stream) = ws.split();
    let (out, mut rx, mut stalled) = out_pair();
    let writer = tokio::spawn(async move {
        while let Some(f) = rx.recv().await {
            let r = match f {
                Frame::Text(t) => sink.send(Message::Text(t.into())).await,
                Frame::Close(code, reason) => {
                    let _ = sink
                        .send(Message::Close(Some(protocol::CloseFrame {
                            code: code.into(),
                            reason: reason.into(),
                        })))
                        .await;
                    break;
                }
            };
            if r.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let client = Arc::new(Client::new(shared, out.clone()));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            m = stream.next() => match m {
                Some(Ok(Message::Text(t))) => handle(&client, t.as_str(), &mut tasks),
                Some(Ok(Message::Binary(_))) => out.error(
                    -32600,
                    "binary frames are not part of the protocol: send JSON-RPC messages as text frames",
                ),
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(tungstenite::Error::Capacity(e))) => {
                    eprintln!("agentctl app-server: {peer}: {e}: closing");
                    out.push(Frame::Close(1009, format!("message over {MAX_MESSAGE} bytes")));
                    break;
                }
                Some(Err(e)) => {
                    eprintln!("agentctl app-server: {peer}: {e}");
                    break;
                }
            },
            _ = stalled.changed() => break,
        }
        while tasks.try_join_next().is_some() {}
    }
    client.close();
    tasks.abort_all();
    drop(client);
    drop(out);
    // A client that stopped reading keeps the writer blocked: it is dropped with its
    // half of the socket after a grace period, which closes the connection.
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .is_err()
    {
        abort.abort();
    }
}

async fn serve_stdio(shared: Arc<Shared>) {
    let (out, mut rx, mut stalled) = out_pair();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(f) = rx.recv().await {
            let Frame::Text(mut t) = f else { break };
            t.push('\n');
            if stdout.write_all(t.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let client = Arc::new(Client::new(shared, out.clone()));
    let mut tasks = JoinSet::new();
    let mut stdin = BufReader::with_capacity(256 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut stdin).take(MAX_MESSAGE as u64 + 1);
        let read = tokio::select! {
            r = limited.read_until(b'\n', &mut line) => r,
            _ = stalled.changed() => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > MAX_MESSAGE && line.last() != Some(&b'\n') {
            let mut sink = Vec::new();
            let _ = stdin.read_until(b'\n', &mut sink).await;
            out.error(-32600, &format!("message over {MAX_MESSAGE} bytes"));
            continue;
        }
        handle(&client, &String::from_utf8_lossy(&line), &mut tasks);
        while tasks.try_join_next().is_some() {}
    }
    client.close();
    tasks.abort_all();
    drop(client);
    drop(out);
    // A client that stopped reading keeps the writer blocked: it is dropped with its
    // half of the socket after a grace period, which closes the connection.
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .is_err()
    {
        abort.abort();
    }
}

/// One message from the client.
fn handle(client: &Arc<Client>, text: &str, tasks: &mut JoinSet<()>) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return client.out.error(-32700, &format!("parse error: {e}")),
    };
    let Some(obj) = msg.as_object() else {
        return client
            .out
            .error(-32600, "a message must be a JSON-RPC object (no batches)");
    };
    let id = obj
        .get("id")
        .cloned()
        .filter(|i| i.is_string() || i.is_i64() || i.is_u64());
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    match (obj.get("method").and_then(Value::as_str), id) {
        (Some("initialize"), Some(id)) => {
            let r = client.initialize(&params);
            client.out.respond(id, r);
        }
        (Some(m), Some(id)) => {
            if !client.is_initialized() {
                return client.out.respond(
                    id,
                    Err(RpcErr::new(
                        -32600,
                        format!(
                            "Not initialized: send initialize before `{}`",
                            m.chars().take(128).collect::<String>()
                        ),
                    )),
                );
            }
            let (c, m) = (client.clone(), m.to_string());
            tasks.spawn(async move {
                match c.dispatch(&m, params).await {
                    Ok((v, notes)) => {
                        c.out.respond(id, Ok(v));
                        for (m, p) in notes {
                            c.out.notify(m, p);
                        }
                    }
                    Err(e) => c.out.respond(id, Err(e)),
                }
            });
        }
        // Notifications (`initialized`, unknown ones) need no answer.
        (Some(_), None) => {}
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            client.client_answered(&id, msg.clone());
        }
        _ => client
            .out
            .error(-32600, "not a JSON-RPC request, notification or response"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_urls() {
        assert_eq!(parse_listen("stdio://"), Ok(Listen::Stdio));
        assert_eq!(
            parse_listen("unix:///run/x.sock"),
            Ok(Listen::Unix("/run/x.sock".into()))
        );
        assert_eq!(
            parse_listen("ws://127.0.0.1:4500"),
            Ok(Listen::Tcp("127.0.0.1:4500".into()))
        );
        assert!(parse_listen("unix://rel.sock").is_err());
        assert!(parse_listen("ws://localhost:1").is_err());
        assert!(parse_listen("http://x").is_err());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"s3cret", b"s3cret"));
        assert!(!same_token(b"s3cret", b"s3cre"));
        assert!(!same_token(b"s3cre", b"s3cret"));
        assert!(!same_token(b"", b"x"));
        assert!(!same_token(b"s3creT", b"s3cret"));
    }
}
