//! The power-cut test program: runs a busy agentd with its data directory
//! on a layer that loses every unsynced write, cuts the power again and
//! again, and checks after every restart that `[store] sync` kept its
//! promise. See `agent_tests::power` for what is checked and
//! `agent_tests::power::layer` for the layer.
//!
//! ```text
//! cargo build -p agent-tests --bins     # the daemon it runs: test-agentd
//! target/debug/power-cut [--cuts N] [--seed S] [--sync power|kill] [--budget-secs T]
//! ```
//!
//! Defaults: 20 cuts, a seed from the clock, `--sync power`, 3 turns
//! started before each cut, 25 % of the restarts cut again within 300 ms
//! (`--recovery-cuts PERCENT`), no time budget (with one, no cut starts after
//! it and the summary says how many were made). It prints the seed first;
//! `--seed` repeats a run's plan. Exits 0 after the summary line, 1 with a
//! description of the first violation (the daemon's directory is kept and
//! named), 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

use agent_tests::crash;
use agent_tests::power::{self, PowerOptions, SyncMode};

const USAGE: &str = "usage: power-cut [--cuts N] [--seed S] [--sync power|kill] \
[--budget-secs T] [--conversations C] [--max-rounds R] [--min-delay-ms MS] [--max-delay-ms MS] [--rest-ms MS] [--recovery-cuts PERCENT] [--quiet]";

fn parse(args: &[String]) -> Result<PowerOptions, String> {
    let mut opts = PowerOptions {
        seed: crash::seed_from_clock(),
        ..PowerOptions::default()
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--quiet" {
            opts.progress = false;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: {value:?} is not a number"))
        };
        match flag.as_str() {
            "--cuts" => opts.cuts = number()? as usize,
            "--seed" => opts.seed = number()?,
            "--sync" => {
                opts.sync = match value.as_str() {
                    "power" => SyncMode::Power,
                    "kill" => SyncMode::Kill,
                    other => return Err(format!("--sync: {other:?} is not power or kill")),
                }
            }
            "--budget-secs" => opts.budget = Some(Duration::from_secs(number()?)),
            "--conversations" => opts.conversations = (number()? as usize).max(1),
            "--max-rounds" => opts.max_rounds = u32::try_from(number()?).unwrap_or(u32::MAX),
            "--min-delay-ms" => opts.min_delay = Duration::from_millis(number()?),
            "--max-delay-ms" => opts.max_delay = Duration::from_millis(number()?),
            "--rest-ms" => opts.rest = Some(Duration::from_millis(number()?)),
            "--recovery-cuts" => opts.double_cut = number()?.min(100) as f64 / 100.0,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if opts.min_delay > opts.max_delay {
        return Err("--min-delay-ms is above --max-delay-ms".into());
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
            eprintln!("power-cut: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!(
        "power-cut: seed {} ({} cuts, sync = {:?}, {} turns per cut; repeat with --seed {})",
        opts.seed,
        opts.cuts,
        opts.sync.name(),
        opts.conversations,
        opts.seed
    );
    match power::run(opts).await {
        Ok(summary) => {
            println!("power-cut: {}", summary.details());
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
