//! The plan tools inside a turn: a proposed plan waits for approval, an
//! `update_plan` call moves its steps, and a person's answer to the proposal.

use super::schedule::{Next, schedule};
use super::{Inputs, Rejected, Step};
use crate::client::ClientInfo;
use crate::effect::{Effect, Notice};
use crate::message::{ToolCall, ToolResult};
use crate::permission::{Decision, Mode, PermissionAsk};
use crate::plan::{Plan, PlanAnswer, PlanEvent, PlanPhase, StepChange, StepStatus};
use crate::state::{ConvState, ToolRun};
use crate::texts;
use crate::tools::Tool;

/// Answers a plan tool's call (`tool` is `propose_plan` or `update_plan`)
/// once nothing of the run is running. `plan` is the plan as the calls
/// answered so far leave it; a valid proposal suspends the run until a
/// person answers it.
pub(super) fn answer_plan_tool(
    tool: Tool,
    run: &mut ToolRun,
    plan: &mut Option<Plan>,
    effects: &mut Vec<Effect>,
    call: &ToolCall,
) -> Next {
    if tool == Tool::UpdatePlan {
        let (result, changed) = update_plan(plan.as_ref(), call);
        run.results.push(result);
        if let Some((next, events)) = changed {
            effects.extend(events);
            *plan = Some(next);
        }
        return Next::Continue;
    }
    match Plan::from_input(&call.input, &call.id) {
        Err(e) => {
            run.results
                .push(ToolResult::new(&call.id, texts::plan_invalid(&e.0), true));
            Next::Continue
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
            Next::Suspend
        }
    }
}

/// Answers an `update_plan` call: its result, and when the plan changed,
/// the new plan with one `PlanChanged` effect per step that changed. With
/// an approved plan it moves the plan's steps, unless every step is done
/// and the call sends titled items: then, as with no approved plan, the
/// call's steps are the whole todo list.
fn update_plan(plan: Option<&Plan>, call: &ToolCall) -> (ToolResult, Option<(Plan, Vec<Effect>)>) {
    let plan = match plan {
        Some(p)
            if p.phase == PlanPhase::Approved
                && !(p.is_finished() && crate::plan::is_todo_input(&call.input)) =>
        {
            p
        }
        _ => return update_todo(call),
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

/// Answers an `update_plan` call that replaces the todo list.
fn update_todo(call: &ToolCall) -> (ToolResult, Option<(Plan, Vec<Effect>)>) {
    match Plan::todo_from_input(&call.input, &call.id) {
        Err(e) => (
            ToolResult::new(&call.id, texts::todo_refused(&e.0), true),
            None,
        ),
        Ok(list) => {
            let content = texts::todo_updated(&list.checklist());
            let effect = Effect::PlanChanged {
                plan: list.clone(),
                change: PlanEvent::TodoUpdated,
            };
            (
                ToolResult::new(&call.id, content, false),
                Some((list, vec![effect])),
            )
        }
    }
}

/// A user's answer to the pending plan approval request; with no tool run
/// nothing is pending.
pub(super) fn on_answered(
    state: &ConvState,
    ctx: &Inputs<'_>,
    request_id: &str,
    answer: PlanAnswer,
    by: Option<ClientInfo>,
) -> Result<Step, Rejected> {
    match state {
        ConvState::ToolExecuting(run) => on_plan_answer(ctx, run, request_id, answer, by),
        _ => Err(Rejected::NoPendingPermission),
    }
}

fn on_plan_answer(
    ctx: &Inputs<'_>,
    run: &ToolRun,
    request_id: &str,
    answer: PlanAnswer,
    by: Option<ClientInfo>,
) -> Result<Step, Rejected> {
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
        Mode::ReadOnly | Mode::Plan | Mode::Bypass | Mode::Auto => {
            Err(Rejected::InvalidPlanAnswer(format!(
                "an approved plan continues in default or accept_edits mode, not {mode}"
            )))
        }
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
            ask: ask.clone(),
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
    next.conv.to_mut().plan = Some(plan);
    if let Some(mode) = mode.filter(|m| *m != ctx.policy.mode) {
        next.set_mode(mode);
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

/// The files follow the plan's steps: a step that starts marks where it
/// started, and a step that fails puts back what the agent changed since,
/// when `[plan] auto_rollback_on_failure` is on. Each effect follows the
/// `PlanChanged` that reports the step.
pub(super) fn checkpoints(ctx: &Inputs<'_>, mut t: Step) -> Step {
    let mut i = 0;
    while i < t.effects.len() {
        if let Effect::PlanChanged {
            plan,
            change: PlanEvent::Step(step),
        } = &t.effects[i]
        {
            let mark = format!("plan:{}:{}", plan.tool_use_id, step.step_id);
            let follow = match step.to {
                StepStatus::InProgress => Some(Effect::MarkCheckpoint { mark }),
                StepStatus::Failed if ctx.auto_rollback_on_failure => {
                    Some(Effect::RestoreCheckpoint {
                        mark,
                        step_id: step.step_id.clone(),
                    })
                }
                _ => None,
            };
            if let Some(effect) = follow {
                i += 1;
                t.effects.insert(i, effect);
            }
        }
        i += 1;
    }
    t
}
