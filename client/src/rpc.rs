//! A small JSON-RPC 2.0 client speaking NDJSON over agentd's Unix socket.
//!
//! Hand-written rather than jsonrpsee's async client because agentctl must also answer
//! requests the daemon sends *to* it (`agentd/permission` in `ask` mode), which the
//! jsonrpsee client turns into id-less notifications. The shape is one reader task that
//! routes every incoming line: responses complete the waiting call by id; notifications
//! and server→client requests go, in arrival order, to one `Incoming` channel that the
//! command consumes (a single stream keeps the order the daemon wrote them in).

use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

/// Something the daemon sent that is not a response to one of our calls.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A notification: `method` and `params` (for `agentd/event`:
    /// `{subscription, result: event}`).
    Notification { method: String, params: Value },
    /// A server→client request that must be answered with [`Conn::respond`].
    Request {
        id: Value,
        method: String,
        params: Value,
    },
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Reply, AgentError>>>>>;

/// A response as the reader hands it over, parsed by whoever waits for it, so a large
/// result (a page of events) is read once, into the caller's own (borrowed) types.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// The whole line: its id was read off the daemon's canonical prefix
    /// (`{"jsonrpc":"2.0","id":N,"result":` or `,"error":`) without parsing the rest.
    Line(String),
    /// Just the `result`'s JSON text (a response routed by a full parse).
    Result(String),
}

#[derive(serde::Deserialize)]
struct Env<T> {
    #[serde(default = "Option::default")]
    result: Option<T>,
    #[serde(default)]
    error: Option<Value>,
}

impl Reply {
    /// The result as `T` (which may borrow from the reply), or the error the response
    /// carries (`data.kind` gives the contract kind).
    /// Length of the JSON text held.
    pub fn text_len(&self) -> usize {
        match self {
            Reply::Line(t) | Reply::Result(t) => t.len(),
        }
    }

    pub fn parse<'a, T: serde::Deserialize<'a>>(&'a self) -> Result<T, AgentError> {
        let bad = |e: serde_json::Error| AgentError::internal(format!("bad response: {e}"));
        match self {
            Reply::Result(text) => serde_json::from_str(text).map_err(bad),
            Reply::Line(line) => {
                let env: Env<T> = serde_json::from_str(line).map_err(bad)?;
                if let Some(err) = env.error {
                    return Err(error_from_object(&err));
                }
                match env.result {
                    Some(r) => Ok(r),
                    None => serde_json::from_str("null").map_err(bad),
                }
            }
        }
    }
}

