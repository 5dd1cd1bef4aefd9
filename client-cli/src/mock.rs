//! A scripted stand-in for agentd, for this crate's tests: a real tonic
//! server on a Unix socket in a temporary directory. Unary calls answer from
//! canned state; each Attach call is handed to the test, which reads the
//! client's frames and writes events itself.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_proto::v1::{
    self as pb,
    agent_service_server::{AgentService, AgentServiceServer},
    attach_request::Frame,
    attach_response::Event,
};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status, Streaming};

use crate::cli::Cli;
use crate::error::{CliError, Exit};
use crate::io::{Captured, Io};

pub const CONV_ID: &str = "01TESTCONV0000000000000000";

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// What the mock holds and records.
#[derive(Default)]
pub struct State {
    pub created: Vec<pb::CreateConversationRequest>,
    pub conversations: Vec<pb::ConversationSummary>,
    pub exports: Vec<pb::ExportedConversation>,
    pub imported: Vec<pb::ExportedConversation>,
    pub sent: Vec<pb::SendMessageRequest>,
    pub answers: Vec<pb::AnswerPermissionRequest>,
    pub shell_chunks: Vec<pb::ReadShellOutputResponse>,
}

#[derive(Clone)]
struct Mock {
    state: Arc<Mutex<State>>,
    attaches: mpsc::Sender<AttachCall>,
}

/// One Attach call, for the test to play the daemon's side.
pub struct AttachCall {
    pub inbound: Streaming<pb::AttachRequest>,
    pub out: mpsc::Sender<Result<pb::AttachResponse, Status>>,
}

impl AttachCall {
    /// The client's next frame (panics after 5 s or at end of stream).
    pub async fn frame(&mut self) -> Frame {
        let next = tokio::time::timeout(Duration::from_secs(5), self.inbound.next())
            .await
            .expect("a frame within 5 s");
        next.expect("stream open")
            .expect("frame ok")
            .frame
            .expect("frame set")
    }

    /// Expects a subscribe frame and returns it.
    pub async fn subscribe(&mut self) -> pb::Subscribe {
        match self.frame().await {
            Frame::Subscribe(s) => s,
            other => panic!("expected subscribe, got {other:?}"),
        }
    }

