//! OpenAI-compatible chat completions, streamed: OpenAI itself and the
//! servers that copy its API (Ollama, vLLM, llama.cpp, OpenRouter).
//!
//! The transcript maps onto chat messages as follows: the system prompt
//! becomes the first message; an assistant's tool calls become `tool_calls`
//! (their input as a JSON string); each tool result becomes its own `tool`
//! message, placed before any text of the same user turn because the API
//! wants results right after the calls; reasoning blocks are not sent back,
//! as the API has no place for them.
//!
//! Compatible servers differ in small ways, so the stream parser is lenient
//! where it costs nothing: reasoning arrives as `reasoning_content` or
//! `reasoning`, a tool-call fragment may lack its `index`, `choices` may be
//! empty, null or missing (the usage chunk at the end has none), a blank
//! data line is a keep-alive, and a stream that ends after its
//! `finish_reason` but without `[DONE]` is accepted.
//!
//! How each event of the stream is taken:
//! - `data: [DONE]`: the reply is complete.
//! - A chunk with an `error` member (OpenAI's `{"message", "type", "code"}`,
//!   OpenRouter's numeric `code`, or a plain string), or an event named
//!   `error`: the error it reports, classified like the HTTP error it
//!   stands for (see [`LlmError::stream`]).
//! - Data that is not JSON: a protocol error that names the event.
//! - Any other event is a chunk. The stream defines no event names, so a
//!   server that adds one still means a chunk.

mod request;
mod stream;

pub(crate) use stream::OpenAiStream;

use http::HeaderValue;
use std::fmt;

use super::transport::{self, Timeouts};
use super::{LlmError, LlmRequest};
use request::request_body;

/// An OpenAI-compatible provider. Cheap to share: it holds one connection
/// pool.
pub(crate) struct OpenAiProvider {
    endpoint: transport::Endpoint,
    /// `Bearer …`, marked sensitive; `None` for servers without auth.
    authorization: Option<HeaderValue>,
}

impl OpenAiProvider {
    /// A provider for `base_url`, with or without its `/v1` suffix (e.g.
    /// `https://api.openai.com/v1` or `http://localhost:11434`).
    pub(crate) fn new(api_key: Option<String>, base_url: String) -> Result<Self, LlmError> {
        Self::with_timeouts(api_key, base_url, Timeouts::default())
    }

    pub(crate) fn with_timeouts(
        api_key: Option<String>,
        base_url: String,
        timeouts: Timeouts,
    ) -> Result<Self, LlmError> {
        let authorization = match api_key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    LlmError::Config(
                        "the OpenAI API key contains characters not allowed in a header"
                            .to_string(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let base = base_url.trim().trim_end_matches('/');
        let path = if base.ends_with("/v1") {
            "chat/completions"
        } else {
            "v1/chat/completions"
        };
        let endpoint = transport::Endpoint::new(base, path, timeouts)?;
        Ok(OpenAiProvider {
            endpoint,
            authorization,
        })
    }
}

impl transport::HttpApi for OpenAiProvider {
    const NAME: &'static str = "openai";
    type Parser = OpenAiStream;

    fn request(&self, req: &LlmRequest) -> Result<reqwest::RequestBuilder, LlmError> {
        let request = self.endpoint.post().json(&request_body(req));
        Ok(match &self.authorization {
            Some(auth) => request.header(http::header::AUTHORIZATION, auth.clone()),
            None => request,
        })
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.endpoint.redacted())
            .field("authenticated", &self.authorization.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::request::tests::request;
    use super::stream::tests::{FULL_STREAM, full_reply};
    use super::*;
    use crate::llm::testkit::{self, TestServer};
    use crate::llm::{Provider, StreamEvent};
    use agentd_core::{ContentBlock, ErrorKind, Message, StopReason};
    use tokio_util::sync::CancellationToken;

    fn simple_request() -> LlmRequest {
        request(
            vec![Message::user(vec![ContentBlock::text("hi")], 0)],
            vec![],
        )
    }

    #[tokio::test]
    async fn http_streaming_success_with_bearer_auth() {
        let mut server = TestServer::start(testkit::sse_response(FULL_STREAM)).await;
        let provider =
            OpenAiProvider::new(Some("sk-test".into()), format!("{}/v1/", server.base_url))
                .unwrap();
        let mut events = Vec::new();
        let mut on_event = |e: StreamEvent| events.push(e);
        let reply = provider
            .stream(&simple_request(), &mut on_event, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply, full_reply());
        // The 14 events of `full_stream_becomes_a_reply`; deltas that
        // arrive in one read are passed on merged.
        let (expected, _) = testkit::parse(OpenAiStream::default(), FULL_STREAM, 13).await;
        assert_eq!(expected.len(), 14);
        assert_eq!(testkit::merged(events), testkit::merged(expected));
        let seen = server.request().await;
        assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(seen.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(seen.json(), request_body(&simple_request()));
    }

    #[tokio::test]
    async fn http_without_key_sends_no_authorization() {
        let mut server = TestServer::start(testkit::sse_response("data: [DONE]\n\n")).await;
        let provider = OpenAiProvider::new(None, server.base_url.clone()).unwrap();
        let reply = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply.content, vec![]);
        assert_eq!(reply.stop_reason, StopReason::EndTurn);
        let seen = server.request().await;
        assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(seen.header("authorization"), None);
    }

    #[tokio::test]
    async fn http_error_status() {
        let server = TestServer::start(testkit::json_response(
            "401 Unauthorized",
            &[("x-request-id", "req_oa")],
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        ))
        .await;
        let provider =
            OpenAiProvider::new(Some("sk-test".into()), server.base_url.clone()).unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "HTTP 401 (invalid_api_key): Incorrect API key provided [request-id req_oa]"
        );
    }

    #[tokio::test]
    async fn http_json_instead_of_a_stream_is_reported() {
        let server = TestServer::start(testkit::json_response(
            "200 OK",
            &[],
            r#"{"error":"streaming unsupported"}"#,
        ))
        .await;
        let provider = OpenAiProvider::new(None, server.base_url.clone()).unwrap();
        let err = provider
            .stream(&simple_request(), &mut |_| {}, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Decode { .. }), "{err}");
        assert!(err.to_string().contains("streaming unsupported"), "{err}");
    }
}
