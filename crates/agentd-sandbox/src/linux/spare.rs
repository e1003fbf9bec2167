//! The spare helper: one helper already executed and already inside a fresh cgroup,
//! waiting for the next command, so that the command does not pay for either
//! (docs/sandbox.md#cost).
//!
//! Moving a process into a cgroup v1 hierarchy waits for an RCU grace period (see
//! `clone.rs`), and executing the helper maps and relocates the daemon binary: together
//! more than the rest of a command's set-up. A spare pays both while the model thinks.
//!
//! ```text
//! daemon                                   spare (helper, `__sandbox-exec spare`)
//!   cgroup made (default caps)
//!   socketpair; "park" {cgroup}   ───────▶  closes every descriptor but 0-3 and the
//!                                            daemon's lifeline (7)
//!   spawn (stdio /dev/null, own group)       joins the cgroup (v1; the grace period)
//!                                 ◀───────  "R" (ready), then blocks on the socket
//!   … the model thinks …
//!   a command is prepared: plan computed as for a cold helper (git scan, hidden set,
//!   host sockets), the command's caps written into the spare's cgroup
//!   "C" + SCM_RIGHTS [plan pipe, report pipe, stdin, stdout, stderr (, user ns,
//!   net ns)]                      ───────▶  dup2s them to 3, 4, 0, 1, 2 (, 5, 6), which
//!                                            closes the socket; then exactly the cold
//!                                            helper's path: reads the plan from fd 3
//!   the command ends and is cleaned up; then the next spare is started in the
//!   background (maker thread), while the model reads the result
//! ```
//!
//! A spare is given nothing of a command before that command exists: the park message
//! holds only the cgroup's path. Its environment (empty), working directory (`/`),
//! umask, rlimits, credentials and signal state are what a cold helper starts with (both
//! are spawned the same way by the same daemon), and once the command's descriptors
//! are in place it holds the same descriptors a cold helper does. EOF on its socket
//! (the daemon exited or was killed) ends it.
//!
//! No spare ready (the first command, two commands at once, a spare that died or is
//! still starting after [`READY_WAIT`]) means the cold path. Only the `shell` tool's
//! commands take spares ([`crate::Sandbox::prepare_to_start`]); hooks and MCP servers
//! start their own helper.

use super::cgroup::{Cgroup, Hierarchy};
use super::fds::high;
use crate::plan::{Report, LIFELINE_FD, NS_NET_FD, NS_USER_FD, PLAN_FD, REPORT_FD, SETUP_FAILED};
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a command waits for a spare that is still being started before it starts a
/// helper of its own. Waiting costs at most what the rest of the spare's start costs,
/// which a cold helper would pay in full; a spare not ready by then is ended, so a stuck
/// one delays one command at most.
const READY_WAIT: Duration = Duration::from_secs(3);
/// How long closing waits for a spare being started (its exec and cgroup join, well
/// under a second even on a loaded machine).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A command's caps: `pids_max`, `memory_max` (the spawn module's `Limits`).
pub(crate) type Caps = (u64, u64);

/// The most descriptors a hand-over carries.
const MAX_FDS: usize = 7;

/// The one message a spare gets before its command: the cgroup to wait in.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Park {
    /// `cgroup.procs` files to join (v1, or v2 where `clone3` is refused).
    cgroup_procs: Vec<PathBuf>,
    /// cgroup v2: the directory the helper's first child will be created in.
    cgroup_dir: Option<PathBuf>,
}

/// A started spare.
#[derive(Debug)]
pub(crate) struct Spare {
    /// `None` once handed over.
    child: Option<tokio::process::Child>,
    /// The daemon's end of the socket pair.
    sock: OwnedFd,
    cgroup: Option<Cgroup>,
    ready: bool,
}

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        if let Some(cg) = self.cgroup.take() {
            cg.kill_and_remove();
        }
    }
}

/// The descriptors the helper is given on fds 3 and 4 (and 5, 6), held by the cold
/// `Command` that would otherwise start it; valid as long as that `Command` lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HelperFds {
    pub plan: RawFd,
    pub report: RawFd,
    pub ns: Option<(RawFd, RawFd)>,
}

/// What [`crate::Prepared::start`] needs: the spare taken (if any), the helper's
/// descriptors, and how to start the next spare.
#[derive(Debug)]
pub(crate) struct Pending {
    pub spare: Option<Spare>,
    pub fds: HelperFds,
    pub refill: Option<Refill>,
}

/// What the maker thread needs to start the next spare.
#[derive(Debug, Clone)]
pub(crate) struct Refill {
    pub spares: Arc<Spares>,
    pub hierarchy: Option<Hierarchy>,
    pub limits: Caps,
}

