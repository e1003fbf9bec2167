//! Provider configuration: the `[providers.NAME]` tables of `config.toml` plus the
//! built-in providers every install has, so a fresh daemon can talk to OpenAI,
//! Anthropic, a local Ollama, or replay a script without any config file.
//!
//! ```toml
//! # Used when a turn names neither a provider nor a `script:PATH` model.
//! default_provider = "openai"
//!
//! [providers.openai]                 # replaces the built-in `openai` entry wholesale
//! kind = "openai-responses"          # openai-responses | openai-chat | anthropic | script
//! base_url = "https://api.openai.com/v1"
//! api_key_env = "OPENAI_API_KEY"     # the NAME of an env var; the key is read per call
//! model = "gpt-5-mini"               # used when the turn names no model
//! models = ["gpt-5", "gpt-5-nano"]   # more models clients may offer (ACP's model
//!                                    # picker, `agentd/models`); optional
//! list_models = true                 # `agentd/models` also lists the provider's
//!                                    # /v1/models (cached 10 min; default false)
//! context_window = 400000            # tokens; reported in provider_usage
//! idle_timeout_s = 120               # no byte for this long → `timeout` (default 120)
//! timeout_s = 900                    # whole call limit → `timeout` (default: none)
//! max_retries = 2                    # retries of network errors, 429 and 5xx (default 2,
//!                                    # at most 10)
//! max_output_tokens = 8192           # default cap when the turn gives none
//! reasoning_effort = "medium"        # minimal|low|medium|high: the turns' default level
//!                                    # (Responses `reasoning.effort`, Chat
//!                                    # `reasoning_effort`, Anthropic thinking budget)
//!
//! [providers.local]
//! kind = "openai-chat"
//! base_url = "http://localhost:8080/v1"
//!
//! [providers.demo]
//! kind = "script"
//! script = "/path/to/script.json"    # see examples/README.md
//! ```
//!
//! A table whose name matches a built-in (`script`, `openai`, `ollama`, `anthropic`)
//! replaces it; unknown keys are refused so that a typo (`api_key = "sk-…"`) fails loudly
//! instead of being ignored. API keys themselves never appear in config, Logs or errors:
//! only the env var's name does.

use agentd_proto::AgentError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Env var consulted by the `script` provider when neither the request model
/// (`script:PATH`) nor the config names a script file.
pub const SCRIPT_ENV: &str = "AGENTD_SCRIPT";

/// Models the built-in providers use when neither the turn, the session nor a config
/// table names one, so that a key in the environment is all a first run needs.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-5-mini";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
pub const DEFAULT_OLLAMA_MODEL: &str = "llama3.2";

pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 120;
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// A configured `max_retries` above this is clamped: with the 8 s backoff cap, ten
/// retries already wait over a minute, and more only hides a dead provider.
pub const MAX_MAX_RETRIES: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    OpenaiResponses,
    OpenaiChat,
    Anthropic,
    Script,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenaiResponses => "openai-responses",
            ProviderKind::OpenaiChat => "openai-chat",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Script => "script",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The table name; filled from the `[providers.NAME]` key (not a key of the table).
    #[serde(default, skip_deserializing)]
    pub name: String,
    pub kind: ProviderKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// More models of this provider that clients may offer (`agentd/models`); a turn
    /// still names its model, these are only choices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Whether the `apply_patch` tool is offered (default: to Responses models and the
    /// script provider only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_patch: Option<bool>,
    /// Whether `agentd/models` also lists what the provider's own models endpoint
    /// returns (cached for ten minutes; default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_models: Option<bool>,
    /// Whether the provider's models take images (default true): with `false`, a turn
    /// with images is refused and earlier images (prompts', `read_file`'s, MCP tools')
    /// are sent as their description lines, for a text-only model behind a Chat
    /// Completions server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
}

impl ProviderConfig {
    /// A config of `kind` with every optional field unset.
    pub fn new(name: impl Into<String>, kind: ProviderKind) -> Self {
        ProviderConfig {
            name: name.into(),
            kind,
            base_url: None,
            api_key_env: None,
            model: None,
            models: Vec::new(),
            context_window: None,
            script: None,
            timeout_s: None,
            idle_timeout_s: None,
            max_retries: None,
            max_output_tokens: None,
            reasoning_effort: None,
            apply_patch: None,
            list_models: None,
            images: None,
        }
    }

