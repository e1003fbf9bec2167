//! The daemon's descriptors meant for a helper, kept above the fixed numbers the
//! helper's set-up uses (3 to 7), so that putting one in place in the child never
//! overwrites another's source.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `fd` moved to a descriptor number of at least 10 (close-on-exec).
pub fn high(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl on a descriptor we own.
    let hi = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if hi < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl returned a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(hi) })
}

/// A close-on-exec pipe `(read, write)` whose ends are both [`high`].
pub fn pipe_high() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 gave us two fresh descriptors.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((high(r)?, high(w)?))
}
