//! Connection settings of the PostgreSQL store: the URL, where its password comes
//! from, and the redacted form that is the only one ever logged or shown.

use agentd_proto::{AgentError, ErrorKind};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where the store's settings came from, before any password lookup.
#[derive(Clone)]
pub struct ConnSpec {
    /// As the user wrote it (may hold a password: never log it, use [`redact`]).
    pub url: String,
    /// `store_password_file` from config.toml, if set.
    pub password_file: Option<PathBuf>,
}

impl std::fmt::Debug for ConnSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnSpec")
            .field("url", &redact(&self.url))
            .field("password_file", &self.password_file)
            .finish()
    }
}

pub use agentd_proto::store_url::{is_postgres_url, redact};

/// The driver's settings and how to connect, from one reading of the URL: its TLS
/// settings are taken off first ([`super::tls::split`]), the rest is parsed and the
/// password filled in: the URL's own, else `PGPASSWORD`, else the configured password
/// file (its first line), else a matching `~/.pgpass` line (`PGPASSFILE` names another
/// file). Errors name the URL redacted.
pub fn connection(spec: &ConnSpec) -> Result<(postgres::Config, Connector), AgentError> {
    let shown = |e: AgentError| AgentError {
        message: format!("store URL {}: {}", redact(&spec.url), e.message),
        ..e
    };
    let (url, tls) = super::tls::split(&spec.url).map_err(shown)?;
    let cfg = config(spec, &url)?;
    let connector = connector(&tls, &cfg).map_err(shown)?;
    Ok((cfg, connector))
}

/// The driver's settings from `url` (the store URL without its TLS settings).
fn config(spec: &ConnSpec, url: &str) -> Result<postgres::Config, AgentError> {
    let mut cfg = postgres::Config::from_str(url).map_err(|e| {
        AgentError::invalid_args(format!(
            "store URL {} does not parse: {e}",
            redact(&spec.url)
        ))
    })?;
    if cfg.get_password().is_none() {
        if let Some(pw) = password_from_env_or_files(&cfg, spec)? {
            cfg.password(pw);
        }
    }
    if cfg.get_user().is_none() {
        if let Ok(u) = std::env::var("PGUSER").or_else(|_| std::env::var("USER")) {
            cfg.user(&u);
        }
    }
    cfg.application_name("agentd");
    Ok(cfg)
}

/// How the store's connections are made: TLS as the URL's `sslmode` asks
/// ([`super::tls`]), none when every host is a Unix socket.
#[derive(Clone)]
pub enum Connector {
    Plain,
    Tls {
        tls: tokio_postgres_rustls::MakeRustlsConnect,
        /// `prefer`/`allow`: a failed TLS attempt is tried again in plain text, as
        /// libpq does.
        fallback: bool,
    },
}

fn connector(
    settings: &super::tls::TlsSettings,
    cfg: &postgres::Config,
) -> Result<Connector, AgentError> {
    let tcp = cfg
        .get_hosts()
        .iter()
        .any(|h| matches!(h, postgres::config::Host::Tcp(_)));
    if !tcp {
        return Ok(Connector::Plain);
    }
    use super::tls::SslMode;
    Ok(match super::tls::client_config(settings)? {
        Some(c) => Connector::Tls {
            tls: tokio_postgres_rustls::MakeRustlsConnect::new(c),
            fallback: matches!(settings.mode, SslMode::Prefer | SslMode::Allow),
        },
        None => Connector::Plain,
    })
}

impl Connector {
    pub fn connect(&self, cfg: &postgres::Config) -> Result<postgres::Client, postgres::Error> {
        match self {
            Connector::Plain => cfg.connect(postgres::NoTls),
            Connector::Tls { tls, fallback } => match cfg.connect(tls.clone()) {
                // Not an answer of the server (a refused login, say): the TLS
                // handshake or the transport failed, so try once without TLS.
                Err(e) if *fallback && e.as_db_error().is_none() => {
                    let mut plain = cfg.clone();
                    plain.ssl_mode(postgres::config::SslMode::Disable);
                    plain.connect(postgres::NoTls).map_err(|_| e)
                }
                other => other,
            },
        }
    }
}

