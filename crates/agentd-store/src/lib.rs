//! agentd-store: the Log stores (docs/log-format.md#files-under-the-home, docs/log-format.md#the-envelope, docs/postgresql.md).
//!
//! This crate owns every byte agentd writes for a Log: the NDJSON files under the home
//! directory (this file), the PostgreSQL store ([`pgstore`]), the sweep of leftovers
//! ([`sweep`]) and the fault injection its tests use ([`fault`]). It sits above
//! `agentd-history` (it folds labels while opening a Log) and must never depend on the
//! daemon's sessions, turns, tools or providers, nor on the RPC server.
//!
//! The file store owns every byte agentd writes to disk: opening a Log (with torn-tail
//! repair and quarantine), appending batches with the configured durability, and
//! creating new Logs atomically. It knows nothing about sessions or projections; the
//! session actor is its only writer for a given Log.
//!
//! Architecture invariant: nothing in a Log is ever truncated or rewritten except a
//! torn tail (bytes after the last `\n`), which is copied to `quarantine/` first.

pub mod fault;
pub mod pgstore;
pub mod sweep;

use agentd_history::stored::{Line, StoredEvent};
use agentd_proto::rpc::CorruptLine;
use agentd_proto::{session_id, AgentError, ErrorKind, Event, EventType};
use serde_json::{json, Value};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Paths under the home directory.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// Creates the home layout (0700) if needed.
    pub fn open(root: &Path) -> io::Result<Home> {
        for dir in [
            root.to_path_buf(),
            root.join("sessions"),
            root.join("quarantine"),
        ] {
            fs::create_dir_all(&dir)?;
        }
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
        Ok(Home {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("agentd.lock")
    }
    pub fn quarantine_dir(&self) -> PathBuf {
        self.root.join("quarantine")
    }
    /// The Log of a session. Validates the id first: no path is built from a hostile id.
    pub fn log_path(&self, sid: &str) -> Result<PathBuf, AgentError> {
        session_id::validate(sid)?;
        Ok(self.sessions_dir().join(format!("{sid}.ndjson")))
    }
    pub fn session_dir(&self, sid: &str) -> Result<PathBuf, AgentError> {
        session_id::validate(sid)?;
        Ok(self.sessions_dir().join(sid))
    }
    pub fn resources_dir(&self, sid: &str) -> Result<PathBuf, AgentError> {
        Ok(self.session_dir(sid)?.join("resources"))
    }
}

/// A failed write, kind by errno (`disk_full`, `io_error`, `permission_denied`, else
/// `log_write_failed`): see `AgentError::storage`.
pub fn write_failed(what: &str, e: &io::Error) -> AgentError {
    AgentError::storage(what, e)
}

/// A failed read of a Log: `io_error` for `EIO` (and the other storage kinds by errno),
/// `corrupt_log` for anything unclassified.
fn read_failed(what: &str, e: &io::Error, sid: &str) -> AgentError {
    let mut err = AgentError::storage(what, e);
    if err.kind == ErrorKind::LogWriteFailed {
        err.kind = ErrorKind::CorruptLog;
    }
    err.details["session_id"] = json!(sid);
    err
}

/// What a load found besides the events.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub corrupt_lines: Vec<CorruptLine>,
    pub seq_anomalies: Vec<Value>,
    /// Set when a torn tail was cut: `(torn_bytes, quarantine_path)`.
    pub torn: Option<(u64, PathBuf)>,
    pub bytes: u64,
}

/// Reads a Log, repairing a torn tail. Returns the valid events in file order.
///
/// A torn tail (bytes after the last `\n`) is copied to `quarantine/<sid>.<ts>.torn`
/// and synced before the Log is truncated, so no byte is ever lost; the caller appends
/// `log_repaired`. Complete lines that are not valid envelopes are reported, never
/// rewritten.
pub fn load_log(home: &Home, sid: &str) -> Result<(Vec<Event>, LoadReport), AgentError> {
    let mut events = Vec::new();
    let report = load_log_into(home, sid, &mut |ev, _| events.push(ev))?;
    Ok((events, report))
}

/// [`load_log`] handing each valid event, in file order, to `sink` together with its
/// stored form (the Log line): a block's parsed events are gone before the next block
/// is read, so a load holds the lines plus one block of parsed events at most.
pub fn load_log_into(
    home: &Home,
    sid: &str,
    sink: &mut dyn FnMut(Event, StoredEvent),
) -> Result<LoadReport, AgentError> {
    let path = home.log_path(sid)?;
    let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(AgentError::not_found("no such session")
                .with_details(json!({"session_id": sid}))
                .with_next_actions(&["agentctl ls"]))
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(
                AgentError::new(ErrorKind::PermissionDenied, format!("open log: {e}"))
                    .with_details(json!({"session_id": sid})),
            )
        }
        Err(e) => return Err(read_failed("open log", &e, sid)),
    };
    // Read and parse in blocks: peak memory is one block plus the events, not the
    // whole file plus the events. A block's events are parsed (about three times its
    // size as `Value` trees) before they are stored, so blocks are kept small.
    const BLOCK: usize = 2 << 20;
    let mut report = LoadReport::default();
    let mut cursor = ParseCursor {
        next_seq: None,
        line_no: 1,
        offset: 0,
    };
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK);
    loop {
        if let Some(f) = crate::fault::check(crate::fault::Op::Read, &path) {
            return Err(read_failed("read log", &f.error(), sid));
        }
        let n = (&mut file)
            .take(BLOCK as u64)
            .read_to_end(&mut buf)
            .map_err(|e| read_failed("read log", &e, sid))?;
        let complete = memchr::memrchr(b'\n', &buf).map_or(0, |i| i + 1);
        if complete > 0 {
            parse_lines(&buf[..complete], &mut cursor, &mut report, sink);
            buf.drain(..complete);
        }
        if n < BLOCK {
            break; // end of file; what is left in `buf` has no final newline
        }
    }
    if !buf.is_empty() {
        let torn = &buf[..];
        let ts = agentd_proto::event::now_ts().replace([':', '.'], "");
        let qpath = home.quarantine_dir().join(format!("{sid}.{ts}.torn"));
        write_synced(&qpath, torn).map_err(|e| write_failed("quarantine torn tail", &e))?;
        sync_dir(&home.quarantine_dir()).map_err(|e| write_failed("sync quarantine", &e))?;
        file.set_len(cursor.offset)
            .map_err(|e| write_failed("truncate torn tail", &e))?;
        file.sync_all().map_err(|e| write_failed("sync log", &e))?;
        report.torn = Some((torn.len() as u64, qpath));
    }
    report.bytes = cursor.offset;
    Ok(report)
}

/// Where parsing stands between blocks.
struct ParseCursor {
    next_seq: Option<u64>,
    /// 1-based number of the next physical line.
    line_no: u64,
    /// Byte offset of the next unparsed byte (= the length of the complete prefix).
    offset: u64,
}

