//! A hand-written JSON mapping of the wire types the client prints, and the
//! inverse for the ones it reads back (`agent import`).
//!
//! The shape follows the proto: field names as in the `.proto` file
//! (snake_case), every field present (defaults included), 64-bit integers as
//! JSON numbers, enums as the lowercase value name without the enum prefix
//! (`STATE_KIND_AWAITING_PERMISSION` → `"awaiting_permission"`), unset
//! message fields as `null`. A `oneof` is an object with a `"type"` naming the
//! variant. The readers are lenient where it is harmless: missing fields take
//! their proto default, integers may be strings, enums may be full names or
//! numbers.

use agent_proto::v1::{
    self as pb, ErrorKind, PermissionDecision, PermissionMode, Role, RuleScope, ShellStatus,
    StateKind, attach_response::Event, content_block::Block,
};
use base64::Engine as _;
use serde_json::{Map, Value, json};

/// A JSON document that does not describe the expected wire type.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}")]
pub struct JsonError {
    /// Where in the document (`conversation.state.kind`).
    pub path: String,
    pub what: String,
}

// ---------------------------------------------------------------------------
// Enums

fn enum_json(value: i32, full_name: Option<&str>, prefix: &str) -> Value {
    match full_name.and_then(|n| n.strip_prefix(prefix)) {
        Some(short) => Value::String(short.to_lowercase()),
        None => Value::from(value),
    }
}

/// The lowercase short name of a state (`"awaiting_permission"`).
pub fn state_kind_name(kind: i32) -> Value {
    enum_json(
        kind,
        StateKind::try_from(kind).ok().map(|k| k.as_str_name()),
        "STATE_KIND_",
    )
}

fn error_kind_json(kind: i32) -> Value {
    enum_json(
        kind,
        ErrorKind::try_from(kind).ok().map(|k| k.as_str_name()),
        "ERROR_KIND_",
    )
}

fn mode_json(mode: i32) -> Value {
    enum_json(
        mode,
        PermissionMode::try_from(mode).ok().map(|k| k.as_str_name()),
        "PERMISSION_MODE_",
    )
}

fn role_json(role: i32) -> Value {
    enum_json(
        role,
        Role::try_from(role).ok().map(|k| k.as_str_name()),
        "ROLE_",
    )
}

fn decision_json(decision: i32) -> Value {
    enum_json(
        decision,
        PermissionDecision::try_from(decision)
            .ok()
            .map(|k| k.as_str_name()),
        "PERMISSION_DECISION_",
    )
}

fn scope_json(scope: i32) -> Value {
    enum_json(
        scope,
        RuleScope::try_from(scope).ok().map(|k| k.as_str_name()),
        "RULE_SCOPE_",
    )
}

fn shell_status_json(status: i32) -> Value {
    enum_json(
        status,
        ShellStatus::try_from(status).ok().map(|k| k.as_str_name()),
        "SHELL_STATUS_",
    )
}

// ---------------------------------------------------------------------------
// Writers

/// Token usage.
pub fn usage(u: &pb::Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
    })
}

fn opt<T>(v: Option<&T>, f: impl Fn(&T) -> Value) -> Value {
    v.map_or(Value::Null, f)
}

/// A conversation's state.
pub fn conversation_state(s: &pb::ConversationState) -> Value {
    json!({
        "kind": state_kind_name(s.kind),
        "attempt": s.attempt,
        "max_attempts": s.max_attempts,
        "retry_in_ms": s.retry_in_ms,
        "error_message": s.error_message,
        "error_kind": error_kind_json(s.error_kind),
        "running_tool_ids": s.running_tool_ids,
        "pending_tool_ids": s.pending_tool_ids,
        "iteration": s.iteration,
    })
}

/// A conversation without its messages.
pub fn conversation_summary(c: &pb::ConversationSummary) -> Value {
    json!({
        "id": c.id,
        "title": c.title,
        "cwd": c.cwd,
        "model": c.model,
        "state": opt(c.state.as_ref(), conversation_state),
        "created_at_ms": c.created_at_ms,
        "updated_at_ms": c.updated_at_ms,
        "message_count": c.message_count,
        "mode": mode_json(c.mode),
        "forked_from": c.forked_from,
        "forked_at_message": c.forked_at_message,
        "usage": opt(c.usage.as_ref(), usage),
        "last_seq": c.last_seq,
        "additional_dirs": c.additional_dirs,
        "allow_rules": c.allow_rules,
        "mcp_servers": c.mcp_servers,
        "turn": c.turn,
        "cost_usd": c.cost_usd,
        "context_window": c.context_window,
        "queued": c.queued.iter().map(queued_message).collect::<Vec<_>>(),
        "parent_conversation_id": c.parent_conversation_id,
        "continued_as": c.continued_as,
        "context_warning": c.context_warning,
        "context_tokens": c.context_tokens,
        "budget_stop": opt(c.budget_stop.as_ref(), budget_stop),
        "continuing": c.continuing,
        "sub_agent_parent_id": c.sub_agent_parent_id,
        "user_initiated": c.user_initiated,
        "agent_id": c.agent_id,
        "sub_agents_usage": opt(c.sub_agents_usage.as_ref(), usage),
        "sub_agents_cost_usd": c.sub_agents_cost_usd,
    })
}

/// A reached budget (amounts in micro-dollars or tokens, see `usd`).
pub fn budget_stop(b: &pb::BudgetStop) -> Value {
    json!({
        "budget": b.budget,
        "usd": b.usd,
        "limit": b.limit,
        "spent": b.spent,
        "raise_by": b.raise_by,
        "text": b.text,
    })
}

