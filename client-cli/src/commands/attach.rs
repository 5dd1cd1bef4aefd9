//! `agent attach`: join a live conversation.

use super::{Ctx, client_name};
use crate::cli::AttachArgs;
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::session::{SessionConfig, SessionKind, run_session};

pub(super) async fn attach(ctx: &Ctx, args: AttachArgs, io: &mut Io) -> Result<Exit, CliError> {
    let client = ctx.client().await?;
    let config = SessionConfig {
        kind: SessionKind::Attach,
        conversation_id: args.id,
        socket: ctx.socket.clone(),
        yes: args.yes,
        json: ctx.json,
        client_name: client_name(),
        view_only: args.view_only,
        sent_prompt: None,
        create: None,
    };
    if io.tty && !ctx.json && !config.yes {
        return crate::repl::on_terminal(client, config, io).await;
    }
    run_session(client, config, io).await
}
