//! Plan events: a plan generated, confirmed, rejected, its steps'
//! progress, and the todo list replaced (a suggestion to plan is a
//! notice).

use crate::grpc::convert::{mode, plan};
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use agentd_core::plan::{Plan, PlanEvent, StepStatus};
use pb::attach_response::Event as E;

/// What happened to a plan, as the event that says so.
pub(super) fn plan_event(change: &PlanEvent, p: &Plan) -> pb::attach_response::Event {
    use pb::attach_response::Event as E;
    let wire = Some(plan(p));
    match change {
        PlanEvent::Generated => E::PlanGenerated(pb::PlanGenerated { plan: wire }),
        PlanEvent::Confirmed { mode: m, edited } => E::PlanConfirmed(pb::PlanConfirmed {
            plan: wire,
            mode: mode(*m) as i32,
            edited: *edited,
        }),
        PlanEvent::Rejected { feedback } => E::PlanRejected(pb::PlanRejected {
            plan: wire,
            feedback: feedback.clone(),
        }),
        PlanEvent::Step(c) => {
            let step = pb::PlanStepChanged {
                step_id: c.step_id.clone(),
                note: c.note.clone().unwrap_or_default(),
                plan: wire,
            };
            match c.to {
                StepStatus::InProgress => E::PlanStepStarted(step),
                StepStatus::Completed => E::PlanStepCompleted(step),
                StepStatus::Failed => E::PlanStepFailed(step),
                // A step never goes back to pending; were it to, it would
                // be reported as skipped work rather than not at all.
                StepStatus::Skipped | StepStatus::Pending => E::PlanStepSkipped(step),
            }
        }
        PlanEvent::TodoUpdated => E::TodoUpdated(pb::TodoUpdated { plan: wire }),
    }
}

/// A plan event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::Plan { change, plan: p } => plan_event(change, p),
        other => super::misrouted(other),
    }
}
