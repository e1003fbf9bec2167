//! The registry of sessions: loaded actors (a DashMap, loaded lazily, evicted when
//! idle) and the lineage index of every session in the home (docs/protocol.md#sessions-and-events
//! `agentd/list`, docs/history-rules.md#tree).
//!
//! The index is built once at startup from each Log's first line (plus a newline count)
//! and then kept current from the actors' reports ([`SessionObserver`]) after every
//! append, so `agentd/list` and `agentd/tree` never read whole Logs.
//!
//! The registry knows sessions and nothing above them: running turns, the artifact
//! watch and connections belong to the turn manager and the transport.

use crate::config::Config;
use crate::session::{self, ActorEnv, AppendDelta, SessionHandle, SessionObserver, SessionState};
use crate::store::{self, FileStore, Home, LogStore};
use agentd_proto::{AgentError, Event, EventType};
use dashmap::DashMap;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// What the index knows of one session without loading it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionMeta {
    pub session_id: String,
    pub workspace: String,
    pub title: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub event_count: u64,
    pub parent_session_id: Option<String>,
    pub fork_root_session_id: Option<String>,
    pub forked_to_seq: Option<u64>,
    /// `subagent` for a child session the `task` tool created (docs/subagents.md).
    pub relation: Option<String>,
    /// The parent's `task` call that created this subagent.
    pub parent_call_id: Option<String>,
    pub branch_summary: bool,
    pub running: bool,
    /// The latest `session_info` labels include `archived`: hidden from `list` and
    /// workspace trees unless asked for.
    pub archived: bool,
    /// The Log is in `<home>/trash/`: kept in the index only so that the lineage of
    /// its forks can show it; never listed, never loaded.
    pub deleted: bool,
    /// The session's own UUID (`agentd_proto::session_uuid::to_uuid` of its id).
    pub own_uuid: String,
    /// The UUID its source named it by, when it was imported from an agent that names
    /// sessions by UUID (`session_started.data.imported_from.session_id`): the recorded
    /// alias `agentd/resolve` answers to (docs/protocol.md#session-uuids).
    pub imported_uuid: Option<String>,
    /// When agentd imported it (`session_started.data.imported_from.imported_at`, agentd's
    /// clock): what orders several imports of one source. `created_at` is the source's own
    /// start, the same for every import of it.
    pub imported_at: Option<String>,
    /// A subagent's depth below its interactive ancestor (`session_started.data.
    /// subagent_depth`: 1 for a child the `task` tool made, 2 for its child, …).
    pub subagent_depth: Option<u64>,
}

impl SessionMeta {
    fn from_first(sid: &str, first: Option<&Event>) -> SessionMeta {
        let ts = first.map(|e| e.ts.clone()).unwrap_or_default();
        let mut meta = SessionMeta {
            session_id: sid.to_string(),
            workspace: String::new(),
            title: None,
            created_at: ts.clone(),
            updated_at: ts,
            event_count: 0,
            parent_session_id: None,
            fork_root_session_id: None,
            forked_to_seq: None,
            relation: None,
            parent_call_id: None,
            branch_summary: false,
            running: false,
            archived: false,
            deleted: false,
            own_uuid: agentd_proto::session_uuid::to_uuid(sid),
            imported_uuid: None,
            imported_at: None,
            subagent_depth: None,
        };
        if let Some(ev) = first {
            meta.workspace = ev.str_field("workspace").unwrap_or_default().to_string();
            meta.title = ev.str_field("title").map(str::to_string);
            if ev.event_type() == EventType::SessionFork {
                meta.parent_session_id = ev.str_field("parent_session_id").map(str::to_string);
                meta.fork_root_session_id =
                    ev.str_field("fork_root_session_id").map(str::to_string);
                meta.forked_to_seq = ev.data.get("forked_to_seq").and_then(|v| v.as_u64());
            }
            if ev.event_type() == EventType::SessionStarted
                && ev.str_field("relation") == Some("subagent")
            {
                meta.relation = Some("subagent".into());
                meta.parent_session_id = ev.str_field("parent_session_id").map(str::to_string);
                meta.parent_call_id = ev.str_field("parent_call_id").map(str::to_string);
                meta.subagent_depth = ev.data.get("subagent_depth").and_then(|v| v.as_u64());
            }
            if ev.event_type() == EventType::SessionStarted {
                let from = ev.data.get("imported_from");
                let field = |k: &str| from.and_then(|f| f.get(k)).and_then(|v| v.as_str());
                meta.imported_uuid =
                    field("session_id").and_then(agentd_proto::session_uuid::canonical);
                meta.imported_at = field("imported_at").map(str::to_string);
            }
        }
        meta
    }
}

