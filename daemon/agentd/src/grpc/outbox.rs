//! What one attached client has yet to be sent.
//!
//! A client's forwarding task (`service::forward`) puts every event it takes
//! from the conversation's hub here and takes frames out as fast as the
//! client's stream accepts them, a delta frame no sooner than
//! [`DELTA_FRAME_INTERVAL`] after the previous one. Consecutive deltas that
//! wait here together are merged into one frame ([`ConvEvent::absorb`]): a
//! client that keeps up with a model at its usual pace gets one frame per
//! event; one that falls behind, or a model that floods, gives fewer and
//! bigger frames with exactly the same text — instead of the client falling
//! off the hub's ring and needing a snapshot.

use super::{convert, wire};
use crate::runtime::ConvEvent;
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Status;

/// Most text one merged delta frame carries; more starts another frame.
/// (Clients decode frames of up to 4 MiB by default.)
pub(super) const MAX_MERGED_TEXT: usize = 64 * 1024;
/// An outbox holding this many frames, or this much delta text, is full:
/// the forwarding task stops taking events from the hub, whose ring then
/// holds the rest; a client that lets that overflow too is resynchronised.
/// (What does not fit stays in the hub's ring, shared by every client, not
/// copied per client.)
const MAX_FRAMES: usize = 256;
const MAX_TEXT: usize = 256 * 1024;

enum Frame {
    /// An event as the hub shares it between clients.
    Shared(Arc<ConvEvent>),
    /// Deltas merged for this client.
    Merged(Box<ConvEvent>),
}

impl Frame {
    fn event(&self) -> &ConvEvent {
        match self {
            Frame::Shared(e) => e,
            Frame::Merged(e) => e,
        }
    }
}

/// The least time between two delta frames to one client. Deltas that come
/// in between — a model streaming faster than that, or a client that is
/// behind — wait here and go out merged, as one frame: at most 2,000 delta
/// frames a second per client, each costing the daemon and the client about
/// the same whatever text it carries. (Models stream a delta every few
/// milliseconds: a delta waits only when it follows the previous one within
/// this interval, and then at most this long.)
pub(super) const DELTA_FRAME_INTERVAL: Duration = Duration::from_micros(500);

/// Frames waiting for one client, oldest first.
#[derive(Default)]
pub(super) struct Outbox {
    frames: VecDeque<Frame>,
    /// Bytes of delta text held.
    text: usize,
    /// No delta frame goes out before this (set when one goes out).
    next_delta: Option<Instant>,
}

/// Whether the oldest frame may go out.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Due {
    /// Nothing waits.
    Empty,
    Now,
    /// It is a delta, due at this instant (more may merge into it meanwhile).
    At(Instant),
}

impl Outbox {
    /// Queues `event`, merging it into the last frame when both are deltas
    /// of one block and the merged text stays within [`MAX_MERGED_TEXT`].
    pub(super) fn push(&mut self, event: Arc<ConvEvent>) {
        let len = event.delta_text().map_or(0, str::len);
        if let Some(back) = self.frames.back_mut()
            && back.event().merges_with(&event)
            && back.event().delta_text().map_or(0, str::len) + len <= MAX_MERGED_TEXT
        {
            match back {
                Frame::Merged(merged) => {
                    merged.absorb(&event);
                }
                Frame::Shared(first) => {
                    let mut merged = Box::new(ConvEvent::clone(first));
                    merged.absorb(&event);
                    *back = Frame::Merged(merged);
                }
            }
        } else {
            self.frames.push_back(Frame::Shared(event));
        }
        self.text += len;
    }

    /// When the oldest frame may go out: a delta frame no sooner than
    /// [`DELTA_FRAME_INTERVAL`] after the last one, anything else at once.
    pub(super) fn due(&self, now: Instant) -> Due {
        match self.frames.front() {
            None => Due::Empty,
            Some(f) => match self.next_delta {
                Some(at) if at > now && f.event().delta_text().is_some() => Due::At(at),
                _ => Due::Now,
            },
        }
    }

