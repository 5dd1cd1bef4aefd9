//! The loops agents fall into, found before the next call runs.
//!
//! The oldest check (the same call with identical input too many times in
//! a row) misses the loops models really get stuck in:
//! - **cycles**: a few calls repeated with the same inputs and the same
//!   results (edit → test → the same edit back → the same test …);
//! - **cosmetic variants**: the same failing command again and again with
//!   only cosmetic changes (`cargo test`, `cargo test 2>&1 | tail -50`,
//!   `cd . && cargo  test`);
//! - **no progress**: rounds in a row that brought no new output and did
//!   nothing new that worked.
//!
//! [`detect`] looks at the recent calls ([`PastCall`]: digests of their
//! inputs and results, not the texts) and the call about to be judged,
//! and names the loop it finds. Every limit is configurable; 0 turns a
//! check off.

use crate::message::{ContentBlock, Message, Role, ToolCall};
use crate::permission::shell;
use crate::tools::Tool;

/// How much repetition each check allows (config `[loops]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopLimits {
    /// The same call with identical input this many times in a row.
    pub identical: usize,
    /// A block of calls (2 to [`LoopLimits::max_period`] long) seen this
    /// many times in a row with the same results, and the next call starts
    /// it again.
    pub cycles: usize,
    /// The longest block a cycle is looked for with.
    pub max_period: usize,
    /// The same failing shell command, up to cosmetic changes, this many
    /// times in a row (counting the next call).
    pub cosmetic: usize,
    /// Rounds in a row without progress before a call that repeats an
    /// earlier one.
    pub no_progress: usize,
}

impl Default for LoopLimits {
    fn default() -> Self {
        LoopLimits {
            identical: 3,
            cycles: 2,
            max_period: 4,
            cosmetic: 3,
            no_progress: 8,
        }
    }
}

/// What became of an earlier call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Its result was an error (a failing command, a refused edit…).
    pub failed: bool,
    /// A digest of its output ([`output_digest`]).
    pub output: u64,
}

/// An earlier call, as the loop checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastCall {
    /// The tool's name.
    pub name: String,
    /// A digest of its input.
    pub input: u64,
    /// A shell command's line with its cosmetic parts taken away
    /// ([`command_key`]); None for other tools.
    pub command: Option<String>,
    /// The round (the model's reply) it was made in: increasing, not
    /// necessarily consecutive.
    pub round: u64,
    /// None while it has no result.
    pub outcome: Option<Outcome>,
}

impl Outcome {
    /// The outcome of a result with `content`, an error or not.
    pub fn of(failed: bool, content: &str) -> Outcome {
        Outcome {
            failed,
            output: output_digest(content),
        }
    }
}

impl PastCall {
    /// `call`, made in `round`, with the outcome of its result when it has
    /// one.
    pub fn new(call: &ToolCall, round: u64, outcome: Option<Outcome>) -> PastCall {
        PastCall {
            name: call.name.clone(),
            input: input_digest(call),
            command: bash_command(call).map(command_key),
            round,
            outcome,
        }
    }

    fn same_call(&self, other: &PastCall) -> bool {
        self.name == other.name && self.input == other.input
    }
}

/// A loop found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loop {
    /// The same call with identical input `times` in a row.
    Identical { times: usize },
    /// `calls` (the block's tool names) `cycles` times in a row with the
    /// same results.
    Cycle { calls: Vec<String>, cycles: usize },
    /// `command` (as [`command_key`] reads it) failed `times` in a row
    /// with only cosmetic changes.
    Cosmetic { command: String, times: usize },
    /// `rounds` rounds in a row without progress.
    NoProgress { rounds: usize },
}

impl Loop {
    /// What the permission request and the log say: always starts with
    /// "doom loop: ".
    pub fn reason(&self, tool: &str) -> String {
        match self {
            Loop::Identical { times } => {
                format!("doom loop: {tool} was called with identical input {times} times in a row")
            }
            Loop::Cycle { calls, cycles } => format!(
                "doom loop: the same {} calls ({}) came {cycles} times in a row with the same results",
                calls.len(),
                calls.join(" → ")
            ),
            Loop::Cosmetic { command, times } => format!(
                "doom loop: `{command}` failed {} times in a row with only cosmetic changes, and is about to run again",
                times - 1
            ),
            Loop::NoProgress { rounds } => format!(
                "doom loop: {rounds} rounds in a row brought no new output, and {tool} repeats an earlier call"
            ),
        }
    }
}

