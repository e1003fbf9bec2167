//! The mount plan, run by pid 1 of the sandbox's namespaces: a fresh `/proc`, a private
//! `/tmp` (writable roots and the working directory under `/tmp` are bound back), hidden
//! directories covered by an empty read-only tmpfs, hidden files by `/dev/null`, and
//! protected paths bound read-only over themselves.
//!
//! Every path is opened with `openat2(RESOLVE_NO_SYMLINKS)` into an `O_PATH` descriptor
//! and the mount targets `/proc/self/fd/N`, so a symlink planted on the path (by an
//! earlier command) cannot redirect a mount elsewhere. A protected path that is a
//! symlink (or sits below one) gets its nearest real parent inside the root protected
//! instead, which is stricter, and is reported.

use crate::plan::{Plan, Report};
use crate::trace::mark;
use agentd_fsat as fsat;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `O_PATH` descriptor of `p`, refusing any symlink on the way (a symlink as the last
/// component is handed back as itself: callers check with [`is_symlink`]).
pub fn open_nofollow(p: &Path) -> io::Result<OwnedFd> {
    fsat::openat2(
        fsat::CWD,
        p,
        libc::O_PATH | libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(|p| fsat::cstr(p.as_os_str())).transpose()?;
    let target = fsat::cstr(target.as_os_str())?;
    let fstype = fstype.map(|s| CString::new(s).unwrap_or_default());
    let data = data.map(|s| CString::new(s).unwrap_or_default());
    // SAFETY: every pointer is null or a NUL-terminated string alive for the call.
    check(unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    })
}

/// Stops mount events from propagating back to the host.
pub fn make_private() -> io::Result<()> {
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

/// A `/proc` of the new pid namespace.
pub fn fresh_proc() -> io::Result<()> {
    mount(
        Some(Path::new("proc")),
        Path::new("/proc"),
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
}

pub fn set_hostname() -> io::Result<()> {
    let name = b"sandbox";
    // SAFETY: sethostname takes a pointer and length.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
}

/// The mount flags a read-only remount must keep (they are locked in a user namespace).
fn locked_flags(fd: &OwnedFd) -> libc::c_ulong {
    // SAFETY: fstatvfs fills the struct for a valid descriptor.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut s) } != 0 {
        return 0;
    }
    let mut out = 0;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if s.f_flag & st != 0 {
            out |= ms;
        }
    }
    out
}

fn is_symlink(fd: &OwnedFd) -> bool {
    fsat::fstat(fd).is_ok_and(|st| fsat::is_link(&st))
}

/// Binds `p` read-only over itself, resolved without symlinks. A symlink at `p` itself
/// is refused (`ELOOP`) like one on the way: protecting the link would leave what it
/// points to writable.
fn bind_readonly(p: &Path) -> io::Result<()> {
    let fd = open_nofollow(p)?;
    if is_symlink(&fd) {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let target = fsat::proc_path(&fd);
    mount(
        Some(&target),
        &target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    // The descriptor still names the covered inode; reopen to reach the new mount.
    let fd2 = open_nofollow(p)?;
    let flags = locked_flags(&fd2);
    mount(
        None,
        &fsat::proc_path(&fd2),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
        None,
    )
}

fn is_dir(fd: &OwnedFd) -> bool {
    fsat::fstat(fd).is_ok_and(|st| fsat::is_dir(&st))
}

/// Binds the directory `p` (writable) over itself: a mount point cannot be renamed,
/// removed or replaced (`EBUSY`), so a `.git` stays the `.git` the scan saw.
fn pin(p: &Path) -> io::Result<()> {
    let fd = open_nofollow(p)?;
    if is_symlink(&fd) || !is_dir(&fd) {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let target = fsat::proc_path(&fd);
    mount(
        Some(&target),
        &target,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
}

/// Covers a hidden path: an empty read-only tmpfs over a directory, `/dev/null` over
/// anything else.
fn hide(p: &Path) -> io::Result<()> {
    let fd = open_nofollow(p)?;
    if is_symlink(&fd) {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let target = fsat::proc_path(&fd);
    if is_dir(&fd) {
        mount(
            Some(Path::new("tmpfs")),
            &target,
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=000,size=4k"),
        )
    } else {
        mount(
            Some(Path::new("/dev/null")),
            &target,
            None,
            libc::MS_BIND,
            None,
        )
    }
}

fn mkdir_all_fresh(p: &Path, dir: bool) -> io::Result<()> {
    if dir {
        std::fs::create_dir_all(p)
    } else {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(p)
            .map(|_| ())
    }
}

/// Protects `p`; when it (or a component) is a symlink, protects its nearest parent
/// that is not, within `root`. Missing `hooks`/`info` directories of a git dir are
/// created first (as `git init` would), so they cannot be created later with content.
fn protect(p: &Path, roots: &[PathBuf], report: &mut Report) -> Result<(), String> {
    match bind_readonly(p) {
        Ok(()) => {
            report.protected.push(p.to_path_buf());
            return Ok(());
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let parent_is_gitdir = p
                .parent()
                .is_some_and(|d| d.join("objects").is_dir() && d.join("HEAD").exists());
            if (name == "hooks" || name == "info") && parent_is_gitdir {
                let parent = p.parent().unwrap_or(p);
                let pfd =
                    open_nofollow(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
                if !is_dir(&pfd) {
                    return Err(format!("{} is not a directory", parent.display()));
                }
                // Created through the pinned parent, never through a path a symlink
                // could redirect.
                let dir = fsat::proc_path(&pfd).join(name);
                std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", p.display()))?;
                bind_readonly(p).map_err(|e| format!("{}: {e}", p.display()))?;
                report.protected.push(p.to_path_buf());
            }
            return Ok(());
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {}
        Err(e) => return Err(format!("protecting {}: {e}", p.display())),
    }
    // A symlink on the way: protect the nearest parent that resolves without one.
    let root = roots
        .iter()
        .filter(|r| p.starts_with(r))
        .max_by_key(|r| r.as_os_str().len());
    let mut cur = p.parent();
    while let Some(d) = cur {
        if root.is_some_and(|r| !d.starts_with(r)) {
            break;
        }
        match bind_readonly(d) {
            Ok(()) => {
                report.protected_parent.push(d.to_path_buf());
                return Ok(());
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => cur = d.parent(),
            Err(e) => return Err(format!("protecting {}: {e}", d.display())),
        }
    }
    Err(format!(
        "cannot protect {}: symlinks up to its writable root",
        p.display()
    ))
}

/// A private `/dev/shm` (nothing shared with, or left for, the host) and a private
/// devpts instance with its own `ptmx`: the host's terminals are not there to open.
fn private_devices() -> io::Result<()> {
    if Path::new("/dev/shm").is_dir() {
        mount(
            Some(Path::new("tmpfs")),
            Path::new("/dev/shm"),
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777"),
        )?;
    }
    if Path::new("/dev/pts").is_dir() {
        mount(
            Some(Path::new("devpts")),
            Path::new("/dev/pts"),
            Some("devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=0620"),
        )?;
        if Path::new("/dev/ptmx").exists() {
            mount(
                Some(Path::new("/dev/pts/ptmx")),
                Path::new("/dev/ptmx"),
                None,
                libc::MS_BIND,
                None,
            )?;
        }
    }
    Ok(())
}

/// With network `none`: an empty `/run` (and `/var/run` where it is a directory of
/// its own), so the host's daemons' sockets (PostgreSQL, MySQL, Docker, D-Bus, systemd)
/// are not there to connect to; the sockets granted by path below it are bound back.
/// Skipped when a writable root or the working directory lies below it.
fn private_run(plan: &Plan) -> io::Result<()> {
    for dir in ["/run", "/var/run"] {
        let d = Path::new(dir);
        let real = std::fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_dir());
        let needed = plan
            .writable
            .iter()
            .chain(std::iter::once(&plan.cwd))
            .any(|w| w.starts_with(d));
        if real && !needed {
            let keep = pin_below(d, &plan.sockets);
            mount(
                Some(Path::new("tmpfs")),
                d,
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("mode=0755"),
            )?;
            bind_back(&keep)?;
        }
    }
    Ok(())
}

/// Descriptors of the existing `paths` strictly below `dir` (outermost only), taken
/// before a tmpfs covers `dir`.
fn pin_below(dir: &Path, paths: &[PathBuf]) -> Vec<(PathBuf, OwnedFd, bool)> {
    let mut wanted: Vec<&PathBuf> = paths
        .iter()
        .filter(|p| p.starts_with(dir) && p.as_path() != dir)
        .collect();
    wanted.sort();
    let mut keep: Vec<(PathBuf, OwnedFd, bool)> = Vec::new();
    for p in wanted {
        if keep.iter().any(|(k, _, _)| p.starts_with(k)) {
            continue;
        }
        if let Ok(fd) = open_nofollow(p) {
            if !is_symlink(&fd) {
                let d = is_dir(&fd);
                keep.push((p.clone(), fd, d));
            }
        }
    }
    keep
}

/// Binds pinned paths back at their place (after a tmpfs covered it).
fn bind_back(keep: &[(PathBuf, OwnedFd, bool)]) -> io::Result<()> {
    for (p, fd, dir) in keep {
        mkdir_all_fresh(p, *dir)?;
        mount(
            Some(&fsat::proc_path(fd)),
            p,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
    }
    Ok(())
}

/// Mounts an overlay over a granted cache: the host's cache read-only below, the
/// workspace's own layer above (see [`Plan::cache_layers`]).
/// The layer's three directories, opened before the private `/tmp` can cover them (the
/// daemon's home may lie below `/tmp`).
fn open_layer(l: &crate::plan::CacheLayer) -> io::Result<Vec<OwnedFd>> {
    [&l.lower, &l.upper, &l.work]
        .into_iter()
        .map(|p| {
            let fd = open_nofollow(p)?;
            if !is_dir(&fd) {
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            Ok(fd)
        })
        .collect()
}

fn overlay(l: &crate::plan::CacheLayer, fds: io::Result<Vec<OwnedFd>>) -> io::Result<()> {
    let fds = fds?;
    let mut opts = Vec::new();
    for (k, fd) in ["lowerdir", "upperdir", "workdir"].into_iter().zip(&fds) {
        opts.push(format!("{k}={}", fsat::proc_path(fd).display()));
    }
    opts.push("userxattr".into());
    mount(
        Some(Path::new("overlay")),
        &l.lower,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts.join(",")),
    )
}

/// Covers the host sockets the daemon listed (`/dev/null` over each), so a connect
/// finds no socket there. Those gone since, or now below an empty `/run`, the private
/// `/tmp` or a hidden directory, need nothing.
fn cover_sockets(plan: &Plan, report: &mut Report) -> Result<(), String> {
    for p in &plan.cover_sockets {
        if plan.sockets.iter().any(|g| p.starts_with(g)) {
            continue;
        }
        match hide(p) {
            Ok(()) => report.sockets_covered += 1,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR | libc::EACCES)
                ) => {}
            Err(e) => return Err(format!("covering the socket {}: {e}", p.display())),
        }
    }
    Ok(())
}

/// Applies the mount plan (pid 1, after `/proc`).
pub fn apply(plan: &Plan, report: &mut Report) -> Result<(), String> {
    if plan.fail_setup {
        return Err("the mount plan failed on purpose (test knob fail_setup)".into());
    }
    let tmp = Path::new("/tmp");
    let layers: Vec<io::Result<Vec<OwnedFd>>> = plan.cache_layers.iter().map(open_layer).collect();
    // Paths under /tmp that must stay visible: writable roots and the working
    // directory. Pin them before the private /tmp covers them.
    let mut keep: Vec<(PathBuf, OwnedFd, bool)> = Vec::new();
    let mut wanted: Vec<PathBuf> = plan.writable.clone();
    wanted.push(plan.cwd.clone());
    // Sockets granted by path under /tmp (a PostgreSQL socket, say).
    let granted_tmp: Vec<PathBuf> = plan
        .sockets
        .iter()
        .filter(|g| g.starts_with(tmp))
        .cloned()
        .collect();
    wanted.extend(granted_tmp.iter().cloned());
    wanted.sort();
    wanted.dedup();
    for p in &wanted {
        if p.starts_with(tmp) && p != tmp && !keep.iter().any(|(k, _, _)| p.starts_with(k)) {
            match open_nofollow(p) {
                Ok(fd) => {
                    let d = is_dir(&fd);
                    keep.push((p.clone(), fd, d));
                }
                // A granted socket that is not there (yet): nothing to bind back.
                Err(_) if granted_tmp.contains(p) => {}
                Err(e) => return Err(format!("{}: {e}", p.display())),
            }
        }
    }
    mount(
        Some(Path::new("tmpfs")),
        tmp,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )
    .map_err(|e| format!("private /tmp: {e}"))?;
    for (p, fd, dir) in &keep {
        mkdir_all_fresh(p, *dir).map_err(|e| format!("{}: {e}", p.display()))?;
        mount(
            Some(&fsat::proc_path(fd)),
            p,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .map_err(|e| format!("binding {}: {e}", p.display()))?;
        // Everything under the private /tmp is writable to Landlock: a kept path that
        // is not a writable root (the working directory in read_only mode) is made
        // read-only by the mount itself.
        if !plan.writable.iter().any(|w| p.starts_with(w)) && !granted_tmp.contains(p) {
            bind_readonly(p).map_err(|e| format!("read-only {}: {e}", p.display()))?;
        }
    }
    drop(keep);
    mark(&mut report.marks, "mounts: private /tmp");
    private_devices().map_err(|e| format!("private devices: {e}"))?;
    mark(&mut report.marks, "mounts: devpts, /dev/shm");
    if plan.network == crate::policy::Network::None {
        private_run(plan).map_err(|e| format!("private /run: {e}"))?;
    }
    mark(&mut report.marks, "mounts: /run");
    // Before the hidden set covers agentd's home, where the upper layers live.
    for (layer, fds) in plan.cache_layers.iter().zip(layers) {
        match overlay(layer, fds) {
            Ok(()) => report.cache_layers.push(layer.lower.clone()),
            Err(e) => {
                report
                    .cache_layers_failed
                    .push(format!("{}: {e}", layer.lower.display()));
                bind_readonly(&layer.lower)
                    .map_err(|e| format!("read-only cache {}: {e}", layer.lower.display()))?;
            }
        }
    }
    mark(&mut report.marks, "mounts: cache layers");
    for h in &plan.hidden {
        match hide(h) {
            Ok(()) => report.hidden_mounted += 1,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(format!("hiding {}: {e}", h.display())),
        }
    }
    mark(&mut report.marks, "mounts: hidden set");
    cover_sockets(plan, report)?;
    mark(&mut report.marks, "mounts: host sockets covered");
    for p in &plan.pinned {
        match pin(p) {
            Ok(()) => report.pinned.push(p.clone()),
            // Gone or changed since the scan: the audit after the command judges it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ELOOP)) => {}
            Err(e) => return Err(format!("pinning {}: {e}", p.display())),
        }
    }
    mark(&mut report.marks, "mounts: .git pinned");
    for p in &plan.protected {
        protect(p, &plan.writable, report)?;
    }
    mark(&mut report.marks, "mounts: protected paths");
    Ok(())
}
