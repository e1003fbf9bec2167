//! The daemon side: probes what the kernel offers (once), turns an
//! [`EffectivePolicy`](crate::EffectivePolicy) into a [`Plan`], and builds the
//! `std::process::Command` that runs the helper with the plan on fd 3 and the report
//! pipe on fd 4. [`Prepared::finish`] collects what was in force afterwards.

use super::cgroup::{self, Cgroup, Hierarchy};
use super::confine;
use super::fds::{high, pipe_high};
pub use super::knobs::Knobs;
use super::lifeline::helper_command;
use super::spare::{HelperFds, Pending, Refill, Spares};
use crate::hints;
use crate::plan::{Plan, Report, NS_NET_FD, NS_USER_FD, PLAN_FD, REPORT_FD};
use crate::policy::{EffectivePolicy, Mode, OnUnavailable};
use crate::trace::mark;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

/// A network namespace and the user namespace owning it, held open.
type NetNs = Arc<(OwnedFd, OwnedFd)>;

/// How many per-workspace network namespaces the daemon keeps open.
const NETNS_KEPT: usize = 32;

/// What the kernel offers, probed once.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub landlock_abi: i32,
    pub seccomp: bool,
    pub userns: bool,
    pub userns_error: Option<String>,
    pub cgroup: Option<String>,
    /// `full`, `degraded` or `unavailable`.
    pub level: String,
    pub missing: Vec<String>,
    pub knobs: Knobs,
}

/// Per-command resource caps (cgroup, where one can be made).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub pids_max: u64,
    pub memory_max: u64,
}

impl Limits {
    /// The config's caps (0 means the default).
    pub fn from_config(c: &crate::policy::SandboxConfig) -> Limits {
        let d = Limits::default();
        Limits {
            pids_max: if c.pids_max == 0 {
                d.pids_max
            } else {
                c.pids_max
            },
            memory_max: if c.memory_max == 0 {
                d.memory_max
            } else {
                c.memory_max
            },
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pids_max: 512,
            memory_max: 4 << 30,
        }
    }
}

/// The sandbox cannot be built and the policy says refuse.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub missing: Vec<String>,
    pub message: String,
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct CommandRequest<'a> {
    pub policy: &'a EffectivePolicy,
    pub on_unavailable: OnUnavailable,
    pub argv: Vec<String>,
    pub cwd: &'a Path,
    pub umask: u32,
    pub limits: Limits,
}

/// Builds sandboxed commands.
#[derive(Debug)]
pub struct Sandbox {
    helper: PathBuf,
    knobs: Knobs,
    probe: OnceLock<Probe>,
    cgroups: OnceLock<Option<Hierarchy>>,
    /// The network namespaces (and their user namespaces) commands with network `none`
    /// join, one per working directory, loopback up, most recently used last; at most
    /// [`NETNS_KEPT`] are held. Unused (each command gets its own) when Landlock cannot
    /// scope abstract sockets (ABI < 6).
    netns: Mutex<Vec<(PathBuf, NetNs)>>,
    /// Degraded: the 0700 directory (random name) holding each command's private
    /// `TMPDIR`; Landlock hides it from commands, so one command never sees another's.
    /// It lies in [`Sandbox::with_tmp_dirs`]'s directory (agentd's home, hidden
    /// anyway), else in the system temp dir.
    tmp_parent: OnceLock<Option<PathBuf>>,
    /// Where [`Sandbox::tmp_parent`] goes; `None`: the system temp dir.
    tmp_base: Option<PathBuf>,
    /// Where the per-workspace upper layers of granted caches live (agentd's home, which
    /// commands never see); `None`: granted caches are read-only.
    cache_layers: Option<PathBuf>,
    /// The spare helper ([`super::spare`]) `shell` commands take (if `spares_on`).
    spares: Arc<Spares>,
    spares_on: bool,
}

/// A command ready to spawn, and what to collect once it ended.
#[derive(Debug)]
pub struct Prepared {
    /// The helper (or, unconfined, the command itself). The caller adds stdio.
    pub command: Command,
    facts: serde_json::Map<String, Value>,
    report: Option<OwnedFd>,
    tmp_dir: Option<PathBuf>,
    cgroup: Option<Cgroup>,
    policy: EffectivePolicy,
    protected: Vec<PathBuf>,
    /// Without a mount namespace: the protected paths as they were, put back after.
    restore: Option<super::restore::Snapshot>,
    /// The git scan before the command, audited after it.
    git: Option<GitAudit>,
    /// Degraded: the read end of the report pipe, whose write end the guard holds until
    /// it has killed every process the command started. EOF means none is left.
    guard_alive: Option<OwnedFd>,
    /// The writable roots in force (the restore's roots).
    writable: Vec<PathBuf>,
    /// Confined without namespaces (the degraded level).
    degraded: bool,
    /// A long-running command (an MCP server) between requests; see [`Prepared::enter`].
    between: Between,
    /// The set-up's stage marks, the daemon's and (once read) the helper's (feature
    /// `trace` only).
    marks: crate::trace::Marks,
    /// From [`Sandbox::prepare_to_start`]: the spare taken and what starting needs; once
    /// started, how to ask for the next spare when this command is done with (drop).
    pending: Option<Pending>,
    refill: Option<Refill>,
}

/// A long-running command's state between requests (degraded level: stopped).
#[derive(Debug, Default)]
struct Between {
    /// The helper's pid, once spawned.
    helper: Option<i32>,
    /// Requests in flight.
    in_flight: usize,
    /// The processes stopped since the last request ended.
    frozen: Option<super::freeze::Frozen>,
}

/// How long stopping a server's processes may take before it is given up on.
const FREEZE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`crate::git::audit`] needs after the command.
#[derive(Debug)]
struct GitAudit {
    before: crate::git::Scan,
    walk: Vec<PathBuf>,
    env: crate::git::Env,
    git_init: bool,
}

impl GitAudit {
    fn run(&self) -> Vec<crate::git::Finding> {
        crate::git::audit(&self.before, &self.walk, &self.env, self.git_init)
    }
}

