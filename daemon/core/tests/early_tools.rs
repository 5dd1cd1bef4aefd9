//! Read-only calls that start while the reply streams (issue 42 point 2):
//! which start early, what happens to them when the reply ends, fails or
//! is cancelled, and (property) that every call is answered exactly once
//! and no mutating call ever starts before the reply has ended.

#![expect(clippy::unwrap_used)]

use agentd_core::Conversation;
use agentd_core::effect::Effect;
use agentd_core::event::{Event, LlmFailure};
use agentd_core::message::{ContentBlock, Reply, StopReason, ToolCall, ToolResult, Usage};
use agentd_core::permission::{Mode, Policy};
use agentd_core::state::{ConvContext, ConvState, ErrorKind};
use agentd_core::transition::{Rejected, transition};
use proptest::prelude::*;
use serde_json::json;

fn ctx() -> ConvContext {
    ConvContext {
        now_ms: 1_000,
        policy: Policy::new(Mode::Default, "/w/p"),
        ..ConvContext::default()
    }
}

fn streaming() -> Conversation {
    ConvState::LlmRequesting {
        attempt: 1,
        iteration: 1,
        retry: None,
        early: Default::default(),
    }
    .into()
}

fn read(id: &str) -> ToolCall {
    ToolCall {
        id: id.to_string(),
        name: "read".to_string(),
        input: json!({"path": format!("/w/p/{id}.txt")}),
    }
}

fn bash(id: &str) -> ToolCall {
    ToolCall {
        id: id.to_string(),
        name: "bash".to_string(),
        input: json!({"command": format!("touch {id}")}),
    }
}

/// Applies `event`; the new conversation and the effects. An event that
/// does not apply (a stale report, as the runtime drops it) changes
/// nothing.
fn step(conv: &Conversation, event: Event) -> (Conversation, Vec<Effect>) {
    step_in(&ctx(), conv, event)
}

fn step_in(ctx: &ConvContext, conv: &Conversation, event: Event) -> (Conversation, Vec<Effect>) {
    match transition(conv, ctx, event) {
        Ok(t) => (t.conversation, t.effects),
        Err(Rejected::NotApplicable { .. }) => (conv.clone(), Vec::new()),
        Err(e) => panic!("{e}"),
    }
}

fn started(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ExecuteTool { call, .. } => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

fn aborted(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::AbortTools { tool_use_ids } => Some(tool_use_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The tool results of the messages `effects` append, as (id, text).
fn answered(effects: &[Effect]) -> Vec<(String, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::AppendMessage { message } => Some(message),
            _ => None,
        })
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => Some((tool_use_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

fn completed(calls: &[ToolCall]) -> Event {
    Event::LlmCompleted {
        reply: Reply {
            content: calls
                .iter()
                .map(|c| ContentBlock::ToolUse {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    input: c.input.clone(),
                })
                .collect(),
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    }
}

fn done(id: &str) -> Event {
    Event::ToolCompleted {
        result: ToolResult::new(id, format!("out of {id}"), false),
    }
}

fn failure(message: &str, retryable: bool) -> LlmFailure {
    LlmFailure {
        kind: ErrorKind::Network,
        retryable,
        message: message.to_string(),
        retry_after_ms: None,
    }
}

/// Call `tN`'s block is complete; the reply's calls before it are t1 to
/// t(N-1).
fn streamed(call: &ToolCall) -> Event {
    let n: usize = call.id.trim_start_matches('t').parse().unwrap();
    Event::ToolCallStreamed {
        call: call.clone(),
        preceding: (1..n).map(|i| format!("t{i}")).collect(),
    }
}

#[test]
fn leading_reads_start_at_once_and_a_mutating_call_closes_the_early_start() {
    let conv = streaming();
    let (conv, e1) = step(&conv, streamed(&read("t1")));
    let (conv, e2) = step(&conv, streamed(&read("t2")));
    let (conv, e3) = step(&conv, streamed(&bash("t3")));
    let (conv, e4) = step(&conv, streamed(&read("t4")));
    assert_eq!(started(&e1), ["t1"]);
    assert_eq!(started(&e2), ["t2"]);
    // bash needs a person in default mode; the read after it keeps its
    // place behind it.
    assert!(started(&e3).is_empty() && started(&e4).is_empty());
    // t1 ends before the reply does.
    let (conv, _) = step(&conv, done("t1"));
    let calls = [read("t1"), read("t2"), bash("t3"), read("t4")];
    let (conv, effects) = step(&conv, completed(&calls));
    // Nothing starts twice, and bash waits for t2 to end.
    assert!(started(&effects).is_empty(), "{effects:#?}");
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::AskPermission { .. }))
    );
    let (conv, effects) = step(&conv, done("t2"));
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::AskPermission { ask } if ask.tool_use_id == "t3")),
        "{effects:#?}"
    );
    assert_eq!(conv.state.name(), "AwaitingPermission");
}

#[test]
fn a_read_answered_before_the_reply_ends_is_the_result_sent() {
    let (conv, _) = step(&streaming(), streamed(&read("t1")));
    let (conv, _) = step(&conv, done("t1"));
    let (conv, effects) = step(&conv, completed(&[read("t1")]));
    assert_eq!(
        answered(&effects),
        [("t1".to_string(), "out of t1".to_string())]
    );
    assert!(started(&effects).is_empty());
    assert!(matches!(
        conv.state,
        ConvState::LlmRequesting { iteration: 2, .. }
    ));
}

