//! The todo list (issue 42 point 4): `update_plan` with no approved plan
//! keeps a whole list, at most one item in progress (property tests); the
//! list is reported and kept like a plan; a turn of many tool calls with no
//! list is reminded once (data-driven tally, and through `transition`).

#![expect(clippy::unwrap_used)]

use agentd_core::Conversation;
use agentd_core::effect::Effect;
use agentd_core::event::Event;
use agentd_core::message::{ContentBlock, Reply, StopReason, ToolResult, Usage};
use agentd_core::permission::{Mode, Policy};
use agentd_core::plan::{Plan, PlanEvent, PlanPhase, StepStatus, TODO_STATUSES, TodoTally};
use agentd_core::state::{ConvContext, ConvState};
use agentd_core::texts::TODO_REMINDER;
use agentd_core::transition::{Transition, transition};
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------
// Reading a list.
// ---------------------------------------------------------------------------

fn arb_status() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "pending",
        "in_progress",
        "completed",
        "failed",
        "skipped",
        "done",
        "",
    ])
}

fn arb_items() -> impl Strategy<Value = Vec<(String, &'static str)>> {
    prop::collection::vec(("[a-z ]{0,12}", arb_status()), 0..8)
}

proptest! {
    /// A list is accepted exactly when every item has a title and one of
    /// the three statuses and at most one is in progress; an accepted list
    /// keeps the items, in order, as given.
    #[test]
    fn a_list_is_accepted_only_with_one_item_in_progress_at_most(items in arb_items()) {
        let input = json!({"steps": items
            .iter()
            .map(|(title, status)| json!({"title": title, "status": status}))
            .collect::<Vec<_>>()});
        let valid_items = items.iter().all(|(t, s)| {
            !t.trim().is_empty()
                && TODO_STATUSES.iter().any(|ok| ok.as_str() == *s)
        });
        let started = items.iter().filter(|(_, s)| *s == "in_progress").count();
        match Plan::todo_from_input(&input, "t1") {
            Ok(list) => {
                prop_assert!(valid_items && started <= 1);
                prop_assert!(list.is_todo());
                prop_assert_eq!(list.steps.len(), items.len());
                for (step, (title, status)) in list.steps.iter().zip(&items) {
                    prop_assert_eq!(&step.draft.title, title.trim());
                    prop_assert_eq!(step.status.as_str(), *status);
                }
                prop_assert!(
                    list.steps.iter().filter(|s| s.status == StepStatus::InProgress).count() <= 1
                );
            }
            Err(e) => prop_assert!(!valid_items || started > 1, "{}", e),
        }
    }

    /// The tally counts a turn's calls from its first round on, and over
    /// any sequence of rounds a turn is reminded at most once, and only
    /// when it reached the threshold without a list.
    #[test]
    fn a_turn_is_reminded_at_most_once(
        rounds in prop::collection::vec((0usize..6, prop::bool::ANY), 1..12),
        threshold in 0u32..12,
    ) {
        let mut tally = TodoTally::default();
        let mut nudges = 0;
        let mut calls = 0usize;
        for (iteration, (n, has_list)) in (1u32..).zip(&rounds) {
            let (next, nudge) = tally.after_round(iteration, *n, *has_list, threshold);
            calls += n;
            if nudge {
                nudges += 1;
                prop_assert!(!has_list && threshold > 0 && calls >= threshold as usize);
            }
            prop_assert_eq!(next.calls as usize, calls);
            tally = next;
        }
        prop_assert!(nudges <= 1);
    }
}

