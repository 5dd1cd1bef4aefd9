//! What both providers share: the HTTP client, endpoint URLs, sending one
//! streaming request, and turning its body into a [`Reply`] through a
//! provider-specific [`StreamParser`].

use agentd_core::Reply;
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use reqwest::Url;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::StreamEvent;
use super::error::{LlmError, provider_error};
use super::retry;
use super::sse::{SseDecoder, SseEvent};

/// Timeouts of the HTTP client.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// TCP (and TLS) connection set-up.
    pub connect: Duration,
    /// Longest silence between two reads. Providers send `ping` events on
    /// idle streams, so a stream quiet this long has stalled and is failed
    /// as a (retryable) connection error instead of hanging the turn.
    pub read: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(300),
        }
    }
}

/// The most of an error body we read: enough for any provider's message,
/// bounded so that a misbehaving server cannot make us buffer without end.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Builds the endpoint `{base_url}/{path}`. A trailing slash on the base is
/// tolerated; the scheme must be http or https.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<Url, LlmError> {
    let base = base_url.trim().trim_end_matches('/');
    let url = Url::parse(&format!("{base}/{path}"))
        .map_err(|e| LlmError::Config(format!("invalid base URL {:?}: {e}", redact(base))))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(LlmError::Config(format!(
            "base URL {:?} must be an http(s) URL with a host",
            redact(base)
        )));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(LlmError::Config(format!(
            "base URL {:?} must not have a query or fragment",
            redact(base)
        )));
    }
    Ok(url)
}

/// A URL as it may appear in messages and logs: without a password.
pub(crate) fn redact(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            // Setting a password only fails for URLs that cannot have one,
            // and this one has one.
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

/// The HTTP client for one provider.
///
/// A provider on the loopback interface (Ollama, llama.cpp, the test
/// servers) is always reached directly: a `HTTPS_PROXY` meant for the
/// outside world must not capture it. Remote providers honour the usual
/// proxy variables, as users behind a corporate proxy expect.
pub(crate) fn client(endpoint: &Url, timeouts: Timeouts) -> Result<reqwest::Client, LlmError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")))
        .tcp_nodelay(true)
        .connect_timeout(timeouts.connect)
        .read_timeout(timeouts.read);
    if is_loopback(endpoint) {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            host.eq_ignore_ascii_case("localhost")
                || host.to_ascii_lowercase().ends_with(".localhost")
        }
    }
}

/// Sends the request and returns the response if it is a successful event
/// stream; any other answer becomes the matching [`LlmError`].
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, LlmError> {
    let response = request
        .send()
        .await
        .map_err(|e| LlmError::from_reqwest(&e))?;
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let body = read_capped(response).await;
        return Err(LlmError::from_response(status, &headers, &body));
    }
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match content_type {
        // A server that ignored `stream: true`, or one that reports errors
        // with status 200: say what it said rather than "no events". Other
        // types are read as a stream anyway, since some servers label their
        // event streams loosely.
        Some(ct) if ct.starts_with("application/json") => {
            let request_id = retry::request_id(response.headers());
            let body = read_capped(response).await;
            let (_, said) = provider_error(&body);
            Err(LlmError::Decode {
                message: format!(
                    "expected an event stream, got {ct}: {}",
                    said.unwrap_or_default()
                ),
                request_id,
            })
        }
        _ => Ok(response),
    }
}

/// Reads at most [`MAX_ERROR_BODY`] bytes of a body, keeping what arrived
/// if reading fails: the body only decorates an error already decided.
async fn read_capped(response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        let room = MAX_ERROR_BODY - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() == MAX_ERROR_BODY {
            break;
        }
    }
    body
}

/// What a parser wants after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Keep reading.
    Continue,
    /// The provider said the reply is complete.
    Done,
}

/// Turns one provider's SSE events into stream events and a reply.
pub(crate) trait StreamParser {
    /// Handles one event, passing what it produced to `emit`.
    fn on_event(
        &mut self,
        event: &SseEvent,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Flow, LlmError>;

    /// The reply, after [`Flow::Done`] or when the body ended. A parser
    /// that needs an explicit end marker fails here when it did not get one.
    fn finish(self, completed: bool, emit: &mut dyn FnMut(StreamEvent)) -> Result<Reply, LlmError>;
}

/// Reads a successful response's event stream to the end of the reply.
/// Errors carry the response's request id.
pub(crate) async fn read_stream<P: StreamParser>(
    response: reqwest::Response,
    parser: P,
    emit: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<Reply, LlmError> {
    let request_id = retry::request_id(response.headers());
    let body = response
        .bytes_stream()
        .map_err(|e| LlmError::from_reqwest(&e));
    parse_body(body, parser, emit)
        .await
        .map_err(|e| e.with_request_id(request_id.as_deref()))
}

/// Feeds body chunks through the SSE decoder into `parser`. It returns as
/// soon as the parser reports the reply complete, without waiting for the
/// server to close the body.
pub(crate) async fn parse_body<P: StreamParser>(
    body: impl Stream<Item = Result<Bytes, LlmError>>,
    mut parser: P,
    emit: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<Reply, LlmError> {
    let mut body = std::pin::pin!(body);
    let mut decoder = SseDecoder::new();
    while let Some(chunk) = body.next().await {
        for event in decoder.feed(&chunk?) {
            if parser.on_event(&event, emit)? == Flow::Done {
                return parser.finish(true, emit);
            }
        }
    }
    if let Some(event) = decoder.finish()
        && parser.on_event(&event, emit)? == Flow::Done
    {
        return parser.finish(true, emit);
    }
    parser.finish(false, emit)
}

/// Runs one attempt until it ends or `cancel` fires, whichever is first.
/// On cancellation the attempt's future — and with it the HTTP response
/// and its connection — is dropped at once. Failures are logged with their
/// request id (never with the key, which no error carries).
pub(crate) async fn run_attempt(
    provider: &'static str,
    cancel: CancellationToken,
    attempt: impl Future<Output = Result<Reply, LlmError>>,
) -> Result<Reply, LlmError> {
    let result = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(LlmError::Cancelled),
        result = attempt => result,
    };
    match &result {
        Ok(_) => {}
        Err(LlmError::Cancelled) => tracing::debug!(provider, "model request cancelled"),
        Err(e) => tracing::warn!(
            provider,
            request_id = e.request_id().unwrap_or("-"),
            retryable = e.is_retryable(),
            "model request failed: {e}"
        ),
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let ok = |base: &str, path: &str| endpoint(base, path).unwrap().to_string();
        assert_eq!(
            ok("https://api.anthropic.com", "v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            ok("https://api.anthropic.com/", "v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            ok("http://localhost:8080/proxy/", "v1/messages"),
            "http://localhost:8080/proxy/v1/messages"
        );
        assert!(matches!(
            endpoint("ftp://x", "v1"),
            Err(LlmError::Config(_))
        ));
        assert!(matches!(
            endpoint("not a url", "v1"),
            Err(LlmError::Config(_))
        ));
        assert!(matches!(
            endpoint("https://x/?a=b", "v1"),
            Err(LlmError::Config(_))
        ));
        let err = endpoint("ftp://user:hunter2@x", "v1")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn loopback_hosts() {
        let lb = |u: &str| is_loopback(&Url::parse(u).unwrap());
        assert!(lb("http://127.0.0.1:11434/v1"));
        assert!(lb("http://[::1]:8080"));
        assert!(lb("http://localhost:8080"));
        assert!(lb("http://api.localhost"));
        assert!(!lb("https://api.anthropic.com"));
        assert!(!lb("http://10.0.0.1"));
    }
}
