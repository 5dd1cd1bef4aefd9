//! What attached clients are told: the runtime's own event type, converted
//! to the wire format only in `grpc/convert/`.

use crate::store::ConversationRecord;
use agentd_core::{ConvState, Decision, Message, PermissionAsk, Usage};
use std::sync::{Arc, Mutex, PoisonError, Weak};

pub(crate) use agentd_core::ClientInfo;

/// A permission request as clients see it: the core's request plus what
/// the edge computed for people (summary, diff preview).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PermissionView {
    pub ask: PermissionAsk,
    /// One line for people.
    pub summary: String,
    /// Diff preview for edits.
    pub diff: Option<String>,
    /// Set when a sub-agent asks: which one (its parent's clients see the
    /// request too, and may answer it).
    pub sub_agent: Option<SubAgentRef>,
}

/// Which sub-agent an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SubAgentRef {
    /// The child conversation's id.
    pub conversation_id: String,
    /// Its agent id in the parent's call.
    pub agent_id: String,
    pub description: String,
}

impl SubAgentRef {
    /// The sub-agent `record` is, if it is one.
    pub(crate) fn of(record: &ConversationRecord) -> Option<SubAgentRef> {
        record.sub_agent.as_ref().map(|link| SubAgentRef {
            conversation_id: record.id.clone(),
            agent_id: link.agent_id.clone(),
            description: link.description.clone(),
        })
    }
}

/// The full picture a joining (or lagging) client starts from.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotData {
    /// The conversation record (state included).
    pub record: ConversationRecord,
    /// The transcript, shared with the conversation (message `i` has
    /// sequence number `i + 1`): a hundred clients joining a long
    /// conversation do not copy it a hundred times.
    pub messages: Arc<Vec<Message>>,
    /// The reply being streamed now (cheap to clone; converted to blocks
    /// only on the way to the client).
    pub partial: crate::llm::PartialReply,
    pub pending: Option<PermissionView>,
    /// Attached clients.
    pub clients: Vec<ClientInfo>,
    pub your_client_id: String,
    /// Attempts allowed per request (for rendering the state).
    pub max_attempts: u32,
    /// What the conversation's usage cost, and its model's window.
    pub pricing: crate::models::Pricing,
}

/// One event of a conversation.
///
/// Streamed text reaches clients as `TextDelta` and `ThinkingDelta` events.
/// Consecutive deltas of the same family and block may be merged into one
/// ([`ConvEvent::absorb`]): the merged event carries the concatenated text
/// and the sequence number and time of the last event merged into it, so a
/// client that resumes `after_seq` of a merged event has seen all of its
/// text and is sent nothing of it again.
#[derive(Debug, Clone)]
pub(crate) struct ConvEvent {
    /// Per-conversation sequence number (0: addressed to one client only).
    pub seq: u64,
    /// Unix ms.
    pub at_ms: i64,
    pub kind: EventKind,
    /// The event as the gRPC edge encodes it for the clients it is sent to.
    pub wire: WireCache,
}

/// Where the gRPC edge (`grpc/wire.rs`) keeps an event's encoding while
/// clients' streams hold it: made by the first stream that sends the event,
/// shared by every other one while any of them still holds it, freed with
/// the last. The runtime never looks inside. A cloned event (deltas merged
/// into a copy) starts without one, and so does one that [`ConvEvent::absorb`]
/// changed.
#[derive(Default)]
pub(crate) struct WireCache(Mutex<Weak<Vec<u8>>>);

impl WireCache {
    /// The encoding some stream still holds, or `make`'s, which is kept
    /// (weakly) for the next stream that asks.
    pub(crate) fn get_or_try_make<E>(
        &self,
        make: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Arc<Vec<u8>>, E> {
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(bytes) = cached.upgrade() {
            return Ok(bytes);
        }
        let bytes = Arc::new(make()?);
        *cached = Arc::downgrade(&bytes);
        Ok(bytes)
    }
}

impl Clone for WireCache {
    fn clone(&self) -> WireCache {
        WireCache::default()
    }
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WireCache")
    }
}