fn password_from_env_or_files(
    cfg: &postgres::Config,
    spec: &ConnSpec,
) -> Result<Option<String>, AgentError> {
    if let Ok(pw) = std::env::var("PGPASSWORD") {
        return Ok(Some(pw));
    }
    if let Some(path) = &spec.password_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            AgentError::new(
                ErrorKind::InvalidArgs,
                format!("store_password_file {}: {e}", path.display()),
            )
        })?;
        return Ok(Some(text.lines().next().unwrap_or_default().to_string()));
    }
    let pgpass = match std::env::var_os("PGPASSFILE") {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os("HOME") {
            Some(h) => Path::new(&h).join(".pgpass"),
            None => return Ok(None),
        },
    };
    let Ok(text) = std::fs::read_to_string(&pgpass) else {
        return Ok(None);
    };
    let host = match cfg.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(_)) | None => "localhost".into(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432).to_string();
    let db = cfg.get_dbname().unwrap_or_default().to_string();
    let user = cfg.get_user().unwrap_or_default().to_string();
    Ok(pgpass_lookup(&text, &host, &port, &db, &user))
}

/// The password of the first `host:port:database:user:password` line that matches
/// (`*` matches anything; `\:` and `\\` are escapes).
pub fn pgpass_lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass(line);
        if fields.len() != 5 {
            continue;
        }
        let want = [host, port, db, user];
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    if let Some(s) = out.last_mut() {
                        s.push(n);
                    }
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            c => {
                if let Some(s) = out.last_mut() {
                    s.push(c)
                }
            }
        }
    }
    out
}

/// A store error as the user sees it: never the URL, always which store, and
/// `reason: store_unavailable` when the server cannot be reached or is shutting down or
/// starting up (a retry later may succeed), `store_error` for anything else.
pub fn store_error(kind: ErrorKind, what: &str, e: &postgres::Error) -> AgentError {
    let (unavailable, text) = describe(e);
    AgentError::new(kind, format!("postgres: {what}: {text}")).with_details(json!({
        "store": "postgres",
        "reason": if unavailable { "store_unavailable" } else { "store_error" },
    }))
}

/// Whether `e` means the server cannot be used right now, and its full text (the
/// server's message with its SQLSTATE, or the client error with its causes).
pub fn describe(e: &postgres::Error) -> (bool, String) {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            // Class 08: connection exception; class 57: operator intervention (shutdown,
            // crash recovery, "the database system is starting up").
            let unavailable = code.starts_with("08") || code.starts_with("57");
            (unavailable, format!("{} (SQLSTATE {code})", db.message()))
        }
        None => {
            let mut text = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(s) = src {
                text.push_str(&format!(": {s}"));
                src = s.source();
            }
            (true, text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgpass_matches_wildcards_and_escapes() {
        let text = "# comment\nother:5432:*:ann:no\n*:*:agentd:ann:pa\\:ss\n";
        assert_eq!(
            pgpass_lookup(text, "db", "5432", "agentd", "ann").as_deref(),
            Some("pa:ss")
        );
        assert_eq!(pgpass_lookup(text, "db", "5432", "x", "ann"), None);
    }

    #[test]
    fn password_comes_from_the_file_named_in_config() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "from-file\n").unwrap();
        let spec = ConnSpec {
            url: "postgres://ann@localhost/agentd".into(),
            password_file: Some(pw),
        };
        if std::env::var_os("PGPASSWORD").is_none() {
            let (cfg, _) = connection(&spec).unwrap();
            assert_eq!(cfg.get_password(), Some(&b"from-file"[..]));
        }
        let spec = ConnSpec {
            url: "postgres://ann:inurl@localhost/agentd".into(),
            password_file: None,
        };
        assert_eq!(
            connection(&spec).unwrap().0.get_password(),
            Some(&b"inurl"[..])
        );
    }
}
