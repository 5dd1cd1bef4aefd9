//! Permission requests and the answers clients give them, plan answers
//! included (a plan is approved, edited or rejected as a permission).

use super::{brief, client_request_id_from, mode_from};
use crate::runtime::{Answer, ClientInfo, PermissionView};
use agent_proto::v1 as pb;
use agentd_core::plan::{Plan, PlanAnswer, StepDraft, StepKind};
use agentd_core::{Decision, RuleScope};
use tonic::Status;

pub(crate) fn permission(v: &PermissionView) -> pb::PermissionRequest {
    pb::PermissionRequest {
        request_id: v.ask.request_id.clone(),
        tool_name: v.ask.tool_name.clone(),
        kind: super::tool_kind(&v.ask.tool_name),
        tool_use_id: v.ask.tool_use_id.clone(),
        input_json: v.ask.input.to_string(),
        summary: v.summary.clone(),
        diff: v.diff.clone().unwrap_or_default(),
        // A plan request offers no permission decision: it is answered
        // with a PlanAnswer.
        options: v
            .ask
            .options
            .iter()
            .filter(|d| {
                !matches!(
                    d,
                    Decision::ApprovePlan | Decision::RejectPlan | Decision::EditPlan
                )
            })
            .map(|d| decision(*d) as i32)
            .collect(),
        reason: v.ask.reason.clone(),
        suggested_rule: v.ask.suggested_rule.clone(),
        plan: (agentd_core::tools::Tool::from_name(&v.ask.tool_name)
            == Some(agentd_core::tools::Tool::ProposePlan))
        .then(|| Plan::from_input(&v.ask.input, &v.ask.tool_use_id).ok())
        .flatten()
        .map(|p| plan(&p)),
        sub_agent_conversation_id: v
            .sub_agent
            .as_ref()
            .map(|r| r.conversation_id.clone())
            .unwrap_or_default(),
        sub_agent_id: v
            .sub_agent
            .as_ref()
            .map(|r| r.agent_id.clone())
            .unwrap_or_default(),
        sub_agent_description: v
            .sub_agent
            .as_ref()
            .map(|r| r.description.clone())
            .unwrap_or_default(),
    }
}

pub(crate) fn decision(d: Decision) -> pb::PermissionDecision {
    match d {
        Decision::AllowOnce => pb::PermissionDecision::AllowOnce,
        Decision::AllowAlways => pb::PermissionDecision::AllowAlways,
        Decision::Deny => pb::PermissionDecision::Deny,
        Decision::DenyAndStop => pb::PermissionDecision::DenyAndStop,
        Decision::Never => pb::PermissionDecision::Never,
        Decision::Background => pb::PermissionDecision::Background,
        Decision::Cancelled => pb::PermissionDecision::Cancelled,
        // A plan's answers travel as `PlanAnswer`; a resolution says
        // which way it went in the permission decisions' terms (the
        // PlanConfirmed / PlanRejected event that follows says more).
        Decision::ApprovePlan | Decision::EditPlan => pb::PermissionDecision::AllowOnce,
        Decision::RejectPlan => pb::PermissionDecision::Deny,
    }
}

pub(crate) fn decision_from(d: i32) -> Result<Decision, Status> {
    match pb::PermissionDecision::try_from(d) {
        Ok(pb::PermissionDecision::AllowOnce) => Ok(Decision::AllowOnce),
        Ok(pb::PermissionDecision::AllowAlways) => Ok(Decision::AllowAlways),
        Ok(pb::PermissionDecision::Deny) => Ok(Decision::Deny),
        Ok(pb::PermissionDecision::DenyAndStop) => Ok(Decision::DenyAndStop),
        Ok(pb::PermissionDecision::Never) => Ok(Decision::Never),
        Ok(pb::PermissionDecision::Background) => Ok(Decision::Background),
        Ok(pb::PermissionDecision::Cancelled)
        | Ok(pb::PermissionDecision::Unspecified)
        | Err(_) => Err(Status::invalid_argument(format!(
            "{d} is not a decision a client can give"
        ))),
    }
}

