//! The `agent.v1.AgentService` implementation: validates requests, resolves
//! id prefixes, and hands the work to the runtime.
//!
//! This module holds the service, what every RPC family shares, and the
//! trait impl that routes each RPC to the module of its family.
//!
//! A client's bad frame is that client's error: tonic refuses a message
//! over `[grpc] max_message_bytes`, this module user text over
//! `max_text_bytes`; the refusal goes to the sender only (a status on a
//! unary call, an error event with sequence number 0 on Attach, whose stream
//! stays usable), and a frame that cannot be decoded ends its own stream
//! with a status naming the limit.

mod admin;
mod attach;
mod conversations;
mod forward;
mod messages;
mod removal;
mod shells;
mod transfer;
mod usage;

use super::access::{self, Access, Caller};
use super::admission::{self, Grants, Source};
use super::convert;
use crate::config::GrpcSection;
use crate::runtime::Manager;
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_server::AgentService;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// The service.
#[derive(Debug, Clone)]
pub(crate) struct Service {
    manager: Arc<Manager>,
    shutdown: CancellationToken,
    /// Tokens and the TCP listener's identity.
    access: Arc<Access>,
    /// Who may ask for a model check, and how often.
    model_checks: Arc<super::info::ModelChecks>,
}

/// Who answers a request over a unary call: the name the request gives,
/// else the caller's (metadata or token), else `fallback` for a local
/// script that gave none.
fn answerer(who: &Caller, client_name: String, fallback: &str) -> crate::runtime::ClientInfo {
    let name = if client_name.is_empty() && who.name.is_none() && who.remote.is_none() {
        fallback.to_string()
    } else {
        client_name
    };
    who.client(String::new(), &name, None)
}

/// Who made `request`, as the access layer found (it admitted the call
/// already; a request without a caller did not pass it and is refused).
fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("a request that did not pass the access layer"))
}

impl Service {
    /// A service over `manager`; `shutdown` ends every open stream.
    pub(crate) fn new(
        manager: Arc<Manager>,
        shutdown: CancellationToken,
        access: Arc<Access>,
    ) -> Self {
        Service {
            manager,
            shutdown,
            access,
            model_checks: Default::default(),
        }
    }

    fn max_attempts(&self) -> u32 {
        self.manager.shared().config.retry.max_attempts
    }

    fn summary(&self, r: &crate::store::ConversationRecord) -> pb::ConversationSummary {
        let pricing = self.manager.shared().config.models.pricing(r);
        convert::summary(r, self.max_attempts(), 0, &pricing)
    }

    fn limits(&self) -> &GrpcSection {
        &self.manager.shared().config.grpc
    }

    /// Refuses a request from `source` that carries a grant it may not
    /// give (see `admission`).
    fn admit(&self, source: Source, grants: &Grants) -> Result<(), Status> {
        admission::admit(source, &self.roots_for(source), grants)
    }

