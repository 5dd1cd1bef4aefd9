//! Event numbering and fan-out to attached clients (`Fanout`), with the
//! replay buffer a reconnecting client is served from, and the rings the
//! conversations' hubs are made of (`Rings`).
//!
//! What a conversation holds at rest is its transcript: the buffer keeps a
//! `MessageAppended` by its number and rebuilds it from the transcript for
//! a reconnect, drops a reply's deltas once the reply is appended, and a
//! snapshot shares the transcript (`Arc`). A hub's ring exists only while
//! a client is attached; the first to attach takes the daemon's one spare
//! ring (made when a ring is given up, off the path of a first reply).

use crate::runtime::events::{ClientInfo, ConvEvent, EventKind};
use agentd_core::Message;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;

/// How many events a client may fall behind before it is resynchronised
/// with a fresh snapshot instead of slowing anyone down.
pub(crate) const HUB_CAPACITY: usize = 8192;
/// Recent events kept for clients that reconnect with `after_seq` (beyond
/// it they get a snapshot).
const REPLAY_CAPACITY: usize = 1024;
/// A running call's output events kept for clients that reconnect during
/// it (the newest; older ones go, so a reconnect may show only the tail).
const OUTPUT_REPLAY: usize = 16;
/// Event sequence numbers reserved (and persisted) ahead of use, so a
/// restarted daemon never hands out a number twice.
const SEQ_RESERVE: u64 = 1 << 16;

/// The reservation to persist when `next_seq` is the next number to hand out.
pub(super) fn reservation_from(next_seq: u64) -> u64 {
    next_seq + SEQ_RESERVE
}

/// The hub rings of the daemon's conversations, one made ahead.
///
/// A ring of [`HUB_CAPACITY`] slots costs about 0.1 ms to make (its slots
/// are written one by one, on fresh pages) and a few tens of µs to free,
/// and a conversation made its ring when its first client attached, on the
/// actor, while the first model reply was due: `agent run` paid both on
/// every task (issue 20). So the actor takes a spare made earlier, and a
/// ring given up when its last client leaves is freed, and the next spare
/// made, on the blocking pool. At most one spare waits (320 KB), and only
/// once some client has attached and left: a daemon nobody attached to
/// holds none.
#[derive(Debug, Default)]
pub(crate) struct Rings {
    spare: std::sync::Mutex<Option<broadcast::Sender<Arc<ConvEvent>>>>,
}

impl Rings {
    /// A ring nobody has used: the spare if one is waiting, else a new one.
    fn take(&self) -> broadcast::Sender<Arc<ConvEvent>> {
        let spare = match self.spare.lock() {
            Ok(mut spare) => spare.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        spare.unwrap_or_else(|| broadcast::channel(HUB_CAPACITY).0)
    }

    /// Frees `old` (a ring nobody watches any more) and makes the next
    /// spare, off the actor's thread. Outside a runtime (shutting down)
    /// the ring is freed here and no spare is made.
    pub(super) fn recycle(self: &Arc<Self>, old: broadcast::Sender<Arc<ConvEvent>>) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let rings = self.clone();
        crate::tasks::spawn_blocking("ring recycling", move || {
            drop(old);
            let mut spare = match rings.spare.lock() {
                Ok(spare) => spare,
                Err(poisoned) => poisoned.into_inner(),
            };
            if spare.is_none() {
                *spare = Some(broadcast::channel(HUB_CAPACITY).0);
            }
        });
    }

    /// Whether a spare is waiting.
    #[cfg(test)]
    pub(super) fn has_spare(&self) -> bool {
        self.spare.lock().is_ok_and(|spare| spare.is_some())
    }
}

/// Numbers events and sends them to the replay buffer and the hub, or holds
/// them back while a commit is not yet flushed.
pub(super) struct Fanout {
    /// Made when the first client attaches (its ring is the biggest thing
    /// a live conversation holds).
    hub: Option<broadcast::Sender<Arc<ConvEvent>>>,
    replay: VecDeque<Buffered>,
    /// How many `ToolOutputDelta`s `replay` holds (most of the time none,
    /// and then nothing is searched for them).
    outputs: usize,
    /// The attached clients.
    pub(super) clients: Vec<ClientInfo>,
    next_seq: u64,
    /// Events held back until the store is flushed.
    held: Option<Vec<Arc<ConvEvent>>>,
    /// Events published (numbered, in the replay buffer) whose clients are
    /// woken only by [`Fanout::send_batch`].
    batch: Option<Vec<Arc<ConvEvent>>>,
}

