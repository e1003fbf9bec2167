//! Per-command cgroups with a pids cap and a memory cap, where agentd may make them:
//! as root (cgroup v2, or the v1 `pids`/`memory` hierarchies), or in a delegated v2
//! subtree (a systemd unit with `Delegate=yes`). Elsewhere commands run without one and
//! `data.sandbox.limits.cgroup` says so.
//!
//! A command's cgroup is named `cmd-<daemon pid>-<seq>-<random>` and removed when the
//! command ends. A daemon that dies without ending its commands leaves them behind: the
//! next daemon to start sweeps the ones whose owner is gone ([`sweep`]), and a daemon
//! that shuts down cleanly sweeps its own.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const V2_ROOT: &str = "/sys/fs/cgroup";
const GROUP: &str = "agentd-sandbox";

/// Where per-command cgroups go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    V2(PathBuf),
    V1 {
        pids: PathBuf,
        memory: Option<PathBuf>,
    },
}

impl Hierarchy {
    pub fn name(&self) -> &'static str {
        match self {
            Hierarchy::V2(_) => "v2",
            Hierarchy::V1 { .. } => "v1",
        }
    }
}

fn write(p: &Path, s: &str) -> io::Result<()> {
    std::fs::write(p, s)
}

fn own_v2_path() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new(V2_ROOT).join(rel.trim_start_matches('/')))
}

/// Which hierarchy [`detect`] would use, without changing anything (for reports such as
/// `agentctl doctor`).
pub fn available() -> Option<&'static str> {
    // SAFETY: geteuid never fails.
    let root = unsafe { libc::geteuid() } == 0;
    if Path::new(V2_ROOT).join("cgroup.controllers").exists() {
        if root {
            return Some("v2");
        }
        let own = own_v2_path()?;
        let ctl = std::fs::read_to_string(own.join("cgroup.controllers")).ok()?;
        let c =
            std::ffi::CString::new(own.join("cgroup.procs").as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: access takes a NUL-terminated path.
        let writable = unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0;
        return (ctl.contains("pids") && writable).then_some("v2 (delegated)");
    }
    (root && Path::new(V2_ROOT).join("pids/cgroup.procs").exists()).then_some("v1")
}

/// Finds (and prepares) the hierarchy, or `None` when agentd may not make cgroups.
pub fn detect() -> Option<Hierarchy> {
    // SAFETY: geteuid never fails.
    let root = unsafe { libc::geteuid() } == 0;
    let v2 = Path::new(V2_ROOT).join("cgroup.controllers").exists();
    if v2 {
        let base = if root {
            let _ = write(
                &Path::new(V2_ROOT).join("cgroup.subtree_control"),
                "+pids +memory",
            );
            Path::new(V2_ROOT).join(GROUP)
        } else {
            // Delegated: move the daemon into a leaf of its own cgroup so the cgroup
            // may enable controllers for its children.
            let own = own_v2_path()?;
            let leaf = own.join("agentd-daemon");
            if !own.join("agentd-daemon").exists() {
                std::fs::create_dir(&leaf).ok()?;
            }
            write(&leaf.join("cgroup.procs"), "0").ok()?;
            write(&own.join("cgroup.subtree_control"), "+pids +memory").ok()?;
            own.join(GROUP)
        };
        if !base.exists() {
            std::fs::create_dir(&base).ok()?;
        }
        write(&base.join("cgroup.subtree_control"), "+pids +memory").ok()?;
        let ctl = std::fs::read_to_string(base.join("cgroup.subtree_control")).ok()?;
        if !ctl.contains("pids") {
            return None;
        }
        return Some(Hierarchy::V2(base));
    }
    if !root {
        return None;
    }
    let pids = Path::new(V2_ROOT).join("pids");
    if !pids.join("cgroup.procs").exists() {
        return None;
    }
    let pids = pids.join(GROUP);
    let _ = std::fs::create_dir(&pids);
    let memory = Path::new(V2_ROOT).join("memory");
    let memory = memory
        .join("cgroup.procs")
        .exists()
        .then(|| memory.join(GROUP));
    if let Some(m) = &memory {
        let _ = std::fs::create_dir(m);
    }
    Some(Hierarchy::V1 { pids, memory })
}

