//! `agentctl doctor`: checks what a first run needs (socket path, home, config, the
//! provider keys, the store, the agentd binary, the login service; a database store
//! through `agentd store check`) and prints the fix for each problem. It only reads:
//! it never starts a daemon and never changes a file.
//!
//! Provider keys are reported by variable *name* only; their values are never read
//! into the output (the env file is scanned for `NAME=` prefixes).

use crate::daemon::{self, Target};
use crate::output;
use crate::output::Outcome;
use crate::service::{Manager, Places};
use agentd_proto::{paths, AgentError, ErrorKind};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Longest socket path the platform's `sun_path` holds (with its NUL).
const SUN_PATH_MAX: usize = if cfg!(target_os = "linux") { 107 } else { 103 };

struct Check {
    name: std::borrow::Cow<'static, str>,
    ok: bool,
    detail: String,
    fix: Option<String>,
}

fn ok(name: impl Into<std::borrow::Cow<'static, str>>, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        ok: true,
        detail: detail.into(),
        fix: None,
    }
}

fn bad(
    name: impl Into<std::borrow::Cow<'static, str>>,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> Check {
    Check {
        name: name.into(),
        ok: false,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// A private directory: ours, no group or other access.
fn private_dir(name: &'static str, what: &str, dir: &Path, absent: &str) -> Check {
    match std::fs::metadata(dir) {
        Err(_) => ok(name, format!("{what} {} ({absent})", dir.display())),
        Ok(m) if !m.is_dir() => bad(
            name,
            format!("{what} {} is not a directory", dir.display()),
            format!("move {} away", dir.display()),
        ),
        Ok(m) if m.uid() != uid() => bad(
            name,
            format!(
                "{what} {} is owned by uid {}, not {}",
                dir.display(),
                m.uid(),
                uid()
            ),
            "use a directory of your own (--home / AGENTD_HOME, --socket / AGENTD_SOCKET)",
        ),
        Ok(m) if m.mode() & 0o077 != 0 => bad(
            name,
            format!(
                "{what} {} has mode {:04o}; others can reach into it",
                dir.display(),
                m.mode() & 0o777
            ),
            format!("chmod 700 {}", dir.display()),
        ),
        Ok(_) => ok(name, format!("{what} {} (private)", dir.display())),
    }
}

async fn check_socket(target: &Target) -> Vec<Check> {
    let s = &target.socket;
    let mut out = Vec::new();
    let len = s.as_os_str().len();
    if len > SUN_PATH_MAX {
        out.push(bad(
            "socket",
            format!(
                "{} is {len} bytes; a Unix socket path holds at most {SUN_PATH_MAX}",
                s.display()
            ),
            "set AGENTD_SOCKET to a shorter path",
        ));
        return out;
    }
    if let Some(dir) = s.parent() {
        out.push(private_dir(
            "socket directory",
            "socket directory",
            dir,
            "absent; made 0700 when the daemon starts",
        ));
    }
    match std::fs::symlink_metadata(s) {
        Err(_) => out.push(ok(
            "socket",
            format!(
                "{}: no daemon yet; agentctl starts one on demand",
                s.display()
            ),
        )),
        Ok(m) if !m.file_type().is_socket() => out.push(bad(
            "socket",
            format!(
                "{} exists and is not a socket; the daemon refuses to start",
                s.display()
            ),
            format!("mv {} {}.bak", s.display(), s.display()),
        )),
        Ok(_) => match daemon::connect_existing(target).await {
            Ok(c) => out.push(ok(
                "socket",
                format!(
                    "{}: agentd {} answers (pid {})",
                    s.display(),
                    c.hello["version"].as_str().unwrap_or("?"),
                    c.hello["pid"]
                ),
            )),
            Err(e) if e.kind == ErrorKind::DaemonUnavailable => out.push(ok(
                "socket",
                format!(
                    "{}: stale (nobody listens); the next daemon replaces it",
                    s.display()
                ),
            )),
            Err(e) => out.push(bad(
                "socket",
                format!("{}: {}", s.display(), e.message),
                "agentctl daemon stop && agentctl daemon start",
            )),
        },
    }
    out
}

/// The provider turns use when they name none, and its key variable, as the daemon
/// resolves it (`agentd config check`).
struct DefaultProvider {
    name: String,
    /// Set in the config (`default_provider`), not the built-in fallback.
    configured: bool,
    key_env: Option<String>,
}

impl DefaultProvider {
    /// The daemon's answer, or (without an agentd binary) the same reading of the table.
    fn from_check(v: &Value) -> Option<DefaultProvider> {
        let name = v["default_provider"].as_str()?.to_string();
        Some(DefaultProvider {
            key_env: v["providers"][&name]["api_key_env"]
                .as_str()
                .map(str::to_string),
            configured: v["default_provider_configured"] == json!(true),
            name,
        })
    }

    fn from_table(config: Option<&toml::Table>) -> DefaultProvider {
        let set = config
            .and_then(|c| c.get("default_provider"))
            .and_then(|v| v.as_str());
        let name = set.unwrap_or("openai").to_string();
        let configured = config
            .and_then(|c| c.get("providers"))
            .and_then(|t| t.get(&name))
            .and_then(|t| t.as_table());
        let key_env = match configured {
            Some(t) => t
                .get("api_key_env")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            None => match name.as_str() {
                "openai" => Some("OPENAI_API_KEY".to_string()),
                "anthropic" => Some("ANTHROPIC_API_KEY".to_string()),
                _ => None,
            },
        };
        DefaultProvider {
            name,
            configured: set.is_some(),
            key_env,
        }
    }
}

/// Provider key variables named by the config (plus the built-in providers'), and
/// whether each is set for agentctl-started daemons (this environment) and for the
/// service (its env file). The default provider's key is required: without it
/// `agentctl run` fails.
fn check_keys(
    config: Option<&toml::Table>,
    default: &DefaultProvider,
    env_file: &Path,
) -> Vec<Check> {
    let mut names: BTreeSet<String> = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
        .map(String::from)
        .into();
    if let Some(providers) = config
        .and_then(|c| c.get("providers"))
        .and_then(|p| p.as_table())
    {
        for p in providers.values() {
            if let Some(n) = p.get("api_key_env").and_then(|v| v.as_str()) {
                names.insert(n.to_string());
            }
        }
    }
    names.extend(default.key_env.clone());
    let in_file: BTreeSet<String> = std::fs::read_to_string(env_file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches("export ");
            let (name, _) = l.split_once('=')?;
            (!name.starts_with('#')).then(|| name.trim().to_string())
        })
        .collect();
    let mut present = Vec::new();
    let mut absent = Vec::new();
    for n in &names {
        let env = std::env::var_os(n).is_some_and(|v| !v.is_empty());
        let file = in_file.contains(n);
        match (env, file) {
            (false, false) => absent.push(n.clone()),
            (true, false) => present.push(format!("{n} (environment)")),
            (false, true) => present.push(format!("{n} (service env file)")),
            (true, true) => present.push(format!("{n} (environment, service env file)")),
        }
    }
    let mut out = Vec::new();
    let mut d = if present.is_empty() {
        "none set".to_string()
    } else {
        format!("set: {}", present.join(", "))
    };
    if !absent.is_empty() && !present.is_empty() {
        let _ = write!(d, "; not set: {}", absent.join(", "));
    }
    match &default.key_env {
        Some(key) if absent.contains(key) => {
            let p = &default.name;
            let what = if default.configured {
                format!("default_provider {p:?} needs {key}, which is not set")
            } else {
                format!(
                    "no provider configured: default_provider is unset, so turns use the built-in {p:?}, which needs {key}, and it is not set"
                )
            };
            out.push(bad(
                "provider keys",
                format!("{what}; {d}"),
                format!(
                    "export {key}=... and run `agentctl daemon stop` (the next agentctl command starts a daemon that sees it); \
                     for a daemon started by the service (`agentctl service install`), add {key}=... to {} and run \
                     `systemctl --user restart agentd`; or choose a provider you have a key for: default_provider = \"NAME\" \
                     in {} (`agentctl config init` writes a commented file)",
                    env_file.display(),
                    paths::default_config().display()
                ),
            ))
        }
        _ => out.push(ok(
            "provider keys",
            format!("default provider {:?}; {d}", default.name),
        )),
    }
    match std::fs::metadata(env_file) {
        Ok(m) if m.mode() & 0o077 != 0 => out.push(bad(
            "service env file",
            format!(
                "{} has mode {:04o}; it holds API keys",
                env_file.display(),
                m.mode() & 0o777
            ),
            format!("chmod 600 {}", env_file.display()),
        )),
        Ok(_) => out.push(ok(
            "service env file",
            format!("{} (0600)", env_file.display()),
        )),
        Err(_) => {}
    }
    out
}

fn check_config(path: &Path) -> (Check, Option<toml::Table>) {
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return (
                ok("config", format!("{} absent: defaults", path.display())),
                None,
            )
        }
        Err(e) => {
            return (
                bad(
                    "config",
                    format!("{}: {e}", path.display()),
                    format!("chmod 600 {}", path.display()),
                ),
                None,
            )
        }
        Ok(t) => t,
    };
    let table: toml::Table = match toml::from_str(&text) {
        Ok(t) => t,
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            return (
                bad(
                    "config",
                    format!("{} does not parse: {first}", path.display()),
                    format!(
                        "fix the TOML in {} (the daemon refuses to start)",
                        path.display()
                    ),
                ),
                None,
            );
        }
    };
    (
        ok("config", format!("{} parses", path.display())),
        Some(table),
    )
}

