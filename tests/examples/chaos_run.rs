//! The long chaos run (docs/durability.md, "Chaos run"; `agentd_tests::chaos`): N
//! prompts of three steps each (a `shell` side effect, a `read_file`, a streamed
//! answer) while the daemon is killed at seeded moments, by itself before a chosen Log
//! write or with SIGKILL from outside, and `agentctl turn` retries with its
//! `client_request_id`. Prints the counts (and with `CHAOS_DETAIL=1` one line per
//! prompt); exits 1 if any prompt was duplicated, lost, or had its command run twice. On PostgreSQL with `AGENTD_TEST_STORE=postgres`.
//!
//! ```sh
//! cargo build -p agentd -p agentctl
//! cargo run -p agentd-tests --example chaos_run -- 200 42
//! ```

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(42);
    let store = std::env::var("AGENTD_TEST_STORE").unwrap_or_else(|_| "file".into());
    let r = agentd_tests::chaos::run(n, seed, |i, r| {
        if (i + 1) % 25 == 0 {
            eprintln!(
                "{} prompts, {} kills so far",
                i + 1,
                r.fault_kills + r.signal_kills
            );
        }
    });
    println!(
        "chaos run: store {store}, seed {seed}, {:.1} s",
        r.elapsed.as_secs_f64()
    );
    println!("| prompts | kills (at a write / SIGKILL) | resumes | calls run again | calls closed outcome_unknown | side effects | duplicates | lost | double executions |");
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} ({} / {}) | {} | {} | {} | {} | {} | {} | {} |",
        r.prompts,
        r.fault_kills + r.signal_kills,
        r.fault_kills,
        r.signal_kills,
        r.resumes,
        r.rerun,
        r.closed_unknown,
        r.side_effects,
        r.duplicates,
        r.lost,
        r.double_runs
    );
    if std::env::var_os("CHAOS_DETAIL").is_some() {
        for l in &r.detail {
            println!("{l}");
        }
    }
    for v in &r.violations {
        println!("VIOLATION {v}");
    }
    if !r.violations.is_empty() {
        std::process::exit(1);
    }
}
