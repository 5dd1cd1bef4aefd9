//! The foundation: `agent run`, multi-client attach, persistence across a
//! restart, socket security, and bad input.

use super::util::{
    Attached, ReplyText, assert_same_stream, assert_same_text, create, delta_marks, deltas, get,
    is_idle, send, small_window_client, text_of, text_of_message, wait_state,
};
use agent_proto::v1 as pb;
use agent_tests::fake_llm::{Gate, ReplyScript, Script};
use agent_tests::harness::{Scenario, WAIT, wait_for};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_streams_the_reply_and_sends_a_correct_request() {
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new().text("Hello there, this reply was streamed."),
        ))
        .start()
        .await;
    let (fake, d, work) = (s.fake, s.daemon, s.work);
    let out = tokio::process::Command::from(d.agent())
        .args(["run", "--cwd", &work.path().display().to_string(), "hi"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "agent run failed: {stderr}\n{}",
        d.log()
    );
    assert!(
        stdout.contains("Hello there, this reply was streamed."),
        "stdout: {stdout}"
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/messages");
    let header = |n: &str| {
        r.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("x-api-key").as_deref(), Some("test-key"));
    assert_eq!(header("anthropic-version").as_deref(), Some("2023-06-01"));
    let body = &r.body;
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["stream"], true);
    assert!(body["max_tokens"].as_u64().unwrap() > 0);
    let system = body["system"].to_string();
    assert!(system.contains("agentd"), "system prompt: {system}");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"][0]["type"], "text");
    assert_eq!(messages[0]["content"][0]["text"], "hi");
    assert!(
        !body["tools"].as_array().unwrap().is_empty(),
        "tools are offered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_clients_see_the_same_stream_and_a_late_one_gets_the_partial_reply() {
    let gate = Gate::new();
    let words: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    let full: String = words.concat();
    // message_start + content_block_start + 20 deltas, then hold.
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .text(&full)
                .chunk_chars(3)
                .hold_after(22, gate.clone()),
        ))
        .conversation("")
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);

    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    let mut b = Attached::open(&mut client, &id, 0, "B").await;
    send(&mut client, &id, "go").await;

    // Wait until A has seen the held part of the reply.
    let mut a_frames = a
        .until(WAIT, |m| text_of(std::slice::from_ref(m)).contains("w5"))
        .await;
    let seen = text_of(&a_frames);
    let mut c = Attached::open(&mut client, &id, 0, "C").await;
    let snap = c.next(WAIT).await;
    let Some(pb::attach_response::Event::Snapshot(s)) = &snap.event else {
        panic!("first frame is not a snapshot: {snap:?}");
    };
    let partial = s
        .partial_reply
        .as_ref()
        .map(text_of_message)
        .unwrap_or_default();
    assert!(
        partial.starts_with(&seen) || seen.starts_with(&partial),
        "partial {partial:?} vs seen {seen:?}"
    );
    assert!(
        partial.contains("w5"),
        "the snapshot carries the partial reply: {partial:?}"
    );
    assert_eq!(s.clients.len(), 3, "snapshot lists the attached clients");

    // A message sent on the stream while the turn runs is refused, to
    // this client only (sequence number 0), and the stream goes on.
    c.send(pb::attach_request::Frame::Send(pb::SendMessageFrame {
        text: "me too".into(),
        ..Default::default()
    }))
    .await;
    let refusal = c
        .until(WAIT, |m| {
            matches!(m.event, Some(pb::attach_response::Event::Error(_)))
        })
        .await;
    let last = refusal.last().unwrap();
    assert_eq!(last.seq, 0);
    let Some(pb::attach_response::Event::Error(e)) = &last.event else {
        unreachable!()
    };
    assert_eq!(e.message, "agent is busy");
    let c_early: Vec<_> = refusal[..refusal.len() - 1].to_vec();

    gate.open();
    a_frames.extend(a.until(WAIT, is_idle).await);
    let b_frames = b.until(WAIT, is_idle).await;
    let mut c_frames = c_early;
    c_frames.extend(c.until(WAIT, is_idle).await);

    // A and B see the same text under the same sequence numbers, cut into
    // frames the same way or not (deltas merge for a client that is behind).
    assert_eq!(text_of(&a_frames), full);
    assert_eq!(text_of(&b_frames), full);
    let (ma, mb) = (delta_marks(&a_frames, 0), delta_marks(&b_frames, 0));
    assert_same_stream(&ma, &mb);
    assert_eq!(
        ma.last().map(|m| m.0),
        mb.last().map(|m| m.0),
        "the last delta frame carries the last delta's sequence number"
    );
    // C: the partial reply from its snapshot plus the deltas after it, the
    // same text under the same numbers as A's.
    let dc = deltas(&c_frames);
    assert!(
        dc.iter().all(|(seq, _)| *seq > snap.seq),
        "C gets no delta its snapshot already has: {dc:?}"
    );
    assert_eq!(format!("{partial}{}", text_of(&c_frames)), full);
    assert_same_stream(&ma, &delta_marks(&c_frames, partial.len()));
    assert_eq!(ma.last().map(|m| m.0), dc.last().map(|d| d.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_hold_up_the_others() {
    // Far more than the HTTP/2 window and the hub's buffer hold.
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new().deltas(20_000, "0123456789abcdef"),
        ))
        .conversation("")
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);

    let mut stalled = Attached::open(&mut client, &id, 0, "stalled").await;
    let _first = stalled.next(WAIT).await; // its snapshot; then it reads nothing
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "go").await;
    let frames = a.until(WAIT, is_idle).await;
    // Whether A saw every delta or was resynchronised, it ends with the
    // whole reply as a durable message.
    let reply = frames
        .iter()
        .find_map(|m| match &m.event {
            Some(pb::attach_response::Event::MessageAppended(ma)) => ma
                .message
                .as_ref()
                .filter(|m| m.role == pb::Role::Assistant as i32)
                .cloned(),
            _ => None,
        })
        .expect("the reply message reached A");
    assert_eq!(text_of_message(&reply).len(), 20_000 * 16);
    // The stalled client, reading at last, catches up to Idle too.
    let rest = stalled.until(WAIT, |m| {
        is_idle(m)
            || matches!(&m.event, Some(pb::attach_response::Event::Snapshot(s))
                if s.conversation.as_ref().and_then(|c| c.state.as_ref()).map(|s| s.kind) == Some(pb::StateKind::Idle as i32))
    })
    .await;
    assert!(!rest.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_falls_behind_gets_the_exact_text_in_fewer_bigger_frames() {
    // 12,000 distinct deltas of 100 bytes: far more than the slow client's
    // connection holds, less than what the daemon keeps for it (its outbox
    // and the hub's ring), so it must get all of it, as deltas, in order.
    let n = 12_000;
    let full: String = (0..n).map(|i| format!("{i:>99}\n")).collect();
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new().text(&full).chunk_chars(100),
        ))
        .conversation("")
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);

    let mut slow_client = small_window_client(&d.socket).await;
    let mut slow = Attached::open(&mut slow_client, &id, 0, "slow").await;
    let _snapshot = slow.next(WAIT).await;
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "go").await;
    // A reads all along; the slow client reads nothing until the turn ends.
    let a_frames = a.until(WAIT, is_idle).await;
    assert_eq!(text_of(&a_frames), full);
    let is_snapshot =
        |m: &pb::AttachResponse| matches!(m.event, Some(pb::attach_response::Event::Snapshot(_)));
    let frames = slow.until(WAIT, |m| is_idle(m) || is_snapshot(m)).await;
    assert!(
        !frames.iter().any(is_snapshot),
        "the slow client was not resynchronised"
    );
    assert_eq!(text_of(&frames), full, "exactly the reply, in order");
    let marks = delta_marks(&frames, 0);
    assert_same_stream(&delta_marks(&a_frames, 0), &marks);
    assert!(
        marks.len() < n / 2,
        "{} delta frames for {n} deltas: deltas that waited were merged",
        marks.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_at_a_models_pace_go_out_one_by_one_as_they_come() {
    let n = 30;
    let s = Scenario::new()
        .script(Script::Reply(
            ReplyScript::new()
                .deltas(n, "word ")
                .pace(Duration::from_millis(20)),
        ))
        .conversation("")
        .start()
        .await;
    let (mut client, id) = (s.client, s.id);
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "go").await;
    let frames = a.until(WAIT, is_idle).await;
    assert_eq!(text_of(&frames), "word ".repeat(n));
    // Merging is for floods and for clients that are behind: deltas 20 ms
    // apart are not held back to be merged. (A few may still arrive
    // together after a hiccup of a loaded machine.)
    let got = deltas(&frames).len();
    assert!(
        got >= n - 3,
        "{got} delta frames for {n} deltas 20 ms apart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_too_far_behind_is_resynchronised_with_the_partial_reply_and_goes_on() {
    let gate = Gate::new();
    // 15,000 text blocks of one 200-byte delta each: deltas of different
    // blocks never merge, so a client that reads nothing overflows its
    // connection, its outbox and the hub's ring long before the hold.
    let blocks: Vec<String> = (0..15_000).map(|i| format!("{i:0>199}\n")).collect();
    let full: String = blocks.concat();
    let held = 14_000;
    let mut script = ReplyScript::new().chunk_chars(200);
    for b in &blocks {
        script = script.text(b);
    }
    // message_start, then start + delta + stop per block.
    let s = Scenario::new()
        .script(Script::Reply(script.hold_after(1 + 3 * held, gate.clone())))
        .conversation("")
        .start()
        .await;
    let (d, mut client, id) = (s.daemon, s.client, s.id);

    let mut slow_client = small_window_client(&d.socket).await;
    let mut slow = Attached::open(&mut slow_client, &id, 0, "slow").await;
    let _snapshot = slow.next(WAIT).await;
    let mut a = Attached::open(&mut client, &id, 0, "A").await;
    send(&mut client, &id, "go").await;
    // Once A has the reply up to the hold, so has the hub. (A reads all
    // along, but 15,000 blocks are a lot: it may be resynchronised too.)
    let last_held = &blocks[held - 1];
    let mut a_text = ReplyText::default();
    a.until(WAIT, |m| {
        a_text.add(m);
        a_text.0.ends_with(last_held.as_str())
    })
    .await;

    // The slow client reads at last: what its connection held, then a
    // snapshot with the partial reply instead of what it missed.
    let is_snapshot =
        |m: &pb::AttachResponse| matches!(m.event, Some(pb::attach_response::Event::Snapshot(_)));
    let before = slow.until(WAIT, is_snapshot).await;
    let (old, snap) = before.split_at(before.len() - 1);
    assert!(
        full.starts_with(&text_of(old)),
        "what it got before is the start of the reply"
    );
    let Some(pb::attach_response::Event::Snapshot(s)) = &snap[0].event else {
        unreachable!()
    };
    let partial = s
        .partial_reply
        .as_ref()
        .map(text_of_message)
        .unwrap_or_default();
    assert!(
        partial.ends_with(last_held.as_str()),
        "the snapshot has the reply up to the hold"
    );
    gate.open();
    let after = slow.until(WAIT, is_idle).await;
    assert_same_text(
        &format!("{partial}{}", text_of(&after)),
        &full,
        "the snapshot's partial reply and the deltas after it",
    );
    assert!(
        deltas(&after).iter().all(|(seq, _)| *seq > snap[0].seq),
        "nothing the snapshot has comes again"
    );
    for m in a.until(WAIT, is_idle).await {
        a_text.add(&m);
    }
    assert_same_text(&a_text.0, &full, "the reader's reply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_survive_a_restart_and_a_second_daemon_is_refused() {
    let s = Scenario::new()
        .script(Script::Reply(ReplyScript::new().text("persisted reply")))
        .conversation("remember me")
        .start()
        .await;
    let (mut d, mut client, id) = (s.daemon, s.client, s.id);
    let before = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    assert_eq!(before.messages.len(), 2);

    // A second daemon on the same data directory refuses to start.
    let other_sock = d.dir.path().join("other.sock");
    let out = std::process::Command::new(agent_tests::harness::daemon_bin())
        .arg("--socket")
        .arg(&other_sock)
        .arg("--data-dir")
        .arg(&d.data_dir)
        .arg("--config")
        .arg(&d.config_path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already using the data directory"),
        "stderr: {err}"
    );

    let status = d.terminate().await;
    assert!(
        status.success(),
        "SIGTERM exits cleanly: {status:?}\n{}",
        d.log()
    );
    d.restart().await;
    let mut client = d.client().await;
    let after = get(&mut client, &id).await;
    assert_eq!(after.messages, before.messages);
    let list = client
        .list_conversations(pb::ListConversationsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.conversations.len(), 1);
    assert_eq!(list.conversations[0].id, id);
    let out = tokio::process::Command::from(d.agent())
        .args(["show", &id[..8]])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("persisted reply"));
    let out = tokio::process::Command::from(d.agent())
        .args(["ls"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("remember me"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_is_private() {
    let s = Scenario::new().start().await;
    let d = s.daemon;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d.socket), 0o600);
    assert_eq!(mode(d.socket.parent().unwrap()), 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_statuses() {
    let s = Scenario::new().start().await;
    let (d, mut client, work) = (s.daemon, s.client, s.work);

    let e = client
        .get_conversation(pb::GetConversationRequest {
            conversation_id: "01ZZZZZZZZZZZZZZZZZZZZZZZZ".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    let e = client
        .send_message(pb::SendMessageRequest {
            conversation_id: "nope".into(),
            text: "hi".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    let id = create(&mut client, work.path(), "").await;
    let e = client
        .send_message(pb::SendMessageRequest {
            conversation_id: id.clone(),
            text: "  ".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    let e = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: work.path().display().to_string(),
            prompt: " \n ".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(e.message(), "message text is empty");
    let listed = client
        .list_conversations(pb::ListConversationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .conversations;
    assert_eq!(
        listed.len(),
        1,
        "a refused prompt creates nothing: {listed:?}"
    );
    let e = client
        .create_conversation(pb::CreateConversationRequest {
            cwd: "relative/dir".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let out = tokio::process::Command::from(d.agent())
        .args(["run", ""])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());

    // The first Attach frame must be a subscribe.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(super::util::frame(pb::attach_request::Frame::Cancel(
        pb::CancelFrame {
            ..Default::default()
        },
    )))
    .await
    .unwrap();
    let status = match client
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Err(s) => s,
        Ok(resp) => resp.into_inner().message().await.unwrap_err(),
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");

    // An unknown decision value.
    let e = client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            decision: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // An answer when nothing is pending.
    let e = client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: id.clone(),
            decision: pb::PermissionDecision::AllowOnce as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_error_is_shown_and_the_next_message_works() {
    let s = Scenario::new()
        .script(Script::unauthorized())
        .conversation("hello")
        .start()
        .await;
    let (fake, d, mut client, id) = (s.fake, s.daemon, s.client, s.id);
    let r = wait_state(&mut client, &id, pb::StateKind::Error).await;
    let state = r.conversation.unwrap().state.unwrap();
    assert_eq!(state.error_kind, pb::ErrorKind::Auth as i32, "{state:?}");
    assert_eq!(fake.requests().len(), 1, "a 401 is not retried");

    // The key is fixed (the fake accepts now): the next message works.
    fake.push(Script::Reply(
        ReplyScript::new()
            .with_ping()
            .with_unknown_event()
            .text("works now"),
    ));
    send(&mut client, &id, "again").await;
    let r = wait_state(&mut client, &id, pb::StateKind::Idle).await;
    let last = r.messages.last().unwrap();
    assert_eq!(text_of_message(last), "works now");
    assert!(d.log().contains("401") || d.log().to_lowercase().contains("auth"));
    wait_for("daemon still running", WAIT, || d.socket.exists()).await;
}

/// The core stays pure through any path: a crate it depends on that pulls in
/// an async runtime, RPC, storage or HTTP breaks purity as much as a direct
/// dependency does, and only the resolved graph shows that. Normal
/// dependencies only (dev-dependencies never reach the built core), on every
/// target platform.
#[test]
fn the_core_reaches_no_io_crate_through_any_path() {
    const BANNED: [&str; 7] = ["tokio", "tonic", "prost", "sled", "reqwest", "mio", "hyper"];
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--locked", "-p", "agentd-core", "-e", "normal"])
        .args(["--target", "all", "--prefix", "depth", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(
        tree.starts_with("0agentd-core "),
        "unexpected output:\n{tree}"
    );
    // Each line is `<depth><name> v<version>…`; the names above a line are
    // the path that reached it.
    let mut path: Vec<&str> = Vec::new();
    let mut reached = Vec::new();
    for line in tree.lines() {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        let depth: usize = line[..digits].parse().unwrap();
        let name = line[digits..].split_whitespace().next().unwrap();
        path.truncate(depth);
        path.push(name);
        // `tokio-util`, `hyper-util`, `prost-types`… count as their family.
        let banned = BANNED.iter().any(|b| {
            name.strip_prefix(b)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
        });
        if banned {
            reached.push(path.join(" -> "));
        }
    }
    assert!(
        reached.is_empty(),
        "agentd-core must not reach {BANNED:?}, but it does:\n{}",
        reached.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_without_a_key_starts_and_says_what_to_set() {
    let s = Scenario::new()
        .env("ANTHROPIC_API_KEY", "")
        .conversation("hello")
        .start()
        .await;
    let (fake, mut client, id) = (s.fake, s.client, s.id);
    let r = wait_state(&mut client, &id, pb::StateKind::Error).await;
    let state = r.conversation.unwrap().state.unwrap();
    assert_eq!(state.error_kind, pb::ErrorKind::Auth as i32);
    assert!(
        state.error_message.contains("ANTHROPIC_API_KEY"),
        "{}",
        state.error_message
    );
    assert!(fake.requests().is_empty(), "nothing was sent without a key");
}
