//! The command's environment: an allowlist of the daemon's variables, minus anything
//! that looks like a secret or a way back to the user's session, plus what config names
//! explicitly. `TMPDIR` is set by the mechanism (the private `/tmp`).

use std::collections::BTreeMap;

/// Variables passed through from the daemon's environment.
const ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "SHELL",
    "COLORTERM",
    "NO_COLOR",
    "EDITOR",
    "PAGER",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "GOPATH",
    "GOROOT",
    "GOMODCACHE",
    "GOCACHE",
    "GOFLAGS",
    "JAVA_HOME",
    "NVM_DIR",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PKG_CONFIG_PATH",
    "CC",
    "CXX",
];

/// Prefixes passed through (`LC_ALL`, `LC_CTYPE`, ...).
const ALLOW_PREFIX: &[&str] = &["LC_"];

/// Exact names always removed, even when allowlisted elsewhere.
const DENY: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
];

/// Name fragments that mark a secret (matched case-insensitively).
const SECRET_PARTS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Whether `name` is removed whatever the allowlist says.
pub fn is_denied(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    up.starts_with("AGENTD_")
        || DENY.contains(&up.as_str())
        || SECRET_PARTS.iter().any(|p| up.contains(p))
}

fn is_allowed(name: &str) -> bool {
    ALLOW.contains(&name) || ALLOW_PREFIX.iter().any(|p| name.starts_with(p))
}

/// The command's environment from the daemon's: allowlisted and not denied, then the
/// config's `env_pass` names and `env` values (explicit, so only `AGENTD_*` is refused).
pub fn scrub(
    daemon_env: &BTreeMap<String, String>,
    env_pass: &[String],
    env_set: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = daemon_env
        .iter()
        .filter(|(k, _)| is_allowed(k) && !is_denied(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for k in env_pass {
        if k.to_ascii_uppercase().starts_with("AGENTD_") {
            continue;
        }
        if let Some(v) = daemon_env.get(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in env_set {
        if !k.to_ascii_uppercase().starts_with("AGENTD_") {
            out.insert(k.clone(), v.clone());
        }
    }
    out.remove("TMPDIR");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_session_links_are_dropped() {
        let env: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("LC_ALL", "C"),
            ("DEPLOY_TOKEN", "x"),
            ("OPENAI_API_KEY", "x"),
            ("AGENTD_HOME", "/a"),
            ("AGENTD_SOCKET", "/s"),
            ("SSH_AUTH_SOCK", "/s"),
            ("DBUS_SESSION_BUS_ADDRESS", "x"),
            ("DISPLAY", ":0"),
            ("RANDOM_THING", "x"),
            ("TMPDIR", "/tmp/x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut cfg = crate::policy::SandboxConfig::default();
        let out = scrub(&env, &cfg.env_pass, &cfg.env);
        assert_eq!(
            out.keys().map(String::as_str).collect::<Vec<_>>(),
            ["HOME", "LC_ALL", "PATH"]
        );
        cfg.env_pass = vec!["RANDOM_THING".into(), "AGENTD_HOME".into()];
        cfg.env.insert("MY_API_KEY".into(), "explicit".into());
        cfg.env.insert("AGENTD_SOCKET".into(), "no".into());
        let out = scrub(&env, &cfg.env_pass, &cfg.env);
        assert_eq!(out.get("RANDOM_THING").map(String::as_str), Some("x"));
        assert_eq!(out.get("MY_API_KEY").map(String::as_str), Some("explicit"));
        assert!(!out.keys().any(|k| k.starts_with("AGENTD_")));
    }
}
