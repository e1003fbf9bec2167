//! Sessions named by UUID (docs/protocol.md#session-uuids): the one place where every
//! front door turns a UUID into a session and a session into its UUID.
//!
//! A session's own UUID is a function of its id (`agentd_proto::session_uuid`). A session
//! imported from an agent that named it by a UUID (a Codex thread, a Claude Code session)
//! also holds that UUID as its alias, so a client that still knows the source's id finds
//! the agentd session. The alias is recorded in the Log
//! (`session_started.data.imported_from.session_id`) and read into the lineage index
//! (`SessionMeta::imported_uuid`) with the rest of the session's head, so it survives
//! restarts and store copies and is never guessed.
//!
//! When several sessions name the same source UUID (the source was imported again after
//! it changed), the earliest created session that is not deleted holds the alias: a
//! thread id, once given, stays with its session. A UUID that is some session's own UUID
//! always names that session, never another's alias.

use crate::registry::{Registry, SessionMeta};
use agentd_proto::rpc::ResolveResult;
use agentd_proto::session_uuid::{self, Resolved};
use agentd_proto::AgentError;
use serde_json::json;
use std::collections::HashMap;

/// Which session holds each imported UUID, over the whole index (one pass).
pub fn aliases(index: &HashMap<String, SessionMeta>) -> HashMap<&str, &str> {
    let mut held: HashMap<&str, &SessionMeta> = HashMap::new();
    for m in index.values().filter(|m| !m.deleted) {
        let Some(u) = m.imported_uuid.as_deref() else {
            continue;
        };
        let earlier = |o: &SessionMeta| imported_order(m) < imported_order(o);
        match held.get(u) {
            Some(o) if !earlier(o) => {}
            _ => {
                held.insert(u, m);
            }
        }
    }
    if held.is_empty() {
        return HashMap::new();
    }
    held.retain(|u, _| own(index, u).is_none());
    held.into_iter()
        .map(|(u, m)| (u, m.session_id.as_str()))
        .collect()
}

/// What orders the imports of one source: when agentd imported each (a Log written before
/// `imported_at` was recorded falls back to its first event's time), then the session id.
fn imported_order(m: &SessionMeta) -> (&str, &str) {
    let at = m.imported_at.as_deref().unwrap_or(m.created_at.as_str());
    (at, m.session_id.as_str())
}

/// The live session whose own UUID is `uuid` (canonical form).
fn own<'a>(index: &'a HashMap<String, SessionMeta>, uuid: &str) -> Option<&'a SessionMeta> {
    let live = |m: &&SessionMeta| !m.deleted;
    match session_uuid::resolve(uuid)? {
        Resolved::Session(sid) => index.get(&sid).filter(live),
        Resolved::Lookup(u) => index.values().filter(live).find(|m| m.own_uuid == u),
    }
}

/// The UUID a session shows as: the imported UUID it holds, else its own.
pub fn uuid_of(meta: &SessionMeta, aliases: &HashMap<&str, &str>) -> String {
    match meta.imported_uuid.as_deref() {
        Some(u) if aliases.get(u) == Some(&meta.session_id.as_str()) => u.to_string(),
        _ => meta.own_uuid.clone(),
    }
}

/// The session `id` names: a session id, the session's own UUID or the imported UUID it
/// holds (with or without `urn:uuid:`, either case). Deleted sessions are not found.
pub fn resolve(index: &HashMap<String, SessionMeta>, id: &str) -> Option<ResolveResult> {
    let found = |m: &SessionMeta| {
        let a = aliases(index);
        ResolveResult {
            session_id: m.session_id.clone(),
            uuid: uuid_of(m, &a),
        }
    };
    if let Some(m) = index.get(id).filter(|m| !m.deleted) {
        return Some(found(m));
    }
    let u = session_uuid::canonical(id)?;
    if let Some(m) = own(index, &u) {
        return Some(found(m));
    }
    let a = aliases(index);
    let sid = a.get(u.as_str())?;
    index.get(*sid).map(found)
}

/// `agentd/resolve`.
pub fn resolve_method(registry: &Registry, id: &str) -> Result<ResolveResult, AgentError> {
    if id.is_empty() || id.len() > 256 {
        return Err(AgentError::invalid_args("id must be 1..=256 bytes")
            .with_details(json!({"field": "id"})));
    }
    registry.with_index(|i| resolve(i, id)).ok_or_else(|| {
        AgentError::not_found("no session has this id or UUID")
            .with_details(json!({"id": id}))
            .with_next_actions(&["agentctl ls"])
    })
}

