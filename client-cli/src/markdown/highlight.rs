//! Syntax highlighting of fenced code, asked of `agent-highlight`: a
//! program of its own (crate `client-cli/highlight`), so that this client
//! carries no syntect and `agent ls` starts without it. It is started once
//! per process, on the first coloured block with a language (or a little
//! earlier, see [`warm_up`]), found like the ACP bridge: `AGENT_HIGHLIGHT_BIN`,
//! else next to this executable, else on `PATH`.
//!
//! Highlighting is an embellishment, so nothing about it may stop or slow a
//! reply for long: a request is bounded in size and its answer in time
//! ([`FIRST_ANSWER`], then [`NEXT_ANSWER`]), and when the program is
//! missing, does not start, dies, hangs or answers anything but the code in
//! colour, the code is shown plain and the program is given up for the rest
//! of the process (no second try, no message in the transcript).
//!
//! The renderer is synchronous: a writer thread feeds the helper's stdin (a
//! helper that stops reading cannot block the caller) and a reader thread
//! passes its answer lines through a channel, waited on with a deadline.
//! When this process exits, the helper reads the end of its stdin and exits
//! too; a helper given up is killed and reaped at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::clean;
use crate::connect::find_program;

/// Code bigger than this is shown unhighlighted (highlighting is linear but
/// not fast, and a huge block is seldom read in a terminal); the helper has
/// the same bound.
const HIGHLIGHT_MAX_BYTES: usize = 256 * 1024;

/// The longest answer line read from the helper: the code with a colour
/// sequence around every token, JSON-escaped, stays well below this.
const ANSWER_MAX_BYTES: u64 = 64 * HIGHLIGHT_MAX_BYTES as u64;

/// The wait for the first answer, which includes starting the helper and
/// its loading the syntaxes.
const FIRST_ANSWER: Duration = Duration::from_secs(3);

/// The wait for every later answer.
const NEXT_ANSWER: Duration = Duration::from_secs(1);

/// The process's one highlighter.
#[cfg(not(test))]
static HIGHLIGHTER: Mutex<Highlighter> = Mutex::new(Highlighter::new(Program::Find));

/// The unit tests' process renders code plain whatever is installed on the
/// machine (an `agent-highlight` on `PATH` must not change what they see);
/// `Highlighter`'s own tests give it a program, the e2e tests the real one.
#[cfg(test)]
static HIGHLIGHTER: Mutex<Highlighter> = Mutex::new(Highlighter {
    program: Program::Find,
    first_answer: FIRST_ANSWER,
    next_answer: NEXT_ANSWER,
    state: State::GivenUp,
});

/// `code` highlighted as `lang`, one string per line; `None` when it is to
/// be shown plain (unknown language, too big, no helper).
pub(super) fn highlight(code: &str, lang: &str, truecolor: bool) -> Option<Vec<String>> {
    let mut highlighter = HIGHLIGHTER.lock().unwrap_or_else(PoisonError::into_inner);
    highlighter.highlight(code, lang, truecolor)
}

/// Starts the helper ahead of need (a fenced block has begun to stream in),
/// so that its loading the syntaxes overlaps the rest of the block.
pub(super) fn warm_up() {
    let mut highlighter = HIGHLIGHTER.lock().unwrap_or_else(PoisonError::into_inner);
    // A helper that cannot start is given up here already.
    let _ = highlighter.helper();
}

/// The helper program as this process would find it.
pub(crate) fn find_highlighter() -> Result<PathBuf, String> {
    find_program("agent-highlight", "AGENT_HIGHLIGHT_BIN")
}

/// Starts `program`, has it highlight a line of Rust and says how long that
/// took (for `agent doctor`); the reason when it fails.
pub(crate) fn probe_highlighter(program: &Path) -> Result<Duration, String> {
    let started = Instant::now();
    let mut highlighter = Highlighter::new(Program::At(program.to_path_buf()));
    match highlighter.try_highlight("fn main() {}", "rust", false)? {
        Some(_) => Ok(started.elapsed()),
        None => Err("it does not know Rust".to_string()),
    }
}

/// Where the helper program is.
#[derive(Debug)]
enum Program {
    /// Found at start: [`find_highlighter`].
    Find,
    /// This one.
    At(PathBuf),
}

#[derive(Debug)]
enum State {
    NotStarted,
    Running(Helper),
    GivenUp,
}

/// Highlighting through one helper process, started on first use.
#[derive(Debug)]
struct Highlighter {
    program: Program,
    first_answer: Duration,
    next_answer: Duration,
    state: State,
}

impl Highlighter {
    const fn new(program: Program) -> Highlighter {
        Highlighter {
            program,
            first_answer: FIRST_ANSWER,
            next_answer: NEXT_ANSWER,
            state: State::NotStarted,
        }
    }

    /// Like [`highlight`]; a failed helper is given up.
    fn highlight(&mut self, code: &str, lang: &str, truecolor: bool) -> Option<Vec<String>> {
        match self.try_highlight(code, lang, truecolor) {
            Ok(lines) => lines,
            Err(_) => {
                // Dropping the helper kills and reaps it.
                self.state = State::GivenUp;
                None
            }
        }
    }

