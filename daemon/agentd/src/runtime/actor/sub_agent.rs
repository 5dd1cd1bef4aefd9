//! The actor's side of sub-agents: what a parent asks for, and how a
//! child's end is recorded and reported (see `runtime/sub_agents.rs`).
//!
//! People see and steer a child through its parent. A child forwards what
//! its parent's clients follow (state changes, tool calls, permission
//! requests and resolutions) through the manager, in order, and the parent
//! emits them live only. A child's permission request is the child's: its
//! state, its stored event, its core decides the answer; the parent keeps
//! a copy of the pending ones (`ChildRequests`) for clients that attach. An
//! answer sent to the parent goes to the child whose request it names
//! (`Manager::answer_target`, read from the store the child's commit wrote),
//! so the first answer wins. A child's conversation-scope rules are stored
//! under its parent's id (`stored_scope`), so "allow always" for one child
//! holds at once for its siblings.

use super::Actor;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::{EventKind, SubAgentRef};
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
        // What it used in all: its replies so far (those of this commit are
        // not counted in the record yet) and its own sub-agents'.
        let mut own = self.record.clone();
        for u in appended.iter().filter_map(|m| m.usage.as_ref()) {
            own.count_reply(u);
        }
        let mut usage = own.usage;
        usage.add(&self.record.conversation.sub_agents.usage);
        let cost_usd = self
            .shared
            .config
            .models
            .conversation_cost(&own)
            .unwrap_or(0.0)
            + self.record.conversation.sub_agents.cost_usd;
        let (result, success) = match outcome {
            SubAgentOutcome::Submitted { result, success } => (result.clone(), *success),
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
                (format!("{}\n{last}", texts::LAST_TEXT_RESULT), true)
            }
            SubAgentOutcome::Failed { message } => {
                (format!("The sub-agent failed: {message}"), false)
            }
            SubAgentOutcome::Cancelled => (texts::SUB_AGENT_CANCELLED.to_string(), false),
        };
        let end = SubAgentEnd {
            result,
            success,
            usage,
            cost_usd,
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
            link: Box::new(link.clone()),
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

    /// One of this conversation's sub-agents ended: its end goes to the
    /// core (which takes it once, while it waits for it), its usage is
    /// counted once in this conversation's totals, even when it ends after
    /// a cancel, and clients are told.
    pub(super) async fn sub_agent_finished(
        &mut self,
        result: agentd_core::SubAgentResult,
        usage: agentd_core::Usage,
        cost_usd: f64,
    ) {
        let child = result.conversation_id.clone();
        // Whether this end is news: the core counts a child once
        // (`SubAgents::count`), with the end it takes.
        let mut counted = self.record.conversation.sub_agents.clone();
        let first = counted.count(&child, &usage, cost_usd);
        let line = result
            .result
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let description = match self.shared.store.conversation(&child) {
            Ok(Some(r)) => r.sub_agent.map(|l| l.description).unwrap_or_default(),
            Ok(None) => String::new(),
            Err(e) => {
                tracing::warn!(conversation = %self.record.id, "cannot read sub-agent {child}: {e}");
                String::new()
            }
        };
        let finished = EventKind::SubAgentFinished {
            sub_agent: SubAgentRef {
                conversation_id: child.clone(),
                agent_id: result.agent_id.clone(),
                description,
            },
            success: result.success,
            summary: crate::tools::one_line(line, 200),
            usage,
            cost_usd: Some(cost_usd),
        };
        // Its requests are over, answered or not.
        self.child_requests.ended(&child);
        // A rule it added for the parent's scope holds here from now on.
        if let Err(e) = self.load_rules() {
            tracing::error!(conversation = %self.record.id, "cannot load permission rules: {e}");
        }
        let ended = agentd_core::Event::SubAgentFinished {
            result,
            usage,
            cost_usd,
        };
        let applied = match self.apply(ended).await {
            // The commit wrote the usage the core counted (a failed one
            // rolled the record back).
            Ok(()) => Ok(()),
            // A late end (the parent was cancelled, or it was reported
            // before) the core refuses: only its usage is news, counted
            // as the core counts it.
            Err(RuntimeError::Rejected(_)) if first => {
                let saved = std::mem::replace(&mut self.record.conversation.sub_agents, counted);
                let written = self.write_record().await;
                if written.is_err() {
                    self.record.conversation.sub_agents = saved;
                }
                written.map_err(RuntimeError::Store)
            }
            Err(RuntimeError::Rejected(_)) => return,
            Err(e) => Err(e),
        };
        if let Err(e) = applied {
            tracing::error!(conversation = %self.record.id, "a sub-agent's end not recorded: {e}");
            return;
        }
        if first {
            self.emit(finished);
        }
    }

    /// Asks for the sub-agent `agent_id` of this conversation.
    pub(super) fn spawn_sub_agent(
        &mut self,
        agent_id: String,
        prompt: String,
        description: String,
        model: Option<String>,
        read_only: bool,
        agent_type: Option<String>,
    ) {
        let _ = self.sub_agents.send(SubAgentRequest::Spawn(Box::new(Spawn {
            parent: self.record.clone(),
            agent_id,
            prompt,
            description,
            model,
            read_only,
            agent_type,
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

impl Actor {
    /// A sub-agent tells its parent's clients what they follow of it: its
    /// state, one line per tool call, and its permission requests and their
    /// resolutions (through the manager's sub-agent task, in order).
    pub(super) fn forward_to_parent(&self, kind: &EventKind) {
        let Some(link) = &self.record.sub_agent else {
            return;
        };
        let Some(me) = SubAgentRef::of(&self.record) else {
            return;
        };
        let event = match kind {
            EventKind::StateChanged {
                state,
                max_attempts,
            } => EventKind::SubAgentStateChanged {
                sub_agent: me,
                state: state.clone(),
                max_attempts: *max_attempts,
            },
            EventKind::ToolCallBegin {
                tool_use_id,
                name,
                summary,
                ..
            } => EventKind::SubAgentToolCall {
                sub_agent: me,
                tool_use_id: tool_use_id.clone(),
                name: name.clone(),
                summary: crate::tools::one_line(summary, 200),
                end: None,
            },
            EventKind::ToolCallEnd {
                tool_use_id,
                name,
                is_error,
                summary,
                duration_ms,
                ..
            } => EventKind::SubAgentToolCall {
                sub_agent: me,
                tool_use_id: tool_use_id.clone(),
                name: name.clone(),
                summary: crate::tools::one_line(summary, 200),
                end: Some((*is_error, *duration_ms)),
            },
            EventKind::PermissionRequested(_) | EventKind::PermissionResolved { .. } => {
                kind.clone()
            }
            _ => return,
        };
        let _ = self.sub_agents.send(SubAgentRequest::Report {
            parent_id: link.parent_id.clone(),
            event: Box::new(event),
        });
    }

    /// What a sub-agent forwarded: its pending permission requests are
    /// kept (a client that attaches gets them), and every client is told.
    pub(super) fn sub_agent_event(&mut self, kind: EventKind) {
        if self.child_requests.forwarded(&kind) {
            self.emit(kind);
        }
    }
}
