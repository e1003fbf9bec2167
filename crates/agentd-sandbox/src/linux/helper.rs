//! The helper process: the daemon binary re-executed with [`HELPER_ARG`]. It reads the
//! [`Plan`] from fd 3, builds the sandbox and executes the command.
//!
//! Process shape with namespaces:
//!
//! ```text
//! helper (outer)      joins the cgroup (v1 only), unshare(user|mnt|pid|ipc|uts[|net]),
//!   │                  maps ids; waits for pid 1 or the daemon's death (lifeline), then
//!   │                  kills pid 1
//!   └─ pid 1 (reaper) created in the cgroup (v2), fresh /proc, mount plan, waits for the
//!        │             command; its exit takes every process left in the pid namespace
//!        │             down with it
//!        └─ command    setsid, caps dropped, no_new_privs, Landlock, seccomp, execve
//! ```
//!
//! Without namespaces (degraded):
//!
//! ```text
//! helper (outer)      joins the cgroup (v1 only); subreaper; killed with its process
//!   │                  group to end the command; on the daemon's death (lifeline)
//!   │                  SIGKILLs the guard and every orphan that comes to it
//!   └─ guard          created in the cgroup (v2); own process group, subreaper; on the
//!        │             command's exit or the outer helper's death (parent-death
//!        │             signal) kills every descendant
//!        └─ command    caps dropped, no_new_privs, Landlock, seccomp (without
//!                      Landlock's signal scoping: no signal to the guard, the outer
//!                      helper, the daemon or -1), execve
//! ```
//!
//! Whatever ends the daemon, the outer helper sees it on the lifeline
//! ([`super::lifeline`]) and ends the command as above: nothing sandboxed outlives the
//! daemon.
//!
//! The helper is single-threaded, so it may allocate freely between fork and exec.

use super::lifeline::{self, Waited};
use super::{clone, confine, mounts};
use crate::plan::{
    Plan, Report, HELPER_ARG, LIFELINE_FD, NS_NET_FD, NS_USER_FD, PLAN_FD, REPORT_FD, SETUP_FAILED,
    SPARE_ARG,
};
use crate::policy::Network;
use crate::trace::mark;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Whether this process was started as the helper.
pub fn is_helper_invocation() -> bool {
    std::env::args_os().nth(1).is_some_and(|a| a == HELPER_ARG)
}

fn fail(report: &mut Report, msg: String) -> ! {
    report.error = Some(msg.clone());
    write_report(report);
    let _ = writeln!(std::io::stderr(), "agentd sandbox: {msg}");
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(SETUP_FAILED) }
}

