//! The queue of user messages sent while a turn runs: numbered, at most
//! [`MAX_QUEUED`], delivered by the core at the turn's next model request
//! or when it ends. It lives in the record, which every commit writes, so
//! a queued message is durable before its sender hears of it.

use super::Actor;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::EventKind;
use crate::runtime::{MAX_QUEUED, NewMessage, Sent};
use crate::store::{ConversationRecord, QueuedMessage, RequestOutcome};

/// The id of queued message `number`.
pub(super) fn queued_id(number: u64) -> String {
    format!("q{number}")
}

/// The record's queue and the number the next message gets.
pub(super) struct Queue<'r> {
    queued: &'r mut Vec<QueuedMessage>,
    next: &'r mut u64,
}

impl<'r> Queue<'r> {
    pub(super) fn of(record: &'r mut ConversationRecord) -> Queue<'r> {
        Queue {
            queued: &mut record.conversation.queue,
            next: &mut record.queued_next,
        }
    }

    /// The number of the next message to queue; refused when the queue is
    /// full.
    fn reserve(&mut self) -> Result<u64, RuntimeError> {
        if self.queued.len() >= MAX_QUEUED {
            return Err(RuntimeError::QueueFull(MAX_QUEUED));
        }
        let number = *self.next;
        *self.next += 1;
        Ok(number)
    }

    /// Queues `message` (its images stored already) as `number`.
    fn push(
        &mut self,
        number: u64,
        message: NewMessage,
        mentions: Vec<agentd_core::mention::Mentioned>,
        at_ms: i64,
    ) {
        self.queued.push(QueuedMessage {
            id: queued_id(number),
            text: message.text,
            at_ms,
            from: message.from.map(|c| (c.id, c.name)),
            images: message.images.into_iter().map(|i| i.image).collect(),
            thinking: message.thinking,
            mentions,
        });
    }

    /// Drops the message `queued_id` (every one for an empty id); false
    /// when no such message is queued.
    fn drop_one(&mut self, queued_id: &str) -> bool {
        if queued_id.is_empty() {
            self.queued.clear();
            return true;
        }
        let before = self.queued.len();
        self.queued.retain(|q| q.id != queued_id);
        self.queued.len() != before
    }
}

impl Actor {
    /// Queues a user message sent while a turn runs: durable before the
    /// sender hears of it, shown to every client.
    pub(super) async fn enqueue(&mut self, message: NewMessage) -> Result<Sent, RuntimeError> {
        let saved = self.record.clone();
        let number = Queue::of(&mut self.record).reserve()?;
        let now = self.now_ms();
        let request = message.client_request_id.clone();
        super::requests::Requests::of(&mut self.record).begin(
            request,
            RequestOutcome::Queued { number },
            true,
            now,
        );
        let attached = self.read_mentions(&message.text).await;
        let stored = self
            .store_images(&message.images)
            .and_then(|()| self.store_images(&attached.images));
        if let Err(e) = stored {
            self.record = saved;
            return Err(e);
        }
        let sender = super::audit::sender(&message);
        Queue::of(&mut self.record).push(number, message, attached.mentioned, now);
        self.persist_queue(saved).await?;
        let id = queued_id(number);
        if let Some((client, text)) = sender {
            self.audit
                .message_sent(client, &text, Some(id.clone()))
                .await;
        }
        Ok(Sent::Queued(id))
    }

    /// Drops a queued message (all of them for an empty id).
    pub(super) async fn drop_queued(
        &mut self,
        queued_id: &str,
    ) -> Result<Vec<QueuedMessage>, RuntimeError> {
        let saved = self.record.clone();
        if !Queue::of(&mut self.record).drop_one(queued_id) {
            return Err(RuntimeError::NotQueued {
                id: queued_id.to_string(),
                conversation: self.record.id.clone(),
            });
        }
        self.persist_queue(saved).await?;
        Ok(self.record.conversation.queue.clone())
    }

    /// Writes the record with its changed queue and tells clients; on a
    /// store failure the record goes back to `saved`.
    async fn persist_queue(&mut self, saved: ConversationRecord) -> Result<(), RuntimeError> {
        self.record.updated_at_ms = self.now_ms();
        if let Err(e) = self.write_record().await {
            tracing::error!(conversation = %self.record.id, "persisting the queue failed: {e}");
            self.record = saved;
            return Err(RuntimeError::Store(e));
        }
        self.emit(EventKind::QueueChanged(
            self.record.conversation.queue.clone(),
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Clock;
    use std::time::Duration;

    fn message(text: &str) -> NewMessage {
        NewMessage {
            text: text.to_string(),
            ..NewMessage::default()
        }
    }

    fn ids(queued: &[QueuedMessage]) -> Vec<&str> {
        queued.iter().map(|q| q.id.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn queued_messages_are_numbered_and_stamped_in_order() {
        let clock = Clock::virtual_at(5_000);
        let (mut queued, mut next) = (Vec::new(), 0);
        let mut queue = Queue {
            queued: &mut queued,
            next: &mut next,
        };
        for text in ["one", "two"] {
            let number = queue.reserve().unwrap();
            queue.push(number, message(text), Vec::new(), clock.now_ms());
            tokio::time::advance(Duration::from_millis(40)).await;
        }
        assert_eq!(ids(&queued), ["q0", "q1"]);
        assert_eq!(queued[1].text, "two");
        assert_eq!((queued[0].at_ms, queued[1].at_ms), (5_000, 5_040));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_and_a_dropped_number_is_not_given_again() {
        let (mut queued, mut next) = (Vec::new(), 0);
        let mut queue = Queue {
            queued: &mut queued,
            next: &mut next,
        };
        for _ in 0..MAX_QUEUED {
            let number = queue.reserve().unwrap();
            queue.push(number, message("m"), Vec::new(), 0);
        }
        assert!(matches!(queue.reserve(), Err(RuntimeError::QueueFull(_))));
        assert!(queue.drop_one("q3"));
        assert!(!queue.drop_one("q3"), "dropped once");
        assert_eq!(queue.reserve().unwrap(), MAX_QUEUED as u64);
        assert!(queue.drop_one(""), "an empty id drops every message");
        assert!(queued.is_empty());
        assert_eq!(next, MAX_QUEUED as u64 + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn delivery_takes_the_oldest_and_a_continuation_takes_what_it_names() {
        let (mut queued, mut next) = (Vec::new(), 0);
        let mut queue = Queue {
            queued: &mut queued,
            next: &mut next,
        };
        for _ in 0..4 {
            let number = queue.reserve().unwrap();
            queue.push(number, message("m"), Vec::new(), 0);
        }
        // The core delivers the oldest (a transition leaves the queue
        // without it; `agentd_core::transition`).
        queue.queued.remove(0);
        // And records the continuation that took some (`ContinuedAs`).
        let taken = |conv: &agentd_core::Conversation, ids: &[&str], next: &str| {
            let made = agentd_core::Event::ContinuedAs {
                id: next.to_string(),
                automatically: false,
                taken: ids.iter().map(|id| id.to_string()).collect(),
            };
            agentd_core::transition(conv, &Default::default(), made)
                .unwrap()
                .conversation
        };
        let conv = agentd_core::Conversation {
            queue: queued,
            ..agentd_core::Conversation::default()
        };
        let conv = taken(&conv, &["q2"], "c2");
        assert_eq!(ids(&conv.queue), ["q1", "q3"]);
        let conv = taken(&conv, &["q0"], "c3");
        assert_eq!(ids(&conv.queue), ["q1", "q3"], "delivered already");
    }
}
