//! A scripted, recording `AgentService` for tests (feature `testing`): the
//! one hand-written test implementation of the service, so that a new RPC is
//! written once in the daemon and once here.
//!
//! It lives next to the trait it implements, not in a test crate of its own,
//! because the client may depend on this crate only; the client takes it as
//! a dev-dependency, so neither binary is ever built with it.
//!
//! Every call is recorded. Each unary or streaming RPC answers through the
//! handler a test gave it with [`FakeAgent::on`] and is `UNIMPLEMENTED`
//! without one. `Attach` calls are handed to the test whole
//! ([`FakeAgent::attach_calls`]), which reads the client's frames and writes
//! the events itself.
//!
//! ```no_run
//! use agent_proto::testing::{FakeAgent, rpc};
//! use agent_proto::v1 as pb;
//!
//! let fake = FakeAgent::new();
//! fake.on::<rpc::SendMessage>(|request| {
//!     Ok(pb::SendMessageResponse {
//!         message_seq: 1,
//!         conversation_id: request.conversation_id,
//!         ..Default::default()
//!     })
//! });
//! let server = pb::agent_service_server::AgentServiceServer::new(fake.clone());
//! // Serve it, run the client, then:
//! let sent: Vec<pb::SendMessageRequest> = fake.requests::<rpc::SendMessage>();
//! # let _ = (server, sent);
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::v1::{self as pb, agent_service_server::AgentService, attach_request::Frame};

/// How long the helpers here wait for the client before they fail the test.
pub const WAIT: Duration = Duration::from_secs(5);

/// One RPC of `AgentService`, as far as a test scripts it: what the handler
/// is given (and the fake records) and what it answers.
pub trait Rpc: 'static {
    /// The method's name, as in the `.proto` file.
    const NAME: &'static str;
    /// The request; for a client-streaming RPC, every message of the stream.
    type Request: Clone + Send + 'static;
    /// The answer; for a server-streaming RPC, every message of the stream.
    type Reply: Send + 'static;
}

/// The RPCs a handler can be given for: one type per method, named as in
/// the `.proto` file. (`Attach` is not here: see [`FakeAgent::attach_calls`].)
pub mod rpc {
    use super::Rpc;
    use crate::v1 as pb;

    macro_rules! rpcs {
        ($($name:ident: $request:ty => $reply:ty;)*) => {$(
            #[doc = concat!("`", stringify!($name), "`.")]
            #[derive(Debug)]
            pub enum $name {}

            impl Rpc for $name {
                const NAME: &'static str = stringify!($name);
                type Request = $request;
                type Reply = $reply;
            }
        )*};
    }