impl Refill {
    /// Asks for a new spare in the background (no-op outside a tokio runtime, when one
    /// is ready or being started, and once closed).
    pub fn request(&self) {
        self.spares.request(self.hierarchy.clone(), self.limits);
    }
}

#[derive(Debug, Default)]
struct State {
    spare: Option<Spare>,
    filling: bool,
    closed: bool,
}

struct Order {
    handle: tokio::runtime::Handle,
    hierarchy: Option<Hierarchy>,
    limits: Caps,
}

/// At most one spare, and the thread that starts them. Spares are started from that
/// one long-lived thread (never from a pool thread that may exit: a process's parent
/// is the thread that forked it).
#[derive(Debug)]
pub(crate) struct Spares {
    helper: PathBuf,
    state: Mutex<State>,
    changed: Condvar,
    maker: Mutex<Option<mpsc::Sender<Order>>>,
}

impl std::fmt::Debug for Order {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Order")
    }
}

impl Spares {
    pub fn new(helper: PathBuf) -> Spares {
        Spares {
            helper,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            maker: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ready spare, waiting up to [`READY_WAIT`] for one being started; `None`: start
    /// a helper of the command's own.
    pub fn take(&self) -> Option<Spare> {
        self.take_by(Instant::now() + READY_WAIT)
    }

    /// The pid of the spare once it is ready (waiting up to `limit` for one being
    /// started), left in place.
    pub fn ready_pid(&self, limit: Duration) -> Option<u32> {
        let s = self.take_by(Instant::now() + limit)?;
        let pid = s.child.as_ref().and_then(|c| c.id());
        let mut st = self.lock();
        if st.spare.is_none() && !st.closed {
            st.spare = Some(s);
        }
        drop(st);
        self.changed.notify_all();
        pid
    }

    /// The cgroup directories of the spare in the slot (none: no spare, or no cgroup).
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let st = self.lock();
        let cg = st.spare.as_ref().and_then(|s| s.cgroup.as_ref());
        cg.map(|c| c.procs_files())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect()
    }

    fn take_by(&self, end: Instant) -> Option<Spare> {
        let mut st = self.lock();
        let mut spare = loop {
            if st.closed {
                return None;
            }
            if let Some(s) = st.spare.take() {
                break s;
            }
            if !st.filling {
                return None;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            st = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(st);
        match spare.wait_ready(end) {
            Readiness::Ready => Some(spare),
            // Dropped: killed, its cgroup removed; this command's end asks for another.
            Readiness::Dead | Readiness::NotYet => None,
        }
    }

    fn request(self: &Arc<Self>, hierarchy: Option<Hierarchy>, limits: Caps) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut st = self.lock();
            if st.closed || st.filling || st.spare.is_some() {
                return;
            }
            st.filling = true;
        }
        let order = Order {
            handle,
            hierarchy,
            limits,
        };
        let mut maker = self.maker.lock().unwrap_or_else(|e| e.into_inner());
        let sent = match maker.as_ref() {
            Some(tx) => tx.send(order).map_err(|e| e.0),
            None => Err(order),
        };
        let failed = match sent {
            Ok(()) => false,
            Err(order) => {
                let (tx, rx) = mpsc::channel();
                let weak = Arc::downgrade(self);
                let started = std::thread::Builder::new()
                    .name("agentd-spare".into())
                    .spawn(move || maker_loop(weak, rx));
                match started {
                    Ok(_) => {
                        let ok = tx.send(order).is_ok();
                        *maker = Some(tx);
                        !ok
                    }
                    Err(_) => true,
                }
            }
        };
        drop(maker);
        if failed {
            self.lock().filling = false;
            self.changed.notify_all();
        }
    }

    /// Ends the spare (it exits, its cgroup is removed) and starts no more. A spare
    /// the maker thread is starting at that moment is waited for (at most
    /// [`CLOSE_WAIT`]) and ended too: the daemon exits right after, and a spare finished
    /// then would leave its cgroup behind.
    pub fn close(&self) {
        let spare = {
            let mut st = self.lock();
            st.closed = true;
            let end = Instant::now() + CLOSE_WAIT;
            while st.filling {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = self
                    .changed
                    .wait_timeout(st, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            st.spare.take()
        };
        self.changed.notify_all();
        drop(self.maker.lock().unwrap_or_else(|e| e.into_inner()).take());
        drop(spare);
    }
}

fn maker_loop(spares: Weak<Spares>, rx: mpsc::Receiver<Order>) {
    while let Ok(order) = rx.recv() {
        let Some(sp) = spares.upgrade() else { return };
        if sp.lock().closed {
            sp.lock().filling = false;
            sp.changed.notify_all();
            continue;
        }
        let made = {
            let _ctx = order.handle.enter();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Spare::start(&sp.helper, order.hierarchy.as_ref(), order.limits)
            }))
        };
        let unused = {
            let mut st = sp.lock();
            match made {
                Ok(Ok(s)) if !st.closed && st.spare.is_none() => {
                    st.spare = Some(s);
                    None
                }
                Ok(Ok(s)) => Some(s),
                _ => None,
            }
        };
        // A spare nobody will take is ended (killed, its cgroup removed) before the
        // fill counts as done, so that `close` returns only once it is gone.
        drop(unused);
        sp.lock().filling = false;
        sp.changed.notify_all();
    }
}

