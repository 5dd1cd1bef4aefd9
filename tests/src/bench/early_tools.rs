//! Issue 42 point 2: read-only tools that start while the reply streams.
//!
//! One reply of three `read` calls, streamed at a steady pace (each event
//! `PACE` after the one before, as a model writes a tool's input piece by
//! piece), then a final answer. Measured: the time from the first tool
//! block's `content_block_stop` (on the fake's clock: the fake sleeps the
//! pace before each event, so the stop is written 5/14 of the way from
//! the request's arrival to the reply's last frame) to the last of the
//! three results reaching an attached client (`ToolCallEnd`), and to the
//! first call's start (`ToolCallBegin`). A daemon that starts tools only
//! after `message_stop` waits out the rest of the stream first.

use std::time::{Duration, SystemTime};

use agent_proto::v1 as pb;
use serde_json::json;

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

/// Runs the scenario.
pub async fn run(settings: &Settings) -> BenchResult<Report> {
    let mut report = Report::new("early-tools");
    let fake = FakeLlm::start().await;
    let daemon = super::start_daemon(&fake).await;
    let mut client = super::client(&daemon.socket).await?;
    let id = super::create(&mut client, &daemon.work_dir, "", &[]).await?;
    for run in 0..settings.size(settings.runs.max(1), 2) {
        let mut reply = ReplyScript::new();
        for name in ["a", "b", "c"] {
            // New files each run: the same three reads again and again
            // would be a loop, which asks.
            let path = daemon.work_dir.join(format!("{name}{run}.txt"));
            std::fs::write(&path, "some text\n").ctx("a file to read")?;
            reply = reply.tool_use(
                &format!("r{run}{name}"),
                "read",
                json!({"path": path.display().to_string()}),
            );
        }
        // One input fragment per block, so FIRST_STOP holds.
        let reply = reply.json_chunk_chars(100_000).pace(PACE);
        fake.push_all([Script::Reply(reply), Script::text("read all three")]);
        let before = fake.request_count();
        let mut attached = Attached::open(&daemon.socket, &id, "bench").await?;
        super::send(&mut client, &id, &format!("read the files ({run})")).await?;
        let mut begins = Vec::new();
        let mut ends = Vec::new();
        attached
            .until_at_rest(Duration::from_secs(60), |m, _| {
                use pb::attach_response::Event;
                match &m.event {
                    Some(Event::ToolCallBegin(_)) => begins.push(SystemTime::now()),
                    Some(Event::ToolCallEnd(_)) => ends.push(SystemTime::now()),
                    _ => {}
                }
            })
            .await?;
        let requests = fake.requests();
        let request = requests.get(before).ctx("the recorded request")?;
        let replied = request.replied_at.ctx("the reply's end")?;
        let streamed = replied
            .duration_since(request.received_at)
            .unwrap_or_default();
        let first_stop = request.received_at + streamed * FIRST_STOP / EVENTS;
        let since = |t: &SystemTime| ms(t.duration_since(first_stop).unwrap_or_default());
        let (Some(first), Some(last)) = (begins.first(), ends.last()) else {
            return Err(format!("run {run}: no tool call seen"));
        };
        if ends.len() != 3 {
            return Err(format!("run {run}: {} tool results, not 3", ends.len()));
        }
        report.sample(
            "first_stop_to_first_begin_ms",
            "first block's stop → first call starts",
            "ms",
            since(first),
        );
        report.sample(
            "first_stop_to_last_result_ms",
            "first block's stop → last of three results",
            "ms",
            since(last),
        );
    }
    report.note(format!(
        "reply: three `read` calls, one event every {} ms ({} events from the first block's stop to message_stop)",
        PACE.as_millis(),
        EVENTS - FIRST_STOP
    ));
    Ok(report)
}