    /// The oldest frame, encoded for the wire, as it goes out at `now`
    /// (whether or not it was due). An event the hub shares is encoded once
    /// for every client it goes to ([`wire::shared`]).
    pub(super) fn pop(&mut self, now: Instant) -> Option<Result<Bytes, Status>> {
        let frame = self.frames.pop_front()?;
        if let Some(text) = frame.event().delta_text() {
            self.text -= text.len();
            self.next_delta = Some(now + DELTA_FRAME_INTERVAL);
        }
        Some(match frame {
            Frame::Shared(e) => wire::shared(&e),
            Frame::Merged(e) => wire::frame(&convert::event_owned(*e)),
        })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Whether the forwarding task should stop taking events from the hub
    /// until the client has read some.
    pub(super) fn is_full(&self) -> bool {
        self.frames.len() >= MAX_FRAMES || self.text >= MAX_TEXT
    }

    /// Drops everything a resync snapshot replaces: every frame with a
    /// sequence number. Frames of sequence number 0 are addressed to this
    /// client alone (a `Resumed` marker, a notice) and stay.
    pub(super) fn drop_sequenced(&mut self) {
        self.frames.retain(|f| f.event().seq == 0);
        self.text = self
            .frames
            .iter()
            .map(|f| f.event().delta_text().map_or(0, str::len))
            .sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::EventKind;
    use agent_proto::v1 as pb;
    use pb::attach_response::Event as E;

    fn ev(seq: u64, kind: EventKind) -> Arc<ConvEvent> {
        Arc::new(ConvEvent::new(seq, 1000 + seq as i64, kind))
    }

    /// The oldest frame, decoded again.
    fn pop(out: &mut Outbox, now: Instant) -> Option<pb::AttachResponse> {
        out.pop(now).map(|f| wire::decode(&f.unwrap()).unwrap())
    }

    fn text(seq: u64, index: u32, t: &str) -> Arc<ConvEvent> {
        ev(
            seq,
            EventKind::TextDelta {
                index,
                text: t.into(),
            },
        )
    }

    /// Everything, due or not.
    fn drain(out: &mut Outbox) -> Vec<pb::AttachResponse> {
        let now = Instant::now();
        std::iter::from_fn(|| pop(out, now)).collect()
    }

    fn delta_frame(f: &pb::AttachResponse) -> Option<(u64, u32, &str)> {
        match &f.event {
            Some(E::TextDelta(d)) => Some((f.seq, d.block_index, d.text.as_str())),
            _ => None,
        }
    }

    #[test]
    fn waiting_deltas_become_one_frame_in_order_with_the_last_seq() {
        let mut out = Outbox::default();
        out.push(ev(1, EventKind::ReplyBegin { attempt: 1 }));
        out.push(text(2, 0, "Hel"));
        out.push(text(3, 0, "lo"));
        out.push(text(5, 0, " ✓"));
        out.push(ev(6, EventKind::info("between")));
        out.push(text(7, 0, "again"));
        out.push(text(8, 1, "other block"));
        out.push(ev(
            9,
            EventKind::ThinkingDelta {
                index: 1,
                text: "not text".into(),
            },
        ));
        let frames = drain(&mut out);
        assert!(out.is_empty());
        let seqs: Vec<u64> = frames.iter().map(|f| f.seq).collect();
        assert_eq!(seqs, [1, 5, 6, 7, 8, 9]);
        assert_eq!(delta_frame(&frames[1]), Some((5, 0, "Hello ✓")));
        assert_eq!(frames[1].at_ms, 1005, "the time of the last delta merged");
        assert!(matches!(frames[2].event, Some(E::Notice(_))));
        assert_eq!(delta_frame(&frames[3]), Some((7, 0, "again")));
        assert_eq!(delta_frame(&frames[4]), Some((8, 1, "other block")));
        assert!(matches!(&frames[5].event, Some(E::ThinkingDelta(d)) if d.text == "not text"));
    }

    #[test]
    fn a_sent_frame_is_not_merged_into_and_merged_text_is_bounded() {
        let mut out = Outbox::default();
        let now = Instant::now();
        out.push(text(1, 0, "a"));
        assert_eq!(delta_frame(&pop(&mut out, now).unwrap()), Some((1, 0, "a")));
        out.push(text(2, 0, "b"));
        assert_eq!(delta_frame(&pop(&mut out, now).unwrap()), Some((2, 0, "b")));

        let piece = "x".repeat(1000);
        let n = 200u64;
        for seq in 1..=n {
            out.push(text(seq, 0, &piece));
        }
        let frames = drain(&mut out);
        let per_frame = MAX_MERGED_TEXT / piece.len();
        assert_eq!(frames.len(), (n as usize).div_ceil(per_frame));
        let mut all = String::new();
        let mut last = 0;
        for f in &frames {
            let (seq, _, t) = delta_frame(f).unwrap();
            assert!(t.len() <= MAX_MERGED_TEXT);
            assert!(seq > last);
            last = seq;
            all.push_str(t);
        }
        assert_eq!(last, n);
        assert_eq!(all, piece.repeat(n as usize));
    }

    #[test]
    fn it_is_full_by_frames_or_by_text_and_a_resync_keeps_only_unsequenced_frames() {
        let mut out = Outbox::default();
        for seq in 1..MAX_FRAMES as u64 {
            out.push(ev(seq, EventKind::info(format!("n{seq}"))));
        }
        assert!(!out.is_full());
        out.push(ev(0, EventKind::info("for this client")));
        assert!(out.is_full());
        out.drop_sequenced();
        assert!(!out.is_full());
        let frames = drain(&mut out);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].seq, 0);

        let piece = "y".repeat(MAX_MERGED_TEXT);
        for seq in 1..=(MAX_TEXT / MAX_MERGED_TEXT) as u64 {
            assert!(!out.is_full());
            out.push(text(seq, 0, &piece));
        }
        assert!(out.is_full(), "full by text");
        out.pop(Instant::now());
        assert!(!out.is_full());
        out.drop_sequenced();
        assert!(out.is_empty());
    }