fn finding_hint(f: &crate::git::Finding) -> String {
    let how = if f.grant == "write" {
        "in `ask` mode, ask for a write grant for it (`sandbox_grant: {\"write\": PATH}`)"
    } else {
        "ask for the `git:init` grant to keep new repositories with hooks"
    };
    format!(
        "{} was quarantined by the sandbox: {} (it would run outside the sandbox); {how}",
        f.path.display(),
        f.what
    )
}

fn seccomp_available() -> bool {
    Path::new("/proc/sys/kernel/seccomp/actions_avail").exists()
}

/// Files and directories that execute code when the user runs git later, inside
/// writable roots (existing ones, and missing ones that must not appear), and the git
/// directories a linked worktree needs writable so `git commit` works there. See
/// [`crate::git::scan`].
pub fn git_protected(roots: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let s = crate::git::scan(roots, roots, &crate::git::Env::from_process());
    let mut all = s.protected;
    all.extend(s.watch);
    all.sort();
    all.dedup();
    (all, s.extra_roots)
}

/// What a command must not change: the git scan's protected paths and the protect set
/// (what exists is read-only, a symlink protects what it points to when writable; what
/// does not exist goes to the scan's watch list, quarantined if a command creates it).
fn protect_set(
    p: &EffectivePolicy,
    scan: &mut crate::git::Scan,
    writable: &[PathBuf],
) -> Vec<PathBuf> {
    let mut protected = scan.protected.clone();
    for pp in &p.protect {
        match std::fs::symlink_metadata(pp) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(t) = pp.canonicalize() {
                    if writable.iter().any(|w| t.starts_with(w)) && !protected.contains(&t) {
                        protected.push(t);
                    }
                }
            }
            Ok(_) => {
                if !protected.contains(pp) {
                    protected.push(pp.clone());
                }
            }
            Err(_) => scan.watch_tools.push(pp.clone()),
        }
    }
    protected
}

/// The writable roots worth walking for nested repositories: not the toolchain caches.
fn walk_roots(p: &EffectivePolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
    let home = p.env.get("HOME").map(PathBuf::from);
    let caches: Vec<PathBuf> = p
        .caches
        .iter()
        .flat_map(|c| c.roots(home.as_deref(), &p.env))
        .map(|r| r.canonicalize().unwrap_or(r))
        .collect();
    writable
        .iter()
        .filter(|w| !caches.iter().any(|c| w.starts_with(c)))
        .cloned()
        .collect()
}

fn canonical_existing(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = paths.iter().filter_map(|p| p.canonicalize().ok()).collect();
    out.sort();
    out.dedup();
    out
}

impl Sandbox {
    /// `helper` is the executable that calls [`crate::helper_main`] on [`HELPER_ARG`]
    /// (the daemon: `std::env::current_exe()`).
    pub fn new(helper: PathBuf, knobs: Knobs) -> Sandbox {
        Sandbox {
            knobs,
            probe: OnceLock::new(),
            cgroups: OnceLock::new(),
            netns: Mutex::new(Vec::new()),
            tmp_parent: OnceLock::new(),
            tmp_base: None,
            cache_layers: None,
            spares: Arc::new(Spares::new(helper.clone())),
            spares_on: !knobs.no_spare,
            helper,
        }
    }

    /// Whether `shell` commands take a pre-started helper ([`Sandbox::prepare_to_start`];
    /// default: yes, unless the `no_spare` knob is set).
    pub fn with_spares(mut self, on: bool) -> Sandbox {
        self.spares_on = on && !self.knobs.no_spare;
        if !self.spares_on {
            self.spares.close();
        }
        self
    }

    /// The ready spare helper's pid and cgroup directories, waiting up to `limit` for
    /// one (tests, diagnostics).
    pub fn spare(&self, limit: std::time::Duration) -> Option<(u32, Vec<PathBuf>)> {
        Some((self.spares.ready_pid(limit)?, self.spares.cgroup_dirs()))
    }

    /// Ends the spare helper (it exits and its cgroup is removed) and starts no more:
    /// the daemon calls it when it shuts down (its `Sandbox` is never dropped).
    pub fn release_spares(&self) {
        self.spares.close();
    }

    /// Keeps degraded commands' private `TMPDIR`s below `dir` (agentd's home, which
    /// commands never see) rather than in the system temp dir. Landlock can only grant,
    /// so hiding a directory means a rule for each of its siblings: below a crowded
    /// `/tmp` (thousands of other programs' entries) that is most of a command's set-up
    /// time, below a directory already hidden it costs nothing. What an earlier daemon
    /// on this home left there is removed when the first command needs it (one daemon
    /// per home).
    pub fn with_tmp_dirs(mut self, dir: PathBuf) -> Sandbox {
        self.tmp_base = Some(dir);
        self
    }

    /// Keeps the upper layers of granted caches in `dir` (one per workspace and cache).
    pub fn with_cache_layers(mut self, dir: PathBuf) -> Sandbox {
        self.cache_layers = Some(dir);
        self
    }

    /// The overlays for the granted caches of a command working in `cwd`, their layer
    /// directories made; a cache whose layer cannot be made is left out (and so stays
    /// read-only).
    fn layers_for(&self, caches: &[PathBuf], cwd: &Path) -> Vec<crate::plan::CacheLayer> {
        use std::os::unix::fs::DirBuilderExt;
        let Some(base) = &self.cache_layers else {
            return Vec::new();
        };
        let ws = base.join(fnv_hex(cwd.as_os_str().as_encoded_bytes()));
        caches
            .iter()
            .filter_map(|c| {
                let d = ws.join(fnv_hex(c.as_os_str().as_encoded_bytes()));
                let (upper, work) = (d.join("upper"), d.join("work"));
                for x in [&upper, &work] {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(x)
                        .ok()?;
                }
                let _ = std::fs::write(d.join("lower"), c.as_os_str().as_encoded_bytes());
                Some(crate::plan::CacheLayer {
                    lower: c.clone(),
                    upper: upper.canonicalize().ok()?,
                    work: work.canonicalize().ok()?,
                })
            })
            .collect()
    }

