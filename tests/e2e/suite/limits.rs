//! Request limits (issue 13, point 1): a frame over a limit gets an error
//! that names the limit, to its client only, and loses nothing else. Before
//! the fix an oversized Attach frame wedged the stream silently and
//! `agent attach` exited 0 having sent nothing.

use super::util::user_texts;
use super::util::{Attached, is_idle, wait_state};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, TestDaemon, WAIT};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// Small limits, so the tests move little data.
const SMALL_LIMITS: &str = "[grpc]\nmax_message_bytes = 1048576\nmax_text_bytes = 65536\n";

/// The next error event, skipping the conversation's own events.
async fn next_error(a: &mut Attached) -> pb::AttachResponse {
    let frames = a
        .until(WAIT, |m| matches!(m.event, Some(Ev::Error(_))))
        .await;
    frames.into_iter().last().unwrap()
}

fn send_frame(text: String) -> Frame {
    Frame::Send(pb::SendMessageFrame {
        text,
        ..Default::default()
    })
}

/// Runs `agent attach ID` with `input` piped into it; (exit code, stdout, stderr).
async fn attach_with_input(daemon: &TestDaemon, id: &str, input: Vec<u8>) -> (i32, String, String) {
    let mut child = tokio::process::Command::from(daemon.agent())
        .args(["attach", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        // The client may stop reading early; a broken pipe is its business.
        let _ = stdin.write_all(&input).await;
    });
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("agent attach did not end")
        .unwrap();
    writer.await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_megabytes_piped_into_attach_are_refused_by_name_and_the_next_line_is_sent() {
    let s = Scenario::new()
        .conversation("")
        .script(Script::text("got the short line"))
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let mut input = vec![b'y'; 5 * 1024 * 1024];
    input.extend_from_slice(b"\nshort line\n");
    let (code, out, err) = attach_with_input(&s.daemon, &id, input).await;
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("message not sent: message text is 5242880 bytes, over the daemon's limit of 1048576 bytes (`max_text_bytes`"),
        "{out}"
    );
    assert!(err.contains("1 message of 2 refused"), "{err}");
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(user_texts(&mut client, &id).await, vec!["short line"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_over_the_limit_on_attach_is_an_error_event_and_the_stream_stays_usable() {
    let s = Scenario::new()
        .config(SMALL_LIMITS)
        .conversation("")
        .script(Script::text("hello back"))
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let mut other = Attached::open(&mut client, &id, 0, "other").await;
    other.next(WAIT).await; // its snapshot
    let mut a = Attached::open(&mut client, &id, 0, "writer").await;
    a.next(WAIT).await;
    a.send(send_frame("x".repeat(70_000))).await;
    let refusal = next_error(&mut a).await;
    assert_eq!(refusal.seq, 0, "addressed to this client only");
    match &refusal.event {
        Some(Ev::Error(e)) => assert_eq!(
            e.message,
            "message text is 70000 bytes, over the daemon's limit of 65536 bytes \
             (`max_text_bytes` in the [grpc] section of agentd's config)"
        ),
        other => panic!("not an error event: {other:?}"),
    }
    // A feedback over the limit is refused the same way.
    a.send(Frame::Answer(pb::AnswerPermissionFrame {
        request_id: "req".into(),
        decision: pb::PermissionDecision::DenyAndStop as i32,
        feedback: "f".repeat(70_000),
        scope: 0,
        ..Default::default()
    }))
    .await;
    match next_error(&mut a).await.event {
        Some(Ev::Error(e)) => assert!(e.message.starts_with("feedback is 70000 bytes"), "{e:?}"),
        other => panic!("not an error event: {other:?}"),
    }
    // A frame that says nothing is refused by the core's rule, the same
    // words as SendMessage's, to this client only.
    a.send(send_frame(" \n\t".into())).await;
    match next_error(&mut a).await.event {
        Some(Ev::Error(e)) => assert_eq!(e.message, "message text is empty", "{e:?}"),
        other => panic!("not an error event: {other:?}"),
    }
    // The same stream still carries messages.
    a.send(send_frame("hello".into())).await;
    a.until(WAIT, is_idle).await;
    assert_eq!(user_texts(&mut client, &id).await, vec!["hello"]);
    // The other client saw the conversation, not the refusals.
    let seen = other.until(WAIT, is_idle).await;
    assert!(
        !seen.iter().any(|m| matches!(m.event, Some(Ev::Error(_)))),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_message_limit_closes_only_its_stream_with_the_limit_named() {
    let s = Scenario::new()
        .config(SMALL_LIMITS)
        .conversation("")
        .script(Script::text("still here"))
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "big").await;
    a.next(WAIT).await;
    a.send(send_frame("z".repeat(2 * 1024 * 1024))).await;
    let status = loop {
        match tokio::time::timeout(WAIT, a.rx.message()).await {
            Ok(Ok(Some(m))) if !matches!(m.event, Some(Ev::Error(_))) => {}
            Ok(Err(status)) => break status,
            other => panic!("expected the stream to end with a status, got {other:?}"),
        }
    };
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(
        status.message().starts_with("Attach frame refused: ")
            && status.message().contains("1048576")
            && status
                .message()
                .contains("`max_message_bytes` in the [grpc] section"),
        "{status:?}"
    );
    assert!(
        s.daemon.log().contains("closing an Attach stream"),
        "{}",
        s.daemon.log()
    );
    // The daemon and the conversation carry on.
    let mut b = Attached::open(&mut client, &id, 0, "small").await;
    b.next(WAIT).await;
    b.send(send_frame("after".into())).await;
    b.until(WAIT, is_idle).await;
    assert_eq!(user_texts(&mut client, &id).await, vec!["after"]);

    // The CLI says so and exits non-zero; neither line was sent.
    let mut input = vec![b'w'; 2 * 1024 * 1024];
    input.extend_from_slice(b"\nshort line\n");
    let (code, out, err) = attach_with_input(&s.daemon, &id, input).await;
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("`max_message_bytes`") && err.contains("nothing typed from there on was sent"),
        "{err}"
    );
    assert_eq!(user_texts(&mut client, &id).await, vec!["after"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_requests_over_a_limit_are_refused_by_name() {
    let s = Scenario::new()
        .config(SMALL_LIMITS)
        .conversation("")
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let text = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "t".repeat(70_000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(text.code(), tonic::Code::InvalidArgument);
    assert!(text.message().contains("`max_text_bytes`"), "{text:?}");
    let prompt = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: s.work.path().display().to_string(),
            prompt: "p".repeat(70_000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        prompt.message().starts_with("prompt is 70000 bytes"),
        "{prompt:?}"
    );
    let message = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "m".repeat(2 * 1024 * 1024),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(message.code(), tonic::Code::OutOfRange);
    assert!(message.message().contains("1048576"), "{message:?}");
    assert!(user_texts(&mut client, &id).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_over_the_message_limit_names_the_conversation_and_the_limit() {
    let s = Scenario::new()
        .config(SMALL_LIMITS)
        .conversation("hi")
        .script(Script::text("hello"))
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let mut exported = client
        .export_conversations(pb::ExportConversationsRequest {
            conversation_ids: vec![id.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    let item = exported.message().await.unwrap().unwrap();
    let mut huge = item.clone();
    if let Some(c) = &mut huge.conversation {
        c.id = "01J00000000000000000000000".into();
    }
    huge.messages[0].content = vec![pb::ContentBlock {
        block: Some(pb::content_block::Block::Text(pb::TextBlock {
            text: "h".repeat(2 * 1024 * 1024),
        })),
    }];
    let status = client
        .import_conversations(tokio_stream::iter(vec![item, huge]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("conversation 2 of the import (0 before it imported) refused: ")
            && status.message().contains("`max_message_bytes`"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_quote_long_input_briefly_and_the_connection_carries_on() {
    let s = Scenario::new().conversation("").start().await;
    let (mut client, id) = (s.client, s.id);
    let long = "A".repeat(300_000);
    let unknown = client
        .send_message(pb::SendMessageRequest {
            conversation_id: long.clone(),
            text: "hi".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        unknown.code(),
        tonic::Code::NotFound,
        "{:?}",
        unknown.code()
    );
    assert!(
        unknown.message().len() < 400,
        "{} bytes",
        unknown.message().len()
    );
    let shell = client
        .kill_shell(pb::KillShellRequest {
            shell_id: long.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(shell.code(), tonic::Code::NotFound, "{:?}", shell.code());
    assert!(
        shell.message().len() < 400,
        "{} bytes",
        shell.message().len()
    );
    let cwd = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: format!("/{long}"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(cwd.code(), tonic::Code::InvalidArgument, "{:?}", cwd.code());
    assert!(cwd.message().len() < 600, "{} bytes", cwd.message().len());
    // The same connection still serves.
    assert!(user_texts(&mut client, &id).await.is_empty());
}
