//! Permission policy: modes, rules and the decision for one tool call.
//!
//! The policy is data; `Policy::evaluate` is a pure function of the call.

use crate::message::ToolCall;
use serde::{Deserialize, Serialize};

/// The permission mode of a conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Mutating tools are not offered.
    ReadOnly,
    /// Read-only tools run; the rest follow the rules.
    #[default]
    Default,
    /// File edits inside the working directory are allowed.
    AcceptEdits,
    /// Planning: read-only, the model is told to plan.
    Plan,
    /// Nothing asks (only when the daemon allows it).
    Bypass,
}

/// How a user answered a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run this call once.
    AllowOnce,
    /// Run it and add an allow rule.
    AllowAlways,
    /// Do not run it; the loop continues.
    Deny,
    /// Do not run it; skip the rest of the reply; stop the turn.
    DenyAndStop,
    /// Do not run it and add a deny rule.
    Never,
    /// bash only: run it as a background shell.
    Background,
    /// The request was cancelled with the turn (not a user answer).
    Cancelled,
}

/// A pending permission request, held in the conversation state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionAsk {
    /// Unique id; answers name it. Derived from the tool_use id.
    pub request_id: String,
    /// The tool_use id of the suspended call.
    pub tool_use_id: String,
    /// The tool (or "doom_loop").
    pub tool_name: String,
    /// The call's input.
    pub input: serde_json::Value,
    /// Why it asks.
    pub reason: String,
    /// The decisions offered.
    pub options: Vec<Decision>,
    /// The rule an "always" answer adds.
    pub suggested_rule: String,
}

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Ask a user first; the reason says why.
    Ask(String),
    /// Refuse it; the reason is the tool result.
    Deny(String),
}

/// The permission policy of a conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
}

impl Policy {
    /// The verdict for `call`.
    pub fn evaluate(&self, _call: &ToolCall) -> Verdict {
        Verdict::Allow
    }
}
