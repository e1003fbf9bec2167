//! The fuzz targets. Each takes raw bytes, panics on a bug (a broken invariant or a
//! panic inside agentd), and returns an outcome signature the engine uses to keep
//! inputs that reach new behaviour.

use agentd::config::Config;
use agentd::history::compaction::{self, CompactOptions};
use agentd::history::fold::{replay_as_of, Fold, ReplayContext};
use agentd::history::fork;
use agentd::history::replay::pairing_violation;
use agentd::import::{self, Format, ImportContext};
use agentd::store::{self, Home};
use agentd::tools::{confine, workspace};
use agentd_proto::{Event, EventType};
use serde_json::{json, Value};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const NAMES: &[&str] = &[
    "log",
    "ndjson",
    "framing",
    "import_pi",
    "import_pixir",
    "import_codex",
    "history",
    "config",
    "path",
    "sandbox_policy",
    "mcp_names",
    "mcp_result",
];

pub fn by_name(name: &str) -> Option<crate::engine::Target> {
    Some(match name {
        "log" => log,
        "ndjson" => ndjson,
        "framing" => framing,
        "import_pi" => import_pi,
        "import_pixir" => import_pixir,
        "import_codex" => import_codex,
        "sandbox_policy" => sandbox_policy,
        "history" => history,
        "config" => config,
        "path" => path,
        "mcp_names" => mcp_names,
        "mcp_result" => mcp_result,
        _ => return None,
    })
}

fn sig(parts: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// Scratch space for targets that need files: tmpfs when there is one (`/dev/shm`),
/// so the loader's fsyncs cost nothing. Removed by `cleanup`.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("agentd-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create fuzz scratch dir");
        d
    })
}

pub fn cleanup() {
    let _ = std::fs::remove_dir_all(scratch());
}

/// Every replay of `events` is balanced and passes the pairing guard; the
/// incremental fold agrees with a fresh replay when seqs are contiguous.
fn check_replay(events: &[Event], what: &str) -> (usize, bool) {
    let ctx = ReplayContext {
        workspace: "/w".into(),
        permission_mode: "auto".into(),
        model: Some("m1".into()),
    };
    let fold = Fold::from_events(events);
    let r = fold.replay(&ctx);
    assert!(r.stats.balanced, "{what}: replay unbalanced: {:?}", r.items);
    if let Some(v) = pairing_violation(&r.items) {
        panic!("{what}: pairing guard let through: {v}");
    }
    let contiguous = events.windows(2).all(|w| w[1].seq == w[0].seq + 1);
    if contiguous {
        let fresh = replay_as_of(events, None, &ctx);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            serde_json::to_string(&fresh).unwrap(),
            "{what}: incremental fold and fresh replay differ"
        );
    }
    (r.items.len().min(32), contiguous)
}

// ---- Log loader ------------------------------------------------------------------

const SID: &str = "20261121T101500-f022ed";

/// Bytes as a Log file: loading never panics; a torn tail is cut and quarantined
/// byte-exactly; a second load finds nothing more to repair and the same events.
pub fn log(data: &[u8]) -> u64 {
    let root = scratch().join("log-home");
    let home = Home::open(&root).expect("home");
    let path = home.log_path(SID).unwrap();
    std::fs::write(&path, data).unwrap();
    let _ = std::fs::remove_dir_all(home.quarantine_dir());
    std::fs::create_dir_all(home.quarantine_dir()).unwrap();
    let first = store::load_log(&home, SID);
    let (events, report) = match first {
        Ok(x) => x,
        Err(e) => return sig(("err", e.kind.as_str())),
    };
    let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(
        on_disk,
        &data[..complete],
        "the Log after load is not the input up to its last newline"
    );
    match &report.torn {
        Some((n, q)) => {
            assert_eq!(*n as usize, data.len() - complete, "torn byte count");
            assert_eq!(
                std::fs::read(q).unwrap(),
                &data[complete..],
                "quarantined bytes differ from the torn tail"
            );
        }
        None => assert_eq!(complete, data.len(), "a torn tail was not reported"),
    }
    let (again, report2) = store::load_log(&home, SID).expect("second load");
    assert!(report2.torn.is_none(), "second load found a torn tail");
    assert_eq!(again.len(), events.len(), "second load differs");
    assert_eq!(report2.corrupt_lines.len(), report.corrupt_lines.len());
    let (items, contiguous) = check_replay(&events, "loaded Log");
    sig((
        events.len().min(16),
        report.corrupt_lines.len().min(4),
        report.seq_anomalies.len().min(4),
        report.torn.is_some(),
        items,
        contiguous,
    ))
}

