//! The model's side of a turn: a reply, a failed request and its retry, and
//! the stop hooks of a turn the model ended.
//!
//! Retries are decided here. A provider makes one attempt and classifies
//! its failure (the daemon's `llm/error.rs`: retryable or not, any
//! `retry-after`); the runtime adds a random draw to `Event::LlmFailed`. A
//! retryable failure below `max_attempts` waits in `LlmRequesting { retry }`
//! for the server's `retry-after` (unless it is longer than
//! `max_retry_after_ms`) or an exponential backoff from `retry_base_ms`,
//! capped at `retry_max_ms`, half of it jittered; `Effect::ScheduleRetry`
//! asks the runtime for the timer and `Notice::Retrying` tells clients, and
//! `Event::RetryDue` sends the request again. Any other failure ends the
//! turn in `Error`, saying how many attempts failed.

use super::continuation::{self, continuation_purpose, continuation_started};
use super::early;
use super::schedule::schedule;
use super::{Inputs, Step, fail, next_round};
use crate::effect::{Effect, LlmPurpose, Notice};
use crate::event::LlmFailure;
use crate::message::{ContentBlock, Message, MessageKind, Reply, Role, StopReason, ToolCall};
use crate::state::{
    ContextExhaustionBehavior, ConvState, EarlyCalls, ErrorKind, RetryWait, ToolRun,
    should_trigger_continuation, should_warn,
};
use crate::texts;

/// The model's reply: in a turn it is taken; after a cancel it ends the
/// cancel; while a continuation is requested it is the summary.
pub(super) fn on_completed(state: &ConvState, ctx: &Inputs<'_>, reply: Reply) -> Option<Step> {
    match state {
        ConvState::LlmRequesting {
            iteration,
            retry: None,
            early,
            ..
        } => Some(on_reply(ctx, *iteration, reply, early)),
        ConvState::Cancelling { .. } => Some(super::cancel::finish_cancel(ctx, reply.content)),
        ConvState::AwaitingContinuation { trigger_usage, .. } => {
            Some(continuation::on_summary_reply(ctx, *trigger_usage, &reply))
        }
        _ => None,
    }
}

/// A failed model request: retried or failing the turn, ending a cancel,
/// or (for a continuation) retried or falling back.
pub(super) fn on_failed(
    state: &ConvState,
    ctx: &Inputs<'_>,
    failure: LlmFailure,
    jitter_permille: u16,
) -> Option<Step> {
    match state {
        ConvState::LlmRequesting {
            attempt,
            iteration,
            retry: None,
            early,
        } => {
            // The reply is lost: what started early stops, unused.
            let step = on_llm_failed(ctx, *attempt, *iteration, failure, jitter_permille);
            Some(match early::abort_running(early) {
                Some(abort) => step.prepend(abort),
                None => step,
            })
        }
        ConvState::Cancelling { .. } => Some(super::cancel::finish_cancel(ctx, Vec::new())),
        ConvState::AwaitingContinuation {
            rejected_tool_calls,
            trigger_usage,
            attempt,
        } => Some(continuation::on_request_failed(
            ctx,
            rejected_tool_calls,
            *trigger_usage,
            *attempt,
            &failure,
            jitter_permille,
        )),
        _ => None,
    }
}

/// A retry's wait is over: the request goes out again.
pub(super) fn on_retry_due(state: &ConvState) -> Option<Step> {
    match state {
        ConvState::LlmRequesting {
            attempt,
            iteration,
            retry: Some(_),
            ..
        } => Some(
            Step::new(ConvState::LlmRequesting {
                attempt: *attempt,
                iteration: *iteration,
                retry: None,
                early: EarlyCalls::default(),
            })
            .with(Effect::RequestLlm {
                attempt: *attempt,
                purpose: LlmPurpose::Turn,
            }),
        ),
        ConvState::AwaitingContinuation {
            rejected_tool_calls,
            attempt,
            ..
        } => Some(Step::unchanged(state).with(Effect::RequestLlm {
            attempt: *attempt,
            purpose: continuation_purpose(rejected_tool_calls),
        })),
        _ => None,
    }
}

