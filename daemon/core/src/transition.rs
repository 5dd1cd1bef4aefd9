//! The transition function:
//! `(conversation, context, event) -> (conversation, effects)`.
//!
//! Pure and deterministic: it reads nothing but its arguments. The seed's
//! transition matrix (bedrock-state-machine-design.md) is its specification,
//! REJECT rows included.
//!
//! This file holds the outcome types, the entry point and the router
//! (`decide`), and the few builders every family uses; each family of
//! events is decided in its own module:
//! - `user.rs`: user messages, continued conversations, budget answers;
//! - `reply.rs`: model replies, failed requests and retries, stop hooks;
//! - `continuation.rs`: the continuation summary when the context fills up;
//! - `schedule.rs`: running a reply's tool calls and their results;
//! - `permissions.rs`: the verdict on a call and a person's answer to it;
//! - `plans.rs`: the plan tools and a person's answer to a proposed plan;
//! - `sub_agents.rs`: spawning children and a child's report of its end;
//! - `cancel.rs`: a user's cancel;
//! - `lifecycle.rs`: the daemon stopping and restarting;
//! - `queue.rs`: delivering messages queued while a turn ran.

mod cancel;
mod continuation;
mod early;
mod lifecycle;
mod permissions;
mod plans;
mod queue;
mod reply;
mod schedule;
mod sub_agents;
mod user;

use crate::conversation::{ContinuationChain, Conversation, ShellNotes};
use crate::correction::Corrections;
use crate::effect::{Effect, LlmPurpose, Notice};
use crate::event::Event;
use crate::message::{ContentBlock, Message};
use crate::permission::{Decision, Mode};
use crate::state::{ConvContext, ConvState, EarlyCalls, ErrorKind, ToolRun};
use crate::texts;
use queue::deliver_queued;
use std::borrow::Cow;
use std::fmt;
use sub_agents::end_of_sub_agent;

/// The outcome of an accepted event.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The conversation as the event leaves it, whole: persisted in one
    /// commit before the effects run, so a crash can never leave a
    /// transcript that says "upgraded" with the old mode, or a delivered
    /// message still queued.
    pub conversation: Conversation,
    /// What the runtime must do, in order.
    pub effects: Vec<Effect>,
}

/// A decision as the families make it: the new state, the effects, and
/// what else of the conversation changes. [`Step::finish`] makes it the
/// new conversation.
#[derive(Debug)]
struct Step {
    state: ConvState,
    /// The permission mode the conversation enters, when it changes.
    mode: Option<Mode>,
    effects: Vec<Effect>,
    /// How many of the queued messages, from the front, it delivered.
    delivered: usize,
    /// It delivered the pending shell notes (all of them).
    notes_delivered: bool,
    /// The self-correction tracking, when it changes.
    corrections: Option<Corrections>,
    /// The turn's thinking, when a new turn starts.
    thinking: Option<Option<crate::thinking::Thinking>>,
    /// The turn's tool calls (todo-list reminder), when a round counted.
    todo_tally: Option<crate::plan::TodoTally>,
}

impl Step {
    fn new(state: ConvState) -> Self {
        Step {
            state,
            mode: None,
            effects: Vec::new(),
            delivered: 0,
            notes_delivered: false,
            corrections: None,
            thinking: None,
            todo_tally: None,
        }
    }

    fn with(mut self, effect: Effect) -> Self {
        self.effects.push(effect);
        self
    }

    fn unchanged(state: &ConvState) -> Self {
        Step::new(state.clone())
    }

    fn prepend(mut self, effect: Effect) -> Self {
        self.effects.insert(0, effect);
        self
    }

    /// The conversation `before` as this step leaves it: the plan is the
    /// last one its effects report, the queue loses what it delivered, and
    /// a continuation the effects owe is pending until it is made, and the
    /// shell notes it delivered are no longer pending.
    fn finish(self, before: &Conversation) -> Transition {
        let plan = self.effects.iter().rev().find_map(|e| match e {
            Effect::PlanChanged { plan, .. } => Some(plan),
            _ => None,
        });
        let delivered = self.delivered.min(before.queue.len());
        let owed = self.effects.contains(&Effect::ContinueInNewConversation);
        Transition {
            conversation: Conversation {
                state: self.state,
                mode: self.mode.unwrap_or(before.mode),
                plan: plan.or(before.plan.as_ref()).cloned(),
                corrections: self
                    .corrections
                    .unwrap_or_else(|| before.corrections.clone()),
                queue: before.queue[delivered..].to_vec(),
                continuation: ContinuationChain {
                    pending: before.continuation.pending || owed,
                    ..before.continuation.clone()
                },
                sub_agents: before.sub_agents.clone(),
                thinking: self.thinking.unwrap_or(before.thinking),
                shell_notes: ShellNotes {
                    pending: if self.notes_delivered {
                        Vec::new()
                    } else {
                        before.shell_notes.pending.clone()
                    },
                    noted: before.shell_notes.noted.clone(),
                },
                todo_tally: self.todo_tally.unwrap_or(before.todo_tally),
            },
            effects: self.effects,
        }
    }
}

