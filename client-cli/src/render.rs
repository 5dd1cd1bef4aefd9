//! Human-readable rendering of conversations, events, permission requests
//! and tables.
//!
//! Everything writes into an `impl Write`, so tests render into a `Vec<u8>`
//! and compare strings. Colour (ANSI) is used only when asked for, which the
//! caller decides from whether stdout is a terminal and `NO_COLOR`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Write};

use agent_proto::v1::{
    self as pb, ErrorKind, PermissionDecision, Role, ShellStatus, StateKind,
    attach_response::Event, content_block::Block,
};

use crate::cli::{Decision, offered_decisions};
use crate::io::DEFAULT_WIDTH;
use crate::markdown::{self, MarkdownStream};

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";

/// How many messages a snapshot shows before "… N earlier messages".
pub const SNAPSHOT_TAIL: usize = 20;
/// How many lines of a command's output are shown at its start (as they
/// arrive) and at its end (when it ends); the lines between are counted.
pub const OUTPUT_LINES: usize = 5;

/// What a client has shown of a running call's output.
#[derive(Debug, Default)]
struct LiveOutput {
    /// The line being written (no newline yet).
    partial: String,
    /// Lines shown (at most [`OUTPUT_LINES`]).
    shown: usize,
    /// Complete lines that arrived after those, not shown.
    hidden: u64,
    /// The daemon left bytes out (a flood): `hidden` is not exact.
    skipped: bool,
}

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
    out: W,
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
}

impl<W: Write> Renderer<W> {
    /// A renderer writing into `out`, with ANSI colour when `color`.
    pub fn new(out: W, color: bool) -> Self {
        Renderer {
            out,
            color,
            line_open: false,
            stream: Stream::None,
            streamed_reply: false,
            tool_uses: HashMap::new(),
            begun: HashSet::new(),
            ended: HashSet::new(),
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
        }
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
    pub fn expand_last(&mut self) -> io::Result<()> {
        let Some((summary, result)) = self.last_result.clone() else {
            self.info("no tool has run in this session yet")?;
            return self.out.flush();
        };
        self.end_text()?;
        let lines = result.content.lines().count();
        let what = if lines == 1 { "line" } else { "lines" };
        let head = format!(
            "{} {summary} — the whole result ({lines} {what}):",
            self.paint(GREEN, "⏺")
        );
        self.line(&head)?;
        self.whole_output(&result)?;
        self.out.flush()
    }

    /// A tool result's every line, under its call.
    fn whole_output(&mut self, result: &pb::ToolResultBlock) -> io::Result<()> {
        if result.is_error {
            let text = self.paint(RED, "  ⎿ error:");
            self.line(&text)?;
        }
        for line in result.content.lines() {
            self.output_line_within(line, usize::MAX)?;
        }
        self.result_images(result)
    }

    /// One line for each image a tool result carries.
    fn result_images(&mut self, result: &pb::ToolResultBlock) -> io::Result<()> {
        for image in &result.images {
            let text = format!("    [image: {}]", image_description(image));
            self.line(&text)?;
        }
        Ok(())
    }

    /// The terminal's width (replies are wrapped to it; 0 for no wrapping)
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
        self.out
    }

