//! Choosing what a turn runs with: provider, model, context window, permission mode.
//!
//! Provider: the turn's `provider` > the session's (its first event's `provider`:
//! `session_started`, or `session_fork`, which inherits the parent's) > the
//! config's `default_provider` (a `script:PATH` model picks the `script` provider when
//! the turn names none). Model: the turn's `model` > the session's > the provider
//! config's `model`. A turn whose model is `script:…` ignores the session's provider, so
//! a script can drive any session. A model `NAME:MODEL` whose `NAME` is a provider the
//! daemon knows names both (`ProvidersConfig::split_model`), for every client alike.
//!
//! Permission mode and `max_iterations`: the turn's, else the config's `[turns]`
//! (defaults `auto` and 16).

use super::permission::PermissionMode;
use super::MAX_MAX_ITERATIONS;
use crate::config::Config;
use crate::provider::{Provider, ProvidersConfig};
use crate::registry::Registry;
use crate::session::SessionHandle;
use agentd_proto::rpc::TurnParams;
use agentd_proto::{AgentError, ErrorKind};
use serde_json::json;

/// Context window assumed when the provider config declares none.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

pub struct TurnSpec {
    pub provider: Provider,
    /// Model name sent to the provider; empty means the provider config's.
    pub request_model: String,
    /// Model name recorded in `turn_started`, `provider_usage` and `reasoning`, and
    /// matched when reasoning is replayed.
    pub model: String,
    pub context_window: u64,
    pub permission_mode: PermissionMode,
    pub max_iterations: u32,
    /// Env vars removed from `shell` commands: every provider's `api_key_env`.
    pub env_remove: Vec<String>,
    /// The values of those variables (the keys themselves), scrubbed from everything
    /// the turn records.
    pub secrets: Vec<String>,
    /// The session's and this turn's `sandbox: {mode?, network?}` (docs/sandbox.md#contract).
    pub sandbox_session: agentd_sandbox::SandboxRequest,
    pub sandbox_turn: agentd_sandbox::SandboxRequest,
    /// The turn's `reasoning_effort`, else the provider config's (checked).
    pub reasoning_effort: Option<String>,
    /// The prompt's images, checked and read (`super::images`).
    pub images: Vec<super::images::Prepared>,
    /// The references of images stored when the turn was queued (`turn_queued`'s
    /// `params.images`), recorded by its `user_message` as they are.
    pub stored_images: Option<serde_json::Value>,
}

impl TurnSpec {
    pub fn provider_name(&self) -> &str {
        self.provider.name()
    }
}

/// The `[providers.*]` part of the daemon config.
pub fn providers_config(config: &Config) -> ProvidersConfig {
    config.providers_config()
}

/// The provider and model for a call, with the session's own choices as fallbacks.
pub fn provider_for(
    config: &Config,
    provider: Option<&str>,
    model: Option<&str>,
) -> Result<(Provider, String, String, u64), AgentError> {
    let providers = providers_config(config);
    let pc = providers.resolve(provider, model)?;
    let request_model = model.unwrap_or("").to_string();
    let context_window = pc.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW).max(1);
    let provider = Provider::new(pc)?;
    let label = provider
        .effective_model(&request_model)
        .unwrap_or_else(|| provider.name().to_string());
    Ok((provider, request_model, label, context_window))
}

/// The session's `{provider, model}`, read off its first event whatever its type
/// (`session_started`, or a fork's `session_fork`).
/// The session's `sandbox` request, read off its `session_started`.
pub async fn session_sandbox(
    h: &SessionHandle,
) -> Result<agentd_sandbox::SandboxRequest, AgentError> {
    h.query(|st| {
        st.events
            .first()
            .map(|e| e.event())
            .and_then(|e| e.data.get("sandbox").cloned())
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    })
    .await
}

/// Whether the session's workspace is the user's home directory.
pub async fn workspace_is_home(h: &SessionHandle) -> Result<bool, AgentError> {
    let ws = h
        .query(|st| {
            st.events
                .first()
                .map(|e| e.event())
                .and_then(|e| e.str_field("workspace").map(std::path::PathBuf::from))
        })
        .await?;
    Ok(ws.is_some_and(|w| is_home(&w)))
}

/// `dir` is `$HOME` (both canonical).
pub fn is_home(dir: &std::path::Path) -> bool {
    let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) else {
        return false;
    };
    let canon = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    canon(&home) == canon(dir)
}

pub async fn session_choice(
    h: &SessionHandle,
) -> Result<(Option<String>, Option<String>), AgentError> {
    h.query(|st| {
        let first = st.events.first().map(|e| e.event());
        let get = |k: &str| {
            first
                .as_ref()
                .and_then(|e| e.str_field(k))
                .map(str::to_string)
        };
        (get("provider"), get("model"))
    })
    .await
}

