//! Replies and user messages: streamed reply text (markdown, block by
//! block) and thinking, a snapshot's partial reply, and transcript messages
//! (shown once, whether they were streamed first or not).

use std::io::{self, Write};

use agent_proto::v1::{self as pb, Role, content_block::Block};

use super::{BOLD, DIM, Renderer, Stream, image_description, markdown, one_line, tool_use_summary};
use crate::markdown::MarkdownStream;

/// The markers the daemon appends as user text when a turn is interrupted
/// (the core's `texts::INTERRUPT_USER` and `INTERRUPT_TOOL`).
const INTERRUPT_USER: &str = "[Request interrupted by user]";
const INTERRUPT_TOOL: &str = "[Request interrupted by user for tool use]";

impl<W: Write> Renderer<W> {
    /// The model started a new reply: its deltas are shown as they come.
    pub(super) fn reply_begin(&mut self) -> io::Result<()> {
        self.end_line()?;
        self.streamed_reply = false;
        Ok(())
    }

    pub(super) fn text_delta(&mut self, block: u32, text: &str) -> io::Result<()> {
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

    /// Reasoning as it streams: collapsed to one line (see
    /// `render::thinking`), or whole and dimmed when expanded.
    pub(super) fn thinking_delta(&mut self, block: u32, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.streamed_reply = true;
        let now = std::time::Instant::now();
        if self.stream != Stream::Thinking(block) {
            self.end_line()?;
            self.stream = Stream::Thinking(block);
            let label = match self.thinking.expanded {
                true => "thinking: ",
                false => self.thinking.begin(now),
            };
            let label = self.paint(DIM, label);
            write!(self.out, "{label}")?;
            self.line_open = true;
        } else if !self.thinking.expanded
            && let Some(line) = self.thinking.more(now)
        {
            let line = self.paint(DIM, &line);
            write!(self.out, "\r\x1b[2K{line}")?;
        }
        if self.thinking.expanded {
            let body = self.paint(DIM, text);
            write!(self.out, "{body}")?;
            self.line_open = !text.ends_with('\n');
        }
        Ok(())
    }

    pub(super) fn partial_reply(&mut self, m: &pb::Message) -> io::Result<()> {
        for (index, block) in m.content.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            match &block.block {
                Some(Block::Text(t)) => self.text_delta(index, &t.text)?,
                Some(Block::Thinking(t)) => self.thinking_delta(index, &t.thinking)?,
                Some(Block::ToolUse(t)) => {
                    self.tool_uses
                        .insert(t.id.clone(), tool_use_summary(&t.name, &t.input_json));
                }
                Some(Block::ToolResult(_) | Block::Image(_) | Block::ServerTool(_)) | None => {}
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
                        let shown = match self.thinking.expanded {
                            true => format!("thinking: {}", t.thinking.trim_end()),
                            false => format!("✻ thinking: {}", one_line(&t.thinking, 100)),
                        };
                        let text = self.paint(DIM, &shown);
                        self.line(&text)?;
                    }
                    Some(Block::ToolUse(t)) => {
                        let summary = tool_use_summary(&t.name, &t.input_json);
                        self.tool_uses.insert(t.id.clone(), summary.clone());
                        if live && t.name == super::todo::UPDATE_PLAN {
                            self.todo.quiet.insert(t.id.clone());
                        }
                        if !live && !self.begun.contains(&t.id) {
                            self.tool_begin(&t.id, &summary)?;
                        }
                    }
                    // A search the provider ran: one line, never streamed.
                    Some(Block::ServerTool(s)) if !s.summary.is_empty() => {
                        let text = self.paint(DIM, &format!("  {}", s.summary));
                        self.line(&text)?;
                    }
                    Some(
                        Block::Text(_)
                        | Block::Thinking(_)
                        | Block::ToolResult(_)
                        | Block::ServerTool(_)
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
        // The number goes on the message's first line of text.
        let mut number = (self.numbered && m.seq > 0).then_some(m.seq);
        for block in &m.content {
            match &block.block {
                Some(Block::Text(t)) => {
                    let text = t.text.trim();
                    if self.sent_texts.front().is_some_and(|s| s == text) {
                        self.sent_texts.pop_front();
                        continue;
                    }
                    self.user_text(text, number.take())?;
                }
                Some(Block::ToolResult(r)) => self.tool_result(r)?,
                Some(Block::Image(i)) => {
                    self.end_line()?;
                    let line = self.paint(DIM, &format!("  [image: {}]", image_description(i)));
                    writeln!(self.out, "{line}")?;
                }
                Some(Block::Thinking(_) | Block::ToolUse(_) | Block::ServerTool(_)) | None => {}
            }
        }
        Ok(())
    }

    /// A user message's text; its first line after `number` (`#3 > …`)
    /// when given.
    fn user_text(&mut self, text: &str, number: Option<u64>) -> io::Result<()> {
        self.end_line()?;
        // The daemon's markers in the transcript are not something the
        // person typed: shown dim, in the daemon's words.
        if matches!(text, INTERRUPT_USER | INTERRUPT_TOOL) {
            let marker = self.paint(DIM, &format!("  {text}"));
            return writeln!(self.out, "{marker}");
        }
        for (i, line) in text.lines().enumerate() {
            if let Some(n) = number.filter(|_| i == 0) {
                let label = self.paint(DIM, &format!("#{n} "));
                write!(self.out, "{label}")?;
            }
            let prefix = if i == 0 { "> " } else { "  " };
            let line = self.paint(BOLD, &format!("{prefix}{line}"));
            writeln!(self.out, "{line}")?;
        }
        Ok(())
    }
}
