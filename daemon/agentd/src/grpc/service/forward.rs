//! The half of an Attach stream that copies a conversation's events to its
//! client: what the hub hands out goes through the client's outbox, so a
//! slow client gets merged deltas or a fresh snapshot and never slows the
//! conversation.

use crate::grpc::access;
use crate::grpc::convert;
use crate::grpc::outbox::{Due, Outbox};
use crate::grpc::wire::FrameTx;
use crate::runtime::{ConvEvent, EventKind, Manager};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

/// Copies a conversation's events to one client. Everything the hub has
/// ready is taken at once into the client's [`Outbox`], where consecutive
/// deltas merge while they wait: for room in the client's stream, or for
/// `outbox::DELTA_FRAME_INTERVAL` to pass since the client's last delta
/// frame. A client that falls behind, or a model that streams faster than
/// that, gives fewer, bigger frames with the same text. Only a client that
/// lets the outbox and then the hub's ring fill up is sent a fresh snapshot
/// instead; it never slows the conversation or the other clients.
pub(super) async fn forward(
    manager: Arc<Manager>,
    id: String,
    sub: crate::runtime::Subscription,
    tx: FrameTx,
    shutdown: CancellationToken,
    session: Option<access::Session>,
) {
    let mut client = Forwarder::new(manager, id, sub);
    let hold = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(hold);
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    let ended = access::session_ended(session.as_ref());
    tokio::pin!(ended);
    loop {
        if !client.take_ready().await {
            return client.detach().await;
        }
        let Some(holding) = client.send_due(&tx, hold.as_mut()) else {
            return client.detach().await;
        };
        if !client.hub_open && client.out.is_empty() {
            client.tell_if_deleted(&tx).await;
            break;
        }
        // Then wait: for the held delta to fall due (what arrives meanwhile
        // is taken then, at once), for room in the stream (while frames
        // wait) or for the next event (while the outbox has room).
        tokio::select! {
            biased;
            _ = &mut cancelled => {
                let _ = tx.try_send(crate::grpc::wire::frame(&convert::event(&ConvEvent::new(
                    0,
                    0,
                    EventKind::info("agentd is shutting down"),
                ))));
                break;
            }
            // The token was revoked or expired: the stream ends, saying so.
            status = &mut ended => {
                // Within a bound: a client that reads nothing does not
                // keep the stream open.
                let _ = tokio::time::timeout(Duration::from_secs(1), tx.send(Err(status))).await;
                break;
            }
            _ = &mut hold, if holding => {}
            permit = tx.reserve(), if !holding && !client.out.is_empty() => match permit {
                Ok(permit) => {
                    if let Some(frame) = client.out.pop(Instant::now()) {
                        permit.send(frame);
                    }
                }
                Err(_) => break,
            },
            received = client.live.recv(), if !holding && client.hub_open && !client.out.is_full() => {
                if !client.take(received).await {
                    break;
                }
            }
            _ = tx.closed(), if holding || client.out.is_empty() => break,
        }
    }
    client.detach().await;
}

/// One attached client's place in its conversation's events, and the
/// frames waiting for room in its stream.
struct Forwarder {
    manager: Arc<Manager>,
    id: String,
    client_id: String,
    live: broadcast::Receiver<Arc<ConvEvent>>,
    out: Outbox,
    /// The highest sequence number queued for this client: the hub may hand
    /// out events the initial frames (or a resync snapshot) already cover.
    last: u64,
    hub_open: bool,
}

impl Forwarder {
    /// The conversation's events ended: when because it was deleted, the
    /// stream ends saying so (NOT_FOUND "conversation ID was deleted"),
    /// within a bound, so a client that reads nothing does not hold it.
    async fn tell_if_deleted(&self, tx: &FrameTx) {
        if let Err(crate::runtime::RuntimeError::NotFound(_)) = self.manager.record(&self.id) {
            let status = tonic::Status::not_found(format!("conversation {} was deleted", self.id));
            let _ = tokio::time::timeout(Duration::from_secs(1), tx.send(Err(status))).await;
        }
    }

    /// A client's forwarding state, its initial frames queued.
    fn new(manager: Arc<Manager>, id: String, sub: crate::runtime::Subscription) -> Forwarder {
        let mut out = Outbox::default();
        let mut last = 0u64;
        for ev in sub.initial {
            last = last.max(ev.seq);
            out.push(ev);
        }
        Forwarder {
            manager,
            id,
            client_id: sub.client.id,
            live: sub.live,
            out,
            last,
            hub_open: true,
        }
    }

    /// Takes everything the hub has ready, without waiting (as far as the
    /// outbox has room). Returns false when the client must be let go.
    async fn take_ready(&mut self) -> bool {
        while self.hub_open && !self.out.is_full() {
            let received = match self.live.try_recv() {
                Ok(ev) => {
                    self.queue(ev);
                    continue;
                }
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    Err(broadcast::error::RecvError::Lagged(n))
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    Err(broadcast::error::RecvError::Closed)
                }
            };
            if !self.take(received).await {
                return false;
            }
        }
        true
    }

    /// Sends what is due, as far as the client's stream has room, without
    /// waiting. Returns whether a delta is held until `hold` falls due, or
    /// None when the client's stream is closed.
    fn send_due(&mut self, tx: &FrameTx, mut hold: Pin<&mut Sleep>) -> Option<bool> {
        loop {
            match self.out.due(Instant::now()) {
                Due::Empty => return Some(false),
                Due::At(at) => {
                    hold.as_mut().reset(at);
                    return Some(true);
                }
                Due::Now => {}
            }
            match tx.try_reserve() {
                Ok(permit) => {
                    if let Some(frame) = self.out.pop(Instant::now()) {
                        permit.send(frame);
                    }
                }
                Err(mpsc::error::TrySendError::Full(())) => return Some(false),
                Err(mpsc::error::TrySendError::Closed(())) => return None,
            }
        }
    }

    /// Queues what the hub gave the client. A client that lagged behind the
    /// hub's ring is sent a snapshot instead of everything before it.
    /// Returns false when the client must be let go (its conversation is
    /// gone).
    async fn take(
        &mut self,
        received: Result<Arc<ConvEvent>, broadcast::error::RecvError>,
    ) -> bool {
        let ev = match received {
            Ok(ev) => ev,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::debug!(conversation = %self.id, client = %self.client_id, "client lagged by {n} events; resynchronising");
                match self
                    .manager
                    .resync(&self.id, self.client_id.to_string())
                    .await
                {
                    Ok(snapshot) => {
                        self.out.drop_sequenced();
                        self.last = self.last.max(snapshot.seq);
                        self.out.push(snapshot);
                        return true;
                    }
                    Err(_) => return false,
                }
            }
            Err(broadcast::error::RecvError::Closed) => {
                // What is queued still goes out.
                self.hub_open = false;
                return true;
            }
        };
        self.queue(ev);
        true
    }

    /// Queues an event from the hub unless the client has it already.
    fn queue(&mut self, ev: Arc<ConvEvent>) {
        if ev.seq > self.last {
            self.last = ev.seq;
            self.out.push(ev);
        }
    }

    /// Tells the conversation the client is gone.
    async fn detach(self) {
        self.manager.detach(&self.id, self.client_id).await;
    }
}
