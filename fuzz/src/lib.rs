//! Fuzzing for agentd on the stable toolchain: the targets (`targets`), the mutational
//! engine that runs them (`engine`), and where their seeds live (`seed_dirs`).
//!
//! `agentd-fuzz TARGET --seconds N` runs one target (`all` runs each in turn); crashes
//! are written to `fuzz/artifacts/TARGET/`. Every committed file under
//! `fuzz/regressions/TARGET/` and `fuzz/corpus/TARGET/` is replayed by `cargo test -p
//! agentd-fuzz`, so a crash, once fixed and committed there, stays fixed.

pub mod engine;
pub mod targets;

use std::path::{Path, PathBuf};

/// The fuzz crate's directory (`fuzz/`).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Seed directories of a target: its committed corpus and regressions, plus the test
/// fixtures that fit it.
pub fn seed_dirs(target: &str) -> Vec<PathBuf> {
    let fuzz = crate_dir();
    let repo = fuzz.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut dirs = vec![
        fuzz.join("corpus").join(target),
        fuzz.join("regressions").join(target),
    ];
    match target {
        "import_pi" => dirs.push(repo.join("daemon/tests/data/import")),
        "log" | "history" => dirs.push(fuzz.join("corpus/import_pixir")),
        "config" => dirs.push(repo.join("examples")),
        _ => {}
    }
    dirs.retain(|d| d.is_dir());
    dirs
}

/// Committed inputs that must never crash a target again.
pub fn regression_inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = crate_dir();
    let mut out = Vec::new();
    for d in [
        fuzz.join("regressions").join(target),
        fuzz.join("corpus").join(target),
    ] {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if let Ok(b) = std::fs::read(&p) {
                out.push((p, b));
            }
        }
    }
    out
}
