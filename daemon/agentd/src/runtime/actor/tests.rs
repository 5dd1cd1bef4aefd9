//! The actor on tokio's paused time, driven through the manager as the
//! gRPC layer drives it (see `runtime::test_rig`).

use crate::runtime::test_rig::*;
use crate::runtime::{Answer, ConvEvent, EventKind, Subscription};
use crate::store::RuleScope as StoredScope;
use agentd_core::{
    ContentBlock, ConvState, Decision, Message, Mode, Notice, Role, RuleScope, StopReason, texts,
};
use serde_json::json;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_message_is_durable_when_send_returns() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    rig.model.push(Turn::Hang {
        text: "thinking".into(),
    });
    let seq = rig.manager.send(&id, "hello".into()).await.unwrap();
    assert_eq!(seq, 1);
    let transcript = rig.transcript(&id);
    assert_eq!(transcript.len(), 1);
    assert_eq!(transcript[0].text(), "hello");
    assert!(matches!(
        rig.record(&id).conversation.state,
        ConvState::LlmRequesting { attempt: 1, .. }
    ));
    assert!(rig.manager.cancel(&id).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_failed_flush_rolls_back_the_state_and_the_transcript() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    rig.store.fail_flushes(true);
    let refused = rig.manager.send(&id, "lost".into()).await;
    assert!(
        matches!(refused, Err(crate::runtime::RuntimeError::Store(_))),
        "{refused:?}"
    );
    assert!(
        rig.model.requests().is_empty(),
        "nothing ran on unflushed state"
    );
    rig.store.fail_flushes(false);
    let mut sub = rig.attach(&id).await;
    let EventKind::Snapshot(snapshot) = &sub.initial[0].kind else {
        panic!("a snapshot first");
    };
    assert_eq!(snapshot.record.conversation.state, ConvState::Idle);
    assert!(snapshot.messages.is_empty());
    assert_eq!(snapshot.record.message_count, 0);
    assert!(snapshot.record.title.is_empty());
    // The next message takes the place the lost one did not keep.
    rig.model.push(says("hi"));
    assert_eq!(rig.manager.send(&id, "kept".into()).await.unwrap(), 1);
    until_idle(&mut sub).await;
    assert_eq!(rig.transcript(&id)[0].text(), "kept");
}

#[tokio::test(start_paused = true)]
async fn a_failed_flush_of_a_mode_upgrade_leaves_the_mode_and_the_request() {
    let rig = rig();
    let id = rig.conversation(Mode::ReadOnly).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(calls(&[(
        "t1",
        "request_mode_upgrade",
        json!({"reason": "fix it"}),
    )]));
    rig.manager.send(&id, "fix the bug".into()).await.unwrap();
    assert_eq!(until_asked(&mut sub).await, "request_mode_upgrade");
    rig.store.fail_flushes(true);
    let refused = rig
        .manager
        .answer(
            &id,
            Answer {
                plan: None,
                request_id: String::new(),
                decision: Decision::AllowOnce,
                feedback: None,
                scope: RuleScope::Conversation,
                by: None,
                client_request_id: None,
            },
        )
        .await;
    assert!(refused.is_err());
    rig.store.fail_flushes(false);
    let late = rig.manager.subscribe(&id, 0, client("late")).await.unwrap();
    let EventKind::Snapshot(snapshot) = &late.initial[0].kind else {
        panic!("a snapshot first");
    };
    assert_eq!(snapshot.record.conversation.mode, Mode::ReadOnly);
    assert!(snapshot.pending.is_some(), "the request is still pending");
    assert_eq!(snapshot.messages.len(), 2);
    // Answered again, it goes through.
    rig.model.push(says("done"));
    rig.answer(&id, Decision::AllowOnce, RuleScope::Conversation)
        .await;
    until_idle(&mut sub).await;
    assert_eq!(rig.record(&id).conversation.mode, Mode::Default);
}

