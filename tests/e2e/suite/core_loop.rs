//! The agent loop end to end: autonomous tool rounds, cancellation,
//! retries, and the busy rule.

use super::util::{
    Attached, MUTATING, assert_valid_chain, get, is_idle, processes_matching, send,
    text_of_message, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{Gate, Recorded, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn tool_results(req: &Recorded) -> Vec<Value> {
    let messages = req.body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .cloned()
        .collect()
}

fn tool(id: &str, name: &str, input: Value) -> Script {
    Script::Reply(
        ReplyScript::new()
            .text("Working on it.")
            .tool_use(id, name, input),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_round_task_runs_autonomously_with_a_valid_chain() {
    let s = Scenario::new()
        .scripts([
            tool(
                "t1",
                "bash",
                json!({"command": "echo hello > a.txt && cat a.txt"}),
            ),
            tool("t2", "read", json!({"path": "a.txt"})),
            tool(
                "t3",
                "edit",
                json!({"path": "a.txt", "old_string": "hello", "new_string": "world"}),
            ),
            tool("t4", "grep", json!({"pattern": "world"})),
            tool("t5", "glob", json!({"pattern": "*.txt"})),
            Script::Reply(
                ReplyScript::new()
                    .text("Two at once.")
                    .tool_use("t6a", "read", json!({"path": "a.txt"}))
                    .tool_use("t6b", "think", json!({"thought": "the file says world"})),
            ),
            tool("t7", "bash", json!({"command": "echo failing >&2; exit 3"})),
            tool(
                "t8",
                "edit",
                json!({"path": "a.txt", "old_string": "absent", "new_string": "x"}),
            ),
            tool("t9", "keyword_search", json!({"keywords": ["world"]})),
            tool(
                "t10",
                "write",
                json!({"path": "b.txt", "content": "done\n"}),
            ),
            Script::Reply(ReplyScript::new().text("All done.")),
        ])
        .conversation("do the task")
        .allow(MUTATING)
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(text_of_message(r.messages.last().unwrap()), "All done.");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 11, "one request per round plus the last");
    for req in &reqs {
        assert_valid_chain(req);
    }
    let expect_error = |i: usize| matches!(i, 7 | 8);
    for (i, req) in reqs.iter().enumerate().skip(1) {
        let results = tool_results(req);
        let round = i; // request i answers round i
        if round == 6 {
            assert_eq!(results.len(), 2);
            assert_eq!(results[0]["tool_use_id"], "t6a");
            assert_eq!(results[1]["tool_use_id"], "t6b");
            continue;
        }
        assert_eq!(results.len(), 1, "round {round}: {results:?}");
        assert_eq!(results[0]["tool_use_id"], format!("t{round}"));
        let is_error = results[0]["is_error"].as_bool().unwrap_or(false);
        assert_eq!(
            is_error,
            expect_error(round),
            "round {round}: {}",
            results[0]
        );
    }
    assert!(
        tool_results(&reqs[1])[0]["content"]
            .as_str()
            .unwrap()
            .contains("hello")
    );
    assert!(
        tool_results(&reqs[4])[0]["content"]
            .as_str()
            .unwrap()
            .contains("world")
    );
    assert!(
        tool_results(&reqs[7])[0]["content"]
            .as_str()
            .unwrap()
            .contains('3')
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("a.txt")).unwrap(),
        "world\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("b.txt")).unwrap(),
        "done\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_returns_to_idle_at_once_and_the_chain_stays_valid() {
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .deltas(2_000, "slow ")
                .pace(Duration::from_millis(10)),
        ))
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "talk slowly").await;
    a.until(WAIT, |m| {
        matches!(m.event, Some(pb::attach_response::Event::TextDelta(_)))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    client
        .cancel_conversation(pb::CancelConversationRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    a.until(WAIT, is_idle).await;
    let took = started.elapsed();
    // The stream had about 19 s left (2,000 deltas 10 ms apart): a cancel
    // that waited for it, or for its next delta batch to be read, would
    // take seconds. The bound leaves room for a loaded machine (CI shares
    // its two cores), which once took 237 ms.
    assert!(took < Duration::from_secs(2), "cancel took {took:?}");
    // The HTTP stream was dropped, not left to run.
    fake.wait_for_disconnects(1, Duration::from_secs(2)).await;

    let r = get(&mut client, &id).await;
    let texts: Vec<String> = r.messages.iter().map(text_of_message).collect();
    assert!(
        r.messages[1].interrupted,
        "the partial reply is kept, marked interrupted"
    );
    assert!(texts[1].starts_with("slow "));
    assert_eq!(texts[2], "[Request interrupted by user]");

    fake.push(Script::Reply(ReplyScript::new().text("ok")));
    send(&mut client, &id, "next").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_valid_chain(&reqs[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_tool_kills_its_process_group() {
    // A child of a child, so only a group kill gets both.
    let s = Scenario::new()
        .script(tool(
            "s1",
            "bash",
            json!({"command": "sleep 30.417 & sleep 30.417; wait"}),
        ))
        .conversation("")
        .allow(MUTATING)
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "sleep").await;
    a.until(WAIT, |m| {
        matches!(m.event, Some(pb::attach_response::Event::ToolCallBegin(_)))
    })
    .await;
    let deadline = Instant::now() + WAIT;
    while processes_matching("sleep 30.417").len() < 2 {
        assert!(Instant::now() < deadline, "the sleeps never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    client
        .cancel_conversation(pb::CancelConversationRequest {
            conversation_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    a.until(WAIT, is_idle).await;
    while !processes_matching("sleep 30.417").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "orphans left: {:?}",
            processes_matching("sleep 30.417")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    fake.push(Script::Reply(ReplyScript::new().text("ok")));
    send(&mut client, &id, "next").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_valid_chain(&reqs[1]);
    let messages = reqs[1].body["messages"].as_array().unwrap();
    let result = &messages[2]["content"][0];
    assert_eq!(result["tool_use_id"], "s1");
    assert_eq!(result["content"], "Cancelled by user");
    assert_eq!(result["is_error"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_twice_then_success_is_retried_visibly() {
    let s = Scenario::new()
        .scripts([
            Script::overloaded(),
            Script::overloaded(),
            Script::Reply(ReplyScript::new().text("third time lucky")),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "hi").await;
    let frames = a.until(WAIT, is_idle).await;
    let retries: Vec<(u32, u32)> = frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::Retrying(r)) => Some((r.attempt, r.max_attempts)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, vec![(2, 3), (3, 3)]);
    let attempts: Vec<u32> = frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::StateChanged(s)) => s
                .state
                .as_ref()
                .filter(|s| s.kind == pb::StateKind::LlmRequesting as i32)
                .map(|s| s.attempt),
            _ => None,
        })
        .collect();
    assert!(
        attempts.contains(&2) && attempts.contains(&3),
        "attempts in the state: {attempts:?}"
    );
    assert_eq!(fake.requests().len(), 3);
    let r = get(&mut client, &id).await;
    assert_eq!(
        r.messages.len(),
        2,
        "the failed attempts left nothing behind"
    );
    assert_eq!(text_of_message(&r.messages[1]), "third time lucky");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_honour_retry_after_and_a_spend_cap_is_not_retried() {
    let s = Scenario::new()
        .scripts([
            Script::rate_limited(Some("1")),
            Script::Reply(ReplyScript::new().text("after the wait")),
            Script::rate_limited(None),
        ])
        .conversation("one")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let waited = reqs[1]
        .received_at
        .duration_since(reqs[0].received_at)
        .unwrap();
    assert!(waited >= Duration::from_secs(1), "waited only {waited:?}");

    send(&mut client, &id, "two").await;
    let r = wait_state(&mut client, &id, pb::StateKind::Error).await;
    assert_eq!(
        r.conversation.unwrap().state.unwrap().error_kind,
        pb::ErrorKind::RateLimit as i32
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake.requests().len(),
        3,
        "a 429 without retry-after is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_while_busy_is_refused() {
    let gate = Gate::new();
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .text("held reply")
                .hold_after(2, gate.clone()),
        ))
        .conversation("first")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    fake.wait_for_requests(1, WAIT).await;
    let e = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "second".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(e.message(), "agent is busy");
    gate.open();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_mid_stream_are_retried_without_duplicating_text() {
    let s = Scenario::new()
        .scripts([
            // message_start, block start, a couple of deltas, then trouble.
            Script::Reply(
                ReplyScript::new()
                    .text("partial words that vanish")
                    .chunk_chars(5)
                    .error_after(4, "overloaded_error", "Overloaded"),
            ),
            Script::Reply(
                ReplyScript::new()
                    .text("partial words that vanish")
                    .chunk_chars(5)
                    .drop_after(4),
            ),
            Script::Reply(ReplyScript::new().text("the one true reply")),
        ])
        .conversation("hi")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(r.messages.len(), 2, "{:?}", r.messages);
    assert_eq!(text_of_message(&r.messages[1]), "the one true reply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_tool_input_from_the_model_becomes_an_error_result() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(ReplyScript::new().raw_tool_use(
                "bad1",
                "bash",
                "{\"command\": \"echo hi",
            )),
            Script::Reply(ReplyScript::new().tool_use("bad2", "read", json!({"pathh": "x"}))),
            Script::Reply(ReplyScript::new().tool_use("bad3", "no_such_tool", json!({}))),
            Script::Reply(ReplyScript::new().text("recovered")),
        ])
        .conversation("go")
        .allow(MUTATING)
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    for (i, req) in reqs.iter().enumerate().skip(1) {
        assert_valid_chain(req);
        let r = &tool_results(req)[0];
        assert_eq!(r["is_error"], true, "request {i}: {r}");
        assert!(!r["content"].as_str().unwrap().is_empty());
    }
    // The model's broken JSON goes back as a valid object, and the error
    // says what was wrong.
    let sent = &reqs[1].body["messages"][1]["content"];
    let tool_use = sent
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    assert!(tool_use["input"].is_object());
    assert!(
        tool_results(&reqs[1])[0]["content"]
            .as_str()
            .unwrap()
            .contains("JSON")
    );
    assert!(
        tool_results(&reqs[2])[0]["content"]
            .as_str()
            .unwrap()
            .contains("path")
    );
    assert!(
        tool_results(&reqs[3])[0]["content"]
            .as_str()
            .unwrap()
            .contains("no_such_tool")
    );
}

/// `think` calls run inline (one flush for the call and its result), so
/// the things that make that safe are checked here: several in one reply
/// are each answered once, in order, the conversation comes to rest, and
/// a client sees every call begin and end, in order, after the reply that
/// made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_instant_calls_in_one_reply_are_each_answered_and_announced() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .text("Three thoughts.")
                    .tool_use("k1", "think", json!({"thought": "one"}))
                    .tool_use("k2", "think", json!({"thought": "two"}))
                    .tool_use("k3", "think", json!({})),
            ),
            tool("k4", "think", json!({"thought": "four"})),
            Script::Reply(ReplyScript::new().text("Thought it through.")),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "think").await;
    let frames = a.until(WAIT, is_idle).await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(
        text_of_message(r.messages.last().unwrap()),
        "Thought it through."
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    for req in &reqs {
        assert_valid_chain(req);
    }
    let results = tool_results(&reqs[1]);
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["k1", "k2", "k3"]);
    assert!(!results[0]["is_error"].as_bool().unwrap_or(false));
    // `thought` is required: the call with `{}` gets an error result.
    assert_eq!(results[2]["is_error"], true);
    assert_eq!(tool_results(&reqs[2])[0]["tool_use_id"], "k4");

    use pb::attach_response::Event as Ev;
    let mut seqs = Vec::new();
    let mut order = Vec::new();
    for f in &frames {
        if f.seq > 0 {
            seqs.push(f.seq);
        }
        match &f.event {
            Some(Ev::MessageAppended(m)) => order.push(format!(
                "message {}",
                m.message.as_ref().map(|m| m.role).unwrap_or_default()
            )),
            Some(Ev::ToolCallBegin(b)) => order.push(format!("begin {}", b.tool_use_id)),
            Some(Ev::ToolCallEnd(e)) => order.push(format!("end {}", e.tool_use_id)),
            _ => {}
        }
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers increase: {seqs:?}"
    );
    let assistant = pb::Role::Assistant as i32;
    let user = pb::Role::User as i32;
    let expected: Vec<String> = [
        format!("message {user}"),
        format!("message {assistant}"),
        "begin k1".into(),
        "end k1".into(),
        "begin k2".into(),
        "end k2".into(),
        "begin k3".into(),
        "end k3".into(),
        format!("message {user}"),
        format!("message {assistant}"),
        "begin k4".into(),
        "end k4".into(),
        format!("message {user}"),
        format!("message {assistant}"),
    ]
    .into();
    assert_eq!(order, expected);
}
