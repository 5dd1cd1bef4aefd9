//! What can go wrong with one model request, and how the state machine
//! should treat it.
//!
//! The classification lives here, in one exhaustive match per question
//! (retry? which kind?), so that a new variant cannot be added without
//! deciding both. The rules are design.md §4: 429 (with `retry-after`), 5xx,
//! 529/overloaded, 408, 409, connection failures and mid-stream
//! overloaded/api errors are retried; 400/401/403/404/413 are not; a 429
//! without `retry-after` is a spend cap and is not retried either;
//! `x-should-retry` overrides all of that. A mid-stream error that carries
//! an HTTP status as its code (OpenRouter's `{"code": 502}`, vLLM's
//! `{"code": 400}`) is treated as that status would be.

use agentd_core::{ErrorKind, LlmFailure};
use http::{HeaderMap, StatusCode};
use std::fmt;
use std::time::{Duration, SystemTime};

use super::retry;

/// A failed model request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LlmError {
    /// The provider answered with a non-success HTTP status.
    #[error("HTTP {status}{}: {message}{}", TypeSuffix(.error_type), RequestIdSuffix(.request_id))]
    Http {
        status: u16,
        /// The provider's error type or code from the body
        /// (`rate_limit_error`, `context_length_exceeded`, …).
        error_type: Option<String>,
        /// The provider's message from the body, or the status text.
        message: String,
        /// `retry-after` / `retry-after-ms`.
        retry_after: Option<Duration>,
        /// `x-should-retry`, which overrides the status-based decision.
        should_retry: Option<bool>,
        /// The response's `request-id`.
        request_id: Option<String>,
    },
    /// The stream started with HTTP 200 and then reported an error event.
    #[error("stream error ({error_type}): {message}{}", RequestIdSuffix(.request_id))]
    Stream {
        /// The error's code or type, e.g. `overloaded_error`, `server_error`
        /// or an HTTP status such as `502`; `error` when it had neither.
        error_type: String,
        /// The provider's message.
        message: String,
        /// The response's `request-id`.
        request_id: Option<String>,
    },
    /// Connecting, sending or reading failed, a read timed out, or the
    /// stream ended before the provider said it was complete.
    #[error("connection error: {message}{}", RequestIdSuffix(.request_id))]
    Connection {
        message: String,
        /// The response's `request-id`, when a response had started.
        request_id: Option<String>,
    },
    /// The stream did not follow the provider's protocol.
    #[error("malformed stream: {message}{}", RequestIdSuffix(.request_id))]
    Decode {
        message: String,
        /// The response's `request-id`.
        request_id: Option<String>,
    },
    /// The caller's cancellation token fired: the seed's "Stream aborted
    /// by user".
    #[error("{}", agentd_core::texts::ERR_STREAM_ABORTED)]
    Cancelled,
    /// The provider cannot be built from its configuration.
    #[error("configuration error: {0}")]
    Config(String),
}

