//! Model requests: what one is made of (the system prompt with the
//! project instructions, the pruned transcript, the images) and starting
//! it. `RequestParts` keeps what requests share between them.

use super::{Actor, Input};
use crate::llm::{LlmRequest, StreamEvent};
use crate::runtime::events::EventKind;
use crate::runtime::{instructions, prompt};
use agentd_core::{
    ContentBlock, LlmPurpose, Message, Mode, Role, ThinkForm, Thinking, ThinkingParams,
    ThinkingPlan,
};
use std::sync::Arc;

/// What the requests of a conversation share: the system prompt (made
/// once a day), the project instructions it carries, the encoded
/// transcript prefix providers reuse, and the images' base64.
#[derive(Default)]
pub(super) struct RequestParts {
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
    /// The tools turns offer, with the sub-agent types (`agent_types.rs`).
    pub(super) types: super::agent_types::TypeOffer,
}

impl RequestParts {
    /// The system prompt for the day of `now_ms`: the one made earlier
    /// that day, or `make`'s followed by the project instructions.
    fn system_prompt(&mut self, now_ms: i64, make: impl FnOnce() -> String) -> Arc<str> {
        let day = now_ms.div_euclid(86_400_000);
        if let Some((d, p)) = &self.system_prompt
            && *d == day
        {
            return p.clone();
        }
        let mut p = make();
        if let Some((_, found)) = &self.instructions
            && !found.text.is_empty()
        {
            p.push_str("\n\n");
            p.push_str(&found.text);
        }
        let p: Arc<str> = Arc::from(p);
        self.system_prompt = Some((day, p.clone()));
        p
    }

    /// Whether the instructions were read when their files were `stamp`.
    fn instructions_are(&self, stamp: &instructions::Stamp) -> bool {
        self.instructions
            .as_ref()
            .is_some_and(|(known, _)| known == stamp)
    }

    /// Keeps the instructions `found` under `stamp`; returns whether what
    /// the model reads changed (then the system prompt is made again).
    fn set_instructions(
        &mut self,
        stamp: instructions::Stamp,
        found: instructions::Instructions,
    ) -> bool {
        let changed = match &self.instructions {
            Some((_, before)) => *before != found,
            None => !found.sources.is_empty(),
        };
        self.instructions = Some((stamp, found));
        if changed {
            self.system_prompt = None;
        }
        changed
    }

    /// The requests' shared start changed (pruned, or rolled back).
    pub(super) fn forget_prefix(&mut self) {
        self.request_cache = crate::llm::RequestCache::default();
    }

    /// Keeps the base64 of image `sha` (once).
    pub(super) fn keep_image(&mut self, sha: String, bytes: &[u8]) {
        if !self.images.contains_key(&sha) {
            Arc::make_mut(&mut self.images).insert(sha, crate::images::base64(bytes).into());
        }
    }
}

impl Actor {
    /// Writes the bytes of a message's images (content-addressed, so an
    /// image already stored costs nothing). Not flushed here: the commit
    /// that appends (or queues) the message is written after them and
    /// flushed, and sled recovers its log as a prefix, so the message is
    /// never durable without its images. Also keeps their base64 for the
    /// model requests to come.
    pub(super) fn store_images(
        &mut self,
        images: &[crate::images::StagedImage],
    ) -> Result<(), crate::runtime::RuntimeError> {
        for staged in images {
            self.shared
                .store
                .put_image(&staged.image.sha256, &staged.bytes)?;
            self.parts
                .keep_image(staged.image.sha256.clone(), &staged.bytes);
        }
        Ok(())
    }

