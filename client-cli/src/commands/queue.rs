//! `agent queue`: the messages waiting for the next model request.

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Ctx, conversation, print_json, print_line, retrying};
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent queue`: what waits for the turn, or drops some of it.
pub(super) async fn queue(
    ctx: &Ctx,
    id: String,
    drop: Option<String>,
    drop_all: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let queued = if drop.is_some() || drop_all {
        let request = pb::DropQueuedMessageRequest {
            conversation_id: id.clone(),
            queued_id: drop.unwrap_or_default(),
        };
        retrying(ctx, |mut client| {
            let request = request.clone();
            async move { client.drop_queued_message(request).await }
        })
        .await?
        .map_err(|s| CliError::conversation_status(s, &id))?
        .queued
    } else {
        conversation(ctx, &id)
            .await?
            .conversation
            .map(|c| c.queued)
            .unwrap_or_default()
    };
    if ctx.json {
        let items: Vec<_> = queued.iter().map(crate::json::queued_message).collect();
        print_json(io, &json!({ "queued": items }))?;
    } else if queued.is_empty() {
        print_line(io, "nothing is queued")?;
    } else {
        for q in &queued {
            let from = q
                .from
                .as_ref()
                .map(|c| format!(" (from {})", c.name))
                .unwrap_or_default();
            print_line(io, &format!("{}{from}: {}", q.id, q.text))?;
        }
    }
    Ok(Exit::Ok)
}
