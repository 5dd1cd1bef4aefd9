//! Attach responses as the bytes that go on the wire, each shared event
//! encoded once for all the clients it goes to.
//!
//! tonic's generated server encodes every item of a response stream into
//! that stream's own buffer: with 100 clients attached, the `MessageAppended`
//! that ends a 2.5 MB reply was encoded 100 times and held 100 times, until
//! each client had read its copy. So Attach is served here instead:
//! [`Intercept`] sits in front of the generated `AgentServiceServer` and
//! takes the Attach path; a client's forwarding task hands its stream
//! complete gRPC messages (the 5-byte prefix and the protobuf encoding) as
//! [`Bytes`], and [`AttachBody`] passes them to hyper as they are. An event
//! the hub shares between clients is encoded by the first client's task that
//! sends it ([`shared`]); every other client's stream gets the same
//! reference-counted bytes (up to h2's send queue) as long as any of them
//! still holds them. What clients are sent is exactly what tonic would send:
//! standard gRPC framing, no compression, `grpc-status` in the trailers.

use super::convert;
use super::service::Service;
use crate::runtime::ConvEvent;
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use bytes::{Bytes, BytesMut};
use http_body::Frame;
use prost::Message as _;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tonic::Status;
use tonic::body::Body;
use tonic::codec::BufferSettings;
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;

/// The gRPC path of the Attach method.
pub(super) const ATTACH_PATH: &str = "/agent.v1.AgentService/Attach";
/// gRPC's message prefix: a compression flag and a big-endian length.
const PREFIX: usize = 5;
/// Messages shorter than this are copied together into one chunk for h2;
/// longer ones go to it as their own chunk, not copied.
const COPY_BELOW: usize = 4 * 1024;
/// A chunk of copied messages goes out once it is this long (what tonic
/// does too).
const YIELD_AT: usize = 32 * 1024;
/// What an Attach stream's request decoder starts with.
const REQUEST_BUFFER: usize = 256;

/// What a client's forwarding task sends its stream: complete gRPC messages,
/// or the status that ends the stream.
pub(super) type FrameTx = mpsc::Sender<Result<Bytes, Status>>;

/// `message` as one gRPC message: the prefix and the protobuf encoding, in
/// one allocation.
pub(super) fn frame(message: &pb::AttachResponse) -> Result<Bytes, Status> {
    encode(message).map(Bytes::from)
}

fn encode(message: &pb::AttachResponse) -> Result<Vec<u8>, Status> {
    let len = message.encoded_len();
    let prefix_len = u32::try_from(len).map_err(|_| {
        Status::resource_exhausted(format!("an event of {len} bytes is too long to send"))
    })?;
    let mut out = Vec::with_capacity(PREFIX + len);
    out.push(0);
    out.extend_from_slice(&prefix_len.to_be_bytes());
    message
        .encode(&mut out)
        .map_err(|e| Status::internal(format!("cannot encode an event: {e}")))?;
    Ok(out)
}

/// An event the hub shares between clients, as one gRPC message: encoded by
/// the first client's stream that sends it and shared by every other one
/// while any of them still holds the bytes (the event's
/// [`WireCache`](crate::runtime::WireCache)).
pub(super) fn shared(event: &ConvEvent) -> Result<Bytes, Status> {
    let encoded = event
        .wire
        .get_or_try_make(|| encode(&convert::event(event)))?;
    Ok(Bytes::from_owner(Shared(encoded)))
}

/// Bytes of a [`shared`] encoding, for [`Bytes::from_owner`].
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// An Attach response body: the messages a client's stream is sent, each
/// long one passed to h2 as the very bytes it was handed (shared ones stay
/// shared), short ones copied together into bigger chunks; then the
/// trailers with `grpc-status`.
pub(super) struct AttachBody {
    rx: mpsc::Receiver<Result<Bytes, Status>>,
    /// Short messages copied together, not yet handed out.
    chunk: BytesMut,
    /// A long message that goes out after `chunk`.
    next: Option<Bytes>,
    /// The status that ends the stream, once known.
    end: Option<Status>,
    ended: bool,
}

impl AttachBody {
    fn new(rx: mpsc::Receiver<Result<Bytes, Status>>) -> AttachBody {
        AttachBody {
            rx,
            chunk: BytesMut::new(),
            next: None,
            end: None,
            ended: false,
        }
    }

    fn take_chunk(&mut self) -> Frame<Bytes> {
        Frame::data(self.chunk.split().freeze())
    }
}

