//! The manager on tokio's paused time: finding conversations, creating
//! them (once per request id), checking what clients ask before an actor
//! sees it, the registry of live actors, and import.

use crate::runtime::test_rig::*;
use crate::runtime::{
    BudgetAnswer, NewConversation, NewMessage, RewindRequest, RuntimeError, Settings,
};
use agentd_core::{ConvState, Mode};
use std::time::Duration;

fn new_in(rig: &Rig) -> NewConversation {
    NewConversation {
        cwd: rig.cwd(),
        ..NewConversation::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_conversation_is_found_by_a_unique_prefix_in_any_case() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let m = &rig.manager;
    assert_eq!(m.resolve(&id.to_ascii_lowercase()).unwrap(), id);
    assert_eq!(m.resolve(&format!(" {} ", &id[..20])).unwrap(), id);
    assert!(matches!(
        m.resolve("  "),
        Err(RuntimeError::InvalidArgument(_))
    ));
    assert!(matches!(m.resolve("ZZZZ"), Err(RuntimeError::NotFound(_))));
    // Two made this century share the start of their time.
    let other = rig.conversation(Mode::Default).await;
    assert!(matches!(
        m.resolve(&id[..2]),
        Err(RuntimeError::Ambiguous { .. })
    ));
    assert_eq!(m.resolve(&other).unwrap(), other);
}

#[tokio::test(start_paused = true)]
async fn a_retried_create_returns_the_first_conversation_and_makes_no_other() {
    let rig = rig();
    let new = NewConversation {
        client_request_id: Some("create-1".into()),
        ..new_in(&rig)
    };
    let first = rig.manager.create(new.clone(), None).await.unwrap();
    tokio::time::advance(Duration::from_secs(60)).await;
    let again = rig.manager.create(new, None).await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again.created_at_ms, first.created_at_ms);
    assert_eq!(rig.manager.ids().unwrap(), [first.id]);
}

#[tokio::test(start_paused = true)]
async fn a_create_the_daemon_may_not_make_stores_nothing() {
    let rig = rig();
    let refused = [
        NewConversation {
            mode: Some(Mode::Bypass),
            ..new_in(&rig)
        },
        NewConversation {
            additional_dirs: vec![rig.cwd(); crate::runtime::params::MAX_ADDITIONAL_DIRS + 1],
            ..new_in(&rig)
        },
        NewConversation {
            allow_rules: vec!["bash(".into()],
            ..new_in(&rig)
        },
    ];
    for new in refused {
        assert!(rig.manager.create(new, None).await.is_err());
    }
    let empty = Some((" \n".to_string(), Vec::new()));
    assert!(matches!(
        rig.manager.create(new_in(&rig), empty).await,
        Err(RuntimeError::InvalidArgument(_))
    ));
    assert!(rig.manager.ids().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_conversation_created_with_a_prompt_is_stored_with_its_first_turn() {
    let rig = rig();
    rig.model.push(says("hello"));
    let prompt = Some(("hi there".to_string(), Vec::new()));
    let record = rig.manager.create(new_in(&rig), prompt).await.unwrap();
    assert_eq!(record.title, "hi there");
    assert_eq!(record.created_at_ms, T0);
    let stored = rig.record(&record.id);
    assert_eq!(stored.turns, 1);
    assert_eq!(rig.transcript(&record.id)[0].text(), "hi there");
}

#[tokio::test(start_paused = true)]
async fn requests_an_actor_would_refuse_are_refused_before_it_loads() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let m = &rig.manager;
    let blank = NewMessage {
        text: "  ".into(),
        ..NewMessage::default()
    };
    assert!(m.send_message(&id, blank).await.is_err());
    let bad_raise = BudgetAnswer {
        raise: true,
        raise_by: Some(-1.0),
        by: None,
    };
    assert!(m.answer_budget(&id, bad_raise).await.is_err());
    let bypass = Settings {
        mode: Some(Mode::Bypass),
        ..Settings::default()
    };
    assert!(matches!(
        m.update(&id, bypass).await,
        Err(RuntimeError::NotAllowed(_))
    ));
    let nothing = RewindRequest::default();
    assert!(m.rewind(&id, nothing).await.is_err());
    assert_eq!(m.loaded().await, 0, "no actor was started for them");
}

#[tokio::test(start_paused = true)]
async fn settings_are_applied_by_the_live_actor_and_stored() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let settings = Settings {
        mode: Some(Mode::Plan),
        model: Some("  other-model ".into()),
        ..Settings::default()
    };
    let record = rig.manager.update(&id, settings).await.unwrap();
    assert_eq!(
        (record.conversation.mode, record.model.as_str()),
        (Mode::Plan, "other-model")
    );
    assert_eq!(rig.record(&id).conversation.mode, Mode::Plan);
    assert_eq!(rig.manager.loaded().await, 1);
}

