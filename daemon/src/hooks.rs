//! Hooks (docs/hooks.md): user commands run on a turn's lifecycle events, in the shape
//! Claude Code users know.
//!
//! - Where they come from: `[[hooks.EVENT]]` tables of the daemon config, and the
//!   workspace's `.agentd/hooks.toml` (same shape) once the user trusted that file's
//!   exact content for that workspace (`agentd/hooks_trust`, kept in
//!   `<home>/hooks-trust.json`). An untrusted project hook is recorded as skipped, once
//!   per turn, and never runs.
//! - How they run: `bash -c COMMAND` in the workspace, under the turn's command sandbox
//!   (the same policy as `shell`), in a process group of their own; a timeout or an
//!   interrupt kills the group (and, sandboxed, the command's cgroup). The hook reads one
//!   JSON object on stdin with Claude Code's field names.
//! - What they answer: exit 0 allows (stdout is context for the model after
//!   `session_start` and `user_prompt_submit`); exit 2 blocks with stderr as the reason;
//!   a JSON answer `{"decision":"block","reason":…}` on stdout blocks too; any other
//!   exit, a timeout or a sandbox failure is a recorded failure that blocks nothing.
//! - What is recorded: one `hook_run` event per run (docs/log-format.md#event-types), in
//!   the same append as what it judged when there is one (the refused call's
//!   `tool_result`, the turn's `turn_started` or `turn_ended`).

use crate::tools::{self, ToolContext};
use agentd_base::text::{clip_chars, sha256_hex};
use agentd_proto::{EventDraft, EventType};
use regex::Regex;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Seconds a hook may run when its entry does not say (Claude Code's default).
pub const DEFAULT_TIMEOUT_S: u64 = 60;
/// Longest `timeout_s` accepted.
pub const MAX_TIMEOUT_S: u64 = 600;
/// The project file, relative to the workspace.
pub const PROJECT_FILE: &str = ".agentd/hooks.toml";
/// The trust ledger, relative to the home.
pub const TRUST_FILE: &str = "hooks-trust.json";
/// Bytes of a hook's stdout or stderr kept; the rest is discarded (and said).
const MAX_CAPTURE: usize = 256 * 1024;
/// Characters of a reason, a context or a failure's stderr recorded.
const MAX_TEXT: usize = 10_000;
/// After the hook exited: how long background processes may hold its pipes.
const LINGER_AFTER_EXIT: Duration = Duration::from_millis(250);
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(200);

/// One `[[hooks.EVENT]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// A regex the whole subject must match: the tool name (MCP tools as
    /// `mcp__server__tool`) for tool events, `auto`/`manual` for `pre_compact`,
    /// `startup` for `session_start`. Absent, empty or `*`: every subject.
    #[serde(default)]
    pub matcher: Option<String>,
    /// Run as `bash -c COMMAND` in the workspace.
    pub command: String,
    /// Seconds before the hook's process group is killed (1..=600, default 60).
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_S
}

/// `[hooks]`: the hooks of each event.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksConfig {
    pub session_start: Vec<HookSpec>,
    pub user_prompt_submit: Vec<HookSpec>,
    pub pre_tool_use: Vec<HookSpec>,
    pub post_tool_use: Vec<HookSpec>,
    pub pre_compact: Vec<HookSpec>,
    pub stop: Vec<HookSpec>,
    pub subagent_stop: Vec<HookSpec>,
}

impl HooksConfig {
    fn entries(&self) -> impl Iterator<Item = (HookEvent, &HookSpec)> {
        HookEvent::ALL.iter().flat_map(move |&e| {
            let list = match e {
                HookEvent::SessionStart => &self.session_start,
                HookEvent::UserPromptSubmit => &self.user_prompt_submit,
                HookEvent::PreToolUse => &self.pre_tool_use,
                HookEvent::PostToolUse => &self.post_tool_use,
                HookEvent::PreCompact => &self.pre_compact,
                HookEvent::Stop => &self.stop,
                HookEvent::SubagentStop => &self.subagent_stop,
            };
            list.iter().map(move |s| (e, s))
        })
    }

