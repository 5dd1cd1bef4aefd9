//! `agent rewind`: back to the start of a turn, in files, transcript or both.

use agent_proto::v1 as pb;

use super::{Ctx, print_json, print_line};
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;

/// What `agent rewind` asks for: the code unless only `--conversation`.
pub(super) fn request(
    id: String,
    to: Option<u64>,
    conversation: bool,
    both: bool,
    force: bool,
) -> pb::RewindRequest {
    pb::RewindRequest {
        conversation_id: id,
        message_seq: to.unwrap_or(0),
        code: both || !conversation,
        conversation: both || conversation,
        force,
    }
}

/// `agent rewind`.
pub(super) async fn rewind(
    ctx: &Ctx,
    request: pb::RewindRequest,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let id = request.conversation_id.clone();
    let response = ctx
        .client()
        .await?
        .rewind(request)
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner();
    if ctx.json {
        print_json(io, &js::rewind_response(&response))?;
        return Ok(Exit::Ok);
    }
    for line in rewind_lines(&response) {
        print_line(io, &line)?;
    }
    Ok(Exit::Ok)
}

/// What `Rewind` did, for people.
pub(crate) fn rewind_lines(r: &pb::RewindResponse) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(code) = &r.code {
        lines.extend(crate::render::code_rewound_lines(code));
    }
    if let Some(f) = &r.forked {
        lines.push(format!(
            "forked as {} (its transcript ends before message {}); `agent attach {}` goes on there",
            f.id, r.message_seq, f.id
        ));
    }
    lines
}
