//! Export and import: conversations streamed out with their messages and
//! images, and read back under what an import may grant.

use super::{BoxStream, Service, caller, frame_status, validate_dir};
use crate::grpc::access::{self, Caller};
use crate::grpc::admission::{self, Grants, Source};
use crate::grpc::convert::{self, to_status};
use agent_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Holds an imported record to what an import may grant (see
/// `admission`): its directories are checked as a create's are (and
/// made canonical), a refused directory refuses the import, and every
/// other refused grant is taken away; returns what was taken, one line
/// each, for the reply.
fn imported_grants(
    svc: &Service,
    who: &Caller,
    record: &mut crate::store::ConversationRecord,
) -> Result<Vec<String>, Status> {
    let id = record.id.clone();
    let in_record = |status: Status| {
        Status::new(
            status.code(),
            format!("conversation {id}: {}", status.message()),
        )
    };
    record.cwd = validate_dir(&record.cwd.to_string_lossy(), "cwd").map_err(in_record)?;
    record.setup.additional_dirs = record
        .setup
        .additional_dirs
        .iter()
        .map(|d| validate_dir(&d.to_string_lossy(), "additional directory"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(in_record)?;
    let source = Source::import(who);
    let server_names: Vec<String> = record
        .setup
        .mcp_servers
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let mut dirs = vec![(record.cwd.as_path(), "cwd")];
    dirs.extend(
        record
            .setup
            .additional_dirs
            .iter()
            .map(|d| (d.as_path(), "additional directory")),
    );
    let grants = Grants {
        mode: Some(record.conversation.mode),
        allow_rules: &record.setup.allow_rules,
        mcp_servers: &server_names,
        dirs: &dirs,
        // Export never writes a conversation's environment, and import
        // never sets one.
        environment: false,
    };
    let refused = admission::refusals(source, &svc.roots_for(source), &grants);
    let mut notices = Vec::new();
    for refusal in refused {
        let what = refusal.describe(source);
        match refusal {
            admission::Refusal::Dir { .. } => {
                return Err(Status::permission_denied(format!(
                    "conversation {id}: {what}"
                )));
            }
            admission::Refusal::Mode(_) => {
                record.conversation.mode = agentd_core::Mode::Default;
                notices.push(format!(
                    "conversation {id}: {what}; its mode is now default"
                ));
            }
            admission::Refusal::AllowRules(_) => {
                record.setup.allow_rules.clear();
                notices.push(format!("conversation {id}: {what}; they were dropped"));
            }
            admission::Refusal::McpServers(_) => {
                record.setup.mcp_servers.clear();
                notices.push(format!("conversation {id}: {what}; they were dropped"));
            }
            // Asked for by no import (see `environment` above).
            admission::Refusal::Environment => {}
        }
    }
    Ok(notices)
}

pub(super) async fn export_conversations(
    svc: &Service,
    request: Request<pb::ExportConversationsRequest>,
) -> Result<Response<BoxStream<pb::ExportedConversation>>, Status> {
    let session = caller(&request)?.session;
    let req = request.into_inner();
    let ids: Vec<String> = if req.conversation_ids.is_empty() {
        svc.manager.ids().map_err(to_status)?
    } else {
        req.conversation_ids
            .iter()
            .map(|p| svc.manager.resolve(p))
            .collect::<Result<_, _>>()
            .map_err(to_status)?
    };
    let manager = svc.manager.clone();
    let max_attempts = svc.max_attempts();
    let (tx, rx) = mpsc::channel(16);
    crate::tasks::spawn("conversation transfer", async move {
        for id in ids {
            if let Err(status) = access::session_check(session.as_ref()) {
                let _ = tx.send(Err(status)).await;
                break;
            }
            let item = manager.record(&id).and_then(|r| {
                let messages = manager.messages(&r)?;
                let images = manager.images_of(messages.iter().map(|(_, m)| m))?;
                Ok(pb::ExportedConversation {
                    images: images
                        .into_iter()
                        .map(|(image, data)| pb::ImageBlock {
                            data,
                            ..convert::image(&image)
                        })
                        .collect(),
                    conversation: Some(convert::summary(
                        &r,
                        max_attempts,
                        0,
                        &manager.shared().config.models.pricing(&r),
                    )),
                    messages: messages
                        .iter()
                        .map(|(s, m)| convert::message(*s, m))
                        .collect(),
                })
            });
            if tx.send(item.map_err(to_status)).await.is_err() {
                break;
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

pub(super) async fn import_conversations(
    svc: &Service,
    request: Request<Streaming<pb::ExportedConversation>>,
) -> Result<Response<pb::ImportConversationsResponse>, Status> {
    let who = caller(&request)?;
    let session = who.session.clone();
    let mut inbound = request.into_inner();
    let mut imported = 0;
    let mut skipped_ids = Vec::new();
    let mut notices = Vec::new();
    let mut read = 0usize;
    loop {
        read += 1;
        let item = match inbound.message().await {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(status) => {
                let status = frame_status(
                    status,
                    &format!("conversation {read} of the import ({imported} before it imported)"),
                );
                tracing::warn!("import stream: {}", status.message());
                return Err(status);
            }
        };
        access::session_check(session.as_ref())?;
        let (mut record, messages) = convert::exported_from(&item)?;
        notices.extend(imported_grants(svc, &who, &mut record)?);
        let images = convert::exported_images(&item)?;
        let id = record.id.clone();
        if svc
            .manager
            .import(record, messages, images)
            .await
            .map_err(to_status)?
        {
            imported += 1;
        } else {
            skipped_ids.push(id);
        }
    }
    Ok(Response::new(pb::ImportConversationsResponse {
        imported,
        skipped_ids,
        notices,
    }))
}