/// The last `max` tool calls of `transcript`, oldest first, each with the
/// outcome of its result, leaving out the calls whose ids are in
/// `current` (those of the run in progress, which the core sees in the
/// state). A call's round is the index of its message.
pub fn recent_calls(transcript: &[Message], current: &[&str], max: usize) -> Vec<PastCall> {
    let mut results: Vec<(&str, Outcome)> = Vec::new();
    let mut calls = Vec::new();
    for (index, message) in transcript.iter().enumerate().rev() {
        if calls.len() >= max {
            break;
        }
        match message.role {
            Role::User => results.extend(message.content.iter().filter_map(|b| match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } => Some((tool_use_id.as_str(), Outcome::of(*is_error, content))),
                _ => None,
            })),
            Role::Assistant => {
                let mine: Vec<ToolCall> = message.tool_calls().collect();
                for call in mine.iter().rev() {
                    if calls.len() >= max || current.contains(&call.id.as_str()) {
                        continue;
                    }
                    let outcome = results
                        .iter()
                        .find(|(id, _)| *id == call.id)
                        .map(|(_, o)| *o);
                    calls.push(PastCall::new(call, index as u64, outcome));
                }
            }
        }
    }
    calls.reverse();
    calls
}

/// The loop `next` would continue, if any. `history` is the recent calls,
/// oldest first, ending with the calls of the current reply that come
/// before `next`.
pub fn detect(history: &[PastCall], next: &ToolCall, limits: &LoopLimits) -> Option<Loop> {
    let next = PastCall::new(next, u64::MAX, None);
    identical(history, &next, limits.identical)
        .or_else(|| cycle(history, &next, limits))
        .or_else(|| cosmetic(history, &next, limits.cosmetic))
        .or_else(|| no_progress(history, &next, limits.no_progress))
}

fn identical(history: &[PastCall], next: &PastCall, threshold: usize) -> Option<Loop> {
    if threshold < 2 {
        return None;
    }
    let repeats = history
        .iter()
        .rev()
        .take_while(|c| c.same_call(next))
        .count();
    (repeats + 1 >= threshold).then_some(Loop::Identical { times: repeats + 1 })
}

/// A block of `p` calls that came `cycles` times in a row, each time with
/// the same results, and that `next` starts again. Blocks of one call are
/// the identical check's.
fn cycle(history: &[PastCall], next: &PastCall, limits: &LoopLimits) -> Option<Loop> {
    if limits.cycles < 2 {
        return None;
    }
    (2..=limits.max_period).find_map(|p| {
        let span = p.checked_mul(limits.cycles)?;
        let tail = history.get(history.len().checked_sub(span)?..)?;
        let block = &tail[..p];
        let repeats = tail.chunks(p).all(|chunk| {
            chunk
                .iter()
                .zip(block)
                .all(|(c, b)| c.same_call(b) && c.outcome.is_some() && c.outcome == b.outcome)
        });
        let varied = block.iter().any(|c| !c.same_call(&block[0]));
        (repeats && varied && block[0].same_call(next)).then(|| Loop::Cycle {
            calls: block.iter().map(|c| c.name.clone()).collect(),
            cycles: limits.cycles,
        })
    })
}

/// The shell commands at the end of `history` that all failed and read
/// the same as `next` once cosmetic changes are taken away, not all of
/// them identical (that is the identical check's).
fn cosmetic(history: &[PastCall], next: &PastCall, threshold: usize) -> Option<Loop> {
    let key = next.command.as_ref()?;
    if threshold < 2 {
        return None;
    }
    let run: Vec<&PastCall> = history
        .iter()
        .rev()
        .take_while(|c| c.command.as_ref() == Some(key) && c.outcome.is_some_and(|o| o.failed))
        .collect();
    let times = run.len() + 1;
    let varied = run.iter().any(|c| c.input != next.input);
    (times >= threshold && varied).then(|| Loop::Cosmetic {
        command: key.clone(),
        times,
    })
}

