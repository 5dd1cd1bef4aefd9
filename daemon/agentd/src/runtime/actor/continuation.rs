//! Continuing an exhausted conversation in a new one: whether the daemon
//! owes one by itself (`[context] auto_continue`), asking the manager for
//! it, what the new conversation is seeded from, and recording where this
//! one went on so its clients can follow.

use super::Actor;
use crate::config::ContextSection;
use crate::runtime::Seed;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::{ConvEvent, EventKind};
use crate::store::ConversationRecord;
use agentd_core::ConvState;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where this conversation asks the manager to continue it by itself.
pub(super) struct Continuation {
    requests: mpsc::UnboundedSender<String>,
}

impl Continuation {
    pub(super) fn new(requests: mpsc::UnboundedSender<String>) -> Continuation {
        Continuation { requests }
    }

    /// Asks the manager to continue `record` when the record says the
    /// daemon owes it a continuation (`ContinuationChain::pending`).
    pub(super) fn ask_if_owed(&self, record: &ConversationRecord) {
        if record.conversation.continuation.pending
            && matches!(
                record.conversation.state,
                ConvState::ContextExhausted { .. }
            )
        {
            let _ = self.requests.send(record.id.clone());
        }
    }

    /// Once exhausted: asks for the continuation the daemon owes, or says
    /// why it makes none when it would have (the notice for clients).
    pub(super) fn after_exhaustion(
        &self,
        config: &ContextSection,
        record: &ConversationRecord,
    ) -> Option<String> {
        if record.conversation.continuation.pending {
            self.ask_if_owed(record);
            None
        } else if config.auto_continue && record.conversation.continuation.continued_as.is_none() {
            Some(format!(
                "not continued automatically: {} continuations in a row is the limit ([context] max_hops); `agent continue` goes on",
                config.max_hops
            ))
        } else {
            None
        }
    }

    /// What a continuation of `record` is made from, or the one it has.
    pub(super) fn seed(record: &ConversationRecord) -> Result<Seed, RuntimeError> {
        match (
            &record.conversation.continuation.continued_as,
            &record.conversation.state,
        ) {
            (Some(next), _) => Ok(Seed::Continued(next.clone())),
            (None, ConvState::ContextExhausted { .. }) => {
                Ok(Seed::Exhausted(Box::new(record.clone())))
            }
            (None, state) => Err(RuntimeError::NotAllowed(format!(
                "conversation {} cannot be continued: its context is not exhausted \
                 (state {}); `agent compact` asks for a summary first",
                record.id,
                state.name()
            ))),
        }
    }

    /// For a client that attaches (or comes back) after the conversation
    /// was continued: where it goes on, addressed to that client alone
    /// (the live event may be long gone from the buffer), so it can follow.
    pub(super) fn frame(record: &ConversationRecord, now: i64) -> Option<Arc<ConvEvent>> {
        let next = record.conversation.continuation.continued_as.clone()?;
        Some(Arc::new(ConvEvent::new(
            0,
            now,
            EventKind::ConversationContinued {
                conversation_id: next,
                hop: record.conversation.continuation.hop + 1,
                automatic: record.conversation.continuation.continued_automatically,
            },
        )))
    }
}

impl Actor {
    /// Records that this conversation continues as `next` (its queued
    /// messages `taken` went with it): the core's `ContinuedAs`, committed
    /// as any transition (the queue's change announced with it). Then
    /// tells every attached client, so they can follow. Recorded already:
    /// nothing to do.
    pub(super) async fn mark_continued(
        &mut self,
        next: String,
        hop: u32,
        automatic: bool,
        taken: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let made = agentd_core::Event::ContinuedAs {
            id: next.clone(),
            automatically: automatic,
            taken,
        };
        match self.apply(made).await {
            Ok(()) => {}
            Err(RuntimeError::Rejected(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.emit(EventKind::ConversationContinued {
            conversation_id: next,
            hop,
            automatic,
        });
        Ok(())
    }

    /// Once exhausted: asks the manager for the continuation the daemon
    /// owes, or tells clients why it makes none when it would have.
    pub(super) fn after_exhaustion(&mut self) {
        let notice = self
            .continuation
            .after_exhaustion(&self.shared.config.context, &self.record);
        if let Some(notice) = notice {
            self.emit(EventKind::info(notice));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Clock;
    use std::time::Duration;

    fn exhausted(record: &mut ConversationRecord) {
        record.conversation.state = ConvState::ContextExhausted {
            summary: "so far".into(),
            final_usage: Default::default(),
        };
    }

    fn config(auto_continue: bool, max_hops: u32) -> ContextSection {
        ContextSection {
            auto_continue,
            max_hops,
            ..ContextSection::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_owed_continuation_is_asked_for_once_the_context_is_exhausted() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let continuation = Continuation::new(tx);
        let mut record = crate::runtime::test_record("c1", dir.path());
        record.conversation.continuation.pending = true;
        continuation.ask_if_owed(&record);
        assert!(rx.try_recv().is_err(), "not exhausted yet");
        exhausted(&mut record);
        assert_eq!(
            continuation.after_exhaustion(&config(true, 3), &record),
            None
        );
        assert_eq!(rx.recv().await.unwrap(), "c1");
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_hop_limit_none_is_due_and_clients_are_told_why() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let continuation = Continuation::new(tx);
        let mut record = crate::runtime::test_record("c1", dir.path());
        exhausted(&mut record);
        // Whether one is due is the core's decision (its test
        // `an_exhausted_context_is_continued_by_the_daemon_when_it_is_on_and_the_chain_allows`).
        record.conversation.continuation.hop = 3;
        let notice = continuation.after_exhaustion(&config(true, 3), &record);
        assert!(notice.unwrap().contains("3 continuations in a row"));
        assert_eq!(
            continuation.after_exhaustion(&config(false, 3), &record),
            None
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(rx.try_recv().is_err(), "nothing was asked");
    }

    #[tokio::test(start_paused = true)]
    async fn a_continued_conversation_seeds_nothing_new_and_tells_attaching_clients() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::virtual_at(9_000);
        let mut record = crate::runtime::test_record("c1", dir.path());
        assert!(matches!(
            Continuation::seed(&record),
            Err(RuntimeError::NotAllowed(_))
        ));
        assert!(Continuation::frame(&record, clock.now_ms()).is_none());
        exhausted(&mut record);
        assert!(matches!(
            Continuation::seed(&record),
            Ok(Seed::Exhausted(_))
        ));
        record.conversation.continuation.pending = true;
        let made = agentd_core::Event::ContinuedAs {
            id: "c2".to_string(),
            automatically: true,
            taken: Vec::new(),
        };
        let t = agentd_core::transition(&record.conversation, &Default::default(), made).unwrap();
        assert!(t.effects.is_empty());
        record.conversation = t.conversation;
        assert!(
            !record.conversation.continuation.pending,
            "the continuation is made"
        );
        assert!(matches!(Continuation::seed(&record), Ok(Seed::Continued(n)) if n == "c2"));
        let frame = Continuation::frame(&record, clock.now_ms()).unwrap();
        assert!(matches!(
            &frame.kind,
            EventKind::ConversationContinued { conversation_id, hop: 1, automatic: true }
                if conversation_id == "c2"
        ));
        assert_eq!((frame.seq, frame.at_ms), (0, 9_000));
    }
}
