//! Permissions inside a turn: the verdict on a call (rules, hooks, doom
//! loop), the request a person is asked, and their answer.

use super::schedule::schedule;
use super::{Inputs, Rejected, Step};
use crate::client::ClientInfo;
use crate::effect::{Effect, Notice};
use crate::event::RuleScope;
use crate::hooks::HookVerdict;
use crate::loops::PastCall;
use crate::message::{ToolCall, ToolResult};
use crate::permission::{Action, Decision, Mode, PermissionAsk, Verdict, suggest_rule};
use crate::state::{ConvState, ToolRun};
use crate::texts;
use crate::tools::{Called, Tool};

/// The verdict on `call`, in the permission order: deny rules (and a
/// restricted mode's refusal, and a doom-loop `deny`) → the pre_tool_use
/// hooks → the mode's defaults, ask and allow rules (and a doom-loop
/// `ask`). `None`: hooks match the call and have not answered yet.
pub(super) fn verdict(ctx: &Inputs<'_>, run: &ToolRun, call: &ToolCall) -> Option<Verdict> {
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
    if let Some(allowed) = &ctx.agent_tools
        && !crate::agent_types::allows(allowed, &call.name)
    {
        return Some(Verdict::Deny(texts::not_in_agent_type(&call.name, allowed)));
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

/// The doom-loop check: the loops [`crate::loops`] finds (the same call
/// again and again, cycles, cosmetic variants of a failing command, rounds
/// without progress). The setting (config `doom_loop = allow|ask|deny`):
/// allow turns the check off; ask and deny act on a loop found, deny with
/// the seed's warning as the call's result.
fn doom_loop(ctx: &Inputs<'_>, run: &ToolRun, call: &ToolCall) -> Option<Verdict> {
    if ctx.policy.doom_loop == Action::Allow {
        return None;
    }
    let history: Vec<PastCall> = ctx
        .recent_calls
        .iter()
        .cloned()
        .chain(
            run.calls
                .iter()
                .take_while(|c| c.id != call.id)
                .map(|c| PastCall::new(c, u64::MAX, None)),
        )
        .collect();
    let found = crate::loops::detect(&history, call, &ctx.loops)?;
    let reason = found.reason(&call.name);
    Some(match ctx.policy.doom_loop {
        Action::Deny => Verdict::Deny(texts::doom_loop_warning(&reason, &found, call)),
        Action::Ask | Action::Allow => Verdict::Ask(reason),
    })
}

/// Whether bash requests offer "run it in the background".
const OFFER_BACKGROUND: bool = true;

/// The request a person is asked about `call`, offering only the
/// decisions that make sense for it.
pub(super) fn ask_for(ctx: &Inputs<'_>, call: &ToolCall, reason: String) -> PermissionAsk {
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
    // No allow rule lets a command out of the sandbox, so "always" would
    // add a rule that changes nothing.
    if reason.starts_with(crate::permission::RUN_UNSANDBOXED) {
        options.retain(|d| *d != Decision::AllowAlways);
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
pub(super) struct Answer<'a> {
    pub(super) request_id: &'a str,
    pub(super) decision: Decision,
    pub(super) feedback: Option<String>,
    pub(super) scope: RuleScope,
    pub(super) by: Option<ClientInfo>,
}

/// A person's answer to the pending permission request; with no tool run
/// nothing is pending.
pub(super) fn on_answered(
    state: &ConvState,
    ctx: &Inputs<'_>,
    answer: Answer<'_>,
) -> Result<Step, Rejected> {
    match state {
        ConvState::ToolExecuting(run) => on_permission_answer(ctx, run, answer),
        _ => Err(Rejected::NoPendingPermission),
    }
}

fn on_permission_answer(
    ctx: &Inputs<'_>,
    run: &ToolRun,
    answer: Answer<'_>,
) -> Result<Step, Rejected> {
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
        ask: ask.clone(),
        decision,
        by,
    };
    let Some(call) = run.calls.iter().find(|c| c.id == ask.tool_use_id).cloned() else {
        return Err(Rejected::UnknownPermissionRequest(ask.request_id.clone()));
    };
    if Tool::from_name(&call.name) == Some(Tool::RequestModeUpgrade)
        && matches!(decision, Decision::AllowOnce | Decision::AllowAlways)
    {
        return Ok(upgrade_mode(ctx, run, &call, resolved));
    }
    follow_decision(ctx, run, call, decision, feedback, scope, resolved)
}

/// An approved `request_mode_upgrade`: nothing to run, the approval is the
/// upgrade. Later calls of the same reply are judged in the new mode, and
/// the new mode is persisted with the result that says so.
fn upgrade_mode(ctx: &Inputs<'_>, mut run: ToolRun, call: &ToolCall, resolved: Effect) -> Step {
    run.results
        .push(ToolResult::new(&call.id, texts::MODE_UPGRADED, false));
    let mut upgraded = ctx.clone();
    upgraded.set_mode(Mode::Default);
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
    t
}

/// Carries out an offered `decision` on `call`: it runs, or its result is
/// a denial (adding a rule for "always" and "never"; stopping the turn for
/// deny-and-stop), and the run goes on.
fn follow_decision(
    ctx: &Inputs<'_>,
    mut run: ToolRun,
    call: ToolCall,
    decision: Decision,
    feedback: Option<String>,
    scope: RuleScope,
    resolved: Effect,
) -> Result<Step, Rejected> {
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
            let mut t = Step::new(ConvState::ToolExecuting(run)).with(resolved);
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
