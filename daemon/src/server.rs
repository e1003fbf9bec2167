//! The JSON-RPC 2.0 transport over the Unix socket (DESIGN §3, §5, §13 "Framing").
//!
//! jsonrpsee's `Methods` registry dispatches; this module is the transport jsonrpsee
//! does not ship for Unix sockets: one `Listener` that accepts, and per connection a
//! reader (NDJSON or `Content-Length` framing from [`crate::framing`], with a size
//! cap; routing of calls, notifications, batches and peer responses) and a writer task that owns the socket's write half. Calls run
//! concurrently, so an interrupt can arrive while a turn call is still running.
//!
//! Architecture invariant: no input from a client can end the daemon or another
//! connection; every bad line gets an error response and the connection stays usable.

use crate::framing::{FrameCodec, FrameError, Framing};
use bytes::BytesMut;
use jsonrpsee::core::id_providers::RandomIntegerIdProvider;
use jsonrpsee::types::{ErrorObject, Id, Request};
use jsonrpsee::{
    BoundedSubscriptions, ConnectionId, Extensions, MethodCallback, MethodResponse, MethodSink,
    Methods, SubscriptionState,
};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

const WRITE_QUEUE: usize = 1024;
/// How long a closing connection may take to flush what is queued for its peer.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
const MAX_SUBSCRIPTIONS_PER_CONN: u32 = 1024;
const MAX_IN_FLIGHT_PER_CONN: usize = 256;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one still holds valid data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Requests this daemon sent to the peer: (last id used, waiters by id).
type PendingRequests = (u64, HashMap<u64, oneshot::Sender<Value>>);

/// A per-connection handle for server→client traffic outside a call's response:
/// notifications and requests (e.g. `agentd/permission`). Available to handlers
/// through `Extensions`.
#[derive(Clone)]
pub struct ConnSink {
    sink: MethodSink,
    pending: Arc<std::sync::Mutex<PendingRequests>>,
    pub conn_id: usize,
}

impl ConnSink {
    pub async fn notify(&self, method: &str, params: Value) -> bool {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        match serde_json::value::to_raw_value(&msg) {
            Ok(raw) => self.sink.send(raw).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Sends a request and waits for the peer's whole response object; `None` if the
    /// peer is gone.
    pub async fn request(&self, method: &str, params: Value) -> Option<Value> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut p = lock(&self.pending);
            p.0 += 1;
            let id = p.0;
            p.1.insert(id, tx);
            id
        };
        // A caller that gives up (a permission timeout drops this future) must not leave
        // its waiter behind for the connection's lifetime.
        struct Forget<'a>(&'a std::sync::Mutex<PendingRequests>, u64);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                lock(self.0).1.remove(&self.1);
            }
        }
        let _forget = Forget(&self.pending, id);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.sink
            .send(serde_json::value::to_raw_value(&msg).ok()?)
            .await
            .ok()?;
        rx.await.ok()
    }

    pub fn is_closed(&self) -> bool {
        self.sink.is_closed()
    }
}

impl crate::peer::Peer for ConnSink {
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Value,
    ) -> futures::future::BoxFuture<'a, Option<Value>> {
        Box::pin(ConnSink::request(self, method, params))
    }
    fn is_closed(&self) -> bool {
        ConnSink::is_closed(self)
    }
}

pub use crate::api::error_object;

fn raw(v: &Value) -> Box<RawValue> {
    // A serde_json::Value always serializes.
    serde_json::value::to_raw_value(v)
        .unwrap_or_else(|_| RawValue::from_string("null".into()).unwrap_or_default())
}

fn error_response(id: Value, code: i32, message: &str, kind: Option<&str>) -> Value {
    let mut err = json!({"code": code, "message": message});
    if let Some(k) = kind {
        err["data"] = json!({"kind": k, "details": {}});
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err})
}

