//! Sub-agents: a parent that spawns children and waits for their ends,
//! and a child that reports how its work ended.

use super::schedule::schedule;
use super::{Inputs, Step, next_round};
use crate::effect::{Effect, SubAgentOutcome};
use crate::message::{ContentBlock, Message, ToolCall, ToolResult};
use crate::state::{ConvState, SubAgentResult, Submitted, ToolRun};
use crate::texts;
use crate::tools::{AgentTask, SpawnRequest, agent_id, synthesis_id};

/// A sub-agent whose work ends reports how (REQ-BED-008/024): a failure
/// or a cancel at once; a turn that ended without `submit_result` is told
/// once to call it, and the second time its last text is the result.
/// `submit_result` itself reports where it is scheduled.
pub(super) fn end_of_sub_agent(
    before: &ConvState,
    ctx: &Inputs<'_>,
    cancelled: bool,
    mut t: Step,
) -> Step {
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

/// Starts the sub-agents of the `spawn_agents` call `call`: the run waits
/// in `AwaitingSubAgents` until the last one ends.
pub(super) fn spawn(
    run: ToolRun,
    call: &ToolCall,
    request: &SpawnRequest,
    mut effects: Vec<Effect>,
) -> Step {
    let agents: Vec<String> = (1..=request.agents.len())
        .map(|n| agent_id(n, &call.id))
        .collect();
    for (id, task) in agents.iter().zip(&request.agents) {
        effects.push(spawn_effect(id.clone(), task, request));
    }
    Step {
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
        notes_delivered: false,
        corrections: None,
        thinking: None,
        todo_tally: None,
    }
}

/// The effect that starts (or, after a restart, watches again) one child.
pub(super) fn spawn_effect(agent_id: String, task: &AgentTask, request: &SpawnRequest) -> Effect {
    Effect::SpawnSubAgent {
        agent_id,
        prompt: task.prompt.clone(),
        description: task.description.clone(),
        model: request.model.clone(),
        read_only: request.read_only,
        agent_type: task.agent_type.clone(),
    }
}

/// The last sub-agent of the call `call_id` ended: the call's result
/// carries every child's result in the order they were asked for, and the
/// run goes on.
fn sub_agents_done(
    ctx: &Inputs<'_>,
    mut run: ToolRun,
    call_id: &str,
    agents: &[String],
    completed: &[SubAgentResult],
) -> Step {
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
pub(super) fn submitted(input: &serde_json::Value) -> Result<Submitted, String> {
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

/// A child of the pending `spawn_agents` call ended; after the last one
/// the call is answered and the run goes on.
pub(super) fn on_finished(
    state: &ConvState,
    ctx: &Inputs<'_>,
    result: SubAgentResult,
) -> Option<Step> {
    let ConvState::AwaitingSubAgents {
        pending_ids,
        completed,
        agents,
        call_id,
        run,
    } = state
    else {
        return None;
    };
    if !pending_ids.contains(&result.agent_id) {
        return None;
    }
    let mut pending_ids = pending_ids.clone();
    pending_ids.retain(|id| *id != result.agent_id);
    let mut completed = completed.clone();
    completed.push(result);
    if !pending_ids.is_empty() {
        return Some(Step::new(ConvState::AwaitingSubAgents {
            pending_ids,
            completed,
            agents: agents.clone(),
            call_id: call_id.clone(),
            run: run.clone(),
        }));
    }
    Some(sub_agents_done(
        ctx,
        (**run).clone(),
        call_id,
        agents,
        &completed,
    ))
}
