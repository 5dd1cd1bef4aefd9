//! The one place that maps between prost types and the daemon's own types,
//! one module per family of wire types; this one holds what they all use:
//! quoting client input in errors, runtime errors as gRPC statuses, and the
//! kind of a tool a call names.

mod agent_types;
mod clients;
mod conversations;
mod environment;
mod events;
mod mcp;
mod messages;
mod permissions;
mod shells;
mod transfer;

pub(crate) use agent_types::agent_types;
pub(crate) use clients::{audit_entry, client, role, role_from};
pub(crate) use conversations::{
    budget_stop, checkpoint_turns, code_rewound, error_kind, instructions, mode, mode_from, queued,
    state, summary, usage, usage_from, usage_line,
};
pub(crate) use environment::{environment_from, environment_origin};
pub(crate) use events::{event, event_owned};
pub(crate) use mcp::{mcp_server_from, mcp_servers};
pub(crate) use messages::{image, image_from, message, message_from, thinking_from, uploads};
pub(crate) use permissions::{answer_from, decision, permission, plan};
pub(crate) use shells::{shell, shell_status};
pub(crate) use transfer::{exported_from, exported_images};

use crate::runtime::RuntimeError;
use agent_proto::v1 as pb;
use agentd_core::Rejected;
use tonic::Status;

pub(crate) use crate::truncate::brief;

/// The longest status message the daemon sends: a status travels in an
/// HTTP/2 header block, which clients bound (grpc-go and tonic at 16 KiB,
/// some at 8 KiB), and a status over the bound reaches them as a protocol
/// error instead of its message.
const MESSAGE_BYTES: usize = 1024;

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn head(s: &str, max: usize) -> &str {
    &s[..crate::truncate::floor_char_boundary(s, max)]
}

/// A status with `message` cut to [`MESSAGE_BYTES`].
pub(crate) fn bounded(code: tonic::Code, message: String) -> Status {
    if message.len() <= MESSAGE_BYTES {
        return Status::new(code, message);
    }
    let cut = format!(
        "{}… ({} bytes in all)",
        head(&message, MESSAGE_BYTES - 32),
        message.len()
    );
    Status::new(code, cut)
}

/// The one mapping from runtime errors to gRPC statuses.
pub(crate) fn to_status(e: RuntimeError) -> Status {
    use tonic::Code;
    match e {
        RuntimeError::NotFound(id) => {
            Status::not_found(format!("unknown conversation {}", brief(&id)))
        }
        RuntimeError::Ambiguous { .. } => bounded(Code::InvalidArgument, e.to_string()),
        RuntimeError::InvalidArgument(m) => bounded(Code::InvalidArgument, m),
        RuntimeError::NotAllowed(m) => bounded(Code::FailedPrecondition, m),
        RuntimeError::StaleTurn { .. } => Status::failed_precondition(e.to_string()),
        RuntimeError::NotQueued { id, conversation } => Status::not_found(
            RuntimeError::NotQueued {
                id: brief(&id),
                conversation,
            }
            .to_string(),
        ),
        RuntimeError::QueueFull(_) => Status::resource_exhausted(e.to_string()),
        RuntimeError::HookBlocked(_) => bounded(Code::FailedPrecondition, e.to_string()),
        RuntimeError::Rejected(r) => match r {
            Rejected::Busy
            | Rejected::CancellationInProgress
            | Rejected::ContextExhausted
            | Rejected::NoPendingPermission
            | Rejected::NotApplicable { .. } => Status::failed_precondition(r.to_string()),
            Rejected::EmptyMessage | Rejected::DecisionNotOffered(_) => {
                Status::invalid_argument(r.to_string())
            }
            Rejected::UnknownPermissionRequest(id) => {
                Status::not_found(Rejected::UnknownPermissionRequest(brief(&id)).to_string())
            }
            Rejected::InvalidPlanAnswer(why) => bounded(Code::InvalidArgument, why),
        },
        RuntimeError::Store(e) => bounded(Code::Internal, e.to_string()),
        RuntimeError::ShuttingDown => Status::unavailable("agentd is shutting down"),
    }
}

