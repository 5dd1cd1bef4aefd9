//! What the daemon's wire types mean in ACP, and back: modes, permission
//! options, tool calls, stop reasons, a transcript replayed as updates.
//! Pure functions, so every mapping is tested without a daemon or an editor.

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Diff, McpServer, PermissionOption, PermissionOptionKind,
    SessionMode, SessionModeState, SessionUpdate, StopReason, ToolCall, ToolCallContent,
    ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_proto::v1::{self as pb, PermissionDecision, PermissionMode, Role, content_block::Block};
use serde_json::Value;

/// A plan as an ACP plan: every step an entry, the whole list each time (the
/// editor replaces its plan with each update). ACP has no failed or skipped
/// status: such steps are completed entries that say so. The model's todo
/// list (phase `todo`) is sent the same way, its items of medium priority.
pub(super) fn plan(p: &pb::Plan) -> agent_client_protocol::v1::schema::Plan {
    use agent_client_protocol::v1::schema::{PlanEntry, PlanEntryPriority, PlanEntryStatus};
    let priority = match (p.phase.as_str(), p.risk.as_str()) {
        ("todo", _) => PlanEntryPriority::Medium,
        (_, "high") => PlanEntryPriority::High,
        (_, "low") => PlanEntryPriority::Low,
        _ => PlanEntryPriority::Medium,
    };
    let entries = p
        .steps
        .iter()
        .map(|s| {
            let (status, content) = match s.status.as_str() {
                "in_progress" => (PlanEntryStatus::InProgress, s.title.clone()),
                "completed" => (PlanEntryStatus::Completed, s.title.clone()),
                "failed" => (PlanEntryStatus::Completed, format!("{} (failed)", s.title)),
                "skipped" => (PlanEntryStatus::Completed, format!("{} (skipped)", s.title)),
                _ => (PlanEntryStatus::Pending, s.title.clone()),
            };
            PlanEntry::new(content, priority.clone(), status)
        })
        .collect();
    agent_client_protocol::v1::schema::Plan::new(entries)
}

/// The daemon's permission modes as ACP session modes: (id, name, description).
const MODES: [(PermissionMode, &str, &str, &str); 6] = [
    (
        PermissionMode::ReadOnly,
        "read_only",
        "Read only",
        "Tools that change things are not offered; the agent may ask to leave this mode",
    ),
    (
        PermissionMode::Default,
        "default",
        "Default",
        "Read-only tools run; anything else asks unless a rule allows it",
    ),
    (
        PermissionMode::AcceptEdits,
        "accept_edits",
        "Accept edits",
        "Like default, but file edits inside the working directory run without asking",
    ),
    (
        PermissionMode::Plan,
        "plan",
        "Plan",
        "Read only, and the agent is told to plan",
    ),
    (
        PermissionMode::Bypass,
        "bypass",
        "Bypass",
        "Nothing asks (only when agentd runs with --allow-bypass)",
    ),
    (
        PermissionMode::Auto,
        "auto",
        "Auto",
        "Like accept edits, and commands that run inside the OS sandbox do not ask",
    ),
];

/// The ACP mode id of a daemon mode (UNSPECIFIED is the daemon's default).
pub(super) fn mode_id(mode: i32) -> &'static str {
    let mode = PermissionMode::try_from(mode).unwrap_or(PermissionMode::Default);
    MODES
        .iter()
        .find(|(m, ..)| *m == mode)
        .map_or("default", |(_, id, ..)| id)
}

/// The daemon mode an ACP mode id names.
pub(super) fn mode_of(id: &str) -> Option<PermissionMode> {
    MODES.iter().find(|(_, i, ..)| *i == id).map(|(m, ..)| *m)
}

/// The modes a session offers, `current` selected; `bypass` only when the
/// daemon allows it.
pub(super) fn mode_state(current: i32, bypass_allowed: bool) -> SessionModeState {
    let available = MODES
        .iter()
        .filter(|(m, ..)| bypass_allowed || *m != PermissionMode::Bypass)
        .map(|(_, id, name, description)| SessionMode::new(*id, *name).description(*description))
        .collect();
    SessionModeState::new(mode_id(current), available)
}

