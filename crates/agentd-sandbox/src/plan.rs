//! The wire between the daemon and the helper: the [`Plan`] the daemon writes on the
//! helper's fd 3 and the [`Report`] the helper writes on fd 4 just before it executes the
//! command. Both are one JSON document; neither ever travels in argv or the environment.

use crate::policy::Network;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The first argument that turns the daemon binary into the helper.
pub const HELPER_ARG: &str = "__sandbox-exec";
/// The second argument of a spare helper (the Linux `spare` module): started before
/// its command, it waits on fd 3 (a socket) for the command's descriptors.
pub const SPARE_ARG: &str = "spare";
/// The helper reads the plan from this descriptor.
pub const PLAN_FD: i32 = 3;
/// The helper writes its report on this descriptor (closed at exec).
pub const REPORT_FD: i32 = 4;
/// With [`Plan::join_net`]: a user namespace and its network namespace to join (held
/// open by the daemon) instead of creating a network namespace per command.
pub const NS_USER_FD: i32 = 5;
pub const NS_NET_FD: i32 = 6;
/// The read end of the daemon's lifeline (see `linux::lifeline`): a pipe whose write end
/// only the daemon holds. The outer helper watches it together with its child; its
/// hang-up means the daemon is gone, and the helper ends the command. Never passed on to
/// the command (close-on-exec, and closed in the helper's children).
pub const LIFELINE_FD: i32 = 7;
/// Exit status of the helper when it could not build the sandbox.
pub const SETUP_FAILED: i32 = 125;

/// What the helper builds and runs. Paths are canonical and were checked to exist by the
/// daemon; the helper re-resolves every one without following symlinks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Plan {
    /// The command (`argv[0]` is looked up on the plan's `PATH` when not absolute).
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub umask: u32,
    /// User, mount, pid, ipc, uts (and net unless `network = host`) namespaces.
    pub namespaces: bool,
    pub network: Network,
    /// Writable beneath (the private `/tmp` is added in namespace mode, `tmp_dir`
    /// otherwise).
    pub writable: Vec<PathBuf>,
    pub hidden: Vec<PathBuf>,
    /// Protected (read-only) inside writable roots.
    pub protected: Vec<PathBuf>,
    /// `.git` directories bound over themselves (writable) before the protected paths,
    /// so that they cannot be renamed, replaced or removed.
    #[serde(default)]
    pub pinned: Vec<PathBuf>,
    /// Without namespaces: the per-command temporary directory (`TMPDIR`).
    pub tmp_dir: Option<PathBuf>,
    pub landlock: bool,
    pub seccomp: bool,
    /// `cgroup.procs` files the helper joins before anything else (unless
    /// `cgroup_dir` is used).
    pub cgroup_procs: Vec<PathBuf>,
    /// cgroup v2: the command's cgroup directory. The helper creates its first child in
    /// it (`clone3` with `CLONE_INTO_CGROUP`) instead of joining `cgroup_procs`, which
    /// costs an RCU grace period; `cgroup_procs` when the kernel refuses `clone3`.
    #[serde(default)]
    pub cgroup_dir: Option<PathBuf>,
    /// `RLIMIT_NPROC` for the command (non-root without a cgroup).
    pub nproc: Option<u64>,
    /// Build the namespaces and mounts, then exit 0 without running anything.
    pub probe: bool,
    /// Join the daemon's empty network namespace (fds 5 and 6) rather than creating one:
    /// creating a network namespace is most of the set-up cost.
    pub join_net: bool,
    /// Create a user and an empty network namespace, report, and wait on stdin (the
    /// daemon opens the two namespaces and ends it).
    pub holder: bool,
    /// Fail the mount plan on purpose (the daemon's `fail_setup` test knob).
    pub fail_setup: bool,
    /// Unix sockets granted by path (canonical): bound back into an emptied `/run` or
    /// the private `/tmp`, never covered.
    #[serde(default)]
    pub sockets: Vec<PathBuf>,
    /// Host sockets to cover with `/dev/null` (canonical paths bound on the host when
    /// the command was prepared): with network `none` every one the command could see,
    /// with `host` the container engines'.
    #[serde(default)]
    pub cover_sockets: Vec<PathBuf>,
    /// Network `none` in a network namespace of the sandbox's own, whose loopback is
    /// up: inet sockets are allowed, and reach nothing but that loopback.
    #[serde(default)]
    pub loopback: bool,
    /// Without a mount namespace and without a socket grant: seccomp refuses
    /// `socket(AF_UNIX)` (`socketpair` stays allowed).
    #[serde(default)]
    pub refuse_unix: bool,
    /// Granted caches at the full level: each mounted as an overlay, the host's cache
    /// the read-only lower layer, a directory of the workspace's own (kept by the
    /// daemon, hidden) the upper one: what a command writes there never reaches the
    /// caches the user's own builds read.
    #[serde(default)]
    pub cache_layers: Vec<CacheLayer>,
    /// Landlock scopes abstract sockets only, not signals, as before Landlock ABI 6 (the
    /// daemon's `no_signal_scope` test knob).
    #[serde(default)]
    pub no_signal_scope: bool,
    /// Degraded and without Landlock's signal scoping: seccomp refuses the signals a
    /// command could aim at the processes that end it (the guard, the outer helper, the
    /// daemon, `-1`).
    #[serde(default)]
    pub guard_keepers: bool,
}

/// One cache overlay of [`Plan::cache_layers`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheLayer {
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// What the helper put in force, written just before exec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `full` or `degraded`.
    pub level: String,
    pub namespaces: Vec<String>,
    /// `fresh` or `host`.
    pub proc: String,
    pub landlock_abi: i32,
    /// `fully_enforced`, `partially_enforced`, `not_enforced` or `off`.
    pub landlock: String,
    pub seccomp: bool,
    pub caps_dropped: bool,
    pub no_new_privs: bool,
    pub protected: Vec<PathBuf>,
    /// Protected paths that were symlinks: their parent was made read-only instead.
    pub protected_parent: Vec<PathBuf>,
    /// `.git` directories pinned in place.
    #[serde(default)]
    pub pinned: Vec<PathBuf>,
    pub hidden_mounted: usize,
    /// Caches mounted as overlays; `cache_layers_failed`: those that could not be (made
    /// read-only instead), with the error.
    #[serde(default)]
    pub cache_layers: Vec<PathBuf>,
    #[serde(default)]
    pub cache_layers_failed: Vec<String>,
    /// Host sockets covered (`/dev/null` bound over them).
    #[serde(default)]
    pub sockets_covered: usize,
    pub cgroup: bool,
    /// The helper's stage marks (feature `trace` only; see [`crate::trace`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: crate::trace::Marks,
    /// Set when the helper failed; nothing ran.
    pub error: Option<String>,
}