/// A budget and where spending stands (amounts as in `budget_stop`).
pub fn budget_status(b: &pb::BudgetStatus) -> Value {
    json!({
        "budget": b.budget,
        "usd": b.usd,
        "limit": b.limit,
        "spent": b.spent,
        "raised": b.raised,
    })
}

/// A queued user message.
pub fn queued_message(q: &pb::QueuedMessage) -> Value {
    json!({
        "id": q.id,
        "text": q.text,
        "at_ms": q.at_ms,
        "from": opt(q.from.as_ref(), client_info),
        "images": q.images.iter().map(image).collect::<Vec<_>>(),
    })
}

/// An image's description (no bytes), with the line people see.
pub fn image(i: &pb::ImageBlock) -> Value {
    json!({
        "type": "image",
        "media_type": i.media_type,
        "size": i.size,
        "sha256": i.sha256,
        "width": i.width,
        "height": i.height,
        "description": crate::render::image_description(i),
    })
}

/// An image of an export: its description and its bytes, base64.
fn exported_image(i: &pb::ImageBlock) -> Value {
    let mut v = image(i);
    v["data_base64"] = Value::String(base64::engine::general_purpose::STANDARD.encode(&i.data));
    v
}

/// One content block.
pub fn content_block(b: &pb::ContentBlock) -> Value {
    match &b.block {
        None => json!({}),
        Some(Block::Text(t)) => json!({"type": "text", "text": t.text}),
        Some(Block::Thinking(t)) => {
            json!({"type": "thinking", "thinking": t.thinking, "signature": t.signature})
        }
        Some(Block::ToolUse(t)) => json!({
            "type": "tool_use", "id": t.id, "name": t.name, "input_json": t.input_json,
        }),
        Some(Block::ToolResult(t)) => {
            let mut v = json!({
                "type": "tool_result",
                "tool_use_id": t.tool_use_id,
                "content": t.content,
                "is_error": t.is_error,
            });
            if !t.images.is_empty() {
                v["images"] = t.images.iter().map(image).collect();
            }
            v
        }
        Some(Block::Image(i)) => image(i),
    }
}

/// One transcript message.
pub fn message(m: &pb::Message) -> Value {
    json!({
        "seq": m.seq,
        "role": role_json(m.role),
        "content": m.content.iter().map(content_block).collect::<Vec<_>>(),
        "created_at_ms": m.created_at_ms,
        "usage": opt(m.usage.as_ref(), usage),
        "stop_reason": m.stop_reason,
        "interrupted": m.interrupted,
        "kind": message_kind_json(m.kind),
    })
}

/// A message's kind: "ordinary", "continuation" or "continued".
fn message_kind_json(kind: i32) -> &'static str {
    match pb::MessageKind::try_from(kind) {
        Ok(pb::MessageKind::Continuation) => "continuation",
        Ok(pb::MessageKind::Continued) => "continued",
        Ok(pb::MessageKind::Ordinary) | Err(_) => "ordinary",
    }
}

/// A pending permission request.
pub fn permission_request(r: &pb::PermissionRequest) -> Value {
    json!({
        "request_id": r.request_id,
        "tool_name": r.tool_name,
        "tool_use_id": r.tool_use_id,
        "input_json": r.input_json,
        "summary": r.summary,
        "diff": r.diff,
        "options": r.options.iter().map(|o| decision_json(*o)).collect::<Vec<_>>(),
        "reason": r.reason,
        "suggested_rule": r.suggested_rule,
        "plan": opt(r.plan.as_ref(), plan),
        "sub_agent_conversation_id": r.sub_agent_conversation_id,
        "sub_agent_id": r.sub_agent_id,
        "sub_agent_description": r.sub_agent_description,
    })
}

/// A background shell.
pub fn shell_info(s: &pb::ShellInfo) -> Value {
    json!({
        "id": s.id,
        "conversation_id": s.conversation_id,
        "command": s.command,
        "cwd": s.cwd,
        "pid": s.pid,
        "started_at_ms": s.started_at_ms,
        "status": shell_status_json(s.status),
        "exit_code": s.exit_code,
        "output_bytes": s.output_bytes,
        "ended_at_ms": s.ended_at_ms,
    })
}

/// An attached client.
pub fn client_info(c: &pb::ClientInfo) -> Value {
    json!({"client_id": c.client_id, "name": c.name})
}

/// A conversation with its transcript, as `agent show --json` prints it.
pub fn get_conversation_response(r: &pb::GetConversationResponse) -> Value {
    json!({
        "conversation": opt(r.conversation.as_ref(), conversation_summary),
        "messages": r.messages.iter().map(message).collect::<Vec<_>>(),
        "pending_permission": opt(r.pending_permission.as_ref(), permission_request),
        "instructions": opt(r.instructions.as_ref(), instructions),
        "plan": opt(r.plan.as_ref(), plan),
        "checkpoints": r.checkpoints.iter().map(checkpoint_turn).collect::<Vec<_>>(),
    })
}

/// A chunk of shell output; the bytes as (lossy) UTF-8 text.
pub fn shell_output(r: &pb::ReadShellOutputResponse) -> Value {
    json!({
        "offset": r.offset,
        "data": String::from_utf8_lossy(&r.data),
        "finished": opt(r.finished.as_ref(), shell_info),
    })
}