/// The option id offered for a decision, and back.
const DECISIONS: [(PermissionDecision, &str); 6] = [
    (PermissionDecision::AllowOnce, "allow_once"),
    (PermissionDecision::AllowAlways, "allow_always"),
    (PermissionDecision::Background, "background"),
    (PermissionDecision::Deny, "deny"),
    (PermissionDecision::DenyAndStop, "deny_and_stop"),
    (PermissionDecision::Never, "never"),
];

/// The decision an option id the editor selected stands for, if it is one
/// of those this request offered.
pub(super) fn decision_of(option_id: &str, offered: &[i32]) -> Option<PermissionDecision> {
    DECISIONS
        .iter()
        .find(|(_, id)| *id == option_id)
        .map(|(d, _)| *d)
        .filter(|d| offered.contains(&(*d as i32)))
}

/// A plan approval request's ACP options: approve (carry it out in
/// default mode), approve with accept_edits, reject. ACP has no text to
/// send back, so a rejection carries no feedback (the model is told the
/// user rejected the plan); editing the steps is `agent plan ID edit`.
const PLAN_OPTIONS: [(&str, &str, PermissionOptionKind); 3] = [
    (
        "approve_plan",
        "Approve the plan",
        PermissionOptionKind::AllowOnce,
    ),
    (
        "approve_plan_edits",
        "Approve the plan and accept its edits",
        PermissionOptionKind::AllowAlways,
    ),
    (
        "reject_plan",
        "Reject the plan",
        PermissionOptionKind::RejectOnce,
    ),
];

/// The plan answer an option of a plan approval request stands for.
pub(super) fn plan_answer_of(option_id: &str) -> Option<pb::PlanAnswer> {
    let approve = |mode: PermissionMode| {
        pb::plan_answer::Answer::Approve(pb::PlanApprove { mode: mode as i32 })
    };
    let answer = match option_id {
        "approve_plan" => approve(PermissionMode::Default),
        "approve_plan_edits" => approve(PermissionMode::AcceptEdits),
        "reject_plan" => pb::plan_answer::Answer::Reject(pb::PlanReject {
            feedback: String::new(),
        }),
        _ => return None,
    };
    Some(pb::PlanAnswer {
        answer: Some(answer),
    })
}

/// The daemon's offered decisions as ACP permission options, in the
/// daemon's order. Allow once → allow_once, allow always → allow_always,
/// deny → reject_once, never → reject_always; deny-and-stop is a second
/// reject_once option (ACP has no feedback text, so the turn just stops),
/// background a second allow_once.
pub(super) fn permission_options(request: &pb::PermissionRequest) -> Vec<PermissionOption> {
    if request.plan.is_some() {
        return PLAN_OPTIONS
            .iter()
            .map(|(id, name, kind)| PermissionOption::new(*id, *name, *kind))
            .collect();
    }
    request
        .options
        .iter()
        .filter_map(|o| PermissionDecision::try_from(*o).ok())
        .filter_map(|decision| {
            let id = DECISIONS.iter().find(|(d, _)| *d == decision)?.1;
            let (name, kind) = match decision {
                PermissionDecision::AllowOnce => {
                    ("Allow once".to_string(), PermissionOptionKind::AllowOnce)
                }
                PermissionDecision::AllowAlways if !request.suggested_rule.is_empty() => (
                    format!("Always allow {}", request.suggested_rule),
                    PermissionOptionKind::AllowAlways,
                ),
                PermissionDecision::AllowAlways => (
                    "Always allow".to_string(),
                    PermissionOptionKind::AllowAlways,
                ),
                PermissionDecision::Background => (
                    "Run it in the background".to_string(),
                    PermissionOptionKind::AllowOnce,
                ),
                PermissionDecision::Deny => ("Deny".to_string(), PermissionOptionKind::RejectOnce),
                PermissionDecision::DenyAndStop => (
                    "Deny and stop the turn".to_string(),
                    PermissionOptionKind::RejectOnce,
                ),
                PermissionDecision::Never => (
                    "Never (add a deny rule)".to_string(),
                    PermissionOptionKind::RejectAlways,
                ),
                PermissionDecision::Unspecified | PermissionDecision::Cancelled => return None,
            };
            Some(PermissionOption::new(id, name, kind))
        })
        .collect()
}