impl LlmError {
    /// Whether another attempt of the same request may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            LlmError::Http {
                status,
                retry_after,
                should_retry,
                ..
            } => {
                should_retry.unwrap_or_else(|| status_is_retryable(*status, retry_after.is_some()))
            }
            LlmError::Stream { error_type, .. } => match error_type.parse::<u16>() {
                // Mid-stream there is no `retry-after` to read.
                Ok(status) => status_is_retryable(status, false),
                // `server_error` is what OpenAI-compatible servers call the
                // same transient failure mid-stream.
                Err(_) => matches!(
                    error_type.as_str(),
                    "overloaded_error" | "api_error" | "server_error"
                ),
            },
            LlmError::Connection { .. } => true,
            // A stream we cannot parse is a protocol mismatch, which another
            // attempt would repeat.
            LlmError::Decode { .. } => false,
            LlmError::Cancelled => false,
            LlmError::Config(_) => false,
        }
    }

    /// The error's kind, as the state machine reports it.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            LlmError::Http {
                status,
                error_type,
                message,
                ..
            } => status_kind(*status, error_type.as_deref(), message),
            LlmError::Stream {
                error_type,
                message,
                ..
            } => match error_type.parse::<u16>() {
                Ok(status) => status_kind(status, None, message),
                Err(_) => stream_kind(error_type, message),
            },
            LlmError::Connection { .. } => ErrorKind::Network,
            LlmError::Decode { .. } => ErrorKind::Unknown,
            LlmError::Cancelled => ErrorKind::Unknown,
            // A missing or unusable key: the user must fix the credentials.
            LlmError::Config(_) => ErrorKind::Auth,
        }
    }

    /// The failure as the state machine takes it.
    pub(crate) fn to_failure(&self) -> LlmFailure {
        let retry_after = match self {
            LlmError::Http { retry_after, .. } => *retry_after,
            LlmError::Stream { .. }
            | LlmError::Connection { .. }
            | LlmError::Decode { .. }
            | LlmError::Cancelled
            | LlmError::Config(_) => None,
        };
        LlmFailure {
            kind: self.kind(),
            retryable: self.is_retryable(),
            message: self.to_string(),
            retry_after_ms: retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// The request id the error carries, if any.
    pub(crate) fn request_id(&self) -> Option<&str> {
        match self {
            LlmError::Http { request_id, .. }
            | LlmError::Stream { request_id, .. }
            | LlmError::Connection { request_id, .. }
            | LlmError::Decode { request_id, .. } => request_id.as_deref(),
            LlmError::Cancelled | LlmError::Config(_) => None,
        }
    }

    /// Fills in the request id of an error raised while reading a response,
    /// where the parser that noticed it does not know the headers.
    pub(crate) fn with_request_id(mut self, id: Option<&str>) -> Self {
        match &mut self {
            LlmError::Http { request_id, .. }
            | LlmError::Stream { request_id, .. }
            | LlmError::Connection { request_id, .. }
            | LlmError::Decode { request_id, .. } => {
                if request_id.is_none() {
                    *request_id = id.map(str::to_string);
                }
            }
            LlmError::Cancelled | LlmError::Config(_) => {}
        }
        self
    }

    /// A connection error with no response yet.
    pub(crate) fn connection(message: impl Into<String>) -> Self {
        LlmError::Connection {
            message: message.into(),
            request_id: None,
        }
    }

    /// A protocol error with no request id yet.
    pub(crate) fn decode(message: impl Into<String>) -> Self {
        LlmError::Decode {
            message: message.into(),
            request_id: None,
        }
    }

    /// An error the provider reported after HTTP 200, from its error
    /// object: `{"type" or "code", "message"}` as Anthropic and OpenAI
    /// send it, or a plain string. The code is preferred to the type, as in
    /// error bodies: it is the more specific of the two where both are set
    /// (OpenAI's `invalid_request_error` with `context_length_exceeded`).
    pub(crate) fn stream(error: &serde_json::Value) -> Self {
        let (error_type, message) = match error {
            serde_json::Value::Object(_) => error_fields(error),
            serde_json::Value::String(s) => (None, Some(s.clone())),
            _ => (None, None),
        };
        LlmError::Stream {
            error_type: error_type.unwrap_or_else(|| "error".to_string()),
            message: message
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| shorten(&error.to_string())),
            request_id: None,
        }
    }

    /// The error an `error` event reports, from its data: Anthropic's
    /// `{"type": "error", "error": {...}}`, the legacy shape without the
    /// outer `type`, a bare error object, or text that is not JSON at all,
    /// which is quoted (the event says an error happened; what it says is
    /// all there is to show).
    pub(crate) fn error_event(data: &str) -> Self {
        match serde_json::from_str::<serde_json::Value>(data) {
            Ok(json) => LlmError::stream(json.get("error").unwrap_or(&json)),
            Err(_) => LlmError::Stream {
                error_type: "error".to_string(),
                message: match data.trim() {
                    "" => "no message".to_string(),
                    text => shorten(text),
                },
                request_id: None,
            },
        }
    }

    /// A transport failure reported by reqwest. Its top-level message is
    /// terse ("error sending request"), so the causes are appended.
    pub(crate) fn from_reqwest(err: &reqwest::Error) -> Self {
        let mut message = if err.is_timeout() {
            "timed out".to_string()
        } else {
            err.to_string()
        };
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        // reqwest names the URL; a password in a user-supplied base URL
        // must not reach logs or clients through it.
        if let Some(url) = err.url()
            && url.password().is_some()
        {
            message = message.replace(url.as_str(), &super::transport::redact(url.as_str()));
        }
        LlmError::connection(message)
    }

    /// The error for a non-success response, from its status, headers and
    /// (possibly truncated) body.
    pub(crate) fn from_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Self {
        let (error_type, message) = provider_error(body);
        let message = message.unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("no message")
                .to_string()
        });
        LlmError::Http {
            status: status.as_u16(),
            error_type,
            message,
            retry_after: retry::retry_after(headers, SystemTime::now()),
            should_retry: retry::should_retry(headers),
            request_id: retry::request_id(headers),
        }
    }
}

/// Retry decision from the status alone.
fn status_is_retryable(status: u16, has_retry_after: bool) -> bool {
    match status {
        408 | 409 => true,
        // With `retry-after` a 429 is a rate limit that will lift; without
        // it, it is a spend or quota cap that waiting does not fix.
        429 => has_retry_after,
        500..=599 => true,
        _ => false,
    }
}

