//! `agent show`: a conversation's transcript, instructions or checkpoints.

use agent_proto::v1 as pb;
use serde_json::{Value, json};

use super::{Ctx, conversation, out_err, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;
use crate::render::Renderer;

pub(super) async fn show(
    ctx: &Ctx,
    id: String,
    context: bool,
    full: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .get_conversation(pb::GetConversationRequest {
            conversation_id: id.clone(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    let (color, width, truecolor) = (io.color, io.width, io.truecolor);
    match (ctx.json, context) {
        (true, false) => print_json(io, &js::get_conversation_response(&response))?,
        (true, true) => print_json(
            io,
            &js::instructions(&response.instructions.unwrap_or_default()),
        )?,
        (false, false) => Renderer::new(&mut io.out, color)
            .with_screen(width, truecolor)
            .with_full_output(full)
            .transcript(&response)
            .map_err(out_err)?,
        (false, true) => Renderer::new(&mut io.out, color)
            .instructions(&response.instructions.unwrap_or_default())
            .map_err(out_err)?,
    }
    Ok(Exit::Ok)
}

/// `agent show --checkpoints`: the turns that can be rewound.
pub(super) async fn show_checkpoints(ctx: &Ctx, id: String, io: &mut Io) -> Result<Exit, CliError> {
    let response = conversation(ctx, &id).await?;
    if ctx.json {
        let turns: Vec<Value> = response
            .checkpoints
            .iter()
            .map(js::checkpoint_turn)
            .collect();
        print_json(io, &json!({ "checkpoints": turns }))?;
    } else {
        for line in crate::render::checkpoint_lines(&response.checkpoints) {
            print_line(io, &line)?;
        }
    }
    Ok(Exit::Ok)
}
