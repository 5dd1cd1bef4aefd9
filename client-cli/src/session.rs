//! The live side of `agent run` and `agent attach`: one Attach stream at a
//! time, events rendered as they arrive, permission prompts, lines typed on
//! stdin, Ctrl-C, and reconnection when the stream breaks.
//!
//! Reconnecting resubscribes with `after_seq` = the last sequence number
//! seen, and every event at or below it is dropped, so a daemon restart shows
//! nothing twice.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use agent_proto::v1::{
    self as pb, AttachRequest, StateKind, attach_request::Frame, attach_response::Event,
    content_block::Block,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::cli::{
    Decision, PLAN_KEYS, PlanKey, TypedAnswer, offered_decisions, parse_plan_key,
    parse_typed_answer,
};
use crate::connect::{Client, connect};
use crate::error::{CliError, Exit};
use crate::io::{Input, Interrupts, Io};
use crate::json;
use crate::render::{Renderer, error_kind_text, mode_name};
use crate::repl::complete::SlashCommand;
use crate::repl::status::Status;
use crate::repl::term::{EXPAND_OUTPUT, NEXT_MODE, Question, UiLink};

/// First delay before reconnecting; doubles up to [`RECONNECT_MAX_DELAY`].
const RECONNECT_FIRST_DELAY: Duration = Duration::from_millis(100);
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(2);
/// How long to keep trying before giving up on the daemon.
const RECONNECT_WINDOW: Duration = Duration::from_secs(30);
/// Streams that break before delivering anything, in a row, before giving up.
const MAX_FRUITLESS_STREAMS: u32 = 5;
/// How long `attach` waits, after stdin ends, for its last messages to be
/// acknowledged.
const DETACH_GRACE: Duration = Duration::from_secs(5);

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

/// How one Attach stream ended.
enum StreamEnd {
    Done(Outcome),
    /// The connection broke: reconnect with backoff.
    Broken {
        why: String,
        delivered: bool,
    },
    /// The daemon refused a frame and closed the stream: subscribe again now.
    Resubscribe,
}

/// What the person is being asked.
struct Prompt {
    request: pb::PermissionRequest,
    offered: Vec<Decision>,
    /// Deny-and-stop was chosen; the next line is its feedback.
    wants_feedback: bool,
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
        unacked: VecDeque::new(),
        pending_images: Vec::new(),
        unacked_images: std::collections::HashMap::new(),
        sent: 0,
        not_sent: 0,
        detach_deadline: None,
        ui,
        follow: false,
        continuing: None,
        first_turn_pending: false,
    };
    let outcome = session.run().await;
    let _ = session.render.end_line();
    let _ = session.render.flush();
    let outcome = outcome?;
    let detached = session.detached();
    Ok((outcome, detached))
}

