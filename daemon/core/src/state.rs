//! Conversation states and the context the transition function reads.

use crate::budget::{BudgetContext, BudgetStop};
use crate::hooks::{HookMatchers, HookVerdict};
use crate::message::{ToolCall, ToolResult, Usage};
use crate::permission::{PermissionAsk, Policy};
use serde::{Deserialize, Serialize};

/// Error classification shown to users (seed REQ-BED-006).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 401/403: not retried.
    Auth,
    /// 429 retried to exhaustion, or a spend cap.
    RateLimit,
    /// Connection failures and timeouts, retried to exhaustion.
    Network,
    /// 400/404/413: not retried.
    InvalidRequest,
    /// Anything else.
    Unknown,
    /// The context window is exhausted.
    ContextExhausted,
    /// A budget was reached and not raised.
    Budget,
}

/// What a conversation is doing. Persisted (as JSON) before the effects of
/// the transition that produced it run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "one state per conversation; boxing ToolRun would only add a deref to every match"
)]
pub enum ConvState {
    /// Ready for a user message.
    #[default]
    Idle,
    /// A request to the model is due but not yet issued. The live loop passes
    /// through it inside one transition; it is met at rest only in stores
    /// written before a crash, and recovery re-issues the request.
    AwaitingLlm {
        /// Model round within the user turn.
        iteration: u32,
    },
    /// A request to the model is in flight, or waiting to be retried.
    LlmRequesting {
        /// 1-based attempt.
        attempt: u32,
        /// Model round within the user turn (1-based).
        iteration: u32,
        /// Set while waiting for a retry timer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry: Option<RetryWait>,
        /// Read-only calls of the reply started while it streams.
        #[serde(default, skip_serializing_if = "EarlyCalls::is_empty")]
        early: EarlyCalls,
    },
    /// Tools of the last reply run; a permission request may be pending.
    ToolExecuting(ToolRun),
    /// The model ended its turn and the `stop` hooks run: they may make it
    /// continue (with a reason it is told), or let the turn end.
    StopHooks {
        /// Model round that ended.
        iteration: u32,
    },
    /// A cancel aborted the model's stream; waiting for its partial reply.
    Cancelling {
        /// Model round that was cancelled.
        iteration: u32,
    },
    /// A `spawn_agents` call of the reply in `run` waits for its children
    /// (REQ-BED-008). Nothing else of the run starts meanwhile; when the
    /// last child ends, the call's result carries every child's result in
    /// the order they were asked for, and the run goes on.
    AwaitingSubAgents {
        /// Ids of sub-agents still running.
        pending_ids: Vec<String>,
        /// Results so far, in completion order.
        completed: Vec<SubAgentResult>,
        /// Every sub-agent of the call, in the order they were asked for.
        #[serde(default)]
        agents: Vec<String>,
        /// The `spawn_agents` call waiting.
        #[serde(default)]
        call_id: String,
        /// The tool run the call belongs to.
        #[serde(default)]
        run: Box<ToolRun>,
    },
    /// A continuation summary is being requested (REQ-BED-019).
    AwaitingContinuation {
        /// Tool calls of the triggering reply that were not executed.
        rejected_tool_calls: Vec<ToolCall>,
        /// Usage of the triggering reply.
        trigger_usage: Usage,
        /// 1-based attempt of the continuation request.
        attempt: u32,
    },
    /// The context is exhausted; the conversation is read-only.
    ContextExhausted {
        /// The continuation summary.
        summary: String,
        /// Usage when exhausted.
        final_usage: Usage,
    },
    /// A budget was reached at a model request boundary: the turn waits
    /// for someone to raise it (then the round's request goes out) or to
    /// stop it. At rest: nothing runs, and a restart keeps it.
    BudgetStopped {
        /// The model round whose request is held back.
        iteration: u32,
        stop: BudgetStop,
    },
    /// The last turn failed; a new user message leaves this state.
    Error {
        /// For people.
        message: String,
        kind: ErrorKind,
    },
}

