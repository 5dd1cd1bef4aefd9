//! Requests a client may retry (issue 19, point 4): a request carrying a
//! client request id the daemon remembers is answered with the first
//! outcome and has no second effect, also after a restart; a message whose
//! expected turn is stale is refused.

use super::util::user_texts;
use super::util::{Attached, get, is_idle, listed, tool, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, WAIT};
use serde_json::json;

fn send_request(id: &str, text: &str, request: &str) -> pb::SendMessageRequest {
    pb::SendMessageRequest {
        conversation_id: id.to_string(),
        text: text.to_string(),
        client_request_id: request.to_string(),
        expected_turn: None,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_twice_with_one_id_is_appended_once_even_across_a_restart() {
    let s = Scenario::new()
        .conversation("")
        .scripts([Script::text("one"), Script::text("two")])
        .start()
        .await;
    let (fake, mut daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let first = client
        .send_message(send_request(&id, "hello", "req-1"))
        .await
        .unwrap()
        .into_inner();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let again = client
        .send_message(send_request(&id, "hello", "req-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.message_seq, first.message_seq);
    assert_eq!(user_texts(&mut client, &id).await, vec!["hello"]);

    // A crash, not a clean stop: the remembered id must have been durable
    // with the message.
    daemon.kill9();
    daemon.restart().await;
    let mut client = daemon.client().await;
    let after_restart = client
        .send_message(send_request(&id, "hello", "req-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after_restart.message_seq, first.message_seq);
    // Another id is another message.
    client
        .send_message(send_request(&id, "hello", "req-2"))
        .await
        .unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(user_texts(&mut client, &id).await, vec!["hello", "hello"]);
    assert_eq!(fake.requests().len(), 2, "one model turn per message");
    let summary = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!(summary.turn, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_a_cancel_sent_twice_with_one_id_take_effect_once() {
    let s = Scenario::new()
        .conversation("")
        .scripts([
            tool("b1", "bash", json!({"command": "echo hi"})),
            Script::text("done"),
        ])
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    client
        .send_message(send_request(&id, "run it", "m-1"))
        .await
        .unwrap();
    watcher
        .until(WAIT, |m| {
            matches!(m.event, Some(Ev::PermissionRequested(_)))
        })
        .await;
    let answer = pb::AnswerPermissionRequest {
        conversation_id: id.clone(),
        decision: pb::PermissionDecision::AllowOnce as i32,
        client_request_id: "a-1".into(),
        ..Default::default()
    };
    client.answer_permission(answer.clone()).await.unwrap();
    watcher.until(WAIT, is_idle).await;
    // The retry is answered like the first (no "nothing pending").
    client.answer_permission(answer.clone()).await.unwrap();
    // The same id for another kind of request is a client's mistake.
    let misuse = client
        .send_message(send_request(&id, "x", "a-1"))
        .await
        .unwrap_err();
    assert_eq!(misuse.code(), tonic::Code::InvalidArgument);
    assert!(
        misuse
            .message()
            .contains("already used by a permission answer"),
        "{misuse:?}"
    );
    assert_eq!(fake.requests().len(), 2);

    let cancel = pb::CancelConversationRequest {
        conversation_id: id.clone(),
        client_request_id: "c-1".into(),
    };
    let first = client.cancel_conversation(cancel.clone()).await.unwrap();
    let again = client.cancel_conversation(cancel).await.unwrap();
    assert_eq!(first.into_inner().was_busy, again.into_inner().was_busy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_retried_with_its_id_returns_the_first_conversation_and_sends_one_prompt() {
    let s = Scenario::new()
        .script(Script::text("hi there"))
        .start()
        .await;
    let (fake, mut client, work) = (s.fake, s.client, s.work);
    let create = pb::CreateConversationRequest {
        cwd: work.path().display().to_string(),
        prompt: "hello".into(),
        client_request_id: "create-1".into(),
        ..Default::default()
    };
    let first = client
        .create_conversation(create.clone())
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap();
    let again = client
        .create_conversation(create)
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap();
    assert_eq!(first.id, again.id);
    wait_state(&mut client, &first.id, pb::StateKind::Idle).await;
    let listed = listed(&mut client).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_frame_repeated_with_its_id_is_appended_once() {
    let s = Scenario::new()
        .conversation("")
        .script(Script::text("ok"))
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "frames").await;
    let frame = Frame::Send(pb::SendMessageFrame {
        text: "once".into(),
        client_request_id: "f-1".into(),
        expected_turn: None,
        ..Default::default()
    });
    a.send(frame.clone()).await;
    a.until(WAIT, is_idle).await;
    a.send(frame).await;
    // A message after it proves the repeat was read and dropped.
    a.send(Frame::Send(pb::SendMessageFrame {
        text: "guarded".into(),
        client_request_id: String::new(),
        expected_turn: Some(0),
        ..Default::default()
    }))
    .await;
    let refusal = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::Error(_))))
        .await;
    match &refusal.last().unwrap().event {
        Some(Ev::Error(e)) => assert!(
            e.message
                .starts_with("the conversation is at turn 1, not 0"),
            "{e:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(user_texts(&mut client, &id).await, vec!["once"]);
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_expected_turn_is_refused_and_the_current_one_accepted() {
    let s = Scenario::new()
        .conversation("")
        .scripts([Script::text("one"), Script::text("two")])
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let guarded = |turn: u64, text: &str| pb::SendMessageRequest {
        conversation_id: id.clone(),
        text: text.into(),
        client_request_id: String::new(),
        expected_turn: Some(turn),
        ..Default::default()
    };
    client.send_message(guarded(0, "first")).await.unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    // A client that has not seen "first" still believes it is turn 0.
    let stale = client.send_message(guarded(0, "late")).await.unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition);
    assert!(
        stale
            .message()
            .starts_with("the conversation is at turn 1, not 0"),
        "{stale:?}"
    );
    client.send_message(guarded(1, "second")).await.unwrap();
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(user_texts(&mut client, &id).await, vec!["first", "second"]);
    // Too long an id is refused before anything happens.
    let long = client
        .send_message(send_request(&id, "x", &"r".repeat(200)))
        .await
        .unwrap_err();
    assert_eq!(long.code(), tonic::Code::InvalidArgument);
    assert!(
        long.message().starts_with("client_request_id is 200 bytes"),
        "{long:?}"
    );
}

/// Opens an Attach stream whose first frame creates the conversation.
async fn attach_creating(
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    create: pb::CreateConversationRequest,
) -> Result<Attached, tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(super::util::frame(Frame::Create(pb::CreateAndSubscribe {
        create: Some(create),
        client_name: "creator".into(),
        role: pb::ClientRole::Unspecified as i32,
    })))
    .await
    .unwrap();
    let rx = client
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok(Attached { tx, rx })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_that_creates_sees_the_first_turn_whole_and_a_retry_joins_the_same() {
    let s = Scenario::new()
        .scripts([Script::text("hello from the model")])
        .start()
        .await;
    let (mut client, work) = (s.client, s.work);
    let create = pb::CreateConversationRequest {
        cwd: work.path().to_str().unwrap().into(),
        prompt: "hi".into(),
        client_request_id: "create-1".into(),
        ..Default::default()
    };
    let mut a = attach_creating(&mut client, create.clone()).await.unwrap();
    // First the snapshot of the conversation before its first turn: it
    // names the conversation, and nothing of the turn is missed.
    let first = a.next(WAIT).await;
    let Some(Ev::Snapshot(snap)) = &first.event else {
        panic!("expected the snapshot first, got {first:?}");
    };
    let id = snap.conversation.as_ref().unwrap().id.clone();
    assert!(snap.messages.is_empty(), "{snap:?}");
    assert!(snap.clients.iter().any(|c| c.name == "creator"));
    let frames = a.until(WAIT, is_idle).await;
    let prompt_at = frames.iter().position(|f| {
        matches!(&f.event, Some(Ev::MessageAppended(m))
            if m.message.as_ref().is_some_and(|m| m.role == pb::Role::User as i32))
    });
    let reply_at = frames.iter().position(|f| {
        matches!(&f.event, Some(Ev::MessageAppended(m))
            if m.message.as_ref().is_some_and(|m| m.role == pb::Role::Assistant as i32))
    });
    assert!(
        prompt_at.is_some() && prompt_at < reply_at,
        "the prompt, then the reply: {frames:?}"
    );
    assert_eq!(user_texts(&mut client, &id).await, vec!["hi"]);

    // The same request again joins the conversation the first one made.
    let mut again = attach_creating(&mut client, create.clone()).await.unwrap();
    let snap = again.next(WAIT).await;
    let Some(Ev::Snapshot(snap)) = &snap.event else {
        panic!("expected a snapshot, got {snap:?}");
    };
    assert_eq!(snap.conversation.as_ref().unwrap().id, id);
    assert_eq!(snap.messages.len(), 2, "the turn that ran: {snap:?}");
    let listed = listed(&mut client).await;
    assert_eq!(listed.len(), 1, "created once: {listed:?}");

    // A request CreateConversation would refuse is refused the same way.
    let bad = pb::CreateConversationRequest {
        cwd: "relative/dir".into(),
        prompt: "hi".into(),
        ..Default::default()
    };
    let refused = attach_creating(&mut client, bad).await.err().unwrap();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
    assert!(refused.message().contains("absolute"), "{refused}");
}
