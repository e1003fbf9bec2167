//! The command process's own confinement, applied last before exec: resource limits,
//! capabilities dropped, `no_new_privs`, Landlock at the best ABI the kernel has, and
//! the seccomp filters.

use crate::plan::Plan;
use crate::policy::Network;
use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, ABI,
};
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `RLIMIT_CORE` 0: a crashing command leaves no core file with its memory.
pub fn set_rlimits() {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads a valid struct.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &zero);
    }
}

/// `RLIMIT_NPROC` (counts every process of the uid, so only meaningful for a user
/// that runs little else; uid 0 ignores it).
pub fn set_nproc(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit reads a valid struct.
    unsafe {
        libc::setrlimit(libc::RLIMIT_NPROC, &lim);
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_V3: u32 = 0x2008_0522;

/// Drops every capability: bounding set, ambient set, securebits locked so uid 0 gains
/// none at exec, then the effective, permitted and inheritable sets. Returns whether
/// the process ends with no capabilities.
pub fn drop_caps() -> bool {
    // SAFETY: prctl/capset/capget with plain integers and valid structs.
    unsafe {
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let bits = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_KEEP_CAPS_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0);
        let mut hdr = CapHeader {
            version: CAP_V3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr());
        let mut now = [CapData::default(); 2];
        let mut hdr = CapHeader {
            version: CAP_V3,
            pid: 0,
        };
        if libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            now.as_mut_ptr(),
        ) != 0
        {
            return false;
        }
        now.iter()
            .all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0)
    }
}

pub fn no_new_privs() -> bool {
    // SAFETY: plain prctl calls.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1
    }
}

/// The kernel's Landlock ABI version (0 when Landlock is off).
pub fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset with a null attr and the VERSION flag only
    // returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        0
    } else {
        v as i32
    }
}

/// Paths granting everything beneath `root` except the `excluded` subtrees: the
/// directories on the way to an excluded path are not granted themselves (Landlock
/// rules hold beneath), their other entries are. Symlinks are skipped: what they point
/// to is granted (or not) where it lives.
pub fn beneath_except(root: &Path, excluded: &[PathBuf]) -> Vec<PathBuf> {
    if excluded.iter().any(|e| root.starts_with(e)) {
        return Vec::new();
    }
    if !excluded.iter().any(|e| e.starts_with(root)) {
        return vec![root.to_path_buf()];
    }
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                continue;
            }
            out.extend(beneath_except(&e.path(), excluded));
        }
    }
    out
}

fn add_paths(
    mut rs: landlock::RulesetCreated,
    paths: &[PathBuf],
    access: landlock::BitFlags<AccessFs>,
    abi: ABI,
) -> Result<landlock::RulesetCreated, String> {
    for p in paths {
        let Ok(fd) = PathFd::new(p) else { continue };
        let is_dir = std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false);
        let a = if is_dir {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        rs = rs
            .add_rule(PathBeneath::new(fd, a))
            .map_err(|e| format!("rule for {}: {e}", p.display()))?;
    }
    Ok(rs)
}

/// Terminal devices refused at the degraded level.
const DEGRADED_TERMINALS: &[&str] = &["/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/console"];

