//! Logs in PostgreSQL: the second [`LogStore`] beside the file home, for several daemons
//! sharing sessions through one database with one owner per session at a time.
//!
//! - `events (session_id, seq, line)`: each Log line byte-exact (bytea, no newline).
//! - `sessions`: the head the lineage index needs (first line, counts, last ts, title,
//!   labels, branch summary) kept current by every commit, and the lease: owner, host,
//!   expiry and a fencing token that grows with every acquisition.
//!
//! A daemon takes the lease when it loads a session (`busy` with the owner's host while
//! another daemon's lease runs; a takeover once it expired), renews it in the background
//! and with every commit, and gives it back when the session unloads or the daemon
//! stops. Every write is checked against the token under the session row's lock, so a
//! daemon that lost its lease (paused, partitioned) cannot append.
//!
//! Appends go through one group-commit thread ([`commit`]); an append is acknowledged
//! only after its transaction committed with `synchronous_commit = on`.
//!
//! The `postgres` crate (the blocking face of `tokio-postgres`) is used because the
//! store trait is called from blocking threads; calls that arrive on a runtime thread
//! run on a scoped thread of their own.

pub mod check;
mod commit;
pub mod conn;
mod schema;
pub mod tls;

use crate::{GroupKey, LoadReport, LogAppender, LogHead, LogStore, SharedCommit, StagedBatch};
use agentd_proto::rpc::CorruptLine;
use agentd_proto::{AgentError, ErrorKind, Event, EventType};
use conn::store_error;
pub use conn::{is_postgres_url, redact, ConnSpec};
use postgres::Client;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the daemon asked for the store.
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub spec: ConnSpec,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// The lease identity of this daemon: stable per home (see [`home_owner_id`]), so a
    /// daemon restarted on the same home (which the home lock proves is the only one)
    /// takes its predecessor's leases back at once instead of waiting for them to end.
    pub owner_id: String,
}