pub struct Registry {
    pub home: Home,
    /// Where the actors load and append Logs.
    pub store: Arc<dyn LogStore>,
    pub config: Config,
    pub started: Instant,
    pub connections: Arc<AtomicU64>,
    /// Leftover temp files removed by the start-up sweep (`crate::sweep`).
    pub leftover_tmp_removed: AtomicU64,
    sessions: DashMap<String, SessionHandle>,
    index: RwLock<HashMap<String, SessionMeta>>,
    /// The store's mark of the last head read ([`LogStore::heads_since`]); the lock also
    /// keeps refreshes one at a time, so an older read never lands after a newer one.
    heads_mark: tokio::sync::Mutex<Option<String>>,
    generation: AtomicU64,
    /// Sessions loaded at least once by this daemon process.
    loaded_once: dashmap::DashSet<String>,
    /// Sessions whose last load failed: their next load answers no read before it ends
    /// ([`SessionObserver::early_reads`]).
    failed_loads: dashmap::DashSet<String>,
    /// Takes over a turn a crash left open (the turn manager installs it; see
    /// [`SessionObserver::open_turn`]): a hook handed down, so the registry never names
    /// the layer above it.
    pub resumer: std::sync::OnceLock<Resumer>,
    /// Starts the turns queued in a session the daemon loads for the first time (the
    /// turn manager installs it; see [`SessionObserver::queued_waiting`]).
    pub queue_starter: std::sync::OnceLock<QueueStarter>,
}

/// See [`Registry::resumer`].
pub type Resumer = Box<dyn Fn(&SessionHandle, &SessionState, &str) -> bool + Send + Sync>;
/// See [`Registry::queue_starter`].
pub type QueueStarter = Box<dyn Fn(&SessionHandle) + Send + Sync>;

impl Registry {
    /// Builds the registry and its lineage index from the Logs in `home`.
    pub fn open(home: Home, config: Config) -> std::io::Result<Arc<Registry>> {
        let store = Arc::new(FileStore { home: home.clone() });
        Registry::open_with(home, config, store)
    }

    /// Builds the registry over `store`; the index comes from the store's heads when it
    /// keeps them, else from the Logs in `home`.
    pub fn open_with(
        home: Home,
        config: Config,
        store: Arc<dyn LogStore>,
    ) -> std::io::Result<Arc<Registry>> {
        let (index, mark) = match store.heads_since(None) {
            None => (build_index(&home)?, None),
            Some(read) => {
                let (heads, mark) = read.map_err(|e| std::io::Error::other(e.message))?;
                let index = heads
                    .into_iter()
                    .map(|(sid, head)| (sid.clone(), meta_from_head(&sid, head)))
                    .collect();
                (index, mark)
            }
        };
        Ok(Arc::new(Registry {
            store,
            home,
            config,
            started: Instant::now(),
            connections: Arc::new(AtomicU64::new(0)),
            leftover_tmp_removed: AtomicU64::new(0),
            sessions: DashMap::new(),
            index: RwLock::new(index),
            heads_mark: tokio::sync::Mutex::new(mark),
            generation: AtomicU64::new(1),
            loaded_once: dashmap::DashSet::new(),
            failed_loads: dashmap::DashSet::new(),
            resumer: std::sync::OnceLock::new(),
            queue_starter: std::sync::OnceLock::new(),
        }))
    }

