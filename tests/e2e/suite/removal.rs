//! Putting conversations away (issue 41 point 4, Done-when 4): `agent rm`,
//! `archive`, `unarchive` and `rename` hold across a restart; a running
//! conversation is refused unless `--force`, which stops it, kills its
//! background shells and tells every attached client; a fork and the
//! conversation it came from keep their own checkpoints when the other is
//! deleted.

use super::util::{
    Attached, MUTATING, agent_out, create, create_with, get, send, tool, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::Script;
use agent_tests::harness::Scenario;
use serde_json::{Value, json};
use std::time::Duration;

/// The ids `agent --json ls ARGS` lists, with their titles.
async fn ls(d: &agent_tests::harness::TestDaemon, args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["--json", "ls"];
    all.extend_from_slice(args);
    let (ok, out, err) = agent_out(d, &all).await;
    assert!(ok, "{err}");
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    list.iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["title"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_archive_and_rename_hold_across_a_restart() {
    let s = Scenario::new()
        .scripts([
            Script::text("one"),
            Script::text("two"),
            Script::text("three"),
        ])
        .start()
        .await;
    let (mut d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let a = create(&mut client, work.path(), "first").await;
    wait_state(&mut client, &a, pb::StateKind::Idle).await;
    let b = create(&mut client, work.path(), "second").await;
    wait_state(&mut client, &b, pb::StateKind::Idle).await;
    let c = create(&mut client, work.path(), "third").await;
    wait_state(&mut client, &c, pb::StateKind::Idle).await;

    let (ok, out, err) = agent_out(&d, &["rename", &a, "the", "real", "title"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("renamed") && out.contains("the real title"),
        "{out}"
    );
    let (ok, out, err) = agent_out(&d, &["archive", &b]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("archived {b}")), "{out}");
    let (ok, out, err) = agent_out(&d, &["rm", &c]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("removed {c} (2 messages)")), "{out}");
    // A bad title is refused and changes nothing.
    let (ok, _, err) = agent_out(&d, &["rename", &a, " "]).await;
    assert!(!ok && err.contains("title"), "{err}");

    d.terminate().await;
    d.restart().await;
    let mut client = d.client().await;
    assert_eq!(
        ls(&d, &[]).await,
        vec![(a.clone(), "the real title".to_string())]
    );
    let archived = ls(&d, &["--archived"]).await;
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].0, b);
    let (ok, _, err) = agent_out(&d, &["show", &c]).await;
    assert!(!ok && err.contains("unknown conversation"), "{err}");
    let gone = client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: c.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    // An archived conversation is still whole and can be brought back.
    assert_eq!(get(&mut client, &b).await.messages.len(), 2);
    let (ok, _, err) = agent_out(&d, &["unarchive", &b]).await;
    assert!(ok, "{err}");
    d.terminate().await;
    d.restart().await;
    let ids: Vec<String> = ls(&d, &[]).await.into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, vec![b.clone(), a.clone()]);
    assert!(ls(&d, &["--archived"]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_refuses_a_running_conversation_and_force_stops_it_and_tells_attached_clients() {
    let s = Scenario::new()
        .scripts([
            tool(
                "bg",
                "bash",
                json!({"command": "sleep 3141", "run_in_background": true}),
            ),
            tool("fg", "bash", json!({"command": "sleep 60"})),
            Script::text("never"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let id = create_with(
        &mut client,
        work.path(),
        "sleep",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    // Running: the foreground command has started.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let shells = client
            .list_shells(pb::ListShellsRequest {
                conversation_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let r = get(&mut client, &id).await;
        let running =
            r.conversation.unwrap().state.unwrap().kind == pb::StateKind::ToolExecuting as i32;
        if !shells.shells.is_empty() && running {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the turn never ran its command"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut attached = Attached::open(&mut client, &id, 0, "watcher").await;
    let person = super::util::spawn_agent(&d, &["attach", &id]);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (ok, out, err) = agent_out(&d, &["rm", &id]).await;
    assert!(!ok, "a running conversation must be refused: {out}");
    assert!(err.contains("running") && err.contains("--force"), "{err}");
    assert_eq!(
        get(&mut client, &id).await.messages.len(),
        4,
        "nothing went"
    );

    let (ok, out, err) = agent_out(&d, &["rm", "--force", &id]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("removed {id}")), "{out}");
    assert!(out.contains("1 background shell killed"), "{out}");
    assert!(out.contains("its running turn was stopped"), "{out}");

    // The attached stream ends saying the conversation was deleted.
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), attached.rx.message()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Err(status)) => break status,
            other => panic!("the stream ended without saying why: {other:?}"),
        }
    };
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(status.message().ends_with("was deleted"), "{status:?}");
    // So does `agent attach`, in words, not a raw error.
    let out = tokio::time::timeout(Duration::from_secs(10), person.wait_with_output())
        .await
        .expect("agent attach did not end")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("conversation {id} was deleted")),
        "{stderr}"
    );
    // Its shells are gone, killed.
    let shells = client
        .list_shells(pb::ListShellsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(shells.shells.is_empty(), "{:?}", shells.shells);
    assert!(super::util::processes_matching("sleep 3141").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_and_its_origin_keep_their_own_checkpoints_when_the_other_is_deleted() {
    let s = Scenario::new()
        .scripts([
            // The origin's first turn changes f.txt (its checkpoint keeps v0).
            tool("w1", "write", json!({"path": "f.txt", "content": "v1\n"})),
            Script::text("wrote v1"),
            Script::text("ok"),
            // The fork's turn changes f.txt from v0 too: the same content,
            // kept once, referred to by both.
            tool("w2", "write", json!({"path": "f.txt", "content": "v2\n"})),
            Script::text("wrote v2"),
            // A second fork's turn, deleted before the origin is rewound.
            tool("w3", "write", json!({"path": "g.txt", "content": "g\n"})),
            Script::text("wrote g"),
        ])
        .start()
        .await;
    let (d, work) = (s.daemon, s.work);
    let mut client = s.client;
    let dir = work.path().canonicalize().unwrap();
    std::fs::write(dir.join("f.txt"), "v0\n").unwrap();
    let origin = create_with(
        &mut client,
        &dir,
        "write v1",
        MUTATING,
        pb::PermissionMode::Unspecified,
    )
    .await;
    wait_state(&mut client, &origin, pb::StateKind::Idle).await;
    send(&mut client, &origin, "say ok").await;
    wait_state(&mut client, &origin, pb::StateKind::Idle).await;
    let fork = |to: &'static str| {
        let d = &d;
        let origin = origin.clone();
        async move {
            let (ok, out, err) = agent_out(
                d,
                &["--json", "rewind", &origin, "--to", to, "--conversation"],
            )
            .await;
            assert!(ok, "{err}");
            let answer: Value = serde_json::from_str(&out).unwrap();
            answer["forked"]["id"].as_str().unwrap().to_string()
        }
    };
    let first = fork("5").await;
    let second = fork("5").await;
    std::fs::write(dir.join("f.txt"), "v0\n").unwrap();
    send(&mut client, &first, "write v2").await;
    wait_state(&mut client, &first, pb::StateKind::Idle).await;
    send(&mut client, &second, "write g").await;
    wait_state(&mut client, &second, pb::StateKind::Idle).await;

    // The second fork goes: the origin's checkpoints are as they were.
    let (ok, _, err) = agent_out(&d, &["rm", &second]).await;
    assert!(ok, "{err}");
    assert_eq!(get(&mut client, &origin).await.checkpoints.len(), 1);
    assert_eq!(get(&mut client, &first).await.checkpoints.len(), 1);
    // The origin goes: the first fork still rewinds its own turn, with the
    // content both referred to.
    let (ok, _, err) = agent_out(&d, &["rm", &origin]).await;
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(dir.join("f.txt")).unwrap(), b"v2\n");
    let (ok, out, err) = agent_out(&d, &["rewind", &first, "--code"]).await;
    assert!(ok, "{out}{err}");
    assert_eq!(std::fs::read(dir.join("f.txt")).unwrap(), b"v0\n");
}