fn write_report(report: &Report) {
    let mut line = serde_json::to_vec(report).unwrap_or_default();
    line.push(b'\n');
    // SAFETY: REPORT_FD is the descriptor the daemon handed us (or closed: EBADF).
    unsafe {
        libc::write(REPORT_FD, line.as_ptr().cast(), line.len());
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Runs the helper. Never returns.
pub fn helper_main() -> ! {
    let mut report = Report::default();
    // A spare: started ahead of its command, it waits for the command's descriptors and
    // then goes on as a cold helper, its cgroup already joined.
    let joined = if std::env::args_os().nth(2).is_some_and(|a| a == SPARE_ARG) {
        super::spare::wait_for_command(&mut report)
    } else {
        Vec::new()
    };
    mark(&mut report.marks, "helper: started");
    let line = lifeline::adopt();
    // SAFETY: PLAN_FD was set up by the daemon; from_raw_fd takes ownership and closes it.
    let mut plan_file = unsafe { std::fs::File::from_raw_fd(PLAN_FD) };
    let mut buf = Vec::new();
    if let Err(e) = plan_file.read_to_end(&mut buf) {
        fail(&mut report, format!("reading the plan: {e}"));
    }
    drop(plan_file);
    let plan: Plan = match serde_json::from_slice(&buf) {
        Ok(p) => p,
        Err(e) => fail(&mut report, format!("bad plan: {e}")),
    };
    // Only 0/1/2, the report descriptor (and the namespaces to join) and the lifeline
    // survive; the report and the lifeline close at exec.
    // SAFETY: plain syscalls on descriptor numbers.
    unsafe {
        libc::fcntl(REPORT_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        let first = if plan.join_net { NS_NET_FD } else { REPORT_FD } as u32 + 1;
        let line = LIFELINE_FD as u32;
        if first < line {
            libc::syscall(libc::SYS_close_range, first, line - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, first.max(line + 1), u32::MAX, 0u32);
        libc::close(PLAN_FD);
    }
    mark(&mut report.marks, "helper: plan read");
    if plan.holder {
        hold_namespaces(report)
    }
    // cgroup v2: the first child (pid 1, or the guard) is created in the command's
    // cgroup, and the command below it; this process stays out. Otherwise it moves
    // itself in first, which costs an RCU grace period (see `clone.rs`).
    let cgroup = match &plan.cgroup_dir {
        Some(dir) if clone::clone3_available() => match clone::open_cgroup(dir) {
            Ok(fd) => Some(fd),
            Err(e) => fail(&mut report, format!("opening {}: {e}", dir.display())),
        },
        _ => {
            for procs in &plan.cgroup_procs {
                if joined.contains(procs) {
                    continue;
                }
                match std::fs::write(procs, "0") {
                    Ok(()) => report.cgroup = true,
                    Err(e) => fail(&mut report, format!("joining {}: {e}", procs.display())),
                }
            }
            None
        }
    };
    mark(&mut report.marks, "helper: cgroup joined");
    confine::set_rlimits();
    if let Some(n) = plan.nproc {
        confine::set_nproc(n);
    }
    if plan.namespaces {
        with_namespaces(&plan, report, cgroup.as_ref(), line)
    } else {
        degraded(&plan, report, cgroup.as_ref(), line)
    }
}

/// `fork`, the child created in the command's cgroup when `cgroup` is given (the
/// report says so in the child); fails the set-up when that is refused.
fn fork_child(report: &mut Report, cgroup: Option<&OwnedFd>) -> libc::pid_t {
    let Some(cg) = cgroup else {
        // SAFETY: the helper is single-threaded; the child runs our code only.
        return unsafe { libc::fork() };
    };
    // SAFETY: as for fork above.
    match unsafe { clone::fork_into(cg) } {
        Ok(0) => {
            report.cgroup = true;
            0
        }
        Ok(pid) => pid,
        Err(e) => fail(
            report,
            format!("creating the command's process in its cgroup: {e}"),
        ),
    }
}

fn write_maps(report: &mut Report, uid: libc::uid_t, gid: libc::gid_t) {
    let maps = [
        ("/proc/self/setgroups", "deny".to_string()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (file, text) in maps {
        if let Err(e) = std::fs::write(file, text) {
            fail(report, format!("writing {file}: {e}"));
        }
    }
}

/// `struct ifreq` as `SIOCGIFFLAGS`/`SIOCSIFFLAGS` use it: the name, then the flags
/// (the rest of the 40-byte union unused).
#[repr(C)]
struct IfreqFlags {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Brings `lo` up in the current network namespace (we hold `CAP_NET_ADMIN` in the user
/// namespace that owns it), so that a command with network `none` can serve and reach
/// 127.0.0.1 and ::1 — its own loopback, nothing else.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a socket used only for two ioctls on a correctly sized ifreq, then closed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let mut req = IfreqFlags {
            name: [0; 16],
            flags: 0,
            _pad: [0; 22],
        };
        req.name[..2].copy_from_slice(b"lo");
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req as *mut IfreqFlags);
        if rc == 0 {
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req as *const IfreqFlags);
        }
        let e = errno();
        libc::close(fd);
        if rc != 0 {
            return Err(e);
        }
    }
    Ok(())
}

/// A network namespace for commands with network `none` (and the user namespace owning
/// it), its loopback up: created, reported, then held until the daemon has opened both
/// and closes our stdin.
fn hold_namespaces(mut report: Report) -> ! {
    // SAFETY: getuid/getgid never fail; unshare takes flags (single-threaded).
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        fail(&mut report, format!("unshare: {}", errno()));
    }
    write_maps(&mut report, uid, gid);
    if let Err(e) = loopback_up() {
        fail(&mut report, format!("bringing lo up: {e}"));
    }
    report.level = "holder".into();
    write_report(&report);
    // SAFETY: closing the report descriptor; then block until stdin closes.
    unsafe { libc::close(REPORT_FD) };
    let mut b = [0u8; 1];
    let _ = std::io::stdin().read(&mut b);
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(0) }
}

fn with_namespaces(
    plan: &Plan,
    mut report: Report,
    cgroup: Option<&OwnedFd>,
    line: Option<RawFd>,
) -> ! {
    // SAFETY: getuid/getgid never fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut shared_net = false;
    if plan.join_net && plan.network == Network::None {
        // SAFETY: setns with descriptors the daemon passed; single-threaded process.
        let ok = unsafe {
            libc::setns(NS_USER_FD, libc::CLONE_NEWUSER) == 0
                && libc::setns(NS_NET_FD, libc::CLONE_NEWNET) == 0
        };
        if !ok {
            fail(
                &mut report,
                format!("joining the daemon's network namespace: {}", errno()),
            );
        }
        shared_net = true;
        mark(&mut report.marks, "ns: network namespace joined");
    }
    // SAFETY: closing descriptors we no longer need (EBADF when absent).
    unsafe {
        libc::close(NS_USER_FD);
        libc::close(NS_NET_FD);
    }
    let mut flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    let mut names = vec!["user", "mount", "pid", "ipc", "uts"];
    if plan.network == Network::None {
        if !shared_net {
            flags |= libc::CLONE_NEWNET;
        }
        names.push(if shared_net {
            "net(per workspace, loopback only)"
        } else {
            "net(loopback only)"
        });
    }
    // SAFETY: unshare takes flags; the helper is single-threaded.
    if unsafe { libc::unshare(flags) } != 0 {
        fail(&mut report, format!("unshare: {}", errno()));
    }
    mark(&mut report.marks, "ns: unshare");
    report.namespaces = names.into_iter().map(String::from).collect();
    write_maps(&mut report, uid, gid);
    if plan.network == Network::None && !shared_net && plan.loopback {
        if let Err(e) = loopback_up() {
            fail(&mut report, format!("bringing lo up: {e}"));
        }
    }
    if let Err(e) = mounts::make_private() {
        fail(&mut report, format!("making mounts private: {e}"));
    }
    mark(&mut report.marks, "ns: ids mapped, mounts private");
    let pid = fork_child(&mut report, cgroup);
    if pid < 0 {
        fail(&mut report, format!("fork: {}", errno()));
    }
    if pid > 0 {
        // SAFETY: closing our copy of the report descriptor.
        unsafe { libc::close(REPORT_FD) };
        let status = match lifeline::wait_child(pid, line) {
            Waited::Exited(status) => status,
            // pid 1 takes every process of its pid namespace with it.
            Waited::DaemonGone => signal_and_reap(pid, libc::SIGKILL),
            // SAFETY: _exit has no preconditions.
            Waited::Lost => unsafe { libc::_exit(SETUP_FAILED) },
        };
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(exit_code(status)) }
    }
    // pid 1 of the new namespace.
    lifeline::drop_in_child();
    mark(&mut report.marks, "pid 1: forked");
    // SAFETY: plain prctl; the parent is the outer helper.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
    }
    report.proc = match mounts::fresh_proc() {
        Ok(()) => "fresh".into(),
        Err(_) => "host".into(),
    };
    let _ = mounts::set_hostname();
    mark(&mut report.marks, "pid 1: /proc mounted");
    if let Err(e) = mounts::apply(plan, &mut report) {
        fail(&mut report, e);
    }
    if plan.probe {
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(0) }
    }
    report.level = "full".into();
    // SAFETY: single-threaded; the child runs our code until exec.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail(&mut report, format!("fork: {}", errno()));
    }
    if child == 0 {
        mark(&mut report.marks, "command: forked");
        // SAFETY: setsid has no preconditions; a new session has no controlling
        // terminal, so TIOCSTI has no target even before seccomp.
        unsafe { libc::setsid() };
        run_command(plan, report, None);
    }
    // SAFETY: closing our copy of the report descriptor.
    unsafe { libc::close(REPORT_FD) };
    reap_until(child)
}

