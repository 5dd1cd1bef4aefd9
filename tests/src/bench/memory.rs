//! Scenario `memory` (issue 13): what clients cost the daemon while they
//! are attached, and whether it comes back once they are gone.
//!
//! - **Attach bursts**: one conversation (one finished turn), then bursts of
//!   2,000 Attach streams, each on its own connection, opened by a helper
//!   process (this binary, `agent-bench --hold-attach`) whose clients read
//!   what they are sent, which is then killed with SIGKILL: the clients
//!   leave abruptly, as killed terminals do. Per
//!   burst: the daemon's RSS with the streams open, and 10 s after the kill;
//!   file descriptors and threads too.
//! - **`agent run` conversations**: 100 `agent --json run` processes one
//!   after the other, each a five-round turn (four `think` calls and an
//!   answer), on a daemon that unloads idle conversations after 2 s: RSS
//!   before, with the 100 loaded, and once every one is unloaded again;
//!   then a second batch of 100 on the same daemon.
//! - **A long reply to slow clients**: 100 attached clients that read
//!   nothing while a 2.5 MB reply streams (100,000 deltas), then read
//!   everything: the daemon's peak RSS over the turn.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::stats::{Report, Target};
use super::{Attached, BenchResult, Context as _, Settings, procfs};
use crate::fake_llm::{FakeLlm, ReplyScript, Script};
use crate::harness::{DaemonOptions, TestDaemon};

/// How long after the clients are gone the daemon's memory is read.
const SETTLE: Duration = Duration::from_secs(10);
/// Idle conversations unload after this in the `agent run` part.
const IDLE_UNLOAD_MS: u64 = 2_000;

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("memory");
    if settings.runs_part("bursts") {
        attach_bursts(settings, &mut report).await?;
    }
    if settings.runs_part("runs") {
        agent_runs(settings, &mut report).await?;
    }
    if settings.runs_part("slow") {
        slow_clients(settings, &mut report).await?;
    }
    Ok(report)
}

/// A bench daemon; `limits` is more of its `[limits]` section.
async fn start(fake: &FakeLlm, limits: &str) -> TestDaemon {
    TestDaemon::start_with(
        fake,
        DaemonOptions {
            extra_config: format!("{}{limits}{}", super::BENCH_CONFIG, super::store_section()),
            env: vec![("RUST_LOG".to_string(), "agentd=info".to_string())],
            ..DaemonOptions::default()
        },
    )
    .await
}

/// Open file descriptors of `pid`.
fn fds(pid: u32) -> f64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(f64::NAN, |d| d.count() as f64)
}

/// Threads of `pid`.
fn threads(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .unwrap_or(f64::NAN)
}