impl ConvState {
    /// A short name, for logs and rendered tests.
    pub fn name(&self) -> &'static str {
        match self {
            ConvState::Idle => "Idle",
            ConvState::AwaitingLlm { .. } => "AwaitingLlm",
            ConvState::LlmRequesting { .. } => "LlmRequesting",
            ConvState::ToolExecuting(run) if run.permission.is_some() => "AwaitingPermission",
            ConvState::ToolExecuting(_) => "ToolExecuting",
            ConvState::StopHooks { .. } => "StopHooks",
            ConvState::Cancelling { .. } => "Cancelling",
            ConvState::AwaitingSubAgents { .. } => "AwaitingSubAgents",
            ConvState::AwaitingContinuation { .. } => "AwaitingContinuation",
            ConvState::ContextExhausted { .. } => "ContextExhausted",
            ConvState::BudgetStopped { .. } => "BudgetStopped",
            ConvState::Error { .. } => "Error",
        }
    }

    /// At rest: nothing runs and nothing will happen without a user.
    pub fn is_at_rest(&self) -> bool {
        matches!(
            self,
            ConvState::Idle
                | ConvState::Error { .. }
                | ConvState::ContextExhausted { .. }
                | ConvState::BudgetStopped { .. }
        )
    }

    /// The pending permission request, if any.
    pub fn pending_permission(&self) -> Option<&PermissionAsk> {
        match self {
            ConvState::ToolExecuting(run) => run.permission.as_ref(),
            _ => None,
        }
    }

    /// The model round within the current turn (0 at rest).
    pub fn iteration(&self) -> u32 {
        match self {
            ConvState::AwaitingLlm { iteration }
            | ConvState::LlmRequesting { iteration, .. }
            | ConvState::Cancelling { iteration }
            | ConvState::StopHooks { iteration } => *iteration,
            ConvState::ToolExecuting(run) => run.iteration,
            _ => 0,
        }
    }
}

/// The calls of a reply still streaming that started before it ended
/// (seed 002: a read-only call runs as soon as its block is complete).
/// Only a leading run of such calls starts early: a call after one that
/// could not (it changes something, needs a person or a hook, or is a plan
/// tool) waits for the reply, which keeps every mutating call in the
/// model's order and after the reads before it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlyCalls {
    /// The calls started, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ToolCall>,
    /// Ids of those still running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<String>,
    /// Results of those that ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ToolResult>,
}

impl EarlyCalls {
    /// Nothing started.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// A scheduled retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryWait {
    /// Delay before the attempt, in ms.
    pub delay_ms: u64,
    /// Why the previous attempt failed.
    pub reason: String,
}

/// The tools of one reply and their progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    /// Model round that asked for them.
    pub iteration: u32,
    /// Every call of the reply, in the model's order.
    pub calls: Vec<ToolCall>,
    /// Results so far, in completion order (sent in the model's order).
    pub results: Vec<ToolResult>,
    /// Ids of calls running now.
    pub running: Vec<String>,
    /// The pending permission request. While it is set nothing else runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<PermissionAsk>,
    /// Set by a "deny and stop" answer: the feedback to send once the
    /// results are written (empty: none), and no further model request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_with_feedback: Option<String>,
    /// The call whose `pre_tool_use` hooks run now. While it is set nothing
    /// else starts (as while a permission request is pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooking: Option<String>,
    /// What the `pre_tool_use` hooks decided, by call id, for calls not
    /// started or answered yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hook_verdicts: Vec<(String, HookVerdict)>,
    /// A sub-agent called `submit_result`: once the run is answered the
    /// sub-agent ends with this result instead of asking the model again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted: Option<Submitted>,
}

/// What a sub-agent submitted with `submit_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    pub result: String,
    pub success: bool,
}

impl ToolRun {
    /// Ids of the calls neither finished nor running, in the model's order.
    pub fn pending_ids(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|c| !self.is_done(&c.id) && !self.running.contains(&c.id))
            .map(|c| c.id.clone())
            .collect()
    }

    /// Whether `id` has a result.
    pub fn is_done(&self, id: &str) -> bool {
        self.results.iter().any(|r| r.tool_use_id == id)
    }

    /// Whether `id` is one of this run's calls.
    pub fn has_call(&self, id: &str) -> bool {
        self.calls.iter().any(|c| c.id == id)
    }
}

/// What a sub-agent reported (REQ-BED-008).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubAgentResult {
    pub agent_id: String,
    /// Its submitted result.
    pub result: String,
    pub success: bool,
    /// The child conversation's id (the runtime names it).
    #[serde(default)]
    pub conversation_id: String,
}

/// What the conversation is when it is a sub-agent (REQ-BED-009).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubAgentRole {
    /// Whether it was already told to call `submit_result` after ending a
    /// turn without it (it is told once).
    pub reminded: bool,
}

/// How a conversation handles a nearly full context (REQ-BED-019/024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextExhaustionBehavior {
    /// User conversations: ask for a continuation summary at the threshold.
    ThresholdBasedContinuation,
    /// Sub-agents: fail at once.
    IntentionallyUnhandled,
}

/// Fraction of the context window that triggers a continuation.
pub const CONTINUATION_THRESHOLD: f64 = 0.90;
/// Fraction at which clients show a warning.
pub const WARNING_THRESHOLD: f64 = 0.80;

