//! Running a reply's tool calls: what starts when, the tool and hook events
//! that move the run on, and the results message once every call is answered.

use super::permissions::{ask_for, verdict};
use super::sub_agents::{spawn, submitted};
use super::{Inputs, Step, answer_all, begin_request, fail, next_round};
use crate::correction::Assessment;
use crate::effect::{Effect, Notice, SubAgentOutcome};
use crate::hooks::HookVerdict;
use crate::message::{ContentBlock, Message, ToolCall, ToolResult};
use crate::permission::Verdict;
use crate::plan::Plan;
use crate::state::{ConvState, ErrorKind, Submitted, ToolRun};
use crate::texts;
use crate::tools::{SpawnRequest, Tool};

/// A tool finished; when it was the last one running, what comes next
/// starts.
pub(super) fn on_tool_completed(
    state: &ConvState,
    ctx: &Inputs<'_>,
    result: ToolResult,
) -> Option<Step> {
    match state {
        ConvState::ToolExecuting(run) if run.running.contains(&result.tool_use_id) => {
            let mut run = run.clone();
            run.running.retain(|id| *id != result.tool_use_id);
            run.results.push(result);
            if run.running.is_empty() {
                Some(schedule(ctx, run, Vec::new()))
            } else {
                Some(Step::new(ConvState::ToolExecuting(run)))
            }
        }
        _ => None,
    }
}

/// The pre_tool_use hooks of the call the run waits on answered (and may
/// have rewritten its input): the call is judged again with their verdict.
pub(super) fn on_hooks_decided(
    state: &ConvState,
    ctx: &Inputs<'_>,
    tool_use_id: String,
    verdict: HookVerdict,
    new_input: Option<serde_json::Value>,
) -> Option<Step> {
    match state {
        ConvState::ToolExecuting(run) if run.hooking.as_deref() == Some(tool_use_id.as_str()) => {
            let mut run = run.clone();
            run.hooking = None;
            if let Some(input) = new_input
                && let Some(call) = run.calls.iter_mut().find(|c| c.id == tool_use_id)
            {
                call.input = input;
            }
            run.hook_verdicts.push((tool_use_id, verdict));
            Some(schedule(ctx, run, Vec::new()))
        }
        _ => None,
    }
}

/// What scheduling does after it looked at one call.
pub(super) enum Next {
    /// Go on to the next call.
    Continue,
    /// Start nothing more now (a call must run alone, or waits for the
    /// running ones, or the rest is skipped).
    Stop,
    /// The run waits (for a person or for hooks) before anything else.
    Suspend,
    /// The call spawns sub-agents: the run waits for them.
    Spawn(ToolCall, SpawnRequest),
}

/// Starts whatever can run now. Called when nothing of `run` is running.
///
/// A run of consecutive read-only calls starts together; a mutating call
/// starts alone; a call that needs permission suspends the run (nothing else
/// runs meanwhile). When every call has a result, the results go back to the
/// model as one user message.
pub(super) fn schedule(ctx: &Inputs<'_>, mut run: ToolRun, mut effects: Vec<Effect>) -> Step {
    // The plan as the calls answered so far leave it.
    let mut plan = ctx.conv.plan.clone();
    if run.stop_with_feedback.is_none() && run.submitted.is_none() {
        for id in run.pending_ids() {
            let Some(call) = run.calls.iter().find(|c| c.id == id).cloned() else {
                continue;
            };
            match start_call(ctx, &mut run, &mut plan, &mut effects, call) {
                Next::Continue => {}
                Next::Stop => break,
                Next::Suspend => return waiting(run, effects),
                Next::Spawn(call, request) => return spawn(run, &call, &request, effects),
            }
        }
        if !run.running.is_empty() {
            return waiting(run, effects);
        }
    }
    answered(ctx, run, effects)
}

/// The run as it waits, with what it started.
fn waiting(run: ToolRun, effects: Vec<Effect>) -> Step {
    Step {
        state: ConvState::ToolExecuting(run),
        mode: None,
        effects,
        delivered: 0,
        notes_delivered: false,
        corrections: None,
        thinking: None,
        todo_tally: None,
    }
}

/// Looks at one call that has no result yet and starts it if it may.
fn start_call(
    ctx: &Inputs<'_>,
    run: &mut ToolRun,
    plan: &mut Option<Plan>,
    effects: &mut Vec<Effect>,
    call: ToolCall,
) -> Next {
    // The plan tools are answered here, in the model's order, once
    // nothing runs: they are about the work around them.
    let plan_tool =
        Tool::from_name(&call.name).filter(|t| matches!(t, Tool::ProposePlan | Tool::UpdatePlan));
    if let Some(tool) = plan_tool {
        if !run.running.is_empty() {
            return Next::Stop;
        }
        return super::plans::answer_plan_tool(tool, run, plan, effects, &call);
    }
    let read_only = ctx.policy.is_read_only(&call.name);
    if !run.running.is_empty() && !read_only {
        return Next::Stop;
    }
    let Some(verdict) = verdict(ctx, run, &call) else {
        // The call's pre_tool_use hooks decide next; like a
        // permission request, they wait until nothing runs.
        if !run.running.is_empty() {
            return Next::Stop;
        }
        effects.push(Effect::RunPreToolHooks { call: call.clone() });
        run.hooking = Some(call.id.clone());
        return Next::Suspend;
    };
    follow_verdict(ctx, run, effects, call, verdict, read_only)
}

