//! `agent acp` (issue 19, point 1), which runs the `agent-acp` binary
//! (here `test-agent-acp`): an editor drives the bridge with the
//! `agent-client-protocol` crate's client side over the child's stdin and
//! stdout — sessions, prompts, streamed updates, permission requests
//! answered (or withdrawn) through ACP, cancel, modes, and `session/load`
//! of a conversation a terminal is attached to, both staying live.

use std::process::Stdio;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, ContentChunk, InitializeRequest, LoadSessionRequest,
    NewSessionRequest, PermissionOptionKind, PromptRequest, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, SetSessionModeRequest, StopReason, ToolCallContent,
    ToolCallStatus, ToolKind,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Lines};
use agent_proto::v1 as pb;
use agent_proto::v1::attach_request::Frame;
use agent_proto::v1::attach_response::Event as Ev;
use agent_tests::fake_llm::{ReplyScript, Script};
use agent_tests::harness::{Scenario, TestDaemon, WAIT};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::util::{Attached, get, is_idle, is_request, request_of, tool};

type Asked = (
    RequestPermissionRequest,
    Responder<RequestPermissionResponse>,
);

/// An editor: `agent acp` as a child process, and the ACP client side
/// connected to its pipes.
struct Editor {
    cx: ConnectionTo<Agent>,
    updates: mpsc::UnboundedReceiver<SessionNotification>,
    asked: mpsc::UnboundedReceiver<Asked>,
    _child: tokio::process::Child,
    _stop: oneshot::Sender<()>,
}

impl Editor {
    async fn start(daemon: &TestDaemon) -> Editor {
        let mut cmd = tokio::process::Command::from(daemon.agent());
        cmd.arg("acp")
            .env("AGENT_ACP_BIN", agent_tests::harness::acp_bin())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("agent acp starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let outgoing = Box::pin(futures::sink::unfold(
            stdin,
            |mut w, line: String| async move {
                w.write_all(line.as_bytes()).await?;
                w.write_all(b"\n").await?;
                w.flush().await?;
                Ok::<_, std::io::Error>(w)
            },
        ));
        let incoming = Box::pin(futures::stream::unfold(
            BufReader::new(stdout),
            |mut r| async move {
                let mut line = String::new();
                match r.read_line(&mut line).await {
                    Ok(0) => None,
                    Ok(_) => Some((Ok(line.trim_end_matches('\n').to_string()), r)),
                    Err(e) => Some((Err(e), r)),
                }
            },
        ));
        let (update_tx, updates) = mpsc::unbounded_channel();
        let (asked_tx, asked) = mpsc::unbounded_channel();
        let (cx_tx, cx_rx) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let result = Client
                .v1()
                .name("test editor")
                .on_receive_notification(
                    async move |n: SessionNotification, _cx| {
                        let _ = update_tx.send(n);
                        Ok(())
                    },
                    agent_client_protocol::on_receive_notification!(),
                )
                .on_receive_request(
                    async move |r: RequestPermissionRequest, responder, _cx| {
                        let _ = asked_tx.send((r, responder));
                        Ok(())
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(Lines::new(outgoing, incoming), async move |cx| {
                    let _ = cx_tx.send(cx);
                    let _ = stopped.await;
                    Ok(())
                })
                .await;
            if let Err(e) = result {
                eprintln!("test editor: the ACP connection ended: {e:?}");
            }
        });
        let cx = cx_rx.await.expect("the ACP connection starts");
        let init = cx
            .send_request(InitializeRequest::new(ProtocolVersion::V1))
            .block_task()
            .await
            .expect("initialize");
        assert_eq!(init.protocol_version, ProtocolVersion::V1);
        let caps = &init.agent_capabilities;
        assert!(caps.load_session, "loadSession is offered");
        assert!(!caps.prompt_capabilities.image, "no images");
        assert!(!caps.prompt_capabilities.embedded_context);
        Editor {
            cx,
            updates,
            asked,
            _child: child,
            _stop: stop,
        }
    }

    /// The next permission request, failing after WAIT.
    async fn asked(&mut self) -> Asked {
        tokio::time::timeout(WAIT, self.asked.recv())
            .await
            .expect("a permission request within WAIT")
            .expect("the editor connection is alive")
    }

    /// Updates until `stop` accepts one (included), failing after WAIT.
    async fn updates_until(
        &mut self,
        mut stop: impl FnMut(&SessionUpdate) -> bool,
    ) -> Vec<SessionUpdate> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut out = Vec::new();
        loop {
            let n = tokio::time::timeout_at(deadline, self.updates.recv())
                .await
                .unwrap_or_else(|_| panic!("no matching update; got {out:#?}"))
                .expect("the editor connection is alive");
            let done = stop(&n.update);
            out.push(n.update);
            if done {
                return out;
            }
        }
    }

    /// The updates received so far.
    fn drain(&mut self) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        while let Ok(n) = self.updates.try_recv() {
            out.push(n.update);
        }
        out
    }
}