/// One command's cgroup (one directory per v1 hierarchy).
#[derive(Debug)]
pub struct Cgroup {
    hierarchy: Hierarchy,
    dirs: Vec<PathBuf>,
    pub pids_max: u64,
    pub memory_max: u64,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Cgroup {
    pub fn create(h: &Hierarchy, pids_max: u64, memory_max: u64) -> io::Result<Cgroup> {
        // A random part too: a daemon killed before it removed its cgroups leaves them
        // behind, and a later daemon given the same pid would otherwise fail to make
        // its own (and run the command without limits).
        let mut r = [0u8; 4];
        // SAFETY: getrandom fills the buffer.
        unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
        let name = format!(
            "cmd-{}-{}-{:08x}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            u32::from_ne_bytes(r)
        );
        let mut dirs = Vec::new();
        match h {
            Hierarchy::V2(base) => {
                let d = base.join(&name);
                std::fs::create_dir(&d)?;
                dirs.push(d.clone());
                write(&d.join("pids.max"), &pids_max.to_string())?;
                let _ = write(&d.join("memory.max"), &memory_max.to_string());
                let _ = write(&d.join("memory.swap.max"), "0");
            }
            Hierarchy::V1 { pids, memory } => {
                let d = pids.join(&name);
                std::fs::create_dir(&d)?;
                dirs.push(d.clone());
                write(&d.join("pids.max"), &pids_max.to_string())?;
                if let Some(m) = memory {
                    let d = m.join(&name);
                    if std::fs::create_dir(&d).is_ok() {
                        let _ = write(&d.join("memory.limit_in_bytes"), &memory_max.to_string());
                        dirs.push(d);
                    }
                }
            }
        }
        Ok(Cgroup {
            hierarchy: h.clone(),
            dirs,
            pids_max,
            memory_max,
        })
    }

    /// The directory a process can be created in (`CLONE_INTO_CGROUP`): v2 only.
    pub fn v2_dir(&self) -> Option<PathBuf> {
        match self.hierarchy {
            Hierarchy::V2(_) => self.dirs.first().cloned(),
            Hierarchy::V1 { .. } => None,
        }
    }

    /// The `cgroup.procs` files the helper writes itself into.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Writes the caps of the command about to run in this cgroup (a spare helper's,
    /// made before the command was known): plain writes, nothing moves.
    pub fn set_limits(&mut self, pids_max: u64, memory_max: u64) -> io::Result<()> {
        for d in &self.dirs {
            if d.join("pids.max").exists() {
                write(&d.join("pids.max"), &pids_max.to_string())?;
            }
            if d.join("memory.max").exists() {
                write(&d.join("memory.max"), &memory_max.to_string())?;
            } else if d.join("memory.limit_in_bytes").exists() {
                write(&d.join("memory.limit_in_bytes"), &memory_max.to_string())?;
            }
        }
        self.pids_max = pids_max;
        self.memory_max = memory_max;
        Ok(())
    }

    fn counter(file: &Path, key: &str) -> u64 {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    let mut it = l.split_whitespace();
                    (it.next() == Some(key)).then(|| it.next()?.parse().ok())?
                })
            })
            .unwrap_or(0)
    }

    /// `(oom kills, times the pids cap was hit)` so far.
    pub fn events(&self) -> (u64, u64) {
        let mut oom = 0;
        let mut pids = 0;
        for d in &self.dirs {
            pids += Self::counter(&d.join("pids.events"), "max");
            oom += Self::counter(&d.join("memory.events"), "oom_kill");
            oom += Self::counter(&d.join("memory.oom_control"), "oom_kill");
        }
        (oom, pids)
    }

    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// Kills whatever is left and removes the directories.
    pub fn kill_and_remove(&self) {
        let v2 = matches!(self.hierarchy, Hierarchy::V2(_));
        for d in &self.dirs {
            kill_and_remove_dir(d, v2);
        }
    }
}