/// How long `agentd config check` may take.
const CONFIG_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The daemon's own validation of the config file (`agentd config check`): every key
/// known, every value of its type, provider tables complete; the same message the
/// daemon would refuse to start with. `Err` carries the failed check; `Ok(None)` means
/// the agentd binary could not be run (the binary check says why).
async fn check_config_with_daemon(path: &Path) -> Result<Option<Value>, Check> {
    let bin = daemon::agentd_binary();
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg("--config")
        .arg(path)
        .args(["config", "check"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(CONFIG_CHECK_TIMEOUT, cmd.output()).await {
        Ok(Ok(out)) => out,
        _ => return Ok(None),
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if let Some(e) = v.get("error") {
        return Err(bad(
            "config",
            e["message"]
                .as_str()
                .unwrap_or("the config is not valid")
                .to_string(),
            format!(
                "fix that line of {} (the daemon refuses to start until then)",
                path.display()
            ),
        ));
    }
    Ok((out.status.success() && v.is_object()).then_some(v))
}

/// Where the Logs live: the file home, or a database named by `AGENTD_STORE` or the
/// config's `store`, shown only with its password redacted. A database is then checked
/// by [`check_database`]; this one does not connect.
fn check_store(config: Option<&toml::Table>, env: Option<&str>) -> Check {
    use agentd_proto::store_url::{is_postgres_url, redact};
    let Some((url, from)) = store_url(config, env) else {
        return ok("store", "file home");
    };
    if is_postgres_url(&url) {
        ok("store", format!("{} (from {from})", redact(&url)))
    } else {
        bad(
            "store",
            format!("{from} is not a postgres:// URL: {}", redact(&url)),
            "set store = \"postgres://user@host/db\" or remove it for the file home",
        )
    }
}

/// The store the daemon would use, and where that was said: `AGENTD_STORE`, else the
/// config's `store`; `None` for the file home.
fn store_url(config: Option<&toml::Table>, env: Option<&str>) -> Option<(String, &'static str)> {
    match env.filter(|s| !s.is_empty()) {
        Some(u) => Some((u.to_string(), "AGENTD_STORE")),
        None => config
            .and_then(|c| c.get("store"))
            .and_then(|v| v.as_str())
            .map(|u| (u.to_string(), "config store")),
    }
}

/// The database store's URL and password file, when the store is a database.
fn database_store(
    config: Option<&toml::Table>,
    env: Option<&str>,
) -> Option<(String, Option<String>)> {
    let (url, _) = store_url(config, env)?;
    if !agentd_proto::store_url::is_postgres_url(&url) {
        return None;
    }
    let password_file = config
        .and_then(|c| c.get("store_password_file"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    Some((url, password_file))
}

/// How long `agentd store check` may take (it gives up connecting after 10 s itself).
const STORE_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Connects to a database store the way the daemon would, through `agentd store
/// check` (which only reads), and reports the server, TLS, the schema and the leases.
async fn check_database(url: &str, password_file: Option<&str>) -> Check {
    use agentd_proto::store_url::redact;
    let bin = daemon::agentd_binary();
    let mut cmd = tokio::process::Command::new(&bin);
    // The URL goes in the environment, never in the arguments: it may hold a
    // password, and other users can read a process's arguments.
    cmd.args(["store", "check"])
        .env("AGENTD_STORE", url)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(f) = password_file {
        cmd.args(["--password-file", f]);
    }
    let out = match tokio::time::timeout(STORE_CHECK_TIMEOUT, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return bad(
                "database",
                format!("cannot run {} store check: {e}", bin.display()),
                "install agentd (see the agentd binary check)",
            )
        }
        Err(_) => {
            return bad(
                "database",
                format!(
                    "{}: no answer within {}s",
                    redact(url),
                    STORE_CHECK_TIMEOUT.as_secs()
                ),
                "check that the server is up and reachable from here",
            )
        }
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if let Some(e) = v.get("error") {
        return bad(
            "database",
            e["message"].as_str().unwrap_or("the check failed").to_string(),
            "check the URL, that the server is up and reachable, the password (URL, PGPASSWORD, store_password_file or ~/.pgpass) and sslmode/sslrootcert (docs/postgresql.md)",
        );
    }
    if !out.status.success() || v.is_null() {
        return bad(
            "database",
            format!("{} store check gave no report", bin.display()),
            "run `agentd store check` (with AGENTD_STORE set) to see why",
        );
    }
    let mut detail = format!(
        "PostgreSQL {}, {}",
        v["server_version"].as_str().unwrap_or("?"),
        if v["tls"] == json!(true) {
            "TLS"
        } else {
            "no TLS"
        }
    );
    let current = v["schema_current"].as_i64().unwrap_or(0);
    match v["schema_version"].as_i64() {
        None => detail.push_str(", no schema yet (the daemon creates it at its first start)"),
        Some(have) if have > current => {
            return bad(
                "database",
                format!("{detail}, schema version {have}, newer than this agentd's {current}"),
                "upgrade agentd on this machine",
            )
        }
        Some(have) => {
            let _ = write!(detail, ", schema {have} of {current}");
            let _ = write!(detail, ", {} sessions", v["sessions"].as_i64().unwrap_or(0));
            let holders: Vec<String> = v["leases"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    format!(
                        "{} ({})",
                        l["host"].as_str().unwrap_or("?"),
                        l["sessions"].as_i64().unwrap_or(0)
                    )
                })
                .collect();
            if holders.is_empty() {
                detail.push_str(", no lease held");
            } else {
                let _ = write!(detail, ", leases held by {}", holders.join(", "));
            }
        }
    }
    ok("database", detail)
}

/// What the kernel offers the command sandbox and the level commands will get, probed
/// by running the agentd binary as the sandbox helper once (docs/sandbox.md#contract).
#[cfg(target_os = "linux")]
fn check_sandbox(found: Option<PathBuf>) -> Check {
    let Some(bin) = found else {
        return bad(
            "sandbox",
            "cannot probe: the agentd binary was not found",
            "install agentd next to agentctl or set AGENTD_BIN",
        );
    };
    let sb = agentd_sandbox::Sandbox::new(bin, agentd_sandbox::Knobs::default());
    let p = sb.probe();
    let detail = format!(
        "level {}: Landlock ABI {}, seccomp {}, user namespaces {}{}, cgroup limits {}",
        p.level,
        p.landlock_abi,
        if p.seccomp { "yes" } else { "no" },
        if p.userns { "yes" } else { "no" },
        p.userns_error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default(),
        p.cgroup
            .as_deref()
            .unwrap_or("none (not root, not delegated)"),
    );
    match p.level.as_str() {
        "full" => ok("sandbox", detail),
        "degraded" => bad(
            "sandbox",
            detail,
            "commands get Landlock + seccomp only; on Ubuntu 24.04 load packaging/apparmor/agentd \
             (apparmor_parser -r) to allow user namespaces for agentd",
        ),
        _ => bad(
            "sandbox",
            detail,
            format!(
                "commands are refused (missing {}): enable Landlock (lsm=landlock) and seccomp, \
                 or set [sandbox] on_unavailable = \"warn\"",
                p.missing.join(", ")
            ),
        ),
    }
}

#[cfg(target_os = "linux")]
fn binary_path() -> Option<PathBuf> {
    let bin = daemon::agentd_binary();
    if bin.components().count() == 1 {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&bin))
                .find(|c| c.is_file())
        })
    } else {
        Some(bin.clone()).filter(|b| b.is_file())
    }
}

