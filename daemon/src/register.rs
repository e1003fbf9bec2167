//! Registering JSON-RPC methods, in one place for every module that serves some (the
//! native API in `api.rs` and the session verbs in `verbs/`): params parsed into
//! the method's type (bad params are `invalid_args`), results serialized, errors as
//! error objects (docs/protocol.md#errors).

use agentd_proto::{AgentError, ErrorKind};
use jsonrpsee::types::{ErrorObject, ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, RpcModule};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;

pub fn parse<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, AgentError> {
    parse_str(params.as_str().unwrap_or("{}"))
}

pub(crate) fn parse_str<T: DeserializeOwned>(text: &str) -> Result<T, AgentError> {
    serde_json::from_str(text).map_err(|e| AgentError::invalid_args(format!("bad params: {e}")))
}

/// An error object for `kind` (docs/protocol.md#errors): -32602 for invalid_args, else -32000.
pub fn error_object(err: &AgentError) -> ErrorObjectOwned {
    let code = match err.kind {
        ErrorKind::InvalidArgs => -32602,
        _ => agentd_proto::error::APP_ERROR_CODE,
    };
    ErrorObject::owned(code, err.message.clone(), Some(err.rpc_data()))
}

/// A method's result as JSON (`internal` if it cannot be serialized).
pub(crate) fn to_value<T: Serialize>(v: T) -> Result<Value, AgentError> {
    serde_json::to_value(v).map_err(|e| AgentError::internal(format!("serialize result: {e}")))
}

/// Registers an async method whose params parse into `P`, on any module.
pub(crate) fn method<C, P, F, Fut>(module: &mut RpcModule<C>, name: &'static str, f: F)
where
    C: Send + Sync + 'static,
    P: DeserializeOwned + Send + 'static,
    F: Fn(Arc<C>, P, Extensions) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, AgentError>> + Send + 'static,
{
    let res = module.register_async_method(name, move |params, ctx, ext| {
        let f = f.clone();
        async move {
            let p: P = parse(&params).map_err(|e| error_object(&e))?;
            f(ctx, p, ext).await.map_err(|e| error_object(&e))
        }
    });
    if let Err(e) = res {
        // Method names are static and unique; a clash is a programming error caught by tests.
        panic!("register {name}: {e}");
    }
}
