//! Effects: commands for the runtime, in the imperative. The runtime runs
//! them in order, after the new state is persisted.

use crate::client::ClientInfo;
use crate::event::RuleScope;
use crate::message::{Message, ToolCall};
use crate::permission::{Decision, PermissionAsk, Rule};
use crate::state::ErrorKind;
use serde::{Deserialize, Serialize};

/// What a model request is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmPurpose {
    /// The next round of the agent loop (tools offered).
    Turn,
    /// A continuation summary: the transcript plus this prompt, no tools.
    Continuation {
        /// The prompt appended as a user message.
        prompt: String,
    },
}

/// Something clients should be told that is not a state or a message.
///
/// One type from the core to the client: the runtime carries it as
/// `EventKind::Notice`, stores the durable ones as they are (serde), and
/// the gRPC edge sends it as the generic `Notice` event (its snake_case
/// name as `kind`, [`Notice::text`], [`Notice::severity`] and its fields
/// as `details_json`), except the notices clients act on, which keep their
/// typed events. A new notice is its variant here, its arms in the three
/// methods below, and the transition that emits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Notice {
    /// An attempt failed and will be retried.
    Retrying {
        /// The attempt that will run.
        attempt: u32,
        max_attempts: u32,
        /// Delay before it, ms.
        delay_ms: u64,
        /// Why the last one failed.
        reason: String,
    },
    /// The turn failed.
    Error {
        /// For people.
        message: String,
        kind: ErrorKind,
    },
    /// Plain information (stop reasons worth saying, a mode change).
    Info { message: String },
    /// A reply filled the warning share of the context window (80 %) for
    /// the first time since it was below it: clients show it.
    ContextWarning {
        /// Tokens of context the reply occupied.
        used_tokens: u64,
        context_window: u64,
    },
    /// A continuation summary is requested: at the threshold (the reply's
    /// tool calls are rejected, named here) or by hand.
    ContinuationStarted {
        /// Names of the tool calls that were not executed, in order.
        rejected_tools: Vec<String>,
        /// Asked for by a user rather than reached.
        manual: bool,
    },
    /// The context is exhausted: the conversation is read-only and may be
    /// continued in a new one seeded with `summary`.
    ContextExhausted { summary: String },
    /// A budget was reached: the turn waits before its next model request
    /// until someone raises the budget or stops the turn.
    BudgetStopped { stop: crate::budget::BudgetStop },
    /// What the recovery after a restart did. Clients that attach later
    /// are told too: their snapshot shows the state, not how it came about.
    Recovered { message: String },
    /// The user's request looks like it deserves a plan (`[plan] detect =
    /// "suggest"`): clients ask whether to plan first.
    PlanSuggested {
        /// The detection score and the cues that made it.
        score: u32,
        cues: Vec<String>,
    },
    /// A tool failed with the `SELF_CORRECT_ATTEMPT:` signal: the model is
    /// re-engaged with the fallback request (attempt `attempt` of
    /// `max_attempts` for the original request).
    CorrectionAttempt {
        attempt: u32,
        max_attempts: u32,
        /// The tool that failed, and why.
        tool: String,
        error: String,
        /// What the model is asked to do instead.
        fallback_request: String,
        /// The tools the fallback uses.
        fallback_tools: Vec<String>,
    },
    /// A fallback tool succeeded after `attempts` correction attempts.
    CorrectionSucceeded { attempts: u32, tool: String },
    /// The tool failed with the signal again after the last attempt: the
    /// turn ends, with `message` for people.
    CorrectionFailed {
        attempts: u32,
        tool: String,
        error: String,
        message: String,
    },
}