// ---- Socket framing (NDJSON) -------------------------------------------------------

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
pub fn ndjson(data: &[u8]) -> u64 {
    let s = server();
    let out = exchange(&s.socket, data);
    let mut codes = Vec::new();
    let mut n = 0usize;
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
        n += 1;
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
            if let Some(c) = o.pointer("/error/code").and_then(Value::as_i64) {
                codes.push(c);
            }
        }
    }
    codes.sort_unstable();
    codes.dedup();
    let hello = exchange(
        &s.socket,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"agentd/hello\",\"params\":{}}\n",
    );
    assert!(
        hello.starts_with(b"{\"jsonrpc\":\"2.0\""),
        "daemon stopped answering after this input: {:?}",
        String::from_utf8_lossy(&hello)
    );
    sig((n.min(8), codes))
}

// ---- Frame codec (NDJSON and Content-Length) ----------------------------------------

/// Decodes `bytes` fed in chunks of `chunk` bytes: the messages and errors in order.
fn decode_all(bytes: &[u8], chunk: usize) -> Vec<String> {
    use agentd::framing::FrameCodec;
    const MAX: usize = 4096;
    let mut codec = FrameCodec::new(MAX);
    let mut buf = bytes::BytesMut::new();
    let mut out = Vec::new();
    let mut fed = 0;
    loop {
        let eof = fed >= bytes.len();
        match codec.next(&mut buf, eof) {
            Ok(Some(m)) => {
                assert!(
                    m.len() <= MAX,
                    "a {}-byte message passed the {MAX} cap",
                    m.len()
                );
                out.push(format!("msg:{m}"));
            }
            Ok(None) if eof => break,
            Ok(None) => {
                let end = (fed + chunk).min(bytes.len());
                buf.extend_from_slice(&bytes[fed..end]);
                fed = end;
            }
            Err(e) => {
                out.push(format!("err:{e:?}"));
                if e.is_fatal() {
                    break;
                }
            }
        }
        assert!(
            out.len() <= bytes.len() + 2,
            "decoder yields without consuming"
        );
    }
    out
}

/// Bytes through the frame codec (NDJSON or `Content-Length`, detected from the first
/// bytes): never a panic or a message over the cap, and the same messages and errors
/// whether the bytes arrive at once or a few at a time.
pub fn framing(data: &[u8]) -> u64 {
    let Some((first, rest)) = data.split_first() else {
        return 0;
    };
    let chunk = 1 + (*first as usize % 17);
    let whole = decode_all(rest, rest.len().max(1));
    let split = decode_all(rest, chunk);
    assert_eq!(
        whole, split,
        "chunking changed the decoded messages (chunk {chunk})"
    );
    sig((
        whole.len().min(8),
        whole
            .iter()
            .map(|m| m.split(':').next().unwrap_or("").len())
            .collect::<Vec<_>>(),
    ))
}

// ---- Importers -----------------------------------------------------------------------

fn import_as(format: Format, data: &[u8]) -> u64 {
    let dir = scratch().join("import");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("src.{}", format.as_str()));
    std::fs::write(&src, data).unwrap();
    let ctx = ImportContext {
        session_id: SID.to_string(),
        workspace: Some("/w".into()),
        agentd_version: "fuzz".into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    match import::import(Some(format), &src, &mut out, &ctx) {
        Err(e) => sig(("err", e.kind.as_str())),
        Ok(report) => {
            let mut events = Vec::new();
            for (i, line) in out.split(|b| *b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let ev: Event = serde_json::from_slice(line)
                    .unwrap_or_else(|e| panic!("imported line {i} is not an event: {e}"));
                assert_eq!(ev.seq, i as u64, "imported seqs are not contiguous from 0");
                assert_eq!(ev.session_id, SID);
                events.push(ev);
            }
            assert!(out.is_empty() || out.ends_with(b"\n"), "torn imported Log");
            if let Some(first) = events.first() {
                assert_eq!(
                    first.event_type(),
                    EventType::SessionStarted,
                    "an imported Log must open with session_started"
                );
            }
            assert_eq!(report.imported as usize, events.len(), "report count");
            let (items, _) = check_replay(&events, "imported Log");
            sig((
                "ok",
                events.len().min(16),
                items,
                report.skipped_total.min(8),
            ))
        }
    }
}

