//! The live side of `agent run` and `agent attach`: one Attach stream at a
//! time, events rendered as they arrive, permission prompts, lines typed on
//! stdin, Ctrl-C, and reconnection when the stream breaks.
//!
//! Reconnecting resubscribes with `after_seq` = the last sequence number
//! seen, and every event at or below it is dropped, so a daemon restart shows
//! nothing twice.
//!
//! Layout: [`stream`] (the Attach stream and reconnection), [`events`]
//! (what the daemon's events mean to the session), [`permissions`]
//! (questions and answers), [`input`] (stdin and Ctrl-C), [`slash`] (the
//! interactive commands), [`ui`] (the status line), and [`outbox`] (the
//! messages typed and not yet confirmed).

mod events;
mod input;
mod outbox;
mod permissions;
mod slash;
mod stream;
mod ui;

use std::io::Write;
use std::path::PathBuf;

use agent_proto::v1::{self as pb, AttachRequest, StateKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cli::Decision;
use crate::connect::Client;
use crate::error::{CliError, Exit};
use crate::io::{Input, Interrupts, Io};
use crate::render::{Renderer, error_kind_text};
use crate::repl::term::UiLink;
use outbox::Outbox;
use permissions::Prompt;

/// Which command is streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// `agent run`: ends when the turn ends.
    Run,
    /// `agent attach`: ends when stdin ends (or Ctrl-C).
    Attach,
    /// `agent` alone: like attach, with a line editor, one-key answers, a
    /// status line and slash commands; Ctrl-C only cancels.
    Interactive,
}

/// What a session needs to know.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub kind: SessionKind,
    /// The conversation (a prefix is replaced by the full id from the snapshot).
    pub conversation_id: String,
    /// Where to reconnect.
    pub socket: PathBuf,
    /// Answer "allow once" to every permission request.
    pub yes: bool,
    /// Print events as JSON lines instead of rendering them.
    pub json: bool,
    /// This client's name, shown to the others.
    pub client_name: String,
    /// Ask the daemon for the viewer role on this stream (`attach
    /// --view-only`): it then refuses any message, answer or cancel.
    pub view_only: bool,
    /// The prompt `run` sent, so it is not echoed back.
    pub sent_prompt: Option<String>,
    /// `run`: the conversation to create, on the stream itself (the
    /// Attach stream's `create` frame), until its snapshot names it; a
    /// stream broken before that creates it again under the same request
    /// id, which the daemon answers with the first one's conversation.
    pub create: Option<pb::CreateConversationRequest>,
}

/// Where a session writes.
type Output = dyn Write + Send + 'static;

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `run`: the agent is idle again.
    Idle,
    /// `run`: the turn failed.
    Failed { kind: i32, message: String },
    /// `run`: the context window is exhausted.
    ContextExhausted(String),
    /// Ctrl-C.
    Interrupted,
    /// `attach`: stdin ended.
    Detached,
    /// Interactive: go on with another conversation (None: a new one).
    Switch(Option<String>),
}

/// Streams a conversation until the session ends; returns the exit status.
pub async fn run_session(
    client: Client,
    config: SessionConfig,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let (outcome, detached) = session_outcome(client, config, io, None).await?;
    exit_status(outcome, detached)
}

/// The exit status of a session that ended with `outcome` (`detached`:
/// what leaving means, see [`session_outcome`]).
pub(crate) fn exit_status(
    outcome: Outcome,
    detached: Result<Exit, CliError>,
) -> Result<Exit, CliError> {
    match outcome {
        Outcome::Idle => Ok(Exit::Ok),
        Outcome::Detached | Outcome::Switch(_) => detached,
        Outcome::Interrupted => Ok(Exit::Interrupted),
        Outcome::Failed { kind, message } => Err(CliError::TurnFailed {
            kind: match error_kind_text(kind) {
                "" => "unknown".to_string(),
                k => k.to_string(),
            },
            message,
        }),
        Outcome::ContextExhausted(message) => {
            Err(CliError::ContextExhausted(if message.is_empty() {
                "the conversation is read-only".to_string()
            } else {
                message
            }))
        }
    }
}