fn check_binary() -> Check {
    let bin = daemon::agentd_binary();
    let found = if bin.components().count() == 1 {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&bin))
                .find(|c| c.is_file())
        })
    } else {
        Some(bin.clone()).filter(|b| b.is_file())
    };
    match found {
        Some(p) => ok("agentd binary", p.display().to_string()),
        None => bad(
            "agentd binary",
            format!(
                "{} not found (next to agentctl, AGENTD_BIN, PATH)",
                bin.display()
            ),
            "cargo install --locked --path daemon, or set AGENTD_BIN",
        ),
    }
}

async fn check_service(target: &Target) -> Check {
    let Ok(places) = Places::from_env() else {
        return ok("service", "not checked (HOME or agentd binary not found)");
    };
    let manager = Manager::native();
    match crate::service_status::status(manager, &places, &target.socket).await {
        Ok((v, _)) if v["installed"] == true => {
            let state = match manager {
                Manager::Systemd => format!(
                    "systemd units installed; agentd.socket {}",
                    v["socket_unit"].as_str().unwrap_or("unknown")
                ),
                Manager::Launchd => "launchd agent installed".to_string(),
            };
            if manager == Manager::Systemd
                && v["socket_unit"].as_str().is_some_and(|s| s != "active")
            {
                return bad(
                    "service",
                    state,
                    "systemctl --user enable --now agentd.socket",
                );
            }
            ok("service", state)
        }
        Ok(_) => ok(
            "service",
            "not installed; agentctl starts the daemon on demand (`agentctl service install` for a login service)",
        ),
        Err(e) => ok("service", format!("not checked: {}", e.message)),
    }
}

