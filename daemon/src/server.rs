//! The JSON-RPC 2.0 transport over the Unix socket (docs/protocol.md#the-socket,
//! docs/protocol.md#framing, docs/protocol.md#errors).
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
                    // A command of a turn is never a client (docs/sandbox.md#contract): from inside a
                    // sandbox it could start turns or answer its own permission requests.
                    // A peer already gone when checked is refused too: it may have handed
                    // the connected socket to a sandboxed child before exiting.
                    #[cfg(target_os = "linux")]
                    if let Some(why) = agentd_sandbox::sandboxed_peer(
                        std::os::fd::AsRawFd::as_raw_fd(&stream),
                        cred.pid().unwrap_or(0),
                    ) {
                        tracing::warn!(pid = ?cred.pid(), reason = %why, "refusing requests from a sandboxed command");
                        tokio::spawn(refuse_sandboxed(stream, why));
                        continue;
                    }
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

/// Answers every request of a connection from inside a command sandbox with
/// `permission_denied` (each one logged), then closes it. Newline-delimited requests
/// only; anything else just ends the connection.
async fn refuse_sandboxed(stream: UnixStream, why: String) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd.take(1 << 20)).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(req) = serde_json::from_str::<serde_json::Value>(&line) else {
            break;
        };
        let method = req.get("method").and_then(|m| m.as_str()).unwrap_or("");
        tracing::warn!(method, reason = %why, "refused a request from a sandboxed command");
        let Some(id) = req.get("id") else { continue };
        let err = agentd_proto::AgentError::new(
            agentd_proto::ErrorKind::PermissionDenied,
            "requests from inside a command sandbox are refused",
        )
        .with_details(serde_json::json!({"reason": why, "method": method}));
        let obj = crate::api::error_object(&err);
        let resp = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": obj});
        let mut text = resp.to_string();
        text.push('\n');
        if wr.write_all(text.as_bytes()).await.is_err() {
            break;
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
    /// The connection's socket (nonblocking). The runtime watches it for reading only
    /// (see [`Connection::serve`]); a write that finds it full waits on a registration
    /// of its own ([`flush`](Self::flush)).
    sock: Arc<std::os::unix::net::UnixStream>,
    /// Set by the reader once the first bytes show the framing; nothing is written
    /// before that, since every message answers or follows something the peer sent.
    framing: std::sync::OnceLock<Framing>,
    queue: std::sync::Mutex<OutQueue>,
    /// Tells the writer task that bytes wait in the queue.
    wake: tokio::sync::Notify,
    /// How the reader takes bytes out of the socket (see [`Intake`]).
    intake: Intake,
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

    /// Writes `parts` or queues them for the writer task, then takes out of the socket
    /// the requests the reader left in it (see [`Intake`]): the peer is awake for this
    /// message, so the write space that frees wakes nobody.
    fn push(&self, parts: Vec<bytes::Bytes>) {
        if self.enqueue(parts) {
            self.wake.notify_one();
        }
        self.intake.release();
    }

    /// Writes what the socket takes now and queues the rest; `true` if the writer task
    /// has something to finish.
    fn enqueue(&self, parts: Vec<bytes::Bytes>) -> bool {
        let mut q = lock(&self.queue);
        if q.closed {
            return false;
        }
        let was_empty = q.parts.is_empty();
        q.parts
            .extend(parts.into_iter().filter(|p| !p.is_empty()).map(|p| (p, 0)));
        if was_empty {
            match self.write_queued(&mut q) {
                Ok(true) => return false,
                Ok(false) => {}
                Err(_) => {
                    q.closed = true;
                    q.parts.clear();
                }
            }
        }
        true
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.sock.as_raw_fd()
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
            match std::io::Write::write_vectored(&mut &*self.sock, &slices) {
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
            // Only a full socket gets here (a peer reading slowly): watch a duplicate
            // of it for write space until then. A registration for the connection's
            // life would wake a runtime worker each time the peer reads an answer.
            let dup = self.sock.try_clone()?;
            // SAFETY: the AsyncFd owns `dup`, which keeps its descriptor open and the
            // same until the AsyncFd is dropped.
            let watch = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(dup, tokio::io::Interest::WRITABLE)
            }?;
            watch.writable().await?.clear_ready();
        }
    }

    /// Stops all writing and shuts the write side down (the peer sees EOF).
    fn close(&self) {
        let mut q = lock(&self.queue);
        q.closed = true;
        q.parts.clear();
        let fd = self.fd();
        // SAFETY: `fd` is the connection's open socket, owned by `self.sock`; shutdown
        // neither closes nor invalidates it.
        unsafe {
            libc::shutdown(fd, libc::SHUT_WR);
        }
    }
}

