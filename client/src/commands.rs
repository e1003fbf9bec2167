//! Runs one parsed command: connect (starting the daemon when allowed), make the call(s),
//! and hand back the result with its human rendering. Printing and exit codes are
//! decided in one place (`finish`), so `--json` output never mixes with human text.

use crate::cli::{Cli, Command, DaemonCmd, PermissionMode};
use crate::daemon::{self, Connected, Target};
use crate::output;
use crate::params::{self, abs_dir, check_sid, simple_request, to_params, turn_params};
use crate::render;
use crate::stream;
use agentd_proto::rpc::{self, method};
use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

pub use crate::output::Outcome;

fn result(value: Value, human: String) -> Outcome {
    Outcome::Result { value, human }
}

/// Runs the command line and returns the process exit code.
pub async fn run(mut cli: Cli) -> i32 {
    let json_mode = cli.json;
    if let Command::Acp(a) = &cli.command {
        let target = Target::resolve(cli.socket.clone(), cli.home.clone());
        return crate::acp::run(target, a).await;
    }
    if let Command::AppServer(a) = &cli.command {
        let target = Target::resolve(cli.socket.clone(), cli.home.clone());
        return crate::app_server::run(target, a).await;
    }
    if let Command::Chat(a) = &cli.command {
        let target = Target::resolve(cli.socket.clone(), cli.home.clone());
        return crate::chat::run(target, a).await;
    }
    if let Command::McpServer(a) = &cli.command {
        let target = Target::resolve(cli.socket.clone(), cli.home.clone());
        return crate::mcp_server::run(target, a).await;
    }
    if let Command::Append(a) = &mut cli.command {
        if a.data == "-" {
            let mut s = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut s) {
                return output::fail(
                    json_mode,
                    &AgentError::invalid_args(format!("cannot read --data from stdin: {e}")),
                );
            }
            a.data = s;
        }
    }
    match execute(&cli).await {
        Ok(Outcome::Result { value, human }) => {
            if json_mode {
                output::json_line(&output::ok_document(value));
            } else {
                output::stdout(&human);
            }
            0
        }
        Ok(Outcome::Printed) => 0,
        Err(e) => output::fail(json_mode, &e),
    }
}

fn cwd() -> Result<std::path::PathBuf, AgentError> {
    std::env::current_dir()
        .map_err(|e| AgentError::invalid_args(format!("cannot read the current directory: {e}")))
}