/// The id of the home's daemon in a shared store, kept in `<home>/store-owner-id`
/// (created on first use).
pub fn home_owner_id(home: &std::path::Path) -> Result<String, String> {
    let path = home.join("store-owner-id");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let id = format!("{:016x}", rand::random::<u64>());
    crate::write_synced(&path, format!("{id}\n").as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(id)
}

pub struct PgStore {
    shared: Arc<Shared>,
    commits: Arc<commit::Committer>,
}

/// A lease this daemon holds: its token and the Log's length when loaded.
#[derive(Debug, Clone, Copy)]
struct Held {
    token: i64,
    bytes: u64,
}

pub(crate) struct Shared {
    cfg: postgres::Config,
    connector: conn::Connector,
    pool: Mutex<Vec<Client>>,
    /// This daemon's lease identity: `host/home-id`.
    owner: String,
    host: String,
    lease: Duration,
    held: Mutex<HashMap<String, Held>>,
    stopping: AtomicBool,
    url_shown: String,
}

/// What a batch changes in the session row.
#[derive(Debug, Default, Clone)]
pub(crate) struct Summary {
    count: i64,
    bytes: i64,
    last_ts: Option<String>,
    /// The batch has a `session_info`: `title` is its title (or none).
    info: bool,
    title: Option<String>,
    /// JSON array of the last `session_info` labels in the batch.
    labels: Option<String>,
    branch_summary: bool,
}

/// Runs `f` where a blocking client may run: here, or on a scoped thread when the caller
/// is a runtime thread (the blocking client starts a runtime of its own).
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| match s.spawn(f).join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        })
    } else {
        f()
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the result is NUL-terminated or cut.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl Shared {
    fn connect(&self) -> Result<Client, postgres::Error> {
        let mut c = self.connector.connect(&self.cfg)?;
        c.batch_execute("SET synchronous_commit = on")?;
        Ok(c)
    }

    /// Runs `f` on a pooled connection. With `retry`, a connection found closed (the
    /// server restarted) is replaced and `f` runs once more: only for reads and for
    /// writes that are safe to repeat.
    fn with_client<T: Send>(
        &self,
        retry: bool,
        mut f: impl FnMut(&mut Client) -> Result<T, postgres::Error> + Send,
    ) -> Result<T, postgres::Error> {
        off_runtime(|| {
            let mut attempts = if retry { 2 } else { 1 };
            loop {
                attempts -= 1;
                let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
                let mut c = match pooled {
                    Some(c) if !c.is_closed() => c,
                    _ => self.connect()?,
                };
                let res = f(&mut c);
                if c.is_closed() {
                    // The server went away: every pooled connection is likely dead too.
                    if let Ok(mut p) = self.pool.lock() {
                        p.clear();
                    }
                    if attempts > 0 && res.is_err() {
                        continue;
                    }
                } else if let Ok(mut p) = self.pool.lock() {
                    if p.len() < 8 {
                        p.push(c);
                    }
                }
                return res;
            }
        })
    }

    /// Takes the lease of `sid` (new token), or says who holds it.
    fn acquire(&self, sid: &str) -> Result<i64, AgentError> {
        let secs = self.lease.as_secs_f64();
        let got = self
            .with_client(true, |c| {
                c.query_opt(
                    "UPDATE sessions SET lease_owner = $2, lease_host = $3,
                         lease_token = lease_token + 1,
                         lease_expires = now() + make_interval(secs => $4)
                     WHERE id = $1 AND trashed_at IS NULL
                       AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires < now())
                     RETURNING lease_token",
                    &[&sid, &self.owner, &self.host, &secs],
                )
            })
            .map_err(|e| store_error(ErrorKind::IoError, "take lease", &e))?;
        if let Some(row) = got {
            return Ok(row.get(0));
        }
        let row = self
            .with_client(true, |c| {
                c.query_opt(
                    "SELECT lease_owner, lease_host,
                         to_char(lease_expires AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                         trashed_at IS NOT NULL
                     FROM sessions WHERE id = $1",
                    &[&sid],
                )
            })
            .map_err(|e| store_error(ErrorKind::IoError, "read lease", &e))?;
        let Some(row) = row else {
            return Err(AgentError::not_found("no such session")
                .with_details(json!({"session_id": sid}))
                .with_next_actions(&["agentctl ls"]));
        };
        if row.get::<_, bool>(3) {
            return Err(trashed(sid));
        }
        let owner: Option<String> = row.get(0);
        let host: Option<String> = row.get(1);
        let until: Option<String> = row.get(2);
        Err(AgentError::new(
            ErrorKind::Busy,
            format!(
                "session is owned by the agentd on {} until its lease ends",
                host.as_deref().unwrap_or("another host")
            ),
        )
        .with_details(json!({
            "session_id": sid,
            "reason": "leased",
            "owner": owner,
            "owner_host": host,
            "lease_expires_at": until,
            "store": "postgres",
        })))
    }

    /// Gives back the lease of `sid` if it is still the one with `token`.
    fn release(&self, sid: &str, token: i64) {
        if let Ok(mut held) = self.held.lock() {
            if held.get(sid).is_some_and(|h| h.token == token) {
                held.remove(sid);
            }
        }
        let res = self.with_client(false, |c| {
            c.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_host = NULL, lease_expires = NULL
                 WHERE id = $1 AND lease_token = $2 AND lease_owner = $3",
                &[&sid, &token, &self.owner],
            )
        });
        if let Err(e) = res {
            tracing::warn!(session = sid, error = %e, "cannot release the lease; it ends at its expiry");
        }
    }

    fn renew_loop(self: Arc<Self>) {
        let period = (self.lease / 3).max(Duration::from_millis(100));
        let mut client: Option<Client> = None;
        while !self.stopping.load(Ordering::Relaxed) {
            std::thread::park_timeout(period);
            if self.stopping.load(Ordering::Relaxed) {
                break;
            }
            let held: Vec<(String, i64)> = match self.held.lock() {
                Ok(h) => h.iter().map(|(k, v)| (k.clone(), v.token)).collect(),
                Err(_) => continue,
            };
            if held.is_empty() {
                continue;
            }
            if client.as_ref().is_none_or(Client::is_closed) {
                client = self.connect().ok();
            }
            let Some(c) = client.as_mut() else {
                tracing::warn!("cannot reach the store to renew leases");
                continue;
            };
            let ids: Vec<&str> = held.iter().map(|(s, _)| s.as_str()).collect();
            let tokens: Vec<i64> = held.iter().map(|(_, t)| *t).collect();
            // Rows a commit holds are skipped, never waited for: that commit renews
            // them itself, and a renewal that waited while holding other rows could
            // deadlock with a group commit that locks the same rows in another order.
            let renewed = c.query(
                "UPDATE sessions s SET lease_expires = now() + make_interval(secs => $4)
                 FROM (SELECT s2.id FROM sessions s2
                       JOIN unnest($1::text[], $2::bigint[]) AS h(id, token) ON s2.id = h.id
                       WHERE s2.lease_token = h.token AND s2.lease_owner = $3
                       FOR UPDATE OF s2 SKIP LOCKED) l
                 WHERE s.id = l.id
                 RETURNING s.id",
                &[&ids, &tokens, &self.owner, &self.lease.as_secs_f64()],
            );
            let rows = match renewed {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %conn::describe(&e).1, "lease renewal failed");
                    continue;
                }
            };
            let kept: std::collections::HashSet<&str> =
                rows.iter().map(|r| r.get::<_, &str>(0)).collect();
            let missing: Vec<usize> = (0..held.len())
                .filter(|&i| !kept.contains(ids[i]))
                .collect();
            if missing.is_empty() {
                continue;
            }
            // Skipped or lost: a plain read (no lock) tells which are still ours.
            let m_ids: Vec<&str> = missing.iter().map(|&i| ids[i]).collect();
            let m_tokens: Vec<i64> = missing.iter().map(|&i| tokens[i]).collect();
            match c.query(
                "SELECT s.id FROM sessions s
                 JOIN unnest($1::text[], $2::bigint[]) AS h(id, token) ON s.id = h.id
                 WHERE s.lease_token = h.token AND s.lease_owner = $3",
                &[&m_ids, &m_tokens, &self.owner],
            ) {
                Ok(still) => {
                    let still: std::collections::HashSet<&str> =
                        still.iter().map(|r| r.get::<_, &str>(0)).collect();
                    for sid in m_ids.iter().filter(|s| !still.contains(*s)) {
                        tracing::warn!(session = %sid, "lease lost; appends to this session are refused");
                    }
                }
                Err(e) => tracing::warn!(error = %conn::describe(&e).1, "lease check failed"),
            }
        }
    }
}

