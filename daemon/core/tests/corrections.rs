//! Properties of self-correction with a limit (issue 17 point 6): driven
//! through `transition()` as the runtime drives it, against a reference
//! count of attempts per original request.

#![expect(clippy::unwrap_used)]

use agentd_core::Conversation;
use agentd_core::correction::{CorrectionSignal, MAX_CHAINS, MAX_CORRECTION_ATTEMPTS};
use agentd_core::effect::{Effect, LlmPurpose, Notice};
use agentd_core::event::Event;
use agentd_core::message::{ContentBlock, Message, Reply, Role, StopReason, ToolResult, Usage};
use agentd_core::state::{ConvContext, ConvState};
use agentd_core::texts;
use agentd_core::transition::transition;
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashMap;

/// What the model does in one round, and how its tool ends.
#[derive(Debug, Clone, Copy)]
enum Round {
    /// An edit that fails with the signal.
    SignalFailure,
    /// An edit that fails without it.
    PlainFailure,
    /// A write (the fallback tool) that succeeds.
    FallbackSuccess,
    /// A read that succeeds (no fallback).
    OtherSuccess,
    /// The model ends its turn.
    EndTurn,
    /// A user message starts the next turn (one of two texts).
    User(u8),
}

fn round_strategy() -> impl Strategy<Value = Round> {
    prop_oneof![
        5 => Just(Round::SignalFailure),
        1 => Just(Round::PlainFailure),
        2 => Just(Round::FallbackSuccess),
        1 => Just(Round::OtherSuccess),
        1 => Just(Round::EndTurn),
        1 => (0u8..2).prop_map(Round::User),
    ]
}

const FALLBACK: &str = "Read the file and write it whole with `write`.";

struct Conv {
    ctx: ConvContext,
    conversation: Conversation,
    transcript: Vec<Message>,
    notices: Vec<Notice>,
    /// Model requests for turns, with the last user message at the time.
    requests: Vec<Message>,
    next_id: u32,
}

impl Conv {
    fn new() -> Conv {
        Conv {
            ctx: ConvContext {
                max_iterations: 1_000,
                ..ConvContext::default()
            },
            conversation: ConvState::Idle.into(),
            transcript: Vec::new(),
            notices: Vec::new(),
            requests: Vec::new(),
            next_id: 0,
        }
    }

    fn feed(&mut self, event: Event) {
        let t = transition(&self.conversation, &self.ctx, event.clone()).unwrap();
        assert_eq!(
            t,
            transition(&self.conversation, &self.ctx, event).unwrap(),
            "transition is not deterministic"
        );
        // What the runtime persists must read back the same.
        let json = serde_json::to_string(&t.conversation).unwrap();
        assert_eq!(
            serde_json::from_str::<Conversation>(&json).unwrap(),
            t.conversation
        );
        self.conversation = t.conversation;
        for effect in t.effects {
            match effect {
                Effect::AppendMessage { message } => self.transcript.push(message),
                Effect::Notify { notice } => self.notices.push(notice),
                Effect::RequestLlm {
                    purpose: LlmPurpose::Turn,
                    ..
                } => {
                    let last = self.transcript.last().cloned().unwrap();
                    assert_eq!(last.role, Role::User, "a request follows a user message");
                    self.requests.push(last);
                }
                _ => {}
            }
        }
    }

    fn reply(&mut self, name: &str) -> String {
        self.next_id += 1;
        let id = format!("t{}", self.next_id);
        self.feed(Event::LlmCompleted {
            reply: Reply {
                content: vec![ContentBlock::ToolUse {
                    id: id.clone(),
                    name: name.to_string(),
                    input: json!({"path": "a.txt"}),
                }],
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
            },
        });
        id
    }

    fn complete(&mut self, id: &str, content: String, is_error: bool) {
        self.feed(Event::ToolCompleted {
            result: ToolResult::new(id, content, is_error),
        });
    }
}

fn signal_text() -> String {
    let signal = CorrectionSignal {
        fallback_request: FALLBACK.to_string(),
        original_tool: "edit".to_string(),
        original_error: "old_string not found".to_string(),
        suggested_approach: "whole-file write".to_string(),
        fallback_tools: vec!["write".to_string()],
    };
    format!("old_string not found in a.txt\n\n{}", signal.render())
}

