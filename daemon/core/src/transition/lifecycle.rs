//! The daemon stopping and starting again: what a clean stop leaves due,
//! and how each state recovers after a restart.

use super::continuation::continuation_purpose;
use super::sub_agents::spawn_effect;
use super::{Inputs, Step, answer_all, begin_request, interrupt_marker, next_round};
use crate::effect::{Effect, Notice};
use crate::message::Message;
use crate::state::{ConvState, ErrorKind};
use crate::texts;
use crate::tools::{SpawnRequest, agent_id};

/// A clean stop: tools that run now are terminated and recorded as
/// interrupted, unstarted ones as skipped, and the model request that
/// follows is left due (`AwaitingLlm`) for the next start to issue. A
/// pending permission request and a model request in flight are simply
/// kept: the next start asks / requests again.
pub(super) fn on_stop(state: &ConvState, ctx: &Inputs<'_>) -> Step {
    match state {
        // The model had ended its turn; the stop hooks are stopped with
        // the daemon, and the turn ends.
        ConvState::StopHooks { .. } => Step::new(ConvState::Idle).with(Effect::AbortHooks),
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
            let mut t = Step::new(next);
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
        _ => Step::unchanged(state),
    }
}

/// The daemon started again: each busy state picks up where it can (a
/// model request is issued again, a permission asked again) and says so.
pub(super) fn on_restart(state: &ConvState, ctx: &Inputs<'_>) -> Step {
    let recovered = |what: &str| Effect::Notify {
        notice: Notice::Recovered {
            message: format!("agentd restarted: {what}"),
        },
    };
    match state {
        ConvState::Idle
        | ConvState::Error { .. }
        | ConvState::ContextExhausted { .. }
        | ConvState::BudgetStopped { .. } => Step::unchanged(state),
        ConvState::AwaitingLlm { iteration } | ConvState::LlmRequesting { iteration, .. } => {
            begin_request(ctx, (*iteration).max(1))
                .prepend(recovered("re-issuing the model request"))
        }
        ConvState::StopHooks { .. } => Step::new(ConvState::Idle)
            .with(recovered("the stop hooks were interrupted; the turn ended")),
        ConvState::Cancelling { .. } => Step::new(ConvState::Idle)
            .with(recovered("completing the cancellation"))
            .with(interrupt_marker(ctx)),
        ConvState::ToolExecuting(run) => {
            if let Some(ask) = &run.permission {
                return Step::unchanged(state)
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
            let mut t =
                Step::unchanged(state).with(recovered("waiting for the sub-agents still running"));
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
        } => Step::unchanged(state)
            .with(recovered("re-issuing the continuation request"))
            .with(Effect::RequestLlm {
                attempt: *attempt,
                purpose: continuation_purpose(rejected_tool_calls),
            }),
    }
}
