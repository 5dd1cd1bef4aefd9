//! The daemon side of this crate's tests: agent-proto's scripted
//! [`FakeAgent`] (the one test implementation of the service), serving a
//! Unix socket in a temporary directory. Unary calls answer from canned
//! [`State`]; each Attach call is handed to the test, which reads the
//! client's frames and writes events itself.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use agent_proto::testing::AttachCall;
use agent_proto::testing::{AttachCalls, FakeAgent, Rpc, rpc};
use agent_proto::v1::{self as pb, agent_service_server::AgentServiceServer};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::Status;

use crate::cli::Cli;
use crate::error::{CliError, Exit};
use crate::io::{Captured, Io};

pub(crate) const CONV_ID: &str = "01TESTCONV0000000000000000";

/// What the mock answers from; tests fill it in.
#[derive(Default)]
pub(crate) struct State {
    pub conversations: Vec<pb::ConversationSummary>,
    pub exports: Vec<pb::ExportedConversation>,
    pub shell_chunks: Vec<pb::ReadShellOutputResponse>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Scripts `fake` as the daemon these tests expect: conversation `CONV_ID`,
/// the canned `state`, a few ids and texts that fail.
fn script(fake: &FakeAgent, state: &Arc<Mutex<State>>) {
    fake.on::<rpc::CreateConversation>(|request| {
        Ok(pb::CreateConversationResponse {
            conversation: Some(pb::ConversationSummary {
                id: CONV_ID.into(),
                cwd: request.cwd,
                state: Some(self::state(pb::StateKind::AwaitingLlm)),
                ..Default::default()
            }),
        })
    });
    let canned = state.clone();
    fake.on::<rpc::ListConversations>(move |_| {
        Ok(pb::ListConversationsResponse {
            conversations: lock(&canned).conversations.clone(),
            notices: Vec::new(),
            next_before_id: String::new(),
        })
    });
    let canned = state.clone();
    fake.on::<rpc::GetConversation>(move |request| {
        let id = request.conversation_id;
        if id == "01" {
            return Err(Status::invalid_argument("ambiguous conversation prefix 01"));
        }
        let state = lock(&canned);
        let found = state.exports.iter().find(|e| {
            e.conversation
                .as_ref()
                .is_some_and(|c| c.id.starts_with(&id))
        });
        match found {
            Some(e) => Ok(pb::GetConversationResponse {
                conversation: e.conversation.clone(),
                messages: e.messages.clone(),
                pending_permission: None,
                instructions: None,
                plan: None,
                checkpoints: Vec::new(),
                environment: None,
            }),
            None => Err(Status::not_found(format!("conversation {id} not found"))),
        }
    });
    fake.on::<rpc::SendMessage>(|request| {
        if request.text == "busy" {
            return Err(Status::failed_precondition("agent is busy"));
        }
        Ok(pb::SendMessageResponse {
            message_seq: 4,
            conversation_id: CONV_ID.into(),
            ..Default::default()
        })
    });
    fake.on::<rpc::CancelConversation>(|_| Ok(pb::CancelConversationResponse { was_busy: true }));
    fake.on::<rpc::AnswerPermission>(|_| Ok(pb::AnswerPermissionResponse {}));
    fake.on::<rpc::ListShells>(|_| Ok(pb::ListShellsResponse { shells: vec![] }));
    let canned = state.clone();
    fake.on::<rpc::ReadShellOutput>(move |request| {
        if request.shell_id != "sh1" {
            return Err(Status::not_found("no such shell"));
        }
        Ok(lock(&canned).shell_chunks.clone())
    });
    fake.on::<rpc::KillShell>(|_| Err(Status::not_found("shell not found")));
    let canned = state.clone();
    fake.on::<rpc::ExportConversations>(move |_| Ok(lock(&canned).exports.clone()));
    fake.on::<rpc::ImportConversations>(|all| {
        Ok(pb::ImportConversationsResponse {
            imported: all.len() as u64,
            skipped_ids: vec![],
            notices: vec![],
        })
    });
}

pub(crate) fn state(kind: pb::StateKind) -> pb::ConversationState {
    pb::ConversationState {
        kind: kind as i32,
        ..Default::default()
    }
}

fn serve(
    socket: &std::path::Path,
    fake: FakeAgent,
    connections: Connections,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).expect("bind");
    // Keep a handle on every connection so stop() can cut them like a crash.
    let incoming = UnixListenerStream::new(listener).map(move |conn| {
        let conn = conn?.into_std()?;
        lock(&connections).push(conn.try_clone()?);
        tokio::net::UnixStream::from_std(conn)
    });
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(AgentServiceServer::new(fake))
            .serve_with_incoming(incoming)
            .await;
    })
}

