//! Properties of context continuation (REQ-BED-019 … REQ-BED-024): the
//! 80 % warning, the 90 % threshold, the summary and the seeded
//! continuation, over random usages and windows.

use agentd_core::effect::{Effect, LlmPurpose, Notice};
use agentd_core::event::Event;
use agentd_core::message::{ContentBlock, MessageKind, Reply, Role, StopReason, Usage};
use agentd_core::state::{
    AutoContinue, ConvContext, ConvState, WARNING_THRESHOLD, should_trigger_continuation,
    should_warn,
};
use agentd_core::texts;
use agentd_core::transition::transition;
use agentd_core::{ContinuationChain, Conversation};
use proptest::prelude::*;
use serde_json::json;

fn usage_strategy() -> impl Strategy<Value = Usage> {
    (0u64..120_000, 0u64..60_000, 0u64..60_000, 0u64..20_000).prop_map(
        |(input, cache_write, cache_read, output)| Usage {
            input_tokens: input,
            cache_creation_input_tokens: cache_write,
            cache_read_input_tokens: cache_read,
            output_tokens: output,
        },
    )
}

fn window_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(200_000u64), 1_000u64..400_000]
}

fn warnings(effects: &[Effect]) -> Vec<(u64, u64)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notify {
                notice:
                    Notice::ContextWarning {
                        used_tokens,
                        context_window,
                    },
            } => Some((*used_tokens, *context_window)),
            _ => None,
        })
        .collect()
}

