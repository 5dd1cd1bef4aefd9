//! Hooks, as the core sees them: which calls have `pre_tool_use` hooks,
//! whether `stop` hooks exist, and what hooks decided. The core never runs
//! a hook. When a call reaches the permission decision and no deny rule
//! settles it, and a `pre_tool_use` matcher in [`ConvContext::hooks`]
//! matches it, the core asks the runtime to run the hooks
//! ([`Effect::RunPreToolHooks`]) and suspends the run until
//! [`Event::PreToolHooksDecided`] arrives. Calls no matcher matches are
//! decided at once, as before hooks existed.
//!
//! The permission order is: deny rules (and a restricted mode's refusal,
//! and a doom-loop `deny`) → hook → the mode's defaults, ask and allow
//! rules. A hook's `deny` refuses the call with its reason as the tool
//! result; `ask` raises a permission request with its reason; `allow`
//! runs it without asking; no decision leaves it to the rest of the
//! order. A replaced input is judged again by the deny rules.
//!
//! [`ConvContext::hooks`]: crate::state::ConvContext::hooks
//! [`Effect::RunPreToolHooks`]: crate::effect::Effect::RunPreToolHooks
//! [`Event::PreToolHooksDecided`]: crate::event::Event::PreToolHooksDecided

use crate::message::{ContentBlock, Message, Role, ToolCall};
use crate::permission::{Policy, Rule};
use crate::texts;
use serde::{Deserialize, Serialize};

/// What the `pre_tool_use` hooks of one call decided, all of them together
/// (deny beats ask beats allow beats no decision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", content = "reason", rename_all = "snake_case")]
pub enum HookVerdict {
    /// No hook decided (none answered with a decision, or they failed).
    None,
    /// Run it without asking.
    Allow,
    /// Refuse it; the reason is what the model is told.
    Deny(String),
    /// Ask a person; the reason is shown with the request.
    Ask(String),
}

/// The hooks the runtime has for a conversation, as far as the core
/// decides by them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookMatchers {
    /// One matcher per `pre_tool_use` hook: a permission rule pattern
    /// (its action does not matter), `None` for every call.
    #[serde(default)]
    pub pre_tool_use: Vec<Option<Rule>>,
    /// Whether any `stop` hook exists.
    #[serde(default)]
    pub stop: bool,
    /// How many times `stop` hooks may continue one turn.
    #[serde(default)]
    pub max_stop_continuations: u32,
    /// How many times they already continued the current turn (the runtime
    /// counts the continuation messages in the transcript since the last
    /// message a person wrote).
    #[serde(default)]
    pub stop_continuations: u32,
}

impl HookMatchers {
    /// Whether some `pre_tool_use` hook matches `call`.
    pub fn pre_tool_use_matches(&self, policy: &Policy, call: &ToolCall) -> bool {
        self.pre_tool_use
            .iter()
            .any(|m| matcher_matches(m.as_ref(), policy, call))
    }

    /// Whether `stop` hooks should run at the end of this turn.
    pub fn stop_due(&self) -> bool {
        self.stop && self.stop_continuations < self.max_stop_continuations
    }
}

/// Whether a hook's matcher (`None`: every call) matches `call`. Matching
/// is that of a deny rule: quotes, paths spelled another way and
/// expansions do not dodge it, and a call that cannot be read matches.
pub fn matcher_matches(matcher: Option<&Rule>, policy: &Policy, call: &ToolCall) -> bool {
    match matcher {
        None => true,
        Some(rule) => policy.rule_matches(rule, call),
    }
}

/// How many times `stop` hooks continued the turn `transcript` ends in:
/// their messages since the last one a person wrote. The runtime hands it
/// to the core in [`HookMatchers::stop_continuations`].
pub fn stop_continuations(transcript: &[Message]) -> u32 {
    let mut count = 0;
    for m in transcript.iter().rev().filter(|m| m.role == Role::User) {
        let texts: Vec<&str> = m
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if texts.is_empty() {
            continue;
        }
        if texts.iter().any(|t| t.starts_with(texts::STOP_HOOK_PREFIX)) {
            count += 1;
        } else {
            break;
        }
    }
    count
}
