//! Crash safety at the edges: an unreadable store is moved aside, a
//! SIGTERM at any moment stops the daemon cleanly, export / import
//! round-trip conversations exactly, and short runs of the power-cut
//! program (`agent_tests::power`; the `power-cut` binary runs long ones)
//! for both `[store] sync` modes.

use super::util::{Attached, assert_valid_chain, get, is_idle, send, text_of_message, wait_state};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, TestDaemon, WAIT, wait_for};
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_store_is_moved_aside_and_the_daemon_starts() {
    let s = Scenario::new().conversation("").start().await;
    let (mut d, id) = (s.daemon, s.id);
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
    let s = Scenario::new()
        .scripts([
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
        ])
        .conversation("export me")
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);
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
    let s2 = Scenario::new().start().await;
    let d2 = s2.daemon;
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

/// A SIGTERM the moment the socket accepts a connection, while the daemon
/// may still be starting, stops it cleanly: exit status 0 and the socket
/// removed, not the default action's death with the socket left behind
/// (an autostarted daemon stopped that way failed a CI run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_while_the_daemon_starts_stops_it_cleanly() {
    let fake = agent_tests::fake_llm::FakeLlm::start().await;
    let mut d = TestDaemon::start(&fake).await;
    for round in 1..=3 {
        let status = d.terminate().await;
        assert!(
            status.success(),
            "start {round}: the daemon ended with {status}. Log:\n{}",
            d.log()
        );
        assert!(
            !d.socket.exists(),
            "start {round}: the socket was left behind"
        );
        if round < 3 {
            d.restart().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_clients_and_a_running_tool_stops_quickly_and_records_it() {
    use agent_proto::v1::attach_response::Event as Ev;
    let sleeper = format!("sleep 40.{}", std::process::id());
    let s = Scenario::new()
        .scripts([
            Script::Reply(ReplyScript::new().tool_use("s1", "bash", json!({"command": sleeper}))),
            Script::Reply(ReplyScript::new().text("carried on")),
        ])
        .conversation("")
        .allow(&["bash"])
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let (fake, mut d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let mut clients = Vec::new();
    for name in ["one", "two", "three"] {
        clients.push(Attached::open(&mut client, &id, 0, name).await);
    }
    send(&mut client, &id, "sleep").await;
    for c in &mut clients {
        c.until(WAIT, |m| matches!(m.event, Some(Ev::ToolCallBegin(_))))
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
    assert_valid_chain(&reqs[1]);
    let messages = reqs[1].body["messages"].as_array().unwrap();
    let result = &messages[2]["content"][0];
    assert_eq!(result["tool_use_id"], "s1");
    assert_eq!(result["is_error"], true);
    assert_eq!(
        result["content"],
        "agentd was stopped while this tool was running; it was interrupted and its effects are unknown"
    );
    assert_eq!(text_of_message(r.messages.last().unwrap()), "carried on");
}

/// A conversation at rest with nobody attached is unloaded from memory,
/// and the next request loads it again with nothing lost; one with a
/// client attached stays loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_conversations_are_unloaded_and_load_again_on_use() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(ReplyScript::new().text("first answer")),
            Script::Reply(ReplyScript::new().text("second answer")),
        ])
        .config("[limits]\nidle_unload_ms = 200")
        .conversation("one")
        .start()
        .await;
    let (fake, d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let unloads = |d: &TestDaemon| d.log().matches("unloaded (idle)").count();
    wait_for("the idle conversation to unload", WAIT, || unloads(&d) == 1).await;

    // Loaded again by an attach; it stays loaded while the client is there.
    let mut a = Attached::open(&mut client, &id, 0, "watcher").await;
    a.next(WAIT).await; // the snapshot
    send(&mut client, &id, "two").await;
    a.until(WAIT, is_idle).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(unloads(&d), 1, "not unloaded while a client is attached");
    drop(a);
    wait_for("the conversation to unload again", WAIT, || {
        unloads(&d) == 2
    })
    .await;

    let r = get(&mut client, &id).await;
    let texts: Vec<String> = r.messages.iter().map(text_of_message).collect();
    assert_eq!(texts, ["one", "first answer", "two", "second answer"]);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].body["messages"].as_array().unwrap().len(), 3);
}