/// Where the reader's bytes come from. Taking a request out of a Unix stream socket
/// frees the sender's buffer space, and the kernel then wakes every task waiting on the
/// sender's socket, including a client blocked in `read` for its answer: it wakes, finds
/// nothing, and sleeps again, one useless wake-up (on another vCPU, an interrupt) per
/// request. So on Linux the reader peeks (`MSG_PEEK` with `SO_PEEK_OFF`, which moves a
/// peek offset forward) and leaves a direct call's request in the socket until that
/// call's answer is written; whoever writes an answer then takes out what was peeked
/// ([`Outbox::push`]). Anything else is taken out before the reader waits
/// again: a message answered by the method table, a partial message (then the reader
/// reads rather than peeks, so a large message is copied once), and more than
/// [`MAX_HELD`] bytes, so a client's send buffer is never held full while it waits.
///
/// `held` counts bytes the reader has but the socket still holds; they are always the
/// first bytes in the socket. The lock makes a take-out and a read one step each, so no
/// byte is read twice or taken out unread.
struct Intake {
    /// The connection's socket, owned by the [`Outbox`] that holds this.
    fd: std::os::fd::RawFd,
    peeking: bool,
    held: std::sync::Mutex<usize>,
}

/// Most request bytes left in a socket while their answers are pending.
const MAX_HELD: usize = 16 * 1024;

/// Read size when the buffer's spare room is smaller.
const READ_CHUNK: usize = 16 * 1024;

impl Intake {
    fn new(fd: std::os::fd::RawFd) -> Intake {
        Intake {
            fd,
            peeking: peek_offset_on(fd),
            held: std::sync::Mutex::new(0),
        }
    }

    fn held(&self) -> usize {
        *lock(&self.held)
    }

    /// Takes out of the socket every byte the reader already has.
    fn release(&self) {
        if self.peeking {
            self.take_out(&mut lock(&self.held));
        }
    }

    /// Takes the `held` bytes out of the socket (under the lock); `false` if the socket
    /// did not give them all back.
    fn take_out(&self, held: &mut usize) -> bool {
        if *held > 0 {
            *held -= discard(self.fd, *held);
        }
        *held == 0
    }

