//! The one place that maps between prost types and the daemon's own types.

use crate::runtime::{
    Answer, ClientInfo, ConvEvent, EventKind, PermissionView, RuntimeError, SnapshotData,
};
use crate::store::ConversationRecord;
use agent_proto::v1 as pb;
use agentd_core::plan::{Plan, PlanAnswer, PlanEvent, StepDraft, StepKind, StepStatus};
use agentd_core::{
    ContentBlock, ConvState, Decision, ErrorKind, Message, MessageKind, Mode, Rejected, Role,
    RuleScope, Usage,
};
use tonic::Status;

/// Client input longer than this is cut when an error quotes it.
const QUOTE_BYTES: usize = 64;
/// The longest status message the daemon sends: a status travels in an
/// HTTP/2 header block, which clients bound (grpc-go and tonic at 16 KiB,
/// some at 8 KiB), and a status over the bound reaches them as a protocol
/// error instead of its message.
const MESSAGE_BYTES: usize = 1024;

/// `input` as an error quotes it: whole when short, else its start and its
/// size, e.g. `AAAA… (300000 bytes)`.
pub fn brief(input: &str) -> String {
    if input.len() <= QUOTE_BYTES {
        return input.to_string();
    }
    format!("{}… ({} bytes)", head(input, QUOTE_BYTES), input.len())
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A status with `message` cut to [`MESSAGE_BYTES`].
pub fn bounded(code: tonic::Code, message: String) -> Status {
    if message.len() <= MESSAGE_BYTES {
        return Status::new(code, message);
    }
    let cut = format!(
        "{}… ({} bytes in all)",
        head(&message, MESSAGE_BYTES - 32),
        message.len()
    );
    Status::new(code, cut)
}

/// The one mapping from runtime errors to gRPC statuses.
pub fn to_status(e: RuntimeError) -> Status {
    use tonic::Code;
    match e {
        RuntimeError::NotFound(id) => {
            Status::not_found(format!("unknown conversation {}", brief(&id)))
        }
        RuntimeError::Ambiguous { .. } => bounded(Code::InvalidArgument, e.to_string()),
        RuntimeError::InvalidArgument(m) => bounded(Code::InvalidArgument, m),
        RuntimeError::NotAllowed(m) => bounded(Code::FailedPrecondition, m),
        RuntimeError::StaleTurn { .. } => Status::failed_precondition(e.to_string()),
        RuntimeError::NotQueued { id, conversation } => Status::not_found(
            RuntimeError::NotQueued {
                id: brief(&id),
                conversation,
            }
            .to_string(),
        ),
        RuntimeError::QueueFull(_) => Status::resource_exhausted(e.to_string()),
        RuntimeError::HookBlocked(_) => bounded(Code::FailedPrecondition, e.to_string()),
        RuntimeError::Rejected(r) => match r {
            Rejected::Busy
            | Rejected::CancellationInProgress
            | Rejected::ContextExhausted
            | Rejected::NoPendingPermission
            | Rejected::NotApplicable { .. } => Status::failed_precondition(r.to_string()),
            Rejected::EmptyMessage | Rejected::DecisionNotOffered(_) => {
                Status::invalid_argument(r.to_string())
            }
            Rejected::UnknownPermissionRequest(id) => {
                Status::not_found(Rejected::UnknownPermissionRequest(brief(&id)).to_string())
            }
            Rejected::InvalidPlanAnswer(why) => bounded(Code::InvalidArgument, why),
        },
        RuntimeError::Store(e) => bounded(Code::Internal, e.to_string()),
        RuntimeError::ShuttingDown => Status::unavailable("agentd is shutting down"),
    }
}

/// One line of a usage report.
pub fn usage_line(label: String, model: String, u: &Usage, cost_usd: Option<f64>) -> pb::UsageLine {
    pb::UsageLine {
        label,
        model,
        usage: Some(usage(u)),
        cost_usd,
    }
}

/// Instruction files (path, size) as clients see them.
pub fn instructions(files: &[(String, u64)], truncated: bool) -> pb::Instructions {
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

pub fn error_kind(k: ErrorKind) -> pb::ErrorKind {
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
pub fn budget_stop(stop: &agentd_core::BudgetStop) -> pb::BudgetStop {
    pb::BudgetStop {
        budget: stop.kind.name().to_string(),
        usd: stop.kind.is_usd(),
        limit: stop.limit,
        spent: stop.spent,
        raise_by: stop.raise_by,
        text: agentd_core::texts::budget_reached(stop),
    }
}

pub fn state(s: &ConvState, max_attempts: u32) -> pb::ConversationState {
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

pub fn mode(m: Mode) -> pb::PermissionMode {
    match m {
        Mode::ReadOnly => pb::PermissionMode::ReadOnly,
        Mode::Default => pb::PermissionMode::Default,
        Mode::AcceptEdits => pb::PermissionMode::AcceptEdits,
        Mode::Plan => pb::PermissionMode::Plan,
        Mode::Bypass => pb::PermissionMode::Bypass,
    }
}

pub fn mode_from(m: i32) -> Result<Mode, Status> {
    match pb::PermissionMode::try_from(m) {
        Ok(pb::PermissionMode::Unspecified) | Ok(pb::PermissionMode::Default) => Ok(Mode::Default),
        Ok(pb::PermissionMode::ReadOnly) => Ok(Mode::ReadOnly),
        Ok(pb::PermissionMode::AcceptEdits) => Ok(Mode::AcceptEdits),
        Ok(pb::PermissionMode::Plan) => Ok(Mode::Plan),
        Ok(pb::PermissionMode::Bypass) => Ok(Mode::Bypass),
        Err(_) => Err(Status::invalid_argument(format!(
            "unknown permission mode {m}"
        ))),
    }
}

pub fn usage(u: &Usage) -> pb::Usage {
    pb::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
    }
}

pub fn usage_from(u: &pb::Usage) -> Usage {
    Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
    }
}

/// A conversation without its messages; `cost_usd` is what its usage cost
/// (None: the model's price is unknown).
pub fn summary(
    r: &ConversationRecord,
    max_attempts: u32,
    last_seq: u64,
    cost_usd: Option<f64>,
    context_window: u64,
) -> pb::ConversationSummary {
    pb::ConversationSummary {
        id: r.id.clone(),
        title: r.title.clone(),
        cwd: r.cwd.display().to_string(),
        model: r.model.clone(),
        state: Some(state(&r.state, max_attempts)),
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
        message_count: r.message_count,
        mode: mode(r.mode) as i32,
        usage: Some(usage(&r.usage)),
        last_seq,
        additional_dirs: r
            .additional_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect(),
        allow_rules: r.allow_rules.clone(),
        mcp_servers: r.mcp_servers.iter().map(|s| s.name.clone()).collect(),
        turn: r.turns,
        cost_usd,
        queued: queued(&r.queued),
        context_window,
        parent_conversation_id: r.parent_id.clone().unwrap_or_default(),
        forked_from: r.forked_from.clone().unwrap_or_default(),
        forked_at_message: r.forked_at,
        continued_as: r.continued_as.clone().unwrap_or_default(),
        context_warning: agentd_core::state::should_warn(&r.last_usage, context_window),
        context_tokens: r.last_usage.context_tokens(),
        continuing: matches!(r.state, ConvState::ContextExhausted { .. })
            && (r.continue_pending || r.continued_automatically),
        budget_stop: match &r.state {
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
        sub_agents_usage: Some(usage(&r.sub_agents_usage)),
        sub_agents_cost_usd: (r.sub_agents_cost_usd > 0.0).then_some(r.sub_agents_cost_usd),
    }
}

/// `s`, or None when it is empty.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

pub fn message_kind(k: MessageKind) -> pb::MessageKind {
    match k {
        MessageKind::Ordinary => pb::MessageKind::Ordinary,
        MessageKind::Continuation => pb::MessageKind::Continuation,
        MessageKind::Continued => pb::MessageKind::Continued,
    }
}

fn message_kind_from(k: i32) -> Result<MessageKind, Status> {
    match pb::MessageKind::try_from(k) {
        Ok(pb::MessageKind::Ordinary) => Ok(MessageKind::Ordinary),
        Ok(pb::MessageKind::Continuation) => Ok(MessageKind::Continuation),
        Ok(pb::MessageKind::Continued) => Ok(MessageKind::Continued),
        Err(_) => Err(Status::invalid_argument(format!(
            "{k} is not a message kind"
        ))),
    }
}

/// Queued user messages as clients see them.
pub fn queued(q: &[crate::store::QueuedMessage]) -> Vec<pb::QueuedMessage> {
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

/// An image as clients see it in messages: its description, no bytes.
pub fn image(i: &agentd_core::ImageRef) -> pb::ImageBlock {
    pb::ImageBlock {
        media_type: i.media_type.mime().to_string(),
        size: i.size,
        sha256: i.sha256.clone(),
        width: i.width,
        height: i.height,
        data: Vec::new(),
    }
}

/// An image reference from a client (an import), checked.
pub fn image_from(i: &pb::ImageBlock) -> Result<agentd_core::ImageRef, Status> {
    let media_type = agentd_core::ImageMediaType::from_mime(&i.media_type).ok_or_else(|| {
        Status::invalid_argument(format!(
            "image {}: {:?} is not an image type agentd takes (image/png, image/jpeg, image/gif, image/webp)",
            brief(&i.sha256),
            brief(&i.media_type)
        ))
    })?;
    if i.sha256.len() != 64
        || !i
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Status::invalid_argument(format!(
            "image {:?}: sha256 must be 64 lower-case hex digits",
            brief(&i.sha256)
        )));
    }
    Ok(agentd_core::ImageRef {
        media_type,
        size: i.size,
        sha256: i.sha256.clone(),
        width: i.width,
        height: i.height,
    })
}

/// The images a client sends with a message, checked against the limits:
/// INVALID_ARGUMENT naming the image and the reason when one is refused.
pub fn uploads(
    limits: &agentd_core::ImageLimits,
    uploads: Vec<pb::ImageUpload>,
) -> Result<Vec<crate::images::StagedImage>, Status> {
    crate::images::stage(
        limits,
        uploads
            .into_iter()
            .map(|u| (bytes::Bytes::from(u.data), u.name))
            .collect(),
    )
    .map_err(|e| Status::invalid_argument(e.to_string()))
}

/// The images of an export: each one's bytes must be an image and must
/// have the SHA-256 it is named by (the size limits of the importing
/// daemon do not apply: they were checked when the image was sent).
pub fn exported_images(
    e: &pb::ExportedConversation,
) -> Result<Vec<crate::images::StagedImage>, Status> {
    let anything = agentd_core::ImageLimits {
        max_bytes: u64::MAX,
        max_per_message: usize::MAX,
        max_dimension: u32::MAX,
    };
    e.images
        .iter()
        .map(|i| {
            let named = image_from(i)?;
            let staged = crate::images::stage_one(&anything, bytes::Bytes::from(i.data.clone()))
                .map_err(|reason| {
                    Status::invalid_argument(format!("image {}: {reason}", named.sha256))
                })?;
            if staged.image.sha256 != named.sha256 {
                return Err(Status::invalid_argument(format!(
                    "image {}: its bytes have SHA-256 {} (the export is damaged)",
                    named.sha256, staged.image.sha256
                )));
            }
            Ok(staged)
        })
        .collect()
}

pub fn block(b: &ContentBlock) -> pb::ContentBlock {
    use pb::content_block::Block;
    let block = match b {
        ContentBlock::Text { text } => Block::Text(pb::TextBlock { text: text.clone() }),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => Block::Thinking(pb::ThinkingBlock {
            thinking: thinking.clone(),
            signature: signature.clone(),
        }),
        ContentBlock::RedactedThinking { .. } => Block::Thinking(pb::ThinkingBlock {
            thinking: "[redacted reasoning]".to_string(),
            signature: String::new(),
        }),
        ContentBlock::ToolUse { id, name, input } => Block::ToolUse(pb::ToolUseBlock {
            id: id.clone(),
            name: name.clone(),
            input_json: input.to_string(),
        }),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
        } => Block::ToolResult(pb::ToolResultBlock {
            tool_use_id: tool_use_id.clone(),
            content: content.clone(),
            is_error: *is_error,
            images: images.iter().map(image).collect(),
        }),
        ContentBlock::Image(i) => Block::Image(image(i)),
    };
    pb::ContentBlock { block: Some(block) }
}

/// [`block`] for a block of our own: its text moves instead of being copied.
fn block_owned(b: ContentBlock) -> pb::ContentBlock {
    use pb::content_block::Block;
    let block = match b {
        ContentBlock::Text { text } => Block::Text(pb::TextBlock { text }),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => Block::Thinking(pb::ThinkingBlock {
            thinking,
            signature,
        }),
        other => return block(&other),
    };
    pb::ContentBlock { block: Some(block) }
}

pub fn block_from(b: &pb::ContentBlock) -> Result<ContentBlock, Status> {
    use pb::content_block::Block;
    match &b.block {
        Some(Block::Text(t)) => Ok(ContentBlock::text(t.text.clone())),
        Some(Block::Thinking(t)) => Ok(ContentBlock::Thinking {
            thinking: t.thinking.clone(),
            signature: t.signature.clone(),
        }),
        Some(Block::ToolUse(t)) => Ok(ContentBlock::ToolUse {
            id: t.id.clone(),
            name: t.name.clone(),
            input: serde_json::from_str(&t.input_json).map_err(|e| {
                Status::invalid_argument(format!("tool_use {} has invalid input JSON: {e}", t.id))
            })?,
        }),
        Some(Block::ToolResult(t)) => Ok(ContentBlock::ToolResult {
            tool_use_id: t.tool_use_id.clone(),
            content: t.content.clone(),
            is_error: t.is_error,
            images: t.images.iter().map(image_from).collect::<Result<_, _>>()?,
        }),
        Some(Block::Image(i)) => Ok(ContentBlock::Image(image_from(i)?)),
        None => Err(Status::invalid_argument("content block without a kind")),
    }
}

pub fn message(seq: u64, m: &Message) -> pb::Message {
    pb::Message {
        seq,
        role: match m.role {
            Role::User => pb::Role::User,
            Role::Assistant => pb::Role::Assistant,
        } as i32,
        content: m.content.iter().map(block).collect(),
        created_at_ms: m.created_at_ms,
        usage: m.usage.as_ref().map(usage),
        stop_reason: m
            .stop_reason
            .as_ref()
            .map(|s| s.as_wire().to_string())
            .unwrap_or_default(),
        interrupted: m.interrupted,
        kind: message_kind(m.kind) as i32,
    }
}

pub fn message_from(m: &pb::Message) -> Result<Message, Status> {
    let role = match pb::Role::try_from(m.role) {
        Ok(pb::Role::User) => Role::User,
        Ok(pb::Role::Assistant) => Role::Assistant,
        _ => {
            return Err(Status::invalid_argument(format!(
                "message {} has no valid role",
                m.seq
            )));
        }
    };
    Ok(Message {
        role,
        content: m.content.iter().map(block_from).collect::<Result<_, _>>()?,
        created_at_ms: m.created_at_ms,
        usage: m.usage.as_ref().map(usage_from),
        stop_reason: (!m.stop_reason.is_empty())
            .then(|| agentd_core::StopReason::from_wire(&m.stop_reason)),
        interrupted: m.interrupted,
        kind: message_kind_from(m.kind)?,
    })
}

pub fn decision(d: Decision) -> pb::PermissionDecision {
    match d {
        Decision::AllowOnce => pb::PermissionDecision::AllowOnce,
        Decision::AllowAlways => pb::PermissionDecision::AllowAlways,
        Decision::Deny => pb::PermissionDecision::Deny,
        Decision::DenyAndStop => pb::PermissionDecision::DenyAndStop,
        Decision::Never => pb::PermissionDecision::Never,
        Decision::Background => pb::PermissionDecision::Background,
        Decision::Cancelled => pb::PermissionDecision::Cancelled,
        // A plan's answers travel as `PlanAnswer`; a resolution says
        // which way it went in the permission decisions' terms (the
        // PlanConfirmed / PlanRejected event that follows says more).
        Decision::ApprovePlan | Decision::EditPlan => pb::PermissionDecision::AllowOnce,
        Decision::RejectPlan => pb::PermissionDecision::Deny,
    }
}

/// A plan as clients see it.
pub fn plan(p: &Plan) -> pb::Plan {
    pb::Plan {
        intent: p.intent.clone(),
        risk: p.risk.as_str().to_string(),
        estimate_secs: p.estimate_secs.unwrap_or(0),
        steps: p
            .steps
            .iter()
            .map(|s| pb::PlanStep {
                id: s.draft.id.clone(),
                title: s.draft.title.clone(),
                kind: s.draft.kind.as_str().to_string(),
                files: s.draft.files.clone(),
                dependencies: s.draft.dependencies.clone(),
                status: s.status.as_str().to_string(),
                note: s.note.clone().unwrap_or_default(),
                estimate_secs: s.draft.estimate_secs.unwrap_or(0),
            })
            .collect(),
        phase: p.phase.as_str().to_string(),
        tool_use_id: p.tool_use_id.clone(),
    }
}

/// The steps of a client's plan edit (their statuses are ignored: every
/// edited step starts pending). The core checks them as a plan.
pub fn plan_steps_from(steps: &[pb::PlanStep]) -> Result<Vec<StepDraft>, Status> {
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let kind = StepKind::from_name(&s.kind).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "step {} ({}): kind {:?} is not one of analyze, edit, validate, test",
                    i + 1,
                    brief(&s.id),
                    brief(&s.kind)
                ))
            })?;
            Ok(StepDraft {
                id: s.id.trim().to_string(),
                title: s.title.trim().to_string(),
                kind,
                files: s.files.clone(),
                dependencies: s.dependencies.clone(),
                estimate_secs: (s.estimate_secs > 0).then_some(s.estimate_secs),
            })
        })
        .collect()
}

