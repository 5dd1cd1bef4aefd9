//! Issue 42 point 2: read-only tools that start while the reply streams.
//!
//! One reply of three read-only calls, streamed at a steady pace (each
//! event `PACE` after the one before, as a model writes a tool's input
//! piece by piece), then a final answer. Measured: the time from the first
//! tool block's `content_block_stop` (on the fake's clock: the fake sleeps
//! the pace before each event, so the stop is written 5/14 of the way from
//! the request's arrival to the reply's last frame) to the arrival of the
//! next request, the one carrying the three results. A daemon that starts
//! tools only after `message_stop` waits out the rest of the stream first;
//! one that starts them at their block's stop overlaps them with it. Two
//! parts: `read` (three small files: the calls take well under a
//! millisecond, so there is little to overlap) and `grep` (three searches
//! of a generated tree of `TREE_FILES` files, each some tens of
//! milliseconds).

use std::time::Duration;

use serde_json::json;

use agent_proto::v1::agent_service_client::AgentServiceClient;
use tonic::transport::Channel;

use super::stats::Report;
use super::{Attached, BenchResult, Context as _, Settings, ms};
use crate::fake_llm::{FakeLlm, ReplyScript, Script};

/// Between two events of the reply.
const PACE: Duration = Duration::from_millis(10);
/// Events up to and including the first tool block's stop:
/// `message_start`, then the block's start, its empty first fragment, its
/// one input fragment and its stop.
const FIRST_STOP: u32 = 5;
/// Events of the reply: `message_start`, four per block, `message_delta`
/// and `message_stop`.
const EVENTS: u32 = 1 + 3 * 4 + 2;

/// Files in the tree the `grep` part searches.
const TREE_FILES: usize = 3_000;

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("early-tools");
    let fake = FakeLlm::start().await;
    let daemon = super::start_daemon(&fake).await;
    let mut client = super::client(&daemon.socket).await?;
    let tree = daemon.work_dir.join("tree");
    for i in 0..TREE_FILES {
        let dir = tree.join(format!("d{}", i % 30));
        std::fs::create_dir_all(&dir).ctx("the tree")?;
        let text = format!("fn item_{i}() -> u32 {{ {i} }}\n").repeat(40);
        std::fs::write(dir.join(format!("f{i}.rs")), text).ctx("the tree")?;
    }
    let id = super::create(&mut client, &daemon.work_dir, "", &[]).await?;
    for part in ["read", "grep"] {
        if !settings.runs_part(part) {
            continue;
        }
        for run in 0..settings.size(settings.runs.max(1), 2) {
            let since_stop = one_run(&fake, &daemon, &mut client, &id, part, run).await?;
            report.sample(
                &format!("{part}_first_stop_to_next_request_ms"),
                &format!("{part}: first block's stop → the request with the three results"),
                "ms",
                since_stop,
            );
        }
    }
    report.note(format!(
        "reply: three calls, one event every {} ms ({} events from the first block's stop to message_stop); grep: {TREE_FILES} files",
        PACE.as_millis(),
        EVENTS - FIRST_STOP
    ));
    Ok(report)
}

/// One turn of `part`: the time from the first tool block's stop to the
/// next request's arrival, in ms.
async fn one_run(
    fake: &FakeLlm,
    daemon: &crate::harness::TestDaemon,
    client: &mut AgentServiceClient<Channel>,
    id: &str,
    part: &str,
    run: usize,
) -> BenchResult<f64> {
    let mut reply = ReplyScript::new();
    for name in ["a", "b", "c"] {
        // Inputs new each run: the same three calls again and again would
        // be a loop, which asks.
        let input = if part == "read" {
            let path = daemon.work_dir.join(format!("{name}{run}.txt"));
            std::fs::write(&path, "some text\n").ctx("a file to read")?;
            json!({"path": path.display().to_string()})
        } else {
            json!({"pattern": format!("item_{run}{name}[0-9]+"), "path": "tree"})
        };
        let tool = if part == "read" { "read" } else { "grep" };
        reply = reply.tool_use(&format!("r{part}{run}{name}"), tool, input);
    }
    // One input fragment per block, so FIRST_STOP holds.
    let reply = reply.json_chunk_chars(100_000).pace(PACE);
    fake.push_all([Script::Reply(reply), Script::text("done")]);
    let before = fake.request_count();
    let mut attached = Attached::open(&daemon.socket, id, "bench").await?;
    super::send(client, id, &format!("look ({part} {run})")).await?;
    attached
        .until_at_rest(Duration::from_secs(60), |_, _| {})
        .await?;
    let requests = fake.requests();
    let request = requests.get(before).ctx("the recorded request")?;
    let next = requests
        .get(before + 1)
        .ctx("the request with the results")?;
    let replied = request.replied_at.ctx("the reply's end")?;
    let streamed = replied
        .duration_since(request.received_at)
        .unwrap_or_default();
    let first_stop = request.received_at + streamed * FIRST_STOP / EVENTS;
    Ok(ms(next
        .arrived_at
        .duration_since(first_stop)
        .unwrap_or_default()))
}
