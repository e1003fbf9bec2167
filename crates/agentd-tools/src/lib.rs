//! agentd-tools: the tools a turn can call, confined to the session workspace (docs/turns-and-providers.md#tools).
//!
//! Must never depend on the daemon, a store, sessions or providers: the turn engine
//! calls in, and a tool answers with a value.
//!
//! The turn engine owns *when* a tool runs (permission mode, interrupts, logging); this
//! module owns *what* it does and the shape of its `tool_result` data (docs/log-format.md#event-types). Every tool
//! returns a [`ToolOutcome`] — errors are values with a contract kind, never panics —
//! and records the artifacts it observed, which feed the checkpoint (docs/history-rules.md#checkpoint): artifacts and
//! hashes come only from here, never from model text.
//!
//! Artifact uris (docs/history-rules.md#checkpoint), by kind:
//! - `file`: the workspace-relative path with `/` separators and no scheme
//!   (`src/main.rs`), with the sha256 of the whole file's bytes as read or written.
//! - `tool_output`: `resource:<sha256>` — full output stored under `resources/<sha256>`
//!   because it exceeded the output cap.
//! - `command`: `command:<command text, clipped to 160 chars>`, with the sha256 of the
//!   command's full captured output.
//!
//! `memory_apply` is a known tool name but is validated and recorded by the session
//! (it writes `memory_update` events); [`run`] answers it with `unsupported`.

pub mod confine;
pub mod files;
pub mod gitconfig;
pub mod patch;
pub mod sandboxing;
pub mod search;
pub mod shell;
pub mod spec;
pub mod watch;
pub mod workspace;

pub use spec::{is_known, is_mutating, specs};

use agentd_base::text::{cap_output, sha256_hex, TOOL_OUTPUT_CAP};
use agentd_proto::{AgentError, ErrorKind};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The umask agentd was started with, before the daemon tightened its own to 0077 (its
/// sockets, Logs and resources are private). The user's files are not the daemon's:
/// `shell` commands run under this umask, and files and directories the file tools
/// create get `0666`/`0777` minus it, as if the user had made them.
static USER_UMASK: AtomicU32 = AtomicU32::new(0o022);

/// Records the user's umask; `main` calls it before the daemon changes its own.
pub fn set_user_umask(mask: u32) {
    USER_UMASK.store(mask & 0o777, Ordering::Relaxed);
}

/// The umask recorded by [`set_user_umask`] (0022 if none was).
pub fn user_umask() -> u32 {
    USER_UMASK.load(Ordering::Relaxed)
}

/// Default and upper bound of a `shell` call's timeout.
pub const DEFAULT_SHELL_TIMEOUT: Duration = Duration::from_secs(120);
pub const MAX_SHELL_TIMEOUT: Duration = Duration::from_secs(600);

/// Everything a tool call may touch. Cheap to clone (the token is shared).
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Canonical absolute workspace; every path argument resolves inside it.
    pub workspace: PathBuf,
    /// `sessions/<sid>/resources/`: where over-cap output is stored by content hash.
    pub resources_dir: PathBuf,
    /// Cancelled on interrupt: running tools stop and answer `interrupted`.
    pub cancel: CancellationToken,
    /// Default `shell` timeout (a call may ask for its own `timeout_s`, ≤ 600 s).
    pub shell_timeout: Duration,
    /// Bytes of output returned inline; the rest goes to a resource file.
    pub output_cap: usize,
    /// Environment variables removed from `shell` commands (the provider API key
    /// variables named in config), so a command like `env` cannot copy a secret into
    /// the Log.
    pub shell_env_remove: Vec<String>,
    /// Secret values (the provider API keys) replaced by `[redacted]` in output before
    /// it is returned or stored as a resource: a command can still find a key (a file,
    /// another process), and a Log is not the place for it. See [`redact`].
    pub redact: Vec<String>,
    /// The sandbox `shell` commands run in; `None` only where no daemon binary can
    /// act as the helper (unit tests).
    pub sandbox: Option<sandboxing::CommandSandbox>,
    /// Hidden and protected paths the file tools obey (the sandbox's sets).
    pub paths: sandboxing::PathRules,
}

