//! A user's cancel: what each busy state stops, and the results and marker
//! that leave the transcript answerable.

use super::continuation::exhausted;
use super::{Inputs, Step, answer_all, budget_not_raised, interrupt_marker};
use crate::effect::Effect;
use crate::message::{ContentBlock, Message, MessageKind, Role};
use crate::permission::Decision;
use crate::state::ConvState;
use crate::texts;

/// A user cancels: the work in flight stops, and every tool call is
/// answered so the transcript stays valid.
pub(super) fn on_cancel(state: &ConvState, ctx: &Inputs<'_>) -> Step {
    match state {
        // Cancelling a turn held at a budget stops it there.
        ConvState::BudgetStopped { stop, .. } => budget_not_raised(stop),
        ConvState::Idle
        | ConvState::Error { .. }
        | ConvState::ContextExhausted { .. }
        | ConvState::Cancelling { .. } => Step::unchanged(state),
        ConvState::AwaitingLlm { .. } => Step::new(ConvState::Idle).with(interrupt_marker(ctx)),
        // The model had ended its turn: stopping the hooks ends it.
        ConvState::StopHooks { .. } => Step::new(ConvState::Idle).with(Effect::AbortHooks),
        ConvState::LlmRequesting { retry: Some(_), .. } => Step::new(ConvState::Idle)
            .with(Effect::CancelRetry)
            .with(interrupt_marker(ctx)),
        ConvState::LlmRequesting {
            iteration,
            retry: None,
            early,
            ..
        } => {
            let t = Step::new(ConvState::Cancelling {
                iteration: *iteration,
            })
            .with(Effect::AbortLlm);
            // The partial reply's calls are not kept: the early ones stop.
            match super::early::abort_running(early) {
                Some(abort) => t.with(abort),
                None => t,
            }
        }
        ConvState::ToolExecuting(run) => {
            let mut t = Step::new(ConvState::Idle);
            if !run.running.is_empty() {
                t = t.with(Effect::AbortTools {
                    tool_use_ids: run.running.clone(),
                });
            }
            if run.hooking.is_some() {
                t = t.with(Effect::AbortHooks);
            }
            if let Some(ask) = &run.permission {
                t = t.with(Effect::PermissionResolved {
                    ask: ask.clone(),
                    decision: Decision::Cancelled,
                    by: None,
                });
            }
            let suspended = run.permission.as_ref().map(|a| a.tool_use_id.as_str());
            let hooking = run.hooking.as_deref();
            let results = answer_all(run, |id| {
                if run.running.iter().any(|r| r == id)
                    || suspended == Some(id)
                    || hooking == Some(id)
                {
                    texts::CANCELLED_BY_USER
                } else {
                    texts::SKIPPED_DUE_TO_CANCELLATION
                }
            });
            t.with(Effect::AppendMessage {
                message: Message::user(results, ctx.now_ms),
            })
        }
        ConvState::AwaitingSubAgents {
            pending_ids,
            call_id,
            run,
            ..
        } => {
            // Cascade: every running child is cancelled; the spawn call
            // was running, the calls after it never started.
            let mut t = Step::new(ConvState::Idle);
            if !pending_ids.is_empty() {
                t = t.with(Effect::CancelSubAgents {
                    agent_ids: pending_ids.clone(),
                });
            }
            if run.calls.is_empty() {
                return t.with(interrupt_marker(ctx));
            }
            let results = answer_all(run, |id| {
                if id == call_id {
                    texts::CANCELLED_BY_USER
                } else {
                    texts::SKIPPED_DUE_TO_CANCELLATION
                }
            });
            t.with(Effect::AppendMessage {
                message: Message::user(results, ctx.now_ms),
            })
        }
        ConvState::AwaitingContinuation { trigger_usage, .. } => exhausted(
            ctx,
            texts::CONTINUATION_CANCELLED.to_string(),
            *trigger_usage,
        )
        .prepend(Effect::AbortLlm),
    }
}

/// Ends a cancelled model request: keeps the partial text, marked
/// interrupted, then the interrupt marker. Incomplete tool calls and
/// unsigned reasoning are dropped (they could not be answered or replayed).
pub(super) fn finish_cancel(ctx: &Inputs<'_>, partial: Vec<ContentBlock>) -> Step {
    let kept: Vec<ContentBlock> = partial
        .into_iter()
        .filter(|b| match b {
            ContentBlock::Text { text } => !text.is_empty(),
            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {
                crate::thinking::goes_back(b)
            }
            // A search cut short may lack its result, which the API
            // requires after its call.
            ContentBlock::ToolUse { .. }
            | ContentBlock::ToolResult { .. }
            | ContentBlock::ServerTool { .. }
            | ContentBlock::Image(_) => false,
        })
        .collect();
    let mut t = Step::new(ConvState::Idle);
    if kept.iter().any(|b| matches!(b, ContentBlock::Text { .. })) {
        t = t.with(Effect::AppendMessage {
            message: Message {
                role: Role::Assistant,
                content: kept,
                created_at_ms: ctx.now_ms,
                usage: None,
                stop_reason: None,
                interrupted: true,
                kind: MessageKind::Ordinary,
            },
        });
    }
    t.with(interrupt_marker(ctx))
}

/// The aborted model request of a cancel ended, with what it had streamed.
pub(super) fn on_aborted(
    state: &ConvState,
    ctx: &Inputs<'_>,
    partial: Vec<ContentBlock>,
) -> Option<Step> {
    match state {
        ConvState::Cancelling { .. } => Some(finish_cancel(ctx, partial)),
        _ => None,
    }
}