/// A plan answer from the wire, and the decision it amounts to.
pub fn plan_answer_from(a: pb::PlanAnswer) -> Result<(Decision, PlanAnswer), Status> {
    use pb::plan_answer::Answer as A;
    match a.answer {
        Some(A::Approve(x)) => Ok((
            Decision::ApprovePlan,
            PlanAnswer::Approve {
                mode: mode_from(x.mode)?,
            },
        )),
        Some(A::Reject(x)) => Ok((
            Decision::RejectPlan,
            PlanAnswer::Reject {
                feedback: x.feedback,
            },
        )),
        Some(A::Edit(x)) => Ok((
            Decision::EditPlan,
            PlanAnswer::Edit {
                steps: plan_steps_from(&x.steps)?,
                mode: mode_from(x.mode)?,
            },
        )),
        None => Err(Status::invalid_argument(
            "plan_answer names no answer: set approve, reject or edit",
        )),
    }
}

pub fn decision_from(d: i32) -> Result<Decision, Status> {
    match pb::PermissionDecision::try_from(d) {
        Ok(pb::PermissionDecision::AllowOnce) => Ok(Decision::AllowOnce),
        Ok(pb::PermissionDecision::AllowAlways) => Ok(Decision::AllowAlways),
        Ok(pb::PermissionDecision::Deny) => Ok(Decision::Deny),
        Ok(pb::PermissionDecision::DenyAndStop) => Ok(Decision::DenyAndStop),
        Ok(pb::PermissionDecision::Never) => Ok(Decision::Never),
        Ok(pb::PermissionDecision::Background) => Ok(Decision::Background),
        Ok(pb::PermissionDecision::Cancelled)
        | Ok(pb::PermissionDecision::Unspecified)
        | Err(_) => Err(Status::invalid_argument(format!(
            "{d} is not a decision a client can give"
        ))),
    }
}

