//! agentd-store: the Log stores (docs/log-format.md#files-under-the-home, docs/log-format.md#the-envelope, docs/postgresql.md).
//!
//! This crate owns every byte agentd writes for a Log: the NDJSON files under the home
//! directory ([`FileStore`]), the PostgreSQL store ([`pgstore`]), the sweep of leftovers
//! ([`sweep`]) and the fault injection its tests use ([`fault`]). It sits above
//! `agentd-history` (it folds labels while opening a Log) and must never depend on the
//! daemon's sessions, turns, tools or providers, nor on the RPC server.
//!
//! The file store owns every byte agentd writes to disk: opening a Log (with torn-tail
//! repair and quarantine), appending batches with the configured durability, and
//! creating new Logs atomically. It knows nothing about sessions or projections; the
//! session actor is its only writer for a given Log.
//!
//! Where each part lives:
//! - this file: the home's layout ([`Home`]), the store traits every backend implements
//!   ([`LogStore`], [`LogAppender`], [`SharedCommit`], [`GroupedAppend`]) and the small
//!   durable-file helpers they share;
//! - `load`: reading a Log file, in blocks, with torn-tail repair ([`load_log`]);
//! - `filestore`: the file store itself, its append side ([`LogWriter`]), the recovery
//!   of a stopped writer, atomic creation and the lineage heads ([`read_head`]);
//! - `commit`: the commit threads every store's appends go through ([`WriterThread`]),
//!   with group syncs (one `syncfs` per filesystem) and group commits (one transaction
//!   per database store).
//!
//! Architecture invariant: nothing in a Log is ever truncated or rewritten except a
//! torn tail (bytes after the last `\n`), which is copied to `quarantine/` first.

mod commit;
pub mod fault;
mod filestore;
mod load;
pub mod pgstore;
pub mod sweep;

pub use commit::{
    no_outcome, outcome, set_group_sync, AfterWrite, WriteOutcome, WriterThread, COMMIT_THREADS,
};
pub use filestore::{create_atomic, read_head, recover_writer, FileStore, LogFile, LogWriter};
pub use load::{load_log, load_log_into, read_tail, LoadReport, LogTail};

use agentd_history::stored::StoredEvent;
use agentd_proto::{session_id, AgentError, ErrorKind, Event};
use serde_json::json;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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
pub(crate) fn read_failed(what: &str, e: &io::Error, sid: &str) -> AgentError {
    let mut err = AgentError::storage(what, e);
    if err.kind == ErrorKind::LogWriteFailed {
        err.kind = ErrorKind::CorruptLog;
    }
    err.details["session_id"] = json!(sid);
    err
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
    /// The Log's last `max_events` valid events (about `max_bytes` of it at most), read
    /// from its end without loading the rest: what a session answers while the whole
    /// Log loads (see [`read_tail`]). `None` (the default) when the store does not
    /// offer it, the Log is shorter than `min_len` or the read failed: then nothing is
    /// answered before the load.
    fn load_tail(
        &self,
        _sid: &str,
        _max_events: usize,
        _max_bytes: u64,
        _min_len: u64,
    ) -> Option<LogTail> {
        None
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
    /// Keeps a prompt's image in the store itself, content-addressed by its sha256
    /// (`sha256` is the lowercase hex digest of `bytes`, checked by the caller; storing
    /// the same image again is a no-op). `None`: this store keeps no images, and the
    /// caller stores them as the session's resources (the file store).
    fn put_image(
        &self,
        _sha256: &str,
        _mime: &str,
        _bytes: &[u8],
    ) -> Option<Result<(), AgentError>> {
        None
    }
    /// An image [`LogStore::put_image`] kept: `Ok(None)` when it holds none under that
    /// digest. `None`: this store keeps no images (read the session's resources).
    fn get_image(&self, _sha256: &str) -> Option<Result<Option<Vec<u8>>, AgentError>> {
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

/// Serializes an event as one Log line (with `\n`).
pub fn event_line(ev: &Event) -> Vec<u8> {
    // Serializing a struct of Strings and a Value cannot fail.
    let mut line = serde_json::to_vec(ev).unwrap_or_default();
    line.push(b'\n');
    line
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh home in a temporary directory (kept while the `TempDir` lives).
    pub(crate) fn home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        (dir, home)
    }

    #[test]
    fn hostile_ids_build_no_path() {
        let (_d, home) = home();
        for bad in ["../x", "a/b", "", "."] {
            assert_eq!(home.log_path(bad).unwrap_err().kind, ErrorKind::InvalidArgs);
        }
    }
}
