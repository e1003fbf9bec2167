//! The daemon's lifeline: what makes every sandboxed process die with the daemon,
//! however the daemon ends (a clean exit, a crash, `SIGKILL`).
//!
//! The daemon makes one pipe, once per process. Both ends are close-on-exec, so no
//! process the daemon starts keeps the write end past its `exec`: the daemon is its only
//! holder, and the kernel closes it when the daemon dies. Each helper gets the read end
//! as [`LIFELINE_FD`] and its outer process waits on it together with its child
//! ([`wait_child`]). Nothing is ever written, so the only event the read end can give is
//! the hang-up of the daemon's death; then the helper ends the command:
//!
//! - with namespaces it kills pid 1 of the command's pid namespace, which takes every
//!   process of the namespace with it (`setsid`, double forks, daemons alike);
//! - degraded, it sends the guard the `SIGTERM` the guard also gets when the outer helper
//!   dies, and the guard kills every process below it (the subreaper collects them).
//!
//! A parent-death signal on the outer helper cannot do this: it fires when the *thread*
//! that forked the helper exits, and the daemon spawns from a pool whose threads retire
//! when idle, which would kill a long-lived MCP server.
//!
//! The descriptor is a bare pipe: it keeps none of the daemon's sockets or files open,
//! and the helper makes its copy close-on-exec and closes it in its children before they
//! run anything, so a command never holds it.

use crate::plan::{HELPER_ARG, LIFELINE_FD};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// The daemon's pipe: (read end, write end), both close-on-exec, above the descriptors
/// a helper's set-up uses. `None` when it could not be made (no descriptor left): helpers
/// then run without a lifeline, as before it existed.
static LINE: OnceLock<Option<(OwnedFd, OwnedFd)>> = OnceLock::new();

fn make() -> Option<(OwnedFd, OwnedFd)> {
    // Above the helper's fixed descriptors (3 to 7), so that setting those up in the
    // child never overwrites the source.
    super::fds::pipe_high().ok()
}

/// Daemon side: the read end to hand to a helper as [`LIFELINE_FD`] (the pipe is made on
/// first use and lives as long as the process).
pub fn read_end() -> Option<RawFd> {
    LINE.get_or_init(make).as_ref().map(|(r, _)| r.as_raw_fd())
}

