//! `agent cancel`: stop the turn in flight.

use agent_proto::v1 as pb;
use serde_json::json;

use super::{Ctx, print_json, print_line, request_id, retrying};
use crate::error::{CliError, Exit};
use crate::io::Io;

pub(super) async fn cancel(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    let request = pb::CancelConversationRequest {
        conversation_id: id.clone(),
        client_request_id: request_id(),
    };
    let response = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.cancel_conversation(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &id))?;
    if ctx.json {
        print_json(io, &json!({"was_busy": response.was_busy}))?;
    } else if response.was_busy {
        print_line(io, "cancelled")?;
    } else {
        print_line(io, "nothing to cancel: the agent is idle")?;
    }
    Ok(Exit::Ok)
}
