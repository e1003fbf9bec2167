//! The Linux mechanism: the helper (namespaces, mounts, Landlock, seccomp), the
//! daemon-side builder, per-command cgroups, the lifeline that ends sandboxed processes
//! with the daemon, the socket peer check, and the test knobs.

pub mod cgroup;
pub mod clone;
pub mod confine;
pub mod fds;
pub mod freeze;
pub mod helper;
pub mod knobs;
pub mod lifeline;
pub mod mounts;
pub mod peer;
pub mod restore;
pub mod spare;
pub mod spawn;
