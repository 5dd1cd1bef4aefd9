//! What clients hand the manager, checked at the edge of the runtime: a
//! new conversation, a user message, settings, answers; and what becomes of
//! a message. Plain values with their limits, shared by the manager and
//! the actors.

use crate::runtime::error::RuntimeError;
use crate::runtime::events::ClientInfo;
use crate::store::ConversationRecord;
use agentd_core::{Decision, Mode, RuleScope};
use std::path::PathBuf;

/// Parameters of a new conversation.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewConversation {
    /// Absolute, existing working directory.
    pub cwd: PathBuf,
    /// Model (empty: the default).
    pub model: String,
    /// Permission mode (None: the configured default).
    pub mode: Option<Mode>,
    pub allow_rules: Vec<String>,
    pub additional_dirs: Vec<PathBuf>,
    /// MCP servers of this conversation besides the configured ones
    /// (checked).
    pub mcp_servers: Vec<crate::mcp::ServerSpec>,
    /// The client's id for this request: a retry with the same id returns
    /// the conversation the first one created and creates nothing.
    pub client_request_id: Option<String>,
    /// The exhausted conversation this one continues.
    pub parent: Option<Parent>,
    /// Set for a sub-agent: its parent and agent id.
    pub sub_agent: Option<crate::store::SubAgentLink>,
    /// The environment the client sent (checked); None: a continuation or
    /// a sub-agent takes its parent's, anything else runs in the daemon's.
    pub environment: Option<std::collections::BTreeMap<String, String>>,
    /// The thinking asked for the first turn (None: the model's).
    pub thinking: Option<agentd_core::Thinking>,
}

/// What a continued conversation takes from the one it continues.
#[derive(Debug, Clone, Default)]
pub(crate) struct Parent {
    pub id: String,
    /// The parent's place in its chain (the new one's is one more).
    pub hop: u32,
    pub title: String,
    /// The parent's continuation summary.
    pub summary: String,
    /// Its queued user messages (moved to the new conversation), with
    /// their images (already in the store, shared by content).
    pub queued: Vec<(String, Vec<agentd_core::ImageRef>)>,
}

/// What an exhausted conversation hands to its continuation, or the
/// continuation it already has.
#[derive(Debug)]
pub(crate) enum Seed {
    /// Not continued yet: the new conversation is made like this one.
    Exhausted(Box<ConversationRecord>),
    /// Already continued as this conversation.
    Continued(String),
}

/// How long a request's client request id is remembered.
pub(crate) const REQUEST_ID_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

/// How many client request ids a conversation remembers (the newest).
pub(crate) const REQUEST_IDS_PER_CONVERSATION: usize = 32;

/// A user message and how its client wants it handled.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewMessage {
    pub text: String,
    /// Images sent with it, checked (see `crate::images`); stored when the
    /// message is accepted or queued, not before.
    pub images: Vec<crate::images::StagedImage>,
    /// The client's id for this request: a retry with the same id is
    /// answered with the first outcome and appends nothing.
    pub client_request_id: Option<String>,
    /// The turn the client believes is current; another is refused.
    pub expected_turn: Option<u64>,
    /// While a turn runs, queue the message instead of refusing it.
    pub queue_if_busy: bool,
    /// The attached client that sent it, if it came over an Attach stream.
    pub from: Option<agentd_core::ClientInfo>,
    /// Who sent it, for the audit trail, when it came by a unary call
    /// (`from` names an attached sender).
    pub by: Option<agentd_core::ClientInfo>,
    /// The thinking asked for the turn it starts (None: the model's).
    pub thinking: Option<agentd_core::Thinking>,
}

/// A change of a conversation's settings; `None` keeps a value.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    pub mode: Option<Mode>,
    pub model: Option<String>,
    /// Directories to add to the additional ones (canonical).
    pub add_dirs: Vec<PathBuf>,
    /// The client that asks, for the event ("" for scripts).
    pub by: String,
}

/// Additional directories a conversation may have (the record carrying
/// them is written at every commit).
pub(crate) const MAX_ADDITIONAL_DIRS: usize = 32;

/// The longest model name accepted.
const MAX_MODEL_NAME: usize = 200;

/// A model name as a client gave it, trimmed; refused when it cannot be
/// one (empty, too long, or with spaces or control characters).
pub(crate) fn model_name(name: &str) -> Result<String, RuntimeError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(RuntimeError::InvalidArgument("model name is empty".into()));
    }
    if name.len() > MAX_MODEL_NAME {
        return Err(RuntimeError::InvalidArgument(format!(
            "model name is {} bytes; at most {MAX_MODEL_NAME}",
            name.len()
        )));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(RuntimeError::InvalidArgument(format!(
            "model name {name:?} contains spaces or control characters"
        )));
    }
    Ok(name.to_string())
}

/// Refuses more than [`MAX_ADDITIONAL_DIRS`] additional directories.
pub(crate) fn too_many_dirs(count: usize) -> Result<(), RuntimeError> {
    if count > MAX_ADDITIONAL_DIRS {
        return Err(RuntimeError::InvalidArgument(format!(
            "{count} additional directories; a conversation may have at most {MAX_ADDITIONAL_DIRS}"
        )));
    }
    Ok(())
}

/// Messages a conversation's queue holds at most (it lives in the record,
/// which every commit writes).
pub(crate) const MAX_QUEUED: usize = 32;

/// What became of a user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Appended to the transcript as this message (a turn started).
    Appended(u64),
    /// Queued while a turn runs, under this id (`q<number>`).
    Queued(String),
}

impl Sent {
    /// The message's sequence number in the transcript; 0 while queued.
    pub(crate) fn message_seq(&self) -> u64 {
        match self {
            Sent::Appended(seq) => *seq,
            Sent::Queued(_) => 0,
        }
    }
}

/// A client's answer to a permission request.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// The request answered (empty: whichever is pending).
    pub request_id: String,
    pub decision: Decision,
    /// With deny-and-stop: what to do instead, sent as the next message.
    pub feedback: Option<String>,
    /// Where a rule the answer adds applies.
    pub scope: RuleScope,
    /// Who answered.
    pub by: Option<ClientInfo>,
    /// The client's id for this request (see [`NewMessage`]).
    pub client_request_id: Option<String>,
    /// The answer to a plan approval request (then `decision` is the plan
    /// decision it amounts to: approve, reject or edit).
    pub plan: Option<agentd_core::plan::PlanAnswer>,
}

/// An answer to a reached budget.
#[derive(Debug, Clone)]
pub(crate) struct BudgetAnswer {
    /// Raise the budget (and send the held request); false stops the turn.
    pub raise: bool,
    /// How much, in the budget's unit as people write it (dollars or
    /// tokens); None: the stop's `raise_by`.
    pub raise_by: Option<f64>,
    /// Who answered.
    pub by: Option<ClientInfo>,
}