/// Applies Landlock: read and execute everywhere but the hidden set (in namespace mode
/// the hidden set is already covered by mounts, so everywhere), full access to the
/// writable roots, the private tmp and the terminal devices; no TCP bind/connect when
/// the network is `none`; abstract sockets and signals scoped to the sandbox.
/// Returns the kernel ABI and the status.
pub fn landlock(plan: &Plan, marks: &mut crate::trace::Marks) -> Result<(i32, String), String> {
    let abi = ABI::V10;
    let kernel_abi = landlock_abi();
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?;
    // With its own network namespace a command's TCP reaches only its loopback.
    if plan.network == Network::None && !(plan.namespaces && plan.loopback) {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    let mut scopes = Scope::from_all(abi);
    if plan.no_signal_scope {
        scopes.remove(Scope::Signal);
    }
    ruleset = ruleset.scope(scopes).map_err(|e| e.to_string())?;
    let mut rs = ruleset.create().map_err(|e| e.to_string())?;
    // Degraded: the host's terminals (the daemon's `/dev/tty`, the user's other ptys)
    // are neither readable nor writable; with namespaces a private devpts holds them.
    let hidden: Vec<PathBuf> = if plan.namespaces {
        Vec::new()
    } else {
        let mut h = plan.hidden.clone();
        h.extend(DEGRADED_TERMINALS.iter().map(PathBuf::from));
        h
    };
    let read = beneath_except(Path::new("/"), &hidden);
    crate::trace::mark(marks, "landlock: read set walked");
    // Connecting to a pathname Unix socket is a right of its own from ABI 9: with
    // network `host` every socket outside the hidden set, with `none` only those
    // beneath the writable roots and the private tmp (below), plus the granted ones.
    let read_access = if plan.network == Network::Host {
        AccessFs::from_read(abi) | AccessFs::ResolveUnix
    } else {
        AccessFs::from_read(abi)
    };
    rs = add_paths(rs, &read, read_access, abi)?;
    crate::trace::mark(marks, "landlock: read rules added");
    let granted: Vec<PathBuf> = plan
        .sockets
        .iter()
        .flat_map(|g| beneath_except(g, &hidden))
        .collect();
    rs = add_paths(
        rs,
        &granted,
        AccessFs::from_read(abi) | AccessFs::ResolveUnix,
        abi,
    )?;
    let mut write: Vec<PathBuf> = Vec::new();
    for r in &plan.writable {
        write.extend(beneath_except(r, &hidden));
    }
    if plan.namespaces {
        write.push("/tmp".into());
    }
    if let Some(t) = &plan.tmp_dir {
        write.push(t.clone());
    }
    for d in [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/tty",
        "/dev/ptmx",
        "/dev/pts",
        "/dev/random",
        "/dev/urandom",
        "/dev/shm",
    ] {
        if plan.namespaces || !(d == "/dev/shm" || DEGRADED_TERMINALS.contains(&d)) {
            write.push(d.into());
        }
    }
    rs = add_paths(rs, &write, AccessFs::from_all(abi), abi)?;
    crate::trace::mark(marks, "landlock: write rules added");
    let status = rs.restrict_self().map_err(|e| e.to_string())?;
    let s = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        RulesetStatus::NotEnforced => return Err("not enforced by this kernel".into()),
    };
    Ok((kernel_abi, s.into()))
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Syscalls no command needs that open ways out: io_uring (creates sockets without
/// `socket(2)`), tracing and cross-process memory, mounts, namespaces, BPF, perf,
/// keyrings, kernel modules and kexec.
fn denied_syscalls() -> Vec<i64> {
    let mut v = vec![
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_userfaultfd,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_open_by_handle_at,
        libc::SYS_pidfd_getfd,
        libc::SYS_chroot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    v
}

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const CLONE_NEW_ALL: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    v: u64,
) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, len, op, v).map_err(|e| e.to_string())
}

/// The processes that end a degraded command: its guard (the command's parent, leader
/// of its own process group), the outer helper (leader of the group the daemon kills)
/// and the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepers {
    pub guard: i32,
    pub outer: i32,
    pub daemon: i32,
}

/// `fcntl` commands that name a process to signal on I/O.
const F_SETOWN: u64 = 8;
const F_SETOWN_EX: u64 = 15;
/// `ioctl` requests that do the same on sockets.
const FIOSETOWN: u64 = 0x8901;
const SIOCSPGRP: u64 = 0x8902;

/// What the main filter refuses beyond the fixed list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterOptions {
    pub network: Network,
    /// No namespaces: SysV IPC is refused (there is no ipc namespace to keep a command
    /// off the host's segments).
    pub degraded: bool,
    /// Network `none` in the sandbox's own network namespace: inet sockets are allowed
    /// (they reach only its loopback).
    pub loopback: bool,
    /// `socket(AF_UNIX)` refused (no mount namespace to cover the host's sockets, and
    /// no socket grant); `socketpair` stays allowed.
    pub refuse_unix: bool,
    /// Without Landlock's signal scoping (degraded): signals aimed at these processes,
    /// their process groups or at every process (`-1`) are refused, and so are the
    /// calls that would signal them another way (pidfds, `F_SETOWN`).
    pub keepers: Option<Keepers>,
}