/// Parses complete lines; splits the work over the available cores for big blocks,
/// since JSON parsing dominates a cold load.
fn parse_lines(
    bytes: &[u8],
    cursor: &mut ParseCursor,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(Event, StoredEvent),
) {
    const PARALLEL_MIN: usize = 1 << 20;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let base = cursor.offset as usize;
    let mut chunks: Vec<(usize, u64, &[u8])> = Vec::new(); // (byte offset, first line no, bytes)
    let mut line_no = cursor.line_no;
    if bytes.len() < PARALLEL_MIN || threads == 1 {
        chunks.push((base, line_no, bytes));
        line_no += memchr::memchr_iter(b'\n', bytes).count() as u64;
    } else {
        let target = bytes.len() / threads;
        let mut start = 0;
        while start < bytes.len() {
            let mut end = (start + target).min(bytes.len());
            if end < bytes.len() {
                end = match memchr::memchr(b'\n', &bytes[end..]) {
                    Some(i) => end + i + 1,
                    None => bytes.len(),
                };
            }
            chunks.push((base + start, line_no, &bytes[start..end]));
            line_no += memchr::memchr_iter(b'\n', &bytes[start..end]).count() as u64;
            start = end;
        }
    }
    cursor.line_no = line_no;
    cursor.offset += bytes.len() as u64;
    // The block's bytes, kept as one chunk the stored events refer to (a Log that is
    // not UTF-8 somewhere has its events stored one by one).
    let chunk: Option<std::sync::Arc<str>> = std::str::from_utf8(bytes).ok().map(Into::into);
    type Parsed = Vec<(Event, Option<std::ops::Range<usize>>)>;
    let parsed: Vec<(Parsed, Vec<CorruptLine>)> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|&(off, line, chunk)| s.spawn(move || parse_chunk(chunk, off, line)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    for (evs, corrupt) in parsed {
        report.corrupt_lines.extend(corrupt);
        for (ev, at) in evs {
            let line = at.and_then(|r| Line::new(chunk.as_ref()?, r.start - base..r.end - base));
            let stored = match line {
                Some(l) => StoredEvent::new(&ev, l),
                None => StoredEvent::of(&ev),
            };
            if let Some(n) = cursor.next_seq {
                if ev.seq != n {
                    report.seq_anomalies.push(json!({
                        "seq": ev.seq, "expected": n, "id": ev.id,
                        "kind": if ev.seq < n { "duplicate_or_decreasing" } else { "gap" },
                    }));
                }
            }
            let after = ev.seq.saturating_add(1);
            cursor.next_seq = Some(cursor.next_seq.map_or(after, |n| n.max(after)));
            sink(ev, stored);
        }
    }
}

/// The events of complete lines, each with the byte range of its line in the file when
/// the line is exactly the event's serialization (see `StoredEvent::parse_line`).
#[allow(clippy::type_complexity)]
fn parse_chunk(
    chunk: &[u8],
    base: usize,
    first_line: u64,
) -> (
    Vec<(Event, Option<std::ops::Range<usize>>)>,
    Vec<CorruptLine>,
) {
    let mut events = Vec::with_capacity(chunk.len() / 512 + 1);
    let mut corrupt = Vec::new();
    let mut scratch = Vec::new();
    let mut pos = 0;
    let mut line_no = first_line;
    while pos < chunk.len() {
        let end = memchr::memchr(b'\n', &chunk[pos..]).map_or(chunk.len(), |i| pos + i);
        let line = &chunk[pos..end];
        if !line.iter().all(u8::is_ascii_whitespace) {
            match StoredEvent::parse_line(line, &mut scratch) {
                Ok((ev, same)) => events.push((ev, same.then_some(base + pos..base + end))),
                Err(e) => corrupt.push(CorruptLine {
                    line: line_no,
                    byte_offset: (base + pos) as u64,
                    reason: e.to_string(),
                }),
            }
        }
        pos = end + 1;
        line_no += 1;
    }
    (events, corrupt)
}

/// Where Logs live. The session actor loads and appends through this trait, so a
/// second backend (a database) can stand beside [`FileStore`] without the actor,
/// registry or API changing. Implementations are called from blocking threads (the
/// blocking pool, a commit thread), never from a runtime worker.
pub trait LogStore: Send + Sync + 'static {
    /// Reads a Log, repairing a torn tail; the valid events in order plus what else
    /// the read found (see [`load_log`]).
    fn load(&self, sid: &str) -> Result<(Vec<Event>, LoadReport), AgentError>;
    /// [`LogStore::load`] handing each event and its stored form (the Log line) to
    /// `sink` in order, so the caller need not hold every parsed event at once.
    fn load_into(
        &self,
        sid: &str,
        sink: &mut dyn FnMut(Event, StoredEvent),
    ) -> Result<LoadReport, AgentError> {
        let (events, report) = self.load(sid)?;
        for ev in events {
            let stored = StoredEvent::of(&ev);
            sink(ev, stored);
        }
        Ok(report)
    }
    /// The append side of a Log that exists.
    fn open_appender(&self, sid: &str) -> Result<Box<dyn LogAppender>, AgentError>;
    /// A new append side for a Log whose appender stopped after a failed sync, once the
    /// Log was checked against what was acknowledged: `acked_bytes` as the stopped
    /// appender reported them, `last` the last acknowledged event.
    fn recover_appender(
        &self,
        sid: &str,
        acked_bytes: u64,
        last: Option<&Event>,
    ) -> Result<Box<dyn LogAppender>, AgentError>;
    /// Whether a Log of `sid` exists.
    fn exists(&self, sid: &str) -> Result<bool, AgentError>;
    /// Creates a new Log from the lines `write` produces, all or nothing;
    /// `already_exists` if there is one.
    fn create(
        &self,
        sid: &str,
        write: &mut (dyn FnMut(&mut dyn Write) -> io::Result<()> + Send),
    ) -> Result<(), AgentError>;
    /// What the lineage index needs of one Log.
    fn head(&self, sid: &str) -> Result<LogHead, AgentError>;
    /// Every Log's head, when the store keeps them (a database); `None` means the
    /// registry scans the home's files.
    fn heads(&self) -> Option<Result<Vec<(String, LogHead)>, AgentError>> {
        None
    }
    /// The heads that changed since `since` (a mark this method returned before; `None`
    /// for all of them) and the mark to pass next time, when the store keeps heads (a
    /// database shared by several daemons); `None` means it does not.
    #[allow(clippy::type_complexity)]
    fn heads_since(
        &self,
        _since: Option<&str>,
    ) -> Option<Result<(Vec<(String, LogHead)>, Option<String>), AgentError>> {
        None
    }
    /// Called once when the daemon stops, after the last commit (a database store
    /// gives back its leases).
    fn shutdown(&self) {}
    /// Where the Logs are, as it may be shown (no secrets).
    fn describe(&self) -> String {
        "file".into()
    }
    /// Where one Log is, as results show it (`log_path`), when it is not a file of the
    /// home: a database store names itself (redacted URL) and the session.
    fn log_location(&self, _sid: &str) -> Option<String> {
        None
    }
    /// A whole Log's bytes as a file of the home would hold them, for verbs that read
    /// Logs without loading the session (`export`), when the Logs are not files of the
    /// home; `None` means read the file.
    fn read_log(&self, _sid: &str) -> Option<Result<Vec<u8>, AgentError>> {
        None
    }
    /// Where `sid`'s Log is, when the store keeps deleted Logs itself (a database);
    /// `None` means the home's `trash/` directory holds them and the verbs move files.
    fn place(&self, _sid: &str) -> Option<Result<LogPlace, AgentError>> {
        None
    }
    /// Moves a live Log to the store's trash: the commit point of a delete, run by the
    /// session's actor as it retires. Only for stores whose [`place`](Self::place) answers.
    fn trash(&self, sid: &str) -> Result<(), AgentError> {
        Err(not_kept(sid))
    }
    /// Moves a trashed Log back to the live ones (`restore`).
    fn untrash(&self, sid: &str) -> Result<(), AgentError> {
        Err(not_kept(sid))
    }
    /// Removes a trashed Log for good (`rm --purge`).
    fn purge(&self, sid: &str) -> Result<(), AgentError> {
        Err(not_kept(sid))
    }
}

/// Where a session's Log is in a store that keeps its own trash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogPlace {
    Live,
    Trashed,
    Absent,
}

fn not_kept(sid: &str) -> AgentError {
    AgentError::new(
        ErrorKind::Unsupported,
        "this store keeps deleted Logs as files of the home",
    )
    .with_details(json!({"session_id": sid}))
}

/// The `log_path` that results show for `sid`: the store's own location of the Log,
/// else the file's path in the home.
pub fn shown_log_path(store: &dyn LogStore, home: &Home, sid: &str) -> Result<String, AgentError> {
    match store.log_location(sid) {
        Some(l) => Ok(l),
        None => Ok(home.log_path(sid)?.display().to_string()),
    }
}

/// The append side of one Log, used by one commit thread at a time.
pub trait LogAppender: Send + 'static {
    /// Appends whole lines and, when `sync`, makes them durable before returning. On
    /// failure nothing of `bytes` remains: a later append never glues onto half a line.
    fn append(&mut self, bytes: &[u8], sync: bool) -> Result<(), AgentError>;

    /// What may make this Log's batches durable together with other Logs': one
    /// `syncfs` of their filesystem ([`GroupedAppend`]) or one transaction of their
    /// store ([`SharedCommit`]); `None` when each batch must sync alone.
    fn sync_group(&self) -> Option<GroupKey> {
        None
    }

    /// The two halves of a grouped append, when [`sync_group`](Self::sync_group) is
    /// `Some`.
    fn grouped(&mut self) -> Option<&mut dyn GroupedAppend> {
        None
    }

    /// The three steps of a batch committed with other sessions' in one transaction,
    /// when [`sync_group`](Self::sync_group) is a [`GroupKey::Store`].
    fn shared_commit(&mut self) -> Option<&mut dyn SharedCommit> {
        None
    }
}

/// What lets batches of several Logs become durable together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKey {
    /// File Logs on one filesystem (its device number): one `syncfs` for the group.
    Device(u64),
    /// Logs of one database store (an identity of the store): one transaction for the
    /// group ([`SharedCommit`]).
    Store(usize),
}

/// A batch staged by [`SharedCommit::stage`] for its store's next group commit.
pub type StagedBatch = Box<dyn std::any::Any + Send>;

/// An append committed with other sessions' batches in one transaction of a shared
/// store. The commit threads take every batch queued for the store while its last
/// commit ran into the next one: a batch needs no thread of its own to wait on, and one
/// thread answers a whole group while another commits the next.
pub trait SharedCommit {
    /// Checks and prepares `bytes` (whole lines) for the group's commit, without I/O. An
    /// error fails this batch alone.
    fn stage(&mut self, bytes: &[u8], sync: bool) -> Result<StagedBatch, AgentError>;
    /// Commits batches staged by this store's appenders, in one transaction where it
    /// can; one outcome per batch, in order (a fenced session's batch fails alone).
    fn commit(&mut self, batches: Vec<StagedBatch>) -> Vec<Result<(), AgentError>>;
    /// Settles the `len` bytes of this appender's staged batch with its outcome.
    fn settle(&mut self, len: usize, res: Result<(), AgentError>) -> Result<(), AgentError>;
}

/// An append split around a sync shared with other Logs on the same filesystem: the
/// commit thread writes every batch of a group, makes them all durable with one
/// `syncfs`, then settles each. What one Log's batch costs the device is then shared:
/// one journal commit and one cache flush for the group, instead of one per Log.
pub trait GroupedAppend {
    /// Writes whole lines without syncing them. On failure nothing of `bytes` remains,
    /// as with [`LogAppender::append`].
    fn write_unsynced(&mut self, bytes: &[u8]) -> Result<(), AgentError>;
    /// A descriptor of the Log, for the group's `syncfs`.
    fn sync_fd(&self) -> std::os::fd::RawFd;
    /// Settles the `len` bytes `write_unsynced` wrote with the group's sync outcome:
    /// on success they are acknowledged; a failure stops the writer as a failed
    /// `fdatasync` does (never retried, the batch cut back).
    fn finish(&mut self, len: usize, synced: &io::Result<()>) -> Result<(), AgentError>;
}

/// Whether batches of several file Logs on one filesystem share one `syncfs`
/// (config `group_sync`, default on).
static GROUP_SYNC: AtomicBool = AtomicBool::new(true);

/// Turns grouped syncs on or off for the whole process (config `group_sync`).
pub fn set_group_sync(on: bool) {
    GROUP_SYNC.store(on, Ordering::SeqCst);
}