impl ToolContext {
    /// Canonicalizes `workspace`, which must be an existing directory.
    pub fn new(
        workspace: impl AsRef<Path>,
        resources_dir: impl Into<PathBuf>,
    ) -> Result<Self, AgentError> {
        let given = workspace.as_ref();
        let ws = std::fs::canonicalize(given)
            .map_err(|e| workspace::io_error(&e, "workspace", &given.to_string_lossy()))?;
        if !ws.is_dir() {
            return Err(AgentError::invalid_args(format!(
                "workspace `{}` is not a directory",
                given.display()
            ))
            .with_details(json!({"path": given})));
        }
        Ok(ToolContext {
            workspace: ws,
            resources_dir: resources_dir.into(),
            cancel: CancellationToken::new(),
            shell_timeout: DEFAULT_SHELL_TIMEOUT,
            output_cap: TOOL_OUTPUT_CAP,
            shell_env_remove: Vec::new(),
            redact: Vec::new(),
            sandbox: None,
            paths: sandboxing::PathRules::default(),
        })
    }
}

/// Something a tool observed or produced (docs/history-rules.md#checkpoint `artifacts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub uri: String,
    /// `file`, `tool_output` or `command`.
    pub kind: &'static str,
    pub sha256: Option<String>,
}

impl Artifact {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("uri".into(), json!(self.uri));
        m.insert("kind".into(), json!(self.kind));
        if let Some(h) = &self.sha256 {
            m.insert("sha256".into(), json!(h));
        }
        Value::Object(m)
    }
}

/// The result of one tool call, before it becomes `tool_result` data.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub ok: bool,
    /// Inline output, already cut to the output cap.
    pub output: Option<String>,
    pub error: Option<AgentError>,
    pub exit_code: Option<i32>,
    pub artifacts: Vec<Artifact>,
    /// Descriptor of the stored full output: `{sha256, bytes, path, media_type}`.
    pub resource: Option<Value>,
    /// `data.sandbox` of a command: what was in force and what it ran into.
    pub sandbox: Option<Value>,
    /// `data.images`: images the result gives the model, each stored as a resource and
    /// referenced as `{sha256, mime, bytes}` (`read_file` of an image).
    pub images: Vec<Value>,
}

impl ToolOutcome {
    pub fn success(output: String) -> Self {
        ToolOutcome {
            ok: true,
            output: Some(output),
            error: None,
            exit_code: None,
            artifacts: Vec::new(),
            resource: None,
            sandbox: None,
            images: Vec::new(),
        }
    }

    pub fn failure(error: AgentError) -> Self {
        ToolOutcome {
            ok: false,
            output: None,
            error: Some(error),
            exit_code: None,
            artifacts: Vec::new(),
            resource: None,
            sandbox: None,
            images: Vec::new(),
        }
    }

    /// The `tool_result` event data (docs/log-format.md#event-types): `{call_id, ok, output?, error?, exit_code?,
    /// artifacts?, resource?}`. A failed `shell` command may carry both its output and
    /// (for timeout/interrupt) an error; a nonzero exit alone carries output and
    /// `exit_code` with `ok:false` and no error.
    pub fn into_result_data(self, call_id: &str) -> Value {
        let mut m = Map::new();
        m.insert("call_id".into(), json!(call_id));
        m.insert("ok".into(), json!(self.ok));
        if let Some(out) = self.output {
            m.insert("output".into(), json!(out));
        }
        if let Some(e) = self.error {
            let details = if e.details.is_object() {
                e.details
            } else {
                json!({})
            };
            m.insert(
                "error".into(),
                json!({"kind": e.kind, "message": e.message, "details": details}),
            );
        }
        if let Some(code) = self.exit_code {
            m.insert("exit_code".into(), json!(code));
        }
        if !self.artifacts.is_empty() {
            let arts: Vec<Value> = self.artifacts.iter().map(Artifact::to_json).collect();
            m.insert("artifacts".into(), Value::Array(arts));
        }
        if let Some(r) = self.resource {
            m.insert("resource".into(), r);
        }
        if let Some(s) = self.sandbox {
            m.insert("sandbox".into(), s);
        }
        if !self.images.is_empty() {
            m.insert("images".into(), Value::Array(self.images));
        }
        Value::Object(m)
    }
}

