//! The live commands against the scripted mock daemon.

use agent_proto::v1::{self as pb, PermissionDecision as D, StateKind as S, attach_request::Frame};
use pb::attach_response::Event as E;
use tonic::Status;

use crate::error::Exit;
use crate::mock::{AttachCall, CONV_ID, Daemon, state};
use crate::session::{Outcome, SessionConfig, SessionKind, session_outcome};
use agent_proto::testing::rpc;

fn snapshot(kind: S, messages: Vec<pb::Message>, pending: Option<pb::PermissionRequest>) -> E {
    E::Snapshot(pb::Snapshot {
        your_role: pb::ClientRole::Driver as i32,
        plan: None,
        conversation: Some(pb::ConversationSummary {
            id: CONV_ID.into(),
            state: Some(state(kind)),
            last_seq: 3,
            ..Default::default()
        }),
        messages,
        partial_reply: None,
        pending_permission: pending,
        clients: vec![pb::ClientInfo {
            client_id: "me".into(),
            name: "me@test".into(),
            ..Default::default()
        }],
        your_client_id: "me".into(),
    })
}

fn user_text(seq: u64, text: &str) -> pb::Message {
    pb::Message {
        seq,
        role: pb::Role::User as i32,
        content: vec![pb::ContentBlock {
            block: Some(pb::content_block::Block::Text(pb::TextBlock {
                text: text.into(),
            })),
        }],
        ..Default::default()
    }
}

fn assistant_text(seq: u64, text: &str) -> pb::Message {
    pb::Message {
        role: pb::Role::Assistant as i32,
        ..user_text(seq, text)
    }
}

fn changed(kind: S) -> E {
    E::StateChanged(pb::StateChanged {
        state: Some(state(kind)),
    })
}

fn delta(text: &str) -> E {
    E::TextDelta(pb::TextDelta {
        block_index: 0,
        text: text.into(),
    })
}

fn appended(m: pb::Message) -> E {
    E::MessageAppended(pb::MessageAppended { message: Some(m) })
}

fn request(options: &[D]) -> pb::PermissionRequest {
    pb::PermissionRequest {
        request_id: "req1".into(),
        tool_name: "bash".into(),
        tool_use_id: "t1".into(),
        input_json: "{\"command\":\"rm x\"}".into(),
        summary: "rm x".into(),
        options: options.iter().map(|d| *d as i32).collect(),
        ..Default::default()
    }
}

fn local_error(message: &str) -> E {
    E::Error(pb::ErrorEvent {
        message: message.into(),
        kind: pb::ErrorKind::Unspecified as i32,
    })
}

fn resolved(decision: D, client_id: &str, name: &str) -> E {
    E::PermissionResolved(pb::PermissionResolved {
        request_id: "req1".into(),
        decision: decision as i32,
        client_id: client_id.into(),
        client_name: name.into(),
        ..Default::default()
    })
}

/// Subscribes and sends the opening snapshot of a fresh `run`.
async fn open(daemon: &mut Daemon) -> AttachCall {
    open_with(daemon, "hi").await
}

async fn open_with(daemon: &mut Daemon, prompt: &str) -> AttachCall {
    let mut call = daemon.attach_call().await;
    match call.frame().await {
        // Without a terminal `run` creates the conversation on its stream.
        Frame::Create(create) => {
            assert_eq!(create.create.unwrap().prompt, prompt);
            assert!(!create.client_name.is_empty());
            assert!(daemon.requests::<rpc::CreateConversation>().is_empty());
        }
        // On a terminal it creates it first, then subscribes.
        Frame::Subscribe(sub) => {
            assert_eq!(sub.conversation_id, CONV_ID);
            assert_eq!(sub.after_seq, 0);
            assert!(!sub.client_name.is_empty());
        }
        other => panic!("expected a create or subscribe frame, got {other:?}"),
    }
    call.send(
        3,
        snapshot(S::AwaitingLlm, vec![user_text(1, prompt)], None),
    )
    .await;
    call
}

