//! Human-readable rendering of conversations, events, permission requests
//! and tables.
//!
//! Everything writes into an `impl Write`, so tests render into a `Vec<u8>`
//! and compare strings. Colour (ANSI) is used only when asked for, which the
//! caller decides from whether stdout is a terminal and `NO_COLOR`.
//!
//! [`Renderer`] (here) remembers what was shown and hands each event to its
//! family: `messages` (reply text and thinking, transcript messages),
//! `tools` (calls, live output, diffs), `permissions`, `plans`, `status`
//! (states, errors, retries), `notices`, `transcript` (snapshots, `agent
//! show`). `tables` and `format` are pure text the other commands share.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Write};

use agent_proto::v1::{self as pb, attach_response::Event};

use crate::io::DEFAULT_WIDTH;
use crate::markdown::{self, MarkdownStream};

mod diff;
mod format;
mod messages;
mod notices;
mod permissions;
mod plans;
mod status;
mod tables;
mod thinking;
mod todo;
mod tools;
mod transcript;

pub use format::{
    format_age, format_duration_ms, human_bytes, image_description, one_line, shorten_home,
};
pub use notices::{
    budget_amount, code_rewound_lines, correction_attempt_text, correction_failed_text,
    correction_success_text, hook_line, queue_line, settings_line, sub_agent_line,
};
pub use permissions::wrap_options;
pub use plans::{checklist_line, parse_plan_steps, plan_box, plan_steps_text, plan_suggested_text};
pub use status::{error_kind_text, mode_name, state_text};
pub use tables::{
    conversation_table, conversation_tree, cost_text, shell_table, tokens_text, usage_table,
};
pub use todo::{todo_panel_lines, todo_status};
pub use tools::{OUTPUT_LINES, abbreviate, tool_use_summary};
pub use transcript::{SNAPSHOT_TAIL, checkpoint_lines};

use notices::{
    budget_resolved_text, context_warning_text, continuation_started_text, continued_text,
    forked_text, instructions_line,
};
use plans::plan_rejected_text;
use tools::LiveOutput;

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";

/// What the cursor is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    None,
    /// Reply text of this content block.
    Text(u32),
    /// Reasoning of this content block.
    Thinking(u32),
}

/// Renders a conversation for people, event by event.
///
/// It remembers what it has shown (the last message, which tool calls have
/// been announced and finished, the pending request) so that the same thing
/// arriving twice — in a snapshot after a reconnect, as a durable message
/// after streamed deltas — is shown once.
pub struct Renderer<W: Write> {
    out: todo::Counted<W>,
    color: bool,
    /// The cursor is not at the start of a line.
    line_open: bool,
    stream: Stream,
    /// Deltas of the current reply were shown (so its message is not repeated).
    streamed_reply: bool,
    /// Tool calls seen in messages: id → one-line summary.
    tool_uses: HashMap<String, String>,
    /// Tool calls announced with `⏺`.
    begun: HashSet<String>,
    /// Tool calls whose outcome was shown with `⎿`.
    ended: HashSet<String>,
    /// Calls whose diff was shown with their permission request: their end
    /// does not show it again.
    diff_shown: HashSet<String>,
    /// Output of running tool calls shown so far, by id.
    live: HashMap<String, LiveOutput>,
    /// Highest transcript message seq shown.
    last_message_seq: u64,
    /// The last error line shown (a state change repeating it is not shown twice).
    last_error: Option<String>,
    /// The permission request whose block was shown last.
    shown_request: Option<String>,
    /// Whether a permission request's block ends with its keys (the
    /// interactive terminal shows its own).
    show_keys: bool,
    /// The conversation's working directory (from the snapshot).
    cwd: String,
    /// This client asked for the cancel and said so already.
    cancel_said: bool,
    /// `--yes`: requests are answered by the client itself, one line each.
    auto_allow: bool,
    /// Reads, greps and globs begun and not printed yet: each becomes one
    /// line with its result when it ends (printed alone if anything else
    /// is printed first).
    held: Vec<(String, String)>,
    /// This client's id, from the snapshot (its own join is not announced).
    own_client_id: String,
    /// This client's name. A client that resumes after a reconnect gets no
    /// snapshot, so its new id comes only with its own `ClientAttached`,
    /// recognised by this name (which holds the process id).
    own_name: String,
    /// User messages this client sent and will see come back.
    sent_texts: VecDeque<String>,
    /// Show the conversation header with the first snapshot.
    show_header: bool,
    /// Each user message's first line starts with its number, the one
    /// `agent rewind --to` takes (`agent show`).
    numbered: bool,
    header_shown: bool,
    /// How the assistant's markdown is shown (colour follows `color`).
    markdown: markdown::Style,
    /// The reply text being streamed: its blocks are shown as they complete,
    /// the rest when the text ends (at [`Renderer::end_line`]).
    reply: Option<MarkdownStream>,
    /// The key that shows a folded output whole (interactive only), named
    /// where lines are left out.
    expand_key: Option<&'static str>,
    /// `agent show --full`: tool results whole, not abbreviated.
    full_output: bool,
    /// The last tool result seen: its call's summary and the result.
    last_result: Option<(String, pb::ToolResultBlock)>,
    /// How reasoning is shown (collapsed or whole).
    thinking: thinking::ThinkingLine,
    /// The model's todo list and what of it is on the screen.
    todo: todo::TodoPanel,
}

