//! The crash test program: SIGKILLs a busy agentd again and again and checks
//! after every restart that nothing acknowledged was lost and nothing broke.
//! See `agent_tests::crash` for what is checked.
//!
//! ```text
//! cargo build -p agent-tests --bins     # the daemon it runs: test-agentd
//! cargo run -p agent-tests --bin crash-test -- [--kills N] [--seed S] [--conversations C]
//! ```
//!
//! Defaults: 20 kills, a seed from the clock, 4 conversations per kill, 30 %
//! of the turns spawning sub-agents (`--spawns PERCENT`), 30 % of the
//! kills with a conversation deleted among the turns (`--deletes
//! PERCENT`). It
//! prints the seed first; `--seed` repeats a run's plan. Exits 0 after the
//! summary line, 1 with a description of the first violation (the daemon's
//! directory is kept and named), 2 on a usage error.
//!
//! One conversation works in a git repository: its commands change the
//! repository's files, and after every restart its code is rewound to its
//! first message and the repository checked (`--no-git` leaves it out).
//!
//! `--tolerate-non-atomic-create` counts instead of failing when a
//! conversation created with a prompt is left without it by a kill (a bug
//! this program found and the daemon fixed); it exists to keep a long run
//! going while another such bug is hunted.

use std::process::ExitCode;
use std::time::Duration;

use agent_tests::crash::{self, CrashOptions};

const USAGE: &str = "usage: crash-test [--kills N] [--seed S] [--conversations C] \
[--max-rounds R] [--min-delay-ms MS] [--max-delay-ms MS] [--spawns PERCENT] [--deletes PERCENT] \
[--no-git] [--tolerate-non-atomic-create] [--quiet]";

fn parse(args: &[String]) -> Result<CrashOptions, String> {
    let mut opts = CrashOptions {
        seed: crash::seed_from_clock(),
        ..CrashOptions::default()
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--quiet" {
            opts.progress = false;
            continue;
        }
        if flag == "--no-git" {
            opts.git = false;
            continue;
        }
        if flag == "--tolerate-non-atomic-create" {
            opts.tolerate_non_atomic_create = true;
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
            "--kills" => opts.kills = number()? as usize,
            "--seed" => opts.seed = number()?,
            "--conversations" => opts.conversations = (number()? as usize).max(1),
            "--max-rounds" => opts.max_rounds = u32::try_from(number()?).unwrap_or(u32::MAX),
            "--min-delay-ms" => opts.min_delay = Duration::from_millis(number()?),
            "--max-delay-ms" => opts.max_delay = Duration::from_millis(number()?),
            "--spawns" => opts.spawns = number()?.min(100) as f64 / 100.0,
            "--deletes" => opts.deletes = number()?.min(100) as f64 / 100.0,
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
            eprintln!("crash-test: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!(
        "crash-test: seed {} ({} kills, {} conversations per kill; repeat with --seed {})",
        opts.seed, opts.kills, opts.conversations, opts.seed
    );
    match crash::run(opts).await {
        Ok(summary) => {
            println!("crash-test: {}", summary.details());
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