    fn tmp_parent(&self) -> Option<&PathBuf> {
        self.tmp_parent
            .get_or_init(|| {
                use std::os::unix::fs::DirBuilderExt;
                let name = format!("agentd-sbx-{}-{}", std::process::id(), rand_suffix());
                let d = match &self.tmp_base {
                    Some(base) => {
                        std::fs::DirBuilder::new()
                            .recursive(true)
                            .mode(0o700)
                            .create(base)
                            .ok()?;
                        // Left by an earlier daemon on this home (a crash).
                        if let Ok(rd) = std::fs::read_dir(base) {
                            for e in rd.flatten() {
                                let _ = std::fs::remove_dir_all(e.path());
                            }
                        }
                        base.join(name)
                    }
                    None => std::env::temp_dir().join(name),
                };
                std::fs::DirBuilder::new().mode(0o700).create(&d).ok()?;
                d.canonicalize().ok()
            })
            .as_ref()
    }

    pub fn knobs(&self) -> Knobs {
        self.knobs
    }

    /// What the kernel offers (probed on first use: one helper run building the
    /// namespaces).
    pub fn probe(&self) -> &Probe {
        self.probe.get_or_init(|| self.run_probe())
    }

    fn hierarchy(&self) -> Option<&Hierarchy> {
        self.cgroups.get_or_init(cgroup::detect).as_ref()
    }

    /// Sweeps per-command cgroups left behind ([`cgroup::sweep`]); nothing where this
    /// daemon makes no cgroups. The daemon calls it with [`cgroup::Owners::Gone`] at
    /// start, before it runs any command, and with [`cgroup::Owners::Own`] when it
    /// shuts down.
    pub fn sweep_cgroups(&self, owners: cgroup::Owners) -> cgroup::Swept {
        self.hierarchy()
            .map(|h| cgroup::sweep(h, owners))
            .unwrap_or_default()
    }

    fn run_probe(&self) -> Probe {
        let landlock_abi = if self.knobs.force_no_landlock {
            0
        } else {
            confine::landlock_abi()
        };
        let seccomp = !self.knobs.force_no_seccomp && seccomp_available();
        let (userns, userns_error) = if self.knobs.force_no_userns {
            (
                false,
                Some("forced off by the daemon (test knob)".to_string()),
            )
        } else {
            match self.probe_userns() {
                Ok(()) => (true, None),
                Err(e) => (false, Some(e)),
            }
        };
        let mut missing = Vec::new();
        if landlock_abi < 1 {
            missing.push("landlock".to_string());
        }
        if !seccomp {
            missing.push("seccomp".to_string());
        }
        let level = if !missing.is_empty() {
            "unavailable"
        } else if userns {
            "full"
        } else {
            "degraded"
        };
        Probe {
            landlock_abi,
            seccomp,
            userns,
            userns_error,
            cgroup: cgroup::available().map(str::to_string),
            level: level.into(),
            missing,
            knobs: self.knobs,
        }
    }