/// The device a Log file may share a `syncfs` on, when that is as safe as its own
/// `fdatasync`: Linux 5.8 or later (`syncfs` reports writeback errors only since 5.8)
/// and a local journaling filesystem whose `syncfs` commits and flushes (ext4, XFS,
/// Btrfs). Anything else syncs alone, and so does every Log outside Linux.
#[cfg(not(target_os = "linux"))]
fn group_device(_file: &File) -> Option<u64> {
    None
}

#[cfg(target_os = "linux")]
fn group_device(file: &File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    if !syncfs_reports_errors() {
        return None;
    }
    // SAFETY: `fstatfs` writes into the zeroed struct; the descriptor is open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between targets
    let kind = st.f_type as i64;
    if ![EXT4, XFS, BTRFS].contains(&kind) {
        return None;
    }
    file.metadata().ok().map(|m| m.dev())
}

/// Linux 5.8 or later (read once from `uname`).
#[cfg(target_os = "linux")]
fn syncfs_reports_errors() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        // SAFETY: `uname` fills the zeroed struct.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        if unsafe { libc::uname(&mut u) } != 0 {
            return false;
        }
        let release: String = u
            .release
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect();
        kernel_at_least(&release, (5, 8))
    })
}

/// Whether a kernel release string (`6.1.0-18-amd64`) is at least `want`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// Logs as NDJSON files under the home directory (docs/log-format.md#files-under-the-home).
#[derive(Debug, Clone)]
pub struct FileStore {
    pub home: Home,
}

impl LogStore for FileStore {
    fn load(&self, sid: &str) -> Result<(Vec<Event>, LoadReport), AgentError> {
        load_log(&self.home, sid)
    }
    fn load_into(
        &self,
        sid: &str,
        sink: &mut dyn FnMut(Event, StoredEvent),
    ) -> Result<LoadReport, AgentError> {
        load_log_into(&self.home, sid, sink)
    }
    fn open_appender(&self, sid: &str) -> Result<Box<dyn LogAppender>, AgentError> {
        open_appender(&self.home.log_path(sid)?)
    }
    fn recover_appender(
        &self,
        sid: &str,
        acked_bytes: u64,
        last: Option<&Event>,
    ) -> Result<Box<dyn LogAppender>, AgentError> {
        recover_writer(&self.home, sid, acked_bytes, last)
    }
    fn exists(&self, sid: &str) -> Result<bool, AgentError> {
        Ok(self.home.log_path(sid)?.exists())
    }
    fn create(
        &self,
        sid: &str,
        write: &mut (dyn FnMut(&mut dyn Write) -> io::Result<()> + Send),
    ) -> Result<(), AgentError> {
        create_atomic(&self.home.log_path(sid)?, |f| write(f))
    }
    fn head(&self, sid: &str) -> Result<LogHead, AgentError> {
        read_head(&self.home.log_path(sid)?)
            .map_err(|e| AgentError::internal(format!("index {sid}: {e}")))
    }
}

/// The appender of a Log file: the real file, or the fault-injecting one when
/// `AGENTD_FAULTS` is set (`crate::fault`).
fn open_appender(path: &Path) -> Result<Box<dyn LogAppender>, AgentError> {
    let w = LogWriter::open(path)?;
    if crate::fault::active() {
        let (len, group) = (w.len, w.group);
        let file = FaultFile {
            file: w.file,
            path: path.to_path_buf(),
        };
        return Ok(Box::new(LogWriter::with_file(file, len).with_group(group)));
    }
    Ok(Box::new(w))
}

/// A Log file whose syscalls consult the `AGENTD_FAULTS` rules first.
struct FaultFile {
    file: File,
    path: PathBuf,
}

impl LogFile for FaultFile {
    fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        use crate::fault::{check, Fault, Op};
        crate::fault::kill_point(&self.path.to_string_lossy(), bytes);
        match check(Op::Write, &self.path) {
            Some(Fault::Short) => {
                Write::write_all(&mut self.file, &bytes[..bytes.len() / 2])?;
                Err(Fault::Short.error())
            }
            Some(f) => Err(f.error()),
            None => Write::write_all(&mut self.file, bytes),
        }
    }
    fn sync_data(&mut self) -> io::Result<()> {
        match crate::fault::check(crate::fault::Op::Fsync, &self.path) {
            Some(f) => Err(f.error()),
            None => self.file.sync_data(),
        }
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }
    fn group_synced(&mut self, synced: &io::Result<()>) -> io::Result<()> {
        // An `fsync` rule fails this Log's share of a group's sync as it would its
        // own `fdatasync`.
        match crate::fault::check(crate::fault::Op::Fsync, &self.path) {
            Some(f) => Err(f.error()),
            None => copy_result(synced),
        }
    }
}

/// An owned copy of a sync outcome shared by a group (`io::Error` is not `Clone`).
fn copy_result(r: &io::Result<()>) -> io::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(match e.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(e.kind(), e.to_string()),
        }),
    }
}

