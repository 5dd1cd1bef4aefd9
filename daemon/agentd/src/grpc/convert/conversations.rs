//! A conversation as clients see it: its summary, state, mode, usage and
//! costs, its queue and its checkpoints.

use crate::grpc::convert::image;
use crate::store::ConversationRecord;
use agent_proto::v1 as pb;
use agentd_core::{ConvState, ErrorKind, Mode, Usage};
use tonic::Status;

/// A conversation without its messages; `pricing` is what its usage cost
/// and its model's window.
pub(crate) fn summary(
    r: &ConversationRecord,
    max_attempts: u32,
    last_seq: u64,
    pricing: &crate::models::Pricing,
) -> pb::ConversationSummary {
    let cost_usd = pricing.cost_usd;
    let context_window = pricing.context_window;
    pb::ConversationSummary {
        id: r.id.clone(),
        title: r.title.clone(),
        cwd: r.cwd.display().to_string(),
        model: r.model.clone(),
        state: Some(state(&r.conversation.state, max_attempts)),
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
        message_count: r.message_count,
        mode: mode(r.conversation.mode) as i32,
        usage: Some(usage(&r.usage)),
        last_seq,
        additional_dirs: r
            .setup
            .additional_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect(),
        allow_rules: r.setup.allow_rules.clone(),
        mcp_servers: r.setup.mcp_servers.iter().map(|s| s.name.clone()).collect(),
        turn: r.turns,
        cost_usd,
        queued: queued(&r.conversation.queue),
        context_window,
        parent_conversation_id: r
            .conversation
            .continuation
            .parent_id
            .clone()
            .unwrap_or_default(),
        forked_from: r.fork.forked_from.clone().unwrap_or_default(),
        forked_at_message: r.fork.forked_at,
        archived: r.archived,
        continued_as: r
            .conversation
            .continuation
            .continued_as
            .clone()
            .unwrap_or_default(),
        context_warning: agentd_core::state::should_warn(&r.last_usage, context_window),
        context_tokens: r.last_usage.context_tokens(),
        continuing: matches!(r.conversation.state, ConvState::ContextExhausted { .. })
            && r.conversation.continuation.automatic(),
        budget_stop: match &r.conversation.state {
            ConvState::BudgetStopped { stop, .. } => Some(budget_stop(stop)),
            _ => None,
        },
        sub_agent_parent_id: r
            .sub_agent
            .as_ref()
            .map(|l| l.parent_id.clone())
            .unwrap_or_default(),
        user_initiated: r.user_initiated(),
        agent_id: r
            .sub_agent
            .as_ref()
            .map(|l| l.agent_id.clone())
            .unwrap_or_default(),
        sub_agents_usage: Some(usage(&r.conversation.sub_agents.usage)),
        usage_by_model: pricing
            .by_model
            .iter()
            .map(|m| pb::ModelUsage {
                model: m.model.clone(),
                usage: Some(usage(&m.usage)),
                cost_usd: m.cost_usd,
            })
            .collect(),
        sub_agents_cost_usd: (r.conversation.sub_agents.cost_usd > 0.0)
            .then_some(r.conversation.sub_agents.cost_usd),
    }
}

pub(crate) fn state(s: &ConvState, max_attempts: u32) -> pb::ConversationState {
    let mut out = pb::ConversationState {
        iteration: s.iteration(),
        ..Default::default()
    };
    let kind = match s {
        ConvState::Idle => pb::StateKind::Idle,
        ConvState::AwaitingLlm { .. } => pb::StateKind::AwaitingLlm,
        ConvState::LlmRequesting { attempt, retry, .. } => {
            out.attempt = *attempt;
            out.max_attempts = max_attempts;
            out.retry_in_ms = retry.as_ref().map(|r| r.delay_ms).unwrap_or(0);
            pb::StateKind::LlmRequesting
        }
        ConvState::ToolExecuting(run) => {
            out.running_tool_ids = run.running.clone();
            out.pending_tool_ids = run.pending_ids();
            if run.permission.is_some() {
                pb::StateKind::AwaitingPermission
            } else {
                pb::StateKind::ToolExecuting
            }
        }
        ConvState::Cancelling { .. } => pb::StateKind::Cancelling,
        ConvState::StopHooks { .. } => pb::StateKind::StopHooks,
        ConvState::AwaitingSubAgents { .. } => pb::StateKind::AwaitingSubAgents,
        ConvState::AwaitingContinuation { attempt, .. } => {
            out.attempt = *attempt;
            out.max_attempts = max_attempts;
            pb::StateKind::AwaitingContinuation
        }
        ConvState::ContextExhausted { .. } => pb::StateKind::ContextExhausted,
        ConvState::Error { message, kind } => {
            out.error_message = message.clone();
            out.error_kind = error_kind(*kind) as i32;
            pb::StateKind::Error
        }
        // A turn held at a budget is an error state that names the budget
        // and the amounts; ConversationSummary.budget_stop says it waits
        // for an answer.
        ConvState::BudgetStopped { stop, .. } => {
            out.error_message = agentd_core::texts::budget_reached(stop);
            out.error_kind = pb::ErrorKind::Budget as i32;
            pb::StateKind::Error
        }
    };
    out.kind = kind as i32;
    out
}