#[tokio::test]
async fn run_streams_the_reply_and_exits_when_idle() {
    let mut daemon = Daemon::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_str().unwrap().to_string();
    let agent = daemon.agent(
        &[
            "run", "--cwd", &cwd, "--model", "m", "--mode", "plan", "--allow", "bash(ls)", "say",
            "hi",
        ],
        false,
    );
    let mut call = daemon.attach_call().await;
    let create = call.create().await;
    assert_eq!(create.role, pb::ClientRole::Unspecified as i32);
    call.send(
        3,
        snapshot(S::AwaitingLlm, vec![user_text(1, "say hi")], None),
    )
    .await;
    call.send(4, E::ReplyBegin(pb::ReplyBegin { attempt: 1 }))
        .await;
    call.send(5, delta("Hello")).await;
    call.send(6, delta(" world")).await;
    call.send(7, appended(assistant_text(2, "Hello world")))
        .await;
    call.send(8, changed(S::Idle)).await;
    let (result, out, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    // The prompt is not echoed; the reply is shown once.
    assert_eq!(out, "Hello world\n");
    assert_eq!(err, format!("conversation {CONV_ID}\n"));
    // Created on the Attach stream, not by CreateConversation.
    assert!(daemon.requests::<rpc::CreateConversation>().is_empty());
    let mut created = vec![create.create.unwrap()];
    let canonical = dir.path().canonicalize().unwrap();
    // A fresh request id (a ULID) makes the create safe to retry.
    let request_id = std::mem::take(&mut created[0].client_request_id);
    assert_eq!(request_id.len(), 26, "{request_id:?}");
    // This process's environment: the conversation's commands run in it.
    let sent = created[0].environment.take().unwrap();
    assert_eq!(sent.vars.get("PATH"), std::env::var("PATH").ok().as_ref());
    assert_eq!(
        created,
        vec![pb::CreateConversationRequest {
            images: Vec::new(),
            cwd: canonical.to_str().unwrap().into(),
            model: "m".into(),
            prompt: "say hi".into(),
            mode: pb::PermissionMode::Plan as i32,
            allow_rules: vec!["bash(ls)".into()],
            additional_dirs: vec![],
            mcp_servers: vec![],
            client_request_id: String::new(),
            environment: None,
            thinking: None,
        }]
    );
}

#[tokio::test]
async fn run_ends_at_once_when_the_turn_already_finished() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let mut call = daemon.attach_call().await;
    call.create().await;
    call.send(
        3,
        snapshot(
            S::Idle,
            vec![user_text(1, "hi"), assistant_text(2, "Hi there.")],
            None,
        ),
    )
    .await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out, "Hi there.\n");
    // Creating the conversation and attaching to it share one connection.
    assert_eq!(daemon.connections(), 1);
}

#[tokio::test]
async fn run_created_on_its_stream_waits_for_the_first_turn_and_creates_again_after_a_break() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let mut call = daemon.attach_call().await;
    let first = call.create().await.create.unwrap();
    // Broken before any snapshot named the conversation: the same request
    // again, which the daemon answers with what the first one made.
    call.fail(Status::unavailable("daemon restarting")).await;
    let mut call = daemon.attach_call().await;
    let again = call.create().await.create.unwrap();
    assert_eq!(again, first);
    // The conversation before its first turn: idle and empty, not the end.
    call.send(3, snapshot(S::Idle, vec![], None)).await;
    call.send(4, appended(user_text(1, "hi"))).await;
    call.send(5, changed(S::AwaitingLlm)).await;
    call.send(6, appended(assistant_text(2, "Hi."))).await;
    call.send(7, changed(S::Idle)).await;
    let (result, out, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok, "{out}");
    assert!(out.ends_with("Hi.\n"), "{out}");
    assert_eq!(err, format!("conversation {CONV_ID}\n"));
    // Once named, a broken stream resumes it instead of creating again.
    let agent = daemon.agent(&["run", "hi"], false);
    let mut call = daemon.attach_call().await;
    call.create().await;
    call.send(3, snapshot(S::Idle, vec![], None)).await;
    call.send(4, appended(user_text(1, "hi"))).await;
    call.fail(Status::unavailable("daemon restarting")).await;
    let mut call = daemon.attach_call().await;
    let sub = call.subscribe().await;
    assert_eq!((sub.conversation_id.as_str(), sub.after_seq), (CONV_ID, 4));
    call.send(5, changed(S::AwaitingLlm)).await;
    call.send(6, changed(S::Idle)).await;
    let (result, _, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(err, format!("conversation {CONV_ID}\n"), "said once");
}

#[tokio::test]
async fn run_against_a_daemon_without_the_create_frame_creates_then_subscribes() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let mut call = daemon.attach_call().await;
    let create = call.create().await.create.unwrap();
    // What a daemon older than the frame answers (it decodes no body).
    call.fail(Status::invalid_argument(
        "the first Attach frame must be `subscribe`",
    ))
    .await;
    let mut call = daemon.attach_call().await;
    let sub = call.subscribe().await;
    assert_eq!((sub.conversation_id.as_str(), sub.after_seq), (CONV_ID, 0));
    assert_eq!(
        daemon.requests::<rpc::CreateConversation>(),
        vec![create],
        "the same request, by CreateConversation"
    );
    call.send(
        3,
        snapshot(
            S::Idle,
            vec![user_text(1, "hi"), assistant_text(2, "Hi.")],
            None,
        ),
    )
    .await;
    let (result, out, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(out, "Hi.\n");
    assert_eq!(err, format!("conversation {CONV_ID}\n"));
}