/// The stop hooks of a turn the model ended have answered: a reason to go
/// on is the next round's user message; none ends the turn.
pub(super) fn on_stop_hooks_decided(
    state: &ConvState,
    ctx: &Inputs<'_>,
    continue_with: Option<String>,
) -> Option<Step> {
    let ConvState::StopHooks { iteration } = state else {
        return None;
    };
    let reason = continue_with.as_deref().map(str::trim).unwrap_or("");
    Some(if reason.is_empty() {
        Step::new(ConvState::Idle)
    } else if *iteration >= ctx.max_iterations {
        next_round(ctx, *iteration)
    } else {
        next_round(ctx, *iteration).prepend(Effect::AppendMessage {
            message: Message::user(
                vec![ContentBlock::text(texts::stop_hook_message(reason))],
                ctx.now_ms,
            ),
        })
    })
}

fn on_reply(ctx: &Inputs<'_>, iteration: u32, mut reply: Reply, early: &EarlyCalls) -> Step {
    // Providers may stream an empty text block (e.g. before a tool call) but
    // refuse one sent back ("text content blocks must be non-empty"): it
    // must not enter the transcript, or every later request fails.
    reply
        .content
        .retain(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()));
    let calls: Vec<ToolCall> = reply
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            }),
            _ => None,
        })
        .collect();

    // REQ-BED-023: once per crossing of the warning threshold.
    let warning = (should_warn(&reply.usage, ctx.context_window)
        && !should_warn(&ctx.last_usage, ctx.context_window))
    .then(|| Effect::Notify {
        notice: Notice::ContextWarning {
            used_tokens: reply.usage.context_tokens(),
            context_window: ctx.context_window,
        },
    });
    let t = on_reply_usage_checked(ctx, iteration, reply, calls, early);
    match warning {
        Some(effect) => t.with(effect),
        None => t,
    }
}

fn on_reply_usage_checked(
    ctx: &Inputs<'_>,
    iteration: u32,
    reply: Reply,
    calls: Vec<ToolCall>,
    early: &EarlyCalls,
) -> Step {
    if should_trigger_continuation(&reply.usage, ctx.context_window) {
        // The tool calls are not executed, so they must not enter the
        // transcript unanswered: keep only the rest of the reply.
        let kept: Vec<ContentBlock> = reply
            .content
            .into_iter()
            .filter(|b| !matches!(b, ContentBlock::ToolUse { .. }))
            .collect();
        let mut t = match ctx.exhaustion {
            ContextExhaustionBehavior::ThresholdBasedContinuation => {
                let purpose = continuation_purpose(&calls);
                let started = continuation_started(&calls, false);
                Step::new(ConvState::AwaitingContinuation {
                    rejected_tool_calls: calls,
                    trigger_usage: reply.usage,
                    attempt: 1,
                })
                .with(started)
                .with(Effect::RequestLlm {
                    attempt: 1,
                    purpose,
                })
            }
            ContextExhaustionBehavior::IntentionallyUnhandled => fail(
                "Context window exhausted".to_string(),
                ErrorKind::ContextExhausted,
            ),
        };
        if !kept.is_empty() {
            t = t.prepend(Effect::AppendMessage {
                message: assistant(ctx, kept, &reply.stop_reason, reply.usage),
            });
        }
        // The calls are not answered: what started early stops, unused.
        if let Some(abort) = early::abort_running(early) {
            t = t.prepend(abort);
        }
        return t;
    }

    let append = (!reply.content.is_empty()).then(|| Effect::AppendMessage {
        message: assistant(ctx, reply.content, &reply.stop_reason, reply.usage),
    });
    // Every tool_use must be answered, whatever the stop reason says.
    let t = if !calls.is_empty() {
        let run = ToolRun {
            iteration,
            calls,
            ..ToolRun::default()
        };
        let (run, strays) = early::adopt(run, early);
        schedule(ctx, run, strays.into_iter().collect())
    } else {
        // No call in the reply, so none can have started early.
        match &reply.stop_reason {
            StopReason::PauseTurn => next_round(ctx, iteration),
            StopReason::EndTurn | StopReason::StopSequence if ctx.hooks.stop_due() => {
                Step::new(ConvState::StopHooks { iteration }).with(Effect::RunStopHooks)
            }
            StopReason::EndTurn | StopReason::StopSequence => Step::new(ConvState::Idle),
            StopReason::ToolUse => info(
                ConvState::Idle,
                "The model stopped for tool use but asked for no tool.",
            ),
            StopReason::MaxTokens => {
                info(ConvState::Idle, "The reply reached the max_tokens limit.")
            }
            StopReason::Refusal => {
                info(ConvState::Idle, "The model declined to continue (refusal).")
            }
            StopReason::ModelContextWindowExceeded => {
                info(ConvState::Idle, "The model's context window was exceeded.")
            }
            StopReason::ContentFiltered | StopReason::GuardrailIntervened => {
                info(ConvState::Idle, "The provider filtered the reply.")
            }
            StopReason::Other(s) => info(
                ConvState::Idle,
                &format!("The model stopped with an unknown reason: {s}"),
            ),
        }
    };
    match append {
        Some(effect) => t.prepend(effect),
        None => t,
    }
}