    /// The writer, to write something the renderer does not know about.
    pub fn writer(&mut self) -> &mut W {
        &mut self.out
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

    /// The project instructions a conversation reads, one file a line
    /// (`agent show --context`).
    pub fn instructions(&mut self, i: &pb::Instructions) -> io::Result<()> {
        if i.files.is_empty() {
            self.line("no project instructions (AGENTS.md)")?;
        }
        for f in &i.files {
            self.line(&format!("{}  {}", shorten_home(&f.path), size(f.bytes)))?;
        }
        if i.truncated {
            let note = self.paint(YELLOW, "! truncated to [instructions] max_bytes");
            self.line(&note)?;
        }
        self.out.flush()
    }

    /// A red error line.
    pub fn error_line(&mut self, text: &str) -> io::Result<()> {
        let text = self.paint(RED, &format!("✗ {text}"));
        self.line(&text)
    }

    // -----------------------------------------------------------------------
    // Events

    /// Renders one event of an attach stream.
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
            Event::TextDelta(d) => self.text_delta(d.block_index, &d.text)?,
            Event::ThinkingDelta(d) => self.thinking_delta(d.block_index, &d.text)?,
            Event::ToolCallBegin(t) => {
                let summary = if t.summary.is_empty() {
                    tool_use_summary(&t.tool_name, &t.input_json)
                } else {
                    t.summary.clone()
                };
                self.tool_uses
                    .insert(t.tool_use_id.clone(), summary.clone());
                if matches!(t.tool_name.as_str(), "read" | "grep" | "glob") {
                    // One line with its result, when it ends.
                    self.begun.insert(t.tool_use_id.clone());
                    self.held.push((t.tool_use_id.clone(), summary));
                } else {
                    self.tool_begin(&t.tool_use_id, &summary)?;
                }
            }
            Event::ToolCallEnd(t) => self.tool_end(t)?,
            Event::ToolOutputDelta(d) => self.tool_output(d)?,
            Event::PermissionRequested(p) => {
                if let Some(request) = &p.request {
                    self.permission_request(request)?;
                }
            }
            Event::PermissionResolved(p) => self.permission_resolved(p)?,
            Event::UsageUpdated(_) | Event::Resumed(_) => {}
            Event::Error(e) => {
                let text = error_text(e.kind, &e.message);
                self.last_error = Some(e.message.clone());
                self.error_line(&text)?;
            }
            Event::ClientAttached(c) => {
                if let Some(client) = &c.client {
                    if self.is_own_name(client) {
                        // This client, back after a reconnect: the session
                        // has said "reconnected".
                        self.own_client_id.clone_from(&client.client_id);
                    } else if client.client_id != self.own_client_id {
                        self.info(&format!("· {} attached", client_label(client)))?;
                    }
                }
            }
            Event::ClientDetached(c) => {
                if let Some(client) = c
                    .client
                    .as_ref()
                    .filter(|c| c.client_id != self.own_client_id && !self.is_own_name(c))
                {
                    self.info(&format!("· {} detached", client_label(client)))?;
                }
            }
            Event::Retrying(r) => {
                let mut text = format!(
                    "retrying ({}/{}) in {}",
                    r.attempt,
                    r.max_attempts,
                    format_duration_ms(r.delay_ms)
                );
                if !r.reason.is_empty() {
                    text.push_str(": ");
                    text.push_str(&r.reason);
                }
                let text = self.paint(YELLOW, &text);
                self.line(&text)?;
            }
            Event::ShellStarted(s) => {
                if let Some(shell) = &s.shell {
                    self.info(&format!(
                        "· shell {} started: {}",
                        shell.id,
                        one_line(&shell.command, 80)
                    ))?;
                }
            }
            Event::ShellExited(s) => {
                if let Some(shell) = &s.shell {
                    self.info(&format!(
                        "· shell {} {}",
                        shell.id,
                        shell_status_text(shell)
                    ))?;
                }
            }
            Event::Notice(n) => self.notice(&n.message)?,
            Event::ContextWarning(w) => self.notice(&context_warning_text(w))?,
            Event::ContinuationStarted(c) => {
                let mut text = if c.manual {
                    "compacting: asking the model for a continuation summary".to_string()
                } else {
                    "the context is 90 % full: asking the model for a continuation summary"
                        .to_string()
                };
                if !c.rejected_tools.is_empty() {
                    text.push_str(&format!("; not executed: {}", c.rejected_tools.join(", ")));
                }
                self.notice(&text)?;
            }
            Event::ContextExhausted(e) => {
                self.end_line()?;
                self.notice("context exhausted; continuation summary:")?;
                self.line(&e.summary)?;
            }
            Event::BudgetStopped(b) => {
                if let Some(stop) = &b.stop {
                    self.end_line()?;
                    self.notice(&stop.text)?;
                    self.notice(&format!(
                        "raise it by {} with /budget raise (or `agent budget raise`), or stop the turn with /budget stop",
                        budget_amount(stop.usd, stop.raise_by)
                    ))?;
                }
            }
            Event::BudgetResolved(b) => {
                let who =
                    b.by.as_ref()
                        .map(|c| format!(" by {}", c.name))
                        .unwrap_or_default();
                let what = match &b.stop {
                    Some(stop) if b.raised => format!(
                        "budget {} raised by {}{who}",
                        stop.budget,
                        budget_amount(stop.usd, b.raised_by)
                    ),
                    Some(stop) => format!("turn stopped at budget {}{who}", stop.budget),
                    None => format!("budget answered{who}"),
                };
                self.notice(&what)?;
            }
            Event::PlanGenerated(_) => {
                // The approval request that follows shows the plan.
            }
            Event::PlanConfirmed(p) => {
                self.end_line()?;
                let how = if p.edited {
                    "approved as edited"
                } else {
                    "approved"
                };
                self.notice(&format!("plan {how}; mode {}", mode_name(p.mode)))?;
                if let Some(plan) = &p.plan {
                    self.plan_checklist(plan)?;
                }
            }
            Event::PlanRejected(p) => {
                self.end_line()?;
                let text = if p.feedback.trim().is_empty() {
                    "plan rejected".to_string()
                } else {
                    format!("plan rejected: {}", one_line(&p.feedback, 200))
                };
                self.notice(&text)?;
            }
            Event::PlanStepStarted(s)
            | Event::PlanStepCompleted(s)
            | Event::PlanStepFailed(s)
            | Event::PlanStepSkipped(s) => self.plan_step(s)?,
            Event::PlanSuggested(s) => {
                self.end_line()?;
                self.notice(&plan_suggested_text(s))?;
            }
            Event::SubAgentStarted(_)
            | Event::SubAgentStateChanged(_)
            | Event::SubAgentToolCallBegin(_)
            | Event::SubAgentToolCallEnd(_)
            | Event::SubAgentFinished(_) => {
                if let Some(text) = sub_agent_line(event) {
                    self.end_line()?;
                    let text = self.paint(DIM, &text);
                    self.line(&text)?;
                }
            }
            Event::CodeRewound(c) => {
                self.end_line()?;
                for line in code_rewound_lines(c) {
                    self.notice(&line)?;
                }
            }
            Event::ConversationForked(f) => {
                self.end_line()?;
                self.notice(&format!(
                    "forked as {} (its transcript ends before message {})",
                    f.forked_conversation_id, f.message_seq
                ))?;
            }

            Event::CorrectionAttempt(c) => {
                self.end_line()?;
                self.notice(&correction_attempt_text(c))?;
            }
            Event::CorrectionSuccess(c) => {
                self.end_line()?;
                self.notice(&correction_success_text(c))?;
            }
            Event::CorrectionFailed(c) => {
                self.end_line()?;
                self.notice(&correction_failed_text(c))?;
            }
            Event::ConversationContinued(c) => {
                let how = if c.automatic {
                    "continued automatically"
                } else {
                    "continued"
                };
                self.notice(&format!("{how} as {} (hop {})", c.conversation_id, c.hop))?;
            }
            Event::ReplyBegin(_) => {
                self.end_line()?;
                self.streamed_reply = false;
            }
            Event::InstructionsLoaded(i) => {
                self.end_line()?;
                let text = self.paint(DIM, &instructions_line(i));
                self.line(&text)?;
            }
            Event::QueueChanged(q) => {
                self.end_line()?;
                let text = self.paint(DIM, &queue_line(&q.queued));
                self.line(&text)?;
            }
            Event::SettingsChanged(s) => {
                self.end_line()?;
                let text = self.paint(DIM, &settings_line(s));
                self.line(&text)?;
            }
            Event::HookRan(h) => {
                self.end_line()?;
                let text = hook_line(h);
                let text = if h.error.is_empty() {
                    self.paint(DIM, &text)
                } else {
                    self.paint(YELLOW, &text)
                };
                self.line(&text)?;
            }
        }
        self.out.flush()
    }

    fn text_delta(&mut self, block: u32, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if self.stream != Stream::Text(block) {
            self.end_line()?;
            self.stream = Stream::Text(block);
        }
        // Markdown is shown a whole block at a time, always whole lines.
        let style = self.markdown;
        let shown = self
            .reply
            .get_or_insert_with(|| MarkdownStream::new(style))
            .push(text);
        write!(self.out, "{shown}")?;
        self.streamed_reply = true;
        Ok(())
    }

    fn thinking_delta(&mut self, block: u32, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if self.stream != Stream::Thinking(block) {
            self.end_line()?;
            let label = self.paint(DIM, "thinking: ");
            write!(self.out, "{label}")?;
            self.stream = Stream::Thinking(block);
        }
        let body = self.paint(DIM, text);
        write!(self.out, "{body}")?;
        self.line_open = !text.ends_with('\n');
        self.streamed_reply = true;
        Ok(())
    }

    fn tool_begin(&mut self, id: &str, summary: &str) -> io::Result<()> {
        let dot = self.paint(GREEN, "⏺");
        self.line(&format!("{dot} {summary}"))?;
        self.begun.insert(id.to_string());
        Ok(())
    }

    fn tool_end(&mut self, t: &pb::ToolCallEnd) -> io::Result<()> {
        if !self.begun.contains(&t.tool_use_id) {
            let summary = self
                .tool_uses
                .get(&t.tool_use_id)
                .cloned()
                .unwrap_or_else(|| t.tool_name.clone());
            self.tool_begin(&t.tool_use_id, &summary)?;
        }
        let outcome = if t.is_error {
            self.paint(RED, "error")
        } else {
            self.paint(GREEN, "ok")
        };
        let held = self
            .held
            .iter()
            .position(|(id, _)| *id == t.tool_use_id)
            .map(|i| self.held.remove(i).1);
        let lines = if held.is_some() {
            0
        } else {
            self.output_end(t)?
        };
        let mut text = match &held {
            Some(summary) => format!("{} {summary} ⎿ {outcome}", self.paint(GREEN, "⏺")),
            None => format!("  ⎿ {outcome}"),
        };
        if !t.summary.is_empty() {
            text.push(' ');
            text.push_str(&one_line(&t.summary, 120));
        }
        if t.duration_ms >= 1000 && !states_a_duration(&t.summary) {
            let took = self.paint(DIM, &format!(" ({})", format_duration_ms(t.duration_ms)));
            text.push_str(&took);
        }
        if lines > 2 * OUTPUT_LINES as u64 {
            let count = self.paint(DIM, &format!(" · {lines} lines"));
            text.push_str(&count);
        }
        if held.is_some() {
            // Other reads still running stay held: their lines come with
            // their results, in the order they end.
            self.end_text()?;
            writeln!(self.out, "{text}")?;
        } else {
            self.line(&text)?;
        }
        self.diff(&t.diff, "    ")?;
        self.ended.insert(t.tool_use_id.clone());
        Ok(())
    }

    /// Output a running call printed: its first [`OUTPUT_LINES`] lines are
    /// shown as they arrive, under the call; the rest are only counted
    /// (the end shows the last ones). The terminal is append-only, so a
    /// long build's output costs a few lines, not thousands.
    fn tool_output(&mut self, d: &pb::ToolOutputDelta) -> io::Result<()> {
        if self.ended.contains(&d.tool_use_id) {
            return Ok(());
        }
        if !self.begun.contains(&d.tool_use_id) {
            let summary = self
                .tool_uses
                .get(&d.tool_use_id)
                .cloned()
                .unwrap_or_else(|| format!("tool call {}", d.tool_use_id));
            self.tool_begin(&d.tool_use_id, &summary)?;
        }
        let mut view = self.live.remove(&d.tool_use_id).unwrap_or_default();
        if d.skipped_bytes > 0 {
            // Lines were left out mid-stream: what is open is not a line
            // start any more, and the live count is no longer exact; the
            // end shows the last lines.
            view.partial.clear();
            view.skipped = true;
        }
        view.partial.push_str(&d.text);
        while let Some(nl) = view.partial.find('\n') {
            let line: String = view.partial.drain(..=nl).collect();
            let line = line.trim_end_matches(['\n', '\r']);
            if view.shown < OUTPUT_LINES && !view.skipped {
                self.output_line(line)?;
                view.shown += 1;
            } else {
                view.hidden += 1;
            }
        }
        self.live.insert(d.tool_use_id.clone(), view);
        Ok(())
    }

    /// One line of a command's output, under its call.
    fn output_line(&mut self, line: &str) -> io::Result<()> {
        self.output_line_within(line, 200)
    }

    /// One line of output, cut at `max` characters.
    fn output_line_within(&mut self, line: &str, max: usize) -> io::Result<()> {
        let bar = self.paint(DIM, "  │");
        // A command's escape sequences must not move the cursor under the
        // editor or clear the screen.
        let line = truncate_chars(&crate::markdown::clean(line.trim_end(), "    "), max);
        if line.is_empty() {
            self.line(&bar)
        } else {
            self.line(&format!("{bar} {line}"))
        }
    }

    /// Shows what a call printed that was not shown yet: without live
    /// output its first and last lines from the end's preview; after live
    /// output how many lines were not shown and the last ones. Returns how
    /// many lines it printed in all.
    fn output_end(&mut self, t: &pb::ToolCallEnd) -> io::Result<u64> {
        let view = self.live.remove(&t.tool_use_id);
        let has_preview = t.output_lines > 0;
        let Some(mut view) = view else {
            if !has_preview {
                return Ok(0);
            }
            for line in &t.output_head {
                self.output_line(line)?;
            }
            let omitted = t
                .output_lines
                .saturating_sub((t.output_head.len() + t.output_tail.len()) as u64);
            if omitted > 0 {
                self.more_lines(omitted)?;
            }
            for line in &t.output_tail {
                self.output_line(line)?;
            }
            return Ok(t.output_lines);
        };
        if !view.partial.is_empty() {
            let line = std::mem::take(&mut view.partial);
            if view.shown < OUTPUT_LINES && !view.skipped {
                self.output_line(&line)?;
                view.shown += 1;
            } else {
                view.hidden += 1;
            }
        }
        if !has_preview {
            // Interrupted, or from a daemon without previews: what came live.
            if view.hidden > 0 {
                self.more_lines(view.hidden)?;
            }
            return Ok(view.shown as u64 + view.hidden);
        }
        let unshown = t.output_lines.saturating_sub(view.shown as u64);
        let omitted = (t.output_head.len() + t.output_tail.len()) as u64 != t.output_lines;
        // The lines the preview has of the output's end.
        let end: Vec<&String> = if omitted {
            t.output_tail.iter().collect()
        } else {
            t.output_head.iter().chain(&t.output_tail).collect()
        };
        let last = end
            .len()
            .min(OUTPUT_LINES)
            .min(usize::try_from(unshown).unwrap_or(usize::MAX));
        let between = unshown - last as u64;
        if between > 0 {
            self.more_lines(between)?;
        }
        for line in &end[end.len() - last..] {
            self.output_line(line)?;
        }
        Ok(t.output_lines)
    }

    fn more_lines(&mut self, n: u64) -> io::Result<()> {
        let what = if n == 1 { "line" } else { "lines" };
        let hint = self
            .expand_key
            .map(|key| format!(" ({key} shows the whole result)"))
            .unwrap_or_default();
        let text = self.paint(DIM, &format!("  │ … {n} more {what}{hint}"));
        self.line(&text)
    }

    fn diff(&mut self, diff: &str, indent: &str) -> io::Result<()> {
        for line in diff.lines() {
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                self.paint(BOLD, line)
            } else if line.starts_with('+') {
                self.paint(GREEN, line)
            } else if line.starts_with('-') {
                self.paint(RED, line)
            } else if line.starts_with("@@") {
                self.paint(CYAN, line)
            } else {
                line.to_string()
            };
            self.line(&format!("{indent}{painted}"))?;
        }
        Ok(())
    }

    fn state_changed(&mut self, state: &pb::ConversationState) -> io::Result<()> {
        match StateKind::try_from(state.kind).unwrap_or(StateKind::Unspecified) {
            StateKind::Error => {
                if self.last_error.as_deref() != Some(state.error_message.as_str()) {
                    self.last_error = Some(state.error_message.clone());
                    self.error_line(&error_text(state.error_kind, &state.error_message))?;
                }
            }
            StateKind::ContextExhausted => {
                self.error_line("context window exhausted: the conversation is read-only")?;
            }
            StateKind::Cancelling if self.cancel_said => {}
            StateKind::Cancelling => self.info("cancelling…")?,
            StateKind::StopHooks => {}
            StateKind::AwaitingContinuation => {
                self.info("context nearly full: summarizing to continue…")?;
            }
            StateKind::Idle => {
                self.end_line()?;
                self.last_error = None;
                self.cancel_said = false;
            }
            StateKind::Unspecified
            | StateKind::AwaitingLlm
            | StateKind::LlmRequesting
            | StateKind::ToolExecuting
            | StateKind::AwaitingPermission
            | StateKind::AwaitingSubAgents => {}
        }
        Ok(())
    }

    fn permission_resolved(&mut self, p: &pb::PermissionResolved) -> io::Result<()> {
        if self.shown_request.as_deref() == Some(p.request_id.as_str()) {
            self.shown_request = None;
        }
        let decision = PermissionDecision::try_from(p.decision).unwrap_or_default();
        let text = match Decision::from_proto(decision) {
            None if decision == PermissionDecision::Cancelled => {
                "  ⎿ permission request cancelled".to_string()
            }
            None => "  ⎿ permission request resolved".to_string(),
            Some(d) if p.client_id.is_empty() => format!("  ⎿ {}", d.label()),
            Some(d) if p.client_id == self.own_client_id => format!("  ⎿ {} (you)", d.label()),
            Some(d) => format!(
                "  ⎿ {} (answered by {})",
                d.label(),
                name_or_id(&p.client_name, &p.client_id)
            ),
        };
        let text = self.paint(DIM, &text);
        self.line(&text)
    }

    // -----------------------------------------------------------------------
    // Snapshots and transcripts

    /// Renders a snapshot: header (first time), the transcript messages not
    /// shown yet (the last [`SNAPSHOT_TAIL`] the first time), the partial
    /// reply, the pending permission request, and an error state.
    /// The stream now follows another conversation (a continuation): its
    /// transcript is new to this client, from its first message.
    pub fn follow_conversation(&mut self) {
        self.last_message_seq = 0;
    }

    pub fn snapshot(&mut self, s: &pb::Snapshot) -> io::Result<()> {
        self.own_client_id.clone_from(&s.your_client_id);
        if let Some(c) = &s.conversation {
            self.cwd.clone_from(&c.cwd);
        }
        let first = !self.header_shown;
        if first && self.show_header {
            if let Some(c) = &s.conversation {
                self.header(c)?;
            }
            let others: Vec<String> = s
                .clients
                .iter()
                .filter(|c| c.client_id != s.your_client_id && !self.is_own_name(c))
                .map(client_label)
                .collect();
            if !others.is_empty() {
                self.info(&format!("also attached: {}", others.join(", ")))?;
            }
        }
        self.header_shown = true;
        let new: Vec<&pb::Message> = s
            .messages
            .iter()
            .filter(|m| m.seq == 0 || m.seq > self.last_message_seq)
            .collect();
        let skip = if first && self.show_header {
            new.len().saturating_sub(SNAPSHOT_TAIL)
        } else {
            0
        };
        if skip > 0 {
            let id = s.conversation.as_ref().map_or("ID", |c| c.id.as_str());
            self.info(&format!("… {skip} earlier messages (agent show {id})"))?;
        }
        for m in new.into_iter().skip(skip) {
            self.message(m, false)?;
        }
        if let Some(partial) = &s.partial_reply {
            self.partial_reply(partial)?;
        }
        if let Some(request) = &s.pending_permission {
            self.permission_request(request)?;
        }
        if let Some(state) = s.conversation.as_ref().and_then(|c| c.state.as_ref()) {
            match StateKind::try_from(state.kind).unwrap_or(StateKind::Unspecified) {
                StateKind::Error | StateKind::ContextExhausted => self.state_changed(state)?,
                _ => {}
            }
        }
        self.out.flush()
    }

    fn header(&mut self, c: &pb::ConversationSummary) -> io::Result<()> {
        let state = c.state.as_ref().map_or("unknown".to_string(), state_text);
        let mut parts = vec![format!("conversation {}", c.id), state];
        if !c.model.is_empty() {
            parts.push(c.model.clone());
        }
        if !c.cwd.is_empty() {
            parts.push(shorten_home(&c.cwd));
        }
        let head = self.paint(BOLD, &parts.join(" · "));
        self.line(&head)?;
        if !c.additional_dirs.is_empty() {
            let dirs: Vec<String> = c.additional_dirs.iter().map(|d| shorten_home(d)).collect();
            let also = self.paint(DIM, &format!("also in {}", dirs.join(", ")));
            self.line(&also)?;
        }
        if !c.title.is_empty() {
            let title = self.paint(DIM, &one_line(&c.title, 100));
            self.line(&title)?;
        }
        if !c.parent_conversation_id.is_empty() {
            let from = self.paint(DIM, &format!("continues {}", c.parent_conversation_id));
            self.line(&from)?;
        }
        if !c.continued_as.is_empty() {
            let next = self.paint(DIM, &format!("continued as {}", c.continued_as));
            self.line(&next)?;
        }
        if c.context_warning {
            let warn = self.paint(YELLOW, &context_full_text(c));
            self.line(&warn)?;
        }
        Ok(())
    }

    fn partial_reply(&mut self, m: &pb::Message) -> io::Result<()> {
        for (index, block) in m.content.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            match &block.block {
                Some(Block::Text(t)) => self.text_delta(index, &t.text)?,
                Some(Block::Thinking(t)) => self.thinking_delta(index, &t.thinking)?,
                Some(Block::ToolUse(t)) => {
                    self.tool_uses
                        .insert(t.id.clone(), tool_use_summary(&t.name, &t.input_json));
                }
                Some(Block::ToolResult(_) | Block::Image(_)) | None => {}
            }
        }
        Ok(())
    }

    /// Renders one transcript message. `live`: it arrives as an event while
    /// the reply was (probably) streamed, so assistant text already shown is
    /// not repeated and tool calls are announced when they run.
    pub fn message(&mut self, m: &pb::Message, live: bool) -> io::Result<()> {
        self.last_message_seq = self.last_message_seq.max(m.seq);
        let role = Role::try_from(m.role).unwrap_or(Role::Unspecified);
        if role == Role::Assistant {
            let already_streamed = live && self.streamed_reply;
            self.streamed_reply = false;
            // Calls begun and held are not this message's business.
            self.end_text()?;
            for block in &m.content {
                match &block.block {
                    Some(Block::Text(t)) if !already_streamed => {
                        let text = markdown::render(&t.text, self.markdown);
                        write!(self.out, "{text}")?;
                    }
                    Some(Block::Thinking(t)) if !already_streamed => {
                        let text =
                            self.paint(DIM, &format!("thinking: {}", one_line(&t.thinking, 100)));
                        self.line(&text)?;
                    }
                    Some(Block::ToolUse(t)) => {
                        let summary = tool_use_summary(&t.name, &t.input_json);
                        self.tool_uses.insert(t.id.clone(), summary.clone());
                        if !live && !self.begun.contains(&t.id) {
                            self.tool_begin(&t.id, &summary)?;
                        }
                    }
                    Some(
                        Block::Text(_)
                        | Block::Thinking(_)
                        | Block::ToolResult(_)
                        | Block::Image(_),
                    )
                    | None => {}
                }
            }
            if m.interrupted {
                self.info("[interrupted]")?;
            }
            match m.stop_reason.as_str() {
                "max_tokens" => self.info("[reply cut at the output token limit]")?,
                "refusal" => self.info("[the model refused]")?,
                _ => {}
            }
            return Ok(());
        }
        for block in &m.content {
            match &block.block {
                Some(Block::Text(t)) => {
                    let text = t.text.trim();
                    if self.sent_texts.front().is_some_and(|s| s == text) {
                        self.sent_texts.pop_front();
                        continue;
                    }
                    self.user_text(text)?;
                }
                Some(Block::ToolResult(r)) => self.tool_result(r)?,
                Some(Block::Image(i)) => {
                    self.end_line()?;
                    let line = self.paint(DIM, &format!("  [image: {}]", image_description(i)));
                    writeln!(self.out, "{line}")?;
                }
                Some(Block::Thinking(_) | Block::ToolUse(_)) | None => {}
            }
        }
        Ok(())
    }

    fn user_text(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        // The daemon's markers in the transcript are not something the
        // person typed: shown dim, in the daemon's words.
        if matches!(text, INTERRUPT_USER | INTERRUPT_TOOL) {
            let marker = self.paint(DIM, &format!("  {text}"));
            return writeln!(self.out, "{marker}");
        }
        for (i, line) in text.lines().enumerate() {
            let prefix = if i == 0 { "> " } else { "  " };
            let line = self.paint(BOLD, &format!("{prefix}{line}"));
            writeln!(self.out, "{line}")?;
        }
        Ok(())
    }

    fn tool_result(&mut self, r: &pb::ToolResultBlock) -> io::Result<()> {
        let summary = self
            .tool_uses
            .get(&r.tool_use_id)
            .cloned()
            .unwrap_or_else(|| format!("tool call {}", r.tool_use_id));
        self.last_result = Some((summary.clone(), r.clone()));
        if self.ended.contains(&r.tool_use_id) {
            return Ok(());
        }
        if !self.begun.contains(&r.tool_use_id) {
            self.tool_begin(&r.tool_use_id, &summary)?;
        }
        if self.full_output {
            if !r.is_error {
                let text = self.paint(GREEN, "  ⎿ ok");
                self.line(&text)?;
            }
            self.whole_output(r)?;
            self.ended.insert(r.tool_use_id.clone());
            return Ok(());
        }
        let text = if r.is_error {
            format!(
                "  ⎿ {} {}",
                self.paint(RED, "error:"),
                abbreviate(&r.content)
            )
        } else {
            format!("  ⎿ {}", abbreviate(&r.content))
        };
        self.line(&text)?;
        self.result_images(r)?;
        self.ended.insert(r.tool_use_id.clone());
        Ok(())
    }

    /// Renders a whole conversation, as `agent show` prints it.
    pub fn transcript(&mut self, r: &pb::GetConversationResponse) -> io::Result<()> {
        if let Some(c) = &r.conversation {
            self.header(c)?;
        }
        for m in &r.messages {
            // A blank line before each turn's words, none before tool results.
            let has_text = m
                .content
                .iter()
                .any(|b| matches!(b.block, Some(Block::Text(_))));
            if has_text {
                writeln!(self.out)?;
            }
            self.message(m, false)?;
        }
        if let Some(state) = r.conversation.as_ref().and_then(|c| c.state.as_ref()) {
            match StateKind::try_from(state.kind).unwrap_or(StateKind::Unspecified) {
                StateKind::Error | StateKind::ContextExhausted => {
                    writeln!(self.out)?;
                    self.state_changed(state)?;
                }
                _ => {}
            }
        }
        if let Some(plan) = r.plan.as_ref().filter(|p| p.phase != "proposed") {
            writeln!(self.out)?;
            let line = self.paint(BOLD, &format!("plan ({}): {}", plan.phase, plan.intent));
            self.line(&line)?;
            self.plan_checklist(plan)?;
        }
        if let Some(request) = &r.pending_permission {
            writeln!(self.out)?;
            self.permission_request(request)?;
        }
        if let Some(c) = &r.conversation
            && let Some(u) = &c.usage
            && (u.input_tokens > 0 || u.output_tokens > 0)
        {
            writeln!(self.out)?;
            let line = format!(
                "{} tokens: {} in, {} cache write, {} cache read, {} out · cost {}",
                tokens_text(Some(u)),
                u.input_tokens,
                u.cache_creation_input_tokens,
                u.cache_read_input_tokens,
                u.output_tokens,
                cost_text(c.cost_usd)
            );
            let line = self.paint(DIM, &line);
            self.line(&line)?;
        }
        self.out.flush()
    }

    // -----------------------------------------------------------------------
    // Permission requests

    /// Renders a permission request block: tool, summary, reason, diff and
    /// the keys of the options it offers. A request already shown (same id)
    /// is not shown again.
    pub fn permission_request(&mut self, r: &pb::PermissionRequest) -> io::Result<()> {
        if self.shown_request.as_deref() == Some(r.request_id.as_str()) {
            return Ok(());
        }
        self.shown_request = Some(r.request_id.clone());
        self.end_line()?;
        if let Some(plan) = &r.plan {
            return self.plan_request(plan);
        }
        if self.auto_allow {
            let what = if r.summary.is_empty() {
                r.tool_name.clone()
            } else {
                one_line(&r.summary, 200)
            };
            let line = self.paint(YELLOW, &format!("✓ allowed once (--yes): {what}"));
            return self.line(&line);
        }
        let title = self.paint(YELLOW, &format!("⚠ permission needed: {}", r.tool_name));
        self.line(&title)?;
        if !r.sub_agent_id.is_empty() {
            let who = self.paint(
                BOLD,
                &format!(
                    "  asked by sub-agent {} ({}): {}",
                    r.sub_agent_id,
                    r.sub_agent_conversation_id,
                    one_line(&r.sub_agent_description, 120)
                ),
            );
            self.line(&who)?;
        }
        if !r.summary.is_empty() {
            for line in r.summary.lines() {
                let line = self.paint(BOLD, line);
                self.line(&format!("  {line}"))?;
            }
        } else if !r.input_json.is_empty() {
            self.line(&format!("  {}", one_line(&r.input_json, 200)))?;
        }
        // What the model says the call is for, and where a command runs.
        let input: Option<serde_json::Value> = serde_json::from_str(&r.input_json).ok();
        if let Some(description) = input
            .as_ref()
            .and_then(|i| i.get("description"))
            .and_then(|d| d.as_str())
            .filter(|d| !d.trim().is_empty())
        {
            let line = self.paint(DIM, &format!("  {}", one_line(description, 200)));
            self.line(&line)?;
        }
        if r.tool_name == "bash" && !self.cwd.is_empty() {
            let line = self.paint(DIM, &format!("  in {}", shorten_home(&self.cwd)));
            self.line(&line)?;
        }
        let (why, outside) = split_reason(&r.reason);
        for path in outside {
            let line = self.paint(RED, &format!("{OUTSIDE_WORKING_DIRECTORY}{path}"));
            self.line(&format!("  {}", self.paint(BOLD, &line)))?;
        }
        if !why.is_empty() {
            self.line(&format!("  why: {why}"))?;
        }
        self.diff(&r.diff, "  ")?;
        let offered = offered_decisions(&r.options);
        if !r.suggested_rule.is_empty() && offered.contains(&Decision::AllowAlways) {
            let rule = self.paint(
                DIM,
                &format!("  \"allow always\" adds the rule {}", r.suggested_rule),
            );
            self.line(&rule)?;
        }
        if !self.show_keys {
            return Ok(());
        }
        for line in self.keys(&offered) {
            self.line(&line)?;
        }
        Ok(())
    }

    /// The keys line(s), indented, wrapped between options (never inside
    /// one) at the screen's width.
    fn keys(&self, offered: &[Decision]) -> Vec<String> {
        let width = match self.markdown.width {
            0 => usize::MAX,
            w => w,
        };
        let options = offered.iter().map(|d| {
            let label = match d {
                Decision::DenyAndStop => format!("{} (then type feedback)", d.label()),
                _ => d.label().to_string(),
            };
            let columns = 4 + label.chars().count();
            let key = self.paint(BOLD, &format!("[{}]", d.key()));
            (format!("{key} {label}"), columns)
        });
        wrap_options(options, width)
    }
}