#[tokio::test(start_paused = true)]
async fn a_mode_upgrade_is_stored_with_the_result_that_announces_it() {
    let rig = rig();
    let id = rig.conversation(Mode::ReadOnly).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(calls(&[(
        "t1",
        "request_mode_upgrade",
        json!({"reason": "fix it"}),
    )]));
    rig.model.push(Turn::Hang {
        text: "writing".into(),
    });
    rig.manager.send(&id, "fix the bug".into()).await.unwrap();
    until_asked(&mut sub).await;
    assert!(!offered(&rig.model.requests()[0]).contains(&"write".to_string()));
    rig.answer(&id, Decision::AllowOnce, RuleScope::Conversation)
        .await;
    // When the answer is acknowledged, the mode and the result that says
    // so are durable together.
    let record = rig.record(&id);
    assert_eq!(record.conversation.mode, Mode::Default);
    let transcript = rig.transcript(&id);
    assert_eq!(tool_results(&transcript[2]), [texts::MODE_UPGRADED]);
    next(&mut sub, |e| {
        matches!(&e.kind, EventKind::TextDelta { .. }).then_some(())
    })
    .await;
    let requests = rig.model.requests();
    assert_eq!(requests.len(), 2);
    assert!(offered(&requests[1]).contains(&"write".to_string()));
    rig.manager.cancel(&id).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn instant_tools_of_a_round_share_one_flush() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(calls(&[
        ("t1", "think", json!({"thought": "a"})),
        ("t2", "think", json!({"thought": "b"})),
        ("t3", "think", json!({"thought": "c"})),
    ]));
    rig.model.push(says("done"));
    let before = rig.store.flushes();
    rig.manager.send(&id, "think hard".into()).await.unwrap();
    until_idle(&mut sub).await;
    // The message (1); the three thoughts, their results and the next
    // request (1); the final reply (1).
    assert_eq!(rig.store.flushes() - before, 3);
    let transcript = rig.transcript(&id);
    assert_eq!(transcript.len(), 4);
    assert_eq!(tool_results(&transcript[2]).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn instant_work_is_announced_only_after_its_flush() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model
        .push(calls(&[("t1", "think", json!({"thought": "a"}))]));
    rig.model.push(says("done"));
    rig.manager.send(&id, "think".into()).await.unwrap();
    let (event, ()) = next(&mut sub, |e| {
        matches!(&e.kind, EventKind::ToolCallEnd { .. }).then_some(())
    })
    .await;
    // By the time a client hears of the thought, its result is durable.
    let record = rig.record(&id);
    assert!(record.message_count >= 3, "{}", record.message_count);
    assert!(event.seq > 0);
    until_idle(&mut sub).await;
}

#[tokio::test(start_paused = true)]
async fn a_reconnecting_client_gets_what_it_missed_from_the_buffer() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut first = rig.attach(&id).await;
    rig.model.push(says("hello there"));
    rig.manager.send(&id, "hi".into()).await.unwrap();
    let (user_message, ()) = next(&mut first, |e| {
        matches!(&e.kind, EventKind::MessageAppended { .. }).then_some(())
    })
    .await;
    let mut seen = Vec::new();
    let mut deltas = 0;
    loop {
        let event = first.live.recv().await.unwrap();
        if event.delta_text().is_some() {
            deltas += 1;
        } else {
            seen.push(event.seq);
        }
        if matches!(&event.kind, EventKind::StateChanged { state, .. } if state.is_at_rest()) {
            break;
        }
    }
    assert!(deltas > 0, "the reply streamed");
    let again = rig
        .manager
        .subscribe(&id, user_message.seq, client("again"))
        .await
        .unwrap();
    assert!(matches!(again.initial[0].kind, EventKind::Resumed { .. }));
    let replayed: Vec<u64> = again.initial[1..].iter().map(|e| e.seq).collect();
    // Everything after the user message, ephemeral events included, except
    // the finished reply's deltas: its message carries their text.
    assert_eq!(replayed[..seen.len()], seen[..]);
    assert!(again.initial.iter().any(|e| matches!(
        &e.kind,
        EventKind::MessageAppended { message, .. } if message.role == agentd_core::Role::Assistant
    )));
}

