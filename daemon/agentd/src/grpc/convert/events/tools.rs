//! Tool events: calls and their output, the permissions they ask for,
//! the hooks that ran around them and the background shells they start.

use crate::grpc::convert::{decision, permission, role, shell, tool_kind};
use crate::runtime::EventKind;
use agent_proto::v1 as pb;
use pb::attach_response::Event as E;

/// A tool event as it goes on the wire (routed here by
/// [`super::wire_event`]).
pub(super) fn event(kind: &EventKind) -> E {
    match kind {
        EventKind::ToolCallBegin {
            tool_use_id,
            name,
            summary,
            input_json,
        } => E::ToolCallBegin(pb::ToolCallBegin {
            tool_use_id: tool_use_id.clone(),
            tool_name: name.clone(),
            kind: tool_kind(name),
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
                kind: tool_kind(name),
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
        EventKind::HookRan(r) => E::HookRan(pb::HookRan {
            stage: r.stage.as_str().to_string(),
            command: r.command.clone(),
            decision: r.decision.clone(),
            duration_ms: r.duration_ms,
            error: r.error.clone().unwrap_or_default(),
        }),
        EventKind::ShellStarted(r) => E::ShellStarted(pb::ShellStarted {
            shell: Some(shell(r)),
        }),
        EventKind::ShellExited(r) => E::ShellExited(pb::ShellExited {
            shell: Some(shell(r)),
        }),
        other => super::misrouted(other),
    }
}
