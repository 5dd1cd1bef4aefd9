//! The `agent.v1.AgentService` implementation: validates requests, resolves
//! id prefixes, and hands the work to the runtime.

use super::access::{self, Access, Caller, FrameKind};
use super::admission::{self, Grants, Source};
use super::convert::{self, to_status};
use super::outbox::{Due, Outbox};
use crate::config::GrpcSection;
use crate::runtime::{ConvEvent, EventKind, Manager, NewConversation};
use agent_proto::v1 as pb;
use agent_proto::v1::agent_service_server::AgentService;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// Frames buffered in an attached client's stream. Small on purpose: what
/// does not fit waits in the client's outbox, where deltas still merge.
const CLIENT_BUFFER: usize = 16;
/// Bytes of shell output per frame.
const SHELL_CHUNK: usize = 64 * 1024;

/// The service.
#[derive(Debug, Clone)]
pub struct Service {
    manager: Arc<Manager>,
    shutdown: CancellationToken,
    /// Tokens and the TCP listener's identity.
    access: Arc<Access>,
    /// Who may ask for a model check, and how often.
    model_checks: Arc<super::info::ModelChecks>,
}

/// Who made `request`, as the access layer found (it admitted the call
/// already; a request without a caller did not pass it and is refused).
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

fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("a request that did not pass the access layer"))
}

impl Service {
    /// A service over `manager`; `shutdown` ends every open stream.
    pub fn new(manager: Arc<Manager>, shutdown: CancellationToken, access: Arc<Access>) -> Self {
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
        let models = &self.manager.shared().config.models;
        let cost = models.cost(&r.model, &r.usage);
        let window = models.lookup(&r.model).context_window;
        convert::summary(r, self.max_attempts(), 0, cost, window)
    }

    /// The trusted directories, as a response.
    fn trusted(&self, changed: bool) -> Result<Response<pb::TrustedDirectories>, Status> {
        let dirs = self
            .manager
            .shared()
            .store
            .trusted_dirs()
            .map_err(|e| to_status(e.into()))?;
        Ok(Response::new(pb::TrustedDirectories {
            paths: dirs.iter().map(|(d, _)| d.display().to_string()).collect(),
            changed,
        }))
    }

    fn limits(&self) -> &GrpcSection {
        &self.manager.shared().config.grpc
    }

    /// The project instructions a turn in `cwd` would read now.
    async fn instructions_for(&self, cwd: &std::path::Path) -> pb::Instructions {
        use crate::runtime::instructions;
        let config = &self.manager.shared().config;
        let dirs = instructions::directories(config.user_dir.as_deref(), cwd);
        let max_bytes = config.instructions.max_bytes;
        let found = tokio::task::spawn_blocking(move || instructions::load(&dirs, max_bytes))
            .await
            .unwrap_or_default();
        convert::instructions(&found.files(), found.truncated)
    }

    /// The full id of the shell `prefix` names.
    fn resolve_shell(&self, prefix: &str) -> Result<String, Status> {
        let candidates = self.manager.shared().shells.ids_with_prefix(prefix, 3);
        pick_shell(prefix, &candidates)
    }
}