/// Acts on the verdict on `call`: a denial is its result, an ask suspends
/// the run, an allowed call starts (or spawns, or submits the result).
fn follow_verdict(
    ctx: &Inputs<'_>,
    run: &mut ToolRun,
    effects: &mut Vec<Effect>,
    call: ToolCall,
    verdict: Verdict,
    read_only: bool,
) -> Next {
    match verdict {
        Verdict::Deny(reason) => {
            run.results.push(ToolResult::new(&call.id, reason, true));
            Next::Continue
        }
        Verdict::Ask(reason) => {
            if !run.running.is_empty() {
                return Next::Stop;
            }
            let ask = ask_for(ctx, &call, reason);
            effects.push(Effect::AskPermission { ask: ask.clone() });
            run.permission = Some(ask);
            Next::Suspend
        }
        Verdict::Allow if Tool::from_name(&call.name) == Some(Tool::SpawnAgents) => {
            // Not read-only: nothing else runs now.
            match SpawnRequest::parse(&call.input) {
                Ok(request) => Next::Spawn(call, request),
                Err(e) => {
                    run.results.push(ToolResult::new(&call.id, e, true));
                    Next::Continue
                }
            }
        }
        Verdict::Allow if Tool::from_name(&call.name) == Some(Tool::SubmitResult) => {
            match submitted(&call.input) {
                Ok(s) => {
                    run.results
                        .push(ToolResult::new(&call.id, texts::RESULT_SUBMITTED, false));
                    run.submitted = Some(s);
                    Next::Stop
                }
                Err(e) => {
                    run.results.push(ToolResult::new(&call.id, e, true));
                    Next::Continue
                }
            }
        }
        Verdict::Allow => {
            run.running.push(call.id.clone());
            effects.push(Effect::ExecuteTool {
                call,
                background: false,
            });
            if read_only {
                Next::Continue
            } else {
                Next::Stop
            }
        }
    }
}

/// Every call is answered (or the rest is skipped after a deny-and-stop
/// or a submitted result): the results go back as one user message.
fn answered(ctx: &Inputs<'_>, mut run: ToolRun, mut effects: Vec<Effect>) -> Step {
    if let Some(Submitted { result, success }) = run.submitted.take() {
        let results = answer_all(&run, |_| texts::SKIPPED_AFTER_SUBMIT);
        effects.push(Effect::AppendMessage {
            message: Message::user(results, ctx.now_ms),
        });
        effects.push(Effect::FinishSubAgent {
            outcome: SubAgentOutcome::Submitted { result, success },
        });
        return Step {
            state: ConvState::Idle,
            mode: None,
            effects,
            delivered: 0,
            notes_delivered: false,
            corrections: None,
            thinking: None,
            todo_tally: None,
        };
    }
    let results = answer_all(&run, |_| texts::SKIPPED_AFTER_INTERRUPT);
    let mut t = match run.stop_with_feedback.take() {
        None => return corrected(ctx, &run, results, effects),
        Some(feedback) if feedback.trim().is_empty() => Step::new(ConvState::Idle),
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
    ctx: &Inputs<'_>,
    run: &ToolRun,
    mut blocks: Vec<ContentBlock>,
    mut effects: Vec<Effect>,
) -> Step {
    let tally = todo_tally(ctx, run, &effects, &mut blocks);
    let assessment =
        crate::correction::assess(&ctx.conv.corrections, &run.calls, &run.results, ctx.now_ms);
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
    t.todo_tally = Some(tally);
    t
}

/// Counts the run's calls in the turn's tally; the round that reaches the
/// threshold with no list adds the reminder to `blocks` (once per turn).
fn todo_tally(
    ctx: &Inputs<'_>,
    run: &ToolRun,
    effects: &[Effect],
    blocks: &mut Vec<ContentBlock>,
) -> crate::plan::TodoTally {
    let plan = effects
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::PlanChanged { plan, .. } => Some(plan),
            _ => None,
        })
        .or(ctx.conv.plan.as_ref());
    let (tally, nudge) = ctx.conv.todo_tally.after_round(
        run.iteration,
        run.calls.len(),
        plan.is_some_and(Plan::keeps_list),
        ctx.todo_reminder_after,
    );
    if nudge {
        blocks.push(ContentBlock::text(texts::TODO_REMINDER));
    }
    tally
}
