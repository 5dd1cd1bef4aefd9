//! Turn events: the conversation's state and messages, the reply as it
//! streams, usage and the instructions read (retries and errors are
//! notices, in `notices.rs`).

use crate::grpc::convert::{instructions, message, state, usage};
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// The turn event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::Resumed { after_seq } => E::Resumed(pb::Resumed {
            after_seq: *after_seq,
        }),
        EventKind::StateChanged {
            state: s,
            max_attempts,
        } => E::StateChanged(pb::StateChanged {
            state: Some(state(s, *max_attempts)),
        }),
        EventKind::MessageAppended {
            message_seq,
            message: m,
        } => E::MessageAppended(pb::MessageAppended {
            message: Some(message(*message_seq, m)),
        }),
        EventKind::ReplyBegin { attempt } => E::ReplyBegin(pb::ReplyBegin { attempt: *attempt }),
        EventKind::TextDelta { index, text } => E::TextDelta(pb::TextDelta {
            block_index: *index,
            text: text.clone(),
        }),
        EventKind::ThinkingDelta { index, text } => E::ThinkingDelta(pb::ThinkingDelta {
            block_index: *index,
            text: text.clone(),
        }),
        EventKind::UsageUpdated {
            last,
            total,
            cost_usd,
        } => E::UsageUpdated(pb::UsageUpdated {
            last: Some(usage(last)),
            total: Some(usage(total)),
            cost_usd: *cost_usd,
        }),
        EventKind::InstructionsLoaded { files, truncated } => {
            E::InstructionsLoaded(instructions(files, *truncated))
        }
        other => super::misrouted(other),
    }
}
