//! A permission request asked of the editor (`session/request_permission`)
//! and answered to the daemon with its choice. Separate because the question
//! races every other client: it is withdrawn when someone else answers.

use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    PermissionOptionId, RequestPermissionOutcome, RequestPermissionRequest, SessionNotification,
    SessionUpdate, ToolCall, ToolCallStatus, ToolCallUpdate,
};
use agent_proto::v1::{self as pb, PermissionDecision};

use super::bridge::Bridge;
use super::live::Live;
use super::{EditorLink, lock, map};
use agent_cli::request_id;

/// Asks the editor about a permission request and answers the daemon with
/// its choice. Withdrawn (the SDK's request cancellation) when another
/// client answers first or the turn is cancelled.
pub(super) async fn ask_permission(
    bridge: Arc<Bridge>,
    live: Arc<Live>,
    cx: EditorLink,
    request: pb::PermissionRequest,
) {
    let id = request.request_id.clone();
    let Some(call) = announce(&live, &cx, &request) else {
        return;
    };
    let Some(selected) = ask_editor(&live, &cx, &request, call).await else {
        return;
    };
    // A plan approval request is answered with a plan answer, any other
    // with a decision it offered.
    let (decision, plan_answer) = if request.plan.is_some() {
        (
            PermissionDecision::Unspecified,
            map::plan_answer_of(&selected.0),
        )
    } else {
        (
            map::decision_of(&selected.0, &request.options)
                .unwrap_or(PermissionDecision::Unspecified),
            None,
        )
    };
    if decision == PermissionDecision::Unspecified && plan_answer.is_none() {
        eprintln!(
            "agent acp: permission request {id}: the editor chose {:?}, which was not offered",
            selected.0
        );
        return;
    }
    {
        let mut shared = lock(&live.shared);
        if shared.resolved.contains(&id) {
            return;
        }
        shared.answered_here.insert(id.clone());
    }
    answer_daemon(&bridge, &live, &id, decision, plan_answer).await;
}

/// The call the request is about, told to the editor if it was not yet;
/// None when the request was resolved or asked already.
fn announce(live: &Live, cx: &EditorLink, request: &pb::PermissionRequest) -> Option<ToolCall> {
    let id = &request.request_id;
    let (announce, cwd) = {
        let mut shared = lock(&live.shared);
        if shared.resolved.contains(id) || shared.asked.contains_key(id) {
            return None;
        }
        let announce = shared.announced.insert(request.tool_use_id.clone());
        shared
            .inputs
            .entry(request.tool_use_id.clone())
            .or_insert_with(|| request.input_json.clone());
        (announce, shared.cwd.clone())
    };
    let call = map::tool_call(
        &request.tool_use_id,
        &request.tool_name,
        request.kind(),
        &request.summary,
        &request.input_json,
        &cwd,
    )
    .status(ToolCallStatus::Pending);
    if announce {
        let note = SessionNotification::new(live.id.clone(), SessionUpdate::ToolCall(call.clone()));
        if let Err(e) = cx.send_notification(note) {
            eprintln!("agent acp: cannot send a session update: {}", e.message);
        }
    }
    Some(call)
}

/// Sends the question (the call, its diff and the reason) and waits for
/// the option the editor chose; None when it was withdrawn or failed.
async fn ask_editor(
    live: &Live,
    cx: &EditorLink,
    request: &pb::PermissionRequest,
    call: ToolCall,
) -> Option<PermissionOptionId> {
    let id = request.request_id.clone();
    let mut update: ToolCallUpdate = call.into();
    let mut content = update.fields.content.take().unwrap_or_default();
    if content.is_empty() && !request.diff.is_empty() {
        content.push(map::unified_diff_content(&request.diff));
    }
    if !request.reason.is_empty() {
        content.push(map::text_content(format!(
            "Asking because: {}",
            request.reason
        )));
    }
    update.fields.content = Some(content);
    let sent = cx.send_request(RequestPermissionRequest::new(
        live.id.clone(),
        update,
        map::permission_options(request),
    ));
    {
        let handle = sent.cancellation_handle();
        let mut shared = lock(&live.shared);
        if shared.resolved.contains(&id) {
            let _ = handle.cancel();
        } else {
            shared.asked.insert(id.clone(), handle);
        }
    }
    let outcome = sent.block_task().await;
    lock(&live.shared).asked.remove(&id);
    match outcome {
        Ok(response) => match response.outcome {
            RequestPermissionOutcome::Selected(selected) => Some(selected.option_id),
            // Cancelled: the editor withdrew (after session/cancel, or ours).
            _ => None,
        },
        Err(e) => {
            eprintln!("agent acp: permission request {id}: {}", e.message);
            None
        }
    }
}

/// Gives the daemon the editor's answer; a refusal is only logged.
async fn answer_daemon(
    bridge: &Bridge,
    live: &Live,
    id: &str,
    decision: PermissionDecision,
    plan_answer: Option<pb::PlanAnswer>,
) {
    let answered = match bridge.client().await {
        Ok(mut client) => client
            .answer_permission(pb::AnswerPermissionRequest {
                conversation_id: live.id.clone(),
                request_id: id.to_string(),
                decision: decision as i32,
                client_name: bridge.name.clone(),
                client_request_id: request_id(),
                plan_answer,
                ..Default::default()
            })
            .await
            .map(|_| ())
            .map_err(|s| s.message().to_string()),
        Err(e) => Err(e.message),
    };
    if let Err(why) = answered {
        // Most often another client answered first; the daemon says so.
        eprintln!("agent acp: answer to {id} refused: {why}");
    }
}
