//! Scenario 3, many conversations: 1,000 conversations each start a turn at
//! once (created with their prompt, concurrently); the turns need 3,000
//! model rounds in all. Then memory: idle with those 1,000 loaded, and idle
//! after a restart with 10,000 persisted conversations.
//!
//! The fake answers requests in arrival order, not per conversation: the
//! queue holds 2,000 `think` tool calls and then 1,000 final answers, so
//! every conversation ends with exactly one answer, 3,000 requests are made
//! and the turns average 3 rounds (one may take 2 rounds, another 5).

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::json;

use super::stats::{Report, Target};
use super::{BenchResult, Settings, procfs};
use crate::fake_llm::{FakeLlm, ReplyScript, Script};

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("many");
    let n = settings.size(1_000, 100);
    let persisted = settings.size(10_000, 1_000);
    report.note(format!(
        "{n} conversations created concurrently with their prompt (over 8 connections); {} \
         think rounds + {n} final answers served in arrival order; a fresh daemon per run",
        2 * n
    ));
    let runs = settings.runs.min(3);
    let mut last = None;
    for run in 0..runs {
        let fake = FakeLlm::start().await;
        fake.set_default(Some(Script::text("ok")));
        let daemon = super::start_daemon(&fake).await;
        let pid = daemon.pid();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let baseline = procfs::rss_mib(pid);
        fake.push_all((0..2 * n).map(|i| {
            ReplyScript::new()
                .tool_use(
                    &format!("toolu_{i}"),
                    "think",
                    json!({"thought": format!("thought number {i} of run {run}")}),
                )
                .into()
        }));
        fake.push_all((0..n).map(|_| Script::text("Finished.")));
        let started = Instant::now();
        let failed = create_many(&daemon, n, n, "start task", 0).await?;
        let mut client = super::client(&daemon.socket).await?;
        let errors = super::wait_all_at_rest(&mut client, n, Duration::from_secs(600)).await?;
        let took = started.elapsed();
        let peak = procfs::hwm_mib(pid);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let loaded = procfs::rss_mib(pid);
        report.sample(
            "finish_s",
            &format!("{n} concurrent 3-round turns: time to finish"),
            "s",
            took.as_secs_f64(),
        );
        report.sample(
            "failed",
            "conversations failed (create refused or error state)",
            "count",
            (failed + errors) as f64,
        );
        report.sample(
            "requests",
            "model requests served",
            "count",
            fake.request_count() as f64,
        );
        report.sample(
            "baseline_rss_mib",
            "idle daemon RSS before, fresh",
            "MiB",
            baseline,
        );
        report.sample("peak_rss_mib", "daemon peak RSS (VmHWM)", "MiB", peak);
        report.sample(
            "loaded_rss_mib",
            &format!("idle daemon RSS with {n} loaded"),
            "MiB",
            loaded,
        );
        report.sample(
            "per_conversation_kib",
            "RSS per live conversation ((loaded − fresh) / n)",
            "KiB",
            (loaded - baseline) * 1024.0 / n as f64,
        );
        last = Some((fake, daemon));
    }
    report.set_target("failed", Target::AtMost(0.0));
    report.set_target("per_conversation_kib", Target::AtMost(100.0));

    // 10,000 persisted: fill the last daemon up with one-round turns.
    let (fake, mut daemon) = last.ok_or("no run")?;
    let more = persisted - n;
    let started = Instant::now();
    let failed = create_many(&daemon, more, 200, "hello", n).await?;
    let mut client = super::client(&daemon.socket).await?;
    let errors = super::wait_all_at_rest(&mut client, persisted, Duration::from_secs(1200)).await?;
    let took = started.elapsed();
    report.note(format!(
        "{more} more conversations, each a one-round turn, 200 at a time: {:.1} s ({:.0} \
         conversations/s), {} failed",
        took.as_secs_f64(),
        more as f64 / took.as_secs_f64(),
        failed + errors
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    report.sample(
        "all_loaded_rss_mib",
        &format!("idle daemon RSS with all {persisted} loaded (before restart)"),
        "MiB",
        procfs::rss_mib(daemon.pid()),
    );
    drop(client);
    for _ in 0..settings.runs {
        daemon.terminate().await;
        let started = Instant::now();
        daemon.restart().await;
        let mut client = super::client(&daemon.socket).await?;
        let states = super::list_states(&mut client).await?;
        let took = started.elapsed();
        if states.len() != persisted {
            return Err(format!(
                "after the restart the daemon lists {} conversations, not {persisted}",
                states.len()
            ));
        }
        let pid = daemon.pid();
        report.sample(
            "restart_to_list_ms",
            &format!("restart → first answered list ({persisted} persisted)"),
            "ms",
            took.as_secs_f64() * 1000.0,
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        report.sample(
            "persisted_idle_rss_mib",
            &format!("idle daemon RSS after restart, {persisted} persisted, listed once"),
            "MiB",
            procfs::rss_mib(pid),
        );
        report.sample(
            "persisted_peak_rss_mib",
            "peak RSS of the restarted daemon (start-up + one list)",
            "MiB",
            procfs::hwm_mib(pid),
        );
    }
    daemon.terminate().await;
    daemon.restart().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    report.sample(
        "persisted_unlisted_rss_mib",
        &format!("idle daemon RSS after restart, {persisted} persisted, never listed"),
        "MiB",
        procfs::rss_mib(daemon.pid()),
    );
    report.set_target("persisted_idle_rss_mib", Target::AtMost(30.0));
    report.set_target("persisted_unlisted_rss_mib", Target::AtMost(30.0));
    drop(fake);
    Ok(report)
}

/// Creates `count` conversations with `prompt` (each starts a turn), at
/// most `parallel` at a time over 8 connections; returns how many failed.
async fn create_many(
    daemon: &crate::harness::TestDaemon,
    count: usize,
    parallel: usize,
    prompt: &str,
    offset: usize,
) -> BenchResult<usize> {
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(super::client(&daemon.socket).await?);
    }
    let work_dir = daemon.work_dir.clone();
    let results: Vec<BenchResult<String>> = futures::stream::iter(0..count)
        .map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let work_dir = work_dir.clone();
            let prompt = format!("{prompt} {}", i + offset);
            async move {
                tokio::spawn(
                    async move { super::create(&mut client, &work_dir, &prompt, &[]).await },
                )
                .await
                .map_err(|e| e.to_string())?
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    if let Some(first) = failed.first() {
        eprintln!(
            "{} conversation(s) could not be created, e.g.: {first}",
            failed.len()
        );
    }
    Ok(failed.len())
}