/// The UUID of session `sid` as the index knows it (its own when it is not indexed).
pub fn uuid_of_sid(registry: &Registry, sid: &str) -> String {
    registry.with_index(|i| match i.get(sid) {
        Some(m) => uuid_of(m, &aliases(i)),
        None => session_uuid::to_uuid(sid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(sid: &str, created: &str, imported: Option<&str>) -> SessionMeta {
        SessionMeta {
            session_id: sid.into(),
            workspace: "/w".into(),
            title: None,
            created_at: created.into(),
            updated_at: created.into(),
            event_count: 1,
            parent_session_id: None,
            fork_root_session_id: None,
            forked_to_seq: None,
            relation: None,
            parent_call_id: None,
            branch_summary: false,
            running: false,
            archived: false,
            deleted: false,
            own_uuid: session_uuid::to_uuid(sid),
            imported_uuid: imported.map(str::to_string),
            imported_at: None,
            subagent_depth: None,
        }
    }

    const CX: &str = "01a21b45-43d1-7862-b944-095933ffc093";

    #[test]
    fn the_earliest_live_import_holds_the_alias_and_own_ids_win() {
        let first = "20261127T050000-000001";
        let again = "20261127T060000-000002";
        let mut index: HashMap<String, SessionMeta> = [
            meta(again, "2026-11-27T06:00:00Z", Some(CX)),
            meta(first, "2026-11-27T05:00:00Z", Some(CX)),
            meta("20261127T070000-000003", "2026-11-27T07:00:00Z", None),
        ]
        .into_iter()
        .map(|m| (m.session_id.clone(), m))
        .collect();
        let r = resolve(&index, CX).unwrap();
        assert_eq!(r.session_id, first);
        assert_eq!(r.uuid, CX);
        let upper = format!("urn:uuid:{}", CX.to_uppercase());
        assert_eq!(resolve(&index, &upper).unwrap().session_id, first);
        // The later import shows as its own UUID, and that finds it.
        let later = resolve(&index, again).unwrap();
        assert_eq!(later.uuid, session_uuid::to_uuid(again));
        assert_eq!(
            resolve(&index, &later.uuid).unwrap().session_id,
            again.to_string()
        );
        // The holder's own UUID finds it too, and answers with the alias.
        let own_of_first = session_uuid::to_uuid(first);
        assert_eq!(resolve(&index, &own_of_first).unwrap().uuid, CX);

        // Deleted: the next import holds the alias.
        index.get_mut(first).unwrap().deleted = true;
        assert_eq!(resolve(&index, CX).unwrap().session_id, again);
        assert!(resolve(&index, first).is_none());

        // A session whose own id is that UUID: the UUID is its, not an alias.
        index.insert(CX.into(), meta(CX, "2026-11-27T08:00:00Z", None));
        let r = resolve(&index, CX).unwrap();
        assert_eq!(r.session_id, CX);
        assert_eq!(
            resolve(&index, again).unwrap().uuid,
            session_uuid::to_uuid(again)
        );
        assert!(resolve(&index, "0b7e5f4e-34a6-4a0e-9b4b-2c1f1f0a9c11").is_none());
        assert!(resolve(&index, "not-a-session").is_none());
    }

    /// Two imports of one source share its start time (`created_at`), and ids made in the
    /// same second sort by their random suffix: the one agentd imported first holds the
    /// alias, whatever its id.
    #[test]
    fn the_first_imported_holds_the_alias_when_the_source_start_is_shared() {
        let first = "20261127T050000-ffffff";
        let again = "20261127T050000-000001";
        let mut a = meta(first, "2025-01-01T00:00:00Z", Some(CX));
        a.imported_at = Some("2026-11-27T05:00:00.100000Z".into());
        let mut b = meta(again, "2025-01-01T00:00:00Z", Some(CX));
        b.imported_at = Some("2026-11-27T05:00:00.200000Z".into());
        let index: HashMap<String, SessionMeta> = [b, a]
            .into_iter()
            .map(|m| (m.session_id.clone(), m))
            .collect();
        assert_eq!(resolve(&index, CX).unwrap().session_id, first);
        assert_eq!(
            resolve(&index, again).unwrap().uuid,
            session_uuid::to_uuid(again)
        );
    }
}
