//! What attached clients are told: the runtime's own event type, converted
//! to the wire format only in `grpc/convert.rs`.

use crate::store::ConversationRecord;
use agentd_core::{ContentBlock, ConvState, Decision, ErrorKind, Message, PermissionAsk, Usage};

/// An attached client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// Server-assigned id.
    pub id: String,
    /// The name the client gave.
    pub name: String,
}

/// A permission request as clients see it: the core's request plus what
/// the edge computed for people (summary, diff preview).
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionView {
    /// The core's request.
    pub ask: PermissionAsk,
    /// One line for people.
    pub summary: String,
    /// Diff preview for edits.
    pub diff: Option<String>,
}

/// The full picture a joining (or lagging) client starts from.
#[derive(Debug, Clone)]
pub struct SnapshotData {
    /// The conversation record (state included).
    pub record: ConversationRecord,
    /// The transcript with message sequence numbers.
    pub messages: Vec<(u64, Message)>,
    /// The reply being streamed now.
    pub partial: Vec<ContentBlock>,
    /// The pending permission request.
    pub pending: Option<PermissionView>,
    /// Attached clients.
    pub clients: Vec<ClientInfo>,
    /// The receiving client's id.
    pub your_client_id: String,
    /// Attempts allowed per request (for rendering the state).
    pub max_attempts: u32,
}

/// One event of a conversation.
#[derive(Debug, Clone)]
pub struct ConvEvent {
    /// Per-conversation sequence number (0: addressed to one client only).
    pub seq: u64,
    /// Unix ms.
    pub at_ms: i64,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone)]
pub enum EventKind {
    /// The full picture.
    Snapshot(Box<SnapshotData>),
    /// Missed events follow (reconnect).
    Resumed {
        /// The client's last seen seq.
        after_seq: u64,
    },
    /// The state changed.
    StateChanged {
        /// The new state.
        state: ConvState,
        /// Attempts allowed.
        max_attempts: u32,
    },
    /// A durable message.
    MessageAppended {
        /// Its sequence number in the transcript.
        message_seq: u64,
        /// The message.
        message: Message,
    },
    /// A reply starts streaming.
    ReplyBegin {
        /// The attempt.
        attempt: u32,
    },
    /// Reply text.
    TextDelta {
        /// Block index.
        index: u32,
        /// Text.
        text: String,
    },
    /// Reasoning text.
    ThinkingDelta {
        /// Block index.
        index: u32,
        /// Text.
        text: String,
    },
    /// A tool call started.
    ToolCallBegin {
        /// tool_use id.
        tool_use_id: String,
        /// Tool.
        name: String,
        /// For people.
        summary: String,
        /// Input JSON.
        input_json: String,
    },
    /// A tool call ended.
    ToolCallEnd {
        /// tool_use id.
        tool_use_id: String,
        /// Tool.
        name: String,
        /// Failed?
        is_error: bool,
        /// For people.
        summary: String,
        /// Diff of an edit.
        diff: Option<String>,
        /// Wall time.
        duration_ms: u64,
    },
    /// A permission request was raised.
    PermissionRequested(PermissionView),
    /// A permission request was resolved.
    PermissionResolved {
        /// Request.
        request_id: String,
        /// Decision.
        decision: Decision,
        /// Who answered (None: the daemon, e.g. on cancel).
        client: Option<ClientInfo>,
    },
    /// Usage changed.
    UsageUpdated {
        /// Last reply.
        last: Usage,
        /// Conversation total.
        total: Usage,
    },
    /// An error.
    Error {
        /// For people.
        message: String,
        /// Classification.
        kind: ErrorKind,
    },
    /// A client joined.
    ClientAttached(ClientInfo),
    /// A client left.
    ClientDetached(ClientInfo),
    /// An attempt failed and will be retried.
    Retrying {
        /// Next attempt.
        attempt: u32,
        /// Allowed.
        max_attempts: u32,
        /// Delay.
        delay_ms: u64,
        /// Why.
        reason: String,
    },
    /// Information for people.
    Notice(String),
    /// A background shell started.
    ShellStarted(crate::shells::ShellRecord),
    /// A background shell ended.
    ShellExited(crate::shells::ShellRecord),
}