impl PgStore {
    /// Connects, applies the schema migrations and starts the commit and renewal
    /// threads. Errors never contain the URL's password.
    pub fn open(opts: &PgOptions) -> Result<Arc<PgStore>, String> {
        let (cfg, connector) = conn::connection(&opts.spec).map_err(|e| e.message)?;
        let host = hostname();
        let shared = Arc::new(Shared {
            cfg,
            connector,
            pool: Mutex::new(Vec::new()),
            owner: format!("{host}/{}", opts.owner_id),
            host,
            lease: opts.lease.max(Duration::from_secs(1)),
            held: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            url_shown: redact(&opts.spec.url),
        });
        let shown = shared.url_shown.clone();
        let version = shared
            .with_client(true, schema::migrate)
            .map_err(|e| format!("store {shown}: {}", conn::describe(&e).1))?;
        if version > schema::CURRENT {
            return Err(format!(
                "store {shown}: schema version {version} is newer than this agentd knows ({}); upgrade agentd",
                schema::CURRENT
            ));
        }
        let commits = Arc::new(commit::Committer::new(shared.clone()));
        let renew = shared.clone();
        std::thread::Builder::new()
            .name("pg-lease".into())
            .spawn(move || renew.renew_loop())
            .map_err(|e| format!("start the lease thread: {e}"))?;
        Ok(Arc::new(PgStore { shared, commits }))
    }

    /// The URL as it may be shown (password redacted).
    pub fn shown(&self) -> &str {
        &self.shared.url_shown
    }

    /// This daemon's lease identity (`host/home-id`).
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// A session's lines in seq order, each with its `\n` (the Log as a file would
    /// hold it), without taking the lease.
    pub fn read_lines(&self, sid: &str) -> Result<Vec<u8>, AgentError> {
        agentd_proto::session_id::validate(sid)?;
        let rows = self
            .shared
            .with_client(true, |c| {
                let mut tx = c.build_transaction().read_only(true).start()?;
                let exists = tx.query_opt(
                    "SELECT 1 FROM sessions WHERE id = $1 AND trashed_at IS NULL",
                    &[&sid],
                )?;
                let rows = tx.query(
                    "SELECT line FROM events WHERE session_id = $1 ORDER BY seq",
                    &[&sid],
                )?;
                tx.commit()?;
                Ok(exists.map(|_| rows))
            })
            .map_err(|e| store_error(ErrorKind::IoError, "read events", &e))?
            .ok_or_else(|| AgentError::not_found(format!("no session {sid}")))?;
        let mut out = Vec::new();
        for r in rows {
            out.extend_from_slice(r.get::<_, &[u8]>(0));
            out.push(b'\n');
        }
        Ok(out)
    }

