//! Importing each source once: `agentd/import_discover` and `agentd/import` with `once`.
//!
//! A core module beside `ops` (whose `import` it wraps): the API calls `import_once`, the
//! session verbs register `discover`.
//!
//! The ledger `<home>/imports.jsonl` is owned here: one line per `once` import,
//! `{identity, bytes, sha256, session_id, imported_at}`. A source's identity is its
//! format and canonical path (plus the session id inside an opencode database); its
//! fingerprint is its byte count and sha256 (for an opencode session, a hash of its rows'
//! ids and update times). A `once` import of a source whose latest ledger entry has the
//! same fingerprint, and whose session still exists, imports nothing and answers
//! `status: "unchanged"`; a changed source is imported as a new session whose
//! `imported_from.previous_import` names the earlier one. Ledger writes are serialized
//! by one lock; the ledger is only ever appended to.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd_proto::rpc::{DiscoverParams, ImportParams};
use agentd_proto::AgentError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::import::{discover, Format};
use crate::registry::Registry;

static LEDGER_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    identity: String,
    bytes: u64,
    sha256: String,
    session_id: String,
    imported_at: String,
}

fn ledger_path(r: &Registry) -> PathBuf {
    r.home.root().join("imports.jsonl")
}

/// The latest entry per identity (later lines win).
fn read_ledger(path: &Path) -> HashMap<String, Entry> {
    let mut out = HashMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return out;
    };
    for line in text.lines() {
        if let Ok(e) = serde_json::from_str::<Entry>(line) {
            out.insert(e.identity.clone(), e);
        }
    }
    out
}

fn append_ledger(path: &Path, e: &Entry) -> Result<(), AgentError> {
    let mut line =
        serde_json::to_vec(e).map_err(|e| AgentError::internal(format!("ledger entry: {e}")))?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| AgentError::storage("opening the import ledger", &e))?;
    f.write_all(&line)
        .and_then(|()| f.sync_data())
        .map_err(|e| AgentError::storage("writing the import ledger", &e))
}

fn identity(format: &str, path: &str, source_session: Option<&str>) -> String {
    match source_session {
        Some(s) => format!("{format}:{path}#{s}"),
        None => format!("{format}:{path}"),
    }
}