#[tokio::test]
async fn run_fails_with_the_error_and_exits_3_when_context_is_exhausted() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(
        4,
        E::StateChanged(pb::StateChanged {
            state: Some(pb::ConversationState {
                kind: S::Error as i32,
                error_kind: pb::ErrorKind::Auth as i32,
                error_message: "invalid x-api-key".into(),
                ..Default::default()
            }),
        }),
    )
    .await;
    let (result, out, _) = agent.finish().await;
    let err = result.unwrap_err();
    assert_eq!(err.to_string(), "turn failed (auth): invalid x-api-key");
    assert_eq!(err.exit(), Exit::Error);
    assert_eq!(out, "✗ error (auth): invalid x-api-key\n");

    // Exhausted, and nobody continues it (the notice after the state says
    // so): `run` ends with status 3.
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(4, changed(S::ContextExhausted)).await;
    call.send(
        5,
        E::ContextExhausted(pb::ContextExhausted {
            summary: "the summary".into(),
            continuing: false,
        }),
    )
    .await;
    let (result, _, _) = agent.finish().await;
    assert_eq!(result.unwrap_err().exit().code(), 3);
}

#[tokio::test]
async fn run_follows_a_conversation_the_daemon_continues_by_itself() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(4, changed(S::ContextExhausted)).await;
    call.send(
        5,
        E::ContextExhausted(pb::ContextExhausted {
            summary: "the summary".into(),
            continuing: true,
        }),
    )
    .await;
    call.send(
        0,
        E::ConversationContinued(pb::ConversationContinued {
            conversation_id: "01NEXT".into(),
            hop: 1,
            automatic: true,
        }),
    )
    .await;
    // It subscribes to the new conversation from its start and ends when
    // that turn does.
    let mut next = daemon.attach_call().await;
    let sub = next.subscribe().await;
    assert_eq!((sub.conversation_id.as_str(), sub.after_seq), ("01NEXT", 0));
    next.send(2, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok, "{out}");
    assert!(
        out.contains("continued automatically as 01NEXT (hop 1)"),
        "{out}"
    );
}

#[tokio::test]
async fn a_typed_answer_goes_back_on_the_stream() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], true);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce, D::Deny])),
        }),
    )
    .await;
    agent.wait_for_output("type a key").await;
    // Not an option here, then a real answer.
    agent.type_line("b").await;
    agent.type_line("y").await;
    match call.frame().await {
        Frame::Answer(a) => {
            assert_eq!(a.request_id, "req1");
            assert_eq!(a.decision, D::AllowOnce as i32);
        }
        other => panic!("expected an answer, got {other:?}"),
    }
    call.send(5, resolved(D::AllowOnce, "me", "me@test")).await;
    call.send(6, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(
        out,
        "⚠ permission needed: bash\n  rm x\n  [y] allow once  [n] deny\ntype a key and press Enter\n\
         ✗ background is not offered for this request\n  ⎿ allow once (you)\n"
    );
}

#[tokio::test]
async fn deny_and_stop_asks_for_feedback_and_waits_for_the_next_turn() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], true);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[])),
        }),
    )
    .await;
    agent.wait_for_output("type a key").await;
    agent.type_line("s").await;
    agent.wait_for_output("instead?").await;
    agent.type_line("use trash instead").await;
    match call.frame().await {
        Frame::Answer(a) => {
            assert_eq!(a.decision, D::DenyAndStop as i32);
            assert_eq!(a.feedback, "use trash instead");
        }
        other => panic!("expected an answer, got {other:?}"),
    }
    call.send(5, resolved(D::DenyAndStop, "me", "me")).await;
    // Idle between the stopped turn and the feedback's turn: not the end.
    call.send(6, changed(S::Idle)).await;
    call.send(7, appended(user_text(4, "use trash instead")))
        .await;
    call.send(8, changed(S::AwaitingLlm)).await;
    call.send(9, delta("OK.")).await;
    call.send(10, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert!(out.ends_with("  ⎿ deny and stop (you)\nOK.\n"), "{out}");
}

