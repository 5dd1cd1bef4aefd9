//! Carrying out the core's effects. Long ones (a model request, a tool, a
//! retry timer) are spawned and report back through the actor's mailbox
//! tagged with a call number; the rest happen here at once.

use super::{Actor, Input};
use crate::hooks::{self, NotificationKind, Stage};
use crate::llm::{LlmRequest, PartialReply, StreamEvent};
use crate::runtime::events::{EventKind, PermissionView};
use crate::runtime::{instructions, prompt};
use crate::store::StoredEvent;
use crate::tools::ToolContext;
use agentd_core::tools::Called;
use agentd_core::{
    ContentBlock, Effect, Event, LlmPurpose, Message, Mode, Notice, Role, RuleScope, ToolCall,
    transition,
};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A spawned piece of work: its call number (reports with another number
/// are stale) and how to stop it.
struct InFlight {
    call: u64,
    cancel: CancellationToken,
}

/// What carrying out effects keeps between them: the work in flight (model
/// request, tools, retry timer) and what model requests are built from.
#[derive(Default)]
pub(super) struct Work {
    next_call: u64,
    llm: Option<InFlight>,
    /// What the model request in flight has streamed so far.
    pub(super) partial: PartialReply,
    /// Running tools by tool_use id, with their start.
    tools: HashMap<String, (InFlight, Instant)>,
    retry: Option<(u64, tokio::task::JoinHandle<()>)>,
    /// The pre_tool_use or stop hooks that run.
    hooks: Option<InFlight>,
    /// The hooks checking a user message before it is sent.
    prompt: Option<InFlight>,
    /// Stops notification hooks when the daemon stops.
    notifications: CancellationToken,
    /// The system prompt and the day it was made for.
    system_prompt: Option<(i64, Arc<str>)>,
    /// The project instructions it carries, and the stamp of their files
    /// when they were read.
    instructions: Option<(instructions::Stamp, instructions::Instructions)>,
    /// The encoded transcript prefix providers reuse across requests;
    /// replaced whenever the transcript shrinks (a rollback).
    pub(super) request_cache: crate::llm::RequestCache,
    /// The base64 of the images the transcript refers to, by SHA-256:
    /// encoded once, shared with every request.
    pub(super) images: crate::images::ImageData,
}

impl Work {
    pub(super) fn is_empty(&self) -> bool {
        self.llm.is_none()
            && self.tools.is_empty()
            && self.retry.is_none()
            && self.hooks.is_none()
            && self.prompt.is_none()
    }

    /// Whether `call` is the hooks run in flight; if so it is over.
    pub(super) fn finish_hooks(&mut self, call: u64) -> bool {
        let current = self.hooks.as_ref().is_some_and(|f| f.call == call);
        if current {
            self.hooks = None;
        }
        current
    }

    /// Whether `call` is the message check in flight; if so it is over.
    pub(super) fn finish_prompt(&mut self, call: u64) -> bool {
        let current = self.prompt.as_ref().is_some_and(|f| f.call == call);
        if current {
            self.prompt = None;
        }
        current
    }

    /// Whether hooks check a user message now.
    pub(super) fn prompt_checking(&self) -> bool {
        self.prompt.is_some()
    }

    /// Kills the hooks checking a user message (the message is not sent).
    pub(super) fn cancel_prompt(&mut self) {
        if let Some(f) = self.prompt.take() {
            f.cancel.cancel();
        }
    }

    fn abort_hooks(&mut self) {
        if let Some(f) = self.hooks.take() {
            f.cancel.cancel();
        }
    }

    fn call_number(&mut self) -> u64 {
        self.next_call += 1;
        self.next_call
    }

    pub(super) fn is_current_llm(&self, call: u64) -> bool {
        self.llm.as_ref().is_some_and(|f| f.call == call)
    }

    /// Whether `call` is the model request in flight; if so it is over.
    pub(super) fn finish_llm(&mut self, call: u64) -> bool {
        if !self.is_current_llm(call) {
            return false;
        }
        self.llm = None;
        self.partial = PartialReply::new();
        true
    }

    /// Whether `call` runs the tool `tool_use_id` and it is not over.
    pub(super) fn is_current_tool(&self, call: u64, tool_use_id: &str) -> bool {
        self.tools
            .get(tool_use_id)
            .is_some_and(|(f, _)| f.call == call)
    }

    /// Whether `call` runs the tool `tool_use_id`; if so it is over.
    pub(super) fn finish_tool(&mut self, call: u64, tool_use_id: &str) -> bool {
        let current = self.is_current_tool(call, tool_use_id);
        if current {
            self.tools.remove(tool_use_id);
        }
        current
    }

    /// Whether `call` is the retry timer that is due; if so it is over.
    pub(super) fn finish_retry(&mut self, call: u64) -> bool {
        let current = self.retry.as_ref().is_some_and(|(c, _)| *c == call);
        if current {
            self.retry = None;
        }
        current
    }

    /// Stops everything: the model request, the timer and the tools.
    fn stop_all(&mut self) {
        if let Some(f) = self.llm.take() {
            f.cancel.cancel();
        }
        if let Some((_, h)) = self.retry.take() {
            h.abort();
        }
        for (_, (f, _)) in self.tools.drain() {
            f.cancel.cancel();
        }
        self.abort_hooks();
        self.cancel_prompt();
        self.notifications.cancel();
    }
}

impl Actor {
    /// Carries out one effect. Returns a follow-up transition when the
    /// effect completes at once (an aborted stream reports its partial reply).
    pub(super) async fn run_effect(&mut self, effect: Effect) -> Option<agentd_core::Transition> {
        match effect {
            // Written by the commit.
            Effect::AppendMessage { .. } => None,
            Effect::RequestLlm { attempt, purpose } => {
                self.start_llm(attempt, purpose);
                None
            }
            Effect::AbortLlm => {
                let partial = std::mem::take(&mut self.work.partial).into_blocks();
                if let Some(f) = self.work.llm.take() {
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
                let call = self.work.call_number();
                let tx = self.tx.clone();
                let handle = tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                    let _ = tx.send(Input::RetryDue { call });
                });
                if let Some((_, old)) = self.work.retry.replace((call, handle)) {
                    old.abort();
                }
                None
            }
            Effect::CancelRetry => {
                if let Some((_, h)) = self.work.retry.take() {
                    h.abort();
                }
                None
            }
            Effect::ExecuteTool { call, background } => {
                self.start_tool(call, background);
                None
            }
            Effect::AbortTools { tool_use_ids } => {
                for id in tool_use_ids {
                    if let Some((f, started)) = self.work.tools.remove(&id) {
                        f.cancel.cancel();
                        self.emit(EventKind::ToolCallEnd {
                            tool_use_id: id.clone(),
                            name: String::new(),
                            is_error: true,
                            summary: "interrupted".to_string(),
                            diff: None,
                            duration_ms: started.elapsed().as_millis() as u64,
                            preview: None,
                        });
                    }
                }
                None
            }
            Effect::RunPreToolHooks { call } => self.start_pre_hooks(call),
            Effect::RunStopHooks => {
                self.start_stop_hooks();
                None
            }
            Effect::AbortHooks => {
                self.work.abort_hooks();
                None
            }
            Effect::AskPermission { ask } => {
                let view = self.permission_view(&ask).await;
                self.notify(
                    NotificationKind::PermissionRequest,
                    format!(
                        "agentd: {} needs permission: {}",
                        ask.tool_name, view.summary
                    ),
                );
                self.persist_event(StoredEvent::PermissionRequested {
                    at_ms: self.now_ms(),
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
                by,
            } => {
                self.pending_view = None;
                let asked = self
                    .answering
                    .take()
                    .filter(|ask| ask.request_id == request_id);
                if let Some(client) = &by {
                    let (tool, summary) = asked
                        .map(|ask| {
                            let summary = crate::tools::summarize_call(&ask.tool_name, &ask.input);
                            (ask.tool_name, summary)
                        })
                        .unwrap_or_default();
                    self.audit(
                        client.clone(),
                        crate::store::access::AuditAction::PermissionAnswered {
                            request_id: request_id.clone(),
                            decision,
                            tool,
                            summary,
                        },
                    );
                }
                self.persist_event(StoredEvent::PermissionResolved {
                    at_ms: self.now_ms(),
                    request_id: request_id.clone(),
                    decision,
                    client: by.as_ref().map(|c| (c.id.clone(), c.name.clone())),
                    by: by.clone(),
                })
                .await;
                self.emit(EventKind::PermissionResolved {
                    request_id,
                    decision,
                    client: by,
                });
                None
            }
            Effect::AddRule { rule, scope } => {
                // The commit wrote the rule with the transition.
                let where_ = match scope {
                    RuleScope::Project => "every conversation in this directory",
                    RuleScope::Conversation if self.record.sub_agent.is_some() => {
                        "the parent conversation and all its sub-agents"
                    }
                    RuleScope::Conversation => "this conversation",
                };
                self.emit(EventKind::Notice(format!(
                    "rule added for {where_}: {}",
                    rule.spec()
                )));
                self.rules.push(rule);
                None
            }
            Effect::Notify { notice } => {
                if let Notice::Recovered { message } = &notice {
                    self.recovery_notices.push(message.clone());
                }
                // What a client that comes back must not miss is stored
                // with its number, so a resume replays it.
                if crate::runtime::events::is_durable(&notice) {
                    self.persist_event(StoredEvent::Notified {
                        at_ms: self.now_ms(),
                        notice: notice.clone(),
                    })
                    .await;
                }
                let continuing = self.record.continue_pending;
                self.emit(EventKind::from_notice(notice, continuing));
                None
            }
            // The plan itself was written by the commit; the event is
            // stored so a client that resumes (after a restart too) is
            // told what happened to it.
            Effect::PlanChanged { plan, change } => {
                self.persist_event(StoredEvent::PlanChanged {
                    at_ms: self.now_ms(),
                    change: change.clone(),
                    plan: plan.clone(),
                })
                .await;
                let step = match &change {
                    agentd_core::plan::PlanEvent::Step(step) => Some(step.clone()),
                    _ => None,
                };
                self.emit(EventKind::Plan {
                    change,
                    plan: plan.clone(),
                });
                if let Some(step) = step {
                    self.plan_step_checkpoint(&plan, &step).await;
                }
                None
            }
            Effect::SpawnSubAgent {
                agent_id,
                prompt,
                description,
                model,
                read_only,
            } => {
                self.spawn_sub_agent(agent_id, prompt, description, model, read_only);
                None
            }
            Effect::CancelSubAgents { agent_ids } => {
                self.cancel_sub_agents(agent_ids);
                None
            }
            Effect::FinishSubAgent { .. } => {
                // The commit recorded the end.
                self.report_sub_agent_end();
                None
            }
        }
    }

    /// Adds an entry to the conversation's audit trail, made durable by the
    /// next flush (the caller's commit or event, which follows at once).
    pub(super) fn audit(
        &self,
        client: agentd_core::ClientInfo,
        action: crate::store::access::AuditAction,
    ) {
        let record = crate::store::access::AuditRecord {
            at_ms: self.now_ms(),
            client,
            action,
        };
        if let Err(e) = self.shared.store.put_audit(&self.record.id, &record) {
            tracing::error!(conversation = %self.record.id, "cannot write the audit trail: {e}");
        }
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

    pub(super) async fn permission_view(&self, ask: &agentd_core::PermissionAsk) -> PermissionView {
        let ctx = self.tool_context(CancellationToken::new());
        PermissionView {
            summary: crate::tools::summarize_call(&ask.tool_name, &ask.input),
            diff: crate::tools::preview_diff(&ask.tool_name, &ask.input, &ctx).await,
            ask: ask.clone(),
            sub_agent: crate::runtime::SubAgentRef::of(&self.record),
        }
    }

    fn tool_context(&self, cancel: CancellationToken) -> ToolContext {
        let config = &self.shared.config;
        let l = &config.limits;
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
            live: None,
            model: self.record.model.clone(),
            images: config
                .models
                .lookup(&self.record.model)
                .images
                .then(|| config.images.limits()),
            own_files: self.shared.daemon.own_files.clone(),
        }
    }

    /// The MCP servers this conversation uses: the config's and its own.
    pub(super) fn mcp_servers(&self) -> Vec<crate::mcp::ServerSpec> {
        crate::mcp::servers_of(self.shared.mcp.config_servers(), &self.record.mcp_servers)
    }

    /// Makes sure the base64 of every image `messages` refer to is at
    /// hand (after a restart, or for a conversation loaded again, it is
    /// read from the store once). An image the store lacks is left out:
    /// the provider sends a note in its place, so the model is told.
    fn load_images(&mut self, messages: &[Message]) {
        let missing: Vec<String> = messages
            .iter()
            .flat_map(Message::images)
            .filter(|i| !self.work.images.contains_key(&i.sha256))
            .map(|i| i.sha256.clone())
            .collect();
        for sha in missing {
            match self.shared.store.image(&sha) {
                Ok(Some(bytes)) => {
                    Arc::make_mut(&mut self.work.images)
                        .insert(sha, crate::images::base64(&bytes).into());
                }
                Ok(None) => {
                    tracing::error!(conversation = %self.record.id, "image {sha} is missing from the store");
                }
                Err(e) => {
                    tracing::error!(conversation = %self.record.id, "cannot read image {sha}: {e}");
                }
            }
        }
    }

    fn start_llm(&mut self, attempt: u32, purpose: LlmPurpose) {
        if let Some(old) = self.work.llm.take() {
            old.cancel.cancel();
        }
        let call = self.work.call_number();
        let cancel = CancellationToken::new();
        self.work.llm = Some(InFlight {
            call,
            cancel: cancel.clone(),
        });
        self.work.partial = PartialReply::new();
        if matches!(purpose, LlmPurpose::Turn) && self.at_turn_start() {
            self.refresh_instructions();
        }
        self.emit(EventKind::ReplyBegin { attempt });
        let restricted = matches!(self.record.mode, Mode::ReadOnly | Mode::Plan);
        let (messages, tools) = match &purpose {
            LlmPurpose::Turn if self.record.sub_agent.is_some() => (
                self.transcript.clone(),
                self.shared.tools.offered_to_sub_agent(restricted),
            ),
            LlmPurpose::Turn => (
                self.transcript.clone(),
                self.shared.tools.offered(restricted),
            ),
            LlmPurpose::Continuation { prompt } => {
                let mut messages = Vec::clone(&self.transcript);
                messages.push(Message::user(
                    vec![ContentBlock::text(prompt.clone())],
                    self.now_ms(),
                ));
                (Arc::new(messages), Arc::from(Vec::new()))
            }
        };
        let messages = self.pruned(messages);
        self.load_images(&messages);
        let mut system = self.system_prompt();
        if self.record.mode == Mode::Plan {
            system = Arc::from(format!("{system}\n\n{}", prompt::PLAN_MODE));
        }
        let request = LlmRequest {
            model: self.record.model.clone(),
            system,
            messages,
            tools,
            max_tokens: self.max_tokens(),
            cache: self.work.request_cache.clone(),
            images: self.work.images.clone(),
        };
        let provider = self.shared.provider.clone();
        let tx = self.tx.clone();
        // MCP servers' tools join a turn's requests: the hub starts the
        // servers the first time and lists tools again that changed.
        let mcp = match purpose {
            LlmPurpose::Turn => {
                let servers = self.mcp_servers();
                (!servers.is_empty()).then(|| (self.shared.mcp.clone(), servers))
            }
            LlmPurpose::Continuation { .. } => None,
        };
        let cwd = self.record.cwd.clone();
        tokio::spawn(async move {
            let mut request = request;
            if let Some((hub, servers)) = mcp {
                let extra = tokio::select! {
                    extra = hub.offer(&servers, &cwd, restricted) => extra,
                    // The stream below sees the cancel too.
                    _ = cancel.cancelled() => Vec::new(),
                };
                if !extra.is_empty() {
                    request.tools = request.tools.iter().cloned().chain(extra).collect();
                }
            }
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

    /// `messages` as the next request sends them: past the warning share
    /// of the window, old large tool outputs are pruned to a note (see
    /// `agentd_core::prune`; `[context] prune_tool_outputs`). Where the cut
    /// is goes in the record; the transcript is never changed. Decided from
    /// the transcript and the last reply's usage alone, so a restart
    /// decides the same.
    fn pruned(&mut self, messages: Arc<Vec<Message>>) -> Arc<Vec<Message>> {
        use agentd_core::prune;
        let config = &self.shared.config;
        let window = config.models.lookup(&self.record.model).context_window;
        let policy = prune::PrunePolicy::for_window(window);
        if config.context.prune_tool_outputs
            && agentd_core::state::should_warn(&self.record.last_usage, window)
            && let Some(plan) = prune::plan(&messages, self.record.pruned_through, &policy)
        {
            self.record.pruned_through = plan.through;
            // The requests' shared start changes once here.
            self.work.request_cache = crate::llm::RequestCache::default();
            tracing::info!(
                conversation = %self.record.id,
                "pruned {} old tool outputs from requests (about {} tokens)",
                plan.results,
                plan.tokens
            );
            self.emit(EventKind::Notice(format!(
                "the context is {}% full: {} old tool outputs (about {} tokens) are sent as a note \
                 from now on; the transcript keeps them",
                self.record.last_usage.context_tokens().saturating_mul(100) / window.max(1),
                plan.results,
                plan.tokens
            )));
        }
        if self.record.pruned_through == 0 {
            return messages;
        }
        Arc::new(prune::apply(
            &messages,
            self.record.pruned_through.min(messages.len()),
            &policy,
        ))
    }

    /// The system prompt: the configured one, or ours for this working
    /// directory and day (made again when the date changes), followed by
    /// the project instructions.
    fn system_prompt(&mut self) -> Arc<str> {
        let now = self.now_ms();
        let day = now.div_euclid(86_400_000);
        match &self.work.system_prompt {
            Some((d, p)) if *d == day => p.clone(),
            _ => {
                let mut p = match &self.shared.config.system_prompt {
                    Some(s) => s.clone(),
                    None => prompt::system_prompt(&self.record.cwd, now),
                };
                if let Some((_, found)) = &self.work.instructions
                    && !found.text.is_empty()
                {
                    p.push_str("\n\n");
                    p.push_str(&found.text);
                }
                let p: Arc<str> = Arc::from(p);
                self.work.system_prompt = Some((day, p.clone()));
                p
            }
        }
    }

    /// `max_tokens` of a request: the config's, within what the model can
    /// write.
    fn max_tokens(&self) -> u32 {
        let config = &self.shared.config;
        let info = config.models.lookup(&self.record.model);
        config.limits.max_tokens.min(info.max_output_tokens)
    }

    /// Whether the request about to go out is a turn's first: the
    /// transcript ends with what a person wrote, not with tool results.
    fn at_turn_start(&self) -> bool {
        self.transcript.last().is_some_and(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }))
        })
    }

    /// Reads the project instructions again if their files changed since
    /// they were last read (a few `stat`s when they did not), and tells the
    /// clients when what the model will read changed.
    fn refresh_instructions(&mut self) {
        let config = &self.shared.config;
        let dirs = instructions::directories(config.user_dir.as_deref(), &self.record.cwd);
        let stamp = instructions::stamp(&dirs);
        if self
            .work
            .instructions
            .as_ref()
            .is_some_and(|(known, _)| *known == stamp)
        {
            return;
        }
        let found = instructions::read(&stamp, config.instructions.max_bytes);
        let changed = match &self.work.instructions {
            Some((_, before)) => *before != found,
            None => !found.sources.is_empty(),
        };
        let event = EventKind::InstructionsLoaded {
            files: found.files(),
            truncated: found.truncated,
        };
        self.work.instructions = Some((stamp, found));
        if changed {
            self.work.system_prompt = None;
            self.emit(event);
        }
    }

    /// Announces a tool call, as every start of one is.
    pub(super) fn announce_call(&mut self, call: &ToolCall) {
        self.emit(EventKind::ToolCallBegin {
            tool_use_id: call.id.clone(),
            name: call.name.clone(),
            summary: crate::tools::summarize_call(&call.name, &call.input),
            input_json: call.input.to_string(),
        });
    }

    /// Where this conversation's hooks run, stopped by `cancel`.
    fn hook_env(&self, cancel: CancellationToken) -> hooks::Env {
        hooks::Env {
            cwd: self.record.cwd.clone(),
            conversation_id: self.record.id.clone(),
            grace: std::time::Duration::from_millis(self.shared.config.limits.kill_grace_ms),
            cancel,
        }
    }

    /// Starts the pre_tool_use hooks of `call`. Should none match any more
    /// (the hooks were read again meanwhile), the answer is "no decision",
    /// at once.
    fn start_pre_hooks(&mut self, call: ToolCall) -> Option<agentd_core::Transition> {
        let policy = self.context(None).policy;
        let matching = self.hooks.for_call(Stage::PreToolUse, &policy, &call);
        if matching.is_empty() {
            let event = Event::PreToolHooksDecided {
                tool_use_id: call.id,
                verdict: agentd_core::HookVerdict::None,
                new_input: None,
            };
            return transition(&self.record.state, &self.context(Some(&event)), event).ok();
        }
        let id = self.work.call_number();
        let cancel = CancellationToken::new();
        self.work.abort_hooks();
        self.work.hooks = Some(InFlight {
            call: id,
            cancel: cancel.clone(),
        });
        let env = self.hook_env(cancel);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let (outcome, reports) = hooks::pre_tool_use(&matching, &env, &call).await;
            let _ = tx.send(Input::PreHooksDone {
                call: id,
                tool_use_id: call.id,
                outcome,
                reports,
            });
        });
        None
    }

    fn start_stop_hooks(&mut self) {
        let matching = self.hooks.all_of(Stage::Stop);
        let id = self.work.call_number();
        let cancel = CancellationToken::new();
        self.work.abort_hooks();
        self.work.hooks = Some(InFlight {
            call: id,
            cancel: cancel.clone(),
        });
        let env = self.hook_env(cancel);
        let last_reply = self
            .transcript
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .map(|m| m.text())
            .unwrap_or_default();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let (continue_with, reports) = hooks::stop(&matching, &env, &last_reply).await;
            let _ = tx.send(Input::StopHooksDone {
                call: id,
                continue_with,
                reports,
            });
        });
    }

    /// Runs the hooks a user message goes through before it is sent
    /// (session_start for the first, then user_prompt_submit); the answer
    /// comes back as `PromptChecked`, which sends it or refuses it.
    pub(super) fn check_prompt(
        &mut self,
        session_start: Vec<hooks::Hook>,
        submit: Vec<hooks::Hook>,
        message: crate::runtime::NewMessage,
        reply: tokio::sync::oneshot::Sender<
            Result<crate::runtime::Sent, crate::runtime::error::RuntimeError>,
        >,
    ) {
        let id = self.work.call_number();
        let cancel = CancellationToken::new();
        self.work.prompt = Some(InFlight {
            call: id,
            cancel: cancel.clone(),
        });
        let env = self.hook_env(cancel);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let (outcome, reports) =
                hooks::before_prompt(&session_start, &submit, &env, &message.text).await;
            let _ = tx.send(Input::PromptChecked {
                call: id,
                message,
                outcome,
                reports,
                reply,
            });
        });
    }

    /// Fires the notification hooks of `kind` (nothing waits for them;
    /// they are reported when they end).
    pub(super) fn notify(&mut self, kind: NotificationKind, message: String) {
        let matching = self.hooks.for_notification(kind);
        if matching.is_empty() {
            return;
        }
        let env = self.hook_env(self.work.notifications.clone());
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let reports = hooks::notify(&matching, &env, kind, &message).await;
            let _ = tx.send(Input::HooksRan(reports));
        });
    }

    fn start_tool(&mut self, call: ToolCall, background: bool) {
        let id = self.work.call_number();
        let cancel = CancellationToken::new();
        self.work.tools.insert(
            call.id.clone(),
            (
                InFlight {
                    call: id,
                    cancel: cancel.clone(),
                },
                Instant::now(),
            ),
        );
        self.announce_call(&call);
        // Without post_tool_use hooks nothing is matched (the policy's
        // paths are not resolved again).
        let post = if self.hooks.of(Stage::PostToolUse).next().is_some() {
            self.hooks
                .for_call(Stage::PostToolUse, &self.context(None).policy, &call)
        } else {
            Vec::new()
        };
        let env = self.hook_env(cancel.clone());
        let mut ctx = self.tool_context(cancel);
        // The daemon's keys never leave in a result (tools/redact.rs).
        let redactor = Arc::new(crate::tools::Redactor::of_daemon(
            self.shared.daemon.credentials.as_deref(),
        ));
        if !background {
            // The sink only posts to the mailbox, which never blocks; the
            // actor drops what arrives for a call that is over.
            let mailbox = self.tx.clone();
            let tool_use_id = call.id.clone();
            let redactor = redactor.clone();
            ctx.live = Some(crate::tools::LiveOutput::new(move |mut chunk| {
                redactor.chunk(&mut chunk);
                let _ = mailbox.send(Input::ToolOutput {
                    call: id,
                    tool_use_id: tool_use_id.clone(),
                    chunk,
                });
            }));
        }
        let registry = self.shared.tools.clone();
        let mcp = self.shared.mcp.clone();
        let servers = self.mcp_servers();
        let tx = self.tx.clone();
        let checkpoints = self.shared.checkpoints.clone();
        let key = crate::checkpoints::CallKey {
            conversation_id: self.record.id.clone(),
            turn: self.turn_message_seq(),
            tool_use_id: call.id.clone(),
            at_ms: self.now_ms(),
        };
        tokio::spawn(async move {
            let started = Instant::now();
            // What the call may change is recorded (durably) before it
            // runs, and what it left when it ends (`agent rewind`); a
            // command outside git, which only leaves a note that it ran
            // untracked, as it starts.
            let mut checkpoint = if background {
                None
            } else {
                checkpoints.before(key, &call.name, &call.input, &ctx).await
            };
            let run = async {
                if background {
                    crate::tools::run_as_background_shell(&call.input, &ctx).await
                } else if let Called::Mcp { server, tool } = Called::of(&call.name) {
                    let mut out = mcp
                        .call(&servers, server, tool, call.input.clone(), &ctx)
                        .await;
                    // The registry's backstop, for what a server sent.
                    if out.content.len() > ctx.limits.max_output_bytes {
                        out.content =
                            crate::truncate::truncate(&out.content, ctx.limits.max_output_bytes);
                    }
                    out
                } else {
                    registry.run(&call.name, call.input.clone(), &ctx).await
                }
            };
            let mut output = match checkpoint.as_mut().filter(|p| p.unwritten()) {
                // A command outside git: it starts on the first poll of
                // `run`, and its record is written right after.
                Some(pending) => {
                    tokio::join!(biased; run, async { checkpoints.started(pending) }).0
                }
                None => run.await,
            };
            redactor.output(&mut output);
            if let Some(pending) = checkpoint {
                checkpoints.after(pending).await;
            }
            // The tool's post_tool_use hooks are part of its run: they are
            // stopped with it, and what they add is in its result.
            let mut reports = Vec::new();
            if !post.is_empty() {
                let (added, ran) =
                    hooks::post_tool_use(&post, &env, &call, &output.content, output.is_error)
                        .await;
                for text in added {
                    output.content.push_str("\n\n");
                    output.content.push_str(&text);
                }
                reports = ran;
                redactor.output(&mut output);
            }
            let _ = tx.send(Input::ToolDone {
                call: id,
                tool_use_id: call.id,
                output,
                duration_ms: started.elapsed().as_millis() as u64,
                hooks: reports,
            });
        });
    }

    /// A clean stop: clients are told why, running tools are terminated
    /// and recorded as interrupted (the core decides how), and in-flight
    /// model requests are dropped; the persisted state lets the next start
    /// carry on.
    pub(super) async fn shutdown(&mut self) {
        self.emit(EventKind::Notice(
            "agentd is shutting down; running tools are interrupted".to_string(),
        ));
        if let Some(f) = self.work.llm.take() {
            f.cancel.cancel();
        }
        if let Some((_, h)) = self.work.retry.take() {
            h.abort();
        }
        self.apply_internal(Event::DaemonStopping).await;
        self.work.stop_all();
    }
}
