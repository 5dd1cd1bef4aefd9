//! Runs a program in a pseudo-terminal and reads its screen, so terminal
//! tests assert on what a person would see rather than on raw bytes.
//!
//! [`PtySession::spawn`] starts the program with the terminal's other end
//! as its stdin, stdout, stderr *and controlling terminal*, in a session of
//! its own: `isatty` is true, Ctrl-C (byte 0x03) becomes SIGINT through the
//! line discipline, and [`PtySession::resize`] delivers SIGWINCH. A reader
//! thread feeds everything the program writes into a [`vt100::Parser`] of
//! the terminal's size, with [`SCROLLBACK`] rows of scrollback, and wakes
//! whoever waits for text.
//!
//! ```no_run
//! # fn example() -> Result<(), agent_tests::pty::PtyError> {
//! use std::process::Command;
//! use std::time::Duration;
//! use agent_tests::pty::PtySession;
//!
//! let mut cmd = Command::new("bash");
//! cmd.args(["--norc", "--noprofile", "-i"]).env("PS1", "$ ");
//! let term = PtySession::spawn(cmd, 80, 24)?;
//! term.wait_for("$ ", Duration::from_secs(10))?;
//! term.send("stty size")?;
//! term.enter()?;
//! term.wait_for("24 80", Duration::from_secs(10))?;
//! println!("{}", term.dump());
//! # Ok(()) }
//! ```
//!
//! Waiting is on text, never on time: [`PtySession::wait_for`] returns as
//! soon as the text is on the screen (or in the scrollback) and fails after
//! its timeout with the whole screen in the error. Errors print their
//! screen in `Debug` too, so `.unwrap()` in a test shows it legibly.

use std::ffi::OsStr;
use std::fmt;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use rustix::pty::OpenptFlags;
use rustix::termios::{InputModes, OptionalActions, Winsize};

/// Rows of scrollback the parser keeps above the screen.
pub const SCROLLBACK: usize = 2000;

/// The `TERM` a program sees unless its command sets one: what
/// [`vt100`] understands best.
pub const TERM: &str = "xterm-256color";

/// How long output must pause before [`PtySession::wait_exit`] takes the
/// screen as complete when something the program left behind still holds
/// the terminal open.
const DRAIN_QUIET: Duration = Duration::from_millis(200);

/// How often the reader thread looks up from `poll` to see whether the
/// session was dropped.
const READER_TICK: Duration = Duration::from_millis(50);

/// Why a terminal session could not do what was asked.
///
/// `Debug` prints the same text as `Display`, so a test's `.unwrap()` shows
/// the screen as it was, not an escaped string.
#[derive(thiserror::Error)]
pub enum PtyError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the program.
        what: String,
        source: std::io::Error,
    },
    /// A terminal needs at least one column and one row.
    #[error("a terminal of {cols}x{rows} cannot be made: both must be at least 1")]
    Size { cols: u16, rows: u16 },
    /// What was awaited did not happen in time.
    #[error("timed out after {waited:?} waiting for {what}\n{screen}")]
    Timeout {
        what: String,
        waited: Duration,
        /// [`PtySession::dump`] at the time.
        screen: String,
    },
    /// Nothing will ever be written again (everyone closed the terminal), and
    /// what was awaited is not there.
    #[error("the terminal was closed{status} while waiting for {what}\n{screen}")]
    Closed {
        what: String,
        /// `" (exit status: …)"` when the program has been reaped.
        status: String,
        /// [`PtySession::dump`] at the time.
        screen: String,
    },
}

impl fmt::Debug for PtyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What this module's fallible functions return.
pub type Result<T> = std::result::Result<T, PtyError>;

fn io_error(what: impl Into<String>) -> impl FnOnce(Errno) -> PtyError {
    move |e| PtyError::Io {
        what: what.into(),
        source: e.into(),
    }
}

/// A program running in a pseudo-terminal, and the screen it drew.
///
/// Dropping it kills the program's whole process group (SIGKILL), reaps the
/// program and joins the reader thread.
pub struct PtySession {
    shared: Arc<Shared>,
    /// The terminal's master side: writes go here as keystrokes, and the
    /// size is set here.
    master: OwnedFd,
    child: Mutex<ChildState>,
    pid: Pid,
    reader: Option<JoinHandle<()>>,
    /// The command line, for messages.
    what: String,
}

