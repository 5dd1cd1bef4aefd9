//! Self-correction with a limit (issue 17 point 6, Done-when 4): an edit
//! that cannot find its target fails with the `SELF_CORRECT_ATTEMPT:`
//! signal; the daemon re-engages the model with the seed's prompt and the
//! fallback request, at most 3 times per original request, then ends the
//! turn with `correction_failed`; a fallback that works says
//! `correction_success`. The events are stored: a client resuming after a
//! restart replays them.

use super::util::{Attached, MUTATING, done, is_idle, tool, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::Recorded;
use agent_tests::harness::{Scenario, WAIT};
use serde_json::{Value, json};

/// The seed's prompt around a fallback request, spelled out here rather
/// than taken from the daemon's code, so a change of wording fails.
const PROMPT_HEAD: &str = "The previous approach failed. Here's a more direct strategy:\n";
const PROMPT_TAIL: &str = "\n\nPlease generate new tool calls using the suggested approach.";

/// An edit of a.txt whose old_string is not in it (a different one each
/// time, so the doom-loop check has nothing to say).
fn missing_edit(id: &str) -> agent_tests::fake_llm::Script {
    tool(
        id,
        "edit",
        json!({"path": "a.txt", "old_string": format!("no such text {id}"), "new_string": "x"}),
    )
}

/// The blocks of the last message of a recorded request.
fn last_message(req: &Recorded) -> Vec<Value> {
    let messages = req.body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{last:#}");
    last["content"].as_array().cloned().unwrap_or_default()
}

/// The fallback request a tool result carries on its signal line.
fn fallback_of(result: &Value) -> String {
    let text = match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    };
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("SELF_CORRECT_ATTEMPT: "))
        .unwrap_or_else(|| panic!("no signal in {text}"));
    assert!(
        text.starts_with("old_string was not found in a.txt"),
        "the edit's own error comes first: {text}"
    );
    assert!(
        text.contains("\nSELF_CORRECT_METADATA: {\"originalTool\":\"edit\""),
        "{text}"
    );
    line.to_string()
}

/// Checks that `req` re-engages the model after the failed call `id`: its
/// last message is the call's error result, then the seed's prompt with
/// the fallback request of that result, exactly.
fn assert_reengaged(req: &Recorded, id: &str) {
    let blocks = last_message(req);
    assert_eq!(blocks.len(), 2, "{blocks:#?}");
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[0]["tool_use_id"], id);
    assert_eq!(blocks[0]["is_error"], true);
    let fallback = fallback_of(&blocks[0]);
    assert_eq!(blocks[1]["type"], "text");
    assert_eq!(
        blocks[1]["text"].as_str().unwrap(),
        format!("{PROMPT_HEAD}{fallback}{PROMPT_TAIL}")
    );
}

fn correction_events(frames: &[pb::AttachResponse]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(Ev::CorrectionAttempt(a)) => Some(format!(
                "attempt {}/{} {} [{}]",
                a.attempt,
                a.max_attempts,
                a.tool,
                a.fallback_tools.join(" ")
            )),
            Some(Ev::CorrectionSuccess(s)) => {
                Some(format!("success {} after {}", s.tool, s.attempts))
            }
            Some(Ev::CorrectionFailed(f)) => {
                Some(format!("failed {} after {}", f.tool, f.attempts))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_re_engagements_then_correction_failed_and_a_clean_end() {
    let s = Scenario::new()
        .scripts([
            missing_edit("e1"),
            missing_edit("e2"),
            missing_edit("e3"),
            missing_edit("e4"),
            // Never asked for: the turn ends after the fourth failure.
            done(),
        ])
        .conversation("")
        .allow(MUTATING)
        .start()
        .await;
    let (fake, mut d, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    std::fs::write(work.path().join("a.txt"), "hello\n").unwrap();
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    a.next(WAIT).await;
    super::util::send(&mut client, &id, "change hello to goodbye in a.txt").await;
    // A resume names the last event it saw: the user's message, stored (a
    // resume from before the first stored event gets a snapshot instead).
    let first_seq = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::MessageAppended(_))))
        .await
        .last()
        .unwrap()
        .seq;
    let frames = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::CorrectionFailed(_))))
        .await;
    assert_eq!(
        correction_events(&frames),
        [
            "attempt 1/3 edit [write]",
            "attempt 2/3 edit [write]",
            "attempt 3/3 edit [write]",
            "failed edit after 3",
        ]
    );
    let Some(Ev::CorrectionFailed(failed)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert!(
        failed
            .message
            .starts_with("Self-correction stopped: edit failed again after 3 correction attempts"),
        "{}",
        failed.message
    );
    // A clean end: the turn is over, in error, with that message, and the
    // model is asked nothing more.
    let r = wait_state(&mut client, &id, pb::StateKind::Error).await;
    let state = r.conversation.as_ref().unwrap().state.as_ref().unwrap();
    assert_eq!(state.error_message, failed.message);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        4,
        "the first request and three re-engagements"
    );
    // What the model received: nothing special first, then the seed's
    // prompt with the fallback request after each failed edit.
    assert!(
        last_message(&requests[0])
            .iter()
            .all(|b| !b.to_string().contains("The previous approach failed")),
    );
    assert_reengaged(&requests[1], "e1");
    assert_reengaged(&requests[2], "e2");
    assert_reengaged(&requests[3], "e3");
    // The model is told why the turn ended, with the last result.
    let texts: Vec<String> = r
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match &b.block {
            Some(pb::content_block::Block::Text(t)) => Some(t.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, std::slice::from_ref(&failed.message));
    assert_eq!(
        std::fs::read_to_string(work.path().join("a.txt")).unwrap(),
        "hello\n"
    );

    // The events are stored: after a restart, a client resuming from
    // before the turn gets all four again.
    drop(a);
    d.kill9();
    d.restart().await;
    let mut client = d.client().await;
    let mut b = Attached::open(&mut client, &id, first_seq, "B").await;
    let replayed = b
        .until(WAIT, |m| matches!(m.event, Some(Ev::CorrectionFailed(_))))
        .await;
    assert!(
        matches!(replayed[0].event, Some(Ev::Resumed(_))),
        "{:?}",
        replayed[0]
    );
    assert_eq!(
        correction_events(&replayed),
        correction_events(&frames),
        "replayed as they happened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_that_works_after_one_attempt_says_correction_success() {
    let s = Scenario::new()
        .scripts([
            missing_edit("e1"),
            tool(
                "w1",
                "write",
                json!({"path": "a.txt", "content": "goodbye\n"}),
            ),
            done(),
        ])
        .conversation("")
        .allow(MUTATING)
        .start()
        .await;
    let (fake, mut client, work, id) = (s.fake, s.client, s.work, s.id);
    std::fs::write(work.path().join("a.txt"), "hello\n").unwrap();
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    a.next(WAIT).await;
    super::util::send(&mut client, &id, "change hello to goodbye in a.txt").await;
    let frames = a.until(WAIT, is_idle).await;
    assert_eq!(
        correction_events(&frames),
        ["attempt 1/3 edit [write]", "success write after 1"]
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_reengaged(&requests[1], "e1");
    // After the success the model gets the write's result alone.
    let blocks = last_message(&requests[2]);
    assert_eq!(blocks.len(), 1, "{blocks:#?}");
    assert_eq!(blocks[0]["tool_use_id"], "w1");
    assert_eq!(
        std::fs::read_to_string(work.path().join("a.txt")).unwrap(),
        "goodbye\n"
    );
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
}
