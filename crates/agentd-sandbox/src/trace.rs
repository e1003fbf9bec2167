//! Stage marks of a command's set-up, for profiling it: the daemon side (while it
//! prepares and finishes a command) and the helper side (carried in its report) each
//! record `(stage, CLOCK_MONOTONIC nanoseconds)`, so one clock orders both processes.
//! Recorded only with the crate feature `trace` (the `setup_overhead` bench prints the
//! breakdown with it); without it [`mark`] does nothing and the report carries none.

/// `(stage, nanoseconds on CLOCK_MONOTONIC)`, in the order recorded.
pub type Marks = Vec<(String, u64)>;

/// Nanoseconds on `CLOCK_MONOTONIC` (the clock `std::time::Instant` reads on Linux).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Records `stage` now (feature `trace` only).
#[inline]
pub fn mark(marks: &mut Marks, stage: &str) {
    if cfg!(feature = "trace") {
        marks.push((stage.to_string(), now_ns()));
    }
}