    #[test]
    fn a_delta_right_after_a_delta_frame_waits_and_merges_other_frames_do_not_wait() {
        let mut out = Outbox::default();
        let t0 = Instant::now();
        assert_eq!(out.due(t0), Due::Empty);
        out.push(text(1, 0, "a"));
        assert_eq!(out.due(t0), Due::Now, "the first delta goes at once");
        assert_eq!(delta_frame(&pop(&mut out, t0).unwrap()), Some((1, 0, "a")));

        let soon = t0 + DELTA_FRAME_INTERVAL / 5;
        let due = t0 + DELTA_FRAME_INTERVAL;
        out.push(text(2, 0, "b"));
        assert_eq!(out.due(soon), Due::At(due));
        out.push(text(3, 0, "c"));
        out.push(ev(4, EventKind::info("after the deltas")));
        assert_eq!(
            out.due(soon),
            Due::At(due),
            "what follows a delta waits too"
        );
        assert_eq!(out.due(due), Due::Now);
        assert_eq!(
            delta_frame(&pop(&mut out, due).unwrap()),
            Some((3, 0, "bc"))
        );
        assert_eq!(out.due(due), Due::Now, "a notice is never held");
        assert!(matches!(
            pop(&mut out, due).unwrap().event,
            Some(E::Notice(_))
        ));

        // Long after the last delta frame, a delta goes at once.
        let later = due + DELTA_FRAME_INTERVAL * 3;
        out.push(text(5, 0, "d"));
        assert_eq!(out.due(later), Due::Now);
    }
}
