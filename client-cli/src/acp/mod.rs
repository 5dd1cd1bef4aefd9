//! `agent acp`: an Agent Client Protocol agent on stdin/stdout, for editors
//! (Zed, JetBrains, Neovim plugins). A thin bridge: every ACP session is a
//! daemon conversation, joined with `Attach` like `agent attach` joins it,
//! so an editor and any number of terminals share one live conversation and
//! its permission requests (the first answer wins, wherever it comes from).
//!
//! Layout: this file serves the ACP methods and runs one *pump* per session
//! (the conversation's Attach stream turned into `session/update`s and
//! `session/request_permission`s); [`map`] holds the pure mappings.
//!
//! stdout is the protocol: nothing else may be written there. Notes for
//! people go to stderr, which editors keep in their logs.

mod map;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::ErrorCode;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    ContentChunk, CurrentModeUpdate, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest,
    PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, ResumeSessionRequest,
    ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities, SessionId, SessionInfo,
    SessionListCapabilities, SessionModeState, SessionNotification, SessionResumeCapabilities,
    SessionUpdate, SetSessionModeRequest, SetSessionModeResponse, StopReason, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::{Agent, Client as Editor, Error, RequestCancellationHandle, Stdio};
use agent_proto::v1::{
    self as pb, AttachRequest, PermissionDecision, Role, StateKind, attach_request::Frame,
    attach_response::Event, content_block::Block,
};
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio_stream::wrappers::ReceiverStream;

use crate::commands::{client_name, request_id};
use crate::connect::{Client, connect_or_start};
use crate::error::{CliError, Exit};

/// The connection to the editor.
type EditorLink = agent_client_protocol::v1::ConnectionTo<Editor>;

/// How long a session's pump keeps trying to reach the daemon again.
const RECONNECT_WINDOW: Duration = Duration::from_secs(30);
/// The most of a running command's output kept for the editor.
const OUTPUT_KEPT: usize = 16 * 1024;
/// Conversations one `session/list` page holds.
const LIST_PAGE: u32 = 50;

/// Where the daemon is, as every command gets it.
#[derive(Debug, Clone)]
pub struct Target {
    pub socket: PathBuf,
    pub pass_socket: bool,
    pub autostart: bool,
}

