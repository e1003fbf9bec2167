//! `shell`: run `bash -c <command>` in the workspace, bounded in time, killable as a
//! whole.
//!
//! The command runs in its own process group so that a timeout or an interrupt can kill
//! everything it started (`killpg(SIGKILL)`), not just bash. stdout and stderr share one
//! pipe, so their interleaving is the order of the writes as the kernel saw them; a
//! program that buffers its stdout (most do when it is not a terminal) may still show
//! its stderr first — the order is best-effort.
//!
//! Ending: the call ends when bash has exited *and* the pipe is at EOF. A background
//! process that keeps the pipe open (`sleep 60 &`) gets `LINGER_AFTER_EXIT` to finish,
//! then the process group is killed and the call returns; redirect a background job's
//! output (`server > log 2>&1 &`) to keep it running past the call. After a kill the
//! pipe is drained only briefly, so a grandchild that escaped the group (`setsid`) and
//! holds the pipe cannot stall the call: it returns within about a second.
//!
//! Results: exit 0 → `ok:true`. A nonzero exit → `ok:false` with the output kept, the
//! `exit_code`, and no `error` (the command ran; it failed). Timeout / interrupt →
//! `ok:false`, error kind `timeout` / `interrupted`, partial output kept. A process
//! killed by signal N reports `exit_code` 128+N, as bash does. Output bytes that are not
//! UTF-8 are shown as U+FFFD; the stored resource (when over the cap) keeps the exact
//! bytes.

use super::{with_output, Artifact, ToolContext, ToolOutcome, MAX_SHELL_TIMEOUT};
use agentd_base::text::{clip_chars, sha256_hex};
use agentd_proto::{AgentError, ErrorKind};
use serde::Deserialize;
use serde_json::json;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// How long background processes may keep the output pipe open after bash exits.
const LINGER_AFTER_EXIT: Duration = Duration::from_millis(250);
/// After SIGKILL: how long to wait for bash to be reaped and for the pipe to drain.
const REAP_AFTER_KILL: Duration = Duration::from_millis(400);
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(200);
/// Captured output beyond this is discarded (the command keeps running and is told
/// nothing), so a runaway command cannot exhaust the daemon's memory.
const MAX_CAPTURE: usize = 64 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    pub command: String,
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// A wider sandbox asked for this call; the turn engine decides and widens
    /// [`ToolContext::sandbox`] before the call runs (never here).
    #[serde(default)]
    pub sandbox_grant: Option<serde_json::Value>,
    #[serde(default)]
    pub justification: Option<String>,
}

/// Why the call stopped waiting for the command on its own.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Timeout,
    Interrupted,
    /// bash exited but background processes held the pipe past `LINGER_AFTER_EXIT`.
    Lingering,
}

/// Kills the process group when dropped while armed, so a cancelled or dropped call
/// never leaves the command running.
struct GroupKill {
    pgid: i32,
    armed: bool,
}