    /// Whether requests to this provider may carry images.
    pub fn takes_images(&self) -> bool {
        self.images.unwrap_or(true)
    }

    /// Whether turns offer this provider's models the `apply_patch` tool.
    pub fn offers_apply_patch(&self) -> bool {
        self.apply_patch.unwrap_or(matches!(
            self.kind,
            ProviderKind::OpenaiResponses | ProviderKind::Script
        ))
    }

    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.idle_timeout_s.unwrap_or(DEFAULT_IDLE_TIMEOUT_S))
    }

    pub fn max_retries(&self) -> u32 {
        self.max_retries
            .unwrap_or(DEFAULT_MAX_RETRIES)
            .min(MAX_MAX_RETRIES)
    }

    /// The base URL, or the kind's public default.
    pub fn base_url(&self) -> String {
        let url = match (&self.base_url, self.kind) {
            (Some(u), _) => u.clone(),
            (None, ProviderKind::OpenaiResponses) => "https://api.openai.com/v1".into(),
            (None, ProviderKind::OpenaiChat) => "http://localhost:11434/v1".into(),
            (None, ProviderKind::Anthropic) => "https://api.anthropic.com".into(),
            (None, ProviderKind::Script) => String::new(),
        };
        url.trim_end_matches('/').to_string()
    }
}

/// Every provider the daemon knows: config tables over built-ins.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvidersConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_provider: Option<String>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
}

impl ProvidersConfig {
    /// Sets each entry's `name` from its table key (serde cannot see the key).
    pub fn fill_names(&mut self) {
        for (key, p) in self.providers.iter_mut() {
            p.name = key.clone();
        }
    }

    /// The built-in providers, present even without a config file.
    pub fn builtins() -> BTreeMap<String, ProviderConfig> {
        let mut m = BTreeMap::new();
        m.insert(
            "script".to_string(),
            ProviderConfig::new("script", ProviderKind::Script),
        );
        let mut openai = ProviderConfig::new("openai", ProviderKind::OpenaiResponses);
        openai.base_url = Some("https://api.openai.com/v1".into());
        openai.api_key_env = Some("OPENAI_API_KEY".into());
        openai.model = Some(DEFAULT_OPENAI_MODEL.into());
        openai.context_window = Some(400_000);
        m.insert("openai".to_string(), openai);
        let mut ollama = ProviderConfig::new("ollama", ProviderKind::OpenaiChat);
        ollama.base_url = Some("http://localhost:11434/v1".into());
        ollama.model = Some(DEFAULT_OLLAMA_MODEL.into());
        m.insert("ollama".to_string(), ollama);
        let mut anthropic = ProviderConfig::new("anthropic", ProviderKind::Anthropic);
        anthropic.base_url = Some("https://api.anthropic.com".into());
        anthropic.api_key_env = Some("ANTHROPIC_API_KEY".into());
        anthropic.model = Some(DEFAULT_ANTHROPIC_MODEL.into());
        anthropic.context_window = Some(200_000);
        m.insert("anthropic".to_string(), anthropic);
        m
    }

    /// All providers by name: config tables win over built-ins of the same name.
    pub fn all(&self) -> BTreeMap<String, ProviderConfig> {
        let mut m = Self::builtins();
        for (k, v) in &self.providers {
            let mut v = v.clone();
            v.name = k.clone();
            m.insert(k.clone(), v);
        }
        m
    }

    pub fn get(&self, name: &str) -> Option<ProviderConfig> {
        self.all().remove(name)
    }

