//! The daemon's events as the session sees them: the sequence numbers that
//! drop what was already shown, the conversation's state, the creation by
//! `run`, continuations, and when the session is over.

use std::io::Write;

use agent_proto::v1::{self as pb, StateKind, attach_response::Event, content_block::Block};

use super::{Outcome, Output, Session, SessionKind};
use crate::error::CliError;
use crate::json;

impl Session<'_> {
    pub(super) async fn handle(
        &mut self,
        ev: pb::AttachResponse,
    ) -> Result<Option<Outcome>, CliError> {
        let Some(event) = &ev.event else {
            return Ok(None);
        };
        let marker = matches!(event, Event::Snapshot(_) | Event::Resumed(_));
        if !marker && ev.seq != 0 && ev.seq <= self.last_seq {
            return Ok(None);
        }
        self.last_seq = self.last_seq.max(ev.seq);
        if let Event::Snapshot(s) = event {
            self.baseline(ev.seq, s)?;
        }
        if let Event::Error(e) = event
            && ev.seq == 0
        {
            // Sequence number 0: addressed to this client only, the refusal
            // of something it sent.
            if self.json_out.is_some() {
                self.output(&ev)?;
            }
            self.refused(&e.message)?;
            return Ok(self.finished(false));
        }
        self.output(&ev)?;
        self.update_ui(event);

        let mut state_event = false;
        match event {
            Event::Snapshot(s) => {
                state_event = true;
                self.apply_snapshot(s).await?;
            }
            Event::StateChanged(s) => {
                state_event = true;
                if let Some(state) = &s.state {
                    self.set_state(state);
                }
            }
            Event::MessageAppended(m) => {
                if let Some(message) = &m.message {
                    self.note_message(message);
                }
            }
            Event::PermissionRequested(p) => {
                if let Some(request) = &p.request {
                    self.permission_requested(request).await?;
                }
            }
            Event::PermissionResolved(p) => self.permission_resolved(p)?,
            Event::ConversationContinued(c) if !c.conversation_id.is_empty() => {
                return Ok(self.follow_continuation(&c.conversation_id));
            }
            Event::ContextExhausted(e) => {
                self.continuing = Some(e.continuing);
                state_event = true;
            }
            // A resumed stream has no snapshot: this client's new id comes
            // with its own join, known by its name. Without it, its answers
            // after a reconnect would look like another client's.
            Event::ClientAttached(pb::ClientAttached {
                client: Some(client),
            }) if !client.name.is_empty() && client.name == self.config.client_name => {
                self.own_client_id.clone_from(&client.client_id);
            }
            _ => {}
        }
        Ok(self.finished(state_event))
    }

    /// A snapshot is the new baseline, even if it is older than what was
    /// seen (a daemon that lost events must not be ignored forever).
    fn baseline(&mut self, seq: u64, s: &pb::Snapshot) -> Result<(), CliError> {
        self.last_seq = seq;
        if let Some(c) = &s.conversation {
            self.last_seq = self.last_seq.max(c.last_seq);
            if !c.id.is_empty() {
                self.config.conversation_id.clone_from(&c.id);
            }
        }
        self.own_client_id.clone_from(&s.your_client_id);
        if self.config.create.take().is_some() {
            self.created(s)?;
        }
        Ok(())
    }

    /// A snapshot's state, messages and pending question, as if each had
    /// come as its own event.
    async fn apply_snapshot(&mut self, s: &pb::Snapshot) -> Result<(), CliError> {
        if let Some(state) = s.conversation.as_ref().and_then(|c| c.state.as_ref()) {
            self.set_state(state);
        }
        if let Some(c) = &s.conversation
            && c.state.as_ref().map(|s| s.kind) == Some(StateKind::ContextExhausted as i32)
        {
            self.continuing = Some(c.continuing);
        }
        for m in &s.messages {
            self.note_message(m);
        }
        match &s.pending_permission {
            Some(request) => self.permission_requested(request).await?,
            None => {
                if self.prompt.take().is_some() {
                    self.note("the permission request is no longer pending")?;
                }
                self.answered = None;
            }
        }
        Ok(())
    }

    /// How `run` ends at an exhausted context nobody continues.
    fn exhausted(&self) -> Outcome {
        Outcome::ContextExhausted(format!(
            "the conversation is read-only; `agent continue {}` goes on in a new one \
             seeded with its summary",
            self.config.conversation_id
        ))
    }

    /// The conversation goes on in `next`: an interactive session switches
    /// to it; `attach` subscribes to it from its start, and so does `run`
    /// when the daemon continued it by itself (the task goes on there; a
    /// continuation by hand after `run` ended is another command's).
    fn follow_continuation(&mut self, next: &str) -> Option<Outcome> {
        match self.config.kind {
            SessionKind::Interactive => Some(Outcome::Switch(Some(next.to_string()))),
            SessionKind::Attach | SessionKind::Run => {
                self.continuing = None;
                self.render.follow_conversation();
                self.config.conversation_id = next.to_string();
                self.last_seq = 0;
                self.prompt = None;
                self.answered = None;
                self.follow = true;
                None
            }
        }
    }

    fn output(&mut self, ev: &pb::AttachResponse) -> Result<(), CliError> {
        let written = match &mut self.json_out {
            Some(out) => writeln!(out, "{}", json::event(ev)).and_then(|()| out.flush()),
            None => self.render.event(ev),
        };
        written.map_err(|e| CliError::io("writing output", e))
    }

    /// `run` created the conversation on its stream: says which one (on
    /// stderr; with --json also as a `conversation_created` line), and
    /// waits for its first turn when nothing was sent to it yet.
    fn created(&mut self, s: &pb::Snapshot) -> Result<(), CliError> {
        let Some(conversation) = &s.conversation else {
            return Err(CliError::Server(
                "the daemon's snapshot names no conversation".to_string(),
            ));
        };
        self.first_turn_pending = s.messages.is_empty() && conversation.message_count == 0;
        self.say_created(conversation)
    }

    /// `run` against a daemon that knows no `create` frame: the
    /// conversation made by CreateConversation (its first turn started
    /// before this client subscribes, whose snapshot then shows it).
    pub(super) async fn create_first(&mut self) -> Result<(), CliError> {
        let Some(request) = self.config.create.take() else {
            return Ok(());
        };
        let conversation = self
            .client
            .create_conversation(request)
            .await
            .map_err(CliError::status)?
            .into_inner()
            .conversation
            .ok_or_else(|| CliError::Server("the daemon returned no conversation".to_string()))?;
        self.config.conversation_id.clone_from(&conversation.id);
        self.say_created(&conversation)
    }

    /// Says which conversation `run` created (on stderr; with --json also
    /// as a `conversation_created` line).
    fn say_created(&mut self, conversation: &pb::ConversationSummary) -> Result<(), CliError> {
        let line = format!("conversation {}\n", conversation.id);
        let notes: &mut Output = match self.notes.as_deref_mut() {
            Some(notes) => notes,
            None => &mut **self.render.writer(),
        };
        notes
            .write_all(line.as_bytes())
            .and_then(|()| notes.flush())
            .map_err(|e| CliError::io("writing output", e))?;
        if let Some(out) = self.json_out.as_mut() {
            let value = serde_json::json!({
                "type": "conversation_created",
                "conversation": crate::json::conversation_summary(conversation),
            });
            writeln!(out, "{value}")
                .and_then(|()| out.flush())
                .map_err(|e| CliError::io("writing output", e))?;
        }
        Ok(())
    }

    fn set_state(&mut self, state: &pb::ConversationState) {
        self.state = StateKind::try_from(state.kind).unwrap_or(StateKind::Unspecified);
        if self.state != StateKind::Idle {
            self.first_turn_pending = false;
        }
        self.error_kind = state.error_kind;
        self.error_message.clone_from(&state.error_message);
        if self.state == StateKind::Idle {
            self.cancel_sent = false;
        }
    }

    fn note_message(&mut self, m: &pb::Message) {
        if m.role != pb::Role::User as i32 {
            return;
        }
        for block in &m.content {
            if let Some(Block::Text(t)) = &block.block {
                self.feedback_pending = false;
                self.outbox.appended(&t.text);
            }
        }
    }

    /// Whether the session is over after this event.
    pub(super) fn finished(&self, state_event: bool) -> Option<Outcome> {
        match self.config.kind {
            SessionKind::Run if state_event => match self.state {
                StateKind::Idle if self.first_turn_pending => None,
                StateKind::Idle if self.interrupted => Some(Outcome::Interrupted),
                StateKind::Idle if self.feedback_pending => None,
                StateKind::Idle => Some(Outcome::Idle),
                StateKind::Error if self.interrupted => Some(Outcome::Interrupted),
                StateKind::Error => Some(Outcome::Failed {
                    kind: self.error_kind,
                    message: self.error_message.clone(),
                }),
                // Exhausted: the end, unless the daemon continues it by
                // itself (then `run` follows the work into the new one);
                // the state comes before the notice that says which.
                StateKind::ContextExhausted => match self.continuing {
                    Some(false) => Some(self.exhausted()),
                    Some(true) | None => None,
                },
                StateKind::Unspecified
                | StateKind::AwaitingLlm
                | StateKind::LlmRequesting
                | StateKind::ToolExecuting
                | StateKind::AwaitingPermission
                | StateKind::Cancelling
                | StateKind::AwaitingSubAgents
                | StateKind::AwaitingContinuation
                | StateKind::StopHooks => None,
            },
            SessionKind::Run => None,
            SessionKind::Attach | SessionKind::Interactive => (self.detach_deadline.is_some()
                && self.outbox.is_empty())
            .then_some(Outcome::Detached),
        }
    }

    // -----------------------------------------------------------------------
    // Permissions
}
