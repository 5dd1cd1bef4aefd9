//! A session's pump: its Attach stream (subscribed again after the
//! connection breaks) turned into `session/update`s for the editor, and the
//! end of each turn into the waiting prompt's answer.

use std::path::PathBuf;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, CurrentModeUpdate, ErrorCode, SessionNotification, SessionUpdate,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_proto::v1::{
    self as pb, AttachRequest, Role, StateKind, attach_request::Frame, attach_response::Event,
    content_block::Block,
};
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio_stream::wrappers::ReceiverStream;

use super::bridge::Bridge;
use super::live::{Live, Shared, TurnEnd};
use super::permission::ask_permission;
use super::{EditorLink, lock, map, rpc_error, status_error};
use agent_cli::Client;

/// How long a session's pump keeps trying to reach the daemon again.
const RECONNECT_WINDOW: Duration = Duration::from_secs(30);
/// The most of a running command's output kept for the editor.
const OUTPUT_KEPT: usize = 16 * 1024;

/// What a pump reports once its first snapshot is handled.
pub(super) struct Ready {
    pub(super) id: String,
    pub(super) mode: i32,
    pub(super) pending: Option<pb::PermissionRequest>,
}

/// The session's Attach stream, turned into ACP: subscribes (again after
/// the connection breaks, from the last event seen), reports the first
/// snapshot through `ready`, then forwards events until the session closes.
pub(super) async fn pump(
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
            Event::ToolCallEnd(end) => self.tool_end(&end),
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
            Event::PermissionResolved(r) => self.permission_resolved(&r),
            Event::SettingsChanged(s) => self.settings_changed(&s),
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
            | Event::PlanStepSkipped(pb::PlanStepChanged { plan: Some(p), .. })
            | Event::TodoUpdated(pb::TodoUpdated { plan: Some(p) }) => {
                self.notify(SessionUpdate::Plan(map::plan(&p)));
            }
            _ => {}
        }
        None
    }

    /// A call ended: the editor gets its outcome, with what it did.
    fn tool_end(&self, end: &pb::ToolCallEnd) {
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
            end,
            input.as_deref(),
            &cwd,
        )));
    }

    /// A permission request was answered: the editor's question, if it is
    /// still open, is withdrawn and it is told who answered.
    fn permission_resolved(&self, r: &pb::PermissionResolved) {
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
        if let Some(note) = withdrawn.then(|| map::answered_elsewhere(r)).flatten() {
            self.notify(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                ContentBlock::from(note),
            )));
        }
    }

    /// The mode changed: the editor is told unless it asked for it.
    fn settings_changed(&self, s: &pb::SettingsChanged) {
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
                                map::tool_call(
                                    &u.id,
                                    &u.name,
                                    u.kind(),
                                    &u.name,
                                    &u.input_json,
                                    &shared.cwd,
                                )
                                .status(ToolCallStatus::Pending),
                            ));
                        }
                    }
                    // Calls that never ran (denied, cancelled, skipped) end here.
                    Some(Block::ToolResult(r)) if shared.ended.insert(r.tool_use_id.clone()) => {
                        updates.push(map::tool_result_update(r));
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
                begin.kind(),
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
