//! The manager's side of a client's requests to a conversation: checked
//! here, then handed to the conversation's actor as a command, whose answer
//! comes back; and what the manager's own tasks (sub-agents,
//! continuations) send to actors.

use super::actor::{Command, Input, Subscription};
use super::{
    Answer, BudgetAnswer, ClientInfo, ConvEvent, Manager, NewConversation, NewMessage, Parent,
    RuntimeError, Seed, Sent, Settings, model_name,
};
use crate::store::ConversationRecord;
use agentd_core::{ConvState, Mode, Usage};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Manager {
    /// Asks for a continuation summary now (REQ-BED-023): the conversation
    /// must be idle. Returns the record once the request is under way.
    pub(crate) async fn compact(&self, id: &str) -> Result<ConversationRecord, RuntimeError> {
        self.ask(id, |reply| Command::Compact { reply }).await??;
        self.record(id)
    }

    /// Continues the exhausted conversation `id` in a new one (see
    /// [`Parent`]), talking to `model` when one is given (else to the model
    /// a switch too large for the old one asked for, else to its own);
    /// `automatic` when
    /// the daemon does it by itself. Asked
    /// again, it returns the continuation made the first time: the new
    /// conversation is created under a request id derived from the old
    /// one, so even a crash between creating it and marking the old one
    /// creates nothing twice.
    pub(crate) async fn continue_conversation(
        &self,
        id: &str,
        automatic: bool,
        model: Option<String>,
    ) -> Result<ConversationRecord, RuntimeError> {
        let old = match self.ask(id, |reply| Command::TakeSeed { reply }).await?? {
            Seed::Continued(next) => return self.record(&next),
            Seed::Exhausted(record) => *record,
        };
        let summary = match &old.conversation.state {
            ConvState::ContextExhausted { summary, .. } => summary.clone(),
            _ => String::new(),
        };
        let new = NewConversation {
            cwd: old.cwd.clone(),
            model: model
                .or_else(|| old.models.continue_on.clone())
                .unwrap_or_else(|| old.model.clone()),
            mode: Some(old.conversation.mode),
            allow_rules: old.setup.allow_rules.clone(),
            additional_dirs: old.setup.additional_dirs.clone(),
            // The servers a client gave go on with the work.
            mcp_servers: old.setup.mcp_servers.clone(),
            client_request_id: Some(format!("continue:{}", old.id)),
            parent: Some(Parent {
                id: old.id.clone(),
                hop: old.conversation.continuation.hop,
                title: old.title.clone(),
                summary,
                queued: old
                    .conversation
                    .queue
                    .iter()
                    .map(|q| (q.text.clone(), q.images.clone()))
                    .collect(),
            }),
            // A sub-agent fails when its context is exhausted: only a
            // user's conversation is continued.
            sub_agent: None,
            // The parent's (see `give_environment`).
            environment: None,
            thinking: old.conversation.thinking,
        };
        let next = self.create(new, None).await?;
        let taken: Vec<String> = old
            .conversation
            .queue
            .iter()
            .map(|q| q.id.clone())
            .collect();
        self.ask(id, |reply| Command::MarkContinued {
            next: next.id.clone(),
            hop: next.conversation.continuation.hop,
            automatic,
            taken,
            reply,
        })
        .await??;
        Ok(next)
    }

    /// Sends a user message; returns its message sequence number once durable.
    #[cfg(test)]
    pub(crate) async fn send(&self, id: &str, text: String) -> Result<u64, RuntimeError> {
        self.send_message(
            id,
            NewMessage {
                text,
                ..NewMessage::default()
            },
        )
        .await
        .map(|sent| sent.message_seq())
    }

    /// Sends a user message with its request id and turn guard; says what
    /// became of it (appended or queued) once that is durable.
    pub(crate) async fn send_message(
        &self,
        id: &str,
        message: NewMessage,
    ) -> Result<Sent, RuntimeError> {
        // The core's rule, applied before the conversation is loaded for
        // it (a check of its own here refused an image alone).
        if agentd_core::message::says_nothing(&message.text, message.images.len()) {
            return Err(RuntimeError::InvalidArgument(
                agentd_core::Rejected::EmptyMessage.to_string(),
            ));
        }
        self.ask(id, |reply| Command::Send { message, reply })
            .await?
    }

    /// Answers the budget that holds conversation `id`; returns the
    /// record as it is now.
    pub(crate) async fn answer_budget(
        &self,
        id: &str,
        answer: BudgetAnswer,
    ) -> Result<ConversationRecord, RuntimeError> {
        if let Some(by) = answer.raise_by
            && !(by.is_finite() && by > 0.0 && by < 1e12)
        {
            return Err(RuntimeError::InvalidArgument(format!(
                "raise_by must be a positive amount, got {by}"
            )));
        }
        self.ask(id, |reply| Command::AnswerBudget { answer, reply })
            .await??;
        self.record(id)
    }

    /// Changes a conversation's mode and/or model; returns the record as it
    /// is now.
    pub(crate) async fn update(
        &self,
        id: &str,
        settings: Settings,
    ) -> Result<ConversationRecord, RuntimeError> {
        if settings.mode == Some(Mode::Bypass) && !self.shared.config.allow_bypass {
            return Err(RuntimeError::NotAllowed(
                "bypass mode is not allowed: start agentd with --allow-bypass".into(),
            ));
        }
        let settings = Settings {
            model: settings.model.as_deref().map(model_name).transpose()?,
            ..settings
        };
        self.ask(id, |reply| Command::Update { settings, reply })
            .await?
    }

    /// Drops the queued message `queued_id` (every queued message when
    /// empty); returns what is still queued.
    pub(crate) async fn drop_queued(
        &self,
        id: &str,
        queued_id: String,
    ) -> Result<Vec<crate::store::QueuedMessage>, RuntimeError> {
        self.ask(id, |reply| Command::DropQueued { queued_id, reply })
            .await?
    }

    /// Gives a parent the end of one of its sub-agents.
    pub(super) async fn deliver(
        &self,
        parent_id: &str,
        result: agentd_core::SubAgentResult,
        usage: Usage,
        cost_usd: f64,
    ) {
        if let Err(e) = self
            .send_input(
                parent_id,
                Input::SubAgentFinished {
                    result,
                    usage,
                    cost_usd,
                },
            )
            .await
        {
            tracing::error!(conversation = %parent_id, "cannot report a sub-agent's end: {e}");
        }
    }

    /// Ends a sub-agent that never ran (cancelled while it waited for a
    /// slot): it records its end and reports it like any other.
    pub(super) async fn end_unstarted(&self, child_id: &str) {
        if let Err(e) = self
            .send_input(child_id, Input::Command(Command::EndUnstarted))
            .await
        {
            tracing::error!(conversation = %child_id, "cannot end the sub-agent: {e}");
        }
    }

    /// Lets a sub-agent found mid-turn at start-up go on: it has a slot.
    pub(super) async fn grant_recovery_slot(&self, child_id: &str) {
        if let Err(e) = self.send_input(child_id, Input::RecoverySlotGranted).await {
            tracing::error!(conversation = %child_id, "cannot resume the sub-agent: {e}");
        }
    }

    /// Cancels the turn; returns whether anything was running.
    pub(crate) async fn cancel(&self, id: &str) -> Result<bool, RuntimeError> {
        self.cancel_request(id, None).await
    }

    /// Cancels the turn as the request `client_request_id` (a retry gets
    /// the first outcome); returns whether anything was running.
    pub(crate) async fn cancel_request(
        &self,
        id: &str,
        client_request_id: Option<String>,
    ) -> Result<bool, RuntimeError> {
        self.ask(id, |reply| Command::Cancel {
            client_request_id,
            reply,
        })
        .await?
    }

    /// Answers the pending permission request.
    /// A conversation waiting for its sub-agents passes the answer to the
    /// child whose request it names.
    pub(crate) async fn answer(&self, id: &str, answer: Answer) -> Result<(), RuntimeError> {
        let target = self.answer_target(id, &answer.request_id)?;
        self.ask(&target, |reply| Command::Answer { answer, reply })
            .await?
    }

    /// Attaches a client.
    pub(crate) async fn subscribe(
        &self,
        id: &str,
        after_seq: u64,
        client: ClientInfo,
    ) -> Result<Subscription, RuntimeError> {
        self.join(id, after_seq, self.numbered(client)).await
    }

    /// `client` with the next client id (an attached client's, or that of
    /// a unary call that answers: every resolution names its client).
    pub(crate) fn numbered(&self, client: ClientInfo) -> ClientInfo {
        ClientInfo {
            id: format!("c{}", self.next_client.fetch_add(1, Ordering::Relaxed)),
            ..client
        }
    }

    /// Subscribes a numbered client.
    pub(super) async fn join(
        &self,
        id: &str,
        after_seq: u64,
        client: ClientInfo,
    ) -> Result<Subscription, RuntimeError> {
        self.ask(id, |reply| Command::Subscribe {
            after_seq,
            client,
            reply,
        })
        .await
    }

    /// A fresh snapshot for a client that fell behind.
    pub(crate) async fn resync(
        &self,
        id: &str,
        client_id: String,
    ) -> Result<Arc<ConvEvent>, RuntimeError> {
        self.ask(id, |reply| Command::Resync { client_id, reply })
            .await
    }
}
