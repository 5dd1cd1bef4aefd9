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
//!
//! The writers of the plain wire types are here; `events` writes the attach
//! stream's events and `read` reads an export back.

use agent_proto::v1::{
    self as pb, ErrorKind, PermissionDecision, PermissionMode, Role, RuleScope, ShellStatus,
    StateKind, content_block::Block,
};
use base64::Engine as _;
use serde_json::{Value, json};

mod events;
mod read;

pub use events::{event, event_type};
pub use read::read_exported_conversation;

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
        "usage_by_model": c.usage_by_model.iter().map(|m| json!({
            "model": m.model,
            "usage": opt(m.usage.as_ref(), usage),
            "cost_usd": m.cost_usd,
        })).collect::<Vec<_>>(),
        "archived": c.archived,
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
        Some(Block::Thinking(t)) if !t.redacted_data.is_empty() => json!({
            "type": "thinking", "thinking": t.thinking, "redacted_data": t.redacted_data,
        }),
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
        Some(Block::ServerTool(s)) => {
            json!({"type": "server_tool", "json": s.json, "summary": s.summary})
        }
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
        "environment": opt(r.environment.as_ref(), environment_origin),
    })
}

/// Where a conversation's environment came from (null: the daemon's).
fn environment_origin(o: &pb::EnvironmentOrigin) -> Value {
    json!({
        "set_at_ms": o.set_at_ms,
        "variables": o.variables,
        "held": o.held,
        "missing": o.missing,
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

/// The answer to `AnswerPermissionRequest`, for `agent answer --json`.
pub fn answer(decision: i32, scope: i32) -> Value {
    json!({"answered": true, "decision": decision_json(decision), "scope": scope_json(scope)})
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
                            redacted_data: String::new(),
                        })),
                        block(Block::Text(pb::TextBlock { text: "ok".into() })),
                        block(Block::ToolUse(pb::ToolUseBlock {
                            id: "toolu_1".into(),
                            name: "bash".into(),
                            input_json: "{\"command\": \"ls\"}".into(),
                            ..Default::default()
                        })),
                        block(Block::Thinking(pb::ThinkingBlock {
                            thinking: "[redacted reasoning]".into(),
                            signature: String::new(),
                            redacted_data: "EmwKAhgB+/==".into(),
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
}
