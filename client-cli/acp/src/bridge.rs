//! The bridge: the daemon connection (made on first use) and the open
//! sessions, and the ACP methods that act on them (initialize, new, load,
//! prompt, cancel, set mode, list, close).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::Error;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CloseSessionResponse, ErrorCode, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, McpCapabilities,
    NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest, PromptResponse,
    SessionCapabilities, SessionCloseCapabilities, SessionId, SessionInfo, SessionListCapabilities,
    SessionModeState, SessionResumeCapabilities, SetSessionModeRequest, SetSessionModeResponse,
};
use agent_proto::v1 as pb;
use tokio::sync::oneshot;

use super::live::{Live, Shared, Waiter};
use super::pump::pump;
use super::{EditorLink, invalid_params, lock, map, rpc_error, status_error};
use agent_cli::admin::Target;
use agent_cli::{Client, client_name, connect_or_start, request_id};

/// Conversations one `session/list` page holds.
const LIST_PAGE: u32 = 50;

/// The bridge: the daemon connection and the sessions it serves.
pub(super) struct Bridge {
    target: Target,
    /// This client's name, shown to the conversation's other clients.
    pub(super) name: String,
    /// Connected on first use (so a missing daemon is a JSON-RPC error the
    /// editor shows, and autostart happens as for every command).
    daemon: tokio::sync::Mutex<Option<Client>>,
    /// Whether the daemon runs with --allow-bypass (read at initialize).
    bypass_allowed: Mutex<bool>,
    /// Open sessions by conversation id. A std mutex: nothing awaits while
    /// it is held.
    sessions: Mutex<HashMap<String, Arc<Live>>>,
}

impl Bridge {
    /// A bridge to the daemon at `target`, not connected yet.
    pub(super) fn new(target: Target) -> Self {
        Bridge {
            target,
            name: format!("{} (acp)", client_name()),
            daemon: tokio::sync::Mutex::new(None),
            bypass_allowed: Mutex::new(false),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub(super) async fn client(&self) -> Result<Client, Error> {
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

    pub(super) async fn initialize(
        &self,
        req: InitializeRequest,
    ) -> Result<InitializeResponse, Error> {
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

    pub(super) async fn new_session(
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
                // The editor's, which started this bridge.
                environment: agent_cli::environment::here(),
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
    pub(super) async fn open(
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

    pub(super) async fn prompt(&self, req: PromptRequest) -> Result<PromptResponse, Error> {
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

    pub(super) async fn cancel(&self, id: &str) {
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

    pub(super) async fn set_mode(
        &self,
        req: SetSessionModeRequest,
    ) -> Result<SetSessionModeResponse, Error> {
        let live = self.session(&req.session_id)?;
        let mode = map::mode_of(&req.mode_id.0).ok_or_else(|| {
            invalid_params(format!(
                "unknown mode {:?} (read_only, default, accept_edits, plan, bypass, auto)",
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

    pub(super) async fn list(
        &self,
        req: ListSessionsRequest,
    ) -> Result<ListSessionsResponse, Error> {
        let mut client = self.client().await?;
        let page = client
            .list_conversations(pb::ListConversationsRequest {
                limit: LIST_PAGE,
                before_id: req.cursor.clone().unwrap_or_default(),
                archived: false,
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

    pub(super) fn close(&self, id: &str) -> Result<CloseSessionResponse, Error> {
        let live = lock(&self.sessions).remove(id).ok_or_else(|| {
            rpc_error(ErrorCode::ResourceNotFound, format!("no open session {id}"))
        })?;
        live.stop("the session was closed");
        Ok(CloseSessionResponse::new())
    }

    pub(super) fn close_all(&self) {
        for (_, live) in lock(&self.sessions).drain() {
            live.stop("the editor went away");
        }
    }
}
