//! Read-only calls that start while the reply still streams (seed 002's
//! flow: a tool starts at its block's `content_block_stop`).
//!
//! The runtime reports each tool block as it completes
//! (`Event::ToolCallStreamed`). A call starts at once when everything
//! before it in the reply started early too, it only reads, and nothing
//! needs to be asked about it: the permission verdict is `Allow` without a
//! hook to run and no loop is suspected. Any other call closes the early
//! start for the rest of the reply, so mutating calls keep their order
//! and their permission step, and run after the reply as always.
//!
//! When the reply ends, the calls started early enter its run as running
//! or answered ([`adopt`]). A reply that fails, is retried, cancelled or
//! handed to a continuation aborts the ones still running and drops every
//! early result: the transcript never held their calls, so the chain
//! stays valid.

use super::permissions::verdict;
use super::{Inputs, Step};
use crate::effect::Effect;
use crate::message::{ToolCall, ToolResult};
use crate::permission::Verdict;
use crate::state::{ConvState, EarlyCalls, ToolRun};
use crate::tools::Tool;

/// A tool block of the streaming reply is complete; `preceding` are the
/// ids of the reply's calls before it.
pub(super) fn on_streamed(
    state: &ConvState,
    ctx: &Inputs<'_>,
    call: ToolCall,
    preceding: &[String],
) -> Option<Step> {
    let ConvState::LlmRequesting {
        attempt,
        iteration,
        retry: None,
        early,
    } = state
    else {
        return None;
    };
    let all_before_started = early.calls.len() == preceding.len()
        && early.calls.iter().zip(preceding).all(|(c, id)| c.id == *id);
    if !all_before_started || !may_start_early(ctx, *iteration, early, &call) {
        return None;
    }
    let mut early = early.clone();
    early.running.push(call.id.clone());
    early.calls.push(call.clone());
    Some(
        Step::new(ConvState::LlmRequesting {
            attempt: *attempt,
            iteration: *iteration,
            retry: None,
            early,
        })
        .with(Effect::ExecuteTool {
            call,
            background: false,
        }),
    )
}

/// Whether `call` may run before the reply has ended: read-only, not a
/// tool the scheduler answers itself, and allowed outright, judged as the
/// scheduler would judge it with the calls before it in the reply.
fn may_start_early(ctx: &Inputs<'_>, iteration: u32, early: &EarlyCalls, call: &ToolCall) -> bool {
    let answered_here = matches!(
        Tool::from_name(&call.name),
        Some(Tool::ProposePlan | Tool::UpdatePlan | Tool::SpawnAgents | Tool::SubmitResult)
    );
    if answered_here || !ctx.policy.is_read_only(&call.name) || !call.input.is_object() {
        return false;
    }
    let before = ToolRun {
        iteration,
        calls: early.calls.iter().cloned().chain([call.clone()]).collect(),
        ..ToolRun::default()
    };
    matches!(verdict(ctx, &before, call), Some(Verdict::Allow))
}

/// A call started early ended while the reply still streams.
pub(super) fn on_completed(state: &ConvState, result: ToolResult) -> Option<Step> {
    let ConvState::LlmRequesting {
        attempt,
        iteration,
        retry,
        early,
    } = state
    else {
        return None;
    };
    if !early.running.contains(&result.tool_use_id) {
        return None;
    }
    let mut early = early.clone();
    early.running.retain(|id| *id != result.tool_use_id);
    early.results.push(result);
    Some(Step::new(ConvState::LlmRequesting {
        attempt: *attempt,
        iteration: *iteration,
        retry: retry.clone(),
        early,
    }))
}

/// The reply's run with what started early: those calls running or
/// answered. An early call the reply does not have (it cannot: the blocks
/// are the reply's) is aborted, its result dropped.
pub(super) fn adopt(mut run: ToolRun, early: &EarlyCalls) -> (ToolRun, Option<Effect>) {
    let same = |id: &str| {
        let streamed = early.calls.iter().find(|c| c.id == id);
        run.calls
            .iter()
            .find(|c| c.id == id)
            .is_some_and(|c| Some(c) == streamed)
    };
    let strays: Vec<String> = early
        .running
        .iter()
        .filter(|id| !same(id))
        .cloned()
        .collect();
    let running: Vec<String> = early
        .running
        .iter()
        .filter(|id| same(id))
        .cloned()
        .collect();
    let results: Vec<ToolResult> = early
        .results
        .iter()
        .filter(|r| same(&r.tool_use_id))
        .cloned()
        .collect();
    run.running = running;
    run.results = results;
    (run, abort(&strays))
}

/// Stops the early calls still running (their results will not be used).
pub(super) fn abort_running(early: &EarlyCalls) -> Option<Effect> {
    abort(&early.running)
}

fn abort(ids: &[String]) -> Option<Effect> {
    (!ids.is_empty()).then(|| Effect::AbortTools {
        tool_use_ids: ids.to_vec(),
    })
}
