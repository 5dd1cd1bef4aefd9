//! `agent run`: create a conversation with a prompt and stream it until
//! the turn ends.

use std::io::Write;

use agent_proto::v1 as pb;

use super::{Ctx, client_name, out_err, request_id, retrying};
use super::{absolute_dir, mcp_server_arg, read_images};
use crate::cli::RunArgs;
use crate::error::{CliError, Exit};
use crate::io::Io;
use crate::session::{SessionConfig, SessionKind, run_session};

pub(super) async fn run(ctx: &Ctx, args: RunArgs, io: &mut Io) -> Result<Exit, CliError> {
    let cwd = match args.cwd {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|e| CliError::io("current directory", e))?,
    };
    let cwd = absolute_dir(&cwd, "working directory")?;
    let additional_dirs = args
        .new
        .add_dirs
        .iter()
        .map(|d| absolute_dir(d, "directory"))
        .collect::<Result<Vec<_>, _>>()?;
    let mcp_servers = args
        .mcp
        .iter()
        .map(|a| mcp_server_arg(a))
        .collect::<Result<Vec<_>, _>>()?;
    let prompt = args.prompt.join(" ");
    if prompt.trim().is_empty() {
        return Err(CliError::Input("the prompt is empty".to_string()));
    }
    let images = read_images(&args.image)?;
    let thinking = args.new.think.choice().map_err(CliError::Input)?;
    let request = pb::CreateConversationRequest {
        thinking,
        images,
        mcp_servers,
        cwd,
        model: args.new.model.unwrap_or_default(),
        prompt: prompt.clone(),
        mode: args.new.mode.map_or(0, |m| m.to_proto() as i32),
        allow_rules: args.new.allow,
        additional_dirs,
        client_request_id: request_id(),
        environment: crate::environment::here(),
    };
    let on_terminal = io.tty && !ctx.json && !args.yes;
    let mut config = SessionConfig {
        kind: SessionKind::Run,
        conversation_id: String::new(),
        socket: ctx.socket.clone(),
        yes: args.yes,
        json: ctx.json,
        client_name: client_name(),
        view_only: false,
        sent_prompt: Some(prompt),
        create: None,
    };
    if !on_terminal {
        // Created on the Attach stream itself: the daemon subscribes this
        // client before the first turn starts, with no round trip between
        // creating and attaching (issue 20). The session says which
        // conversation it is once the snapshot names it.
        config.create = Some(request);
        return run_session(ctx.client().await?, config, io).await;
    }
    let conversation = create_conversation(ctx, request).await?;
    let client = ctx.client().await?;
    // One write: stderr is unbuffered, and `writeln!` would make three.
    io.err
        .write_all(format!("conversation {}\n", conversation.id).as_bytes())
        .and_then(|()| io.err.flush())
        .map_err(out_err)?;
    config.conversation_id = conversation.id;
    crate::repl::on_terminal(client, config, io).await
}

/// Creates a conversation (with its first message), retried once if the
/// connection broke before the answer.
pub(crate) async fn create_conversation(
    ctx: &Ctx,
    request: pb::CreateConversationRequest,
) -> Result<pb::ConversationSummary, CliError> {
    let created = retrying(ctx, |mut client| {
        let request = request.clone();
        async move { client.create_conversation(request).await }
    })
    .await?
    .map_err(CliError::status)?;
    created
        .conversation
        .ok_or_else(|| CliError::Server("the daemon returned no conversation".to_string()))
}