    /// The directories `source` may work in, looked up only for a remote
    /// one (the others are held to no roots).
    fn roots_for(&self, source: Source) -> Vec<PathBuf> {
        match source {
            Source::Remote | Source::Import { remote: true } => admission::remote_roots(
                &self.manager.shared().config.remote.roots,
                std::env::var_os("HOME")
                    .as_deref()
                    .map(std::path::Path::new),
            ),
            Source::Local | Source::Import { remote: false } => Vec::new(),
        }
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Refuses user text (`what`: "message text", "prompt", ...) over
/// `[grpc] max_text_bytes`, naming the limit.
fn check_text(limits: &GrpcSection, what: &str, text: &str) -> Result<(), Status> {
    if text.len() > limits.max_text_bytes {
        return Err(Status::invalid_argument(format!(
            "{what} is {} bytes, over the daemon's limit of {} bytes (`max_text_bytes` in the [grpc] section of agentd's config)",
            text.len(),
            limits.max_text_bytes
        )));
    }
    Ok(())
}

fn display_name(name: &str) -> String {
    access::display_name(name)
}

/// The status a client gets when a frame of its stream (`what`: "Attach
/// frame", "conversation 3 of the import") cannot be read. When it was over
/// the size limit, it says which setting raises it.
fn frame_status(status: Status, what: &str) -> Status {
    if status.code() == tonic::Code::OutOfRange {
        return Status::out_of_range(format!(
            "{what} refused: {} (`max_message_bytes` in the [grpc] section of agentd's config)",
            status.message()
        ));
    }
    Status::new(status.code(), format!("{what}: {}", status.message()))
}

fn validate_dir(raw_path: &str, what: &str) -> Result<PathBuf, Status> {
    let path = PathBuf::from(raw_path);
    let raw = convert::brief(raw_path);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{what} must be an absolute path, got {raw:?}"
        )));
    }
    let canonical = std::fs::canonicalize(&path)
        .map_err(|e| Status::invalid_argument(format!("{what} {raw:?} is not usable: {e}")))?;
    if !canonical.is_dir() {
        return Err(Status::invalid_argument(format!(
            "{what} {raw:?} is not a directory"
        )));
    }
    Ok(canonical)
}

/// Each RPC is served by the module of its family; this impl only routes.
#[tonic::async_trait]
impl AgentService for Service {
    async fn create_conversation(
        &self,
        request: Request<pb::CreateConversationRequest>,
    ) -> Result<Response<pb::CreateConversationResponse>, Status> {
        conversations::create_conversation(self, request).await
    }

    async fn list_conversations(
        &self,
        request: Request<pb::ListConversationsRequest>,
    ) -> Result<Response<pb::ListConversationsResponse>, Status> {
        conversations::list_conversations(self, request).await
    }

    async fn get_conversation(
        &self,
        request: Request<pb::GetConversationRequest>,
    ) -> Result<Response<pb::GetConversationResponse>, Status> {
        conversations::get_conversation(self, request).await
    }

    async fn update_conversation(
        &self,
        request: Request<pb::UpdateConversationRequest>,
    ) -> Result<Response<pb::UpdateConversationResponse>, Status> {
        conversations::update_conversation(self, request).await
    }

    async fn compact_conversation(
        &self,
        request: Request<pb::CompactConversationRequest>,
    ) -> Result<Response<pb::CompactConversationResponse>, Status> {
        conversations::compact_conversation(self, request).await
    }

    async fn continue_conversation(
        &self,
        request: Request<pb::ContinueConversationRequest>,
    ) -> Result<Response<pb::ContinueConversationResponse>, Status> {
        conversations::continue_conversation(self, request).await
    }

    async fn rewind(
        &self,
        request: Request<pb::RewindRequest>,
    ) -> Result<Response<pb::RewindResponse>, Status> {
        conversations::rewind(self, request).await
    }

    async fn delete_conversation(
        &self,
        request: Request<pb::DeleteConversationRequest>,
    ) -> Result<Response<pb::DeleteConversationResponse>, Status> {
        removal::delete_conversation(self, request).await
    }

    async fn archive_conversation(
        &self,
        request: Request<pb::ArchiveConversationRequest>,
    ) -> Result<Response<pb::ArchiveConversationResponse>, Status> {
        removal::archive_conversation(self, request).await
    }

    async fn rename_conversation(
        &self,
        request: Request<pb::RenameConversationRequest>,
    ) -> Result<Response<pb::RenameConversationResponse>, Status> {
        removal::rename_conversation(self, request).await
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        messages::send_message(self, request).await
    }

    async fn drop_queued_message(
        &self,
        request: Request<pb::DropQueuedMessageRequest>,
    ) -> Result<Response<pb::DropQueuedMessageResponse>, Status> {
        messages::drop_queued_message(self, request).await
    }

    async fn cancel_conversation(
        &self,
        request: Request<pb::CancelConversationRequest>,
    ) -> Result<Response<pb::CancelConversationResponse>, Status> {
        messages::cancel_conversation(self, request).await
    }