    /// The actor of `sid`, loading it on first use. `not_found` if no Log exists.
    pub async fn get(self: &Arc<Self>, sid: &str) -> Result<SessionHandle, AgentError> {
        agentd_proto::session_id::validate(sid)?;
        loop {
            let existing = self.sessions.get(sid).map(|h| h.clone());
            if let Some(h) = existing {
                if !h.is_closed() {
                    return Ok(h);
                }
                // An evicted actor is draining; it leaves the map when done, and only
                // then may a new actor open the Log (one writer per Log). Wait for its
                // stop notification; drop its entry in case its task died unreported.
                h.stopped().await;
                self.forget_handle(sid, h.generation);
                continue;
            }
            if !self.store.exists(sid)? {
                return Err(AgentError::not_found("no such session")
                    .with_details(json!({"session_id": sid}))
                    .with_next_actions(&["agentctl ls"]));
            }
            let entry = self.sessions.entry(sid.to_string());
            let handle = entry
                .or_insert_with(|| {
                    let generation = self.generation.fetch_add(1, Ordering::Relaxed);
                    session::spawn(self.actor_env(), sid, generation)
                })
                .clone();
            return Ok(handle);
        }
    }

    /// The running actor of `sid` if it is loaded and takes commands; never loads and
    /// never waits (the transport's direct append path falls back to [`get`](Self::get)).
    pub fn loaded(&self, sid: &str) -> Option<SessionHandle> {
        self.sessions
            .get(sid)
            .map(|h| h.clone())
            .filter(|h| !h.is_closed())
    }

    fn actor_env(self: &Arc<Self>) -> ActorEnv {
        ActorEnv {
            store: self.store.clone(),
            home: self.home.clone(),
            durability: self.config.durability,
            batch_window: self.config.batch_window(),
            idle_evict: std::time::Duration::from_secs(self.config.idle_evict_s),
            observer: self.clone(),
        }
    }

    /// Removes the map entry if it still belongs to the actor of `generation`.
    pub fn forget_handle(&self, sid: &str, generation: u64) {
        self.sessions
            .remove_if(sid, |_, h| h.generation == generation);
    }

    pub fn loaded_count(&self) -> u64 {
        self.sessions.len() as u64
    }

    pub fn is_loaded(&self, sid: &str) -> bool {
        self.sessions.contains_key(sid)
    }

    /// Brings the index entry of `state` up to date (after a durable batch, or a change
    /// of the running turn).
    pub fn note_appended(&self, state: &SessionState, last: Option<&Event>) {
        let Ok(mut index) = self.index.write() else {
            return;
        };
        let meta = index.entry(state.id.clone()).or_insert_with(|| {
            SessionMeta::from_first(&state.id, state.events.first().map(|e| e.event()).as_ref())
        });
        meta.event_count = state.events.len() as u64;
        if let Some(ev) = last {
            meta.updated_at = ev.ts.clone();
        }
        meta.title = state.title().map(str::to_string);
        meta.workspace = state.workspace().to_string();
        meta.running = state.running_turn.is_some();
        meta.archived = is_archived(state.fold.labels());
        meta.deleted = false;
        if state.fold.event_counts().contains_key("branch_summary") {
            meta.branch_summary = true;
        }
    }