/// Where a rule an answer adds applies; unset means the conversation.
pub fn rule_scope_from(scope: i32) -> Result<RuleScope, Status> {
    match pb::RuleScope::try_from(scope) {
        Ok(pb::RuleScope::Unspecified | pb::RuleScope::Conversation) => Ok(RuleScope::Conversation),
        Ok(pb::RuleScope::Project) => Ok(RuleScope::Project),
        Err(_) => Err(Status::invalid_argument(format!(
            "{scope} is not a rule scope (1: conversation, 2: project)"
        ))),
    }
}

/// A permission answer from the wire (the unary request and the Attach
/// frame carry the same fields).
pub fn answer_from(
    request_id: String,
    decision: i32,
    feedback: String,
    scope: i32,
    by: ClientInfo,
    client_request_id: String,
    plan_answer: Option<pb::PlanAnswer>,
) -> Result<Answer, Status> {
    let (decision, plan) = match plan_answer {
        Some(a) => {
            let (decision, answer) = plan_answer_from(a)?;
            (decision, Some(answer))
        }
        None => (decision_from(decision)?, None),
    };
    Ok(Answer {
        plan,
        request_id,
        decision,
        feedback: (!feedback.is_empty()).then_some(feedback),
        scope: rule_scope_from(scope)?,
        by: Some(by),
        client_request_id: client_request_id_from(client_request_id)?,
    })
}