    /// The checks serde cannot express: a matcher that compiles, a command, a timeout
    /// in range. The error names the table.
    pub fn validate(&self) -> Result<(), String> {
        for (e, s) in self.entries() {
            let table = format!("[[hooks.{}]]", e.as_str());
            if s.command.trim().is_empty() {
                return Err(format!("{table}: `command` is empty"));
            }
            if !(1..=MAX_TIMEOUT_S).contains(&s.timeout_s) {
                return Err(format!(
                    "{table}: `timeout_s` must be 1..={MAX_TIMEOUT_S}, got {}",
                    s.timeout_s
                ));
            }
            compile(s.matcher.as_deref()).map_err(|m| format!("{table}: {m}"))?;
        }
        Ok(())
    }
}

/// `.agentd/hooks.toml`: only `[[hooks.EVENT]]` tables.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ProjectFile {
    hooks: HooksConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    PreCompact,
    Stop,
    SubagentStop,
}

impl HookEvent {
    pub const ALL: [HookEvent; 7] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::PreCompact,
        HookEvent::Stop,
        HookEvent::SubagentStop,
    ];

    /// The config table's and the Log's name.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session_start",
            HookEvent::UserPromptSubmit => "user_prompt_submit",
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
            HookEvent::PreCompact => "pre_compact",
            HookEvent::Stop => "stop",
            HookEvent::SubagentStop => "subagent_stop",
        }
    }

    /// `hook_event_name` on stdin: Claude Code's name, so existing scripts work.
    pub fn claude_name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
        }
    }

    /// Whether exit 2 (or a JSON block) stops what the hook judged.
    fn can_block(self) -> bool {
        matches!(
            self,
            HookEvent::UserPromptSubmit | HookEvent::PreToolUse | HookEvent::PostToolUse
        )
    }

    /// Whether stdout on exit 0 is context for the model.
    fn gives_context(self) -> bool {
        matches!(self, HookEvent::SessionStart | HookEvent::UserPromptSubmit)
    }
}

/// `matcher` as an anchored regex; `None` matches everything.
fn compile(matcher: Option<&str>) -> Result<Option<Regex>, String> {
    match matcher.map(str::trim) {
        None | Some("") | Some("*") => Ok(None),
        Some(m) => Regex::new(&format!("^(?:{m})$"))
            .map(Some)
            .map_err(|e| format!("`matcher` is not a valid regex: {e}")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    Project,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Project => "project",
        }
    }
}

#[derive(Debug)]
struct Entry {
    event: HookEvent,
    matcher: Option<Regex>,
    spec: HookSpec,
    source: Source,
    /// A project hook whose file is not trusted: recorded as skipped, never run.
    untrusted: bool,
}

/// The project file as found in a workspace.
#[derive(Debug, Clone)]
pub struct Project {
    pub path: PathBuf,
    pub sha256: String,
    pub trusted: bool,
    /// Why the file's hooks cannot be used (a TOML or schema error).
    pub error: Option<String>,
}

/// The hooks one turn runs with.
#[derive(Debug, Default)]
pub struct Hooks {
    entries: Vec<Entry>,
    pub project: Option<Project>,
    /// Untrusted entries already recorded as skipped in this turn.
    noticed: Mutex<HashSet<usize>>,
}

/// What a turn is, for a hook's stdin and its record.
pub struct At<'a> {
    pub session_id: &'a str,
    /// None for a compaction the user asked for (no turn runs it).
    pub turn_id: Option<&'a str>,
    pub permission_mode: &'a str,
    pub tools: &'a ToolContext,
}

/// What firing an event gave: the `hook_run` drafts to record, and the reason when a
/// hook blocked.
#[derive(Debug, Default)]
pub struct Fired {
    pub drafts: Vec<EventDraft>,
    pub blocked: Option<Blocked>,
}

#[derive(Debug, Clone)]
pub struct Blocked {
    pub reason: String,
    pub command: String,
}

