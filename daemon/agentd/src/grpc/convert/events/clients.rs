//! Client events: who attached or left, the settings and queue they
//! changed, and reached budgets answered (a budget reached is a notice).

use crate::grpc::convert::{budget_stop, client, mode, queued};
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// A client event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::ClientAttached(c) => E::ClientAttached(pb::ClientAttached {
            client: Some(client(c)),
        }),
        EventKind::ClientDetached(c) => E::ClientDetached(pb::ClientDetached {
            client: Some(client(c)),
        }),
        EventKind::SettingsChanged {
            mode: m,
            model,
            context_window,
            additional_dirs,
            by,
        } => E::SettingsChanged(pb::SettingsChanged {
            mode: mode(*m) as i32,
            model: model.clone(),
            context_window: *context_window,
            by: by.clone(),
            additional_dirs: additional_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
        }),
        EventKind::QueueChanged(q) => E::QueueChanged(pb::QueueChanged { queued: queued(q) }),
        EventKind::BudgetResolved {
            stop,
            raised_by,
            client: by,
        } => E::BudgetResolved(pb::BudgetResolved {
            stop: Some(budget_stop(stop)),
            raised: raised_by.is_some(),
            raised_by: raised_by.unwrap_or(0),
            by: by.as_ref().map(client),
        }),
        other => super::misrouted(other),
    }
}
