//! Scenario 1, tool-round overhead: one conversation, one scripted turn of
//! N rounds of `think` (no process) and, separately, N rounds of
//! `bash true`.
//!
//! A round: the fake streams a `tool_use` reply, the daemon persists it,
//! runs the tool, persists the result and sends the next request. The
//! daemon's share of it is measured two ways:
//!
//! - on the fake's own clock, from the last frame of a reply handed to the
//!   connection to the head of the next request read (the target's
//!   measure: nothing is subtracted, nothing replayed; loopback both ways
//!   and the fake's wake-up count against the daemon);
//! - the gap between two requests minus the fake's own time for the
//!   request, found afterwards by replaying every recorded body to the fake
//!   over a keep-alive HTTP/1.1 connection (request written → last reply
//!   byte read). The replay runs on an otherwise idle machine, so its
//!   timing can differ from the real round's, either way.

use std::time::{Duration, Instant};

use serde_json::json;

use super::stats::{Report, Target, percentile_sorted};
use super::{Attached, BenchResult, Context as _, FakeTimer, Settings, ms, procfs};
use crate::fake_llm::{FakeLlm, ReplyScript, Script};

/// Which tool a round calls.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Think,
    BashTrue,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Think => "think",
            Kind::BashTrue => "bash_true",
        }
    }

    fn script(self, run: usize, round: usize) -> Script {
        // Inputs differ per round: three identical calls in a row are a
        // doom loop, which asks for a permission.
        let (name, input) = match self {
            Kind::Think => (
                "think",
                json!({"thought": format!("step {round} of run {run}: check the next file")}),
            ),
            Kind::BashTrue => ("bash", json!({"command": format!("true {round}")})),
        };
        ReplyScript::new()
            .tool_use(&format!("toolu_{run}_{round}"), name, input)
            .into()
    }
}

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("tool-rounds");
    let fake = FakeLlm::start().await;
    let daemon = super::start_daemon(&fake).await;
    let pid = daemon.pid();
    let think_n = settings.size(200, 40);
    let bash_n = settings.size(50, 10);
    report.note(format!(
        "N = {think_n} think rounds and N = {bash_n} `bash true` rounds per run; one attached \
         client (as `agent run` has); daemon log level agentd=info"
    ));
    report.note(
        "overhead (reply end → next request) = on the fake's clock, from the last frame of a \
         tool_use reply handed to the connection to the head of the next request read: the \
         daemon's share of a round, nothing subtracted (loopback both ways and the fake's \
         wake-up included; the fake's parsing of the request and making of the reply excluded)",
    );
    report.note(
        "overhead, replay method = time between two model requests at the fake minus the fake's \
         own time for that request (replayed afterwards: request written → last reply byte \
         read, loopback included); CPU = the daemon's utime+stime over the turn / N (bash \
         children separately)",
    );
    for (kind, n) in [(Kind::Think, think_n), (Kind::BashTrue, bash_n)] {
        let mut fake_share = Vec::new();
        for run in 0..settings.runs {
            let r = one_run(&fake, &daemon, pid, kind, n, run).await?;
            let k = kind.key();
            report.sample(
                &format!("{k}_gap_ms"),
                &format!("{k}: overhead per round (reply end → next request), median"),
                "ms",
                r.direct_median,
            );
            report.sample(
                &format!("{k}_gap_p90_ms"),
                &format!("{k}: overhead per round (reply end → next request), p90"),
                "ms",
                r.direct_p90,
            );
            report.sample(
                &format!("{k}_overhead_ms"),
                &format!("{k}: overhead per round, replay method, median"),
                "ms",
                r.overhead_median,
            );
            report.sample(
                &format!("{k}_overhead_p90_ms"),
                &format!("{k}: overhead per round, replay method, p90"),
                "ms",
                r.overhead_p90,
            );
            report.sample(
                &format!("{k}_wall_ms"),
                &format!("{k}: wall time per round (turn / N)"),
                "ms",
                r.wall_per_round,
            );
            report.sample(
                &format!("{k}_cpu_ms"),
                &format!("{k}: daemon CPU per round"),
                "ms",
                r.cpu_per_round,
            );
            if matches!(kind, Kind::BashTrue) {
                report.sample(
                    "bash_true_child_cpu_ms",
                    "bash_true: CPU of the bash children per round",
                    "ms",
                    r.child_cpu_per_round,
                );
            }
            report.sample(
                &format!("{k}_fsync"),
                &format!("{k}: daemon fsync+fdatasync calls per round (perf)"),
                "calls",
                r.fsync_per_round,
            );
            report.sample(
                &format!("{k}_sync_file_range"),
                &format!("{k}: daemon sync_file_range calls per round (perf)"),
                "calls",
                r.sfr_per_round,
            );
            fake_share.push(r.fake_median);
        }
        fake_share.sort_by(f64::total_cmp);
        report.note(format!(
            "{}: the fake's own time per request, median of runs: {:.3} ms",
            kind.key(),
            super::stats::median_sorted(&fake_share)
        ));
    }
    report.set_target("think_gap_ms", Target::AtMost(1.0));
    report.set_target("bash_true_gap_ms", Target::AtMost(3.5));
    report.note(format!(
        "daemon peak RSS over the scenario: {:.1} MiB",
        procfs::hwm_mib(pid)
    ));
    Ok(report)
}