impl<W: Write> Renderer<W> {
    /// A renderer writing into `out`, with ANSI colour when `color`.
    pub fn new(out: W, color: bool) -> Self {
        Renderer {
            out: todo::Counted {
                inner: out,
                written: 0,
            },
            color,
            line_open: false,
            stream: Stream::None,
            streamed_reply: false,
            tool_uses: HashMap::new(),
            begun: HashSet::new(),
            ended: HashSet::new(),
            diff_shown: HashSet::new(),
            live: HashMap::new(),
            last_message_seq: 0,
            last_error: None,
            shown_request: None,
            show_keys: true,
            cwd: String::new(),
            cancel_said: false,
            auto_allow: false,
            held: Vec::new(),
            own_client_id: String::new(),
            own_name: String::new(),
            sent_texts: VecDeque::new(),
            show_header: true,
            numbered: false,
            header_shown: false,
            markdown: markdown::Style {
                color,
                truecolor: false,
                width: DEFAULT_WIDTH,
            },
            reply: None,
            expand_key: None,
            full_output: false,
            last_result: None,
            thinking: thinking::ThinkingLine::default(),
            todo: todo::TodoPanel::default(),
        }
    }

    /// The reasoning's one line is redrawn in place with its time (a
    /// terminal).
    pub fn with_live_thinking(mut self, in_place: bool) -> Self {
        self.thinking.in_place = in_place;
        self
    }

    /// How the todo list is shown: redrawn in place (a terminal written
    /// directly), or once as the turn ends (piped, the default, and the
    /// interactive session, whose spinner line follows the list).
    pub fn with_todo_panel(mut self, terminal: bool, interactive: bool) -> Self {
        self.todo.mode = if terminal && !interactive {
            todo::PanelMode::InPlace
        } else {
            todo::PanelMode::Final
        };
        self
    }

    /// The interactive session: where output is folded, say which key shows
    /// it whole ([`Renderer::expand_last`]).
    pub fn with_expand_key(mut self, key: &'static str) -> Self {
        self.expand_key = Some(key);
        self
    }

    /// Tool results are printed whole (`agent show --full`).
    pub fn with_full_output(mut self, full: bool) -> Self {
        self.full_output = full;
        self
    }

    /// Prints the whole result of the last tool call (what the model got),
    /// for the output that was folded as it ran.
    /// and whether it shows 24-bit colour (for highlighted code).
    pub fn with_screen(mut self, width: usize, truecolor: bool) -> Self {
        self.markdown.width = width;
        self.markdown.truecolor = truecolor;
        self
    }

