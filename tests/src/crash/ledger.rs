//! What clients were told: the ledger of acknowledged messages, and the
//! attached observers that fill it.
//!
//! A message counts as acknowledged when a `SendMessage` (or a
//! `CreateConversation` with a prompt) returned its sequence number, or an
//! attached client was shown it (`MessageAppended`, or a snapshot). The
//! daemon persists and flushes before it tells anyone, so every one of
//! these must survive any kill, unchanged.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_client::AgentServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::check;

/// What one conversation's clients were told.
#[derive(Debug, Default)]
struct Acks {
    /// Messages shown to an attached client: seq → message, and how.
    shown: BTreeMap<u64, (pb::Message, String)>,
    /// User messages whose sending was acknowledged: seq → text.
    sent: BTreeMap<u64, String>,
    /// The last event sequence number an observer saw.
    last_event: u64,
}

/// Everything acknowledged, per conversation id; shared by the observers
/// and the senders.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    convs: HashMap<String, Acks>,
    /// Violations seen while recording (reported at the next check).
    violations: Vec<String>,
    /// Frames the observers received.
    frames: u64,
}

impl Ledger {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A `SendMessage`/`CreateConversation` acknowledged user message `seq`.
    pub fn sent(&self, id: &str, seq: u64, text: &str) {
        let mut inner = self.lock();
        let acks = inner.convs.entry(id.to_string()).or_default();
        let previous = acks.sent.insert(seq, text.to_string());
        if let Some(previous) = previous.filter(|p| p != text) {
            inner.violations.push(format!(
                "conversation {id}: two sends were both acknowledged as message {seq}: {previous:?} and {text:?}"
            ));
        }
    }

    /// A client was shown message `m` (`how`: which frame).
    fn shown(&self, id: &str, m: &pb::Message, how: String) {
        let mut inner = self.lock();
        let acks = inner.convs.entry(id.to_string()).or_default();
        match acks.shown.get(&m.seq) {
            Some((before, how_before)) if before != m => {
                let violation = format!(
                    "conversation {id}: message {} was shown as {:?} ({how_before}) and later as {:?} ({how})",
                    m.seq,
                    check::blocks_of(before),
                    check::blocks_of(m)
                );
                inner.violations.push(violation);
            }
            Some(_) => {}
            None => {
                acks.shown.insert(m.seq, (m.clone(), how));
            }
        }
    }

    /// The last event sequence number seen in conversation `id`.
    pub fn last_event(&self, id: &str) -> u64 {
        self.lock().convs.get(id).map_or(0, |a| a.last_event)
    }

    /// Records event `seq` of `id`; a violation unless it is above every
    /// one seen before (equal is allowed for a snapshot, which carries the
    /// last number assigned).
    fn event(&self, id: &str, seq: u64, what: &str, snapshot: bool) {
        let mut inner = self.lock();
        inner.frames += 1;
        if seq == 0 {
            return;
        }
        let acks = inner.convs.entry(id.to_string()).or_default();
        let last = acks.last_event;
        let fine = seq > last || (snapshot && seq == last);
        acks.last_event = acks.last_event.max(seq);
        if !fine {
            inner.violations.push(format!(
                "conversation {id}: event seq {seq} ({what}) arrived after seq {last}: a number was delivered twice or went backwards"
            ));
        }
    }

    /// Frames received by all observers so far.
    pub fn frames(&self) -> u64 {
        self.lock().frames
    }

    /// The first violation recorded so far.
    pub fn violation(&self) -> Option<String> {
        self.lock().violations.first().cloned()
    }

    /// How many messages of `id` were acknowledged.
    pub fn acknowledged(&self, id: &str) -> usize {
        let inner = self.lock();
        inner.convs.get(id).map_or(0, |a| {
            a.shown.len() + a.sent.keys().filter(|s| !a.shown.contains_key(s)).count()
        })
    }

    /// Checks that every acknowledged message of `id` is in `stored`,
    /// unchanged.
    pub fn check(&self, id: &str, stored: &[pb::Message]) -> Result<(), String> {
        let inner = self.lock();
        let Some(acks) = inner.convs.get(id) else {
            return Ok(());
        };
        let at = |seq: u64| {
            usize::try_from(seq)
                .ok()
                .and_then(|s| s.checked_sub(1))
                .and_then(|i| stored.get(i))
        };
        for (seq, text) in &acks.sent {
            let Some(m) = at(*seq) else {
                return Err(format!(
                    "conversation {id}: user message {seq} ({text:?}) was acknowledged but is gone (the store has {} messages)",
                    stored.len()
                ));
            };
            let has_text = check::blocks_of(m)
                .iter()
                .any(|b| matches!(b, check::Block::Text(t) if t == text));
            if m.role != pb::Role::User as i32 || !has_text {
                return Err(format!(
                    "conversation {id}: acknowledged user message {seq} was {text:?}, the store holds {:?}",
                    check::blocks_of(m)
                ));
            }
        }
        for (seq, (shown, how)) in &acks.shown {
            match at(*seq) {
                None => {
                    return Err(format!(
                        "conversation {id}: message {seq} was shown to a client ({how}) but is gone (the store has {} messages): {:?}",
                        stored.len(),
                        check::blocks_of(shown)
                    ));
                }
                Some(m) if m != shown => {
                    return Err(format!(
                        "conversation {id}: message {seq} was shown ({how}) as {shown:?}\n  but the store holds {m:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Attaches to conversation `id` (resuming after the last event the ledger
/// saw) and records what it is shown until the stream ends (the daemon
/// died) or fails.
pub async fn observe(client: AgentServiceClient<Channel>, id: String, ledger: Arc<Ledger>) {
    let mut client = client;
    let after_seq = ledger.last_event(&id);
    let (tx, rx) = mpsc::channel(4);
    let subscribe = pb::AttachRequest {
        frame: Some(pb::attach_request::Frame::Subscribe(pb::Subscribe {
            conversation_id: id.clone(),
            after_seq,
            client_name: "crash-test observer".to_string(),
            ..Default::default()
        })),
    };
    if tx.send(subscribe).await.is_err() {
        return;
    }
    let Ok(response) = client.attach(ReceiverStream::new(rx)).await else {
        return;
    };
    let mut stream = response.into_inner();
    // `tx` stays alive: dropping it would end our half of the stream.
    while let Ok(Some(frame)) = stream.message().await {
        use pb::attach_response::Event;
        match &frame.event {
            Some(Event::Snapshot(s)) => {
                ledger.event(&id, frame.seq, "snapshot", true);
                for m in &s.messages {
                    ledger.shown(&id, m, format!("snapshot at event {}", frame.seq));
                }
            }
            Some(Event::MessageAppended(a)) => {
                ledger.event(&id, frame.seq, "message appended", false);
                if let Some(m) = &a.message {
                    ledger.shown(&id, m, format!("MessageAppended event {}", frame.seq));
                }
            }
            _ => ledger.event(&id, frame.seq, "event", false),
        }
    }
    drop(tx);
}
