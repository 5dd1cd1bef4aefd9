//! One actor (task) per live conversation.
//!
//! The actor owns the conversation's state. For every event it calls the
//! core's `transition`, persists the new state and messages (flushed), and
//! only then carries out the effects. Long effects (a model stream, a tool
//! run, a retry timer) are spawned and report back as inputs tagged with a
//! call number, so a cancel reaches `transition` while they are in flight and
//! late reports of cancelled work are recognised and dropped.

use super::Shared;
use super::error::RuntimeError;
use super::events::{ClientInfo, ConvEvent, EventKind, PermissionView, SnapshotData};
use super::prompt;
use crate::llm::{LlmError, LlmRequest, PartialReply, StreamEvent};
use crate::store::{ConversationRecord, RuleScope, StoredEvent};
use crate::tools::{ToolContext, ToolOutput};
use agentd_core::{
    ContentBlock, ConvContext, ConvState, Decision, Effect, Event, LlmPurpose, Message, Notice,
    Policy, Rejected, Reply, Role, Rule, ToolCall, ToolResult, transition,
};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How many events a client may fall behind before it is resynchronised
/// with a fresh snapshot instead of slowing anyone down.
pub const HUB_CAPACITY: usize = 8192;
/// Recent events kept for clients that reconnect with `after_seq` (beyond
/// it they get a snapshot).
const REPLAY_CAPACITY: usize = 1024;
/// Durable events replayed from the store to a reconnecting client; beyond
/// this it gets a snapshot.
const MAX_STORED_REPLAY: usize = 2048;
/// Event sequence numbers reserved (and persisted) ahead of use, so a
/// restarted daemon never hands out a number twice.
const SEQ_RESERVE: u64 = 1 << 16;
/// Tool calls remembered for the doom-loop detector.
const RECENT_CALLS: usize = 8;

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
    /// A tool ended.
    ToolDone {
        call: u64,
        tool_use_id: String,
        output: ToolOutput,
        duration_ms: u64,
    },
    /// A retry timer fired.
    RetryDue { call: u64 },
    /// The daemon found this conversation mid-turn at start-up.
    Recover,
    /// One of this conversation's background shells started or ended.
    Shell(crate::shells::ShellEvent),
    /// The daemon is stopping.
    Shutdown { done: oneshot::Sender<()> },
}