pub fn import_pi(data: &[u8]) -> u64 {
    import_as(Format::Pi, data)
}
pub fn import_pixir(data: &[u8]) -> u64 {
    import_as(Format::Pixir, data)
}
pub fn import_codex(data: &[u8]) -> u64 {
    import_as(Format::Codex, data)
}

// ---- History projections (structure-aware) --------------------------------------------

/// Reads the input as a program that builds an event sequence.
struct Bytes<'a>(&'a [u8], usize);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.0.get(self.1).copied().unwrap_or(0);
        self.1 += 1;
        b
    }
    fn done(&self) -> bool {
        self.1 >= self.0.len()
    }
    fn pick<'s>(&mut self, xs: &[&'s str]) -> &'s str {
        xs[self.u8() as usize % xs.len()]
    }
    /// A JSON value, well-typed most of the time, hostile otherwise.
    fn value(&mut self, depth: u8) -> Value {
        match self.u8() % 10 {
            0 => Value::Null,
            1 => json!(self.u8().is_multiple_of(2)),
            2 => json!(self.u8() as i64 - 128),
            3 => json!(u64::MAX),
            4 if depth < 3 => {
                let n = self.u8() % 4;
                Value::Array((0..n).map(|_| self.value(depth + 1)).collect())
            }
            5 if depth < 3 => {
                let n = self.u8() % 4;
                let mut m = serde_json::Map::new();
                for _ in 0..n {
                    let k = self.pick(&["text", "call_id", "name", "ok", "output", "x"]);
                    m.insert(k.into(), self.value(depth + 1));
                }
                Value::Object(m)
            }
            _ => json!(self.pick(&["", "c1", "c2", "c3", "t1", "t2", "a", "\u{0}", "é"])),
        }
    }
    fn call_id(&mut self) -> Value {
        if self.u8().is_multiple_of(16) {
            self.value(1)
        } else {
            json!(self.pick(&["c1", "c2", "c3", "c4", "c5", "c6"]))
        }
    }
}

fn event_data(b: &mut Bytes, ty: &str) -> Value {
    let hostile = b.u8().is_multiple_of(12);
    if hostile {
        return b.value(0);
    }
    match ty {
        "session_started" => json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
        "user_message" | "assistant_message" => {
            json!({"text": b.pick(&["hi", "", "done", "x"]), "metadata": {"partial": b.u8().is_multiple_of(5)}})
        }
        "tool_call" => {
            json!({"call_id": b.call_id(), "name": b.pick(&["read_file", "shell", "write_file", "memory_apply"]),
            "args": {"path": b.pick(&["a", "b", "../x"])}})
        }
        "tool_result" => {
            json!({"call_id": b.call_id(), "ok": !b.u8().is_multiple_of(3), "output": b.pick(&["x", "", "err"])})
        }
        "permission_decision" => {
            json!({"call_id": b.call_id(), "decision": b.pick(&["allow", "deny", "maybe"])})
        }
        "turn_started" => json!({"turn_id": b.pick(&["t1", "t2", "t3"])}),
        "turn_ended" => {
            json!({"turn_id": b.pick(&["t1", "t2", "t3"]), "status": b.pick(&["completed", "interrupted", "error"])})
        }
        "reasoning" => json!({"item": {"n": b.u8()}, "model": b.pick(&["m1", "m2"])}),
        "history_compaction" => {
            let from = b.u8() as u64;
            json!({"range": {"from_seq": from, "to_seq": from + b.u8() as u64}, "summary": "s",
                "carried_forward": b.value(1), "checkpoint": b.value(1)})
        }
        _ => {
            let mut m = serde_json::Map::new();
            m.insert("x".into(), b.value(0));
            Value::Object(m)
        }
    }
}