impl<W: Write> Renderer<W> {
    /// A plan approval request: the seed's box (intent, risk, duration,
    /// files, steps) and the keys that answer it.
    pub fn plan_request(&mut self, plan: &pb::Plan) -> io::Result<()> {
        let rule = "━".repeat(60);
        let title = self.paint(YELLOW, "📋 Task Plan Generated");
        self.line(&title)?;
        self.line(&rule)?;
        for line in plan_box(plan).lines() {
            self.line(line)?;
        }
        if !self.show_keys {
            return Ok(());
        }
        let options = PLAN_KEYS.iter().map(|(key, label)| {
            let columns = 4 + label.chars().count();
            (
                format!("{} {label}", self.paint(BOLD, &format!("[{key}]"))),
                columns,
            )
        });
        let width = match self.markdown.width {
            0 => usize::MAX,
            w => w,
        };
        for line in wrap_options(options, width) {
            self.line(&line)?;
        }
        Ok(())
    }

    /// The steps of a plan, one line each, with their statuses.
    pub fn plan_checklist(&mut self, plan: &pb::Plan) -> io::Result<()> {
        for step in &plan.steps {
            let line = checklist_line(step);
            let line = match step.status.as_str() {
                "completed" => self.paint(GREEN, &line),
                "failed" => self.paint(RED, &line),
                "skipped" => self.paint(DIM, &line),
                _ => line,
            };
            self.line(&format!("  {line}"))?;
        }
        Ok(())
    }