/// What happened.
#[derive(Debug, Clone)]
pub(crate) enum EventKind {
    Snapshot(Box<SnapshotData>),
    /// Missed events follow (reconnect).
    Resumed {
        /// The client's last seen seq.
        after_seq: u64,
    },
    StateChanged {
        state: ConvState,
        max_attempts: u32,
    },
    /// A durable message.
    MessageAppended {
        /// Its sequence number in the transcript.
        message_seq: u64,
        message: Message,
    },
    /// A reply starts streaming.
    ReplyBegin {
        attempt: u32,
    },
    TextDelta {
        index: u32,
        text: String,
    },
    ThinkingDelta {
        index: u32,
        text: String,
    },
    ToolCallBegin {
        tool_use_id: String,
        name: String,
        /// For people.
        summary: String,
        input_json: String,
    },
    ToolCallEnd {
        tool_use_id: String,
        name: String,
        is_error: bool,
        /// For people.
        summary: String,
        /// Diff of an edit.
        diff: Option<String>,
        /// Wall time.
        duration_ms: u64,
        /// The start and end of what a command printed.
        preview: Option<crate::tools::OutputPreview>,
    },
    /// What a running tool printed since its last such event: live only,
    /// never stored (`tools/live.rs` says how it is coalesced).
    ToolOutputDelta {
        tool_use_id: String,
        text: String,
        /// Bytes left out just before `text`.
        skipped_bytes: u64,
    },
    /// A permission request was raised.
    PermissionRequested(PermissionView),
    /// A permission request was resolved.
    PermissionResolved {
        request_id: String,
        decision: Decision,
        /// Who answered (None: the daemon, e.g. on cancel).
        client: Option<ClientInfo>,
    },
    /// The project instructions the model reads changed (or were read for
    /// the first time): the files, in reading order, with their sizes.
    InstructionsLoaded {
        files: Vec<(String, u64)>,
        /// Some text was left out to stay within the limit.
        truncated: bool,
    },
    UsageUpdated {
        /// Last reply.
        last: Usage,
        /// Conversation total.
        total: Usage,
        /// What the total cost (None: the model's price is unknown).
        cost_usd: Option<f64>,
    },
    ClientAttached(ClientInfo),
    ClientDetached(ClientInfo),
    /// What the core (or the daemon, as `Notice::Info`) tells people, as
    /// it is: the gRPC edge decides its wire form. A context exhausted is
    /// the one notice with its own kind, below.
    Notice(agentd_core::Notice),
    /// The core's `Notice::ContextExhausted`, with what only the daemon
    /// knows: the summary seeds a continuation.
    ContextExhausted {
        summary: String,
        /// The daemon continues it by itself (`auto_continue`).
        continuing: bool,
    },
    /// The conversation continues in `conversation_id`.
    ConversationContinued {
        conversation_id: String,
        hop: u32,
        automatic: bool,
    },
    /// A reached budget was answered: raised by `raised_by` (in the stop's
    /// unit), or (None) the turn was stopped.
    BudgetResolved {
        stop: agentd_core::BudgetStop,
        raised_by: Option<u64>,
        /// Who answered.
        client: Option<ClientInfo>,
    },
    /// A hook ran (failures and timeouts included).
    HookRan(crate::hooks::HookReport),
    /// The queue of user messages waiting for the turn changed: what is
    /// queued now.
    QueueChanged(Vec<crate::store::QueuedMessage>),
    /// The permission mode or the model changed.
    SettingsChanged {
        mode: agentd_core::Mode,
        model: String,
        /// The model's context window (tokens).
        context_window: u64,
        additional_dirs: Vec<std::path::PathBuf>,
        /// The client that changed them ("" for an approved mode upgrade).
        by: String,
    },
    /// A background shell started.
    ShellStarted(crate::shells::ShellRecord),
    /// A background shell ended.
    ShellExited(crate::shells::ShellRecord),
    /// What happened to the conversation's plan, and the plan now.
    Plan {
        change: agentd_core::plan::PlanEvent,
        plan: agentd_core::Plan,
    },
    /// On a parent's stream (live only): one of its sub-agents started.
    SubAgentStarted(SubAgentRef),
    /// On a parent's stream (live only): a sub-agent's state changed.
    SubAgentStateChanged {
        sub_agent: SubAgentRef,
        state: ConvState,
        max_attempts: u32,
    },
    /// On a parent's stream (live only): a sub-agent's tool call began
    /// (`end` None) or ended.
    SubAgentToolCall {
        sub_agent: SubAgentRef,
        tool_use_id: String,
        name: String,
        /// One line for people.
        summary: String,
        /// For an end: whether it failed, and its wall time.
        end: Option<(bool, u64)>,
    },
    /// On a parent's stream (live only): a sub-agent ended.
    SubAgentFinished {
        sub_agent: SubAgentRef,
        success: bool,
        /// The first line of its result.
        summary: String,
        usage: Usage,
        cost_usd: Option<f64>,
    },

    /// Files were restored from the checkpoints: a rewind to before user
    /// message `message_seq`, or (`plan_step_id` set) a failed plan step's
    /// rollback.
    CodeRewound {
        message_seq: u64,
        restored: crate::checkpoints::Restored,
        plan_step_id: String,
    },
    /// A rewind forked the conversation as `forked_id`, ending before
    /// message `message_seq`.
    ConversationForked {
        message_seq: u64,
        forked_id: String,
    },
}