#[tokio::test(start_paused = true)]
async fn after_a_reload_a_reconnecting_client_gets_the_durable_events() {
    let rig = rig_with(|c| c.limits.idle_unload_ms = 1_000);
    let id = rig.conversation(Mode::Default).await;
    let mut first = rig.attach(&id).await;
    rig.model.push(says("hello there"));
    rig.manager.send(&id, "hi".into()).await.unwrap();
    let (user_message, ()) = next(&mut first, |e| {
        matches!(&e.kind, EventKind::MessageAppended { .. }).then_some(())
    })
    .await;
    let mut durable = Vec::new();
    loop {
        let event = first.live.recv().await.unwrap();
        if matches!(
            &event.kind,
            EventKind::MessageAppended { .. } | EventKind::StateChanged { .. }
        ) {
            durable.push(event.seq);
        }
        if matches!(&event.kind, EventKind::StateChanged { state, .. } if state.is_at_rest()) {
            break;
        }
    }
    rig.manager.detach(&id, first.client.id.clone()).await;
    drop(first);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        rig.manager.actors.lock().await.get(&id).is_none(),
        "unloaded"
    );
    let again = rig
        .manager
        .subscribe(&id, user_message.seq, client("again"))
        .await
        .unwrap();
    assert!(matches!(again.initial[0].kind, EventKind::Resumed { .. }));
    let replayed: Vec<u64> = again.initial[1..].iter().map(|e| e.seq).collect();
    assert_eq!(replayed, durable);
}

#[tokio::test(start_paused = true)]
async fn sequence_numbers_continue_above_the_reservation_after_a_reload() {
    let rig = rig_with(|c| c.limits.idle_unload_ms = 1_000);
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(says("one"));
    rig.manager.send(&id, "first".into()).await.unwrap();
    until_idle(&mut sub).await;
    let reserved = rig.record(&id).seq_reserved;
    let last_seen = sub.initial[0].seq.max(reserved.saturating_sub(1 << 16));
    rig.manager.detach(&id, sub.client.id.clone()).await;
    drop(sub);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sub = rig.attach(&id).await;
    assert!(
        sub.initial[0].seq >= reserved,
        "a reloaded actor starts above the old reservation ({} < {reserved})",
        sub.initial[0].seq
    );
    assert!(sub.initial[0].seq > last_seen);
    assert!(rig.record(&id).seq_reserved > reserved);
}

