//! Whole conversations: the snapshot an attach starts with (only what was
//! not shown yet), the header, and what `agent show` prints (the
//! transcript, its instructions, its checkpoints).

use std::io::{self, Write};

use agent_proto::v1::{self as pb, StateKind, content_block::Block};

use super::format::{client_label, size};
use super::{
    BOLD, DIM, Renderer, YELLOW, cost_text, one_line, shorten_home, state_text, tokens_text,
};

/// How many messages a snapshot shows before "… N earlier messages".
pub const SNAPSHOT_TAIL: usize = 20;

impl<W: Write> Renderer<W> {
    /// The stream now follows another conversation (a continuation): its
    /// transcript is new to this client, from its first message.
    pub fn follow_conversation(&mut self) {
        self.last_message_seq = 0;
    }

    /// Renders a snapshot: header (first time), the transcript messages not
    /// shown yet (the last [`SNAPSHOT_TAIL`] the first time), the partial
    /// reply, the pending permission request, and an error state.
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
        if let Some(list) = s.plan.as_ref().filter(|p| p.phase == "todo") {
            self.todo_snapshot(list)?;
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

    /// Renders a whole conversation, as `agent show` prints it: each user
    /// message numbered, so that `agent rewind --to` can name it.
    pub fn transcript(&mut self, r: &pb::GetConversationResponse) -> io::Result<()> {
        if let Some(c) = &r.conversation {
            self.header(c)?;
            let env = self.paint(DIM, &environment_line(r.environment.as_ref(), &c.id));
            self.line(&env)?;
        }
        self.numbered = true;
        // The transcript view shows reasoning whole.
        self.thinking.expanded = true;
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
        if let Some(list) = r.plan.as_ref().filter(|p| p.phase == "todo") {
            writeln!(self.out)?;
            self.todo_updated(list)?;
            self.todo_final()?;
        } else if let Some(plan) = r.plan.as_ref().filter(|p| p.phase != "proposed") {
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
            // After a model switch, what each model used, at its own price.
            if c.usage_by_model.len() > 1 {
                for m in &c.usage_by_model {
                    let line = format!(
                        "  {}: {} tokens · cost {}",
                        m.model,
                        tokens_text(m.usage.as_ref()),
                        cost_text(m.cost_usd)
                    );
                    let line = self.paint(DIM, &line);
                    self.line(&line)?;
                }
            }
        }
        self.out.flush()
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
}

/// How full a conversation's context is, for its header.
fn context_full_text(c: &pb::ConversationSummary) -> String {
    let percent = (c.context_tokens as f64 * 100.0 / c.context_window.max(1) as f64).floor();
    format!(
        "context {percent} % full ({} of {} tokens)",
        c.context_tokens, c.context_window
    )
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

/// Where a conversation's commands get their environment, for `agent show`.
fn environment_line(origin: Option<&pb::EnvironmentOrigin>, id: &str) -> String {
    let Some(o) = origin else {
        return "environment: the daemon's".to_string();
    };
    let mut line = format!(
        "environment: from the terminal that created it or last sent it, {} UTC, {} variables",
        crate::access::when(o.set_at_ms),
        o.variables
    );
    if o.missing > 0 {
        line.push_str(&format!(
            " ({} held for the daemon's life only and lost in a restart: \
             `agent set {id} --env-from-here` sends them again)",
            o.held
        ));
    } else if o.held > 0 {
        line.push_str(&format!(" ({} held for this daemon only)", o.held));
    }
    line
}