    fn appender(&self, sid: &str, held: Held) -> Result<Box<dyn LogAppender>, AgentError> {
        let commits = self.commits.clone();
        Ok(Box::new(PgAppender {
            shared: self.shared.clone(),
            commits,
            sid: sid.to_string(),
            token: held.token,
            acked: held.bytes,
            stopped: None,
        }))
    }
}

/// `(seq, line without its newline)` of each event of a batch.
pub(crate) type Rows = Vec<(i64, Vec<u8>)>;

/// What the session row needs of one line, read without building its `data`.
#[derive(serde::Deserialize)]
struct LineHead<'a> {
    seq: u64,
    #[serde(borrow)]
    ts: std::borrow::Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
}

/// Splits whole Log lines into rows and what they change in the session row. Only a
/// `session_info` line is decoded whole (for its title and labels): the rest of a batch
/// costs a scan, not a tree of values per event.
fn summarize(bytes: &[u8]) -> Result<(Rows, Summary), AgentError> {
    let bad =
        |e: serde_json::Error| AgentError::internal(format!("a Log line does not parse: {e}"));
    let mut rows = Vec::new();
    let mut sum = Summary::default();
    for line in bytes.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let head: LineHead = serde_json::from_slice(line).map_err(bad)?;
        let seq = i64::try_from(head.seq)
            .map_err(|_| AgentError::new(ErrorKind::CorruptLog, "seq does not fit the store"))?;
        sum.count += 1;
        sum.bytes += line.len() as i64 + 1;
        sum.last_ts = Some(head.ts.into_owned());
        match EventType::parse(&head.kind) {
            EventType::SessionInfo => {
                let ev: Event = serde_json::from_slice(line).map_err(bad)?;
                sum.info = true;
                sum.title = ev.str_field("title").map(str::to_string);
                if let Some(l) = agentd_history::fold::session_labels(&ev) {
                    sum.labels = Some(json!(l).to_string());
                }
            }
            EventType::BranchSummary => sum.branch_summary = true,
            _ => {}
        }
        rows.push((seq, line.to_vec()));
    }
    Ok((rows, sum))
}

fn head_from_row(row: &postgres::Row) -> LogHead {
    let head: Vec<u8> = row.get(1);
    let labels: Option<String> = row.get(5);
    LogHead {
        trashed: row.get(7),
        first: serde_json::from_slice(&head).ok(),
        line_count: row.get::<_, i64>(2) as u64,
        last_ts: row.get(3),
        last_title: row.get(4),
        last_labels: labels
            .and_then(|l| serde_json::from_str(&l).ok())
            .unwrap_or_default(),
        has_branch_summary: row.get(6),
    }
}

const HEAD_COLUMNS: &str = "id, head, event_count, last_ts, last_title, last_labels,
     has_branch_summary, trashed_at IS NOT NULL";

/// How far before the last read's mark [`LogStore::heads_since`] looks again: longer
/// than a commit takes from stamping its rows to landing.
const CHANGE_WINDOW: Duration = Duration::from_secs(10);

/// `not_found` for a session in the store's trash, with the way back.
fn trashed(sid: &str) -> AgentError {
    AgentError::not_found("the session is in the trash")
        .with_details(json!({"session_id": sid, "store": "postgres"}))
        .with_next_actions(&[
            &format!("agentctl restore {sid}"),
            &format!("agentctl rm {sid} --purge"),
        ])
}

impl LogStore for PgStore {
    fn load(&self, sid: &str) -> Result<(Vec<Event>, LoadReport), AgentError> {
        agentd_proto::session_id::validate(sid)?;
        let token = self.shared.acquire(sid)?;
        let rows = self.shared.with_client(true, |c| {
            c.query(
                "SELECT line FROM events WHERE session_id = $1 ORDER BY seq",
                &[&sid],
            )
        });
        let rows = match rows {
            Ok(r) => r,
            Err(e) => {
                self.shared.release(sid, token);
                return Err(store_error(ErrorKind::IoError, "read events", &e));
            }
        };
        let mut report = LoadReport::default();
        let mut events = Vec::with_capacity(rows.len());
        let mut next: Option<u64> = None;
        for (i, row) in rows.iter().enumerate() {
            let line: &[u8] = row.get(0);
            match serde_json::from_slice::<Event>(line) {
                Ok(ev) => {
                    if let Some(n) = next.filter(|n| *n != ev.seq) {
                        report.seq_anomalies.push(json!({
                            "seq": ev.seq, "expected": n, "id": ev.id, "kind": "gap",
                        }));
                    }
                    next = Some(ev.seq + 1);
                    events.push(ev);
                }
                Err(e) => report.corrupt_lines.push(CorruptLine {
                    line: i as u64 + 1,
                    byte_offset: report.bytes,
                    reason: e.to_string(),
                }),
            }
            report.bytes += line.len() as u64 + 1;
        }
        if let Ok(mut held) = self.shared.held.lock() {
            held.insert(
                sid.to_string(),
                Held {
                    token,
                    bytes: report.bytes,
                },
            );
        }
        Ok((events, report))
    }