    /// Applies a durable batch's summary change; a session the index does not know yet
    /// (a Log put in place by hand) is indexed from its file.
    pub fn apply_delta(&self, sid: &str, delta: &AppendDelta) {
        let known = match self.index.write() {
            Ok(mut index) => match index.get_mut(sid) {
                Some(meta) => {
                    meta.event_count = delta.event_count;
                    meta.updated_at.clone_from(&delta.updated_at);
                    if let Some(t) = &delta.title {
                        meta.title = Some(t.clone());
                    }
                    if let Some(ws) = &delta.workspace {
                        meta.workspace.clone_from(ws);
                    }
                    meta.branch_summary |= delta.branch_summary;
                    if let Some(labels) = &delta.labels {
                        meta.archived = is_archived(labels);
                    }
                    true
                }
                None => false,
            },
            Err(_) => return,
        };
        if !known {
            if let Err(e) = self.index_log(sid) {
                tracing::warn!(session = sid, error = %e, "cannot index Log");
            }
        }
    }

    pub fn set_running(&self, sid: &str, running: bool) {
        if let Ok(mut index) = self.index.write() {
            if let Some(m) = index.get_mut(sid) {
                m.running = running;
            }
        }
    }

    pub fn index_insert(&self, meta: SessionMeta) {
        if let Ok(mut index) = self.index.write() {
            index.insert(meta.session_id.clone(), meta);
        }
    }

    /// Drops `sid` from the index (a purged session).
    pub fn index_remove(&self, sid: &str) -> Option<SessionMeta> {
        self.index.write().ok()?.remove(sid)
    }

    pub fn index_get(&self, sid: &str) -> Option<SessionMeta> {
        self.index.read().ok()?.get(sid).cloned()
    }

    /// Runs `f` over the whole index under its read lock.
    pub fn with_index<T>(&self, f: impl FnOnce(&HashMap<String, SessionMeta>) -> T) -> T {
        match self.index.read() {
            Ok(g) => f(&g),
            Err(p) => f(&p.into_inner()),
        }
    }

    pub fn sessions_total(&self) -> u64 {
        self.with_index(|i| i.values().filter(|m| !m.deleted).count() as u64)
    }

    /// On a store that keeps every Log's head (a database shared by several daemons):
    /// reads the heads that changed since the last read (one query, no events; none
    /// when nothing changed) and indexes those of sessions this daemon has not loaded,
    /// so `list` and `tree` show what other daemons created, appended to or deleted.
    /// Sessions loaded here keep the entry their actor maintains. Does nothing on the
    /// file home, whose index this daemon alone changes. A store that cannot be read
    /// leaves the index as it was (logged): `list` still answers from memory.
    pub async fn refresh_index(self: &Arc<Self>) {
        let mut mark = self.heads_mark.lock().await;
        let (this, since) = (self.clone(), mark.clone());
        let read = crate::filesystem::blocking(move || this.store.heads_since(since.as_deref()));
        let (heads, next) = match read.await {
            Ok(None) => return,
            Ok(Some(Ok(read))) => read,
            Ok(Some(Err(e))) | Err(e) => {
                tracing::warn!(error = %e, "cannot refresh the index from the store");
                return;
            }
        };
        *mark = next;
        let Ok(mut index) = self.index.write() else {
            return;
        };
        for (sid, head) in heads {
            if self.sessions.get(&sid).is_some_and(|h| !h.is_closed()) {
                continue;
            }
            let meta = meta_from_head(&sid, head);
            index.insert(sid, meta);
        }
    }

    /// Reads the head of a newly written Log into the index (create, fork, import).
    pub fn index_log(&self, sid: &str) -> Result<(), AgentError> {
        let meta = meta_from_head(sid, self.store.head(sid)?);
        self.index_insert(meta);
        Ok(())
    }

    /// [`index_log`](Self::index_log) on the blocking pool: it streams the whole Log
    /// (a newline count), which for an imported or forked Log of gigabytes must not hold
    /// a runtime worker.
    pub async fn index_new_log(self: &Arc<Self>, sid: &str) -> Result<(), AgentError> {
        let (this, sid) = (self.clone(), sid.to_string());
        crate::filesystem::blocking(move || this.index_log(&sid)).await?
    }