/// Every provider's `api_key_env`, removed from commands' environment, and those
/// variables' values, scrubbed from what is recorded. Read per call, like the providers
/// read their key per call.
pub fn provider_secrets(providers: &ProvidersConfig) -> (Vec<String>, Vec<String>) {
    let env_remove: Vec<String> = providers
        .all()
        .values()
        .filter_map(|c| c.api_key_env.clone())
        .collect();
    let secrets = env_remove
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .filter(|v| v.len() >= crate::tools::MIN_SECRET_LEN)
        .collect();
    (env_remove, secrets)
}

pub async fn resolve(
    registry: &Registry,
    h: &SessionHandle,
    p: &TurnParams,
) -> Result<TurnSpec, AgentError> {
    let turns = &registry.config.turns;
    let permission_mode =
        PermissionMode::parse(p.permission_mode.as_deref())?.unwrap_or(turns.permission_mode);
    // A workspace that is $HOME makes every dotfile the user's tools read writable:
    // `auto` mode is refused there unless the config forces it (docs/sandbox.md#a-workspace-that-is-home).
    if permission_mode == PermissionMode::Auto
        && !registry.config.sandbox.allow_auto_in_home
        && workspace_is_home(h).await?
    {
        return Err(AgentError::new(
            ErrorKind::PermissionDenied,
            "this session's workspace is your home directory: `auto` permission mode is \
             refused there (every dotfile your shell, editor and git read would be \
             writable); use `ask` or `read_only`, open a project directory instead, or set \
             [sandbox] allow_auto_in_home = true",
        )
        .with_details(json!({"field": "permission_mode", "reason": "workspace_is_home"})));
    }
    let sandbox_turn = crate::tools::sandboxing::parse_request(p.sandbox.as_ref())?;
    let sandbox_session = session_sandbox(h).await?;
    let max_iterations = p.max_iterations.unwrap_or(turns.max_iterations);
    if max_iterations == 0 || max_iterations > MAX_MAX_ITERATIONS {
        return Err(AgentError::invalid_args(format!(
            "max_iterations must be 1..={MAX_MAX_ITERATIONS}"
        )));
    }
    if let Some(e) = &p.reasoning_effort {
        agentd_proto::rpc::validate_reasoning_effort(e)?;
    }
    if p.input.trim().is_empty() {
        return Err(AgentError::invalid_args("input must not be empty"));
    }
    let images = if p.images.is_empty() {
        Vec::new()
    } else {
        let ws = h.query(|st| st.workspace().to_string()).await?;
        let list = p.images.clone();
        crate::filesystem::blocking(move || {
            super::images::prepare(&list, std::path::Path::new(&ws))
        })
        .await??
    };
    let providers = providers_config(&registry.config);
    let (s_provider, s_model) = session_choice(h).await?;
    let (s_provider, s_model) = providers.split_model(s_provider.as_deref(), s_model.as_deref());
    let (t_provider, t_model) = providers.split_model(p.provider.as_deref(), p.model.as_deref());
    let turn_script = t_model.as_deref().is_some_and(|m| m.starts_with("script:"));
    let provider_name = match (t_provider, turn_script) {
        (Some(n), _) => Some(n),
        (None, true) => None,
        (None, false) => s_provider,
    };
    let model = t_model.or(s_model);
    let (provider, request_model, label, context_window) =
        provider_for(&registry.config, provider_name.as_deref(), model.as_deref())?;
    if !images.is_empty() && !provider.config().takes_images() {
        return Err(AgentError::invalid_args(format!(
            "provider `{}` takes no images (`images = false` in its config)",
            provider.name()
        ))
        .with_details(json!({"field": "images", "provider": provider.name()})));
    }
    // Before anything is recorded: a turn that cannot reach its provider leaves no
    // `turn_started` behind.
    crate::provider::preflight::check(
        provider.config(),
        &request_model,
        registry.config.path.as_deref(),
        &crate::provider::preflight::env_has,
    )?;
    let reasoning_effort = p
        .reasoning_effort
        .clone()
        .or_else(|| provider.config().reasoning_effort.clone());
    if let Some(e) = &reasoning_effort {
        agentd_proto::rpc::validate_reasoning_effort(e).map_err(|e| {
            AgentError::invalid_args(format!("provider `{}`: {}", provider.name(), e.message))
        })?;
    }
    let (env_remove, secrets) = provider_secrets(&providers);
    Ok(TurnSpec {
        provider,
        request_model,
        model: label,
        context_window,
        permission_mode,
        max_iterations,
        env_remove,
        secrets,
        sandbox_session,
        sandbox_turn,
        reasoning_effort,
        images,
        stored_images: None,
    })
}