    fn open_appender(&self, sid: &str) -> Result<Box<dyn LogAppender>, AgentError> {
        let held = self
            .shared
            .held
            .lock()
            .ok()
            .and_then(|h| h.get(sid).copied());
        let held = match held {
            Some(h) => h,
            None => {
                // Appending without a load: take the lease and learn the length.
                let token = self.shared.acquire(sid)?;
                let bytes: i64 = self
                    .shared
                    .with_client(true, |c| {
                        c.query_one("SELECT byte_count FROM sessions WHERE id = $1", &[&sid])
                    })
                    .map_err(|e| store_error(ErrorKind::IoError, "read session", &e))?
                    .get(0);
                let h = Held {
                    token,
                    bytes: bytes as u64,
                };
                if let Ok(mut m) = self.shared.held.lock() {
                    m.insert(sid.to_string(), h);
                }
                h
            }
        };
        self.appender(sid, held)
    }

    fn recover_appender(
        &self,
        sid: &str,
        acked_bytes: u64,
        last: Option<&Event>,
    ) -> Result<Box<dyn LogAppender>, AgentError> {
        let Some(held) = self
            .shared
            .held
            .lock()
            .ok()
            .and_then(|h| h.get(sid).copied())
        else {
            return Err(commit::lease_lost(sid, None, None));
        };
        let last_seq: i64 = last.map_or(-1, |e| e.seq as i64);
        let last_id = last.map(|e| e.id.clone()).unwrap_or_default();
        let owner = self.shared.owner.clone();
        let secs = self.shared.lease.as_secs_f64();
        // Under the row lock: still ours, then drop whatever a commit of unknown outcome
        // left past the last acknowledged event, and check that event is the last one.
        let res = self.shared.with_client(true, |c| {
            let mut tx = c.transaction()?;
            let row = tx.query_opt(
                "SELECT lease_token, lease_owner, lease_host FROM sessions WHERE id = $1 FOR UPDATE",
                &[&sid],
            )?;
            let Some(row) = row else {
                return Ok(Err(AgentError::not_found("no such session")));
            };
            let (token, who, host): (i64, Option<String>, Option<String>) =
                (row.get(0), row.get(1), row.get(2));
            if token != held.token || who.as_deref() != Some(owner.as_str()) {
                return Ok(Err(commit::lease_lost(sid, who.as_deref(), host.as_deref())));
            }
            let cut = tx.execute(
                "DELETE FROM events WHERE session_id = $1 AND seq > $2",
                &[&sid, &last_seq],
            )?;
            let tail = tx.query_opt(
                "SELECT line FROM events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1",
                &[&sid],
            )?;
            let matches = match &tail {
                None => last_seq < 0,
                Some(r) => serde_json::from_slice::<Event>(r.get::<_, &[u8]>(0))
                    .is_ok_and(|e| e.seq as i64 == last_seq && e.id == last_id),
            };
            if !matches {
                return Ok(Err(AgentError::new(
                    ErrorKind::CorruptLog,
                    "the stored Log's last event is not the last acknowledged event",
                )
                .with_details(json!({"session_id": sid, "expected_seq": last_seq}))));
            }
            tx.execute(
                "UPDATE sessions SET
                     event_count = (SELECT count(*) FROM events WHERE session_id = $1),
                     byte_count = (SELECT coalesce(sum(length(line) + 1), 0) FROM events WHERE session_id = $1),
                     updated_at = clock_timestamp(),
                     lease_expires = now() + make_interval(secs => $2),
                     lease_token = lease_token + 1
                 WHERE id = $1",
                &[&sid, &secs],
            )?;
            let token: i64 = tx
                .query_one("SELECT lease_token FROM sessions WHERE id = $1", &[&sid])?
                .get(0);
            tx.commit()?;
            Ok(Ok((cut, token)))
        });
        // A new token: the stopped appender's release (when it is dropped) is a no-op.
        let (cut, token) =
            res.map_err(|e| store_error(ErrorKind::LogWriteFailed, "recover appender", &e))??;
        let held = Held {
            token,
            bytes: acked_bytes,
        };
        if let Ok(mut m) = self.shared.held.lock() {
            m.insert(sid.to_string(), held);
        }
        if cut > 0 {
            tracing::warn!(
                session = sid,
                events = cut,
                "removed events whose commit was never acknowledged"
            );
        }
        self.appender(sid, held)
    }

