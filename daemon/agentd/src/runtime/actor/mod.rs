//! One actor (task) per live conversation.
//!
//! The actor owns the conversation's state. For every input it calls the
//! core's `transition`, commits the new state and messages (flushed), and
//! only then carries out the effects. Long effects (a model stream, a tool
//! run, a retry timer) are spawned and report back as inputs tagged with a
//! call number, so a cancel reaches `transition` while they are in flight and
//! late reports of cancelled work are recognised and dropped.
//!
//! The actor is split by job:
//! - this file: the inputs, the loop, and what each input means;
//! - `commit.rs`: deciding (`transition`), persisting and flushing, and the
//!   one rollback when the store fails;
//! - `effects.rs`: carrying out effects (model requests, tools, timers,
//!   permission requests, rules);
//! - `replay.rs`: event numbering and fan-out, and what a client gets when
//!   it attaches (a snapshot, or the events it missed).

mod commit;
mod effects;
mod replay;
mod rewind;
mod sub_agent;
mod sub_agent_recovery;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

use super::Shared;
use super::error::RuntimeError;
use super::events::{ClientInfo, ConvEvent, EventKind, PermissionView};
use crate::hooks::{HookReport, Hooks, Prompt, Stage};
use crate::llm::{LlmError, StreamEvent};
use crate::store::{
    ConversationRecord, QueuedMessage, RememberedRequest, RequestOutcome, RuleScope as StoredScope,
};
use crate::tools::ToolOutput;
use agentd_core::{Event, Message, Rejected, Reply, Role, Rule, RuleScope, ToolResult};
use effects::Work;
use replay::Fanout;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, oneshot};

pub use replay::{HUB_CAPACITY, Rings};

/// What an actor receives.
pub(crate) enum Input {
    /// A request from a client.
    Command(Command),
    /// A piece of the model's reply.
    LlmStream { call: u64, event: StreamEvent },
    /// The model request ended.
    LlmDone {
        call: u64,
        result: Result<Reply, LlmError>,
    },
    /// A running tool printed something (coalesced, for people watching).
    ToolOutput {
        call: u64,
        tool_use_id: String,
        chunk: crate::tools::OutputChunk,
    },
    /// A tool ended (its post_tool_use hooks included).
    ToolDone {
        call: u64,
        tool_use_id: String,
        output: ToolOutput,
        duration_ms: u64,
        hooks: Vec<HookReport>,
    },
    /// The pre_tool_use hooks of a call answered.
    PreHooksDone {
        call: u64,
        tool_use_id: String,
        outcome: crate::hooks::PreToolUse,
        reports: Vec<HookReport>,
    },
    /// The stop hooks answered.
    StopHooksDone {
        call: u64,
        continue_with: Option<String>,
        reports: Vec<HookReport>,
    },
    /// The hooks before a user message answered.
    PromptChecked {
        call: u64,
        message: super::NewMessage,
        outcome: crate::hooks::Prompt,
        reports: Vec<HookReport>,
        reply: oneshot::Sender<Result<super::Sent, RuntimeError>>,
    },
    /// Notification hooks ran.
    HooksRan(Vec<HookReport>),
    /// A retry timer fired.
    RetryDue { call: u64 },
    /// The daemon found this conversation mid-turn at start-up.
    Recover,
    /// One of this conversation's background shells started or ended.
    Shell(crate::shells::ShellEvent),
    /// The daemon is stopping.
    Shutdown { done: oneshot::Sender<()> },
    /// One of this conversation's sub-agents ended, having used `usage`.
    SubAgentFinished {
        result: agentd_core::SubAgentResult,
        usage: agentd_core::Usage,
        cost_usd: f64,
    },
    /// This sub-agent, found mid-turn at start-up, has its parent's slot:
    /// its recovery goes on (see `sub_agent_recovery`).
    RecoverySlotGranted,
    /// Something one of this conversation's sub-agents told its own
    /// clients that the parent's clients see too (see
    /// `Actor::forward_to_parent`).
    FromSubAgent(EventKind),
}