/// The main filter: default allow, EPERM on a match.
pub fn main_filter(o: FilterOptions) -> Result<BpfProgram, String> {
    let (network, degraded) = (o.network, o.degraded);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in denied_syscalls() {
        rules.insert(nr, vec![]);
    }
    if degraded {
        for nr in [
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_shmctl,
            libc::SYS_msgget,
            libc::SYS_msgsnd,
            libc::SYS_msgrcv,
            libc::SYS_msgctl,
            libc::SYS_semget,
            libc::SYS_semop,
            libc::SYS_semtimedop,
            libc::SYS_semctl,
        ] {
            rules.insert(nr, vec![]);
        }
    }
    let mut ioctl = Vec::new();
    let mut requests = vec![TIOCSTI, TIOCLINUX];
    if let Some(k) = o.keepers {
        keeper_rules(&mut rules, k)?;
        requests.extend([FIOSETOWN, SIOCSPGRP]);
    }
    for req in requests {
        ioctl.push(
            SeccompRule::new(vec![cond(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                req,
            )?])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_ioctl, ioctl);
    let mut clone = Vec::new();
    for bit in CLONE_NEW_ALL {
        clone.push(
            SeccompRule::new(vec![cond(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(bit),
                bit,
            )?])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_clone, clone);
    let family = |op: SeccompCmpOp, fam: i32| -> Result<SeccompCondition, String> {
        cond(0, SeccompCmpArgLen::Dword, op, fam as u64)
    };
    let rule = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).map_err(|e| e.to_string());
    // A rule matches (refuses) when all its conditions hold; a call is refused when any
    // rule matches; an empty rule list refuses every call.
    let mut socket = Vec::new();
    if network == Network::None {
        // Every family but the allowed ones.
        let mut allowed = Vec::new();
        if !o.refuse_unix {
            allowed.push(libc::AF_UNIX);
        }
        if o.loopback {
            allowed.extend([libc::AF_INET, libc::AF_INET6]);
        }
        if !allowed.is_empty() {
            socket.push(rule(
                allowed
                    .iter()
                    .map(|f| family(SeccompCmpOp::Ne, *f))
                    .collect::<Result<_, _>>()?,
            )?);
        }
        rules.insert(
            libc::SYS_socketpair,
            vec![rule(vec![family(SeccompCmpOp::Ne, libc::AF_UNIX)?])?],
        );
    } else {
        // Host network still gets no vsock (VM host interop) and no raw packets.
        for fam in [libc::AF_VSOCK, libc::AF_PACKET] {
            socket.push(rule(vec![family(SeccompCmpOp::Eq, fam)?])?);
        }
        if o.refuse_unix {
            socket.push(rule(vec![family(SeccompCmpOp::Eq, libc::AF_UNIX)?])?);
        }
    }
    rules.insert(libc::SYS_socket, socket);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// The rules of [`FilterOptions::keepers`]. A target pid is compared as the 32-bit
/// value the kernel reads. `pidfd_send_signal` is refused outright: a pidfd can also be
/// a `/proc/<pid>` directory opened by path (programs such as Go's runtime fall back to
/// `kill`); `F_SETOWN_EX`, `FIOSETOWN` and `SIOCSPGRP` read their target from memory a
/// filter cannot see, so they are refused too. `ptrace` and `process_vm_*` are refused
/// at every level.
fn keeper_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>, k: Keepers) -> Result<(), String> {
    let pids = [k.guard, k.outer, k.daemon];
    // kill(2) reads a negative pid as a process group and -1 as every process.
    let mut targets: Vec<i32> = pids.iter().flat_map(|&p| [p, -p]).collect();
    targets.push(-1);
    let on = |arg: u8, v: i32| {
        cond(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            v as u32 as u64,
        )
    };
    let each = |arg: u8, vs: &[i32]| -> Result<Vec<SeccompRule>, String> {
        vs.iter()
            .map(|&v| SeccompRule::new(vec![on(arg, v)?]).map_err(|e| e.to_string()))
            .collect()
    };
    for nr in [
        libc::SYS_kill,
        libc::SYS_tkill,
        libc::SYS_tgkill,
        libc::SYS_rt_sigqueueinfo,
        libc::SYS_rt_tgsigqueueinfo,
    ] {
        rules.insert(nr, each(0, &targets)?);
    }
    rules.insert(libc::SYS_pidfd_open, each(0, &pids)?);
    rules.insert(libc::SYS_pidfd_send_signal, vec![]);
    let mut fcntl = vec![SeccompRule::new(vec![cond(
        1,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        F_SETOWN_EX,
    )?])
    .map_err(|e| e.to_string())?];
    for &v in &targets {
        fcntl.push(
            SeccompRule::new(vec![
                cond(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, F_SETOWN)?,
                on(2, v)?,
            ])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_fcntl, fcntl);
    Ok(())
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The guard filter: kill on a foreign architecture, `ENOSYS` for the x32 bit and for
/// `clone3` (its flags sit in memory a filter cannot read; libc falls back to `clone`,
/// which the main filter checks).
pub fn guard_filter() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let enosys = RET_ERRNO | libc::ENOSYS as u32;
    vec![
        stmt(LD_W_ABS, 4),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, 0),
        jump(JSET_K, 0x4000_0000, 0, 1),
        stmt(RET_K, enosys),
        jump(JEQ_K, libc::SYS_clone3 as u32, 0, 1),
        stmt(RET_K, enosys),
        stmt(RET_K, RET_ALLOW),
    ]
}

/// The filter options a plan asks for; `keepers` when the command has them (degraded).
pub fn filter_options(plan: &Plan, keepers: Option<Keepers>) -> FilterOptions {
    FilterOptions {
        keepers: keepers.filter(|_| plan.guard_keepers),
        network: plan.network,
        degraded: !plan.namespaces,
        loopback: plan.namespaces && plan.loopback && plan.network == Network::None,
        refuse_unix: plan.refuse_unix,
    }
}

/// Installs both filters (needs `no_new_privs`).
pub fn seccomp(plan: &Plan, keepers: Option<Keepers>) -> Result<(), String> {
    if plan.guard_keepers && keepers.is_none() {
        return Err("the processes to keep the command's signals off are unknown".into());
    }
    let main = main_filter(filter_options(plan, keepers))?;
    seccompiler::apply_filter(&guard_filter()).map_err(|e| e.to_string())?;
    seccompiler::apply_filter(&main).map_err(|e| e.to_string())
}