    /// One step's change, as its checklist line and the plan's progress.
    fn plan_step(&mut self, s: &pb::PlanStepChanged) -> io::Result<()> {
        self.end_line()?;
        let Some(plan) = &s.plan else {
            return Ok(());
        };
        let Some(step) = plan.steps.iter().find(|st| st.id == s.step_id) else {
            return Ok(());
        };
        let done = plan
            .steps
            .iter()
            .filter(|st| matches!(st.status.as_str(), "completed" | "failed" | "skipped"))
            .count();
        let line = format!("{} ({done}/{})", checklist_line(step), plan.steps.len());
        let line = match step.status.as_str() {
            "completed" => self.paint(GREEN, &line),
            "failed" => self.paint(RED, &line),
            "skipped" => self.paint(DIM, &line),
            _ => self.paint(BOLD, &line),
        };
        self.line(&format!("  {line}"))
    }
}

/// The keys that answer a plan approval request, and what they do.
pub const PLAN_KEYS: [(char, &str); 4] = [
    ('y', "approve"),
    ('a', "approve, accept edits"),
    ('n', "reject (then type feedback)"),
    ('e', "edit the steps"),
];

/// The seed's plan box, without its rules and question.
pub fn plan_box(plan: &pb::Plan) -> String {
    let mut files: Vec<&str> = Vec::new();
    for f in plan.steps.iter().flat_map(|s| s.files.iter()) {
        if !files.contains(&f.as_str()) {
            files.push(f);
        }
    }
    let total: u64 = plan.steps.iter().map(|s| s.estimate_secs).sum();
    let duration = match (plan.estimate_secs, total) {
        (0, 0) => "unknown".to_string(),
        (0, t) => format!("{t}s"),
        (e, _) => format!("{e}s"),
    };
    let mut out = format!(
        "Intent: {}\nRisk Level: {} | Estimated Duration: {duration} | Files Affected: {}\n",
        plan.intent,
        plan.risk.to_uppercase(),
        files.len()
    );
    if !files.is_empty() {
        out.push_str(&format!("Files: {}\n", files.join(", ")));
    }
    out.push_str("\nSteps:\n");
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!(
            "  {}. [{}] {}",
            i + 1,
            s.kind.to_uppercase(),
            s.title
        ));
        if s.estimate_secs > 0 {
            out.push_str(&format!(" ({}s)", s.estimate_secs));
        }
        if !s.dependencies.is_empty() {
            out.push_str(&format!(" (after {})", s.dependencies.join(", ")));
        }
        out.push('\n');
    }
    out
}

