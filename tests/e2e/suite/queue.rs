//! Messages sent while the agent works are queued, not lost (issue 14,
//! point 2): a message sent "queue if busy" during a tool round reaches the
//! model once, in the next request, after the tool results; every client
//! sees the queue; a queued message survives a daemon crash; one sent
//! without the flag is still refused with the seed's text.

use super::util::{Attached, agent_out, get, is_idle, is_request, send, tool, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, Started, WAIT};
use serde_json::{Value, json};
use std::time::Duration;

/// The content blocks of the last message of a recorded request.
fn last_message_blocks(req: &Recorded) -> Vec<Value> {
    req.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .cloned()
        .unwrap_or_else(|| panic!("no last message with content: {:#}", req.body))
}

/// How many text blocks of a request's transcript say `text`.
fn times_sent(req: &Recorded, text: &str) -> usize {
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "text" && b["text"] == text)
        .count()
}

fn queue_changed(m: &pb::AttachResponse) -> Option<&Vec<pb::QueuedMessage>> {
    match &m.event {
        Some(Ev::QueueChanged(q)) => Some(&q.queued),
        _ => None,
    }
}

fn queue_send(id: &str, text: &str) -> pb::SendMessageRequest {
    pb::SendMessageRequest {
        conversation_id: id.to_string(),
        text: text.to_string(),
        queue_if_busy: true,
        ..Default::default()
    }
}