/// The kind of a failure with an HTTP status (or a status given as the code
/// of a mid-stream error).
fn status_kind(status: u16, error_type: Option<&str>, message: &str) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Auth,
        400 | 404 | 413 if is_context_overflow(error_type, message) => ErrorKind::ContextExhausted,
        400 | 404 | 413 => ErrorKind::InvalidRequest,
        429 => ErrorKind::RateLimit,
        408 => ErrorKind::Network,
        _ => ErrorKind::Unknown,
    }
}

/// The kind of a mid-stream error from its type or code.
fn stream_kind(error_type: &str, message: &str) -> ErrorKind {
    match error_type {
        // `rate_limit_exceeded` is OpenAI's code for it.
        "rate_limit_error" | "rate_limit_exceeded" => ErrorKind::RateLimit,
        "authentication_error" | "permission_error" => ErrorKind::Auth,
        t if is_context_overflow(Some(t), message) => ErrorKind::ContextExhausted,
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            ErrorKind::InvalidRequest
        }
        _ => ErrorKind::Unknown,
    }
}

/// Whether the provider rejected the request because the prompt does not fit
/// the context window. Providers say so only in words or in an error code.
fn is_context_overflow(error_type: Option<&str>, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    error_type == Some("context_length_exceeded")
        || message.starts_with("prompt is too long")
        || message.contains("maximum context length")
        || message.contains("context_length_exceeded")
}

/// The provider's error type and message from an error body. Understands
/// Anthropic's and OpenAI's `{"error": {"type", "code", "message"}}` and the
/// plainer shapes of compatible servers (`{"error": "…"}`, `{"message"}`,
/// `{"detail"}`); anything else is quoted as text, shortened.
pub(crate) fn provider_error(body: &[u8]) -> (Option<String>, Option<String>) {
    let as_string = |v: &serde_json::Value| v.as_str().map(str::to_string);
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        match json.get("error") {
            Some(err @ serde_json::Value::Object(_)) => return error_fields(err),
            Some(serde_json::Value::String(s)) => return (None, Some(s.clone())),
            _ => {}
        }
        let message = json
            .get("message")
            .or_else(|| json.get("detail"))
            .and_then(as_string);
        if message.is_some() {
            return (None, message);
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return (None, None);
    }
    (None, Some(shorten(text)))
}

/// The code (or else the type) and the message of an error object.
fn error_fields(err: &serde_json::Value) -> (Option<String>, Option<String>) {
    let text = |v: Option<&serde_json::Value>| match v {
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let error_type = text(err.get("code")).or_else(|| text(err.get("type")));
    let message = err
        .get("message")
        .and_then(|m| m.as_str())
        .map(str::to_string);
    (error_type, message)
}

/// `text` cut to a length fit for a message, marked when cut.
fn shorten(text: &str) -> String {
    const MAX_TEXT: usize = 500;
    let mut short: String = text.chars().take(MAX_TEXT).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

/// Displays ` (type)` when the provider gave an error type.
struct TypeSuffix<'a>(&'a Option<String>);

impl fmt::Display for TypeSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(t) => write!(f, " ({t})"),
            None => Ok(()),
        }
    }
}

/// Displays ` [request-id …]` when the response carried one, so that a
/// failure shown to a person can be traced by the provider's support.
struct RequestIdSuffix<'a>(&'a Option<String>);