pub(crate) fn error_kind(k: ErrorKind) -> pb::ErrorKind {
    match k {
        ErrorKind::Auth => pb::ErrorKind::Auth,
        ErrorKind::RateLimit => pb::ErrorKind::RateLimit,
        ErrorKind::Network => pb::ErrorKind::Network,
        ErrorKind::InvalidRequest => pb::ErrorKind::InvalidRequest,
        ErrorKind::Unknown => pb::ErrorKind::Unknown,
        ErrorKind::ContextExhausted => pb::ErrorKind::ContextExhausted,
        ErrorKind::Budget => pb::ErrorKind::Budget,
    }
}

/// A reached budget, for clients.
pub(crate) fn budget_stop(stop: &agentd_core::BudgetStop) -> pb::BudgetStop {
    pb::BudgetStop {
        budget: stop.kind.name().to_string(),
        usd: stop.kind.is_usd(),
        limit: stop.limit,
        spent: stop.spent,
        raise_by: stop.raise_by,
        text: agentd_core::texts::budget_reached(stop),
    }
}

pub(crate) fn mode(m: Mode) -> pb::PermissionMode {
    match m {
        Mode::ReadOnly => pb::PermissionMode::ReadOnly,
        Mode::Default => pb::PermissionMode::Default,
        Mode::AcceptEdits => pb::PermissionMode::AcceptEdits,
        Mode::Plan => pb::PermissionMode::Plan,
        Mode::Bypass => pb::PermissionMode::Bypass,
        Mode::Auto => pb::PermissionMode::Auto,
    }
}

pub(crate) fn mode_from(m: i32) -> Result<Mode, Status> {
    match pb::PermissionMode::try_from(m) {
        Ok(pb::PermissionMode::Unspecified) | Ok(pb::PermissionMode::Default) => Ok(Mode::Default),
        Ok(pb::PermissionMode::ReadOnly) => Ok(Mode::ReadOnly),
        Ok(pb::PermissionMode::AcceptEdits) => Ok(Mode::AcceptEdits),
        Ok(pb::PermissionMode::Plan) => Ok(Mode::Plan),
        Ok(pb::PermissionMode::Bypass) => Ok(Mode::Bypass),
        Ok(pb::PermissionMode::Auto) => Ok(Mode::Auto),
        Err(_) => Err(Status::invalid_argument(format!(
            "unknown permission mode {m}"
        ))),
    }
}

pub(crate) fn usage(u: &Usage) -> pb::Usage {
    pb::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
    }
}

pub(crate) fn usage_from(u: &pb::Usage) -> Usage {
    Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
    }
}

/// One line of a usage report.
pub(crate) fn usage_line(
    label: String,
    model: String,
    u: &Usage,
    cost_usd: Option<f64>,
) -> pb::UsageLine {
    pb::UsageLine {
        label,
        model,
        usage: Some(usage(u)),
        cost_usd,
    }
}

/// Instruction files (path, size) as clients see them.
pub(crate) fn instructions(files: &[(String, u64)], truncated: bool) -> pb::Instructions {
    pb::Instructions {
        files: files
            .iter()
            .map(|(path, bytes)| pb::InstructionFile {
                path: path.clone(),
                bytes: *bytes,
            })
            .collect(),
        truncated,
    }
}

/// Queued user messages as clients see them.
pub(crate) fn queued(q: &[crate::store::QueuedMessage]) -> Vec<pb::QueuedMessage> {
    q.iter()
        .map(|m| pb::QueuedMessage {
            id: m.id.clone(),
            text: m.text.clone(),
            at_ms: m.at_ms,
            from: m.from.as_ref().map(|(id, name)| pb::ClientInfo {
                client_id: id.clone(),
                name: name.clone(),
                ..Default::default()
            }),
            images: m.images.iter().map(image).collect(),
        })
        .collect()
}

/// What a restore from the checkpoints did.
pub(crate) fn code_rewound(
    message_seq: u64,
    r: &crate::checkpoints::Restored,
    plan_step_id: &str,
) -> pb::CodeRewound {
    let paths = |ps: &[std::path::PathBuf]| ps.iter().map(|p| p.display().to_string()).collect();
    pb::CodeRewound {
        message_seq,
        restored: paths(&r.restored),
        removed: paths(&r.removed),
        untracked_commands: u32::try_from(r.untracked_commands).unwrap_or(u32::MAX),
        plan_step_id: plan_step_id.to_string(),
        skipped: paths(&r.skipped),
    }
}

/// The turns that have checkpoints.
pub(crate) fn checkpoint_turns(
    turns: &[crate::checkpoints::TurnCheckpoint],
) -> Vec<pb::CheckpointTurn> {
    turns
        .iter()
        .map(|t| pb::CheckpointTurn {
            message_seq: t.turn,
            tool_calls: t.calls,
            files: t.files.iter().map(|p| p.display().to_string()).collect(),
            untracked_commands: t.untracked_commands,
            at_ms: t.at_ms,
        })
        .collect()
}