/// Whether a daemon refused an Attach stream because it does not know the
/// `create` frame (older than it: a frame it cannot decode has no body).
fn knows_no_create_frame(status: &tonic::Status) -> bool {
    status.code() == Code::InvalidArgument
        && status.message() == "the first Attach frame must be `subscribe`"
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
    /// Messages sent and not yet seen appended, with their client request
    /// ids: sent again on a new stream (the daemon appends each once).
    unacked: VecDeque<(String, String)>,
    /// Images attached (`/image`, or a typed or pasted path) for the next
    /// message.
    pending_images: Vec<pb::ImageUpload>,
    /// The images of unacknowledged messages, by client request id, so a
    /// message sent again on a new stream carries them again.
    unacked_images: std::collections::HashMap<String, Vec<pb::ImageUpload>>,
    /// `attach`: messages sent, and those the daemon refused.
    sent: usize,
    not_sent: usize,
    /// `attach`: stdin ended; leave when `unacked` is empty or at this time.
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
    async fn run(&mut self) -> Result<Outcome, CliError> {
        self.interrupts.install();
        let mut fruitless = 0;
        loop {
            match self.stream_once().await? {
                StreamEnd::Done(outcome) => return Ok(outcome),
                StreamEnd::Resubscribe => {}
                StreamEnd::Broken { why, delivered } => {
                    fruitless = if delivered { 0 } else { fruitless + 1 };
                    if fruitless >= MAX_FRUITLESS_STREAMS {
                        return Err(CliError::Disconnected(why));
                    }
                    if let Some(outcome) = self.reconnect(&why).await? {
                        return Ok(outcome);
                    }
                }
            }
        }
    }

    /// Subscribes and handles one stream until it ends.
    async fn stream_once(&mut self) -> Result<StreamEnd, CliError> {
        let (tx, rx) = mpsc::channel(32);
        let role = if self.config.view_only {
            pb::ClientRole::Viewer as i32
        } else {
            pb::ClientRole::Unspecified as i32
        };
        let subscribe = match &self.config.create {
            Some(create) => Frame::Create(pb::CreateAndSubscribe {
                create: Some(create.clone()),
                client_name: self.config.client_name.clone(),
                role,
            }),
            None => Frame::Subscribe(pb::Subscribe {
                conversation_id: self.config.conversation_id.clone(),
                after_seq: self.last_seq,
                client_name: self.config.client_name.clone(),
                role,
            }),
        };
        // The receiver is alive: this cannot fail.
        let _ = tx
            .send(AttachRequest {
                frame: Some(subscribe),
            })
            .await;
        self.tx = Some(tx);
        if self.interrupted || self.cancel_sent {
            // The cancel may have been lost with the old connection; it is idempotent.
            self.send_frame(Frame::Cancel(pb::CancelFrame {
                client_request_id: crate::commands::request_id(),
            }))
            .await;
        }
        // Messages not yet seen appended may have been lost with the old
        // connection; the daemon appends each id once.
        for (text, id) in self.unacked.clone() {
            let images = self.unacked_images.get(&id).cloned().unwrap_or_default();
            self.send_frame(Frame::Send(pb::SendMessageFrame {
                text,
                client_request_id: id,
                expected_turn: None,
                queue_if_busy: true,
                images,
            }))
            .await;
        }
        let mut inbound = match self.client.attach(ReceiverStream::new(rx)).await {
            Ok(response) => response.into_inner(),
            Err(status) if self.config.create.is_some() && knows_no_create_frame(&status) => {
                // A daemon started before it knew the `create` frame (it
                // runs on until restarted after an upgrade): create the
                // conversation as before, then subscribe to it.
                self.create_first().await?;
                return Ok(StreamEnd::Resubscribe);
            }
            Err(status) => return self.stream_error(status, false),
        };
        let mut delivered = false;
        loop {
            let deadline = self.detach_deadline;
            let detach_timer = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let want_line = self.reading_input && !self.input_closed;
            tokio::select! {
                item = inbound.next() => match item {
                    Some(Ok(event)) => {
                        delivered = true;
                        if let Some(outcome) = self.handle(event).await? {
                            return Ok(StreamEnd::Done(outcome));
                        }
                        if std::mem::take(&mut self.follow) {
                            return Ok(StreamEnd::Resubscribe);
                        }
                    }
                    Some(Err(status))
                        if !delivered
                            && self.config.create.is_some()
                            && knows_no_create_frame(&status) =>
                    {
                        // As above, the refusal sent on the stream.
                        self.create_first().await?;
                        return Ok(StreamEnd::Resubscribe);
                    }
                    Some(Err(status)) => return self.stream_error(status, delivered),
                    None => {
                        return Ok(StreamEnd::Broken {
                            why: "the daemon closed the stream".to_string(),
                            delivered,
                        });
                    }
                },
                line = self.input.next_line(), if want_line => {
                    if let Some(outcome) = self.on_line(line).await? {
                        return Ok(StreamEnd::Done(outcome));
                    }
                }
                () = self.interrupts.next() => {
                    if let Some(outcome) = self.on_interrupt().await? {
                        return Ok(StreamEnd::Done(outcome));
                    }
                }
                () = detach_timer => return Ok(StreamEnd::Done(Outcome::Detached)),
            }
        }
    }

    /// Decides what an error status on the stream means.
    fn stream_error(
        &mut self,
        status: tonic::Status,
        delivered: bool,
    ) -> Result<StreamEnd, CliError> {
        self.tx = None;
        if status.code() == Code::OutOfRange {
            // A frame over the daemon's size limit: it closed the stream
            // there, and read nothing sent after it.
            return Err(CliError::Refused(format!(
                "{}; the daemon closed the stream, so nothing typed from there on was sent",
                status.message()
            )));
        }
        match status.code() {
            Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::Cancelled
            | Code::Aborted => {
                let why = broken_reason(&status);
                return Ok(StreamEnd::Broken { why, delivered });
            }
            _ => {}
        }
        if delivered && (self.answered.is_some() || !self.unacked.is_empty()) {
            // The daemon refused something this client sent (a late answer,
            // a message while busy): say so and carry on.
            let error = CliError::conversation_status(status, &self.config.conversation_id);
            self.refused(&error.to_string())?;
            return Ok(StreamEnd::Resubscribe);
        }
        Err(CliError::conversation_status(
            status,
            &self.config.conversation_id,
        ))
    }

    /// Connects again with backoff. `Some` when the session ended meanwhile.
    async fn reconnect(&mut self, why: &str) -> Result<Option<Outcome>, CliError> {
        self.tx = None;
        self.render
            .stream_broken()
            .map_err(|e| CliError::io("writing output", e))?;
        self.note(&format!("reconnecting… ({why})"))?;
        let give_up = Instant::now() + RECONNECT_WINDOW;
        let mut delay = RECONNECT_FIRST_DELAY;
        loop {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.interrupts.next() => return Ok(Some(Outcome::Interrupted)),
            }
            match connect(&self.config.socket).await {
                Ok(client) => {
                    self.client = client;
                    self.note("reconnected")?;
                    return Ok(None);
                }
                Err(e) if Instant::now() >= give_up => {
                    return Err(CliError::Disconnected(format!("{why}; {e}")));
                }
                Err(_) => {}
            }
            delay = (delay * 2).min(RECONNECT_MAX_DELAY);
        }
    }

    // -----------------------------------------------------------------------
    // Events

    async fn handle(&mut self, ev: pb::AttachResponse) -> Result<Option<Outcome>, CliError> {
        let Some(event) = &ev.event else {
            return Ok(None);
        };
        let marker = matches!(event, Event::Snapshot(_) | Event::Resumed(_));
        if !marker && ev.seq != 0 && ev.seq <= self.last_seq {
            return Ok(None);
        }
        self.last_seq = self.last_seq.max(ev.seq);
        if let Event::Snapshot(s) = event {
            // A snapshot is the new baseline, even if it is older than what
            // was seen (a daemon that lost events must not be ignored forever).
            self.last_seq = ev.seq;
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

    /// Interactive: what the status line shows follows the events.
    fn update_ui(&mut self, event: &Event) {
        let Some(ui) = &self.ui else {
            return;
        };
        let now = ui.now_ms();
        let own = self.own_client_id.clone();
        let mut ring = matches!(event, Event::PermissionRequested(_));
        ui.status(|s| {
            let was_busy = s.busy();
            let set_state = |s: &mut Status, state: &pb::ConversationState| {
                let kind = StateKind::try_from(state.kind).unwrap_or(StateKind::Unspecified);
                if kind != s.state {
                    let asking = matches!(kind, StateKind::AwaitingLlm | StateKind::LlmRequesting);
                    let was_asking =
                        matches!(s.state, StateKind::AwaitingLlm | StateKind::LlmRequesting);
                    if asking && !was_asking {
                        s.streamed_chars = 0;
                    }
                    if kind != StateKind::ToolExecuting {
                        s.tool = None;
                    }
                    s.state = kind;
                    s.state_since_ms = now;
                }
            };
            match event {
                Event::Snapshot(snap) => {
                    if let Some(c) = &snap.conversation {
                        s.model.clone_from(&c.model);
                        s.mode = mode_name(c.mode);
                        s.total = c.usage.unwrap_or_default();
                        s.queued = c.queued.len();
                        s.cost_usd = c.cost_usd;
                        s.context_window = c.context_window;
                        s.additional_dirs.clone_from(&c.additional_dirs);
                        if let Some(state) = &c.state {
                            set_state(s, state);
                        }
                    }
                    s.others = snap
                        .clients
                        .iter()
                        .filter(|c| c.client_id != snap.your_client_id)
                        .count();
                    if let Some(u) = snap.messages.iter().rev().find_map(|m| m.usage.as_ref()) {
                        s.context_used = context_tokens(u);
                    }
                }
                Event::StateChanged(c) => {
                    if let Some(state) = &c.state {
                        set_state(s, state);
                    }
                }
                Event::ReplyBegin(_) => {
                    s.streamed_chars = 0;
                    s.retry = None;
                }
                Event::TextDelta(d) => s.streamed_chars += d.text.chars().count() as u64,
                Event::ThinkingDelta(d) => s.streamed_chars += d.text.chars().count() as u64,
                Event::ToolCallBegin(t) => {
                    s.tool = Some(if t.summary.is_empty() {
                        t.tool_name.clone()
                    } else {
                        t.summary.clone()
                    });
                }
                Event::ToolCallEnd(_) => s.tool = None,
                Event::Retrying(r) => {
                    s.retry = Some((r.attempt, r.max_attempts, now + r.delay_ms));
                }
                Event::UsageUpdated(u) => {
                    s.total = u.total.unwrap_or_default();
                    s.cost_usd = u.cost_usd;
                    if let Some(last) = &u.last {
                        s.context_used = context_tokens(last);
                    }
                }
                Event::ClientAttached(pb::ClientAttached { client: Some(c) })
                    if c.client_id != own && c.name != self.config.client_name =>
                {
                    s.others += 1;
                }
                Event::ClientDetached(pb::ClientDetached { client: Some(c) })
                    if c.client_id != own =>
                {
                    s.others = s.others.saturating_sub(1);
                }
                Event::ShellStarted(_) => s.shells_running += 1,
                Event::ShellExited(_) => s.shells_running = s.shells_running.saturating_sub(1),
                Event::QueueChanged(q) => s.queued = q.queued.len(),
                Event::SettingsChanged(c) => {
                    s.mode = mode_name(c.mode);
                    s.model.clone_from(&c.model);
                    s.context_window = c.context_window;
                    s.additional_dirs.clone_from(&c.additional_dirs);
                }
                _ => {}
            }
            // A snapshot starts no turn: joining a busy conversation rings
            // nothing when it ends unless it was watched for long enough.
            if !was_busy && s.busy() {
                s.busy_since_ms = now;
            }
            if was_busy && !s.busy() && now.saturating_sub(s.busy_since_ms) >= BELL_AFTER_MS {
                ring = true;
            }
        });
        if ring {
            ui.bell();
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
    async fn create_first(&mut self) -> Result<(), CliError> {
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
                if self
                    .unacked
                    .front()
                    .is_some_and(|(u, _)| u == t.text.trim())
                {
                    self.unacked.pop_front();
                }
            }
        }
    }

    /// Whether the session is over after this event.
    fn finished(&self, state_event: bool) -> Option<Outcome> {
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
                && self.unacked.is_empty())
            .then_some(Outcome::Detached),
        }
    }

    // -----------------------------------------------------------------------
    // Permissions

    async fn permission_requested(
        &mut self,
        request: &pb::PermissionRequest,
    ) -> Result<(), CliError> {
        let id = &request.request_id;
        if self
            .prompt
            .as_ref()
            .is_some_and(|p| &p.request.request_id == id)
            || self.answered.as_ref().is_some_and(|(a, _)| a == id)
        {
            return Ok(());
        }
        if self.json_out.is_some() {
            // With --json the block goes to stderr for the person.
            self.render
                .permission_request(request)
                .map_err(|e| CliError::io("writing output", e))?;
        }
        if request.plan.is_some() {
            // A plan approval offers no permission decision (not even to
            // --yes). On a terminal a key answers it (a, e, r); elsewhere,
            // and to edit the steps, `agent plan`.
            let short: String = self.config.conversation_id.chars().take(10).collect();
            if (self.ui.is_some() || self.input.is_terminal()) && !self.input_closed {
                self.prompt = Some(Prompt {
                    request: request.clone(),
                    offered: Vec::new(),
                    wants_feedback: false,
                });
                self.reading_input = true;
                self.note(PLAN_KEYS)?;
                return self.note(&format!("(to edit the steps: agent plan {short} edit)"));
            }
            return self.note(&format!(
                "the plan waits for approval: agent plan {short} approve|approve_edits|reject --feedback TEXT|edit"
            ));
        }
        let offered = offered_decisions(&request.options);
        if self.config.yes {
            self.send_answer(id.clone(), Decision::AllowOnce, None, false)
                .await;
            if self.json_out.is_some() {
                return self.note("allowed once (--yes)");
            }
            return Ok(());
        }
        if let Some(ui) = &self.ui {
            ui.ask(Question {
                request_id: id.clone(),
                offered: offered.clone(),
            });
            self.prompt = Some(Prompt {
                request: request.clone(),
                offered,
                wants_feedback: false,
            });
            return Ok(());
        }
        if self.input.is_terminal() && !self.input_closed {
            self.prompt = Some(Prompt {
                request: request.clone(),
                offered,
                wants_feedback: false,
            });
            self.reading_input = true;
            return self.note("type a key and press Enter");
        }
        let names: Vec<&str> = offered.iter().map(|d| d.name()).collect();
        let short: String = self.config.conversation_id.chars().take(10).collect();
        self.note(&format!(
            "waiting for another client to answer (agent answer {short} {})",
            names.join("|")
        ))
    }

    /// The daemon refused a frame of this client's (it says so with an
    /// error event of sequence number 0, or by ending the stream).
    fn refused(&mut self, message: &str) -> Result<(), CliError> {
        if let Some((_, decision)) = self.answered.take() {
            self.show_error(&format!(
                "answer \"{}\" refused: {message}",
                decision.label()
            ))
        } else if std::mem::take(&mut self.late_answer_reported) {
            // Already explained: another client answered first.
            Ok(())
        } else if self.unacked.pop_front().is_some() {
            self.not_sent += 1;
            self.show_error(&format!("message not sent: {message}"))
        } else {
            self.show_error(message)
        }
    }

    fn permission_resolved(&mut self, p: &pb::PermissionResolved) -> Result<(), CliError> {
        if let Some(ui) = &self.ui {
            ui.withdraw(&p.request_id);
        }
        if self
            .prompt
            .as_ref()
            .is_some_and(|q| q.request.request_id == p.request_id)
        {
            self.prompt = None;
        }
        let by_other = !p.client_id.is_empty() && p.client_id != self.own_client_id;
        let mine = self.answered.take_if(|(id, _)| *id == p.request_id);
        if let Some((_, decision)) = mine
            && by_other
        {
            let who = if p.client_name.is_empty() {
                &p.client_id
            } else {
                &p.client_name
            };
            self.show_error(&format!(
                "your answer \"{}\" came too late: {who} answered first",
                decision.label()
            ))?;
            self.late_answer_reported = true;
        }
        Ok(())
    }

    async fn send_answer(
        &mut self,
        request_id: String,
        decision: Decision,
        feedback: Option<String>,
        project: bool,
    ) {
        let feedback = feedback.unwrap_or_default();
        if decision == Decision::DenyAndStop && !feedback.trim().is_empty() {
            // The feedback comes back as the next user message and starts a turn.
            self.feedback_pending = true;
            self.render.note_sent(&feedback);
        }
        self.answered = Some((request_id.clone(), decision));
        self.prompt = None;
        self.send_frame(Frame::Answer(pb::AnswerPermissionFrame {
            request_id,
            decision: decision.to_proto() as i32,
            feedback,
            scope: if project {
                pb::RuleScope::Project as i32
            } else {
                pb::RuleScope::Unspecified as i32
            },
            client_request_id: crate::commands::request_id(),
            plan_answer: None,
        }))
        .await;
    }

    /// Answers the pending plan approval request with a key's meaning.
    async fn send_plan_answer(&mut self, request_id: String, key: PlanKey) {
        self.prompt = None;
        let answer = match key {
            PlanKey::Approve { edits } => pb::plan_answer::Answer::Approve(pb::PlanApprove {
                mode: if edits {
                    pb::PermissionMode::AcceptEdits
                } else {
                    pb::PermissionMode::Default
                } as i32,
            }),
            PlanKey::Reject { feedback } => pb::plan_answer::Answer::Reject(pb::PlanReject {
                feedback: feedback.unwrap_or_default(),
            }),
        };
        self.send_frame(Frame::Answer(pb::AnswerPermissionFrame {
            request_id,
            client_request_id: crate::commands::request_id(),
            plan_answer: Some(pb::PlanAnswer {
                answer: Some(answer),
            }),
            ..Default::default()
        }))
        .await;
    }

    async fn send_frame(&mut self, frame: Frame) {
        if let Some(tx) = &self.tx {
            // A failure means the stream is gone; the reconnect logic takes over.
            let _ = tx.send(AttachRequest { frame: Some(frame) }).await;
        }
    }

    // -----------------------------------------------------------------------
    // Input and Ctrl-C

    async fn on_line(&mut self, line: Option<String>) -> Result<Option<Outcome>, CliError> {
        let Some(line) = line else {
            self.input_closed = true;
            if self.config.kind != SessionKind::Run {
                if self.unacked.is_empty() {
                    return Ok(Some(Outcome::Detached));
                }
                self.detach_deadline = Some(Instant::now() + DETACH_GRACE);
            } else if self.prompt.take().is_some() {
                self.note("stdin closed: waiting for another client to answer")?;
            }
            return Ok(None);
        };
        self.render.input_consumed();
        // Keys of the terminal's own (never typed text).
        match line.as_str() {
            EXPAND_OUTPUT => {
                self.render
                    .expand_last()
                    .map_err(|e| CliError::io("writing output", e))?;
                return Ok(None);
            }
            NEXT_MODE => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                let next = crate::cli::Mode::after(&status.mode);
                self.update_settings(Some(next), None, Vec::new()).await?;
                return Ok(None);
            }
            _ => {}
        }
        if let Some(prompt) = &mut self.prompt
            && prompt.request.plan.is_some()
        {
            let id = prompt.request.request_id.clone();
            if prompt.wants_feedback {
                let feedback = Some(line.trim().to_string()).filter(|f| !f.is_empty());
                self.send_plan_answer(id, PlanKey::Reject { feedback })
                    .await;
                return Ok(None);
            }
            match parse_plan_key(&line) {
                Err(why) => self.show_error(&why)?,
                Ok(PlanKey::Reject { feedback: None }) => {
                    prompt.wants_feedback = true;
                    self.note("what should the plan do differently? (Enter to just reject it)")?;
                }
                Ok(key) => self.send_plan_answer(id, key).await,
            }
            return Ok(None);
        }
        if let Some(prompt) = &mut self.prompt {
            let id = prompt.request.request_id.clone();
            if prompt.wants_feedback {
                let feedback = Some(line.trim().to_string()).filter(|f| !f.is_empty());
                self.send_answer(id, Decision::DenyAndStop, feedback, false)
                    .await;
                return Ok(None);
            }
            match parse_typed_answer(&line, &prompt.offered) {
                Err(why) => self.show_error(&why)?,
                Ok(TypedAnswer {
                    decision: Decision::DenyAndStop,
                    feedback: None,
                    ..
                }) => {
                    prompt.wants_feedback = true;
                    if let Some(ui) = &self.ui {
                        // The next line typed is the feedback.
                        ui.withdraw(&id);
                    }
                    self.note("what should the agent do instead? (Enter for nothing)")?;
                }
                Ok(answer) => {
                    self.send_answer(id, answer.decision, answer.feedback, answer.project)
                        .await;
                }
            }
            return Ok(None);
        }
        if self.config.kind == SessionKind::Interactive {
            if let Some(command) = line.trim().strip_prefix('/') {
                return self.slash(command).await;
            }
            if let Some(memory) = crate::repl::memory_line(&line) {
                match crate::repl::remember(memory) {
                    Ok(file) => self.note(&format!(
                        "noted in {} (the agent reads it from its next turn)",
                        crate::render::shorten_home(&file.display().to_string())
                    ))?,
                    Err(e) => self.show_error(&e)?,
                }
                return Ok(None);
            }
        }
        match self.config.kind {
            SessionKind::Run if self.ui.is_none() => {
                self.note(
                    "(typed lines only answer permission requests here; `agent attach` to chat)",
                )?;
            }
            SessionKind::Attach | SessionKind::Interactive | SessionKind::Run => {
                // A line that is just the path of an image file (typed, or
                // pasted from a file manager) attaches it.
                if let Some(path) = image_path(line.trim()) {
                    self.attach_image(&path)?;
                    return Ok(None);
                }
                self.send_text(line.trim()).await;
            }
        }
        Ok(None)
    }

    /// Sends a message (queued while the agent works), unless it is empty.
    async fn send_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.sent += 1;
        let id = crate::commands::request_id();
        self.unacked.push_back((text.to_string(), id.clone()));
        self.render.note_sent(text);
        let images = std::mem::take(&mut self.pending_images);
        if !images.is_empty() {
            self.unacked_images
                .retain(|k, _| self.unacked.iter().any(|(_, u)| u == k));
            self.unacked_images.insert(id.clone(), images.clone());
        }
        self.send_frame(Frame::Send(pb::SendMessageFrame {
            text: text.to_string(),
            client_request_id: id,
            expected_turn: None,
            queue_if_busy: true,
            images,
        }))
        .await;
    }

    /// Interactive: a line starting with `/`.
    async fn slash(&mut self, command: &str) -> Result<Option<Outcome>, CliError> {
        let (name, arg) = match command.split_once(char::is_whitespace) {
            Some((name, arg)) => (name, arg.trim()),
            None => (command, ""),
        };
        match name {
            "image" => {
                if arg.is_empty() {
                    self.note("usage: /image PATH (attaches it to your next message)")?;
                } else {
                    let path = unquote(arg);
                    self.attach_image(std::path::Path::new(&path))?;
                }
                return Ok(None);
            }
            "help" | "?" => {
                for line in SLASH_HELP {
                    self.note(line)?;
                }
                for c in SLASH_COMMANDS {
                    let usage = format!("/{} {}", c.name, c.args);
                    self.note(&format!("  {usage:<16} {}", c.help))?;
                }
                let custom = crate::repl::prompt_commands();
                if !custom.is_empty() {
                    self.note("Your prompt files (.agentd/commands/*.md; see the README):")?;
                }
                for c in custom {
                    let usage = format!("/{} …", c.name);
                    self.note(&format!("  {usage:<16} {}", c.description))?;
                }
            }
            "exit" | "quit" => return Ok(Some(Outcome::Detached)),
            "expand" | "output" => self
                .render
                .expand_last()
                .map_err(|e| CliError::io("writing output", e))?,
            "clear" | "new" => return Ok(Some(Outcome::Switch(None))),
            "attach" if !arg.is_empty() => {
                // A wrong id is said here; the session stays where it is.
                let request = pb::GetConversationRequest {
                    conversation_id: arg.to_string(),
                };
                match self.client.get_conversation(request).await {
                    Ok(found) => {
                        if let Some(c) = found.into_inner().conversation {
                            return Ok(Some(Outcome::Switch(Some(c.id))));
                        }
                        self.show_error("the daemon returned no conversation")?;
                    }
                    Err(status) => {
                        let error = CliError::conversation_status(status, arg);
                        self.show_error(&error.to_string())?;
                    }
                }
            }
            "attach" => self.show_error("which conversation? /attach ID (agent ls lists them)")?,
            "mode" if arg.is_empty() => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                self.note(&format!(
                    "mode: {}; /mode {} changes it",
                    status.mode,
                    crate::cli::Mode::names().join("|")
                ))?;
            }
            "mode" => match crate::cli::Mode::parse(arg) {
                Ok(mode) => self.update_settings(Some(mode), None, Vec::new()).await?,
                Err(e) => self.show_error(&e)?,
            },
            "model" if arg.is_empty() => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                self.note(&format!(
                    "model: {} ({} tokens of context); /model NAME changes it",
                    status.model, status.context_window
                ))?;
            }
            "model" => self.update_settings(None, Some(arg), Vec::new()).await?,
            "add-dir" if arg.is_empty() => {
                self.show_error("which directory? /add-dir DIR")?;
            }
            "add-dir" => match crate::commands::typed_dir(arg) {
                Ok(dir) => self.update_settings(None, None, vec![dir]).await?,
                Err(e) => self.show_error(&e.to_string())?,
            },
            "cost" | "usage" => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                let u = status.total;
                let cost = status
                    .cost_usd
                    .map_or("unknown (no price for this model)".to_string(), |c| {
                        format!("${c:.4}")
                    });
                self.note(&format!(
                    "this conversation: {} input ({} written to and {} read from the cache), {} output tokens; cost {cost}",
                    u.input_tokens,
                    u.cache_creation_input_tokens,
                    u.cache_read_input_tokens,
                    u.output_tokens
                ))?;
            }
            "budget" => {
                let (raise, raise_by) = match arg.split_whitespace().collect::<Vec<_>>()[..] {
                    ["raise"] => (true, None),
                    ["raise", amount] => match crate::cli::parse_amount(amount) {
                        Ok(v) => (true, Some(v)),
                        Err(e) => return self.show_error(&e).map(|()| None),
                    },
                    ["stop"] => (false, None),
                    _ => {
                        self.show_error("/budget raise [AMOUNT] or /budget stop")?;
                        return Ok(None);
                    }
                };
                let request = pb::AnswerBudgetRequest {
                    conversation_id: self.config.conversation_id.clone(),
                    raise,
                    raise_by,
                    client_name: self.config.client_name.clone(),
                };
                if let Err(status) = self.client.answer_budget(request).await {
                    self.show_error(&format!("cannot answer the budget: {}", status.message()))?;
                }
            }
            "compact" => {
                let request = pb::CompactConversationRequest {
                    conversation_id: self.config.conversation_id.clone(),
                };
                if let Err(status) = self.client.compact_conversation(request).await {
                    self.show_error(&format!("cannot compact: {}", status.message()))?;
                }
            }
            "continue" => {
                let request = pb::ContinueConversationRequest {
                    conversation_id: self.config.conversation_id.clone(),
                };
                match self.client.continue_conversation(request).await {
                    Ok(r) => {
                        if let Some(c) = r.into_inner().conversation {
                            return Ok(Some(Outcome::Switch(Some(c.id))));
                        }
                    }
                    Err(status) => {
                        self.show_error(&format!("cannot continue: {}", status.message()))?
                    }
                }
            }
            "rewind" => {
                let mut request = pb::RewindRequest {
                    conversation_id: self.config.conversation_id.clone(),
                    ..Default::default()
                };
                for word in arg.split_whitespace() {
                    match word {
                        "code" => request.code = true,
                        "conversation" => request.conversation = true,
                        "both" => (request.code, request.conversation) = (true, true),
                        "force" => request.force = true,
                        n => match n.parse::<u64>() {
                            Ok(seq) if seq > 0 => request.message_seq = seq,
                            _ => {
                                self.show_error(
                                    "/rewind [MESSAGE] [code|conversation|both] [force]",
                                )?;
                                return Ok(None);
                            }
                        },
                    }
                }
                if !request.conversation {
                    request.code = true;
                }
                match self.client.rewind(request).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        // Attached clients see the events; this one is told
                        // the whole answer (and goes to the fork).
                        for line in crate::commands::rewind_lines(&r) {
                            self.note(&line)?;
                        }
                        if let Some(f) = r.forked {
                            return Ok(Some(Outcome::Switch(Some(f.id))));
                        }
                    }
                    Err(status) => {
                        self.show_error(&format!("cannot rewind: {}", status.message()))?
                    }
                }
            }
            "shells" => {
                let request = pb::ListShellsRequest {
                    conversation_id: self.config.conversation_id.clone(),
                };
                match self.client.list_shells(request).await {
                    Ok(response) => {
                        let shells = response.into_inner().shells;
                        if shells.is_empty() {
                            self.note("no background shells")?;
                        } else {
                            let mut table = Vec::new();
                            crate::render::shell_table(
                                &mut table,
                                &shells,
                                Some(self.config.conversation_id.as_str()),
                                crate::commands::now_ms(),
                            )
                            .map_err(|e| CliError::io("writing output", e))?;
                            let text = String::from_utf8_lossy(&table).into_owned();
                            for line in text.lines() {
                                self.note(line)?;
                            }
                        }
                    }
                    Err(status) => {
                        self.show_error(&format!("cannot list shells: {}", status.message()))?
                    }
                }
            }
            "init" => self.send_text(crate::repl::INIT_PROMPT).await,
            other => match crate::repl::prompt_commands()
                .into_iter()
                .find(|c| c.name == other)
            {
                Some(command) => self.send_text(command.expand(arg).trim()).await,
                None => self.show_error(&format!(
                    "unknown command /{other}; /help lists the commands"
                ))?,
            },
        }
        Ok(None)
    }

    /// `/mode` and `/model`: the daemon changes the conversation and tells
    /// every client (the line saying so comes with that event).
    async fn update_settings(
        &mut self,
        mode: Option<crate::cli::Mode>,
        model: Option<&str>,
        add_dirs: Vec<String>,
    ) -> Result<(), CliError> {
        let adding = add_dirs.clone();
        let request = pb::UpdateConversationRequest {
            conversation_id: self.config.conversation_id.clone(),
            mode: mode.map_or(0, |m| m.to_proto() as i32),
            model: model.unwrap_or_default().to_string(),
            client_name: self.config.client_name.clone(),
            add_dirs,
        };
        let before = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
        match self.client.update_conversation(request).await {
            Ok(response) => {
                // An unchanged value makes no event: say so here.
                let now = response.into_inner().conversation.unwrap_or_default();
                if let Some(mode) = mode
                    && before.mode == mode.name()
                {
                    self.note(&format!("the mode is already {}", mode_name(now.mode)))?;
                }
                if let Some(model) = model
                    && before.model == model.trim()
                {
                    self.note(&format!("the model is already {}", now.model))?;
                }
                if let [dir] = adding.as_slice()
                    && (before.additional_dirs.contains(dir) || *dir == now.cwd)
                {
                    self.note(&format!("the tools already reach {dir}"))?;
                }
            }
            Err(status) => self.show_error(status.message())?,
        }
        Ok(())
    }

    async fn on_interrupt(&mut self) -> Result<Option<Outcome>, CliError> {
        let busy = !matches!(
            self.state,
            StateKind::Idle | StateKind::Error | StateKind::ContextExhausted
        );
        let note = match self.config.kind {
            SessionKind::Run => {
                if self.interrupted || !busy {
                    return Ok(Some(Outcome::Interrupted));
                }
                self.interrupted = true;
                "cancelling… (Ctrl-C again to quit now)"
            }
            SessionKind::Interactive => {
                // Leaving is the terminal's business (Ctrl-C twice, Ctrl-D).
                if self.cancel_sent || !busy {
                    return Ok(None);
                }
                self.cancel_sent = true;
                "cancelling the turn…"
            }
            SessionKind::Attach => {
                if self.cancel_sent || !busy {
                    return Ok(Some(Outcome::Interrupted));
                }
                self.cancel_sent = true;
                "cancelling the turn… (Ctrl-C again to detach)"
            }
        };
        self.prompt = None;
        self.send_frame(Frame::Cancel(pb::CancelFrame {
            client_request_id: crate::commands::request_id(),
        }))
        .await;
        self.render.cancel_said();
        self.note(note)?;
        Ok(None)
    }

    /// How `attach` ends once stdin has: an error when a message typed was
    /// refused or never confirmed, so a script piping into it can tell.
    fn detached(&self) -> Result<Exit, CliError> {
        let unconfirmed = self.unacked.len();
        if self.not_sent == 0 && unconfirmed == 0 {
            return Ok(Exit::Ok);
        }
        let mut what = Vec::new();
        if self.not_sent > 0 {
            what.push(format!(
                "{} of {} refused",
                messages(self.not_sent),
                self.sent
            ));
        }
        if unconfirmed > 0 {
            what.push(format!(
                "{} not confirmed within {} s",
                messages(unconfirmed),
                DETACH_GRACE.as_secs()
            ));
        }
        Err(CliError::Refused(what.join("; ")))
    }

    /// Reads an image for the next message and says so; a file that cannot
    /// be read is a note, not an error of the session. Whether it is an
    /// image the daemon takes is the daemon's to say when it is sent.
    fn attach_image(&mut self, path: &std::path::Path) -> Result<(), CliError> {
        match crate::commands::read_images(&[path.to_path_buf()]) {
            Ok(mut images) => {
                let size = images.iter().map(|i| i.data.len() as u64).sum();
                self.pending_images.append(&mut images);
                let n = self.pending_images.len();
                self.note(&format!(
                    "[image attached: {}, {}; {n} for your next message]",
                    path.display(),
                    crate::render::human_bytes(size)
                ))
            }
            Err(e) => self.note(&e.to_string()),
        }
    }

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

