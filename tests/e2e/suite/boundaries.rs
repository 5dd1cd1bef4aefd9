//! Trust boundaries (issue 39, points 1 and 2): what a remote token or an
//! import file may grant a conversation. A remote driver may not give MCP
//! servers, allow rules, bypass mode or directories outside `[remote]
//! roots` — through CreateConversation, the Attach `create` frame,
//! UpdateConversation or an import — while the local socket keeps every
//! power; an import grants nothing, whoever sends it; and a conversation
//! stored in bypass mode is held to the daemon's current `--allow-bypass`
//! when it is loaded again.

use super::remote::{LISTEN, listening, raw, secret, token};
use super::util::{
    agent_out, create_with, done, frame, get, listed, send, tool, wait_state, workdir,
};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_tests::fake_llm::FakeLlm;
use agent_tests::harness::{DaemonOptions, Scenario, TestDaemon};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// An id no conversation has yet.
const FRESH_IDS: [&str; 3] = [
    "01JDXYZABCDEFGHJKMNPQRSTV0",
    "01JDXYZABCDEFGHJKMNPQRSTV1",
    "01JDXYZABCDEFGHJKMNPQRSTV2",
];

/// An exported conversation with no messages, as a hostile file has it.
fn exported(
    id: &str,
    cwd: &str,
    mode: pb::PermissionMode,
    allow: &[&str],
) -> pb::ExportedConversation {
    pb::ExportedConversation {
        conversation: Some(pb::ConversationSummary {
            id: id.to_string(),
            cwd: cwd.to_string(),
            model: "claude-sonnet-4-5".to_string(),
            mode: mode as i32,
            allow_rules: allow.iter().map(|r| r.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_driver_may_not_grant_what_runs_unasked() {
    let open = workdir();
    let root = open.path().canonicalize().unwrap();
    let outside = workdir();
    let fake = FakeLlm::start().await;
    fake.push_all([done()]);
    let d = TestDaemon::start_with(
        &fake,
        DaemonOptions {
            extra_config: format!("{LISTEN}\nroots = [{:?}]", root.display().to_string()),
            // Even a daemon that allows bypass does not let a remote caller ask for it.
            args: vec!["--allow-bypass".to_string()],
            ..Default::default()
        },
    )
    .await;
    let mut local = d.client().await;
    let at = listening(&mut local).await;
    let driver = token(&d, "driver", "pilot", &[]).await;
    let mut remote = raw(&at, Some(&format!("Bearer {}", secret(&driver)))).await;

    let marker = root.join("marker");
    let in_root = root.display().to_string();
    let base = pb::CreateConversationRequest {
        cwd: in_root.clone(),
        prompt: "hello".to_string(),
        ..Default::default()
    };
    let cases = [
        (
            pb::CreateConversationRequest {
                mcp_servers: vec![pb::McpServer {
                    name: "x".to_string(),
                    command: "sh".to_string(),
                    args: vec!["-c".to_string(), format!("id > {}", marker.display())],
                    ..Default::default()
                }],
                ..base.clone()
            },
            "a remote client may not give MCP servers (x)",
        ),
        (
            pb::CreateConversationRequest {
                allow_rules: vec!["bash".to_string()],
                ..base.clone()
            },
            "a remote client may not give allow rules (1 given)",
        ),
        (
            pb::CreateConversationRequest {
                mode: pb::PermissionMode::Bypass as i32,
                ..base.clone()
            },
            "a remote client may not set bypass mode",
        ),
        (
            pb::CreateConversationRequest {
                additional_dirs: vec!["/".to_string()],
                ..base.clone()
            },
            "additional directory \"/\" is outside the directories open to remote clients",
        ),
        (
            pb::CreateConversationRequest {
                cwd: outside.path().display().to_string(),
                ..base.clone()
            },
            "is outside the directories open to remote clients",
        ),
    ];
    for (request, says) in cases {
        let refused = remote
            .create_conversation(request.clone())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains(says), "{says}: {refused:?}");
        // The Attach `create` frame is held to the same rule.
        let (tx, rx) = mpsc::channel(1);
        tx.send(frame(Frame::Create(pb::CreateAndSubscribe {
            create: Some(request),
            client_name: "afar".to_string(),
            ..Default::default()
        })))
        .await
        .unwrap();
        let refused = match remote.attach(ReceiverStream::new(rx)).await {
            Err(status) => status,
            Ok(stream) => stream.into_inner().message().await.unwrap_err(),
        };
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains(says), "{says}: {refused:?}");
    }
    assert!(listed(&mut local).await.is_empty(), "nothing was created");
    assert!(
        fake.requests().is_empty() && !marker.exists(),
        "nothing ran"
    );

    // What a driver may do, it still does: a conversation in the root, in
    // accept_edits mode.
    let made = remote
        .create_conversation(pb::CreateConversationRequest {
            mode: pb::PermissionMode::AcceptEdits as i32,
            ..base.clone()
        })
        .await
        .unwrap()
        .into_inner()
        .conversation
        .unwrap();
    wait_state(&mut local, &made.id, pb::StateKind::Idle).await;

    // UpdateConversation: no bypass, no directory outside the roots.
    let sub = root.join("sub");
    std::fs::create_dir(&sub).unwrap();
    for (update, says) in [
        (
            pb::UpdateConversationRequest {
                conversation_id: made.id.clone(),
                mode: pb::PermissionMode::Bypass as i32,
                ..Default::default()
            },
            "may not set bypass mode",
        ),
        (
            pb::UpdateConversationRequest {
                conversation_id: made.id.clone(),
                add_dirs: vec!["/".to_string()],
                ..Default::default()
            },
            "is outside the directories open to remote clients",
        ),
    ] {
        let refused = remote.update_conversation(update).await.unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains(says), "{refused:?}");
    }
    remote
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: made.id.clone(),
            add_dirs: vec![sub.display().to_string()],
            ..Default::default()
        })
        .await
        .unwrap();

    // An import from afar: its grants are taken away, each said; a
    // directory outside the roots refuses it.
    let reply = remote
        .import_conversations(futures::stream::iter([exported(
            FRESH_IDS[0],
            &in_root,
            pb::PermissionMode::Bypass,
            &["bash"],
        )]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.imported, 1);
    let notices = reply.notices.join("\n");
    assert!(
        notices.contains("an import may not set bypass mode")
            && notices.contains("its mode is now default"),
        "{notices}"
    );
    assert!(
        notices.contains("an import may not give allow rules (1 given)"),
        "{notices}"
    );
    let imported = get(&mut local, FRESH_IDS[0]).await.conversation.unwrap();
    assert_eq!(imported.mode, pb::PermissionMode::Default as i32);
    assert!(imported.allow_rules.is_empty(), "{imported:?}");
    let refused = remote
        .import_conversations(futures::stream::iter([exported(
            FRESH_IDS[1],
            &outside.path().display().to_string(),
            pb::PermissionMode::Default,
            &[],
        )]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains(FRESH_IDS[1]) && refused.message().contains("outside"),
        "{refused:?}"
    );

    // The local socket keeps every power.
    local
        .create_conversation(pb::CreateConversationRequest {
            cwd: outside.path().display().to_string(),
            allow_rules: vec!["bash".to_string()],
            additional_dirs: vec!["/".to_string()],
            mode: pb::PermissionMode::Bypass as i32,
            ..Default::default()
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_grants_nothing_and_its_directories_are_checked_as_a_create_s() {
    let cmd = json!({"command": "echo ran > ran.txt"});
    let s = Scenario::new()
        .scripts([tool("b1", "bash", cmd), done()])
        .conversation("")
        .start()
        .await;
    let (d, mut client, work, id) = (s.daemon, s.client, s.work, s.id);
    let out = tokio::process::Command::from(d.agent())
        .args(["export", &id])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let mut record: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cwd = work.path().canonicalize().unwrap();
    std::fs::create_dir(cwd.join("sub")).unwrap();
    // Edited by hand: a fresh id, bypass mode, an allow rule, a cwd
    // spelled with `..`.
    record["conversation"]["id"] = json!(FRESH_IDS[0]);
    record["conversation"]["mode"] = json!("bypass");
    record["conversation"]["allow_rules"] = json!(["bash"]);
    record["conversation"]["cwd"] = json!(format!("{}/sub/..", cwd.display()));
    let file = d.dir.path().join("edited.jsonl");
    std::fs::write(&file, format!("{record}\n")).unwrap();
    let (ok, out, err) = agent_out(&d, &["import", &file.display().to_string()]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("imported 1 conversation"), "{out}");
    assert!(
        out.contains(&format!(
            "conversation {}: an import may not set bypass mode",
            FRESH_IDS[0]
        )),
        "{out}"
    );
    assert!(out.contains("may not give allow rules"), "{out}");
    let imported = get(&mut client, FRESH_IDS[0]).await.conversation.unwrap();
    assert_eq!(imported.mode, pb::PermissionMode::Default as i32);
    assert!(imported.allow_rules.is_empty());
    assert_eq!(imported.cwd, cwd.display().to_string(), "stored canonical");

    // Its tools ask, as any conversation's in default mode do.
    send(&mut client, FRESH_IDS[0], "go").await;
    wait_state(&mut client, FRESH_IDS[0], pb::StateKind::AwaitingPermission).await;
    assert!(!cwd.join("ran.txt").exists());

    // A directory that does not exist, or is not absolute, refuses the import.
    for bad in ["/no/such/dir/anywhere", "relative/dir"] {
        record["conversation"]["id"] = json!(FRESH_IDS[1]);
        record["conversation"]["cwd"] = json!(bad);
        record["conversation"]["mode"] = json!("default");
        std::fs::write(&file, format!("{record}\n")).unwrap();
        let (ok, out, err) = agent_out(&d, &["import", &file.display().to_string()]).await;
        assert!(!ok, "{out}");
        assert!(err.contains(FRESH_IDS[1]) && err.contains("cwd"), "{err}");
    }
    record["conversation"]["cwd"] = json!(cwd.display().to_string());
    record["conversation"]["additional_dirs"] = json!(["/no/such/dir/anywhere"]);
    std::fs::write(&file, format!("{record}\n")).unwrap();
    let (ok, _, err) = agent_out(&d, &["import", &file.display().to_string()]).await;
    assert!(!ok && err.contains("additional directory"), "{err}");
    assert!(
        listed(&mut client)
            .await
            .iter()
            .all(|c| c.id != FRESH_IDS[1]),
        "nothing of a refused import is stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bypass_conversation_asks_again_once_the_daemon_no_longer_allows_bypass() {
    let fake = FakeLlm::start().await;
    let cmd = json!({"command": "echo ran > ran.txt"});
    fake.push_all([done(), tool("b1", "bash", cmd), done()]);
    let mut d = TestDaemon::start_with(
        &fake,
        DaemonOptions {
            args: vec!["--allow-bypass".to_string()],
            ..Default::default()
        },
    )
    .await;
    let work = workdir();
    let mut client = d.client().await;
    let id = create_with(
        &mut client,
        work.path(),
        "hello",
        &[],
        pb::PermissionMode::Bypass,
    )
    .await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;

    d.terminate().await;
    d.set_args(Vec::new());
    d.restart().await;
    let mut client = d.client().await;
    send(&mut client, &id, "run it").await;
    wait_state(&mut client, &id, pb::StateKind::AwaitingPermission).await;
    assert!(!work.path().join("ran.txt").exists(), "it ran unasked");
    let now = get(&mut client, &id).await.conversation.unwrap();
    assert_eq!(now.mode, pb::PermissionMode::Default as i32);
    assert!(
        d.log().contains("bypass mode turned off"),
        "the daemon says why:\n{}",
        d.log()
    );
}