    /// Sends one event.
    pub async fn send(&self, seq: u64, event: Event) {
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

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

#[tonic::async_trait]
impl AgentService for Mock {
    async fn create_conversation(
        &self,
        request: Request<pb::CreateConversationRequest>,
    ) -> Result<Response<pb::CreateConversationResponse>, Status> {
        let request = request.into_inner();
        lock(&self.state).created.push(request.clone());
        Ok(Response::new(pb::CreateConversationResponse {
            conversation: Some(pb::ConversationSummary {
                id: CONV_ID.into(),
                cwd: request.cwd,
                state: Some(state(pb::StateKind::AwaitingLlm)),
                ..Default::default()
            }),
        }))
    }

    async fn list_conversations(
        &self,
        _: Request<pb::ListConversationsRequest>,
    ) -> Result<Response<pb::ListConversationsResponse>, Status> {
        Ok(Response::new(pb::ListConversationsResponse {
            conversations: lock(&self.state).conversations.clone(),
            notices: Vec::new(),
            next_before_id: String::new(),
        }))
    }

    async fn get_conversation(
        &self,
        request: Request<pb::GetConversationRequest>,
    ) -> Result<Response<pb::GetConversationResponse>, Status> {
        let id = request.into_inner().conversation_id;
        if id == "01" {
            return Err(Status::invalid_argument("ambiguous conversation prefix 01"));
        }
        let state = lock(&self.state);
        let found = state.exports.iter().find(|e| {
            e.conversation
                .as_ref()
                .is_some_and(|c| c.id.starts_with(&id))
        });
        match found {
            Some(e) => Ok(Response::new(pb::GetConversationResponse {
                conversation: e.conversation.clone(),
                messages: e.messages.clone(),
                pending_permission: None,
            })),
            None => Err(Status::not_found(format!("conversation {id} not found"))),
        }
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        let request = request.into_inner();
        if request.text == "busy" {
            return Err(Status::failed_precondition("agent is busy"));
        }
        lock(&self.state).sent.push(request);
        Ok(Response::new(pb::SendMessageResponse {
            message_seq: 4,
            conversation_id: CONV_ID.into(),
        }))
    }

    async fn cancel_conversation(
        &self,
        _: Request<pb::CancelConversationRequest>,
    ) -> Result<Response<pb::CancelConversationResponse>, Status> {
        Ok(Response::new(pb::CancelConversationResponse {
            was_busy: true,
        }))
    }

    async fn answer_permission(
        &self,
        request: Request<pb::AnswerPermissionRequest>,
    ) -> Result<Response<pb::AnswerPermissionResponse>, Status> {
        lock(&self.state).answers.push(request.into_inner());
        Ok(Response::new(pb::AnswerPermissionResponse {}))
    }

    async fn list_shells(
        &self,
        _: Request<pb::ListShellsRequest>,
    ) -> Result<Response<pb::ListShellsResponse>, Status> {
        Ok(Response::new(pb::ListShellsResponse { shells: vec![] }))
    }

    type ReadShellOutputStream = Boxed<pb::ReadShellOutputResponse>;

    async fn read_shell_output(
        &self,
        request: Request<pb::ReadShellOutputRequest>,
    ) -> Result<Response<Self::ReadShellOutputStream>, Status> {
        if request.into_inner().shell_id != "sh1" {
            return Err(Status::not_found("no such shell"));
        }
        let chunks = lock(&self.state).shell_chunks.clone();
        Ok(Response::new(Box::pin(futures::stream::iter(
            chunks.into_iter().map(Ok),
        ))))
    }

    async fn kill_shell(
        &self,
        _: Request<pb::KillShellRequest>,
    ) -> Result<Response<pb::KillShellResponse>, Status> {
        Err(Status::not_found("shell not found"))
    }

    type AttachStream = Boxed<pb::AttachResponse>;

    async fn attach(
        &self,
        request: Request<Streaming<pb::AttachRequest>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let (out, rx) = mpsc::channel(64);
        let call = AttachCall {
            inbound: request.into_inner(),
            out,
        };
        self.attaches
            .send(call)
            .await
            .map_err(|_| Status::unavailable("test over"))?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type ExportConversationsStream = Boxed<pb::ExportedConversation>;

    async fn export_conversations(
        &self,
        _: Request<pb::ExportConversationsRequest>,
    ) -> Result<Response<Self::ExportConversationsStream>, Status> {
        let exports = lock(&self.state).exports.clone();
        Ok(Response::new(Box::pin(futures::stream::iter(
            exports.into_iter().map(Ok),
        ))))
    }

    async fn import_conversations(
        &self,
        request: Request<Streaming<pb::ExportedConversation>>,
    ) -> Result<Response<pb::ImportConversationsResponse>, Status> {
        let mut inbound = request.into_inner();
        let mut imported = 0;
        while let Some(item) = inbound.next().await {
            lock(&self.state).imported.push(item?);
            imported += 1;
        }
        Ok(Response::new(pb::ImportConversationsResponse {
            imported,
            skipped_ids: vec![],
        }))
    }
}

fn lock_vec<T>(v: &Mutex<Vec<T>>) -> std::sync::MutexGuard<'_, Vec<T>> {
    v.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn state(kind: pb::StateKind) -> pb::ConversationState {
    pb::ConversationState {
        kind: kind as i32,
        ..Default::default()
    }
}

fn serve(
    socket: &std::path::Path,
    state: Arc<Mutex<State>>,
    attaches: mpsc::Sender<AttachCall>,
    connections: Connections,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).expect("bind");
    let mock = Mock { state, attaches };
    // Keep a handle on every connection so stop() can cut them like a crash.
    let incoming = UnixListenerStream::new(listener).map(move |conn| {
        let conn = conn?.into_std()?;
        connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn.try_clone()?);
        tokio::net::UnixStream::from_std(conn)
    });
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(AgentServiceServer::new(mock))
            .serve_with_incoming(incoming)
            .await;
    })
}

