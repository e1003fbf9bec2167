//! Service-manager integration (docs/service.md): a listening socket inherited from
//! systemd (`LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES`, sd_listen_fds(3)) or launchd
//! (`launch_activate_socket`), readiness and stop notices to systemd (sd_notify(3)), and
//! the optional idle exit of an activated daemon.
//!
//! Everything the service manager hands over is read once, in `main`, before any thread
//! exists, and removed from the environment there: tool subprocesses must never see
//! `LISTEN_*` or `NOTIFY_SOCKET` (a shell command could otherwise send `READY=1` or
//! `STOPPING=1` on the daemon's behalf), and `std::env::remove_var` is only sound while
//! the process is single-threaded.
//!
//! Architecture Invariant: an inherited socket belongs to the service manager. agentd
//! never unlinks, re-binds or chmods it; the manager keeps listening after agentd exits,
//! which is what lets the next connection start agentd again.

use std::io;
use std::os::unix::io::{FromRawFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The `FileDescriptorName=` of `packaging/systemd/agentd.socket`. With several inherited
/// fds the one with this name is the socket; a single unnamed fd is taken as it is.
pub const FD_NAME: &str = "agentd";
/// The `Sockets` key of the launchd plist.
pub const LAUNCHD_SOCKETS_KEY: &str = "Listeners";

/// Who handed the daemon its listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    pub fn as_str(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }
}

/// A listening Unix socket the daemon did not bind.
#[derive(Debug)]
pub struct Inherited {
    pub manager: Manager,
    pub listener: UnixListener,
    /// The path the socket is bound to (getsockname), when it has one.
    pub path: Option<PathBuf>,
}

/// What the service manager passed in the environment, captured at startup.
#[derive(Debug, Default)]
pub struct Activation {
    inherited: Option<Inherited>,
    notifier: Option<Notifier>,
}

impl Activation {
    /// Reads and clears the activation environment and takes any inherited socket.
    ///
    /// Call it from `main` before the runtime (or any other thread) starts: it removes
    /// `LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES` and `NOTIFY_SOCKET` from the
    /// environment.
    pub fn from_env() -> Result<Activation, String> {
        let notifier = std::env::var_os("NOTIFY_SOCKET")
            .filter(|s| !s.is_empty())
            .map(|s| Notifier {
                path: PathBuf::from(s),
            });
        std::env::remove_var("NOTIFY_SOCKET");
        // SAFETY: called before the runtime starts, so no other thread reads the
        // environment while it changes (the crate's stated precondition).
        let fds: Vec<(RawFd, String)> = unsafe { sd_notify::listen_fds_with_names_and_unset_env() }
            .map_err(|e| format!("socket activation (LISTEN_FDS): {e}"))?
            .collect();
        let inherited = if !fds.is_empty() {
            Some(take_systemd(fds)?)
        } else {
            launchd::listener()?
        };
        Ok(Activation {
            inherited,
            notifier,
        })
    }

    /// The inherited socket, once (the listener moves into the server).
    pub fn take_listener(&mut self) -> Option<Inherited> {
        self.inherited.take()
    }

    /// Whether a service manager watches this process for readiness (`Type=notify`).
    pub fn notifies(&self) -> bool {
        self.notifier.is_some()
    }

    /// `READY=1`: the socket is served and the sessions are indexed.
    pub fn ready(&self, status: &str) {
        self.notify(&format!(
            "READY=1\nSTATUS={status}\nMAINPID={}\n",
            std::process::id()
        ));
    }

    /// `STOPPING=1`: the orderly stop has begun (turns are being ended).
    pub fn stopping(&self, status: &str) {
        self.notify(&format!("STOPPING=1\nSTATUS={status}\n"));
    }

    fn notify(&self, msg: &str) {
        if let Some(n) = &self.notifier {
            if let Err(e) = n.send(msg) {
                tracing::warn!(socket = %n.path.display(), "sd_notify: {e}");
            }
        }
    }
}

/// The listener to serve: the inherited one when a service manager passed it, else
/// the one `bind` makes. Returns who manages the socket (`None`: agentd bound it and
/// unlinks it on exit).
pub fn listener(
    activation: &mut Activation,
    configured: &Path,
    bind: impl FnOnce() -> Result<tokio::net::UnixListener, String>,
) -> Result<(tokio::net::UnixListener, Option<Manager>), String> {
    let Some(inherited) = activation.take_listener() else {
        return Ok((bind()?, None));
    };
    let path = inherited.path.clone();
    if path.as_deref().is_some_and(|p| p != configured) {
        // Clients find the daemon by the configured path (docs/getting-started.md#paths), so a unit that
        // listens elsewhere is reachable only by those told its path.
        tracing::warn!(
            inherited = %path.as_deref().unwrap_or(configured).display(),
            configured = %configured.display(),
            "the inherited socket is not at the configured socket path"
        );
    }
    let listener = tokio::net::UnixListener::from_std(inherited.listener)
        .map_err(|e| format!("inherited socket: {e}"))?;
    tracing::info!(
        manager = inherited.manager.as_str(),
        socket = %path.as_deref().unwrap_or(configured).display(),
        "serving the socket passed by the service manager"
    );
    Ok((listener, Some(inherited.manager)))
}

