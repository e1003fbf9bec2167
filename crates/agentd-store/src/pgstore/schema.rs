//! Versioned schema migrations, applied at start under an advisory lock so that daemons
//! starting together apply each step once.

use postgres::Client;

/// Every step, in order; step `i` brings the schema to version `i + 1`. A step is never
/// edited once released: a change is a new step.
const STEPS: &[&str] = &[
    // 1: sessions with what the lineage index needs and the lease; events byte-exact.
    r#"
    CREATE TABLE sessions (
        id                 text PRIMARY KEY,
        head               bytea NOT NULL,
        event_count        bigint NOT NULL,
        byte_count         bigint NOT NULL,
        last_ts            text,
        last_title         text,
        last_labels        text,
        has_branch_summary boolean NOT NULL DEFAULT false,
        lease_owner        text,
        lease_host         text,
        lease_expires      timestamptz,
        lease_token        bigint NOT NULL DEFAULT 0,
        created_at         timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE events (
        session_id text NOT NULL REFERENCES sessions (id),
        seq        bigint NOT NULL,
        line       bytea NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    "#,
    // 2: no foreign key from events to sessions: every insert is already gated on the
    // session row (the group statement inserts only for sessions whose lease row it
    // updated), and the per-row check cost each commit a trigger call per event.
    r#"
    ALTER TABLE events DROP CONSTRAINT IF EXISTS events_session_id_fkey;
    "#,
    // 3: the trash: a deleted session keeps its row and events, marked, until restored
    // or purged.
    r#"
    ALTER TABLE sessions ADD COLUMN trashed_at timestamptz;
    "#,
    // 4: when each session row last changed what the lineage index shows, so that
    // `list` reads only the heads that changed. Not indexed: an index would cost every
    // commit its HOT update, and a scan of the session rows is cheap beside sending them.
    r#"
    ALTER TABLE sessions ADD COLUMN updated_at timestamptz NOT NULL DEFAULT clock_timestamp();
    "#,
    // 5: prompts' images, content-addressed and shared by every session (and fork)
    // that refers to them, so any daemon of the database can send them again.
    r#"
    CREATE TABLE images (
        sha256     text PRIMARY KEY,
        mime       text NOT NULL,
        bytes      bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    "#,
];

/// The schema version this build writes.
pub const CURRENT: i32 = STEPS.len() as i32;

/// Key of the advisory lock migrations hold (any constant no other tool uses).
const MIGRATION_LOCK: i64 = 0x6167_656e_7464; // "agentd"

/// Brings the database to [`CURRENT`]; refuses a database written by a newer agentd.
pub fn migrate(client: &mut Client) -> Result<i32, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )?;
    let have: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[])?
        .get(0);
    if have > CURRENT {
        tx.rollback()?;
        return Ok(have);
    }
    for (i, step) in STEPS.iter().enumerate().skip(have as usize) {
        tx.batch_execute(step)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )?;
    }
    tx.commit()?;
    Ok(CURRENT)
}