/// A client's request to an actor.
pub(crate) enum Command {
    Send {
        text: String,
        reply: oneshot::Sender<Result<u64, RuntimeError>>,
    },
    Cancel {
        reply: oneshot::Sender<Result<bool, RuntimeError>>,
    },
    Answer {
        request_id: String,
        decision: Decision,
        feedback: Option<String>,
        client: Option<ClientInfo>,
        /// An added rule applies to the whole working directory.
        project_scope: bool,
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    Subscribe {
        after_seq: u64,
        name: String,
        client_id: String,
        reply: oneshot::Sender<Subscription>,
    },
    Detach {
        client_id: String,
    },
    Resync {
        client_id: String,
        reply: oneshot::Sender<Arc<ConvEvent>>,
    },
}

/// Work queued inside one `commit_and_run`.
enum Step {
    /// A transition already decided.
    Apply(Box<agentd_core::Transition>),
    /// An event to decide when its turn comes, on the state the steps
    /// before it leave (the results of several instant calls).
    Decide(Event),
}

/// A client's view onto a conversation.
#[derive(Debug)]
pub struct Subscription {
    /// Who the client is.
    pub client: ClientInfo,
    /// What to send first (a snapshot, or `Resumed` and the missed events).
    pub initial: Vec<Arc<ConvEvent>>,
    /// Live events.
    pub live: broadcast::Receiver<Arc<ConvEvent>>,
}

struct InFlight {
    call: u64,
    cancel: CancellationToken,
}

pub(crate) struct Actor {
    shared: Arc<Shared>,
    /// The manager's registry of live actors: an idle actor removes itself.
    registry: super::Actors,
    record: ConversationRecord,
    /// Shared with the model request in flight, which reads it while the
    /// actor goes on (the request is dropped before its end is reported, so
    /// appending rarely has to copy).
    transcript: Arc<Vec<Message>>,
    /// The generated system prompt and the day it was made for.
    system_prompt: Option<(i64, Arc<str>)>,
    /// The encoded transcript prefix providers reuse across requests;
    /// replaced whenever the transcript shrinks (a rollback).
    request_cache: crate::llm::RequestCache,
    rx: mpsc::UnboundedReceiver<Input>,
    tx: mpsc::UnboundedSender<Input>,
    /// The fan-out to attached clients; made when the first client attaches
    /// (its ring is the biggest thing a live conversation holds).
    hub: Option<broadcast::Sender<Arc<ConvEvent>>>,
    replay: VecDeque<Arc<ConvEvent>>,
    clients: Vec<ClientInfo>,
    next_seq: u64,
    next_call: u64,
    llm: Option<InFlight>,
    partial: PartialReply,
    tools: HashMap<String, (InFlight, Instant)>,
    retry: Option<(u64, tokio::task::JoinHandle<()>)>,
    /// What the recovery after a restart said, repeated to clients that
    /// attach later (they get a snapshot, which carries no notices).
    recovery_notices: Vec<String>,
    /// A recovery transition is being applied.
    recovering: bool,
    /// Whether the record is in the store yet (a conversation created with
    /// a prompt is stored by its first transition, together with it).
    stored: bool,
    /// The client whose answer is being applied (named in the resolved event).
    answering: Option<ClientInfo>,
    /// Whether that answer asked for a rule on the whole project.
    answering_project: bool,
    /// A tool call a user chose to run as a background shell.
    to_background: Option<String>,
    /// Every permission rule in force: config file, creation, and rules
    /// added by answers (this conversation's and its project's).
    rules: Vec<Rule>,
    /// Summary and diff of the pending permission request.
    pending_view: Option<PermissionView>,
    /// Events held back until the store is flushed (see `commit_and_run`).
    staging: Option<Vec<Arc<ConvEvent>>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Actor {
    pub(crate) fn new(
        shared: Arc<Shared>,
        registry: super::Actors,
        record: ConversationRecord,
        transcript: Vec<Message>,
        rx: mpsc::UnboundedReceiver<Input>,
        tx: mpsc::UnboundedSender<Input>,
        stored: bool,
    ) -> Actor {
        let next_seq = record.seq_reserved + 1;
        Actor {
            shared,
            registry,
            record,
            transcript: Arc::new(transcript),
            system_prompt: None,
            request_cache: crate::llm::RequestCache::default(),
            rx,
            tx,
            hub: None,
            replay: VecDeque::new(),
            clients: Vec::new(),
            next_seq,
            next_call: 1,
            llm: None,
            partial: PartialReply::default(),
            tools: HashMap::new(),
            retry: None,
            stored,
            recovery_notices: Vec::new(),
            recovering: false,
            answering: None,
            answering_project: false,
            to_background: None,
            rules: Vec::new(),
            pending_view: None,
            staging: None,
        }
    }

    fn load_rules(&mut self) -> Result<(), crate::store::StoreError> {
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
        rules.extend(store.rules(&RuleScope::Conversation(self.record.id.clone()))?);
        rules.extend(store.rules(&RuleScope::Project(self.record.cwd.clone()))?);
        self.rules = rules;
        Ok(())
    }

    pub(crate) async fn run(mut self) {
        // Reserve sequence numbers before the first event goes out. An
        // unstored record gets its reservation written with its first commit.
        if !self.stored {
            self.record.seq_reserved = self.next_seq + SEQ_RESERVE;
        } else if let Err(e) = self.reserve_seqs().await {
            tracing::error!(conversation = %self.record.id, "cannot persist sequence reservation: {e}");
        }
        if let Err(e) = self.load_rules() {
            tracing::error!(conversation = %self.record.id, "cannot load permission rules: {e}");
        }
        if let Some(ask) = self.record.state.pending_permission().cloned() {
            self.pending_view = Some(self.permission_view(&ask).await);
        }
        let idle_after = std::time::Duration::from_millis(self.shared.config.limits.idle_unload_ms);
        loop {
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
        }
    }

    /// At rest, with no client attached and nothing in flight: nothing
    /// would be lost by unloading the conversation.
    fn is_idle(&self) -> bool {
        self.record.state.is_at_rest()
            && self.clients.is_empty()
            && self.llm.is_none()
            && self.tools.is_empty()
            && self.retry.is_none()
            && self.staging.is_none()
    }

    /// Removes this actor from the registry if no input is waiting; the
    /// next input loads the conversation again from the store. Every input
    /// from outside is sent under the registry's lock, so none can arrive
    /// once the entry is gone. Returns whether the actor should end.
    async fn unload(&mut self) -> bool {
        let mut actors = self.registry.lock().await;
        if !self.rx.is_empty() {
            return false;
        }
        if actors
            .get(&self.record.id)
            .is_some_and(|tx| tx.same_channel(&self.tx))
        {
            actors.remove(&self.record.id);
        }
        tracing::debug!(conversation = %self.record.id, "unloaded (idle)");
        true
    }

    async fn handle(&mut self, input: Input) {
        match input {
            Input::Command(cmd) => self.command(cmd).await,
            Input::LlmStream { call, event } => {
                if self.llm.as_ref().is_some_and(|f| f.call == call) {
                    self.partial.push(&event);
                    let kind = match event {
                        StreamEvent::TextDelta { index, text } => {
                            EventKind::TextDelta { index, text }
                        }
                        StreamEvent::ThinkingDelta { index, text } => {
                            EventKind::ThinkingDelta { index, text }
                        }
                        _ => return,
                    };
                    self.emit(kind);
                }
            }
            Input::LlmDone { call, result } => {
                if self.llm.as_ref().is_none_or(|f| f.call != call) {
                    return;
                }
                self.llm = None;
                self.partial = PartialReply::new();
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
            Input::ToolDone {
                call,
                tool_use_id,
                output,
                duration_ms,
            } => {
                if self
                    .tools
                    .get(&tool_use_id)
                    .is_none_or(|(f, _)| f.call != call)
                {
                    return;
                }
                self.tools.remove(&tool_use_id);
                let name = self.tool_name(&tool_use_id);
                self.emit(EventKind::ToolCallEnd {
                    tool_use_id: tool_use_id.clone(),
                    name,
                    is_error: output.is_error,
                    summary: output.summary.clone(),
                    diff: output.diff.clone(),
                    duration_ms,
                });
                self.apply_internal(Event::ToolCompleted {
                    result: ToolResult::new(tool_use_id, output.content, output.is_error),
                })
                .await;
            }
            Input::RetryDue { call } => {
                if self.retry.as_ref().is_some_and(|(c, _)| *c == call) {
                    self.retry = None;
                    self.apply_internal(Event::RetryDue).await;
                }
            }
            Input::Recover => {
                self.recovering = true;
                self.apply_internal(Event::DaemonRestarted).await;
                self.recovering = false;
            }
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
        match cmd {
            Command::Send { text, reply } => {
                self.recovery_notices.clear();
                let result = self.apply(Event::UserMessage { text }).await;
                let _ = reply.send(result.map(|_| self.last_user_message_seq()));
            }
            Command::Cancel { reply } => {
                let busy = !self.record.state.is_at_rest();
                let result = self.apply(Event::UserCancel).await;
                let _ = reply.send(result.map(|_| busy));
            }
            Command::Answer {
                request_id,
                decision,
                feedback,
                client,
                project_scope,
                reply,
            } => {
                self.answering = client;
                self.answering_project = project_scope;
                if decision == Decision::Background {
                    self.to_background = self
                        .record
                        .state
                        .pending_permission()
                        .map(|ask| ask.tool_use_id.clone());
                }
                let result = self
                    .apply(Event::PermissionAnswered {
                        request_id,
                        decision,
                        feedback,
                    })
                    .await;
                self.answering = None;
                let _ = reply.send(result);
            }
            Command::Subscribe {
                after_seq,
                name,
                client_id,
                reply,
            } => {
                let client = ClientInfo {
                    id: client_id,
                    name,
                };
                let live = self
                    .hub
                    .get_or_insert_with(|| broadcast::channel(HUB_CAPACITY).0)
                    .subscribe();
                let mut initial = self.initial_frames(after_seq, &client);
                if matches!(
                    initial.first().map(|e| &e.kind),
                    Some(EventKind::Snapshot(_))
                ) {
                    // Only to this client (sequence number 0): it missed them.
                    initial.extend(self.recovery_notices.iter().map(|n| {
                        Arc::new(ConvEvent {
                            seq: 0,
                            at_ms: now_ms(),
                            kind: EventKind::Notice(n.clone()),
                        })
                    }));
                }
                self.clients.push(client.clone());
                let _ = reply.send(Subscription {
                    client: client.clone(),
                    initial,
                    live,
                });
                self.emit(EventKind::ClientAttached(client));
            }
            Command::Detach { client_id } => {
                if let Some(pos) = self.clients.iter().position(|c| c.id == client_id) {
                    let client = self.clients.remove(pos);
                    self.emit(EventKind::ClientDetached(client));
                }
            }
            Command::Resync { client_id, reply } => {
                let client = self
                    .clients
                    .iter()
                    .find(|c| c.id == client_id)
                    .cloned()
                    .unwrap_or(ClientInfo {
                        id: client_id,
                        name: String::new(),
                    });
                let _ = reply.send(self.snapshot(&client));
            }
        }
    }

    /// A snapshot, or — when the client reconnects and every event it
    /// missed is still in the replay buffer — a `Resumed` marker and those events.
    fn initial_frames(&self, after_seq: u64, client: &ClientInfo) -> Vec<Arc<ConvEvent>> {
        let last = self.next_seq - 1;
        if after_seq > 0 && after_seq <= last {
            let oldest = self.replay.front().map(|e| e.seq);
            let complete = match oldest {
                Some(o) => o <= after_seq + 1,
                None => after_seq == last,
            };
            let resumed = Arc::new(ConvEvent {
                seq: 0,
                at_ms: now_ms(),
                kind: EventKind::Resumed { after_seq },
            });
            if complete {
                let mut frames = vec![resumed];
                frames.extend(self.replay.iter().filter(|e| e.seq > after_seq).cloned());
                return frames;
            }
            // Beyond the buffer (after a restart, say): the durable events
            // from the store, with whatever the buffer still holds.
            if let Some(mut events) = self.stored_events_after(after_seq) {
                let known: std::collections::HashSet<u64> = events.iter().map(|e| e.seq).collect();
                events.extend(
                    self.replay
                        .iter()
                        .filter(|e| e.seq > after_seq && !known.contains(&e.seq))
                        .cloned(),
                );
                events.sort_by_key(|e| e.seq);
                let mut frames = vec![resumed];
                frames.extend(events);
                return frames;
            }
        }
        vec![self.snapshot(client)]
    }

    fn snapshot(&self, client: &ClientInfo) -> Arc<ConvEvent> {
        let messages = self
            .transcript
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u64 + 1, m.clone()))
            .collect();
        let mut clients = self.clients.clone();
        if !clients.iter().any(|c| c.id == client.id) {
            clients.push(client.clone());
        }
        Arc::new(ConvEvent {
            seq: self.next_seq - 1,
            at_ms: now_ms(),
            kind: EventKind::Snapshot(Box::new(SnapshotData {
                record: self.record.clone(),
                messages,
                partial: self.partial.clone(),
                pending: self.pending_view.clone(),
                clients,
                your_client_id: client.id.clone(),
                max_attempts: self.shared.config.retry.max_attempts,
            })),
        })
    }

    fn last_user_message_seq(&self) -> u64 {
        self.transcript
            .iter()
            .rposition(|m| m.role == Role::User)
            .map(|i| i as u64 + 1)
            .unwrap_or(0)
    }

    fn tool_name(&self, tool_use_id: &str) -> String {
        match &self.record.state {
            ConvState::ToolExecuting(run) => run
                .calls
                .iter()
                .find(|c| c.id == tool_use_id)
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            _ => String::new(),
        }
    }

    /// Sends an event to every attached client (never blocks).
    fn emit(&mut self, kind: EventKind) {
        let event = Arc::new(ConvEvent {
            seq: self.next_seq,
            at_ms: now_ms(),
            kind,
        });
        self.next_seq += 1;
        if self.next_seq + SEQ_RESERVE / 2 > self.record.seq_reserved {
            // Half the reservation is used: extend it long before it runs
            // out, so the flush is done before any number beyond the old
            // reservation is handed out.
            self.record.seq_reserved = self.next_seq + SEQ_RESERVE;
            match self.shared.store.commit(&self.record, &[]) {
                Ok(()) => {
                    let store = self.shared.store.clone();
                    tokio::spawn(async move {
                        if let Err(e) = store.flush().await {
                            tracing::error!("flushing sequence reservation failed: {e}");
                        }
                    });
                }
                Err(e) => tracing::error!("persisting sequence reservation failed: {e}"),
            }
        }
        match &mut self.staging {
            Some(staged) => staged.push(event),
            None => self.publish(event),
        }
    }

    /// Sends an event to the replay buffer and the attached clients.
    fn publish(&mut self, event: Arc<ConvEvent>) {
        if self.replay.len() == REPLAY_CAPACITY {
            self.replay.pop_front();
        }
        self.replay.push_back(event.clone());
        if let Some(hub) = &self.hub {
            // No receivers left is fine: the clients went away.
            let _ = hub.send(event);
        }
    }

    /// Stores the durable event the next `emit` announces, before it does.
    async fn persist_event(&self, event: StoredEvent) {
        let stored = match self
            .shared
            .store
            .put_event(&self.record.id, self.next_seq, &event)
        {
            Ok(()) => self.shared.store.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = stored {
            tracing::error!(conversation = %self.record.id, "cannot persist an event: {e}");
        }
    }

    /// The events of the store after `after_seq`, as clients see them, when
    /// the store's log reaches back that far and is not too long.
    fn stored_events_after(&self, after_seq: u64) -> Option<Vec<Arc<ConvEvent>>> {
        let store = &self.shared.store;
        if !store.events_cover(&self.record.id, after_seq).ok()? {
            return None;
        }
        let stored = store
            .events_after(&self.record.id, after_seq, MAX_STORED_REPLAY)
            .ok()??;
        let mut out = Vec::with_capacity(stored.len());
        for (seq, event) in stored {
            let (at_ms, kind) = match event {
                StoredEvent::StateChanged { at_ms, state } => (
                    at_ms,
                    EventKind::StateChanged {
                        state,
                        max_attempts: self.shared.config.retry.max_attempts,
                    },
                ),
                StoredEvent::MessageAppended { at_ms, message_seq } => {
                    let message = self
                        .transcript
                        .get(usize::try_from(message_seq).ok()?.checked_sub(1)?)?;
                    (
                        at_ms,
                        EventKind::MessageAppended {
                            message_seq,
                            message: message.clone(),
                        },
                    )
                }
                StoredEvent::PermissionRequested {
                    at_ms,
                    ask,
                    summary,
                    diff,
                } => (
                    at_ms,
                    EventKind::PermissionRequested(PermissionView { ask, summary, diff }),
                ),
                StoredEvent::PermissionResolved {
                    at_ms,
                    request_id,
                    decision,
                    client,
                } => (
                    at_ms,
                    EventKind::PermissionResolved {
                        request_id,
                        decision,
                        client: client.map(|(id, name)| ClientInfo { id, name }),
                    },
                ),
            };
            out.push(Arc::new(ConvEvent { seq, at_ms, kind }));
        }
        Some(out)
    }

    async fn reserve_seqs(&mut self) -> Result<(), crate::store::StoreError> {
        self.record.seq_reserved = self.next_seq + SEQ_RESERVE;
        self.shared.store.commit(&self.record, &[])?;
        self.shared.store.flush().await
    }

    fn context(&self, event: Option<&Event>) -> ConvContext {
        let cfg = &self.shared.config;
        let cwd = self.record.cwd.display().to_string();
        let mut policy = Policy {
            rules: self.rules.clone(),
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
        // done here, for the calls this event may schedule.
        let mut calls: Vec<ToolCall> = match &self.record.state {
            ConvState::ToolExecuting(run) => run.calls.clone(),
            _ => Vec::new(),
        };
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
        ConvContext {
            now_ms: now_ms(),
            max_attempts: cfg.retry.max_attempts,
            max_iterations: cfg.limits.max_iterations,
            retry_base_ms: cfg.retry.base_delay_ms,
            retry_max_ms: cfg.retry.max_delay_ms,
            max_retry_after_ms: cfg.retry.max_retry_after_ms,
            context_window: cfg.limits.context_window,
            exhaustion: agentd_core::ContextExhaustionBehavior::ThresholdBasedContinuation,
            policy,
            doom_loop_threshold: 3,
            recent_calls: self.recent_calls(),
        }
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

    /// Applies a client's event; the rejection goes back to that client.
    async fn apply(&mut self, event: Event) -> Result<(), RuntimeError> {
        let ctx = self.context(Some(&event));
        let t = transition(&self.record.state, &ctx, event).map_err(RuntimeError::Rejected)?;
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

    /// Persists a transition, tells clients, runs its effects; effects that
    /// complete at once (an abort) feed further events through a queue.
    ///
    /// Nothing is announced and no effect runs before the store is flushed,
    /// with one exception that saves a flush per round: calls of instant
    /// tools (`think`), which touch nothing outside the daemon, run inline
    /// right after their transition is written, and that transition, the
    /// calls' ends and the next transition are flushed together before any
    /// of it is announced. A crash before that flush loses all of it at
    /// once, and the recovery repeats the model request.
    async fn commit_and_run(&mut self, first: agentd_core::Transition) -> Result<(), RuntimeError> {
        let mut queue: VecDeque<Step> = VecDeque::from([Step::Apply(Box::new(first))]);
        // Where to roll back to if the store fails before the next flush.
        let mut unflushed: Option<(ConvState, usize)> = None;
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
            let instant = self.instant_effects(&t.effects);
            let old_state = std::mem::replace(&mut self.record.state, t.state);
            let base = self.transcript.len();
            let rollback = unflushed
                .get_or_insert_with(|| (old_state.clone(), base))
                .clone();
            let appended: Vec<Message> = t
                .effects
                .iter()
                .filter_map(|e| match e {
                    Effect::AppendMessage { message } => Some(message.clone()),
                    _ => None,
                })
                .collect();
            let state_changed = self.record.state != old_state;
            // Within a group of instant work only the last record matters:
            // the one the flush at the end of the group writes.
            let mut persisted =
                self.persist(base as u64, &appended, state_changed, instant.is_none());
            if persisted.is_ok() && instant.is_none() {
                persisted = self.shared.store.flush().await;
            }
            if let Err(e) = persisted {
                // Nothing may run on state we could not persist: roll back.
                tracing::error!(conversation = %self.record.id, "persisting failed: {e}");
                let (state, len) = rollback;
                self.record.state = state;
                Arc::make_mut(&mut self.transcript).truncate(len);
                self.request_cache = crate::llm::RequestCache::default();
                self.record.message_count = len as u64;
                self.staging = None;
                return Err(RuntimeError::Store(e));
            }
            if instant.is_some() {
                self.staging.get_or_insert_with(Vec::new);
            } else {
                unflushed = None;
                self.publish_staged();
            }
            for (i, m) in appended.into_iter().enumerate() {
                let usage = m.usage;
                Arc::make_mut(&mut self.transcript).push(m.clone());
                self.emit(EventKind::MessageAppended {
                    message_seq: base as u64 + i as u64 + 1,
                    message: m,
                });
                if let Some(last) = usage {
                    self.emit(EventKind::UsageUpdated {
                        last,
                        total: self.record.usage,
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
            match instant {
                Some(calls) => {
                    for (call, output) in calls {
                        queue.push_back(Step::Decide(self.finish_instant(call, output)));
                    }
                }
                None => {
                    for effect in t.effects {
                        if let Some(next) = self.run_effect(effect).await {
                            queue.push_back(Step::Apply(Box::new(next)));
                        }
                    }
                }
            }
        }
        if let Some((state, len)) = unflushed {
            // The queue ended on instant work: write its record, flush it,
            // then announce it.
            let persisted = match self.shared.store.commit(&self.record, &[]) {
                Ok(()) => self.shared.store.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = persisted {
                tracing::error!(conversation = %self.record.id, "persisting failed: {e}");
                self.record.state = state;
                Arc::make_mut(&mut self.transcript).truncate(len);
                self.request_cache = crate::llm::RequestCache::default();
                self.record.message_count = len as u64;
                self.staging = None;
                return Err(RuntimeError::Store(e));
            }
            self.publish_staged();
        }
        Ok(())
    }

    /// Writes the appended messages and the durable events this commit
    /// will be announced with (under the sequence numbers `emit` will give
    /// them, in the same order), then the record unless `write_record` is
    /// false (a later commit of the same flush writes it). Not flushed.
    fn persist(
        &mut self,
        base: u64,
        appended: &[Message],
        state_changed: bool,
        write_record: bool,
    ) -> Result<(), crate::store::StoreError> {
        self.update_record(appended);
        let numbered: Vec<(u64, &Message)> = appended
            .iter()
            .enumerate()
            .map(|(i, m)| (base + i as u64 + 1, m))
            .collect();
        let now = now_ms();
        let mut seq = self.next_seq;
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

    /// The results of a transition's tool calls when every effect besides
    /// appending messages is a call of an instant tool (see
    /// `commit_and_run`); `None` when anything else must happen.
    fn instant_effects(&self, effects: &[Effect]) -> Option<Vec<(ToolCall, ToolOutput)>> {
        let mut calls = Vec::new();
        for effect in effects {
            match effect {
                Effect::AppendMessage { .. } => {}
                Effect::ExecuteTool { call } => {
                    if self.to_background.as_deref() == Some(call.id.as_str()) {
                        return None;
                    }
                    let output = self.shared.tools.run_instant(&call.name, &call.input)?;
                    calls.push((call.clone(), output));
                }
                _ => return None,
            }
        }
        (!calls.is_empty()).then_some(calls)
    }

    /// Announces an instant call as a tool run (begin and end) and returns
    /// the event its result makes.
    fn finish_instant(&mut self, call: ToolCall, output: ToolOutput) -> Event {
        self.emit(EventKind::ToolCallBegin {
            tool_use_id: call.id.clone(),
            name: call.name.clone(),
            summary: crate::tools::summarize_call(&call.name, &call.input),
            input_json: call.input.to_string(),
        });
        self.emit(EventKind::ToolCallEnd {
            tool_use_id: call.id.clone(),
            name: call.name,
            is_error: output.is_error,
            summary: output.summary,
            diff: output.diff,
            duration_ms: 0,
        });
        Event::ToolCompleted {
            result: ToolResult::new(call.id, output.content, output.is_error),
        }
    }

    /// Announces what was held back until the flush.
    fn publish_staged(&mut self) {
        for event in self.staging.take().unwrap_or_default() {
            self.publish(event);
        }
    }

    fn update_record(&mut self, appended: &[Message]) {
        let now = now_ms();
        self.record.updated_at_ms = now;
        self.record.message_count = self.transcript.len() as u64 + appended.len() as u64;
        for m in appended {
            if let Some(u) = &m.usage {
                self.record.usage.add(u);
            }
            if self.record.title.is_empty() && m.role == Role::User {
                self.record.title = title_of(&m.text());
            }
        }
    }

    /// Carries out one effect. Returns a follow-up transition when the
    /// effect completes at once (an aborted stream reports its partial reply).
    async fn run_effect(&mut self, effect: Effect) -> Option<agentd_core::Transition> {
        match effect {
            Effect::AppendMessage { .. } => None,
            Effect::RequestLlm { attempt, purpose } => {
                self.start_llm(attempt, purpose);
                None
            }
            Effect::AbortLlm => {
                let partial = std::mem::take(&mut self.partial).into_blocks();
                if let Some(f) = self.llm.take() {
                    f.cancel.cancel();
                }
                let ctx = self.context(None);
                match transition(&self.record.state, &ctx, Event::LlmAborted { partial }) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        tracing::debug!("abort not applicable: {e}");
                        None
                    }
                }
            }
            Effect::ScheduleRetry {
                attempt: _,
                delay_ms,
            } => {
                let call = self.next_call;
                self.next_call += 1;
                let tx = self.tx.clone();
                let handle = tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                    let _ = tx.send(Input::RetryDue { call });
                });
                if let Some((_, old)) = self.retry.replace((call, handle)) {
                    old.abort();
                }
                None
            }
            Effect::CancelRetry => {
                if let Some((_, h)) = self.retry.take() {
                    h.abort();
                }
                None
            }
            Effect::ExecuteTool { call } => {
                self.start_tool(call);
                None
            }
            Effect::AbortTools { tool_use_ids } => {
                for id in tool_use_ids {
                    if let Some((f, started)) = self.tools.remove(&id) {
                        f.cancel.cancel();
                        self.emit(EventKind::ToolCallEnd {
                            tool_use_id: id.clone(),
                            name: String::new(),
                            is_error: true,
                            summary: "interrupted".to_string(),
                            diff: None,
                            duration_ms: started.elapsed().as_millis() as u64,
                        });
                    }
                }
                None
            }
            Effect::AskPermission { ask } => {
                let view = self.permission_view(&ask).await;
                self.persist_event(StoredEvent::PermissionRequested {
                    at_ms: now_ms(),
                    ask: view.ask.clone(),
                    summary: view.summary.clone(),
                    diff: view.diff.clone(),
                })
                .await;
                self.pending_view = Some(view.clone());
                self.emit(EventKind::PermissionRequested(view));
                None
            }
            Effect::PermissionResolved {
                request_id,
                decision,
            } => {
                self.pending_view = None;
                let client = self.answering.clone();
                self.persist_event(StoredEvent::PermissionResolved {
                    at_ms: now_ms(),
                    request_id: request_id.clone(),
                    decision,
                    client: client.as_ref().map(|c| (c.id.clone(), c.name.clone())),
                })
                .await;
                self.emit(EventKind::PermissionResolved {
                    request_id,
                    decision,
                    client,
                });
                None
            }
            Effect::AddRule { rule } => {
                let scope = if self.answering_project {
                    RuleScope::Project(self.record.cwd.clone())
                } else {
                    RuleScope::Conversation(self.record.id.clone())
                };
                let persisted = match self.shared.store.add_rule(&scope, &rule) {
                    Ok(()) => self.shared.store.flush().await,
                    Err(e) => Err(e),
                };
                let where_ = match scope {
                    RuleScope::Project(_) => "every conversation in this directory",
                    RuleScope::Conversation(_) => "this conversation",
                };
                match persisted {
                    Ok(()) => self.emit(EventKind::Notice(format!(
                        "rule added for {where_}: {}",
                        rule.spec()
                    ))),
                    Err(e) => {
                        tracing::error!(conversation = %self.record.id, "cannot persist rule: {e}");
                        self.emit(EventKind::Notice(format!(
                            "the rule {} could not be saved: {e}",
                            rule.spec()
                        )));
                    }
                }
                self.rules.push(rule);
                None
            }
            Effect::SetMode { mode } => {
                self.record.mode = mode;
                let persisted = match self.shared.store.commit(&self.record, &[]) {
                    Ok(()) => self.shared.store.flush().await,
                    Err(e) => Err(e),
                };
                if let Err(e) = persisted {
                    tracing::error!(conversation = %self.record.id, "cannot persist the mode: {e}");
                }
                self.emit(EventKind::Notice(format!("permission mode is now {mode}")));
                None
            }
            Effect::Notify { notice } => {
                let kind = match notice {
                    Notice::Retrying {
                        attempt,
                        max_attempts,
                        delay_ms,
                        reason,
                    } => EventKind::Retrying {
                        attempt,
                        max_attempts,
                        delay_ms,
                        reason,
                    },
                    Notice::Error { message, kind } => EventKind::Error { message, kind },
                    Notice::Info { message } => {
                        if self.recovering {
                            self.recovery_notices.push(message.clone());
                        }
                        EventKind::Notice(message)
                    }
                };
                self.emit(kind);
                None
            }
            Effect::SpawnSubAgent { agent_id, .. } => {
                tracing::warn!(conversation = %self.record.id, "sub-agent {agent_id} requested but sub-agents are not available");
                None
            }
        }
    }

    async fn permission_view(&self, ask: &agentd_core::PermissionAsk) -> PermissionView {
        let ctx = self.tool_context(CancellationToken::new());
        PermissionView {
            summary: crate::tools::summarize_call(&ask.tool_name, &ask.input),
            diff: crate::tools::preview_diff(&ask.tool_name, &ask.input, &ctx).await,
            ask: ask.clone(),
        }
    }

    fn tool_context(&self, cancel: CancellationToken) -> ToolContext {
        let l = &self.shared.config.limits;
        ToolContext {
            cwd: self.record.cwd.clone(),
            additional_dirs: self.record.additional_dirs.clone(),
            cancel,
            limits: crate::tools::ToolLimits {
                max_output_bytes: l.max_output_bytes,
                bash_default_timeout_ms: l.bash_default_timeout_ms,
                bash_max_timeout_ms: l.bash_max_timeout_ms,
                kill_grace_ms: l.kill_grace_ms,
                ..Default::default()
            },
            shells: Some(self.shared.shells.clone()),
            conversation_id: self.record.id.clone(),
        }
    }

    fn start_llm(&mut self, attempt: u32, purpose: LlmPurpose) {
        if let Some(old) = self.llm.take() {
            old.cancel.cancel();
        }
        let call = self.next_call;
        self.next_call += 1;
        let cancel = CancellationToken::new();
        self.llm = Some(InFlight {
            call,
            cancel: cancel.clone(),
        });
        self.partial = PartialReply::new();
        self.emit(EventKind::ReplyBegin { attempt });
        let restricted = matches!(
            self.record.mode,
            agentd_core::Mode::ReadOnly | agentd_core::Mode::Plan
        );
        let (messages, tools) = match &purpose {
            LlmPurpose::Turn => (
                self.transcript.clone(),
                self.shared.tools.offered(restricted),
            ),
            LlmPurpose::Continuation { prompt } => {
                let mut messages = Vec::clone(&self.transcript);
                messages.push(Message::user(
                    vec![ContentBlock::text(prompt.clone())],
                    now_ms(),
                ));
                (Arc::new(messages), Arc::from(Vec::new()))
            }
        };
        let request = LlmRequest {
            model: self.record.model.clone(),
            system: self.system_prompt(),
            messages,
            tools,
            max_tokens: self.shared.config.limits.max_tokens,
            cache: self.request_cache.clone(),
        };
        let provider = self.shared.provider.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let stream_tx = tx.clone();
            let mut on_event = move |event: StreamEvent| {
                let _ = stream_tx.send(Input::LlmStream { call, event });
            };
            let result = provider.stream(&request, &mut on_event, cancel).await;
            // Let go of the transcript before the actor appends the reply.
            drop(request);
            let _ = tx.send(Input::LlmDone { call, result });
        });
    }

    /// The system prompt: the configured one, or ours for this working
    /// directory and day (made again when the date changes).
    fn system_prompt(&mut self) -> Arc<str> {
        let now = now_ms();
        let day = now.div_euclid(86_400_000);
        match &self.system_prompt {
            Some((d, p)) if *d == day => p.clone(),
            _ => {
                let p: Arc<str> = match &self.shared.config.system_prompt {
                    Some(s) => Arc::from(s.as_str()),
                    None => Arc::from(prompt::system_prompt(&self.record.cwd, now)),
                };
                self.system_prompt = Some((day, p.clone()));
                p
            }
        }
    }

    fn start_tool(&mut self, call: ToolCall) {
        let id = self.next_call;
        self.next_call += 1;
        let cancel = CancellationToken::new();
        self.tools.insert(
            call.id.clone(),
            (
                InFlight {
                    call: id,
                    cancel: cancel.clone(),
                },
                Instant::now(),
            ),
        );
        self.emit(EventKind::ToolCallBegin {
            tool_use_id: call.id.clone(),
            name: call.name.clone(),
            summary: crate::tools::summarize_call(&call.name, &call.input),
            input_json: call.input.to_string(),
        });
        let ctx = self.tool_context(cancel);
        let registry = self.shared.tools.clone();
        let tx = self.tx.clone();
        let background = self.to_background.take().is_some_and(|id| id == call.id);
        tokio::spawn(async move {
            let started = Instant::now();
            let output = if background {
                crate::tools::move_to_background(&call.input, &ctx).await
            } else {
                registry.run(&call.name, call.input, &ctx).await
            };
            let _ = tx.send(Input::ToolDone {
                call: id,
                tool_use_id: call.id,
                output,
                duration_ms: started.elapsed().as_millis() as u64,
            });
        });
    }

    /// Stops in-flight work without changing the persisted state: a
    /// restarted daemon recovers the conversation from it.
    /// A clean stop: clients are told why, running tools are terminated
    /// and recorded as interrupted (the core decides how), and in-flight
    /// model requests are dropped; the persisted state lets the next start
    /// carry on.
    async fn shutdown(&mut self) {
        self.emit(EventKind::Notice(
            "agentd is shutting down; running tools are interrupted".to_string(),
        ));
        if let Some(f) = self.llm.take() {
            f.cancel.cancel();
        }
        if let Some((_, h)) = self.retry.take() {
            h.abort();
        }
        self.apply_internal(Event::DaemonStopping).await;
        for (_, (f, _)) in self.tools.drain() {
            f.cancel.cancel();
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
