//! `agentd store copy` (and `agentctl store copy`, which runs it): streams sessions from
//! a file home or a database into another, keeping their ids, and verifies each copy by
//! reading it back from the destination: the same number of lines and the same SHA-256
//! over the Log's bytes.
//!
//! A session the destination already has is refused (`already_exists`), never merged.
//! Only complete lines are copied; a Log with a line that is not an event is refused by
//! a database destination (it has no seq to be stored under).

use crate::pgstore::{ConnSpec, PgOptions, PgStore};
use crate::store::{FileStore, Home, LogStore};
use agentd_proto::{session_id, AgentError, ErrorKind};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Arc;

/// One end of a copy.
pub enum Side {
    Home(Home),
    Db(Arc<PgStore>),
}

impl Side {
    /// A `postgres://` URL, else the path of a home (which must exist as the source).
    pub fn open(spec: &str, must_exist: bool) -> Result<Side, String> {
        if crate::pgstore::is_postgres_url(spec) {
            let opts = PgOptions {
                spec: ConnSpec {
                    url: spec.to_string(),
                    password_file: None,
                },
                lease: std::time::Duration::from_secs(30),
                owner_id: format!("copy-{:08x}", rand::random::<u32>()),
            };
            return Ok(Side::Db(PgStore::open(&opts)?));
        }
        let root = PathBuf::from(spec);
        if must_exist && !root.join("sessions").is_dir() {
            return Err(format!("{spec}: no home here (no sessions/ directory)"));
        }
        Home::open(&root)
            .map(Side::Home)
            .map_err(|e| format!("{spec}: {e}"))
    }

    fn store(&self) -> Arc<dyn LogStore> {
        match self {
            Side::Home(h) => Arc::new(FileStore { home: h.clone() }),
            Side::Db(s) => s.clone(),
        }
    }

    /// Every session id, sorted.
    pub fn sessions(&self) -> Result<Vec<String>, AgentError> {
        let mut ids: Vec<String> = match self {
            Side::Home(h) => std::fs::read_dir(h.sessions_dir())
                .map_err(|e| AgentError::storage("list sessions", &e))?
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    let sid = name.strip_suffix(".ndjson")?.to_string();
                    session_id::validate(&sid).is_ok().then_some(sid)
                })
                .collect(),
            Side::Db(s) => s
                .heads()
                .unwrap_or_else(|| Ok(Vec::new()))?
                .into_iter()
                // Live sessions only, as from a home (whose trash is not copied).
                .filter(|(_, head)| !head.trashed)
                .map(|(sid, _)| sid)
                .collect(),
        };
        ids.sort();
        Ok(ids)
    }

    /// The Log's complete lines, each with its `\n`.
    pub fn read(&self, sid: &str) -> Result<Vec<u8>, AgentError> {
        match self {
            Side::Home(h) => {
                let mut bytes = std::fs::read(h.log_path(sid)?).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        AgentError::not_found(format!("no session {sid}"))
                    } else {
                        AgentError::storage("read log", &e)
                    }
                })?;
                let complete = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
                bytes.truncate(complete);
                Ok(bytes)
            }
            Side::Db(s) => s.read_lines(sid),
        }
    }
}

/// What one session's copy found.
#[derive(Debug, Serialize)]
pub struct Copied {
    pub session_id: String,
    pub events: u64,
    pub bytes: u64,
    pub sha256: String,
}

fn digest(bytes: &[u8]) -> (u64, String) {
    let lines = memchr::memchr_iter(b'\n', bytes).count() as u64;
    (lines, hex::encode(Sha256::digest(bytes)))
}

/// Copies `session` (or every session) from `from` to `to`, verifying each.
pub fn copy(from: &Side, to: &Side, session: Option<&str>) -> Result<Vec<Copied>, AgentError> {
    let ids = match session {
        Some(s) => {
            session_id::validate(s)?;
            vec![s.to_string()]
        }
        None => from.sessions()?,
    };
    let dst = to.store();
    let mut out = Vec::with_capacity(ids.len());
    for sid in ids {
        let bytes = from.read(&sid)?;
        let (events, sha) = digest(&bytes);
        dst.create(&sid, &mut |w| w.write_all(&bytes))
            .map_err(|mut e| {
                e.details["session_id"] = serde_json::json!(sid);
                e
            })?;
        let back = to.read(&sid)?;
        let (events_back, sha_back) = digest(&back);
        if (events_back, &sha_back) != (events, &sha) {
            return Err(AgentError::new(
                ErrorKind::CorruptLog,
                format!("the copy of {sid} differs from its source"),
            )
            .with_details(serde_json::json!({
                "session_id": sid,
                "source": {"events": events, "sha256": sha},
                "copy": {"events": events_back, "sha256": sha_back},
            })));
        }
        out.push(Copied {
            session_id: sid,
            events,
            bytes: bytes.len() as u64,
            sha256: sha,
        });
    }
    Ok(out)
}