/// What a decision reads: the conversation as the event finds it and the
/// context (reads of the context go through it as on the context itself).
/// A decision that changes the mode changes both, so the later decisions
/// of the same event judge in the new mode.
#[derive(Debug, Clone)]
struct Inputs<'a> {
    conv: Cow<'a, Conversation>,
    ctx: Cow<'a, ConvContext>,
}

impl<'a> Inputs<'a> {
    fn new(conv: &'a Conversation, ctx: &'a ConvContext) -> Self {
        Inputs {
            conv: Cow::Borrowed(conv),
            ctx: Cow::Borrowed(ctx),
        }
    }

    /// Later decisions of the same event are made in `mode`.
    fn set_mode(&mut self, mode: Mode) {
        self.ctx.to_mut().policy.mode = mode;
        self.conv.to_mut().mode = mode;
    }
}

impl std::ops::Deref for Inputs<'_> {
    type Target = ConvContext;

    fn deref(&self) -> &ConvContext {
        &self.ctx
    }
}

/// Why an event was refused. The state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// A user message while a turn runs (or another message's prompt hooks
    /// run), not to be queued.
    Busy,
    /// A user message while a cancel completes, not to be queued.
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

/// Applies `event` to the conversation `conv`.
pub fn transition(
    conv: &Conversation,
    ctx: &ConvContext,
    event: Event,
) -> Result<Transition, Rejected> {
    let before = conv;
    let conv = record_facts(conv, &event)?;
    let mut inputs = Inputs::new(&conv, ctx);
    if conv.sub_agents != before.sub_agents {
        // A child counted now counts toward the budgets at once.
        inputs
            .ctx
            .to_mut()
            .budget
            .sub_agents_counted(&before.sub_agents, &conv.sub_agents);
    }
    let (state, ctx) = (&conv.state, &inputs);
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
    // A shell's end wakes an idle conversation when the config says so.
    let woke = matches!(event, Event::ShellEnded { .. })
        && matches!(state, ConvState::Idle | ConvState::Error { .. })
        && ctx.wake_on_shell_exit;
    let t = decide(state, ctx, event)?;
    let t = deliver_queued(state, ctx, stops, woke, t);
    let t = plans::checkpoints(ctx, t);
    let t = continuation::owed(state, ctx, t);
    Ok(end_of_sub_agent(state, ctx, cancelled, t).finish(&conv))
}

/// What the conversation records of `event` before the state decides on
/// it: a child's usage, counted once ([`SubAgents::count`]); the
/// conversation that continues this one, and the queued messages it took;
/// a shell's end, taken once ([`ShellNotes::take`]). A continuation or a
/// shell's end recorded already is refused.
///
/// [`SubAgents::count`]: crate::conversation::SubAgents::count
fn record_facts<'a>(
    conv: &'a Conversation,
    event: &Event,
) -> Result<Cow<'a, Conversation>, Rejected> {
    let mut conv = Cow::Borrowed(conv);
    match event {
        Event::SubAgentFinished {
            result,
            usage,
            cost_usd,
        } => {
            let mut sub_agents = conv.sub_agents.clone();
            if sub_agents.count(&result.conversation_id, usage, *cost_usd) {
                conv.to_mut().sub_agents = sub_agents;
            }
        }
        Event::ContinuedAs {
            id,
            automatically,
            taken,
        } => {
            if conv.continuation.continued_as.as_deref() == Some(id.as_str()) {
                return Err(Rejected::NotApplicable {
                    state: conv.state.name(),
                    event: event.name(),
                });
            }
            let conv = conv.to_mut();
            conv.continuation.continued_as(id.clone(), *automatically);
            conv.queue.retain(|q| !taken.contains(&q.id));
        }
        Event::ShellEnded { note } => {
            let mut notes = conv.shell_notes.clone();
            if !notes.take(note) {
                return Err(Rejected::NotApplicable {
                    state: conv.state.name(),
                    event: event.name(),
                });
            }
            conv.to_mut().shell_notes = notes;
        }
        _ => {}
    }
    Ok(conv)
}

