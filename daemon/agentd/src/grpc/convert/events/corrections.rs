//! Correction events: the daemon's attempts to have the model repair a
//! failed tool call, and how they ended.

use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// A correction event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::CorrectionAttempt {
            attempt,
            max_attempts,
            tool,
            error,
            fallback_request,
            fallback_tools,
        } => E::CorrectionAttempt(pb::CorrectionAttempt {
            attempt: *attempt,
            max_attempts: *max_attempts,
            tool: tool.clone(),
            error: error.clone(),
            fallback_request: fallback_request.clone(),
            fallback_tools: fallback_tools.clone(),
        }),
        EventKind::CorrectionSucceeded { attempts, tool } => {
            E::CorrectionSuccess(pb::CorrectionSuccess {
                attempts: *attempts,
                tool: tool.clone(),
            })
        }
        EventKind::CorrectionFailed {
            attempts,
            tool,
            error,
            message,
        } => E::CorrectionFailed(pb::CorrectionFailed {
            attempts: *attempts,
            tool: tool.clone(),
            error: error.clone(),
            message: message.clone(),
        }),
        other => super::misrouted(other),
    }
}
