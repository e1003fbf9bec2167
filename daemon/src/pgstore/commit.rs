//! The group-commit thread: every session's appender hands its batch here, and all
//! batches queued while a commit runs go into the next one, across sessions: one
//! statement, one round trip, one commit. Each batch carries its session's fencing
//! token; a batch whose token is no longer the session's (another daemon took the
//! lease) fails alone and writes nothing.

use super::{conn::store_error, Shared, Summary};
use agentd_proto::{AgentError, ErrorKind};
use postgres::Client;
use serde_json::json;
use std::sync::mpsc;
use std::sync::Arc;

/// Most batches in one transaction (bounds the statement's arrays).
const MAX_GROUP: usize = 512;

pub struct Job {
    pub sid: String,
    pub token: i64,
    pub rows: super::Rows,
    pub sum: Summary,
    pub sync: bool,
    pub reply: mpsc::SyncSender<Result<(), AgentError>>,
}

pub fn spawn(shared: Arc<Shared>) -> std::io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("pg-commit".into())
        .spawn(move || {
            let mut conn: Option<GroupConn> = None;
            while let Ok(first) = rx.recv() {
                let mut jobs = vec![first];
                while jobs.len() < MAX_GROUP {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                let results = commit_group(&shared, &mut conn, &jobs);
                for (job, res) in jobs.into_iter().zip(results) {
                    let _ = job.reply.send(res);
                }
            }
        })?;
    Ok(tx)
}

/// The whole group as one statement, so one round trip and one commit (autocommit):
/// the session rows whose lease token and owner still match get their head and lease
/// renewed, and only those sessions' events are inserted. The ids returned are the
/// batches that were written.
const GROUP_SQL: &str = "
WITH upd AS (
    UPDATE sessions s SET
        event_count = s.event_count + u.n,
        byte_count = s.byte_count + u.b,
        last_ts = coalesce(u.last_ts, s.last_ts),
        last_title = CASE WHEN u.info THEN u.title ELSE s.last_title END,
        last_labels = coalesce(u.labels, s.last_labels),
        has_branch_summary = s.has_branch_summary OR u.bs,
        lease_expires = now() + make_interval(secs => $11)
    FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
                $6::bool[], $7::text[], $8::text[], $9::bool[])
         AS u(id, token, n, b, last_ts, info, title, labels, bs)
    WHERE s.id = u.id AND s.lease_token = u.token AND s.lease_owner = $10
    RETURNING s.id
), ins AS (
    INSERT INTO events (session_id, seq, line)
    SELECT e.sid, e.seq, e.line
    FROM unnest($12::text[], $13::bigint[], $14::bytea[]) AS e(sid, seq, line)
    WHERE e.sid IN (SELECT id FROM upd)
    RETURNING 1
)
SELECT id FROM upd";

/// The commit thread's connection with its prepared statement and the
/// `synchronous_commit` it is set to.
struct GroupConn {
    client: Client,
    group: postgres::Statement,
    sync: bool,
}

impl GroupConn {
    fn open(shared: &Shared) -> Result<GroupConn, postgres::Error> {
        let mut client = shared.connect()?;
        let group = client.prepare(GROUP_SQL)?;
        Ok(GroupConn {
            client,
            group,
            sync: true,
        })
    }
}

fn commit_group(
    shared: &Shared,
    conn: &mut Option<GroupConn>,
    jobs: &[Job],
) -> Vec<Result<(), AgentError>> {
    if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
        *conn = None;
        match GroupConn::open(shared) {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                let err = unavailable("connect", &e);
                return jobs.iter().map(|_| Err(err.clone())).collect();
            }
        }
    }
    let Some(c) = conn.as_mut() else {
        return Vec::new();
    };
    match run_group(shared, c, jobs) {
        Ok(results) => results,
        // The statement failed as a whole and the connection is fine: nothing was
        // written, so each batch may be tried alone (one bad batch fails alone).
        Err(e) if jobs.len() > 1 && !c.client.is_closed() => {
            tracing::warn!(error = %e, batches = jobs.len(), "group commit failed; committing each batch alone");
            jobs.iter()
                .map(|j| match run_group(shared, c, std::slice::from_ref(j)) {
                    Ok(mut r) => r.pop().unwrap_or(Ok(())),
                    Err(e) => Err(unavailable("append", &e)),
                })
                .collect()
        }
        // A lost connection leaves the outcome unknown: fail every batch; the sessions
        // rebuild their appenders against what the database holds.
        Err(e) => {
            if c.client.is_closed() {
                *conn = None;
            }
            let err = unavailable("append", &e);
            jobs.iter().map(|_| Err(err.clone())).collect()
        }
    }
}

