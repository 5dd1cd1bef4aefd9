//! Carrying out the core's effects. Long ones (a model request, a tool, a
//! retry timer) are spawned and report back through the actor's mailbox
//! tagged with a call number; the rest happen here at once.

use super::Actor;
use crate::runtime::events::EventKind;
use crate::store::StoredEvent;
use agentd_core::{Effect, Event, Notice, Transition, transition};

impl Actor {
    /// Carries out one effect. Returns a follow-up transition when the
    /// effect completes at once (an aborted stream reports its partial reply).
    pub(super) async fn run_effect(&mut self, effect: Effect) -> Option<Transition> {
        match effect {
            // Written by the commit.
            Effect::AppendMessage { .. } => {}
            Effect::RequestLlm { attempt, purpose } => self.start_llm(attempt, purpose),
            Effect::AbortLlm => return self.abort_llm(),
            Effect::ScheduleRetry {
                attempt: _,
                delay_ms,
            } => self.work.schedule_retry(delay_ms, self.tx.clone()),
            Effect::CancelRetry => self.work.cancel_retry(),
            Effect::ExecuteTool { call, background } => self.start_tool(call, background),
            Effect::AbortTools { tool_use_ids } => self.abort_tools(tool_use_ids),
            Effect::RunPreToolHooks { call } => return self.start_pre_hooks(call),
            Effect::RunStopHooks => self.start_stop_hooks(),
            Effect::AbortHooks => self.work.abort_hooks(),
            Effect::AskPermission { ask } => self.ask_permission(ask).await,
            Effect::PermissionResolved { ask, decision, by } => {
                self.permission_resolved(ask, decision, by).await
            }
            Effect::AddRule { rule, scope } => self.rule_added(rule, scope),
            Effect::Notify { notice } => self.tell(notice).await,
            Effect::PlanChanged { plan, change } => self.plan_changed(plan, change).await,
            Effect::MarkCheckpoint { mark } => self.mark_checkpoint(&mark),
            Effect::RestoreCheckpoint { mark, step_id } => {
                self.roll_back_step(&mark, step_id).await
            }
            // The commit recorded it; announcing the exhaustion asks for it.
            Effect::ContinueInNewConversation => {}
            Effect::SpawnSubAgent {
                agent_id,
                prompt,
                description,
                model,
                read_only,
                agent_type,
            } => self.spawn_sub_agent(agent_id, prompt, description, model, read_only, agent_type),
            Effect::CancelSubAgents { agent_ids } => self.cancel_sub_agents(agent_ids),
            // The commit recorded the end.
            Effect::FinishSubAgent { .. } => self.report_sub_agent_end(),
            // Answers to a message not taken yet, which `send` reads
            // before anything is committed: no commit carries them.
            Effect::Enqueue | Effect::RunPromptHooks => {
                tracing::error!(conversation = %self.record.id, "{effect:?} reached the effect runner");
            }
        }
        None
    }

    /// `AbortLlm`: the request stops, and its partial reply is what the
    /// core decides on next.
    fn abort_llm(&mut self) -> Option<Transition> {
        let partial = std::mem::take(&mut self.work.partial).into_blocks();
        self.work.abort_llm();
        let ctx = self.context(None);
        match transition(
            &self.record.conversation,
            &ctx,
            Event::LlmAborted { partial },
        ) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::debug!("abort not applicable: {e}");
                None
            }
        }
    }

    /// `AbortTools`: the calls still running stop, and clients see them
    /// end as interrupted.
    fn abort_tools(&mut self, tool_use_ids: Vec<String>) {
        for id in tool_use_ids {
            let unannounced = self.work.held.was_dropped(&id) || self.work.held.holds(&id);
            if let Some(ran) = self.work.abort_tool(&id)
                && !unannounced
            {
                self.emit(EventKind::ToolCallEnd {
                    tool_use_id: id.clone(),
                    name: String::new(),
                    is_error: true,
                    summary: "interrupted".to_string(),
                    diff: None,
                    duration_ms: ran.as_millis() as u64,
                    preview: None,
                });
            }
        }
    }

    /// `Notify`: what a client that comes back must not miss is stored
    /// with its number, so a resume replays it; what the recovery after a
    /// restart said is kept for clients that attach later.
    pub(super) async fn tell(&mut self, notice: Notice) {
        if let Notice::Recovered { message } = &notice {
            self.recovery_notices.push(message.clone());
        }
        if notice.is_durable() {
            self.persist_event(StoredEvent::Notified {
                at_ms: self.now_ms(),
                notice: notice.clone(),
            })
            .await;
        }
        let continuing = self.record.conversation.continuation.pending;
        self.emit(EventKind::from_notice(notice, continuing));
    }

    /// `PlanChanged`: the plan itself was written by the commit; the event
    /// is stored so a client that resumes (after a restart too) is told
    /// what happened to it.
    async fn plan_changed(
        &mut self,
        plan: agentd_core::plan::Plan,
        change: agentd_core::plan::PlanEvent,
    ) {
        self.persist_event(StoredEvent::PlanChanged {
            at_ms: self.now_ms(),
            change: change.clone(),
            plan: plan.clone(),
        })
        .await;
        self.emit(EventKind::Plan { change, plan });
    }

    /// Stores the durable event the next `emit` announces, before it does.
    pub(super) async fn persist_event(&self, event: StoredEvent) {
        let stored =
            match self
                .shared
                .store
                .put_event(&self.record.id, self.fanout.next_seq(), &event)
            {
                Ok(()) => self.shared.store.flush().await,
                Err(e) => Err(e),
            };
        if let Err(e) = stored {
            tracing::error!(conversation = %self.record.id, "cannot persist an event: {e}");
        }
    }

    /// A clean stop: clients are told why, running tools are terminated
    /// and recorded as interrupted (the core decides how), and in-flight
    /// model requests are dropped; the persisted state lets the next start
    /// carry on.
    pub(super) async fn shutdown(&mut self) {
        self.emit(EventKind::info(
            "agentd is shutting down; running tools are interrupted".to_string(),
        ));
        self.work.abort_llm();
        self.work.cancel_retry();
        self.apply_internal(Event::DaemonStopping).await;
        self.work.stop_all();
    }
}
