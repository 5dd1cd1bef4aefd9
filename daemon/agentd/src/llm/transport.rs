//! What both providers share: the HTTP client, endpoint URLs, sending one
//! streaming request, and turning its body into a [`Reply`] through a
//! provider-specific [`StreamParser`].

use agentd_core::Reply;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use reqwest::Url;
use std::future::Future;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::error::{LlmError, provider_error};
use super::retry;
use super::sse::{SseDecoder, SseEvent};
use super::{LlmRequest, Provider, StreamEvent};

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
fn endpoint(base_url: &str, path: &str) -> Result<Url, LlmError> {
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
fn client(endpoint: &Url, timeouts: Timeouts) -> Result<reqwest::Client, LlmError> {
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

/// The data of the event called `event`, read as `T`. A failure names the
/// event and tells data that is not JSON at all (a proxy's text, a cut
/// line) from JSON of an unexpected shape, quoting the start of the former.
pub(crate) fn event_data<'a, T: serde::Deserialize<'a>>(
    event: &str,
    data: &'a str,
) -> Result<T, LlmError> {
    serde_json::from_str(data).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Syntax | Category::Eof => {
                const MAX_QUOTED: usize = 120;
                let mut quoted: String = data.chars().take(MAX_QUOTED).collect();
                if quoted.len() < data.len() {
                    quoted.push('…');
                }
                LlmError::decode(format!(
                    "event {event:?} has data that is not JSON: {e}, in {quoted:?}"
                ))
            }
            Category::Data | Category::Io => {
                LlmError::decode(format!("event {event:?} has unexpected data: {e}"))
            }
        }
    })
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

/// Most text one merged delta carries (see [`Batch`]).
const MAX_BATCHED_TEXT: usize = 16 * 1024;
/// Chunks of a body that come closer together than this are a flood (see
/// `parse_batched`); so are chunks that keep coming when the parser lets
/// the HTTP client run (a busy daemon may see even a flood's chunks far
/// apart).
const FLOOD_GAP: Duration = Duration::from_micros(100);

/// Feeds body chunks through the SSE decoder into `parser`. It returns as
/// soon as the parser reports the reply complete, without waiting for the
/// server to close the body.
///
/// Consecutive deltas of one block that arrive together — in the chunks
/// the body has ready at once — are passed to `emit` as one delta with
/// their concatenated text (see [`Batch`]): a fast stream costs the rest of
/// the daemon one event per read instead of one per model delta. Nothing
/// is held back waiting for more data.
pub(crate) async fn parse_body<P: StreamParser>(
    body: impl Stream<Item = Result<Bytes, LlmError>>,
    parser: P,
    emit: &mut (dyn FnMut(StreamEvent) + Send),
) -> Result<Reply, LlmError> {
    let mut batch = Batch {
        emit,
        pending: None,
    };
    let result = parse_batched(body, parser, &mut batch).await;
    batch.flush();
    result
}

async fn parse_batched<P: StreamParser>(
    body: impl Stream<Item = Result<Bytes, LlmError>>,
    mut parser: P,
    batch: &mut Batch<'_>,
) -> Result<Reply, LlmError> {
    let mut body = std::pin::pin!(body);
    let mut decoder = SseDecoder::new();
    let mut ready = None;
    let mut last_chunk: Option<Instant> = None;
    let mut yield_paid = false;
    loop {
        let next = match ready.take() {
            Some(next) => next,
            None => {
                // Nothing more is ready: what was merged goes out before
                // waiting for the network.
                batch.flush();
                body.next().await
            }
        };
        let Some(chunk) = next else { break };
        for event in decoder.feed(&chunk?) {
            if parser.on_event(&event, &mut |e| batch.push(e))? == Flow::Done {
                return parser.finish(true, &mut |e| batch.push(e));
            }
        }
        // A flood: chunks close together, or the last yield found more.
        let now = Instant::now();
        let flood = yield_paid || last_chunk.is_some_and(|at| now.duration_since(at) < FLOOD_GAP);
        last_chunk = Some(now);
        ready = body.next().now_or_never();
        if ready.is_none() && flood && batch.pending.is_some() {
            // The HTTP client hands the body over a chunk at a time from
            // its connection task: in a flood, let it run once, so that
            // what it has read already can join the delta before it goes
            // out. (At a model's usual pace this would only add latency.)
            tokio::task::yield_now().await;
            ready = body.next().now_or_never();
            yield_paid = ready.is_some();
        }
    }
    if let Some(event) = decoder.finish()
        && parser.on_event(&event, &mut |e| batch.push(e))? == Flow::Done
    {
        return parser.finish(true, &mut |e| batch.push(e));
    }
    parser.finish(false, &mut |e| batch.push(e))
}

