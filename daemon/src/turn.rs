//! The turn engine (DESIGN §10).

use crate::api::Api;
use crate::registry::Registry;
use jsonrpsee::RpcModule;

/// Registers `agentd/turn` and `agentd/interrupt`.
pub fn register(_m: &mut RpcModule<Api>) {}

/// Ends every running turn as interrupted, durably, before the daemon stops.
pub async fn interrupt_all(_registry: &Registry, _reason: &str) {}

/// `agentd/compact`: deterministic, or `model` with fallback to deterministic.
pub async fn compact_with_strategy(
    _registry: &std::sync::Arc<Registry>,
    h: &crate::session::SessionHandle,
    opts: crate::history::compaction::CompactOptions,
    dry_run: bool,
) -> Result<serde_json::Value, agentd_proto::AgentError> {
    crate::ops::compact(h, opts, dry_run, None).await
}