/// Runs tool `name` with `args`. Never panics on any input.
pub async fn run(name: &str, args: &Value, ctx: &ToolContext) -> ToolOutcome {
    if ctx.cancel.is_cancelled() {
        return ToolOutcome::failure(interrupted(name));
    }
    match name {
        "read_file" | "list_dir" | "search" => {
            // Filesystem work blocks; keep it off the async workers. Reads have no effect,
            // so an interrupt may abandon them and answer at once.
            let job = spawn_blocking_tool(name, args, ctx);
            tokio::select! {
                outcome = job => outcome,
                _ = ctx.cancel.cancelled() => ToolOutcome::failure(interrupted(name)),
            }
        }
        // A write that has started is awaited even on interrupt: answering `interrupted`
        // while the file still changes would make the Log lie about the workspace.
        "write_file" | "edit_file" | "apply_patch" | gitconfig::TOOL_NAME => {
            spawn_blocking_tool(name, args, ctx).await
        }
        "shell" => match parse_args::<shell::ShellArgs>(name, args) {
            Ok(a) => shell::run(a, ctx).await,
            Err(e) => ToolOutcome::failure(e),
        },
        "memory_apply" => ToolOutcome::failure(AgentError::new(
            ErrorKind::Unsupported,
            "memory_apply is recorded by the session, not run as a workspace tool",
        )),
        _ => ToolOutcome::failure(
            AgentError::invalid_args(format!(
                "unknown tool `{}`",
                agentd_base::text::clip_chars(name, 64)
            ))
            .with_details(json!({"known_tools": spec::KNOWN_TOOLS})),
        ),
    }
}

async fn spawn_blocking_tool(name: &str, args: &Value, ctx: &ToolContext) -> ToolOutcome {
    let (name_owned, args_owned, ctx_owned) = (name.to_string(), args.clone(), ctx.clone());
    tokio::task::spawn_blocking(move || run_blocking(&name_owned, &args_owned, &ctx_owned))
        .await
        .unwrap_or_else(|e| {
            ToolOutcome::failure(AgentError::internal(format!("tool `{name}` failed: {e}")))
        })
}

fn run_blocking(name: &str, args: &Value, ctx: &ToolContext) -> ToolOutcome {
    let result = match name {
        "read_file" => parse_args(name, args).and_then(|a| files::read_file(a, ctx)),
        "list_dir" => parse_args(name, args).and_then(|a| files::list_dir(a, ctx)),
        "search" => parse_args(name, args).and_then(|a| search::search(a, ctx)),
        "write_file" => parse_args(name, args).and_then(|a| files::write_file(a, ctx)),
        "edit_file" => parse_args(name, args).and_then(|a| files::edit_file(a, ctx)),
        "apply_patch" => parse_args(name, args).and_then(|a| files::apply_patch(a, ctx)),
        gitconfig::TOOL_NAME => parse_args(name, args).and_then(|a| gitconfig::git_config(a, ctx)),
        _ => Err(AgentError::internal(format!(
            "`{name}` is not a blocking tool"
        ))),
    };
    result.unwrap_or_else(ToolOutcome::failure)
}

fn interrupted(name: &str) -> AgentError {
    AgentError::new(
        ErrorKind::Interrupted,
        format!("tool `{name}` was interrupted"),
    )
}

/// Strictly decodes an args object (unknown fields are refused).
fn parse_args<T: DeserializeOwned>(name: &str, args: &Value) -> Result<T, AgentError> {
    if !args.is_object() {
        return Err(AgentError::invalid_args(format!(
            "arguments of `{name}` must be a JSON object"
        )));
    }
    serde_json::from_value(args.clone()).map_err(|e| {
        AgentError::invalid_args(format!("bad arguments for `{name}`: {e}"))
            .with_details(json!({"tool": name}))
    })
}

