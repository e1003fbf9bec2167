//! A client of `agentctl app-server` for the tests and the measurement: the bridge
//! started on a Unix socket against a harness daemon, a WebSocket JSON-RPC client over
//! that socket, and the pinned Codex JSON Schemas every message it receives is checked
//! against.

use crate::Daemon;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The pinned schemas (`codex app-server generate-json-schema` of the Codex release in
/// docs/codex-app-server.md).
pub fn schema_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("codex-app-server/schema/codex_app_server_protocol.schemas.json")
}

/// The script the bridge's threads run (`script` provider).
pub fn script_model() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("codex-app-server/script.json")
        .canonicalize()
        .expect("tests/codex-app-server/script.json");
    format!("script:{}", p.display())
}

/// Validators for the schema's definitions, compiled once each.
pub struct Schemas {
    bundle: Value,
    cache: HashMap<String, jsonschema::Validator>,
}

impl Default for Schemas {
    fn default() -> Self {
        Self::new()
    }
}

impl Schemas {
    pub fn new() -> Schemas {
        let text = std::fs::read_to_string(schema_path()).expect("read the pinned schema");
        Schemas {
            bundle: serde_json::from_str(&text).expect("schema is JSON"),
            cache: HashMap::new(),
        }
    }

    /// The schema's `ClientRequest` methods.
    pub fn client_methods(&self) -> Vec<String> {
        self.bundle["definitions"]["ClientRequest"]["oneOf"]
            .as_array()
            .expect("ClientRequest.oneOf")
            .iter()
            .filter_map(|v| v["properties"]["method"]["enum"][0].as_str())
            .map(str::to_string)
            .collect()
    }

    /// Whether `def` (`InitializeResponse`, `v2/ThreadStartResponse`) exists.
    pub fn has(&self, def: &str) -> bool {
        def.split('/')
            .try_fold(&self.bundle["definitions"], |v, k| v.get(k))
            .is_some()
    }

    /// Panics, naming the definition and the errors, unless `v` is a valid `def`.
    #[track_caller]
    pub fn check(&mut self, def: &str, v: &Value) {
        assert!(self.has(def), "no definition {def} in the pinned schema");
        let bundle = &self.bundle;
        let validator = self.cache.entry(def.to_string()).or_insert_with(|| {
            let mut root = bundle.clone();
            root["$ref"] = json!(format!("#/definitions/{def}"));
            jsonschema::draft7::new(&root).expect("the pinned schema compiles")
        });
        let errors: Vec<String> = validator
            .iter_errors(v)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .take(5)
            .collect();
        assert!(errors.is_empty(), "{def}: {errors:?}\nin {v}");
    }
}

/// `agentctl app-server` on a Unix socket, against the daemon `d`.
pub struct Bridge {
    child: Child,
    pub socket: PathBuf,
    stderr: Arc<Mutex<String>>,
}

impl Bridge {
    /// Starts the bridge at `<root>/cx/app.sock` (the bridge makes the 0700 directory)
    /// with `extra` arguments; returns once it listens.
    pub fn start(d: &Daemon, extra: &[&str]) -> Bridge {
        let socket = d.root().join("cx/app.sock");
        let mut cmd = d.agentctl_cmd();
        cmd.arg("app-server")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn agentctl app-server");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().expect("stderr");
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
                if let Ok(mut s) = keep.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            panic!(
                "agentctl app-server did not listen: {}",
                stderr.lock().map(|s| s.clone()).unwrap_or_default()
            );
        }
        Bridge {
            child,
            socket,
            stderr,
        }
    }

    /// What the bridge wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until the bridge's stderr contains `needle`.
    pub fn wait_stderr(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.stderr().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Whether the bridge process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebSocket JSON-RPC client of the bridge. Messages read while waiting for another
/// are kept, in order.
pub struct Ws {
    ws: WebSocketStream<UnixStream>,
    backlog: VecDeque<Value>,
    next_id: i64,
    /// Every message received, in order.
    pub seen: Vec<Value>,
    /// Why the connection ended, when it did: the close frame's code.
    pub closed: Option<Option<u16>>,
}

pub const WAIT: Duration = Duration::from_secs(30);

impl Ws {
    pub async fn connect(socket: &Path) -> Ws {
        let s = UnixStream::connect(socket)
            .await
            .expect("connect the bridge");
        let (ws, _) = tokio_tungstenite::client_async("ws://localhost/", s)
            .await
            .expect("WebSocket handshake over the Unix socket");
        Ws {
            ws,
            backlog: VecDeque::new(),
            next_id: 1,
            seen: vec![],
            closed: None,
        }
    }

    /// Connects and initializes as the TUI does.
    pub async fn initialized(socket: &Path) -> (Ws, Value) {
        let mut w = Ws::connect(socket).await;
        let r = w
            .call(
                "initialize",
                json!({"clientInfo": {"name": "agentd-tests", "version": "1"},
                    "capabilities": {"experimentalApi": true}}),
            )
            .await;
        w.send(json!({"method": "initialized"})).await;
        (w, r)
    }

    pub async fn send(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .expect("send");
    }

    pub async fn send_raw(&mut self, m: Message) -> bool {
        self.ws.send(m).await.is_ok()
    }

    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// The next message, from the backlog first.
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.backlog.pop_front() {
            return Some(v);
        }
        self.read(timeout).await
    }

    async fn read(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let m = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()?;
            match m {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str())
                        .unwrap_or_else(|e| panic!("bridge sent non-JSON text {t:?}: {e}"));
                    self.seen.push(v.clone());
                    return Some(v);
                }
                Some(Ok(Message::Close(f))) => {
                    self.closed = Some(f.map(|f| u16::from(f.code)));
                    return None;
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    self.closed.get_or_insert(None);
                    return None;
                }
            }
        }
    }

    /// The response to request `id` (its whole message).
    pub async fn response(&mut self, id: i64) -> Value {
        let is = |v: &Value| v["id"] == json!(id) && v.get("method").is_none();
        if let Some(i) = self.backlog.iter().position(is) {
            return self.backlog.remove(i).unwrap_or_default();
        }
        loop {
            let v = self
                .read(WAIT)
                .await
                .unwrap_or_else(|| panic!("no response to request {id}"));
            if is(&v) {
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    /// Calls `method`; returns the whole response message.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = if method == "initialize" {
            // The TUI's first request uses a string id.
            self.send(json!({"id": "initialize", "method": method, "params": params}))
                .await;
            let is = |v: &Value| v["id"] == "initialize";
            loop {
                let v = self.read(WAIT).await.expect("initialize answer");
                if is(&v) {
                    return v;
                }
                self.backlog.push_back(v);
            }
        } else {
            self.request(method, params).await
        };
        self.response(id).await
    }

    /// The first message (from the backlog, then the socket) that `pred` accepts; the
    /// ones before it stay in the backlog.
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i).unwrap_or_default();
        }
        loop {
            let v = self.read(WAIT).await.unwrap_or_else(|| {
                panic!(
                    "waiting for {what}: the connection ended or went quiet; seen {:?}",
                    self.seen.iter().rev().take(8).collect::<Vec<_>>()
                )
            });
            if pred(&v) {
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    /// Waits for the notification `method` (matching `pred` on its params).
    pub async fn note(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_for(method, |v| {
            v["method"] == method && v.get("id").is_none() && pred(&v["params"])
        })
        .await["params"]
            .clone()
    }

    /// Drops the backlog.
    pub fn clear(&mut self) {
        self.backlog.clear();
    }
}
