//! opencode sessions → agentd events, from its SQLite database
//! (`~/.local/share/opencode/opencode.db`) or from the JSON `opencode export` prints.
//!
//! Both hold the same shapes: a session row/`info` (id, directory, title, model), its
//! messages (`{id, role, parentID, modelID, providerID, tokens, …}`) and each message's
//! parts (`text`, `reasoning`, `tool` with `state{status,input,output|error}`,
//! `step-start`, `step-finish` with `tokens`, `file`, `patch`, …). opencode writes one
//! assistant message per model step.
//!
//! The database is opened read-only with a busy timeout, and read in short statements
//! (the message list, then one message's parts at a time), so a running opencode is
//! never held up for long and memory stays bounded by one message. Nothing is ever
//! created beside it: a rollback-journal database is read in place; a WAL database
//! without a `-wal` file is opened `immutable` (SQLite would otherwise create `-wal` and
//! `-shm`); a WAL database with one is copied with its `-wal` into a private directory
//! and read there. Which session: the `source_session` the caller names, else the
//! newest session whose directory is the workspace, else the only session.
//!
//! Accounting: the report's "lines" are records here, numbered in read order (the
//! session 1, then each message followed by its parts).

use std::io::BufReader;
use std::path::Path;
use std::time::Duration;

use agentd_proto::{AgentError, ErrorKind};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{json, Map, Value};

use super::sink::{Disposition, Sink};
use super::{
    args_object, emit_session_started, str_of, Format, Header, ImportContext, ImportReport, Source,
};

/// How long a read waits for a writing opencode before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn import(
    src: Source,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let mut head = [0u8; 16];
    let is_db = {
        use std::io::Read;
        let mut f = &src.file;
        f.read_exact(&mut head).is_ok() && &head == b"SQLite format 3\0"
    };
    if is_db {
        import_db(&src.path, out, ctx)
    } else {
        use std::io::Seek;
        let mut src = src;
        src.file.rewind().map_err(super::read_error)?;
        import_export(src, out, ctx)
    }
}

/// A session row or export `info`, and the selection it came from.
fn header_of(info: &Map<String, Value>) -> Header {
    let model = info.get("model");
    Header {
        source_session_id: str_of(info, "id").map(str::to_string),
        cwd: str_of(info, "directory").map(str::to_string),
        title: str_of(info, "title").map(str::to_string),
        model: model
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string),
        provider: model
            .and_then(|m| m.get("providerID"))
            .and_then(Value::as_str)
            .map(str::to_string),
        ts: info.get("time").and_then(|t| t.get("created")).cloned(),
    }
}

fn import_export(
    src: Source,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let path = src.path.clone();
    let doc: Value =
        serde_json::from_reader(BufReader::with_capacity(1 << 20, src.file)).map_err(|e| {
            AgentError::invalid_args(format!("{} is not an opencode export: {e}", path.display()))
        })?;
    let (Some(Value::Object(info)), Some(Value::Array(messages))) =
        (doc.get("info"), doc.get("messages"))
    else {
        return Err(AgentError::invalid_args(format!(
            "{} is not an opencode export: expected {{\"info\": {{…}}, \"messages\": […]}}",
            path.display()
        )));
    };
    let mut conv = Converter::new(Sink::new(out, &ctx.session_id));
    conv.begin(info, &path, ctx)?;
    for m in messages {
        let info = m.get("info").and_then(Value::as_object);
        let parts: Vec<Value> = match m.get("parts") {
            Some(Value::Array(p)) => p.clone(),
            _ => Vec::new(),
        };
        match info {
            Some(info) => conv.message(info, &parts)?,
            None => {
                let no = conv.next_no();
                conv.sink.skip(no, "opencode export message without info");
            }
        }
    }
    conv.finish()
}

/// One session of an opencode database, as discovery lists it.
pub(super) struct SessionSummary {
    pub id: String,
    pub updated_ms: i64,
    /// Bytes of the session's message and part rows.
    pub bytes: u64,
}

/// A read-only connection, and the private copy it reads when it reads one (removed
/// when the connection is dropped, after it).
struct Db {
    conn: Connection,
    _copy: Option<PrivateCopy>,
}