/// What replaces a secret value in recorded text.
pub const REDACTED: &str = "[redacted]";
/// Secrets shorter than this are not scrubbed: replacing every occurrence of a short
/// string would mangle ordinary output and hides little.
pub const MIN_SECRET_LEN: usize = 8;

/// `text` with every occurrence of each secret (of at least [`MIN_SECRET_LEN`] bytes)
/// replaced by [`REDACTED`].
pub fn redact<'a>(text: &'a str, secrets: &[String]) -> std::borrow::Cow<'a, str> {
    let mut out = std::borrow::Cow::Borrowed(text);
    for s in secrets.iter().filter(|s| s.len() >= MIN_SECRET_LEN) {
        if out.contains(s.as_str()) {
            out = std::borrow::Cow::Owned(out.replace(s.as_str(), REDACTED));
        }
    }
    out
}

/// [`redact`] over raw bytes (output that may not be UTF-8).
fn redact_bytes<'a>(bytes: &'a [u8], secrets: &[String]) -> std::borrow::Cow<'a, [u8]> {
    let mut out = std::borrow::Cow::Borrowed(bytes);
    for s in secrets.iter().filter(|s| s.len() >= MIN_SECRET_LEN) {
        let finder = memchr::memmem::Finder::new(s.as_bytes());
        if finder.find(&out).is_none() {
            continue;
        }
        let mut replaced = Vec::with_capacity(out.len());
        let mut from = 0;
        for at in finder.find_iter(&out) {
            replaced.extend_from_slice(&out[from..at]);
            replaced.extend_from_slice(REDACTED.as_bytes());
            from = at + s.len();
        }
        replaced.extend_from_slice(&out[from..]);
        out = std::borrow::Cow::Owned(replaced);
    }
    out
}

/// [`redact`] applied to every string (keys included) of a JSON value.
pub fn redact_value(v: &mut Value, secrets: &[String]) {
    if secrets.iter().all(|s| s.len() < MIN_SECRET_LEN) {
        return;
    }
    match v {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(r) = redact(s, secrets) {
                *s = r;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact_value(x, secrets)),
        Value::Object(m) => {
            let old = std::mem::take(m);
            for (k, mut x) in old {
                redact_value(&mut x, secrets);
                m.insert(redact(&k, secrets).into_owned(), x);
            }
        }
        _ => {}
    }
}

/// A successful outcome listing `lines`, or saying `empty` when there are none, with the
/// note `cut` after them when the listing stopped early (`list_dir`'s entries,
/// `search`'s matches).
pub(crate) fn lines_outcome(
    lines: &[String],
    empty: &str,
    cut: Option<String>,
    ctx: &ToolContext,
) -> ToolOutcome {
    let mut out = if lines.is_empty() {
        empty.to_string()
    } else {
        lines.join("\n")
    };
    if let Some(note) = cut {
        out.push('\n');
        out.push_str(&note);
    }
    with_output(
        ToolOutcome::success(String::new()),
        &out,
        out.as_bytes(),
        ctx,
    )
}

/// Builds a successful or failed outcome around `full` output, cutting it to the cap.
/// When cut, the `raw` bytes are stored as a resource and recorded as a `tool_output`
/// artifact. Both are scrubbed of `ctx.redact` first, so a stored resource holds no
/// secret either.
pub fn with_output(
    mut outcome: ToolOutcome,
    full: &str,
    raw: &[u8],
    ctx: &ToolContext,
) -> ToolOutcome {
    let full = redact(full, &ctx.redact);
    let raw = redact_bytes(raw, &ctx.redact);
    let (full, raw) = (full.as_ref(), raw.as_ref());
    match cap_output(full, ctx.output_cap) {
        None => outcome.output = Some(full.to_string()),
        Some(cut) => match store_resource(&ctx.resources_dir, raw) {
            Ok(desc) => {
                let sha = desc["sha256"].as_str().unwrap_or_default().to_string();
                outcome.artifacts.push(Artifact {
                    uri: format!("resource:{sha}"),
                    kind: "tool_output",
                    sha256: Some(sha),
                });
                outcome.resource = Some(desc);
                outcome.output = Some(cut);
            }
            Err(e) => {
                // The inline cut is still useful; say why the full bytes are absent.
                tracing::warn!(error = %e, "could not store tool output resource");
                outcome.output = Some(format!("{cut}\n…[full output could not be stored: {e}]"));
            }
        },
    }
    outcome
}