fn text_blocks(m: &Message) -> Vec<&str> {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Runs `rounds`, checking each against the reference count of attempts
/// per request text. Returns a violation, if any.
fn run(rounds: &[Round]) -> Result<(), String> {
    let users = ["fix a.txt", "fix b.txt"];
    let mut conv = Conv::new();
    // The reference: open attempts per request text.
    let mut made: HashMap<&str, u32> = HashMap::new();
    let mut current = users[0];
    conv.feed(Event::UserMessage {
        text: current.to_string(),
        images: vec![],
        sending: Default::default(),
    });
    for round in rounds {
        let notices_before = conv.notices.len();
        let requests_before = conv.requests.len();
        if let Round::User(n) = round {
            if !conv.conversation.state.is_at_rest() {
                continue;
            }
            current = users[usize::from(*n)];
            conv.feed(Event::UserMessage {
                text: current.to_string(),
                images: vec![],
                sending: Default::default(),
            });
            continue;
        }
        if !matches!(conv.conversation.state, ConvState::LlmRequesting { .. }) {
            continue;
        }
        match round {
            Round::EndTurn => {
                conv.feed(Event::LlmCompleted {
                    reply: Reply {
                        content: vec![ContentBlock::text("done")],
                        stop_reason: StopReason::EndTurn,
                        usage: Usage::default(),
                    },
                });
                continue;
            }
            Round::SignalFailure => {
                let id = conv.reply("edit");
                conv.complete(&id, signal_text(), true);
            }
            Round::PlainFailure => {
                let id = conv.reply("edit");
                conv.complete(&id, "old_string not found in a.txt".to_string(), true);
            }
            Round::FallbackSuccess => {
                let id = conv.reply("write");
                conv.complete(&id, "wrote a.txt".to_string(), false);
            }
            Round::OtherSuccess => {
                let id = conv.reply("read");
                conv.complete(&id, "contents".to_string(), false);
            }
            Round::User(_) => unreachable!(),
        }
        let said: Vec<&Notice> = conv.notices[notices_before..]
            .iter()
            .filter(|n| {
                matches!(
                    n,
                    Notice::CorrectionAttempt { .. }
                        | Notice::CorrectionSucceeded { .. }
                        | Notice::CorrectionFailed { .. }
                )
            })
            .collect();
        let asked = &conv.requests[requests_before..];
        let open = made.entry(current).or_insert(0);
        match round {
            Round::SignalFailure if *open < MAX_CORRECTION_ATTEMPTS => {
                *open += 1;
                let expected = *open;
                match said.as_slice() {
                    [
                        Notice::CorrectionAttempt {
                            attempt,
                            max_attempts,
                            fallback_request,
                            ..
                        },
                    ] if *attempt == expected
                        && *max_attempts == MAX_CORRECTION_ATTEMPTS
                        && fallback_request == FALLBACK => {}
                    other => return Err(format!("attempt {expected}: said {other:?}")),
                }
                // The very next request carries the seed's prompt, exactly.
                let [request] = asked else {
                    return Err(format!("attempt {expected}: {} requests", asked.len()));
                };
                if text_blocks(request) != [texts::reengagement_prompt(FALLBACK).as_str()] {
                    return Err(format!("attempt {expected}: request said {request:?}"));
                }
            }
            Round::SignalFailure => {
                // The failure after the last attempt: the turn ends.
                match said.as_slice() {
                    [Notice::CorrectionFailed { attempts, .. }]
                        if *attempts == MAX_CORRECTION_ATTEMPTS => {}
                    other => return Err(format!("after the limit: said {other:?}")),
                }
                if !asked.is_empty() || !matches!(conv.conversation.state, ConvState::Error { .. })
                {
                    return Err(format!(
                        "after the limit: {} requests, state {}",
                        asked.len(),
                        conv.conversation.state.name()
                    ));
                }
                *open = 0;
            }
            Round::FallbackSuccess if *open > 0 => {
                let expected = *open;
                match said.as_slice() {
                    [Notice::CorrectionSucceeded { attempts, tool }]
                        if *attempts == expected && tool == "write" => {}
                    other => return Err(format!("success after {expected}: said {other:?}")),
                }
                *open = 0;
            }
            _ => {
                if !said.is_empty() {
                    return Err(format!(
                        "{round:?} with {open} open attempts: said {said:?}"
                    ));
                }
                for request in asked {
                    if text_blocks(request)
                        .iter()
                        .any(|t| t.starts_with("The previous approach failed."))
                    {
                        return Err(format!("{round:?}: re-engaged without a signal"));
                    }
                }
            }
        }
        if conv.conversation.corrections.chains.len() > MAX_CHAINS {
            return Err("too many chains kept".to_string());
        }
        for chain in &conv.conversation.corrections.chains {
            if chain.attempts.len() as u32 > MAX_CORRECTION_ATTEMPTS {
                return Err(format!("{} attempts kept", chain.attempts.len()));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Attempts are counted per original request and capped at 3: each
    /// signal failure within the limit re-engages the model with the seed's
    /// prompt (attempt n of 3, numbered in order), the one after the limit
    /// ends the turn with `correction_failed` and no further request, and
    /// a fallback success after at least one attempt says
    /// `correction_success` with the count; nothing else says anything.
    #[test]
    fn attempts_are_counted_per_request_and_capped(rounds in prop::collection::vec(round_strategy(), 1..40)) {
        if let Err(violation) = run(&rounds) {
            return Err(TestCaseError::fail(violation));
        }
    }
}

#[test]
fn four_signal_failures_in_a_row_give_three_attempts_then_an_end() {
    run(&[Round::SignalFailure; 4]).unwrap();
    let mut conv = Conv::new();
    conv.feed(Event::UserMessage {
        text: "fix a.txt".to_string(),
        images: vec![],
        sending: Default::default(),
    });
    for _ in 0..4 {
        let id = conv.reply("edit");
        conv.complete(&id, signal_text(), true);
    }
    let kinds: Vec<String> = conv
        .notices
        .iter()
        .map(|n| match n {
            Notice::CorrectionAttempt { attempt, .. } => format!("attempt {attempt}"),
            Notice::CorrectionFailed { .. } => "failed".to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds[..4],
        ["attempt 1", "attempt 2", "attempt 3", "failed"]
    );
    assert!(conv.conversation.state.is_at_rest());
    assert_eq!(
        conv.requests.len(),
        4,
        "the first request and three re-engagements"
    );
}
