//! agentd Logs → the native session files of Claude Code, Codex and pi, so a session can
//! be continued in the peer.
//!
//! The Log's events are first read into a peer-neutral conversation ([`Item`]s: prompts,
//! model steps with their text, reasoning, calls and usage, tool results, compactions),
//! then each writer renders that in its peer's format. Everything that came from the
//! peer keeps the peer's own ids (Claude Code message ids, tool call ids); the session
//! gets a new id ([`ExportContext::session_id`]) so the original is never overwritten.
//! Record ids the peer needs and agentd never had (Claude Code's record `uuid`s, pi's
//! entry ids) are derived from the session id and the record's position, so the same
//! Log exports to the same bytes.
//!
//! Tools agentd ran map to the peer's nearest tool (name and arguments; see
//! [`map_tool`]); a tool with no counterpart keeps its arguments under the labelled name
//! `agentd_<name>`. A tool call of another peer (an imported session exported to a
//! different peer) keeps its own name. agentd's `history_compaction` and an imported
//! compaction note become the peer's compaction record (Claude Code: a `compact_boundary`
//! and its summary; Codex: `compacted`; pi: a `compaction` entry). What cannot map is
//! counted in [`Exported::warnings`]: reasoning of another provider (it is signed for its
//! own model), a call with no result (given an error result), subagent events and notes.

use std::collections::{HashMap, HashSet};

use agentd_proto::{AgentError, Event};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The peers agentd exports to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    ClaudeCode,
    Codex,
    Pi,
}

/// Names `agentd/export` accepts for a peer format.
pub const PEER_FORMATS: [&str; 3] = ["claude-code", "codex", "pi"];

impl Peer {
    pub fn parse(s: &str) -> Option<Peer> {
        match s {
            "claude-code" => Some(Peer::ClaudeCode),
            "codex" => Some(Peer::Codex),
            "pi" => Some(Peer::Pi),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Peer::ClaudeCode => "claude-code",
            Peer::Codex => "codex",
            Peer::Pi => "pi",
        }
    }
}

/// What the caller decided: the new session's id (a UUID) and when the export happens.
#[derive(Debug, Clone)]
pub struct ExportContext {
    /// The new session's id in the peer, a lowercase UUID.
    pub session_id: String,
    /// RFC 3339 UTC time of the export (`…Z`), used for the file name and the header.
    pub now: String,
    /// Codex: the `model_provider` the session is recorded under. Codex refuses to resume
    /// a session under another provider than its configured one, so an install writes
    /// the one its `config.toml` names; `None` is Codex's
    /// default, `openai`.
    pub codex_provider: Option<String>,
}

/// One exported session.
#[derive(Debug, Clone)]
pub struct Exported {
    pub bytes: Vec<u8>,
    /// The file name the peer gives such a session.
    pub file_name: String,
    /// The working directory the session belongs to.
    pub cwd: String,
    pub warnings: Vec<String>,
}

/// A tool call as the export sees it.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: String,
    args: Value,
}

/// A peer-neutral conversation item.
#[derive(Debug, Clone)]
enum Item {
    User {
        text: String,
        ts: String,
    },
    Step {
        msg_id: Option<String>,
        model: String,
        provider: String,
        /// (dialect, item)
        reasoning: Vec<(String, Value)>,
        text: Option<String>,
        partial: bool,
        calls: Vec<Call>,
        usage: Option<Value>,
        ts: String,
    },
    Result {
        call_id: String,
        name: String,
        ok: bool,
        output: String,
        ts: String,
    },
    Compaction {
        summary: String,
        ts: String,
    },
}

