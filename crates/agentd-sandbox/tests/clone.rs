//! `clone3` with `CLONE_INTO_CGROUP`: how the helper puts a command's processes in its
//! cgroup v2 without moving a running process there (which waits for an RCU grace
//! period). Needs a cgroup2 hierarchy it may make a cgroup in (root, or a delegated
//! one); fails naming what is missing otherwise.

#![cfg(target_os = "linux")]

use agentd_sandbox::linux::clone;
use std::path::PathBuf;

fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("no cgroup2 hierarchy is mounted; this test needs one")
}

#[test]
fn a_child_forked_into_a_cgroup_is_a_member_and_the_parent_is_not() {
    assert!(
        clone::clone3_available(),
        "clone3 is refused here (kernel before 5.3, or a seccomp filter)"
    );
    let root = cgroup2_mount();
    let name = format!("agentd-clone-test-{}", std::process::id());
    let dir = root.join(&name);
    std::fs::create_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "making {}: {e} (this test needs root or a delegated cgroup2)",
            dir.display()
        )
    });
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _rm = Rm(dir.clone());
    let fd = clone::open_cgroup(&dir).unwrap();
    // SAFETY: the child only calls pause and _exit (async-signal-safe).
    let pid = unsafe { clone::fork_into(&fd) }.unwrap();
    if pid == 0 {
        // SAFETY: plain syscalls.
        unsafe {
            libc::pause();
            libc::_exit(0)
        }
    }
    let members = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    let child = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    // SAFETY: ending and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
    }
    let ids: Vec<&str> = members.lines().collect();
    assert_eq!(ids, vec![pid.to_string()], "{members}");
    assert!(child.lines().any(|l| l == format!("0::/{name}")), "{child}");
    assert!(!own.contains(&name), "{own}");
    // A directory that is not a cgroup is refused, and nothing is created.
    let not_cg = clone::open_cgroup(std::path::Path::new("/")).unwrap();
    // SAFETY: as above (a child, should one be made, exits at once).
    match unsafe { clone::fork_into(&not_cg) } {
        // SAFETY: _exit has no preconditions.
        Ok(0) => unsafe { libc::_exit(0) },
        Ok(pid) => {
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            panic!("clone3 into / made a process");
        }
        Err(e) => assert!(
            matches!(e.raw_os_error(), Some(libc::EBADF | libc::EINVAL)),
            "{e}"
        ),
    }
}
