//! Deciding and committing: the context `transition` reads, and the commit
//! of each transition (record, messages, durable events, rules; flushed)
//! before anything of it is announced or run.

use super::Actor;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::EventKind;
use crate::store::{ConversationRecord, StoreError, StoredEvent};
use crate::tools::ToolOutput;
use agentd_core::{
    ContentBlock, ConvContext, ConvState, Effect, Event, Message, Policy, Role, ToolCall,
    Transition, transition,
};
use std::collections::VecDeque;
use std::sync::Arc;

/// Tool calls remembered for the doom-loop detector.
const RECENT_CALLS: usize = 8;

/// Work queued inside one `commit_and_run`.
enum Step {
    /// A transition already decided.
    Apply(Box<Transition>),
    /// An event to decide when its turn comes, on the state the steps
    /// before it leave (the results of several instant calls).
    Decide(Event),
}

/// What a transition needs before its effects may run.
enum Needs {
    /// Nothing outside the daemon happens: its commit waits for the next
    /// flush (a later step's, or the one at the end of the queue).
    Nothing,
    /// Only calls of instant tools, which run inline now; their results
    /// are committed with this transition and flushed with the next.
    Instant(Vec<(ToolCall, ToolOutput)>),
    /// Effects that reach outside (a model request, a tool run, a
    /// timer): the commit is flushed before any of them starts.
    Flush,
}

/// What a failed store write rolls back to: everything a commit changes
/// in memory before it is durable.
struct Checkpoint {
    record: ConversationRecord,
    transcript_len: usize,
    next_seq: u64,
}