/// Sends `sig` to our child `pid` and reaps it; its wait status.
fn signal_and_reap(pid: libc::pid_t, sig: libc::c_int) -> libc::c_int {
    let mut status = 0;
    // SAFETY: signalling our own child, then waiting for it.
    unsafe {
        libc::kill(pid, sig);
        while libc::waitpid(pid, &mut status, 0) < 0 && errno().raw_os_error() == Some(libc::EINTR)
        {
        }
    }
    status
}

/// As pid 1 (or a subreaper): reap everything until `child` exits, then exit with its
/// status.
fn reap_until(child: libc::pid_t) -> ! {
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == child {
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(exit_code(status)) }
        }
        if r < 0 && errno().raw_os_error() == Some(libc::ECHILD) {
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(SETUP_FAILED) }
        }
    }
}

fn degraded(plan: &Plan, mut report: Report, cgroup: Option<&OwnedFd>, line: Option<RawFd>) -> ! {
    report.level = "degraded".into();
    report.proc = "host".into();
    // SAFETY: getpid/getppid never fail; prctl takes plain integers. The outer helper
    // is a subreaper too: should the guard itself be killed, its orphans come here and
    // are killed below. Its parent is the daemon (which started it, or its spare).
    let (outer, daemon) = unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        (libc::getpid(), libc::getppid())
    };
    let guard = fork_child(&mut report, cgroup);
    if guard < 0 {
        fail(&mut report, format!("fork: {}", errno()));
    }
    if guard == 0 {
        lifeline::drop_in_child();
        mark(&mut report.marks, "guard: forked");
        guard_main(plan, report, outer, daemon);
    }
    // SAFETY: closing our copy of the report descriptor.
    unsafe { libc::close(REPORT_FD) };
    let status = match lifeline::wait_child(guard, line) {
        Waited::Exited(status) => status,
        // The guard is killed outright: a SIGTERM could stay pending for ever in a guard
        // something stopped, and waiting for it would block here. Its orphans come to
        // this subreaper, and `kill_descendants` ends them.
        Waited::DaemonGone => signal_and_reap(guard, libc::SIGKILL),
        Waited::Lost => 0,
    };
    kill_descendants();
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(exit_code(status)) }
}

