//! Sub-agent events: a child conversation started, its state, its tool
//! calls and its end.

use crate::grpc::convert::{state, usage};
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// Which sub-agent an event is about.
pub(crate) fn sub_agent_ref(r: &crate::runtime::SubAgentRef) -> pb::SubAgentRef {
    pb::SubAgentRef {
        conversation_id: r.conversation_id.clone(),
        agent_id: r.agent_id.clone(),
        description: r.description.clone(),
    }
}

/// A sub-agent event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::SubAgentStarted(r) => E::SubAgentStarted(pb::SubAgentStarted {
            sub_agent: Some(sub_agent_ref(r)),
        }),
        EventKind::SubAgentStateChanged {
            sub_agent,
            state: s,
            max_attempts,
        } => E::SubAgentStateChanged(pb::SubAgentStateChanged {
            sub_agent: Some(sub_agent_ref(sub_agent)),
            state: Some(state(s, *max_attempts)),
        }),
        EventKind::SubAgentToolCall {
            sub_agent,
            tool_use_id,
            name,
            summary,
            end,
        } => {
            let call = pb::SubAgentToolCall {
                sub_agent: Some(sub_agent_ref(sub_agent)),
                tool_use_id: tool_use_id.clone(),
                tool_name: name.clone(),
                summary: summary.clone(),
                is_error: end.is_some_and(|(e, _)| e),
                duration_ms: end.map_or(0, |(_, d)| d),
            };
            match end {
                None => E::SubAgentToolCallBegin(call),
                Some(_) => E::SubAgentToolCallEnd(call),
            }
        }
        EventKind::SubAgentFinished {
            sub_agent,
            success,
            summary,
            usage: u,
            cost_usd,
        } => E::SubAgentFinished(pb::SubAgentFinished {
            sub_agent: Some(sub_agent_ref(sub_agent)),
            success: *success,
            summary: summary.clone(),
            usage: Some(usage(u)),
            cost_usd: *cost_usd,
        }),
        other => super::misrouted(other),
    }
}