/// The conversation of a Log, in order, and the facts the writers need.
struct Conversation {
    cwd: String,
    title: Option<String>,
    model: String,
    items: Vec<Item>,
    warnings: Vec<String>,
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn read(events: &[Event]) -> Result<Conversation, AgentError> {
    let mut c = Conversation {
        cwd: String::new(),
        title: None,
        model: "unknown".into(),
        items: Vec::new(),
        warnings: Vec::new(),
    };
    let mut skipped: HashMap<&str, u64> = HashMap::new();
    // Calls and results are paired as replay pairs them (docs/history-rules.md#replay):
    // a result answers the pending call of its id, and a call reusing an earlier call's
    // id (models that number their calls per step do) is another call. Every peer pairs
    // a result with its call by id alone, so such a call gets an id of its own in the
    // export, `<id>-2`, `<id>-3`, …; the first call of an id keeps it.
    // The export's call ids: every one given so far, and call id → name.
    let mut used: HashSet<String> = HashSet::new();
    let mut names: HashMap<String, String> = HashMap::new();
    // The Log's call id → the export's id of the call awaiting its result.
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut answered: HashSet<String> = HashSet::new();
    // Index of the open step in `items`, while the model's side of it continues.
    let mut open: Option<usize> = None;
    for ev in events {
        let d = &ev.data;
        let ts = ev.ts.clone();
        match ev.kind.as_str() {
            "session_started" | "session_fork" => {
                if c.cwd.is_empty() {
                    c.cwd = s(d, "workspace");
                }
                if let Some(t) = d.get("title").and_then(Value::as_str) {
                    c.title = Some(t.to_string());
                }
                if let Some(m) = d.get("model").and_then(Value::as_str) {
                    c.model = m.to_string();
                }
            }
            "session_info" => c.title = d.get("title").and_then(Value::as_str).map(String::from),
            "user_message" => {
                open = None;
                c.items.push(Item::User {
                    text: s(d, "text"),
                    ts,
                });
            }
            "assistant_message" | "reasoning" | "tool_call" => {
                let msg_id = d.get("message_id").and_then(Value::as_str);
                // A step ends at a second text, at text after a call, or at another API
                // message id; reasoning after text or calls starts a new step too.
                let continues = open.is_some_and(|i| match &c.items[i] {
                    Item::Step {
                        msg_id: m,
                        text,
                        calls,
                        usage,
                        ..
                    } => {
                        usage.is_none()
                            && (msg_id.is_none() || m.as_deref() == msg_id || m.is_none())
                            && match ev.kind.as_str() {
                                "assistant_message" => text.is_none() && calls.is_empty(),
                                "reasoning" => text.is_none() && calls.is_empty(),
                                _ => true,
                            }
                    }
                    _ => false,
                });
                if !continues {
                    c.items.push(Item::Step {
                        msg_id: msg_id.map(String::from),
                        model: d
                            .get("model")
                            .and_then(Value::as_str)
                            .unwrap_or(&c.model)
                            .to_string(),
                        provider: String::new(),
                        reasoning: Vec::new(),
                        text: None,
                        partial: false,
                        calls: Vec::new(),
                        usage: None,
                        ts: ts.clone(),
                    });
                    open = Some(c.items.len() - 1);
                }
                let Some(Item::Step {
                    msg_id: m,
                    reasoning,
                    text,
                    partial,
                    calls,
                    model,
                    ..
                }) = open.map(|i| &mut c.items[i])
                else {
                    continue;
                };
                if m.is_none() {
                    *m = msg_id.map(String::from);
                }
                match ev.kind.as_str() {
                    "assistant_message" => {
                        *text = Some(s(d, "text"));
                        *partial = d["metadata"]["partial"] == true;
                    }
                    "reasoning" => {
                        if let Some(rm) = d.get("model").and_then(Value::as_str) {
                            *model = rm.to_string();
                        }
                        reasoning.push((s(d, "dialect"), d["item"].clone()));
                    }
                    _ => {
                        let logged = s(d, "call_id");
                        let mut id = logged.clone();
                        let mut n = 1;
                        while !used.insert(id.clone()) {
                            n += 1;
                            id = format!("{logged}-{n}");
                        }
                        pending.insert(logged, id.clone());
                        names.insert(id.clone(), s(d, "name"));
                        calls.push(Call {
                            id,
                            name: s(d, "name"),
                            args: d.get("args").cloned().unwrap_or(json!({})),
                        });
                    }
                }
            }
            "provider_usage" => {
                if let Some(Item::Step {
                    usage,
                    provider,
                    model,
                    ..
                }) = open.map(|i| &mut c.items[i])
                {
                    if usage.is_none() {
                        *usage = d.get("usage").cloned();
                        *provider = s(d, "provider");
                        if let Some(m) = d.get("model").and_then(Value::as_str) {
                            *model = m.to_string();
                        }
                    }
                }
            }
            "tool_result" => {
                open = None;
                let logged = s(d, "call_id");
                let Some(id) = pending.remove(&logged) else {
                    let what = if used.contains(&logged) {
                        "second results of one call"
                    } else {
                        "results without a call"
                    };
                    *skipped.entry(what).or_default() += 1;
                    continue;
                };
                answered.insert(id.clone());
                let output = match d.get("output") {
                    Some(Value::String(o)) => o.clone(),
                    Some(Value::Null) | None => s(d, "error"),
                    Some(other) => other.to_string(),
                };
                c.items.push(Item::Result {
                    name: names.get(&id).cloned().unwrap_or_default(),
                    call_id: id,
                    ok: d["ok"] == true,
                    output,
                    ts,
                });
            }
            "history_compaction" => {
                open = None;
                c.items.push(Item::Compaction {
                    summary: s(d, "summary"),
                    ts,
                });
            }
            "imported_note" if d["kind"] == "compaction" => {
                open = None;
                c.items.push(Item::Compaction {
                    summary: s(d, "summary"),
                    ts,
                });
            }
            "imported_note" => *skipped.entry("imported notes").or_default() += 1,
            "subagent_event" => *skipped.entry("subagent events").or_default() += 1,
            "branch_summary" => *skipped.entry("branch summaries").or_default() += 1,
            _ => {}
        }
    }
    if c.cwd.is_empty() {
        return Err(AgentError::invalid_args(
            "the session has no session_started event naming its workspace",
        ));
    }
    // Every call gets a result: the peers' APIs refuse a call without one.
    let mut missing = 0;
    let mut i = 0;
    while i < c.items.len() {
        if let Item::Step { calls, ts, .. } = &c.items[i] {
            let (calls, ts) = (calls.clone(), ts.clone());
            let mut at = i + 1;
            while matches!(c.items.get(at), Some(Item::Result { .. })) {
                at += 1;
            }
            let unanswered: Vec<&Call> =
                calls.iter().filter(|k| !answered.contains(&k.id)).collect();
            for call in unanswered {
                missing += 1;
                answered.insert(call.id.clone());
                c.items.insert(
                    at,
                    Item::Result {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        ok: false,
                        output: "[the call has no result in agentd's Log; it was interrupted]"
                            .into(),
                        ts: ts.clone(),
                    },
                );
                at += 1;
            }
        }
        i += 1;
    }
    if missing > 0 {
        c.warnings.push(format!(
            "{missing} tool call(s) had no result; each was given an error result saying so"
        ));
    }
    let mut skipped: Vec<_> = skipped.into_iter().collect();
    skipped.sort();
    for (what, n) in skipped {
        c.warnings.push(format!(
            "{n} {what} were left out: the peer has no place for them"
        ));
    }
    Ok(c)
}

/// A UUID-shaped id derived from the session id and a position (version 4 layout).
fn derived_uuid(seed: &str, n: u64) -> String {
    let h = Sha256::digest(format!("{seed}/{n}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    agentd_proto::session_uuid::uuid_v4(b)
}

/// agentd tool → the peer's nearest tool: (name, arguments). `None` keeps the call as it
/// is (a tool of another agent); a tool with no counterpart becomes `agentd_<name>`.
fn map_tool(peer: Peer, cwd: &str, name: &str, args: &Value) -> Option<(String, Value)> {
    if !agentd_tool(name) {
        return None;
    }
    let a = |k: &str| args.get(k).cloned().unwrap_or(Value::Null);
    let abs = |p: Value| match p.as_str() {
        Some(p) if !p.starts_with('/') => json!(format!("{}/{p}", cwd.trim_end_matches('/'))),
        _ => p,
    };
    let strip_nulls = |mut v: Value| {
        if let Some(m) = v.as_object_mut() {
            m.retain(|_, x| !x.is_null());
        }
        v
    };
    let mapped = match (peer, name) {
        (Peer::ClaudeCode, "shell") => ("Bash", json!({"command": a("command")})),
        (Peer::ClaudeCode, "read_file") => (
            "Read",
            json!({"file_path": abs(a("path")), "offset": a("offset_line"), "limit": a("limit_lines")}),
        ),
        (Peer::ClaudeCode, "write_file") => (
            "Write",
            json!({"file_path": abs(a("path")), "content": a("content")}),
        ),
        (Peer::ClaudeCode, "edit_file") => (
            "Edit",
            json!({"file_path": abs(a("path")), "old_string": a("old"), "new_string": a("new")}),
        ),
        (Peer::ClaudeCode, "search") => (
            "Grep",
            json!({"pattern": a("pattern"), "path": a("path"), "glob": a("glob")}),
        ),
        (Peer::Codex, "shell") => ("exec_command", json!({"cmd": a("command")})),
        (Peer::Pi, "shell") => (
            "bash",
            json!({"command": a("command"), "timeout": a("timeout_s")}),
        ),
        (Peer::Pi, "read_file") => (
            "read",
            json!({"path": a("path"), "offset": a("offset_line"), "limit": a("limit_lines")}),
        ),
        (Peer::Pi, "write_file") => ("write", json!({"path": a("path"), "content": a("content")})),
        (Peer::Pi, "edit_file") => (
            "edit",
            json!({"path": a("path"), "edits": [{"oldText": a("old"), "newText": a("new")}]}),
        ),
        (Peer::Pi, "search") => (
            "grep",
            json!({"pattern": a("pattern"), "path": a("path"), "glob": a("glob")}),
        ),
        (Peer::Pi, "list_dir") => ("ls", json!({"path": a("path")})),
        _ => return Some((format!("agentd_{name}"), args.clone())),
    };
    Some((mapped.0.to_string(), strip_nulls(mapped.1)))
}

/// The tools agentd itself offers (a call of another agent's tool keeps its name).
fn agentd_tool(name: &str) -> bool {
    matches!(
        name,
        "read_file"
            | "list_dir"
            | "search"
            | "write_file"
            | "edit_file"
            | "shell"
            | "memory_apply"
            | "apply_patch"
    )
}

/// A call id every peer accepts (`[A-Za-z0-9_-]`, Claude's rule, the strictest): kept
/// when it is one, else made one and kept unique.
fn call_id(peer: Peer, id: &str, ids: &mut HashMap<String, String>) -> String {
    if let Some(m) = ids.get(id) {
        return m.clone();
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let out = if peer != Peer::ClaudeCode || (!id.is_empty() && id.chars().all(ok)) {
        id.to_string()
    } else {
        let base: String = id.chars().map(|c| if ok(c) { c } else { '_' }).collect();
        let mut cand = if base.is_empty() {
            "toolu_agentd".to_string()
        } else {
            base
        };
        while ids.values().any(|v| *v == cand) {
            cand.push('_');
        }
        cand
    };
    ids.insert(id.to_string(), out.clone());
    out
}

fn ms(ts: &str) -> i64 {
    time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .unwrap_or(0)
}

/// `…T12:34:56.789Z` with milliseconds, as the peers write times.
fn ts_ms(ts: &str) -> String {
    match time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339) {
        Ok(t) => {
            let t = t.to_offset(time::UtcOffset::UTC);
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millisecond()
            )
        }
        Err(_) => ts.to_string(),
    }
}

fn push_line(out: &mut Vec<u8>, v: &Value) {
    // Serializing a Value cannot fail.
    out.extend_from_slice(v.to_string().as_bytes());
    out.push(b'\n');
}

fn u(usage: &Option<Value>, k: &str) -> u64 {
    usage
        .as_ref()
        .and_then(|x| x.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Writes `events` (one session's Log, in order) in `peer`'s native format.
pub fn export(peer: Peer, events: &[Event], ctx: &ExportContext) -> Result<Exported, AgentError> {
    let conv = read(events)?;
    let mut warnings = conv.warnings.clone();
    let bytes = match peer {
        Peer::ClaudeCode => claude(&conv, ctx, &mut warnings),
        Peer::Codex => codex(&conv, ctx, &mut warnings),
        Peer::Pi => pi(&conv, ctx, &mut warnings),
    };
    let stamp = ts_ms(&ctx.now);
    let file_name = match peer {
        Peer::ClaudeCode => format!("{}.jsonl", ctx.session_id),
        Peer::Codex => format!(
            "rollout-{}-{}.jsonl",
            stamp.get(..19).unwrap_or(&stamp).replace(':', "-"),
            ctx.session_id
        ),
        Peer::Pi => format!(
            "{}_{}.jsonl",
            stamp.replace([':', '.'], "-"),
            ctx.session_id
        ),
    };
    Ok(Exported {
        bytes,
        file_name,
        cwd: conv.cwd,
        warnings,
    })
}

/// Where `peer` looks for a session of `cwd` started at `now`, resolved as the peer
/// does: Claude Code `$CLAUDE_CONFIG_DIR` (else `~/.claude`) `/projects/<cwd, every
/// character but ASCII letters and digits as '-'>/`; Codex `$CODEX_HOME` (else
/// `~/.codex`) `/sessions/YYYY/MM/DD/` (the export's UTC date); pi `$PI_CODING_AGENT_DIR`
/// (else `~/.pi/agent`) `/sessions/--<cwd without its leading '/', '/' and ':' as
/// '-'>--/`.
pub fn install_dir(
    peer: Peer,
    home: &std::path::Path,
    env: &std::collections::BTreeMap<String, String>,
    cwd: &str,
    now: &str,
) -> std::path::PathBuf {
    let root = |var: &str, default: &str| match env.get(var).filter(|v| !v.is_empty()) {
        Some(v) => std::path::PathBuf::from(v),
        None => home.join(default),
    };
    match peer {
        Peer::ClaudeCode => {
            let enc: String = cwd
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            root("CLAUDE_CONFIG_DIR", ".claude")
                .join("projects")
                .join(enc)
        }
        Peer::Codex => {
            let d = ts_ms(now);
            let (y, m, day) = (
                d.get(..4).unwrap_or("1970"),
                d.get(5..7).unwrap_or("01"),
                d.get(8..10).unwrap_or("01"),
            );
            root("CODEX_HOME", ".codex")
                .join("sessions")
                .join(y)
                .join(m)
                .join(day)
        }
        Peer::Pi => {
            let trimmed = cwd.strip_prefix('/').unwrap_or(cwd);
            let enc: String = trimmed
                .chars()
                .map(|c| {
                    if matches!(c, '/' | '\\' | ':') {
                        '-'
                    } else {
                        c
                    }
                })
                .collect();
            root("PI_CODING_AGENT_DIR", ".pi/agent")
                .join("sessions")
                .join(format!("--{enc}--"))
        }
    }
}

/// The command that continues the exported session in the peer, run from `cwd`.
pub fn resume_command(peer: Peer, cwd: &str, id: &str) -> String {
    let q = shell_quote(cwd);
    match peer {
        Peer::ClaudeCode => format!("cd {q} && claude --resume {id}"),
        Peer::Codex => format!("cd {q} && codex resume {id}"),
        Peer::Pi => format!("cd {q} && pi --session {id}"),
    }
}

/// How the peer finds an installed file: none of the three is given an index entry;
/// each finds the file by the lookup it falls back to.
pub fn index_note(peer: Peer) -> &'static str {
    match peer {
        Peer::ClaudeCode => {
            "no index is written: Claude Code finds <session id>.jsonl in the project directory of the working directory"
        }
        Peer::Codex => {
            "the state database is not updated: Codex falls back to finding rollout-*-<id>.jsonl under sessions/"
        }
        Peer::Pi => "pi keeps no index: it lists the session directory and matches the id",
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn other_reasoning(warnings: &mut Vec<String>, n: u64) {
    if n > 0 {
        warnings.push(format!(
            "{n} reasoning item(s) of another provider were left out: they are signed for the model that wrote them"
        ));
    }
}

/// Claude Code: one record per content block, chained by `parentUuid`; results in user
/// records; a compaction is a `compact_boundary` and the summary Claude Code would write.
fn claude(conv: &Conversation, ctx: &ExportContext, warnings: &mut Vec<String>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut parent: Value = Value::Null;
    let mut n = 0u64;
    let mut ids = HashMap::new();
    let mut foreign = 0u64;
    let sid = &ctx.session_id;
    let mut record =
        |out: &mut Vec<u8>, parent: &mut Value, kind: &str, ts: &str, extra: Map<String, Value>| {
            n += 1;
            let uuid = derived_uuid(sid, n);
            let mut r = json!({
                "parentUuid": parent.clone(),
                "isSidechain": false,
                "userType": "external",
                "cwd": conv.cwd,
                "sessionId": sid,
                "version": "agentd",
                "type": kind,
                "uuid": uuid,
                "timestamp": ts_ms(ts),
            });
            for (k, v) in extra {
                r[k] = v;
            }
            push_line(out, &r);
            *parent = json!(uuid);
        };
    let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
    for (i, item) in conv.items.iter().enumerate() {
        match item {
            Item::User { text, ts } => record(
                &mut out,
                &mut parent,
                "user",
                ts,
                obj(json!({"message": {"role": "user", "content": text}})),
            ),
            Item::Step {
                msg_id,
                model,
                reasoning,
                text,
                calls,
                usage,
                ts,
                ..
            } => {
                let id = msg_id.clone().unwrap_or_else(|| {
                    format!(
                        "msg_agentd_{}",
                        &derived_uuid(sid, 1_000_000 + i as u64)[..8]
                    )
                });
                let mut blocks = reasoning_and_text(reasoning, "anthropic", text, &mut foreign);
                for c in calls {
                    let (name, args) = map_tool(Peer::ClaudeCode, &conv.cwd, &c.name, &c.args)
                        .unwrap_or((c.name.clone(), c.args.clone()));
                    blocks.push(json!({"type": "tool_use", "id": call_id(Peer::ClaudeCode, &c.id, &mut ids), "name": name, "input": args}));
                }
                let stop = if calls.is_empty() {
                    "end_turn"
                } else {
                    "tool_use"
                };
                let usage = json!({
                    "input_tokens": u(usage, "input_tokens").saturating_sub(u(usage, "cached_tokens")),
                    "cache_read_input_tokens": u(usage, "cached_tokens"),
                    "cache_creation_input_tokens": 0,
                    "output_tokens": u(usage, "output_tokens"),
                });
                for b in blocks {
                    record(
                        &mut out,
                        &mut parent,
                        "assistant",
                        ts,
                        obj(
                            json!({"message": {"id": id, "type": "message", "role": "assistant",
                            "model": model, "content": [b], "stop_reason": stop,
                            "stop_sequence": null, "usage": usage}}),
                        ),
                    );
                }
            }
            Item::Result {
                call_id: cid,
                ok,
                output,
                ts,
                ..
            } => {
                let id = call_id(Peer::ClaudeCode, cid, &mut ids);
                record(
                    &mut out,
                    &mut parent,
                    "user",
                    ts,
                    obj(json!({"message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": id, "content": output, "is_error": !ok}
                    ]}})),
                );
            }
            Item::Compaction { summary, ts } => {
                let logical = parent.clone();
                parent = Value::Null;
                record(
                    &mut out,
                    &mut parent,
                    "system",
                    ts,
                    obj(
                        json!({"subtype": "compact_boundary", "content": "Conversation compacted",
                        "logicalParentUuid": logical, "level": "info",
                        "compactMetadata": {"trigger": "manual"}}),
                    ),
                );
                record(
                    &mut out,
                    &mut parent,
                    "user",
                    ts,
                    obj(json!({"isCompactSummary": true,
                        "message": {"role": "user", "content": summary}})),
                );
            }
        }
    }
    // A Log with no conversation yet (a new session, or an import whose records were all
    // skipped) still needs one record carrying the session's id and directory: Claude
    // Code and agentd's importer read a transcript from its uuid records, and an empty
    // file, or a title alone, is no transcript.
    if parent.is_null() {
        record(
            &mut out,
            &mut parent,
            "system",
            &ctx.now,
            obj(
                json!({"subtype": "informational", "level": "info", "isMeta": false,
                "content": "Exported from agentd: the session has no conversation yet"}),
            ),
        );
    }
    if let Some(t) = &conv.title {
        push_line(
            &mut out,
            &json!({"type": "custom-title", "customTitle": t, "sessionId": sid}),
        );
    }
    other_reasoning(warnings, foreign);
    out
}

/// Codex: a `session_meta` line, then `response_item`s (messages, function calls and
/// their outputs), `event_msg` token counts and `compacted` summaries.
fn codex(conv: &Conversation, ctx: &ExportContext, warnings: &mut Vec<String>) -> Vec<u8> {
    let mut out = Vec::new();
    let sid = &ctx.session_id;
    let now = ts_ms(&ctx.now);
    let line = |out: &mut Vec<u8>, ts: &str, kind: &str, payload: Value| {
        push_line(
            out,
            &json!({"timestamp": ts_ms(ts), "type": kind, "payload": payload}),
        );
    };
    line(
        &mut out,
        &now,
        "session_meta",
        json!({"id": sid, "session_id": sid, "timestamp": now, "cwd": conv.cwd,
               "originator": "agentd", "cli_version": "0.171.0", "source": "exec",
               "model_provider": ctx.codex_provider.as_deref().unwrap_or("openai")}),
    );
    line(
        &mut out,
        &now,
        "turn_context",
        json!({"cwd": conv.cwd, "approval_policy": "never", "model": conv.model,
               "sandbox_policy": {"type": "workspace-write"}, "summary": "none"}),
    );
    let mut ids = HashMap::new();
    let mut foreign = 0u64;
    for item in &conv.items {
        match item {
            Item::User { text, ts } => line(
                &mut out,
                ts,
                "response_item",
                json!({"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": text}]}),
            ),
            Item::Step {
                msg_id,
                reasoning,
                text,
                calls,
                usage,
                ts,
                ..
            } => {
                foreign += reasoning.len() as u64;
                if let Some(t) = text.as_ref().filter(|t| !t.is_empty()) {
                    let mut m = json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": t, "annotations": []}]});
                    if let Some(id) = msg_id {
                        m["id"] = json!(id);
                    }
                    line(&mut out, ts, "response_item", m);
                }
                for c in calls {
                    let (name, args) = map_tool(Peer::Codex, &conv.cwd, &c.name, &c.args)
                        .unwrap_or((c.name.clone(), c.args.clone()));
                    line(
                        &mut out,
                        ts,
                        "response_item",
                        json!({"type": "function_call", "name": name,
                               "arguments": args.to_string(),
                               "call_id": call_id(Peer::Codex, &c.id, &mut ids)}),
                    );
                }
                if usage.is_some() {
                    let last = json!({
                        "input_tokens": u(usage, "input_tokens"),
                        "cached_input_tokens": u(usage, "cached_tokens"),
                        "output_tokens": u(usage, "output_tokens"),
                        "reasoning_output_tokens": u(usage, "reasoning_tokens"),
                        "total_tokens": u(usage, "total_tokens"),
                    });
                    line(
                        &mut out,
                        ts,
                        "event_msg",
                        json!({"type": "token_count", "info": {"total_token_usage": last, "last_token_usage": last}}),
                    );
                }
            }
            Item::Result {
                call_id: cid,
                output,
                ok,
                ts,
                ..
            } => {
                // Codex reads an exec output's exit code from its header; an agentd
                // failure without one says so in the same words.
                let output = if !ok
                    && !output.contains("Process exited with code ")
                    && !output.contains("Exit code: ")
                {
                    format!("Process exited with code 1\nOutput:\n{output}")
                } else {
                    output.clone()
                };
                line(
                    &mut out,
                    ts,
                    "response_item",
                    json!({"type": "function_call_output",
                           "call_id": call_id(Peer::Codex, cid, &mut ids), "output": output}),
                );
            }
            Item::Compaction { summary, ts } => {
                line(&mut out, ts, "compacted", json!({"message": summary}));
            }
        }
    }
    other_reasoning(warnings, foreign);
    out
}

/// pi (session format v3): a header, then entries chained by `id`/`parentId`.
fn pi(conv: &Conversation, ctx: &ExportContext, warnings: &mut Vec<String>) -> Vec<u8> {
    let mut out = Vec::new();
    let sid = &ctx.session_id;
    push_line(
        &mut out,
        &json!({"type": "session", "version": 3, "id": sid, "timestamp": ts_ms(&ctx.now), "cwd": conv.cwd}),
    );
    let mut parent: Value = Value::Null;
    let n = std::cell::Cell::new(0u64);
    let entry = |out: &mut Vec<u8>, parent: &mut Value, ts: &str, mut e: Value| {
        n.set(n.get() + 1);
        let id = derived_uuid(sid, n.get())[..8].to_string();
        e["id"] = json!(id);
        e["parentId"] = parent.clone();
        e["timestamp"] = json!(ts_ms(ts));
        push_line(out, &e);
        *parent = json!(id);
    };
    let mut ids = HashMap::new();
    let mut foreign = 0u64;
    let mut names: HashMap<String, String> = HashMap::new();
    if let Some(t) = &conv.title {
        let ts = conv
            .items
            .first()
            .map(|i| match i {
                Item::User { ts, .. }
                | Item::Step { ts, .. }
                | Item::Result { ts, .. }
                | Item::Compaction { ts, .. } => ts.clone(),
            })
            .unwrap_or_else(|| ctx.now.clone());
        entry(
            &mut out,
            &mut parent,
            &ts,
            json!({"type": "session_info", "name": t}),
        );
    }
    for item in &conv.items {
        match item {
            Item::User { text, ts } => entry(
                &mut out,
                &mut parent,
                ts,
                json!({"type": "message", "message": {"role": "user",
                    "content": [{"type": "text", "text": text}], "timestamp": ms(ts)}}),
            ),
            Item::Step {
                model,
                provider,
                reasoning,
                text,
                partial,
                calls,
                usage,
                ts,
                ..
            } => {
                let mut content = reasoning_and_text(reasoning, "pi", text, &mut foreign);
                for c in calls {
                    let (name, args) = map_tool(Peer::Pi, &conv.cwd, &c.name, &c.args)
                        .unwrap_or((c.name.clone(), c.args.clone()));
                    let id = call_id(Peer::Pi, &c.id, &mut ids);
                    names.insert(id.clone(), name.clone());
                    content.push(
                        json!({"type": "toolCall", "id": id, "name": name, "arguments": args}),
                    );
                }
                let stop = match (partial, calls.is_empty()) {
                    (true, _) => "error",
                    (false, true) => "stop",
                    (false, false) => "toolUse",
                };
                let cached = u(usage, "cached_tokens");
                let input = u(usage, "input_tokens").saturating_sub(cached);
                let output = u(usage, "output_tokens");
                entry(
                    &mut out,
                    &mut parent,
                    ts,
                    json!({"type": "message", "message": {"role": "assistant", "content": content,
                        "api": "openai-responses",
                        "provider": if provider.is_empty() { "agentd" } else { provider },
                        "model": model,
                        "usage": {"input": input, "output": output, "cacheRead": cached,
                            "cacheWrite": 0, "totalTokens": input + cached + output,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                        "stopReason": stop, "timestamp": ms(ts)}}),
                );
            }
            Item::Result {
                call_id: cid,
                name,
                ok,
                output,
                ts,
            } => {
                let id = call_id(Peer::Pi, cid, &mut ids);
                let tool = names.get(&id).cloned().unwrap_or_else(|| name.clone());
                entry(
                    &mut out,
                    &mut parent,
                    ts,
                    json!({"type": "message", "message": {"role": "toolResult", "toolCallId": id,
                        "toolName": tool, "content": [{"type": "text", "text": output}],
                        "isError": !ok, "timestamp": ms(ts)}}),
                );
            }
            Item::Compaction { summary, ts } => {
                // pi keeps the entries after `firstKeptEntryId`; agentd's compaction kept
                // none of its own range, so the next entry is the first kept.
                let first_kept = derived_uuid(sid, n.get() + 2)[..8].to_string();
                entry(
                    &mut out,
                    &mut parent,
                    ts,
                    json!({"type": "compaction", "summary": summary,
                        "firstKeptEntryId": first_kept, "tokensBefore": 0}),
                );
            }
        }
    }
    other_reasoning(warnings, foreign);
    out
}

/// An assistant message's opening blocks in a peer's format: the reasoning recorded in
/// the peer's own dialect (any other is counted in `foreign`, since the peer could not
/// read it), then the text.
fn reasoning_and_text(
    reasoning: &[(String, Value)],
    dialect: &str,
    text: &Option<String>,
    foreign: &mut u64,
) -> Vec<Value> {
    let mut blocks = Vec::new();
    for (d, item) in reasoning {
        if d == dialect {
            blocks.push(item.clone());
        } else {
            *foreign += 1;
        }
    }
    if let Some(t) = text.as_ref().filter(|t| !t.is_empty()) {
        blocks.push(json!({"type": "text", "text": t}));
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, data: Value) -> Event {
        Event {
            id: "e".into(),
            session_id: "s".into(),
            seq: 0,
            ts: "2026-11-27T04:30:56.781000Z".into(),
            kind: kind.into(),
            data,
        }
    }

    fn ctx() -> ExportContext {
        ExportContext {
            session_id: "0b5e8a8e-1c1f-4c57-9a55-5f2f4a3b2c1d".into(),
            now: "2026-11-27T05:00:00.000000Z".into(),
            codex_provider: None,
        }
    }

    #[test]
    fn agentd_tools_map_to_the_peers_nearest_and_the_rest_are_labelled() {
        let args = json!({"path": "src/a.rs", "offset_line": null, "limit_lines": 5});
        assert_eq!(
            map_tool(Peer::ClaudeCode, "/w", "read_file", &args),
            Some((
                "Read".into(),
                json!({"file_path": "/w/src/a.rs", "limit": 5})
            ))
        );
        assert_eq!(
            map_tool(Peer::Codex, "/w", "shell", &json!({"command": "ls"})),
            Some(("exec_command".into(), json!({"cmd": "ls"})))
        );
        assert_eq!(
            map_tool(Peer::Codex, "/w", "read_file", &args),
            Some(("agentd_read_file".into(), args.clone()))
        );
        assert_eq!(map_tool(Peer::Pi, "/w", "Bash", &json!({})), None);
    }

    #[test]
    fn a_call_without_result_gets_an_error_result_and_a_warning() {
        let evs = vec![
            ev("session_started", json!({"workspace": "/w"})),
            ev("user_message", json!({"text": "hi"})),
            ev(
                "tool_call",
                json!({"call_id": "c|1", "name": "shell", "args": {"command": "ls"}}),
            ),
        ];
        let x = export(Peer::ClaudeCode, &evs, &ctx()).unwrap();
        let text = String::from_utf8(x.bytes).unwrap();
        assert!(text.contains("\"tool_use_id\":\"c_1\""), "{text}");
        assert!(text.contains("\"is_error\":true"), "{text}");
        assert_eq!(x.warnings.len(), 1, "{:?}", x.warnings);
        assert_eq!(x.file_name, "0b5e8a8e-1c1f-4c57-9a55-5f2f4a3b2c1d.jsonl");
    }

    /// Imports an exported file back, the workspace taken from the file alone.
    fn reimport(peer: Peer, bytes: &[u8]) -> Result<Vec<Event>, AgentError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exported.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let format = match peer {
            Peer::ClaudeCode => crate::Format::Claude,
            Peer::Codex => crate::Format::Codex,
            Peer::Pi => crate::Format::Pi,
        };
        let ctx = crate::ImportContext {
            session_id: "back".into(),
            agentd_version: "test".into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        crate::import(Some(format), &path, &mut out, &ctx)?;
        Ok(out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect())
    }

    /// A Log with no conversation (found by the `export_roundtrip` fuzz target: an
    /// import whose entries were all skipped) once exported to Claude Code as an empty
    /// file, which no importer takes. Every peer's export of it imports back as the same
    /// empty session in the same directory, with its title where the peer keeps one.
    #[test]
    fn a_log_without_conversation_exports_to_a_file_that_imports_back() {
        for title in [None, Some("Visite guidée — 日本語")] {
            let mut data = json!({"workspace": "/w/proj"});
            if let Some(t) = title {
                data["title"] = json!(t);
            }
            let evs = vec![ev("session_started", data)];
            for peer in [Peer::ClaudeCode, Peer::Codex, Peer::Pi] {
                let x = export(peer, &evs, &ctx()).unwrap();
                let back = reimport(peer, &x.bytes)
                    .unwrap_or_else(|e| panic!("{peer:?} {title:?}: {e:?}"));
                let kinds: Vec<&str> = back.iter().map(|e| e.kind.as_str()).collect();
                assert_eq!(kinds[0], "session_started", "{peer:?} {title:?}");
                assert!(
                    kinds[1..].iter().all(|k| *k == "session_info"),
                    "{peer:?} {title:?}: no conversation appears: {kinds:?}"
                );
                assert_eq!(back[0].data["workspace"], "/w/proj", "{peer:?} {title:?}");
                // Codex's files have no place for a title (docs/moving-sessions.md).
                let kept = if peer == Peer::Codex { None } else { title };
                let back_title = back
                    .iter()
                    .rev()
                    .find_map(|e| e.data.get("title").and_then(Value::as_str));
                assert_eq!(back_title, kept, "{peer:?}");
                let again = export(peer, &back, &ctx()).unwrap();
                assert_eq!(again.bytes, x.bytes, "{peer:?} {title:?}: a fixed point");
            }
        }
    }

    /// The calls (id, name, arguments) and results (call id, output, ok) of a Log.
    #[allow(clippy::type_complexity)]
    fn calls_and_results(
        evs: &[Event],
    ) -> (Vec<(String, String, Value)>, Vec<(String, String, bool)>) {
        let calls = evs
            .iter()
            .filter(|e| e.kind == "tool_call")
            .map(|e| {
                (
                    s(&e.data, "call_id"),
                    s(&e.data, "name"),
                    e.data["args"].clone(),
                )
            })
            .collect();
        let results = evs
            .iter()
            .filter(|e| e.kind == "tool_result")
            .map(|e| {
                (
                    s(&e.data, "call_id"),
                    s(&e.data, "output"),
                    e.data["ok"] == true,
                )
            })
            .collect();
        (calls, results)
    }

    /// A model that numbers its calls per step reuses ids (`call_0` in every step), and
    /// replay takes a reused id for another call. The export once paired results by id
    /// across the whole Log (found by the `export_roundtrip` fuzz target, reproducer
    /// fuzz/regressions/export_roundtrip/claude-tool-calls): the second call's result
    /// was dropped as a second result of the first, an unanswered call reusing an
    /// answered id got no result, and Claude Code's file held two `tool_use`s of one id,
    /// of which the importer (like Claude Code) keeps the first. Every call now comes
    /// back with its own result, the first of an id keeping it.
    #[test]
    fn a_reused_call_id_is_another_call_with_its_own_result() {
        let call = |id: &str, cmd: &str| {
            ev(
                "tool_call",
                json!({"call_id": id, "name": "shell", "args": {"command": cmd}}),
            )
        };
        let result = |id: &str, out: &str| {
            ev(
                "tool_result",
                json!({"call_id": id, "ok": true, "output": out}),
            )
        };
        let evs = vec![
            ev("session_started", json!({"workspace": "/w"})),
            ev(
                "user_message",
                json!({"text": "list the files, then say where we are"}),
            ),
            call("call_0", "ls"),
            result("call_0", "a.txt\n"),
            call("call_0", "pwd"),
            result("call_0", "/w\n"),
            ev("assistant_message", json!({"text": "a.txt, in /w"})),
            ev("user_message", json!({"text": "show a.txt"})),
            call("call_0", "cat a.txt"),
            // Interrupted: no result; a stray result of no call follows.
            result("zz", "stray"),
            ev("user_message", json!({"text": "go on"})),
        ];
        let interrupted = "[the call has no result in agentd's Log; it was interrupted]";
        for peer in [Peer::ClaudeCode, Peer::Codex, Peer::Pi] {
            let x = export(peer, &evs, &ctx()).unwrap();
            let back = reimport(peer, &x.bytes).unwrap_or_else(|e| panic!("{peer:?}: {e:?}"));
            let (name, key) = match peer {
                Peer::ClaudeCode => ("Bash", "command"),
                Peer::Codex => ("exec_command", "cmd"),
                Peer::Pi => ("bash", "command"),
            };
            // Codex keeps a failure only as an exec output's exit-code header.
            let interrupted = match peer {
                Peer::Codex => format!("Process exited with code 1\nOutput:\n{interrupted}"),
                _ => interrupted.to_string(),
            };
            let (calls, results) = calls_and_results(&back);
            let want: Vec<(String, String, Value)> = [
                ("call_0", "ls"),
                ("call_0-2", "pwd"),
                ("call_0-3", "cat a.txt"),
            ]
            .iter()
            .map(|(id, cmd)| (id.to_string(), name.to_string(), json!({key: cmd})))
            .collect();
            assert_eq!(calls, want, "{peer:?}: the calls");
            assert_eq!(
                results,
                [
                    ("call_0".to_string(), "a.txt\n".to_string(), true),
                    ("call_0-2".to_string(), "/w\n".to_string(), true),
                    ("call_0-3".to_string(), interrupted, false),
                ],
                "{peer:?}: the results"
            );
            assert_eq!(
                x.warnings,
                [
                    "1 tool call(s) had no result; each was given an error result saying so",
                    "1 results without a call were left out: the peer has no place for them"
                ],
                "{peer:?}"
            );
            let again = export(peer, &back, &ctx()).unwrap();
            assert_eq!(
                calls_and_results(&reimport(peer, &again.bytes).unwrap()),
                (calls, results),
                "{peer:?}: a fixed point"
            );
        }
    }

    #[test]
    fn file_names_are_the_peers() {
        let evs = vec![ev("session_started", json!({"workspace": "/w"}))];
        assert_eq!(
            export(Peer::Codex, &evs, &ctx()).unwrap().file_name,
            "rollout-2026-11-27T05-00-00-0b5e8a8e-1c1f-4c57-9a55-5f2f4a3b2c1d.jsonl"
        );
        assert_eq!(
            export(Peer::Pi, &evs, &ctx()).unwrap().file_name,
            "2026-11-27T05-00-00-000Z_0b5e8a8e-1c1f-4c57-9a55-5f2f4a3b2c1d.jsonl"
        );
    }
}
