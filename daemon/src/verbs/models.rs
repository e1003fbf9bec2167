//! `agentd/models` (docs/turns-and-providers.md#listing-models): the models a client may
//! offer. The configured ones ([`ProvidersConfig::choices`], the daemon's environment
//! deciding which built-ins have their key), then, for each provider with
//! `list_models = true`, what its own models endpoint lists, kept for ten minutes. A
//! listing that fails adds nothing and says why in `listings`; the configured models are
//! offered either way, and a failure is not kept, so the next call asks again.
//!
//! [`ProvidersConfig::choices`]: crate::provider::ProvidersConfig::choices

use crate::registry::Registry;
use agentd_proto::rpc::{ModelChoice, ModelListing, ModelsParams, ModelsResult};
use agentd_proto::AgentError;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a listing is kept.
pub const CACHE_TTL: Duration = Duration::from_secs(600);
/// How long one listing may take before it counts as failed.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Listings by provider (name, kind, base URL and key variable: a different table is a
/// different entry): when fetched and the ids.
type Cache = HashMap<String, (Instant, Vec<String>)>;

fn cache() -> &'static Mutex<Cache> {
    static CACHE: std::sync::OnceLock<Mutex<Cache>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn cache_key(p: &crate::provider::ProviderConfig) -> String {
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{}",
        p.name,
        p.kind.as_str(),
        p.base_url(),
        p.api_key_env.as_deref().unwrap_or("")
    )
}

pub async fn models(registry: &Registry, p: ModelsParams) -> Result<ModelsResult, AgentError> {
    let providers = registry.config.providers_config();
    let mut models: Vec<ModelChoice> = providers
        .choices(&crate::provider::preflight::env_has)
        .into_iter()
        .map(|(provider, model, source)| ModelChoice {
            provider,
            model,
            source: source.to_string(),
        })
        .collect();
    let listed: Vec<_> = providers
        .all()
        .into_values()
        .filter(|c| c.list_models == Some(true))
        .collect();
    // Every listing at once: one slow provider costs its own timeout, not the sum.
    let fetches = listed.iter().map(|cfg| async move {
        let key = cache_key(cfg);
        if !p.refresh {
            let hit = cache()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .filter(|(at, _)| at.elapsed() < CACHE_TTL)
                .cloned();
            if let Some((at, ids)) = hit {
                return (cfg.name.clone(), Ok(ids), at.elapsed().as_secs());
            }
        }
        let got = crate::provider::models::list(cfg, LIST_TIMEOUT).await;
        if let Ok(ids) = &got {
            cache()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, (Instant::now(), ids.clone()));
        }
        (cfg.name.clone(), got, 0)
    });
    let mut listings = Vec::new();
    for (provider, got, age_s) in futures::future::join_all(fetches).await {
        match got {
            Ok(ids) => {
                listings.push(ModelListing {
                    provider: provider.clone(),
                    count: ids.len(),
                    age_s,
                    error: None,
                });
                for m in ids {
                    if !models
                        .iter()
                        .any(|c| c.provider == provider && c.model == m)
                    {
                        models.push(ModelChoice {
                            provider: provider.clone(),
                            model: m,
                            source: "listed".into(),
                        });
                    }
                }
            }
            Err(why) => listings.push(ModelListing {
                provider,
                count: 0,
                age_s,
                error: Some(why),
            }),
        }
    }
    Ok(ModelsResult {
        models,
        providers: providers.all().into_keys().collect(),
        listings,
    })
}