#[tokio::test]
async fn yes_answers_allow_once_by_itself() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "--yes", "hi"], false);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce, D::Deny])),
        }),
    )
    .await;
    assert!(matches!(call.frame().await, Frame::Answer(a) if a.decision == D::AllowOnce as i32));
    call.send(5, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    // One line per request, not the menu.
    assert!(out.contains("✓ allowed once (--yes): rm x\n"), "{out}");
    assert!(
        !out.contains("[y]") && !out.contains("permission needed"),
        "{out}"
    );
}

#[tokio::test]
async fn without_a_terminal_it_waits_for_another_client() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce, D::Deny, D::Never])),
        }),
    )
    .await;
    call.send(5, resolved(D::Deny, "c2", "bob@box:7")).await;
    call.send(6, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert!(
        out.contains(
            "waiting for another client to answer (agent answer 01TESTCONV allow_once|deny|never)\n  ⎿ deny (answered by bob@box:7)\n"
        ),
        "{out}"
    );
}

#[tokio::test]
async fn a_late_answer_says_who_answered_first() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], true);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce, D::Deny])),
        }),
    )
    .await;
    agent.wait_for_output("type a key").await;
    agent.type_line("n").await;
    assert!(matches!(call.frame().await, Frame::Answer(_)));
    call.send(5, resolved(D::AllowOnce, "c2", "bob")).await;
    // The daemon's refusal of the late answer, to this client only.
    call.send(
        0,
        local_error("permission request req1 is already answered"),
    )
    .await;
    call.send(6, changed(S::Idle)).await;
    let (_, out, _) = agent.finish().await;
    assert!(
        out.ends_with(
            "  ⎿ allow once (answered by bob)\n✗ your answer \"deny\" came too late: bob answered first\n"
        ),
        "{out}"
    );

    // A refusal as an error status on the stream is reported and the
    // client subscribes again from where it was.
    let agent = daemon.agent(&["run", "hi"], true);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(request(&[D::AllowOnce, D::Deny])),
        }),
    )
    .await;
    agent.wait_for_output("type a key").await;
    agent.type_line("y").await;
    assert!(matches!(call.frame().await, Frame::Answer(_)));
    call.fail(Status::failed_precondition(
        "request already answered by bob",
    ))
    .await;
    let mut call = daemon.attach_call().await;
    assert_eq!(call.subscribe().await.after_seq, 4);
    call.send(5, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert!(
        out.contains("✗ answer \"allow once\" refused: request already answered by bob\n"),
        "{out}"
    );
}

#[tokio::test]
async fn ctrl_c_cancels_then_exits_130() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let mut call = open(&mut daemon).await;
    call.send(4, changed(S::LlmRequesting)).await;
    // A whole paragraph: reply text is shown a markdown block at a time.
    call.send(5, delta("Work\n\n")).await;
    agent.wait_for_output("Work").await;
    agent.interrupt().await;
    assert!(matches!(call.frame().await, Frame::Cancel(_)));
    call.send(6, changed(S::Cancelling)).await;
    call.send(7, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Interrupted);
    assert!(
        out.contains("cancelling… (Ctrl-C again to quit now)"),
        "{out}"
    );
    // Said once: the state's own "cancelling…" is not repeated.
    assert_eq!(out.matches("cancelling").count(), 1, "{out}");

    // A second Ctrl-C does not wait.
    let agent = daemon.agent(&["run", "hi"], false);
    let mut call = open(&mut daemon).await;
    call.send(4, changed(S::LlmRequesting)).await;
    agent.interrupt().await;
    assert!(matches!(call.frame().await, Frame::Cancel(_)));
    agent.interrupt().await;
    let (result, _, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Interrupted);
}

#[tokio::test]
async fn a_broken_stream_resumes_after_the_last_seq_without_duplicates() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(4, changed(S::LlmRequesting)).await;
    call.send(5, delta("one ")).await;
    call.fail(Status::unavailable("daemon restarting")).await;

    let mut call = daemon.attach_call().await;
    let sub = call.subscribe().await;
    assert_eq!((sub.conversation_id.as_str(), sub.after_seq), (CONV_ID, 5));
    call.send(0, E::Resumed(pb::Resumed { after_seq: 5 })).await;
    // Already seen: dropped.
    call.send(5, delta("one ")).await;
    call.send(6, delta("two")).await;
    call.send(7, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(
        out,
        "one\nreconnecting… (daemon restarting)\nreconnected\ntwo\n"
    );

    // Deltas missed during the break are not replayed: the durable
    // message then shows the whole reply.
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(4, delta("Hel")).await;
    call.fail(Status::unavailable("daemon restarting")).await;
    let mut call = daemon.attach_call().await;
    assert_eq!(call.subscribe().await.after_seq, 4);
    call.send(0, E::Resumed(pb::Resumed { after_seq: 4 })).await;
    call.send(6, appended(assistant_text(2, "Hello world")))
        .await;
    call.send(7, changed(S::Idle)).await;
    let (_, out, _) = agent.finish().await;
    assert_eq!(
        out,
        "Hel\nreconnecting… (daemon restarting)\nreconnected\nHello world\n"
    );
}