/// Merges consecutive deltas of one block (text, reasoning or tool input)
/// on their way to `emit`, up to [`MAX_BATCHED_TEXT`] bytes; every other
/// event passes through in order, after the merged delta before it.
struct Batch<'a> {
    emit: &'a mut (dyn FnMut(StreamEvent) + Send),
    pending: Option<StreamEvent>,
}

impl Batch<'_> {
    fn push(&mut self, event: StreamEvent) {
        if let Some(pending) = &mut self.pending {
            let merged = match (pending, &event) {
                (
                    StreamEvent::TextDelta { index, text },
                    StreamEvent::TextDelta {
                        index: next,
                        text: more,
                    },
                )
                | (
                    StreamEvent::ThinkingDelta { index, text },
                    StreamEvent::ThinkingDelta {
                        index: next,
                        text: more,
                    },
                )
                | (
                    StreamEvent::ToolInputDelta {
                        index,
                        partial_json: text,
                    },
                    StreamEvent::ToolInputDelta {
                        index: next,
                        partial_json: more,
                    },
                ) if index == next && text.len() + more.len() <= MAX_BATCHED_TEXT => {
                    text.push_str(more);
                    true
                }
                _ => false,
            };
            if merged {
                return;
            }
        }
        self.flush();
        match event {
            StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ToolInputDelta { .. } => self.pending = Some(event),
            other => (self.emit)(other),
        }
    }

    fn flush(&mut self) {
        if let Some(event) = self.pending.take() {
            (self.emit)(event);
        }
    }
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

/// Where one provider's requests go, with the connection pool they share.
pub(crate) struct Endpoint {
    client: reqwest::Client,
    url: Url,
}

impl Endpoint {
    /// `path` under `base_url` (see [`endpoint`]), with a client for it.
    pub(crate) fn new(base_url: &str, path: &str, timeouts: Timeouts) -> Result<Self, LlmError> {
        let url = endpoint(base_url, path)?;
        let client = client(&url, timeouts)?;
        Ok(Endpoint { client, url })
    }

    /// A POST that asks for a stream of server-sent events.
    pub(crate) fn post(&self) -> reqwest::RequestBuilder {
        self.client
            .post(self.url.clone())
            .header(http::header::ACCEPT, "text/event-stream")
    }

    /// The URL without its password, for logs and `Debug`.
    pub(crate) fn redacted(&self) -> String {
        redact(self.url.as_str())
    }
}

/// A provider over HTTP: how it builds one request and which parser reads
/// the streamed reply. [`Provider`] is implemented once for all of them:
/// send, read the stream, and give up when `cancel` fires.
pub(crate) trait HttpApi: Send + Sync + std::fmt::Debug {
    /// The provider's name in logs: `anthropic`, `openai`.
    const NAME: &'static str;
    /// Reads its SSE events.
    type Parser: StreamParser + Default + Send;

    /// The request for `req`, headers and body.
    fn request(&self, req: &LlmRequest) -> Result<reqwest::RequestBuilder, LlmError>;
}

