//! Checks that a turn could start before anything is created or recorded: the provider
//! is known, a model is chosen, and the provider's API key is in the daemon's
//! environment. `agentctl run` asks first (through `agentd/preflight`) so a first run
//! without a key leaves no empty session behind, and `agentd/turn` checks before
//! `turn_started`, so a turn that cannot reach its provider records nothing.
//!
//! Errors name the environment variable and the config file to edit, never a key's value.

use super::{ProviderConfig, ProviderKind};
use agentd_proto::AgentError;
use serde_json::json;
use std::path::Path;
use std::sync::OnceLock;

/// The service manager that started this daemon (`systemd` or `launchd`), if one did.
static SERVICE: OnceLock<&'static str> = OnceLock::new();

/// Called once by a daemon a service manager started: missing-key hints then name the
/// service's environment file instead of the shell's environment.
pub fn set_service_manager(manager: &'static str) {
    let _ = SERVICE.set(manager);
}

/// The service's provider-key file, as its unit names it (`agentctl service install`).
pub const SERVICE_ENV_FILE: &str = "~/.config/agentd/env";

/// How to give this daemon the key variable `var`: a sentence and the commands. A
/// daemon started by `agentctl` reads the environment of the command that started it;
/// one started by systemd or launchd reads [`SERVICE_ENV_FILE`].
pub fn key_fix(var: &str) -> (String, Vec<String>) {
    match SERVICE.get() {
        Some(m) => {
            let restart = if *m == "launchd" {
                "launchctl kickstart -k gui/$(id -u)/dev.agentd"
            } else {
                "systemctl --user restart agentd"
            };
            (
                format!(
                    "add {var}=… to {SERVICE_ENV_FILE} (this daemon was started by {m} and reads its keys there), then run `{restart}`"
                ),
                vec![
                    format!("echo '{var}=…' >> {SERVICE_ENV_FILE}"),
                    restart.to_string(),
                ],
            )
        }
        None => (
            format!(
                "set {var} in the daemon's environment (`export {var}=…`, then `agentctl daemon stop`; the next agentctl command starts a daemon that sees it; a daemon run by `agentctl service install` reads {SERVICE_ENV_FILE} instead)"
            ),
            vec![format!("export {var}=…"), "agentctl daemon stop".to_string()],
        ),
    }
}

/// What a turn would run with.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    pub provider: String,
    pub kind: ProviderKind,
    /// Empty for `script` (it reads a file, not a model).
    pub model: String,
    pub api_key_env: Option<String>,
}

fn config_hint(config_file: Option<&Path>) -> String {
    match config_file {
        Some(p) => p.display().to_string(),
        None => "config.toml".to_string(),
    }
}

/// Checks `pc` with the model the turn asks for (`requested`, possibly empty).
/// `key_present` reports whether an env var holds a non-empty value (injected so that
/// tests need not touch the process environment).
pub fn check(
    pc: &ProviderConfig,
    requested: &str,
    config_file: Option<&Path>,
    key_present: &dyn Fn(&str) -> bool,
) -> Result<Ready, AgentError> {
    let file = config_hint(config_file);
    let model = if requested.is_empty() {
        pc.model.clone().unwrap_or_default()
    } else {
        requested.to_string()
    };
    if pc.kind != ProviderKind::Script && model.is_empty() {
        return Err(AgentError::invalid_args(format!(
            "provider '{}' needs a model: pass --model, or set `model` in [providers.{}] of {file}",
            pc.name, pc.name
        ))
        .with_details(json!({"provider": pc.name, "config_path": file}))
        .with_next_actions(&["agentctl config init"]));
    }
    if let Some(var) = pc.api_key_env.as_deref() {
        if !key_present(var) {
            let (fix, mut actions) = key_fix(var);
            actions.push("agentctl config init".to_string());
            let actions: Vec<&str> = actions.iter().map(String::as_str).collect();
            return Err(AgentError::invalid_args(format!(
                "provider '{}' needs an API key: {fix}; or choose another provider with --provider or `default_provider` in {file}",
                pc.name
            ))
            .with_details(json!({"provider": pc.name, "api_key_env": var, "config_path": file}))
            .with_next_actions(&actions));
        }
    }
    Ok(Ready {
        provider: pc.name.clone(),
        kind: pc.kind,
        model: if pc.kind == ProviderKind::Script && requested.is_empty() {
            String::new()
        } else {
            model
        },
        api_key_env: pc.api_key_env.clone(),
    })
}

/// The daemon's view: a variable is present when it is set and not blank.
pub fn env_has(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProvidersConfig;

    #[test]
    fn builtins_have_models_and_keys_are_checked_by_name() {
        let all = ProvidersConfig::default();
        let openai = all.get("openai").unwrap();
        let file = Path::new("/cfg/agentd/config.toml");
        let ok = check(&openai, "", Some(file), &|v| v == "OPENAI_API_KEY").unwrap();
        assert_eq!(ok.model, super::super::config::DEFAULT_OPENAI_MODEL);
        let err = check(&openai, "", Some(file), &|_| false).unwrap_err();
        assert_eq!(err.kind, agentd_proto::ErrorKind::InvalidArgs);
        assert!(err.message.contains("OPENAI_API_KEY"), "{}", err.message);
        assert!(
            err.message.contains("/cfg/agentd/config.toml"),
            "{}",
            err.message
        );
        assert!(all.get("anthropic").unwrap().model.is_some());
        assert!(all.get("ollama").unwrap().model.is_some());
        // A config table without a model, and no model asked for.
        let mut bare = openai.clone();
        bare.model = None;
        let err = check(&bare, "", None, &|_| true).unwrap_err();
        assert!(err.message.contains("needs a model"), "{}", err.message);
        assert_eq!(check(&bare, "m1", None, &|_| true).unwrap().model, "m1");
        // A script needs neither.
        let script = all.get("script").unwrap();
        assert_eq!(check(&script, "", None, &|_| false).unwrap().model, "");
    }
}