/// Picks the daemon's socket among the fds systemd passed: the one named
/// [`FD_NAME`], else the only one. The fds are already close-on-exec (the crate sets
/// it), so the ones not taken cannot leak into tool subprocesses.
fn take_systemd(fds: Vec<(RawFd, String)>) -> Result<Inherited, String> {
    let fd = match fds.iter().find(|(_, name)| name == FD_NAME) {
        Some((fd, _)) => *fd,
        None if fds.len() == 1 => fds[0].0,
        None => {
            let names: Vec<&str> = fds.iter().map(|(_, n)| n.as_str()).collect();
            return Err(format!(
                "systemd passed {} sockets ({}) and none is named {FD_NAME:?}; set FileDescriptorName={FD_NAME} in the socket unit",
                fds.len(),
                names.join(", ")
            ));
        }
    };
    let listener = adopt(fd).map_err(|e| format!("inherited fd {fd} from systemd: {e}"))?;
    Ok(Inherited {
        manager: Manager::Systemd,
        path: local_path(&listener),
        listener,
    })
}

/// Checks that `fd` is a listening Unix stream socket (sd_is_socket_unix(3)) and takes
/// ownership of it.
fn adopt(fd: RawFd) -> io::Result<UnixListener> {
    let int_opt = |opt: libc::c_int| -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`, which is that large.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    };
    if int_opt(libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err(io::Error::other("not a stream socket"));
    }
    // SAFETY: sockaddr_storage is plain data; getsockname fills at most `len` bytes.
    let family = unsafe {
        let mut addr: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(
            fd,
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        addr.ss_family
    };
    if libc::c_int::from(family) != libc::AF_UNIX {
        return Err(io::Error::other(
            "not a Unix socket (agentd serves only AF_UNIX)",
        ));
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if int_opt(libc::SO_ACCEPTCONN)? == 0 {
        return Err(io::Error::other("socket is not listening"));
    }
    // SAFETY: the fd was handed to this process by its service manager for exactly this
    // use and nothing else in the process owns it; it is adopted once.
    let listener = unsafe { UnixListener::from_raw_fd(fd) };
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn local_path(listener: &UnixListener) -> Option<PathBuf> {
    listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| p.to_path_buf()))
}

/// The `NOTIFY_SOCKET` datagram socket of sd_notify(3): a path, or an abstract address
/// when it starts with `@` (Linux).
#[derive(Debug)]
struct Notifier {
    path: PathBuf,
}

impl Notifier {
    fn send(&self, msg: &str) -> io::Result<()> {
        let sock = UnixDatagram::unbound()?;
        let raw = self.path.as_os_str().as_encoded_bytes();
        if let Some(name) = raw.strip_prefix(b"@") {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            {
                #[cfg(target_os = "android")]
                use std::os::android::net::SocketAddrExt;
                #[cfg(target_os = "linux")]
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(msg.as_bytes(), &addr)?;
                return Ok(());
            }
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            {
                let _ = name;
                return Err(io::Error::other(
                    "abstract NOTIFY_SOCKET addresses exist only on Linux",
                ));
            }
        }
        sock.send_to(msg.as_bytes(), &self.path)?;
        Ok(())
    }
}

/// Optional idle exit of an activated daemon (`idle_exit_s`): when `is_idle` has held
/// for `after` without a break, `stop` is cancelled, which starts the ordinary shutdown.
/// The service manager keeps the socket, so the next connection starts agentd again.
/// Polled once a second at most: idleness is a slow state, and the counters it reads
/// (connections, running turns, loaded sessions) have no change notification.
pub async fn idle_exit(after: Duration, is_idle: impl Fn() -> bool, stop: CancellationToken) {
    let tick = (after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut idle_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let now = tokio::time::Instant::now();
        if !is_idle() {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert(now);
        if now.duration_since(since) >= after {
            tracing::info!(
                idle_s = after.as_secs_f64(),
                "idle with no clients, turns or loaded sessions; exiting (the service manager keeps the socket)"
            );
            stop.cancel();
            return;
        }
    }
}

#[cfg(target_os = "macos")]
mod launchd {
    //! `launch_activate_socket(3)`: the fds of the plist's `Sockets` entry. Only built on
    //! macOS (libSystem); it cannot be exercised on Linux CI.
    use super::{adopt, local_path, Inherited, Manager, LAUNCHD_SOCKETS_KEY};
    use std::ffi::CString;
    use std::os::raw::{c_char, c_int};

    extern "C" {
        fn launch_activate_socket(
            name: *const c_char,
            fds: *mut *mut c_int,
            cnt: *mut usize,
        ) -> c_int;
    }

    /// `Ok(None)` when launchd did not start this process (ESRCH) or the plist has no
    /// `Listeners` socket (ENOENT).
    pub fn listener() -> Result<Option<Inherited>, String> {
        let name = CString::new(LAUNCHD_SOCKETS_KEY).map_err(|e| e.to_string())?;
        let mut fds: *mut c_int = std::ptr::null_mut();
        let mut cnt: usize = 0;
        // SAFETY: name is NUL-terminated; launchd allocates `fds` (freed below) and
        // writes its length to `cnt`.
        let rc = unsafe { launch_activate_socket(name.as_ptr(), &mut fds, &mut cnt) };
        if rc == libc::ESRCH || rc == libc::ENOENT {
            return Ok(None);
        }
        if rc != 0 {
            return Err(format!(
                "launch_activate_socket({LAUNCHD_SOCKETS_KEY}): {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        // SAFETY: on success `fds` points to `cnt` ints allocated with malloc.
        let list: Vec<c_int> = unsafe { std::slice::from_raw_parts(fds, cnt) }.to_vec();
        // SAFETY: allocated by launchd with malloc; ownership is ours.
        unsafe { libc::free(fds.cast()) };
        let Some((&first, rest)) = list.split_first() else {
            return Ok(None);
        };
        for &fd in rest {
            // SAFETY: these fds were handed to us and are not used elsewhere.
            unsafe { libc::close(fd) };
        }
        // SAFETY: fcntl on an fd we own.
        unsafe { libc::fcntl(first, libc::F_SETFD, libc::FD_CLOEXEC) };
        let listener =
            adopt(first).map_err(|e| format!("inherited fd {first} from launchd: {e}"))?;
        Ok(Some(Inherited {
            manager: Manager::Launchd,
            path: local_path(&listener),
            listener,
        }))
    }
}

#[cfg(not(target_os = "macos"))]
mod launchd {
    use super::Inherited;

    /// No launchd off macOS.
    pub fn listener() -> Result<Option<Inherited>, String> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::IntoRawFd;

    #[test]
    fn adopts_only_listening_unix_stream_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let fd = UnixListener::bind(&path).unwrap().into_raw_fd();
        let l = adopt(fd).unwrap();
        assert_eq!(local_path(&l).as_deref(), Some(path.as_path()));

        let dgram = UnixDatagram::bind(dir.path().join("d.sock"))
            .unwrap()
            .into_raw_fd();
        assert!(adopt(dgram).is_err());
        // SAFETY: the test owns the fd that adopt refused.
        unsafe { libc::close(dgram) };

        let tcp = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .into_raw_fd();
        let e = adopt(tcp).unwrap_err();
        assert!(e.to_string().contains("AF_UNIX"), "{e}");
        // SAFETY: as above.
        unsafe { libc::close(tcp) };
    }

    #[test]
    fn systemd_fd_is_picked_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = UnixListener::bind(dir.path().join("a.sock"))
            .unwrap()
            .into_raw_fd();
        let b = UnixListener::bind(dir.path().join("b.sock"))
            .unwrap()
            .into_raw_fd();
        let got = take_systemd(vec![(a, "other".into()), (b, FD_NAME.into())]).unwrap();
        assert_eq!(got.path, Some(dir.path().join("b.sock")));
        let e = take_systemd(vec![(a, "x".into()), (a, "y".into())]).unwrap_err();
        assert!(e.contains("FileDescriptorName=agentd"), "{e}");
        // SAFETY: `a` was not adopted.
        unsafe { libc::close(a) };
    }

    #[test]
    fn notifier_sends_to_a_path_and_an_abstract_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        Notifier { path: path.clone() }.send("READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");

        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("agentd-test-{}", std::process::id());
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
            let rx = UnixDatagram::bind_addr(&addr).unwrap();
            Notifier {
                path: PathBuf::from(format!("@{name}")),
            }
            .send("STOPPING=1\n")
            .unwrap();
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"STOPPING=1\n");
        }
    }

    #[tokio::test]
    async fn idle_exit_waits_for_an_unbroken_idle_stretch() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let after = Duration::from_millis(300);
        let idle = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let task = tokio::spawn(idle_exit(
            after,
            {
                let idle = idle.clone();
                move || idle.load(Ordering::SeqCst)
            },
            stop.clone(),
        ));
        // Busy for well over `after`: no exit.
        tokio::time::sleep(after * 3).await;
        assert!(!stop.is_cancelled(), "busy: no exit");
        idle.store(true, Ordering::SeqCst);
        let idle_from = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), stop.cancelled())
            .await
            .expect("idle exit within 10 s");
        assert!(idle_from.elapsed() >= after, "exited before idle_exit_s");
        task.await.unwrap();
    }
}