/// In the child, between fork and exec (async-signal-safe): the lifeline at
/// [`LIFELINE_FD`], or that number closed when there is none, so the helper never takes
/// an unrelated inherited descriptor for it.
pub fn install(read: Option<RawFd>) -> std::io::Result<()> {
    // SAFETY: dup2/close are async-signal-safe and take plain descriptor numbers.
    unsafe {
        match read {
            Some(fd) => {
                if libc::dup2(fd, LIFELINE_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            None => {
                libc::close(LIFELINE_FD);
            }
        }
    }
    Ok(())
}

/// The helper `helper` as every helper is started, cold or spare: its argument, an empty
/// environment, `/`, and the lifeline put at its number in the child (the caller adds its own
/// descriptors with another `pre_exec`).
pub fn helper_command(helper: &Path) -> Command {
    let mut cmd = Command::new(helper);
    cmd.arg(HELPER_ARG).env_clear().current_dir("/");
    let line = read_end();
    // SAFETY: `install` only calls dup2/close, which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || install(line));
    }
    cmd
}

/// Helper side, first thing: the lifeline, when one came as [`LIFELINE_FD`], made
/// close-on-exec so that nothing the helper executes inherits it.
pub fn adopt() -> Option<RawFd> {
    // SAFETY: fcntl on a descriptor number; EBADF when absent.
    unsafe {
        if libc::fcntl(LIFELINE_FD, libc::F_GETFD) < 0 {
            return None;
        }
        libc::fcntl(LIFELINE_FD, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Some(LIFELINE_FD)
}

/// In a child of the helper (pid 1, the guard): drops its copy.
pub fn drop_in_child() {
    // SAFETY: closing a descriptor number (EBADF when absent).
    unsafe { libc::close(LIFELINE_FD) };
}

/// What [`wait_child`] saw first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The child exited (its `waitpid` status); it is reaped.
    Exited(libc::c_int),
    /// The daemon is gone; the child still runs (not reaped).
    DaemonGone,
    /// `waitpid` failed (the child is not ours, or already reaped).
    Lost,
}

/// Waits until `child` exits or the daemon dies, whichever comes first. `lifeline` is
/// the daemon's lifeline ([`LIFELINE_FD`] after [`adopt`]); without one this is a plain
/// `waitpid`. Sleeps in `poll` on the lifeline and a pidfd of the child; on a kernel
/// without pidfds (before 5.3) it looks at the child every 100 ms instead.
pub fn wait_child(child: libc::pid_t, lifeline: Option<RawFd>) -> Waited {
    // SAFETY: pidfd_open takes a pid and flags; a negative result is an error.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child, 0) } as libc::c_int;
    let waited = wait_loop(child, lifeline.unwrap_or(-1), pidfd);
    if pidfd >= 0 {
        // SAFETY: closing the pidfd opened above.
        unsafe { libc::close(pidfd) };
    }
    waited
}

fn wait_loop(child: libc::pid_t, mut line: RawFd, pidfd: libc::c_int) -> Waited {
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child without blocking.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if r == child {
            return Waited::Exited(status);
        }
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Waited::Lost;
        }
        let mut fds = [
            libc::pollfd {
                fd: line,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = if pidfd < 0 { 100 } else { -1 };
        // SAFETY: poll on two pollfds (a negative fd is ignored by the kernel).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // Cannot sleep in poll: a blocking wait, without the lifeline.
            return match blocking_wait(child) {
                Some(s) => Waited::Exited(s),
                None => Waited::Lost,
            };
        }
        let ev = fds[0].revents;
        if ev & libc::POLLNVAL != 0 {
            // Not a descriptor after all: no lifeline.
            line = -1;
            continue;
        }
        if line >= 0 && ev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            // Nothing is ever written: readable means end of file, the daemon's death.
            return Waited::DaemonGone;
        }
    }
}

fn blocking_wait(child: libc::pid_t) -> Option<libc::c_int> {
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(child, &mut status, 0) };
        if r == child {
            return Some(status);
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// Children waited on with a pipe standing in for the lifeline: one that exits is
    /// seen as exited with its status; closing the write end is seen as the daemon's
    /// death while the other child still runs.
    #[test]
    fn the_wait_ends_on_the_childs_exit_or_the_lifelines_hang_up() {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills two ints.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: pipe2 gave us both descriptors.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let spawn = |secs: &str| {
            std::process::Command::new("sleep")
                .arg(secs)
                .spawn()
                .expect("sleep")
        };
        let mut quick = spawn("0");
        let got = wait_child(quick.id() as i32, Some(r.as_raw_fd()));
        assert!(
            matches!(got, Waited::Exited(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0),
            "{got:?}"
        );
        // Reaped by wait_child already: std's own wait finds nothing left.
        assert!(quick.wait().is_err());
        let mut slow = spawn("30");
        let pid = slow.id() as i32;
        let closer = std::thread::spawn(move || drop(w));
        assert_eq!(wait_child(pid, Some(r.as_raw_fd())), Waited::DaemonGone);
        closer.join().unwrap();
        // Still running: the helper, not the wait, ends it.
        // SAFETY: kill(pid, 0) only checks existence.
        assert_eq!(unsafe { libc::kill(pid, 0) }, 0);
        slow.kill().unwrap();
        let _ = slow.wait();
        // Without a lifeline it is a plain wait.
        let mut quick = spawn("0");
        assert!(matches!(
            wait_child(quick.id() as i32, None),
            Waited::Exited(_)
        ));
        assert!(quick.wait().is_err());
    }
}