#[test]
fn bad_lists_say_what_is_wrong() {
    let cases = [
        (json!({}), "`steps` must be an array"),
        (
            json!({"steps": [{"title": "a", "status": "in_progress"}, {"title": "b", "status": "in_progress"}]}),
            "at most one item is in_progress at a time; 2 are: a; b",
        ),
        (
            json!({"steps": [{"title": "a", "status": "failed"}]}),
            "item 1: `status` must be one of pending, in_progress, completed",
        ),
        (
            json!({"steps": [{"status": "pending"}]}),
            "item 1: `title` must be a non-empty string",
        ),
        (
            json!({"steps": [{"id": "x", "title": "a", "status": "pending"}, {"id": "x", "title": "b", "status": "pending"}]}),
            "item 2: the id `x` is used twice",
        ),
    ];
    for (input, expected) in cases {
        let e = Plan::todo_from_input(&input, "t").unwrap_err();
        assert!(e.0.contains(expected), "{input}: {e}");
    }
    // `content` (Claude Code's TodoWrite spelling) reads as the title.
    let list = Plan::todo_from_input(
        &json!({"steps": [{"content": "Run the tests", "status": "pending"}]}),
        "t",
    )
    .unwrap();
    assert_eq!(list.steps[0].draft.title, "Run the tests");
    assert_eq!(list.steps[0].id(), "1");
}

/// Rounds of a turn: (iteration, calls, has a list) → reminded.
#[test]
fn the_tally_reminds_once_per_turn() {
    let rounds: &[(u32, usize, bool, bool)] = &[
        (1, 5, false, false),
        (2, 3, false, true),
        (3, 9, false, false),
        // A new turn counts again.
        (1, 8, false, true),
        // A turn with a list is never reminded.
        (1, 20, true, false),
        (2, 20, true, false),
    ];
    let mut tally = TodoTally::default();
    for (i, (iteration, calls, has_list, expected)) in rounds.iter().enumerate() {
        let (next, nudge) = tally.after_round(*iteration, *calls, *has_list, 8);
        assert_eq!(nudge, *expected, "round {i}");
        tally = next;
    }
    assert!(!TodoTally::default().after_round(1, 50, false, 0).1);
}

// ---------------------------------------------------------------------------
// Through `transition`.
// ---------------------------------------------------------------------------

fn ctx() -> ConvContext {
    ConvContext {
        policy: Policy::new(Mode::Default, "/work"),
        todo_reminder_after: 8,
        ..ConvContext::default()
    }
}

fn requesting(iteration: u32) -> Conversation {
    ConvState::LlmRequesting {
        attempt: 1,
        iteration,
        retry: None,
        early: Default::default(),
    }
    .into()
}

