//! `agentd-core`: everything the agent *decides*, and nothing it does.
//!
//! The heart is [`transition()`]: a pure, deterministic function from the
//! current [`Conversation`] (its [`ConvState`], mode, plan, queue...), the
//! [`ConvContext`] and one [`Event`] to the next conversation and the [`Effect`]s the runtime must carry out. It never reads the
//! clock, makes ids or draws random numbers: the clock reading arrives in the
//! context, random draws (retry jitter) inside events.
//!
//! Architecture invariant: this crate has no dependency on tokio, tonic,
//! prost, sled or reqwest, nor on any workspace crate. Purity is checked
//! twice: the e2e test `the_core_reaches_no_io_crate_through_any_path` walks
//! `cargo tree` for any path to an I/O crate, and the shape check
//! (`tests/shape/layers.rs`) refuses a workspace dependency.
//!
//! Invariants the property tests hold it to:
//! - every assistant `tool_use` is answered by exactly one `tool_result` with
//!   the same id in the next message, whose role is user — on success, error,
//!   denial, cancellation and restart;
//! - the same (state, context, event) gives the same result;
//! - busy states refuse user messages with the seed's texts.

pub mod agent_types;
pub mod budget;
pub mod client;
pub mod conversation;
pub mod correction;
pub mod effect;
pub mod event;
pub mod hooks;
pub mod image;
pub mod loops;
pub mod mention;
pub mod message;
pub mod permission;
pub mod plan;
pub mod prune;
pub mod server_tools;
pub mod state;
pub mod texts;
pub mod thinking;
pub mod tools;
pub mod transition;
pub mod unified_diff;

pub use budget::{Amounts, BudgetContext, BudgetKind, BudgetStop, Price};
pub use client::{ClientInfo, ClientRole};
pub use conversation::{
    ContinuationChain, Conversation, QueuedMessage, ShellNote, ShellNotes, SubAgents,
};
pub use correction::{CorrectionSignal, Corrections};
pub use effect::{Effect, LlmPurpose, Notice, Severity, SubAgentOutcome};
pub use event::{Event, LlmFailure, PromptHooks, RuleScope, Sending};
pub use hooks::{HookMatchers, HookVerdict};
pub use image::{ImageLimits, ImageMediaType, ImageRef, ImageRejected};
pub use loops::{Loop, LoopLimits, PastCall};
pub use message::{
    ContentBlock, Message, MessageKind, Reply, Role, StopReason, ToolCall, ToolResult, Usage,
};
pub use permission::{Action, Decision, Mode, PermissionAsk, Policy, Rule, RuleError, Verdict};
pub use plan::{Plan, PlanPhase, PlanStep, StepChange, StepStatus, should_create_plan};
pub use state::{
    AutoContinue, ContextExhaustionBehavior, ConvContext, ConvState, ErrorKind, RetryWait,
    SubAgentResult, SubAgentRole, Submitted, ToolRun,
};
pub use thinking::{Effort, ThinkForm, Thinking, ThinkingParams, ThinkingPlan};
pub use tools::ToolSpec;
pub use transition::{Rejected, Transition, transition};
