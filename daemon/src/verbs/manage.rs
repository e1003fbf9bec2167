//! Rename, archive/unarchive, delete/restore/purge, and the provider preflight.
//!
//! Rename and archive record a `session_info` event through the session's actor; the
//! actor's append updates the lineage index, so `list` and `tree` show the change at
//! once. Delete asks the actor to move the session's files to `<home>/trash/` and
//! retire, so no append lands in a moved Log.

use crate::registry::{is_archived, trash_dir, Registry, ARCHIVED_LABEL};
use crate::store;
use agentd_proto::rpc::{
    DeleteParams, DeleteResult, PreflightParams, PreflightResult, RenameParams, RestoreResult,
    SessionInfoResult,
};
use agentd_proto::{session_id, AgentError, ErrorKind, EventDraft, EventType};
use serde_json::json;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Longest title accepted, in bytes: titles are one line in `ls` and `tree`.
pub const MAX_TITLE_BYTES: usize = 512;

/// A title as recorded: trimmed, one line, at most [`MAX_TITLE_BYTES`].
pub fn check_title(title: &str) -> Result<String, AgentError> {
    let t = title.trim();
    if t.is_empty() {
        return Err(AgentError::invalid_args("title must not be empty")
            .with_details(json!({"field": "title"})));
    }
    if t.len() > MAX_TITLE_BYTES {
        return Err(AgentError::invalid_args(format!(
            "title is {} bytes; at most {MAX_TITLE_BYTES} are allowed",
            t.len()
        ))
        .with_details(json!({"field": "title", "bytes": t.len(), "max": MAX_TITLE_BYTES})));
    }
    if t.chars().any(char::is_control) {
        return Err(
            AgentError::invalid_args("title must be one line without control characters")
                .with_details(json!({"field": "title"})),
        );
    }
    Ok(t.to_string())
}

/// Records `session_info{title, labels}` built from the session's current state by
/// `change`; nothing when `change` returns `None` (no change).
async fn record_info(
    registry: &Arc<Registry>,
    sid: &str,
    change: impl FnOnce(Option<&str>, &[String]) -> Option<(Option<String>, Vec<String>)>
        + Send
        + 'static,
) -> Result<SessionInfoResult, AgentError> {
    let h = registry.get(sid).await?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let rec = h
        .record(move |st| {
            let current = (st.title().map(str::to_string), st.fold.labels().to_vec());
            let Some((title, labels)) = change(st.title(), st.fold.labels()) else {
                let _ = tx.send(current);
                return Ok(Vec::new());
            };
            let _ = tx.send((title.clone(), labels.clone()));
            Ok(vec![EventDraft::new(
                EventType::SessionInfo,
                json!({"title": title, "labels": labels}),
            )])
        })
        .await?;
    let (title, labels) = rx
        .await
        .map_err(|_| AgentError::internal("session_info lost"))?;
    Ok(SessionInfoResult {
        session_id: sid.to_string(),
        archived: is_archived(&labels),
        title,
        labels,
        seq: rec.map(|r| r.first_seq),
    })
}

/// `agentd/rename`.
pub async fn rename(
    registry: &Arc<Registry>,
    p: RenameParams,
) -> Result<SessionInfoResult, AgentError> {
    session_id::validate(&p.session_id)?;
    let title = check_title(&p.title)?;
    record_info(registry, &p.session_id, move |current, labels| {
        (current != Some(title.as_str())).then(|| (Some(title), labels.to_vec()))
    })
    .await
}

/// `agentd/archive` (`archived: true`) and `agentd/unarchive`.
pub async fn set_archived(
    registry: &Arc<Registry>,
    sid: &str,
    archived: bool,
) -> Result<SessionInfoResult, AgentError> {
    session_id::validate(sid)?;
    record_info(registry, sid, move |title, labels| {
        if is_archived(labels) == archived {
            return None;
        }
        let mut labels: Vec<String> = labels
            .iter()
            .filter(|l| *l != ARCHIVED_LABEL)
            .cloned()
            .collect();
        if archived {
            labels.push(ARCHIVED_LABEL.to_string());
        }
        Some((title.map(str::to_string), labels))
    })
    .await
}

fn trash_paths(registry: &Registry, sid: &str) -> Result<(PathBuf, PathBuf), AgentError> {
    session_id::validate(sid)?;
    let trash = trash_dir(&registry.home);
    Ok((trash.join(format!("{sid}.ndjson")), trash.join(sid)))
}