fn reply_calling(calls: &[(String, &str, serde_json::Value)]) -> Event {
    Event::LlmCompleted {
        reply: Reply {
            content: calls
                .iter()
                .map(|(id, name, input)| ContentBlock::ToolUse {
                    id: id.clone(),
                    name: name.to_string(),
                    input: input.clone(),
                })
                .collect(),
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    }
}

/// The texts of the messages a transition appends.
fn appended(t: &Transition) -> Vec<String> {
    t.effects
        .iter()
        .filter_map(|e| match e {
            Effect::AppendMessage { message } => Some(message),
            _ => None,
        })
        .flat_map(|m| m.content.iter())
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::ToolResult { content, .. } => content.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

/// One round of `n` reads answered, from `conv`: the conversation after
/// the last result and every text the results message carries.
fn round_of_reads(conv: &Conversation, c: &ConvContext, n: usize) -> (Conversation, Vec<String>) {
    let calls: Vec<(String, &str, serde_json::Value)> = (0..n)
        .map(|i| {
            (
                format!("r{i}"),
                "read",
                json!({"file_path": format!("/work/f{i}")}),
            )
        })
        .collect();
    let mut t = transition(conv, c, reply_calling(&calls)).unwrap();
    for (id, _, _) in &calls {
        t = transition(
            &t.conversation,
            c,
            Event::ToolCompleted {
                result: ToolResult::new(id, "contents", false),
            },
        )
        .unwrap();
    }
    let texts = appended(&t);
    assert_eq!(texts.iter().filter(|t| *t == "contents").count(), n);
    (t.conversation, texts)
}

/// The conversation `conv` as it stands at the next request of round
/// `iteration` (as the model's reply to the results arrives).
fn at_round(conv: Conversation, iteration: u32) -> Conversation {
    assert!(
        matches!(conv.state, ConvState::LlmRequesting { .. }),
        "{:?}",
        conv.state
    );
    Conversation {
        state: requesting(iteration).state,
        ..conv
    }
}

#[test]
fn a_busy_turn_without_a_list_is_reminded_once() {
    let c = ctx();
    let (conv, first) = round_of_reads(&requesting(1), &c, 5);
    assert!(!first.iter().any(|t| t == TODO_REMINDER));
    let (conv, second) = round_of_reads(&at_round(conv, 2), &c, 4);
    assert_eq!(second.iter().filter(|t| *t == TODO_REMINDER).count(), 1);
    assert_eq!(second.last().map(String::as_str), Some(TODO_REMINDER));
    let (conv, third) = round_of_reads(&at_round(conv, 3), &c, 6);
    assert!(!third.iter().any(|t| t == TODO_REMINDER));
    // Counted across a restart: the tally is part of the conversation.
    assert_eq!(conv.todo_tally.calls, 15);
    assert!(conv.todo_tally.nudged);
}

#[test]
fn update_plan_keeps_a_todo_list_in_default_mode() {
    let c = ctx();
    let list = json!({"steps": [
        {"title": "Read the parser", "status": "completed"},
        {"title": "Fix the off-by-one", "status": "in_progress"},
        {"title": "Run the tests", "status": "pending"},
    ]});
    let t = transition(
        &requesting(1),
        &c,
        reply_calling(&[("u1".to_string(), "update_plan", list)]),
    )
    .unwrap();
    let plan = t.conversation.plan.clone().expect("a todo list");
    assert_eq!(plan.phase, PlanPhase::Todo);
    assert!(t.effects.iter().any(|e| matches!(
        e,
        Effect::PlanChanged { change: PlanEvent::TodoUpdated, plan: p } if *p == plan
    )));
    let texts = appended(&t);
    assert!(
        texts.iter().any(|t| t
            == "Todo list updated.\n[x] 1. Read the parser\n[>] 2. Fix the off-by-one\n[ ] 3. Run the tests\n"),
        "{texts:?}"
    );
    // With a list, a busy turn is not reminded.
    let conv = at_round(t.conversation, 2);
    let (_, texts) = round_of_reads(&conv, &c, 12);
    assert!(!texts.iter().any(|t| t == TODO_REMINDER));
    // The next call replaces the whole list.
    let t = transition(
        &requesting(1),
        &c,
        reply_calling(&[(
            "u2".to_string(),
            "update_plan",
            json!({"steps": [{"title": "Only this", "status": "completed"}]}),
        )]),
    )
    .unwrap();
    assert_eq!(t.conversation.plan.unwrap().steps.len(), 1);
}

#[test]
fn a_finished_plan_takes_step_updates_and_gives_way_to_a_titled_list() {
    let c = ctx();
    let mut plan = Plan::from_input(
        &json!({"intent": "x", "risk": "low", "steps": [{"title": "only", "kind": "edit"}]}),
        "p1",
    )
    .unwrap();
    plan.phase = PlanPhase::Approved;
    plan.steps[0].status = StepStatus::Completed;
    let conv = Conversation {
        plan: Some(plan),
        ..requesting(1)
    };
    // A step update is still the plan's (and refused as such).
    let t = transition(
        &conv,
        &c,
        reply_calling(&[(
            "u1".to_string(),
            "update_plan",
            json!({"steps": [{"id": "1", "status": "in_progress"}]}),
        )]),
    )
    .unwrap();
    assert!(
        appended(&t)
            .iter()
            .any(|t| t.contains("step `1` is already completed")),
        "{:?}",
        appended(&t)
    );
    // Titled items start a todo list.
    let t = transition(
        &conv,
        &c,
        reply_calling(&[(
            "u2".to_string(),
            "update_plan",
            json!({"steps": [{"title": "next task", "status": "in_progress"}]}),
        )]),
    )
    .unwrap();
    assert!(t.conversation.plan.unwrap().is_todo());
}
