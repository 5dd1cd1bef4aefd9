//! History events: a conversation continued in a new one, code rewound, a
//! conversation forked (the context filling up is a notice, in
//! `notices.rs`).

use crate::grpc::convert::code_rewound;
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// A context or history event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::ConversationContinued {
            conversation_id,
            hop,
            automatic,
        } => E::ConversationContinued(pb::ConversationContinued {
            conversation_id: conversation_id.clone(),
            hop: *hop,
            automatic: *automatic,
        }),
        EventKind::CodeRewound {
            message_seq,
            restored,
            plan_step_id,
        } => E::CodeRewound(code_rewound(*message_seq, restored, plan_step_id)),
        EventKind::ConversationForked {
            message_seq,
            forked_id,
        } => E::ConversationForked(pb::ConversationForked {
            message_seq: *message_seq,
            forked_conversation_id: forked_id.clone(),
        }),
        other => super::misrouted(other),
    }
}
