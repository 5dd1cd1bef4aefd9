//! One actor (task) per live conversation.
//!
//! The actor owns the conversation's state. For every input it calls the
//! core's `transition`, commits the new state and messages (flushed), and
//! only then carries out the effects. Long effects (a model stream, a tool
//! run, a retry timer) are spawned and report back as inputs tagged with a
//! call number, so a cancel reaches `transition` while they are in flight and
//! late reports of cancelled work are recognised and dropped.
//!
//! This file holds the actor, its loop and the routing of each input to the
//! part that owns it. Each feature's state is a component of its own, with
//! its tests: `Work` (what is in flight), `Fanout` (event numbering and
//! replay), `Permissions`, `HookSet`, `RequestParts` (what model requests
//! share), `Requests` (request ids, the turn guard), `Queue`, `Audit`,
//! `ChildRequests`, `Continuation` and `Rollback` (what a failed commit
//! undoes). The rest are the actor's jobs, one file each: deciding and
//! committing (`commit`, `context`), carrying out effects (`effects`,
//! `model`, `tools`, `hooks`), clients' commands (`commands`, `settings`,
//! `attach`, `rewind`), reports of spawned work (`reports`) and sub-agents.

mod agent_types;
mod attach;
mod audit;
mod child_requests;
mod commands;
mod commit;
mod context;
mod continuation;
mod early;
mod effects;
mod hooks;
mod inputs;
mod labels;
mod mentions;
mod model;
mod permissions;
mod queue;
mod replay;
mod reports;
mod requests;
mod rewind;
mod settings;
mod shell_ends;
mod sub_agent;
mod sub_agent_recovery;
#[cfg(test)]
mod tests;
mod tools;
mod work;

use super::Shared;
use super::error::RuntimeError;
use super::events::EventKind;
use crate::store::ConversationRecord;
use agentd_core::{Event, Message, Rejected, Role};
use audit::Audit;
use child_requests::ChildRequests;
use continuation::Continuation;
use hooks::HookSet;
use model::RequestParts;
use permissions::Permissions;
use replay::Fanout;
use std::sync::Arc;
use tokio::sync::mpsc;
use work::Work;

pub(crate) use inputs::Subscription;
pub(crate) use inputs::{Command, Input, Reply};
pub(crate) use replay::Rings;

pub(crate) struct Actor {
    shared: Arc<Shared>,
    /// The manager's registry of live actors: an idle actor removes itself.
    registry: super::Actors,
    rx: mpsc::UnboundedReceiver<Input>,
    tx: mpsc::UnboundedSender<Input>,
    record: ConversationRecord,
    /// Shared with the model request in flight, which reads it while the
    /// actor goes on (the request is dropped before its end is reported, so
    /// appending rarely has to copy).
    transcript: Arc<Vec<Message>>,
    /// Whether the record is in the store yet (a conversation created with
    /// a prompt is stored by its first transition, together with it).
    stored: bool,
    /// The rules in force and the pending request.
    permissions: Permissions,
    /// What the recovery after a restart said, repeated to clients that
    /// attach later (they get a snapshot, which carries no notices).
    recovery_notices: Vec<String>,
    /// Event numbering, the replay buffer and the attached clients.
    fanout: Fanout,
    /// Work in flight: the model request, running tools, the retry timer.
    work: Work,
    /// What model requests share: system prompt, instructions, images.
    parts: RequestParts,
    /// The hooks of this conversation, read again at every user message.
    hooks: HookSet,
    /// Where to ask the manager to continue this conversation by itself.
    continuation: Continuation,
    /// Where to ask for sub-agents to be started, cancelled, reported.
    sub_agents: mpsc::UnboundedSender<super::sub_agents::SubAgentRequest>,
    /// The permission requests this conversation's sub-agents have pending.
    child_requests: ChildRequests,
    /// Who sent messages and answered requests.
    audit: Audit,
}

/// Whether the actor goes on after an input.
enum Flow {
    Go,
    Stop,
}