enum Readiness {
    Ready,
    NotYet,
    Dead,
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: socketpair fills two ints.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair gave us two fresh descriptors.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends `data` with `fds` (none: a plain message) on a seqpacket socket.
fn send(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is valid and filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE is arithmetic.
        let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        assert!(space <= std::mem::size_of_val(&cbuf) && fds.len() <= MAX_FDS);
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is large enough (checked above) and aligned for
        // cmsghdr; CMSG_* walk inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), bytes);
        }
    }
    loop {
        // SAFETY: msg points at live buffers.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message into `buf` and the descriptors it carries (close-on-exec);
/// `Ok((0, _))` is EOF.
fn recv(sock: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is valid and filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = loop {
        // SAFETY: msg points at live buffers of the sizes given.
        let n = unsafe { libc::recvmsg(sock, &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        return Err(io::Error::other("message truncated"));
    }
    Ok((n, fds))
}

impl Spare {
    /// Starts a spare: its cgroup made with `limits` (rewritten for the command that
    /// takes it), the helper spawned in a process group of its own, killed on drop.
    /// Must run in a tokio runtime's context.
    fn start(helper: &Path, hierarchy: Option<&Hierarchy>, limits: Caps) -> io::Result<Spare> {
        use std::os::unix::process::CommandExt as _;
        let cgroup = match hierarchy {
            Some(h) => Some(Cgroup::create(h, limits.0, limits.1)?),
            None => None,
        };
        let (ours, theirs) = socketpair()?;
        let theirs = high(theirs)?;
        let park = Park {
            cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            cgroup_dir: cgroup.as_ref().and_then(|c| c.v2_dir()),
        };
        let text = serde_json::to_vec(&park).map_err(io::Error::other)?;
        send(ours.as_raw_fd(), &text, &[])?;
        // Started as every helper is (the lifeline at fd 7 too), the socket at fd 3.
        let mut cmd = super::lifeline::helper_command(helper);
        cmd.arg(crate::plan::SPARE_ARG);
        let fd = theirs.as_raw_fd();
        // SAFETY: dup2 is async-signal-safe; `theirs` stays open until after spawn.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, PLAN_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let spawned = cmd.spawn();
        drop(theirs);
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                if let Some(cg) = cgroup {
                    cg.kill_and_remove();
                }
                return Err(e);
            }
        };
        Ok(Spare {
            child: Some(child),
            sock: ours,
            cgroup,
            ready: false,
        })
    }

    /// Waits until `end` for the spare's "ready" (it is in its cgroup).
    fn wait_ready(&mut self, end: Instant) -> Readiness {
        while !self.ready {
            let left = end.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one valid pollfd.
            let rc = unsafe { libc::poll(&mut p, 1, left.as_millis() as i32) };
            if rc < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Readiness::Dead;
            }
            if rc == 0 {
                return Readiness::NotYet;
            }
            let mut b = [0u8; 1];
            match recv(self.sock.as_raw_fd(), &mut b, libc::MSG_DONTWAIT) {
                Ok((1, fds)) if b[0] == b'R' && fds.is_empty() => self.ready = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                _ => return Readiness::Dead,
            }
        }
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => Readiness::Ready,
            _ => Readiness::Dead,
        }
    }

    /// The spare's cgroup, given the command's caps. An error: the spare cannot serve
    /// this command (it is dropped and the command starts its own helper).
    pub fn cgroup_for(&mut self, limits: Caps) -> io::Result<Option<Cgroup>> {
        if let Some(cg) = self.cgroup.as_mut() {
            cg.set_limits(limits.0, limits.1)?;
        }
        Ok(self.cgroup.take())
    }

    /// Hands the command to the spare: the plan and report pipes, the command's stdio
    /// and the namespaces to join. On success the spare is the command's helper; on an
    /// error (the spare died) nothing was handed over.
    pub fn hand_over(
        mut self,
        fds: &HelperFds,
        stdio: [RawFd; 3],
    ) -> io::Result<tokio::process::Child> {
        let mut all = vec![fds.plan, fds.report, stdio[0], stdio[1], stdio[2]];
        if let Some((u, n)) = fds.ns {
            all.extend([u, n]);
        }
        // An error (the spare died meanwhile) drops it: the caller starts a helper.
        send(self.sock.as_raw_fd(), b"C", &all)?;
        // The child is the caller's now: nothing left to kill on drop.
        Ok(self
            .child
            .take()
            .expect("a spare has its child until handed over"))
    }
}