/// The last `rounds` finished rounds made no progress, and `next`
/// repeats a call made in the window. A call made progress when its
/// output had not been seen before in the window, or when it did
/// something new (an input not seen before) and that worked.
fn no_progress(history: &[PastCall], next: &PastCall, rounds: usize) -> Option<Loop> {
    if rounds == 0 || !history.iter().any(|c| c.same_call(next)) {
        return None;
    }
    // The finished calls: a call without a result is of the current reply.
    let done: Vec<&PastCall> = history.iter().filter(|c| c.outcome.is_some()).collect();
    let mut seen_rounds: Vec<u64> = done.iter().map(|c| c.round).collect();
    seen_rounds.dedup();
    // Rounds before the window's first one did happen: the window must
    // hold one round more than it judges, so that the first judged round
    // has something before it to be compared with.
    let judged = seen_rounds.get(seen_rounds.len().checked_sub(rounds + 1)? + 1..)?;
    let first = *judged.first()?;
    let progress = done.iter().enumerate().any(|(i, c)| {
        if c.round < first {
            return false;
        }
        let earlier = &done[..i];
        let new_output = !earlier
            .iter()
            .any(|e| e.outcome.map(|o| o.output) == c.outcome.map(|o| o.output));
        let new_input = !earlier.iter().any(|e| e.same_call(c));
        let worked = c.outcome.is_some_and(|o| !o.failed);
        new_output || (new_input && worked)
    });
    (!progress).then_some(Loop::NoProgress { rounds })
}

/// The command line of a `bash` call.
fn bash_command(call: &ToolCall) -> Option<&str> {
    (Tool::from_name(&call.name) == Some(Tool::Bash))
        .then(|| {
            call.input
                .get("command")
                .and_then(serde_json::Value::as_str)
        })
        .flatten()
}

/// Programs that only look at another command's output in a pipeline, or
/// move around: taking them away leaves the command that does the work.
const COSMETIC_PROGRAMS: &[&str] = &[
    "cd", "head", "tail", "less", "more", "grep", "egrep", "rg", "sort", "uniq", "wc", "tee",
    "cat", "true",
];

/// `command` with its cosmetic parts taken away: redirections, `cd`s and
/// programs that only filter output are dropped, quotes and spacing do
/// not count, and options are put in order (`cargo test -q --lib` and
/// `cd . && cargo test --lib -q 2>&1 | tail -40` read the same). A line
/// that cannot be read is its words joined by single spaces.
pub fn command_key(command: &str) -> String {
    let Ok(script) = shell::parse(command) else {
        return command.split_whitespace().collect::<Vec<_>>().join(" ");
    };
    let word = |w: &shell::Word| w.literal.clone().unwrap_or_else(|| w.raw.clone());
    let commands: Vec<String> = script
        .commands
        .iter()
        .filter(|words| {
            words
                .first()
                .map(word)
                .is_some_and(|program| !COSMETIC_PROGRAMS.contains(&program.as_str()))
        })
        .map(|words| {
            let (mut options, rest): (Vec<String>, Vec<String>) =
                words.iter().map(word).partition(|w| w.starts_with('-'));
            options.sort();
            rest.into_iter()
                .chain(options)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    if commands.is_empty() {
        script.normalized
    } else {
        commands.join(" ; ")
    }
}

/// A digest of a call's input: its JSON text, hashed.
fn input_digest(call: &ToolCall) -> u64 {
    let mut hasher = Fnv::default();
    // Writing JSON into a hasher cannot fail; an input that somehow could
    // not be written keeps the digest of what was written.
    let _ = serde_json::to_writer(&mut hasher, &call.input);
    hasher.0
}

/// Bytes of an output's start and of its end that its digest reads,
/// besides its length: outputs that differ only in the middle are taken
/// as the same, which keeps the check cheap on large outputs.
const OUTPUT_SAMPLE: usize = 512;

/// A digest of a result's text: its length, its first and its last
/// [`OUTPUT_SAMPLE`] bytes.
pub fn output_digest(content: &str) -> u64 {
    let bytes = content.as_bytes();
    let mut hasher = Fnv::default();
    hasher.feed(&(bytes.len() as u64).to_le_bytes());
    if bytes.len() <= 2 * OUTPUT_SAMPLE {
        hasher.feed(bytes);
    } else {
        hasher.feed(&bytes[..OUTPUT_SAMPLE]);
        hasher.feed(&bytes[bytes.len() - OUTPUT_SAMPLE..]);
    }
    hasher.0
}

/// 64-bit FNV-1a: deterministic on every platform and in every process,
/// unlike the standard library's hasher, which promises neither.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl std::io::Write for Fnv {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.feed(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