    /// The models a client may offer, as `(provider, model, source)` in this order: each
    /// configured table's `model` (`"model"`), then every entry of its `models` list
    /// (`"models"`), then the default model of each built-in provider that is not
    /// configured and whose key variable is set (`"builtin"`; keyless built-ins such as
    /// `ollama` and `script` are left out, since nothing says they are reachable).
    /// Duplicates are dropped; `key_present` is injected like in `preflight::check`.
    pub fn choices(
        &self,
        key_present: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, String, &'static str)> {
        let mut out: Vec<(String, String, &'static str)> = Vec::new();
        let mut push = |p: &str, m: &str, src: &'static str| {
            let m = m.trim();
            if !m.is_empty() && !out.iter().any(|(op, om, _)| op == p && om == m) {
                out.push((p.to_string(), m.to_string(), src));
            }
        };
        for (name, pc) in &self.providers {
            if let Some(m) = &pc.model {
                push(name, m, "model");
            }
        }
        for (name, pc) in &self.providers {
            for m in &pc.models {
                push(name, m, "models");
            }
        }
        for (name, pc) in Self::builtins() {
            if self.providers.contains_key(&name) {
                continue;
            }
            let keyed = pc.api_key_env.as_deref().is_some_and(key_present);
            if let (true, Some(m)) = (keyed, &pc.model) {
                push(&name, m, "builtin");
            }
        }
        out
    }

