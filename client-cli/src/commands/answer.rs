//! `agent answer`: a pending permission request answered from a script.

use agent_proto::v1 as pb;

use super::{Ctx, client_name, print_json, print_line, request_id, retrying};
use crate::cli::AnswerArgs;
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;

pub(super) async fn answer(ctx: &Ctx, args: AnswerArgs, io: &mut Io) -> Result<Exit, CliError> {
    let scope = if args.always_project {
        pb::RuleScope::Project
    } else {
        pb::RuleScope::Unspecified
    };
    let request = pb::AnswerPermissionRequest {
        conversation_id: args.id.clone(),
        request_id: String::new(),
        decision: args.decision.to_proto() as i32,
        feedback: args.feedback.unwrap_or_default(),
        client_name: client_name(),
        scope: scope as i32,
        client_request_id: request_id(),
        plan_answer: None,
    };
    retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.answer_permission(request).await }
    })
    .await?
    .map_err(|s| CliError::conversation_status(s, &args.id))?;
    if ctx.json {
        print_json(
            io,
            &js::answer(args.decision.to_proto() as i32, scope as i32),
        )?;
    } else {
        print_line(io, &format!("answered: {}", args.decision.label()))?;
    }
    Ok(Exit::Ok)
}