/// The daemon's kind of a tool as ACP's, for the editor's icon.
pub(super) fn tool_kind(kind: pb::ToolKind) -> ToolKind {
    match kind {
        pb::ToolKind::Read => ToolKind::Read,
        pb::ToolKind::Edit => ToolKind::Edit,
        pb::ToolKind::Search => ToolKind::Search,
        pb::ToolKind::Execute => ToolKind::Execute,
        pb::ToolKind::Think => ToolKind::Think,
        pb::ToolKind::SwitchMode => ToolKind::SwitchMode,
        pb::ToolKind::Fetch => ToolKind::Fetch,
        pb::ToolKind::Other | pb::ToolKind::Unspecified => ToolKind::Other,
    }
}

/// A tool's input as JSON (`Null` when the model sent something unreadable).
fn input_value(input_json: &str) -> Value {
    serde_json::from_str(input_json).unwrap_or(Value::Null)
}

/// The file a call's input names, resolved against the working directory.
fn input_path(input: &Value, cwd: &Path) -> Option<PathBuf> {
    let path = input
        .get("path")
        .or_else(|| input.get("file_path"))?
        .as_str()?;
    Some(cwd.join(path))
}

/// The file a call reads or changes, named by its input's `path`, for the
/// editor to follow.
pub(super) fn locations(kind: pb::ToolKind, input_json: &str, cwd: &Path) -> Vec<ToolCallLocation> {
    if !matches!(kind, pb::ToolKind::Read | pb::ToolKind::Edit) {
        return Vec::new();
    }
    input_path(&input_value(input_json), cwd)
        .map(ToolCallLocation::new)
        .into_iter()
        .collect()
}

/// The change an edit makes as ACP diffs, from its input: with `content`
/// (`write`) it replaces the file, with `new_string` (`edit`) it replaces
/// `old_string` (the changed part, as other ACP agents show an edit).
/// Other calls, and edits without a `path` (`patch`): none.
pub(super) fn input_diffs(
    kind: pb::ToolKind,
    input_json: &str,
    cwd: &Path,
) -> Vec<ToolCallContent> {
    if kind != pb::ToolKind::Edit {
        return Vec::new();
    }
    let input = input_value(input_json);
    let Some(path) = input_path(&input, cwd) else {
        return Vec::new();
    };
    let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_string);
    let diff = match (text("content"), text("new_string")) {
        (Some(new), _) => Some(Diff::new(path, new)),
        (None, Some(new)) => Some(Diff::new(path, new).old_text(text("old_string"))),
        (None, None) => None,
    };
    diff.map(ToolCallContent::Diff).into_iter().collect()
}

/// Text as tool call content.
pub(super) fn text_content(text: impl Into<String>) -> ToolCallContent {
    ToolCallContent::from(ContentBlock::from(text.into()))
}

/// What the editor is told when another client answered the question it
/// was asked (its question is withdrawn): who, with which role, and the
/// answer. None when nobody answered (the daemon withdrew it: a cancel).
pub(super) fn answered_elsewhere(r: &pb::PermissionResolved) -> Option<String> {
    if r.client_id.is_empty() {
        return None;
    }
    let who = if r.client_name.is_empty() {
        &r.client_id
    } else {
        &r.client_name
    };
    let role = pb::ClientRole::try_from(r.client_role)
        .ok()
        .and_then(|role| role.as_str_name().strip_prefix("CLIENT_ROLE_"))
        .map(str::to_lowercase)
        .unwrap_or_else(|| "client".to_string());
    let answer = pb::PermissionDecision::try_from(r.decision)
        .ok()
        .and_then(|d| d.as_str_name().strip_prefix("PERMISSION_DECISION_"))
        .map(|d| d.to_lowercase().replace('_', " "))
        .unwrap_or_else(|| "answered".to_string());
    Some(format!(
        "\n[permission answered by {who} ({role}): {answer}]\n"
    ))
}