/// `[x] 2. title — note`.
pub fn checklist_line(step: &pb::PlanStep) -> String {
    let mark = match step.status.as_str() {
        "in_progress" => "[>]",
        "completed" => "[x]",
        "failed" => "[!]",
        "skipped" => "[-]",
        _ => "[ ]",
    };
    let mut line = format!("{mark} {}. {}", step.id, step.title);
    if !step.note.is_empty() {
        line.push_str(&format!(" — {}", one_line(&step.note, 120)));
    }
    line
}

/// What a client says when the daemon finds a request deserves a plan.
/// What a rewind (or a plan step's rollback) did to the files, in lines.
pub fn code_rewound_lines(c: &pb::CodeRewound) -> Vec<String> {
    let what = if c.plan_step_id.is_empty() {
        format!("code rewound to before message {}", c.message_seq)
    } else {
        format!(
            "plan step {} failed: its changes rolled back",
            c.plan_step_id
        )
    };
    let mut lines = vec![format!(
        "{what}: {} restored, {} removed",
        c.restored.len(),
        c.removed.len()
    )];
    lines.extend(c.restored.iter().map(|p| format!("  restored {p}")));
    lines.extend(c.removed.iter().map(|p| format!("  removed  {p}")));
    lines.extend(
        c.skipped
            .iter()
            .map(|p| format!("  kept     {p} (changed by someone else since)")),
    );
    if c.untracked_commands > 0 {
        lines.push(format!(
            "  not undone: {} bash command(s) ran outside a git work tree, where their changes are not tracked",
            c.untracked_commands
        ));
    }
    lines
}

/// The turns that can be rewound, one line each (`agent show --checkpoints`).
pub fn checkpoint_lines(turns: &[pb::CheckpointTurn]) -> Vec<String> {
    if turns.is_empty() {
        return vec!["no checkpoints: the agent changed no file (or they were pruned)".to_string()];
    }
    let mut lines = Vec::new();
    for t in turns {
        let mut line = format!(
            "message {:>4}  {} call(s), {} file(s)",
            t.message_seq,
            t.tool_calls,
            t.files.len()
        );
        if t.untracked_commands > 0 {
            line.push_str(&format!(
                ", {} untracked bash command(s)",
                t.untracked_commands
            ));
        }
        lines.push(line);
        lines.extend(t.files.iter().map(|f| format!("    {f}")));
    }
    lines
}

pub fn plan_suggested_text(s: &pb::PlanSuggested) -> String {
    format!(
        "this looks like a multi-step task ({}); to review a plan before any change, /mode plan and send it again",
        s.cues.join("; ")
    )
}