    /// A request's `provider` and `model`, with a model written `NAME:MODEL` split when
    /// `NAME` is a provider the daemon knows: `anthropic:claude-sonnet-4-5` is the
    /// `anthropic` provider's `claude-sonnet-4-5`, whichever client sent it. The split only
    /// happens when the request names no provider or the same one (an explicit provider
    /// wins, and the colon is then part of the model's name, as in Ollama's
    /// `qwen2.5-coder:14b`); `script:PATH` stays a model for the `script` provider.
    pub fn split_model(
        &self,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> (Option<String>, Option<String>) {
        let keep = (provider.map(str::to_string), model.map(str::to_string));
        let Some(m) = model.filter(|m| !m.starts_with("script:")) else {
            return keep;
        };
        match m.split_once(':') {
            Some((p, rest))
                if !rest.is_empty()
                    && provider.is_none_or(|given| given == p)
                    && self.get(p).is_some() =>
            {
                (Some(p.to_string()), Some(rest.to_string()))
            }
            _ => keep,
        }
    }

    /// Picks the provider for a turn: the explicit name; else `script` when the model is
    /// `script:PATH`; else `default_provider`; else `openai`.
    pub fn resolve(
        &self,
        name: Option<&str>,
        model: Option<&str>,
    ) -> Result<ProviderConfig, AgentError> {
        let chosen = match name {
            Some(n) => n.to_string(),
            None if model.is_some_and(|m| m.starts_with("script:")) => "script".to_string(),
            None => self
                .default_provider
                .clone()
                .unwrap_or_else(|| "openai".to_string()),
        };
        self.get(&chosen).ok_or_else(|| {
            let known: Vec<String> = self.all().into_keys().collect();
            AgentError::invalid_args(format!(
                "unknown provider '{}'; known providers: {}",
                agentd_base::text::clip_chars(&chosen, 64),
                known.join(", ")
            ))
            .with_details(serde_json::json!({"known": known}))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provider part of a whole `config.toml` (the daemon's `Config::parse` reads
    /// the real file, other keys included).
    fn from_toml_str(text: &str) -> Result<ProvidersConfig, AgentError> {
        #[derive(Deserialize)]
        struct Outer {
            #[serde(default)]
            default_provider: Option<String>,
            #[serde(default)]
            providers: BTreeMap<String, ProviderConfig>,
        }
        let outer: Outer =
            toml::from_str(text).map_err(|e| AgentError::invalid_args(e.message().to_string()))?;
        let mut cfg = ProvidersConfig {
            default_provider: outer.default_provider,
            providers: outer.providers,
        };
        cfg.fill_names();
        Ok(cfg)
    }

    #[test]
    fn parses_tables_and_overrides_builtins() {
        let text = r#"
default_provider = "local"
durability = "sync"

[providers.local]
kind = "openai-chat"
base_url = "http://127.0.0.1:8080/v1/"
idle_timeout_s = 5

[providers.openai]
kind = "openai-responses"
api_key_env = "MY_KEY"
model = "gpt-x"
"#;
        let cfg = from_toml_str(text).unwrap();
        let local = cfg.resolve(None, None).unwrap();
        assert_eq!(local.name, "local");
        assert_eq!(local.kind, ProviderKind::OpenaiChat);
        assert_eq!(local.base_url(), "http://127.0.0.1:8080/v1");
        assert_eq!(local.idle_timeout().as_secs(), 5);
        let openai = cfg.get("openai").unwrap();
        assert_eq!(openai.api_key_env.as_deref(), Some("MY_KEY"));
        assert_eq!(openai.max_retries(), 2);
        let mut many = openai.clone();
        many.max_retries = Some(u32::MAX);
        assert_eq!(many.max_retries(), MAX_MAX_RETRIES);
        assert!(cfg.get("anthropic").is_some());
        assert_eq!(
            cfg.resolve(None, Some("script:x.json")).unwrap().kind,
            ProviderKind::Script
        );
    }

    #[test]
    fn choices_list_configured_models_then_keyed_builtins() {
        let text = r#"
[providers.local]
kind = "openai-chat"
model = "qwen"
models = ["llama", "qwen", " "]

[providers.work]
kind = "anthropic"
api_key_env = "WORK_KEY"
models = ["claude-a"]
"#;
        let cfg = from_toml_str(text).unwrap();
        let got: Vec<(String, String, &str)> = cfg.choices(&|v| v == "ANTHROPIC_API_KEY");
        let want = [
            ("local", "qwen", "model"),
            ("local", "llama", "models"),
            ("work", "claude-a", "models"),
            ("anthropic", DEFAULT_ANTHROPIC_MODEL, "builtin"),
        ];
        let got: Vec<(&str, &str, &str)> = got
            .iter()
            .map(|(p, m, s)| (p.as_str(), m.as_str(), *s))
            .collect();
        assert_eq!(got, want);
        // No key set, no config: nothing to offer.
        assert!(ProvidersConfig::default().choices(&|_| false).is_empty());
        // A configured built-in name is offered from its table, not as a built-in.
        let cfg =
            from_toml_str("[providers.openai]\nkind = \"openai-responses\"\nmodel = \"gpt-x\"\n")
                .unwrap();
        let got = cfg.choices(&|_| true);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str(), got[0].2),
            ("openai", "gpt-x", "model")
        );
        assert_eq!(got[1].0, "anthropic");
    }

    #[test]
    fn provider_colon_model_names_both_when_the_provider_is_known() {
        let cfg = from_toml_str("[providers.local]\nkind = \"openai-chat\"\n").unwrap();
        let split = |p: Option<&str>, m: Option<&str>| cfg.split_model(p, m);
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            split(None, Some("anthropic:claude-x")),
            (s("anthropic"), s("claude-x"))
        );
        // A model name with a colon of its own stays whole.
        assert_eq!(
            split(None, Some("local:qwen2.5-coder:14b")),
            (s("local"), s("qwen2.5-coder:14b"))
        );
        assert_eq!(
            split(None, Some("qwen2.5-coder:14b")),
            (None, s("qwen2.5-coder:14b"))
        );
        // An explicit provider wins; the same one is stripped.
        assert_eq!(
            split(Some("local"), Some("anthropic:claude-x")),
            (s("local"), s("anthropic:claude-x"))
        );
        assert_eq!(
            split(Some("anthropic"), Some("anthropic:claude-x")),
            (s("anthropic"), s("claude-x"))
        );
        assert_eq!(
            split(None, Some("script:/tmp/s.json")),
            (None, s("script:/tmp/s.json"))
        );
        assert_eq!(split(None, Some("openai:")), (None, s("openai:")));
    }

    #[test]
    fn refuses_unknown_keys_and_unknown_providers() {
        let err = from_toml_str("[providers.x]\nkind = \"anthropic\"\napi_key = \"sk-secret\"\n")
            .unwrap_err();
        assert_eq!(err.kind, agentd_proto::ErrorKind::InvalidArgs);
        assert!(err.message.contains("api_key"), "{}", err.message);
        assert!(!err.message.contains("sk-secret"), "{}", err.message);
        let err = ProvidersConfig::default()
            .resolve(Some("nope"), None)
            .unwrap_err();
        assert!(err.message.contains("unknown provider 'nope'"));
        assert_eq!(
            ProvidersConfig::default().resolve(None, None).unwrap().name,
            "openai"
        );
    }
}
