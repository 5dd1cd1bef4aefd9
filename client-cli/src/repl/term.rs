//! The terminal of the interactive session. One thread owns it: it runs
//! the line editor (reedline) with the status line above the input, prints
//! what the session renders above both (reedline's external printer), and
//! reads single keys while a permission request waits. The async session
//! talks to it through channels and a [`UiLink`].
//!
//! The editor is re-entered every spinner frame while the agent works (a
//! break signal returns from `read_line` with the buffer kept), so the
//! status line ticks without a second writer on the terminal.

mod keys;
mod prompt;

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use crossterm::terminal;
use reedline::{
    ColumnarMenu, Emacs, ExternalPrinter, FileBackedHistory, MenuBuilder, Reedline, ReedlineMenu,
    Signal,
};
use tokio::sync::mpsc;

use super::complete::Complete;
use super::status::{FRAME_MS, Status};
use crate::cli::Decision;
pub use keys::key_lines;
use keys::{
    AnswerMode, answer_keybindings, editing_keybindings, lock_keys, question_left, question_right,
};
pub use prompt::accepted_text;
use prompt::{ContinuationValidator, UiPrompt};

/// Lines kept in the per-directory history.
const HISTORY_LINES: usize = 1_000;
/// How long a first Ctrl-C at an empty prompt waits for the second.
const LEAVE_WINDOW: Duration = Duration::from_secs(2);
/// How often the editor looks at the printer and the status.
const POLL: Duration = Duration::from_millis(50);
/// Output lines the printer holds before a writer waits.
const PRINTER_LINES: usize = 10_000;

/// The name of the Tab completion menu.
const COMPLETION_MENU: &str = "completion_menu";

/// What the terminal sends the session, as a line, for Ctrl-O: show the
/// last tool result whole. (A control character: nobody types it.)
pub const EXPAND_OUTPUT: &str = "\u{f}";
/// What it sends for Shift-Tab: the next permission mode.
pub const NEXT_MODE: &str = "\u{1b}[Z";
/// What it sends for Ctrl-B while a command runs: move it to the
/// background (otherwise Ctrl-B moves the cursor left, as in Emacs).
pub const BACKGROUND: &str = "\u{2}";

/// A permission request this terminal answers with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub request_id: String,
    /// The decisions offered, in the order shown.
    pub offered: Vec<Decision>,
}

/// What the session and the terminal thread share.
struct Shared {
    status: Status,
    question: Option<Question>,
    leaving: bool,
    /// The request answered here last (not asked again).
    asked: Option<String>,
    /// The prompt as last painted.
    painted: (String, String),
    /// The terminal's bell is to ring.
    bell: bool,
}

/// The session's handle on the terminal thread.
#[derive(Clone)]
pub struct UiLink {
    shared: Arc<Mutex<Shared>>,
    /// Makes the editor return (keeping its buffer) so the thread repaints
    /// or answers a question.
    wake: Arc<AtomicBool>,
    origin: Instant,
}

impl UiLink {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock cannot leave the status invalid.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Milliseconds on the status line's clock.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Changes the status; the line is repainted at the next frame.
    pub fn status(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.lock().status);
    }

    /// Rings the terminal's bell (a request waits, a long turn ended), so a
    /// person in another window hears of it; `AGENT_BELL=off` silences it.
    pub fn bell(&self) {
        if std::env::var("AGENT_BELL").is_ok_and(|v| v == "off" || v == "0") {
            return;
        }
        self.lock().bell = true;
    }

    /// A copy of the status.
    pub fn snapshot(&self) -> Status {
        self.lock().status.clone()
    }

    /// Asks the person `question` with single keys (replacing any other).
    pub fn ask(&self, question: Question) {
        self.lock().question = Some(question);
        self.wake.store(true, Ordering::Relaxed);
    }

    /// The question is answered or gone: stop asking it.
    pub fn withdraw(&self, request_id: &str) {
        let mut shared = self.lock();
        if shared
            .question
            .as_ref()
            .is_some_and(|q| q.request_id == request_id)
        {
            shared.question = None;
        }
    }

    /// Ends the terminal thread (the session is over or switches).
    pub fn leave(&self) {
        self.lock().leaving = true;
        self.wake.store(true, Ordering::Relaxed);
    }

    fn leaving(&self) -> bool {
        self.lock().leaving
    }

    /// The question waiting for this terminal's key, if any.
    fn question(&self) -> Option<Question> {
        let shared = self.lock();
        shared
            .question
            .clone()
            .filter(|q| shared.asked.as_deref() != Some(q.request_id.as_str()))
    }

    /// The prompt as it should look now: (before the input, at the
    /// right end of its line).
    fn prompt_text(&self, width: usize) -> (String, String) {
        let now = self.now_ms();
        if let Some(question) = self.question() {
            return (question_left(&question.offered), question_right());
        }
        let shared = self.lock();
        (
            shared.status.left(now, width / 2),
            shared.status.right(width / 2),
        )
    }
}