    /// Whether the first snapshot prints the conversation header (`agent run`
    /// has already printed the id).
    pub fn with_header(mut self, show: bool) -> Self {
        self.show_header = show;
        self
    }

    /// This client cancelled the turn and told the person: the state's
    /// own "cancelling…" is not printed again.
    pub fn cancel_said(&mut self) {
        self.cancel_said = true;
    }

    /// `--yes`: each permission request is one line saying it was allowed.
    pub fn with_auto_allow(mut self, auto: bool) -> Self {
        self.auto_allow = auto;
        self
    }

    /// Whether permission requests end with their keys.
    pub fn with_keys(mut self, show: bool) -> Self {
        self.show_keys = show;
        self
    }

    /// This client's name as given in `Subscribe`, so that its own joins
    /// and leaves (after a reconnect, under a new id) are not announced as
    /// someone else's.
    pub fn with_own_name(mut self, name: &str) -> Self {
        self.own_name = name.to_string();
        self
    }

    /// The writer, back.
    pub fn into_inner(self) -> W {
        self.out.inner
    }

    /// The writer, to write something the renderer does not know about.
    pub fn writer(&mut self) -> &mut W {
        &mut self.out.inner
    }

    /// This client's id (known after the snapshot).
    pub fn own_client_id(&self) -> &str {
        &self.own_client_id
    }

    /// Whether `client` is this client (under any id it had).
    fn is_own_name(&self, client: &pb::ClientInfo) -> bool {
        !self.own_name.is_empty() && client.name == self.own_name
    }

    /// Remembers that this client sent `text`, so it is not echoed when the
    /// message comes back.
    pub fn note_sent(&mut self, text: &str) {
        self.sent_texts.push_back(text.trim().to_string());
    }

    /// The person typed a line: the terminal has moved to a new line.
    pub fn input_consumed(&mut self) {
        self.line_open = false;
    }

    /// The stream broke: deltas that were missed will not be replayed, so
    /// the reply being streamed is shown whole when its message arrives.
    pub fn stream_broken(&mut self) -> io::Result<()> {
        self.end_line()?;
        self.streamed_reply = false;
        Ok(())
    }

    /// Flushes the writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("{code}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    /// Ends the current line if the cursor is in the middle of one, and
    /// shows what is left of the reply text being streamed: whatever comes
    /// next (a tool call, a notice, the end of the turn) ends that text.
    pub fn end_line(&mut self) -> io::Result<()> {
        self.end_text()?;
        for (_, summary) in std::mem::take(&mut self.held) {
            let dot = self.paint(GREEN, "⏺");
            writeln!(self.out, "{dot} {summary}")?;
        }
        Ok(())
    }

    /// Ends an open line and the reply's held-back text (not the held
    /// tool calls).
    fn end_text(&mut self) -> io::Result<()> {
        if let Stream::Thinking(_) = self.stream
            && let Some(last) = self.thinking.end(std::time::Instant::now())
        {
            let last = self.paint(DIM, &last);
            write!(self.out, "\r\x1b[2K{last}")?;
        }
        if self.line_open {
            writeln!(self.out)?;
            self.line_open = false;
        }
        if let Some(mut reply) = self.reply.take() {
            write!(self.out, "{}", reply.finish())?;
        }
        self.stream = Stream::None;
        Ok(())
    }

    fn line(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        writeln!(self.out, "{text}")
    }

    /// A dim informational line.
    pub fn info(&mut self, text: &str) -> io::Result<()> {
        let text = self.paint(DIM, text);
        self.line(&text)
    }

    /// A highlighted notice line.
    pub fn notice(&mut self, text: &str) -> io::Result<()> {
        let text = self.paint(YELLOW, &format!("! {text}"));
        self.line(&text)
    }

    /// A red error line.
    pub fn error_line(&mut self, text: &str) -> io::Result<()> {
        let text = self.paint(RED, &format!("✗ {text}"));
        self.line(&text)
    }

    // -----------------------------------------------------------------------
    // Events