    /// Makes sure the base64 of every image `messages` refer to is at
    /// hand (after a restart, or for a conversation loaded again, it is
    /// read from the store once). An image the store lacks is left out:
    /// the provider sends a note in its place, so the model is told.
    fn load_images(&mut self, messages: &[Message]) {
        let missing: Vec<String> = messages
            .iter()
            .flat_map(Message::images)
            .filter(|i| !self.parts.images.contains_key(&i.sha256))
            .map(|i| i.sha256.clone())
            .collect();
        for sha in missing {
            match self.shared.store.image(&sha) {
                Ok(Some(bytes)) => self.parts.keep_image(sha, &bytes),
                Ok(None) => {
                    tracing::error!(conversation = %self.record.id, "image {sha} is missing from the store");
                }
                Err(e) => {
                    tracing::error!(conversation = %self.record.id, "cannot read image {sha}: {e}");
                }
            }
        }
    }

    pub(super) fn start_llm(&mut self, attempt: u32, purpose: LlmPurpose) {
        let (call, cancel) = self.work.begin_llm();
        if matches!(purpose, LlmPurpose::Turn) && self.at_turn_start() {
            self.refresh_instructions();
            self.refresh_agent_types();
        }
        self.emit(EventKind::ReplyBegin { attempt });
        let restricted = matches!(self.record.conversation.mode, Mode::ReadOnly | Mode::Plan);
        let (messages, tools) = match &purpose {
            LlmPurpose::Turn => (self.transcript.clone(), self.offered_tools(restricted)),
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
        if self.record.conversation.mode == Mode::Plan {
            system = Arc::from(format!("{system}\n\n{}", prompt::PLAN_MODE));
        }
        let thinking = match purpose {
            // Anthropic's thinking joins a tool loop only one that began
            // thinking (`agentd_core::thinking::may_think`).
            LlmPurpose::Turn => match self.thinking_plan() {
                ThinkingPlan {
                    params: Some(ThinkingParams::Budget { .. } | ThinkingParams::Adaptive { .. }),
                    ..
                } if !agentd_core::thinking::may_think(&messages) => {
                    self.thinking_plan_for(Some(Thinking::Off))
                }
                plan => plan,
            },
            // A summary needs no thinking.
            LlmPurpose::Continuation { .. } => self.thinking_plan_for(Some(Thinking::Off)),
        };
        let request = LlmRequest {
            model: self.record.model.clone(),
            system,
            messages,
            tools,
            max_tokens: thinking.max_tokens,
            thinking: thinking.params,
            cache: self.parts.request_cache.clone(),
            images: self.parts.images.clone(),
            // The provider's own search joins a turn's requests, not a
            // summary's.
            web_search: (self.shared.config.web.search && matches!(purpose, LlmPurpose::Turn))
                .then_some(self.shared.config.web.search_max_uses),
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
        let allowed = self.agent_tools();
        crate::tasks::spawn("model request", async move {
            let mut request = request;
            if let Some((hub, servers)) = mcp {
                let mut extra = tokio::select! {
                    extra = hub.offer(&servers, &cwd, restricted) => extra,
                    // The stream below sees the cancel too.
                    _ = cancel.cancelled() => Vec::new(),
                };
                if let Some(allowed) = &allowed {
                    extra = super::agent_types::only(&extra, allowed);
                }
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
            self.parts.forget_prefix();
            tracing::info!(
                conversation = %self.record.id,
                "pruned {} old tool outputs from requests (about {} tokens)",
                plan.results,
                plan.tokens
            );
            self.emit(EventKind::info(format!(
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
        let configured = &self.shared.config.system_prompt;
        let cwd = &self.record.cwd;
        // A typed sub-agent's type speaks after the daemon's prompt.
        let of_type = self.agent_type_prompt().map(str::to_string);
        self.parts.system_prompt(now, || {
            let base = match configured {
                Some(s) => s.clone(),
                None => prompt::system_prompt(cwd, now),
            };
            match of_type {
                Some(of_type) => format!("{base}\n\n{of_type}"),
                None => base,
            }
        })
    }

    /// `max_tokens` of a request: the config's, within what the model can
    /// write.
    /// The thinking of the current turn's requests and their `max_tokens`
    /// (decided by `agentd_core::thinking::plan`).
    pub(super) fn thinking_plan(&self) -> ThinkingPlan {
        self.thinking_plan_for(self.record.conversation.thinking)
    }

    fn thinking_plan_for(&self, turn: Option<Thinking>) -> ThinkingPlan {
        let config = &self.shared.config;
        let info = config.models.lookup(&self.record.model);
        // A model the table does not know takes what its provider's
        // models usually take.
        let form = info.think_form.unwrap_or(match config.provider {
            crate::config::ProviderKind::Anthropic => ThinkForm::Budget,
            crate::config::ProviderKind::Openai => ThinkForm::Effort,
        });
        agentd_core::thinking::plan(
            turn,
            info.thinking,
            form,
            config.limits.max_tokens,
            info.max_output_tokens,
        )
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
        if self.parts.instructions_are(&stamp) {
            return;
        }
        let found = instructions::read(&stamp, config.instructions.max_bytes);
        let event = EventKind::InstructionsLoaded {
            files: found.files(),
            truncated: found.truncated,
        };
        if self.parts.set_instructions(stamp, found) {
            self.emit(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Clock;
    use std::time::Duration;

    const DAY: Duration = Duration::from_secs(86_400);

    /// The stamp and instructions of an AGENTS.md saying `text` in `dir`.
    fn instructions_in(
        dir: &std::path::Path,
        text: &str,
    ) -> (instructions::Stamp, instructions::Instructions) {
        std::fs::write(dir.join("AGENTS.md"), text).unwrap();
        let stamp = instructions::stamp(&[dir.to_path_buf()]);
        let found = instructions::read(&stamp, 10_000);
        (stamp, found)
    }

    #[tokio::test(start_paused = true)]
    async fn the_system_prompt_is_made_once_a_day() {
        // Noon, so that an hour later is the same day.
        let clock = Clock::virtual_at(19_000 * 86_400_000 + 43_200_000);
        let mut parts = RequestParts::default();
        let mut made = 0;
        let mut ask = |parts: &mut RequestParts| {
            parts.system_prompt(clock.now_ms(), || {
                made += 1;
                format!("prompt {made}")
            })
        };
        assert_eq!(&*ask(&mut parts), "prompt 1");
        tokio::time::advance(Duration::from_secs(3_600)).await;
        assert_eq!(&*ask(&mut parts), "prompt 1", "the same day: kept");
        tokio::time::advance(DAY).await;
        assert_eq!(&*ask(&mut parts), "prompt 2", "the next day: made again");
    }

    #[tokio::test(start_paused = true)]
    async fn changed_instructions_remake_the_prompt_that_carries_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut parts = RequestParts::default();
        let (stamp, found) = instructions_in(dir.path(), "Use tabs.");
        assert!(!parts.instructions_are(&stamp));
        assert!(parts.set_instructions(stamp.clone(), found.clone()), "new");
        assert!(parts.instructions_are(&stamp));
        let prompt = parts.system_prompt(0, || "base".into());
        assert!(prompt.starts_with("base\n\n") && prompt.contains("Use tabs."));
        assert!(
            !parts.set_instructions(stamp, found),
            "read again unchanged: nothing to tell"
        );
        assert_eq!(parts.system_prompt(0, || "other".into()), prompt, "kept");
        let (stamp, found) = instructions_in(dir.path(), "Use spaces, not tabs.");
        assert!(parts.set_instructions(stamp, found));
        let prompt = parts.system_prompt(0, || "base".into());
        assert!(prompt.contains("Use spaces") && !prompt.contains("Use tabs."));
    }

    #[tokio::test(start_paused = true)]
    async fn an_image_is_encoded_once() {
        let mut parts = RequestParts::default();
        parts.keep_image("aa".into(), b"first");
        let shared = parts.images.clone();
        parts.keep_image("aa".into(), b"second");
        assert_eq!(&*parts.images["aa"], crate::images::base64(b"first"));
        assert!(
            Arc::ptr_eq(&shared, &parts.images),
            "the requests' copy is not replaced"
        );
    }
}