impl GroupKill {
    fn kill(&mut self) {
        if self.armed && self.pgid > 0 {
            // SAFETY: killpg has no memory-safety preconditions; the worst outcome of a
            // stale pgid is ESRCH, which we ignore.
            unsafe {
                libc::killpg(self.pgid, libc::SIGKILL);
            }
        }
        self.armed = false;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill. O_CLOEXEC keeps the
    // ends from leaking into processes other tools spawn concurrently; the child gets
    // the write end through dup2, which clears the flag.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub async fn run(args: ShellArgs, ctx: &ToolContext) -> ToolOutcome {
    let timeout = match args.timeout_s {
        None => ctx.shell_timeout.min(MAX_SHELL_TIMEOUT),
        Some(s) if s >= 1 && s <= MAX_SHELL_TIMEOUT.as_secs() => Duration::from_secs(s),
        Some(s) => {
            return ToolOutcome::failure(
                AgentError::invalid_args(format!(
                    "timeout_s must be between 1 and {}",
                    MAX_SHELL_TIMEOUT.as_secs()
                ))
                .with_details(json!({"timeout_s": s})),
            )
        }
    };
    if args.command.trim().is_empty() {
        return ToolOutcome::failure(AgentError::invalid_args("command is empty"));
    }
    match run_inner(&args.command, timeout, ctx).await {
        Ok(o) => o,
        Err(e) => ToolOutcome::failure(e),
    }
}

async fn run_inner(
    command: &str,
    timeout: Duration,
    ctx: &ToolContext,
) -> Result<ToolOutcome, AgentError> {
    let spawn_err = |e: std::io::Error| {
        AgentError::internal(format!("could not start bash: {e}"))
            .with_details(json!({"command": clip_chars(command, 160)}))
    };
    let (read_end, write_end) = pipe().map_err(spawn_err)?;
    let write_end2 = write_end.try_clone().map_err(spawn_err)?;
    // Sandboxed: the helper runs bash inside the sandbox (docs/sandbox.md#contract).
    let mut prepared = match &ctx.sandbox {
        None => None,
        Some(sb) => {
            let rt = sb.runtime.clone();
            let (policy, on_unavailable, limits) =
                (sb.policy.clone(), sb.on_unavailable, sb.limits);
            let argv = vec!["bash".to_string(), "-c".to_string(), command.to_string()];
            let umask = super::user_umask();
            let cwd = ctx.workspace.clone();
            // The first call probes the kernel (one helper run): off the workers.
            let r = tokio::task::spawn_blocking(move || {
                rt.sandbox
                    .prepare_to_start(&agentd_sandbox::CommandRequest {
                        policy: &policy,
                        on_unavailable,
                        argv,
                        cwd: &cwd,
                        umask,
                        limits,
                    })
            })
            .await
            .map_err(|e| AgentError::internal(format!("sandbox setup: {e}")))?;
            match r {
                Ok(p) => Some(p),
                Err(u) => {
                    return Err(AgentError::new(ErrorKind::SandboxUnavailable, u.message)
                        .with_details(
                            json!({"missing": u.missing, "command": clip_chars(command, 160)}),
                        ))
                }
            }
        }
    };
    let mut child = if let Some(p) = prepared.as_mut() {
        // Handed to the spare helper when one is ready, else the helper is spawned; in
        // its own process group either way.
        p.start(None, write_end, write_end2).map_err(spawn_err)?
    } else {
        // The Command holds the parent's copies of the write end; dropping it at the end
        // of this block is what lets the pipe reach EOF once the children are done.
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&ctx.workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write_end))
            .stderr(Stdio::from(write_end2))
            .process_group(0)
            .kill_on_drop(true);
        for var in &ctx.shell_env_remove {
            cmd.env_remove(var);
        }
        // The command's files are the user's: give it the umask agentd started with,
        // not the daemon's private 0077.
        let mask = super::user_umask() as libc::mode_t;
        // SAFETY: the closure runs in the forked child before exec and only calls
        // umask(2), which is async-signal-safe and cannot fail.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(mask);
                Ok(())
            });
        }
        cmd.spawn().map_err(spawn_err)?
    };
    // process_group(0) makes the child a group leader: its pgid is its pid.
    let mut group = GroupKill {
        pgid: child.id().map(|p| p as i32).unwrap_or(0),
        armed: true,
    };
    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end).map_err(spawn_err)?;

    let mut buf: Vec<u8> = Vec::new();
    let mut discarded = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut status: Option<ExitStatus> = None;
    let mut eof = false;
    let started = Instant::now();
    let mut deadline = started + timeout;
    let mut stop: Option<Stop> = None;

    while !(eof && status.is_some()) {
        tokio::select! {
            r = rx.read(&mut chunk), if !eof => match r {
                Ok(0) => eof = true,
                Ok(n) => keep(&mut buf, &mut discarded, &chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => eof = true,
            },
            s = child.wait(), if status.is_none() => match s {
                Ok(s) => {
                    status = Some(s);
                    // Background processes may still hold the pipe; give them a moment.
                    deadline = deadline.min(Instant::now() + LINGER_AFTER_EXIT);
                }
                Err(e) => return Err(AgentError::internal(format!("waiting for bash: {e}"))),
            },
            _ = tokio::time::sleep_until(deadline) => {
                stop = Some(if status.is_some() { Stop::Lingering } else { Stop::Timeout });
                break;
            }
            _ = ctx.cancel.cancelled() => {
                stop = Some(Stop::Interrupted);
                break;
            }
        }
    }

    if stop.is_some() {
        group.kill();
        if let Some(p) = &prepared {
            p.kill_cgroup();
        }
        if status.is_none() {
            if let Ok(Ok(s)) = tokio::time::timeout(REAP_AFTER_KILL, child.wait()).await {
                status = Some(s);
            }
        }
        // Collect what the killed processes wrote before dying; a process outside the
        // group may hold the pipe forever, so this is bounded.
        let drain_until = Instant::now() + DRAIN_AFTER_KILL;
        while !eof {
            match tokio::time::timeout_at(drain_until, rx.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => keep(&mut buf, &mut discarded, &chunk[..n]),
                _ => eof = true,
            }
        }
    } else {
        // Finished on its own: whatever it left running in the background (with its
        // output redirected) is the user's to keep.
        group.armed = false;
    }

    let exit_code = status.map(exit_code_of);
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    let sandbox = prepared.map(|p| p.finish(&buf));
    if let Some(denials) = sandbox
        .as_ref()
        .and_then(|s| s.get("denials"))
        .and_then(|d| d.as_array())
    {
        for d in denials {
            if let Some(h) = d.get("hint").and_then(|h| h.as_str()) {
                text.push_str(&format!("\n[sandbox] {h}"));
            }
        }
    }
    if discarded > 0 {
        text.push_str(&format!("\n…[{discarded} further output bytes discarded]"));
    }
    let mut outcome = match stop {
        Some(Stop::Timeout) => ToolOutcome::failure(
            AgentError::new(
                ErrorKind::Timeout,
                format!(
                    "command timed out after {}s; its process group was killed",
                    timeout.as_secs()
                ),
            )
            .with_details(json!({"timeout_s": timeout.as_secs()})),
        ),
        Some(Stop::Interrupted) => ToolOutcome::failure(AgentError::new(
            ErrorKind::Interrupted,
            "command interrupted; its process group was killed",
        )),
        Some(Stop::Lingering) | None => {
            if stop == Some(Stop::Lingering) {
                text.push_str(
                    "\n…[background processes still holding the output were killed; redirect their output to keep them running]",
                );
            }
            let mut o = ToolOutcome::success(String::new());
            o.ok = exit_code == Some(0);
            o
        }
    };
    outcome.exit_code = exit_code;
    // The helper could not build the sandbox (nothing ran): say so with its kind.
    if let Some(msg) = sandbox
        .as_ref()
        .and_then(|s| s.get("error"))
        .and_then(|e| e.as_str())
    {
        if outcome.error.is_none() && exit_code == Some(agentd_sandbox::plan::SETUP_FAILED) {
            outcome.ok = false;
            outcome.error = Some(
                AgentError::new(
                    ErrorKind::SandboxUnavailable,
                    format!("the command sandbox could not be built: {msg}"),
                )
                .with_details(json!({"command": clip_chars(command, 160)})),
            );
        }
    }
    outcome.sandbox = sandbox;
    outcome.artifacts.push(Artifact {
        uri: format!("command:{}", clip_chars(command, 160)),
        kind: "command",
        sha256: Some(sha256_hex(&buf)),
    });
    Ok(with_output(outcome, &text, &buf, ctx))
}

fn keep(buf: &mut Vec<u8>, discarded: &mut usize, bytes: &[u8]) {
    let room = MAX_CAPTURE.saturating_sub(buf.len());
    let take = room.min(bytes.len());
    buf.extend_from_slice(&bytes[..take]);
    *discarded += bytes.len() - take;
}

fn exit_code_of(s: ExitStatus) -> i32 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => -1,
    }
}