fn io_failed(what: &str, e: &io::Error) -> AgentError {
    store::write_failed(what, e)
}

/// Moves a file without ever replacing one at `to` (link, then unlink): a crash in
/// between leaves both names, and the live one wins when the index is rebuilt.
fn move_file_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

fn sync_parent(p: &Path) -> io::Result<()> {
    match p.parent() {
        Some(d) => store::sync_dir(d),
        None => Ok(()),
    }
}

/// Direct forks of `sid` according to the lineage index.
fn forks_of(registry: &Registry, sid: &str) -> Vec<String> {
    let mut forks: Vec<String> = registry.with_index(|i| {
        i.values()
            .filter(|m| m.parent_session_id.as_deref() == Some(sid))
            .map(|m| m.session_id.clone())
            .collect()
    });
    forks.sort();
    forks
}

fn purge_trashed(log: &Path, dir: &Path) -> Result<(), AgentError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| io_failed("purge session directory", &e))?;
    }
    match std::fs::remove_file(log) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_failed("purge Log", &e)),
    }
    sync_parent(log).map_err(|e| io_failed("sync trash", &e))
}

/// `agentd/delete`: to the trash, or (with `purge`) gone for good.
pub async fn delete(
    registry: &Arc<Registry>,
    turns: &crate::turn::TurnManager,
    p: DeleteParams,
) -> Result<DeleteResult, AgentError> {
    let sid = p.session_id.clone();
    session_id::validate(&sid)?;
    let store = registry.store.clone();
    let s = sid.clone();
    if let Some(place) = blocking(move || store.place(&s).transpose()).await? {
        return delete_in_store(registry, turns, p, place).await;
    }
    let log = registry.home.log_path(&sid)?;
    let session_dir = registry.home.session_dir(&sid)?;
    let (trash_log, trash_session_dir) = trash_paths(registry, &sid)?;
    if !log.exists() {
        if trash_log.exists() {
            if !p.purge {
                return Err(AgentError::not_found("the session is already in the trash")
                    .with_details(
                        json!({"session_id": sid, "trash_path": trash_log.display().to_string()}),
                    )
                    .with_next_actions(&[
                        &format!("agentctl restore {sid}"),
                        &format!("agentctl rm {sid} --purge"),
                    ]));
            }
            let (l, d) = (trash_log.clone(), trash_session_dir.clone());
            blocking(move || purge_trashed(&l, &d)).await?;
            registry.index_remove(&sid);
            return Ok(DeleteResult {
                forks: forks_of(registry, &sid),
                session_id: sid,
                outcome: "purged".into(),
                trash_path: None,
            });
        }
        return Err(AgentError::not_found("no such session")
            .with_details(json!({"session_id": sid}))
            .with_next_actions(&["agentctl ls"]));
    }
    if turns.is_running(&sid) {
        return Err(turn_running(&sid));
    }
    if trash_log.exists() {
        return Err(AgentError::new(
            ErrorKind::AlreadyExists,
            "an earlier session with this id is in the trash",
        )
        .with_details(json!({"session_id": sid, "trash_path": trash_log.display().to_string()}))
        .with_next_actions(&[&format!("agentctl rm {sid} --purge")]));
    }
    let h = registry.get(&sid).await?;
    let trash = trash_dir(&registry.home);
    let (tl, td) = (trash_log.clone(), trash_session_dir.clone());
    let busy_err = turn_running(&sid);
    h.retire(move |st| {
        if st.running_turn.is_some() {
            return Err(busy_err);
        }
        std::fs::create_dir_all(&trash).map_err(|e| io_failed("create trash", &e))?;
        // The Log's move is the commit point: from here the session is deleted.
        move_file_noreplace(&log, &tl).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                AgentError::new(ErrorKind::AlreadyExists, "the trash already holds this id")
            } else {
                io_failed("move Log to trash", &e)
            }
        })?;
        if session_dir.exists() && !td.exists() {
            std::fs::rename(&session_dir, &td)
                .map_err(|e| io_failed("move session directory to trash", &e))?;
        }
        store::sync_dir(&trash).map_err(|e| io_failed("sync trash", &e))?;
        sync_parent(&log).map_err(|e| io_failed("sync sessions", &e))?;
        Ok(())
    })
    .await?;
    let forks = forks_of(registry, &sid);
    if p.purge {
        let (l, d) = (trash_log.clone(), trash_session_dir.clone());
        blocking(move || purge_trashed(&l, &d)).await?;
        registry.index_remove(&sid);
        return Ok(DeleteResult {
            session_id: sid,
            outcome: "purged".into(),
            trash_path: None,
            forks,
        });
    }
    registry.index_trashed(&sid, &trash_log)?;
    Ok(DeleteResult {
        session_id: sid,
        outcome: "trashed".into(),
        trash_path: Some(trash_log.display().to_string()),
        forks,
    })
}

