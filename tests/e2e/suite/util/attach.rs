//! A tiny Attach client for the end-to-end tests, and what to make of the
//! frames it gets.

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// One attached client.
pub(crate) struct Attached {
    pub tx: mpsc::Sender<pb::AttachRequest>,
    pub rx: tonic::Streaming<pb::AttachResponse>,
}

pub(crate) fn frame(f: pb::attach_request::Frame) -> pb::AttachRequest {
    pb::AttachRequest { frame: Some(f) }
}

impl Attached {
    pub(crate) async fn open(
        client: &mut AgentServiceClient<Channel>,
        id: &str,
        after_seq: u64,
        name: &str,
    ) -> Attached {
        let (tx, rx) = mpsc::channel(16);
        tx.send(frame(pb::attach_request::Frame::Subscribe(pb::Subscribe {
            conversation_id: id.to_string(),
            after_seq,
            client_name: name.to_string(),
            ..Default::default()
        })))
        .await
        .unwrap();
        let rx = client
            .attach(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Attached { tx, rx }
    }

    /// The next frame, failing the test after `timeout`.
    pub(crate) async fn next(&mut self, timeout: Duration) -> pb::AttachResponse {
        match tokio::time::timeout(timeout, self.rx.message()).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => panic!("attach stream ended"),
            Ok(Err(s)) => panic!("attach stream failed: {s}"),
            Err(_) => panic!("no attach frame within {timeout:?}"),
        }
    }

    /// Frames up to and including the first one `stop` accepts.
    pub(crate) async fn until(
        &mut self,
        timeout: Duration,
        mut stop: impl FnMut(&pb::AttachResponse) -> bool,
    ) -> Vec<pb::AttachResponse> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let m = self.next(left).await;
            let done = stop(&m);
            out.push(m);
            if done {
                return out;
            }
        }
    }

    pub(crate) async fn send(&self, f: pb::attach_request::Frame) {
        self.tx.send(frame(f)).await.unwrap();
    }
}

pub(crate) fn state_kind(m: &pb::AttachResponse) -> Option<pb::StateKind> {
    match &m.event {
        Some(pb::attach_response::Event::StateChanged(s)) => s
            .state
            .as_ref()
            .and_then(|s| pb::StateKind::try_from(s.kind).ok()),
        _ => None,
    }
}

pub(crate) fn is_idle(m: &pb::AttachResponse) -> bool {
    state_kind(m) == Some(pb::StateKind::Idle)
}

pub(crate) fn deltas(frames: &[pb::AttachResponse]) -> Vec<(u64, String)> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::TextDelta(d)) => Some((m.seq, d.text.clone())),
            _ => None,
        })
        .collect()
}

pub(crate) fn text_of(frames: &[pb::AttachResponse]) -> String {
    deltas(frames).into_iter().map(|(_, t)| t).collect()
}

/// For each delta frame: its sequence number and how many bytes of delta
/// text the client had once it got that frame, counting from `base` (the
/// text it already had, e.g. a snapshot's partial reply).
pub(crate) fn delta_marks(frames: &[pb::AttachResponse], base: usize) -> Vec<(u64, usize)> {
    let mut total = base;
    deltas(frames)
        .into_iter()
        .map(|(seq, text)| {
            total += text.len();
            (seq, total)
        })
        .collect()
}

/// Checks that two clients saw one stream of deltas, however it was cut
/// into frames (deltas merge for a client that is behind): sequence numbers
/// increase, and wherever both clients got a frame with the same sequence
/// number, both had received the same amount of text by then. (Together
/// with equal text, that is the same text up to that point.)
pub(crate) fn assert_same_stream(a: &[(u64, usize)], b: &[(u64, usize)]) {
    for marks in [a, b] {
        assert!(
            marks.windows(2).all(|w| w[0].0 < w[1].0),
            "sequence numbers increase: {marks:?}"
        );
    }
    let at: std::collections::HashMap<u64, usize> = a.iter().copied().collect();
    for (seq, len) in b {
        if let Some(other) = at.get(seq) {
            assert_eq!(
                other, len,
                "text received up to seq {seq} differs between clients"
            );
        }
    }
}

/// A client on its own connection whose HTTP/2 flow-control windows are
/// 64 KiB (the client library's default is megabytes): the daemon can push
/// little into it before it reads, so falling behind shows at once.
pub(crate) async fn small_window_client(socket: &std::path::Path) -> AgentServiceClient<Channel> {
    let path = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://agentd.local")
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .unwrap();
    AgentServiceClient::new(channel)
}

/// `assert_eq!` for long texts: on a difference it shows the lengths and
/// where the texts part, not megabytes of both.
#[track_caller]
pub(crate) fn assert_same_text(got: &str, want: &str, what: &str) {
    if got == want {
        return;
    }
    let at = got
        .bytes()
        .zip(want.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let around = |t: &str| {
        let bytes = &t.as_bytes()[at.saturating_sub(60)..(at + 60).min(t.len())];
        String::from_utf8_lossy(bytes).into_owned()
    };
    panic!(
        "{what}: {} bytes, expected {}; they differ from byte {at}: got …{:?}…, expected …{:?}…",
        got.len(),
        want.len(),
        around(got),
        around(want)
    );
}

/// The reply text a client has, frame by frame: a snapshot's partial reply
/// replaces what it had, text deltas add to it.
#[derive(Default)]
pub(crate) struct ReplyText(pub String);

impl ReplyText {
    pub(crate) fn add(&mut self, m: &pb::AttachResponse) {
        match &m.event {
            Some(pb::attach_response::Event::Snapshot(s)) => {
                self.0 = s
                    .partial_reply
                    .as_ref()
                    .map(|p| {
                        p.content
                            .iter()
                            .filter_map(|b| match &b.block {
                                Some(pb::content_block::Block::Text(t)) => Some(t.text.as_str()),
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
            }
            Some(pb::attach_response::Event::TextDelta(d)) => self.0.push_str(&d.text),
            _ => {}
        }
    }
}