#[tokio::test]
async fn merged_deltas_with_gaps_in_the_sequence_resume_after_the_highest_seen() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(4, changed(S::LlmRequesting)).await;
    call.send(5, delta("one ")).await;
    // Deltas 6 to 9 merged into one frame: the numbers between are skipped.
    call.send(9, delta("two three ")).await;
    call.fail(Status::unavailable("daemon restarting")).await;

    let mut call = daemon.attach_call().await;
    assert_eq!(call.subscribe().await.after_seq, 9);
    call.send(0, E::Resumed(pb::Resumed { after_seq: 9 })).await;
    // Covered by the merged frame: dropped.
    call.send(8, delta("three ")).await;
    call.send(12, delta("four")).await;
    call.send(13, changed(S::Idle)).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(
        out,
        "one two three\nreconnecting… (daemon restarting)\nreconnected\nfour\n"
    );
}

#[tokio::test]
async fn attach_shows_the_snapshot_sends_lines_and_detaches_at_eof() {
    let mut daemon = Daemon::start().await;
    let mut agent = daemon.agent(&["attach", "01TEST"], true);
    let mut call = daemon.attach_call().await;
    let sub = call.subscribe().await;
    assert_eq!((sub.conversation_id.as_str(), sub.after_seq), ("01TEST", 0));
    call.send(
        3,
        snapshot(
            S::Idle,
            vec![user_text(1, "hi"), assistant_text(2, "Hello.")],
            None,
        ),
    )
    .await;
    agent.type_line("").await;
    agent.type_line("  how are you?  ").await;
    match call.frame().await {
        Frame::Send(s) => assert_eq!(s.text, "how are you?"),
        other => panic!("expected a message, got {other:?}"),
    }
    agent.close_stdin();
    // The client waits for its message to be acknowledged before leaving.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!agent.task.is_finished());
    call.send(4, appended(user_text(3, "how are you?"))).await;
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert_eq!(
        out,
        format!("conversation {CONV_ID} · idle\n> hi\nHello.\n")
    );
}

#[tokio::test]
async fn attach_prompts_for_a_pending_request_and_ctrl_c_cancels() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["attach", CONV_ID], true);
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.send(
        3,
        snapshot(
            S::AwaitingPermission,
            vec![],
            Some(request(&[D::AllowOnce, D::Deny])),
        ),
    )
    .await;
    agent.wait_for_output("type a key").await;
    agent.type_line("n").await;
    assert!(matches!(call.frame().await, Frame::Answer(a) if a.decision == D::Deny as i32));
    call.send(4, resolved(D::Deny, "me", "me")).await;
    call.send(5, changed(S::LlmRequesting)).await;
    agent.wait_for_output("(you)").await;
    // Lines are messages again.
    agent.type_line("stop that").await;
    assert!(matches!(call.frame().await, Frame::Send(s) if s.text == "stop that"));
    agent.interrupt().await;
    assert!(matches!(call.frame().await, Frame::Cancel(_)));
    agent.interrupt().await;
    let (result, _, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Interrupted);
}

#[tokio::test]
async fn attach_to_an_unknown_conversation_fails_clearly() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["attach", "01NOPE"], true);
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.fail(Status::not_found("no conversation 01NOPE")).await;
    let (result, _, _) = agent.finish().await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "unknown conversation 01NOPE"
    );
}

#[tokio::test]
async fn json_mode_prints_one_object_per_event() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["--json", "run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(4, delta("Hi")).await;
    call.send(5, changed(S::Idle)).await;
    let (result, out, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "conversation_created",
            "snapshot",
            "text_delta",
            "state_changed"
        ]
    );
    assert_eq!(lines[2]["text_delta"]["text"], "Hi");
    assert_eq!(lines[3]["state_changed"]["state"]["kind"], "idle");
    assert_eq!(err, format!("conversation {CONV_ID}\n"));
}