/// Bytes as a program over arbitrary event sequences (every known type plus unknown
/// ones, dangling / duplicate / stray call ids, hostile data, rare seq anomalies), with
/// compactions and forks planned along the way: nothing panics, replay is balanced
/// after every step, a fork's child has no pending call and replays balanced.
pub fn history(data: &[u8]) -> u64 {
    let mut b = Bytes(data, 0);
    let mut types: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    types.extend([
        "future_kind",
        "tool_call",
        "tool_result",
        "tool_result",
        "user_message",
    ]);
    let mut events: Vec<Event> = Vec::new();
    let mut seq = 0u64;
    let mut compactions = 0usize;
    let mut forks = 0usize;
    let push = |events: &mut Vec<Event>, seq: &mut u64, kind: &str, data: Value| {
        events.push(Event {
            id: format!("{:016x}", *seq),
            session_id: SID.into(),
            seq: *seq,
            ts: format!("2026-11-21T10:00:{:02}.000000Z", *seq % 60),
            kind: kind.into(),
            data,
        });
        *seq += 1;
    };
    push(
        &mut events,
        &mut seq,
        "session_started",
        json!({"workspace": "/w", "agentd_version": "0", "log_format": 1}),
    );
    let ctx = ReplayContext {
        workspace: "/w".into(),
        permission_mode: "auto".into(),
        model: Some("m1".into()),
    };
    let mut fold = Fold::from_events(&events);
    let mut steps = 0;
    while !b.done() && steps < 400 {
        steps += 1;
        match b.u8() % 16 {
            0 => {
                // Compaction planned by the projection, recorded like the actor does.
                let opts = CompactOptions {
                    tail_events: (b.u8() % 12) as usize,
                    ..CompactOptions::default()
                };
                let plan = compaction::plan(&events, fold.latest_compaction(), &opts, json!({}));
                if plan.compactable {
                    compactions += 1;
                    push(&mut events, &mut seq, "history_compaction", plan.data);
                    fold.push(events.last().unwrap());
                }
            }
            1 => {
                let to = events[b.u8() as usize % events.len()].seq;
                let child = format!("20261121T101500-c{:05x}", forks);
                match fork::plan(
                    &events,
                    SID,
                    None,
                    "/w",
                    Some(to),
                    &child,
                    b.u8().is_multiple_of(2),
                ) {
                    Ok(plan) => {
                        forks += 1;
                        let cf = Fold::from_events(&plan.events);
                        assert!(
                            cf.pending_calls().is_empty(),
                            "fork child has pending calls"
                        );
                        check_replay(&plan.events, "fork child");
                    }
                    Err(e) => {
                        assert_ne!(e.kind, agentd_proto::ErrorKind::Internal, "fork: {e}");
                    }
                }
            }
            2 if b.u8().is_multiple_of(8) => {
                // A seq anomaly as a hand-edited Log can hold (the loader reports it).
                seq = seq.saturating_sub(b.u8() as u64 % 3) + (b.u8() as u64 % 3);
            }
            _ => {
                let ty = types[b.u8() as usize % types.len()];
                let data = event_data(&mut b, ty);
                push(&mut events, &mut seq, ty, data);
                fold.push(events.last().unwrap());
            }
        }
        // The incremental fold the actor keeps: balanced after every step.
        let r = fold.replay(&ctx);
        assert!(
            r.stats.balanced,
            "history: replay unbalanced: {:?}",
            r.items
        );
        if let Some(v) = pairing_violation(&r.items) {
            panic!("history: pairing guard let through: {v}");
        }
    }
    let (items, contiguous) = check_replay(&events, "history");
    sig((
        events.len().min(32),
        items,
        compactions.min(3),
        forks.min(3),
        contiguous,
    ))
}

// ---- Config -----------------------------------------------------------------------------

/// Bytes as `config.toml`: parsing gives a config or an error, never a panic, and a
/// parsed config answers its derived settings.
pub fn config(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let a = match toml::from_str::<Config>(&text) {
        Ok(c) => {
            let _ = c.batch_window();
            let _ = c.durability.as_str();
            "ok"
        }
        Err(_) => "err",
    };
    let b = match agentd::provider::config::ProvidersConfig::from_toml_str(&text) {
        Ok(_) => "ok".to_string(),
        Err(e) => e.kind.as_str().to_string(),
    };
    sig((a, b))
}