impl fmt::Debug for PtySession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtySession")
            .field("command", &self.what)
            .field("pid", &self.pid.as_raw_nonzero())
            .finish_non_exhaustive()
    }
}

struct ChildState {
    child: Child,
    /// Set once the program has been reaped.
    status: Option<ExitStatus>,
}

/// What the reader thread and the session share.
struct Shared {
    term: Mutex<Term>,
    /// Notified after each chunk of output and when the terminal closes.
    changed: Condvar,
    /// Set by `Drop`: the reader thread ends at its next tick.
    stop: AtomicBool,
    /// Tests: the reader thread reads nothing while set (a reader the
    /// scheduler has not run yet).
    #[cfg(test)]
    paused: AtomicBool,
}

struct Term {
    parser: vt100::Parser<Replies>,
    /// Why the reader stopped reading: `None` while it reads.
    closed: Option<Closed>,
    /// When the program last wrote something (or the session started).
    last_output: Instant,
}

#[derive(Debug, Clone)]
enum Closed {
    /// Every holder of the terminal's slave side closed it.
    Eof,
    /// Reading failed; nothing more will be read.
    Error(String),
}

/// Answers to the queries a program sends its terminal, which a real one
/// answers: some programs (crossterm's `cursor::position`, for one) wait
/// for them.
#[derive(Default)]
struct Replies {
    pending: Vec<u8>,
}

impl vt100::Callbacks for Replies {
    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        if i1.is_some() {
            return;
        }
        match (c, params) {
            // Device status report: "OK".
            ('n', [[5]]) => self.pending.extend_from_slice(b"\x1b[0n"),
            // Cursor position report, 1-based.
            ('n', [[6]]) => {
                let (row, col) = screen.cursor_position();
                let report = format!("\x1b[{};{}R", u32::from(row) + 1, u32::from(col) + 1);
                self.pending.extend_from_slice(report.as_bytes());
            }
            // Primary device attributes: a VT100 with advanced video.
            ('c', [] | [[0]]) => self.pending.extend_from_slice(b"\x1b[?1;2c"),
            _ => {}
        }
    }
}

