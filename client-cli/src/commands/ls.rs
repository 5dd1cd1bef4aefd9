//! `agent ls`: the conversations, newest first.

use std::io::Write;

use agent_proto::v1 as pb;
use serde_json::Value;

use super::{Ctx, now_ms, out_err, print_json};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;
use crate::render::conversation_tree;

/// `limit` 0 lists every conversation.
/// `archived`: the archived conversations instead of the others.
pub(super) async fn ls(
    ctx: &Ctx,
    limit: u32,
    flat: bool,
    archived: bool,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let response = ctx
        .client()
        .await?
        .list_conversations(pb::ListConversationsRequest {
            limit,
            before_id: String::new(),
            archived,
        })
        .await
        .map_err(CliError::status)?
        .into_inner();
    for notice in &response.notices {
        writeln!(io.err, "agentd: {notice}").map_err(out_err)?;
    }
    if ctx.json {
        let list: Vec<Value> = response
            .conversations
            .iter()
            .map(js::conversation_summary)
            .collect();
        print_json(io, &Value::Array(list))?;
    } else {
        if flat {
            crate::render::conversation_table(&mut io.out, &response.conversations, now_ms(), false)
        } else {
            conversation_tree(&mut io.out, &response.conversations, now_ms(), false)
        }
        .and_then(|()| io.out.flush())
        .map_err(out_err)?;
    }
    if !response.next_before_id.is_empty() {
        writeln!(
            io.err,
            "(the newest {} shown; `agent ls --all` lists every conversation)",
            response.conversations.len()
        )
        .map_err(out_err)?;
    }
    Ok(Exit::Ok)
}
