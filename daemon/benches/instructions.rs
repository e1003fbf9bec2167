//! What reading the instruction files adds to a turn's start when nothing changed
//! (docs/turns-and-providers.md, "Instructions"): the turn reads the global file and
//! the project's `AGENTS.md` files, hashes them and compares the digests with the
//! session's newest record; nothing is written. Measured in process, the same call a
//! turn makes (`turn::instructions::find` plus the comparison), on a repository with a
//! 3-level tree of `AGENTS.md` files (a global file and three project files of 2–6 KiB)
//! against the same-run baseline of a repository with none. Target: ≤ 1 ms added.
//!
//! Run: `cargo bench -p agentd --bench instructions` (`BENCH_ROUNDS`, default 2000).

use agentd::tools::sandboxing::PathRules;
use agentd::turn::instructions::find;
use std::path::Path;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn measure(ws: &Path, global: Option<&Path>, rounds: usize) -> (Duration, usize) {
    let recorded: Vec<(String, String)> = find(ws, global, &PathRules::default())
        .files
        .iter()
        .map(|f| (f.path.clone(), f.sha256.clone()))
        .collect();
    let mut times = Vec::with_capacity(rounds);
    let mut n = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let found = find(ws, global, &PathRules::default());
        let same = found
            .files
            .iter()
            .map(|f| (f.path.clone(), f.sha256.clone()))
            .eq(recorded.iter().cloned());
        times.push(t.elapsed());
        assert!(same, "nothing changed between rounds");
        n = found.files.len();
    }
    (median(times), n)
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical");
    let para =
        "Run the tests before you report. Keep functions short and named for what they do.\n";
    // With instructions: a global file and AGENTS.md at three levels.
    let repo = root.join("with");
    let ws = repo.join("crates/core");
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let global = root.join("config/agentd/AGENTS.md");
    std::fs::create_dir_all(global.parent().expect("parent")).expect("mkdir");
    std::fs::write(&global, para.repeat(25)).expect("write");
    std::fs::write(repo.join("AGENTS.md"), para.repeat(75)).expect("write");
    std::fs::write(repo.join("crates/AGENTS.md"), para.repeat(25)).expect("write");
    std::fs::write(ws.join("AGENTS.md"), para.repeat(50)).expect("write");
    // Baseline: the same tree without a file.
    let bare = root.join("without");
    let bare_ws = bare.join("crates/core");
    std::fs::create_dir_all(bare.join(".git")).expect("mkdir");
    std::fs::create_dir_all(&bare_ws).expect("mkdir");
    let missing = root.join("config/none/AGENTS.md");

    // Warm both (page cache, allocator), then alternate so load hits both alike.
    measure(&ws, Some(&global), 50);
    measure(&bare_ws, Some(&missing), 50);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        with.push(measure(&ws, Some(&global), rounds / 5).0);
        without.push(measure(&bare_ws, Some(&missing), rounds / 5).0);
    }
    let (with, files) = (median(with), measure(&ws, Some(&global), 10).1);
    let without = median(without);
    let added = with.saturating_sub(without);
    println!("instruction files read: {files} (global + 3 levels)");
    println!("turn start, no instruction files (baseline): {without:?} per turn (median)");
    println!("turn start, 3-level AGENTS.md tree, unchanged: {with:?} per turn (median)");
    println!("added: {added:?} (target <= 1 ms)");
}
