//! What the person does: lines typed on stdin (answers, messages, image
//! paths, `# ` notes, the terminal's own keys), the end of stdin, and
//! Ctrl-C; and what leaving means for the exit status.

use std::time::Duration;

use agent_proto::v1::{self as pb, StateKind, attach_request::Frame};
use tokio::time::Instant;

use super::{Outcome, Session, SessionKind};
use crate::error::{CliError, Exit};
use crate::repl::term::{BACKGROUND, EXPAND_OUTPUT, NEXT_MODE, UiLink};

/// How long `attach` waits, after stdin ends, for its last messages to be
/// acknowledged.
const DETACH_GRACE: Duration = Duration::from_secs(5);

impl Session<'_> {
    pub(super) async fn on_line(
        &mut self,
        line: Option<String>,
    ) -> Result<Option<Outcome>, CliError> {
        let Some(line) = line else {
            return self.input_ended();
        };
        self.render.input_consumed();
        if self.terminal_key(&line).await? {
            return Ok(None);
        }
        if self.prompt.is_some() {
            self.answer_line(&line).await?;
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

    /// stdin ended: `attach` leaves once its messages are confirmed (or
    /// at the grace period's end); `run` leaves a question to others.
    fn input_ended(&mut self) -> Result<Option<Outcome>, CliError> {
        self.input_closed = true;
        if self.config.kind != SessionKind::Run {
            if self.outbox.is_empty() {
                return Ok(Some(Outcome::Detached));
            }
            self.detach_deadline = Some(Instant::now() + DETACH_GRACE);
        } else if self.prompt.take().is_some() {
            self.note("stdin closed: waiting for another client to answer")?;
        }
        Ok(None)
    }

    /// Keys of the terminal's own (never typed text): whether `line` was one.
    async fn terminal_key(&mut self, line: &str) -> Result<bool, CliError> {
        match line {
            EXPAND_OUTPUT => {
                self.render
                    .expand_last()
                    .map_err(|e| CliError::io("writing output", e))?;
                Ok(true)
            }
            NEXT_MODE => {
                let status = self.ui.as_ref().map(UiLink::snapshot).unwrap_or_default();
                let next = crate::cli::Mode::after(&status.mode);
                self.update_settings(Some(next), None, Vec::new()).await?;
                Ok(true)
            }
            BACKGROUND => {
                // The one command running; the daemon says if there is none.
                self.note("moving the command to the background…")?;
                let frame = pb::CommandFrame {
                    tool_use_id: String::new(),
                };
                self.send_frame(Frame::Background(frame)).await;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Sends a message (queued while the agent works), unless it is empty.
    pub(super) async fn send_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let message = self.outbox.send(text);
        self.render.note_sent(text);
        self.send_frame(Frame::Send(message)).await;
    }

    pub(super) async fn on_interrupt(&mut self) -> Result<Option<Outcome>, CliError> {
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
    pub(super) fn detached(&self) -> Result<Exit, CliError> {
        let (sent, not_sent, unconfirmed) = self.outbox.counts();
        if not_sent == 0 && unconfirmed == 0 {
            return Ok(Exit::Ok);
        }
        let mut what = Vec::new();
        if not_sent > 0 {
            what.push(format!("{} of {} refused", messages(not_sent), sent));
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
    pub(super) fn attach_image(&mut self, path: &std::path::Path) -> Result<(), CliError> {
        match crate::commands::read_images(&[path.to_path_buf()]) {
            Ok(images) => {
                let size = images.iter().map(|i| i.data.len() as u64).sum();
                let n = self.outbox.attach(images);
                self.note(&format!(
                    "[image attached: {}, {}; {n} for your next message]",
                    path.display(),
                    crate::render::human_bytes(size)
                ))
            }
            Err(e) => self.note(&e.to_string()),
        }
    }
}

/// "1 message", "2 messages".
fn messages(n: usize) -> String {
    if n == 1 {
        "1 message".to_string()
    } else {
        format!("{n} messages")
    }
}

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
