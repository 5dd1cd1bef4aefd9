//! The attack program: a real agentd with a TCP listener, attacked for a
//! time budget by hostile tokens, peers, import files, repositories and a
//! hostile model, with its invariants checked after every step. See
//! `agent_tests::attack` for what is tried and checked.
//!
//! ```text
//! cargo build -p agent-tests --bins     # the daemon it runs: test-agentd
//! target/debug/attack [--minutes M] [--seconds S] [--seed N] [--quiet]
//! ```
//!
//! Defaults: 1 minute, a seed from the clock. It prints the seed first;
//! `--seed` repeats a run's choices (the daemon's timing varies). Exits 0
//! after the summary line, 1 with the first violation (the run's directory
//! is kept and named), 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

use agent_tests::attack::{self, AttackOptions};

const USAGE: &str = "usage: attack [--minutes M] [--seconds S] [--seed N] [--quiet]";

fn parse(args: &[String]) -> Result<AttackOptions, String> {
    let mut opts = AttackOptions {
        seed: agent_tests::crash::seed_from_clock(),
        duration: Duration::from_secs(60),
        progress: true,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--quiet" => {
                opts.progress = false;
                continue;
            }
            "-h" | "--help" => return Err(String::new()),
            _ => {}
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = value
            .parse::<u64>()
            .map_err(|_| format!("{flag}: {value:?} is not a number"))?;
        match flag.as_str() {
            "--minutes" => opts.duration = Duration::from_secs(number.saturating_mul(60)),
            "--seconds" => opts.duration = Duration::from_secs(number),
            "--seed" => opts.seed = number,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(opts)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse(&args) {
        Ok(opts) => opts,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("attack: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!(
        "attack: seed {} for {} s (repeat with --seed {})",
        opts.seed,
        opts.duration.as_secs(),
        opts.seed
    );
    match attack::run(opts).await {
        Ok(summary) => {
            println!("attack: {summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
