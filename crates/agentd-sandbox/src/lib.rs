//! The OS sandbox the model's commands run in (docs/sandbox.md#contract).
//!
//! - [`policy`]: modes, network, config, grants and the pure effective-policy function.
//! - [`env`]: the command's scrubbed environment.
//! - [`git`]: what the user's git runs later, found wherever it lives (protected before a
//!   command, audited and quarantined after it).
//! - [`hints`]: denials recognized in output, with the grant that would allow them.
//! - [`macos`]: the Seatbelt profile generator.
//! - [`plan`]: the daemon ↔ helper wire.
//! - [`trace`]: stage marks of a command's set-up, for profiling (feature `trace`).
//! - `linux`: the helper (namespaces, mounts, Landlock, seccomp), the daemon-side
//!   builder, cgroups (and their sweep), the lifeline that ends sandboxed processes with
//!   the daemon, and the socket peer check.
//!
//! The daemon binary calls [`is_helper_invocation`] / [`helper_main`] first thing in
//! `main`: the sandbox helper is the daemon re-executed with [`plan::HELPER_ARG`].

pub mod env;
pub mod git;
#[cfg(target_os = "linux")]
mod git_watch;
pub mod hints;
pub mod macos;
pub mod plan;
pub mod policy;
pub mod trace;

#[cfg(target_os = "linux")]
pub mod linux;

pub use policy::{
    effective, CachePreset, EffectivePolicy, Grant, Inputs, Mode, Network, OnUnavailable,
    SandboxConfig, SandboxRequest,
};

#[cfg(target_os = "linux")]
pub use linux::{
    cgroup::{Owners, Swept},
    helper::{helper_main, is_helper_invocation},
    peer::{is_sandboxed_peer, sandboxed_peer},
    spawn::{CommandRequest, Knobs, Limits, Prepared, Probe, Sandbox, Unavailable},
};
