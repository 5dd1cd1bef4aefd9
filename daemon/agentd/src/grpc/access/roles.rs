//! The rule table: the least role each RPC and each Attach frame needs,
//! and the refusal a client whose role falls short gets.

use agent_proto::v1::AgentServiceRpc as Rpc;
use agentd_core::ClientRole;
use tonic::Status;

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// At least this role.
    Role(ClientRole),
    /// The local socket: managing tokens, trusting directories (which
    /// lets a project's hooks run commands unasked).
    Local,
}

/// The rule table: the least each RPC of `agent.v1.AgentService` needs.
/// A `match` over the RPCs `agent-proto`'s build script generates from the
/// service's descriptor, without a wildcard arm: a new RPC does not compile
/// until it has its rule here.
pub(crate) const fn rule(rpc: Rpc) -> Need {
    use ClientRole::{Approver, Driver, Viewer};
    match rpc {
        Rpc::CreateConversation => Need::Role(Driver),
        Rpc::ListConversations => Need::Role(Viewer),
        Rpc::GetConversation => Need::Role(Viewer),
        Rpc::SendMessage => Need::Role(Driver),
        Rpc::CancelConversation => Need::Role(Driver),
        Rpc::DropQueuedMessage => Need::Role(Driver),
        Rpc::AnswerPermission => Need::Role(Approver),
        Rpc::ListShells => Need::Role(Viewer),
        Rpc::ReadShellOutput => Need::Role(Viewer),
        Rpc::KillShell => Need::Role(Driver),
        // Each frame after `subscribe` is checked too: see [`frame_need`].
        Rpc::Attach => Need::Role(Viewer),
        Rpc::ExportConversations => Need::Role(Viewer),
        Rpc::ImportConversations => Need::Role(Driver),
        Rpc::GetUsage => Need::Role(Viewer),
        Rpc::SetDirectoryTrust => Need::Local,
        Rpc::ListTrustedDirectories => Need::Role(Viewer),
        Rpc::GetDaemonInfo => Need::Role(Viewer),
        Rpc::UpdateConversation => Need::Role(Driver),
        Rpc::CompactConversation => Need::Role(Driver),
        Rpc::ContinueConversation => Need::Role(Driver),
        Rpc::ListMcpServers => Need::Role(Viewer),
        // Raising a budget decides what the conversation may spend: a driver's.
        Rpc::AnswerBudget => Need::Role(Driver),
        Rpc::CreateToken => Need::Local,
        Rpc::ListTokens => Need::Local,
        Rpc::RevokeToken => Need::Local,
        Rpc::GetAudit => Need::Role(Viewer),
        // Rewriting files and forking the transcript: a driver's.
        Rpc::Rewind => Need::Role(Driver),
        // Putting conversations away changes what every client sees, and a
        // delete cannot be undone: a driver's, the role that administers
        // conversations (tokens and trust stay local).
        Rpc::DeleteConversation => Need::Role(Driver),
        Rpc::ArchiveConversation => Need::Role(Driver),
        Rpc::RenameConversation => Need::Role(Driver),
        // Steering a running command, like a cancel: a driver's.
        Rpc::BackgroundCommand => Need::Role(Driver),
        Rpc::KillCommand => Need::Role(Driver),
        Rpc::ListAgentTypes => Need::Role(Viewer),
    }
}

/// The agent service's path prefix.
const SERVICE_PREFIX: &str = "/agent.v1.AgentService/";

/// What a request to `path` needs, and the name to give it in a refusal.
/// Health checks and reflection need a viewer; an unknown method of the
/// agent service (or of any other) a driver, so nothing is open by
/// omission.
pub(crate) fn need(path: &str) -> (Need, &str) {
    if let Some(rpc) = Rpc::from_path(path) {
        return (rule(rpc), rpc.name());
    }
    if let Some(method) = path.strip_prefix(SERVICE_PREFIX) {
        return (Need::Role(ClientRole::Driver), method);
    }
    if path.starts_with("/grpc.health.v1.Health/")
        || path.starts_with("/grpc.reflection.v1.ServerReflection/")
        || path.starts_with("/grpc.reflection.v1alpha.ServerReflection/")
    {
        return (Need::Role(ClientRole::Viewer), path);
    }
    (Need::Role(ClientRole::Driver), path)
}

/// An Attach frame, for [`frame_need`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    Subscribe,
    Create,
    Send,
    Answer,
    Cancel,
    Budget,
    /// `background` and `kill`: steering a running command.
    Command,
}

/// The least role an Attach frame needs, and what it is called in a
/// refusal.
pub(crate) fn frame_need(frame: FrameKind) -> (ClientRole, &'static str) {
    match frame {
        FrameKind::Subscribe => (ClientRole::Viewer, "the Attach `subscribe` frame"),
        FrameKind::Create => (ClientRole::Driver, "the Attach `create` frame"),
        FrameKind::Send => (ClientRole::Driver, "the Attach `send` frame"),
        FrameKind::Answer => (ClientRole::Approver, "the Attach `answer` frame"),
        FrameKind::Cancel => (ClientRole::Driver, "the Attach `cancel` frame"),
        FrameKind::Budget => (ClientRole::Driver, "the Attach `budget` frame"),
        FrameKind::Command => (
            ClientRole::Driver,
            "the Attach `background` and `kill` frames",
        ),
    }
}