#[tokio::test(start_paused = true)]
async fn a_long_reply_extends_the_reservation_before_using_it_up() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    let deltas: Vec<String> = (0..40_000).map(|i| format!("{i} ")).collect();
    rig.model.push(Turn::Reply {
        deltas,
        content: vec![ContentBlock::text("many words")],
        stop: StopReason::EndTurn,
    });
    let start = rig.record(&id).seq_reserved;
    rig.manager.send(&id, "talk".into()).await.unwrap();
    let mut highest = 0;
    loop {
        match sub.live.recv().await {
            Ok(event) => {
                highest = highest.max(event.seq);
                assert!(
                    event.seq <= rig.record(&id).seq_reserved,
                    "event {} handed out beyond the stored reservation",
                    event.seq
                );
                if matches!(&event.kind, EventKind::StateChanged { state, .. } if state.is_at_rest())
                {
                    break;
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(highest > start - (1 << 16) + (1 << 15));
    assert!(rig.record(&id).seq_reserved > start);
}

#[tokio::test(start_paused = true)]
async fn an_input_sent_while_the_actor_unloads_is_not_lost() {
    let rig = rig_with(|c| c.limits.idle_unload_ms = 1_000);
    let id = rig.conversation(Mode::Default).await;
    rig.model.push(says("one"));
    rig.manager.send(&id, "first".into()).await.unwrap();
    // Let the turn end (the actor is then idle with no client).
    for _ in 0..100 {
        if rig.record(&id).conversation.state.is_at_rest() {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(rig.record(&id).conversation.state.is_at_rest());
    // Hold the registry, as a client's send does, while the idle timer
    // fires: the actor wants to unload and waits for the lock.
    let registry = rig.manager.actors.lock().await;
    tokio::time::advance(Duration::from_millis(1_500)).await;
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let (reply, done) = tokio::sync::oneshot::channel();
    rig.model.push(says("two"));
    registry
        .get(&id)
        .expect("still registered while it waits for the lock")
        .send(super::Input::Command(super::Command::Send {
            message: crate::runtime::NewMessage {
                text: "second".into(),
                ..Default::default()
            },
            reply,
        }))
        .unwrap();
    drop(registry);
    let seq = tokio::time::timeout(WAIT, done).await.unwrap().unwrap();
    assert_eq!(seq.unwrap(), crate::runtime::Sent::Appended(3));
    assert_eq!(rig.transcript(&id)[2].text(), "second");
}

#[tokio::test(start_paused = true)]
async fn an_idle_conversation_unloads_and_loads_again_on_the_next_input() {
    let rig = rig_with(|c| c.limits.idle_unload_ms = 1_000);
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(says("one"));
    rig.manager.send(&id, "first".into()).await.unwrap();
    until_idle(&mut sub).await;
    rig.manager.detach(&id, sub.client.id.clone()).await;
    drop(sub);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rig.manager.actors.lock().await.get(&id).is_some());
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(rig.manager.actors.lock().await.get(&id).is_none());
    rig.model.push(says("two"));
    let mut sub = rig.attach(&id).await;
    assert_eq!(rig.manager.send(&id, "second".into()).await.unwrap(), 3);
    until_idle(&mut sub).await;
    assert_eq!(rig.transcript(&id).len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_waits_its_backoff_on_virtual_time() {
    let rig = rig_with(|c| {
        c.retry.base_delay_ms = 2_000;
        c.retry.max_delay_ms = 2_000;
    });
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(Turn::Fail(overloaded()));
    rig.model.push(says("at last"));
    rig.manager.send(&id, "hi".into()).await.unwrap();
    let (event, delay_ms) = next(&mut sub, |e| match &e.kind {
        EventKind::Notice(Notice::Retrying {
            attempt: 2,
            delay_ms,
            ..
        }) => Some(*delay_ms),
        _ => None,
    })
    .await;
    let failed_at = event.at_ms;
    assert!((1_000..=2_000).contains(&delay_ms), "{delay_ms}");
    tokio::time::sleep(Duration::from_millis(delay_ms - 1)).await;
    assert_eq!(rig.model.requests().len(), 1, "not before the backoff");
    let (begin, ()) = next(&mut sub, |e| {
        matches!(&e.kind, EventKind::ReplyBegin { attempt: 2 }).then_some(())
    })
    .await;
    assert_eq!(begin.at_ms - failed_at, delay_ms as i64);
    until_idle(&mut sub).await;
    assert_eq!(rig.model.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_a_stream_keeps_the_partial_text() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(Turn::Hang {
        text: "half a tho".into(),
    });
    rig.manager.send(&id, "hi".into()).await.unwrap();
    next(&mut sub, |e| {
        matches!(&e.kind, EventKind::TextDelta { .. }).then_some(())
    })
    .await;
    assert!(rig.manager.cancel(&id).await.unwrap());
    until_idle(&mut sub).await;
    let transcript = rig.transcript(&id);
    assert_eq!(transcript.len(), 3);
    assert_eq!(transcript[1].role, Role::Assistant);
    assert!(transcript[1].interrupted);
    assert_eq!(transcript[1].text(), "half a tho");
    assert_eq!(transcript[2].text(), texts::INTERRUPT_USER);
}

#[tokio::test(start_paused = true)]
async fn allow_always_for_the_project_covers_every_conversation_in_the_directory() {
    let rig = rig();
    let first = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&first).await;
    let write = |id: &str| calls(&[(id, "write", json!({"path": "notes/a.txt", "content": "x"}))]);
    rig.model.push(write("t1"));
    rig.model.push(says("written"));
    rig.manager.send(&first, "write it".into()).await.unwrap();
    assert_eq!(until_asked(&mut sub).await, "write");
    rig.answer(&first, Decision::AllowAlways, RuleScope::Project)
        .await;
    until_idle(&mut sub).await;
    let stored = rig.store.rules(&StoredScope::Project(rig.cwd())).unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(
        rig.store
            .rules(&StoredScope::Conversation(first.clone()))
            .unwrap()
            .is_empty()
    );
    // Another conversation in the same directory is not asked.
    let second = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&second).await;
    rig.model.push(write("t9"));
    rig.model.push(says("written again"));
    rig.manager.send(&second, "write it".into()).await.unwrap();
    until_idle(&mut sub).await;
    let transcript = rig.transcript(&second);
    assert_eq!(transcript.len(), 4);
    assert!(!tool_results(&transcript[2])[0].contains("denied"));
}

#[tokio::test(start_paused = true)]
async fn the_resolution_names_the_client_that_answered() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model.push(calls(&[(
        "t1",
        "write",
        json!({"path": "a.txt", "content": "x"}),
    )]));
    rig.model.push(says("ok"));
    rig.manager.send(&id, "write".into()).await.unwrap();
    until_asked(&mut sub).await;
    rig.answer(&id, Decision::Deny, RuleScope::Conversation)
        .await;
    let (resolved, name) = next(&mut sub, |e| match &e.kind {
        EventKind::PermissionResolved {
            client: Some(c), ..
        } => Some(c.name.clone()),
        _ => None,
    })
    .await;
    assert_eq!(name, "ann@laptop");
    until_idle(&mut sub).await;
    // The stored event names the client too.
    let again = rig
        .manager
        .subscribe(&id, resolved.seq - 1, client("again"))
        .await
        .unwrap();
    let replayed = again
        .initial
        .iter()
        .find(|e| e.seq == resolved.seq)
        .unwrap();
    assert!(matches!(
        &replayed.kind,
        EventKind::PermissionResolved { client: Some(c), .. } if c.name == "ann@laptop"
    ));
}

#[tokio::test(start_paused = true)]
async fn the_background_answer_starts_the_command_as_a_background_shell() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    rig.model
        .push(calls(&[("t1", "bash", json!({"command": "sleep 30"}))]));
    rig.model.push(says("started"));
    rig.manager.send(&id, "build".into()).await.unwrap();
    assert_eq!(until_asked(&mut sub).await, "bash");
    rig.answer(&id, Decision::Background, RuleScope::Conversation)
        .await;
    until_idle(&mut sub).await;
    let result = tool_results(&rig.transcript(&id)[2]).remove(0);
    assert!(result.contains("moved to background"), "{result}");
    let shells = rig.manager.shared.shells.list(Some(&id));
    assert_eq!(shells.len(), 1);
    assert_eq!(shells[0].command, "sleep 30");
    rig.manager.shared.shells.kill_all().await;
}

#[tokio::test(start_paused = true)]
async fn clients_that_attach_after_a_recovery_are_told_what_it_did() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    // The daemon died while the model was asked.
    let mut record = rig.record(&id);
    record.conversation.state = ConvState::LlmRequesting {
        attempt: 1,
        iteration: 1,
        retry: None,
        early: Default::default(),
    };
    let question = Message::user(vec![ContentBlock::text("still there?")], T0);
    record.message_count = 1;
    rig.store.commit(&record, &[(1, &question)]).unwrap();
    rig.store.flush().await.unwrap();
    rig.model.push(says("yes"));
    assert_eq!(rig.manager.recover().await.unwrap(), 1);
    for _ in 0..100 {
        if rig.record(&id).conversation.state.is_at_rest() {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(1));
    }
    let sub = rig.attach(&id).await;
    let notices: Vec<String> = sub
        .initial
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice(notice) => Some(notice.text()),
            _ => None,
        })
        .collect();
    assert_eq!(notices, ["agentd restarted: re-issuing the model request"]);
    assert_eq!(rig.transcript(&id)[1].text(), "yes");
}