    /// Reads the head of a Log now in the trash into the index, marked deleted.
    pub fn index_trashed(&self, sid: &str, path: &std::path::Path) -> Result<(), AgentError> {
        let mut meta = meta_from_file(sid, path)
            .map_err(|e| AgentError::internal(format!("index {sid}: {e}")))?;
        meta.deleted = true;
        self.index_insert(meta);
        Ok(())
    }

    /// Marks an indexed session deleted (in a store's trash) or live again.
    pub fn index_set_deleted(&self, sid: &str, deleted: bool) {
        if let Ok(mut index) = self.index.write() {
            if let Some(m) = index.get_mut(sid) {
                m.deleted = deleted;
            }
        }
    }

    /// Records that `sid` was loaded; true the first time in this process.
    pub fn mark_loaded(&self, sid: &str) -> bool {
        self.loaded_once.insert(sid.to_string())
    }

    /// Every loaded actor, for shutdown.
    pub fn loaded_handles(&self) -> Vec<SessionHandle> {
        self.sessions.iter().map(|e| e.value().clone()).collect()
    }
}

impl SessionObserver for Registry {
    fn changed(&self, state: &SessionState, last: Option<&Event>) {
        self.note_appended(state, last);
    }
    fn appended(&self, sid: &str, delta: &AppendDelta) {
        self.apply_delta(sid, delta);
    }
    fn stopped(&self, sid: &str, generation: u64) {
        self.forget_handle(sid, generation);
    }
    fn first_load(&self, sid: &str) -> bool {
        self.mark_loaded(sid)
    }
    fn load_ended(&self, sid: &str, ok: bool) {
        if ok {
            self.failed_loads.remove(sid);
        } else {
            self.failed_loads.insert(sid.to_string());
        }
    }
    fn early_reads(&self, sid: &str) -> bool {
        !self.failed_loads.contains(sid)
    }
    fn open_turn(&self, handle: &SessionHandle, state: &SessionState, turn_id: &str) -> bool {
        match self.resumer.get() {
            Some(r) if self.config.turns.resume_after_crash => r(handle, state, turn_id),
            _ => false,
        }
    }
    fn queued_waiting(&self, handle: &SessionHandle) {
        if let Some(start) = self.queue_starter.get() {
            start(handle);
        }
    }
    fn reopen(
        self: Arc<Self>,
        sid: String,
    ) -> BoxFuture<'static, Result<SessionHandle, AgentError>> {
        Box::pin(async move { self.get(&sid).await })
    }
}

fn meta_from_file(sid: &str, path: &std::path::Path) -> std::io::Result<SessionMeta> {
    Ok(meta_from_head(sid, store::read_head(path)?))
}

fn meta_from_head(sid: &str, head: store::LogHead) -> SessionMeta {
    let mut meta = SessionMeta::from_first(sid, head.first.as_ref());
    meta.event_count = head.line_count;
    if let Some(ts) = head.last_ts {
        meta.updated_at = ts;
    }
    if let Some(t) = head.last_title {
        meta.title = Some(t);
    }
    meta.branch_summary = head.has_branch_summary;
    meta.archived = is_archived(&head.last_labels);
    meta.deleted = head.trashed;
    meta
}

/// The label that marks an archived session (docs/sessions-and-history.md#session-verbs).
pub const ARCHIVED_LABEL: &str = "archived";

pub fn is_archived(labels: &[String]) -> bool {
    labels.iter().any(|l| l == ARCHIVED_LABEL)
}

/// `<home>/trash/`: where deleted sessions' Logs and resources go.
pub fn trash_dir(home: &Home) -> std::path::PathBuf {
    home.root().join("trash")
}