/// One line for a self-correction attempt.
pub fn correction_attempt_text(c: &pb::CorrectionAttempt) -> String {
    format!(
        "self-correction {}/{}: {} failed ({}); asking the model to {}",
        c.attempt,
        c.max_attempts,
        c.tool,
        one_line(&c.error, 100),
        one_line(&lower_first(&c.fallback_request), 160)
    )
}

/// One line for a self-correction that worked.
pub fn correction_success_text(c: &pb::CorrectionSuccess) -> String {
    let attempts = if c.attempts == 1 {
        "1 attempt".to_string()
    } else {
        format!("{} attempts", c.attempts)
    };
    format!("self-correction succeeded with {} after {attempts}", c.tool)
}

/// One line for self-corrections that ran out (the error line that
/// follows it says the daemon's whole message).
pub fn correction_failed_text(c: &pb::CorrectionFailed) -> String {
    format!(
        "self-correction gave up: {} failed again after {} attempts; the turn ended",
        c.tool, c.attempts
    )
}

fn lower_first(s: &str) -> String {
    let mut chars = s.trim().chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The steps as the text a user edits: `id. [kind] title (after a, b)
/// {file, file}` per line (the daemon's format).
pub fn plan_steps_text(plan: &pb::Plan) -> String {
    let mut out = String::new();
    for s in &plan.steps {
        out.push_str(&format!("{}. [{}] {}", s.id, s.kind, s.title));
        if !s.dependencies.is_empty() {
            out.push_str(&format!(" (after {})", s.dependencies.join(", ")));
        }
        if !s.files.is_empty() {
            out.push_str(&format!(" {{{}}}", s.files.join(", ")));
        }
        out.push('\n');
    }
    out
}

/// Reads the text a user edited back into steps: one a line, `id. [kind]
/// title`, then optionally `(after id, id)` and `{file, file}`; blank lines
/// and `#` comments are skipped. The daemon checks the result as a plan.
pub fn parse_plan_steps(text: &str) -> Result<Vec<pb::PlanStep>, String> {
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut steps = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line}", n + 1);
        let (id, rest) = line
            .split_once(". ")
            .ok_or_else(|| bad("expected `id. [kind] title`"))?;
        let rest = rest
            .trim_start()
            .strip_prefix('[')
            .ok_or_else(|| bad("expected `[kind]` after the id"))?;
        let (kind, title) = rest
            .split_once(']')
            .ok_or_else(|| bad("`[kind]` is not closed"))?;
        let mut title = title.trim();
        let mut files = Vec::new();
        let mut dependencies = Vec::new();
        if let Some(open) = title.rfind('{')
            && title.ends_with('}')
        {
            files = list(&title[open + 1..title.len() - 1]);
            title = title[..open].trim_end();
        }
        if let Some(open) = title.rfind("(after ")
            && title.ends_with(')')
        {
            dependencies = list(&title[open + "(after ".len()..title.len() - 1]);
            title = title[..open].trim_end();
        }
        steps.push(pb::PlanStep {
            id: id.trim().to_string(),
            title: title.to_string(),
            kind: kind.trim().to_lowercase(),
            files,
            dependencies,
            ..Default::default()
        });
    }
    if steps.is_empty() {
        return Err("the edited plan has no steps".to_string());
    }
    Ok(steps)
}

/// Lays out answer options (each as shown, and the columns it takes) on
/// lines indented by two, two spaces apart, a new line before an option
/// that would pass `width`: options are never split.
pub fn wrap_options(
    options: impl IntoIterator<Item = (String, usize)>,
    width: usize,
) -> Vec<String> {
    let mut lines = Vec::new();
    let (mut line, mut used) = (String::from("  "), 2);
    for (shown, columns) in options {
        if used > 2 && used + 2 + columns > width {
            lines.push(std::mem::replace(&mut line, String::from("  ")));
            used = 2;
        } else if used > 2 {
            line.push_str("  ");
            used += 2;
        }
        line.push_str(&shown);
        used += columns;
    }
    lines.push(line);
    lines
}

/// Whether a tool's summary already ends with how long it took
/// ("exit code 0 in 2.8 s"), so the time is not printed twice.
fn states_a_duration(summary: &str) -> bool {
    let mut words = summary.split_whitespace().rev();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some("s" | "ms"), Some(number), Some("in")) if number.parse::<f64>().is_ok()
    )
}

/// The markers the daemon appends as user text when a turn is interrupted
/// (the core's `texts::INTERRUPT_USER` and `INTERRUPT_TOOL`).
const INTERRUPT_USER: &str = "[Request interrupted by user]";
const INTERRUPT_TOOL: &str = "[Request interrupted by user for tool use]";

/// How the daemon says, in a permission request's reason, that a file
/// written is outside the working directory (the path follows, up to the
/// next `; `): the core's `permission::OUTSIDE_WORKING_DIRECTORY`.
const OUTSIDE_WORKING_DIRECTORY: &str = "outside the working directory: ";

/// A request's reason without its "outside the working directory: PATH"
/// clauses, and those paths: the prompt shows each on a line of its own,
/// where it cannot be missed.
fn split_reason(reason: &str) -> (String, Vec<&str>) {
    let mut why: Vec<&str> = Vec::new();
    let mut outside: Vec<&str> = Vec::new();
    for clause in reason.split("; ") {
        match clause.strip_prefix(OUTSIDE_WORKING_DIRECTORY) {
            Some(path) if !path.is_empty() => {
                if !outside.contains(&path) {
                    outside.push(path);
                }
            }
            // "bash `ls` needs permission" says nothing the title does not.
            _ if clause.ends_with(" needs permission") || clause.ends_with(" need permission") => {}
            _ => why.push(clause),
        }
    }
    (why.join("; "), outside)
}

// ---------------------------------------------------------------------------
// Tables

/// The `agent ls` table. `full_ids` prints whole ids instead of 10 characters.
pub fn conversation_table(
    out: &mut impl Write,
    conversations: &[pb::ConversationSummary],
    now_ms: i64,
    full_ids: bool,
) -> io::Result<()> {
    let flat: Vec<(usize, &pb::ConversationSummary)> =
        conversations.iter().map(|c| (0, c)).collect();
    conversation_rows(out, &flat, now_ms, full_ids)
}

/// `agent ls`: like [`conversation_table`], with each sub-agent under its
/// parent (indented, marked `└`), in the order they were started, when the
/// parent is in the list.
pub fn conversation_tree(
    out: &mut impl Write,
    conversations: &[pb::ConversationSummary],
    now_ms: i64,
    full_ids: bool,
) -> io::Result<()> {
    let listed = |id: &str| conversations.iter().any(|c| c.id == id);
    let mut rows = Vec::with_capacity(conversations.len());
    fn place<'a>(
        rows: &mut Vec<(usize, &'a pb::ConversationSummary)>,
        all: &'a [pb::ConversationSummary],
        c: &'a pb::ConversationSummary,
        depth: usize,
    ) {
        rows.push((depth, c));
        // Ids are ULIDs: ascending is the order they were started.
        let mut children: Vec<&pb::ConversationSummary> = all
            .iter()
            .filter(|k| k.sub_agent_parent_id == c.id)
            .collect();
        children.sort_by(|a, b| a.id.cmp(&b.id));
        for child in children {
            place(rows, all, child, depth + 1);
        }
    }
    for c in conversations {
        if c.sub_agent_parent_id.is_empty() || !listed(&c.sub_agent_parent_id) {
            place(&mut rows, conversations, c, 0);
        }
    }
    conversation_rows(out, &rows, now_ms, full_ids)
}

/// The shortest prefix length, at least `min`, at which `ids` are told
/// apart: ULIDs made in the same millisecond (sub-agents of one call) share
/// their first 10 characters, and a listed prefix must name one
/// conversation.
fn unique_prefix_len<'a>(ids: impl Iterator<Item = &'a str>, min: usize) -> usize {
    let mut ids: Vec<&str> = ids.collect();
    ids.sort_unstable();
    ids.dedup();
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    ids.windows(2)
        .map(|w| common(w[0], w[1]) + 1)
        .fold(min, usize::max)
}