impl http_body::Body for AttachBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(next) = this.next.take() {
            return Poll::Ready(Some(Ok(Frame::data(next))));
        }
        while this.end.is_none() {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(message))) if message.len() >= COPY_BELOW => {
                    if this.chunk.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(message))));
                    }
                    this.next = Some(message);
                    return Poll::Ready(Some(Ok(this.take_chunk())));
                }
                Poll::Ready(Some(Ok(message))) => {
                    this.chunk.extend_from_slice(&message);
                    if this.chunk.len() >= YIELD_AT {
                        return Poll::Ready(Some(Ok(this.take_chunk())));
                    }
                }
                Poll::Ready(Some(Err(status))) => this.end = Some(status),
                Poll::Ready(None) => this.end = Some(Status::ok("")),
                Poll::Pending if this.chunk.is_empty() => return Poll::Pending,
                Poll::Pending => return Poll::Ready(Some(Ok(this.take_chunk()))),
            }
        }
        if !this.chunk.is_empty() {
            return Poll::Ready(Some(Ok(this.take_chunk())));
        }
        this.ended = true;
        let status = this.end.take().unwrap_or_else(|| Status::ok(""));
        let mut trailers = http::HeaderMap::new();
        if let Err(unsendable) = status.add_header(&mut trailers) {
            // A message that cannot be a header value: the code alone.
            trailers.clear();
            let _ = Status::new(unsendable.code(), "").add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// The Attach stream as the generated service sees it: the messages decoded
/// again. Only a server without [`Intercept`] in front reads them this way
/// (the daemon's serves the bytes: [`Frames::into_body`]).
pub(crate) struct Frames {
    rx: mpsc::Receiver<Result<Bytes, Status>>,
}

impl Frames {
    pub(super) fn new(rx: mpsc::Receiver<Result<Bytes, Status>>) -> Frames {
        Frames { rx }
    }

    /// The response body that sends the bytes as they are.
    pub(super) fn into_body(self) -> AttachBody {
        AttachBody::new(self.rx)
    }
}

/// A message made by [`frame`] or [`shared`], decoded.
pub(super) fn decode(message: &[u8]) -> Result<pb::AttachResponse, Status> {
    let (prefix, body) = message
        .split_at_checked(PREFIX)
        .ok_or_else(|| Status::internal("a gRPC message shorter than its prefix"))?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    if prefix[0] != 0 || usize::try_from(len).ok() != Some(body.len()) {
        return Err(Status::internal("a malformed gRPC message prefix"));
    }
    pb::AttachResponse::decode(body).map_err(|e| Status::internal(format!("{e}")))
}

impl tokio_stream::Stream for Frames {
    type Item = Result<pb::AttachResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx
            .poll_recv(cx)
            .map(|m| m.map(|r| r.and_then(|bytes| decode(&bytes))))
    }
}

/// The agent service with Attach served from shared bytes ([`AttachBody`]);
/// every other method goes to the generated server.
#[derive(Clone)]
pub(super) struct Intercept {
    inner: AgentServiceServer<Service>,
    service: Service,
    max_decoding_message_size: usize,
}

impl Intercept {
    /// `inner` serves every method but Attach, which `service` answers,
    /// decoding each Attach frame up to `max_decoding_message_size` bytes
    /// (give `inner` the same limit: `[grpc] max_message_bytes`).
    pub(super) fn new(
        inner: AgentServiceServer<Service>,
        service: Service,
        max_decoding_message_size: usize,
    ) -> Intercept {
        Intercept {
            inner,
            service,
            max_decoding_message_size,
        }
    }
}

impl NamedService for Intercept {
    const NAME: &'static str = <AgentServiceServer<Service> as NamedService>::NAME;
}

impl tonic::codegen::Service<http::Request<Body>> for Intercept {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != ATTACH_PATH {
            return self.inner.call(request);
        }
        let service = self.service.clone();
        let limit = self.max_decoding_message_size;
        Box::pin(async move { Ok(attach(service, request, limit).await) })
    }
}

