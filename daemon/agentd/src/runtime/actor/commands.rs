//! A client's requests that go to the core: a user message (its request
//! id, the core's answer before its hooks run: refused, queued or checked
//! by its hooks), a cancel, a permission answer, a compaction and a
//! continuation's seed. Each is applied as its request: the request id and
//! the turn are written with its effect and undone with it.

use super::requests::Requests;
use super::{Actor, Reply};
use crate::runtime::error::RuntimeError;
use crate::runtime::{Answer, NewMessage, Sent};
use crate::store::RequestOutcome;
use agentd_core::{Effect, Event, PromptHooks, Rejected, Sending};

impl Actor {
    /// A user message: answered at once when it is a retry; else the core
    /// answers it before any of its hooks run: refused, queued (the client
    /// asked, and a turn runs), or to be checked by its hooks and then sent.
    pub(super) async fn send(&mut self, message: NewMessage, reply: Reply<Sent>) {
        let prior = Requests::of(&mut self.record)
            .prior_send(message.client_request_id.as_deref(), message.expected_turn);
        if let Some(result) = prior {
            let _ = reply.send(result);
            return;
        }
        self.recovery_notices.clear();
        let event = Event::UserMessage {
            text: message.text.clone(),
            images: message.images.iter().map(|i| i.image.clone()).collect(),
            sending: self.sending(message.queue_if_busy, PromptHooks::Due, message.thinking),
        };
        // The state is unchanged by these answers: nothing to commit.
        let answer = agentd_core::transition(&self.record.conversation, &self.context(None), event);
        match answer.map(|t| t.effects) {
            Err(r) => {
                let _ = reply.send(Err(RuntimeError::Rejected(r)));
            }
            Ok(effects) if effects == [Effect::Enqueue] => {
                let _ = reply.send(self.enqueue(message).await);
            }
            Ok(effects) if effects == [Effect::RunPromptHooks] => {
                let (session_start, submit) = self.hooks_for_message();
                if session_start.is_empty() && submit.is_empty() {
                    let result = self.send_now(message).await;
                    let _ = reply.send(result);
                } else {
                    self.check_prompt(session_start, submit, message, reply);
                }
            }
            Ok(effects) => {
                tracing::error!(conversation = %self.record.id, "a message not yet checked was answered with {effects:?}");
                let _ = reply.send(Err(RuntimeError::NotAllowed(
                    "the message could not be taken".to_string(),
                )));
            }
        }
    }

    /// How a user message is sent now: `hooks` says where it stands with
    /// its prompt hooks; another message in its hooks counts as a turn.
    fn sending(
        &self,
        queue_if_busy: bool,
        hooks: PromptHooks,
        thinking: Option<agentd_core::Thinking>,
    ) -> Sending {
        Sending {
            queue_if_busy,
            hooks,
            other_in_hooks: self.work.prompt_checking(),
            thinking,
            mentions: Vec::new(),
        }
    }

    /// Feeds a user message (its hooks, if any, have run), as its
    /// request.
    pub(super) async fn send_now(&mut self, message: NewMessage) -> Result<Sent, RuntimeError> {
        let message_seq = self.transcript.len() as u64 + 1;
        let attached = self.read_mentions(&message.text).await;
        self.store_images(&message.images)?;
        self.store_images(&attached.images)?;
        let sender = super::audit::sender(&message);
        // Past its hooks it is taken or refused, not queued.
        let mut sending = self.sending(false, PromptHooks::Passed, message.thinking);
        sending.mentions = attached.mentioned;
        self.apply_request(
            message.client_request_id,
            RequestOutcome::Sent { message_seq },
            true,
            Event::UserMessage {
                text: message.text,
                images: message.images.into_iter().map(|i| i.image).collect(),
                sending,
            },
        )
        .await?;
        if let Some((client, text)) = sender {
            self.audit.message_sent(client, &text, None).await;
        }
        Ok(Sent::Appended(self.last_user_message_seq()))
    }

    /// Cancels the turn; returns whether anything was running.
    pub(super) async fn cancel(
        &mut self,
        client_request_id: Option<String>,
    ) -> Result<bool, RuntimeError> {
        if let Some(prior) =
            Requests::of(&mut self.record).prior_cancel(client_request_id.as_deref())
        {
            return prior;
        }
        // Hooks checking a message that is not sent yet stop too.
        self.work.cancel_prompt();
        let was_busy = !self.record.conversation.state.is_at_rest();
        self.apply_request(
            client_request_id,
            RequestOutcome::Cancelled { was_busy },
            false,
            Event::UserCancel,
        )
        .await
        .map(|()| was_busy)
    }

    /// Answers the pending permission (or plan approval) request.
    pub(super) async fn answer(&mut self, answer: Answer) -> Result<(), RuntimeError> {
        let Answer {
            request_id,
            decision,
            feedback,
            scope,
            by,
            client_request_id,
            plan,
        } = answer;
        if let Some(prior) =
            Requests::of(&mut self.record).prior_answer(client_request_id.as_deref())
        {
            return prior;
        }
        let event = match plan {
            Some(answer) => Event::PlanAnswered {
                request_id,
                answer,
                by,
            },
            None => Event::PermissionAnswered {
                request_id,
                decision,
                feedback,
                scope,
                by,
            },
        };
        self.apply_request(client_request_id, RequestOutcome::Answered, false, event)
            .await
    }

    /// Asks for a continuation summary now (from Idle).
    pub(super) async fn compact(&mut self) -> Result<(), RuntimeError> {
        self.recovery_notices.clear();
        match self.apply(Event::UserTriggerContinuation).await {
            Err(RuntimeError::Rejected(Rejected::NotApplicable { state, .. })) => {
                Err(RuntimeError::NotAllowed(format!(
                    "conversation {} can be compacted only when it is idle (it is in state {state}); send a message first",
                    self.record.id
                )))
            }
            other => other,
        }
    }

    /// Starts this new conversation as a continuation (`ContinuedFrom`).
    pub(super) async fn seed(&mut self, event: Event) -> Result<Sent, RuntimeError> {
        self.apply_request(None, RequestOutcome::Sent { message_seq: 1 }, true, event)
            .await
            .map(|()| Sent::Appended(self.last_user_message_seq()))
    }

    /// Applies `event` as the request `client_request_id`: the request,
    /// what it did and (for a message) the new turn are written in the
    /// same record as the event's effect, and undone with it on failure.
    async fn apply_request(
        &mut self,
        client_request_id: Option<String>,
        outcome: RequestOutcome,
        new_turn: bool,
        event: Event,
    ) -> Result<(), RuntimeError> {
        let now = self.now_ms();
        let undo = Requests::of(&mut self.record).begin(client_request_id, outcome, new_turn, now);
        let result = self.apply(event).await;
        if result.is_err() {
            undo.undo(&mut self.record);
        }
        result
    }
}
