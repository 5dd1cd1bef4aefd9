//! Crash safety at the edges: an unreadable store is moved aside, and
//! export / import round-trip conversations exactly.

use super::foundation::{create, get, wait_state, workdir};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{FakeLlm, ReplyScript, Script};
use agent_tests::harness::TestDaemon;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_store_is_moved_aside_and_the_daemon_starts() {
    let fake = FakeLlm::start().await;
    let mut d = TestDaemon::start(&fake).await;
    let mut client = d.client().await;
    let work = workdir();
    let id = create(&mut client, work.path(), "").await;
    assert!(!id.is_empty());
    d.terminate().await;
    // Garbage over every file of sled's.
    let db = d.data_dir.join("db");
    for entry in std::fs::read_dir(&db).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            std::fs::write(entry.path(), vec![0xA5u8; 4096]).unwrap();
        }
    }
    d.restart().await;
    let log = d.log();
    assert!(
        log.contains("could not be opened"),
        "the log says so: {log}"
    );
    let aside: Vec<_> = std::fs::read_dir(&d.data_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("db.unreadable-"))
        .collect();
    assert_eq!(aside.len(), 1, "the old store was moved aside");
    assert!(log.contains(&aside[0]), "the log says where");
    let out = tokio::process::Command::from(d.agent())
        .arg("ls")
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("moved to"), "clients are told: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import_round_trip_a_conversation_exactly() {
    let fake = FakeLlm::start().await;
    fake.push_all([
        Script::Reply(ReplyScript::new().text("Let me look.").tool_use(
            "t1",
            "think",
            json!({"thought": "ünïcödé ✓"}),
        )),
        Script::Reply(
            ReplyScript::new()
                .thinking("hmm", "sig-1")
                .text("Done: \"quoted\"\nand a newline."),
        ),
    ]);
    let d = TestDaemon::start(&fake).await;
    let mut client = d.client().await;
    let work = workdir();
    let id = create(&mut client, work.path(), "export me").await;
    let original = wait_state(&mut client, &id, pb::StateKind::Idle).await;

    let out = tokio::process::Command::from(d.agent())
        .args(["export", &id])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = d.dir.path().join("backup.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();

    // Into a fresh daemon.
    let fake2 = FakeLlm::start().await;
    let d2 = TestDaemon::start(&fake2).await;
    let out = tokio::process::Command::from(d2.agent())
        .arg("import")
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut client2 = d2.client().await;
    let restored = get(&mut client2, &id).await;
    assert_eq!(
        restored.messages, original.messages,
        "messages round-trip exactly"
    );
    let (a, b) = (
        original.conversation.unwrap(),
        restored.conversation.unwrap(),
    );
    assert_eq!(
        (a.id, a.title, a.cwd, a.model, a.created_at_ms),
        (b.id, b.title, b.cwd, b.model, b.created_at_ms)
    );
    assert_eq!(a.usage, b.usage);
    // Importing again skips it.
    let out = tokio::process::Command::from(d2.agent())
        .arg("import")
        .arg(&file)
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_clients_and_a_running_tool_stops_quickly_and_records_it() {
    use super::attach::Attached;
    use agent_proto::v1::attach_response::Event as Ev;
    let fake = FakeLlm::start().await;
    let sleeper = format!("sleep 40.{}", std::process::id());
    fake.push_all([
        Script::Reply(ReplyScript::new().tool_use("s1", "bash", json!({"command": sleeper}))),
        Script::Reply(ReplyScript::new().text("carried on")),
    ]);
    let mut d = TestDaemon::start(&fake).await;
    let mut client = d.client().await;
    let work = workdir();
    let id = super::foundation::create_with(
        &mut client,
        work.path(),
        "",
        &["bash"],
        pb::PermissionMode::Default,
    )
    .await;
    let mut clients = Vec::new();
    for name in ["one", "two", "three"] {
        clients.push(Attached::open(&mut client, &id, 0, name).await);
    }
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "sleep".into(),
        })
        .await
        .unwrap();
    let t = std::time::Duration::from_secs(20);
    for c in &mut clients {
        c.until(t, |m| matches!(m.event, Some(Ev::ToolCallBegin(_))))
            .await;
    }
    let started = std::time::Instant::now();
    let status = d.terminate().await;
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "stopping took {took:?}"
    );
    for c in &mut clients {
        // Every client is told why its stream ends.
        let mut told = false;
        while let Ok(Ok(Some(m))) =
            tokio::time::timeout(std::time::Duration::from_secs(2), c.rx.message()).await
        {
            if let Some(Ev::Notice(n)) = &m.event {
                told |= n.message.contains("shutting down");
            }
        }
        assert!(told, "a client was not told why");
    }

    d.restart().await;
    let mut client = d.client().await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "the loop carried on after the restart");
    super::core_loop::assert_valid_chain(&reqs[1]);
    let messages = reqs[1].body["messages"].as_array().unwrap();
    let result = &messages[2]["content"][0];
    assert_eq!(result["tool_use_id"], "s1");
    assert_eq!(result["is_error"], true);
    assert_eq!(
        result["content"],
        "agentd was stopped while this tool was running; it was interrupted and its effects are unknown"
    );
    assert_eq!(
        super::foundation::text_of_message(r.messages.last().unwrap()),
        "carried on"
    );
}

/// A conversation at rest with nobody attached is unloaded from memory,
/// and the next request loads it again with nothing lost; one with a
/// client attached stays loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_conversations_are_unloaded_and_load_again_on_use() {
    use super::attach::{Attached, is_idle};
    use agent_tests::harness::{DaemonOptions, wait_for};
    use std::time::Duration;
    let fake = FakeLlm::start().await;
    fake.push_all([
        Script::Reply(ReplyScript::new().text("first answer")),
        Script::Reply(ReplyScript::new().text("second answer")),
    ]);
    let d = TestDaemon::start_with(
        &fake,
        DaemonOptions {
            extra_config: "[limits]\nidle_unload_ms = 200".into(),
            ..Default::default()
        },
    )
    .await;
    let mut client = d.client().await;
    let work = workdir();
    let id = create(&mut client, work.path(), "one").await;
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let unloads = |d: &TestDaemon| d.log().matches("unloaded (idle)").count();
    wait_for(
        "the idle conversation to unload",
        Duration::from_secs(10),
        || unloads(&d) == 1,
    )
    .await;

    // Loaded again by an attach; it stays loaded while the client is there.
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    a.next(Duration::from_secs(10)).await; // the snapshot
    client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "two".into(),
        })
        .await
        .unwrap();
    a.until(Duration::from_secs(10), is_idle).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(unloads(&d), 1, "not unloaded while a client is attached");
    drop(a);
    wait_for(
        "the conversation to unload again",
        Duration::from_secs(10),
        || unloads(&d) == 2,
    )
    .await;

    let r = get(&mut client, &id).await;
    let texts: Vec<String> = r
        .messages
        .iter()
        .map(super::foundation::text_of_message)
        .collect();
    assert_eq!(texts, ["one", "first answer", "two", "second answer"]);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].body["messages"].as_array().unwrap().len(), 3);
}