/// What a role may not do, for refusals.
fn lacks(role: ClientRole) -> &'static str {
    match role {
        ClientRole::Viewer => "a viewer sees everything and changes nothing",
        ClientRole::Approver => {
            "an approver may answer permission requests but not send messages, cancel or change settings"
        }
        ClientRole::Driver => "a driver may do everything but manage tokens and trust",
    }
}

/// Refuses `what` to a client whose role is `role` when it needs `needed`:
/// PERMISSION_DENIED naming both and what the role lacks.
pub(crate) fn check_role(role: ClientRole, needed: ClientRole, what: &str) -> Result<(), Status> {
    if role.allows(needed) {
        return Ok(());
    }
    let article = if role == ClientRole::Approver {
        "an"
    } else {
        "a"
    };
    Err(Status::permission_denied(format!(
        "{what} needs the {needed} role; this client is {article} {role} ({})",
        lacks(role)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rpc_has_exactly_one_rule() {
        // The `match` in `rule` gives each RPC one rule (the compiler
        // refuses a missing or a repeated arm); each is found by its path.
        assert!(
            Rpc::ALL.len() > 20,
            "the RPCs were generated: {:?}",
            Rpc::ALL
        );
        for &rpc in Rpc::ALL {
            assert_eq!(need(rpc.path()), (rule(rpc), rpc.name()), "{rpc:?}");
            assert_eq!(
                need(&format!("{SERVICE_PREFIX}{}", rpc.name())).0,
                rule(rpc)
            );
        }
    }

    #[test]
    fn the_rule_table_says_what_each_role_may_call() {
        use ClientRole::*;
        let may =
            |role: ClientRole, method: &str| match need(&format!("{SERVICE_PREFIX}{method}")).0 {
                Need::Role(r) => role.allows(r),
                Need::Local => false,
            };
        for method in [
            "ListConversations",
            "GetConversation",
            "Attach",
            "ReadShellOutput",
            "GetAudit",
            "GetUsage",
        ] {
            assert!(may(Viewer, method), "a viewer sees {method}");
        }
        for method in [
            "SendMessage",
            "CancelConversation",
            "AnswerPermission",
            "UpdateConversation",
            "KillShell",
            "CreateConversation",
            "CompactConversation",
            "ContinueConversation",
            "DropQueuedMessage",
            "ImportConversations",
            "AnswerBudget",
            "DeleteConversation",
            "ArchiveConversation",
            "RenameConversation",
        ] {
            assert!(!may(Viewer, method), "a viewer may not call {method}");
        }
        assert!(may(Approver, "AnswerPermission"));
        for method in [
            "SendMessage",
            "CancelConversation",
            "UpdateConversation",
            "KillShell",
            "CreateConversation",
            "AnswerBudget",
            "DeleteConversation",
            "ArchiveConversation",
            "RenameConversation",
            "BackgroundCommand",
            "KillCommand",
        ] {
            assert!(!may(Approver, method), "an approver may not call {method}");
            assert!(may(Driver, method), "a driver may call {method}");
        }
        for method in [
            "CreateToken",
            "ListTokens",
            "RevokeToken",
            "SetDirectoryTrust",
        ] {
            assert_eq!(need(&format!("{SERVICE_PREFIX}{method}")).0, Need::Local);
        }
        // Nothing is open by omission.
        assert_eq!(need("/agent.v1.AgentService/Nope").0, Need::Role(Driver));
        assert_eq!(need("/other.Service/Call").0, Need::Role(Driver));
        assert_eq!(need("/grpc.health.v1.Health/Check").0, Need::Role(Viewer));
    }

    #[test]
    fn frames_need_what_their_unary_forms_need() {
        let unary = |m: &str| match need(&format!("{SERVICE_PREFIX}{m}")).0 {
            Need::Role(r) => r,
            Need::Local => unreachable!(),
        };
        assert_eq!(frame_need(FrameKind::Send).0, unary("SendMessage"));
        assert_eq!(frame_need(FrameKind::Answer).0, unary("AnswerPermission"));
        assert_eq!(frame_need(FrameKind::Cancel).0, unary("CancelConversation"));
        assert_eq!(frame_need(FrameKind::Subscribe).0, unary("Attach"));
        assert_eq!(frame_need(FrameKind::Create).0, unary("CreateConversation"));
        assert_eq!(frame_need(FrameKind::Command).0, unary("BackgroundCommand"));
        assert_eq!(frame_need(FrameKind::Command).0, unary("KillCommand"));
    }

    #[test]
    fn a_refusal_names_the_rule_and_the_role() {
        let refused =
            check_role(ClientRole::Viewer, ClientRole::Driver, "SendMessage").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            refused.message(),
            "SendMessage needs the driver role; this client is a viewer (a viewer sees everything and changes nothing)"
        );
        assert!(check_role(ClientRole::Approver, ClientRole::Approver, "x").is_ok());
    }
}