    fn exists(&self, sid: &str) -> Result<bool, AgentError> {
        agentd_proto::session_id::validate(sid)?;
        self.shared
            .with_client(true, |c| {
                c.query_opt("SELECT 1 FROM sessions WHERE id = $1", &[&sid])
            })
            .map(|r| r.is_some())
            .map_err(|e| store_error(ErrorKind::IoError, "look up session", &e))
    }

    fn create(
        &self,
        sid: &str,
        write: &mut (dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()> + Send),
    ) -> Result<(), AgentError> {
        agentd_proto::session_id::validate(sid)?;
        let mut buf = Vec::new();
        write(&mut buf).map_err(|e| crate::write_failed("create log", &e))?;
        let (rows, sum) = summarize(&buf)?;
        let Some((_, head)) = rows.first() else {
            return Err(AgentError::internal("a new Log needs a first event"));
        };
        let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let lines: Vec<&[u8]> = rows.iter().map(|r| r.1.as_slice()).collect();
        let res = self.shared.with_client(false, |c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "INSERT INTO sessions (id, head, event_count, byte_count, last_ts, last_title,
                     last_labels, has_branch_summary)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
                &[
                    &sid,
                    head,
                    &sum.count,
                    &sum.bytes,
                    &sum.last_ts,
                    &sum.title,
                    &sum.labels,
                    &sum.branch_summary,
                ],
            )?;
            if n == 0 {
                tx.rollback()?;
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO events (session_id, seq, line)
                 SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])",
                &[&sid, &seqs, &lines],
            )?;
            tx.commit()?;
            Ok(true)
        });
        match res {
            Ok(true) => Ok(()),
            Ok(false) => Err(AgentError::new(
                ErrorKind::AlreadyExists,
                match self.place(sid) {
                    Some(Ok(crate::LogPlace::Trashed)) => {
                        "a session with this id is in the trash; purge it first"
                    }
                    _ => "session already exists",
                },
            )),
            Err(e) => Err(store_error(ErrorKind::LogWriteFailed, "create log", &e)),
        }
    }

    fn head(&self, sid: &str) -> Result<LogHead, AgentError> {
        let row = self
            .shared
            .with_client(true, |c| {
                c.query_opt(
                    &format!("SELECT {HEAD_COLUMNS} FROM sessions WHERE id = $1"),
                    &[&sid],
                )
            })
            .map_err(|e| store_error(ErrorKind::IoError, "read session head", &e))?;
        row.map(|r| head_from_row(&r)).ok_or_else(|| {
            AgentError::not_found("no such session").with_details(json!({"session_id": sid}))
        })
    }

    fn heads(&self) -> Option<Result<Vec<(String, LogHead)>, AgentError>> {
        let rows = self.shared.with_client(true, |c| {
            c.query(&format!("SELECT {HEAD_COLUMNS} FROM sessions"), &[])
        });
        Some(
            rows.map(|rows| {
                rows.iter()
                    .map(|r| (r.get::<_, String>(0), head_from_row(r)))
                    .collect()
            })
            .map_err(|e| store_error(ErrorKind::IoError, "read sessions", &e)),
        )
    }

    fn heads_since(
        &self,
        since: Option<&str>,
    ) -> Option<Result<(Vec<(String, LogHead)>, Option<String>), AgentError>> {
        // One statement: the rows changed since a little before the mark (a commit
        // stamps its rows before it lands, so one that began before the last read may
        // become visible after it), each with the server's time of this read, which is
        // the next mark. No rows: the mark stays.
        let rows = self.shared.with_client(true, |c| match since {
            None => c.query(
                &format!("SELECT {HEAD_COLUMNS}, now()::text FROM sessions"),
                &[],
            ),
            Some(mark) => c.query(
                &format!(
                    "SELECT {HEAD_COLUMNS}, now()::text FROM sessions
                     WHERE updated_at > $1::text::timestamptz - make_interval(secs => $2)"
                ),
                &[&mark, &CHANGE_WINDOW.as_secs_f64()],
            ),
        });
        Some(
            rows.map(|rows| {
                let mark = rows
                    .first()
                    .map(|r| r.get::<_, String>(8))
                    .or_else(|| since.map(str::to_string));
                let heads = rows
                    .iter()
                    .map(|r| (r.get::<_, String>(0), head_from_row(r)))
                    .collect();
                (heads, mark)
            })
            .map_err(|e| store_error(ErrorKind::IoError, "read sessions", &e)),
        )
    }

    fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        if let Ok(mut held) = self.shared.held.lock() {
            held.clear();
        }
        let res = self.shared.with_client(false, |c| {
            c.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_host = NULL, lease_expires = NULL
                 WHERE lease_owner = $1",
                &[&self.shared.owner],
            )
        });
        match res {
            Ok(n) => tracing::info!(leases = n, "leases released"),
            Err(e) => tracing::warn!(error = %e, "cannot release leases; they end at their expiry"),
        }
    }

    fn describe(&self) -> String {
        self.shared.url_shown.clone()
    }

    fn log_location(&self, sid: &str) -> Option<String> {
        Some(format!("{}#{sid}", self.shared.url_shown))
    }

    fn place(&self, sid: &str) -> Option<Result<crate::LogPlace, AgentError>> {
        use crate::LogPlace;
        if let Err(e) = agentd_proto::session_id::validate(sid) {
            return Some(Err(e));
        }
        let row = self.shared.with_client(true, |c| {
            c.query_opt(
                "SELECT trashed_at IS NOT NULL FROM sessions WHERE id = $1",
                &[&sid],
            )
        });
        Some(
            row.map(|r| match r {
                None => LogPlace::Absent,
                Some(r) if r.get::<_, bool>(0) => LogPlace::Trashed,
                Some(_) => LogPlace::Live,
            })
            .map_err(|e| store_error(ErrorKind::IoError, "look up session", &e)),
        )
    }

    fn trash(&self, sid: &str) -> Result<(), AgentError> {
        let held = self
            .shared
            .held
            .lock()
            .ok()
            .and_then(|h| h.get(sid).copied());
        let Some(held) = held else {
            return Err(commit::lease_lost(sid, None, None));
        };
        // Under the lease's token, like every write: a daemon that lost the session
        // cannot delete it. The lease ends with the move.
        let n = self
            .shared
            .with_client(false, |c| {
                c.execute(
                    "UPDATE sessions SET trashed_at = now(), updated_at = clock_timestamp(),
                         lease_owner = NULL,
                         lease_host = NULL, lease_expires = NULL
                     WHERE id = $1 AND trashed_at IS NULL
                       AND lease_token = $2 AND lease_owner = $3",
                    &[&sid, &held.token, &self.shared.owner],
                )
            })
            .map_err(|e| store_error(ErrorKind::LogWriteFailed, "move to trash", &e))?;
        if n == 0 {
            return Err(commit::lease_lost(sid, None, None));
        }
        if let Ok(mut m) = self.shared.held.lock() {
            if m.get(sid).is_some_and(|h| h.token == held.token) {
                m.remove(sid);
            }
        }
        Ok(())
    }

    fn untrash(&self, sid: &str) -> Result<(), AgentError> {
        agentd_proto::session_id::validate(sid)?;
        let n = self
            .shared
            .with_client(false, |c| {
                c.execute(
                    "UPDATE sessions SET trashed_at = NULL, updated_at = clock_timestamp()
                     WHERE id = $1 AND trashed_at IS NOT NULL",
                    &[&sid],
                )
            })
            .map_err(|e| store_error(ErrorKind::LogWriteFailed, "restore from trash", &e))?;
        if n == 0 {
            return Err(not_in_trash(sid));
        }
        Ok(())
    }

    fn purge(&self, sid: &str) -> Result<(), AgentError> {
        agentd_proto::session_id::validate(sid)?;
        let n = self
            .shared
            .with_client(false, |c| {
                let mut tx = c.transaction()?;
                let n = tx.execute(
                    "DELETE FROM sessions WHERE id = $1 AND trashed_at IS NOT NULL",
                    &[&sid],
                )?;
                if n > 0 {
                    tx.execute("DELETE FROM events WHERE session_id = $1", &[&sid])?;
                }
                tx.commit()?;
                Ok(n)
            })
            .map_err(|e| store_error(ErrorKind::LogWriteFailed, "purge", &e))?;
        if n == 0 {
            return Err(not_in_trash(sid));
        }
        Ok(())
    }

    fn put_image(&self, sha256: &str, mime: &str, bytes: &[u8]) -> Option<Result<(), AgentError>> {
        // Committed (synchronous_commit = on) before the event that refers to it is
        // appended; the same image again changes nothing.
        Some(
            self.shared
                .with_client(true, |c| {
                    c.execute(
                        "INSERT INTO images (sha256, mime, bytes) VALUES ($1, $2, $3) \
                         ON CONFLICT (sha256) DO NOTHING",
                        &[&sha256, &mime, &bytes],
                    )
                })
                .map(|_| ())
                .map_err(|e| store_error(ErrorKind::LogWriteFailed, "store image", &e)),
        )
    }

    fn get_image(&self, sha256: &str) -> Option<Result<Option<Vec<u8>>, AgentError>> {
        Some(
            self.shared
                .with_client(true, |c| {
                    c.query_opt("SELECT bytes FROM images WHERE sha256 = $1", &[&sha256])
                })
                .map(|row| row.map(|r| r.get::<_, Vec<u8>>(0)))
                .map_err(|e| store_error(ErrorKind::IoError, "read image", &e)),
        )
    }

    fn read_log(&self, sid: &str) -> Option<Result<Vec<u8>, AgentError>> {
        Some(self.read_lines(sid).map_err(|e| {
            if e.kind == ErrorKind::NotFound {
                e.with_details(json!({"session_id": sid}))
                    .with_next_actions(&["agentctl ls"])
            } else {
                e
            }
        }))
    }
}

