//! Whether a process talking to the daemon's socket runs inside a command sandbox.
//!
//! Decided from `/proc` for the pid `SO_PEERCRED` gave: a pid namespace other than the
//! daemon's (every full sandbox has its own), an ancestor that is a sandbox helper
//! (degraded sandboxes, where the helper is a subreaper so orphans stay below it), or
//! membership of a per-command cgroup. A pid the daemon cannot see (0) counts as
//! sandboxed: it comes from a pid namespace that is not a descendant of the daemon's.

use crate::plan::HELPER_ARG;

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

/// `Some(reason)` when `pid` runs inside a command sandbox.
pub fn is_sandboxed_peer(pid: i32) -> Option<String> {
    if pid <= 0 {
        return Some("peer pid not visible from the daemon's pid namespace".into());
    }
    if let (Some(mine), Some(theirs)) = (ns("self"), ns(&pid.to_string())) {
        if mine != theirs {
            return Some(format!("peer {pid} runs in another pid namespace"));
        }
    }
    if std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.contains("/agentd-sandbox/cmd-"))
    {
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
            None => break,
        }
    }
    None
}
