//! Long-running randomized tests ("fuzzing") with a time budget, for the
//! parts of agentd that read untrusted input. The program `agent-fuzz`
//! runs one target for as long as it is told (`tests/fuzz.sh` runs them all
//! for ten minutes each); the test suite runs each for a few seconds
//! through the same code (`tests/e2e/suite/fuzz.rs`).
//!
//! Targets:
//! - [`sse`]: the SSE decoder and the providers' stream parsers, in
//!   process: random event streams and random bytes, cut at random
//!   places. Never a panic; every cut gives the events of an independent
//!   reference reading of the whole stream; a provider reads the same reply
//!   (or the same error) whatever the cuts.
//! - [`rules`]: the permission rule parser, the shell-command parser and
//!   `Policy::evaluate`, in process: random and grammar-built text. Never a
//!   panic; deny always wins (a call some deny rule surely matches is
//!   denied, whatever else the rules say and in every mode; adding allow
//!   or ask rules or changing the mode never lifts a denial).
//! - [`frames`] (`grpc-frames`): a real daemon, and random HTTP/2 and gRPC
//!   frames sent raw on its socket. After every case the daemon is alive
//!   and still answers; its log shows no panic; its memory stays bounded.
//! - [`sequences`] (`rpc-sequences`): a real daemon with the crash test's
//!   scripted model, and several clients sending random sequences of RPCs
//!   (creating, sending, cancelling, answering permissions, attaching and
//!   detaching, dropping connections mid-call). After every round, once
//!   everything is at rest, the crash test's invariants hold.
//!
//! Every random choice comes from the seed, printed first: `--seed`
//! repeats a run (for the daemon targets, timing adds its own variation).

pub mod frames;
pub mod rules;
pub mod sequences;
pub mod sse;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::harness::DaemonOptions;

/// The targets, by the name the program takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Sse,
    Rules,
    GrpcFrames,
    RpcSequences,
}

impl Target {
    /// Every target, in the order `all` runs them.
    pub const ALL: [Target; 4] = [
        Target::Sse,
        Target::Rules,
        Target::GrpcFrames,
        Target::RpcSequences,
    ];

    /// The target's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sse => "sse",
            Target::Rules => "rules",
            Target::GrpcFrames => "grpc-frames",
            Target::RpcSequences => "rpc-sequences",
        }
    }

    /// The target called `name`.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// How a run goes.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    /// How long to keep generating cases.
    pub budget: Duration,
    /// Seed of every random choice.
    pub seed: u64,
    /// Print progress lines (about every ten seconds).
    pub progress: bool,
    /// Daemon options, for the targets that run one.
    pub daemon: DaemonOptions,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        FuzzOptions {
            budget: Duration::from_secs(10),
            seed: 0,
            progress: false,
            daemon: DaemonOptions::default(),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: Target,
    pub seed: u64,
    pub elapsed: Duration,
    /// Cases run.
    pub cases: u64,
    /// Each failure found: what went wrong and the (minimized) input.
    pub failures: Vec<String>,
    /// Further facts worth a line (memory, counters).
    pub notes: Vec<String>,
}

impl Report {
    fn new(target: Target, seed: u64) -> Report {
        Report {
            target,
            seed,
            elapsed: Duration::ZERO,
            cases: 0,
            failures: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Records a failure; the run goes on (up to [`MAX_FAILURES`]).
    fn fail(&mut self, what: String) {
        if self.failures.len() < MAX_FAILURES {
            self.failures.push(what);
        }
    }

    /// Whether the run should stop: enough failures to act on.
    fn full(&self) -> bool {
        self.failures.len() >= MAX_FAILURES
    }

    /// Whether no failure was found.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// After this many failures a run stops: they are usually one bug.
const MAX_FAILURES: usize = 5;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "agent-fuzz {}: {} cases in {:.1} s ({:.0}/s), seed {}, {} failure(s)",
            self.target.name(),
            self.cases,
            secs,
            self.cases as f64 / secs.max(1e-9),
            self.seed,
            self.failures.len()
        )?;
        for note in &self.notes {
            writeln!(f, "  {note}")?;
        }
        for (i, failure) in self.failures.iter().enumerate() {
            writeln!(f, "  FAILURE {}: {failure}", i + 1)?;
        }
        Ok(())
    }
}

