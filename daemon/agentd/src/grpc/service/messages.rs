//! What clients send into a conversation over unary calls: messages,
//! cancellations, permission and budget answers, dropped queued messages.
//! (The Attach stream's frames carry the same in `attach.rs`.)

use super::{Service, answerer, caller, check_text};
use crate::grpc::convert::{self, to_status};
use agent_proto::v1 as pb;
use tonic::{Request, Response, Status};

pub(super) async fn send_message(
    svc: &Service,
    request: Request<pb::SendMessageRequest>,
) -> Result<Response<pb::SendMessageResponse>, Status> {
    let from = caller(&request)?.client(String::new(), "", None);
    let req = request.into_inner();
    check_text(svc.limits(), "message text", &req.text)?;
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let images = convert::uploads(&svc.manager.shared().config.images.limits(), req.images)?;
    let message = crate::runtime::NewMessage {
        text: req.text,
        images,
        client_request_id: convert::client_request_id_from(req.client_request_id)?,
        expected_turn: req.expected_turn,
        queue_if_busy: req.queue_if_busy,
        from: None,
        by: Some(from),
        thinking: convert::thinking_from(req.thinking.as_ref())?,
    };
    let sent = svc
        .manager
        .send_message(&id, message)
        .await
        .map_err(to_status)?;
    Ok(Response::new(pb::SendMessageResponse {
        message_seq: sent.message_seq(),
        conversation_id: id,
        queued_id: match sent {
            crate::runtime::Sent::Queued(q) => q,
            crate::runtime::Sent::Appended(_) => String::new(),
        },
    }))
}

pub(super) async fn drop_queued_message(
    svc: &Service,
    request: Request<pb::DropQueuedMessageRequest>,
) -> Result<Response<pb::DropQueuedMessageResponse>, Status> {
    let req = request.into_inner();
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let queued = svc
        .manager
        .drop_queued(&id, req.queued_id)
        .await
        .map_err(to_status)?;
    Ok(Response::new(pb::DropQueuedMessageResponse {
        queued: convert::queued(&queued),
    }))
}

pub(super) async fn cancel_conversation(
    svc: &Service,
    request: Request<pb::CancelConversationRequest>,
) -> Result<Response<pb::CancelConversationResponse>, Status> {
    let req = request.into_inner();
    let client_request_id = convert::client_request_id_from(req.client_request_id)?;
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let was_busy = svc
        .manager
        .cancel_request(&id, client_request_id)
        .await
        .map_err(to_status)?;
    Ok(Response::new(pb::CancelConversationResponse { was_busy }))
}

pub(super) async fn answer_permission(
    svc: &Service,
    request: Request<pb::AnswerPermissionRequest>,
) -> Result<Response<pb::AnswerPermissionResponse>, Status> {
    let who = caller(&request)?;
    let req = request.into_inner();
    check_text(svc.limits(), "feedback", &req.feedback)?;
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let client = svc
        .manager
        .numbered(answerer(&who, req.client_name, "agent answer"));
    let answer = convert::answer_from(
        req.request_id,
        req.decision,
        req.feedback,
        req.scope,
        client,
        req.client_request_id,
        req.plan_answer,
    )?;
    svc.manager.answer(&id, answer).await.map_err(to_status)?;
    Ok(Response::new(pb::AnswerPermissionResponse {}))
}

pub(super) async fn answer_budget(
    svc: &Service,
    request: Request<pb::AnswerBudgetRequest>,
) -> Result<Response<pb::AnswerBudgetResponse>, Status> {
    let who = caller(&request)?;
    let req = request.into_inner();
    check_text(svc.limits(), "client name", &req.client_name)?;
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let answer = crate::runtime::BudgetAnswer {
        raise: req.raise,
        raise_by: req.raise_by,
        by: Some(
            svc.manager
                .numbered(answerer(&who, req.client_name, "agent budget")),
        ),
    };
    let record = svc
        .manager
        .answer_budget(&id, answer)
        .await
        .map_err(to_status)?;
    Ok(Response::new(pb::AnswerBudgetResponse {
        conversation: Some(svc.summary(&record)),
    }))
}