/// The system calls a Log append makes, in one place: a fault-injecting file can
/// stand in for the real one to test every failure path of the writer.
pub trait LogFile: Send + 'static {
    /// Writes every byte (at the end: the file is opened for append).
    fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` after a failed append.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// The descriptor a group's `syncfs` may use (only asked when the writer has a
    /// sync group).
    fn raw_fd(&self) -> std::os::fd::RawFd;
    /// This file's outcome of a `syncfs` that covered it.
    fn group_synced(&mut self, synced: &io::Result<()>) -> io::Result<()> {
        copy_result(synced)
    }
}

impl LogFile for File {
    fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        Write::write_all(self, bytes)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
    fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(self)
    }
}

/// The append side of one Log file.
///
/// A failed `fdatasync` is never retried: after one, the kernel may have dropped the
/// dirty pages and marked them clean, so a second call could succeed without the data
/// being on disk (PostgreSQL's 2018 lesson). The batch fails and the writer *stops*:
/// every later batch is refused until the session gets a new appender from
/// [`LogStore::recover_appender`], which checks the file against what was acknowledged.
pub struct LogWriter<F: LogFile = File> {
    file: F,
    len: u64,
    stopped: bool,
    /// The device whose `syncfs` may make this Log durable with others ([`group_device`]).
    group: Option<u64>,
}

impl LogWriter<File> {
    pub fn open(path: &Path) -> Result<LogWriter, AgentError> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| write_failed("open log for append", &e))?;
        let len = file
            .metadata()
            .map_err(|e| write_failed("stat log", &e))?
            .len();
        Ok(LogWriter {
            group: group_device(&file),
            file,
            len,
            stopped: false,
        })
    }
}

impl<F: LogFile> LogWriter<F> {
    /// A writer over any [`LogFile`] whose current length is `len`.
    pub fn with_file(file: F, len: u64) -> LogWriter<F> {
        LogWriter {
            file,
            len,
            stopped: false,
            group: None,
        }
    }

    /// Lets this writer's batches share a `syncfs` with other Logs' on `device` (none:
    /// each syncs alone).
    pub fn with_group(mut self, device: Option<u64>) -> LogWriter<F> {
        self.group = device;
        self
    }

    /// Writes `bytes` (whole lines) and syncs data when `sync`. On failure the file is
    /// cut back to its previous length so a half-written batch never becomes a torn or
    /// glued line; nothing acknowledged before is touched. A failed sync (or a failed
    /// cut) stops the writer: the error carries `details.writer_stopped` and
    /// `details.acked_bytes` (the Log's length as acknowledged), and every later call
    /// fails the same way without touching the file.
    pub fn write_batch(&mut self, bytes: &[u8], sync: bool) -> Result<(), AgentError> {
        self.write_only(bytes)?;
        if sync {
            if let Err(e) = self.file.sync_data() {
                // Never retried, never acknowledged. Cut the batch off (best effort; the
                // recovery checks the length anyway) and stop.
                self.stopped = true;
                let _ = self.file.set_len(self.len);
                return Err(self.stopped_error(write_failed("fdatasync of the log", &e)));
            }
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// The write half of an append: refused once stopped; a failed write is cut back
    /// (a failed cut stops the writer). The length acknowledged does not move.
    fn write_only(&mut self, bytes: &[u8]) -> Result<(), AgentError> {
        if self.stopped {
            return Err(self.stopped_error(AgentError::new(
                ErrorKind::IoError,
                "the Log writer stopped after a failed write or fdatasync; the session verifies its Log before accepting appends again",
            )));
        }
        if let Err(e) = self.file.write_bytes(bytes) {
            if self.file.set_len(self.len).is_err() {
                self.stopped = true;
                return Err(self.stopped_error(write_failed("append to log", &e)));
            }
            return Err(write_failed("append to log", &e));
        }
        Ok(())
    }

    fn stopped_error(&self, mut e: AgentError) -> AgentError {
        e.details["writer_stopped"] = json!(true);
        e.details["acked_bytes"] = json!(self.len);
        e
    }
}

/// Rebuilds the writer of a Log whose writer stopped (see [`LogWriter`]): the file must
/// hold at least the `acked_bytes` acknowledged; bytes past them (a failed batch that
/// reached the file anyway) were never acknowledged and are copied to
/// `quarantine/<sid>.<ts>.unacked`, synced, then cut; the last acknowledged line must
/// parse as the event the session last acknowledged (`last`); the file is synced. Only
/// then is a new writer returned.
pub fn recover_writer(
    home: &Home,
    sid: &str,
    acked_bytes: u64,
    last: Option<&Event>,
) -> Result<Box<dyn LogAppender>, AgentError> {
    let path = home.log_path(sid)?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| read_failed("reopen log", &e, sid))?;
    let len = file
        .metadata()
        .map_err(|e| read_failed("stat log", &e, sid))?
        .len();
    if len < acked_bytes {
        return Err(AgentError::new(
            ErrorKind::CorruptLog,
            format!("the Log is {len} bytes but {acked_bytes} were acknowledged"),
        )
        .with_details(json!({"session_id": sid, "bytes": len, "acked_bytes": acked_bytes})));
    }
    if len > acked_bytes {
        let mut extra = Vec::new();
        use std::io::Seek;
        file.seek(io::SeekFrom::Start(acked_bytes))
            .and_then(|_| file.read_to_end(&mut extra))
            .map_err(|e| read_failed("read unacknowledged bytes", &e, sid))?;
        let ts = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        let q = home.quarantine_dir().join(format!("{sid}.{ts}.unacked"));
        write_synced(&q, &extra)
            .map_err(|e| write_failed("quarantine unacknowledged bytes", &e))?;
        sync_dir(&home.quarantine_dir()).map_err(|e| write_failed("sync quarantine", &e))?;
        file.set_len(acked_bytes)
            .map_err(|e| write_failed("cut unacknowledged bytes", &e))?;
    }
    // The tail as acknowledged: the last line before `acked_bytes`.
    if let Some(last) = last {
        use std::io::Seek;
        let window = acked_bytes.min(1 << 20);
        let mut tail = vec![0u8; window as usize];
        let read = match crate::fault::check(crate::fault::Op::Read, &path) {
            Some(f) => Err(f.error()),
            None => file
                .seek(io::SeekFrom::Start(acked_bytes - window))
                .and_then(|_| file.read_exact(&mut tail)),
        };
        read.map_err(|e| read_failed("read log tail", &e, sid))?;
        let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
        let line = match memchr::memrchr(b'\n', body) {
            Some(i) => &body[i + 1..],
            None => body,
        };
        let ev: Option<Event> = serde_json::from_slice(line).ok();
        if ev.as_ref().map(|e| (e.seq, e.id.as_str())) != Some((last.seq, last.id.as_str())) {
            return Err(AgentError::new(
                ErrorKind::CorruptLog,
                "the Log's last line is not the last acknowledged event",
            )
            .with_details(json!({"session_id": sid, "expected_seq": last.seq})));
        }
    }
    let synced = match crate::fault::check(crate::fault::Op::Fsync, &path) {
        Some(f) => Err(f.error()),
        None => file.sync_all(),
    };
    synced.map_err(|e| write_failed("sync recovered log", &e))?;
    drop(file);
    let len = std::fs::metadata(&path)
        .map_err(|e| read_failed("stat log", &e, sid))?
        .len();
    if len != acked_bytes {
        return Err(AgentError::new(
            ErrorKind::CorruptLog,
            "the Log changed while it was being recovered",
        )
        .with_details(json!({"session_id": sid})));
    }
    open_appender(&path)
}

impl<F: LogFile> LogAppender for LogWriter<F> {
    fn append(&mut self, bytes: &[u8], sync: bool) -> Result<(), AgentError> {
        self.write_batch(bytes, sync)
    }
    fn sync_group(&self) -> Option<GroupKey> {
        self.group.map(GroupKey::Device)
    }
    fn grouped(&mut self) -> Option<&mut dyn GroupedAppend> {
        match self.group {
            Some(_) => Some(self),
            None => None,
        }
    }
}

impl<F: LogFile> GroupedAppend for LogWriter<F> {
    fn write_unsynced(&mut self, bytes: &[u8]) -> Result<(), AgentError> {
        self.write_only(bytes)
    }
    fn sync_fd(&self) -> std::os::fd::RawFd {
        self.file.raw_fd()
    }
    fn finish(&mut self, len: usize, synced: &io::Result<()>) -> Result<(), AgentError> {
        if let Err(e) = self.file.group_synced(synced) {
            // As after a failed `fdatasync`: never retried, never acknowledged.
            self.stopped = true;
            let _ = self.file.set_len(self.len);
            return Err(self.stopped_error(write_failed("syncfs of the log's filesystem", &e)));
        }
        self.len += len as u64;
        Ok(())
    }
}

/// A session's Log writer, served by the process's commit threads. The actor hands it
/// each group commit: the write and its `fdatasync` never block a runtime worker, and a
/// hand-off to a parked thread costs far less than the blocking pool's (measured by
/// `benches/log_append`). A session has at most one batch in flight (the actor applies
/// one before it commits the next), so any idle commit thread may take it and a
/// session's batches still reach its Log in order; sessions sync in parallel, up to
/// [`COMMIT_THREADS`] at once. The Log's file closes when the actor drops this handle
/// and no batch of it is in flight.
pub struct WriterThread {
    writer: Arc<Mutex<Box<dyn LogAppender>>>,
    /// The appender's [`LogAppender::sync_group`].
    group: Option<GroupKey>,
}

/// Runs on the commit thread right after a write, with its outcome: the session uses it
/// to answer appenders and publish the batch without a trip back through the runtime.
pub type AfterWrite = Box<dyn FnOnce(&Result<(), AgentError>) + Send>;

struct WriteJob {
    writer: Arc<Mutex<Box<dyn LogAppender>>>,
    /// The filesystem whose `syncfs`, or the store whose transaction, may cover this
    /// job with others.
    group: Option<GroupKey>,
    bytes: Vec<u8>,
    sync: bool,
    after: Option<AfterWrite>,
    done: tokio::sync::oneshot::Sender<Result<(), AgentError>>,
}

impl WriteJob {
    /// Synced, on a filesystem whose `syncfs` may cover it with others, while grouped
    /// syncs are on. (A store's batches are [`shared`](Self::shared) instead.)
    fn groupable(&self) -> bool {
        matches!(self.group, Some(GroupKey::Device(_)))
            && self.sync
            && GROUP_SYNC.load(Ordering::Relaxed)
    }

    /// The store whose transactions commit this batch with others' (always grouped).
    fn shared(&self) -> Option<usize> {
        match self.group {
            Some(GroupKey::Store(key)) => Some(key),
            _ => None,
        }
    }

    fn run(self) {
        let res = match self.writer.lock() {
            Ok(mut w) => w.append(&self.bytes, self.sync),
            Err(_) => Err(writer_failed_earlier()),
        };
        self.finish(res);
    }

    /// Publication and answers first, the outcome last: once the actor has applied the
    /// batch (after the outcome), its lines have been broadcast, so a subscriber that
    /// joins then gets them in its backlog and never also live
    /// (`soak`, `transport.rs::subscription_catch_up_has_no_gap_and_no_duplicate`).
    fn finish(self, res: Result<(), AgentError>) {
        if let Some(after) = self.after {
            after(&res);
        }
        let _ = self.done.send(res);
    }
}

/// Most syncs of groupable batches running at once: later batches queue and go
/// together into the next sync that ends.
const GROUPS_IN_FLIGHT: usize = 2;

/// Most batches one grouped sync covers.
const MAX_SYNC_GROUP: usize = 256;

/// Takes from `queue` the batches that may share `first`'s sync: synced batches of
/// other Logs on the same filesystem, in queue order, up to [`MAX_SYNC_GROUP`] in all.
/// Empty when `first` syncs alone. The rest keep their order.
fn take_group(first: &WriteJob, queue: &mut std::collections::VecDeque<WriteJob>) -> Vec<WriteJob> {
    let mut group = Vec::new();
    if !first.groupable() && first.shared().is_none() {
        return group;
    }
    let joins = |j: &WriteJob, group: &[WriteJob]| {
        (j.sync || j.shared().is_some())
            && j.group == first.group
            && !Arc::ptr_eq(&j.writer, &first.writer)
            && !group.iter().any(|g| Arc::ptr_eq(&g.writer, &j.writer))
    };
    if !queue.iter().any(|j| joins(j, &group)) {
        return group;
    }
    let mut rest = std::collections::VecDeque::with_capacity(queue.len());
    for j in queue.drain(..) {
        if group.len() + 1 < MAX_SYNC_GROUP && joins(&j, &group) {
            group.push(j);
        } else {
            rest.push_back(j);
        }
    }
    *queue = rest;
    group
}

/// Commits batches of several Logs on one filesystem together: each batch is written,
/// one `syncfs` makes them all durable, then each writer settles its batch with that
/// outcome and each batch's answers and outcome go out, in order. A batch whose write
/// fails fails alone; a failed sync fails every batch written before it.
fn run_group(jobs: Vec<WriteJob>) {
    let mut results: Vec<Option<Result<(), AgentError>>> = Vec::with_capacity(jobs.len());
    let mut written = Vec::with_capacity(jobs.len());
    let mut fd = None;
    for job in &jobs {
        let mut guard = match job.writer.lock() {
            Ok(g) => g,
            Err(_) => {
                results.push(Some(Err(writer_failed_earlier())));
                written.push(None);
                continue;
            }
        };
        let wrote = match guard.grouped() {
            Some(g) => g.write_unsynced(&job.bytes).map(|()| g.sync_fd()),
            // Not groupable after all: its own append, synced.
            None => {
                results.push(Some(guard.append(&job.bytes, true)));
                written.push(None);
                continue;
            }
        };
        match wrote {
            Ok(raw) => {
                fd.get_or_insert(raw);
                results.push(None);
                written.push(Some(guard));
            }
            Err(e) => {
                results.push(Some(Err(e)));
                written.push(None);
            }
        }
    }
    let synced = match fd {
        Some(fd) => syncfs(fd),
        None => Ok(()),
    };
    for ((job, guard), result) in jobs.iter().zip(written.iter_mut()).zip(results.iter_mut()) {
        if let Some(mut w) = guard.take() {
            let g = w
                .grouped()
                .expect("a written member of the group is grouped");
            *result = Some(g.finish(job.bytes.len(), &synced));
        }
    }
    drop(written);
    for (job, result) in jobs.into_iter().zip(results) {
        job.finish(result.unwrap_or_else(|| Err(writer_failed_earlier())));
    }
}

/// Commits batches of several sessions of one store together: each appender stages its
/// batch, the first commits them all (one transaction where it can), then, while the
/// next group may already commit, each appender settles its batch with its own outcome
/// and each batch's answers and outcome go out, in order. A batch that fails to stage,
/// or whose session was fenced, fails alone.
fn run_shared_group(jobs: Vec<WriteJob>, committing: &mut Committing) {
    let mut results: Vec<Option<Result<(), AgentError>>> = Vec::with_capacity(jobs.len());
    let mut staged_by = Vec::with_capacity(jobs.len());
    let mut staged = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let mut guard = match job.writer.lock() {
            Ok(g) => g,
            Err(_) => {
                results.push(Some(Err(writer_failed_earlier())));
                staged_by.push(None);
                continue;
            }
        };
        match guard.shared_commit().map(|c| c.stage(&job.bytes, job.sync)) {
            Some(Ok(batch)) => {
                staged.push(batch);
                results.push(None);
                staged_by.push(Some(guard));
            }
            Some(Err(e)) => {
                results.push(Some(Err(e)));
                staged_by.push(None);
            }
            // Not shared after all: its own append.
            None => {
                results.push(Some(guard.append(&job.bytes, job.sync)));
                staged_by.push(None);
            }
        }
    }
    let outcomes = match staged_by.iter_mut().flatten().next() {
        Some(first) => first
            .shared_commit()
            .map(|c| c.commit(staged))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    // The next group may commit while this one is settled and answered: no batch of
    // this group's Logs is queued until its outcome goes out below.
    committing.release();
    let mut outcomes = outcomes.into_iter();
    for ((job, guard), result) in jobs
        .iter()
        .zip(staged_by.iter_mut())
        .zip(results.iter_mut())
    {
        if let Some(mut w) = guard.take() {
            let res = outcomes.next().unwrap_or_else(|| Err(no_outcome()));
            *result = Some(match w.shared_commit() {
                Some(c) => c.settle(job.bytes.len(), res),
                None => res,
            });
        }
    }
    drop(staged_by);
    for (job, result) in jobs.into_iter().zip(results) {
        job.finish(result.unwrap_or_else(|| Err(writer_failed_earlier())));
    }
}

/// `syncfs(2)` of the filesystem holding `fd` (Linux; elsewhere no Log joins a group, see
/// [`group_device`]).
#[cfg(not(target_os = "linux"))]
fn syncfs(_fd: std::os::fd::RawFd) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(target_os = "linux")]
fn syncfs(fd: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor a locked writer keeps open.
    if unsafe { libc::syncfs(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The error of a batch whose group commit ended without an outcome for it.
pub fn no_outcome() -> AgentError {
    AgentError::new(
        ErrorKind::LogWriteFailed,
        "the group commit stopped before this batch's outcome was known",
    )
}

fn writer_failed_earlier() -> AgentError {
    AgentError::new(ErrorKind::LogWriteFailed, "the Log writer failed earlier")
}

/// Most commit threads file Logs use: as many Logs sync at once. Measured on a
/// 2-vCPU VM, 16 threads syncing 64 files reach what 64 threads do; fewer do not.
pub const COMMIT_THREADS: usize = 16;

/// Jobs queued and not yet taken, readable without the pool's lock.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
/// Commit threads running a batch.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// A commit thread is polling the queue right after a batch (one at most).
static SPINNING: AtomicBool = AtomicBool::new(false);
/// How long a thread that just committed polls for the next batch before it parks.
const SPIN: std::time::Duration = std::time::Duration::from_micros(150);

/// After a batch, one commit thread polls the queue for a short while: a session's
/// next batch usually follows its answer within a round trip, and taking it from the
/// queue costs nothing, where a parked thread costs a futex wake and (on a VM) the
/// wake of a halted vCPU. Only when no other batch is being committed: with several
/// in flight the CPUs are busy and the next batch finds a thread anyway.
fn spin_for_next() {
    if QUEUED.load(Ordering::SeqCst) > 0 || RUNNING.load(Ordering::SeqCst) > 0 {
        return;
    }
    if SPINNING
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return;
    }
    let start = std::time::Instant::now();
    while QUEUED.load(Ordering::SeqCst) == 0 && start.elapsed() < SPIN {
        // Yields rather than spins: a runnable thread of this CPU (the runtime parsing
        // the next requests, a client) runs first; with none, the vCPU stays awake.
        std::thread::yield_now();
    }
    // Stops counting as a spinner before it looks under the lock, so a job pushed
    // after this point is signalled as usual and one pushed before is seen.
    SPINNING.store(false, Ordering::SeqCst);
}

/// A batch (or group) a commit thread is running, in [`RUNNING`] and, when it may sync
/// in a group, in the pool's `groups_running`.
struct Running {
    groupable: bool,
}

impl Running {
    fn new(groupable: bool) -> Running {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Running { groupable }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        if self.groupable {
            // Under the lock: a batch left queued for a running group (see `submit`)
            // is seen by this thread's next look at the queue.
            pool_lock().groups_running -= 1;
        }
    }
}

/// A store whose group commit a thread is running, in the pool's `committing`: the
/// store's batches queue meanwhile, and all of them go into its next commit, which
/// starts as soon as this one ends (see [`run_shared_group`]).
struct Committing {
    key: Option<usize>,
}

impl Committing {
    /// Ends the commit: a thread is woken for the batches that queued meanwhile.
    fn release(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut st = pool_lock();
        st.committing.retain(|k| *k != key);
        if !st.queue.iter().any(|j| j.shared() == Some(key)) {
            return;
        }
        if st.idle > st.signaled {
            st.signaled += 1;
            drop(st);
            POOL.ready.notify_one();
        } else if st.threads < COMMIT_THREADS && spawn_commit_thread().is_ok() {
            st.threads += 1;
        }
        // Otherwise the next thread to finish (this one, once its group is answered)
        // takes them.
    }
}

impl Drop for Committing {
    fn drop(&mut self) {
        self.release();
    }
}

fn spawn_commit_thread() -> io::Result<()> {
    let spawned = std::thread::Builder::new()
        .name("log-commit".into())
        .stack_size(256 * 1024)
        .spawn(CommitPool::serve);
    match spawned {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::error!(error = %e, "cannot start a Log commit thread");
            Err(e)
        }
    }
}

/// The commit threads: started as batches find none idle, up to [`COMMIT_THREADS`],
/// then kept parked for the next.
struct CommitPool {
    state: Mutex<PoolState>,
    ready: std::sync::Condvar,
}

struct PoolState {
    queue: std::collections::VecDeque<WriteJob>,
    threads: usize,
    idle: usize,
    /// Idle threads woken and not yet running.
    signaled: usize,
    /// Threads running a batch that may sync in a group (alone or with others).
    groups_running: usize,
    /// Stores ([`GroupKey::Store`]) with a group commit running.
    committing: Vec<usize>,
}

static POOL: CommitPool = CommitPool {
    state: Mutex::new(PoolState {
        queue: std::collections::VecDeque::new(),
        threads: 0,
        idle: 0,
        signaled: 0,
        groups_running: 0,
        committing: Vec::new(),
    }),
    ready: std::sync::Condvar::new(),
};

fn pool_lock() -> std::sync::MutexGuard<'static, PoolState> {
    // Nothing panics while holding it; a poisoned lock still holds a valid queue.
    POOL.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl CommitPool {
    fn submit(job: WriteJob) {
        let mut st = pool_lock();
        st.queue.push_back(job);
        let ahead = QUEUED.fetch_add(1, Ordering::SeqCst);
        if st.queue.back().is_some_and(WriteJob::groupable) && st.groups_running >= GROUPS_IN_FLIGHT
        {
            // The batch waits for a running group to end: its thread then takes every
            // batch queued meanwhile into one sync, where a thread of its own would
            // sync this one alone beside it.
            return;
        }
        if let Some(key) = st.queue.back().and_then(WriteJob::shared) {
            if st.committing.contains(&key) {
                // Its store is committing: the batch goes into the store's next commit,
                // for which the running one wakes a thread as it ends.
                return;
            }
        }
        if ahead == 0 && SPINNING.load(Ordering::SeqCst) {
            // A thread that just finished a batch is polling the queue: it takes this
            // one without a futex wake (and, on a VM, without waking a halted vCPU).
            // A second batch queued meanwhile is signalled as usual, so two sessions'
            // batches never wait on the one poller.
            return;
        }
        if st.idle > st.signaled {
            st.signaled += 1;
            drop(st);
            POOL.ready.notify_one();
            return;
        }
        if st.threads >= COMMIT_THREADS {
            return; // the next thread to finish takes it
        }
        match spawn_commit_thread() {
            Ok(()) => st.threads += 1,
            Err(e) if st.threads == 0 => {
                // Nobody would ever take it: fail it rather than hang.
                if let Some(job) = st.queue.pop_back() {
                    QUEUED.fetch_sub(1, Ordering::SeqCst);
                    drop(st);
                    job.finish(Err(AgentError::new(
                        ErrorKind::LogWriteFailed,
                        format!("cannot start a Log commit thread: {e}"),
                    )));
                }
            }
            Err(_) => {} // the next thread to finish takes it
        }
    }

    fn serve() {
        let mut st = pool_lock();
        loop {
            // A store's batches wait while its commit runs (they go into its next one).
            let next = st
                .queue
                .iter()
                .position(|j| j.shared().is_none_or(|key| !st.committing.contains(&key)));
            if let Some(job) = next.and_then(|i| st.queue.remove(i)) {
                let mut group = take_group(&job, &mut st.queue);
                QUEUED.fetch_sub(1 + group.len(), Ordering::SeqCst);
                let groupable = job.groupable();
                st.groups_running += usize::from(groupable);
                let shared = job.shared();
                if let Some(key) = shared {
                    st.committing.push(key);
                }
                drop(st);
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // Counted out even if the batch's code unwinds: a group that never
                    // ended would leave later batches queued for it forever.
                    let _running = Running::new(groupable);
                    let mut committing = Committing { key: shared };
                    if shared.is_some() {
                        group.insert(0, job);
                        run_shared_group(group, &mut committing);
                    } else if group.is_empty() {
                        job.run();
                    } else {
                        group.insert(0, job);
                        run_group(group);
                    }
                }));
                if ran.is_err() {
                    // Its appenders see the writer gone (their outcomes were dropped)
                    // and the thread stays in the pool.
                    tracing::error!("a Log commit panicked; its batches failed");
                }
                spin_for_next();
                st = pool_lock();
                continue;
            }
            st.idle += 1;
            st = POOL.ready.wait(st).unwrap_or_else(|p| p.into_inner());
            st.idle -= 1;
            st.signaled = st.signaled.saturating_sub(1);
        }
    }
}

/// The outcome of one write handed to a [`WriterThread`], sent as soon as it is known.
pub type WriteOutcome = tokio::sync::oneshot::Receiver<Result<(), AgentError>>;

impl WriterThread {
    pub fn spawn(writer: Box<dyn LogAppender>, _sid: &str) -> WriterThread {
        WriterThread {
            group: writer.sync_group(),
            writer: Arc::new(Mutex::new(writer)),
        }
    }

    /// Writes whole lines, synced when `sync`; resolves once they are on disk.
    pub async fn write(&self, bytes: Vec<u8>, sync: bool) -> Result<(), AgentError> {
        self.write_then(bytes, sync, None).await
    }

    /// Like [`write`](Self::write), and runs `after` on the commit thread as soon as
    /// the outcome is known (before this resolves).
    pub async fn write_then(
        &self,
        bytes: Vec<u8>,
        sync: bool,
        after: Option<AfterWrite>,
    ) -> Result<(), AgentError> {
        outcome(self.submit(bytes, sync, after)).await
    }

    /// Hands a write to a commit thread without waiting: `after` runs there with the
    /// outcome, which the returned receiver also carries (see [`outcome`]). The caller
    /// hands the next write of this Log only after this one's outcome.
    pub fn submit(&self, bytes: Vec<u8>, sync: bool, after: Option<AfterWrite>) -> WriteOutcome {
        let (done, rx) = tokio::sync::oneshot::channel();
        CommitPool::submit(WriteJob {
            writer: self.writer.clone(),
            group: self.group,
            bytes,
            sync,
            after,
            done,
        });
        rx
    }
}

/// Waits for the outcome of a write handed to a [`WriterThread`].
pub async fn outcome(rx: WriteOutcome) -> Result<(), AgentError> {
    rx.await.map_err(|_| writer_gone())?
}

fn writer_gone() -> AgentError {
    AgentError::new(ErrorKind::LogWriteFailed, "log writer thread is gone")
}

/// Serializes an event as one Log line (with `\n`).
pub fn event_line(ev: &Event) -> Vec<u8> {
    // Serializing a struct of Strings and a Value cannot fail.
    let mut line = serde_json::to_vec(ev).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Writes a new file atomically: temp file in the same directory, fsync, rename, then
/// fsync the directory. Fails with `already_exists` if `path` exists.
pub fn create_atomic(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), AgentError> {
    let dir = path
        .parent()
        .ok_or_else(|| AgentError::internal("log path has no parent"))?;
    if path.exists() {
        return Err(AgentError::new(
            ErrorKind::AlreadyExists,
            "session already exists",
        ));
    }
    let tmp = dir.join(format!(
        ".{}.{:016x}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("log"),
        rand::random::<u64>()
    ));
    let result = (|| -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        write(&mut f)?;
        f.sync_all()?;
        // link() refuses to replace an existing file, unlike rename(): a concurrent
        // create of the same id cannot be clobbered.
        fs::hard_link(&tmp, path)?;
        fs::remove_file(&tmp)?;
        sync_dir(dir)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        if e.kind() == io::ErrorKind::AlreadyExists {
            return Err(AgentError::new(
                ErrorKind::AlreadyExists,
                "session already exists",
            ));
        }
        return Err(write_failed("create log", &e));
    }
    Ok(())
}

pub fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The first line of a Log, parsed (for the lineage index), plus a line count and the
/// last event's `ts`, read without parsing every line.
pub struct LogHead {
    pub first: Option<Event>,
    pub line_count: u64,
    pub last_ts: Option<String>,
    /// Title of the last `session_info`, if any.
    pub last_title: Option<String>,
    /// Labels of the last `session_info` that carries any (`archived`).
    pub last_labels: Vec<String>,
    pub has_branch_summary: bool,
    /// The Log is in the store's trash (a database store; files in `trash/` are not
    /// read through heads).
    pub trashed: bool,
}

pub fn read_head(path: &Path) -> io::Result<LogHead> {
    // Streamed line by line through one reused buffer: indexing a home (and every
    // import) costs memory bounded by the longest line, never by the Log's size.
    use std::io::BufRead;
    let info = memchr::memmem::Finder::new(b"\"type\":\"session_info\"");
    let summary = memchr::memmem::Finder::new(b"\"type\":\"branch_summary\"");
    let mut reader = io::BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut line = Vec::new();
    let mut last_line = Vec::new();
    let mut head = LogHead {
        first: None,
        line_count: 0,
        last_ts: None,
        last_title: None,
        last_labels: Vec::new(),
        has_branch_summary: false,
        trashed: false,
    };
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 || line.last() != Some(&b'\n') {
            break; // end, or a torn tail (cut when the session loads)
        }
        head.line_count += 1;
        let body = &line[..line.len() - 1];
        if head.line_count == 1 {
            head.first = serde_json::from_slice::<Event>(body).ok();
        }
        if info.find(body).is_some() {
            if let Ok(ev) = serde_json::from_slice::<Event>(body) {
                if ev.event_type() == EventType::SessionInfo {
                    head.last_title = ev.str_field("title").map(str::to_string);
                    if let Some(labels) = agentd_history::fold::session_labels(&ev) {
                        head.last_labels = labels;
                    }
                }
            }
        }
        if !head.has_branch_summary && summary.find(body).is_some() {
            head.has_branch_summary = true;
        }
        std::mem::swap(&mut line, &mut last_line);
    }
    let last = last_line.strip_suffix(b"\n").unwrap_or(&last_line);
    head.last_ts = serde_json::from_slice::<Value>(last)
        .ok()
        .and_then(|v| v.get("ts").and_then(Value::as_str).map(str::to_string));
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        (dir, home)
    }

    #[test]
    fn torn_tail_is_quarantined_and_cut() {
        let (_d, home) = home();
        let path = home.log_path("s1").unwrap();
        let good = r#"{"id":"0000000000000001","session_id":"s1","seq":0,"ts":"2026-01-01T00:00:00.000000Z","type":"user_message","data":{"text":"hi"}}"#;
        fs::write(&path, format!("{good}\n{{\"id\":\"torn")).unwrap();
        let (events, report) = load_log(&home, "s1").unwrap();
        assert_eq!(events.len(), 1);
        let (n, q) = report.torn.unwrap();
        assert_eq!(n, 11);
        assert_eq!(fs::read(q).unwrap(), b"{\"id\":\"torn");
        assert_eq!(fs::read(&path).unwrap(), format!("{good}\n").into_bytes());
    }

    #[test]
    fn block_boundaries_keep_line_numbers_offsets_and_seqs() {
        let (_d, home) = home();
        let path = home.log_path("big").unwrap();
        let mut text = String::new();
        let mut corrupt_offset = 0;
        let pad = "p".repeat(480);
        for seq in 0..20_000u64 {
            if seq == 15_000 {
                corrupt_offset = text.len();
                text.push_str("{not json}\n");
            }
            text.push_str(&format!(
                r#"{{"id":"{seq:016x}","session_id":"big","seq":{seq},"ts":"t","type":"user_message","data":{{"text":"{pad}"}}}}"#
            ));
            text.push('\n');
        }
        assert!(text.len() > 9 << 20, "spans more than one read block");
        let complete = text.len() as u64;
        text.push_str("{\"torn");
        fs::write(&path, &text).unwrap();
        let (events, report) = load_log(&home, "big").unwrap();
        assert_eq!(events.len(), 20_000);
        assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
        assert!(report.seq_anomalies.is_empty());
        assert_eq!(report.corrupt_lines.len(), 1);
        assert_eq!(report.corrupt_lines[0].line, 15_001);
        assert_eq!(report.corrupt_lines[0].byte_offset, corrupt_offset as u64);
        assert_eq!(report.bytes, complete);
        assert_eq!(report.torn.as_ref().unwrap().0, 6);
        assert_eq!(fs::metadata(&path).unwrap().len(), complete);
    }

    #[test]
    fn corrupt_middle_line_is_reported_not_fatal() {
        let (_d, home) = home();
        let path = home.log_path("s2").unwrap();
        let mk = |seq: u64| {
            format!(
                r#"{{"id":"000000000000000{seq}","session_id":"s2","seq":{seq},"ts":"t","type":"x_future","data":{{}}}}"#
            )
        };
        fs::write(&path, format!("{}\nnot json\n{}\n", mk(0), mk(1))).unwrap();
        let (events, report) = load_log(&home, "s2").unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(report.corrupt_lines.len(), 1);
        assert_eq!(report.corrupt_lines[0].line, 2);
        assert!(report.seq_anomalies.is_empty());
    }

    #[test]
    fn atomic_create_refuses_existing() {
        let (_d, home) = home();
        let path = home.log_path("s3").unwrap();
        create_atomic(&path, |f| f.write_all(b"x\n")).unwrap();
        let e = create_atomic(&path, |f| f.write_all(b"y\n")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"x\n");
    }

    #[test]
    fn read_head_streams_counts_and_picks_the_last_title() {
        let (_d, home) = home();
        let path = home.log_path("h").unwrap();
        let ev = |seq: u64, ty: &str, data: &str| {
            format!(
                r#"{{"id":"{seq:016x}","session_id":"h","seq":{seq},"ts":"2026-01-01T00:00:0{seq}.000000Z","type":"{ty}","data":{data}}}"#
            )
        };
        let text = [
            ev(
                0,
                "session_started",
                r#"{"workspace":"/w","agentd_version":"x","log_format":1,"title":"a"}"#,
            ),
            ev(1, "session_info", r#"{"title":"b"}"#),
            ev(
                2,
                "user_message",
                r#"{"text":"\"type\":\"session_info\" is not an event"}"#,
            ),
            ev(3, "session_info", r#"{"title":"c"}"#),
            ev(
                4,
                "branch_summary",
                r#"{"parent_session_id":"p","forked_to_seq":1,"summary":"s"}"#,
            ),
        ]
        .join("\n");
        fs::write(&path, format!("{text}\n{{\"torn")).unwrap();
        let head = read_head(&path).unwrap();
        assert_eq!(head.line_count, 5);
        assert_eq!(head.first.unwrap().str_field("title"), Some("a"));
        assert_eq!(head.last_title.as_deref(), Some("c"));
        assert!(head.has_branch_summary);
        assert_eq!(head.last_ts.as_deref(), Some("2026-01-01T00:00:04.000000Z"));
    }

    /// A file whose `fdatasync` fails: what the writer's `LogFile` seam allows.
    struct FailingSync {
        bytes: Vec<u8>,
    }

    impl LogFile for FailingSync {
        fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
            self.bytes.extend_from_slice(bytes);
            Ok(())
        }
        fn sync_data(&mut self) -> io::Result<()> {
            Err(io::Error::other("injected fdatasync failure"))
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.bytes.truncate(len as usize);
            Ok(())
        }
        fn raw_fd(&self) -> std::os::fd::RawFd {
            -1
        }
    }

    #[test]
    fn a_failed_sync_fails_the_batch_and_cuts_it_back() {
        let mut w = LogWriter::with_file(
            FailingSync {
                bytes: b"a\n".to_vec(),
            },
            2,
        );
        w.write_batch(b"b\n", false).unwrap();
        let e = w.write_batch(b"c\n", true).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LogWriteFailed);
        assert!(e.message.contains("injected"), "{}", e.message);
        assert_eq!(w.file.bytes, b"a\nb\n");
    }

    /// Batches handed over at every distance from the previous one's end (inside the
    /// spin window, at its edge, long after it) are all taken: none waits in the queue
    /// with every thread parked or a spinner that gave up without seeing it.
    #[test]
    fn batches_arriving_around_the_spin_window_are_never_stranded() {
        let (_d, home) = home();
        let spin = SPIN.as_micros() as u64;
        let gaps_us = [0u64, 20, spin - 5, spin, spin + 5, 400];
        let clients: Vec<_> = (0..4)
            .map(|i| {
                let path = home.sessions_dir().join(format!("spin{i}.ndjson"));
                fs::write(&path, b"").unwrap();
                let w = WriterThread::spawn(open_appender(&path).unwrap(), "spin");
                std::thread::spawn(move || {
                    for n in 0..300usize {
                        let (tx, rx) = std::sync::mpsc::channel();
                        let after: AfterWrite = Box::new(move |r| {
                            let _ = tx.send(r.is_ok());
                        });
                        drop(w.submit(format!("{i}:{n}\n").into_bytes(), false, Some(after)));
                        let ok = rx
                            .recv_timeout(std::time::Duration::from_secs(10))
                            .unwrap_or_else(|_| panic!("batch {n} of Log {i} was never taken"));
                        assert!(ok);
                        let gap = gaps_us[(n + i) % gaps_us.len()];
                        std::thread::sleep(std::time::Duration::from_micros(gap));
                    }
                    path
                })
            })
            .collect();
        for (i, c) in clients.into_iter().enumerate() {
            let path = c.join().unwrap();
            let want: String = (0..300).map(|n| format!("{i}:{n}\n")).collect();
            assert_eq!(fs::read_to_string(path).unwrap(), want);
        }
    }

    /// More Logs than commit threads, each with batches in a row: every batch lands in
    /// its own Log, in order, and the outcome of each arrives.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn logs_share_the_commit_threads_and_keep_their_order() {
        let (_d, home) = home();
        let logs = COMMIT_THREADS * 2 + 3;
        let mut tasks = Vec::new();
        for i in 0..logs {
            let path = home.sessions_dir().join(format!("c{i}.ndjson"));
            fs::write(&path, b"").unwrap();
            let w = WriterThread::spawn(open_appender(&path).unwrap(), "c");
            tasks.push(tokio::spawn(async move {
                for n in 0..20 {
                    let line = format!("{i}:{n}\n").into_bytes();
                    w.write(line, n % 2 == 0).await.unwrap();
                }
                path
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let path = t.await.unwrap();
            let want: String = (0..20).map(|n| format!("{i}:{n}\n")).collect();
            assert_eq!(fs::read_to_string(path).unwrap(), want);
        }
    }

    /// An appender that panics in the middle of its commit.
    struct Panics;

    impl LogAppender for Panics {
        fn append(&mut self, _: &[u8], _: bool) -> Result<(), AgentError> {
            panic!("injected panic in a Log commit");
        }
        fn sync_group(&self) -> Option<GroupKey> {
            Some(GroupKey::Device(u64::MAX))
        }
    }

    struct Fine;

    impl LogAppender for Fine {
        fn append(&mut self, _: &[u8], _: bool) -> Result<(), AgentError> {
            Ok(())
        }
        fn sync_group(&self) -> Option<GroupKey> {
            Some(GroupKey::Device(u64::MAX))
        }
    }

    /// A commit that panics fails its own batch (`log_write_failed`), and the pool
    /// goes on committing: more panics than grouped syncs may run at once leave no
    /// later batch queued for a group that never ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_that_panics_fails_its_batch_and_the_pool_keeps_serving() {
        let ten = std::time::Duration::from_secs(10);
        for _ in 0..GROUPS_IN_FLIGHT + 2 {
            // Past the spin window, so each batch needs the pool to hand it to a thread.
            tokio::time::sleep(SPIN * 4).await;
            let w = WriterThread::spawn(Box::new(Panics), "p");
            let e = tokio::time::timeout(ten, w.write(b"x\n".to_vec(), true))
                .await
                .expect("a batch queued after a panic was never taken")
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::LogWriteFailed, "{e:?}");
        }
        tokio::time::sleep(SPIN * 4).await;
        let w = WriterThread::spawn(Box::new(Fine), "f");
        tokio::time::timeout(ten, w.write(b"x\n".to_vec(), true))
            .await
            .expect("a batch after the panics was never taken")
            .unwrap();
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        for (release, ok) in [
            ("5.8.0", true),
            ("6.1.0-18-amd64", true),
            ("6.18.44-fc-v669", true),
            ("5.7.19", false),
            ("4.19.0", false),
            ("5", false),
            ("", false),
        ] {
            assert_eq!(kernel_at_least(release, (5, 8)), ok, "{release}");
        }
    }

    fn job(
        writer: &Arc<Mutex<Box<dyn LogAppender>>>,
        group: Option<u64>,
        sync: bool,
        bytes: &[u8],
    ) -> (WriteJob, WriteOutcome) {
        let (done, rx) = tokio::sync::oneshot::channel();
        let job = WriteJob {
            writer: writer.clone(),
            group: group.map(GroupKey::Device),
            bytes: bytes.to_vec(),
            sync,
            after: None,
            done,
        };
        (job, rx)
    }

    fn writer_of(w: impl LogAppender) -> Arc<Mutex<Box<dyn LogAppender>>> {
        Arc::new(Mutex::new(Box::new(w)))
    }

    /// A group takes synced batches of other Logs on the first one's filesystem, in
    /// queue order; the rest (another filesystem, unsynced, the same Log again, a Log
    /// that syncs alone) stay queued in their order.
    #[test]
    fn a_group_takes_only_other_logs_synced_batches_on_the_same_filesystem() {
        let w: Vec<_> = (0..6)
            .map(|_| writer_of(LogWriter::with_file(FailingSync { bytes: vec![] }, 0)))
            .collect();
        let (first, _r0) = job(&w[0], Some(1), true, b"0\n");
        let mut queue = std::collections::VecDeque::new();
        let mut rx = Vec::new();
        for (writer, group, sync, tag) in [
            (&w[1], Some(1), true, "a"),  // joins
            (&w[2], Some(2), true, "b"),  // another filesystem
            (&w[0], Some(1), true, "c"),  // the first batch's own Log
            (&w[3], Some(1), false, "d"), // not synced
            (&w[4], None, true, "e"),     // syncs alone
            (&w[5], Some(1), true, "f"),  // joins
            (&w[1], Some(1), true, "g"),  // a Log already in the group
        ] {
            let (j, r) = job(writer, group, sync, tag.as_bytes());
            queue.push_back(j);
            rx.push(r);
        }
        let group = take_group(&first, &mut queue);
        let tags = |js: &mut dyn Iterator<Item = &WriteJob>| -> String {
            js.map(|j| String::from_utf8_lossy(&j.bytes).into_owned())
                .collect()
        };
        assert_eq!(tags(&mut group.iter()), "af");
        assert_eq!(tags(&mut queue.iter()), "bcdeg");
        let (alone, _r) = job(&w[4], None, true, b"x\n");
        assert!(take_group(&alone, &mut queue).is_empty());
        assert_eq!(queue.len(), 5);
    }

    /// A real Log file whose share of a group's sync fails (as an `EIO` from `syncfs`
    /// reported for it would).
    struct ShareFails(File);

    impl LogFile for ShareFails {
        fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
            Write::write_all(&mut self.0, bytes)
        }
        fn sync_data(&mut self) -> io::Result<()> {
            self.0.sync_data()
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.0.set_len(len)
        }
        fn raw_fd(&self) -> std::os::fd::RawFd {
            std::os::fd::AsRawFd::as_raw_fd(&self.0)
        }
        fn group_synced(&mut self, _: &io::Result<()>) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EIO))
        }
    }

    /// One `syncfs` settles a whole group: each good Log holds its batch and the next
    /// batch lands after it; the Log whose share failed is cut back to what was
    /// acknowledged, its writer stops (`writer_stopped`, `acked_bytes`) and refuses
    /// the next batch, and the other Logs of the group do not notice.
    #[tokio::test]
    async fn a_group_shares_one_sync_and_a_failed_share_stops_only_its_writer() {
        let (_d, home) = home();
        let path = |i: usize| home.sessions_dir().join(format!("g{i}.ndjson"));
        let open = |i: usize| {
            fs::write(path(i), b"old\n").unwrap();
            OpenOptions::new().append(true).open(path(i)).unwrap()
        };
        let good: Vec<_> = (0..3)
            .map(|i| writer_of(LogWriter::with_file(open(i), 4).with_group(Some(7))))
            .collect();
        let bad = writer_of(LogWriter::with_file(ShareFails(open(3)), 4).with_group(Some(7)));
        let mut jobs = Vec::new();
        let mut rx = Vec::new();
        for (i, w) in good.iter().chain([&bad]).enumerate() {
            let (j, r) = job(w, Some(7), true, format!("new{i}\n").as_bytes());
            jobs.push(j);
            rx.push(r);
        }
        run_group(jobs);
        let mut outcomes = Vec::new();
        for r in rx {
            outcomes.push(outcome(r).await);
        }
        for (i, o) in outcomes[..3].iter().enumerate() {
            assert!(o.is_ok(), "{o:?}");
            assert_eq!(
                fs::read_to_string(path(i)).unwrap(),
                format!("old\nnew{i}\n")
            );
        }
        let e = outcomes[3].as_ref().unwrap_err();
        assert_eq!(e.kind, ErrorKind::IoError, "{e:?}");
        assert_eq!(e.details["errno"], json!(libc::EIO));
        assert_eq!(e.details["writer_stopped"], json!(true));
        assert_eq!(e.details["acked_bytes"], json!(4));
        assert_eq!(fs::read_to_string(path(3)).unwrap(), "old\n");

        let (j, r) = job(&good[0], Some(7), true, b"next\n");
        let (k, s) = job(&bad, Some(7), true, b"never\n");
        run_group(vec![j, k]);
        outcome(r).await.unwrap();
        assert!(outcome(s).await.is_err());
        assert_eq!(fs::read_to_string(path(0)).unwrap(), "old\nnew0\nnext\n");
        assert_eq!(fs::read_to_string(path(3)).unwrap(), "old\n");
    }

    /// A database store in miniature: records each group commit's batches, fails the
    /// batches of fenced sessions, and can hold its first commit until told to go on.
    #[derive(Default)]
    struct FakeStore {
        commits: Mutex<Vec<Vec<String>>>,
        fenced: Vec<String>,
        /// Told when a commit starts.
        started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
        /// The first commit waits for this.
        hold: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    }

    struct FakeAppender {
        store: Arc<FakeStore>,
        sid: String,
        acked: usize,
        stopped: bool,
    }

    fn fake(store: &Arc<FakeStore>, sid: &str) -> Arc<Mutex<Box<dyn LogAppender>>> {
        writer_of(FakeAppender {
            store: store.clone(),
            sid: sid.into(),
            acked: 0,
            stopped: false,
        })
    }

    impl LogAppender for FakeAppender {
        fn append(&mut self, _: &[u8], _: bool) -> Result<(), AgentError> {
            Err(AgentError::internal("a store's batch committed on its own"))
        }
        fn sync_group(&self) -> Option<GroupKey> {
            Some(GroupKey::Store(Arc::as_ptr(&self.store) as usize))
        }
        fn shared_commit(&mut self) -> Option<&mut dyn SharedCommit> {
            Some(self)
        }
    }

    impl SharedCommit for FakeAppender {
        fn stage(&mut self, bytes: &[u8], _: bool) -> Result<StagedBatch, AgentError> {
            if self.stopped {
                return Err(AgentError::new(ErrorKind::LogWriteFailed, "stopped"));
            }
            let text = String::from_utf8_lossy(bytes).trim_end().to_string();
            Ok(Box::new((self.sid.clone(), text)))
        }
        fn commit(&mut self, batches: Vec<StagedBatch>) -> Vec<Result<(), AgentError>> {
            if let Some(tx) = self.store.started.lock().unwrap().as_ref() {
                let _ = tx.send(());
            }
            let hold = self.store.hold.lock().unwrap().take();
            if let Some(rx) = hold {
                let _ = rx.recv();
            }
            let batches: Vec<(String, String)> = batches
                .into_iter()
                .map(|b| *b.downcast::<(String, String)>().unwrap())
                .collect();
            self.store
                .commits
                .lock()
                .unwrap()
                .push(batches.iter().map(|(_, t)| t.clone()).collect());
            batches
                .iter()
                .map(|(sid, _)| {
                    if self.store.fenced.contains(sid) {
                        Err(AgentError::new(ErrorKind::Busy, "fenced"))
                    } else {
                        Ok(())
                    }
                })
                .collect()
        }
        fn settle(&mut self, len: usize, res: Result<(), AgentError>) -> Result<(), AgentError> {
            match res {
                Ok(()) => self.acked += len,
                Err(_) => self.stopped = true,
            }
            res
        }
    }

    fn shared_job(
        writer: &Arc<Mutex<Box<dyn LogAppender>>>,
        bytes: &str,
        answered: &Arc<Mutex<Vec<String>>>,
    ) -> (WriteJob, WriteOutcome) {
        let (done, rx) = tokio::sync::oneshot::channel();
        let group = writer.lock().unwrap().sync_group();
        let (answered, tag) = (answered.clone(), bytes.trim_end().to_string());
        let job = WriteJob {
            writer: writer.clone(),
            group,
            bytes: bytes.as_bytes().to_vec(),
            sync: true,
            after: Some(Box::new(move |res: &Result<(), AgentError>| {
                answered
                    .lock()
                    .unwrap()
                    .push(format!("{tag}:{}", if res.is_ok() { "ok" } else { "err" }));
            })),
            done,
        };
        (job, rx)
    }

    /// A store's group is one commit; each batch then gets its own outcome (a fenced
    /// session's fails and stops its appender alone, a stopped appender's batch never
    /// reaches the commit), and the answers go out in the group's order.
    #[tokio::test]
    async fn a_store_group_is_one_commit_with_an_outcome_per_batch() {
        let store = Arc::new(FakeStore {
            fenced: vec!["b".into()],
            ..FakeStore::default()
        });
        let (a, b, c) = (fake(&store, "a"), fake(&store, "b"), fake(&store, "c"));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let mut rx = Vec::new();
        let mut jobs = Vec::new();
        for (w, text) in [(&a, "a1\n"), (&b, "b1\n"), (&c, "c1\n")] {
            let (j, r) = shared_job(w, text, &answered);
            jobs.push(j);
            rx.push(r);
        }
        run_shared_group(jobs, &mut Committing { key: None });
        let mut outcomes = Vec::new();
        for r in rx {
            outcomes.push(outcome(r).await);
        }
        assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
        assert_eq!(outcomes[1].as_ref().unwrap_err().kind, ErrorKind::Busy);
        assert_eq!(
            *store.commits.lock().unwrap(),
            vec![vec!["a1".to_string(), "b1".into(), "c1".into()]]
        );
        assert_eq!(*answered.lock().unwrap(), ["a1:ok", "b1:err", "c1:ok"]);

        // b's appender stopped: its next batch fails without reaching the commit.
        let (j1, r1) = shared_job(&a, "a2\n", &answered);
        let (j2, r2) = shared_job(&b, "b2\n", &answered);
        run_shared_group(vec![j1, j2], &mut Committing { key: None });
        outcome(r1).await.unwrap();
        assert_eq!(
            outcome(r2).await.unwrap_err().kind,
            ErrorKind::LogWriteFailed
        );
        assert_eq!(store.commits.lock().unwrap()[1], ["a2"]);
    }

    /// Batches of a store that queue while its commit runs wait for it (no thread takes
    /// them alone) and all go into the store's next commit together.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stores_batches_queued_during_its_commit_form_its_next_commit() {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go, hold) = std::sync::mpsc::channel();
        let store = Arc::new(FakeStore {
            started: Mutex::new(Some(started_tx)),
            hold: Mutex::new(Some(hold)),
            ..FakeStore::default()
        });
        let first = WriterThread::spawn(
            Box::new(FakeAppender {
                store: store.clone(),
                sid: "first".into(),
                acked: 0,
                stopped: false,
            }),
            "first",
        );
        let held = first.submit(b"first\n".to_vec(), true, None);
        started
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the first commit never started");
        let mut queued = Vec::new();
        for i in 0..8 {
            let w = WriterThread::spawn(
                Box::new(FakeAppender {
                    store: store.clone(),
                    sid: format!("s{i}"),
                    acked: 0,
                    stopped: false,
                }),
                "s",
            );
            queued.push((w.submit(format!("s{i}\n").into_bytes(), true, None), w));
        }
        go.send(()).unwrap();
        let ten = std::time::Duration::from_secs(10);
        tokio::time::timeout(ten, outcome(held))
            .await
            .unwrap()
            .unwrap();
        for (rx, _w) in queued {
            tokio::time::timeout(ten, outcome(rx))
                .await
                .unwrap()
                .unwrap();
        }
        let commits = store.commits.lock().unwrap().clone();
        let want: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
        assert_eq!(commits, vec![vec!["first".to_string()], want]);
    }

    #[test]
    fn hostile_ids_build_no_path() {
        let (_d, home) = home();
        for bad in ["../x", "a/b", "", "."] {
            assert_eq!(home.log_path(bad).unwrap_err().kind, ErrorKind::InvalidArgs);
        }
    }
}