#[tokio::test(start_paused = true)]
async fn shutting_down_stops_every_live_actor() {
    let rig = rig();
    for _ in 0..3 {
        let id = rig.conversation(Mode::Default).await;
        let _ = rig.attach(&id).await;
    }
    assert_eq!(rig.manager.loaded().await, 3);
    rig.manager
        .shutdown(tokio::time::Instant::now() + std::time::Duration::from_secs(3))
        .await;
    assert_eq!(rig.manager.loaded().await, 0);
    rig.manager.detach("nobody", "c1".into()).await;
    assert_eq!(rig.manager.loaded().await, 0, "a detach loads nothing");
}

#[tokio::test(start_paused = true)]
async fn a_conversation_is_imported_once_and_only_with_its_images() {
    let rig = rig();
    let id = rig.conversation(Mode::Default).await;
    let record = rig.record(&id);
    assert!(
        !rig.manager
            .import(record.clone(), Vec::new(), Vec::new())
            .await
            .unwrap()
    );
    let image = agentd_core::ImageRef {
        media_type: agentd_core::ImageMediaType::Png,
        size: 4,
        sha256: "ab".repeat(32),
        width: 0,
        height: 0,
    };
    let message = agentd_core::Message::user(vec![agentd_core::ContentBlock::Image(image)], T0);
    let imported = crate::store::ConversationRecord {
        id: "01IMPORTED".into(),
        conversation: agentd_core::Conversation {
            state: ConvState::Idle,
            ..record.conversation.clone()
        },
        message_count: 1,
        ..record
    };
    let refused = rig
        .manager
        .import(imported, vec![message], Vec::new())
        .await;
    assert!(matches!(refused, Err(RuntimeError::InvalidArgument(_))));
    assert!(rig.manager.record("01IMPORTED").is_err(), "nothing stored");
}

#[tokio::test(start_paused = true)]
async fn a_delete_takes_the_sub_agents_and_one_a_crash_cut_short_is_finished_at_start() {
    let rig = rig();
    let parent = rig.conversation(Mode::Default).await;
    let child = NewConversation {
        sub_agent: Some(crate::store::SubAgentLink {
            parent_id: parent.clone(),
            agent_id: "agent_1_t1".into(),
            description: "d".into(),
            result: None,
            agent_type: None,
        }),
        ..new_in(&rig)
    };
    let child = rig.manager.create(child, None).await.unwrap().id;
    let other = NewConversation {
        client_request_id: Some("create-other".into()),
        ..new_in(&rig)
    };
    let other = rig.manager.create(other, None).await.unwrap().id;
    let store = &rig.manager.shared().store;
    let deleted = rig.manager.delete(&parent, false).await.unwrap();
    assert_eq!(deleted.sub_agents, std::slice::from_ref(&child));
    assert!(!deleted.stopped);
    assert_eq!(rig.manager.ids().unwrap(), std::slice::from_ref(&other));
    for id in [&parent, &child] {
        assert!(store.keys_of(id).unwrap().is_empty(), "{id}");
    }
    assert!(store.tombstones().unwrap().is_empty());
    // A delete a crash cut short after its tombstone: hidden at once, and
    // finished when the daemon starts.
    store
        .tombstone(&other, std::slice::from_ref(&other))
        .unwrap();
    assert!(matches!(
        rig.manager.resolve(&other),
        Err(RuntimeError::NotFound(_))
    ));
    assert!(
        !store.keys_of(&other).unwrap().is_empty(),
        "only hidden so far"
    );
    assert_eq!(rig.manager.finish_deletes().await.unwrap(), 1);
    assert!(store.keys_of(&other).unwrap().is_empty());
    assert!(store.tombstones().unwrap().is_empty());
}