    rpcs! {
        CreateConversation: pb::CreateConversationRequest => pb::CreateConversationResponse;
        ListConversations: pb::ListConversationsRequest => pb::ListConversationsResponse;
        GetConversation: pb::GetConversationRequest => pb::GetConversationResponse;
        SendMessage: pb::SendMessageRequest => pb::SendMessageResponse;
        CancelConversation: pb::CancelConversationRequest => pb::CancelConversationResponse;
        DropQueuedMessage: pb::DropQueuedMessageRequest => pb::DropQueuedMessageResponse;
        AnswerPermission: pb::AnswerPermissionRequest => pb::AnswerPermissionResponse;
        ListShells: pb::ListShellsRequest => pb::ListShellsResponse;
        ReadShellOutput: pb::ReadShellOutputRequest => Vec<pb::ReadShellOutputResponse>;
        KillShell: pb::KillShellRequest => pb::KillShellResponse;
        ExportConversations: pb::ExportConversationsRequest => Vec<pb::ExportedConversation>;
        ImportConversations: Vec<pb::ExportedConversation> => pb::ImportConversationsResponse;
        GetUsage: pb::GetUsageRequest => pb::GetUsageResponse;
        SetDirectoryTrust: pb::SetDirectoryTrustRequest => pb::TrustedDirectories;
        ListTrustedDirectories: pb::ListTrustedDirectoriesRequest => pb::TrustedDirectories;
        GetDaemonInfo: pb::GetDaemonInfoRequest => pb::GetDaemonInfoResponse;
        UpdateConversation: pb::UpdateConversationRequest => pb::UpdateConversationResponse;
        CompactConversation: pb::CompactConversationRequest => pb::CompactConversationResponse;
        AnswerBudget: pb::AnswerBudgetRequest => pb::AnswerBudgetResponse;
        ContinueConversation: pb::ContinueConversationRequest => pb::ContinueConversationResponse;
        ListMcpServers: pb::ListMcpServersRequest => pb::ListMcpServersResponse;
        CreateToken: pb::CreateTokenRequest => pb::CreateTokenResponse;
        ListTokens: pb::ListTokensRequest => pb::ListTokensResponse;
        RevokeToken: pb::RevokeTokenRequest => pb::RevokeTokenResponse;
        GetAudit: pb::GetAuditRequest => pb::GetAuditResponse;
        Rewind: pb::RewindRequest => pb::RewindResponse;
        DeleteConversation: pb::DeleteConversationRequest => pb::DeleteConversationResponse;
        ArchiveConversation: pb::ArchiveConversationRequest => pb::ArchiveConversationResponse;
        RenameConversation: pb::RenameConversationRequest => pb::RenameConversationResponse;
        BackgroundCommand: pb::BackgroundCommandRequest => pb::BackgroundCommandResponse;
        KillCommand: pb::KillCommandRequest => pb::KillCommandResponse;
        ListAgentTypes: pb::ListAgentTypesRequest => pb::ListAgentTypesResponse;
    }
}

/// What a test answers an RPC `R` with.
type Handler<R> =
    Arc<dyn Fn(<R as Rpc>::Request) -> Result<<R as Rpc>::Reply, Status> + Send + Sync>;

/// A stand-in for agentd that answers as scripted and records every call.
/// Clones share their script and their record: keep one, serve another.
#[derive(Clone, Default)]
pub struct FakeAgent {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `TypeId` of an [`Rpc`] to its [`Handler`], behind `dyn Any` so one
    /// map holds handlers of every request and reply type.
    handlers: Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
    /// Every call in order of arrival: its RPC and its request.
    calls: Mutex<Vec<(TypeId, Box<dyn Any + Send>)>>,
    attaches: Mutex<Option<mpsc::Sender<AttachCall>>>,
}