/// The shown place of a Log in a store's trash.
fn store_trash_path(registry: &Registry, sid: &str) -> String {
    match registry.store.log_location(sid) {
        Some(l) => format!("{l} (trash)"),
        None => sid.to_string(),
    }
}

/// Moves the session's resource directory (a file of the home whatever the store) to
/// or from `trash/`, if there is one and the destination is free.
fn move_session_dir(from: &Path, to: &Path) -> Result<(), AgentError> {
    if from.exists() && !to.exists() {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_failed("create trash", &e))?;
        }
        std::fs::rename(from, to).map_err(|e| io_failed("move session directory", &e))?;
    }
    Ok(())
}

/// `agentd/delete` on a store that keeps its own trash (a database): the store's
/// move, run by the retiring actor, is the commit point; the resource directory
/// follows as a file of the home.
async fn delete_in_store(
    registry: &Arc<Registry>,
    turns: &crate::turn::TurnManager,
    p: DeleteParams,
    place: store::LogPlace,
) -> Result<DeleteResult, AgentError> {
    let sid = p.session_id.clone();
    let session_dir = registry.home.session_dir(&sid)?;
    let (_, trash_session_dir) = trash_paths(registry, &sid)?;
    let purge = |registry: &Arc<Registry>, sid: &str| {
        let (store, s, d) = (
            registry.store.clone(),
            sid.to_string(),
            trash_session_dir.clone(),
        );
        blocking(move || {
            store.purge(&s)?;
            if d.exists() {
                std::fs::remove_dir_all(&d)
                    .map_err(|e| io_failed("purge session directory", &e))?;
            }
            Ok(())
        })
    };
    match place {
        store::LogPlace::Absent => {
            return Err(AgentError::not_found("no such session")
                .with_details(json!({"session_id": sid}))
                .with_next_actions(&["agentctl ls"]))
        }
        store::LogPlace::Trashed if !p.purge => {
            return Err(AgentError::not_found("the session is already in the trash")
                .with_details(
                    json!({"session_id": sid, "trash_path": store_trash_path(registry, &sid)}),
                )
                .with_next_actions(&[
                    &format!("agentctl restore {sid}"),
                    &format!("agentctl rm {sid} --purge"),
                ]))
        }
        store::LogPlace::Trashed => {
            purge(registry, &sid).await?;
            registry.index_remove(&sid);
            return Ok(DeleteResult {
                forks: forks_of(registry, &sid),
                session_id: sid,
                outcome: "purged".into(),
                trash_path: None,
            });
        }
        store::LogPlace::Live => {}
    }
    if turns.is_running(&sid) {
        return Err(turn_running(&sid));
    }
    let h = registry.get(&sid).await?;
    let (store, s, td) = (
        registry.store.clone(),
        sid.clone(),
        trash_session_dir.clone(),
    );
    let busy_err = turn_running(&sid);
    h.retire(move |st| {
        if st.running_turn.is_some() {
            return Err(busy_err);
        }
        store.trash(&s)?;
        move_session_dir(&session_dir, &td)
    })
    .await?;
    let forks = forks_of(registry, &sid);
    if p.purge {
        purge(registry, &sid).await?;
        registry.index_remove(&sid);
        return Ok(DeleteResult {
            session_id: sid,
            outcome: "purged".into(),
            trash_path: None,
            forks,
        });
    }
    registry.index_set_deleted(&sid, true);
    Ok(DeleteResult {
        trash_path: Some(store_trash_path(registry, &sid)),
        session_id: sid,
        outcome: "trashed".into(),
        forks,
    })
}