/// Where a rule an answer adds applies; unset means the conversation.
pub(crate) fn rule_scope_from(scope: i32) -> Result<RuleScope, Status> {
    match pb::RuleScope::try_from(scope) {
        Ok(pb::RuleScope::Unspecified | pb::RuleScope::Conversation) => Ok(RuleScope::Conversation),
        Ok(pb::RuleScope::Project) => Ok(RuleScope::Project),
        Err(_) => Err(Status::invalid_argument(format!(
            "{scope} is not a rule scope (1: conversation, 2: project)"
        ))),
    }
}

/// A permission answer from the wire (the unary request and the Attach
/// frame carry the same fields).
pub(crate) fn answer_from(
    request_id: String,
    decision: i32,
    feedback: String,
    scope: i32,
    by: ClientInfo,
    client_request_id: String,
    plan_answer: Option<pb::PlanAnswer>,
) -> Result<Answer, Status> {
    let (decision, plan) = match plan_answer {
        Some(a) => {
            let (decision, answer) = plan_answer_from(a)?;
            (decision, Some(answer))
        }
        None => (decision_from(decision)?, None),
    };
    Ok(Answer {
        plan,
        request_id,
        decision,
        feedback: (!feedback.is_empty()).then_some(feedback),
        scope: rule_scope_from(scope)?,
        by: Some(by),
        client_request_id: client_request_id_from(client_request_id)?,
    })
}

/// A plan as clients see it.
pub(crate) fn plan(p: &Plan) -> pb::Plan {
    pb::Plan {
        intent: p.intent.clone(),
        risk: p.risk.as_str().to_string(),
        estimate_secs: p.estimate_secs.unwrap_or(0),
        steps: p
            .steps
            .iter()
            .map(|s| pb::PlanStep {
                id: s.draft.id.clone(),
                title: s.draft.title.clone(),
                kind: s.draft.kind.as_str().to_string(),
                files: s.draft.files.clone(),
                dependencies: s.draft.dependencies.clone(),
                status: s.status.as_str().to_string(),
                note: s.note.clone().unwrap_or_default(),
                estimate_secs: s.draft.estimate_secs.unwrap_or(0),
            })
            .collect(),
        phase: p.phase.as_str().to_string(),
        tool_use_id: p.tool_use_id.clone(),
    }
}

/// The steps of a client's plan edit (their statuses are ignored: every
/// edited step starts pending). The core checks them as a plan.
pub(crate) fn plan_steps_from(steps: &[pb::PlanStep]) -> Result<Vec<StepDraft>, Status> {
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let kind = StepKind::from_name(&s.kind).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "step {} ({}): kind {:?} is not one of analyze, edit, validate, test",
                    i + 1,
                    brief(&s.id),
                    brief(&s.kind)
                ))
            })?;
            Ok(StepDraft {
                id: s.id.trim().to_string(),
                title: s.title.trim().to_string(),
                kind,
                files: s.files.clone(),
                dependencies: s.dependencies.clone(),
                estimate_secs: (s.estimate_secs > 0).then_some(s.estimate_secs),
            })
        })
        .collect()
}

/// A plan answer from the wire, and the decision it amounts to.
pub(crate) fn plan_answer_from(a: pb::PlanAnswer) -> Result<(Decision, PlanAnswer), Status> {
    use pb::plan_answer::Answer as A;
    match a.answer {
        Some(A::Approve(x)) => Ok((
            Decision::ApprovePlan,
            PlanAnswer::Approve {
                mode: mode_from(x.mode)?,
            },
        )),
        Some(A::Reject(x)) => Ok((
            Decision::RejectPlan,
            PlanAnswer::Reject {
                feedback: x.feedback,
            },
        )),
        Some(A::Edit(x)) => Ok((
            Decision::EditPlan,
            PlanAnswer::Edit {
                steps: plan_steps_from(&x.steps)?,
                mode: mode_from(x.mode)?,
            },
        )),
        None => Err(Status::invalid_argument(
            "plan_answer names no answer: set approve, reject or edit",
        )),
    }
}
