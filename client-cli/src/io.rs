//! The terminal, abstracted: output writers, lines typed on stdin, Ctrl-C.
//!
//! Production uses [`Io::stdio`]; tests use [`Io::captured`] to feed lines and
//! interrupts through channels and read what was printed.

use std::io::{self, IsTerminal, Read, Write};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::cli::ColorWhen;

/// Everything a command reads from or writes to.
pub struct Io {
    /// Normal output (stdout).
    pub out: Box<dyn Write + Send>,
    /// Diagnostics (stderr).
    pub err: Box<dyn Write + Send>,
    /// Whether `out` gets ANSI colour.
    pub color: bool,
    /// Columns of the terminal (or `COLUMNS`, or 80), to wrap replies at.
    pub width: usize,
    /// The terminal shows 24-bit colour (`COLORTERM=truecolor`).
    pub truecolor: bool,
    /// Lines typed by the person.
    pub input: Input,
    /// Ctrl-C presses.
    pub interrupts: Interrupts,
    /// stdin and stdout are the process's own terminal: the interactive
    /// terminal (line editor, one-key answers) may take it over.
    pub tty: bool,
}

impl Io {
    /// The process's stdin/stdout/stderr and SIGINT, with colour as
    /// [`use_color`] decides from `when` and the environment.
    pub fn stdio(when: ColorWhen) -> Io {
        let terminal = io::stdout().is_terminal();
        let color = use_color(
            when,
            terminal,
            std::env::var_os("NO_COLOR").as_deref(),
            std::env::var_os("TERM").as_deref(),
        );
        let width = terminal_size::terminal_size()
            .map(|(w, _)| usize::from(w.0))
            .or_else(|| std::env::var("COLUMNS").ok()?.trim().parse().ok())
            .filter(|&w| w > 0)
            .unwrap_or(DEFAULT_WIDTH);
        let truecolor = std::env::var("COLORTERM")
            .is_ok_and(|v| v.eq_ignore_ascii_case("truecolor") || v.eq_ignore_ascii_case("24bit"));
        Io {
            out: Box::new(io::stdout()),
            err: Box::new(io::stderr()),
            color,
            width,
            truecolor,
            input: Input::stdin(),
            interrupts: Interrupts::ctrl_c(),
            tty: terminal && io::stdin().is_terminal(),
        }
    }

    /// An `Io` whose output is captured in memory, whose input lines come from
    /// `lines` (as if typed on a terminal when `terminal`) and whose Ctrl-C
    /// presses come from `interrupts`.
    pub fn captured(
        lines: mpsc::Receiver<String>,
        terminal: bool,
        interrupts: mpsc::Receiver<()>,
    ) -> (Io, Captured) {
        let captured = Captured::default();
        let io = Io {
            out: Box::new(captured.out.clone()),
            err: Box::new(captured.err.clone()),
            color: false,
            width: DEFAULT_WIDTH,
            truecolor: false,
            input: Input {
                source: InputSource::Channel(lines),
                terminal,
            },
            interrupts: Interrupts {
                source: InterruptSource::Channel(interrupts),
            },
            tty: false,
        };
        (io, captured)
    }
}

/// Columns assumed when the terminal's width is unknown.
pub const DEFAULT_WIDTH: usize = 80;

/// Whether human output on stdout is coloured: `--color always` or `never`
/// as told; `auto` when stdout is a `terminal`, `NO_COLOR` is unset or
/// empty (<https://no-color.org>) and `TERM` is not `dumb`.
pub fn use_color(
    when: ColorWhen,
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            terminal && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
        }
    }
}

/// What an [`Io::captured`] printed.
#[derive(Clone, Default)]
pub struct Captured {
    /// What went to stdout.
    pub out: SharedBuf,
    /// What went to stderr.
    pub err: SharedBuf,
}

/// A growable byte buffer shared between a writer and its reader.
#[derive(Clone, Default)]
pub struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    /// The bytes written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The bytes written so far, as (lossy) UTF-8.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Lines typed by the person.
///
/// Stdin is read by one background thread, started on first use, that
/// forwards lines through a channel: every reader of lines (attach's messages,
/// permission answers) shares it. A plain thread rather than `tokio::io::stdin`
/// because a blocking terminal read must not keep the runtime from shutting
/// down.
pub struct Input {
    source: InputSource,
    terminal: bool,
}

enum InputSource {
    /// The process's stdin; the receiver exists once the thread is started.
    Stdin(Option<mpsc::Receiver<String>>),
    /// Lines given by a test.
    Channel(mpsc::Receiver<String>),
}

impl Input {
    /// The process's stdin.
    pub fn stdin() -> Input {
        Input {
            source: InputSource::Stdin(None),
            terminal: io::stdin().is_terminal(),
        }
    }