/// The one shell id among `candidates` (the ids `prefix` may stand for, at
/// most three): none is NotFound, several InvalidArgument naming some.
fn pick_shell(prefix: &str, candidates: &[String]) -> Result<String, Status> {
    let prefix = convert::brief(prefix.trim());
    if prefix.is_empty() {
        return Err(Status::invalid_argument("shell id is empty"));
    }
    match candidates {
        [] => Err(Status::not_found(format!("unknown shell {prefix}"))),
        [one] => Ok(one.clone()),
        [first, second] => Err(Status::invalid_argument(format!(
            "ambiguous shell prefix {prefix} (matches {first} and {second})"
        ))),
        [first, second, ..] => Err(Status::invalid_argument(format!(
            "ambiguous shell prefix {prefix} (matches {first}, {second}, …)"
        ))),
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

fn local_error(message: String) -> pb::AttachResponse {
    pb::AttachResponse {
        seq: 0,
        at_ms: 0,
        event: Some(pb::attach_response::Event::Error(pb::ErrorEvent {
            message,
            kind: pb::ErrorKind::Unspecified as i32,
        })),
    }
}

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

/// A token as clients see it.
fn token_info(t: &crate::store::access::TokenRecord) -> pb::TokenInfo {
    pb::TokenInfo {
        id: t.id.clone(),
        name: t.name.clone(),
        role: convert::role(t.role) as i32,
        created_at_ms: t.created_at_ms,
        expires_at_ms: t.expires_at_ms.unwrap_or(0),
        revoked_at_ms: t.revoked_at_ms.unwrap_or(0),
        last_used_at_ms: t.last_used_at_ms.unwrap_or(0),
    }
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

/// Whether reading a request stream failed because its connection ended
/// (the client closed it or died), not because of what the client sent. A
/// frame the client sent wrong is a decode error (INTERNAL) or too large
/// (OUT_OF_RANGE); the transport's own failures come from h2 and hyper,
/// which tonic reports with their reason's code and an "h2 protocol error"
/// message.
fn connection_ended(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::Unavailable
    ) || status.message().starts_with("h2 protocol error")
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

/// What a create request makes: the conversation, and its first prompt
/// with its images (none when the request has neither).
type Creation = (
    NewConversation,
    Option<(String, Vec<crate::images::StagedImage>)>,
);

impl Service {
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

    /// A CreateConversation request from `who` checked and turned into
    /// what the manager creates (also the Attach stream's `create` frame).
    fn new_conversation(
        &self,
        who: &Caller,
        req: pb::CreateConversationRequest,
    ) -> Result<Creation, Status> {
        if req.cwd.is_empty() {
            return Err(Status::invalid_argument("cwd is required"));
        }
        let cwd = validate_dir(&req.cwd, "cwd")?;
        let additional_dirs = req
            .additional_dirs
            .iter()
            .map(|d| validate_dir(d, "additional directory"))
            .collect::<Result<Vec<_>, _>>()?;
        let mode = (req.mode != pb::PermissionMode::Unspecified as i32)
            .then(|| convert::mode_from(req.mode))
            .transpose()?;
        let server_names: Vec<String> = req.mcp_servers.iter().map(|s| s.name.clone()).collect();
        let mut dirs = vec![(cwd.as_path(), "cwd")];
        dirs.extend(
            additional_dirs
                .iter()
                .map(|d| (d.as_path(), "additional directory")),
        );
        self.admit(
            Source::of(who),
            &Grants {
                mode,
                allow_rules: &req.allow_rules,
                mcp_servers: &server_names,
                dirs: &dirs,
            },
        )?;
        let mut mcp_servers = Vec::with_capacity(req.mcp_servers.len());
        for s in &req.mcp_servers {
            let spec = convert::mcp_server_from(s)?;
            if mcp_servers
                .iter()
                .any(|m: &crate::mcp::ServerSpec| m.name == spec.name)
            {
                return Err(Status::invalid_argument(format!(
                    "MCP server {:?} is given twice",
                    spec.name
                )));
            }
            mcp_servers.push(spec);
        }
        let prompt = req.prompt;
        if !prompt.is_empty() && prompt.trim().is_empty() && req.images.is_empty() {
            return Err(Status::invalid_argument("prompt is empty"));
        }
        check_text(self.limits(), "prompt", &prompt)?;
        // Checked before anything is made: a refused image creates nothing.
        let images = convert::uploads(&self.manager.shared().config.images.limits(), req.images)?;
        Ok((
            NewConversation {
                cwd,
                model: req.model,
                mode,
                allow_rules: req.allow_rules,
                additional_dirs,
                mcp_servers,
                client_request_id: convert::client_request_id_from(req.client_request_id)?,
                parent: None,
                sub_agent: None,
            },
            (!prompt.is_empty() || !images.is_empty()).then_some((prompt, images)),
        ))
    }
}

impl Service {
    /// Holds an imported record to what an import may grant (see
    /// `admission`): its directories are checked as a create's are (and
    /// made canonical), a refused directory refuses the import, and every
    /// other refused grant is taken away; returns what was taken, one line
    /// each, for the reply.
    fn imported_grants(
        &self,
        who: &Caller,
        record: &mut crate::store::ConversationRecord,
    ) -> Result<Vec<String>, Status> {
        let id = record.id.clone();
        let in_record = |status: Status| {
            Status::new(
                status.code(),
                format!("conversation {id}: {}", status.message()),
            )
        };
        record.cwd = validate_dir(&record.cwd.to_string_lossy(), "cwd").map_err(in_record)?;
        record.additional_dirs = record
            .additional_dirs
            .iter()
            .map(|d| validate_dir(&d.to_string_lossy(), "additional directory"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(in_record)?;
        let source = Source::import(who);
        let server_names: Vec<String> = record.mcp_servers.iter().map(|s| s.name.clone()).collect();
        let mut dirs = vec![(record.cwd.as_path(), "cwd")];
        dirs.extend(
            record
                .additional_dirs
                .iter()
                .map(|d| (d.as_path(), "additional directory")),
        );
        let grants = Grants {
            mode: Some(record.mode),
            allow_rules: &record.allow_rules,
            mcp_servers: &server_names,
            dirs: &dirs,
        };
        let refused = admission::refusals(source, &self.roots_for(source), &grants);
        let mut notices = Vec::new();
        for refusal in refused {
            let what = refusal.describe(source);
            match refusal {
                admission::Refusal::Dir { .. } => {
                    return Err(Status::permission_denied(format!(
                        "conversation {id}: {what}"
                    )));
                }
                admission::Refusal::Mode(_) => {
                    record.mode = agentd_core::Mode::Default;
                    notices.push(format!(
                        "conversation {id}: {what}; its mode is now default"
                    ));
                }
                admission::Refusal::AllowRules(_) => {
                    record.allow_rules.clear();
                    notices.push(format!("conversation {id}: {what}; they were dropped"));
                }
                admission::Refusal::McpServers(_) => {
                    record.mcp_servers.clear();
                    notices.push(format!("conversation {id}: {what}; they were dropped"));
                }
            }
        }
        Ok(notices)
    }
}

#[tonic::async_trait]
impl AgentService for Service {
    async fn create_conversation(
        &self,
        request: Request<pb::CreateConversationRequest>,
    ) -> Result<Response<pb::CreateConversationResponse>, Status> {
        let who = caller(&request)?;
        let (new, prompt) = self.new_conversation(&who, request.into_inner())?;
        let record = self.manager.create(new, prompt).await.map_err(to_status)?;
        Ok(Response::new(pb::CreateConversationResponse {
            conversation: Some(self.summary(&record)),
        }))
    }

    async fn list_conversations(
        &self,
        request: Request<pb::ListConversationsRequest>,
    ) -> Result<Response<pb::ListConversationsResponse>, Status> {
        let req = request.into_inner();
        let before = req.before_id.trim().to_ascii_uppercase();
        let before = (!before.is_empty()).then_some(before.as_str());
        let (page, more) = self
            .manager
            .list(before, req.limit as usize)
            .map_err(to_status)?;
        let next_before_id = match page.last() {
            Some(last) if more => last.id.clone(),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListConversationsResponse {
            conversations: page.iter().map(|r| self.summary(r)).collect(),
            notices: self.manager.shared().notices.clone(),
            next_before_id,
        }))
    }

    async fn get_conversation(
        &self,
        request: Request<pb::GetConversationRequest>,
    ) -> Result<Response<pb::GetConversationResponse>, Status> {
        let id = self
            .manager
            .resolve(&request.into_inner().conversation_id)
            .map_err(to_status)?;
        let record = self.manager.record(&id).map_err(to_status)?;
        let messages = self.manager.messages(&record).map_err(to_status)?;
        let pending = record.state.pending_permission().map(|ask| {
            convert::permission(&crate::runtime::PermissionView {
                summary: crate::tools::summarize_call(&ask.tool_name, &ask.input),
                diff: None,
                ask: ask.clone(),
                sub_agent: crate::runtime::SubAgentRef::of(&record),
            })
        });
        let instructions = self.instructions_for(&record.cwd).await;
        Ok(Response::new(pb::GetConversationResponse {
            conversation: Some(self.summary(&record)),
            messages: messages
                .iter()
                .map(|(s, m)| convert::message(*s, m))
                .collect(),
            pending_permission: pending,
            instructions: Some(instructions),
            plan: record.plan.as_ref().map(convert::plan),
            checkpoints: self
                .manager
                .shared()
                .checkpoints
                .turns(&record.id)
                .map(|t| convert::checkpoint_turns(&t))
                .unwrap_or_else(|e| {
                    tracing::warn!(conversation = %record.id, "cannot list checkpoints: {e}");
                    Vec::new()
                }),
        }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let from = caller(&request)?.client(String::new(), "", None);
        let req = request.into_inner();
        if req.text.trim().is_empty() && req.images.is_empty() {
            return Err(Status::invalid_argument("message text is empty"));
        }
        check_text(self.limits(), "message text", &req.text)?;
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let images = convert::uploads(&self.manager.shared().config.images.limits(), req.images)?;
        let message = crate::runtime::NewMessage {
            text: req.text,
            images,
            client_request_id: convert::client_request_id_from(req.client_request_id)?,
            expected_turn: req.expected_turn,
            queue_if_busy: req.queue_if_busy,
            from: None,
            by: Some(from),
        };
        let sent = self
            .manager
            .send_message(&id, message)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::SendMessageResponse {
            message_seq: sent.message_seq(),
            conversation_id: id,
            queued_id: match sent {
                crate::runtime::Sent::Queued(q) => q,
                crate::runtime::Sent::Appended(_) => String::new(),
            },
        }))
    }

    async fn update_conversation(
        &self,
        request: Request<pb::UpdateConversationRequest>,
    ) -> Result<Response<pb::UpdateConversationResponse>, Status> {
        let who = caller(&request)?;
        let req = request.into_inner();
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let settings = crate::runtime::Settings {
            mode: (req.mode != pb::PermissionMode::Unspecified as i32)
                .then(|| convert::mode_from(req.mode))
                .transpose()?,
            model: (!req.model.is_empty()).then_some(req.model),
            add_dirs: req
                .add_dirs
                .iter()
                .map(|d| validate_dir(d, "additional directory"))
                .collect::<Result<Vec<_>, _>>()?,
            by: display_name(&req.client_name),
        };
        let dirs: Vec<_> = settings
            .add_dirs
            .iter()
            .map(|d| (d.as_path(), "additional directory"))
            .collect();
        self.admit(
            Source::of(&who),
            &Grants {
                mode: settings.mode,
                dirs: &dirs,
                ..Grants::default()
            },
        )?;
        let record = self
            .manager
            .update(&id, settings)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::UpdateConversationResponse {
            conversation: Some(self.summary(&record)),
        }))
    }

    async fn drop_queued_message(
        &self,
        request: Request<pb::DropQueuedMessageRequest>,
    ) -> Result<Response<pb::DropQueuedMessageResponse>, Status> {
        let req = request.into_inner();
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let queued = self
            .manager
            .drop_queued(&id, req.queued_id)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::DropQueuedMessageResponse {
            queued: convert::queued(&queued),
        }))
    }

    async fn cancel_conversation(
        &self,
        request: Request<pb::CancelConversationRequest>,
    ) -> Result<Response<pb::CancelConversationResponse>, Status> {
        let req = request.into_inner();
        let client_request_id = convert::client_request_id_from(req.client_request_id)?;
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let was_busy = self
            .manager
            .cancel_request(&id, client_request_id)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::CancelConversationResponse { was_busy }))
    }

    async fn answer_permission(
        &self,
        request: Request<pb::AnswerPermissionRequest>,
    ) -> Result<Response<pb::AnswerPermissionResponse>, Status> {
        let who = caller(&request)?;
        let req = request.into_inner();
        check_text(self.limits(), "feedback", &req.feedback)?;
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let client = self
            .manager
            .numbered(answerer(&who, req.client_name, "agent answer"));
        let answer = convert::answer_from(
            req.request_id,
            req.decision,
            req.feedback,
            req.scope,
            client,
            req.client_request_id,
            req.plan_answer,
        )?;
        self.manager.answer(&id, answer).await.map_err(to_status)?;
        Ok(Response::new(pb::AnswerPermissionResponse {}))
    }

    async fn list_shells(
        &self,
        request: Request<pb::ListShellsRequest>,
    ) -> Result<Response<pb::ListShellsResponse>, Status> {
        let req = request.into_inner();
        let conversation = if req.conversation_id.is_empty() {
            None
        } else {
            Some(
                self.manager
                    .resolve(&req.conversation_id)
                    .map_err(to_status)?,
            )
        };
        let mut shells = self.manager.shared().shells.list(None);
        if let Some(id) = &conversation {
            // A conversation's own shells and its sub-agents' (each named
            // by the child's id).
            let mut of_children = std::collections::HashMap::new();
            shells.retain(|r| {
                r.conversation_id == *id
                    || *of_children
                        .entry(r.conversation_id.clone())
                        .or_insert_with(|| self.manager.is_sub_agent_of(&r.conversation_id, id))
            });
        }
        Ok(Response::new(pb::ListShellsResponse {
            shells: shells.iter().map(convert::shell).collect(),
        }))
    }

    type ReadShellOutputStream = BoxStream<pb::ReadShellOutputResponse>;

    async fn read_shell_output(
        &self,
        request: Request<pb::ReadShellOutputRequest>,
    ) -> Result<Response<Self::ReadShellOutputStream>, Status> {
        let session = caller(&request)?.session;
        let mut req = request.into_inner();
        // Fail fast on an unknown id, before the stream starts.
        req.shell_id = self.resolve_shell(&req.shell_id)?;
        let shells = self.manager.shared().shells.clone();
        let (tx, rx) = mpsc::channel(16);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut offset = req.offset;
            loop {
                let (data, record) = match shells.read(&req.shell_id, offset, SHELL_CHUNK).await {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(convert::shell_status(e))).await;
                        return;
                    }
                };
                let ended = record.status.is_ended();
                let got = data.len() as u64;
                // The last chunk carries the final record: when the shell
                // has ended and everything was read, or when not following.
                let last = got < SHELL_CHUNK as u64 && (ended || !req.follow);
                let frame = pb::ReadShellOutputResponse {
                    offset,
                    data,
                    finished: last.then(|| convert::shell(&record)),
                };
                offset += got;
                let frame = access::session_check(session.as_ref()).map(|()| frame);
                let refused = frame.is_err();
                if tx.send(frame).await.is_err() || last || refused {
                    return;
                }
                if got == 0 {
                    tokio::select! {
                        _ = shells.wait_output(&req.shell_id, offset) => {}
                        status = access::session_ended(session.as_ref()) => {
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                        _ = shutdown.cancelled() => return,
                        _ = tx.closed() => return,
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn kill_shell(
        &self,
        request: Request<pb::KillShellRequest>,
    ) -> Result<Response<pb::KillShellResponse>, Status> {
        let id = self.resolve_shell(&request.into_inner().shell_id)?;
        let record = self
            .manager
            .shared()
            .shells
            .kill(&id)
            .await
            .map_err(convert::shell_status)?;
        Ok(Response::new(pb::KillShellResponse {
            shell: Some(convert::shell(&record)),
        }))
    }

    async fn set_directory_trust(
        &self,
        request: Request<pb::SetDirectoryTrustRequest>,
    ) -> Result<Response<pb::TrustedDirectories>, Status> {
        let req = request.into_inner();
        let store = &self.manager.shared().store;
        let path = std::path::Path::new(&req.path);
        if !path.is_absolute() {
            return Err(convert::bounded(
                tonic::Code::InvalidArgument,
                format!("the directory must be an absolute path, got {:?}", req.path),
            ));
        }
        let changed = if req.trusted {
            let dir = std::fs::canonicalize(path).map_err(|e| {
                convert::bounded(
                    tonic::Code::InvalidArgument,
                    format!("cannot trust {}: {e}", path.display()),
                )
            })?;
            if !dir.is_dir() {
                return Err(Status::invalid_argument(format!(
                    "cannot trust {}: not a directory",
                    dir.display()
                )));
            }
            // The walk reads the disk: off the runtime's threads.
            let under = dir.clone();
            let pinned = tokio::task::spawn_blocking(move || crate::hooks::pins_under(&under))
                .await
                .map_err(|e| Status::internal(format!("looking for project files failed: {e}")))?;
            store.trust_dir(&dir, pinned)
        } else {
            // A directory that is gone can still be untrusted by its name.
            let dir = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            store.untrust_dir(&dir)
        }
        .map_err(|e| to_status(e.into()))?;
        store.flush().await.map_err(|e| to_status(e.into()))?;
        self.trusted(changed)
    }

    async fn list_trusted_directories(
        &self,
        _request: Request<pb::ListTrustedDirectoriesRequest>,
    ) -> Result<Response<pb::TrustedDirectories>, Status> {
        self.trusted(false)
    }

    async fn get_daemon_info(
        &self,
        request: Request<pb::GetDaemonInfoRequest>,
    ) -> Result<Response<pb::GetDaemonInfoResponse>, Status> {
        let who = caller(&request)?;
        let check_model = request.into_inner().check_model;
        if check_model {
            self.model_checks.admit(&who, std::time::Instant::now())?;
        }
        Ok(Response::new(
            super::info::daemon_info(&self.manager, check_model).await,
        ))
    }

    async fn answer_budget(
        &self,
        request: Request<pb::AnswerBudgetRequest>,
    ) -> Result<Response<pb::AnswerBudgetResponse>, Status> {
        let who = caller(&request)?;
        let req = request.into_inner();
        check_text(self.limits(), "client name", &req.client_name)?;
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let answer = crate::runtime::BudgetAnswer {
            raise: req.raise,
            raise_by: req.raise_by,
            by: Some(
                self.manager
                    .numbered(answerer(&who, req.client_name, "agent budget")),
            ),
        };
        let record = self
            .manager
            .answer_budget(&id, answer)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::AnswerBudgetResponse {
            conversation: Some(self.summary(&record)),
        }))
    }

    async fn compact_conversation(
        &self,
        request: Request<pb::CompactConversationRequest>,
    ) -> Result<Response<pb::CompactConversationResponse>, Status> {
        let id = self
            .manager
            .resolve(&request.into_inner().conversation_id)
            .map_err(to_status)?;
        let record = self.manager.compact(&id).await.map_err(to_status)?;
        Ok(Response::new(pb::CompactConversationResponse {
            conversation: Some(self.summary(&record)),
        }))
    }

    async fn continue_conversation(
        &self,
        request: Request<pb::ContinueConversationRequest>,
    ) -> Result<Response<pb::ContinueConversationResponse>, Status> {
        let id = self
            .manager
            .resolve(&request.into_inner().conversation_id)
            .map_err(to_status)?;
        let record = self
            .manager
            .continue_conversation(&id, false)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ContinueConversationResponse {
            conversation: Some(self.summary(&record)),
        }))
    }

    async fn list_mcp_servers(
        &self,
        _request: Request<pb::ListMcpServersRequest>,
    ) -> Result<Response<pb::ListMcpServersResponse>, Status> {
        let hub = &self.manager.shared().mcp;
        Ok(Response::new(convert::mcp_servers(
            hub.list(),
            hub.config_servers(),
        )))
    }

    type AttachStream = super::wire::Frames;

    async fn attach(
        &self,
        request: Request<Streaming<pb::AttachRequest>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let who = caller(&request)?;
        let mut inbound = request.into_inner();
        let first = match inbound
            .message()
            .await
            .map_err(|s| frame_status(s, "the first Attach frame"))?
        {
            Some(f) => f,
            None => {
                return Err(Status::invalid_argument(
                    "the Attach stream ended before `subscribe`",
                ));
            }
        };
        let name_of = |given: String| {
            if given.trim().is_empty() && who.name.is_none() && who.remote.is_none() {
                "anonymous".to_string()
            } else {
                given
            }
        };
        let (id, subscription) = match first.frame {
            Some(pb::attach_request::Frame::Subscribe(sub)) => {
                let id = self
                    .manager
                    .resolve(&sub.conversation_id)
                    .map_err(to_status)?;
                let asked = convert::role_from(sub.role)?;
                let client = who.client(String::new(), &name_of(sub.client_name), asked);
                let subscription = self
                    .manager
                    .subscribe(&id, sub.after_seq, client)
                    .await
                    .map_err(to_status)?;
                (id, subscription)
            }
            Some(pb::attach_request::Frame::Create(create)) => {
                // What CreateConversation needs, whatever role the stream
                // then asks for.
                let (needed, what) = access::frame_need(FrameKind::Create);
                access::check_role(who.role, needed, what)?;
                let asked = convert::role_from(create.role)?;
                let client = who.client(String::new(), &name_of(create.client_name), asked);
                let (new, prompt) =
                    self.new_conversation(&who, create.create.unwrap_or_default())?;
                let (record, subscription) = self
                    .manager
                    .create_attached(new, prompt, client)
                    .await
                    .map_err(to_status)?;
                (record.id, subscription)
            }
            _ => {
                return Err(Status::invalid_argument(
                    "the first Attach frame must be `subscribe` or `create`",
                ));
            }
        };
        let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
        let client = subscription.client.clone();
        tokio::spawn(forward(
            self.manager.clone(),
            id.clone(),
            subscription,
            tx.clone(),
            self.shutdown.clone(),
            who.session.clone(),
        ));
        tokio::spawn(read_frames(
            self.manager.clone(),
            id,
            (client, who.session),
            inbound,
            tx,
            self.shutdown.clone(),
        ));
        Ok(Response::new(super::wire::Frames::new(rx)))
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        let req = request.into_inner();
        let models = &self.manager.shared().config.models;
        let lines: Vec<(String, String, agentd_core::Usage)> = if req.conversation_id.is_empty() {
            let days = if req.days == 0 { 7 } else { req.days.min(3660) };
            self.manager.daily_usage(days).map_err(to_status)?
        } else {
            let id = self
                .manager
                .resolve(&req.conversation_id)
                .map_err(to_status)?;
            let record = self.manager.record(&id).map_err(to_status)?;
            let messages = self.manager.messages(&record).map_err(to_status)?;
            messages
                .iter()
                .filter_map(|(seq, m)| {
                    m.usage
                        .map(|u| (format!("#{seq}"), record.model.clone(), u))
                })
                .collect()
        };
        let shared = self.manager.shared();
        let budgets = if req.conversation_id.is_empty() {
            let now = shared.clock.now_ms();
            let day = crate::runtime::prompt::civil_date(now);
            let ctx = agentd_core::BudgetContext {
                configured: shared.config.budget,
                raised: shared
                    .store
                    .day_raises(&day)
                    .map_err(|e| to_status(e.into()))?,
                spent: crate::runtime::budget::day_spent(shared, &day)
                    .map_err(|e| to_status(e.into()))?,
            };
            crate::runtime::budget::statuses(&ctx, true)
        } else {
            let id = self
                .manager
                .resolve(&req.conversation_id)
                .map_err(to_status)?;
            let record = self.manager.record(&id).map_err(to_status)?;
            let ctx = agentd_core::BudgetContext {
                configured: shared.config.budget,
                raised: record.budget_raised,
                spent: crate::runtime::budget::conversation_spent(shared, &record),
            };
            crate::runtime::budget::statuses(&ctx, false)
        };
        let mut total = agentd_core::Usage::default();
        let mut total_cost = Some(0.0);
        let lines = lines
            .into_iter()
            .map(|(label, model, usage)| {
                let cost = models.cost(&model, &usage);
                total.add(&usage);
                total_cost = total_cost.zip(cost).map(|(a, b)| a + b);
                convert::usage_line(label, model, &usage, cost)
            })
            .collect();
        Ok(Response::new(pb::GetUsageResponse {
            lines,
            total: Some(convert::usage_line(
                "total".into(),
                String::new(),
                &total,
                total_cost,
            )),
            budgets: budgets
                .into_iter()
                .map(|b| pb::BudgetStatus {
                    budget: b.kind.name().to_string(),
                    usd: b.kind.is_usd(),
                    limit: b.limit,
                    spent: b.spent,
                    raised: b.raised,
                })
                .collect(),
        }))
    }

    type ExportConversationsStream = BoxStream<pb::ExportedConversation>;

    async fn export_conversations(
        &self,
        request: Request<pb::ExportConversationsRequest>,
    ) -> Result<Response<Self::ExportConversationsStream>, Status> {
        let session = caller(&request)?.session;
        let req = request.into_inner();
        let ids: Vec<String> = if req.conversation_ids.is_empty() {
            self.manager.ids().map_err(to_status)?
        } else {
            req.conversation_ids
                .iter()
                .map(|p| self.manager.resolve(p))
                .collect::<Result<_, _>>()
                .map_err(to_status)?
        };
        let manager = self.manager.clone();
        let max_attempts = self.max_attempts();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            for id in ids {
                if let Err(status) = access::session_check(session.as_ref()) {
                    let _ = tx.send(Err(status)).await;
                    break;
                }
                let item = manager.record(&id).and_then(|r| {
                    let messages = manager.messages(&r)?;
                    let images = manager.images_of(messages.iter().map(|(_, m)| m))?;
                    Ok(pb::ExportedConversation {
                        images: images
                            .into_iter()
                            .map(|(image, data)| pb::ImageBlock {
                                data,
                                ..convert::image(&image)
                            })
                            .collect(),
                        conversation: Some(convert::summary(
                            &r,
                            max_attempts,
                            0,
                            manager.shared().config.models.cost(&r.model, &r.usage),
                            manager
                                .shared()
                                .config
                                .models
                                .lookup(&r.model)
                                .context_window,
                        )),
                        messages: messages
                            .iter()
                            .map(|(s, m)| convert::message(*s, m))
                            .collect(),
                    })
                });
                if tx.send(item.map_err(to_status)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn import_conversations(
        &self,
        request: Request<Streaming<pb::ExportedConversation>>,
    ) -> Result<Response<pb::ImportConversationsResponse>, Status> {
        let who = caller(&request)?;
        let session = who.session.clone();
        let mut inbound = request.into_inner();
        let mut imported = 0;
        let mut skipped_ids = Vec::new();
        let mut notices = Vec::new();
        let mut read = 0usize;
        loop {
            read += 1;
            let item = match inbound.message().await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(status) => {
                    let status = frame_status(
                        status,
                        &format!(
                            "conversation {read} of the import ({imported} before it imported)"
                        ),
                    );
                    tracing::warn!("import stream: {}", status.message());
                    return Err(status);
                }
            };
            access::session_check(session.as_ref())?;
            let (mut record, messages) = convert::exported_from(&item)?;
            notices.extend(self.imported_grants(&who, &mut record)?);
            let images = convert::exported_images(&item)?;
            let id = record.id.clone();
            if self
                .manager
                .import(record, messages, images)
                .await
                .map_err(to_status)?
            {
                imported += 1;
            } else {
                skipped_ids.push(id);
            }
        }
        Ok(Response::new(pb::ImportConversationsResponse {
            imported,
            skipped_ids,
            notices,
        }))
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let req = request.into_inner();
        let Some(role) = convert::role_from(req.role)? else {
            return Err(Status::invalid_argument(
                "a token needs a role: viewer, approver or driver",
            ));
        };
        let expires_in =
            (req.expires_in_secs > 0).then(|| Duration::from_secs(req.expires_in_secs));
        let (token, secret) = self.access.create(role, &req.name, expires_in)?;
        self.access.flush().await?;
        tracing::info!(token = %token.id, name = %token.name, role = %token.role, "token created");
        Ok(Response::new(pb::CreateTokenResponse {
            token: Some(token_info(&token)),
            secret,
        }))
    }

    async fn list_tokens(
        &self,
        _request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        let tokens = self.access.tokens()?;
        let listening = self.access.listening.clone();
        Ok(Response::new(pb::ListTokensResponse {
            tokens: tokens.iter().map(token_info).collect(),
            listen_address: listening
                .as_ref()
                .map(|l| l.address.clone())
                .unwrap_or_default(),
            fingerprint: listening.map(|l| l.fingerprint).unwrap_or_default(),
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let token = self.access.revoke(&request.into_inner().id)?;
        self.access.flush().await?;
        tracing::info!(token = %token.id, name = %token.name, "token revoked");
        Ok(Response::new(pb::RevokeTokenResponse {
            token: Some(token_info(&token)),
        }))
    }

    async fn get_audit(
        &self,
        request: Request<pb::GetAuditRequest>,
    ) -> Result<Response<pb::GetAuditResponse>, Status> {
        let id = self
            .manager
            .resolve(&request.into_inner().conversation_id)
            .map_err(to_status)?;
        let entries = self
            .manager
            .shared()
            .store
            .audit(&id)
            .map_err(|e| to_status(e.into()))?;
        Ok(Response::new(pb::GetAuditResponse {
            entries: entries.iter().map(convert::audit_entry).collect(),
        }))
    }

    async fn rewind(
        &self,
        request: Request<pb::RewindRequest>,
    ) -> Result<Response<pb::RewindResponse>, Status> {
        let req = request.into_inner();
        let id = self
            .manager
            .resolve(&req.conversation_id)
            .map_err(to_status)?;
        let done = self
            .manager
            .rewind(
                &id,
                crate::runtime::RewindRequest {
                    to: req.message_seq,
                    code: req.code,
                    conversation: req.conversation,
                    force: req.force,
                },
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::RewindResponse {
            message_seq: done.message_seq,
            code: done
                .code
                .as_ref()
                .map(|r| convert::code_rewound(done.message_seq, r, "")),
            forked: done.forked.as_ref().map(|r| self.summary(r)),
        }))
    }
}

/// Copies a conversation's events to one client. Everything the hub has
/// ready is taken at once into the client's [`Outbox`], where consecutive
/// deltas merge while they wait: for room in the client's stream, or for
/// `outbox::DELTA_FRAME_INTERVAL` to pass since the client's last delta
/// frame. A client that falls behind, or a model that streams faster than
/// that, gives fewer, bigger frames with the same text. Only a client that
/// lets the outbox and then the hub's ring fill up is sent a fresh snapshot
/// instead; it never slows the conversation or the other clients.
async fn forward(
    manager: Arc<Manager>,
    id: String,
    sub: crate::runtime::Subscription,
    tx: super::wire::FrameTx,
    shutdown: CancellationToken,
    session: Option<access::Session>,
) {
    let client_id = sub.client.id.clone();
    let mut live = sub.live;
    let mut out = Outbox::default();
    // The highest sequence number queued for this client: the hub may hand
    // out events the initial frames (or a resync snapshot) already cover.
    let mut last = 0u64;
    for ev in sub.initial {
        last = last.max(ev.seq);
        out.push(ev);
    }
    let mut hub_open = true;
    let hold = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(hold);
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    let ended = access::session_ended(session.as_ref());
    tokio::pin!(ended);
    loop {
        // Everything the hub has ready, without waiting.
        while hub_open && !out.is_full() {
            let received = match live.try_recv() {
                Ok(ev) => {
                    queue(&mut out, &mut last, ev);
                    continue;
                }
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    Err(broadcast::error::RecvError::Lagged(n))
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    Err(broadcast::error::RecvError::Closed)
                }
            };
            if !take(
                &manager,
                &id,
                &client_id,
                received,
                &mut out,
                &mut last,
                &mut hub_open,
            )
            .await
            {
                return manager.detach(&id, client_id).await;
            }
        }
        // What is due, as far as the client's stream has room, without
        // waiting.
        let mut holding = false;
        loop {
            match out.due(Instant::now()) {
                Due::Empty => break,
                Due::At(at) => {
                    hold.as_mut().reset(at);
                    holding = true;
                    break;
                }
                Due::Now => {}
            }
            match tx.try_reserve() {
                Ok(permit) => {
                    if let Some(frame) = out.pop(Instant::now()) {
                        permit.send(frame);
                    }
                }
                Err(mpsc::error::TrySendError::Full(())) => break,
                Err(mpsc::error::TrySendError::Closed(())) => {
                    return manager.detach(&id, client_id).await;
                }
            }
        }
        if !hub_open && out.is_empty() {
            break;
        }
        // Then wait: for the held delta to fall due (what arrives meanwhile
        // is taken then, at once), for room in the stream (while frames
        // wait) or for the next event (while the outbox has room).
        tokio::select! {
            biased;
            _ = &mut cancelled => {
                let _ = tx.try_send(super::wire::frame(&convert::event(&ConvEvent::new(
                    0,
                    0,
                    EventKind::Notice("agentd is shutting down".to_string()),
                ))));
                break;
            }
            // The token was revoked or expired: the stream ends, saying so.
            status = &mut ended => {
                // Within a bound: a client that reads nothing does not
                // keep the stream open.
                let _ = tokio::time::timeout(Duration::from_secs(1), tx.send(Err(status))).await;
                break;
            }
            _ = &mut hold, if holding => {}
            permit = tx.reserve(), if !holding && !out.is_empty() => match permit {
                Ok(permit) => {
                    if let Some(frame) = out.pop(Instant::now()) {
                        permit.send(frame);
                    }
                }
                Err(_) => break,
            },
            received = live.recv(), if !holding && hub_open && !out.is_full() => {
                if !take(&manager, &id, &client_id, received, &mut out, &mut last, &mut hub_open).await {
                    break;
                }
            }
            _ = tx.closed(), if holding || out.is_empty() => break,
        }
    }
    manager.detach(&id, client_id).await;
}

/// Queues what the hub gave a client's forwarding task. A client that
/// lagged behind the hub's ring is sent a snapshot instead of everything
/// before it. Returns false when the client must be let go (its
/// conversation is gone).
async fn take(
    manager: &Manager,
    id: &str,
    client_id: &str,
    received: Result<Arc<ConvEvent>, broadcast::error::RecvError>,
    out: &mut Outbox,
    last: &mut u64,
    hub_open: &mut bool,
) -> bool {
    let ev = match received {
        Ok(ev) => ev,
        Err(broadcast::error::RecvError::Lagged(n)) => {
            tracing::debug!(conversation = %id, client = %client_id, "client lagged by {n} events; resynchronising");
            match manager.resync(id, client_id.to_string()).await {
                Ok(snapshot) => {
                    out.drop_sequenced();
                    *last = (*last).max(snapshot.seq);
                    out.push(snapshot);
                    return true;
                }
                Err(_) => return false,
            }
        }
        Err(broadcast::error::RecvError::Closed) => {
            // What is queued still goes out.
            *hub_open = false;
            return true;
        }
    };
    queue(out, last, ev);
    true
}

/// Queues an event from the hub unless the client has it already.
fn queue(out: &mut Outbox, last: &mut u64, ev: Arc<ConvEvent>) {
    if ev.seq > *last {
        *last = ev.seq;
        out.push(ev);
    }
}

/// Reads a client's frames after `subscribe`. Refusals of its own requests
/// go back to that client only (sequence number 0).
async fn read_frames(
    manager: Arc<Manager>,
    id: String,
    (client, session): (crate::runtime::ClientInfo, Option<access::Session>),
    mut inbound: Streaming<pb::AttachRequest>,
    tx: super::wire::FrameTx,
    shutdown: CancellationToken,
) {
    use pb::attach_request::Frame;
    let limits = &manager.shared().config.grpc;
    loop {
        let frame = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = tx.closed() => break,
            // The stream's forwarding task ends it with the reason.
            _ = access::session_ended(session.as_ref()) => break,
            m = inbound.message() => match m {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(status) if connection_ended(&status) => {
                    // The client went away without ending its stream (a
                    // terminal closed, `agent run` done): nothing to tell.
                    tracing::debug!(conversation = %id, client = %client.name, "Attach stream ended with its connection: {}", status.message());
                    break;
                }
                Err(status) => {
                    // The stream cannot be read past a frame it could not
                    // decode: end it with a status that says why, to this
                    // client only.
                    let status = frame_status(status, "Attach frame");
                    tracing::warn!(conversation = %id, client = %client.name, "closing an Attach stream: {}", status.message());
                    tokio::select! {
                        _ = tx.send(Err(status)) => {}
                        _ = shutdown.cancelled() => {}
                    }
                    break;
                }
            },
        };
        let kind = match &frame.frame {
            Some(Frame::Subscribe(_)) => Some(FrameKind::Subscribe),
            Some(Frame::Create(_)) => Some(FrameKind::Create),
            Some(Frame::Send(_)) => Some(FrameKind::Send),
            Some(Frame::Answer(_)) => Some(FrameKind::Answer),
            Some(Frame::Cancel(_)) => Some(FrameKind::Cancel),
            Some(Frame::Budget(_)) => Some(FrameKind::Budget),
            None => None,
        };
        // Nothing is done, or recorded, under a token revoked or expired
        // since the stream began.
        if let Err(status) = access::session_check(session.as_ref()) {
            let _ = tx.try_send(Err(status));
            break;
        }
        if let Some(kind) = kind {
            let (needed, what) = access::frame_need(kind);
            if let Err(refused) = access::check_role(client.role, needed, what) {
                if tx
                    .send(super::wire::frame(&local_error(
                        refused.message().to_string(),
                    )))
                    .await
                    .is_err()
                {
                    break;
                }
                continue;
            }
        }
        let outcome: Result<(), Status> = match frame.frame {
            Some(Frame::Subscribe(_) | Frame::Create(_)) => {
                Err(Status::invalid_argument("already subscribed"))
            }
            Some(Frame::Send(s)) => {
                let images = convert::uploads(&manager.shared().config.images.limits(), s.images);
                if s.text.trim().is_empty() && images.as_ref().is_ok_and(Vec::is_empty) {
                    Err(Status::invalid_argument("message text is empty"))
                } else if let Err(refused) = check_text(limits, "message text", &s.text) {
                    Err(refused)
                } else {
                    match convert::client_request_id_from(s.client_request_id)
                        .and_then(|id| images.map(|images| (id, images)))
                    {
                        Ok((client_request_id, images)) => {
                            let message = crate::runtime::NewMessage {
                                text: s.text,
                                images,
                                client_request_id,
                                expected_turn: s.expected_turn,
                                queue_if_busy: s.queue_if_busy,
                                from: Some(client.clone()),
                                by: None,
                            };
                            manager
                                .send_message(&id, message)
                                .await
                                .map(|_| ())
                                .map_err(to_status)
                        }
                        Err(refused) => Err(refused),
                    }
                }
            }
            Some(Frame::Answer(a)) => {
                match check_text(limits, "feedback", &a.feedback).and_then(|()| {
                    convert::answer_from(
                        a.request_id,
                        a.decision,
                        a.feedback,
                        a.scope,
                        client.clone(),
                        a.client_request_id,
                        a.plan_answer,
                    )
                }) {
                    Ok(answer) => manager.answer(&id, answer).await.map_err(to_status),
                    Err(s) => Err(s),
                }
            }
            Some(Frame::Cancel(c)) => match convert::client_request_id_from(c.client_request_id) {
                Ok(client_request_id) => manager
                    .cancel_request(&id, client_request_id)
                    .await
                    .map(|_| ())
                    .map_err(to_status),
                Err(refused) => Err(refused),
            },
            Some(Frame::Budget(b)) => {
                let answer = crate::runtime::BudgetAnswer {
                    raise: b.raise,
                    raise_by: b.raise_by,
                    by: Some(client.clone()),
                };
                manager
                    .answer_budget(&id, answer)
                    .await
                    .map(|_| ())
                    .map_err(to_status)
            }
            None => Err(Status::invalid_argument("empty Attach frame")),
        };
        if let Err(status) = outcome
            && tx
                .send(super::wire::frame(&local_error(
                    status.message().to_string(),
                )))
                .await
                .is_err()
        {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_shell_prefix_resolves_only_when_it_is_unique() {
        assert_eq!(
            pick_shell("sh-ab", &ids(&["sh-abcdef"])).ok(),
            Some("sh-abcdef".into())
        );
        let none = pick_shell("sh-zz", &[])
            .err()
            .map(|s| (s.code(), s.message().to_string()));
        assert_eq!(
            none,
            Some((tonic::Code::NotFound, "unknown shell sh-zz".into()))
        );
        let two = pick_shell("sh", &ids(&["sh-a", "sh-b"])).err();
        assert_eq!(
            two.map(|s| (s.code(), s.message().to_string())),
            Some((
                tonic::Code::InvalidArgument,
                "ambiguous shell prefix sh (matches sh-a and sh-b)".into()
            ))
        );
        let many = pick_shell("sh", &ids(&["sh-a", "sh-b", "sh-c"])).err();
        assert!(many.is_some_and(|s| s.message().ends_with("(matches sh-a, sh-b, …)")));
        let empty = pick_shell(" ", &[]).err().map(|s| s.code());
        assert_eq!(empty, Some(tonic::Code::InvalidArgument));
    }
}
