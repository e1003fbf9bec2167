//! Fault injection for the store's Log syscalls: a test seam, inert unless the daemon
//! was started with `AGENTD_FAULTS`.
//!
//! `AGENTD_FAULTS` is a comma-separated list of rules
//! `OP:FAULT:NTH[:TIMES][@MATCH][#TEXT]`:
//! - `OP`: `write` (a batch's write to a Log), `fsync` (its `fdatasync`, and the sync of
//!   a Log being recovered), `read` (a block read while loading a Log), `parse` (a
//!   thread parsing a part of a block while loading a Log);
//! - `FAULT`: `eio`, `enospc`, `short` (for `write`: half the bytes are written, then
//!   `ENOSPC`), `kill` (for `write`, on either store: the daemon kills itself with
//!   SIGKILL before the batch is written, a crash at an exact point of a turn), or
//!   `panic` (for `parse`, and the only fault of `parse`: the parse thread panics, as a
//!   bug in the parser would), or `hold` (for `read`: the load waits, before that read,
//!   until a writer opens and closes the FIFO `<home>/fault-hold` a test made, so the
//!   test acts while the Log is half loaded; no FIFO, no wait);
//! - `NTH`: the 1-based count of matching calls at which the rule fires, `TIMES` how many
//!   matching calls in a row fail from there (default 1);
//! - `MATCH`: only calls on a path containing this text count (a session id);
//! - `TEXT` (`write` only): only batches whose bytes contain this text count (an event
//!   type such as `turn_started`).
//!
//! Example: `AGENTD_FAULTS=fsync:eio:3@20261123T000000-aaaaaa` fails the third
//! `fdatasync` of that session's Log with `EIO`; `write:kill:2#turn_started` kills the
//! daemon as it is about to record its second turn start. The daemon refuses to start
//! on a malformed rule.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write,
    Fsync,
    Read,
    Parse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Eio,
    Enospc,
    Short,
    Kill,
    Panic,
    Hold,
}

impl Fault {
    pub fn error(self) -> std::io::Error {
        std::io::Error::from_raw_os_error(match self {
            Fault::Eio => libc::EIO,
            Fault::Enospc | Fault::Short => libc::ENOSPC,
            Fault::Kill | Fault::Panic | Fault::Hold => libc::EINTR,
        })
    }
}

#[derive(Debug)]
struct Rule {
    op: Op,
    fault: Fault,
    nth: u64,
    times: u64,
    matches: Option<String>,
    contains: Option<String>,
    seen: AtomicU64,
}

fn parse_rule(s: &str) -> Result<Rule, String> {
    let (spec, contains) = match s.split_once('#') {
        Some((a, b)) => (a, Some(b.to_string())),
        None => (s, None),
    };
    let (spec, matches) = match spec.split_once('@') {
        Some((a, b)) => (a, Some(b.to_string())),
        None => (spec, None),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.len() < 3 || parts.len() > 4 {
        return Err(format!(
            "fault rule {s:?}: want OP:FAULT:NTH[:TIMES][@MATCH][#TEXT]"
        ));
    }
    let op = match parts[0] {
        "write" => Op::Write,
        "fsync" => Op::Fsync,
        "read" => Op::Read,
        "parse" => Op::Parse,
        o => return Err(format!("fault rule {s:?}: unknown op {o:?}")),
    };
    let fault = match parts[1] {
        "eio" => Fault::Eio,
        "enospc" => Fault::Enospc,
        "short" => Fault::Short,
        "kill" => Fault::Kill,
        "panic" => Fault::Panic,
        "hold" => Fault::Hold,
        f => return Err(format!("fault rule {s:?}: unknown fault {f:?}")),
    };
    let num = |t: &str| {
        t.parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("fault rule {s:?}: {t:?} is not a positive count"))
    };
    if (fault == Fault::Kill || contains.is_some()) && op != Op::Write {
        return Err(format!(
            "fault rule {s:?}: kill and #TEXT are for write only"
        ));
    }
    if fault == Fault::Hold && op != Op::Read {
        return Err(format!("fault rule {s:?}: hold is for read only"));
    }
    if (fault == Fault::Panic) != (op == Op::Parse) {
        return Err(format!("fault rule {s:?}: panic is the one fault of parse"));
    }
    Ok(Rule {
        op,
        fault,
        nth: num(parts[2])?,
        times: parts.get(3).map(|t| num(t)).transpose()?.unwrap_or(1),
        matches,
        contains,
        seen: AtomicU64::new(0),
    })
}

fn parse(spec: &str) -> Result<Vec<Rule>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse_rule)
        .collect()
}

static RULES: OnceLock<Vec<Rule>> = OnceLock::new();