/// A turn at least this long rings the bell when it ends.
const BELL_AFTER_MS: u64 = 10_000;

/// What `/help` prints.
const SLASH_HELP: [&str; 5] = [
    "Type a message and press Enter; Alt-Enter or a trailing \\ starts a new line.",
    "While the agent works, what you send waits for its next step (it is queued).",
    "Ctrl-C cancels the turn; Ctrl-C twice or Ctrl-D leaves (the conversation stays).",
    "A line starting with `# ` is noted in the project's AGENTS.md.",
    "Tab completes commands and paths. The commands:",
];

/// The session's slash commands, for `/help` and Tab.
/// A typed or pasted line, without quotes or shell escapes (`'a b.png'`,
/// `a\ b.png`).
pub(crate) fn unquote(line: &str) -> String {
    let trimmed = line.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = trimmed.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    trimmed.replace("\\ ", " ")
}

/// The path a line names when the line is just the path of an existing
/// file that starts like a PNG, JPEG, GIF or WebP image (a `file://` URL
/// too, as file managers paste them).
pub(crate) fn image_path(line: &str) -> Option<std::path::PathBuf> {
    use std::io::Read;
    let text = unquote(line);
    let text = text.strip_prefix("file://").unwrap_or(&text);
    if text.is_empty()
        || text.contains('\n')
        || !(text.starts_with('/') || text.starts_with('.') || text.starts_with('~'))
    {
        return None;
    }
    let path = match text.strip_prefix("~/") {
        Some(rest) => std::path::PathBuf::from(std::env::var_os("HOME")?).join(rest),
        None => std::path::PathBuf::from(text),
    };
    let mut head = [0u8; 12];
    let mut file = std::fs::File::open(&path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let n = file.read(&mut head).ok()?;
    let head = &head[..n];
    let image = head.starts_with(b"\x89PNG\r\n\x1a\n")
        || head.starts_with(&[0xFF, 0xD8, 0xFF])
        || head.starts_with(b"GIF87a")
        || head.starts_with(b"GIF89a")
        || (head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP");
    image.then_some(path)
}

pub const SLASH_COMMANDS: &[SlashCommand] = &[
    SlashCommand {
        name: "help",
        args: "",
        help: "this list",
    },
    SlashCommand {
        name: "cost",
        args: "",
        help: "tokens and cost of this conversation",
    },
    SlashCommand {
        name: "shells",
        args: "",
        help: "the background shells of this conversation",
    },
    SlashCommand {
        name: "expand",
        args: "",
        help: "the last tool result whole (also Ctrl-O)",
    },
    SlashCommand {
        name: "mode",
        args: "[MODE]",
        help: "show or change the permission mode; Shift-Tab: the next one",
    },
    SlashCommand {
        name: "model",
        args: "[NAME]",
        help: "show or change the model of the next requests",
    },
    SlashCommand {
        name: "add-dir",
        args: "DIR",
        help: "let the tools reach DIR too (as the working directory)",
    },
    SlashCommand {
        name: "init",
        args: "",
        help: "ask the agent to write an AGENTS.md for this project",
    },
    SlashCommand {
        name: "budget",
        args: "raise [AMOUNT] | stop",
        help: "answer a reached budget: raise it (default: by the budget again) or stop the turn",
    },
    SlashCommand {
        name: "image",
        args: "PATH",
        help: "attach an image (PNG, JPEG, GIF, WebP) to your next message",
    },
    SlashCommand {
        name: "compact",
        args: "",
        help: "summarise the conversation now and end it (then /continue)",
    },
    SlashCommand {
        name: "continue",
        args: "",
        help: "go on in a new conversation seeded with the summary",
    },
    SlashCommand {
        name: "rewind",
        args: "[MESSAGE] [code|conversation|both] [force]",
        help: "undo the agent's file changes since a message (default: the last), or fork before it",
    },
    SlashCommand {
        name: "attach",
        args: "ID",
        help: "go to another conversation (agent ls lists them)",
    },
    SlashCommand {
        name: "clear",
        args: "",
        help: "start a new conversation in this directory",
    },
    SlashCommand {
        name: "exit",
        args: "",
        help: "leave (the conversation stays in the daemon: agent -c)",
    },
];

/// The tokens a request put in the context: its input, cached or not.
fn context_tokens(u: &pb::Usage) -> u64 {
    u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
}

/// "1 message", "2 messages".
fn messages(n: usize) -> String {
    if n == 1 {
        "1 message".to_string()
    } else {
        format!("{n} messages")
    }
}

/// Why a stream broke, for people: the daemon's own words when it said
/// something (e.g. "shutting down"), not the transport's internals.
fn broken_reason(status: &tonic::Status) -> String {
    let message = status.message();
    let internal = [
        "h2 protocol error",
        "transport error",
        "error reading a body",
        "connection reset",
    ];
    if message.is_empty() || internal.iter().any(|i| message.contains(i)) {
        "connection lost".to_string()
    } else {
        message.to_string()
    }
}

#[cfg(test)]
mod tests;
