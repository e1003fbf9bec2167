//! The allocator's hook to hand freed memory back to the OS (bottom layer: any module
//! that frees much at once may call it).
//!
//! The binary installs its allocator's collect in [`RELEASE_FREED`]. An allocator that
//! purges lazily (on later allocations) keeps the pages of short-lived data resident:
//! the parse trees of a Log load, the replay items of a first context render. Those
//! callers release as they go, so the peak stays near what the daemon keeps.

/// The installed release function (none in tests and in other binaries).
pub static RELEASE_FREED: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Hands the freed pages back now, when a release function is installed.
pub fn release_freed() {
    if let Some(release) = RELEASE_FREED.get() {
        release();
    }
}
