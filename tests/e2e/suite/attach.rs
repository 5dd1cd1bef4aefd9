//! A tiny Attach client for the end-to-end tests.

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// One attached client.
pub struct Attached {
    pub tx: mpsc::Sender<pb::AttachRequest>,
    pub rx: tonic::Streaming<pb::AttachResponse>,
}

pub fn frame(f: pb::attach_request::Frame) -> pb::AttachRequest {
    pb::AttachRequest { frame: Some(f) }
}

impl Attached {
    pub async fn open(
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
    pub async fn next(&mut self, timeout: Duration) -> pb::AttachResponse {
        match tokio::time::timeout(timeout, self.rx.message()).await {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => panic!("attach stream ended"),
            Ok(Err(s)) => panic!("attach stream failed: {s}"),
            Err(_) => panic!("no attach frame within {timeout:?}"),
        }
    }

    /// Frames up to and including the first one `stop` accepts.
    pub async fn until(
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

    pub async fn send(&self, f: pb::attach_request::Frame) {
        self.tx.send(frame(f)).await.unwrap();
    }
}

pub fn state_kind(m: &pb::AttachResponse) -> Option<pb::StateKind> {
    match &m.event {
        Some(pb::attach_response::Event::StateChanged(s)) => s
            .state
            .as_ref()
            .and_then(|s| pb::StateKind::try_from(s.kind).ok()),
        _ => None,
    }
}

pub fn is_idle(m: &pb::AttachResponse) -> bool {
    state_kind(m) == Some(pb::StateKind::Idle)
}

pub fn deltas(frames: &[pb::AttachResponse]) -> Vec<(u64, String)> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::TextDelta(d)) => Some((m.seq, d.text.clone())),
            _ => None,
        })
        .collect()
}

pub fn text_of(frames: &[pb::AttachResponse]) -> String {
    deltas(frames).into_iter().map(|(_, t)| t).collect()
}