impl PtySession {
    /// Starts `cmd` in a new pseudo-terminal of `cols`×`rows`.
    ///
    /// The program's stdin, stdout and stderr are the terminal, which is
    /// also its controlling terminal; it leads a new session and process
    /// group. Its environment is `cmd`'s, with `TERM` set to [`TERM`] and
    /// `COLUMNS`/`LINES` removed unless `cmd` sets them itself (so the size
    /// comes from the terminal).
    pub fn spawn(mut cmd: Command, cols: u16, rows: u16) -> Result<PtySession> {
        let size = Size::new(cols, rows)?;
        let what = describe(&cmd);
        let (master, slave) = open_pty(size).map_err(|e| match e {
            PtyError::Io { what: w, source } => PtyError::Io {
                what: format!("{w} for {what}"),
                source,
            },
            other => other,
        })?;

        let explicit: Vec<&OsStr> = cmd.get_envs().map(|(k, _)| k).collect();
        let term_set = explicit.contains(&OsStr::new("TERM"));
        let (columns_set, lines_set) = (
            explicit.contains(&OsStr::new("COLUMNS")),
            explicit.contains(&OsStr::new("LINES")),
        );
        if !term_set {
            cmd.env("TERM", TERM);
        }
        if !columns_set {
            cmd.env_remove("COLUMNS");
        }
        if !lines_set {
            cmd.env_remove("LINES");
        }

        let dup = |n: &str| {
            slave
                .try_clone()
                .map_err(|source| PtyError::Io {
                    what: format!("cannot duplicate the terminal for {what}'s {n}"),
                    source,
                })
                .map(Stdio::from)
        };
        cmd.stdin(dup("stdin")?)
            .stdout(dup("stdout")?)
            .stderr(dup("stderr")?);
        make_controlling_terminal(&mut cmd);
        let spawned = cmd.spawn();
        // The program has its own copies now; with ours closed, the master
        // reads end of file once the program and whatever it started close
        // theirs.
        drop(cmd);
        drop(slave);
        let child = spawned.map_err(|source| PtyError::Io {
            what: format!("cannot start {what}"),
            source,
        })?;
        let pid = Pid::from_child(&child);

        let parser = vt100::Parser::new_with_callbacks(
            size.rows_nz,
            size.cols_nz,
            SCROLLBACK,
            Replies::default(),
        );
        let shared = Arc::new(Shared {
            term: Mutex::new(Term {
                parser,
                closed: None,
                last_output: Instant::now(),
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            #[cfg(test)]
            paused: AtomicBool::new(false),
        });
        let mut session = PtySession {
            shared: Arc::clone(&shared),
            master,
            child: Mutex::new(ChildState {
                child,
                status: None,
            }),
            pid,
            reader: None,
            what,
        };
        // From here on, a failure drops `session`, which kills the program.
        let reader_fd = session.master.try_clone().map_err(|source| PtyError::Io {
            what: format!("cannot duplicate the terminal of {}", session.what),
            source,
        })?;
        let reader = std::thread::Builder::new()
            .name(format!("pty-reader-{}", pid.as_raw_nonzero()))
            .spawn(move || read_loop(&shared, &reader_fd))
            .map_err(|source| PtyError::Io {
                what: format!("cannot start the reader thread for {}", session.what),
                source,
            })?;
        session.reader = Some(reader);
        Ok(session)
    }

    /// The program's process id (also its process group and session id).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw_nonzero().get().unsigned_abs()
    }

    /// The terminal's size as (columns, rows).
    pub fn size(&self) -> (u16, u16) {
        let term = self.term();
        let (rows, cols) = term.parser.screen().size();
        (cols.get(), rows.get())
    }

    /// Types `text` (UTF-8) as it is; `\r` is Enter.
    pub fn send(&self, text: &str) -> Result<()> {
        self.send_bytes(text.as_bytes())
    }

    /// Writes `bytes` to the terminal as keyboard input. Waits while the
    /// terminal's input buffer is full, for at most [`crate::harness::WAIT`].
    pub fn send_bytes(&self, bytes: &[u8]) -> Result<()> {
        let deadline = Instant::now() + crate::harness::WAIT;
        let mut rest = bytes;
        while !rest.is_empty() {
            match rustix::io::write(&self.master, rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(self.timeout(
                            format!(
                                "{} to read its input ({} of {} bytes still unsent)",
                                self.what,
                                rest.len(),
                                bytes.len()
                            ),
                            crate::harness::WAIT,
                        ));
                    }
                    let tick = timespec(left.min(READER_TICK));
                    let mut fds = [PollFd::new(&self.master, PollFlags::OUT)];
                    match poll(&mut fds, Some(&tick)) {
                        Ok(_) | Err(Errno::INTR) => {}
                        Err(e) => {
                            return Err(
                                io_error(format!("cannot wait to write to {}", self.what))(e),
                            );
                        }
                    }
                }
                Err(e) => {
                    return Err(io_error(format!(
                        "cannot write to {}'s terminal",
                        self.what
                    ))(e));
                }
            }
        }
        Ok(())
    }

    /// Enter (`\r`, as a terminal sends it; the line discipline makes it
    /// `\n` for a program in canonical mode).
    pub fn enter(&self) -> Result<()> {
        self.send_bytes(b"\r")
    }

    /// Ctrl-C (0x03): SIGINT to the foreground process group while the
    /// terminal is in its usual mode (`ISIG`); the byte itself in raw mode.
    pub fn ctrl_c(&self) -> Result<()> {
        self.send_bytes(b"\x03")
    }

    /// Ctrl-D (0x04): end of file for a program reading a line (at the start
    /// of the line).
    pub fn ctrl_d(&self) -> Result<()> {
        self.send_bytes(b"\x04")
    }

    /// Escape (0x1b).
    pub fn esc(&self) -> Result<()> {
        self.send_bytes(b"\x1b")
    }

    /// Alt-Enter, as xterm sends it (`ESC CR`).
    pub fn alt_enter(&self) -> Result<()> {
        self.send_bytes(b"\x1b\r")
    }

    /// Tab (0x09).
    pub fn tab(&self) -> Result<()> {
        self.send_bytes(b"\t")
    }

    /// Backspace, as terminals send it (DEL, 0x7f).
    pub fn backspace(&self) -> Result<()> {
        self.send_bytes(b"\x7f")
    }

    /// The up arrow (`ESC [ A`, or `ESC O A` when the program turned on
    /// application cursor keys, as a real terminal does).
    pub fn up(&self) -> Result<()> {
        self.arrow(b'A')
    }

    /// The down arrow; see [`up`](Self::up).
    pub fn down(&self) -> Result<()> {
        self.arrow(b'B')
    }

    /// The right arrow; see [`up`](Self::up).
    pub fn right(&self) -> Result<()> {
        self.arrow(b'C')
    }

    /// The left arrow; see [`up`](Self::up).
    pub fn left(&self) -> Result<()> {
        self.arrow(b'D')
    }

    fn arrow(&self, key: u8) -> Result<()> {
        let application = self.term().parser.screen().application_cursor();
        let intro = if application { b'O' } else { b'[' };
        self.send_bytes(&[0x1b, intro, key])
    }

    /// Pastes `text` as a terminal does in bracketed-paste mode:
    /// `ESC [200~`, the text, `ESC [201~`. The markers are always sent (a
    /// real terminal sends them only once the program asked with
    /// `ESC [?2004h`; see [`bracketed_paste_enabled`](Self::bracketed_paste_enabled)).
    pub fn paste(&self, text: &str) -> Result<()> {
        let mut bytes = Vec::with_capacity(text.len() + 12);
        bytes.extend_from_slice(b"\x1b[200~");
        bytes.extend_from_slice(text.as_bytes());
        bytes.extend_from_slice(b"\x1b[201~");
        self.send_bytes(&bytes)
    }

    /// Whether the program turned bracketed paste on (`ESC [?2004h`).
    pub fn bracketed_paste_enabled(&self) -> bool {
        self.term().parser.screen().bracketed_paste()
    }

    /// The visible screen, one line per row, trailing spaces and trailing
    /// empty rows removed.
    pub fn screen(&self) -> String {
        let term = self.term();
        let mut lines: Vec<String> = term
            .parser
            .screen()
            .rows(0, term.parser.screen().size().1.get())
            .map(|row| row.trim_end().to_string())
            .collect();
        while lines.last().is_some_and(String::is_empty) {
            lines.pop();
        }
        lines.join("\n")
    }

    /// The visible rows exactly, one string per row (trailing spaces
    /// removed), for assertions on where something is.
    pub fn rows(&self) -> Vec<String> {
        let term = self.term();
        let cols = term.parser.screen().size().1.get();
        term.parser
            .screen()
            .rows(0, cols)
            .map(|row| row.trim_end().to_string())
            .collect()
    }

    /// Everything written so far that is still kept: the scrollback (up to
    /// [`SCROLLBACK`] rows) and the screen, as logical lines (a row the
    /// terminal wrapped is joined to the next), trailing spaces and
    /// trailing empty lines removed. This is the text [`wait_for`](Self::wait_for)
    /// searches.
    pub fn contents_with_scrollback(&self) -> String {
        let mut term = self.term();
        all_text(term.parser.screen_mut())
    }

    /// The cursor as (row, col), 0-based.
    pub fn cursor(&self) -> (u16, u16) {
        self.term().parser.screen().cursor_position()
    }

    /// Runs `f` on the parsed screen: colours, attributes, modes.
    pub fn with_screen<R>(&self, f: impl FnOnce(&vt100::Screen) -> R) -> R {
        f(self.term().parser.screen())
    }

    /// The screen framed, with the size and cursor on top, for failure
    /// messages and notes. Every row is shown, blank ones too.
    pub fn dump(&self) -> String {
        let term = self.term();
        frame(term.parser.screen(), term.closed.as_ref())
    }

    /// Waits until `needle` is in [`contents_with_scrollback`](Self::contents_with_scrollback);
    /// returns that text. Spaces ending a line of `needle` are ignored: the
    /// screen cannot tell them from blank cells (`"$ "` waits for `"$"`).
    ///
    /// # Errors
    /// [`PtyError::Timeout`] after `timeout`, [`PtyError::Closed`] as soon as
    /// the terminal is closed without it; both hold the screen.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> Result<String> {
        let needle = needle
            .split('\n')
            .map(|line| line.trim_end_matches(' '))
            .collect::<Vec<_>>()
            .join("\n");
        self.wait_text(&format!("{needle:?}"), timeout, |text| {
            text.contains(needle.as_str())
        })
    }

    /// Waits until `re` matches [`contents_with_scrollback`](Self::contents_with_scrollback);
    /// returns the first match.
    ///
    /// # Errors
    /// As [`wait_for`](Self::wait_for).
    pub fn wait_for_regex(&self, re: &regex::Regex, timeout: Duration) -> Result<String> {
        let text = self.wait_text(&format!("/{re}/"), timeout, |text| re.is_match(text))?;
        Ok(re
            .find(&text)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default())
    }

    /// Waits until `done` holds for the parsed screen (cursor, colours,
    /// rows); `what` names the condition in the error.
    ///
    /// # Errors
    /// As [`wait_for`](Self::wait_for).
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&vt100::Screen) -> bool,
    ) -> Result<()> {
        self.wait(what, timeout, |term| {
            done(term.parser.screen()).then_some(())
        })
    }

    /// Waits until the program has written nothing for `quiet`: for a dump
    /// after a redraw whose last text is not known. Prefer waiting for text.
    ///
    /// # Errors
    /// [`PtyError::Timeout`] when output never pauses that long within
    /// `timeout`. A closed terminal counts as quiet.
    pub fn wait_quiet(&self, quiet: Duration, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut term = self.term();
        loop {
            let now = Instant::now();
            let calm_at = term.last_output + quiet;
            if term.closed.is_some() || now >= calm_at {
                return Ok(());
            }
            if now >= deadline {
                let screen = frame(term.parser.screen(), term.closed.as_ref());
                return Err(PtyError::Timeout {
                    what: format!("{} to be quiet for {quiet:?}", self.what),
                    waited: timeout,
                    screen,
                });
            }
            let until = calm_at.min(deadline);
            term = self
                .shared
                .changed
                .wait_timeout(term, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits for the program to exit, then reads what it wrote that the
    /// reader thread has not read yet, so all of it is on the screen; when
    /// something it left behind still holds the terminal open, waits for a
    /// pause in the output too. Once the program has exited, whatever is
    /// left in its process group is killed.
    /// Returns the same status when called again.
    ///
    /// # Errors
    /// [`PtyError::Timeout`] (with the screen) when it is still running after
    /// `timeout`.
    pub fn wait_exit(&self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.try_reap()? {
                break status;
            }
            if Instant::now() >= deadline {
                return Err(self.timeout(format!("{} to exit", self.what), timeout));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // What the program wrote before it exited is in the kernel's buffer
        // now: read it here rather than trust the reader thread to have
        // been scheduled since (on a loaded machine it may not have been,
        // and the output may have paused long before the exit).
        let mut term = self.term();
        let replies = drain(&mut term, &self.master);
        if !replies.is_empty() {
            let _ = rustix::io::write(&self.master, &replies);
        }
        self.shared.changed.notify_all();
        // Then, when something the program left behind still holds the
        // terminal open, a pause in what it writes.
        loop {
            let now = Instant::now();
            let calm_at = term.last_output + DRAIN_QUIET;
            if term.closed.is_some() || now >= calm_at || now >= deadline {
                return Ok(status);
            }
            term = self
                .shared
                .changed
                .wait_timeout(term, calm_at.min(deadline) - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The exit status if the program has exited (reaping it, after killing
    /// what is left of its process group).
    pub fn try_wait(&self) -> Result<Option<ExitStatus>> {
        self.try_reap()
    }

    /// Resizes the terminal: the kernel sends SIGWINCH to the foreground
    /// process group, and the parser takes the new size (rows that no
    /// longer fit go to the scrollback; see [`vt100::Parser::set_size`]).
    pub fn resize(&self, cols: u16, rows: u16) -> Result<()> {
        let size = Size::new(cols, rows)?;
        // The parser first, so output drawn for the new size lands on it.
        self.term().parser.set_size(size.rows_nz, size.cols_nz);
        rustix::termios::tcsetwinsize(&self.master, size.winsize())
            .map_err(io_error(format!("cannot resize {}'s terminal", self.what)))
    }

    fn term(&self) -> MutexGuard<'_, Term> {
        self.shared
            .term
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `check` gives a value; the shared loop of the waits.
    fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&mut Term) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut term = self.term();
        loop {
            if let Some(found) = check(&mut term) {
                return Ok(found);
            }
            if term.closed.is_some() {
                let screen = frame(term.parser.screen(), term.closed.as_ref());
                drop(term);
                let status = match self.try_reap() {
                    Ok(Some(status)) => format!(" ({status})"),
                    _ => String::new(),
                };
                return Err(PtyError::Closed {
                    what: what.to_string(),
                    status,
                    screen,
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(PtyError::Timeout {
                    what: what.to_string(),
                    waited: timeout,
                    screen: frame(term.parser.screen(), term.closed.as_ref()),
                });
            }
            term = self
                .shared
                .changed
                .wait_timeout(term, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn wait_text(
        &self,
        what: &str,
        timeout: Duration,
        mut found: impl FnMut(&str) -> bool,
    ) -> Result<String> {
        self.wait(what, timeout, |term| {
            let text = all_text(term.parser.screen_mut());
            found(&text).then_some(text)
        })
    }

    fn timeout(&self, what: String, waited: Duration) -> PtyError {
        PtyError::Timeout {
            what,
            waited,
            screen: self.dump(),
        }
    }

    fn try_reap(&self) -> Result<Option<ExitStatus>> {
        let mut state = self.child.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(status) = state.status {
            return Ok(Some(status));
        }
        // Look without reaping: while the program is a zombie its pid, and
        // so its process group id, cannot be reused, and what it left in
        // the group can be killed safely.
        let exited = rustix::process::waitid(
            WaitId::Pid(self.pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        )
        .map_err(io_error(format!("cannot wait for {}", self.what)))?;
        if exited.is_none() {
            return Ok(None);
        }
        let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
        let status = state.child.wait().map_err(|source| PtyError::Io {
            what: format!("cannot reap {}", self.what),
            source,
        })?;
        state.status = Some(status);
        Ok(Some(status))
    }
}

impl Drop for PtySession {
    fn drop(&mut self) {
        {
            let mut state = self.child.lock().unwrap_or_else(PoisonError::into_inner);
            if state.status.is_none() {
                // Not reaped, so the group id is still the program's.
                let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
                let _ = state.child.kill();
                if let Ok(status) = state.child.wait() {
                    state.status = Some(status);
                }
            }
        }
        self.shared.stop.store(true, Ordering::Release);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// A terminal size checked to be at least 1×1.
#[derive(Clone, Copy)]
struct Size {
    cols_nz: std::num::NonZeroU16,
    rows_nz: std::num::NonZeroU16,
}

impl Size {
    fn new(cols: u16, rows: u16) -> Result<Size> {
        match (
            std::num::NonZeroU16::new(cols),
            std::num::NonZeroU16::new(rows),
        ) {
            (Some(cols_nz), Some(rows_nz)) => Ok(Size { cols_nz, rows_nz }),
            _ => Err(PtyError::Size { cols, rows }),
        }
    }

    fn winsize(self) -> Winsize {
        Winsize {
            ws_row: self.rows_nz.get(),
            ws_col: self.cols_nz.get(),
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// A new pseudo-terminal of `size`: (master, slave). Both are close-on-exec
/// from the start, so programs other threads start meanwhile do not hold
/// them (a stray copy of the slave would keep the master from ever reading
/// end of file). The master is non-blocking: the reader polls it.
fn open_pty(size: Size) -> Result<(OwnedFd, OwnedFd)> {
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .map_err(io_error("cannot open a pseudo-terminal"))?;
    rustix::pty::grantpt(&master).map_err(io_error("cannot grant the pseudo-terminal"))?;
    rustix::pty::unlockpt(&master).map_err(io_error("cannot unlock the pseudo-terminal"))?;
    let name = rustix::pty::ptsname(&master, Vec::new())
        .map_err(io_error("cannot name the pseudo-terminal"))?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_error(format!(
        "cannot open the pseudo-terminal {}",
        name.to_string_lossy()
    )))?;
    rustix::termios::tcsetwinsize(&master, size.winsize())
        .map_err(io_error("cannot size the pseudo-terminal"))?;
    // UTF-8 input, as terminal emulators set it: backspace in a line being
    // typed removes a whole character.
    let mut modes = rustix::termios::tcgetattr(&slave)
        .map_err(io_error("cannot read the pseudo-terminal's modes"))?;
    modes.input_modes |= InputModes::IUTF8;
    rustix::termios::tcsetattr(&slave, OptionalActions::Now, &modes)
        .map_err(io_error("cannot set the pseudo-terminal's modes"))?;
    rustix::io::ioctl_fionbio(&master, true)
        .map_err(io_error("cannot make the pseudo-terminal non-blocking"))?;
    Ok((master, slave))
}

/// Makes the child a session leader whose controlling terminal is its
/// stdin (the pseudo-terminal), as a terminal emulator does: then the line
/// discipline turns Ctrl-C into SIGINT for it, and a resize into SIGWINCH.
/// SIGINT and SIGQUIT go back to their default actions, as under a terminal
/// emulator: a test run started in the background of a non-interactive
/// shell inherits them ignored, and a program that ignores Ctrl-C is not
/// what a person at a terminal sees.
#[expect(unsafe_code)]
fn make_controlling_terminal(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe functions may be called. It calls setsid(2),
    // ioctl(2) and sigaction(2) (plain system calls, no allocation or locks:
    // an error is an errno turned into an io::Error without allocating) and
    // touches no memory shared with the parent. Setting a signal's action to
    // its default installs no handler.
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
            let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
            for signal in [Signal::SIGINT, Signal::SIGQUIT] {
                sigaction(signal, &default).map_err(std::io::Error::from)?;
            }
            rustix::process::setsid()?;
            rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
            Ok(())
        });
    }
}

/// Reads the master until end of file, an error or `stop`, feeding the
/// parser and waking waiters.
fn read_loop(shared: &Shared, master: &OwnedFd) {
    let mut buf = vec![0u8; 64 * 1024];
    let tick = timespec(READER_TICK);
    let stopped = loop {
        if shared.stop.load(Ordering::Acquire) {
            break Some(Closed::Error("the session was dropped".to_string()));
        }
        let mut fds = [PollFd::new(master, PollFlags::IN)];
        match poll(&mut fds, Some(&tick)) {
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => break Some(Closed::Error(format!("poll: {e}"))),
        }
        #[cfg(test)]
        if shared.paused.load(Ordering::Acquire) {
            std::thread::sleep(READER_TICK);
            continue;
        }
        // Read under the lock: `wait_exit` reads the rest itself, and the
        // screen must take the chunks in the order they were written.
        let (read, replies) = {
            let mut term = shared.term.lock().unwrap_or_else(PoisonError::into_inner);
            let read = read_chunk(&mut term, master, &mut buf);
            (
                read,
                std::mem::take(&mut term.parser.callbacks_mut().pending),
            )
        };
        match read {
            Read::Some => {
                shared.changed.notify_all();
                if !replies.is_empty() {
                    // Best effort: a few bytes into an input buffer that is
                    // empty unless the test itself is flooding it.
                    let _ = rustix::io::write(master, &replies);
                }
            }
            Read::Nothing => {}
            Read::Closed => break None,
        }
    };
    if let Some(why) = stopped {
        let mut term = shared.term.lock().unwrap_or_else(PoisonError::into_inner);
        term.closed.get_or_insert(why);
    }
    shared.changed.notify_all();
}

/// What one read of the master gave.
enum Read {
    /// Output, now on the screen.
    Some,
    /// Nothing to read now.
    Nothing,
    /// Nothing will be read again; `closed` says why.
    Closed,
}

/// Reads one chunk of the program's output into the screen, without
/// waiting (the master is non-blocking).
fn read_chunk(term: &mut Term, master: &OwnedFd, buf: &mut [u8]) -> Read {
    if term.closed.is_some() {
        return Read::Closed;
    }
    let read = loop {
        match rustix::io::read(master, &mut *buf) {
            Err(Errno::INTR) => {}
            other => break other,
        }
    };
    match read {
        // EIO is how Linux says every holder of the slave closed it.
        Ok(0) | Err(Errno::IO) => {
            term.closed = Some(Closed::Eof);
            Read::Closed
        }
        Ok(n) => {
            term.parser.process(&buf[..n]);
            term.last_output = Instant::now();
            Read::Some
        }
        Err(Errno::AGAIN) => Read::Nothing,
        Err(e) => {
            term.closed = Some(Closed::Error(format!("read: {e}")));
            Read::Closed
        }
    }
}

/// Reads everything the program's terminal holds now into the screen;
/// returns the answers to queries it found.
fn drain(term: &mut Term, master: &OwnedFd) -> Vec<u8> {
    let mut buf = vec![0u8; 64 * 1024];
    while let Read::Some = read_chunk(term, master, &mut buf) {}
    std::mem::take(&mut term.parser.callbacks_mut().pending)
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// The scrollback and the screen as logical lines. Moves the view through
/// the scrollback and back to the live screen (the caller holds the lock,
/// so nobody sees it moved).
fn all_text(screen: &mut vt100::Screen) -> String {
    let cols = screen.size().1.get();
    let rows = usize::from(screen.size().0.get());
    let back = {
        screen.set_scrollback(usize::MAX);
        screen.scrollback()
    };
    let mut lines: Vec<(String, bool)> = Vec::with_capacity(back + rows);
    // With the view `offset` rows up, the visible rows are the scrollback's
    // rows from `back - offset` on.
    let mut taken = 0;
    while taken < back {
        screen.set_scrollback(back - taken);
        let n = rows.min(back - taken);
        collect_rows(screen, cols, n, &mut lines);
        taken += n;
    }
    screen.set_scrollback(0);
    collect_rows(screen, cols, rows, &mut lines);

    let mut text = String::new();
    for (row, wrapped) in lines {
        if wrapped {
            // A wrapped row is full: its trailing spaces are text.
            text.push_str(&row);
        } else {
            text.push_str(row.trim_end());
            text.push('\n');
        }
    }
    let kept = text.trim_end_matches(['\n', ' ']).len();
    text.truncate(kept);
    text
}

fn collect_rows(screen: &vt100::Screen, cols: u16, n: usize, into: &mut Vec<(String, bool)>) {
    for (i, row) in screen.rows(0, cols).take(n).enumerate() {
        let wrapped = u16::try_from(i).is_ok_and(|i| screen.row_wrapped(i));
        into.push((row, wrapped));
    }
}

/// The screen in a box, with its size and cursor above it.
fn frame(screen: &vt100::Screen, closed: Option<&Closed>) -> String {
    let (rows, cols) = screen.size();
    let width = usize::from(cols.get());
    let (cur_row, cur_col) = screen.cursor_position();
    let mut title = format!(
        " {}x{}, cursor row {cur_row} col {cur_col}",
        cols.get(),
        rows.get()
    );
    if screen.alternate_screen() {
        title.push_str(", alternate screen");
    }
    match closed {
        Some(Closed::Eof) => title.push_str(", closed"),
        Some(Closed::Error(e)) => title.push_str(&format!(", not read: {e}")),
        None => {}
    }
    title.push(' ');
    let title_len = title.chars().count();
    let mut out = String::with_capacity((width + 4) * (usize::from(rows.get()) + 2));
    out.push('┌');
    out.push_str(&title);
    out.extend(std::iter::repeat_n('─', width.saturating_sub(title_len)));
    out.push_str("┐\n");
    for row in screen.rows(0, cols.get()) {
        out.push('│');
        let len = row.chars().count();
        out.push_str(&row);
        out.extend(std::iter::repeat_n(' ', width.saturating_sub(len)));
        out.push_str("│\n");
    }
    out.push('└');
    out.extend(std::iter::repeat_n('─', width));
    out.push('┘');
    out
}

/// The command line, for messages: program and arguments.
fn describe(cmd: &Command) -> String {
    let mut what = format!("`{}", cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        what.push(' ');
        what.push_str(&arg.to_string_lossy());
    }
    what.push('`');
    what
}

#[cfg(test)]
mod tests;