/// A client's request to an actor.
pub(crate) enum Command {
    Send {
        message: super::NewMessage,
        reply: oneshot::Sender<Result<super::Sent, RuntimeError>>,
    },
    DropQueued {
        /// Empty: all of them.
        queued_id: String,
        reply: oneshot::Sender<Result<Vec<crate::store::QueuedMessage>, RuntimeError>>,
    },
    Cancel {
        client_request_id: Option<String>,
        reply: oneshot::Sender<Result<bool, RuntimeError>>,
    },
    Answer {
        answer: super::Answer,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    Subscribe {
        after_seq: u64,
        /// With the id the manager gave it.
        client: ClientInfo,
        reply: oneshot::Sender<Subscription>,
    },
    Detach {
        client_id: String,
    },
    Resync {
        client_id: String,
        reply: oneshot::Sender<Arc<ConvEvent>>,
    },
    /// Changes the permission mode and/or the model.
    Update {
        settings: super::Settings,
        reply: oneshot::Sender<Result<ConversationRecord, RuntimeError>>,
    },
    /// Answer the budget that holds the turn.
    AnswerBudget {
        answer: super::BudgetAnswer,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    /// Ask for a continuation summary now (from Idle).
    Compact {
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    /// Start a new conversation as the continuation of `parent_id`.
    Seed {
        parent_id: String,
        summary: String,
        texts: Vec<String>,
        /// The images of each of `texts`.
        images: Vec<Vec<agentd_core::ImageRef>>,
        reply: oneshot::Sender<Result<super::Sent, RuntimeError>>,
    },
    /// What a continuation of this (exhausted) conversation is made from.
    TakeSeed {
        reply: oneshot::Sender<Result<super::Seed, RuntimeError>>,
    },
    /// This sub-agent was cancelled before it ran: it records that as its
    /// end and reports it.
    EndUnstarted,
    /// This conversation continues as `next`; the queued messages `taken`
    /// went with it.
    MarkContinued {
        next: String,
        hop: u32,
        automatic: bool,
        taken: Vec<String>,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    /// Restore the files the agent changed since user message `to` (0: the
    /// last), or only check that it can be rewound to (`code` false);
    /// refused while a turn runs. Replies with the message rewound to.
    Rewind {
        to: u64,
        code: bool,
        force: bool,
        reply: oneshot::Sender<Result<(u64, Option<crate::checkpoints::Restored>), RuntimeError>>,
    },
    /// A rewind forked this conversation: tell the clients.
    Forked {
        message_seq: u64,
        forked_id: String,
    },
}

/// A client's view onto a conversation.
#[derive(Debug)]
pub struct Subscription {
    pub client: ClientInfo,
    /// What to send first (a snapshot, or `Resumed` and the missed events).
    pub initial: Vec<Arc<ConvEvent>>,
    pub live: broadcast::Receiver<Arc<ConvEvent>>,
}

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
    /// Every permission rule in force: config file, creation, and rules
    /// added by answers (this conversation's and its project's).
    rules: Vec<Rule>,
    /// Summary and diff of the pending permission request.
    pending_view: Option<PermissionView>,
    /// The request a client's answer is being applied to, for the audit
    /// trail the resolution writes (the state has moved on by then).
    answering: Option<agentd_core::PermissionAsk>,
    /// What the recovery after a restart said, repeated to clients that
    /// attach later (they get a snapshot, which carries no notices).
    recovery_notices: Vec<String>,
    /// Event numbering, the replay buffer and the attached clients.
    fanout: Fanout,
    /// Work in flight: the model request, running tools, the retry timer.
    work: Work,
    /// The hooks of this conversation: the user's, and its project's if
    /// the project is trusted. Read again at every user message.
    hooks: Arc<Hooks>,
    /// Whether `hooks` were read when the actor started and no input has
    /// been waited for since: a message that was already waiting then (the
    /// first message of a new conversation) uses that reading instead of
    /// looking up the same files again.
    hooks_fresh: bool,
    /// Where to ask the manager to continue this conversation by itself
    /// once its context is exhausted (`[context] auto_continue`).
    auto_continue: mpsc::UnboundedSender<String>,
    /// Where to ask for sub-agents to be started, cancelled, reported.
    sub_agents: mpsc::UnboundedSender<super::sub_agents::SubAgentRequest>,
    /// A sub-agent found mid-turn at start-up waits for a slot of its
    /// parent's before it goes on (see `sub_agent_recovery`).
    recovery_deferred: bool,
    /// The permission requests this conversation's sub-agents have pending,
    /// shown to its clients too (again to each that attaches).
    child_requests: Vec<PermissionView>,
}

impl Actor {
    #[allow(
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
        Actor {
            shared,
            registry,
            rx,
            tx,
            record,
            transcript: Arc::new(transcript),
            stored,
            rules: Vec::new(),
            pending_view: None,
            answering: None,
            recovery_notices: Vec::new(),
            fanout,
            work: Work::default(),
            hooks: Arc::new(Hooks::default()),
            hooks_fresh: false,
            auto_continue,
            sub_agents,
            recovery_deferred: false,
            child_requests: Vec::new(),
        }
    }

    /// Reads the conversation's hooks again (the user's, plus the trusted
    /// project's); a project file that cannot be used is logged and kept
    /// with them, for [`Actor::tell_hooks_problem`].
    fn load_hooks(&mut self) {
        let cfg = &self.shared.config;
        let trusted = match self.shared.store.trusted_dirs() {
            Ok(dirs) => dirs,
            Err(e) => {
                tracing::error!(conversation = %self.record.id, "cannot read trusted directories: {e}");
                Vec::new()
            }
        };
        let (mut hooks, problem) =
            Hooks::for_conversation(&cfg.hooks, cfg.hook_timeout_ms, &self.record.cwd, &trusted);
        if let Some(problem) = &problem {
            tracing::warn!(conversation = %self.record.id, "{problem}");
        }
        hooks.problem = problem;
        self.hooks = Arc::new(hooks);
    }

    /// Tells the clients why the project's hooks are not used, with the
    /// message they are not used for: the hooks read when the actor
    /// started are used by a first message no client could have seen a
    /// notice before.
    fn tell_hooks_problem(&mut self) {
        if let Some(problem) = self.hooks.problem.clone() {
            self.emit(EventKind::Notice(problem));
        }
    }

    fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    fn load_rules(&mut self) -> Result<(), crate::store::StoreError> {
        self.rules = self.read_rules()?;
        Ok(())
    }

    /// Every permission rule in force now, as the store has them.
    fn read_rules(&self) -> Result<Vec<Rule>, crate::store::StoreError> {
        let mut rules = self.shared.config.rules.clone();
        for text in &self.record.allow_rules {
            match Rule::parse(text, agentd_core::Action::Allow) {
                Ok(rule) => rules.push(rule),
                Err(e) => {
                    tracing::warn!(conversation = %self.record.id, "ignoring rule {text:?}: {e}")
                }
            }
        }
        let store = &self.shared.store;
        rules.extend(store.rules(&self.stored_scope(RuleScope::Conversation))?);
        rules.extend(store.rules(&self.stored_scope(RuleScope::Project))?);
        Ok(rules)
    }

    /// Where the store keeps rules of `scope` for this conversation. A
    /// sub-agent's conversation rules are its parent's: "allow always"
    /// answered for one child holds for the parent and every sibling.
    fn stored_scope(&self, scope: RuleScope) -> StoredScope {
        match scope {
            RuleScope::Conversation => StoredScope::Conversation(
                self.record
                    .sub_agent
                    .as_ref()
                    .map_or_else(|| self.record.id.clone(), |l| l.parent_id.clone()),
            ),
            RuleScope::Project => StoredScope::Project(self.record.cwd.clone()),
        }
    }

    pub(crate) async fn run(mut self) {
        // Reserve sequence numbers before the first event goes out. An
        // unstored record gets its reservation written with its first commit.
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
        self.hooks_fresh = true;
        if let Some(ask) = self.record.state.pending_permission().cloned() {
            self.pending_view = Some(self.permission_view(&ask).await);
        }
        let idle_after = std::time::Duration::from_millis(self.shared.config.limits.idle_unload_ms);
        loop {
            if self.rx.is_empty() {
                // What comes next arrives after the hooks were read.
                self.hooks_fresh = false;
            }
            let input = if self.is_idle() {
                match tokio::time::timeout(idle_after, self.rx.recv()).await {
                    Ok(input) => input,
                    Err(_) => {
                        if self.unload().await {
                            return;
                        }
                        continue;
                    }
                }
            } else {
                self.rx.recv().await
            };
            match input {
                Some(Input::Shutdown { done }) => {
                    self.shutdown().await;
                    let _ = done.send(());
                    return;
                }
                Some(other) => self.handle(other).await,
                None => return,
            }
            if self.fanout.needs_reservation(self.record.seq_reserved)
                && let Err(e) = self.extend_reservation().await
            {
                tracing::error!(conversation = %self.record.id, "cannot persist sequence reservation: {e}");
            }
        }
    }

    /// At rest, with no client attached and nothing in flight: nothing
    /// would be lost by unloading the conversation.
    fn is_idle(&self) -> bool {
        self.record.state.is_at_rest() && self.fanout.clients.is_empty() && self.work.is_empty()
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
        tracing::debug!(conversation = %self.record.id, "unloaded (idle)");
        true
    }

    async fn handle(&mut self, input: Input) {
        match input {
            Input::Command(cmd) => self.command(cmd).await,
            Input::LlmStream { call, event } => {
                if !self.work.is_current_llm(call) {
                    return;
                }
                self.work.partial.push(&event);
                let kind = match event {
                    StreamEvent::TextDelta { index, text } => EventKind::TextDelta { index, text },
                    StreamEvent::ThinkingDelta { index, text } => {
                        EventKind::ThinkingDelta { index, text }
                    }
                    _ => return,
                };
                self.emit(kind);
            }
            Input::LlmDone { call, result } => {
                if !self.work.finish_llm(call) {
                    return;
                }
                let event = match result {
                    Ok(reply) => Event::LlmCompleted { reply },
                    Err(LlmError::Cancelled) => return,
                    Err(e) => {
                        tracing::warn!(conversation = %self.record.id, "model request failed: {e}");
                        Event::LlmFailed {
                            failure: e.to_failure(),
                            jitter_permille: rand::random_range(0..1000),
                        }
                    }
                };
                self.apply_internal(event).await;
            }
            Input::ToolOutput {
                call,
                tool_use_id,
                chunk,
            } => {
                if self.work.is_current_tool(call, &tool_use_id) {
                    self.emit(EventKind::ToolOutputDelta {
                        tool_use_id,
                        text: chunk.text,
                        skipped_bytes: chunk.skipped_bytes,
                    });
                }
            }
            Input::ToolDone {
                call,
                tool_use_id,
                output,
                duration_ms,
                hooks,
            } => {
                self.report_hooks(hooks);
                if !self.work.finish_tool(call, &tool_use_id) {
                    return;
                }
                let name = self.tool_name(&tool_use_id);
                self.emit(EventKind::ToolCallEnd {
                    tool_use_id: tool_use_id.clone(),
                    name,
                    is_error: output.is_error,
                    summary: output.summary.clone(),
                    diff: output.diff.clone(),
                    duration_ms,
                    preview: output.preview.clone(),
                });
                let result = self.tool_result(tool_use_id, output);
                self.apply_internal(Event::ToolCompleted { result }).await;
            }
            Input::PreHooksDone {
                call,
                tool_use_id,
                outcome,
                reports,
            } => {
                self.report_hooks(reports);
                if self.work.finish_hooks(call) {
                    self.apply_internal(Event::PreToolHooksDecided {
                        tool_use_id,
                        verdict: outcome.verdict,
                        new_input: outcome.new_input,
                    })
                    .await;
                }
            }
            Input::StopHooksDone {
                call,
                continue_with,
                reports,
            } => {
                self.report_hooks(reports);
                if self.work.finish_hooks(call) {
                    self.apply_internal(Event::StopHooksDecided { continue_with })
                        .await;
                }
            }
            Input::PromptChecked {
                call,
                message,
                outcome,
                reports,
                reply,
            } => {
                self.report_hooks(reports);
                if !self.work.finish_prompt(call) {
                    let _ = reply.send(Err(RuntimeError::NotAllowed(
                        "the message was cancelled while its hooks ran".to_string(),
                    )));
                    return;
                }
                let result = match outcome {
                    Prompt::Block(reason) => Err(RuntimeError::HookBlocked(reason)),
                    Prompt::Send { context } => {
                        let mut message = message;
                        for more in context {
                            message.text.push_str("\n\n");
                            message.text.push_str(&more);
                        }
                        self.send_now(message).await
                    }
                };
                let _ = reply.send(result);
            }
            Input::HooksRan(reports) => self.report_hooks(reports),
            Input::RetryDue { call } => {
                if self.work.finish_retry(call) {
                    self.apply_internal(Event::RetryDue).await;
                }
            }
            Input::Recover => self.recover().await,
            Input::RecoverySlotGranted => {
                if self.recovery_deferred {
                    self.recover_now().await;
                }
            }
            Input::SubAgentFinished {
                result,
                usage,
                cost_usd,
            } => self.sub_agent_finished(result, usage, cost_usd).await,
            Input::FromSubAgent(kind) => self.sub_agent_event(kind),
            Input::Shell(event) => {
                let kind = match event {
                    crate::shells::ShellEvent::Started(r) => EventKind::ShellStarted(r),
                    crate::shells::ShellEvent::Exited(r) => EventKind::ShellExited(r),
                };
                self.emit(kind);
            }
            Input::Shutdown { .. } => {}
        }
    }

    async fn command(&mut self, cmd: Command) {
        if self.recovery_deferred
            && matches!(
                cmd,
                Command::Cancel { .. } | Command::Answer { .. } | Command::AnswerBudget { .. }
            )
        {
            // What a cancel or an answer acts on is the recovered turn.
            self.recover_now().await;
        }
        match cmd {
            Command::Send { message, reply } => {
                let result = match self.remembered(message.client_request_id.as_deref()) {
                    Some(RequestOutcome::Sent { message_seq }) => {
                        Some(Ok(super::Sent::Appended(message_seq)))
                    }
                    Some(RequestOutcome::Queued { number }) => {
                        Some(Ok(super::Sent::Queued(queued_id(number))))
                    }
                    Some(other) => Some(Err(reused(message.client_request_id.as_deref(), other))),
                    None => match message.expected_turn {
                        Some(expected) if expected != self.record.turns => {
                            Some(Err(RuntimeError::StaleTurn {
                                expected,
                                current: self.record.turns,
                            }))
                        }
                        _ => None,
                    },
                };
                if let Some(result) = result {
                    let _ = reply.send(result);
                    return;
                }
                self.recovery_notices.clear();
                // A message the state would refuse is refused before any
                // hook runs.
                let probe = Event::UserMessage {
                    text: message.text.clone(),
                    images: message.images.iter().map(|i| i.image.clone()).collect(),
                };
                let refused =
                    match agentd_core::transition(&self.record.state, &self.context(None), probe) {
                        Err(r) => Some(r),
                        Ok(_) if self.work.prompt_checking() => Some(Rejected::Busy),
                        Ok(_) => None,
                    };
                match refused {
                    Some(Rejected::Busy | Rejected::CancellationInProgress)
                        if message.queue_if_busy =>
                    {
                        let _ = reply.send(self.enqueue(message).await);
                        return;
                    }
                    Some(r) => {
                        let _ = reply.send(Err(RuntimeError::Rejected(r)));
                        return;
                    }
                    None => {}
                }
                if !std::mem::take(&mut self.hooks_fresh) {
                    self.load_hooks();
                }
                self.tell_hooks_problem();
                let session_start = if self.transcript.is_empty() {
                    self.hooks.all_of(Stage::SessionStart)
                } else {
                    Vec::new()
                };
                let submit = self.hooks.all_of(Stage::UserPromptSubmit);
                if session_start.is_empty() && submit.is_empty() {
                    let result = self.send_now(message).await;
                    let _ = reply.send(result);
                } else {
                    self.check_prompt(session_start, submit, message, reply);
                }
            }
            Command::DropQueued { queued_id, reply } => {
                let _ = reply.send(self.drop_queued(&queued_id).await);
            }
            Command::Cancel {
                client_request_id,
                reply,
            } => {
                let result = match self.remembered(client_request_id.as_deref()) {
                    Some(RequestOutcome::Cancelled { was_busy }) => Ok(was_busy),
                    Some(other) => Err(reused(client_request_id.as_deref(), other)),
                    None => {
                        // Hooks checking a message that is not sent yet stop too.
                        self.work.cancel_prompt();
                        let was_busy = !self.record.state.is_at_rest();
                        self.apply_request(
                            client_request_id,
                            RequestOutcome::Cancelled { was_busy },
                            false,
                            Event::UserCancel,
                        )
                        .await
                        .map(|()| was_busy)
                    }
                };
                let _ = reply.send(result);
            }
            Command::Answer { answer, reply } => {
                let super::Answer {
                    request_id,
                    decision,
                    feedback,
                    scope,
                    by,
                    client_request_id,
                    plan,
                } = answer;
                let result = match self.remembered(client_request_id.as_deref()) {
                    Some(RequestOutcome::Answered) => Ok(()),
                    Some(other) => Err(reused(client_request_id.as_deref(), other)),
                    None => {
                        self.answering = self.record.state.pending_permission().cloned();
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
                        self.apply_request(
                            client_request_id,
                            RequestOutcome::Answered,
                            false,
                            event,
                        )
                        .await
                    }
                };
                let _ = reply.send(result);
            }
            Command::Subscribe {
                after_seq,
                client,
                reply,
            } => {
                let live = self.fanout.subscribe(&self.shared.rings);
                let initial = self.initial_frames(after_seq, &client);
                self.fanout.clients.push(client.clone());
                let _ = reply.send(Subscription {
                    client: client.clone(),
                    initial,
                    live,
                });
                self.emit(EventKind::ClientAttached(client));
            }
            Command::Detach { client_id } => {
                if let Some(pos) = self.fanout.clients.iter().position(|c| c.id == client_id) {
                    let client = self.fanout.clients.remove(pos);
                    self.emit(EventKind::ClientDetached(client));
                    if let Some(ring) = self.fanout.unwatched_hub() {
                        self.shared.rings.recycle(ring);
                    }
                }
            }
            Command::Resync { client_id, reply } => {
                let client = self
                    .fanout
                    .clients
                    .iter()
                    .find(|c| c.id == client_id)
                    .cloned()
                    .unwrap_or(ClientInfo::local(
                        client_id,
                        "",
                        agentd_core::ClientRole::Viewer,
                    ));
                let _ = reply.send(self.snapshot(&client));
            }
            Command::Update { settings, reply } => {
                let _ = reply.send(self.update_settings(settings).await);
            }
            Command::AnswerBudget { answer, reply } => {
                let _ = reply.send(self.answer_budget(answer).await);
            }
            Command::Compact { reply } => {
                self.recovery_notices.clear();
                let result = match self.apply(Event::UserTriggerContinuation).await {
                    Err(RuntimeError::Rejected(Rejected::NotApplicable { state, .. })) => {
                        Err(RuntimeError::NotAllowed(format!(
                            "conversation {} can be compacted only when it is idle (it is in state {state}); send a message first",
                            self.record.id
                        )))
                    }
                    other => other,
                };
                let _ = reply.send(result);
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
                let result = self
                    .apply_request(None, RequestOutcome::Sent { message_seq: 1 }, true, event)
                    .await
                    .map(|()| super::Sent::Appended(self.last_user_message_seq()));
                let _ = reply.send(result);
            }
            Command::TakeSeed { reply } => {
                let result = match (&self.record.continued_as, &self.record.state) {
                    (Some(next), _) => Ok(super::Seed::Continued(next.clone())),
                    (None, agentd_core::ConvState::ContextExhausted { .. }) => {
                        Ok(super::Seed::Exhausted(Box::new(self.record.clone())))
                    }
                    (None, state) => Err(RuntimeError::NotAllowed(format!(
                        "conversation {} cannot be continued: its context is not exhausted \
                         (state {}); `agent compact` asks for a summary first",
                        self.record.id,
                        state.name()
                    ))),
                };
                let _ = reply.send(result);
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

    /// Records that this conversation continues as `next` (its queued
    /// messages `taken` went there), durably, and tells every attached
    /// client, so they can follow.
    async fn mark_continued(
        &mut self,
        next: String,
        hop: u32,
        automatic: bool,
        taken: Vec<String>,
    ) -> Result<(), RuntimeError> {
        if self.record.continued_as.as_deref() == Some(next.as_str()) {
            return Ok(());
        }
        let saved = self.record.clone();
        self.record.continued_as = Some(next.clone());
        self.record.continued_automatically = automatic;
        self.record.continue_pending = false;
        self.record.queued.retain(|q| !taken.contains(&q.id));
        let queue_changed = self.record.queued.len() != saved.queued.len();
        self.record.updated_at_ms = self.now_ms();
        if let Err(e) = self.write_record().await {
            tracing::error!(conversation = %self.record.id, "persisting the continuation failed: {e}");
            self.record = saved;
            return Err(RuntimeError::Store(e));
        }
        if queue_changed {
            self.emit(EventKind::QueueChanged(self.record.queued.clone()));
        }
        self.emit(EventKind::ConversationContinued {
            conversation_id: next,
            hop,
            automatic,
        });
        Ok(())
    }

    /// Whether the daemon is to continue this (just exhausted)
    /// conversation by itself: the config says so and the chain is not too
    /// long yet.
    fn auto_continue_due(&self) -> bool {
        let context = &self.shared.config.context;
        context.auto_continue
            && self.record.continued_as.is_none()
            && self.record.hop < context.max_hops
    }

    /// Once exhausted: asks the manager for the continuation the daemon
    /// owes, or says why it makes none when it would have.
    fn after_exhaustion(&mut self) {
        let context = &self.shared.config.context;
        if self.record.continue_pending {
            self.maybe_auto_continue();
        } else if context.auto_continue && self.record.continued_as.is_none() {
            let notice = format!(
                "not continued automatically: {} continuations in a row is the limit ([context] max_hops); `agent continue` goes on",
                context.max_hops
            );
            self.emit(EventKind::Notice(notice));
        }
    }

    /// Asks the manager to continue this conversation, when the record
    /// says the daemon owes it a continuation (see `continue_pending`).
    fn maybe_auto_continue(&mut self) {
        if self.record.continue_pending
            && matches!(
                self.record.state,
                agentd_core::ConvState::ContextExhausted { .. }
            )
        {
            let _ = self.auto_continue.send(self.record.id.clone());
        }
    }

    /// Sets the mode and/or the model: written before the client hears of
    /// it, then every client is told. The next permission decision and the
    /// next model request read them from the record.
    async fn update_settings(
        &mut self,
        settings: super::Settings,
    ) -> Result<ConversationRecord, RuntimeError> {
        let mode = settings.mode.filter(|m| *m != self.record.mode);
        let model = settings.model.filter(|m| *m != self.record.model);
        let mut dirs = Vec::new();
        for dir in settings.add_dirs {
            if dir != self.record.cwd
                && !self.record.additional_dirs.contains(&dir)
                && !dirs.contains(&dir)
            {
                dirs.push(dir);
            }
        }
        super::too_many_dirs(self.record.additional_dirs.len() + dirs.len())?;
        if mode.is_none() && model.is_none() && dirs.is_empty() {
            return Ok(self.record.clone());
        }
        let saved = self.record.clone();
        if let Some(mode) = mode {
            self.record.mode = mode;
        }
        if let Some(model) = model {
            self.record.model = model;
        }
        self.record.additional_dirs.extend(dirs);
        self.record.updated_at_ms = self.now_ms();
        if let Err(e) = self.write_record().await {
            tracing::error!(conversation = %self.record.id, "persisting settings failed: {e}");
            self.record = saved;
            return Err(RuntimeError::Store(e));
        }
        tracing::info!(
            conversation = %self.record.id,
            mode = self.record.mode.as_str(),
            model = %self.record.model,
            "settings changed"
        );
        self.announce_settings(settings.by);
        Ok(self.record.clone())
    }

    /// Answers the budget that holds the turn: a raise is written (the
    /// conversation's in its record, a day's in the store) and committed
    /// with the transition it makes, which sends the held request (or holds
    /// it again if the raise was too small); "stop" ends the turn.
    async fn answer_budget(&mut self, answer: super::BudgetAnswer) -> Result<(), RuntimeError> {
        let agentd_core::ConvState::BudgetStopped { stop, .. } = &self.record.state else {
            return Err(RuntimeError::NotAllowed(format!(
                "no budget holds conversation {} (it is in state {})",
                self.record.id,
                self.record.state.name()
            )));
        };
        let stop = *stop;
        let saved = self.record.clone();
        let raised_by = if answer.raise {
            let by = match answer.raise_by {
                Some(v) if stop.kind.is_usd() => agentd_core::budget::micro_usd(v).max(1),
                Some(v) => v.round().max(1.0) as u64,
                None => stop.raise_by,
            };
            if stop.kind.is_daily() {
                let day = crate::runtime::prompt::civil_date(self.now_ms());
                self.shared.store.raise_day_budget(&day, stop.kind, by)?;
            } else {
                let before = self.record.budget_raised.get(stop.kind).unwrap_or(0);
                self.record
                    .budget_raised
                    .set(stop.kind, Some(before.saturating_add(by)));
            }
            Some(by)
        } else {
            None
        };
        tracing::info!(
            conversation = %self.record.id,
            budget = stop.kind.name(),
            raised_by = ?raised_by,
            "budget answered"
        );
        let client = answer.by.clone();
        self.persist_event(crate::store::StoredEvent::BudgetResolved {
            at_ms: self.now_ms(),
            stop,
            raised_by,
            client: client.clone(),
        })
        .await;
        self.emit(EventKind::BudgetResolved {
            stop,
            raised_by,
            client,
        });
        let result = self
            .apply(Event::BudgetAnswered {
                raise: answer.raise,
            })
            .await;
        if result.is_err() {
            self.record.budget_raised = saved.budget_raised;
        }
        result
    }

    /// Tells every client the mode and model now.
    fn announce_settings(&mut self, by: String) {
        let context_window = self
            .shared
            .config
            .models
            .lookup(&self.record.model)
            .context_window;
        self.emit(EventKind::SettingsChanged {
            mode: self.record.mode,
            model: self.record.model.clone(),
            context_window,
            additional_dirs: self.record.additional_dirs.clone(),
            by,
        });
    }

    /// What the request `id` did, if this conversation remembers it.
    fn remembered(&self, id: Option<&str>) -> Option<RequestOutcome> {
        let id = id?;
        self.record
            .requests
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.outcome)
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
        let turns = self.record.turns;
        let requests = client_request_id
            .is_some()
            .then(|| self.record.requests.clone());
        if new_turn {
            self.record.turns += 1;
        }
        if let Some(id) = client_request_id {
            self.remember(id, outcome);
        }
        let result = self.apply(event).await;
        if result.is_err() {
            self.record.turns = turns;
            if let Some(requests) = requests {
                self.record.requests = requests;
            }
        }
        result
    }

    /// Remembers what the request `id` did, in the record the commit of
    /// its effect writes.
    fn remember(&mut self, id: String, outcome: RequestOutcome) {
        let now = self.now_ms();
        let requests = &mut self.record.requests;
        requests.retain(|r| now - r.at_ms < super::REQUEST_ID_WINDOW_MS);
        if requests.len() >= super::REQUEST_IDS_PER_CONVERSATION {
            requests.remove(0);
        }
        requests.push(RememberedRequest {
            id,
            at_ms: now,
            outcome,
        });
    }

    /// Queues a user message sent while a turn runs: durable before the
    /// sender hears of it, shown to every client, delivered by the core at
    /// the turn's next model request or when it ends.
    async fn enqueue(&mut self, message: super::NewMessage) -> Result<super::Sent, RuntimeError> {
        // The record carries the queue and is written at every commit.
        if self.record.queued.len() >= super::MAX_QUEUED {
            return Err(RuntimeError::QueueFull(super::MAX_QUEUED));
        }
        let saved = self.record.clone();
        let number = self.record.queued_next;
        self.record.queued_next += 1;
        self.record.turns += 1;
        if let Some(id) = message.client_request_id {
            self.remember(id, RequestOutcome::Queued { number });
        }
        let id = queued_id(number);
        if let Err(e) = self.store_images(&message.images) {
            self.record = saved;
            return Err(e);
        }
        let audited = (message.by.clone())
            .or_else(|| message.from.clone())
            .map(|c| (c, message.text.clone()));
        self.record.queued.push(QueuedMessage {
            id: id.clone(),
            text: message.text,
            at_ms: self.now_ms(),
            from: message.from.map(|c| (c.id, c.name)),
            images: message.images.into_iter().map(|i| i.image).collect(),
        });
        self.persist_queue(saved).await?;
        if let Some((client, text)) = audited {
            self.audit_message(client, &text, Some(id.clone())).await;
        }
        Ok(super::Sent::Queued(id))
    }

    /// Writes the bytes of a message's images (content-addressed, so an
    /// image already stored costs nothing). Not flushed here: the commit
    /// that appends (or queues) the message is written after them and
    /// flushed, and sled recovers its log as a prefix, so the message is
    /// never durable without its images. Also keeps their base64 for the
    /// model requests to come.
    fn store_images(&mut self, images: &[crate::images::StagedImage]) -> Result<(), RuntimeError> {
        for staged in images {
            self.shared
                .store
                .put_image(&staged.image.sha256, &staged.bytes)?;
            if !self.work.images.contains_key(&staged.image.sha256) {
                std::sync::Arc::make_mut(&mut self.work.images).insert(
                    staged.image.sha256.clone(),
                    crate::images::base64(&staged.bytes).into(),
                );
            }
        }
        Ok(())
    }

    /// The transcript's result of a tool's `output`. Images it returned are
    /// stored first (like a user's: content-addressed, flushed by the
    /// commit that appends the result); should the store refuse them, the
    /// model is told in the text instead.
    pub(super) fn tool_result(
        &mut self,
        tool_use_id: String,
        output: crate::tools::ToolOutput,
    ) -> ToolResult {
        let mut result = ToolResult::new(tool_use_id, output.content, output.is_error);
        if output.images.is_empty() {
            return result;
        }
        match self.store_images(&output.images) {
            Ok(()) => {
                result.images = output.images.into_iter().map(|s| s.image).collect();
            }
            Err(e) => {
                tracing::error!(conversation = %self.record.id, "cannot store a tool's images: {e}");
                result
                    .content
                    .push_str(&format!("\n[the image(s) could not be kept: {e}]"));
            }
        }
        result
    }

    /// Drops a queued message (all of them for an empty id).
    async fn drop_queued(&mut self, queued_id: &str) -> Result<Vec<QueuedMessage>, RuntimeError> {
        let saved = self.record.clone();
        if queued_id.is_empty() {
            self.record.queued.clear();
        } else {
            let before = self.record.queued.len();
            self.record.queued.retain(|q| q.id != queued_id);
            if self.record.queued.len() == before {
                return Err(RuntimeError::NotQueued {
                    id: queued_id.to_string(),
                    conversation: self.record.id.clone(),
                });
            }
        }
        self.persist_queue(saved).await?;
        Ok(self.record.queued.clone())
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
        self.emit(EventKind::QueueChanged(self.record.queued.clone()));
        Ok(())
    }

    /// Feeds a user message (its hooks, if any, have run), as its
    /// request.
    async fn send_now(&mut self, message: super::NewMessage) -> Result<super::Sent, RuntimeError> {
        let message_seq = self.transcript.len() as u64 + 1;
        self.store_images(&message.images)?;
        let audited = (message.by.clone())
            .or_else(|| message.from.clone())
            .map(|c| (c, message.text.clone()));
        self.apply_request(
            message.client_request_id,
            RequestOutcome::Sent { message_seq },
            true,
            Event::UserMessage {
                text: message.text,
                images: message.images.into_iter().map(|i| i.image).collect(),
            },
        )
        .await?;
        if let Some((client, text)) = audited {
            self.audit_message(client, &text, None).await;
        }
        Ok(super::Sent::Appended(self.last_user_message_seq()))
    }

    /// Records who sent a message that was accepted (appended, or queued
    /// as `queued_id`), durably: the message itself already is.
    async fn audit_message(
        &self,
        client: agentd_core::ClientInfo,
        text: &str,
        queued_id: Option<String>,
    ) {
        self.audit(
            client,
            crate::store::access::AuditAction::MessageSent {
                text: text
                    .chars()
                    .take(crate::store::access::AUDIT_TEXT_CHARS)
                    .collect(),
                queued_id,
            },
        );
        if let Err(e) = self.shared.store.flush().await {
            tracing::error!(conversation = %self.record.id, "cannot flush the audit trail: {e}");
        }
    }

    /// Tells clients about hooks that ran, and records them in the event
    /// log (durable with the next flush: a hook's report is not worth a
    /// flush of its own).
    fn report_hooks(&mut self, reports: Vec<HookReport>) {
        for report in reports {
            if let Some(error) = &report.error {
                tracing::warn!(conversation = %self.record.id, "{} hook `{}` failed: {error}", report.stage.as_str(), report.command);
            }
            let stored = crate::store::StoredEvent::HookRan {
                at_ms: self.now_ms(),
                stage: report.stage,
                command: report.command.clone(),
                decision: report.decision.clone(),
                duration_ms: report.duration_ms,
                error: report.error.clone(),
            };
            let seq = self.fanout.next_seq();
            if let Err(e) = self.shared.store.put_event(&self.record.id, seq, &stored) {
                tracing::error!(conversation = %self.record.id, "cannot record a hook's report: {e}");
            }
            self.emit(EventKind::HookRan(report));
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

    fn tool_name(&self, tool_use_id: &str) -> String {
        match &self.record.state {
            agentd_core::ConvState::ToolExecuting(run) => run
                .calls
                .iter()
                .find(|c| c.id == tool_use_id)
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            _ => String::new(),
        }
    }

    /// Sends an event to every attached client (never blocks, never
    /// writes to the store).
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
        let t = agentd_core::transition(&self.record.state, &ctx, event)
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

/// The id of queued message `number`.
fn queued_id(number: u64) -> String {
    format!("q{number}")
}

/// The refusal of a request id already used by a request of another kind.
fn reused(id: Option<&str>, first: RequestOutcome) -> RuntimeError {
    let what = match first {
        RequestOutcome::Sent { .. } => "a message",
        RequestOutcome::Answered => "a permission answer",
        RequestOutcome::Cancelled { .. } => "a cancel",
        RequestOutcome::Queued { .. } => "a queued message",
    };
    RuntimeError::InvalidArgument(format!(
        "client request id {} was already used by {what}",
        crate::grpc::convert::brief(id.unwrap_or_default())
    ))
}
