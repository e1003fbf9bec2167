//! Records of running server process groups under `<home>/mcp/running/`, one file per
//! group (`<pgid>.json`: pid, pgid, the leader's start time, session, server), and the
//! reaping of groups a killed daemon left behind. A record is only acted on when the
//! group is still the one recorded: the leader alive with the same start time (field 22
//! of `/proc/<pid>/stat`), or the leader gone while its group still has members (a pid
//! is not reused while it names a live group).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub pid: i32,
    pub pgid: i32,
    /// Clock ticks since boot at which the leader started (0 when unknown).
    pub start_time: u64,
    pub session_id: String,
    pub server: String,
}

/// The start time of `pid` (`/proc/<pid>/stat` field 22), if it runs.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// True while some process (zombies included) is in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    pgid > 1 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// True when `pid` exists and is not a zombie.
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s.get(i + 2..i + 3))
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// Sends `sig` to the whole group (a no-op for pgid ≤ 1).
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// SIGTERM to the group, up to `grace` for the leader to go, then SIGKILL to the group
/// (grandchildren that ignored SIGTERM included).
pub fn stop_group(pid: i32, pgid: i32, grace: Duration) {
    signal_group(pgid, libc::SIGTERM);
    let until = Instant::now() + grace;
    while running(pid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(pgid, libc::SIGKILL);
}

/// Writes the record (atomically) and returns its path.
pub fn write(dir: &Path, rec: &Record) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{}.json", rec.pgid));
    let tmp = dir.join(format!(".{}.tmp", rec.pgid));
    std::fs::write(&tmp, serde_json::to_vec(rec)?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// True when the recorded group is still the one that was recorded.
pub fn still_ours(rec: &Record) -> bool {
    match start_time(rec.pid) {
        Some(t) => rec.start_time != 0 && t == rec.start_time,
        None => group_alive(rec.pgid),
    }
}

/// Reaps every recorded group that is still ours, removes all records, and returns the
/// records it acted on.
pub fn reap(dir: &Path) -> Vec<Record> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let rec: Option<Record> = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(rec) = rec {
            if still_ours(&rec) {
                stop_group(rec.pid, rec.pgid, Duration::from_secs(3));
                reaped.push(rec);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_reused_pid_is_left_alone_and_a_recorded_group_is_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let st = start_time(pid).unwrap();
        // A record of the same pid with another start time stands for a reused pid.
        let stale = Record {
            pid,
            pgid: pid,
            start_time: st + 1,
            session_id: "s".into(),
            server: "x".into(),
        };
        write(dir.path(), &stale).unwrap();
        assert!(reap(dir.path()).is_empty());
        assert!(running(pid));
        let rec = Record {
            start_time: st,
            ..stale
        };
        write(dir.path(), &rec).unwrap();
        assert_eq!(reap(dir.path()), vec![rec]);
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
