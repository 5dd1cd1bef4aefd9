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
