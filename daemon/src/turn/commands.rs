//! The tool context a session's commands run in (its tools and its hooks): the
//! workspace, the provider keys removed from the environment and scrubbed from output,
//! and the command sandbox of the session's request, the turn's and the grants approved
//! for the session (docs/sandbox.md#contract).

use super::setup::TurnSpec;
use crate::registry::Registry;
use crate::session::SessionState;
use crate::tools::{self, ToolContext};
use agentd_proto::{AgentError, EventType};
use tokio_util::sync::CancellationToken;

/// A turn's tool context: its spec's environment, redaction and sandbox requests, with
/// the grants approved for the session.
pub(super) async fn tool_context(
    registry: &Registry,
    sid: &str,
    workspace: String,
    spec: &TurnSpec,
    cancel: &CancellationToken,
    session_grants: Vec<agentd_sandbox::Grant>,
) -> Result<ToolContext, AgentError> {
    let commands = Commands {
        env_remove: spec.env_remove.clone(),
        secrets: spec.secrets.clone(),
        sandbox_session: spec.sandbox_session,
        sandbox_turn: spec.sandbox_turn,
        grants: session_grants,
    };
    command_context(registry, sid, workspace, commands, cancel).await
}

/// What a [`ToolContext`]'s commands run with beyond the workspace.
pub(super) struct Commands {
    pub env_remove: Vec<String>,
    pub secrets: Vec<String>,
    pub sandbox_session: agentd_sandbox::SandboxRequest,
    pub sandbox_turn: agentd_sandbox::SandboxRequest,
    pub grants: Vec<agentd_sandbox::Grant>,
}

/// The tool context of a session's commands (tools and hooks), under its sandbox.
pub(super) async fn command_context(
    registry: &Registry,
    sid: &str,
    workspace: String,
    commands: Commands,
    cancel: &CancellationToken,
) -> Result<ToolContext, AgentError> {
    let resources = registry.home.resources_dir(sid)?;
    // Canonicalizing the workspace walks the filesystem: off the runtime's workers.
    let mut ctx =
        crate::filesystem::blocking(move || ToolContext::new(workspace, resources)).await??;
    ctx.cancel = cancel.clone();
    ctx.shell_env_remove = commands.env_remove;
    ctx.redact = commands.secrets;
    let session_grants = commands.grants;
    if let Some(rt) = crate::tools::sandboxing::runtime() {
        let inputs = crate::tools::sandboxing::inputs(
            &rt,
            &registry.config.sandbox,
            commands.sandbox_session,
            commands.sandbox_turn,
            &ctx.workspace,
        );
        let mut inputs = inputs;
        inputs.grants = session_grants;
        let policy = agentd_sandbox::effective(&inputs);
        let paths = crate::filesystem::blocking({
            let policy = policy.clone();
            move || Ok::<_, AgentError>(crate::tools::sandboxing::PathRules::from_policy(&policy))
        })
        .await??;
        ctx.paths = paths;
        ctx.sandbox = Some(crate::tools::sandboxing::CommandSandbox {
            runtime: rt,
            inputs,
            policy,
            on_unavailable: registry.config.sandbox.on_unavailable,
            limits: agentd_sandbox::Limits::from_config(&registry.config.sandbox),
        });
    }
    Ok(ctx)
}

/// Sandbox grants approved for the session: the `permission_decision`s that allowed a
/// `grant` with `scope: "session"` (docs/sandbox.md#escalation), in Log order.
pub(super) fn session_grants(st: &SessionState) -> Vec<agentd_sandbox::Grant> {
    st.events
        .iter()
        .filter(|e| e.event_type() == EventType::PermissionDecision)
        .map(|e| e.event())
        .filter(|e| {
            e.data.get("decision").and_then(|d| d.as_str()) == Some("allow")
                && e.data.get("scope").and_then(|d| d.as_str()) == Some("session")
        })
        .filter_map(|e| {
            tools::sandboxing::parse_grant(e.data.get("grant"))
                .ok()
                .flatten()
        })
        .flatten()
        .collect()
}