impl<T: HttpApi> Provider for T {
    fn stream<'a>(
        &'a self,
        req: &'a LlmRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, LlmError>> {
        Box::pin(run_attempt(T::NAME, cancel, async move {
            let response = send(self.request(req)?).await?;
            read_stream(response, T::Parser::default(), on_event).await
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::testkit::one_read_each;
    use StreamEvent::{BlockEnd, TextDelta, ThinkingDelta, ToolInputDelta};

    /// A parser for these tests: `data: t0 abc` is text `abc` of block 0,
    /// `k` reasoning, `j` tool input, `b0` the end of block 0, `u` usage,
    /// `x` a broken event, `end` the end of the reply.
    struct Toy;

    impl StreamParser for Toy {
        fn on_event(
            &mut self,
            event: &SseEvent,
            emit: &mut dyn FnMut(StreamEvent),
        ) -> Result<Flow, LlmError> {
            let (head, text) = event.data.split_once(' ').unwrap_or((&event.data, ""));
            let index = head[1..].parse().unwrap_or(0);
            let text = text.to_string();
            match &head[..1] {
                "t" => emit(TextDelta { index, text }),
                "k" => emit(ThinkingDelta { index, text }),
                "j" => emit(ToolInputDelta {
                    index,
                    partial_json: text,
                }),
                "b" => emit(BlockEnd { index }),
                "u" => emit(StreamEvent::Usage(agentd_core::Usage::default())),
                "x" => return Err(LlmError::decode("broken")),
                "e" => return Ok(Flow::Done),
                _ => {}
            }
            Ok(Flow::Continue)
        }

        fn finish(
            self,
            completed: bool,
            _emit: &mut dyn FnMut(StreamEvent),
        ) -> Result<Reply, LlmError> {
            if !completed {
                return Err(LlmError::connection("cut"));
            }
            Ok(Reply {
                content: Vec::new(),
                stop_reason: agentd_core::StopReason::EndTurn,
                usage: agentd_core::Usage::default(),
            })
        }
    }

    fn sse(lines: &[&str]) -> Vec<Result<Bytes, LlmError>> {
        lines
            .iter()
            .map(|l| Ok(Bytes::from(format!("data: {l}\n\n"))))
            .collect()
    }

    async fn run_toy(
        body: impl Stream<Item = Result<Bytes, LlmError>>,
    ) -> (Vec<StreamEvent>, Result<Reply, LlmError>) {
        let mut events = Vec::new();
        let mut emit = |e: StreamEvent| events.push(e);
        let reply = parse_body(body, Toy, &mut emit).await;
        (events, reply)
    }

    fn text(index: u32, t: &str) -> StreamEvent {
        TextDelta {
            index,
            text: t.into(),
        }
    }

    #[tokio::test]
    async fn deltas_that_arrive_together_are_merged_in_order() {
        let lines = [
            "k0 hm",
            "k0 m",
            "b0",
            "t1 Hel",
            "t1 lo",
            "t1  ✓",
            "u",
            "t1 !",
            "t2 other",
            "j3 {\"a\"",
            "j3 :1}",
            "b3",
            "end",
        ];
        // Every chunk ready at once: one network read.
        let (events, reply) = run_toy(futures::stream::iter(sse(&lines))).await;
        assert!(reply.is_ok());
        assert_eq!(
            events,
            vec![
                ThinkingDelta {
                    index: 0,
                    text: "hmm".into()
                },
                BlockEnd { index: 0 },
                text(1, "Hello ✓"),
                StreamEvent::Usage(agentd_core::Usage::default()),
                text(1, "!"),
                text(2, "other"),
                ToolInputDelta {
                    index: 3,
                    partial_json: "{\"a\":1}".into()
                },
                BlockEnd { index: 3 },
            ]
        );
        // One read per chunk: nothing to merge, every delta as it came.
        let (events, _) = run_toy(one_read_each(sse(&lines))).await;
        assert_eq!(events.len(), 13 - 1, "every event but the end marker");
        assert_eq!(events[3], text(1, "Hel"));
    }

    #[tokio::test]
    async fn a_flood_handed_over_a_chunk_at_a_time_by_another_task_still_merges() {
        // As the HTTP client does: its connection task puts the next chunk
        // in a one-place channel only once the last one was taken.
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let words: Vec<String> = (0..20).map(|i| format!("t0 w{i} ")).collect();
        let mut lines: Vec<&str> = words.iter().map(String::as_str).collect();
        lines.extend(["b0", "end"]);
        let chunks = sse(&lines);
        let producer = tokio::spawn(async move {
            for chunk in chunks {
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        let body = tokio_stream::wrappers::ReceiverStream::new(rx);
        let (events, reply) = run_toy(body).await;
        assert!(reply.is_ok());
        producer.await.unwrap();
        let (last, texts) = events.split_last().unwrap();
        assert_eq!(last, &BlockEnd { index: 0 });
        let mut all = String::new();
        for e in texts {
            let TextDelta { index: 0, text } = e else {
                panic!("{e:?}")
            };
            all.push_str(text);
        }
        let want: String = (0..20).map(|i| format!("w{i} ")).collect();
        assert_eq!(all, want);
        // The first chunk of a flood goes out alone (nothing says yet that
        // more is coming); the rest merge.
        assert!(
            texts.len() < 10,
            "{} deltas for 20 chunks handed over back to back",
            texts.len()
        );
    }

    #[tokio::test]
    async fn merged_text_is_bounded_and_a_failure_still_delivers_what_came_before() {
        let piece = "x".repeat(1000);
        let line = format!("t0 {piece}");
        let mut lines: Vec<&str> = vec![&line; 40];
        lines.push("x");
        let (events, reply) = run_toy(futures::stream::iter(sse(&lines))).await;
        assert!(matches!(reply, Err(LlmError::Decode { .. })), "{reply:?}");
        let per_event = MAX_BATCHED_TEXT / piece.len();
        assert_eq!(events.len(), 40usize.div_ceil(per_event));
        let mut all = String::new();
        for e in &events {
            let TextDelta { index: 0, text } = e else {
                panic!("{e:?}")
            };
            assert!(text.len() <= MAX_BATCHED_TEXT);
            all.push_str(text);
        }
        assert_eq!(all, piece.repeat(40));
        // A body cut short: the deltas before the cut still arrive.
        let (events, reply) = run_toy(futures::stream::iter(sse(&["t0 a", "t0 b"]))).await;
        assert!(reply.is_err());
        assert_eq!(events, vec![text(0, "ab")]);
    }

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
