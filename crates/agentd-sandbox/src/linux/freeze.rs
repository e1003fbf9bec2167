//! Stopping a long-running sandboxed process tree between requests (the degraded
//! level's sandboxed MCP servers): without a mount namespace the protected paths are
//! only put back after each call, so a server left running between calls could plant a
//! hook the user's git runs before the next call. Its processes are therefore stopped
//! (`SIGSTOP`) once a call has ended, before the protected paths are checked and put
//! back, and continued (`SIGCONT`) just before the next request; what changes while it
//! is stopped is the user's own doing.
//!
//! Every process is held by a pidfd from the moment it is stopped, so a pid reused by
//! an unrelated process is never signalled. The tree is that of the degraded guard, a
//! child subreaper: a process that detaches (`setsid`, double forks) is reparented to
//! the guard and so still found. Passes repeat until one finds no process that is not
//! already stopped: a stopped process cannot fork, so the walk ends.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The processes a [`freeze`] stopped, each pinned by a pidfd.
#[derive(Debug, Default)]
pub struct Frozen {
    procs: BTreeMap<i32, OwnedFd>,
}

impl Frozen {
    /// How many processes are stopped.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Continues every stopped process (one that has exited since is skipped: its
    /// pidfd says so).
    pub fn thaw(self) {
        for fd in self.procs.values() {
            let _ = send(fd, libc::SIGCONT);
        }
    }
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn send(fd: &OwnedFd, sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: pidfd_send_signal on a pidfd we hold, no siginfo.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The children of `pid` (all its threads'), as the kernel lists them.
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let list = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        out.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    out
}

/// The first child of `pid` (the degraded helper's only child is its guard).
pub fn first_child(pid: i32) -> Option<i32> {
    children(pid).first().copied()
}

/// Every process below `root` (not `root` itself).
fn descendants(root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = children(root);
    while let Some(p) = todo.pop() {
        if out.contains(&p) {
            continue;
        }
        todo.extend(children(p));
        out.push(p);
    }
    out
}

/// The process state letter of `/proc/PID/stat` (`T` stopped, `Z` zombie, ...).
fn state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything; the state follows it.
    s.get(s.rfind(')')? + 1..)?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

fn settled(pid: i32) -> bool {
    // Gone, a zombie, or stopped: it runs no more code.
    matches!(state(pid), None | Some('T' | 't' | 'Z' | 'X' | 'x'))
}

/// Stops every process below `root` and returns them pinned, or an error when the tree
/// did not settle within `limit` (what was stopped stays stopped in the error case:
/// the caller kills the tree).
pub fn freeze(root: i32, limit: Duration) -> Result<Frozen, Frozen> {
    let end = Instant::now() + limit;
    let mut frozen = Frozen::default();
    loop {
        let mut new = 0;
        for pid in descendants(root) {
            if frozen.procs.contains_key(&pid) {
                continue;
            }
            let Ok(fd) = pidfd_open(pid) else {
                continue; // exited meanwhile
            };
            // The pidfd pins the process: checked once more that it is still below
            // `root` would be needed only if pids could be reused while it lives.
            if send(&fd, libc::SIGSTOP).is_ok() {
                frozen.procs.insert(pid, fd);
                new += 1;
            }
        }
        // A signal is delivered asynchronously: wait until each is stopped, so that the
        // next pass also sees what it forked on its last instant.
        let mut pending: Vec<i32> = frozen.procs.keys().copied().collect();
        let waited = Instant::now();
        while !pending.is_empty() {
            pending.retain(|p| !settled(*p));
            if pending.is_empty() {
                break;
            }
            if Instant::now() > end {
                return Err(frozen);
            }
            // A parent in `vfork` waits, uninterruptibly, for its child to exec or exit;
            // a child stopped before it did so keeps the parent from ever stopping. Let
            // such children go on (they are stopped again by the next pass, once they
            // have exec'd); the parent stops as soon as its wait ends.
            if waited.elapsed() > Duration::from_millis(20) {
                for p in &pending {
                    if state(*p) != Some('D') {
                        continue;
                    }
                    for c in children(*p) {
                        if let Some(fd) = frozen.procs.remove(&c) {
                            let _ = send(&fd, libc::SIGCONT);
                            new += 1;
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if new == 0 {
            return Ok(frozen);
        }
        if Instant::now() > end {
            return Err(frozen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_busy_tree_is_stopped_and_continued() {
        // `sh` stands in for the guard: below it a busy loop and a shell forking
        // `sleep` all the time.
        let mut root = Command::new("sh")
            .arg("-c")
            .arg("sh -c 'while :; do :; done' & sh -c 'while :; do sleep 0.01; done' & wait")
            .spawn()
            .unwrap();
        let pid = root.id() as i32;
        let end = Instant::now() + Duration::from_secs(30);
        while descendants(pid).len() < 2 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let f = freeze(pid, Duration::from_secs(30)).expect("settled");
        assert!(!f.is_empty());
        let pids: Vec<i32> = f.procs.keys().copied().collect();
        // Stopped, or gone: a `sleep` that ended just as its parent was stopped stays a
        // zombie (`Z`) until the parent runs again to reap it, and runs nothing.
        for p in &pids {
            assert!(
                matches!(state(*p), Some('T' | 't' | 'Z' | 'X') | None),
                "{p}: {:?}",
                state(*p)
            );
        }
        f.thaw();
        for p in &pids {
            let end = Instant::now() + Duration::from_secs(30);
            while state(*p) == Some('T') && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_ne!(state(*p), Some('T'), "{p} still stopped");
        }
        for p in descendants(pid) {
            // SAFETY: killing the test's own processes.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let _ = root.kill();
        let _ = root.wait();
    }
}
