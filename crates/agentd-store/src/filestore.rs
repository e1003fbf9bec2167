//! The file store: Logs as NDJSON files under the home directory, their append side
//! ([`LogWriter`]), the recovery of a writer that stopped, atomic creation of a new Log
//! and the heads the lineage index reads (docs/log-format.md#files-under-the-home).

use crate::load::{load_log, load_log_into, LoadReport};
use crate::{
    read_failed, sync_dir, write_failed, write_synced, GroupKey, GroupedAppend, Home, LogAppender,
    LogHead, LogStore,
};
use agentd_history::stored::StoredEvent;
use agentd_proto::{AgentError, ErrorKind, Event, EventType};
use serde_json::{json, Value};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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
    fn load_tail(
        &self,
        sid: &str,
        max_events: usize,
        max_bytes: u64,
        min_len: u64,
    ) -> Option<crate::LogTail> {
        crate::read_tail(&self.home, sid, max_events, max_bytes, min_len)
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
pub(crate) fn open_appender(path: &Path) -> Result<Box<dyn LogAppender>, AgentError> {
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
pub(crate) mod tests {
    use super::*;
    use crate::tests::home;

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
    pub(crate) struct FailingSync {
        pub(crate) bytes: Vec<u8>,
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
}