/// Stores `bytes` as `dir/<sha256>` (temp file, fsync, rename, directory fsync) and
/// returns its descriptor. Content addressing makes a second store of the same bytes a
/// no-op.
pub fn store_resource(dir: &Path, bytes: &[u8]) -> Result<Value, AgentError> {
    let sha = sha256_hex(bytes);
    let media_type = if std::str::from_utf8(bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let desc = json!({
        "sha256": sha,
        "bytes": bytes.len(),
        "path": format!("resources/{sha}"),
        "media_type": media_type,
    });
    let fail = |what: &str, e: std::io::Error| {
        let mut err = AgentError::storage(&format!("storing resource {sha}: {what}"), &e);
        if err.kind == ErrorKind::LogWriteFailed {
            err.kind = ErrorKind::Internal;
        }
        err.details["dir"] = json!(dir);
        err
    };
    let target = dir.join(&sha);
    if target.exists() {
        return Ok(desc);
    }
    std::fs::create_dir_all(dir).map_err(|e| fail("create dir", e))?;
    let tmp = dir.join(format!(".{sha}.{}.tmp", rand::random::<u32>()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail("write", e)
    })?;
    Ok(desc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_data_shape() {
        let mut o = ToolOutcome::success("hi".into());
        o.artifacts.push(Artifact {
            uri: "a.txt".into(),
            kind: "file",
            sha256: Some("ab".into()),
        });
        assert_eq!(
            o.into_result_data("c1"),
            json!({"call_id":"c1","ok":true,"output":"hi",
                   "artifacts":[{"uri":"a.txt","kind":"file","sha256":"ab"}]})
        );
        let f = ToolOutcome::failure(AgentError::not_found("gone"));
        assert_eq!(
            f.into_result_data("c2"),
            json!({"call_id":"c2","ok":false,
                   "error":{"kind":"not_found","message":"gone","details":{}}})
        );
    }

    #[test]
    fn redaction_of_text_bytes_and_json() {
        let secrets = vec!["sk-12345678".to_string(), "short".to_string()];
        assert_eq!(
            redact("a sk-12345678 b sk-12345678", &secrets),
            "a [redacted] b [redacted]"
        );
        assert_eq!(redact("short stays", &secrets), "short stays");
        assert_eq!(
            redact_bytes(b"\xffsk-12345678\xfe", &secrets).as_ref(),
            b"\xff[redacted]\xfe"
        );
        let mut v = json!({"output": "k=sk-12345678", "n": 1, "sk-12345678": ["x sk-12345678"]});
        redact_value(&mut v, &secrets);
        assert_eq!(
            v,
            json!({"output": "k=[redacted]", "n": 1, "[redacted]": ["x [redacted]"]})
        );
    }

    #[test]
    fn store_resource_is_content_addressed() {
        let dir = tempfile::tempdir().unwrap();
        let res = dir.path().join("resources");
        let d = store_resource(&res, b"\xffbytes").unwrap();
        let sha = sha256_hex(b"\xffbytes");
        assert_eq!(d["sha256"], sha.as_str());
        assert_eq!(d["media_type"], "application/octet-stream");
        assert_eq!(d["path"], format!("resources/{sha}"));
        assert_eq!(std::fs::read(res.join(&sha)).unwrap(), b"\xffbytes");
        assert_eq!(store_resource(&res, b"\xffbytes").unwrap(), d);
        assert_eq!(std::fs::read_dir(&res).unwrap().count(), 1);
    }
}
