//! Test helpers: a one-shot local HTTP/1.1 server that records the request
//! it gets and answers with a scripted response, and a way to run a stream
//! parser over canned SSE text cut into small chunks.

use agentd_core::{ContentBlock, Message, Reply, Role};
use bytes::Bytes;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::transport::{StreamParser, parse_body};
use super::{LlmError, StreamEvent};

/// A transcript message of either role.
pub(crate) fn message(role: Role, content: Vec<ContentBlock>) -> Message {
    Message {
        role,
        content,
        created_at_ms: 0,
        usage: None,
        stop_reason: None,
        interrupted: false,
        kind: Default::default(),
    }
}

/// Runs `parser` over `sse`, delivered in chunks of `chunk_size` bytes (so
/// that chunks end inside lines and inside UTF-8 sequences), each chunk a
/// read of its own (so deltas are not merged across chunks).
pub(crate) async fn parse<P: StreamParser>(
    parser: P,
    sse: &str,
    chunk_size: usize,
) -> (Vec<StreamEvent>, Result<Reply, LlmError>) {
    let chunks: Vec<Result<Bytes, LlmError>> = sse
        .as_bytes()
        .chunks(chunk_size)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let mut events = Vec::new();
    let mut emit = |e: StreamEvent| events.push(e);
    let reply = parse_body(one_read_each(chunks), parser, &mut emit).await;
    (events, reply)
}

pub(crate) use super::fuzzing::merged;

/// `chunks` as a body whose every chunk is a network read of its own: a
/// look for more without waiting (`now_or_never`, whose waker does nothing)
/// never finds the next chunk ready, while waiting for it always gets it.
pub(crate) fn one_read_each<T: Unpin>(chunks: Vec<T>) -> OneReadEach<T> {
    OneReadEach(chunks.into())
}

/// See [`one_read_each`].
pub(crate) struct OneReadEach<T>(std::collections::VecDeque<T>);

impl<T: Unpin> futures::Stream for OneReadEach<T> {
    type Item = T;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        if cx.waker().will_wake(futures::task::noop_waker_ref()) {
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(self.0.pop_front())
    }
}

/// One step of the server's answer.
#[derive(Debug)]
pub(crate) enum Step {
    /// Bytes written as they are.
    Raw(Vec<u8>),
    /// Bytes written as one chunk of a chunked body.
    Chunk(Vec<u8>),
    /// Keep the connection open until the client closes it.
    HoldOpen,
}

/// What the client sent.
#[derive(Debug)]
pub(crate) struct Recorded {
    /// E.g. `POST /v1/messages HTTP/1.1`.
    pub request_line: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A server for exactly one request.
#[derive(Debug)]
pub(crate) struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    request: Option<oneshot::Receiver<Recorded>>,
    peer_closed: oneshot::Receiver<()>,
}

impl TestServer {
    /// Starts listening; the answer to the first connection is `steps`,
    /// after which the connection is closed (unless a step holds it open).
    pub(crate) async fn start(steps: Vec<Step>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let (request_tx, request_rx) = oneshot::channel();
        let (closed_tx, closed_rx) = oneshot::channel();
        tokio::spawn(async move {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let Some(recorded) = read_request(&mut socket).await else {
                return;
            };
            let _ = request_tx.send(recorded);
            for step in steps {
                let written = match step {
                    Step::Raw(bytes) => socket.write_all(&bytes).await,
                    Step::Chunk(bytes) => {
                        let mut frame = format!("{:x}\r\n", bytes.len()).into_bytes();
                        frame.extend_from_slice(&bytes);
                        frame.extend_from_slice(b"\r\n");
                        socket.write_all(&frame).await
                    }
                    Step::HoldOpen => {
                        wait_for_close(&mut socket).await;
                        let _ = closed_tx.send(());
                        return;
                    }
                };
                if written.is_err() {
                    return;
                }
            }
        });
        TestServer {
            base_url,
            request: Some(request_rx),
            peer_closed: closed_rx,
        }
    }

    /// The request the server received.
    pub(crate) async fn request(&mut self) -> Recorded {
        self.request.take().unwrap().await.unwrap()
    }

    /// Whether the client closed a connection held open, within 5 s.
    pub(crate) async fn peer_closed(self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.peer_closed).await,
            Ok(Ok(()))
        )
    }
}

/// Reads until the client closes the connection, or for at most 30 s.
async fn wait_for_close(socket: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(_)) => {}
        }
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Recorded {
        request_line,
        headers,
        body,
    })
}

/// The head of a successful streaming response with a chunked body.
pub(crate) fn sse_head() -> Step {
    Step::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\nrequest-id: req_test\r\n\r\n"
            .to_vec(),
    )
}

/// `body` as small chunks, cut without regard for lines or characters.
pub(crate) fn chunks(body: &str) -> Vec<Step> {
    body.as_bytes()
        .chunks(37)
        .map(|c| Step::Chunk(c.to_vec()))
        .collect()
}

/// A complete streaming response.
pub(crate) fn sse_response(body: &str) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    steps.extend(chunks(body));
    steps.push(Step::Raw(b"0\r\n\r\n".to_vec()));
    steps
}

/// A complete JSON response, e.g. `status` = `"401 Unauthorized"`.
pub(crate) fn json_response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<Step> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    vec![Step::Raw(bytes)]
}