fn conversation_rows(
    out: &mut impl Write,
    conversations: &[(usize, &pb::ConversationSummary)],
    now_ms: i64,
    full_ids: bool,
) -> io::Result<()> {
    if conversations.is_empty() {
        return writeln!(out, "no conversations");
    }
    let width = if full_ids {
        usize::MAX
    } else {
        unique_prefix_len(conversations.iter().map(|(_, c)| c.id.as_str()), 10)
    };
    let rows: Vec<[String; 7]> = conversations
        .iter()
        .map(|&(depth, c)| {
            let id: String = c.id.chars().take(width).collect();
            let title = if c.agent_id.is_empty() {
                c.title.clone()
            } else {
                format!("[sub-agent] {}", c.title)
            };
            [
                if depth == 0 {
                    id
                } else {
                    format!("{}└ {id}", "  ".repeat(depth - 1))
                },
                ls_state(c),
                format_age(now_ms.saturating_sub(c.created_at_ms)),
                tokens_text(c.usage.as_ref()),
                cost_text(c.cost_usd),
                shorten_home(&c.cwd),
                one_line(&title, 60),
            ]
        })
        .collect();
    table(
        out,
        ["ID", "STATE", "AGE", "TOKENS", "COST", "CWD", "TITLE"],
        &rows,
    )
}

/// The 80 % warning, for people.
fn context_warning_text(w: &pb::ContextWarning) -> String {
    let percent = (w.used_tokens as f64 * 100.0 / w.context_window.max(1) as f64).floor();
    format!(
        "the context is {percent} % full ({} of {} tokens); at 90 % the agent summarises \
         and stops (`agent compact` does it now)",
        w.used_tokens, w.context_window
    )
}

/// How full a conversation's context is, for its header.
fn context_full_text(c: &pb::ConversationSummary) -> String {
    let percent = (c.context_tokens as f64 * 100.0 / c.context_window.max(1) as f64).floor();
    format!(
        "context {percent} % full ({} of {} tokens)",
        c.context_tokens, c.context_window
    )
}

/// The STATE column of `agent ls`: the state, marked when the context is
/// nearly full (`ctx 85%`) and with the chain of continuations.
fn ls_state(c: &pb::ConversationSummary) -> String {
    let mut text = c.state.as_ref().map_or("unknown".to_string(), state_text);
    if c.context_warning {
        let percent = c.context_tokens.saturating_mul(100) / c.context_window.max(1);
        text.push_str(&format!(" !ctx {percent}%"));
    }
    if !c.continued_as.is_empty() {
        let next: String = c.continued_as.chars().take(10).collect();
        text.push_str(&format!(" → {next}"));
    }
    if !c.parent_conversation_id.is_empty() {
        let parent: String = c.parent_conversation_id.chars().take(10).collect();
        text.push_str(&format!(" ← {parent}"));
    }
    text
}

