//! Durable appends through agentd on the PostgreSQL store against a raw baseline over
//! the same connection type, in the same run, on a private server started here (as the
//! tests do: `agentd_tests::pg`):
//!
//! (a) raw single-row `INSERT` + `COMMIT` loop (`synchronous_commit = on`) through the
//! `postgres` crate, one connection, and the same INSERT (autocommit, one round trip)
//! run by a bare thread that answers one client over a Unix socket (the ceiling for any
//! daemon in front of the database); (b) agentd acknowledged appends over its socket:
//! one session with one client (target >= 0.8x a), 64 sessions with one client each
//! (target >= 5x a, through group commit).
//!
//! Each round measures the baseline before and after agentd's 1-session run and
//! compares against their mean.
//!
//! Run: `cargo bench -p agentd --bench pg_append` (env `BENCH_OPS` scales the work,
//! `BENCH_ROUNDS` the rounds, default 3).

mod support;

use agentd_tests::pg::PgServer;
use serde_json::json;
use std::time::Instant;
use support::Conn;

fn line() -> Vec<u8> {
    let mut l = vec![b'x'; 511];
    l[0] = b'{';
    l
}

/// One connection with the baseline's table and statement, reused by every round.
struct Raw {
    c: postgres::Client,
    stmt: postgres::Statement,
}

impl Raw {
    fn new(url: &str) -> Raw {
        let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        c.batch_execute(
            "SET synchronous_commit = on;
             CREATE TABLE raw (id bigserial PRIMARY KEY, line bytea NOT NULL)",
        )
        .expect("raw table");
        let stmt = c
            .prepare("INSERT INTO raw (line) VALUES ($1)")
            .expect("prepare");
        Raw { c, stmt }
    }

    /// Single-row INSERT + COMMIT loop; ops per second.
    fn run(&mut self, n: usize) -> f64 {
        let l = line();
        let t = Instant::now();
        for _ in 0..n {
            let mut tx = self.c.transaction().expect("begin");
            tx.execute(&self.stmt, &[&l]).expect("insert");
            tx.commit().expect("commit");
        }
        n as f64 / t.elapsed().as_secs_f64()
    }
}

/// The ceiling for any daemon in front of PostgreSQL with one client: a bare thread
/// reads a request line from a Unix socket, runs the baseline's INSERT on its own
/// connection as one durable autocommit round trip (cheaper than the baseline's BEGIN,
/// INSERT, COMMIT) and answers, with no parsing, framing or hand-off. It pays what
/// agentd pays and the raw loop does not: the client's wake-up by another task.
fn relay(url: &str, n: usize) -> f64 {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    c.batch_execute(
        "SET synchronous_commit = on;
         CREATE TABLE IF NOT EXISTS relayed (id bigserial PRIMARY KEY, line bytea NOT NULL)",
    )
    .expect("relay table");
    let stmt = c
        .prepare("INSERT INTO relayed (line) VALUES ($1)")
        .expect("prepare");
    let l = line();
    support::bare_round_trips(n, move |server| {
        // One round trip: the INSERT commits on its own (autocommit).
        support::answer_each_line(server, || {
            c.execute(&stmt, &[&l]).expect("insert");
        })
    })
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = support::env_usize("BENCH_OPS", 1000);
    let rounds = support::env_usize("BENCH_ROUNDS", 3);
    let pg = PgServer::start();
    let mut raw = Raw::new(&pg.create_db());
    let relay_url = pg.create_db();

    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    let url = pg.create_db();
    let (_d, mut c) = support::start_with(
        dir.path(),
        "",
        &[("AGENTD_STORE", &url), ("AGENTD_DURABILITY", "sync")],
    );
    let socket = dir.path().join("run").join("agentd.sock");
    let mk = |c: &mut Conn, sid: &str| {
        c.call("agentd/create", json!({"workspace": ws, "session_id": sid}));
        sid.to_string()
    };
    let one = mk(&mut c, "seq");
    let many: Vec<String> = (0..64).map(|i| mk(&mut c, &format!("s{i}"))).collect();
    // Baseline and agentd alternate, so a change in the machine's load between them
    // shows as a spread across rounds rather than as a bias.
    println!("ops per measurement: {n}; rounds: {rounds}");
    for r in 1..=rounds {
        let a = raw.run(n);
        let relayed = relay(&relay_url, n);
        let b1 = support::appends(&socket, 1, n, |_| one.clone());
        let a2 = raw.run(n);
        let b64 = support::appends(&socket, many.len(), (n / 4).max(16), |i| many[i].clone());
        let base = (a + a2) / 2.0;
        println!(
            "round {r}: (a) raw INSERT+COMMIT {a:>6.0} / {a2:>6.0} ops/s, bare relay on a socket {relayed:>6.0} ops/s ({:.2}x a) | (b) agentd 1 session {b1:>6.0} ops/s ({:.2}x a, target >= 0.8x; {:.2}x the relay) | 64 sessions {b64:>6.0} ops/s ({:.2}x a, target >= 5x)",
            relayed / base,
            b1 / base,
            b1 / relayed,
            b64 / base
        );
    }
}