/// An exported conversation (one line of `agent export`).
pub fn exported_conversation(e: &pb::ExportedConversation) -> Value {
    json!({
        "conversation": opt(e.conversation.as_ref(), conversation_summary),
        "messages": e.messages.iter().map(message).collect::<Vec<_>>(),
        "images": e.images.iter().map(exported_image).collect::<Vec<_>>(),
    })
}

/// The name of an event's variant (`"text_delta"`), as in the proto's oneof.
pub fn event_type(event: &Event) -> &'static str {
    match event {
        Event::Snapshot(_) => "snapshot",
        Event::StateChanged(_) => "state_changed",
        Event::MessageAppended(_) => "message_appended",
        Event::TextDelta(_) => "text_delta",
        Event::ThinkingDelta(_) => "thinking_delta",
        Event::ToolCallBegin(_) => "tool_call_begin",
        Event::ToolCallEnd(_) => "tool_call_end",
        Event::PermissionRequested(_) => "permission_requested",
        Event::PermissionResolved(_) => "permission_resolved",
        Event::UsageUpdated(_) => "usage_updated",
        Event::Error(_) => "error",
        Event::ClientAttached(_) => "client_attached",
        Event::ClientDetached(_) => "client_detached",
        Event::Retrying(_) => "retrying",
        Event::Resumed(_) => "resumed",
        Event::ShellStarted(_) => "shell_started",
        Event::ShellExited(_) => "shell_exited",
        Event::Notice(_) => "notice",
        Event::ReplyBegin(_) => "reply_begin",
        Event::InstructionsLoaded(_) => "instructions_loaded",
        Event::HookRan(_) => "hook_ran",
        Event::QueueChanged(_) => "queue_changed",
        Event::ToolOutputDelta(_) => "tool_output_delta",
        Event::SettingsChanged(_) => "settings_changed",
        Event::ContextWarning(_) => "context_warning",
        Event::ContinuationStarted(_) => "continuation_started",
        Event::ContextExhausted(_) => "context_exhausted",
        Event::ConversationContinued(_) => "conversation_continued",
        Event::BudgetStopped(_) => "budget_stopped",
        Event::BudgetResolved(_) => "budget_resolved",
        Event::PlanGenerated(_) => "plan_generated",
        Event::PlanConfirmed(_) => "plan_confirmed",
        Event::PlanRejected(_) => "plan_rejected",
        Event::PlanStepStarted(_) => "plan_step_started",
        Event::PlanStepCompleted(_) => "plan_step_completed",
        Event::PlanStepFailed(_) => "plan_step_failed",
        Event::PlanStepSkipped(_) => "plan_step_skipped",
        Event::PlanSuggested(_) => "plan_suggested",
        Event::SubAgentStarted(_) => "sub_agent_started",
        Event::SubAgentStateChanged(_) => "sub_agent_state_changed",
        Event::SubAgentToolCallBegin(_) => "sub_agent_tool_call_begin",
        Event::SubAgentToolCallEnd(_) => "sub_agent_tool_call_end",
        Event::SubAgentFinished(_) => "sub_agent_finished",
        Event::CodeRewound(_) => "code_rewound",
        Event::ConversationForked(_) => "conversation_forked",
        Event::CorrectionAttempt(_) => "correction_attempt",
        Event::CorrectionSuccess(_) => "correction_success",
        Event::CorrectionFailed(_) => "correction_failed",
    }
}

