//! Store URLs (`store = "postgres://…"` in config.toml, `AGENTD_STORE`): recognising
//! one, and the redacted form that is the only one the daemon and agentctl ever show.

/// True when `s` names a PostgreSQL store rather than the file home.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// The URL with any password replaced by `***`: the only form of it that reaches a log,
/// an error or `agentctl doctor`. The user info ends at the last `@`, so a password
/// holding an unescaped `/`, `?` or `@` is still hidden (at worst more is hidden).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".into();
    };
    let (userinfo, hostpart) = match rest.rfind('@') {
        Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
        None => (None, rest),
    };
    let shown_user = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((user, _)) => format!("{user}:***@"),
            None => format!("{u}@"),
        },
        None => String::new(),
    };
    let tail = redact_query(hostpart);
    format!("{scheme}://{shown_user}{tail}")
}

fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_every_password() {
        assert_eq!(
            redact("postgres://ann:s3cret@db.example:5432/agentd?sslmode=disable"),
            "postgres://ann:***@db.example:5432/agentd?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://ann@db/agentd?password=s3cret&host=/run"),
            "postgresql://ann@db/agentd?password=***&host=/run"
        );
        assert_eq!(redact("postgres://ann:p%40ss@h"), "postgres://ann:***@h");
        assert!(!redact("postgres://a:b@c@d/x").contains('b'));
        assert!(!redact("postgres://a:se/c?r@h/db").contains("se"));
        assert_eq!(redact("not a url with secret"), "***");
    }
}