/// Serves ACP on stdin/stdout until the editor closes stdin.
pub async fn serve(target: Target) -> Result<Exit, CliError> {
    let bridge = Arc::new(Bridge {
        target,
        name: format!("{} (acp)", client_name()),
        daemon: tokio::sync::Mutex::new(None),
        bypass_allowed: Mutex::new(false),
        sessions: Mutex::new(HashMap::new()),
    });
    let (b1, b2, b3, b4, b5, b6, b7, b8, b9, b10) = (
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge.clone(),
        bridge,
    );
    Agent
        .v1()
        .name("agent acp")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx: EditorLink| {
                let b = b1.clone();
                tokio::spawn(async move { responder.respond_with_result(b.initialize(req).await) });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, cx: EditorLink| {
                let b = b2.clone();
                tokio::spawn(
                    async move { responder.respond_with_result(b.new_session(req, cx).await) },
                );
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, cx: EditorLink| {
                let b = b3.clone();
                tokio::spawn(async move {
                    let (result, pending) = match b.open(&req.session_id.0, true, &cx).await {
                        Ok((state, live, pending)) => (
                            Ok(LoadSessionResponse::new().modes(state)),
                            Some((live, pending)),
                        ),
                        Err(e) => (Err(e), None),
                    };
                    let sent = responder.respond_with_result(result);
                    // A request pending when the editor joined is asked once
                    // the editor knows the session.
                    if let Some((live, Some(request))) = pending {
                        tokio::spawn(ask_permission(b, live, cx, request));
                    }
                    sent
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ResumeSessionRequest, responder, cx: EditorLink| {
                let b = b4.clone();
                tokio::spawn(async move {
                    let (result, pending) = match b.open(&req.session_id.0, false, &cx).await {
                        Ok((state, live, pending)) => (
                            Ok(ResumeSessionResponse::new().modes(state)),
                            Some((live, pending)),
                        ),
                        Err(e) => (Err(e), None),
                    };
                    let sent = responder.respond_with_result(result);
                    if let Some((live, Some(request))) = pending {
                        tokio::spawn(ask_permission(b, live, cx, request));
                    }
                    sent
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, _cx: EditorLink| {
                let b = b5.clone();
                tokio::spawn(async move { responder.respond_with_result(b.prompt(req).await) });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: CancelNotification, _cx: EditorLink| {
                let b = b6.clone();
                tokio::spawn(async move { b.cancel(&note.session_id.0).await });
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: SetSessionModeRequest, responder, _cx: EditorLink| {
                let b = b7.clone();
                tokio::spawn(async move { responder.respond_with_result(b.set_mode(req).await) });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest, responder, _cx: EditorLink| {
                let b = b8.clone();
                tokio::spawn(async move { responder.respond_with_result(b.list(req).await) });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest, responder, _cx: EditorLink| {
                let result = b9.close(&req.session_id.0);
                responder.respond_with_result(result)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(Stdio::new())
        .await
        .map_err(|e| CliError::Server(format!("ACP connection failed: {e}")))?;
    b10.close_all();
    Ok(Exit::Ok)
}

/// A JSON-RPC error the editor shows.
fn rpc_error(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

fn invalid_params(message: impl Into<String>) -> Error {
    rpc_error(ErrorCode::InvalidParams, message)
}

/// A daemon status as a JSON-RPC error: unknown conversations are
/// "resource not found", refusals and bad input "invalid params", the rest
/// internal errors, each with the daemon's message.
fn status_error(status: &tonic::Status) -> Error {
    let code = match status.code() {
        tonic::Code::NotFound => ErrorCode::ResourceNotFound,
        tonic::Code::InvalidArgument
        | tonic::Code::FailedPrecondition
        | tonic::Code::OutOfRange => ErrorCode::InvalidParams,
        _ => ErrorCode::InternalError,
    };
    rpc_error(code, format!("agentd: {}", status.message()))
}

/// The bridge: the daemon connection and the sessions it serves.
struct Bridge {
    target: Target,
    /// This client's name, shown to the conversation's other clients.
    name: String,
    /// Connected on first use (so a missing daemon is a JSON-RPC error the
    /// editor shows, and autostart happens as for every command).
    daemon: tokio::sync::Mutex<Option<Client>>,
    /// Whether the daemon runs with --allow-bypass (read at initialize).
    bypass_allowed: Mutex<bool>,
    /// Open sessions by conversation id. A std mutex: nothing awaits while
    /// it is held.
    sessions: Mutex<HashMap<String, Arc<Live>>>,
}

/// Locks a std mutex; a poisoned one (a panicking holder) is still usable:
/// every value kept behind these is valid between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Bridge {
    async fn client(&self) -> Result<Client, Error> {
        let mut guard = self.daemon.lock().await;
        if let Some(client) = guard.as_ref() {
            return Ok(client.clone());
        }
        let t = &self.target;
        let client = connect_or_start(&t.socket, t.pass_socket, t.autostart)
            .await
            .map_err(|e| rpc_error(ErrorCode::InternalError, e.to_string()))?;
        *guard = Some(client.clone());
        Ok(client)
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Live>, Error> {
        lock(&self.sessions)
            .get(id.0.as_ref())
            .cloned()
            .ok_or_else(|| {
                rpc_error(
                    ErrorCode::ResourceNotFound,
                    format!(
                        "no open session {} (session/new or session/load it first)",
                        id.0
                    ),
                )
            })
    }

    fn modes(&self, mode: i32) -> SessionModeState {
        map::mode_state(mode, *lock(&self.bypass_allowed))
    }

    async fn initialize(&self, req: InitializeRequest) -> Result<InitializeResponse, Error> {
        let mut client = self.client().await?;
        let info = client
            .get_daemon_info(pb::GetDaemonInfoRequest { check_model: false })
            .await
            .map_err(|s| status_error(&s))?
            .into_inner();
        *lock(&self.bypass_allowed) = info.args.iter().any(|a| a == "--allow-bypass");
        let version = if req.protocol_version < ProtocolVersion::V1 {
            req.protocol_version
        } else {
            ProtocolVersion::V1
        };
        // Honest capabilities: sessions can be loaded, resumed, listed and
        // closed; prompts are text (and resource links, which every agent
        // takes); the editor's file system and terminals are never used.
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(PromptCapabilities::new())
            .mcp_capabilities(McpCapabilities::new().http(true))
            .session_capabilities(
                SessionCapabilities::new()
                    .list(SessionListCapabilities::new())
                    .resume(SessionResumeCapabilities::new())
                    .close(SessionCloseCapabilities::new()),
            );
        Ok(InitializeResponse::new(version)
            .agent_capabilities(capabilities)
            .agent_info(Implementation::new("agent", env!("CARGO_PKG_VERSION")).title("agentd")))
    }

    async fn new_session(
        self: Arc<Self>,
        req: NewSessionRequest,
        cx: EditorLink,
    ) -> Result<NewSessionResponse, Error> {
        if !req.cwd.is_absolute() {
            return Err(invalid_params(format!(
                "cwd must be an absolute path, not {}",
                req.cwd.display()
            )));
        }
        // The editor's MCP servers become the conversation's (the daemon
        // checks them and says what is wrong).
        let mcp_servers = req
            .mcp_servers
            .iter()
            .map(map::mcp_server)
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid_params)?;
        let mut client = self.client().await?;
        let created = client
            .create_conversation(pb::CreateConversationRequest {
                cwd: req.cwd.display().to_string(),
                additional_dirs: req
                    .additional_directories
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect(),
                client_request_id: request_id(),
                mcp_servers,
                ..Default::default()
            })
            .await
            .map_err(|s| status_error(&s))?
            .into_inner();
        let id = created
            .conversation
            .map(|c| c.id)
            .ok_or_else(|| rpc_error(ErrorCode::InternalError, "agentd created no conversation"))?;
        let (modes, ..) = self.open(&id, false, &cx).await?;
        Ok(NewSessionResponse::new(id).modes(modes))
    }

    /// Joins a conversation: starts its pump, waits for the snapshot
    /// (replayed as updates when `replay`), and returns its modes, the
    /// session and the permission request pending in it.
    async fn open(
        self: &Arc<Self>,
        id: &str,
        replay: bool,
        cx: &EditorLink,
    ) -> Result<(SessionModeState, Arc<Live>, Option<pb::PermissionRequest>), Error> {
        if let Some(live) = lock(&self.sessions).get(id).cloned() {
            // Open already (a second load): the stream is live; nothing to redo.
            let mode = lock(&live.shared).mode;
            return Ok((self.modes(mode), live, None));
        }
        let client = self.client().await?;
        let (ready_tx, ready_rx) = oneshot::channel();
        let live = Arc::new(Live {
            id: id.to_string(),
            shared: Mutex::new(Shared::default()),
            pump: Mutex::new(None),
        });
        let pump = tokio::spawn(pump(
            self.clone(),
            live.clone(),
            client,
            cx.clone(),
            replay,
            ready_tx,
        ));
        *lock(&live.pump) = Some(pump);
        let ready = ready_rx.await.map_err(|_| {
            rpc_error(
                ErrorCode::InternalError,
                "the session ended before it was ready",
            )
        })??;
        lock(&self.sessions).insert(ready.id.clone(), live.clone());
        Ok((self.modes(ready.mode), live, ready.pending))
    }

    async fn prompt(&self, req: PromptRequest) -> Result<PromptResponse, Error> {
        let text = map::prompt_text(&req.prompt).map_err(invalid_params)?;
        let live = self.session(&req.session_id)?;
        let (done_tx, done_rx) = oneshot::channel();
        {
            let mut shared = lock(&live.shared);
            if shared.waiter.is_some() {
                return Err(invalid_params(
                    "a prompt is already running in this session",
                ));
            }
            shared.waiter = Some(Waiter {
                msg_seq: None,
                cancelled: false,
                done: done_tx,
            });
            shared.own_texts.push(text.clone());
        }
        let mut client = self.client().await?;
        let sent = client
            .send_message(pb::SendMessageRequest {
                conversation_id: live.id.clone(),
                text: text.clone(),
                client_request_id: request_id(),
                ..Default::default()
            })
            .await;
        match sent {
            Ok(response) => live.sent(response.into_inner().message_seq),
            Err(status) => {
                let mut shared = lock(&live.shared);
                shared.waiter = None;
                if let Some(at) = shared.own_texts.iter().position(|t| *t == text) {
                    shared.own_texts.remove(at);
                }
                return Err(status_error(&status));
            }
        }
        match done_rx.await {
            Ok(Ok(stop)) => Ok(PromptResponse::new(stop)),
            Ok(Err(message)) => Err(rpc_error(ErrorCode::InternalError, message)),
            Err(_) => Err(rpc_error(
                ErrorCode::InternalError,
                "the session closed before the turn ended",
            )),
        }
    }

    async fn cancel(&self, id: &str) {
        let live = match self.session(&SessionId::new(id)) {
            Ok(live) => live,
            Err(e) => {
                eprintln!("agent acp: session/cancel: {}", e.message);
                return;
            }
        };
        if let Some(waiter) = lock(&live.shared).waiter.as_mut() {
            waiter.cancelled = true;
        }
        let result = match self.client().await {
            Ok(mut client) => client
                .cancel_conversation(pb::CancelConversationRequest {
                    conversation_id: live.id.clone(),
                    client_request_id: request_id(),
                })
                .await
                .map(|_| ())
                .map_err(|s| s.message().to_string()),
            Err(e) => Err(e.message),
        };
        if let Err(why) = result {
            eprintln!("agent acp: cancelling {}: {why}", live.id);
        }
    }

    async fn set_mode(&self, req: SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        let live = self.session(&req.session_id)?;
        let mode = map::mode_of(&req.mode_id.0).ok_or_else(|| {
            invalid_params(format!(
                "unknown mode {:?} (read_only, default, accept_edits, plan, bypass)",
                req.mode_id.0
            ))
        })?;
        let mut client = self.client().await?;
        client
            .update_conversation(pb::UpdateConversationRequest {
                conversation_id: live.id.clone(),
                mode: mode as i32,
                client_name: self.name.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| status_error(&s))?;
        // The editor asked for it: the SettingsChanged that follows is no news.
        lock(&live.shared).mode = mode as i32;
        Ok(SetSessionModeResponse::new())
    }

    async fn list(&self, req: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        let mut client = self.client().await?;
        let page = client
            .list_conversations(pb::ListConversationsRequest {
                limit: LIST_PAGE,
                before_id: req.cursor.clone().unwrap_or_default(),
            })
            .await
            .map_err(|s| status_error(&s))?
            .into_inner();
        let sessions = page
            .conversations
            .into_iter()
            .filter(|c| req.cwd.as_ref().is_none_or(|cwd| Path::new(&c.cwd) == cwd))
            .map(|c| {
                SessionInfo::new(c.id, PathBuf::from(c.cwd))
                    .title((!c.title.is_empty()).then_some(c.title))
                    .updated_at(map::iso8601(c.updated_at_ms))
            })
            .collect();
        Ok(ListSessionsResponse::new(sessions)
            .next_cursor((!page.next_before_id.is_empty()).then_some(page.next_before_id)))
    }

    fn close(&self, id: &str) -> Result<CloseSessionResponse, Error> {
        let live = lock(&self.sessions).remove(id).ok_or_else(|| {
            rpc_error(ErrorCode::ResourceNotFound, format!("no open session {id}"))
        })?;
        live.stop("the session was closed");
        Ok(CloseSessionResponse::new())
    }

    fn close_all(&self) {
        for (_, live) in lock(&self.sessions).drain() {
            live.stop("the editor went away");
        }
    }
}

/// One open session: a conversation this bridge is attached to.
struct Live {
    /// The conversation's full id (the ACP session id).
    id: String,
    shared: Mutex<Shared>,
    pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the pump and the request handlers share about a session.
#[derive(Default)]
struct Shared {
    cwd: PathBuf,
    mode: i32,
    /// The `session/prompt` waiting for its turn to end.
    waiter: Option<Waiter>,
    /// How the last turn ended, and the last message seen before it did.
    turn_end: Option<(u64, TurnEnd)>,
    /// The highest message sequence number seen.
    last_msg_seq: u64,
    /// The last reply's stop reason and whether a cancel cut it.
    last_stop: (String, bool),
    /// Prompts this bridge sent and has not seen appended: not echoed back.
    own_texts: Vec<String>,
    /// Tool calls the editor was told of, ended, and their inputs.
    announced: HashSet<String>,
    ended: HashSet<String>,
    inputs: HashMap<String, String>,
    /// What running commands printed so far (the newest part).
    output: HashMap<String, String>,
    /// Permission requests asked of the editor and not answered, and those
    /// resolved (by anyone) or answered from here.
    asked: HashMap<String, RequestCancellationHandle>,
    resolved: HashSet<String>,
    answered_here: HashSet<String>,
}

/// A prompt waiting for the end of its turn.
struct Waiter {
    /// The user message it sent, once the daemon said which.
    msg_seq: Option<u64>,
    /// `session/cancel` came: the turn ends cancelled.
    cancelled: bool,
    done: oneshot::Sender<Result<StopReason, String>>,
}

/// How a turn ended.
#[derive(Clone)]
enum TurnEnd {
    /// Idle again: the last reply's stop reason, and whether a cancel cut it.
    Idle { stop: String, interrupted: bool },
    /// The context window is full.
    Exhausted,
    /// The turn failed: why.
    Failed(String),
}

impl Live {
    /// The daemon accepted the prompt as message `seq`.
    fn sent(&self, seq: u64) {
        let mut shared = lock(&self.shared);
        if let Some(waiter) = shared.waiter.as_mut() {
            waiter.msg_seq = Some(seq);
        }
        shared.finish_if_over();
    }

    /// Ends the pump and any prompt waiting.
    fn stop(&self, why: &str) {
        if let Some(pump) = lock(&self.pump).take() {
            pump.abort();
        }
        if let Some(waiter) = lock(&self.shared).waiter.take() {
            let _ = waiter.done.send(Err(why.to_string()));
        }
    }
}

impl Shared {
    /// Answers the waiting prompt when its turn has ended.
    fn finish_if_over(&mut self) {
        let over = match (&self.waiter, &self.turn_end) {
            (
                Some(Waiter {
                    msg_seq: Some(seq), ..
                }),
                Some((at, _)),
            ) => at >= seq,
            _ => false,
        };
        if !over {
            return;
        }
        let (Some(waiter), Some((_, end))) = (self.waiter.take(), self.turn_end.clone()) else {
            return;
        };
        let result = match end {
            TurnEnd::Idle { stop, interrupted } => {
                Ok(map::stop_reason(&stop, interrupted, waiter.cancelled))
            }
            TurnEnd::Exhausted if waiter.cancelled => Ok(StopReason::Cancelled),
            TurnEnd::Exhausted => Ok(StopReason::MaxTokens),
            TurnEnd::Failed(_) if waiter.cancelled => Ok(StopReason::Cancelled),
            TurnEnd::Failed(why) => Err(format!("the turn failed: {why}")),
        };
        let _ = waiter.done.send(result);
    }
}

/// What a pump reports once its first snapshot is handled.
struct Ready {
    id: String,
    mode: i32,
    pending: Option<pb::PermissionRequest>,
}

/// The session's Attach stream, turned into ACP: subscribes (again after
/// the connection breaks, from the last event seen), reports the first
/// snapshot through `ready`, then forwards events until the session closes.
async fn pump(
    bridge: Arc<Bridge>,
    live: Arc<Live>,
    mut client: Client,
    cx: EditorLink,
    replay: bool,
    ready: oneshot::Sender<Result<Ready, Error>>,
) {
    let mut ready = Some(ready);
    let mut pump = Pump {
        bridge,
        live,
        cx,
        last_seq: 0,
        replay,
    };
    let mut broken_since: Option<tokio::time::Instant> = None;
    let mut delay = Duration::from_millis(100);
    loop {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let subscribe = AttachRequest {
            frame: Some(Frame::Subscribe(pb::Subscribe {
                conversation_id: pump.live.id.clone(),
                after_seq: pump.last_seq,
                client_name: pump.bridge.name.clone(),
                ..Default::default()
            })),
        };
        // The receiver is alive: this cannot fail.
        let _ = tx.send(subscribe).await;
        let why = match client.attach(ReceiverStream::new(rx)).await {
            Err(status) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(status_error(&status)));
                    return;
                }
                status.message().to_string()
            }
            Ok(response) => {
                let mut stream = response.into_inner();
                loop {
                    match stream.next().await {
                        Some(Ok(event)) => {
                            broken_since = None;
                            delay = Duration::from_millis(100);
                            if let Some(r) = pump.handle(event)
                                && let Some(ready) = ready.take()
                            {
                                let _ = ready.send(Ok(r));
                            }
                        }
                        Some(Err(status)) => break status.message().to_string(),
                        None => break "the daemon closed the stream".to_string(),
                    }
                }
            }
        };
        // `tx` lives until here: the stream stays open while it is read.
        drop(tx);
        if let Some(ready) = ready.take() {
            let _ = ready.send(Err(rpc_error(ErrorCode::InternalError, why)));
            return;
        }
        let since = *broken_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() > RECONNECT_WINDOW {
            eprintln!("agent acp: {}: giving up on agentd: {why}", pump.live.id);
            pump.live.stop(&format!("connection to agentd lost: {why}"));
            return;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
        match pump.bridge.client().await {
            Ok(c) => client = c,
            Err(e) => eprintln!("agent acp: reconnecting: {}", e.message),
        }
    }
}

struct Pump {
    bridge: Arc<Bridge>,
    live: Arc<Live>,
    cx: EditorLink,
    /// The highest event sequence number seen (resuming starts after it).
    last_seq: u64,
    /// The first snapshot is replayed to the editor (`session/load`).
    replay: bool,
}

impl Pump {
    fn notify(&self, update: SessionUpdate) {
        let note = SessionNotification::new(self.live.id.clone(), update);
        if let Err(e) = self.cx.send_notification(note) {
            eprintln!("agent acp: cannot send a session update: {}", e.message);
        }
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        lock(&self.live.shared)
    }

    /// Handles one event; the first snapshot's [`Ready`] is returned.
    fn handle(&mut self, frame: pb::AttachResponse) -> Option<Ready> {
        if frame.seq > 0 {
            if frame.seq <= self.last_seq {
                return None;
            }
            self.last_seq = frame.seq;
        }
        match frame.event? {
            Event::Snapshot(snapshot) => return Some(self.snapshot(snapshot)),
            Event::TextDelta(d) => self.notify(SessionUpdate::AgentMessageChunk(
                ContentChunk::new(ContentBlock::from(d.text)),
            )),
            Event::ThinkingDelta(d) => self.notify(SessionUpdate::AgentThoughtChunk(
                ContentChunk::new(ContentBlock::from(d.text)),
            )),
            Event::MessageAppended(m) => {
                if let Some(message) = m.message {
                    self.appended(&message);
                }
            }
            Event::ToolCallBegin(b) => self.tool_begin(&b),
            Event::ToolOutputDelta(d) => self.tool_output(&d),
            Event::ToolCallEnd(end) => {
                let (input, cwd) = {
                    let mut shared = self.shared();
                    shared.ended.insert(end.tool_use_id.clone());
                    shared.output.remove(&end.tool_use_id);
                    (
                        shared.inputs.get(&end.tool_use_id).cloned(),
                        shared.cwd.clone(),
                    )
                };
                self.notify(SessionUpdate::ToolCallUpdate(map::tool_call_end(
                    &end,
                    input.as_deref(),
                    &cwd,
                )));
            }
            Event::PermissionRequested(p) => {
                if let Some(request) = p.request {
                    tokio::spawn(ask_permission(
                        self.bridge.clone(),
                        self.live.clone(),
                        self.cx.clone(),
                        request,
                    ));
                }
            }
            Event::PermissionResolved(r) => {
                let withdrawn = {
                    let mut shared = self.shared();
                    shared.resolved.insert(r.request_id.clone());
                    let here = shared.answered_here.contains(&r.request_id);
                    match shared.asked.remove(&r.request_id) {
                        Some(asked) if !here => {
                            // Another client (or the cancel) came first: the
                            // editor's question is withdrawn.
                            let _ = asked.cancel();
                            true
                        }
                        _ => false,
                    }
                };
                if let Some(note) = withdrawn.then(|| map::answered_elsewhere(&r)).flatten() {
                    self.notify(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                        ContentBlock::from(note),
                    )));
                }
            }
            Event::SettingsChanged(s) => {
                let changed = {
                    let mut shared = self.shared();
                    let changed = shared.mode != s.mode;
                    shared.mode = s.mode;
                    changed
                };
                if changed {
                    self.notify(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(
                        map::mode_id(s.mode),
                    )));
                }
            }
            Event::StateChanged(s) => {
                if let Some(state) = s.state {
                    self.state(&state);
                }
            }
            Event::Error(e) if frame.seq == 0 => {
                eprintln!("agent acp: agentd refused: {}", e.message);
            }
            // The plan and its progress as ACP `plan` updates.
            Event::PlanConfirmed(pb::PlanConfirmed { plan: Some(p), .. })
            | Event::PlanStepStarted(pb::PlanStepChanged { plan: Some(p), .. })
            | Event::PlanStepCompleted(pb::PlanStepChanged { plan: Some(p), .. })
            | Event::PlanStepFailed(pb::PlanStepChanged { plan: Some(p), .. })
            | Event::PlanStepSkipped(pb::PlanStepChanged { plan: Some(p), .. }) => {
                self.notify(SessionUpdate::Plan(map::plan(&p)));
            }
            _ => {}
        }
        None
    }

    fn snapshot(&mut self, snapshot: pb::Snapshot) -> Ready {
        let conversation = snapshot.conversation.unwrap_or_default();
        let cwd = PathBuf::from(&conversation.cwd);
        {
            let mut shared = self.shared();
            shared.cwd = cwd.clone();
            shared.mode = conversation.mode;
            shared.last_msg_seq = snapshot.messages.last().map_or(0, |m| m.seq);
            if let Some(last) = snapshot
                .messages
                .iter()
                .rev()
                .find(|m| m.role == Role::Assistant as i32)
            {
                shared.last_stop = (last.stop_reason.clone(), last.interrupted);
            }
            for message in &snapshot.messages {
                for block in &message.content {
                    match &block.block {
                        Some(Block::ToolUse(u)) => {
                            shared.announced.insert(u.id.clone());
                            shared.inputs.insert(u.id.clone(), u.input_json.clone());
                        }
                        Some(Block::ToolResult(r)) => {
                            shared.ended.insert(r.tool_use_id.clone());
                        }
                        _ => {}
                    }
                }
            }
        }
        if std::mem::take(&mut self.replay) {
            for update in map::replay(&snapshot.messages, &cwd) {
                self.notify(update);
            }
            if let Some(partial) = &snapshot.partial_reply {
                for update in map::replay(std::slice::from_ref(partial), &cwd) {
                    self.notify(update);
                }
            }
        }
        if let Some(state) = &conversation.state {
            self.state(state);
        }
        Ready {
            id: conversation.id,
            mode: conversation.mode,
            pending: snapshot.pending_permission,
        }
    }

    fn appended(&self, message: &pb::Message) {
        let user = message.role == Role::User as i32;
        let mut updates = Vec::new();
        {
            let mut shared = self.shared();
            shared.last_msg_seq = shared.last_msg_seq.max(message.seq);
            if !user {
                shared.last_stop = (message.stop_reason.clone(), message.interrupted);
            }
            for block in &message.content {
                match &block.block {
                    Some(Block::Text(t)) if user => {
                        if let Some(at) = shared.own_texts.iter().position(|o| *o == t.text) {
                            shared.own_texts.remove(at);
                        } else {
                            // Typed in another client: the editor shows it too.
                            updates.push(SessionUpdate::UserMessageChunk(ContentChunk::new(
                                ContentBlock::from(t.text.clone()),
                            )));
                        }
                    }
                    Some(Block::ToolUse(u)) => {
                        shared.inputs.insert(u.id.clone(), u.input_json.clone());
                        if shared.announced.insert(u.id.clone()) {
                            updates.push(SessionUpdate::ToolCall(
                                map::tool_call(&u.id, &u.name, &u.name, &u.input_json, &shared.cwd)
                                    .status(ToolCallStatus::Pending),
                            ));
                        }
                    }
                    // Calls that never ran (denied, cancelled, skipped) end here.
                    Some(Block::ToolResult(r)) if shared.ended.insert(r.tool_use_id.clone()) => {
                        let status = if r.is_error {
                            ToolCallStatus::Failed
                        } else {
                            ToolCallStatus::Completed
                        };
                        updates.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                            r.tool_use_id.clone(),
                            ToolCallUpdateFields::new()
                                .status(status)
                                .content(vec![map::text_content(map::bounded(&r.content, 4096))]),
                        )));
                    }
                    _ => {}
                }
            }
        }
        for update in updates {
            self.notify(update);
        }
    }

    fn tool_begin(&self, begin: &pb::ToolCallBegin) {
        let update = {
            let mut shared = self.shared();
            shared
                .inputs
                .insert(begin.tool_use_id.clone(), begin.input_json.clone());
            let call = map::tool_call(
                &begin.tool_use_id,
                &begin.tool_name,
                &begin.summary,
                &begin.input_json,
                &shared.cwd,
            )
            .status(ToolCallStatus::InProgress);
            if shared.announced.insert(begin.tool_use_id.clone()) {
                SessionUpdate::ToolCall(call)
            } else {
                SessionUpdate::ToolCallUpdate(call.into())
            }
        };
        self.notify(update);
    }

    fn tool_output(&self, delta: &pb::ToolOutputDelta) {
        let text = {
            let mut shared = self.shared();
            let output = shared.output.entry(delta.tool_use_id.clone()).or_default();
            if delta.skipped_bytes > 0 {
                output.push_str(&format!("\n… {} bytes left out …\n", delta.skipped_bytes));
            }
            output.push_str(&delta.text);
            if output.len() > OUTPUT_KEPT {
                let mut cut = output.len() - OUTPUT_KEPT;
                while !output.is_char_boundary(cut) {
                    cut += 1;
                }
                output.drain(..cut);
            }
            output.clone()
        };
        self.notify(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            delta.tool_use_id.clone(),
            ToolCallUpdateFields::new()
                .content(vec![map::text_content(format!("```\n{text}\n```"))]),
        )));
    }

    fn state(&self, state: &pb::ConversationState) {
        let end = match StateKind::try_from(state.kind) {
            Ok(StateKind::Idle) => {
                let (stop, interrupted) = self.shared().last_stop.clone();
                TurnEnd::Idle { stop, interrupted }
            }
            Ok(StateKind::ContextExhausted) => TurnEnd::Exhausted,
            Ok(StateKind::Error) => TurnEnd::Failed(state.error_message.clone()),
            _ => return,
        };
        let mut shared = self.shared();
        shared.turn_end = Some((shared.last_msg_seq, end));
        shared.finish_if_over();
    }
}

/// Asks the editor about a permission request and answers the daemon with
/// its choice. Withdrawn (the SDK's request cancellation) when another
/// client answers first or the turn is cancelled.
async fn ask_permission(
    bridge: Arc<Bridge>,
    live: Arc<Live>,
    cx: EditorLink,
    request: pb::PermissionRequest,
) {
    let id = request.request_id.clone();
    let (announce, cwd) = {
        let mut shared = lock(&live.shared);
        if shared.resolved.contains(&id) || shared.asked.contains_key(&id) {
            return;
        }
        let announce = shared.announced.insert(request.tool_use_id.clone());
        shared
            .inputs
            .entry(request.tool_use_id.clone())
            .or_insert_with(|| request.input_json.clone());
        (announce, shared.cwd.clone())
    };
    let call = map::tool_call(
        &request.tool_use_id,
        &request.tool_name,
        &request.summary,
        &request.input_json,
        &cwd,
    )
    .status(ToolCallStatus::Pending);
    if announce {
        let note = SessionNotification::new(live.id.clone(), SessionUpdate::ToolCall(call.clone()));
        if let Err(e) = cx.send_notification(note) {
            eprintln!("agent acp: cannot send a session update: {}", e.message);
        }
    }
    let mut update: ToolCallUpdate = call.into();
    let mut content = update.fields.content.take().unwrap_or_default();
    if content.is_empty() && !request.diff.is_empty() {
        content.push(map::unified_diff_content(&request.diff));
    }
    if !request.reason.is_empty() {
        content.push(map::text_content(format!(
            "Asking because: {}",
            request.reason
        )));
    }
    update.fields.content = Some(content);
    let sent = cx.send_request(RequestPermissionRequest::new(
        live.id.clone(),
        update,
        map::permission_options(&request),
    ));
    {
        let handle = sent.cancellation_handle();
        let mut shared = lock(&live.shared);
        if shared.resolved.contains(&id) {
            let _ = handle.cancel();
        } else {
            shared.asked.insert(id.clone(), handle);
        }
    }
    let outcome = sent.block_task().await;
    lock(&live.shared).asked.remove(&id);
    let selected = match outcome {
        Ok(response) => match response.outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id,
            // Cancelled: the editor withdrew (after session/cancel, or ours).
            _ => return,
        },
        Err(e) => {
            eprintln!("agent acp: permission request {id}: {}", e.message);
            return;
        }
    };
    // A plan approval request is answered with a plan answer, any other
    // with a decision it offered.
    let (decision, plan_answer) = if request.plan.is_some() {
        (
            PermissionDecision::Unspecified,
            map::plan_answer_of(&selected.0),
        )
    } else {
        (
            map::decision_of(&selected.0, &request.options)
                .unwrap_or(PermissionDecision::Unspecified),
            None,
        )
    };
    if decision == PermissionDecision::Unspecified && plan_answer.is_none() {
        eprintln!(
            "agent acp: permission request {id}: the editor chose {:?}, which was not offered",
            selected.0
        );
        return;
    }
    {
        let mut shared = lock(&live.shared);
        if shared.resolved.contains(&id) {
            return;
        }
        shared.answered_here.insert(id.clone());
    }
    let answered = match bridge.client().await {
        Ok(mut client) => client
            .answer_permission(pb::AnswerPermissionRequest {
                conversation_id: live.id.clone(),
                request_id: id.clone(),
                decision: decision as i32,
                client_name: bridge.name.clone(),
                client_request_id: request_id(),
                plan_answer,
                ..Default::default()
            })
            .await
            .map(|_| ())
            .map_err(|s| s.message().to_string()),
        Err(e) => Err(e.message),
    };
    if let Err(why) = answered {
        // Most often another client answered first; the daemon says so.
        eprintln!("agent acp: answer to {id} refused: {why}");
    }
}