impl Fanout {
    pub(super) fn new(first_seq: u64) -> Fanout {
        Fanout {
            hub: None,
            replay: VecDeque::new(),
            outputs: 0,
            clients: Vec::new(),
            next_seq: first_seq,
            held: None,
            batch: None,
        }
    }

    /// The number the next event gets.
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Half the reservation `reserved` is used: it must be extended (and
    /// flushed) long before any number beyond it is handed out.
    pub(super) fn needs_reservation(&self, reserved: u64) -> bool {
        self.next_seq + SEQ_RESERVE / 2 > reserved
    }

    /// A receiver of the hub; the first one takes its ring from `rings`.
    pub(super) fn subscribe(&mut self, rings: &Rings) -> broadcast::Receiver<Arc<ConvEvent>> {
        self.hub.get_or_insert_with(|| rings.take()).subscribe()
    }

    /// Gives up the hub's ring once the last client has detached (the next
    /// one to attach takes another): a conversation nobody watches holds
    /// no ring while it stays loaded. Every receiver belongs to a client in
    /// `clients` until its Detach, so none is left behind.
    pub(super) fn unwatched_hub(&mut self) -> Option<broadcast::Sender<Arc<ConvEvent>>> {
        if self.clients.is_empty() {
            self.hub.take()
        } else {
            None
        }
    }

    /// Numbers an event and sends it on, or holds it back.
    pub(super) fn emit(&mut self, at_ms: i64, kind: EventKind) {
        let event = Arc::new(ConvEvent::new(self.next_seq, at_ms, kind));
        self.next_seq += 1;
        match &mut self.held {
            Some(held) => held.push(event),
            None => self.publish(event),
        }
    }

    /// From now on events wait for [`Fanout::release`].
    pub(super) fn hold(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// Sends what was held back.
    pub(super) fn release(&mut self) {
        for event in self.held.take().unwrap_or_default() {
            self.publish(event);
        }
    }

    /// From now on published events reach the hub (and wake the clients'
    /// streams) only at [`Fanout::send_batch`], together.
    pub(super) fn batch(&mut self) {
        self.batch.get_or_insert_with(Vec::new);
    }

    /// Whether events wait in the batch.
    pub(super) fn batched(&self) -> bool {
        self.batch.as_ref().is_some_and(|batch| !batch.is_empty())
    }

    /// Sends the batch to the hub, in order, and ends batching.
    pub(super) fn send_batch(&mut self) {
        let batch = self.batch.take().unwrap_or_default();
        if let Some(hub) = &self.hub {
            for event in batch {
                // No receivers left is fine: the clients went away.
                let _ = hub.send(event);
            }
        }
    }

    /// Forgets what was held back (its commit failed) and takes its
    /// numbers back, so the next commit writes its durable events over
    /// the failed one's.
    pub(super) fn discard_held(&mut self, next_seq: u64) {
        self.held = None;
        self.next_seq = next_seq;
    }

    fn publish(&mut self, event: Arc<ConvEvent>) {
        if let EventKind::MessageAppended { message, .. } = &event.kind
            && message.role == agentd_core::Role::Assistant
        {
            // The reply's deltas are all in the message now. A client
            // replayed from before it gets the message whole, as one
            // replayed from the store after a reload does; kept, they were
            // a second copy of every long reply for as long as the
            // conversation stayed loaded (BENCHMARKS.md, fan-out memory).
            self.replay.retain(|e| !e.is_delta());
        }
        match &event.kind {
            // The call's output is in its result now (and the end carries a
            // preview): a client replayed from before the end gets that.
            EventKind::ToolCallEnd { tool_use_id, .. } if self.outputs > 0 => {
                self.replay.retain(|e| e.output_of() != Some(tool_use_id));
                self.outputs = self.count_outputs();
            }
            EventKind::ToolOutputDelta { .. } if self.outputs >= OUTPUT_REPLAY => {
                if let Some(oldest) = self.replay.iter().position(|e| e.output_of().is_some()) {
                    self.replay.remove(oldest);
                    self.outputs -= 1;
                }
            }
            _ => {}
        }
        if self.replay.len() == REPLAY_CAPACITY
            && let Some(gone) = self.replay.pop_front()
            && gone.output_of().is_some()
        {
            self.outputs -= 1;
        }
        if matches!(event.kind, EventKind::ToolOutputDelta { .. }) {
            self.outputs += 1;
        }
        self.replay.push_back(Buffered::of(&event));
        if let Some(hub) = &self.hub {
            match &mut self.batch {
                Some(batch) => batch.push(event),
                // No receivers left is fine: the clients went away.
                None => {
                    let _ = hub.send(event);
                }
            }
        }
    }

    /// The durable events `stored` (after `after_seq`) with the ephemeral
    /// ones the buffer still holds (see [`merge`]).
    pub(super) fn merged_after(
        &self,
        stored: Vec<Arc<ConvEvent>>,
        after_seq: u64,
        transcript: &[Message],
    ) -> Option<Vec<Arc<ConvEvent>>> {
        merge(stored, &self.replay, after_seq, transcript)
    }

    fn count_outputs(&self) -> usize {
        self.replay
            .iter()
            .filter(|e| e.output_of().is_some())
            .count()
    }

    /// The buffered events after `after_seq`, when the buffer reaches back
    /// that far (messages taken from `transcript`).
    pub(super) fn buffered_after(
        &self,
        after_seq: u64,
        transcript: &[Message],
    ) -> Option<Vec<Arc<ConvEvent>>> {
        let complete = match self.replay.front() {
            Some(oldest) => oldest.seq() <= after_seq + 1,
            None => after_seq + 1 == self.next_seq,
        };
        if !complete {
            return None;
        }
        self.replay
            .iter()
            .filter(|e| e.seq() > after_seq)
            .map(|e| e.event(transcript))
            .collect()
    }
}

/// What the replay buffer keeps of an event. A message is kept by its
/// number only: the transcript holds it already, and a long reply kept
/// twice for as long as the conversation stays loaded was most of what a
/// conversation nobody watches held (BENCHMARKS.md, fan-out memory).
enum Buffered {
    Event(Arc<ConvEvent>),
    Appended {
        seq: u64,
        at_ms: i64,
        message_seq: u64,
    },
}

impl Buffered {
    fn of(event: &Arc<ConvEvent>) -> Buffered {
        match &event.kind {
            EventKind::MessageAppended { message_seq, .. } => Buffered::Appended {
                seq: event.seq,
                at_ms: event.at_ms,
                message_seq: *message_seq,
            },
            _ => Buffered::Event(event.clone()),
        }
    }

    fn is_delta(&self) -> bool {
        matches!(self, Buffered::Event(e) if e.delta_text().is_some())
    }

    /// The call whose output this is, for a `ToolOutputDelta`.
    fn output_of(&self) -> Option<&String> {
        match self {
            Buffered::Event(e) => match &e.kind {
                EventKind::ToolOutputDelta { tool_use_id, .. } => Some(tool_use_id),
                _ => None,
            },
            Buffered::Appended { .. } => None,
        }
    }

    fn seq(&self) -> u64 {
        match self {
            Buffered::Event(e) => e.seq,
            Buffered::Appended { seq, .. } => *seq,
        }
    }

    /// The event again; `None` if its message is not in `transcript`.
    fn event(&self, transcript: &[Message]) -> Option<Arc<ConvEvent>> {
        match self {
            Buffered::Event(e) => Some(e.clone()),
            Buffered::Appended {
                seq,
                at_ms,
                message_seq,
            } => Some(Arc::new(ConvEvent::new(
                *seq,
                *at_ms,
                EventKind::MessageAppended {
                    message_seq: *message_seq,
                    message: message_at(transcript, *message_seq)?.clone(),
                },
            ))),
        }
    }
}

/// The message with sequence number `message_seq` (1-based).
pub(super) fn message_at(transcript: &[Message], message_seq: u64) -> Option<&Message> {
    transcript.get(usize::try_from(message_seq).ok()?.checked_sub(1)?)
}

/// The durable events from the store merged with the ephemeral ones still
/// in the buffer, each once, in sequence order; `None` if a buffered
/// message is not in `transcript`.
fn merge(
    mut stored: Vec<Arc<ConvEvent>>,
    buffered: &VecDeque<Buffered>,
    after_seq: u64,
    transcript: &[Message],
) -> Option<Vec<Arc<ConvEvent>>> {
    let known: HashSet<u64> = stored.iter().map(|e| e.seq).collect();
    for e in buffered
        .iter()
        .filter(|e| e.seq() > after_seq && !known.contains(&e.seq()))
    {
        stored.push(e.event(transcript)?);
    }
    stored.sort_by_key(|e| e.seq);
    Some(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(seq: u64, text: &str) -> Arc<ConvEvent> {
        Arc::new(ConvEvent::new(seq, 0, EventKind::info(text.to_string())))
    }

    fn seqs(events: &[Arc<ConvEvent>]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn replay_merges_durable_and_ephemeral_events_once_in_order() {
        let stored = vec![notice(5, "durable"), notice(7, "durable")];
        let buffered: VecDeque<_> = [6, 7, 8]
            .iter()
            .map(|s| Buffered::of(&notice(*s, "buffered")))
            .collect();
        let merged = merge(stored, &buffered, 4, &[]).unwrap();
        assert_eq!(seqs(&merged), [5, 6, 7, 8]);
        // The durable copy of 7 wins over the buffered one.
        assert!(
            matches!(&merged[2].kind, EventKind::Notice(agentd_core::Notice::Info { message: t }) if t == "durable")
        );
    }

    #[test]
    fn replay_leaves_out_buffered_events_the_client_has_seen() {
        let buffered: VecDeque<_> = [3, 4, 5]
            .iter()
            .map(|s| Buffered::of(&notice(*s, "b")))
            .collect();
        assert_eq!(seqs(&merge(Vec::new(), &buffered, 4, &[]).unwrap()), [5]);
    }

    #[test]
    fn the_buffer_serves_a_reconnect_only_when_it_reaches_back_far_enough() {
        let mut fanout = Fanout::new(10);
        for _ in 0..3 {
            fanout.emit(0, EventKind::info(String::new()));
        }
        assert_eq!(seqs(&fanout.buffered_after(9, &[]).unwrap()), [10, 11, 12]);
        assert_eq!(seqs(&fanout.buffered_after(11, &[]).unwrap()), [12]);
        assert!(
            fanout.buffered_after(8, &[]).is_none(),
            "event 9 was never buffered"
        );
    }

    #[test]
    fn the_buffer_keeps_a_message_by_its_number_and_replays_it_from_the_transcript() {
        let reply = Message::user(vec![agentd_core::ContentBlock::text("x".repeat(4096))], 7);
        let mut fanout = Fanout::new(1);
        fanout.emit(0, EventKind::info("before"));
        fanout.emit(
            0,
            EventKind::MessageAppended {
                message_seq: 1,
                message: reply.clone(),
            },
        );
        assert!(
            matches!(fanout.replay[1], Buffered::Appended { message_seq: 1, .. }),
            "the buffer must not hold a second copy of the message"
        );
        let replayed = fanout
            .buffered_after(0, std::slice::from_ref(&reply))
            .unwrap();
        assert_eq!(seqs(&replayed), [1, 2]);
        assert!(matches!(
            &replayed[1].kind,
            EventKind::MessageAppended { message_seq: 1, message } if *message == reply
        ));
        assert!(
            fanout.buffered_after(0, &[]).is_none(),
            "a message the transcript lacks is not replayed as something else"
        );
    }

    #[test]
    fn a_finished_reply_replaces_its_deltas_in_the_buffer() {
        let reply = Message {
            role: agentd_core::Role::Assistant,
            ..Message::user(vec![agentd_core::ContentBlock::text("Hello, world")], 7)
        };
        let mut fanout = Fanout::new(1);
        fanout.emit(0, EventKind::info("turn started"));
        for text in ["Hello", ", ", "world"] {
            let text = text.to_string();
            fanout.emit(0, EventKind::TextDelta { index: 0, text });
        }
        // Mid-reply, a client that saw the first delta gets the rest.
        assert_eq!(seqs(&fanout.buffered_after(2, &[]).unwrap()), [3, 4]);
        fanout.emit(
            0,
            EventKind::MessageAppended {
                message_seq: 1,
                message: reply.clone(),
            },
        );
        assert_eq!(
            fanout.replay.len(),
            2,
            "the notice and the message, no deltas"
        );
        // A client that saw the first delta now gets the whole message.
        let replayed = fanout
            .buffered_after(2, std::slice::from_ref(&reply))
            .unwrap();
        assert_eq!(seqs(&replayed), [5]);
        assert!(matches!(
            &replayed[0].kind,
            EventKind::MessageAppended { message, .. } if *message == reply
        ));
        // So does one that saw nothing of it.
        let replayed = fanout
            .buffered_after(0, std::slice::from_ref(&reply))
            .unwrap();
        assert_eq!(seqs(&replayed), [1, 5]);
    }

    #[test]
    fn the_buffer_keeps_only_a_running_calls_newest_output_and_drops_it_at_the_end() {
        let mut fanout = Fanout::new(1);
        let output = |i: usize| EventKind::ToolOutputDelta {
            tool_use_id: "t1".into(),
            text: format!("line {i}\n"),
            skipped_bytes: 0,
        };
        fanout.emit(0, EventKind::info("begin"));
        for i in 0..OUTPUT_REPLAY + 4 {
            fanout.emit(0, output(i));
        }
        let texts: Vec<String> = fanout
            .buffered_after(0, &[])
            .unwrap()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::ToolOutputDelta { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts.len(), OUTPUT_REPLAY);
        assert_eq!(texts[0], "line 4\n", "the oldest went first");
        assert_eq!(fanout.outputs, OUTPUT_REPLAY);
        fanout.emit(
            0,
            EventKind::ToolCallEnd {
                tool_use_id: "t1".into(),
                name: "bash".into(),
                is_error: false,
                summary: String::new(),
                diff: None,
                duration_ms: 1,
                preview: None,
            },
        );
        assert_eq!(fanout.outputs, 0);
        assert_eq!(fanout.replay.len(), 2, "the notice and the end");
    }

    #[test]
    fn held_events_are_published_only_when_released() {
        let mut fanout = Fanout::new(1);
        let mut rx = fanout.subscribe(&Rings::default());
        fanout.hold();
        fanout.emit(0, EventKind::info("a"));
        assert!(rx.try_recv().is_err(), "held until the flush");
        fanout.release();
        assert_eq!(rx.try_recv().unwrap().seq, 1);
    }

    #[test]
    fn batched_events_reach_the_hub_together_in_order_and_are_replayable_at_once() {
        let mut fanout = Fanout::new(1);
        let mut rx = fanout.subscribe(&Rings::default());
        fanout.batch();
        assert!(!fanout.batched());
        fanout.hold();
        fanout.emit(0, EventKind::info("a"));
        fanout.release();
        fanout.emit(0, EventKind::info("b"));
        assert!(fanout.batched());
        assert!(
            rx.try_recv().is_err(),
            "no client is woken before the batch is sent"
        );
        assert_eq!(seqs(&fanout.buffered_after(0, &[]).unwrap()), vec![1, 2]);
        fanout.send_batch();
        assert_eq!(rx.try_recv().unwrap().seq, 1);
        assert_eq!(rx.try_recv().unwrap().seq, 2);
        fanout.emit(0, EventKind::info("c"));
        assert_eq!(
            rx.try_recv().unwrap().seq,
            3,
            "sent at once after the batch"
        );
    }

    #[test]
    fn the_ring_is_freed_when_the_last_client_leaves_and_made_again_for_the_next() {
        let mut fanout = Fanout::new(1);
        let client = |id: &str| ClientInfo::local(id, "c", agentd_core::ClientRole::Driver);
        let first = fanout.subscribe(&Rings::default());
        fanout.clients.push(client("a"));
        assert!(fanout.unwatched_hub().is_none(), "a client still watches");
        assert!(fanout.hub.is_some());
        fanout.clients.clear();
        drop(first);
        assert!(fanout.unwatched_hub().is_some());
        assert!(fanout.hub.is_none());
        let mut next = fanout.subscribe(&Rings::default());
        fanout.emit(0, EventKind::info("after"));
        assert_eq!(next.try_recv().unwrap().seq, 1);
    }

    #[tokio::test]
    async fn a_ring_given_up_makes_the_spare_the_next_conversation_takes() {
        let rings = Arc::new(Rings::default());
        let mut watched = Fanout::new(1);
        let rx = watched.subscribe(&rings);
        assert!(!rings.has_spare(), "nobody has left yet: no spare");
        watched.emit(0, EventKind::info("for the first conversation"));
        drop(rx);
        let ring = watched.unwatched_hub().expect("nobody watches");
        rings.recycle(ring);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !rings.has_spare() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(rings.has_spare(), "the next ring is made off the actor");
        let mut next = Fanout::new(1);
        let mut rx = next.subscribe(&rings);
        assert!(!rings.has_spare(), "the spare was taken");
        next.emit(0, EventKind::info("for the second"));
        let got = rx.try_recv().unwrap();
        assert!(
            matches!(&got.kind, EventKind::Notice(agentd_core::Notice::Info { message: t }) if t == "for the second")
        );
        assert!(rx.try_recv().is_err(), "a fresh ring: nothing of the first");
    }

    #[test]
    fn discarded_events_give_their_numbers_back() {
        let mut fanout = Fanout::new(1);
        let mut rx = fanout.subscribe(&Rings::default());
        fanout.hold();
        fanout.emit(0, EventKind::info("lost"));
        fanout.discard_held(1);
        fanout.emit(0, EventKind::info("next"));
        let got = rx.try_recv().unwrap();
        assert_eq!(got.seq, 1);
        assert!(
            matches!(&got.kind, EventKind::Notice(agentd_core::Notice::Info { message: t }) if t == "next")
        );
    }
}
