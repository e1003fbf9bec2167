//! Streamable HTTP for `url` servers: rmcp's transport-agnostic client driven through
//! [`HttpClient`], an adapter over the workspace's reqwest 0.12 (rustls with ring), so
//! agentd carries one HTTP stack. It POSTs each JSON-RPC message and reads the answer as
//! JSON or as an SSE stream, opens the optional GET stream, and deletes the session at
//! close; `Mcp-Session-Id` is carried both ways.

use futures::StreamExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

const SESSION_HEADER: &str = "Mcp-Session-Id";
const LAST_EVENT_HEADER: &str = "Last-Event-Id";
const ACCEPT_BOTH: &str = "application/json, text/event-stream";
/// Bytes of an error body quoted in an error.
const ERROR_BODY: usize = 512;

type Error = StreamableHttpError<reqwest::Error>;

/// The adapter: a shared reqwest client.
#[derive(Clone, Default)]
pub struct HttpClient(pub reqwest::Client);

fn request(
    mut rb: reqwest::RequestBuilder,
    session: Option<&str>,
    auth: Option<String>,
    headers: HashMap<http::HeaderName, http::HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(s) = session {
        rb = rb.header(SESSION_HEADER, s);
    }
    if let Some(token) = auth {
        rb = rb.bearer_auth(token);
    }
    for (k, v) in headers {
        rb = rb.header(k, v);
    }
    rb
}

fn content_type(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
}

fn sse(resp: reqwest::Response) -> BoxedSseResponse {
    sse_stream::SseStream::from_bytes_stream(resp.bytes_stream()).boxed()
}

async fn failure(resp: reqwest::Response) -> Error {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    let mut cut = body.len().min(ERROR_BODY);
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
        "HTTP {status}: {}",
        &body[..cut]
    )))
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let rb = self
            .0
            .post(uri.as_ref())
            .header(reqwest::header::ACCEPT, ACCEPT_BOTH)
            .json(&message);
        let resp = request(rb, session_id.as_deref(), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = resp.status();
        if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if status.is_client_error()
            && status != reqwest::StatusCode::UNAUTHORIZED
            && status != reqwest::StatusCode::FORBIDDEN
        {
            // A request refused with a 4xx is answered by the server's JSON-RPC error
            // (which servers send with `id: null`), re-addressed to the request: a
            // legacy server refusing the `server/discover` probe answers 400 so, and the
            // handshake then falls back to `initialize`.
            if let rmcp::model::JsonRpcMessage::Request(req) = &message {
                let id = req.id.clone();
                let bytes = resp.bytes().await.map_err(StreamableHttpError::Client)?;
                let error = match serde_json::from_slice::<ServerJsonRpcMessage>(&bytes) {
                    Ok(rmcp::model::JsonRpcMessage::Error(e)) => e.error,
                    _ => rmcp::ErrorData::invalid_request(
                        format!(
                            "HTTP {status}: {}",
                            String::from_utf8_lossy(&bytes[..bytes.len().min(ERROR_BODY)])
                        ),
                        None,
                    ),
                };
                return Ok(StreamableHttpPostResponse::Json(
                    ServerJsonRpcMessage::error(error, Some(id)),
                    None,
                ));
            }
        }
        if !status.is_success() {
            return Err(failure(resp).await);
        }
        let session = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match content_type(&resp).as_deref() {
            Some("text/event-stream") => Ok(StreamableHttpPostResponse::Sse(sse(resp), session)),
            Some("application/json") => {
                let bytes = resp.bytes().await.map_err(StreamableHttpError::Client)?;
                let msg: ServerJsonRpcMessage = serde_json::from_slice(&bytes)?;
                Ok(StreamableHttpPostResponse::Json(msg, session))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_string),
            )),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<(), Error> {
        let rb = self.0.delete(uri.as_ref());
        let resp = request(rb, Some(&session_id), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        if resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED || resp.status().is_success() {
            return Ok(());
        }
        Err(failure(resp).await)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<BoxedSseResponse, Error> {
        let mut rb = self
            .0
            .get(uri.as_ref())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            rb = rb.header(LAST_EVENT_HEADER, id);
        }
        let resp = request(rb, session_id.as_deref(), auth_header, custom_headers)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        if resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if !resp.status().is_success() {
            return Err(failure(resp).await);
        }
        match content_type(&resp).as_deref() {
            Some("text/event-stream") => Ok(sse(resp)),
            other => Err(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_string),
            )),
        }
    }
}