fn unavailable(what: &str, e: &postgres::Error) -> AgentError {
    store_error(ErrorKind::LogWriteFailed, what, e)
}

fn run_group(
    shared: &Shared,
    c: &mut GroupConn,
    jobs: &[Job],
) -> Result<Vec<Result<(), AgentError>>, postgres::Error> {
    let sync = jobs.iter().any(|j| j.sync);
    if sync != c.sync {
        c.client.batch_execute(if sync {
            "SET synchronous_commit = on"
        } else {
            "SET synchronous_commit = off"
        })?;
        c.sync = sync;
    }
    let ids: Vec<&str> = jobs.iter().map(|j| j.sid.as_str()).collect();
    let tokens: Vec<i64> = jobs.iter().map(|j| j.token).collect();
    let n: Vec<i64> = jobs.iter().map(|j| j.sum.count).collect();
    let b: Vec<i64> = jobs.iter().map(|j| j.sum.bytes).collect();
    let ts: Vec<Option<&str>> = jobs.iter().map(|j| j.sum.last_ts.as_deref()).collect();
    let info: Vec<bool> = jobs.iter().map(|j| j.sum.info).collect();
    let title: Vec<Option<&str>> = jobs.iter().map(|j| j.sum.title.as_deref()).collect();
    let labels: Vec<Option<&str>> = jobs.iter().map(|j| j.sum.labels.as_deref()).collect();
    let bs: Vec<bool> = jobs.iter().map(|j| j.sum.branch_summary).collect();
    let mut ev_sid = Vec::new();
    let mut ev_seq = Vec::new();
    let mut ev_line: Vec<&[u8]> = Vec::new();
    for j in jobs {
        for (seq, line) in &j.rows {
            ev_sid.push(j.sid.as_str());
            ev_seq.push(*seq);
            ev_line.push(line.as_slice());
        }
    }
    let secs = shared.lease.as_secs_f64();
    let written = c.client.query(
        &c.group,
        &[
            &ids,
            &tokens,
            &n,
            &b,
            &ts,
            &info,
            &title,
            &labels,
            &bs,
            &shared.owner,
            &secs,
            &ev_sid,
            &ev_seq,
            &ev_line,
        ],
    )?;
    let written: std::collections::HashSet<&str> =
        written.iter().map(|r| r.get::<_, &str>(0)).collect();
    if written.len() == jobs.len() {
        return Ok(jobs.iter().map(|_| Ok(())).collect());
    }
    // Some batches were fenced off: say who holds those sessions now.
    let fenced: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !written.contains(id))
        .collect();
    let owners = c.client.query(
        "SELECT id, lease_owner, lease_host FROM sessions WHERE id = ANY($1)",
        &[&fenced],
    )?;
    Ok(jobs
        .iter()
        .map(|j| {
            if written.contains(j.sid.as_str()) {
                return Ok(());
            }
            match owners.iter().find(|r| r.get::<_, &str>(0) == j.sid) {
                Some(r) => Err(lease_lost(
                    &j.sid,
                    r.get::<_, Option<&str>>(1),
                    r.get::<_, Option<&str>>(2),
                )),
                None => Err(AgentError::not_found("no such session")
                    .with_details(json!({"session_id": j.sid, "store": "postgres"}))),
            }
        })
        .collect())
}

/// The error of a write whose lease another daemon holds now (or nobody does: it was
/// released or taken and given back): `busy`, naming the owner's host.
pub fn lease_lost(sid: &str, owner: Option<&str>, host: Option<&str>) -> AgentError {
    AgentError::new(
        ErrorKind::Busy,
        match host {
            Some(h) => format!("this daemon lost the lease on the session; {h} owns it now"),
            None => "this daemon lost the lease on the session".to_string(),
        },
    )
    .with_details(json!({
        "session_id": sid,
        "reason": "lease_lost",
        "owner": owner,
        "owner_host": host,
        "store": "postgres",
    }))
}
