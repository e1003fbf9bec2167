//! Session verbs (docs/sessions-and-history.md#session-verbs): rename, archive/unarchive, delete/restore, search, export,
//! usage, the provider preflight `agentctl run` asks before creating a session, and the
//! models a client may offer (`agentd/models`).
//!
//! A layer above the core: it uses the registry, session actors and the store, and
//! nothing below imports it. The daemon merges [`methods`] into the native API's method
//! table. Module map: `manage` (rename, archive, delete, restore, preflight), `models`, `export`
//! (pure Markdown/HTML renderers of a Log), `search` (parallel scan of raw Log bytes),
//! `usage` (token and cost totals from `provider_usage` events); `agentd/import_discover`
//! is served from `crate::imports`.
//!
//! Decisions:
//! - Titles and the archive flag are `session_info` events (`title`, `labels`), so the
//!   Log stays the only truth; the lineage index picks them up as they are appended and
//!   at startup from each Log's last `session_info`.
//! - Delete moves the Log, then the session's directory, to `<home>/trash/`; the Log's
//!   move is the commit point. The session's actor does the move and retires, so no
//!   append can land in between or after.

pub mod export;
pub mod manage;
pub mod models;
pub mod search;
pub mod usage;

use crate::register::to_value;
use crate::registry::Registry;
use agentd_proto::rpc::method as m;
use agentd_proto::AgentError;
use jsonrpsee::{Methods, RpcModule};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;

/// What the verbs reach: the sessions, and the running turns (delete refuses during one).
pub struct Ctx {
    pub registry: Arc<Registry>,
    pub turns: Arc<crate::turn::TurnManager>,
}

/// Registers a verb whose params parse into `P` and that needs only the sessions.
fn method<P, F, Fut>(module: &mut RpcModule<Ctx>, name: &'static str, f: F)
where
    P: DeserializeOwned + Send + 'static,
    F: Fn(Arc<Registry>, P) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, AgentError>> + Send + 'static,
{
    crate::register::method(module, name, move |ctx: Arc<Ctx>, p, _| {
        f(Arc::clone(&ctx.registry), p)
    });
}

/// The verbs' methods, to merge into the native API.
pub fn methods(registry: Arc<Registry>, turns: Arc<crate::turn::TurnManager>) -> Methods {
    let mut module = RpcModule::new(Ctx { registry, turns });
    method(&mut module, m::RENAME, |r, p| async move {
        to_value(manage::rename(&r, p).await?)
    });
    method(
        &mut module,
        m::ARCHIVE,
        |r, p: agentd_proto::rpc::SessionParams| async move {
            to_value(manage::set_archived(&r, &p.session_id, true).await?)
        },
    );
    method(
        &mut module,
        m::UNARCHIVE,
        |r, p: agentd_proto::rpc::SessionParams| async move {
            to_value(manage::set_archived(&r, &p.session_id, false).await?)
        },
    );
    crate::register::method(&mut module, m::DELETE, |ctx: Arc<Ctx>, p, _| async move {
        to_value(manage::delete(&ctx.registry, &ctx.turns, p).await?)
    });
    method(
        &mut module,
        m::RESTORE,
        |r, p: agentd_proto::rpc::SessionParams| async move {
            to_value(manage::restore(&r, &p.session_id).await?)
        },
    );
    method(&mut module, m::PREFLIGHT, |r, p| async move {
        to_value(manage::preflight(&r, p)?)
    });
    method(&mut module, m::INSTRUCTIONS, |r, p| async move {
        crate::turn::instructions::show(&r, p).await
    });
    method(
        &mut module,
        m::HOOKS,
        |r, p: agentd_proto::rpc::HooksParams| async move {
            let (cfg, home) = (r.config.hooks.clone(), r.home.root().to_path_buf());
            crate::filesystem::blocking(move || crate::hooks::show(&cfg, &home, &p.workspace))
                .await?
        },
    );
    method(
        &mut module,
        m::HOOKS_TRUST,
        |r, p: agentd_proto::rpc::HooksTrustParams| async move {
            let (cfg, home) = (r.config.hooks.clone(), r.home.root().to_path_buf());
            crate::filesystem::blocking(move || {
                crate::hooks::trust_now(&cfg, &home, &p.workspace, p.sha256.as_deref())
            })
            .await?
        },
    );
    method(&mut module, m::MODELS, |r, p| async move {
        to_value(models::models(&r, p).await?)
    });
    method(&mut module, m::EXPORT, |r, p| async move {
        to_value(export::export(&r, p).await?)
    });
    method(&mut module, m::SEARCH, |r, p| async move {
        to_value(search::search(&r, p).await?)
    });
    method(&mut module, m::USAGE, |r, p| async move {
        to_value(usage::usage(&r, p).await?)
    });
    method(&mut module, m::IMPORT_DISCOVER, |r, p| async move {
        crate::imports::discover(&r, p).await
    });
    module.into()
}
