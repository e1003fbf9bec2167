//! `agentd store check`: what `agentctl doctor` reports about a database store. It only
//! reads: it connects as the daemon would (password sources, TLS), and never migrates,
//! takes a lease or writes a row.

use super::conn::{self, describe, ConnSpec};
use super::schema;
use agentd_proto::{AgentError, ErrorKind};
use serde_json::{json, Value};
use std::time::Duration;

/// How long a connection attempt may take before the check gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects and reads the server version, whether the connection uses TLS, the schema
/// version, how many sessions the store holds and which daemons hold leases now.
pub fn check(spec: &ConnSpec) -> Result<Value, AgentError> {
    let shown = conn::redact(&spec.url);
    let (mut cfg, connector) = conn::connection(spec)?;
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(CONNECT_TIMEOUT);
    }
    let failed = |what: &str, e: postgres::Error| {
        let mut err = conn::store_error(ErrorKind::Network, what, &e);
        err.message = format!("store {shown}: {what}: {}", describe(&e).1);
        err
    };
    let mut c = connector
        .connect(&cfg)
        .map_err(|e| failed("cannot connect", e))?;
    // One row of one parameterless query, its failure named by `what`.
    let one = |c: &mut postgres::Client, sql: &str, what: &str| {
        c.query_one(sql, &[]).map_err(|e| failed(what, e))
    };
    let version: String = one(&mut c, "SHOW server_version", "read the server version")?.get(0);
    let tls: bool = one(
        &mut c,
        "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
        "read the connection's TLS",
    )?
    .get(0);
    let has_schema: bool = one(
        &mut c,
        "SELECT to_regclass('schema_version') IS NOT NULL",
        "look for the schema",
    )?
    .get(0);
    let mut out = json!({
        "store": shown,
        "server_version": version,
        "tls": tls,
        "schema_version": null,
        "schema_current": schema::CURRENT,
        "sessions": null,
        "leases": [],
    });
    if !has_schema {
        return Ok(out);
    }
    let have: i32 = one(
        &mut c,
        "SELECT coalesce(max(version), 0) FROM schema_version",
        "read the schema version",
    )?
    .get(0);
    out["schema_version"] = json!(have);
    if have > schema::CURRENT {
        return Ok(out);
    }
    let sessions: i64 = one(
        &mut c,
        "SELECT count(*) FROM sessions WHERE trashed_at IS NULL",
        "count the sessions",
    )?
    .get(0);
    out["sessions"] = json!(sessions);
    let leases = c
        .query(
            "SELECT lease_host, count(*) FROM sessions
             WHERE lease_owner IS NOT NULL AND lease_expires > now()
             GROUP BY lease_host ORDER BY lease_host",
            &[],
        )
        .map_err(|e| failed("read the leases", e))?;
    out["leases"] = leases
        .iter()
        .map(|r| json!({"host": r.get::<_, Option<String>>(0), "sessions": r.get::<_, i64>(1)}))
        .collect();
    Ok(out)
}