#[tokio::test(start_paused = true)]
async fn timestamps_come_from_the_injected_clock() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    rig.model.push(says("hi"));
    rig.manager.send(&id, "hello".into()).await.unwrap();
    let (event, message) = next(&mut sub, |e| match &e.kind {
        EventKind::MessageAppended { message, .. } => Some(message.clone()),
        _ => None,
    })
    .await;
    assert_eq!(message.created_at_ms, T0 + 5_000);
    assert_eq!(event.at_ms, T0 + 5_000);
    until_idle(&mut sub).await;
    assert_eq!(rig.record(&id).updated_at_ms, T0 + 5_000);
}

/// What a client saw of tool call `id`: its output deltas' texts, until
/// its end.
async fn output_until_end(sub: &mut Subscription, id: &str) -> Vec<String> {
    let mut texts = Vec::new();
    loop {
        let (_, (text, end)) = next(sub, |e| match &e.kind {
            EventKind::ToolOutputDelta {
                tool_use_id, text, ..
            } if tool_use_id == id => Some((text.clone(), false)),
            EventKind::ToolCallEnd { tool_use_id, .. } if tool_use_id == id => {
                Some((String::new(), true))
            }
            _ => None,
        })
        .await;
        if end {
            return texts;
        }
        texts.push(text);
    }
}

