//! The fuzz program: runs one target of `agent_tests::fuzz` (or all of
//! them, one after the other) for a time budget and reports the cases run
//! and every failure with its (minimized) input. See `tests/fuzz.sh`.
//!
//! ```text
//! cargo build --release -p agent-tests --bins
//! target/release/agent-fuzz TARGET [--seconds N] [--seed S] [--quiet]
//! ```
//!
//! Targets: `sse`, `rules`, `grpc-frames`, `rpc-sequences`, `all`. The
//! seed is printed first; `--seed` repeats a run. Exits 0 when no target
//! found a failure, 1 when one did, 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

use agent_tests::fuzz::{self, FuzzOptions, Target};

const USAGE: &str = "usage: agent-fuzz sse|rules|grpc-frames|rpc-sequences|all \
[--seconds N] [--seed S] [--quiet]";

fn parse(args: &[String]) -> Result<(Vec<Target>, FuzzOptions), String> {
    let mut opts = FuzzOptions {
        budget: Duration::from_secs(600),
        seed: fuzz::seed_from_clock(),
        progress: true,
        ..FuzzOptions::default()
    };
    let mut targets = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--quiet" => opts.progress = false,
            "--seconds" | "--seed" => {
                let value = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
                if arg == "--seed" {
                    opts.seed = value
                        .parse()
                        .map_err(|_| format!("--seed: {value:?} is not a number"))?;
                } else {
                    let secs: f64 = value
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                        .ok_or_else(|| format!("--seconds: {value:?} is not a duration"))?;
                    opts.budget = Duration::from_secs_f64(secs);
                }
            }
            "all" if targets.is_none() => targets = Some(Target::ALL.to_vec()),
            name if targets.is_none() && !name.starts_with('-') => {
                let target =
                    Target::from_name(name).ok_or_else(|| format!("unknown target {name:?}"))?;
                targets = Some(vec![target]);
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let targets = targets.ok_or_else(|| "which target?".to_string())?;
    Ok((targets, opts))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (targets, opts) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("agent-fuzz: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for target in targets {
        println!(
            "agent-fuzz {}: seed {} for {:.0} s (repeat with --seed {})",
            target.name(),
            opts.seed,
            opts.budget.as_secs_f64(),
            opts.seed
        );
        let report = fuzz::run(target, opts.clone()).await;
        print!("{report}");
        failed |= !report.passed();
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