/// `agentd/restore` on a store that keeps its own trash.
async fn restore_in_store(
    registry: &Arc<Registry>,
    sid: &str,
    place: store::LogPlace,
) -> Result<RestoreResult, AgentError> {
    match place {
        store::LogPlace::Trashed => {}
        store::LogPlace::Live => {
            return Err(AgentError::new(
                ErrorKind::AlreadyExists,
                "a live session with this id exists",
            )
            .with_details(json!({"session_id": sid})))
        }
        store::LogPlace::Absent => {
            return Err(
                AgentError::not_found("no session with this id in the trash")
                    .with_details(json!({"session_id": sid}))
                    .with_next_actions(&["agentctl ls"]),
            )
        }
    }
    let session_dir = registry.home.session_dir(sid)?;
    let (_, trash_session_dir) = trash_paths(registry, sid)?;
    let (store, s) = (registry.store.clone(), sid.to_string());
    blocking(move || {
        move_session_dir(&trash_session_dir, &session_dir)?;
        store.untrash(&s)
    })
    .await?;
    registry.index_new_log(sid).await?;
    Ok(RestoreResult {
        session_id: sid.to_string(),
        log_path: store::shown_log_path(registry.store.as_ref(), &registry.home, sid)?,
    })
}

/// `agentd/restore`: moves a trashed session back (directory first, then the Log,
/// whose move is again the commit point).
pub async fn restore(registry: &Arc<Registry>, sid: &str) -> Result<RestoreResult, AgentError> {
    session_id::validate(sid)?;
    let (store, s) = (registry.store.clone(), sid.to_string());
    if let Some(place) = blocking(move || store.place(&s).transpose()).await? {
        return restore_in_store(registry, sid, place).await;
    }
    let log = registry.home.log_path(sid)?;
    let session_dir = registry.home.session_dir(sid)?;
    let (trash_log, trash_session_dir) = trash_paths(registry, sid)?;
    if !trash_log.exists() {
        return Err(
            AgentError::not_found("no session with this id in the trash")
                .with_details(json!({"session_id": sid}))
                .with_next_actions(&["agentctl ls"]),
        );
    }
    if log.exists() {
        return Err(AgentError::new(
            ErrorKind::AlreadyExists,
            "a live session with this id exists",
        )
        .with_details(json!({"session_id": sid})));
    }
    let l = log.clone();
    blocking(move || {
        if trash_session_dir.exists() && !session_dir.exists() {
            std::fs::rename(&trash_session_dir, &session_dir)
                .map_err(|e| io_failed("restore session directory", &e))?;
        }
        move_file_noreplace(&trash_log, &l).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                AgentError::new(
                    ErrorKind::AlreadyExists,
                    "a live session with this id exists",
                )
            } else {
                io_failed("restore Log", &e)
            }
        })?;
        sync_parent(&l).map_err(|e| io_failed("sync sessions", &e))?;
        sync_parent(&trash_log).map_err(|e| io_failed("sync trash", &e))
    })
    .await?;
    registry.index_new_log(sid).await?;
    Ok(RestoreResult {
        session_id: sid.to_string(),
        log_path: log.display().to_string(),
    })
}

/// `agentd/preflight`: what a turn with these choices would run with, or the error it
/// would fail with, before anything is created.
pub fn preflight(registry: &Registry, p: PreflightParams) -> Result<PreflightResult, AgentError> {
    let providers = registry.config.providers_config();
    let (provider, model) = providers.split_model(p.provider.as_deref(), p.model.as_deref());
    let pc = providers.resolve(provider.as_deref(), model.as_deref())?;
    let ready = crate::provider::preflight::check(
        &pc,
        model.as_deref().unwrap_or(""),
        registry.config.path.as_deref(),
        &crate::provider::preflight::env_has,
    )?;
    Ok(PreflightResult {
        provider: ready.provider,
        kind: ready.kind.as_str().to_string(),
        model: ready.model,
        api_key_env: ready.api_key_env,
        config_path: registry
            .config
            .path
            .as_ref()
            .map(|p| p.display().to_string()),
    })
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AgentError> + Send + 'static,
) -> Result<T, AgentError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AgentError::internal(format!("blocking task: {e}")))?
}

/// `busy`: a delete waits for the session's turn to end.
fn turn_running(sid: &str) -> AgentError {
    AgentError::new(ErrorKind::Busy, "a turn is running in this session")
        .with_details(json!({"session_id": sid}))
        .with_next_actions(&[&format!("agentctl interrupt {sid}")])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_trimmed_bounded_and_one_line() {
        assert_eq!(check_title("  hello  ").unwrap(), "hello");
        assert!(check_title("   ").is_err());
        let big = "x".repeat(1 << 20);
        let e = check_title(&big).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
        assert!(e.message.contains("1048576 bytes"), "{}", e.message);
        assert!(check_title("a\nb").is_err());
    }
}