fn build_index(home: &Home) -> std::io::Result<HashMap<String, SessionMeta>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(home.sessions_dir())? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(sid) = name.strip_suffix(".ndjson") else {
            continue;
        };
        if agentd_proto::session_id::validate(sid).is_err() {
            continue;
        }
        paths.push((sid.to_string(), entry.path()));
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let chunk = paths.len().div_ceil(threads).max(1);
    let metas: Vec<SessionMeta> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter_map(|(sid, p)| match meta_from_file(sid, p) {
                            Ok(m) => Some(m),
                            Err(e) => {
                                tracing::warn!(session = %sid, error = %e, "cannot index Log");
                                None
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut index: HashMap<String, SessionMeta> = metas
        .into_iter()
        .map(|m| (m.session_id.clone(), m))
        .collect();
    // Deleted sessions stay known so that their forks' lineage can name them; a live
    // Log of the same id (re-created after the delete) wins.
    if let Ok(dir) = std::fs::read_dir(trash_dir(home)) {
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(sid) = name.to_str().and_then(|n| n.strip_suffix(".ndjson")) else {
                continue;
            };
            if agentd_proto::session_id::validate(sid).is_err() || index.contains_key(sid) {
                continue;
            }
            if let Ok(mut meta) = meta_from_file(sid, &entry.path()) {
                meta.deleted = true;
                index.insert(sid.to_string(), meta);
            }
        }
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentd_proto::EventDraft;
    use std::future::Future;
    use std::io::Write;
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll};
    use std::time::Duration;

    const PATIENCE: Duration = Duration::from_secs(20);

    fn started_line(sid: &str, ws: &std::path::Path) -> Vec<u8> {
        store::event_line(&Event {
            id: agentd_proto::event::new_event_id(),
            session_id: sid.to_string(),
            seq: 0,
            ts: agentd_proto::event::now_ts(),
            kind: EventType::SessionStarted.as_str().into(),
            data: json!({"workspace": ws, "log_format": 1}),
        })
    }

    /// A registry over a temp home holding `n` fresh sessions.
    fn registry_with(n: usize) -> (tempfile::TempDir, Arc<Registry>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(&dir.path().join("home")).unwrap();
        let registry = Registry::open(home, Config::default()).unwrap();
        let sids: Vec<String> = (0..n)
            .map(|_| {
                let sid = agentd_proto::session_id::generate();
                let line = started_line(&sid, dir.path());
                let path = registry.home.log_path(&sid).unwrap();
                store::create_atomic(&path, |f| f.write_all(&line)).unwrap();
                registry.index_log(&sid).unwrap();
                sid
            })
            .collect();
        (dir, registry, sids)
    }

    /// Counts how often the wrapped future is polled: a waiter that spins is polled
    /// again and again, one woken by a notification only when something happened.
    struct Polls<F> {
        inner: Pin<Box<F>>,
        count: Arc<AtomicUsize>,
    }

    impl<F: Future> Future for Polls<F> {
        type Output = F::Output;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            self.count.fetch_add(1, Ordering::SeqCst);
            self.inner.as_mut().poll(cx)
        }
    }

    fn note() -> Vec<EventDraft> {
        vec![EventDraft::new(
            EventType::UserMessage,
            json!({"text": "x"}),
        )]
    }

    /// A `get` that finds the session's actor draining after eviction waits for the
    /// actor's stop notification, then gets a new actor: it neither spins nor gives up.
    #[tokio::test(flavor = "current_thread")]
    async fn get_during_eviction_hand_over_waits_on_the_stop_notification() {
        let (_d, registry, sids) = registry_with(1);
        let sid = sids[0].clone();
        let old = registry.get(&sid).await.unwrap();
        old.append(note(), None).await.unwrap();

        // Retiring closes the actor to new commands; the query queued right behind it
        // keeps it draining until the gate opens.
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
        let h = old.clone();
        let drain = tokio::spawn(async move {
            let retire = h.retire(|_| Ok(()));
            let hold = h.query_blocking(move |_| {
                let _ = entered_tx.send(());
                gate_rx.recv_timeout(PATIENCE).is_ok()
            });
            tokio::join!(retire, hold)
        });
        tokio::time::timeout(PATIENCE, entered_rx)
            .await
            .expect("the draining actor runs the queued query")
            .unwrap();
        assert!(old.is_closed(), "the retired actor takes no new command");

        let polls = Arc::new(AtomicUsize::new(0));
        let (r, s) = (registry.clone(), sid.clone());
        let get = tokio::spawn(Polls {
            inner: Box::pin(async move { r.get(&s).await }),
            count: polls.clone(),
        });
        // Not a wait for a state: the window in which a polling `get` would wake up
        // tens of times. A notified one is polled once and then sleeps.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!get.is_finished(), "no new actor while the old one drains");
        assert!(
            polls.load(Ordering::SeqCst) <= 2,
            "get was polled {} times while waiting",
            polls.load(Ordering::SeqCst)
        );

        gate_tx.send(()).unwrap();
        let (retired, held) = drain.await.unwrap();
        retired.unwrap();
        assert!(held.unwrap(), "the queued query ran to its end");
        let new = tokio::time::timeout(PATIENCE, get)
            .await
            .expect("get completes once the old actor stopped")
            .unwrap()
            .unwrap();
        assert_ne!(new.generation, old.generation);
        assert!(polls.load(Ordering::SeqCst) <= 4);
        let count = new.query(|st| st.events.len()).await.unwrap();
        assert_eq!(
            count, 2,
            "the new actor loaded the Log with the durable append"
        );
    }

    /// Work lent to the blocking pool (`query_blocking`) leaves the runtime's worker to
    /// other sessions: on a single-worker runtime, another session's append is answered
    /// while the first session's query still holds its state.
    #[tokio::test(flavor = "current_thread")]
    async fn a_blocking_query_leaves_the_worker_to_another_sessions_append() {
        let (_d, registry, sids) = registry_with(2);
        let a = registry.get(&sids[0]).await.unwrap();
        let b = registry.get(&sids[1]).await.unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
        let heavy = tokio::spawn(async move {
            a.query_blocking(move |st| {
                let _ = entered_tx.send(());
                (done_rx.recv_timeout(PATIENCE).is_ok(), st.events.len())
            })
            .await
        });
        tokio::time::timeout(PATIENCE, entered_rx)
            .await
            .unwrap()
            .unwrap();
        let res = tokio::time::timeout(PATIENCE, b.append(note(), None))
            .await
            .expect("the other session answers while the query runs")
            .unwrap();
        assert_eq!(res.first_seq, 1);
        done_tx.send(()).unwrap();
        let (saw_append, events) = heavy.await.unwrap().unwrap();
        assert!(
            saw_append,
            "the query ran off the worker, concurrently with the append"
        );
        assert_eq!(events, 1, "the lent state is the session's own");
    }

    /// Indexing a new Log streams it whole, off the runtime's workers: while the Log
    /// is still being read (here a pipe whose writer has not finished), another
    /// session's append is answered on the only worker.
    #[tokio::test(flavor = "current_thread")]
    async fn indexing_a_new_log_leaves_the_worker_to_other_sessions() {
        let (d, registry, sids) = registry_with(1);
        let b = registry.get(&sids[0]).await.unwrap();
        let sid = agentd_proto::session_id::generate();
        let path = registry.home.log_path(&sid).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo touches no other memory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (r, s) = (registry.clone(), sid.clone());
        let index = tokio::spawn(async move { r.index_new_log(&s).await });
        let res = tokio::time::timeout(PATIENCE, b.append(note(), None))
            .await
            .expect("another session answers while the Log is indexed")
            .unwrap();
        assert_eq!(res.first_seq, 1);
        assert!(
            !index.is_finished(),
            "the Log's writer has not finished yet"
        );
        let line = started_line(&sid, d.path());
        let writer = tokio::task::spawn_blocking(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            f.write_all(&line).unwrap();
        });
        writer.await.unwrap();
        tokio::time::timeout(PATIENCE, index)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(registry.index_get(&sid).unwrap().event_count, 1);
    }
}
