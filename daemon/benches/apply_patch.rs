//! `apply_patch` against `write_file` of the same bytes, in process (the functions a
//! tool call runs, with the same confinement, atomic write and fsync), on a 1,000-line
//! file (about 40 KiB):
//! - add: a patch that adds the file (`*** Add File`, 1,000 `+` lines) against
//!   `write_file` of its content;
//! - update: a patch changing 10 lines spread over the file (10 chunks with 3 lines of
//!   context each) against `write_file` of the whole new content, the baseline a model
//!   without a patch tool pays.
//!
//! Each figure is the median of `BENCH_ROUNDS` calls (default 300), measured alternately.
//!
//! Run: `cargo bench -p agentd --bench apply_patch`.

use agentd::tools::files::{apply_patch, write_file, ApplyPatchArgs, WriteFileArgs};
use agentd::tools::ToolContext;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let ctx = ToolContext::new(&ws, tmp.path().join("resources")).expect("context");
    let lines: Vec<String> = (0..1000)
        .map(|i| format!("    let value_{i:04} = compute({i}, \"line {i} of the file\");"))
        .collect();
    let content = lines.join("\n") + "\n";
    let add_patch = format!(
        "*** Begin Patch\n*** Add File: big.rs\n{}*** End Patch\n",
        lines.iter().map(|l| format!("+{l}\n")).collect::<String>()
    );
    let mut update_patch = String::from("*** Begin Patch\n*** Update File: big.rs\n");
    let mut updated = lines.clone();
    for k in 0..10 {
        let at = 50 + k * 95;
        update_patch.push_str("@@\n");
        for l in &lines[at - 3..at] {
            update_patch.push_str(&format!(" {l}\n"));
        }
        update_patch.push_str(&format!("-{}\n+{}  // changed\n", lines[at], lines[at]));
        updated[at] = format!("{}  // changed", lines[at]);
        for l in &lines[at + 1..at + 4] {
            update_patch.push_str(&format!(" {l}\n"));
        }
    }
    update_patch.push_str("*** End Patch\n");
    let updated = updated.join("\n") + "\n";
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };
    let write = |text: &str| {
        let out = write_file(
            WriteFileArgs {
                path: "big.rs".into(),
                content: text.to_string(),
            },
            &ctx,
        )
        .expect("write_file");
        assert!(out.ok);
    };
    let patch = |p: &str| {
        let out = apply_patch(
            ApplyPatchArgs {
                input: p.to_string(),
            },
            &ctx,
        )
        .expect("apply_patch");
        assert!(out.ok);
    };
    let (mut add, mut add_base, mut upd, mut upd_base) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let _ = std::fs::remove_file(ws.join("big.rs"));
        add.push(time(&mut || patch(&add_patch)));
        let _ = std::fs::remove_file(ws.join("big.rs"));
        add_base.push(time(&mut || write(&content)));
        write(&content);
        upd.push(time(&mut || patch(&update_patch)));
        assert_eq!(
            std::fs::read_to_string(ws.join("big.rs")).expect("read"),
            updated
        );
        write(&content);
        upd_base.push(time(&mut || write(&updated)));
    }
    println!(
        "1,000-line file ({} bytes), median of {rounds}:",
        content.len()
    );
    println!(
        "  add:    apply_patch {:?}  write_file {:?}",
        median(add),
        median(add_base)
    );
    println!(
        "  update: apply_patch {:?}  write_file {:?} (10 chunks)",
        median(upd),
        median(upd_base)
    );
}