// Real time: the commands run as real processes.
#[tokio::test]
async fn a_running_commands_output_reaches_clients_live_and_a_silent_one_sends_none() {
    let rig = rig_with(|c| {
        c.rules
            .push(agentd_core::Rule::parse("bash", agentd_core::Action::Allow).unwrap())
    });
    let id = rig.conversation(Mode::Default).await;
    let mut sub = rig.attach(&id).await;
    let slow = "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.06; done";
    rig.model
        .push(calls(&[("t1", "bash", json!({"command": slow}))]));
    rig.model
        .push(calls(&[("t2", "bash", json!({"command": "sleep 0.3"}))]));
    rig.model.push(says("done"));
    rig.manager.send(&id, "go".into()).await.unwrap();

    let deltas = output_until_end(&mut sub, "t1").await;
    assert!(deltas.len() >= 2, "{deltas:?}");
    let all: String = (1..=6).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(deltas.concat(), all, "in order, each once");
    assert!(output_until_end(&mut sub, "t2").await.is_empty());
    until_idle(&mut sub).await;

    // Nothing of it was stored, and the buffer let go of it.
    let again = rig
        .manager
        .subscribe(&id, 1, client("again"))
        .await
        .unwrap();
    assert!(
        !again
            .initial
            .iter()
            .any(|e| matches!(e.kind, EventKind::ToolOutputDelta { .. }))
    );
    let result = tool_results(&rig.transcript(&id)[2]).remove(0);
    assert_eq!(result, format!("{all}[exit code 0]"));
}

