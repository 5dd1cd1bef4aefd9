//! `Rewind`: back to the start of a turn — the files the agent changed
//! since (from the checkpoints), the transcript (a fork that ends just
//! before the turn's message), or both.
//!
//! The conversation's actor does the code part, so no turn can start while
//! files are restored; the fork is a new conversation the manager stores
//! from the transcript, which never changes before the message named.

use super::actor::{Command, Input, starts_turn};
use super::{Manager, RuntimeError};
use crate::checkpoints::Restored;
use crate::store::ConversationRecord;
use agentd_core::{ConvState, Role, Usage};

/// What to rewind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RewindRequest {
    /// The user message (sequence number) to rewind to; 0: the last one.
    pub to: u64,
    pub code: bool,
    pub conversation: bool,
    pub force: bool,
}

/// What a rewind did.
#[derive(Debug, Clone)]
pub(crate) struct Rewound {
    /// The message rewound to.
    pub message_seq: u64,
    pub code: Option<Restored>,
    pub forked: Option<ConversationRecord>,
}

impl Manager {
    /// Rewinds conversation `id` (see [`RewindRequest`]).
    pub(crate) async fn rewind(
        &self,
        id: &str,
        req: RewindRequest,
    ) -> Result<Rewound, RuntimeError> {
        if !req.code && !req.conversation {
            return Err(RuntimeError::InvalidArgument(
                "rewind what? ask for the code, the conversation, or both".into(),
            ));
        }
        let (message_seq, code) = self
            .ask(id, |reply| Command::Rewind {
                to: req.to,
                code: req.code,
                force: req.force,
                reply,
            })
            .await??;
        let forked = if req.conversation {
            let fork = self.fork(id, message_seq).await?;
            let _ = self
                .send_input(
                    id,
                    Input::Command(Command::Forked {
                        message_seq,
                        forked_id: fork.id.clone(),
                    }),
                )
                .await;
            Some(fork)
        } else {
            None
        };
        Ok(Rewound {
            message_seq,
            code,
            forked,
        })
    }

    /// Stores a new conversation whose transcript is `id`'s up to, not
    /// including, message `before`; linked to it by `forked_from`.
    async fn fork(&self, id: &str, before: u64) -> Result<ConversationRecord, RuntimeError> {
        let old = self.record(id)?;
        let messages: Vec<(u64, agentd_core::Message)> = self
            .messages(&old)?
            .into_iter()
            .filter(|(seq, _)| *seq < before)
            .collect();
        let now = self.shared.clock.now_ms();
        let mut usage = Usage::default();
        for (_, m) in &messages {
            if let Some(u) = &m.usage {
                usage.add(u);
            }
        }
        let last_usage = messages
            .iter()
            .rev()
            .find(|(_, m)| m.role == Role::Assistant)
            .and_then(|(_, m)| m.usage)
            .unwrap_or_default();
        let record = ConversationRecord {
            id: self.new_id()?,
            created_at_ms: now,
            updated_at_ms: now,
            state: ConvState::Idle,
            message_count: messages.len() as u64,
            usage,
            last_usage,
            seq_reserved: 0,
            turns: messages.iter().filter(|(_, m)| starts_turn(m)).count() as u64,
            requests: Vec::new(),
            queued: Vec::new(),
            queued_next: 0,
            continued_as: None,
            continued_automatically: false,
            continue_pending: false,
            budget_raised: Default::default(),
            plan: None,
            // A fork is a person's conversation, whatever it came from.
            sub_agent: None,
            sub_agents_usage: Usage::default(),
            sub_agents_cost_usd: 0.0,
            sub_agents_counted: Vec::new(),
            forked_from: Some(old.id.clone()),
            forked_at: before,
            ..old
        };
        let numbered: Vec<(u64, &agentd_core::Message)> =
            messages.iter().map(|(seq, m)| (*seq, m)).collect();
        self.shared.store.commit(&record, &numbered)?;
        self.shared.store.flush().await?;
        Ok(record)
    }
}
