//! What people send: a message that starts a turn (with plan detection),
//! a continued conversation's first message, and the answer to a budget stop.

use super::{Inputs, Rejected, Step, begin_request, budget_not_raised};
use crate::effect::{Effect, Notice};
use crate::event::{PromptHooks, Sending};
use crate::image::ImageRef;
use crate::message::{ContentBlock, Message, MessageKind};
use crate::permission::Mode;
use crate::plan::PlanDetect;
use crate::state::ConvState;
use crate::texts;

/// A user message: it starts a turn when the conversation rests (once its
/// prompt hooks let it through), and while one runs it is queued if its
/// sender asked, else refused. Another message in its prompt hooks counts
/// as a running turn.
pub(super) fn on_user_message(
    state: &ConvState,
    ctx: &Inputs<'_>,
    text: String,
    images: Vec<ImageRef>,
    sending: Sending,
) -> Result<Step, Rejected> {
    if crate::message::says_nothing(&text, images.len()) {
        return Err(Rejected::EmptyMessage);
    }
    let busy = match state {
        ConvState::Idle | ConvState::Error { .. } | ConvState::BudgetStopped { .. }
            if sending.other_in_hooks =>
        {
            Rejected::Busy
        }
        ConvState::Idle | ConvState::Error { .. } | ConvState::BudgetStopped { .. } => {
            return Ok(match sending.hooks {
                PromptHooks::Due => Step::unchanged(state).with(Effect::RunPromptHooks),
                PromptHooks::Passed => start_turn(ctx, text, images, sending),
            });
        }
        ConvState::Cancelling { .. } => Rejected::CancellationInProgress,
        // The continuation the daemon is about to make takes the queue
        // with it: a message may wait for it.
        ConvState::ContextExhausted { .. } if ctx.conv.continuation.pending => {
            Rejected::ContextExhausted
        }
        ConvState::ContextExhausted { .. } => return Err(Rejected::ContextExhausted),
        ConvState::AwaitingLlm { .. }
        | ConvState::LlmRequesting { .. }
        | ConvState::StopHooks { .. }
        | ConvState::ToolExecuting(_)
        | ConvState::AwaitingSubAgents { .. }
        | ConvState::AwaitingContinuation { .. } => Rejected::Busy,
    };
    if sending.queue_if_busy {
        Ok(Step::unchanged(state).with(Effect::Enqueue))
    } else {
        Err(busy)
    }
}

/// A user message that starts a turn: with plan detection, the request
/// self-corrections count against, and the first model request.
fn start_turn(ctx: &Inputs<'_>, text: String, images: Vec<ImageRef>, sending: Sending) -> Step {
    let detected = detect_plan(ctx, &text);
    // The request this turn works on: self-corrections count
    // against it.
    let corrections = ctx.conv.corrections.starting(&text);
    // Images first, then the text about them (as Anthropic
    // advises); an image-only message has no text block.
    let mut content: Vec<ContentBlock> = images.into_iter().map(ContentBlock::Image).collect();
    if !text.trim().is_empty() {
        content.push(ContentBlock::text(text));
    }
    // The files it mentions, each in its own block after it.
    content.extend(crate::mention::blocks(&sending.mentions));
    let mut t = begin_request(ctx, 1).prepend(Effect::AppendMessage {
        message: Message::user(content, ctx.now_ms),
    });
    if let Some((mode, notice)) = detected {
        t.mode = mode;
        t.effects.insert(0, Effect::Notify { notice });
    }
    t.corrections = Some(corrections);
    t.thinking = Some(sending.thinking);
    t
}

/// What plan detection does with a user's `text` that starts a turn: the
/// mode to enter (`require`) and the notice clients show. `None`: detection
/// is off, the conversation already plans (or cannot change anything), or
/// the text does not deserve a plan.
fn detect_plan(ctx: &Inputs<'_>, text: &str) -> Option<(Option<Mode>, Notice)> {
    if ctx.plan_detect == PlanDetect::Off || matches!(ctx.policy.mode, Mode::Plan | Mode::ReadOnly)
    {
        return None;
    }
    let score = crate::plan::plan_score(text);
    if score.score < crate::plan::PLAN_THRESHOLD {
        return None;
    }
    match ctx.plan_detect {
        PlanDetect::Off => None,
        PlanDetect::Suggest => Some((
            None,
            Notice::PlanSuggested {
                score: score.score,
                cues: score.cues,
            },
        )),
        PlanDetect::Require => Some((
            Some(Mode::Plan),
            Notice::Info {
                message: format!(
                    "this request deserves a plan ({}): permission mode is now {}",
                    score.cues.join("; "),
                    Mode::Plan
                ),
            },
        )),
    }
}

/// The first message of a conversation that continues `parent_id`: the
/// parent's summary, then the messages that were queued there.
pub(super) fn on_continued_from(
    state: &ConvState,
    ctx: &Inputs<'_>,
    parent_id: &str,
    summary: &str,
    texts: Vec<String>,
    images: Vec<Vec<ImageRef>>,
) -> Option<Step> {
    let ConvState::Idle = state else {
        return None;
    };
    let mut content = vec![ContentBlock::text(texts::continued_from(
        parent_id, summary,
    ))];
    if texts.is_empty() {
        content.push(ContentBlock::text(texts::CONTINUE_THE_TASK));
    } else {
        let mut images = images.into_iter();
        for text in texts {
            if !text.is_empty() {
                content.push(ContentBlock::text(text));
            }
            content.extend(
                images
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(ContentBlock::Image),
            );
        }
    }
    let message = Message {
        kind: MessageKind::Continued,
        ..Message::user(content, ctx.now_ms)
    };
    Some(begin_request(ctx, 1).prepend(Effect::AppendMessage { message }))
}

/// A person's answer to a budget stop: raised, the held request goes out;
/// not raised, the turn ends in error.
pub(super) fn on_budget_answered(state: &ConvState, ctx: &Inputs<'_>, raise: bool) -> Option<Step> {
    match state {
        ConvState::BudgetStopped { iteration, .. } if raise => Some(begin_request(ctx, *iteration)),
        ConvState::BudgetStopped { stop, .. } => Some(budget_not_raised(stop)),
        _ => None,
    }
}