/// Everything `transition` may read besides the conversation and the event:
/// configuration, limits, budgets, the clock. The
/// runtime fills it; the clock reading arrives here, never from a syscall.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvContext {
    /// The clock reading for this transition (Unix ms).
    pub now_ms: i64,
    /// Attempts per model request (default 3).
    pub max_attempts: u32,
    /// Model rounds per user turn (default 100).
    pub max_iterations: u32,
    /// First retry delay (ms); doubles per attempt.
    pub retry_base_ms: u64,
    /// Largest backoff delay (ms).
    pub retry_max_ms: u64,
    /// A `retry-after` longer than this is not waited for (ms).
    pub max_retry_after_ms: u64,
    /// The model's context window in tokens (0: unknown, no threshold).
    pub context_window: u64,
    /// What to do near the context limit.
    pub exhaustion: ContextExhaustionBehavior,
    /// The permission policy: mode and rules. The runtime builds it in the
    /// conversation's mode (`Conversation::mode`); a transition that
    /// changes the mode judges its later calls in the new one.
    pub policy: Policy,
    /// How much repetition the doom-loop checks allow (config `[loops]`).
    pub loops: crate::loops::LoopLimits,
    /// The most recent tool calls of this conversation, oldest first (for the
    /// doom-loop detector); the runtime keeps the last few.
    pub recent_calls: Vec<crate::loops::PastCall>,
    /// The hooks configured for this conversation, as far as decisions
    /// depend on them (none by default).
    pub hooks: HookMatchers,
    /// Usage of the conversation's latest reply (zero before the first):
    /// the warning fires when a reply crosses the warning threshold from
    /// below it, and a manual continuation starts from it (REQ-BED-023).
    pub last_usage: Usage,
    /// The budgets, raises and spending the request boundary checks.
    pub budget: BudgetContext,
    /// What a user message that deserves a plan does (`[plan] detect`).
    /// Off in `ConvContext::default()`; the daemon's default is suggest.
    pub plan_detect: crate::plan::PlanDetect,
    /// Set when this conversation is a sub-agent: no nesting, no mode
    /// upgrade, `submit_result` ends it (REQ-BED-008/009/018).
    pub sub_agent: Option<SubAgentRole>,
    /// Set for a sub-agent whose type lists its tools
    /// ([`crate::agent_types`]): a call of any other tool is refused
    /// (`submit_result` is always allowed).
    pub agent_tools: Option<Vec<String>>,
    /// `[plan] auto_rollback_on_failure`: a failed plan step puts back the
    /// files the agent changed since it started.
    pub auto_rollback_on_failure: bool,
    /// Whether an exhausted context is continued in a new conversation by
    /// the daemon itself.
    pub auto_continue: AutoContinue,
    /// `[shells] wake_on_exit`: the end of a background shell starts a
    /// turn when the conversation is idle (otherwise its note waits for
    /// the next model request).
    pub wake_on_shell_exit: bool,
    /// `[plan] todo_reminder_after`: a turn that made this many tool calls
    /// without a todo list is reminded once to keep one (0: never).
    pub todo_reminder_after: u32,
}

/// Whether the daemon continues a conversation whose context is exhausted
/// in a new one by itself (`[context] auto_continue`, `max_hops`); whether
/// one is owed also depends on where it stands in its chain
/// ([`ContinuationChain::owed`]).
///
/// [`ContinuationChain::owed`]: crate::conversation::ContinuationChain::owed
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AutoContinue {
    /// `[context] auto_continue`.
    pub enabled: bool,
    /// `[context] max_hops`: how many automatic continuations in a row.
    pub max_hops: u32,
}

impl Default for ConvContext {
    fn default() -> Self {
        ConvContext {
            now_ms: 0,
            max_attempts: 3,
            max_iterations: 100,
            retry_base_ms: 1_000,
            retry_max_ms: 30_000,
            max_retry_after_ms: 120_000,
            context_window: 200_000,
            exhaustion: ContextExhaustionBehavior::ThresholdBasedContinuation,
            policy: Policy::default(),
            loops: crate::loops::LoopLimits::default(),
            recent_calls: Vec::new(),
            hooks: HookMatchers::default(),
            last_usage: Usage::default(),
            budget: BudgetContext::default(),
            plan_detect: crate::plan::PlanDetect::Off,
            sub_agent: None,
            agent_tools: None,
            auto_rollback_on_failure: false,
            auto_continue: AutoContinue::default(),
            wake_on_shell_exit: false,
            todo_reminder_after: 0,
        }
    }
}

/// Whether `usage` reaches the continuation threshold of `window`.
pub fn should_trigger_continuation(usage: &Usage, window: u64) -> bool {
    reaches(usage, window, CONTINUATION_THRESHOLD)
}

/// Whether `usage` reaches the warning threshold of `window` (REQ-BED-023).
pub fn should_warn(usage: &Usage, window: u64) -> bool {
    reaches(usage, window, WARNING_THRESHOLD)
}

/// Whether `usage` fills at least `fraction` of `window` (an unknown
/// window, 0, never fills).
fn reaches(usage: &Usage, window: u64, fraction: f64) -> bool {
    if window == 0 {
        return false;
    }
    let threshold = (window as f64 * fraction) as u64;
    usage.context_tokens() >= threshold
}
