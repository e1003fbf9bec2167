//! Streamable HTTP for `url` servers: rmcp's transport-agnostic client driven through
//! [`HttpClient`], an adapter over the workspace's reqwest 0.12 (rustls with ring), so
//! agentd carries one HTTP stack. It POSTs each JSON-RPC message and reads the answer as
//! JSON or as an SSE stream, opens the optional GET stream, and deletes the session at
//! close; `Mcp-Session-Id` is carried both ways.

use agentd_base::sse::SseParser;
use futures::StreamExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::SseError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::Sse;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
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

/// An SSE answer as rmcp's stream of events, parsed by the daemon's one event-stream
/// parser (`agentd_base::sse`, the providers' too).
fn sse(resp: reqwest::Response) -> BoxedSseResponse {
    let state = SseState {
        body: resp.bytes_stream().boxed(),
        parser: SseParser::new(),
        ready: VecDeque::new(),
        id: None,
        retry: None,
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.ready.pop_front() {
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            match st.body.next().await {
                Some(Ok(chunk)) => st.feed(&chunk),
                Some(Err(e)) => {
                    st.done = true;
                    st.ready.push_back(Err(SseError::Body(Box::new(e))));
                }
                None => st.done = true,
            }
        }
    })
    .boxed()
}

struct SseState {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: SseParser,
    ready: VecDeque<Result<Sse, SseError>>,
    /// The event id and reconnection time rmcp was last told.
    id: Option<String>,
    retry: Option<u64>,
    done: bool,
}

impl SseState {
    fn feed(&mut self, chunk: &[u8]) {
        let mut events = Vec::new();
        if self.parser.push(chunk, &mut events).is_err() {
            self.done = true;
            let e = std::io::Error::other(format!(
                "an event-stream line over {} bytes",
                agentd_base::sse::MAX_LINE_BYTES
            ));
            self.ready.push_back(Err(SseError::Body(Box::new(e))));
        }
        for ev in events {
            self.id.clone_from(&ev.id);
            self.ready.push_back(Ok(Sse {
                event: Some(ev.event),
                data: Some(ev.data),
                id: ev.id,
                retry: None,
            }));
        }
        // An id or reconnection time that came without data (a server's priming event
        // before it closes the stream): told as an event with no data, which rmcp keeps
        // for its reconnection and otherwise skips.
        let (id, retry) = (self.parser.last_id(), self.parser.retry());
        if id != self.id.as_deref() || retry != self.retry {
            self.id = id.map(str::to_string);
            self.retry = retry;
            self.ready.push_back(Ok(Sse {
                event: None,
                data: None,
                id: self.id.clone(),
                retry,
            }));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> SseState {
        SseState {
            body: futures::stream::empty().boxed(),
            parser: SseParser::new(),
            ready: VecDeque::new(),
            id: None,
            retry: None,
            done: false,
        }
    }

    fn items(st: &mut SseState) -> Vec<Sse> {
        st.ready.drain(..).map(|r| r.ok().unwrap()).collect()
    }

    /// Messages arrive as rmcp's events (id kept); a priming event (an id and a retry,
    /// no data) still reaches rmcp, as an event without data, so it can resume the
    /// stream from there; a chunk that changes neither adds nothing.
    #[test]
    fn messages_and_a_priming_event_reach_rmcp() {
        let mut st = state();
        st.feed(b"id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n");
        let got = items(&mut st);
        assert_eq!(
            got,
            [Sse {
                event: Some("message".into()),
                data: Some("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}".into()),
                id: Some("1".into()),
                retry: None,
            }]
        );
        st.feed(b"id: prime-2\nretry: 5");
        st.feed(b"00\n\n");
        assert_eq!(
            items(&mut st).last(),
            Some(&Sse {
                event: None,
                data: None,
                id: Some("prime-2".into()),
                retry: Some(500),
            })
        );
        st.feed(b": keep-alive\n\n");
        assert!(items(&mut st).is_empty());
    }
}