struct RunResult {
    overhead_median: f64,
    overhead_p90: f64,
    direct_median: f64,
    direct_p90: f64,
    fake_median: f64,
    wall_per_round: f64,
    cpu_per_round: f64,
    child_cpu_per_round: f64,
    fsync_per_round: f64,
    sfr_per_round: f64,
}

async fn one_run(
    fake: &FakeLlm,
    daemon: &crate::harness::TestDaemon,
    pid: u32,
    kind: Kind,
    n: usize,
    run: usize,
) -> BenchResult<RunResult> {
    let mut client = super::client(&daemon.socket).await?;
    let id = super::create(&mut client, &daemon.work_dir, "", &["bash"]).await?;
    let mut watcher = Attached::open(&daemon.socket, &id, "bench").await?;
    fake.push_all((0..n).map(|round| kind.script(run, round)));
    fake.push(Script::text("Done."));
    let first_request = fake.request_count();

    let counter = tokio::task::spawn_blocking(move || procfs::SyncCounter::start(pid))
        .await
        .map_err(|e| e.to_string())?;
    let cpu_before = procfs::cpu_times(pid).ctx("reading the daemon's CPU time")?;
    let started = Instant::now();
    super::send(&mut client, &id, &format!("run {n} tool rounds")).await?;
    watcher
        .until_at_rest(Duration::from_secs(600), |_, _| {})
        .await?;
    let wall = started.elapsed();
    let cpu = procfs::cpu_times(pid)
        .ctx("reading the daemon's CPU time")?
        .since(cpu_before);
    let syncs = match counter {
        Some(c) => tokio::task::spawn_blocking(move || c.stop())
            .await
            .map_err(|e| e.to_string())?,
        None => None,
    };

    let requests = fake.requests();
    let requests = requests.get(first_request..).ctx("the fake's requests")?;
    if requests.len() != n + 1 {
        return Err(format!(
            "expected {} model requests, the fake saw {}",
            n + 1,
            requests.len()
        ));
    }
    // Replay: the fake's own time for each request that was answered with
    // a tool_use (the one the round started from).
    let mut timer = FakeTimer::connect(fake).await?;
    let mut fake_times = Vec::with_capacity(n);
    for (round, request) in requests.iter().take(n).enumerate() {
        let body = serde_json::to_vec(&request.body).ctx("encoding a recorded request")?;
        fake.push(kind.script(run + 1000, round));
        fake_times.push(ms(timer.time(&body).await?));
    }
    let mut overheads: Vec<f64> = requests
        .windows(2)
        .zip(&fake_times)
        .map(|(pair, fake_ms)| {
            let gap = super::secs_between(pair[0].received_at, pair[1].received_at) * 1000.0;
            gap - fake_ms
        })
        .collect();
    overheads.sort_by(f64::total_cmp);
    fake_times.sort_by(f64::total_cmp);
    // The same gap on the fake's own clock, without a replay: from the
    // reply's last frame handed to the connection to the next request's
    // head read.
    let mut direct = requests
        .windows(2)
        .map(|pair| {
            let replied = pair[0]
                .replied_at
                .ctx("the fake did not note the end of a reply")?;
            Ok(super::secs_between(replied, pair[1].arrived_at) * 1000.0)
        })
        .collect::<BenchResult<Vec<f64>>>()?;
    direct.sort_by(f64::total_cmp);
    Ok(RunResult {
        overhead_median: super::stats::median_sorted(&overheads),
        overhead_p90: percentile_sorted(&overheads, 90.0).unwrap_or(f64::NAN),
        direct_median: super::stats::median_sorted(&direct),
        direct_p90: percentile_sorted(&direct, 90.0).unwrap_or(f64::NAN),
        fake_median: super::stats::median_sorted(&fake_times),
        wall_per_round: ms(wall) / n as f64,
        cpu_per_round: ms(cpu.own) / n as f64,
        child_cpu_per_round: ms(cpu.children) / n as f64,
        fsync_per_round: syncs.map_or(f64::NAN, |s| s.fsync as f64 / n as f64),
        sfr_per_round: syncs.map_or(f64::NAN, |s| s.sync_file_range as f64 / n as f64),
    })
}