impl Hooks {
    /// The config's hooks and the workspace's project file (blocking: reads files).
    pub fn load(config: &HooksConfig, home: &Path, workspace: &Path) -> Hooks {
        let mut entries: Vec<Entry> = config
            .entries()
            .filter_map(|(event, spec)| {
                Some(Entry {
                    event,
                    matcher: compile(spec.matcher.as_deref()).ok()?,
                    spec: spec.clone(),
                    source: Source::Config,
                    untrusted: false,
                })
            })
            .collect();
        let path = workspace.join(PROJECT_FILE);
        let project = read_project(&path).map(|(bytes, parsed)| {
            let sha256 = sha256_hex(&bytes);
            let trusted = is_trusted(home, workspace, &sha256);
            let error = match parsed {
                Ok(cfg) => {
                    for (event, spec) in cfg.hooks.entries() {
                        if let Ok(matcher) = compile(spec.matcher.as_deref()) {
                            entries.push(Entry {
                                event,
                                matcher,
                                spec: spec.clone(),
                                source: Source::Project,
                                untrusted: !trusted,
                            });
                        }
                    }
                    None
                }
                Err(e) => Some(e),
            };
            Project {
                path,
                sha256,
                trusted,
                error,
            }
        });
        Hooks {
            entries,
            project,
            noticed: Mutex::new(HashSet::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Runs `event`'s hooks whose matcher takes `subject`, in order (config first, then
    /// the project's), with `fields` added to the stdin object; stops at the first
    /// block of an event that can block.
    pub async fn fire(&self, event: HookEvent, subject: &str, fields: Value, at: &At<'_>) -> Fired {
        let mut fired = Fired::default();
        let matching = self.entries.iter().enumerate().filter(|(_, e)| {
            e.event == event && e.matcher.as_ref().is_none_or(|m| m.is_match(subject))
        });
        for (i, e) in matching {
            if at.tools.cancel.is_cancelled() {
                break;
            }
            let mut data = json!({
                "event": event.as_str(),
                "command": e.spec.command,
                "source": e.source.as_str(),
            });
            if let Some(t) = at.turn_id {
                data["turn_id"] = json!(t);
            }
            if let Some(m) = &e.spec.matcher {
                data["matcher"] = json!(m);
            }
            for k in ["call_id", "tool_name"] {
                if let Some(v) = fields.get(k) {
                    data[k] = v.clone();
                }
            }
            if e.untrusted {
                let first = self
                    .noticed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(i);
                if first {
                    data["verdict"] = json!("skipped");
                    data["reason"] = json!(format!(
                        "{PROJECT_FILE} is not trusted for this workspace (or changed since it \
                         was); review it and run `agentctl hooks trust`"
                    ));
                    if let Some(p) = &self.project {
                        data["sha256"] = json!(p.sha256);
                    }
                    fired.drafts.push(EventDraft::new(EventType::HookRun, data));
                }
                continue;
            }
            let mut input = json!({
                "session_id": at.session_id,
                "turn_id": at.turn_id,
                "cwd": at.tools.workspace,
                "hook_event_name": event.claude_name(),
                "permission_mode": at.permission_mode,
            });
            if let (Some(i), Some(f)) = (input.as_object_mut(), fields.as_object()) {
                i.extend(f.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let ran = run(&e.spec, &input, at.tools).await;
            let verdict = judge(event, &ran);
            data["exit_code"] = json!(ran.exit_code);
            data["duration_ms"] = json!(ran.duration_ms);
            if let Some(sb) = ran.sandbox.as_ref() {
                data["sandbox"] = sb.clone();
            }
            match &verdict {
                Verdict::Allow { context } => {
                    data["verdict"] = json!("allow");
                    if let Some(c) = context {
                        data["context"] = json!(c);
                    }
                }
                Verdict::Block { reason } => {
                    data["verdict"] = json!("block");
                    data["reason"] = json!(reason);
                }
                Verdict::Failed { kind, message } => {
                    data["verdict"] = json!("error");
                    data["error"] = json!({"kind": kind, "message": message});
                    let stderr = text_of(&ran.stderr);
                    if !stderr.is_empty() {
                        data["stderr"] = json!(stderr);
                    }
                }
            }
            fired.drafts.push(EventDraft::new(EventType::HookRun, data));
            if let Verdict::Block { reason } = verdict {
                fired.blocked = Some(Blocked {
                    reason,
                    command: e.spec.command.clone(),
                });
                break;
            }
        }
        fired
    }

    /// `session_start` (when `first`) and `user_prompt_submit` before a prompt is
    /// recorded.
    pub async fn before_prompt(&self, first: bool, prompt: &str, at: &At<'_>) -> Fired {
        let mut out = Fired::default();
        if first {
            let f = self
                .fire(
                    HookEvent::SessionStart,
                    "startup",
                    json!({"source": "startup"}),
                    at,
                )
                .await;
            out.drafts.extend(f.drafts);
        }
        let f = self
            .fire(
                HookEvent::UserPromptSubmit,
                "",
                json!({"prompt": prompt}),
                at,
            )
            .await;
        out.drafts.extend(f.drafts);
        out.blocked = f.blocked;
        out
    }

    pub async fn pre_tool_use(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        at: &At<'_>,
    ) -> Fired {
        self.fire(
            HookEvent::PreToolUse,
            name,
            json!({"call_id": call_id, "tool_name": name, "tool_input": args}),
            at,
        )
        .await
    }

    /// `post_tool_use`: a block's reason is added to the result the model reads (the
    /// call already ran).
    pub async fn post_tool_use(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        result: &mut Value,
        at: &At<'_>,
    ) -> Vec<EventDraft> {
        let f = self
            .fire(
                HookEvent::PostToolUse,
                name,
                json!({"call_id": call_id, "tool_name": name, "tool_input": args,
                       "tool_response": result}),
                at,
            )
            .await;
        if let Some(b) = f.blocked {
            let note = format!("[post_tool_use hook] {}", b.reason);
            match result.get_mut("output") {
                Some(Value::String(s)) => {
                    if !s.is_empty() {
                        s.push('\n');
                    }
                    s.push_str(&note);
                }
                _ => result["output"] = json!(note),
            }
            result["hook_feedback"] = json!(b.reason);
        }
        f.drafts
    }

    /// `stop`, or `subagent_stop` for a subagent's session (`subagent`: its parent's
    /// ids, added to the stdin object), as a turn ends.
    pub async fn stop(
        &self,
        subagent: Option<&Value>,
        status: &str,
        at: &At<'_>,
    ) -> Vec<EventDraft> {
        let mut fields = json!({"stop_hook_active": false, "status": status});
        let event = match subagent.and_then(Value::as_object) {
            Some(parent) => {
                if let Some(f) = fields.as_object_mut() {
                    f.extend(parent.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                HookEvent::SubagentStop
            }
            None => HookEvent::Stop,
        };
        self.fire(event, "", fields, at).await.drafts
    }

    pub async fn pre_compact(&self, trigger: &str, at: &At<'_>) -> Vec<EventDraft> {
        self.fire(
            HookEvent::PreCompact,
            trigger,
            json!({"trigger": trigger}),
            at,
        )
        .await
        .drafts
    }

    /// The hooks as `agentd/hooks` lists them.
    pub fn describe(&self) -> Vec<Value> {
        self.entries
            .iter()
            .map(|e| {
                json!({"event": e.event.as_str(), "matcher": e.spec.matcher,
                       "command": e.spec.command, "timeout_s": e.spec.timeout_s,
                       "source": e.source.as_str(), "runs": !e.untrusted})
            })
            .collect()
    }
}

/// The project file's bytes and parse, or `None` when there is none. A file that is not
/// a regular file (a symlink out of the workspace, a FIFO) is not read.
fn read_project(path: &Path) -> Option<(Vec<u8>, Result<ProjectFile, String>)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        let why = "not a regular file (symlinks are not followed)".to_string();
        return Some((Vec::new(), Err(why)));
    }
    let bytes = std::fs::read(path).ok()?;
    let parsed = std::str::from_utf8(&bytes)
        .map_err(|_| "not UTF-8".to_string())
        .and_then(|t| toml::from_str::<ProjectFile>(t).map_err(|e| toml_error(t, &e)))
        .and_then(|p| p.hooks.validate().map(|()| p));
    Some((bytes, parsed))
}

/// The error a block becomes: a refused prompt's, or a refused call's `tool_result`.
pub fn refusal(b: Blocked) -> agentd_proto::AgentError {
    agentd_proto::AgentError::new(agentd_proto::ErrorKind::HookBlocked, b.reason)
        .with_details(json!({"command": clip_chars(&b.command, 160)}))
}

/// toml's message with its line (never its Display, which quotes the source line).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(s) => {
            let line = text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1;
            format!("line {line}: {}", e.message().trim())
        }
        None => e.message().trim().to_string(),
    }
}

/// `<home>/hooks-trust.json`: `{"trusted": {"<workspace>": "<sha256>"}}`.
#[derive(Debug, Default, serde::Serialize, Deserialize)]
struct Ledger {
    #[serde(default)]
    trusted: BTreeMap<String, String>,
}

fn read_ledger(home: &Path) -> Ledger {
    std::fs::read(home.join(TRUST_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn is_trusted(home: &Path, workspace: &Path, sha256: &str) -> bool {
    read_ledger(home)
        .trusted
        .get(&workspace.to_string_lossy().into_owned())
        .is_some_and(|s| s == sha256)
}

/// Records `sha256` as the trusted content of `workspace`'s project file (replacing an
/// earlier one): written to a temporary file, synced, renamed.
pub fn trust(home: &Path, workspace: &Path, sha256: &str) -> std::io::Result<()> {
    // One writer at a time: two trusts at once must not lose either.
    static WRITER: Mutex<()> = Mutex::new(());
    let _w = WRITER.lock().unwrap_or_else(|p| p.into_inner());
    let mut ledger = read_ledger(home);
    ledger
        .trusted
        .insert(workspace.to_string_lossy().into_owned(), sha256.to_string());
    let bytes = serde_json::to_vec_pretty(&ledger).map_err(std::io::Error::other)?;
    let tmp = home.join(format!("{TRUST_FILE}.tmp"));
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, home.join(TRUST_FILE))?;
    if let Ok(d) = std::fs::File::open(home) {
        let _ = d.sync_all();
    }
    Ok(())
}

enum Verdict {
    Allow { context: Option<String> },
    Block { reason: String },
    Failed { kind: &'static str, message: String },
}

/// A hook's answer: exit codes first, then a JSON answer on stdout.
fn judge(event: HookEvent, ran: &Ran) -> Verdict {
    if let Some(kind) = ran.failure {
        return Verdict::Failed {
            kind,
            message: ran.message.clone().unwrap_or_default(),
        };
    }
    let stdout = text_of(&ran.stdout);
    match ran.exit_code {
        Some(0) => {
            let answer = serde_json::from_str::<Value>(stdout.trim())
                .ok()
                .filter(Value::is_object);
            if let Some(a) = &answer {
                let specific = a.get("hookSpecificOutput");
                let deny = specific
                    .and_then(|s| s.get("permissionDecision"))
                    .and_then(Value::as_str)
                    == Some("deny");
                let block = a.get("decision").and_then(Value::as_str) == Some("block");
                if (block || deny) && !event.can_block() {
                    return Verdict::Failed {
                        kind: "cannot_block",
                        message: format!(
                            "a block answer, but a {} hook cannot block",
                            event.as_str()
                        ),
                    };
                }
                if block || deny {
                    let reason = a
                        .get("reason")
                        .or_else(|| specific.and_then(|s| s.get("permissionDecisionReason")))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    return Verdict::Block {
                        reason: reason_or_default(&reason, &ran.command),
                    };
                }
                let context = specific
                    .and_then(|s| s.get("additionalContext"))
                    .and_then(Value::as_str)
                    .filter(|_| event.gives_context())
                    .map(|c| clip_chars(c.trim(), MAX_TEXT));
                return Verdict::Allow { context };
            }
            let context = (event.gives_context() && !stdout.trim().is_empty())
                .then(|| clip_chars(stdout.trim(), MAX_TEXT));
            Verdict::Allow { context }
        }
        Some(2) if event.can_block() => Verdict::Block {
            reason: reason_or_default(text_of(&ran.stderr).trim(), &ran.command),
        },
        Some(2) => Verdict::Failed {
            kind: "cannot_block",
            message: format!("exit 2, but a {} hook cannot block", event.as_str()),
        },
        Some(c) => Verdict::Failed {
            kind: "exit_code",
            message: format!("the hook exited {c}"),
        },
        None => Verdict::Failed {
            kind: "killed",
            message: "the hook was killed by a signal".into(),
        },
    }
}

fn reason_or_default(reason: &str, command: &str) -> String {
    if reason.trim().is_empty() {
        format!("blocked by hook `{}`", clip_chars(command, 160))
    } else {
        clip_chars(reason.trim(), MAX_TEXT)
    }
}

fn text_of(bytes: &[u8]) -> String {
    clip_chars(String::from_utf8_lossy(bytes).trim_end(), MAX_TEXT)
}

/// One run of a hook command.
#[derive(Debug, Default)]
struct Ran {
    command: String,
    exit_code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    duration_ms: u64,
    /// Why it did not finish on its own (`timeout`, `interrupted`, `spawn`,
    /// `sandbox_unavailable`).
    failure: Option<&'static str>,
    message: Option<String>,
    sandbox: Option<Value>,
}

/// Kills the process group when dropped while armed.
struct GroupKill(i32);

impl GroupKill {
    fn kill(&mut self) {
        if self.0 > 0 {
            // SAFETY: killpg has no memory-safety preconditions; a stale pgid is ESRCH.
            unsafe {
                libc::killpg(self.0, libc::SIGKILL);
            }
        }
        self.0 = 0;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `spec.command` with `input` on stdin, under `ctx`'s sandbox when it has one.
async fn run(spec: &HookSpec, input: &Value, ctx: &ToolContext) -> Ran {
    let began = Instant::now();
    let mut ran = Ran {
        command: spec.command.clone(),
        ..Ran::default()
    };
    let mut prepared = None;
    let std_cmd = match &ctx.sandbox {
        Some(sb) => {
            let rt = sb.runtime.clone();
            let (policy, on_unavailable, limits) =
                (sb.policy.clone(), sb.on_unavailable, sb.limits);
            let argv = vec!["bash".into(), "-c".into(), spec.command.clone()];
            let cwd = ctx.workspace.clone();
            let umask = tools::user_umask();
            let r = tokio::task::spawn_blocking(move || {
                rt.sandbox.prepare(&agentd_sandbox::CommandRequest {
                    policy: &policy,
                    on_unavailable,
                    argv,
                    cwd: &cwd,
                    umask,
                    limits,
                })
            })
            .await;
            match r {
                Ok(Ok(mut p)) => {
                    let c = std::mem::replace(&mut p.command, std::process::Command::new("true"));
                    prepared = Some(p);
                    c
                }
                Ok(Err(u)) => {
                    ran.failure = Some("sandbox_unavailable");
                    ran.message = Some(u.message);
                    return ran;
                }
                Err(e) => {
                    ran.failure = Some("spawn");
                    ran.message = Some(format!("sandbox setup: {e}"));
                    return ran;
                }
            }
        }
        None => {
            let mut c = std::process::Command::new("bash");
            c.arg("-c").arg(&spec.command).current_dir(&ctx.workspace);
            for var in &ctx.shell_env_remove {
                c.env_remove(var);
            }
            let mask = tools::user_umask() as libc::mode_t;
            use std::os::unix::process::CommandExt;
            // SAFETY: umask(2) is async-signal-safe and cannot fail.
            unsafe {
                c.pre_exec(move || {
                    libc::umask(mask);
                    Ok(())
                });
            }
            c
        }
    };
    let mut cmd = tokio::process::Command::from(std_cmd);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            ran.failure = Some("spawn");
            ran.message = Some(format!("could not start bash: {e}"));
            return ran;
        }
    };
    // process_group(0): the child leads its group.
    let mut group = GroupKill(child.id().map(|p| p as i32).unwrap_or(0));
    let stdin_bytes = serde_json::to_vec(input).unwrap_or_default();
    // A hook that never reads its stdin must not stall the daemon: written in a task.
    if let Some(mut w) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = w.write_all(&stdin_bytes).await;
            let _ = w.write_all(b"\n").await;
        });
    }
    let (Some(mut out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
        ran.failure = Some("spawn");
        ran.message = Some("no pipes to the hook".into());
        return ran;
    };
    let timeout = Duration::from_secs(spec.timeout_s.clamp(1, MAX_TIMEOUT_S));
    let mut deadline = began + timeout;
    let (mut ob, mut eb) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let (mut out_eof, mut err_eof) = (false, false);
    let mut status = None;
    let mut stop: Option<&'static str> = None;
    while !(out_eof && err_eof && status.is_some()) {
        tokio::select! {
            r = out.read(&mut ob), if !out_eof => match r {
                Ok(n) if n > 0 => keep(&mut ran.stdout, &ob[..n]),
                _ => out_eof = true,
            },
            r = err.read(&mut eb), if !err_eof => match r {
                Ok(n) if n > 0 => keep(&mut ran.stderr, &eb[..n]),
                _ => err_eof = true,
            },
            s = child.wait(), if status.is_none() => match s {
                Ok(s) => {
                    status = Some(s);
                    deadline = deadline.min(Instant::now() + LINGER_AFTER_EXIT);
                }
                Err(e) => {
                    ran.failure = Some("spawn");
                    ran.message = Some(format!("waiting for the hook: {e}"));
                    break;
                }
            },
            _ = tokio::time::sleep_until(deadline) => {
                stop = Some(if status.is_some() { "lingering" } else { "timeout" });
                break;
            }
            _ = ctx.cancel.cancelled() => {
                stop = Some("interrupted");
                break;
            }
        }
    }
    // The hook has ended (or is given up on): nothing it started outlives it.
    group.kill();
    if let Some(p) = &prepared {
        p.kill_cgroup();
    }
    if stop.is_some() {
        if status.is_none() {
            status = tokio::time::timeout(DRAIN_AFTER_KILL, child.wait())
                .await
                .ok()
                .and_then(Result::ok);
        }
        let until = Instant::now() + DRAIN_AFTER_KILL;
        while !out_eof {
            match tokio::time::timeout_at(until, out.read(&mut ob)).await {
                Ok(Ok(n)) if n > 0 => keep(&mut ran.stdout, &ob[..n]),
                _ => out_eof = true,
            }
        }
        while !err_eof {
            match tokio::time::timeout_at(until, err.read(&mut eb)).await {
                Ok(Ok(n)) if n > 0 => keep(&mut ran.stderr, &eb[..n]),
                _ => err_eof = true,
            }
        }
    }
    match stop {
        Some("timeout") => {
            ran.failure = Some("timeout");
            ran.message = Some(format!(
                "the hook timed out after {}s; its process group was killed",
                timeout.as_secs()
            ));
        }
        Some("interrupted") => {
            ran.failure = Some("interrupted");
            ran.message =
                Some("the turn was interrupted; the hook's process group was killed".into());
        }
        _ => {}
    }
    ran.exit_code = status.map(|s| match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => -1,
    });
    if ran.exit_code == Some(agentd_sandbox::plan::SETUP_FAILED) && prepared.is_some() {
        ran.failure.get_or_insert("sandbox_unavailable");
    }
    if let Some(p) = prepared {
        let stderr = ran.stderr.clone();
        ran.sandbox = tokio::task::spawn_blocking(move || p.finish(&stderr))
            .await
            .ok();
        if ran.failure == Some("sandbox_unavailable") && ran.message.is_none() {
            ran.message = ran
                .sandbox
                .as_ref()
                .and_then(|s| s.get("error"))
                .and_then(Value::as_str)
                .map(|m| format!("the command sandbox could not be built: {m}"));
        }
    }
    ran.duration_ms = began.elapsed().as_millis() as u64;
    ran
}

fn keep(buf: &mut Vec<u8>, bytes: &[u8]) {
    let room = MAX_CAPTURE.saturating_sub(buf.len());
    buf.extend_from_slice(&bytes[..room.min(bytes.len())]);
}

/// `agentd/hooks {workspace}`: every hook a turn in `workspace` would run, and the
/// project file with whether it is trusted.
pub fn list(config: &HooksConfig, home: &Path, workspace: &Path) -> Value {
    let hooks = Hooks::load(config, home, workspace);
    json!({
        "workspace": workspace,
        "hooks": hooks.describe(),
        "project": hooks.project.as_ref().map(|p| json!({
            "path": p.path, "sha256": p.sha256, "trusted": p.trusted, "error": p.error,
        })),
    })
}

fn canonical_workspace(ws: &str) -> Result<PathBuf, agentd_proto::AgentError> {
    if !Path::new(ws).is_absolute() {
        return Err(agentd_proto::AgentError::invalid_args(
            "workspace must be an absolute path",
        ));
    }
    std::fs::canonicalize(ws).map_err(|e| {
        agentd_proto::AgentError::not_found(format!("workspace {ws}: {e}"))
            .with_details(json!({"workspace": ws}))
    })
}

/// `agentd/hooks` (blocking: reads files).
pub fn show(
    config: &HooksConfig,
    home: &Path,
    workspace: &str,
) -> Result<Value, agentd_proto::AgentError> {
    Ok(list(config, home, &canonical_workspace(workspace)?))
}

/// `agentd/hooks_trust` (blocking): records the project file's current digest for the
/// workspace. Refused when there is no file, it does not parse, or it changed from the
/// `sha256` the client showed the user (kind `conflict`).
pub fn trust_now(
    config: &HooksConfig,
    home: &Path,
    workspace: &str,
    expect: Option<&str>,
) -> Result<Value, agentd_proto::AgentError> {
    use agentd_proto::{AgentError, ErrorKind};
    let ws = canonical_workspace(workspace)?;
    let hooks = Hooks::load(config, home, &ws);
    let Some(p) = &hooks.project else {
        return Err(
            AgentError::not_found(format!("{} has no {PROJECT_FILE}", ws.display()))
                .with_details(json!({"workspace": ws})),
        );
    };
    if let Some(e) = &p.error {
        return Err(AgentError::invalid_args(format!(
            "{}: {e}; fix it before trusting it",
            p.path.display()
        ))
        .with_details(json!({"path": p.path})));
    }
    if expect.is_some_and(|x| x != p.sha256) {
        return Err(AgentError::new(
            ErrorKind::Conflict,
            format!(
                "{} changed since it was shown; review it again",
                p.path.display()
            ),
        )
        .with_details(json!({"path": p.path, "sha256": p.sha256})));
    }
    trust(home, &ws, &p.sha256)
        .map_err(|e| AgentError::storage("write the hooks trust ledger", &e))?;
    Ok(list(config, home, &ws))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran {
            command: "x".into(),
            exit_code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Ran::default()
        }
    }

    #[test]
    fn exit_codes_and_json_answers_give_the_documented_verdicts() {
        let pre = HookEvent::PreToolUse;
        assert!(matches!(
            judge(pre, &ran(0, "", "")),
            Verdict::Allow { context: None }
        ));
        match judge(pre, &ran(2, "", "no rm here\n")) {
            Verdict::Block { reason } => assert_eq!(reason, "no rm here"),
            _ => panic!("exit 2 blocks"),
        }
        match judge(
            pre,
            &ran(0, r#"{"decision":"block","reason":"json says no"}"#, ""),
        ) {
            Verdict::Block { reason } => assert_eq!(reason, "json says no"),
            _ => panic!("a JSON block blocks"),
        }
        assert!(matches!(
            judge(pre, &ran(1, "", "oops")),
            Verdict::Failed {
                kind: "exit_code",
                ..
            }
        ));
        assert!(matches!(
            judge(HookEvent::Stop, &ran(2, "", "x")),
            Verdict::Failed {
                kind: "cannot_block",
                ..
            }
        ));
        match judge(
            HookEvent::SubagentStop,
            &ran(0, r#"{"decision":"block","reason":"keep going"}"#, ""),
        ) {
            Verdict::Failed { kind, .. } => assert_eq!(kind, "cannot_block"),
            _ => panic!("a JSON block from a notification is a failure, not an allow"),
        }
        match judge(HookEvent::SessionStart, &ran(0, "use tabs\n", "")) {
            Verdict::Allow { context } => assert_eq!(context.as_deref(), Some("use tabs")),
            _ => panic!("stdout is context"),
        }
        match judge(pre, &ran(0, "chatter", "")) {
            Verdict::Allow { context } => assert_eq!(context, None),
            _ => panic!("pre_tool_use stdout is not context"),
        }
    }

    #[test]
    fn matchers_match_whole_names_and_bad_ones_are_refused() {
        let m = compile(Some("shell|apply_patch")).unwrap().unwrap();
        assert!(m.is_match("shell") && m.is_match("apply_patch"));
        assert!(!m.is_match("shell2") && !m.is_match("read_file"));
        assert!(compile(Some("*")).unwrap().is_none());
        let mcp = compile(Some("mcp__github__.*")).unwrap().unwrap();
        assert!(mcp.is_match("mcp__github__create_issue"));
        let cfg: HooksConfig =
            toml::from_str("[[pre_tool_use]]\nmatcher = \"(\"\ncommand = \"true\"\n").unwrap();
        assert!(cfg
            .validate()
            .unwrap_err()
            .contains("[[hooks.pre_tool_use]]"));
    }
}