/// The append side of one session in PostgreSQL.
struct PgAppender {
    shared: Arc<Shared>,
    commits: Arc<commit::Committer>,
    sid: String,
    token: i64,
    /// Bytes acknowledged (the file store's length, counted the same way).
    acked: u64,
    /// Why appends are refused until the store rebuilds this appender.
    stopped: Option<AgentError>,
}

impl PgAppender {
    fn stop(&mut self, mut e: AgentError) -> AgentError {
        e.details["writer_stopped"] = json!(true);
        e.details["acked_bytes"] = json!(self.acked);
        e.details["session_id"] = json!(self.sid);
        self.stopped = Some(e.clone());
        e
    }
}

impl LogAppender for PgAppender {
    /// A batch committed on its own (the commit threads commit a store's batches in
    /// groups, through [`SharedCommit`]).
    fn append(&mut self, bytes: &[u8], sync: bool) -> Result<(), AgentError> {
        let batch = self.stage(bytes, sync)?;
        let res = self
            .commit(vec![batch])
            .pop()
            .unwrap_or_else(|| Err(crate::no_outcome()));
        self.settle(bytes.len(), res)
    }

    fn sync_group(&self) -> Option<GroupKey> {
        Some(GroupKey::Store(Arc::as_ptr(&self.commits) as usize))
    }

