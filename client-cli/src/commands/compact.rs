//! `agent compact` and `agent continue`: summarise a conversation now,
//! and go on from an exhausted one in a new conversation.

use agent_proto::v1 as pb;

use super::{Ctx, print_json, print_line, retrying};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;

/// `agent compact`: asks for the continuation summary now.
pub(super) async fn compact(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .compact_conversation(pb::CompactConversationRequest {
            conversation_id: id.clone(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    answer(ctx, io, response.conversation, |c| {
        format!(
            "compacting {}: the model writes a continuation summary; then `agent continue {}`",
            c.id, c.id
        )
    })
}

/// `agent continue`: the exhausted conversation goes on in a new one.
pub(super) async fn continue_conversation(
    ctx: &Ctx,
    id: String,
    model: Option<String>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    // Asked again, the daemon answers with the same new conversation, so a
    // retry after a broken connection is safe.
    let request = pb::ContinueConversationRequest {
        conversation_id: id.clone(),
        model: model.unwrap_or_default(),
    };
    let response = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.continue_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &id))?;
    answer(ctx, io, response.conversation, |c| {
        format!("continued {} as {}", c.parent_conversation_id, c.id)
    })
}

/// Prints the conversation the daemon answered with: its JSON summary, or
/// the line `text` writes about it.
pub(super) fn answer(
    ctx: &Ctx,
    io: &mut Io,
    conversation: Option<pb::ConversationSummary>,
    text: impl FnOnce(&pb::ConversationSummary) -> String,
) -> Result<Exit, CliError> {
    let c = conversation.unwrap_or_default();
    if ctx.json {
        print_json(io, &js::conversation_summary(&c))?;
    } else {
        print_line(io, &text(&c))?;
    }
    Ok(Exit::Ok)
}
