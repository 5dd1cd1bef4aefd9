//! The actor's side of sub-agents: what a parent asks for, and how a
//! child's end is recorded and reported (see `runtime/sub_agents.rs`).

use super::Actor;
use crate::runtime::sub_agents::{Spawn, SubAgentRequest};
use crate::store::SubAgentEnd;
use agentd_core::{Message, Role, SubAgentOutcome, SubAgentRole, texts};

impl Actor {
    /// The core's view of this conversation as a sub-agent: whether it was
    /// already told to call `submit_result` (the reminder is in its
    /// transcript).
    pub(super) fn sub_agent_role(&self) -> Option<SubAgentRole> {
        self.record.sub_agent.as_ref().map(|_| SubAgentRole {
            reminded: self
                .transcript
                .iter()
                .any(|m| m.role == Role::User && m.text() == texts::SUBMIT_RESULT_REMINDER),
        })
    }

    /// Records how this sub-agent ended, in the record the commit of the
    /// ending transition writes. `appended` are that transition's messages
    /// (the transcript does not hold them yet).
    pub(super) fn record_sub_agent_end(&mut self, outcome: &SubAgentOutcome, appended: &[Message]) {
        let end = match outcome {
            SubAgentOutcome::Submitted { result, success } => SubAgentEnd {
                result: result.clone(),
                success: *success,
            },
            SubAgentOutcome::LastText => {
                let last = self
                    .transcript
                    .iter()
                    .chain(appended)
                    .rev()
                    .filter(|m| m.role == Role::Assistant)
                    .map(Message::text)
                    .find(|t| !t.trim().is_empty())
                    .unwrap_or_default();
                SubAgentEnd {
                    result: format!("{}\n{last}", texts::LAST_TEXT_RESULT),
                    success: true,
                }
            }
            SubAgentOutcome::Failed { message } => SubAgentEnd {
                result: format!("The sub-agent failed: {message}"),
                success: false,
            },
            SubAgentOutcome::Cancelled => SubAgentEnd {
                result: texts::SUB_AGENT_CANCELLED.to_string(),
                success: false,
            },
        };
        if let Some(link) = &mut self.record.sub_agent {
            link.result = Some(end);
        }
    }

    /// Reports this sub-agent's recorded end to the parent (through the
    /// manager's sub-agent task, which also frees its slot).
    pub(super) fn report_sub_agent_end(&self) {
        let Some(link) = &self.record.sub_agent else {
            return;
        };
        let Some(end) = link.result.clone() else {
            return;
        };
        let _ = self.sub_agents.send(SubAgentRequest::Finished {
            child_id: self.record.id.clone(),
            link: link.clone(),
            end,
        });
    }

    /// A sub-agent cancelled before it ran: its end is "cancelled".
    pub(super) async fn end_unstarted(&mut self) {
        let Some(link) = &self.record.sub_agent else {
            return;
        };
        if link.result.is_none() {
            let saved = self.record.clone();
            self.record_sub_agent_end(&SubAgentOutcome::Cancelled, &[]);
            if let Err(e) = self.write_record().await {
                tracing::error!(conversation = %self.record.id, "cannot record the sub-agent's end: {e}");
                self.record = saved;
                return;
            }
        }
        self.report_sub_agent_end();
    }

    /// Asks for the sub-agent `agent_id` of this conversation.
    pub(super) fn spawn_sub_agent(
        &self,
        agent_id: String,
        prompt: String,
        description: String,
        model: Option<String>,
        read_only: bool,
    ) {
        let _ = self.sub_agents.send(SubAgentRequest::Spawn(Box::new(Spawn {
            parent: self.record.clone(),
            agent_id,
            prompt,
            description,
            model,
            read_only,
        })));
    }

    /// Asks for this conversation's sub-agents `agent_ids` to be cancelled.
    pub(super) fn cancel_sub_agents(&self, agent_ids: Vec<String>) {
        let _ = self.sub_agents.send(SubAgentRequest::Cancel {
            parent_id: self.record.id.clone(),
            agent_ids,
        });
    }
}
