//! `agentd-fuzz TARGET|all [--seconds N] [--seed S] [--max-len BYTES] [--keep-going]`
//!
//! Runs fuzz targets for a bounded time and prints executions per target. Exit status
//! 1 if any input crashed a target (saved under `fuzz/artifacts/TARGET/`).

use agentd_fuzz::{engine, seed_dirs, targets};
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut which: Option<String> = None;
    let mut seconds = 20u64;
    let mut seed = 0x5eed_f022u64;
    let mut max_len = 64 * 1024usize;
    let mut keep_going = false;
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&format!("{name} needs a number")))
        };
        match a.as_str() {
            "--seconds" => seconds = num("--seconds"),
            "--seed" => seed = num("--seed"),
            "--max-len" => max_len = num("--max-len") as usize,
            "--keep-going" => keep_going = true,
            "--list" => {
                for n in targets::NAMES {
                    println!("{n}");
                }
                return;
            }
            t if !t.starts_with('-') && which.is_none() => which = Some(t.to_string()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let which = which.unwrap_or_else(|| usage("name a target or `all`"));
    let names: Vec<&str> = if which == "all" {
        targets::NAMES.to_vec()
    } else {
        vec![targets::NAMES
            .iter()
            .copied()
            .find(|n| *n == which)
            .unwrap_or_else(|| usage(&format!("unknown target {which}")))]
    };
    let mut failed = false;
    for name in names {
        let stats = engine::run(engine::Run {
            name,
            target: targets::by_name(name).unwrap(),
            seeds: Vec::new(),
            seed_dirs: seed_dirs(name),
            duration: Duration::from_secs(seconds),
            seed,
            max_len,
            artifacts: agentd_fuzz::crate_dir().join("artifacts"),
            keep_going,
        });
        let secs = stats.elapsed.as_secs_f64().max(1e-9);
        println!(
            "{name}: {} execs in {:.1} s ({:.0}/s), corpus {}, crashes {}",
            stats.execs,
            secs,
            stats.execs as f64 / secs,
            stats.corpus,
            stats.crashes.len()
        );
        failed |= !stats.crashes.is_empty();
    }
    targets::cleanup();
    if failed {
        std::process::exit(1);
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "agentd-fuzz: {msg}\nusage: agentd-fuzz TARGET|all [--seconds N] [--seed S] [--max-len BYTES] [--keep-going] | --list\ntargets: {}",
        targets::NAMES.join(", ")
    );
    std::process::exit(2);
}
