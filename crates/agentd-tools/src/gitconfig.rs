//! `git_config`: the narrow path for repository-local git identity keys
//! (docs/sandbox.md#git-config).
//!
//! Every git config file is read-only inside the sandbox, because many keys make the
//! user's own git run code later (`core.fsmonitor`, `core.hooksPath`, `alias.*`,
//! `filter.*`, `include.path`, `credential.helper`, `url.*.insteadOf`, ...). This tool
//! is run by the daemon, outside the sandbox, and sets only keys from
//! [`ALLOWED_KEYS`]: pure metadata that git records in commits and never executes. It
//! writes the repository's own `config` file (`git config --file GITDIR/config`, so
//! nothing in the repository can redirect it), never through a symlink, and answers with
//! what changed. Every other key is refused with `permission_denied`, saying why and
//! how to do it instead.

use crate::{ToolContext, ToolOutcome};
use agentd_proto::{AgentError, ErrorKind};
use serde::Deserialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const TOOL_NAME: &str = "git_config";

/// The keys `git_config` sets: who authored and committed, nothing git runs.
pub const ALLOWED_KEYS: [&str; 6] = [
    "user.name",
    "user.email",
    "author.name",
    "author.email",
    "committer.name",
    "committer.email",
];

/// Longest value accepted, in characters.
const MAX_VALUE_CHARS: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitConfigArgs {
    pub key: String,
    pub value: String,
}

/// Why a key is refused, and what to do instead.
fn refused(key: &str) -> AgentError {
    AgentError::new(
        ErrorKind::PermissionDenied,
        format!(
            "`git_config` sets only {} (identity metadata git never runs); `{}` is refused: \
             git config keys such as core.*, include.*, alias.*, filter.*, credential.* and \
             url.* make the user's own git run code, so the repository's config stays out \
             of the model's reach. For one command use `git -c KEY=VALUE ...`; otherwise \
             ask the user to run `git config --local KEY VALUE` outside the sandbox",
            ALLOWED_KEYS.join(", "),
            agentd_base::text::clip_chars(key, 128)
        ),
    )
    .with_details(json!({
        "key": agentd_base::text::clip_chars(key, 128),
        "reason": "git_config_key_not_allowed",
        "allowed": ALLOWED_KEYS,
    }))
}

/// The allowed key `key` names (git compares section and variable names without case).
fn allowed(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    ALLOWED_KEYS.iter().copied().find(|k| *k == lower)
}

/// The git directory of the repository holding `ws`: the nearest `.git` at or above
/// it, which must be a real directory (not a symlink, not a pointer file).
fn git_dir(ws: &Path) -> Result<PathBuf, AgentError> {
    let mut dir = Some(ws);
    while let Some(d) = dir {
        let dot = d.join(".git");
        match std::fs::symlink_metadata(&dot) {
            Ok(m) if m.is_dir() => return Ok(dot),
            Ok(_) => {
                return Err(AgentError::new(
                    ErrorKind::Unsupported,
                    format!(
                        "{} is not a plain git directory (a linked worktree, a submodule or \
                         a symlink); `git_config` writes only a repository's own config: ask \
                         the user to run `git config --local KEY VALUE` outside the sandbox",
                        dot.display()
                    ),
                )
                .with_details(json!({"path": dot})))
            }
            Err(_) => dir = d.parent(),
        }
    }
    Err(AgentError::new(
        ErrorKind::NotFound,
        "the workspace is not in a git repository (no `.git` at or above it)",
    ))
}

/// `git config --file FILE ARGS`, with no system, global or environment config.
fn git(file: &Path, args: &[&str]) -> Result<std::process::Output, AgentError> {
    let mut cmd = Command::new("git");
    cmd.arg("config").arg("--file").arg(file).args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::null())
        // Not in any repository: git looks for one from its directory even with `--file`.
        .current_dir("/");
    cmd.output().map_err(|e| {
        AgentError::new(
            ErrorKind::Unsupported,
            format!("cannot run git for `git_config`: {e}"),
        )
    })
}

/// Sets one allowed key in the workspace repository's config.
pub fn git_config(a: GitConfigArgs, ctx: &ToolContext) -> Result<ToolOutcome, AgentError> {
    let Some(key) = allowed(&a.key) else {
        return Err(refused(&a.key));
    };
    if a.value.trim().is_empty()
        || a.value.chars().count() > MAX_VALUE_CHARS
        || a.value.chars().any(char::is_control)
    {
        return Err(AgentError::invalid_args(format!(
            "`value` must be 1 to {MAX_VALUE_CHARS} characters with no control characters"
        ))
        .with_details(json!({"field": "value"})));
    }
    let gd = git_dir(&ctx.workspace)?;
    let file = gd.join("config");
    // Never through a symlink, never into a repository whose config lives elsewhere.
    let odd = match std::fs::symlink_metadata(&file) {
        Ok(m) => !m.is_file(),
        Err(_) => true,
    } || std::fs::symlink_metadata(gd.join("commondir")).is_ok();
    if odd {
        return Err(AgentError::new(
            ErrorKind::Unsupported,
            format!(
                "{} is not a plain config file of its repository; ask the user to run \
                 `git config --local KEY VALUE` outside the sandbox",
                file.display()
            ),
        )
        .with_details(json!({"path": file})));
    }
    let before = git(&file, &["--get", key])?;
    let old = before.status.success().then(|| {
        String::from_utf8_lossy(&before.stdout)
            .trim_end()
            .to_string()
    });
    let set = git(&file, &[key, &a.value])?;
    if !set.status.success() {
        return Err(AgentError::new(
            ErrorKind::Internal,
            format!(
                "git config {key} failed: {}",
                agentd_base::text::clip_chars(String::from_utf8_lossy(&set.stderr).trim(), 512)
            ),
        )
        .with_details(json!({"path": file, "exit_code": set.status.code()})));
    }
    let was = old.map_or("unset".to_string(), |o| format!("{o:?}"));
    Ok(ToolOutcome::success(format!(
        "set {key} in {}: was {was}, now {:?}",
        file.display(),
        a.value
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_identity_keys_are_allowed() {
        assert_eq!(allowed("user.email"), Some("user.email"));
        assert_eq!(allowed("User.Name"), Some("user.name"));
        for bad in [
            "core.hooksPath",
            "core.fsmonitor",
            "alias.x",
            "include.path",
            "includeIf.gitdir:/x.path",
            "filter.x.clean",
            "credential.helper",
            "url.x.insteadOf",
            "user.signingkey",
            "user.email.x",
            "user",
            "",
        ] {
            assert_eq!(allowed(bad), None, "{bad}");
            let e = refused(bad);
            assert_eq!(e.kind, ErrorKind::PermissionDenied);
            assert!(e.message.contains("outside the sandbox"), "{}", e.message);
        }
    }
}