#[tokio::test]
async fn a_daemon_restart_is_survived() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["attach", CONV_ID], false);
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.send(
        3,
        snapshot(S::LlmRequesting, vec![user_text(1, "hi")], None),
    )
    .await;
    // A whole paragraph: reply text is shown a markdown block at a time.
    call.send(4, delta("Hel\n\n")).await;
    agent.wait_for_output("Hel").await;
    // The daemon dies mid-reply; the client keeps trying; it comes back.
    daemon.stop().await;
    drop(call);
    agent.wait_for_output("reconnecting…").await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    daemon.restart();
    let mut call = daemon.attach_call().await;
    let sub = call.subscribe().await;
    assert_eq!(sub.after_seq, 4);
    // A fresh snapshot (the daemon chose not to replay): only what is new is shown.
    call.send(
        6,
        snapshot(
            S::Idle,
            vec![user_text(1, "hi"), assistant_text(2, "Hello.")],
            None,
        ),
    )
    .await;
    agent.wait_for_output("Hello.").await;
    let mut agent = agent;
    agent.close_stdin();
    let (result, out, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    assert!(
        out.starts_with(&format!(
            "conversation {CONV_ID} · thinking\n> hi\nHel\nreconnecting… (connection lost)\n"
        )),
        "{out}"
    );
    assert!(out.ends_with("reconnected\nHello.\n"), "{out}");
}

#[tokio::test]
async fn a_refused_message_is_reported_and_not_waited_for() {
    let mut daemon = Daemon::start().await;
    let mut agent = daemon.agent(&["attach", CONV_ID], false);
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.send(3, snapshot(S::LlmRequesting, vec![], None)).await;
    agent.type_line("more").await;
    assert!(matches!(call.frame().await, Frame::Send(_)));
    agent.close_stdin();
    call.send(0, local_error("agent is busy")).await;
    let (result, out, _) = agent.finish().await;
    // A script piping into `attach` can tell that its message was dropped.
    let err = result.unwrap_err();
    assert_eq!(err.exit(), Exit::Error);
    assert_eq!(err.to_string(), "1 message of 1 refused");
    assert!(
        out.ends_with("✗ message not sent: agent is busy\n"),
        "{out}"
    );
}

#[tokio::test]
async fn a_frame_over_the_daemons_size_limit_ends_attach_with_the_limit_named() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["attach", CONV_ID], false);
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.send(3, snapshot(S::Idle, vec![], None)).await;
    agent.type_line("huge").await;
    agent.type_line("short line").await;
    assert!(matches!(call.frame().await, Frame::Send(_)));
    assert!(matches!(call.frame().await, Frame::Send(_)));
    call.fail(Status::out_of_range(
        "Attach frame refused: decoded message length too large (`max_message_bytes`)",
    ))
    .await;
    let (result, _, _) = agent.finish().await;
    let err = result.unwrap_err();
    assert_eq!(err.exit(), Exit::Error);
    assert_eq!(
        err.to_string(),
        "Attach frame refused: decoded message length too large (`max_message_bytes`); \
         the daemon closed the stream, so nothing typed from there on was sent"
    );
}

#[tokio::test]
async fn a_snapshot_resets_the_sequence_baseline() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], false);
    let call = open(&mut daemon).await;
    call.send(50, delta("a")).await;
    call.fail(Status::unavailable("restarting")).await;
    let mut call = daemon.attach_call().await;
    assert_eq!(call.subscribe().await.after_seq, 50);
    // This daemon lost its numbering: a snapshot at 10, then 11.
    let mut snap = snapshot(S::LlmRequesting, vec![user_text(1, "hi")], None);
    if let E::Snapshot(s) = &mut snap {
        s.conversation.as_mut().unwrap().last_seq = 10;
    }
    call.send(10, snap).await;
    call.send(11, changed(S::Idle)).await;
    let (result, _, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
}

