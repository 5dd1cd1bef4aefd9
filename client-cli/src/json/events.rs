//! The attach stream's events as JSON (`agent run --json`, `agent attach
//! --json`): the variant's name, and a body per event type with the
//! proto's field names. Separate because the event oneof is half the wire.

use agent_proto::v1::{self as pb, attach_response::Event};
use serde_json::{Map, Value, json};

use super::{
    budget_stop, client_info, code_rewound, conversation_state, conversation_summary,
    decision_json, error_kind_json, instructions, message, mode_json, opt, permission_request,
    plan, queued_message, shell_info, sub_agent_ref, usage,
};

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
        Event::TodoUpdated(_) => "todo_updated",
    }
}

fn event_body(event: &Event) -> Value {
    match event {
        Event::Snapshot(s) => snapshot(s),
        Event::StateChanged(s) => json!({"state": opt(s.state.as_ref(), conversation_state)}),
        Event::MessageAppended(m) => json!({"message": opt(m.message.as_ref(), message)}),
        Event::TextDelta(d) => json!({"block_index": d.block_index, "text": d.text}),
        Event::ThinkingDelta(d) => json!({"block_index": d.block_index, "text": d.text}),
        Event::ToolCallBegin(t) => tool_call_begin(t),
        Event::ToolCallEnd(t) => tool_call_end(t),
        Event::PermissionRequested(p) => {
            json!({"request": opt(p.request.as_ref(), permission_request)})
        }
        Event::PermissionResolved(p) => permission_resolved(p),
        Event::UsageUpdated(u) => usage_updated(u),
        Event::Error(e) => json!({"message": e.message, "kind": error_kind_json(e.kind)}),
        Event::ClientAttached(c) => json!({"client": opt(c.client.as_ref(), client_info)}),
        Event::ClientDetached(c) => json!({"client": opt(c.client.as_ref(), client_info)}),
        Event::Retrying(r) => retrying(r),
        Event::Resumed(r) => json!({"after_seq": r.after_seq}),
        Event::ShellStarted(s) => json!({"shell": opt(s.shell.as_ref(), shell_info)}),
        Event::ShellExited(s) => json!({"shell": opt(s.shell.as_ref(), shell_info)}),
        Event::Notice(n) => notice(n),
        Event::ContextWarning(w) => context_warning(w),
        Event::ContinuationStarted(c) => continuation_started(c),
        Event::ContextExhausted(e) => json!({"summary": e.summary}),
        Event::ConversationContinued(c) => conversation_continued(c),
        Event::BudgetStopped(b) => json!({"stop": opt(b.stop.as_ref(), budget_stop)}),
        Event::BudgetResolved(b) => budget_resolved(b),
        Event::ReplyBegin(r) => json!({"attempt": r.attempt}),
        Event::InstructionsLoaded(i) => instructions(i),
        Event::HookRan(h) => hook_ran(h),
        Event::QueueChanged(q) => {
            json!({"queued": q.queued.iter().map(queued_message).collect::<Vec<_>>()})
        }
        Event::ToolOutputDelta(d) => tool_output_delta(d),
        Event::SettingsChanged(s) => settings_changed(s),
        Event::PlanGenerated(p) => json!({"plan": opt(p.plan.as_ref(), plan)}),
        Event::PlanConfirmed(p) => plan_confirmed(p),
        Event::PlanRejected(p) => plan_rejected(p),
        Event::PlanStepStarted(s)
        | Event::PlanStepCompleted(s)
        | Event::PlanStepFailed(s)
        | Event::PlanStepSkipped(s) => plan_step_changed(s),
        Event::PlanSuggested(s) => json!({"score": s.score, "cues": s.cues}),
        Event::SubAgentStarted(e) => json!({"sub_agent": opt(e.sub_agent.as_ref(), sub_agent_ref)}),
        Event::SubAgentStateChanged(e) => sub_agent_state_changed(e),
        Event::SubAgentToolCallBegin(t) | Event::SubAgentToolCallEnd(t) => sub_agent_tool_call(t),
        Event::SubAgentFinished(f) => sub_agent_finished(f),
        Event::CodeRewound(c) => code_rewound(c),
        Event::ConversationForked(f) => conversation_forked(f),
        Event::CorrectionAttempt(c) => correction_attempt(c),
        Event::CorrectionSuccess(c) => json!({"attempts": c.attempts, "tool": c.tool}),
        Event::CorrectionFailed(c) => correction_failed(c),
        Event::TodoUpdated(t) => json!({"plan": opt(t.plan.as_ref(), plan)}),
    }
}