/// The id of a response in the daemon's canonical form, read off its prefix.
fn response_id(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(r#"{"jsonrpc":"2.0","id":"#)?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    let after = &rest[end..];
    if end == 0 || !(after.starts_with(r#","result":"#) || after.starts_with(r#","error":"#)) {
        return None;
    }
    rest[..end].parse().ok()
}

/// One connection to the daemon.
pub struct Conn {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    waiters: Waiters,
    next_id: AtomicU64,
    incoming: Mutex<Option<mpsc::UnboundedReceiver<Incoming>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The error every call fails with once the connection is gone.
pub fn connection_lost(detail: &str) -> AgentError {
    AgentError::new(
        ErrorKind::DaemonUnavailable,
        format!("connection to agentd lost: {detail}"),
    )
    .with_next_actions(&["agentctl daemon status", "agentctl daemon start"])
}

impl Conn {
    /// Connects to `path`. The raw `io::Error` is returned so the caller can tell a
    /// missing or refused socket (start a daemon) from anything else.
    pub async fn connect(path: &Path) -> std::io::Result<Conn> {
        let stream = UnixStream::connect(path).await?;
        let (read, write) = stream.into_split();
        let waiters: Waiters = Arc::new(Mutex::new(HashMap::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(
            BufReader::with_capacity(256 * 1024, read),
            waiters.clone(),
            tx,
        ));
        Ok(Conn {
            writer: tokio::sync::Mutex::new(write),
            waiters,
            next_id: AtomicU64::new(1),
            incoming: Mutex::new(Some(rx)),
            reader,
        })
    }

    /// True once the daemon closed the connection (the reader ended).
    pub fn is_closed(&self) -> bool {
        self.reader.is_finished()
    }

    /// Takes the stream of notifications and server requests. Only one consumer exists;
    /// a second call returns `None`.
    pub fn take_incoming(&self) -> Option<mpsc::UnboundedReceiver<Incoming>> {
        self.incoming.lock().ok()?.take()
    }

    async fn write_line(&self, msg: &Value) -> Result<(), AgentError> {
        let mut line = serde_json::to_string(msg)
            .map_err(|e| AgentError::internal(format!("cannot encode request: {e}")))?;
        line.push('\n');
        let mut w = self.writer.lock().await;
        w.write_all(line.as_bytes())
            .await
            .map_err(|e| connection_lost(&e.to_string()))?;
        w.flush().await.map_err(|e| connection_lost(&e.to_string()))
    }

    /// Calls `method` with `params` (an object) and returns its `result`, or the error
    /// rebuilt from the JSON-RPC error object (`data.kind` gives the contract kind).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, AgentError> {
        self.call_raw(method, params).await?.parse()
    }

    /// [`Conn::call`] returning the response unparsed, for callers that read large
    /// results (event pages) with borrowed types instead of a `Value` tree.
    pub async fn call_raw(&self, method: &str, params: Value) -> Result<Reply, AgentError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut w) = self.waiters.lock() {
            w.insert(id, tx);
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self.write_line(&msg).await {
            if let Ok(mut w) = self.waiters.lock() {
                w.remove(&id);
            }
            return Err(e);
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(connection_lost("the daemon closed the connection")),
        }
    }

    /// Answers a server→client request.
    pub async fn respond(&self, id: Value, result: Value) -> Result<(), AgentError> {
        self.write_line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await
    }

    /// Answers a server→client request with an error.
    pub async fn respond_error(
        &self,
        id: Value,
        code: i64,
        message: &str,
    ) -> Result<(), AgentError> {
        self.write_line(
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        )
        .await
    }

    /// Subscribes to a session's events; returns the subscription id. Notifications
    /// arrive on [`Conn::take_incoming`] as `agentd/event`.
    pub async fn subscribe(
        &self,
        session_id: &str,
        after_seq: Option<u64>,
        permissions: bool,
    ) -> Result<Value, AgentError> {
        let params = agentd_proto::rpc::SubscribeParams {
            session_id: session_id.to_string(),
            after_seq,
            permissions,
        };
        self.call(agentd_proto::rpc::method::SUBSCRIBE, to_params(&params)?)
            .await
    }
}

/// The JSON of a request's params, built as one of `agentd_proto::rpc`'s types (the
/// ones the daemon parses them with).
pub fn to_params<P: serde::Serialize>(params: &P) -> Result<Value, AgentError> {
    serde_json::to_value(params)
        .map_err(|e| AgentError::internal(format!("cannot encode the request's params: {e}")))
}

/// Turns one incoming JSON-RPC error object into an [`AgentError`].
pub fn error_from_object(err: &Value) -> AgentError {
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(-32603) as i32;
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("error without message");
    AgentError::from_rpc(code, message, err.get("data"))
}

/// What one incoming line is.
#[derive(Debug, PartialEq)]
pub enum Routed {
    /// A response, with the result unparsed (or the error).
    Response {
        id: u64,
        result: Result<Reply, AgentError>,
    },
    Incoming(Incoming),
    /// A response whose id is not ours, or a line that is not a message; dropped.
    Ignored,
}

/// The envelope of one incoming message. `result` stays JSON text: a page of events can
/// be megabytes, and its reader parses it with borrowed types.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default, borrow)]
    result: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    error: Option<Value>,
}

/// Classifies one line from the daemon (pure, so it is unit-tested). A response in the
/// daemon's canonical form is handed over whole, unparsed.
pub fn route(line: String) -> Routed {
    if let Some(id) = response_id(&line) {
        return Routed::Response {
            id,
            result: Ok(Reply::Line(line)),
        };
    }
    let Ok(v) = serde_json::from_str::<Envelope>(&line) else {
        return Routed::Ignored;
    };
    let params = v.params.unwrap_or(Value::Null);
    match (v.method, v.id) {
        (Some(method), None) => Routed::Incoming(Incoming::Notification { method, params }),
        (Some(method), Some(id)) => Routed::Incoming(Incoming::Request { id, method, params }),
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else {
                return Routed::Ignored;
            };
            let result = match &v.error {
                Some(err) => Err(error_from_object(err)),
                None => Ok(Reply::Result(
                    v.result
                        .map_or_else(|| "null".to_string(), |r| r.get().to_string()),
                )),
            };
            Routed::Response { id, result }
        }
        (None, None) => Routed::Ignored,
    }
}