/// Output for the terminal: complete lines go to the printer, which prints
/// them above the status and input lines. A line still being written waits
/// for its end.
pub struct UiWriter {
    lines: std::sync::mpsc::Sender<String>,
    /// Lines sent and not yet handed to the editor.
    queued: Arc<AtomicUsize>,
    pending: Vec<u8>,
}

impl UiWriter {
    fn send(&self, line: String) {
        // The receiver lives as long as the terminal; after it, nothing
        // is shown anyway.
        if self.lines.send(line).is_ok() {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Write for UiWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            self.send(text.trim_end_matches('\r').to_string());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Output lines on their way to the editor's printer.
type Outbox = Arc<Mutex<std::sync::mpsc::Receiver<String>>>;

/// The terminal thread, running.
pub struct Terminal {
    thread: Option<JoinHandle<()>>,
    link: UiLink,
    lines: std::sync::mpsc::Sender<String>,
    outbox: Outbox,
    /// Lines in the outbox.
    queued: Arc<AtomicUsize>,
}

/// What the session reads from the terminal.
pub struct Channels {
    /// Lines typed (a permission key arrives as its key, e.g. `y`).
    pub lines: mpsc::Receiver<String>,
    /// Ctrl-C while the agent works (or while a question waits).
    pub interrupts: mpsc::Receiver<()>,
    /// Another way in for Ctrl-C (SIGINT).
    pub interrupt_sender: mpsc::Sender<()>,
}

impl Terminal {
    /// Starts the thread. `history`: the file of lines typed in this
    /// directory (created when missing); `color`: whether to paint.
    pub fn start(history: Option<PathBuf>, color: bool) -> (Terminal, Channels) {
        let (out_tx, out_rx) = std::sync::mpsc::channel();
        let outbox: Outbox = Arc::new(Mutex::new(out_rx));
        let queued = Arc::new(AtomicUsize::new(0));
        let link = UiLink {
            shared: Arc::new(Mutex::new(Shared {
                status: Status::default(),
                question: None,
                leaving: false,
                asked: None,
                painted: (String::new(), String::new()),
                bell: false,
            })),
            wake: Arc::new(AtomicBool::new(false)),
            origin: Instant::now(),
        };
        let (line_tx, lines) = mpsc::channel(64);
        let (interrupt_tx, interrupts) = mpsc::channel(8);
        let interrupt_sender = interrupt_tx.clone();
        let thread = {
            let link = link.clone();
            let outbox = outbox.clone();
            let queued = queued.clone();
            let own_tx = out_tx.clone();
            std::thread::Builder::new()
                .name("agent-terminal".to_string())
                .spawn(move || {
                    let printer = ExternalPrinter::new(PRINTER_LINES);
                    let mut ui = Ui {
                        printer: UiWriter {
                            lines: own_tx,
                            queued: queued.clone(),
                            pending: Vec::new(),
                        },
                        editor: editor(&link, printer, &outbox, &queued, history),
                        link,
                        lines: line_tx,
                        interrupts: interrupt_tx,
                        color,
                        first_ctrl_c: None,
                        bound: None,
                        after_answer: Arc::default(),
                    };
                    ui.run();
                })
                .ok()
        };
        (
            Terminal {
                thread,
                link,
                lines: out_tx,
                outbox,
                queued,
            },
            Channels {
                lines,
                interrupts,
                interrupt_sender,
            },
        )
    }

    pub fn link(&self) -> UiLink {
        self.link.clone()
    }

    /// A writer whose lines appear above the input.
    pub fn writer(&self) -> UiWriter {
        UiWriter {
            lines: self.lines.clone(),
            queued: self.queued.clone(),
            pending: Vec::new(),
        }
    }

    /// Stops the thread and waits for it; what it had not printed yet is
    /// printed on stdout.
    pub fn stop(mut self) {
        // Let the editor print what the session wrote last (it takes it at
        // its next poll), then end it.
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline && self.queued.load(Ordering::Relaxed) > 0 {
            std::thread::sleep(POLL / 5);
        }
        std::thread::sleep(POLL * 2);
        self.link.leave();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut out = io::stdout().lock();
        // The prompt line the editor left: cleared, so what follows (the
        // shell's prompt, a last message) starts on a clean line.
        let _ = write!(out, "\r\x1b[2K");
        let outbox = self
            .outbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Ok(line) = outbox.try_recv() {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}

fn editor(
    link: &UiLink,
    printer: ExternalPrinter<String>,
    outbox: &Outbox,
    queued: &Arc<AtomicUsize>,
    history: Option<PathBuf>,
) -> Reedline {
    let forward = printer.sender();
    let outbox = outbox.clone();
    let queued = queued.clone();
    let mut editor = Reedline::create()
        .with_external_printer(printer)
        .with_break_signal(link.wake.clone())
        .with_poll_interval(POLL)
        .with_validator(Box::new(ContinuationValidator))
        .with_edit_mode(Box::new(Emacs::new(editing_keybindings())))
        .with_completer(Box::new(Complete::new(
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        )))
        .with_menu(ReedlineMenu::EngineCompleter(Box::new(
            ColumnarMenu::default().with_name(COMPLETION_MENU),
        )))
        .with_quick_completions(true)
        .with_partial_completions(true)
        .with_transient_prompt(Box::new(UiPrompt {
            left: String::new(),
            right: String::new(),
        }))
        .use_bracketed_paste(true);
    if let Some(path) = history
        && let Ok(history) = FileBackedHistory::with_file(HISTORY_LINES, path)
    {
        editor = editor.with_history(Box::new(history));
    }
    let ticker = link.clone();
    let mut last_tick = Instant::now();
    editor.with_idle_callback(Box::new(move || {
        // Output for the printer, which shows it above the prompt later in
        // this same turn of the editor's loop — unless the editor is about
        // to return (a wake is set): a line handed over then would wait in
        // the editor, and be lost if the session ends.
        let mut forwarded = false;
        if !ticker.wake.load(Ordering::Relaxed)
            && let Ok(lines) = outbox.lock()
        {
            while let Ok(line) = lines.try_recv() {
                forwarded = true;
                queued.fetch_sub(1, Ordering::Relaxed);
                if forward.try_send(line).is_err() {
                    break;
                }
            }
        }
        if forwarded {
            return;
        }
        if std::mem::take(&mut ticker.lock().bell) {
            // BEL moves no cursor: safe beside the editor's painting.
            let mut out = io::stdout();
            let _ = out.write_all(b"\x07").and_then(|()| out.flush());
        }
        // Repaint when the status line would change: every spinner frame
        // while the agent works, once when the idle status changes.
        if last_tick.elapsed() < Duration::from_millis(FRAME_MS) {
            return;
        }
        last_tick = Instant::now();
        let text = ticker.prompt_text(terminal_width());
        if ticker.lock().painted != text {
            ticker.wake.store(true, Ordering::Relaxed);
        }
    }))
}

fn terminal_width() -> usize {
    terminal::size().map_or(80, |(cols, _)| usize::from(cols.max(20)))
}

struct Ui {
    editor: Reedline,
    link: UiLink,
    /// Lines of its own, in order with the session's.
    printer: UiWriter,
    lines: mpsc::Sender<String>,
    interrupts: mpsc::Sender<()>,
    color: bool,
    first_ctrl_c: Option<Instant>,
    /// The request whose keys are bound now (None: normal editing).
    bound: Option<String>,
    /// Keys typed right after a one-key answer, in the same read as the
    /// answer: the editor would drop them, so they are kept here and typed
    /// into the next line.
    after_answer: Arc<Mutex<Vec<KeyEvent>>>,
}

impl Ui {
    fn run(&mut self) {
        loop {
            if self.link.leaving() {
                break;
            }
            let question = self.link.question();
            self.bind_keys(question.as_ref());
            if question.is_none() && !self.replay_keys() {
                break;
            }
            let (left, right) = self.link.prompt_text(terminal_width());
            self.link.lock().painted = (left.clone(), right.clone());
            let prompt = UiPrompt { left, right };
            match self.editor.read_line(&prompt) {
                Ok(Signal::Success(text)) => {
                    self.first_ctrl_c = None;
                    if self.lines.blocking_send(accepted_text(&text)).is_err() {
                        break;
                    }
                }
                Ok(Signal::HostCommand(key)) => {
                    if let Some(question) = question {
                        self.link.lock().asked = Some(question.request_id);
                    } else if key == BACKGROUND && !self.link.snapshot().runs_command() {
                        let left = reedline::EditCommand::MoveLeft { select: false };
                        self.editor.run_edit_commands(&[left]);
                        continue;
                    } else if key != EXPAND_OUTPUT && key != NEXT_MODE && key != BACKGROUND {
                        continue;
                    }
                    if self.lines.blocking_send(key).is_err() {
                        break;
                    }
                }
                Ok(Signal::CtrlC) => {
                    if question.is_some() || self.link.snapshot().busy() {
                        let _ = self.interrupts.blocking_send(());
                    } else if self
                        .first_ctrl_c
                        .is_some_and(|at| at.elapsed() < LEAVE_WINDOW)
                    {
                        break;
                    } else {
                        self.first_ctrl_c = Some(Instant::now());
                        self.print_line(
                            "(Ctrl-C again or Ctrl-D to leave; the conversation stays in the daemon)",
                        );
                    }
                }
                Ok(Signal::CtrlD) => break,
                Ok(_) => {}
                Err(e) => {
                    self.print_line(&format!("agent: the terminal failed: {e}"));
                    break;
                }
            }
        }
        // The session sees its input end and leaves.
        let (closed, _) = mpsc::channel(1);
        self.lines = closed;
    }

    /// Types the keys that came right after an answer into the editor: a
    /// line ended by Enter is sent, the rest stays in the buffer. False
    /// when the session has gone.
    fn replay_keys(&mut self) -> bool {
        let keys = std::mem::take(&mut *lock_keys(&self.after_answer));
        let mut text = String::new();
        for key in keys {
            match key.code {
                KeyCode::Char(c) if (key.modifiers - KeyModifiers::SHIFT).is_empty() => {
                    text.push(c);
                }
                KeyCode::Enter => {
                    let line = std::mem::take(&mut text);
                    if !line.trim().is_empty() && self.lines.blocking_send(line).is_err() {
                        return false;
                    }
                }
                KeyCode::Backspace => {
                    text.pop();
                }
                _ => {}
            }
        }
        if !text.is_empty() {
            self.editor
                .run_edit_commands(&[reedline::EditCommand::InsertString(text)]);
        }
        true
    }

    /// Prints a line above the prompt (through the printer, in order).
    fn print_line(&self, text: &str) {
        self.printer.send(text.to_string());
    }

    /// While a question waits, its keys answer it at once; otherwise the
    /// editor edits. Prints the keys once per question.
    fn bind_keys(&mut self, question: Option<&Question>) {
        let wanted = question.map(|q| q.request_id.clone());
        if wanted == self.bound {
            return;
        }
        let mode: Box<dyn reedline::EditMode> = match question {
            Some(q) => {
                for line in key_lines(&q.offered, terminal_width(), self.color) {
                    self.print_line(&line);
                }
                Box::new(AnswerMode {
                    keys: Emacs::new(answer_keybindings(&q.offered)),
                    answered: false,
                    after: self.after_answer.clone(),
                })
            }
            None => Box::new(Emacs::new(editing_keybindings())),
        };
        let editor = std::mem::replace(&mut self.editor, Reedline::create());
        self.editor = editor.with_edit_mode(mode);
        self.bound = wanted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_sends_whole_lines() {
        let (lines, receiver) = std::sync::mpsc::channel();
        let mut writer = UiWriter {
            lines,
            queued: Arc::new(AtomicUsize::new(0)),
            pending: Vec::new(),
        };
        write!(writer, "⏺ bash: ls").unwrap();
        assert!(receiver.try_recv().is_err());
        write!(writer, "\n  ⎿ ok\r\nhalf").unwrap();
        assert_eq!(receiver.try_recv().as_deref(), Ok("⏺ bash: ls"));
        assert_eq!(receiver.try_recv().as_deref(), Ok("  ⎿ ok"));
        assert!(receiver.try_recv().is_err());
    }
}
