//! Filesystem checks and hashing that several layers share: the workspace rule of
//! `agentd/create` and `agentd/import`, and the current hash behind an artifact uri
//! (fact validity, docs/history-rules.md#checkpoint). Blocking calls: callers on the runtime keep them short
//! or move them to the blocking pool.

use agentd_proto::AgentError;
use serde_json::json;
use std::path::Path;

/// Runs blocking filesystem work (stat walks, hashing, reading) on the blocking pool,
/// never on a runtime worker.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AgentError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AgentError::internal(format!("blocking task: {e}")))
}

/// [`check_workspace`] on the blocking pool (it canonicalizes: one syscall per path
/// component, each of which may wait on a slow or remote filesystem).
pub async fn check_workspace_async(ws: String) -> Result<String, AgentError> {
    blocking(move || check_workspace(&ws)).await?
}

/// The canonical form of a workspace filter, or the text as given when it does not
/// resolve (a deleted directory still names its sessions), on the blocking pool.
pub async fn canonical_or_given(ws: String) -> String {
    blocking(move || {
        Path::new(&ws)
            .canonicalize()
            .map_or_else(|_| ws.clone(), |c| c.display().to_string())
    })
    .await
    .unwrap_or_default()
}

/// A workspace must be an absolute path to an existing directory; the canonical path
/// is what the Log records (symlinks resolved once, at creation).
pub fn check_workspace(ws: &str) -> Result<String, AgentError> {
    let path = Path::new(ws);
    if !path.is_absolute() {
        return Err(
            AgentError::invalid_args("workspace must be an absolute path")
                .with_details(json!({"field": "workspace"})),
        );
    }
    let canon = path.canonicalize().map_err(|e| {
        AgentError::invalid_args(format!("workspace {ws}: {e}"))
            .with_details(json!({"field": "workspace"}))
    })?;
    if !canon.is_dir() {
        return Err(AgentError::invalid_args(format!(
            "workspace {ws} is not a directory"
        )));
    }
    canon
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| AgentError::invalid_args("workspace path is not valid UTF-8"))
}

/// The current sha256 behind an artifact uri, for fact validity (docs/history-rules.md#checkpoint). Workspace files
/// are read now; `resource:<sha256>` names content-addressed bytes in the session's
/// resources directory, which never change, so the name is its hash while the file
/// exists. `None` (unknown) when a file is missing, unreadable or outside the
/// workspace, and for `command:` outputs, which cannot be re-observed: an unknown hash
/// makes dependent facts SUSPECT, which is the safe side.
pub fn current_hash(workspace: &Path, resources: &Path, uri: &str) -> Option<String> {
    if let Some(sha) = uri.strip_prefix("resource:") {
        let valid = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
        return (valid && resources.join(sha).is_file()).then(|| sha.to_ascii_lowercase());
    }
    if uri.starts_with("command:") {
        return None;
    }
    let path = crate::tools::workspace::resolve(
        workspace,
        uri,
        crate::tools::workspace::Resolve::Existing,
    )
    .ok()?;
    let bytes = std::fs::read(path).ok()?;
    Some(crate::text::sha256_hex(&bytes))
}