impl ConvEvent {
    /// An event with nothing encoded yet.
    pub(crate) fn new(seq: u64, at_ms: i64, kind: EventKind) -> ConvEvent {
        ConvEvent {
            seq,
            at_ms,
            kind,
            wire: WireCache::default(),
        }
    }

    /// The text of a `TextDelta` or `ThinkingDelta`; `None` for every other
    /// event.
    pub(crate) fn delta_text(&self) -> Option<&str> {
        match &self.kind {
            EventKind::TextDelta { text, .. } | EventKind::ThinkingDelta { text, .. } => Some(text),
            _ => None,
        }
    }

    /// Appends `next` to this event when both are deltas of the same family
    /// (text or thinking) and the same block: the text is concatenated and
    /// this event takes `next`'s sequence number and time. Returns whether
    /// it did; when it did not, nothing changed. The caller merges only
    /// events that are consecutive in what it sends (nothing may have come
    /// between them), which is what keeps the order and the text exact.
    pub(crate) fn absorb(&mut self, next: &ConvEvent) -> bool {
        if !self.merges_with(next) {
            return false;
        }
        if let (
            EventKind::TextDelta { text, .. } | EventKind::ThinkingDelta { text, .. },
            Some(more),
        ) = (&mut self.kind, next.delta_text())
        {
            text.push_str(more);
        }
        self.seq = next.seq;
        self.at_ms = next.at_ms;
        self.wire = WireCache::default();
        true
    }

    /// Whether [`ConvEvent::absorb`] would take `next`: both are deltas of
    /// the same family and block.
    pub(crate) fn merges_with(&self, next: &ConvEvent) -> bool {
        match (&self.kind, &next.kind) {
            (EventKind::TextDelta { index: a, .. }, EventKind::TextDelta { index: b, .. })
            | (
                EventKind::ThinkingDelta { index: a, .. },
                EventKind::ThinkingDelta { index: b, .. },
            ) => a == b,
            _ => false,
        }
    }
}

impl EventKind {
    /// The event that tells clients a core notice; `continuing`: the
    /// daemon continues an exhausted conversation by itself.
    pub(crate) fn from_notice(notice: agentd_core::Notice, continuing: bool) -> EventKind {
        match notice {
            agentd_core::Notice::ContextExhausted { summary } => EventKind::ContextExhausted {
                summary,
                continuing,
            },
            notice => EventKind::Notice(notice),
        }
    }

    /// A sentence of the daemon's own for people (`Notice::Info`).
    pub(crate) fn info(message: impl Into<String>) -> EventKind {
        EventKind::Notice(agentd_core::Notice::Info {
            message: message.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: EventKind) -> ConvEvent {
        ConvEvent::new(seq, seq as i64 * 10, kind)
    }

    fn text(index: u32, t: &str) -> EventKind {
        EventKind::TextDelta {
            index,
            text: t.into(),
        }
    }

    fn thinking(index: u32, t: &str) -> EventKind {
        EventKind::ThinkingDelta {
            index,
            text: t.into(),
        }
    }

    #[test]
    fn deltas_of_one_block_merge_and_take_the_last_seq() {
        let mut first = ev(3, text(1, "Hel"));
        assert!(first.absorb(&ev(4, text(1, "lo "))));
        assert!(first.absorb(&ev(9, text(1, "world"))));
        assert_eq!(first.seq, 9);
        assert_eq!(first.at_ms, 90);
        assert_eq!(first.delta_text(), Some("Hello world"));
        let mut reasoning = ev(5, thinking(0, "hm"));
        assert!(reasoning.absorb(&ev(6, thinking(0, "m"))));
        assert_eq!(reasoning.delta_text(), Some("hmm"));
        assert!(matches!(
            reasoning.kind,
            EventKind::ThinkingDelta { index: 0, .. }
        ));
    }

    #[test]
    fn other_blocks_families_and_events_do_not_merge() {
        let cases = [
            (text(1, "a"), text(2, "b")),
            (text(1, "a"), thinking(1, "b")),
            (thinking(1, "a"), text(1, "b")),
            (text(1, "a"), EventKind::info("b")),
            (EventKind::info("a"), text(1, "b")),
            (
                EventKind::ReplyBegin { attempt: 1 },
                EventKind::ReplyBegin { attempt: 2 },
            ),
        ];
        for (a, b) in cases {
            let mut first = ev(1, a);
            let before = format!("{first:?}");
            assert!(!first.absorb(&ev(2, b)));
            assert_eq!(format!("{first:?}"), before, "unchanged");
        }
        assert_eq!(ev(1, EventKind::info("n")).delta_text(), None);
    }
}