/// Bytes and sha256 of a source.
fn fingerprint(
    path: &Path,
    format: Option<Format>,
    session: Option<&str>,
) -> Result<(u64, String), AgentError> {
    if let (Some(Format::Opencode), Some(s)) = (format, session) {
        if crate::import::detect::detect(path).ok() == Some(Format::Opencode) && is_sqlite(path) {
            return crate::import::opencode_fingerprint(path, s);
        }
    }
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| AgentError::not_found(format!("cannot open {}: {e}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(|e| AgentError::invalid_args(format!("reading {}: {e}", path.display())))?;
        if k == 0 {
            break;
        }
        n += k as u64;
        h.update(&buf[..k]);
    }
    Ok((n, hex::encode(h.finalize())))
}

fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

enum Seen {
    New,
    Unchanged(Entry),
    Changed(Entry),
}

fn seen(r: &Registry, ledger: &HashMap<String, Entry>, id: &str, bytes: u64, sha: &str) -> Seen {
    match ledger.get(id) {
        None => Seen::New,
        // A session deleted for good no longer counts as imported; one in the trash does
        // (restoring it brings it back).
        Some(e) if r.index_get(&e.session_id).is_none() => {
            let _ = e;
            Seen::New
        }
        Some(e) if e.bytes == bytes && e.sha256 == sha => Seen::Unchanged(e.clone()),
        Some(e) => Seen::Changed(e.clone()),
    }
}

/// `agentd/import` with `once: true`.
pub async fn import_once(r: &Arc<Registry>, p: ImportParams) -> Result<Value, AgentError> {
    let _guard = LEDGER_LOCK.lock().await;
    let src = std::path::PathBuf::from(&p.path);
    if !src.is_absolute() {
        return Err(AgentError::invalid_args("path must be absolute"));
    }
    let canon = tokio::fs::canonicalize(&src)
        .await
        .map_err(|e| AgentError::not_found(format!("cannot open {}: {e}", src.display())))?;
    let format = Format::parse_choice(&p.format)?;
    let format = match format {
        Some(f) => f,
        None => {
            let c = canon.clone();
            tokio::task::spawn_blocking(move || crate::import::detect::detect(&c))
                .await
                .map_err(|e| AgentError::internal(format!("detect task: {e}")))??
        }
    };
    let (canon2, session) = (canon.clone(), p.source_session.clone());
    let (bytes, sha) =
        tokio::task::spawn_blocking(move || fingerprint(&canon2, Some(format), session.as_deref()))
            .await
            .map_err(|e| AgentError::internal(format!("fingerprint task: {e}")))??;
    let id = identity(
        format.as_str(),
        &canon.to_string_lossy(),
        p.source_session.as_deref(),
    );
    let lpath = ledger_path(r);
    let ledger = read_ledger(&lpath);
    let mut extra = serde_json::Map::new();
    extra.insert("bytes".into(), json!(bytes));
    extra.insert("sha256".into(), json!(sha));
    let status = match seen(r, &ledger, &id, bytes, &sha) {
        Seen::Unchanged(e) => {
            return Ok(json!({
                "status": "unchanged",
                "session_id": e.session_id,
                "format": format,
                "imported_at": e.imported_at,
            }))
        }
        Seen::Changed(e) => {
            extra.insert("previous_import".into(), json!(e.session_id));
            "changed"
        }
        Seen::New => "new",
    };
    let mut p = p;
    p.format = format.as_str().to_string();
    let outcome = crate::ops::import_with(r, p, extra).await?;
    append_ledger(
        &lpath,
        &Entry {
            identity: id,
            bytes,
            sha256: sha,
            session_id: outcome.session_id.clone(),
            imported_at: agentd_proto::event::now_ts(),
        },
    )?;
    let mut v = serde_json::to_value(outcome)
        .map_err(|e| AgentError::internal(format!("serialize result: {e}")))?;
    v["status"] = json!(if status == "new" {
        "imported"
    } else {
        "reimported"
    });
    Ok(v)
}

/// `agentd/import_discover`: the sources found and, for each, whether a `once` import
/// would import it (`new`, `changed`) or not (`unchanged`).
pub async fn discover(r: &Arc<Registry>, p: DiscoverParams) -> Result<Value, AgentError> {
    let since = p.since.as_deref().map(discover::parse_since).transpose()?;
    let home = PathBuf::from(&p.home);
    let (env, agent) = (p.env.clone(), p.agent.clone());
    let scan =
        tokio::task::spawn_blocking(move || discover::scan(&home, &env, agent.as_deref(), since))
            .await
            .map_err(|e| AgentError::internal(format!("discover task: {e}")))??;
    let _guard = LEDGER_LOCK.lock().await;
    let ledger = read_ledger(&ledger_path(r));
    let mut sources = Vec::new();
    for c in scan.sources {
        let canon = std::fs::canonicalize(&c.path).unwrap_or_else(|_| PathBuf::from(&c.path));
        let id = identity(
            c.format.as_str(),
            &canon.to_string_lossy(),
            c.source_session.as_deref(),
        );
        let mut v = serde_json::to_value(&c)
            .map_err(|e| AgentError::internal(format!("serialize: {e}")))?;
        // Hash only what the ledger knows: a new identity needs no fingerprint.
        let state = if ledger.contains_key(&id) {
            let (path, fmt, sess) = (canon.clone(), c.format, c.source_session.clone());
            match tokio::task::spawn_blocking(move || {
                fingerprint(&path, Some(fmt), sess.as_deref())
            })
            .await
            .map_err(|e| AgentError::internal(format!("fingerprint task: {e}")))?
            {
                Ok((bytes, sha)) => match seen(r, &ledger, &id, bytes, &sha) {
                    Seen::New => ("new", None),
                    Seen::Unchanged(e) => ("unchanged", Some(e.session_id)),
                    Seen::Changed(e) => ("changed", Some(e.session_id)),
                },
                Err(e) => {
                    v["error"] = json!(e.message);
                    ("unreadable", None)
                }
            }
        } else {
            ("new", None)
        };
        v["status"] = json!(state.0);
        if let Some(sid) = state.1 {
            v["imported_as"] = json!(sid);
        }
        sources.push(v);
    }
    Ok(json!({
        "sources": sources,
        "ignored": scan.ignored,
        "roots": scan.roots,
    }))
}
