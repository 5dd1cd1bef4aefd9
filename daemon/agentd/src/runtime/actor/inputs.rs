//! What an actor receives: the inputs of its mailbox (a client's command,
//! or a report of work it started) and what a client attaching gets back.

use crate::hooks::HookReport;
use crate::llm::{LlmError, StreamEvent};
use crate::runtime::error::RuntimeError;
use crate::runtime::events::{ClientInfo, ConvEvent, EventKind};
use crate::store::ConversationRecord;
use crate::tools::ToolOutput;
use agentd_core::Reply as LlmReply;
use std::sync::Arc;
use tokio::sync::{broadcast, oneshot};

/// Where a command's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, RuntimeError>>;

/// What an actor receives.
pub(crate) enum Input {
    /// A request from a client.
    Command(Command),
    /// A piece of the model's reply.
    LlmStream { call: u64, event: StreamEvent },
    /// The model request ended.
    LlmDone {
        call: u64,
        result: Result<LlmReply, LlmError>,
    },
    /// A running tool printed something (coalesced, for people watching).
    ToolOutput {
        call: u64,
        tool_use_id: String,
        chunk: crate::tools::OutputChunk,
    },
    /// A tool ended (its post_tool_use hooks included).
    ToolDone {
        call: u64,
        tool_use_id: String,
        output: ToolOutput,
        duration_ms: u64,
        hooks: Vec<HookReport>,
    },
    /// The pre_tool_use hooks of a call answered.
    PreHooksDone {
        call: u64,
        tool_use_id: String,
        outcome: crate::hooks::PreToolUse,
        reports: Vec<HookReport>,
    },
    /// The stop hooks answered.
    StopHooksDone {
        call: u64,
        continue_with: Option<String>,
        reports: Vec<HookReport>,
    },
    /// The hooks before a user message answered.
    PromptChecked {
        call: u64,
        message: crate::runtime::NewMessage,
        outcome: crate::hooks::Prompt,
        reports: Vec<HookReport>,
        reply: Reply<crate::runtime::Sent>,
    },
    /// Notification hooks ran.
    HooksRan(Vec<HookReport>),
    /// A retry timer fired.
    RetryDue { call: u64 },
    /// The daemon found this conversation mid-turn at start-up.
    Recover,
    /// One of this conversation's background shells started or ended.
    Shell(crate::shells::ShellEvent),
    /// The daemon is stopping.
    Shutdown { done: oneshot::Sender<()> },
    /// The conversation is being deleted: stop everything and write
    /// nothing more (see `runtime/delete.rs`).
    Delete { done: oneshot::Sender<()> },
    /// One of this conversation's sub-agents ended, having used `usage`.
    SubAgentFinished {
        result: agentd_core::SubAgentResult,
        usage: agentd_core::Usage,
        cost_usd: f64,
    },
    /// This sub-agent, found mid-turn at start-up, has its parent's slot:
    /// its recovery goes on (see `sub_agent_recovery`).
    RecoverySlotGranted,
    /// Something one of this conversation's sub-agents told its own
    /// clients that the parent's clients see too (see
    /// `Actor::forward_to_parent`).
    FromSubAgent(EventKind),
}

/// A client's request to an actor.
pub(crate) enum Command {
    Send {
        message: crate::runtime::NewMessage,
        reply: Reply<crate::runtime::Sent>,
    },
    DropQueued {
        /// Empty: all of them.
        queued_id: String,
        reply: Reply<Vec<crate::store::QueuedMessage>>,
    },
    Cancel {
        client_request_id: Option<String>,
        reply: Reply<bool>,
    },
    Answer {
        answer: crate::runtime::Answer,
        reply: Reply<()>,
    },
    Subscribe {
        after_seq: u64,
        /// With the id the manager gave it.
        client: ClientInfo,
        reply: oneshot::Sender<Subscription>,
    },
    Detach {
        client_id: String,
    },
    Resync {
        client_id: String,
        reply: oneshot::Sender<Arc<ConvEvent>>,
    },
    /// Changes the permission mode and/or the model.
    Update {
        settings: crate::runtime::Settings,
        reply: Reply<ConversationRecord>,
    },
    /// Answer the budget that holds the turn.
    AnswerBudget {
        answer: crate::runtime::BudgetAnswer,
        reply: Reply<()>,
    },
    /// Ask for a continuation summary now (from Idle).
    Compact {
        reply: Reply<()>,
    },
    /// Start a new conversation as the continuation of `parent_id`.
    Seed {
        parent_id: String,
        summary: String,
        texts: Vec<String>,
        /// The images of each of `texts`.
        images: Vec<Vec<agentd_core::ImageRef>>,
        reply: Reply<crate::runtime::Sent>,
    },
    /// What a continuation of this (exhausted) conversation is made from.
    TakeSeed {
        reply: Reply<crate::runtime::Seed>,
    },
    /// This sub-agent was cancelled before it ran: it records that as its
    /// end and reports it.
    EndUnstarted,
    /// This conversation continues as `next`; the queued messages `taken`
    /// went with it.
    MarkContinued {
        next: String,
        hop: u32,
        automatic: bool,
        taken: Vec<String>,
        reply: Reply<()>,
    },
    /// Restore the files the agent changed since user message `to` (0: the
    /// last whose turn changed files), or only check that it can be rewound
    /// to (`code` false; 0: the last); refused while a turn runs. Replies
    /// with the message rewound to.
    Rewind {
        to: u64,
        code: bool,
        force: bool,
        reply: Reply<(u64, Option<crate::checkpoints::Restored>)>,
    },
    /// Renames or (un)archives the conversation.
    Label {
        label: crate::runtime::Label,
        reply: Reply<ConversationRecord>,
    },
    /// A rewind forked this conversation: tell the clients.
    Forked {
        message_seq: u64,
        forked_id: String,
    },
}

/// A client's view onto a conversation.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub client: ClientInfo,
    /// What to send first (a snapshot, or `Resumed` and the missed events).
    pub initial: Vec<Arc<ConvEvent>>,
    pub live: broadcast::Receiver<Arc<ConvEvent>>,
}