// ---- Tool path resolution -----------------------------------------------------------------

fn path_ws() -> &'static (PathBuf, PathBuf) {
    static WS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    WS.get_or_init(|| {
        use std::os::unix::fs::symlink;
        let root = scratch().join("path");
        let ws = root.join("ws");
        let out = root.join("outside");
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(ws.join("f"), "x").unwrap();
        std::fs::write(ws.join("a/b/g"), "x").unwrap();
        std::fs::write(out.join("secret"), "s").unwrap();
        let links: &[(&str, &Path)] = &[
            ("in", Path::new("a")),
            ("deep", Path::new("a/b")),
            ("up", Path::new("..")),
            ("out", &out),
            ("rel_out", Path::new("../outside")),
            ("loop1", Path::new("loop2")),
            ("loop2", Path::new("loop1")),
            ("dangling", Path::new("/nonexistent/x")),
            ("self", Path::new(".")),
        ];
        for (name, target) in links {
            let _ = symlink(target, ws.join(name));
        }
        let _ = symlink("../../f", ws.join("a/b/back"));
        let ws = std::fs::canonicalize(&ws).unwrap();
        (ws, std::fs::canonicalize(&out).unwrap())
    })
}

/// Bytes as a tool's path argument in a workspace full of symlinks (inside, outside,
/// relative escapes, loops, dangling): an accepted path is inside the workspace, and
/// opening it beneath the workspace descriptor reaches the same file.
pub fn path(data: &[u8]) -> u64 {
    let (ws, _out) = path_ws();
    let mode = if data.first().is_some_and(|b| b % 2 == 0) {
        workspace::Resolve::Existing
    } else {
        workspace::Resolve::ForWrite
    };
    let text = String::from_utf8_lossy(data.get(1..).unwrap_or_default());
    let p: String = text.chars().take(512).collect();
    match workspace::resolve(ws, &p, mode) {
        Err(e) => sig(("err", e.kind.as_str())),
        Ok(resolved) => {
            assert!(
                resolved.starts_with(ws),
                "resolve({p:?}) = {} is outside the workspace",
                resolved.display()
            );
            if mode == workspace::Resolve::Existing {
                let rel = resolved.strip_prefix(ws).unwrap();
                let root = confine::open_root(ws).unwrap();
                let fd = confine::open_beneath(&root, rel, libc::O_PATH).unwrap_or_else(|e| {
                    panic!(
                        "resolve({p:?}) accepted {} but the confined open failed: {e}",
                        resolved.display()
                    )
                });
                use std::os::fd::AsRawFd;
                let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
                assert_eq!(
                    real, resolved,
                    "confined open reached another file for {p:?}"
                );
            }
            sig((
                "ok",
                mode == workspace::Resolve::Existing,
                resolved.components().count().min(8),
            ))
        }
    }
}

// ---- Sandbox policy ------------------------------------------------------------------------