#[tokio::test]
async fn a_message_not_yet_appended_is_sent_again_with_its_id_after_a_reconnect() {
    let mut daemon = Daemon::start().await;
    let mut agent = daemon.agent(&["attach", CONV_ID], false);
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.send(3, snapshot(S::Idle, vec![], None)).await;
    agent.type_line("are you there?").await;
    let first = match call.frame().await {
        Frame::Send(s) => s,
        other => panic!("expected a message, got {other:?}"),
    };
    assert_eq!(first.client_request_id.len(), 26, "a ULID: {first:?}");
    // The connection breaks before the message is seen appended.
    call.fail(Status::unavailable("restarting")).await;
    let mut call = daemon.attach_call().await;
    assert_eq!(call.subscribe().await.after_seq, 3);
    match call.frame().await {
        Frame::Send(again) => assert_eq!(again, first, "the same text under the same id"),
        other => panic!("expected the message again, got {other:?}"),
    }
    call.send(4, appended(user_text(1, "are you there?"))).await;
    agent.close_stdin();
    let (result, _, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
}

/// An interactive session on `CONV_ID`, attached and shown idle.
struct Interactive {
    /// What the session reads as typed lines.
    lines: tokio::sync::mpsc::Sender<String>,
    /// Its interrupt keys and its Attach call, open for the session's life.
    _presses: tokio::sync::mpsc::Sender<()>,
    _call: AttachCall,
    captured: crate::io::Captured,
    session: tokio::task::JoinHandle<Result<Outcome, crate::error::CliError>>,
}

async fn interactive_at_idle(daemon: &mut Daemon) -> Interactive {
    let (lines, lines_rx) = tokio::sync::mpsc::channel(4);
    let (presses, presses_rx) = tokio::sync::mpsc::channel(1);
    let (mut io, captured) = crate::io::Io::captured(lines_rx, true, presses_rx);
    let client = crate::connect(&daemon.socket).await.unwrap();
    let config = SessionConfig {
        kind: SessionKind::Interactive,
        conversation_id: CONV_ID.into(),
        socket: daemon.socket.clone(),
        yes: false,
        json: false,
        client_name: "me".into(),
        view_only: false,
        sent_prompt: None,
        create: None,
    };
    let session = tokio::spawn(async move {
        session_outcome(client, config, &mut io, None)
            .await
            .map(|(outcome, _)| outcome)
    });
    let mut call = daemon.attach_call().await;
    call.subscribe().await;
    call.send(3, snapshot(S::Idle, Vec::new(), None)).await;
    Interactive {
        lines,
        _presses: presses,
        _call: call,
        captured,
        session,
    }
}

#[tokio::test]
async fn an_interactive_attach_to_a_wrong_id_keeps_the_session() {
    let mut daemon = Daemon::start().await;
    daemon.state().exports = vec![pb::ExportedConversation {
        images: Vec::new(),
        conversation: Some(pb::ConversationSummary {
            id: "01OTHER".into(),
            ..Default::default()
        }),
        messages: Vec::new(),
    }];
    let Interactive {
        lines,
        _presses,
        _call,
        captured,
        session,
    } = interactive_at_idle(&mut daemon).await;
    lines.send("/attach nope".into()).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !captured.out.text().contains("nope") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            captured.out.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        !session.is_finished(),
        "a wrong id does not end the session"
    );
    // A right prefix switches to that conversation.
    lines.send("/attach 01OTH".into()).await.unwrap();
    let outcome = session.await.unwrap().unwrap();
    assert_eq!(outcome, Outcome::Switch(Some("01OTHER".into())));
}

#[test]
fn a_line_that_is_just_an_image_path_attaches_it_whatever_its_name() {
    use crate::session::input::{image_path, unquote};
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("shot one.txt");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let text = dir.path().join("fake.png");
    std::fs::write(&text, b"just text").unwrap();
    let shown = png.display().to_string();
    assert_eq!(
        image_path(&shown),
        Some(png.clone()),
        "by content, not name"
    );
    assert_eq!(image_path(&format!("'{shown}'")), Some(png.clone()));
    assert_eq!(image_path(&format!("file://{shown}")), Some(png.clone()));
    assert_eq!(image_path(&shown.replace(' ', "\\ ")), Some(png));
    assert_eq!(image_path(&text.display().to_string()), None);
    assert_eq!(image_path("/no/such/file.png"), None);
    assert_eq!(image_path("look at this"), None);
    assert_eq!(image_path(&dir.path().display().to_string()), None);
    assert_eq!(unquote("\"a b.png\""), "a b.png");
}

