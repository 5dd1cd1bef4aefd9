//! Committing: each transition is persisted (record, messages, durable
//! events, rules) and flushed before anything of it is announced or run;
//! a failed write rolls back to the last flush (`Rollback`).
//!
//! So a message acknowledged to a client is durable. Transitions whose
//! effects stay inside the daemon share the flush of the next one that
//! reaches outside, which changes nothing a crash can observe: calls of
//! instant tools (`think`) run inline right after their transition is
//! written, and that transition, the calls' begin and end, the states
//! between and the next transition are flushed together before any of it
//! is announced or the next effect starts. The one `Rollback` puts back
//! the record (state, mode, counts, title, reservation), the transcript,
//! the request cache and the event numbers; the client is told.

use super::Actor;
use super::replay::Fanout;
use crate::runtime::error::RuntimeError;
use crate::runtime::events::EventKind;
use crate::store::{ConversationRecord, StoreError, StoredEvent};
use crate::tools::ToolOutput;
use agentd_core::{
    ConvState, Conversation, Effect, Event, Message, Role, ToolCall, Transition, transition,
};
use std::collections::VecDeque;
use std::sync::Arc;

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
/// in memory before it is durable (not to be confused with the
/// checkpoints of files, `crate::checkpoints`).
pub(super) struct Rollback {
    record: ConversationRecord,
    transcript_len: usize,
    next_seq: u64,
}

impl Rollback {
    /// The point to roll back to: things as they are now.
    fn of(record: &ConversationRecord, transcript: &[Message], fanout: &Fanout) -> Rollback {
        Rollback {
            record: record.clone(),
            transcript_len: transcript.len(),
            next_seq: fanout.next_seq(),
        }
    }

    /// Puts back the record, drops the messages appended since and the
    /// events held back (their numbers are given again).
    fn restore(
        self,
        record: &mut ConversationRecord,
        transcript: &mut Arc<Vec<Message>>,
        fanout: &mut Fanout,
    ) {
        *record = self.record;
        Arc::make_mut(transcript).truncate(self.transcript_len);
        fanout.discard_held(self.next_seq);
    }
}

/// How a committed transition changed things, for announcing it.
struct Committed {
    /// The number of the transcript's last message before it.
    base: u64,
    appended: Vec<Message>,
    old_state: ConvState,
    state_changed: bool,
    mode_changed: bool,
    /// Whether it delivered queued messages.
    queue_changed: bool,
    /// The held events of early calls the appended reply adopts, and the
    /// index of that reply among `appended` (they follow it).
    held: (Vec<EventKind>, usize),
}

impl Actor {
    /// Writes the record alone (no messages, no events) and waits for the
    /// flush: for changes that are no transition (a queue, a reservation,
    /// the end of a group of unflushed commits).
    pub(super) async fn write_record(&self) -> Result<(), StoreError> {
        self.shared.store.commit(&self.record, &[])?;
        self.shared.store.flush().await
    }

    fn rollback_point(&self) -> Rollback {
        Rollback::of(&self.record, &self.transcript, &self.fanout)
    }

    /// Undoes everything since `rollback` that was not made durable.
    fn rollback(&mut self, rollback: Rollback, error: StoreError) -> RuntimeError {
        tracing::error!(conversation = %self.record.id, "persisting failed: {error}");
        rollback.restore(&mut self.record, &mut self.transcript, &mut self.fanout);
        self.parts.forget_prefix();
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
        let mut unflushed: Option<Rollback> = None;
        while let Some(step) = queue.pop_front() {
            let Some(t) = self.decided(step) else {
                continue;
            };
            let needs = self.needs(&t.effects);
            let flush_now = matches!(needs, Needs::Flush);
            if unflushed.is_none() {
                unflushed = Some(self.rollback_point());
            }
            let Transition {
                conversation,
                effects,
            } = t;
            let committed = match self.commit(conversation, &effects, flush_now).await {
                Ok(committed) => committed,
                Err(e) => {
                    // Nothing may run on state we could not persist.
                    let rollback = unflushed.take().unwrap_or_else(|| self.rollback_point());
                    return Err(self.rollback(rollback, e));
                }
            };
            if flush_now {
                unflushed = None;
                self.fanout.release();
            } else {
                self.fanout.hold();
            }
            self.announce_commit(committed);
            match needs {
                Needs::Nothing => {}
                Needs::Instant(calls) => {
                    for (call, output) in calls {
                        queue.push_back(Step::Decide(self.finish_instant(call, output)));
                    }
                }
                Needs::Flush => {
                    for effect in effects {
                        if let Some(next) = self.run_effect(effect).await {
                            queue.push_back(Step::Apply(Box::new(next)));
                        }
                    }
                }
            }
        }
        if let Some(rollback) = unflushed {
            // The queue ended on commits not flushed yet: write the record,
            // flush, then announce them.
            if let Err(e) = self.write_record().await {
                return Err(self.rollback(rollback, e));
            }
            self.fanout.release();
        }
        Ok(())
    }