pub async fn run(target: &Target, human: bool) -> Result<Outcome, AgentError> {
    let mut checks = check_socket(target).await;
    let home = target.effective_home();
    checks.push(private_dir(
        "home",
        "home",
        &home,
        "absent; made when the daemon starts",
    ));
    let config_path = paths::default_config();
    let (mut config_check, config) = check_config(&config_path);
    let mut default = DefaultProvider::from_table(config.as_ref());
    if config_check.ok {
        match check_config_with_daemon(&config_path).await {
            Ok(Some(v)) => {
                if let Some(d) = DefaultProvider::from_check(&v) {
                    default = d;
                }
                if v["exists"] == json!(true) {
                    config_check.detail = format!("{} is valid", config_path.display());
                }
            }
            Ok(None) => {}
            Err(failed) => config_check = failed,
        }
    }
    checks.push(config_check);
    let env_file = Places::from_env()
        .map(|p| p.env_file())
        .unwrap_or_else(|_| {
            std::env::var_os("HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_default()
                .join(".config/agentd/env")
        });
    checks.extend(check_keys(config.as_ref(), &default, &env_file));
    let store_env = std::env::var("AGENTD_STORE").ok();
    checks.push(check_store(config.as_ref(), store_env.as_deref()));
    checks.push(check_binary());
    #[cfg(target_os = "linux")]
    checks.push(check_sandbox(binary_path()));
    if let Some((url, password_file)) = database_store(config.as_ref(), store_env.as_deref()) {
        checks.push(check_database(&url, password_file.as_deref()).await);
    }
    checks.push(check_service(target).await);
    if let Some(cfg) = config.as_ref() {
        let cwd = std::env::current_dir().unwrap_or_else(|_| home.clone());
        for (name, good, detail, fix) in crate::mcp::probe(cfg, &cwd).await {
            let label = format!("mcp:{name}");
            checks.push(match fix {
                Some(f) if !good => bad(label, detail, f),
                _ => ok(label, detail),
            });
        }
    }

    let problems = checks.iter().filter(|c| !c.ok).count();
    let mut text = String::new();
    for c in &checks {
        let _ = writeln!(
            text,
            "{:<5} {}: {}",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        );
        if let Some(f) = &c.fix {
            let _ = writeln!(text, "      fix: {f}");
        }
    }
    let list: Vec<Value> = checks
        .iter()
        .map(|c| json!({"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix}))
        .collect();
    if problems == 0 {
        let _ = writeln!(text, "healthy");
        return Ok(Outcome::Result {
            value: json!({"healthy": true, "checks": list}),
            human: text,
        });
    }
    let _ = writeln!(
        text,
        "{problems} problem{}",
        if problems == 1 { "" } else { "s" }
    );
    // The report goes to stdout in human mode; the error (exit 1) follows on stderr.
    if human {
        output::stdout(&text);
    }
    Err(AgentError::new(
        ErrorKind::Internal,
        format!(
            "doctor found {problems} problem{}",
            if problems == 1 { "" } else { "s" }
        ),
    )
    .with_details(json!({"healthy": false, "checks": list})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_check_never_shows_the_password() {
        let cfg: toml::Table =
            toml::from_str("store = \"postgres://ann:hunter2@db/agentd\"").unwrap();
        let c = check_store(Some(&cfg), None);
        assert!(c.ok);
        assert!(!c.detail.contains("hunter2"), "{}", c.detail);
        assert!(
            c.detail.contains("postgres://ann:***@db/agentd"),
            "{}",
            c.detail
        );
        let c = check_store(Some(&cfg), Some("postgresql://bob:pw@h/x"));
        assert!(c.detail.contains("bob:***@h/x") && c.detail.contains("AGENTD_STORE"));
        let c = check_store(None, Some("mysql://root:pw@h"));
        assert!(!c.ok && !c.detail.contains("pw"), "{}", c.detail);
        assert_eq!(check_store(None, None).detail, "file home");
    }
}