fn event_body(event: &Event) -> Value {
    match event {
        Event::Snapshot(s) => json!({
            "conversation": opt(s.conversation.as_ref(), conversation_summary),
            "messages": s.messages.iter().map(message).collect::<Vec<_>>(),
            "partial_reply": opt(s.partial_reply.as_ref(), message),
            "pending_permission": opt(s.pending_permission.as_ref(), permission_request),
            "clients": s.clients.iter().map(client_info).collect::<Vec<_>>(),
            "your_client_id": s.your_client_id,
            "plan": opt(s.plan.as_ref(), plan),
        }),
        Event::StateChanged(s) => json!({"state": opt(s.state.as_ref(), conversation_state)}),
        Event::MessageAppended(m) => json!({"message": opt(m.message.as_ref(), message)}),
        Event::TextDelta(d) => json!({"block_index": d.block_index, "text": d.text}),
        Event::ThinkingDelta(d) => json!({"block_index": d.block_index, "text": d.text}),
        Event::ToolCallBegin(t) => json!({
            "tool_use_id": t.tool_use_id,
            "tool_name": t.tool_name,
            "summary": t.summary,
            "input_json": t.input_json,
        }),
        Event::ToolCallEnd(t) => json!({
            "tool_use_id": t.tool_use_id,
            "tool_name": t.tool_name,
            "is_error": t.is_error,
            "summary": t.summary,
            "diff": t.diff,
            "duration_ms": t.duration_ms,
            "output_head": t.output_head,
            "output_tail": t.output_tail,
            "output_lines": t.output_lines,
        }),
        Event::PermissionRequested(p) => {
            json!({"request": opt(p.request.as_ref(), permission_request)})
        }
        Event::PermissionResolved(p) => json!({
            "request_id": p.request_id,
            "decision": decision_json(p.decision),
            "client_id": p.client_id,
            "client_name": p.client_name,
        }),
        Event::UsageUpdated(u) => json!({
            "last": opt(u.last.as_ref(), usage),
            "total": opt(u.total.as_ref(), usage),
            "cost_usd": u.cost_usd,
        }),
        Event::Error(e) => json!({"message": e.message, "kind": error_kind_json(e.kind)}),
        Event::ClientAttached(c) => json!({"client": opt(c.client.as_ref(), client_info)}),
        Event::ClientDetached(c) => json!({"client": opt(c.client.as_ref(), client_info)}),
        Event::Retrying(r) => json!({
            "attempt": r.attempt,
            "max_attempts": r.max_attempts,
            "delay_ms": r.delay_ms,
            "reason": r.reason,
        }),
        Event::Resumed(r) => json!({"after_seq": r.after_seq}),
        Event::ShellStarted(s) => json!({"shell": opt(s.shell.as_ref(), shell_info)}),
        Event::ShellExited(s) => json!({"shell": opt(s.shell.as_ref(), shell_info)}),
        Event::Notice(n) => json!({"message": n.message}),
        Event::ContextWarning(w) => json!({
            "used_tokens": w.used_tokens,
            "context_window": w.context_window,
        }),
        Event::ContinuationStarted(c) => json!({
            "rejected_tools": c.rejected_tools,
            "manual": c.manual,
        }),
        Event::ContextExhausted(e) => json!({"summary": e.summary}),
        Event::ConversationContinued(c) => json!({
            "conversation_id": c.conversation_id,
            "hop": c.hop,
            "automatic": c.automatic,
        }),
        Event::BudgetStopped(b) => json!({"stop": opt(b.stop.as_ref(), budget_stop)}),
        Event::BudgetResolved(b) => json!({
            "stop": opt(b.stop.as_ref(), budget_stop),
            "raised": b.raised,
            "raised_by": b.raised_by,
            "by": opt(b.by.as_ref(), client_info),
        }),
        Event::ReplyBegin(r) => json!({"attempt": r.attempt}),
        Event::InstructionsLoaded(i) => instructions(i),
        Event::HookRan(h) => json!({
            "stage": h.stage,
            "command": h.command,
            "decision": h.decision,
            "duration_ms": h.duration_ms,
            "error": h.error,
        }),
        Event::QueueChanged(q) => {
            json!({"queued": q.queued.iter().map(queued_message).collect::<Vec<_>>()})
        }
        Event::ToolOutputDelta(d) => json!({
            "tool_use_id": d.tool_use_id,
            "text": d.text,
            "skipped_bytes": d.skipped_bytes,
        }),
        Event::SettingsChanged(s) => json!({
            "mode": mode_json(s.mode),
            "model": s.model,
            "context_window": s.context_window,
            "additional_dirs": s.additional_dirs,
            "by": s.by,
        }),
        Event::PlanGenerated(p) => json!({"plan": opt(p.plan.as_ref(), plan)}),
        Event::PlanConfirmed(p) => json!({
            "plan": opt(p.plan.as_ref(), plan),
            "mode": mode_json(p.mode),
            "edited": p.edited,
        }),
        Event::PlanRejected(p) => json!({
            "plan": opt(p.plan.as_ref(), plan),
            "feedback": p.feedback,
        }),
        Event::PlanStepStarted(s)
        | Event::PlanStepCompleted(s)
        | Event::PlanStepFailed(s)
        | Event::PlanStepSkipped(s) => json!({
            "step_id": s.step_id,
            "note": s.note,
            "plan": opt(s.plan.as_ref(), plan),
        }),
        Event::PlanSuggested(s) => json!({"score": s.score, "cues": s.cues}),
        Event::SubAgentStarted(e) => json!({"sub_agent": opt(e.sub_agent.as_ref(), sub_agent_ref)}),
        Event::SubAgentStateChanged(e) => json!({
            "sub_agent": opt(e.sub_agent.as_ref(), sub_agent_ref),
            "state": opt(e.state.as_ref(), conversation_state),
        }),
        Event::SubAgentToolCallBegin(t) | Event::SubAgentToolCallEnd(t) => json!({
            "sub_agent": opt(t.sub_agent.as_ref(), sub_agent_ref),
            "tool_use_id": t.tool_use_id,
            "tool_name": t.tool_name,
            "summary": t.summary,
            "is_error": t.is_error,
            "duration_ms": t.duration_ms,
        }),
        Event::SubAgentFinished(f) => json!({
            "sub_agent": opt(f.sub_agent.as_ref(), sub_agent_ref),
            "success": f.success,
            "summary": f.summary,
            "usage": opt(f.usage.as_ref(), usage),
            "cost_usd": f.cost_usd,
        }),

        Event::CodeRewound(c) => code_rewound(c),
        Event::ConversationForked(f) => json!({
            "message_seq": f.message_seq,
            "forked_conversation_id": f.forked_conversation_id,
        }),

        Event::CorrectionAttempt(c) => json!({
            "attempt": c.attempt,
            "max_attempts": c.max_attempts,
            "tool": c.tool,
            "error": c.error,
            "fallback_request": c.fallback_request,
            "fallback_tools": c.fallback_tools,
        }),
        Event::CorrectionSuccess(c) => json!({"attempts": c.attempts, "tool": c.tool}),
        Event::CorrectionFailed(c) => json!({
            "attempts": c.attempts,
            "tool": c.tool,
            "error": c.error,
            "message": c.message,
        }),
    }
}

/// Which sub-agent an event is about.
pub fn sub_agent_ref(r: &pb::SubAgentRef) -> Value {
    json!({
        "conversation_id": r.conversation_id,
        "agent_id": r.agent_id,
        "description": r.description,
    })
}

