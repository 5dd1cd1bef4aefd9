//! What `transition` reads besides the conversation and the event: the
//! limits and settings of the config, the permission policy (in the
//! conversation's mode, with the paths of the calls to judge resolved on
//! the file system), recent calls, hooks and budgets.

use super::Actor;
use agentd_core::{ContentBlock, ConvContext, ConvState, Event, Policy, ToolCall};

/// Tool calls the doom-loop checks look back on: enough for the
/// no-progress check's rounds (`[loops] no_progress`) and a cycle or two.
const RECENT_CALLS: usize = 24;

impl Actor {
    /// Everything `transition` reads besides the conversation and the event.
    pub(super) fn context(&self, event: Option<&Event>) -> ConvContext {
        let cfg = &self.shared.config;
        ConvContext {
            now_ms: self.now_ms(),
            max_attempts: cfg.retry.max_attempts,
            max_iterations: cfg.limits.max_iterations,
            retry_base_ms: cfg.retry.base_delay_ms,
            retry_max_ms: cfg.retry.max_delay_ms,
            max_retry_after_ms: cfg.retry.max_retry_after_ms,
            // What a reply may spend thinking is not the transcript's.
            context_window: agentd_core::thinking::usable_window(
                cfg.models.lookup(&self.record.model).context_window,
                &self.thinking_plan(),
            ),
            // REQ-BED-024: a sub-agent fails at the threshold.
            exhaustion: if self.record.sub_agent.is_some() {
                agentd_core::ContextExhaustionBehavior::IntentionallyUnhandled
            } else {
                agentd_core::ContextExhaustionBehavior::ThresholdBasedContinuation
            },
            policy: self.policy(event),
            loops: cfg.loops.limits(),
            recent_calls: self.recent_calls(),
            hooks: self
                .hooks
                .get()
                .matchers(agentd_core::hooks::stop_continuations(&self.transcript)),
            last_usage: self.record.last_usage,
            budget: self.budget_context(),
            plan_detect: cfg.plan.detect,
            sub_agent: self.sub_agent_role(),
            agent_tools: self.agent_tools(),
            auto_rollback_on_failure: cfg.plan.auto_rollback_on_failure,
            auto_continue: agentd_core::AutoContinue {
                // A switch to a model too small for the conversation asked
                // for its continuation.
                enabled: cfg.context.auto_continue || self.record.models.continue_on.is_some(),
                max_hops: cfg.context.max_hops,
            },
            // A sub-agent's turn is its task: a shell's end never starts
            // another.
            wake_on_shell_exit: cfg.shells.wake_on_exit && self.record.sub_agent.is_none(),
            todo_reminder_after: cfg.plan.todo_reminder_after,
        }
    }

    /// The permission policy `transition` judges the calls `event` may
    /// schedule by: the mode, the rules, the additional directories, and
    /// the calls' paths resolved as the tools will use them.
    fn policy(&self, event: Option<&Event>) -> Policy {
        let cfg = &self.shared.config;
        let cwd = self.record.cwd.display().to_string();
        // A sub-agent reads the rules afresh: a sibling's "allow always"
        // (stored in the parent's scope) holds at once.
        let rules = match self.record.sub_agent {
            Some(_) => self.read_rules().unwrap_or_else(|e| {
                tracing::error!(conversation = %self.record.id, "cannot read permission rules: {e}");
                self.permissions.rules().to_vec()
            }),
            None => self.permissions.rules().to_vec(),
        };
        let mut policy = Policy {
            rules,
            doom_loop: cfg.doom_loop,
            additional_dirs: self
                .record
                .setup
                .additional_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            // Whether bash runs confined: `auto` mode and "run unsandboxed"
            // asks build on it.
            sandbox: self
                .shared
                .daemon
                .sandboxes
                .active()
                .map(|network| agentd_core::permission::Sandboxed { network }),
            ..Policy::new(self.record.conversation.mode, cwd)
        };
        // The policy judges paths as the tools will use them: resolved,
        // symbolic links followed. That needs the file system, so it is
        // done here, for the calls this event may schedule: a transition
        // judges only calls neither running nor finished (the one after a
        // command's end usually none); the effects' hooks (no event) see
        // every call of the run.
        let mut calls: Vec<ToolCall> = match &self.record.conversation.state {
            ConvState::ToolExecuting(run) if event.is_some() => {
                let pending = run.pending_ids();
                run.calls
                    .iter()
                    .filter(|c| pending.contains(&c.id))
                    .cloned()
                    .collect()
            }
            ConvState::ToolExecuting(run) => run.calls.clone(),
            _ => Vec::new(),
        };
        // A pre_tool_use hook's replacement input is judged as it stands.
        if let Some(Event::PreToolHooksDecided {
            tool_use_id,
            new_input: Some(input),
            ..
        }) = event
            && let Some(c) = calls.iter_mut().find(|c| c.id == *tool_use_id)
        {
            c.input = input.clone();
        }
        if let Some(Event::LlmCompleted { reply }) = event {
            calls.extend(reply.content.iter().filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                _ => None,
            }));
        }
        for call in &calls {
            for raw in Policy::paths_to_resolve(call) {
                if let Ok(real) = crate::tools::resolve_real(&self.record.cwd, &raw) {
                    policy
                        .resolved_paths
                        .insert(raw, real.display().to_string());
                }
            }
        }
        // Which MCP tools count as read-only is what the servers last said
        // (trusted servers only); the hub reads no server here.
        let servers = self.mcp_servers();
        if !servers.is_empty() {
            policy.mcp_read_only = self.shared.mcp.read_only_tools(&servers, &self.record.cwd);
        }
        policy
    }

    /// The budgets, raises and spending the next request boundary checks.
    /// A ledger that cannot be read checks nothing (and says so) rather
    /// than stopping every conversation.
    pub(super) fn budget_context(&self) -> agentd_core::BudgetContext {
        crate::runtime::budget::context(&self.shared, &self.record, self.now_ms()).unwrap_or_else(
            |e| {
                tracing::error!(conversation = %self.record.id, "budgets not checked: cannot read the ledger: {e}");
                agentd_core::BudgetContext::default()
            },
        )
    }

    /// The last tool calls of the transcript with their outcomes, oldest
    /// first, excluding the calls of the run in progress (the core sees
    /// those in the state).
    fn recent_calls(&self) -> Vec<agentd_core::PastCall> {
        let current: Vec<&str> = match &self.record.conversation.state {
            ConvState::ToolExecuting(run) => run.calls.iter().map(|c| c.id.as_str()).collect(),
            _ => Vec::new(),
        };
        agentd_core::loops::recent_calls(&self.transcript, &current, RECENT_CALLS)
    }
}
