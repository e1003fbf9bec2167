//! The turn engine (DESIGN §10).

use crate::registry::Registry;

/// Ends every running turn as interrupted, durably, before the daemon stops.
pub async fn interrupt_all(_registry: &Registry, _reason: &str) {}