#[test]
fn a_failed_stream_aborts_the_early_calls_and_the_retry_starts_clean() {
    let (conv, _) = step(&streaming(), streamed(&read("t1")));
    let (conv, _) = step(&conv, streamed(&read("t2")));
    let (conv, _) = step(&conv, done("t2"));
    let failure = failure("connection reset", true);
    let (conv, effects) = step(
        &conv,
        Event::LlmFailed {
            failure,
            jitter_permille: 0,
        },
    );
    assert_eq!(aborted(&effects), ["t1"]);
    assert!(answered(&effects).is_empty());
    let ConvState::LlmRequesting {
        retry: Some(_),
        early,
        ..
    } = &conv.state
    else {
        panic!("{:?}", conv.state)
    };
    assert!(early.is_empty());
    // The aborted call's late end changes nothing.
    let (after, effects) = step(&conv, done("t1"));
    assert_eq!(after.state, conv.state);
    assert!(effects.is_empty());
}

#[test]
fn a_cancel_mid_stream_aborts_the_early_calls() {
    let (conv, _) = step(&streaming(), streamed(&read("t1")));
    let (conv, effects) = step(&conv, Event::UserCancel);
    assert_eq!(aborted(&effects), ["t1"]);
    assert!(effects.iter().any(|e| matches!(e, Effect::AbortLlm)));
    assert_eq!(conv.state.name(), "Cancelling");
}

#[test]
fn a_mutating_first_call_starts_nothing_early() {
    let (conv, e1) = step(&streaming(), streamed(&bash("t1")));
    let (_, e2) = step(&conv, streamed(&read("t2")));
    assert!(started(&e1).is_empty() && started(&e2).is_empty());
}

/// One step of a streaming reply: a block completes, or an early call
/// ends.
#[derive(Debug, Clone)]
enum Step {
    Block { mutating: bool },
    End(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            any::<bool>().prop_map(|mutating| Step::Block { mutating }),
            (0usize..8).prop_map(Step::End),
        ],
        0..14,
    )
}

proptest! {
    /// However blocks and early ends interleave, and whether the reply
    /// then completes, fails or is cancelled: no call starts twice, no
    /// mutating call starts before the reply has ended, and once every
    /// started call ends, every call of a completed reply is answered
    /// exactly once (in a `bypass` conversation, so nothing waits for a
    /// person).
    #[test]
    fn early_calls_are_answered_once_and_never_mutate_early(
        steps in steps(),
        ending in 0u8..3,
    ) {
        let ctx = ConvContext {
            now_ms: 1_000,
            policy: Policy::new(Mode::Bypass, "/w/p"),
            ..ConvContext::default()
        };
        let mut conv = Conversation { mode: Mode::Bypass, ..streaming() };
        let mut calls: Vec<ToolCall> = Vec::new();
        let mut starts: Vec<String> = Vec::new();
        let mut running: Vec<String> = Vec::new();
        let apply = |conv: &mut Conversation, event: Event, running: &mut Vec<String>| {
            let (next, effects) = step_in(&ctx, conv, event);
            *conv = next;
            let ids = started(&effects);
            running.extend(ids.iter().cloned());
            running.retain(|id| !aborted(&effects).contains(id));
            (ids, effects)
        };
        for s in steps {
            match s {
                Step::Block { mutating } => {
                    let id = format!("t{}", calls.len() + 1);
                    let call = if mutating { bash(&id) } else { read(&id) };
                    calls.push(call.clone());
                    let (ids, _) = apply(&mut conv, streamed(&call), &mut running);
                    if mutating {
                        prop_assert!(ids.is_empty(), "a mutating call started early");
                    }
                    starts.extend(ids);
                }
                Step::End(i) => {
                    if let Some(id) = running.get(i % running.len().max(1)).cloned() {
                        running.retain(|r| *r != id);
                        apply(&mut conv, done(&id), &mut running);
                    }
                }
            }
        }
        let end = match ending {
            0 => completed(&calls),
            1 => Event::UserCancel,
            _ => Event::LlmFailed {
                failure: failure("reset", false),
                jitter_permille: 0,
            },
        };
        let (ids, effects) = apply(&mut conv, end, &mut running);
        starts.extend(ids);
        let mut results = answered(&effects);
        // Every started call ends; whatever starts next runs until none is left.
        while let Some(id) = running.first().cloned() {
            running.retain(|r| *r != id);
            let (ids, effects) = apply(&mut conv, done(&id), &mut running);
            starts.extend(ids);
            results.extend(answered(&effects));
        }
        let mut unique = starts.clone();
        unique.sort();
        unique.dedup();
        prop_assert_eq!(unique.len(), starts.len(), "a call started twice: {:?}", starts);
        if ending == 0 && !calls.is_empty() {
            let mut ids: Vec<&String> = results.iter().map(|(id, _)| id).collect();
            ids.sort();
            let mut want: Vec<&String> = calls.iter().map(|c| &c.id).collect();
            want.sort();
            prop_assert_eq!(ids, want);
        }
    }
}