    /// The helper's answer: `Ok(None)` for code to show plain, `Err` when
    /// the helper is missing or failed.
    fn try_highlight(
        &mut self,
        code: &str,
        lang: &str,
        truecolor: bool,
    ) -> Result<Option<Vec<String>>, String> {
        if code.is_empty() || code.len() > HIGHLIGHT_MAX_BYTES || lang.is_empty() {
            return Ok(None);
        }
        // The text exactly as it is shown plain: the answer must be it, in
        // colour, line for line.
        let plain: Vec<String> = code.split('\n').map(|l| clean(l, "    ")).collect();
        let (first, next) = (self.first_answer, self.next_answer);
        let helper = self.helper()?;
        let deadline = if helper.answered { next } else { first };
        let request = json!({"lang": lang, "code": plain.join("\n"), "truecolor": truecolor});
        let answer = helper.ask(request.to_string(), deadline)?;
        helper.answered = true;
        checked_answer(&answer, &plain)
    }

    /// The running helper, started now if it was not yet; an error once it
    /// is given up (the reason when it could not start just now).
    fn helper(&mut self) -> Result<&mut Helper, String> {
        if let State::NotStarted = self.state {
            let program = match &self.program {
                Program::Find => find_highlighter(),
                Program::At(path) => Ok(path.clone()),
            };
            match program.and_then(|p| Helper::start(&p)) {
                Ok(helper) => self.state = State::Running(helper),
                Err(e) => {
                    self.state = State::GivenUp;
                    return Err(e);
                }
            }
        }
        match &mut self.state {
            State::Running(helper) => Ok(helper),
            State::NotStarted | State::GivenUp => Err("given up".to_string()),
        }
    }
}

/// A running `agent-highlight` and the two threads on its pipes.
#[derive(Debug)]
struct Helper {
    child: Child,
    /// Request lines for the writer thread; dropping it closes the helper's
    /// stdin.
    requests: Option<Sender<String>>,
    answers: Receiver<String>,
    /// It has answered once (later answers get the shorter wait).
    answered: bool,
}

impl Helper {
    fn start(program: &Path) -> Result<Helper, String> {
        // Its own process group: Ctrl-C at the terminal (cancelling a turn)
        // is for this client, not for the helper.
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("no pipes to the helper".to_string());
        };
        let (requests, to_write) = mpsc::channel();
        let (answered, answers) = mpsc::channel();
        let threads = std::thread::Builder::new()
            .name("highlight-writer".to_string())
            .spawn(move || write_requests(stdin, to_write))
            .and_then(|_| {
                std::thread::Builder::new()
                    .name("highlight-reader".to_string())
                    .spawn(move || read_answers(stdout, answered))
            });
        let helper = Helper {
            child,
            requests: Some(requests),
            answers,
            answered: false,
        };
        // On failure, dropping `helper` kills the child, which ends a thread
        // already started.
        threads.map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok(helper)
    }

    /// Sends one request line and waits up to `deadline` for its answer.
    fn ask(&mut self, request: String, deadline: Duration) -> Result<String, String> {
        let sent = self.requests.as_ref().map(|r| r.send(request));
        if !matches!(sent, Some(Ok(()))) {
            return Err("the helper's stdin is closed".to_string());
        }
        self.answers
            .recv_timeout(deadline)
            .map_err(|e| format!("no answer: {e}"))
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.requests = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The writer thread: each request on its own line, until the sender is
/// dropped or the helper stops reading.
fn write_requests(mut stdin: ChildStdin, requests: Receiver<String>) {
    for mut request in requests {
        request.push('\n');
        if stdin.write_all(request.as_bytes()).is_err() || stdin.flush().is_err() {
            return;
        }
    }
}

/// The reader thread: each answer line, until the helper's stdout ends, a
/// line is too long or the receiver is gone.
fn read_answers(stdout: ChildStdout, answers: Sender<String>) {
    let mut reader = BufReader::new(stdout);
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(ANSWER_MAX_BYTES)
            .read_until(b'\n', &mut line);
        if !matches!(read, Ok(n) if n > 0) || line.pop() != Some(b'\n') {
            return;
        }
        let Ok(line) = String::from_utf8(line) else {
            return;
        };
        if answers.send(line).is_err() {
            return;
        }
    }
}

/// The lines of an answer, held against the plain text they must show:
/// `Ok(None)` when the helper declined (show it plain), `Err` when the
/// answer is not one this client asked for.
fn checked_answer(answer: &str, plain: &[String]) -> Result<Option<Vec<String>>, String> {
    let value: Value =
        serde_json::from_str(answer).map_err(|e| format!("an answer that is not JSON: {e}"))?;
    if let Some(error) = value.get("error") {
        return Err(format!("the helper did not understand: {error}"));
    }
    let items = match value.get("lines") {
        Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) if items.len() == plain.len() => items,
        _ => return Err("an answer without the code's lines".to_string()),
    };
    let mut lines = Vec::with_capacity(items.len());
    for (item, plain) in items.iter().zip(plain) {
        match item.as_str() {
            Some(line) if uncoloured(line).as_deref() == Some(plain.as_str()) => {
                lines.push(line.to_string());
            }
            _ => return Err("an answer that changes the code".to_string()),
        }
    }
    Ok(Some(lines))
}

/// `line` without its colour sequences (`ESC [ digits and ; m`); `None` if
/// it holds any other escape.
fn uncoloured(line: &str) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.next() != Some('[') {
            return None;
        }
        loop {
            match chars.next()? {
                'm' => break,
                '0'..='9' | ';' => {}
                _ => return None,
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