/// A conversation whose model calls bash once (which asks permission), then
/// says "done".
async fn one_bash_round() -> Started<String> {
    Scenario::new()
        .conversation("")
        .scripts([
            tool("b1", "bash", json!({"command": "echo hi"})),
            Script::text("done"),
        ])
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_queued_during_a_tool_round_follows_the_tool_results_once() {
    let s = one_bash_round().await;
    let (fake, daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "run it").await;
    watcher.until(WAIT, is_request).await;

    // Without the flag the seed's REJECT row holds.
    let refused = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "refused".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.message(), "agent is busy");

    // A second client queues a message; every client sees the queue.
    let mut other = daemon.client().await;
    let queued = other
        .send_message(queue_send(&id, "also check the logs"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(queued.queued_id, "q0");
    assert_eq!(queued.message_seq, 0);
    let seen = watcher.until(WAIT, |m| queue_changed(m).is_some()).await;
    let q = queue_changed(seen.last().unwrap()).unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].text, "also check the logs");
    let summary = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!(summary.queued.len(), 1, "{summary:?}");

    // `agent queue` lists it.
    let (ok, out, err) = agent_out(&daemon, &["queue", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains("q0: also check the logs"), "{out}");

    client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            decision: pb::PermissionDecision::AllowOnce as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    let frames = watcher.until(WAIT, is_idle).await;
    assert!(
        frames
            .iter()
            .filter_map(queue_changed)
            .any(|q| q.is_empty()),
        "clients are told the queue emptied"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "no extra turn: it went with the results");
    let blocks = last_message_blocks(&requests[1]);
    assert_eq!(blocks[0]["type"], "tool_result", "{blocks:#?}");
    assert_eq!(blocks.last().unwrap()["text"], "also check the logs");
    assert_eq!(times_sent(&requests[1], "also check the logs"), 1);
    let summary = get(&mut client, &id).await.conversation.unwrap();
    assert!(summary.queued.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_message_survives_a_crash_and_is_delivered_once() {
    let s = one_bash_round().await;
    let (fake, mut daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut attached = Attached::open(&mut client, &id, 0, "terminal").await;
    attached
        .send(Frame::Send(pb::SendMessageFrame {
            text: "run it".into(),
            ..Default::default()
        }))
        .await;
    attached.until(WAIT, is_request).await;
    attached
        .send(Frame::Send(pb::SendMessageFrame {
            text: "after the crash too".into(),
            queue_if_busy: true,
            ..Default::default()
        }))
        .await;
    let seen = attached.until(WAIT, |m| queue_changed(m).is_some()).await;
    let q = queue_changed(seen.last().unwrap()).unwrap();
    assert_eq!(
        q[0].from.as_ref().map(|c| c.name.as_str()),
        Some("terminal")
    );

    daemon.kill9();
    daemon.restart().await;
    let mut client = daemon.client().await;
    let summary = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!(summary.queued.len(), 1, "queued messages are durable");
    assert_eq!(summary.queued[0].text, "after the crash too");
    // The permission request is asked again after the restart.
    client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            decision: pb::PermissionDecision::AllowOnce as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let requests = fake.requests();
    let last = requests.last().unwrap();
    assert_eq!(
        times_sent(last, "after the crash too"),
        1,
        "{:#}",
        last.body
    );
    let summary = get(&mut client, &id).await.conversation.unwrap();
    assert!(summary.queued.is_empty(), "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_queued_while_the_reply_streams_start_the_next_turn_and_can_be_dropped() {
    // A reply slow enough to queue messages while it streams.
    let slow = ReplyScript::new()
        .deltas(40, "word ")
        .pace(Duration::from_millis(100));
    let s = Scenario::new()
        .conversation("")
        .scripts([slow.into(), Script::text("second turn")])
        .start()
        .await;
    let (fake, daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "write a poem").await;
    watcher
        .until(WAIT, |m| matches!(m.event, Some(Ev::TextDelta(_))))
        .await;
    for text in ["dropped one", "kept one"] {
        client.send_message(queue_send(&id, text)).await.unwrap();
    }
    // `agent queue --drop` takes one back; dropping it again is NotFound.
    let (ok, out, err) = agent_out(&daemon, &["queue", &id, "--drop", "q0"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("q1: kept one") && !out.contains("dropped"),
        "{out}"
    );
    let gone = client
        .drop_queued_message(pb::DropQueuedMessageRequest {
            conversation_id: id.clone(),
            queued_id: "q0".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    assert!(
        gone.message()
            .starts_with("no queued message q0 in conversation"),
        "{gone:?}"
    );
    // `agent send` queues by default while the agent works.
    let (ok, out, err) = agent_out(&daemon, &["send", &id, "from", "the", "cli"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("queued in"), "{out}");
    let requests = fake.wait_for_requests(2, WAIT).await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let blocks = last_message_blocks(&requests[1]);
    let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(texts, ["kept one", "from the cli"], "{blocks:#?}");
    assert_eq!(times_sent(&requests[1], "dropped one"), 0);
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_clearly_and_can_be_emptied() {
    let s = one_bash_round().await;
    let (daemon, mut client, id) = (s.daemon, s.client, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "run it").await;
    watcher.until(WAIT, is_request).await;
    for i in 0..32 {
        client
            .send_message(queue_send(&id, &format!("note {i}")))
            .await
            .unwrap();
    }
    let full = client
        .send_message(queue_send(&id, "one too many"))
        .await
        .unwrap_err();
    assert_eq!(full.code(), tonic::Code::ResourceExhausted);
    assert!(
        full.message().contains("32 messages are queued"),
        "{full:?}"
    );
    let (ok, out, err) = agent_out(&daemon, &["queue", &id, "--drop-all"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "nothing is queued");
    let summary = get(&mut client, &id).await.conversation.unwrap();
    assert!(summary.queued.is_empty(), "{summary:?}");
}

/// Issue 39, point 11: messages queued during a turn that is then
/// cancelled go before the next message sent, in send order, each its own
/// text block, in the request and in the stored transcript alike (the CLI
/// steps of the report: `send` during a slow turn, `cancel`, `send`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_queued_before_a_cancel_go_before_the_next_message() {
    let slow = ReplyScript::new()
        .deltas(40, "word ")
        .pace(Duration::from_millis(100));
    let s = Scenario::new()
        .conversation("")
        .scripts([slow.into(), Script::text("all three")])
        .start()
        .await;
    let (fake, daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "write a poem").await;
    watcher
        .until(WAIT, |m| matches!(m.event, Some(Ev::TextDelta(_))))
        .await;
    for text in ["FIRST", "THIRD"] {
        let (ok, out, err) = agent_out(&daemon, &["send", &id, text]).await;
        assert!(ok && out.contains("queued in"), "{out}{err}");
    }
    let (ok, _, err) = agent_out(&daemon, &["cancel", &id]).await;
    assert!(ok, "{err}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let (ok, _, err) = agent_out(&daemon, &["send", &id, "SECOND"]).await;
    assert!(ok, "{err}");
    let requests = fake.wait_for_requests(2, WAIT).await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let blocks = last_message_blocks(&requests[1]);
    let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    let sent: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|t| ["FIRST", "THIRD", "SECOND"].contains(t))
        .collect();
    assert_eq!(sent, ["FIRST", "THIRD", "SECOND"], "{blocks:#?}");
    let (ok, shown, err) = agent_out(&daemon, &["show", &id]).await;
    assert!(ok, "{err}");
    let at = |t: &str| {
        shown
            .find(t)
            .unwrap_or_else(|| panic!("{t} is not shown:\n{shown}"))
    };
    assert!(
        at("FIRST") < at("THIRD") && at("THIRD") < at("SECOND"),
        "{shown}"
    );
}