pub struct Listener {
    pub listener: UnixListener,
    pub methods: Methods,
    pub max_message_bytes: usize,
    pub shutdown: CancellationToken,
    pub connections: Arc<std::sync::atomic::AtomicU64>,
    /// Calls answered without the generic per-call task (appends).
    pub direct: Option<Arc<crate::api::DirectCalls>>,
}

impl Listener {
    /// Accepts until shutdown. Each connection runs in its own task.
    pub async fn run(self) {
        let next_conn = Arc::new(AtomicUsize::new(1));
        let my_uid = unsafe { libc::geteuid() };
        let mut conns = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                a = self.listener.accept() => a,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            };
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == my_uid => {
                    tracing::debug!(pid = ?cred.pid(), "connection accepted");
                }
                Ok(cred) => {
                    tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "refused connection from another uid");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read peer credentials; closing");
                    continue;
                }
            }
            let conn = Connection {
                id: next_conn.fetch_add(1, Ordering::Relaxed),
                methods: self.methods.clone(),
                direct: self.direct.clone(),
                max: self.max_message_bytes,
                shutdown: self.shutdown.clone(),
                in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONN)),
            };
            let counter = self.connections.clone();
            counter.fetch_add(1, Ordering::Relaxed);
            conns.spawn(async move {
                conn.serve(stream).await;
                counter.fetch_sub(1, Ordering::Relaxed);
            });
            while conns.try_join_next().is_some() {}
        }
        // Let connections flush in-flight responses (the shutdown call's own answer
        // among them); a peer that stops reading cannot hold the daemon up.
        let drain = async { while conns.join_next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_TIMEOUT, drain).await.is_err() {
            tracing::warn!("connections did not finish within the drain timeout; closing them");
            conns.abort_all();
        }
    }
}

/// Direct responses from this size on are written in their pieces rather than copied.
const BIG_MESSAGE: usize = 1 << 20;

/// The write side of a connection, shared by its writer task and by whoever answers a
/// direct call (a commit thread, right after the session's batch is durable). A message goes
/// straight to the socket with a non-blocking write when nothing is queued before it, so
/// answering an append wakes no task; what the socket does not take at once is queued,
/// in order, and the writer task finishes it when the socket drains.
/// Pieces handed to one vectored write (a kept context is many pieces: the rendered
/// framing between strings that are the Log lines' own bytes). Linux takes up to 1024.
const IOV_BATCH: usize = 256;

struct Outbox {
    wr: tokio::net::unix::OwnedWriteHalf,
    /// Set by the reader once the first bytes show the framing; nothing is written
    /// before that, since every message answers or follows something the peer sent.
    framing: std::sync::OnceLock<Framing>,
    queue: std::sync::Mutex<OutQueue>,
    /// Tells the writer task that bytes wait in the queue.
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct OutQueue {
    /// Framed pieces not yet written, each with how much of it was.
    parts: std::collections::VecDeque<(bytes::Bytes, usize)>,
    /// The socket failed or the writer ended: nothing more is written.
    closed: bool,
}

impl Outbox {
    fn framing(&self) -> Framing {
        self.framing.get().copied().unwrap_or(Framing::Lines)
    }

    /// Frames one message and writes it, or queues what the socket does not take now.
    fn send(&self, msg: &[u8]) {
        self.push(vec![
            crate::framing::encode_bytes(self.framing(), msg).into()
        ]);
    }

    /// [`send`](Self::send) for a message that comes as pieces of JSON text: a large
    /// one (a context) is written in its pieces with the framing around them, by
    /// vectored writes, never copied into one buffer.
    fn send_owned(&self, mut pieces: Vec<bytes::Bytes>) {
        let len: usize = pieces.iter().map(bytes::Bytes::len).sum();
        if len < BIG_MESSAGE {
            return match &pieces[..] {
                [one] => self.send(one),
                _ => self.send(&pieces.concat()),
            };
        }
        match self.framing() {
            Framing::Lines => pieces.push(bytes::Bytes::from_static(b"\n")),
            Framing::Headers => pieces.insert(
                0,
                format!("Content-Length: {len}\r\n\r\n").into_bytes().into(),
            ),
        }
        self.push(pieces);
    }