async fn summary(
    client: &mut agent_proto::v1::agent_service_client::AgentServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
) -> pb::ConversationSummary {
    get(client, id).await.conversation.expect("a conversation")
}

fn chunk_text(c: &ContentChunk) -> String {
    match &c.content {
        ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

fn agent_text(updates: &[SessionUpdate]) -> String {
    updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::AgentMessageChunk(c) => Some(chunk_text(c)),
            _ => None,
        })
        .collect()
}

fn user_text(updates: &[SessionUpdate]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::UserMessageChunk(c) => Some(chunk_text(c)),
            _ => None,
        })
        .collect()
}

fn ends_tool(id: &str, status: ToolCallStatus) -> impl Fn(&SessionUpdate) -> bool {
    let id = id.to_string();
    move |u| matches!(u, SessionUpdate::ToolCallUpdate(t) if t.tool_call_id.0.as_ref() == id && t.fields.status == Some(status))
}

fn select(option: &str) -> RequestPermissionResponse {
    RequestPermissionResponse::new(RequestPermissionOutcome::Selected(
        SelectedPermissionOutcome::new(option.to_string()),
    ))
}

fn prompt(text: &str, session: &str) -> PromptRequest {
    PromptRequest::new(
        session.to_string(),
        vec![ContentBlock::from(text.to_string())],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_prompts_sees_the_turn_stream_and_answers_a_permission_request() {
    let s = Scenario::new()
        .scripts([
            Script::Reply(
                ReplyScript::new()
                    .thinking("the user wants a file", "sig")
                    .text("Writing it.")
                    .tool_use(
                        "w1",
                        "write",
                        json!({"path": "out.txt", "content": "hello\n"}),
                    ),
            ),
            Script::text("All done."),
        ])
        .start()
        .await;
    let mut editor = Editor::start(&s.daemon).await;
    let cwd = s.work.path().to_path_buf();
    let created = editor
        .cx
        .send_request(NewSessionRequest::new(cwd.clone()))
        .block_task()
        .await
        .expect("session/new");
    let session = created.session_id.0.to_string();
    let modes = created.modes.expect("modes are offered");
    assert_eq!(modes.current_mode_id.0.as_ref(), "default");
    let mode_ids: Vec<&str> = modes
        .available_modes
        .iter()
        .map(|m| m.id.0.as_ref())
        .collect();
    assert_eq!(
        mode_ids,
        ["read_only", "default", "accept_edits", "plan", "auto"]
    );
    // The session is a daemon conversation in that directory.
    let mut client = s.client.clone();
    let conv = summary(&mut client, &session).await;
    assert_eq!(conv.cwd, cwd.display().to_string());

    let turn = tokio::spawn(
        editor
            .cx
            .send_request(prompt("write out.txt", &session))
            .block_task(),
    );
    let (request, responder) = editor.asked().await;
    assert_eq!(request.session_id.0.as_ref(), session);
    assert_eq!(request.tool_call.tool_call_id.0.as_ref(), "w1");
    // The daemon's kind of the tool, not a match on its name.
    assert_eq!(request.tool_call.fields.kind, Some(ToolKind::Edit));
    let kinds: Vec<(String, PermissionOptionKind)> = request
        .options
        .iter()
        .map(|o| (o.option_id.0.to_string(), o.kind))
        .collect();
    assert!(
        kinds.contains(&("allow_once".into(), PermissionOptionKind::AllowOnce))
            && kinds.contains(&("deny".into(), PermissionOptionKind::RejectOnce)),
        "{kinds:?}"
    );
    let content = request.tool_call.fields.content.clone().unwrap_or_default();
    assert!(
        content.iter().any(|c| matches!(c, ToolCallContent::Diff(d)
            if d.new_text == "hello\n" && d.path == cwd.join("out.txt"))),
        "the request shows the write as a diff: {content:?}"
    );
    assert!(
        !cwd.join("out.txt").exists(),
        "nothing is written before the answer"
    );
    responder.respond(select("allow_once")).unwrap();

    let stop = tokio::time::timeout(WAIT, turn)
        .await
        .expect("the prompt returns when the turn ends")
        .unwrap()
        .expect("session/prompt succeeds");
    assert_eq!(stop.stop_reason, StopReason::EndTurn);
    assert_eq!(
        std::fs::read_to_string(cwd.join("out.txt")).unwrap(),
        "hello\n"
    );
    let updates = editor.drain();
    assert_eq!(agent_text(&updates), "Writing it.All done.");
    let thought: String = updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::AgentThoughtChunk(c) => Some(chunk_text(c)),
            _ => None,
        })
        .collect();
    assert_eq!(thought, "the user wants a file");
    assert!(
        updates
            .iter()
            .any(|u| matches!(u, SessionUpdate::ToolCall(t)
            if t.tool_call_id.0.as_ref() == "w1" && !t.locations.is_empty())),
        "the tool call is announced with its file: {updates:#?}"
    );
    assert!(
        updates
            .iter()
            .any(ends_tool("w1", ToolCallStatus::Completed)),
        "{updates:#?}"
    );
    assert!(
        user_text(&updates).is_empty(),
        "the editor's own prompt is not echoed back"
    );

    // A prompt the daemon refuses (the session is unknown) is an error, not a hang.
    let err = editor
        .cx
        .send_request(prompt("hi", "01NOSUCHCONVERSATION"))
        .block_task()
        .await
        .unwrap_err();
    assert!(err.message.contains("no open session"), "{err:?}");
    // Images are refused, as the capabilities said.
    let image = agent_client_protocol::v1::schema::ImageContent::new("AAAA", "image/png");
    let err = editor
        .cx
        .send_request(PromptRequest::new(
            session.clone(),
            vec![ContentBlock::Image(image)],
        ))
        .block_task()
        .await
        .unwrap_err();
    assert!(err.message.contains("images"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_withdraws_the_pending_request_and_the_prompt_ends_cancelled() {
    let s = Scenario::new()
        .scripts([tool("b1", "bash", json!({"command": "echo never"}))])
        .start()
        .await;
    let mut editor = Editor::start(&s.daemon).await;
    let created = editor
        .cx
        .send_request(NewSessionRequest::new(s.work.path().to_path_buf()))
        .block_task()
        .await
        .expect("session/new");
    let session = created.session_id.0.to_string();
    let turn = tokio::spawn(
        editor
            .cx
            .send_request(prompt("run it", &session))
            .block_task(),
    );
    let (request, responder) = editor.asked().await;
    assert_eq!(request.tool_call.tool_call_id.0.as_ref(), "b1");
    editor
        .cx
        .send_notification(CancelNotification::new(session.clone()))
        .unwrap();
    // The daemon cancels the request with the turn; the bridge withdraws
    // its question, and the editor answers `cancelled` as ACP requires.
    tokio::time::timeout(WAIT, responder.cancellation().cancelled())
        .await
        .expect("the question is withdrawn after session/cancel");
    responder
        .respond(RequestPermissionResponse::new(
            RequestPermissionOutcome::Cancelled,
        ))
        .unwrap();
    let stop = tokio::time::timeout(WAIT, turn)
        .await
        .expect("the prompt returns")
        .unwrap()
        .expect("session/prompt succeeds");
    assert_eq!(stop.stop_reason, StopReason::Cancelled);
    let mut client = s.client.clone();
    let conv = summary(&mut client, &session).await;
    assert_eq!(conv.state.map(|s| s.kind), Some(pb::StateKind::Idle as i32));
    assert!(!s.work.path().join("never").exists());

    // Modes: the editor sets one (the daemon has it), another client sets
    // another (the editor is told).
    editor
        .cx
        .send_request(SetSessionModeRequest::new(session.clone(), "accept_edits"))
        .block_task()
        .await
        .expect("session/set_mode");
    assert_eq!(
        summary(&mut client, &session).await.mode,
        pb::PermissionMode::AcceptEdits as i32
    );
    let err = editor
        .cx
        .send_request(SetSessionModeRequest::new(session.clone(), "bypass"))
        .block_task()
        .await
        .unwrap_err();
    assert!(
        err.message.contains("bypass"),
        "refused by the daemon: {err:?}"
    );
    client
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: session.clone(),
            mode: pb::PermissionMode::Plan as i32,
            client_name: "terminal".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    editor
        .updates_until(|u| {
            matches!(u, SessionUpdate::CurrentModeUpdate(m) if m.current_mode_id.0.as_ref() == "plan")
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_loads_a_terminals_conversation_and_answers_for_both() {
    let s = Scenario::new()
        .scripts([
            Script::text("first answer"),
            tool("b1", "bash", json!({"command": "echo shared > shared.txt"})),
            Script::text("done"),
        ])
        .conversation("hello")
        .mode(pb::PermissionMode::Default)
        .start()
        .await;
    let mut client = s.client.clone();
    let id = s.id.clone();
    let mut terminal = Attached::open(&mut client, &id, 0, "terminal").await;
    terminal
        .until(WAIT, |m| {
            is_idle(m) || matches!(&m.event, Some(Ev::Snapshot(s)) if s.messages.len() == 2 && s.conversation.as_ref().and_then(|c| c.state.as_ref()).is_some_and(|st| st.kind == pb::StateKind::Idle as i32))
        })
        .await;

    let mut editor = Editor::start(&s.daemon).await;
    let loaded = editor
        .cx
        .send_request(LoadSessionRequest::new(
            id.clone(),
            s.work.path().to_path_buf(),
        ))
        .block_task()
        .await
        .expect("session/load");
    assert_eq!(
        loaded.modes.expect("modes").current_mode_id.0.as_ref(),
        "default"
    );
    // The history was replayed before the answer.
    let history = editor
        .updates_until(|u| matches!(u, SessionUpdate::AgentMessageChunk(_)))
        .await;
    assert_eq!(user_text(&history), ["hello"]);
    assert_eq!(agent_text(&history), "first answer");

    // The terminal types; the editor sees it, and is asked.
    terminal
        .send(Frame::Send(pb::SendMessageFrame {
            text: "run the command".into(),
            client_request_id: "t-1".into(),
            ..Default::default()
        }))
        .await;
    let seen = editor
        .updates_until(|u| matches!(u, SessionUpdate::UserMessageChunk(_)))
        .await;
    assert_eq!(user_text(&seen), ["run the command"]);
    let (request, responder) = editor.asked().await;
    assert_eq!(request.tool_call.tool_call_id.0.as_ref(), "b1");
    let on_terminal = request_of(terminal.until(WAIT, is_request).await.last().unwrap());
    assert_eq!(on_terminal.tool_use_id, "b1");

    // The editor answers; the terminal sees who did.
    responder.respond(select("allow_once")).unwrap();
    let frames = terminal
        .until(WAIT, |m| matches!(m.event, Some(Ev::PermissionResolved(_))))
        .await;
    let Some(Ev::PermissionResolved(resolved)) = &frames.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(resolved.request_id, on_terminal.request_id);
    assert_eq!(resolved.decision, pb::PermissionDecision::AllowOnce as i32);
    assert!(
        resolved.client_name.ends_with("(acp)"),
        "the terminal sees the editor answered: {:?}",
        resolved.client_name
    );
    terminal.until(WAIT, is_idle).await;
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("shared.txt")).unwrap(),
        "shared\n"
    );
    // The editor stayed live through the terminal's turn.
    let mut said = String::new();
    let rest = editor
        .updates_until(|u| {
            if let SessionUpdate::AgentMessageChunk(c) = u {
                said.push_str(&chunk_text(c));
            }
            said.contains("done")
        })
        .await;
    assert!(
        rest.iter().any(ends_tool("b1", ToolCallStatus::Completed)),
        "{rest:#?}"
    );
    // Loading it again in the same bridge is harmless.
    editor
        .cx
        .send_request(LoadSessionRequest::new(
            id.clone(),
            s.work.path().to_path_buf(),
        ))
        .block_task()
        .await
        .expect("a second session/load");
    // An unknown conversation is a clear error.
    let err = editor
        .cx
        .send_request(LoadSessionRequest::new(
            "01NOSUCH",
            s.work.path().to_path_buf(),
        ))
        .block_task()
        .await
        .unwrap_err();
    assert!(err.message.contains("01NOSUCH"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editors_mcp_servers_become_the_conversations() {
    use agent_client_protocol::v1::schema::{McpServer, McpServerSse, McpServerStdio};
    let s = Scenario::new().start().await;
    let editor = Editor::start(&s.daemon).await;
    let cwd = s.work.path().to_path_buf();
    let server = McpServer::Stdio(
        McpServerStdio::new("ed", env!("CARGO_BIN_EXE_test-mcp-server")).args(vec!["stdio".into()]),
    );
    let created = editor
        .cx
        .send_request(NewSessionRequest::new(cwd.clone()).mcp_servers(vec![server]))
        .block_task()
        .await
        .expect("session/new with an MCP server");
    let mut client = s.client.clone();
    let conv = summary(&mut client, &created.session_id.0).await;
    assert_eq!(conv.mcp_servers, ["ed"]);

    // A transport the daemon does not run is refused with the reason.
    let sse = McpServer::Sse(McpServerSse::new("old", "http://127.0.0.1:1/sse"));
    let refused = editor
        .cx
        .send_request(NewSessionRequest::new(cwd).mcp_servers(vec![sse]))
        .block_task()
        .await
        .expect_err("SSE is refused");
    assert!(refused.message.contains("SSE"), "{refused:?}");
}

/// Issue 39, point 12: when another client answers first, the editor's
/// question is withdrawn and the editor is told who answered, with which
/// role and what; the resolution names that client even though it answered
/// with the unary AnswerPermission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_is_told_who_answered_first() {
    let s = Scenario::new()
        .scripts([
            tool("b1", "bash", json!({"command": "echo never > never.txt"})),
            Script::text("understood"),
        ])
        .start()
        .await;
    let mut editor = Editor::start(&s.daemon).await;
    let created = editor
        .cx
        .send_request(NewSessionRequest::new(s.work.path().to_path_buf()))
        .block_task()
        .await
        .expect("session/new");
    let session = created.session_id.0.to_string();
    let mut client = s.client.clone();
    let mut watcher = Attached::open(&mut client, &session, 0, "watcher").await;
    let turn = tokio::spawn(
        editor
            .cx
            .send_request(prompt("run it", &session))
            .block_task(),
    );
    let (_request, responder) = editor.asked().await;
    client
        .answer_permission(pb::AnswerPermissionRequest {
            conversation_id: session.clone(),
            decision: pb::PermissionDecision::Deny as i32,
            client_name: "reviewer@desk".to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
    tokio::time::timeout(WAIT, responder.cancellation().cancelled())
        .await
        .expect("the question is withdrawn");
    responder
        .respond(RequestPermissionResponse::new(
            RequestPermissionOutcome::Cancelled,
        ))
        .unwrap();
    let told = editor
        .updates_until(|u| {
            matches!(u, SessionUpdate::AgentMessageChunk(c)
                if chunk_text(c).contains("permission answered by"))
        })
        .await;
    assert!(
        agent_text(&told).contains("[permission answered by reviewer@desk (driver): deny]"),
        "{told:#?}"
    );
    let frames = watcher
        .until(WAIT, |m| matches!(m.event, Some(Ev::PermissionResolved(_))))
        .await;
    let Some(Ev::PermissionResolved(resolved)) = frames.last().and_then(|m| m.event.clone()) else {
        panic!("no resolution: {frames:#?}")
    };
    assert!(!resolved.client_id.is_empty(), "{resolved:?}");
    assert_eq!(resolved.client_name, "reviewer@desk");
    let stop = tokio::time::timeout(WAIT, turn)
        .await
        .expect("the prompt returns")
        .unwrap()
        .expect("session/prompt succeeds");
    assert_eq!(stop.stop_reason, StopReason::EndTurn);
    assert!(!s.work.path().join("never.txt").exists());
}

/// `agent acp` names the bridge it could not run, and the bridge, run for
/// another command, says what it serves; neither starts a daemon or hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_says_when_its_bridge_cannot_run_and_the_bridge_serves_only_acp() {
    let s = Scenario::new().start().await;
    let missing = s.daemon.dir.path().join("no-agent-acp");
    let out = tokio::process::Command::from(s.daemon.agent())
        .arg("acp")
        .env("AGENT_ACP_BIN", &missing)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("agent: cannot run {}", missing.display())),
        "{err}"
    );

    let out = tokio::process::Command::new(agent_tests::harness::acp_bin())
        .args([
            "--socket".as_ref(),
            s.daemon.socket.as_os_str(),
            "ls".as_ref(),
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agent-acp serves the Agent Client Protocol"),
        "{err}"
    );
}

/// The model's todo list (issue 42 point 4) reaches the editor as the ACP
/// `plan` session update, the whole list each time, with the statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_todo_list_is_sent_as_the_acp_plan() {
    use agent_client_protocol::v1::schema::PlanEntryStatus;
    let s = Scenario::new()
        .scripts([
            tool(
                "t1",
                "update_plan",
                json!({"steps": [
                    {"title": "Read the parser", "status": "completed"},
                    {"title": "Fix the off-by-one", "status": "in_progress"},
                    {"title": "Run the tests", "status": "pending"}
                ]}),
            ),
            Script::text("Working on it."),
        ])
        .start()
        .await;
    let mut editor = Editor::start(&s.daemon).await;
    let created = editor
        .cx
        .send_request(NewSessionRequest::new(s.work.path().to_path_buf()))
        .block_task()
        .await
        .expect("session/new");
    let session = created.session_id.0.to_string();
    let stop = tokio::time::timeout(
        WAIT,
        editor
            .cx
            .send_request(prompt("fix the parser", &session))
            .block_task(),
    )
    .await
    .expect("the prompt returns")
    .expect("the prompt succeeds");
    assert_eq!(stop.stop_reason, StopReason::EndTurn);
    let mut updates = editor.drain();
    if !updates.iter().any(|u| matches!(u, SessionUpdate::Plan(_))) {
        updates.extend(
            editor
                .updates_until(|u| matches!(u, SessionUpdate::Plan(_)))
                .await,
        );
    }
    let plans: Vec<Vec<(String, PlanEntryStatus)>> = updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::Plan(p) => Some(
                p.entries
                    .iter()
                    .map(|e| (e.content.clone(), e.status.clone()))
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(
        plans,
        [vec![
            ("Read the parser".to_string(), PlanEntryStatus::Completed),
            (
                "Fix the off-by-one".to_string(),
                PlanEntryStatus::InProgress
            ),
            ("Run the tests".to_string(), PlanEntryStatus::Pending),
        ]]
    );
}
