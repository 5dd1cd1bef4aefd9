//! The Anthropic Messages API, streamed.
//!
//! Requests are built from the core's transcript with three kinds of
//! sanitizing, because the API rejects what a long-lived transcript can
//! contain: empty messages and empty text blocks are dropped, consecutive
//! messages of one role are merged (tool results first, as the API
//! requires), and a tool call whose input is not a JSON object (the raw text
//! of invalid JSON, kept for the tool layer) is sent with `{}`.
//!
//! Prompt caching: the system prompt, the last tool and the last block of
//! the last message each carry an ephemeral `cache_control` breakpoint, so a
//! turn re-reads the whole previous conversation from the cache (3 of the 4
//! breakpoints the API allows).

mod request;
mod stream;

pub(crate) use stream::AnthropicStream;

use http::HeaderValue;
use std::fmt;

use super::transport::{self, Timeouts};
use super::{LlmError, LlmRequest};
use request::request_body;

/// The API version this module speaks.
const API_VERSION: &str = "2023-06-01";

/// The Anthropic provider. Cheap to share: it holds one connection pool.
pub(crate) struct AnthropicProvider {
    endpoint: transport::Endpoint,
    /// Marked sensitive, so that even reqwest's own debug output hides it.
    api_key: HeaderValue,
}

impl AnthropicProvider {
    /// A provider for `base_url` (e.g. `https://api.anthropic.com`; a
    /// trailing slash is fine).
    pub(crate) fn new(api_key: String, base_url: String) -> Result<Self, LlmError> {
        Self::with_timeouts(api_key, base_url, Timeouts::default())
    }

    pub(crate) fn with_timeouts(
        api_key: String,
        base_url: String,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        if api_key.trim().is_empty() {
            return Err(LlmError::Config(
                "the Anthropic API key is empty".to_string(),
            ));
        }
        let mut api_key = HeaderValue::from_str(api_key.trim()).map_err(|_| {
            LlmError::Config(
                "the Anthropic API key contains characters not allowed in a header".to_string(),
            )
        })?;
        api_key.set_sensitive(true);
        let endpoint = transport::Endpoint::new(&base_url, "v1/messages", timeouts)?;
        Ok(AnthropicProvider { endpoint, api_key })
    }
}

impl transport::HttpApi for AnthropicProvider {
    const NAME: &'static str = "anthropic";
    type Parser = AnthropicStream;

    fn request(&self, req: &LlmRequest) -> Result<reqwest::RequestBuilder, LlmError> {
        let mut builder = self
            .endpoint
            .post()
            .header("x-api-key", self.api_key.clone())
            .header("anthropic-version", API_VERSION)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(beta) = request::beta(req) {
            builder = builder.header("anthropic-beta", beta);
        }
        Ok(builder.body(
            request_body(req)
                .map_err(|e| LlmError::Config(format!("cannot encode the request: {e}")))?,
        ))
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("endpoint", &self.endpoint.redacted())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::request::tests::{request, request_body, spec};
    use super::stream::tests::{FULL_STREAM, after_start, full_events, full_reply};
    use super::*;
    use crate::llm::testkit::{self, Step, TestServer};
    use crate::llm::{Provider, StreamEvent};
    use agentd_core::{ContentBlock, ErrorKind, Message};
    use std::time::{Duration, Instant};
    use tokio_util::sync::CancellationToken;

    // End-to-end over HTTP against a canned local server.

    fn provider(server: &TestServer) -> AnthropicProvider {
        AnthropicProvider::new("sk-ant-test-key".into(), format!("{}/", server.base_url)).unwrap()
    }

    fn simple_request() -> LlmRequest {
        request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![spec("read")],
        )
    }

    #[tokio::test]
    async fn http_streaming_success() {
        let mut server = TestServer::start(testkit::sse_response(FULL_STREAM)).await;
        let provider = provider(&server);
        let mut events = Vec::new();
        let mut on_event = |e: StreamEvent| events.push(e);
        let reply = provider
            .stream(&simple_request(), &mut on_event, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply, full_reply());
        // Deltas that arrive in one read are passed on merged.
        assert_eq!(testkit::merged(events), testkit::merged(full_events()));

        let seen = server.request().await;
        assert_eq!(seen.request_line, "POST /v1/messages HTTP/1.1");
        assert_eq!(seen.header("x-api-key"), Some("sk-ant-test-key"));
        assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(seen.header("content-type"), Some("application/json"));
        assert_eq!(seen.json(), request_body(&simple_request()));
    }

    #[tokio::test]
    async fn http_401_is_auth_and_not_retried() {
        let server = TestServer::start(testkit::json_response(
            "401 Unauthorized",
            &[("request-id", "req_401")],
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        ))
        .await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        let failure = err.to_failure();
        assert_eq!(failure.kind, ErrorKind::Auth);
        assert!(!failure.retryable);
        assert_eq!(
            failure.message,
            "HTTP 401 (authentication_error): invalid x-api-key [request-id req_401]"
        );
        assert!(!failure.message.contains("sk-ant-test-key"));
    }

