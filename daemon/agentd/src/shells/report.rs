//! Telling the model that a shell ended: which ends are still to be told
//! (`ShellRecord::report_pending`, set when the end is recorded, cleared
//! once the conversation has taken the note), and the last lines of output
//! the note carries.

use super::{ShellManager, ShellRecord, ShellStatus, lock};

/// Lines of output a note carries at most.
const NOTE_LINES: usize = 10;
/// Bytes of output a note carries at most.
const NOTE_BYTES: usize = 2_000;

impl ShellManager {
    /// Kills a shell the model asked to stop (`kill_shell`): its result
    /// says so, so the end is not told again.
    pub(crate) async fn kill_quietly(&self, id: &str) -> Result<ShellRecord, super::ShellError> {
        if let Ok(shell) = self.shell(id) {
            lock(&shell.state).quiet = true;
        }
        self.kill(id).await
    }

    /// The shells whose end is still to be told to their conversation.
    pub(crate) fn unreported(&self) -> Vec<ShellRecord> {
        let mut records = self.list(None);
        records.retain(|r| r.report_pending && r.status.is_ended());
        records.reverse();
        records
    }

    /// The conversation took the note of the shell's end: stored so, it is
    /// not told again after a restart.
    pub(crate) fn mark_reported(&self, id: &str) {
        let Ok(shell) = self.shell(id) else {
            return;
        };
        let record = {
            let mut st = lock(&shell.state);
            if !st.record.report_pending {
                return;
            }
            st.record.report_pending = false;
            st.record.clone()
        };
        (self.persist)(&record);
    }

    /// The last lines of the shell's output (at most [`NOTE_LINES`] and
    /// about [`NOTE_BYTES`]), for the note of its end.
    pub(crate) async fn last_lines(&self, id: &str) -> String {
        let Some(record) = self.get(id) else {
            return String::new();
        };
        let start = record.output_bytes.saturating_sub(NOTE_BYTES as u64);
        match self.read(id, start, NOTE_BYTES).await {
            Ok((bytes, _)) => last_lines_of(&bytes, start > 0),
            Err(e) => format!("[cannot read its output: {e}]"),
        }
    }
}

/// How a shell ended, in the words of the note.
pub(crate) fn status_words(status: &ShellStatus) -> String {
    match status {
        ShellStatus::Running => "still running".to_string(),
        ShellStatus::Exited { code } if *code > 128 => {
            let signal = nix::sys::signal::Signal::try_from(code - 128)
                .map(|s| format!(", {s}"))
                .unwrap_or_default();
            format!("exit code {code}{signal}")
        }
        ShellStatus::Exited { code } => format!("exit code {code}"),
        ShellStatus::Killed => "killed".to_string(),
        ShellStatus::Lost => "lost: agentd restarted while it ran".to_string(),
    }
}

/// The last [`NOTE_LINES`] lines of `bytes`; when `cut` (the bytes start
/// in the middle of the output) the first, partial line is left out.
fn last_lines_of(bytes: &[u8], cut: bool) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    if cut && lines.len() > 1 {
        lines.remove(0);
    }
    let from = lines.len().saturating_sub(NOTE_LINES);
    lines[from..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_keeps_the_last_whole_lines() {
        let many: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            last_lines_of(many.as_bytes(), false),
            (21..=30)
                .map(|i| format!("line {i}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert_eq!(last_lines_of(b"ne 1\nline 2\n", true), "line 2");
        assert_eq!(last_lines_of(b"only\n", true), "only");
        assert_eq!(last_lines_of(b"", false), "");
    }

    #[test]
    fn statuses_read_as_words() {
        assert_eq!(
            status_words(&ShellStatus::Exited { code: 0 }),
            "exit code 0"
        );
        assert_eq!(
            status_words(&ShellStatus::Exited { code: 137 }),
            "exit code 137, SIGKILL"
        );
        assert_eq!(status_words(&ShellStatus::Killed), "killed");
    }
}
