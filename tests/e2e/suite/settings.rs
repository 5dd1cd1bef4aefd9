//! A conversation's permission mode and model change while it lives (issue
//! 14, point 6: `/mode`, `/model`; `agent set` for scripts): every attached
//! client is told, the next decision and the next model request use them,
//! they survive a restart, and what cannot be set is refused clearly.

use super::util::{Attached, agent_out, get, is_idle, is_request, send, tool};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::Script;
use agent_tests::harness::{Scenario, WAIT};
use serde_json::json;
use tonic::Code;

fn settings(m: &pb::AttachResponse) -> Option<&pb::SettingsChanged> {
    match &m.event {
        Some(Ev::SettingsChanged(s)) => Some(s),
        _ => None,
    }
}

fn update(id: &str, mode: pb::PermissionMode, model: &str) -> pb::UpdateConversationRequest {
    pb::UpdateConversationRequest {
        conversation_id: id.to_string(),
        mode: mode as i32,
        model: model.to_string(),
        client_name: "laptop".to_string(),
        add_dirs: Vec::new(),
        environment: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_mode_and_model_reach_every_client_the_next_request_and_a_restart() {
    let s = Scenario::new()
        .scripts([
            tool("w1", "write", json!({"path": "a.txt", "content": "one"})),
            Script::text("wrote it"),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, mut daemon, mut client, work, id) = (s.fake, s.daemon, s.client, s.work, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;

    // `agent set` changes both; the watcher is told, with who did it.
    let (ok, out, err) = agent_out(
        &daemon,
        &[
            "set",
            &id,
            "--mode",
            "accept_edits",
            "--model",
            "claude-other-1",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("mode accept_edits · model claude-other-1"),
        "{out}"
    );
    let seen = watcher.until(WAIT, |m| settings(m).is_some()).await;
    let changed = settings(seen.last().unwrap()).unwrap();
    assert_eq!(changed.mode, pb::PermissionMode::AcceptEdits as i32);
    assert_eq!(changed.model, "claude-other-1");
    assert!(changed.context_window > 0);
    assert!(!changed.by.is_empty(), "{changed:?}");

    // The next turn: the write inside the working directory runs without
    // asking (accept_edits), and the request names the new model.
    send(&mut client, &id, "write a.txt").await;
    let frames = watcher.until(WAIT, is_idle).await;
    assert!(
        !frames.iter().any(is_request),
        "accept_edits asks nothing for an edit in the working directory"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("a.txt")).unwrap(),
        "one"
    );
    let requests = fake.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.body["model"], "claude-other-1", "{:#}", r.body);
    }

    // The same values again change nothing and tell nobody.
    let same = client
        .update_conversation(update(
            &id,
            pb::PermissionMode::AcceptEdits,
            "claude-other-1",
        ))
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap();
    assert_eq!(same.model, "claude-other-1");
    // Only the mode: the model stays.
    client
        .update_conversation(update(&id, pb::PermissionMode::Plan, ""))
        .await
        .unwrap();
    let seen = watcher.until(WAIT, |m| settings(m).is_some()).await;
    let changed = settings(seen.last().unwrap()).unwrap();
    assert_eq!(
        (changed.mode, changed.model.as_str(), changed.by.as_str()),
        (pb::PermissionMode::Plan as i32, "claude-other-1", "laptop"),
        "the unchanged update sent no event before this one"
    );

    // Durable: a restarted daemon has them.
    daemon.terminate().await;
    daemon.restart().await;
    let mut client = daemon.client().await;
    let after = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!(after.mode, pb::PermissionMode::Plan as i32);
    assert_eq!(after.model, "claude-other-1");
    let (ok, out, err) = agent_out(&daemon, &["set", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains("mode plan · model claude-other-1"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_set_is_refused_and_changes_nothing() {
    let s = Scenario::new().conversation("").start().await;
    let (daemon, mut client, id) = (s.daemon, s.client, s.id);
    let before = get(&mut client, &id).await.conversation.unwrap();

    let bypass = client
        .update_conversation(update(&id, pb::PermissionMode::Bypass, ""))
        .await
        .unwrap_err();
    assert_eq!(bypass.code(), Code::FailedPrecondition, "{bypass:?}");
    assert!(bypass.message().contains("--allow-bypass"), "{bypass:?}");

    for bad in ["two words", "tab\there", &"m".repeat(201)] {
        let refused = client
            .update_conversation(update(&id, pb::PermissionMode::Unspecified, bad))
            .await
            .unwrap_err();
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{bad:?}: {refused:?}"
        );
        assert!(refused.message().contains("model name"), "{refused:?}");
    }
    let unknown_mode = client
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            mode: 42,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(unknown_mode.code(), Code::InvalidArgument);
    let missing = client
        .update_conversation(update("ZZZZ", pb::PermissionMode::Plan, ""))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");

    let after = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!((after.mode, &after.model), (before.mode, &before.model));

    // The CLI says why and fails.
    let (ok, _, err) = agent_out(&daemon, &["set", &id, "--mode", "bypass"]).await;
    assert!(!ok);
    assert!(err.contains("--allow-bypass"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_mode_upgrade_is_announced_as_a_settings_change() {
    let s = Scenario::new()
        .scripts([
            tool(
                "u1",
                "request_mode_upgrade",
                json!({"reason": "I need to edit"}),
            ),
            Script::text("upgraded"),
        ])
        .conversation("")
        .mode(pb::PermissionMode::ReadOnly)
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "edit things").await;
    let r = super::util::request_of(a.until(WAIT, is_request).await.last().unwrap());
    a.send(pb::attach_request::Frame::Answer(
        pb::AnswerPermissionFrame {
            request_id: r.request_id,
            decision: pb::PermissionDecision::AllowOnce as i32,
            ..Default::default()
        },
    ))
    .await;
    let frames = a.until(WAIT, is_idle).await;
    let changed: Vec<_> = frames.iter().filter_map(settings).collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].mode, pb::PermissionMode::Default as i32);
    assert_eq!(changed[0].by, "", "the PermissionResolved event says who");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_added_later_is_reachable_from_the_next_call() {
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("notes.txt"), "extra notes\n").unwrap();
    let extra_dir = extra.path().canonicalize().unwrap();
    let inside = extra_dir.join("notes.txt").display().to_string();
    let s = Scenario::new()
        .scripts([
            tool("r1", "read", json!({"path": inside})),
            Script::text("could not"),
            tool("r2", "read", json!({"path": inside})),
            Script::text("read it"),
        ])
        .conversation("")
        .start()
        .await;
    let (fake, daemon, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut watcher = Attached::open(&mut client, &id, 0, "watcher").await;
    send(&mut client, &id, "read the notes").await;
    watcher.until(WAIT, is_idle).await;
    let refused = super::util::result_of(&fake.requests()[1], "r1");
    assert_eq!(refused["is_error"], true, "{refused:#}");

    let (ok, out, err) = agent_out(
        &daemon,
        &["set", &id, "--add-dir", &extra.path().display().to_string()],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("also in {}", extra_dir.display())),
        "{out}"
    );
    let seen = watcher.until(WAIT, |m| settings(m).is_some()).await;
    let changed = settings(seen.last().unwrap()).unwrap();
    assert_eq!(changed.additional_dirs, [extra_dir.display().to_string()]);

    send(&mut client, &id, "again").await;
    watcher.until(WAIT, is_idle).await;
    let read = super::util::result_of(&fake.requests()[3], "r2");
    assert_ne!(read["is_error"], true, "{read:#}");
    assert!(
        read["content"].to_string().contains("extra notes"),
        "{read:#}"
    );

    // Added twice, it is there once; a missing directory is refused.
    let again = client
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            add_dirs: vec![extra.path().display().to_string()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap();
    assert_eq!(again.additional_dirs.len(), 1, "{again:?}");
    let missing = client
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            add_dirs: vec!["/no/such/dir".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert!(missing.message().contains("/no/such/dir"), "{missing:?}");
}
