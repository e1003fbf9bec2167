//! The long chaos run (docs/durability.md, "Chaos run"; `agentd_tests::chaos`): N
//! prompts of three steps each (a `shell` side effect, a `read_file`, a streamed
//! answer) while the daemon is killed at seeded moments, by itself before a chosen Log
//! write or with SIGKILL from outside, and `agentctl turn` retries with its
//! `client_request_id`. Prints the counts (and with `CHAOS_DETAIL=1` one line per
//! prompt); exits 1 if any prompt was duplicated, lost, or had its command run twice. On PostgreSQL with `AGENTD_TEST_STORE=postgres`.
//! With `takeover` as the third argument it runs the takeover run instead
//! (`chaos::takeover_run`): two daemons with homes of their own on one database of the
//! tests' PostgreSQL server, each prompt's owner killed and the other daemon taking
//! the lease over.
//!
//! ```sh
//! cargo build -p agentd -p agentctl
//! cargo run -p agentd-tests --example chaos_run -- 200 42
//! cargo run -p agentd-tests --example chaos_run -- 50 7 takeover
//! ```

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(42);
    let takeover = args.next().as_deref() == Some("takeover");
    let progress = |i: usize, r: &agentd_tests::chaos::Report| {
        if (i + 1).is_multiple_of(25) {
            eprintln!(
                "{} prompts, {} kills so far",
                i + 1,
                r.fault_kills + r.signal_kills
            );
        }
    };
    let (store, r) = if takeover {
        let url = agentd_tests::pg::PgServer::shared().create_db();
        let r = agentd_tests::chaos::takeover_run(&url, n, seed, progress);
        ("postgres, two daemons taking leases over".to_string(), r)
    } else {
        let store = std::env::var("AGENTD_TEST_STORE").unwrap_or_else(|_| "file".into());
        (store, agentd_tests::chaos::run(n, seed, progress))
    };
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
