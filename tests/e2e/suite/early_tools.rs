//! Read-only tools start while the reply streams (issue 42 point 2, seed
//! 002's flow): the fake holds the stream open before `message_stop` and
//! the tools' side effects (the MCP server's call log) appear first, while
//! clients hear of the calls only after the reply is in the transcript; a
//! stream that fails after they started aborts them unannounced, and the
//! retried request carries a valid chain without them.

use super::util::{Attached, assert_valid_chain, is_idle, result_of, send};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{Gate, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT, wait_for};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// A trusted stdio MCP server (its read-only hints count) that logs each
/// call to `log`.
fn config(log: &Path) -> String {
    let quoted = |s: &str| serde_json::to_string(s).unwrap();
    format!(
        "[mcp.servers.t]\ncommand = {}\nargs = [\"stdio\"]\ntrust = true\nenv = {{ TEST_MCP_LOG = {} }}\n",
        quoted(env!("CARGO_BIN_EXE_test-mcp-server")),
        quoted(&log.display().to_string()),
    )
}

/// How many calls of `tool` the server logged.
fn logged(log: &Path, tool: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(tool))
        .count()
}

/// Two read-only calls, each input streamed in one delta, then the stream
/// held by `gate` before `message_delta` and `message_stop`: after
/// `message_start` and the two blocks' start, empty first fragment (as
/// Anthropic sends), delta and stop.
fn two_calls(name: &str, input: serde_json::Value, gate: &Gate) -> ReplyScript {
    ReplyScript::new()
        .tool_use("c1", name, input.clone())
        .tool_use("c2", name, input)
        .json_chunk_chars(1000)
        .hold_after(9, gate.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reads_run_before_the_reply_ends_and_their_results_go_back_in_order() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let gate = Gate::new();
    let s = Scenario::new()
        .config(&config(&log))
        .scripts([
            Script::Reply(two_calls("mcp__t__peek", json!({}), &gate)),
            Script::text("done"),
        ])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "peek twice").await;

    // The reply has not ended (the gate is shut), yet both calls ran.
    wait_for("both calls before message_stop", WAIT, || {
        logged(&log, "peek") == 2
    })
    .await;
    assert!(!gate.is_open());
    assert_eq!(fake.requests().len(), 1);
    gate.open();
    let frames = a.until(WAIT, is_idle).await;
    // Clients see what they always saw: the reply, then its calls.
    use pb::attach_response::Event as Ev;
    let order: Vec<String> = frames
        .iter()
        .filter_map(|f| match &f.event {
            Some(Ev::MessageAppended(m)) => Some(format!(
                "message {}",
                m.message.as_ref().map(|m| m.role).unwrap_or_default()
            )),
            Some(Ev::ToolCallBegin(b)) => Some(format!("begin {}", b.tool_use_id)),
            Some(Ev::ToolCallEnd(e)) => Some(format!("end {}", e.tool_use_id)),
            _ => None,
        })
        .collect();
    let assistant = format!("message {}", pb::Role::Assistant as i32);
    let at = |s: &str| order.iter().position(|o| o == s).unwrap_or(usize::MAX);
    assert!(at(&assistant) < at("begin c1"), "{order:?}");
    assert!(
        at("begin c1") < at("end c1") && at("end c2") < usize::MAX,
        "{order:?}"
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_valid_chain(&reqs[1]);
    for call in ["c1", "c2"] {
        let result = result_of(&reqs[1], call);
        assert_eq!(result["is_error"], false, "{result}");
    }
    // Each ran once: the reply's end started nothing again.
    assert_eq!(logged(&log, "peek"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_after_early_calls_started_aborts_them_and_the_retry_is_valid() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("calls.log");
    let gate = Gate::new();
    let failing = two_calls("mcp__t__slow", json!({"ms": 60_000}), &gate).drop_after(9);
    let s = Scenario::new()
        .config(&config(&log))
        .scripts([Script::Reply(failing), Script::text("recovered")])
        .conversation("")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, daemon, id) = (s.fake, s.client, s.daemon, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "wait twice").await;
    wait_for("both slow calls started", WAIT, || {
        logged(&log, "slow") == 2
    })
    .await;
    let started = Instant::now();
    gate.open();
    let frames = a.until(WAIT, is_idle).await;
    // Not the 60 s the calls would take: they were stopped.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "log: {}",
        daemon.log()
    );
    // Their reply never made it into the transcript, so clients never
    // heard of them: no begin, no end.
    use pb::attach_response::Event as Ev;
    let announced: Vec<&str> = frames
        .iter()
        .filter_map(|f| match &f.event {
            Some(Ev::ToolCallBegin(b)) => Some(b.tool_use_id.as_str()),
            Some(Ev::ToolCallEnd(e)) => Some(e.tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    assert!(announced.is_empty(), "{announced:?}");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "log: {}", daemon.log());
    // The retry asks the same as the first attempt: the lost reply's calls
    // are not in the transcript, answered or not.
    assert_eq!(reqs[1].body["messages"], reqs[0].body["messages"]);
    assert_valid_chain(&reqs[1]);
}
