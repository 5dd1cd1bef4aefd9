//! The one-line notices of a conversation's life: clients and shells coming
//! and going, the context filling up, budgets, self-corrections, rewinds,
//! forks, continuations, sub-agents, instructions, the queue, settings and
//! hooks; and the daemon's generic notices, whatever their kind. The texts
//! are pure functions over their proto types.

use std::io::{self, Write};

use agent_proto::v1::{self as pb, attach_response::Event};

use super::format::{client_label, lower_first, size};
use super::tables::shell_status_text;
use super::{
    DIM, Renderer, YELLOW, cost_text, format_duration_ms, mode_name, one_line, shorten_home,
    state_text, tokens_text,
};

impl<W: Write> Renderer<W> {
    /// Another client joined. This one, back under a new id after a
    /// reconnect, is recognised by its name and not announced.
    pub(super) fn client_attached(&mut self, c: &pb::ClientAttached) -> io::Result<()> {
        if let Some(client) = &c.client {
            if self.is_own_name(client) {
                // This client, back after a reconnect: the session
                // has said "reconnected".
                self.own_client_id.clone_from(&client.client_id);
            } else if client.client_id != self.own_client_id {
                self.info(&format!("· {} attached", client_label(client)))?;
            }
        }
        Ok(())
    }

    /// Another client left.
    pub(super) fn client_detached(&mut self, c: &pb::ClientDetached) -> io::Result<()> {
        if let Some(client) = c
            .client
            .as_ref()
            .filter(|c| c.client_id != self.own_client_id && !self.is_own_name(c))
        {
            self.info(&format!("· {} detached", client_label(client)))?;
        }
        Ok(())
    }

    /// A background shell started.
    pub(super) fn shell_started(&mut self, s: &pb::ShellStarted) -> io::Result<()> {
        if let Some(shell) = &s.shell {
            self.info(&format!(
                "· shell {} started: {}",
                shell.id,
                one_line(&shell.command, 80)
            ))?;
        }
        Ok(())
    }

    /// A background shell ended.
    pub(super) fn shell_exited(&mut self, s: &pb::ShellExited) -> io::Result<()> {
        if let Some(shell) = &s.shell {
            self.info(&format!(
                "· shell {} {}",
                shell.id,
                shell_status_text(shell)
            ))?;
        }
        Ok(())
    }

    /// The daemon's generic notice: its sentence, as its severity says
    /// (an error in red, the others, and those of an older daemon, as a
    /// notice). Any kind, known to this client or not.
    pub(super) fn generic_notice(&mut self, n: &pb::Notice) -> io::Result<()> {
        match pb::NoticeSeverity::try_from(n.severity) {
            Ok(pb::NoticeSeverity::Error) => self.error_line(&n.message),
            _ => self.notice(&n.message),
        }
    }

    /// The context is exhausted: the continuation summary, whole.
    pub(super) fn context_exhausted(&mut self, e: &pb::ContextExhausted) -> io::Result<()> {
        self.end_line()?;
        self.notice("context exhausted; continuation summary:")?;
        self.line(&e.summary)
    }

    /// A budget was reached: what, and how to go on.
    pub(super) fn budget_stopped(&mut self, b: &pb::BudgetStopped) -> io::Result<()> {
        if let Some(stop) = &b.stop {
            self.end_line()?;
            self.notice(&stop.text)?;
            self.notice(&format!(
                "raise it by {} with /budget raise (or `agent budget raise`), or stop the turn with /budget stop",
                budget_amount(stop.usd, stop.raise_by)
            ))?;
        }
        Ok(())
    }

    /// What a rewind did to the files, a notice a line.
    pub(super) fn code_rewound(&mut self, c: &pb::CodeRewound) -> io::Result<()> {
        self.end_line()?;
        for line in code_rewound_lines(c) {
            self.notice(&line)?;
        }
        Ok(())
    }

    /// A hook that ran: dim, or yellow when it failed.
    pub(super) fn hook_ran(&mut self, h: &pb::HookRan) -> io::Result<()> {
        self.end_line()?;
        let text = hook_line(h);
        let text = if h.error.is_empty() {
            self.paint(DIM, &text)
        } else {
            self.paint(YELLOW, &text)
        };
        self.line(&text)
    }
}

/// A continuation summary was asked for: by hand or at 90 %, and the calls
/// not executed for it.
pub(super) fn continuation_started_text(c: &pb::ContinuationStarted) -> String {
    let mut text = if c.manual {
        "compacting: asking the model for a continuation summary".to_string()
    } else {
        "the context is 90 % full: asking the model for a continuation summary".to_string()
    };
    if !c.rejected_tools.is_empty() {
        text.push_str(&format!("; not executed: {}", c.rejected_tools.join(", ")));
    }
    text
}

/// How a reached budget was answered, and by whom.
pub(super) fn budget_resolved_text(b: &pb::BudgetResolved) -> String {
    let who =
        b.by.as_ref()
            .map(|c| format!(" by {}", c.name))
            .unwrap_or_default();
    match &b.stop {
        Some(stop) if b.raised => format!(
            "budget {} raised by {}{who}",
            stop.budget,
            budget_amount(stop.usd, b.raised_by)
        ),
        Some(stop) => format!("turn stopped at budget {}{who}", stop.budget),
        None => format!("budget answered{who}"),
    }
}

/// A rewind forked the conversation.
pub(super) fn forked_text(f: &pb::ConversationForked) -> String {
    format!(
        "forked as {} (its transcript ends before message {})",
        f.forked_conversation_id, f.message_seq
    )
}

/// The conversation goes on in another one.
pub(super) fn continued_text(c: &pb::ConversationContinued) -> String {
    let how = if c.automatic {
        "continued automatically"
    } else {
        "continued"
    };
    format!("{how} as {} (hop {})", c.conversation_id, c.hop)
}

/// The 80 % warning, for people.
pub(super) fn context_warning_text(w: &pb::ContextWarning) -> String {
    let percent = (w.used_tokens as f64 * 100.0 / w.context_window.max(1) as f64).floor();
    format!(
        "the context is {percent} % full ({} of {} tokens); at 90 % the agent summarises \
         and stops (`agent compact` does it now)",
        w.used_tokens, w.context_window
    )
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

/// "instructions: ~/repo/AGENTS.md (1.2 KB), …" for an instructions event.
pub(super) fn instructions_line(i: &pb::Instructions) -> String {
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

/// One line for a hook that ran: `· hook pre_tool_use ./check.sh: deny (12 ms)`,
/// with the error when it failed.
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