/// The longest client request id accepted.
const CLIENT_REQUEST_ID_BYTES: usize = 128;

/// A request's client request id: none when empty; refused when too long.
pub fn client_request_id_from(raw: String) -> Result<Option<String>, Status> {
    if raw.len() > CLIENT_REQUEST_ID_BYTES {
        return Err(Status::invalid_argument(format!(
            "client_request_id is {} bytes; at most {CLIENT_REQUEST_ID_BYTES} are accepted",
            raw.len()
        )));
    }
    Ok((!raw.is_empty()).then_some(raw))
}

pub fn permission(v: &PermissionView) -> pb::PermissionRequest {
    pb::PermissionRequest {
        request_id: v.ask.request_id.clone(),
        tool_name: v.ask.tool_name.clone(),
        tool_use_id: v.ask.tool_use_id.clone(),
        input_json: v.ask.input.to_string(),
        summary: v.summary.clone(),
        diff: v.diff.clone().unwrap_or_default(),
        // A plan request offers no permission decision: it is answered
        // with a PlanAnswer.
        options: v
            .ask
            .options
            .iter()
            .filter(|d| {
                !matches!(
                    d,
                    Decision::ApprovePlan | Decision::RejectPlan | Decision::EditPlan
                )
            })
            .map(|d| decision(*d) as i32)
            .collect(),
        reason: v.ask.reason.clone(),
        suggested_rule: v.ask.suggested_rule.clone(),
        plan: (agentd_core::tools::Tool::from_name(&v.ask.tool_name)
            == Some(agentd_core::tools::Tool::ProposePlan))
        .then(|| Plan::from_input(&v.ask.input, &v.ask.tool_use_id).ok())
        .flatten()
        .map(|p| plan(&p)),
        sub_agent_conversation_id: v
            .sub_agent
            .as_ref()
            .map(|r| r.conversation_id.clone())
            .unwrap_or_default(),
        sub_agent_id: v
            .sub_agent
            .as_ref()
            .map(|r| r.agent_id.clone())
            .unwrap_or_default(),
        sub_agent_description: v
            .sub_agent
            .as_ref()
            .map(|r| r.description.clone())
            .unwrap_or_default(),
    }
}

/// Which sub-agent an event is about.
pub fn sub_agent_ref(r: &crate::runtime::SubAgentRef) -> pb::SubAgentRef {
    pb::SubAgentRef {
        conversation_id: r.conversation_id.clone(),
        agent_id: r.agent_id.clone(),
        description: r.description.clone(),
    }
}