/// How much a notice matters to people: clients show it accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Notice {
    /// Whether it is stored in the event log (replayed to a client that
    /// resumes, across restarts) rather than sent live only: the context,
    /// budget, plan and self-correction milestones a person must not miss.
    pub fn is_durable(&self) -> bool {
        match self {
            Notice::Retrying { .. }
            | Notice::Error { .. }
            | Notice::Info { .. }
            | Notice::Recovered { .. } => false,
            Notice::ContextWarning { .. }
            | Notice::ContinuationStarted { .. }
            | Notice::ContextExhausted { .. }
            | Notice::BudgetStopped { .. }
            | Notice::PlanSuggested { .. }
            | Notice::CorrectionAttempt { .. }
            | Notice::CorrectionSucceeded { .. }
            | Notice::CorrectionFailed { .. } => true,
        }
    }

    /// How much it matters to people.
    pub fn severity(&self) -> Severity {
        match self {
            Notice::Info { .. }
            | Notice::Recovered { .. }
            | Notice::ContinuationStarted { .. }
            | Notice::PlanSuggested { .. }
            | Notice::CorrectionSucceeded { .. } => Severity::Info,
            Notice::Retrying { .. }
            | Notice::ContextWarning { .. }
            | Notice::ContextExhausted { .. }
            | Notice::BudgetStopped { .. }
            | Notice::CorrectionAttempt { .. } => Severity::Warning,
            Notice::Error { .. } | Notice::CorrectionFailed { .. } => Severity::Error,
        }
    }

    /// The sentence for people, which a client shows as it is. (Clients
    /// that know a notice's typed event may say it their own way.)
    pub fn text(&self) -> String {
        match self {
            Notice::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                reason,
            } => format!("retrying ({attempt}/{max_attempts}) in {delay_ms} ms: {reason}"),
            Notice::Error { message, .. }
            | Notice::Info { message }
            | Notice::Recovered { message }
            | Notice::CorrectionFailed { message, .. } => message.clone(),
            Notice::ContextWarning {
                used_tokens,
                context_window,
            } => format!("the context is filling up: {used_tokens} of {context_window} tokens"),
            Notice::ContinuationStarted { manual, .. } => {
                let why = if *manual {
                    "asked for"
                } else {
                    "the context is full"
                };
                format!("a continuation summary is requested ({why})")
            }
            Notice::ContextExhausted { .. } => {
                "the context is exhausted: the conversation is read-only".to_string()
            }
            Notice::BudgetStopped { stop } => crate::texts::budget_reached(stop),
            Notice::PlanSuggested { .. } => "this request looks like it deserves a plan".into(),
            Notice::CorrectionAttempt {
                attempt,
                max_attempts,
                tool,
                ..
            } => format!("self-correction {attempt}/{max_attempts}: {tool} failed"),
            Notice::CorrectionSucceeded { attempts, tool } => {
                format!("{tool} succeeded after {attempts} self-correction attempt(s)")
            }
        }
    }

    /// Its name (`"context_warning"`, the serde name) and its fields as a
    /// JSON object, for programs.
    pub fn kind_and_details(&self) -> (String, serde_json::Value) {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => match map.into_iter().next() {
                Some((kind, details)) => (kind, details),
                None => ("notice".to_string(), serde_json::Value::Null),
            },
            // A variant without fields is its name alone.
            Ok(serde_json::Value::String(kind)) => (kind, serde_json::json!({})),
            Ok(_) | Err(_) => ("notice".to_string(), serde_json::Value::Null),
        }
    }
}