    /// Appends what the socket has to `buf`: peeked (left in the socket) when `peek`,
    /// read otherwise. `WouldBlock` when there is nothing new.
    fn take(&self, buf: &mut BytesMut, peek: bool) -> std::io::Result<usize> {
        let mut held = lock(&self.held);
        let peek = peek && self.peeking;
        if !peek && !self.take_out(&mut held) {
            return Err(std::io::Error::other(
                "the socket did not give back the bytes already peeked",
            ));
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let spare = buf.spare_capacity_mut();
        let flags = libc::MSG_DONTWAIT | if peek { libc::MSG_PEEK } else { 0 };
        // SAFETY: `fd` is the connection's open socket; `recv` writes at most
        // `spare.len()` bytes into the buffer's spare capacity.
        let n = unsafe { libc::recv(self.fd, spare.as_mut_ptr().cast(), spare.len(), flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: the kernel initialized the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        if peek {
            *held += n;
        }
        Ok(n)
    }
}

/// Sets the socket's peek offset, so that each `MSG_PEEK` returns bytes after those
/// peeked before. Only Linux has it; elsewhere the reader reads.
#[cfg(target_os = "linux")]
fn peek_offset_on(fd: std::os::fd::RawFd) -> bool {
    let zero: libc::c_int = 0;
    // SAFETY: `fd` is an open socket and the option value lives across the call.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEEK_OFF,
            (&zero as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn peek_offset_on(_fd: std::os::fd::RawFd) -> bool {
    false
}

/// Takes up to `n` bytes out of the socket without keeping them; returns how many.
fn discard(fd: std::os::fd::RawFd, mut n: usize) -> usize {
    let mut scratch = [0u8; 4096];
    let mut done = 0;
    while n > 0 {
        let want = n.min(scratch.len());
        // SAFETY: `fd` is the connection's open socket; `recv` writes at most `want`
        // bytes into `scratch`.
        let r = unsafe { libc::recv(fd, scratch.as_mut_ptr().cast(), want, libc::MSG_DONTWAIT) };
        if r <= 0 {
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        n -= r as usize;
        done += r as usize;
    }
    done
}

/// Waits for bytes and appends them to `buf` (see [`Intake::take`]).
async fn take(
    rd: &tokio::io::unix::AsyncFd<Arc<std::os::unix::net::UnixStream>>,
    out: &Outbox,
    buf: &mut BytesMut,
    peek: bool,
) -> std::io::Result<usize> {
    loop {
        let mut ready = rd.readable().await?;
        match ready.try_io(|_| out.intake.take(buf, peek)) {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(r) => return r,
            // Nothing new: readiness is cleared; wait for the next bytes.
            Err(_would_block) => continue,
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
        let intake = {
            use std::os::fd::AsRawFd;
            Intake::new(stream.as_raw_fd())
        };
        // The runtime watches the socket for reading only: registered for writing too,
        // it would wake a worker each time the peer reads an answer (that frees write
        // space), for nothing. The stream stays nonblocking.
        let sock = match stream.into_std() {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot take over the connection's socket; closing");
                return;
            }
        };
        // SAFETY: the AsyncFd holds a clone of the Arc that owns the socket, so its
        // descriptor stays open and the same until the AsyncFd is dropped.
        let rd = match unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                sock.clone(),
                tokio::io::Interest::READABLE,
            )
        } {
            Ok(rd) => rd,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the connection's socket; closing");
                return;
            }
        };
        let (tx, mut rx) = mpsc::channel::<Box<RawValue>>(WRITE_QUEUE);
        let sink = MethodSink::new_with_limit(tx, u32::try_from(self.max).unwrap_or(u32::MAX));
        let stop_writer = CancellationToken::new();
        let writer_stop = stop_writer.clone();
        // Responses of direct calls are written by whoever answers them (see `Outbox`);
        // the writer task writes the method table's and finishes what the socket did
        // not take at once.
        let outbox = Arc::new(Outbox {
            sock,
            framing: std::sync::OnceLock::new(),
            queue: std::sync::Mutex::default(),
            wake: tokio::sync::Notify::new(),
            intake,
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
        // Since the last read: some message was a direct call, and every one was.
        let (mut direct_seen, mut other_seen) = (false, false);
        loop {
            // Decode every complete message already buffered before reading more, so a
            // request queued behind a bad one is never stalled.
            let decoded = codec.next(&mut buf, eof);
            if let Some(f) = codec.framing() {
                let _ = outbox.framing.set(f);
            }
            match decoded {
                Ok(Some(text)) => {
                    if self
                        .route(text, &sink, &outbox, &conn_sink, &subs, &mut calls)
                        .await
                    {
                        direct_seen = true;
                    } else {
                        other_seen = true;
                    }
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
            // Only whole direct calls stay in the socket until answered (see `Intake`).
            // Within a message the reader reads, and that takes out what it held first.
            let at_boundary = buf.is_empty();
            if at_boundary && !(direct_seen && !other_seen && outbox.intake.held() <= MAX_HELD) {
                outbox.intake.release();
            }
            (direct_seen, other_seen) = (false, false);
            let n = tokio::select! {
                r = take(&rd, &outbox, &mut buf, at_boundary) => r,
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

    /// Routes one message; `true` if it was a direct call (answered through the outbox
    /// by whoever finishes it).
    async fn route(
        &self,
        line: String,
        sink: &MethodSink,
        outbox: &Arc<Outbox>,
        conn_sink: &ConnSink,
        subs: &BoundedSubscriptions,
        calls: &mut JoinSet<()>,
    ) -> bool {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return false;
        }
        // Fast path: a well-formed call (the common case) is parsed once, straight into
        // jsonrpsee's Request (`parse_call`); anything else is classified from a
        // generic Value.
        if trimmed.starts_with('{') {
            if let Ok(req) = parse_call(trimmed) {
                if let Some(direct) = self.direct.as_ref().filter(|d| d.takes(&req.method)) {
                    let permit = self.permit().await;
                    let out = outbox.clone();
                    let respond: crate::api::Respond = Box::new(move |text| {
                        out.send_owned(text);
                        drop(permit);
                    });
                    if direct.try_call(&req, respond).is_ok() {
                        return true;
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
                return false;
            }
        }
        let value: Value = match serde_json::from_str(trimmed) {
            Ok(v) => v,
            Err(e) => {
                let msg = format!("parse error: {e}");
                let _ = sink
                    .send(raw(&error_response(Value::Null, -32700, &msg, None)))
                    .await;
                return false;
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
        false
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

/// A call as jsonrpsee's `Request` reads it, without its `Id`'s untagged parse: that
/// tries `null` first and builds (and formats) an error for every numeric or string id
/// before it tries the next form, 9% of the reader's busy time per append. Accepts and
/// refuses exactly what `Request` does (a missing or fractional id, a wrong `jsonrpc`
/// falls through to the generic path as before). Public for the `rpc_call` fuzz target,
/// which checks that claim against `Request` on every input.
pub fn parse_call(text: &str) -> serde_json::Result<Request<'_>> {
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        jsonrpc: jsonrpsee::types::TwoPointZero,
        #[serde(borrow)]
        id: CallId<'a>,
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        params: Option<std::borrow::Cow<'a, RawValue>>,
    }
    struct CallId<'a>(Id<'a>);
    impl<'de: 'a, 'a> serde::Deserialize<'de> for CallId<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
                type Value = CallId<'a>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("null, an unsigned integer or a string")
                }
                fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                    Ok(CallId(Id::Null))
                }
                fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                    Ok(CallId(Id::Number(v)))
                }
                fn visit_borrowed_str<E: serde::de::Error>(
                    self,
                    v: &'de str,
                ) -> Result<Self::Value, E> {
                    Ok(CallId(Id::Str(std::borrow::Cow::Borrowed(v))))
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(CallId(Id::Str(std::borrow::Cow::Owned(v.to_owned()))))
                }
            }
            d.deserialize_any(V(std::marker::PhantomData))
        }
    }
    let c: Call<'_> = serde_json::from_str(text)?;
    Ok(Request {
        jsonrpc: c.jsonrpc,
        id: c.id.0,
        method: c.method,
        params: c.params,
        extensions: Extensions::default(),
    })
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

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn parse_call_takes_and_refuses_what_jsonrpsees_request_does() {
        let calls = [
            r#"{"jsonrpc":"2.0","id":7,"method":"agentd/append","params":{"a":[1,"x"]}}"#,
            r#"{"jsonrpc":"2.0","id":"seven","method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":"s\"e\u0041","method":"m","params":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m","params":[1,2]}"#,
            r#"{"params":{},"method":"m","id":18446744073709551615,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"a\/b\u00e9","extra":{"x":[]}}"#,
            r#"{"jsonrpc":"2.0","id":-1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":{"n":1},"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"m"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            r#"{"id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m"} trailing"#,
        ];
        for text in calls {
            let theirs = serde_json::from_str::<Request>(text);
            let ours = parse_call(text);
            match (theirs, ours) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.id, b.id, "{text}");
                    assert_eq!(a.method, b.method, "{text}");
                    assert_eq!(
                        a.params.as_ref().map(|p| p.get()),
                        b.params.as_ref().map(|p| p.get()),
                        "{text}"
                    );
                }
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{text}: jsonrpsee {:?}, ours {:?}", a.is_ok(), b.is_ok()),
            }
        }
    }
}

// Peeking is Linux's (`SO_PEEK_OFF`); elsewhere the reader reads and nothing is held.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream as StdStream;

    /// Bytes queued in `fd`'s receive queue, peeked or not.
    fn queued(fd: std::os::fd::RawFd) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: an open socket and an int the kernel writes.
        let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
        assert_eq!(rc, 0);
        n as usize
    }

    fn wait_readable(fd: std::os::fd::RawFd) {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut p, 1, 10_000) };
        assert_eq!(rc, 1, "no bytes within 10 s");
    }

    #[test]
    fn peeked_bytes_stay_in_the_socket_until_released_and_are_never_given_twice() {
        let (mut client, server) = StdStream::pair().unwrap();
        let fd = server.as_raw_fd();
        let intake = Intake::new(fd);
        assert!(intake.peeking, "SO_PEEK_OFF is available on Linux");
        let mut buf = BytesMut::new();
        client.write_all(b"first\n").unwrap();
        wait_readable(fd);
        assert_eq!(intake.take(&mut buf, true).unwrap(), 6);
        assert_eq!(queued(fd), 6, "a peeked request stays in the socket");
        assert_eq!(intake.held(), 6);
        let e = intake.take(&mut buf, true).unwrap_err();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::WouldBlock,
            "nothing new to peek"
        );
        client.write_all(b"second\n").unwrap();
        wait_readable(fd);
        assert_eq!(
            intake.take(&mut buf, true).unwrap(),
            7,
            "a peek starts after what was peeked"
        );
        intake.release();
        assert_eq!(queued(fd), 0, "released: out of the socket");
        assert_eq!(intake.held(), 0);
        client.write_all(b"third\n").unwrap();
        wait_readable(fd);
        intake.take(&mut buf, true).unwrap();
        client.write_all(b"fourth\n").unwrap();
        wait_readable(fd);
        // A read takes out what was held before reading on.
        while !buf.ends_with(b"fourth\n") {
            intake.take(&mut buf, false).unwrap();
        }
        assert_eq!(queued(fd), 0);
        assert_eq!(&buf[..], b"first\nsecond\nthird\nfourth\n");
    }

    /// Peeks and reads by the reader, take-outs by other threads (as when answers are
    /// written by commit threads), in any interleaving: the reader gets the stream
    /// exactly, byte for byte.
    #[test]
    fn peeks_reads_and_concurrent_releases_give_the_stream_exactly_once() {
        let (mut client, server) = StdStream::pair().unwrap();
        let fd = server.as_raw_fd();
        let intake = Arc::new(Intake::new(fd));
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let stream: Vec<u8> = (0..8_000_000u32).map(|i| (i % 251) as u8).collect();
        let chunks: Vec<usize> = (0..4000).map(|_| 1 + (next() % 2000) as usize).collect();
        let sent = stream.clone();
        let writer = std::thread::spawn(move || {
            let mut at = 0;
            for c in chunks.iter().cycle() {
                if at == sent.len() {
                    break;
                }
                let end = (at + c).min(sent.len());
                client.write_all(&sent[at..end]).unwrap();
                at = end;
            }
        });
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let releasers: Vec<_> = (0..2)
            .map(|_| {
                let (intake, done) = (intake.clone(), done.clone());
                std::thread::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        intake.release();
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        let mut buf = BytesMut::new();
        loop {
            wait_readable(fd);
            match intake.take(&mut buf, next() % 4 != 0) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("take: {e}"),
            }
        }
        done.store(true, Ordering::Relaxed);
        for r in releasers {
            r.join().unwrap();
        }
        writer.join().unwrap();
        assert_eq!(buf.len(), stream.len());
        assert!(
            buf[..] == stream[..],
            "the bytes taken differ from the bytes sent"
        );
    }
}
