//! Benchmarks of agentd against an instant fake LLM (issue 7).
//!
//! ```text
//! cargo build --release -p agent-tests --bins
//! cargo run --release -p agent-tests --bin agent-bench -- SCENARIO [--json] [--runs N] [--quick] [--tree DIR]
//! ```
//!
//! SCENARIO is one of `floor`, `tool-rounds`, `fanout`, `many`, `memory`, `startup`,
//! `durability`, `request-bytes`, `search`, or `all`; and `ls-ab --client A_BIN
//! --client B_BIN`, not part of `all`, compares two client builds. Each prints a Markdown
//! table (median, min and max over the runs, the target if the issue sets
//! one) and then one JSON line; with `--json` the tables go to stderr and
//! stdout has only the JSON lines. The daemon is the release `test-agentd`
//! next to this binary (or `$AGENT_TESTS_DAEMON_BIN`).

use std::process::ExitCode;
use std::time::Instant;

use agent_tests::bench::{self, BenchResult, Settings, procfs, stats::Report};

const SCENARIOS: [&str; 10] = [
    "floor",
    "tool-rounds",
    "fanout",
    "many",
    "memory",
    "startup",
    "durability",
    "request-bytes",
    "search",
    "early-tools",
];

const USAGE: &str = "usage: agent-bench SCENARIO [--json] [--runs N] [--quick] [--tree DIR] [--sync kill|power] [--cache-bytes N] [--part NAME] [--client BIN]\n\
    SCENARIO: floor | tool-rounds | fanout | many | memory | startup | durability | request-bytes | search | early-tools | all\n\
    or: ls-ab --client A_BIN --client B_BIN (`agent ls` start-up of two client builds, alternating)";

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("--hold-attach") => return hold_attach(),
        Some("--floor-loop") => return floor_loop(),
        _ => {}
    }
    let mut scenario = None;
    let mut json_only = false;
    let mut settings = Settings {
        runs: 5,
        quick: false,
        search_tree: None,
        part: None,
        clients: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json_only = true,
            "--quick" => settings.quick = true,
            "--runs" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => settings.runs = n,
                _ => return usage("--runs needs a positive number"),
            },
            "--sync" => match args.next().as_deref() {
                Some("kill") => {}
                Some("power") => bench::use_power_sync(),
                _ => return usage("--sync needs kill or power"),
            },
            "--cache-bytes" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => bench::use_cache_bytes(n),
                _ => return usage("--cache-bytes needs a positive number"),
            },
            "--part" => match args.next() {
                Some(part) => settings.part = Some(part),
                None => return usage("--part needs a name (memory: bursts, runs, slow)"),
            },
            "--client" => match args.next() {
                Some(bin) => settings.clients.push(bin.into()),
                None => return usage("--client needs a client binary"),
            },
            "--tree" => match args.next() {
                Some(dir) => settings.search_tree = Some(dir.into()),
                None => return usage("--tree needs a directory"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            s if scenario.is_none() && (s == "all" || s == "ls-ab" || SCENARIOS.contains(&s)) => {
                scenario = Some(s.to_string());
            }
            other => return usage(&format!("unexpected argument {other:?}")),
        }
    }
    let Some(scenario) = scenario else {
        return usage("which scenario?");
    };
    if let Err(e) = check_binaries() {
        eprintln!("agent-bench: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agent-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let list: Vec<&str> = if scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        vec![scenario.as_str()]
    };
    let say = |text: &str| {
        if json_only {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    say(&format!(
        "agent-bench: {}; load average {:.2} at start; {} run(s); store sync {}{}",
        procfs::machine(),
        procfs::load_average(),
        settings.runs,
        bench::store_sync(),
        if settings.quick { ", quick sizes" } else { "" }
    ));
    let mut failed = false;
    for name in list {
        let started = Instant::now();
        let load_before = procfs::load_average();
        let result = runtime.block_on(run_one(name, &settings));
        match result {
            Ok(mut report) => {
                report.note(format!(
                    "took {:.0} s; load average {load_before:.2} before, {:.2} after",
                    started.elapsed().as_secs_f64(),
                    procfs::load_average()
                ));
                say(&report.table());
                println!("{}", report.json());
            }
            Err(e) => {
                failed = true;
                eprintln!("agent-bench: {name} failed: {e}");
                println!("{}", serde_json::json!({"scenario": name, "error": e}));
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run_one(name: &str, settings: &Settings) -> BenchResult<Report> {
    match name {
        "floor" => bench::floor::run(settings).await,
        "tool-rounds" => bench::tool_rounds::run(settings).await,
        "fanout" => bench::fanout::run(settings).await,
        "many" => bench::many::run(settings).await,
        "memory" => bench::memory::run(settings).await,
        "startup" => bench::startup::run(settings).await,
        "durability" => bench::durability::run(settings).await,
        "request-bytes" => bench::request_bytes::run(settings).await,
        "search" => bench::search::run(settings).await,
        "ls-ab" => bench::ls_ab::run(settings).await,
        "early-tools" => bench::early_tools::run(settings).await,
        other => Err(format!("unknown scenario {other}")),
    }
}

/// The daemon and client binaries must have been built next to this one
/// (`cargo run --bin agent-bench` builds only the bench).
fn check_binaries() -> BenchResult<()> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("no directory for the bench binary")?;
    for (var, name) in [
        ("AGENT_TESTS_DAEMON_BIN", "test-agentd"),
        ("AGENT_TESTS_CLIENT_BIN", "test-agent"),
    ] {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            continue;
        }
        let path = dir.join(name);
        if !path.exists() {
            return Err(format!(
                "{} is missing: run `cargo build --release -p agent-tests --bins` first \
                 (tests/bench.sh does)",
                path.display()
            ));
        }
    }
    Ok(())
}

/// `agent-bench --hold-attach SOCKET ID N`: the helper process of the
/// memory scenario, which holds N Attach streams open until it is killed.
/// `agent-bench --floor-loop ADDR PROMPT`: the floor scenario's minimal
/// agent loop; prints how many tool rounds it ran and its own CPU time in
/// nanoseconds.
fn floor_loop() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let [addr, prompt] = args.as_slice() else {
        return usage("--floor-loop needs ADDR PROMPT");
    };
    match bench::floor::floor_loop(addr, prompt) {
        Ok(rounds) => {
            let cpu = procfs::own_cpu().unwrap_or_default();
            println!("{rounds} {}", cpu.as_nanos());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agent-bench --floor-loop: {e}");
            ExitCode::FAILURE
        }
    }
}

fn hold_attach() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let [socket, id, n] = args.as_slice() else {
        return usage("--hold-attach needs SOCKET ID N");
    };
    let Ok(n) = n.parse::<usize>() else {
        return usage("--hold-attach: N must be a number");
    };
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(bench::memory::hold_attach(socket.as_ref(), id, n)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-bench --hold-attach: {e}");
            println!("failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("agent-bench: {problem}\n{USAGE}");
    ExitCode::from(2)
}