async fn read_loop(
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    waiters: Waiters,
    incoming: mpsc::UnboundedSender<Incoming>,
) {
    // Each line is handed over as it is (no copy); the next one starts with room for
    // as much, so a run of large pages does not grow a buffer from nothing each time.
    let mut hint = 4096usize;
    loop {
        let mut line = String::with_capacity(hint);
        match reader.read_line(&mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        hint = line.len().clamp(4096, 64 * 1024 * 1024);
        line.truncate(line.trim_end().len());
        match route(line) {
            Routed::Response { id, result } => {
                let waiter = waiters.lock().ok().and_then(|mut w| w.remove(&id));
                if let Some(tx) = waiter {
                    let _ = tx.send(result);
                }
            }
            Routed::Incoming(msg) => {
                // The consumer may have gone (e.g. a plain call); dropping is fine.
                let _ = incoming.send(msg);
            }
            Routed::Ignored => {}
        }
    }
    // Dropping the waiters fails every pending call with "connection lost"; dropping
    // `incoming` ends the notification stream.
    if let Ok(mut w) = waiters.lock() {
        w.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_responses_notifications_and_requests() {
        let r = |l: &str| route(l.to_string());
        let result = |routed: Routed| -> Result<Value, AgentError> {
            let Routed::Response { result, .. } = routed else {
                panic!("not a response")
            };
            result?.parse()
        };
        // Canonical form: handed over whole; other key orders: parsed to route.
        let canonical = r(r#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#);
        assert!(matches!(
            &canonical,
            Routed::Response {
                id: 3,
                result: Ok(Reply::Line(_))
            }
        ));
        assert_eq!(result(canonical).unwrap(), json!({"a":1}));
        let other = r(r#"{"id":3,"jsonrpc":"2.0","result":{"a":1}}"#);
        assert!(matches!(
            &other,
            Routed::Response {
                id: 3,
                result: Ok(Reply::Result(_))
            }
        ));
        assert_eq!(result(other).unwrap(), json!({"a":1}));
        assert_eq!(
            result(r(r#"{"jsonrpc":"2.0","id":6,"result":null}"#)).unwrap(),
            Value::Null
        );
        for line in [
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"m","data":{"kind":"busy","details":{"x":1}}}}"#,
            r#"{"id":4,"jsonrpc":"2.0","error":{"code":-32000,"message":"m","data":{"kind":"busy","details":{"x":1}}}}"#,
        ] {
            let e = result(r(line)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Busy);
            assert_eq!(e.details, json!({"x":1}));
        }
        let e = result(r(
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"bad"}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
        assert_eq!(
            r(
                r#"{"jsonrpc":"2.0","method":"agentd/event","params":{"subscription":1,"result":{}}}"#
            ),
            Routed::Incoming(Incoming::Notification {
                method: "agentd/event".into(),
                params: json!({"subscription":1,"result":{}})
            })
        );
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","id":7,"method":"agentd/permission","params":{}}"#),
            Routed::Incoming(Incoming::Request {
                id: json!(7),
                method: "agentd/permission".into(),
                params: json!({})
            })
        );
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","id":"p1","method":"agentd/permission","params":{}}"#),
            Routed::Incoming(Incoming::Request {
                id: json!("p1"),
                method: "agentd/permission".into(),
                params: json!({})
            })
        );
        assert_eq!(r("not json"), Routed::Ignored);
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","id":"x","result":1}"#),
            Routed::Ignored
        );
    }

    #[tokio::test]
    async fn calls_over_a_real_socket_and_sees_notifications_in_order() {
        let dir = std::env::temp_dir().join(format!("agentctl-rpc-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut lines = BufReader::new(r).lines();
            while let Some(l) = lines.next_line().await.unwrap() {
                let v: Value = serde_json::from_str(&l).unwrap();
                let id = v["id"].clone();
                let out = if v["method"] == "agentd/fail" {
                    json!({"jsonrpc":"2.0","id":id,"error":{"code":-32000,"message":"nope","data":{"kind":"not_found"}}})
                } else {
                    let n = json!({"jsonrpc":"2.0","method":"agentd/event","params":{"subscription":7,"result":{"type":"text_delta"}}});
                    w.write_all(format!("{n}\n").as_bytes()).await.unwrap();
                    json!({"jsonrpc":"2.0","id":id,"result":{"echo":v["params"]}})
                };
                w.write_all(format!("{out}\n").as_bytes()).await.unwrap();
            }
        });
        let conn = Conn::connect(&path).await.unwrap();
        let mut inc = conn.take_incoming().unwrap();
        assert!(conn.take_incoming().is_none());
        let r = conn.call("agentd/x", json!({"a": 1})).await.unwrap();
        assert_eq!(r, json!({"echo": {"a": 1}}));
        let e = conn.call("agentd/fail", json!({})).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        let Some(Incoming::Notification { method, params }) = inc.recv().await else {
            panic!("no notification")
        };
        assert_eq!(method, "agentd/event");
        assert_eq!(params["result"]["type"], "text_delta");
        drop(conn);
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