    async fn answer_permission(
        &self,
        request: Request<pb::AnswerPermissionRequest>,
    ) -> Result<Response<pb::AnswerPermissionResponse>, Status> {
        messages::answer_permission(self, request).await
    }

    async fn answer_budget(
        &self,
        request: Request<pb::AnswerBudgetRequest>,
    ) -> Result<Response<pb::AnswerBudgetResponse>, Status> {
        messages::answer_budget(self, request).await
    }

    type AttachStream = super::wire::Frames;

    async fn attach(
        &self,
        request: Request<Streaming<pb::AttachRequest>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        attach::attach(self, request).await
    }

    async fn list_shells(
        &self,
        request: Request<pb::ListShellsRequest>,
    ) -> Result<Response<pb::ListShellsResponse>, Status> {
        shells::list_shells(self, request).await
    }

    type ReadShellOutputStream = BoxStream<pb::ReadShellOutputResponse>;

    async fn read_shell_output(
        &self,
        request: Request<pb::ReadShellOutputRequest>,
    ) -> Result<Response<Self::ReadShellOutputStream>, Status> {
        shells::read_shell_output(self, request).await
    }

    async fn kill_shell(
        &self,
        request: Request<pb::KillShellRequest>,
    ) -> Result<Response<pb::KillShellResponse>, Status> {
        shells::kill_shell(self, request).await
    }

    async fn background_command(
        &self,
        request: Request<pb::BackgroundCommandRequest>,
    ) -> Result<Response<pb::BackgroundCommandResponse>, Status> {
        shells::background_command(self, request).await
    }

    async fn kill_command(
        &self,
        request: Request<pb::KillCommandRequest>,
    ) -> Result<Response<pb::KillCommandResponse>, Status> {
        shells::kill_command(self, request).await
    }

    async fn list_agent_types(
        &self,
        request: Request<pb::ListAgentTypesRequest>,
    ) -> Result<Response<pb::ListAgentTypesResponse>, Status> {
        admin::list_agent_types(self, request).await
    }

    type ExportConversationsStream = BoxStream<pb::ExportedConversation>;

    async fn export_conversations(
        &self,
        request: Request<pb::ExportConversationsRequest>,
    ) -> Result<Response<Self::ExportConversationsStream>, Status> {
        transfer::export_conversations(self, request).await
    }

    async fn import_conversations(
        &self,
        request: Request<Streaming<pb::ExportedConversation>>,
    ) -> Result<Response<pb::ImportConversationsResponse>, Status> {
        transfer::import_conversations(self, request).await
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        usage::get_usage(self, request).await
    }

    async fn set_directory_trust(
        &self,
        request: Request<pb::SetDirectoryTrustRequest>,
    ) -> Result<Response<pb::TrustedDirectories>, Status> {
        admin::set_directory_trust(self, request).await
    }

    async fn list_trusted_directories(
        &self,
        request: Request<pb::ListTrustedDirectoriesRequest>,
    ) -> Result<Response<pb::TrustedDirectories>, Status> {
        admin::list_trusted_directories(self, request).await
    }

    async fn get_daemon_info(
        &self,
        request: Request<pb::GetDaemonInfoRequest>,
    ) -> Result<Response<pb::GetDaemonInfoResponse>, Status> {
        admin::get_daemon_info(self, request).await
    }

    async fn list_mcp_servers(
        &self,
        request: Request<pb::ListMcpServersRequest>,
    ) -> Result<Response<pb::ListMcpServersResponse>, Status> {
        admin::list_mcp_servers(self, request).await
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        admin::create_token(self, request).await
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        admin::list_tokens(self, request).await
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        admin::revoke_token(self, request).await
    }

    async fn get_audit(
        &self,
        request: Request<pb::GetAuditRequest>,
    ) -> Result<Response<pb::GetAuditResponse>, Status> {
        admin::get_audit(self, request).await
    }
}