type Connections = Arc<Mutex<Vec<std::os::unix::net::UnixStream>>>;

/// A running mock daemon.
pub struct Daemon {
    pub socket: PathBuf,
    pub state: Arc<Mutex<State>>,
    pub attaches: mpsc::Receiver<AttachCall>,
    attach_tx: mpsc::Sender<AttachCall>,
    server: tokio::task::JoinHandle<()>,
    connections: Connections,
    _dir: tempfile::TempDir,
}

impl Daemon {
    pub async fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agentd.sock");
        let (attach_tx, attaches) = mpsc::channel(8);
        let state = Arc::new(Mutex::new(State::default()));
        let connections = Connections::default();
        let server = serve(
            &socket,
            state.clone(),
            attach_tx.clone(),
            connections.clone(),
        );
        Daemon {
            socket,
            state,
            attaches,
            attach_tx,
            server,
            connections,
            _dir: dir,
        }
    }

    /// Stops serving, dropping every connection, as a crashed daemon would.
    pub async fn stop(&mut self) {
        self.server.abort();
        let _ = (&mut self.server).await;
        for conn in lock_vec(&self.connections).drain(..) {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Serves again on the same socket, as a restarted daemon would.
    pub fn restart(&mut self) {
        self.server = serve(
            &self.socket,
            self.state.clone(),
            self.attach_tx.clone(),
            self.connections.clone(),
        );
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The next Attach call (panics after 5 s).
    pub async fn attach_call(&mut self) -> AttachCall {
        tokio::time::timeout(Duration::from_secs(5), self.attaches.recv())
            .await
            .expect("an attach call within 5 s")
            .expect("server running")
    }

    /// Starts `agent ARGS…` in-process against this daemon, with scripted
    /// stdin lines (a terminal when `terminal`) and Ctrl-C presses.
    pub fn agent(&self, args: &[&str], terminal: bool) -> Agent {
        let mut argv = vec![
            "agent".to_string(),
            "--no-autostart".to_string(),
            "--socket".to_string(),
            self.socket.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let cli = <Cli as clap::Parser>::try_parse_from(argv).expect("valid command line");
        let (lines, lines_rx) = mpsc::channel(16);
        let (ctrl_c, ctrl_c_rx) = mpsc::channel(4);
        let (mut io, captured) = Io::captured(lines_rx, terminal, ctrl_c_rx);
        let task = tokio::spawn(async move { crate::execute(cli, &mut io).await });
        Agent {
            lines: Some(lines),
            ctrl_c,
            captured,
            task,
        }
    }
}

/// A running in-process `agent`.
pub struct Agent {
    pub lines: Option<mpsc::Sender<String>>,
    pub ctrl_c: mpsc::Sender<()>,
    pub captured: Captured,
    pub task: tokio::task::JoinHandle<Result<Exit, CliError>>,
}

impl Agent {
    pub async fn type_line(&self, line: &str) {
        if let Some(lines) = &self.lines {
            lines.send(line.to_string()).await.expect("agent reading");
        }
    }

    pub fn close_stdin(&mut self) {
        self.lines = None;
    }

    pub async fn interrupt(&self) {
        self.ctrl_c.send(()).await.expect("agent running");
    }

    /// Waits for the command to end (panics after 10 s).
    pub async fn finish(self) -> (Result<Exit, CliError>, String, String) {
        let result = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("agent finished within 10 s")
            .expect("agent did not panic");
        (result, self.captured.out.text(), self.captured.err.text())
    }

    /// Waits until stdout contains `text` (panics after 5 s).
    pub async fn wait_for_output(&self, text: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !self.captured.out.text().contains(text) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {text:?} in output: {}",
                self.captured.out.text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