    fn probe_userns(&self) -> Result<(), String> {
        let plan = Plan {
            argv: vec!["true".into()],
            cwd: "/".into(),
            namespaces: true,
            probe: true,
            ..Default::default()
        };
        let (mut cmd, report, _) = self
            .helper_command(&plan, None)
            .map_err(|e| e.to_string())?;
        let out = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running {}: {e}", self.helper.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let r = read_report(report);
        Err(r
            .and_then(|r| r.error)
            .unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }

    /// The network namespace for commands with network `none` working in `key`: made
    /// once (a helper run, a few milliseconds) and shared by the commands there, so the
    /// per-command cost stays a `setns`. Commands of one workspace may reach each
    /// other's loopback servers; commands of different workspaces never do.
    fn workspace_netns(&self, key: &Path) -> Option<NetNs> {
        if self.probe().landlock_abi < 6 || !self.probe().userns {
            return None;
        }
        let mut held = self.netns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = held.iter().position(|(k, _)| k == key) {
            let e = held.remove(i);
            let ns = e.1.clone();
            held.push(e);
            return Some(ns);
        }
        let ns = Arc::new(self.make_netns().ok()?);
        if held.len() >= NETNS_KEPT {
            held.remove(0);
        }
        held.push((key.to_path_buf(), ns.clone()));
        Some(ns)
    }

    fn make_netns(&self) -> std::io::Result<(OwnedFd, OwnedFd)> {
        let plan = Plan {
            argv: vec!["true".into()],
            cwd: "/".into(),
            namespaces: true,
            holder: true,
            ..Default::default()
        };
        let (mut cmd, report, _) = self.helper_command(&plan, None)?;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        drop(cmd);
        let mut f = std::fs::File::from(report);
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while f.read(&mut b)? == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        let ok = serde_json::from_slice::<Report>(&line)
            .map(|r| r.level == "holder")
            .unwrap_or(false);
        let open = |kind: &str| {
            let f = std::fs::File::open(format!("/proc/{}/ns/{kind}", child.id()))?;
            // Above the descriptors the helper's setup uses (3 to 6).
            high(OwnedFd::from(f))
        };
        let fds = if ok {
            open("user").and_then(|u| Ok((u, open("net")?)))
        } else {
            Err(std::io::Error::other("the namespace holder failed"))
        };
        drop(child.stdin.take());
        let _ = child.kill();
        let _ = child.wait();
        fds
    }

    fn helper_command(
        &self,
        plan: &Plan,
        ns: Option<NetNs>,
    ) -> std::io::Result<(Command, OwnedFd, HelperFds)> {
        let text = serde_json::to_vec(plan).map_err(std::io::Error::other)?;
        let (plan_r, plan_w) = pipe_high()?;
        // The whole plan is written before the helper starts: the pipe must hold it (a
        // long list of host sockets to cover can pass the default 64 KiB).
        let mut room = 60_000;
        if text.len() > room {
            // SAFETY: fcntl on a pipe descriptor we own.
            let got = unsafe { libc::fcntl(plan_w.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
            if got > 0 {
                room = got as usize;
            }
        }
        if text.len() > room {
            return Err(std::io::Error::other("sandbox plan too large for the pipe"));
        }
        let (rep_r, rep_w) = pipe_high()?;
        std::fs::File::from(plan_w).write_all(&text)?;
        let (pr, rw) = (plan_r.as_raw_fd(), rep_w.as_raw_fd());
        let ns_fds = ns.as_ref().map(|n| (n.0.as_raw_fd(), n.1.as_raw_fd()));
        let fds = HelperFds {
            plan: pr,
            report: rw,
            ns: ns_fds,
        };
        let mut cmd = helper_command(&self.helper);
        // The closure owns the descriptors (the namespaces' too) so they live until
        // spawn; the parent's copies close with the Command.
        let keep = (plan_r, rep_w, ns);
        // SAFETY: dup2 is async-signal-safe; the descriptors are open and above 4.
        unsafe {
            cmd.pre_exec(move || {
                let _ = &keep;
                if libc::dup2(pr, PLAN_FD) < 0 || libc::dup2(rw, REPORT_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some((u, n)) = ns_fds {
                    if libc::dup2(u, NS_USER_FD) < 0 || libc::dup2(n, NS_NET_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok((cmd, rep_r, fds))
    }

    /// Builds the command for `req`: sandboxed, or unconfined when the mode is
    /// `full_access` or the sandbox is unavailable and `on_unavailable = "warn"`.
    pub fn prepare(&self, req: &CommandRequest<'_>) -> Result<Prepared, Unavailable> {
        self.prepare_with(req, false)
    }

    /// As [`Sandbox::prepare`], for a caller that starts the command with
    /// [`Prepared::start`] (the `shell` tool): the command may then be handed to the
    /// spare helper, already executed and already in a cgroup of its own
    /// (docs/sandbox.md#cost), and a new spare is started once it has ended. The plan is
    /// computed here, as for any command; `data.sandbox.spare` says which it was.
    pub fn prepare_to_start(&self, req: &CommandRequest<'_>) -> Result<Prepared, Unavailable> {
        self.prepare_with(req, true)
    }

    fn prepare_with(
        &self,
        req: &CommandRequest<'_>,
        to_start: bool,
    ) -> Result<Prepared, Unavailable> {
        let mut marks = crate::trace::Marks::new();
        mark(&mut marks, "daemon: prepare");
        let p = req.policy;
        let mut facts = serde_json::Map::new();
        facts.insert("mode".into(), json!(p.mode.as_str()));
        facts.insert("network".into(), json!(p.network.as_str()));
        facts.insert("policy".into(), json!(p.digest()));
        let unconfined = |facts: serde_json::Map<String, Value>, tmp: Option<PathBuf>| {
            let mut cmd = Command::new(&req.argv[0]);
            cmd.args(&req.argv[1..]).env_clear().current_dir(req.cwd);
            cmd.envs(&p.env);
            let tmp_env = tmp.clone().unwrap_or_else(std::env::temp_dir);
            cmd.env("TMPDIR", tmp_env);
            let umask = req.umask;
            // SAFETY: umask/setrlimit are async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(umask as libc::mode_t);
                    confine::set_rlimits();
                    Ok(())
                });
            }
            Prepared {
                command: cmd,
                facts,
                report: None,
                tmp_dir: tmp,
                cgroup: None,
                policy: p.clone(),
                protected: Vec::new(),
                restore: None,
                git: None,
                guard_alive: None,
                writable: Vec::new(),
                degraded: false,
                between: Between::default(),
                marks: Vec::new(),
                pending: None,
                refill: None,
            }
        };
        if p.mode == Mode::FullAccess {
            facts.insert("level".into(), json!("none"));
            facts.insert("reason".into(), json!("full_access"));
            return Ok(unconfined(facts, None));
        }
        let probe = self.probe().clone();
        facts.insert("landlock_abi".into(), json!(probe.landlock_abi));
        if !probe.missing.is_empty() {
            let message = format!(
                "the command sandbox cannot be built: this kernel lacks {} (Landlock needs \
                 Linux 5.13+ with `lsm=landlock` on the kernel command line; seccomp needs \
                 CONFIG_SECCOMP_FILTER); set [sandbox] on_unavailable = \"warn\" to run \
                 commands unconfined",
                probe.missing.join(" and ")
            );
            if req.on_unavailable == OnUnavailable::Refuse {
                return Err(Unavailable {
                    missing: probe.missing.clone(),
                    message,
                });
            }
            facts.insert("level".into(), json!("none"));
            facts.insert(
                "reason".into(),
                json!(format!(
                    "on_unavailable = warn; missing {}",
                    probe.missing.join(", ")
                )),
            );
            return Ok(unconfined(facts, None));
        }
        let mut writable: Vec<PathBuf> = canonical_existing(&p.writable_roots);
        let hidden = canonical_existing(&p.hidden);
        writable.retain(|r| !hidden.iter().any(|h| r.starts_with(h)));
        mark(&mut marks, "daemon: roots and hidden set resolved");
        let walk = walk_roots(p, &writable);
        let git_env = crate::git::Env::from_process();
        let mut scan = crate::git::scan(&writable, &walk, &git_env);
        mark(&mut marks, "daemon: git scan");
        let protected = protect_set(p, &mut scan, &writable);
        mark(&mut marks, "daemon: protect set");
        if p.mode == Mode::WorkspaceWrite {
            for g in scan.extra_roots.clone() {
                if !hidden.iter().any(|h| g.starts_with(h)) && !writable.contains(&g) {
                    writable.push(g);
                }
            }
        }
        let cwd = req
            .cwd
            .canonicalize()
            .unwrap_or_else(|_| req.cwd.to_path_buf());
        if let Some(h) = hidden.iter().find(|h| cwd.starts_with(h)) {
            return Err(Unavailable {
                missing: vec![],
                message: format!(
                    "the working directory {} lies inside {}, which the sandbox hides",
                    cwd.display(),
                    h.display()
                ),
            });
        }
        let namespaces = probe.userns;
        let sockets = canonical_existing(&p.sockets);
        // Granted caches: at the full level each is an overlay whose writes stay in a
        // layer of the workspace's own; at the degraded level there are no overlays, so
        // they are read-only (a command could otherwise plant code in what the user's
        // own builds extract and run).
        let cache_roots: Vec<PathBuf> = {
            let home = p.env.get("HOME").map(PathBuf::from);
            let roots: Vec<PathBuf> = p
                .caches
                .iter()
                .flat_map(|c| c.roots(home.as_deref(), &p.env))
                .collect();
            canonical_existing(&roots)
                .into_iter()
                .filter(|r| writable.contains(r))
                .collect()
        };
        let cache_layers = if namespaces {
            self.layers_for(&cache_roots, &cwd)
        } else {
            Vec::new()
        };
        let read_only_caches: Vec<PathBuf> = cache_roots
            .iter()
            .filter(|r| !cache_layers.iter().any(|l| &l.lower == *r))
            .cloned()
            .collect();
        writable.retain(|w| !read_only_caches.contains(w));
        if !cache_roots.is_empty() {
            facts.insert(
                "caches".into(),
                json!({
                    "layered": cache_layers.iter().map(|l| &l.lower).collect::<Vec<_>>(),
                    "read_only": read_only_caches,
                }),
            );
        }
        let tmp_dir = if namespaces {
            None
        } else {
            use std::os::unix::fs::DirBuilderExt;
            self.tmp_parent().and_then(|parent| {
                let d = parent.join(format!("cmd-{}", rand_suffix()));
                std::fs::DirBuilder::new().mode(0o700).create(&d).ok()?;
                Some(d)
            })
        };
        let mut hidden = hidden;
        if let Some(parent) = self.tmp_parent().filter(|_| !namespaces) {
            hidden.push(parent.clone());
        }
        mark(&mut marks, "daemon: caches and TMPDIR");
        // A spare's cgroup is given this command's caps; without one, a cgroup is made.
        let spares = to_start && self.spares_on;
        let mut spare = if spares { self.spares.take() } else { None };
        let caps = (req.limits.pids_max, req.limits.memory_max);
        let cgroup = match spare.as_mut().map(|s| s.cgroup_for(caps)) {
            Some(Ok(cg)) => cg,
            taken => {
                spare = spare.filter(|_| taken.is_none());
                (self.hierarchy()).and_then(|h| Cgroup::create(h, caps.0, caps.1).ok())
            }
        };
        mark(&mut marks, "daemon: cgroup made");
        let cover_sockets = if namespaces {
            host_sockets(p.network, &hidden, &sockets, &writable, &cwd)
        } else {
            Vec::new()
        };
        mark(&mut marks, "daemon: host sockets listed");
        let mut env: Vec<(String, String)> =
            p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let tmp_env = tmp_dir
            .as_ref()
            .map(|t| t.display().to_string())
            .unwrap_or_else(|| "/tmp".into());
        env.push(("TMPDIR".into(), tmp_env));
        let plan = Plan {
            argv: req.argv.clone(),
            cwd: cwd.clone(),
            env,
            umask: req.umask,
            namespaces,
            network: p.network,
            writable: writable.clone(),
            hidden: hidden.clone(),
            protected: protected.clone(),
            pinned: scan.pinned.clone(),
            tmp_dir: tmp_dir.clone(),
            landlock: true,
            seccomp: true,
            cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            cgroup_dir: cgroup.as_ref().and_then(|c| c.v2_dir()),
            // SAFETY: geteuid never fails.
            nproc: (cgroup.is_none() && unsafe { libc::geteuid() } != 0)
                .then_some(req.limits.pids_max),
            probe: false,
            join_net: false,
            holder: false,
            fail_setup: self.knobs.fail_setup,
            sockets: sockets.clone(),
            cover_sockets,
            loopback: namespaces && p.network == crate::policy::Network::None,
            refuse_unix: !namespaces && sockets.is_empty(),
            cache_layers,
            no_signal_scope: self.knobs.no_signal_scope,
            guard_keepers: !namespaces && !self.knobs.signal_scope(probe.landlock_abi),
        };
        let ns = if namespaces && p.network == crate::policy::Network::None {
            self.workspace_netns(&cwd)
        } else {
            None
        };
        let plan = Plan {
            join_net: ns.is_some(),
            ..plan
        };
        mark(&mut marks, "daemon: network namespace");
        facts.insert(
            "unix_sockets".into(),
            json!(unix_sockets_fact(&plan, probe.landlock_abi)),
        );
        if !namespaces {
            // What the degraded level gets by other means, and which of those this
            // kernel cannot give (recorded on every command).
            let mut unavailable: Vec<&str> = vec!["loopback", "private /tmp", "pid isolation"];
            if plan.tmp_dir.is_none() {
                unavailable.push("private TMPDIR");
            }
            if plan.guard_keepers {
                // Seccomp keeps the command's signals off the guard, the outer helper
                // and the daemon instead (docs/sandbox.md#fallback-ladder).
                unavailable.push("signal scoping");
            }
            if probe.landlock_abi < 6 {
                unavailable.push("abstract socket scoping");
            }
            if !plan.sockets.is_empty() && probe.landlock_abi < 9 {
                unavailable.push("Unix sockets limited to the granted paths");
            }
            facts.insert("unavailable".into(), json!(unavailable));
        }
        let (command, report, fds) = self.helper_command(&plan, ns).map_err(|e| Unavailable {
            missing: vec![],
            message: format!("could not start the sandbox helper: {e}"),
        })?;
        if !namespaces {
            facts.insert(
                "reason".into(),
                json!(format!(
                    "no user namespaces ({}): no mount, pid or net isolation; Landlock hides \
                     the hidden set, seccomp blocks inet sockets, leftovers are killed by \
                     the subreaper",
                    probe.userns_error.clone().unwrap_or_default()
                )),
            );
        }
        facts.insert(
            "limits".into(),
            json!({
                "cgroup": cgroup.as_ref().map(|c| c.hierarchy().name()),
                "pids_max": cgroup.as_ref().map(|c| c.pids_max),
                "memory_max": cgroup.as_ref().map(|c| c.memory_max),
                "rlimit_core": 0,
                "rlimit_nproc": (cgroup.is_none() && unsafe { libc::geteuid() } != 0)
                    .then_some(req.limits.pids_max),
            }),
        );
        facts.insert("writable_roots".into(), json!(writable));
        let guard_alive = if namespaces {
            None
        } else {
            report.try_clone().ok()
        };
        let restore = saved_before(namespaces, p.mode, &protected, &writable);
        let pending = to_start.then(|| {
            facts.insert("spare".into(), json!(spare.is_some()));
            Pending {
                spare,
                fds,
                refill: spares.then(|| Refill {
                    spares: self.spares.clone(),
                    hierarchy: self.hierarchy().cloned(),
                    limits: caps,
                }),
            }
        });
        mark(&mut marks, "daemon: helper command built");
        Ok(Prepared {
            pending,
            refill: None,
            marks,
            guard_alive,
            command,
            facts,
            report: Some(report),
            tmp_dir,
            cgroup,
            policy: p.clone(),
            restore,
            protected,
            writable,
            degraded: !namespaces,
            between: Between::default(),
            git: (p.mode == Mode::WorkspaceWrite).then_some(GitAudit {
                before: scan,
                walk,
                env: git_env,
                git_init: p.git_init,
            }),
        })
    }
}

/// The protected paths as they are before the command, to be put back after it
/// ([`Prepared::finish`]). Without namespaces, every one (nothing else holds them). With
/// namespaces they are read-only mounts, but a mount is dropped when the host replaces
/// the file beneath it (the user's own `git config` renames a new `.git/config` over it)
/// and the command can then write the file until it ends: those that exist are pinned
/// (a descriptor each, nothing read), and one replaced during the command is put back
/// from the inode pinned. Only where the command may write the workspace.
fn saved_before(
    namespaces: bool,
    mode: Mode,
    protected: &[PathBuf],
    writable: &[PathBuf],
) -> Option<super::restore::Snapshot> {
    if !namespaces {
        Some(super::restore::Snapshot::take(protected, writable))
    } else if mode == Mode::WorkspaceWrite {
        Some(super::restore::Snapshot::take_pinned(protected, writable))
    } else {
        None
    }
}

/// The hint of a protected path the command changed (`what`: what the restore did). With
/// namespaces it could only have been written after the host replaced it while the
/// command ran, and what the user changed then is put back too.
fn protected_hint(path: &Path, what: &str, degraded: bool) -> String {
    if degraded {
        format!(
            "{} is protected by the sandbox (git hooks and config run code outside it): {what}",
            path.display()
        )
    } else {
        format!(
            "{} is protected by the sandbox (git hooks and config run code outside it): {what} \
             (it was replaced outside the sandbox while the command ran, which lifts its \
             read-only mount; it is kept as it was before the command, so a change made to it \
             outside the sandbox meanwhile must be made again)",
            path.display()
        )
    }
}

/// The pathname Unix sockets bound in the daemon's network namespace
/// (`/proc/net/unix`), canonical, that a command could otherwise connect to: with
/// network `none` every one outside what the sandbox empties anyway (the private `/tmp`
/// but for roots bound back into it, an emptied `/run`, the hidden set); with `host`
/// the container engines'. Granted ones are left out. Sockets bound with a relative
/// path, or in another network namespace, are not listed by the kernel here.
pub fn host_sockets(
    network: crate::policy::Network,
    hidden: &[PathBuf],
    granted: &[PathBuf],
    writable: &[PathBuf],
    cwd: &Path,
) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/net/unix") else {
        return Vec::new();
    };
    let visible_roots: Vec<&Path> = writable
        .iter()
        .map(PathBuf::as_path)
        .chain(std::iter::once(cwd))
        .collect();
    let run_emptied = |d: &str| !visible_roots.iter().any(|w| w.starts_with(d));
    let mut out: Vec<PathBuf> = Vec::new();
    for line in text.lines().skip(1) {
        let Some(raw) = line.split_whitespace().nth(7) else {
            continue;
        };
        // The path is the rest of the line (it may hold spaces).
        let raw = line[line.find(raw).unwrap_or(0)..].trim_end();
        if !raw.starts_with('/') {
            continue;
        }
        let path = Path::new(raw);
        if network == crate::policy::Network::Host && !crate::policy::is_engine_socket(path) {
            continue;
        }
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        let engine =
            crate::policy::is_engine_socket(&real) || crate::policy::is_engine_socket(path);
        if network == crate::policy::Network::Host && !engine {
            continue;
        }
        if granted.iter().any(|g| real.starts_with(g)) {
            continue;
        }
        if hidden.iter().any(|h| real.starts_with(h)) {
            continue;
        }
        let under_visible = visible_roots.iter().any(|w| real.starts_with(w));
        if real.starts_with("/tmp") && !under_visible {
            continue;
        }
        if network == crate::policy::Network::None
            && ((real.starts_with("/run") && run_emptied("/run"))
                || (real.starts_with("/var/run") && run_emptied("/var/run")))
        {
            continue;
        }
        out.push(real);
    }
    out.sort();
    out.dedup();
    out
}

/// FNV-1a 64 of `b` in hex: a stable directory name.
fn fnv_hex(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for x in b {
        h ^= *x as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// What `data.sandbox.unix_sockets` says about pathname Unix sockets.
fn unix_sockets_fact(plan: &Plan, landlock_abi: i32) -> String {
    let granted = if plan.sockets.is_empty() {
        String::new()
    } else {
        format!(
            "; granted: {}",
            plan.sockets
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    if plan.namespaces {
        let what = if plan.network != crate::policy::Network::None {
            "container engines' sockets covered"
        } else if landlock_abi >= 9 {
            "host sockets covered or emptied away (private /tmp, empty /run); any other \
             outside the writable roots refused (Landlock), one bound after the command \
             started included"
        } else {
            "host sockets covered or emptied away (private /tmp, empty /run), as listed when \
             the command started: one bound on the host after that, outside /run, /tmp and \
             the hidden set, is not covered (Landlock ABI < 9 cannot refuse it)"
        };
        format!("{what}{granted}")
    } else if plan.refuse_unix {
        "refused (seccomp: no mount namespace to cover the host's sockets)".to_string()
    } else if landlock_abi >= 9 {
        format!("granted paths and writable roots only (Landlock){granted}")
    } else {
        format!(
            "every socket reachable: a socket grant lifts the seccomp refusal, and this \
             kernel cannot limit connects to the granted paths{granted}"
        )
    }
}

/// How long the daemon waits for a degraded command's guard to finish its kills.
const GUARD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn rand_suffix() -> String {
    let mut b = [0u8; 6];
    // SAFETY: getrandom fills the buffer.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn read_report(fd: OwnedFd) -> Option<Report> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut f = std::fs::File::from(fd);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    // The last complete line wins (pid 1's failure, or the command's report).
    buf.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .rev()
        .find_map(|l| serde_json::from_slice::<Report>(l).ok())
}

impl Prepared {
    /// What is known before the command runs.
    pub fn facts(&self) -> Value {
        Value::Object(self.facts.clone())
    }

    /// Whether the command runs inside the sandbox (false for `full_access` and
    /// `on_unavailable = "warn"` without a sandbox).
    pub fn is_confined(&self) -> bool {
        self.report.is_some()
    }

    /// The command to spawn, taken out for a caller that spawns it itself (a
    /// long-running MCP server); this `Prepared` stays the guard of what it runs in.
    pub fn take_command(&mut self) -> Command {
        std::mem::replace(&mut self.command, Command::new("/"))
    }

    /// Starts the command (prepared by [`Sandbox::prepare_to_start`] or
    /// [`Sandbox::prepare`]) with its stdio (`stdin` `None`: `/dev/null`), in a process
    /// group of its own, killed when the `Child` is dropped: handed to the spare taken,
    /// or the helper spawned (also when the spare died meanwhile). A new spare is
    /// started in the background once this `Prepared` is finished or dropped. Must run
    /// in a tokio runtime.
    pub fn start(
        &mut self,
        stdin: Option<OwnedFd>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> std::io::Result<tokio::process::Child> {
        mark(&mut self.marks, "daemon: start");
        let stdio = (stdin, stdout, stderr);
        let (child, spare, refill) =
            super::spare::start(self.pending.take(), self.take_command(), stdio)?;
        self.refill = refill;
        if let Some(v) = self.facts.get_mut("spare") {
            *v = json!(spare);
        }
        Ok(child)
    }

    /// Reads the helper's report into the facts, once; it is complete as soon as the
    /// command runs (the helper writes it just before exec).
    fn absorb_report(&mut self) {
        let Some(fd) = self.report.take() else { return };
        let facts = &mut self.facts;
        match read_report(fd) {
            Some(r) => {
                if let Some(e) = &r.error {
                    facts.insert("error".into(), json!(e));
                }
                if !r.level.is_empty() {
                    facts.insert("level".into(), json!(r.level));
                }
                facts.insert(
                    "landlock".into(),
                    json!({"abi": r.landlock_abi, "status": r.landlock}),
                );
                facts.insert("seccomp".into(), json!(r.seccomp));
                facts.insert("namespaces".into(), json!(r.namespaces));
                facts.insert("proc".into(), json!(r.proc));
                facts.insert("caps_dropped".into(), json!(r.caps_dropped));
                facts.insert("no_new_privs".into(), json!(r.no_new_privs));
                facts.insert("protected".into(), json!(r.protected));
                if !r.protected_parent.is_empty() {
                    facts.insert("protected_parent".into(), json!(r.protected_parent));
                }
                facts.insert("hidden_mounted".into(), json!(r.hidden_mounted));
                if !r.cache_layers_failed.is_empty() {
                    facts.insert("cache_layers_failed".into(), json!(r.cache_layers_failed));
                }
                if r.sockets_covered > 0 {
                    facts.insert("sockets_covered".into(), json!(r.sockets_covered));
                }
                self.marks.extend(r.marks);
            }
            None => {
                facts.insert("error".into(), json!("the sandbox helper reported nothing"));
            }
        }
    }

    /// What is in force while a long-running command runs: the facts known before it
    /// started and what the helper reported (read once). Cgroup and temporary directory
    /// stay until this `Prepared` is dropped.
    pub fn running_facts(&mut self) -> Value {
        self.absorb_report();
        Value::Object(self.facts.clone())
    }

    /// A long-running command (an MCP server) was spawned as `pid` (the helper).
    pub fn started(&mut self, pid: i32) {
        self.between.helper = Some(pid);
    }

    /// Before a request to a long-running command. At the degraded level its processes
    /// were stopped when the last request ended ([`Prepared::leave`]), so what changed
    /// since is the user's: the protected paths are saved again (and the git scan
    /// taken again) as they are now, then the processes continue. No-op with
    /// namespaces (read-only mounts) and while another request is in flight.
    pub fn enter(&mut self) {
        self.between.in_flight += 1;
        if self.between.in_flight > 1 {
            return;
        }
        let Some(frozen) = self.between.frozen.take() else {
            return;
        };
        if let Some(g) = self.git.as_mut() {
            let mut scan = crate::git::scan(&self.writable, &g.walk, &g.env);
            self.protected = protect_set(&self.policy, &mut scan, &self.writable);
            g.before = scan;
        }
        if self.restore.is_some() {
            self.restore = Some(if self.degraded {
                super::restore::Snapshot::take(&self.protected, &self.writable)
            } else {
                super::restore::Snapshot::take_existing(&self.protected, &self.writable)
            });
        }
        frozen.thaw();
    }

    /// After a request to a long-running command, once none is in flight: at the
    /// degraded level its processes are stopped first (so nothing it runs can write
    /// until the next [`Prepared::enter`]), then what it created that git would run is
    /// quarantined and the protected paths it changed are put back. One line per fix,
    /// for the model.
    pub fn leave(&mut self) -> Vec<String> {
        self.between.in_flight = self.between.in_flight.saturating_sub(1);
        if self.between.in_flight > 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let (Some(helper), true) = (self.between.helper, self.restore.is_some()) {
            // Below the helper's child (the guard, or pid 1 of the pid namespace): it
            // and the helper keep running, so a stop or a timeout still ends everything.
            let guard = super::freeze::first_child(helper);
            if let (None, Some(guard)) = (&self.between.frozen, guard) {
                match super::freeze::freeze(guard, FREEZE_LIMIT) {
                    Ok(f) => self.between.frozen = Some(f),
                    Err(f) => {
                        self.between.frozen = Some(f);
                        out.push(
                            "[sandbox] the server's processes could not all be stopped \
                             between calls; protected paths were put back anyway"
                                .to_string(),
                        );
                    }
                }
            }
        }
        out.extend(self.put_back());
        out
    }

    /// Without a mount namespace: puts back the protected paths a long-running command
    /// changed so far; one hint per path. Empty with namespaces, where they are
    /// read-only mounts.
    fn put_back(&self) -> Vec<String> {
        let quarantined = self
            .git
            .as_ref()
            .map(|g| g.run())
            .unwrap_or_default()
            .iter()
            .map(|f| format!("[sandbox] {}", finding_hint(f)))
            .collect::<Vec<_>>();
        quarantined
            .into_iter()
            .chain(self.put_back_protected())
            .collect()
    }

    fn put_back_protected(&self) -> Vec<String> {
        self.restore
            .as_ref()
            .map(|snap| {
                snap.restore()
                    .into_iter()
                    .map(|(path, what)| {
                        format!("[sandbox] {}", protected_hint(&path, &what, self.degraded))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// After the command ended: kills leftovers in its cgroup, removes the temporary
    /// directory, and returns `data.sandbox` with what the helper reported and the
    /// denials recognized in `output`.
    pub fn finish(mut self, output: &[u8]) -> Value {
        mark(&mut self.marks, "daemon: finish");
        self.absorb_report();
        self.wait_guard();
        mark(&mut self.marks, "daemon: report read, guard done");
        let mut facts = std::mem::take(&mut self.facts);
        if let Some(cg) = self.cgroup.take() {
            let (oom, pids) = cg.events();
            cg.kill_and_remove();
            facts.insert("oom_kills".into(), json!(oom));
            facts.insert("pids_max_hits".into(), json!(pids));
        }
        if let Some(t) = self.tmp_dir.take() {
            let _ = std::fs::remove_dir_all(t);
        }
        mark(&mut self.marks, "daemon: cgroup and TMPDIR removed");
        let text = String::from_utf8_lossy(output);
        let mut denials = json!(hints::denials(&text, &self.policy, &self.protected));
        // The audit goes first: what it moves aside, the restore below may then put back
        // as it was (a protected file the command replaced).
        if let Some(g) = self.git.take() {
            for f in g.run() {
                if let Some(d) = denials.as_array_mut() {
                    d.push(json!({
                        "kind": "quarantined",
                        "path": f.path,
                        "moved_to": f.moved_to,
                        "grant": f.grant,
                        "hint": finding_hint(&f),
                    }));
                }
            }
        }
        if let Some(snap) = self.restore.take() {
            for (path, what) in snap.restore() {
                if let Some(d) = denials.as_array_mut() {
                    d.push(json!({
                        "kind": "protected",
                        "path": path,
                        "hint": protected_hint(&path, &what, self.degraded),
                    }));
                }
            }
        }
        facts.insert("denials".into(), denials);
        mark(&mut self.marks, "daemon: audited and restored");
        if cfg!(feature = "trace") {
            let mut marks = std::mem::take(&mut self.marks);
            marks.sort_by_key(|m| m.1);
            facts.insert("marks".into(), json!(marks));
        }
        Value::Object(facts)
    }

    /// Degraded: waits (at most [`GUARD_WAIT`]) until the guard has killed every process
    /// the command started, so that nothing can write after the audit and the restore.
    fn wait_guard(&mut self) {
        let Some(fd) = self.guard_alive.take() else {
            return;
        };
        let end = std::time::Instant::now() + GUARD_WAIT;
        let mut sink = [0u8; 4096];
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one valid pollfd.
            let rc = unsafe { libc::poll(&mut p, 1, left.as_millis().min(60_000) as i32) };
            if rc < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            if p.revents & libc::POLLIN != 0 {
                // SAFETY: reading into a buffer of its size; 0 is EOF.
                let n = unsafe { libc::read(fd.as_raw_fd(), sink.as_mut_ptr().cast(), sink.len()) };
                if n > 0 {
                    continue;
                }
                return;
            }
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return;
            }
        }
    }

    /// Kills everything left in the command's cgroup now (timeouts, interrupts).
    pub fn kill_cgroup(&self) {
        if let Some(cg) = &self.cgroup {
            cg.kill_and_remove();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.spares.close();
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(f) = self.between.frozen.take() {
            f.thaw();
        }
        if let Some(cg) = self.cgroup.take() {
            cg.kill_and_remove();
        }
        self.wait_guard();
        if let Some(g) = self.git.take() {
            g.run();
        }
        if let Some(snap) = self.restore.take() {
            snap.restore();
        }
        if let Some(t) = self.tmp_dir.take() {
            let _ = std::fs::remove_dir_all(t);
        }
        // After the cleanup: the spare's move into its cgroup holds the cgroup lock for
        // a grace period, which this command's cgroup removal would otherwise wait for.
        if let Some(r) = self.refill.take() {
            r.request();
        }
    }
}
