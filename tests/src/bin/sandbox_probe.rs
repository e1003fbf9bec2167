//! Hostile probes a sandboxed command runs in the sandbox tests: each prints
//! `<probe>: ok` when the action succeeded or `<probe>: <errno name>` when the kernel
//! refused it. Only the outcome is reported; nothing here decides pass or fail.

use std::ffi::CString;

fn outcome(name: &str, rc: i64) {
    if rc >= 0 {
        println!("{name}: ok");
    } else {
        let e = std::io::Error::last_os_error();
        println!(
            "{name}: {}",
            e.raw_os_error().map(errno_name).unwrap_or("?")
        );
    }
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::ENOSYS => "ENOSYS",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EINVAL => "EINVAL",
        libc::ENOTTY => "ENOTTY",
        libc::EIO => "EIO",
        libc::EROFS => "EROFS",
        libc::ENXIO => "ENXIO",
        _ => "other",
    }
}

fn abstract_connect(name: &str) -> i64 {
    // SAFETY: socket/connect with a correctly sized sockaddr_un.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return -1;
        }
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as u16;
        let bytes = name.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            addr.sun_path[i + 1] = *b as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len()) as u32;
        libc::connect(fd, &addr as *const _ as *const libc::sockaddr, len) as i64
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    // SAFETY: each probe is one syscall with valid arguments; failures are reported.
    unsafe {
        match arg(0).as_str() {
            "io_uring" => {
                let mut params = [0u8; 120];
                outcome(
                    "io_uring",
                    libc::syscall(libc::SYS_io_uring_setup, 8u32, params.as_mut_ptr()),
                );
            }
            "tiocsti" => {
                // A fresh pty made this process's controlling terminal, so only a
                // filter (EPERM) or the kernel's legacy switch (EIO) can refuse it.
                let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
                if m < 0 || libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
                    outcome("tiocsti-setup", -1);
                    return;
                }
                let name = libc::ptsname(m);
                libc::setsid();
                let s = libc::open(name, libc::O_RDWR);
                if s < 0 {
                    outcome("tiocsti-setup", -1);
                    return;
                }
                let c: libc::c_char = b'x' as libc::c_char;
                outcome("tiocsti", libc::ioctl(s, libc::TIOCSTI, &c) as i64);
            }
            "ptrace" => {
                let pid: i32 = arg(1).parse().unwrap_or(1);
                outcome(
                    "ptrace",
                    libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) as i64,
                );
            }
            "kill" => {
                let pid: i32 = arg(1).parse().unwrap_or(1);
                outcome("kill", libc::kill(pid, 0) as i64);
            }
            "mount" => {
                let t = CString::new("/tmp").unwrap();
                let fs = CString::new("tmpfs").unwrap();
                outcome(
                    "mount",
                    libc::mount(fs.as_ptr(), t.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) as i64,
                );
            }
            "unshare" => {
                outcome(
                    "unshare",
                    libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) as i64,
                );
            }
            "abstract" => outcome("abstract", abstract_connect(&arg(1))),
            "udp" => {
                let port: u16 = arg(1).parse().unwrap_or(9);
                let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                if fd < 0 {
                    outcome("udp", -1);
                    return;
                }
                let addr = libc::sockaddr_in {
                    sin_family: libc::AF_INET as u16,
                    sin_port: port.to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                let msg = b"hello";
                outcome(
                    "udp",
                    libc::sendto(
                        fd,
                        msg.as_ptr().cast(),
                        msg.len(),
                        0,
                        &addr as *const _ as *const libc::sockaddr,
                        std::mem::size_of::<libc::sockaddr_in>() as u32,
                    ) as i64,
                );
            }
            "x32" => {
                // socket(2) with the x32 bit: never executed as a native call.
                outcome(
                    "x32",
                    libc::syscall(
                        libc::SYS_socket | 0x4000_0000,
                        libc::AF_UNIX,
                        libc::SOCK_STREAM,
                        0,
                    ),
                );
            }
            "forks" => {
                // Forks up to N children that wait, prints how many forks succeeded,
                // then ends them all. No retry on EAGAIN (a shell's fork retries).
                let n: usize = arg(1).parse().unwrap_or(100);
                let mut kids = Vec::new();
                for _ in 0..n {
                    let pid = libc::fork();
                    if pid == 0 {
                        libc::pause();
                        libc::_exit(0);
                    }
                    if pid < 0 {
                        break;
                    }
                    kids.push(pid);
                }
                println!("forks: {}", kids.len());
                for k in kids {
                    libc::kill(k, libc::SIGKILL);
                    libc::waitpid(k, std::ptr::null_mut(), 0);
                }
            }
            "shmat" => {
                // Attaches the SysV segment with id ARG1 and prints what it holds.
                let id: i32 = arg(1).parse().unwrap_or(-1);
                let p = libc::shmat(id, std::ptr::null(), 0);
                if p as isize == -1 {
                    outcome("shmat", -1);
                } else {
                    let text = std::ffi::CStr::from_ptr(p as *const libc::c_char);
                    println!("shmat: ok {}", text.to_string_lossy());
                }
            }
            "open" => {
                let path = CString::new(arg(1)).unwrap();
                outcome(
                    "open",
                    libc::open(
                        path.as_ptr(),
                        libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOCTTY,
                    ) as i64,
                );
            }
            "unix" => {
                let rc = match std::os::unix::net::UnixStream::connect(arg(1)) {
                    Ok(_) => 0,
                    Err(e) => {
                        *libc::__errno_location() = e.raw_os_error().unwrap_or(0);
                        -1
                    }
                };
                outcome("unix", rc);
            }
            "socketpair" => {
                let mut fds = [0; 2];
                outcome(
                    "socketpair",
                    libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) as i64,
                );
            }
            "handoff" => {
                // Connects to the socket ARG1, hands the connection to a child and
                // exits at once, so the connecting pid is gone (and reaped by the shell)
                // before the daemon looks at it. The child sends the request ARG2 and
                // writes the one-line answer (or `closed`) to ARG3, then creates ARG3.done.
                use std::io::{BufRead, Write};
                let sock = match std::os::unix::net::UnixStream::connect(arg(1)) {
                    Ok(s) => s,
                    Err(e) => {
                        println!("handoff: connect: {e}");
                        return;
                    }
                };
                if libc::fork() != 0 {
                    libc::_exit(0);
                }
                let mut w = &sock;
                let _ = w.write_all(format!("{}\n", arg(2)).as_bytes());
                let mut line = String::new();
                let _ = std::io::BufReader::new(&sock).read_line(&mut line);
                if line.is_empty() {
                    line = "closed".into();
                }
                let _ = std::fs::write(arg(3), line);
                let _ = std::fs::write(format!("{}.done", arg(3)), "");
            }
            "loopback" => {
                // A server and a client in one process on 127.0.0.1 (a test suite's
                // usual shape): prints `loopback: ok echo=ping` or the errno.
                use std::io::{Read, Write};
                let run = || -> std::io::Result<String> {
                    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
                    let mut c = std::net::TcpStream::connect(l.local_addr()?)?;
                    let (mut s, _) = l.accept()?;
                    c.write_all(b"ping")?;
                    let mut b = [0u8; 4];
                    s.read_exact(&mut b)?;
                    Ok(String::from_utf8_lossy(&b).into_owned())
                };
                match run() {
                    Ok(echo) => println!("loopback: ok echo={echo}"),
                    Err(e) => println!(
                        "loopback: {}",
                        e.raw_os_error().map(errno_name).unwrap_or("?")
                    ),
                }
            }
            other => {
                eprintln!("sandbox-probe: unknown probe {other:?}");
                std::process::exit(2);
            }
        }
    }
}