/// Reads `AGENTD_FAULTS` once; `main` calls it at start so a bad spec stops the daemon.
pub fn init_from_env() -> Result<(), String> {
    let rules = match std::env::var("AGENTD_FAULTS") {
        Ok(spec) => {
            let rules = parse(&spec)?;
            if !rules.is_empty() {
                tracing::warn!(faults = %spec, "fault injection is on (AGENTD_FAULTS)");
            }
            rules
        }
        Err(_) => Vec::new(),
    };
    let _ = RULES.set(rules);
    Ok(())
}

/// Whether any rule is set (the store then wraps Log files in its fault-injecting one).
pub fn active() -> bool {
    RULES.get().is_some_and(|r| !r.is_empty())
}

/// The fault to inject for this call of `op` on `path`, if a rule says so (`kill`
/// rules are [`kill_point`]'s).
pub fn check(op: Op, path: &Path) -> Option<Fault> {
    check_in(op, &path.to_string_lossy(), None, false)
}

/// A `hold` fault on the Log at `log` (`<home>/sessions/<sid>.ndjson`): waits until a
/// writer opens and closes the FIFO `<home>/fault-hold`; returns at once without one.
pub fn hold(log: &Path) {
    let Some(home) = log.parent().and_then(Path::parent) else {
        return;
    };
    let fifo = home.join("fault-hold");
    let is_fifo = std::fs::symlink_metadata(&fifo)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()));
    if !is_fifo {
        tracing::warn!(fifo = %fifo.display(), "AGENTD_FAULTS hold: no FIFO, not holding");
        return;
    }
    tracing::warn!(fifo = %fifo.display(), "AGENTD_FAULTS hold: waiting for the FIFO's writer");
    // Opening a FIFO to read blocks until a writer opens it; reading ends when it closes.
    if let Ok(mut f) = std::fs::File::open(&fifo) {
        let _ = std::io::copy(&mut f, &mut std::io::sink());
    }
}

/// Before a batch of `bytes` is written to the Log at `at` (a file path, or a
/// session id on PostgreSQL): kills the process with SIGKILL if a `kill` rule fires.
pub fn kill_point(at: &str, bytes: &[u8]) {
    if active() && check_in(Op::Write, at, Some(bytes), true) == Some(Fault::Kill) {
        tracing::warn!(at, "AGENTD_FAULTS: killing the daemon before this write");
        // SAFETY: kill(2) on our own pid has no memory preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        // SIGKILL is not deliverable late; never go on to write.
        loop {
            std::thread::park();
        }
    }
}

fn check_in(op: Op, p: &str, bytes: Option<&[u8]>, kills: bool) -> Option<Fault> {
    let rules = RULES.get()?;
    if rules.is_empty() {
        return None;
    }
    // Every matching rule counts the call, so rules on the same op keep their own order.
    let mut fired = None;
    for r in rules {
        if r.op != op
            || (r.fault == Fault::Kill) != kills
            || r.matches.as_deref().is_some_and(|m| !p.contains(m))
        {
            continue;
        }
        if let Some(text) = &r.contains {
            let found =
                bytes.is_some_and(|b| b.windows(text.len().max(1)).any(|w| w == text.as_bytes()));
            if !found {
                continue;
            }
        }
        let n = r.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if fired.is_none() && n >= r.nth && n < r.nth + r.times {
            fired = Some(r.fault);
        }
    }
    fired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_refuse_garbage() {
        let r = parse("fsync:eio:3@abc, write:short:1:5").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].op, r[0].fault, r[0].nth, r[0].times),
            (Op::Fsync, Fault::Eio, 3, 1)
        );
        assert_eq!(r[0].matches.as_deref(), Some("abc"));
        let k = parse("write:kill:2@sid-1#turn_started").unwrap();
        assert_eq!((k[0].fault, k[0].nth), (Fault::Kill, 2));
        assert_eq!(k[0].matches.as_deref(), Some("sid-1"));
        assert_eq!(k[0].contains.as_deref(), Some("turn_started"));
        assert_eq!(
            (r[1].op, r[1].fault, r[1].times),
            (Op::Write, Fault::Short, 5)
        );
        let p = parse("parse:panic:2@sid-1").unwrap();
        assert_eq!(
            (p[0].op, p[0].fault, p[0].nth),
            (Op::Parse, Fault::Panic, 2)
        );
        for bad in [
            "fsync:eio",
            "sync:eio:1",
            "read:boom:1",
            "read:eio:0",
            "read:eio:x",
            "fsync:kill:1",
            "read:eio:1#x",
            "parse:eio:1",
            "read:panic:1",
            "write:hold:1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
