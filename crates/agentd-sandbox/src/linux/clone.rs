//! Forking straight into a cgroup (`clone3` with `CLONE_INTO_CGROUP`, cgroup v2).
//!
//! Moving a running process into a cgroup (a write to `cgroup.procs`) takes the
//! kernel's cgroup threadgroup lock for writing, and that waits for an RCU grace period
//! unless another move happened just before: 7 to 25 ms on a loaded machine, more than
//! the rest of a command's set-up together. A child created inside the cgroup moves
//! nothing. cgroup v1 hierarchies cannot do this; there the helper still moves itself.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Whether this process may call `clone3` at all: the kernel has it (5.3+, and
/// `CLONE_INTO_CGROUP` with 5.7, older than the Landlock the sandbox needs) and no
/// seccomp filter of a container refuses it (Docker's answers `ENOSYS`). An empty
/// argument block is refused with `EINVAL` by a kernel that has the call.
pub fn clone3_available() -> bool {
    // SAFETY: clone3 with a null argument block and size 0 creates nothing; it fails.
    let rc = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<CloneArgs>(), 0usize) };
    rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
}

/// A descriptor of the cgroup directory `dir`, for [`fork_into`].
pub fn open_cgroup(dir: &Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open returned a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fork(2)`, the child created as a member of the cgroup `cgroup` (a v2 directory
/// opened by [`open_cgroup`]). Returns the child's pid in the parent and 0 in the child.
///
/// # Safety
/// As for `fork`: in a multi-threaded caller the child may only make async-signal-safe
/// calls. The child does not run `pthread_atfork` handlers.
pub unsafe fn fork_into(cgroup: &OwnedFd) -> io::Result<libc::pid_t> {
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..Default::default()
    };
    // SAFETY: clone3 with a correctly sized argument block, no stack (the child gets a
    // copy of ours, as with fork) and no shared memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as libc::pid_t)
}