impl std::ops::Deref for Db {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

/// A directory of our own holding a copy of a WAL database and its `-wal`.
struct PrivateCopy(std::path::PathBuf);

impl Drop for PrivateCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Opens an opencode database for reading without creating or changing any file beside
/// it (see the module doc).
fn open_ro(path: &Path) -> Result<Db, AgentError> {
    let err = |e| db_error(path, e);
    let mut header = [0u8; 20];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| super::open_error(path, e))?;
        f.read_exact(&mut header).map_err(|_| {
            AgentError::invalid_args(format!("{} is not an SQLite database", path.display()))
        })?;
    }
    // Bytes 18 and 19 of the header are 2 for a database in WAL mode.
    let wal_mode = header[18] == 2 || header[19] == 2;
    let wal = sidecar(path, "-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let (conn, copy) = if !wal_mode {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        (conn, None)
    } else if wal_len == 0 {
        // Nothing but the main file holds data, and nothing is writing it (a writer keeps
        // a `-wal`): `immutable` reads it without the `-shm` a WAL reader would create.
        let conn = Connection::open_with_flags(
            format!("file:{}?mode=ro&immutable=1", uri_path(path)),
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        (conn, None)
    } else {
        let copy = private_copy(path, &wal)?;
        let db = copy.0.join("opencode.db");
        let conn = Connection::open_with_flags(
            &db,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        (conn, Some(copy))
    };
    conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
    Ok(Db { conn, _copy: copy })
}

fn sidecar(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

/// A path as the file part of an SQLite URI: `%`, `?` and `#` are escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// Copies a WAL database and its `-wal` into a new private directory. A running opencode
/// may checkpoint meanwhile; the copy is taken again until neither file changed during
/// it, and after three tries the import fails with `busy`.
fn private_copy(path: &Path, wal: &Path) -> Result<PrivateCopy, AgentError> {
    use std::os::unix::fs::DirBuilderExt;
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.len(), m.modified().ok()))
            .ok()
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("agentd-import-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| AgentError::storage("making a private copy of the opencode database", &e))?;
    let copy = PrivateCopy(dir);
    for _ in 0..3 {
        let before = (stamp(path), stamp(wal));
        let copied = std::fs::copy(path, copy.0.join("opencode.db"))
            .and_then(|_| std::fs::copy(wal, copy.0.join("opencode.db-wal")));
        if let Err(e) = copied {
            return Err(AgentError::storage(
                "making a private copy of the opencode database",
                &e,
            ));
        }
        if (stamp(path), stamp(wal)) == before {
            return Ok(copy);
        }
    }
    Err(AgentError::new(
        ErrorKind::Busy,
        format!(
            "the opencode database {} kept changing while it was copied (a running opencode is writing); retry, or import its `opencode export` JSON",
            path.display()
        ),
    ))
}

/// The sessions of an opencode database, newest first.
pub(super) fn list_sessions(path: &Path) -> Result<Vec<SessionSummary>, AgentError> {
    let err = |e| db_error(path, e);
    let conn = open_ro(path)?;
    let mut st = conn
        .prepare(
            "SELECT s.id, s.time_updated, \
               (SELECT COALESCE(SUM(LENGTH(m.data)), 0) FROM message m WHERE m.session_id = s.id) + \
               (SELECT COALESCE(SUM(LENGTH(p.data)), 0) FROM part p WHERE p.session_id = s.id) \
             FROM session s ORDER BY s.time_updated DESC",
        )
        .map_err(err)?;
    let rows = st
        .query_map([], |r| {
            Ok(SessionSummary {
                id: r.get(0)?,
                updated_ms: r.get(1)?,
                bytes: r.get::<_, i64>(2)?.max(0) as u64,
            })
        })
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// What identifies one state of an opencode session: the bytes of its rows and a
/// sha256 over every row's id and update time (cheap: no row data is hashed).
pub fn fingerprint(path: &Path, session: &str) -> Result<(u64, String), AgentError> {
    use sha2::{Digest, Sha256};
    let err = |e| db_error(path, e);
    let conn = open_ro(path)?;
    let mut h = Sha256::new();
    let mut bytes = 0u64;
    let updated: Option<i64> = conn
        .query_row(
            "SELECT time_updated FROM session WHERE id = ?1",
            [session],
            |r| r.get(0),
        )
        .optional()
        .map_err(err)?;
    let Some(updated) = updated else {
        return Err(AgentError::not_found(format!(
            "the opencode database {} has no session with the id given",
            path.display()
        )));
    };
    h.update(updated.to_le_bytes());
    for table in ["message", "part"] {
        let mut st = conn
            .prepare(&format!(
                "SELECT id, time_updated, LENGTH(data) FROM {table} WHERE session_id = ?1 ORDER BY id"
            ))
            .map_err(err)?;
        let mut rows = st.query([session]).map_err(err)?;
        while let Some(r) = rows.next().map_err(err)? {
            let id: String = r.get(0).map_err(err)?;
            let t: i64 = r.get(1).map_err(err)?;
            let n: i64 = r.get(2).map_err(err)?;
            h.update(id.as_bytes());
            h.update(t.to_le_bytes());
            bytes += n.max(0) as u64;
        }
    }
    Ok((bytes, hex::encode(h.finalize())))
}

fn db_error(path: &Path, e: rusqlite::Error) -> AgentError {
    let busy = matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        AgentError::new(
            ErrorKind::Busy,
            format!(
                "the opencode database {} stayed locked for {}s (a running opencode is writing); retry, or import its `opencode export` JSON",
                path.display(),
                BUSY_TIMEOUT.as_secs()
            ),
        )
    } else {
        AgentError::invalid_args(format!(
            "reading the opencode database {} failed: {e}",
            path.display()
        ))
    }
}

fn import_db(
    path: &Path,
    out: &mut dyn std::io::Write,
    ctx: &ImportContext,
) -> Result<ImportReport, AgentError> {
    let err = |e| db_error(path, e);
    let conn = open_ro(path)?;
    let info = select_session(&conn, path, ctx)?;
    let sid = str_of(&info, "id").unwrap_or_default().to_string();

    let mut conv = Converter::new(Sink::new(out, &ctx.session_id));
    conv.begin(&info, path, ctx)?;
    // The message list first (ids and small info objects), then one message's parts at
    // a time: each statement is short, so a writer never waits long on this reader.
    let messages: Vec<(String, String)> = {
        let mut st = conn
            .prepare("SELECT id, data FROM message WHERE session_id = ?1 ORDER BY time_created, id")
            .map_err(err)?;
        let rows = st
            .query_map([&sid], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(err)?;
        rows.collect::<Result<_, _>>().map_err(err)?
    };
    let mut parts_st = conn
        .prepare("SELECT id, data FROM part WHERE message_id = ?1 ORDER BY id")
        .map_err(err)?;
    for (mid, data) in messages {
        let parts: Vec<Value> = parts_st
            .query_map([&mid], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(err)?
            .map(|row| {
                row.map(|(id, data)| {
                    let mut v = serde_json::from_str::<Value>(&data).unwrap_or(Value::Null);
                    if let Value::Object(m) = &mut v {
                        m.insert("id".into(), json!(id));
                    }
                    v
                })
            })
            .collect::<Result<_, _>>()
            .map_err(err)?;
        match serde_json::from_str::<Value>(&data) {
            Ok(Value::Object(mut info)) => {
                info.insert("id".into(), json!(mid));
                conv.message(&info, &parts)?;
            }
            _ => {
                let no = conv.next_no();
                conv.sink.skip(
                    no,
                    format!("opencode message {mid} whose data is not a JSON object"),
                );
                for _ in &parts {
                    let no = conv.next_no();
                    conv.sink.skip(no, "part of an unreadable opencode message");
                }
            }
        }
    }
    conv.finish()
}

/// The session to import, as an export-style `info` object.
fn select_session(
    conn: &Db,
    path: &Path,
    ctx: &ImportContext,
) -> Result<Map<String, Value>, AgentError> {
    let err = |e| db_error(path, e);
    const COLS: &str =
        "id, directory, title, version, model, time_created, time_updated, parent_id";
    let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<Map<String, Value>> {
        let model: Option<String> = r.get(4)?;
        let mut m = Map::new();
        m.insert("id".into(), json!(r.get::<_, String>(0)?));
        m.insert("directory".into(), json!(r.get::<_, String>(1)?));
        m.insert("title".into(), json!(r.get::<_, String>(2)?));
        m.insert("version".into(), json!(r.get::<_, String>(3)?));
        m.insert(
            "model".into(),
            model
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(Value::Null),
        );
        m.insert(
            "time".into(),
            json!({"created": r.get::<_, i64>(5)?, "updated": r.get::<_, i64>(6)?}),
        );
        m.insert("parentID".into(), json!(r.get::<_, Option<String>>(7)?));
        Ok(m)
    };
    let found = match (&ctx.source_session, &ctx.workspace) {
        (Some(id), _) => conn
            .query_row(&format!("SELECT {COLS} FROM session WHERE id = ?1"), [id], row)
            .optional()
            .map_err(err)?,
        (None, Some(ws)) => conn
            .query_row(
                &format!("SELECT {COLS} FROM session WHERE directory = ?1 ORDER BY time_updated DESC LIMIT 1"),
                [ws],
                row,
            )
            .optional()
            .map_err(err)?,
        (None, None) => None,
    };
    if let Some(m) = found {
        return Ok(m);
    }
    let (sessions, dirs): (i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), COUNT(DISTINCT directory) FROM session",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(err)?;
    if sessions == 1 && ctx.source_session.is_none() && ctx.workspace.is_none() {
        // The only session is the one meant.
        return conn
            .query_row(&format!("SELECT {COLS} FROM session"), [], row)
            .map_err(err);
    }
    let mut st = conn
        .prepare(&format!(
            "SELECT {COLS} FROM session ORDER BY time_updated DESC LIMIT 10"
        ))
        .map_err(err)?;
    let listed: Vec<String> = st
        .query_map([], row)
        .map_err(err)?
        .filter_map(Result::ok)
        .map(|m| {
            format!(
                "{} ({})",
                str_of(&m, "id").unwrap_or("?"),
                str_of(&m, "directory").unwrap_or("?")
            )
        })
        .collect();
    let what = match (&ctx.source_session, &ctx.workspace) {
        (Some(_), _) => "has no session with the id given".to_string(),
        (None, Some(ws)) => format!("has no session in {ws}"),
        (None, None) if sessions == 0 => "holds no session".to_string(),
        (None, None) if dirs > 1 => {
            format!("holds {sessions} sessions of {dirs} workspaces; say which")
        }
        (None, None) => format!("holds {sessions} sessions; say which"),
    };
    let kind = if ctx.source_session.is_some() {
        ErrorKind::NotFound
    } else {
        ErrorKind::InvalidArgs
    };
    Err(AgentError::new(
        kind,
        format!(
            "the opencode database {} {what}. Newest sessions: {}",
            path.display(),
            if listed.is_empty() {
                "none".to_string()
            } else {
                listed.join(", ")
            }
        ),
    )
    .with_next_actions(&["agentctl import --session <opencode session id> opencode.db"]))
}

/// Turns opencode messages and parts into events; keeps the record count.
struct Converter<'w> {
    sink: Sink<'w>,
    records: u64,
    calls: std::collections::HashSet<String>,
    files: u64,
}

impl<'w> Converter<'w> {
    fn new(sink: Sink<'w>) -> Self {
        Converter {
            sink,
            records: 0,
            calls: Default::default(),
            files: 0,
        }
    }

    fn next_no(&mut self) -> u64 {
        self.records += 1;
        self.records
    }

    fn begin(
        &mut self,
        info: &Map<String, Value>,
        path: &Path,
        ctx: &ImportContext,
    ) -> Result<(), AgentError> {
        self.next_no();
        self.sink.count("session");
        self.sink.account(Disposition::Metadata);
        let h = header_of(info);
        if let Some(parent) = str_of(info, "parentID") {
            self.sink.warn(format!(
                "this opencode session is a subagent session of {parent}; it was imported on its own"
            ));
        }
        emit_session_started(&mut self.sink, Format::Opencode, path, ctx, &h)
    }

    fn message(&mut self, info: &Map<String, Value>, parts: &[Value]) -> Result<(), AgentError> {
        let no = self.next_no();
        let role = str_of(info, "role").unwrap_or("?");
        self.sink.count(format!("message:{}", clip(role)));
        let ts = info.get("time").and_then(|t| t.get("created")).cloned();
        if parts.is_empty() {
            self.sink
                .skip(no, format!("opencode {role} message with no parts"));
        } else {
            self.sink.account(Disposition::Metadata);
        }
        match role {
            "user" => self.user(parts, ts.as_ref()),
            "assistant" => self.assistant(info, parts, ts.as_ref()),
            other => {
                for p in parts {
                    let no = self.next_no();
                    self.count_part(p);
                    self.sink.skip(
                        no,
                        format!(
                            "part of an opencode message with unknown role {:?}",
                            clip(other)
                        ),
                    );
                }
                Ok(())
            }
        }
    }

    fn count_part(&mut self, p: &Value) -> String {
        let t = p
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        self.sink.count(format!("part:{}", clip(&t)));
        t
    }

    fn user(&mut self, parts: &[Value], ts: Option<&Value>) -> Result<(), AgentError> {
        let mut text: Vec<String> = Vec::new();
        let mut used: Vec<u64> = Vec::new();
        let mut first_no = 0;
        for p in parts {
            let no = self.next_no();
            if first_no == 0 {
                first_no = no;
            }
            match self.count_part(p).as_str() {
                "text" if p.get("ignored").and_then(Value::as_bool) != Some(true) => {
                    text.push(
                        p.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    );
                    used.push(no);
                }
                "file" => {
                    self.files += 1;
                    let name = p.get("filename").and_then(Value::as_str).unwrap_or("?");
                    text.push(format!("[file not imported: {}]", clip(name)));
                    used.push(no);
                }
                "text" => self.sink.skip(no, "opencode text part marked ignored"),
                other => self.sink.skip(
                    no,
                    format!(
                        "opencode user part of type {:?} has no agentd equivalent",
                        clip(other)
                    ),
                ),
            }
        }
        let text = text.join("\n");
        if text.is_empty() {
            for no in used {
                self.sink.skip(no, "empty opencode text part");
            }
            return Ok(());
        }
        self.sink.emit(
            "user_message",
            json!({"text": text, "import_line": first_no}),
            ts,
        )?;
        for _ in used {
            self.sink.account(Disposition::Imported);
        }
        Ok(())
    }

    fn assistant(
        &mut self,
        info: &Map<String, Value>,
        parts: &[Value],
        ts: Option<&Value>,
    ) -> Result<(), AgentError> {
        let model = str_of(info, "modelID").unwrap_or("unknown").to_string();
        let provider = str_of(info, "providerID").unwrap_or("opencode").to_string();
        let mut usage_written = false;
        for p in parts {
            let no = self.next_no();
            let pts = p
                .get("time")
                .and_then(|t| t.get("start"))
                .cloned()
                .or_else(|| ts.cloned());
            let pts = pts.as_ref();
            let before = self.sink.written();
            match self.count_part(p).as_str() {
                "step-start" => {
                    self.sink.account(Disposition::Metadata);
                    continue;
                }
                "text" => {
                    let t = p.get("text").and_then(Value::as_str).unwrap_or("");
                    if t.is_empty() {
                        self.sink.skip(no, "empty opencode text part");
                        continue;
                    }
                    self.sink.emit(
                        "assistant_message",
                        json!({"text": t, "import_line": no}),
                        pts,
                    )?;
                }
                "reasoning" => {
                    self.sink.emit(
                        "reasoning",
                        json!({"item": p, "model": model, "dialect": "opencode", "import_line": no}),
                        pts,
                    )?;
                }
                "tool" => self.tool(no, p, pts)?,
                "step-finish" => {
                    if let Some(t) = p.get("tokens") {
                        self.sink.emit(
                            "provider_usage",
                            usage_data(&provider, &model, t, no),
                            pts,
                        )?;
                        usage_written = true;
                    } else {
                        self.sink.skip(no, "opencode step-finish without tokens");
                        continue;
                    }
                }
                t @ ("patch" | "snapshot") => {
                    self.sink.skip(
                        no,
                        format!("opencode {t} part: its own file-state bookkeeping"),
                    );
                    continue;
                }
                t @ ("agent" | "subtask" | "retry" | "compaction" | "file") => {
                    self.sink.skip(
                        no,
                        format!("opencode {t} part: no agentd equivalent in a conversation"),
                    );
                    continue;
                }
                other => {
                    self.sink
                        .skip(no, format!("unknown opencode part type {:?}", clip(other)));
                    continue;
                }
            }
            if !self.sink.account_if_imported(before) {
                self.sink
                    .skip(no, "opencode part with nothing to import (see warnings)");
            }
        }
        if !usage_written {
            if let Some(t) = info.get("tokens") {
                self.sink
                    .emit("provider_usage", usage_data(&provider, &model, t, 0), ts)?;
            }
        }
        Ok(())
    }

    fn tool(&mut self, no: u64, p: &Value, ts: Option<&Value>) -> Result<(), AgentError> {
        let (Some(id), Some(name)) = (
            p.get("callID").and_then(Value::as_str),
            p.get("tool").and_then(Value::as_str),
        ) else {
            self.sink.warn(format!(
                "record {no}: an opencode tool part without callID or tool was dropped"
            ));
            return Ok(());
        };
        if !self.calls.insert(id.to_string()) {
            self.sink.warn(format!(
                "record {no}: a second opencode tool part for call {} was dropped",
                clip(id)
            ));
            return Ok(());
        }
        let state = p.get("state").cloned().unwrap_or(json!({}));
        let args = args_object(state.get("input").cloned().unwrap_or(json!({})));
        self.sink.emit(
            "tool_call",
            json!({"call_id": id, "name": name, "args": args, "import_line": no}),
            ts,
        )?;
        let status = state.get("status").and_then(Value::as_str).unwrap_or("?");
        let (ok, output) = match status {
            "completed" => (
                true,
                state
                    .get("output")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            ),
            "error" => (
                false,
                state
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_string(),
            ),
            // A call opencode never finished (interrupted): closed here so replay stays
            // balanced, and says so.
            other => (
                false,
                format!(
                    "the call did not finish in opencode (status {})",
                    clip(other)
                ),
            ),
        };
        let output = self.sink.cap(output);
        let mut data = json!({"call_id": id, "ok": ok, "output": output, "import_line": no});
        if let Some(code) = state
            .get("metadata")
            .and_then(|m| m.get("exit"))
            .and_then(Value::as_i64)
        {
            data["exit_code"] = json!(code);
        }
        let end = state.get("time").and_then(|t| t.get("end")).cloned();
        self.sink.emit("tool_result", data, end.as_ref().or(ts))?;
        Ok(())
    }

    fn finish(mut self) -> Result<ImportReport, AgentError> {
        let records = self.records;
        if self.files > 0 {
            let n = self.files;
            self.sink.warn(format!(
                "{n} attached file(s) were not imported; a placeholder names each"
            ));
        }
        self.sink.finish(records)
    }
}

/// opencode tokens (`input` excludes the cache) → `provider_usage.data`.
fn usage_data(provider: &str, model: &str, t: &Value, no: u64) -> Value {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let read = n(t.get("cache").and_then(|c| c.get("read")));
    let write = n(t.get("cache").and_then(|c| c.get("write")));
    let input = n(t.get("input")) + read + write;
    let output = n(t.get("output"));
    let reasoning = n(t.get("reasoning"));
    let mut d = json!({
        "provider": provider,
        "model": model,
        "usage": {
            "input_tokens": input,
            "cached_tokens": read,
            "output_tokens": output,
            "reasoning_tokens": reasoning,
            "total_tokens": input + output + reasoning,
        },
    });
    if no > 0 {
        d["import_line"] = json!(no);
    }
    d
}

fn clip(s: &str) -> String {
    agentd_base::text::clip_chars(s, 80)
}