    fn shared_commit(&mut self) -> Option<&mut dyn SharedCommit> {
        Some(self)
    }
}

impl SharedCommit for PgAppender {
    fn stage(&mut self, bytes: &[u8], sync: bool) -> Result<StagedBatch, AgentError> {
        if let Some(e) = &self.stopped {
            return Err(e.clone());
        }
        crate::fault::kill_point(&self.sid, bytes);
        let (rows, sum) = summarize(bytes)?;
        Ok(Box::new(commit::Job {
            sid: self.sid.clone(),
            token: self.token,
            rows,
            sum,
            sync,
        }))
    }

    fn commit(&mut self, batches: Vec<StagedBatch>) -> Vec<Result<(), AgentError>> {
        let jobs: Vec<Option<commit::Job>> = batches
            .into_iter()
            .map(|b| b.downcast::<commit::Job>().ok().map(|j| *j))
            .collect();
        self.commits.commit(jobs)
    }

    fn settle(&mut self, len: usize, res: Result<(), AgentError>) -> Result<(), AgentError> {
        match res {
            Ok(()) => {
                self.acked += len as u64;
                Ok(())
            }
            Err(e) => Err(self.stop(e)),
        }
    }
}

impl Drop for PgAppender {
    fn drop(&mut self) {
        // A stopped appender keeps the lease: the session rebuilds its appender under it
        // (`recover_appender`), and only then gets a new token.
        if self.stopped.is_none() && !self.shared.stopping.load(Ordering::Relaxed) {
            self.shared.release(&self.sid, self.token);
        }
    }
}

/// `not_found` for an id that has no trashed session.
fn not_in_trash(sid: &str) -> AgentError {
    AgentError::not_found("no session with this id in the trash")
        .with_details(json!({"session_id": sid}))
        .with_next_actions(&["agentctl ls"])
}