fn requesting() -> ConvState {
    ConvState::LlmRequesting {
        attempt: 1,
        iteration: 1,
        retry: None,
        early: Default::default(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// The warning fires exactly when a reply crosses 80 % from below it
    /// (once per crossing), names the reply's tokens and the window, and
    /// the continuation starts exactly at 90 %, whatever the reply asks.
    #[test]
    fn warning_once_per_crossing_and_continuation_at_the_threshold(
        last in usage_strategy(),
        now in usage_strategy(),
        window in window_strategy(),
        with_call in any::<bool>(),
    ) {
        let ctx = ConvContext {
            context_window: window,
            last_usage: last,
            ..ConvContext::default()
        };
        let mut content = vec![ContentBlock::text("working")];
        if with_call {
            content.push(ContentBlock::ToolUse {
                id: "t1".into(),
                name: "bash".into(),
                input: json!({"command": "ls"}),
            });
        }
        let reply = Reply {
            content,
            stop_reason: if with_call { StopReason::ToolUse } else { StopReason::EndTurn },
            usage: now,
        };
        let t = transition(&requesting().into(), &ctx, Event::LlmCompleted { reply }).unwrap();
        let crossed = should_warn(&now, window) && !should_warn(&last, window);
        let expected: Vec<(u64, u64)> = if crossed {
            vec![(now.context_tokens(), window)]
        } else {
            Vec::new()
        };
        prop_assert_eq!(warnings(&t.effects), expected);
        if crossed {
            let fraction = now.context_tokens() as f64 / window as f64;
            prop_assert!(fraction + 1e-9 >= WARNING_THRESHOLD);
        }
        let continues = should_trigger_continuation(&now, window);
        prop_assert_eq!(
            matches!(t.conversation.state, ConvState::AwaitingContinuation { .. }),
            continues
        );
        if continues {
            // The rejected call is never executed, and the prompt lists it.
            let executes = t.effects.iter().any(|e| matches!(e, Effect::ExecuteTool { .. }));
            prop_assert!(!executes, "a rejected call was executed");
            let prompt = t.effects.iter().find_map(|e| match e {
                Effect::RequestLlm { purpose: LlmPurpose::Continuation { prompt }, .. } => {
                    Some(prompt.clone())
                }
                _ => None,
            });
            let names: Vec<String> = if with_call { vec!["bash".into()] } else { Vec::new() };
            prop_assert_eq!(prompt, Some(texts::continuation_prompt(&names)));
        }
    }

    /// However the continuation request ends (a summary, a failure, a
    /// cancel), the conversation is exhausted with exactly one message of
    /// kind `continuation` holding the summary or the seed's text.
    #[test]
    fn every_end_of_the_continuation_stores_one_continuation_message(
        ending in 0u8..4,
        summary in "[a-zA-Z .]{1,40}",
        trigger in usage_strategy(),
    ) {
        let state = ConvState::AwaitingContinuation {
            rejected_tool_calls: Vec::new(),
            trigger_usage: trigger,
            attempt: 1,
        };
        let ctx = ConvContext::default();
        let (event, expected) = match ending {
            0 => (Event::ContinuationCompleted { summary: summary.clone(), usage: Usage::default() }, summary.clone()),
            1 => (Event::LlmCompleted { reply: Reply {
                content: vec![ContentBlock::text(summary.clone())],
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            } }, summary.clone()),
            2 => (Event::ContinuationFailed { error: "HTTP 500".into() }, texts::CONTINUATION_FALLBACK.to_string()),
            _ => (Event::UserCancel, texts::CONTINUATION_CANCELLED.to_string()),
        };
        let t = transition(&state.clone().into(), &ctx, event).unwrap();
        let stored: Vec<_> = t.effects.iter().filter_map(|e| match e {
            Effect::AppendMessage { message } => Some(message),
            _ => None,
        }).collect();
        prop_assert_eq!(stored.len(), 1);
        prop_assert_eq!(stored[0].kind, MessageKind::Continuation);
        prop_assert_eq!(stored[0].role, Role::Assistant);
        prop_assert_eq!(stored[0].text(), expected.clone());
        match &t.conversation.state {
            ConvState::ContextExhausted { summary: s, .. } => prop_assert_eq!(s, &expected),
            other => prop_assert!(false, "not exhausted: {:?}", other),
        }
        // Read-only from then on, and it says so.
        let refused = transition(&t.conversation.state.clone().into(), &ctx, Event::UserMessage { text: "more".into(), images: vec![], sending: Default::default() });
        prop_assert_eq!(refused.unwrap_err().to_string(), texts::CONTEXT_EXHAUSTED);
    }

    /// A continued conversation's first request carries the parent's
    /// summary and every queued message, in one user message of kind
    /// `continued`.
    #[test]
    fn a_continuation_is_seeded_with_the_summary_and_the_queue(
        summary in "[a-zA-Z .]{1,40}",
        queued in proptest::collection::vec("[a-z ]{1,12}", 0..4),
    ) {
        let ctx = ConvContext::default();
        let event = Event::ContinuedFrom {
            parent_id: "01PARENT".into(),
            summary: summary.clone(),
            texts: queued.clone(),
            images: Vec::new(),
        };
        let t = transition(&ConvState::Idle.into(), &ctx, event).unwrap();
        let first_round = matches!(t.conversation.state, ConvState::LlmRequesting { attempt: 1, iteration: 1, .. });
        prop_assert!(first_round, "not the first round: {:?}", t.conversation.state);
        let messages: Vec<_> = t.effects.iter().filter_map(|e| match e {
            Effect::AppendMessage { message } => Some(message),
            _ => None,
        }).collect();
        prop_assert_eq!(messages.len(), 1);
        let m = messages[0];
        prop_assert_eq!(m.role, Role::User);
        prop_assert_eq!(m.kind, MessageKind::Continued);
        let texts_of: Vec<String> = m.content.iter().filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        }).collect();
        prop_assert_eq!(&texts_of[0], &texts::continued_from("01PARENT", &summary));
        if queued.is_empty() {
            prop_assert_eq!(&texts_of[1..], &[texts::CONTINUE_THE_TASK.to_string()][..]);
        } else {
            prop_assert_eq!(&texts_of[1..], &queued[..]);
        }
        let asks = t.effects.iter().any(|e| matches!(
            e,
            Effect::RequestLlm { purpose: LlmPurpose::Turn, .. }
        ));
        prop_assert!(asks, "the model is not asked");
    }

    /// The daemon owes a continuation exactly when an exhausting
    /// transition finds auto-continue on, this conversation not continued
    /// and the chain shorter than `max_hops`: the effect and the pending
    /// mark come together, nothing else of the chain changes; recording
    /// the continuation made clears the mark, once.
    #[test]
    fn a_continuation_is_pending_exactly_when_the_daemon_owes_one(
        enabled in any::<bool>(),
        max_hops in 0u32..5,
        hop in 0u32..7,
        continued in any::<bool>(),
        pending in any::<bool>(),
        automatically in any::<bool>(),
        fails in any::<bool>(),
    ) {
        let ctx = ConvContext {
            auto_continue: AutoContinue { enabled, max_hops },
            ..ConvContext::default()
        };
        let before = ContinuationChain {
            parent_id: (hop > 0).then(|| "01PARENT".to_string()),
            continued_as: continued.then(|| "01OTHER".to_string()),
            hop,
            pending,
            ..ContinuationChain::default()
        };
        let conv = Conversation {
            continuation: before.clone(),
            ..ConvState::AwaitingContinuation {
                rejected_tool_calls: Vec::new(),
                trigger_usage: Usage::default(),
                attempt: 1,
            }
            .into()
        };
        let event = if fails {
            Event::ContinuationFailed { error: "HTTP 500".into() }
        } else {
            Event::ContinuationCompleted { summary: "S.".into(), usage: Usage::default() }
        };
        let t = transition(&conv, &ctx, event).unwrap();
        let owed = enabled && !continued && hop < max_hops;
        prop_assert_eq!(t.effects.contains(&Effect::ContinueInNewConversation), owed);
        prop_assert_eq!(
            &t.conversation.continuation,
            &ContinuationChain { pending: pending || owed, ..before.clone() }
        );
        let made = Event::ContinuedAs { id: "01NEXT".into(), automatically, taken: Vec::new() };
        let after = transition(&t.conversation, &ctx, made.clone()).unwrap();
        prop_assert!(after.effects.is_empty());
        prop_assert_eq!(&after.conversation.state, &t.conversation.state);
        prop_assert_eq!(
            &after.conversation.continuation,
            &ContinuationChain {
                continued_as: Some("01NEXT".into()),
                continued_automatically: automatically,
                pending: false,
                ..before
            }
        );
        prop_assert!(transition(&after.conversation, &ctx, made).is_err(), "recorded twice");
    }
}