fn info(state: ConvState, message: &str) -> Step {
    Step::new(state).with(Effect::Notify {
        notice: Notice::Info {
            message: message.to_string(),
        },
    })
}

fn assistant(
    ctx: &Inputs<'_>,
    content: Vec<ContentBlock>,
    stop: &StopReason,
    usage: crate::message::Usage,
) -> Message {
    Message {
        role: Role::Assistant,
        content,
        created_at_ms: ctx.now_ms,
        usage: Some(usage),
        stop_reason: Some(stop.clone()),
        interrupted: false,
        kind: MessageKind::Ordinary,
    }
}

/// The delay before attempt `attempt + 1`, or `None` when the failure must
/// not be retried after all (a `retry-after` longer than we wait).
pub(super) fn retry_delay(
    ctx: &Inputs<'_>,
    attempt: u32,
    failure: &LlmFailure,
    jitter_permille: u16,
) -> Option<u64> {
    if let Some(after) = failure.retry_after_ms {
        return (after <= ctx.max_retry_after_ms).then_some(after);
    }
    let exp = ctx
        .retry_base_ms
        .saturating_mul(1u64 << attempt.saturating_sub(1).min(20))
        .min(ctx.retry_max_ms);
    // "Equal jitter": half fixed, half random.
    let jitter = u64::from(jitter_permille.min(999));
    Some(exp / 2 + (exp / 2).saturating_mul(jitter) / 1000)
}

fn on_llm_failed(
    ctx: &Inputs<'_>,
    attempt: u32,
    iteration: u32,
    failure: LlmFailure,
    jitter_permille: u16,
) -> Step {
    if failure.retryable
        && attempt < ctx.max_attempts
        && let Some(delay_ms) = retry_delay(ctx, attempt, &failure, jitter_permille)
    {
        let next = attempt + 1;
        return Step::new(ConvState::LlmRequesting {
            attempt: next,
            iteration,
            retry: Some(RetryWait {
                delay_ms,
                reason: failure.message.clone(),
            }),
            early: EarlyCalls::default(),
        })
        .with(Effect::ScheduleRetry {
            attempt: next,
            delay_ms,
        })
        .with(Effect::Notify {
            notice: Notice::Retrying {
                attempt: next,
                max_attempts: ctx.max_attempts,
                delay_ms,
                reason: failure.message,
            },
        });
    }
    let message = if failure.retryable && attempt > 1 {
        format!("Failed after {attempt} attempts: {}", failure.message)
    } else {
        failure.message
    };
    fail(message, failure.kind)
}