/// Kills every process of the cgroup `d` and removes it; whether it is gone.
fn kill_and_remove_dir(d: &Path, v2: bool) -> bool {
    if v2 {
        let _ = write(&d.join("cgroup.kill"), "1");
    }
    for _ in 0..200 {
        let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for p in pids {
            // SAFETY: signalling a process of the command's cgroup.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for _ in 0..100 {
        if std::fs::remove_dir(d).is_ok() || !d.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

/// Whose per-command cgroups [`sweep`] removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// Those of daemons that are gone (at start): never this daemon's, never a live
    /// one's.
    Gone,
    /// This daemon's own (at a clean shutdown).
    Own,
}

/// What [`sweep`] did: the cgroup directories removed, and those it meant to remove but
/// could not (a process that would not die).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    pub removed: Vec<PathBuf>,
    pub failed: Vec<PathBuf>,
}

/// The daemon pid a per-command cgroup's name carries (`cmd-<pid>-<seq>[-<random>]`).
pub fn owner_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("cmd-")?;
    let mut parts = rest.split('-');
    let pid: i32 = parts.next()?.parse().ok()?;
    let seq = parts.next()?;
    (pid > 0 && !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit())).then_some(pid)
}

/// Whether a process with this pid exists (in this pid namespace).
fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the pid exists and may be signalled.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// The directories per-command cgroups are made in.
fn bases(h: &Hierarchy) -> Vec<(&Path, bool)> {
    match h {
        Hierarchy::V2(base) => vec![(base.as_path(), true)],
        Hierarchy::V1 { pids, memory } => std::iter::once(pids.as_path())
            .chain(memory.as_deref())
            .map(|p| (p, false))
            .collect(),
    }
}

/// Removes per-command cgroups left behind: with [`Owners::Gone`], those whose owner
/// daemon no longer exists (its pid is free), with [`Owners::Own`], this daemon's. A
/// cgroup of a live daemon is never touched, empty or not (it may have just been made
/// for a command about to start). What is left in a swept cgroup is killed first: its
/// owner is gone, or is this daemon shutting down. The pid in a name is the owner's in
/// its own pid namespace: daemons that share a cgroup hierarchy must share a pid
/// namespace (they do on one machine or in one container).
pub fn sweep(h: &Hierarchy, owners: Owners) -> Swept {
    let me = std::process::id() as i32;
    let mut out = Swept::default();
    for (base, v2) in bases(h) {
        let Ok(rd) = std::fs::read_dir(base) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(owner) = name.to_str().and_then(owner_of) else {
                continue;
            };
            let take = match owners {
                Owners::Own => owner == me,
                Owners::Gone => owner != me && !pid_alive(owner),
            };
            if !take {
                continue;
            }
            let d = e.path();
            if kill_and_remove_dir(&d, v2) {
                out.removed.push(d);
            } else {
                out.failed.push(d);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_from_both_name_forms_and_nothing_else() {
        assert_eq!(owner_of("cmd-4242-0-0a1b2c3d"), Some(4242));
        assert_eq!(owner_of("cmd-17-12"), Some(17));
        for other in [
            "cmd-",
            "cmd-x-1-00",
            "cmd-0-1-00",
            "cmd-12",
            "cmd-12-",
            "cmd-12-a-00",
            "agentd-daemon",
            "cgroup.procs",
            "user.slice",
        ] {
            assert_eq!(owner_of(other), None, "{other}");
        }
    }

    /// A fake hierarchy in a plain directory: the cgroups of a pid that is free (a
    /// reaped child's) go, this process's and a live process's stay; at shutdown this
    /// process's go.
    #[test]
    fn only_gone_owners_cgroups_are_swept_at_start_and_own_ones_at_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let names = [
            format!("cmd-{gone}-0-00000001"),
            format!("cmd-{gone}-3"),
            format!("cmd-{}-0-00000002", live.id()),
            format!("cmd-{me}-5-00000003"),
            "agentd-daemon".to_string(),
        ];
        for n in &names {
            std::fs::create_dir(base.join(n)).unwrap();
        }
        let h = Hierarchy::V1 {
            pids: base.clone(),
            memory: None,
        };
        let left = |base: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(base)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let swept = sweep(&h, Owners::Gone);
        assert_eq!(swept.removed.len(), 2, "{swept:?}");
        let mut want = vec![names[2].clone(), names[3].clone(), names[4].clone()];
        want.sort();
        assert_eq!(left(&base), want);
        sweep(&h, Owners::Own);
        let mut want = vec![names[2].clone(), names[4].clone()];
        want.sort();
        assert_eq!(left(&base), want);
        live.kill().unwrap();
        live.wait().unwrap();
    }
}
