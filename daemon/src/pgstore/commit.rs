//! The group-commit thread: every session's appender hands its batch here, and all
//! batches queued while a transaction runs go into the next one, across sessions. Each
//! batch carries its session's fencing token; a batch whose token is no longer the
//! session's (another daemon took the lease) fails alone and writes nothing.

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
            let mut client: Option<Client> = None;
            while let Ok(first) = rx.recv() {
                let mut jobs = vec![first];
                while jobs.len() < MAX_GROUP {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                let results = commit_group(&shared, &mut client, &jobs);
                for (job, res) in jobs.into_iter().zip(results) {
                    let _ = job.reply.send(res);
                }
            }
        })?;
    Ok(tx)
}

/// Where a failed transaction stopped: before `COMMIT` nothing was written and the
/// batches may be retried alone; at or after it the outcome is unknown.
enum Failure {
    BeforeCommit(postgres::Error),
    AtCommit(postgres::Error),
}

fn commit_group(
    shared: &Shared,
    client: &mut Option<Client>,
    jobs: &[Job],
) -> Vec<Result<(), AgentError>> {
    if client.as_ref().is_none_or(Client::is_closed) {
        *client = None;
        match shared.connect() {
            Ok(c) => *client = Some(c),
            Err(e) => {
                let err = unavailable("connect", &e);
                return jobs.iter().map(|_| Err(err.clone())).collect();
            }
        }
    }
    let Some(c) = client.as_mut() else {
        return Vec::new();
    };
    match run_tx(shared, c, jobs) {
        Ok(results) => results,
        Err(Failure::BeforeCommit(e)) if jobs.len() > 1 && !c.is_closed() => {
            tracing::warn!(error = %e, batches = jobs.len(), "group commit failed; committing each batch alone");
            jobs.iter()
                .map(|j| match run_tx(shared, c, std::slice::from_ref(j)) {
                    Ok(mut r) => r.pop().unwrap_or(Ok(())),
                    Err(Failure::BeforeCommit(e)) | Err(Failure::AtCommit(e)) => {
                        Err(unavailable("append", &e))
                    }
                })
                .collect()
        }
        Err(Failure::BeforeCommit(e)) | Err(Failure::AtCommit(e)) => {
            if c.is_closed() {
                *client = None;
            }
            let err = unavailable("append", &e);
            jobs.iter().map(|_| Err(err.clone())).collect()
        }
    }
}

fn unavailable(what: &str, e: &postgres::Error) -> AgentError {
    store_error(ErrorKind::LogWriteFailed, what, e)
}

fn run_tx(
    shared: &Shared,
    c: &mut Client,
    jobs: &[Job],
) -> Result<Vec<Result<(), AgentError>>, Failure> {
    let before = Failure::BeforeCommit;
    let mut tx = c.transaction().map_err(before)?;
    if !jobs.iter().any(|j| j.sync) {
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .map_err(before)?;
    }
    let ids: Vec<&str> = jobs.iter().map(|j| j.sid.as_str()).collect();
    // Row locks in id order: two daemons' groups never deadlock, and a takeover waits
    // for this transaction (and then sees its renewal).
    let owners = tx
        .query(
            "SELECT id, lease_token, lease_owner, lease_host FROM sessions
             WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .map_err(before)?;
    let mut results: Vec<Result<(), AgentError>> = Vec::with_capacity(jobs.len());
    for j in jobs {
        let row = owners.iter().find(|r| r.get::<_, &str>(0) == j.sid);
        let res = match row {
            Some(r)
                if r.get::<_, i64>(1) == j.token
                    && r.get::<_, Option<&str>>(2) == Some(shared.owner.as_str()) =>
            {
                Ok(())
            }
            Some(r) => Err(lease_lost(
                &j.sid,
                r.get::<_, Option<&str>>(2),
                r.get::<_, Option<&str>>(3),
            )),
            None => Err(AgentError::not_found("no such session")
                .with_details(json!({"session_id": j.sid, "store": "postgres"}))),
        };
        results.push(res);
    }
    let ok: Vec<&Job> = jobs
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(j, _)| j)
        .collect();
    if !ok.is_empty() {
        let mut sids = Vec::new();
        let mut seqs = Vec::new();
        let mut lines: Vec<&[u8]> = Vec::new();
        for j in &ok {
            for (seq, line) in &j.rows {
                sids.push(j.sid.as_str());
                seqs.push(*seq);
                lines.push(line.as_slice());
            }
        }
        tx.execute(
            "INSERT INTO events (session_id, seq, line)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])",
            &[&sids, &seqs, &lines],
        )
        .map_err(before)?;
        let u_id: Vec<&str> = ok.iter().map(|j| j.sid.as_str()).collect();
        let u_n: Vec<i64> = ok.iter().map(|j| j.sum.count).collect();
        let u_b: Vec<i64> = ok.iter().map(|j| j.sum.bytes).collect();
        let u_ts: Vec<Option<&str>> = ok.iter().map(|j| j.sum.last_ts.as_deref()).collect();
        let u_info: Vec<bool> = ok.iter().map(|j| j.sum.info).collect();
        let u_title: Vec<Option<&str>> = ok.iter().map(|j| j.sum.title.as_deref()).collect();
        let u_labels: Vec<Option<&str>> = ok.iter().map(|j| j.sum.labels.as_deref()).collect();
        let u_bs: Vec<bool> = ok.iter().map(|j| j.sum.branch_summary).collect();
        tx.execute(
            "UPDATE sessions s SET
                 event_count = s.event_count + u.n,
                 byte_count = s.byte_count + u.b,
                 last_ts = coalesce(u.last_ts, s.last_ts),
                 last_title = CASE WHEN u.info THEN u.title ELSE s.last_title END,
                 last_labels = coalesce(u.labels, s.last_labels),
                 has_branch_summary = s.has_branch_summary OR u.bs,
                 lease_expires = now() + make_interval(secs => $9)
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bool[],
                         $6::text[], $7::text[], $8::bool[])
                  AS u(id, n, b, last_ts, info, title, labels, bs)
             WHERE s.id = u.id",
            &[
                &u_id,
                &u_n,
                &u_b,
                &u_ts,
                &u_info,
                &u_title,
                &u_labels,
                &u_bs,
                &shared.lease.as_secs_f64(),
            ],
        )
        .map_err(before)?;
    }
    tx.commit().map_err(Failure::AtCommit)?;
    Ok(results)
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