impl Actor {
    #[expect(
        clippy::too_many_arguments,
        reason = "each is a distinct part the manager hands over; a struct would only rename them"
    )]
    pub(crate) fn new(
        shared: Arc<Shared>,
        registry: super::Actors,
        record: ConversationRecord,
        transcript: Vec<Message>,
        channel: (mpsc::UnboundedSender<Input>, mpsc::UnboundedReceiver<Input>),
        stored: bool,
        auto_continue: mpsc::UnboundedSender<String>,
        sub_agents: mpsc::UnboundedSender<super::sub_agents::SubAgentRequest>,
    ) -> Actor {
        let (tx, rx) = channel;
        let fanout = Fanout::new(record.seq_reserved + 1);
        let audit = Audit::new(shared.store.clone(), record.id.clone(), shared.clock);
        Actor {
            shared,
            registry,
            rx,
            tx,
            record,
            transcript: Arc::new(transcript),
            stored,
            permissions: Permissions::default(),
            recovery_notices: Vec::new(),
            fanout,
            work: Work::default(),
            parts: RequestParts::default(),
            hooks: HookSet::default(),
            continuation: Continuation::new(auto_continue),
            sub_agents,
            child_requests: ChildRequests::default(),
            audit,
        }
    }

    fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    pub(crate) async fn run(mut self) {
        self.start().await;
        let idle_after = std::time::Duration::from_millis(self.shared.config.limits.idle_unload_ms);
        while let Some(input) = self.next_input(idle_after).await {
            if let Flow::Stop = self.step(input).await {
                return;
            }
        }
    }

    /// What the actor does before its first input: reserve sequence
    /// numbers before the first event goes out (an unstored record gets
    /// its reservation written with its first commit), read the rules and
    /// the hooks, and show a pending request as it was.
    async fn start(&mut self) {
        if self.stored {
            if let Err(e) = self.extend_reservation().await {
                tracing::error!(conversation = %self.record.id, "cannot persist sequence reservation: {e}");
            }
        } else {
            self.record.seq_reserved = replay::reservation_from(self.fanout.next_seq());
        }
        if let Err(e) = self.load_rules() {
            tracing::error!(conversation = %self.record.id, "cannot load permission rules: {e}");
        }
        self.load_hooks();
        if let Some(ask) = self.record.conversation.state.pending_permission().cloned() {
            let view = self.permission_view(&ask).await;
            self.permissions.asked(view);
        }
    }

    /// The next input; None when the actor is to end (its mailbox closed,
    /// or it unloaded itself after `idle_after` at rest).
    async fn next_input(&mut self, idle_after: std::time::Duration) -> Option<Input> {
        loop {
            if !self.is_idle() {
                return self.rx.recv().await;
            }
            match tokio::time::timeout(idle_after, self.rx.recv()).await {
                Ok(input) => return input,
                Err(_) if self.unload().await => return None,
                Err(_) => {}
            }
        }
    }

    /// Handles one input.
    async fn step(&mut self, input: Input) -> Flow {
        let flow = match input {
            Input::Shutdown { done } => {
                self.shutdown().await;
                let _ = done.send(());
                return Flow::Stop;
            }
            Input::Delete { done } => {
                self.work.stop_all();
                let _ = done.send(());
                return Flow::Stop;
            }
            Input::Recover => self.recover().await,
            other => {
                // A tool's end usually starts the next model request: it
                // goes out before the clients' streams are woken. Their
                // wake came first and, on a busy CPU, a client ran before
                // the request was written (issue 44). A reply's call needs
                // no such wait: its command starts on the tool task's
                // first poll, before the woken streams run, while a yield
                // would keep the call's begin from the clients until the
                // worker was free again (after the command, on a busy CPU).
                let work_first = matches!(other, Input::ToolDone { .. });
                if work_first {
                    self.fanout.batch();
                }
                self.handle(other).await;
                if work_first {
                    if self.fanout.batched() {
                        // Until the tasks it started have run.
                        tokio::task::yield_now().await;
                    }
                    self.fanout.send_batch();
                }
                Flow::Go
            }
        };
        self.keep_reservation().await;
        flow
    }

    /// Extends the reservation of sequence numbers once half of it is used.
    async fn keep_reservation(&mut self) {
        if self.fanout.needs_reservation(self.record.seq_reserved)
            && let Err(e) = self.extend_reservation().await
        {
            tracing::error!(conversation = %self.record.id, "cannot persist sequence reservation: {e}");
        }
    }

    /// At rest, with no client attached and nothing in flight: nothing
    /// would be lost by unloading the conversation.
    fn is_idle(&self) -> bool {
        self.record.conversation.state.is_at_rest()
            && self.fanout.clients.is_empty()
            && self.work.is_empty()
    }

    /// Removes this actor from the registry if no input is waiting; the
    /// next input loads the conversation again from the store. Every input
    /// from outside is sent under the registry's lock, so none can arrive
    /// once the entry is gone. Returns whether the actor should end.
    async fn unload(&mut self) -> bool {
        let mut registry = self.registry.lock().await;
        if !self.rx.is_empty() {
            return false;
        }
        registry.remove_if_same(&self.record.id, &self.tx);
        self.shared.environments.unloaded(&self.record.id);
        tracing::debug!(conversation = %self.record.id, "unloaded (idle)");
        true
    }

    /// Routes an input to the part that owns it (the loop itself takes a
    /// recovery and the shutdown, see [`Actor::step`]).
    async fn handle(&mut self, input: Input) {
        match input {
            Input::Command(cmd) => self.command(cmd).await,
            Input::LlmStream { call, event } => self.llm_streamed(call, event).await,
            Input::LlmDone { call, result } => self.llm_done(call, result).await,
            Input::ToolOutput {
                call,
                tool_use_id,
                chunk,
            } => self.tool_output(call, tool_use_id, chunk),
            Input::ToolDone {
                call,
                tool_use_id,
                output,
                duration_ms,
                hooks,
            } => {
                self.tool_done(call, tool_use_id, output, duration_ms, hooks)
                    .await
            }
            Input::PreHooksDone {
                call,
                tool_use_id,
                outcome,
                reports,
            } => {
                self.pre_hooks_done(call, tool_use_id, outcome, reports)
                    .await
            }
            Input::StopHooksDone {
                call,
                continue_with,
                reports,
            } => self.stop_hooks_done(call, continue_with, reports).await,
            Input::PromptChecked {
                call,
                message,
                outcome,
                reports,
                reply,
            } => {
                self.report_hooks(reports);
                let result = self.prompt_checked(call, message, outcome).await;
                let _ = reply.send(result);
            }
            Input::HooksRan(reports) => self.report_hooks(reports),
            Input::RetryDue { call } => {
                if self.work.finish_retry(call) {
                    self.apply_internal(Event::RetryDue).await;
                }
            }
            Input::SubAgentFinished {
                result,
                usage,
                cost_usd,
            } => self.sub_agent_finished(result, usage, cost_usd).await,
            Input::FromSubAgent(kind) => self.sub_agent_event(kind),
            Input::Shell(crate::shells::ShellEvent::Started(r)) => {
                self.emit(EventKind::ShellStarted(r));
            }
            Input::Shell(crate::shells::ShellEvent::Exited(r)) => {
                self.emit(EventKind::ShellExited(r.clone()));
                self.shell_ended(r).await;
            }
            // A slot granted to a recovery that no longer waits for one.
            Input::RecoverySlotGranted => {}
            Input::Recover | Input::Shutdown { .. } | Input::Delete { .. } => {}
        }
    }

    /// Routes a client's command, and sends its answer back.
    async fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Send { message, reply } => self.send(message, reply).await,
            Command::DropQueued { queued_id, reply } => {
                let _ = reply.send(self.drop_queued(&queued_id).await);
            }
            Command::Cancel {
                client_request_id,
                reply,
            } => {
                let _ = reply.send(self.cancel(client_request_id).await);
            }
            Command::Answer { answer, reply } => {
                let _ = reply.send(self.answer(answer).await);
            }
            Command::Subscribe {
                after_seq,
                client,
                reply,
            } => self.subscribe(after_seq, client, reply),
            Command::Detach { client_id } => self.detach(&client_id),
            Command::Resync { client_id, reply } => {
                let _ = reply.send(self.resync(client_id));
            }
            Command::Update { settings, reply } => {
                let _ = reply.send(self.update_settings(settings).await);
            }
            Command::Label { label, reply } => {
                let _ = reply.send(self.label(label).await);
            }
            Command::AnswerBudget { answer, reply } => {
                let _ = reply.send(self.answer_budget(answer).await);
            }
            Command::Compact { reply } => {
                let _ = reply.send(self.compact().await);
            }
            Command::Seed {
                parent_id,
                summary,
                texts,
                images,
                reply,
            } => {
                let event = Event::ContinuedFrom {
                    parent_id,
                    summary,
                    texts,
                    images,
                };
                let _ = reply.send(self.seed(event).await);
            }
            Command::TakeSeed { reply } => {
                let _ = reply.send(Continuation::seed(&self.record));
            }
            Command::EndUnstarted => self.end_unstarted().await,
            Command::MarkContinued {
                next,
                hop,
                automatic,
                taken,
                reply,
            } => {
                let _ = reply.send(self.mark_continued(next, hop, automatic, taken).await);
            }
            Command::Rewind {
                to,
                code,
                force,
                reply,
            } => {
                let _ = reply.send(self.rewind(to, code, force).await);
            }
            Command::Forked {
                message_seq,
                forked_id,
            } => self.emit(EventKind::ConversationForked {
                message_seq,
                forked_id,
            }),
        }
    }

    fn last_user_message_seq(&self) -> u64 {
        self.transcript
            .iter()
            .rposition(|m| m.role == Role::User)
            .map(|i| i as u64 + 1)
            .unwrap_or(0)
    }

    /// The sequence number of the user message whose turn is running: the
    /// last user message that is not tool results (0: none).
    pub(super) fn turn_message_seq(&self) -> u64 {
        self.transcript
            .iter()
            .rposition(starts_turn)
            .map(|i| i as u64 + 1)
            .unwrap_or(0)
    }

    /// Sends an event to every attached client (never blocks, never
    /// writes to the store).
    /// Announces an event of tool call `id`, unless the call started
    /// while its reply streams: then it waits for the reply (`early.rs`).
    fn announce_tool(&mut self, id: &str, kind: EventKind) {
        let early = match &self.record.conversation.state {
            agentd_core::ConvState::LlmRequesting { early, .. } => {
                early.calls.iter().any(|c| c.id == id)
            }
            _ => false,
        };
        if early || self.work.held.holds(id) {
            self.work.held.hold(id, kind);
        } else {
            self.emit(kind);
        }
    }

    fn emit(&mut self, kind: EventKind) {
        if self.record.sub_agent.is_some() {
            self.forward_to_parent(&kind);
        }
        let now = self.now_ms();
        self.fanout.emit(now, kind);
    }

    /// Applies a client's event; the rejection goes back to that client.
    async fn apply(&mut self, event: Event) -> Result<(), RuntimeError> {
        let ctx = self.context(Some(&event));
        let t = agentd_core::transition(&self.record.conversation, &ctx, event)
            .map_err(RuntimeError::Rejected)?;
        self.commit_and_run(t).await
    }

    /// Applies an event reported by the runtime itself; a rejection means
    /// the report is stale and is dropped.
    async fn apply_internal(&mut self, event: Event) {
        match self.apply(event).await {
            Ok(()) => {}
            Err(RuntimeError::Rejected(r @ Rejected::NotApplicable { .. })) => {
                tracing::debug!(conversation = %self.record.id, "dropped: {r}");
            }
            Err(e) => tracing::warn!(conversation = %self.record.id, "event not applied: {e}"),
        }
    }
}

/// Whether `m` is a user message a person sent (it starts a turn), not
/// tool results travelling back to the model.
pub(crate) fn starts_turn(m: &Message) -> bool {
    m.role == Role::User
        && !m
            .content
            .iter()
            .any(|b| matches!(b, agentd_core::ContentBlock::ToolResult { .. }))
}