/// The wire kind of the tool called `name`, which every message naming a
/// tool carries so that clients never match tool names: OTHER for MCP
/// servers' tools and names the daemon does not have.
pub(crate) fn tool_kind(name: &str) -> i32 {
    use agentd_core::tools::Kind;
    let kind = match agentd_core::tools::kind_of(name) {
        Kind::Read => pb::ToolKind::Read,
        Kind::Edit => pb::ToolKind::Edit,
        Kind::Search => pb::ToolKind::Search,
        Kind::Execute => pb::ToolKind::Execute,
        Kind::Think => pb::ToolKind::Think,
        Kind::SwitchMode => pb::ToolKind::SwitchMode,
        Kind::Fetch => pb::ToolKind::Fetch,
        Kind::Other => pb::ToolKind::Other,
    };
    kind as i32
}

/// The longest client request id accepted.
const CLIENT_REQUEST_ID_BYTES: usize = 128;

/// A request's client request id: none when empty; refused when too long.
pub(crate) fn client_request_id_from(raw: String) -> Result<Option<String>, Status> {
    if raw.len() > CLIENT_REQUEST_ID_BYTES {
        return Err(Status::invalid_argument(format!(
            "client_request_id is {} bytes; at most {CLIENT_REQUEST_ID_BYTES} are accepted",
            raw.len()
        )));
    }
    Ok((!raw.is_empty()).then_some(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_quoted_by_its_start_and_size() {
        assert_eq!(brief("01J2ABC"), "01J2ABC");
        let long = "é".repeat(100);
        let quoted = brief(&long);
        assert_eq!(quoted, format!("{}… (200 bytes)", "é".repeat(32)));
        let status = to_status(RuntimeError::NotFound("A".repeat(300_000)));
        assert_eq!(
            status.message(),
            format!("unknown conversation {}… (300000 bytes)", "A".repeat(64))
        );
        let long_message = bounded(tonic::Code::InvalidArgument, "x".repeat(5000));
        assert!(
            long_message.message().len() <= 1024,
            "{}",
            long_message.message().len()
        );
        assert!(long_message.message().ends_with("… (5000 bytes in all)"));
        let short = bounded(tonic::Code::Internal, "short".into());
        assert_eq!(
            (short.code(), short.message()),
            (tonic::Code::Internal, "short")
        );
    }

    #[test]
    fn every_tool_has_a_wire_kind_and_other_names_are_other() {
        use agentd_core::tools::Tool;
        let kind = |name: &str| pb::ToolKind::try_from(tool_kind(name)).unwrap();
        for &tool in Tool::ALL {
            assert_ne!(kind(tool.name()), pb::ToolKind::Unspecified, "{tool}");
        }
        assert_eq!(kind("read"), pb::ToolKind::Read);
        assert_eq!(kind("patch"), pb::ToolKind::Edit);
        assert_eq!(kind("keyword_search"), pb::ToolKind::Search);
        assert_eq!(kind("bash"), pb::ToolKind::Execute);
        assert_eq!(kind("think"), pb::ToolKind::Think);
        assert_eq!(kind("request_mode_upgrade"), pb::ToolKind::SwitchMode);
        assert_eq!(kind("web_fetch"), pb::ToolKind::Fetch);
        assert_eq!(kind("propose_plan"), pb::ToolKind::Other);
        assert_eq!(kind("mcp__github__create_issue"), pb::ToolKind::Other);
        assert_eq!(kind("doom_loop"), pb::ToolKind::Other);
    }

    #[test]
    fn an_imported_call_cannot_claim_a_kind_its_name_does_not_have() {
        // A client (an import, a remote token) sends the kind too; the
        // daemon keeps only the name and says the kind itself.
        let claimed = pb::Message {
            seq: 1,
            role: pb::Role::Assistant as i32,
            content: vec![pb::ContentBlock {
                block: Some(pb::content_block::Block::ToolUse(pb::ToolUseBlock {
                    id: "t1".into(),
                    name: "bash".into(),
                    input_json: r#"{"command":"rm -rf x"}"#.into(),
                    kind: pb::ToolKind::Read as i32,
                })),
            }],
            ..Default::default()
        };
        let stored = messages::message_from(&claimed).unwrap();
        let shown = messages::message(1, &stored);
        match &shown.content[0].block {
            Some(pb::content_block::Block::ToolUse(t)) => {
                assert_eq!(t.kind(), pb::ToolKind::Execute, "{t:?}");
            }
            other => panic!("not a tool use: {other:?}"),
        }
    }
}