fn plan_request() -> pb::PermissionRequest {
    pb::PermissionRequest {
        request_id: "plan-p1".into(),
        tool_name: "propose_plan".into(),
        tool_use_id: "p1".into(),
        plan: Some(pb::Plan {
            intent: "Rename the module".into(),
            risk: "low".into(),
            phase: "proposed".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The plan answer of an Answer frame.
fn plan_answer_of(frame: Frame) -> pb::plan_answer::Answer {
    match frame {
        Frame::Answer(a) => {
            assert_eq!(a.request_id, "plan-p1");
            a.plan_answer.and_then(|p| p.answer).expect("a plan answer")
        }
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plan_is_approved_with_accept_edits_by_one_key() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], true);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(plan_request()),
        }),
    )
    .await;
    agent.wait_for_output("[e] approve, accept edits").await;
    // A permission key is no plan answer; then `e`.
    agent.type_line("y").await;
    agent.wait_for_output("not a plan answer").await;
    agent.type_line("e").await;
    match plan_answer_of(call.frame().await) {
        pb::plan_answer::Answer::Approve(a) => {
            assert_eq!(a.mode, pb::PermissionMode::AcceptEdits as i32);
        }
        other => panic!("expected approve, got {other:?}"),
    }
    call.send(5, resolved(D::Unspecified, "me", "me@test"))
        .await;
    call.send(6, changed(S::Idle)).await;
    let (result, out, err) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
    // One table of keys, the one that is read: no other labels for them.
    let shown = format!("{out}{err}");
    assert_eq!(
        shown.matches("[e] approve, accept edits").count(),
        1,
        "{shown}"
    );
    assert!(
        !shown.contains("[e] edit the steps") && !shown.contains("[y]"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_plan_rejected_by_key_asks_for_feedback() {
    let mut daemon = Daemon::start().await;
    let agent = daemon.agent(&["run", "hi"], true);
    let mut call = open(&mut daemon).await;
    call.send(
        4,
        E::PermissionRequested(pb::PermissionRequested {
            request: Some(plan_request()),
        }),
    )
    .await;
    agent.wait_for_output("[r] reject").await;
    agent.type_line("r").await;
    agent
        .wait_for_output("what should the plan do differently?")
        .await;
    agent.type_line("keep the old name as an alias").await;
    match plan_answer_of(call.frame().await) {
        pb::plan_answer::Answer::Reject(r) => {
            assert_eq!(r.feedback, "keep the old name as an alias");
        }
        other => panic!("expected reject, got {other:?}"),
    }
    call.send(5, resolved(D::Unspecified, "me", "me@test"))
        .await;
    call.send(6, changed(S::Idle)).await;
    let (result, _, _) = agent.finish().await;
    assert_eq!(result.unwrap(), Exit::Ok);
}

/// What `/help`, an unknown command and `/quit` print, byte for byte: the
/// pin that keeps the slash-command table's rendering as it was.
#[tokio::test]
async fn help_and_an_unknown_command_print_as_they_always_did() {
    let mut daemon = Daemon::start().await;
    let Interactive {
        lines,
        _presses,
        _call,
        captured,
        session,
    } = interactive_at_idle(&mut daemon).await;
    lines.send("/help".into()).await.unwrap();
    lines.send("/nosuch with args".into()).await.unwrap();
    lines.send("/".into()).await.unwrap();
    lines.send("/quit".into()).await.unwrap();
    let outcome = session.await.unwrap().unwrap();
    assert_eq!(outcome, Outcome::Detached);
    let out = captured.out.text();
    // The person's own prompt files (if any) are listed between the two.
    assert!(out.starts_with(HELP), "{out}");
    assert!(out.ends_with(UNKNOWN), "{out}");
    for &c in crate::slash_command::SlashCommand::ALL {
        let line = format!("  {:<16} {}", c.synopsis(), c.help());
        let times = out.lines().filter(|l| *l == line).count();
        assert_eq!(times, 1, "{c:?} in /help");
    }
}

/// `/help` up to the person's prompt files.
const HELP: &str = r#"Type a message and press Enter; Alt-Enter or a trailing \ starts a new line.
While the agent works, what you send waits for its next step (it is queued).
Ctrl-C cancels the turn; Ctrl-C twice or Ctrl-D leaves (the conversation stays).
A line starting with `# ` is noted in the project's AGENTS.md.
Tab completes commands and paths. The commands:
  /help            this list
  /cost            tokens and cost of this conversation
  /shells          the background shells of this conversation
  /expand          the last tool result whole (also Ctrl-O)
  /mode [MODE]     show or change the permission mode; Shift-Tab: the next one
  /model [NAME]    show or change the model of the next requests
  /think [LEVEL]   thinking of your next messages: on, off, a token budget, low|medium|high, default
  /add-dir DIR     let the tools reach DIR too (as the working directory)
  /env             run the next commands in this terminal's environment as it is now
  /init            ask the agent to write an AGENTS.md for this project
  /budget raise [AMOUNT] | stop answer a reached budget: raise it (default: by the budget again) or stop the turn
  /image PATH      attach an image (PNG, JPEG, GIF, WebP) to your next message
  /compact         summarise the conversation now and end it (then /continue)
  /continue        go on in a new conversation seeded with the summary
  /rewind [MESSAGE] [code|conversation|both] [force] undo the agent's file changes since a message (default: the last turn that changed any), or fork before it
  /attach ID       go to another conversation (agent ls lists them)
  /clear           start a new conversation in this directory
  /exit            leave (the conversation stays in the daemon: agent -c)
"#;

/// `/nosuch with args` and `/` alone.
const UNKNOWN: &str = "\u{2717} unknown command /nosuch; /help lists the commands
\u{2717} unknown command /; /help lists the commands
";