/// The degraded sandbox's guard: a child subreaper between the outer helper and the
/// command, in a process group of its own. The daemon ends a command (timeout,
/// interrupt, a dropped call) by killing the outer helper's process group; the guard is
/// not in it, gets the outer helper's death as `SIGTERM` (parent-death signal) and kills
/// every process the command started, however it detached itself (`setsid`, double
/// forks), because orphans are reparented to the guard, not to init. It does the same
/// when the command exits on its own.
fn guard_main(plan: &Plan, mut report: Report, outer: libc::pid_t, daemon: libc::pid_t) -> ! {
    // SAFETY: plain signal-mask and prctl calls on a single-threaded process; the
    // sigset_t values are initialized by sigemptyset before use.
    let (sfd, old) = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
        if libc::getppid() != outer {
            // The outer helper is already gone: run nothing.
            libc::_exit(SETUP_FAILED);
        }
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        (libc::signalfd(-1, &set, libc::SFD_CLOEXEC), old)
    };
    if sfd < 0 {
        fail(&mut report, format!("signalfd: {}", errno()));
    }
    // SAFETY: single-threaded; the child runs our code until exec.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail(&mut report, format!("fork: {}", errno()));
    }
    if child == 0 {
        mark(&mut report.marks, "command: forked");
        // SAFETY: restoring the mask we inherited; prctl takes plain integers; a new
        // session has no controlling terminal (no `/dev/tty` of the daemon's).
        unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::setsid();
        }
        let keepers = confine::Keepers {
            // SAFETY: getppid never fails; the parent is the guard.
            guard: unsafe { libc::getppid() },
            outer,
            daemon,
        };
        run_command(plan, report, Some(keepers));
    }
    // The report descriptor stays open until we exit: the daemon reads its EOF as
    // "every process the command started is dead". Our stdio goes to /dev/null so that
    // the guard never holds the command's output open.
    // SAFETY: plain descriptor calls.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    let mut code = SETUP_FAILED;
    'wait: loop {
        loop {
            let mut status = 0;
            // SAFETY: reaping any child without blocking.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if r == child {
                code = exit_code(status);
                break 'wait;
            }
            if r <= 0 {
                if r < 0 && errno().raw_os_error() == Some(libc::ECHILD) {
                    break 'wait;
                }
                break;
            }
        }
        // SAFETY: signalfd_siginfo is plain integers; all-zero is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        // SAFETY: reading one signalfd_siginfo into a buffer of its size.
        let n = unsafe {
            libc::read(
                sfd,
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                std::mem::size_of::<libc::signalfd_siginfo>(),
            )
        };
        if n == std::mem::size_of::<libc::signalfd_siginfo>() as isize
            && info.ssi_signo == libc::SIGTERM as u32
        {
            break;
        }
    }
    kill_descendants();
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// Kills every process reparented to this subreaper until none is left.
fn kill_descendants() {
    // SAFETY: getpid never fails.
    let me = unsafe { libc::getpid() };
    let children = format!("/proc/{me}/task/{me}/children");
    for _ in 0..100_000 {
        let list = std::fs::read_to_string(&children).unwrap_or_default();
        for pid in list
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: reaping any child.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 && errno().raw_os_error() == Some(libc::ECHILD) {
            return;
        }
    }
}