impl Actor {
    /// Everything `transition` reads besides the state and the event.
    pub(super) fn context(&self, event: Option<&Event>) -> ConvContext {
        let cfg = &self.shared.config;
        let cwd = self.record.cwd.display().to_string();
        // A sub-agent reads the rules afresh: a sibling's "allow always"
        // (stored in the parent's scope) holds at once.
        let rules = match self.record.sub_agent {
            Some(_) => self.read_rules().unwrap_or_else(|e| {
                tracing::error!(conversation = %self.record.id, "cannot read permission rules: {e}");
                self.rules.clone()
            }),
            None => self.rules.clone(),
        };
        let mut policy = Policy {
            rules,
            doom_loop: cfg.doom_loop,
            additional_dirs: self
                .record
                .additional_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            ..Policy::new(self.record.mode, cwd)
        };
        // The policy judges paths as the tools will use them: resolved,
        // symbolic links followed. That needs the file system, so it is
        // done here, for the calls this event may schedule: a transition
        // judges only calls neither running nor finished (the one after a
        // command's end usually none); the effects' hooks (no event) see
        // every call of the run.
        let mut calls: Vec<ToolCall> = match &self.record.state {
            ConvState::ToolExecuting(run) if event.is_some() => {
                let pending = run.pending_ids();
                run.calls
                    .iter()
                    .filter(|c| pending.contains(&c.id))
                    .cloned()
                    .collect()
            }
            ConvState::ToolExecuting(run) => run.calls.clone(),
            _ => Vec::new(),
        };
        // A pre_tool_use hook's replacement input is judged as it stands.
        if let Some(Event::PreToolHooksDecided {
            tool_use_id,
            new_input: Some(input),
            ..
        }) = event
            && let Some(c) = calls.iter_mut().find(|c| c.id == *tool_use_id)
        {
            c.input = input.clone();
        }
        if let Some(Event::LlmCompleted { reply }) = event {
            calls.extend(reply.content.iter().filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                _ => None,
            }));
        }
        for call in &calls {
            for raw in Policy::paths_to_resolve(call) {
                if let Ok(real) = crate::tools::resolve_real(&self.record.cwd, &raw) {
                    policy
                        .resolved_paths
                        .insert(raw, real.display().to_string());
                }
            }
        }
        // Which MCP tools count as read-only is what the servers last said
        // (trusted servers only); the hub reads no server here.
        let servers = self.mcp_servers();
        if !servers.is_empty() {
            policy.mcp_read_only = self.shared.mcp.read_only_tools(&servers, &self.record.cwd);
        }
        ConvContext {
            now_ms: self.now_ms(),
            max_attempts: cfg.retry.max_attempts,
            max_iterations: cfg.limits.max_iterations,
            retry_base_ms: cfg.retry.base_delay_ms,
            retry_max_ms: cfg.retry.max_delay_ms,
            max_retry_after_ms: cfg.retry.max_retry_after_ms,
            context_window: cfg.models.lookup(&self.record.model).context_window,
            // REQ-BED-024: a sub-agent fails at the threshold.
            exhaustion: if self.record.sub_agent.is_some() {
                agentd_core::ContextExhaustionBehavior::IntentionallyUnhandled
            } else {
                agentd_core::ContextExhaustionBehavior::ThresholdBasedContinuation
            },
            policy,
            doom_loop_threshold: 3,
            recent_calls: self.recent_calls(),
            hooks: self
                .hooks
                .matchers(agentd_core::hooks::stop_continuations(&self.transcript)),
            queued: self.record.queued.iter().map(|q| q.text.clone()).collect(),
            queued_images: self
                .record
                .queued
                .iter()
                .map(|q| q.images.clone())
                .collect(),
            last_usage: self.record.last_usage,
            budget: self.budget_context(),
            plan: self.record.plan.clone(),
            plan_detect: cfg.plan.detect,
            corrections: self.record.corrections.clone(),
            sub_agent: self.sub_agent_role(),
        }
    }

    /// The budgets, raises and spending the next request boundary checks.
    /// A ledger that cannot be read checks nothing (and says so) rather
    /// than stopping every conversation.
    pub(super) fn budget_context(&self) -> agentd_core::BudgetContext {
        crate::runtime::budget::context(&self.shared, &self.record, self.now_ms()).unwrap_or_else(
            |e| {
                tracing::error!(conversation = %self.record.id, "budgets not checked: cannot read the ledger: {e}");
                agentd_core::BudgetContext::default()
            },
        )
    }

    /// The last tool calls of the transcript, oldest first, excluding the
    /// calls of the run in progress (the core sees those in the state).
    fn recent_calls(&self) -> Vec<ToolCall> {
        let current: Vec<&str> = match &self.record.state {
            ConvState::ToolExecuting(run) => run.calls.iter().map(|c| c.id.as_str()).collect(),
            _ => Vec::new(),
        };
        let mut calls: Vec<ToolCall> = self
            .transcript
            .iter()
            .rev()
            .filter(|m| m.role == Role::Assistant)
            .flat_map(|m| m.tool_calls().collect::<Vec<_>>().into_iter().rev())
            .filter(|c| !current.contains(&c.id.as_str()))
            .take(RECENT_CALLS)
            .collect();
        calls.reverse();
        calls
    }

    /// Writes the record alone (no messages, no events) and waits for the
    /// flush: for changes that are no transition (a queue, a reservation,
    /// the end of a group of unflushed commits).
    pub(super) async fn write_record(&self) -> Result<(), StoreError> {
        self.shared.store.commit(&self.record, &[])?;
        self.shared.store.flush().await
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            record: self.record.clone(),
            transcript_len: self.transcript.len(),
            next_seq: self.fanout.next_seq(),
        }
    }

    /// Undoes everything since `checkpoint` that was not made durable.
    fn rollback(&mut self, checkpoint: Checkpoint, error: StoreError) -> RuntimeError {
        tracing::error!(conversation = %self.record.id, "persisting failed: {error}");
        self.record = checkpoint.record;
        Arc::make_mut(&mut self.transcript).truncate(checkpoint.transcript_len);
        self.work.request_cache = crate::llm::RequestCache::default();
        self.fanout.discard_held(checkpoint.next_seq);
        RuntimeError::Store(error)
    }

    /// Persists a transition, tells clients, runs its effects; effects that
    /// complete at once (an abort) feed further events through a queue.
    ///
    /// Nothing is announced and no effect runs before the store is flushed.
    /// Transitions whose effects stay inside the daemon are flushed
    /// together with the next one that reaches outside (or at the end):
    /// calls of instant tools (`think`) run inline right after their
    /// transition is written, and that transition, the calls' ends, the
    /// intermediate states and the next transition share one flush before
    /// any of it is announced. A crash before that flush loses all of it at
    /// once, and the recovery repeats the model request.
    pub(super) async fn commit_and_run(&mut self, first: Transition) -> Result<(), RuntimeError> {
        let mut queue: VecDeque<Step> = VecDeque::from([Step::Apply(Box::new(first))]);
        // Where to roll back to if the store fails before the next flush.
        let mut unflushed: Option<Checkpoint> = None;
        while let Some(step) = queue.pop_front() {
            let t = match step {
                Step::Apply(t) => *t,
                Step::Decide(event) => {
                    // Decided now, on the state the steps before it left.
                    let ctx = self.context(Some(&event));
                    match transition(&self.record.state, &ctx, event) {
                        Ok(t) => t,
                        Err(e) => {
                            tracing::warn!(conversation = %self.record.id, "instant tool result not applied: {e}");
                            continue;
                        }
                    }
                }
            };
            let needs = self.needs(&t.effects);
            let flush_now = matches!(needs, Needs::Flush);
            if unflushed.is_none() {
                unflushed = Some(self.checkpoint());
            }
            let base = self.transcript.len() as u64;
            let delivered = t.delivered.min(self.record.queued.len());
            self.record.queued.drain(..delivered);
            let old_state = std::mem::replace(&mut self.record.state, t.state);
            let state_changed = self.record.state != old_state;
            let mode_changed = t.mode.is_some_and(|mode| mode != self.record.mode);
            if state_changed && matches!(self.record.state, ConvState::ContextExhausted { .. }) {
                // Written with the state that makes it due.
                self.record.continue_pending = self.auto_continue_due();
            }
            if let Some(mode) = t.mode {
                self.record.mode = mode;
            }
            // The plan as this transition leaves it is written with it.
            if let Some(plan) = t.effects.iter().rev().find_map(|e| match e {
                Effect::PlanChanged { plan, .. } => Some(plan),
                _ => None,
            }) {
                self.record.plan = Some(plan.clone());
            }
            // So is the self-correction tracking.
            if let Some(corrections) = &t.corrections {
                self.record.corrections = corrections.clone();
            }
            let appended: Vec<Message> = t
                .effects
                .iter()
                .filter_map(|e| match e {
                    Effect::AppendMessage { message } => Some(message.clone()),
                    _ => None,
                })
                .collect();
            for effect in &t.effects {
                if let Effect::FinishSubAgent { outcome } = effect {
                    // Written with the state that ends the sub-agent.
                    self.record_sub_agent_end(outcome, &appended);
                }
            }
            // Within a group of commits flushed together only the last
            // record matters: the one the flush that ends the group writes.
            let mut persisted = self.persist(base, &appended, &t.effects, state_changed, flush_now);
            if persisted.is_ok() && flush_now {
                persisted = self.shared.store.flush().await;
            }
            if let Err(e) = persisted {
                // Nothing may run on state we could not persist.
                let checkpoint = unflushed.take().unwrap_or_else(|| self.checkpoint());
                return Err(self.rollback(checkpoint, e));
            }
            if flush_now {
                unflushed = None;
                self.fanout.release();
            } else {
                self.fanout.hold();
            }
            self.announce(base, appended, state_changed);
            if mode_changed {
                self.announce_settings(String::new());
            }
            if delivered > 0 {
                self.emit(EventKind::QueueChanged(self.record.queued.clone()));
            }
            if state_changed && !old_state.is_at_rest() && self.record.state.is_at_rest() {
                self.notify_turn_end();
            }
            if state_changed && matches!(self.record.state, ConvState::ContextExhausted { .. }) {
                self.after_exhaustion();
            }
            match needs {
                Needs::Nothing => {}
                Needs::Instant(calls) => {
                    for (call, output) in calls {
                        queue.push_back(Step::Decide(self.finish_instant(call, output)));
                    }
                }
                Needs::Flush => {
                    for effect in t.effects {
                        if let Some(next) = self.run_effect(effect).await {
                            queue.push_back(Step::Apply(Box::new(next)));
                        }
                    }
                }
            }
        }
        if let Some(checkpoint) = unflushed {
            // The queue ended on commits not flushed yet: write the record,
            // flush, then announce them.
            if let Err(e) = self.write_record().await {
                return Err(self.rollback(checkpoint, e));
            }
            self.fanout.release();
        }
        Ok(())
    }

    /// Fires the `turn_end` notification hooks, saying how the turn ended.
    fn notify_turn_end(&mut self) {
        let message = match &self.record.state {
            ConvState::Error { message, .. } => format!("agentd: the turn failed: {message}"),
            ConvState::ContextExhausted { .. } => {
                "agentd: the turn ended; the context is exhausted".to_string()
            }
            _ => format!("agentd: the turn ended ({})", self.record.title),
        };
        self.notify(crate::hooks::NotificationKind::TurnEnd, message);
    }

    /// Tells clients about a committed transition: its messages (and usage),
    /// then its state.
    fn announce(&mut self, base: u64, appended: Vec<Message>, state_changed: bool) {
        for (i, m) in appended.into_iter().enumerate() {
            let usage = m.usage;
            Arc::make_mut(&mut self.transcript).push(m.clone());
            self.emit(EventKind::MessageAppended {
                message_seq: base + i as u64 + 1,
                message: m,
            });
            if let Some(last) = usage {
                self.emit(EventKind::UsageUpdated {
                    last,
                    total: self.record.usage,
                    cost_usd: self
                        .shared
                        .config
                        .models
                        .cost(&self.record.model, &self.record.usage),
                });
            }
        }
        if state_changed {
            if self.record.state.pending_permission().is_none() {
                self.pending_view = None;
            }
            self.emit(EventKind::StateChanged {
                state: self.record.state.clone(),
                max_attempts: self.shared.config.retry.max_attempts,
            });
        }
    }

    /// Writes the appended messages, the durable events this commit will
    /// be announced with (under the sequence numbers `emit` will give them,
    /// in the same order) and the rules its answer adds, then the record
    /// unless `write_record` is false (a later commit of the same flush
    /// writes it). Not flushed.
    fn persist(
        &mut self,
        base: u64,
        appended: &[Message],
        effects: &[Effect],
        state_changed: bool,
        write_record: bool,
    ) -> Result<(), StoreError> {
        self.update_record(appended);
        let numbered: Vec<(u64, &Message)> = appended
            .iter()
            .enumerate()
            .map(|(i, m)| (base + i as u64 + 1, m))
            .collect();
        let now = self.now_ms();
        let mut seq = self.fanout.next_seq();
        let mut durable = Vec::new();
        for (i, m) in appended.iter().enumerate() {
            durable.push((
                seq,
                StoredEvent::MessageAppended {
                    at_ms: now,
                    message_seq: base + i as u64 + 1,
                },
            ));
            seq += if m.usage.is_some() { 2 } else { 1 };
        }
        if state_changed {
            durable.push((
                seq,
                StoredEvent::StateChanged {
                    at_ms: now,
                    state: self.record.state.clone(),
                },
            ));
        }
        for effect in effects {
            if let Effect::AddRule { rule, scope } = effect {
                self.shared
                    .store
                    .add_rule(&self.stored_scope(*scope), rule)?;
            }
        }
        // The daily ledger counts every reply, flushed with it.
        let day = crate::runtime::prompt::civil_date(now);
        for usage in appended.iter().filter_map(|m| m.usage.as_ref()) {
            self.shared
                .store
                .add_daily_usage(&day, &self.record.model, usage)?;
        }
        if write_record {
            self.shared
                .store
                .commit_with_events(&self.record, &numbered, &durable)
        } else {
            self.shared
                .store
                .append(&self.record.id, &numbered, &durable)
        }
    }

    fn update_record(&mut self, appended: &[Message]) {
        self.record.updated_at_ms = self.now_ms();
        self.record.message_count = self.transcript.len() as u64 + appended.len() as u64;
        for m in appended {
            if let Some(u) = &m.usage {
                self.record.usage.add(u);
                self.record.last_usage = *u;
            }
            if self.record.title.is_empty() && m.role == Role::User {
                self.record.title = title_of(&m.text());
            }
        }
        if self.fanout.needs_reservation(self.record.seq_reserved) {
            // Written with this commit, flushed before any number of it is
            // handed out.
            self.record.seq_reserved = super::replay::reservation_from(self.fanout.next_seq());
        }
    }

    /// What `effects` need before they run (see `commit_and_run`); the
    /// calls of instant tools are run here, at once.
    fn needs(&self, effects: &[Effect]) -> Needs {
        let mut calls = Vec::new();
        for effect in effects {
            match effect {
                Effect::AppendMessage { .. } => {}
                Effect::ExecuteTool {
                    call,
                    background: false,
                } => match self.shared.tools.run_instant(&call.name, &call.input) {
                    Some(output) => calls.push((call.clone(), output)),
                    None => return Needs::Flush,
                },
                _ => return Needs::Flush,
            }
        }
        if calls.is_empty() {
            Needs::Nothing
        } else {
            Needs::Instant(calls)
        }
    }

    /// Announces an instant call as a tool run (begin and end) and returns
    /// the event its result makes.
    fn finish_instant(&mut self, call: ToolCall, mut output: ToolOutput) -> Event {
        self.announce_call(&call);
        self.emit(EventKind::ToolCallEnd {
            tool_use_id: call.id.clone(),
            name: call.name,
            is_error: output.is_error,
            summary: std::mem::take(&mut output.summary),
            diff: output.diff.take(),
            duration_ms: 0,
            preview: output.preview.take(),
        });
        Event::ToolCompleted {
            result: self.tool_result(call.id, output),
        }
    }
}

/// A title from the first line of the first user message.
fn title_of(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title.push('…');
    }
    title
}