async fn attach_bursts(settings: &Settings, report: &mut Report) -> BenchResult<()> {
    let streams = settings.size(2_000, 200);
    let bursts = settings.size(10, 3);
    let fake = FakeLlm::start().await;
    let daemon = start(&fake, "").await;
    let pid = daemon.pid();
    let mut client = super::client(&daemon.socket).await?;
    fake.push(Script::text(
        "A short answer, so the transcript is not empty.",
    ));
    let id = super::create(&mut client, &daemon.work_dir, "hello", &[]).await?;
    super::wait_all_at_rest(&mut client, 1, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = procfs::rss_mib(pid);
    let (fds_before, threads_before) = (fds(pid), threads(pid));
    report.note(format!(
        "attach bursts: {bursts} × {streams} Attach streams on one conversation, each on its \
         own connection, opened by a helper process that is then killed with SIGKILL; the \
         daemon's RSS is read {} s after the kill",
        SETTLE.as_secs()
    ));
    report.sample(
        "burst_baseline_rss_mib",
        "attach bursts: daemon RSS before the first burst",
        "MiB",
        baseline,
    );
    let mut afters = Vec::new();
    for burst in 0..bursts {
        let before = procfs::rss_mib(pid);
        let mut holder = Holder::start(&daemon.socket, &id, streams)?;
        holder.wait_ready(Duration::from_secs(300))?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let open = procfs::rss_mib(pid);
        holder.kill();
        let killed_at = Instant::now();
        // The daemon notices the connections are gone.
        let deadline = killed_at + SETTLE;
        let mut gone_after = None;
        while Instant::now() < deadline {
            if gone_after.is_none() && fds(pid) <= fds_before {
                gone_after = Some(killed_at.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let after = procfs::rss_mib(pid);
        afters.push(after);
        report.sample(
            "burst_open_rss_mib",
            &format!("attach bursts: daemon RSS with {streams} streams open"),
            "MiB",
            open,
        );
        report.sample(
            "burst_per_stream_kib",
            "attach bursts: RSS per open Attach stream ((open − before the first burst) / streams)",
            "KiB",
            (open - baseline) * 1024.0 / streams as f64,
        );
        report.sample(
            "burst_after_rss_mib",
            &format!(
                "attach bursts: daemon RSS {} s after the clients were killed",
                SETTLE.as_secs()
            ),
            "MiB",
            after,
        );
        report.sample(
            "burst_after_over_baseline_mib",
            "attach bursts: that, over the RSS before the first burst",
            "MiB",
            after - baseline,
        );
        report.sample(
            "burst_fds_after",
            "attach bursts: file descriptors after, over before",
            "count",
            fds(pid) - fds_before,
        );
        report.sample(
            "burst_threads_after",
            "attach bursts: threads after, over before",
            "count",
            threads(pid) - threads_before,
        );
        report.note(format!(
            "burst {}: RSS {before:.1} MiB before, {open:.1} with the streams open, {after:.1} \
             after; descriptors back {}",
            burst + 1,
            gone_after.map_or("not within the wait".to_string(), |d| format!(
                "{:.1} s after the kill",
                d.as_secs_f64()
            ))
        ));
    }
    // Growth: the last three bursts' RSS after, against the first three's
    // (one burst's reading moves by a few MiB either way).
    let k = afters.len().min(3);
    if k > 0 {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        report.sample(
            "burst_growth_mib",
            &format!(
                "attach bursts: RSS after, mean of the last {k} bursts − mean of the first {k}"
            ),
            "MiB",
            mean(&afters[afters.len() - k..]) - mean(&afters[..k]),
        );
    }
    report.set_target("burst_after_over_baseline_mib", Target::AtMost(20.0));
    report.set_target("burst_per_stream_kib", Target::AtMost(64.0));
    report.set_target("burst_growth_mib", Target::AtMost(2.0));
    Ok(())
}

/// The helper process holding Attach streams open.
struct Holder {
    child: std::process::Child,
}

impl Holder {
    fn start(socket: &Path, id: &str, streams: usize) -> BenchResult<Holder> {
        let exe = std::env::current_exe().ctx("finding agent-bench")?;
        let child = Command::new(exe)
            .arg("--hold-attach")
            .arg(socket)
            .arg(id)
            .arg(streams.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .ctx("starting the attach holder")?;
        Ok(Holder { child })
    }

    /// Waits for the helper's `ready` line.
    fn wait_ready(&mut self, timeout: Duration) -> BenchResult<()> {
        let stdout = self.child.stdout.take().ctx("the holder's output")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        match rx.recv_timeout(timeout) {
            Ok(line) if line.trim() == "ready" => Ok(()),
            Ok(line) => Err(format!("the attach holder said {line:?}")),
            Err(_) => Err(format!(
                "the attach holder was not ready within {timeout:?}"
            )),
        }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `agent-bench --hold-attach SOCKET ID N`: opens N Attach streams on
/// conversation ID, each on its own connection, reads each one's snapshot,
/// prints `ready` and waits to be killed.
pub async fn hold_attach(socket: &Path, id: &str, n: usize) -> BenchResult<()> {
    use futures::StreamExt as _;
    let opened: Vec<BenchResult<Attached>> = futures::stream::iter(0..n)
        .map(|i| async move { Attached::open(socket, id, &format!("held-{i}")).await })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut held = Vec::with_capacity(n);
    for a in opened {
        let mut a = a?;
        // Each client reads what it is sent, as a terminal does (others
        // attaching and leaving, mostly).
        held.push(tokio::spawn(async move {
            while let Ok(Some(_)) = a.rx.message().await {}
            drop(a.tx);
        }));
    }
    println!("ready");
    // Killed here.
    std::future::pending::<()>().await;
    drop(held);
    Ok(())
}

async fn agent_runs(settings: &Settings, report: &mut Report) -> BenchResult<()> {
    let n = settings.size(100, 20);
    let fake = FakeLlm::start().await;
    let daemon = start(&fake, &format!("idle_unload_ms = {IDLE_UNLOAD_MS}\n")).await;
    let pid = daemon.pid();
    let script = |i: usize| {
        for round in 0..4 {
            fake.push(
                ReplyScript::new()
                    .tool_use(
                        &format!("toolu_{i}_{round}"),
                        "think",
                        json!({"thought": format!("step {round} of task {i}")}),
                    )
                    .into(),
            );
        }
        fake.push(Script::text(&format!("Task {i} is done.")));
    };
    // One run first, so what every run loads once (code pages, the HTTP
    // client, the store's first pages) is in the baseline.
    script(0);
    agent_run(&daemon, 0).await?;
    tokio::time::sleep(Duration::from_millis(IDLE_UNLOAD_MS) + SETTLE).await;
    // Two batches on the same daemon: the first also fills the store's
    // cache (sled, bounded at 8 MiB) with what the conversations wrote; the
    // second shows whether anything more stays behind.
    for (batch, key) in [(1, "runs"), (2, "runs2")] {
        for i in 0..n {
            script(batch * n + i);
        }
        let before = procfs::rss_mib(pid);
        let started = Instant::now();
        for i in 0..n {
            agent_run(&daemon, batch * n + i).await?;
        }
        let took = started.elapsed();
        let loaded = procfs::rss_mib(pid);
        tokio::time::sleep(Duration::from_millis(IDLE_UNLOAD_MS) + SETTLE).await;
        let unloaded = procfs::rss_mib(pid);
        let label = format!("agent run, batch {batch}");
        report.note(format!(
            "{label}: {n} `agent --json run` processes one after the other, each a five-round \
             turn (4 think calls + an answer), {:.1} s; idle_unload_ms = {IDLE_UNLOAD_MS}, RSS \
             read {} s after the last unload was due",
            took.as_secs_f64(),
            SETTLE.as_secs()
        ));
        report.sample(
            &format!("{key}_before_rss_mib"),
            &format!("{label}: daemon RSS before the {n} runs"),
            "MiB",
            before,
        );
        report.sample(
            &format!("{key}_loaded_rss_mib"),
            &format!("{label}: daemon RSS right after them (conversations loaded)"),
            "MiB",
            loaded,
        );
        report.sample(
            &format!("{key}_per_conversation_kib"),
            &format!("{label}: RSS per loaded conversation ((loaded − before) / n)"),
            "KiB",
            (loaded - before) * 1024.0 / n as f64,
        );
        report.sample(
            &format!("{key}_unloaded_rss_mib"),
            &format!("{label}: daemon RSS once every conversation is unloaded"),
            "MiB",
            unloaded,
        );
        report.sample(
            &format!("{key}_unloaded_over_before_mib"),
            &format!("{label}: that, over the RSS before the batch"),
            "MiB",
            unloaded - before,
        );
        report.set_target(
            &format!("{key}_unloaded_over_before_mib"),
            Target::AtMost(5.0),
        );
    }
    Ok(())
}

/// One `agent --json run` to its end.
async fn agent_run(daemon: &TestDaemon, i: usize) -> BenchResult<()> {
    let mut cmd = daemon.agent();
    cmd.arg("--json")
        .arg("run")
        .arg(format!("task {i}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| e.to_string())?
        .ctx("running `agent run`")?;
    if !out.status.success() {
        return Err(format!(
            "`agent run` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

async fn slow_clients(settings: &Settings, report: &mut Report) -> BenchResult<()> {
    let clients = settings.size(100, 10);
    let deltas = settings.size(100_000, 10_000);
    let fake = FakeLlm::start().await;
    let daemon = start(&fake, "").await;
    let pid = daemon.pid();
    for run in 0..settings.runs.min(3) {
        let mut client = super::client(&daemon.socket).await?;
        let id = super::create(&mut client, &daemon.work_dir, "", &[]).await?;
        let mut attached = Vec::with_capacity(clients);
        for i in 0..clients {
            attached.push(Attached::open(&daemon.socket, &id, &format!("slow-{i}")).await?);
        }
        fake.push(ReplyScript::new().deltas(deltas, "x").timestamps().into());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = procfs::rss_mib(pid);
        procfs::reset_hwm(pid);
        super::send(&mut client, &id, "stream").await?;
        super::wait_all_at_rest(&mut client, run + 1, Duration::from_secs(600)).await?;
        // Every client reads everything now.
        let readers: Vec<_> = attached
            .into_iter()
            .map(|mut a| {
                tokio::spawn(async move {
                    let mut frames = 0usize;
                    while a.next(Duration::from_secs(2)).await.is_ok() {
                        frames += 1;
                    }
                    frames
                })
            })
            .collect();
        for r in readers {
            r.await.map_err(|e| e.to_string())?;
        }
        let peak = procfs::hwm_mib(pid);
        report.sample(
            "slow_before_rss_mib",
            &format!("slow clients: daemon RSS before the turn ({clients} attached)"),
            "MiB",
            before,
        );
        report.sample(
            "slow_peak_rss_mib",
            &format!(
                "slow clients: daemon peak RSS over the turn and the {clients} clients' reading"
            ),
            "MiB",
            peak,
        );
    }
    report.note(format!(
        "slow clients: {clients} clients attached to one conversation read nothing while a \
         reply of {deltas} deltas (~2.5 MB) streams, then read everything; peak = VmHWM, reset \
         before each turn"
    ));
    Ok(())
}