    #[tokio::test]
    async fn http_429_with_retry_after() {
        let server = TestServer::start(testkit::json_response(
            "429 Too Many Requests",
            &[("retry-after", "3")],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        ))
        .await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        let failure = err.to_failure();
        assert_eq!(
            (failure.kind, failure.retryable, failure.retry_after_ms),
            (ErrorKind::RateLimit, true, Some(3000))
        );
    }

    #[tokio::test]
    async fn http_mid_stream_error_event() {
        let stream = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
            "event: error\n",
            "data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n",
        );
        let server = TestServer::start(testkit::sse_response(stream)).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            "stream error (api_error): Internal server error [request-id req_test]"
        );
    }

    #[tokio::test]
    async fn http_legacy_error_event_is_retryable_and_names_the_request() {
        let stream = after_start(concat!(
            "event: error\n",
            "data: {\"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n",
        ));
        let server = TestServer::start(testkit::sse_response(&stream)).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(
            err.to_string(),
            "stream error (overloaded_error): Overloaded [request-id req_test]"
        );
    }

    #[tokio::test]
    async fn http_dropped_connection_before_message_stop() {
        let cut = &FULL_STREAM[..FULL_STREAM.find("event: message_delta").unwrap()];
        // The socket closes without the final chunk: a broken body.
        let mut steps = vec![testkit::sse_head()];
        steps.extend(testkit::chunks(cut));
        let server = TestServer::start(steps).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.is_retryable());
        assert_eq!(err.kind(), ErrorKind::Network);
        assert_eq!(err.request_id(), Some("req_test"));

        // The body ends cleanly, but before message_stop.
        let server = TestServer::start(testkit::sse_response(cut)).await;
        let err = provider(&server)
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.to_string().contains("before message_stop"), "{err}");
    }

    #[tokio::test]
    async fn http_cancel_returns_promptly_and_drops_the_connection() {
        let first = &FULL_STREAM[..FULL_STREAM.find("event: content_block_stop").unwrap()];
        let mut steps = vec![testkit::sse_head()];
        steps.extend(testkit::chunks(first));
        steps.push(Step::HoldOpen);
        let server = TestServer::start(steps).await;
        let provider = provider(&server);

        let cancel = CancellationToken::new();
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let mut first_tx = Some(first_tx);
        let mut on_event = move |e: StreamEvent| {
            if matches!(e, StreamEvent::ThinkingDelta { .. })
                && let Some(tx) = first_tx.take()
            {
                let _ = tx.send(());
            }
        };
        let canceller = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                let _ = first_rx.await;
                cancel.cancel();
                Instant::now()
            })
        };
        let req = simple_request();
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            provider.stream(&req, &mut on_event, cancel),
        )
        .await
        .expect("stream() must return once cancelled");
        let returned = Instant::now();
        assert!(matches!(result, Err(LlmError::Cancelled)), "{result:?}");
        let cancelled_at = canceller.await.unwrap();
        assert!(returned.duration_since(cancelled_at) < Duration::from_millis(500));
        assert!(
            server.peer_closed().await,
            "the HTTP connection must be dropped"
        );
    }

    #[tokio::test]
    async fn already_cancelled_token_sends_nothing() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let provider = AnthropicProvider::new("k".into(), "http://127.0.0.1:9".into()).unwrap();
        let result = provider
            .stream(&simple_request(), &mut |_| {}, cancel)
            .await;
        assert!(matches!(result, Err(LlmError::Cancelled)));
    }

    #[tokio::test]
    async fn stalled_stream_times_out_as_a_connection_error() {
        let mut steps = vec![testkit::sse_head()];
        steps.extend(testkit::chunks(
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
        ));
        steps.push(Step::HoldOpen);
        let server = TestServer::start(steps).await;
        let timeouts = Timeouts {
            connect: Duration::from_secs(5),
            read: Duration::from_millis(300),
        };
        let provider =
            AnthropicProvider::with_timeouts("k".into(), server.base_url.clone(), timeouts)
                .unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn refused_connection_is_a_retryable_network_error() {
        // Bind and drop a listener to find a port nobody listens on.
        let port = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let provider =
            AnthropicProvider::new("k".into(), format!("http://127.0.0.1:{port}")).unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Connection { .. }), "{err}");
        assert_eq!(err.kind(), ErrorKind::Network);
        assert!(err.is_retryable());
    }

    #[test]
    fn bad_configuration() {
        assert!(matches!(
            AnthropicProvider::new(String::new(), "https://api.anthropic.com".into()),
            Err(LlmError::Config(_))
        ));
        assert!(matches!(
            AnthropicProvider::new("k\n".into(), "https://api.anthropic.com".into()).map(|_| ()),
            Ok(())
        ));
        assert!(matches!(
            AnthropicProvider::new("bad\u{1}key".into(), "https://api.anthropic.com".into()),
            Err(LlmError::Config(_))
        ));
        assert!(matches!(
            AnthropicProvider::new("k".into(), "api.anthropic.com".into()),
            Err(LlmError::Config(_))
        ));
    }
}
