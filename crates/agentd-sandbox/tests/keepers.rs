//! The degraded command's seccomp filter where Landlock does not scope signals
//! (docs/sandbox.md#fallback-ladder): every way to signal the processes that end the
//! command (its guard, the outer helper, the daemon) is refused, and so is `-1`; the
//! command's own processes stay its to signal.

#![cfg(target_os = "linux")]

use agentd_sandbox::linux::confine::{main_filter, FilterOptions, Keepers};
use agentd_sandbox::Network;
use std::process::{Child, Command};

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep runs")
}

/// errno of each probe, in order, as the filtered child saw it (0: allowed).
fn probes(keepers: Keepers, own: i32) -> Vec<i32> {
    let filter = main_filter(FilterOptions {
        network: Network::Host,
        degraded: true,
        loopback: false,
        refuse_unix: false,
        keepers: Some(keepers),
    })
    .unwrap();
    let mut pipe = [0; 2];
    // SAFETY: pipe fills two descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let g = keepers.guard;
    // SAFETY: the child makes raw syscalls only, writes its results and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: as above; each call's result is read through errno at once.
        unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            let prog = filter.as_ptr();
            let fprog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: prog as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_SECCOMP, 2, &fprog as *const libc::sock_fprog) != 0 {
                libc::_exit(3);
            }
            let err = |r: libc::c_long| {
                if r < 0 {
                    *libc::__errno_location()
                } else {
                    0
                }
            };
            let fd = libc::syscall(libc::SYS_pidfd_open, own, 0);
            let res: [i32; 12] = [
                err(libc::kill(g, 0) as libc::c_long),
                err(libc::kill(-g, 0) as libc::c_long),
                err(libc::kill(keepers.outer, 0) as libc::c_long),
                err(libc::kill(keepers.daemon, 0) as libc::c_long),
                err(libc::kill(-1, 0) as libc::c_long),
                err(libc::syscall(libc::SYS_tgkill, g, g, 0)),
                err(libc::syscall(libc::SYS_tkill, g, 0)),
                err(libc::syscall(libc::SYS_pidfd_open, g, 0)),
                err(libc::syscall(libc::SYS_pidfd_send_signal, fd, 0, 0, 0)),
                err(libc::fcntl(pipe[1], libc::F_SETOWN, g) as libc::c_long),
                err(libc::kill(own, 0) as libc::c_long),
                err(fd),
            ];
            libc::write(pipe[1], res.as_ptr().cast(), std::mem::size_of_val(&res));
            libc::_exit(0);
        }
    }
    // SAFETY: closing our write end, reading the child's results, reaping it.
    unsafe {
        libc::close(pipe[1]);
        let mut res = [0i32; 12];
        let n = libc::read(
            pipe[0],
            res.as_mut_ptr().cast(),
            std::mem::size_of_val(&res),
        );
        libc::close(pipe[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert_eq!(
            n as usize,
            std::mem::size_of_val(&res),
            "child status {status}"
        );
        res.to_vec()
    }
}

#[test]
fn signals_to_the_keepers_and_to_every_process_are_refused_the_commands_own_are_not() {
    let (mut guard, mut outer, mut daemon, mut own) = (sleeper(), sleeper(), sleeper(), sleeper());
    let keepers = Keepers {
        guard: guard.id() as i32,
        outer: outer.id() as i32,
        daemon: daemon.id() as i32,
    };
    let res = probes(keepers, own.id() as i32);
    for c in [&mut guard, &mut outer, &mut daemon, &mut own] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let eperm = libc::EPERM;
    assert_eq!(
        res,
        vec![eperm, eperm, eperm, eperm, eperm, eperm, eperm, eperm, eperm, eperm, 0, 0],
        "kill guard, -guard, outer, daemon, -1; tgkill, tkill, pidfd_open guard; \
         pidfd_send_signal; F_SETOWN guard; kill own child; pidfd_open own child"
    );
}
