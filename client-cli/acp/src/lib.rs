//! `agent-acp` (`agent acp` runs it): an Agent Client Protocol agent on
//! stdin/stdout, for editors (Zed, JetBrains, Neovim plugins). Its own
//! binary, so that the `agent` client does not carry the ACP library; it
//! reads `agent`'s command line and reaches the daemon through the
//! `agent-cli` library, as every command does. A thin bridge: every ACP session is a
//! daemon conversation, joined with `Attach` like `agent attach` joins it,
//! so an editor and any number of terminals share one live conversation and
//! its permission requests (the first answer wins, wherever it comes from).
//!
//! Layout: this file serves the ACP methods; [`bridge`] holds the daemon
//! connection and answers them, [`live`] what one open session shares,
//! [`pump`] turns a session's Attach stream into `session/update`s,
//! [`permission`] asks the editor a permission request, and [`map`] holds
//! the pure mappings.
//!
//! stdout is the protocol: nothing else may be written there. Notes for
//! people go to stderr, which editors keep in their logs.

mod bridge;
mod live;
mod map;
mod permission;
mod pump;

use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema::{
    CancelNotification, CloseSessionRequest, ErrorCode, InitializeRequest, ListSessionsRequest,
    LoadSessionRequest, LoadSessionResponse, NewSessionRequest, PromptRequest,
    ResumeSessionRequest, ResumeSessionResponse, SessionId, SessionModeState,
    SetSessionModeRequest,
};
use agent_client_protocol::{Agent, Client as Editor, Error, JsonRpcResponse, Stdio};

use agent_cli::admin::Target;
use agent_cli::{CliError, Exit};
use bridge::Bridge;
use permission::ask_permission;

/// The connection to the editor.
type EditorLink = agent_client_protocol::v1::ConnectionTo<Editor>;

/// The `agent-acp` binary: `agent`'s command line (its global options, then
/// `acp`), served as ACP on stdin/stdout.
pub fn main() -> ExitCode {
    agent_cli::main_serving_acp(|target| Box::pin(serve(target)))
}

/// Serves ACP on stdin/stdout until the editor closes stdin.
async fn serve(target: Target) -> Result<Exit, CliError> {
    let bridge = Arc::new(Bridge::new(target));
    let [b1, b2, b3, b4, b5, b6, b7, b8, b9] = std::array::from_fn(|_| bridge.clone());
    Agent
        .v1()
        .name("agent acp")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx: EditorLink| {
                let b = b1.clone();
                respond_later(responder, async move { b.initialize(req).await })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, cx: EditorLink| {
                respond_later(responder, b2.clone().new_session(req, cx))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, cx: EditorLink| {
                let opened =
                    open_and_respond(b3.clone(), req.session_id, true, cx, responder, |modes| {
                        LoadSessionResponse::new().modes(modes)
                    });
                tokio::spawn(opened);
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ResumeSessionRequest, responder, cx: EditorLink| {
                let opened =
                    open_and_respond(b4.clone(), req.session_id, false, cx, responder, |modes| {
                        ResumeSessionResponse::new().modes(modes)
                    });
                tokio::spawn(opened);
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, _cx: EditorLink| {
                let b = b5.clone();
                respond_later(responder, async move { b.prompt(req).await })
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
                respond_later(responder, async move { b.set_mode(req).await })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest, responder, _cx: EditorLink| {
                let b = b8.clone();
                respond_later(responder, async move { b.list(req).await })
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
    bridge.close_all();
    Ok(Exit::Ok)
}

/// Answers a request from a task of its own: the handler returns at once,
/// and the editor's other messages are not held up by the daemon.
fn respond_later<R: JsonRpcResponse>(
    responder: Responder<R>,
    answer: impl Future<Output = Result<R, Error>> + Send + 'static,
) -> Result<(), Error> {
    tokio::spawn(async move { responder.respond_with_result(answer.await) });
    Ok(())
}

/// `session/load` (with `replay`) and `session/resume`: joins the session,
/// answers with its modes, then asks the permission request pending when
/// the editor joined, once the editor knows the session.
async fn open_and_respond<R: JsonRpcResponse>(
    b: Arc<Bridge>,
    id: SessionId,
    replay: bool,
    cx: EditorLink,
    responder: Responder<R>,
    response: impl FnOnce(SessionModeState) -> R,
) -> Result<(), Error> {
    let (result, pending) = match b.open(&id.0, replay, &cx).await {
        Ok((state, live, pending)) => (Ok(response(state)), Some((live, pending))),
        Err(e) => (Err(e), None),
    };
    let sent = responder.respond_with_result(result);
    if let Some((live, Some(request))) = pending {
        tokio::spawn(ask_permission(b, live, cx, request));
    }
    sent
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

/// Locks a std mutex; a poisoned one (a panicking holder) is still usable:
/// every value kept behind these is valid between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