/// The first attempt of model round `iteration`: a request boundary, where
/// the budgets are checked. A reached budget holds the request back until
/// someone raises it (REQ: issue 15 point 5).
fn begin_request(ctx: &Inputs<'_>, iteration: u32) -> Step {
    if let Some(stop) = crate::budget::check(&ctx.budget) {
        return Step::new(ConvState::BudgetStopped { iteration, stop }).with(Effect::Notify {
            notice: Notice::BudgetStopped { stop },
        });
    }
    Step::new(ConvState::LlmRequesting {
        attempt: 1,
        iteration,
        retry: None,
        early: EarlyCalls::default(),
    })
    .with(Effect::RequestLlm {
        attempt: 1,
        purpose: LlmPurpose::Turn,
    })
}

/// The round after `iteration`, unless the iteration guard stops the turn.
fn next_round(ctx: &Inputs<'_>, iteration: u32) -> Step {
    if iteration >= ctx.max_iterations {
        return fail(texts::ERR_MAX_ITERATIONS.to_string(), ErrorKind::Unknown);
    }
    begin_request(ctx, iteration + 1)
}

/// A turn held at `stop` ends there, in error.
fn budget_not_raised(stop: &crate::budget::BudgetStop) -> Step {
    fail(texts::budget_not_raised(stop), ErrorKind::Budget)
}

fn fail(message: String, kind: ErrorKind) -> Step {
    Step::new(ConvState::Error {
        message: message.clone(),
        kind,
    })
    .with(Effect::Notify {
        notice: Notice::Error { message, kind },
    })
}

fn interrupt_marker(ctx: &Inputs<'_>) -> Effect {
    Effect::AppendMessage {
        message: Message::user(vec![ContentBlock::text(texts::INTERRUPT_USER)], ctx.now_ms),
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

/// The transition function proper, before queued messages are delivered:
/// each event goes to the code of its family. `None` from a family means
/// the event does not apply to the state.
fn decide(state: &ConvState, ctx: &Inputs<'_>, event: Event) -> Result<Step, Rejected> {
    let not_applicable = Rejected::NotApplicable {
        state: state.name(),
        event: event.name(),
    };
    let applied = match event {
        Event::UserMessage {
            text,
            images,
            sending,
        } => {
            return user::on_user_message(state, ctx, text, images, sending);
        }
        Event::UserCancel => Some(cancel::on_cancel(state, ctx)),
        Event::LlmCompleted { reply } => reply::on_completed(state, ctx, reply),
        Event::LlmFailed {
            failure,
            jitter_permille,
        } => reply::on_failed(state, ctx, failure, jitter_permille),
        Event::LlmAborted { partial } => cancel::on_aborted(state, ctx, partial),
        Event::RetryDue => reply::on_retry_due(state),
        Event::ToolCompleted { result } => match state {
            ConvState::LlmRequesting { .. } => early::on_completed(state, result),
            _ => schedule::on_tool_completed(state, ctx, result),
        },
        Event::ToolCallStreamed { call, preceding } => {
            early::on_streamed(state, ctx, call, &preceding)
        }
        Event::PermissionAnswered {
            request_id,
            decision,
            feedback,
            scope,
            by,
        } => {
            let answer = permissions::Answer {
                request_id: &request_id,
                decision,
                feedback,
                scope,
                by,
            };
            return permissions::on_answered(state, ctx, answer);
        }
        Event::PreToolHooksDecided {
            tool_use_id,
            verdict,
            new_input,
        } => schedule::on_hooks_decided(state, ctx, tool_use_id, verdict, new_input),
        Event::StopHooksDecided { continue_with } => {
            reply::on_stop_hooks_decided(state, ctx, continue_with)
        }
        Event::SubAgentFinished { result, .. } => sub_agents::on_finished(state, ctx, result),
        Event::ContinuationCompleted { summary, usage } => {
            continuation::on_completed(state, ctx, summary, usage)
        }
        Event::ContinuationFailed { error: _ } => continuation::on_failed(state, ctx),
        Event::UserTriggerContinuation => continuation::on_user_trigger(state, ctx)?,
        Event::ContinuedFrom {
            parent_id,
            summary,
            texts,
            images,
        } => user::on_continued_from(state, ctx, &parent_id, &summary, texts, images),
        // Recorded already (`record_facts`), in any state.
        Event::ContinuedAs { .. } => Some(Step::unchanged(state)),
        Event::BudgetAnswered { raise } => user::on_budget_answered(state, ctx, raise),
        Event::DaemonRestarted => Some(lifecycle::on_restart(state, ctx)),
        Event::DaemonStopping => Some(lifecycle::on_stop(state, ctx)),
        Event::PlanAnswered {
            request_id,
            answer,
            by,
        } => return plans::on_answered(state, ctx, &request_id, answer, by),
        // Taken already (`record_facts`): it waits for the next model
        // request, or wakes an idle conversation (`deliver_queued`).
        Event::ShellEnded { .. } => Some(Step::unchanged(state)),
    };
    applied.ok_or(not_applicable)
}
