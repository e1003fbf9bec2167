//! Fuzz target bodies for agentd, run by libFuzzer through `cargo fuzz`.
//!
//! Each `fuzz_targets/NAME.rs` is a thin `fuzz_target!` that hands its input to a
//! function here; the function panics when agentd panics or an invariant breaks
//! (libFuzzer then saves the input under `fuzz/artifacts/NAME/`). Shared here: the
//! scratch directory for targets that need files, and the replay invariants every
//! event sequence must keep. `docs/fuzzing.md` lists the targets and how to run them.

pub mod acp;
pub mod config;
pub mod export;
pub mod framing;
pub mod history;
pub mod import;
pub mod log;
pub mod mcp;
pub mod ndjson;
pub mod patch;
pub mod path;
pub mod rpc;
pub mod sandbox;
pub mod sse;

use agentd::history::fold::{replay_as_of, Fold, ReplayContext};
use agentd::history::replay::pairing_violation;
use agentd_proto::Event;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The session id the targets give the Logs they write.
pub const SID: &str = "20261121T101500-f022ed";

/// Scratch space for targets that need files, removed when the process exits:
/// `$AGENTD_FUZZ_SCRATCH` if set, else tmpfs (`/dev/shm`) when there is one, so the
/// loader's fsyncs cost nothing, else the temp dir.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = match std::env::var_os("AGENTD_FUZZ_SCRATCH") {
            Some(b) => PathBuf::from(b),
            None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
            None => std::env::temp_dir(),
        };
        let d = base.join(format!("agentd-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create fuzz scratch dir");
        extern "C" fn remove_scratch() {
            if let Some(d) = DIR.get() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
        // SAFETY: registers a plain `extern "C"` function, run once at exit.
        unsafe { libc::atexit(remove_scratch) };
        d
    })
}

/// The replay context every target folds with.
pub fn replay_context() -> ReplayContext {
    ReplayContext {
        workspace: "/w".into(),
        permission_mode: "auto".into(),
        model: Some("m1".into()),
        ..Default::default()
    }
}

/// Every replay of `events` is balanced and passes the pairing guard, and the
/// incremental fold agrees with a fresh replay when seqs are contiguous.
pub fn check_replay(events: &[Event], what: &str) {
    let ctx = replay_context();
    let fold = Fold::from_events(events);
    let r = fold.replay(&ctx);
    assert!(r.stats.balanced, "{what}: replay unbalanced: {:?}", r.items);
    if let Some(v) = pairing_violation(&r.items) {
        panic!("{what}: pairing guard let through: {v}");
    }
    // Seqs come from the input: `u64::MAX` is one of them.
    if events
        .windows(2)
        .all(|w| w[0].seq.checked_add(1) == Some(w[1].seq))
    {
        let fresh = replay_as_of(events, None, &ctx);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            serde_json::to_string(&fresh).unwrap(),
            "{what}: incremental fold and fresh replay differ"
        );
    }
}