/// Runs `target` for the budget.
pub async fn run(target: Target, opts: FuzzOptions) -> Report {
    let started = Instant::now();
    let mut report = match target {
        Target::Sse => blocking(move || sse::run(&opts)).await,
        Target::Rules => blocking(move || rules::run(&opts)).await,
        Target::GrpcFrames => frames::run(&opts).await,
        Target::RpcSequences => sequences::run(&opts).await,
    };
    report.elapsed = started.elapsed();
    report
}

async fn blocking(f: impl FnOnce() -> Report + Send + 'static) -> Report {
    match tokio::task::spawn_blocking(f).await {
        Ok(report) => report,
        Err(e) => panic!("the fuzz target's thread failed: {e}"),
    }
}

/// A seed from the clock, for runs that should differ (and print it).
pub fn seed_from_clock() -> u64 {
    crate::crash::seed_from_clock()
}

/// Says how far a run got, every ten seconds or so.
struct Progress {
    on: bool,
    target: Target,
    started: Instant,
    last: Instant,
}

impl Progress {
    fn new(target: Target, on: bool) -> Progress {
        let now = Instant::now();
        Progress {
            on,
            target,
            started: now,
            last: now,
        }
    }

    fn tick(&mut self, cases: u64, extra: impl FnOnce() -> String) {
        if self.on && self.last.elapsed() >= Duration::from_secs(10) {
            self.last = Instant::now();
            println!(
                "agent-fuzz {}: {:.0} s, {cases} cases{}",
                self.target.name(),
                self.started.elapsed().as_secs_f64(),
                extra()
            );
        }
    }
}

thread_local! {
    /// Whether panics on this thread are being caught by [`catch`] (and so
    /// should not be printed).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// The last panic caught on this thread: message and location.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic into `Err` with its message and location.
/// Panics caught here are not printed; other threads' panics are printed
/// as before (the hook passes them on).
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".to_string());
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                CAUGHT.with(|c| *c.borrow_mut() = Some(format!("panic: {message}{at}")));
            } else {
                previous(info);
            }
        }));
    });
    let was = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|_| {
        CAUGHT
            .with(|c| c.borrow_mut().take())
            .unwrap_or_else(|| "panic".to_string())
    })
}

/// Shrinks `input` while `fails` still holds: drops ever smaller runs of
/// elements (halves, quarters, … single ones), at most `budget` tries.
pub fn minimize<T: Clone>(
    input: &[T],
    budget: usize,
    mut fails: impl FnMut(&[T]) -> bool,
) -> Vec<T> {
    let mut best = input.to_vec();
    let mut tries = 0;
    let mut chunk = best.len().div_ceil(2).max(1);
    loop {
        let mut shrunk = false;
        let mut at = 0;
        while at < best.len() {
            if tries >= budget {
                return best;
            }
            tries += 1;
            let end = (at + chunk).min(best.len());
            let mut candidate = best[..at].to_vec();
            candidate.extend_from_slice(&best[end..]);
            if fails(&candidate) {
                best = candidate;
                shrunk = true;
            } else {
                at += chunk;
            }
        }
        if chunk == 1 && !shrunk {
            return best;
        }
        if !shrunk {
            chunk = chunk.div_ceil(2).max(1);
        }
    }
}

/// Bytes as a Rust byte-string literal (printable ASCII kept).
pub fn show_bytes(bytes: &[u8]) -> String {
    let mut s = String::from("b\"");
    for &b in bytes {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(char::from(b)),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimize_keeps_what_the_failure_needs() {
        let input: Vec<u32> = (0..100).collect();
        let out = minimize(&input, 10_000, |c| c.contains(&17) && c.contains(&80));
        assert_eq!(out, vec![17, 80]);
        // A budget of nothing leaves the input as it was.
        assert_eq!(minimize(&input, 0, |_| true), input);
    }

    #[test]
    fn catch_reports_the_panic_message() {
        assert_eq!(catch(|| 3), Ok(3));
        let err = catch(|| -> u8 { panic!("boom {}", 7) }).unwrap_err();
        assert!(err.starts_with("panic: boom 7 at "), "{err}");
    }

    #[test]
    fn targets_read_back_by_name() {
        for t in Target::ALL {
            assert_eq!(Target::from_name(t.name()), Some(t));
        }
        assert_eq!(Target::from_name("nope"), None);
    }
}