    /// Lines that come from `lines` (the interactive terminal's);
    /// `terminal`: typed by a person.
    pub fn channel(lines: mpsc::Receiver<String>, terminal: bool) -> Input {
        Input {
            source: InputSource::Channel(lines),
            terminal,
        }
    }

    /// Whether a person is typing (stdin is a terminal).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    fn receiver(&mut self) -> &mut mpsc::Receiver<String> {
        match &mut self.source {
            InputSource::Stdin(rx) => rx.get_or_insert_with(spawn_stdin_reader),
            InputSource::Channel(rx) => rx,
        }
    }

    /// The next line without its line ending; `None` at end of input.
    /// Cancel-safe: a line is never lost when the future is dropped.
    pub async fn next_line(&mut self) -> Option<String> {
        self.receiver().recv().await
    }

    /// Everything left on the input (for `agent import -`).
    pub async fn read_to_string(&mut self) -> io::Result<String> {
        match &mut self.source {
            InputSource::Stdin(None) => tokio::task::spawn_blocking(|| {
                let mut text = String::new();
                io::stdin().lock().read_to_string(&mut text).map(|_| text)
            })
            .await
            .map_err(io::Error::other)?,
            InputSource::Stdin(Some(rx)) | InputSource::Channel(rx) => {
                let mut text = String::new();
                while let Some(line) = rx.recv().await {
                    text.push_str(&line);
                    text.push('\n');
                }
                Ok(text)
            }
        }
    }
}

fn spawn_stdin_reader() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(64);
    let spawned = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let stdin = io::stdin();
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.lock().read_line_lossy(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = line.trim_end_matches(['\n', '\r']).to_string();
                        if tx.blocking_send(text).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    // Without the thread the sender is gone and the input reads as closed.
    drop(spawned);
    rx
}

/// `BufRead::read_line` that tolerates invalid UTF-8.
trait ReadLineLossy {
    fn read_line_lossy(&mut self, line: &mut String) -> io::Result<usize>;
}

impl<R: io::BufRead> ReadLineLossy for R {
    fn read_line_lossy(&mut self, line: &mut String) -> io::Result<usize> {
        let mut bytes = Vec::new();
        let n = self.read_until(b'\n', &mut bytes)?;
        line.push_str(&String::from_utf8_lossy(&bytes));
        Ok(n)
    }
}

/// Ctrl-C presses.
pub struct Interrupts {
    source: InterruptSource,
}

enum InterruptSource {
    /// SIGINT; the receiver exists once the handler is installed. Installing
    /// it replaces the default "die at once", so only commands that handle
    /// Ctrl-C themselves (run, attach) install it.
    CtrlC(Option<mpsc::Receiver<()>>),
    /// Presses given by a test.
    Channel(mpsc::Receiver<()>),
}

impl Interrupts {
    /// The process's SIGINT.
    pub fn ctrl_c() -> Interrupts {
        Interrupts {
            source: InterruptSource::CtrlC(None),
        }
    }

    /// Presses that come from `presses` (the interactive terminal's).
    pub fn channel(presses: mpsc::Receiver<()>) -> Interrupts {
        Interrupts {
            source: InterruptSource::Channel(presses),
        }
    }

    /// Starts listening (installs the SIGINT handler) if not done yet.
    pub fn install(&mut self) {
        if let InterruptSource::CtrlC(rx @ None) = &mut self.source {
            let (tx, new_rx) = mpsc::channel(4);
            tokio::spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    if tx.send(()).await.is_err() {
                        break;
                    }
                }
            });
            *rx = Some(new_rx);
        }
    }

    /// The next press. Never resolves when there will be none. Cancel-safe.
    pub async fn next(&mut self) {
        self.install();
        let rx = match &mut self.source {
            InterruptSource::CtrlC(Some(rx)) | InterruptSource::Channel(rx) => rx,
            InterruptSource::CtrlC(None) => return std::future::pending().await,
        };
        if rx.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn colour_follows_the_flag_then_no_color_term_and_the_terminal() {
        let os = |s: &'static str| Some(OsStr::new(s));
        let auto = |terminal, no_color, term| use_color(ColorWhen::Auto, terminal, no_color, term);
        assert!(auto(true, None, os("xterm-256color")));
        assert!(auto(true, os(""), None), "an empty NO_COLOR does not count");
        assert!(!auto(true, os("1"), os("xterm")));
        assert!(!auto(true, None, os("dumb")));
        assert!(!auto(false, None, os("xterm")), "a pipe gets plain text");
        assert!(use_color(ColorWhen::Always, false, os("1"), os("dumb")));
        assert!(!use_color(ColorWhen::Never, true, None, os("xterm")));
    }
}