async fn execute(cli: &Cli) -> Result<Outcome, AgentError> {
    let target = Target::resolve(cli.socket.clone(), cli.home.clone());
    let human = !cli.json;
    let cwd = cwd()?;
    if let Command::Config(crate::cli::ConfigCmd::Init { force, config }) = &cli.command {
        let (v, text) = crate::verbs::config_init(*force, config.as_deref())?;
        return Ok(result(v, text));
    }
    // Everything that can be refused locally is refused before connecting.
    let req = match simple_request(&cli.command, &cwd)? {
        Some(req) => Some(req),
        None => crate::verbs::request(&cli.command, &cwd)?,
    };
    if let Some(req) = req {
        let c = daemon::connect_or_start(&target).await?;
        let mut value = c.conn.call(req.method, req.params.clone()).await?;
        if let Command::Ls(a) = &cli.command {
            if a.all {
                value = list_all(&c.conn, params::list_params(a, &cwd), value).await?;
            }
        }
        let text = render_result(&cli.command, &value, &cwd);
        return Ok(result(value, text));
    }
    match &cli.command {
        Command::Daemon(DaemonCmd::Status) | Command::Status => status(&target).await,
        Command::Daemon(DaemonCmd::Start) => {
            let c = daemon::connect_or_start(&target).await?;
            let mut v = c.hello.clone();
            v["socket"] = json!(target.socket.to_string_lossy());
            v["started"] = json!(c.started.is_some());
            let verb = if c.started.is_some() {
                "started"
            } else {
                "already running"
            };
            let text = format!(
                "agentd {verb}: pid {}, socket {}\n",
                v.get("pid").map(Value::to_string).unwrap_or_default(),
                target.socket.display()
            );
            Ok(result(v, text))
        }
        Command::Daemon(DaemonCmd::Stop) => {
            let v = daemon::stop(&target).await?;
            let text = if v["stopped"] == true {
                format!("agentd stopped (pid {})\n", v["pid"])
            } else {
                "agentd is not running\n".to_string()
            };
            Ok(result(v, text))
        }
        Command::SocketPath => {
            daemon::connect_or_start(&target).await?;
            let s = target.socket.to_string_lossy().into_owned();
            Ok(result(json!({"socket": s}), format!("{s}\n")))
        }
        Command::Log(a) => {
            check_sid(&a.session_id)?;
            let c = daemon::connect_or_start(&target).await?;
            if a.follow {
                stream::log_follow(&c.conn, &a.session_id, a.after_seq, &a.types, human).await?;
                Ok(Outcome::Printed)
            } else {
                let v =
                    stream::log_once(&c.conn, &a.session_id, a.after_seq, &a.types, human).await?;
                if human {
                    Ok(Outcome::Printed)
                } else {
                    Ok(result(v, String::new()))
                }
            }
        }
        Command::Turn(a) if a.queue => {
            let mut p = turn_params(&a.session_id, &a.prompt, &a.turn)?;
            p.queue = Some(true);
            p.wait = Some(false);
            p.client_request_id = Some(agentctl::retry::new_request_id());
            let v = retried_call(&target, method::TURN, to_params(&p)?).await?;
            let text = format!(
                "{} turn {}\n",
                if s(&v, "status") == "queued" {
                    "queued"
                } else {
                    "started"
                },
                s(&v, "turn_id")
            );
            Ok(result(v, text))
        }
        Command::Steer(a) => {
            let p = rpc::SteerParams {
                session_id: params::sid(&a.session_id)?,
                input: a.input.clone(),
                client_request_id: Some(agentctl::retry::new_request_id()),
                images: params::images_param(&a.images)?,
            };
            let v = retried_call(&target, method::STEER, to_params(&p)?).await?;
            let text = format!(
                "steered into turn {} (seq {})\n",
                s(&v, "turn_id"),
                n(&v, "seq")
            );
            Ok(result(v, text))
        }
        Command::Turn(a) => {
            let p = turn_params(&a.session_id, &a.prompt, &a.turn)?;
            // Without --permission-mode the config's `[turns] permission_mode` may say ask.
            let ask = a
                .turn
                .permission_mode
                .is_none_or(|m| m == PermissionMode::Ask);
            let v = retried_turn(&target, None, &a.session_id, p, human, ask).await?;
            Ok(result(v, String::new()))
        }
        Command::Run(a) => {
            let title = a
                .title
                .clone()
                .unwrap_or_else(|| params::title_from_prompt(&a.prompt));
            let create = rpc::CreateParams {
                workspace: abs_dir(a.workspace.as_deref(), &cwd),
                title: Some(title),
                model: a.turn.model.clone(),
                provider: a.turn.provider.clone(),
                sandbox: a.turn.sandbox.to_param(),
                ..Default::default()
            };
            // Provider, model and key are checked before the session exists: a first
            // run without a key leaves nothing behind.
            let check = rpc::PreflightParams {
                model: a.turn.model.clone(),
                provider: a.turn.provider.clone(),
            };
            let (check, create) = (to_params(&check)?, to_params(&create)?);
            let c: Connected = daemon::connect_or_start(&target).await?;
            c.conn.call(method::PREFLIGHT, check).await?;
            let created = c.conn.call(method::CREATE, create).await?;
            let sid = created
                .get("session_id")
                .and_then(Value::as_str)
                .ok_or_else(|| AgentError::internal("agentd/create returned no session_id"))?
                .to_string();
            if human {
                output::stderr(&format!("session {sid}\n"));
            }
            let p = turn_params(&sid, &a.prompt, &a.turn)?;
            // Without --permission-mode the config's `[turns] permission_mode` may say ask.
            let ask = a
                .turn
                .permission_mode
                .is_none_or(|m| m == PermissionMode::Ask);
            let v = retried_turn(&target, Some(c), &sid, p, human, ask)
                .await
                .map_err(|mut e| {
                    // The session exists even though the turn failed: say which.
                    if e.details.is_object() {
                        e.details["session_id"] = json!(sid);
                    }
                    e
                })?;
            Ok(result(v, String::new()))
        }
        Command::Rm(a) => {
            let p = to_params(&crate::verbs::delete_params(a)?)?;
            let c = daemon::connect_or_start(&target).await?;
            let v = c.conn.call(method::DELETE, p).await?;
            let text = render_result(&cli.command, &v, &cwd);
            Ok(result(v, text))
        }
        Command::Export(a) => {
            let p = to_params(&crate::verbs::export_params(a, &cwd)?)?;
            let c = daemon::connect_or_start(&target).await?;
            let v = c.conn.call(method::EXPORT, p).await?;
            let text = render_result(&cli.command, &v, &cwd);
            Ok(result(v, text))
        }
        Command::Service(cmd) => crate::service_cmd::run(cmd, &target).await,
        Command::Completions(a) => crate::service_cmd::completions(a.shell, human),
        Command::Doctor => crate::doctor::run(&target, human).await,
        Command::Import(a) => crate::discover::run(&target, a, human).await,
        Command::Store(crate::cli::StoreCmd::Copy(a)) => store_copy(a).await,
        Command::Mcp(crate::cli::McpCmd::Import(a)) => crate::mcp::import(a),
        Command::Hooks(a) => {
            // Trusts exactly the content shown: the daemon refuses if it changed since.
            let ws = abs_dir(a.workspace.as_deref(), &cwd);
            let c = daemon::connect_or_start(&target).await?;
            let shown = rpc::HooksParams {
                workspace: ws.clone(),
            };
            let shown = c.conn.call(method::HOOKS, to_params(&shown)?).await?;
            let trust = rpc::HooksTrustParams {
                workspace: ws,
                sha256: shown["project"]["sha256"].as_str().map(str::to_string),
            };
            let v = c.conn.call(method::HOOKS_TRUST, to_params(&trust)?).await?;
            let text = format!(
                "trusted {} (sha256 {})\n{}",
                v["project"]["path"].as_str().unwrap_or(""),
                v["project"]["sha256"].as_str().unwrap_or(""),
                render::hooks(&v)
            );
            Ok(result(v, text))
        }
        // Answered above, before connecting (`run` for the long-running bridges,
        // `config init`, and the one-request commands of `simple_request` and
        // `verbs::request`). Listed by name, not `_`, so that a new subcommand does not
        // compile until it has a handler.
        Command::Acp(_)
        | Command::Chat(_)
        | Command::McpServer(_)
        | Command::Config(crate::cli::ConfigCmd::Init { .. })
        | Command::New(_)
        | Command::Ls(_)
        | Command::Show(_)
        | Command::Append(_)
        | Command::Interrupt(_)
        | Command::Reconcile(_)
        | Command::Context(_)
        | Command::Checkpoint(_)
        | Command::Compact(_)
        | Command::Fork(_)
        | Command::Tree(_)
        | Command::Diff(_)
        | Command::Revert(_)
        | Command::Rename(_)
        | Command::Archive(_)
        | Command::Unarchive(_)
        | Command::Restore(_)
        | Command::Search(_)
        | Command::Usage(_)
        | Command::Dequeue(_)
        | Command::Goal(_)
        | Command::AppServer(_)
        | Command::Instructions(_)
        | Command::Models(_)
        | Command::Mcp(crate::cli::McpCmd::List(..) | crate::cli::McpCmd::Tools(..)) => Err(
            AgentError::internal("this command is answered before its handler is reached"),
        ),
    }
}

