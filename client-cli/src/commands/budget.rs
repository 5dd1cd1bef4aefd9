//! `agent budget`: raise a reached budget or stop the turn.

use agent_proto::v1 as pb;

use super::{Ctx, client_name, print_json, print_line};
use crate::cli::BudgetCommand;
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::json as js;

/// `agent budget raise|stop`.
pub(super) async fn budget(
    ctx: &Ctx,
    command: BudgetCommand,
    io: &mut Io,
) -> Result<Exit, CliError> {
    let (id, raise, raise_by) = match command {
        BudgetCommand::Raise { id, by, .. } => (id, true, by),
        BudgetCommand::Stop { id, .. } => (id, false, None),
    };
    let c = ctx
        .client()
        .await?
        .answer_budget(pb::AnswerBudgetRequest {
            conversation_id: id.clone(),
            raise,
            raise_by,
            client_name: client_name(),
        })
        .await
        .map_err(|s| CliError::conversation_status(s, &id))?
        .into_inner()
        .conversation
        .unwrap_or_default();
    if ctx.json {
        print_json(io, &js::conversation_summary(&c))?;
    } else if let Some(stop) = &c.budget_stop {
        print_line(
            io,
            &format!("raised, but the budget is still reached: {}", stop.text),
        )?;
    } else if raise {
        print_line(io, &format!("raised; {} goes on", c.id))?;
    } else {
        print_line(io, &format!("{} stopped at the budget", c.id))?;
    }
    Ok(Exit::Ok)
}