pub fn client(c: &ClientInfo) -> pb::ClientInfo {
    pb::ClientInfo {
        client_id: c.id.clone(),
        name: c.name.clone(),
        role: role(c.role) as i32,
        token_name: c.token_name.clone().unwrap_or_default(),
        address: c.address.clone().unwrap_or_default(),
    }
}

/// An entry of a conversation's audit trail as clients see it.
pub fn audit_entry(r: &crate::store::access::AuditRecord) -> pb::AuditEntry {
    use crate::store::access::AuditAction;
    use pb::audit_entry::Action;
    pb::AuditEntry {
        at_ms: r.at_ms,
        client: Some(client(&r.client)),
        action: Some(match &r.action {
            AuditAction::MessageSent { text, queued_id } => {
                Action::MessageSent(pb::AuditMessageSent {
                    text: text.clone(),
                    queued_id: queued_id.clone().unwrap_or_default(),
                })
            }
            AuditAction::PermissionAnswered {
                request_id,
                decision: d,
                tool,
                summary,
            } => Action::PermissionAnswered(pb::AuditPermissionAnswered {
                request_id: request_id.clone(),
                decision: decision(*d) as i32,
                tool: tool.clone(),
                summary: summary.clone(),
            }),
        }),
    }
}

/// A role as clients see it.
pub fn role(r: agentd_core::ClientRole) -> pb::ClientRole {
    match r {
        agentd_core::ClientRole::Viewer => pb::ClientRole::Viewer,
        agentd_core::ClientRole::Approver => pb::ClientRole::Approver,
        agentd_core::ClientRole::Driver => pb::ClientRole::Driver,
    }
}

/// A role a client names: `None` for unspecified, refused when unknown.
pub fn role_from(raw: i32) -> Result<Option<agentd_core::ClientRole>, Status> {
    match pb::ClientRole::try_from(raw) {
        Ok(pb::ClientRole::Unspecified) => Ok(None),
        Ok(pb::ClientRole::Viewer) => Ok(Some(agentd_core::ClientRole::Viewer)),
        Ok(pb::ClientRole::Approver) => Ok(Some(agentd_core::ClientRole::Approver)),
        Ok(pb::ClientRole::Driver) => Ok(Some(agentd_core::ClientRole::Driver)),
        Err(_) => Err(Status::invalid_argument(format!(
            "unknown client role {raw}"
        ))),
    }
}

fn snapshot(s: &SnapshotData, seq: u64) -> pb::Snapshot {
    let partial = (!s.partial.is_empty()).then(|| pb::Message {
        seq: 0,
        role: pb::Role::Assistant as i32,
        content: s.partial.to_blocks().into_iter().map(block_owned).collect(),
        ..Default::default()
    });
    pb::Snapshot {
        conversation: Some(summary(
            &s.record,
            s.max_attempts,
            seq,
            s.cost_usd,
            s.context_window,
        )),
        messages: s
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| message(i as u64 + 1, m))
            .collect(),
        partial_reply: partial,
        pending_permission: s.pending.as_ref().map(permission),
        clients: s.clients.iter().map(client).collect(),
        your_client_id: s.your_client_id.clone(),
        your_role: s
            .clients
            .iter()
            .find(|c| c.id == s.your_client_id)
            .map_or(pb::ClientRole::Unspecified, |c| role(c.role)) as i32,
        plan: s.record.plan.as_ref().map(plan),
    }
}

/// An event this client alone owns (deltas merged for it) as it goes on
/// the wire: the text moves instead of being copied.
pub fn event_owned(e: ConvEvent) -> pb::AttachResponse {
    use pb::attach_response::Event as E;
    let ev = match e.kind {
        EventKind::TextDelta { index, text } => E::TextDelta(pb::TextDelta {
            block_index: index,
            text,
        }),
        EventKind::ThinkingDelta { index, text } => E::ThinkingDelta(pb::ThinkingDelta {
            block_index: index,
            text,
        }),
        _ => return event(&e),
    };
    pb::AttachResponse {
        seq: e.seq,
        at_ms: e.at_ms,
        event: Some(ev),
    }
}