fn find_program(argv0: &str, env: &[(String, String)]) -> Option<PathBuf> {
    if argv0.contains('/') {
        return Some(PathBuf::from(argv0));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':').filter(|d| !d.is_empty()).find_map(|d| {
        let p = Path::new(d).join(argv0);
        let c = CString::new(p.as_os_str().as_bytes()).ok()?;
        // SAFETY: access takes a NUL-terminated path.
        (unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0).then_some(p)
    })
}

/// In the command's process: confine, report, exec. `keepers`: the processes that end
/// a degraded command (see [`confine::Keepers`]).
fn run_command(plan: &Plan, mut report: Report, keepers: Option<confine::Keepers>) -> ! {
    let cwd = match CString::new(plan.cwd.as_os_str().as_bytes()) {
        Ok(c) => c,
        Err(_) => fail(&mut report, "bad cwd".into()),
    };
    // SAFETY: chdir takes a NUL-terminated path; umask takes a mode.
    unsafe {
        if libc::chdir(cwd.as_ptr()) != 0 {
            let e = errno();
            fail(&mut report, format!("chdir {}: {e}", plan.cwd.display()));
        }
        libc::umask(plan.umask as libc::mode_t);
    }
    let Some(argv0) = plan.argv.first() else {
        fail(&mut report, "empty argv".into())
    };
    let Some(program) = find_program(argv0, &plan.env) else {
        fail(&mut report, format!("{argv0}: not found"))
    };
    let cprog = CString::new(program.as_os_str().as_bytes()).unwrap_or_default();
    let args: Vec<CString> = plan
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).unwrap_or_default())
        .collect();
    let envs: Vec<CString> = plan
        .env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")).unwrap_or_default())
        .collect();
    let mut argp: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = envs.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());

    mark(&mut report.marks, "command: argv and env built");
    report.caps_dropped = confine::drop_caps();
    report.no_new_privs = confine::no_new_privs();
    if !report.no_new_privs {
        fail(&mut report, "no_new_privs could not be set".into());
    }
    mark(&mut report.marks, "command: caps dropped");
    if plan.landlock {
        match confine::landlock(plan, &mut report.marks) {
            Ok((abi, status)) => {
                report.landlock_abi = abi;
                report.landlock = status;
            }
            Err(e) => fail(&mut report, format!("landlock: {e}")),
        }
    } else {
        report.landlock = "off".into();
        report.landlock_abi = confine::landlock_abi();
    }
    mark(&mut report.marks, "command: landlock");
    if plan.seccomp {
        if let Err(e) = confine::seccomp(plan, keepers) {
            fail(&mut report, format!("seccomp: {e}"));
        }
        report.seccomp = true;
    }
    mark(&mut report.marks, "command: seccomp");
    write_report(&report);
    // SAFETY: all pointers are NUL-terminated strings kept alive above; arrays end in
    // a null pointer.
    unsafe {
        libc::execve(cprog.as_ptr(), argp.as_ptr(), envp.as_ptr());
    }
    let e = errno();
    let _ = writeln!(
        std::io::stderr(),
        "agentd sandbox: cannot run {}: {e}",
        program.display()
    );
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(127) }
}