/// [`crate::Prepared::start`]: hands the command to the spare of `pending`, or spawns
/// `command` (no spare, or it died meanwhile). Returns the child, whether the spare
/// took the command, and how to ask for the next spare once the command has ended.
pub(crate) fn start(
    pending: Option<Pending>,
    command: std::process::Command,
    (stdin, stdout, stderr): (Option<OwnedFd>, OwnedFd, OwnedFd),
) -> io::Result<(tokio::process::Child, bool, Option<Refill>)> {
    use std::process::Stdio;
    let (spare, fds, refill) = match pending {
        Some(p) => (p.spare, Some(p.fds), p.refill),
        None => (None, None, None),
    };
    let stdin = match stdin {
        Some(f) => f,
        None => OwnedFd::from(std::fs::File::open("/dev/null")?),
    };
    let mut handed = None;
    if let (Some(spare), Some(fds)) = (spare, fds) {
        // `fds` stay valid while `command` lives (it holds the parent's copies).
        handed = spare
            .hand_over(
                &fds,
                [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()],
            )
            .ok();
    }
    let out = match handed {
        Some(c) => {
            // The parent's copies of the plan and report pipes close with the command,
            // as after a spawn (the report's EOF is what the degraded level waits for).
            drop(command);
            (c, true)
        }
        None => {
            let mut cmd = tokio::process::Command::from(command);
            cmd.stdin(Stdio::from(stdin))
                .stdout(Stdio::from(stdout))
                .stderr(Stdio::from(stderr))
                .process_group(0)
                .kill_on_drop(true);
            (cmd.spawn()?, false)
        }
    };
    Ok((out.0, out.1, refill))
}

// ---- the helper's side ----

fn die() -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(SETUP_FAILED) }
}

/// In a helper started with [`crate::plan::SPARE_ARG`] (before the lifeline is adopted:
/// it stays at fd 7): joins the cgroup of the park
/// message (as a cold helper would), says ready, waits for its command, and puts the
/// command's descriptors where a cold helper has them (plan 3, report 4, stdio 0-2,
/// namespaces 5 and 6). Returns the `cgroup.procs` files already joined, which the
/// plan's join then skips. Exits quietly on EOF (the daemon is gone).
pub fn wait_for_command(report: &mut Report) -> Vec<PathBuf> {
    // Nothing but stdio, the socket and the daemon's lifeline.
    // SAFETY: close_range on descriptor numbers.
    unsafe {
        let line = LIFELINE_FD as u32;
        libc::syscall(libc::SYS_close_range, PLAN_FD as u32 + 1, line - 1, 0u32);
        libc::syscall(libc::SYS_close_range, line + 1, u32::MAX, 0u32);
    }
    let mut buf = vec![0u8; 64 * 1024];
    let park: Park = match recv(PLAN_FD, &mut buf, 0) {
        Ok((n, fds)) if n > 0 && fds.is_empty() => {
            serde_json::from_slice(&buf[..n]).unwrap_or_else(|_| die())
        }
        Ok((0, _)) => {
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(0) }
        }
        _ => die(),
    };
    let mut joined = Vec::new();
    let into_cgroup = park.cgroup_dir.is_some() && super::clone::clone3_available();
    if !into_cgroup {
        for procs in park.cgroup_procs {
            if std::fs::write(&procs, "0").is_err() {
                die();
            }
            joined.push(procs);
        }
    }
    if send(PLAN_FD, b"R", &[]).is_err() {
        die();
    }
    let mut b = [0u8; 1];
    let fds = match recv(PLAN_FD, &mut b, 0) {
        Ok((0, _)) => {
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(0) }
        }
        Ok((1, fds)) if b[0] == b'C' && (fds.len() == 5 || fds.len() == 7) => fds,
        _ => die(),
    };
    let targets = [PLAN_FD, REPORT_FD, 0, 1, 2, NS_USER_FD, NS_NET_FD];
    // Above every target first, so that no dup2 below closes one still to be placed.
    let fds: Vec<OwnedFd> = fds
        .into_iter()
        .map(|f| high(f).unwrap_or_else(|_| die()))
        .collect();
    for (f, t) in fds.iter().zip(targets) {
        // SAFETY: dup2 onto a target number; fd 3 was the socket, closed by this.
        if unsafe { libc::dup2(f.as_raw_fd(), t) } < 0 {
            die();
        }
    }
    drop(fds);
    report.marks.clear();
    report.cgroup = !joined.is_empty();
    joined
}