/// Files a rewind (or a plan step's rollback) restored.
pub fn code_rewound(c: &pb::CodeRewound) -> Value {
    json!({
        "message_seq": c.message_seq,
        "restored": c.restored,
        "removed": c.removed,
        "skipped": c.skipped,
        "untracked_commands": c.untracked_commands,
        "plan_step_id": c.plan_step_id,
    })
}

/// What `Rewind` did.
pub fn rewind_response(r: &pb::RewindResponse) -> Value {
    json!({
        "message_seq": r.message_seq,
        "code": opt(r.code.as_ref(), code_rewound),
        "forked": opt(r.forked.as_ref(), conversation_summary),
    })
}

/// A turn that can be rewound.
pub fn checkpoint_turn(t: &pb::CheckpointTurn) -> Value {
    json!({
        "message_seq": t.message_seq,
        "tool_calls": t.tool_calls,
        "files": t.files,
        "untracked_commands": t.untracked_commands,
        "at_ms": t.at_ms,
    })
}

/// A plan and its steps' statuses.
pub fn plan(p: &pb::Plan) -> Value {
    json!({
        "intent": p.intent,
        "risk": p.risk,
        "estimate_secs": p.estimate_secs,
        "phase": p.phase,
        "tool_use_id": p.tool_use_id,
        "steps": p.steps.iter().map(|s| json!({
            "id": s.id,
            "title": s.title,
            "kind": s.kind,
            "files": s.files,
            "dependencies": s.dependencies,
            "status": s.status,
            "note": s.note,
            "estimate_secs": s.estimate_secs,
        })).collect::<Vec<_>>(),
    })
}

/// A usage report.
pub fn usage_report(r: &pb::GetUsageResponse) -> Value {
    let line = |l: &pb::UsageLine| {
        json!({
            "label": l.label,
            "model": l.model,
            "usage": opt(l.usage.as_ref(), usage),
            "cost_usd": l.cost_usd,
        })
    };
    json!({
        "lines": r.lines.iter().map(line).collect::<Vec<_>>(),
        "total": opt(r.total.as_ref(), line),
        "budgets": r.budgets.iter().map(budget_status).collect::<Vec<_>>(),
    })
}

/// Project instruction files.
pub fn instructions(i: &pb::Instructions) -> Value {
    json!({
        "files": i.files.iter().map(|f| json!({"path": f.path, "bytes": f.bytes})).collect::<Vec<_>>(),
        "truncated": i.truncated,
    })
}

/// One event of an attach stream:
/// `{"seq": 7, "at_ms": …, "type": "text_delta", "text_delta": {…}}`.
pub fn event(ev: &pb::AttachResponse) -> Value {
    let mut map = Map::new();
    map.insert("seq".into(), ev.seq.into());
    map.insert("at_ms".into(), ev.at_ms.into());
    match &ev.event {
        Some(e) => {
            let ty = event_type(e);
            map.insert("type".into(), ty.into());
            map.insert(ty.into(), event_body(e));
        }
        None => {
            map.insert("type".into(), Value::Null);
        }
    }
    Value::Object(map)
}

/// The answer to `AnswerPermissionRequest`, for `agent answer --json`.
pub fn answer(decision: i32, scope: i32) -> Value {
    json!({"answered": true, "decision": decision_json(decision), "scope": scope_json(scope)})
}

// ---------------------------------------------------------------------------
// Readers

