//! A stand-in daemon for testing the harness itself: it takes the daemon's
//! command line, listens on `--socket`, answers `ListConversations` with an
//! empty list (every other RPC is UNIMPLEMENTED), logs what it was given, and
//! exits 0 on SIGTERM. Not a model of agentd's behaviour.
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;

use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use futures::Stream;
use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status, Streaming};

type Reply<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

struct Stub;

fn unimplemented<T>(method: &str) -> Reply<T> {
    Err(Status::unimplemented(format!("stub-agentd: {method}")))
}

#[tonic::async_trait]
impl AgentService for Stub {
    async fn create_conversation(
        &self,
        _: Request<pb::CreateConversationRequest>,
    ) -> Reply<pb::CreateConversationResponse> {
        unimplemented("CreateConversation")
    }
    async fn list_conversations(
        &self,
        _: Request<pb::ListConversationsRequest>,
    ) -> Reply<pb::ListConversationsResponse> {
        Ok(Response::new(pb::ListConversationsResponse::default()))
    }
    async fn get_conversation(
        &self,
        _: Request<pb::GetConversationRequest>,
    ) -> Reply<pb::GetConversationResponse> {
        unimplemented("GetConversation")
    }
    async fn send_message(
        &self,
        _: Request<pb::SendMessageRequest>,
    ) -> Reply<pb::SendMessageResponse> {
        unimplemented("SendMessage")
    }
    async fn cancel_conversation(
        &self,
        _: Request<pb::CancelConversationRequest>,
    ) -> Reply<pb::CancelConversationResponse> {
        unimplemented("CancelConversation")
    }
    async fn answer_permission(
        &self,
        _: Request<pb::AnswerPermissionRequest>,
    ) -> Reply<pb::AnswerPermissionResponse> {
        unimplemented("AnswerPermission")
    }
    async fn list_shells(
        &self,
        _: Request<pb::ListShellsRequest>,
    ) -> Reply<pb::ListShellsResponse> {
        unimplemented("ListShells")
    }
    type ReadShellOutputStream = BoxStream<pb::ReadShellOutputResponse>;
    async fn read_shell_output(
        &self,
        _: Request<pb::ReadShellOutputRequest>,
    ) -> Reply<Self::ReadShellOutputStream> {
        unimplemented("ReadShellOutput")
    }
    async fn kill_shell(&self, _: Request<pb::KillShellRequest>) -> Reply<pb::KillShellResponse> {
        unimplemented("KillShell")
    }
    type AttachStream = BoxStream<pb::AttachResponse>;
    async fn attach(&self, _: Request<Streaming<pb::AttachRequest>>) -> Reply<Self::AttachStream> {
        unimplemented("Attach")
    }
    type ExportConversationsStream = BoxStream<pb::ExportedConversation>;
    async fn export_conversations(
        &self,
        _: Request<pb::ExportConversationsRequest>,
    ) -> Reply<Self::ExportConversationsStream> {
        unimplemented("ExportConversations")
    }
    async fn import_conversations(
        &self,
        _: Request<Streaming<pb::ExportedConversation>>,
    ) -> Reply<pb::ImportConversationsResponse> {
        unimplemented("ImportConversations")
    }
}

/// The value after `flag`, if given.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(socket) = flag_value(&args, "--socket").map(PathBuf::from) else {
        eprintln!("stub-agentd: --socket is required");
        return ExitCode::from(2);
    };
    eprintln!("stub-agentd: pid={} args={args:?}", std::process::id());
    eprintln!(
        "stub-agentd: ANTHROPIC_BASE_URL={}",
        std::env::var("ANTHROPIC_BASE_URL").unwrap_or_default()
    );
    if let Some(config) = flag_value(&args, "--config") {
        eprintln!(
            "stub-agentd: config:\n{}",
            std::fs::read_to_string(config).unwrap_or_default()
        );
    }
    if args.iter().any(|a| a == "--fail-at-start") {
        eprintln!("stub-agentd: failing at start as asked");
        return ExitCode::from(3);
    }
    if let Some(data_dir) = flag_value(&args, "--data-dir")
        && let Err(e) = std::fs::create_dir_all(&data_dir)
    {
        eprintln!("stub-agentd: cannot create {data_dir}: {e}");
        return ExitCode::FAILURE;
    }
    // A socket left by a killed predecessor.
    let _ = std::fs::remove_file(&socket);
    let listener = match tokio::net::UnixListener::bind(&socket) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("stub-agentd: cannot bind {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    let mut sigterm = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("stub-agentd: cannot handle SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("stub-agentd: listening on {}", socket.display());
    let served = tonic::transport::Server::builder()
        .add_service(AgentServiceServer::new(Stub))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
            sigterm.recv().await;
            eprintln!("stub-agentd: SIGTERM, exiting");
        })
        .await;
    let _ = std::fs::remove_file(&socket);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stub-agentd: server failed: {e}");
            ExitCode::FAILURE
        }
    }
}
