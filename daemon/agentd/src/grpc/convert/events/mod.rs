//! Conversation events as they go on the wire. [`event`] routes each kind
//! of event to the module of its family; what every family shares (the
//! frame around it, the snapshot) is here.

mod clients;
mod context;
mod notices;
mod plans;
mod sub_agents;
mod tools;
mod turn;

use crate::grpc::convert::messages::block_owned;
use crate::grpc::convert::{brief, client, message, permission, plan, role, summary};
use crate::runtime::{ConvEvent, EventKind, SnapshotData};
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// An event as it goes on the wire.
pub(crate) fn event(e: &ConvEvent) -> pb::AttachResponse {
    pb::AttachResponse {
        seq: e.seq,
        at_ms: e.at_ms,
        event: Some(wire_event(&e.kind, e.seq)),
    }
}

/// Each kind of event (`seq`: the event's, which a snapshot carries) routed
/// to its family's conversion. There is no wildcard arm, so a new kind of
/// event must be given a family, and that family its wire form.
fn wire_event(kind: &EventKind, seq: u64) -> E {
    use EventKind as K;
    match kind {
        K::Snapshot(s) => E::Snapshot(snapshot(s, seq)),
        K::Resumed { .. }
        | K::StateChanged { .. }
        | K::MessageAppended { .. }
        | K::ReplyBegin { .. }
        | K::TextDelta { .. }
        | K::ThinkingDelta { .. }
        | K::UsageUpdated { .. }
        | K::InstructionsLoaded { .. } => turn::event(kind),
        K::ToolCallBegin { .. }
        | K::ToolCallEnd { .. }
        | K::ToolOutputDelta { .. }
        | K::PermissionRequested(_)
        | K::PermissionResolved { .. }
        | K::HookRan(_)
        | K::ShellStarted(_)
        | K::ShellExited(_) => tools::event(kind),
        K::ClientAttached(_)
        | K::ClientDetached(_)
        | K::SettingsChanged { .. }
        | K::QueueChanged(_)
        | K::BudgetResolved { .. } => clients::event(kind),
        K::ConversationContinued { .. } | K::CodeRewound { .. } | K::ConversationForked { .. } => {
            context::event(kind)
        }
        K::Plan { .. } => plans::event(kind),
        K::SubAgentStarted(_)
        | K::SubAgentStateChanged { .. }
        | K::SubAgentToolCall { .. }
        | K::SubAgentFinished { .. } => sub_agents::event(kind),
        K::Notice(_) | K::ContextExhausted { .. } => notices::event(kind),
    }
}

/// What a family's conversion gives for a kind [`wire_event`] does not
/// route to it: a mistake in the routing, which the client is told of
/// rather than the daemon stopping.
fn misrouted(kind: &EventKind) -> E {
    let kind = brief(&format!("{kind:?}"));
    tracing::error!("an event reached the wrong conversion: {kind}");
    E::Error(pb::ErrorEvent {
        message: format!("agentd could not send an event: {kind}"),
        kind: pb::ErrorKind::Unknown as i32,
    })
}

/// An event this client alone owns (deltas merged for it) as it goes on
/// the wire: the text moves instead of being copied.
pub(crate) fn event_owned(e: ConvEvent) -> pb::AttachResponse {
    use pb::attach_response::Event as E;
    let ev = match e.kind {
        EventKind::TextDelta { index, text } => E::TextDelta(pb::TextDelta {
            block_index: index,
            text,
        }),
        EventKind::ThinkingDelta { index, text } => E::ThinkingDelta(pb::ThinkingDelta {
            block_index: index,
            text,
        }),
        _ => return event(&e),
    };
    pb::AttachResponse {
        seq: e.seq,
        at_ms: e.at_ms,
        event: Some(ev),
    }
}

fn snapshot(s: &SnapshotData, seq: u64) -> pb::Snapshot {
    let partial = (!s.partial.is_empty()).then(|| pb::Message {
        seq: 0,
        role: pb::Role::Assistant as i32,
        content: s.partial.to_blocks().into_iter().map(block_owned).collect(),
        ..Default::default()
    });
    pb::Snapshot {
        conversation: Some(summary(&s.record, s.max_attempts, seq, &s.pricing)),
        messages: s
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| message(i as u64 + 1, m))
            .collect(),
        partial_reply: partial,
        pending_permission: s.pending.as_ref().map(permission),
        clients: s.clients.iter().map(client).collect(),
        your_client_id: s.your_client_id.clone(),
        your_role: s
            .clients
            .iter()
            .find(|c| c.id == s.your_client_id)
            .map_or(pb::ClientRole::Unspecified, |c| role(c.role)) as i32,
        plan: s.record.conversation.plan.as_ref().map(plan),
    }
}
