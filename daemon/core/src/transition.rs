//! The transition function: `(state, context, event) -> (state, effects)`.
//!
//! Pure and deterministic: it reads nothing but its arguments. The seed's
//! transition matrix (bedrock-state-machine-design.md) is its specification,
//! REJECT rows included.

use crate::client::ClientInfo;
use crate::correction::{Assessment, Corrections};
use crate::effect::{Effect, LlmPurpose, Notice, SubAgentOutcome};
use crate::event::{Event, LlmFailure, RuleScope};
use crate::hooks::HookVerdict;
use crate::image::ImageRef;
use crate::message::{
    ContentBlock, Message, MessageKind, Reply, Role, StopReason, ToolCall, ToolResult,
};
use crate::permission::{Action, Decision, Mode, PermissionAsk, Verdict, suggest_rule};
use crate::plan::{Plan, PlanAnswer, PlanDetect, PlanEvent, PlanPhase, StepChange};
use crate::state::{
    ContextExhaustionBehavior, ConvContext, ConvState, ErrorKind, RetryWait, SubAgentResult,
    Submitted, ToolRun, should_trigger_continuation, should_warn,
};
use crate::texts;
use crate::tools::{Called, SpawnRequest, Tool, agent_id, synthesis_id};
use std::fmt;

/// The outcome of an accepted event.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The new state (persisted before the effects run).
    pub state: ConvState,
    /// The permission mode the conversation enters, when it changes. Part
    /// of what is persisted with the state, in the same commit, so a crash
    /// can never leave a transcript that says "upgraded" with the old mode.
    pub mode: Option<Mode>,
    /// What the runtime must do, in order.
    pub effects: Vec<Effect>,
    /// How many of the queued messages (`ConvContext::queued`, from the
    /// front) this transition delivered: the runtime removes them from the
    /// queue in the same commit that persists the state.
    pub delivered: usize,
    /// The self-correction tracking the conversation has now, when it
    /// changes: persisted in the same commit as the state.
    pub corrections: Option<Corrections>,
}

impl Transition {
    fn new(state: ConvState) -> Self {
        Transition {
            state,
            mode: None,
            effects: Vec::new(),
            delivered: 0,
            corrections: None,
        }
    }

    fn with(mut self, effect: Effect) -> Self {
        self.effects.push(effect);
        self
    }

    fn unchanged(state: &ConvState) -> Self {
        Transition::new(state.clone())
    }
}

/// Why an event was refused. The state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// A user message while a turn runs.
    Busy,
    /// A user message while a cancel completes.
    CancellationInProgress,
    /// A user message after the context is exhausted.
    ContextExhausted,
    /// A user message with no text.
    EmptyMessage,
    /// A permission answer when nothing is pending (e.g. a later answer).
    NoPendingPermission,
    /// A permission answer naming another request.
    UnknownPermissionRequest(String),
    /// A decision that this request does not offer.
    DecisionNotOffered(Decision),
    /// An event that does not apply to the state (e.g. a stale completion
    /// of work that was cancelled). The runtime ignores these.
    NotApplicable {
        state: &'static str,
        event: &'static str,
    },
    /// A plan answer that cannot be taken: the pending request is no plan,
    /// the mode is not one a plan continues in, or the edited steps are
    /// not a plan. Says why.
    InvalidPlanAnswer(String),
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Busy => f.write_str(texts::AGENT_IS_BUSY),
            Rejected::CancellationInProgress => f.write_str(texts::CANCELLATION_IN_PROGRESS),
            Rejected::ContextExhausted => f.write_str(texts::CONTEXT_EXHAUSTED),
            Rejected::EmptyMessage => f.write_str("message text is empty"),
            Rejected::NoPendingPermission => {
                f.write_str("no permission request is pending (it was already answered)")
            }
            Rejected::UnknownPermissionRequest(id) => {
                write!(f, "unknown permission request {id:?}")
            }
            Rejected::DecisionNotOffered(d) => {
                write!(f, "decision {d:?} is not offered for this request")
            }
            Rejected::NotApplicable { state, event } => {
                write!(f, "{event} does not apply in state {state}")
            }
            Rejected::InvalidPlanAnswer(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Rejected {}

/// Applies `event` to `state`.
pub fn transition(
    state: &ConvState,
    ctx: &ConvContext,
    event: Event,
) -> Result<Transition, Rejected> {
    let stops = matches!(
        event,
        Event::UserCancel
            | Event::DaemonStopping
            | Event::PermissionAnswered {
                decision: Decision::DenyAndStop,
                ..
            }
    );
    let cancelled = stops || matches!(state, ConvState::Cancelling { .. });
    let t = decide(state, ctx, event)?;
    let t = deliver_queued(state, ctx, stops, t);
    Ok(end_of_sub_agent(state, ctx, cancelled, t))
}

/// A sub-agent whose work ends reports how (REQ-BED-008/024): a failure
/// or a cancel at once; a turn that ended without `submit_result` is told
/// once to call it, and the second time its last text is the result.
/// `submit_result` itself reports where it is scheduled.
fn end_of_sub_agent(
    before: &ConvState,
    ctx: &ConvContext,
    cancelled: bool,
    mut t: Transition,
) -> Transition {
    let Some(role) = ctx.sub_agent else {
        return t;
    };
    if before.is_at_rest()
        || !t.state.is_at_rest()
        || t.effects
            .iter()
            .any(|e| matches!(e, Effect::FinishSubAgent { .. }))
    {
        return t;
    }
    let outcome = match &t.state {
        ConvState::Error { message, .. } => SubAgentOutcome::Failed {
            message: message.clone(),
        },
        ConvState::ContextExhausted { .. } => SubAgentOutcome::Failed {
            message: "Context window exhausted".to_string(),
        },
        _ if cancelled => SubAgentOutcome::Cancelled,
        _ if role.reminded => SubAgentOutcome::LastText,
        _ => {
            let next = next_round(ctx, before.iteration());
            if let ConvState::Error { message, .. } = &next.state {
                let message = message.clone();
                t.state = next.state;
                t.effects.extend(next.effects);
                SubAgentOutcome::Failed { message }
            } else {
                t.state = next.state;
                t.effects.push(Effect::AppendMessage {
                    message: Message::user(
                        vec![ContentBlock::text(texts::SUBMIT_RESULT_REMINDER)],
                        ctx.now_ms,
                    ),
                });
                t.effects.extend(next.effects);
                return t;
            }
        }
    };
    t.with(Effect::FinishSubAgent { outcome })
}

/// Queued user messages (sent "queue if busy" while a turn ran) join the
/// conversation at the first chance, all of them, in order, each as a text
/// block:
/// - at a model request boundary (a transition that appends a user message
///   and asks the model: tool results, a stop hook's reason), after what
///   that message already says; in a new turn, before the new message
///   (they were sent before it);
/// - when a turn ends normally (the state becomes Idle), as the user
///   message that starts the next turn.
///
/// After a cancel (or a deny-and-stop) or a failure they stay queued (the
/// user stopped the work, or it could not go on) and go with the next message sent; a
/// conversation whose context is exhausted never takes them.
fn deliver_queued(
    before: &ConvState,
    ctx: &ConvContext,
    stops: bool,
    mut t: Transition,
) -> Transition {
    if ctx.queued.is_empty() {
        return t;
    }
    let queued = || {
        ctx.queued.iter().enumerate().flat_map(|(i, text)| {
            let images = ctx.queued_images.get(i).map(Vec::as_slice).unwrap_or(&[]);
            std::iter::once(ContentBlock::text(text.clone()))
                .filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()))
                .chain(images.iter().cloned().map(ContentBlock::Image))
        })
    };
    let asks_model = t.effects.iter().position(|e| {
        matches!(
            e,
            Effect::RequestLlm {
                purpose: LlmPurpose::Turn,
                ..
            }
        )
    });
    if let Some(ask) = asks_model {
        // A retry asks again with the same transcript: not a boundary.
        let user_message = t.effects[..ask].iter_mut().rev().find_map(|e| match e {
            Effect::AppendMessage { message } if message.role == Role::User => Some(message),
            _ => None,
        });
        if let Some(message) = user_message {
            if matches!(before, ConvState::Idle | ConvState::Error { .. }) {
                // A new message after a cancel or a failure: the queued
                // ones were sent first, so they come first.
                let own = std::mem::take(&mut message.content);
                message.content = queued().chain(own).collect();
            } else {
                message.content.extend(queued());
            }
            t.delivered = ctx.queued.len();
        }
        return t;
    }
    let turn_ended = !matches!(before, ConvState::Idle | ConvState::Error { .. })
        && !matches!(before, ConvState::Cancelling { .. })
        && matches!(t.state, ConvState::Idle);
    if turn_ended && !stops {
        let next = begin_request(ctx, 1);
        t.state = next.state;
        t.effects.push(Effect::AppendMessage {
            message: Message::user(queued().collect(), ctx.now_ms),
        });
        t.effects.extend(next.effects);
        t.delivered = ctx.queued.len();
    }
    t
}