/// A unified diff the daemon made (a patch, a permission preview), shown
/// as a fenced block when no structured diff exists.
pub(super) fn unified_diff_content(diff: &str) -> ToolCallContent {
    text_content(format!("```diff\n{}\n```", diff.trim_end()))
}

/// The call as the editor first sees it (`ToolCallBegin`, or a tool_use of
/// a reply before it starts).
pub(super) fn tool_call(
    id: &str,
    name: &str,
    kind: pb::ToolKind,
    title: &str,
    input_json: &str,
    cwd: &Path,
) -> ToolCall {
    let title = if title.is_empty() { name } else { title };
    ToolCall::new(id.to_string(), title.to_string())
        .kind(tool_kind(kind))
        .raw_input(Some(input_value(input_json)))
        .locations(locations(kind, input_json, cwd))
        .content(input_diffs(kind, input_json, cwd))
}

/// A finished call: status, and what it did (the input's diff, else the
/// daemon's unified diff; the command's output preview).
pub(super) fn tool_call_end(
    end: &pb::ToolCallEnd,
    input_json: Option<&str>,
    cwd: &Path,
) -> ToolCallUpdate {
    let mut content = input_json
        .map(|input| input_diffs(end.kind(), input, cwd))
        .unwrap_or_default();
    if content.is_empty() && !end.diff.is_empty() {
        content.push(unified_diff_content(&end.diff));
    }
    let output = output_preview(end);
    if !output.is_empty() {
        content.push(text_content(format!("```\n{output}\n```")));
    } else if !end.summary.is_empty() {
        content.push(text_content(end.summary.clone()));
    }
    let status = if end.is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    ToolCallUpdate::new(
        end.tool_use_id.clone(),
        ToolCallUpdateFields::new()
            .status(status)
            .content(content)
            .raw_output(Some(serde_json::json!({ "summary": end.summary }))),
    )
}

/// The command's output as `ToolCallEnd` previews it: head, a line saying
/// how many were left out, tail.
fn output_preview(end: &pb::ToolCallEnd) -> String {
    let shown = end.output_head.len() + end.output_tail.len();
    let mut lines: Vec<String> = end.output_head.clone();
    let left_out = usize::try_from(end.output_lines)
        .unwrap_or(usize::MAX)
        .saturating_sub(shown);
    if left_out > 0 {
        lines.push(format!("… {left_out} more lines …"));
    }
    lines.extend(end.output_tail.iter().cloned());
    lines.join("\n")
}

/// Why a turn ended, from the last reply of the transcript and whether
/// anyone cancelled it.
pub(super) fn stop_reason(stop: &str, interrupted: bool, cancelled: bool) -> StopReason {
    if cancelled || interrupted {
        return StopReason::Cancelled;
    }
    match stop {
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "refusal" => StopReason::Refusal,
        _ => StopReason::EndTurn,
    }
}

/// The text of a prompt: text blocks as they are, resource links as their
/// names and URIs (the agent reads files itself). Images, audio and
/// embedded resources are refused: the capabilities say so.
pub(super) fn prompt_text(prompt: &[ContentBlock]) -> Result<String, String> {
    let mut parts = Vec::new();
    for block in prompt {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("@{} ({})", link.name, link.uri))
            }
            ContentBlock::Image(_) => return Err("images are not supported by this agent".into()),
            ContentBlock::Audio(_) => return Err("audio is not supported by this agent".into()),
            _ => {
                return Err(
                    "only text and resource links are supported in prompts (no embedded context)"
                        .into(),
                );
            }
        }
    }
    let text = parts.join("\n");
    if text.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(text)
}

