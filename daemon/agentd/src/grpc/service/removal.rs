//! Putting conversations away: delete, archive, rename (see
//! `runtime/delete.rs`).

use super::Service;
use crate::grpc::convert::to_status;
use crate::runtime::{Label, title};
use agent_proto::v1 as pb;
use tonic::{Request, Response, Status};

pub(super) async fn delete_conversation(
    svc: &Service,
    request: Request<pb::DeleteConversationRequest>,
) -> Result<Response<pb::DeleteConversationResponse>, Status> {
    let req = request.into_inner();
    let id = svc
        .manager
        .resolve(&req.conversation_id)
        .map_err(to_status)?;
    let deleted = svc
        .manager
        .delete(&id, req.force)
        .await
        .map_err(to_status)?;
    tracing::info!(conversation = %id, sub_agents = deleted.sub_agents.len(), "deleted");
    Ok(Response::new(pb::DeleteConversationResponse {
        conversation_id: deleted.id,
        sub_agents: deleted.sub_agents,
        messages: deleted.messages,
        shells_killed: u32::try_from(deleted.shells_killed).unwrap_or(u32::MAX),
        stopped: deleted.stopped,
    }))
}

pub(super) async fn archive_conversation(
    svc: &Service,
    request: Request<pb::ArchiveConversationRequest>,
) -> Result<Response<pb::ArchiveConversationResponse>, Status> {
    let req = request.into_inner();
    let label = Label {
        archived: Some(req.archived),
        ..Label::default()
    };
    let conversation = labelled(svc, &req.conversation_id, label).await?;
    Ok(Response::new(pb::ArchiveConversationResponse {
        conversation: Some(conversation),
    }))
}

pub(super) async fn rename_conversation(
    svc: &Service,
    request: Request<pb::RenameConversationRequest>,
) -> Result<Response<pb::RenameConversationResponse>, Status> {
    let req = request.into_inner();
    let label = Label {
        title: Some(title(&req.title).map_err(to_status)?),
        ..Label::default()
    };
    let conversation = labelled(svc, &req.conversation_id, label).await?;
    Ok(Response::new(pb::RenameConversationResponse {
        conversation: Some(conversation),
    }))
}

/// Applies `label` to the conversation `prefix` names; its summary after.
async fn labelled(
    svc: &Service,
    prefix: &str,
    label: Label,
) -> Result<pb::ConversationSummary, Status> {
    let id = svc.manager.resolve(prefix).map_err(to_status)?;
    let record = svc.manager.label(&id, label).await.map_err(to_status)?;
    Ok(svc.summary(&record))
}
