//! A background shell of this conversation ended: its attached clients
//! see it, and the model is told through the core (`Event::ShellEnded`),
//! which decides whether the note waits for the next model request or
//! starts a turn. Once the core has taken it (or refused it as taken
//! before) the shell's record says so, so a restart tells it once.

use agentd_core::{Event, Rejected, ShellNote};

use super::Actor;
use crate::runtime::RuntimeError;
use crate::shells::ShellRecord;

/// Characters of the command a note repeats.
const NOTE_COMMAND_CHARS: usize = 200;

impl Actor {
    pub(super) async fn shell_ended(&mut self, record: ShellRecord) {
        if !record.report_pending {
            return;
        }
        let shells = self.shared.shells.clone();
        let note = ShellNote {
            shell_id: record.id.clone(),
            command: crate::tools::one_line(&record.command, NOTE_COMMAND_CHARS),
            status: crate::shells::status_words(&record.status),
            tail: shells.last_lines(&record.id).await,
        };
        match self.apply(Event::ShellEnded { note }).await {
            Ok(()) | Err(RuntimeError::Rejected(Rejected::NotApplicable { .. })) => {
                shells.mark_reported(&record.id);
            }
            // Still pending: told after the next restart.
            Err(e) => tracing::warn!(
                conversation = %self.record.id,
                "the end of shell {} was not taken: {e}",
                record.id
            ),
        }
    }
}