/// A transcript as the updates that show it (`session/load`): user text,
/// the agent's text and thinking, each tool call with its result.
pub(super) fn replay(messages: &[pb::Message], cwd: &Path) -> Vec<SessionUpdate> {
    let mut updates = Vec::new();
    for message in messages {
        let user = message.role == Role::User as i32;
        for block in &message.content {
            match &block.block {
                Some(Block::Text(t)) if !t.text.is_empty() => {
                    let chunk = ContentChunk::new(ContentBlock::from(t.text.clone()));
                    updates.push(if user {
                        SessionUpdate::UserMessageChunk(chunk)
                    } else {
                        SessionUpdate::AgentMessageChunk(chunk)
                    });
                }
                Some(Block::Thinking(t)) if !t.thinking.is_empty() => {
                    updates.push(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                        ContentBlock::from(t.thinking.clone()),
                    )));
                }
                Some(Block::ToolUse(u)) => {
                    updates.push(SessionUpdate::ToolCall(tool_call(
                        &u.id,
                        &u.name,
                        u.kind(),
                        &u.name,
                        &u.input_json,
                        cwd,
                    )));
                }
                Some(Block::ToolResult(r)) => {
                    updates.push(tool_result_update(r));
                }
                Some(Block::Image(i)) => {
                    let line = format!("[image: {}]", agent_cli::render::image_description(i));
                    let chunk = ContentChunk::new(ContentBlock::from(line));
                    updates.push(if user {
                        SessionUpdate::UserMessageChunk(chunk)
                    } else {
                        SessionUpdate::AgentMessageChunk(chunk)
                    });
                }
                // A search the provider ran, as its one line.
                Some(Block::ServerTool(s)) if !s.summary.is_empty() => {
                    updates.push(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                        ContentBlock::from(s.summary.clone()),
                    )));
                }
                Some(Block::Text(_) | Block::Thinking(_) | Block::ServerTool(_)) | None => {}
            }
        }
    }
    updates
}

/// At most `max` bytes of `text` (cut at a character boundary), marked.
pub(super) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… ({} bytes left out)", &text[..end], text.len() - end)
}

/// A call's result as the editor's update of that call: completed or
/// failed, with the start of its text.
pub(super) fn tool_result_update(r: &pb::ToolResultBlock) -> SessionUpdate {
    let status = if r.is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        r.tool_use_id.clone(),
        ToolCallUpdateFields::new()
            .status(status)
            .content(vec![text_content(bounded(&r.content, 4096))]),
    ))
}