/// Every token of some usage, short: "812", "12.3k", "4.5M".
pub fn tokens_text(u: Option<&pb::Usage>) -> String {
    let n = u.map_or(0, |u| {
        u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
    });
    match n {
        0..1000 => n.to_string(),
        1000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// A cost in USD, or "-" when the model's price is unknown.
pub fn cost_text(usd: Option<f64>) -> String {
    match usd {
        None => "-".to_string(),
        Some(c) if c < 0.005 && c > 0.0 => "<$0.01".to_string(),
        Some(c) => format!("${c:.2}"),
    }
}

/// The `agent usage` table.
pub fn usage_table(out: &mut impl Write, r: &pb::GetUsageResponse) -> io::Result<()> {
    for b in &r.budgets {
        let raised = if b.raised > 0 {
            format!(" (raised by {})", budget_amount(b.usd, b.raised))
        } else {
            String::new()
        };
        writeln!(
            out,
            "budget {}: {} of {} spent{raised}",
            b.budget,
            budget_amount(b.usd, b.spent),
            budget_amount(b.usd, b.limit)
        )?;
    }
    if r.lines.is_empty() {
        return writeln!(out, "no usage recorded");
    }
    let row = |l: &pb::UsageLine| {
        let u = l.usage.unwrap_or_default();
        [
            l.label.clone(),
            l.model.clone(),
            u.input_tokens.to_string(),
            u.cache_creation_input_tokens.to_string(),
            u.cache_read_input_tokens.to_string(),
            u.output_tokens.to_string(),
            cost_text(l.cost_usd),
        ]
    };
    let mut rows: Vec<[String; 7]> = r.lines.iter().map(row).collect();
    if let Some(total) = &r.total {
        rows.push(row(total));
    }
    table(
        out,
        [
            "",
            "MODEL",
            "INPUT",
            "CACHE WRITE",
            "CACHE READ",
            "OUTPUT",
            "COST",
        ],
        &rows,
    )
}

/// The `agent shells` table. Listed for conversation `of` (an id or a
/// prefix of it), a shell of another conversation is one of its
/// sub-agents': its conversation is marked so.
pub fn shell_table(
    out: &mut impl Write,
    shells: &[pb::ShellInfo],
    of: Option<&str>,
    now_ms: i64,
) -> io::Result<()> {
    if shells.is_empty() {
        return writeln!(out, "no background shells");
    }
    let rows: Vec<[String; 5]> = shells
        .iter()
        .map(|s| {
            let mut conversation: String = s.conversation_id.chars().take(10).collect();
            if of.is_some_and(|of| !s.conversation_id.starts_with(of)) {
                conversation.push_str(" (sub-agent)");
            }
            [
                s.id.clone(),
                conversation,
                shell_status_text(s),
                format_age(now_ms.saturating_sub(s.started_at_ms)),
                one_line(&s.command, 70),
            ]
        })
        .collect();
    table(
        out,
        ["ID", "CONVERSATION", "STATE", "AGE", "COMMAND"],
        &rows,
    )
}

fn table<const N: usize>(
    out: &mut impl Write,
    head: [&str; N],
    rows: &[[String; N]],
) -> io::Result<()> {
    let mut widths = head.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let print = |out: &mut dyn Write, cells: Vec<&str>| -> io::Result<()> {
        let mut line = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        writeln!(out, "{}", line.trim_end())
    };
    print(out, head.to_vec())?;
    for row in rows {
        print(out, row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Small formatting helpers

/// The one line an event about a sub-agent shows on its parent's stream
/// ("⑂ agent_1_x (fix tests) → cargo test"), or None for another event.
pub fn sub_agent_line(event: &Event) -> Option<String> {
    let who = |r: Option<&pb::SubAgentRef>| match r {
        Some(r) if !r.description.is_empty() => {
            format!("⑂ {} ({})", r.agent_id, one_line(&r.description, 60))
        }
        Some(r) => format!("⑂ {}", r.agent_id),
        None => "⑂ sub-agent".to_string(),
    };
    Some(match event {
        Event::SubAgentStarted(e) => {
            let id = e
                .sub_agent
                .as_ref()
                .map_or("", |r| r.conversation_id.as_str());
            format!("{} started as {id}", who(e.sub_agent.as_ref()))
        }
        Event::SubAgentStateChanged(e) => {
            let state = e.state.as_ref()?;
            format!("{}: {}", who(e.sub_agent.as_ref()), state_text(state))
        }
        Event::SubAgentToolCallBegin(t) => {
            let what = if t.summary.is_empty() {
                t.tool_name.clone()
            } else {
                t.summary.clone()
            };
            format!("{} → {}", who(t.sub_agent.as_ref()), one_line(&what, 120))
        }
        Event::SubAgentToolCallEnd(t) => {
            let mark = if t.is_error { "✗" } else { "✓" };
            let mut text = format!("{} {mark} {}", who(t.sub_agent.as_ref()), t.tool_name);
            if !t.summary.is_empty() {
                text.push_str(": ");
                text.push_str(&one_line(&t.summary, 100));
            }
            text.push_str(&format!(" ({})", format_duration_ms(t.duration_ms)));
            text
        }
        Event::SubAgentFinished(f) => {
            let outcome = if f.success { "succeeded" } else { "failed" };
            let mut text = format!("{} {outcome}", who(f.sub_agent.as_ref()));
            if !f.summary.is_empty() {
                text.push_str(": ");
                text.push_str(&one_line(&f.summary, 120));
            }
            text.push_str(&format!(
                " [{} tokens, {}]",
                tokens_text(f.usage.as_ref()),
                cost_text(f.cost_usd)
            ));
            text
        }
        _ => return None,
    })
}

/// A state for people: "idle", "waiting for permission", "retrying (2/3)", …
pub fn state_text(s: &pb::ConversationState) -> String {
    match StateKind::try_from(s.kind).unwrap_or(StateKind::Unspecified) {
        StateKind::Unspecified => "unknown".into(),
        StateKind::Idle => "idle".into(),
        StateKind::AwaitingLlm => "starting".into(),
        StateKind::LlmRequesting if s.attempt > 1 => {
            format!("retrying ({}/{})", s.attempt, s.max_attempts)
        }
        StateKind::LlmRequesting => "thinking".into(),
        StateKind::ToolExecuting => "running tools".into(),
        StateKind::AwaitingPermission => "waiting for permission".into(),
        StateKind::Cancelling => "cancelling".into(),
        StateKind::AwaitingSubAgents => "waiting for sub-agents".into(),
        StateKind::AwaitingContinuation => "summarizing".into(),
        StateKind::StopHooks => "running stop hooks".into(),
        StateKind::ContextExhausted => "context exhausted".into(),
        StateKind::Error => {
            let kind = error_kind_text(s.error_kind);
            if kind.is_empty() {
                "error".into()
            } else {
                format!("error ({kind})")
            }
        }
    }
}

/// The lowercase name of an error kind ("auth", "rate limit", …), empty for none.
pub fn error_kind_text(kind: i32) -> &'static str {
    match ErrorKind::try_from(kind).unwrap_or(ErrorKind::Unknown) {
        ErrorKind::Unspecified => "",
        ErrorKind::Auth => "auth",
        ErrorKind::RateLimit => "rate limit",
        ErrorKind::Network => "network",
        ErrorKind::InvalidRequest => "invalid request",
        ErrorKind::Unknown => "unknown",
        ErrorKind::ContextExhausted => "context exhausted",
        ErrorKind::Budget => "budget",
    }
}

/// An amount of a budget: micro-dollars as dollars, or tokens.
pub fn budget_amount(usd: bool, amount: u64) -> String {
    if !usd {
        return format!("{amount} tokens");
    }
    let dollars = amount as f64 / 1e6;
    if amount >= 1_000_000 || amount == 0 {
        format!("${dollars:.2}")
    } else {
        format!("${dollars:.4}")
    }
}

fn error_text(kind: i32, message: &str) -> String {
    match error_kind_text(kind) {
        "" => format!("error: {message}"),
        kind => format!("error ({kind}): {message}"),
    }
}

fn shell_status_text(s: &pb::ShellInfo) -> String {
    match ShellStatus::try_from(s.status).unwrap_or(ShellStatus::Unspecified) {
        ShellStatus::Unspecified => "unknown".into(),
        ShellStatus::Running => "running".into(),
        ShellStatus::Exited => format!("exited ({})", s.exit_code),
        ShellStatus::Killed => "killed".into(),
        ShellStatus::Lost => "lost".into(),
    }
}

fn client_label(c: &pb::ClientInfo) -> String {
    name_or_id(&c.name, &c.client_id).to_string()
}

fn name_or_id<'a>(name: &'a str, id: &'a str) -> &'a str {
    if name.is_empty() { id } else { name }
}

/// A one-line summary of a tool call from its name and JSON input:
/// `bash: cargo test`, `edit: src/main.rs`.
pub fn tool_use_summary(name: &str, input_json: &str) -> String {
    const KEYS: [&str; 9] = [
        "command",
        "file_path",
        "path",
        "pattern",
        "query",
        "shell_id",
        "reason",
        "thought",
        "url",
    ];
    let value: serde_json::Value =
        serde_json::from_str(input_json).unwrap_or(serde_json::Value::Null);
    if let Some(obj) = value.as_object() {
        for key in KEYS {
            if let Some(s) = obj.get(key).and_then(|v| v.as_str()) {
                return format!("{name}: {}", one_line(s, 100));
            }
        }
        if obj.is_empty() {
            return name.to_string();
        }
        return format!("{name}: {}", one_line(&value.to_string(), 100));
    }
    if input_json.trim().is_empty() {
        name.to_string()
    } else {
        format!("{name}: {}", one_line(input_json, 100))
    }
}

/// The first non-empty line of `s`, cut to `max` characters (with `…`).
pub fn one_line(s: &str, max: usize) -> String {
    let first = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    truncate_chars(first, max)
}

fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A tool result in one line: its first line, and how many more there are.
pub fn abbreviate(content: &str) -> String {
    let lines = content.lines().filter(|l| !l.trim().is_empty()).count();
    let first = one_line(content, 100);
    match lines {
        0 => "(no output)".to_string(),
        1 => first,
        n => format!("{first} … (+{} lines)", n - 1),
    }
}

/// `850ms`, `1.2s`, `42s`, `3m05s`.
pub fn format_duration_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// `12s`, `5m`, `3h`, `4d`.
pub fn format_age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 48 * 3600 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// `/home/me/proj` → `~/proj`.
pub fn shorten_home(path: &str) -> String {
    match std::env::var("HOME") {
        Ok(home) if !home.is_empty() && home != "/" => match path.strip_prefix(&home) {
            Some("") => "~".to_string(),
            Some(rest) if rest.starts_with('/') => format!("~{rest}"),
            _ => path.to_string(),
        },
        _ => path.to_string(),
    }
}

/// "instructions: ~/repo/AGENTS.md (1.2 KB), …" for an instructions event.
fn instructions_line(i: &pb::Instructions) -> String {
    if i.files.is_empty() {
        return "instructions: none (no AGENTS.md)".to_string();
    }
    let files: Vec<String> = i
        .files
        .iter()
        .map(|f| format!("{} ({})", shorten_home(&f.path), size(f.bytes)))
        .collect();
    let cut = if i.truncated { " — truncated" } else { "" };
    format!("instructions: {}{cut}", files.join(", "))
}

/// A file size for people: "812 B", "1.2 KB", "3.4 MB".
fn size(bytes: u64) -> String {
    match bytes {
        0..1000 => format!("{bytes} B"),
        1000..1_000_000 => format!("{:.1} KB", bytes as f64 / 1000.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_000_000.0),
    }
}

#[cfg(test)]
mod tests;

/// One line for a hook that ran: `· hook pre_tool_use ./check.sh: deny (12 ms)`,
/// with the error when it failed.
/// What is queued, in one line: `queued (2): q3 "run the tests" · q4 "…"`.
pub fn queue_line(queued: &[pb::QueuedMessage]) -> String {
    if queued.is_empty() {
        return "queue: empty".to_string();
    }
    let items: Vec<String> = queued
        .iter()
        .map(|q| format!("{} \"{}\"", q.id, one_line(q.text.trim(), 40)))
        .collect();
    format!(
        "queued ({}), read by the agent at its next step: {}",
        queued.len(),
        items.join(" · ")
    )
}

/// A permission mode's name as people type it (`accept_edits`).
pub fn mode_name(mode: i32) -> String {
    pb::PermissionMode::try_from(mode)
        .ok()
        .filter(|m| *m != pb::PermissionMode::Unspecified)
        .map(|m| {
            m.as_str_name()
                .trim_start_matches("PERMISSION_MODE_")
                .to_lowercase()
        })
        .unwrap_or_default()
}

/// A change of mode or model: what they are now, and who changed them.
pub fn settings_line(s: &pb::SettingsChanged) -> String {
    let mut text = format!(
        "· mode {} · model {} ({} tokens of context)",
        mode_name(s.mode),
        one_line(&s.model, 60),
        s.context_window
    );
    if !s.additional_dirs.is_empty() {
        let dirs: Vec<String> = s.additional_dirs.iter().map(|d| shorten_home(d)).collect();
        text.push_str(" · also in ");
        text.push_str(&one_line(&dirs.join(", "), 200));
    }
    if !s.by.is_empty() {
        text.push_str(" — set by ");
        text.push_str(&one_line(&s.by, 40));
    }
    text
}

pub fn hook_line(h: &pb::HookRan) -> String {
    let mut text = format!(
        "· hook {} {}: {} ({})",
        h.stage,
        one_line(&h.command, 60),
        h.decision,
        format_duration_ms(h.duration_ms)
    );
    if !h.error.is_empty() {
        text.push_str(" — ");
        text.push_str(&one_line(&h.error, 200));
    }
    text
}

/// One line for an image: `png 1024×768, 120 KB` (dimensions when the
/// daemon knew them).
pub fn image_description(i: &pb::ImageBlock) -> String {
    let kind = i.media_type.strip_prefix("image/").unwrap_or(&i.media_type);
    let size = human_bytes(i.size);
    if i.width > 0 && i.height > 0 {
        format!("{kind} {}×{}, {size}", i.width, i.height)
    } else {
        format!("{kind}, {size}")
    }
}

/// `512 B`, `120 KB`, `3.4 MB` (powers of 1024).
pub fn human_bytes(bytes: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * 1024;
    if bytes < KB {
        format!("{bytes} B")
    } else if bytes < MB {
        format!("{} KB", bytes.div_ceil(KB))
    } else {
        format!("{:.1} MB", bytes as f64 / MB as f64)
    }
}