/// The transition function proper, before queued messages are delivered.
fn decide(state: &ConvState, ctx: &ConvContext, event: Event) -> Result<Transition, Rejected> {
    let not_applicable = |event: &Event| Rejected::NotApplicable {
        state: state.name(),
        event: event.name(),
    };
    match event {
        Event::UserMessage { text, images } => on_user_message(state, ctx, text, images),
        Event::UserCancel => Ok(on_cancel(state, ctx)),
        Event::LlmCompleted { reply } => match state {
            ConvState::LlmRequesting {
                iteration,
                retry: None,
                ..
            } => Ok(on_reply(ctx, *iteration, reply)),
            ConvState::Cancelling { .. } => Ok(finish_cancel(ctx, reply.content)),
            ConvState::AwaitingContinuation { trigger_usage, .. } => {
                let mut usage = *trigger_usage;
                usage.add(&reply.usage);
                Ok(exhausted(ctx, text_of(&reply.content), usage))
            }
            _ => Err(not_applicable(&Event::LlmCompleted { reply })),
        },
        Event::LlmFailed {
            failure,
            jitter_permille,
        } => match state {
            ConvState::LlmRequesting {
                attempt,
                iteration,
                retry: None,
            } => Ok(on_llm_failed(
                ctx,
                *attempt,
                *iteration,
                failure,
                jitter_permille,
            )),
            ConvState::Cancelling { .. } => Ok(finish_cancel(ctx, Vec::new())),
            ConvState::AwaitingContinuation {
                rejected_tool_calls,
                trigger_usage,
                attempt,
            } => {
                // A retry-after longer than we wait is not retried (as for
                // a turn's request), rather than retried at once.
                if failure.retryable
                    && *attempt < ctx.max_attempts
                    && let Some(delay_ms) = retry_delay(ctx, *attempt, &failure, jitter_permille)
                {
                    Ok(Transition::new(ConvState::AwaitingContinuation {
                        rejected_tool_calls: rejected_tool_calls.clone(),
                        trigger_usage: *trigger_usage,
                        attempt: attempt + 1,
                    })
                    .with(Effect::ScheduleRetry {
                        attempt: attempt + 1,
                        delay_ms,
                    }))
                } else {
                    Ok(exhausted(
                        ctx,
                        texts::CONTINUATION_FALLBACK.to_string(),
                        *trigger_usage,
                    ))
                }
            }
            _ => Err(not_applicable(&Event::LlmFailed {
                failure,
                jitter_permille,
            })),
        },
        Event::LlmAborted { partial } => match state {
            ConvState::Cancelling { .. } => Ok(finish_cancel(ctx, partial)),
            _ => Err(not_applicable(&Event::LlmAborted { partial })),
        },
        Event::RetryDue => match state {
            ConvState::LlmRequesting {
                attempt,
                iteration,
                retry: Some(_),
            } => Ok(Transition::new(ConvState::LlmRequesting {
                attempt: *attempt,
                iteration: *iteration,
                retry: None,
            })
            .with(Effect::RequestLlm {
                attempt: *attempt,
                purpose: LlmPurpose::Turn,
            })),
            ConvState::AwaitingContinuation {
                rejected_tool_calls,
                attempt,
                ..
            } => Ok(Transition::unchanged(state).with(Effect::RequestLlm {
                attempt: *attempt,
                purpose: continuation_purpose(rejected_tool_calls),
            })),
            _ => Err(not_applicable(&Event::RetryDue)),
        },
        Event::ToolCompleted { result } => match state {
            ConvState::ToolExecuting(run) if run.running.contains(&result.tool_use_id) => {
                let mut run = run.clone();
                run.running.retain(|id| *id != result.tool_use_id);
                run.results.push(result);
                if run.running.is_empty() {
                    Ok(schedule(ctx, run, Vec::new()))
                } else {
                    Ok(Transition::new(ConvState::ToolExecuting(run)))
                }
            }
            _ => Err(not_applicable(&Event::ToolCompleted { result })),
        },
        Event::PermissionAnswered {
            request_id,
            decision,
            feedback,
            scope,
            by,
        } => match state {
            ConvState::ToolExecuting(run) => on_permission_answer(
                ctx,
                run,
                Answer {
                    request_id: &request_id,
                    decision,
                    feedback,
                    scope,
                    by,
                },
            ),
            _ => Err(Rejected::NoPendingPermission),
        },
        Event::PreToolHooksDecided {
            tool_use_id,
            verdict,
            new_input,
        } => match state {
            ConvState::ToolExecuting(run)
                if run.hooking.as_deref() == Some(tool_use_id.as_str()) =>
            {
                let mut run = run.clone();
                run.hooking = None;
                if let Some(input) = new_input
                    && let Some(call) = run.calls.iter_mut().find(|c| c.id == tool_use_id)
                {
                    call.input = input;
                }
                run.hook_verdicts.push((tool_use_id, verdict));
                Ok(schedule(ctx, run, Vec::new()))
            }
            _ => Err(not_applicable(&Event::PreToolHooksDecided {
                tool_use_id,
                verdict,
                new_input,
            })),
        },
        Event::StopHooksDecided { continue_with } => match state {
            ConvState::StopHooks { iteration } => {
                let reason = continue_with.as_deref().map(str::trim).unwrap_or("");
                if reason.is_empty() {
                    Ok(Transition::new(ConvState::Idle))
                } else if *iteration >= ctx.max_iterations {
                    Ok(next_round(ctx, *iteration))
                } else {
                    Ok(next_round(ctx, *iteration).prepend(Effect::AppendMessage {
                        message: Message::user(
                            vec![ContentBlock::text(texts::stop_hook_message(reason))],
                            ctx.now_ms,
                        ),
                    }))
                }
            }
            _ => Err(not_applicable(&Event::StopHooksDecided { continue_with })),
        },
        Event::SubAgentFinished { result } => match state {
            ConvState::AwaitingSubAgents {
                pending_ids,
                completed,
                agents,
                call_id,
                run,
            } if pending_ids.contains(&result.agent_id) => {
                let mut pending_ids = pending_ids.clone();
                pending_ids.retain(|id| *id != result.agent_id);
                let mut completed = completed.clone();
                completed.push(result);
                if !pending_ids.is_empty() {
                    return Ok(Transition::new(ConvState::AwaitingSubAgents {
                        pending_ids,
                        completed,
                        agents: agents.clone(),
                        call_id: call_id.clone(),
                        run: run.clone(),
                    }));
                }
                Ok(sub_agents_done(
                    ctx,
                    (**run).clone(),
                    call_id,
                    agents,
                    &completed,
                ))
            }
            _ => Err(not_applicable(&Event::SubAgentFinished { result })),
        },
        Event::ContinuationCompleted { summary, usage } => match state {
            ConvState::AwaitingContinuation { trigger_usage, .. } => {
                let mut total = *trigger_usage;
                total.add(&usage);
                Ok(exhausted(ctx, summary, total))
            }
            _ => Err(not_applicable(&Event::ContinuationCompleted {
                summary,
                usage,
            })),
        },
        Event::ContinuationFailed { error } => match state {
            ConvState::AwaitingContinuation { trigger_usage, .. } => Ok(exhausted(
                ctx,
                texts::CONTINUATION_FALLBACK.to_string(),
                *trigger_usage,
            )),
            _ => Err(not_applicable(&Event::ContinuationFailed { error })),
        },
        Event::UserTriggerContinuation => match state {
            // REQ-BED-023: from Idle, starting from the last reply's usage.
            ConvState::Idle => Ok(Transition::new(ConvState::AwaitingContinuation {
                rejected_tool_calls: Vec::new(),
                trigger_usage: ctx.last_usage,
                attempt: 1,
            })
            .with(continuation_started(&[], true))
            .with(Effect::RequestLlm {
                attempt: 1,
                purpose: continuation_purpose(&[]),
            })),
            ConvState::Cancelling { .. } => Err(Rejected::CancellationInProgress),
            ConvState::ContextExhausted { .. } => Err(Rejected::ContextExhausted),
            ConvState::AwaitingLlm { .. }
            | ConvState::LlmRequesting { .. }
            | ConvState::StopHooks { .. }
            | ConvState::ToolExecuting(_)
            | ConvState::AwaitingSubAgents { .. }
            | ConvState::AwaitingContinuation { .. } => Err(Rejected::Busy),
            ConvState::Error { .. } | ConvState::BudgetStopped { .. } => {
                Err(not_applicable(&Event::UserTriggerContinuation))
            }
        },
        Event::ContinuedFrom {
            parent_id,
            summary,
            texts,
            images,
        } => match state {
            ConvState::Idle => {
                let mut content = vec![ContentBlock::text(texts::continued_from(
                    &parent_id, &summary,
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
                Ok(begin_request(ctx, 1).prepend(Effect::AppendMessage { message }))
            }
            _ => Err(not_applicable(&Event::ContinuedFrom {
                parent_id,
                summary,
                texts,
                images,
            })),
        },
        Event::BudgetAnswered { raise } => match state {
            ConvState::BudgetStopped { iteration, .. } if raise => {
                Ok(begin_request(ctx, *iteration))
            }
            ConvState::BudgetStopped { stop, .. } => Ok(budget_not_raised(stop)),
            _ => Err(not_applicable(&Event::BudgetAnswered { raise })),
        },
        Event::DaemonRestarted => Ok(on_restart(state, ctx)),
        Event::DaemonStopping => Ok(on_stop(state, ctx)),
        Event::PlanAnswered {
            request_id,
            answer,
            by,
        } => match state {
            ConvState::ToolExecuting(run) => on_plan_answer(ctx, run, &request_id, answer, by),
            _ => Err(Rejected::NoPendingPermission),
        },
    }
}

impl Transition {
    fn prepend(mut self, effect: Effect) -> Self {
        self.effects.insert(0, effect);
        self
    }
}

fn on_user_message(
    state: &ConvState,
    ctx: &ConvContext,
    text: String,
    images: Vec<ImageRef>,
) -> Result<Transition, Rejected> {
    if text.trim().is_empty() && images.is_empty() {
        return Err(Rejected::EmptyMessage);
    }
    match state {
        ConvState::Idle | ConvState::Error { .. } | ConvState::BudgetStopped { .. } => {
            let detected = detect_plan(ctx, &text);
            // The request this turn works on: self-corrections count
            // against it.
            let corrections = ctx.corrections.starting(&text);
            // Images first, then the text about them (as Anthropic
            // advises); an image-only message has no text block.
            let mut content: Vec<ContentBlock> =
                images.into_iter().map(ContentBlock::Image).collect();
            if !text.trim().is_empty() {
                content.push(ContentBlock::text(text));
            }
            let mut t = begin_request(ctx, 1).prepend(Effect::AppendMessage {
                message: Message::user(content, ctx.now_ms),
            });
            if let Some((mode, notice)) = detected {
                t.mode = mode;
                t.effects.insert(0, Effect::Notify { notice });
            }
            t.corrections = Some(corrections);
            Ok(t)
        }
        ConvState::Cancelling { .. } => Err(Rejected::CancellationInProgress),
        ConvState::ContextExhausted { .. } => Err(Rejected::ContextExhausted),
        ConvState::AwaitingLlm { .. }
        | ConvState::LlmRequesting { .. }
        | ConvState::StopHooks { .. }
        | ConvState::ToolExecuting(_)
        | ConvState::AwaitingSubAgents { .. }
        | ConvState::AwaitingContinuation { .. } => Err(Rejected::Busy),
    }
}

/// The first attempt of model round `iteration`: a request boundary, where
/// the budgets are checked. A reached budget holds the request back until
/// someone raises it (REQ: issue 15 point 5).
fn begin_request(ctx: &ConvContext, iteration: u32) -> Transition {
    if let Some(stop) = crate::budget::check(&ctx.budget) {
        return Transition::new(ConvState::BudgetStopped { iteration, stop }).with(
            Effect::Notify {
                notice: Notice::BudgetStopped { stop },
            },
        );
    }
    Transition::new(ConvState::LlmRequesting {
        attempt: 1,
        iteration,
        retry: None,
    })
    .with(Effect::RequestLlm {
        attempt: 1,
        purpose: LlmPurpose::Turn,
    })
}

/// The round after `iteration`, unless the iteration guard stops the turn.
fn next_round(ctx: &ConvContext, iteration: u32) -> Transition {
    if iteration >= ctx.max_iterations {
        return fail(texts::ERR_MAX_ITERATIONS.to_string(), ErrorKind::Unknown);
    }
    begin_request(ctx, iteration + 1)
}

/// A turn held at `stop` ends there, in error.
fn budget_not_raised(stop: &crate::budget::BudgetStop) -> Transition {
    fail(texts::budget_not_raised(stop), ErrorKind::Budget)
}

fn fail(message: String, kind: ErrorKind) -> Transition {
    Transition::new(ConvState::Error {
        message: message.clone(),
        kind,
    })
    .with(Effect::Notify {
        notice: Notice::Error { message, kind },
    })
}

fn interrupt_marker(ctx: &ConvContext) -> Effect {
    Effect::AppendMessage {
        message: Message::user(vec![ContentBlock::text(texts::INTERRUPT_USER)], ctx.now_ms),
    }
}

fn on_cancel(state: &ConvState, ctx: &ConvContext) -> Transition {
    match state {
        // Cancelling a turn held at a budget stops it there.
        ConvState::BudgetStopped { stop, .. } => budget_not_raised(stop),
        ConvState::Idle
        | ConvState::Error { .. }
        | ConvState::ContextExhausted { .. }
        | ConvState::Cancelling { .. } => Transition::unchanged(state),
        ConvState::AwaitingLlm { .. } => {
            Transition::new(ConvState::Idle).with(interrupt_marker(ctx))
        }
        // The model had ended its turn: stopping the hooks ends it.
        ConvState::StopHooks { .. } => Transition::new(ConvState::Idle).with(Effect::AbortHooks),
        ConvState::LlmRequesting { retry: Some(_), .. } => Transition::new(ConvState::Idle)
            .with(Effect::CancelRetry)
            .with(interrupt_marker(ctx)),
        ConvState::LlmRequesting {
            iteration,
            retry: None,
            ..
        } => Transition::new(ConvState::Cancelling {
            iteration: *iteration,
        })
        .with(Effect::AbortLlm),
        ConvState::ToolExecuting(run) => {
            let mut t = Transition::new(ConvState::Idle);
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
                    request_id: ask.request_id.clone(),
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
            let mut t = Transition::new(ConvState::Idle);
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

/// Result blocks for every call of `run` in the model's order: the recorded
/// result where there is one, else an error with the text `unfinished` gives.
fn answer_all<'a>(run: &'a ToolRun, unfinished: impl Fn(&str) -> &'a str) -> Vec<ContentBlock> {
    run.calls
        .iter()
        .map(
            |call| match run.results.iter().find(|r| r.tool_use_id == call.id) {
                Some(r) => r.to_block(),
                None => ContentBlock::tool_result(&call.id, unfinished(&call.id), true),
            },
        )
        .collect()
}

/// Ends a cancelled model request: keeps the partial text, marked
/// interrupted, then the interrupt marker. Incomplete tool calls and
/// unsigned reasoning are dropped (they could not be answered or replayed).
fn finish_cancel(ctx: &ConvContext, partial: Vec<ContentBlock>) -> Transition {
    let kept: Vec<ContentBlock> = partial
        .into_iter()
        .filter(|b| match b {
            ContentBlock::Text { text } => !text.is_empty(),
            ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
            ContentBlock::RedactedThinking { .. } => true,
            ContentBlock::ToolUse { .. }
            | ContentBlock::ToolResult { .. }
            | ContentBlock::Image(_) => false,
        })
        .collect();
    let mut t = Transition::new(ConvState::Idle);
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

fn on_reply(ctx: &ConvContext, iteration: u32, mut reply: Reply) -> Transition {
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
    let t = on_reply_usage_checked(ctx, iteration, reply, calls);
    match warning {
        Some(effect) => t.with(effect),
        None => t,
    }
}

fn on_reply_usage_checked(
    ctx: &ConvContext,
    iteration: u32,
    reply: Reply,
    calls: Vec<ToolCall>,
) -> Transition {
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
                Transition::new(ConvState::AwaitingContinuation {
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
        schedule(ctx, run, Vec::new())
    } else {
        match &reply.stop_reason {
            StopReason::PauseTurn => next_round(ctx, iteration),
            StopReason::EndTurn | StopReason::StopSequence if ctx.hooks.stop_due() => {
                Transition::new(ConvState::StopHooks { iteration }).with(Effect::RunStopHooks)
            }
            StopReason::EndTurn | StopReason::StopSequence => Transition::new(ConvState::Idle),
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

fn info(state: ConvState, message: &str) -> Transition {
    Transition::new(state).with(Effect::Notify {
        notice: Notice::Info {
            message: message.to_string(),
        },
    })
}

fn assistant(
    ctx: &ConvContext,
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

fn text_of(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            out.push_str(text);
        }
    }
    out
}

fn continuation_purpose(rejected: &[ToolCall]) -> LlmPurpose {
    let names: Vec<String> = rejected.iter().map(|c| c.name.clone()).collect();
    LlmPurpose::Continuation {
        prompt: texts::continuation_prompt(&names),
    }
}

/// Tells clients a continuation summary is requested, naming the tool
/// calls that were rejected.
fn continuation_started(rejected: &[ToolCall], manual: bool) -> Effect {
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
fn exhausted(ctx: &ConvContext, summary: String, final_usage: crate::message::Usage) -> Transition {
    Transition::new(ConvState::ContextExhausted {
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

/// The delay before attempt `attempt + 1`, or `None` when the failure must
/// not be retried after all (a `retry-after` longer than we wait).
fn retry_delay(
    ctx: &ConvContext,
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
    ctx: &ConvContext,
    attempt: u32,
    iteration: u32,
    failure: LlmFailure,
    jitter_permille: u16,
) -> Transition {
    if failure.retryable
        && attempt < ctx.max_attempts
        && let Some(delay_ms) = retry_delay(ctx, attempt, &failure, jitter_permille)
    {
        let next = attempt + 1;
        return Transition::new(ConvState::LlmRequesting {
            attempt: next,
            iteration,
            retry: Some(RetryWait {
                delay_ms,
                reason: failure.message.clone(),
            }),
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

/// Starts whatever can run now. Called when nothing of `run` is running.
///
/// A run of consecutive read-only calls starts together; a mutating call
/// starts alone; a call that needs permission suspends the run (nothing else
/// runs meanwhile). When every call has a result, the results go back to the
/// model as one user message.
fn schedule(ctx: &ConvContext, mut run: ToolRun, mut effects: Vec<Effect>) -> Transition {
    // The plan as the calls answered so far leave it.
    let mut plan = ctx.plan.clone();
    if run.stop_with_feedback.is_none() && run.submitted.is_none() {
        for id in run.pending_ids() {
            let Some(call) = run.calls.iter().find(|c| c.id == id).cloned() else {
                continue;
            };
            // The plan tools are answered here, in the model's order, once
            // nothing runs: they are about the work around them.
            let plan_tool = Tool::from_name(&call.name)
                .filter(|t| matches!(t, Tool::ProposePlan | Tool::UpdatePlan));
            if plan_tool.is_some() && !run.running.is_empty() {
                break;
            }
            if plan_tool == Some(Tool::UpdatePlan) {
                let (result, changed) = update_plan(plan.as_ref(), &call);
                run.results.push(result);
                if let Some((next, events)) = changed {
                    effects.extend(events);
                    plan = Some(next);
                }
                continue;
            }
            if plan_tool == Some(Tool::ProposePlan) {
                match Plan::from_input(&call.input, &call.id) {
                    Err(e) => {
                        run.results.push(ToolResult::new(
                            &call.id,
                            texts::plan_invalid(&e.0),
                            true,
                        ));
                        continue;
                    }
                    Ok(proposed) => {
                        let ask = PermissionAsk {
                            request_id: format!("plan-{}", call.id),
                            tool_use_id: call.id.clone(),
                            tool_name: call.name.clone(),
                            input: call.input.clone(),
                            reason: texts::PLAN_APPROVAL_REASON.to_string(),
                            options: vec![
                                Decision::ApprovePlan,
                                Decision::RejectPlan,
                                Decision::EditPlan,
                            ],
                            suggested_rule: String::new(),
                        };
                        effects.push(Effect::PlanChanged {
                            plan: proposed,
                            change: PlanEvent::Generated,
                        });
                        effects.push(Effect::AskPermission { ask: ask.clone() });
                        run.permission = Some(ask);
                        return Transition {
                            state: ConvState::ToolExecuting(run),
                            mode: None,
                            effects,
                            delivered: 0,
                            corrections: None,
                        };
                    }
                }
            }
            let read_only = ctx.policy.is_read_only(&call.name);
            if !run.running.is_empty() && !read_only {
                break;
            }
            let Some(verdict) = verdict(ctx, &run, &call) else {
                // The call's pre_tool_use hooks decide next; like a
                // permission request, they wait until nothing runs.
                if !run.running.is_empty() {
                    break;
                }
                effects.push(Effect::RunPreToolHooks { call: call.clone() });
                run.hooking = Some(call.id.clone());
                return Transition {
                    state: ConvState::ToolExecuting(run),
                    mode: None,
                    effects,
                    delivered: 0,
                    corrections: None,
                };
            };
            match verdict {
                Verdict::Deny(reason) => {
                    run.results.push(ToolResult::new(&call.id, reason, true));
                }
                Verdict::Ask(reason) => {
                    if !run.running.is_empty() {
                        break;
                    }
                    let ask = ask_for(ctx, &call, reason);
                    effects.push(Effect::AskPermission { ask: ask.clone() });
                    run.permission = Some(ask);
                    return Transition {
                        state: ConvState::ToolExecuting(run),
                        mode: None,
                        effects,
                        delivered: 0,
                        corrections: None,
                    };
                }
                Verdict::Allow if Tool::from_name(&call.name) == Some(Tool::SpawnAgents) => {
                    // Not read-only: nothing else runs now.
                    match SpawnRequest::parse(&call.input) {
                        Ok(request) => return spawn(run, &call, &request, effects),
                        Err(e) => run.results.push(ToolResult::new(&call.id, e, true)),
                    }
                }
                Verdict::Allow if Tool::from_name(&call.name) == Some(Tool::SubmitResult) => {
                    match submitted(&call.input) {
                        Ok(s) => {
                            run.results.push(ToolResult::new(
                                &call.id,
                                texts::RESULT_SUBMITTED,
                                false,
                            ));
                            run.submitted = Some(s);
                            break;
                        }
                        Err(e) => run.results.push(ToolResult::new(&call.id, e, true)),
                    }
                }
                Verdict::Allow => {
                    run.running.push(call.id.clone());
                    effects.push(Effect::ExecuteTool {
                        call,
                        background: false,
                    });
                    if !read_only {
                        break;
                    }
                }
            }
        }
        if !run.running.is_empty() {
            return Transition {
                state: ConvState::ToolExecuting(run),
                mode: None,
                effects,
                delivered: 0,
                corrections: None,
            };
        }
    }
    // Everything answered (or the rest is skipped after a deny-and-stop
    // or a submitted result).
    if let Some(Submitted { result, success }) = run.submitted.take() {
        let results = answer_all(&run, |_| texts::SKIPPED_AFTER_SUBMIT);
        effects.push(Effect::AppendMessage {
            message: Message::user(results, ctx.now_ms),
        });
        effects.push(Effect::FinishSubAgent {
            outcome: SubAgentOutcome::Submitted { result, success },
        });
        return Transition {
            state: ConvState::Idle,
            mode: None,
            effects,
            delivered: 0,
            corrections: None,
        };
    }
    let results = answer_all(&run, |_| texts::SKIPPED_AFTER_INTERRUPT);
    let mut t = match run.stop_with_feedback.take() {
        None => return corrected(ctx, &run, results, effects),
        Some(feedback) if feedback.trim().is_empty() => Transition::new(ConvState::Idle),
        Some(feedback) => {
            // The feedback rides in the same user message as the results.
            let mut blocks = results;
            blocks.push(ContentBlock::text(feedback));
            let mut t = begin_request(ctx, 1).prepend(Effect::AppendMessage {
                message: Message::user(blocks, ctx.now_ms),
            });
            effects.append(&mut t.effects);
            t.effects = effects;
            return t;
        }
    };
    effects.push(Effect::AppendMessage {
        message: Message::user(results, ctx.now_ms),
    });
    effects.append(&mut t.effects);
    t.effects = effects;
    t
}

/// The results of a finished run go back to the model, judged for
/// self-correction (`correction::assess`): the first `SELF_CORRECT_ATTEMPT`
/// failure within the limit adds the seed's re-engagement prompt to the
/// results message; one after the last attempt ends the turn, saying so to
/// the model and to people; a fallback tool's success closes the chain.
fn corrected(
    ctx: &ConvContext,
    run: &ToolRun,
    mut blocks: Vec<ContentBlock>,
    mut effects: Vec<Effect>,
) -> Transition {
    let assessment =
        crate::correction::assess(&ctx.corrections, &run.calls, &run.results, ctx.now_ms);
    let (notice, corrections, mut t) = match assessment {
        Assessment::None => (None, None, next_round(ctx, run.iteration)),
        Assessment::Succeeded {
            attempts,
            tool,
            corrections,
        } => (
            Some(Notice::CorrectionSucceeded { attempts, tool }),
            Some(corrections),
            next_round(ctx, run.iteration),
        ),
        Assessment::Attempt {
            attempt,
            max_attempts,
            signal,
            corrections,
        } => {
            blocks.push(ContentBlock::text(texts::reengagement_prompt(
                &signal.fallback_request,
            )));
            (
                Some(Notice::CorrectionAttempt {
                    attempt,
                    max_attempts,
                    tool: signal.original_tool,
                    error: signal.original_error,
                    fallback_request: signal.fallback_request,
                    fallback_tools: signal.fallback_tools,
                }),
                Some(corrections),
                next_round(ctx, run.iteration),
            )
        }
        Assessment::Exhausted {
            attempts,
            signal,
            corrections,
        } => {
            let message =
                texts::correction_failed(attempts, &signal.original_tool, &signal.original_error);
            blocks.push(ContentBlock::text(message.clone()));
            (
                Some(Notice::CorrectionFailed {
                    attempts,
                    tool: signal.original_tool,
                    error: signal.original_error,
                    message: message.clone(),
                }),
                Some(corrections),
                fail(message, ErrorKind::Unknown),
            )
        }
    };
    effects.push(Effect::AppendMessage {
        message: Message::user(blocks, ctx.now_ms),
    });
    if let Some(notice) = notice {
        effects.push(Effect::Notify { notice });
    }
    effects.append(&mut t.effects);
    t.effects = effects;
    t.corrections = corrections;
    t
}

/// The verdict on `call`, in the permission order: deny rules (and a
/// restricted mode's refusal, and a doom-loop `deny`) → the pre_tool_use
/// hooks → the mode's defaults, ask and allow rules (and a doom-loop
/// `ask`). `None`: hooks match the call and have not answered yet.
fn verdict(ctx: &ConvContext, run: &ToolRun, call: &ToolCall) -> Option<Verdict> {
    let tool = Tool::from_name(&call.name);
    let sub_agent = ctx.sub_agent.is_some();
    match tool {
        Some(Tool::SpawnAgents) if sub_agent => {
            return Some(Verdict::Deny(texts::NO_NESTING.to_string()));
        }
        Some(Tool::SubmitResult) if !sub_agent => {
            return Some(Verdict::Deny(texts::SUBMIT_ONLY_IN_SUB_AGENTS.to_string()));
        }
        Some(Tool::RequestModeUpgrade) if sub_agent => {
            return Some(Verdict::Deny(texts::NO_UPGRADE_IN_SUB_AGENTS.to_string()));
        }
        // The children get the parent's mode and rules, never wider, and
        // submitting a result changes nothing outside the daemon.
        Some(Tool::SpawnAgents | Tool::SubmitResult) => return Some(Verdict::Allow),
        _ => {}
    }
    if tool == Some(Tool::RequestModeUpgrade)
        && !matches!(ctx.policy.mode, Mode::ReadOnly | Mode::Plan)
    {
        return Some(Verdict::Deny(texts::ALREADY_UNRESTRICTED.to_string()));
    }
    if !call.input.is_object() || Called::of(&call.name) == Called::Unknown {
        // Malformed input (the model's JSON did not parse) or an unknown
        // tool cannot run: the tool layer answers with an error saying what
        // was wrong, which is more use to everyone than a prompt about it.
        // An MCP tool's name is known: the policy judges it.
        return Some(Verdict::Allow);
    }
    let base = ctx.policy.evaluate(call);
    if matches!(base, Verdict::Deny(_)) {
        return Some(base);
    }
    let doom = doom_loop(ctx, run, call);
    if let Some(Verdict::Deny(_)) = doom {
        return doom;
    }
    if tool != Some(Tool::RequestModeUpgrade) {
        let hooked = run
            .hook_verdicts
            .iter()
            .find(|(id, _)| *id == call.id)
            .map(|(_, v)| v);
        match hooked {
            Some(HookVerdict::Deny(reason)) => {
                return Some(Verdict::Deny(texts::hook_denied(&call.name, reason)));
            }
            Some(HookVerdict::Ask(reason)) => {
                let reason = if reason.trim().is_empty() {
                    "a pre_tool_use hook asks".to_string()
                } else {
                    format!("a pre_tool_use hook asks: {}", reason.trim())
                };
                return Some(Verdict::Ask(reason));
            }
            Some(HookVerdict::Allow) => return Some(Verdict::Allow),
            Some(HookVerdict::None) => {}
            None if ctx.hooks.pre_tool_use_matches(&ctx.policy, call) => return None,
            None => {}
        }
    }
    Some(doom.unwrap_or(base))
}

/// The doom-loop check: the same call with identical input too many times
/// in a row. The setting (config `doom_loop = allow|ask|deny`): allow turns
/// the check off; ask and deny act on a loop found.
fn doom_loop(ctx: &ConvContext, run: &ToolRun, call: &ToolCall) -> Option<Verdict> {
    let threshold = ctx.doom_loop_threshold;
    if threshold < 2 || ctx.policy.doom_loop == Action::Allow {
        return None;
    }
    let earlier: Vec<&ToolCall> = ctx
        .recent_calls
        .iter()
        .chain(run.calls.iter().take_while(|c| c.id != call.id))
        .collect();
    let repeats = earlier
        .iter()
        .rev()
        .take_while(|c| c.name == call.name && c.input == call.input)
        .count();
    if repeats + 1 < threshold {
        return None;
    }
    let reason = format!(
        "doom loop: {} was called with identical input {} times in a row",
        call.name,
        repeats + 1
    );
    Some(match ctx.policy.doom_loop {
        Action::Deny => Verdict::Deny(reason),
        Action::Ask | Action::Allow => Verdict::Ask(reason),
    })
}

/// Whether bash requests offer "run it in the background".
const OFFER_BACKGROUND: bool = true;

fn ask_for(ctx: &ConvContext, call: &ToolCall, reason: String) -> PermissionAsk {
    // "Always" and "never" add a rule; without a narrow one to add (a bash
    // call whose command cannot be read, a write without a path) they are
    // not offered, rather than allowing or denying the whole tool.
    let rule = suggest_rule(call, &ctx.policy.cwd);
    let mut options = vec![Decision::AllowOnce];
    if rule.is_some() {
        options.push(Decision::AllowAlways);
    }
    options.extend([Decision::Deny, Decision::DenyAndStop]);
    if rule.is_some() {
        options.push(Decision::Never);
    }
    let tool = Tool::from_name(&call.name);
    if OFFER_BACKGROUND && tool == Some(Tool::Bash) {
        options.push(Decision::Background);
    }
    if reason.starts_with("doom loop") || tool == Some(Tool::RequestModeUpgrade) {
        options.retain(|d| {
            matches!(
                d,
                Decision::AllowOnce | Decision::Deny | Decision::DenyAndStop
            )
        });
    }
    PermissionAsk {
        request_id: format!("perm-{}", call.id),
        tool_use_id: call.id.clone(),
        tool_name: call.name.clone(),
        input: call.input.clone(),
        reason,
        options,
        suggested_rule: rule.map_or_else(|| call.name.clone(), |r| r.to_string()),
    }
}

/// A client's answer to the pending permission request.
struct Answer<'a> {
    request_id: &'a str,
    decision: Decision,
    feedback: Option<String>,
    scope: RuleScope,
    by: Option<ClientInfo>,
}

fn on_permission_answer(
    ctx: &ConvContext,
    run: &ToolRun,
    answer: Answer<'_>,
) -> Result<Transition, Rejected> {
    let Answer {
        request_id,
        decision,
        feedback,
        scope,
        by,
    } = answer;
    let Some(ask) = &run.permission else {
        return Err(Rejected::NoPendingPermission);
    };
    if !request_id.is_empty() && ask.request_id != request_id {
        return Err(Rejected::UnknownPermissionRequest(request_id.to_string()));
    }
    if !ask.options.contains(&decision) {
        return Err(Rejected::DecisionNotOffered(decision));
    }
    let mut run = run.clone();
    run.permission = None;
    let resolved = Effect::PermissionResolved {
        request_id: ask.request_id.clone(),
        decision,
        by,
    };
    let Some(call) = run.calls.iter().find(|c| c.id == ask.tool_use_id).cloned() else {
        return Err(Rejected::UnknownPermissionRequest(ask.request_id.clone()));
    };
    if Tool::from_name(&call.name) == Some(Tool::RequestModeUpgrade)
        && matches!(decision, Decision::AllowOnce | Decision::AllowAlways)
    {
        // Nothing to run: the approval is the upgrade. Later calls of the
        // same reply are judged in the new mode, and the new mode is
        // persisted with the result that says so.
        run.results
            .push(ToolResult::new(&call.id, texts::MODE_UPGRADED, false));
        let mut upgraded = ctx.clone();
        upgraded.policy.mode = Mode::Default;
        let effects = vec![
            resolved,
            Effect::Notify {
                notice: Notice::Info {
                    message: format!("permission mode is now {}", Mode::Default),
                },
            },
        ];
        let mut t = schedule(&upgraded, run, effects);
        t.mode = Some(Mode::Default);
        return Ok(t);
    }
    let add_rule = |action: Action| {
        suggest_rule(&call, &ctx.policy.cwd).map(|mut rule| {
            rule.action = action;
            Effect::AddRule { rule, scope }
        })
    };
    match decision {
        Decision::AllowOnce | Decision::AllowAlways | Decision::Background => {
            let rule = if decision == Decision::AllowAlways {
                add_rule(Action::Allow)
            } else {
                None
            };
            run.running.push(call.id.clone());
            let mut t = Transition::new(ConvState::ToolExecuting(run)).with(resolved);
            if let Some(effect) = rule {
                t = t.with(effect);
            }
            Ok(t.with(Effect::ExecuteTool {
                call,
                background: decision == Decision::Background,
            }))
        }
        Decision::Deny => {
            run.results.push(ToolResult::new(
                &call.id,
                texts::permission_denied(&call.name),
                true,
            ));
            Ok(schedule(ctx, run, vec![resolved]))
        }
        Decision::Never => {
            run.results.push(ToolResult::new(
                &call.id,
                texts::permission_denied_permanently(&call.name),
                true,
            ));
            let mut effects = vec![resolved];
            effects.extend(add_rule(Action::Deny));
            Ok(schedule(ctx, run, effects))
        }
        Decision::DenyAndStop => {
            run.results.push(ToolResult::new(
                &call.id,
                format!(
                    "{}\n\n{}",
                    texts::INTERRUPT_TOOL,
                    texts::INTERRUPT_EXPLANATION
                ),
                true,
            ));
            run.stop_with_feedback = Some(feedback.unwrap_or_default());
            Ok(schedule(ctx, run, vec![resolved]))
        }
        // Plan decisions come as `Event::PlanAnswered`, and a plan
        // request offers no other: neither reaches here.
        Decision::Cancelled | Decision::ApprovePlan | Decision::RejectPlan | Decision::EditPlan => {
            Err(Rejected::DecisionNotOffered(decision))
        }
    }
}

/// A clean stop: tools that run now are terminated and recorded as
/// interrupted, unstarted ones as skipped, and the model request that
/// follows is left due (`AwaitingLlm`) for the next start to issue. A
/// pending permission request and a model request in flight are simply
/// kept: the next start asks / requests again.
fn on_stop(state: &ConvState, ctx: &ConvContext) -> Transition {
    match state {
        // The model had ended its turn; the stop hooks are stopped with
        // the daemon, and the turn ends.
        ConvState::StopHooks { .. } => Transition::new(ConvState::Idle).with(Effect::AbortHooks),
        ConvState::ToolExecuting(run) if run.permission.is_none() => {
            let results = answer_all(run, |id| {
                if run.running.iter().any(|r| r == id) {
                    texts::STOPPED_WHILE_RUNNING
                } else {
                    texts::SKIPPED_DUE_TO_STOP
                }
            });
            let next = if run.iteration >= ctx.max_iterations {
                ConvState::Error {
                    message: texts::ERR_MAX_ITERATIONS.to_string(),
                    kind: ErrorKind::Unknown,
                }
            } else {
                ConvState::AwaitingLlm {
                    iteration: run.iteration + 1,
                }
            };
            let mut t = Transition::new(next);
            if !run.running.is_empty() {
                t = t.with(Effect::AbortTools {
                    tool_use_ids: run.running.clone(),
                });
            }
            if run.hooking.is_some() {
                t = t.with(Effect::AbortHooks);
            }
            t.with(Effect::AppendMessage {
                message: Message::user(results, ctx.now_ms),
            })
        }
        _ => Transition::unchanged(state),
    }
}

fn on_restart(state: &ConvState, ctx: &ConvContext) -> Transition {
    let recovered = |what: &str| Effect::Notify {
        notice: Notice::Recovered {
            message: format!("agentd restarted: {what}"),
        },
    };
    match state {
        ConvState::Idle
        | ConvState::Error { .. }
        | ConvState::ContextExhausted { .. }
        | ConvState::BudgetStopped { .. } => Transition::unchanged(state),
        ConvState::AwaitingLlm { iteration } | ConvState::LlmRequesting { iteration, .. } => {
            begin_request(ctx, (*iteration).max(1))
                .prepend(recovered("re-issuing the model request"))
        }
        ConvState::StopHooks { .. } => Transition::new(ConvState::Idle)
            .with(recovered("the stop hooks were interrupted; the turn ended")),
        ConvState::Cancelling { .. } => Transition::new(ConvState::Idle)
            .with(recovered("completing the cancellation"))
            .with(interrupt_marker(ctx)),
        ConvState::ToolExecuting(run) => {
            if let Some(ask) = &run.permission {
                return Transition::unchanged(state)
                    .with(recovered("asking the pending permission request again"))
                    .with(Effect::AskPermission { ask: ask.clone() });
            }
            let results = answer_all(run, |id| {
                if run.running.iter().any(|r| r == id) {
                    texts::RESTARTED_WHILE_RUNNING
                } else {
                    texts::SKIPPED_DUE_TO_RESTART
                }
            });
            next_round(ctx, run.iteration)
                .prepend(Effect::AppendMessage {
                    message: Message::user(results, ctx.now_ms),
                })
                .prepend(recovered("tools that were running have unknown effects"))
        }
        ConvState::AwaitingSubAgents {
            pending_ids,
            call_id,
            run,
            ..
        } => {
            // The children are conversations and recover by themselves;
            // asking again for each pending one makes the runtime watch it
            // (it creates none twice) and report its end once.
            let mut t = Transition::unchanged(state)
                .with(recovered("waiting for the sub-agents still running"));
            let request = run
                .calls
                .iter()
                .find(|c| c.id == *call_id)
                .and_then(|c| SpawnRequest::parse(&c.input).ok());
            if let Some(request) = request {
                for (i, task) in request.agents.iter().enumerate() {
                    let id = agent_id(i + 1, call_id);
                    if pending_ids.contains(&id) {
                        t = t.with(spawn_effect(id, task, &request));
                    }
                }
            }
            t
        }
        ConvState::AwaitingContinuation {
            rejected_tool_calls,
            attempt,
            ..
        } => Transition::unchanged(state)
            .with(recovered("re-issuing the continuation request"))
            .with(Effect::RequestLlm {
                attempt: *attempt,
                purpose: continuation_purpose(rejected_tool_calls),
            }),
    }
}

/// What plan detection does with a user's `text` that starts a turn: the
/// mode to enter (`require`) and the notice clients show. `None`: detection
/// is off, the conversation already plans (or cannot change anything), or
/// the text does not deserve a plan.
fn detect_plan(ctx: &ConvContext, text: &str) -> Option<(Option<Mode>, Notice)> {
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

/// Answers an `update_plan` call: its result, and when the plan changed,
/// the new plan with one `PlanChanged` effect per step that changed.
fn update_plan(plan: Option<&Plan>, call: &ToolCall) -> (ToolResult, Option<(Plan, Vec<Effect>)>) {
    let Some(plan) = plan else {
        return (ToolResult::new(&call.id, texts::NO_PLAN, true), None);
    };
    let applied = crate::plan::updates_from_input(&call.input).and_then(|ups| plan.apply(&ups));
    match applied {
        Err(e) => (
            ToolResult::new(&call.id, texts::plan_update_refused(&e.0), true),
            None,
        ),
        Ok((next, changes)) => {
            let mut content = format!("Plan updated.\n{}", next.checklist());
            if next.is_finished() {
                content.push_str("Every step of the plan is done.");
            }
            let effects = changes
                .into_iter()
                .map(|change: StepChange| Effect::PlanChanged {
                    plan: next.clone(),
                    change: PlanEvent::Step(change),
                })
                .collect();
            (
                ToolResult::new(&call.id, content, false),
                Some((next, effects)),
            )
        }
    }
}

/// A user's answer to the pending plan approval request.
fn on_plan_answer(
    ctx: &ConvContext,
    run: &ToolRun,
    request_id: &str,
    answer: PlanAnswer,
    by: Option<ClientInfo>,
) -> Result<Transition, Rejected> {
    let Some(ask) = &run.permission else {
        return Err(Rejected::NoPendingPermission);
    };
    if !request_id.is_empty() && ask.request_id != request_id {
        return Err(Rejected::UnknownPermissionRequest(request_id.to_string()));
    }
    if Tool::from_name(&ask.tool_name) != Some(Tool::ProposePlan) {
        return Err(Rejected::InvalidPlanAnswer(
            "the pending request asks for a permission, not for a plan's approval: answer it with a permission decision".to_string(),
        ));
    }
    let mut plan = Plan::from_input(&ask.input, &ask.tool_use_id)
        .map_err(|e| Rejected::InvalidPlanAnswer(e.0))?;
    let continues_in = |mode: Mode| match mode {
        Mode::Default | Mode::AcceptEdits => Ok(mode),
        Mode::ReadOnly | Mode::Plan | Mode::Bypass => Err(Rejected::InvalidPlanAnswer(format!(
            "an approved plan continues in default or accept_edits mode, not {mode}"
        ))),
    };
    let (decision, result, change, mode) = match answer {
        PlanAnswer::Approve { mode } => {
            let mode = continues_in(mode)?;
            plan.phase = PlanPhase::Approved;
            (
                Decision::ApprovePlan,
                ToolResult::new(&ask.tool_use_id, texts::plan_approved(mode), false),
                PlanEvent::Confirmed {
                    mode,
                    edited: false,
                },
                Some(mode),
            )
        }
        PlanAnswer::Edit { steps, mode } => {
            let mode = continues_in(mode)?;
            plan.set_steps(steps).map_err(|e| {
                Rejected::InvalidPlanAnswer(format!("the edited steps are not a valid plan: {e}"))
            })?;
            plan.phase = PlanPhase::Approved;
            (
                Decision::EditPlan,
                ToolResult::new(
                    &ask.tool_use_id,
                    texts::plan_edited(mode, &plan.steps_text()),
                    false,
                ),
                PlanEvent::Confirmed { mode, edited: true },
                Some(mode),
            )
        }
        PlanAnswer::Reject { feedback } => {
            plan.phase = PlanPhase::Rejected;
            (
                Decision::RejectPlan,
                ToolResult::new(&ask.tool_use_id, texts::plan_rejected(&feedback), true),
                PlanEvent::Rejected { feedback },
                None,
            )
        }
    };
    let mut effects = vec![
        Effect::PermissionResolved {
            request_id: ask.request_id.clone(),
            decision,
            by,
        },
        Effect::PlanChanged {
            plan: plan.clone(),
            change,
        },
    ];
    let mut run = run.clone();
    run.permission = None;
    run.results.push(result);
    let mut next = ctx.clone();
    next.plan = Some(plan);
    if let Some(mode) = mode.filter(|m| *m != ctx.policy.mode) {
        next.policy.mode = mode;
        effects.push(Effect::Notify {
            notice: Notice::Info {
                message: format!("permission mode is now {mode}"),
            },
        });
    }
    let mut t = schedule(&next, run, effects);
    if mode.is_some() {
        t.mode = mode;
    }
    Ok(t)
}

/// Starts the sub-agents of the `spawn_agents` call `call`: the run waits
/// in `AwaitingSubAgents` until the last one ends.
fn spawn(
    run: ToolRun,
    call: &ToolCall,
    request: &SpawnRequest,
    mut effects: Vec<Effect>,
) -> Transition {
    let agents: Vec<String> = (1..=request.agents.len())
        .map(|n| agent_id(n, &call.id))
        .collect();
    for (id, task) in agents.iter().zip(&request.agents) {
        effects.push(spawn_effect(id.clone(), task, request));
    }
    Transition {
        state: ConvState::AwaitingSubAgents {
            pending_ids: agents.clone(),
            completed: Vec::new(),
            agents,
            call_id: call.id.clone(),
            run: Box::new(run),
        },
        mode: None,
        effects,
        delivered: 0,
        corrections: None,
    }
}

fn spawn_effect(
    agent_id: String,
    task: &crate::tools::AgentTask,
    request: &SpawnRequest,
) -> Effect {
    Effect::SpawnSubAgent {
        agent_id,
        prompt: task.prompt.clone(),
        description: task.description.clone(),
        model: request.model.clone(),
        read_only: request.read_only,
    }
}

/// The last sub-agent of the call `call_id` ended: the call's result
/// carries every child's result in the order they were asked for, and the
/// run goes on.
fn sub_agents_done(
    ctx: &ConvContext,
    mut run: ToolRun,
    call_id: &str,
    agents: &[String],
    completed: &[SubAgentResult],
) -> Transition {
    let ordered: Vec<(&str, &str, bool, &str)> = agents
        .iter()
        .filter_map(|id| completed.iter().find(|r| r.agent_id == *id))
        .map(|r| {
            (
                r.agent_id.as_str(),
                r.conversation_id.as_str(),
                r.success,
                r.result.as_str(),
            )
        })
        .collect();
    let all_failed = !ordered.is_empty() && ordered.iter().all(|r| !r.2);
    let text = texts::sub_agent_results(&synthesis_id(call_id), &ordered);
    run.results.push(ToolResult::new(call_id, text, all_failed));
    schedule(ctx, run, Vec::new())
}

/// A `submit_result` call's input, or what is wrong with it.
fn submitted(input: &serde_json::Value) -> Result<Submitted, String> {
    let result = input
        .get("result")
        .and_then(serde_json::Value::as_str)
        .ok_or("submit_result: `result` must be a string")?;
    let success = match input.get("success") {
        None | Some(serde_json::Value::Null) => true,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => return Err("submit_result: `success` must be true or false".to_string()),
    };
    Ok(Submitted {
        result: result.to_string(),
        success,
    })
}