/// The self-correction events among `events`, as short text.
fn corrections_of<'a>(events: impl IntoIterator<Item = &'a ConvEvent>) -> Vec<String> {
    events
        .into_iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice(Notice::CorrectionAttempt { attempt, tool, .. }) => {
                Some(format!("attempt {attempt} {tool}"))
            }
            EventKind::Notice(Notice::CorrectionSucceeded { attempts, tool }) => {
                Some(format!("success {tool} after {attempts}"))
            }
            EventKind::Notice(Notice::CorrectionFailed { attempts, .. }) => {
                Some(format!("failed after {attempts}"))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_edit_that_misses_re_engages_three_times_then_ends_and_the_events_are_stored() {
    let rig = rig_with(|c| c.limits.idle_unload_ms = 1_000);
    let id = rig.conversation(Mode::AcceptEdits).await;
    std::fs::write(rig.cwd().join("a.txt"), "hello\n").unwrap();
    for i in 1..=4 {
        let input =
            json!({"path": "a.txt", "old_string": format!("missing {i}"), "new_string": "x"});
        rig.model.push(calls(&[(&format!("e{i}"), "edit", input)]));
    }
    rig.model.push(says("never asked"));
    let mut sub = rig.attach(&id).await;
    rig.manager
        .send(&id, "change hello to bye".into())
        .await
        .unwrap();
    let (user_message, ()) = next(&mut sub, |e| {
        matches!(&e.kind, EventKind::MessageAppended { .. }).then_some(())
    })
    .await;
    // The state that ends the turn is announced with its commit, the
    // notice when its effect runs, just after.
    let mut live = Vec::new();
    loop {
        let event = sub.live.recv().await.unwrap();
        let end = matches!(
            &event.kind,
            EventKind::Notice(Notice::CorrectionFailed { .. })
        );
        live.push(event);
        if end {
            break;
        }
    }
    let said = corrections_of(live.iter().map(|e| &**e));
    assert_eq!(
        said,
        [
            "attempt 1 edit",
            "attempt 2 edit",
            "attempt 3 edit",
            "failed after 3"
        ]
    );
    assert!(matches!(
        rig.record(&id).conversation.state,
        ConvState::Error { .. }
    ));
    // Three re-engagements carried the seed's prompt; nothing after the end.
    let requests = rig.model.requests();
    assert_eq!(requests.len(), 4);
    for request in &requests[1..] {
        let last = request.messages.last().unwrap();
        let prompt = last.content.iter().find_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        });
        let prompt = prompt.expect("the re-engagement prompt");
        assert!(
            prompt.starts_with("The previous approach failed. Here's a more direct strategy:\nThe edit of a.txt could not find its target text.")
                && prompt.ends_with("\n\nPlease generate new tool calls using the suggested approach."),
            "{prompt}"
        );
    }
    assert!(rig.record(&id).conversation.corrections.chains.is_empty());
    // Unloaded and loaded again: a client resuming gets them from the store.
    rig.manager.detach(&id, sub.client.id.clone()).await;
    drop(sub);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = rig
        .manager
        .subscribe(&id, user_message.seq, client("again"))
        .await
        .unwrap();
    assert!(matches!(again.initial[0].kind, EventKind::Resumed { .. }));
    assert_eq!(corrections_of(again.initial.iter().map(|e| &**e)), said);
}

#[tokio::test(start_paused = true)]
async fn plan_events_are_replayed_from_the_store() {
    let rig = rig_with(|c| c.limits.idle_unload_ms = 1_000);
    let id = rig.conversation(Mode::Plan).await;
    let plan = json!({
        "intent": "Rename", "risk": "low",
        "steps": [{"title": "Read", "kind": "analyze"}, {"title": "Rename", "kind": "edit", "depends_on": ["1"]}]
    });
    rig.model.push(calls(&[("p1", "propose_plan", plan)]));
    rig.model.push(calls(&[(
        "u1",
        "update_plan",
        json!({"steps": [{"id": "1", "status": "in_progress"}]}),
    )]));
    rig.model.push(says("done"));
    let mut sub = rig.attach(&id).await;
    rig.manager.send(&id, "rename it".into()).await.unwrap();
    let (user_message, ()) = next(&mut sub, |e| {
        matches!(&e.kind, EventKind::MessageAppended { .. }).then_some(())
    })
    .await;
    assert_eq!(until_asked(&mut sub).await, "propose_plan");
    rig.manager
        .answer(
            &id,
            Answer {
                plan: Some(agentd_core::plan::PlanAnswer::Approve {
                    mode: Mode::AcceptEdits,
                }),
                request_id: String::new(),
                decision: Decision::ApprovePlan,
                feedback: None,
                scope: RuleScope::Conversation,
                by: Some(client("ann@laptop")),
                client_request_id: None,
            },
        )
        .await
        .unwrap();
    until_idle(&mut sub).await;
    rig.manager.detach(&id, sub.client.id.clone()).await;
    drop(sub);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = rig
        .manager
        .subscribe(&id, user_message.seq, client("again"))
        .await
        .unwrap();
    let changes: Vec<String> = again
        .initial
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Plan { change, .. } => Some(format!("{change:?}")),
            _ => None,
        })
        .collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(changes[0].starts_with("Generated"), "{changes:?}");
    assert!(changes[1].starts_with("Confirmed"), "{changes:?}");
    assert!(changes[2].starts_with("Step"), "{changes:?}");
}
