//! Daemon-side switches that simulate a kernel without a feature
//! (`AGENTD_SANDBOX_FORCE`, docs/sandbox.md#tests).

use serde::Serialize;

/// Daemon-side switches that simulate a kernel without a feature. They come from the
/// daemon's own environment or config, never from a command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Knobs {
    pub force_no_userns: bool,
    pub force_no_landlock: bool,
    pub force_no_seccomp: bool,
    /// The helper's mount plan fails (a sandbox that cannot be built mid-way).
    pub fail_setup: bool,
    /// No spare helper: every command starts its own (see [`Sandbox::with_spares`](crate::Sandbox::with_spares)).
    pub no_spare: bool,
    /// Landlock does not scope signals, as on a kernel before Landlock ABI 6 (6.12).
    pub no_signal_scope: bool,
}

impl Knobs {
    /// Parses `no_userns,no_landlock,no_seccomp,fail_setup,no_spare,no_signal_scope`
    /// (any subset, comma separated).
    pub fn parse(s: &str) -> Knobs {
        let mut k = Knobs::default();
        for part in s.split(',').map(str::trim) {
            match part {
                "no_userns" => k.force_no_userns = true,
                "no_landlock" => k.force_no_landlock = true,
                "no_seccomp" => k.force_no_seccomp = true,
                "fail_setup" => k.fail_setup = true,
                "no_spare" => k.no_spare = true,
                "no_signal_scope" => k.no_signal_scope = true,
                _ => {}
            }
        }
        k
    }

    /// Whether Landlock scopes a command's signals to its own domain: from ABI 6
    /// (Linux 6.12), unless the `no_signal_scope` knob takes it away.
    pub fn signal_scope(&self, landlock_abi: i32) -> bool {
        landlock_abi >= 6 && !self.no_signal_scope
    }
}