/// Follows `next_cursor` until the last page; returns one `{"sessions": [...]}`.
async fn list_all(
    conn: &crate::rpc::Conn,
    mut params: rpc::ListParams,
    first: Value,
) -> Result<Value, AgentError> {
    let mut sessions = Vec::new();
    let mut page = first;
    loop {
        if let Some(list) = page.get("sessions").and_then(Value::as_array) {
            sessions.extend(list.iter().cloned());
        }
        let cursor = match page.get("next_cursor").and_then(Value::as_str) {
            Some(c) if params.cursor.as_deref() != Some(c) => c.to_string(),
            _ => break,
        };
        params.cursor = Some(cursor);
        page = conn.call(method::LIST, to_params(&params)?).await?;
    }
    Ok(json!({"sessions": sessions}))
}

async fn status(target: &Target) -> Result<Outcome, AgentError> {
    let c = daemon::connect_existing(target).await?;
    let st = c
        .conn
        .call(method::STATUS, to_params(&rpc::NoParams {})?)
        .await?;
    let mut v = json!({"running": true, "socket": target.socket.to_string_lossy()});
    for src in [&c.hello, &st] {
        if let Some(m) = src.as_object() {
            for (k, val) in m {
                v[k] = val.clone();
            }
        }
    }
    let mut text = String::new();
    for key in [
        "pid",
        "version",
        "socket",
        "home",
        "uptime_s",
        "sessions_total",
        "sessions_loaded",
        "turns_running",
        "connections",
        "durability",
    ] {
        if let Some(val) = v.get(key) {
            let shown = val.as_str().map_or_else(|| val.to_string(), str::to_string);
            let _ = writeln!(text, "{:<18}{shown}", format!("{key}:"));
        }
    }
    Ok(result(v, text))
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn n(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::Null) | None => "-".into(),
        Some(x) => x.to_string(),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn counts(v: Option<&Value>) -> String {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, c)| format!("{k}={c}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The human text for a one-call command's result.
pub fn render_result(cmd: &Command, v: &Value, cwd: &Path) -> String {
    let now = time::OffsetDateTime::now_utc();
    let _ = cwd;
    if let Some(text) = crate::verbs::render(cmd, v) {
        return text;
    }
    match cmd {
        Command::New(_) => format!("{}\n", s(v, "session_id")),
        Command::Ls(a) => {
            let sessions = v
                .get("sessions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if sessions.is_empty() {
                return "no sessions\n".into();
            }
            let mut out = render::session_table(&sessions, now);
            if v.get("next_cursor").is_some_and(|c| !c.is_null()) && !a.all {
                out.push_str("… more sessions; use --all or a larger --limit\n");
            }
            out
        }
        Command::Show(_) => render_show(v),
        Command::Append(_) => {
            let (f, l) = (n(v, "first_seq"), n(v, "last_seq"));
            if f == l {
                format!("appended seq {f}\n")
            } else {
                format!("appended seq {f}..{l}\n")
            }
        }
        Command::Dequeue(a) => format!("withdrew queued turn {}\n", a.turn_id),
        Command::Goal(_) => render::goal(v),
        Command::Interrupt(_) => {
            let closed = v
                .get("reconciled")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if v.get("interrupted").and_then(Value::as_bool) == Some(true) {
                format!("interrupted; closed {closed} orphan tool call(s)\n")
            } else {
                format!("no turn was running; closed {closed} orphan tool call(s)\n")
            }
        }
        Command::Reconcile(a) => {
            let pending = v
                .get("pending")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let recorded = v
                .get("recorded")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let mut out = String::new();
            if pending.is_empty() {
                out.push_str("no orphan tool calls\n");
            }
            for p in &pending {
                let id = p
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{} {}", s(p, "call_id"), s(p, "name")));
                let _ = writeln!(out, "orphan {}", id.trim());
            }
            if a.dry_run {
                out.push_str("dry run: nothing recorded\n");
            } else if !pending.is_empty() || recorded > 0 {
                let _ = writeln!(out, "recorded {recorded} closing result(s)");
            }
            out
        }
        Command::Context(_) => {
            let mut out = pretty(v.get("items").unwrap_or(&Value::Null));
            if let Some(st) = v.get("stats") {
                let _ = writeln!(
                    out,
                    "# items={} function_calls={} outputs={} balanced={} estimated_tokens={} orphans_closed={}",
                    n(st, "items"),
                    n(st, "function_calls"),
                    n(st, "function_call_outputs"),
                    n(st, "balanced"),
                    n(st, "estimated_tokens"),
                    st.get("synthetic_orphan_closures")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                );
            }
            out
        }
        Command::Instructions(_) => render::instructions(v),
        Command::Hooks(_) => render::hooks(v),
        Command::Models(_) => render::models(v),
        Command::Checkpoint(_) => match v.get("view").and_then(Value::as_str) {
            Some(view) if view.ends_with('\n') => view.to_string(),
            Some(view) => format!("{view}\n"),
            None => pretty(v.get("checkpoint").unwrap_or(v)),
        },
        Command::Compact(_) => render_compact(v),
        Command::Fork(_) => render_fork(v),
        Command::Diff(_) => render::diff_result(v),
        Command::Revert(_) => render::revert_result(v),
        Command::Tree(_) => render::tree_result(v),
        Command::Import(_) => match v.get("session_id").and_then(Value::as_str) {
            Some(sid) => {
                let mut facts = Vec::new();
                if let Some(c) = v.get("event_count") {
                    facts.push(format!("{c} events"));
                }
                if let Some(f) = v.get("format").and_then(Value::as_str) {
                    facts.push(format!("from {f}"));
                }
                match v.get("skipped_total").and_then(Value::as_u64) {
                    Some(0) | None => {}
                    Some(n) => facts.push(format!("{n} source lines skipped, see --json")),
                }
                let mut out = if facts.is_empty() {
                    format!("{sid}\n")
                } else {
                    format!("{sid} ({})\n", facts.join("; "))
                };
                // Whatever did not carry over exactly is printed, never left to --json.
                let warnings = v.get("warnings").and_then(Value::as_array);
                if let Some(ws) = warnings.filter(|w| !w.is_empty()) {
                    let _ = writeln!(out, "{} warning(s):", ws.len());
                    for w in ws.iter().take(20) {
                        let _ = writeln!(out, "  {}", w.as_str().unwrap_or("?"));
                    }
                    if ws.len() > 20 {
                        let _ = writeln!(out, "  … {} more, see --json", ws.len() - 20);
                    }
                }
                out
            }
            None => pretty(v),
        },
        _ => pretty(v),
    }
}

fn render_show(v: &Value) -> String {
    let mut out = String::new();
    let mut kv = |k: &str, val: String| {
        let _ = writeln!(out, "{:<20}{val}", format!("{k}:"));
    };
    kv("session", s(v, "session_id").into());
    kv(
        "title",
        v.get("title")
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_string(),
    );
    kv("workspace", s(v, "workspace").into());
    kv("log", s(v, "log_path").into());
    kv("status", s(v, "status").into());
    kv(
        "events",
        format!("{} (last seq {})", n(v, "event_count"), n(v, "last_seq")),
    );
    if v.get("checkpoint_to_seq").is_some_and(|c| !c.is_null()) {
        kv("checkpoint to seq", n(v, "checkpoint_to_seq"));
    }
    kv("types", counts(v.get("event_counts")));
    let list = |key: &str| {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let pending = list("pending_tool_calls");
    kv("pending tool calls", pending.len().to_string());
    for p in &pending {
        let _ = writeln!(out, "  {} {}", s(p, "call_id"), s(p, "name"));
    }
    let unknown = counts(v.get("unknown_types"));
    if !unknown.is_empty() {
        let _ = writeln!(out, "{:<20}{unknown}", "unknown types:");
    }
    let corrupt = list("corrupt_lines");
    if !corrupt.is_empty() {
        let _ = writeln!(out, "{:<20}{}", "corrupt lines:", corrupt.len());
        for c in &corrupt {
            let _ = writeln!(
                out,
                "  line {} (byte {}): {}",
                n(c, "line"),
                n(c, "byte_offset"),
                s(c, "reason")
            );
        }
    }
    let anomalies = list("seq_anomalies");
    if !anomalies.is_empty() {
        let _ = writeln!(out, "{:<20}{}", "seq anomalies:", anomalies.len());
        for a in &anomalies {
            let _ = writeln!(out, "  {a}");
        }
    }
    out
}

fn render_compact(v: &Value) -> String {
    let range = v.get("range").cloned().unwrap_or(Value::Null);
    let span = format!("seq {}..{}", n(&range, "from_seq"), n(&range, "to_seq"));
    if v.get("compactable").and_then(Value::as_bool) == Some(false) {
        return "nothing to compact\n".into();
    }
    let count = n(v, "would_compact_events");
    let tail = n(v, "tail_events");
    if v.get("recorded").and_then(Value::as_bool) == Some(true) {
        format!(
            "compacted {span} ({count} events) into seq {}; last {tail} events stay raw\n",
            n(v, "compaction_seq")
        )
    } else {
        format!("would compact {span} ({count} events); last {tail} events stay raw (dry run, nothing written)\n")
    }
}

fn render_fork(v: &Value) -> String {
    let mut out = String::new();
    let dry = v.get("dry_run").and_then(Value::as_bool) == Some(true)
        || v.get("recorded").and_then(Value::as_bool) == Some(false);
    let _ = writeln!(
        out,
        "{} {}@{} -> {} ({} events)",
        if dry { "would fork" } else { "forked" },
        s(v, "parent_session_id"),
        n(v, "to_seq"),
        s(v, "child_session_id"),
        n(v, "event_count"),
    );
    if v.get("summarize").and_then(Value::as_bool) == Some(true) {
        out.push_str("with a branch summary\n");
    }
    match v.pointer("/files/mode").and_then(Value::as_str) {
        Some("restore") => {
            let count = v
                .pointer("/files/files")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let _ = writeln!(
                out,
                "files: restore ({count} file(s) back to seq {})",
                n(v, "to_seq")
            );
        }
        Some("worktree") => {
            let ws = v.pointer("/files/workspace").and_then(Value::as_str);
            let _ = writeln!(out, "files: worktree at {}", ws.unwrap_or("?"));
        }
        _ => {}
    }
    if dry {
        out.push_str("dry run: nothing written\n");
    }
    out
}

/// `agentd/turn` with one `client_request_id`, resent on the same params whenever the
/// connection is lost or the daemon restarts mid-call (`agentctl::retry`): the daemon
/// answers the turn it already admitted, resumed after a crash, never a second one.
/// A retry reconnects without starting a daemon for its first 5 s (a supervisor or the
/// user is restarting it), then may start one as any command would.
async fn retried_turn(
    target: &daemon::Target,
    first: Option<Connected>,
    sid: &str,
    mut params: rpc::TurnParams,
    human: bool,
    ask: bool,
) -> Result<Value, AgentError> {
    use agentctl::retry;
    params.client_request_id = Some(retry::new_request_id());
    let params = to_params(&params)?;
    let first = std::sync::Mutex::new(first);
    retry::with_retry(retry::Policy::default(), |attempt| {
        let given = first.lock().ok().and_then(|mut f| f.take());
        let params = params.clone();
        async move {
            let c = match given {
                Some(c) => c,
                None if attempt.n == 0 || attempt.since_first > Duration::from_secs(5) => {
                    daemon::connect_or_start(target).await?
                }
                None => daemon::connect_existing(target).await?,
            };
            if attempt.n > 0 && human {
                output::stderr("\n[connection to agentd restored; following the same turn]\n");
            }
            stream::turn(&c.conn, sid, params, human, ask).await
        }
    })
    .await
}

/// One call, resent as it is (with the `client_request_id` the caller gave it) when the
/// daemon is lost mid-call (see [`retried_turn`]).
async fn retried_call(target: &Target, m: &str, params: Value) -> Result<Value, AgentError> {
    use agentctl::retry;
    retry::with_retry(retry::Policy::default(), |attempt| {
        let params = params.clone();
        async move {
            let c = if attempt.n == 0 || attempt.since_first > Duration::from_secs(5) {
                daemon::connect_or_start(target).await?
            } else {
                daemon::connect_existing(target).await?
            };
            c.conn.call(m, params).await
        }
    })
    .await
}

/// Turns a clap parse failure into the contract's JSON error (used with `--json`).
pub fn usage_error(e: &clap::Error) -> AgentError {
    let text = e.to_string();
    // The first paragraph of clap's message, on one line.
    let first = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let first = first.trim_start_matches("error: ").to_string();
    AgentError::new(ErrorKind::InvalidArgs, first)
        .with_details(json!({"usage": text}))
        .with_next_actions(&["agentctl --help"])
}

/// `agentctl store copy`: runs `agentd store copy` (the daemon binary has the store
/// drivers) and relays its one JSON document.
async fn store_copy(a: &crate::cli::StoreCopyArgs) -> Result<Outcome, AgentError> {
    let bin = daemon::agentd_binary();
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.args(["store", "copy", "--from", &a.from, "--to", &a.to]);
    if let Some(s) = &a.session {
        cmd.args(["--session", s]);
    }
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| {
            AgentError::new(
                agentd_proto::ErrorKind::DaemonUnavailable,
                format!("run {}: {e}", bin.display()),
            )
        })?;
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        AgentError::internal(format!(
            "agentd store copy printed no result: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })?;
    if let Some(e) = v.get("error") {
        let kind = e
            .get("kind")
            .and_then(Value::as_str)
            .and_then(agentd_proto::ErrorKind::parse)
            .unwrap_or(agentd_proto::ErrorKind::Internal);
        let msg = e.get("message").and_then(Value::as_str).unwrap_or_default();
        let mut err = AgentError::new(kind, msg.to_string());
        if let Some(d) = e.get("details").filter(|d| d.is_object()) {
            err = err.with_details(d.clone());
        }
        return Err(err);
    }
    let n = v["sessions"].as_array().map_or(0, Vec::len);
    let human = format!(
        "copied {n} session(s), {} events, each verified (line count and SHA-256)\n",
        v["events"]
    );
    Ok(result(v, human))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    fn render(args: &[&str], v: Value) -> String {
        let cli =
            Cli::try_parse_from(std::iter::once("agentctl").chain(args.iter().copied())).unwrap();
        render_result(&cli.command, &v, Path::new("/"))
    }

    #[test]
    fn show_golden() {
        let v = json!({
            "session_id":"s1","workspace":"/w","title":"demo","log_path":"/h/sessions/s1.ndjson",
            "event_count":12,"last_seq":11,"event_counts":{"session_started":1,"tool_call":2,"tool_result":1},
            "pending_tool_calls":[{"call_id":"c2","name":"shell"}],"checkpoint_to_seq":5,
            "corrupt_lines":[{"line":7,"byte_offset":900,"reason":"invalid json"}],
            "unknown_types":{"future":1},"seq_anomalies":[],"status":"idle"
        });
        let want = "\
session:            s1
title:              demo
workspace:          /w
log:                /h/sessions/s1.ndjson
status:             idle
events:             12 (last seq 11)
checkpoint to seq:  5
types:              session_started=1 tool_call=2 tool_result=1
pending tool calls: 1
  c2 shell
unknown types:      future=1
corrupt lines:      1
  line 7 (byte 900): invalid json
";
        assert_eq!(render(&["show", "s1"], v), want);
    }

    #[test]
    fn small_results_read_well() {
        assert_eq!(
            render(&["new"], json!({"session_id":"s1","log_path":"/x"})),
            "s1\n"
        );
        assert_eq!(
            render(
                &["append", "s1", "--type", "x"],
                json!({"first_seq":3,"last_seq":3,"ids":["a"]})
            ),
            "appended seq 3\n"
        );
        assert_eq!(
            render(&["compact", "s1", "--dry-run"], json!({"ok":true,"compactable":true,"recorded":false,
                "tail_events":40,"would_compact_events":60,"range":{"from_seq":0,"to_seq":59}})),
            "would compact seq 0..59 (60 events); last 40 events stay raw (dry run, nothing written)\n"
        );
        assert_eq!(
            render(
                &["fork", "s1"],
                json!({"ok":true,"recorded":true,"dry_run":false,"parent_session_id":"s1",
                "child_session_id":"c1","to_seq":9,"event_count":10,"summarize":false})
            ),
            "forked s1@9 -> c1 (10 events)\n"
        );
        assert_eq!(
            render(
                &["interrupt", "s1"],
                json!({"interrupted":false,"reconciled":[]})
            ),
            "no turn was running; closed 0 orphan tool call(s)\n"
        );
        assert_eq!(render(&["ls"], json!({"sessions":[]})), "no sessions\n");
        assert_eq!(
            render(
                &["checkpoint", "s1"],
                json!({"checkpoint":{},"view":"[SESSION_CHECKPOINT v1]"})
            ),
            "[SESSION_CHECKPOINT v1]\n"
        );
    }

    #[test]
    fn usage_errors_become_invalid_args() {
        let e = Cli::try_parse_from(["agentctl", "--json", "compact"]).unwrap_err();
        let a = usage_error(&e);
        assert_eq!(a.kind, ErrorKind::InvalidArgs);
        assert_eq!(a.kind.exit_code(), 2);
        assert!(!a.message.starts_with("error:"));
        assert!(a.message.contains("<SESSION_ID>"), "{}", a.message);
    }
}