    /// The transition of a step; None when an instant call's result no
    /// longer applies.
    fn decided(&self, step: Step) -> Option<Transition> {
        match step {
            Step::Apply(t) => Some(*t),
            Step::Decide(event) => {
                // Decided now, on the state the steps before it left.
                let ctx = self.context(Some(&event));
                match transition(&self.record.conversation, &ctx, event) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        tracing::warn!(conversation = %self.record.id, "instant tool result not applied: {e}");
                        None
                    }
                }
            }
        }
    }

    /// Takes the `conversation` a transition leaves into the record, whole,
    /// with what its `effects` change there, and writes it (flushed when
    /// `flush_now`). Within a group of commits flushed together only the
    /// last record matters: the one the flush that ends the group writes.
    async fn commit(
        &mut self,
        conversation: Conversation,
        effects: &[Effect],
        flush_now: bool,
    ) -> Result<Committed, StoreError> {
        let base = self.transcript.len() as u64;
        let old = std::mem::replace(&mut self.record.conversation, conversation);
        let old_state = old.state;
        let state_changed = self.record.conversation.state != old_state;
        let mode_changed = self.record.conversation.mode != old.mode;
        let queue_changed = self.record.conversation.queue != old.queue;
        let appended: Vec<Message> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::AppendMessage { message } => Some(message.clone()),
                _ => None,
            })
            .collect();
        for effect in effects {
            if let Effect::FinishSubAgent { outcome } = effect {
                // Written with the state that ends the sub-agent.
                self.record_sub_agent_end(outcome, &appended);
            }
        }
        // Calls that started while their reply streamed are announced right
        // after it (or never, see `early.rs`): their numbers come after the
        // reply's.
        let held = self
            .work
            .held
            .settle(&self.record.conversation.state, effects);
        let held_after = appended
            .iter()
            .position(|m| m.role == Role::Assistant)
            .filter(|_| !held.is_empty())
            .map(|i| (i, held.len()));
        self.persist(
            base,
            &appended,
            effects,
            state_changed,
            flush_now,
            held_after,
        )?;
        if flush_now {
            self.shared.store.flush().await?;
        }
        Ok(Committed {
            base,
            appended,
            old_state,
            state_changed,
            mode_changed,
            queue_changed,
            held: (held, held_after.map_or(0, |(i, _)| i)),
        })
    }

    /// Tells clients what a commit changed, and does what a turn's end or
    /// an exhausted context calls for.
    fn announce_commit(&mut self, c: Committed) {
        self.announce(c.base, c.appended, c.state_changed, c.held);
        if c.mode_changed {
            self.announce_settings(String::new());
        }
        if c.queue_changed {
            self.emit(EventKind::QueueChanged(
                self.record.conversation.queue.clone(),
            ));
        }
        if c.state_changed
            && !c.old_state.is_at_rest()
            && self.record.conversation.state.is_at_rest()
        {
            self.notify_turn_end();
        }
        if c.state_changed
            && matches!(
                self.record.conversation.state,
                ConvState::ContextExhausted { .. }
            )
        {
            self.after_exhaustion();
        }
    }

    /// Fires the `turn_end` notification hooks, saying how the turn ended.
    fn notify_turn_end(&mut self) {
        let message = match &self.record.conversation.state {
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
    fn announce(
        &mut self,
        base: u64,
        appended: Vec<Message>,
        state_changed: bool,
        (mut held, after): (Vec<EventKind>, usize),
    ) {
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
                    cost_usd: self.shared.config.models.conversation_cost(&self.record),
                });
            }
            if i == after {
                for event in std::mem::take(&mut held) {
                    self.emit(event);
                }
            }
        }
        if state_changed {
            self.emit(EventKind::StateChanged {
                state: self.record.conversation.state.clone(),
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
        held_after: Option<(usize, usize)>,
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
            if let Some((after, held)) = held_after
                && after == i
            {
                seq += held as u64;
            }
        }
        if state_changed {
            durable.push((
                seq,
                StoredEvent::StateChanged {
                    at_ms: now,
                    state: self.record.conversation.state.clone(),
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
                self.record.count_reply(u);
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
        let end = EventKind::ToolCallEnd {
            tool_use_id: call.id.clone(),
            name: call.name,
            is_error: output.is_error,
            summary: std::mem::take(&mut output.summary),
            diff: output.diff.take(),
            duration_ms: 0,
            preview: output.preview.take(),
        };
        self.announce_tool(&call.id, end);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Clock;

    #[tokio::test(start_paused = true)]
    async fn a_rollback_puts_back_the_record_the_transcript_and_the_event_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::virtual_at(1_000);
        let mut record = crate::runtime::test_record("c1", dir.path());
        let mut transcript = Arc::new(vec![Message::user(
            vec![agentd_core::ContentBlock::text("one")],
            clock.now_ms(),
        )]);
        let mut fanout = Fanout::new(10);
        let mut rx = fanout.subscribe(&crate::runtime::Rings::default());
        let rollback = Rollback::of(&record, &transcript, &fanout);
        record.title = "changed".into();
        record.conversation.state = ConvState::ContextExhausted {
            summary: "x".into(),
            final_usage: Default::default(),
        };
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        Arc::make_mut(&mut transcript).push(Message::user(
            vec![agentd_core::ContentBlock::text("two")],
            clock.now_ms(),
        ));
        fanout.hold();
        fanout.emit(clock.now_ms(), EventKind::info("never seen"));
        rollback.restore(&mut record, &mut transcript, &mut fanout);
        assert_eq!(record.title, "");
        assert_eq!(record.conversation.state, ConvState::Idle);
        assert_eq!(transcript.len(), 1);
        assert_eq!(
            fanout.next_seq(),
            10,
            "the held event's number is free again"
        );
        fanout.emit(clock.now_ms(), EventKind::info("next"));
        let got = rx.try_recv().unwrap();
        assert_eq!((got.seq, got.at_ms), (10, 1_005));
        assert!(rx.try_recv().is_err(), "the held event was dropped");
    }

    #[test]
    fn a_title_is_the_first_line_that_says_something_cut_at_sixty() {
        assert_eq!(title_of("\n  \n  fix the build \nplease"), "fix the build");
        let long = "x".repeat(70);
        assert_eq!(title_of(&long), format!("{}…", "x".repeat(60)));
    }
}