/// Streams a conversation until the session ends: how it ended, and what
/// leaving means for the exit status (an error when messages typed were
/// refused or not confirmed). `ui`: the interactive terminal.
pub(crate) async fn session_outcome(
    client: Client,
    config: SessionConfig,
    io: &mut Io,
    ui: Option<UiLink>,
) -> Result<(Outcome, Result<Exit, CliError>), CliError> {
    let Io {
        out,
        err,
        color,
        width,
        truecolor,
        input,
        interrupts,
        ..
    } = io;
    let (human, json_out, notes, color): (
        &mut Output,
        Option<&mut Output>,
        Option<&mut Output>,
        bool,
    ) = if config.json {
        (&mut **err, Some(&mut **out), None, false)
    } else {
        (&mut **out, None, Some(&mut **err), *color)
    };
    let mut render = Renderer::new(human, color)
        .with_screen(*width, *truecolor)
        .with_header(match config.kind {
            SessionKind::Run => false,
            SessionKind::Attach => true,
            // A conversation the session just started has shown its prompt.
            SessionKind::Interactive => config.sent_prompt.is_none(),
        })
        .with_live_thinking(color)
        .with_todo_panel(color, ui.is_some())
        .with_own_name(&config.client_name)
        .with_keys(ui.is_none())
        .with_auto_allow(config.yes);
    if ui.is_some() {
        render = render.with_expand_key("Ctrl-O");
    }
    if let Some(prompt) = &config.sent_prompt {
        render.note_sent(prompt);
    }
    let mut session = Session {
        reading_input: config.kind != SessionKind::Run || ui.is_some(),
        config,
        client,
        render,
        json_out,
        notes,
        input,
        interrupts,
        tx: None,
        last_seq: 0,
        state: StateKind::Unspecified,
        error_kind: 0,
        error_message: String::new(),
        own_client_id: String::new(),
        prompt: None,
        answered: None,
        late_answer_reported: false,
        input_closed: false,
        interrupted: false,
        cancel_sent: false,
        feedback_pending: false,
        outbox: Outbox::default(),
        detach_deadline: None,
        ui,
        follow: false,
        continuing: None,
        first_turn_pending: false,
    };
    let outcome = session.run().await;
    let _ = session.render.end_line();
    let _ = session.render.todo_final();
    let _ = session.render.flush();
    let outcome = outcome?;
    let detached = session.detached();
    Ok((outcome, detached))
}

struct Session<'a> {
    config: SessionConfig,
    client: Client,
    /// Human output: stdout, or stderr with --json (prompts and notes only).
    render: Renderer<&'a mut Output>,
    /// With --json: stdout, one event per line.
    json_out: Option<&'a mut Output>,
    /// stderr when it is not `render`'s (without --json): where `run`
    /// says which conversation it created.
    notes: Option<&'a mut Output>,
    input: &'a mut Input,
    interrupts: &'a mut Interrupts,
    /// Frames to the daemon on the current stream.
    tx: Option<mpsc::Sender<AttachRequest>>,
    /// The highest event sequence number seen.
    last_seq: u64,
    state: StateKind,
    error_kind: i32,
    error_message: String,
    own_client_id: String,
    prompt: Option<Prompt>,
    /// The answer this client sent and has not seen resolved: (request, decision).
    answered: Option<(String, Decision)>,
    /// "Another client answered first" was said; the refusal that follows is not repeated.
    late_answer_reported: bool,
    /// Lines from stdin are wanted (always for attach; for run once asked).
    reading_input: bool,
    input_closed: bool,
    /// `run`: Ctrl-C was pressed once and a cancel sent.
    interrupted: bool,
    /// `attach`: a cancel was sent for the current turn.
    cancel_sent: bool,
    /// `run`: deny-and-stop feedback will start another turn.
    feedback_pending: bool,
    /// Messages typed and not yet confirmed, and images for the next one.
    outbox: Outbox,
    /// `attach`: stdin ended; leave when `outbox` is empty or at this time.
    detach_deadline: Option<Instant>,
    /// Interactive: the terminal's status line and one-key questions.
    ui: Option<UiLink>,
    /// `attach`: the conversation was continued in a new one, which this
    /// session now follows (subscribe to it from the start).
    follow: bool,
    /// The conversation's context is exhausted: whether the daemon
    /// continues it by itself (`run` then follows it), once known.
    continuing: Option<bool>,
    /// `run` created the conversation on its stream and its first turn has
    /// not started yet: the snapshot's idle state is not the end.
    first_turn_pending: bool,
}

impl Session<'_> {
    fn note(&mut self, text: &str) -> Result<(), CliError> {
        self.render
            .info(text)
            .and_then(|()| self.render.flush())
            .map_err(|e| CliError::io("writing output", e))
    }

    fn show_error(&mut self, text: &str) -> Result<(), CliError> {
        self.render
            .error_line(text)
            .and_then(|()| self.render.flush())
            .map_err(|e| CliError::io("writing output", e))
    }
}

#[cfg(test)]
mod tests;