/// A JSON object being read, with the path to it for error messages.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, path: &str) -> Result<Self, JsonError> {
        match value {
            Value::Object(map) => Ok(Obj {
                map,
                path: path.to_string(),
            }),
            other => Err(JsonError {
                path: display_path(path),
                what: format!("expected an object, found {}", kind_of(other)),
            }),
        }
    }

    fn sub(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn err(&self, key: &str, what: impl Into<String>) -> JsonError {
        JsonError {
            path: self.sub(key),
            what: what.into(),
        }
    }

    /// The field, with `null` read as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<String, JsonError> {
        match self.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => {
                Err(self.err(key, format!("expected a string, found {}", kind_of(other))))
            }
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, JsonError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => {
                Err(self.err(key, format!("expected a boolean, found {}", kind_of(other))))
            }
        }
    }

    fn int<T: TryFrom<i128>>(&self, key: &str) -> Result<T, JsonError> {
        let wide: i128 = match self.get(key) {
            None => 0,
            Some(Value::Number(n)) => {
                if let Some(u) = n.as_u64() {
                    i128::from(u)
                } else if let Some(i) = n.as_i64() {
                    i128::from(i)
                } else {
                    return Err(self.err(key, format!("expected an integer, found {n}")));
                }
            }
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map_err(|_| self.err(key, format!("expected an integer, found {s:?}")))?,
            Some(other) => {
                return Err(self.err(
                    key,
                    format!("expected an integer, found {}", kind_of(other)),
                ));
            }
        };
        T::try_from(wide).map_err(|_| self.err(key, format!("{wide} is out of range")))
    }

    fn enumeration(
        &self,
        key: &str,
        prefix: &str,
        from_name: fn(&str) -> Option<i32>,
    ) -> Result<i32, JsonError> {
        match self.get(key) {
            None => Ok(0),
            Some(Value::String(s)) => {
                let upper = s.trim().to_uppercase();
                let full = if upper.starts_with(prefix) {
                    upper
                } else {
                    format!("{prefix}{upper}")
                };
                from_name(&full).ok_or_else(|| self.err(key, format!("unknown value {s:?}")))
            }
            Some(Value::Number(_)) => self.int(key),
            Some(other) => Err(self.err(
                key,
                format!("expected an enum name, found {}", kind_of(other)),
            )),
        }
    }

    fn object(&self, key: &str) -> Result<Option<Obj<'a>>, JsonError> {
        self.get(key)
            .map(|v| Obj::new(v, &self.sub(key)))
            .transpose()
    }

    fn array(&self, key: &str) -> Result<&'a [Value], JsonError> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => {
                Err(self.err(key, format!("expected an array, found {}", kind_of(other))))
            }
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, JsonError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(JsonError {
                    path: format!("{}[{i}]", self.sub(key)),
                    what: format!("expected a string, found {}", kind_of(other)),
                }),
            })
            .collect()
    }

    fn objects<T>(
        &self,
        key: &str,
        read: impl Fn(&Obj<'a>) -> Result<T, JsonError>,
    ) -> Result<Vec<T>, JsonError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| read(&Obj::new(v, &format!("{}[{i}]", self.sub(key)))?))
            .collect()
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(top level)".to_string()
    } else {
        path.to_string()
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn read_usage(o: &Obj<'_>) -> Result<pb::Usage, JsonError> {
    Ok(pb::Usage {
        input_tokens: o.int("input_tokens")?,
        output_tokens: o.int("output_tokens")?,
        cache_creation_input_tokens: o.int("cache_creation_input_tokens")?,
        cache_read_input_tokens: o.int("cache_read_input_tokens")?,
    })
}

fn read_state(o: &Obj<'_>) -> Result<pb::ConversationState, JsonError> {
    Ok(pb::ConversationState {
        kind: o.enumeration("kind", "STATE_KIND_", |s| {
            StateKind::from_str_name(s).map(|k| k as i32)
        })?,
        attempt: o.int("attempt")?,
        max_attempts: o.int("max_attempts")?,
        retry_in_ms: o.int("retry_in_ms")?,
        error_message: o.string("error_message")?,
        error_kind: o.enumeration("error_kind", "ERROR_KIND_", |s| {
            ErrorKind::from_str_name(s).map(|k| k as i32)
        })?,
        running_tool_ids: o.strings("running_tool_ids")?,
        pending_tool_ids: o.strings("pending_tool_ids")?,
        iteration: o.int("iteration")?,
    })
}

fn read_summary(o: &Obj<'_>) -> Result<pb::ConversationSummary, JsonError> {
    Ok(pb::ConversationSummary {
        id: o.string("id")?,
        title: o.string("title")?,
        cwd: o.string("cwd")?,
        model: o.string("model")?,
        state: o.object("state")?.map(|s| read_state(&s)).transpose()?,
        created_at_ms: o.int("created_at_ms")?,
        updated_at_ms: o.int("updated_at_ms")?,
        message_count: o.int("message_count")?,
        mode: o.enumeration("mode", "PERMISSION_MODE_", |s| {
            PermissionMode::from_str_name(s).map(|k| k as i32)
        })?,
        usage: o.object("usage")?.map(|u| read_usage(&u)).transpose()?,
        last_seq: o.int("last_seq")?,
        additional_dirs: o.strings("additional_dirs")?,
        allow_rules: o.strings("allow_rules")?,
        mcp_servers: o.strings("mcp_servers")?,
        turn: o.int("turn")?,
        cost_usd: match o.get("cost_usd") {
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        },
        // What waits for a turn is not part of an export.
        queued: Vec::new(),
        context_window: o.int("context_window")?,
        parent_conversation_id: o.string("parent_conversation_id")?,
        forked_from: o.string("forked_from")?,
        forked_at_message: o.int("forked_at_message")?,
        continued_as: o.string("continued_as")?,
        context_warning: o.boolean("context_warning")?,
        context_tokens: o.int("context_tokens")?,
        // A budget's hold is not part of an export: the imported state is
        // the error it shows.
        budget_stop: None,
        continuing: o.boolean("continuing")?,
        sub_agent_parent_id: o.string("sub_agent_parent_id")?,
        // Exports written before sub-agents: a user's conversation.
        user_initiated: match o.get("user_initiated") {
            Some(Value::Bool(b)) => *b,
            _ => true,
        },
        agent_id: o.string("agent_id")?,
        sub_agents_usage: o
            .object("sub_agents_usage")?
            .map(|u| read_usage(&u))
            .transpose()?,
        sub_agents_cost_usd: match o.get("sub_agents_cost_usd") {
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        },
    })
}

fn read_block(o: &Obj<'_>) -> Result<pb::ContentBlock, JsonError> {
    let block = match o.get("type") {
        None => None,
        Some(Value::String(t)) => Some(match t.as_str() {
            "text" => Block::Text(pb::TextBlock {
                text: o.string("text")?,
            }),
            "thinking" => Block::Thinking(pb::ThinkingBlock {
                thinking: o.string("thinking")?,
                signature: o.string("signature")?,
            }),
            "tool_use" => Block::ToolUse(pb::ToolUseBlock {
                id: o.string("id")?,
                name: o.string("name")?,
                input_json: o.string("input_json")?,
            }),
            "tool_result" => Block::ToolResult(pb::ToolResultBlock {
                tool_use_id: o.string("tool_use_id")?,
                content: o.string("content")?,
                is_error: o.boolean("is_error")?,
                images: o.objects("images", read_image)?,
            }),
            "image" => Block::Image(read_image(o)?),
            other => return Err(o.err("type", format!("unknown content block type {other:?}"))),
        }),
        Some(other) => {
            return Err(o.err(
                "type",
                format!("expected a string, found {}", kind_of(other)),
            ));
        }
    };
    Ok(pb::ContentBlock { block })
}

fn read_image(o: &Obj<'_>) -> Result<pb::ImageBlock, JsonError> {
    let data = o.string("data_base64")?;
    Ok(pb::ImageBlock {
        media_type: o.string("media_type")?,
        size: o.int("size")?,
        sha256: o.string("sha256")?,
        width: o.int("width")?,
        height: o.int("height")?,
        data: base64::engine::general_purpose::STANDARD
            .decode(data.as_bytes())
            .map_err(|e| o.err("data_base64", format!("not base64: {e}")))?,
    })
}

fn read_message(o: &Obj<'_>) -> Result<pb::Message, JsonError> {
    Ok(pb::Message {
        seq: o.int("seq")?,
        role: o.enumeration("role", "ROLE_", |s| {
            Role::from_str_name(s).map(|k| k as i32)
        })?,
        content: o.objects("content", read_block)?,
        created_at_ms: o.int("created_at_ms")?,
        usage: o.object("usage")?.map(|u| read_usage(&u)).transpose()?,
        stop_reason: o.string("stop_reason")?,
        interrupted: o.boolean("interrupted")?,
        kind: o.enumeration("kind", "MESSAGE_KIND_", |s| {
            pb::MessageKind::from_str_name(s).map(|k| k as i32)
        })?,
    })
}

/// Reads one line of `agent export` back.
pub fn read_exported_conversation(value: &Value) -> Result<pb::ExportedConversation, JsonError> {
    let o = Obj::new(value, "")?;
    let conversation = o
        .object("conversation")?
        .map(|c| read_summary(&c))
        .transpose()?;
    if conversation.as_ref().is_none_or(|c| c.id.is_empty()) {
        return Err(o.err("conversation", "missing, or without an id"));
    }
    Ok(pb::ExportedConversation {
        conversation,
        messages: o.objects("messages", read_message)?,
        images: o.objects("images", read_image)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_n(n: u64) -> pb::Usage {
        pb::Usage {
            input_tokens: n,
            output_tokens: n + 1,
            cache_creation_input_tokens: n + 2,
            cache_read_input_tokens: n + 3,
        }
    }

    fn block(b: Block) -> pb::ContentBlock {
        pb::ContentBlock { block: Some(b) }
    }

    /// An export with every field set to something other than its default.
    pub(crate) fn rich_export() -> pb::ExportedConversation {
        pb::ExportedConversation {
            images: Vec::new(),
            conversation: Some(pb::ConversationSummary {
                id: "01JDXYZABCDEFGHJKMNPQRSTVW".into(),
                title: "fix the \"failing\" test ✓".into(),
                cwd: "/home/u/proj".into(),
                model: "claude-x".into(),
                state: Some(pb::ConversationState {
                    kind: StateKind::Error as i32,
                    attempt: 2,
                    max_attempts: 3,
                    retry_in_ms: 1200,
                    error_message: "bad key".into(),
                    error_kind: ErrorKind::Auth as i32,
                    running_tool_ids: vec!["t1".into()],
                    pending_tool_ids: vec!["t2".into(), "t3".into()],
                    iteration: 4,
                }),
                created_at_ms: 1_700_000_000_000,
                updated_at_ms: 1_700_000_000_500,
                message_count: 3,
                mode: PermissionMode::AcceptEdits as i32,
                usage: Some(usage_n(10)),
                last_seq: 99,
                additional_dirs: vec!["/home/u/shared".into()],
                allow_rules: vec!["bash(cargo test:*)".into()],
                parent_conversation_id: "01JD0000000000000000000000".into(),
                ..Default::default()
            }),
            messages: vec![
                pb::Message {
                    seq: 1,
                    role: Role::User as i32,
                    content: vec![block(Block::Text(pb::TextBlock {
                        text: "hi\nthere".into(),
                    }))],
                    created_at_ms: 1,
                    usage: None,
                    stop_reason: String::new(),
                    interrupted: false,
                    kind: pb::MessageKind::Continued as i32,
                },
                pb::Message {
                    seq: 2,
                    role: Role::Assistant as i32,
                    content: vec![
                        block(Block::Thinking(pb::ThinkingBlock {
                            thinking: "hmm".into(),
                            signature: "sig==".into(),
                        })),
                        block(Block::Text(pb::TextBlock { text: "ok".into() })),
                        block(Block::ToolUse(pb::ToolUseBlock {
                            id: "toolu_1".into(),
                            name: "bash".into(),
                            input_json: "{\"command\": \"ls\"}".into(),
                        })),
                        pb::ContentBlock { block: None },
                    ],
                    created_at_ms: 2,
                    usage: Some(usage_n(5)),
                    stop_reason: "tool_use".into(),
                    interrupted: true,
                    kind: pb::MessageKind::Continuation as i32,
                },
                pb::Message {
                    seq: 3,
                    role: Role::User as i32,
                    content: vec![block(Block::ToolResult(pb::ToolResultBlock {
                        images: Vec::new(),
                        tool_use_id: "toolu_1".into(),
                        content: "a\nb".into(),
                        is_error: true,
                    }))],
                    created_at_ms: -3,
                    usage: None,
                    stop_reason: String::new(),
                    interrupted: false,
                    kind: 0,
                },
            ],
        }
    }

    #[test]
    fn export_round_trips_through_json_text() {
        let original = rich_export();
        let line = exported_conversation(&original).to_string();
        assert!(!line.contains('\n'), "one export per line");
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(read_exported_conversation(&value).unwrap(), original);
        // Defaults round-trip too.
        let minimal = pb::ExportedConversation {
            images: Vec::new(),
            conversation: Some(pb::ConversationSummary {
                id: "x".into(),
                ..Default::default()
            }),
            messages: vec![pb::Message::default()],
        };
        let value = exported_conversation(&minimal);
        assert_eq!(read_exported_conversation(&value).unwrap(), minimal);
    }

    #[test]
    fn enums_are_short_lowercase_names() {
        let v = exported_conversation(&rich_export());
        assert_eq!(v["conversation"]["state"]["kind"], "error");
        assert_eq!(v["conversation"]["state"]["error_kind"], "auth");
        assert_eq!(v["conversation"]["mode"], "accept_edits");
        assert_eq!(v["messages"][0]["role"], "user");
        assert_eq!(v["messages"][1]["content"][2]["type"], "tool_use");
        assert_eq!(
            state_kind_name(StateKind::AwaitingPermission as i32),
            "awaiting_permission"
        );
        // Values this client does not know stay numbers.
        assert_eq!(state_kind_name(77), 77);
    }

    #[test]
    fn readers_are_lenient_where_harmless() {
        let v = json!({
            "conversation": {
                "id": "01A",
                "created_at_ms": "1700000000000",
                "state": {"kind": "STATE_KIND_IDLE"},
                "mode": 2,
            },
            "messages": [{"seq": "1", "role": "ROLE_ASSISTANT", "usage": null}],
        });
        let e = read_exported_conversation(&v).unwrap();
        let c = e.conversation.unwrap();
        assert_eq!(c.created_at_ms, 1_700_000_000_000);
        assert_eq!(c.state.unwrap().kind, StateKind::Idle as i32);
        assert_eq!(c.mode, PermissionMode::Default as i32);
        assert_eq!(e.messages[0].role, Role::Assistant as i32);
        assert_eq!(e.messages[0].usage, None);
    }

    #[test]
    fn readers_say_where_the_document_is_wrong() {
        let bad = |v: Value| read_exported_conversation(&v).unwrap_err().to_string();
        assert_eq!(
            bad(json!([])),
            "(top level): expected an object, found an array"
        );
        assert_eq!(bad(json!({})), "conversation: missing, or without an id");
        assert_eq!(
            bad(json!({"conversation": {"id": "x", "state": {"kind": "sleeping"}}})),
            "conversation.state.kind: unknown value \"sleeping\""
        );
        assert_eq!(
            bad(json!({"conversation": {"id": "x"}, "messages": [{"seq": -1}]})),
            "messages[0].seq: -1 is out of range"
        );
        assert_eq!(
            bad(
                json!({"conversation": {"id": "x"}, "messages": [{"content": [{"type": "video"}]}]})
            ),
            "messages[0].content[0].type: unknown content block type \"video\""
        );
    }

    #[test]
    fn events_name_their_variant() {
        let ev = pb::AttachResponse {
            seq: 7,
            at_ms: 8,
            event: Some(Event::TextDelta(pb::TextDelta {
                block_index: 1,
                text: "hé".into(),
            })),
        };
        assert_eq!(
            event(&ev),
            json!({"seq": 7, "at_ms": 8, "type": "text_delta",
                   "text_delta": {"block_index": 1, "text": "hé"}})
        );
        let ev = pb::AttachResponse {
            seq: 9,
            at_ms: 0,
            event: Some(Event::PermissionResolved(pb::PermissionResolved {
                request_id: "r1".into(),
                decision: PermissionDecision::DenyAndStop as i32,
                client_id: "c1".into(),
                client_name: "bob".into(),
                ..Default::default()
            })),
        };
        assert_eq!(
            event(&ev)["permission_resolved"]["decision"],
            "deny_and_stop"
        );
    }

    #[test]
    fn correction_events_are_named_with_their_fields() {
        let at = |event| pb::AttachResponse {
            seq: 3,
            at_ms: 4,
            event: Some(event),
        };
        let attempt = event(&at(Event::CorrectionAttempt(pb::CorrectionAttempt {
            attempt: 2,
            max_attempts: 3,
            tool: "edit".into(),
            error: "old_string was not found in a.txt".into(),
            fallback_request: "Write it whole.".into(),
            fallback_tools: vec!["write".into()],
        })));
        assert_eq!(
            attempt,
            json!({"seq": 3, "at_ms": 4, "type": "correction_attempt",
                   "correction_attempt": {"attempt": 2, "max_attempts": 3, "tool": "edit",
                       "error": "old_string was not found in a.txt",
                       "fallback_request": "Write it whole.", "fallback_tools": ["write"]}})
        );
        let success = event(&at(Event::CorrectionSuccess(pb::CorrectionSuccess {
            attempts: 1,
            tool: "write".into(),
        })));
        assert_eq!(success["type"], "correction_success");
        assert_eq!(
            success["correction_success"],
            json!({"attempts": 1, "tool": "write"})
        );
        let failed = event(&at(Event::CorrectionFailed(pb::CorrectionFailed {
            attempts: 3,
            tool: "edit".into(),
            error: "e".into(),
            message: "Self-correction stopped".into(),
        })));
        assert_eq!(failed["type"], "correction_failed");
        assert_eq!(
            failed["correction_failed"]["message"],
            "Self-correction stopped"
        );
    }
}