/// A poisoned lock only means another test thread panicked; the data is
/// still what the fake wrote.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl FakeAgent {
    pub fn new() -> FakeAgent {
        FakeAgent::default()
    }

    /// Answers every later call of `R` with `handler` (replacing an earlier
    /// one).
    pub fn on<R: Rpc>(
        &self,
        handler: impl Fn(R::Request) -> Result<R::Reply, Status> + Send + Sync + 'static,
    ) -> &Self {
        let handler: Handler<R> = Arc::new(handler);
        lock(&self.inner.handlers).insert(TypeId::of::<R>(), Box::new(handler));
        self
    }

    /// The requests of every call of `R` so far, oldest first.
    pub fn requests<R: Rpc>(&self) -> Vec<R::Request> {
        lock(&self.inner.calls)
            .iter()
            .filter(|(rpc, _)| *rpc == TypeId::of::<R>())
            .filter_map(|(_, request)| request.downcast_ref::<R::Request>().cloned())
            .collect()
    }

    /// From now on, hands each `Attach` call to the returned queue (before,
    /// and once it is dropped, `Attach` fails).
    pub fn attach_calls(&self) -> AttachCalls {
        let (tx, rx) = mpsc::channel(8);
        *lock(&self.inner.attaches) = Some(tx);
        AttachCalls(rx)
    }

    fn record<R: Rpc>(&self, request: &R::Request) {
        lock(&self.inner.calls).push((TypeId::of::<R>(), Box::new(request.clone())));
    }

    /// Records the call and answers it from `R`'s handler.
    fn answer<R: Rpc>(&self, request: R::Request) -> Result<R::Reply, Status> {
        self.record::<R>(&request);
        // The handler is called without the lock, so it may script the fake.
        let handler = lock(&self.inner.handlers)
            .get(&TypeId::of::<R>())
            .and_then(|h| h.downcast_ref::<Handler<R>>())
            .cloned();
        match handler {
            Some(handler) => handler(request),
            None => Err(Status::unimplemented(format!(
                "{} is not scripted in this test",
                R::NAME
            ))),
        }
    }

    fn unary<R: Rpc>(&self, request: Request<R::Request>) -> Result<Response<R::Reply>, Status> {
        self.answer::<R>(request.into_inner()).map(Response::new)
    }

    fn server_stream<R, T>(
        &self,
        request: Request<R::Request>,
    ) -> Result<Response<Boxed<T>>, Status>
    where
        R: Rpc<Reply = Vec<T>>,
        T: Send + 'static,
    {
        let items = self.answer::<R>(request.into_inner())?;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            items.into_iter().map(Ok),
        ))))
    }
}

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for FakeAgent {
    async fn create_conversation(
        &self,
        request: Request<pb::CreateConversationRequest>,
    ) -> Result<Response<pb::CreateConversationResponse>, Status> {
        self.unary::<rpc::CreateConversation>(request)
    }

    async fn list_conversations(
        &self,
        request: Request<pb::ListConversationsRequest>,
    ) -> Result<Response<pb::ListConversationsResponse>, Status> {
        self.unary::<rpc::ListConversations>(request)
    }

    async fn get_conversation(
        &self,
        request: Request<pb::GetConversationRequest>,
    ) -> Result<Response<pb::GetConversationResponse>, Status> {
        self.unary::<rpc::GetConversation>(request)
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        self.unary::<rpc::SendMessage>(request)
    }

    async fn cancel_conversation(
        &self,
        request: Request<pb::CancelConversationRequest>,
    ) -> Result<Response<pb::CancelConversationResponse>, Status> {
        self.unary::<rpc::CancelConversation>(request)
    }

    async fn update_conversation(
        &self,
        request: Request<pb::UpdateConversationRequest>,
    ) -> Result<Response<pb::UpdateConversationResponse>, Status> {
        self.unary::<rpc::UpdateConversation>(request)
    }

    async fn drop_queued_message(
        &self,
        request: Request<pb::DropQueuedMessageRequest>,
    ) -> Result<Response<pb::DropQueuedMessageResponse>, Status> {
        self.unary::<rpc::DropQueuedMessage>(request)
    }

    async fn answer_permission(
        &self,
        request: Request<pb::AnswerPermissionRequest>,
    ) -> Result<Response<pb::AnswerPermissionResponse>, Status> {
        self.unary::<rpc::AnswerPermission>(request)
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        self.unary::<rpc::GetUsage>(request)
    }

    async fn list_shells(
        &self,
        request: Request<pb::ListShellsRequest>,
    ) -> Result<Response<pb::ListShellsResponse>, Status> {
        self.unary::<rpc::ListShells>(request)
    }

    type ReadShellOutputStream = Boxed<pb::ReadShellOutputResponse>;

    async fn read_shell_output(
        &self,
        request: Request<pb::ReadShellOutputRequest>,
    ) -> Result<Response<Self::ReadShellOutputStream>, Status> {
        self.server_stream::<rpc::ReadShellOutput, _>(request)
    }

    async fn kill_shell(
        &self,
        request: Request<pb::KillShellRequest>,
    ) -> Result<Response<pb::KillShellResponse>, Status> {
        self.unary::<rpc::KillShell>(request)
    }

    async fn set_directory_trust(
        &self,
        request: Request<pb::SetDirectoryTrustRequest>,
    ) -> Result<Response<pb::TrustedDirectories>, Status> {
        self.unary::<rpc::SetDirectoryTrust>(request)
    }

    async fn list_trusted_directories(
        &self,
        request: Request<pb::ListTrustedDirectoriesRequest>,
    ) -> Result<Response<pb::TrustedDirectories>, Status> {
        self.unary::<rpc::ListTrustedDirectories>(request)
    }

    async fn get_daemon_info(
        &self,
        request: Request<pb::GetDaemonInfoRequest>,
    ) -> Result<Response<pb::GetDaemonInfoResponse>, Status> {
        self.unary::<rpc::GetDaemonInfo>(request)
    }

    async fn answer_budget(
        &self,
        request: Request<pb::AnswerBudgetRequest>,
    ) -> Result<Response<pb::AnswerBudgetResponse>, Status> {
        self.unary::<rpc::AnswerBudget>(request)
    }

    async fn compact_conversation(
        &self,
        request: Request<pb::CompactConversationRequest>,
    ) -> Result<Response<pb::CompactConversationResponse>, Status> {
        self.unary::<rpc::CompactConversation>(request)
    }

    async fn continue_conversation(
        &self,
        request: Request<pb::ContinueConversationRequest>,
    ) -> Result<Response<pb::ContinueConversationResponse>, Status> {
        self.unary::<rpc::ContinueConversation>(request)
    }

    async fn list_mcp_servers(
        &self,
        request: Request<pb::ListMcpServersRequest>,
    ) -> Result<Response<pb::ListMcpServersResponse>, Status> {
        self.unary::<rpc::ListMcpServers>(request)
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        self.unary::<rpc::CreateToken>(request)
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        self.unary::<rpc::ListTokens>(request)
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        self.unary::<rpc::RevokeToken>(request)
    }

    async fn get_audit(
        &self,
        request: Request<pb::GetAuditRequest>,
    ) -> Result<Response<pb::GetAuditResponse>, Status> {
        self.unary::<rpc::GetAudit>(request)
    }

    async fn rewind(
        &self,
        request: Request<pb::RewindRequest>,
    ) -> Result<Response<pb::RewindResponse>, Status> {
        self.unary::<rpc::Rewind>(request)
    }

    async fn delete_conversation(
        &self,
        request: Request<pb::DeleteConversationRequest>,
    ) -> Result<Response<pb::DeleteConversationResponse>, Status> {
        self.unary::<rpc::DeleteConversation>(request)
    }

    async fn archive_conversation(
        &self,
        request: Request<pb::ArchiveConversationRequest>,
    ) -> Result<Response<pb::ArchiveConversationResponse>, Status> {
        self.unary::<rpc::ArchiveConversation>(request)
    }

    async fn rename_conversation(
        &self,
        request: Request<pb::RenameConversationRequest>,
    ) -> Result<Response<pb::RenameConversationResponse>, Status> {
        self.unary::<rpc::RenameConversation>(request)
    }

    async fn background_command(
        &self,
        request: Request<pb::BackgroundCommandRequest>,
    ) -> Result<Response<pb::BackgroundCommandResponse>, Status> {
        self.unary::<rpc::BackgroundCommand>(request)
    }

    async fn kill_command(
        &self,
        request: Request<pb::KillCommandRequest>,
    ) -> Result<Response<pb::KillCommandResponse>, Status> {
        self.unary::<rpc::KillCommand>(request)
    }

    async fn list_agent_types(
        &self,
        request: Request<pb::ListAgentTypesRequest>,
    ) -> Result<Response<pb::ListAgentTypesResponse>, Status> {
        self.unary::<rpc::ListAgentTypes>(request)
    }

    type AttachStream = Boxed<pb::AttachResponse>;

    async fn attach(
        &self,
        request: Request<Streaming<pb::AttachRequest>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let attaches = lock(&self.inner.attaches).clone();
        let Some(attaches) = attaches else {
            return Err(Status::unimplemented("Attach is not scripted in this test"));
        };
        let (out, rx) = mpsc::channel(64);
        let call = AttachCall {
            inbound: request.into_inner(),
            out,
        };
        attaches
            .send(call)
            .await
            .map_err(|_| Status::unavailable("the test takes no more Attach calls"))?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type ExportConversationsStream = Boxed<pb::ExportedConversation>;

    async fn export_conversations(
        &self,
        request: Request<pb::ExportConversationsRequest>,
    ) -> Result<Response<Self::ExportConversationsStream>, Status> {
        self.server_stream::<rpc::ExportConversations, _>(request)
    }

    async fn import_conversations(
        &self,
        request: Request<Streaming<pb::ExportedConversation>>,
    ) -> Result<Response<pb::ImportConversationsResponse>, Status> {
        let mut inbound = request.into_inner();
        let mut all = Vec::new();
        while let Some(item) = inbound.message().await? {
            all.push(item);
        }
        self.answer::<rpc::ImportConversations>(all)
            .map(Response::new)
    }
}

/// The `Attach` calls a [`FakeAgent`] was given, in order.
pub struct AttachCalls(mpsc::Receiver<AttachCall>);

impl AttachCalls {
    /// The next `Attach` call.
    ///
    /// # Panics
    /// When none comes within [`WAIT`].
    pub async fn next(&mut self) -> AttachCall {
        match tokio::time::timeout(WAIT, self.0.recv()).await {
            Ok(Some(call)) => call,
            Ok(None) => panic!("the fake agent is gone"),
            Err(_) => panic!("no Attach call within {WAIT:?}"),
        }
    }
}

/// One `Attach` call, for the test to play the daemon's side.
pub struct AttachCall {
    /// The client's frames.
    pub inbound: Streaming<pb::AttachRequest>,
    /// Where the events the client receives go.
    pub out: mpsc::Sender<Result<pb::AttachResponse, Status>>,
}

impl AttachCall {
    /// The client's next frame.
    ///
    /// # Panics
    /// When none comes within [`WAIT`], or the stream ends or fails.
    pub async fn frame(&mut self) -> Frame {
        match tokio::time::timeout(WAIT, self.inbound.message()).await {
            Ok(Ok(Some(pb::AttachRequest { frame: Some(frame) }))) => frame,
            Ok(Ok(Some(empty))) => panic!("a frame without a body: {empty:?}"),
            Ok(Ok(None)) => panic!("the client ended its Attach stream"),
            Ok(Err(status)) => panic!("the client's Attach stream failed: {status}"),
            Err(_) => panic!("no frame from the client within {WAIT:?}"),
        }
    }

    /// The client's next frame, which must be a subscribe.
    ///
    /// # Panics
    /// As [`frame`](Self::frame) does, and when it is another frame.
    pub async fn subscribe(&mut self) -> pb::Subscribe {
        match self.frame().await {
            Frame::Subscribe(subscribe) => subscribe,
            other => panic!("expected a subscribe frame, got {other:?}"),
        }
    }

    /// The client's next frame, which must be a create.
    ///
    /// # Panics
    /// As [`frame`](Self::frame) does, and when it is another frame.
    pub async fn create(&mut self) -> pb::CreateAndSubscribe {
        match self.frame().await {
            Frame::Create(create) => create,
            other => panic!("expected a create frame, got {other:?}"),
        }
    }

    /// Sends one event (the client may have gone; that is for the test to
    /// notice).
    pub async fn send(&self, seq: u64, event: pb::attach_response::Event) {
        let _ = self
            .out
            .send(Ok(pb::AttachResponse {
                seq,
                at_ms: 0,
                event: Some(event),
            }))
            .await;
    }

    /// Ends the stream with an error status.
    pub async fn fail(self, status: Status) {
        let _ = self.out.send(Err(status)).await;
    }
}
