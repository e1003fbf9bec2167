//! For race tests (feature `test-support`): a thread that swaps a directory with a
//! symlink, as fast as it can, while the code under test works through the directory's
//! path, the attack every user of this crate must withstand.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Atomically exchanges two directory entries (`renameat2(RENAME_EXCHANGE)`).
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let (a, b) = (crate::cstr(a.as_os_str())?, crate::cstr(b.as_os_str())?);
    // SAFETY: both strings are NUL-terminated and outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A thread exchanging `dir` (a directory) with `link` (a symlink, typically to a
/// directory outside the tree) until [`Swapper::stop`], counting the exchanges.
pub struct Swapper {
    dir: PathBuf,
    link: PathBuf,
    stop: Arc<AtomicBool>,
    flips: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Swapper {
    /// Starts swapping. An exchange that fails panics the thread, and [`Swapper::stop`]
    /// passes the panic on.
    pub fn start(dir: &Path, link: &Path) -> Swapper {
        let (stop, flips) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let thread = {
            let (stop, flips) = (stop.clone(), flips.clone());
            let (dir, link) = (dir.to_path_buf(), link.to_path_buf());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    exchange(&dir, &link).expect("renameat2(RENAME_EXCHANGE)");
                    flips.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Swapper {
            dir: dir.to_path_buf(),
            link: link.to_path_buf(),
            stop,
            flips,
            thread: Some(thread),
        }
    }

    /// The exchanges so far.
    pub fn flips(&self) -> u64 {
        self.flips.load(Ordering::Relaxed)
    }

    /// Stops the thread and leaves `dir` the directory again; the exchanges made.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if let Err(panic) = t.join() {
                std::panic::resume_unwind(panic);
            }
        }
        let is_link = std::fs::symlink_metadata(&self.dir)
            .expect("the swapped directory")
            .file_type()
            .is_symlink();
        if is_link {
            exchange(&self.dir, &self.link).expect("renameat2(RENAME_EXCHANGE)");
        }
        self.flips()
    }
}

impl Drop for Swapper {
    /// A test that failed midway still stops the thread.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