/// An event as it goes on the wire.
pub fn event(e: &ConvEvent) -> pb::AttachResponse {
    use pb::attach_response::Event as E;
    let ev = match &e.kind {
        EventKind::Snapshot(s) => E::Snapshot(snapshot(s, e.seq)),
        EventKind::Resumed { after_seq } => E::Resumed(pb::Resumed {
            after_seq: *after_seq,
        }),
        EventKind::StateChanged {
            state: s,
            max_attempts,
        } => E::StateChanged(pb::StateChanged {
            state: Some(state(s, *max_attempts)),
        }),
        EventKind::MessageAppended {
            message_seq,
            message: m,
        } => E::MessageAppended(pb::MessageAppended {
            message: Some(message(*message_seq, m)),
        }),
        EventKind::ReplyBegin { attempt } => E::ReplyBegin(pb::ReplyBegin { attempt: *attempt }),
        EventKind::TextDelta { index, text } => E::TextDelta(pb::TextDelta {
            block_index: *index,
            text: text.clone(),
        }),
        EventKind::ThinkingDelta { index, text } => E::ThinkingDelta(pb::ThinkingDelta {
            block_index: *index,
            text: text.clone(),
        }),
        EventKind::ToolCallBegin {
            tool_use_id,
            name,
            summary,
            input_json,
        } => E::ToolCallBegin(pb::ToolCallBegin {
            tool_use_id: tool_use_id.clone(),
            tool_name: name.clone(),
            summary: summary.clone(),
            input_json: input_json.clone(),
        }),
        EventKind::ToolCallEnd {
            tool_use_id,
            name,
            is_error,
            summary,
            diff,
            duration_ms,
            preview,
        } => {
            let preview = preview.clone().unwrap_or_default();
            E::ToolCallEnd(pb::ToolCallEnd {
                tool_use_id: tool_use_id.clone(),
                tool_name: name.clone(),
                is_error: *is_error,
                summary: summary.clone(),
                diff: diff.clone().unwrap_or_default(),
                duration_ms: *duration_ms,
                output_head: preview.head,
                output_tail: preview.tail,
                output_lines: preview.lines,
            })
        }
        EventKind::ToolOutputDelta {
            tool_use_id,
            text,
            skipped_bytes,
        } => E::ToolOutputDelta(pb::ToolOutputDelta {
            tool_use_id: tool_use_id.clone(),
            text: text.clone(),
            skipped_bytes: *skipped_bytes,
        }),
        EventKind::PermissionRequested(v) => E::PermissionRequested(pb::PermissionRequested {
            request: Some(permission(v)),
        }),
        EventKind::PermissionResolved {
            request_id,
            decision: d,
            client: c,
        } => E::PermissionResolved(pb::PermissionResolved {
            request_id: request_id.clone(),
            decision: decision(*d) as i32,
            client_id: c.as_ref().map(|c| c.id.clone()).unwrap_or_default(),
            client_name: c.as_ref().map(|c| c.name.clone()).unwrap_or_default(),
            client_role: c
                .as_ref()
                .map_or(pb::ClientRole::Unspecified, |c| role(c.role))
                as i32,
        }),
        EventKind::UsageUpdated {
            last,
            total,
            cost_usd,
        } => E::UsageUpdated(pb::UsageUpdated {
            last: Some(usage(last)),
            total: Some(usage(total)),
            cost_usd: *cost_usd,
        }),
        EventKind::Error { message, kind } => E::Error(pb::ErrorEvent {
            message: message.clone(),
            kind: error_kind(*kind) as i32,
        }),
        EventKind::ClientAttached(c) => E::ClientAttached(pb::ClientAttached {
            client: Some(client(c)),
        }),
        EventKind::ClientDetached(c) => E::ClientDetached(pb::ClientDetached {
            client: Some(client(c)),
        }),
        EventKind::Retrying {
            attempt,
            max_attempts,
            delay_ms,
            reason,
        } => E::Retrying(pb::Retrying {
            attempt: *attempt,
            max_attempts: *max_attempts,
            delay_ms: *delay_ms,
            reason: reason.clone(),
        }),
        EventKind::InstructionsLoaded { files, truncated } => {
            E::InstructionsLoaded(instructions(files, *truncated))
        }
        EventKind::Notice(m) => E::Notice(pb::Notice { message: m.clone() }),
        EventKind::ContextWarning {
            used_tokens,
            context_window,
        } => E::ContextWarning(pb::ContextWarning {
            used_tokens: *used_tokens,
            context_window: *context_window,
        }),
        EventKind::ContinuationStarted {
            rejected_tools,
            manual,
        } => E::ContinuationStarted(pb::ContinuationStarted {
            rejected_tools: rejected_tools.clone(),
            manual: *manual,
        }),
        EventKind::ContextExhausted {
            summary,
            continuing,
        } => E::ContextExhausted(pb::ContextExhausted {
            summary: summary.clone(),
            continuing: *continuing,
        }),
        EventKind::ConversationContinued {
            conversation_id,
            hop,
            automatic,
        } => E::ConversationContinued(pb::ConversationContinued {
            conversation_id: conversation_id.clone(),
            hop: *hop,
            automatic: *automatic,
        }),
        EventKind::BudgetStopped { stop } => E::BudgetStopped(pb::BudgetStopped {
            stop: Some(budget_stop(stop)),
        }),
        EventKind::BudgetResolved {
            stop,
            raised_by,
            client: by,
        } => E::BudgetResolved(pb::BudgetResolved {
            stop: Some(budget_stop(stop)),
            raised: raised_by.is_some(),
            raised_by: raised_by.unwrap_or(0),
            by: by.as_ref().map(client),
        }),
        EventKind::HookRan(r) => E::HookRan(pb::HookRan {
            stage: r.stage.as_str().to_string(),
            command: r.command.clone(),
            decision: r.decision.clone(),
            duration_ms: r.duration_ms,
            error: r.error.clone().unwrap_or_default(),
        }),
        EventKind::QueueChanged(q) => E::QueueChanged(pb::QueueChanged { queued: queued(q) }),
        EventKind::SettingsChanged {
            mode: m,
            model,
            context_window,
            additional_dirs,
            by,
        } => E::SettingsChanged(pb::SettingsChanged {
            mode: mode(*m) as i32,
            model: model.clone(),
            context_window: *context_window,
            by: by.clone(),
            additional_dirs: additional_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
        }),
        EventKind::ShellStarted(r) => E::ShellStarted(pb::ShellStarted {
            shell: Some(shell(r)),
        }),
        EventKind::ShellExited(r) => E::ShellExited(pb::ShellExited {
            shell: Some(shell(r)),
        }),
        EventKind::Plan { change, plan: p } => plan_event(change, p),
        EventKind::PlanSuggested { score, cues } => E::PlanSuggested(pb::PlanSuggested {
            score: *score,
            cues: cues.clone(),
        }),
        EventKind::SubAgentStarted(r) => E::SubAgentStarted(pb::SubAgentStarted {
            sub_agent: Some(sub_agent_ref(r)),
        }),
        EventKind::SubAgentStateChanged {
            sub_agent,
            state: s,
            max_attempts,
        } => E::SubAgentStateChanged(pb::SubAgentStateChanged {
            sub_agent: Some(sub_agent_ref(sub_agent)),
            state: Some(state(s, *max_attempts)),
        }),
        EventKind::SubAgentToolCall {
            sub_agent,
            tool_use_id,
            name,
            summary,
            end,
        } => {
            let call = pb::SubAgentToolCall {
                sub_agent: Some(sub_agent_ref(sub_agent)),
                tool_use_id: tool_use_id.clone(),
                tool_name: name.clone(),
                summary: summary.clone(),
                is_error: end.is_some_and(|(e, _)| e),
                duration_ms: end.map_or(0, |(_, d)| d),
            };
            match end {
                None => E::SubAgentToolCallBegin(call),
                Some(_) => E::SubAgentToolCallEnd(call),
            }
        }
        EventKind::SubAgentFinished {
            sub_agent,
            success,
            summary,
            usage: u,
            cost_usd,
        } => E::SubAgentFinished(pb::SubAgentFinished {
            sub_agent: Some(sub_agent_ref(sub_agent)),
            success: *success,
            summary: summary.clone(),
            usage: Some(usage(u)),
            cost_usd: *cost_usd,
        }),

        EventKind::CodeRewound {
            message_seq,
            restored,
            plan_step_id,
        } => E::CodeRewound(code_rewound(*message_seq, restored, plan_step_id)),
        EventKind::ConversationForked {
            message_seq,
            forked_id,
        } => E::ConversationForked(pb::ConversationForked {
            message_seq: *message_seq,
            forked_conversation_id: forked_id.clone(),
        }),

        EventKind::CorrectionAttempt {
            attempt,
            max_attempts,
            tool,
            error,
            fallback_request,
            fallback_tools,
        } => E::CorrectionAttempt(pb::CorrectionAttempt {
            attempt: *attempt,
            max_attempts: *max_attempts,
            tool: tool.clone(),
            error: error.clone(),
            fallback_request: fallback_request.clone(),
            fallback_tools: fallback_tools.clone(),
        }),
        EventKind::CorrectionSucceeded { attempts, tool } => {
            E::CorrectionSuccess(pb::CorrectionSuccess {
                attempts: *attempts,
                tool: tool.clone(),
            })
        }
        EventKind::CorrectionFailed {
            attempts,
            tool,
            error,
            message,
        } => E::CorrectionFailed(pb::CorrectionFailed {
            attempts: *attempts,
            tool: tool.clone(),
            error: error.clone(),
            message: message.clone(),
        }),
    };
    pb::AttachResponse {
        seq: e.seq,
        at_ms: e.at_ms,
        event: Some(ev),
    }
}

