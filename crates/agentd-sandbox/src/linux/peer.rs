//! Whether a process talking to the daemon's socket runs inside a command sandbox.
//!
//! Decided from `/proc` for the pid `SO_PEERCRED` gave: a pid namespace other than the
//! daemon's (every full sandbox has its own), an ancestor that is a sandbox helper
//! (degraded sandboxes, where the helper is a subreaper so orphans stay below it), or
//! membership of a per-command cgroup. A pid the daemon cannot see (0) counts as
//! sandboxed: it comes from a pid namespace that is not a descendant of the daemon's.
//!
//! The pid `SO_PEERCRED` reports is the connecting process's at `connect` time. A
//! command can connect, hand the socket to a child and exit before the daemon looks:
//! then `/proc/PID` is gone (or, later, another process's). So [`sandboxed_peer`] pins
//! the peer first with `SO_PEERPIDFD` where the kernel has it (Linux 6.5+), refuses a
//! peer that has already exited, and checks again after reading `/proc` that the pidfd's
//! process is still alive (a live process keeps its pid, so what `/proc` said was about
//! it). Without a pidfd, a peer whose `/proc` entries cannot be read is refused the same
//! way: a gone peer is never a trusted one.

use crate::plan::HELPER_ARG;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `SO_PEERPIDFD` (Linux 6.5+); not in every libc crate version.
const SO_PEERPIDFD: libc::c_int = 77;

fn ns(pid: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn is_helper(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .is_some_and(|c| c.split(|b| *b == 0).nth(1) == Some(HELPER_ARG.as_bytes()))
}

/// What `SO_PEERPIDFD` says about the peer of `sock`.
enum PeerPidfd {
    /// The kernel has no `SO_PEERPIDFD` (or refuses it for this socket).
    Unsupported,
    /// The peer has exited and been reaped already.
    Gone,
    Pinned(OwnedFd),
}

fn peer_pidfd(sock: RawFd) -> PeerPidfd {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`.
    let rc = unsafe {
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 && fd >= 0 {
        // SAFETY: the kernel handed us a new descriptor that nobody else owns.
        return PeerPidfd::Pinned(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    match std::io::Error::last_os_error().raw_os_error() {
        // A reaped peer: EINVAL before Linux 6.16 (no task for the pid), ESRCH after.
        Some(libc::ESRCH) | Some(libc::EINVAL) => PeerPidfd::Gone,
        _ => PeerPidfd::Unsupported,
    }
}

/// Whether the process behind `pidfd` has exited (the pidfd polls readable then).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd with a zero timeout.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    rc != 0
}

/// `Some(reason)` when the peer of the connected socket `sock` (pid `pid` from
/// `SO_PEERCRED`) runs inside a command sandbox or is no longer there to be checked.
pub fn sandboxed_peer(sock: RawFd, pid: i32) -> Option<String> {
    let pinned = match peer_pidfd(sock) {
        PeerPidfd::Gone => return Some(format!("peer {pid} exited before it was checked")),
        PeerPidfd::Pinned(fd) => Some(fd),
        PeerPidfd::Unsupported => None,
    };
    if pinned.as_ref().is_some_and(exited) {
        return Some(format!("peer {pid} exited before it was checked"));
    }
    let verdict = is_sandboxed_peer(pid);
    if verdict.is_none() && pinned.as_ref().is_some_and(exited) {
        return Some(format!("peer {pid} exited while it was checked"));
    }
    verdict
}

/// `Some(reason)` when `pid` runs inside a command sandbox, or when its `/proc` entries
/// cannot be read (it is gone, so nothing about it can be trusted).
pub fn is_sandboxed_peer(pid: i32) -> Option<String> {
    if pid <= 0 {
        return Some("peer pid not visible from the daemon's pid namespace".into());
    }
    let gone = || {
        Some(format!(
            "peer {pid} is gone (its /proc entries cannot be read)"
        ))
    };
    let Some(theirs) = ns(&pid.to_string()) else {
        return gone();
    };
    if ns("self").is_some_and(|mine| mine != theirs) {
        return Some(format!("peer {pid} runs in another pid namespace"));
    }
    let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return gone();
    };
    if cgroup.contains("/agentd-sandbox/cmd-") {
        return Some(format!("peer {pid} is in a command cgroup"));
    }
    let me = std::process::id() as i32;
    let mut cur = pid;
    for _ in 0..4096 {
        if cur <= 1 || cur == me {
            break;
        }
        if is_helper(cur) {
            return Some(format!("peer {pid} descends from sandbox helper {cur}"));
        }
        match ppid(cur) {
            Some(p) => cur = p,
            // The peer itself or an ancestor exited mid-walk: its children were
            // reparented, so the chain above is no longer the one it started under.
            None => return Some(format!("peer {pid}'s ancestry changed while checked")),
        }
    }
    None
}