/// A client that resumes after a restart, from any event it saw, is sent
/// exactly the durable events after it, as they were sent live: the store
/// keeps a commit's events under one key (issue 44), and a resume from
/// inside a commit gets the rest of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_inside_a_commit_after_a_restart_gets_exactly_the_rest() {
    use pb::attach_response::Event as Ev;
    let s = Scenario::new()
        .scripts([
            Script::Reply(ReplyScript::new().text("Running it.").tool_use(
                "t1",
                "bash",
                json!({"command": "echo hi"}),
            )),
            Script::Reply(ReplyScript::new().text("done")),
        ])
        .conversation("")
        .allow(&["bash"])
        .start()
        .await;
    let (mut d, mut client, id) = (s.daemon, s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "live").await;
    a.next(WAIT).await; // the snapshot
    send(&mut client, &id, "run echo hi").await;
    let live = a.until(WAIT, is_idle).await;
    drop(a);
    let durable = |m: &pb::AttachResponse| {
        matches!(m.event, Some(Ev::MessageAppended(_) | Ev::StateChanged(_)))
    };
    let without_time = |m: &pb::AttachResponse| pb::AttachResponse {
        at_ms: 0,
        ..m.clone()
    };
    let stored: Vec<pb::AttachResponse> = live
        .iter()
        .filter(|m| durable(m))
        .map(without_time)
        .collect();
    // The user's message, the reply, the result, the answer, each with
    // its state in the same commit.
    assert_eq!(stored.len(), 8, "{live:#?}");
    let first = stored[0].seq;
    let last = live.last().unwrap().seq;
    // Every commit holds events numbered apart (the reply's usage comes
    // between its message and its state): resuming from each number
    // resumes inside a commit too.
    assert!(
        stored.windows(2).any(|w| w[1].seq > w[0].seq + 1),
        "{stored:#?}"
    );

    d.terminate().await;
    d.restart().await;
    let mut client = d.client().await;
    for after in first..last {
        let want: Vec<&pb::AttachResponse> = stored.iter().filter(|m| m.seq > after).collect();
        let mut b = Attached::open(&mut client, &id, after, "resumed").await;
        let marker = b.next(WAIT).await;
        assert!(
            matches!(&marker.event, Some(Ev::Resumed(r)) if r.after_seq == after),
            "after {after}: {marker:?}"
        );
        let mut got = Vec::new();
        for _ in 0..want.len() {
            got.push(without_time(&b.next(WAIT).await));
        }
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            want,
            "resumed after {after}"
        );
        // Then only live events (this client's arrival): nothing more
        // from before the restart.
        while let Ok(more) = tokio::time::timeout(Duration::from_millis(100), b.rx.message()).await
        {
            let more = more.unwrap().unwrap();
            assert!(more.seq > last, "after {after}, nothing more: {more:?}");
        }
    }
}

/// A few power cuts with `sync = "power"`: every acknowledged prompt and
/// every message seen at rest survives the loss of all unsynced writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_power_cut_run_with_sync_power_loses_nothing_acknowledged() {
    use agent_tests::power::{self, PowerOptions, SyncMode};
    let seed = agent_tests::crash::seed_from_clock();
    // Printed first, so a failure can be repeated with
    // `target/debug/power-cut --sync power --seed SEED`.
    println!("power-cut seed {seed}");
    let opts = PowerOptions {
        cuts: 6,
        seed,
        sync: SyncMode::Power,
        max_delay: Duration::from_millis(800),
        budget: Some(Duration::from_secs(12)),
        ..PowerOptions::default()
    };
    let summary = power::run(opts).await.unwrap_or_else(|e| panic!("{e}"));
    println!("{}", summary.details());
    println!("{summary}");
    assert!(summary.cuts >= 3, "{summary}");
    assert!(
        summary.prompts_acked > 0 && summary.undone > 0,
        "{}",
        summary.details()
    );
    assert_eq!(summary.lost, 0);
}

/// A few power cuts with `sync = "kill"`: the store comes back consistent,
/// and whatever is lost is the end of a conversation, never a hole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_power_cut_run_with_sync_kill_loses_only_the_last_turns() {
    use agent_tests::power::{self, PowerOptions, SyncMode};
    let seed = agent_tests::crash::seed_from_clock();
    println!("power-cut seed {seed}");
    let opts = PowerOptions {
        cuts: 4,
        seed,
        sync: SyncMode::Kill,
        max_delay: Duration::from_millis(1000),
        rest: Some(Duration::from_millis(700)),
        budget: Some(Duration::from_secs(12)),
        ..PowerOptions::default()
    };
    let summary = power::run(opts).await.unwrap_or_else(|e| panic!("{e}"));
    println!("{}", summary.details());
    println!("{summary}");
    assert!(summary.cuts >= 2, "{summary}");
    assert!(summary.undone > 0, "{}", summary.details());
}
