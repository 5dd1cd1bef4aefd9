//! `agent send`: a user message for a conversation.

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Ctx, print_json, print_line, request_id, retrying};
use crate::cli::SendArgs;
use crate::error::{CliError, Exit};
use crate::io::Io;

/// `agent send`: the message with its images and thinking.
pub(super) async fn send(ctx: &Ctx, args: SendArgs, io: &mut Io) -> Result<Exit, CliError> {
    let SendArgs {
        id,
        no_queue,
        image,
        think,
        model,
        text,
        ..
    } = args;
    let text = text.join(" ");
    let images = super::read_images(&image)?;
    let thinking = think.choice().map_err(CliError::Input)?;
    let queue_if_busy = !no_queue;
    if text.trim().is_empty() {
        return Err(CliError::Input("the message is empty".to_string()));
    }
    if let Some(model) = model {
        // The switch first: a model the conversation does not fit any more
        // is refused, and then the message is not sent either.
        let request = pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            model,
            client_name: super::client_name(),
            ..Default::default()
        };
        super::set::update(ctx, &id, request).await?;
    }
    let request = pb::SendMessageRequest {
        conversation_id: id.clone(),
        text,
        client_request_id: request_id(),
        expected_turn: None,
        queue_if_busy,
        images,
        thinking,
    };
    let response = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.send_message(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &id))?;
    if ctx.json {
        print_json(
            io,
            &json!({
                "conversation_id": response.conversation_id,
                "message_seq": response.message_seq,
                "queued_id": response.queued_id,
            }),
        )?;
    } else if !response.queued_id.is_empty() {
        print_line(
            io,
            &format!(
                "queued in {} as {}: the agent reads it at its next step \
                 (`agent queue {} --drop {}` takes it back)",
                response.conversation_id,
                response.queued_id,
                response.conversation_id,
                response.queued_id
            ),
        )?;
    } else {
        print_line(
            io,
            &format!(
                "sent to {} (message {})",
                response.conversation_id, response.message_seq
            ),
        )?;
    }
    Ok(Exit::Ok)
}
