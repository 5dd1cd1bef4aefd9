//! Interactive: the status line follows the events (model, mode, state,
//! tokens, cost, shells, other clients), and a long turn rings the bell
//! when it ends. The folding of one event into the status is pure.

use agent_proto::v1::{self as pb, StateKind, attach_response::Event};

use super::Session;
use crate::render::{mode_name, todo_status};
use crate::repl::status::Status;

/// A turn at least this long rings the bell when it ends.
const BELL_AFTER_MS: u64 = 10_000;

impl Session<'_> {
    /// Interactive: what the status line shows follows the events.
    pub(super) fn update_ui(&mut self, event: &Event) {
        let Some(ui) = &self.ui else {
            return;
        };
        let now = ui.now_ms();
        let own = Own {
            client_id: &self.own_client_id,
            name: &self.config.client_name,
        };
        let mut ring = matches!(event, Event::PermissionRequested(_));
        ui.status(|s| {
            let was_busy = s.busy();
            follow_event(s, event, now, &own);
            // A snapshot starts no turn: joining a busy conversation rings
            // nothing when it ends unless it was watched for long enough.
            if !was_busy && s.busy() {
                s.busy_since_ms = now;
            }
            if was_busy && !s.busy() && now.saturating_sub(s.busy_since_ms) >= BELL_AFTER_MS {
                ring = true;
            }
        });
        if ring {
            ui.bell();
        }
    }
}

/// This client, to tell its own joins and leaves from the others'.
struct Own<'a> {
    client_id: &'a str,
    name: &'a str,
}

/// The status after `event`, at `now` (ms on the link's clock).
fn follow_event(s: &mut Status, event: &Event, now: u64, own: &Own<'_>) {
    match event {
        Event::Snapshot(snap) => follow_snapshot(s, snap, now),
        Event::StateChanged(c) => {
            if let Some(state) = &c.state {
                set_state(s, state, now);
            }
        }
        Event::ReplyBegin(_) => {
            s.streamed_chars = 0;
            s.retry = None;
        }
        Event::TextDelta(d) => s.streamed_chars += d.text.chars().count() as u64,
        Event::ThinkingDelta(d) => s.streamed_chars += d.text.chars().count() as u64,
        Event::ToolCallBegin(t) => {
            s.tool = Some(if t.summary.is_empty() {
                t.tool_name.clone()
            } else {
                t.summary.clone()
            });
        }
        Event::ToolCallEnd(_) => s.tool = None,
        Event::TodoUpdated(t) => {
            s.todo = t.plan.as_ref().map(todo_status).unwrap_or_default();
        }
        Event::Retrying(r) => {
            s.retry = Some((r.attempt, r.max_attempts, now + r.delay_ms));
        }
        Event::UsageUpdated(u) => {
            s.total = u.total.unwrap_or_default();
            s.cost_usd = u.cost_usd;
            if let Some(last) = &u.last {
                s.context_used = context_tokens(last);
            }
        }
        Event::ClientAttached(pb::ClientAttached { client: Some(c) })
            if c.client_id != own.client_id && c.name != own.name =>
        {
            s.others += 1;
        }
        Event::ClientDetached(pb::ClientDetached { client: Some(c) })
            if c.client_id != own.client_id =>
        {
            s.others = s.others.saturating_sub(1);
        }
        Event::ShellStarted(_) => s.shells_running += 1,
        Event::ShellExited(_) => s.shells_running = s.shells_running.saturating_sub(1),
        Event::QueueChanged(q) => s.queued = q.queued.len(),
        Event::SettingsChanged(c) => {
            s.mode = mode_name(c.mode);
            s.model.clone_from(&c.model);
            s.context_window = c.context_window;
            s.additional_dirs.clone_from(&c.additional_dirs);
        }
        _ => {}
    }
}

/// A snapshot sets the whole status line anew.
fn follow_snapshot(s: &mut Status, snap: &pb::Snapshot, now: u64) {
    if let Some(c) = &snap.conversation {
        s.model.clone_from(&c.model);
        s.mode = mode_name(c.mode);
        s.total = c.usage.unwrap_or_default();
        s.queued = c.queued.len();
        s.cost_usd = c.cost_usd;
        s.context_window = c.context_window;
        s.additional_dirs.clone_from(&c.additional_dirs);
        if let Some(state) = &c.state {
            set_state(s, state, now);
        }
    }
    s.others = snap
        .clients
        .iter()
        .filter(|c| c.client_id != snap.your_client_id)
        .count();
    if let Some(u) = snap.messages.iter().rev().find_map(|m| m.usage.as_ref()) {
        s.context_used = context_tokens(u);
    }
    if let Some(list) = snap.plan.as_ref().filter(|p| p.phase == "todo") {
        s.todo = todo_status(list);
    }
}

/// A new state: its clock starts, and what belonged to the old one goes.
fn set_state(s: &mut Status, state: &pb::ConversationState, now: u64) {
    let kind = StateKind::try_from(state.kind).unwrap_or(StateKind::Unspecified);
    if kind != s.state {
        let asking = matches!(kind, StateKind::AwaitingLlm | StateKind::LlmRequesting);
        let was_asking = matches!(s.state, StateKind::AwaitingLlm | StateKind::LlmRequesting);
        if asking && !was_asking {
            s.streamed_chars = 0;
        }
        if kind != StateKind::ToolExecuting {
            s.tool = None;
        }
        s.state = kind;
        s.state_since_ms = now;
    }
}

/// The tokens a request put in the context: its input, cached or not.
fn context_tokens(u: &pb::Usage) -> u64 {
    u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
}