// The bodies of the events that carry more than a field or two, one
// function each, in the order of the proto's oneof.

/// The generic notice: its sentence, and for programs its name, severity
/// and fields (`null` from a daemon that sends none), whatever the kind.
fn notice(n: &pb::Notice) -> Value {
    let severity = pb::NoticeSeverity::try_from(n.severity).ok();
    json!({
        "message": n.message,
        "kind": n.kind,
        "severity": super::enum_json(
            n.severity,
            severity.map(|s| s.as_str_name()),
            "NOTICE_SEVERITY_"
        ),
        "details": serde_json::from_str::<Value>(&n.details_json).unwrap_or(Value::Null),
    })
}

fn snapshot(s: &pb::Snapshot) -> Value {
    json!({
        "conversation": opt(s.conversation.as_ref(), conversation_summary),
        "messages": s.messages.iter().map(message).collect::<Vec<_>>(),
        "partial_reply": opt(s.partial_reply.as_ref(), message),
        "pending_permission": opt(s.pending_permission.as_ref(), permission_request),
        "clients": s.clients.iter().map(client_info).collect::<Vec<_>>(),
        "your_client_id": s.your_client_id,
        "plan": opt(s.plan.as_ref(), plan),
    })
}

fn tool_call_begin(t: &pb::ToolCallBegin) -> Value {
    json!({
        "tool_use_id": t.tool_use_id,
        "tool_name": t.tool_name,
        "summary": t.summary,
        "input_json": t.input_json,
    })
}

fn tool_call_end(t: &pb::ToolCallEnd) -> Value {
    json!({
        "tool_use_id": t.tool_use_id,
        "tool_name": t.tool_name,
        "is_error": t.is_error,
        "summary": t.summary,
        "diff": t.diff,
        "duration_ms": t.duration_ms,
        "output_head": t.output_head,
        "output_tail": t.output_tail,
        "output_lines": t.output_lines,
    })
}

fn permission_resolved(p: &pb::PermissionResolved) -> Value {
    json!({
        "request_id": p.request_id,
        "decision": decision_json(p.decision),
        "client_id": p.client_id,
        "client_name": p.client_name,
    })
}

fn usage_updated(u: &pb::UsageUpdated) -> Value {
    json!({
        "last": opt(u.last.as_ref(), usage),
        "total": opt(u.total.as_ref(), usage),
        "cost_usd": u.cost_usd,
    })
}

fn retrying(r: &pb::Retrying) -> Value {
    json!({
        "attempt": r.attempt,
        "max_attempts": r.max_attempts,
        "delay_ms": r.delay_ms,
        "reason": r.reason,
    })
}

fn context_warning(w: &pb::ContextWarning) -> Value {
    json!({
        "used_tokens": w.used_tokens,
        "context_window": w.context_window,
    })
}

fn continuation_started(c: &pb::ContinuationStarted) -> Value {
    json!({
        "rejected_tools": c.rejected_tools,
        "manual": c.manual,
    })
}

fn conversation_continued(c: &pb::ConversationContinued) -> Value {
    json!({
        "conversation_id": c.conversation_id,
        "hop": c.hop,
        "automatic": c.automatic,
    })
}

fn budget_resolved(b: &pb::BudgetResolved) -> Value {
    json!({
        "stop": opt(b.stop.as_ref(), budget_stop),
        "raised": b.raised,
        "raised_by": b.raised_by,
        "by": opt(b.by.as_ref(), client_info),
    })
}

