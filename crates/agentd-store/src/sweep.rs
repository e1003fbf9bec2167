//! Start-up sweep of leftover temp files.
//!
//! Every file agentd creates under `sessions/` is written to a dot-named `*.tmp` file in
//! the same directory first and linked or renamed into place only once synced (a new
//! Log, a fork's child, an import, a stored or copied resource). A process killed in
//! between leaves the temp file behind: its content was never acknowledged to anyone
//! (the call that was making it got an error or no answer), so nothing refers to it and
//! it would only take space forever.
//!
//! At start-up, after the home lock is held (so no other agentd is writing temp files
//! here), [`sweep_leftovers`] removes such files from `sessions/` and from every
//! `sessions/<sid>/resources/`. Only regular files named `.*.tmp` are touched; Logs,
//! resources, directories and symlinks never are. The count is reported by
//! `agentd/status` (`leftover_tmp_removed`) and each removal is logged.

use crate::Home;
use std::path::Path;

/// What the sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Temp files removed.
    pub removed: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Temp files that could not be removed (logged; they are retried next start).
    pub failed: u64,
}

fn is_leftover(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > ".tmp".len() + 1
}

fn sweep_dir(dir: &Path, out: &mut Swept) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut removed_any = false;
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_leftover(name) {
            continue;
        }
        // `file_type` does not follow symlinks: only plain files are ours.
        let Ok(ft) = entry.file_type() else { continue };
        if !ft.is_file() {
            continue;
        }
        let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
        match std::fs::remove_file(entry.path()) {
            Ok(()) => {
                tracing::warn!(path = %entry.path().display(), bytes, "removed leftover temp file");
                out.removed += 1;
                out.bytes += bytes;
                removed_any = true;
            }
            Err(e) => {
                tracing::error!(path = %entry.path().display(), error = %e, "cannot remove leftover temp file");
                out.failed += 1;
            }
        }
    }
    if removed_any {
        let _ = crate::sync_dir(dir);
    }
}

/// Removes leftover `.*.tmp` files under `sessions/`. Call only with the home lock held.
pub fn sweep_leftovers(home: &Home) -> Swept {
    let mut out = Swept::default();
    let sessions = home.sessions_dir();
    sweep_dir(&sessions, &mut out);
    if let Ok(rd) = std::fs::read_dir(&sessions) {
        for entry in rd.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                sweep_dir(&entry.path().join("resources"), &mut out);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_only_dot_tmp_files() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        let s = home.sessions_dir();
        std::fs::write(s.join(".abc.ndjson.00ff.tmp"), "half").unwrap();
        std::fs::write(s.join("abc.ndjson"), "{}\n").unwrap();
        std::fs::write(s.join("notdot.tmp"), "kept").unwrap();
        std::fs::create_dir_all(s.join("abc/resources")).unwrap();
        std::fs::write(s.join("abc/resources/.deadbeef.1.tmp"), "xx").unwrap();
        std::fs::write(s.join("abc/resources/deadbeef"), "kept").unwrap();
        std::fs::create_dir(s.join(".dir.tmp")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", s.join(".link.tmp")).unwrap();
        let r = sweep_leftovers(&home);
        assert_eq!(
            r,
            Swept {
                removed: 2,
                bytes: 6,
                failed: 0
            }
        );
        assert!(!s.join(".abc.ndjson.00ff.tmp").exists());
        assert!(!s.join("abc/resources/.deadbeef.1.tmp").exists());
        for kept in [
            "abc.ndjson",
            "notdot.tmp",
            "abc/resources/deadbeef",
            ".dir.tmp",
        ] {
            assert!(s.join(kept).exists(), "{kept} removed");
        }
        assert!(s.join(".link.tmp").symlink_metadata().is_ok());
        assert_eq!(sweep_leftovers(&home), Swept::default());
    }
}
