//! Events: facts that happened, in the past tense. Every input to
//! `transition` is one of these.

use crate::client::ClientInfo;
use crate::hooks::HookVerdict;
use crate::image::ImageRef;
use crate::message::{ContentBlock, Reply, ToolCall, ToolResult, Usage};
use crate::permission::Decision;
use crate::plan::PlanAnswer;
use crate::state::{ErrorKind, SubAgentResult};
use serde::{Deserialize, Serialize};

/// Why a model request failed, as classified by the provider layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmFailure {
    pub kind: ErrorKind,
    /// Whether another attempt may succeed.
    pub retryable: bool,
    /// For people (status, provider message, request id).
    pub message: String,
    /// The provider's `retry-after`, in ms.
    pub retry_after_ms: Option<u64>,
}

/// Where a rule added by an "always" or "never" answer applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleScope {
    /// Only the conversation whose request was answered.
    #[default]
    Conversation,
    /// Every conversation in the same working directory.
    Project,
}

/// How a user message was sent, as far as the core decides by it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sending {
    /// While a turn runs (or a cancel completes) the message waits in the
    /// queue ([`Effect::Enqueue`]) instead of being refused as busy.
    ///
    /// [`Effect::Enqueue`]: crate::effect::Effect::Enqueue
    #[serde(default)]
    pub queue_if_busy: bool,
    /// Where the message stands with its own prompt hooks.
    #[serde(default)]
    pub hooks: PromptHooks,
    /// The prompt hooks of another message run now: that message counts
    /// as a turn, so this one is busy.
    #[serde(default)]
    pub other_in_hooks: bool,
    /// The thinking its sender asked for the turn it starts (None: the
    /// model's configured thinking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<crate::thinking::Thinking>,
    /// The files its `@path` mentions attach, as the daemon found them
    /// (read once the message is taken): blocks after its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<crate::mention::Mentioned>,
}

/// Where a user message stands with the hooks that check a message before
/// it is sent (`session_start` for the first, then `user_prompt_submit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptHooks {
    /// They have not seen it: a message the conversation would take is
    /// not taken yet; the core asks for them first
    /// ([`Effect::RunPromptHooks`]) and the runtime sends it again,
    /// [`PromptHooks::Passed`], if they let it through.
    ///
    /// [`Effect::RunPromptHooks`]: crate::effect::Effect::RunPromptHooks
    Due,
    /// They let it through (or there are none): it is taken now.
    #[default]
    Passed,
}