/// Serves one Attach call: the request frames decoded as tonic would, the
/// response from [`AttachBody`].
async fn attach(
    service: Service,
    request: http::Request<Body>,
    limit: usize,
) -> http::Response<Body> {
    if let Some(encoding) = request.headers().get("grpc-encoding")
        && encoding != "identity"
    {
        return Status::unimplemented(format!(
            "Content is compressed with `{}` which isn't supported",
            String::from_utf8_lossy(encoding.as_bytes())
        ))
        .into_http();
    }
    let request = tonic::Request::from_http(request.map(|body| {
        tonic::Streaming::new_request(
            // Attach requests are small (a subscription, a message): the
            // buffer starts small and grows for a long one, instead of the
            // 8 KiB every open stream would hold.
            tonic_prost::ProstDecoder::<pb::AttachRequest>::new(BufferSettings::new(
                REQUEST_BUFFER,
                YIELD_AT,
            )),
            body,
            None,
            Some(limit),
        )
    }));
    match AgentService::attach(&service, request).await {
        Ok(response) => {
            let (metadata, frames, extensions) = response.into_parts();
            let mut http = http::Response::new(Body::new(frames.into_body()));
            *http.headers_mut() = metadata.into_headers();
            *http.extensions_mut() = extensions;
            http.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            http
        }
        Err(status) => status.into_http(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::EventKind;
    use agentd_core::{ContentBlock, Message};
    use http_body_util::BodyExt as _;

    fn appended(text: &str) -> ConvEvent {
        ConvEvent::new(
            7,
            1234,
            EventKind::MessageAppended {
                message_seq: 3,
                message: Message::user(
                    vec![ContentBlock::Text {
                        text: text.to_string(),
                    }],
                    1000,
                ),
            },
        )
    }

    #[test]
    fn a_shared_event_is_encoded_once_while_a_client_holds_it() {
        let event = appended(&"x".repeat(100_000));
        let first = shared(&event).unwrap();
        let second = shared(&event).unwrap();
        assert_eq!(
            first.as_ptr(),
            second.as_ptr(),
            "the second client's stream shares the first one's bytes"
        );
        assert_eq!(decode(&first).unwrap(), convert::event(&event));
        assert_eq!(first, frame(&convert::event(&event)).unwrap());
        drop((first, second));
        // Nobody holds them any more: they were freed, and a later client
        // (one that resumes from the replay buffer) gets a fresh encoding.
        let later = shared(&event).unwrap();
        assert_eq!(decode(&later).unwrap(), convert::event(&event));
        let copy = event.clone();
        let of_copy = shared(&copy).unwrap();
        assert_ne!(
            later.as_ptr(),
            of_copy.as_ptr(),
            "a copy of an event (to merge deltas into) has its own encoding"
        );
    }

    async fn collect(body: AttachBody) -> (Vec<Bytes>, http::HeaderMap) {
        let mut chunks = Vec::new();
        let mut trailers = None;
        let mut body = std::pin::pin!(body);
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            match frame.into_data() {
                Ok(data) => chunks.push(data),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        (chunks, trailers.unwrap())
    }

    #[tokio::test]
    async fn the_body_passes_long_messages_as_they_are_and_joins_short_ones() {
        let (tx, rx) = mpsc::channel(16);
        let long = shared(&appended(&"y".repeat(50_000))).unwrap();
        let short = |t: &str| frame(&convert::event(&appended(t))).unwrap();
        tx.send(Ok(short("a"))).await.unwrap();
        tx.send(Ok(short("b"))).await.unwrap();
        tx.send(Ok(long.clone())).await.unwrap();
        tx.send(Ok(short("c"))).await.unwrap();
        drop(tx);
        let (chunks, trailers) = collect(AttachBody::new(rx)).await;
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[0], [short("a"), short("b")].concat());
        assert_eq!(
            chunks[1].as_ptr(),
            long.as_ptr(),
            "the long message is handed on, not copied"
        );
        assert_eq!(chunks[2], short("c"));
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        assert!(trailers.get("grpc-message").is_none());
    }

    #[tokio::test]
    async fn a_failed_stream_ends_with_its_status_after_what_was_sent() {
        let (tx, rx) = mpsc::channel(16);
        let one = frame(&convert::event(&appended("one"))).unwrap();
        tx.send(Ok(one.clone())).await.unwrap();
        tx.send(Err(Status::not_found("gone away"))).await.unwrap();
        let (chunks, trailers) = collect(AttachBody::new(rx)).await;
        assert_eq!(chunks, [one]);
        assert_eq!(trailers.get("grpc-status").unwrap(), "5");
        assert_eq!(trailers.get("grpc-message").unwrap(), "gone%20away");
    }

    #[test]
    fn a_frame_is_standard_grpc_framing() {
        let message = convert::event(&appended("hello"));
        let bytes = frame(&message).unwrap();
        let body = message.encode_to_vec();
        assert_eq!(bytes[0], 0, "not compressed");
        assert_eq!(&bytes[1..5], (body.len() as u32).to_be_bytes());
        assert_eq!(&bytes[5..], body);
        assert!(decode(&bytes[..4]).is_err());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
