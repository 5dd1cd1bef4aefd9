//! Clients as the wire names them: who is attached, their roles, and the
//! audit trail of what each did.

use crate::grpc::convert::decision;
use crate::runtime::ClientInfo;
use agent_proto::v1 as pb;
use tonic::Status;

pub(crate) fn client(c: &ClientInfo) -> pb::ClientInfo {
    pb::ClientInfo {
        client_id: c.id.clone(),
        name: c.name.clone(),
        role: role(c.role) as i32,
        token_name: c.token_name.clone().unwrap_or_default(),
        address: c.address.clone().unwrap_or_default(),
    }
}

/// A role as clients see it.
pub(crate) fn role(r: agentd_core::ClientRole) -> pb::ClientRole {
    match r {
        agentd_core::ClientRole::Viewer => pb::ClientRole::Viewer,
        agentd_core::ClientRole::Approver => pb::ClientRole::Approver,
        agentd_core::ClientRole::Driver => pb::ClientRole::Driver,
    }
}

/// A role a client names: `None` for unspecified, refused when unknown.
pub(crate) fn role_from(raw: i32) -> Result<Option<agentd_core::ClientRole>, Status> {
    match pb::ClientRole::try_from(raw) {
        Ok(pb::ClientRole::Unspecified) => Ok(None),
        Ok(pb::ClientRole::Viewer) => Ok(Some(agentd_core::ClientRole::Viewer)),
        Ok(pb::ClientRole::Approver) => Ok(Some(agentd_core::ClientRole::Approver)),
        Ok(pb::ClientRole::Driver) => Ok(Some(agentd_core::ClientRole::Driver)),
        Err(_) => Err(Status::invalid_argument(format!(
            "unknown client role {raw}"
        ))),
    }
}

/// An entry of a conversation's audit trail as clients see it.
pub(crate) fn audit_entry(r: &crate::store::access::AuditRecord) -> pb::AuditEntry {
    use crate::store::access::AuditAction;
    use pb::audit_entry::Action;
    pb::AuditEntry {
        at_ms: r.at_ms,
        client: Some(client(&r.client)),
        action: Some(match &r.action {
            AuditAction::MessageSent { text, queued_id } => {
                Action::MessageSent(pb::AuditMessageSent {
                    text: text.clone(),
                    queued_id: queued_id.clone().unwrap_or_default(),
                })
            }
            AuditAction::PermissionAnswered {
                request_id,
                decision: d,
                tool,
                summary,
            } => Action::PermissionAnswered(pb::AuditPermissionAnswered {
                request_id: request_id.clone(),
                decision: decision(*d) as i32,
                tool: tool.clone(),
                summary: summary.clone(),
            }),
        }),
    }
}