    fn push(&self, parts: Vec<bytes::Bytes>) {
        let mut q = lock(&self.queue);
        if q.closed {
            return;
        }
        let was_empty = q.parts.is_empty();
        q.parts
            .extend(parts.into_iter().filter(|p| !p.is_empty()).map(|p| (p, 0)));
        if was_empty {
            match self.write_queued(&mut q) {
                Ok(true) => return,
                Ok(false) => {}
                Err(_) => {
                    q.closed = true;
                    q.parts.clear();
                }
            }
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Writes queued pieces (several per system call) until the socket would block;
    /// `Ok(true)` once all are written.
    fn write_queued(&self, q: &mut OutQueue) -> std::io::Result<bool> {
        while !q.parts.is_empty() {
            let slices: Vec<std::io::IoSlice<'_>> = q
                .parts
                .iter()
                .take(IOV_BATCH)
                .map(|(part, done)| std::io::IoSlice::new(&part[*done..]))
                .collect();
            match self.wr.try_write_vectored(&slices) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(mut n) => {
                    while n > 0 {
                        let (part, done) = q.parts.front_mut().expect("written bytes were queued");
                        let left = part.len() - *done;
                        if n >= left {
                            n -= left;
                            q.parts.pop_front();
                        } else {
                            *done += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Writes everything queued, waiting for the socket as long as it takes.
    async fn flush(&self) -> std::io::Result<()> {
        loop {
            {
                let mut q = lock(&self.queue);
                if q.closed {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                match self.write_queued(&mut q) {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(e) => {
                        q.closed = true;
                        q.parts.clear();
                        return Err(e);
                    }
                }
            }
            self.wr.writable().await?;
        }
    }

    /// Stops all writing and shuts the write side down (the peer sees EOF).
    fn close(&self) {
        let mut q = lock(&self.queue);
        q.closed = true;
        q.parts.clear();
        use std::os::fd::AsRawFd;
        let fd = self.wr.as_ref().as_raw_fd();
        // SAFETY: `fd` is the connection's open socket, owned by `self.wr`; shutdown
        // neither closes nor invalidates it.
        unsafe {
            libc::shutdown(fd, libc::SHUT_WR);
        }
    }
}

struct Connection {
    id: usize,
    methods: Methods,
    direct: Option<Arc<crate::api::DirectCalls>>,
    max: usize,
    shutdown: CancellationToken,
    /// Calls of this connection running at once. The reader waits for a permit before
    /// starting another, so a client that sends without reading its answers is slowed
    /// down instead of piling up responses in the daemon's memory.
    in_flight: Arc<Semaphore>,
}

impl Connection {
    async fn permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // The semaphore is never closed, so this only fails if that changes.
        self.in_flight.clone().acquire_owned().await.ok()
    }

    async fn serve(self, stream: UnixStream) {
        let (mut rd, wr) = stream.into_split();
        let (tx, mut rx) = mpsc::channel::<Box<RawValue>>(WRITE_QUEUE);
        let sink = MethodSink::new_with_limit(tx, u32::try_from(self.max).unwrap_or(u32::MAX));
        let stop_writer = CancellationToken::new();
        let writer_stop = stop_writer.clone();
        // Responses of direct calls are written by whoever answers them (see `Outbox`);
        // the writer task writes the method table's and finishes what the socket did
        // not take at once.
        let outbox = Arc::new(Outbox {
            wr,
            framing: std::sync::OnceLock::new(),
            queue: std::sync::Mutex::default(),
            wake: tokio::sync::Notify::new(),
        });
        let writer_out = outbox.clone();
        let writer = tokio::spawn(async move {
            let out = writer_out;
            loop {
                tokio::select! {
                    m = rx.recv() => match m {
                        Some(m) => out.send(m.get().as_bytes()),
                        None => break,
                    },
                    _ = out.wake.notified() => {}
                    _ = writer_stop.cancelled() => {
                        // Drain what is queued (the peer may have half-closed), then end.
                        rx.close();
                        while let Some(m) = rx.recv().await {
                            out.send(m.get().as_bytes());
                        }
                        let _ = tokio::time::timeout(DRAIN_TIMEOUT, out.flush()).await;
                        break;
                    }
                }
                if out.flush().await.is_err() {
                    break;
                }
            }
            out.close();
        });
        let conn_sink = ConnSink {
            sink: sink.clone(),
            pending: Arc::new(std::sync::Mutex::new((0, HashMap::new()))),
            conn_id: self.id,
        };
        let subs = BoundedSubscriptions::new(MAX_SUBSCRIPTIONS_PER_CONN);
        let mut codec = FrameCodec::new(self.max);
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut calls = JoinSet::new();
        let mut eof = false;
        loop {
            // Decode every complete message already buffered before reading more, so a
            // request queued behind a bad one is never stalled.
            let decoded = codec.next(&mut buf, eof);
            if let Some(f) = codec.framing() {
                let _ = outbox.framing.set(f);
            }
            match decoded {
                Ok(Some(text)) => {
                    self.route(text, &sink, &outbox, &conn_sink, &subs, &mut calls)
                        .await;
                    continue;
                }
                Ok(None) if eof => break,
                Ok(None) => {}
                Err(e) => {
                    let fatal = e.is_fatal();
                    let (code, msg, kind) = match e {
                        FrameError::TooLarge { fatal } => (
                            -32600,
                            format!(
                                "message exceeds max_message_bytes ({} bytes); {}",
                                self.max,
                                if fatal {
                                    "closing the connection"
                                } else {
                                    "the line was discarded"
                                }
                            ),
                            Some("message_too_large"),
                        ),
                        FrameError::NotUtf8 => (
                            -32700,
                            "parse error: message is not valid UTF-8".to_string(),
                            None,
                        ),
                        FrameError::BadHeader(why) => (
                            -32700,
                            format!(
                                "parse error: bad message header ({why}); closing the connection"
                            ),
                            None,
                        ),
                        FrameError::Io(_) => break,
                    };
                    let _ = sink
                        .send(raw(&error_response(Value::Null, code, &msg, kind)))
                        .await;
                    if fatal {
                        break;
                    }
                    continue;
                }
            }
            while calls.try_join_next().is_some() {}
            let n = tokio::select! {
                r = rd.read_buf(&mut buf) => r,
                _ = self.shutdown.cancelled() => Ok(0),
            };
            match n {
                Ok(0) => eof = true,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // EOF: fail requests the peer will never answer, let in-flight calls finish and
        // write their responses, then stop the writer (subscriptions end with it).
        lock(&conn_sink.pending).1.clear();
        while calls.join_next().await.is_some() {}
        // Direct calls hold their permit until their response is queued: having every
        // permit back means every answer is with the writer.
        let _all = self
            .in_flight
            .acquire_many(MAX_IN_FLIGHT_PER_CONN as u32)
            .await;
        stop_writer.cancel();
        // The writer drains with a per-write timeout; this bounds a peer that never reads.
        let _ = tokio::time::timeout(DRAIN_TIMEOUT * 2, writer).await;
    }

    async fn route(
        &self,
        line: String,
        sink: &MethodSink,
        outbox: &Arc<Outbox>,
        conn_sink: &ConnSink,
        subs: &BoundedSubscriptions,
        calls: &mut JoinSet<()>,
    ) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return;
        }
        // Fast path: a well-formed call (the common case) is parsed once, straight into
        // jsonrpsee's Request; anything else is classified from a generic Value.
        if trimmed.starts_with('{') {
            if let Ok(req) = serde_json::from_str::<Request>(trimmed) {
                if let Some(direct) = self.direct.as_ref().filter(|d| d.takes(&req.method)) {
                    let permit = self.permit().await;
                    let out = outbox.clone();
                    let respond: crate::api::Respond = Box::new(move |text| {
                        out.send_owned(text);
                        drop(permit);
                    });
                    if direct.try_call(&req, respond).is_ok() {
                        return;
                    }
                }
                let methods = self.methods.clone();
                let sink = sink.clone();
                let conn_sink = conn_sink.clone();
                let subs = subs.clone();
                let conn_id = ConnectionId(self.id);
                let req = owned(req);
                let permit = self.permit().await;
                calls.spawn(async move {
                    let _permit = permit;
                    if let Some(resp) =
                        run_request(req, &methods, &sink, &conn_sink, &subs, conn_id, false).await
                    {
                        let _ = sink.send(resp).await;
                    }
                });
                return;
            }
        }
        let value: Value = match serde_json::from_str(trimmed) {
            Ok(v) => v,
            Err(e) => {
                let msg = format!("parse error: {e}");
                let _ = sink
                    .send(raw(&error_response(Value::Null, -32700, &msg, None)))
                    .await;
                return;
            }
        };
        let methods = self.methods.clone();
        let sink = sink.clone();
        let conn_sink = conn_sink.clone();
        let subs = subs.clone();
        let conn_id = ConnectionId(self.id);
        match value {
            Value::Array(items) => {
                let permit = self.permit().await;
                calls.spawn(async move {
                    let _permit = permit;
                    if let Some(resp) =
                        run_batch(items, &methods, &sink, &conn_sink, &subs, conn_id).await
                    {
                        let _ = sink.send(raw(&resp)).await;
                    }
                });
            }
            Value::Object(ref obj)
                if !obj.contains_key("method")
                    && (obj.contains_key("result") || obj.contains_key("error")) =>
            {
                // A response to one of our requests (agentd/permission).
                if let Some(id) = obj.get("id").and_then(Value::as_u64) {
                    let waiter = lock(&conn_sink.pending).1.remove(&id);
                    if let Some(tx) = waiter {
                        let _ = tx.send(value);
                    }
                }
            }
            Value::Object(_) => {
                let permit = self.permit().await;
                calls.spawn(async move {
                    let _permit = permit;
                    if let Some(resp) =
                        run_one(&value, &methods, &sink, &conn_sink, &subs, conn_id).await
                    {
                        let _ = sink.send(resp).await;
                    }
                });
            }
            _ => {
                let _ = sink
                    .send(raw(&error_response(
                        Value::Null,
                        -32600,
                        "invalid request: expected an object or a batch array",
                        None,
                    )))
                    .await;
            }
        }
    }
}

/// Runs one request object. Returns the response to write, if any (none for
/// notifications and subscriptions, whose sink writes directly).
async fn run_one(
    value: &Value,
    methods: &Methods,
    sink: &MethodSink,
    conn_sink: &ConnSink,
    subs: &BoundedSubscriptions,
    conn_id: ConnectionId,
) -> Option<Box<RawValue>> {
    let id_of = || value.get("id").cloned().unwrap_or(Value::Null);
    let is_notification = value.get("id").is_none();
    // Notifications have no id; jsonrpsee's Request wants one, so run them as id null
    // and drop the response.
    let text = if is_notification {
        let mut v = value.clone();
        v["id"] = Value::Null;
        v.to_string()
    } else {
        value.to_string()
    };
    let req: Request = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            if is_notification {
                return None;
            }
            return Some(raw(&error_response(
                id_of(),
                -32600,
                &format!("invalid request: {e}"),
                None,
            )));
        }
    };
    run_request(
        owned(req),
        methods,
        sink,
        conn_sink,
        subs,
        conn_id,
        is_notification,
    )
    .await
}

fn owned(req: Request<'_>) -> Request<'static> {
    Request {
        jsonrpc: req.jsonrpc,
        id: req.id.into_owned(),
        method: std::borrow::Cow::Owned(req.method.into_owned()),
        params: req.params.map(|p| std::borrow::Cow::Owned(p.into_owned())),
        extensions: req.extensions,
    }
}

async fn run_request(
    req: Request<'static>,
    methods: &Methods,
    sink: &MethodSink,
    conn_sink: &ConnSink,
    subs: &BoundedSubscriptions,
    conn_id: ConnectionId,
    is_notification: bool,
) -> Option<Box<RawValue>> {
    let mut ext = Extensions::new();
    ext.insert(conn_id);
    ext.insert(conn_sink.clone());
    ext.insert::<crate::peer::PeerHandle>(std::sync::Arc::new(conn_sink.clone()));
    let rp = dispatch(req, methods, sink, subs, conn_id, ext).await;
    if is_notification {
        return None;
    }
    if rp.is_method_call() || rp.is_batch() {
        let (json, notify, _) = rp.into_parts();
        if let Some(n) = notify {
            n.notify(true);
        }
        return Some(json);
    }
    if rp.is_error() && rp.is_subscription() {
        let (json, _, _) = rp.into_parts();
        return Some(json);
    }
    None
}

async fn run_batch(
    items: Vec<Value>,
    methods: &Methods,
    sink: &MethodSink,
    conn_sink: &ConnSink,
    subs: &BoundedSubscriptions,
    conn_id: ConnectionId,
) -> Option<Value> {
    if items.is_empty() {
        return Some(error_response(
            Value::Null,
            -32600,
            "invalid request: empty batch",
            None,
        ));
    }
    let mut out = Vec::new();
    for item in items {
        if !item.is_object() || item.get("method").is_none() {
            out.push(error_response(
                item.get("id").cloned().unwrap_or(Value::Null),
                -32600,
                "invalid request in batch",
                None,
            ));
            continue;
        }
        if let Some(resp) = run_one(&item, methods, sink, conn_sink, subs, conn_id).await {
            if let Ok(v) = serde_json::from_str::<Value>(resp.get()) {
                out.push(v);
            }
        }
    }
    if out.is_empty() {
        None
    } else {
        Some(Value::Array(out))
    }
}

async fn dispatch(
    req: Request<'_>,
    methods: &Methods,
    sink: &MethodSink,
    subs: &BoundedSubscriptions,
    conn_id: ConnectionId,
    ext: Extensions,
) -> MethodResponse {
    let id: Id<'_> = req.id.clone();
    let params = jsonrpsee::types::Params::new(req.params.as_ref().map(|p| p.get()));
    let max = u32::MAX as usize;
    match methods.method_with_name(&req.method) {
        None => MethodResponse::error(
            id,
            ErrorObject::owned(
                -32601,
                format!("method not found: {}", clip(&req.method)),
                Some(json!({"kind": "unsupported", "details": {}})),
            ),
        ),
        Some((_, MethodCallback::Sync(cb))) => (cb)(id, params, max, ext),
        Some((_, MethodCallback::Async(cb))) => {
            (cb)(id.into_owned(), params.into_owned(), conn_id, max, ext).await
        }
        Some((_, MethodCallback::Subscription(cb))) => match subs.acquire() {
            Some(permit) => {
                let state = SubscriptionState {
                    conn_id,
                    id_provider: &RandomIntegerIdProvider,
                    subscription_permit: permit,
                };
                (cb)(id, params, sink.clone(), state, ext).await
            }
            None => MethodResponse::error(
                id,
                ErrorObject::owned(
                    -32000,
                    "too many subscriptions on this connection",
                    Some(json!({"kind": "busy", "details": {}})),
                ),
            ),
        },
        Some((_, MethodCallback::Unsubscription(cb))) => (cb)(id, params, conn_id, max, ext),
    }
}

/// Method names come from clients; never echo an unbounded one.
fn clip(s: &str) -> &str {
    crate::text::utf8_prefix(s, 64)
}