/// A command for the runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// Append a message to the transcript (durable before clients hear of it).
    AppendMessage {
        message: Message,
    },
    /// Ask the model, with the transcript as it stands.
    RequestLlm {
        /// 1-based attempt.
        attempt: u32,
        purpose: LlmPurpose,
    },
    /// Abort the model request in flight; the runtime reports `LlmAborted`.
    AbortLlm,
    /// Fire `RetryDue` after a delay.
    ScheduleRetry {
        /// Attempt that will run.
        attempt: u32,
        delay_ms: u64,
    },
    CancelRetry,
    /// Run a tool; the runtime reports `ToolCompleted`.
    ExecuteTool {
        call: ToolCall,
        /// Start the command as a background shell instead (the answer
        /// "background" to a bash permission request): the result says
        /// which shell runs it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        background: bool,
    },
    /// Stop running tools (process groups are terminated); their late
    /// results are ignored.
    AbortTools {
        tool_use_ids: Vec<String>,
    },
    /// Run the `pre_tool_use` hooks whose matchers match `call`; the
    /// runtime reports `PreToolHooksDecided`.
    RunPreToolHooks {
        call: ToolCall,
    },
    /// Put the user message just sent in the queue: a turn runs and its
    /// sender asked to queue it rather than be refused. The state is
    /// unchanged; the core delivers it later from `Conversation::queue`.
    Enqueue,
    /// Run the hooks that check the user message just sent before it is
    /// sent (`session_start` for the first message, then
    /// `user_prompt_submit`): the state would take it, and nothing happened
    /// yet. The runtime sends it again, `PromptHooks::Passed`, if they let
    /// it through (with what they added).
    RunPromptHooks,
    /// Run the `stop` hooks; the runtime reports `StopHooksDecided`.
    RunStopHooks,
    /// Stop the hooks that run (their process groups are terminated);
    /// their late answers are ignored.
    AbortHooks,
    /// Show a permission request to every attached client.
    AskPermission {
        ask: PermissionAsk,
    },
    /// Tell clients how a permission request ended (and the audit trail
    /// which call an answer allowed or denied).
    PermissionResolved {
        /// The request that ended, with the call it asked about.
        ask: PermissionAsk,
        decision: Decision,
        /// Who answered.
        by: Option<ClientInfo>,
    },
    /// Persist a rule added by an "always" or "never" answer.
    AddRule {
        /// The rule, with its action.
        rule: Rule,
        /// Where it applies, as the answer asked.
        scope: RuleScope,
    },
    Notify {
        notice: Notice,
    },
    /// Start the sub-agent `agent_id`, or, when it exists already (after
    /// a restart), watch it: the runtime reports `SubAgentFinished` once.
    SpawnSubAgent {
        agent_id: String,
        /// Its task.
        prompt: String,
        /// A short label for people.
        #[serde(default)]
        description: String,
        /// The model it uses (`None`: the parent's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// Whether it runs in read-only mode (never wider than the parent).
        #[serde(default)]
        read_only: bool,
        /// The sub-agent type it runs as (`None`: the general one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
    },
    /// Cancel running sub-agents; their late results are ignored.
    CancelSubAgents {
        agent_ids: Vec<String>,
    },
    /// This conversation is a sub-agent and has ended: the runtime records
    /// its result and reports it to the parent.
    FinishSubAgent {
        outcome: SubAgentOutcome,
    },
    /// Remember the files as they are now under `mark` (a plan step
    /// starts), so that `RestoreCheckpoint` can put back what the agent
    /// changes after it.
    MarkCheckpoint {
        mark: String,
    },
    /// Put back the files the agent changed since `mark` (files someone
    /// else changed meanwhile stay, named) and tell clients: the plan step
    /// `step_id` failed and `[plan] auto_rollback_on_failure` is on.
    RestoreCheckpoint {
        mark: String,
        step_id: String,
    },
    /// The context is exhausted and the daemon continues the conversation
    /// in a new one by itself (`[context] auto_continue`): the runtime
    /// records that it owes one with the state, then asks for it.
    ContinueInNewConversation,
    /// The conversation's plan is now `plan` (persisted with the state of
    /// this transition); tell clients what happened to it.
    PlanChanged {
        plan: crate::plan::Plan,
        change: crate::plan::PlanEvent,
    },
}

/// How a sub-agent ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SubAgentOutcome {
    /// It called `submit_result`.
    Submitted { result: String, success: bool },
    /// It ended its turn twice without `submit_result`: its last text is the
    /// result (the runtime reads it from the transcript and marks it).
    LastText,
    /// It failed (context exhausted, model error, iteration guard).
    Failed { message: String },
    /// A user cancelled it (or its parent was cancelled).
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_is_named_by_its_serde_name_with_its_fields_as_details() {
        let notice = Notice::ContextWarning {
            used_tokens: 80,
            context_window: 100,
        };
        let (kind, details) = notice.kind_and_details();
        assert_eq!(kind, "context_warning");
        assert_eq!(
            details,
            serde_json::json!({"used_tokens": 80, "context_window": 100})
        );
        let info = Notice::Info {
            message: "hello".into(),
        };
        assert_eq!(info.kind_and_details().0, "info");
        assert_eq!(info.text(), "hello");
        assert_eq!(info.severity(), Severity::Info);
        assert!(!info.is_durable());
        assert!(notice.is_durable());
    }

    #[test]
    fn a_stored_notice_reads_back_as_it_was() {
        let notice = Notice::CorrectionSucceeded {
            attempts: 2,
            tool: "edit".into(),
        };
        let stored = serde_json::to_string(&notice).unwrap();
        assert_eq!(serde_json::from_str::<Notice>(&stored).unwrap(), notice);
    }
}
