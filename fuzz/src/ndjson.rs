//! `ndjson`: bytes on a real connection to an in-process daemon (NDJSON or
//! `Content-Length` framing). Every answer is one JSON-RPC 2.0 object (or batch) per
//! line or frame, the connection ends after the client's EOF, and the daemon keeps
//! answering other connections.

use crate::scratch;
use agentd::config::Config;
use agentd::store::Home;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

struct Server {
    socket: PathBuf,
    _rt: tokio::runtime::Runtime,
}

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch().join("ndjson");
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        let socket = dir.join("agentd.sock");
        let _ = std::fs::remove_file(&socket);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let config = Config {
            durability: agentd::config::Durability::None,
            // Small, so oversize frames are cheap to produce.
            max_message_bytes: 4096,
            ..Config::default()
        };
        let home = Home::open(&dir.join("home")).unwrap();
        let registry = agentd::registry::Registry::open(home, config).unwrap();
        let listener = {
            let _g = rt.enter();
            tokio::net::UnixListener::bind(&socket).unwrap()
        };
        let turns = {
            let _g = rt.enter();
            agentd::turn::TurnManager::new(registry.clone())
        };
        let methods = agentd::api::methods(agentd::api::Api {
            registry: registry.clone(),
            turns,
            shutdown_requested: tokio_util::sync::CancellationToken::new(),
        });
        rt.spawn(
            agentd::server::Listener {
                listener,
                methods,
                max_message_bytes: 4096,
                shutdown: tokio_util::sync::CancellationToken::new(),
                connections: registry.connections.clone(),
                direct: Some(std::sync::Arc::new(agentd::api::DirectCalls::new(
                    registry.clone(),
                ))),
            }
            .run(),
        );
        Server { socket, _rt: rt }
    })
}

fn exchange(socket: &Path, bytes: &[u8]) -> Vec<u8> {
    let mut c = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let _ = c.write_all(bytes);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    if let Err(e) = c.read_to_end(&mut out) {
        panic!("connection did not end after the client closed its side: {e}");
    }
    out
}

/// Bytes on a real connection to an in-process daemon: every answer is one JSON-RPC
/// 2.0 object (or batch) per line, the connection ends after the client's EOF, and the
/// daemon keeps answering others.
pub fn run(data: &[u8]) {
    let s = server();
    let out = exchange(&s.socket, data);
    let bodies: Vec<Vec<u8>> = if out.starts_with(b"Content-Length:") {
        // Answers in the client's framing: header block, blank line, body.
        let mut v = Vec::new();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let end = rest
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap_or_else(|| {
                    panic!(
                        "unterminated header block in {:?}",
                        String::from_utf8_lossy(rest)
                    )
                });
            let head = String::from_utf8_lossy(&rest[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("bad response header {head:?}"));
            let body = &rest[end + 4..];
            assert!(
                body.len() >= len,
                "response body shorter than its Content-Length"
            );
            v.push(body[..len].to_vec());
            rest = &body[len..];
        }
        v
    } else {
        out.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    for line in bodies.iter().map(Vec::as_slice) {
        let v: Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "daemon wrote a non-JSON line ({e}): {:?}",
                String::from_utf8_lossy(line)
            )
        });
        let objs = match &v {
            Value::Array(a) => a.clone(),
            o => vec![o.clone()],
        };
        for o in objs {
            // Requests from the daemon (permission) and notifications carry a method.
            if o.get("method").is_none() {
                assert_eq!(o["jsonrpc"], "2.0", "not a JSON-RPC 2.0 response: {o}");
            }
        }
    }
    let hello = exchange(
        &s.socket,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"agentd/hello\",\"params\":{}}\n",
    );
    assert!(
        hello.starts_with(b"{\"jsonrpc\":\"2.0\""),
        "daemon stopped answering after this input: {:?}",
        String::from_utf8_lossy(&hello)
    );
}