impl fmt::Display for RequestIdSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, " [request-id {id}]"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn http_error(status: u16, headers: &[(&str, &str)], body: &str) -> LlmError {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        LlmError::from_response(StatusCode::from_u16(status).unwrap(), &h, body.as_bytes())
    }

    const ANTHROPIC_BODY: &str =
        r#"{"type":"error","error":{"type":"some_error","message":"provider says no"}}"#;

    #[test]
    fn http_classification_table() {
        use ErrorKind::*;
        let ra: &[(&str, &str)] = &[("retry-after", "7")];
        let yes: &[(&str, &str)] = &[("x-should-retry", "true")];
        let no: &[(&str, &str)] = &[("x-should-retry", "false")];
        let ra_no: &[(&str, &str)] = &[("retry-after", "7"), ("x-should-retry", "false")];
        let none: &[(&str, &str)] = &[];
        type Headers<'a> = &'a [(&'a str, &'a str)];
        let table: &[(u16, Headers, bool, ErrorKind)] = &[
            (400, none, false, InvalidRequest),
            (401, none, false, Auth),
            (403, none, false, Auth),
            (404, none, false, InvalidRequest),
            (413, none, false, InvalidRequest),
            (408, none, true, Network),
            (409, none, true, Unknown),
            (429, ra, true, RateLimit),
            (429, none, false, RateLimit),
            (429, yes, true, RateLimit),
            (429, ra_no, false, RateLimit),
            (500, none, true, Unknown),
            (502, none, true, Unknown),
            (503, no, false, Unknown),
            (529, none, true, Unknown),
            (529, ra, true, Unknown),
            (400, yes, true, InvalidRequest),
            (418, none, false, Unknown),
        ];
        for (status, headers, retryable, kind) in table {
            let err = http_error(*status, headers, ANTHROPIC_BODY);
            assert_eq!(err.is_retryable(), *retryable, "{status} {headers:?}");
            assert_eq!(err.kind(), *kind, "{status} {headers:?}");
            let failure = err.to_failure();
            assert_eq!((failure.retryable, failure.kind), (*retryable, *kind));
        }
    }

    #[test]
    fn failure_carries_retry_after_request_id_and_provider_message() {
        let err = http_error(
            429,
            &[("retry-after", "12"), ("request-id", "req_abc")],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#,
        );
        let f = err.to_failure();
        assert_eq!(f.retry_after_ms, Some(12_000));
        assert_eq!(
            f.message,
            "HTTP 429 (rate_limit_error): Slow down [request-id req_abc]"
        );
        assert_eq!(err.request_id(), Some("req_abc"));

        let f = http_error(429, &[("retry-after-ms", "1500.5")], "").to_failure();
        assert_eq!(f.retry_after_ms, Some(1500));
        assert_eq!(f.message, "HTTP 429: Too Many Requests");
    }

    #[test]
    fn error_bodies_of_various_servers() {
        let msg = |body: &str| http_error(500, &[], body).to_string();
        assert_eq!(
            msg(
                r#"{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}"#
            ),
            "HTTP 500 (invalid_api_key): bad key"
        );
        assert_eq!(
            msg(r#"{"error":"model 'x' not found"}"#),
            "HTTP 500: model 'x' not found"
        );
        assert_eq!(msg(r#"{"detail":"Not Found"}"#), "HTTP 500: Not Found");
        assert_eq!(
            msg("<html>bad gateway</html>"),
            "HTTP 500: <html>bad gateway</html>"
        );
        assert_eq!(msg(""), "HTTP 500: Internal Server Error");
        let long = "x".repeat(2000);
        assert!(msg(&long).ends_with("x…"));
        assert!(msg(&long).len() < 600);
    }

    #[test]
    fn context_overflow_is_its_own_kind() {
        let anthropic = http_error(
            400,
            &[],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert_eq!(anthropic.kind(), ErrorKind::ContextExhausted);
        assert!(!anthropic.is_retryable());
        let openai = http_error(
            400,
            &[],
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(openai.kind(), ErrorKind::ContextExhausted);
    }

    #[test]
    fn other_variants() {
        let stream = |t: &str| LlmError::Stream {
            error_type: t.to_string(),
            message: "m".to_string(),
            request_id: None,
        };
        assert!(stream("overloaded_error").is_retryable());
        assert!(stream("api_error").is_retryable());
        assert!(!stream("invalid_request_error").is_retryable());
        assert_eq!(
            stream("invalid_request_error").kind(),
            ErrorKind::InvalidRequest
        );
        assert_eq!(stream("rate_limit_error").kind(), ErrorKind::RateLimit);
        assert_eq!(stream("overloaded_error").kind(), ErrorKind::Unknown);
        assert_eq!(stream("rate_limit_exceeded").kind(), ErrorKind::RateLimit);
        assert!(!stream("rate_limit_exceeded").is_retryable());

        // An HTTP status as the code is taken as that status would be
        // (without `retry-after`, which a stream cannot carry).
        use ErrorKind::*;
        for (code, retryable, kind) in [
            ("500", true, Unknown),
            ("502", true, Unknown),
            ("529", true, Unknown),
            ("408", true, Network),
            ("429", false, RateLimit),
            ("400", false, InvalidRequest),
            ("401", false, Auth),
            ("404", false, InvalidRequest),
        ] {
            assert_eq!(
                (stream(code).is_retryable(), stream(code).kind()),
                (retryable, kind),
                "{code}"
            );
        }

        let conn = LlmError::connection("reset").with_request_id(Some("req_9"));
        assert!(conn.is_retryable());
        assert_eq!(conn.kind(), ErrorKind::Network);
        assert_eq!(
            conn.to_string(),
            "connection error: reset [request-id req_9]"
        );
        assert_eq!(conn.to_failure().retry_after_ms, None);

        assert!(!LlmError::decode("x").is_retryable());
        // Keys in sorted order: the same text with and without serde_json's
        // preserve_order (which agent-client-protocol turns on in workspace builds).
        let empty = LlmError::stream(&serde_json::json!({ "message": "", "type": "" }));
        assert_eq!(
            empty.to_string(),
            r#"stream error (error): {"message":"","type":""}"#
        );
        assert!(!LlmError::Cancelled.is_retryable());
        assert!(!LlmError::Config("x".into()).is_retryable());
        // Seed 000, Appendix B.
        assert_eq!(LlmError::Cancelled.to_string(), "Stream aborted by user");
    }
}
