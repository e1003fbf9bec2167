//! `pre_compact` hooks for a compaction the user asked for (`agentd/compact`,
//! `agentctl compact`; docs/hooks.md#events). A turn's own compactions fire them from
//! the engine with trigger `auto`; this fires them with trigger `manual`, once the plan
//! shows something will be compacted, and records their runs ahead of the
//! `history_compaction`.
//!
//! No turn runs here, so the hook's stdin has `turn_id: null` and its `hook_run` has no
//! `turn_id`. It runs under the session's sandbox (its `session_started` request and the
//! sandbox grants approved for the session), with the provider keys removed from its
//! environment, as a hook in a turn does; `permission_mode` is the daemon's default
//! (`[turns] permission_mode`).

use super::commands::{command_context, session_grants, Commands};
use super::TurnManager;
use crate::history::compaction::CompactOptions;
use crate::session::SessionHandle;
use agentd_proto::AgentError;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The matcher subject and stdin `trigger` of a user's compaction.
pub const MANUAL: &str = "manual";

/// Whether a compaction with `opts` would record something now.
pub(super) async fn will_compact(
    h: &SessionHandle,
    opts: &CompactOptions,
) -> Result<bool, AgentError> {
    let o = opts.clone();
    h.query_blocking(move |st| crate::ops::plan_compaction(st, &o).compactable)
        .await
}

/// Runs the `pre_compact` hooks before a manual compaction that will record something;
/// their runs are appended before it.
pub(super) async fn before_manual(
    turns: &Arc<TurnManager>,
    h: &SessionHandle,
    opts: &CompactOptions,
) -> Result<(), AgentError> {
    let registry = &turns.registry;
    let o = opts.clone();
    let (compactable, workspace, grants) = h
        .query_blocking(move |st| {
            (
                crate::ops::plan_compaction(st, &o).compactable,
                st.workspace().to_string(),
                session_grants(st),
            )
        })
        .await?;
    if !compactable {
        return Ok(());
    }
    let hooks = {
        let cfg = registry.config.hooks.clone();
        let home = registry.home.root().to_path_buf();
        let ws = std::path::PathBuf::from(&workspace);
        crate::filesystem::blocking(move || crate::hooks::Hooks::load(&cfg, &home, &ws)).await?
    };
    if hooks.is_empty() {
        return Ok(());
    }
    let (env_remove, secrets) =
        super::setup::provider_secrets(&super::setup::providers_config(&registry.config));
    let commands = Commands {
        env_remove,
        secrets: secrets.clone(),
        sandbox_session: super::setup::session_sandbox(h).await?,
        sandbox_turn: Default::default(),
        grants,
    };
    let sid = h.id.to_string();
    let cancel = CancellationToken::new();
    let tools = command_context(registry, &sid, workspace, commands, &cancel).await?;
    let at = crate::hooks::At {
        session_id: &sid,
        turn_id: None,
        permission_mode: registry.config.turns.permission_mode.as_str(),
        tools: &tools,
    };
    let mut drafts = hooks.pre_compact(MANUAL, &at).await;
    if drafts.is_empty() {
        return Ok(());
    }
    for d in &mut drafts {
        crate::tools::redact_value(&mut d.data, &secrets);
    }
    h.append(drafts, None).await?;
    Ok(())
}
