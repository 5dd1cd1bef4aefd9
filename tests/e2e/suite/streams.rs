//! Provider streams off the happy path, end to end: the daemon classifies
//! each event by its SSE event name, as Anthropic's streaming docs say a
//! client should, so an error event in the legacy shape is retried like
//! its HTTP equivalent, an event it does not know is ignored, and data
//! that is not JSON fails the turn with a message that names the event.
//! The OpenAI-compatible wire gets a tool round and a mid-stream error
//! object (retried like the HTTP status its code names).

use super::util::{Attached, get, send, state_kind, text_of_message};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT};

/// Anthropic's legacy mid-stream error, byte for byte as the Text
/// Completions streaming docs show it: the data has no top-level `type`.
const LEGACY_OVERLOADED: &str = concat!(
    "event: error\n",
    r#"data: {"error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
    "\n\n",
);

/// A legacy Text Completions event, which a Messages client does not know.
const LEGACY_COMPLETION: &str = concat!(
    "event: completion\n",
    r#"data: {"completion": " Hello", "stop_reason": null, "model": "claude-2.0"}"#,
    "\n\n",
);

/// A proxy's complaint where a delta's JSON should be.
const NOT_JSON: &str = concat!(
    "event: content_block_delta\n",
    "data: upstream connect error or disconnect/reset before headers\n",
    "\n",
);

/// Sends `text` in a conversation with an attached client and returns the
/// frames up to the end of the turn (Idle or Error).
async fn one_turn(
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
    text: &str,
) -> Vec<pb::AttachResponse> {
    let mut a = Attached::open(client, id, 0, "watcher").await;
    send(client, id, text).await;
    a.until(WAIT, |m| {
        matches!(
            state_kind(m),
            Some(pb::StateKind::Idle | pb::StateKind::Error)
        )
    })
    .await
}

/// The state that ended the turn.
fn last_state(frames: &[pb::AttachResponse]) -> pb::ConversationState {
    frames
        .iter()
        .rev()
        .find_map(|m| match &m.event {
            Some(pb::attach_response::Event::StateChanged(s)) => s.state.clone(),
            _ => None,
        })
        .expect("a state change ends the turn")
}

fn retries(frames: &[pb::AttachResponse]) -> Vec<(u32, u32)> {
    frames
        .iter()
        .filter_map(|m| match &m.event {
            Some(pb::attach_response::Event::Retrying(r)) => Some((r.attempt, r.max_attempts)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_overloaded_error_event_is_retried_and_the_turn_completes() {
    let s = Scenario::new()
        .scripts([
            // message_start, content_block_start, one delta, then the error.
            Script::Reply(
                ReplyScript::new()
                    .text("words that vanish")
                    .raw_error_after(3, LEGACY_OVERLOADED),
            ),
            Script::text("after the retry"),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let frames = one_turn(&mut client, &id, "hi").await;
    let state = last_state(&frames);
    assert_eq!(
        state.kind,
        pb::StateKind::Idle as i32,
        "the turn failed: {:?}",
        state.error_message
    );
    assert_eq!(retries(&frames), vec![(2, 3)]);
    assert_eq!(fake.requests().len(), 2);
    let r = get(&mut client, &id).await;
    assert_eq!(r.messages.len(), 2, "{:?}", r.messages);
    assert_eq!(text_of_message(&r.messages[1]), "after the retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_completion_event_is_ignored_and_the_turn_completes() {
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .text("the whole reply")
                .raw_after(1, LEGACY_COMPLETION)
                .raw_after(3, LEGACY_COMPLETION),
        ))
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let frames = one_turn(&mut client, &id, "hi").await;
    let state = last_state(&frames);
    assert_eq!(
        state.kind,
        pb::StateKind::Idle as i32,
        "the turn failed: {:?}",
        state.error_message
    );
    assert_eq!(fake.requests().len(), 1, "nothing to retry");
    let r = get(&mut client, &id).await;
    assert_eq!(text_of_message(&r.messages[1]), "the whole reply");
    let log = s.daemon.log();
    assert!(
        log.lines().any(|l| l.contains("DEBUG")
            && l.contains("event this version does not know")
            && l.contains("completion")),
        "the ignored event is logged at debug:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_that_is_not_json_fails_the_turn_naming_the_event() {
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .text("never finished")
                .raw_after(3, NOT_JSON),
        ))
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let frames = one_turn(&mut client, &id, "hi").await;
    let state = last_state(&frames);
    assert_eq!(state.kind, pb::StateKind::Error as i32, "{state:?}");
    assert!(
        state.error_message.starts_with(
            "malformed stream: event \"content_block_delta\" has data that is not JSON: "
        ),
        "{:?}",
        state.error_message
    );
    assert!(
        state.error_message.contains("[request-id req_fake_1]"),
        "{:?}",
        state.error_message
    );
    assert_eq!(retries(&frames), Vec::<(u32, u32)>::new());
    assert_eq!(fake.requests().len(), 1, "a protocol error is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_request_error_event_is_surfaced_with_its_message() {
    let s = Scenario::new()
        .script(Script::Reply(ReplyScript::new().text("a b c").raw_error_after(
            2,
            concat!(
                "event: error\n",
                r#"data: {"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must alternate (fake)"}}"#,
                "\n\n",
            ),
        )))
        .conversation("")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let frames = one_turn(&mut client, &id, "hi").await;
    let state = last_state(&frames);
    assert_eq!(state.kind, pb::StateKind::Error as i32, "{state:?}");
    assert_eq!(state.error_kind, pb::ErrorKind::InvalidRequest as i32);
    assert_eq!(
        state.error_message,
        "stream error (invalid_request_error): messages: roles must alternate (fake) [request-id req_fake_1]"
    );
    assert_eq!(fake.requests().len(), 1, "not retried");
}

/// An OpenAI-compatible server's mid-stream error object, as OpenRouter
/// sends it: an HTTP status as the code, no `choices`.
const OPENAI_MID_STREAM_502: &str = concat!(
    r#"data: {"id":"gen-1","object":"chat.completion.chunk","error":{"code":502,"message":"Upstream provider timed out"}}"#,
    "\n\n",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_wire_runs_a_tool_round_and_retries_a_mid_stream_error_object() {
    let s = Scenario::new()
        .config("provider = \"openai\"")
        .scripts([
            Script::Reply(ReplyScript::new().text("Reading it.").tool_use(
                "call_1",
                "read",
                serde_json::json!({"path": "notes.txt"}),
            )),
            // A delta, then the error object where a chunk should be.
            Script::Reply(
                ReplyScript::new()
                    .text("lost")
                    .raw_error_after(2, OPENAI_MID_STREAM_502),
            ),
            Script::text("The notes say hello."),
        ])
        .conversation("")
        .start()
        .await;
    std::fs::write(s.work.path().join("notes.txt"), "hello\n").unwrap();
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let frames = one_turn(&mut client, &id, "what do my notes say?").await;
    let state = last_state(&frames);
    assert_eq!(
        state.kind,
        pb::StateKind::Idle as i32,
        "the turn failed: {:?}",
        state.error_message
    );
    assert_eq!(retries(&frames), vec![(2, 3)]);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.path == "/v1/chat/completions"));
    assert_eq!(requests[0].body["stream"], true);
    // The tool result went back as a `tool` message answering the call.
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {messages:#?}"));
    assert_eq!(tool["tool_call_id"], "call_1");
    assert!(tool["content"].to_string().contains("hello"), "{tool:#}");
    let r = get(&mut client, &id).await;
    let last = r.messages.last().unwrap();
    assert_eq!(text_of_message(last), "The notes say hello.");
}
