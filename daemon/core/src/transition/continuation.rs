//! Context exhaustion: the continuation summary requested when the context
//! fills up, and the read-only end it leads to.

use super::reply::retry_delay;
use super::{Inputs, Rejected, Step};
use crate::effect::{Effect, LlmPurpose, Notice};
use crate::event::LlmFailure;
use crate::message::{ContentBlock, Message, MessageKind, Reply, Role, ToolCall, Usage};
use crate::state::ConvState;
use crate::texts;

pub(super) fn continuation_purpose(rejected: &[ToolCall]) -> LlmPurpose {
    let names: Vec<String> = rejected.iter().map(|c| c.name.clone()).collect();
    LlmPurpose::Continuation {
        prompt: texts::continuation_prompt(&names),
    }
}

/// Tells clients a continuation summary is requested, naming the tool
/// calls that were rejected.
pub(super) fn continuation_started(rejected: &[ToolCall], manual: bool) -> Effect {
    Effect::Notify {
        notice: Notice::ContinuationStarted {
            rejected_tools: rejected.iter().map(|c| c.name.clone()).collect(),
            manual,
        },
    }
}

/// The conversation becomes read-only: the summary (or the fallback text)
/// is stored as a message of kind `continuation` (seed: message type
/// `continuation`), which is what a continued conversation is seeded with.
pub(super) fn exhausted(ctx: &Inputs<'_>, summary: String, final_usage: Usage) -> Step {
    Step::new(ConvState::ContextExhausted {
        summary: summary.clone(),
        final_usage,
    })
    .with(Effect::AppendMessage {
        message: Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text(summary.clone())],
            created_at_ms: ctx.now_ms,
            usage: None,
            stop_reason: None,
            interrupted: false,
            kind: MessageKind::Continuation,
        },
    })
    .with(Effect::Notify {
        notice: Notice::ContextExhausted { summary },
    })
}

/// The model's reply to the continuation request is the summary.
pub(super) fn on_summary_reply(ctx: &Inputs<'_>, trigger_usage: Usage, reply: &Reply) -> Step {
    let mut usage = trigger_usage;
    usage.add(&reply.usage);
    exhausted(ctx, text_of(&reply.content), usage)
}

/// A failed continuation request is retried like a turn's; past the last
/// attempt the summary is the fallback text.
pub(super) fn on_request_failed(
    ctx: &Inputs<'_>,
    rejected_tool_calls: &[ToolCall],
    trigger_usage: Usage,
    attempt: u32,
    failure: &LlmFailure,
    jitter_permille: u16,
) -> Step {
    // A retry-after longer than we wait is not retried (as for a turn's
    // request), rather than retried at once.
    if failure.retryable
        && attempt < ctx.max_attempts
        && let Some(delay_ms) = retry_delay(ctx, attempt, failure, jitter_permille)
    {
        Step::new(ConvState::AwaitingContinuation {
            rejected_tool_calls: rejected_tool_calls.to_vec(),
            trigger_usage,
            attempt: attempt + 1,
        })
        .with(Effect::ScheduleRetry {
            attempt: attempt + 1,
            delay_ms,
        })
    } else {
        exhausted(ctx, texts::CONTINUATION_FALLBACK.to_string(), trigger_usage)
    }
}

/// The runtime's summary request ended with a summary.
pub(super) fn on_completed(
    state: &ConvState,
    ctx: &Inputs<'_>,
    summary: String,
    usage: Usage,
) -> Option<Step> {
    let ConvState::AwaitingContinuation { trigger_usage, .. } = state else {
        return None;
    };
    let mut total = *trigger_usage;
    total.add(&usage);
    Some(exhausted(ctx, summary, total))
}

/// The runtime's summary request failed: the fallback text stands in.
pub(super) fn on_failed(state: &ConvState, ctx: &Inputs<'_>) -> Option<Step> {
    let ConvState::AwaitingContinuation { trigger_usage, .. } = state else {
        return None;
    };
    Some(exhausted(
        ctx,
        texts::CONTINUATION_FALLBACK.to_string(),
        *trigger_usage,
    ))
}

/// A user asks for a continuation summary by hand (REQ-BED-023): from Idle,
/// starting from the last reply's usage. `Ok(None)`: it does not apply.
pub(super) fn on_user_trigger(
    state: &ConvState,
    ctx: &Inputs<'_>,
) -> Result<Option<Step>, Rejected> {
    match state {
        ConvState::Idle => Ok(Some(
            Step::new(ConvState::AwaitingContinuation {
                rejected_tool_calls: Vec::new(),
                trigger_usage: ctx.last_usage,
                attempt: 1,
            })
            .with(continuation_started(&[], true))
            .with(Effect::RequestLlm {
                attempt: 1,
                purpose: continuation_purpose(&[]),
            }),
        )),
        ConvState::Cancelling { .. } => Err(Rejected::CancellationInProgress),
        ConvState::ContextExhausted { .. } => Err(Rejected::ContextExhausted),
        ConvState::AwaitingLlm { .. }
        | ConvState::LlmRequesting { .. }
        | ConvState::StopHooks { .. }
        | ConvState::ToolExecuting(_)
        | ConvState::AwaitingSubAgents { .. }
        | ConvState::AwaitingContinuation { .. } => Err(Rejected::Busy),
        ConvState::Error { .. } | ConvState::BudgetStopped { .. } => Ok(None),
    }
}

fn text_of(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            out.push_str(text);
        }
    }
    out
}

/// A transition that exhausts the context owes a continuation in a new
/// conversation when the daemon makes them by itself (see
/// [`ContinuationChain::owed`]); the new conversation records it as
/// pending (`Step::finish`).
///
/// [`ContinuationChain::owed`]: crate::conversation::ContinuationChain::owed
pub(super) fn owed(before: &ConvState, ctx: &Inputs<'_>, t: Step) -> Step {
    let exhausts = matches!(t.state, ConvState::ContextExhausted { .. })
        && !matches!(before, ConvState::ContextExhausted { .. });
    if exhausts && ctx.conv.continuation.owed(&ctx.auto_continue) {
        t.with(Effect::ContinueInNewConversation)
    } else {
        t
    }
}