fn hook_ran(h: &pb::HookRan) -> Value {
    json!({
        "stage": h.stage,
        "command": h.command,
        "decision": h.decision,
        "duration_ms": h.duration_ms,
        "error": h.error,
    })
}

fn tool_output_delta(d: &pb::ToolOutputDelta) -> Value {
    json!({
        "tool_use_id": d.tool_use_id,
        "text": d.text,
        "skipped_bytes": d.skipped_bytes,
    })
}

fn settings_changed(s: &pb::SettingsChanged) -> Value {
    json!({
        "mode": mode_json(s.mode),
        "model": s.model,
        "context_window": s.context_window,
        "additional_dirs": s.additional_dirs,
        "by": s.by,
    })
}

fn plan_confirmed(p: &pb::PlanConfirmed) -> Value {
    json!({
        "plan": opt(p.plan.as_ref(), plan),
        "mode": mode_json(p.mode),
        "edited": p.edited,
    })
}

fn plan_rejected(p: &pb::PlanRejected) -> Value {
    json!({
        "plan": opt(p.plan.as_ref(), plan),
        "feedback": p.feedback,
    })
}

fn plan_step_changed(s: &pb::PlanStepChanged) -> Value {
    json!({
        "step_id": s.step_id,
        "note": s.note,
        "plan": opt(s.plan.as_ref(), plan),
    })
}

fn sub_agent_state_changed(e: &pb::SubAgentStateChanged) -> Value {
    json!({
        "sub_agent": opt(e.sub_agent.as_ref(), sub_agent_ref),
        "state": opt(e.state.as_ref(), conversation_state),
    })
}

fn sub_agent_tool_call(t: &pb::SubAgentToolCall) -> Value {
    json!({
        "sub_agent": opt(t.sub_agent.as_ref(), sub_agent_ref),
        "tool_use_id": t.tool_use_id,
        "tool_name": t.tool_name,
        "summary": t.summary,
        "is_error": t.is_error,
        "duration_ms": t.duration_ms,
    })
}

fn sub_agent_finished(f: &pb::SubAgentFinished) -> Value {
    json!({
        "sub_agent": opt(f.sub_agent.as_ref(), sub_agent_ref),
        "success": f.success,
        "summary": f.summary,
        "usage": opt(f.usage.as_ref(), usage),
        "cost_usd": f.cost_usd,
    })
}

fn conversation_forked(f: &pb::ConversationForked) -> Value {
    json!({
        "message_seq": f.message_seq,
        "forked_conversation_id": f.forked_conversation_id,
    })
}

fn correction_attempt(c: &pb::CorrectionAttempt) -> Value {
    json!({
        "attempt": c.attempt,
        "max_attempts": c.max_attempts,
        "tool": c.tool,
        "error": c.error,
        "fallback_request": c.fallback_request,
        "fallback_tools": c.fallback_tools,
    })
}

fn correction_failed(c: &pb::CorrectionFailed) -> Value {
    json!({
        "attempts": c.attempts,
        "tool": c.tool,
        "error": c.error,
        "message": c.message,
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

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::PermissionDecision;

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

    #[test]
    fn a_notice_passes_its_kind_and_details_through() {
        let ev = pb::AttachResponse {
            seq: 3,
            at_ms: 4,
            event: Some(Event::Notice(pb::Notice {
                message: "the cache is cold".into(),
                kind: "cache_cold".into(),
                severity: pb::NoticeSeverity::Warning as i32,
                details_json: r#"{"input_tokens":12}"#.into(),
            })),
        };
        assert_eq!(
            event(&ev)["notice"],
            json!({"message": "the cache is cold", "kind": "cache_cold",
                   "severity": "warning", "details": {"input_tokens": 12}})
        );
        let old = pb::AttachResponse {
            event: Some(Event::Notice(pb::Notice {
                message: "from an older daemon".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(
            event(&old)["notice"],
            json!({"message": "from an older daemon", "kind": "",
                   "severity": "unspecified", "details": null})
        );
    }
}