/// What a restore from the checkpoints did.
pub fn code_rewound(
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
pub fn checkpoint_turns(turns: &[crate::checkpoints::TurnCheckpoint]) -> Vec<pb::CheckpointTurn> {
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

/// What happened to a plan, as the event that says so.
fn plan_event(change: &PlanEvent, p: &Plan) -> pb::attach_response::Event {
    use pb::attach_response::Event as E;
    let wire = Some(plan(p));
    match change {
        PlanEvent::Generated => E::PlanGenerated(pb::PlanGenerated { plan: wire }),
        PlanEvent::Confirmed { mode: m, edited } => E::PlanConfirmed(pb::PlanConfirmed {
            plan: wire,
            mode: mode(*m) as i32,
            edited: *edited,
        }),
        PlanEvent::Rejected { feedback } => E::PlanRejected(pb::PlanRejected {
            plan: wire,
            feedback: feedback.clone(),
        }),
        PlanEvent::Step(c) => {
            let step = pb::PlanStepChanged {
                step_id: c.step_id.clone(),
                note: c.note.clone().unwrap_or_default(),
                plan: wire,
            };
            match c.to {
                StepStatus::InProgress => E::PlanStepStarted(step),
                StepStatus::Completed => E::PlanStepCompleted(step),
                StepStatus::Failed => E::PlanStepFailed(step),
                // A step never goes back to pending; were it to, it would
                // be reported as skipped work rather than not at all.
                StepStatus::Skipped | StepStatus::Pending => E::PlanStepSkipped(step),
            }
        }
    }
}

/// A conversation from an export, validated. Conversations exported
/// mid-turn come back at rest (Idle): the work in flight belonged to the
/// daemon that exported them.
pub fn exported_from(
    e: &pb::ExportedConversation,
) -> Result<(ConversationRecord, Vec<Message>), Status> {
    let c = e
        .conversation
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("exported conversation without its record"))?;
    let id = ulid::Ulid::from_string(&c.id)
        .map_err(|err| {
            Status::invalid_argument(format!("invalid conversation id {:?}: {err}", brief(&c.id)))
        })?
        .to_string();
    let mut messages = Vec::with_capacity(e.messages.len());
    for (i, m) in e.messages.iter().enumerate() {
        if m.seq != i as u64 + 1 {
            return Err(Status::invalid_argument(format!(
                "conversation {id}: message {} is out of sequence (expected {})",
                m.seq,
                i + 1
            )));
        }
        messages.push(message_from(m)?);
    }
    let additional_dirs = c
        .additional_dirs
        .iter()
        .map(|d| {
            let path = std::path::PathBuf::from(d);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(Status::invalid_argument(format!(
                    "conversation {id}: additional directory {:?} is not an absolute path",
                    brief(d)
                )))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    for rule in &c.allow_rules {
        agentd_core::Rule::parse(rule, agentd_core::Action::Allow).map_err(|err| {
            Status::invalid_argument(format!("conversation {id}: rule {:?}: {err}", brief(rule)))
        })?;
    }
    let allow_rules = c.allow_rules.clone();
    let state = match c.state.as_ref() {
        Some(s) if s.kind == pb::StateKind::Error as i32 => ConvState::Error {
            message: s.error_message.clone(),
            kind: match pb::ErrorKind::try_from(s.error_kind) {
                Ok(pb::ErrorKind::Auth) => ErrorKind::Auth,
                Ok(pb::ErrorKind::RateLimit) => ErrorKind::RateLimit,
                Ok(pb::ErrorKind::Network) => ErrorKind::Network,
                Ok(pb::ErrorKind::InvalidRequest) => ErrorKind::InvalidRequest,
                Ok(pb::ErrorKind::ContextExhausted) => ErrorKind::ContextExhausted,
                Ok(pb::ErrorKind::Budget) => ErrorKind::Budget,
                _ => ErrorKind::Unknown,
            },
        },
        _ => ConvState::Idle,
    };
    let record = ConversationRecord {
        id,
        title: c.title.clone(),
        cwd: std::path::PathBuf::from(&c.cwd),
        model: c.model.clone(),
        created_at_ms: c.created_at_ms,
        updated_at_ms: c.updated_at_ms,
        state,
        mode: mode_from(c.mode)?,
        additional_dirs,
        allow_rules,
        // An export names its MCP servers but not their commands: an
        // imported conversation runs none of its own (a file should not
        // bring commands to run with it).
        mcp_servers: Vec::new(),
        message_count: messages.len() as u64,
        usage: c.usage.as_ref().map(usage_from).unwrap_or_default(),
        seq_reserved: 0,
        turns: 0,
        requests: Vec::new(),
        queued: Vec::new(),
        queued_next: 0,
        last_usage: Usage::default(),
        parent_id: non_empty(&c.parent_conversation_id),
        continued_as: non_empty(&c.continued_as),
        continued_automatically: false,
        hop: 0,
        continue_pending: false,
        pruned_through: 0,
        budget_raised: Default::default(),
        plan: None,
        sub_agent: None,
        sub_agents_usage: Usage::default(),
        sub_agents_cost_usd: 0.0,
        sub_agents_counted: Vec::new(),
        forked_from: non_empty(&c.forked_from),
        forked_at: c.forked_at_message,
        corrections: agentd_core::Corrections::default(),
    };
    Ok((record, messages))
}

/// A background shell as clients see it.
pub fn shell(r: &crate::shells::ShellRecord) -> pb::ShellInfo {
    use crate::shells::ShellStatus;
    let (status, exit_code) = match &r.status {
        ShellStatus::Running => (pb::ShellStatus::Running, 0),
        ShellStatus::Exited { code } => (pb::ShellStatus::Exited, *code),
        ShellStatus::Killed => (pb::ShellStatus::Killed, 0),
        ShellStatus::Lost => (pb::ShellStatus::Lost, 0),
    };
    pb::ShellInfo {
        id: r.id.clone(),
        conversation_id: r.conversation_id.clone(),
        command: r.command.clone(),
        cwd: r.cwd.display().to_string(),
        pid: r.pid,
        started_at_ms: r.started_at_ms,
        status: status as i32,
        exit_code,
        output_bytes: r.output_bytes,
        ended_at_ms: r.ended_at_ms.unwrap_or(0),
    }
}

/// The one mapping from shell errors to gRPC statuses.
pub fn shell_status(e: crate::shells::ShellError) -> Status {
    use crate::shells::ShellError;
    match e {
        ShellError::NotFound(_) => Status::not_found(e.to_string()),
        ShellError::Limit(_) => Status::resource_exhausted(e.to_string()),
        ShellError::Spawn(_) | ShellError::Io(_) => Status::internal(e.to_string()),
    }
}

/// An MCP server a client gives a new conversation, checked.
pub fn mcp_server_from(s: &pb::McpServer) -> Result<crate::mcp::ServerSpec, Status> {
    use crate::mcp::{ServerSpec, Transport};
    let transport = match (s.command.is_empty(), s.url.is_empty()) {
        (false, true) => {
            if !s.headers.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "MCP server {:?}: headers are for url servers",
                    brief(&s.name)
                )));
            }
            Transport::Stdio {
                command: s.command.clone(),
                args: s.args.clone(),
                env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            }
        }
        (true, false) => {
            if !s.args.is_empty() || !s.env.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "MCP server {:?}: args and env are for command servers",
                    brief(&s.name)
                )));
            }
            Transport::Http {
                url: s.url.clone(),
                headers: s
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }
        }
        _ => {
            return Err(Status::invalid_argument(format!(
                "MCP server {:?}: give exactly one of command and url",
                brief(&s.name)
            )));
        }
    };
    let spec = ServerSpec {
        name: s.name.clone(),
        transport,
        trust: false,
        timeout_ms: crate::mcp::DEFAULT_CALL_TIMEOUT_MS,
        startup_timeout_ms: crate::mcp::DEFAULT_STARTUP_TIMEOUT_MS,
    };
    spec.validate().map_err(Status::invalid_argument)?;
    Ok(spec)
}

