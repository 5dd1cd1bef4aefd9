//! Where the conversation is: its state changes, errors and retries as
//! lines, and the names of states, error kinds and permission modes that
//! the status line, `agent ls` and the headers share.

use std::io::{self, Write};

use agent_proto::v1::{self as pb, ErrorKind, StateKind};

use super::{Renderer, YELLOW, format_duration_ms};

impl<W: Write> Renderer<W> {
    pub(super) fn state_changed(&mut self, state: &pb::ConversationState) -> io::Result<()> {
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
                self.todo_final()?;
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

    /// An error event: its line, remembered so that the error state that
    /// follows does not repeat it.
    pub(super) fn error_event(&mut self, e: &pb::ErrorEvent) -> io::Result<()> {
        let text = error_text(e.kind, &e.message);
        self.last_error = Some(e.message.clone());
        self.error_line(&text)
    }

    /// A model request failed and will be tried again.
    pub(super) fn retrying(&mut self, r: &pb::Retrying) -> io::Result<()> {
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
        self.line(&text)
    }
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

pub(super) fn error_text(kind: i32, message: &str) -> String {
    match error_kind_text(kind) {
        "" => format!("error: {message}"),
        kind => format!("error ({kind}): {message}"),
    }
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