    /// Renders one event of an attach stream: each family's module says how.
    pub fn event(&mut self, ev: &pb::AttachResponse) -> io::Result<()> {
        let Some(event) = &ev.event else {
            return Ok(());
        };
        match event {
            Event::Snapshot(s) => self.snapshot(s)?,
            Event::StateChanged(s) => {
                if let Some(state) = &s.state {
                    self.state_changed(state)?;
                }
            }
            Event::MessageAppended(m) => {
                if let Some(message) = &m.message {
                    self.message(message, true)?;
                }
            }
            Event::ReplyBegin(_) => self.reply_begin()?,
            Event::TextDelta(d) => self.text_delta(d.block_index, &d.text)?,
            Event::ThinkingDelta(d) => self.thinking_delta(d.block_index, &d.text)?,
            Event::ToolCallBegin(t) => self.tool_call_begin(t)?,
            Event::ToolCallEnd(t) => self.tool_end(t)?,
            Event::ToolOutputDelta(d) => self.tool_output(d)?,
            Event::PermissionRequested(p) => {
                if let Some(request) = &p.request {
                    self.permission_request(request)?;
                }
            }
            Event::PermissionResolved(p) => self.permission_resolved(p)?,
            Event::UsageUpdated(_) | Event::Resumed(_) => {}
            Event::Error(e) => self.error_event(e)?,
            Event::Retrying(r) => self.retrying(r)?,
            Event::ClientAttached(c) => self.client_attached(c)?,
            Event::ClientDetached(c) => self.client_detached(c)?,
            Event::ShellStarted(s) => self.shell_started(s)?,
            Event::ShellExited(s) => self.shell_exited(s)?,
            Event::Notice(n) => self.generic_notice(n)?,
            Event::ContextWarning(w) => self.notice(&context_warning_text(w))?,
            Event::ContinuationStarted(c) => self.notice(&continuation_started_text(c))?,
            Event::ContextExhausted(e) => self.context_exhausted(e)?,
            Event::BudgetStopped(b) => self.budget_stopped(b)?,
            Event::BudgetResolved(b) => self.notice(&budget_resolved_text(b))?,
            // The approval request that follows shows the plan.
            Event::PlanGenerated(_) => {}
            Event::PlanConfirmed(p) => self.plan_confirmed(p)?,
            Event::PlanRejected(p) => self.notice(&plan_rejected_text(p))?,
            Event::PlanStepStarted(s)
            | Event::PlanStepCompleted(s)
            | Event::PlanStepFailed(s)
            | Event::PlanStepSkipped(s) => self.plan_step(s)?,
            Event::PlanSuggested(s) => self.notice(&plan_suggested_text(s))?,
            Event::TodoUpdated(t) => {
                if let Some(list) = &t.plan {
                    self.todo_updated(list)?;
                }
            }
            Event::SubAgentStarted(_)
            | Event::SubAgentStateChanged(_)
            | Event::SubAgentToolCallBegin(_)
            | Event::SubAgentToolCallEnd(_)
            | Event::SubAgentFinished(_) => {
                if let Some(text) = sub_agent_line(event) {
                    self.info(&text)?;
                }
            }
            Event::CodeRewound(c) => self.code_rewound(c)?,
            Event::ConversationForked(f) => self.notice(&forked_text(f))?,
            Event::CorrectionAttempt(c) => self.notice(&correction_attempt_text(c))?,
            Event::CorrectionSuccess(c) => self.notice(&correction_success_text(c))?,
            Event::CorrectionFailed(c) => self.notice(&correction_failed_text(c))?,
            Event::ConversationContinued(c) => self.notice(&continued_text(c))?,
            Event::InstructionsLoaded(i) => self.info(&instructions_line(i))?,
            Event::QueueChanged(q) => self.info(&queue_line(&q.queued))?,
            Event::SettingsChanged(s) => self.info(&settings_line(s))?,
            Event::HookRan(h) => self.hook_ran(h)?,
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests;