/// An input to the state machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A user sent a message.
    UserMessage {
        /// Must not be empty unless there are images.
        text: String,
        /// Images sent with it (their bytes are stored already), in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::image::ImageRef>,
        /// How it was sent: whether it may wait in the queue, and where it
        /// stands with the hooks that check a message before it is sent.
        #[serde(default)]
        sending: Sending,
    },
    /// A user asked to cancel the turn.
    UserCancel,
    /// The model's reply arrived complete.
    LlmCompleted { reply: Reply },
    LlmFailed {
        failure: LlmFailure,
        /// A random draw in 0..1000 supplied by the runtime, for backoff jitter.
        jitter_permille: u16,
    },
    /// The aborted stream reported what it had received.
    LlmAborted { partial: Vec<ContentBlock> },
    /// A scheduled retry's timer fired.
    RetryDue,
    /// A tool finished (successfully or not).
    ToolCompleted { result: ToolResult },
    /// A tool block of the reply being streamed is complete (its input
    /// parsed): a read-only call may start before the reply ends.
    /// `preceding`: the ids of the reply's tool calls before it.
    ToolCallStreamed {
        call: ToolCall,
        preceding: Vec<String>,
    },
    /// A user answered a permission request.
    PermissionAnswered {
        request_id: String,
        decision: Decision,
        /// Deny-and-stop: the next user message.
        feedback: Option<String>,
        /// Where a rule this answer adds applies.
        scope: RuleScope,
        /// The client that answered, named in the resolution every client
        /// sees; `None` when the daemon answered itself.
        by: Option<ClientInfo>,
    },
    /// The `pre_tool_use` hooks of a call answered (all of them; a hook
    /// that failed or timed out counts as no decision).
    PreToolHooksDecided {
        tool_use_id: String,
        verdict: HookVerdict,
        /// The input the call runs with instead, if a hook replaced it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_input: Option<serde_json::Value>,
    },
    /// The `stop` hooks answered: `Some(reason)` makes the model continue,
    /// told the reason.
    StopHooksDecided {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        continue_with: Option<String>,
    },
    /// A sub-agent of this conversation ended (reported once per child,
    /// again after a restart). What it used is counted once
    /// ([`SubAgents::count`]) with the end it reports, taken while the
    /// conversation waits for it; a late end is refused, and the runtime
    /// counts it with the same `SubAgents::count`.
    ///
    /// [`SubAgents::count`]: crate::conversation::SubAgents::count
    SubAgentFinished {
        result: SubAgentResult,
        /// What it used in all (its own replies and its sub-agents').
        #[serde(default)]
        usage: Usage,
        /// What that cost, USD (0 when unknown).
        #[serde(default)]
        cost_usd: f64,
    },
    /// The runtime made the conversation `id` that continues this
    /// (exhausted) one, by itself if `automatically`, and the queued
    /// messages `taken` went there: it is recorded, and no continuation is
    /// owed any more. Refused when it is recorded already.
    ContinuedAs {
        id: String,
        automatically: bool,
        /// Ids of the queued messages the new conversation took.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        taken: Vec<String>,
    },
    /// The continuation summary arrived.
    ContinuationCompleted {
        summary: String,
        /// Usage of that request.
        usage: Usage,
    },
    /// The continuation request failed after its retries.
    ContinuationFailed { error: String },
    /// A user asked for a continuation summary by hand.
    UserTriggerContinuation,
    /// This (new) conversation continues `parent_id`, whose context was
    /// exhausted: its first user message carries the parent's summary and
    /// the messages that were queued there (`texts`), and the turn starts.
    ContinuedFrom {
        parent_id: String,
        summary: String,
        /// Queued user messages of the parent, oldest first.
        texts: Vec<String>,
        /// Their images: `images[i]` go with `texts[i]` (missing entries:
        /// none), after that text.
        images: Vec<Vec<ImageRef>>,
    },
    /// Someone answered a reached budget: `raise` (the runtime has raised
    /// it already; the held request goes out if there is room now) or stop
    /// the turn.
    BudgetAnswered { raise: bool },
    /// The daemon started and found this conversation in the stored state.
    DaemonRestarted,
    /// The daemon is stopping cleanly (SIGTERM): running tools are being
    /// terminated.
    DaemonStopping,
    /// A user answered a plan approval request (a decision apart from the
    /// permission answers).
    PlanAnswered {
        /// Empty: the pending one.
        request_id: String,
        answer: PlanAnswer,
        /// The client that answered.
        by: Option<ClientInfo>,
    },
    /// A background shell of this conversation ended (reported again
    /// after a restart until it is taken): its note is taken once per
    /// shell ([`ShellNotes::take`]) and joins the next model request, or
    /// starts a turn when the conversation is idle and
    /// `ConvContext::wake_on_shell_exit` is set. A shell taken already is
    /// refused.
    ///
    /// [`ShellNotes::take`]: crate::conversation::ShellNotes::take
    ShellEnded {
        note: crate::conversation::ShellNote,
    },
}

impl Event {
    /// A short name, for logs and rendered tests.
    pub fn name(&self) -> &'static str {
        match self {
            Event::UserMessage { .. } => "UserMessage",
            Event::UserCancel => "UserCancel",
            Event::LlmCompleted { .. } => "LlmCompleted",
            Event::LlmFailed { .. } => "LlmFailed",
            Event::LlmAborted { .. } => "LlmAborted",
            Event::RetryDue => "RetryDue",
            Event::ToolCompleted { .. } => "ToolCompleted",
            Event::ToolCallStreamed { .. } => "ToolCallStreamed",
            Event::PermissionAnswered { .. } => "PermissionAnswered",
            Event::PreToolHooksDecided { .. } => "PreToolHooksDecided",
            Event::StopHooksDecided { .. } => "StopHooksDecided",
            Event::SubAgentFinished { .. } => "SubAgentFinished",
            Event::ContinuationCompleted { .. } => "ContinuationCompleted",
            Event::ContinuationFailed { .. } => "ContinuationFailed",
            Event::UserTriggerContinuation => "UserTriggerContinuation",
            Event::ContinuedFrom { .. } => "ContinuedFrom",
            Event::ContinuedAs { .. } => "ContinuedAs",
            Event::BudgetAnswered { .. } => "BudgetAnswered",
            Event::DaemonRestarted => "DaemonRestarted",
            Event::DaemonStopping => "DaemonStopping",
            Event::PlanAnswered { .. } => "PlanAnswered",
            Event::ShellEnded { .. } => "ShellEnded",
        }
    }
}
