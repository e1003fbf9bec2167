//! A pseudo-terminal harness for full-screen clients (`agentctl chat`): the real binary
//! runs on the slave side of a real pty (its own session, the pty as its controlling
//! terminal), a reader thread feeds everything it draws into a VT100 parser, and a test
//! types bytes, resizes the terminal and waits for screen content with a deadline.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

struct Shared {
    parser: vt100::Parser,
    /// Every byte the child wrote, for failure messages and escape-sequence checks.
    raw: Vec<u8>,
    closed: bool,
}

/// A child process on a pseudo-terminal and the screen it draws.
pub struct Pty {
    master: File,
    child: Child,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    reader: Option<std::thread::JoinHandle<()>>,
}

fn winsize(rows: u16, cols: u16) -> libc::winsize {
    libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

impl Pty {
    /// Starts `cmd` on a new `rows`×`cols` pseudo-terminal (TERM=xterm-256color).
    pub fn spawn(mut cmd: Command, rows: u16, cols: u16) -> Pty {
        let (mut master, mut slave) = (0, 0);
        let ws = winsize(rows, cols);
        // SAFETY: openpty writes the two descriptors; no name buffer, default termios.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &ws,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here.
        let (master, slave) = unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup pty slave"));
        cmd.stdin(io(&slave))
            .stdout(io(&slave))
            .stderr(io(&slave))
            .env("TERM", "xterm-256color");
        // SAFETY: setsid and ioctl are async-signal-safe; the child makes the pty (its
        // stdin) its controlling terminal so it gets SIGWINCH and SIGHUP.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on the pty");
        drop(slave);
        let shared = Arc::new((
            Mutex::new(Shared {
                parser: vt100::Parser::new(rows, cols, 0),
                raw: Vec::new(),
                closed: false,
            }),
            Condvar::new(),
        ));
        let mut read = master.try_clone().expect("dup pty master");
        let s = shared.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match read.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let (lock, cv) = &*s;
                let mut g = lock.lock().unwrap();
                g.parser.process(&buf[..n]);
                g.raw.extend_from_slice(&buf[..n]);
                cv.notify_all();
            }
            let (lock, cv) = &*s;
            lock.lock().unwrap().closed = true;
            cv.notify_all();
        });
        Pty {
            master,
            child,
            shared,
            reader: Some(reader),
        }
    }

    /// Types `bytes` (keys are their terminal encodings: `\r` Enter, `\x1b` Esc,
    /// `\x1b\r` Alt+Enter, `\x03` Ctrl-C, `\x04` Ctrl-D, `\t` Tab).
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.master
            .write_all(bytes.as_ref())
            .expect("write to the pty");
        self.master.flush().expect("flush the pty");
    }

    /// Types `text` and then Enter.
    pub fn line(&mut self, text: &str) {
        self.send(text);
        self.send("\r");
    }

    /// The screen's text now, rows joined by newlines.
    pub fn screen(&self) -> String {
        self.shared.0.lock().unwrap().parser.screen().contents()
    }

    /// Waits until the reader has seen the end of the child's output (every descriptor of
    /// the pty's slave side closed), so [`Pty::raw`] holds all of it.
    #[track_caller]
    pub fn wait_closed(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.shared;
        let mut g = lock.lock().unwrap();
        while !g.closed {
            let now = Instant::now();
            assert!(
                now < deadline,
                "the pty's output did not end within {timeout:?}"
            );
            g = cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Every byte the child wrote so far.
    pub fn raw(&self) -> Vec<u8> {
        self.shared.0.lock().unwrap().raw.clone()
    }

    /// The screen's size as the parser sees it (rows, cols).
    pub fn size(&self) -> (u16, u16) {
        self.shared.0.lock().unwrap().parser.screen().size()
    }

    /// Waits until `pred` holds for the screen's text; panics with `what` and the screen
    /// when `timeout` passes first.
    #[track_caller]
    pub fn wait_until(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &*self.shared;
        let mut g = lock.lock().unwrap();
        loop {
            let text = g.parser.screen().contents();
            if pred(&text) {
                return text;
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "timed out waiting for {what}; the screen:\n{text}\n(closed: {})",
                    g.closed
                );
            }
            g = cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Waits until the screen shows `text`.
    #[track_caller]
    pub fn wait_for(&self, text: &str, timeout: Duration) -> String {
        self.wait_until(&format!("{text:?} on screen"), timeout, |s| {
            s.contains(text)
        })
    }

    /// Resizes the terminal (the child gets SIGWINCH) and the parser's screen.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        let ws = winsize(rows, cols);
        {
            let mut g = self.shared.0.lock().unwrap();
            g.parser.set_size(rows, cols);
        }
        use std::os::fd::AsRawFd;
        // SAFETY: TIOCSWINSZ on our own master descriptor with a valid winsize.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ as _, &ws) };
        assert_eq!(rc, 0, "TIOCSWINSZ: {}", std::io::Error::last_os_error());
    }

    /// Whether the terminal is in cooked mode (canonical input and echo on), as a shell
    /// needs it; a full-screen client turns both off while it runs. Read on the master,
    /// which reports the slave's settings, so it also works after the child has exited.
    pub fn cooked(&self) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: tcgetattr fills a termios from our own open master descriptor.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::tcgetattr(self.master.as_raw_fd(), &mut t) };
        assert_eq!(rc, 0, "tcgetattr: {}", std::io::Error::last_os_error());
        t.c_lflag & libc::ICANON != 0 && t.c_lflag & libc::ECHO != 0
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child to exit; `None` on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader ends when the last slave descriptor closes (the child is gone).
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
