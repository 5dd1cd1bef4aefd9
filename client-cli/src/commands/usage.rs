//! `agent usage`: tokens and cost.

use agent_proto::v1 as pb;

use super::{Ctx, out_err, print_json};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;
use crate::render::usage_table;

pub(super) async fn usage(
    ctx: &Ctx,
    days: u32,
    conversation: Option<String>,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let id = conversation.unwrap_or_default();
    let report = ctx
        .client()
        .await?
        .get_usage(pb::GetUsageRequest {
            conversation_id: id.clone(),
            days,
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    if ctx.json {
        print_json(io, &js::usage_report(&report))?;
    } else {
        usage_table(&mut io.out, &report).map_err(out_err)?;
    }
    Ok(Exit::Ok)
}