/// The MCP servers as `agent mcp ls` shows them.
pub fn mcp_servers(
    list: Vec<crate::mcp::ServerInfo>,
    config: &[crate::mcp::ServerSpec],
) -> pb::ListMcpServersResponse {
    pb::ListMcpServersResponse {
        servers: list
            .into_iter()
            .map(|s| pb::McpServerStatus {
                source: if config.contains(&s.spec) {
                    "config"
                } else {
                    "conversation"
                }
                .to_string(),
                name: s.spec.name.clone(),
                transport: s.spec.transport_name().to_string(),
                target: s.spec.target(),
                cwd: s.cwd.map(|c| c.display().to_string()).unwrap_or_default(),
                state: s.state.as_str().to_string(),
                restarts: s.restarts,
                last_error: s.last_error.unwrap_or_default(),
                pid: s.pid.unwrap_or(0),
                trusted: s.spec.trust,
                tools: s
                    .tools
                    .into_iter()
                    .map(|t| pb::McpToolInfo {
                        name: t.name,
                        description: t.description,
                        read_only: t.read_only,
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_quoted_by_its_start_and_size() {
        assert_eq!(brief("01J2ABC"), "01J2ABC");
        let long = "é".repeat(100);
        let quoted = brief(&long);
        assert_eq!(quoted, format!("{}… (200 bytes)", "é".repeat(32)));
        let status = to_status(RuntimeError::NotFound("A".repeat(300_000)));
        assert_eq!(
            status.message(),
            format!("unknown conversation {}… (300000 bytes)", "A".repeat(64))
        );
        let long_message = bounded(tonic::Code::InvalidArgument, "x".repeat(5000));
        assert!(
            long_message.message().len() <= 1024,
            "{}",
            long_message.message().len()
        );
        assert!(long_message.message().ends_with("… (5000 bytes in all)"));
        let short = bounded(tonic::Code::Internal, "short".into());
        assert_eq!(
            (short.code(), short.message()),
            (tonic::Code::Internal, "short")
        );
    }
}