/// Unix milliseconds as ISO 8601 UTC (`2026-11-26T06:20:32Z`); the epoch
/// for an instant chrono cannot represent.
pub(super) fn iso8601(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// An MCP server the editor gives a session, as the daemon takes it: stdio
/// and streamable HTTP; SSE (deprecated in MCP) is refused with a reason.
pub(super) fn mcp_server(server: &McpServer) -> Result<pb::McpServer, String> {
    match server {
        McpServer::Stdio(s) => Ok(pb::McpServer {
            name: s.name.clone(),
            command: s.command.display().to_string(),
            args: s.args.clone(),
            env: s
                .env
                .iter()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
            ..Default::default()
        }),
        McpServer::Http(h) => Ok(pb::McpServer {
            name: h.name.clone(),
            url: h.url.clone(),
            headers: h
                .headers
                .iter()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
            ..Default::default()
        }),
        McpServer::Sse(s) => Err(format!(
            "MCP server {:?}: SSE transport is not supported; use streamable HTTP",
            s.name
        )),
        _ => Err("an MCP server of a transport agentd does not know".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_becomes_acp_entries_with_their_statuses() {
        use agent_client_protocol::v1::schema::{PlanEntryPriority, PlanEntryStatus};
        let step = |id: &str, status: &str| pb::PlanStep {
            id: id.into(),
            title: format!("step {id}"),
            kind: "edit".into(),
            status: status.into(),
            ..Default::default()
        };
        let p = pb::Plan {
            risk: "high".into(),
            steps: vec![
                step("1", "completed"),
                step("2", "in_progress"),
                step("3", "failed"),
                step("4", "skipped"),
                step("5", "pending"),
            ],
            ..Default::default()
        };
        let acp = plan(&p);
        let got: Vec<(String, PlanEntryStatus)> = acp
            .entries
            .iter()
            .map(|e| (e.content.clone(), e.status.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("step 1".to_string(), PlanEntryStatus::Completed),
                ("step 2".to_string(), PlanEntryStatus::InProgress),
                ("step 3 (failed)".to_string(), PlanEntryStatus::Completed),
                ("step 4 (skipped)".to_string(), PlanEntryStatus::Completed),
                ("step 5".to_string(), PlanEntryStatus::Pending),
            ]
        );
        assert!(
            acp.entries
                .iter()
                .all(|e| e.priority == PlanEntryPriority::High)
        );
        // The todo list (risk "low" on the wire) is of medium priority.
        let todo = pb::Plan {
            phase: "todo".into(),
            risk: "low".into(),
            ..p
        };
        assert!(
            plan(&todo)
                .entries
                .iter()
                .all(|e| e.priority == PlanEntryPriority::Medium)
        );
    }

    #[test]
    fn modes_round_trip_and_bypass_is_offered_only_when_allowed() {
        for (mode, id, ..) in MODES {
            assert_eq!(mode_id(mode as i32), id);
            assert_eq!(mode_of(id), Some(mode));
        }
        assert_eq!(mode_id(PermissionMode::Unspecified as i32), "default");
        assert_eq!(mode_of("yolo"), None);
        let ids = |state: SessionModeState| -> Vec<String> {
            state
                .available_modes
                .iter()
                .map(|m| m.id.0.to_string())
                .collect()
        };
        let without = mode_state(PermissionMode::Plan as i32, false);
        assert_eq!(without.current_mode_id.0.as_ref(), "plan");
        assert_eq!(
            ids(without),
            ["read_only", "default", "accept_edits", "plan", "auto"]
        );
        assert!(ids(mode_state(0, true)).contains(&"bypass".to_string()));
    }

    #[test]
    fn a_plan_request_offers_approve_approve_edits_and_reject() {
        let request = pb::PermissionRequest {
            tool_name: "propose_plan".into(),
            plan: Some(pb::Plan::default()),
            ..Default::default()
        };
        let options = permission_options(&request);
        let got: Vec<(String, PermissionOptionKind)> = options
            .iter()
            .map(|o| (o.option_id.0.to_string(), o.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("approve_plan".to_string(), PermissionOptionKind::AllowOnce),
                (
                    "approve_plan_edits".to_string(),
                    PermissionOptionKind::AllowAlways
                ),
                ("reject_plan".to_string(), PermissionOptionKind::RejectOnce),
            ]
        );
        let approve = |mode: PermissionMode| {
            Some(pb::PlanAnswer {
                answer: Some(pb::plan_answer::Answer::Approve(pb::PlanApprove {
                    mode: mode as i32,
                })),
            })
        };
        assert_eq!(
            plan_answer_of("approve_plan"),
            approve(PermissionMode::Default)
        );
        assert_eq!(
            plan_answer_of("approve_plan_edits"),
            approve(PermissionMode::AcceptEdits)
        );
        assert!(matches!(
            plan_answer_of("reject_plan").and_then(|a| a.answer),
            Some(pb::plan_answer::Answer::Reject(_))
        ));
        // A permission option is no plan answer, and the other way round.
        assert_eq!(plan_answer_of("allow_once"), None);
        assert_eq!(decision_of("approve_plan", &[]), None);
    }

    #[test]
    fn permission_options_follow_the_daemons_offer() {
        let request = pb::PermissionRequest {
            options: vec![
                PermissionDecision::AllowOnce as i32,
                PermissionDecision::AllowAlways as i32,
                PermissionDecision::Deny as i32,
                PermissionDecision::DenyAndStop as i32,
                PermissionDecision::Never as i32,
            ],
            suggested_rule: "bash(ls:*)".into(),
            ..Default::default()
        };
        let options = permission_options(&request);
        let got: Vec<(String, PermissionOptionKind)> = options
            .iter()
            .map(|o| (o.option_id.0.to_string(), o.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("allow_once".to_string(), PermissionOptionKind::AllowOnce),
                (
                    "allow_always".to_string(),
                    PermissionOptionKind::AllowAlways
                ),
                ("deny".to_string(), PermissionOptionKind::RejectOnce),
                (
                    "deny_and_stop".to_string(),
                    PermissionOptionKind::RejectOnce
                ),
                ("never".to_string(), PermissionOptionKind::RejectAlways),
            ]
        );
        assert_eq!(options[1].name, "Always allow bash(ls:*)");
        assert_eq!(
            decision_of("never", &request.options),
            Some(PermissionDecision::Never)
        );
        // Not offered, or not an option at all: no decision.
        assert_eq!(decision_of("background", &request.options), None);
        assert_eq!(decision_of("whatever", &request.options), None);
    }

    #[test]
    fn edits_become_diffs_with_locations() {
        let cwd = Path::new("/w");
        let call = tool_call(
            "t1",
            "edit",
            pb::ToolKind::Edit,
            "edit src/a.rs",
            r#"{"path":"src/a.rs","old_string":"a","new_string":"b"}"#,
            cwd,
        );
        assert_eq!(call.kind, ToolKind::Edit);
        assert_eq!(call.locations[0].path, Path::new("/w/src/a.rs"));
        let ToolCallContent::Diff(diff) = &call.content[0] else {
            panic!("{:?}", call.content)
        };
        assert_eq!(diff.old_text.as_deref(), Some("a"));
        assert_eq!(diff.new_text, "b");
        // A tool without a path, and input that is not JSON: no diff, no panic.
        assert!(
            tool_call("t2", "bash", pb::ToolKind::Execute, "", "{not json", cwd)
                .content
                .is_empty()
        );
    }

    #[test]
    fn a_finished_command_shows_its_output_and_fails_when_it_failed() {
        let end = pb::ToolCallEnd {
            tool_use_id: "t".into(),
            tool_name: "bash".into(),
            is_error: true,
            output_head: vec!["a".into()],
            output_tail: vec!["z".into()],
            output_lines: 10,
            ..Default::default()
        };
        let update = tool_call_end(&end, None, Path::new("/"));
        assert_eq!(update.fields.status, Some(ToolCallStatus::Failed));
        let content = update.fields.content.unwrap_or_default();
        let text = serde_json::to_string(&content).unwrap_or_default();
        assert!(text.contains("a\\n… 8 more lines …\\nz"), "{text}");
    }

    #[test]
    fn stop_reasons() {
        assert_eq!(stop_reason("end_turn", false, false), StopReason::EndTurn);
        assert_eq!(
            stop_reason("max_tokens", false, false),
            StopReason::MaxTokens
        );
        assert_eq!(stop_reason("refusal", false, false), StopReason::Refusal);
        assert_eq!(stop_reason("end_turn", true, false), StopReason::Cancelled);
        assert_eq!(stop_reason("", false, true), StopReason::Cancelled);
    }

    #[test]
    fn prompts_take_text_and_links_and_refuse_the_rest() {
        let link = agent_client_protocol::v1::schema::ResourceLink::new("a.rs", "file:///w/a.rs");
        let text = prompt_text(&[ContentBlock::from("fix"), ContentBlock::ResourceLink(link)]);
        assert_eq!(text.as_deref(), Ok("fix\n@a.rs (file:///w/a.rs)"));
        assert!(prompt_text(&[ContentBlock::from("  ")]).is_err());
        let image = agent_client_protocol::v1::schema::ImageContent::new("AAAA", "image/png");
        assert_eq!(
            prompt_text(&[ContentBlock::Image(image)]),
            Err("images are not supported by this agent".to_string())
        );
    }

    #[test]
    fn a_transcript_replays_in_order() {
        let text = |t: &str| pb::ContentBlock {
            block: Some(Block::Text(pb::TextBlock { text: t.into() })),
        };
        let messages = vec![
            pb::Message {
                seq: 1,
                role: Role::User as i32,
                content: vec![text("hi")],
                ..Default::default()
            },
            pb::Message {
                seq: 2,
                role: Role::Assistant as i32,
                content: vec![
                    text("let me look"),
                    pb::ContentBlock {
                        block: Some(Block::ToolUse(pb::ToolUseBlock {
                            id: "t1".into(),
                            name: "read".into(),
                            input_json: r#"{"path":"a"}"#.into(),
                            kind: pb::ToolKind::Read as i32,
                        })),
                    },
                ],
                ..Default::default()
            },
            pb::Message {
                seq: 3,
                role: Role::User as i32,
                content: vec![pb::ContentBlock {
                    block: Some(Block::ToolResult(pb::ToolResultBlock {
                        images: Vec::new(),
                        tool_use_id: "t1".into(),
                        content: "x".repeat(5000),
                        is_error: false,
                    })),
                }],
                ..Default::default()
            },
        ];
        let updates = replay(&messages, Path::new("/w"));
        assert!(matches!(updates[0], SessionUpdate::UserMessageChunk(_)));
        assert!(matches!(updates[1], SessionUpdate::AgentMessageChunk(_)));
        assert!(matches!(&updates[2], SessionUpdate::ToolCall(c) if c.kind == ToolKind::Read));
        let SessionUpdate::ToolCallUpdate(result) = &updates[3] else {
            panic!("{updates:?}")
        };
        assert_eq!(result.fields.status, Some(ToolCallStatus::Completed));
        assert_eq!(updates.len(), 4);
    }

    #[test]
    fn times_are_iso8601() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1_795_674_032_000), "2026-11-26T06:20:32Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn bounded_text_is_cut_at_a_character() {
        assert_eq!(bounded("abc", 5), "abc");
        assert_eq!(bounded("ééé", 3), "é\n… (4 bytes left out)");
    }

    #[test]
    fn editor_mcp_servers_become_the_daemons_and_sse_is_refused() {
        use agent_client_protocol::v1::schema::{
            EnvVariable, HttpHeader, McpServerHttp, McpServerSse, McpServerStdio,
        };
        let stdio = McpServer::Stdio(
            McpServerStdio::new("fs", "/usr/bin/fs-server")
                .args(vec!["--root".into(), ".".into()])
                .env(vec![EnvVariable::new("TOKEN", "t")]),
        );
        let s = mcp_server(&stdio).unwrap();
        assert_eq!(
            (s.name.as_str(), s.command.as_str()),
            ("fs", "/usr/bin/fs-server")
        );
        assert_eq!(s.args, ["--root", "."]);
        assert_eq!(s.env.get("TOKEN").map(String::as_str), Some("t"));
        assert!(s.url.is_empty());
        let http = McpServer::Http(
            McpServerHttp::new("gh", "https://mcp.example/mcp")
                .headers(vec![HttpHeader::new("Authorization", "Bearer x")]),
        );
        let h = mcp_server(&http).unwrap();
        assert_eq!(h.url, "https://mcp.example/mcp");
        assert_eq!(
            h.headers.get("Authorization").map(String::as_str),
            Some("Bearer x")
        );
        assert!(h.command.is_empty());
        let sse = McpServer::Sse(McpServerSse::new("old", "https://x/sse"));
        assert!(mcp_server(&sse).unwrap_err().contains("SSE"));
    }
}