type Connections = Arc<Mutex<Vec<std::os::unix::net::UnixStream>>>;

/// A running mock daemon.
pub(crate) struct Daemon {
    pub socket: PathBuf,
    /// What it answers from, and what it records.
    pub fake: FakeAgent,
    state: Arc<Mutex<State>>,
    attaches: AttachCalls,
    server: tokio::task::JoinHandle<()>,
    connections: Connections,
    _dir: tempfile::TempDir,
}

impl Daemon {
    pub(crate) async fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agentd.sock");
        let state = Arc::new(Mutex::new(State::default()));
        let fake = FakeAgent::new();
        script(&fake, &state);
        let attaches = fake.attach_calls();
        let connections = Connections::default();
        let server = serve(&socket, fake.clone(), connections.clone());
        Daemon {
            socket,
            fake,
            state,
            attaches,
            server,
            connections,
            _dir: dir,
        }
    }

    /// Stops serving, dropping every connection, as a crashed daemon would.
    pub(crate) async fn stop(&mut self) {
        self.server.abort();
        let _ = (&mut self.server).await;
        for conn in lock(&self.connections).drain(..) {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Serves again on the same socket, as a restarted daemon would.
    pub(crate) fn restart(&mut self) {
        self.server = serve(&self.socket, self.fake.clone(), self.connections.clone());
    }

    /// How many connections clients have opened so far.
    pub(crate) fn connections(&self) -> usize {
        lock(&self.connections).len()
    }

    /// The canned answers, to fill in.
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The requests of every call of `R` so far.
    pub(crate) fn requests<R: Rpc>(&self) -> Vec<R::Request> {
        self.fake.requests::<R>()
    }

    /// The next Attach call (panics after 5 s).
    pub(crate) async fn attach_call(&mut self) -> AttachCall {
        self.attaches.next().await
    }

    /// Starts `agent ARGS…` in-process against this daemon, with scripted
    /// stdin lines (a terminal when `terminal`) and Ctrl-C presses.
    pub(crate) fn agent(&self, args: &[&str], terminal: bool) -> Agent {
        let mut argv = vec![
            "agent".to_string(),
            "--no-autostart".to_string(),
            "--socket".to_string(),
            self.socket.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let cli = Cli::parse_args(argv).expect("valid command line");
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
pub(crate) struct Agent {
    pub lines: Option<mpsc::Sender<String>>,
    pub ctrl_c: mpsc::Sender<()>,
    pub captured: Captured,
    pub task: tokio::task::JoinHandle<Result<Exit, CliError>>,
}

impl Agent {
    pub(crate) async fn type_line(&self, line: &str) {
        if let Some(lines) = &self.lines {
            lines.send(line.to_string()).await.expect("agent reading");
        }
    }

    pub(crate) fn close_stdin(&mut self) {
        self.lines = None;
    }

    pub(crate) async fn interrupt(&self) {
        self.ctrl_c.send(()).await.expect("agent running");
    }

    /// Waits for the command to end (panics after 10 s).
    pub(crate) async fn finish(self) -> (Result<Exit, CliError>, String, String) {
        let result = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("agent finished within 10 s")
            .expect("agent did not panic");
        (result, self.captured.out.text(), self.captured.err.text())
    }

    /// Waits until stdout contains `text` (panics after 5 s).
    pub(crate) async fn wait_for_output(&self, text: &str) {
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