/// Bytes as the sandbox policy's inputs: line 1 the workspace, line 2 the home, line 3
/// `$XDG_RUNTIME_DIR`, line 4 agentd's socket, lines `grant:JSON` / `call:JSON` session
/// and per-call grants, `session:JSON` / `turn:JSON` requests, the rest a `[sandbox]`
/// table. The effective policy is deterministic and keeps its invariants: no writable
/// root inside a hidden path, no `AGENTD_*` variable, no roots in `full_access`, the
/// credential set hidden unless a per-call grant names it, and session grants never
/// unhide anything.
pub fn sandbox_policy(data: &[u8]) -> u64 {
    use agentd_sandbox::{effective, Grant, Inputs, SandboxConfig, SandboxRequest};
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let mut inputs = Inputs {
        workspace: PathBuf::from(lines.next().unwrap_or("")),
        home: lines.next().map(PathBuf::from),
        xdg_runtime_dir: lines.next().map(PathBuf::from),
        agentd_socket: lines.next().map(PathBuf::from),
        env: [("AGENTD_SOCKET", "/s"), ("PATH", "/bin"), ("MY_TOKEN", "t")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let mut toml_text = String::new();
    for l in lines {
        if let Some(g) = l.strip_prefix("grant:") {
            if let Ok(g) = serde_json::from_str::<Grant>(g) {
                inputs.grants.push(g);
            }
        } else if let Some(g) = l.strip_prefix("call:") {
            if let Ok(g) = serde_json::from_str::<Grant>(g) {
                inputs.call_grants.push(g);
            }
        } else if let Some(r) = l.strip_prefix("session:") {
            inputs.session = serde_json::from_str::<SandboxRequest>(r).unwrap_or_default();
        } else if let Some(r) = l.strip_prefix("turn:") {
            inputs.turn = serde_json::from_str::<SandboxRequest>(r).unwrap_or_default();
        } else {
            toml_text.push_str(l);
            toml_text.push('\n');
        }
    }
    let parsed = toml::from_str::<SandboxConfig>(&toml_text);
    let cfg_ok = parsed.is_ok();
    inputs.config = parsed.unwrap_or_default();
    let p = effective(&inputs);
    assert_eq!(p, effective(&inputs), "effective is not deterministic");
    if let Err(e) = p.check() {
        panic!("broken sandbox invariant: {e}");
    }
    assert!(!p.env.contains_key("MY_TOKEN") && !p.env.contains_key("AGENTD_SOCKET"));
    if let Some(h) = inputs.home.as_ref().filter(|h| h.is_absolute()) {
        let ssh = agentd_sandbox::policy::normalize(&h.join(".ssh"));
        let unhidden_by_call = inputs
            .call_grants
            .iter()
            .any(|g| matches!(g, Grant::ReadHidden { path } if agentd_sandbox::policy::normalize(path) == ssh));
        assert!(
            unhidden_by_call || p.hidden.contains(&ssh),
            "{} not hidden: {p:?}",
            ssh.display()
        );
    }
    sig((
        cfg_ok,
        p.mode,
        p.network,
        p.writable_roots.len(),
        p.hidden.len() % 7,
    ))
}

// ---- MCP ------------------------------------------------------------------------------------

/// MCP tool names (`agentd_mcp::names::assign`) for `server<TAB>tool` lines: every name
/// is valid, prefixed and unique, one per distinct pair, in (server, tool) order, and the
/// same input gives the same names.
fn mcp_names(data: &[u8]) -> u64 {
    use agentd_mcp::names;
    let text = String::from_utf8_lossy(data);
    let pairs: Vec<(&str, &str)> = text
        .lines()
        .take(256)
        .map(|l| l.split_once('\t').unwrap_or((l, "")))
        .collect();
    let m = names::assign(pairs.iter().copied());
    let distinct: std::collections::BTreeSet<(&str, &str)> = pairs.iter().copied().collect();
    assert_eq!(m.len(), distinct.len());
    let unique: std::collections::BTreeSet<&str> = m.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(unique.len(), m.len(), "duplicate names");
    for (x, (s, t)) in m.iter().zip(distinct.iter()) {
        assert!(names::is_valid(&x.name), "{:?}", x.name);
        assert!(x.name.starts_with(names::PREFIX));
        assert_eq!((x.server.as_str(), x.tool.as_str()), (*s, *t));
    }
    assert_eq!(
        names::assign(pairs.iter().rev().copied()),
        m,
        "order-independent"
    );
    let hashed = m
        .iter()
        .filter(|x| x.name != names::base_name(&x.server, &x.tool))
        .count();
    sig(("mcp_names", m.len().min(8), hashed.min(8)))
}

/// `agentd_mcp::result::map_result` over any JSON: never panics, always some text, one
/// placeholder line per media item.
fn mcp_result(data: &[u8]) -> u64 {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return sig("mcp_result_not_json");
    };
    let r = agentd_mcp::result::map_result(&v);
    assert!(!r.text.is_empty());
    for i in 0..r.media.len() {
        assert!(r.text.contains(&format!(" bytes #{i}]")), "{}", r.text);
    }
    sig((
        "mcp_result",
        r.ok,
        r.media.len().min(4),
        r.structured,
        r.content_types.len().min(8),
    ))
}
